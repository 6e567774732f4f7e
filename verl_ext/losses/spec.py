"""A policy loss's declaration: what verl_ext needs to know of a loss, said once, in the loss's own module.

Each loss module ends with ``SPEC = declare(LossSpec(...))``. :data:`SPECS` is the registry: the registration into
verl's ``register_policy_loss`` (:mod:`verl_ext.registration`), the config checks, the dry-run summary, the trainer
hooks, the actor loss's inputs, the actuators' refusals, the demo and the docs' loss table read it. Nothing else names
a loss. A loss added outside this package (a user's, a test's) calls :func:`declare` and then
:func:`verl_ext.registration.register`.

The trainer-side needs depend on the loss's own keys (a scope key picks the driver's batch pass or the loss call's
own), so a loss declares them as a function of its ``policy_loss`` node: :attr:`LossSpec.needs`.

May import: ``verl_ext.config`` (reading keys) and the standard library; never torch's trainer code or verl's workers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from verl_ext.config import config_value, loss_mode_of


class Needs(NamedTuple):
    """What one loss call needs from verl_ext's trainer, for one ``policy_loss`` config."""

    old_entropy: bool = False
    """The old policy's per-token entropy as batch field ``old_entropy`` (kept from verl's old-log-prob pass)."""

    current_entropy: bool = False
    """The update forward's per-token entropy ``H`` (keyword ``entropy``; computed without autograd unless an entropy
    bonus needs the graph)."""

    batch_field: str | None = None
    """A field the driver computes over the whole training batch right before the update (``cov_selected``,
    ``high_entropy_weight``: ``verl_ext.contract``), passed to the loss under the same keyword."""

    step_pass: bool = False
    """A no-grad pass per optimiser step over its mini-batch on every rank (BAPO's bounds, keyword ``bapo_bounds``)."""

    micro_key: str | None = None
    """The key that moves the batch pass or the step pass into each loss call (named by the errors when a driver
    other than verl_ext's does not supply it)."""


def no_needs(policy_loss: Any) -> Needs:
    """A loss that reads only verl's own inputs."""
    return Needs()


@dataclass(frozen=True)
class LossSpec:
    """One policy loss, declared in its module."""

    name: str
    """``policy_loss.loss_mode``: the name in verl's registry and of the YAML group ``configs/policy_loss/<name>.yaml``."""

    loss: Callable[..., Any]
    """The loss, with verl's signature (``old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
    rollout_is_weights``) plus the keywords its :class:`Needs` name."""

    paper: str
    """One line: the method and where it comes from (the docs' loss table)."""

    keys: tuple[str, ...] = ()
    """The ``policy_loss`` keys it reads, in the order the dry-run summary prints them (defaults, bounds and docs:
    :class:`verl_ext.config.PolicyLossConfig`)."""

    needs: Callable[[Any], Needs] = no_needs
    """Its :class:`Needs` for a ``policy_loss`` node (a dataclass or a mapping)."""

    token_mean_metrics: frozenset[str] = frozenset()
    """Its metrics that are means over the call's valid tokens: the actor loss weights them by each micro-batch's
    token count (so the step's value does not depend on the micro-batching)."""

    clip_high: str | None = None
    """How it reads the actor's ``clip_ratio_high`` (the entropy control's ``clip_high`` actuator acts on it), or
    ``None`` when the actuator is refused."""

    clip_high_refusal: str | None = None
    """Why the ``clip_high`` actuator cannot act on it (with ``clip_high`` ``None``)."""

    selection_ratio: str | None = None
    """The ``policy_loss`` key of its batch selection's ratio, which the ``cov_ratio`` actuator sets each step."""

    batch_select: Callable[..., Any] | None = None
    """The batch-scope selection (its :attr:`Needs.batch_field` is ``cov_selected``):
    ``(advantages, old_log_prob, mask, config, step, metrics, ratio, key) -> bool mask``."""

    batch_weights: Callable[..., Any] | None = None
    """The batch-scope weights from the old pass's entropy (its :attr:`Needs.batch_field` is ``high_entropy_weight``):
    ``(entropy, mask, config, key) -> (weights, stats)``; the driver logs ``stats`` under ``actor/<name>/batch_*``."""

    replaces_verl: bool = False
    """verl has a built-in of the same name, which this one replaces (``VERL_EXT_KEEP_VERL_COV=1`` keeps verl's)."""

    summary: Callable[[Mapping[str, Any]], str | None] = field(default=lambda policy_loss: None)
    """A line the dry-run summary adds for its ``policy_loss`` node (``None``: none)."""

    def __post_init__(self) -> None:
        if (self.clip_high is None) == (self.clip_high_refusal is None):
            raise ValueError(f"LossSpec {self.name!r}: give exactly one of clip_high and clip_high_refusal")


SPECS: dict[str, LossSpec] = {}
"""Every declared loss by name, in declaration order."""


def declare(spec: LossSpec) -> LossSpec:
    """Add ``spec`` to :data:`SPECS` and return it; a second loss of the same name is an error."""
    known = SPECS.get(spec.name)
    if known is not None and known.loss is not spec.loss:
        raise ValueError(f"verl_ext: a policy loss named {spec.name!r} is already declared "
                         f"({known.loss.__module__}.{known.loss.__qualname__})")  # fmt: skip
    SPECS[spec.name] = spec
    return spec


def spec_of(config: Any) -> LossSpec | None:
    """The spec of an actor config's loss (``None`` for verl's own losses)."""
    return SPECS.get(loss_mode_of(config))


def needs_of(config: Any) -> Needs:
    """The :class:`Needs` of an actor config's loss (none for verl's own losses)."""
    spec = spec_of(config)
    return Needs() if spec is None else spec.needs(config_value(config, "policy_loss"))


def token_mean_metrics() -> frozenset[str]:
    """Every declared loss's token-mean metrics."""
    return frozenset().union(*(spec.token_mean_metrics for spec in SPECS.values()))


VERL_CLIP_HIGH = {"vanilla": "verl's PPO loss: clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high) on every token"}
"""verl's own losses checked to read ``clip_ratio_high`` as the PPO upper clip bound of every token."""


def clip_high_losses() -> dict[str, str]:
    """The losses the entropy control's ``clip_high`` actuator acts on (DAPO's clip-higher: a positive-advantage
    token loses its gradient beyond ``r = 1 + eps_high``), each with how it reads the bound."""
    return {**VERL_CLIP_HIGH, **{name: spec.clip_high for name, spec in SPECS.items() if spec.clip_high is not None}}


def clip_high_refusal(loss_mode: str) -> str | None:
    """Why ``actuator=clip_high`` cannot act on ``loss_mode`` (``None`` when it can: :func:`clip_high_losses`); a
    loss neither declared nor verl's checked one (verl's gspo, sapo, cispo, ...) is refused as not checked."""
    if loss_mode in clip_high_losses():
        return None
    spec = SPECS.get(loss_mode)
    if spec is not None:
        return spec.clip_high_refusal
    return f"{loss_mode} is not checked to read clip_ratio_high as the PPO upper clip bound of every token"


__all__ = ["VERL_CLIP_HIGH", "clip_high_losses", "clip_high_refusal", "LossSpec", "Needs", "SPECS", "declare", "needs_of", "no_needs", "spec_of", "token_mean_metrics"]
