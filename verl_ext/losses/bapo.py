"""BAPO: Balanced Policy Optimization with Adaptive Clipping (Xi et al., arXiv 2510.18927).

Per valid token t, with ``r_t = pi_theta(y_t) / pi_old(y_t)`` and explicit importance-ratio bounds
``c_low < 1 < c_high`` (bounds, not epsilons), the loss is DAPO's dual-clip surrogate with BAPO's bounds::

    L^clip_t = max(-A_t r_t, -A_t clip(r_t, c_low, c_high))
    L_t      = min(L^clip_t, -A_t c)   if A_t < 0   else   L^clip_t            (c = clip_ratio_c, DAPO's dual clip)

aggregated with verl's ``agg_loss``. The bounds are chosen so that the positive-advantage tokens' share of the
contribution reaches ``rho_0``. A token's contribution is the weight ``r_t |A_t|`` of its gradient
``-A_t r_t grad log pi_theta(y_t)``, counted where the clipped surrogate lets the gradient through::

    P(c_high) = sum_{A_t > 0, r_t <= c_high}      r_t |A_t|
    N(c_low)  = sum_{A_t < 0, c_low <= r_t <= c}  r_t |A_t|
    rho(c_low, c_high) = P / (P + N)                                     (1 where P + N = 0)

Search (the paper's Algorithm 1): start at ``(a^-, a^+)`` = (``bapo_clip_low``, ``bapo_clip_high``); while
``rho < rho_0``, raise ``c_low`` by ``delta_1`` (``bapo_clip_low_step``) up to ``b^-`` (``bapo_clip_low_max``);
then, still below, raise ``c_high`` by ``delta_2`` (``bapo_clip_high_step``) up to ``b^+`` (``bapo_clip_high_max``).
Raising ``c_low`` clips more low-ratio negative tokens out of ``N``; raising ``c_high`` lets more high-ratio positive
tokens into ``P``: ``rho`` never decreases along the path, and the first point where ``rho >= rho_0`` (else the
last, both bounds at their maxima) is taken.

Defaults (``configs/policy_loss/bapo.yaml``) are the authors' example script ``recipe/bapo/run_bapo_example.sh``:
``c_low`` 0.8 -> 0.95 by 0.05, ``c_high`` 1.2 -> 2.0 by 0.1, target 0.5. Their ``config/bapo_trainer.yaml`` differs
(``c_low`` 0.6 -> 0.8 by 0.05, ``c_high`` 1.2 -> 2.0 by 0.05, target 1) and their README gives the paper's ranges
(``c_low`` in [0.6, 0.9], ``c_high`` in [1.2, 3.0], ``rho_0`` 0.5).

Differences from the authors' code (``recipe/bapo/policy_loss.py``):

* their measure is the clipped surrogate's *value* ``min(r, c_high) A`` / ``max(r, c_low) A`` summed over all
  tokens, compared as the ratio ``P / N`` with the target. With it, raising ``c_low`` *increases* ``N``: the lower
  step can never reach the target and always runs to ``b^-``. Here the sums count the tokens whose gradient the clip
  keeps (the paper's indicator form), so each step moves the share towards ``rho_0``, and ``rho_0`` is a share, as
  the paper and README define it (their code's ratio target ``t`` is the share ``t / (1 + t)``: the script's 0.5
  is 1/3, the YAML's 1 is 0.5). Tokens the dual clip cuts (``A < 0``, ``r > c``) carry no gradient and are not
  counted in ``N``.
* they decide the bounds inside every loss call, i.e. per micro-batch: the objective changes with
  ``ppo_micro_batch_size`` and dynamic batching. Here (``bapo_scope: step``, the default) the bounds are decided once
  per optimiser step: :func:`contribution_statistics` are sums, so the statistics of a whole mini-batch are the sum
  of its micro-batches' and DP ranks' - exactly, whatever the split. They must be known before the first
  micro-batch's backward, and the ratios need the current policy, so verl_ext's actor worker runs one no-grad
  forward over the mini-batch at the start of each optimiser step (as upstream PR 7830 does for KL-Cov), sums the
  statistics over its micro-batches, all-reduces them over verl's data-parallel group, runs :func:`decide_bounds`
  and hands the bounds to every micro-batch's loss call (``bapo_bounds``). The cost is one forward pass without
  autograd per optimiser step. ``bapo_scope: micro`` decides per loss call, over the call's tokens, as the authors'
  code does (without its all-reduce: under dynamic batching ranks run different numbers of micro-batches, so a
  collective inside the loss could hang).

With one mini-batch per batch and ``ppo_epochs: 1`` the policy is the one that sampled the batch, every ``r_t`` is 1
and the bounds cannot bind: BAPO acts from the second mini-batch or epoch on, or with off-policy rollouts.

No host syncs: the search evaluates every point of the static path (at most ``BAPO_MAX_STEPS`` per bound) at once
and picks the first with ``rho >= rho_0`` by ``argmax``; metrics are 0-d tensors.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import torch

from verl_ext.config import bapo_steps, dual_clip_c, policy_loss_params
from verl_ext.losses.spec import LossSpec, Needs, declare
from verl_ext.losses.common import LOG_RATIO_BOUND, aggregate, apply_rollout_weights, dual_clip, masked_mean, metric_frac

logger = logging.getLogger(__name__)
_FALLBACK_NOTED: list[bool] = []

BAPO_KEYS = ("bapo_clip_low", "bapo_clip_low_max", "bapo_clip_low_step", "bapo_clip_high", "bapo_clip_high_max",
             "bapo_clip_high_step", "bapo_rho0", "bapo_scope")  # fmt: skip


def bound_grid(config: Any, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The candidate bounds (float64): ``c_low`` = ``a^-, a^- + delta_1, ..., b^-`` and ``c_high`` likewise, the last
    step capped at the maximum (the authors' ``min(c + step, max)``). Built on ``device`` from the config's scalars
    (``arange`` and arithmetic: no host-to-device copy, which CUDA counts as a synchronisation)."""
    a_lo, b_lo, d_lo, a_hi, b_hi, d_hi = policy_loss_params(config, *BAPO_KEYS[:6])

    def grid(a: float, b: float, d: float) -> torch.Tensor:
        k = torch.arange(bapo_steps(a, b, d) + 1, dtype=torch.float64, device=device)
        return torch.clamp(a + k * d, max=b)

    return grid(a_lo, b_lo, d_lo), grid(a_hi, b_hi, d_hi)


