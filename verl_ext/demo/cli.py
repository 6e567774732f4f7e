"""``python -m verl_ext.demo``: watch the entropy mechanism on CPU in a few minutes.

Builds a tiny random Qwen2 and its tokenizer locally (no downloads), then trains it with GRPO on the
repeat-the-digit task once per loss (same initial weights, same prompts, same sampling seed) through verl's
FSDP2 ``TrainingWorker`` and verl_ext's actor loss (:mod:`verl_ext.demo.loop`). Writes to ``--out``:

* ``runs/<loss>.jsonl`` - every step's metrics, written by verl's own ``file`` logger (``FileLogger``);
* ``metrics.csv`` - the same metrics, one row per (loss, step);
* ``train.log`` - what verl prints while it builds and trains the actor;
* ``entropy_demo.png`` - entropy, reward, selected fraction, KL and the fitted law ``R = -a e^H + b``
  (drawn by :mod:`verl_ext.analyze` from the JSONL files);

and prints a table of entropy and reward at the start and end of each run, and the law's fit per run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from verl_ext.demo.loop import AUTOPILOT_RUN, DEMO_LOSS_SETTINGS, DemoConfig, run_loss
from verl_ext.demo.report import History, summary_table, write_csv
from verl_ext.cpu.machine import machine_line

DEFAULT_LOSSES = ("vanilla", "clip_cov", "kl_cov", "grpo_erc")


def parse_losses(text: str) -> list[str]:
    """``a,b,c`` -> names, each one of :data:`DEMO_LOSS_SETTINGS`; ``argparse`` error otherwise."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in DEMO_LOSS_SETTINGS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"--losses: {bad or text!r} invalid; allowed: {', '.join(DEMO_LOSS_SETTINGS)}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"--losses: {text!r} names a loss twice")
    return names


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: allowed an integer >= 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m verl_ext.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=positive_int, default=DemoConfig.steps, help="training steps per loss (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of model, prompts and sampling (default 0)")
    p.add_argument("--losses", type=parse_losses, default=list(DEFAULT_LOSSES),
                   help=f"comma-separated, from {', '.join(DEMO_LOSS_SETTINGS)} (default {','.join(DEFAULT_LOSSES)})")
    p.add_argument("--out", type=Path, default=Path("demo_out"), help="output directory (default %(default)s)")
    p.add_argument("--prompts-per-step", type=positive_int, default=DemoConfig.prompts_per_step)
    p.add_argument("--samples-per-prompt", type=positive_int, default=DemoConfig.samples_per_prompt)
    p.add_argument("--lr", type=float, default=DemoConfig.lr, help="Adam learning rate (default %(default)s)")
    p.add_argument("--entropy-target", type=float, default=None, metavar="NATS",
                   help=f"also run {AUTOPILOT_RUN!r}: clip_cov whose selection ratio the entropy autopilot sets to "
                        "hold this entropy (nats per token)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs / CI)")
    return p  # fmt: skip


@contextlib.contextmanager
def verl_file_logger(path: Path) -> Iterator:
    """verl's ``FileLogger`` writing to ``path`` (it reads ``VERL_FILE_LOGGER_PATH``, restored afterwards)."""
    from verl.utils.tracking import FileLogger

    previous = os.environ.get("VERL_FILE_LOGGER_PATH")
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    try:
        logger = FileLogger(project_name="verl_ext_demo", experiment_name=path.stem)
    finally:
        if previous is None:
            del os.environ["VERL_FILE_LOGGER_PATH"]
        else:
            os.environ["VERL_FILE_LOGGER_PATH"] = previous
    try:
        yield logger
    finally:
        logger.finish()


def run_demo(losses: Sequence[str], cfg: DemoConfig, out: Path, progress: bool = True) -> History:
    """Train every loss, log to ``out/runs/<loss>.jsonl``; returns the in-memory history."""
    from tqdm import tqdm

    from verl_ext.cpu.task import DIGITS, VOCAB_EXTRA
    from verl_ext.cpu.tiny_model import build_tiny_model

    out.mkdir(parents=True, exist_ok=True)
    (out / "runs").mkdir(exist_ok=True)
    model_path = build_tiny_model(out / "model", vocab=DIGITS + VOCAB_EXTRA, hidden=cfg.hidden,
                                  layers=cfg.layers, seed=cfg.seed)  # fmt: skip
    history: History = {}
    bar = tqdm(total=len(losses) * cfg.steps, unit="step", disable=not progress, file=sys.stderr)
    for loss in losses:
        rows: list[dict[str, float]] = []
        history[loss] = rows
        bar.set_description(loss)
        with verl_file_logger(out / "runs" / f"{loss}.jsonl") as logger:

            def log(metrics: dict[str, float], step: int) -> None:
                logger.log(data=metrics, step=step)
                rows.append({"step": step, **metrics})
                bar.set_postfix(entropy=f"{metrics['actor/entropy']:.2f}", reward=f"{metrics['critic/score/mean']:.2f}")

            run_loss(loss, model_path, cfg, log, on_step=lambda: bar.update(1))
    bar.close()
    return history


def quiet_libraries() -> None:
    """Keep the terminal to the progress bar and the results: no per-load progress bars from transformers,
    no notices about verl engines (Megatron, VeOmni, ...) that the CPU demo does not use."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", message=r".*engine is not available", category=UserWarning)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    from verl_ext.analysis import cli as analyze
    from verl_ext.analysis.run_reader import read_runs

    args = build_parser().parse_args(argv)
    try:
        cfg = DemoConfig(steps=args.steps, seed=args.seed, prompts_per_step=args.prompts_per_step,
                         samples_per_prompt=args.samples_per_prompt, lr=args.lr,
                         entropy_target=args.entropy_target)  # fmt: skip
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if cfg.entropy_target is not None and AUTOPILOT_RUN not in args.losses:
        args.losses = [*args.losses, AUTOPILOT_RUN]
    quiet_libraries()
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    train_log = args.out / "train.log"
    print(f"training {', '.join(args.losses)} for {cfg.steps} steps each; verl's own output goes to {train_log}")
    with open(train_log, "w") as log_file, contextlib.redirect_stdout(log_file):
        history = run_demo(args.losses, cfg, args.out, progress=not args.no_progress)
    machine = machine_line()
    write_csv(history, args.out / "metrics.csv")
    runs = [run for loss in args.losses for run in read_runs(f"{loss}={args.out / 'runs' / f'{loss}.jsonl'}")]
    results = [analyze.analyse(run, None, None) for run in runs]
    title = f"verl_ext CPU demo: GRPO, repeat-the-digit task, {cfg.steps} steps, seed {cfg.seed} - {machine}"
    png = analyze.plot(results, args.out / "entropy_demo.png", None, None, title=title)
    print(summary_table(history))
    print()
    print(analyze.format_table(results))
    for line in analyze.tracking_lines(results):
        print(f"{line} (target {cfg.entropy_target} nats per token)")
    print()
    print(f"machine: {machine}; {time.perf_counter() - start:.0f} s")
    print(f"wrote {png}, {args.out / 'metrics.csv'}, {args.out / 'runs'}/*.jsonl")
    return 0


__all__ = ["build_parser", "main", "run_demo"]
