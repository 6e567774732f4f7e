"""Entropy control: hold the policy's entropy on a target with one of four controllers driving one of four actuators.

The target ``H*`` (nats per token, or a ratio to the first step's entropy: ``target_unit``; constant or scheduled:
:mod:`~verl_ext.control.targets`) is compared each step with the batch's measured entropy
``H`` - the mean per-token entropy of the old-log-prob pass, which verl computes anyway - before the update of the
same step (no lag). A controller (:mod:`~verl_ext.control.controllers`: ``pi`` in log space, Skywork-OR1's
``skywork`` rule, EntroPIC's ``entropic`` law; :mod:`~verl_ext.control.self_tuning`: ``auto``, which measures its
noise and learns its plant) turns the gap into the value of an actuator
(:mod:`~verl_ext.control.actuators`: Clip-Cov's / KL-Cov's selection ratio ``cov_ratio``, the entropy-loss
coefficient ``entropy_coef``, EntroPIC's weight ``pos_weight``, the PPO upper clip bound ``clip_high``); :data:`~verl_ext.control.actuators.PAIRS` lists
the pairs that make sense. Everything here is pure Python (no torch, no verl): :class:`EntropyController`
(controller + actuator + schedule, whose state the trainers save with every checkpoint); its keys and their
validation are :mod:`~verl_ext.control.config`'s :class:`~verl_ext.control.config.EntropyControlConfig`, re-exported
here.
"""

from __future__ import annotations

import math
import logging
from typing import Any

from verl_ext.contract import (CONTROL_ACTUATOR_KEYS, CONTROL_ANCHOR, CONTROL_BAD_STEPS, CONTROL_ENTROPY, CONTROL_ERROR, CONTROL_GATE,
                               CONTROL_INTEGRAL, CONTROL_INTEGRATIONS, CONTROL_LIMITED, CONTROL_SATURATED, CONTROL_TARGET,
                               CONTROL_VALUE)
from verl_ext.control.actuators import Actuator, actuator_from_config
from verl_ext.control.config import (AUTO_LAG_MAX, CONTROLLERS, ENTROPY_CONTROL_CONFIG_PREFIX, INTEGRAL_CADENCES,
                                     WEIGHT_NORMS, EntropyControlConfig)
from verl_ext.control.controllers import Controller, PIController, make_controller, state_dict
from verl_ext.control.self_tuning import NOISE_RATIOS, SelfTuningController
from verl_ext.control.targets import SCHEDULES, target_at, target_nats  # noqa: F401  (re-exported)

logger = logging.getLogger(__name__)

STATE_SCHEMA = 4
"""The version of :meth:`EntropyController.state_dict`'s layout (4: with ``target_unit``, the anchor ``H_0`` and the
log entropies it averages so far); a checkpoint with another is an error on load, except schema 2 with
``target_unit=nats`` (it lacks only the anchor, which a target in nats does not use) and schema 3 (its anchor is one
step's entropy: it loads as ``initial_steps=1``)."""


