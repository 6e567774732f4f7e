"""The four policy losses against float64 oracles written from the papers' formulas (values and gradients)."""

from __future__ import annotations

import math

import pytest
import torch

import _oracles as O
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
from verl_ext.config import PolicyLossConfig

LOSS_NAMES = ["clip_cov", "kl_cov", "grpo_erc", "gppo_erc"]


def run(name, old, lp, adv, mask, cfg, **kw):
    lp = lp.clone().requires_grad_(True)
    loss, metrics = POLICY_LOSS_REGISTRY[name](old, lp, adv, mask, "token-mean", cfg, None, **kw)
    loss.backward()
    return loss.detach(), lp.grad, metrics


def oracle_grad(total_fn, lp):
    lp = lp.clone().requires_grad_(True)
    value = total_fn(lp)
    value.backward()
    return value.detach(), lp.grad


# ----------------------------------------------------------------------------------------- KL-Cov
@pytest.mark.parametrize("ratio,coef", [(0.1, 1.0), (0.02, 0.5), (0.5, 2.0)])
def test_kl_cov_matches_oracle(ratio, coef):
    old, lp, adv, mask = O.batch(seed=1)
    cfg = O.actor_config(PolicyLossConfig(kl_cov_ratio=ratio, ppo_kl_coef=coef, cov_scope="micro"))
    covs = O.covariances(adv, lp, mask)
    k = O.budget(ratio, len(covs))
    chosen = set(sorted(covs, key=lambda t: -covs[t])[:k])

    def total(lpv):
        per = {}
        for t in O.valid_tokens(mask):
            r = torch.exp(lpv[t] - old[t])
            per[t] = -adv[t] * r + (coef * torch.abs(lpv[t] - old[t]) if t in chosen else 0.0)
        return O.token_mean(per, mask)

    want, want_grad = oracle_grad(total, lp)
    got, got_grad, metrics = run("kl_cov", old, lp, adv, mask, cfg)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-10, atol=1e-12)
    assert float(metrics["actor/kl_cov/selected_frac"]) == pytest.approx(k / len(covs))
    assert float(metrics["actor/kl_cov/cov_selected_max"]) == pytest.approx(max(covs.values()))
    assert float(metrics["actor/kl_cov/cov_selected_mean"]) == pytest.approx(sum(covs[t] for t in chosen) / k)


def test_kl_cov_penalty_is_zero_on_policy():
    """lp == old: the |lp - old| penalty vanishes in value (the documented on-policy caveat)."""
    old, _, adv, mask = O.batch(seed=2)
    cfg = O.actor_config(PolicyLossConfig(kl_cov_ratio=0.5, ppo_kl_coef=1.0, cov_scope="micro"))
    got, _, _ = run("kl_cov", old, old, adv, mask, cfg)
    want = -(adv * mask).sum() / mask.sum()
    torch.testing.assert_close(got, want)


# ---------------------------------------------------------------------------------------- Clip-Cov
def _clip_cov_case(seed=3, ratio=0.1, lb=-0.05, ub=0.4, eps=(0.2, 0.2)):
    old, lp, adv, mask = O.batch(B=8, T=12, seed=seed, spread=0.35)
    pl = PolicyLossConfig(clip_cov_ratio=ratio, clip_cov_lb=lb, clip_cov_ub=ub, cov_scope="micro", cov_seed=7)
    return old, lp, adv, mask, O.actor_config(pl, eps_low=eps[0], eps_high=eps[1])


def _selected_from_grad(grad, old, lp, adv, mask, eps_low, eps_high):
    """Tokens with zero gradient although they are valid and not PPO-clipped = the detached tokens."""
    sel = set()
    for t in O.valid_tokens(mask):
        if not O.is_ppo_clipped(float(lp[t]), float(old[t]), float(adv[t]), eps_low, eps_high) and grad[t] == 0:
            sel.add(t)
    return sel


def clip_cov_oracle_choice(old, lp, adv, mask, ratio, lb, ub, eps_low, eps_high, draws):
    """The paper's rule, in float64 Python, given the draws: the candidates are the valid tokens that PPO did not clip
    with lb < cov < ub; ``k = max(1, floor(ratio * N))`` of them are taken uniformly at random - here, given one random
    number per token (``draws``), the k candidates with the smallest (draw, flat position)."""
    covs = O.covariances(adv, lp, mask)
    candidates = [t for t, c in covs.items()
                  if lb < c < ub and not O.is_ppo_clipped(float(lp[t]), float(old[t]), float(adv[t]), eps_low, eps_high)]  # fmt: skip
    width = mask.shape[1]
    ranked = sorted(candidates, key=lambda t: (int(draws[t]), t[0] * width + t[1]))
    return set(ranked[: O.budget(ratio, len(covs))]), set(candidates), covs


