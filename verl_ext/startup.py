"""The start-up stages of ``python -m verl_ext.main_ppo`` between the preflight and the trainer (level 7: above
every package, below the entry point).

:func:`resolved` (stage 2) returns the config resolved, changing nothing outside it: a recipe's paths absolute (``~``
expanded; relative paths against the launch's working folder, as every Ray worker must see them) and, in CPU mode
joining a running Ray cluster, the local cluster's ``ray.init`` settings nulled (:func:`join_rule`; the same rule
for a recipe and a plain composition). A resolver's error (a CPU precision this machine cannot run) is a
:class:`RecipeStartError` naming it. :func:`report` prints what a CPU scale changes and what an eval run evaluates.

:func:`build_assets` builds the assets a CPU recipe declares (``verl_ext.recipe.assets``), where missing, in its work
folder (:mod:`verl_ext.testbed.assets`): validation reads their data files, and a dry run writes nothing else.

:func:`apply` (stage 5, after the dry run's exit) changes the process and the disk: with a ``wandb`` logger and no API
key, no ``WANDB_MODE`` and no wandb login in ``~/.netrc``, a recipe's wandb goes offline (``wandb sync`` later) here and in every
Ray worker, and it says so (the key itself is never printed or put in the config); in CPU mode the precision probe,
OpenMP's runtime, the local Ray on loopback and its private token; the resolved config saved beside the checkpoints
(:data:`SAVED_CONFIG`): ``python -m verl_ext.main_ppo --config-path <that folder> --config-name resolved_config``
composes the same config.

May import: ``verl_ext.checks``, ``verl_ext.cpu``, ``verl_ext.driver``, ``verl_ext.testbed``, ``verl_ext.config``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from verl_ext.checks.recipe_checks import DATA_FILE_KEYS, check_sizes, data_files
from verl_ext.config import ConfigError
from verl_ext.cpu import mode as cpu_mode
from verl_ext.cpu import openmp as cpu_openmp
from verl_ext.cpu import precision as cpu_precision
from verl_ext.cpu import precision_probe
from verl_ext.cpu.precision import PrecisionError
from verl_ext.cpu.workarounds import keep_local_ray_on_loopback, private_ray_token_file
from verl_ext.driver.mixin import write_atomically
from verl_ext.testbed.assets import AssetError, AssetPlan, ensure

SAVED_CONFIG = "resolved_config.yaml"
"""The file, in ``trainer.default_local_dir``, holding the resolved config a run used (:func:`save_resolved`)."""

ROOT_PATH_KEYS = ("verl_ext.recipe.work_dir", "verl_ext.recipe.data_dir", "trainer.default_local_dir")
"""Paths other paths are built from: made absolute before the config is resolved, so the paths built from them are."""
PATH_KEYS = (*ROOT_PATH_KEYS, "trainer.validation_data_dir", "trainer.resume_from_path",
             "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH")  # fmt: skip
"""A recipe's path keys, made absolute after it is resolved."""
MODEL_PATH_KEY = "actor_rollout_ref.model.path"
"""A local directory or a hub id: made absolute only when it is a local path."""


class RecipeStartError(ValueError):
    """A recipe cannot start: a value its resolvers reject or a failed asset build; the message names it."""


def _configs_dir() -> Path:
    from importlib import resources

    return Path(str(resources.files("verl_ext.configs")))


def absolute(path: Any) -> Any:
    """``path`` with ``~`` expanded, absolute against the working folder (``None`` stays ``None``)."""
    return None if path is None else os.path.abspath(os.path.expanduser(str(path)))


def _local_model_path(path: Any) -> bool:
    text = str(path)
    return text.startswith(("/", "./", "../", "~")) or os.path.exists(text)


def _absolute_root_paths(config: DictConfig) -> None:
    """The root path keys that hold a plain path (not an interpolation) made absolute, in place, before resolving."""
    with open_dict(config):
        for key in ROOT_PATH_KEYS:
            parent, _, leaf = key.rpartition(".")
            holder = OmegaConf.select(config, parent, default=None)
            if not isinstance(holder, DictConfig) or leaf not in holder:
                continue
            written = OmegaConf.to_container(holder, resolve=False)[leaf]  # as written: an interpolation stays a string
            if isinstance(written, str) and "${" not in written:
                holder[leaf] = absolute(written)


def absolute_paths(config: DictConfig) -> None:
    """A resolved recipe's path keys made absolute, in place."""
    with open_dict(config):
        for key in PATH_KEYS:
            value = OmegaConf.select(config, key, default=None)
            if value is not None:
                OmegaConf.update(config, key, absolute(value))
        for key in DATA_FILE_KEYS:  # a recipe's keys holding lists of paths
            items = data_files(config, key)
            if items is not None:
                OmegaConf.update(config, key, [absolute(v) for v in items], merge=False)
        model = OmegaConf.select(config, MODEL_PATH_KEY, default=None)
        if model is not None and _local_model_path(model):
            OmegaConf.update(config, MODEL_PATH_KEY, absolute(model))


