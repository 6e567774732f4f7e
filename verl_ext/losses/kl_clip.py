"""KL clipping of the actor KL loss (seed 001): the KL term only acts where a sequence's KL exceeds a budget.

For sequence ``s`` with valid tokens ``t = 1..L_s`` and verl's per-token KL estimate ``k_{s,t}``
(``kl_penalty(log_prob, ref_log_prob, actor.kl_loss_type)``)::

    KL_s   = sum_t k_{s,t}
    tau_s  = kl_clip_threshold * L_s     if use_per_token_kl_threshold   else   kl_clip_threshold
    C_s    = relu(KL_s - tau_s)          (hard)
    C_s    = softplus(KL_s - tau_s)      (soft)

The clipped term ``C_s`` is what enters the loss, *with its gradient* (``dC_s / dk_{s,t}`` is
``1[KL_s > tau_s]`` for hard, ``sigmoid(KL_s - tau_s)`` for soft). To aggregate it the way verl aggregates
its KL loss, ``C_s`` is spread evenly over the sequence's valid tokens (``C_s / L_s`` each) and passed to
verl's ``agg_loss`` with the actor's ``loss_agg_mode`` and global batch info. Hence ``hard`` with threshold
0 and a non-negative estimator (``k2``/``mse``, ``k3``/``low_var_kl``, ``abs``) reproduces verl's KL loss
exactly, for every ``loss_agg_mode``: ``C_s = KL_s`` and the spread tokens sum to the same ``KL_s``.
(For ``token-mean`` the clipped loss is ``sum_s C_s / N_tokens``.)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from verl_ext.config import ACTOR_PREFIX, ConfigError

KL_CLIP_METHODS = ("none", "hard", "soft")


def check_kl_clip_params(method: Any, threshold: Any, per_token: Any) -> None:
    """Validate the KL-clipping keys; a :class:`~verl_ext.config.ConfigError` naming the key and the allowed values."""
    if method not in KL_CLIP_METHODS:
        raise ConfigError(f"{ACTOR_PREFIX}kl_clip_method", f"{method!r} is invalid: allowed one of {list(KL_CLIP_METHODS)}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold >= 0.0:
        raise ConfigError(f"{ACTOR_PREFIX}kl_clip_threshold", f"{threshold!r} is invalid: allowed a number >= 0")
    if not isinstance(per_token, bool):
        raise ConfigError(f"{ACTOR_PREFIX}use_per_token_kl_threshold", f"{per_token!r} is invalid: allowed true or false")


def sequence_kl(kld: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(KL_s, L_s)``: per-sequence sum of the per-token KL over valid tokens, and the valid lengths."""
    mask = mask.bool()
    return torch.where(mask, kld, 0.0).sum(dim=-1), mask.sum(dim=-1)


def clip_sequence_kl(kl_seq: torch.Tensor, threshold: torch.Tensor | float, method: str) -> torch.Tensor:
    """``C_s``: ``relu(KL_s - tau_s)`` (hard) or ``softplus(KL_s - tau_s)`` (soft)."""
    excess = kl_seq - threshold
    if method == "hard":
        return F.relu(excess)
    if method == "soft":
        return F.softplus(excess)
    raise ConfigError(f"{ACTOR_PREFIX}kl_clip_method", f"{method!r} is invalid here: allowed 'hard' or 'soft'")


def clipped_kl_matrix(
    kld: torch.Tensor, mask: torch.Tensor, method: str, threshold: float, per_token: bool
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped KL as a ``(batch, response_len)`` loss matrix for verl's ``agg_loss``, plus the
    per-micro-batch fraction of valid sequences above their threshold (0-d tensor, no host sync).

    Each valid token of sequence ``s`` carries ``C_s / L_s``; padded tokens and empty sequences carry 0.
    """
    check_kl_clip_params(method, threshold, per_token)
    mask = mask.bool()
    kl_seq, length = sequence_kl(kld, mask)
    tau = float(threshold) * length.to(kl_seq.dtype) if per_token else float(threshold)
    clipped = clip_sequence_kl(kl_seq, tau, method)
    valid_seq = length > 0
    per_token_share = torch.where(valid_seq, clipped / length.clamp(min=1).to(clipped.dtype), 0.0)
    matrix = torch.where(mask, per_token_share.unsqueeze(-1), 0.0)
    above = (kl_seq.detach() > tau) & valid_seq
    frac_above = above.sum().to(torch.float32) / valid_seq.sum().clamp(min=1).to(torch.float32)
    return matrix, {"actor/kl_clip/frac_above": frac_above}


__all__ = ["KL_CLIP_METHODS", "check_kl_clip_params", "clip_sequence_kl", "clipped_kl_matrix", "sequence_kl"]
