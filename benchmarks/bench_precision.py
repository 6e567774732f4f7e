"""CPU mode in fp32 against bf16, side by side: the real recipe's step and its parts, interleaved rounds, one run.

Each launch is a real recipe run through verl's trainer (Ray, FSDP2 on gloo, vLLM's CPU engine), differing only in
``VERL_EXT_CPU_PRECISION`` (``fp32`` / ``bf16``, :mod:`verl_ext.cpu.precision`):

* ``smollm2``: ``SCALE=cpu MODEL=smollm2 bash recipe/gsm8k_grpo_vanilla.sh trainer.total_training_steps=<--steps>``
  (SmolLM2-135M-Instruct, GRPO, 4 prompts x 4 responses, 2 training ranks) without validation or checkpoints, so that
  a launch is its steps;
* ``tiny``: the Quick start, ``bash recipe/cpu_tiny.sh trainer.total_training_steps=<--steps>`` (the random tiny
  Qwen2 on the toy task, ``cpu_model=toy``).

``--variants`` compares others: ``bf16+iomp`` adds Intel's OpenMP runtime per process (``VERL_EXT_CPU_IOMP=1``: no
spinning in the training workers, 200 ms in vLLM's engine processes). Rounds alternate the order (fp32 first, then
bf16 first). Per launch: the median over steps 2..N (step 1 carries
first-call costs) of verl's ``timing_s/step`` and its parts (``gen``, ``old_log_prob``, ``update_actor``,
``update_weights``), the launch's wall time, verl's rollout-vs-actor probability gap (``training/rollout_probs_diff_*``)
and the entropy. The summary is each variant's median over rounds and its ratio to the first variant's (bf16 / fp32).

Beside them: this machine's matmul peaks in fp32 and bf16 (two shapes of SmolLM2's update, the median of 5 timed
calls each; the peak is the faster shape's rate) and the update's achieved rate, ``8 N T / update time`` (forward, backward and the gradient-checkpointing
recompute of ``N`` = 134.5 M parameters over ``T`` = ``perf/total_num_tokens`` tokens).

    python -m benchmarks.bench_precision --rounds 2 --steps 6 --json benchmarks/results/results_precision_cpu.json
    python -m benchmarks.bench_precision --summarise benchmarks/results/results_precision_cpu.json
    python -m benchmarks.bench_precision --cases smollm2 --variants bf16 bf16+iomp --json \
        benchmarks/results/results_precision_iomp_cpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.recipe_runs import run_recipe

PRECISIONS = ("fp32", "bf16")
VARIANTS = {
    "fp32": {"VERL_EXT_CPU_PRECISION": "fp32"},
    "bf16": {"VERL_EXT_CPU_PRECISION": "bf16"},
    "bf16+iomp": {"VERL_EXT_CPU_PRECISION": "bf16", "VERL_EXT_CPU_IOMP": "1"},
}
"""Variant -> its environment: the precision, and Intel's OpenMP runtime per process (``verl_ext.cpu.openmp``)."""
PARTS = ("step", "gen", "old_log_prob", "update_actor", "update_weights")
"""verl's ``timing_s/<part>`` read per step."""
SMOLLM2_PARAMS = 134_515_008
"""SmolLM2-135M-Instruct's parameters (tied embedding counted once: it is also the LM head's matmul)."""
NO_VALIDATION = ["trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1"]
CASES = {
    "smollm2": ("gsm8k_grpo_vanilla", {"SCALE": "cpu", "MODEL": "smollm2"}, NO_VALIDATION),
    "tiny": ("cpu_tiny", {}, NO_VALIDATION),
}
"""Case -> (recipe script, its variables, Hydra overrides)."""
SHAPES = ((2048, 576, 1536), (512, 576, 49152))
"""Matmul shapes (m, k, n): an MLP projection over a micro-batch's tokens, and the LM head."""


def matmul_gflops(m: int, k: int, n: int, dtype: Any, repeats: int = 5) -> float:
    """GFLOPS of ``(m, k) @ (k, n)`` in ``dtype`` on this CPU (median of ``repeats`` timed calls after one warm-up)."""
    import torch

    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * m * k * n / statistics.median(times) / 1e9


