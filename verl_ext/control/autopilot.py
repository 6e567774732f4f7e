"""Entropy autopilot: hold the policy's entropy on a target by setting the Clip-Cov / KL-Cov selection ratio.

Clip-Cov and KL-Cov slow entropy collapse by acting on a fixed fraction of the tokens, and that fraction has to be
tuned per model and run. Like SAC's automatic temperature, the autopilot takes a target entropy ``H*`` (nats per
token; constant or scheduled) and sets the ratio ``rho`` of every step from the error between ``H*`` and the
batch's measured entropy ``H`` - the mean per-token entropy of the old-log-prob pass, which verl computes anyway -
before the batch-scope selection of the same step (no lag, nothing changes on the workers). A proportional-
integral law in log space:

    e_t         = log H*_t - log H_t                       (> 0: entropy below target -> select more tokens)
    log rho_t   = clamp(log rho_0 + k_p e_t + k_i (I_{t-1} + e_t),  log rho_min,  log rho_max)
    I_t         = I_{t-1} + e_t     unless rho_t sits on a bound and e_t pushes further into it (anti-windup)

Selecting more tokens raises entropy for both methods: Clip-Cov detaches the gradient of more high-covariance
tokens (the ones whose update lowers entropy most), KL-Cov anchors more of them to the old policy. Everything here
is pure Python (no torch, no verl): :class:`EntropyControlConfig` (the ``verl_ext.entropy_control`` keys and their
validation), :func:`target_at` (the schedule) and :class:`EntropyController` (the law and its state, which the
trainers save with every checkpoint).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from verl_ext.config import PrefixedConfig
from verl_ext.contract import (CONTROL_ENTROPY, CONTROL_ERROR, CONTROL_INTEGRAL, CONTROL_RATIO, CONTROL_SATURATED,
                               CONTROL_TARGET)

AUTOPILOT_CONFIG_PREFIX = "verl_ext.entropy_control."
SCHEDULES = ("constant", "linear", "cosine")


@dataclass
class EntropyControlConfig(PrefixedConfig):
    """The ``verl_ext.entropy_control`` keys (``configs/verl_ext_trainer.yaml``)."""

    KEY_PREFIX: ClassVar[str] = AUTOPILOT_CONFIG_PREFIX

    enable: bool = False
    """Turn the autopilot on (``clip_cov`` / ``kl_cov`` with ``cov_scope=batch`` only)."""

    target: float = 1.0
    """Target entropy in nats per token (> 0); the start value of a schedule."""

    schedule: str = "constant"
    """``constant`` (``target`` throughout), ``linear`` or ``cosine`` from ``target`` to ``target_end``."""

    target_end: float | None = None
    """End value of a ``linear`` / ``cosine`` schedule (> 0); must be null for ``constant``."""

    schedule_steps: int | None = None
    """Steps over which the schedule moves (>= 1); null: ``trainer.total_training_steps``."""

    ratio_min: float = 1e-4
    """Smallest selection ratio the autopilot may set (a fraction in (0, 1))."""

    ratio_max: float = 0.2
    """Largest selection ratio the autopilot may set (a fraction in (ratio_min, 1])."""

    ratio_init: float | None = None
    """``rho_0``, the ratio at zero error; null: the loss's configured ratio (``clip_cov_ratio`` / ``kl_cov_ratio``)."""

    kp: float = 10.0
    """Proportional gain on the log-space error (>= 0): a 10 % entropy shortfall multiplies the ratio by ~e^1."""

    ki: float = 2.0
    """Integral gain on the accumulated log-space error (>= 0). The defaults (kp, ki) = (10, 2) held entropy closest
    to its target among (2, 0.5), (10, 2) and (20, 5) on verl_ext's former in-process demo; on verl's trainer
    (``python -m verl_ext.demo``) their tracking is measured in docs/autopilot.md."""

    def __post_init__(self) -> None:
        if not isinstance(self.enable, bool):
            raise EntropyControlConfig.error("enable", f"{self.enable!r} is invalid: allowed true or false")
        if self.schedule not in SCHEDULES:
            raise EntropyControlConfig.error("schedule", f"{self.schedule!r} is invalid: allowed one of {list(SCHEDULES)}")
        _positive("target", self.target)
        if self.schedule == "constant":
            if self.target_end is not None:
                raise EntropyControlConfig.error("target_end", f"{self.target_end!r} is set but schedule=constant ignores it: "
                                          "set it to null, or choose schedule=linear or cosine")  # fmt: skip
        else:
            if self.target_end is None:
                raise EntropyControlConfig.error("target_end", f"is null but schedule={self.schedule} moves from target to "
                                          "target_end: set a number > 0")  # fmt: skip
            _positive("target_end", self.target_end)
        if self.schedule_steps is not None and (
            isinstance(self.schedule_steps, bool) or not isinstance(self.schedule_steps, int) or self.schedule_steps < 1
        ):
            raise EntropyControlConfig.error("schedule_steps", f"{self.schedule_steps!r} is invalid: allowed null or an integer >= 1")
        _number("ratio_min", self.ratio_min)
        _number("ratio_max", self.ratio_max)
        if not 0.0 < self.ratio_min < self.ratio_max <= 1.0:
            raise EntropyControlConfig.error("ratio_min", f"ratio_min={self.ratio_min!r}, ratio_max={self.ratio_max!r} are "
                                      "invalid: allowed 0 < ratio_min < ratio_max <= 1 (fractions of the tokens)")  # fmt: skip
        if self.ratio_init is not None and not self.ratio_min <= _number("ratio_init", self.ratio_init) <= self.ratio_max:
            raise EntropyControlConfig.error("ratio_init", f"{self.ratio_init!r} is invalid: allowed null or a number in "
                                      f"[ratio_min, ratio_max] = [{self.ratio_min}, {self.ratio_max}]")  # fmt: skip
        for key in ("kp", "ki"):
            if _number(key, getattr(self, key)) < 0:
                raise EntropyControlConfig.error(key, f"{getattr(self, key)!r} is invalid: allowed a number >= 0")


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EntropyControlConfig.error(key, f"{value!r} is invalid: allowed a finite number")
    return float(value)


