"""One demo run = one run of the CPU recipe (``recipe/cpu_tiny.sh``) through ``python -m verl_ext.main_ppo``: verl's
real trainer (Ray on 127.0.0.1, FSDP2 on gloo, vLLM's CPU engine as the rollout server, verl's reward loop and
weight sync), nothing written by hand.

The recipe ships inside the package (``verl_ext.recipe``, the repository's ``recipe/``), so the demo runs the same
script a user runs. What the runs of one demo share: the model and the task data (built by the first run, in
``OUT``: the tiny model, or SmolLM2-135M-Instruct warmed up once with ``--model smollm2``), the seed, and every
setting but the loss.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Any

from verl_ext.recipe.launch_env import LOSS_CHOICES, quote

LOSSES = LOSS_CHOICES
"""The losses ``recipe/cpu_tiny.sh`` takes as ``LOSS`` (each with its config group, ``configs/policy_loss/<loss>.yaml``)."""

AUTO_COV_RUN = "auto_cov"
"""The run of ``clip_cov`` whose selection ratio the default controller (``auto``) sets (``--entropy-target``)."""

AUTO_COV_BOUNDS = (1e-3, 0.5)
"""The selection-ratio range the demo's ``auto_cov`` and ``pi_cov`` runs may use (``ratio_min``, ``ratio_max``)."""

CONTROL_RUNS: dict[str, tuple[str, tuple[str, ...]]] = {
    AUTO_COV_RUN: ("clip_cov", ("actuator=cov_ratio", f"ratio_min={AUTO_COV_BOUNDS[0]}",
                                f"ratio_max={AUTO_COV_BOUNDS[1]}")),
    "pi_cov": ("clip_cov", ("controller=pi", "actuator=cov_ratio", f"ratio_min={AUTO_COV_BOUNDS[0]}",
                            f"ratio_max={AUTO_COV_BOUNDS[1]}")),
    "pi_coef": ("vanilla", ("controller=pi", "actuator=entropy_coef", "coef_min=0.0001", "coef_max=0.1",
                             "coef_init=0.005")),
    "skywork": ("vanilla", ("controller=skywork", "actuator=entropy_coef")),
    "entropic": ("vanilla", ("controller=entropic", "actuator=pos_weight")),
    "clip_high": ("vanilla", ("controller=pi", "actuator=clip_high")),
    "relative_linear": ("vanilla", ("target_unit=initial", "target=1.0", "schedule=linear", "target_end=0.5")),
}
"""Runs that hold ``--entropy-target`` with the entropy control: run name -> (loss, ``verl_ext.entropy_control`` keys
beside ``enable`` and ``target``). Every other key keeps its default: ``auto_cov`` is the default controller
(``auto``, self-tuning) on Clip-Cov's ratio, ``pi_cov`` verl_ext's PI law (gains 10 / 2) on the same ratio; the
papers' values for the others (Skywork-OR1's coefficient from 0, +- 0.0001 in [0, 0.005] (their
or1_scripts/train/*.sh), EntroPIC's gains 1 / 0.01); ``pi_coef`` is verl_ext's PI law with the gains 10 / 2 and its
zero-error coefficient 0.005 (pi works in log space: the default 0 is Skywork's start); ``clip_high`` is verl_ext's PI
law (gains 10 / 2; ``auto`` refuses the bound, which showed no authority) on the PPO upper clip bound (rest value the
actor's 0.2, range [0.2, 1.0]); ``relative_linear`` is the
default controller on the entropy coefficient with its own target, relative to the entropy of step 1 (AER's anchor):
from 1.0x down to 0.5x of it, linearly over the run (``--entropy-target`` does not apply)."""


def own_target(run: str) -> bool:
    """Whether ``run`` is a control run that sets its own target (a relative one) rather than ``--entropy-target``'s
    nats; ``False`` for a run without entropy control."""
    return run in CONTROL_RUNS and any(key.startswith("target=") for key in CONTROL_RUNS[run][1])

RUN_NAMES = (*LOSSES, *CONTROL_RUNS)

TASKS = {"tiny": "tiny Qwen2, repeat-the-digit", "smollm2": "SmolLM2-135M-Instruct, GSM8K-format word problems"}
"""What each model's runs train on, for titles."""

USER_SWITCHES = ("VERL_EXT_MODEL_CACHE", "VERL_EXT_CPU_IOMP", "VERL_EXT_CPU_PRECISION")
"""The user's VERL_* variables a demo run keeps (every other VERL_* / RAY_* one comes from the recipe): the model
cache, CPU mode's OpenMP switch and its precision (a launch variable)."""

