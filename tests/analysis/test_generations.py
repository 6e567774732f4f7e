"""``python -m verl_ext.analyze --generations``: verl's validation dumps scored per data source, bad dumps refused."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from verl_ext.analysis.cli import main
from verl_ext.analysis.generations import read_evaluation


def write_dump(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def v1_rows(step: int, source: str, prompt: str, verdicts: list[bool], preds: list[str | None]) -> list[dict]:
    """Rows as verl's V1 trainer dumps them, scored by verl_ext.evaluation.scoring (acc, pred, data_source)."""
    return [{"input": prompt, "output": f"answer {p}", "gts": "4", "score": 1.0 if ok else -1.0, "step": step,
             "acc": ok, "pred": p, "data_source": source, "uid": f"{prompt}-uid_{i}_0"}
            for i, (ok, p) in enumerate(zip(verdicts, preds))]  # fmt: skip


def test_dump_is_scored_per_data_source_with_the_papers_metrics(tmp_path):
    rows = (v1_rows(3, "aime", "p1", [True, False, False, False], ["4", "5", "5", None])
            + v1_rows(3, "aime", "p2", [False, False, False, False], ["1", "2", "3", "1"])
            + v1_rows(3, "gsm8k", "q1", [True, True, False, True], ["8", "8", "7", "8"]))  # fmt: skip
    ev = read_evaluation(f"clip_cov={write_dump(tmp_path / 'val' / '3.jsonl', rows)}")
    assert ev.label == "clip_cov" and ev.last_step == 3
    aime, gsm = ev.reports[3]["aime"], ev.reports[3]["gsm8k"]
    assert (aime.n, aime.prompts, gsm.prompts) == (4, 2, 1)
    # p1: c = 1 of 4 -> pass@2 = 1 - C(3,2)/C(4,2) = 1/2; p2: c = 0 -> 0; the mean over prompts
    assert aime.mean("avg@4") == pytest.approx((0.25 + 0) / 2)
    assert aime.mean("pass@2") == pytest.approx((0.5 + 0) / 2)
    assert aime.mean("pass@4") == pytest.approx(0.5)
    # p1 at k = 4: "5" has 2 votes, the truth 1: wrong; p2: the truth has no vote
    assert aime.mean("maj@4") == 0.0
    assert gsm.mean("maj@4") == 1.0 and gsm.mean("pass@1") == pytest.approx(0.75)
    low, high = aime.interval("avg@4")
    assert low == pytest.approx(0.0) and high == pytest.approx(0.25)  # 2 prompts: the resample means span [0, 0.25]


def test_legacy_dumps_group_by_prompt_text_and_verl_acc(tmp_path):
    """The legacy trainer's dump has no uid, and a plain scorer (gsm8k) gives acc = score."""
    rows = [{"input": f"prompt {i % 2}", "output": "x" * (i + 1), "gts": "1", "score": float(i < 2), "step": 0,
             "acc": float(i < 2) if i else None} for i in range(6)]  # fmt: skip  # acc None: the score decides
    report = read_evaluation(str(write_dump(tmp_path / "0.jsonl", rows))).reports[0]["unknown"]
    assert (report.n, report.prompts, report.has_answers) == (3, 2, False)
    assert report.mean("avg@3") == pytest.approx(1 / 3) and "maj@1" not in report.metrics
    assert report.mean("length") == pytest.approx(3.5)


def test_cli_table_csv_and_plots_for_two_runs_and_a_training_directory(tmp_path, capsys):
    grpo = write_dump(tmp_path / "grpo" / "0.jsonl", v1_rows(0, "aime", "p", [False, False, True, False], ["1"] * 4))
    run = tmp_path / "cov_val"
    for step, ok in ((0, [False] * 4), (2, [True, False, False, False]), (4, [True, True, False, False])):
        write_dump(run / f"{step}.jsonl", v1_rows(step, "aime", "p", ok, ["4" if o else "1" for o in ok]))
    out, table = tmp_path / "passk.png", tmp_path / "passk.csv"
    status = main(["--generations", f"grpo={grpo}", "--generations", f"cov={run}", "--passk-out", str(out),
                   "--passk-csv", str(table)])  # fmt: skip
    printed = capsys.readouterr().out
    assert status == 0 and out.stat().st_size > 10_000
    assert "cov  (" in printed and "step 4" in printed and "pass@4" in printed
    rows = list(csv.DictReader(table.open()))
    steps = sorted({int(r["step"]) for r in rows if r["run"] == "cov"})
    assert steps == [0, 2, 4]
    got = {(r["run"], r["step"], r["metric"]): float(r["mean"]) for r in rows}
    assert got[("cov", "4", "pass@2")] == pytest.approx(1 - 1 / 6) and got[("grpo", "0", "avg@4")] == 0.25


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ([{"input": "p", "output": "o", "step": 1}], r"1.jsonl:1: the sample has no \['score'\]"),
        (v1_rows(1, "aime", "a", [True, False], ["1", "2"]) + v1_rows(1, "aime", "b", [True], ["1"]),
         r"data source 'aime' mixes prompts with \[1, 2\] samples each"),
        ([{"input": "p", "output": "o", "score": "yes", "step": 1}], r"1.jsonl:1: 'acc' / 'score' must be a number"),
    ],
)
def test_bad_dumps_are_refused_naming_the_file(tmp_path, capsys, rows, match):
    dump = write_dump(tmp_path / "1.jsonl", rows)
    assert main(["--generations", str(dump), "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert str(dump) in err and re.search(match, err), err


def test_a_file_not_named_by_its_step_is_refused(tmp_path, capsys):
    dump = write_dump(tmp_path / "val.jsonl", v1_rows(1, "aime", "a", [True], ["1"]))
    assert main(["--generations", str(dump)]) == 2
    assert "named <global_step>.jsonl" in capsys.readouterr().err


def test_every_run_of_a_picture_gets_its_own_colour():
    """Up to 10 runs: matplotlib's default cycle; beyond, ``tab20`` - 13 runs (the real model's evaluation picture)
    once drew two pairs of runs in one colour each with the default cycle."""
    from verl_ext.analysis.eval_report import run_colours

    assert run_colours(3) == ["C0", "C1", "C2"]
    assert len(set(run_colours(13))) == 13
    assert len(set(run_colours(20))) == 20
