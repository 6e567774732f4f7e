"""A launch of ``python -m verl_ext.main_ppo`` run in the test process: what the fast tier checks instead of starting a
Python process (~10 s of ``import verl`` each) per composition.

:func:`run_main_ppo` does what ``python -m verl_ext.main_ppo ARGS`` does, in this process: Hydra's compose API with the
entry point's own search path (``verl_ext.main_ppo.CONFIG_PATH`` / ``CONFIG_NAME``, or the ``--config-path`` /
``--config-name`` a recipe's launcher gives), then the entry point's own :func:`verl_ext.main_ppo.run` (the version
check, the losses' registration, the platform check, the recipe's start-up and the validation the command runs),
in the launch's environment and working folder, with its stdout, stderr (warnings and log records included) and exit
status as the process would give them: 0 or 2 from ``run``, 1 with the traceback for an exception (a Hydra
composition error among them). hydra.main's ``--cfg job [--resolve]`` prints the composed config instead, as
hydra.main does.

:func:`run_launcher` runs a shell command (a recipe script, ``scripts/gpu_smoke.sh``, a documented command) for real,
with ``PYTHON`` and the ``python``/``python3`` on ``PATH`` replaced by a recorder that runs every Python command for
real except ``-m verl_ext.main_ppo``, which it records (arguments, environment, working folder) instead; each recorded
launch is then run by :func:`run_main_ppo`. The shell's own handling of variables and arguments, the exports it makes
(``VERL_PLATFORM=cpu``) and the assets it builds are the script's; only the last process is replaced. What only a
process shows (the exit status of ``sys.exit``, no traceback for a bad value, a fresh interpreter's plugin
registration) stays with the tests that launch one.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shlex
import subprocess
import sys
import traceback
import warnings
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))  # recipe_pins, beside this file (loaded by path elsewhere)
from recipe_pins import environment  # noqa: E402  (the pins' own swap of environment and folder)

RECORD_VAR = "PYTEST_VERL_EXT_LAUNCHES"
"""The file the recorder appends each launch to (one JSON object a line); PYTEST_*: tests drop VERL_* variables."""

RECORDER = """#!/usr/bin/env bash
# records `python -m verl_ext.main_ppo ARGS` (tests/scripts/launch_record.py); runs any other Python command
if [[ "${{1:-}}" == -m && "${{2:-}}" == verl_ext.main_ppo ]]; then
    exec {python} -S -c 'import json, os, sys
