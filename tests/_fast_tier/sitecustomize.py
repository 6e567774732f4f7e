"""The fast tier's guard: in a process of a test that is not marked ``e2e``, starting a Ray node or a vLLM engine
raises instead of running.

``tests/conftest.py`` puts this folder first on ``PYTHONPATH`` and sets ``PYTEST_VERL_EXT_FAST_TIER=1`` for every test of the
default run, so the guard holds in the pytest process and in every Python process a test starts (a recipe script, a
``python -m ...``, a spawned worker): Python imports ``sitecustomize`` at start-up. It wraps, when their modules are
first imported, the two constructors every real launch goes through: ``ray._private.node.Node`` (``ray.init`` starting
or joining a cluster, ``ray start``) and ``vllm.v1.engine.core.EngineCore`` (every vLLM engine). A test that needs
either belongs to the end-to-end tier: ``@pytest.mark.e2e``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

GUARDED = {"ray._private.node": "Node", "vllm.v1.engine.core": "EngineCore"}
"""Module -> the class whose construction starts a Ray node / a vLLM engine."""

MESSAGE = ("verl_ext's fast test tier: this test started {what} ({module}.{cls}) but is not marked e2e; mark it "
           "@pytest.mark.e2e (run with python -m pytest -m e2e) or do not start one")  # fmt: skip


def _refusing(cls: type, module: str) -> None:
    """Replace ``cls.__init__`` by one that refuses while ``PYTEST_VERL_EXT_FAST_TIER=1`` (read at each call: a session that
    runs both tiers sets it only around the fast tier's tests)."""
    what = "a Ray node" if module.startswith("ray") else "a vLLM engine"
    original = cls.__init__

    def __init__(self, *args, **kwargs):  # noqa: N807 - replaces the class's constructor
        if os.environ.get("PYTEST_VERL_EXT_FAST_TIER") == "1":
            raise RuntimeError(MESSAGE.format(what=what, module=module, cls=cls.__name__))
        original(self, *args, **kwargs)

    cls.__init__ = __init__


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, name: str):
        self.inner, self.name = inner, name

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        _refusing(getattr(module, GUARDED[self.name]), self.name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in GUARDED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, name)
        return spec


def install() -> None:
    """Guard this process (idempotent); modules already imported are wrapped at once."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    for name, cls in GUARDED.items():
        if name in sys.modules:
            _refusing(getattr(sys.modules[name], cls), name)
    sys.meta_path.insert(0, _Finder())


def _chain() -> None:
    """Run the ``sitecustomize`` this one shadows (the interpreter's or the environment's own), if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


if __name__ == "sitecustomize":  # imported at a process's start-up (tests/conftest.py loads it under another name)
    if os.environ.get("PYTEST_VERL_EXT_FAST_TIER") == "1":
        install()
    _chain()
