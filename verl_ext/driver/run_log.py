"""verl's file log (``trainer.logger`` with ``file``) continued, not overwritten, when a run resumes.

verl's ``FileLogger`` (``verl/utils/tracking.py``) opens its JSONL with mode ``"wb"``: a run killed after its step-k
checkpoint and started again with ``trainer.resume_mode=auto`` (what the recipes set) truncates the log and loses
steps 1..k, which ``python -m verl_ext.analyze`` reads. :func:`continuing_file_log` makes verl's ``Tracking`` build
:class:`ContinuingFileLogger` for the duration of a run (inside the TaskRunner actor): it keeps the rows of the
steps up to the checkpoint the run resumes from, and drops those a killed run logged after it (they are trained
again). A fresh run (nothing to resume) starts an empty log, as verl's does.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from verl.utils import tracking

from verl_ext.driver.checkpoints import resumed_step


def file_log_path(project: str, experiment: str) -> Path:
    """Where verl's ``FileLogger`` writes: ``VERL_FILE_LOGGER_PATH``, else ``<VERL_FILE_LOGGER_ROOT or .>/<project>/
    <experiment>.jsonl`` (verl expands ``~`` in the root only)."""
    log = os.environ.get("VERL_FILE_LOGGER_PATH")
    root = Path(os.environ.get("VERL_FILE_LOGGER_ROOT", ".")).expanduser()
    return Path(log) if log else root / project / f"{experiment}.jsonl"


def kept_rows(path: Path, through_step: int) -> list[bytes]:
    """The lines of the JSONL at ``path`` whose ``step`` is at most ``through_step`` (none if it does not exist)."""
    if through_step <= 0 or not path.exists():
        return []
    return [line for line in path.read_bytes().splitlines() if line.strip() and json.loads(line)["step"] <= through_step]


class ContinuingFileLogger(tracking.FileLogger):
    """verl's ``FileLogger`` that keeps the rows of the steps up to :attr:`through_step` already in its file."""

    through_step = 0
    """Set by :func:`continuing_file_log`: the step the run resumes from."""

    def __init__(self, project_name: str, experiment_name: str):
        kept = kept_rows(file_log_path(project_name, experiment_name), self.through_step)
        super().__init__(project_name, experiment_name)  # verl opens (and truncates) the file here
        for line in kept:
            self.fp.write(line + b"\n")


@contextlib.contextmanager
def continuing_file_log(config: Any) -> Iterator[type]:
    """While active, verl's ``Tracking`` builds a :class:`ContinuingFileLogger` that continues the log of the step the
    run resumes from; verl's ``FileLogger`` is restored afterwards."""
    logger_cls = type("ContinuingFileLogger", (ContinuingFileLogger,), {"through_step": resumed_step(config)})
    previous = tracking.FileLogger
    tracking.FileLogger = logger_cls
    try:
        yield logger_cls
    finally:
        tracking.FileLogger = previous


__all__ = ["ContinuingFileLogger", "continuing_file_log", "file_log_path", "kept_rows"]
