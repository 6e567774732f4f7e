"""Batch-scope covariance selection does not depend on micro-batching or the number of DP ranks.

A tiny linear "policy" produces the log-probs (``lp = features @ w``), so that gradients w.r.t. a shared
parameter can be accumulated over micro-batches and averaged over gloo DP ranks exactly as FSDP does.
The losses see only their micro-batch and verl's global batch info (global token count, dp size).
"""

from __future__ import annotations

import math
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import _oracles as O
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
from verl_ext.config import PolicyLossConfig
from verl_ext.losses.selection import select_tokens_for_batch, token_hash

B, T, D = 16, 24, 5


def make_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    w0 = torch.randn(D, generator=g, dtype=torch.float64) * 0.3
    old = -torch.nn.functional.softplus(feats @ w0) - 0.05
    adv = torch.randn(B, 1, generator=g, dtype=torch.float64).expand(B, T).contiguous()
    lengths = torch.randint(3, T + 1, (B,), generator=g)
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    w = w0 + 0.05 * torch.randn(D, generator=g, dtype=torch.float64)  # a later mini-batch: lp != old
    return feats, w0, w, old, adv, mask


def config(loss: str, scope: str, **overrides):
    values = dict(loss_mode=loss, cov_scope=scope, clip_cov_ratio=0.05, clip_cov_lb=-1.0, clip_cov_ub=1.0,
                  kl_cov_ratio=0.05, ppo_kl_coef=1.0, cov_seed=3)  # fmt: skip
    pl = PolicyLossConfig(**{**values, **overrides})
    return O.actor_config(pl, 0.2, 0.2)


def accumulate(loss, scope, rows, w, feats, w0, old, adv, mask, selected, n_micro, dp_size, n_tokens):
    """Sum of the micro-batch losses' gradients w.r.t. w over ``rows`` (one rank's share)."""
    cfg = config(loss, scope)
    cfg.global_batch_info = {"dp_size": dp_size, "batch_num_tokens": n_tokens, "global_batch_size": None}
    w = w.clone().requires_grad_(True)
    for chunk in torch.tensor_split(rows, n_micro):
        lp = -torch.nn.functional.softplus(feats[chunk] @ w) - 0.05
        extra = {} if selected is None else {"cov_selected": selected[chunk]}
        value, _ = POLICY_LOSS_REGISTRY[loss](old[chunk], lp, adv[chunk], mask[chunk], "token-mean", cfg, None, **extra)
        value.backward()
    return w.grad


def batch_selection(loss, old, adv, mask):
    return select_tokens_for_batch(loss, adv, old, mask, config(loss, "batch"), step=0)


