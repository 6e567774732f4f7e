"""Entropy Ratio Clipping (Su et al., arXiv 2512.05591): the gradient mask shared by ``grpo_erc`` and
``gppo_erc``.

    rho_i  = (H_i + 1e-8) / (H_old_i + 1e-8)
    keep_i = entropy_mask_low < rho_i < entropy_mask_high
    L_i    = L_i if keep_i else sg[L_i]

``H`` is the current policy's entropy of the full next-token distribution (training forward pass) and
``H_old`` the old policy's (old-log-prob pass). Masked tokens keep their loss value and stay in the
token-mean denominator; only their gradient is removed. The entropies feed a mask only: no gradient.
"""

from __future__ import annotations

from typing import Any

import torch

from verl_ext.config import policy_loss_params

ERC_EPS = 1e-8

_HOW_TO_ENABLE = (
    "Train through `python -m verl_ext.main_ppo`, which computes the current entropy in the training "
    "forward pass and keeps the old-log-prob pass's entropy as batch field `old_entropy` for ERC losses; "
    "when calling the loss directly, pass entropy=<current entropy> and old_entropy=<old-policy entropy> "
    "(tensors shaped like log_prob)."
)


def require_entropies(loss_mode: str, entropy: torch.Tensor | None, old_entropy: torch.Tensor | None) -> None:
    """Raise a ``ValueError`` that says which entropy is missing and how to provide it."""
    missing = [name for name, t in (("entropy", entropy), ("old_entropy", old_entropy)) if t is None]
    if missing:
        raise ValueError(
            f"policy loss {loss_mode!r} needs the per-token entropies of the current and the old policy, "
            f"but got no {' and no '.join(missing)}. {_HOW_TO_ENABLE}"
        )


def entropy_ratio_mask(
    loss_mat: torch.Tensor,
    entropy: torch.Tensor,
    old_entropy: torch.Tensor,
    mask: torch.Tensor,
    config: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Detach the per-token loss where the entropy ratio leaves ``(entropy_mask_low, entropy_mask_high)``.

    The ratio is computed in at least fp32: under bf16 compute verl hands the entropies over in bf16, whose quotient
    near 1 is rounded to steps of 2^-8 below 1 and 2^-7 above (0.0039 / 0.0078), a sizeable share of the band's
    0.05 half-width, and ``ERC_EPS`` would vanish in the sum."""
    low, high = policy_loss_params(config, "entropy_mask_low", "entropy_mask_high")
    wide = torch.promote_types(torch.promote_types(entropy.dtype, old_entropy.dtype), torch.float32)
    rho = (entropy.detach().to(wide) + ERC_EPS) / (old_entropy.detach().to(wide) + ERC_EPS)
    keep = (rho > low) & (rho < high)
    n_valid = mask.sum().clamp(min=1).to(torch.float32)
    kept = (keep & mask).sum().to(torch.float32) / n_valid
    below = (mask & (rho <= low)).sum().to(torch.float32) / n_valid
    metrics = {
        "actor/erc/kept_frac": kept,
        "actor/erc/below_frac": below,
        "actor/erc/above_frac": (mask.any().to(torch.float32) - kept - below).clamp(min=0.0),
        "actor/erc/entropy_ratio_mean": torch.where(mask, rho, 0.0).sum().to(torch.float32) / n_valid,
    }
    return torch.where(keep, loss_mat, loss_mat.detach()), metrics
