"""Config-time checks of verl_ext, run by ``verl_ext.main_ppo`` before Ray starts (and by the dry run).

Every failure is a :class:`ConfigError` that names the offending key and the allowed values. verl's own
checks (``verl.utils.config.validate_config`` and the dataclasses' ``__post_init__``) run separately.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from omegaconf import DictConfig, OmegaConf
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

from verl_ext.config import ConfigError, PolicyLossConfig, bounded_dynamic_sampling, clip_ratios
from verl_ext.contract import REPLAY_POLL_INTERVAL
from verl_ext.losses import SPECS, needs_of
from verl_ext.losses.spec import clip_high_losses, clip_high_refusal
from verl_ext.registration import KEEP_VERL_COV_ENV, keep_verl_cov
from verl_ext.trainer.hooks import needs_batch_selection, needs_entropy_selection, needs_old_entropy

ACTOR = "actor_rollout_ref.actor"
POLICY_LOSS = f"{ACTOR}.policy_loss"
FSDP_STRATEGIES = ("fsdp", "fsdp2")
ACTOR_TARGET = "verl_ext.trainer.actor_config.FSDPActorConfig"
KL_CLIP_OFF = ("none",)
GROUP_ESTIMATORS = ("grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized")
"""verl advantage estimators that compare the responses of one prompt with each other (need rollout.n >= 2)."""

V1_REQUIREMENTS_HINT = (
    "verl's V1 trainer (trainer.use_v1=true, the default) needs the packages TransferQueue (==0.1.10, "
    "which brings pyzmq and msgspec) and cachetools: `pip install TransferQueue==0.1.10 cachetools`, "
    "or use the legacy trainer with trainer.use_v1=false, which has no DAPO dynamic sampling "
    "(algorithm.filter_groups) and no asynchronous trainer modes"
)

V1_REQUIREMENTS = ("transfer_queue", "zmq", "msgspec", "cachetools")
"""The top-level modules of :data:`V1_REQUIREMENTS_HINT`'s packages: a missing one is told as that hint."""

ULYSSES_ATTENTION = ("flash_attention_2", "flash_attention_3")
"""Attention implementations through which verl's Ulysses sequence parallelism works: verl inserts Ulysses'
all-to-all only by replacing transformers' flash-attention forward (``verl/models/transformers/monkey_patch.py``,
``apply_monkey_patch``); with ``sdpa`` or ``eager`` each rank would attend only to its own slice of the sequence."""

SEQUENCE_PARALLEL = (
    ("actor_rollout_ref.actor.ulysses_sequence_parallel_size", "actor_rollout_ref.model.override_config.attn_implementation"),
    ("actor_rollout_ref.ref.ulysses_sequence_parallel_size", "actor_rollout_ref.model.override_config.attn_implementation"),
    ("critic.ulysses_sequence_parallel_size", "critic.model.override_config.attn_implementation"),
)  # fmt: skip
"""(sequence-parallel size key, attention key of the model it splits)."""

DEFAULT_ATTENTION = "flash_attention_2"
"""verl's attention when ``override_config.attn_implementation`` is unset (``verl/workers/config/model.py``)."""


def _select(config: DictConfig, key: str, default: Any = None) -> Any:
    return OmegaConf.select(config, key, default=default)


def _registered_losses() -> list[str]:
    return sorted(POLICY_LOSS_REGISTRY)


def needs_critic(config: DictConfig) -> bool:
    """verl's ``need_critic``, without its warning ("Disabled critic as algorithm.adv_estimator != gae"), which verl's
    own trainer prints once per run anyway: asked by verl_ext's checks, it would print it three times more."""
    from verl.trainer.ppo.utils import need_critic

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Disabled critic", category=UserWarning)
        return bool(need_critic(config))


def check_loss_mode(config: DictConfig) -> str:
    """``policy_loss.loss_mode`` must name a registered verl policy loss; returns it."""
    mode = _select(config, f"{POLICY_LOSS}.loss_mode", "vanilla")
    if mode not in POLICY_LOSS_REGISTRY:
        raise ConfigError(f"{POLICY_LOSS}.loss_mode", f"{mode!r} is not a registered policy loss; allowed: "
                          f"{_registered_losses()}")  # fmt: skip
    if mode in SPECS and SPECS[mode].replaces_verl and keep_verl_cov():
        raise ConfigError(f"{POLICY_LOSS}.loss_mode", f"{mode!r} is verl's built-in here ({KEEP_VERL_COV_ENV}=1), "
                          "which ignores verl_ext's selection, keys and metrics: verl_ext's trainer would run it "
                          f"with settings it drops. Allowed: unset {KEEP_VERL_COV_ENV} (verl_ext's {mode}), or run "
                          "verl's own `python -m verl.trainer.main_ppo` for verl's")  # fmt: skip
    return str(mode)


