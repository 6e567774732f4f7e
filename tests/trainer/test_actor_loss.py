"""verl_ext.trainer.actor_loss.ppo_loss and KL clipping, on CPU in float64.

* Where both apply, verl_ext's actor loss equals verl's own ``ppo_loss`` (value, gradient, metrics).
* KL clipping against an oracle written here from the formula of seed 001: per sequence
  ``C_s = relu|softplus(sum_t k_st - tau_s)``, ``tau_s = threshold * L_s`` (per token) or ``threshold``,
  token-mean loss ``sum_s C_s / N_tokens``; values and gradients.
* ``hard`` with threshold 0 equals verl's KL loss for every ``loss_agg_mode`` (non-negative estimator).
* The entropy control's loss-side actuators: the batch field ``entropy_coef`` = c equals verl's ``entropy_coeff`` = c;
  the ``pos_weight`` loss minus the alpha = 0 loss is EntroPIC's term written here from its formula.
Each oracle test also checks that its term changes the loss, so that deleting the term from the code fails it.
"""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.cpu_actor import make_batch

AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]


def actor_config(loss_mode: str = "vanilla", loss_kwargs: dict | None = None, **overrides):
    from verl.workers.config import FSDPOptimizerConfig

    from verl_ext.trainer.actor_config import FSDPActorConfig
    from verl_ext.config import PolicyLossConfig

    kwargs = dict(strategy="fsdp2", rollout_n=1, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=4,
                  optim=FSDPOptimizerConfig(lr=1e-3), policy_loss=PolicyLossConfig(loss_mode=loss_mode, **(loss_kwargs or {})))  # fmt: skip
    kwargs.update(overrides)
    return FSDPActorConfig(**kwargs)


