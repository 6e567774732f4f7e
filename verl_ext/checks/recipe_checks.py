"""Checks of a composed config's sizes, files, names and CPU-scale model: one place, whatever set the value.

A value reaches the config from a group file, from a Hydra override, or from a launch variable that
``recipe/launch.sh`` turned into an override (:mod:`verl_ext.recipe.launch_env`): these checks run on the composed
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


TP_KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"
"""The rollout's tensor-parallel size (``GEN_TP``)."""
ROLLOUT_SIZES = ("actor_rollout_ref.rollout.data_parallel_size",
                 "actor_rollout_ref.rollout.pipeline_model_parallel_size")  # fmt: skip
"""The rollout's other parallel sizes: a replica holds tensor x data x pipeline parallel GPUs."""


def _replica_problem(tp: int, dp: int, pp: int, replica_node_gpus: int, gpus: int) -> str | None:
    """Why verl 0.9.1 cannot build hybrid rollout replicas of ``tp * dp * pp`` GPUs on ``gpus`` GPUs in all, nodes of
    ``replica_node_gpus`` (verl's ``rollout.n_gpus_per_node``); ``None`` where it can."""
    world = tp * dp * pp
    per_node = min(replica_node_gpus, world)
    # verl/workers/rollout/replica.py:107-117 (RolloutReplica.__init__): world_size = tp * dp * pp,
    # gpus_per_replica_node = min(gpus_per_node, world_size), assert world_size % gpus_per_replica_node == 0
    if world % per_node:
        return (f"a replica of {world} GPUs may span nodes only as whole nodes of {replica_node_gpus} GPUs (verl's "
                "RolloutReplica)")  # fmt: skip
    # verl/workers/engine_workers.py:654-661: the hybrid worker group (trainer.nnodes x trainer.n_gpus_per_node,
    # verl/trainer/ppo/v1/trainer_base.py:819) is split into replicas, assert world_size % infer_world_size == 0;
    # verl/workers/rollout/llm_server.py:455-470 makes world_size // rollout_world_size replicas of it
    if gpus % world:
        return f"the {gpus} GPUs must split into whole replicas of {world} GPUs (verl's rollout device mesh)"
    # verl/workers/rollout/vllm_rollout/vllm_async_server.py:1358-1364 (vLLMReplica.launch_servers): a replica starts
    # one server per gpus_per_replica_node consecutive workers, on the first one's node, with their device ids;
    # verl asserts nothing, but a replica smaller than a node that straddles two would put devices of one node into
    # a server on the other
    if world < replica_node_gpus and replica_node_gpus % world:
        return (f"a replica of {world} GPUs would straddle two nodes of {replica_node_gpus} GPUs (verl starts each "
                "replica's vLLM server on one node)")  # fmt: skip
    # verl/workers/rollout/vllm_rollout/vllm_async_server.py:384-391: with data parallelism, assert
    # gpus_per_node % tensor_model_parallel_size == 0, gpus_per_node being the replica's GPUs on a node
    if dp > 1 and per_node % tp:
        return (f"with data_parallel_size={dp}, the tensor-parallel size must divide the {per_node} GPUs a replica "
                "has on a node (verl's vLLM server)")  # fmt: skip
    return None


def check_rollout_parallelism(config: DictConfig) -> None:
    """The rollout's tensor-parallel size is one verl 0.9.1 builds hybrid replicas with: a replica (tensor x data x
    pipeline parallel GPUs) fills whole nodes or fits in one, and the GPUs split into whole replicas, so a
    tensor-parallel size may span nodes (16 on 2 x 8 GPUs). Only vLLM's and verl's own rules (cited in
    :func:`_replica_problem`) are applied; the disaggregated prefill/decode layout adds its own."""
    tp = _positive_int(config, TP_KEY)
    sizes = []
    for key in ROLLOUT_SIZES:
        value = _get(config, key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(key, f"{value!r} is invalid: allowed an integer >= 1")
        sizes.append(value)
    dp, pp = sizes
    nodes, node_gpus = _get(config, "trainer.nnodes"), _get(config, "trainer.n_gpus_per_node")
    # verl/trainer/config/rollout/rollout.yaml:14: rollout.n_gpus_per_node defaults to trainer.n_gpus_per_node;
    # llm_server.py:467 hands it to every replica
    replica_node_gpus = _get(config, "actor_rollout_ref.rollout.n_gpus_per_node", None)
    if replica_node_gpus is None:  # unset: verl's own default
        replica_node_gpus = node_gpus
    elif isinstance(replica_node_gpus, bool) or not isinstance(replica_node_gpus, int) or replica_node_gpus < 1:
        raise ConfigError("actor_rollout_ref.rollout.n_gpus_per_node", f"{replica_node_gpus!r} is invalid: allowed an "
                          "integer >= 1, or null (trainer.n_gpus_per_node)")  # fmt: skip
    gpus = nodes * node_gpus
    problem = _replica_problem(tp, dp, pp, replica_node_gpus, gpus)
    if problem is None:
        return
    allowed = [t for t in range(1, gpus + 1) if _replica_problem(t, dp, pp, replica_node_gpus, gpus) is None]
    where = f"trainer.nnodes={nodes} x trainer.n_gpus_per_node={node_gpus}"
    if (dp, pp) != (1, 1):
        where += f", rollout data_parallel_size={dp} x pipeline_model_parallel_size={pp}"
    choice = f"allowed {', '.join(map(str, allowed))}" if allowed else "no tensor-parallel size fits these sizes"
    raise ConfigError(TP_KEY, f"{tp} is invalid on {where}: {problem}; {choice}")


def check_sizes(config: DictConfig) -> None:
    """Counts are integers >= 1; the rollout's replicas fit the GPUs (:func:`check_rollout_parallelism`); the
    optimiser mini-batch divides the step's prompts and its responses split evenly over the training processes;
    DAPO's overlong buffer lies inside the response budget; validation takes at least one answer per problem."""
    for key in POSITIVE_INTS:
        _positive_int(config, key)
    steps = _get(config, "trainer.total_training_steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ConfigError("trainer.total_training_steps", f"{steps!r} is invalid: allowed an integer >= 1, or null "
                          "(the epochs decide)")  # fmt: skip
    gpus = _get(config, "trainer.n_gpus_per_node")
    check_rollout_parallelism(config)
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


DATA_FILE_KEYS = ("data.train_files", "data.val_files")
"""verl's keys of the training and validation files: each holds one path or a list of them."""


def data_files(config: DictConfig, key: str) -> list[Any] | None:
    """What ``key`` (one of :data:`DATA_FILE_KEYS`) holds as a list: a path as a list of one, a list as it is;
    ``None`` for anything else (unset included)."""
    value = OmegaConf.select(config, key, default=None)
    if isinstance(value, str):
        return [value]
    return list(value) if isinstance(value, (list, ListConfig)) else None


def check_files(config: DictConfig) -> None:
    """The training and validation files are non-empty lists of paths."""
    for key in DATA_FILE_KEYS:
        items = data_files(config, key)
        if not items or not all(isinstance(v, str) and v for v in items):
            raise ConfigError(key, f"{_get(config, key)!r} is invalid: allowed one or more parquet files (a list of "
                              "paths)")  # fmt: skip


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


__all__ = ["CPU_MODELS", "POSITIVE_INTS", "ROLLOUT_SIZES", "SINGLE_RANK_MODELS", "TP_KEY", "check_cpu_scale",
           "check_files", "check_loggers", "check_recipe", "check_resume_path", "check_rollout_parallelism",
           "check_sizes"]  # fmt: skip
