"""The entropy control's record in a run, and the token lens's file: what ``verl_ext.analyze`` reports of them.

* :func:`bias` - ``|exp(mean_t log(H_t / H*_t)) - 1|``: how far the geometric mean of the entropy sits from the
  target (with a constant target, ``|geomean(H) / H* - 1|``). The tracking figure: measurement noise averages out of
  it, so it can reach 0 at any batch size.
* :func:`block_gap` - the mean over consecutive 5-step blocks of ``|geomean_block(H / H*) - 1|``: how far the entropy
  strays from the target over a few steps (cycles, drifts), with the noise of single steps mostly averaged out.
* :func:`bound_share` - the share of steps with the actuator on a bound of its range.
* :func:`relative_gap` - ``mean |H_t - H*_t| / H*_t``, the per-step gap the project's comparisons reported first. It
  has a floor set by the measurement noise (:func:`gap_noise_floor`, from the noise :func:`log_noise_sigma` estimates):
  even an entropy held exactly on target shows it, and it rewards undershooting (``|H - H*| / H*`` is at most 1 below
  the target, unbounded above).
* :func:`log_gap` - ``mean |log H_t - log H*_t|``: the per-step distance in log space, symmetric above and below the
  target (``relative_gap`` is not), the figure a schedule's tracking is reported in.
* :func:`tracking` - the figures above for a run that logged entropy control, over the second half of the run.
* :func:`logged_targets` - each step's target as the run logged it (``entropy_control/target``), for summaries that
  read verl's file log: a scheduled or relative target moves, and every figure above compares each step's entropy with
  that step's target.

Every figure takes one target per step: with ``schedule=linear`` / ``cosine`` or ``target_unit=initial`` the
constant ``target`` key is not the target of most steps.
* :func:`lens_summary` - from a ``<experiment>.lens.jsonl`` file (``verl_ext.token_lens``): the most frequently
  selected token strings with their count, mean advantage, mean probability and mean covariance.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verl_ext.analysis.run_reader import Run, RunReadError
from verl_ext.contract import (CONTROL_ENTROPY, CONTROL_RATIO, CONTROL_SATURATED, CONTROL_TARGET, CONTROL_VALUE, LENS_SUFFIX,
                               lens_file_for)

TARGET_KEY, ENTROPY_KEY, RATIO_KEY, SATURATED_KEY = CONTROL_TARGET, CONTROL_ENTROPY, CONTROL_RATIO, CONTROL_SATURATED


BLOCK_STEPS = 5
"""The block length of :func:`block_gap`."""


@dataclass(frozen=True)
class Tracking:
    """Entropy control's record over the second half of a run."""

    steps: int
    mean_abs_rel_error: float
    """The per-step gap :func:`relative_gap`."""
    final_ratio: float
    """The actuator's last value (the selection ratio for ``cov_ratio``)."""
    saturated_share: float
    """The share of steps on a bound (``entropy_control/saturated``)."""
    bias: float = math.nan
    """:func:`bias`."""
    block_gap: float = math.nan
    """:func:`block_gap` (NaN with fewer than :data:`BLOCK_STEPS` steps)."""
    noise_sigma: float = math.nan
    """The measurement noise in log H that :func:`log_noise_sigma` estimates from the whole run."""
    noise_floor: float = math.nan
    """:func:`gap_noise_floor` at ``noise_sigma``: the per-step gap of an entropy held exactly on target."""
    log_gap: float = math.nan
    """:func:`log_gap`."""


def _log_ratio(entropy: Sequence[float] | np.ndarray, target: float | Sequence[float] | np.ndarray,
               name: str) -> np.ndarray:  # fmt: skip
    h = np.asarray(entropy, dtype=float)
    if h.size == 0:
        raise ValueError(f"{name}: no steps")
    t = np.broadcast_to(np.asarray(target, dtype=float), h.shape)
    if (h <= 0).any() or (t <= 0).any():
        raise ValueError(f"{name}: entropies and targets must be > 0 (it works on log H)")
    return np.log(h) - np.log(t)


