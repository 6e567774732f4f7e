"""CPU mode: verl's whole trainer (Ray, FSDP2 on gloo, vLLM's CPU engine) on a machine without an accelerator.

The one switch is the environment variable ``VERL_PLATFORM=cpu`` - verl's own platform override - set for
``python -m verl_ext.main_ppo``. It reaches every process that needs it:

* **every process that imports verl** (driver, TaskRunner, FSDP workers, vLLM server actors, agent-loop and
  reward workers): ``import verl`` loads verl_ext's ``verl_ext_cpu`` entry point (:mod:`verl_ext.cpu.plugin`),
  which calls :func:`enable_in_process` before verl resolves its platform. Ray workers get the variable from
  the runtime environment (``configs/platform/cpu.yaml`` forwards it, so it also reaches a cluster started
  elsewhere);
* **vLLM's engine processes**, which do not import verl: vLLM loads verl_ext's ``vllm.general_plugins``
  entry point (:mod:`verl_ext.cpu.vllm_plugin`) there, which keeps the linear weights syncable;
* **the local Ray**: ``verl_ext.main_ppo`` keeps it on 127.0.0.1 (``keep_local_ray_on_loopback``);
* **the config**: ``verl_ext_trainer.yaml`` selects the group file ``configs/platform/cpu.yaml`` (fp32,
  sdpa attention, no sleep mode, eager vLLM, logical Ray slots), whose keys the command line overrides.

Nothing here acts where CUDA is available: :func:`active` is false there and ``verl_ext.main_ppo`` rejects
``VERL_PLATFORM=cpu`` on such a machine.
"""

from __future__ import annotations

import logging
import os
import sys

import torch

logger = logging.getLogger(__name__)

ENV_VAR = "VERL_PLATFORM"
"""verl's platform override; ``cpu`` selects CPU mode."""

PLATFORM_NAME = "cpu"

_enabled = False


def requested() -> bool:
    """``VERL_PLATFORM=cpu`` is set in this process's environment."""
    return os.environ.get(ENV_VAR, "").strip().lower() == PLATFORM_NAME


def cuda_present() -> bool:
    """torch sees a CUDA device (CPU mode never acts then)."""
    return bool(torch.cuda.is_available())


def active() -> bool:
    """CPU mode applies in this process: requested, and no CUDA device."""
    return requested() and not cuda_present()


def enable_in_process() -> bool:
    """What every process that imports verl needs in CPU mode; a no-op (``False``) outside it. Idempotent.

    Called by the ``verl_ext_cpu`` entry point (:mod:`verl_ext.cpu.plugin`) during ``import verl``: registers
    the ``cpu`` platform (so verl's ``VERL_PLATFORM=cpu`` resolves to it) and verl's FSDP engines for device
    ``cpu``, and applies the verl-side workarounds of :mod:`verl_ext.cpu.workarounds` (gloo backend, the
    ``vllm`` distribution alias, unpinned CPU offload).
    """
    global _enabled
    if not requested():
        return False
    if _enabled:
        return True
    half_built = sys.modules.get(f"{__package__}.platform")
    if half_built is not None and not hasattr(half_built, "PlatformCPU"):
        # verl_ext.cpu.platform was imported before verl: its `import verl` loaded this plugin while the platform
        # class did not exist yet. The platform module calls this function again once it is complete.
        return False
    from verl_ext.cpu import platform

    if cuda_present():
        logger.error("verl_ext: %s=%s is set on a machine with CUDA; CPU mode stays off", ENV_VAR, PLATFORM_NAME)
        return False
    from verl_ext.cpu import workarounds

    os.environ.setdefault(TQ_THREADS_VAR, str(transfer_queue_threads()))  # a local Ray cluster inherits it
    workarounds.gloo_backend_for_verl_workers()
    workarounds.install_vllm_distribution_alias()
    workarounds.unpin_fsdp2_cpu_offload()
    platform.register_cpu_engines()
    _enabled = True
    return True


TQ_THREADS_VAR = "TQ_NUM_THREADS"
"""TransferQueue's torch thread count for its data handling (its default, 8, read when its modules are imported)."""


def transfer_queue_threads() -> int:
    """TransferQueue's thread count for this machine: its default 8, at most the physical cores. TransferQueue
    lowers a larger value itself, but warns in every call of every storage unit and client ("target_num_threads 8
    should not exceed total physical CPU cores 2", hundreds of lines per run on a 2-core machine)."""
    import psutil

    return max(1, min(8, psutil.cpu_count(logical=False) or 1))


__all__ = ["ENV_VAR", "PLATFORM_NAME", "TQ_THREADS_VAR", "active", "cuda_present", "enable_in_process", "requested",
           "transfer_queue_threads"]  # fmt: skip
