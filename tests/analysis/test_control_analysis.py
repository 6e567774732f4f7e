"""``verl_ext.analyze`` on runs of the entropy control and on token-lens files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from verl_ext.analysis.cli import main


def controlled_run(path: Path, steps: int = 20) -> list[dict]:
    """A verl FileLogger JSONL of an entropy-controlled run: target 2.0, entropy approaching it, ratio rising to a bound."""
    rows = []
    with path.open("w") as handle:
        for step in range(1, steps + 1):
            entropy = 2.0 + math.exp(-step / 3)
            reward = 1.0 - math.exp(entropy) / 10
            data = {"actor/entropy": entropy, "critic/score/mean": reward, "entropy_control/target": 2.0,
                    "entropy_control/entropy": entropy, "entropy_control/ratio": min(0.01 * step, 0.1),
                    "entropy_control/saturated": float(0.01 * step >= 0.1)}  # fmt: skip
            rows.append(data)
            handle.write(json.dumps({"step": step, "data": data}) + "\n")
    return rows


def test_tracking_error_over_the_second_half_and_the_ratio_panel(tmp_path, capsys):
    rows = controlled_run(tmp_path / "run.jsonl")
    out_png = tmp_path / "a.png"
    assert main([str(tmp_path / "run.jsonl"), "--out", str(out_png)]) == 0
    printed = capsys.readouterr().out
    late = rows[10:]
    expected = sum(abs(r["entropy_control/entropy"] - 2.0) / 2.0 for r in late) / len(late)
    saturated = sum(r["entropy_control/saturated"] for r in late) / len(late)
    assert f"mean |H - H*| / H* = {expected:.1%}" in printed
    geo = math.exp(sum(math.log(r["entropy_control/entropy"] / 2.0) for r in late) / len(late))
    blocks = [math.exp(sum(math.log(r["entropy_control/entropy"] / 2.0) for r in late[i:i + 5]) / 5) for i in (0, 5)]
    assert f"bias |geomean(H / H*) - 1| = {geo - 1:.1%}" in printed
    assert f"gap on 5-step blocks = {sum(b - 1 for b in blocks) / 2:.1%}" in printed
    assert f"final actuator value 0.1, on a bound in {saturated:.0%} of the steps" in printed
    assert out_png.stat().st_size > 10_000


def test_lens_summary_next_to_the_run(tmp_path, capsys):
    controlled_run(tmp_path / "run.jsonl")
    rows = [("7", 1.0, 0.5, 2.0), ("7", 3.0, 0.7, 4.0), (":", -1.0, 0.2, 1.5)]
    with (tmp_path / "run.lens.jsonl").open("w") as handle:
        for token, adv, prob, cov in rows:
            handle.write(json.dumps({"token": token, "advantage": adv, "prob": prob, "covariance": cov}) + "\n")
    assert main([str(tmp_path / "run.jsonl"), "--no-plot"]) == 0
    printed = capsys.readouterr().out
    assert "3 selected tokens" in printed
    lines = [line for line in printed.splitlines() if line.strip().startswith(("'7'", "':'"))]
    assert lines[0].split() == ["'7'", "2", "66.7%", "2.000", "0.600", "3.000"]
    assert lines[1].split() == ["':'", "1", "33.3%", "-1.000", "0.200", "1.500"]


def test_a_broken_lens_file_is_an_input_error(tmp_path, capsys):
    controlled_run(tmp_path / "run.jsonl")
    (tmp_path / "bad.lens.jsonl").write_text('{"token": "7"}\n')
    assert main([str(tmp_path / "run.jsonl"), "--no-plot", "--lens", str(tmp_path / "bad.lens.jsonl")]) == 2
    assert "bad.lens.jsonl:1: not a token-lens row" in capsys.readouterr().err


def test_relative_gap_is_the_mean_absolute_relative_distance_to_the_target():
    from verl_ext.analysis.control import relative_gap

    # by hand: |0.15 - 0.3| / 0.3 = 0.5, |0.6 - 0.3| / 0.3 = 1, |2 - 1| / 1 = 1, |1 - 1| / 1 = 0
    assert relative_gap([0.15, 0.6], 0.3) == pytest.approx(0.75)
    assert relative_gap([2.0, 1.0], [1.0, 1.0]) == pytest.approx(0.5)
    assert relative_gap([0.15, 2.0], [0.3, 1.0]) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="no steps"):
        relative_gap([], 0.3)


def test_log_gap_is_the_mean_absolute_log_distance_to_each_steps_target():
    from verl_ext.analysis.control import log_gap

    # by hand: |log(0.15 / 0.3)| = |log(0.6 / 0.3)| = log 2 (a factor below counts as the same factor above)
    assert log_gap([0.15, 0.6], 0.3) == pytest.approx(math.log(2.0), rel=1e-12)
    # one target per step (a schedule): |log(1 / 2)| = log 2, |log(1.5 / 1.5)| = 0, |log(3 / 1)| = log 3
    assert log_gap([1.0, 1.5, 3.0], [2.0, 1.5, 1.0]) == pytest.approx((math.log(2.0) + math.log(3.0)) / 3, rel=1e-12)
    with pytest.raises(ValueError, match="must be > 0"):
        log_gap([0.0, 1.0], 1.0)


def test_bias_is_the_geometric_mean_ratio_to_the_target():
    from verl_ext.analysis.control import bias

    # by hand: sqrt(0.15 * 0.6) = 0.3 -> 0 (noise symmetric in log H cancels); sqrt(0.25 * 0.64) = 0.4 -> |0.8 - 1|
    assert bias([0.15, 0.6], 0.3) == pytest.approx(0.0, abs=1e-12)
    assert bias([0.25, 0.64], 0.5) == pytest.approx(0.2)
    assert bias([0.6, 0.6], 0.3) == pytest.approx(1.0)
    assert bias([0.3, 2.0], [0.6, 1.0]) == pytest.approx(0.0, abs=1e-12)  # per-step targets: sqrt(0.5 * 2) = 1
    from verl_ext.analysis.control import relative_gap

    assert relative_gap([0.15, 0.6], 0.3) == pytest.approx(0.75)  # the per-step gap of the same steps: its floor
    with pytest.raises(ValueError, match="no steps"):
        bias([], 0.3)


def test_block_gap_is_the_mean_over_5_step_blocks_of_each_blocks_geometric_mean_gap():
    from verl_ext.analysis.control import block_gap

    # block 1: five steps at 0.6 -> |2 - 1| = 1; block 2: 0.15 0.6 0.15 0.6 0.3 -> (0.09^2 0.3)^(1/5) = 0.3 -> 0
    steps = [0.6] * 5 + [0.15, 0.6, 0.15, 0.6, 0.3]
    assert block_gap(steps, 0.3) == pytest.approx(0.5)
    assert block_gap(steps + [3.0, 3.0], 0.3) == pytest.approx(0.5)  # a last block shorter than 5 is left out
    assert block_gap([0.2, 0.8], 0.4, block=2) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="make no block of 5"):
        block_gap([0.3] * 4, 0.3)


def test_bound_share_counts_the_steps_on_either_bound():
    from verl_ext.analysis.control import bound_share

    assert bound_share([0.0, 0.0025, 0.005, 0.005], 0.0, 0.005) == pytest.approx(0.75)
    assert bound_share([0.1, 0.2], 0.0, 1.0) == 0.0


def test_the_noise_sigma_is_the_negative_lag1_autocovariance_of_the_log_differences():
    from verl_ext.analysis.control import log_noise_sigma

    # log H = 0, a, 0, a, 0: differences a, -a, a, -a (mean 0); acov_1 = 3 (-a^2) / 4, so sigma = a sqrt(3/4)
    a = 0.2
    assert log_noise_sigma([1.0, math.exp(a), 1.0, math.exp(a), 1.0]) == pytest.approx(a * math.sqrt(0.75))
    assert log_noise_sigma([math.exp(-0.1 * t) for t in range(10)]) == 0.0  # a steady drift is not noise


def test_the_gap_noise_floor_is_the_per_step_gap_of_an_entropy_held_on_target():
    """E|exp(v) - 1| for v ~ N(0, sigma^2), checked by quadrature; ~0.42 at the real model's sigma 0.49."""
    import numpy as np

    from verl_ext.analysis.control import gap_noise_floor

    assert gap_noise_floor(0.0) == 0.0
    for sigma in (0.004, 0.1, 0.49, 1.0):
        v = np.linspace(-12 * sigma, 12 * sigma, 200_001)
        density = np.exp(-v**2 / (2 * sigma**2)) / (sigma * math.sqrt(2 * math.pi))
        quadrature = float(np.sum(np.abs(np.exp(v) - 1) * density) * (v[1] - v[0]))
        assert gap_noise_floor(sigma) == pytest.approx(quadrature, rel=1e-6), sigma
    assert gap_noise_floor(0.004) == pytest.approx(0.004 * math.sqrt(2 / math.pi), rel=1e-3)
    assert 0.42 < gap_noise_floor(0.49) < 0.43


