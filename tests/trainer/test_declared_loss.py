"""A loss declared only here reaches verl's registry, the dry run, the driver's batch pass and the actor loss's
inputs through its :class:`~verl_ext.losses.LossSpec` alone: adding a loss edits no verl_ext module.

The probe loss selects its tokens on the driver over the whole batch (as batch-scope Clip-Cov does, with its own
rule: the tokens of the largest advantage) and detaches them; it reuses ``clip_cov_ratio`` as its selection ratio.
"""

from __future__ import annotations

import io

import pytest
import torch
from tensordict import TensorDict

from verl_ext.contract import COV_SELECTED
from verl_ext.losses import SPECS, LossSpec, Needs, declare

NAME = "probe_top_advantage"


def probe_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
               rollout_is_weights=None, cov_selected=None):  # fmt: skip
    """``-A r`` per token, detached on ``cov_selected``, token mean."""
    assert cov_selected is not None, "the probe loss needs its batch field"
    loss = -advantages * torch.exp(log_prob - old_log_prob)
    loss = torch.where(cov_selected.bool(), loss.detach(), loss)
    mask = response_mask.bool()
    return (loss * mask).sum() / mask.sum(), {f"actor/{NAME}/selected_frac": (cov_selected & mask).float().mean()}


def top_advantage(cov, mask, key, config, step, ratio, metrics):
    """The ``max(1, floor(ratio N))`` valid tokens of the largest ``cov`` (ties: first), as a bool mask."""
    k = max(1, int(ratio * int(mask.sum())))
    flat = torch.where(mask, cov, torch.tensor(float("-inf"), dtype=cov.dtype)).flatten()
    out = torch.zeros_like(flat, dtype=torch.bool)
    out[torch.topk(flat, k).indices] = True
    return out.view_as(mask)


@pytest.fixture()
def probe():
    """The probe declared and registered for one test; gone from both registries after it."""
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    from verl_ext import registration

    spec = declare(LossSpec(name=NAME, loss=probe_loss, paper="a test's loss", keys=("clip_cov_ratio",),
                            needs=lambda policy_loss: Needs(batch_field=COV_SELECTED),
                            clip_high_refusal="a test's loss", selection_ratio="clip_cov_ratio",
                            batch_select=top_advantage, summary=lambda policy_loss: "probe     : declared in a test"))  # fmt: skip
    registration.register()
    yield spec
    SPECS.pop(NAME)
    POLICY_LOSS_REGISTRY.pop(NAME)


def batch(rows: int = 4, length: int = 5) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(rows, length, dtype=torch.bool)
    mask[0, 3:] = False
    return TensorDict({
        "advantages": torch.randn(rows, length, generator=g, dtype=torch.float64) * mask,
        "old_log_probs": -torch.rand(rows, length, generator=g, dtype=torch.float64),
        "response_mask": mask,
        "responses": torch.randint(0, 50, (rows, length), generator=g),
    }, batch_size=[rows])  # fmt: skip


def test_verl_resolves_the_declared_name_to_its_function(probe):
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    assert get_policy_loss_fn(NAME) is probe_loss


def test_the_dry_run_validates_and_summarises_it(probe, compose):
    from verl_ext.checks.dry_run import dry_run

    cfg = compose(f"actor_rollout_ref.actor.policy_loss.loss_mode={NAME}",
                  "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.25")  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    assert dry_run(cfg, out=out, err=err) == 0, err.getvalue()
    lines = out.getvalue().splitlines()
    assert f"  loss      : {NAME} clip_cov_ratio=0.25" in lines
    assert "  probe     : declared in a test" in lines
    assert any(line.startswith("  selection : batch scope") for line in lines), lines


def test_the_driver_computes_its_field_and_the_actor_loss_passes_it(probe, compose):
    """The driver's pass uses the probe's own rule on the batch's covariance (oracle written here), and the actor
    loss hands exactly that field to the loss; an undeclared field would not reach it."""
    from verl_ext.driver.mixin import VerlExtDriver
    from verl_ext.trainer.actor_loss import policy_loss_extras
    from verl_ext.trainer.hooks import update_fields

    cfg = compose(f"actor_rollout_ref.actor.policy_loss.loss_mode={NAME}",
                  "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.25")  # fmt: skip
    padded = batch()
    metrics: dict = {}
    fields = update_fields(padded, cfg.actor_rollout_ref.actor, VerlExtDriver(cfg), 1, 1, metrics)
    assert sorted(fields) == [COV_SELECTED]

    mask = padded["response_mask"]
    a, lp = padded["advantages"][mask], padded["old_log_probs"][mask]
    cov = torch.zeros(mask.shape, dtype=torch.float64)
    cov[mask] = (a - a.mean()) * (lp - lp.mean())  # the paper's token covariance over the whole batch
    n = int(mask.sum())
    chosen = sorted(torch.where(mask, cov, -torch.inf).flatten().argsort(descending=True)[: int(0.25 * n)].tolist())
    assert sorted(torch.nonzero(fields[COV_SELECTED].flatten()).flatten().tolist()) == chosen
    assert metrics[f"actor/{NAME}/batch_selected_frac"] == pytest.approx(len(chosen) / n)

    padded[COV_SELECTED] = fields[COV_SELECTED]
    extras = policy_loss_extras(cfg.actor_rollout_ref.actor, padded, torch.zeros(mask.shape))
    assert list(extras) == [COV_SELECTED] and torch.equal(extras[COV_SELECTED], fields[COV_SELECTED])
    with pytest.raises(ValueError, match=f"loss_mode={NAME} .* needs the batch field 'cov_selected'"):
        policy_loss_extras(cfg.actor_rollout_ref.actor, batch(), None)
