"""``entropy_adv``: entropy-based advantage shaping ("Reasoning with Exploration: An Entropy Perspective", Cheng et
al., arXiv 2506.14758).

Per valid token i, with the current policy's entropy ``H_i`` taken without gradient::

    psi_i = min(alpha * sg[H_i], |A_i| / kappa)          (alpha > 0, kappa > 1)
    A'_i  = A_i + psi_i

and DAPO's dual-clip loss (:func:`~verl_ext.losses.common.dual_clip_losses`) on ``A'``. The cap ``|A_i| / kappa``
keeps the shaping below the advantage's own size (``kappa > 1``, the paper's condition, checked at config time), so a
negative advantage stays negative (``A'_i <= (1 - 1/kappa) A_i < 0``) and ``A_i = 0`` tokens are left alone.
Public code uses alpha = 0.4, kappa = 2. The entropy is the update forward's (the paper's ``H.detach()`` inside the
update), computed without a graph by verl_ext's actor worker.

A loss rather than an advantage hook: the shaping needs the current policy's entropy, which exists only in the
update forward; the driver's advantages are computed before it.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from verl_ext.config import clip_ratios, dual_clip_c, policy_loss_params
from verl_ext.losses.spec import LossSpec, Needs, declare
from verl_ext.losses.common import (aggregate, apply_rollout_weights, base_metrics, dual_clip_losses, masked_mean,
                                    metric_frac, ppo_terms)


def shaped_advantages(
    advantages: torch.Tensor, entropy: torch.Tensor, alpha: float, kappa: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(A + psi, psi, capped)``: the shaped advantages, the shaping term and where ``|A| / kappa`` binds."""
    by_entropy = alpha * entropy.detach()
    cap = advantages.abs() / kappa
    psi = torch.minimum(by_entropy, cap)
    return advantages + psi, psi, cap < by_entropy


def compute_policy_loss_entropy_adv(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Optional[Any] = None,
    rollout_is_weights: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """DAPO's dual-clip loss on entropy-shaped advantages (verl's signature plus the keyword input ``entropy``)."""
    if entropy is None:
        raise ValueError("policy loss 'entropy_adv' needs the current policy's per-token entropy, but got none. Train "
                         "through `python -m verl_ext.main_ppo` (its actor computes it in the update forward), or "
                         "pass entropy=<current entropy> (a tensor shaped like log_prob).")  # fmt: skip
    alpha, kappa = policy_loss_params(config, "entropy_adv_alpha", "entropy_adv_kappa")
    mask = response_mask.bool()
    shaped, psi, capped = shaped_advantages(advantages, entropy, alpha, kappa)
    eps_low, eps_high = clip_ratios(config)
    terms = ppo_terms(log_prob, old_log_prob, shaped, eps_low, eps_high)
    metrics = base_metrics(terms, mask)
    pg_losses = apply_rollout_weights(dual_clip_losses(terms, shaped, dual_clip_c(config), mask, metrics), rollout_is_weights)
    metrics["actor/entropy_adv/shaping_mean"] = masked_mean(psi.detach(), mask)
    metrics["actor/entropy_adv/capped_frac"] = metric_frac(capped, mask)
    return aggregate(pg_losses, mask, loss_agg_mode, config), metrics


SPEC = declare(LossSpec(
    name="entropy_adv",
    loss=compute_policy_loss_entropy_adv,
    paper="entropy-based advantage shaping (arXiv 2506.14758)",
    keys=("entropy_adv_alpha", "entropy_adv_kappa"),
    needs=lambda policy_loss: Needs(current_entropy=True),
    token_mean_metrics=frozenset({"actor/entropy_adv/shaping_mean", "actor/entropy_adv/capped_frac"}),
    clip_high="the PPO clipped surrogate with clip_ratio_high, on the entropy-shaped advantages",
))  # fmt: skip


__all__ = ["SPEC", "compute_policy_loss_entropy_adv", "shaped_advantages"]
