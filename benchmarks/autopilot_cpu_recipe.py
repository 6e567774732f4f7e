"""The entropy autopilot on the CPU recipe (verl's trainer, vLLM rollout), next to fixed-ratio Clip-Cov and vanilla.

For each seed, one ``python -m verl_ext.demo --losses vanilla,clip_cov --entropy-target T`` (three runs of
``recipe/cpu_tiny.sh`` with the same model, data and settings): ``vanilla``, ``clip_cov`` with its fixed ratio
(``COV_RATIO``, 0.02) and ``autopilot``, ``clip_cov`` with the autopilot holding ``--target`` nats per token. Per
run: the mean absolute relative gap to the target over the second half (``mean |H - H*| / H*``), the entropy and
reward over the last 5 steps, and for the autopilot the ratio trajectory and the share of steps on a ratio bound.

    python benchmarks/autopilot_cpu_recipe.py --target 2.6 --steps 40 --seeds 0 1 2 --json results.json

About 5 minutes per run on 2 cores with verl's V1 trainer (the demo's; ``--legacy`` for the legacy trainer).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from verl_ext.demo.runs import log_path, read_steps

VARIANTS = ("vanilla", "clip_cov", "autopilot")


def demo(seed: int, target: float, steps: int, work: Path, legacy: bool) -> Path:
    """One demo (the three variants) for ``seed``; returns its output directory."""
    out = work / f"seed{seed}"
    cmd = [sys.executable, "-m", "verl_ext.demo", "--losses", "vanilla,clip_cov", "--entropy-target", str(target),
           "--steps", str(steps), "--seed", str(seed), "--out", str(out), "--no-progress"]
    if legacy:
        cmd += ["--", "trainer.use_v1=false"]
    subprocess.run(cmd, check=True)
    return out


def result(out: Path, variant: str, seed: int, target: float) -> dict[str, Any]:
    rows = read_steps(log_path(out, variant))
    entropy = [r["actor/entropy"] for r in rows]
    half = entropy[len(entropy) // 2:]
    record = {
        "variant": variant, "seed": seed,
        "tracking_error": statistics.fmean(abs(h - target) / target for h in half),
        "entropy_last": statistics.fmean(entropy[-5:]),
        "reward_last": statistics.fmean(r["critic/score/mean"] for r in rows[-5:]),
        "entropy": entropy,
    }  # fmt: skip
    if variant == "autopilot":
        record["ratio"] = [r["entropy_control/ratio"] for r in rows]
        record["selected_frac"] = [r["actor/clip_cov/batch_selected_frac"] for r in rows]
        record["saturated_share"] = statistics.fmean(r["entropy_control/saturated"] for r in rows[len(rows) // 2:])
    return record


def table(results: list[dict[str, Any]], target: float) -> str:
    lines = [f"| seed | variant | mean abs rel gap to H*={target} (2nd half) | entropy last 5 | reward last 5 | "
             "ratio last (autopilot) | selected last | ratio on a bound (2nd half) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for r in results:
        extra = (f"{r['ratio'][-1]:.3g} | {r['selected_frac'][-1]:.3g} | {r['saturated_share']:.0%}"
                 if "ratio" in r else "- | - | -")  # fmt: skip
        lines.append(f"| {r['seed']} | {r['variant']} | {r['tracking_error']:.1%} | {r['entropy_last']:.2f} | "
                     f"{r['reward_last']:.3f} | {extra} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=float, default=2.6, help="the autopilot's target entropy (2.6)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--legacy", action="store_true", help="verl's legacy trainer instead of the V1 one")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.steps < 2 or not args.target > 0:
        parser.error(f"--steps {args.steps} / --target {args.target}: allowed --steps >= 2 (the gap is taken over "
                     "the second half) and --target > 0 (nats per token)")  # fmt: skip
    work = args.work or Path(tempfile.mkdtemp(prefix="verl_ext_autopilot_"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in args.seeds:
        out = demo(seed, args.target, args.steps, work, args.legacy)
        for variant in VARIANTS:
            results.append(result(out, variant, seed, args.target))
            r = results[-1]
            print(f"seed {seed} {variant}: gap {r['tracking_error']:.1%}, entropy {r['entropy_last']:.2f}, "
                  f"reward {r['reward_last']:.3f}", flush=True)  # fmt: skip
    print(table(results, args.target))
    if args.json:
        from verl_ext.cpu.machine import machine_info

        args.json.write_text(json.dumps({"machine": machine_info(), "target": args.target, "steps": args.steps,
                                         "trainer": "legacy" if args.legacy else "v1", "command": "python -m verl_ext.demo --losses vanilla,clip_cov "
                                         f"--entropy-target {args.target} --steps {args.steps} --seed S", "runs": results}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
