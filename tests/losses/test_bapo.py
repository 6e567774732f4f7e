"""BAPO (arXiv 2510.18927) against float64 oracles written here, token by token, from the paper's formulas:

* the search (Algorithm 1): raise c_low by delta_1 up to b^-, then c_high by delta_2 up to b^+, while the positive
  share rho = P / (P + N) is below rho_0, P and N summing r|A| over the tokens whose gradient the clip keeps;
* the loss: DAPO's dual-clip surrogate with the bounds [c_low, c_high], token-mean; its gradient per token is
  -A r / n where the clip keeps the token, 0 elsewhere;
* step scope: the same bounds, loss and gradient for 1, 2 and 8 micro-batches, an uneven (dynamic-batching-like)
  split and two simulated DP ranks.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import _oracles as O
import verl_ext.registration  # noqa: F401  (registers the losses)
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
from verl_ext.config import ConfigError, PolicyLossConfig
from verl_ext.losses.bapo import bound_grid, contribution_statistics, decide_bounds, importance_ratio
from verl_ext.trainer.actor_loss import policy_loss_extras
from verl_ext.trainer.bapo_step import reduce_and_decide

C = 3.0


def cfg(scope="micro", **overrides):
    return O.actor_config(PolicyLossConfig(loss_mode="bapo", bapo_scope=scope, **overrides), 0.2, 0.28, C)


# ------------------------------------------------------------------------------------------------------------------
# oracles
# ------------------------------------------------------------------------------------------------------------------


oracle_share, oracle_search = O.bapo_share, O.bapo_search


def oracle_loss_and_grad(lp, old, adv, mask, c_low, c_high):
    """Token-mean loss and d loss / d lp per token."""
    n = int(mask.sum())
    total, grad = 0.0, torch.zeros_like(lp)
    for idx in zip(*torch.nonzero(mask, as_tuple=True)):
        r = float(torch.exp(lp[idx] - old[idx]))
        a = float(adv[idx])
        clip_loss = max(-a * r, -a * min(max(r, c_low), c_high))
        loss = min(clip_loss, -a * C) if a < 0 else clip_loss
        total += loss
        keeps = (r <= c_high) if a > 0 else (c_low <= r <= C) if a < 0 else True
        grad[idx] = -a * r / n if keeps else 0.0
    return total / n, grad


def tokens(ratios, advs):
    r = torch.tensor([ratios], dtype=torch.float64)
    adv = torch.tensor([advs], dtype=torch.float64)
    return r, adv, torch.ones_like(r, dtype=torch.bool)


def searched(r, adv, mask, config):
    lows, highs = bound_grid(config)
    return decide_bounds(contribution_statistics(r, adv, mask, lows, highs, C), lows, highs, 0.5).tolist()


# ------------------------------------------------------------------------------------------------------------------
# the search
# ------------------------------------------------------------------------------------------------------------------


def test_target_already_met_keeps_the_initial_bounds():
    r, adv, mask = tokens([1.0, 1.1, 0.9], [1.0, 1.0, -1.0])
    got = searched(r, adv, mask, cfg())
    assert oracle_search(r, adv, mask)[:2] == (0.8, 1.2)
    assert got == pytest.approx(oracle_search(r, adv, mask), abs=1e-12)
    assert got[:2] == pytest.approx([0.8, 1.2])


def test_lower_bound_saturates_then_upper_widens():
    # negative tokens at r = 0.82 and 0.97 (the first leaves N once c_low > 0.82, the second stays: 0.97 > b^- = 0.95);
    # positives at r = 1.0 and 1.45 (the second enters P once c_high reaches 1.5)
    r, adv, mask = tokens([0.82, 0.97, 1.0, 1.45], [-2.0, -1.0, 0.5, 1.0])
    want = oracle_search(r, adv, mask)
    assert want[0] == pytest.approx(0.95) and 1.2 < want[1] < 2.0, "the fixture must saturate c_low only"
    assert searched(r, adv, mask, cfg()) == pytest.approx(want, abs=1e-12)


def test_both_bounds_hit_their_maxima_when_the_target_is_out_of_reach():
    r, adv, mask = tokens([1.0, 1.0, 2.5], [-3.0, 0.5, 1.0])
    want = oracle_search(r, adv, mask)
    assert want[:2] == pytest.approx((0.95, 2.0)) and want[2] < 0.5
    assert searched(r, adv, mask, cfg()) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_search_matches_the_loop_on_random_stale_batches(seed):
    g = torch.Generator().manual_seed(seed)
    r = torch.exp(torch.randn(5, 9, generator=g, dtype=torch.float64) * 0.4)
    adv = torch.randn(5, 1, generator=g, dtype=torch.float64).expand(5, 9) - 0.3
    mask = torch.rand(5, 9, generator=g) < 0.8
    assert searched(r, adv, mask, cfg()) == pytest.approx(oracle_search(r, adv, mask), abs=1e-12)


# ------------------------------------------------------------------------------------------------------------------
# the loss
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_loss_and_gradient_match_the_oracle(seed):
    old, lp0, adv, mask = O.batch(seed=seed, spread=0.5)
    lp = lp0.clone().requires_grad_(True)
    loss, metrics = POLICY_LOSS_REGISTRY["bapo"](old, lp, adv, mask, "token-mean", cfg(), None)
    c_low, c_high, share = oracle_search(torch.exp(lp0 - old), adv, mask)
    want_loss, want_grad = oracle_loss_and_grad(lp0, old, adv, mask, c_low, c_high)
    loss.backward()
    assert float(loss) == pytest.approx(want_loss, rel=1e-12, abs=1e-12)
    torch.testing.assert_close(lp.grad, want_grad, rtol=1e-10, atol=1e-12)
    assert float(metrics["actor/bapo/clip_low"]) == pytest.approx(c_low, abs=1e-6)
    assert float(metrics["actor/bapo/clip_high"]) == pytest.approx(c_high, abs=1e-6)
    assert float(metrics["actor/bapo/positive_share"]) == pytest.approx(share, abs=1e-6)


def test_given_bounds_are_applied_as_given():
    old, lp0, adv, mask = O.batch(seed=1, spread=0.5)
    lp = lp0.clone().requires_grad_(True)
    bounds = torch.tensor([0.9, 1.5, 0.4], dtype=torch.float64)
    loss, metrics = POLICY_LOSS_REGISTRY["bapo"](old, lp, adv, mask, "token-mean", cfg("step"), None,
                                                 bapo_bounds=bounds)  # fmt: skip
    want_loss, want_grad = oracle_loss_and_grad(lp0, old, adv, mask, 0.9, 1.5)
    loss.backward()
    assert float(loss) == pytest.approx(want_loss, rel=1e-12)
    torch.testing.assert_close(lp.grad, want_grad, rtol=1e-10, atol=1e-12)
    assert float(metrics["actor/bapo/positive_share"]) == pytest.approx(0.4)


def test_on_policy_the_bounds_do_not_change_the_loss():
    """r = 1 everywhere (first mini-batch, first epoch): every token keeps its gradient, whatever the bounds."""
    _, lp0, adv, mask = O.batch(seed=2)
    losses = []
    for bounds in ([0.8, 1.2, 0.5], [0.95, 2.0, 0.5]):
        lp = lp0.clone().requires_grad_(True)
        loss, _ = POLICY_LOSS_REGISTRY["bapo"](lp0, lp, adv, mask, "token-mean", cfg("step"), None,
                                               bapo_bounds=torch.tensor(bounds, dtype=torch.float64))  # fmt: skip
        loss.backward()
        losses.append((float(loss), lp.grad))
    assert losses[0][0] == pytest.approx(losses[1][0], rel=1e-14)
    torch.testing.assert_close(losses[0][1], losses[1][1], rtol=0, atol=0)


def test_step_scope_without_bounds_is_an_error_in_verl_exts_actor_loss():
    with pytest.raises(ValueError, match="bapo_scope=step"):
        policy_loss_extras(cfg("step"), TensorDict({}), None, None)
    assert policy_loss_extras(cfg("micro"), TensorDict({}), None, None) == {}


def test_traces_without_graph_breaks():
    old, lp, adv, mask = O.batch(seed=3, spread=0.5)
    fn = torch.compile(POLICY_LOSS_REGISTRY["bapo"], fullgraph=True, backend="eager")
    loss, _ = fn(old, lp, adv, mask, "token-mean", cfg(), None)
    want, _ = POLICY_LOSS_REGISTRY["bapo"](old, lp, adv, mask, "token-mean", cfg(), None)
    assert float(loss) == pytest.approx(float(want), rel=1e-12)


# ------------------------------------------------------------------------------------------------------------------
# step scope: invariance to micro-batching and DP ranks
# ------------------------------------------------------------------------------------------------------------------

B, T, D = 16, 24, 5


def linear_batch(seed=2):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    w0 = torch.randn(D, generator=g, dtype=torch.float64) * 0.3
    old = -torch.nn.functional.softplus(feats @ w0) - 0.05
    adv = torch.randn(B, 1, generator=g, dtype=torch.float64).expand(B, T).contiguous() - 0.1
    lengths = torch.randint(3, T + 1, (B,), generator=g)
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    w = w0 + 0.3 * torch.randn(D, generator=g, dtype=torch.float64)  # a later mini-batch: lp != old
    return feats, w, old, adv, mask


def step(scope, splits, n_ranks=1):
    """One optimiser step: bounds from the summed statistics of every micro-batch of every rank (step scope) or none
    (micro scope), then the accumulated gradient of the micro-batch losses (verl's global token count)."""
    feats, w, old, adv, mask = linear_batch()
    config = cfg(scope)
    config.global_batch_info = {"dp_size": n_ranks, "batch_num_tokens": int(mask.sum()), "global_batch_size": None}
    lows, highs = bound_grid(config)
    bounds = None
    if scope == "step":
        total = None
        for rows in splits:
            lp = -torch.nn.functional.softplus(feats[rows] @ w) - 0.05
            stats = contribution_statistics(importance_ratio(lp, old[rows]), adv[rows], mask[rows], lows, highs, C)
            total = stats if total is None else total + stats
        bounds = reduce_and_decide(total, config)
    w = w.clone().requires_grad_(True)
    loss_sum = 0.0
    for rows in splits:
        lp = -torch.nn.functional.softplus(feats[rows] @ w) - 0.05
        extra = {} if bounds is None else {"bapo_bounds": bounds}
        loss, _ = POLICY_LOSS_REGISTRY["bapo"](old[rows], lp, adv[rows], mask[rows], "token-mean", config, None, **extra)
        (loss / n_ranks).backward() if n_ranks > 1 else loss.backward()
        loss_sum += float(loss)
    return bounds, loss_sum, w.grad


def uniform(k):
    return list(torch.tensor_split(torch.arange(B), k))


UNEVEN = [torch.tensor([0]), torch.tensor([1, 2, 3, 4, 5, 6, 7]), torch.tensor([8, 9]), torch.arange(10, 16)]


def test_step_scope_gives_the_same_bounds_loss_and_gradient_for_any_micro_batching():
    ref_bounds, ref_loss, ref_grad = step("step", uniform(1))
    feats, w, old, adv, mask = linear_batch()
    lp = -torch.nn.functional.softplus(feats @ w) - 0.05
    want = oracle_search(torch.exp(lp - old), adv, mask)
    assert ref_bounds.tolist() == pytest.approx(want, abs=1e-12)
    assert want[0] == pytest.approx(0.95) and 1.2 < want[1] < 2.0, "the fixture must stop mid-way on c_high"
    for splits in (uniform(2), uniform(8), UNEVEN):
        bounds, loss, grad = step("step", splits)
        assert bounds[:2].tolist() == ref_bounds[:2].tolist()
        assert float(bounds[2]) == pytest.approx(float(ref_bounds[2]), rel=1e-12)
        assert loss == pytest.approx(ref_loss, rel=1e-12)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-12)