def launch_figures(rows: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    """One launch's medians over steps 2..N, its wall time, probability gap and entropy."""
    later = rows[1:] or rows

    def med(key: str) -> float | None:
        values = [r[key] for r in later if key in r]
        return statistics.median(values) if values else None

    out: dict[str, Any] = {part: med(f"timing_s/{part}") for part in PARTS}
    out.update(wall_s=wall, steps=len(rows), tokens=med("perf/total_num_tokens"),
               probs_diff_mean=med("training/rollout_probs_diff_mean"),
               probs_diff_max=med("training/rollout_probs_diff_max"), entropy=med("actor/entropy"))  # fmt: skip
    return out


def run(case: str, rounds: int, steps: int, work: Path, scale_dir: Path,
        variants: tuple[str, ...] = PRECISIONS) -> list[dict[str, Any]]:
    """Every launch of ``case``, rounds interleaved and the order alternating (SmolLM2's assets from ``scale_dir``)."""
    script, variables, overrides = CASES[case]
    if case == "smollm2":
        variables = {**variables, "WORK_DIR": str(scale_dir)}
    launches = []
    for r in range(rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for precision in order:
            exp = f"{case}-{precision}-r{r}"
            start = time.perf_counter()
            rows = run_recipe(work, exp, [f"trainer.total_training_steps={steps}", *overrides], script=script,
                              CKPTS_DIR=str(work / "ckpts" / exp), **VARIANTS[precision], **variables)  # fmt: skip
            fig = launch_figures(rows, time.perf_counter() - start)
            launches.append({"case": case, "round": r, "precision": precision, **fig})
            print(f"{exp}: step {fig['step']:.2f} s, update {fig['update_actor']:.2f} s", flush=True)
    return launches


def summarise(launches: list[dict[str, Any]], peaks: dict[str, float]) -> list[dict[str, Any]]:
    """Per case and variant: the median over rounds of each figure, the ratio to the first variant, the update's
    GFLOPS beside the matmul peak of its precision."""
    summary = []
    variants = tuple(dict.fromkeys(x["precision"] for x in launches))
    for case in dict.fromkeys(x["case"] for x in launches):
        med = {}
        for precision in variants:
            mine = [x for x in launches if x["case"] == case and x["precision"] == precision]
            med[precision] = {key: statistics.median(x[key] for x in mine) if mine[0][key] is not None else None
                              for key in (*PARTS, "wall_s", "tokens", "probs_diff_mean", "probs_diff_max", "entropy")}  # fmt: skip
            med[precision]["rounds"] = len(mine)
        for precision in variants:
            row = {"case": case, "precision": precision, **med[precision]}
            row["ratio"] = {key: med[precision][key] / med[variants[0]][key] for key in (*PARTS, "wall_s")}
            if case == "smollm2" and row["tokens"]:
                row["update_gflops"] = 8 * SMOLLM2_PARAMS * row["tokens"] / row["update_actor"] / 1e9
                row["peak_gflops"] = peaks[VARIANTS[precision]["VERL_EXT_CPU_PRECISION"]]
            summary.append(row)
    return summary


def table(result: dict[str, Any]) -> str:
    """The markdown table of a results file."""
    lines = ["| case | precision | rounds | step s (ratio) | gen s | old log-prob s | update s (ratio) | weight sync s | "
             "launch wall s | update GFLOPS / matmul peak | probs diff mean / max | entropy |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in result["summary"]:
        rate = (f"{row['update_gflops']:.0f} / {row['peak_gflops']:.0f}" if "update_gflops" in row else "-")
        diff = (f"{row['probs_diff_mean']:.2g} / {row['probs_diff_max']:.2g}" if row["probs_diff_mean"] is not None
                else "-")  # fmt: skip
        lines.append(
            f"| {row['case']} | {row['precision']} | {row['rounds']} | {row['step']:.2f} ({row['ratio']['step']:.2f}) "
            f"| {row['gen']:.2f} | {row['old_log_prob']:.2f} | {row['update_actor']:.2f} "
            f"({row['ratio']['update_actor']:.2f}) | {row['update_weights']:.2f} | {row['wall_s']:.0f} | {rate} | "
            f"{diff} | {row['entropy']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(PRECISIONS),
                        help="compared in this order; ratios are to the first")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--scale-dir", type=Path, default=Path("recipe_cpu"),
                        help="WORK_DIR of the SmolLM2 launches: its assets are built there once and reused")
    parser.add_argument("--json", type=Path, help="write the launches, peaks and summary here")
    parser.add_argument("--summarise", type=Path, metavar="JSON", help="print the table of a results file and exit")
    args = parser.parse_args(argv)
    if args.summarise:
        print(table(json.loads(args.summarise.read_text())))
        return 0
    import torch

    from verl_ext.cpu import precision
    from verl_ext.cpu.machine import machine_info

    if not precision.bf16_flags():
        parser.error(f"this CPU has none of {', '.join(precision.BF16_FLAGS)}: nothing to compare")
    shapes = {f"{m}x{k}@{k}x{n}": {name: matmul_gflops(m, k, n, dtype) for name, dtype in
                                   (("fp32", torch.float32), ("bf16", torch.bfloat16))} for m, k, n in SHAPES}  # fmt: skip
    peaks = {name: max(rates[name] for rates in shapes.values()) for name in PRECISIONS}
    launches = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            launches += run(case, args.rounds, args.steps, Path(tmp), args.scale_dir.resolve(), tuple(args.variants))
    result = {"machine": machine_info(), "cpu_flags": precision.bf16_flags(), "rounds": args.rounds,
              "steps": args.steps, "matmul_gflops": shapes, "peaks": peaks, "launches": launches,
              "summary": summarise(launches, peaks)}  # fmt: skip
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