def check_actor_classes(actor: Any) -> None:
    """The built actor dataclass must be verl_ext's (KL clipping keys) with verl_ext's policy-loss config."""
    from verl_ext.trainer.actor_config import FSDPActorConfig

    if not isinstance(actor, FSDPActorConfig):
        raise ConfigError(f"{ACTOR}._target_", f"built {type(actor).__module__}.{type(actor).__qualname__}; "
                          f"verl_ext needs {ACTOR_TARGET} (or a subclass)")  # fmt: skip
    if not isinstance(actor.policy_loss, PolicyLossConfig):
        cls = type(actor.policy_loss)
        raise ConfigError(f"{POLICY_LOSS}._target_", f"built {cls.__module__}.{cls.__qualname__}; verl_ext "
                          "needs verl_ext.config.PolicyLossConfig (or a subclass)")  # fmt: skip


def check_strategy(config: DictConfig) -> None:
    """verl_ext's actor worker covers verl's FSDP / FSDP2 engines only."""
    strategy = _select(config, f"{ACTOR}.strategy")
    if strategy not in FSDP_STRATEGIES:
        raise ConfigError(f"{ACTOR}.strategy", f"{strategy!r} is not supported by verl_ext; allowed: "
                          f"{list(FSDP_STRATEGIES)} (model_engine=dp)")  # fmt: skip


def check_entropy_source(config: DictConfig, mode: str) -> None:
    """ERC losses, batch-scope ``high_entropy`` and the entropy control read the old-log-prob pass's entropy,
    which rollout-correction bypass mode skips."""
    if not _select(config, "algorithm.rollout_correction.bypass_mode", False):
        return
    users = {
        f"{POLICY_LOSS}.loss_mode={mode}": needs_old_entropy(_select(config, ACTOR))
        or needs_entropy_selection(_select(config, ACTOR)),
        "verl_ext.entropy_control.enable=true": bool(_select(config, "verl_ext.entropy_control.enable", False)),
    }
    for setting, uses in users.items():
        if uses:
            raise ConfigError("algorithm.rollout_correction.bypass_mode", f"must be false with {setting}: bypass mode "
                              "skips the old-log-prob pass, which is where the old policy's per-token entropy it "
                              "reads (old_entropy) comes from")  # fmt: skip


ENTROPY_CHECKPOINTING_PEAK = "1.73x vanilla's at a 49k vocabulary, 1.76x at 152k"
"""The measured cost of verl's entropy checkpointing for the losses that read the update entropy
(``benchmarks/bench_memory.py``, docs/benchmarks.md); verl_ext's graph-free entropy keeps them at 1.00x."""


def check_entropy_memory(config: DictConfig) -> None:
    """``entropy_checkpointing`` with a loss that reads the update forward's entropy (ERC, ``entropy_adv``,
    micro-scope ``high_entropy``) and no entropy bonus: verl then recomputes the entropy under
    ``torch.utils.checkpoint``, which rejects verl_ext's graph-free entropy, so the update keeps a graph it never
    needs. Allowed (the run is correct), but said once, with the measured cost."""
    actor = _select(config, ACTOR)
    if actor is None or not _select(config, f"{ACTOR}.fsdp_config.entropy_checkpointing", False):
        return
    if float(_select(config, f"{ACTOR}.entropy_coeff", 0.0) or 0.0) != 0.0:
        return  # the entropy bonus needs the graph: checkpointing is what it is for
    if needs_of(actor).current_entropy:
        warnings.warn(f"{ACTOR}.entropy_checkpointing=True with loss_mode={_select(config, f'{POLICY_LOSS}.loss_mode')!r} "
                      f"and entropy_coeff=0 raises the update's peak memory ({ENTROPY_CHECKPOINTING_PEAK}, measured): "
                      "verl's checkpointed entropy keeps a graph, verl_ext's default graph-free entropy needs none "
                      "(peak 1.00x vanilla's). Set it to false (verl's default)", stacklevel=2)  # fmt: skip


