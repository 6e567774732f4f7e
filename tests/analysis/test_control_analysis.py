"""``verl_ext.analyze`` on runs of the entropy autopilot and on token-lens files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from verl_ext.analysis.cli import main


def autopilot_run(path: Path, steps: int = 20) -> list[dict]:
    """A verl FileLogger JSONL of an autopilot run: target 2.0, entropy approaching it, ratio rising to a bound."""
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
    rows = autopilot_run(tmp_path / "run.jsonl")
    out_png = tmp_path / "a.png"
    assert main([str(tmp_path / "run.jsonl"), "--out", str(out_png)]) == 0
    printed = capsys.readouterr().out
    late = rows[10:]
    expected = sum(abs(r["entropy_control/entropy"] - 2.0) / 2.0 for r in late) / len(late)
    saturated = sum(r["entropy_control/saturated"] for r in late) / len(late)
    assert f"mean |H - H*| / H* = {expected:.1%}" in printed
    assert f"final actuator value 0.1, on a bound in {saturated:.0%} of the steps" in printed
    assert out_png.stat().st_size > 10_000


def test_lens_summary_next_to_the_run(tmp_path, capsys):
    autopilot_run(tmp_path / "run.jsonl")
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
    autopilot_run(tmp_path / "run.jsonl")
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