with open(os.environ["{var}"], "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}) + "\\n")' "${{@:3}}"
fi
exec {python} "$@"
"""


@dataclass
class Result:
    """What a command gave: its exit status and its output (the shape of ``subprocess.CompletedProcess``)."""

    returncode: int
    stdout: str
    stderr: str
    launches: list[dict] = field(default_factory=list)
    """The ``python -m verl_ext.main_ppo`` commands the shell launched and this process ran (:func:`run_launcher`),
    each as recorded: ``argv``, ``env`` (the environment the process would have had) and ``cwd``."""

    environ_changes: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    """What the in-process entry points changed in their environment: variable -> (before, after)."""

    @property
    def launched(self) -> int:
        """How many ``python -m verl_ext.main_ppo`` commands ran in this process."""
        return len(self.launches)


def split_arguments(argv: list[str]) -> tuple[str | None, str | None, list[str]]:
    """``python -m verl_ext.main_ppo`` arguments: (config path, config name, Hydra overrides); hydra.main's
    ``--cfg job`` and ``--resolve`` are left out (:func:`run_main_ppo` reads them)."""
    config_path = config_name = None
    rest: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg == "--cfg":
            assert next(it) == "job", "only --cfg job runs in this process"
        elif arg == "--resolve":
            pass
        elif arg in ("--config-path", "-cp"):
            config_path = next(it)
        elif arg in ("--config-name", "-cn"):
            config_name = next(it)
        elif arg.startswith(("--config-path=", "--config-name=")):
            key, _, value = arg.partition("=")
            config_path, config_name = (value, config_name) if key == "--config-path" else (config_path, value)
        else:
            assert not arg.startswith("-"), f"{arg}: a flag of hydra.main that this in-process launch does not run"
            rest.append(arg)
    return config_path, config_name, rest


def compose_entry_point(argv: list[str]):
    """The config ``python -m verl_ext.main_ppo ARGV`` composes (Hydra's compose API, the entry point's search path:
    its ``CONFIG_PATH`` package, or ``--config-path`` as hydra.main reads it, against the working folder)."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    import verl_ext.main_ppo as entry

    config_path, config_name, overrides = split_arguments(argv)
    GlobalHydra.instance().clear()
    try:
        if config_path:
            ctx = initialize_config_dir(config_dir=str(Path(config_path).absolute()), version_base=None)
        else:
            ctx = initialize_config_module(config_module=entry.CONFIG_PATH.removeprefix("pkg://"), version_base=None)
        with ctx:
            return compose(config_name=config_name or entry.CONFIG_NAME, overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def _no_restart(*args, **kwargs):
    raise AssertionError("verl_ext.main_ppo restarted itself (os.execve): the launch's environment lacks VERL_PLATFORM")


def run_main_ppo(argv: list[str], env: dict[str, str], cwd: Path | str) -> Result:
    """What ``python -m verl_ext.main_ppo ARGV`` does in ``env`` and ``cwd``, run in this process (nothing
    started for a dry run): its exit status, stdout and stderr."""
    import verl_ext.main_ppo as entry

    out, err = io.StringIO(), io.StringIO()
    records = logging.StreamHandler(err)
    records.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(records)
    try:
        with environment(env, cwd), redirect_stdout(out), redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught, mock.patch("os.execve", _no_restart):  # fmt: skip
            warnings.simplefilter("default")  # each warning once, as in a fresh interpreter
            try:
                if "--cfg" in argv:  # hydra.main prints the job's config (resolved with --resolve) and runs nothing
                    from omegaconf import OmegaConf

                    print(OmegaConf.to_yaml(compose_entry_point(argv), resolve="--resolve" in argv), end="")
                    status = 0
                else:
                    status = entry.run(compose_entry_point(argv))
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 1
            except Exception:  # noqa: BLE001 - the process would die with the traceback and exit 1
                traceback.print_exc(file=err)
                status = 1
            changes = {k: (env.get(k), os.environ.get(k)) for k in {*env, *os.environ} if env.get(k) != os.environ.get(k)}
    finally:
        root.removeHandler(records)
    shown = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in caught)
    return Result(status or 0, out.getvalue(), shown + err.getvalue(), environ_changes=changes)


def recorder(folder: Path) -> Path:
    """A folder holding the recorder as ``python`` and ``python3`` (put it first on ``PATH``, or name it ``PYTHON``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        path = folder / name
        path.write_text(RECORDER.format(python=shlex.quote(sys.executable), var=RECORD_VAR))
        path.chmod(0o755)
    return folder / "python"


def run_launcher(command: list[str] | str, env: dict[str, str], cwd: Path | str, timeout: int = 120,
                 record_dir: Path | None = None) -> Result:
    """Run ``command`` (an argument list, or a line for ``bash -c``) for real with the recorder as its Python, then
    each ``python -m verl_ext.main_ppo`` it launched in this process (:func:`run_main_ppo`). The exit status is the
    command's when it failed on its own, else the last launch's; the output is the command's, then the launches'.
    The recorder and its record live in ``record_dir`` (default: ``cwd/.launch_record``)."""
    folder = Path(record_dir) if record_dir is not None else Path(cwd) / ".launch_record"
    python = recorder(folder / "bin")
    record = folder / "launches.jsonl"
    record.unlink(missing_ok=True)
    env = {**env, "PYTHON": str(python), RECORD_VAR: str(record),
           "PATH": os.pathsep.join([str(python.parent), env.get("PATH", os.defpath)])}  # fmt: skip
    argv = ["bash", "-c", command] if isinstance(command, str) else command
    shell = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    result = Result(shell.returncode, shell.stdout, shell.stderr)
    if shell.returncode != 0 or not record.exists():
        return result
    for line in record.read_text().splitlines():
        launch = json.loads(line)
        launch["env"].pop(RECORD_VAR, None)
        done = run_main_ppo(launch["argv"], launch["env"], launch["cwd"])
        result = Result(done.returncode, result.stdout + done.stdout, result.stderr + done.stderr,
                        [*result.launches, launch], {**result.environ_changes, **done.environ_changes})
    return result

