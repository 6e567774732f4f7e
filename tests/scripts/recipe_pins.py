"""Every recipe's composed config, pinned as what it sets against verl's own defaults: the cases, how a case is
composed, and the files under ``tests/scripts/pinned/``.

A case is a launch script (``recipe/<name>.sh``) with a set of environment variables and Hydra arguments. Composing
it runs the script with ``PRINT_CMD=1`` (the exact command it would launch, with the overrides its variables became;
nothing started), then composes that command's Hydra arguments in this process through the entry point's own config
module and resolves it as the entry point does (:func:`verl_ext.startup.resolved`: paths absolute).

A pinned file holds every key whose value differs from verl's ``ppo_trainer`` defaults, and every key verl does not
have (verl_ext's own): what the recipe sets. verl's defaults the pins were made against are recorded once, in
``verl_defaults.yaml`` beside this file (``test_verl_defaults.py``): a verl upgrade shows there as one diff. The case's
working folder is written ``$RUN`` (its ``HOME`` is ``$RUN/home``), and CPU mode's precision is composed as on a CPU
with bf16 instructions (:data:`PINNED_CPU_FLAGS`), so the files depend neither on where the tests run nor on the CPU.

``python tests/scripts/recipe_pins.py --write`` rewrites every pinned file and the verl defaults from the current
scripts; the fast-tier tests compose the same cases and fail on any difference. Run it only when a change of what a
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

import yaml

from verl_ext.recipe import launch_env
from verl_ext.cpu import precision as cpu_precision

REPO = Path(__file__).resolve().parents[2]
RECIPE_DIR = Path(os.environ.get("VERL_EXT_PIN_RECIPE_DIR", REPO / "recipe"))
"""The launch scripts composed (``VERL_EXT_PIN_RECIPE_DIR`` replaces them, e.g. with an older copy to compare)."""
PIN_DIR = Path(os.environ.get("VERL_EXT_PIN_DIR", Path(__file__).resolve().parent / "pinned"))
"""The pinned files (``VERL_EXT_PIN_DIR`` writes or reads them elsewhere)."""
VERL_DEFAULTS = Path(__file__).resolve().parent / "verl_defaults.yaml"
"""verl's ``ppo_trainer`` defaults, resolved, that the pins were made against."""

GPU_RECIPES = ("gsm8k_grpo_vanilla", "gsm8k_grpo_clip_cov", "gsm8k_grpo_kl_cov", "gsm8k_grpo_kl_clip", "gsm8k_grpo_erc",
               "dapo_baseline", "dapo_clip_cov", "dapo_kl_cov", "dapo_grpo_erc", "dapo_gppo_erc", "dapo_high_entropy",
               "dapo_entropy_adv", "dapo_skywork", "dapo_entropic", "dapo_bapo")  # fmt: skip
"""The GPU recipes, each pinned at scale=gpu, scale=cpu (tiny model) and scale=cpu with cpu_model=smollm2."""

OTHER_VARIABLES = ("WANDB_API_KEY", "WANDB_MODE", "NETRC", "RAY_ADDRESS", "HYDRA_FULL_ERROR")
"""Variables besides the launcher's own (:data:`verl_ext.recipe.launch_env.VARIABLES`) that a launch reads: removed
from the environment of a case, which sets its own."""

Case = tuple[str, dict[str, str], tuple[str, ...]]
"""(script name, environment variables, Hydra arguments)."""


