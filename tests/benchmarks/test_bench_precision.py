"""benchmarks/bench_precision.py's arithmetic: per launch the median over steps 2..N, per variant the median over
rounds, ratios to the first variant, the update's rate from 8 N T."""

from __future__ import annotations

import pytest

from benchmarks import bench_precision as bp


def _rows(step_times):
    return [{"timing_s/step": t, "timing_s/gen": 1.0, "timing_s/old_log_prob": 0.5, "timing_s/update_actor": t / 2,
             "timing_s/update_weights": 0.1, "perf/total_num_tokens": 1000, "actor/entropy": 0.3,
             "training/rollout_probs_diff_mean": 1e-3, "training/rollout_probs_diff_max": 1e-2} for t in step_times]  # fmt: skip


def test_a_launch_drops_its_first_step():
    fig = bp.launch_figures(_rows([100.0, 10.0, 12.0, 11.0]), wall=60.0)
    assert fig["step"] == 11.0 and fig["update_actor"] == 5.5 and fig["steps"] == 4 and fig["wall_s"] == 60.0


def test_summary_takes_medians_over_rounds_and_ratios_to_the_first_variant():
    launches = []
    for variant, steps in (("fp32", (20.0, 22.0, 30.0)), ("bf16", (10.0, 12.0, 11.0))):
        for r, t in enumerate(steps):
            launches.append({"case": "smollm2", "round": r, "precision": variant,
                             **bp.launch_figures(_rows([99.0, t]), wall=t * 10)})  # fmt: skip
    summary = {row["precision"]: row for row in bp.summarise(launches, {"fp32": 200.0, "bf16": 900.0})}
    assert summary["fp32"]["step"] == 22.0 and summary["bf16"]["step"] == 11.0
    assert summary["bf16"]["ratio"]["step"] == pytest.approx(0.5) and summary["fp32"]["ratio"]["step"] == 1.0
    assert summary["bf16"]["update_gflops"] == pytest.approx(8 * bp.SMOLLM2_PARAMS * 1000 / 5.5 / 1e9)
    assert summary["bf16"]["peak_gflops"] == 900.0 and summary["bf16"]["rounds"] == 3
    assert "| smollm2 | bf16 | 3 | 11.00 (0.50) |" in bp.table({"summary": list(summary.values())})


def test_the_course_averages_five_step_blocks():
    from benchmarks import precision_course as pc

    rows = [{"step": s, "actor/entropy": float(s)} for s in range(1, 11)]
    assert pc.blocks(rows, "actor/entropy", steps=10) == [3.0, 8.0]
    rows[0][pc.GREEDY], rows[-1][pc.GREEDY] = 0.5, 0.75
    assert pc.greedy(rows) == (0.5, 0.75)
