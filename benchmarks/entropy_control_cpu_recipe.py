"""Every entropy-control method of verl_ext on one run: the CPU recipe (verl's trainer, vLLM rollout) with a target
entropy, 3 seeds each.

For each seed, one ``python -m verl_ext.demo --losses <all> --entropy-target T`` (runs of ``recipe/cpu_tiny.sh`` with
the same model, data, seed and settings; verl's V1 trainer, ``--legacy`` for the other):

| run | what |
| --- | --- |
| ``vanilla`` | GRPO, no entropy control |
| ``clip_cov`` | Clip-Cov at a fixed ratio (``policy_loss.clip_cov_ratio``, 0.02) |
| ``auto_cov`` | auto x cov_ratio: Clip-Cov whose ratio the default, self-tuning controller sets |
| ``pi_cov`` | pi x cov_ratio: Clip-Cov whose ratio the PI law (gains 10 / 2) sets (not in the default set) |
| ``skywork`` | skywork x entropy_coef: Skywork-OR1's adaptive entropy coefficient (their values) |
| ``pi_coef`` | pi x entropy_coef: the entropy coefficient set by the PI law in log space |
| ``entropic`` | entropic x pos_weight: EntroPIC (their gains) |
| ``high_entropy`` | gradient on the 20 % highest-entropy tokens (no target) |
| ``entropy_adv`` | entropy-shaped advantages (no target) |

Per run, over the second half, the tracking figures of :mod:`verl_ext.analysis.control` (as ``verl_ext.analyze``
reports them): the bias ``|geomean(H / H*) - 1|``, the gap on 5-step blocks, and the per-step gap
(``mean |H - H*| / H*``, the figure these comparisons reported first); then the overshoot
(the largest relative excursion past the target after entropy first crossed it; 0 if it never did), entropy and reward
over the last 5 steps, the mean step time (steps 2..N), and for controlled runs the actuator's trajectory and the share
of second-half steps on a bound.

    python benchmarks/entropy_control_cpu_recipe.py --target 2.9 --steps 16 --seeds 0 1 2 --json results.json
    python benchmarks/entropy_control_cpu_recipe.py --summarise results.json      # the table again, from the file
    python benchmarks/entropy_control_cpu_recipe.py --variants clip_high ... -- actor_rollout_ref.actor.ppo_mini_batch_size=2

Arguments after ``--`` are Hydra overrides for every run (the demo's own). A seed whose runs already logged every step
in ``--work`` is read, not run again.

About 3 minutes per run (16 steps) on 2 cores; 24 runs for 3 seeds.
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

from verl_ext.analysis.control import bias, block_gap, log_gap, logged_targets, relative_gap
from verl_ext.demo.cli import split_overrides
from verl_ext.demo.runs import CONTROL_RUNS, MODELS, RUN_NAMES, log_path, own_target, read_steps

VARIANTS = ("vanilla", "clip_cov", "auto_cov", "skywork", "pi_coef", "entropic", "high_entropy", "entropy_adv", "clip_high",
            "relative_linear")
"""The runs of the default ``--variants`` (``--variants`` takes any of the demo's runs, ``pi_cov`` too)."""


def demo(seed: int, target: float, steps: int, work: Path, legacy: bool, variants: tuple[str, ...],
         model: str = "tiny", overrides: tuple[str, ...] = ()) -> Path:
    """One demo (every variant) for ``seed``, with Hydra ``overrides`` for every run; returns its output directory. A
    seed whose runs all logged ``steps`` steps in ``work`` already (a benchmark cut short, run again) is not run again."""
    out = work / f"seed{seed}"
    def finished(path: Path) -> bool:
        rows = read_steps(path) if path.is_file() else []
        return bool(rows) and rows[-1]["step"] == steps

    if all(finished(log_path(out, v)) for v in variants):
        return out
    extra = ["trainer.use_v1=false"] if legacy else []
    cmd = [sys.executable, "-m", "verl_ext.demo", "--model", model, "--losses", ",".join(variants), "--entropy-target",
           str(target), "--steps", str(steps), "--seed", str(seed), "--out", str(out), "--no-progress"]
    if extra or overrides:
        cmd += ["--", *extra, *overrides]
    subprocess.run(cmd, check=True)
    return out


def overshoot(entropy: list[float], target: float) -> float:
    """The largest relative excursion past ``target`` after the entropy first reached it, on the far side from where
    it started (0 when it never reached it)."""
    above = entropy[0] > target
    crossed = [i for i, h in enumerate(entropy) if (h <= target if above else h >= target)]
    if not crossed:
        return 0.0
    beyond = [(target - h if above else h - target) / target for h in entropy[crossed[0]:]]
    return max(0.0, *beyond)


def result(out: Path, variant: str, seed: int, target: float) -> dict[str, Any]:
    rows = read_steps(log_path(out, variant))
    entropy = [r["actor/entropy"] for r in rows]
    half = len(rows) // 2
    steps = [r["step"] for r in rows]
    targets = logged_targets({r["step"]: r for r in rows}, steps[half:], target)  # a controlled run's own, per step
    record = {
        "variant": variant, "seed": seed,
        "tracking_error": relative_gap(entropy[half:], targets),
        "target_second_half": targets.tolist(),
        # past a constant target only: a run with its own (moving) target has no single level to overshoot
        "overshoot": None if own_target(variant) else overshoot(entropy, target),
        "entropy_last": statistics.fmean(entropy[-5:]),
        "reward_last": statistics.fmean(r["critic/score/mean"] for r in rows[-5:]),
        "step_time": statistics.fmean(r["timing_s/step"] for r in rows[1:]),
        "entropy": entropy,
    }  # fmt: skip
    if variant in CONTROL_RUNS:
        record["actuator"] = [r["entropy_control/value"] for r in rows]
        record["saturated_share"] = statistics.fmean(r["entropy_control/saturated"] for r in rows[half:])
    return record


def target_text(variant: str, target: float) -> str:
    """The target a variant held: ``--target``'s nats, or a run's own (``relative_linear``: ``1.0 -> 0.5 x H_1``)."""
    if not own_target(variant):
        return str(target)
    keys = dict(kv.split("=", 1) for kv in CONTROL_RUNS[variant][1])
    end = f" -> {keys['target_end']}" if keys.get("schedule", "constant") != "constant" else ""
    unit = " x H_1" if keys.get("target_unit") == "initial" else ""
    return f"{keys.get('schedule', 'constant')} {keys['target']}{end}{unit}"


def summary(results: list[dict[str, Any]], target: float) -> str:
    """One row per variant: means over the seeds (and the spread of the gap). Every tracking figure compares each
    step's entropy with that step's target as the run logged it (uncontrolled runs: ``target``)."""
    # a run with its own, moving target (a schedule, a relative target) adds its target and the log gap, the figure a
    # moving target's tracking is given in
    moving = any(own_target(r["variant"]) for r in results)
    head = ["run", "H*", "bias to H* (2nd half)"] if moving else ["run", f"bias to H*={target} (2nd half)"]
    head += ["gap on 5-step blocks", "per-step gap (2nd half)", *(["mean \\|log H - log H*\\| (2nd half)"] if moving else []),
             "overshoot", "entropy last 5", "reward last 5", "step time (s)", "on a bound (2nd half)"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "| --- |" + (" --- |" if moving else "") + " ---: |" * (len(head) - 1 - moving)]
    for variant in dict.fromkeys(r["variant"] for r in results):
        rs = [r for r in results if r["variant"] == variant]
        mean = lambda key: statistics.fmean(r[key] for r in rs)  # noqa: E731
        gaps = [r["tracking_error"] for r in rs]
        halves = [r["entropy"][len(r["entropy"]) // 2:] for r in rs]  # from the trajectory: older files lack the keys
        targets = [r.get("target_second_half", target) for r in rs]  # each step's logged target; older files: --target
        biases = [bias(h, t) for h, t in zip(halves, targets)]
        blocks = [block_gap(h, t) for h, t in zip(halves, targets)]
        shoots = [r["overshoot"] for r in rs if r["overshoot"] is not None]
        cells = [variant, *([target_text(variant, target)] if moving else []),
                 f"{statistics.fmean(biases):.1%} ({min(biases):.1%}-{max(biases):.1%})", f"{statistics.fmean(blocks):.1%}",
                 f"{mean('tracking_error'):.1%} ({min(gaps):.1%}-{max(gaps):.1%})",
                 *([f"{statistics.fmean(log_gap(h, t) for h, t in zip(halves, targets)):.3f}"] if moving else []),
                 f"{statistics.fmean(shoots):.1%}" if shoots else "-", f"{mean('entropy_last'):.2f}",
                 f"{mean('reward_last'):.3f}", f"{mean('step_time'):.2f}",
                 f"{mean('saturated_share'):.0%}" if "saturated_share" in rs[0] else "-"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=float, default=2.9, help="the target entropy, nats per token (2.9)")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated runs (default: VARIANTS; any of the demo's runs)")
    parser.add_argument("--legacy", action="store_true", help="verl's legacy trainer instead of the V1 one")
    parser.add_argument("--model", choices=list(MODELS), default="tiny",
                        help="the demo's model: tiny (toy) or smollm2 (the real SmolLM2-135M-Instruct) (tiny)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--summarise", type=Path, default=None, metavar="JSON",
                        help="print the table of an earlier run's --json file and exit")
    argv, overrides = split_overrides(sys.argv[1:] if argv is None else argv)  # overrides: for every run
    args = parser.parse_args(argv)
    if args.summarise:
        recorded = json.loads(args.summarise.read_text())
        print(summary(recorded["runs"], recorded["target"]))
        return 0
    variants = tuple(v for v in args.variants.split(",") if v)
    if args.steps < 2 or not args.target > 0 or not variants or set(variants) - set(RUN_NAMES):
        parser.error(f"--steps {args.steps} / --target {args.target} / --variants {args.variants}: allowed --steps >= 2 "
                     f"(the gap is taken over the second half), --target > 0 (nats per token), variants from {RUN_NAMES}")  # fmt: skip
    work = args.work or Path(tempfile.mkdtemp(prefix="verl_ext_entropy_control_"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in args.seeds:
        out = demo(seed, args.target, args.steps, work, args.legacy, variants, args.model, tuple(overrides))
        for variant in variants:
            results.append(result(out, variant, seed, args.target))
            r = results[-1]
            shoot = "-" if r["overshoot"] is None else f"{r['overshoot']:.1%}"
            print(f"seed {seed} {variant}: gap {r['tracking_error']:.1%}, overshoot {shoot}, entropy "
                  f"{r['entropy_last']:.2f}, reward {r['reward_last']:.3f}, step {r['step_time']:.2f} s", flush=True)  # fmt: skip
        if args.json:  # after each seed, so that a cut-short run keeps what it measured
            from verl_ext.cpu.machine import machine_info

            args.json.write_text(json.dumps({"machine": machine_info(), "model": args.model, "target": args.target, "steps": args.steps,
                                             "trainer": "legacy" if args.legacy else "v1", "seeds_done": sorted({r["seed"] for r in results}),
                                             "command": f"python -m verl_ext.demo --model {args.model} --losses {','.join(variants)} --entropy-target "
                                             f"{args.target} --steps {args.steps} --seed S" + (" -- " + " ".join(overrides) if overrides else ""),
                                             "runs": results}, indent=2))  # fmt: skip
    print(summary(results, args.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