def cases() -> dict[str, Case]:
    """Pinned case name -> (script name, the environment variables and the arguments it is run with)."""
    out: dict[str, Case] = {}
    for name in GPU_RECIPES:
        out[f"{name}.gpu"] = (name, {}, ())
        out[f"{name}.cpu"] = (name, {"SCALE": "cpu"}, ())
        out[f"{name}.cpu_smollm2"] = (name, {"SCALE": "cpu", "MODEL": "smollm2"}, ())
    for family in ("dapo", "gsm8k"):
        for protocol in ("erc", "dapo", "greedy", "custom"):
            out[f"eval_{family}_{protocol}.gpu"] = ("eval", {}, (f"family={family}", f"eval_protocol={protocol}"))
        out[f"eval_{family}_erc_ckpt.cpu"] = ("eval", {"SCALE": "cpu", "CKPT": "$RUN/ckpts/run/global_step_3"},
                                              (f"family={family}",))  # fmt: skip
    out["eval_gsm8k_erc_ckpt.cpu_smollm2"] = ("eval", {"SCALE": "cpu", "MODEL": "smollm2",
                                                       "CKPT": "$RUN/ckpts/run/global_step_40"}, ("family=gsm8k",))
    for loss in ("vanilla", "clip_cov", "kl_cov", "grpo_erc", "gppo_erc", "high_entropy", "entropy_adv", "bapo"):
        out[f"cpu_tiny_{loss}"] = ("cpu_tiny", {"LOSS": loss}, ())
    out["cpu_tiny_grpo_erc.smollm2"] = ("cpu_tiny", {"MODEL": "smollm2"}, ())
    return out


PINNED_CPU_FLAGS = ("avx512_bf16",)
"""The CPU flags every case is composed with: CPU mode's precision follows the CPU (``verl_ext.cpu.precision``), and
the pins show what a CPU with bf16 instructions composes, whatever machine composes them."""


def case_env(run_dir: Path, variables: dict[str, str]) -> dict[str, str]:
    dropped = set(launch_env.names()) | set(OTHER_VARIABLES)
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(("VERL_", "RAY_"))}
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


def split_command(cmd: list[str]) -> tuple[str | None, str | None, list[str]]:
    """``python -m verl_ext.main_ppo`` arguments: (config path, config name, Hydra overrides)."""
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
    return config_path, config_name, rest


def compose(config_path: str | None, config_name: str | None, overrides: list[str]) -> Any:
    """The config ``python -m verl_ext.main_ppo`` composes from these arguments (Hydra in this process; nothing
    resolved or started), with CPU mode's precision as on :data:`PINNED_CPU_FLAGS`."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    import verl_ext.main_ppo as entry

    GlobalHydra.instance().clear()
    try:
        if config_path:
            ctx = initialize_config_dir(config_dir=config_path, version_base=None)
        else:
            ctx = initialize_config_module(config_module="verl_ext.configs", version_base=None)
        with ctx:
            return hydra_compose(config_name=config_name or entry.CONFIG_NAME, overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def compose_command(cmd: list[str], env: dict[str, str], cwd: Path,
                    cpu_flags: tuple[str, ...] = PINNED_CPU_FLAGS) -> Any:  # fmt: skip
    """The config ``cmd`` (a ``python -m verl_ext.main_ppo`` command) runs with, composed in ``env`` and ``cwd`` and
    resolved as the entry point resolves it, on a CPU with ``cpu_flags``."""
    from verl_ext.startup import resolved

    with environment(env, cwd), mock.patch.object(cpu_precision, "cpu_flags", lambda *_: set(cpu_flags)):
        return resolved(compose(*split_command(cmd)))


def compose_script(script: str, variables: dict[str, str], run_dir: Path, args: tuple[str, ...] = (),
                   cpu_flags: tuple[str, ...] = PINNED_CPU_FLAGS) -> Any:  # fmt: skip
    """The resolved config ``recipe/<script>.sh ARGS`` launches with the environment ``variables`` in ``run_dir``, on
    a CPU with ``cpu_flags`` (:data:`PINNED_CPU_FLAGS`). A case that names no path of ``run_dir`` is composed once
    per test run and shared by every test that composes it (:func:`_shared`)."""
    key = (script, tuple(sorted(variables.items())), tuple(args), tuple(sorted(cpu_flags)), str(RECIPE_DIR))
    shareable = "$RUN" not in repr(key)
    if shareable and (hit := _shared(key, run_dir)) is not None:
        return hit
    env = case_env(run_dir, variables)
    cmd = launch_command(script, env, cwd=run_dir, args=args)
    env.pop("PRINT_CMD")
    config = compose_command(cmd, env, run_dir, cpu_flags)
    if shareable:
        _share(key, config, run_dir)
    return config


SHARED_DIR_VAR = "PYTEST_XDIST_TESTRUNUID"
"""pytest-xdist's id of the test run, the same in every worker: the compositions are shared through a folder named by
it (without xdist, within the process only)."""

_compositions: dict[str, str] = {}

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""The shared compositions' YAML: libyaml's safe loader and dumper where PyYAML has them (a composition loads in
~0.02 s instead of ~0.2 s with the pure-Python loader; every shared hit loads one), the same safe subset either way.
The pinned files keep the pure-Python dumper (:func:`dump`), whose layout they were written with."""