def test_clip_cov_candidates_budget_and_gradients():
    """The tokens Clip-Cov detaches are those of an independent oracle of the paper's rule with the same draws (the
    counter-based hash of the loss's key, old log-probs, is the random source both use); loss and gradient match
    the oracle's with those tokens detached."""
    from verl_ext.losses.selection import token_hash

    old, lp, adv, mask, cfg = _clip_cov_case()
    eps_low, eps_high = cfg.clip_ratio_low, cfg.clip_ratio_high
    pl = cfg.policy_loss
    draws = token_hash(pl.cov_seed, old, mask)
    chosen, candidates, covs = clip_cov_oracle_choice(old, lp, adv, mask, pl.clip_cov_ratio, pl.clip_cov_lb,
                                                      pl.clip_cov_ub, eps_low, eps_high, draws)  # fmt: skip
    k = O.budget(pl.clip_cov_ratio, len(covs))
    assert len(candidates) > k, "fixture must have more candidates than the budget"

    got, got_grad, metrics = run("clip_cov", old, lp, adv, mask, cfg)
    assert _selected_from_grad(got_grad, old, lp, adv, mask, eps_low, eps_high) == chosen

    def total(lpv):
        per = {}
        for t in O.valid_tokens(mask):
            term = O.ppo_token(lpv[t], old[t], adv[t], eps_low, eps_high)
            per[t] = term.detach() if t in chosen else term
        return O.token_mean(per, mask)

    want, want_grad = oracle_grad(total, lp)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-10, atol=1e-12)
    assert float(metrics["actor/clip_cov/selected_frac"]) == pytest.approx(k / len(covs))
    assert float(metrics["actor/clip_cov/candidate_frac"]) == pytest.approx(len(candidates) / len(covs))
    assert float(metrics["actor/clip_cov/cov_selected_max"]) == pytest.approx(max(covs[t] for t in chosen))


def test_clip_cov_takes_all_candidates_when_fewer_than_budget():
    old, lp, adv, mask, cfg = _clip_cov_case(ratio=1.0, lb=0.05, ub=0.3)
    eps_low, eps_high = cfg.clip_ratio_low, cfg.clip_ratio_high
    covs = O.covariances(adv, lp, mask)
    candidates = {
        t
        for t, c in covs.items()
        if 0.05 < c < 0.3 and not O.is_ppo_clipped(float(lp[t]), float(old[t]), float(adv[t]), eps_low, eps_high)
    }
    _, grad, _ = run("clip_cov", old, lp, adv, mask, cfg)
    assert _selected_from_grad(grad, old, lp, adv, mask, eps_low, eps_high) == candidates


def test_clip_cov_budget_is_at_least_one():
    old, lp, adv, mask, cfg = _clip_cov_case(ratio=1e-6, lb=-10.0, ub=10.0)
    _, grad, metrics = run("clip_cov", old, lp, adv, mask, cfg)
    assert float(metrics["actor/clip_cov/selected_frac"]) * int(mask.sum()) == pytest.approx(1.0)


def test_clip_cov_reproducible_and_independent_of_global_rng():
    old, lp, adv, mask, cfg = _clip_cov_case()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    _, g1, _ = run("clip_cov", old, lp, adv, mask, cfg)
    assert torch.equal(torch.get_rng_state(), state), "the loss must not touch the global RNG"
    torch.manual_seed(999)
    _, g2, _ = run("clip_cov", old, lp, adv, mask, cfg)
    assert torch.equal(g1, g2)
    other = O.actor_config(
        PolicyLossConfig(**{**cfg.policy_loss.__dict__, "cov_seed": 8, "_target_": ""}),
        eps_low=cfg.clip_ratio_low,
        eps_high=cfg.clip_ratio_high,
    )
    _, g3, _ = run("clip_cov", old, lp, adv, mask, other)
    assert not torch.equal(g1, g3), "another seed should draw other tokens"


