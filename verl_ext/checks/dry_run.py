"""``verl_ext.dry_run=true``: compose, build, validate, summarise and exit, without Ray or a GPU.

:func:`validate` builds the dataclasses verl builds from the config (actor, reference, rollout with its
checkpoint engine, critic, algorithm, skip, distillation, V1 hybrid-rollout switch; the model only from a
local directory; not ``reward``, which verl 0.9.1 itself never builds and cannot build), runs verl's ``validate_config`` and verl_ext's checks (:mod:`verl_ext.checks.validation`),
and returns a summary. :func:`dry_run` prints it and returns the exit status: 0, or 2 after
``verl_ext: invalid config: <key>: <message>`` for a bad value (verl_ext's ``ConfigError``, OmegaConf's errors, and
what verl's own validation raises: :data:`CONFIG_VALIDATION_ERRORS` from a frame of verl's code); any other exception
- a bug in verl_ext, a failed import - propagates with its traceback. ``verl_ext.main_ppo`` runs the same :func:`validate`
before every real run, so a bad value fails there the same way, before Ray starts.

Model-free: ``actor_rollout_ref.model`` (and the critic's model) are only loaded when the path is a
local directory; otherwise the dry run says so and checks the critic with its model left out.
"""

from __future__ import annotations

import copy
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from verl_ext.checks.recipe_checks import check_recipe
from verl_ext.checks.validation import ConfigError, check_loss_mode, check_strategy, check_verl_ext, needs_critic
from verl_ext.losses import SPECS

EXIT_INVALID = 2

_TOP_KEYS = ("actor_rollout_ref", "critic", "algorithm", "data", "trainer", "reward", "distillation",
             "global_profiler", "transfer_queue", "ray_kwargs", "skip")  # fmt: skip
# (not "verl_ext": module names such as verl_ext.trainer.actor_config would read as keys; its keys raise ConfigError)
_KEY_IN_TEXT = re.compile(r"\b((?:%s)(?:\.[A-Za-z_][\w]*)+)" % "|".join(_TOP_KEYS))
_FULL_KEY = re.compile(r"full_key:\s*(\S+)")
_OMEGACONF_DETAILS = ("full_key:", "object_type=", "reference_type=")

CONFIG_VALIDATION_ERRORS: tuple[type[BaseException], ...] = (ValueError, AssertionError, TypeError)
"""What verl's config validation raises for a bad value: ``validate_config`` and its dataclasses' ``__post_init__``
assert and raise ``ValueError``; building a dataclass from a section with a key it lacks raises ``TypeError``. They
count as a bad value only when raised in verl's own code (:func:`raised_by_verl`): the same types raised in
verl_ext's code are a bug (verl_ext reports a bad value as a ``ConfigError``). OmegaConf's errors are a bad key or
type wherever they come from."""


def raised_by_verl(exc: BaseException) -> bool:
    """``exc`` was raised in a frame of verl's package (the innermost frame of its traceback)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "")
    return module == "verl" or module.startswith("verl.")


@dataclass
class Validated:
    """What :func:`validate` built and found."""

    built: dict[str, Any] = field(default_factory=dict)
    """Config section -> built dataclass."""

    facts: dict[str, Any] = field(default_factory=dict)
    """verl_ext's findings (:func:`verl_ext.checks.validation.check_verl_ext`)."""

    notes: list[str] = field(default_factory=list)
    """Checks left out, and why."""

    dry: bool = False
    """``verl_ext.dry_run``: the start-up stops after validation and prints the summary."""


def error_key_and_message(exc: BaseException, default_key: str) -> tuple[str, str]:
    """The config key an exception is about, and its innermost message.

    Order: a :class:`ConfigError`'s key; a full config key quoted in the innermost message (verl_ext's
    messages start with ``<key>=<value>``); the ``full_key:`` of an OmegaConf or Hydra instantiation
    error; ``default_key``. OmegaConf's detail lines are dropped from the message.
    """
    if isinstance(exc, ConfigError):
        return exc.key, exc.message
    inner = exc
    while inner.__cause__ is not None and inner.__cause__ is not inner:
        inner = inner.__cause__
    if isinstance(inner, ConfigError):
        return inner.key, inner.message
    lines = [line.strip() for line in str(inner).splitlines()]
    message = " ".join(line for line in lines if line and not line.startswith(_OMEGACONF_DETAILS))
    message = message or type(inner).__name__
    found = _KEY_IN_TEXT.search(message)
    if found:
        return found.group(1), message
    found = _FULL_KEY.search(str(inner)) or _FULL_KEY.search(str(exc))
    return (found.group(1) if found else default_key), message


