"""The CPU recipes' assets, built once and only where missing: ``python -m verl_ext.testbed.assets``.

What a CPU-scale run needs that no download gives it, under its folder (``verl_ext.recipe.work_dir``, ``WORK_DIR``, of ``scale=cpu`` and of
``recipe/cpu_tiny.sh``):

* ``math`` (the GPU recipes' tasks): synthetic problems written in GSM8K's / DAPO-Math-17k's / AIME's hub formats
  (:mod:`~verl_ext.testbed.math_assets` ``sources``), prepared by the project's own ``scripts/data/prepare_*.py``
  exactly as real downloads are, and a model: the tiny Qwen2 warmed up on them (``tiny``) or the real
  SmolLM2-135M-Instruct installed from its PyPI wheel (:mod:`~verl_ext.testbed.smollm2`) with its format warm-up
  (``smollm2``);
* ``digits`` (``recipe/cpu_tiny.sh``'s toy task): the repeat-the-digit data and a random tiny Qwen2 (``toy``)
  (:mod:`~verl_ext.testbed.task`).

Each step is skipped when its output is there (a model folder with its ``warmup.json``; the five prepared parquet
files; the toy task's stamp of its arguments and builder), so a second run starts at once. A failing step raises :class:`AssetError` naming what failed; the command line
prints it and exits 2. ``python -m verl_ext.main_ppo`` calls :func:`ensure` for a recipe whose config asks for it
(``verl_ext.recipe.assets``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from verl_ext.testbed.task import assets_current

TASKS = ("math", "digits")
MODELS = ("toy", "tiny", "smollm2")
PREPARED = ("dapo-math-17k.parquet", "gsm8k-train.parquet", "gsm8k-test.parquet", "aime-2024.parquet", "aime-2025.parquet")
"""The files ``scripts/data/prepare_*.py`` write from the synthetic sources; all present = nothing to prepare."""

DATA_SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "data"
"""The repository's data preparation scripts (a checkout's ``scripts/data``; not shipped in the wheel)."""


class AssetError(RuntimeError):
    """A step of building the assets failed; the message names it."""


@dataclass(frozen=True)
class AssetPlan:
    """What one run needs."""

    task: str
    """``math`` or ``digits``."""

    model: str
    """``toy`` (the digits task's random tiny Qwen2), ``tiny`` or ``smollm2`` (the math tasks')."""

    folder: Path
    """The work folder (``verl_ext.recipe.work_dir``): sources and caches go here."""

    data_dir: Path
    """Where the prepared parquet files go (``digits``: the folder itself)."""

    model_path: Path
    """Where the run's model goes."""

    target_length: int = 16
    """``digits``: scored response tokens (= ``data.max_response_length``)."""

    seed: int = 0
    """``digits``: seed of the model weights and the prompts."""

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise AssetError(f"task '{self.task}' is invalid: allowed {', '.join(TASKS)}")
        if self.model not in MODELS:
            raise AssetError(f"model '{self.model}' is invalid: allowed {', '.join(MODELS)}")
        if (self.task == "digits") != (self.model == "toy"):
            raise AssetError(f"model '{self.model}' is invalid for the {self.task} task: the digits task has the toy "
                             "model only, the math task tiny or smollm2")


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> str:
    """Run one step (its output goes to stderr); its last stdout line."""
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    sys.stderr.write(proc.stdout)
    if proc.returncode != 0:
        raise AssetError(f"{what} failed (exit {proc.returncode}: {' '.join(cmd)})")
    lines = proc.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def _module(name: str, *args: str | Path) -> list[str]:
    return [sys.executable, "-m", name, *(str(a) for a in args)]


