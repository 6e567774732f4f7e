"""What ``python -m verl_ext.main_ppo`` does with a recipe's config before it validates and trains.

:func:`prepare` returns the config resolved (every ``${verl_ext.env_*:...}`` of :mod:`~verl_ext.checks.recipe_env`
reads its variable now: a bad value is a :class:`RecipeStartError` naming it). For a recipe (a config with a
``verl_ext.recipe`` node) it then

* prints, at ``SCALE=cpu``, what the scale changes: every key of ``configs/scale/cpu.yaml`` and of the model's file,
  with the value this run uses;
* builds the CPU recipes' assets where missing (``verl_ext.recipe.assets``; :mod:`verl_ext.testbed.assets`);
* warns about training or validation files missing on this node;
* in CPU mode joining a running Ray cluster (``RAY_ADDRESS`` or ``ray_kwargs.ray_init.address``, e.g.
  ``scripts/cluster/ray_head.sh``), nulls the local cluster's ``ray_init`` settings of ``configs/platform/cpu.yaml``
  (CPUs, GPU slots, dashboard), which Ray rejects when it joins a cluster whose own ``ray start`` set them;
* with a ``wandb`` logger and no API key, no ``WANDB_MODE`` and no wandb login in ``~/.netrc``, sends wandb offline
  (``wandb sync`` later) in this process and in every Ray worker, and says so. The key itself is never printed or put
  in the config.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from verl_ext.checks.recipe_env import recipe_env_error
from verl_ext.checks.validation import LOCAL_RAY_ONLY, ray_cluster_address
from verl_ext.cpu import mode as cpu_mode
from verl_ext.testbed.assets import AssetError, AssetPlan, ensure


class RecipeStartError(ValueError):
    """A recipe cannot start: a bad environment variable or a failed asset build; the message names it."""


def _configs_dir() -> Path:
    from importlib import resources

    return Path(str(resources.files("verl_ext.configs")))


def resolve(config: DictConfig) -> DictConfig:
    """``config`` with every interpolation resolved (a new config: a resolver may turn a string into a list, which
    OmegaConf cannot do in place); a recipe variable's bad value becomes a :class:`RecipeStartError`."""
    try:
        resolved = OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    except OmegaConfBaseException as exc:
        cause = recipe_env_error(exc)
        if cause is None:
            raise
        raise RecipeStartError(str(cause)) from exc
    OmegaConf.set_struct(resolved, OmegaConf.is_struct(config))
    return resolved