# ----------------------------------------------------------------------------------------------------------
# a scheduled target: every tracking figure compares each step with its own target
# ----------------------------------------------------------------------------------------------------------


def scheduled_run(path: Path, steps: int = 20) -> list[dict]:
    """An entropy-controlled run whose target moves linearly from 2.0 to 1.0 and whose entropy sits 10 % above each step's
    target. Against the constant first target 2.0 it would look far off."""
    rows = []
    with path.open("w") as handle:
        for step in range(1, steps + 1):
            target = 2.0 - (step - 1) / (steps - 1)
            data = {"actor/entropy": 1.1 * target, "critic/score/mean": 0.5, "entropy_control/target": target,
                    "entropy_control/entropy": 1.1 * target, "entropy_control/value": 0.3,
                    "entropy_control/saturated": 0.0}  # fmt: skip
            rows.append(data)
            handle.write(json.dumps({"step": step, "data": data}) + "\n")
    return rows


def test_tracking_on_a_scheduled_target_uses_each_steps_target(tmp_path):
    """Entropy 10 % above a moving target at every step: bias, block gap and per-step gap are 10 %. Compared with a
    constant target (the schedule's start, 2.0), the same run would show ~35 % and a bias below 1: the test fails if
    a summary uses one target for every step."""
    from verl_ext.analysis.control import tracking
    from verl_ext.analysis.run_reader import read_runs

    rows = scheduled_run(tmp_path / "run.jsonl")
    (run,) = read_runs(str(tmp_path / "run.jsonl"))
    record = tracking(run)
    assert record.bias == pytest.approx(0.1, rel=1e-9)
    assert record.block_gap == pytest.approx(0.1, rel=1e-9)
    assert record.mean_abs_rel_error == pytest.approx(0.1, rel=1e-9)
    constant = sum(abs(r["entropy_control/entropy"] - 2.0) / 2.0 for r in rows[10:]) / 10
    assert constant > 0.3  # what a constant target would report


