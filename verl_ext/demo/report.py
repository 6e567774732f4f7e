"""The demo's outputs besides the per-run JSONL logs: a CSV of every logged metric, a terminal table, and the
description of the machine that goes into the PNG's title. The PNG itself is drawn by
:func:`verl_ext.analyze.plot` from the JSONL logs, exactly as ``python -m verl_ext.analyze`` would."""

from __future__ import annotations

import csv
import datetime
import math
import os
import platform
from pathlib import Path

ENTROPY_KEY = "actor/entropy"
REWARD_KEY = "critic/score/mean"

History = dict[str, list[dict[str, float]]]
"""Per run (loss name), one dict of metrics per step, each with a ``step`` key."""


def write_csv(history: History, path: Path) -> Path:
    """One row per (run, step): columns ``run``, ``step`` and every metric any run logged (empty if absent)."""
    keys = sorted({k for rows in history.values() for row in rows for k in row} - {"step"})
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["run", "step", *keys])
        for run, rows in history.items():
            for row in rows:
                writer.writerow([run, int(row["step"]), *[row.get(k, "") for k in keys]])
    return path


def _mean(rows: list[dict[str, float]], key: str) -> float:
    values = [r[key] for r in rows if key in r and math.isfinite(r[key])]
    return sum(values) / len(values) if values else math.nan


def summary_table(history: History, window: int = 5) -> str:
    """Entropy and reward per loss: mean of the first and of the last ``window`` steps."""
    head = f"{'loss':10s} {'entropy first':>13s} {'entropy last':>12s} {'reward first':>12s} {'reward last':>11s}"
    lines = [head, "-" * len(head)]
    for run, rows in history.items():
        first, last = rows[:window], rows[-window:]
        lines.append(
            f"{run:10s} {_mean(first, ENTROPY_KEY):13.3f} {_mean(last, ENTROPY_KEY):12.3f} "
            f"{_mean(first, REWARD_KEY):12.3f} {_mean(last, REWARD_KEY):11.3f}"
        )
    lines.append(f"(first / last = mean over the first / last {window} steps)")
    return "\n".join(lines)


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    """Date, CPU, core count and library versions, for the PNG title and the terminal."""
    import torch
    import verl

    return (
        f"{datetime.date.today().isoformat()}, {cpu_model()} ({os.cpu_count()} cores), "
        f"torch {torch.__version__}, verl {verl.__version__}"
    )


__all__ = ["ENTROPY_KEY", "REWARD_KEY", "History", "cpu_model", "machine_line", "summary_table", "write_csv"]
