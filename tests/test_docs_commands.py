"""The commands shown in README.md and docs/*.md run as written, where they can run on a CPU without a cluster:
every fenced ``bash`` line that is a dry run or prints a command (``DRY_RUN=1``, ``PRINT_CMD=1``,
``--dry-run``, ``verl_ext.dry_run=true``, ``--help``) runs here and must exit 0. (``.ci/run`` runs the Quick
start's commands themselves; ``tests/test_config_and_registration.py`` checks that it runs them verbatim.)

Each command runs for real in ``bash`` from the repository root, except the ``python -m verl_ext.main_ppo`` it reaches
(directly or through a recipe script), which runs in the test process with the environment, working folder and
arguments the command gave it (``tests/scripts/launch_record.py``: Hydra's compose API with the entry point's own
search path, then the entry point's own ``run``, whose exit status must be 0). That the launched process itself exits
with the entry point's status is checked once, by ``tests/scripts/test_recipes.py``'s real launch.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = ("DRY_RUN=1", "PRINT_CMD=1", "--dry-run", "verl_ext.dry_run=true", "--help")


def documented_commands() -> list[tuple[str, str]]:
    """``(file, command)`` for every runnable line of every fenced bash block (continuations joined)."""
    found = []
    for path in DOCS:
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                command = line.split(" # ")[0].strip()
                if command and not command.startswith("#") and any(m in command for m in RUNNABLE):
                    found.append((str(path.relative_to(ROOT)), command))
    return found


COMMANDS = documented_commands()


def test_the_docs_show_runnable_commands():
    assert len(COMMANDS) >= 5, COMMANDS


@pytest.mark.parametrize(("doc", "command"), COMMANDS, ids=[f"{d}:{c[:40]}" for d, c in COMMANDS])
def test_documented_command_runs(doc, command, tmp_path, launch_record):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RAY_"))}
    env.update(HOME=str(tmp_path), PYTHON=sys.executable, HYDRA_FULL_ERROR="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")  # fmt: skip
    res = launch_record.run_launcher(command, env=env, cwd=ROOT, record_dir=tmp_path, timeout=300)
    assert res.returncode == 0, f"{doc}: `{command}` exited {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    launches_entry_point = "DRY_RUN=1" in command or "verl_ext.main_ppo" in command
    assert res.launched == int(launches_entry_point), (res.launched, res.stdout[-2000:], res.stderr[-3000:])
