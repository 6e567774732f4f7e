"""Hyperparameters of verl_ext's policy losses.

:class:`PolicyLossConfig` extends verl's ``verl.workers.config.PolicyLossConfig`` (keeping verl's field
names and defaults for Clip-Cov / KL-Cov, so existing verl command lines keep working) with the fields of
Entropy Ratio Clipping, gradient-preserving clipping and covariance selection. Hydra builds it when the
``policy_loss`` node's ``_target_`` is ``verl_ext.config.PolicyLossConfig`` (see ``configs/policy_loss/``).

Every check lives in :func:`check_policy_loss_params`, which the dataclass runs in ``__post_init__`` and the
losses run on the values they read (so a plain verl ``PolicyLossConfig`` is validated too).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from omegaconf import OmegaConf

POLICY_LOSS_PREFIX = "actor_rollout_ref.actor.policy_loss."
ACTOR_PREFIX = "actor_rollout_ref.actor."
COV_SCOPES = ("batch", "micro")
ENTROPY_SCOPES = ("batch", "micro")
BAPO_SCOPES = ("step", "micro")
BAPO_MAX_STEPS = 1000
"""The most widening steps one BAPO bound may take (``ceil((max - start) / step)``): the search is vectorised over
every candidate bound, so their number is a static tensor size."""


class ConfigError(ValueError):
    """An invalid config value: ``key`` is the full dotted key, ``message`` says what is allowed."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


_Config = TypeVar("_Config")


class PrefixedConfig:
    """Base of a config dataclass whose keys live under one prefix (``KEY_PREFIX``, e.g. ``verl_ext.token_lens.``):
    :meth:`from_mapping` builds it, :meth:`error` makes the :class:`ConfigError` naming one of its keys."""

    KEY_PREFIX: ClassVar[str] = ""

    @classmethod
    def from_mapping(cls, values: Any) -> Any:
        """Build from a mapping (an OmegaConf container or a dict); an unknown key is an error naming it."""
        return dataclass_from_mapping(cls, values, cls.KEY_PREFIX)

    @classmethod
    def error(cls, key: str, message: str) -> ConfigError:
        return ConfigError(f"{cls.KEY_PREFIX}{key}", message)


def dataclass_from_mapping(cls: type[_Config], values: Any, prefix: str) -> _Config:
    """``cls(**values)`` for a config dataclass whose keys live under ``prefix`` (e.g. ``verl_ext.token_lens.``);
    an unknown key is a :class:`ConfigError` naming it and the allowed ones."""
    data = dict(values or {})
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}", f"is not a key of {prefix.rstrip('.')}; allowed: {sorted(known)}")
    return cls(**data)


def _bad(key: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"{POLICY_LOSS_PREFIX}{key}", f"{value!r} is invalid: allowed {allowed}")


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(key, value, "a number")
    return float(value)