def is_config_error(exc: BaseException) -> bool:
    """Whether ``exc`` reports a bad config value (verl_ext's ``ConfigError``, OmegaConf's errors, verl's own
    :data:`CONFIG_VALIDATION_ERRORS`, or Hydra's instantiation error about one: a bad ``_target_``, or wrapping one of
    those) rather than a failure."""
    if isinstance(exc, (ConfigError, OmegaConfBaseException)):
        return True
    if isinstance(exc, CONFIG_VALIDATION_ERRORS) and raised_by_verl(exc):
        return True
    if isinstance(exc, InstantiationException):
        cause = exc.__cause__
        return cause is None or isinstance(cause, ImportError) or is_config_error(cause)
    return False


def config_error(exc: BaseException, default_key: str) -> ConfigError:
    """``exc`` as a :class:`ConfigError` naming its key when it reports a bad config value; otherwise ``exc`` is
    re-raised as it is (with its traceback)."""
    if not is_config_error(exc):
        raise exc
    return ConfigError(*error_key_and_message(exc, default_key))


def _build(key: str, node: Any, validated: Validated) -> Any:
    from verl.utils.config import omega_conf_to_dataclass

    try:
        obj = omega_conf_to_dataclass(node)
    except Exception as exc:
        raise config_error(exc, key) from exc
    validated.built[key] = obj
    return obj


def _local_model(config: DictConfig, key: str) -> bool:
    path = OmegaConf.select(config, f"{key}.path")
    return isinstance(path, str) and os.path.isdir(os.path.expanduser(path))


def _ref_node(config: DictConfig) -> DictConfig:
    """The reference-policy node as verl's ``ActorRolloutRefWorker.init_model`` renames it (on a copy)."""
    ref = copy.deepcopy(config.actor_rollout_ref.ref)
    with open_dict(ref):
        ref.ppo_mini_batch_size = config.actor_rollout_ref.actor.ppo_mini_batch_size
        ref.ppo_micro_batch_size = ref.pop("log_prob_micro_batch_size", None)
        ref.ppo_micro_batch_size_per_gpu = ref.pop("log_prob_micro_batch_size_per_gpu", None)
        ref.use_dynamic_bsz = ref.pop("log_prob_use_dynamic_bsz", False)
        ref.ppo_max_token_len_per_gpu = ref.pop("log_prob_max_token_len_per_gpu", None)
    return ref


def validate(config: DictConfig, load_models: bool = False) -> Validated:
    """Build verl's dataclasses and run verl's and verl_ext's checks; raise :class:`ConfigError`.

    ``load_models``: build ``HFModelConfig`` (loads the tokenizer and model config) also for paths that
    are not local directories. The dry run passes ``False``; it never downloads.
    """
    from verl.trainer.distillation import is_distillation_enabled
    from verl.trainer.ppo.utils import need_reference_policy
    from verl.utils.config import validate_config

    dry = OmegaConf.select(config, "verl_ext.dry_run", default=False)
    if not isinstance(dry, bool):
        raise ConfigError("verl_ext.dry_run", f"{dry!r} is not a boolean; allowed: true, false")
    validated = Validated(dry=dry)
    # cheap checks first: an unknown loss or engine is reported as such, not as a failure in verl's code
    mode = check_loss_mode(config)
    check_strategy(config)
    check_recipe(config)  # sizes, files, loggers, checkpoint, CPU scale: the same error whatever set the value

    actor_model = load_models or _local_model(config, "actor_rollout_ref.model")
    use_critic, use_ref = needs_critic(config), need_reference_policy(config)
    critic_model = use_critic and (load_models or _local_model(config, "critic.model"))
    try:
        validate_config(config=config, use_reference_policy=use_ref, use_critic=critic_model)
    except Exception as exc:
        raise config_error(exc, "actor_rollout_ref") from exc

    n_gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
    actor = _build("actor_rollout_ref.actor", config.actor_rollout_ref.actor, validated)
    if use_ref:
        _build("actor_rollout_ref.ref", _ref_node(config), validated)
    _build("actor_rollout_ref.rollout", config.actor_rollout_ref.rollout, validated)
    if actor_model:
        _build("actor_rollout_ref.model", config.actor_rollout_ref.model, validated)
    else:
        validated.notes.append(f"actor_rollout_ref.model.path={config.actor_rollout_ref.model.path} is not a "
                               "local directory: tokenizer and model config not loaded")  # fmt: skip
    if critic_model:
        validated.built["critic"] = "built and validated by verl's validate_config"
    elif use_critic:
        critic = copy.deepcopy(config.critic)
        with open_dict(critic):
            critic.model = None
        built = _build("critic", critic, validated)
        try:
            built.validate(n_gpus, config.data.train_batch_size)
        except Exception as exc:
            raise config_error(exc, "critic") from exc
        validated.notes.append("critic checked without loading critic.model")
    for key in ("algorithm", "skip"):
        if OmegaConf.select(config, key) is not None:
            _build(key, config[key], validated)
    if is_distillation_enabled(config.get("distillation")):
        _build("distillation", config.distillation, validated)
    trainer_mode = OmegaConf.select(config, "trainer.v1.trainer_mode")
    if config.trainer.get("use_v1", True) and trainer_mode == "separate_async":
        _build("trainer.v1.separate_async.hybrid_rollout", config.trainer.v1.separate_async.hybrid_rollout,
               validated)  # fmt: skip

    validated.facts = check_verl_ext(config, mode, actor)
    return validated


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


