"""BAPO's clip bounds decided once per optimiser step, the same for every micro-batch and every DP rank.

verl's ``TrainingWorker.train_batch`` runs one optimiser step over one mini-batch (its engine splits it into
micro-batches, runs forward and backward on each, then steps the optimiser). BAPO's bounds depend on the importance
ratios of the *current* policy over the whole mini-batch, and must be known before the first micro-batch's backward.
So, before that step, :func:`decide_step_bounds`:

1. runs the worker's ``infer_batch`` (no autograd) over the same mini-batch, with the loss function
   :class:`StatisticsAccumulator`, which adds each micro-batch's :func:`~verl_ext.losses.bapo.step_statistics` (sums) to an
   accumulator;
2. all-reduces the summed statistics over verl's data-parallel group (``engine.get_data_parallel_group()``);
3. runs :func:`~verl_ext.losses.bapo.decide_bounds` on the totals.

Sums make the statistics exact whatever the micro-batching (fixed or dynamic) and the number of ranks; the ratios
are those the update's forward computes at the first micro-batch (the parameters do not change within a step; the
eval-mode pass matches the train-mode one for models without dropout, as verl's old-log-prob pass assumes).
:class:`~verl_ext.trainer.actor_worker.EntropyAwareTrainingWorker` binds the result into its loss function
(``ppo_loss(..., bapo_bounds=...)``) for that step. Cost: one forward pass without autograd per optimiser step.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.workers.utils.padding import no_padding_2_padding

from verl_ext.config import policy_loss_params
from verl_ext.losses import needs_of
from verl_ext.losses.bapo import bound_grid, decide_bounds, step_statistics


def needs_step_bounds(actor_config: Any) -> bool:
    """Whether the loss's spec asks for a per-step pass (``bapo`` with ``bapo_scope=step``, the default)."""
    return actor_config is not None and needs_of(actor_config).step_pass


class StatisticsAccumulator:
    """The no-grad pass's loss function: adds each micro-batch's BAPO statistics to :attr:`total`; loss 0."""

    def __init__(self, actor_config: Any):
        self.actor_config = actor_config
        self.total: torch.Tensor | None = None

    def __call__(self, model_output: Any, data: TensorDict, dp_group: Any = None) -> tuple[torch.Tensor, dict]:
        log_prob = no_padding_2_padding(model_output["log_probs"], data)
        batch = data.select("response_mask", "old_log_probs", "advantages").to_padded_tensor()
        stats = step_statistics(self.actor_config, log_prob, batch["old_log_probs"], batch["advantages"],
                                batch["response_mask"])  # fmt: skip
        self.total = stats if self.total is None else self.total + stats
        return torch.zeros((), device=log_prob.device), {}


def reduce_and_decide(total: torch.Tensor | None, actor_config: Any, dp_group: Any = None) -> torch.Tensor:
    """All-reduce the summed statistics over ``dp_group`` (when torch.distributed is initialised) and decide the
    bounds: ``[c_low, c_high, rho]`` (float64, on the statistics' device). A rank with no micro-batch contributes
    zeros."""
    if total is None:  # on the device the collective runs on (NCCL needs CUDA tensors)
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    else:
        device = total.device
    c_lows, c_highs = bound_grid(actor_config, device)
    if total is None:
        total = torch.zeros(len(c_lows) + len(c_highs), dtype=torch.float64, device=device)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.SUM, group=dp_group)
    (rho0,) = policy_loss_params(actor_config, "bapo_rho0")
    return decide_bounds(total, c_lows, c_highs, rho0)


def decide_step_bounds(worker: Any, data: TensorDict, actor_config: Any) -> torch.Tensor:
    """The optimiser step's bounds over the mini-batch ``data`` (one rank's share): verl's own ``infer_batch`` of
    ``worker`` (eval mode, no autograd) with :class:`StatisticsAccumulator` as its loss function for that call, then an
    all-reduce over the engine's data-parallel group. The pass micro-batches the mini-batch as the update does (the
    update's micro-batch size or token budget, which divides it; the sums do not depend on it): ``infer_batch`` would
    otherwise take the log-prob pass's, sized for the whole batch, which a mini-batch of fixed micro-batches need not
    fill. ``data`` is left as the update expects it (the pass works on a shallow copy)."""
    accumulator = StatisticsAccumulator(actor_config)
    original = worker.loss_fn
    worker.loss_fn = accumulator
    probe = data.copy()
    engine = worker.engine_config
    tu.assign_non_tensor(probe, compute_loss=True,  # infer_batch runs self.loss_fn only then
                         use_dynamic_bsz=engine.use_dynamic_bsz, max_token_len_per_gpu=engine.max_token_len_per_gpu,
                         micro_batch_size_per_gpu=engine.micro_batch_size_per_gpu)  # fmt: skip
    try:
        worker.infer_batch(probe)
    finally:
        worker.loss_fn = original
    return reduce_and_decide(accumulator.total, actor_config, worker.engine.get_data_parallel_group())


__all__ = ["StatisticsAccumulator", "decide_step_bounds", "needs_step_bounds", "reduce_and_decide"]
