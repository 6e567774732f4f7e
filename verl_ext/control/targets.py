"""The entropy control's target: its schedule over the steps and its unit.

``target`` and ``target_end`` are read in the unit ``target_unit`` names:

* ``nats`` - nats per token, as they are;
* ``initial`` - ratios to ``H_0``, the geometric mean of the entropies the controller measured at its first
  ``initial_steps`` usable steps (from step 1 of a fresh run), as AER (arXiv 2510.10959) anchors its target to the
  initial entropy: ``target=0.5`` holds half of it.

The step's target in nats is then::

    H*_t = s_t                 (nats)
    H*_t = s_t x H_0           (initial)
    s_t  = target                                                         (schedule=constant)
    s_t  = target + (target_end - target) p_t,  p_t = (t - 1) / (T - 1)    (linear; cosine: p_t -> (1 - cos(pi p_t)) / 2)

with ``T`` = ``schedule_steps`` (or ``trainer.total_training_steps``) and ``p_t`` clamped to [0, 1]. ``H_0`` is kept in
the controller's checkpoint state, so a resumed run keeps the same target.
"""

from __future__ import annotations

import math
from typing import Any

from verl_ext.config import ConfigError

TARGET_UNITS = ("nats", "initial")
"""``target_unit``'s values (module docstring)."""
SCHEDULES = ("constant", "linear", "cosine")


def target_at(config: Any, step: int, total_steps: int | None = None) -> float:
    """``s_t``: the target at training step ``step`` (1-based, as verl counts) in ``config.target_unit``: ``target``
    for ``constant``; otherwise it moves from ``target`` (step 1) to ``target_end`` (step ``schedule_steps`` or
    ``total_steps``, and after) linearly or along a half cosine."""
    if config.schedule == "constant":
        return float(config.target)
    span = config.schedule_steps or total_steps
    if span is None or span < 1:
        raise ConfigError(f"{config.KEY_PREFIX}schedule_steps", "is null and the run has no trainer.total_training_"
                          "steps: set the number of steps the schedule takes")  # fmt: skip
    progress = 1.0 if span == 1 else min(max((step - 1) / (span - 1), 0.0), 1.0)
    if config.schedule == "cosine":
        progress = 0.5 * (1.0 - math.cos(math.pi * progress))
    return float(config.target + (config.target_end - config.target) * progress)


def target_nats(config: Any, step: int, total_steps: int | None, anchor: float | None) -> float:
    """``H*_t`` in nats per token: :func:`target_at` as it is (``target_unit=nats``) or times ``anchor`` (``H_0``,
    ``initial``); ``NaN`` for ``initial`` before the anchor is measured."""
    scheduled = target_at(config, step, total_steps)
    if config.target_unit == "nats":
        return scheduled
    return math.nan if anchor is None else scheduled * anchor


def describe(config: Any) -> str:
    """The target in words, for the dry run's summary: ``0.3 nats/token``, ``linear 0.5 -> 0.3 x H(step 1)``."""
    span = f"{config.target}" if config.schedule == "constant" else f"{config.schedule} {config.target} -> {config.target_end}"
    return f"{span} nats/token" if config.target_unit == "nats" else f"{span} x the entropy of the first steps"


__all__ = ["SCHEDULES", "TARGET_UNITS", "describe", "target_at", "target_nats"]
