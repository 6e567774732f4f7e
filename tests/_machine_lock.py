"""The e2e tier's machine lock (tests/conftest.py runs its launches two at a time under pytest-xdist): shared by every
e2e test, exclusive for a ``machine_alone`` test. A module of its own: test files import it by this unique name
(every ``conftest.py`` is imported as ``conftest``, so ``import conftest`` may get another folder's)."""

from __future__ import annotations

import contextlib
import fcntl
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


ALONE_FIRST_WAIT_S = 120.0
"""How long a worker's first shared test waits for the run's first test, a ``machine_alone`` one on the other worker,
to take the lock: both workers start at once, and a shared test that took the lock first would make the alone one
wait for it while the other worker then idles (a bound: a wrong guess costs this much, never a hang)."""


def _signal(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"verl_ext_e2e_{run_id}.alone_started"


def wait_for_the_alone_start(run_id: str, timeout_s: float = ALONE_FIRST_WAIT_S) -> bool:
    """Wait until the run's first ``machine_alone`` test holds the lock (or ``timeout_s``); whether it did."""
    deadline = time.monotonic() + timeout_s
    while not _signal(run_id).exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@contextlib.contextmanager
def machine_share(run_id: str, alone: bool) -> Iterator[None]:
    """Hold the e2e run's machine lock, shared or (``alone``) exclusive, across pytest-xdist workers. A waiting
    exclusive holder keeps the gate, so no new shared holder starts meanwhile (flock alone lets shared holders
    starve an exclusive one)."""
    base = Path(tempfile.gettempdir()) / f"verl_ext_e2e_{run_id}"
    with open(f"{base}.gate", "a") as gate, open(f"{base}.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        if alone:
            _signal(run_id).touch()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
