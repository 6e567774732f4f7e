"""The three entropy controllers: each turns (target ``H*``, measured ``H``) into an actuator value once per step.

One interface (:class:`Controller`): ``step(target, entropy, actuator) -> ControlStep``, plus a state that a
checkpoint keeps. The actuator (:class:`~verl_ext.control.actuators.Actuator`) gives the range ``[lo, hi]``, the
value at zero error ``u0``, the direction ``d`` (+1: a larger value raises entropy; -1: lowers it) and, for
Skywork's gate, the value that turns it off. Every controller reports its error with one sign convention:
``e > 0`` means the entropy is below its target.

``pi`` - verl_ext's PI law in log space (entropy control's since the start)::

    e_t     = log H*_t - log H_t
    log u_t = clamp(log u0 + d (kp e_t + ki (I_{t-1} + e_t)),  log lo,  log hi)
    I_t     = I_{t-1} + e_t    unless u_t sits on a bound and e_t pushes further into it (anti-windup)

(a range that starts at 0 - the coefficient's default - starts at ``hi x LOG_FLOOR`` in log space, and an init of 0
there), and the same when the actuator delivered less than ``u_t`` in the direction ``e_t`` pushes (Clip-Cov's bounds
admitted fewer tokens than the ratio asked: :meth:`PIController.actuator_limited`), a bound that moves with the batch.

``skywork`` - Skywork-OR1's adaptive entropy control (arXiv 2505.22312, section 3.2.4; their ``EntController``)::

    u_t     = clamp(u_{t-1} + d * delta * (+1 if H_t < H*_t else -1),  lo,  hi)      (u_0 = the actuator's init)
    applied = u_t if H_t < H*_t else off                                              (the below-target gate)

``entropic`` - EntroPIC's PI law (arXiv 2511.15248; yk7333/EntroPIC ``dp_actor.py``), in linear space, with the
integral taken *before* this step's error::

    e_t     = H*_t - H_t
    u_t     = clamp(u0 + d (kp e_t + ki I_{t-1}),  lo,  hi)
    I_t     = I_{t-1} + k_t e_t    unless u_t sits on a bound and e_t pushes further into it (anti-windup)

EntroPIC's code has no anti-windup (the output is clamped, the integral is not; ``EntroPICController(...,
anti_windup=False)`` reproduces it): there a stretch on a bound - or one implausible but finite measurement - leaves
an integral that pins the actuator to that bound for as many steps as it took to build.

On EntroPIC's own actuator (``pos_weight``: ``d = -1``, ``u0 = 0``, range [-1, 1]) this is their
``alpha = clip(Kp (H - H*) + Ki I, -1, 1)``. ``k_t`` is the number of integrations of step ``t``: 1 with
``entropic_integral_per=step``; with ``mini_batch`` (the default, EntroPIC's cadence) the number of optimiser
mini-batches of the step (``ppo_epochs x`` mini-batches per epoch), each integrating the same ``e_t``.

Their code measures ``H`` per micro-batch in the update (the current policy's entropy), recomputes alpha for every
micro-batch from it and from the integral so far, and adds each micro-batch's share of its error to ``I``, so ``I``
grows by one error per optimiser mini-batch. verl_ext measures the training batch's entropy once per step, before
the update (the old-log-prob pass: no host sync in the update, the same value whatever the micro-batching or the GPU
count) and holds alpha for the step; ``mini_batch`` gives the integral their per-step growth (``k_t`` errors), and
differs from theirs in that every mini-batch's error is the step's pre-update entropy error and alpha does not change
within the step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Protocol

from verl_ext.control.actuators import Actuator

CONTROLLERS = ("pi", "skywork", "entropic")
LOG_FLOOR = 1e-3
"""``pi`` on a range that starts at 0 (the entropy coefficient's default ``coef_min``): its log range starts at
``hi x LOG_FLOOR`` (three decades, as the ratio's default [1e-4, 0.2]), which is also its value at zero error when the
actuator's init is 0 - in effect off, until the integral raises it."""


@dataclass(frozen=True)
class ControlStep:
    """What a controller decided for one step."""

    value: float
    """The actuator value applied at the step (after the gate)."""
    error: float
    """The controller's error, > 0 when the entropy is below target (log ratio for ``pi``, difference otherwise)."""
    integral: float
    """The controller's integral after the step (0 for ``skywork``)."""
    saturated: bool
    """Whether the law's output was clamped to a bound of the actuator's range."""
    gate: float | None = None
    """``skywork``: 1 while the term applies (entropy below target), else 0; ``None`` for the others."""
    estimates: dict[str, float] | None = None
    """``auto``: its estimates (noise, gain, drift, filtered entropy) by metric key; ``None`` for the others."""


@dataclass
class ControllerState:
    """What a checkpoint keeps of a controller: its integral and last value, and the step (for the resume check)."""

    integral: float = 0.0
    value: float | None = None
    step: int = 0


class Controller(Protocol):
    name: ClassVar[str]
    state: ControllerState

    def step(self, target: float, entropy: float, actuator: Actuator) -> ControlStep: ...


def _clamp(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


class PIController:
    """``pi``: proportional-integral law in log space with anti-windup (module docstring)."""

    name: ClassVar[str] = "pi"

    def __init__(self, kp: float, ki: float):
        self.kp, self.ki = float(kp), float(ki)
        self.state = ControllerState()
        self._integrated = 0.0  # the error the last step added to the integral (0 when anti-windup held it)

    def step(self, target: float, entropy: float, actuator: Actuator) -> ControlStep:
        if actuator.hi <= 0:
            raise ValueError(f"the pi controller works in log space: the {actuator.name} range must reach above 0")
        error = math.log(target) - math.log(max(entropy, 1e-12))
        bottom = actuator.lo if actuator.lo > 0 else actuator.hi * LOG_FLOOR
        lo, hi = math.log(bottom), math.log(actuator.hi)
        push = actuator.direction * error
        unclamped = math.log(max(actuator.init, bottom)) + actuator.direction * (self.kp * error + self.ki * (self.state.integral + error))
        log_value = _clamp(unclamped, lo, hi)
        self._integrated = 0.0
        if not ((unclamped > hi and push > 0) or (unclamped < lo and push < 0)):  # anti-windup
            self.state.integral += error
            self._integrated = error
        value = _clamp(math.exp(log_value), bottom, actuator.hi)  # exp(log hi) may round a hair above hi
        self.state.value = value
        return ControlStep(value, error, self.state.integral, log_value != unclamped)

    def actuator_limited(self, actuator: Actuator) -> bool:
        """The last step's value could not act in full in the direction its error pushed (the actuator delivered
        less): take that error out of the integral again, as on a bound. Returns whether the integral changed."""
        if self._integrated == 0.0 or actuator.direction * self._integrated <= 0:
            return False
        self.state.integral -= self._integrated
        self._integrated = 0.0
        return True


class SkyworkController:
    """``skywork``: the +-delta rule with clamps and the below-target gate (module docstring)."""

    name: ClassVar[str] = "skywork"

    def __init__(self, delta: float):
        self.delta = float(delta)
        self.state = ControllerState()

    def step(self, target: float, entropy: float, actuator: Actuator) -> ControlStep:
        if actuator.off is None:
            raise ValueError(f"the skywork controller's gate needs an off value; actuator {actuator.name} has none")
        previous = actuator.init if self.state.value is None else self.state.value
        below = entropy < target
        unclamped = previous + actuator.direction * self.delta * (1.0 if below else -1.0)
        value = _clamp(unclamped, actuator.lo, actuator.hi)
        self.state.value = value
        applied = value if below else actuator.off
        return ControlStep(applied, target - entropy, 0.0, value != unclamped, gate=float(below))


class EntroPICController:
    """``entropic``: EntroPIC's PI law, linear, integral before the step's error, with anti-windup unless
    ``anti_windup`` is false (EntroPIC's own code; module docstring)."""

    name: ClassVar[str] = "entropic"

    def __init__(self, kp: float, ki: float, anti_windup: bool = True):
        self.kp, self.ki, self.anti_windup = float(kp), float(ki), bool(anti_windup)
        self.state = ControllerState()

    def step(self, target: float, entropy: float, actuator: Actuator, integrations: int = 1) -> ControlStep:
        """``integrations``: how many times the step's error enters the integral (``k_t``, >= 1)."""
        if isinstance(integrations, bool) or not isinstance(integrations, int) or integrations < 1:
            raise ValueError(f"the entropic controller integrates k >= 1 times a step; got {integrations!r}")
        error = target - entropy
        unclamped = actuator.init + actuator.direction * (self.kp * error + self.ki * self.state.integral)
        value = _clamp(unclamped, actuator.lo, actuator.hi)
        push = actuator.direction * error  # the sign in which the error moves u through the integral
        wound = (unclamped > actuator.hi and push > 0) or (unclamped < actuator.lo and push < 0)
        if not (self.anti_windup and wound):
            self.state.integral += integrations * error
        self.state.value = value
        return ControlStep(value, error, self.state.integral, value != unclamped)


def make_controller(name: str, config: Any) -> Controller:
    """The controller ``name`` with its gains from an :class:`~verl_ext.control.config.EntropyControlConfig`."""
    if name == "pi":
        return PIController(config.kp, config.ki)
    if name == "skywork":
        return SkyworkController(config.skywork_delta)
    if name == "entropic":
        return EntroPICController(config.entropic_kp, config.entropic_ki)
    raise ValueError(f"unknown controller {name!r}; allowed {list(CONTROLLERS)}")


def state_dict(controller: Controller) -> dict[str, Any]:
    return {"controller": controller.name, **asdict(controller.state)}


__all__ = ["CONTROLLERS", "LOG_FLOOR", "ControlStep", "Controller", "ControllerState", "EntroPICController", "PIController",
           "SkyworkController", "make_controller", "state_dict"]  # fmt: skip