def resolve(config: DictConfig) -> DictConfig:
    """``config`` with every interpolation resolved (a new config). A resolver's :class:`ValueError` about CPU mode's
    precision (one this machine cannot run) becomes a :class:`RecipeStartError`; a size the interpolations compute
    with that :func:`~verl_ext.checks.recipe_checks.check_sizes` rejects (``trainer.nnodes=0``, a length ``abc``)
    raises that check's :class:`~verl_ext.config.ConfigError`, the line a bad size gives wherever it is used."""
    try:
        resolved = OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    except OmegaConfBaseException as exc:
        cause, seen = exc, set()
        while cause is not None and id(cause) not in seen and not isinstance(cause, PrecisionError):
            seen.add(id(cause))
            cause = cause.__cause__ or cause.__context__
        if isinstance(cause, PrecisionError):
            raise RecipeStartError(str(cause)) from exc
        _raise_size_error(config, exc)
        raise
    OmegaConf.set_struct(resolved, OmegaConf.is_struct(config))
    return resolved


def _raise_size_error(config: DictConfig, failure: Exception) -> None:
    """The size check's :class:`~verl_ext.config.ConfigError` behind a failed resolution, if a size is bad."""
    try:
        check_sizes(config)
    except ConfigError as error:
        raise error from failure
    except (OmegaConfBaseException, ArithmeticError, TypeError, ValueError):
        return


