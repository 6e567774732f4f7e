"""``grpo_erc``: Entropy Ratio Clipping on the DAPO / dual-clip PPO loss (Su et al., arXiv 2512.05591).

Per valid token i:

    L^clip_i = max(-A_i r_i, -A_i clip(r_i, 1-eps_low, 1+eps_high))
    L^dual_i = min(L^clip_i, -A_i c)  if A_i < 0  else  L^clip_i          (c = clip_ratio_c)
    L_i      = w_i * L^dual_i   if entropy_mask_low < H_i / H_old_i < entropy_mask_high
    L_i      = sg[w_i * L^dual_i]   otherwise

``w_i`` are verl's rollout-correction importance weights when given (``algorithm.rollout_correction``;
verl_ext does not re-implement truncated IS). Aggregated with verl's ``agg_loss``.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from verl_ext.config import clip_ratios, dual_clip_c
from verl_ext.losses.common import aggregate, apply_rollout_weights, base_metrics, dual_clip_losses, ppo_terms
from verl_ext.losses.erc import ERC_METRICS, entropy_ratio_mask, erc_needs, require_entropies
from verl_ext.losses.spec import LossSpec, declare


def compute_policy_loss_grpo_erc(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Optional[Any] = None,
    rollout_is_weights: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    old_entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """ERC on dual-clip PPO (verl's signature plus ``entropy`` / ``old_entropy`` keyword inputs)."""
    require_entropies("grpo_erc", entropy, old_entropy)
    eps_low, eps_high = clip_ratios(config)
    c = dual_clip_c(config)
    mask = response_mask.bool()
    terms = ppo_terms(log_prob, old_log_prob, advantages, eps_low, eps_high)
    metrics = base_metrics(terms, mask)

    pg_losses = apply_rollout_weights(dual_clip_losses(terms, advantages, c, mask, metrics), rollout_is_weights)

    pg_losses, erc_metrics = entropy_ratio_mask(pg_losses, entropy, old_entropy, mask, config)
    metrics.update(erc_metrics)
    return aggregate(pg_losses, mask, loss_agg_mode, config), metrics


SPEC = declare(LossSpec(
    name="grpo_erc",
    loss=compute_policy_loss_grpo_erc,
    paper="Entropy Ratio Clipping (arXiv 2512.05591) on DAPO's dual-clip PPO loss",
    keys=("entropy_mask_low", "entropy_mask_high"),
    needs=erc_needs,
    token_mean_metrics=ERC_METRICS,
    clip_high="DAPO's dual-clip PPO surrogate with clip_ratio_high as its upper bound, then the entropy-ratio mask",
))  # fmt: skip
