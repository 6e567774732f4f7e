"""The demo's outputs besides verl's per-run JSONL logs: a CSV of every logged metric and a terminal table.
The PNG is drawn by :func:`verl_ext.analysis.cli.plot` from the JSONL logs, as ``python -m verl_ext.analyze``
draws it."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

ENTROPY_KEY = "actor/entropy"
REWARD_KEY = "critic/score/mean"

History = dict[str, list[dict[str, Any]]]
"""Per run, one dict of metrics per step, each with a ``step`` key (:func:`verl_ext.demo.runs.read_steps`)."""


def write_csv(history: History, path: Path) -> Path:
    """One row per (run, step): columns ``run``, ``step`` and every numeric metric any run logged (empty if absent)."""
    keys = sorted({k for rows in history.values() for row in rows for k, v in row.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)} - {"step"})  # fmt: skip
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["run", "step", *keys])
        for run, rows in history.items():
            for row in rows:
                writer.writerow([run, int(row["step"]), *[row.get(k, "") for k in keys]])
    return path


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    values = [float(r[key]) for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return sum(values) / len(values) if values else math.nan


def summary_table(history: History, window: int = 5) -> str:
    """Entropy and reward per run: mean of the first and of the last ``window`` steps."""
    width = max(10, *(len(run) for run in history))
    head = f"{'run':{width}s} {'entropy first':>13s} {'entropy last':>12s} {'reward first':>12s} {'reward last':>11s}"
    lines = [head, "-" * len(head)]
    for run, rows in history.items():
        first, last = rows[:window], rows[-window:]
        lines.append(
            f"{run:{width}s} {_mean(first, ENTROPY_KEY):13.3f} {_mean(last, ENTROPY_KEY):12.3f} "
            f"{_mean(first, REWARD_KEY):12.3f} {_mean(last, REWARD_KEY):11.3f}"
        )
    lines.append(f"(first / last = mean over the first / last {window} steps)")
    return "\n".join(lines)


__all__ = ["ENTROPY_KEY", "REWARD_KEY", "History", "summary_table", "write_csv"]
