"""``gppo_erc`` against a float64 oracle written token by token from CE-GPPO's gradient-preserving clip and DAPO's
dual clip (values and gradients), on a hand-built batch with tokens in every branch, several on the dual-clip bound.

The oracle, per valid token (``sg``: stop-gradient, ``c = clip_ratio_c``, ``w``: rollout-correction weights)::

    L = -beta1 (1-eps_low)  A r / sg[r]     if A < 0 and r < 1 - eps_low
    L = -beta2 (1+eps_high) A r / sg[r]     if A > 0 and r > 1 + eps_high
    L = -A r                                otherwise
    L = min(L, -A c)                        if A < 0           (DAPO's dual clip, a plain min on the values)
    L = w L,  and sg[w L] where the entropy ratio H / H_old is outside (entropy_mask_low, entropy_mask_high)

token-mean over the valid tokens. The ERC repository's ``gppo_erc`` and CE-GPPO's ``compute_policy_loss`` apply the
dual clip as ``torch.min(-A c, L)``: a token whose loss exceeds ``-A c`` gets the constant and no gradient.
"""

from __future__ import annotations

import math

import pytest
import torch

import _oracles as O
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
from verl_ext.config import PolicyLossConfig

EPS_LOW, EPS_HIGH, C = 0.2, 0.28, 3.0
LOW, HIGH = 0.9, 1.1  # ERC band

# (advantage, [importance ratios]); None pads. Ratios chosen away from every branch boundary (no ties in min / max).
ROWS = [
    (-1.5, [5.0, 0.5, 1.1, 2.0, 3.5]),  # A < 0: dual clip (r > c), low clip, unclipped, unclipped (1+eps_h < r < c), dual
    (0.8, [2.0, 0.5, 1.0, 5.0, None]),  # A > 0: high clip, unclipped, unclipped, high clip (never dual-clipped)
    (-0.4, [10.0, 0.3, 2.9, None, None]),  # A < 0: dual clip, low clip, just under the dual bound
    (0.0, [4.0, 0.2, None, None, None]),  # A = 0: zero loss and gradient
]
DUAL_CLIPPED = [(0, 0), (0, 4), (2, 0)]  # tokens where -A r > -A c
ERC_MASKED = [(0, 4), (1, 1)]  # tokens whose entropy ratio is outside the band: value kept, no gradient


def dual_clip_batch():
    B, T = len(ROWS), len(ROWS[0][1])
    g = torch.Generator().manual_seed(11)
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2 - 0.1
    lp = old.clone()
    adv = torch.zeros(B, T, dtype=torch.float64)
    mask = torch.zeros(B, T, dtype=torch.bool)
    for i, (a, ratios) in enumerate(ROWS):
        adv[i] = a
        for j, r in enumerate(ratios):
            if r is not None:
                lp[i, j] = old[i, j] + math.log(r)
                mask[i, j] = True
    old_h = torch.rand(B, T, generator=g, dtype=torch.float64) + 0.5
    h = old_h.clone()
    for t in ERC_MASKED:
        h[t] = old_h[t] * 1.5
    w = torch.rand(B, T, generator=g, dtype=torch.float64) + 0.5
    return old, lp, adv, mask, h, old_h, w


def oracle_token(lp, old, a, beta1, beta2):
    """One token's gppo loss with the dual clip, from the formula (tests/_oracles.py)."""
    return O.gppo_token(lp, old, a, EPS_LOW, EPS_HIGH, beta1, beta2, C)


@pytest.mark.parametrize("beta1,beta2", [(0.75, 1.0), (1.0, 1.0), (5.0, 0.5)])
@pytest.mark.parametrize("with_weights", [False, True])
def test_gppo_erc_applies_dapos_dual_clip_for_negative_advantages(beta1, beta2, with_weights):
    """Value and gradient equal the oracle; tokens on the dual-clip bound carry ``-A c`` and no gradient. With
    ``beta1 = 5`` a low-clipped token's ``-beta1 (1-eps_low) A = 4 |A|`` exceeds ``3 |A|``: the dual clip caps it too."""
    old, lp, adv, mask, h, old_h, w = dual_clip_batch()
    cfg = O.actor_config(PolicyLossConfig(entropy_mask_low=LOW, entropy_mask_high=HIGH, gppo_beta1=beta1,
                                          gppo_beta2=beta2), EPS_LOW, EPS_HIGH, C)  # fmt: skip
    weights = w if with_weights else None

    def oracle(x):
        per = {}
        for t in O.valid_tokens(mask):
            term = oracle_token(x[t], old[t], float(adv[t]), beta1, beta2)
            if with_weights:
                term = term * w[t]
            rho = (float(h[t]) + 1e-8) / (float(old_h[t]) + 1e-8)
            per[t] = term if LOW < rho < HIGH else term.detach()
        return O.token_mean(per, mask)

    x = lp.clone().requires_grad_(True)
    want = oracle(x)
    (want_grad,) = torch.autograd.grad(want, x)
    x = lp.clone().requires_grad_(True)
    got, metrics = POLICY_LOSS_REGISTRY["gppo_erc"](old, x, adv, mask, "token-mean", cfg, weights, entropy=h,
                                                    old_entropy=old_h)  # fmt: skip
    (got_grad,) = torch.autograd.grad(got, x)
    torch.testing.assert_close(got.detach(), want.detach(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-12, atol=1e-14)

    n = int(mask.sum())
    capped = list(DUAL_CLIPPED) + ([(0, 1), (2, 1)] if beta1 * (1 - EPS_LOW) > C else [])
    for t in capped:  # the dual clip binds: no gradient through it
        assert got_grad[t] == 0.0, t
    assert float(metrics["actor/pg_clipfrac_lower"]) == pytest.approx(len(capped) / n)
    # the fixture is what the docstring says: without the dual clip those tokens would carry -A r and a gradient
    unclipped = sum(float(-adv[t] * torch.exp(lp[t] - old[t]) - (-adv[t] * C)) * (float(w[t]) if with_weights else 1.0)
                    for t in DUAL_CLIPPED)  # fmt: skip
    assert unclipped / n > 0.1


def test_gppo_erc_dual_clip_uses_the_actors_clip_ratio_c():
    """A larger ``clip_ratio_c`` moves the bound: with c = 20 no token of the fixture reaches it."""
    old, lp, adv, mask, h, old_h, _ = dual_clip_batch()
    cfg = O.actor_config(PolicyLossConfig(entropy_mask_low=LOW, entropy_mask_high=HIGH), EPS_LOW, EPS_HIGH, 20.0)
    x = lp.clone().requires_grad_(True)
    _, metrics = POLICY_LOSS_REGISTRY["gppo_erc"](old, x, adv, mask, "token-mean", cfg, None, entropy=h,
                                                  old_entropy=old_h)  # fmt: skip
    assert float(metrics["actor/pg_clipfrac_lower"]) == 0.0
    cfg = O.actor_config(PolicyLossConfig(), EPS_LOW, EPS_HIGH, 1.0)
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.actor\.clip_ratio_c: 1.0 is invalid"):
        POLICY_LOSS_REGISTRY["gppo_erc"](old, x, adv, mask, "token-mean", cfg, None, entropy=h, old_entropy=old_h)