def test_step_scope_over_two_ranks_equals_one_rank():
    """Two DP ranks, each with its half of the rows in uneven micro-batches: the statistics summed over both (what
    the all-reduce does) give the single rank's bounds and, averaged as DDP/FSDP do, its gradient."""
    _, _, ref_grad = step("step", uniform(1))
    ref_bounds = step("step", uniform(1))[0]
    bounds, _, grad = step("step", [torch.arange(0, 3), torch.arange(3, 8), torch.arange(8, 11), torch.arange(11, 16)],
                           n_ranks=2)  # fmt: skip
    assert bounds[:2].tolist() == ref_bounds[:2].tolist()
    torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-12)


def test_micro_scope_depends_on_micro_batching():
    """The authors' behaviour (bounds per loss call) changes the gradient: the defect step scope fixes."""
    _, _, one = step("micro", uniform(1))
    _, _, eight = step("micro", uniform(8))
    assert not torch.allclose(one, eight, rtol=1e-6, atol=1e-9)


# ------------------------------------------------------------------------------------------------------------------
# config
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"bapo_rho0": 0.0}, "bapo_rho0"),
        ({"bapo_rho0": 1.0}, "bapo_rho0"),
        ({"bapo_clip_low_step": 0.0}, "bapo_clip_low_step"),
        ({"bapo_clip_high_step": -0.1}, "bapo_clip_high_step"),
        ({"bapo_clip_low": 1.1}, "bapo_clip_low"),
        ({"bapo_clip_low": 0.9, "bapo_clip_low_max": 0.85}, "bapo_clip_low_max"),
        ({"bapo_clip_low_max": 1.0}, "bapo_clip_low_max"),
        ({"bapo_clip_high": 0.9}, "bapo_clip_high"),
        ({"bapo_clip_high": 1.5, "bapo_clip_high_max": 1.4}, "bapo_clip_high_max"),
        ({"bapo_clip_high_step": 1e-6}, "bapo_clip_high_step"),
        ({"bapo_scope": "batch"}, "bapo_scope"),
        ({"bapo_rho0": "half"}, "bapo_rho0"),
    ],
)
def test_bad_values_are_config_errors_naming_the_key_and_the_allowed_values(kwargs, key):
    with pytest.raises(ConfigError, match="allowed") as err:
        PolicyLossConfig(loss_mode="bapo", **kwargs)
    assert err.value.key == f"actor_rollout_ref.actor.policy_loss.{key}"


def test_grid_ends_at_the_maxima():
    lows, highs = bound_grid(cfg(bapo_clip_low=0.6, bapo_clip_low_max=0.83, bapo_clip_low_step=0.1))
    assert lows.tolist() == pytest.approx([0.6, 0.7, 0.8, 0.83])
    assert highs.tolist() == pytest.approx([1.2 + 0.1 * k for k in range(9)])
