"""The recipes' environment variables, read and checked where the recipe YAML files use them.

A recipe (``recipe/<name>.yaml``) takes its cluster-dependent values (nodes, GPUs, model, data files, checkpoint
folder, names, parallelism, offload, lengths, CPU sizes) from environment variables through these OmegaConf
resolvers, each with the recipe's default::

    trainer.nnodes: ${verl_ext.env_int:NNODES,4,1}            # NNODES, default 4, at least 1
    data.train_files: ${verl_ext.env_files:TRAIN_FILE,${verl_ext.recipe.data_dir}/gsm8k-train.parquet}

A bad value raises :class:`RecipeEnvError`, whose message names the variable and the values allowed; the entry point
(``python -m verl_ext.main_ppo``) resolves the config first and turns it into one line and exit status 2. The
arithmetic resolvers (``verl_ext.sum``, ``verl_ext.mul``, ``verl_ext.half``) size token budgets from the lengths.
:func:`register` is idempotent; importing :mod:`verl_ext.main_ppo` calls it.
"""

from __future__ import annotations

import os
import re
from typing import Any

from omegaconf import OmegaConf

_NUMBER = re.compile(r"^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$")
_INT = re.compile(r"^[0-9]{1,6}$")


class RecipeEnvError(ValueError):
    """A recipe's environment variable holds a value the recipe cannot use; the message names it."""


def _raw(name: str, default: Any) -> tuple[str, bool]:
    """The variable's text and whether it was set (an unset variable gives ``default``)."""
    value = os.environ.get(name)
    if value is None:
        return str(default), False
    return value, True


def env_int(name: str, default: Any, minimum: Any, below: Any = None, below_name: str | None = None) -> int:
    """An integer >= ``minimum`` (and < ``below``, the value of ``below_name``, when given)."""
    text, _ = _raw(name, default)
    if not _INT.match(text) or int(text) < int(minimum):
        raise RecipeEnvError(f"{name}='{text}' is invalid: allowed an integer >= {minimum}")
    value = int(text)
    if below is not None and value >= int(below):
        raise RecipeEnvError(f"{name}={value} is invalid: allowed {minimum} <= {name} < {below_name}={below}")
    return value


def env_divisor(name: str, default: Any, total: Any, total_name: str) -> int:
    """A positive integer that divides ``total`` (the value of ``total_name``)."""
    value = env_int(name, default, 1)
    if int(total) % value:
        raise RecipeEnvError(f"{name}={value} is invalid: it must divide {total_name}={total}")
    return value


def env_only(name: str, value: Any, reason: str) -> Any:
    """``value``, the only one allowed here; the variable set to anything else is an error giving ``reason``."""
    text, given = _raw(name, value)
    if given and text != str(value):
        raise RecipeEnvError(f"{name}='{text}' is invalid {reason}")
    return value


def env_flag(name: str, default: Any) -> bool:
    """0 or 1, as a boolean."""
    text, _ = _raw(name, int(default) if isinstance(default, bool) else default)
    if text not in ("0", "1"):
        raise RecipeEnvError(f"{name}='{text}' is invalid: allowed 0 or 1")
    return text == "1"


def env_num(name: str, default: Any) -> float:
    """A positive number (a learning rate, a ratio, an entropy in nats)."""
    text, _ = _raw(name, default)
    if not _NUMBER.match(text) or float(text) <= 0:
        raise RecipeEnvError(f"{name}='{text}' is invalid: allowed a positive number, e.g. 1e-3")
    return float(text)


def env_num_or_none(name: str) -> float | None:
    """A positive number when the variable is set, else null (the config's own value stands)."""
    return env_num(name, "") if name in os.environ else None


def env_str(name: str, default: Any) -> str:
    """A non-empty string."""
    text, _ = _raw(name, default)
    if not text:
        raise RecipeEnvError(f"{name} is empty")
    return text


def env_path(name: str, default: Any) -> str:
    """A path, made absolute against the working folder."""
    return os.path.abspath(env_str(name, default))


def env_files(name: str, default: Any) -> list[str]:
    """A comma-separated list of files, as a list."""
    items = [item for item in env_str(name, default).split(",") if item]
    if not items:
        raise RecipeEnvError(f"{name}='{os.environ.get(name, default)}' is invalid: allowed one or more files, comma-separated")
    return items


