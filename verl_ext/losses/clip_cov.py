"""Clip-Cov (Cui et al., "The Entropy Mechanism of RL for Reasoning LMs", arXiv 2505.22617).

Per valid token i, with ``cov_i = (A_i - mean A)(lp_i - mean lp)`` (no gradient):

    L_i = sg[ max(-A_i r_i, -A_i clip(r_i, 1-eps_low, 1+eps_high)) ]   if i in S
    L_i =    max(-A_i r_i, -A_i clip(r_i, 1-eps_low, 1+eps_high))      otherwise

where ``sg`` stops the gradient and ``S`` holds ``max(1, floor(clip_cov_ratio * N))`` tokens drawn uniformly
at random among the candidates. The paper's candidates are the valid tokens with ``clip_cov_lb < cov_i < clip_cov_ub``
*not already clipped by PPO*; which of these conditions applies depends on the scope (``policy_loss.cov_scope``):

* ``micro`` (``cov_selected is None``): the selection runs here, over this call's tokens, with the current ratio, so
  the PPO-clipped tokens (``-A clip(r) > -A r``) are excluded: the paper's candidate set.
* ``batch``: ``cov_selected`` was drawn on the driver before the update (:func:`~verl_ext.losses.selection.select_tokens_for_batch`), where every ratio is 1: no token can be known to be PPO-clipped, so the candidates are
  all valid tokens with ``lb < cov_i < ub``, and this loss applies the mask as given. A selected token that PPO clips
  at its update has no gradient either way, so such tokens take part of the budget without changing the gradient.

The loss is aggregated with verl's ``agg_loss``; detached tokens keep their value and stay in the denominator.

Differences from verl's built-in ``clip_cov`` (which this replaces): the selection is reproducible (a
counter-based hash, never ``torch.randperm`` on the global RNG), runs without host syncs, can come from the
whole training batch (``cov_selected``, see :mod:`verl_ext.losses.selection`), and a selected token keeps its loss
*value* (only its gradient is removed, as the paper says); verl multiplies it by 0. Gradients are equal.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from verl_ext.config import clip_ratios, policy_loss_params
from verl_ext.losses.spec import LossSpec, declare
from verl_ext.losses.common import aggregate, apply_rollout_weights, base_metrics, metric_frac, ppo_terms
from verl_ext.losses.selection import (
    clip_cov_eligible,
    clip_cov_select,
    cov_needs,
    note_micro_fallback,
    selection_metrics,
    token_covariance,
)


def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Optional[Any] = None,
    rollout_is_weights: torch.Tensor | None = None,
    cov_selected: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Clip-Cov policy loss (verl's signature).

    :param cov_selected: optional bool mask of tokens selected over the whole batch; ``None`` selects over the
        tensors given here (``cov_scope=micro``).
    :returns: ``(loss, metrics)`` with metrics as 0-d tensors.
    """
    ratio, lb, ub, seed = policy_loss_params(config, "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "cov_seed")
    eps_low, eps_high = clip_ratios(config)
    mask = response_mask.bool()
    terms = ppo_terms(log_prob, old_log_prob, advantages, eps_low, eps_high)
    metrics = base_metrics(terms, mask)

    if cov_selected is None:
        note_micro_fallback("clip_cov", config)
        ppo_clipped = terms.clipped.detach() > terms.unclipped.detach()
        cov = token_covariance(advantages, log_prob, mask)
        candidates = mask & ~ppo_clipped
        selected = clip_cov_select(cov, candidates, mask, old_log_prob, ratio, lb, ub, seed)
        metrics.update(selection_metrics("actor/clip_cov", selected, cov, mask))
        metrics["actor/clip_cov/candidate_frac"] = metric_frac(clip_cov_eligible(cov, candidates, lb, ub), mask)
    else:
        selected = cov_selected.bool() & mask
        metrics["actor/clip_cov/selected_frac"] = metric_frac(selected, mask)

    pg_losses = torch.maximum(terms.unclipped, terms.clipped)
    pg_losses = torch.where(selected, pg_losses.detach(), pg_losses)
    pg_losses = apply_rollout_weights(pg_losses, rollout_is_weights)
    return aggregate(pg_losses, mask, loss_agg_mode, config), metrics


def select_for_batch(cov: torch.Tensor, mask: torch.Tensor, key: torch.Tensor, config: Any, step: int, ratio: float,
                     metrics: dict | None) -> torch.Tensor:
    """The batch scope's draw (:func:`~verl_ext.losses.selection.select_tokens_for_batch`): every valid token with
    ``lb < cov < ub`` is a candidate (before the update every ratio is 1), seeded per step."""
    lb, ub, seed = policy_loss_params(config, "clip_cov_lb", "clip_cov_ub", "cov_seed")
    if metrics is not None:  # the budget is min(k, candidates): how many the bounds admitted
        metrics["actor/clip_cov/candidate_frac"] = metric_frac(clip_cov_eligible(cov, mask, lb, ub), mask)
    return clip_cov_select(cov, mask, mask, key, ratio, lb, ub, seed + 1_000_003 * step)


SPEC = declare(LossSpec(
    name="clip_cov",
    loss=compute_policy_loss_clip_cov,
    paper="Clip-Cov (arXiv 2505.22617): the gradient of a random share of high-covariance tokens detached",
    keys=("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "cov_scope", "cov_seed"),
    needs=cov_needs,
    token_mean_metrics=frozenset({"actor/clip_cov/selected_frac", "actor/clip_cov/candidate_frac"}),
    clip_high="the PPO clipped surrogate with clip_ratio_high on the tokens Clip-Cov does not detach",
    selection_ratio="clip_cov_ratio",
    batch_select=select_for_batch,
    replaces_verl=True,
))  # fmt: skip
