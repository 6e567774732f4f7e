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

import sys

from verl_ext.cpu.switch import ENV_VAR, PLATFORM_NAME, active, cuda_present, requested
from verl_ext.cpu.workarounds import TQ_THREADS_VAR, transfer_queue_threads


def enable_in_process() -> bool:
    """What every process that imports verl needs in CPU mode; a no-op (``False``) outside it. Idempotent.

    Called by the ``verl_ext_cpu`` entry point (:mod:`verl_ext.cpu.plugin`) during ``import verl``: imports
    :mod:`verl_ext.cpu.platform`, which registers the ``cpu`` platform (so verl's ``VERL_PLATFORM=cpu`` resolves to
    it), and completes CPU mode there (:func:`verl_ext.cpu.platform.enable`: verl's FSDP engines for device ``cpu``
    and the verl-side workarounds of :mod:`verl_ext.cpu.workarounds`).
    """
    if not requested():
        return False
    half_built = sys.modules.get(f"{__package__}.platform")
    if half_built is not None and not hasattr(half_built, "enable"):
        # verl_ext.cpu.platform was imported before verl: its `import verl` loaded this plugin while the platform
        # did not exist yet. The platform module completes CPU mode on its last line.
        return False
    from verl_ext.cpu import platform

    return platform.enable()


__all__ = ["ENV_VAR", "PLATFORM_NAME", "TQ_THREADS_VAR", "active", "cuda_present", "enable_in_process", "requested",
           "transfer_queue_threads"]  # fmt: skip
