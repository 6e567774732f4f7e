"""verl_ext's policy losses. Importing this package registers them in verl's ``POLICY_LOSS_REGISTRY``.

| name       | module                 | method                                         |
|------------|------------------------|------------------------------------------------|
| clip_cov   | ``losses/clip_cov.py`` | Clip-Cov (arXiv 2505.22617), replaces verl's   |
| kl_cov     | ``losses/kl_cov.py``   | KL-Cov (arXiv 2505.22617), replaces verl's     |
| grpo_erc   | ``losses/grpo_erc.py`` | Entropy Ratio Clipping on DAPO (2512.05591)    |
| gppo_erc   | ``losses/gppo_erc.py`` | ERC on CE-GPPO gradient-preserving clip        |
"""

from __future__ import annotations

from verl_ext.losses.clip_cov import compute_policy_loss_clip_cov
from verl_ext.losses.gppo_erc import compute_policy_loss_gppo_erc
from verl_ext.losses.grpo_erc import compute_policy_loss_grpo_erc
from verl_ext.losses.kl_cov import compute_policy_loss_kl_cov

LOSSES = {
    "clip_cov": compute_policy_loss_clip_cov,
    "kl_cov": compute_policy_loss_kl_cov,
    "grpo_erc": compute_policy_loss_grpo_erc,
    "gppo_erc": compute_policy_loss_gppo_erc,
}
ERC_LOSSES = frozenset({"grpo_erc", "gppo_erc"})
COV_LOSSES = frozenset({"clip_cov", "kl_cov"})


__all__ = ["LOSSES", "ERC_LOSSES", "COV_LOSSES"]
