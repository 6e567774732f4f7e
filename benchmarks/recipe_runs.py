"""Run a recipe (by default ``recipe/cpu_tiny.sh``) once and read its per-step metrics: shared by the benchmarks that
train (trainer overhead, entropy autopilot, precision)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from verl_ext.demo.runs import read_steps

REPO = Path(__file__).resolve().parents[1]


def run_recipe(work: Path, exp: str, args: list[str], timeout: int = 3600, script: str = "cpu_tiny",
               **variables: str) -> list[dict[str, Any]]:
    """Train ``recipe/<script>.sh ARGS`` (default the Quick start, ``cpu_tiny``) with the recipe ``variables``
    (``LOSS``, ``STEPS``, ...) as experiment ``exp``, logging to ``work/<exp>.jsonl``; returns the metrics of each step
    in order. Raises on failure."""
    log = work / f"{exp}.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RAY_")) or k == "VERL_EXT_CPU_IOMP"}
    env.update(EXP_NAME=exp, VERL_FILE_LOGGER_PATH=str(log), PYTHON=sys.executable, **variables)
    proc = subprocess.run(["bash", str(REPO / "recipe" / f"{script}.sh"), *args], env=env, cwd=work,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{exp} failed:\n{(proc.stdout + proc.stderr)[-5000:]}")
    return read_rows(work, exp)


def read_rows(work: Path, exp: str) -> list[dict[str, Any]]:
    """The metrics of each step of experiment ``exp`` logged in ``work/<exp>.jsonl``, in step order."""
    return read_steps(work / f"{exp}.jsonl")