def _leaf_keys(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return [prefix]
    keys = []
    for key, value in node.items():
        if key == "defaults" or (not prefix and key == "verl_ext"):
            continue
        keys += _leaf_keys(value, f"{prefix}.{key}" if prefix else str(key))
    return keys


def scale_keys(model: str) -> list[str]:
    """The keys ``scale/cpu.yaml`` and ``scale/model/<model>.yaml`` set (what the CPU scale changes)."""
    base = _configs_dir() / "scale"
    keys: list[str] = []
    for path in (base / "cpu.yaml", base / "model" / f"{model}.yaml"):
        keys += _leaf_keys(OmegaConf.to_container(OmegaConf.load(path)))
    return list(dict.fromkeys(keys))


def scale_lines(config: DictConfig) -> list[str]:
    """The start-up lines of a ``SCALE=cpu`` recipe."""
    recipe = config.verl_ext.recipe
    get = lambda key: OmegaConf.select(config, key)  # noqa: E731
    sizes = " ".join(f"{key}={get(key)}" for key in scale_keys(recipe.model))
    return [
        f"SCALE=cpu: CPU mode (VERL_PLATFORM=cpu), {get('trainer.nnodes')} node x {get('trainer.n_gpus_per_node')} "
        f"training processes, MODEL={recipe.model}: {get('actor_rollout_ref.model.path')},",
        f"  data {recipe.data_dir}, prompt/response {get('data.max_prompt_length')}/{get('data.max_response_length')} "
        f"tokens, COV_RATIO={recipe.cov_ratio} (Clip-Cov / KL-Cov), vLLM TP "
        f"{get('actor_rollout_ref.rollout.tensor_model_parallel_size')},",
        f"  run log {get('ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH')};",
        f"  size overrides: {sizes}",
    ]


def eval_line(config: DictConfig) -> str:
    """The start-up line of ``recipe/eval.yaml``: what is evaluated, how it is sampled, where the dumps go."""
    trainer, sampling = config.trainer, config.actor_rollout_ref.rollout.val_kwargs
    what = trainer.get("resume_from_path") or config.actor_rollout_ref.model.path
    keys = " ".join(f"{key}={sampling.get(key)}" for key in ("do_sample", "temperature", "top_p", "n"))
    return f"evaluating {what} with protocol {config.verl_ext.recipe.protocol} ({keys}); dumps in {trainer.validation_data_dir}"


def asset_plan(config: DictConfig) -> AssetPlan:
    """What the recipe's assets are, from its config."""
    recipe = config.verl_ext.recipe
    return AssetPlan(task=recipe.get("task", "math"), model=recipe.model, folder=Path(recipe.scale_dir),
                     data_dir=Path(recipe.data_dir), model_path=Path(config.actor_rollout_ref.model.path),
                     target_length=int(config.data.max_response_length), seed=int(config.data.get("seed") or 0))  # fmt: skip


def wandb_offline(config: DictConfig, environ: dict[str, str] | None = None) -> bool:
    """With a wandb logger and no way to log in, set ``WANDB_MODE=offline`` here and for the Ray workers; whether it
    did. A ``WANDB_MODE`` the user set is forwarded to the workers as it is."""
    environ = os.environ if environ is None else environ
    loggers = config.trainer.get("logger") or []
    if isinstance(loggers, str):
        loggers = [loggers]
    if "wandb" not in loggers:
        return False
    went_offline = False
    netrc = Path(environ.get("NETRC") or Path(environ.get("HOME", "~")).expanduser() / ".netrc")
    logged_in = netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="replace")
    if not environ.get("WANDB_MODE") and not environ.get("WANDB_API_KEY") and not logged_in:
        environ["WANDB_MODE"] = "offline"
        went_offline = True
        print("note: no WANDB_API_KEY and no wandb login found: wandb logs offline (wandb sync later)", file=sys.stderr)
    if environ.get("WANDB_MODE"):
        with open_dict(config):  # force_add creates the missing parent nodes
            OmegaConf.update(config, "ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE", environ["WANDB_MODE"],
                             force_add=True)  # fmt: skip
    return went_offline


def prepare(config: DictConfig) -> DictConfig:
    """``config`` resolved; for a recipe, its CPU sizes printed, its assets built and its loggers set up."""
    config = resolve(config)
    recipe = OmegaConf.select(config, "verl_ext.recipe")
    if recipe is None:
        return config
    if recipe.get("scale") == "cpu":
        print("\n".join(scale_lines(config)), file=sys.stderr)
    if recipe.get("protocol"):
        print(eval_line(config), file=sys.stderr)
    if recipe.get("assets"):
        try:
            ensure(asset_plan(config))
        except AssetError as exc:
            raise RecipeStartError(str(exc)) from exc
    if cpu_mode.requested() and ray_cluster_address(config):
        with open_dict(config):
            for key in LOCAL_RAY_ONLY:
                OmegaConf.update(config, f"ray_kwargs.ray_init.{key}", None, force_add=True)
    for key in ("data.train_files", "data.val_files"):
        for path in OmegaConf.select(config, key) or []:
            if not Path(path).exists():
                print(f"warning: {path} ({key}) does not exist on this node (prepare it with scripts/data/)", file=sys.stderr)
    wandb_offline(config)
    return config