STEP_LINE = re.compile(r"\bstep:(\d+) - ")
"""A step's line of verl's console logger (behind Ray's ``(TaskRunner pid=...)`` prefix)."""


def recipe_script(name: str = "cpu_tiny.sh") -> Path:
    """The path of a shipped recipe script (``verl_ext.recipe``)."""
    path = Path(str(resources.files("verl_ext.recipe") / name))
    if not path.is_file():
        raise FileNotFoundError(f"recipe script {name} is not in the installed package (looked at {path})")
    return path


MODELS: dict[str, dict[str, Any]] = {
    "tiny": dict(prompts=16, samples=8, response_length=16, lr=5e-3, cov_ratio=0.02),
    "smollm2": dict(prompts=4, samples=4, response_length=64, lr=1e-5, cov_ratio=0.1),
}
"""The demo's ``--model`` -> its sizes. ``tiny``: a random tiny Qwen2 on repeat-the-digit (a step ~2000 response
tokens; 0.02 selects a handful). ``smollm2``: the real SmolLM2-135M-Instruct on GSM8K-format word problems
(docs/real_model.md), with the sizes of ``SCALE=cpu MODEL=smollm2`` (a step ~250 response tokens)."""

CPU_MODELS = {"tiny": "toy", "smollm2": "smollm2"}
"""The demo's ``--model`` -> ``recipe/cpu_tiny.sh``'s model group (``MODEL``, ``configs/cpu_model/<model>.yaml``)."""

@dataclass(frozen=True)
class DemoSettings:
    """What every run of one demo shares: sizes, steps, seed, learning rate and selection ratio (Hydra overrides of the
    recipe, :func:`settings_overrides`), the model, and extra Hydra overrides."""

    steps: int = 20
    seed: int = 0
    model: str = "tiny"
    prompts: int = MODELS["tiny"]["prompts"]
    samples: int = MODELS["tiny"]["samples"]
    response_length: int = MODELS["tiny"]["response_length"]
    lr: float = MODELS["tiny"]["lr"]
    cov_ratio: float = MODELS["tiny"]["cov_ratio"]
    entropy_target: float | None = None
    overrides: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def for_model(cls, model: str, **given: Any) -> DemoSettings:
        """Settings with ``model``'s sizes (:data:`MODELS`) where ``given`` has no value (or ``None``)."""
        if model not in MODELS:
            raise ValueError(f"--model {model!r} is invalid: allowed one of {list(MODELS)}")
        return cls(model=model, **{**MODELS[model], **{k: v for k, v in given.items() if v is not None}})

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"--model {self.model!r} is invalid: allowed one of {list(MODELS)}")
        for key, flag, low in (("steps", "--steps", 1), ("seed", "--seed", 0), ("prompts", "--prompts-per-step", 2),
                               ("samples", "--samples-per-prompt", 2), ("response_length", "--response-length", 1)):  # fmt: skip
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{flag} {value!r} is invalid: allowed an integer >= {low}")
        if self.prompts % 2:
            raise ValueError(f"--prompts-per-step {self.prompts} is invalid: allowed an even number (two mini-batches "
                             "per step)")  # fmt: skip
        if not self.lr > 0:
            raise ValueError(f"--lr {self.lr!r} is invalid: allowed a number > 0")
        if not 0 < self.cov_ratio <= 1:
            raise ValueError(f"--cov-ratio {self.cov_ratio!r} is invalid: allowed a fraction in (0, 1]")
        if self.entropy_target is not None and not self.entropy_target > 0:
            raise ValueError(f"--entropy-target {self.entropy_target!r} is invalid: allowed a number > 0 (nats per token)")


def log_path(out: Path, run: str) -> Path:
    """verl's file log of one run: ``OUT/runs/<run>.jsonl`` (the token lens writes ``<run>.lens.jsonl`` beside it)."""
    return out / "runs" / f"{run}.jsonl"


