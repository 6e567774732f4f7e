"""The e2e tier's machine lock (tests/conftest.py runs its launches two at a time under pytest-xdist): shared by every
e2e test, exclusive for a ``machine_alone`` test. A module of its own: test files import it by this unique name
(every ``conftest.py`` is imported as ``conftest``, so ``import conftest`` may get another folder's)."""

from __future__ import annotations

import contextlib
import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path


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
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
