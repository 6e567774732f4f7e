"""A CPU platform for verl 0.9.x: the device side of CPU mode (``VERL_PLATFORM=cpu``).

verl 0.9.1 resolves its device through ``verl.plugin.platform`` (CUDA, NPU, ROCm) and has no CPU platform.
This module adds one - ``PlatformRegistry`` name ``"cpu"``: device ``cpu``, ``gloo`` collectives - so that
verl's FSDP2 workers, and with them verl's whole trainer, run on a machine without an accelerator.

Ray resource: verl places one worker per accelerator "slot" and reads the slot's id from Ray's accelerator
ids (``ray.get_runtime_context().get_accelerator_ids()[<resource>]``, e.g. when the vLLM servers start).
Ray reports ids only for accelerator resources, so the CPU platform names Ray's ``GPU`` resource as its
slot: a CPU-mode Ray cluster declares ``num_gpus`` logical slots per node (``configs/platform/cpu.yaml``
sets ``ray_kwargs.ray_init.num_gpus``; ``ray start --num-gpus N`` on a cluster), one per training process.
No GPU is used or needed; ``torch.cuda`` stays unavailable.

It is never active by accident:

* importing the module only registers the class; verl's auto-detection skips it
  (:meth:`PlatformCPU.is_platform_available` is ``False`` unless the platform was requested);
* it is selected only by :func:`activate` or by ``VERL_PLATFORM=cpu`` in the environment;
* it refuses to exist where CUDA is available: :func:`activate` raises, and auto-detection never picks it.

:func:`activate` also registers verl's FSDP engine classes for device ``cpu`` in ``EngineRegistry`` (verl
registers them for ``cuda`` / ``npu`` only), so no ``VERL_ENGINE_DEVICE`` override is needed.
"""

from __future__ import annotations

import logging
import os
import types
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry, set_platform
from verl.plugin.platform import platform_manager

from verl_ext.cpu import precision, workarounds
from verl_ext.cpu.switch import ENV_VAR, PLATFORM_NAME, requested
from verl_ext.cpu.switch import cuda_present as _cuda_present

logger = logging.getLogger(__name__)

_requested = False


class MemoryUnreadable(RuntimeError):
    """A memory figure of the CPU platform could not be read: raised, never reported as 0 (a 0 would read as a
    process that uses no memory in verl's ``perf/*memory*`` metrics)."""


def _bytes_of_this_process() -> int:
    """Resident memory of this process (the closest CPU analogue of "allocated device memory")."""
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception as err:  # psutil missing or restricted /proc
        raise MemoryUnreadable(
            "verl_ext CPU platform: cannot read this process's resident memory (psutil.Process().memory_info()): "
            f"{err!r}"
        ) from err


def _peak_rss_bytes() -> int:
    """Peak resident memory of this process since start (``ru_maxrss``; the CPU peak cannot be reset)."""
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB
    except Exception as err:
        raise MemoryUnreadable(
            f"verl_ext CPU platform: cannot read this process's peak resident memory "
            f"(resource.getrusage(RUSAGE_SELF).ru_maxrss): {err!r}"
        ) from err


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    """``(available, total)`` bytes of the host's memory, as ``torch.cuda.mem_get_info`` gives the device's."""
    try:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)
    except Exception as err:
        raise MemoryUnreadable(
            f"verl_ext CPU platform: cannot read the host's memory (psutil.virtual_memory()): {err!r}"
        ) from err