def contribution_statistics(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    c_lows: torch.Tensor,
    c_highs: torch.Tensor,
    c: float,
) -> torch.Tensor:
    """``[N(c_low) for c_low in c_lows] + [P(c_high) for c_high in c_highs]`` (float64, no gradient): sums over
    tokens, so the statistics of a set of micro-batches (and ranks) are the sums of theirs."""
    r = ratio.detach().to(torch.float64).reshape(-1)
    adv = advantages.detach().to(torch.float64).reshape(-1)
    weight = torch.where(mask.bool().reshape(-1), r * adv.abs(), 0.0)
    lows, highs = c_lows.to(r.device), c_highs.to(r.device)
    # one pass over the tokens whatever the number of candidates: a token's bucket is the number of candidate bounds
    # it clears (c_low_j <= r; c_high_k < r), and a cumulative sum over the buckets gives every candidate's sum
    neg_w = torch.where((adv < 0) & (r <= c), weight, 0.0)
    pos_w = torch.where(adv > 0, weight, 0.0)
    neg_hist = torch.zeros(len(lows) + 1, dtype=torch.float64, device=r.device)
    neg_hist = neg_hist.scatter_add(0, torch.bucketize(r, lows, right=True), neg_w)
    pos_hist = torch.zeros(len(highs) + 1, dtype=torch.float64, device=r.device)
    pos_hist = pos_hist.scatter_add(0, torch.bucketize(r, highs, right=False), pos_w)
    n = neg_hist.flip(0).cumsum(0).flip(0)[1:]  # N_j: tokens that clear c_low_j (bucket > j)
    p = pos_hist.cumsum(0)[:-1]  # P_k: tokens at or below c_high_k (bucket <= k)
    return torch.cat([n, p])


def decide_bounds(stats: torch.Tensor, c_lows: torch.Tensor, c_highs: torch.Tensor, rho0: float) -> torch.Tensor:
    """``[c_low, c_high, rho]`` (float64) from :func:`contribution_statistics` of the tokens the bounds apply to.

    The path raises ``c_low`` through ``c_lows``, then ``c_high`` through ``c_highs`` (``len(c_lows) +
    len(c_highs) - 1`` points); the first point with ``rho >= rho_0``, written ``(1 - rho_0) P >= rho_0 N`` (no
    division; met where ``P + N = 0``), is taken, else the last."""
    n_low, n_high = len(c_lows), len(c_highs)
    device = stats.device
    low_idx = torch.cat([torch.arange(n_low, device=device), torch.full((n_high - 1,), n_low - 1, device=device)])
    high_idx = torch.cat([torch.zeros(n_low - 1, dtype=torch.long, device=device), torch.arange(n_high, device=device)])
    n_path, p_path = stats[:n_low][low_idx], stats[n_low:][high_idx]
    met = (1.0 - rho0) * p_path >= rho0 * n_path
    met = met | (torch.arange(met.numel(), device=device) == met.numel() - 1)  # the last point always (no host scalar
    # written into a device tensor: CUDA counts ``met[-1] = True`` as a synchronisation)
    first = torch.argmax(met.to(torch.int8)).reshape(1)  # the first True (gather: no data-dependent indexing)
    n_at, p_at = n_path.gather(0, first)[0], p_path.gather(0, first)[0]
    total = p_at + n_at
    share = torch.where(total > 0, p_at / total.clamp(min=torch.finfo(torch.float64).tiny), torch.ones_like(total))
    c_low = c_lows.to(device).gather(0, low_idx.gather(0, first))[0]
    c_high = c_highs.to(device).gather(0, high_idx.gather(0, first))[0]
    return torch.stack([c_low, c_high, share])


def importance_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    """``r = exp(clamp(lp - old, +-20))`` (verl's clamp)."""
    return torch.exp((log_prob - old_log_prob).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))