class EntropyController:
    """Controller + actuator + schedule for one trainer; ``update`` once per training step."""

    def __init__(self, config: EntropyControlConfig, ratio_init: float | None = None, total_steps: int | None = None,
                 clip_high: float | None = None, vocab_size: int | None = None):
        """``ratio_init``: the ``cov_ratio`` actuator's value at zero error when ``config.ratio_init`` is null (the
        loss's configured ``clip_cov_ratio`` / ``kl_cov_ratio``); ``clip_high``: the actor's configured
        ``clip_ratio_high``, the ``clip_high`` actuator's rest value when ``config.clip_high_init`` is null;
        ``vocab_size``: the policy's output vocabulary, whose log bounds a token's entropy (a measurement above it is
        unusable); ``None``: no upper bound."""
        if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2):
            raise ValueError(f"vocab_size must be an integer >= 2 (the policy's output vocabulary) or None; got "
                             f"{vocab_size!r}")  # fmt: skip
        self.config = config
        self.total_steps = total_steps
        self.entropy_max = None if vocab_size is None else math.log(vocab_size)
        """The largest possible per-token entropy, ``log(vocab_size)`` nats (``None``: not known)."""
        self.actuator: Actuator = actuator_from_config(config, ratio_init, clip_high)
        if config.actuator == "cov_ratio" and not config.ratio_min <= self.actuator.init <= config.ratio_max:
            raise EntropyControlConfig.error("ratio_init", f"the loss's ratio {self.actuator.init!r} is outside [ratio_min, "
                                      f"ratio_max] = [{config.ratio_min}, {config.ratio_max}]: set verl_ext.entropy_control."
                                      "ratio_init or widen the bounds")  # fmt: skip
        if config.actuator == "clip_high" and not config.clip_high_min <= self.actuator.init <= config.clip_high_max:
            raise EntropyControlConfig.error("clip_high_init", f"is null, so the rest value is the actor's clip_ratio_high"
                                             f"={self.actuator.init!r}, outside [clip_high_min, clip_high_max] = "
                                             f"[{config.clip_high_min}, {config.clip_high_max}]: set clip_high_init or "
                                             "widen the bounds")  # fmt: skip
        self.controller: Controller = (SelfTuningController(config.auto_memory, config.auto_lag)
                                       if config.controller == "auto" else make_controller(config.controller, config))  # fmt: skip
        self.last_step: int | None = None
        """The step of the last :meth:`update` (or of the loaded state); a second update of it is an error."""
        self.held: float | None = None
        """The actuator value applied at the last step (``None`` before the first): what an unusable measurement holds."""
        self.bad_steps = 0
        """How many measurements of the run were unusable (not finite, or <= 0)."""
        self.bad_in_a_row = 0
        """How many measurements in a row up to the last step were unusable (``max_bad_steps`` of them stop the run)."""
        self.last_held = False
        """Whether the last step held the actuator (an unusable measurement): nothing the step applied is learned."""
        self.anchor: float | None = None
        """``target_unit=initial``: ``H_0``, the geometric mean of the first ``initial_steps`` usable entropies
        (``None`` before them, and in nats)."""
        self.anchor_logs: list[float] = []
        """``target_unit=initial``: the log entropies of the usable steps so far, until ``initial_steps`` of them set
        the anchor."""

    @property
    def state(self):
        return self.controller.state

    def integrations(self, mini_batches: int) -> int:
        """How many times the step's error enters the integral (``entropic``): ``mini_batches`` (the step's optimiser
        mini-batches) with ``entropic_integral_per=mini_batch``, else 1."""
        if isinstance(mini_batches, bool) or not isinstance(mini_batches, int) or mini_batches < 1:
            raise ValueError(f"mini_batches must be an integer >= 1 (the step's optimiser mini-batches); got "
                             f"{mini_batches!r}")  # fmt: skip
        return mini_batches if self.config.entropic_integral_per == "mini_batch" else 1

    def update(self, step: int, entropy: float, mini_batches: int = 1) -> tuple[float, dict[str, float]]:
        """The actuator's value for step ``step`` given the batch's measured per-token ``entropy``, and the step's
        metrics (``entropy_control/*``). ``mini_batches``: the step's optimiser mini-batches (``ppo_epochs x`` the
        training batch's mini-batches), the number of integrations of ``entropic`` with ``entropic_integral_per=
        mini_batch``; the other controllers ignore it. Steps must increase: a second update of one step (or of an
        earlier one) is an error naming it, since it would integrate the step's error twice."""
        if self.last_step is not None and step <= self.last_step:
            raise RuntimeError(f"verl_ext entropy control: update for step {step} after the update of step "
                               f"{self.last_step}: the controller updates once per training step (a second update of "
                               "a step would count its error twice)")  # fmt: skip
        entropy = float(entropy)
        if not math.isfinite(entropy) or entropy <= 0 or (self.entropy_max is not None and entropy > self.entropy_max):
            return self._hold(step, target_nats(self.config, step, self.total_steps, self.anchor), entropy)
        self.bad_in_a_row = 0
        self.last_held = False
        if self.config.target_unit == "initial" and self.anchor is None:
            return self._anchor(step, entropy)
        target = target_nats(self.config, step, self.total_steps, self.anchor)
        metrics_extra: dict[str, float] = {} if self.anchor is None else {CONTROL_ANCHOR: self.anchor}
        if self.controller.name == "entropic":
            k = self.integrations(mini_batches)
            decided = self.controller.step(target, entropy, self.actuator, integrations=k)  # type: ignore[call-arg]
            metrics_extra[CONTROL_INTEGRATIONS] = float(k)
        else:
            decided = self.controller.step(target, entropy, self.actuator)
        self.controller.state.step = int(step)
        self.last_step = int(step)
        self.held = decided.value
        metrics = {
            CONTROL_TARGET: target,
            CONTROL_ENTROPY: entropy,
            CONTROL_VALUE: decided.value,
            CONTROL_ACTUATOR_KEYS[self.actuator.name]: decided.value,
            CONTROL_ERROR: decided.error,
            CONTROL_INTEGRAL: decided.integral,
            CONTROL_SATURATED: float(decided.saturated),
            CONTROL_BAD_STEPS: float(self.bad_steps),
        }
        if decided.gate is not None:
            metrics[CONTROL_GATE] = decided.gate
        if decided.estimates is not None:
            metrics.update(decided.estimates)
        metrics.update(metrics_extra)
        return decided.value, metrics

    def _anchor(self, step: int, entropy: float) -> tuple[float, dict[str, float]]:
        """``target_unit=initial``, one of the first ``initial_steps`` usable measurements: the last of them sets the
        anchor ``H_0`` (their geometric mean); the controller does not run (there is no target to compare with
        before it) and the actuator applies its rest value."""
        self.anchor_logs.append(math.log(entropy))
        if len(self.anchor_logs) >= self.config.initial_steps:
            self.anchor = math.exp(sum(self.anchor_logs) / len(self.anchor_logs))
        target = target_nats(self.config, step, self.total_steps, self.anchor)
        return self._apply_without_controller(step, target, entropy, self.actuator.init)

    def _hold(self, step: int, target: float, entropy: float) -> tuple[float, dict[str, float]]:
        """An unusable measurement (not finite, <= 0, or above ``log(vocab_size)``): the controller does not learn
        from it, the actuator holds the value of the last step (before the first: the actuator's init) - ``auto``
        advances its model over the step with that value (:meth:`SelfTuningController.hold
        <verl_ext.control.self_tuning.SelfTuningController.hold>`) -, ``entropy_control/bad_steps`` counts it, the
        run's first one warns, and the ``max_bad_steps``-th in a row is a ``RuntimeError`` naming the metric and the
        step."""
        self.bad_steps += 1
        self.bad_in_a_row += 1
        if self.bad_in_a_row >= self.config.max_bad_steps:
            raise RuntimeError(f"verl_ext entropy control: {CONTROL_ENTROPY} was {entropy!r} at step {step}, the "
                               f"{self.bad_in_a_row}th unusable measurement in a row ({self._unusable()}) - "
                               f"verl_ext.entropy_control.max_bad_steps={self.config.max_bad_steps}: the batch's "
                               "entropy cannot be measured (an empty response mask, or NaN / inf in the old-log-prob "
                               "pass), so the run stops instead of training blind")  # fmt: skip
        if self.bad_steps == 1:
            logger.warning("verl_ext entropy control: %s was %r at step %d (%s): not learned from, "
                           "the actuator holds its last value; %d such steps in a row stop the run "
                           "(verl_ext.entropy_control.max_bad_steps)", CONTROL_ENTROPY, entropy, step,
                           self._unusable(), self.config.max_bad_steps)  # fmt: skip
        self.last_held = True
        value = self.actuator.init if self.held is None else self.held
        if isinstance(self.controller, SelfTuningController):
            self.controller.hold(self.actuator, value)
        return self._apply_without_controller(step, target, entropy, value)

    def _unusable(self) -> str:
        """What makes a measurement unusable, in words."""
        top = "" if self.entropy_max is None else f", or above log(vocab_size) = {self.entropy_max:.4g}"
        return f"not finite, or <= 0{top}"

    def _apply_without_controller(self, step: int, target: float, entropy: float,
                                  value: float) -> tuple[float, dict[str, float]]:
        """A step the controller does not run on (the anchoring step, a held bad measurement): the actuator applies
        ``value``, the step is counted as done, and the metrics say so (not saturated, the integral unchanged)."""
        self.controller.state.step = int(step)
        self.last_step = int(step)
        self.held = value
        metrics = {
            CONTROL_TARGET: target,
            CONTROL_ENTROPY: entropy,
            CONTROL_VALUE: value,
            CONTROL_ACTUATOR_KEYS[self.actuator.name]: value,
            CONTROL_INTEGRAL: self.controller.state.integral,
            CONTROL_SATURATED: 0.0,
            CONTROL_BAD_STEPS: float(self.bad_steps),
        }
        if self.anchor is not None:
            metrics[CONTROL_ANCHOR] = self.anchor
        return value, metrics

    def actuator_limited(self, limited: bool, metrics: dict, applied: float | None = None) -> None:
        """After the step's selection (``cov_ratio``): ``limited`` when it took fewer tokens than the ratio asked
        (Clip-Cov's bounds admitted fewer candidates); ``applied``: the fraction of the tokens it took. For ``pi`` a
        limited step is a bound for its anti-windup (:meth:`PIController.actuator_limited
        <verl_ext.control.controllers.PIController.actuator_limited>`): the step's error leaves the integral if it pushed for more; ``auto`` learns from the
        applied fraction instead of the asked ratio. Writes ``entropy_control/limited`` and the integral it leaves to
        ``metrics``."""
        metrics[CONTROL_LIMITED] = float(limited)
        if self.last_held:  # the step held the last value: the controller took no error and set no value to correct
            return
        if limited and isinstance(self.controller, PIController) and self.controller.actuator_limited(self.actuator):
            metrics[CONTROL_INTEGRAL] = self.controller.state.integral
        if applied is not None and isinstance(self.controller, SelfTuningController):
            self.controller.applied(self.actuator, float(applied))

    def settings(self) -> dict[str, Any]:
        """The settings the saved state depends on: a resume with other values is an error naming the key."""
        out: dict[str, Any] = {"controller": self.controller.name, "actuator": self.actuator.name,
                               "target_unit": self.config.target_unit}
        if self.config.target_unit == "initial":
            out["initial_steps"] = self.config.initial_steps
        if isinstance(self.controller, SelfTuningController):
            out.update(auto_memory=self.controller.memory, auto_lag=self.controller.lag, noise_ratios=list(NOISE_RATIOS))
            # auto's coordinate on the ratio is measured from the range's bottom (log(ratio / ratio_min))
            if self.actuator.name == "cov_ratio":
                out["ratio_min"] = self.config.ratio_min
        return out

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint's state (JSON-safe): :data:`STATE_SCHEMA`, the :meth:`settings` it depends on, the
        controller's state and the bad-measurement counters."""
        return {"schema": STATE_SCHEMA, **self.settings(), "anchor": self.anchor, "anchor_logs": list(self.anchor_logs),
                "state": state_dict(self.controller),
                "guard": {"held": self.held, "bad_steps": self.bad_steps, "bad_in_a_row": self.bad_in_a_row,
                          "last_held": self.last_held}}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a saved state. Another schema, another controller or actuator, other ``auto`` settings (memory,
        lag, noise grid) or a state whose lists do not fit them is an error naming the key."""
        saved_schema = state.get("schema")
        if saved_schema == 2 and self.config.target_unit == "nats":  # schema 2 lacks only the anchor, unused in nats
            state = {**state, "schema": 3, "target_unit": "nats", "anchor": None}
        if state.get("schema") == 3:  # an anchor of one step's entropy, and nothing of one in progress
            one_step = {"initial_steps": 1} if state.get("target_unit") == "initial" else {}
            state = {**state, **one_step, "schema": STATE_SCHEMA, "anchor_logs": []}
        elif saved_schema == 2:
            raise EntropyControlConfig.error("target_unit", "initial needs the anchor H_0 that this checkpoint's "
                                             "entropy-control state (schema 2) does not hold: resume with "
                                             "target_unit=nats, or start a fresh run")  # fmt: skip
        if state.get("schema") != STATE_SCHEMA:
            raise EntropyControlConfig.error("schema", f"the checkpoint's entropy-control state has schema "
                                             f"{saved_schema!r}; "
                                             f"this verl_ext reads schema {STATE_SCHEMA}: start the controller afresh "
                                             "(remove the state file and set fresh_on_resume=true) or resume with the "
                                             "verl_ext that wrote it")  # fmt: skip
        saved = (state.get("controller"), state.get("actuator"))
        mine_pair = (self.controller.name, self.actuator.name)
        if saved != mine_pair:
            raise EntropyControlConfig.error("controller", f"the checkpoint's entropy-control state is controller="
                                             f"{saved[0]}, "
                                             f"actuator={saved[1]}; this run is controller={mine_pair[0]}, actuator="
                                             f"{mine_pair[1]}: resume with the same pair, or start a fresh run")  # fmt: skip
        for key, mine in self.settings().items():
            if state.get(key) != mine:
                raise EntropyControlConfig.error(key, f"the checkpoint's entropy-control state was saved with {key}="
                                                 f"{state.get(key)!r}; this run has {key}={mine!r}: resume with the "
                                                 "same setting, or start a fresh run")  # fmt: skip
        inner = dict(state["state"])
        inner.pop("controller", None)
        self.controller.state = type(self.controller.state)(**inner)
        if isinstance(self.controller, SelfTuningController):
            self.controller.check_state()
        guard = state["guard"]
        self.held, self.bad_steps = guard["held"], int(guard["bad_steps"])
        self.bad_in_a_row, self.last_held = int(guard["bad_in_a_row"]), bool(guard["last_held"])
        anchor = state.get("anchor")  # None in nats, or before initial_steps usable steps: they go on anchoring
        self.anchor = None if anchor is None else float(anchor)
        self.anchor_logs = [float(v) for v in state.get("anchor_logs", [])]
        self.last_step = int(self.controller.state.step) or None


__all__ = [
    "AUTO_LAG_MAX",
    "CONTROLLERS",
    "ENTROPY_CONTROL_CONFIG_PREFIX",
    "EntropyControlConfig",
    "EntropyController",
    "INTEGRAL_CADENCES",
    "SCHEDULES",
    "STATE_SCHEMA",
    "WEIGHT_NORMS",
    "target_at",
]