@pytest.mark.parametrize("loss", ["clip_cov", "kl_cov"])
def test_batch_scope_same_gradient_for_1_2_8_micro_batches(loss):
    feats, w0, w, old, adv, mask = make_batch()
    selected = batch_selection(loss, old, adv, mask)
    n = int(mask.sum())
    assert int(selected.sum()) == max(1, math.floor(0.05 * n))
    rows = torch.arange(B)
    grads = [
        accumulate(loss, "batch", rows, w, feats, w0, old, adv, mask, selected, k, 1, n) for k in (1, 2, 8)
    ]
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grads[2], grads[0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss", ["clip_cov", "kl_cov"])
def test_micro_scope_depends_on_micro_batching(loss):
    """The reference behaviour (selection per micro-batch) changes the gradient: the bug batch scope fixes."""
    feats, w0, w, old, adv, mask = make_batch()
    rows, n = torch.arange(B), int(mask.sum())
    g1 = accumulate(loss, "micro", rows, w, feats, w0, old, adv, mask, None, 1, 1, n)
    g8 = accumulate(loss, "micro", rows, w, feats, w0, old, adv, mask, None, 8, 1, n)
    assert (g1 - g8).abs().max() > 1e-6


def test_batch_selection_follows_the_paper_over_the_whole_batch():
    """KL-Cov batch selection = top-k covariance over all valid tokens of the batch, with old log-probs."""
    _, _, _, old, adv, mask = make_batch(seed=1)
    selected = batch_selection("kl_cov", old, adv, mask)
    covs = O.covariances(adv, old, mask)
    k = O.budget(0.05, len(covs))
    want = set(sorted(covs, key=lambda t: -covs[t])[:k])
    assert {t for t in O.valid_tokens(mask) if bool(selected[t])} == want
    assert not bool((selected & ~mask).any())


@pytest.mark.parametrize(("ratio", "lb", "ub"), [(0.05, 0.1, 1.0), (0.5, 0.3, 1.0), (0.05, 50.0, 60.0)])
def test_batch_clip_cov_takes_min_of_budget_and_candidates_and_reports_both(ratio, lb, ub):
    """Clip-Cov over the batch draws min(k, |C|) tokens from C = {lb < cov < ub} (the paper's covariances, from the
    oracle) and reports |C| / N as ``candidate_frac``: with more candidates than the budget it takes k of them, with
    fewer it takes all, with none nothing (the case the e2e checks tell apart from a selection that failed)."""
    _, _, _, old, adv, mask = make_batch(seed=4)
    cfg = config("clip_cov", "batch", clip_cov_ratio=ratio, clip_cov_lb=lb, clip_cov_ub=ub)
    metrics: dict = {}
    selected = select_tokens_for_batch("clip_cov", adv, old, mask, cfg, step=1, metrics=metrics)
    covs = O.covariances(adv, old, mask)
    candidates = {t for t, c in covs.items() if lb < c < ub}
    chosen = {t for t in O.valid_tokens(mask) if bool(selected[t])}
    assert chosen <= candidates and not bool((selected & ~mask).any())
    assert len(chosen) == min(O.budget(ratio, len(covs)), len(candidates))
    assert float(metrics["actor/clip_cov/candidate_frac"]) == pytest.approx(len(candidates) / len(covs))
    assert float(metrics["actor/clip_cov/selected_frac"]) == pytest.approx(len(chosen) / len(covs))
    if ratio == 0.05 and lb == 0.1:
        assert len(candidates) > len(chosen) > 0  # the budget binds
    elif ratio == 0.5:
        assert len(chosen) == len(candidates) > 0  # the candidates bind
    else:
        assert not candidates and not chosen


def test_batch_selection_changes_with_step_and_is_reproducible():
    _, _, _, old, adv, mask = make_batch(seed=2)
    cfg = config("clip_cov", "batch")
    a = select_tokens_for_batch("clip_cov", adv, old, mask, cfg, step=5)
    b = select_tokens_for_batch("clip_cov", adv, old, mask, cfg, step=5)
    c = select_tokens_for_batch("clip_cov", adv, old, mask, cfg, step=6)
    assert torch.equal(a, b) and not torch.equal(a, c)


def token_uniforms(seed: int, key: torch.Tensor) -> torch.Tensor:
    """The selection's hash as uniform numbers in [0, 1): what Clip-Cov's draw compares with its probability."""
    return token_hash(seed, key).to(torch.float64) / float(2**32)


def test_hash_uniforms_are_uniform_and_reproducible():
    key = torch.randn(64, 512, generator=torch.Generator().manual_seed(0))
    u = token_uniforms(11, key)
    assert torch.equal(u, token_uniforms(11, key))
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    hist = torch.histc(u.float(), bins=10, min=0.0, max=1.0) / u.numel()
    assert (hist - 0.1).abs().max() < 0.01
    assert abs(float(torch.corrcoef(torch.stack([u[:, :-1].flatten(), u[:, 1:].flatten()]))[0, 1])) < 0.02


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dp_worker(rank, world, port, losses, n_micro, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        feats, w0, w, old, adv, mask = make_batch()
        for loss in losses:
            selected = batch_selection(loss, old, adv, mask)  # the driver's selection, sent with the batch
            rows = torch.arange(B).tensor_split(world)[rank]
            grad = accumulate(loss, "batch", rows, w, feats, w0, old, adv, mask, selected, n_micro, world, int(mask.sum()))
            dist.all_reduce(grad)
            grad /= world  # FSDP / DDP average gradients over ranks
            if rank == 0:
                torch.save(grad, f"{out}.{loss}")
    finally:
        dist.destroy_process_group()


def test_batch_scope_same_gradient_on_two_gloo_ranks(tmp_path):
    """Both batch-scope losses, each rank accumulating its half of the rows in 2 micro-batches, all-reduced: the
    gradient of one process over the whole batch (one pair of gloo processes runs both losses)."""
    losses = ("clip_cov", "kl_cov")
    out = tmp_path / "grad.pt"
    mp.spawn(_dp_worker, args=(2, _free_port(), losses, 2, str(out)), nprocs=2, join=True)
    feats, w0, w, old, adv, mask = make_batch()
    for loss in losses:
        selected = batch_selection(loss, old, adv, mask)
        single = accumulate(loss, "batch", torch.arange(B), w, feats, w0, old, adv, mask, selected, 1, 1, int(mask.sum()))
        torch.testing.assert_close(torch.load(f"{out}.{loss}"), single, rtol=1e-10, atol=1e-12, msg=lambda m: f"{loss}: {m}")


@pytest.mark.parametrize("loss", ["clip_cov", "kl_cov"])
def test_batch_selection_follows_the_rows_when_they_are_reordered(loss):
    """verl's V1 trainer orders a batch's rows as their rollouts finish, differently from run to run: the selection
    of a permuted batch is the permuted selection (Clip-Cov's draw keys on the row's content, not its index)."""
    _, _, _, old, adv, mask = make_batch(seed=4)
    cfg = config(loss, "batch")
    selected = select_tokens_for_batch(loss, adv, old, mask, cfg, step=3)
    assert 0 < int(selected.sum()) < int(mask.sum())
    for seed in range(3):
        perm = torch.randperm(old.shape[0], generator=torch.Generator().manual_seed(seed))
        again = select_tokens_for_batch(loss, adv[perm], old[perm], mask[perm], cfg, step=3)
        assert torch.equal(again, selected[perm]), seed


def test_clip_cov_draw_keyed_on_token_ids_ignores_the_old_log_probs_rounding():
    """The old-log-prob pass's low bits change with the number of GPUs and the micro-batching. Keyed on the response
    token ids (what verl_ext's trainers pass), Clip-Cov draws the same tokens from log-probs one float32 step apart
    (covariance bounds wide enough that every token is a candidate); keyed on the log-probs' bits it does not."""
    _, _, _, old, adv, mask = make_batch(seed=5)
    old = old.to(torch.float32)
    nudged = torch.nextafter(old, torch.zeros_like(old))
    tokens = torch.randint(5, 30_000, old.shape, generator=torch.Generator().manual_seed(1))
    cfg = config("clip_cov", "batch", clip_cov_ratio=0.2, clip_cov_lb=-1e9, clip_cov_ub=1e9)
    by_tokens = [select_tokens_for_batch("clip_cov", adv, lp, mask, cfg, step=2, key=tokens) for lp in (old, nudged)]
    assert torch.equal(*by_tokens)
    by_bits = [select_tokens_for_batch("clip_cov", adv, lp, mask, cfg, step=2) for lp in (old, nudged)]
    assert not torch.equal(*by_bits)
    with pytest.raises(ValueError, match="key shaped"):
        select_tokens_for_batch("clip_cov", adv, old, mask, cfg, step=2, key=tokens[:, :-1])