def _leaf_keys(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return [prefix]
    keys = []
    for key, value in node.items():
        if key == "defaults" or (not prefix and key == "verl_ext"):
            continue
        keys += _leaf_keys(value, f"{prefix}.{key}" if prefix else str(key))
    return keys


CPU_SCALE_FILES = ("cpu_run.yaml", "scale/cpu.yaml")
"""What the CPU scale sets, before the model's file (``cpu_model/<model>.yaml``)."""


def scale_keys(model: str) -> list[str]:
    """The keys the CPU scale sets (:data:`CPU_SCALE_FILES` and ``cpu_model/<model>.yaml``)."""
    base = _configs_dir()
    keys: list[str] = []
    for path in (*(base / f for f in CPU_SCALE_FILES), base / "cpu_model" / f"{model}.yaml"):
        keys += _leaf_keys(OmegaConf.to_container(OmegaConf.load(path)))
    return list(dict.fromkeys(keys))


def scale_lines(config: DictConfig) -> list[str]:
    """The start-up lines of a recipe at ``scale=cpu``."""
    recipe = config.verl_ext.recipe
    get = lambda key: OmegaConf.select(config, key)  # noqa: E731
    sizes = " ".join(f"{key}={get(key)}" for key in scale_keys(recipe.model))
    loss = "actor_rollout_ref.actor.policy_loss"
    return [
        f"scale=cpu: CPU mode, {get('trainer.nnodes')} node x {get('trainer.n_gpus_per_node')} training processes, "
        f"cpu_model={recipe.model}: {get('actor_rollout_ref.model.path')},",
        f"  data {recipe.data_dir}, prompt/response {get('data.max_prompt_length')}/{get('data.max_response_length')} "
        f"tokens, selection ratios {get(loss + '.clip_cov_ratio')} / {get(loss + '.kl_cov_ratio')} (Clip-Cov / "
        f"KL-Cov), vLLM TP {get('actor_rollout_ref.rollout.tensor_model_parallel_size')},",
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
    return AssetPlan(task=recipe.get("task", "math"), model=recipe.model, folder=Path(recipe.work_dir),
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


LOCAL_RAY_ONLY = ("num_cpus", "num_gpus", "include_dashboard")
"""``ray.init`` arguments of ``configs/platform/cpu.yaml`` that Ray accepts only when it starts a local cluster."""


def ray_cluster_address(config: DictConfig) -> str | None:
    """The Ray cluster verl will join (``ray_kwargs.ray_init.address`` or ``RAY_ADDRESS``), or ``None`` when it
    starts a local one."""
    return OmegaConf.select(config, "ray_kwargs.ray_init.address", default=None) or os.environ.get("RAY_ADDRESS") or None


def join_rule(config: DictConfig) -> list[str]:
    """In CPU mode joining a running Ray cluster (``RAY_ADDRESS`` or ``ray_kwargs.ray_init.address``, e.g.
    ``scripts/cluster/ray_head.sh``), the ``ray.init`` settings only a local cluster takes (:data:`LOCAL_RAY_ONLY`:
    CPUs, GPU slots, dashboard; ``configs/platform/cpu.yaml`` sets them, and Ray rejects them when it joins a cluster
    whose own ``ray start`` set them) are set to null, in place; the keys it nulled."""
    if not (cpu_mode.requested() and ray_cluster_address(config)):
        return []
    nulled = [f"ray_kwargs.ray_init.{key}" for key in LOCAL_RAY_ONLY
              if OmegaConf.select(config, f"ray_kwargs.ray_init.{key}") is not None]  # fmt: skip
    with open_dict(config):
        for key in nulled:
            OmegaConf.update(config, key, None, force_add=True)
    return nulled


def resolved(config: DictConfig) -> DictConfig:
    """Stage 2: ``config`` resolved (a new config); a recipe's paths absolute; :func:`join_rule` applied (it says
    which keys it nulled). Nothing built, started or set outside the config."""
    recipe = OmegaConf.select(config, "verl_ext.recipe") is not None
    if recipe:
        _absolute_root_paths(config)
    config = resolve(config)
    if recipe:
        absolute_paths(config)
    nulled = join_rule(config)
    if nulled:
        print(f"note: joining a running Ray cluster: {', '.join(nulled)} set to null (a local cluster's settings, "
              "which Ray rejects when it joins)", file=sys.stderr)  # fmt: skip
    return config


def report(config: DictConfig) -> None:
    """What a recipe's CPU scale changes and what an eval run evaluates, printed (stderr)."""
    recipe = OmegaConf.select(config, "verl_ext.recipe")
    if recipe is None:
        return
    if recipe.get("scale") == "cpu":
        print("\n".join(scale_lines(config)), file=sys.stderr)
    if recipe.get("protocol"):
        print(eval_line(config), file=sys.stderr)


def build_assets(config: DictConfig) -> str | None:
    """The assets a CPU recipe declares (``verl_ext.recipe.assets``), built where missing in its work folder; a line
    saying what was built where (``None``: the config declares none)."""
    recipe = OmegaConf.select(config, "verl_ext.recipe")
    if recipe is None or not recipe.get("assets"):
        return None
    plan = asset_plan(config)
    try:
        done = ensure(plan)
    except AssetError as exc:
        raise RecipeStartError(str(exc)) from exc
    return f"{', '.join(done) + ' built' if done else 'present'} in {plan.folder} (the recipe's assets)"


def apply(config: DictConfig) -> Path:
    """Stage 5: the run's environment and files - wandb offline without a login (:func:`wandb_offline`), CPU mode's
    precision probe and OpenMP runtime, its local Ray on loopback with a private token, and the resolved config saved
    (:func:`save_resolved`); returns the saved file. A CPU precision this machine cannot run, or a missing OpenMP
    runtime, is a ``ValueError`` / ``FileNotFoundError`` naming it. wandb's rule applies to a recipe (a config with a
    ``verl_ext.recipe`` node); a plain composition logs as verl does."""
    if OmegaConf.select(config, "verl_ext.recipe") is not None:
        wandb_offline(config)
    if cpu_mode.active():
        speed = precision_probe.probe(OmegaConf.select(config, "actor_rollout_ref.model.path"))
        lines = [cpu_precision.startup_line(config, speed=speed),  # the chosen precision, and bf16's speed here
                 cpu_openmp.apply(config)]  # VERL_EXT_CPU_IOMP=1: Intel's OpenMP runtime in every Ray worker
        for line in filter(None, lines):
            print(line, file=sys.stderr)
    saved = save_resolved(config)
    print(f"resolved config: {saved} (replay: python -m verl_ext.main_ppo --config-path {saved.parent} "
          f"--config-name {saved.stem})", file=sys.stderr)  # fmt: skip
    address = ray_cluster_address(config)
    if cpu_mode.active() and (not address or on_loopback(address)):
        # the local Ray (and vLLM's servers) listen on 127.0.0.1 only; joining a Ray on 127.0.0.1, the driver keeps
        # that address (Ray would replace it by the machine's, where nothing listens)
        keep_local_ray_on_loopback()
    if cpu_mode.active() and not address:
        private_ray_token_file()  # and its token (Ray turns token auth on) is readable by this user only
    return saved


def on_loopback(address: str) -> bool:
    """``address`` (``host:port`` of a running Ray, as ``RAY_ADDRESS`` gives it) is on this machine's loopback."""
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    return host == "localhost" or host == "::1" or host.startswith("127.")


def save_resolved(config: DictConfig) -> Path:
    """Write ``config`` (resolved) to :data:`SAVED_CONFIG` in ``trainer.default_local_dir``, replacing the file
    atomically; returns its path."""
    folder = Path(absolute(OmegaConf.select(config, "trainer.default_local_dir")))
    path = folder / SAVED_CONFIG
    write_atomically(path, "# the resolved config of this run (verl_ext.main_ppo); replay: python -m verl_ext.main_ppo "
                     f"--config-path {folder} --config-name {path.stem}\n" + OmegaConf.to_yaml(config, resolve=True))
    return path
