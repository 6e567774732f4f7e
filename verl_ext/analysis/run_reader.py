"""Read training runs logged by verl 0.9.1 and pick the metrics the analysis needs.

Two sources are understood:

* verl's ``file`` logger (``verl.utils.tracking.FileLogger``): one JSON object per line,
  ``{"step": <int>, "data": {"<metric key>": <number>, ...}}``, written with orjson (NaN and inf
  become ``null``). The file is ``$VERL_FILE_LOGGER_PATH`` if set, else
  ``${VERL_FILE_LOGGER_ROOT:-.}/<project_name>/<experiment_name>.jsonl``. One file is one run.
* verl's ``tensorboard`` logger: scalar summaries (tag = metric key) in ``events.out.tfevents.*``
  files under ``$TENSORBOARD_DIR`` (default ``tensorboard_log/<project>/<experiment>``). One
  directory of event files is one run. Reading them needs the ``tensorboard`` package.

The entropy-performance law fitted later (``R = -a * exp(H) + b``, see :mod:`verl_ext.analysis.entropy_law`)
takes ``H`` and ``R`` from the keys found with :data:`METRIC_KEYS`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from verl_ext.contract import CONTROL_RATIO, CONTROL_TARGET, CONTROL_VALUE

import numpy as np

Candidate = Union[str, re.Pattern[str]]

#: verl's validation accuracy: ``val-core/<data_source>/<acc|reward>/mean@<n>``.
VAL_CORE_MEAN = re.compile(r"^val-core/.+/(acc|reward)/mean@\d+$")

#: Which logged key stands for each quantity, in order of preference: the first one a run has wins.
#: A compiled pattern matches any key; among several matches the alphabetically first wins.
METRIC_KEYS: dict[str, tuple[Candidate, ...]] = {
    "entropy": ("actor/entropy",),
    "reward": ("critic/score/mean", VAL_CORE_MEAN),
    "selected_frac": (
        "actor/clip_cov/selected_frac",
        "actor/kl_cov/selected_frac",
        "actor/erc/kept_frac",
        "actor/clip_cov/batch_selected_frac",
        "actor/kl_cov/batch_selected_frac",
        "actor/high_entropy/batch_selected_frac",
    ),
    "kl": ("actor/ppo_kl", "actor/kl_loss", "actor/kl_clip/raw_kl"),
    "entropy_target": (CONTROL_TARGET,),
    "control_ratio": (CONTROL_RATIO, CONTROL_VALUE),
}

#: How many of a run's keys an error message lists.
SHOWN_KEYS = 20


class RunReadError(Exception):
    """An input that cannot be read as a run; the message names the file."""


@dataclass
class Run:
    """One training run: ``metrics[key][step] = value`` (NaN where verl logged ``null``)."""

    label: str
    path: Path
    metrics: dict[str, dict[int, float]] = field(default_factory=dict)

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """Steps (ascending) and values of one metric."""
        points = sorted(self.metrics.get(key, {}).items())
        steps = np.array([s for s, _ in points], dtype=np.int64)
        values = np.array([v for _, v in points], dtype=np.float64)
        return steps, values

    def resolve(self, candidates: tuple[Candidate, ...]) -> str | None:
        """The first candidate key this run logged, or None."""
        for cand in candidates:
            if isinstance(cand, str):
                if cand in self.metrics:
                    return cand
            else:
                matches = sorted(k for k in self.metrics if cand.match(k))
                if matches:
                    return matches[0]
        return None

    def require(self, quantity: str, candidates: tuple[Candidate, ...]) -> str:
        """Like :meth:`resolve`, but a missing metric is a :class:`RunReadError` listing the run's keys."""
        key = self.resolve(candidates)
        if key is not None:
            return key
        wanted = ", ".join(c if isinstance(c, str) else f"/{c.pattern}/" for c in candidates)
        keys = sorted(self.metrics)
        shown = ", ".join(keys[:SHOWN_KEYS]) + (f", ... ({len(keys)} in all)" if len(keys) > SHOWN_KEYS else "")
        raise RunReadError(
            f"{self.path}: run {self.label!r} has no {quantity} metric (looked for {wanted}); "
            f"it logs: {shown or 'nothing'}"
        )


