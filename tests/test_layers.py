"""The package layout holds: every module's verl_ext imports go to its own package or to a lower one.

Levels (docs/ARCHITECTURE.md): config, contract, versions, gcs_store, recipe 0; losses, control, cpu, analysis, evaluation, failures 1; registration, testbed, configs 2;
driver 3; trainer 4; checks 5; demo 6; startup 7; the package root and the ``python -m`` entry points above everything. Imports
inside functions count too, and no two modules import each other, directly or through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "verl_ext"
OUTSIDE = {"verl_ext.configs": ROOT / "configs", "verl_ext.recipe": ROOT / "recipe"}
"""The packages the wheel installs from folders beside ``verl_ext/`` (pyproject's ``package-dir``)."""

LEVELS = {
    "verl_ext.config": 0,
    "verl_ext.contract": 0,
    "verl_ext.versions": 0,
    "verl_ext.recipe": 0,
    "verl_ext.gcs_store": 0,
    "verl_ext.failures": 1,
    "verl_ext.losses": 1,
    "verl_ext.control": 1,
    "verl_ext.cpu": 1,
    "verl_ext.analysis": 1,
    "verl_ext.evaluation": 1,
    "verl_ext.registration": 2,
    "verl_ext.testbed": 2,
    "verl_ext.configs": 2,
    "verl_ext.driver": 3,
    "verl_ext.trainer": 4,
    "verl_ext.checks": 5,
    "verl_ext.demo": 6,
    "verl_ext.startup": 7,
    "verl_ext": 9,
    "verl_ext.main_ppo": 9,
    "verl_ext.analyze": 9,
}


def unit_of(module: str) -> str:
    """The unit (package or top-level module) a dotted module name belongs to."""
    parts = module.split(".")
    if len(parts) >= 2 and ".".join(parts[:2]) in LEVELS:
        return ".".join(parts[:2])
    return parts[0]


def package_dir(package: str) -> Path:
    """The folder of a package of :data:`LEVELS`."""
    return OUTSIDE.get(package, PACKAGE / package.split(".")[-1])


def module_name(path: Path) -> str:
    outside = next((unit for unit, folder in OUTSIDE.items() if path.is_relative_to(folder)), None)
    if outside is not None:
        parts = [*outside.split("."), *path.relative_to(OUTSIDE[outside]).with_suffix("").parts]
    else:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def verl_ext_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every ``import verl_ext...`` / ``from verl_ext... import ...`` in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "verl_ext"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "verl_ext":
            if node.module == "verl_ext":  # from verl_ext import losses -> verl_ext.losses
                found += [(node.lineno, f"verl_ext.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


MODULES = sorted(PACKAGE.rglob("*.py")) + sorted(p for folder in OUTSIDE.values() for p in folder.rglob("*.py"))
PACKAGES = [p for p in LEVELS if (package_dir(p) / "__init__.py").exists()]
"""The units of :data:`LEVELS` that are packages (their ``__init__`` says what lives there and what they import)."""


def test_every_module_belongs_to_a_known_unit():
    unknown = {module_name(p) for p in MODULES if unit_of(module_name(p)) not in LEVELS}
    assert not unknown, f"modules outside the documented layout: {sorted(unknown)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_module_imports_a_higher_or_sibling_package(path):
    here = unit_of(module_name(path))
    for line, target in verl_ext_imports(path):
        there = unit_of(target)
        if there == here:
            continue
        assert there in LEVELS, f"{path}:{line} imports {target}, outside the layout"
        assert LEVELS[there] < LEVELS[here], (
            f"{path.relative_to(ROOT)}:{line} ({here}, level {LEVELS[here]}) imports {target} ({there}, level "
            f"{LEVELS[there]}): a package may import only lower ones"
        )


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_says_what_lives_there_and_what_it_may_import(package):
    doc = ast.get_docstring(ast.parse((package_dir(package) / "__init__.py").read_text())) or ""
    assert len(doc.splitlines()) >= 3, f"{package}/__init__.py needs a docstring map"
    assert "may import" in doc.lower(), f"{package}/__init__.py must say what it may import"


def declared_imports(package: str) -> set[str]:
    """The verl_ext units a package's ``__init__`` docstring says it may import: the ones it names in its "May
    import" paragraph (````verl_ext.x```` or ````x````), or every lower one when it says "every lower"."""
    import re

    doc = ast.get_docstring(ast.parse((package_dir(package) / "__init__.py").read_text())) or ""
    para = next(p for p in doc.split("\n\n") if "may import" in p.lower())
    text = para[para.lower().index("may import"):]
    if "every lower" in text.lower():
        return {unit for unit, level in LEVELS.items() if level < LEVELS[package]}
    return {f"verl_ext.{name}" for name in re.findall(r"``(?:verl_ext\.)?([a-z_]+)``", text)} & set(LEVELS)


@pytest.mark.parametrize("package", PACKAGES)
def test_each_packages_docstring_names_every_verl_ext_package_it_imports(package):
    """The words hold as the arrows do: what a package's modules import of verl_ext is among what its ``__init__``
    says it may import."""
    imported = set()
    for path in MODULES:
        if unit_of(module_name(path)) == package:
            imported |= {unit_of(target) for _, target in verl_ext_imports(path)} - {package}
    assert imported <= declared_imports(package), (
        f"{package}/__init__.py's 'May import' leaves out {sorted(imported - declared_imports(package))}")


def test_test_file_names_are_unique():
    """Test folders are not packages, so pytest (and spawned test workers) import test files by their name."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def resolve(target: str, known: set[str]) -> str | None:
    """The module an import names: itself, or the package it is in when it names an attribute of that package."""
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def imported_modules(path: Path) -> list[str]:
    """Every verl_ext module the file imports; ``from a.b import c`` names ``a.b.c`` (``resolve`` falls back to
    ``a.b`` when ``c`` is an attribute)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "verl_ext"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "verl_ext":
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return found


def test_no_two_modules_import_each_other_directly_or_through_others():
    """An import circle between modules (``a`` imports ``b`` and ``b`` imports ``a``, at module level or inside a
    function, through any number of other modules) fails; a package's ``__init__`` counts as a module."""
    graph: dict[str, set[str]] = {}
    known = {module_name(p) for p in MODULES}
    for path in MODULES:
        here = module_name(path)
        graph[here] = {m for t in imported_modules(path) if (m := resolve(t, known)) and m != here}
    seen: dict[str, int] = {}  # 1 on the current path, 2 done
    path_stack: list[str] = []

    def visit(node: str) -> None:
        seen[node] = 1
        path_stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if seen.get(nxt) == 1:
                circle = path_stack[path_stack.index(nxt):] + [nxt]
                pytest.fail("import circle: " + " -> ".join(circle))
            if nxt not in seen:
                visit(nxt)
        path_stack.pop()
        seen[node] = 2

    for node in sorted(graph):
        if node not in seen:
            visit(node)


def test_the_circle_check_finds_a_circle(monkeypatch, tmp_path):
    """The check above can fail: two modules that import each other inside functions make a circle."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("def f():\n    from verl_ext.x import b\n")
    b.write_text("def g():\n    import verl_ext.x.a\n")
    names = {a: "verl_ext.x.a", b: "verl_ext.x.b"}
    monkeypatch.setattr(__import__(__name__), "MODULES", [a, b])
    monkeypatch.setattr(__import__(__name__), "module_name", lambda p: names[p])
    with pytest.raises(pytest.fail.Exception, match="import circle: verl_ext.x.a -> verl_ext.x.b -> verl_ext.x.a"):
        test_no_two_modules_import_each_other_directly_or_through_others()
