"""Vanilla GRPO on SmolLM2 over 40 steps in bf16 against the three fp32 seeds: entropy and reward per 5-step block.

Reads verl's file logs kept in ``benchmarks/results/``: the fp32 runs ``results_real_model_vanilla_40{,_seed1,_seed2}.jsonl``
(docs/real_model.md) and the bf16 run ``results_real_model_vanilla_40_bf16.jsonl``, made with the same command and seed
as the first fp32 run on a CPU with bf16 instructions (CPU mode's default there)::

    SCALE=cpu MODEL=smollm2 EXP_NAME=gsm8k-grpo-vanilla-bf16 bash recipe/gsm8k_grpo_vanilla.sh \\
        trainer.total_training_steps=40 \\
        ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH=benchmarks/results/results_real_model_vanilla_40_bf16.jsonl

Per block: the bf16 run's mean of ``actor/entropy`` and ``critic/score/mean``, beside the fp32 seeds' lowest and
highest block means; and greedy validation before training and after step 40.

    python -m benchmarks.precision_course
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from verl_ext.demo.runs import read_steps

RESULTS = Path(__file__).resolve().parent / "results"
FP32 = ("results_real_model_vanilla_40.jsonl", "results_real_model_vanilla_40_seed1.jsonl",
        "results_real_model_vanilla_40_seed2.jsonl")  # fmt: skip
BF16 = "results_real_model_vanilla_40_bf16.jsonl"
KEYS = {"entropy": "actor/entropy", "score": "critic/score/mean"}
GREEDY = "val-core/openai/gsm8k/acc/mean@1"
BLOCK = 5


def blocks(rows: list[dict], key: str, steps: int = 40) -> list[float]:
    """The mean of ``key`` over steps 1-5, 6-10, ... of one run."""
    by_step = {r["step"]: r[key] for r in rows if key in r}
    return [statistics.mean(by_step[s] for s in range(b, b + BLOCK)) for b in range(1, steps + 1, BLOCK)]


def greedy(rows: list[dict]) -> tuple[float, float]:
    values = [(r["step"], r[GREEDY]) for r in rows if GREEDY in r]
    return min(values)[1], max(values)[1]


def table(root: Path = RESULTS) -> str:
    fp32 = [read_steps(root / name) for name in FP32]
    bf16 = read_steps(root / BF16)
    lines = ["| steps | entropy bf16 | entropy fp32 (3 seeds, min-max) | score bf16 | score fp32 (3 seeds, min-max) |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    cols = {name: (blocks(bf16, key), [blocks(run, key) for run in fp32]) for name, key in KEYS.items()}
    for i in range(len(cols["entropy"][0])):
        cells = []
        for name in KEYS:
            mine, seeds = cols[name]
            low, high = min(s[i] for s in seeds), max(s[i] for s in seeds)
            cells += [f"{mine[i]:.3f}", f"{low:.3f}-{high:.3f}"]
        lines.append(f"| {BLOCK * i + 1}-{BLOCK * (i + 1)} | " + " | ".join(cells) + " |")
    before, after = greedy(bf16)
    seeds = [greedy(run) for run in fp32]
    lines.append(f"| greedy before / after | {before:.3f} / {after:.3f} | "
                 f"{min(s[0] for s in seeds):.3f}-{max(s[0] for s in seeds):.3f} / "
                 f"{min(s[1] for s in seeds):.3f}-{max(s[1] for s in seeds):.3f} | | |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    print(table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
