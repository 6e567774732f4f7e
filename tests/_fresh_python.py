"""A fresh interpreter for a fast test of import-time behaviour, forked from a warm one: :func:`run`.

verl's import-time behaviour (its plugin loading, the platform it resolves, the workarounds CPU mode applies when
``import verl`` runs, what a vLLM or torch module looks like before verl_ext touches it) is only seen in a process that
has not imported verl yet. Each such test used to start ``python -c`` and pay ~5-10 s of imports, most of them torch's,
torch._dynamo's (through tensordict) and transformers', which read none of the variables these tests vary. :func:`run`
keeps one *zygote* per test process and per start-up environment (the ``PYTHON*`` variables, which Python reads only
when it starts): an interpreter that has imported exactly :data:`PRELOADED` - never verl, verl_ext, vLLM or Ray - and
forks a child per call. The child takes the call's environment, working folder and standard streams, runs the code as
``python -c`` would (``__main__``, ``sys.argv == ['-c']``, a traceback and exit 1 for an exception, ``sys.exit``'s
status, the ``atexit`` handlers), and its output and exit status come back as a ``subprocess.CompletedProcess``.
What the child imports after :data:`PRELOADED` it imports fresh.

A call whose ``PYTHON*`` variables differ from every running zygote's starts a zygote for them. No thread runs in a
zygote and no torch operation ran there before the fork (torch starts its thread pools lazily).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

PRELOADED = ("torch", "torch._dynamo", "tensordict", "transformers")
"""What a zygote imports before it forks: the heavy imports of ``import verl`` that read no ``VERL_*``, ``RAY_*``,
``VLLM_*`` or ``TQ_*`` variable."""

ZYGOTE = r"""
import atexit, json, os, sys, traceback
for name in sys.argv[1:]:
    __import__(name)
protocol = sys.stdout
for line in sys.stdin:
    job = json.loads(line)
    protocol.flush()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.chdir(job["cwd"])
            os.environ.clear()
            os.environ.update(job["env"])
            for fd, path, mode in ((0, os.devnull, os.O_RDONLY), (1, job["stdout"], os.O_WRONLY), (2, job["stderr"], os.O_WRONLY)):
                os.dup2(os.open(path, mode), fd)
            sys.argv = ["-c"]
            try:
                exec(compile(job["code"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
                status = 0
            except SystemExit as exc:
                code = exc.code
                status = 0 if code is None else code if isinstance(code, int) else (print(code, file=sys.stderr) or 1)
            except BaseException:
                traceback.print_exc()
            atexit._run_exitfuncs()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(status)
    protocol.write(json.dumps({"pid": pid}) + "\n")
    protocol.flush()
    _, raw = os.waitpid(pid, 0)
    protocol.write(json.dumps({"status": os.waitstatus_to_exitcode(raw)}) + "\n")
    protocol.flush()
"""

START_TIMEOUT_S = 120
"""Seconds a zygote may take to answer its first call (its imports)."""

_zygotes: dict[tuple[tuple[str, str], ...], subprocess.Popen] = {}
_pending: dict[int, bytes] = {}
"""What each zygote wrote after its last complete line (its pipe is read unbuffered, so that ``select`` sees it)."""


def _startup(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The variables Python reads when it starts (``PYTHON*``), as a key."""
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith("PYTHON")))


def _zygote(env: dict[str, str]) -> subprocess.Popen:
    key = _startup(env)
    proc = _zygotes.get(key)
    if proc is None or proc.poll() is not None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        proc = subprocess.Popen([sys.executable, "-c", ZYGOTE, *PRELOADED], env={**base, **dict(key)}, bufsize=0,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
        _pending[proc.pid] = b""
        _zygotes[key] = proc
        atexit.register(_stop, proc)
    return proc


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _read(proc: subprocess.Popen, timeout: float) -> dict | None:
    """The zygote's next line as JSON, or ``None`` if none came within ``timeout`` seconds (or it ended)."""
    import time

    deadline = time.monotonic() + timeout
    while b"\n" not in _pending[proc.pid]:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, left))
        if not ready:
            return None
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            return None
        _pending[proc.pid] += chunk
    line, _, rest = _pending[proc.pid].partition(b"\n")
    _pending[proc.pid] = rest
    return json.loads(line)


def run(code: str, env: dict[str, str], timeout: float = 300, cwd: str | os.PathLike | None = None
        ) -> subprocess.CompletedProcess:  # fmt: skip
    """``python -c code`` with exactly ``env`` as its environment, in a child of a warm zygote (module docstring);
    raises ``subprocess.TimeoutExpired`` (the child killed) after ``timeout`` seconds, as ``subprocess.run`` does."""
    proc = _zygote(env)
    with tempfile.TemporaryDirectory(prefix="verl_ext_fresh_") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        out.touch()
        err.touch()
        job = {"code": code, "env": env, "cwd": str(cwd or os.getcwd()), "stdout": str(out), "stderr": str(err)}
        proc.stdin.write((json.dumps(job) + "\n").encode())
        started = _read(proc, START_TIMEOUT_S)
        if started is None:
            proc.kill()
            raise RuntimeError(f"tests/_fresh_python.py: the zygote did not fork within {START_TIMEOUT_S} s")
        done = _read(proc, timeout)
        if done is None:
            os.kill(started["pid"], signal.SIGKILL)
            _read(proc, 30)
            raise subprocess.TimeoutExpired([sys.executable, "-c", code], timeout, out.read_text(), err.read_text())
        return subprocess.CompletedProcess([sys.executable, "-c", code], done["status"], out.read_text(),
                                           err.read_text())  # fmt: skip


def run_module(argv: list[str], env: dict[str, str], timeout: float = 300, cwd: str | os.PathLike | None = None
               ) -> subprocess.CompletedProcess:  # fmt: skip
    """``python -m argv[0] argv[1:]`` as :func:`run` runs ``python -c`` (``runpy``, as ``-m`` does)."""
    code = (f"import runpy, sys\nsys.argv = {argv!r}\n"
            f"runpy.run_module({argv[0]!r}, run_name='__main__', alter_sys=True)\n")  # fmt: skip
    return run(code, env, timeout=timeout, cwd=cwd)
