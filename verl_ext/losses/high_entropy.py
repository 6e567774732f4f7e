"""``high_entropy``: policy gradient on the high-entropy minority of tokens ("Beyond the 80/20 Rule", Wang et al.,
arXiv 2506.01939).

The paper keeps the gradient of the fraction ``rho`` (0.2) of response tokens with the highest entropy ``H_i`` and
drops the others from the loss and from its token-mean denominator. On DAPO's dual-clip loss ``L^dual_i``
(:func:`~verl_ext.losses.common.dual_clip_losses`)::

    S   = the k = max(1, ceil(rho N)) valid tokens with the largest H_i
    L   = (1 / |S|) sum_{i in S} w_i L^dual_i                  (w_i: verl's rollout-correction weights, if any)

Implemented as per-token weights ``omega_i = N / |S|`` on ``S`` and 0 elsewhere, aggregated with verl's
``agg_loss`` (keeping verl's global normalisation over micro-batches and ranks). With ``loss_agg_mode=token-mean``
verl divides each optimiser step's loss by the valid tokens ``N_m`` of its mini-batch ``m`` (all ranks), so a step's
loss is ``(N / (|S| N_m)) sum_{i in S, i in m} w_i L^dual_i``.

Two scopes (``policy_loss.high_entropy_scope``):

* ``batch`` (default): ``S`` is ranked over the whole training batch (``N`` = its valid tokens) by the old-log-prob
  pass's entropy, on the driver (:func:`high_entropy_weights`), and reaches every micro-batch as batch field
  ``high_entropy_weight``: the same tokens whatever the micro-batching or the number of GPUs. Ties are broken by a
  hash of the token's content (token id, column, row fingerprint), not by its place in the batch. This is exactly the
  formula above (with ``H`` the current entropy) only with ``token-mean`` and **one optimiser step per batch** (one
  mini-batch, ``ppo_epochs=1``): then ``N_m = N`` and the old pass's entropy is the current one (up to the numerics
  of the two forward passes). With several mini-batches (or epochs) each step's loss is the mean over its share of
  ``S`` only in expectation (its ``|S cap m|`` is not exactly ``|S| N_m / N``), and ``S`` stays the ranking of the
  whole batch by the old entropy, while the current entropy of later mini-batches drifts with each update; ranking
  each step by its current entropy would need an extra forward pass per step.
* ``micro``: ``S`` is ranked inside each loss call by the update forward's (current) entropy (graph-free), ``N``
  and ``|S|`` counted in that micro-batch - the paper's code (``get_global_entropy_top_mask`` per micro-batch and
  rank); the step's loss is then the token-weighted mean of the micro-batches' means over their own ``S``.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from verl_ext.config import clip_ratios, dual_clip_c, policy_loss_params
from verl_ext.losses.common import aggregate, apply_rollout_weights, base_metrics, dual_clip_losses, metric_frac, ppo_terms
from verl_ext.contract import HIGH_ENTROPY_WEIGHT
from verl_ext.losses.selection import rank_select, token_hash
from verl_ext.losses.spec import LossSpec, Needs, declare

_HOW_TO_ENABLE = (
    "Train through `python -m verl_ext.main_ppo`, which adds the batch field `high_entropy_weight` (high_entropy_scope="
    "batch) or computes the current entropy in the update forward (high_entropy_scope=micro); when calling the loss "
    "directly, pass high_entropy_weight=<high_entropy_weights(...)> or entropy=<current entropy>."
)


def high_entropy_weights(
    entropy: torch.Tensor, mask: torch.Tensor, ratio: float, key: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """Batch scope, on the driver: ``omega_i = N / |S|`` on the ``max(1, ceil(ratio N))`` valid tokens with the largest
    entropy, 0 elsewhere (float32, shaped like ``entropy``), and the batch's metrics. Equal entropies are ordered by
    :func:`~verl_ext.losses.selection.token_hash` of ``key`` (the response token ids), so that the choice among them
    follows the tokens, not the order of the rows."""
    mask = mask.bool()
    n = int(mask.sum())
    weights = torch.zeros(entropy.shape, dtype=torch.float32)
    if n == 0:
        return weights, {"selected_frac": 0.0, "entropy_threshold": 0.0}
    k = max(1, math.ceil(ratio * n))
    flat_h = torch.where(mask, entropy.detach().to(torch.float64), float("-inf")).reshape(-1)
    tie = token_hash(0, key if key is not None else entropy, mask).reshape(-1)
    by_hash = torch.argsort(tie, stable=True)
    order = by_hash[torch.argsort(-flat_h[by_hash], stable=True)]
    chosen = order[:k]
    weights.view(-1)[chosen] = n / k
    return weights, {"selected_frac": k / n, "entropy_threshold": float(flat_h[chosen[-1]])}


def micro_weights(entropy: torch.Tensor, mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """Micro scope, inside the loss (no host sync): ``N / |S|`` on the ``max(1, ceil(ratio N))`` valid tokens of this
    call with the largest entropy, 0 elsewhere (the paper's per-micro-batch top-k; ties as ``topk`` breaks them)."""
    selected = rank_select(-entropy.detach(), mask, ratio, mask, sentinel=float("inf"), ceil=True)
    n = mask.sum().to(entropy.dtype)
    return torch.where(selected, n / selected.sum().clamp(min=1).to(entropy.dtype), 0.0)


def compute_policy_loss_high_entropy(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Optional[Any] = None,
    rollout_is_weights: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    high_entropy_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """DAPO's dual-clip loss on the high-entropy tokens only (verl's signature plus ``high_entropy_weight`` (batch
    scope) or ``entropy`` (micro scope))."""
    mask = response_mask.bool()
    if high_entropy_weight is None:
        if entropy is None:
            raise ValueError(f"policy loss 'high_entropy' got neither high_entropy_weight nor entropy. {_HOW_TO_ENABLE}")
        (ratio,) = policy_loss_params(config, "high_entropy_ratio")
        weight = micro_weights(entropy, mask, ratio)
    else:
        weight = high_entropy_weight.to(log_prob.dtype)
    eps_low, eps_high = clip_ratios(config)
    terms = ppo_terms(log_prob, old_log_prob, advantages, eps_low, eps_high)
    metrics = base_metrics(terms, mask)
    pg_losses = dual_clip_losses(terms, advantages, dual_clip_c(config), mask, metrics)
    pg_losses = apply_rollout_weights(pg_losses, rollout_is_weights) * weight
    metrics["actor/high_entropy/selected_frac"] = metric_frac(weight > 0, mask)
    return aggregate(pg_losses, mask, loss_agg_mode, config), metrics


def high_entropy_needs(policy_loss: Any) -> Needs:
    """``batch`` scope (the default): the driver's weights over the whole batch, ranked by the old pass's entropy;
    ``micro``: the update forward's entropy."""
    (scope,) = policy_loss_params({"policy_loss": policy_loss}, "high_entropy_scope")
    if scope == "batch":
        return Needs(batch_field=HIGH_ENTROPY_WEIGHT, micro_key="high_entropy_scope")
    return Needs(current_entropy=True, micro_key="high_entropy_scope")


def batch_weights(entropy: torch.Tensor, mask: torch.Tensor, config: Any, key: torch.Tensor | None):
    """The driver's weights (:func:`high_entropy_weights`) with the configured ``high_entropy_ratio``."""
    (ratio,) = policy_loss_params(config, "high_entropy_ratio")
    return high_entropy_weights(entropy, mask, ratio, key)


SPEC = declare(LossSpec(
    name="high_entropy",
    loss=compute_policy_loss_high_entropy,
    paper="policy gradient on the high-entropy minority of tokens (arXiv 2506.01939), batch or micro scope",
    keys=("high_entropy_ratio", "high_entropy_scope"),
    needs=high_entropy_needs,
    token_mean_metrics=frozenset({"actor/high_entropy/selected_frac"}),
    clip_high="the dual-clip PPO surrogate with clip_ratio_high, on the high-entropy tokens",
    batch_weights=batch_weights,
))  # fmt: skip


__all__ = ["SPEC", "compute_policy_loss_high_entropy", "high_entropy_weights", "micro_weights"]
