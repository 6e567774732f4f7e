"""CPU mode's precision: one the recipe or the user chooses (``fp32`` by default), the same on every machine.

A GPU run of verl computes in bf16 under FSDP mixed precision (fp32 master weights, fp32 gradient reduction) and
serves the rollout from a bf16 vLLM. CPU mode can do the same, but it exists to prove the GPU code path in CI and to
try the methods on a laptop: a command must compute the same numbers whichever CPU runs it, and bf16 is neither
faster everywhere (on an Intel Xeon with ``avx512_bf16`` and no AMX, SmolLM2's forward and backward took 1.71x
*longer* under bf16 autocast, against 0.61x on an AMD Zen 4) nor exact (SmolLM2's entropy reads 0.632 nats in bf16
against 0.534 in fp32 on the same tokens). Hence:

* ``verl_ext.cpu_precision: fp32`` (default, ``configs/platform/cpu.yaml``; ``VERL_EXT_CPU_PRECISION`` through the
  launcher): fp32 everywhere, on every CPU;
* ``verl_ext.cpu_precision: bf16``: bf16 compute as on a GPU; on a CPU without bf16 instructions (``amx_bf16`` or
  ``avx512_bf16`` on x86, ``bf16`` on Arm) a config error naming the key, since torch would emulate it there;
* nothing follows the CPU's flags by itself. Instead the start-up line reports how fast bf16 multiplies at the model's
  shapes on this CPU against fp32 (:mod:`verl_ext.cpu.precision_probe`: measured once per machine and cached), and
  suggests the other precision where it is clearly faster.

The file reads the choice through the resolver ``${verl_ext.cpu_dtype:<form>,<precision>}`` (:func:`dtype`), so that
every dtype key it sets (FSDP mixed precision of the actor and the reference, the engines' ``dtype``, vLLM's
``dtype``) follows it; the command line still overrides each key. Master weights stay fp32 (``model_dtype: fp32``,
verl's default) and the weight sync is verl's own (the actor's fp32 tensors, cast by vLLM's loader into its bf16
parameters).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

VAR = "VERL_EXT_CPU_PRECISION"
"""The launcher's variable for :data:`KEY` (``recipe/launch.sh`` turns it into the override)."""

KEY = "verl_ext.cpu_precision"
"""The config key the precision is read from (``configs/platform/cpu.yaml``, default :data:`DEFAULT`)."""

CHOICES = ("bf16", "fp32")
"""The values :data:`KEY` may hold."""

DEFAULT = "fp32"
"""CPU mode's precision unless the recipe or the user chooses bf16."""

BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")
"""CPU flags (``/proc/cpuinfo``) of native bf16 arithmetic: Intel AMX, AVX-512 BF16 (Intel, AMD Zen 4), Arm's BF16."""

FORMS = {
    "mp": {"bf16": "bf16", "fp32": "fp32"},  # verl's FSDP mixed_precision keys (PrecisionType names)
    "torch": {"bf16": "bfloat16", "fp32": "float32"},  # engines' and vLLM's dtype keys (torch names)
}
"""How each config key spells the two precisions (the argument of ``${verl_ext.cpu_dtype:<form>}``)."""


class PrecisionError(ValueError):
    """:data:`KEY` holds a value CPU mode cannot run on this machine; the message names it."""


@dataclass(frozen=True)
class Choice:
    """The precision CPU mode runs in and why."""

    precision: str
    """``bf16`` or ``fp32``."""
    requested: str
    """What :data:`KEY` asked for."""
    reason: str
    """Why, for the start-up line."""


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (x86 ``flags``, Arm ``Features``); empty where the file cannot be read."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        pass
    return set()


def bf16_flags(flags: set[str] | None = None) -> list[str]:
    """Which of :data:`BF16_FLAGS` this CPU has (empty: no native bf16)."""
    flags = cpu_flags() if flags is None else flags
    return [flag for flag in BF16_FLAGS if flag in flags]


def requested_precision(requested: Any) -> str:
    """``requested`` (a value of :data:`KEY`; ``None``: :data:`DEFAULT`) checked against :data:`CHOICES`, whatever
    the CPU."""
    value = DEFAULT if requested is None else str(requested).strip().lower()
    if value not in CHOICES:
        raise PrecisionError(f"{KEY}={requested!r} is invalid: allowed bf16 or fp32 (one command computes in one "
                             "precision on every CPU; the start-up line says how fast bf16 runs on this one)")  # fmt: skip
    return value


def choose(requested: Any = None, flags: set[str] | None = None) -> Choice:
    """The precision ``requested`` gives: the same on every CPU, and bf16 an error on a CPU without bf16
    instructions (torch would emulate them there, slower than fp32)."""
    value = requested_precision(requested)
    if value == "fp32":
        return Choice("fp32", value, f"{KEY}=fp32")
    found = bf16_flags(flags)
    if not found:
        raise PrecisionError(f"{KEY}=bf16 is invalid on this CPU ({platform.machine()}): it has none of "
                             f"{', '.join(BF16_FLAGS)} in /proc/cpuinfo, and torch would emulate bf16 there, slower "
                             "than fp32; allowed: fp32")  # fmt: skip
    return Choice("bf16", value, f"{KEY}=bf16; this CPU has {', '.join(found)}")


