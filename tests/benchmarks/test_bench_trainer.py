"""benchmarks/bench_trainer.py's pairs run on one OpenMP runtime (the benchmark itself is run by hand)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_trainer  # noqa: E402

from verl_ext.cpu import openmp


@pytest.mark.parametrize("switch", ["0", "1", None])
def test_verl_variants_get_the_preload_verl_ext_applies(monkeypatch, switch):
    """verl_ext's entry point preloads Intel's OpenMP only with VERL_EXT_CPU_IOMP=1; verl's entry point never does,
    so the benchmark passes verl's runs the same LD_PRELOAD then, and nothing otherwise."""
    if switch is None:
        monkeypatch.delenv(openmp.SWITCH, raising=False)
    else:
        monkeypatch.setenv(openmp.SWITCH, switch)
    expected = [f"++ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD={openmp.library()}"] if switch == "1" else []
    assert bench_trainer.same_openmp_runtime() == expected


def test_every_verl_ext_variant_is_paired_with_verl_s_own():
    for name, spec in bench_trainer.VARIANTS.items():
        if spec["entry"] == "verl_ext.main_ppo":
            base = bench_trainer.VARIANTS[spec["baseline"]]
            assert base["entry"] == "verl.trainer.main_ppo" and base["loss"] == spec["loss"], name
