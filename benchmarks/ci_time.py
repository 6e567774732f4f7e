"""How long ``.ci/run`` takes, phase by phase, read from the logs of runs on a fresh clone.

Run ``.ci/run`` under GNU time and keep its log, then add it to a results file::

    git clone -q . /tmp/ci && cd /tmp/ci && /usr/bin/time -v bash .ci/run > /tmp/ci_run.log 2>&1
    python -m benchmarks.ci_time --add /tmp/ci_run.log --commit <sha> --machine "AMD EPYC, 2 cores" \\
        --note "..." --json benchmarks/results/results_ci_time.json
    python -m benchmarks.ci_time --summarise benchmarks/results/results_ci_time.json

From the log: the whole run (GNU time's wall clock), the fast tier and the end-to-end tier (pytest's own closing
lines, ``N passed ... in Xs``), the set-up and Quick start (the rest), and each tier's outcome. A log without one of
these lines is an error naming it.
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
            "fast": fast["outcome"].strip(", "), "e2e": e2e["outcome"].strip(", ")}  # fmt: skip


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(round(seconds % 60)):02d}"


def table(runs: list[dict[str, Any]]) -> str:
    """The markdown table of the kept runs."""
    lines = ["| date | commit | machine | set-up + Quick start | fast tier | end-to-end tier | whole `.ci/run` | note |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for run in runs:
        lines.append(f"| {run['date']} | {run['commit']} | {run['machine']} | {_minutes(run['setup_s'])} | {_minutes(run['fast_s'])} "
                     f"({run['fast']}) | {_minutes(run['e2e_s'])} ({run['e2e']}) | **{_minutes(run['total_s'])}** | "
                     f"{run['note']} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ci_time", description=__doc__.split("\n\n")[0])
    parser.add_argument("--summarise", type=Path, help="print the table of a results file")
    parser.add_argument("--add", type=Path, help="a .ci/run log to add to --json")
    parser.add_argument("--json", type=Path, help="the results file --add appends to")
    parser.add_argument("--commit", default="", help="the commit the log ran")
    parser.add_argument("--machine", default="", help="the machine, in words (default: the log's `machine:` line)")
    parser.add_argument("--note", default="", help="what else ran on the machine, what failed")
    args = parser.parse_args(argv)
    if args.summarise:
        print(table(json.loads(args.summarise.read_text())["runs"]))
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
