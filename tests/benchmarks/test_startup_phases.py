"""benchmarks/startup_phases.py's logic on a made-up log: phase boundaries, each process kind's first line, and the
import table. (The script's runs themselves are measurements: docs/benchmarks.md.)"""

from __future__ import annotations

import pytest

from benchmarks import startup_phases as sp


def test_durations_are_differences_of_the_markers_times():
    seen = {"ray": 8.0, "task_runner": 14.0, "dataset": 20.0, "workers": 29.0, "rollout": 58.0, "validation": 74.0,
            "step_1": 81.0, "exit": 93.5, "first_line": {"vllm_server": 40.0, "engine_core": 49.5}}  # fmt: skip
    out = sp.durations(seen)
    assert [out[p] for p, _ in sp.PHASES] == [8.0, 6.0, 6.0, 9.0, 29.0, 16.0, 7.0]
    assert out["to_first_step"] == 74.0 and out["exit"] == 12.5
    assert out["first_line"] == {"vllm_server": 40.0, "engine_core": 49.5}
    missing = sp.durations({"ray": 8.0, "workers": 29.0, "exit": 40.0})
    assert missing["task_runner"] is None and missing["workers"] == 21.0 and missing["to_first_step"] is None
    assert "exit" not in missing  # no step, no shut-down time


def test_each_process_kind_has_a_marker_and_a_module():
    kinds = [kind for kind, _ in sp.PROCESSES]
    assert len(set(kinds)) == len(kinds)
    assert set(kinds) <= set(sp.IMPORTS)
    assert sp.IMPORTS["engine_core"].startswith("vllm.") and sp.IMPORTS["driver"] == "verl_ext.main_ppo"


def test_import_table_lists_every_kind_measured():
    table = sp.import_table({"driver": 5.25, "engine_core": 6.0}).splitlines()
    assert table[2] == "| driver | `verl_ext.main_ppo` | 5.25 |"
    assert table[3] == "| engine_core | `vllm.v1.engine.core` | 6.00 |"
    with pytest.raises(KeyError):
        sp.import_table({"no_such_process": 1.0})


def test_summarise_prints_the_table_of_either_kind_of_results(tmp_path, capsys):
    import json

    imports = tmp_path / "imports.json"
    imports.write_text(json.dumps({"imports": {"vllm_server": 12.5}}))
    sp.main(["--summarise", str(imports)])
    assert "| vllm_server | `verl.workers.rollout.vllm_rollout.vllm_async_server` | 12.50 |" in capsys.readouterr().out
    phases = tmp_path / "phases.json"
    summary = {p: 1.0 for p, _ in sp.PHASES} | {"to_first_step": 6.0}
    phases.write_text(json.dumps({"summary": {"after": summary}}))
    sp.main(["--summarise", str(phases)])
    out = capsys.readouterr().out
    assert "| to_first_step | 6.00 |" in out and "| exit |" not in out  # a results file from before exit was timed
    phases.write_text(json.dumps({"summary": {"after": summary | {"exit": 9.5}, "assets_rebuilt": summary}}))
    sp.main(["--summarise", str(phases)])
    assert "| exit | 9.50 | - |" in capsys.readouterr().out
