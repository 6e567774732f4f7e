"""Covariance-based token selection for Clip-Cov and KL-Cov, without host-device synchronisation.

The paper ("The Entropy Mechanism of RL for Reasoning LMs", arXiv 2505.22617) scores every valid token

    cov_i = (A_i - mean(A)) * (log pi_i - mean(log pi))                       (means over valid tokens)

and selects

* Clip-Cov: ``k = max(1, floor(clip_cov_ratio * N))`` tokens drawn uniformly at random among the
  candidates ``clip_cov_lb < cov_i < clip_cov_ub`` (and not already clipped by PPO);
* KL-Cov:  the ``k = max(1, floor(kl_cov_ratio * N))`` tokens with the largest ``cov_i``.

Everything here stays on the device: the budget ``k`` is a 0-d tensor, top-k is a stable sort followed by
a rank scatter (exactly ``k`` tokens, ties broken by position), and the randomness is a counter-based hash
of ``(seed, row, column, bits of the old log-prob)`` - reproducible, independent of the global RNG and
traceable by ``torch.compile(fullgraph=True)``.

:func:`select_tokens_for_batch` applies the selection to a whole training batch (the paper's scope); the
trainer stores the mask as batch field ``cov_selected`` and every micro-batch applies its slice.
"""

from __future__ import annotations

from typing import Any

import torch

from verl_ext.config import policy_loss_params

COV_LOSSES = ("clip_cov", "kl_cov")
_MASK32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``(x * c) mod 2**32`` for int64 ``x`` in [0, 2**32) without int64 overflow (16-bit halves)."""
    lo = (x & 0xFFFF) * c
    hi = (((x >> 16) * c) & 0xFFFF) << 16
    return (lo + hi) & _MASK32


def _fmix32(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser on int64 tensors holding 32-bit values."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x85EBCA6B)
    x = x ^ (x >> 13)
    x = _mul32(x, 0xC2B2AE35)
    return x ^ (x >> 16)


def token_uniforms(seed: int, key: torch.Tensor) -> torch.Tensor:
    """Uniform numbers in [0, 1), float64, one per element of the 2-D ``key`` (typically the old log-probs).

    Each value is a hash of ``(seed, row, column, float32 bits of key)``: the same inputs always give the
    same numbers on any device, and nothing touches a ``torch.Generator``.
    """
    rows = torch.arange(key.shape[0], device=key.device, dtype=torch.int64).unsqueeze(1)
    cols = torch.arange(key.shape[1], device=key.device, dtype=torch.int64).unsqueeze(0)
    bits = key.detach().to(torch.float32).contiguous().view(torch.int32).to(torch.int64) & _MASK32
    h = _fmix32(torch.full_like(bits, (seed * 0x9E3779B9) & _MASK32) ^ 0x5BD1E995)
    h = _fmix32(h ^ _mul32(rows.expand_as(bits), 0xCC9E2D51))
    h = _fmix32(h ^ _mul32(cols.expand_as(bits), 0x1B873593))
    h = _fmix32(h ^ bits)
    return h.to(torch.float64) / float(2**32)


def token_covariance(advantages: torch.Tensor, log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``cov_i = (A_i - mean A)(lp_i - mean lp)`` with means over ``mask``; no gradient; 0 where masked."""
    mask_f = mask.to(torch.float64)
    n = mask_f.sum().clamp(min=1.0)
    adv = advantages.detach().to(torch.float64)
    lp = log_prob.detach().to(torch.float64)
    cov = (adv - (adv * mask_f).sum() / n) * (lp - (lp * mask_f).sum() / n)
    return cov * mask_f


def token_budget(ratio: float, mask: torch.Tensor) -> torch.Tensor:
    """``max(1, floor(ratio * N))`` as a 0-d int64 tensor, ``N`` = number of valid tokens."""
    n = mask.to(torch.float64).sum()
    return torch.floor(n * ratio).to(torch.int64).clamp(min=1)