def fixture(seed: int = 0, global_info: bool = True, extra: dict | None = None):
    """A 4-sequence micro-batch in verl's no-padding layout, float64 fields (plus ``extra`` ``(4, 6)`` response
    fields), and a flat log-prob leaf."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    gen = torch.Generator().manual_seed(seed)
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]
    responses = [[20, 21, 22, 23, 24], [25, 26], [27, 28, 29], [30, 31, 32, 33, 34, 35]]
    max_r = max(map(len, responses))
    fields = {
        "advantages": torch.randn(4, max_r, generator=gen, dtype=torch.float64),
        "old_log_probs": -torch.rand(4, max_r, generator=gen, dtype=torch.float64) * 2,
        "ref_log_prob": -torch.rand(4, max_r, generator=gen, dtype=torch.float64) * 2,
        "old_entropy": torch.rand(4, max_r, generator=gen, dtype=torch.float64) + 0.5,
        **(extra or {}),
    }
    data = left_right_2_no_padding(make_batch(prompts, responses, response_fields=fields))
    n_tokens = int(data["response_mask"].sum())
    if global_info:
        tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=n_tokens, global_batch_size=4)
    else:
        tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=None, global_batch_size=None)
    total = int(data["input_ids"].values().shape[0])
    flat = (-torch.rand(total, generator=gen, dtype=torch.float64) * 2).requires_grad_(True)
    flat_entropy = torch.rand(total, generator=gen, dtype=torch.float64) + 0.5
    padded = lambda t: no_padding_2_padding(t, data)  # noqa: E731  (verl's layout helper, not under test)
    return data, flat, flat_entropy, padded


def run(loss_fn, config, data, flat, entropy=None):
    output = {"log_probs": flat} if entropy is None else {"log_probs": flat, "entropy": entropy}
    loss, metrics = loss_fn(config, output, data.clone())
    (grad,) = torch.autograd.grad(loss, flat)
    return loss.detach(), grad, metrics


def metric_value(metric) -> float:
    """A verl ``Metric`` holding one value (one micro-batch), or a plain number, as a float."""
    return float(metric.aggregate()) if hasattr(metric, "aggregate") else float(metric)


# ------------------------------------------------------------------------------------------------------
# equality with verl's ppo_loss
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("global_info", [True, False])
def test_matches_verls_ppo_loss_for_verls_own_losses(agg, global_info):
    from verl.workers.utils.losses import ppo_loss as verl_ppo_loss

    from verl_ext.trainer.actor_loss import ppo_loss

    data, flat, entropy, _ = fixture(global_info=global_info)
    kw = dict(loss_agg_mode=agg, entropy_coeff=0.01, use_kl_loss=True, kl_loss_coef=0.1, kl_loss_type="k3")
    ours = run(ppo_loss, actor_config(**kw), data, flat, entropy)
    verls = run(verl_ppo_loss, actor_config(**kw), data, flat, entropy)
    assert torch.allclose(ours[0], verls[0], rtol=1e-12, atol=1e-14)
    assert torch.allclose(ours[1], verls[1], rtol=1e-12, atol=1e-14)
    assert set(ours[2]) == set(verls[2])
    for key in verls[2]:
        assert metric_value(ours[2][key]) == pytest.approx(metric_value(verls[2][key]), rel=1e-12), key
        assert getattr(ours[2][key], "aggregation", None) == getattr(verls[2][key], "aggregation", None), key


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("kl_type", ["low_var_kl", "k2", "abs"])
def test_hard_clip_at_zero_equals_verls_kl_loss(agg, kl_type):
    from verl.workers.utils.losses import ppo_loss as verl_ppo_loss

    from verl_ext.trainer.actor_loss import ppo_loss

    data, flat, _, _ = fixture(seed=1)
    kw = dict(loss_agg_mode=agg, use_kl_loss=True, kl_loss_coef=1.0, kl_loss_type=kl_type)
    ours = run(ppo_loss, actor_config(kl_clip_method="hard", kl_clip_threshold=0.0, **kw), data, flat)
    verls = run(verl_ppo_loss, actor_config(**kw), data, flat)
    assert torch.allclose(ours[0], verls[0], rtol=1e-12, atol=1e-14)
    assert torch.allclose(ours[1], verls[1], rtol=1e-10, atol=1e-14)
    assert metric_value(ours[2]["actor/kl_clip/clipped_kl"]) == pytest.approx(
        metric_value(ours[2]["actor/kl_clip/raw_kl"]), rel=1e-12
    )


# ------------------------------------------------------------------------------------------------------
# KL clipping against the formula
# ------------------------------------------------------------------------------------------------------


def oracle_clipped_kl(lp, ref, mask, method, threshold, per_token):
    """k3 / low_var_kl per token, summed per sequence, clipped, token-mean over the micro-batch."""
    total = lp.new_zeros(())
    above = 0
    n_seq = 0
    for s in range(lp.shape[0]):
        idx = [t for t in range(lp.shape[1]) if mask[s, t]]
        if not idx:
            continue
        n_seq += 1
        kl_s = sum(torch.clamp(torch.exp(ref[s, t] - lp[s, t]) - (ref[s, t] - lp[s, t]) - 1, -10, 10) for t in idx)
        tau = threshold * len(idx) if per_token else threshold
        excess = kl_s - tau
        c = torch.clamp(excess, min=0) if method == "hard" else torch.log1p(torch.exp(excess))
        total = total + c
        above += int(kl_s.item() > tau)
    return total / int(mask.sum()), above / n_seq


@pytest.mark.parametrize("method", ["hard", "soft"])
@pytest.mark.parametrize("per_token,threshold", [(True, 0.25), (False, 1.0), (True, 0.0), (False, 50.0)])
def test_kl_clipping_matches_formula(method, per_token, threshold):
    from verl_ext.trainer.actor_loss import ppo_loss

    data, flat, _, padded = fixture(seed=2)
    config = actor_config(use_kl_loss=True, kl_loss_coef=1.0, kl_loss_type="low_var_kl", kl_clip_method=method,
                          kl_clip_threshold=threshold, use_per_token_kl_threshold=per_token)  # fmt: skip
    zero_adv = data.clone()
    zero_adv["advantages"] = torch.zeros_like(zero_adv["advantages"])  # isolate the KL term
    loss, grad, metrics = run(ppo_loss, config, zero_adv, flat)

    mask = data["response_mask"].bool()
    expected, frac = oracle_clipped_kl(padded(flat), data["ref_log_prob"], mask, method, threshold, per_token)
    (expected_grad,) = torch.autograd.grad(expected, flat)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-10, abs=1e-14)
    assert torch.allclose(grad, expected_grad, rtol=1e-9, atol=1e-14)
    assert metric_value(metrics["actor/kl_clip/frac_above"]) == pytest.approx(frac)
    assert metric_value(metrics["kl_loss"]) == pytest.approx(expected.item(), rel=1e-10, abs=1e-14)
    # clipping changes the KL term (hard at threshold 0 is the one case it must not): without it this test fails
    unclipped, _ = oracle_clipped_kl(padded(flat), data["ref_log_prob"], mask, "hard", 0.0, per_token)
    if not (method == "hard" and threshold == 0.0):
        assert abs(expected.item() - unclipped.item()) > 1e-3, (expected.item(), unclipped.item())


def test_thresholds_actually_split_the_fixture():
    """Guard for the test above: the chosen thresholds put some sequences above and some below."""
    from verl_ext.trainer.actor_loss import ppo_loss

    data, flat, _, _ = fixture(seed=2)
    fracs = []
    for per_token, threshold in ((True, 0.25), (False, 1.0)):
        config = actor_config(use_kl_loss=True, kl_loss_type="low_var_kl", kl_clip_method="hard",
                              kl_clip_threshold=threshold, use_per_token_kl_threshold=per_token)  # fmt: skip
        fracs.append(metric_value(run(ppo_loss, config, data, flat)[2]["actor/kl_clip/frac_above"]))
    assert all(0.0 < f < 1.0 for f in fracs), fracs


def test_soft_clip_keeps_a_gradient_below_threshold_and_hard_does_not():
    from verl_ext.trainer.actor_loss import ppo_loss

    data, flat, _, _ = fixture(seed=2)
    data["advantages"] = torch.zeros_like(data["advantages"])
    kw = dict(use_kl_loss=True, kl_loss_type="low_var_kl", kl_clip_threshold=50.0)
    _, hard_grad, _ = run(ppo_loss, actor_config(kl_clip_method="hard", **kw), data, flat)
    _, soft_grad, _ = run(ppo_loss, actor_config(kl_clip_method="soft", **kw), data, flat)
    assert hard_grad.abs().max().item() == 0.0
    assert soft_grad.abs().max().item() > 0.0  # sigmoid(KL_s - 50) is tiny but not zero in float64


def test_empty_micro_batch_gives_finite_zero_clipped_kl():
    from verl_ext.losses.kl_clip import clipped_kl_matrix

    kld = torch.rand(3, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.zeros(3, 4, dtype=torch.bool)
    matrix, metrics = clipped_kl_matrix(kld, mask, "soft", 0.1, True)
    assert matrix.abs().sum().item() == 0.0 and math.isfinite(metrics["actor/kl_clip/frac_above"].item())


# ------------------------------------------------------------------------------------------------------
# configuration and extra inputs
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,key",
    [
        ({"kl_clip_method": "clamp"}, "kl_clip_method"),
        ({"kl_clip_threshold": -0.1}, "kl_clip_threshold"),
        ({"kl_clip_threshold": "big"}, "kl_clip_threshold"),
        ({"use_per_token_kl_threshold": "yes"}, "use_per_token_kl_threshold"),
    ],
)
def test_bad_kl_clip_values_name_the_key(kwargs, key):
    from verl_ext.config import ConfigError

    with pytest.raises(ConfigError, match=rf"actor_rollout_ref\.actor\.{key}: .*allowed") as err:
        actor_config(**kwargs)
    assert err.value.key == f"actor_rollout_ref.actor.{key}"


def test_per_token_threshold_is_the_default():
    assert actor_config().use_per_token_kl_threshold is True


def test_batch_scope_cov_loss_needs_cov_selected_and_micro_scope_does_not():
    from verl_ext.trainer.actor_loss import ppo_loss

    data, flat, _, _ = fixture()
    with pytest.raises(ValueError, match="cov_selected.*cov_scope=micro"):
        run(ppo_loss, actor_config("clip_cov", {"clip_cov_ratio": 0.5}), data, flat)
    loss, _, metrics = run(ppo_loss, actor_config("clip_cov", {"clip_cov_ratio": 0.5, "cov_scope": "micro"}), data, flat)
    assert math.isfinite(loss.item()) and "actor/clip_cov/selected_frac" in metrics


def test_batch_scope_selection_is_what_the_loss_uses():
    """The loss applies the batch's ``cov_selected`` as given. Clip-Cov with nothing selected equals vanilla PPO
    (value and gradient); with everything selected every token is detached: the same value, a zero gradient. KL-Cov's
    selected fraction follows the given mask exactly."""
    from verl_ext.trainer.actor_loss import ppo_loss

    data, flat, _, _ = fixture()
    mask = data["response_mask"].bool()
    clip_cov = actor_config("clip_cov", {"clip_cov_ratio": 0.5})
    # verl's vanilla with its dual clip out of reach: PPO's clipped objective, which Clip-Cov builds on
    vanilla_loss, vanilla_grad, _ = run(ppo_loss, actor_config("vanilla", clip_ratio_c=1e9), data, flat)
    assert vanilla_grad.abs().sum() > 0
    data["cov_selected"] = torch.zeros_like(mask)
    loss, grad, _ = run(ppo_loss, clip_cov, data, flat)
    torch.testing.assert_close(loss, vanilla_loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grad, vanilla_grad, rtol=1e-12, atol=1e-14)
    data["cov_selected"] = mask.clone()
    loss, grad, _ = run(ppo_loss, clip_cov, data, flat)
    torch.testing.assert_close(loss, vanilla_loss, rtol=1e-12, atol=1e-14)
    assert torch.count_nonzero(grad) == 0

    half = mask.clone()
    half[:2] = False
    data["cov_selected"] = half
    _, _, metrics = run(ppo_loss, actor_config("kl_cov", {"kl_cov_ratio": 0.5}), data, flat)
    expected = half.sum().item() / mask.sum().item()
    assert metric_value(metrics["actor/kl_cov/selected_frac"]) == pytest.approx(expected)


def test_erc_gets_old_entropy_from_the_batch_and_fails_without_it():
    from verl_ext.trainer.actor_loss import ppo_loss

    data, flat, entropy, padded = fixture()
    config = actor_config("grpo_erc", {"entropy_mask_low": 0.8, "entropy_mask_high": 1.2})
    _, _, metrics = run(ppo_loss, config, data, flat, entropy)
    mask = data["response_mask"].bool()
    ratio = padded(entropy) / data["old_entropy"]
    kept = ((ratio > 0.8) & (ratio < 1.2) & mask).sum().item() / mask.sum().item()
    assert 0.0 < kept < 1.0
    assert metric_value(metrics["actor/erc/kept_frac"]) == pytest.approx(kept)
    del data["old_entropy"]
    with pytest.raises(ValueError, match="old_entropy"):
        run(ppo_loss, actor_config("grpo_erc"), data, flat, entropy)


# ------------------------------------------------------------------------------------------------------
# metrics under dynamic batch size: micro-batches of unequal size
# ------------------------------------------------------------------------------------------------------


def _micro_batch(lengths, old_entropy, n_ranks_tokens):
    """A micro-batch of responses of the given ``lengths`` with the given per-token old entropies (the current
    entropy is 1.0 on every position), ``batch_num_tokens`` = the whole mini-batch's tokens over all ranks."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    max_r = max(lengths)
    fields = {"advantages": torch.ones(len(lengths), max_r, dtype=torch.float64),
              "old_log_probs": torch.full((len(lengths), max_r), -1.0, dtype=torch.float64),
              "old_entropy": torch.ones(len(lengths), max_r, dtype=torch.float64)}  # fmt: skip
    for i, values in enumerate(old_entropy):
        fields["old_entropy"][i, : len(values)] = torch.tensor(values, dtype=torch.float64)
    data = left_right_2_no_padding(make_batch([[5, 6]] * len(lengths), [[7] * n for n in lengths], response_fields=fields))
    total, dp = n_ranks_tokens
    tu.assign_non_tensor(data, dp_size=dp, batch_num_tokens=total, global_batch_size=None)
    flat = torch.full((int(data["input_ids"].values().shape[0]),), -1.0, dtype=torch.float64, requires_grad=True)
    entropy = torch.ones(flat.shape, dtype=torch.float64)
    return data, flat, entropy


