"""The papers' evaluation metrics for one prompt's ``n`` scored samples: avg@k, unbiased pass@k, maj@k.

* **avg@n** (ERC, CE-GPPO: avg@32): the mean correctness of the ``n`` samples; averaged over prompts it is the
  expected accuracy of one sample, i.e. pass@1.
* **pass@k** (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1): with ``c`` of ``n``
  samples correct, the probability that a uniformly drawn ``k``-subset holds at least one correct sample,

      pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

  computed as the product (the binomials overflow a float for n in the hundreds); unbiased for every ``k <= n``.
* **maj@k** (majority voting, self-consistency): the probability that the answer most of a uniformly drawn
  ``k``-subset gives is correct. Ties are broken uniformly at random, counted by their expectation: a subset
  whose top count is shared by ``t`` answers, one of them correct, scores ``1/t``. Samples without an extracted
  answer cast no vote (a subset with no votes scores 0). Every sample the scorer judged correct votes for one
  answer, the ground truth (answers equal to it are equal to each other, e.g. ``18`` and ``18.0``); wrong samples
  vote for their extracted answer string. Computed exactly: a sum over how many votes each answer gets in the
  subset (multivariate hypergeometric), by dynamic programming over the wrong answers, in rationals.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from fractions import Fraction
from math import comb

import numpy as np


def _check(n: int, k: int, name: str) -> None:
    if n < 1:
        raise ValueError(f"{name}: n must be >= 1 samples; got n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"{name}: k must be in [1, n={n}]; got k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of a prompt with ``c`` correct samples out of ``n`` (Chen et al. 2021)."""
    _check(n, k, "pass@k")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k: the correct count c must be in [0, n={n}]; got c={c}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def avg_at_n(correct: Sequence[bool]) -> float:
    """The mean correctness of a prompt's samples (avg@n)."""
    _check(len(correct), len(correct), "avg@n")
    return float(np.mean(np.asarray(correct, dtype=np.float64)))


def maj_at_k(correct: Sequence[bool], answers: Sequence[str | None], k: int) -> float:
    """Expected majority-vote correctness of a uniformly drawn ``k``-subset of a prompt's samples (see the module
    docstring for the votes and the ties); ``correct[i]`` is sample ``i``'s verdict, ``answers[i]`` its extracted
    answer (``None``: none)."""
    n = len(correct)
    _check(n, k, "maj@k")
    if len(answers) != n:
        raise ValueError(f"maj@k: {len(answers)} answers for {n} samples")
    right = sum(bool(c) for c in correct)
    wrong = Counter(a for c, a in zip(correct, answers) if not c and a is not None)
    silent = n - right - sum(wrong.values())
    total = Fraction(0)
    for v in range(1, min(right, k) + 1):
        # ways[s][t]: weighted number of ways the wrong answers take s samples, each at most v, t of them exactly v
        ways = [[0] * (len(wrong) + 2) for _ in range(k - v + 1)]
        ways[0][0] = 1
        for m in wrong.values():
            grown = [[0] * (len(wrong) + 2) for _ in range(k - v + 1)]
            for s, row in enumerate(ways):
                for t, w in enumerate(row):
                    if not w:
                        continue
                    for x in range(min(m, v, k - v - s) + 1):
                        grown[s + x][t + (x == v)] += w * comb(m, x)
            ways = grown
        for s, row in enumerate(ways):
            fill = comb(silent, k - v - s)
            if fill:
                total += sum(Fraction(w * fill, 1 + t) for t, w in enumerate(row) if w) * comb(right, v)
    return float(total / comb(n, k))


def k_values(n: int) -> list[int]:
    """The k reported for ``n`` samples: 1, 2, 4, ... up to ``n``, and ``n`` itself."""
    _check(n, 1, "k values")
    ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return ks if ks[-1] == n else [*ks, n]


__all__ = ["avg_at_n", "k_values", "maj_at_k", "pass_at_k"]
