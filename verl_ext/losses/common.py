"""Pieces shared by verl_ext's policy losses: the per-token PPO terms, safe aggregation, masked means.

Notation (per response token i): ``A_i`` advantage, ``r_i = exp(lp_i - old_i)`` importance ratio,
``eps_low`` / ``eps_high`` PPO clip ranges.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from verl.trainer.ppo.core_algos import agg_loss

# verl's own convention (compute_policy_loss_vanilla): the log-ratio is clamped to [-20, 20] before exp so
# that a stale token cannot overflow the ratio; within that range values and gradients are exact.
LOG_RATIO_BOUND = 20.0


class PPOTerms(NamedTuple):
    log_ratio: torch.Tensor  # lp - old (unclamped)
    ratio: torch.Tensor  # exp(clamp(lp - old, +-20))
    unclipped: torch.Tensor  # -A * r
    clipped: torch.Tensor  # -A * clip(r, 1 - eps_low, 1 + eps_high)


def ppo_terms(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float
) -> PPOTerms:
    """The two PPO surrogate terms, per token."""
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    return PPOTerms(
        log_ratio=log_ratio,
        ratio=ratio,
        unclipped=-advantages * ratio,
        clipped=-advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high),
    )


def dual_clip_losses(
    terms: PPOTerms, advantages: torch.Tensor, c: float, mask: torch.Tensor, metrics: dict[str, torch.Tensor]
) -> torch.Tensor:
    """The DAPO / dual-clip PPO loss per token (verl's ``vanilla``), without host syncs::

        L^clip_i = max(-A_i r_i, -A_i clip(r_i, 1-eps_low, 1+eps_high))
        L_i      = min(L^clip_i, -A_i c)  if A_i < 0  else  L^clip_i

    Adds ``actor/pg_clipfrac_lower`` (share of valid tokens where the dual clip binds) to ``metrics``."""
    return dual_clip(torch.maximum(terms.unclipped, terms.clipped), advantages, c, mask, metrics)


def dual_clip(
    clip_loss: torch.Tensor, advantages: torch.Tensor, c: float, mask: torch.Tensor, metrics: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Dual clip (Ye et al., arXiv 1912.09729) on a per-token loss: ``min(L_i, -A_i c)`` where ``A_i < 0``, ``L_i``
    elsewhere. A plain ``torch.minimum`` on the values, as verl and the ERC / CE-GPPO code do: where the bound binds
    (``A_i < 0`` and ``L_i > -A_i c``) the token's loss is the constant ``-A_i c`` and has no gradient. Adds
    ``actor/pg_clipfrac_lower`` (share of valid tokens where it binds) to ``metrics``."""
    dual_bound = -advantages * c
    negative = advantages < 0
    metrics["actor/pg_clipfrac_lower"] = metric_frac(negative & (clip_loss.detach() > dual_bound), mask)
    return torch.where(negative, torch.minimum(clip_loss, dual_bound), clip_loss)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over ``mask`` as a 0-d tensor; 0 (not NaN) when the mask is empty."""
    return torch.where(mask, x, 0.0).sum() / mask.sum().clamp(min=1).to(x.dtype)


def metric_frac(flag: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Fraction of valid tokens where ``flag`` holds (0-d float32 tensor, 0 for an empty mask)."""
    return (flag & mask).sum().to(torch.float32) / mask.sum().clamp(min=1).to(torch.float32)


def aggregate(loss_mat: torch.Tensor, mask: torch.Tensor, loss_agg_mode: str, config: Any) -> torch.Tensor:
    """verl's ``agg_loss`` with the actor's global batch info (``config.global_batch_info``).

    Without global batch info (a loss called directly on a batch), the local token / sequence counts are
    used, clamped to at least 1 so that a micro-batch with no valid token gives a finite 0 instead of NaN.
    """
    info = dict(getattr(config, "global_batch_info", None) or {})
    if info.get("dp_size") is None:
        info["dp_size"] = 1
    if info["dp_size"] <= 1:
        if info.get("batch_num_tokens") is None:
            info["batch_num_tokens"] = mask.sum().clamp(min=1)
        if info.get("global_batch_size") is None:
            info["global_batch_size"] = (mask.sum(dim=-1) > 0).sum().clamp(min=1)
    return agg_loss(loss_mat=loss_mat, loss_mask=mask, loss_agg_mode=loss_agg_mode, **info)


def apply_rollout_weights(loss_mat: torch.Tensor, rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    """Multiply by verl's rollout-correction importance weights when given (verl computes them)."""
    return loss_mat if rollout_is_weights is None else loss_mat * rollout_is_weights


def base_metrics(terms: PPOTerms, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """``actor/ppo_kl`` (mean of ``old - lp``) and ``actor/pg_clipfrac`` as 0-d tensors."""
    return {
        "actor/ppo_kl": masked_mean(-terms.log_ratio.detach(), mask),
        "actor/pg_clipfrac": metric_frac(terms.clipped.detach() > terms.unclipped.detach(), mask),
    }
