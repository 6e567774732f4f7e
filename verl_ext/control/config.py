"""The entropy control's keys (``verl_ext.entropy_control``): :class:`EntropyControlConfig`, its defaults and its
validation at config time (pure Python; the controller that reads them: :mod:`~verl_ext.control.entropy_control`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from verl_ext.config import PrefixedConfig
from verl_ext.control.actuators import ACTUATORS, CLIP_HIGH_MAX, CLIP_HIGH_MIN, PAIRS, REFUSED
from verl_ext.control.controllers import CONTROLLERS as FIXED_LAW_CONTROLLERS
from verl_ext.control.targets import SCHEDULES, TARGET_UNITS

ENTROPY_CONTROL_CONFIG_PREFIX = "verl_ext.entropy_control."
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

    KEY_PREFIX: ClassVar[str] = ENTROPY_CONTROL_CONFIG_PREFIX

    enable: bool = False
    """Turn entropy control on (``target`` is then required)."""

    fresh_on_resume: bool = False
    """On resume from a checkpoint without the entropy control's state file (``global_step_<N>/verl_ext_driver.json``: a
    checkpoint of a run without entropy control, or the file lost): ``false`` is an error naming the file; ``true``
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
    ``clip_ratio_high``; the losses of :func:`~verl_ext.losses.spec.clip_high_losses`)."""

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
    """Smallest selection ratio entropy control may set (a fraction in (0, 1))."""

    ratio_max: float = 0.2
    """Largest selection ratio entropy control may set (a fraction in (ratio_min, 1])."""

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


__all__ = ["AUTO_COEF_REACH", "AUTO_LAG_MAX", "CONTROLLERS", "ENTROPY_CONTROL_CONFIG_PREFIX", "EntropyControlConfig",
           "FIXED_LAW_COEF_MAX", "INITIAL_STEPS", "INTEGRAL_CADENCES", "OWNED_KEYS", "SCHEDULES", "TARGET_UNITS",
           "WEIGHT_NORMS"]  # fmt: skip