def test_erc_fractions_are_token_weighted_across_uneven_micro_batches_and_ranks():
    """Two ranks, two micro-batches each, of 2, 13, 5 and 9 tokens (what dynamic batch size packs): the step's
    ``kept_frac`` / ``below_frac`` / ``above_frac`` / ``entropy_ratio_mean``, reduced as verl reduces them
    (``Metric.aggregate_dp``), are the fractions over all 29 tokens, from an oracle over the tokens."""
    from verl.utils.metric import Metric

    from verl_ext.trainer.actor_loss import ppo_loss

    gen = torch.Generator().manual_seed(3)
    # per rank, per micro-batch: response lengths
    layout = [[[2], [6, 7]], [[5], [4, 5]]]
    old = [[[list((torch.rand(n, generator=gen, dtype=torch.float64) * 0.9 + 0.6).tolist()) for n in micro]
            for micro in rank] for rank in layout]  # fmt: skip
    total = sum(n for rank in layout for micro in rank for n in micro)
    config = actor_config("grpo_erc", {"entropy_mask_low": 0.8, "entropy_mask_high": 1.2})
    per_rank: list[dict[str, Metric]] = []
    plain: dict[str, list[float]] = {}
    for rank, rank_old in zip(layout, old):
        collected: dict[str, Metric] = {}
        for micro, micro_old in zip(rank, rank_old):
            data, flat, entropy = _micro_batch(micro, micro_old, (total, len(layout)))
            _, metrics = ppo_loss(config, {"log_probs": flat, "entropy": entropy}, data)
            for key, metric in metrics.items():
                if key.startswith("actor/erc/"):
                    collected.setdefault(key, metric.init_list()).extend(metric)
                    n = sum(micro)
                    plain.setdefault(key, []).append(metric_value(metric) * (total / n / len(layout)))
        per_rank.append(collected)
    reduced = {key: Metric.aggregate_dp([rank[key] for rank in per_rank]) for key in per_rank[0]}

    rho = [(1.0 + 1e-8) / (h + 1e-8) for rank in old for micro in rank for seq in micro for h in seq]
    assert len(rho) == total
    oracle = {
        "actor/erc/kept_frac": sum(0.8 < r < 1.2 for r in rho) / total,
        "actor/erc/below_frac": sum(r <= 0.8 for r in rho) / total,
        "actor/erc/above_frac": sum(r >= 1.2 for r in rho) / total,
        "actor/erc/entropy_ratio_mean": sum(rho) / total,
    }
    assert 0 < oracle["actor/erc/kept_frac"] < 1 and oracle["actor/erc/below_frac"] > 0 and oracle["actor/erc/above_frac"] > 0
    for key, expected in oracle.items():
        assert reduced[key] == pytest.approx(expected, rel=1e-6), key
    # the plain mean of the micro-batches' own fractions (what a MEAN aggregation would log) is not it
    kept_plain = sum(plain["actor/erc/kept_frac"]) / len(plain["actor/erc/kept_frac"])
    assert abs(kept_plain - oracle["actor/erc/kept_frac"]) > 1e-3


