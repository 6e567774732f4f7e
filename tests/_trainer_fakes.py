"""The trainer tests' shared pieces: a cluster command line, and verl's legacy trainer without Ray: a padded batch as ``fit()`` holds it and a fake actor worker group that records
what the update receives. Shared by ``tests/trainer``; ``tests`` is on ``sys.path`` (``tests/conftest.py``)."""

from __future__ import annotations

import torch

CLUSTER = [
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
    "actor_rollout_ref.rollout.name=vllm",
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=64",
    "actor_rollout_ref.rollout.n=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
    "trainer.nnodes=2",
    "trainer.n_gpus_per_node=8",
]
"""A realistic cluster command line (the model path is a hub id: the dry run never loads it)."""

PROMPT_LENS, RESPONSE_LENS, P, R = [3, 4, 2, 4], [5, 2, 4, 3], 4, 5


def legacy_batch(seed: int = 0, old_log_probs: bool = True):
    """A left/right padded 4-row batch as the legacy trainer holds it after computing advantages (or,
    with ``old_log_probs=False``, before the old-log-prob pass)."""
    from verl import DataProto

    g = torch.Generator().manual_seed(seed)
    b = len(PROMPT_LENS)
    attention = torch.zeros(b, P + R, dtype=torch.int64)
    response_mask = torch.zeros(b, R, dtype=torch.int64)
    for i, (p, r) in enumerate(zip(PROMPT_LENS, RESPONSE_LENS)):
        attention[i, P - p : P + r] = 1
        response_mask[i, :r] = 1
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    input_ids = torch.randint(5, 100, (b, P + R), generator=g) * attention
    fields = {
        "input_ids": input_ids, "attention_mask": attention, "position_ids": position_ids,
        "prompts": input_ids[:, :P], "responses": input_ids[:, P:], "response_mask": response_mask,
        "advantages": torch.randn(b, R, generator=g) * response_mask,
        "old_log_probs": -torch.rand(b, R, generator=g) * 3 * response_mask,
        "row_id": torch.arange(b),
    }  # fmt: skip
    if not old_log_probs:
        del fields["old_log_probs"]
    return DataProto.from_dict(fields)


class FakeLegacyWorkerGroup:
    """Stands in for the actor worker group: per-token outputs of the unpadded sequences, and a record of
    what ``update_actor`` received."""

    def __init__(self):
        self.updates = []

    def compute_log_prob(self, batch_td):
        from verl.utils import tensordict_utils as tu

        lens = batch_td["input_ids"].offsets().diff().tolist()
        rows = [torch.arange(n, dtype=torch.float32) + 100 * i for i, n in enumerate(lens)]
        nested = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
        return tu.get_tensordict({"log_probs": -nested.clone(), "entropy": nested}, non_tensor_dict={"metrics": {"mfu": 0.5}})

    def update_actor(self, batch_td):
        from verl.utils import tensordict_utils as tu

        self.updates.append(batch_td)
        return tu.get_tensordict({}, non_tensor_dict={"metrics": {"mfu": 0.1, "pg_loss": [0.0]}})


def legacy_trainer(compose, *overrides):
    from verl_ext.trainer.legacy import VerlExtRayPPOTrainer

    trainer = object.__new__(VerlExtRayPPOTrainer)
    trainer.config = compose("trainer.use_v1=false", *overrides)
    trainer.actor_rollout_wg = FakeLegacyWorkerGroup()
    trainer.global_steps = 3
    return trainer
