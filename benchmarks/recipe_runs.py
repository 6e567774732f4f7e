"""Run a recipe (by default ``recipe/cpu_tiny.sh``) once and read its per-step metrics: shared by the benchmarks that
train (trainer overhead, entropy control, precision)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from verl_ext.recipe import launch_env
from verl_ext.demo.runs import read_steps

REPO = Path(__file__).resolve().parents[1]

PROCESS_VARIABLES = ("VERL_EXT_CPU_IOMP", "VERL_USE_EXTERNAL_PLUGINS", "VERL_EXT_MODEL_CACHE")
"""Variables a run may set beside the launcher's own: read by the processes of the run, not by the recipe."""

LOG_KEY = "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"
"""Where verl's file logger writes: set to ``work/<exp>.jsonl`` for every run."""


def recipe_env(**variables: str) -> dict[str, str]:
    """This process's environment for a recipe launch: without the user's ``VERL_*`` / ``RAY_*`` settings (but
    ``VERL_EXT_CPU_IOMP``) and without the launch variables the shell holds (a benchmark's launch is what it says:
    a shell's ``LOSS`` would be an error on a GPU recipe, its ``MODEL`` would change the model), plus ``variables``.
    A variable the launcher does not read is an error naming it: its value is a Hydra override."""
    names = set(launch_env.names())
    unknown = sorted(set(variables) - names - set(PROCESS_VARIABLES))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a launch variable (python -m verl_ext.recipe.launch_env names); "
                         "give the value as a Hydra override")  # fmt: skip
    env = {k: v for k, v in os.environ.items()
           if (not k.startswith(("VERL_", "RAY_")) or k == "VERL_EXT_CPU_IOMP") and k not in names}  # fmt: skip
    env.update(PYTHON=sys.executable, **variables)
    return env


def run_recipe(work: Path, exp: str, args: list[str], timeout: int = 3600, script: str = "cpu_tiny",
               **variables: str) -> list[dict[str, Any]]:
    """Train ``recipe/<script>.sh ARGS`` (default the Quick start, ``cpu_tiny``) as experiment ``exp`` from the folder
    ``work``, logging to ``work/<exp>.jsonl``; returns the metrics of each step in order. ``args`` are Hydra overrides
    (steps, sizes, seeds, ...); ``variables`` the launcher's variables (``LOSS``, ``SCALE``, ``MODEL``,
    ``WORK_DIR``, ...: :mod:`verl_ext.recipe.launch_env`) and :data:`PROCESS_VARIABLES`. Raises on failure."""
    log = work / f"{exp}.jsonl"
    env = recipe_env(EXP_NAME=exp, **variables)
    overrides = [f"++{LOG_KEY}={launch_env.quote(str(log))}", *args]
    proc = subprocess.run(["bash", str(REPO / "recipe" / f"{script}.sh"), *overrides], env=env, cwd=work,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{exp} failed:\n{(proc.stdout + proc.stderr)[-5000:]}")
    return read_rows(work, exp)


def read_rows(work: Path, exp: str) -> list[dict[str, Any]]:
    """The metrics of each step of experiment ``exp`` logged in ``work/<exp>.jsonl``, in step order."""
    return read_steps(work / f"{exp}.jsonl")
