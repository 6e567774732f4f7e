"""The entropy-performance law of Cui et al., "The Entropy Mechanism of Reinforcement Learning for
Reasoning Language Models" (arXiv 2505.22617):

    R = -a * exp(H) + b

``H`` is the policy entropy, ``R`` the downstream performance (reward or accuracy), ``a, b`` are
fitted per run. With ``x = exp(H)`` the law is linear, ``R = slope * x + intercept`` with
``a = -slope`` and ``b = intercept``, so ordinary least squares gives the closed form

    slope = sum((x - mean x) * (R - mean R)) / sum((x - mean x)^2),  intercept = mean R - slope * mean x.

When entropy is exhausted (``H = 0``, ``exp(H) = 1``) the law predicts the ceiling ``R = b - a``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verl_ext.analysis.run_reader import Run

#: Fewest (entropy, reward) points a fit accepts.
MIN_POINTS = 3


class FitError(ValueError):
    """The points do not determine a fit (too few, or entropy constant)."""


@dataclass(frozen=True)
class EntropyLawFit:
    """``R = -a * exp(H) + b`` fitted on ``n`` points; ``r2`` is the coefficient of determination."""

    a: float
    b: float
    r2: float
    n: int

    @property
    def ceiling(self) -> float:
        """Predicted performance once entropy is exhausted: ``R(H=0) = b - a``."""
        return self.b - self.a

    def predict(self, entropy: np.ndarray) -> np.ndarray:
        """``-a * exp(H) + b``."""
        return -self.a * np.exp(np.asarray(entropy, dtype=np.float64)) + self.b


def fit_entropy_law(entropy: np.ndarray, reward: np.ndarray) -> EntropyLawFit:
    """Least-squares fit of ``R = -a * exp(H) + b``; non-finite pairs are dropped first.

    Raises :class:`FitError` with fewer than :data:`MIN_POINTS` finite pairs or constant entropy.
    ``r2`` is NaN when the reward is constant (no variance to explain).
    """
    h = np.asarray(entropy, dtype=np.float64).ravel()
    r = np.asarray(reward, dtype=np.float64).ravel()
    if h.shape != r.shape:
        raise ValueError(f"entropy and reward differ in length: {h.size} vs {r.size}")
    x = np.exp(h)
    keep = np.isfinite(x) & np.isfinite(r)
    x, r = x[keep], r[keep]
    if x.size < MIN_POINTS:
        raise FitError(f"{x.size} step(s) with finite entropy and reward, need at least {MIN_POINTS}")
    dx = x - x.mean()
    sxx = float(dx @ dx)
    if sxx <= (1e-12 * float(np.abs(x).max())) ** 2 * x.size:
        raise FitError(f"entropy is constant ({h[keep][0]:.6g}) over the {x.size} steps")
    slope = float(dx @ (r - r.mean())) / sxx
    intercept = float(r.mean()) - slope * float(x.mean())
    residual = r - (slope * x + intercept)
    ss_tot = float(((r - r.mean()) ** 2).sum())
    r2 = 1.0 - float(residual @ residual) / ss_tot if ss_tot > 0 else float("nan")
    return EntropyLawFit(a=-slope, b=intercept, r2=r2, n=int(x.size))


def paired_points(run: Run, entropy_key: str, reward_key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps logging both metrics with finite values, and the entropy and reward at those steps."""
    h_by_step = run.metrics.get(entropy_key, {})
    r_by_step = run.metrics.get(reward_key, {})
    steps = sorted(
        s for s in h_by_step.keys() & r_by_step.keys() if np.isfinite(h_by_step[s]) and np.isfinite(r_by_step[s])
    )
    h = np.array([h_by_step[s] for s in steps], dtype=np.float64)
    r = np.array([r_by_step[s] for s in steps], dtype=np.float64)
    return np.array(steps, dtype=np.int64), h, r


def fit_run(run: Run, entropy_key: str, reward_key: str) -> EntropyLawFit:
    """Fit the law on the steps of ``run`` that log both keys."""
    _, h, r = paired_points(run, entropy_key, reward_key)
    try:
        return fit_entropy_law(h, r)
    except FitError as e:
        raise FitError(f"{e} (keys {entropy_key} and {reward_key})") from None


__all__ = ["MIN_POINTS", "EntropyLawFit", "FitError", "fit_entropy_law", "fit_run", "paired_points"]