def test_clip_cov_draw_is_roughly_uniform():
    """Each candidate is drawn with probability k/|C|: check the empirical frequency over many seeds."""
    old, lp, adv, mask = O.batch(B=4, T=8, seed=5, spread=0.01)
    counts = torch.zeros_like(old)
    draws = 400
    for seed in range(draws):
        pl = PolicyLossConfig(clip_cov_ratio=0.25, clip_cov_lb=-100, clip_cov_ub=100, cov_scope="micro", cov_seed=seed)
        _, grad, _ = run("clip_cov", old, lp, adv, mask, O.actor_config(pl))
        counts += ((grad == 0) & mask).to(counts.dtype)
    n = int(mask.sum())
    p = O.budget(0.25, n) / n
    freq = counts[mask] / draws
    sd = math.sqrt(p * (1 - p) / draws)
    assert (freq - p).abs().max() < 5 * sd


# ------------------------------------------------------------------------------------------- ERC
ENTROPY_FLOOR = 1e-3
"""The documented floor (``verl_ext/losses/erc.py``), written here as a number."""
NEAR_ZERO = [(0.0, 0.0), (0.0, 3e-4), (4e-4, 0.0), (1e-6, 9e-4), (0.0, 5e-3), (2e-2, 0.0)]
"""(H, H_old) of near-certain tokens as bf16 hands them over: both exactly 0; one 0 and the other a few 1e-4 (the
paper's ratio ~3e4 or ~2.5e-5: masked); both below the floor but 900x apart; one 0 and the other above the floor."""


def _erc_case(seed=4, low=0.9, high=1.1, near_zero=False):
    """``near_zero``: the first valid tokens take the :data:`NEAR_ZERO` entropies."""
    old, lp, adv, mask = O.batch(B=6, T=10, seed=seed, spread=0.5)
    g = torch.Generator().manual_seed(seed + 100)
    old_h = torch.rand(old.shape, generator=g, dtype=torch.float64) + 0.1
    h = old_h * (1 + 0.2 * torch.randn(old.shape, generator=g, dtype=torch.float64))
    h = h.clamp(min=0.0)
    if near_zero:
        for t, (cur, prev) in zip(O.valid_tokens(mask), NEAR_ZERO):
            h[t], old_h[t] = cur, prev
    return old, lp, adv, mask, h, old_h, low, high


def _rho(h, old_h, t):
    """The paper's ratio, and 1 where both entropies are below the floor (the documented rule), in float64."""
    cur, prev = float(h[t]), float(old_h[t])
    if cur < ENTROPY_FLOOR and prev < ENTROPY_FLOOR:
        return 1.0
    return (cur + 1e-8) / (prev + 1e-8)


def _keep(h, old_h, t, low, high):
    return low < _rho(h, old_h, t) < high


