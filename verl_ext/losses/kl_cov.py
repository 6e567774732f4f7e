"""KL-Cov (Cui et al., "The Entropy Mechanism of RL for Reasoning LMs", arXiv 2505.22617).

Per valid token i, with ``cov_i = (A_i - mean A)(lp_i - mean lp)`` (no gradient)::

    L_i = -A_i r_i + ppo_kl_coef * |lp_i - old_i|    if i in S
    L_i = -A_i r_i                                   otherwise

where ``S`` holds the ``max(1, floor(kl_cov_ratio * N))`` valid tokens with the largest ``cov_i``. There is no
PPO clipping. ``kl_cov_ratio`` is a fraction (0.002 = 0.2 % of tokens), as in verl - not PRIME-RL's percent.
On-policy with one mini-batch and one epoch, ``lp == old`` and the penalty is zero: KL-Cov acts from the
second optimiser step of a batch on.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from verl_ext.config import clip_ratios, policy_loss_params
from verl_ext.losses.common import aggregate, apply_rollout_weights, base_metrics, masked_mean, metric_frac, ppo_terms
from verl_ext.losses.selection import cov_needs, kl_cov_select, note_micro_fallback, selection_metrics, token_covariance
from verl_ext.losses.spec import LossSpec, declare


def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Optional[Any] = None,
    rollout_is_weights: torch.Tensor | None = None,
    cov_selected: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """KL-Cov policy loss (verl's signature).

    :param cov_selected: optional bool mask of tokens selected over the whole batch; ``None`` selects over the
        tensors given here (``cov_scope=micro``).
    :returns: ``(loss, metrics)`` with metrics as 0-d tensors.
    """
    ratio, coef = policy_loss_params(config, "kl_cov_ratio", "ppo_kl_coef")
    eps_low, eps_high = clip_ratios(config)  # only for the pg_clipfrac metric: KL-Cov does not clip
    mask = response_mask.bool()
    terms = ppo_terms(log_prob, old_log_prob, advantages, eps_low, eps_high)
    metrics = base_metrics(terms, mask)

    if cov_selected is None:
        note_micro_fallback("kl_cov", config)
        cov = token_covariance(advantages, log_prob, mask)
        selected = kl_cov_select(cov, mask, ratio)
        metrics.update(selection_metrics("actor/kl_cov", selected, cov, mask))
    else:
        selected = cov_selected.bool() & mask
        metrics["actor/kl_cov/selected_frac"] = metric_frac(selected, mask)

    abs_kl = terms.log_ratio.abs()
    metrics["actor/kl_cov/abs_kl_selected"] = masked_mean(abs_kl.detach(), selected)
    pg_losses = torch.where(selected, terms.unclipped + coef * abs_kl, terms.unclipped)
    pg_losses = apply_rollout_weights(pg_losses, rollout_is_weights)
    return aggregate(pg_losses, mask, loss_agg_mode, config), metrics


def select_for_batch(cov: torch.Tensor, mask: torch.Tensor, key: torch.Tensor, config: Any, step: int, ratio: float,
                     metrics: dict | None) -> torch.Tensor:
    """The batch scope's selection (:func:`~verl_ext.losses.selection.select_tokens_for_batch`): the top tokens by
    covariance over the whole batch."""
    return kl_cov_select(cov, mask, ratio)


SPEC = declare(LossSpec(
    name="kl_cov",
    loss=compute_policy_loss_kl_cov,
    paper="KL-Cov (arXiv 2505.22617): a KL penalty on the highest-covariance tokens",
    keys=("kl_cov_ratio", "ppo_kl_coef", "cov_scope"),
    needs=cov_needs,
    token_mean_metrics=frozenset({"actor/kl_cov/selected_frac"}),
    clip_high_refusal="KL-Cov does not clip (clip_ratio_high only feeds its pg_clipfrac metric): the bound would "
                      "change nothing",
    selection_ratio="kl_cov_ratio",
    batch_select=select_for_batch,
    replaces_verl=True,
))  # fmt: skip
