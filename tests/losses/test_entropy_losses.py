"""``high_entropy``, ``entropy_adv`` and EntroPIC's term against float64 oracles written token by token from the
papers' equations (values and gradients), including empty batches and all-equal entropies."""

from __future__ import annotations

import math

import pytest
import torch

import _oracles as O
import verl  # noqa: F401
from verl_ext.config import PolicyLossConfig
from verl_ext.losses.entropic import entropic_term
from verl_ext.losses.entropy_adv import compute_policy_loss_entropy_adv
from verl_ext.losses.high_entropy import compute_policy_loss_high_entropy, high_entropy_weights

C = 3.0  # dual-clip constant of the oracle configs


dual_clip_token = O.dual_clip_token
"""DAPO's per-token loss (tests/_oracles.py), clip constant :data:`C`."""


def entropies(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g, dtype=torch.float64) * 3


def grad_of(loss_fn, lp):
    lp = lp.clone().requires_grad_(True)
    value = loss_fn(lp)
    (grad,) = torch.autograd.grad(value, lp, allow_unused=True)
    return value.detach(), (torch.zeros_like(lp) if grad is None else grad)


# ----------------------------------------------------------------------------------------------------------
# high_entropy (arXiv 2506.01939)
# ----------------------------------------------------------------------------------------------------------


def high_entropy_oracle(lp, old, adv, mask, H, rho):
    """(1/|S|) sum_{i in S} L^dual_i, S = the max(1, ceil(rho N)) valid tokens with the largest entropy."""
    toks = sorted(O.valid_tokens(mask), key=lambda t: -float(H[t]))
    chosen = toks[: max(1, math.ceil(rho * len(toks)))]
    return sum(dual_clip_token(lp[t], old[t], float(adv[t])) for t in chosen) / len(chosen)


@pytest.mark.parametrize("rho", [0.2, 0.5, 1.0])
def test_high_entropy_micro_scope_matches_the_paper(rho):
    old, lp, adv, mask = O.batch(seed=3)
    H = entropies(old.shape, 4)
    cfg = O.actor_config(PolicyLossConfig(loss_mode="high_entropy", high_entropy_ratio=rho, high_entropy_scope="micro"))
    ours = lambda x: compute_policy_loss_high_entropy(old, x, adv, mask, config=cfg, entropy=H)[0]  # noqa: E731
    want = lambda x: high_entropy_oracle(x, old, adv, mask, H, rho)  # noqa: E731
    (v1, g1), (v2, g2) = grad_of(ours, lp), grad_of(want, lp)
    assert v1 == pytest.approx(float(v2), rel=1e-12)
    torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-12)
    n = int(mask.sum())
    _, metrics = compute_policy_loss_high_entropy(old, lp, adv, mask, config=cfg, entropy=H)
    assert float(metrics["actor/high_entropy/selected_frac"]) == pytest.approx(max(1, math.ceil(rho * n)) / n)


def test_high_entropy_batch_scope_weights_give_the_same_loss_and_the_micro_batches_sum_to_it():
    """The driver's weights over the batch, then the loss on two micro-batches with verl's global token count: the
    sum equals the oracle over the whole batch (the selection does not move with the micro-batching)."""
    old, lp, adv, mask = O.batch(B=8, seed=5)
    H = entropies(old.shape, 6)
    weights, stats = high_entropy_weights(H, mask, 0.25)
    cfg = O.actor_config(PolicyLossConfig(loss_mode="high_entropy", high_entropy_ratio=0.25))
    n = int(mask.sum())
    cfg.global_batch_info = {"dp_size": 1, "batch_num_tokens": n, "global_batch_size": 8}
    total = sum(compute_policy_loss_high_entropy(old[s], lp[s], adv[s], mask[s], config=cfg,
                                                 high_entropy_weight=weights[s])[0] for s in (slice(0, 3), slice(3, 8)))  # fmt: skip
    # the weights travel as float32 (N / |S| rounded to 24 bits)
    assert float(total) == pytest.approx(float(high_entropy_oracle(lp, old, adv, mask, H, 0.25)), rel=1e-7)
    k = max(1, math.ceil(0.25 * n))
    assert stats["selected_frac"] == k / n and int((weights > 0).sum()) == k
    assert stats["entropy_threshold"] == sorted((float(H[t]) for t in O.valid_tokens(mask)), reverse=True)[k - 1]


def test_high_entropy_all_equal_entropies_pick_by_content_not_by_row_order():
    """Equal entropies: exactly k tokens, chosen by the tokens' content; permuting the rows permutes the choice."""
    old, lp, adv, mask = O.batch(B=6, seed=7)
    H = torch.full(old.shape, 1.5, dtype=torch.float64)
    ids = torch.randint(0, 100, old.shape, generator=torch.Generator().manual_seed(1))
    weights, _ = high_entropy_weights(H, mask, 0.3, ids)
    k = max(1, math.ceil(0.3 * int(mask.sum())))
    assert int((weights > 0).sum()) == k and not bool(((weights > 0) & ~mask).any())
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    permuted, _ = high_entropy_weights(H[perm], mask[perm], 0.3, ids[perm])
    torch.testing.assert_close(permuted, weights[perm])


