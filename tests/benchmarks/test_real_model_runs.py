"""``benchmarks/real_model_runs.py``: the real model's 40-step runs side by side, from their kept logs and the
evaluation CSV."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from benchmarks import real_model_runs as rmr


def test_gap_is_the_mean_relative_distance_to_the_target_over_the_steps_asked():
    entropy = {1: 0.3, 2: 0.6, 3: 0.15, 4: 0.0}
    # by hand: |0.15 - 0.3| / 0.3 = 0.5, |0 - 0.3| / 0.3 = 1
    assert rmr.gap(entropy, 3, 4, target=0.3) == pytest.approx(0.75)
    assert rmr.gap(entropy, 1, 2, target=0.3) == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r"steps \[5\]"):
        rmr.gap(entropy, 3, 5, target=0.3)


def _write(
    tmp_path: Path,
    entropies: list[float],
    greedy: tuple[float, float],
    last: int = 40,
    cut: list[tuple[float, float]] | None = None,
) -> Path:
    log = tmp_path / "run.jsonl"
    cut = cut or [(0.0, 20)] * last  # (verl's clip_ratio, the step's longest response)
    rows = [{"step": 0, "data": {rmr.GREEDY: greedy[0]}}]
    rows += [
        {"step": s, "data": {"actor/entropy": entropies[s - 1], rmr.CUT: cut[s - 1][0], rmr.LONGEST: cut[s - 1][1]}}
        for s in range(1, last + 1)
    ]
    rows[-1]["data"][rmr.GREEDY] = greedy[1]
    log.write_text("".join(json.dumps(r) + "\n" for r in reversed(rows)))  # any order: read by step
    with (tmp_path / "eval.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "step", "data_source", "n", "prompts", "metric", "mean", "ci_low", "ci_high"])
        for metric, mean in (("avg@32", 0.5), ("pass@32", 0.75), ("maj@32", 0.625), ("pass@2", 0.6)):
            w.writerow(["a run, step 40", 40, "openai/gsm8k", 32, 64, metric, mean, 0.0, 1.0])
    return log


def test_a_configurations_runs_are_named_by_their_seeds():
    assert rmr.runs_label(["0"]) == "seed 0"
    assert rmr.runs_label(["1", "0", "2"]) == "seeds 0, 1, 2"
    assert rmr.runs_label(["0", "0 (repeat)", "1"]) == "seed 0 twice, seed 1"


def test_correlation_of_entropy_kept_and_scores_is_pearsons_r():
    # by hand: x = (0.1, 0.2, 0.3), y = (0.9, 0.7, 0.8): deviations (-1, 0, 1) x 0.1 and (1, -1, 0) x 0.1,
    # r = sum(dx dy) / sqrt(sum dx^2 sum dy^2) = -1 / sqrt(2 x 2) = -0.5; a score rising with x gives r = 1
    runs = [{"entropy_second_half": x, "avg@32": y, "pass@32": x, "maj@32": 1 - x}
            for x, y in ((0.1, 0.9), (0.2, 0.7), (0.3, 0.8))]
    got = rmr.correlations(runs)
    assert got["avg@32"] == pytest.approx(-0.5)
    assert got["pass@32"] == pytest.approx(1.0)
    assert got["maj@32"] == pytest.approx(-1.0)
    for run, cut in zip(runs, (0.5, 0.1, 0.3)):
        run["cut_second_half"] = cut
    # by hand: cut deviations (2, -2, 0) x 0.1 against (-1, 0, 1): r = -2 / sqrt(2 x 8) = -0.5
    assert rmr.correlations(runs, ("cut_second_half",)) == {"cut_second_half": pytest.approx(-0.5)}
    for run, gap in zip(runs, (0.2, 0.4, 0.6)):  # gap deviations (-1, 0, 1) x 0.2: against avg@32 as x was, r = -0.5
        run["gap"] = gap
    assert rmr.correlations(runs, ("avg@32",), against="gap") == {"avg@32": pytest.approx(-0.5)}
    # cut deviations (2, -2, 0) x 0.1 against avg@32's (1, -1, 0) x 0.1: r = 4 / sqrt(8 x 2) = 1
    assert rmr.correlations(runs, ("avg@32",), against="cut_second_half") == {"avg@32": pytest.approx(1.0)}


def test_one_runs_figures_come_from_its_log_and_its_evaluation_rows(tmp_path):
    entropies = [0.4] * 5 + [0.2] * 15 + [0.6] * 15 + [0.1] * 5  # steps 1-5, 6-20, 21-35, 36-40
    # steps 1-20 do not count; in 31-40 the longest answer (15 tokens) is below the 64-token limit: nothing was cut
    cut = [(0.9, 64)] * 20 + [(0.25, 64)] * 10 + [(0.5, 15)] * 10
    _write(tmp_path, entropies, greedy=(0.75, 0.8125), cut=cut)
    run = rmr.RealRun("cfg", "0", "run.jsonl", "a run, step 40")
    got = rmr.figures(run, rmr.evaluation(tmp_path / "eval.csv"), root=tmp_path)
    # steps 21-40: fifteen at |0.6 - 0.3| / 0.3 = 1, five at |0.1 - 0.3| / 0.3 = 2/3
    assert got["gap"] == pytest.approx((15 * 1.0 + 5 * 2 / 3) / 20)
    assert got["entropy_first5"] == pytest.approx(0.4)
    assert got["entropy_second_half"] == pytest.approx((15 * 0.6 + 5 * 0.1) / 20)
    assert got["entropy_last5"] == pytest.approx(0.1)
    assert got["cut_second_half"] == pytest.approx(10 * 0.25 / 20)
    assert (got["greedy_before"], got["greedy_after"]) == (0.75, 0.8125)
    assert (got["avg@32"], got["pass@32"], got["maj@32"]) == (0.5, 0.75, 0.625)


def test_a_run_that_is_not_in_the_evaluation_or_stopped_early_is_an_error(tmp_path):
    _write(tmp_path, [0.3] * 39, greedy=(0.75, 0.75), last=39)
    evals = rmr.evaluation(tmp_path / "eval.csv")
    with pytest.raises(ValueError, match="last step 39, expected 40"):
        rmr.figures(rmr.RealRun("cfg", "0", "run.jsonl", "a run, step 40"), evals, root=tmp_path)
    _write(tmp_path, [0.3] * 40, greedy=(0.75, 0.75))
    with pytest.raises(ValueError, match="'another run' is not a run of the evaluation CSV"):
        rmr.figures(rmr.RealRun("cfg", "0", "run.jsonl", "another run"), evals, root=tmp_path)
    log = tmp_path / "run.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    for row in rows:
        if row["step"] == 30:
            del row["data"][rmr.CUT]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"neither verl_ext/response_length/clip_ratio nor response_length/clip_ratio "
                                         r"and response_length/max at steps \[30\]"):
        rmr.figures(rmr.RealRun("cfg", "0", "run.jsonl", "a run, step 40"), evals, root=tmp_path)


def test_a_log_with_verl_exts_own_cut_ratio_is_read_by_that_key(tmp_path):
    """Logs written after verl_ext moved its corrected ratio to its own key: that key is the share cut, read as logged;
    verl's key there is verl's (the share as long as the step's longest answer) and is not used."""
    assert rmr.CUT_CORRECTED == "verl_ext/response_length/clip_ratio"
    # every step: verl's 0.5 (half the answers as long as the longest, 64 tokens), verl_ext's 0.125 (its own count)
    log = _write(tmp_path, [0.3] * 40, greedy=(0.75, 0.75), cut=[(0.5, 64)] * 40)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    for row in rows:
        if row["step"] > 0:
            row["data"][rmr.CUT_CORRECTED] = 0.125
            if row["step"] == 30:  # a step with verl_ext's key alone is complete
                del row["data"][rmr.CUT], row["data"][rmr.LONGEST]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = rmr.figures(rmr.RealRun("cfg", "0", "run.jsonl", "a run, step 40"), rmr.evaluation(tmp_path / "eval.csv"),
                      root=tmp_path)  # fmt: skip
    assert got["cut_second_half"] == pytest.approx(0.125)


@pytest.fixture(scope="module")
def kept_results() -> list[dict]:
    """Every registered run's figures, from the kept logs and the evaluation CSV (read once for the tests below)."""
    evals = rmr.evaluation(rmr.EVAL_CSV)
    return [rmr.figures(run, evals) for run in rmr.RUNS]


def test_every_kept_run_is_complete_evaluated_and_started_from_the_same_model(kept_results):
    """The registry matches the kept files: each log reaches step 40 with an entropy at every step, each run has
    its evaluation rows, and every run validated the same warmed-up model at step 0 (the same greedy score) - a run
    from another base would not belong in the table."""
    results = kept_results
    assert len({r["log"] for r in results}) == len(rmr.RUNS)
    assert len({run.evaluation for run in rmr.RUNS}) == len(rmr.RUNS)
    assert all(r["greedy_before"] == pytest.approx(0.765625) for r in results), [r["greedy_before"] for r in results]
    table = rmr.per_config(results)
    assert table.count("\n") == 1 + len({run.config for run in rmr.RUNS})


def test_the_docs_per_configuration_table_is_the_scripts_output(kept_results):
    """docs/results.md quotes `python -m benchmarks.real_model_runs`'s per-configuration table: a run added to the
    registry (or a figure changed) without pasting the new table there fails here."""
    table = rmr.per_config(kept_results)
    docs = (rmr.HERE.parent / "docs" / "results.md").read_text()
    assert table in docs, "docs/results.md: paste the per-configuration table printed by real_model_runs.py"


def test_configurations_only_prints_the_means_without_the_rows_of_every_run(capsys):
    """``--configurations-only`` (the results page's table) drops the per-run table and keeps the rest as printed."""
    assert rmr.main([]) == 0
    full = capsys.readouterr().out
    assert rmr.main(["--configurations-only"]) == 0
    short = capsys.readouterr().out
    per_run = full[: full.index("\n\n") + 2]
    assert per_run.startswith("| configuration | seed |") and per_run.count("\n") == 2 + len(rmr.RUNS) + 1
    assert short == full[len(per_run):]