def settings_overrides(settings: DemoSettings, out: Path, run: str, build_assets: bool) -> list[str]:
    """The Hydra overrides every run of a demo shares, and the run's log: sizes, steps, seed (``data.seed``, from which
    the recipe takes vLLM's and the mini-batch shuffling's), learning rate, the selection ratio of Clip-Cov and
    KL-Cov, whether the run builds the model and data in ``out``, and verl's file log (:func:`log_path`)."""
    ratio = repr(settings.cov_ratio)
    return [f"trainer.total_training_steps={settings.steps}", f"data.seed={settings.seed}",
            f"data.train_batch_size={settings.prompts}", f"actor_rollout_ref.rollout.n={settings.samples}",
            f"data.max_response_length={settings.response_length}", f"actor_rollout_ref.actor.optim.lr={settings.lr!r}",
            f"actor_rollout_ref.actor.policy_loss.clip_cov_ratio={ratio}",
            f"actor_rollout_ref.actor.policy_loss.kl_cov_ratio={ratio}",
            f"verl_ext.recipe.assets={'true' if build_assets else 'false'}",
            f"ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={quote(str(log_path(out, run)))}"]  # fmt: skip


def run_command(run: str, settings: DemoSettings, out: Path, build_assets: bool) -> tuple[list[str], dict[str, str]]:
    """The command and environment of one run: ``bash cpu_tiny.sh OVERRIDES`` with the launcher's variables (the
    loss, the run's name, the work folder ``out`` and the model): the settings' overrides, the run's entropy control,
    then the user's overrides (last: they win)."""
    if run not in RUN_NAMES:
        raise ValueError(f"run {run!r} is invalid: allowed one of {list(RUN_NAMES)}")
    overrides = [*settings_overrides(settings, out, run, build_assets), "trainer.val_before_train=False"]
    loss = run
    if run in CONTROL_RUNS:
        loss, keys = CONTROL_RUNS[run]
        if not own_target(run):
            if settings.entropy_target is None:
                raise ValueError(f"the {run!r} run needs --entropy-target")
            keys = (f"target={settings.entropy_target}", *keys)
        overrides += ["verl_ext.entropy_control.enable=true", *(f"verl_ext.entropy_control.{kv}" for kv in keys)]
    # a run's own VERL_* / RAY_* settings come from the recipe; the user's switches are kept, and so are the other
    # launch variables the user set (LOGGERS, GPUS_PER_NODE, ...)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RAY_")) or k in USER_SWITCHES}
    env.update(LOSS=loss, EXP_NAME=run, WORK_DIR=str(out), MODEL=CPU_MODELS[settings.model], PYTHON=sys.executable)
    env.update(settings.extra_env)
    return ["bash", str(recipe_script()), *overrides, *settings.overrides], env


def read_steps(path: Path) -> list[dict[str, Any]]:
    """The metrics of each step in verl's file log, in step order, each with its ``step``."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{"step": int(r["step"]), **r["data"]} for r in sorted(rows, key=lambda r: r["step"])]


def train(run: str, settings: DemoSettings, out: Path, build_assets: bool, log: IO[str],
          on_step: Callable[[int], None] = lambda step: None) -> list[dict[str, Any]]:  # fmt: skip
    """Run the recipe once; its output goes to ``log``, each step line of verl's console logger calls
    ``on_step(N)``. Returns the metrics of each step; raises ``RuntimeError`` (with the output's tail) on failure."""
    cmd, env = run_command(run, settings, out, build_assets)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    tail: list[str] = []
    with subprocess.Popen(cmd, env=env, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            tail = (tail + [line])[-60:]
            found = STEP_LINE.search(line)
            if found:
                on_step(int(found.group(1)))
    if proc.returncode != 0:
        raise RuntimeError(f"the {run!r} run failed (exit {proc.returncode}); its output is in {log.name}:\n"
                           + "".join(tail))  # fmt: skip
    return read_steps(log_path(out, run))


def train_all(runs: Sequence[str], settings: DemoSettings, out: Path, log: IO[str],
              on_step: Callable[[str, int], None] = lambda run, step: None) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """Every run in turn; the first builds the model and the data that the others reuse."""
    history: dict[str, list[dict[str, Any]]] = {}
    model_dir = out / "smollm2" / "model" if settings.model == "smollm2" else out / "model"
    for i, run in enumerate(runs):
        history[run] = train(run, settings, out, build_assets=i == 0 and not model_dir.is_dir(), log=log,
                             on_step=lambda step, run=run: on_step(run, step))  # fmt: skip
    return history


__all__ = ["AUTO_COV_BOUNDS", "AUTO_COV_RUN", "CONTROL_RUNS", "CPU_MODELS", "DemoSettings", "LOSSES",
           "MODELS", "RUN_NAMES", "TASKS", "STEP_LINE", "log_path", "own_target", "read_steps", "recipe_script",
           "run_command", "settings_overrides", "train", "train_all"]  # fmt: skip