def check_kl_clip(config: DictConfig) -> None:
    """KL clipping acts on the actor KL loss: setting it without ``use_kl_loss`` would do nothing."""
    method = _select(config, f"{ACTOR}.kl_clip_method", "none")
    if method not in KL_CLIP_OFF and not _select(config, f"{ACTOR}.use_kl_loss", False):
        raise ConfigError(f"{ACTOR}.kl_clip_method", f"{method!r} clips the actor KL loss, which is off: set "
                          f"{ACTOR}.use_kl_loss=true or kl_clip_method=none")  # fmt: skip


def check_group_size(config: DictConfig) -> None:
    """Group-relative estimators (GRPO, RLOO) need several responses per prompt: with ``rollout.n=1`` every
    advantage is 0 and nothing is learned, which verl does not report."""
    estimator = _select(config, "algorithm.adv_estimator", "gae")
    n = _select(config, "actor_rollout_ref.rollout.n", 1)
    if estimator in GROUP_ESTIMATORS and (not isinstance(n, int) or n < 2):
        raise ConfigError("actor_rollout_ref.rollout.n", f"{n!r} with algorithm.adv_estimator={estimator}, which "
                          "normalises rewards within the n responses of a prompt; allowed an integer >= 2")  # fmt: skip


def check_sequence_parallel(config: DictConfig) -> None:
    """Ulysses sequence parallelism > 1 needs a flash-attention implementation, on every platform: with
    ``sdpa`` / ``eager`` verl's Ulysses all-to-all never runs, each rank attends to its slice only, and every
    log-prob, entropy and loss is silently wrong (measured in CPU mode: rollout-vs-actor probability gap 0.012
    instead of 2e-8)."""
    for size_key, attention_key in SEQUENCE_PARALLEL:
        if size_key.startswith("critic.") and not needs_critic(config):
            continue
        size = _select(config, size_key, 1) or 1
        attention = _select(config, attention_key) or DEFAULT_ATTENTION
        if size > 1 and attention not in ULYSSES_ATTENTION:
            raise ConfigError(size_key, f"{size} with {attention_key}={attention}: verl's Ulysses sequence "
                              "parallelism works only through the flash-attention forward it patches "
                              "(verl/models/transformers/monkey_patch.py); with this attention each rank would "
                              f"attend to its own slice of the sequence and train on wrong log-probs. Allowed: 1, or "
                              f"> 1 with {attention_key} in {list(ULYSSES_ATTENTION)} (flash-attn installed)")  # fmt: skip


def check_replay_poll_interval(config: DictConfig) -> float | None:
    """``verl_ext.replay_poll_interval``: seconds, > 0, or ``None`` (null: verl's own interval) - the V1 trainer's
    checks for finished rollouts."""
    value = _select(config, REPLAY_POLL_INTERVAL)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(REPLAY_POLL_INTERVAL, f"{value!r} is invalid: allowed a number of seconds > 0, or null for "
                          "verl's own interval (2 s)")  # fmt: skip
    return float(value)


def check_dynamic_sampling(config: DictConfig) -> None:
    """DAPO's dynamic sampling (``algorithm.filter_groups``) exists only in verl's V1 trainer, whose built-in
    sync replay buffer refills evicted groups without a bound: verl_ext bounds it with
    ``max_num_gen_batches`` (which verl's V1 trainer ignores) so that a run whose groups all score the same
    stops with an error instead of refilling forever."""
    if not _select(config, "algorithm.filter_groups.enable", False):
        return
    if not _select(config, "trainer.use_v1", True):
        raise ConfigError("algorithm.filter_groups.enable", "true needs verl's V1 trainer: the legacy trainer "
                          "(trainer.use_v1=false) never reads it and would train without DAPO's dynamic sampling. "
                          "Allowed: false, or trainer.use_v1=true")  # fmt: skip
    limit = _select(config, "algorithm.filter_groups.max_num_gen_batches", 0)
    if bounded_dynamic_sampling(config) and (not isinstance(limit, int) or limit < 1):
        raise ConfigError("algorithm.filter_groups.max_num_gen_batches", f"{limit!r} with dynamic sampling on: "
                          "verl's V1 replay buffer refills evicted groups without a bound, so a model whose groups "
                          "all score the same would hang; verl_ext stops the step with an error after this many "
                          "generation batches. Allowed: an integer >= 1 (DAPO's recipe: 10)")  # fmt: skip