def bias(entropy: Sequence[float] | np.ndarray, target: float | Sequence[float] | np.ndarray) -> float:
    """``|exp(mean_t log(H_t / H*_t)) - 1|`` over the steps given: the geometric mean of the entropy's ratio to its
    target (a constant or one value per step), as a relative distance from 1. With a constant target it is
    ``|geomean(H) / H* - 1|``. Entropies 0.15 and 0.6 around 0.3 give ``|sqrt(0.5 * 2) - 1| = 0``: the measurement
    noise, symmetric in log H, averages out, so unlike :func:`relative_gap` it has no floor."""
    return float(abs(math.exp(float(_log_ratio(entropy, target, "bias").mean())) - 1.0))


def block_gap(entropy: Sequence[float] | np.ndarray, target: float | Sequence[float] | np.ndarray,
              block: int = BLOCK_STEPS) -> float:  # fmt: skip
    """The gap on blocks of ``block`` (5) steps: the steps given are cut into consecutive blocks of ``block`` steps
    from the first one (a last block shorter than ``block`` is left out: 23 steps make 4 blocks); each block's figure
    is ``|exp(mean_{t in block} log(H_t / H*_t)) - 1|`` (its geometric-mean ratio to the target, as in :func:`bias`);
    the result is the mean of those figures over the blocks. It sees what :func:`bias` averages away - cycles and
    drifts longer than a block but shorter than the span - while a block's geometric mean divides the per-step
    noise's variance by ``block``. ``ValueError`` with fewer than ``block`` steps."""
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block_gap: block must be an integer >= 1; got {block!r}")
    r = _log_ratio(entropy, target, "block_gap")
    n = r.size // block
    if n == 0:
        raise ValueError(f"block_gap: {r.size} steps make no block of {block}")
    means = r[: n * block].reshape(n, block).mean(axis=1)
    return float(np.abs(np.exp(means) - 1.0).mean())


def bound_share(values: Sequence[float] | np.ndarray, lo: float, hi: float, tolerance: float = 1e-6) -> float:
    """The share of the steps whose actuator value sits on a bound of ``[lo, hi]``: within ``tolerance x (hi - lo)``
    of ``lo`` or of ``hi``."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise ValueError("bound_share: no steps")
    if not hi > lo:
        raise ValueError(f"bound_share: needs lo < hi; got [{lo}, {hi}]")
    eps = tolerance * (hi - lo)
    return float(((v <= lo + eps) | (v >= hi - eps)).mean())


def log_noise_sigma(entropy: Sequence[float] | np.ndarray) -> float:
    """The measurement noise of a run's per-step entropy, as a standard deviation in ``log H``, estimated from the
    series alone. Model: ``log H_t = x_t + v_t`` with ``x`` the policy's entropy moving as a random walk with drift
    (``x_{t+1} = x_t + drift_t + w_t``) and ``v_t`` the step's measurement noise (which prompts were drawn), white with
    variance ``r``. The first differences ``d_t = log H_{t+1} - log H_t = drift_t + w_t + v_{t+1} - v_t`` then have
    the lag-1 autocovariance ``-r`` (only ``v_{t+1}`` is shared by ``d_t`` and ``d_{t+1}``), so ``r = -acov_1(d)``
    (sample autocovariance about the mean, clamped at 0: a series with no measurable noise gives 0). Needs 3 steps.
    A slowly changing drift adds a positive autocovariance, so this errs low; :mod:`verl_ext.analysis.plant` fits the
    same model with the actuator, by maximum likelihood."""
    h = np.asarray(entropy, dtype=float)
    if h.size < 3 or (h <= 0).any():
        raise ValueError("log_noise_sigma: needs at least 3 entropies > 0")
    d = np.diff(np.log(h))
    d = d - d.mean()
    acov1 = float((d[:-1] * d[1:]).sum() / d.size)
    return math.sqrt(max(0.0, -acov1))


def gap_noise_floor(sigma: float) -> float:
    """The per-step gap (:func:`relative_gap`) of an entropy held exactly on target and measured with noise ``sigma``
    in log H: ``E|exp(v) - 1|`` for ``v ~ N(0, sigma^2)``, which is ``exp(sigma^2 / 2) erf(sigma / sqrt 2)``
    (``E[(e^v - 1) 1{v > 0}] + E[(1 - e^v) 1{v < 0}]`` with ``E[e^v 1{v > 0}] = exp(sigma^2 / 2) Phi(sigma)``). About
    ``sigma sqrt(2 / pi)`` for small ``sigma``; 0.42 at the real model's 0.49 (4 prompts x 4 responses)."""
    if not sigma >= 0:
        raise ValueError(f"gap_noise_floor: sigma must be >= 0; got {sigma!r}")
    return float(math.exp(sigma * sigma / 2.0) * math.erf(sigma / math.sqrt(2.0)))


