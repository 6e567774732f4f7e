"""Peak memory of one actor update at real vocabularies: vanilla against the losses that need the current entropy.

ERC (``grpo_erc``), micro-scope ``high_entropy`` and ``entropy_adv`` need the update forward's entropy over the whole
vocabulary; vanilla does not. On a GPU the first thing a user meets is that entropy's memory: a logits-sized
tensor (tokens x vocabulary, fp32) or several, on top of the logits and their gradient. This benchmark runs one
update through verl's FSDP2 engine on CPU (``benchmarks.cpu_actor.CpuActor``: verl's ``TrainingWorker`` with
verl_ext's worker and loss, the recipes' remove-padding and gradient checkpointing) on a model built from config
with a real vocabulary and a few layers, and reports the process's peak resident memory during that update.

Models (random weights, ``verl_ext.testbed.tiny_model.build_tiny_model``, Qwen2 layers):

* ``smollm2``: SmolLM2-135M-Instruct's shape - vocabulary 49152, hidden 576, 9 heads / 3 KV heads, MLP 1536;
* ``qwen2.5``: Qwen2.5-7B's vocabulary (151936) on Qwen2.5-0.5B's layer shape - hidden 896, 14 / 2 heads, MLP 4864.

Both with ``--layers`` layers (2) and an untied LM head (as Qwen2.5-7B; SmolLM2 ties it, which only moves the
common base). The micro-batch holds ``--tokens`` tokens (2048: the DAPO recipes' ``ppo_max_token_len_per_gpu`` of
16384 on a GPU, divided by 8), in ``--tokens / 512`` sequences of 64 prompt + 448 response tokens.

Per case, in a fresh process: build the actor, compute the old log-probs and entropy, run one update (the optimizer
allocates its state), then reset the kernel's peak-RSS counter (``/proc/self/clear_refs``, 5) and run the measured
update; ``peak_mb`` is the peak RSS (``VmHWM``) of that update, ``update_mb`` its rise over the RSS before it (the
memory the update itself needs: logits, their gradient, the entropy; the model, gradients and optimizer state are
in the base). glibc is told to serve every allocation of 64 KiB or more by ``mmap`` (``MALLOC_MMAP_THRESHOLD_``), so
freed tensors leave the RSS at once and the peak is the tensors' peak, not the allocator's caching.

Entropy modes (verl's own switches, ``actor.fsdp_config.*`` in a recipe):

* ``plain``: verl's ``entropy_from_logits`` - through verl_ext's worker, under ``torch.no_grad()`` (no graph, since
  ``entropy_coeff`` is 0);
* ``chunked``: ``entropy_from_logits_with_chunking=True`` (verl computes it 2048 rows at a time), no graph either;
* ``checkpointing``: ``entropy_checkpointing=True`` (verl wraps it in ``torch.utils.checkpoint``; verl_ext's
  no-grad path steps aside, see ``verl_ext.trainer.actor_worker``);
* ``verl graph``: verl's own ``TrainingWorker`` with ``calculate_entropy=True`` - the entropy with its autograd
  graph, what the loss would cost without verl_ext's worker (reference row, ERC only).

    python benchmarks/bench_memory.py --json benchmarks/results/results_memory_cpu.json
    python benchmarks/bench_memory.py --models smollm2 --tokens 1024 --layers 1     # quicker
    python benchmarks/bench_memory.py --summarise benchmarks/results/results_memory_cpu.json   # the table, from the file
    python benchmarks/bench_memory.py --summarise benchmarks/results/results_memory_cpu.json --model qwen2.5  # a model

Ratios to vanilla carry to a GPU (the same tensors are allocated); absolute numbers do not.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODELS: dict[str, dict[str, int]] = {
    "smollm2": {"model_vocab_size": 49152, "hidden": 576, "heads": 9, "kv_heads": 3, "intermediate": 1536},
    "qwen2.5": {"model_vocab_size": 151936, "hidden": 896, "heads": 14, "kv_heads": 2, "intermediate": 4864},
}
"""Model shapes by name (``build_tiny_model`` arguments besides ``layers``)."""

LOSSES: dict[str, dict[str, Any]] = {
    "vanilla": {"loss_mode": "vanilla"},
    "grpo_erc": {"loss_mode": "grpo_erc"},
    "high_entropy": {"loss_mode": "high_entropy", "high_entropy_scope": "micro"},
    "entropy_adv": {"loss_mode": "entropy_adv"},
    "entropy_bonus": {"loss_mode": "vanilla"},
}
"""The rows: vanilla (no current entropy), the losses whose update forward needs it (``high_entropy`` at micro
scope: at batch scope its tokens are chosen on the driver from the old-log-prob pass and the update is vanilla's),
and vanilla with an entropy bonus (``entropy_coeff`` > 0: Skywork-OR1's rule, the entropy control's
``entropy_coef`` actuator), whose entropy needs its graph."""
ACTOR_KEYS: dict[str, dict[str, Any]] = {"entropy_bonus": {"entropy_coeff": 0.001}}
"""Actor-config keys of a row besides its policy loss."""

MODES = ("plain", "chunked", "checkpointing", "verl graph")
PROMPT, RESPONSE = 64, 448


def _vm(field: str) -> int:
    """A ``/proc/self/status`` field in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def run_case(model_dir: str, vocab: int, loss: str, mode: str, tokens: int) -> dict[str, Any]:
    """One case in this process (see the module docstring); returns its row."""
    import torch
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig
    from verl.workers.engine_workers import TrainingWorker

    from verl_ext.config import PolicyLossConfig
    from benchmarks.cpu_actor import CpuActor, random_batch
    from verl_ext.trainer import actor_loss
    from verl_ext.trainer.actor_config import FSDPActorConfig
    from verl_ext.trainer.actor_worker import EntropyAwareTrainingWorker

    torch.manual_seed(0)
    rows = tokens // (PROMPT + RESPONSE)
    engine = FSDPEngineConfig(entropy_from_logits_with_chunking=mode == "chunked", entropy_checkpointing=mode == "checkpointing")
    config = FSDPActorConfig(strategy="fsdp2", rollout_n=1, ppo_mini_batch_size=rows, ppo_micro_batch_size_per_gpu=rows,
                             optim=FSDPOptimizerConfig(lr=1e-6, weight_decay=0.0), fsdp_config=engine,
                             policy_loss=PolicyLossConfig(**LOSSES[loss]), **ACTOR_KEYS.get(loss, {}))  # fmt: skip
    worker = TrainingWorker if mode == "verl graph" else EntropyAwareTrainingWorker
    actor = CpuActor(model_dir, config, loss_fn=actor_loss.ppo_loss, worker_cls=worker, enable_gradient_checkpointing=True)
    batch = random_batch(rows, vocab, prompt_len=(PROMPT, PROMPT), response_len=(RESPONSE, RESPONSE), seed=0)
    old = actor.compute_log_prob(batch, calculate_entropy=True)
    batch["old_log_probs"], batch["old_entropy"] = old["log_probs"], old["entropy"]
    entropy = None if mode != "verl graph" else True  # verl's trainer flag; verl_ext's worker decides by itself
    actor.update(batch, calculate_entropy=entropy)  # warm-up: the optimizer's state
    del old
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _vm("VmRSS")
    start = time.perf_counter()
    metrics = actor.update(batch, calculate_entropy=entropy)
    seconds = time.perf_counter() - start
    peak = _vm("VmHWM")
    hook = actor.worker.entropy_hook() if hasattr(actor.worker, "entropy_hook") else None
    return {
        "loss": loss,
        "mode": mode,
        "peak_mb": peak / 1024,
        "update_mb": (peak - before) / 1024,
        "base_mb": before / 1024,
        "update_s": seconds,
        "no_grad_entropy_calls": None if hook is None else hook.calls_without_grad,
        "loss_value": float(metrics["loss"][0] if isinstance(metrics["loss"], list) else metrics["loss"]),
    }



def cases(losses: list[str]) -> list[tuple[str, str]]:
    """(loss, mode) pairs: vanilla once (it computes no entropy, the modes do not apply), every other loss in every
    verl_ext mode, and ERC once more the way verl alone computes it."""
    out = [("vanilla", "plain")] if "vanilla" in losses else []
    for loss in losses:
        if loss != "vanilla":
            out += [(loss, mode) for mode in MODES if mode != "verl graph"]
    if "grpo_erc" in losses:
        out.append(("grpo_erc", "verl graph"))
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """The rows (with their ratios to vanilla) as a markdown table: the one the script prints and docs/results.md
    quotes. A missing key is a KeyError naming it."""
    lines = ["| model | loss | mode | peak MB | x vanilla | update MB | x vanilla |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['model']} | {r['loss']} | {r['mode']} | {r['peak_mb']:.0f} | {r['peak_ratio']:.3f} | "
                     f"{r['update_mb']:.0f} | {r['update_ratio']:.3f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="smollm2,qwen2.5", help=f"comma-separated, of {sorted(MODELS)}")
    p.add_argument("--losses", default=",".join(LOSSES), help=f"comma-separated, of {sorted(LOSSES)}")
    p.add_argument("--layers", type=int, default=2, help="decoder layers of the models (2)")
    p.add_argument("--tokens", type=int, default=2048, help="tokens per micro-batch, a multiple of 512 (2048)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--case", nargs=3, metavar=("MODEL_DIR", "LOSS", "MODE"), help=argparse.SUPPRESS)
    p.add_argument("--vocab", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--summarise", type=Path, default=None, metavar="JSON",
                   help="measure nothing: print the table of an earlier run's --json file (markdown) and exit")
    p.add_argument("--model", default=None,
                   help="with --summarise: only this model's rows (one of the file's models; default all)")
    args = p.parse_args(argv)
    if args.model is not None and not args.summarise:
        p.error("--model filters a --summarise table; to measure fewer models use --models")
    if args.summarise:
        rows = json.loads(args.summarise.read_text())["rows"]
        if args.model is not None:
            kept = sorted({r["model"] for r in rows})
            if args.model not in kept:
                p.error(f"--model={args.model!r} is invalid: allowed the file's models {kept}")
            rows = [r for r in rows if r["model"] == args.model]
        print(table(rows))
        return 0
    if args.tokens <= 0 or args.tokens % (PROMPT + RESPONSE):
        p.error(f"--tokens={args.tokens} is invalid: allowed a positive multiple of {PROMPT + RESPONSE}")
    if args.case:
        print(json.dumps(run_case(args.case[0], args.vocab, args.case[1], args.case[2], args.tokens)))
        return 0
    models, losses = args.models.split(","), args.losses.split(",")
    for name, allowed, key in ((models, MODELS, "--models"), (losses, LOSSES, "--losses")):
        bad = [n for n in name if n not in allowed]
        if bad:
            p.error(f"{key}: {bad} invalid: allowed {sorted(allowed)}")
    from verl_ext.testbed.tiny_model import build_tiny_model

    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "TOKENIZERS_PARALLELISM": "false"}
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            shape = MODELS[model]
            model_dir = build_tiny_model(Path(tmp) / model, layers=args.layers, max_position_embeddings=PROMPT + RESPONSE, **shape)
            for loss, mode in cases(losses):
                cmd = [sys.executable, __file__, "--tokens", str(args.tokens), "--vocab", str(shape["model_vocab_size"]),
                       "--case", model_dir, loss, mode]  # fmt: skip
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if proc.returncode != 0:
                    print(proc.stdout[-3000:], proc.stderr[-6000:], sep="\n", file=sys.stderr)
                    raise SystemExit(f"bench_memory: case {model} {loss} {mode} failed (exit {proc.returncode})")
                row = {"model": model, **shape, "layers": args.layers, "tokens": args.tokens,
                       **json.loads(proc.stdout.strip().splitlines()[-1])}  # fmt: skip
                results.append(row)
                print(f"{model:8} {loss:13} {mode:14} peak {row['peak_mb']:8.0f} MB  update {row['update_mb']:7.0f} MB  "
                      f"{row['update_s']:6.1f} s", flush=True)  # fmt: skip
    for row in results:
        base = next(r for r in results if r["model"] == row["model"] and r["loss"] == "vanilla")
        row["peak_ratio"] = row["peak_mb"] / base["peak_mb"]
        row["update_ratio"] = row["update_mb"] / base["update_mb"]
    print("\n" + table(results))
    if args.json:
        import torch
        import verl

        meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "torch": torch.__version__,
                "verl": verl.__version__, "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv)}  # fmt: skip
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
