"""``python -m verl_ext.demo``: watch the entropy mechanism on CPU, through verl's real trainer.

Runs the CPU recipe (``recipe/cpu_tiny.sh``: GRPO on the repeat-the-digit task with a tiny Qwen2 built locally, no
download; ``--model smollm2``: the real SmolLM2-135M-Instruct on GSM8K-format word problems) once per loss through
``python -m verl_ext.main_ppo`` - Ray on 127.0.0.1, FSDP2 on gloo, vLLM's CPU engine as the rollout server, verl's
reward loop and weight sync - with the same model, data and seed. Writes to ``--out``:

* ``runs/<run>.jsonl`` - every step's metrics, written by verl's own ``file`` logger;
* ``metrics.csv`` - the same metrics, one row per (run, step);
* ``train.log`` - everything verl, Ray and vLLM printed;
* ``entropy_demo.png`` - entropy, reward, selected fraction, KL and the fitted law ``R = -a e^H + b``
  (drawn by :mod:`verl_ext.analyze` from the JSONL files);

and prints a table of entropy and reward at the start and end of each run, and the law's fit per run. Arguments
after ``--`` are Hydra overrides added to every run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from verl_ext.cpu.machine import machine_line
from verl_ext.demo.report import summary_table, write_csv
from verl_ext.demo.runs import (AUTO_COV_RUN, CONTROL_RUNS, MODELS, RUN_NAMES, TASKS, DemoSettings,
                                log_path, own_target, train_all)

DEFAULT_RUNS = ("vanilla", "clip_cov")


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``argv`` -> (the arguments before ``--``, the Hydra overrides after it)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def parse_runs(text: str) -> list[str]:
    """``a,b,c`` -> names, each one of :data:`RUN_NAMES`; ``argparse`` error otherwise."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in RUN_NAMES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"--losses: {bad or text!r} invalid; allowed: {', '.join(RUN_NAMES)}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"--losses: {text!r} names a run twice")
    return names


def build_parser() -> argparse.ArgumentParser:
    tiny, real = MODELS["tiny"], MODELS["smollm2"]

    def sizes(key: str) -> str:
        return f"default {tiny[key]}, {real[key]} with --model smollm2"

    p = argparse.ArgumentParser(prog="python -m verl_ext.demo", description=__doc__.split("\n\n")[0],
                                epilog="Arguments after -- are Hydra overrides for every run.")
    p.add_argument("--steps", type=int, default=DemoSettings.steps, help="training steps per run (default %(default)s)")
    p.add_argument("--seed", type=int, default=DemoSettings.seed, help="seed of model, data, sampling (default %(default)s)")
    p.add_argument("--model", choices=list(MODELS), default="tiny",
                   help="tiny: a random tiny Qwen2 on repeat-the-digit (the recipe's cpu_model=toy, no download); smollm2: the real "
                        "SmolLM2-135M-Instruct from its PyPI wheel on GSM8K-format word problems (default %(default)s)")
    p.add_argument("--losses", type=parse_runs, default=list(DEFAULT_RUNS),
                   help=f"comma-separated runs, from {', '.join(RUN_NAMES)} (default {','.join(DEFAULT_RUNS)})")
    p.add_argument("--out", type=Path, default=Path("demo_out"), help="output directory (default %(default)s)")
    p.add_argument("--prompts-per-step", type=int, help=f"prompts per step ({sizes('prompts')})")
    p.add_argument("--samples-per-prompt", type=int, help=f"GRPO group size ({sizes('samples')})")
    p.add_argument("--response-length", type=int,
                   help=f"response tokens: the tiny task's length, the real model's budget ({sizes('response_length')})")
    p.add_argument("--lr", type=float, help=f"learning rate ({sizes('lr')})")
    p.add_argument("--cov-ratio", type=float,
                   help=f"Clip-Cov / KL-Cov selection ratio ({sizes('cov_ratio')}: a handful of a step's tokens)")
    p.add_argument("--entropy-target", type=float, default=None, metavar="NATS",
                   help=f"the target of the entropy-control runs ({', '.join(CONTROL_RUNS)}); alone, it adds "
                        f"{AUTO_COV_RUN!r}: clip_cov whose selection ratio the default controller (auto) sets to hold "
                        "this entropy")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs / CI)")
    return p  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    from tqdm import tqdm

    from verl_ext.analysis import cli as analyze
    from verl_ext.analysis.run_reader import read_runs

    argv, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = DemoSettings.for_model(args.model, steps=args.steps, seed=args.seed, prompts=args.prompts_per_step,
                                samples=args.samples_per_prompt, response_length=args.response_length, lr=args.lr, cov_ratio=args.cov_ratio,
                                entropy_target=args.entropy_target, overrides=tuple(overrides))  # fmt: skip
    except ValueError as exc:
        parser.error(str(exc))
    runs = list(args.losses)
    if settings.entropy_target is not None and not set(runs) & set(CONTROL_RUNS):
        runs.append(AUTO_COV_RUN)
    controlled = [run for run in runs if run in CONTROL_RUNS and not own_target(run)]
    if controlled and settings.entropy_target is None:
        parser.error(f"--losses {','.join(controlled)}: needs --entropy-target NATS")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    train_log = out / "train.log"
    print(f"training {', '.join(runs)} for {settings.steps} steps each through verl's trainer; its output goes to "
          f"{train_log}", flush=True)  # fmt: skip
    start = time.perf_counter()
    bar = tqdm(total=len(runs) * settings.steps, unit="step", disable=args.no_progress, file=sys.stderr)
    done: dict[str, int] = {}

    def on_step(run: str, step: int) -> None:
        bar.set_description(run)
        bar.update(max(0, step - done.get(run, 0)))
        done[run] = max(step, done.get(run, 0))

    try:
        with open(train_log, "w") as log:
            history = train_all(runs, settings, out, log, on_step)
    except RuntimeError as exc:
        bar.close()
        print(f"error: {exc}", file=sys.stderr)
        return 1
    bar.close()
    seconds = time.perf_counter() - start
    machine = machine_line()
    write_csv(history, out / "metrics.csv")
    results = [analyze.analyse(run, None, None) for name in runs for run in read_runs(f"{name}={log_path(out, name)}")]
    title = f"verl_ext CPU demo (verl's trainer): GRPO, {TASKS[settings.model]}, {settings.steps} steps, seed {settings.seed}"
    png = analyze.plot(results, out / "entropy_demo.png", None, None, title=f"{title}\n{machine}")
    print(summary_table(history))
    print()
    print(analyze.format_table(results))
    for line in analyze.tracking_lines(results):
        print(line)  # each step against the target it logged (--entropy-target's nats, or a run's own)
    print()
    print(f"machine: {machine}; {seconds:.0f} s for {len(runs)} runs")
    print(f"wrote {png}, {out / 'metrics.csv'}, {out / 'runs'}/*.jsonl")
    return 0


__all__ = ["build_parser", "main", "parse_runs", "split_overrides"]
