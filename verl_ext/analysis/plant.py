"""The entropy loop's plant, fitted from the committed logs, and a simulator of a controller on it (numpy, seconds).

The model, per training step ``t`` (``x`` the policy's log entropy, ``y`` its logged measurement, both in log nats)::

    x_{t+1} = x_t + drift + gain * a_{t-lag} + w_t          w_t ~ N(0, process_sigma^2)
    y_t     = x_t + v_t                                     v_t ~ N(0, measure_sigma^2)

``a_t`` is the actuator's coordinate at step ``t`` (:class:`Coordinate`): the entropy coefficient itself (the loss
is linear in it), or ``log(ratio / reference)`` for Clip-Cov's ratio (it spans decades); ``a = 0`` is the actuator at
its reference (coefficient 0, ratio at the runs' ``ratio_min``), which is also how vanilla runs enter the fit.
``lag = 0`` means the value applied in step ``t``'s update moves the entropy measured at step ``t + 1``.

**Fit** (:func:`fit_plant`): maximum likelihood of the Kalman filter's one-step prediction errors (the
prediction-error method), pooled over runs with shared parameters. It stays consistent in closed loop - every
controlled run here set ``a_t`` from the same step's measured entropy, which biases a regression of ``y_{t+1} - y_t``
on ``a_t`` - because each innovation is taken given everything measured before it. For a fixed noise ratio
``lambda = r / (q + r)`` the filter's innovations are affine in ``(drift, gain)``, so those two and the scale come in
closed form (weighted least squares); ``lambda`` is found on a grid, ``lag`` among 0, 1, 2 as the smallest whose
log-likelihood is within :data:`LAG_TOLERANCE` of the best (a longer lag must earn its place; the first :data:`SKIP`
innovations of each run are left out for every lag alike). Each run starts from its first
measurement. Standard errors are the weighted least squares' at the chosen ``lambda``.

**The plants** (:data:`PLANTS`; files under ``benchmarks/results/``):

* ``real_entropy_coef`` - SmolLM2-135M-Instruct on GSM8K at 4 prompts x 4 responses, 64 tokens: the vanilla runs
  (``results_real_model_vanilla_40{,_seed1,_seed2}.jsonl``, coefficient 0) and every run that moved the entropy
  coefficient (``results_real_model_pi_coef_40*``, ``..._skywork_40*``, ``..._skywork_regime_40*``,
  ``..._entropic_coef_40.jsonl``, ``results_real_model_demo/pi_coef.jsonl``); ``a`` = the applied coefficient
  (``entropy_control/value``).
* ``real_cov_ratio`` - the same model: the vanilla runs (``a = 0``), the controlled runs on Clip-Cov's ratio
  (PI x cov_ratio: ``results_real_model_pi_cov_40{,_limited,_seed1,_seed2}.jsonl``,
  ``results_real_model_demo/pi_cov.jsonl``, ``results_real_model_demo/seed1/pi_cov.jsonl``) and fixed-ratio Clip-Cov (``results_real_model_clip_cov_40*``,
  ``clip_cov_ratio`` 0.1); ``a = log(asked ratio / 0.001)``. The *asked* ratio: the fraction Clip-Cov really detached
  (``actor/clip_cov/batch_selected_frac``) follows the step's own candidate set, which grows with the same batch's
  entropy, so it is correlated with the measurement noise and shows no effect (see :func:`selected_fraction_fit`);
  the gain per log of the asked ratio is therefore the effect *through* the candidate set, which limited it in most
  steps.
* ``real_pos_weight`` - the same model: the vanilla runs (``a = 0``) and EntroPIC's law on its weight alpha
  (``results_real_model_entropic_40{,_seed1,_seed2}.jsonl`` with EntroPIC's gains,
  ``results_real_model_entropic_regime_40{,_seed1,_seed2}.jsonl`` with ``entropic_ki`` 0.1); ``a`` = the applied alpha
  (``entropy_control/value``; alpha > 0 lowers entropy, so the fitted gain is negative).
* ``toy_cov_ratio`` - the CPU recipe's toy (16 prompts x 8 responses x 16 tokens): vanilla and fixed Clip-Cov (0.02)
  and the controlled runs (``pi_cov``: PI x cov_ratio) of ``results_pi_cov_recipe_cpu.json`` (its selected fraction)
  and of ``results_entropy_control_cpu.json`` (its ratio: there every asked token qualified); ``a = log(ratio / 0.001)``.
* ``toy_entropy_coef`` - the toy's vanilla runs and its ``pi_coef`` / ``skywork`` runs (``results_entropy_control_cpu.json``,
  ``results_entropy_control_cpu_corrected.json``; 16 steps): the coefficient was hardly used there, so its gain is
  poorly determined (see its standard error).

**Simulate** (:func:`simulate`): any object with the entropy controller's interface (``update(step, entropy) -> (value,
metrics)``; ``actuator_limited(limited, metrics, applied=...)`` is called when a candidate cap cut the value) runs on
a plant; the figures of :mod:`verl_ext.analysis.control` are taken on the *measured* entropies, as on a real run.

May import: numpy and :mod:`verl_ext.analysis` (the controllers are passed in; the tests bring them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from verl_ext.analysis.control import BLOCK_STEPS, bias, block_gap, gap_noise_floor, relative_gap
from verl_ext.analysis.run_reader import read_runs

SKIP = 3
"""Innovations left out at the start of each run (the filter's start, and the lags' missing history)."""
LAGS = (0, 1, 2)
LAG_TOLERANCE = 2.0
"""A longer lag is chosen only when it raises the log-likelihood by more than this (a likelihood ratio of ~7)."""
NOISE_RATIOS = np.concatenate([np.linspace(0.0, 0.99, 100), [0.995, 0.999]])
"""The grid of ``lambda = measure_var / (measure_var + process_var)`` the fit searches."""
RATIO_REFERENCE = 1e-3
"""The ratio at ``a = 0`` (the ``ratio_min`` of every committed controlled run on Clip-Cov's ratio)."""


@dataclass(frozen=True)
class Coordinate:
    """How an actuator's value maps to the plant's ``a``: ``linear`` (``a = u``) or ``log`` (``a = log(max(u,
    reference) / reference)``)."""

    scale: str
    reference: float = 0.0

    def __call__(self, u: float | np.ndarray) -> Any:
        if self.scale == "linear":
            return u
        return np.log(np.maximum(u, self.reference) / self.reference)


@dataclass(frozen=True)
class Series:
    """One run as the fit sees it: its measured log entropies and the actuator's coordinate, per step."""

    label: str
    log_entropy: np.ndarray
    actuator: np.ndarray


@dataclass(frozen=True)
class PlantFit:
    """The fitted plant (module docstring): parameters per step in log H, and the fit's record."""

    drift: float
    gain: float
    lag: int
    process_sigma: float
    measure_sigma: float
    se_drift: float
    se_gain: float
    loglik: float
    innovations: int
    runs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plant:
    """A plant to simulate: a fit, the actuator's coordinate, and where the entropy starts."""

    name: str
    actuator: str
    drift: float
    gain: float
    lag: int
    process_sigma: float
    measure_sigma: float
    coordinate: Coordinate
    start: float
    """The entropy at step 1 (nats)."""
    cap: Callable[[int, float], float] | None = None
    """``cap(step, entropy) -> the largest value the actuator can apply`` (Clip-Cov's candidates), or ``None``."""

    @classmethod
    def from_fit(cls, name: str, actuator: str, fit: PlantFit, coordinate: Coordinate, start: float) -> "Plant":
        return cls(name, actuator, fit.drift, fit.gain, fit.lag, fit.process_sigma, fit.measure_sigma, coordinate,
                   start)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# the fit


def _innovations(series: Sequence[Series], lag: int, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each noise ratio in ``lam`` (measurement variance ``lam``, process variance ``1 - lam``, unit scale): the
    innovations' affine form ``target - rows @ (drift, gain)`` and their variances, stacked over the runs."""
    r, q = lam, 1.0 - lam
    rows, targets, variances = [], [], []
    for s in series:
        y, a = s.log_entropy, s.actuator
        c0 = np.full(lam.shape, y[0])  # the filtered state x_{t|t} = c0 + C @ beta; starts at the first measurement
        C = np.zeros((lam.size, 2))
        P = r.copy()
        for t in range(len(y) - 1):
            regress = a[t - lag] if t - lag >= 0 else 0.0
            C = C + np.array([1.0, regress])
            P = P + q
            S = P + r
            K = P / S
            if t + 1 >= SKIP:
                rows.append(C.copy())
                targets.append(y[t + 1] - c0)
                variances.append(S)
            c0 = (1.0 - K) * c0 + K * y[t + 1]
            C = (1.0 - K)[:, None] * C
            P = (1.0 - K) * P
    return np.stack(rows, axis=1), np.stack(targets, axis=1), np.stack(variances, axis=1)


def fit_plant(series: Sequence[Series], lags: Sequence[int] = LAGS) -> PlantFit:
    """The maximum-likelihood plant of the module docstring for the runs ``series`` (pooled)."""
    if not series:
        raise ValueError("fit_plant: no runs")
    fits: list[PlantFit] = []
    lam = NOISE_RATIOS
    for lag in sorted(lags):
        rows, targets, variances = _innovations(series, lag, lam)  # (grid, n, 2), (grid, n), (grid, n)
        w = 1.0 / np.maximum(variances, 1e-300)
        xtx = np.einsum("gn,gni,gnj->gij", w, rows, rows)
        xty = np.einsum("gn,gni,gn->gi", w, rows, targets)
        beta = np.linalg.solve(xtx, xty[..., None])[..., 0]
        residual = targets - np.einsum("gni,gi->gn", rows, beta)
        n = targets.shape[1]
        scale = (residual**2 * w).sum(axis=1) / n
        loglik = -0.5 * n * np.log(scale) - 0.5 * np.log(variances).sum(axis=1) - 0.5 * n * (1 + math.log(2 * math.pi))
        g = int(np.argmax(loglik))
        se = np.sqrt(np.diag(scale[g] * np.linalg.inv(xtx[g])))
        fits.append(PlantFit(drift=float(beta[g, 0]), gain=float(beta[g, 1]), lag=lag,
                            process_sigma=math.sqrt((1 - lam[g]) * scale[g]), measure_sigma=math.sqrt(lam[g] * scale[g]),
                            se_drift=float(se[0]), se_gain=float(se[1]), loglik=float(loglik[g]), innovations=n,
                            runs=tuple(s.label for s in series)))  # fmt: skip
    top = max(f.loglik for f in fits)
    return next(f for f in fits if f.loglik >= top - LAG_TOLERANCE)


# ---------------------------------------------------------------------------------------------------------------
# the committed logs


def real_series(path: str | Path, value: Callable[[dict[str, float]], float] | None, coordinate: Coordinate) -> Series:
    """A real-model run (verl's file-logger JSONL): ``actor/entropy`` per step, and the actuator's value per step from
    ``value(step's metrics)`` (``None``: a run without the actuator, ``a = 0``)."""
    (run,) = read_runs(str(path))
    steps, entropy = run.series("actor/entropy")
    if value is None:
        actuator = np.zeros(entropy.size)
    else:
        actuator = np.array([float(coordinate(value({k: v[s] for k, v in run.metrics.items() if s in v}))) for s in steps])
    return Series(Path(path).stem, np.log(entropy), actuator)


def toy_series(path: str | Path, variant: str, value: Callable[[dict[str, Any]], Sequence[float]] | None,
               coordinate: Coordinate) -> list[Series]:  # fmt: skip
    """The runs of ``variant`` in a toy results file (``benchmarks/results/results_*_cpu*.json``: ``runs[]`` with ``entropy``
    per step), with the actuator's value per step from ``value(run)`` (``None``: ``a = 0``)."""
    data = json.loads(Path(path).read_text())
    out = []
    for run in data["runs"]:
        if run["variant"] != variant:
            continue
        h = np.asarray(run["entropy"], dtype=float)
        a = np.zeros(h.size) if value is None else np.asarray(coordinate(np.asarray(value(run), dtype=float)), dtype=float)
        out.append(Series(f"{Path(path).stem}:{variant}:{run['seed']}", np.log(h), a))
    return out


REAL_VANILLA = ("results_real_model_vanilla_40.jsonl", "results_real_model_vanilla_40_seed1.jsonl",
                "results_real_model_vanilla_40_seed2.jsonl")  # fmt: skip
REAL_COEF = tuple(f"results_real_model_{n}.jsonl" for n in (
    "pi_coef_40", "pi_coef_40_seed1", "pi_coef_40_seed2", "skywork_40", "skywork_40_seed1", "skywork_40_seed2",
    "skywork_regime_40", "skywork_regime_40_seed1", "skywork_regime_40_seed2", "entropic_coef_40")) + (
    "results_real_model_demo/pi_coef.jsonl",)  # fmt: skip
REAL_PI_COV_RATIO = tuple(f"results_real_model_{n}.jsonl" for n in (
    "pi_cov_40", "pi_cov_40_limited", "pi_cov_40_seed1", "pi_cov_40_seed2")) + (
    "results_real_model_demo/pi_cov.jsonl", "results_real_model_demo/seed1/pi_cov.jsonl")  # fmt: skip
"""The real model's PI runs on Clip-Cov's selection ratio (``pi_cov``; target 0.3)."""
REAL_POS_WEIGHT = tuple(f"results_real_model_{n}.jsonl" for n in (
    "entropic_40", "entropic_40_seed1", "entropic_40_seed2", "entropic_regime_40", "entropic_regime_40_seed1",
    "entropic_regime_40_seed2"))  # fmt: skip
"""The real model's EntroPIC runs on its weight alpha (their gains, and ``entropic_ki=0.1``; target 0.3)."""
REAL_FIXED_RATIO = ("results_real_model_clip_cov_40.jsonl", "results_real_model_clip_cov_40_seed1.jsonl",
                    "results_real_model_clip_cov_40_seed2.jsonl")  # fmt: skip
REAL_FIXED_RATIO_VALUE = 0.1
"""``clip_cov_ratio`` of the real model's fixed Clip-Cov runs (docs/real_model.md)."""
TOY_40 = "results_pi_cov_recipe_cpu.json"
TOY_16 = "results_entropy_control_cpu.json"
TOY_16_CORRECTED = "results_entropy_control_cpu_corrected.json"
TOY_FIXED_RATIO_VALUE = 0.02
"""``clip_cov_ratio`` of the toy recipe's fixed Clip-Cov runs (docs/results.md)."""

COEF = Coordinate("linear")
RATIO = Coordinate("log", RATIO_REFERENCE)


def _value(metrics: dict[str, float]) -> float:
    return metrics["entropy_control/value"]


def _asked_ratio(metrics: dict[str, float]) -> float:
    return metrics["entropy_control/ratio"]


def plant_series(name: str, root: str | Path) -> list[Series]:
    """The runs each plant of :data:`PLANTS` is fitted on (module docstring), from ``root`` (``benchmarks/results/``)."""
    root = Path(root)
    if name == "real_entropy_coef":
        return ([real_series(root / f, None, COEF) for f in REAL_VANILLA]
                + [real_series(root / f, _value, COEF) for f in REAL_COEF])  # fmt: skip
    if name == "real_pos_weight":
        return ([real_series(root / f, None, COEF) for f in REAL_VANILLA]
                + [real_series(root / f, _value, COEF) for f in REAL_POS_WEIGHT])  # fmt: skip
    if name == "real_cov_ratio":
        return ([real_series(root / f, None, RATIO) for f in REAL_VANILLA]
                + [real_series(root / f, _asked_ratio, RATIO) for f in REAL_PI_COV_RATIO]
                + [real_series(root / f, lambda m: REAL_FIXED_RATIO_VALUE, RATIO) for f in REAL_FIXED_RATIO])  # fmt: skip
    if name == "toy_cov_ratio":
        out = []
        for f in (TOY_40, TOY_16, TOY_16_CORRECTED):
            out += toy_series(root / f, "vanilla", None, RATIO)
        for f in (TOY_40, TOY_16):
            out += toy_series(root / f, "clip_cov", lambda r: [TOY_FIXED_RATIO_VALUE] * len(r["entropy"]), RATIO)
        out += toy_series(root / TOY_40, "pi_cov", lambda r: r["selected_frac"], RATIO)
        out += toy_series(root / TOY_16, "pi_cov", lambda r: r["actuator"], RATIO)
        return out
    if name == "toy_entropy_coef":
        out = []
        for f in (TOY_40, TOY_16, TOY_16_CORRECTED):
            out += toy_series(root / f, "vanilla", None, COEF)
        for f in (TOY_16, TOY_16_CORRECTED):
            for variant in ("pi_coef", "skywork"):
                out += toy_series(root / f, variant, lambda r: r["actuator"], COEF)
        return out
    raise ValueError(f"unknown plant {name!r}; allowed {sorted(PLANTS)}")


PLANTS = {
    "real_entropy_coef": ("entropy_coef", COEF),
    "real_cov_ratio": ("cov_ratio", RATIO),
    "real_pos_weight": ("pos_weight", COEF),
    "toy_cov_ratio": ("cov_ratio", RATIO),
    "toy_entropy_coef": ("entropy_coef", COEF),
}
"""Each plant's actuator and coordinate."""


def fitted_plant(name: str, root: str | Path) -> tuple[Plant, PlantFit]:
    """Fit plant ``name`` from the committed logs under ``root``; it starts at the geometric mean of its runs'
    first measured entropies."""
    series = plant_series(name, root)
    fit = fit_plant(series)
    start = math.exp(float(np.mean([s.log_entropy[0] for s in series])))
    actuator, coordinate = PLANTS[name]
    return Plant.from_fit(name, actuator, fit, coordinate, start), fit


def selected_fraction_fit(root: str | Path) -> PlantFit:
    """The real model's Clip-Cov runs fitted on the fraction Clip-Cov really detached
    (``actor/clip_cov/batch_selected_frac``, log scale, nothing selected at the reference): its gain is
    indistinguishable from 0, the reason ``real_cov_ratio`` is fitted on the asked ratio."""
    root = Path(root)
    selected = lambda m: m["actor/clip_cov/batch_selected_frac"]  # noqa: E731
    return fit_plant([real_series(root / f, None, RATIO) for f in REAL_VANILLA]
                     + [real_series(root / f, selected, RATIO) for f in (*REAL_PI_COV_RATIO, *REAL_FIXED_RATIO)])  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# simulation


@dataclass
class Simulation:
    """One simulated run: per step the true and measured entropies, the value the controller set, the value applied
    (after a candidate cap), whether the controller reported its output clamped to a bound, and whether the applied
    value was the actuator at rest (its coordinate 0: the coefficient 0, the ratio at the plant's reference)."""

    entropy: np.ndarray
    measured: np.ndarray
    value: np.ndarray
    applied: np.ndarray
    saturated: np.ndarray
    at_rest: np.ndarray
    metrics: list[dict[str, float]] = field(default_factory=list)

    def figures(self, target: float, first: int = 21, last: int = 40) -> dict[str, float]:
        """:mod:`verl_ext.analysis.control`'s figures on the measured entropies of steps ``first``..``last``
        (1-based): ``bias``, ``block_gap``, ``bound_share`` (the controller's saturated flag), ``reach_share`` (the
        share clamped to a bound that acts: not the actuator at rest, as the one-sided coefficient's 0 above the
        target is) and the per-step ``gap``."""
        h, cut = self.measured[first - 1:last], slice(first - 1, last)
        return {"bias": bias(h, target), "block_gap": block_gap(h, target, BLOCK_STEPS),
                "bound_share": float(self.saturated[cut].mean()),
                "reach_share": float((self.saturated[cut] * (1.0 - self.at_rest[cut])).mean()), "gap": relative_gap(h, target)}  # fmt: skip


def simulate(plant: Plant, controller: Any, steps: int = 40, seed: int = 0, *, fixed: float | None = None,
             measure_sigma: float | None = None, lag: int | None = None,
             cap: Callable[[int, float], float] | None = None) -> Simulation:  # fmt: skip
    """Run ``controller`` (the controller's interface; ``None``: the actuator held at ``fixed``, or at its reference:
    vanilla) on ``plant`` for ``steps`` steps. Each step: measure ``y_t = x_t + v_t``; the controller sets ``u_t`` from
    ``exp(y_t)``; a cap (``cap`` or the plant's) cuts it to the applied ``a_t`` and the controller hears of it; the
    entropy moves by ``drift + gain * coordinate(a_{t-lag}) + w_t`` (before step 1: the reference). ``measure_sigma``
    / ``lag`` override the plant's (a plant unlike the one the controller was sized on)."""
    rng = np.random.default_rng(seed)
    sigma = plant.measure_sigma if measure_sigma is None else measure_sigma
    lag = plant.lag if lag is None else lag
    cap = cap if cap is not None else plant.cap
    x = math.log(plant.start)
    out = Simulation(*(np.zeros(steps) for _ in range(6)))
    applied_coord: list[float] = []
    for t in range(1, steps + 1):
        y = x + sigma * rng.standard_normal()
        out.entropy[t - 1], out.measured[t - 1] = math.exp(x), math.exp(y)
        if controller is None:
            value, metrics = (fixed if fixed is not None else np.nan), {}
        else:
            value, metrics = controller.update(t, math.exp(y))
        applied = value
        if cap is not None and math.isfinite(value):
            applied = min(value, cap(t, math.exp(x)))
            if controller is not None and hasattr(controller, "actuator_limited"):
                controller.actuator_limited(applied < value, metrics, applied=applied)
        out.value[t - 1], out.applied[t - 1] = value, applied
        out.saturated[t - 1] = float(metrics.get("entropy_control/saturated", 0.0))
        out.metrics.append(metrics)
        applied_coord.append(0.0 if not math.isfinite(applied) else float(plant.coordinate(applied)))
        out.at_rest[t - 1] = float(applied_coord[-1] == 0.0)
        acting = applied_coord[t - 1 - lag] if t - 1 - lag >= 0 else 0.0
        x = x + plant.drift + plant.gain * acting + plant.process_sigma * rng.standard_normal()
    return out


def median_figures(runs: Sequence[Simulation], target: float, first: int = 21, last: int = 40) -> dict[str, float]:
    """The median over simulated seeds of each figure of :meth:`Simulation.figures`."""
    figures = [r.figures(target, first, last) for r in runs]
    return {k: float(np.median([f[k] for f in figures])) for k in figures[0]}


def noise_floor(plant: Plant) -> float:
    """The per-step gap's floor on ``plant`` (:func:`~verl_ext.analysis.control.gap_noise_floor`)."""
    return gap_noise_floor(plant.measure_sigma)


__all__ = ["Coordinate", "PLANTS", "Plant", "PlantFit", "Series", "Simulation", "fit_plant", "fitted_plant",
           "median_figures", "noise_floor", "plant_series", "real_series", "selected_fraction_fit", "simulate",
           "toy_series"]  # fmt: skip