def rank_select(priority: torch.Tensor, eligible: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The (at most) ``k`` eligible elements with the smallest ``priority``; ties go to the earlier position.

    Sort-and-rank instead of ``topk`` so that ``k`` can stay a device tensor (no sync, static shapes).
    """
    flat = torch.where(eligible, priority.to(torch.float64), torch.full_like(priority, float("inf"), dtype=torch.float64))
    flat = flat.reshape(-1)
    order = torch.argsort(flat, stable=True)
    rank = torch.empty_like(order)
    rank.scatter_(0, order, torch.arange(order.numel(), device=order.device, dtype=order.dtype))
    return eligible & (rank.reshape(eligible.shape) < k)


def clip_cov_select(
    cov: torch.Tensor,
    candidates: torch.Tensor,
    mask: torch.Tensor,
    key: torch.Tensor,
    ratio: float,
    lb: float,
    ub: float,
    seed: int,
) -> torch.Tensor:
    """Clip-Cov: ``max(1, floor(ratio*N))`` random tokens among ``candidates & lb < cov < ub``."""
    eligible = candidates & (cov > lb) & (cov < ub)
    return rank_select(token_uniforms(seed, key), eligible, token_budget(ratio, mask))


def kl_cov_select(cov: torch.Tensor, mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """KL-Cov: the ``max(1, floor(ratio*N))`` valid tokens with the largest covariance."""
    return rank_select(-cov, mask, token_budget(ratio, mask))


def selection_metrics(prefix: str, selected: torch.Tensor, cov: torch.Tensor, mask: torch.Tensor) -> dict:
    """0-d tensor metrics: selected fraction and mean / max covariance of the selected tokens (0 if none)."""
    n_valid = mask.to(torch.float64).sum().clamp(min=1.0)
    sel = selected.to(torch.float64)
    n_sel = sel.sum()
    cov_max = torch.where(selected, cov, torch.full_like(cov, float("-inf"))).amax()
    return {
        f"{prefix}/selected_frac": n_sel / n_valid,
        f"{prefix}/cov_selected_mean": (cov * sel).sum() / n_sel.clamp(min=1.0),
        f"{prefix}/cov_selected_max": torch.where(n_sel > 0, cov_max, torch.zeros_like(cov_max)),
    }


def select_tokens_for_batch(
    loss_mode: str,
    advantages: torch.Tensor,
    old_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any,
    step: int = 0,
    metrics: dict | None = None,
) -> torch.Tensor:
    """Batch-scope selection for ``clip_cov`` / ``kl_cov`` over a whole training batch.

    Uses the old policy's log-probs (the policy that sampled the batch: equal to the current policy at
    the first optimiser step, and already computed, so no extra forward pass). A token already clipped
    by PPO cannot be known before the update; at selection time every ratio is 1, so the candidate set
    is ``lb < cov < ub`` and a later-clipped selected token simply has no gradient either way.

    Args:
        loss_mode: ``clip_cov`` or ``kl_cov``.
        advantages, old_log_prob, response_mask: ``(batch, response_length)`` tensors of the whole batch.
        config: the actor config (reads ``policy_loss``).
        step: the global training step, mixed into the seed so that each step draws fresh tokens.
        metrics: if given, receives ``actor/<loss>/selected_frac``, ``cov_selected_mean``, ``cov_selected_max``
            of the batch as 0-d tensors.

    Returns:
        Bool tensor shaped like ``old_log_prob``: the selected tokens.
    """
    mask = response_mask.bool()
    cov = token_covariance(advantages, old_log_prob, mask)
    if loss_mode == "clip_cov":
        ratio, lb, ub, seed = policy_loss_params(config, "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "cov_seed")
        selected = clip_cov_select(cov, mask, mask, old_log_prob, ratio, lb, ub, seed + 1_000_003 * step)
    elif loss_mode == "kl_cov":
        (ratio,) = policy_loss_params(config, "kl_cov_ratio")
        selected = kl_cov_select(cov, mask, ratio)
    else:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode!r}: batch-scope selection "
                         f"exists for {list(COV_LOSSES)} only")
    if metrics is not None:
        metrics.update(selection_metrics(f"actor/{loss_mode}", selected, cov, mask))
    return selected