def test_high_entropy_empty_batch_is_zero_not_nan():
    old, lp, adv, mask = O.batch(seed=8)
    empty = torch.zeros_like(mask)
    H = entropies(old.shape, 9)
    weights, stats = high_entropy_weights(H, empty, 0.2)
    assert float(weights.abs().sum()) == 0.0 and stats["selected_frac"] == 0.0
    for scope, extra in (("micro", {"entropy": H}), ("batch", {"high_entropy_weight": weights})):
        cfg = O.actor_config(PolicyLossConfig(loss_mode="high_entropy", high_entropy_scope=scope))
        value, grad = grad_of(lambda x: compute_policy_loss_high_entropy(old, x, adv, empty, config=cfg, **extra)[0], lp)
        assert float(value) == 0.0 and float(grad.abs().sum()) == 0.0, scope


def test_high_entropy_without_its_inputs_says_how_to_enable_them():
    old, lp, adv, mask = O.batch(seed=1)
    cfg = O.actor_config(PolicyLossConfig(loss_mode="high_entropy"))
    with pytest.raises(ValueError, match="high_entropy_weight"):
        compute_policy_loss_high_entropy(old, lp, adv, mask, config=cfg)


# ----------------------------------------------------------------------------------------------------------
# entropy_adv (arXiv 2506.14758)
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("alpha", "kappa"), [(0.4, 2.0), (5.0, 1.25), (0.01, 3.0)])
def test_entropy_adv_matches_the_paper(alpha, kappa):
    """token-mean of L^dual(A + min(alpha H, |A| / kappa)); H enters without gradient."""
    old, lp, adv, mask = O.batch(seed=11)
    H = entropies(old.shape, 12)
    cfg = O.actor_config(PolicyLossConfig(loss_mode="entropy_adv", entropy_adv_alpha=alpha, entropy_adv_kappa=kappa))

    def oracle(x):
        per = {}
        for t in O.valid_tokens(mask):
            a = float(adv[t])
            shaped = a + min(alpha * float(H[t]), abs(a) / kappa)
            per[t] = dual_clip_token(x[t], old[t], shaped)
        return O.token_mean(per, mask)

    Hg = H.clone().requires_grad_(True)
    ours = lambda x: compute_policy_loss_entropy_adv(old, x, adv, mask, config=cfg, entropy=Hg)[0]  # noqa: E731
    (v1, g1), (v2, g2) = grad_of(ours, lp), grad_of(oracle, lp)
    assert v1 == pytest.approx(float(v2), rel=1e-12)
    torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-12)
    value = compute_policy_loss_entropy_adv(old, lp.clone().requires_grad_(True), adv, mask, config=cfg, entropy=Hg)[0]
    assert torch.autograd.grad(value, Hg, allow_unused=True)[0] is None  # the entropy carries no gradient
    _, metrics = compute_policy_loss_entropy_adv(old, lp, adv, mask, config=cfg, entropy=H)
    psi = [min(alpha * float(H[t]), abs(float(adv[t])) / kappa) for t in O.valid_tokens(mask)]
    assert float(metrics["actor/entropy_adv/shaping_mean"]) == pytest.approx(sum(psi) / len(psi), rel=1e-12)


def test_entropy_adv_never_flips_a_sign_and_leaves_zero_advantages_alone():
    old, lp, adv, mask = O.batch(seed=13)
    adv[0] = 0.0
    H = torch.full(old.shape, 100.0, dtype=torch.float64)  # huge entropy: the cap binds everywhere
    from verl_ext.losses.entropy_adv import shaped_advantages

    shaped, psi, capped = shaped_advantages(adv, H, 0.4, 1.0)
    assert bool((shaped[0] == 0).all()) and bool(((shaped >= 0) | (adv < 0)).all())
    assert bool((shaped[adv < 0] <= 0).all()) and bool(capped[adv != 0].all())


def test_entropy_adv_empty_batch_and_missing_entropy():
    old, lp, adv, mask = O.batch(seed=14)
    cfg = O.actor_config(PolicyLossConfig(loss_mode="entropy_adv"))
    empty = torch.zeros_like(mask)
    value, grad = grad_of(lambda x: compute_policy_loss_entropy_adv(old, x, adv, empty, config=cfg,
                                                                    entropy=entropies(old.shape, 1))[0], lp)  # fmt: skip
    assert float(value) == 0.0 and float(grad.abs().sum()) == 0.0
    with pytest.raises(ValueError, match="entropy"):
        compute_policy_loss_entropy_adv(old, lp, adv, mask, config=cfg)


