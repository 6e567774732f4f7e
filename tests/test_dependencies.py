"""A test that needs a dependency the project requires fails where it is missing instead of skipping: a skip would
hide a broken install as a green run. Required here: pyproject's dependencies and its ``test`` and ``cpu`` extras
(``scripts/install_cpu.sh`` installs ``.[test,cpu]``), and what verl itself requires (its unconditional
requirements: ``tensorboard``, ``transformers``, ...)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _key(name: str) -> str:
    """A distribution or module name compared loosely (``TransferQueue`` = ``transfer_queue``)."""
    return re.sub(r"[-_.]", "", name).lower()


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]


def required() -> set[str]:
    extras = PROJECT["optional-dependencies"]
    requirements = [*PROJECT["dependencies"], *extras["test"], *extras["cpu"]]
    requirements += [r for r in importlib.metadata.requires("verl") or [] if "extra ==" not in r]
    return {_key(_name(r)) for r in requirements}


def importorskips() -> list[tuple[str, int, str]]:
    """``(file, line, module)`` of every ``pytest.importorskip("module")`` under tests/."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "importorskip" and node.args
                    and isinstance(node.args[0], ast.Constant)):  # fmt: skip
                found.append((str(path.relative_to(ROOT)), node.lineno, node.args[0].value))
    return found


def test_no_test_skips_on_a_missing_required_dependency():
    hard = required()
    providers = importlib.metadata.packages_distributions()
    skips = []
    for path, line, module in importorskips():
        top = module.split(".")[0]
        if {_key(top), *(_key(d) for d in providers.get(top, []))} & hard:
            skips.append(f"{path}:{line}: importorskip({module!r})")
    assert not skips, "import required dependencies plainly (a failure where missing): " + "; ".join(skips)


def test_the_test_extra_has_gguf_with_the_cpu_extras_pin():
    """tests/cpu/test_smollm2.py imports gguf, which the real model's installer needs (``cpu`` extra)."""
    extras = PROJECT["optional-dependencies"]
    gguf = [r for r in extras["cpu"] if _key(_name(r)) == "gguf"]
    assert gguf and all(r in extras["test"] for r in gguf), (extras["cpu"], extras["test"])
