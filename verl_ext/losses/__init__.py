"""Everything that runs inside the loss call (level 1): the policy losses and what they are made of.

| module | contents |
| --- | --- |
| ``clip_cov`` | Clip-Cov (arXiv 2505.22617), registered as ``clip_cov`` (replaces verl's) |
| ``kl_cov`` | KL-Cov (arXiv 2505.22617), registered as ``kl_cov`` (replaces verl's) |
| ``grpo_erc`` | Entropy Ratio Clipping on the DAPO dual-clip loss (arXiv 2512.05591) |
| ``gppo_erc`` | ERC on CE-GPPO's gradient-preserving clip (arXiv 2509.20712) |
| ``high_entropy`` | policy gradient on the high-entropy minority of tokens (arXiv 2506.01939), batch or micro scope |
| ``entropy_adv`` | entropy-based advantage shaping (arXiv 2506.14758) |
| ``entropic`` | EntroPIC's term on high-probability tokens (arXiv 2511.15248), the ``pos_weight`` actuator |
| ``bapo`` | BAPO's adaptive clip bounds (arXiv 2510.18927), decided per optimiser step or per call |
| ``erc`` | the entropy-ratio mask |
| ``common`` | per-token PPO terms, masked statistics |
| ``selection`` | covariance token selection: hash RNG, sync-free top-k, batch scope |
| ``kl_clip`` | KL clipping of the actor's KL loss (hard / soft, per-token thresholds) |

``LOSSES`` maps the names to the functions; :mod:`verl_ext.registration` puts them in verl's registry.
May import: torch, verl's ``core_algos``, and ``verl_ext.config``; never the trainer or the CPU harness.
"""

from __future__ import annotations

from verl_ext.losses.bapo import compute_policy_loss_bapo
from verl_ext.losses.clip_cov import compute_policy_loss_clip_cov
from verl_ext.losses.entropy_adv import compute_policy_loss_entropy_adv
from verl_ext.losses.high_entropy import compute_policy_loss_high_entropy
from verl_ext.losses.gppo_erc import compute_policy_loss_gppo_erc
from verl_ext.losses.grpo_erc import compute_policy_loss_grpo_erc
from verl_ext.losses.kl_cov import compute_policy_loss_kl_cov
from verl_ext.losses.selection import COV_LOSSES

LOSSES = {
    "clip_cov": compute_policy_loss_clip_cov,
    "kl_cov": compute_policy_loss_kl_cov,
    "grpo_erc": compute_policy_loss_grpo_erc,
    "gppo_erc": compute_policy_loss_gppo_erc,
    "high_entropy": compute_policy_loss_high_entropy,
    "entropy_adv": compute_policy_loss_entropy_adv,
    "bapo": compute_policy_loss_bapo,
}
ERC_LOSSES = frozenset({"grpo_erc", "gppo_erc"})
TOKEN_MEAN_METRICS = frozenset({
    "actor/erc/kept_frac", "actor/erc/below_frac", "actor/erc/above_frac", "actor/erc/entropy_ratio_mean",
    "actor/erc/floor_frac",
    "actor/clip_cov/selected_frac", "actor/clip_cov/candidate_frac", "actor/kl_cov/selected_frac",
    "actor/high_entropy/selected_frac", "actor/entropy_adv/shaping_mean", "actor/entropy_adv/capped_frac",
    "actor/entropic/high_prob_frac",
})  # fmt: skip
"""verl_ext's loss metrics that are means over the micro-batch's valid tokens: the actor loss weights them by
each micro-batch's token count, so that their step value is the mean over the mini-batch's tokens whatever the
micro-batching (dynamic batch size packs micro-batches of unequal size)."""


CURRENT_ENTROPY_LOSSES = frozenset({"entropy_adv"})
"""Losses besides ERC that need the update forward's entropy (``high_entropy`` too, in micro scope)."""


__all__ = ["LOSSES", "ERC_LOSSES", "COV_LOSSES", "CURRENT_ENTROPY_LOSSES", "TOKEN_MEAN_METRICS"]
