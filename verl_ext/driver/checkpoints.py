"""Where verl's trainers save and load their checkpoints, as verl decides it; one place for verl_ext's state files
(:mod:`verl_ext.driver.mixin`) and its continued file log (:mod:`verl_ext.driver.run_log`) to ask.

verl's trainers (``_save_checkpoint`` / ``_load_checkpoint``, V1 and legacy alike) save step ``N`` under
``<trainer.default_local_dir>/global_step_<N>`` whatever the resume mode, and load from
``trainer.resume_from_path`` in ``resume_path`` mode, from the latest ``global_step_*`` under ``default_local_dir``
in ``auto`` mode, and from nothing in ``disable`` mode. A relative folder is relative to the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

from verl_ext.config import config_value


def absolute_folder(folder: str | os.PathLike) -> Path:
    """``folder`` made absolute against the working directory, as verl's trainers do."""
    folder = Path(folder)
    return folder if folder.is_absolute() else Path(os.getcwd()) / folder


def checkpoint_folder(config: Any, global_steps: int) -> Path:
    """Where verl's trainers *save* step ``global_steps``: ``<default_local_dir>/global_step_<N>``, whatever the
    resume mode (a run resumed from ``resume_from_path`` still saves its later steps under ``default_local_dir``)."""
    return absolute_folder(config.trainer.default_local_dir) / f"global_step_{global_steps}"


def resume_checkpoint(config: Any) -> Path | None:
    """The checkpoint folder verl's trainers will resume from, or ``None`` for a fresh run."""
    trainer = config.trainer
    mode = config_value(trainer, "resume_mode", "auto")
    if mode == "resume_path":
        path = config_value(trainer, "resume_from_path")
        return absolute_folder(path) if path else None
    if mode == "auto":
        path = find_latest_ckpt_path(str(absolute_folder(trainer.default_local_dir)))
        return Path(path) if path else None
    return None


def resumed_step(config: Any) -> int:
    """The global step verl's trainers will resume from (0: a fresh run)."""
    path = resume_checkpoint(config)
    return int(path.name.split("global_step_")[-1]) if path else 0


def resume_folder(config: Any, global_steps: int) -> Path:
    """Where verl's trainers *load* step ``global_steps`` from: ``resume_from_path`` in ``resume_path`` mode, else
    the saved folder of :func:`checkpoint_folder` (``auto`` mode finds the latest one there)."""
    trainer = config.trainer
    if config_value(trainer, "resume_mode") == "resume_path" and config_value(trainer, "resume_from_path"):
        return absolute_folder(trainer.resume_from_path)
    return checkpoint_folder(config, global_steps)


__all__ = ["absolute_folder", "checkpoint_folder", "resume_checkpoint", "resume_folder", "resumed_step"]