def prepare_math_data(plan: AssetPlan, sources: Path) -> None:
    """Write the synthetic sources and prepare them with ``scripts/data/prepare_*.py`` (offline)."""
    style = "words" if plan.model == "smollm2" else "digits"
    _run(_module("verl_ext.testbed.math_assets", "sources", "--style", style, "--out", sources),
         f"writing the synthetic sources to {sources}")  # fmt: skip
    if not DATA_SCRIPTS.is_dir():
        raise AssetError(f"scripts/data not found at {DATA_SCRIPTS}: the CPU recipes prepare their data with the "
                         "repository's scripts (run them from a checkout)")  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(plan.folder / "hf_cache")}  # fmt: skip
    common = ["--no-progress", "--output-dir", str(plan.data_dir)]
    steps = [
        ("prepare_gsm8k.py", [*common, "--local-path", str(sources / "gsm8k" / "train.jsonl"), "--splits", "train"]),
        ("prepare_gsm8k.py", [*common, "--local-path", str(sources / "gsm8k" / "test.jsonl"), "--splits", "test"]),
        ("prepare_dapo_math.py", [*common, "--local-path", str(sources / "dapo-math-17k.parquet")]),
        ("prepare_aime.py", ["--year", "2024", *common, "--local-path", str(sources / "aime-2024.jsonl")]),
        ("prepare_aime.py", ["--year", "2025", *common, "--local-path", str(sources / "aime-2025.jsonl")]),
    ]
    for script, args in steps:
        _run([sys.executable, str(DATA_SCRIPTS / script), *args],
             f"preparing the synthetic sources with scripts/data/{script} into {plan.data_dir}", env=env)  # fmt: skip


def ensure(plan: AssetPlan) -> list[str]:
    """Build whatever ``plan`` lacks; the names of the steps that ran (empty: everything was there)."""
    done: list[str] = []
    if plan.task == "digits":
        # deterministic from its arguments and its builder's source: rebuilt when either changed (the stamp)
        if assets_current(plan.folder, plan.target_length, seed=plan.seed):
            return done
        _run(_module("verl_ext.testbed.task", "--out", plan.folder, "--target-length", plan.target_length,
                     "--seed", plan.seed), f"building the tiny model and the task data in {plan.folder}")  # fmt: skip
        return ["digits"]
    sources = plan.folder / ("smollm2/sources" if plan.model == "smollm2" else "sources")
    if not all((plan.data_dir / name).exists() for name in PREPARED):
        prepare_math_data(plan, sources)
        done.append("data")
    if not (plan.model_path / "warmup.json").exists():
        if plan.model == "smollm2":
            base = _run(_module("verl_ext.testbed.smollm2"), "installing SmolLM2-135M-Instruct (python -m verl_ext.testbed.smollm2)")
            _run(_module("verl_ext.testbed.math_assets", "pretrained", "--model", base, "--data-dir", plan.data_dir,
                         "--sources", sources, "--out", plan.model_path),
                 f"the format warm-up of {base} into {plan.model_path}")  # fmt: skip
        else:
            _run(_module("verl_ext.testbed.math_assets", "model", "--data-dir", plan.data_dir, "--out", plan.model_path),
                 f"building the tiny model in {plan.model_path}")  # fmt: skip
        done.append("model")
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_ext.testbed.assets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=TASKS, default="math", help="math (the GPU recipes' tasks) or digits (cpu_tiny's)")
    parser.add_argument("--model", choices=MODELS, default="tiny", help="toy (digits), tiny or smollm2 (math)")
    parser.add_argument("--folder", type=Path, required=True, help="the work folder (verl_ext.recipe.work_dir)")
    parser.add_argument("--data-dir", type=Path, help="prepared data (default: FOLDER/data, FOLDER/smollm2/data for smollm2)")
    parser.add_argument("--model-path", type=Path, help="the model (default: FOLDER/model, FOLDER/smollm2/model for smollm2)")
    parser.add_argument("--target-length", type=int, default=16, help="digits: scored response tokens (16)")
    parser.add_argument("--seed", type=int, default=0, help="digits: seed of the model and the prompts (0)")
    args = parser.parse_args(argv)
    sub = args.folder / "smollm2" if args.model == "smollm2" else args.folder
    try:
        plan = AssetPlan(task=args.task, model=args.model, folder=args.folder.resolve(),
                         data_dir=(args.data_dir or (args.folder if args.task == "digits" else sub / "data")).resolve(),
                         model_path=(args.model_path or sub / "model").resolve(), target_length=args.target_length,
                         seed=args.seed)  # fmt: skip
        done = ensure(plan)
    except AssetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"assets in {plan.folder}: " + (f"built {', '.join(done)}" if done else "all present"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
