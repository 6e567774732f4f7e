"""Oracles for avg@n, unbiased pass@k and maj@k: brute force over every k-subset of the samples."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from fractions import Fraction

import pytest

from verl_ext.analysis.pass_at_k import avg_at_n, k_values, maj_at_k, pass_at_k


def brute_pass_at_k(correct: list[bool], k: int) -> Fraction:
    subsets = list(itertools.combinations(range(len(correct)), k))
    return Fraction(sum(any(correct[i] for i in s) for s in subsets), len(subsets))


def brute_maj_at_k(correct: list[bool], answers: list[str | None], k: int, truth: str = "<truth>") -> Fraction:
    """Every k-subset votes; correct samples vote for the ground truth, wrong ones for their answer, samples without
    an answer abstain; a tie among t answers containing the truth scores 1/t."""
    subsets = list(itertools.combinations(range(len(correct)), k))
    total = Fraction(0)
    for s in subsets:
        votes = Counter(truth if correct[i] else answers[i] for i in s if correct[i] or answers[i] is not None)
        if not votes:
            continue
        top = max(votes.values())
        leaders = [a for a, c in votes.items() if c == top]
        total += Fraction(int(truth in leaders), len(leaders))
    return total / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_pass_at_k_equals_the_fraction_of_k_subsets_with_a_correct_sample(n):
    for c in range(n + 1):
        correct = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(float(brute_pass_at_k(correct, k)), abs=1e-12), (n, c, k)


def test_pass_at_k_is_stable_where_the_binomials_overflow_a_float():
    # C(2000, 1000) ~ 1e600: the ratio form would overflow; 1 - C(n-c,k)/C(n,k) exactly, from Python's integers
    n, c, k = 2000, 3, 1000
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    assert pass_at_k(n, 0, k) == 0.0 and pass_at_k(n, n - k + 1, k) == 1.0


def test_maj_at_k_against_brute_force_on_random_cases():
    rng = random.Random(7)
    for _ in range(60):
        n = rng.randint(1, 9)
        correct = [rng.random() < 0.4 for _ in range(n)]
        answers = [None if rng.random() < 0.2 else rng.choice("abc") for _ in range(n)]
        for k in range(1, n + 1):
            want = brute_maj_at_k(correct, answers, k)
            assert maj_at_k(correct, answers, k) == pytest.approx(float(want), abs=1e-12), (correct, answers, k)


def test_maj_at_k_hand_made_case_with_ties():
    # 4 samples: 2 correct, 2 wrong answering "7". maj@4: a 2-2 tie, broken uniformly: 1/2.
    correct, answers = [True, True, False, False], ["12", "12.0", "7", "7"]
    assert maj_at_k(correct, answers, 4) == 0.5
    # maj@2 over the 6 pairs: (c,c) x1 -> 1; (w,w) x1 -> 0; (c,w) x4 -> tie 1/2: (1 + 4 * 0.5) / 6
    assert maj_at_k(correct, answers, 2) == pytest.approx(0.5)
    # a third wrong answer "9" breaks the tie in the ground truth's favour at k = n
    assert maj_at_k([True, True, False, False], ["12", "12", "7", "9"], 4) == 1.0
    # a sample without an answer abstains; all abstaining scores 0
    assert maj_at_k([False, False], [None, None], 2) == 0.0
    assert maj_at_k([True, False], ["3", None], 2) == 1.0
    # maj@1 is avg@n: one sample votes alone
    assert maj_at_k([True, False, False], ["1", "2", "2"], 1) == pytest.approx(1 / 3)


def test_avg_and_k_values():
    assert avg_at_n([True, False, False, True]) == 0.5
    assert k_values(1) == [1] and k_values(8) == [1, 2, 4, 8] and k_values(12) == [1, 2, 4, 8, 12]


@pytest.mark.parametrize(("call", "match"), [
    (lambda: pass_at_k(4, 5, 1), "c must be in"),
    (lambda: pass_at_k(4, 1, 5), "k must be in"),
    (lambda: pass_at_k(0, 0, 1), "n must be >= 1"),
    (lambda: maj_at_k([True], ["1", "2"], 1), "2 answers for 1 samples"),
])
def test_bad_arguments_name_what_is_allowed(call, match):
    with pytest.raises(ValueError, match=match):
        call()
