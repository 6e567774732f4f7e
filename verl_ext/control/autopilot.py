"""Entropy control: hold the policy's entropy on a target with one of four controllers driving one of four actuators.

The target ``H*`` (nats per token, or a ratio to the first step's entropy: ``target_unit``; constant or scheduled:
:mod:`~verl_ext.control.targets`) is compared each step with the batch's measured entropy
``H`` - the mean per-token entropy of the old-log-prob pass, which verl computes anyway - before the update of the
same step (no lag). A controller (:mod:`~verl_ext.control.controllers`: ``pi`` in log space, Skywork-OR1's
``skywork`` rule, EntroPIC's ``entropic`` law; :mod:`~verl_ext.control.self_tuning`: ``auto``, which measures its
noise and learns its plant) turns the gap into the value of an actuator
(:mod:`~verl_ext.control.actuators`: Clip-Cov's / KL-Cov's selection ratio ``cov_ratio``, the entropy-loss
coefficient ``entropy_coef``, EntroPIC's weight ``pos_weight``, the PPO upper clip bound ``clip_high``); :data:`~verl_ext.control.actuators.PAIRS` lists
the pairs that make sense. Everything here is pure Python (no torch, no verl): :class:`EntropyControlConfig` (the
``verl_ext.entropy_control`` keys and their validation), the target (:mod:`~verl_ext.control.targets`) and
:class:`EntropyController` (controller + actuator + schedule, whose state the trainers save with every checkpoint).
"""

from __future__ import annotations

import math
import logging
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from verl_ext.config import PrefixedConfig
from verl_ext.contract import (CONTROL_ACTUATOR_KEYS, CONTROL_ANCHOR, CONTROL_BAD_STEPS, CONTROL_ENTROPY, CONTROL_ERROR, CONTROL_GATE,
                               CONTROL_INTEGRAL, CONTROL_INTEGRATIONS, CONTROL_LIMITED, CONTROL_SATURATED, CONTROL_TARGET,
                               CONTROL_VALUE)
from verl_ext.control.actuators import (ACTUATORS, CLIP_HIGH_MAX, CLIP_HIGH_MIN, PAIRS, REFUSED, Actuator,
                                        actuator_from_config)
from verl_ext.control.controllers import CONTROLLERS as FIXED_LAW_CONTROLLERS
from verl_ext.control.controllers import Controller, PIController, make_controller, state_dict
from verl_ext.control.self_tuning import NOISE_RATIOS, SelfTuningController
from verl_ext.control.targets import SCHEDULES, TARGET_UNITS, target_at, target_nats  # noqa: F401  (target_at: re-exported)

logger = logging.getLogger(__name__)

AUTOPILOT_CONFIG_PREFIX = "verl_ext.entropy_control."
STATE_SCHEMA = 4
"""The version of :meth:`EntropyController.state_dict`'s layout (4: with ``target_unit``, the anchor ``H_0`` and the
log entropies it averages so far); a checkpoint with another is an error on load, except schema 2 with
``target_unit=nats`` (it lacks only the anchor, which a target in nats does not use) and schema 3 (its anchor is one
step's entropy: it loads as ``initial_steps=1``)."""
WEIGHT_NORMS = ("high_prob", "all_tokens")
"""``weight_norm``: what EntroPIC's term is normalised by (:mod:`verl_ext.trainer.actor_loss`)."""
CONTROLLERS = (*FIXED_LAW_CONTROLLERS, "auto")
"""Every ``controller`` value: the fixed laws of :mod:`~verl_ext.control.controllers` and the self-tuning ``auto``."""
INITIAL_STEPS = 4
"""``initial_steps``' default. On the plant fitted from SmolLM2's committed logs (:mod:`verl_ext.analysis.plant`:
measurement noise 0.50, process noise 0.17, drift -0.049 in log entropy per step) the geometric mean of the first
``k`` steps misses the initial log entropy by (root mean square)
``sqrt(0.50^2 / k + 0.17^2 (k - 1)(2k - 1) / 6k + (0.049 (k - 1) / 2)^2)``: 0.50 for one step, 0.36 for 2, 0.32
for 3, 0.31 for 4 (the least), 0.31 for 5, 0.32 for 6 - more steps average the prompts' noise out, but the entropy
wanders and drifts meanwhile."""
AUTO_LAG_MAX = 4
"""The largest ``auto_lag`` (the committed logs' fits: 0-2 steps)."""
AUTO_COEF_REACH = 0.1
"""``controller=auto``'s default ``coef_max``: the entropy term's gradient stays within a
tenth of the policy gradient's per-token scale (GRPO's and DAPO's advantages are normalised to unit scale, the
entropy's gradient on a token's logits is at most of the order of its entropy), so it shapes the entropy without
outweighing the reward; the real model's fitted plant holds 0.3 nats at ~0.027 (:mod:`verl_ext.analysis.plant`)."""
FIXED_LAW_COEF_MAX = 0.005
"""The other controllers' default ``coef_max``: Skywork-OR1's ``MAX_ENT_COEF``."""
INTEGRAL_CADENCES = ("mini_batch", "step")
"""``entropic_integral_per``: how often EntroPIC's integral takes the error (:mod:`~verl_ext.control.controllers`)."""

