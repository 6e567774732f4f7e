"""``auto``: an entropy controller that measures its own noise and learns its plant online.

It works in log entropy, on the actuator's *coordinate* ``a`` (:func:`coordinate`): the entropy coefficient and
EntroPIC's weight as they are (the loss is linear in them), Clip-Cov's / KL-Cov's ratio as ``log(ratio / ratio_min)``
(it spans decades). ``a = 0`` is the actuator at rest (coefficient or weight 0, the smallest ratio). The PPO clip
bound is not one of its actuators: it showed no authority on the fitted plants
(:data:`~verl_ext.control.actuators.REFUSED`). It assumes the
plant fitted from the committed logs (:mod:`verl_ext.analysis.plant`)::

    x_{t+1} = x_t + b + g a_{t-L} + w_t        (x: the policy's log entropy; b: drift; g: gain; L: lag)
    y_t     = x_t + v_t                        (y: the step's measured log entropy; v: which prompts were drawn)

Each step it

1. **learns the plant and its noise together** (recursive prediction-error estimation): a bank of scalar Kalman
   filters, one per noise ratio ``lambda = Var v / (Var v + Var w)`` on :data:`NOISE_RATIOS`. Each one's innovations
   are affine in ``(b, g)``, so each keeps the normal equations of its innovations, forgetting over ``memory`` steps
   (recursive least squares with forgetting), and solves them with the priors: ``g`` from the actuator's unit
   (:data:`RATE_PRIOR` over its reference reach :data:`REFERENCE_REACH` - not the user's range, so that a narrow range
   does not inflate it - with its own size as standard deviation), ``b = 0`` (standard deviation :data:`RATE_PRIOR`),
   and a floor (:data:`GAIN_FLOOR` of the prior) that keeps the gain on the actuator's known side of 0. The members are averaged by their likelihood (the scale concentrated out): that gives the measurement noise
   ``R``, the process noise ``Q``, the drift, the gain and the filtered ``x``. The per-group spread of the step's
   entropy would measure ``R`` directly, but the controller is handed only the batch's mean entropy
   (:meth:`~verl_ext.driver.mixin.VerlExtDriver.observe_entropy`), so it uses the innovations of its own filters.
   A measurement farther than :data:`OUTLIER_SIGMAS` standard deviations from the filters' own prediction of it is
   not learned from (the filters only predict over the step) and the actuator holds its value; before the
   :data:`OUTLIER_WARMUP`-th measurement, whose noise estimate is too young to judge by, the standard deviation is
   at least :data:`PRIOR_NOISE` and widened :data:`WARMUP_WIDEN` times. Up to :data:`OUTLIER_RUN` in a row are
   skipped, the next is taken as a real change of level. A step held for an unusable measurement
   (:class:`~verl_ext.control.entropy_control.EntropyController`) advances the model the same way: the prediction
   over the step, and the held action in the queue of actions still to act;
2. **acts**: it predicts ``x`` over the lag with the actions already taken (``x_{t+L|t}``), and sets ``a`` so that
   the step after cancels the drift and closes a share ``kappa`` of the predicted gap to the target (the drift
   estimate is its integral action: there is no integrator to wind up)::

       a_t = (kappa c (log H* - x_{t+L|t}) - b) / g,     c = g^2 / (g^2 + Var g)          (caution)
       kappa = min(KAPPA, |g| room / sqrt(Var x_{t+L|t}))

   ``room`` is the distance from the drift-cancelling value ``-b / g`` to the bound the feedback pushes towards: a
   one-sigma error of the prediction moves the actuator at most to that bound, so noise alone does not drive it from
   bound to bound. Towards the actuator at rest (``a = 0``: the coefficient 0, the smallest ratio, the lower bound of
   the one-sided defaults) the share is ``KAPPA`` whatever the room: above the target the actuator falls to rest as
   fast as the closing share allows and lets the plant's own drift bring the entropy down (a room-limited share
   there, ``|g| (-b / g) / sd`` ~0.1 on the real model, kept the coefficient at ~0.01 while the entropy sat above the
   target, and made the response to noise lopsided: a low reading raised the coefficient five times as much as a
   high one lowered it). The
   change per step is also limited to what moves the entropy's course by :data:`STEP_SIGMAS` standard deviations of
   the one-step prediction - on the first step too, from the actuator's init - then the value is clamped to the
   range.

Every constant comes from the noise it measures, the actuator's range, or the fit of the committed logs (the
derivations: ``docs/entropy_control.md``); ``memory`` and ``lag`` are keys (``auto_memory``, ``auto_lag``). Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

from verl_ext.contract import CONTROL_METRIC_PREFIX
from verl_ext.control.actuators import Actuator
from verl_ext.control.controllers import ControlStep

NOISE_RATIOS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95, 0.98)
"""The bank's ``lambda = R / (R + Q)``: from a noiseless measurement of a wandering entropy (the toy's fit: 0) to a
noise fifty times the process variance (the real model's fit at 4 x 4: ~0.9)."""
RATE_PRIOR = 0.1
"""The gain's prior: the actuator's reference reach (:data:`REFERENCE_REACH`) moves log H by this much per step - the
committed logs' fits give 0.05-0.18 (``verl_ext.analysis.plant``). Also the drift's prior standard deviation per
step."""
REFERENCE_REACH = {"entropy_coef": 0.1, "pos_weight": 1.0, "cov_ratio": math.log(0.2 / 1e-4)}
"""Per actuator, the coordinate's reach that :data:`RATE_PRIOR` refers to - a property of the actuator's unit, not of
the range a user sets: the coefficient's default ``coef_max`` (its prior is then 1 log H per unit of coefficient per
step, between the fitted toy's ~0.5 and the real model's ~1.8), EntroPIC's whole [-1, 1] reach, and the default
ratio range's span in log (``ln(0.2 / 1e-4)``)."""
GAIN_FLOOR = 0.1
"""The gain never goes below this share of its prior, on the actuator's side of 0 (an actuator ten times weaker than
its range promises is handled as that weak; the drift cancellation ``-b / g`` stays finite)."""
OUTLIER_SIGMAS = 4.0
"""A measurement whose innovation exceeds this many standard deviations of its prediction is not learned from."""
OUTLIER_WARMUP = 10
"""The gate applies from this many measurements on: before, the noise estimate rests on too few of them (on the
fitted real plant the prediction errors spread ~2x the predicted standard deviation over the first 10 steps, 1.2x
after)."""
WARMUP_WIDEN = 2.0
"""Before :data:`OUTLIER_WARMUP` measurements the gate's standard deviation is this many times the larger of the
predicted one and :data:`PRIOR_NOISE`: the prediction errors of the first 10 steps spread ~2x the predicted standard
deviation on the fitted real plant, so an honest measurement passes, and a value off by a factor ``e^2`` or more
(``OUTLIER_SIGMAS x WARMUP_WIDEN x PRIOR_NOISE`` = 2 in log) does not set the young estimates."""
OUTLIER_RUN = 2
"""At most this many measurements in a row are skipped as outliers; the next one is learned from (a change of level,
not a bad reading)."""
KAPPA = 0.5
"""The largest share of the predicted gap closed per step: stable (closing factor ``kappa g_true / g`` below 2) with
a gain under-estimated up to 4x."""
STEP_SIGMAS = 2.0
"""The per-step change of the actuator moves the entropy's course by at most this many standard deviations of the
one-step prediction."""
PRIOR_NOISE = 0.25
"""The total noise (standard deviation of a one-step prediction in log H) the bank starts from: between the toy's
~0.05 and the real model's ~0.5 (``verl_ext.analysis.plant``); worth :data:`PRIOR_STEPS` steps, forgotten as the
data are."""
PRIOR_STEPS = 0.5
"""How many steps of evidence :data:`PRIOR_NOISE` counts for at the start: the first measurement outweighs it."""

NOISE = CONTROL_METRIC_PREFIX + "noise"
PROCESS_NOISE = CONTROL_METRIC_PREFIX + "process_noise"
GAIN = CONTROL_METRIC_PREFIX + "gain"
DRIFT = CONTROL_METRIC_PREFIX + "drift"
FILTERED = CONTROL_METRIC_PREFIX + "filtered_entropy"
OUTLIER = CONTROL_METRIC_PREFIX + "outlier"
"""1 when the step's measurement was skipped as an outlier (:data:`OUTLIER_SIGMAS`), else 0."""
ESTIMATE_KEYS = (NOISE, PROCESS_NOISE, GAIN, DRIFT, FILTERED, OUTLIER)


class FilterRow(NamedTuple):
    """One member of the bank (one noise ratio): the filtered state's affine form ``c0 + c_b b + c_g g`` and its
    variance ``p`` (unit scale), and the forgetting-weighted normal equations of its innovations. A checkpoint keeps
    it as a list of these numbers in this order (:attr:`SelfTuningState.bank`)."""

    c0: float
    """The filtered state's constant part."""
    cb: float
    """Its coefficient on the drift ``b``."""
    cg: float
    """Its coefficient on the gain ``g``."""
    p: float
    """Its variance in units of the member's scale."""
    abb: float
    """Normal equations: the drift's diagonal."""
    abg: float
    """Normal equations: the drift-gain cross term."""
    agg: float
    """Normal equations: the gain's diagonal."""
    vb: float
    """Normal equations: the drift's right-hand side."""
    vg: float
    """Normal equations: the gain's right-hand side."""
    ss: float
    """The innovations' weighted sum of squares."""
    log_s: float
    """The sum of their log variances."""
    n: float
    """Their forgetting-weighted count."""


STATE_ROW = len(FilterRow._fields)
"""The length of one filter's row in :attr:`SelfTuningState.bank` (the fields of :class:`FilterRow`)."""


def coordinate(actuator: Actuator) -> tuple[str, float, float]:
    """``(scale, a_lo, a_hi)``: ``log`` for ``cov_ratio`` (``a = log(u / lo)``), else ``linear`` (``a = u``)."""
    if actuator.name == "cov_ratio":
        return "log", 0.0, math.log(actuator.hi / actuator.lo)
    return "linear", actuator.lo, actuator.hi


def to_coordinate(actuator: Actuator, value: float) -> float:
    if coordinate(actuator)[0] == "log":
        return math.log(max(value, actuator.lo) / actuator.lo)
    return float(value)


def from_coordinate(actuator: Actuator, a: float) -> float:
    if coordinate(actuator)[0] == "log":
        return actuator.lo * math.exp(a)
    return a


@dataclass
class SelfTuningState:
    """What a checkpoint keeps (JSON-safe): the bank of filters with their normal equations, the recent actions and
    the step."""

    integral: float = 0.0
    """The drift's share of the actuator, ``-b / g`` (its integral action), as logged."""
    value: float | None = None
    step: int = 0
    bank: list[list[float]] = field(default_factory=list)
    """Per noise ratio (:data:`NOISE_RATIOS`): one :class:`FilterRow` as a list (JSON-safe), in its fields' order."""
    actions: list[float] = field(default_factory=list)
    """The applied coordinates of the last ``lag + 1`` steps, oldest first."""
    last: float | None = None
    """The coordinate set last step (before a cap)."""
    estimate: list[float] = field(default_factory=list)
    """``[x, b, g, Var b, Var g, R, Q, Var x]`` after the last step."""
    seen: int = 0
    """The measurements taken (the noise prior fades with them)."""
    skipped: int = 0
    """The measurements skipped as outliers in a row up to the last step."""


class SelfTuningController:
    """``auto`` (module docstring)."""

    name: ClassVar[str] = "auto"

    def __init__(self, memory: int = 20, lag: int = 1, prior_gain: float | None = None):
        """``memory``: steps over which the drift, gain and noise estimates forget; ``lag``: the steps between an
        update and the first measurement it moves beyond the next; ``prior_gain``: the gain's prior per unit of the
        coordinate (``None``: :data:`RATE_PRIOR` over the actuator's :data:`REFERENCE_REACH`, signed by its
        direction)."""
        self.memory, self.lag, self.prior_gain = int(memory), int(lag), prior_gain
        self.state = SelfTuningState()

    def _prior(self, actuator: Actuator) -> float:
        if self.prior_gain is not None:
            return float(self.prior_gain)
        return actuator.direction * RATE_PRIOR / REFERENCE_REACH[actuator.name]

    def _estimate(self, actuator: Actuator) -> list[float]:
        """``[x, b, g, Var b, Var g, R, Q, Var x]``: each member's solution of its normal equations with the priors
        (``b = 0`` with standard deviation :data:`RATE_PRIOR`; ``g`` = the prior gain with its own size as standard
        deviation) and the noise prior (:data:`PRIOR_NOISE`, worth :data:`PRIOR_STEPS` steps at the start and
        forgotten as the data are), averaged over the members weighted by their likelihood."""
        st = self.state
        g0 = self._prior(actuator)
        fade = PRIOR_STEPS * (1.0 - 1.0 / self.memory) ** st.seen
        scored = []
        for c0, cb, cg, p, abb, abg, agg, vb, vg, ss, logs, n in map(FilterRow._make, st.bank):  # one per NOISE_RATIOS
            scale = (ss + fade * PRIOR_NOISE**2) / (n + fade)
            for _ in range(2):  # the priors' precisions in units of the member's scale, which the fit revises
                lb, lg = scale / RATE_PRIOR**2, scale / (g0 * g0)
                m11, m12, m22 = abb + lb, abg, agg + lg
                det = m11 * m22 - m12 * m12
                b = (m22 * vb - m12 * (vg + lg * g0)) / det
                g = (m11 * (vg + lg * g0) - m12 * vb) / det
                rss = ss - 2 * (b * vb + g * vg) + b * b * abb + 2 * b * g * abg + g * g * agg
                scale = max((rss + fade * PRIOR_NOISE**2) / (n + fade), 1e-12)
            ll = -0.5 * (n + fade) * math.log(scale) - 0.5 * logs
            scored.append((ll, c0 + cb * b + cg * g, b, g, scale * m22 / det, scale * m11 / det, p * scale, scale))
        top = max(row[0] for row in scored)
        weights = [math.exp(row[0] - top) for row in scored]
        total = sum(weights)
        avg = [sum(w * row[i] for w, row in zip(weights, scored)) / total for i in range(1, 7)]
        R = sum(w * lam * row[7] for w, lam, row in zip(weights, NOISE_RATIOS, scored, strict=True)) / total
        Q = sum(w * (1 - lam) * row[7] for w, lam, row in zip(weights, NOISE_RATIOS, scored, strict=True)) / total
        x, b, g, var_b, var_g, var_x = avg
        floor = GAIN_FLOOR * abs(g0)
        if actuator.direction * g < floor:
            g = actuator.direction * floor
        return [x, b, g, var_b, var_g, R, Q, var_x]

    @staticmethod
    def _rest(actuator: Actuator) -> float:
        """The coordinate of the actuator's init (clamped to its range): where it sat before the first action."""
        _, lo, hi = coordinate(actuator)
        return min(max(to_coordinate(actuator, actuator.init), lo), hi)

    def _acting(self, actuator: Actuator) -> float:
        """The coordinate that moves the entropy between the last measurement and this one (``a_{t-1-L}``); before
        ``lag + 1`` actions exist, the actuator's init (:meth:`_rest`)."""
        st = self.state
        return st.actions[-1 - self.lag] if len(st.actions) > self.lag else self._rest(actuator)

    def _outlier(self, y: float, actuator: Actuator) -> bool:
        """Whether ``y`` lies more than :data:`OUTLIER_SIGMAS` standard deviations from the filters' prediction of it
        (``x + b + g a``, variance ``Var x + Q + R + Var b + a^2 Var g``; before :data:`OUTLIER_WARMUP` measurements
        at least :data:`PRIOR_NOISE` and :data:`WARMUP_WIDEN` times wider), with fewer than :data:`OUTLIER_RUN`
        skipped in a row."""
        st = self.state
        if not st.estimate or st.skipped >= OUTLIER_RUN:
            return False
        x, b, g, var_b, var_g, R, Q, var_x = st.estimate
        a = self._acting(actuator)
        sd = math.sqrt(var_x + Q + R + var_b + a * a * var_g)
        if st.seen < OUTLIER_WARMUP:
            sd = WARMUP_WIDEN * max(sd, PRIOR_NOISE)
        return abs(y - (x + b + g * a)) > OUTLIER_SIGMAS * sd

    def _observe(self, y: float | None, actuator: Actuator) -> None:
        """One step of every member's filter: its innovation ``y - c0 - c_b b - c_g g`` (affine in the drift and the
        gain) enters its normal equations, forgetting over ``memory`` steps; ``y=None``: only the prediction over
        the step (a skipped measurement)."""
        st = self.state
        forget = 1.0 - 1.0 / self.memory
        a_lag = self._acting(actuator)
        for i, lam in enumerate(NOISE_RATIOS):
            r = FilterRow._make(st.bank[i])
            cb, cg, p = r.cb + 1.0, r.cg + a_lag, r.p + 1.0 - lam  # predict: x + b + g a_{t-1-L}
            if y is None:
                st.bank[i] = list(r._replace(cb=cb, cg=cg, p=p))
                continue
            S = p + lam
            t = y - r.c0
            k = p / S
            st.bank[i] = list(FilterRow(
                c0=(1 - k) * r.c0 + k * y, cb=(1 - k) * cb, cg=(1 - k) * cg, p=(1 - k) * p,
                abb=forget * r.abb + cb * cb / S, abg=forget * r.abg + cb * cg / S, agg=forget * r.agg + cg * cg / S,
                vb=forget * r.vb + cb * t / S, vg=forget * r.vg + cg * t / S, ss=forget * r.ss + t * t / S,
                log_s=forget * r.log_s + math.log(S), n=forget * r.n + 1.0))  # fmt: skip

    def check_state(self) -> None:
        """A loaded state must fit this controller: one bank row of :data:`STATE_ROW` numbers per noise ratio, at most
        ``lag + 1`` actions; anything else is a ``ValueError`` naming the field (nothing is truncated)."""
        st = self.state
        if st.bank and (len(st.bank) != len(NOISE_RATIOS) or any(len(row) != STATE_ROW for row in st.bank)):
            raise ValueError(f"verl_ext entropy control (auto): the saved state's bank has {len(st.bank)} rows of "
                             f"lengths {sorted({len(r) for r in st.bank})}; this controller needs {len(NOISE_RATIOS)} "
                             f"rows (one per NOISE_RATIOS) of {STATE_ROW}")  # fmt: skip
        if len(st.actions) > self.lag + 1:
            raise ValueError(f"verl_ext entropy control (auto): the saved state's actions hold {len(st.actions)} "
                             f"values; auto_lag={self.lag} keeps at most {self.lag + 1}")  # fmt: skip

    def step(self, target: float, entropy: float, actuator: Actuator) -> ControlStep:
        """The step's value given a measured ``entropy`` (finite and > 0:
        :class:`~verl_ext.control.entropy_control.EntropyController` holds the actuator on any other)."""
        if not (math.isfinite(entropy) and entropy > 0):
            raise ValueError(f"auto takes a finite entropy > 0; got {entropy!r}")
        st = self.state
        y = math.log(entropy)
        if st.bank and self._outlier(y, actuator):
            return self._skip(target, actuator)
        st.skipped = 0
        st.seen += 1
        if not st.bank:
            st.bank = [list(FilterRow(y, 0.0, 0.0, lam, *[0.0] * (STATE_ROW - 4))) for lam in NOISE_RATIOS]
            st.actions = []
        else:
            self._observe(y, actuator)
        x, b, g, var_b, var_g, R, Q, var_x = st.estimate = self._estimate(actuator)
        S = R + Q + var_b
        pending = ([self._rest(actuator)] * self.lag + st.actions)[-self.lag:] if self.lag > 0 else []
        x_ahead = x + self.lag * b + g * sum(pending)
        error = math.log(target) - x_ahead
        unsure = var_x + self.lag * Q + self.lag**2 * var_b  # the variance of x_{t+L|t}
        _, lo, hi = coordinate(actuator)
        rest = min(max(-b / g, lo), hi)
        bound = hi if error * g > 0 else lo  # the bound the feedback pushes to
        kappa = KAPPA
        if bound != 0.0:  # toward a bound that acts (not the actuator at rest): room-limited
            kappa = min(KAPPA, abs(g) * abs(bound - rest) / math.sqrt(max(unsure, 1e-12)))
        wanted = (kappa * g * g / (g * g + var_g) * error - b) / g
        previous = st.last if st.last is not None else min(max(to_coordinate(actuator, actuator.init), lo), hi)
        limit = STEP_SIGMAS * math.sqrt(S) / abs(g)
        wanted = min(max(wanted, previous - limit), previous + limit)
        a = min(max(wanted, lo), hi)
        saturated = wanted <= lo or wanted >= hi
        st.last = a
        st.actions = (st.actions + [a])[-(self.lag + 1):]
        st.integral = -b / g
        value = from_coordinate(actuator, a)
        st.value = value
        return ControlStep(value, math.log(target) - x, st.integral, saturated, estimates=self._estimates(0.0))

    def _estimates(self, outlier: float) -> dict[str, float]:
        x, b, g, _, _, R, Q, _ = self.state.estimate
        return {NOISE: math.sqrt(R), PROCESS_NOISE: math.sqrt(Q), GAIN: g, DRIFT: b, FILTERED: math.exp(x),
                OUTLIER: outlier}  # fmt: skip

    def _skip(self, target: float, actuator: Actuator) -> ControlStep:
        """An outlier: the filters predict over the step without learning, the actuator holds its last value."""
        st = self.state
        self._advance(actuator, st.actions[-1] if st.actions else self._rest(actuator))
        st.skipped += 1
        x = st.estimate[0]
        return ControlStep(st.value, math.log(target) - x, st.integral, False, estimates=self._estimates(1.0))

    def hold(self, actuator: Actuator, value: float) -> None:
        """A step held for an unusable measurement (not finite, <= 0, or above the plausible bound) that applies
        ``value``: as for an outlier, the filters predict over the step without learning and ``value`` joins the
        actions still to act, so the next innovation spans one step and the lag stays aligned. Before the first
        measurement there is no model to advance."""
        if self.state.bank:
            self._advance(actuator, to_coordinate(actuator, value))

    def _advance(self, actuator: Actuator, a: float) -> None:
        """One step of prediction without a measurement, with the coordinate ``a`` applied at the step."""
        st = self.state
        self._observe(None, actuator)
        st.estimate = self._estimate(actuator)
        st.actions = (st.actions + [a])[-(self.lag + 1):]

    def applied(self, actuator: Actuator, value: float) -> None:
        """The value the actuator really applied this step (Clip-Cov's selected fraction, when its candidates
        admitted fewer tokens than asked): the filter learns from it."""
        if self.state.actions:
            self.state.actions[-1] = to_coordinate(actuator, value)


__all__ = ["ESTIMATE_KEYS", "FilterRow", "GAIN_FLOOR", "KAPPA", "NOISE_RATIOS", "OUTLIER_RUN", "OUTLIER_SIGMAS",
           "OUTLIER_WARMUP", "PRIOR_NOISE", "PRIOR_STEPS", "RATE_PRIOR", "REFERENCE_REACH", "STATE_ROW", "STEP_SIGMAS",
           "SelfTuningController", "SelfTuningState", "WARMUP_WIDEN", "coordinate", "from_coordinate",
           "to_coordinate"]  # fmt: skip