def relative_gap(entropy: Sequence[float] | np.ndarray, target: float | Sequence[float] | np.ndarray) -> float:
    """``mean |H_t - H*_t| / H*_t`` over the steps given: the entropy's mean absolute relative distance from its target
    (a constant or one value per step)."""
    h = np.asarray(entropy, dtype=float)
    if h.size == 0:
        raise ValueError("relative_gap: no steps")
    t = np.broadcast_to(np.asarray(target, dtype=float), h.shape)
    return float((np.abs(h - t) / t).mean())


def log_gap(entropy: Sequence[float] | np.ndarray, target: float | Sequence[float] | np.ndarray) -> float:
    """``mean_t |log H_t - log H*_t|`` over the steps given (a constant target or one per step): the per-step distance
    in log space. Unlike :func:`relative_gap` it weighs a factor above and the same factor below alike (0.15 and 0.6
    around 0.3 both give ``log 2``); unlike :func:`bias` the noise does not average out of it."""
    return float(np.abs(_log_ratio(entropy, target, "log_gap")).mean())


def logged_targets(rows: Mapping[int, Mapping[str, object]], steps: Sequence[int], default: float) -> np.ndarray:
    """``H*_t`` for each of ``steps`` from a run's rows of metrics by step (verl's file log): the logged
    ``entropy_control/target`` when the run logged entropy control (any row has it), else ``default`` for every step (an
    uncontrolled run, compared with the target of the controlled ones). A controlled run without a finite target > 0 at
    one of ``steps`` (missing, or ``null``: ``target_unit=initial`` before its first measurement) is a ``ValueError``
    naming the steps."""
    if not any(TARGET_KEY in row for row in rows.values()):
        return np.full(len(steps), float(default))
    values = [rows.get(s, {}).get(TARGET_KEY) for s in steps]
    bad = [s for s, v in zip(steps, values) if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0]
    if bad:
        raise ValueError(f"no {TARGET_KEY} > 0 logged at steps {bad} of a run that logged entropy control")
    return np.asarray(values, dtype=float)


