"""One actor update through verl's FSDP2 engine on CPU (``benchmarks.cpu_actor.CpuActor``): what the current
entropy that ERC needs costs, with verl's graph and with verl_ext's no-grad path. Used by
``bench_losses.py --engine``; see docs/cpu_engine.md.
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks.memtrack import cpu_peak_bytes
from tensordict import TensorDict

# (row name, loss_mode, calculate_entropy passed by the "trainer", worker: "verl" or "verl_ext")
BENCH_CASES: tuple[tuple[str, str, bool, str], ...] = (
    ("vanilla", "vanilla", False, "verl"),
    ("vanilla + calculate_entropy", "vanilla", True, "verl"),
    ("grpo_erc, entropy with graph", "grpo_erc", True, "verl"),
    ("grpo_erc, no-grad entropy", "grpo_erc", False, "verl_ext"),
)

BAPO_CASES: tuple[tuple[str, str, bool, str, dict[str, Any]], ...] = (
    ("vanilla", "vanilla", False, "verl", {}),
    ("bapo, bounds per loss call (micro)", "bapo", False, "verl_ext", {"bapo_scope": "micro"}),
    ("bapo, bounds per step (no-grad pass)", "bapo", False, "verl_ext", {"bapo_scope": "step"}),
)
"""BAPO's step scope against its micro scope: the difference is the no-grad forward pass over the mini-batch and the
search (``bench_losses.py --only bapo``); the fifth element holds the policy-loss keys."""


def benchmark_update(
    repeats: int = 3,
    batch: int = 8,
    response_length: int = 64,
    prompt_length: int = 16,
    model_vocab_size: int = 32768,
    hidden: int = 64,
    workdir: str | None = None,
    cases: tuple[tuple[Any, ...], ...] = BENCH_CASES,
) -> list[dict[str, Any]]:
    """Time and peak memory of one actor update through verl's FSDP2 engine on CPU, per ``cases`` (:data:`BENCH_CASES`
    or :data:`BAPO_CASES`).

    The model is a tiny Qwen2 whose LM head is ``model_vocab_size`` wide, so that the logits-sized tensors the
    entropy adds are visible. One warm-up update, then the median wall time of ``repeats`` updates and the
    profiler peak of one more. Rows: ``loss``, ``time_ms``, ``time_ratio``, ``peak_mb``, ``mem_ratio`` (ratios to
    the first row), ``syncs`` (None: not measured on CPU).
    """
    import statistics
    import tempfile
    import time

    from verl.workers.engine_workers import TrainingWorker

    from verl_ext.config import PolicyLossConfig
    from benchmarks.cpu_actor import CpuActor, random_batch
    from verl_ext.testbed.tiny_model import build_tiny_model
    from verl_ext.trainer.actor_config import FSDPActorConfig
    from verl_ext.trainer.actor_loss import ppo_loss
    from verl_ext.trainer.actor_worker import EntropyAwareTrainingWorker

    tmp = tempfile.TemporaryDirectory() if workdir is None else None
    root = workdir or tmp.name  # type: ignore[union-attr]
    model_path = build_tiny_model(os.path.join(root, "bench_model"), hidden=hidden, model_vocab_size=model_vocab_size)
    data = random_batch(batch, 100, prompt_len=(prompt_length, prompt_length),
                        response_len=(response_length, response_length), seed=0)  # fmt: skip
    rows: list[dict[str, Any]] = []
    try:
        for name, loss_mode, calculate_entropy, worker, *extra in cases:
            from verl.workers.config import FSDPOptimizerConfig

            config = FSDPActorConfig(
                strategy="fsdp2", rollout_n=1, ppo_mini_batch_size=batch, ppo_micro_batch_size_per_gpu=batch,
                optim=FSDPOptimizerConfig(lr=1e-4),
                policy_loss=PolicyLossConfig(loss_mode=loss_mode, **(extra[0] if extra else {})),
            )  # fmt: skip
            actor = CpuActor(
                model_path, config, loss_fn=ppo_loss,
                worker_cls=EntropyAwareTrainingWorker if worker == "verl_ext" else TrainingWorker,
            )  # fmt: skip
            old = actor.compute_log_prob(data, calculate_entropy=True)
            step = data.clone()
            step["old_log_probs"], step["old_entropy"] = old["log_probs"], old["entropy"]

            def run(actor: CpuActor = actor, step: TensorDict = step, ce: bool = calculate_entropy) -> None:
                actor.update(step, calculate_entropy=ce)

            run()
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                run()
                times.append((time.perf_counter() - start) * 1e3)
            peak = cpu_peak_bytes(run)
            rows.append({"loss": name, "time_ms": statistics.median(times), "peak_mb": peak / 2**20, "syncs": None})
    finally:
        if tmp is not None:
            tmp.cleanup()
    for row in rows:
        row["time_ratio"] = row["time_ms"] / rows[0]["time_ms"]
        row["mem_ratio"] = row["peak_mb"] / rows[0]["peak_mb"] if rows[0]["peak_mb"] else float("nan")
    return rows
