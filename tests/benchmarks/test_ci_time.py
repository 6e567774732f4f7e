"""benchmarks/ci_time.py reads a .ci/run log's phases from GNU time's wall clock and pytest's two closing lines."""

from __future__ import annotations

import pytest

from benchmarks.ci_time import parse_log, table

LOG = """== 1/4 torch 2.13.0+cpu
step:30 - actor/entropy:3.1
...........
1045 passed, 13 warnings in 441.82s (0:07:21)
......F....
1 failed, 46 passed, 1045 deselected, 6 warnings in 1772.85s (0:29:32)
\tElapsed (wall clock) time (h:mm:ss or m:ss): 42:39.98
"""


def test_phases_of_a_log():
    run = parse_log(LOG)
    assert run == {"total_s": 2560.0, "setup_s": 345.3, "fast_s": 441.82, "e2e_s": 1772.85,
                   "fast": "1045 passed, 13 warnings", "e2e": "1 failed, 46 passed, 1045 deselected, 6 warnings"}  # fmt: skip
    row = table([{"date": "2026-11-28", "commit": "abc", "machine": "m", "note": "n", **run}]).splitlines()[-1]
    assert row == ("| 2026-11-28 | abc | m | 5:45 | 7:22 (1045 passed, 13 warnings) | 29:33 (1 failed, 46 passed, 1045 "
                   "deselected, 6 warnings) | **42:40** | n |")


