"""The CPU-mode switch: ``VERL_PLATFORM=cpu`` (verl's own platform override) on a machine without CUDA.

The lowest module of :mod:`verl_ext.cpu`: :mod:`verl_ext.cpu.mode` and :mod:`verl_ext.cpu.platform` both read it,
and neither imports the other at module level through it.
"""

from __future__ import annotations

import os

import torch

ENV_VAR = "VERL_PLATFORM"
"""verl's platform override; ``cpu`` selects CPU mode."""

PLATFORM_NAME = "cpu"
"""The value of ``VERL_PLATFORM`` that selects CPU mode, and the device name of verl_ext's platform."""


def requested() -> bool:
    """``VERL_PLATFORM=cpu`` is set in this process's environment."""
    return os.environ.get(ENV_VAR, "").strip().lower() == PLATFORM_NAME


def cuda_present() -> bool:
    """torch sees a CUDA device (CPU mode never acts then)."""
    return bool(torch.cuda.is_available())


def active() -> bool:
    """CPU mode applies in this process: requested, and no CUDA device."""
    return requested() and not cuda_present()


__all__ = ["ENV_VAR", "PLATFORM_NAME", "active", "cuda_present", "requested"]
