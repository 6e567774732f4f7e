"""vLLM's executor in CPU mode: at TP 1 the model runs inside vLLM's engine-core process, not in a process of its own.

verl's vLLM server starts vLLM's async engine, which always puts the engine core in a process of its own; vLLM's
``mp`` executor (verl's choice) then starts one more process per tensor-parallel rank, which imports torch and vLLM
again (~10 s on 2 cores) before it loads the model. At TP 1 with ``VLLM_CPU_OMP_THREADS_BIND=nobind`` (CPU mode's
default) the ``mp`` executor sets no OpenMP variable for that process (``OMPProcessManager.configure_omp_envs`` skips
its set-up: the third row of docs/ARCHITECTURE.md this module relies on), so the uniprocess executor ``uni`` does the
same work in the engine core without it. The other two:

* vLLM's CPU platform turns ``uni`` back into ``mp`` unless ``VLLM_ENABLE_V1_MULTIPROCESSING=0``
  (``CpuPlatform.check_and_update_config``): ``configs/platform/cpu.yaml`` forwards ``"0"`` to every Ray worker. The
  async engine does not read it (it starts its engine-core process regardless);
* verl passes ``distributed_executor_backend="mp"`` and then the rollout's ``engine_kwargs.vllm`` over it: the
  config's :data:`BACKEND_KEY` is :func:`backend`'s choice, through the resolver ``verl_ext.cpu_vllm_executor``.

With a binding (``auto`` or a CPU list) or TP > 1 the choice is ``mp``, and :func:`misfit` refuses ``uni`` there.
"""

from __future__ import annotations

from typing import Any

BACKEND_KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend"
TP_KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"
ENV_KEY = "ray_kwargs.ray_init.runtime_env.env_vars"
BIND_VAR = "VLLM_CPU_OMP_THREADS_BIND"
MULTIPROCESSING_VAR = "VLLM_ENABLE_V1_MULTIPROCESSING"
UNI, MP = "uni", "mp"


def backend(tp: Any, bind: Any) -> str:
    """``uni`` at TP 1 without a thread binding (nothing the ``mp`` executor would set), else ``mp``."""
    return UNI if int(tp) == 1 and str(bind) == "nobind" else MP


def misfit(chosen: Any, tp: Any, bind: Any, multiprocessing: Any) -> tuple[str, str] | None:
    """``(key, message)`` when the executor ``chosen`` cannot run as configured, else ``None``: ``uni`` runs one
    rank, drops the binding ``mp`` would set, and is turned back into ``mp`` by vLLM's CPU platform unless
    ``VLLM_ENABLE_V1_MULTIPROCESSING`` is ``"0"``."""
    if chosen != UNI:
        return None
    if int(tp) != 1:
        return BACKEND_KEY, f"'uni' runs one tensor-parallel rank, and {TP_KEY} is {tp}: allowed 'mp'"
    if str(bind) != "nobind":
        return BACKEND_KEY, (f"'uni' would drop the OpenMP binding {BIND_VAR}={bind} that vLLM's 'mp' executor sets "
                             "for its worker: allowed 'mp', or the binding nobind")  # fmt: skip
    if str(multiprocessing) != "0":
        return f"{ENV_KEY}.{MULTIPROCESSING_VAR}", (f"{multiprocessing!r} makes vLLM's CPU platform run 'mp' where "
                                                    f"{BACKEND_KEY} asks for 'uni': allowed '0' (or the backend "
                                                    "'mp')")  # fmt: skip
    return None


__all__ = ["BACKEND_KEY", "BIND_VAR", "ENV_KEY", "MP", "MULTIPROCESSING_VAR", "TP_KEY", "UNI", "backend", "misfit"]