def _build_device_module() -> types.ModuleType:
    """``torch.cpu`` plus the ``torch.cuda``-style functions verl calls on ``get_torch_device()``.

    Memory figures are process-level (RSS); the "peak" counters report ``ru_maxrss`` and cannot be reset. A figure that
    cannot be read raises :class:`MemoryUnreadable` instead of reporting 0.
    """
    shim = types.ModuleType("verl_ext_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(shim, name, getattr(torch.cpu, name))
    shim.memory_allocated = lambda device=None: _bytes_of_this_process()
    shim.memory_reserved = lambda device=None: _bytes_of_this_process()
    shim.max_memory_allocated = lambda device=None: _peak_rss_bytes()
    shim.max_memory_reserved = lambda device=None: _peak_rss_bytes()
    shim.reset_peak_memory_stats = lambda device=None: None
    shim.empty_cache = lambda: None
    shim.mem_get_info = _mem_get_info
    shim.get_device_name = lambda device=None: "cpu"
    shim.manual_seed = torch.manual_seed
    # the device RNG is the CPU generator (verl's checkpoint loader restores it under the key "cpu")
    shim.get_rng_state = torch.get_rng_state
    shim.set_rng_state = torch.set_rng_state
    shim.ipc_collect = lambda: None
    shim.set_per_process_memory_fraction = lambda fraction, device=None: None
    shim.manual_seed_all = torch.manual_seed
    shim.is_available = lambda: True
    shim.device_count = lambda: 1
    shim.current_device = lambda: "cpu"
    shim.set_device = lambda device: None
    shim.synchronize = lambda device=None: None
    return shim


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """verl platform backed by the host CPU (gloo collectives; Ray ``GPU`` resource as logical slots)."""

    _device_module: Optional[types.ModuleType] = None

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        if PlatformCPU._device_module is None:
            PlatformCPU._device_module = _build_device_module()
        return PlatformCPU._device_module

    def is_available(self) -> bool:
        """True only on machines without CUDA."""
        return not _cuda_present()

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        """Auto-detection hook: true only without CUDA *and* when the CPU platform was requested."""
        return self.is_available() and (_requested or requested())

    def current_device(self) -> str:  # verl passes this to ``Tensor.to``; an int would mean a CUDA index
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # read by verl's Ray helpers; irrelevant on CPU

    @contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        """Ray's ``GPU`` resource, used as a logical worker slot (see the module docstring)."""
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def register_cpu_engines() -> None:
    """Make verl's FSDP engines resolvable for device ``cpu`` (verl registers ``cuda`` / ``npu`` only)."""
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    for model_type, engine_cls in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        for backend in ("fsdp", "fsdp2"):
            registry = EngineRegistry._engines.get(model_type, {}).get(backend, {})
            if PLATFORM_NAME not in registry:
                EngineRegistry.register(model_type=model_type, backend=backend, device=PLATFORM_NAME)(engine_cls)


def is_active() -> bool:
    """Whether verl's current platform is this CPU platform (does not resolve the platform)."""
    return isinstance(platform_manager._current_platform, PlatformCPU)


def activate(export_env: bool = False) -> PlatformCPU:
    """Select the CPU platform in this process; idempotent.

    Call it before anything calls ``verl.plugin.platform.get_platform()``: verl caches the platform. If verl
    already fell back to a platform whose device is missing (on a CPU-only machine, ``nvidia``), that
    unusable platform is replaced, with a warning.

    Args:
        export_env: also set ``VERL_PLATFORM=cpu`` in ``os.environ`` so that child processes that import
            this module select it too.

    Raises:
        RuntimeError: CUDA is available (the CPU platform is never used next to a GPU), or verl already
            resolved another, usable platform in this process.
    """
    global _requested
    if _cuda_present():
        raise RuntimeError(
            "verl_ext.cpu.platform.activate(): CUDA is available on this machine; the CPU platform is only "
            "for machines without a GPU. Unset VERL_PLATFORM=cpu and use verl's CUDA platform."
        )
    current = platform_manager._current_platform
    if current is not None and not isinstance(current, PlatformCPU):
        if current.is_available():
            raise RuntimeError(
                f"verl_ext.cpu.platform.activate(): verl already resolved the usable platform "
                f"{type(current).__name__!r} (device {current.device_name!r}) in this process; refusing to "
                "replace it. Call activate() (or set VERL_PLATFORM=cpu) before anything calls "
                "verl.plugin.platform.get_platform()."
            )
        # verl fell back to a platform whose device does not exist here (on a CPU-only machine: 'nvidia'),
        # which nothing can use; replacing it is what the caller asked for.
        logger.warning(
            "verl_ext: replacing verl's unusable fallback platform %s (device %r not available) with the CPU "
            "platform; module-level device names cached earlier (Ulysses meshes) may still say %r",
            type(current).__name__,
            current.device_name,
            current.device_name,
        )
        current = None
    _requested = True
    if current is None:
        platform_manager._current_platform = None  # set_platform() would log a misleading "replacing" warning
        set_platform(PlatformCPU())
    if export_env:
        os.environ[ENV_VAR] = PLATFORM_NAME
    register_cpu_engines()
    logger.info("verl_ext: CPU platform active (gloo; Ray GPU resource as logical worker slots)")
    return platform_manager._current_platform  # type: ignore[return-value]


__all__ = [
    "MemoryUnreadable", "PLATFORM_NAME", "PlatformCPU", "activate", "enable", "is_active", "register_cpu_engines",
]  # fmt: skip

_enabled = False


def enable() -> bool:
    """Complete CPU mode in this process (idempotent; ``False`` outside it): verl's FSDP engines for device ``cpu``
    and the verl-side workarounds of :mod:`verl_ext.cpu.workarounds` (gloo backend, the ``vllm`` distribution alias,
    unpinned CPU offload, worker groups' master port outside the ephemeral range, TransferQueue's threads, verl's
    notices about engines CPU mode never uses) and of :mod:`verl_ext.cpu.precision` (fp32 log-probabilities from bf16
    logits). Called by :func:`verl_ext.cpu.mode.enable_in_process`."""
    global _enabled
    if not requested():
        return False
    if _enabled:
        return True
    if _cuda_present():
        logger.error("verl_ext: %s=%s is set on a machine with CUDA; CPU mode stays off", ENV_VAR, PLATFORM_NAME)
        return False
    workarounds.quiet_unused_engine_notices()
    workarounds.size_transfer_queue_threads()
    workarounds.gloo_backend_for_verl_workers()
    workarounds.install_vllm_distribution_alias()
    workarounds.unpin_fsdp2_cpu_offload()
    workarounds.master_port_outside_ephemeral_range()
    precision.fp32_log_probs_for_verl_engine()
    register_cpu_engines()
    _enabled = True
    return True


# Imported before verl, this module's `import verl` ran verl_ext's CPU plugin (verl_ext.cpu.mode) while this module
# was half built; the plugin left CPU mode to this line (a no-op when CPU mode is off or already on).
enable()