def split_label(arg: str) -> tuple[str | None, Path]:
    """``label=path`` -> (label, path); a plain path (even one containing '=') -> (None, path)."""
    label, sep, rest = arg.partition("=")
    if sep and label and rest and not Path(arg).exists():
        return label, Path(rest)
    return None, Path(arg)


def read_runs(arg: str) -> list[Run]:
    """All runs named by one command-line argument (a file, or a directory of runs)."""
    label, path = split_label(arg)
    if not path.exists():
        raise RunReadError(f"{path}: no such file or directory")
    if path.is_file():
        run = _read_tfevents(path, path.parent.name) if _is_tfevents(path) else _read_jsonl(path)
        return [_relabel(run, label)]
    runs = [_read_jsonl(p) for p in sorted(path.glob("*.jsonl")) if p.is_file()]
    runs += [_read_tfevents(d, d.name if d != path else path.resolve().name) for d in _event_dirs(path)]
    if not runs:
        raise RunReadError(f"{path}: directory has no *.jsonl file and no TensorBoard event file")
    if label is not None:
        runs = [_relabel(r, label if len(runs) == 1 else f"{label}/{r.label}") for r in runs]
    return runs


def _relabel(run: Run, label: str | None) -> Run:
    if label is not None:
        run.label = label
    return run


def _is_tfevents(path: Path) -> bool:
    return "tfevents" in path.name


def _event_dirs(root: Path) -> list[Path]:
    """Directories under ``root`` (itself included) that hold TensorBoard event files."""
    return sorted({p.parent for p in root.rglob("*tfevents*") if p.is_file()})


def _number(value: object) -> float | None:
    """A logged scalar as float; None for what is not a number (strings, lists, booleans)."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _read_jsonl(path: Path) -> Run:
    """One verl ``file``-logger JSONL file; steps logged twice are merged (the later value wins)."""
    run = Run(label=path.stem, path=path)
    n_records = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise RunReadError(f"{path}:{lineno}: invalid JSON ({e})") from None
            step, data = _check_record(record, path, lineno)
            n_records += 1
            for key, value in data.items():
                number = _number(value)
                if number is not None:
                    run.metrics.setdefault(key, {})[step] = number
    if n_records == 0:
        raise RunReadError(f"{path}: empty file (no logged steps)")
    return run


def _check_record(record: object, path: Path, lineno: int) -> tuple[int, dict]:
    ok = (
        isinstance(record, dict)
        and isinstance(record.get("step"), int)
        and not isinstance(record.get("step"), bool)
        and isinstance(record.get("data"), dict)
    )
    if not ok:
        raise RunReadError(
            f'{path}:{lineno}: not a verl file-logger record (expected {{"step": <int>, "data": {{...}}}})'
        )
    return record["step"], record["data"]


def _read_tfevents(source: Path, label: str) -> Run:
    """Scalars of a TensorBoard run: a directory (all its event files) or one event file."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise RunReadError(
            f"{source}: reading TensorBoard event files needs the tensorboard package: pip install tensorboard"
        ) from None
    acc = EventAccumulator(str(source), size_guidance={"scalars": 0})
    try:
        acc.Reload()
    except Exception as e:  # corrupt or truncated protobuf records
        raise RunReadError(f"{source}: cannot read TensorBoard events ({e})") from None
    run = Run(label=label, path=source)
    for tag in acc.Tags().get("scalars", []):
        run.metrics[tag] = {int(ev.step): float(ev.value) for ev in acc.Scalars(tag)}
    if not run.metrics:
        raise RunReadError(f"{source}: no scalar events (empty TensorBoard log)")
    return run


__all__ = ["METRIC_KEYS", "VAL_CORE_MEAN", "Run", "RunReadError", "read_runs", "split_label"]
