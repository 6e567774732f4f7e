"""The OmegaConf resolvers the config groups and recipes use: arithmetic on values already in the config.

None reads the environment: a recipe's YAML holds values, and ``recipe/launch.sh`` turns the cluster's variables into
overrides (:mod:`verl_ext.recipe.launch_env`). Each returns a scalar, so ``--cfg job --resolve`` prints every recipe.
Token budgets are written once, as ``${verl_ext.seq_tokens:K}`` (K full sequences of the config's prompt and response
lengths). ``verl_ext.cpu_dtype`` spells CPU mode's precision for a dtype key (:mod:`verl_ext.cpu.precision`),
``verl_ext.cpu_vllm_executor`` chooses vLLM's executor in CPU mode (:mod:`verl_ext.cpu.vllm_executor`).
:func:`register` is idempotent; importing the config package ``verl_ext.configs`` calls it.
"""

from __future__ import annotations

import os
from typing import Any

from omegaconf import OmegaConf


def seq_tokens(sequences: Any, *, _root_: Any) -> int:
    """``sequences`` full sequences: ``sequences x (data.max_prompt_length + data.max_response_length)`` tokens."""
    return int(sequences) * (int(_root_.data.max_prompt_length) + int(_root_.data.max_response_length))


def per_rank(rows: Any, *, _root_: Any) -> int:
    """``rows`` split over the training processes (``trainer.nnodes x trainer.n_gpus_per_node``); the start-up checks
    that it divides."""
    return int(rows) // (int(_root_.trainer.nnodes) * int(_root_.trainer.n_gpus_per_node))


def beside_ckpt(ckpt: Any, folder: str, otherwise: Any) -> str:
    """``folder`` beside a checkpoint folder (next to the run's other checkpoints), or ``otherwise`` without one."""
    return os.path.join(os.path.dirname(os.path.normpath(str(ckpt))), folder) if ckpt else str(otherwise)


def sampled_n(do_sample: Any, n: Any) -> int:
    """``n`` validation samples when validation samples, else 1 (greedy)."""
    return int(n) if str(do_sample).lower() == "true" else 1


def cpu_dtype(form: str, requested: str) -> str:
    """CPU mode's precision (``requested`` on this CPU, :mod:`verl_ext.cpu.precision`) spelled for a key."""
    from verl_ext.cpu import precision

    return precision.dtype(form, requested)


def cpu_vllm_executor(tp: Any, bind: Any) -> str:
    """vLLM's executor in CPU mode for the rollout's TP size and OpenMP binding (:mod:`verl_ext.cpu.vllm_executor`)."""
    from verl_ext.cpu import vllm_executor

    return vllm_executor.backend(tp, bind)


RESOLVERS = {
    "verl_ext.seq_tokens": seq_tokens,
    "verl_ext.per_rank": per_rank,
    "verl_ext.mul": lambda a, b: int(a) * int(b),
    "verl_ext.beside_ckpt": beside_ckpt,
    "verl_ext.sampled_n": sampled_n,
    "verl_ext.cpu_dtype": cpu_dtype,
    "verl_ext.cpu_vllm_executor": cpu_vllm_executor,
    "verl_ext.resume_mode": lambda ckpt: "resume_path" if ckpt else "disable",
    "verl_ext.half": lambda a: int(a) // 2,
}


def register() -> None:
    """Register every resolver above with OmegaConf (once)."""
    for name, fn in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
