"""How long ``.ci/run`` takes, phase by phase, read from the logs of runs on a fresh clone.

Run ``.ci/run`` under GNU time and keep its log, then add it to a results file::

    git clone -q . /tmp/ci && cd /tmp/ci && /usr/bin/time -v bash .ci/run > /tmp/ci_run.log 2>&1
    python -m benchmarks.ci_time --add /tmp/ci_run.log --commit <sha> --machine "AMD EPYC, 2 cores" \\
        --note "..." --json benchmarks/results/results_ci_time.json
    python -m benchmarks.ci_time --summarise benchmarks/results/results_ci_time.json
    python -m benchmarks.ci_time --summarise benchmarks/results/results_ci_time.json --slowest fast

From the log: the whole run (GNU time's wall clock), the fast tier and the end-to-end tier (pytest's own closing
lines, ``N passed ... in Xs``), the set-up and Quick start (the rest; the install's own time from
``scripts/install_cpu.sh``'s last line, where the log has it), each tier's outcome, and each tier's slowest
tests (pytest's ``--durations`` block). A log without one of
these lines is an error naming it.

A tier's *summed test time* (every test's set-up, call and tear-down, as pytest's ``--durations=0`` lists them) does
not depend on how many workers ran it: two runs of a tier on one machine, the same day, compare as a ratio::

    python -m pytest -q --durations=0 > /tmp/fast_before.log   # on the older commit, then on the newer one
    python -m benchmarks.ci_time --tier-sums /tmp/fast_before.log /tmp/fast_after.log --labels before,after \
        --record benchmarks/results/results_tier_time.json --tier fast --commit <sha> --note "..."
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TIER = re.compile(r"^(?P<outcome>(?:\d+ (?:passed|failed|xfailed|xpassed|deselected|skipped|warnings?|errors?)(?:, )?)+) in "
                  r"(?P<seconds>[\d.]+)s", flags=re.M)  # fmt: skip
MACHINE = re.compile(r"^machine: (?P<machine>.+)$", flags=re.M)
"""The line each tier's summary ends with (tests/conftest.py ``machine_line``): CPU model, cores, memory."""
DURATIONS = re.compile(r"^=+ slowest (?:\d+ )?durations =+$", flags=re.M)
"""The head of pytest's ``--durations`` block (pyproject's ``addopts``: the 30 slowest of each tier)."""
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<when>setup|call|teardown) +(?P<test>\S.*)$")
INSTALL = re.compile(r"^done: CPU mode is ready .*; installed in (?P<seconds>\d+) s$", flags=re.M)
"""scripts/install_cpu.sh's last line: the install's own time, inside the set-up and Quick start."""
WALL = re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?P<clock>[\d:.]+)")


def _clock_seconds(clock: str) -> float:
    seconds = 0.0
    for part in clock.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def parse_log(text: str) -> dict[str, Any]:
    """The phases of one ``.ci/run`` log: ``total_s``, ``setup_s``, ``fast_s``, ``e2e_s`` and each tier's outcome."""
    wall = WALL.search(text)
    if wall is None:
        raise ValueError("no 'Elapsed (wall clock) time' line: run .ci/run under /usr/bin/time -v")
    tiers = list(TIER.finditer(text))
    if len(tiers) != 2:
        raise ValueError(f"expected pytest's closing line of the two tiers, found {len(tiers)}")
    (fast, e2e), total = tiers, _clock_seconds(wall["clock"])
    fast_s, e2e_s = float(fast["seconds"]), float(e2e["seconds"])
    return {"total_s": round(total, 1), "setup_s": round(total - fast_s - e2e_s, 1), "fast_s": fast_s, "e2e_s": e2e_s,
            "fast": fast["outcome"].strip(", "), "e2e": e2e["outcome"].strip(", "),
            **({"install_s": float(found["seconds"])} if (found := INSTALL.search(text)) else {}),
            **{f"{tier}_slowest": rows for tier, rows in zip(("fast", "e2e"), slowest(text)) if rows}}  # fmt: skip


def slowest(text: str) -> list[list[list[Any]]]:
    """Each tier's ``--durations`` block, in the log's order: ``[seconds, when, test]`` rows, slowest first."""
    blocks = []
    for head in DURATIONS.finditer(text):
        rows = []
        for line in text[head.end():].splitlines()[1:]:
            found = DURATION.match(line.strip())
            if found is None:
                if rows:
                    break
                continue
            rows.append([float(found["seconds"]), found["when"], found["test"].strip()])
        blocks.append(rows)
    return blocks