def check_trainer(config: DictConfig) -> str:
    """The trainer must be importable and its V1 mode registered; returns a short description."""
    if not _select(config, "trainer.use_v1", True):
        return "legacy RayPPOTrainer (trainer.use_v1=false)"
    try:
        importlib.import_module("verl.trainer.ppo.v1")
    except ModuleNotFoundError as exc:  # another import failure propagates, naming its module
        if (exc.name or "").split(".")[0] not in V1_REQUIREMENTS:
            raise
        raise ConfigError("trainer.use_v1", f"{exc}. {V1_REQUIREMENTS_HINT}") from exc
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    mode = _select(config, "trainer.v1.trainer_mode", "sync")
    if mode not in TRAINER_REGISTRY:
        raise ConfigError("trainer.v1.trainer_mode", f"{mode!r} is not a registered V1 trainer; allowed: "
                          f"{sorted(TRAINER_REGISTRY)}")  # fmt: skip
    return f"V1 trainer (trainer.v1.trainer_mode={mode})"


CPU_MODE_NEEDS = (
    (f"{ACTOR}.strategy", ("fsdp2",), "verl's FSDP1 engine needs GPU parameters"),
    ("actor_rollout_ref.rollout.name", ("vllm",), "vLLM's CPU build is the rollout engine CPU mode runs"),
    ("trainer.device", ("cpu",), "the trainer places batches on this device"),
)
"""Settings CPU mode cannot do without: (key, allowed values, why). ``configs/platform/cpu.yaml`` sets them."""


def check_platform(config: DictConfig) -> str:
    """CPU mode (``VERL_PLATFORM=cpu``): never next to CUDA, and only with the settings it can run (which
    ``configs/platform/cpu.yaml`` sets unless the command line changed them); returns a description."""
    from verl_ext.cpu import mode as cpu_mode
    from verl_ext.cpu import precision as cpu_precision
    from verl_ext.cpu import vllm_executor

    if not cpu_mode.requested():
        return "accelerator (verl's platform detection)"
    if cpu_mode.cuda_present():
        raise ConfigError(cpu_mode.ENV_VAR, f"{cpu_mode.PLATFORM_NAME!r} selects CPU mode, which never runs on a "
                          "machine with a CUDA GPU; unset it to train on the GPU")  # fmt: skip
    try:  # the requested precision first: the dtype keys below follow it
        precision = cpu_precision.choose(_select(config, cpu_precision.KEY)).precision
    except cpu_precision.PrecisionError as exc:
        raise ConfigError(cpu_precision.KEY, str(exc)) from None
    for key, allowed, why in CPU_MODE_NEEDS:
        value = _select(config, key)
        if value not in allowed:
            raise ConfigError(key, f"{value!r} does not run in CPU mode ({cpu_mode.ENV_VAR}=cpu): {why}; "
                              f"allowed: {list(allowed)}")  # fmt: skip
    for key, value in cpu_precision.unsupported_keys(config):
        raise ConfigError(key, f"{value!r} is bf16, which this CPU has no instructions for (none of "
                          f"{', '.join(cpu_precision.BF16_FLAGS)} in /proc/cpuinfo; torch would emulate it, slower "
                          "than fp32); allowed: fp32 / float32")  # fmt: skip
    env = _select(config, vllm_executor.ENV_KEY) or {}
    misfit = vllm_executor.misfit(_select(config, vllm_executor.BACKEND_KEY), _select(config, vllm_executor.TP_KEY),
                                  env.get(vllm_executor.BIND_VAR, "auto"), env.get(vllm_executor.MULTIPROCESSING_VAR))
    if misfit:
        raise ConfigError(*misfit)
    if needs_critic(config):
        raise ConfigError("algorithm.adv_estimator", f"{_select(config, 'algorithm.adv_estimator')!r} needs a "
                          "critic, which CPU mode has never run: configs/platform/cpu.yaml sets no CPU engine for "
                          "it (verl's critic defaults to FSDP1 in bf16) and no test trains one; use a critic-free "
                          "estimator such as grpo or rloo")  # fmt: skip
    return f"CPU mode ({cpu_mode.ENV_VAR}=cpu: FSDP2 on gloo, vLLM's CPU engine, {precision}, configs/platform/cpu.yaml)"


LORA_KEY = "actor_rollout_ref.model.lora_rank"
"""verl's LoRA switch: a rank above 0 trains an adapter and syncs it to the rollout as one."""

