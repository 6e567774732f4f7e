"""Every recipe's composed config, pinned: the cases, how a case is composed, and the files under
``tests/scripts/pinned/``.

A case is a launch script (``recipe/<name>.sh``) with a set of environment variables. Composing it runs the script
with ``PRINT_CMD=1`` (the exact command it would launch, nothing started), then composes that command's Hydra
arguments in this process through the entry point's own config module, with the environment the script exports
(``VERL_PLATFORM=cpu`` for CPU mode) and resolves every interpolation. The result is written as YAML with the
case's working folder replaced by ``$RUN``, so that the files do not depend on where the tests run, nor on the
machine's CPU: CPU mode's precision follows the CPU, and cases are composed as on one with bf16 instructions
(:data:`PINNED_CPU_FLAGS`).

``python tests/scripts/recipe_pins.py --write`` rewrites every pinned file from the current scripts; the fast-tier
test ``test_recipe_pins.py`` composes the same cases and fails on any difference. Run it only when a change of what a
recipe launches is intended, and say why in the commit.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from verl_ext.cpu import precision as cpu_precision

REPO = Path(__file__).resolve().parents[2]
RECIPE_DIR = Path(os.environ.get("VERL_EXT_PIN_RECIPE_DIR", REPO / "recipe"))
"""The launch scripts composed (``VERL_EXT_PIN_RECIPE_DIR`` replaces them, e.g. with an older copy to compare)."""
PIN_DIR = Path(os.environ.get("VERL_EXT_PIN_DIR", Path(__file__).resolve().parent / "pinned"))
"""The pinned files (``VERL_EXT_PIN_DIR`` writes or reads them elsewhere)."""

GPU_RECIPES = ("gsm8k_grpo_vanilla", "gsm8k_grpo_clip_cov", "gsm8k_grpo_kl_cov", "gsm8k_grpo_kl_clip", "gsm8k_grpo_erc",
               "dapo_baseline", "dapo_clip_cov", "dapo_kl_cov", "dapo_grpo_erc", "dapo_gppo_erc", "dapo_high_entropy",
               "dapo_entropy_adv", "dapo_skywork", "dapo_entropic")  # fmt: skip
"""The GPU recipes, each pinned at SCALE=gpu, SCALE=cpu (tiny model) and SCALE=cpu MODEL=smollm2."""

RECIPE_VARIABLES = ("MODEL_PATH", "DATA_DIR", "TRAIN_FILE", "VAL_FILE", "CKPTS_DIR", "NNODES", "GPUS_PER_NODE",
                    "PROJECT_NAME", "EXP_NAME", "GEN_TP", "SP_SIZE", "OFFLOAD", "LOGGERS", "DRY_RUN", "PRINT_CMD",
                    "WANDB_API_KEY", "WANDB_MODE", "LOSS", "SMOKE_DIR", "NETRC", "COV_RATIO", "WORK_DIR", "STEPS",
                    "RESPONSE_LENGTH", "PROMPTS", "N", "LR", "SEED", "ASSETS", "RAY_ADDRESS", "VERL_PLATFORM",
                    "VERL_FILE_LOGGER_PATH", "MAX_PROMPT_LENGTH", "MAX_RESPONSE_LENGTH", "OVERLONG_BUFFER",
                    "MAX_NUM_GEN_BATCHES", "SCALE", "SCALE_DIR", "VAL_N", "FAMILY", "PROTOCOL", "CKPT", "EVAL_DIR",
                    "ENTROPY_TARGET", "MODEL", "PYTHON", "HYDRA_FULL_ERROR")  # fmt: skip
"""Every variable a recipe reads: removed from the environment of a case, which sets its own."""


def cases() -> dict[str, tuple[str, dict[str, str]]]:
    """Pinned case name -> (script name, the environment variables it is run with)."""
    out: dict[str, tuple[str, dict[str, str]]] = {}
    for name in GPU_RECIPES:
        out[f"{name}.gpu"] = (name, {})
        out[f"{name}.cpu"] = (name, {"SCALE": "cpu"})
        out[f"{name}.cpu_smollm2"] = (name, {"SCALE": "cpu", "MODEL": "smollm2"})
    for family in ("dapo", "gsm8k"):
        for protocol in ("erc", "dapo", "greedy", "custom"):
            out[f"eval_{family}_{protocol}.gpu"] = ("eval", {"FAMILY": family, "PROTOCOL": protocol})
        out[f"eval_{family}_erc_ckpt.cpu"] = ("eval", {"FAMILY": family, "PROTOCOL": "erc", "SCALE": "cpu",
                                                       "CKPT": "$RUN/ckpts/run/global_step_3"})
    out["eval_gsm8k_erc_ckpt.cpu_smollm2"] = ("eval", {"FAMILY": "gsm8k", "PROTOCOL": "erc", "SCALE": "cpu",
                                                       "MODEL": "smollm2", "CKPT": "$RUN/ckpts/run/global_step_40"})
    for loss in ("vanilla", "clip_cov", "kl_cov", "grpo_erc", "gppo_erc", "high_entropy", "entropy_adv"):
        out[f"cpu_tiny_{loss}"] = ("cpu_tiny", {"LOSS": loss})
    out["cpu_tiny_grpo_erc.smollm2"] = ("cpu_tiny", {"MODEL": "smollm2"})
    return out


PINNED_CPU_FLAGS = ("avx512_bf16",)
"""The CPU flags every case is composed with: CPU mode's precision follows the CPU (``verl_ext.cpu.precision``), and
the pins show what a CPU with bf16 instructions composes, whatever machine composes them."""


def case_env(run_dir: Path, variables: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in RECIPE_VARIABLES and not k.startswith(("VERL_", "RAY_"))}
    env.update(HOME=str(run_dir / "home"), PYTHON=sys.executable, PRINT_CMD="1")
    env.update({k: v.replace("$RUN", str(run_dir)) for k, v in variables.items()})
    return env


def launch_command(script: str, env: dict[str, str], cwd: Path, args: tuple[str, ...] = ()) -> list[str]:
    """The command ``recipe/<script>.sh ARGS`` launches (``PRINT_CMD=1``), split as the shell would."""
    res = subprocess.run(["bash", str(RECIPE_DIR / f"{script}.sh"), *args], env=env, cwd=cwd, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    if res.returncode != 0:
        raise RuntimeError(f"{script}: exit {res.returncode}\n{res.stderr}")
    return shlex.split(res.stdout)


@contextmanager
def environment(env: dict[str, str], cwd: Path):
    """This process with ``env`` as its environment and ``cwd`` as its working folder, restored after."""
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def compose_command(cmd: list[str], env: dict[str, str], cwd: Path, resolve: Any = None) -> Any:
    """The config ``python -m verl_ext.main_ppo <args>`` composes in ``env`` and ``cwd`` (Hydra in this process, as
    the entry point composes it; nothing started), passed to ``resolve`` in that environment (default: resolved to
    YAML)."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    import verl_ext.main_ppo as entry

    assert cmd[1:3] == ["-m", "verl_ext.main_ppo"], cmd
    config_path = config_name = None
    rest = []
    it = iter(cmd[3:])
    for arg in it:
        if arg in ("--config-path", "-cp"):
            config_path = next(it)
        elif arg in ("--config-name", "-cn"):
            config_name = next(it)
        else:
            rest.append(arg)
    GlobalHydra.instance().clear()
    try:
        with environment(env, cwd), mock.patch.object(cpu_precision, "cpu_flags", lambda *_: set(PINNED_CPU_FLAGS)):
            if config_path:
                ctx = initialize_config_dir(config_dir=config_path, version_base=None)
            else:
                ctx = initialize_config_module(config_module="verl_ext.configs", version_base=None)
            with ctx:
                config = compose(config_name=config_name or entry.CONFIG_NAME, overrides=rest)
            return (resolve or (lambda c: OmegaConf.to_yaml(c, resolve=True)))(config)
    finally:
        GlobalHydra.instance().clear()


