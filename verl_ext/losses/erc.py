"""Entropy Ratio Clipping (Su et al., arXiv 2512.05591): the gradient mask shared by ``grpo_erc`` and
``gppo_erc``::

    rho_i  = 1                                  if H_i < f and H_old_i < f     (f = ERC_ENTROPY_FLOOR, 1e-3 nats)
           = (H_i + 1e-8) / (H_old_i + 1e-8)    otherwise                      (the paper's ratio)
    keep_i = entropy_mask_low < rho_i < entropy_mask_high
    L_i    = L_i if keep_i else sg[L_i]

``H`` is the current policy's entropy of the full next-token distribution (training forward pass) and
``H_old`` the old policy's (old-log-prob pass). Masked tokens keep their loss value and stay in the
token-mean denominator; only their gradient is removed. The entropies feed a mask only: no gradient.

**The entropy floor.** The paper's ratio is exactly 1 where both entropies are exactly 0, but a near-certain token's
entropy computed in bf16 is often exactly 0 on one pass and a few 1e-4 on the other, and its ratio is then ~1e4-1e5:
the token is masked, and a plain mean of the ratios is dominated by such tokens. Below ``f = 1e-3`` nats a
distribution holds more than ~99.99 % of its mass on one token (two outcomes: ``H = d (1 - ln d)`` with ``d`` the
rest, 1e-3 at ``d ~ 1e-4``), finer than bf16 resolves a probability near 1 (2^-8); where *both* entropies are below it
the token's entropy has not measurably changed, and its ratio is 1 (kept) - what the paper's ratio gives at exact
zeros, extended to the floor. Wherever either entropy is above the floor the paper's ratio applies unchanged (a token
whose entropy rose from ~0 to above the floor did leave the band, and is masked).

**The logged ratio** ``actor/erc/entropy_ratio_mean`` is the mean over the valid tokens of the ratio, with each token
whose smaller entropy is below the floor counted as 1: such a ratio measures bf16's rounding of a near-zero entropy,
not the policy's change, and a single one would outweigh thousands of others. ``actor/erc/floor_frac`` is the share of
valid tokens counted so. Both are token means (weighted by each micro-batch's tokens across micro-batches).
"""

from __future__ import annotations

from typing import Any

import torch

from verl_ext.config import policy_loss_params
from verl_ext.losses.spec import Needs

ERC_EPS = 1e-8
"""The paper's ``1e-8`` in the ratio's numerator and denominator."""
ERC_ENTROPY_FLOOR = 1e-3
"""Nats: where both entropies are below it the ratio is 1; a token whose smaller entropy is below it counts as 1 in the
logged mean (module docstring)."""

_HOW_TO_ENABLE = (
    "Train through `python -m verl_ext.main_ppo`, which computes the current entropy in the training "
    "forward pass and keeps the old-log-prob pass's entropy as batch field `old_entropy` for ERC losses; "
    "when calling the loss directly, pass entropy=<current entropy> and old_entropy=<old-policy entropy> "
    "(tensors shaped like log_prob)."
)


ERC_METRICS = frozenset({"actor/erc/kept_frac", "actor/erc/below_frac", "actor/erc/above_frac",
                         "actor/erc/entropy_ratio_mean", "actor/erc/floor_frac"})  # fmt: skip
"""The mask's metrics, means over the call's valid tokens (the ERC losses' token-mean metrics)."""


def erc_needs(policy_loss: Any) -> Needs:
    """The ERC losses' needs: the old policy's entropy (batch field) and the update forward's."""
    return Needs(old_entropy=True, current_entropy=True)


def require_entropies(loss_mode: str, entropy: torch.Tensor | None, old_entropy: torch.Tensor | None) -> None:
    """Raise a ``ValueError`` that says which entropy is missing and how to provide it."""
    missing = [name for name, t in (("entropy", entropy), ("old_entropy", old_entropy)) if t is None]
    if missing:
        raise ValueError(
            f"policy loss {loss_mode!r} needs the per-token entropies of the current and the old policy, "
            f"but got no {' and no '.join(missing)}. {_HOW_TO_ENABLE}"
        )


def entropy_ratio(entropy: torch.Tensor, old_entropy: torch.Tensor) -> torch.Tensor:
    """``rho``: 1 where both entropies are below :data:`ERC_ENTROPY_FLOOR`, else the paper's
    ``(H + 1e-8) / (H_old + 1e-8)`` (module docstring); in the entropies' dtype, no gradient."""
    both_below = (entropy < ERC_ENTROPY_FLOOR) & (old_entropy < ERC_ENTROPY_FLOOR)
    rho = (entropy.detach() + ERC_EPS) / (old_entropy.detach() + ERC_EPS)
    return torch.where(both_below, torch.ones_like(rho), rho)


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
    h, h_old = entropy.detach().to(wide), old_entropy.detach().to(wide)
    rho = entropy_ratio(h, h_old)
    keep = (rho > low) & (rho < high)
    n_valid = mask.sum().clamp(min=1).to(torch.float32)
    near_zero = torch.minimum(h, h_old) < ERC_ENTROPY_FLOOR  # counted as 1 in the logged mean
    kept = (keep & mask).sum().to(torch.float32) / n_valid
    below = (mask & (rho <= low)).sum().to(torch.float32) / n_valid
    metrics = {
        "actor/erc/kept_frac": kept,
        "actor/erc/below_frac": below,
        "actor/erc/above_frac": (mask.any().to(torch.float32) - kept - below).clamp(min=0.0),
        "actor/erc/entropy_ratio_mean": torch.where(mask & ~near_zero, rho, 0.0).sum().to(torch.float32) / n_valid
        + (mask & near_zero).sum().to(torch.float32) / n_valid,
        "actor/erc/floor_frac": (mask & near_zero).sum().to(torch.float32) / n_valid,
    }
    return torch.where(keep, loss_mat, loss_mat.detach()), metrics