@pytest.mark.parametrize("near_zero", [False, True])
@pytest.mark.parametrize("with_weights", [False, True])
def test_grpo_erc_matches_oracle(with_weights, near_zero):
    """Values, gradients and the logged metrics against the paper's formula with the floor rule, in float64; with
    ``near_zero`` six tokens carry bf16-like zero entropies (:data:`NEAR_ZERO`)."""
    old, lp, adv, mask, h, old_h, low, high = _erc_case(near_zero=near_zero)
    eps_low, eps_high, c = 0.2, 0.28, 3.0
    pl = PolicyLossConfig(entropy_mask_low=low, entropy_mask_high=high)
    cfg = O.actor_config(pl, eps_low, eps_high, c)
    w = torch.rand(old.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64) + 0.5
    weights = w if with_weights else None

    def total(lpv):
        per = {}
        for t in O.valid_tokens(mask):
            term = O.ppo_token(lpv[t], old[t], adv[t], eps_low, eps_high)
            if adv[t] < 0:
                term = torch.minimum(term, -adv[t] * c)
            if with_weights:
                term = term * w[t]
            per[t] = term if _keep(h, old_h, t, low, high) else term.detach()
        return O.token_mean(per, mask)

    want, want_grad = oracle_grad(total, lp)
    lp_ = lp.clone().requires_grad_(True)
    got, metrics = POLICY_LOSS_REGISTRY["grpo_erc"](
        old, lp_, adv, mask, "token-mean", cfg, weights, entropy=h, old_entropy=old_h
    )
    got.backward()
    torch.testing.assert_close(got.detach(), want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(lp_.grad, want_grad, rtol=1e-10, atol=1e-12)
    toks = O.valid_tokens(mask)
    kept = sum(_keep(h, old_h, t, low, high) for t in toks) / len(toks)
    assert 0.2 < kept < 0.9, "fixture must mask some tokens and keep some"
    assert float(metrics["actor/erc/kept_frac"]) == pytest.approx(kept)
    floored = [t for t in toks if min(float(h[t]), float(old_h[t])) < ENTROPY_FLOOR]
    logged = sum(1.0 if t in floored else _rho(h, old_h, t) for t in toks) / len(toks)
    assert float(metrics["actor/erc/entropy_ratio_mean"]) == pytest.approx(logged, rel=1e-6)
    assert float(metrics["actor/erc/floor_frac"]) == pytest.approx(len(floored) / len(toks))
    if near_zero:
        assert len(floored) == len(NEAR_ZERO) and 0.8 < logged < 1.2
        paper = [(float(h[t]) + 1e-8) / (float(old_h[t]) + 1e-8) for t in toks[: len(NEAR_ZERO)]]
        assert [_keep(h, old_h, t, low, high) for t in toks[: len(NEAR_ZERO)]] == [True, True, True, True, False,
                                                                                    False]  # fmt: skip
        assert max(paper) > 1e4 and min(paper) < 1e-4  # what the paper's ratio alone would make of them


@pytest.mark.parametrize("name", ["grpo_erc", "gppo_erc"])
def test_erc_band_on_bf16_entropies_is_decided_on_their_exact_ratio(name):
    """Under bf16 compute verl hands the entropies over in bf16. The band is decided on the ratio of the values
    handed over (here in float64), not on a quotient rounded to bf16's steps (2^-7 above 1): ratios within 0.4 % of
    0.95 / 1.05 are kept or masked as their exact value says."""
    old, lp, adv, mask = O.batch(B=8, T=16, seed=11, spread=0.5)
    g = torch.Generator().manual_seed(12)
    old_h = (torch.rand(old.shape, generator=g, dtype=torch.float64) + 0.2).to(torch.bfloat16)
    edge = torch.where(torch.rand(old.shape, generator=g) < 0.5, 0.95, 1.05).to(torch.float64)
    jitter = 1 + 0.004 * (2 * torch.rand(old.shape, generator=g, dtype=torch.float64) - 1)
    h = (old_h.double() * edge * jitter).to(torch.bfloat16)
    ratio = h.double() / old_h.double()
    mask = mask & ((ratio - 0.95).abs() > 1e-6) & ((ratio - 1.05).abs() > 1e-6)  # a bf16 quotient can tie an edge
    cfg = O.actor_config(PolicyLossConfig(entropy_mask_low=0.95, entropy_mask_high=1.05), 0.2, 0.28, 3.0)
    _, _, metrics = run(name, old, lp, adv, mask, cfg, entropy=h, old_entropy=old_h)
    toks = O.valid_tokens(mask)
    kept = sum(_keep(h.double(), old_h.double(), t, 0.95, 1.05) for t in toks) / len(toks)
    assert 0.2 < kept < 0.8, "fixture must put tokens on both sides of the band's edges"
    assert float(metrics["actor/erc/kept_frac"]) == pytest.approx(kept)


def test_grpo_erc_dual_clip_caps_negative_advantages():
    """A < 0 with a huge ratio: the loss is -A*c and carries no gradient (dual clip)."""
    old = torch.zeros(1, 2, dtype=torch.float64)
    lp = torch.tensor([[3.0, 0.0]], dtype=torch.float64)  # r = e^3 > c = 3
    adv = torch.full((1, 2), -1.0, dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.bool)
    h = torch.ones(1, 2, dtype=torch.float64)
    cfg = O.actor_config(PolicyLossConfig(), 0.2, 0.28, 3.0)
    got, grad, metrics = run("grpo_erc", old, lp, adv, mask, cfg, entropy=h, old_entropy=h)
    assert float(got) == pytest.approx((3.0 + 1.0) / 2)
    assert grad[0, 0] == 0 and grad[0, 1] == pytest.approx(0.5)
    assert float(metrics["actor/pg_clipfrac_lower"]) == pytest.approx(0.5)


@pytest.mark.parametrize("near_zero", [False, True])
@pytest.mark.parametrize("beta1,beta2", [(0.75, 1.0), (1.0, 1.0), (0.0, 0.5)])
def test_gppo_erc_matches_analytic_gradient(beta1, beta2, near_zero):
    """Value and gradient per token from CE-GPPO's formula, derived by hand (d r / d lp = r), with DAPO's dual
    clip for A < 0 (value -A c, no gradient, where the loss exceeds it); more in test_gppo_dual_clip.py."""
    old, lp, adv, mask, h, old_h, low, high = _erc_case(seed=6, near_zero=near_zero)
    eps_low, eps_high, c = 0.2, 0.28, 3.0
    cfg = O.actor_config(
        PolicyLossConfig(entropy_mask_low=low, entropy_mask_high=high, gppo_beta1=beta1, gppo_beta2=beta2),
        eps_low,
        eps_high,
        c,
    )
    n = int(mask.sum())
    want = 0.0
    want_grad = torch.zeros_like(lp)
    n_clipped = n_dual = 0
    for t in O.valid_tokens(mask):
        a, r = float(adv[t]), math.exp(float(lp[t]) - float(old[t]))
        if a < 0 and r < 1 - eps_low:
            value, grad = -beta1 * (1 - eps_low) * a, -beta1 * (1 - eps_low) * a
            n_clipped += 1
        elif a > 0 and r > 1 + eps_high:
            value, grad = -beta2 * (1 + eps_high) * a, -beta2 * (1 + eps_high) * a
            n_clipped += 1
        else:
            value, grad = -a * r, -a * r
        if a < 0 and value > -a * c:
            value, grad = -a * c, 0.0
            n_dual += 1
        want += value / n
        want_grad[t] = grad / n if _keep(h, old_h, t, low, high) else 0.0
    assert n_clipped >= 3 and n_dual >= 1, "fixture must exercise the clipped branches and the dual clip"
    got, got_grad, _ = run("gppo_erc", old, lp, adv, mask, cfg, entropy=h, old_entropy=old_h)
    assert float(got) == pytest.approx(want, rel=1e-10)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["grpo_erc", "gppo_erc"])
