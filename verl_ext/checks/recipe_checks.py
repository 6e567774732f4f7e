"""Checks of a composed config's sizes, files, names and CPU-scale model: one place, whatever set the value.

A value reaches the config from a group file, from a Hydra override, or from a launch variable that
``recipe/launch.sh`` turned into an override (:mod:`verl_ext.checks.launch_env`): these checks run on the composed
config (:func:`verl_ext.checks.dry_run.validate`, before Ray starts), so a bad value gives the same one-line
:class:`~verl_ext.config.ConfigError`, naming the key and the allowed values, whichever way it came. They run before
verl's own validation, whose messages name fewer keys.
"""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from verl_ext.config import ConfigError

POSITIVE_INTS = (
    "trainer.nnodes",
    "trainer.n_gpus_per_node",
    "data.train_batch_size",
    "data.max_prompt_length",
    "data.max_response_length",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.rollout.tensor_model_parallel_size",
)
"""Keys that must hold an integer >= 1."""

CPU_MODELS = {"scale": ("tiny", "smollm2"), "cpu_tiny": ("toy", "smollm2")}
"""The CPU-scale models each kind of CPU recipe runs: ``scale=cpu`` (the GPU recipes' tasks) and
``recipe/cpu_tiny.sh`` (its toy task, or the word problems); CI trains each pair it allows."""

SINGLE_RANK_MODELS = {"smollm2": "SmolLM2-135M has 9 attention heads and 3 KV heads, which vLLM cannot split over 2 "
                                 "ranks"}  # fmt: skip
"""CPU-scale models whose vLLM engine runs on one rank only, with the reason."""


def _get(config: DictConfig, key: str, default: Any = None) -> Any:
    return OmegaConf.select(config, key, default=default)


def _positive_int(config: DictConfig, key: str) -> int:
    value = _get(config, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(key, f"{value!r} is invalid: allowed an integer >= 1")
    return value


def check_sizes(config: DictConfig) -> None:
    """Counts are integers >= 1; vLLM's tensor parallelism divides the GPUs of a node; the optimiser mini-batch
    divides the step's prompts and its responses split evenly over the training processes; DAPO's overlong buffer
    lies inside the response budget; validation takes at least one answer per problem."""
    for key in POSITIVE_INTS:
        _positive_int(config, key)
    steps = _get(config, "trainer.total_training_steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ConfigError("trainer.total_training_steps", f"{steps!r} is invalid: allowed an integer >= 1, or null "
                          "(the epochs decide)")  # fmt: skip
    gpus, tp = _get(config, "trainer.n_gpus_per_node"), _get(config, "actor_rollout_ref.rollout.tensor_model_parallel_size")
    if gpus % tp:
        raise ConfigError("actor_rollout_ref.rollout.tensor_model_parallel_size", f"{tp} is invalid: it must divide "
                          f"trainer.n_gpus_per_node={gpus}")  # fmt: skip
    prompts, mini = _get(config, "data.train_batch_size"), _get(config, "actor_rollout_ref.actor.ppo_mini_batch_size")
    if prompts % mini:
        raise ConfigError("data.train_batch_size", f"{prompts} is invalid: it must be a multiple of "
                          f"actor_rollout_ref.actor.ppo_mini_batch_size={mini} (whole optimiser mini-batches a step)")  # fmt: skip
    n = _get(config, "actor_rollout_ref.rollout.n")
    sp = _get(config, "actor_rollout_ref.actor.ulysses_sequence_parallel_size")
    world = _get(config, "trainer.nnodes") * gpus
    if world % sp or (mini * n) % (world // sp):
        raise ConfigError("actor_rollout_ref.actor.ppo_mini_batch_size", f"{mini} x rollout.n={n} responses are "
                          f"invalid for {world} training processes (trainer.nnodes x trainer.n_gpus_per_node) with "
                          f"sequence parallelism {sp}: a mini-batch's responses must split evenly over the "
                          f"{world // max(sp, 1)} data-parallel ranks")  # fmt: skip
    if _get(config, "reward.reward_kwargs.overlong_buffer_cfg.enable", False):
        buffer, budget = _get(config, "reward.reward_kwargs.overlong_buffer_cfg.len"), _get(config, "data.max_response_length")
        if isinstance(buffer, bool) or not isinstance(buffer, int) or not 1 <= buffer < budget:
            raise ConfigError("reward.reward_kwargs.overlong_buffer_cfg.len", f"{buffer!r} is invalid: allowed an "
                              f"integer with 1 <= len < data.max_response_length={budget}")  # fmt: skip
    if _get(config, "trainer.val_before_train") or (_get(config, "trainer.test_freq") or 0) > 0:
        _positive_int(config, "actor_rollout_ref.rollout.val_kwargs.n")


def check_files(config: DictConfig) -> None:
    """The training and validation files are non-empty lists of paths."""
    for key in ("data.train_files", "data.val_files"):
        value = _get(config, key)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, ListConfig)) or not value or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(key, f"{value!r} is invalid: allowed one or more parquet files (a list of paths)")


