"""The share of a step's responses (or prompts) cut at the configured length limit, from verl's per-step metrics.

verl logs ``response_length/clip_ratio`` as the share of responses whose length equals the width of the batch's
response tensor. verl's legacy trainer pads every response to ``data.max_response_length``, so there the width is
the limit and the metric is the truncation rate. verl's V1 trainer (the default) keeps the batch jagged and pads it
to its longest sample (verl issue #7817, open): there the metric is the share of responses as long as the step's
longest one - 0.5 in a step whose answers are all 13-15 tokens, half of them 15 - and never 0.

The truncation rate follows from the metrics verl already logs, with no pass over the batch: a response is cut iff
its length is the limit, so a step whose longest response (``response_length/max``) is below the limit cut none,
and in a step whose longest reached it the tensor is as wide as the limit and verl's ratio is the share cut.
Either way the result is the share at the limit, whichever trainer padded the batch. verl_ext logs it under its
own key, ``verl_ext/<verl's key>`` (:data:`verl_ext.contract.CUT_RATIO_KEYS`), beside verl's value under verl's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from verl_ext.contract import CUT_RATIO_KEYS

CLIP_RATIOS = {
    "response_length/clip_ratio": ("response_length/max", "response"),
    "response_length_non_aborted/clip_ratio": ("response_length_non_aborted/max", "response"),
    "prompt_length/clip_ratio": ("prompt_length/max", "prompt"),
}
"""verl's length ratios: each with the metric of the step's longest sample and the limit it is measured against."""


def cut_share(verl_ratio: float, longest: float, limit: int) -> float:
    """The share of a step's samples cut at ``limit`` tokens, from verl's ``*/clip_ratio`` and ``*/max`` of the step.

    NaN stays NaN (verl's non-aborted ratio when every sample was aborted). A longest sample above the limit is a
    ``ValueError``: the limit given is not the one the run's lengths were cut at.
    """
    if math.isnan(verl_ratio) or math.isnan(longest):
        return verl_ratio
    if longest > limit:
        raise ValueError(f"a sample of {longest:g} tokens is longer than the limit {limit}: not this run's limit")
    return float(verl_ratio) if longest == limit else 0.0


def corrected_clip_ratios(metrics: Mapping[str, float], max_prompt_length: int, max_response_length: int
                          ) -> dict[str, float]:  # fmt: skip
    """verl's length ratios among ``metrics`` measured against the configured limits (:func:`cut_share`), under
    verl_ext's keys (:data:`verl_ext.contract.CUT_RATIO_KEYS`: ``verl_ext/response_length/clip_ratio``, ...).

    A ratio whose ``*/max`` is missing, or whose longest sample exceeds its limit (a prompt longer than
    ``data.max_prompt_length`` when verl's truncation is off), is left out: it cannot be corrected.
    """
    limits = {"response": max_response_length, "prompt": max_prompt_length}
    out = {}
    for key, (longest_key, kind) in CLIP_RATIOS.items():
        if key not in metrics or longest_key not in metrics:
            continue
        try:
            out[CUT_RATIO_KEYS[key]] = cut_share(float(metrics[key]), float(metrics[longest_key]), limits[kind])
        except ValueError:  # a sample longer than its limit: cut_share cannot say
            continue
    return out


__all__ = ["CLIP_RATIOS", "corrected_clip_ratios", "cut_share"]