CPU_LORA_WHY = ("verl 0.9.1 loads the adapter into vLLM through WeightsMapper.get_unstacked_mapper() from vLLM 0.25 on "
                "(verl/utils/vllm/utils.py, hijack__load_adapter), which vLLM's CPU build 0.31 lacks: the first weight "
                "sync fails inside vLLM's engine, which stays up, and verl's trainer waits on the sync for ever")  # fmt: skip
"""Why CPU mode refuses LoRA (contract: tests/test_upstream_contracts.py)."""


def check_cpu_lora(config: DictConfig) -> None:
    """CPU mode (``VERL_PLATFORM=cpu``) refuses ``actor_rollout_ref.model.lora_rank > 0`` (:data:`CPU_LORA_WHY`);
    GPU runs (verl's vLLM 0.24 never takes that branch) are not affected."""
    from verl_ext.cpu import mode as cpu_mode

    rank = _select(config, LORA_KEY)
    if not cpu_mode.requested() or rank in (None, 0):
        return
    raise ConfigError(LORA_KEY, f"{rank!r} does not run in CPU mode ({cpu_mode.ENV_VAR}=cpu): {CPU_LORA_WHY}; "
                      "allowed: 0 (full fine-tuning) in CPU mode, any rank on a GPU")  # fmt: skip


def _selecting() -> str:
    """The losses whose batch pass selects tokens (``cov_ratio``'s and the lens's subject), for messages."""
    return " or ".join(sorted(name for name, spec in SPECS.items() if spec.batch_select is not None))


def check_actuator(config: DictConfig, feature: Any) -> None:
    """Entropy control's actuator must have something to act on: ``cov_ratio`` a batch-scope ``clip_cov`` / ``kl_cov``;
    ``entropy_coef`` an actor whose fixed ``entropy_coeff`` is 0 (the actuator replaces it); ``clip_high`` a policy
    loss of :func:`~verl_ext.losses.spec.clip_high_losses` and, with ``clip_high_init`` null, an actor
    ``clip_ratio_high`` (its rest value) inside [clip_high_min, clip_high_max]."""
    actor = _select(config, ACTOR)
    if feature.actuator == "cov_ratio" and not needs_batch_selection(actor):
        mode = _select(config, f"{POLICY_LOSS}.loss_mode", "vanilla")
        scope = _select(config, f"{POLICY_LOSS}.cov_scope", "batch")
        raise ConfigError("verl_ext.entropy_control.enable", f"true with actuator=cov_ratio needs {POLICY_LOSS}."
                          f"loss_mode {_selecting()} with cov_scope=batch (it sets the driver's batch-scope "
                          f"selection ratio); got loss_mode={mode}, cov_scope={scope}. Other actuators: "
                          "entropy_coef, pos_weight (any loss)")  # fmt: skip
    if feature.actuator == "entropy_coef":
        fixed = _select(config, f"{ACTOR}.entropy_coeff", 0.0) or 0.0
        if fixed != 0:
            raise ConfigError(f"{ACTOR}.entropy_coeff", f"{fixed!r} is invalid with verl_ext.entropy_control.actuator="
                              "entropy_coef, which sets the entropy coefficient each step: allowed 0 (start the "
                              "controlled coefficient with verl_ext.entropy_control.coef_init)")  # fmt: skip
    if feature.actuator == "clip_high":
        mode = _select(config, f"{POLICY_LOSS}.loss_mode", "vanilla") or "vanilla"
        refusal = clip_high_refusal(mode)
        if refusal is not None:
            raise ConfigError("verl_ext.entropy_control.actuator", f"clip_high cannot act on {POLICY_LOSS}.loss_mode="
                              f"{mode}: {refusal}; allowed loss_mode: {sorted(clip_high_losses())} (other actuators: "
                              "entropy_coef, pos_weight, any loss)")  # fmt: skip
        if feature.clip_high_init is None:
            _, eps_high = clip_ratios(actor)
            if not feature.clip_high_min <= eps_high <= feature.clip_high_max:
                raise ConfigError("verl_ext.entropy_control.clip_high_init", f"is null, so the rest value is {ACTOR}."
                                  f"clip_ratio_high={eps_high}, outside [clip_high_min, clip_high_max] = "
                                  f"[{feature.clip_high_min}, {feature.clip_high_max}]: set clip_high_init or widen "
                                  "the bounds")  # fmt: skip


