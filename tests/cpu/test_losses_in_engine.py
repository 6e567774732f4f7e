"""Each loss inside verl's real FSDP2 engine (in-process, CPU/gloo, one rank) against its paper's float64 oracle.

What differs between two recipes that share every trainer-side code path lives inside the loss call: ``gppo_erc``'s
gradient-preserving clip against ``grpo_erc``'s, ``entropy_adv``'s shaping with the update's entropy, KL-Cov's penalty
on the batch's selection, ``high_entropy``'s batch weights, the entropy control's loss-side actuators. Those are proven
here, once, where a launch of verl's trainer would prove them at ~100x the cost: verl's ``TrainingWorker`` runs
verl_ext's actor worker and loss on a tiny Qwen2 (:class:`benchmarks.cpu_actor.CpuActor`), two mini-batches of two
micro-batches, and a spy records every call of the policy loss with the inputs the engine gave it (the current
log-probs with their graph, the old ones, the advantages, the current and old entropies, the batch fields). The oracle,
written token by token from the paper's equation in float64 (tests/_oracles.py), recomputes each call's value and its
gradient with respect to the current log-probs from those inputs; verl normalises a micro-batch's token sum by the
mini-batch's token count (``global_batch_info``), as the oracle does. The batch is stale (old log-probs moved by noise:
ratios off 1, some clipped) and for ERC its old entropy too (ratios off the band: some tokens masked), so that every
branch of each formula is taken. The launches of verl's trainer (tests/e2e/) prove the paths outside the loss call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

import _oracles as O
from _cpu_marks import cpu_only
from tensordict import TensorDict

pytestmark = [cpu_only, pytest.mark.engine, pytest.mark.filterwarnings("ignore:.*engine is not available:UserWarning")]

EPS_LOW, EPS_HIGH, C = 0.2, 0.28, 3.0
"""The actor's clip range and DAPO's dual-clip constant in these runs (DAPO's values)."""
VOCAB = 142
"""The default tiny tokenizer's size (tests/cpu/test_engine_cpu.py checks it)."""


class LossSpy:
    """Wraps the policy loss ``verl_ext.trainer.actor_loss`` looks up: records each call's inputs (float64 copies),
    its value and the gradient of its value with respect to the current log-probs (taken while the graph lives)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def spy(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights=None,
                **extras):  # fmt: skip
            loss, metrics = fn(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages,
                               response_mask=response_mask, loss_agg_mode=loss_agg_mode, config=config,
                               rollout_is_weights=rollout_is_weights, **extras)  # fmt: skip
            (grad,) = torch.autograd.grad(loss, log_prob, retain_graph=True, allow_unused=True)
            info = config.global_batch_info
            self.calls.append({
                "lp": log_prob.detach().double(), "old": old_log_prob.detach().double(),
                "adv": advantages.detach().double(), "mask": response_mask.detach().bool(),
                "extras": {k: v.detach().double() if v.is_floating_point() else v.detach() for k, v in extras.items()
                           if isinstance(v, torch.Tensor)},
                "scale": float(info["dp_size"]) / float(info["batch_num_tokens"]),
                "value": float(loss.detach()), "grad": torch.zeros_like(log_prob).double() if grad is None else grad.double(),
                "metrics": {k: float(v) for k, v in metrics.items() if isinstance(v, torch.Tensor) and v.numel() == 1},
                "config": config,
            })  # fmt: skip
            return loss, metrics

        return spy


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> LossSpy:
    from verl_ext.trainer import actor_loss

    recorder, lookup = LossSpy(), actor_loss.get_policy_loss_fn
    monkeypatch.setattr(actor_loss, "get_policy_loss_fn", lambda name: recorder.wrap(lookup(name)))
    return recorder


def actor(tiny_model_dir: str, loss_mode: str, loss_kwargs: dict | None = None, **overrides: Any):
    """verl's engine with verl_ext's worker and actor loss: mini-batches of 4 rows, micro-batches of 2, lr 1e-2."""
    from verl.workers.config import FSDPOptimizerConfig

    from verl_ext.config import PolicyLossConfig
    from benchmarks.cpu_actor import CpuActor
    from verl_ext.trainer import actor_loss
    from verl_ext.trainer.actor_config import FSDPActorConfig
    from verl_ext.trainer.actor_worker import EntropyAwareTrainingWorker

    kwargs: dict[str, Any] = dict(strategy="fsdp2", rollout_n=1, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2,
                                  optim=FSDPOptimizerConfig(lr=1e-2, weight_decay=0.0), clip_ratio_low=EPS_LOW,
                                  clip_ratio_high=EPS_HIGH, clip_ratio_c=C,
                                  policy_loss=PolicyLossConfig(loss_mode=loss_mode, **(loss_kwargs or {})))  # fmt: skip
    kwargs.update(overrides)
    return CpuActor(tiny_model_dir, FSDPActorConfig(**kwargs), loss_fn=actor_loss.ppo_loss,
                    worker_cls=EntropyAwareTrainingWorker)  # fmt: skip


def stale_batch(cpu_actor, seed: int = 3) -> TensorDict:
    """A random batch of 8 rows with the actor's own old log-probs and entropy, made stale: old log-probs moved by
    noise (ratios e^{+-0.4}: some outside the clip range), old entropy scaled by 1 +- 0.15 (ratios H / H_old off ERC's
    band for some tokens), advantages shifted so that both signs occur."""
    from benchmarks.cpu_actor import random_batch

    batch = random_batch(8, VOCAB, seed=seed)
    old = cpu_actor.compute_log_prob(batch, calculate_entropy=True)
    g = torch.Generator().manual_seed(seed + 1)
    mask = batch["response_mask"]
    batch["old_log_probs"] = (old["log_probs"] + 0.4 * torch.randn(mask.shape, generator=g)) * mask
    batch["old_entropy"] = old["entropy"] * (1 + 0.15 * torch.randn(mask.shape, generator=g)).clamp(min=0.1)
    batch["advantages"] = (batch["advantages"] - 0.2) * mask
    return batch


def check_calls(spy: LossSpy, per_token: Callable[[dict, tuple[int, int], torch.Tensor], torch.Tensor]) -> None:
    """Every recorded call: value and gradient equal ``sum_t per_token(call, t, lp[t]) * dp / N_minibatch``."""
    assert len(spy.calls) == 4, f"2 mini-batches x 2 micro-batches, got {len(spy.calls)} calls"
    for index, call in enumerate(spy.calls):
        lp = call["lp"].clone().requires_grad_(True)
        terms = [per_token(call, t, lp[t]) for t in O.valid_tokens(call["mask"])]
        want = sum(terms) * call["scale"] if terms else lp.sum() * 0.0
        (want_grad,) = torch.autograd.grad(want, lp, allow_unused=True)
        want_grad = torch.zeros_like(lp) if want_grad is None else want_grad
        assert call["value"] == pytest.approx(float(want.detach()), rel=2e-5, abs=1e-7), f"call {index}"
        torch.testing.assert_close(call["grad"], want_grad, rtol=2e-5, atol=1e-7, msg=f"call {index}")


def tokens(spy: LossSpy, where: Callable[[dict, tuple[int, int]], bool]) -> int:
    """How many valid tokens of all calls satisfy ``where``."""
    return sum(where(call, t) for call in spy.calls for t in O.valid_tokens(call["mask"]))


def ratio(call: dict, t: tuple[int, int]) -> float:
    return math.exp(float(call["lp"][t]) - float(call["old"][t]))


def kept(call: dict, t: tuple[int, int], low: float = 0.8, high: float = 1.2) -> bool:
    """ERC keeps the token (the update's entropy against the old one, inside the band)."""
    return O.erc_kept(float(call["extras"]["entropy"][t]), float(call["extras"]["old_entropy"][t]), low, high)


# ----------------------------------------------------------------------------------------------------------
# ERC: grpo_erc's dual clip and gppo_erc's gradient-preserving clip, each masked by H / H_old
# ----------------------------------------------------------------------------------------------------------


@cpu_only
@pytest.mark.parametrize("loss_mode", ["grpo_erc", "gppo_erc"])
def test_erc_losses_in_the_engine_are_their_papers_formulas(tiny_model_dir, spy, loss_mode):
    """The update's entropy (computed graph-free by verl_ext's worker) and the batch's old entropy reach the loss; a
    token outside the band (0.8, 1.2) keeps its value and loses its gradient. ``grpo_erc``: DAPO's dual clip, so a
    clipped token carries no gradient; ``gppo_erc`` (beta1 = 0.75, beta2 = 1): CE-GPPO's clip keeps a gradient of
    -beta (1 +- eps) A on it - the difference between the two recipes, token by token."""
    beta1, beta2 = 0.75, 1.0
    cpu_actor = actor(tiny_model_dir, loss_mode)
    cpu_actor.update(stale_batch(cpu_actor))

    def per_token(call, t, lp):
        a, old = float(call["adv"][t]), call["old"][t]
        if loss_mode == "grpo_erc":
            term = O.dual_clip_token(lp, old, a, EPS_LOW, EPS_HIGH, C)
        else:
            term = O.gppo_token(lp, old, a, EPS_LOW, EPS_HIGH, beta1, beta2, C)
        return term if kept(call, t) else term.detach()

    check_calls(spy, per_token)
    assert 0 < tokens(spy, lambda call, t: not kept(call, t)) < tokens(spy, lambda call, t: True)  # some masked, not all
    clipped_kept = lambda call, t: kept(call, t) and float(call["adv"][t]) > 0 and ratio(call, t) > 1 + EPS_HIGH  # noqa: E731
    assert tokens(spy, clipped_kept) >= 2, "the fixture must clip some kept tokens with A > 0"
    moved = tokens(spy, lambda call, t: clipped_kept(call, t) and float(call["grad"][t]) != 0.0)
    assert moved == (tokens(spy, clipped_kept) if loss_mode == "gppo_erc" else 0)


# ----------------------------------------------------------------------------------------------------------
# entropy_adv: A + min(alpha sg[H], |A| / kappa) with the update forward's entropy
# ----------------------------------------------------------------------------------------------------------


@cpu_only
def test_entropy_adv_shapes_the_advantages_with_the_update_entropy_in_the_engine(tiny_model_dir, spy):
    """psi = min(alpha H, |A| / kappa) with H the update forward's entropy (verl_ext's worker turns it on for this
    loss), without gradient, on DAPO's dual-clip loss; the logged mean psi is the oracle's and is capped for some
    tokens, not all. alpha = 0.05 (the paper's 0.4 with kappa 2): the random tiny model's entropy is ~4.9 nats (near
    uniform over its 142 tokens), at which 0.4 H would cap every token."""
    alpha, kappa = 0.05, 2.0
    cpu_actor = actor(tiny_model_dir, "entropy_adv", {"entropy_adv_alpha": alpha, "entropy_adv_kappa": kappa})
    cpu_actor.update(stale_batch(cpu_actor))

    def shaped(call, t):
        a = float(call["adv"][t])
        return a + min(alpha * float(call["extras"]["entropy"][t]), abs(a) / kappa)

    check_calls(spy, lambda call, t, lp: O.dual_clip_token(lp, call["old"][t], shaped(call, t), EPS_LOW, EPS_HIGH, C))
    for call in spy.calls:
        psi = [shaped(call, t) - float(call["adv"][t]) for t in O.valid_tokens(call["mask"])]
        assert call["metrics"]["actor/entropy_adv/shaping_mean"] == pytest.approx(sum(psi) / len(psi), rel=1e-5)
    capped = lambda call, t: alpha * float(call["extras"]["entropy"][t]) > abs(float(call["adv"][t])) / kappa  # noqa: E731
    assert 0 < tokens(spy, capped) < tokens(spy, lambda call, t: True)


# ----------------------------------------------------------------------------------------------------------
# KL-Cov and high_entropy: the driver's batch-scope selection, then the loss on it
# ----------------------------------------------------------------------------------------------------------


def by_old_log_prob(batch: TensorDict) -> dict[float, tuple[int, int]]:
    """The batch's valid tokens by their old log-prob (distinct: noise was added), to find a micro-batch's token in
    the batch it came from."""
    ids = {float(batch["old_log_probs"][t]): t for t in O.valid_tokens(batch["response_mask"].bool())}
    assert len(ids) == int(batch["response_mask"].sum())
    return ids


@cpu_only
def test_kl_cov_penalises_the_batchs_selection_in_the_engine(tiny_model_dir, spy):
    """The driver selects over the whole batch (verl_ext.losses.selection, as the trainer's hook does): the top
    max(1, floor(0.1 N)) tokens by cov = (A - mean A)(log pi_old - mean log pi_old) over the batch's N tokens (the
    oracle's ranking); in the engine each micro-batch's loss is -A r on every token plus coef |log r| on those (coef
    1, the papers')."""
    from verl_ext.losses.selection import select_tokens_for_batch

    coef = 1.0
    cpu_actor = actor(tiny_model_dir, "kl_cov", {"kl_cov_ratio": 0.1, "ppo_kl_coef": coef})
    batch = stale_batch(cpu_actor)
    mask = batch["response_mask"].bool()
    covs = O.covariances(batch["advantages"].double(), batch["old_log_probs"].double(), mask)
    chosen = set(sorted(covs, key=lambda t: -covs[t])[: O.budget(0.1, len(covs))])
    batch["cov_selected"] = select_tokens_for_batch("kl_cov", batch["advantages"], batch["old_log_probs"], mask,
                                                    cpu_actor.actor_config)  # fmt: skip
    assert set(O.valid_tokens(batch["cov_selected"].bool())) == chosen
    ids = by_old_log_prob(batch)
    cpu_actor.update(batch)

    def per_token(call, t, lp):
        r = torch.exp(lp - call["old"][t])
        penalty = coef * torch.abs(lp - call["old"][t]) if ids[float(call["old"][t])] in chosen else 0.0
        return -float(call["adv"][t]) * r + penalty

    check_calls(spy, per_token)
    assert tokens(spy, lambda call, t: ids[float(call["old"][t])] in chosen) == len(chosen) >= 2


@cpu_only
def test_high_entropy_trains_on_the_batchs_top_tokens_in_the_engine(tiny_model_dir, spy):
    """Batch scope: the top max(1, ceil(0.2 N)) of the batch's N tokens by the old pass's entropy (the oracle's
    ranking), each weighted N / |S|, on DAPO's dual-clip loss; every other token carries nothing. The driver's
    weights (verl_ext.losses.high_entropy, as the trainer's hook computes them) reach the engine."""
    from verl_ext.losses.high_entropy import high_entropy_weights

    rho = 0.2
    cpu_actor = actor(tiny_model_dir, "high_entropy", {"high_entropy_ratio": rho})
    batch = stale_batch(cpu_actor)
    mask = batch["response_mask"].bool()
    valid = O.valid_tokens(mask)
    chosen = set(sorted(valid, key=lambda t: -float(batch["old_entropy"][t]))[: max(1, math.ceil(rho * len(valid)))])
    weight = len(valid) / len(chosen)
    batch["high_entropy_weight"], _ = high_entropy_weights(batch["old_entropy"], mask, rho, batch["responses"])
    ids = by_old_log_prob(batch)
    cpu_actor.update(batch)

    def per_token(call, t, lp):
        term = O.dual_clip_token(lp, call["old"][t], float(call["adv"][t]), EPS_LOW, EPS_HIGH, C)
        return term * weight if ids[float(call["old"][t])] in chosen else term * 0.0

    check_calls(spy, per_token)
    assert tokens(spy, lambda call, t: ids[float(call["old"][t])] in chosen) == len(chosen) >= 2