def slowest_table(rows: list[list[Any]], count: int = 30) -> str:
    """The ``count`` slowest rows as markdown, and each test file's share of them."""
    lines = ["| seconds | phase | test |", "| ---: | --- | --- |"]
    lines += [f"| {sec:.1f} | {when} | `{test}` |" for sec, when, test in rows[:count]]
    files: dict[str, float] = {}
    for sec, _, test in rows[:count]:
        name = test.split("::")[0]
        files[name] = files.get(name, 0.0) + sec
    lines += ["", "| test file | seconds among these |", "| --- | ---: |"]
    lines += [f"| `{name}` | {sec:.1f} |" for name, sec in sorted(files.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


def tier_sum(text: str) -> dict[str, Any]:
    """One tier's log with every test's durations (``--durations=0``): the summed test time, the count of timed
    phases, pytest's own wall time and outcome, the machine, and the seconds per test file."""
    rows = [row for block in slowest(text) for row in block]
    closing = list(TIER.finditer(text))
    if not rows or not closing:
        raise ValueError("no --durations block or no closing line: run the tier with --durations=0")
    files: dict[str, float] = {}
    for sec, _, test in rows:
        files[test.split("::")[0]] = round(files.get(test.split("::")[0], 0.0) + sec, 2)
    machine = next((m["machine"] for m in MACHINE.finditer(text)), "")
    return {"summed_s": round(sum(row[0] for row in rows), 1), "phases": len(rows), "wall_s": float(closing[-1]["seconds"]),
            "outcome": closing[-1]["outcome"].strip(", "), "machine": machine,
            "by_file": dict(sorted(files.items(), key=lambda kv: -kv[1]))}  # fmt: skip


def tier_table(sums: dict[str, dict[str, Any]], files: int = 12) -> str:
    """The runs side by side: summed test time, its ratio to the first, wall time; then the largest files."""
    first = next(iter(sums.values()))["summed_s"]
    lines = ["| run | summed test time | ratio | pytest's wall time | outcome |", "| --- | ---: | ---: | ---: | --- |"]
    lines += [f"| {label} | {run['summed_s']:.0f} s | {run['summed_s'] / first:.2f} | {run['wall_s']:.0f} s | "
              f"{run['outcome']} |" for label, run in sums.items()]  # fmt: skip
    names = list(dict.fromkeys(name for run in sums.values() for name in list(run["by_file"])[:files]))
    lines += ["", "| test file | " + " | ".join(sums) + " |", "| --- |" + " ---: |" * len(sums)]
    lines += [f"| `{name}` | " + " | ".join(f"{run['by_file'].get(name, 0.0):.1f}" for run in sums.values()) + " |"
              for name in names]  # fmt: skip
    return "\n".join(lines)


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(round(seconds % 60)):02d}"


def table(runs: list[dict[str, Any]]) -> str:
    """The markdown table of the kept runs."""
    lines = ["| date | commit | machine | set-up + Quick start (install) | fast tier | end-to-end tier | whole `.ci/run` | note |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for run in runs:
        install = f" ({_minutes(run['install_s'])})" if "install_s" in run else ""
        lines.append(f"| {run['date']} | {run['commit']} | {run['machine']} | {_minutes(run['setup_s'])}{install} | {_minutes(run['fast_s'])} "
                     f"({run['fast']}) | {_minutes(run['e2e_s'])} ({run['e2e']}) | **{_minutes(run['total_s'])}** | "
                     f"{run['note']} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ci_time", description=__doc__.split("\n\n")[0])
    parser.add_argument("--summarise", type=Path, help="print the table of a results file")
    parser.add_argument("--slowest", choices=("fast", "e2e"),
                        help="with --summarise: print the last run's slowest tests of that tier instead")
    parser.add_argument("--add", type=Path, help="a .ci/run log to add to --json")
    parser.add_argument("--json", type=Path, help="the results file --add appends to")
    parser.add_argument("--commit", default="", help="the commit the log ran")
    parser.add_argument("--machine", default="", help="the machine, in words (default: the log's `machine:` line)")
    parser.add_argument("--note", default="", help="what else ran on the machine, what failed")
    parser.add_argument("--tier-sums", type=Path, nargs="+", metavar="LOG",
                        help="logs of one tier run with --durations=0: their summed test times side by side")
    parser.add_argument("--labels", default="", help="with --tier-sums: a name per log, comma-separated")
    parser.add_argument("--record", type=Path, help="with --tier-sums: the results file to append the comparison to")
    parser.add_argument("--tier", choices=("fast", "e2e"), help="with --record: which tier the logs ran")
    args = parser.parse_args(argv)
    if args.tier_sums:
        labels = args.labels.split(",") if args.labels else [str(p) for p in args.tier_sums]
        if len(labels) != len(args.tier_sums):
            parser.error(f"--labels names {len(labels)} runs for {len(args.tier_sums)} logs")
        try:
            sums = {label: tier_sum(path.read_text(errors="replace")) for label, path in zip(labels, args.tier_sums)}
        except ValueError as exc:
            parser.error(str(exc))
        print(tier_table(sums))
        if args.record:
            if not args.tier:
                parser.error("--record needs --tier fast or --tier e2e")
            data = json.loads(args.record.read_text()) if args.record.exists() else {"comparisons": []}
            data["comparisons"].append({"date": datetime.date.today().isoformat(), "tier": args.tier,
                                        "commit": args.commit, "note": args.note, "runs": sums})  # fmt: skip
            args.record.write_text(json.dumps(data, indent=1) + "\n")
        return 0
    if args.summarise:
        runs = json.loads(args.summarise.read_text())["runs"]
        if args.slowest:
            kept = [run for run in runs if f"{args.slowest}_slowest" in run]
            if not kept:
                parser.error(f"no run in {args.summarise} keeps the {args.slowest} tier's slowest tests")
            run = kept[-1]
            print(f"{run['date']}, {run['commit']}, {run['machine']}:\n")
            print(slowest_table(run[f"{args.slowest}_slowest"]))
            return 0
        print(table(runs))
        return 0
    if not (args.add and args.json):
        parser.error("give --summarise FILE, or --add LOG with --json FILE")
    data = json.loads(args.json.read_text()) if args.json.exists() else {"runs": []}
    text = args.add.read_text(errors="replace")
    machine = args.machine or next((m["machine"] for m in MACHINE.finditer(text)), "")
    if not machine:
        parser.error("the log has no `machine:` line (tests/conftest.py prints one per tier): give --machine")
    data["runs"].append({"date": datetime.date.today().isoformat(), "commit": args.commit, "machine": machine,
                         "note": args.note, **parse_log(text)})  # fmt: skip
    args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(table(data["runs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
