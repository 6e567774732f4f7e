"""verl_ext's ``vllm.general_plugins`` entry point: CPU mode inside vLLM's own processes.

vLLM calls :func:`register` in every process it starts (API server, engine core, workers) before it loads
a model. verl's weight sync writes into the engine process's model, which does not import verl, so this is
where :func:`verl_ext.cpu.workarounds.keep_vllm_cpu_linear_weights` must run; and where vLLM's engine processes get
their own OpenMP spin time (:func:`verl_ext.cpu.openmp.vllm_blocktime`). Outside CPU mode
(``VERL_PLATFORM`` not ``cpu``, or CUDA present) it does nothing.
"""

from __future__ import annotations

from verl_ext.cpu import mode


def register() -> None:
    """vLLM general-plugin hook (idempotent)."""
    if not mode.active():
        return
    from verl_ext.cpu.openmp import vllm_blocktime
    from verl_ext.cpu.workarounds import keep_vllm_cpu_linear_weights

    keep_vllm_cpu_linear_weights()
    vllm_blocktime()  # VERL_EXT_CPU_IOMP=1: vLLM's engine processes spin, the training workers do not


__all__ = ["register"]
