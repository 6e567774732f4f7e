"""Fault injection for tests/e2e/test_e2e_cpu.py: the engine process of verl's vLLM rollout server dies during the
``VERL_EXT_TEST_KILL_AT_SYNC``-th weight sync, as when Ray's memory monitor or the kernel's OOM killer takes it.

verl imports this module in each of its processes (``VERL_USE_EXTERNAL_MODULES``), before CPU mode can import vLLM;
so it waits for verl's worker extension (``verl.workers.rollout.vllm_rollout.utils``) to load, and wraps its
``update_weights_from_ipc`` (run by vLLM's worker): the N-th call SIGKILLs the engine process and writes a line to
``VERL_EXT_TEST_KILL_LOG``. The engine is the worker's own process where vLLM runs the model in it (executor ``uni``,
CPU mode's TP 1: the process multiprocessing names ``EngineCore``), else the worker's parent (executor ``mp``: the
worker is ``VllmWorker-<rank>``). verl's server actor lives on; the trainer's weight sync then waits on the dead
engine. ``VERL_EXT_TEST_STALL_AT_SYNC`` instead makes the N-th call wait for ever (a receiver that never acknowledges,
as verl's LoRA loading on vLLM's CPU build fails inside it): every actor and every engine stays alive, and only the
watchdog's stall check can stop the run. Not part of verl_ext: a test's tool."""
import importlib.abc
import importlib.util
import multiprocessing
import os
import signal
import sys

KILL_AT = int(os.environ.get("VERL_EXT_TEST_KILL_AT_SYNC", "0"))
STALL_AT = int(os.environ.get("VERL_EXT_TEST_STALL_AT_SYNC", "0"))
TARGET = "verl.workers.rollout.vllm_rollout.utils"
LOG = os.environ.get("VERL_EXT_TEST_KILL_LOG")


def _patch(module):
    for name in dir(module):
        cls = getattr(module, name)
        if isinstance(cls, type) and "update_weights_from_ipc" in vars(cls):
            original, count = cls.update_weights_from_ipc, {"n": 0}

            def wrapped(self, *args, _original=original, **kwargs):
                count["n"] += 1
                if count["n"] == STALL_AT:
                    import threading

                    with open(LOG, "a") as f:
                        f.write(f"sync {count['n']}: pid {os.getpid()} waits for ever\n")
                    threading.Event().wait()
                if count["n"] == KILL_AT:
                    process = multiprocessing.current_process().name
                    in_engine = process.startswith("EngineCore")  # executor uni: the worker runs in the engine
                    engine = os.getpid() if in_engine else os.getppid()
                    with open(LOG, "a") as f:
                        f.write(f"sync {count['n']}: pid {os.getpid()} ({process}) kills "
                                f"{'its own process' if in_engine else 'its parent'}, the engine {engine}\n")
                    os.kill(engine, signal.SIGKILL)
                return _original(self, *args, **kwargs)

            cls.update_weights_from_ipc = wrapped


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        sys.meta_path.insert(0, self)
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch
        return spec


if KILL_AT or STALL_AT:
    if TARGET in sys.modules:
        _patch(sys.modules[TARGET])
    else:
        sys.meta_path.insert(0, _Finder())