def tracking(run: Run) -> Tracking | None:
    """The second-half tracking figures of ``run``, or ``None`` when it logged no entropy-control metrics: :func:`bias`,
    :func:`block_gap` and the per-step :func:`relative_gap` over the second half, the share of its steps on a bound
    (``entropy_control/saturated``), the actuator's last value, and the noise floor of the per-step gap at the noise
    :func:`log_noise_sigma` estimates from the whole run."""
    if TARGET_KEY not in run.metrics or ENTROPY_KEY not in run.metrics:
        return None
    target_by_step, entropy_by_step = run.metrics[TARGET_KEY], run.metrics[ENTROPY_KEY]
    # each step against its own target (a scheduled or relative one moves); no target yet: not counted
    steps = np.array(sorted(s for s in set(target_by_step) & set(entropy_by_step) if math.isfinite(target_by_step[s])),
                     dtype=np.int64)  # fmt: skip
    if steps.size == 0:
        return None
    target = np.array([target_by_step[s] for s in steps], dtype=float)
    entropy = np.array([entropy_by_step[s] for s in steps], dtype=float)
    half = len(steps) // 2
    counted = len(steps) - half
    _, ratio = run.series(RATIO_KEY if RATIO_KEY in run.metrics else CONTROL_VALUE)  # the actuator's value
    saturated_by_step = run.metrics.get(SATURATED_KEY, {})
    saturated = np.array([saturated_by_step.get(int(s), 0.0) for s in steps[half:]], dtype=float)
    h, t = entropy[half:], target[half:]
    positive = bool((h > 0).all() and (t > 0).all())
    sigma = log_noise_sigma(entropy) if entropy.size >= 3 and (entropy > 0).all() else math.nan
    return Tracking(counted, relative_gap(h, t), float(ratio[-1]), float(saturated.mean()),
                    bias=bias(h, t) if positive else math.nan,
                    block_gap=block_gap(h, t) if positive and counted >= BLOCK_STEPS else math.nan,
                    noise_sigma=sigma, noise_floor=gap_noise_floor(sigma) if math.isfinite(sigma) else math.nan,
                    log_gap=log_gap(h, t) if positive else math.nan)  # fmt: skip


def format_tracking(label: str, record: Tracking) -> str:
    """One line on a run's control record: bias, gap on 5-step blocks, the per-step gap with its noise floor, the
    final actuator value and the share of steps on a bound."""
    return (f"{label}: entropy control over the last {record.steps} steps: bias |geomean(H / H*) - 1| = "
            f"{record.bias:.1%}, gap on {BLOCK_STEPS}-step blocks = {record.block_gap:.1%}, per step mean |H - H*| / H* = "
            f"{record.mean_abs_rel_error:.1%} (noise floor {record.noise_floor:.1%} at the run's noise sigma "
            f"{record.noise_sigma:.3g} in log H), per step mean |log H - log H*| = {record.log_gap:.3f}, final actuator "
            f"value {record.final_ratio:.4g}, on a bound in "
            f"{record.saturated_share:.0%} of the steps")  # fmt: skip


@dataclass(frozen=True)
class LensRow:
    """One token string's record in a lens file."""

    token: str
    count: int
    share: float
    mean_advantage: float
    mean_prob: float
    mean_covariance: float


def lens_summary(path: str | Path, top: int = 15) -> tuple[int, list[LensRow]]:
    """The number of selected tokens in the lens file and its ``top`` most frequent token strings."""
    path = Path(path)
    if not path.is_file():
        raise RunReadError(f"{path}: no such lens file (verl_ext.token_lens writes <experiment>.lens.jsonl)")
    groups: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    total = 0
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                groups[row["token"]].append((row["advantage"], row["prob"], row["covariance"]))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise RunReadError(f"{path}:{number}: not a token-lens row ({exc})") from exc
            total += 1
    rows = [
        LensRow(token, len(v), len(v) / total, *(float(np.mean([x[i] for x in v])) for i in range(3)))
        for token, v in groups.items()
    ]
    rows.sort(key=lambda r: (-r.count, r.token))
    return total, rows[:top]


def format_lens(path: str | Path, total: int, rows: list[LensRow]) -> str:
    lines = [f"token lens {path}: {total} selected tokens; most frequent:",
             f"{'token':>12}  {'count':>6}  {'share':>6}  {'mean A':>8}  {'mean p':>7}  {'mean cov':>9}"]  # fmt: skip
    for r in rows:
        lines.append(f"{r.token!r:>12}  {r.count:>6d}  {r.share:>6.1%}  {r.mean_advantage:>8.3f}  {r.mean_prob:>7.3f}  "
                     f"{r.mean_covariance:>9.3f}")  # fmt: skip
    return "\n".join(lines)


__all__ = ["BLOCK_STEPS", "LensRow", "Tracking", "bias", "block_gap", "bound_share", "format_lens", "format_tracking",
           "gap_noise_floor", "lens_summary", "log_noise_sigma", "logged_targets", "relative_gap", "tracking"]