def step_statistics(config: Any, log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor,
                    response_mask: torch.Tensor) -> torch.Tensor:
    """:func:`contribution_statistics` of one micro-batch with the configured grid (the no-grad pass's part)."""
    c_lows, c_highs = bound_grid(config, log_prob.device)
    ratio = importance_ratio(log_prob, old_log_prob)
    return contribution_statistics(ratio, advantages, response_mask.bool(), c_lows, c_highs, dual_clip_c(config))


def _note_micro_fallback(config: Any) -> None:
    """Warn once per process when ``bapo_scope=step`` is configured but the loss got no ``bapo_bounds``."""
    if torch.compiler.is_compiling() or _FALLBACK_NOTED:
        return
    (scope,) = policy_loss_params(config, "bapo_scope")
    if scope == "step":
        _FALLBACK_NOTED.append(True)
        logger.warning("verl_ext bapo: policy_loss.bapo_scope=step but the loss received no 'bapo_bounds', so it "
                       "decides the bounds within each call (micro-batch scope). verl_ext's actor worker (python -m "
                       "verl_ext.main_ppo) supplies them; set policy_loss.bapo_scope=micro to silence this.")  # fmt: skip


def compute_policy_loss_bapo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Optional[Any] = None,
    rollout_is_weights: torch.Tensor | None = None,
    bapo_bounds: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """BAPO policy loss (verl's signature).

    :param bapo_bounds: ``[c_low, c_high, rho]`` decided for the whole optimiser step (``bapo_scope=step``);
        ``None`` decides them over the tensors given here (``bapo_scope=micro``).
    :returns: ``(loss, metrics)``; metrics (0-d tensors) ``actor/bapo/clip_low``, ``actor/bapo/clip_high``,
        ``actor/bapo/positive_share`` (``rho`` at the chosen bounds), ``actor/ppo_kl``, ``actor/pg_clipfrac``,
        ``actor/pg_clipfrac_lower``.
    """
    (rho0,) = policy_loss_params(config, "bapo_rho0")
    c = dual_clip_c(config)
    mask = response_mask.bool()
    ratio = importance_ratio(log_prob, old_log_prob)
    if bapo_bounds is None:
        _note_micro_fallback(config)
        c_lows, c_highs = bound_grid(config, ratio.device)
        bapo_bounds = decide_bounds(contribution_statistics(ratio, advantages, mask, c_lows, c_highs, c),
                                    c_lows, c_highs, rho0)  # fmt: skip
    bounds = bapo_bounds.detach().to(device=ratio.device, dtype=ratio.dtype)
    c_low, c_high = bounds[0], bounds[1]

    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, c_low, c_high)
    metrics: dict[str, Any] = {
        "actor/ppo_kl": masked_mean(-(log_prob - old_log_prob).detach(), mask),
        "actor/pg_clipfrac": metric_frac(clipped.detach() > unclipped.detach(), mask),
        "actor/bapo/clip_low": bapo_bounds[0].detach().to(torch.float32),
        "actor/bapo/clip_high": bapo_bounds[1].detach().to(torch.float32),
        "actor/bapo/positive_share": bapo_bounds[2].detach().to(torch.float32),
    }
    pg_losses = dual_clip(torch.maximum(unclipped, clipped), advantages, c, mask, metrics)
    pg_losses = apply_rollout_weights(pg_losses, rollout_is_weights)
    return aggregate(pg_losses, mask, loss_agg_mode, config), metrics


def bapo_needs(policy_loss: Any) -> Needs:
    """``bapo_scope=step`` (the default): the bounds decided once per optimiser step by a no-grad pass over its
    mini-batch on every rank; ``micro``: none (each call decides)."""
    (scope,) = policy_loss_params({"policy_loss": policy_loss}, "bapo_scope")
    return Needs(step_pass=scope == "step", micro_key="bapo_scope")


def summary_line(policy_loss: Any) -> str:
    """The dry-run summary's line: which bounds apply and where they are decided."""
    (scope,) = policy_loss_params({"policy_loss": policy_loss}, "bapo_scope")
    where = "decided once per optimiser step by a no-grad pass over its mini-batch" if scope == "step" else "decided in each loss call"
    return ("bapo      : the clip line's clip_ratio_low / clip_ratio_high are not used: the bounds are "
            "bapo_clip_low..bapo_clip_low_max and bapo_clip_high..bapo_clip_high_max, clip_ratio_c is the dual "
            f"clip; {where}")  # fmt: skip


SPEC = declare(LossSpec(
    name="bapo",
    loss=compute_policy_loss_bapo,
    paper="BAPO's adaptive clip bounds (arXiv 2510.18927), decided per optimiser step or per call",
    keys=BAPO_KEYS,
    needs=bapo_needs,
    clip_high_refusal="BAPO sets its own ratio bounds (bapo_clip_low / bapo_clip_high) each optimiser step and "
                      "ignores the actor's clip_ratio_high: a controller on that bound would change nothing, and one "
                      "on BAPO's bound would fight its search",
    summary=summary_line,
))  # fmt: skip