def summary(config: DictConfig, validated: Validated, assets: str | None = None) -> str:
    """A short, human-readable summary of a validated config; ``assets``: what the start-up built (the only files a
    dry run writes)."""
    actor = config.actor_rollout_ref.actor
    loss = actor.policy_loss
    mode = validated.facts.get("loss_mode", loss.loss_mode)
    rollout = config.actor_rollout_ref.rollout
    trainer = config.trainer
    ratio_low = actor.clip_ratio_low if actor.get("clip_ratio_low") is not None else actor.clip_ratio
    ratio_high = actor.clip_ratio_high if actor.get("clip_ratio_high") is not None else actor.clip_ratio
    spec = SPECS.get(mode)
    loss_params = " ".join(f"{k}={_fmt(loss.get(k))}" for k in (spec.keys if spec is not None else ()))
    if actor.use_dynamic_bsz:
        micro = f"dynamic, ppo_max_token_len_per_gpu={_fmt(actor.ppo_max_token_len_per_gpu)}"
    else:
        micro = f"ppo_micro_batch_size_per_gpu={_fmt(actor.ppo_micro_batch_size_per_gpu)}"
    lines = [
        "verl_ext dry run: the configuration is valid",
        f"  trainer   : {validated.facts.get('trainer')}",
        f"  platform  : {validated.facts.get('platform')}",
        f"  cluster   : {trainer.nnodes} node(s) x {trainer.n_gpus_per_node} GPU(s) = "
        f"{trainer.nnodes * trainer.n_gpus_per_node} (device {trainer.device}), rollout {rollout.name}",
        f"  model     : {config.actor_rollout_ref.model.path}",
        f"  loss      : {mode} {loss_params}".rstrip(),
        f"  clip      : clip_ratio_low={_fmt(ratio_low)} clip_ratio_high={_fmt(ratio_high)} "
        f"clip_ratio_c={_fmt(actor.clip_ratio_c)} loss_agg_mode={actor.loss_agg_mode}",
        f"  kl        : use_kl_loss={_fmt(actor.use_kl_loss)} kl_loss_coef={_fmt(actor.kl_loss_coef)} "
        f"kl_loss_type={actor.kl_loss_type} kl_clip_method={_fmt(actor.get('kl_clip_method'))} "
        f"kl_clip_threshold={_fmt(actor.get('kl_clip_threshold'))} "
        f"use_per_token_kl_threshold={_fmt(actor.get('use_per_token_kl_threshold'))} "
        f"use_kl_in_reward={_fmt(config.algorithm.use_kl_in_reward)}",
        f"  advantage : {config.algorithm.adv_estimator} entropy_coeff={_fmt(actor.entropy_coeff)}",
        f"  batch     : train_batch_size={config.data.train_batch_size} x rollout.n={rollout.n}, "
        f"ppo_mini_batch_size={actor.ppo_mini_batch_size} (x n), {micro}, ppo_epochs={actor.ppo_epochs}",
    ]
    if validated.facts.get("old_entropy"):
        lines.append("  entropy   : old-log-prob entropy kept as batch field old_entropy; current entropy "
                     "computed without autograd graph in the update forward")  # fmt: skip
    note = spec.summary(loss) if spec is not None else None
    if note is not None:
        lines.append(f"  {note}")
    if validated.facts.get("cov_selected"):
        lines.append("  selection : batch scope, computed on the driver before each actor update "
                     "(batch field cov_selected)")  # fmt: skip
    lines += [f"  driver    : {feature}" for feature in validated.facts.get("features", [])]
    lines.append(f"  built     : {', '.join(sorted(validated.built))}")
    lines.append(f"  written   : {assets or 'nothing'}")
    lines += [f"  note      : {note}" for note in validated.notes]
    return "\n".join(lines)


def error_line(exc: ConfigError) -> str:
    """The one-line report of an invalid config value."""
    return f"verl_ext: invalid config: {exc.key}: {exc.message}"


def dry_run(config: DictConfig, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Validate ``config``; print the summary to ``out`` (stdout) and return 0, or print the error line
    to ``err`` (stderr) and return 2."""
    try:
        validated = validate(config, load_models=False)
    except ConfigError as exc:
        print(error_line(exc), file=err or sys.stderr)
        return EXIT_INVALID
    print(summary(config, validated), file=out or sys.stdout)
    return 0


__all__ = ["CONFIG_VALIDATION_ERRORS", "EXIT_INVALID", "Validated", "config_error", "dry_run", "raised_by_verl",
           "error_key_and_message", "error_line", "is_config_error", "summary", "validate"]
