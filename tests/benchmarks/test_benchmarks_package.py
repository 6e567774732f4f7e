"""``benchmarks`` is a package of the repository root (pyproject's pytest ``pythonpath``): tests and the benchmarks
that use a sibling import it by its package name, and nothing reaches a benchmark module through ``sys.path``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
SIBLINGS = {p.stem for p in BENCHMARKS.glob("*.py")} - {"__init__"}
SOURCES = sorted(BENCHMARKS.glob("*.py")) + sorted((ROOT / "tests" / "benchmarks").glob("*.py"))


def test_benchmarks_imports_as_the_repositorys_package():
    import benchmarks
    from benchmarks import bench_trainer

    assert Path(benchmarks.__file__).resolve() == BENCHMARKS / "__init__.py"  # a regular package, not a namespace
    assert Path(bench_trainer.__file__).resolve().parent == BENCHMARKS


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_sys_path_change_and_siblings_by_the_package_name(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
            pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno}: sys.path; import benchmarks.<module> instead")
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        bare = [name for name in names if name.split(".")[0] in SIBLINGS]
        assert not bare, f"{path.relative_to(ROOT)}:{node.lineno}: import {bare} as benchmarks.{bare[0]}"