# ------------------------------------------------------------------------------------------------------
# the entropy control's loss-side actuators against their formulas
# ------------------------------------------------------------------------------------------------------


def run_both(loss_fn, config, data, flat, entropy):
    """Loss and its gradients w.r.t. the flat log-probs and the flat entropy (both leaves here)."""
    flat = flat.detach().clone().requires_grad_(True)
    entropy = entropy.detach().clone().requires_grad_(True)
    loss, metrics = loss_fn(config, {"log_probs": flat, "entropy": entropy}, data.clone())
    grad_lp, grad_h = torch.autograd.grad(loss, (flat, entropy))
    return loss.detach(), grad_lp, grad_h, metrics


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("coef", [2.0**-7, 0.125])  # exact in float32, the field's dtype
def test_entropy_coef_field_equals_verls_entropy_coeff(agg, coef):
    """verl_ext's loss with the batch field ``entropy_coef`` = c on every token (actor ``entropy_coeff`` 0, as the
    entropy control requires) is verl's own ``ppo_loss`` with ``entropy_coeff`` = c and no field: value and gradients
    w.r.t. the log-probs and the entropy."""
    from verl.workers.utils.losses import ppo_loss as verl_ppo_loss

    from verl_ext.contract import ENTROPY_COEF
    from verl_ext.trainer.actor_loss import ppo_loss

    data, flat, entropy, _ = fixture(seed=4, extra={ENTROPY_COEF: torch.full((4, 6), coef, dtype=torch.float32)})
    plain = data.clone()
    del plain[ENTROPY_COEF]
    ours = run_both(ppo_loss, actor_config(loss_agg_mode=agg, entropy_coeff=0.0), data, flat, entropy)
    verls = run_both(verl_ppo_loss, actor_config(loss_agg_mode=agg, entropy_coeff=coef), plain, flat, entropy)
    for got, want in zip(ours[:3], verls[:3]):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)
    # the field acts: without the term the loss and the entropy gradient are those of coefficient 0
    without = run_both(ppo_loss, actor_config(loss_agg_mode=agg, entropy_coeff=0.0), plain, flat, entropy)
    assert abs(ours[0].item() - without[0].item()) > 1e-3 and without[2].abs().max().item() == 0.0
    assert metric_value(ours[3]["actor/entropy_control/entropy_term"]) == pytest.approx(
        (without[0] - ours[0]).item(), rel=1e-10)


