"""benchmarks/bench_trainer.py's pairs run on one OpenMP runtime (the benchmark itself is run by hand)."""

from __future__ import annotations

import pytest

from benchmarks import bench_trainer
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


def test_round_ratios_pair_the_runs_of_each_round():
    """A machine that is slow for one round slows both runs of it: the median of the per-round ratios stays at the
    pair's true ratio (1.01 here) where the ratio of the variants' medians does not."""
    def run(update: float) -> dict:
        return {"step_s": 3.0, "train_s": 1.0, "update_actor_s": update, "peak_rss_gb": 1.0, "selection_s": 0.0,
                "fetch_store_s": 0.0, "adv_s": 0.05, "fields_s": 0.0, "update_adv_s": update + 0.05}  # fmt: skip

    verl = [0.60, 0.80, 0.61]  # round 2: a slow machine for both runs
    ours = [0.606, 0.808, 0.80]  # round 3: verl_ext's run alone slow
    table = bench_trainer.summarise({"verl clip_cov": [run(u) for u in verl],
                                     "verl_ext clip_cov": [run(u) for u in ours]})  # fmt: skip
    row = table["verl_ext clip_cov"]
    assert row["update_ratio_rounds"] == pytest.approx(1.01)
    assert row["update_ratio"] == pytest.approx(0.80 / 0.61)
    assert row["update_adv_ratio_rounds"] == pytest.approx(0.858 / 0.85)
