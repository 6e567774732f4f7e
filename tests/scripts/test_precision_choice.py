"""CPU mode's precision is the command's choice, not the CPU's: one command composes to one precision on a CPU with
bf16 instructions and on one without, bf16 is refused (at config time, naming the key) only where it cannot run, and
the start-up line reports what the probe measured on this CPU, suggesting the other precision where it is faster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from recipe_pins import compose_script

from verl_ext.checks.validation import ConfigError, check_platform
from verl_ext.cpu import precision, precision_probe

BF16_CPU = {"avx512f", "avx512_bf16"}
PLAIN_CPU = {"avx2", "avx512f"}


def composed_on(flags: set[str], tmp_path: Path, *args: str) -> dict:
    """``SCALE=cpu MODEL=smollm2 bash recipe/gsm8k_grpo_erc.sh ARGS`` composed as on a CPU with ``flags``."""
    config = compose_script("gsm8k_grpo_erc", {"SCALE": "cpu", "MODEL": "smollm2"}, tmp_path, args,
                            cpu_flags=tuple(sorted(flags)))
    return {key: OmegaConf.select(config, key) for key in (*precision.KEYS, precision.KEY)}


def test_one_command_composes_to_one_precision_on_both_cpus(tmp_path):
    (tmp_path / "home").mkdir()
    on_bf16, on_plain = composed_on(BF16_CPU, tmp_path), composed_on(PLAIN_CPU, tmp_path)
    assert on_bf16 == on_plain
    assert on_plain[precision.KEY] == precision.DEFAULT == "fp32"
    assert on_plain["actor_rollout_ref.rollout.dtype"] == "float32"
    chosen = composed_on(PLAIN_CPU, tmp_path, "verl_ext.cpu_precision=bf16")
    assert chosen == composed_on(BF16_CPU, tmp_path, "verl_ext.cpu_precision=bf16")
    assert chosen["actor_rollout_ref.rollout.dtype"] == "bfloat16"


def test_bf16_is_refused_where_it_cannot_run_and_auto_is_gone(monkeypatch):
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    monkeypatch.setattr(precision, "cpu_flags", lambda *_: set(PLAIN_CPU))
    config = OmegaConf.create({"verl_ext": {"cpu_precision": "bf16"}, "trainer": {"device": "cpu"}})
    with pytest.raises(ConfigError) as info:
        check_platform(config)
    assert info.value.key == "verl_ext.cpu_precision" and "none of amx_bf16, avx512_bf16, bf16" in info.value.message
    assert precision.choose("bf16", BF16_CPU).precision == "bf16"
    with pytest.raises(precision.PrecisionError, match="verl_ext.cpu_precision='auto' is invalid: allowed bf16 or fp32"):
        precision.choose("auto", BF16_CPU)
    with pytest.raises(precision.PrecisionError, match="allowed bf16 or fp32"):
        precision.dtype("torch", "auto")


def test_the_probe_measures_once_per_machine_and_the_line_reports_it(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"hidden_size": 32, "intermediate_size": 64}))
    cache = tmp_path / "cache" / "probe.json"
    calls = []
    real = precision_probe.measure
    monkeypatch.setattr(precision_probe, "measure", lambda shape, dtype, **kw: calls.append((shape, dtype)) or real(shape, dtype, 2))
    first = precision_probe.probe(model, flags=BF16_CPU, cache=cache)
    assert calls == [((512, 32, 64), "float32"), ((512, 32, 64), "bfloat16")] and not first.cached
    assert first.fp32_gflops > 0 and first.bf16_gflops > 0
    again = precision_probe.probe(model, flags=BF16_CPU, cache=cache)
    assert len(calls) == 2 and again.cached and again.fp32_gflops == pytest.approx(first.fp32_gflops)
    plain = precision_probe.probe(model, flags=PLAIN_CPU, cache=cache)  # another machine: its own entry, no bf16
    assert plain.bf16_gflops is None and calls[-1] == ((512, 32, 64), "float32")
    config = OmegaConf.create({"verl_ext": {"cpu_precision": "fp32"}, "actor_rollout_ref": {"rollout": {"dtype": "float32"},
                               "actor": {"fsdp_config": {"mixed_precision": {"param_dtype": "fp32"}}},
                               "ref": {"fsdp_config": {"mixed_precision": {"param_dtype": "fp32"}}}}})  # fmt: skip
    line = precision.startup_line(config, speed=first)
    assert line.startswith("verl_ext: CPU mode runs in fp32 everywhere") and "x fp32's speed" in line
    assert "512x32 @ 32x64" in line


@pytest.mark.parametrize(("fp32", "bf16", "current", "suggested"), [
    (100.0, 200.0, "fp32", "verl_ext.cpu_precision=bf16 would be faster"),
    (100.0, 110.0, "fp32", None),
    (300.0, 170.0, "bf16", "verl_ext.cpu_precision=fp32 would be faster"),
    (300.0, 170.0, "fp32", None),
])  # fmt: skip
def test_the_other_precision_is_suggested_only_when_clearly_faster(fp32, bf16, current, suggested):
    text = precision_probe.Speed("a CPU", (512, 8, 8), fp32, bf16).describe(current)
    assert f"{bf16 / fp32:.2f}x fp32's speed" in text
    if suggested:
        assert text.endswith(suggested) or suggested in text
    else:
        assert "would be faster" not in text


def test_the_shape_comes_from_the_model_config(tmp_path):
    assert precision_probe.model_shape("Qwen/Qwen2.5-7B") == precision_probe.DEFAULT_SHAPE
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 3584, "intermediate_size": 18944}))
    assert precision_probe.model_shape(tmp_path) == (3584, 18944)