OWNED_KEYS = {
    "kp": ("controller", "pi"), "ki": ("controller", "pi"), "skywork_delta": ("controller", "skywork"),
    "entropic_kp": ("controller", "entropic"), "entropic_ki": ("controller", "entropic"),
    "entropic_integral_per": ("controller", "entropic"),
    "auto_memory": ("controller", "auto"), "auto_lag": ("controller", "auto"),
    "initial_steps": ("target_unit", "initial"),
    **{f"ratio_{k}": ("actuator", "cov_ratio") for k in ("min", "max", "init")},
    **{f"coef_{k}": ("actuator", "entropy_coef") for k in ("min", "max", "init")},
    **{f"weight_{k}": ("actuator", "pos_weight") for k in ("min", "max", "init", "norm")},
    **{f"clip_high_{k}": ("actuator", "clip_high") for k in ("min", "max", "init")},
}  # fmt: skip
"""Keys that only one controller or actuator reads: set away from its default while another is chosen, it would be
ignored, so it is an error."""


@dataclass
class EntropyControlConfig(PrefixedConfig):
    """The ``verl_ext.entropy_control`` keys (``configs/verl_ext_trainer.yaml``)."""

    KEY_PREFIX: ClassVar[str] = AUTOPILOT_CONFIG_PREFIX

    enable: bool = False
    """Turn the autopilot on."""

    fresh_on_resume: bool = False
    """On resume from a checkpoint without the autopilot's state file (``global_step_<N>/verl_ext_driver.json``: a
    checkpoint of a run without the autopilot, or the file lost): ``false`` is an error naming the file; ``true``
    starts the controller from its initial state (integral 0, the actuator's init) with a warning."""

    controller: str = "auto"
    """``auto`` (self-tuning: measures its noise, learns the actuator's gain and the drift online, no gains to size;
    :mod:`~verl_ext.control.self_tuning`), ``pi`` (log-space PI with the gains ``kp`` / ``ki``, anti-windup),
    ``skywork`` (Skywork-OR1's +-delta rule with the below-target gate) or ``entropic`` (EntroPIC's linear PI law)."""

    actuator: str = "entropy_coef"
    """``entropy_coef`` (the default: it works with every policy loss; the real-model runs held the target closest with
    it), ``cov_ratio`` (Clip-Cov / KL-Cov selection ratio; ``clip_cov`` / ``kl_cov`` with ``cov_scope=batch``),
    ``entropy_coef`` (the coefficient of verl's entropy term; actor ``entropy_coeff`` must be 0), ``pos_weight``
    (EntroPIC's alpha on high-probability tokens; any policy loss) or ``clip_high`` (the PPO upper clip bound
    ``clip_ratio_high``; the losses of :data:`~verl_ext.control.actuators.CLIP_HIGH_LOSSES`)."""

    target: float | None = None
    """Target entropy (> 0) in ``target_unit``: nats per token, or a ratio to the first steps' entropy; the start
    value of a schedule. Required with ``enable=true`` (no entropy suits every model: a run without control logs its
    level as ``actor/entropy``)."""

    target_unit: str = "nats"
    """The unit of ``target`` and ``target_end``: ``nats`` (nats per token) or ``initial`` (a ratio to ``H_0``, the
    geometric mean of the entropies measured at the first ``initial_steps`` usable steps, as AER anchors its target to
    the initial entropy: 0.5 holds half of it). With ``initial`` those steps only measure and apply the actuator's
    rest value; the controller acts from the next step on ``target x H_0`` (:mod:`~verl_ext.control.targets`)."""

    initial_steps: int = INITIAL_STEPS
    """``target_unit=initial``: how many usable steps the anchor ``H_0`` averages (geometric mean; an integer >= 1;
    default :data:`INITIAL_STEPS`, the least error about the policy's initial entropy on the real model's fitted
    plant)."""

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
    (``python -m verl_ext.demo``) their tracking is measured on the results page (docs/results.md)."""

    skywork_delta: float = 1e-4
    """``skywork``: the step ``delta`` of the coefficient per training step (> 0; Skywork-OR1: 0.0001, the
    ``DELTA_ENT_COEF`` of every ``or1_scripts/train/*.sh``; their yaml's 0.001 is overridden by every script)."""

    entropic_kp: float = 1.0
    """``entropic``: proportional gain on ``H* - H`` (>= 0; EntroPIC's ``entropy_control_p`` = 1)."""

    entropic_ki: float = 0.01
    """``entropic``: integral gain on the accumulated ``H* - H`` (>= 0; EntroPIC's ``entropy_control_i`` = 0.01)."""

    entropic_integral_per: str = "mini_batch"
    """``entropic``: how often the integral takes the error. ``mini_batch`` (EntroPIC's cadence: their integral grows
    by one error per optimiser mini-batch) adds the step's error once per optimiser mini-batch of the step
    (``ppo_epochs x`` the mini-batches of the training batch), each time the same pre-update entropy error; ``step``
    adds it once per training step (verl_ext's cadence before; with DAPO's 8 mini-batches an 8x weaker integral)."""

    coef_min: float = 0.0
    """``entropy_coef``: smallest coefficient (default 0 with every controller, Skywork-OR1's ``MIN_ENT_COEF`` of their
    ``or1_scripts/train/*.sh``: the term only ever raises entropy). ``pi``, ``skywork`` and ``entropic`` take it >= 0;
    ``pi`` works in log space: with 0 its range starts at ``coef_max x``
    :data:`~verl_ext.control.controllers.LOG_FLOOR`. ``auto`` takes it down to ``-coef_max``: a negative coefficient turns the entropy term into entropy
    *minimisation* (the loss rewards sharper distributions), which makes the control two-sided - opt in by setting
    it below 0."""

    coef_max: float | None = None
    """``entropy_coef``: largest coefficient (> coef_min); null: :data:`AUTO_COEF_REACH` (0.1) with
    ``controller=auto``, 0.005 with the others (Skywork-OR1's ``MAX_ENT_COEF`` of their ``or1_scripts/train/*.sh``;
    their yaml's 0.5 is overridden by every script)."""

    coef_init: float = 0.0
    """``entropy_coef``: start value (``skywork``) or value at zero error (``pi``, ``entropic``), in
    [coef_min, coef_max] (Skywork-OR1: 0, the ``ENTROPY_COEFF`` their ``or1_scripts/train/*.sh`` pass as the
    controller's initial coefficient). ``pi`` with 0 starts from the bottom of its log range; ``auto`` takes it as
    the value before step 1, from which its first move is limited like every later one (its drift estimate, not the
    init, sets the level)."""

    max_bad_steps: int = 3
    """The run stops, with an error naming the metric and the step, on the ``max_bad_steps``-th unusable measured
    entropy in a row (an integer >= 1; 1 stops on the first): not finite, <= 0 (an empty response mask, a NaN in the
    old-log-prob pass) or above the log of the vocabulary's size (impossible). Each one before it is not learned
    from, the actuator holds its last value, ``entropy_control/bad_steps`` counts it, and the run's first one logs a
    warning."""

    auto_memory: int = 20
    """``auto``: the steps over which its estimates of the drift, the actuator's gain and the noise forget (an
    integer >= 2): the committed runs' entropy level, and with it the plant, moves over tens of steps."""

    auto_lag: int = 1
    """``auto``: the steps between an update and the first measurement it moves beyond the next (an integer in
    [0, 4]; the fits of the committed logs: 0-2, one step plus Adam's momentum)."""

    weight_min: float = -1.0
    """``pos_weight``: smallest alpha (>= -1; EntroPIC clips alpha to [-1, 1])."""

    weight_max: float = 1.0
    """``pos_weight``: largest alpha (<= 1, > weight_min)."""

    weight_init: float = 0.0
    """``pos_weight``: alpha at zero error (EntroPIC: 0, the plain loss), in [weight_min, weight_max]."""

    clip_high_min: float = CLIP_HIGH_MIN
    """``clip_high``: the narrowest upper clip bound ``eps_high`` (> 0; default 0.2, PPO's symmetric bound and DAPO's
    ``eps_low``: never tighter than standard PPO)."""

    clip_high_max: float = CLIP_HIGH_MAX
    """``clip_high``: the widest upper clip bound ``eps_high`` (> clip_high_min; default 1.0, BAPO's widest: ratio 2.0)."""

    clip_high_init: float | None = None
    """``clip_high``: the rest value (the value at zero error, and the value of a ``target_unit=initial`` run's first
    step), in [clip_high_min, clip_high_max]; null: the actor's configured ``clip_ratio_high`` (DAPO's recipes: 0.28)."""

    weight_norm: str = "high_prob"
    """``pos_weight``: what EntroPIC's term ``alpha * sum_HP(-r |A|)`` is divided by. ``high_prob`` (EntroPIC's): the
    high-probability tokens of each micro-batch, each micro-batch weighted by its share of the mini-batch's tokens;
    ``all_tokens``: all valid tokens of the mini-batch (verl's token-mean; the gain is then ``N_hp / N`` times
    EntroPIC's)."""

    def __post_init__(self) -> None:
        for key in ("enable", "fresh_on_resume"):
            if not isinstance(getattr(self, key), bool):
                raise EntropyControlConfig.error(key, f"{getattr(self, key)!r} is invalid: allowed true or false")
        if self.schedule not in SCHEDULES:
            raise EntropyControlConfig.error("schedule", f"{self.schedule!r} is invalid: allowed one of {list(SCHEDULES)}")
        if self.target_unit not in TARGET_UNITS:
            raise EntropyControlConfig.error("target_unit", f"{self.target_unit!r} is invalid: allowed one of "
                                             f"{list(TARGET_UNITS)} (nats per token, or a ratio to the first step's "
                                             "entropy)")  # fmt: skip
        if self.target is None:
            if self.enable:
                raise EntropyControlConfig.error("target", "is null but enable=true: set the entropy to hold - in nats "
                                                 "per token (target=0.3; a run without control logs the policy's level "
                                                 "as actor/entropy, and bf16 reads higher than fp32), or as a ratio to "
                                                 "the first steps' entropy with target_unit=initial (target=0.8 holds "
                                                 "80 % of it)")  # fmt: skip
        else:
            _positive("target", self.target, self.target_unit)
        if self.schedule == "constant":
            if self.target_end is not None:
                raise EntropyControlConfig.error("target_end", f"{self.target_end!r} is set but schedule=constant ignores it: "
                                          "set it to null, or choose schedule=linear or cosine")  # fmt: skip
        else:
            if self.target_end is None:
                raise EntropyControlConfig.error("target_end", f"is null but schedule={self.schedule} moves from target to "
                                          "target_end: set a number > 0")  # fmt: skip
            _positive("target_end", self.target_end, self.target_unit)
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
        for key, low, high in (("auto_memory", 2, None), ("auto_lag", 0, AUTO_LAG_MAX), ("max_bad_steps", 1, None),
                               ("initial_steps", 1, None)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
                allowed = f"an integer in [{low}, {high}]" if high is not None else f"an integer >= {low}"
                raise EntropyControlConfig.error(key, f"{value!r} is invalid: allowed {allowed}")
        for key in ("kp", "ki", "entropic_kp", "entropic_ki"):
            if _number(key, getattr(self, key)) < 0:
                raise EntropyControlConfig.error(key, f"{getattr(self, key)!r} is invalid: allowed a number >= 0")
        if self.weight_norm not in WEIGHT_NORMS:
            raise EntropyControlConfig.error("weight_norm", f"{self.weight_norm!r} is invalid: allowed one of "
                                             f"{list(WEIGHT_NORMS)}")  # fmt: skip
        if self.entropic_integral_per not in INTEGRAL_CADENCES:
            raise EntropyControlConfig.error("entropic_integral_per", f"{self.entropic_integral_per!r} is invalid: "
                                             f"allowed one of {list(INTEGRAL_CADENCES)}")  # fmt: skip
        if _number("skywork_delta", self.skywork_delta) <= 0:
            raise EntropyControlConfig.error("skywork_delta", f"{self.skywork_delta!r} is invalid: allowed a number > 0")
        if self.controller not in CONTROLLERS:
            raise EntropyControlConfig.error("controller", f"{self.controller!r} is invalid: allowed one of {list(CONTROLLERS)}")
        if self.actuator not in ACTUATORS:
            raise EntropyControlConfig.error("actuator", f"{self.actuator!r} is invalid: allowed one of {list(ACTUATORS)}")
        if (self.controller, self.actuator) not in PAIRS:
            allowed = sorted(a for c, a in PAIRS if c == self.controller)
            raise EntropyControlConfig.error("actuator", f"{self.actuator!r} cannot be driven by controller="
                                             f"{self.controller}: {REFUSED[(self.controller, self.actuator)]}; allowed "
                                             f"with {self.controller}: {allowed}")  # fmt: skip
        for key, (role, owner) in OWNED_KEYS.items():
            chosen = getattr(self, role)
            if chosen != owner and getattr(self, key) != _DEFAULTS[key]:
                raise EntropyControlConfig.error(key, f"{getattr(self, key)!r} is set but {role}={chosen} ignores it "
                                                 f"(it is read by {role}={owner} only): remove it, or choose "
                                                 f"{role}={owner}")  # fmt: skip
        if self.actuator == "entropy_coef" and self.coef_max is None:  # its default depends on the controller
            self.coef_max = AUTO_COEF_REACH if self.controller == "auto" else FIXED_LAW_COEF_MAX
        if self.controller == "auto" and self.actuator == "entropy_coef":
            if _number("coef_max", self.coef_max) <= 0 or not -self.coef_max <= _number("coef_min", self.coef_min) < self.coef_max:
                raise EntropyControlConfig.error("coef_min", f"coef_min={self.coef_min!r}, coef_max={self.coef_max!r} are "
                                                 "invalid with controller=auto: allowed -coef_max <= coef_min < coef_max, "
                                                 "coef_max > 0 (below 0 the coefficient minimises entropy: opt in)")  # fmt: skip
        elif self.actuator == "entropy_coef":
            self._check_range("coef", 0.0, None)
        self._check_range("weight", -1.0, 1.0)
        lo, hi = _number("clip_high_min", self.clip_high_min), _number("clip_high_max", self.clip_high_max)
        if not 0.0 < lo < hi:
            raise EntropyControlConfig.error("clip_high_min", f"clip_high_min={lo!r}, clip_high_max={hi!r} are invalid: "
                                             "allowed 0 < clip_high_min < clip_high_max (eps_high: the ratio bound is "
                                             "1 + eps_high)")  # fmt: skip
        if self.clip_high_init is not None and not lo <= _number("clip_high_init", self.clip_high_init) <= hi:
            raise EntropyControlConfig.error("clip_high_init", f"{self.clip_high_init!r} is invalid: allowed null (the "
                                             "actor's clip_ratio_high) or a number in [clip_high_min, clip_high_max] = "
                                             f"[{lo}, {hi}]")  # fmt: skip

    def _check_range(self, prefix: str, floor: float, ceiling: float | None) -> None:
        """``<prefix>_min < <prefix>_max`` within ``[floor, ceiling]``, and ``<prefix>_init`` between them."""
        lo, hi, init = (_number(f"{prefix}_{k}", getattr(self, f"{prefix}_{k}")) for k in ("min", "max", "init"))
        top = "" if ceiling is None else f" <= {ceiling}"
        if not (floor <= lo < hi and (ceiling is None or hi <= ceiling)):
            raise EntropyControlConfig.error(f"{prefix}_min", f"{prefix}_min={lo!r}, {prefix}_max={hi!r} are invalid: "
                                             f"allowed {floor} <= {prefix}_min < {prefix}_max{top}")  # fmt: skip
        if not lo <= init <= hi:
            raise EntropyControlConfig.error(f"{prefix}_init", f"{init!r} is invalid: allowed a number in "
                                             f"[{prefix}_min, {prefix}_max] = [{lo}, {hi}]")  # fmt: skip


_DEFAULTS = {f.name: f.default for f in fields(EntropyControlConfig)}


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EntropyControlConfig.error(key, f"{value!r} is invalid: allowed a finite number")
    return float(value)


def _positive(key: str, value: Any, unit: str = "nats") -> float:
    if _number(key, value) <= 0:
        meaning = "nats per token" if unit == "nats" else "with target_unit=initial: a ratio to the first step's entropy"
        raise EntropyControlConfig.error(key, f"{value!r} is invalid: allowed a number > 0 ({meaning})")
    return float(value)


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
            # auto's coordinates are measured from the range's bottom (log(ratio / ratio_min), eps_high - clip_high_min)
            if self.actuator.name == "cov_ratio":
                out["ratio_min"] = self.config.ratio_min
            elif self.actuator.name == "clip_high":
                out["clip_high_min"] = self.config.clip_high_min
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
    "EntropyControlConfig",
    "EntropyController",
    "INTEGRAL_CADENCES",
    "SCHEDULES",
    "STATE_SCHEMA",
    "WEIGHT_NORMS",
    "target_at",
]