def _positive(key: str, value: Any) -> float:
    if _number(key, value) <= 0:
        raise EntropyControlConfig.error(key, f"{value!r} is invalid: allowed a number > 0 (nats per token)")
    return float(value)


def target_at(config: EntropyControlConfig, step: int, total_steps: int | None = None) -> float:
    """The target entropy at training step ``step`` (1-based, as verl counts): ``target`` for ``constant``;
    otherwise it moves from ``target`` (step 1) to ``target_end`` (step ``schedule_steps`` or ``total_steps``,
    and after) linearly or along a half cosine."""
    if config.schedule == "constant":
        return float(config.target)
    span = config.schedule_steps or total_steps
    if span is None or span < 1:
        raise EntropyControlConfig.error("schedule_steps", "is null and the run has no trainer.total_training_steps: set "
                                  "the number of steps the schedule takes")  # fmt: skip
    progress = 1.0 if span == 1 else min(max((step - 1) / (span - 1), 0.0), 1.0)
    if config.schedule == "cosine":
        progress = 0.5 * (1.0 - math.cos(math.pi * progress))
    return float(config.target + (config.target_end - config.target) * progress)  # type: ignore[operator]


@dataclass
class ControllerState:
    """What a checkpoint keeps: the integral, the last ratio and step (for the metrics and the resume check)."""

    integral: float = 0.0
    ratio: float | None = None
    step: int = 0


class EntropyController:
    """The PI law of the module docstring; one instance per trainer, ``update`` once per training step."""

    def __init__(self, config: EntropyControlConfig, ratio_init: float, total_steps: int | None = None):
        if not config.ratio_min <= ratio_init <= config.ratio_max:
            raise EntropyControlConfig.error("ratio_init", f"the loss's ratio {ratio_init!r} is outside [ratio_min, ratio_max] "
                                      f"= [{config.ratio_min}, {config.ratio_max}]: set verl_ext.entropy_control."
                                      "ratio_init or widen the bounds")  # fmt: skip
        self.config = config
        self.ratio_init = float(ratio_init)
        self.total_steps = total_steps
        self.state = ControllerState()

    def update(self, step: int, entropy: float) -> tuple[float, dict[str, float]]:
        """The ratio for step ``step`` given the batch's measured per-token ``entropy``, and the step's metrics."""
        cfg = self.config
        target = target_at(cfg, step, self.total_steps)
        error = math.log(target) - math.log(max(float(entropy), 1e-12))
        lo, hi = math.log(cfg.ratio_min), math.log(cfg.ratio_max)
        unclamped = math.log(self.ratio_init) + cfg.kp * error + cfg.ki * (self.state.integral + error)
        log_ratio = min(max(unclamped, lo), hi)
        saturated = log_ratio != unclamped
        winding_up = (unclamped > hi and error > 0) or (unclamped < lo and error < 0)
        if not winding_up:
            self.state.integral += error
        ratio = math.exp(log_ratio)
        self.state.ratio, self.state.step = ratio, int(step)
        metrics = {
            CONTROL_TARGET: target,
            CONTROL_ENTROPY: float(entropy),
            CONTROL_RATIO: ratio,
            CONTROL_ERROR: error,
            CONTROL_INTEGRAL: self.state.integral,
            CONTROL_SATURATED: float(saturated),
        }
        return ratio, metrics

    def state_dict(self) -> dict[str, Any]:
        return asdict(self.state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = ControllerState(**state)


__all__ = [
    "ControllerState",
    "EntropyControlConfig",
    "EntropyController",
    "SCHEDULES",
    "target_at",
]