def test_tracking_aligns_by_step_and_skips_steps_without_a_target(tmp_path):
    """A first step logged with no target (null: target_unit=initial before its anchor) is not counted, and the
    others are compared step by step (not by position in two series of different lengths)."""
    from verl_ext.analysis.control import tracking
    from verl_ext.analysis.run_reader import read_runs

    path = tmp_path / "run.jsonl"
    with path.open("w") as handle:
        handle.write(json.dumps({"step": 1, "data": {"entropy_control/target": None, "entropy_control/entropy": 5.0,
                                                     "entropy_control/value": 0.28}}) + "\n")  # fmt: skip
        for step in range(2, 12):
            data = {"entropy_control/target": float(step), "entropy_control/entropy": 1.1 * step,
                    "entropy_control/value": 0.3}  # fmt: skip
            handle.write(json.dumps({"step": step, "data": data}) + "\n")
    (run,) = read_runs(str(path))
    record = tracking(run)
    assert record.steps == 5 and record.bias == pytest.approx(0.1, rel=1e-9)


def test_logged_targets_reads_each_steps_target_or_the_constant_of_an_uncontrolled_run():
    from verl_ext.analysis.control import logged_targets

    controlled = {s: {"entropy_control/target": 0.1 * s} for s in range(1, 6)}
    assert logged_targets(controlled, [3, 4, 5], 0.3).tolist() == pytest.approx([0.3, 0.4, 0.5])
    assert logged_targets({s: {"actor/entropy": 1.0} for s in range(1, 6)}, [4, 5], 0.3).tolist() == [0.3, 0.3]
    controlled[4] = {"entropy_control/target": None}
    with pytest.raises(ValueError, match=r"steps \[4\]"):
        logged_targets(controlled, [3, 4, 5], 0.3)