def entropic_oracle(lp, old, adv, mask, alpha, by_high_prob):
    """EntroPIC's term from its formula, token-mean over one micro-batch that is the whole mini-batch: ``alpha *
    sum_{i in HP} (-r_i |A_i|)`` over the valid tokens with ``pi_i > 0.95`` (current policy), divided by the valid
    tokens ``N`` (``all_tokens``) or by ``|HP|`` (``high_prob``, EntroPIC's code); ``r_i = exp(lp_i - old_i)``."""
    valid = [(s, t) for s in range(lp.shape[0]) for t in range(lp.shape[1]) if mask[s, t]]
    high = [i for i in valid if float(lp[i]) > math.log(0.95)]
    total = sum(-torch.exp(lp[i] - old[i]) * abs(float(adv[i])) for i in high)
    return alpha * total / (len(high) if by_high_prob else len(valid)), len(high), len(valid)


@pytest.mark.parametrize("by_high_prob", [False, True])
@pytest.mark.parametrize("alpha", [-0.5, 0.375])  # exact in float32
def test_pos_weight_term_is_entropics_formula(alpha, by_high_prob):
    """The loss with ``pos_weight`` = alpha minus the loss with alpha = 0 (same batch otherwise) is EntroPIC's term:
    value and gradient w.r.t. the log-probs."""
    from verl_ext.contract import POS_WEIGHT, POS_WEIGHT_NORM
    from verl_ext.trainer.actor_loss import ppo_loss

    norm = torch.full((4, 6), float(by_high_prob), dtype=torch.float32)
    data, flat, entropy, padded = fixture(seed=5, extra={POS_WEIGHT: torch.zeros(4, 6), POS_WEIGHT_NORM: norm})
    where = padded(torch.arange(flat.numel(), dtype=torch.float64)).long()  # flat index of each response position
    flat = flat.detach().clone()
    for s, t, p in [(0, 0, 0.97), (0, 3, 0.99), (1, 1, 0.96), (3, 2, 0.999), (3, 5, 0.951), (2, 0, 0.9)]:
        flat[where[s, t]] = math.log(p)  # five high-probability tokens (pi > 0.95) and one just below
    config = actor_config(loss_agg_mode="token-mean")
    base = run_both(ppo_loss, config, data, flat, entropy)
    data[POS_WEIGHT] = torch.full((4, 6), alpha, dtype=torch.float32)
    with_term = run_both(ppo_loss, config, data, flat, entropy)

    mask = data["response_mask"].bool()
    leaf = flat.clone().requires_grad_(True)
    want, n_high, n_valid = entropic_oracle(padded(leaf), data["old_log_probs"], data["advantages"], mask, alpha,
                                            by_high_prob)  # fmt: skip
    (want_grad,) = torch.autograd.grad(want, leaf)
    assert n_high == 5 and n_valid == 16
    assert (with_term[0] - base[0]).item() == pytest.approx(want.item(), rel=1e-12, abs=1e-15)
    torch.testing.assert_close(with_term[1] - base[1], want_grad, rtol=1e-10, atol=1e-14)
    assert abs(want.item()) > 1e-2  # the term changes the loss: deleting it from the actor loss fails this test
    assert metric_value(with_term[3]["actor/entropic/term"]) == pytest.approx(want.item(), rel=1e-10)