def check_policy_loss_params(values: Mapping[str, Any]) -> None:
    """Validate whichever verl_ext-relevant keys ``values`` holds; raise ``ValueError`` naming the key."""
    for key in ("clip_cov_ratio", "kl_cov_ratio"):
        if values.get(key) is not None and not 0.0 < _number(key, values[key]) <= 1.0:
            raise _bad(key, values[key], "a fraction in (0, 1] (0.002 means 0.2 % of tokens)")
    lb, ub = values.get("clip_cov_lb"), values.get("clip_cov_ub")
    if lb is not None and ub is not None and not _number("clip_cov_lb", lb) < _number("clip_cov_ub", ub):
        raise _bad("clip_cov_lb", lb, f"a value below clip_cov_ub={ub!r}")
    for key in ("ppo_kl_coef", "gppo_beta1", "gppo_beta2"):
        if values.get(key) is not None and not _number(key, values[key]) >= 0.0:
            raise _bad(key, values[key], "a number >= 0")
    low = values.get("entropy_mask_low")
    if low is not None and not 0.0 <= _number("entropy_mask_low", low) < 1.0:
        raise _bad("entropy_mask_low", low, "0 <= entropy_mask_low < 1")
    high = values.get("entropy_mask_high")
    if high is not None and not _number("entropy_mask_high", high) > 1.0:
        raise _bad("entropy_mask_high", high, "entropy_mask_high > 1")
    scope = values.get("cov_scope")
    if scope is not None and scope not in COV_SCOPES:
        raise _bad("cov_scope", scope, f"one of {list(COV_SCOPES)}")
    for key in ("high_entropy_ratio",):
        if values.get(key) is not None and not 0.0 < _number(key, values[key]) <= 1.0:
            raise _bad(key, values[key], "a fraction in (0, 1] (0.2 keeps the 20 % highest-entropy tokens)")
    scope = values.get("high_entropy_scope")
    if scope is not None and scope not in ENTROPY_SCOPES:
        raise _bad("high_entropy_scope", scope, f"one of {list(ENTROPY_SCOPES)}")
    alpha = values.get("entropy_adv_alpha")
    if alpha is not None and not _number("entropy_adv_alpha", alpha) > 0.0:
        raise _bad("entropy_adv_alpha", alpha, "a number > 0")
    kappa = values.get("entropy_adv_kappa")
    if kappa is not None and not _number("entropy_adv_kappa", kappa) > 1.0:
        raise _bad("entropy_adv_kappa", kappa, "a number > 1, as the paper requires (at 1 the shaping can cancel a "
                   "negative advantage, below 1 flip it)")
    _check_bapo(values)
    seed = values.get("cov_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise _bad("cov_seed", seed, "an integer >= 0")


def _check_bapo(values: Mapping[str, Any]) -> None:
    """BAPO's keys: ``0 < bapo_clip_low <= bapo_clip_low_max < 1 < bapo_clip_high <= bapo_clip_high_max``, steps > 0
    with at most :data:`BAPO_MAX_STEPS` widening steps a bound, ``0 < bapo_rho0 < 1``, ``bapo_scope`` in
    :data:`BAPO_SCOPES`."""
    rho0 = values.get("bapo_rho0")
    if rho0 is not None and not 0.0 < _number("bapo_rho0", rho0) < 1.0:
        raise _bad("bapo_rho0", rho0, "a share in (0, 1): the positive-advantage tokens' target share of the "
                   "contribution (0.5: as much as the negative ones)")
    scope = values.get("bapo_scope")
    if scope is not None and scope not in BAPO_SCOPES:
        raise _bad("bapo_scope", scope, f"one of {list(BAPO_SCOPES)}")
    for key in ("bapo_clip_low_step", "bapo_clip_high_step"):
        if values.get(key) is not None and not _number(key, values[key]) > 0.0:
            raise _bad(key, values[key], "a number > 0 (the bound's widening step)")
    low, low_max = values.get("bapo_clip_low"), values.get("bapo_clip_low_max")
    high, high_max = values.get("bapo_clip_high"), values.get("bapo_clip_high_max")
    if low is not None and not 0.0 < _number("bapo_clip_low", low) < 1.0:
        raise _bad("bapo_clip_low", low, "an importance-ratio bound in (0, 1) (0.8, not an epsilon)")
    if low_max is not None and not 0.0 < _number("bapo_clip_low_max", low_max) < 1.0:
        raise _bad("bapo_clip_low_max", low_max, "an importance-ratio bound in (0, 1)")
    if low is not None and low_max is not None and not low <= low_max:
        raise _bad("bapo_clip_low_max", low_max, f"a value >= bapo_clip_low={low!r}")
    if high is not None and not _number("bapo_clip_high", high) > 1.0:
        raise _bad("bapo_clip_high", high, "an importance-ratio bound > 1 (1.2, not an epsilon)")
    if high_max is not None and not _number("bapo_clip_high_max", high_max) > 1.0:
        raise _bad("bapo_clip_high_max", high_max, "an importance-ratio bound > 1")
    if high is not None and high_max is not None and not high <= high_max:
        raise _bad("bapo_clip_high_max", high_max, f"a value >= bapo_clip_high={high!r}")
    for side in ("low", "high"):
        start, stop, step = (values.get(f"bapo_clip_{side}{s}") for s in ("", "_max", "_step"))
        if None not in (start, stop, step) and bapo_steps(start, stop, step) > BAPO_MAX_STEPS:
            raise _bad(f"bapo_clip_{side}_step", step, f"a step that reaches bapo_clip_{side}_max={stop!r} from "
                       f"bapo_clip_{side}={start!r} in at most {BAPO_MAX_STEPS} steps")


def bapo_steps(start: float, stop: float, step: float) -> int:
    """How many widening steps of ``step`` take a BAPO bound from ``start`` to ``stop`` (the last one capped at
    ``stop``): ``ceil((stop - start) / step)``, with a relative tolerance of 1e-9 so that 0.8 -> 0.95 by 0.05 is 3."""
    span = (float(stop) - float(start)) / float(step)
    return max(0, math.ceil(span - 1e-9 * max(1.0, abs(span))))


def config_value(obj: Any, key: str, default: Any = None) -> Any:
    """``obj.key`` for a dataclass config, ``obj[key]`` for a mapping / OmegaConf node; ``default`` when
    ``obj`` is ``None`` or lacks the key."""
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def loss_mode_of(actor_config: Any) -> str:
    """``actor_config.policy_loss.loss_mode`` (``"vanilla"`` when unset), for any form of actor config."""
    return str(config_value(config_value(actor_config, "policy_loss"), "loss_mode", "vanilla") or "vanilla")


def policy_loss_params(config: Any, *names: str) -> tuple[Any, ...]:
    """Read ``names`` from ``config.policy_loss`` (verl's or verl_ext's class, or a mapping), falling back
    to verl_ext's defaults for keys that are absent or ``None``, and validate them."""
    node = config_value(config, "policy_loss")
    values = {}
    for name in names:
        value = config_value(node, name)
        values[name] = DEFAULTS[name] if value is None else value
    check_policy_loss_params(values)
    return tuple(values[name] for name in names)


def clip_ratios(config: Any) -> tuple[float, float]:
    """PPO clip ranges ``(eps_low, eps_high)`` from the actor config, as verl reads them."""
    eps = config_value(config, "clip_ratio", 0.2)
    low = config_value(config, "clip_ratio_low")
    high = config_value(config, "clip_ratio_high")
    eps_low = _number("clip_ratio_low", eps if low is None else low)
    eps_high = _number("clip_ratio_high", eps if high is None else high)
    if eps_low < 0 or eps_high < 0:
        key = "clip_ratio_low" if eps_low < 0 else "clip_ratio_high"
        raise ConfigError(f"{ACTOR_PREFIX}{key}", f"clip_ratio_low={eps_low!r}, clip_ratio_high={eps_high!r} are "
                          "invalid: allowed numbers >= 0")
    return eps_low, eps_high


def dual_clip_c(config: Any) -> float:
    """The dual-clip constant ``clip_ratio_c`` of the actor config (verl's default 3.0); must be > 1."""
    c = _number("clip_ratio_c", config_value(config, "clip_ratio_c", 3.0))
    if not c > 1.0:
        raise ConfigError(f"{ACTOR_PREFIX}clip_ratio_c", f"{c!r} is invalid: allowed a number > 1")
    return c


def bounded_dynamic_sampling(config: Any) -> bool:
    """Whether DAPO's dynamic sampling is on in V1's ``sync`` mode: the case whose refills verl_ext bounds with
    ``algorithm.filter_groups.max_num_gen_batches`` (:func:`verl_ext.checks.validation.check_dynamic_sampling`, and the bound itself in
    :func:`verl_ext.trainer.v1.generation_budget`)."""
    return bool(OmegaConf.select(config, "algorithm.filter_groups.enable", default=False)) and (
        OmegaConf.select(config, "trainer.v1.trainer_mode", default="sync") == "sync"
    )


# verl is imported here, after every helper above, not at the top: ``import verl`` loads verl_ext's plugin
# (verl_ext.registration), whose losses import those helpers from this module. Imported first (``import
# verl_ext.config`` before verl), this module is still half-built while that plugin loads; the helpers must
# already exist then, or verl swallows the ImportError and registers none of verl_ext's losses.
from verl.workers.config import PolicyLossConfig as VerlPolicyLossConfig  # noqa: E402


@dataclass
class PolicyLossConfig(VerlPolicyLossConfig):
    """verl's policy-loss config plus verl_ext's keys.

    Inherited (verl's names and defaults): ``loss_mode``, ``clip_cov_ratio`` (0.0002), ``clip_cov_lb`` (1.0),
    ``clip_cov_ub`` (5.0), ``kl_cov_ratio`` (0.0002), ``ppo_kl_coef`` (0.1), ``dro_beta``,
    ``rollout_correction``. Ratios are fractions (0.002 = 0.2 % of tokens), as in verl.
    """

    entropy_mask_low: float = 0.8
    """ERC: lower bound of the kept entropy-ratio band; tokens with ``H/H_old <= low`` lose their gradient."""

    entropy_mask_high: float = 1.2
    """ERC: upper bound of the kept entropy-ratio band; tokens with ``H/H_old >= high`` lose their gradient."""

    gppo_beta1: float = 0.75
    """gppo_erc: gradient scale kept for clipped tokens with ``A < 0`` and ``r < 1 - clip_ratio_low``."""

    gppo_beta2: float = 1.0
    """gppo_erc: gradient scale kept for clipped tokens with ``A > 0`` and ``r > 1 + clip_ratio_high``."""

    cov_scope: str = "batch"
    """clip_cov / kl_cov: where tokens are selected. ``batch``: over the whole training batch (the paper's
    definition; independent of micro-batching and GPU count). ``micro``: inside each loss call, over the
    micro-batch it is given (the behaviour of the public implementations)."""

    cov_seed: int = 0
    """clip_cov: seed of the counter-based hash that draws the random tokens (never the global RNG)."""

    high_entropy_ratio: float = 0.2
    """high_entropy: the fraction rho of tokens with the highest entropy that keep their policy gradient, in (0, 1]
    ("Beyond the 80/20 Rule", arXiv 2506.01939: 0.2); ``max(1, ceil(rho N))`` tokens are kept."""

    high_entropy_scope: str = "batch"
    """high_entropy: ``batch`` ranks the whole training batch by the old-log-prob pass's entropy (independent of
    micro-batching and GPU count); ``micro`` ranks each loss call's tokens by the update forward's entropy (the
    paper's code)."""

    entropy_adv_alpha: float = 0.4
    """entropy_adv: alpha > 0 in ``A' = A + min(alpha H, |A| / kappa)`` (arXiv 2506.14758; 0.4 in public code)."""

    entropy_adv_kappa: float = 2.0
    """entropy_adv: kappa > 1 in ``A' = A + min(alpha H, |A| / kappa)`` (the paper's condition): the shaping stays
    below ``|A|``, so a negative advantage keeps its sign and is never cancelled (2 in public code)."""

    bapo_clip_low: float = 0.8
    """bapo: the lower importance-ratio bound ``c_low`` each step starts from (an explicit bound, not an epsilon; the
    authors' example script: 0.8; their YAML and README: 0.6)."""

    bapo_clip_low_max: float = 0.95
    """bapo: the largest ``c_low`` the search may raise it to, < 1 (example script: 0.95; YAML 0.8; README 0.9)."""

    bapo_clip_low_step: float = 0.05
    """bapo: the step ``delta_1`` by which ``c_low`` is raised (example script and YAML: 0.05)."""

    bapo_clip_high: float = 1.2
    """bapo: the upper importance-ratio bound ``c_high`` each step starts from (script, YAML and README: 1.2)."""

    bapo_clip_high_max: float = 2.0
    """bapo: the largest ``c_high`` the search may raise it to (example script and YAML: 2.0; README 3.0)."""

    bapo_clip_high_step: float = 0.1
    """bapo: the step ``delta_2`` by which ``c_high`` is raised (example script: 0.1; YAML 0.05)."""

    bapo_rho0: float = 0.5
    """bapo: the target share ``rho_0`` in (0, 1) of the positive-advantage tokens in the contribution (paper and
    README: 0.5; the authors' code compares the ratio P/N with its target instead, see :mod:`verl_ext.losses.bapo`)."""

    bapo_scope: str = "step"
    """bapo: where the bounds are decided. ``step``: once per optimiser step, over its whole mini-batch and every DP
    rank, from a no-grad forward pass (verl_ext's actor worker); ``micro``: inside each loss call, over its micro-batch
    (the authors' code; changes with the micro-batch size and dynamic batching)."""

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        check_policy_loss_params({f.name: getattr(self, f.name) for f in fields(self)})


DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in fields(PolicyLossConfig) if f.name not in ("_target_", "rollout_correction")
}