def check_driver_features(config: DictConfig) -> list[str]:
    """The entropy control and the token lens: valid keys, and something to act on (entropy control:
    :func:`check_actuator`; the lens: ``clip_cov`` / ``kl_cov`` with ``cov_scope=batch``, whose selection it shows).
    Returns descriptions of the enabled ones for the dry-run summary."""
    from verl_ext.control.entropy_control import EntropyControlConfig
    from verl_ext.driver.token_lens import TokenLensConfig

    described = []
    for key, cls in (("entropy_control", EntropyControlConfig), ("token_lens", TokenLensConfig)):
        node = _select(config, f"verl_ext.{key}")
        feature = cls.from_mapping(OmegaConf.to_container(node, resolve=True) if node is not None else {})
        if not feature.enable:
            continue
        actor = _select(config, ACTOR)
        mode = _select(config, f"{POLICY_LOSS}.loss_mode", "vanilla")
        if key == "entropy_control":
            check_actuator(config, feature)
        elif not needs_batch_selection(actor):
            scope = _select(config, f"{POLICY_LOSS}.cov_scope", "batch")
            raise ConfigError(f"verl_ext.{key}.enable", f"true needs {POLICY_LOSS}.loss_mode {_selecting()} with "
                              f"cov_scope=batch (it acts on the driver's batch-scope selection); got loss_mode={mode}, "
                              f"cov_scope={scope}")  # fmt: skip
        if key == "entropy_control":
            if feature.schedule != "constant" and feature.schedule_steps is None:
                total = _select(config, "trainer.total_training_steps")
                if not isinstance(total, int) or total < 1:
                    raise ConfigError("verl_ext.entropy_control.schedule_steps", f"is null and trainer.total_training_"
                                      f"steps={total!r}: a {feature.schedule} schedule needs a length")  # fmt: skip
            if feature.actuator == "cov_ratio" and feature.ratio_init is None:
                ratio_key = SPECS[mode].selection_ratio
                ratio = _select(config, f"{POLICY_LOSS}.{ratio_key}")
                if ratio is not None and not feature.ratio_min <= ratio <= feature.ratio_max:
                    raise ConfigError("verl_ext.entropy_control.ratio_init", f"is null, so entropy control starts from "
                                      f"{POLICY_LOSS}.{ratio_key}={ratio}, outside [ratio_min, ratio_max] = "
                                      f"[{feature.ratio_min}, {feature.ratio_max}]: set ratio_init or widen the bounds")  # fmt: skip
            from verl_ext.control.targets import describe

            described.append(f"entropy control: target {describe(feature)}, controller {feature.controller} on "
                             f"actuator {feature.actuator}")  # fmt: skip
        else:
            described.append(f"token lens: every {feature.every_n_steps} step(s), {feature.context_tokens} tokens of context")
    return described


def check_verl_ext(config: DictConfig, mode: str, actor: Any | None = None) -> dict[str, Any]:
    """verl_ext's config-time checks after :func:`check_loss_mode` (which returned ``mode``) and
    :func:`check_strategy`, which run first of all (``verl_ext.checks.dry_run.validate``). ``actor`` is the built
    actor dataclass, if available.

    Returns facts for the dry-run summary (``loss_mode``, ``trainer``, ``old_entropy``, ``cov_selected``).
    """
    if actor is not None:
        check_actor_classes(actor)
    check_entropy_source(config, mode)
    check_kl_clip(config)
    check_entropy_memory(config)
    check_group_size(config)
    check_sequence_parallel(config)
    check_dynamic_sampling(config)
    check_replay_poll_interval(config)
    trainer = check_trainer(config)
    platform = check_platform(config)
    check_cpu_lora(config)
    features = check_driver_features(config)
    from verl_ext.checks.training_data import check_training_data

    data = check_training_data(config)
    from verl_ext.driver.watchdog import watchdog_config

    watchdog_config(config)  # verl_ext.watchdog.*: WatchdogConfig's checks
    actor_node = _select(config, ACTOR)
    return {
        "loss_mode": mode,
        "trainer": trainer,
        "platform": platform,
        "features": features,
        "data": data,
        "old_entropy": needs_old_entropy(actor_node),
        "cov_selected": needs_batch_selection(actor_node),
    }


__all__ = [
    "ConfigError",
    "check_actor_classes",
    "check_actuator",
    "check_cpu_lora",
    "check_driver_features",
    "check_dynamic_sampling",
    "check_entropy_memory",
    "check_entropy_source",
    "check_group_size",
    "check_kl_clip",
    "check_loss_mode",
    "check_platform",
    "check_sequence_parallel",
    "check_replay_poll_interval",
    "check_strategy",
    "check_trainer",
    "check_verl_ext",
]
