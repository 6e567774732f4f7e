"""Covariance-based token selection for Clip-Cov and KL-Cov, without host-device synchronisation.

The paper ("The Entropy Mechanism of RL for Reasoning LMs", arXiv 2505.22617) scores every valid token

    cov_i = (A_i - mean(A)) * (log pi_i - mean(log pi))                       (means over valid tokens)

and selects

* Clip-Cov: ``k = max(1, floor(clip_cov_ratio * N))`` tokens drawn uniformly at random among the
  candidates ``clip_cov_lb < cov_i < clip_cov_ub`` and not already clipped by PPO - a condition only a loss call
  can apply (``cov_scope=micro``); in batch scope (:func:`select_tokens_for_batch`, before the update) every ratio
  is 1 and no token is excluded;
* KL-Cov:  the ``k = max(1, floor(kl_cov_ratio * N))`` tokens with the largest ``cov_i``.

Everything here stays on the device: the budget ``k`` is a 0-d tensor and top-k runs with its static
upper bound (from the tensor shape), keeping the first ``k`` (exactly ``k`` tokens), and the randomness is a counter-based hash
of ``(seed, row fingerprint, column, token id)`` in batch scope (the bits of the old log-prob inside a loss call,
which has no token ids) - reproducible, independent of the global RNG, of the order of the batch's rows and of
the old-log-prob pass's rounding, and traceable by ``torch.compile(fullgraph=True)``.

:func:`select_tokens_for_batch` applies the selection to a whole training batch (the paper's scope); the
trainer stores the mask as batch field ``cov_selected`` and every micro-batch applies its slice.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from verl_ext.config import POLICY_LOSS_PREFIX, ConfigError, check_policy_loss_params, policy_loss_params
from verl_ext.contract import COV_SELECTED
from verl_ext.losses.spec import SPECS, Needs

logger = logging.getLogger(__name__)
_FALLBACK_NOTED: set[str] = set()


def note_micro_fallback(loss_name: str, config: Any) -> None:
    """Warn once per process when ``cov_scope=batch`` is configured but the loss got no ``cov_selected``
    (for example when verl's own ``ppo_loss`` calls it): it then selects over the tensors it is given, which
    is the ``micro`` behaviour. Use ``python -m verl_ext.main_ppo`` for the batch scope, or set
    ``cov_scope=micro`` to make the choice explicit. Never runs under ``torch.compile``."""
    if torch.compiler.is_compiling() or loss_name in _FALLBACK_NOTED:
        return
    (scope,) = policy_loss_params(config, "cov_scope")
    if scope == "batch":
        _FALLBACK_NOTED.add(loss_name)
        logger.warning(
            "verl_ext %s: policy_loss.cov_scope=batch but the loss received no 'cov_selected' batch field, so it "
            "selects tokens within each call (micro-batch scope). verl_ext's trainer (python -m "
            "verl_ext.main_ppo) supplies the batch-scope selection; set policy_loss.cov_scope=micro to silence this.",
            loss_name,
        )

_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """In place: a 32-bit integer hash (C. Wellons' ``triple32``-family constants, both < 2**31 so
    that the int64 products of 32-bit values never overflow) on int64 tensors holding values in [0, 2**32)."""
    x ^= x >> 16
    x.mul_(0x21F0AAAD).bitwise_and_(_MASK32)
    x ^= x >> 15
    x.mul_(0x735A2D97).bitwise_and_(_MASK32)
    x ^= x >> 15
    return x


def token_hash(seed: int, key: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """A 32-bit hash (int64 tensor) of ``(seed, row, column, key)`` for each element of 2-D ``key`` (integer values,
    such as token ids, or the float32 bits of floating-point values).

    The row enters through a fingerprint of its own valid values (their bits and columns; ``mask`` marks the
    valid ones, all if ``None``), not through its index: permuting the rows of a batch permutes the hashes with
    them. verl's V1 trainer orders a batch's rows as its rollouts finish, which differs from run to run; the
    draw follows the tokens, not their place. Counter-based: the same inputs give the same values on any device,
    and no ``torch.Generator`` (hence no global RNG state, and nothing ``torch.compile`` cannot trace) is involved.
    """
    seed_mix = (seed * 0x9E3779B9 + 0x7F4A7C15) & _MASK32
    if key.is_floating_point():
        bits = key.detach().to(torch.float32).contiguous().view(torch.int32).to(torch.int64).bitwise_and(_MASK32)
    else:  # token ids
        bits = key.detach().to(torch.int64).bitwise_and(_MASK32)
    if mask is not None:
        bits = torch.where(mask.bool(), bits, 0)
    column = torch.arange(key.shape[-1], device=key.device, dtype=torch.int64).mul(0x85EBCA6B).bitwise_and(_MASK32)
    per_token = _mix32((bits ^ column).bitwise_and(_MASK32))
    if mask is not None:
        per_token = torch.where(mask.bool(), per_token, 0)
    row = per_token.sum(dim=-1, keepdim=True).bitwise_and(_MASK32)
    h = ((column ^ seed_mix) + bits).bitwise_and(_MASK32)
    h = _mix32(h) ^ row
    return _mix32(h)


def token_covariance(advantages: torch.Tensor, log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``cov_i = (A_i - mean A)(lp_i - mean lp)`` with means over ``mask`` (accumulated in float64); no
    gradient; 0 where masked. Computed in the inputs' dtype (no float64 copies of whole tensors)."""
    adv, lp = advantages.detach(), log_prob.detach()
    n = mask.sum().clamp(min=1).to(torch.float64)
    mean_a = torch.where(mask, adv, 0.0).sum(dtype=torch.float64) / n
    mean_lp = torch.where(mask, lp, 0.0).sum(dtype=torch.float64) / n
    cov = (adv - mean_a.to(adv.dtype)) * (lp - mean_lp.to(lp.dtype))
    return torch.where(mask, cov, 0.0)


def token_budget(ratio: float, mask: torch.Tensor, ceil: bool = False) -> tuple[torch.Tensor, int]:
    """``k = max(1, floor(ratio * N))`` (``ceil(...)`` with ``ceil=True``) as a 0-d int64 tensor (``N`` valid tokens,
    data-dependent), and its static upper bound for ``N = mask.numel()`` as a Python int (known from the shape)."""
    n = mask.sum().to(torch.float64)
    rounded = torch.ceil(n * ratio) if ceil else torch.floor(n * ratio)
    bound = math.ceil(ratio * mask.numel()) if ceil else math.floor(ratio * mask.numel())
    return rounded.to(torch.int64).clamp(min=1), min(max(1, bound), mask.numel())


def rank_select(
    priority: torch.Tensor, eligible: torch.Tensor, ratio: float, mask: torch.Tensor, sentinel, ceil: bool = False
) -> torch.Tensor:
    """The (at most) ``max(1, floor(ratio * N))`` (``ceil`` with ``ceil=True``) eligible elements with the smallest
    ``priority``.

    ``sentinel`` must exceed every eligible priority. ``topk`` runs with the static bound ``k_max`` of the
    budget (a shape-derived int), and the first ``k`` of those (``k`` a device tensor) are kept: exact, no
    host sync, static shapes, and much cheaper than a full sort for the small ratios in use.
    """
    k, k_max = token_budget(ratio, mask, ceil)
    flat = torch.where(eligible, priority, sentinel).reshape(-1)
    idx = torch.topk(flat, k_max, largest=False, sorted=True).indices
    take = torch.arange(k_max, device=flat.device) < k
    chosen = torch.zeros(flat.shape, dtype=torch.bool, device=flat.device).scatter(0, idx, take)
    return eligible & chosen.reshape(eligible.shape)


def clip_cov_eligible(cov: torch.Tensor, candidates: torch.Tensor, lb: float, ub: float) -> torch.Tensor:
    """Clip-Cov's eligible tokens: ``candidates`` whose covariance lies strictly inside ``(lb, ub)``; the draw takes
    ``min(k, count)`` of them, and ``actor/clip_cov/candidate_frac`` reports their share."""
    return candidates & (cov > lb) & (cov < ub)


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
    """Clip-Cov: ``max(1, floor(ratio*N))`` random tokens among ``candidates & lb < cov < ub``.

    The priority ``hash << 31 | position`` is unique per token, so the draw has no ties; the hash does not depend
    on the row order (:func:`token_hash`), so neither does the draw, except between identical rows.
    """
    eligible = clip_cov_eligible(cov, candidates, lb, ub)
    pos = torch.arange(key.numel(), device=key.device, dtype=torch.int64).reshape(key.shape)
    priority = (token_hash(seed, key, mask) << 31) | pos
    return rank_select(priority, eligible, ratio, mask, sentinel=2**63 - 1)


def kl_cov_select(cov: torch.Tensor, mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """KL-Cov: the ``max(1, floor(ratio*N))`` valid tokens with the largest covariance."""
    return rank_select(-cov, mask, ratio, mask, sentinel=float("inf"))


def selection_metrics(prefix: str, selected: torch.Tensor, cov: torch.Tensor, mask: torch.Tensor) -> dict:
    """0-d tensor metrics: selected fraction and mean / max covariance of the selected tokens (0 if none)."""
    n_valid = mask.sum().clamp(min=1).to(torch.float32)
    n_sel = selected.sum().to(torch.float32)
    cov_max = torch.where(selected, cov, float("-inf")).amax()
    return {
        f"{prefix}/selected_frac": n_sel / n_valid,
        f"{prefix}/cov_selected_mean": torch.where(selected, cov, 0.0).sum() / n_sel.clamp(min=1.0),
        f"{prefix}/cov_selected_max": torch.where(n_sel > 0, cov_max, torch.zeros_like(cov_max)),
    }


def cov_needs(policy_loss: Any) -> Needs:
    """Clip-Cov's and KL-Cov's needs: with ``cov_scope=batch`` (the default) the driver's selection over the whole
    batch (field ``cov_selected``); with ``micro`` none (the loss call selects)."""
    (scope,) = policy_loss_params({"policy_loss": policy_loss}, "cov_scope")
    return Needs(batch_field=COV_SELECTED if scope == "batch" else None, micro_key="cov_scope")


def checked_ratio(key: str, ratio: float) -> float:
    """``ratio`` (a selection ratio given instead of the configured ``key``), validated as ``key`` is."""
    check_policy_loss_params({key: ratio})
    return float(ratio)


def select_tokens_for_batch(
    loss_mode: str,
    advantages: torch.Tensor,
    old_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any,
    step: int = 0,
    metrics: dict | None = None,
    ratio: float | None = None,
    key: torch.Tensor | None = None,
) -> torch.Tensor:
    """Batch-scope selection for ``clip_cov`` / ``kl_cov`` over a whole training batch.

    Uses the old policy's log-probs (the policy that sampled the batch: equal to the current policy at
    the first optimiser step, and already computed, so no extra forward pass). The paper's Clip-Cov candidates
    exclude tokens already clipped by PPO; that cannot be applied here: before the update every ratio is 1, so
    the candidate set is all valid tokens with ``lb < cov < ub``. A selected token that PPO clips at its update has
    no gradient either way (it spends part of the budget without effect); ``cov_scope=micro`` applies the condition.

    :param loss_mode: a loss whose spec has a ``batch_select`` (``clip_cov``, ``kl_cov``).
    :param advantages: ``(batch, response_length)``, the whole batch's (as are ``old_log_prob`` and ``response_mask``).
    :param old_log_prob: the old policy's log-probs.
    :param response_mask: the valid response tokens.
    :param config: the actor config (reads ``policy_loss``).
    :param step: the global training step, mixed into the seed so that each step draws fresh tokens.
    :param metrics: if given, receives ``actor/<loss>/selected_frac``, ``cov_selected_mean``, ``cov_selected_max``
        of the batch as 0-d tensors, and for Clip-Cov ``candidate_frac`` (valid tokens with ``lb < cov < ub``).
    :param ratio: the selection ratio to use instead of the configured ``clip_cov_ratio`` / ``kl_cov_ratio`` (the
        entropy control's); validated like them.
    :param key: what Clip-Cov's random draw is keyed on, shaped like ``old_log_prob``: verl_ext's trainers pass the
        response token ids, which are the same whatever the numerics of the old-log-prob pass (its low bits
        change with the number of GPUs and the micro-batching); default the old log-probs (all a loss call has).
    :returns: bool tensor shaped like ``old_log_prob``: the selected tokens.
    """
    mask = response_mask.bool()
    if key is not None and key.shape != old_log_prob.shape:
        raise ValueError(f"verl_ext batch-scope selection: key shaped {tuple(key.shape)}, old log-probs "
                         f"{tuple(old_log_prob.shape)}: they must match (padded response positions)")  # fmt: skip
    spec = SPECS.get(loss_mode)
    if spec is None or spec.batch_select is None:
        able = sorted(name for name, s in SPECS.items() if s.batch_select is not None)
        raise ConfigError(f"{POLICY_LOSS_PREFIX}loss_mode", f"{loss_mode!r}: batch-scope selection exists for {able} only")
    cov = token_covariance(advantages, old_log_prob, mask)
    (configured,) = policy_loss_params(config, spec.selection_ratio)
    ratio = configured if ratio is None else checked_ratio(spec.selection_ratio, ratio)
    selected = spec.batch_select(cov, mask, old_log_prob if key is None else key, config, step, ratio, metrics)
    if metrics is not None:
        metrics.update(selection_metrics(f"actor/{loss_mode}", selected, cov, mask))
    return selected