@pytest.mark.parametrize(("broken", "message"), [
    (LOG.replace("Elapsed", "Spent"), "no 'Elapsed (wall clock) time' line"),
    (LOG.replace("1045 passed, 13 warnings in 441.82s", "interrupted"), "found 1"),
])  # fmt: skip
def test_a_log_without_a_phase_is_an_error_naming_it(broken, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_log(broken)


def test_the_machine_comes_from_the_logs_machine_line(tmp_path):
    """``--add`` without ``--machine`` takes the tiers' ``machine:`` line (tests/conftest.py), and refuses a log
    without one rather than record a run on no named machine."""
    import json

    from benchmarks.ci_time import main

    results = tmp_path / "runs.json"
    log = tmp_path / "ci.log"
    log.write_text(LOG.replace("\n1045 passed", "\nmachine: Intel(R) Xeon(R) Processor (amx_bf16), 2 cores\n1045 passed"))
    assert main(["--add", str(log), "--json", str(results), "--commit", "abc"]) == 0
    assert json.loads(results.read_text())["runs"][0]["machine"] == "Intel(R) Xeon(R) Processor (amx_bf16), 2 cores"
    log.write_text(LOG)
    with pytest.raises(SystemExit):
        main(["--add", str(log), "--json", str(results)])
    assert len(json.loads(results.read_text())["runs"]) == 1


def test_a_tier_with_expected_failures_is_read():
    """pytest's closing line names strict xfails (``9 xfailed``) among the outcomes; the tier is still found."""
    run = parse_log(LOG.replace("1045 passed, 13 warnings in", "1045 passed, 9 xfailed, 13 warnings in"))
    assert run["fast"] == "1045 passed, 9 xfailed, 13 warnings" and run["fast_s"] == 441.82


def test_each_tiers_slowest_tests_are_kept_and_summed_by_file(tmp_path, capsys):
    """The tiers' ``--durations`` blocks go into the run (``fast_slowest``, ``e2e_slowest``), and ``--slowest``
    prints the last run's table with each file's share."""
    import json

    from benchmarks.ci_time import main

    fast = ("============================= slowest 30 durations =============================\n"
            "16.00s call     tests/cpu/test_a.py::test_one[cpu]\n"
            "9.50s setup    tests/b.py::test_two\n"
            "4.00s call     tests/cpu/test_a.py::test_three\n"
            "(12 durations < 0.005s hidden.)\n")  # fmt: skip
    e2e = "=== slowest durations ===\n587.83s call     tests/e2e/test_c.py::test_four\n\n"
    text = LOG.replace("1045 passed", fast + "1045 passed").replace("1 failed", e2e + "1 failed")
    run = parse_log(text)
    assert run["fast_slowest"] == [[16.0, "call", "tests/cpu/test_a.py::test_one[cpu]"],
                                   [9.5, "setup", "tests/b.py::test_two"], [4.0, "call", "tests/cpu/test_a.py::test_three"]]
    assert run["e2e_slowest"] == [[587.83, "call", "tests/e2e/test_c.py::test_four"]]
    results, log = tmp_path / "runs.json", tmp_path / "ci.log"
    log.write_text(text)
    assert main(["--add", str(log), "--json", str(results), "--machine", "m"]) == 0
    capsys.readouterr()
    assert main(["--summarise", str(results), "--slowest", "fast"]) == 0
    out = capsys.readouterr().out
    assert "| 16.0 | call | `tests/cpu/test_a.py::test_one[cpu]` |" in out
    assert "| `tests/cpu/test_a.py` | 20.0 |" in out and "| `tests/b.py` | 9.5 |" in out
    results.write_text(json.dumps({"runs": [{k: v for k, v in json.loads(results.read_text())["runs"][0].items()
                                             if k != "fast_slowest"}]}))  # fmt: skip
    with pytest.raises(SystemExit):
        main(["--summarise", str(results), "--slowest", "fast"])


def test_the_installs_own_time_is_read_where_the_log_has_it():
    """scripts/install_cpu.sh's last line gives the install's time, shown beside the set-up and Quick start."""
    run = parse_log(LOG.replace("step:30", "done: CPU mode is ready (bash recipe/cpu_tiny.sh); installed in 203 s\nstep:30"))
    assert run["install_s"] == 203.0 and run["setup_s"] == 345.3
    row = table([{"date": "d", "commit": "c", "machine": "m", "note": "", **run}]).splitlines()[-1]
    assert row.startswith("| d | c | m | 5:45 (3:23) | 7:22 ")
    assert "install_s" not in parse_log(LOG)



TIER_LOG = """....
============================== slowest durations ===============================
30.00s call     tests/e2e/test_a.py::test_one
5.50s setup    tests/e2e/test_a.py::test_two
4.50s call     tests/e2e/test_b.py::test_three

(3 durations < 0.005s hidden.  Use -vv to show these durations.)
machine: AMD EPYC (avx512_bf16), 2 cores / 2 threads, 24 GiB
3 passed in 25.00s
"""


def test_a_tiers_summed_test_time_and_its_ratio_to_another_run(tmp_path, capsys):
    """``--tier-sums``: every listed phase summed (40 s here, 30 s of it one file's), the ratio to the first log, and
    ``--record`` keeps both runs with the machine each log names."""
    import json

    from benchmarks.ci_time import main, tier_sum

    assert tier_sum(TIER_LOG) == {"summed_s": 40.0, "phases": 3, "wall_s": 25.0, "outcome": "3 passed",
                                  "machine": "AMD EPYC (avx512_bf16), 2 cores / 2 threads, 24 GiB",
                                  "by_file": {"tests/e2e/test_a.py": 35.5, "tests/e2e/test_b.py": 4.5}}  # fmt: skip
    before, after = tmp_path / "before.log", tmp_path / "after.log"
    before.write_text(TIER_LOG)
    after.write_text(TIER_LOG.replace("30.00s call", "10.00s call"))
    record = tmp_path / "tiers.json"
    assert main(["--tier-sums", str(before), str(after), "--labels", "before,after", "--record", str(record),
                 "--tier", "e2e", "--commit", "abc"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "| before | 40 s | 1.00 | 25 s | 3 passed |" in printed and "| after | 20 s | 0.50 | 25 s | 3 passed |" in printed
    (kept,) = json.loads(record.read_text())["comparisons"]
    assert kept["tier"] == "e2e" and kept["runs"]["after"]["summed_s"] == 20.0
    with pytest.raises(SystemExit):
        main(["--tier-sums", str(before), "--labels", "a,b"])
