"""The entropy autopilot's record in a run, and the token lens's file: what ``verl_ext.analyze`` reports of them.

* :func:`relative_gap` - ``mean |H_t - H*_t| / H*_t``, the tracking gap every comparison of the project reports.
* :func:`tracking` - how closely a run's entropy followed the autopilot's target over the second half of the run:
  mean absolute relative error ``mean |H_t - H*_t| / H*_t``, the final ratio and the share of saturated steps.
* :func:`lens_summary` - from a ``<experiment>.lens.jsonl`` file (``verl_ext.token_lens``): the most frequently
  selected token strings with their count, mean advantage, mean probability and mean covariance.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verl_ext.analysis.run_reader import Run, RunReadError
from verl_ext.contract import (CONTROL_ENTROPY, CONTROL_RATIO, CONTROL_SATURATED, CONTROL_TARGET, CONTROL_VALUE, LENS_SUFFIX,
                               lens_file_for)

TARGET_KEY, ENTROPY_KEY, RATIO_KEY, SATURATED_KEY = CONTROL_TARGET, CONTROL_ENTROPY, CONTROL_RATIO, CONTROL_SATURATED


@dataclass(frozen=True)
class Tracking:
    """The autopilot's record over the second half of a run."""

    steps: int
    mean_abs_rel_error: float
    final_ratio: float
    """The actuator's last value (the selection ratio for ``cov_ratio``)."""
    saturated_share: float


def relative_gap(entropy: Sequence[float] | np.ndarray, target: float | Sequence[float] | np.ndarray) -> float:
    """``mean |H_t - H*_t| / H*_t`` over the steps given: the entropy's mean absolute relative distance from its target
    (a constant or one value per step)."""
    h = np.asarray(entropy, dtype=float)
    if h.size == 0:
        raise ValueError("relative_gap: no steps")
    t = np.broadcast_to(np.asarray(target, dtype=float), h.shape)
    return float((np.abs(h - t) / t).mean())


def tracking(run: Run) -> Tracking | None:
    """The second-half tracking figures of ``run``, or ``None`` when it logged no autopilot metrics."""
    if TARGET_KEY not in run.metrics or ENTROPY_KEY not in run.metrics:
        return None
    steps, target = run.series(TARGET_KEY)
    _, entropy = run.series(ENTROPY_KEY)
    half = len(steps) // 2
    counted = len(steps) - half
    _, ratio = run.series(RATIO_KEY if RATIO_KEY in run.metrics else CONTROL_VALUE)  # the actuator's value
    saturated = run.series(SATURATED_KEY)[1][half:] if SATURATED_KEY in run.metrics else np.zeros(counted)
    return Tracking(counted, relative_gap(entropy[half:], target[half:]), float(ratio[-1]), float(saturated.mean()))


def format_tracking(label: str, record: Tracking) -> str:
    """One line on a run's autopilot record."""
    return (f"{label}: entropy autopilot over the last {record.steps} steps: mean |H - H*| / H* = "
            f"{record.mean_abs_rel_error:.1%}, final actuator value {record.final_ratio:.4g}, on a bound in "
            f"{record.saturated_share:.0%} of the steps")  # fmt: skip


@dataclass(frozen=True)
class LensRow:
    """One token string's record in a lens file."""

    token: str
    count: int
    share: float
    mean_advantage: float
    mean_prob: float
    mean_covariance: float


def lens_summary(path: str | Path, top: int = 15) -> tuple[int, list[LensRow]]:
    """The number of selected tokens in the lens file and its ``top`` most frequent token strings."""
    path = Path(path)
    if not path.is_file():
        raise RunReadError(f"{path}: no such lens file (verl_ext.token_lens writes <experiment>.lens.jsonl)")
    groups: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    total = 0
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                groups[row["token"]].append((row["advantage"], row["prob"], row["covariance"]))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise RunReadError(f"{path}:{number}: not a token-lens row ({exc})") from exc
            total += 1
    rows = [
        LensRow(token, len(v), len(v) / total, *(float(np.mean([x[i] for x in v])) for i in range(3)))
        for token, v in groups.items()
    ]
    rows.sort(key=lambda r: (-r.count, r.token))
    return total, rows[:top]


def format_lens(path: str | Path, total: int, rows: list[LensRow]) -> str:
    lines = [f"token lens {path}: {total} selected tokens; most frequent:",
             f"{'token':>12}  {'count':>6}  {'share':>6}  {'mean A':>8}  {'mean p':>7}  {'mean cov':>9}"]  # fmt: skip
    for r in rows:
        lines.append(f"{r.token!r:>12}  {r.count:>6d}  {r.share:>6.1%}  {r.mean_advantage:>8.3f}  {r.mean_prob:>7.3f}  "
                     f"{r.mean_covariance:>9.3f}")  # fmt: skip
    return "\n".join(lines)


__all__ = ["LensRow", "Tracking", "format_lens", "format_tracking", "lens_summary",
           "tracking"]