def compose_script(script: str, variables: dict[str, str], run_dir: Path, args: tuple[str, ...] = (),
                   resolve: Any = None) -> Any:
    """What ``recipe/<script>.sh ARGS`` launches with the environment ``variables`` in ``run_dir`` (see
    :func:`compose_command` for ``resolve``)."""
    env = case_env(run_dir, variables)
    cmd = launch_command(script, env, cwd=run_dir, args=args)
    env.pop("PRINT_CMD")
    if script == "cpu_tiny" or env.get("SCALE") == "cpu":
        env["VERL_PLATFORM"] = "cpu"  # exported by the launch script
    return compose_command(cmd, env, run_dir, resolve=resolve)


def compose_case(case: str, run_dir: Path) -> str:
    """A case's resolved config as YAML, with its working folder written as ``$RUN``."""
    script, variables = cases()[case]
    if "CKPT" in variables:  # a checkpoint folder, as verl writes it
        Path(variables["CKPT"].replace("$RUN", str(run_dir)), "actor").mkdir(parents=True, exist_ok=True)
    return compose_script(script, variables, run_dir).replace(str(run_dir), "$RUN")


def pin_path(case: str) -> Path:
    return PIN_DIR / f"{case}.yaml"


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print("usage: python tests/scripts/recipe_pins.py --write", file=sys.stderr)
        return 2
    PIN_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        (run_dir / "home").mkdir(parents=True)
        for case in cases():
            pin_path(case).write_text(compose_case(case, run_dir))
            print("wrote", pin_path(case))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
