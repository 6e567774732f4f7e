"""BAPO's step bounds over a real process group: two gloo ranks, each with its own share of the mini-batch.

Each rank runs what verl_ext's actor worker runs for an optimiser step: :class:`StatisticsAccumulator` (the no-grad
pass's loss function) on each of its micro-batches, laid out as verl's engine hands them over (flat log-probs of
every sequence, padded batch fields), then :func:`reduce_and_decide` over a gloo group. The ranks hold different
numbers of micro-batches, and in the second step one rank holds none (its total is ``None``). Every rank must decide
the bounds that BAPO's search (``_oracles.bapo_search``, float64, token by token) finds over all the tokens of all
ranks; the data are chosen so that each rank's tokens alone decide other bounds.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tensordict import TensorDict

import _oracles as O
from verl_ext.config import PolicyLossConfig
from verl_ext.trainer.bapo_step import StatisticsAccumulator, reduce_and_decide

WORLD = 2
R = 9
"""Response length (tokens) of the padded batch."""
INITIAL = (0.8, 1.2)
"""BAPO's initial bounds (``bapo_clip_low`` / ``bapo_clip_high``'s defaults): what a rank with no token decides."""


def config():
    return O.actor_config(PolicyLossConfig(loss_mode="bapo", bapo_scope="step"), 0.2, 0.28, 3.0)


def rows(seed: int, n: int, shift: float) -> tuple[torch.Tensor, ...]:
    """``n`` responses: old log-probs, current log-probs, advantages (per sequence, shifted by ``shift``), mask."""
    g = torch.Generator().manual_seed(seed)
    ratio = torch.exp(torch.randn(n, R, generator=g, dtype=torch.float64) * 0.4)
    adv = torch.randn(n, 1, generator=g, dtype=torch.float64).expand(n, R) + shift
    mask = torch.rand(n, R, generator=g) < 0.8
    mask[:, 0] = True
    old = -torch.rand(n, R, generator=g, dtype=torch.float64) - 0.1
    return old, old + ratio.log(), adv.contiguous(), mask


def mini_batch() -> tuple[torch.Tensor, ...]:
    """Rows 0-5 mostly positive (alone: c_low stops at 0.9), rows 6-10 mostly negative (alone: both bounds at their
    maxima); together c_low saturates and c_high stops on the way."""
    return tuple(torch.cat(pair) for pair in zip(rows(3, 6, 0.4), rows(103, 5, -0.6)))


STEPS = {
    "uneven": ([[0], [1, 2, 3], [4, 5]], [[6, 7, 8], [9, 10]]),
    "one_rank_empty": ([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9, 10]], []),
}
"""Each optimiser step's micro-batches (row indices) on rank 0 and rank 1."""


def oracle(selected: list[int]) -> tuple[float, float, float]:
    """BAPO's search over the tokens of rows ``selected`` (float64, token by token)."""
    old, lp, adv, mask = (t[selected] for t in mini_batch())
    return O.bapo_search(torch.exp(lp - old), adv, mask)


def engine_micro_batch(selected: list[int]) -> tuple[dict, TensorDict]:
    """Rows ``selected`` as verl's engine gives a loss function a micro-batch: the model's log-probs flat over every
    sequence (a one-token prompt, then the response; the log-prob of token t sits at position t - 1, NaN at each
    sequence's last position, which no response token reads), and the padded batch fields."""
    old, lp, adv, mask = (t[selected] for t in mini_batch())
    n = len(selected)
    nan = torch.tensor([float("nan")], dtype=torch.float64)
    flat = torch.cat([torch.cat([lp[i], nan]) for i in range(n)])
    fields = {"prompts": torch.ones(n, 1, dtype=torch.long), "responses": torch.ones(n, R, dtype=torch.long),
              "attention_mask": torch.ones(n, 1 + R, dtype=torch.long), "response_mask": mask.long(),
              "old_log_probs": old, "advantages": adv}  # fmt: skip
    data = TensorDict(fields, batch_size=[n])
    return {"log_probs": flat}, data


def _rank(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        group = dist.new_group(list(range(WORLD)))  # the engine's data-parallel group
        decided = {}
        for step, shares in STEPS.items():
            accumulator = StatisticsAccumulator(config())
            for selected in shares[rank]:
                accumulator(*engine_micro_batch(selected))
            decided[step] = reduce_and_decide(accumulator.total, config(), group).tolist()
        torch.save(decided, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_the_fixture_needs_every_ranks_tokens():
    """Each rank's tokens alone decide other bounds than all of them (so a rank that skipped the all-reduce would
    be caught); a rank without tokens decides the initial bounds, which all the tokens do not."""
    everything = oracle(list(range(11)))
    for step, shares in STEPS.items():
        assert sorted(r for share in shares for micro in share for r in micro) == list(range(11)), step
    for share in STEPS["uneven"]:
        alone = oracle([r for micro in share for r in micro])
        assert alone[:2] != pytest.approx(everything[:2]), (share, alone, everything)
    assert everything[:2] != pytest.approx(INITIAL)


def test_every_rank_decides_the_bounds_of_all_ranks_tokens(tmp_path):
    mp.spawn(_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    want = oracle(list(range(11)))
    wrong = []
    for rank in range(WORLD):
        decided = torch.load(tmp_path / f"rank{rank}.pt")
        for step in STEPS:
            c_low, c_high, share = decided[step]
            if (c_low, c_high) != pytest.approx(want[:2], abs=1e-12) or share != pytest.approx(want[2], rel=1e-12):
                wrong.append(f"rank {rank}, step {step}: {decided[step]}")
    assert not wrong, f"bounds of all tokens: {want}; decided: " + "; ".join(wrong)