# ----------------------------------------------------------------------------------------------------------
# EntroPIC's term (arXiv 2511.15248): the pos_weight actuator
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [-0.7, 0.0, 0.4])
def test_entropic_term_matches_the_paper(alpha):
    """alpha * (1/N) sum over valid tokens with pi > 0.95 of -r_i |A_i| (N: every valid token, verl's token-mean)."""
    old, lp, adv, mask = O.batch(seed=15, spread=0.01)
    lp = lp.clone()
    lp[:, :4] = math.log(0.97) + 0.001 * torch.arange(4)  # some high-probability tokens
    old[:, :4] = lp[:, :4] - 0.02
    cfg = O.actor_config(PolicyLossConfig())

    def oracle(x):
        per = {t: (-torch.exp(x[t] - old[t]) * abs(float(adv[t])) if float(x[t].detach()) > math.log(0.95) else x[t] * 0)
               for t in O.valid_tokens(mask)}  # fmt: skip
        return alpha * O.token_mean(per, mask)

    field = torch.full(old.shape, alpha, dtype=torch.float32)
    ours = lambda x: entropic_term(x, old, adv, mask, field, "token-mean", cfg)[0]  # noqa: E731
    (v1, g1), (v2, g2) = grad_of(ours, lp), grad_of(oracle, lp)
    assert v1 == pytest.approx(float(v2), rel=1e-6, abs=1e-12)  # alpha travels as float32
    torch.testing.assert_close(g1, g2, rtol=1e-6, atol=1e-12)
    high = sum(float(lp[t]) > math.log(0.95) for t in O.valid_tokens(mask))
    assert high > 0
    _, metrics = entropic_term(lp, old, adv, mask, field, "token-mean", cfg)
    assert float(metrics["actor/entropic/high_prob_frac"]) == pytest.approx(high / int(mask.sum()))


def test_entropic_term_on_an_empty_batch_is_zero():
    old, lp, adv, mask = O.batch(seed=16)
    field = torch.full(old.shape, 0.5)
    value, grad = grad_of(lambda x: entropic_term(x, old, adv, torch.zeros_like(mask), field, "token-mean",
                                                  O.actor_config(PolicyLossConfig()))[0], lp)  # fmt: skip
    assert float(value) == 0.0 and float(grad.abs().sum()) == 0.0


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [("high_entropy_ratio", 0.0, "fraction in (0, 1]"), ("high_entropy_ratio", 1.5, "fraction in (0, 1]"),
     ("high_entropy_scope", "global", "['batch', 'micro']"), ("entropy_adv_alpha", 0.0, "> 0"),
     ("entropy_adv_kappa", 0.5, "> 1"), ("entropy_adv_kappa", 1.0, "> 1, as the paper requires")],
)  # fmt: skip
def test_bad_new_loss_keys_name_the_key(key, value, words):
    from verl_ext.config import ConfigError

    with pytest.raises(ConfigError) as info:
        PolicyLossConfig(**{key: value})
    assert info.value.key == f"actor_rollout_ref.actor.policy_loss.{key}" and words in info.value.message


@pytest.mark.parametrize("case", ["high_entropy_micro", "high_entropy_batch", "entropy_adv", "entropic_term"])
def test_traces_without_graph_breaks(case):
    """Sync-free proxy, as for the other losses: each traces with torch.compile(fullgraph=True) (no .item(),
    nonzero, data-dependent shapes) and gives the eager value."""
    old, lp, adv, mask = O.batch(seed=21)
    H = entropies(old.shape, 22)
    if case.startswith("high_entropy"):
        scope = case.rsplit("_", 1)[1]
        cfg = O.actor_config(PolicyLossConfig(loss_mode="high_entropy", high_entropy_scope=scope))
        extra = {"entropy": H} if scope == "micro" else {"high_entropy_weight": high_entropy_weights(H, mask, 0.2)[0]}
        fn = lambda x: compute_policy_loss_high_entropy(old, x, adv, mask, "token-mean", cfg, None, **extra)[0]  # noqa: E731
    elif case == "entropy_adv":
        cfg = O.actor_config(PolicyLossConfig(loss_mode="entropy_adv"))
        fn = lambda x: compute_policy_loss_entropy_adv(old, x, adv, mask, "token-mean", cfg, None, entropy=H)[0]  # noqa: E731
    else:
        cfg = O.actor_config(PolicyLossConfig())
        field = torch.full(old.shape, 0.3)
        fn = lambda x: entropic_term(x, old, adv, mask, field, "token-mean", cfg)[0]  # noqa: E731
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(fn, fullgraph=True, backend="eager")(lp), fn(lp))
