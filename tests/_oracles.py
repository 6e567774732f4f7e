"""Float64 reference formulas for the tests, written token by token from the papers (not from verl_ext).

Loaded by the test modules with ``importlib`` from this file's path (``tests`` must not be a package:
verl installs a top-level ``tests`` package of its own).
"""

from __future__ import annotations

import math
import types

import torch


def actor_config(policy_loss, eps_low=0.2, eps_high=0.28, clip_ratio_c=3.0):
    """A minimal stand-in for verl's ActorConfig: the attributes the losses read."""
    return types.SimpleNamespace(
        clip_ratio=eps_low,
        clip_ratio_low=eps_low,
        clip_ratio_high=eps_high,
        clip_ratio_c=clip_ratio_c,
        policy_loss=policy_loss,
        global_batch_info={},
    )


def batch(B=6, T=10, seed=0, spread=0.3, valid=0.8):
    """Random float64 loss inputs; every row has at least one valid token and a non-zero advantage."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3 - 0.05
    lp = old + spread * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, 1, generator=g, dtype=torch.float64).expand(B, T).clone()
    adv[adv.abs() < 0.05] = 0.5
    mask = torch.rand(B, T, generator=g) < valid
    mask[:, 0] = True
    return old, lp, adv, mask


def valid_tokens(mask):
    return [(i, j) for i in range(mask.shape[0]) for j in range(mask.shape[1]) if bool(mask[i, j])]


def covariances(adv, lp, mask):
    """cov_i = (A_i - mean A)(lp_i - mean lp), means over valid tokens, as a dict {(i, j): cov}."""
    toks = valid_tokens(mask)
    mean_a = sum(float(adv[t]) for t in toks) / len(toks)
    mean_lp = sum(float(lp[t]) for t in toks) / len(toks)
    return {t: (float(adv[t]) - mean_a) * (float(lp[t]) - mean_lp) for t in toks}


def budget(ratio, n):
    return max(1, int(math.floor(ratio * n)))


def ppo_token(lp, old, a, eps_low, eps_high):
    """max(-A r, -A clip(r, 1-eps_low, 1+eps_high)) for one token (differentiable in lp)."""
    r = torch.exp(lp - old)
    return torch.maximum(-a * r, -a * torch.clamp(r, 1 - eps_low, 1 + eps_high))


def is_ppo_clipped(lp, old, a, eps_low, eps_high):
    r = math.exp(lp - old)
    return -a * min(max(r, 1 - eps_low), 1 + eps_high) > -a * r


def token_mean(per_token: dict, mask):
    """Token-mean over valid tokens of a dict {(i, j): scalar tensor}."""
    return sum(per_token.values()) / int(mask.sum())


def bapo_share(ratio, adv, mask, c_low, c_high, c=3.0):
    """BAPO (arXiv 2510.18927): the positive-advantage tokens' share P / (P + N) of the contribution r|A|, counting
    the tokens whose gradient the clip keeps: A > 0 with r <= c_high, A < 0 with c_low <= r <= c (1 if P + N = 0)."""
    p = n = 0.0
    for r, a, m in zip(ratio.reshape(-1).tolist(), adv.reshape(-1).tolist(), mask.reshape(-1).tolist()):
        if not m:
            continue
        if a > 0 and r <= c_high:
            p += r * abs(a)
        elif a < 0 and c_low <= r <= c:
            n += r * abs(a)
    return 1.0 if p + n == 0 else p / (p + n)


def bapo_search(ratio, adv, mask, a_lo=0.8, b_lo=0.95, d_lo=0.05, a_hi=1.2, b_hi=2.0, d_hi=0.1, rho0=0.5, c=3.0):
    """BAPO's Algorithm 1 as a plain loop: raise c_low by d_lo up to b_lo, then c_high by d_hi up to b_hi, while the
    share is below rho0; returns ``(c_low, c_high, share)``."""
    c_low, c_high = a_lo, a_hi
    while bapo_share(ratio, adv, mask, c_low, c_high, c) < rho0 and c_low < b_lo - 1e-12:
        c_low = min(c_low + d_lo, b_lo)
    while bapo_share(ratio, adv, mask, c_low, c_high, c) < rho0 and c_high < b_hi - 1e-12:
        c_high = min(c_high + d_hi, b_hi)
    return c_low, c_high, bapo_share(ratio, adv, mask, c_low, c_high, c)


def dual_clip_token(lp, old, a, eps_low=0.2, eps_high=0.28, c=3.0):
    """DAPO's per-token loss: max(-A r, -A clip(r)) and, for A < 0, min(that, -A c) (differentiable in lp)."""
    clip = ppo_token(lp, old, a, eps_low, eps_high)
    return torch.minimum(clip, torch.as_tensor(-a * c, dtype=clip.dtype)) if a < 0 else clip


def gppo_token(lp, old, a, eps_low, eps_high, beta1, beta2, c=3.0):
    """CE-GPPO's gradient-preserving clip with DAPO's dual clip, one token (differentiable in lp)::

        L = -beta1 (1-eps_low)  A r / sg[r]   if A < 0 and r < 1 - eps_low
        L = -beta2 (1+eps_high) A r / sg[r]   if A > 0 and r > 1 + eps_high
        L = -A r                              otherwise;   L = min(L, -A c) if A < 0
    """
    r = torch.exp(lp - old)
    if a < 0 and float(r.detach()) < 1 - eps_low:
        loss = -beta1 * (1 - eps_low) * a * r / r.detach()
    elif a > 0 and float(r.detach()) > 1 + eps_high:
        loss = -beta2 * (1 + eps_high) * a * r / r.detach()
    else:
        loss = -a * r
    if a < 0:
        loss = torch.minimum(loss, torch.tensor(-a * c, dtype=loss.dtype))
    return loss


ERC_ENTROPY_FLOOR = 1e-3
"""ERC's documented floor (``verl_ext/losses/erc.py``): a token with both entropies below it keeps ratio 1."""


def erc_ratio(h: float, old_h: float) -> float:
    """The paper's entropy ratio (H + 1e-8) / (H_old + 1e-8), and 1 where both are below the floor, in float64."""
    if h < ERC_ENTROPY_FLOOR and old_h < ERC_ENTROPY_FLOOR:
        return 1.0
    return (h + 1e-8) / (old_h + 1e-8)


def erc_kept(h: float, old_h: float, low: float, high: float) -> bool:
    """Whether ERC keeps a token's gradient: its entropy ratio inside (low, high)."""
    return low < erc_ratio(h, old_h) < high