@pytest.mark.parametrize("missing", ["entropy", "old_entropy"])
def test_erc_without_entropy_says_how_to_enable(name, missing):
    old, lp, adv, mask, h, old_h, *_ = _erc_case()
    kw = {"entropy": h, "old_entropy": old_h}
    kw.pop(missing)
    with pytest.raises(ValueError, match=rf"no {missing}\b.*verl_ext.main_ppo"):
        POLICY_LOSS_REGISTRY[name](old, lp, adv, mask, "token-mean", O.actor_config(PolicyLossConfig()), None, **kw)


# ------------------------------------------------------------------------------- shared behaviour
def _kwargs(name, like):
    return {"entropy": torch.ones_like(like), "old_entropy": torch.ones_like(like)} if "erc" in name else {}


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum"])
def test_empty_micro_batch_gives_finite_zero(name, mode):
    old, lp, adv, _ = O.batch(seed=7)
    mask = torch.zeros_like(old, dtype=torch.bool)
    cfg = O.actor_config(PolicyLossConfig(cov_scope="micro"))
    lp = lp.clone().requires_grad_(True)
    loss, metrics = POLICY_LOSS_REGISTRY[name](old, lp, adv, mask, mode, cfg, None, **_kwargs(name, old))
    loss.backward()
    assert torch.isfinite(loss) and float(loss.detach()) == 0.0
    assert torch.equal(lp.grad, torch.zeros_like(lp))
    for key, value in metrics.items():
        assert torch.isfinite(torch.as_tensor(value)).all(), key


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_uses_verl_agg_loss_with_global_batch_info(name):
    """With global batch info (as verl's ppo_loss sets it) the loss is normalised by the global token count."""
    old, lp, adv, mask = O.batch(seed=8)
    cfg = O.actor_config(PolicyLossConfig(cov_scope="micro"))
    local, _ = POLICY_LOSS_REGISTRY[name](old, lp, adv, mask, "token-mean", cfg, None, **_kwargs(name, old))
    cfg.global_batch_info = {"dp_size": 2, "batch_num_tokens": 4 * int(mask.sum()), "global_batch_size": None}
    scaled, _ = POLICY_LOSS_REGISTRY[name](old, lp, adv, mask, "token-mean", cfg, None, **_kwargs(name, old))
    torch.testing.assert_close(scaled, local * 2 / 4)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_metrics_are_tensors_and_ppo_kl_is_mean_log_ratio(name):
    old, lp, adv, mask = O.batch(seed=9)
    cfg = O.actor_config(PolicyLossConfig(cov_scope="micro"))
    _, metrics = POLICY_LOSS_REGISTRY[name](old, lp, adv, mask, "token-mean", cfg, None, **_kwargs(name, old))
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in metrics.values())
    want = sum(float(old[t] - lp[t]) for t in O.valid_tokens(mask)) / int(mask.sum())
    assert float(metrics["actor/ppo_kl"]) == pytest.approx(want)


