"""The summarisers' options that print less for the results pages: the same rows, fewer of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import auto_control_runs, bench_memory

ROOT = Path(__file__).resolve().parents[2]
MEMORY = ROOT / "benchmarks" / "results" / "results_memory_cpu.json"


def test_memory_model_filter_keeps_exactly_that_models_rows(capsys):
    assert bench_memory.main(["--summarise", str(MEMORY)]) == 0
    full = capsys.readouterr().out.splitlines()
    assert bench_memory.main(["--summarise", str(MEMORY), "--model", "qwen2.5"]) == 0
    short = capsys.readouterr().out.splitlines()
    n_qwen = sum(r["model"] == "qwen2.5" for r in json.loads(MEMORY.read_text())["rows"])
    assert 0 < n_qwen < len(full) - 2
    assert short == full[:2] + [line for line in full[2:] if line.startswith("| qwen2.5 |")]
    assert len(short) == 2 + n_qwen


def test_memory_model_filter_rejects_a_model_not_in_the_file(capsys):
    with pytest.raises(SystemExit) as exc:
        bench_memory.main(["--summarise", str(MEMORY), "--model", "llama"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--model='llama' is invalid" in err and "qwen2.5" in err and "smollm2" in err


def test_memory_model_filter_needs_summarise(capsys):
    with pytest.raises(SystemExit):
        bench_memory.main(["--model", "qwen2.5"])
    assert "--model filters a --summarise table" in capsys.readouterr().err


def test_auto_control_medians_only_drops_the_per_run_table(capsys):
    assert auto_control_runs.main([]) == 0
    full = capsys.readouterr().out
    assert auto_control_runs.main(["--medians-only"]) == 0
    short = capsys.readouterr().out
    per_run = full[: full.index("\n\n") + 2]
    assert per_run.startswith("| actuator | build | precision | target | seed |")
    assert short == full[len(per_run):] and short.startswith("| actuator | build | precision | target | seeds |")