def check_loggers(config: DictConfig) -> None:
    """Every tracker of ``trainer.logger`` is one verl supports (``verl.utils.tracking.Tracking``)."""
    from verl.utils.tracking import Tracking

    loggers = _get(config, "trainer.logger")
    items = [loggers] if isinstance(loggers, str) else list(loggers or [])
    allowed = list(Tracking.supported_backend)
    if not items:
        raise ConfigError("trainer.logger", f"{loggers!r} is invalid: allowed a list of {', '.join(allowed)}")
    for item in items:
        if item not in allowed:
            raise ConfigError("trainer.logger", f"entry {item!r} is invalid: allowed {', '.join(allowed)}")


def check_resume_path(config: DictConfig) -> None:
    """With ``trainer.resume_mode=resume_path``, ``trainer.resume_from_path`` is a verl checkpoint folder
    ``.../global_step_<N>`` with an ``actor/`` folder (not looked for in a dry run)."""
    if _get(config, "trainer.resume_mode") != "resume_path":
        return
    path = _get(config, "trainer.resume_from_path")
    key = "trainer.resume_from_path"
    if not isinstance(path, str) or not os.path.basename(os.path.normpath(path)).startswith("global_step_"):
        raise ConfigError(key, f"{path!r} is invalid: allowed a checkpoint folder named global_step_<N> (under a "
                          "run's trainer.default_local_dir)")  # fmt: skip
    if _get(config, "verl_ext.dry_run") is not True and not os.path.isdir(os.path.join(path, "actor")):
        raise ConfigError(key, f"{path!r} has no actor/ folder: not a verl checkpoint")


def check_cpu_scale(config: DictConfig) -> None:
    """A CPU recipe runs in CPU mode (``platform=cpu``) with a model its kind of recipe trains, and a model that
    runs on one vLLM rank has one."""
    recipe = _get(config, "verl_ext.recipe")
    if recipe is None or recipe.get("work_dir") is None:
        return
    kind = "scale" if recipe.get("scale") == "cpu" else "cpu_tiny"
    if _get(config, "trainer.device") != "cpu":
        raise ConfigError("platform", f"{kind}'s CPU sizes run in CPU mode only: keep platform=cpu (the recipe "
                          "selects it; it was overridden), or run the recipe as written on GPUs (scale=gpu)")  # fmt: skip
    prompts, mini = _get(config, "data.train_batch_size"), _get(config, "actor_rollout_ref.actor.ppo_mini_batch_size")
    if isinstance(prompts, int) and prompts % 2 and mini == prompts // 2:  # cpu_run.yaml's half, not the user's own
        raise ConfigError("data.train_batch_size", f"{prompts} is invalid at the CPU scale: allowed an even number "
                          "(two optimiser mini-batches a step, actor_rollout_ref.actor.ppo_mini_batch_size being half "
                          "of it), or set the mini-batch too")  # fmt: skip
    model = recipe.get("model")
    if model not in CPU_MODELS[kind]:
        where = "scale=cpu" if kind == "scale" else "recipe/cpu_tiny.sh"
        raise ConfigError("cpu_model", f"{model!r} is invalid with {where}: allowed {', '.join(CPU_MODELS[kind])}")
    tp = _get(config, "actor_rollout_ref.rollout.tensor_model_parallel_size")
    if model in SINGLE_RANK_MODELS and tp != 1:
        raise ConfigError("actor_rollout_ref.rollout.tensor_model_parallel_size", f"{tp} is invalid with "
                          f"cpu_model={model}: allowed 1 ({SINGLE_RANK_MODELS[model]})")  # fmt: skip


def check_recipe(config: DictConfig) -> None:
    """Every check of this module."""
    check_sizes(config)
    check_files(config)
    check_loggers(config)
    check_resume_path(config)
    check_cpu_scale(config)


__all__ = ["CPU_MODELS", "POSITIVE_INTS", "SINGLE_RANK_MODELS", "check_cpu_scale", "check_files", "check_loggers",
           "check_recipe", "check_resume_path", "check_sizes"]  # fmt: skip