def loggers(name: str, default: Any) -> list[str]:
    """verl's trackers, comma-separated; each must be one verl supports (``verl.utils.tracking.Tracking``)."""
    from verl.utils.tracking import Tracking

    items = [item for item in env_str(name, default).split(",") if item]
    if not items:
        raise RecipeEnvError(f"{name} is empty: allowed e.g. console or console,wandb")
    allowed = list(Tracking.supported_backend)
    for item in items:
        if item not in allowed:
            raise RecipeEnvError(f"{name} entry '{item}' is invalid: allowed {', '.join(allowed)}")
    return items


def cpu_mini_batch(prompts: Any, n: Any, nnodes: Any, gpus_per_node: Any) -> int:
    """Half the step's prompts (two mini-batches a step), checked to split evenly over the training processes."""
    prompts, n, world = int(prompts), int(n), int(nnodes) * int(gpus_per_node)
    if prompts % 2:
        raise RecipeEnvError(f"PROMPTS={prompts} is invalid: allowed an even number (two mini-batches per step)")
    if (prompts * n // 2) % world:
        raise RecipeEnvError(f"PROMPTS={prompts} x N={n} is invalid for {world} training processes: two mini-batches "
                             "whose responses divide by NNODES x GPUS_PER_NODE")  # fmt: skip
    return prompts // 2


def per_rank(total: Any, parts: Any, nnodes: Any, gpus_per_node: Any) -> int:
    """``total / parts`` rows split over the training processes (checked to divide by :func:`cpu_mini_batch`)."""
    return int(total) // int(parts) // (int(nnodes) * int(gpus_per_node))


def env_ckpt(name: str) -> str | None:
    """A checkpoint folder ``.../global_step_<N>`` with an ``actor/`` folder (not looked for under ``DRY_RUN=1``),
    or null when the variable is unset or empty."""
    text = os.environ.get(name, "")
    if not text:
        return None
    if not os.path.basename(os.path.normpath(text)).startswith("global_step_"):
        raise RecipeEnvError(f"{name}='{text}' is invalid: allowed a checkpoint folder named global_step_<N> (under a "
                             "run's CKPTS_DIR)")  # fmt: skip
    if os.environ.get("DRY_RUN") != "1" and not os.path.isdir(os.path.join(text, "actor")):
        raise RecipeEnvError(f"{name}='{text}' has no actor/ folder: not a verl checkpoint")
    return os.path.abspath(text)


def beside_ckpt(ckpt: Any, folder: str, otherwise: Any) -> str:
    """``folder`` beside a checkpoint folder (next to the run's other checkpoints), or ``otherwise`` without one."""
    return os.path.join(os.path.dirname(str(ckpt)), folder) if ckpt else str(otherwise)


def sampled_n(do_sample: Any, n: Any) -> int:
    """``n`` validation samples when validation samples, else 1 (greedy)."""
    return int(n) if str(do_sample).lower() == "true" else 1


def cpu_dtype(form: str, requested: str) -> str:
    """CPU mode's precision (``requested`` on this CPU, :mod:`verl_ext.cpu.precision`) spelled for a key."""
    from verl_ext.cpu import precision

    try:
        return precision.dtype(form, requested)
    except precision.PrecisionError as exc:
        raise RecipeEnvError(str(exc)) from None


RESOLVERS = {
    "verl_ext.env_int": env_int,
    "verl_ext.env_divisor": env_divisor,
    "verl_ext.env_only": env_only,
    "verl_ext.env_flag": env_flag,
    "verl_ext.env_num": env_num,
    "verl_ext.env_num_or_none": env_num_or_none,
    "verl_ext.env_str": env_str,
    "verl_ext.env_path": env_path,
    "verl_ext.env_files": env_files,
    "verl_ext.loggers": loggers,
    "verl_ext.cpu_mini_batch": cpu_mini_batch,
    "verl_ext.per_rank": per_rank,
    "verl_ext.sampled_n": sampled_n,
    "verl_ext.env_ckpt": env_ckpt,
    "verl_ext.beside_ckpt": beside_ckpt,
    "verl_ext.cpu_dtype": cpu_dtype,
    "verl_ext.resume_mode": lambda ckpt: "resume_path" if ckpt else "disable",
    "verl_ext.first": lambda *values: next((v for v in values if v is not None), None),
    "verl_ext.sum": lambda *values: sum(int(v) for v in values),
    "verl_ext.mul": lambda a, b: int(a) * int(b),
    "verl_ext.half": lambda a: int(a) // 2,
}


def register() -> None:
    """Register every resolver above with OmegaConf (once)."""
    for name, fn in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def recipe_env_error(exc: BaseException) -> RecipeEnvError | None:
    """The :class:`RecipeEnvError` behind an OmegaConf resolution error, if that is what it is."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, RecipeEnvError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None
