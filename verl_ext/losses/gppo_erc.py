"""``gppo_erc``: Entropy Ratio Clipping on gradient-preserving clipping (CE-GPPO, arXiv 2509.20712; ERC,
arXiv 2512.05591).

Per valid token i, with ``sg`` the stop-gradient (forward value of ``r / sg[r]`` is 1, gradient of r),
``c = clip_ratio_c`` (the actor's dual-clip constant) and ``w_i`` verl's rollout-correction weights (1 if none)::

    L^gp_i   = -beta1 (1-eps_low)  A_i r_i / sg[r_i]    if A_i < 0 and r_i < 1 - eps_low
    L^gp_i   = -beta2 (1+eps_high) A_i r_i / sg[r_i]    if A_i > 0 and r_i > 1 + eps_high
    L^gp_i   = -A_i r_i                                 otherwise
    L^dual_i = min(L^gp_i, -A_i c)  if A_i < 0  else  L^gp_i                      (DAPO's dual clip)
    L_i      = w_i L^dual_i          if entropy_mask_low < H_i / H_old_i < entropy_mask_high
    L_i      = sg[w_i L^dual_i]      otherwise                                   (the ERC mask)

Clipped tokens thus keep a gradient scaled by ``beta (1 +- eps) / r`` instead of none (value
``-beta (1 +- eps) A_i``, gradient w.r.t. the log-prob ``-beta (1 +- eps) A_i``). The dual clip is a plain ``min`` on
the values, as in the ERC repository's ``gppo_erc`` and CE-GPPO's code: a token with ``A_i < 0`` whose loss exceeds
``-A_i c`` (``r_i > c`` when unclipped) takes the constant ``-A_i c`` and has no gradient - it is not
gradient-preserving. ``beta1 = beta2 = 1`` reproduces the ERC repository's ``gppo_erc``; CE-GPPO's defaults are
0.75 / 1.0. Aggregated with verl's ``agg_loss``.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from verl_ext.config import clip_ratios, dual_clip_c, policy_loss_params
from verl_ext.losses.common import aggregate, apply_rollout_weights, base_metrics, dual_clip, ppo_terms
from verl_ext.losses.erc import ERC_METRICS, entropy_ratio_mask, erc_needs, require_entropies
from verl_ext.losses.spec import LossSpec, declare


def compute_policy_loss_gppo_erc(
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
    """ERC on CE-GPPO's gradient-preserving clip with DAPO's dual clip (verl's signature plus ``entropy`` /
    ``old_entropy``)."""
    require_entropies("gppo_erc", entropy, old_entropy)
    beta1, beta2 = policy_loss_params(config, "gppo_beta1", "gppo_beta2")
    eps_low, eps_high = clip_ratios(config)
    c = dual_clip_c(config)
    mask = response_mask.bool()
    terms = ppo_terms(log_prob, old_log_prob, advantages, eps_low, eps_high)
    metrics = base_metrics(terms, mask)

    # One differentiable product -A * r * s with a gradient-free scale s: s = 1 for unclipped tokens,
    # s = beta (1 -+ eps) / sg[r] for clipped ones, so that the value is -beta (1 -+ eps) A and the
    # gradient -beta (1 -+ eps) A (d r / d lp = r), exactly L^gp above.
    with torch.no_grad():
        ratio = terms.ratio
        low_clip = (advantages < 0) & (ratio < 1.0 - eps_low)
        high_clip = (advantages > 0) & (ratio > 1.0 + eps_high)
        scale = torch.where(low_clip, beta1 * (1.0 - eps_low) / ratio, 1.0)
        scale = torch.where(high_clip, beta2 * (1.0 + eps_high) / ratio, scale)
    pg_losses = dual_clip(terms.unclipped * scale, advantages, c, mask, metrics)
    pg_losses = apply_rollout_weights(pg_losses, rollout_is_weights)

    pg_losses, erc_metrics = entropy_ratio_mask(pg_losses, entropy, old_entropy, mask, config)
    metrics.update(erc_metrics)
    return aggregate(pg_losses, mask, loss_agg_mode, config), metrics


SPEC = declare(LossSpec(
    name="gppo_erc",
    loss=compute_policy_loss_gppo_erc,
    paper="Entropy Ratio Clipping on CE-GPPO's gradient-preserving clip (arXiv 2509.20712)",
    keys=("entropy_mask_low", "entropy_mask_high", "gppo_beta1", "gppo_beta2"),
    needs=erc_needs,
    token_mean_metrics=ERC_METRICS,
    clip_high_refusal="CE-GPPO keeps the gradient of tokens beyond the bound (scaled by gppo_beta2 x (1 + "
                      "clip_ratio_high)), so the bound does not decide which positive tokens learn: DAPO's clip-higher "
                      "mechanism is not there",
))  # fmt: skip