@pytest.mark.parametrize("name", ["clip_cov", "kl_cov"])
def test_precomputed_selection_is_applied(name):
    """cov_selected from the batch scope replaces the in-call selection."""
    old, lp, adv, mask = O.batch(seed=10)
    selected = torch.zeros_like(mask)
    selected[0, 0] = selected[2, 0] = True
    cfg = O.actor_config(PolicyLossConfig(kl_cov_ratio=0.5, ppo_kl_coef=1.0, clip_cov_ratio=0.5), 0.2, 0.2)
    _, grad, metrics = run(name, old, lp, adv, mask, cfg, cov_selected=selected)
    assert float(metrics[f"actor/{name}/selected_frac"]) == pytest.approx(2 / int(mask.sum()))
    for t in O.valid_tokens(mask):
        r = math.exp(float(lp[t] - old[t]))
        base = -float(adv[t]) * r / int(mask.sum())
        if name == "clip_cov":
            clipped = O.is_ppo_clipped(float(lp[t]), float(old[t]), float(adv[t]), 0.2, 0.2)
            want = 0.0 if (bool(selected[t]) or clipped) else base
        else:
            sign = math.copysign(1.0, float(lp[t] - old[t]))
            want = base + (sign / int(mask.sum()) if bool(selected[t]) else 0.0)
        assert float(grad[t]) == pytest.approx(want, abs=1e-12), t


def test_matches_verl_vanilla_when_erc_band_keeps_everything():
    """grpo_erc with a band that keeps every token equals verl's own dual-clip `vanilla` loss and gradient."""
    from verl.workers.config import ActorConfig

    old, lp, adv, mask = O.batch(seed=11, spread=0.6)
    cfg = ActorConfig(
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=1,
        ppo_mini_batch_size=4,
        rollout_n=1,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        policy_loss=PolicyLossConfig(loss_mode="grpo_erc", entropy_mask_low=0.0, entropy_mask_high=100.0),
    )
    ours = lp.clone().requires_grad_(True)
    theirs = lp.clone().requires_grad_(True)
    h = torch.ones_like(old)
    got, _ = POLICY_LOSS_REGISTRY["grpo_erc"](old, ours, adv, mask, "token-mean", cfg, None, entropy=h, old_entropy=h)
    want, _ = POLICY_LOSS_REGISTRY["vanilla"](old, theirs, adv, mask, "token-mean", cfg, None)
    got.backward()
    want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(ours.grad, theirs.grad)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_traces_without_graph_breaks(name):
    """Sync-free proxy: the whole loss traces with torch.compile(fullgraph=True) (no .item(), nonzero, ...)."""
    old, lp, adv, mask = O.batch(seed=12)
    cfg = O.actor_config(PolicyLossConfig(cov_scope="micro", clip_cov_lb=-5, clip_cov_ub=5, clip_cov_ratio=0.2))
    fn = POLICY_LOSS_REGISTRY[name]
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="eager")
    got, _ = compiled(old, lp, adv, mask, "token-mean", cfg, None, **_kwargs(name, old))
    want, _ = fn(old, lp, adv, mask, "token-mean", cfg, None, **_kwargs(name, old))
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("loss_mode", ["clip_cov", "kl_cov"])
def test_batch_scope_without_cov_selected_warns_once_that_it_selects_per_call(loss_mode, caplog):
    """verl's own ppo_loss passes no cov_selected: the loss selects within the call (micro scope), and says so
    once per process instead of silently changing the method; with cov_scope=micro it stays quiet."""
    import logging

    from verl_ext.losses import selection
    from verl_ext.config import PolicyLossConfig
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    selection._FALLBACK_NOTED.discard(loss_mode)
    torch.manual_seed(0)
    lp, old, adv = torch.randn(2, 8), torch.randn(2, 8), torch.randn(2, 8)
    mask = torch.ones(2, 8, dtype=torch.bool)

    def call(scope: str) -> None:
        config = O.actor_config(PolicyLossConfig(loss_mode=loss_mode, cov_scope=scope))
        get_policy_loss_fn(loss_mode)(old_log_prob=old, log_prob=lp, advantages=adv, response_mask=mask, config=config)

    with caplog.at_level(logging.WARNING, logger="verl_ext.losses.selection"):
        call("micro")
        assert not caplog.records
        call("batch")
        call("batch")
    assert len(caplog.records) == 1 and "cov_scope=batch" in caplog.records[0].getMessage()
