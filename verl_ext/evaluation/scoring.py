"""The reward function ``recipe/eval.sh`` scores with: verl's own scorer, plus what the papers' metrics need.

verl's validation dump (``trainer.validation_data_dir``) holds each sample's score and the keys its reward function
returned, but not its data source, and verl's ``gsm8k`` scorer returns a bare number, so the dump has no extracted
answer to vote with. :func:`compute_score` calls verl's ``default_compute_score`` (the scorer a training run uses
for the same ``data_source``; its score is unchanged) and returns a dict that adds:

* ``acc``: the scorer's own ``acc`` when it returns one (``math_dapo``), else its score, as verl's reward managers
  record a bare number;
* ``pred``: the scorer's own extracted answer when it returns one (``math_dapo``), else the answer verl's matching
  extractor finds (``gsm8k.extract_solution`` for GSM8K, the last ``\\boxed{}`` normalised as ``math_dapo`` does
  for the others), ``None`` when there is none;
* ``data_source``: the row's data source, so that the metrics are reported per benchmark.

Set it with ``reward.custom_reward_function.path=pkg://verl_ext.evaluation.scoring``
(``reward.custom_reward_function.name=compute_score``), as ``recipe/eval.sh`` does.
"""

from __future__ import annotations

from typing import Any

from verl.utils.reward_score import default_compute_score, gsm8k, math_dapo

GSM8K_SOURCE = "openai/gsm8k"


def extract_answer(data_source: str, solution_str: str) -> str | None:
    """The final answer in a response, extracted the way verl's scorer for ``data_source`` reads it."""
    if data_source == GSM8K_SOURCE:
        return gsm8k.extract_solution(solution_str, method="strict")
    boxed = math_dapo.last_boxed_only_string(solution_str)
    if boxed is None:
        return None
    try:
        return math_dapo.normalize_final_answer(math_dapo.remove_boxed(boxed))
    except AssertionError:  # remove_boxed asserts the \boxed{...} form
        return None


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None,
                  **kwargs: Any) -> dict[str, Any]:  # fmt: skip
    """verl's score for ``data_source`` with ``acc``, ``pred`` and ``data_source`` beside it (module docstring)."""
    result = default_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    scored = dict(result) if isinstance(result, dict) else {"score": float(result)}
    scored.setdefault("acc", scored["score"])
    if "pred" not in scored:
        scored["pred"] = extract_answer(data_source, solution_str)
    scored["data_source"] = data_source
    return scored


__all__ = ["compute_score", "extract_answer"]