@pytest.mark.parametrize(("actuator", "fields", "missing"),
                         [("entropy_coef", {}, "entropy_coef"), ("pos_weight", {}, "pos_weight"),
                          ("pos_weight", {"pos_weight": 0.5}, "pos_weight_norm")])  # fmt: skip
def test_a_loss_side_actuators_missing_field_is_an_error_when_entropy_control_drives_it(actuator, fields, missing):
    """The loss applies an actuator's term only when its batch field is there; with entropy control on that actuator
    (the actor keys interpolated from verl_ext.entropy_control), a batch without it is an error naming the field and
    the actuator instead of a term silently dropped. Off, or on cov_ratio, the same batch is fine."""
    from verl_ext.trainer.actor_loss import ppo_loss

    extra = {k: torch.full((4, 6), v, dtype=torch.float32) for k, v in fields.items()}
    data, flat, entropy, _ = fixture(seed=6, extra=extra)
    on = actor_config(entropy_control_enable=True, entropy_control_actuator=actuator)
    with pytest.raises(ValueError) as info:
        run_both(ppo_loss, on, data, flat, entropy)
    assert f"no {missing!r} field" in str(info.value) and f"actuator={actuator}" in str(info.value)
    for fine in (actor_config(entropy_control_enable=False, entropy_control_actuator=actuator),
                 actor_config(entropy_control_enable=True, entropy_control_actuator="cov_ratio")):  # fmt: skip
        run_both(ppo_loss, fine, data, flat, entropy)
    complete = {"entropy_coef": {"entropy_coef": 0.01}, "pos_weight": {"pos_weight": 0.5, "pos_weight_norm": 1.0}}
    data, flat, entropy, _ = fixture(seed=6, extra={k: torch.full((4, 6), v, dtype=torch.float32)
                                                    for k, v in complete[actuator].items()})  # fmt: skip
    run_both(ppo_loss, on, data, flat, entropy)


def test_the_actor_config_carries_the_entropy_controls_switch_and_actuator(compose):
    """configs/verl_ext_trainer.yaml copies verl_ext.entropy_control.enable / .actuator into the actor node, so that
    the loss in the worker knows which field to expect."""
    from verl.utils.config import omega_conf_to_dataclass

    on = compose("verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.target=0.3",
                 "verl_ext.entropy_control.actuator=entropy_coef",
                 "verl_ext.entropy_control.controller=skywork")  # fmt: skip
    actor = omega_conf_to_dataclass(on.actor_rollout_ref.actor)
    assert (actor.entropy_control_enable, actor.entropy_control_actuator) == (True, "entropy_coef")
    off = omega_conf_to_dataclass(compose().actor_rollout_ref.actor)
    assert off.entropy_control_enable is False