def dtype(form: str, requested: str | None = None) -> str:
    """Resolver ``${verl_ext.cpu_dtype:<form>,<precision>}``: the precision ``requested`` (:data:`CHOICES`) spelled
    for a config key (:data:`FORMS`). It does not look at the CPU: a composition is the same on every machine, and
    bf16 on a CPU without bf16 instructions is refused when the config is checked."""
    if form not in FORMS:
        raise ValueError(f"verl_ext.cpu_dtype: form {form!r} is invalid: allowed {', '.join(FORMS)}")
    return FORMS[form][requested_precision(requested)]


KEYS = {
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype": "mp",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype": "mp",
    "actor_rollout_ref.rollout.dtype": "torch",
}
"""The keys that decide where CPU mode computes in bf16 (and how each spells it, :data:`FORMS`)."""

BF16_NAMES = ("bf16", "bfloat16")


VERL_FSDP_ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"


def fp32_log_probs(logits: Any, labels: Any, inplace_backward: bool = True) -> Any:
    """verl's ``logprobs_from_logits`` computed in fp32 for bf16 / fp16 logits, as the GPU path computes it.

    ``-cross_entropy(logits.float(), labels)`` per token: fp32 log-probabilities whose gradient flows back to the
    low-precision logits; fp32 / fp64 logits go to verl's own function unchanged."""
    import torch

    from verl.utils.torch_functional import logprobs_from_logits

    if logits.dtype in (torch.float32, torch.float64):
        return logprobs_from_logits(logits, labels, inplace_backward=inplace_backward)
    flat = logits.reshape(-1, logits.shape[-1]).float()
    out = -torch.nn.functional.cross_entropy(flat, labels.reshape(-1), reduction="none")
    return out.reshape(labels.shape)


def fp32_log_probs_for_verl_engine() -> bool:
    """Make verl's FSDP engine compute log-probabilities in fp32 from bf16 logits; ``False`` if already so.

    Covers ``verl/utils/torch_functional.py:73-125`` (``logprobs_from_logits``, verl 0.9.1, called by
    ``verl/workers/engine/fsdp/transformer_impl.py:1428``): on a GPU it uses flash-attention's cross-entropy
    kernel, which computes in fp32 and returns fp32; without flash-attention (every CPU) it falls back to
    ``logprobs_from_logits_v2``, which for bf16 logits runs ``log_softmax`` in bf16 and returns bf16 log-probs
    (resolution 0.03 at a log-prob of -5, 0.125 at -20): the PPO ratio, the KL terms and the rollout-vs-actor gap
    would carry that rounding, which GPU runs do not. The engine module imports the function by name, so its
    attribute is replaced (CPU mode does it from the ``verl.plugins`` entry point, in every process).
    """
    import importlib

    module = importlib.import_module(VERL_FSDP_ENGINE_MODULE)
    if module.logprobs_from_logits is fp32_log_probs:
        return False
    module.logprobs_from_logits = fp32_log_probs
    return True


def unsupported_keys(config: Any, flags: set[str] | None = None) -> list[tuple[str, str]]:
    """``(key, value)`` of each :data:`KEYS` set to bf16 on a CPU without bf16 instructions (none where it has them)."""
    from omegaconf import OmegaConf

    if bf16_flags(flags):
        return []
    values = [(key, str(OmegaConf.select(config, key, default=None))) for key in KEYS]
    return [(key, value) for key, value in values if value.lower() in BF16_NAMES]


def startup_line(config: Any, choice: Choice | None = None, speed: Any = None) -> str:
    """The start-up line: the precision, why, any of :data:`KEYS` the command line set otherwise, and how fast bf16
    multiplies on this CPU against fp32 (``speed``: a :class:`~verl_ext.cpu.precision_probe.Speed`, ``None`` to
    leave it out)."""
    from omegaconf import OmegaConf

    choice = choose(OmegaConf.select(config, KEY, default=None)) if choice is None else choice
    if choice.precision == "bf16":
        what = ("bf16 compute as on a GPU: FSDP2 mixed precision (bf16 parameters and compute, fp32 master weights "
                "and gradient reduction), the reference in bf16, vLLM in bf16")  # fmt: skip
    else:
        what = "fp32 everywhere (FSDP, reference, vLLM)"
    overridden = []
    for key, form in KEYS.items():
        value = OmegaConf.select(config, key, default=None)
        if str(value) != FORMS[form][choice.precision]:
            overridden.append(f"{key}={value}")
    also = f"; set otherwise on the command line: {', '.join(overridden)}" if overridden else ""
    line = f"verl_ext: CPU mode runs in {what} ({choice.reason}{also})"
    return line if speed is None else f"{line}; {speed.describe(choice.precision)}"


__all__ = ["BF16_FLAGS", "CHOICES", "Choice", "DEFAULT", "FORMS", "KEY", "KEYS", "PrecisionError", "VAR", "bf16_flags",
           "choose", "cpu_flags", "dtype", "fp32_log_probs", "fp32_log_probs_for_verl_engine", "requested_precision",
           "startup_line", "unsupported_keys"]  # fmt: skip