def _shared_file(key: tuple) -> Path | None:
    import hashlib

    run = os.environ.get(SHARED_DIR_VAR)
    if not run:
        return None
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:24]
    return Path(tempfile.gettempdir()) / f"verl_ext_compositions_{run}" / f"{digest}.yaml"


def _shared(key: tuple, run_dir: Path) -> Any:
    """A composition of ``key`` made earlier in this test run, with its working folder made ``run_dir``, or ``None``.
    Stored resolved, its working folder written ``$RUN`` (as the pinned files); a case's composition depends on its
    script, variables, arguments and CPU flags only."""
    from omegaconf import OmegaConf

    text = _compositions.get(repr(key))
    path = _shared_file(key)
    if text is None and path is not None and path.is_file():
        text = path.read_text()
    if text is None:
        return None
    return OmegaConf.create(yaml.load(text.replace("$RUN", str(run_dir)), Loader=_LOADER))


def _share(key: tuple, config: Any, run_dir: Path) -> None:
    from omegaconf import OmegaConf

    text = yaml.dump(OmegaConf.to_container(config), Dumper=_DUMPER, sort_keys=False).replace(str(run_dir), "$RUN")
    _compositions[repr(key)] = text
    path = _shared_file(key)
    if path is not None:
        path.parent.mkdir(exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}")
        partial.write_text(text)
        partial.replace(path)


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> leaf value (a list is a leaf) of a plain container."""
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: node}


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`flatten` (keys in the order given)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def verl_defaults() -> dict[str, Any]:
    """verl's ``ppo_trainer`` config, resolved, as a plain container (HOME is ``$RUN/home``: see :func:`dump`)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            return OmegaConf.to_container(hydra_compose(config_name="ppo_trainer"), resolve=True)
    finally:
        GlobalHydra.instance().clear()


def dump(container: Any, run_dir: Path) -> str:
    """YAML of ``container`` with ``run_dir`` written ``$RUN``."""
    return yaml.safe_dump(container, sort_keys=False, default_flow_style=False, width=120).replace(str(run_dir), "$RUN")


def against_defaults(config: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """What ``config`` sets against ``defaults``: the keys whose value differs or that ``defaults`` lacks, nested; a
    key of ``defaults`` that ``config`` lacks is listed under ``_unset``."""
    from omegaconf import OmegaConf

    got = flatten(OmegaConf.to_container(config) if not isinstance(config, dict) else config)
    base = flatten(defaults)
    diff = {key: value for key, value in got.items() if key not in base or base[key] != value}
    unset = sorted(key for key in base if key not in got and not any(k.startswith(key + ".") for k in got))
    out = nest(diff)
    if unset:
        out["_unset"] = unset
    return out


def compose_case(case: str, run_dir: Path, defaults: dict[str, Any]) -> str:
    """A case's pinned text: what it sets against verl's ``defaults``, with its working folder written as ``$RUN``."""
    script, variables, args = cases()[case]
    if "CKPT" in variables:  # a checkpoint folder, as verl writes it
        Path(variables["CKPT"].replace("$RUN", str(run_dir)), "actor").mkdir(parents=True, exist_ok=True)
    config = compose_script(script, variables, run_dir, args)
    return dump(against_defaults(config, defaults), run_dir)


def pin_path(case: str) -> Path:
    return PIN_DIR / f"{case}.yaml"


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print("usage: python tests/scripts/recipe_pins.py --write", file=sys.stderr)
        return 2
    PIN_DIR.mkdir(exist_ok=True)
    for old in PIN_DIR.glob("*.yaml"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        (run_dir / "home").mkdir(parents=True)
        defaults = verl_defaults()
        VERL_DEFAULTS.write_text(dump(defaults, run_dir))
        print("wrote", VERL_DEFAULTS)
        for case in cases():
            pin_path(case).write_text(compose_case(case, run_dir, defaults))
            print("wrote", pin_path(case))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
