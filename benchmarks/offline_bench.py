"""Run ``benchmarks.bench_losses`` on a GPU machine that has no network and no Ray (an offline box with PyTorch).

verl imports Ray, TransferQueue and a few service clients at import time; the loss benchmark calls none of them.
Where such a package is not installed, this module puts a permissive stand-in in its place (an installed one is
always used), prints the versions, and runs the benchmark with the given arguments:

    python -m benchmarks.offline_bench --no-engine --batch 64 --seq 4096 --repeats 20 --json out.json

The H200 rows of docs/results_performance.md were measured this way (verl 0.9.1, tensordict, omegaconf, hydra,
codetiming, pyvers, orjson, jmespath and verl_ext installed from wheels; Ray, TransferQueue, msgspec, zmq, datasets,
dill stood in).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

STUBBED = ("ray", "transfer_queue", "msgspec", "zmq", "datasets", "dill", "pybind11", "wandb", "mooncake", "yr",
           "torchdata", "pylatexenc", "math_verify", "tensorboard", "swanlab", "mlflow", "vllm", "sglang")


class _Anything(types.ModuleType):
    __path__: list = []

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Dummy(f"{self.__name__}.{name}")


class _Dummy:
    def __init__(self, name):
        self._name = name

    def __call__(self, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]
        return _Dummy(self._name + "()")

    def __getattr__(self, name):
        return _Dummy(f"{self._name}.{name}")

    def __mro_entries__(self, bases):
        return (object,)

    def __or__(self, other):
        return object

    __ror__ = __or__

    def __getitem__(self, item):
        return _Dummy(self._name + "[]")

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        root = fullname.split(".")[0]
        if root not in STUBBED:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            try:
                spec = finder.find_spec(fullname, path, target)
            except Exception:
                spec = None
            if spec is not None and not FORCE:
                return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        m = _Anything(spec.name)
        m.__path__ = []
        m.__version__ = "0.0.0-stub"
        return m

    def exec_module(self, module):
        pass


FORCE = False


def install(force: bool = False) -> None:
    global FORCE
    FORCE = force
    sys.meta_path.insert(0, _Finder())


def main(argv: list[str] | None = None) -> int:
    install(force=False)
    import platform
    import runpy

    import torch

    print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
          "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, flush=True)
    sys.argv = ["benchmarks.bench_losses", *(sys.argv[1:] if argv is None else argv)]
    runpy.run_module("benchmarks.bench_losses", run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
