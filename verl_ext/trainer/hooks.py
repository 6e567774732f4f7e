"""Driver-side batch hooks shared by verl_ext's V1 and legacy trainers (pure functions, no Ray).

Batch fields reach the actor loss (``verl_ext.trainer.actor_loss.ppo_loss``) through the training batch, so
that verl splits them into mini- and micro-batches together with every other field:

* ``old_entropy`` (ERC losses ``grpo_erc`` / ``gppo_erc``): the per-token entropy of the old policy.
  verl's old-log-prob pass already computes it (``calculate_entropy=True``) but only logs it: the legacy
  trainer pops ``entropys`` in ``fit()``, the V1 trainer stores it as field ``entropy``. The hooks keep
  it under the name the loss reads. No extra forward pass.
* ``cov_selected`` (``clip_cov`` / ``kl_cov`` with ``policy_loss.cov_scope=batch``): the tokens chosen
  by :func:`verl_ext.losses.selection.select_tokens_for_batch` over the whole training batch, right before the
  actor update, from the advantages and the old log-probs already in the batch. No extra forward pass.
* ``high_entropy_weight`` (``high_entropy`` with ``policy_loss.high_entropy_scope=batch``): the top-rho tokens of the
  whole batch by the old pass's entropy, as weights (:func:`verl_ext.losses.high_entropy.high_entropy_weights`).
* ``entropy_coef`` / ``pos_weight`` / ``clip_ratio_high`` (the entropy control's ``entropy_coef`` / ``pos_weight`` /
  ``clip_high`` actuators): the step's value on every token, read by the actor loss; with ``pos_weight`` also ``pos_weight_norm`` (1: EntroPIC's term is
  divided by each micro-batch's high-probability tokens, ``weight_norm=high_prob``; 0: by all valid tokens).

:func:`update_fields` computes all of them (and runs entropy control) right before the update, for both trainers.

The legacy trainer holds padded ``(batch, response_len)`` tensors in a ``DataProto``; the V1 trainer
holds jagged (nested) per-response tensors in the TransferQueue store. Both forms are handled here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict
from verl.workers.utils.padding import response_to_nested

from verl_ext.config import loss_mode_of
from verl_ext.contract import (CLIP_RATIO_HIGH, COV_SELECTED, ENTROPY_COEF, HIGH_ENTROPY_WEIGHT, OLD_ENTROPY,
                               POS_WEIGHT, POS_WEIGHT_NORM)
from verl_ext.driver.mixin import VerlExtDriver
from verl_ext.losses import needs_of, spec_of
from verl_ext.losses.selection import select_tokens_for_batch, token_budget


LEGACY_ENTROPY = "entropys"
"""Field of the legacy trainer's old-log-prob output that holds the entropy (popped by verl's ``fit``)."""

V1_ENTROPY = "entropy"
"""TransferQueue field where the V1 trainer's old-log-prob pass stores the entropy."""

SELECTION_INPUTS = ("advantages", "old_log_probs", "response_mask", "responses")
"""Batch fields :func:`select_cov_tokens` reads (the response token ids key Clip-Cov's random draw)."""


ACTUATOR_FIELDS = {"entropy_coef": ENTROPY_COEF, "pos_weight": POS_WEIGHT, "clip_high": CLIP_RATIO_HIGH}
"""The batch field that carries each loss-side actuator's value to the actor loss."""


def needs_old_entropy(actor_config: Any) -> bool:
    """Whether the loss reads the old policy's entropy as batch field ``old_entropy`` (the ERC losses)."""
    return needs_of(actor_config).old_entropy


def needs_entropy_selection(actor_config: Any) -> bool:
    """Whether the driver weights the batch's tokens by the old pass's entropy (``high_entropy_weight``:
    ``high_entropy`` with ``high_entropy_scope=batch``, the default)."""
    return needs_of(actor_config).batch_field == HIGH_ENTROPY_WEIGHT


def needs_update_fields(actor_config: Any, driver: VerlExtDriver) -> bool:
    """Whether :func:`update_fields` has anything to add before this trainer's actor updates."""
    return needs_batch_selection(actor_config) or needs_entropy_selection(actor_config) or driver.controller is not None


def needs_driver_entropy(actor_config: Any, driver: VerlExtDriver) -> bool:
    """Whether the driver reads the old pass's entropy before the update (control, batch-scope ``high_entropy``)."""
    return driver.controller is not None or needs_entropy_selection(actor_config)


def needs_batch_selection(actor_config: Any) -> bool:
    """Whether the driver selects the batch's tokens before the update (``cov_selected``: ``clip_cov`` / ``kl_cov``
    with ``cov_scope=batch``, the default)."""
    return needs_of(actor_config).batch_field == COV_SELECTED


# ----------------------------------------------------------------------------------------------------
# old_entropy
# ----------------------------------------------------------------------------------------------------


def keep_old_entropy(old_log_prob_batch: TensorDict | Mapping, source: str) -> None:
    """Store ``old_log_prob_batch[source]`` (the old pass's entropy) as field ``old_entropy`` as well.

    ``old_log_prob_batch`` is the legacy trainer's ``DataProto.batch`` (``source="entropys"``, which verl
    pops afterwards) or a TransferQueue ``TensorDict`` (``source="entropy"``). The tensor is shared, not
    copied. Raises ``KeyError`` naming the missing field if the old-log-prob pass returned no entropy.
    """
    if source not in old_log_prob_batch.keys():
        raise KeyError(
            f"verl_ext: the old-log-prob pass returned no {source!r} field, so the ERC loss would get no "
            f"old-policy entropy (present: {sorted(old_log_prob_batch.keys())})"
        )
    old_log_prob_batch[OLD_ENTROPY] = old_log_prob_batch[source]


# ----------------------------------------------------------------------------------------------------
# cov_selected
# ----------------------------------------------------------------------------------------------------


def selection_step(global_steps: int, local_step: int = 0, steps_per_global: int = 1) -> int:
    """The step number mixed into the Clip-Cov seed: unique per actor update, and the same after a resume
    from a checkpoint (it depends on ``global_steps`` only, plus the V1 sub-step within it)."""
    return int(global_steps) * max(1, int(steps_per_global)) + int(local_step)


def select_cov_tokens(
    advantages: torch.Tensor,
    old_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    actor_config: Any,
    step: int,
    metrics: dict | None = None,
    ratio: float | None = None,
    responses: torch.Tensor | None = None,
) -> torch.Tensor:
    """Batch-scope selection on padded ``(batch, response_len)`` tensors; returns a bool mask. ``ratio``
    replaces the configured selection ratio (the entropy control's); ``responses`` (token ids) key Clip-Cov's
    random draw, so that it does not depend on the old-log-prob pass's rounding.

    ``metrics`` (optional) receives the batch-level statistics as floats under
    ``actor/<loss>/batch_selected_frac``, ``actor/<loss>/batch_cov_selected_mean``,
    ``actor/<loss>/batch_cov_selected_max`` and for Clip-Cov ``actor/clip_cov/batch_candidate_frac`` (the loss
    reports its own per-micro-batch values under the names without ``batch_``).
    """
    mode = loss_mode_of(actor_config)
    raw: dict[str, torch.Tensor] = {}
    selected = select_tokens_for_batch(
        mode, advantages, old_log_probs, response_mask, actor_config, step=step, metrics=raw, ratio=ratio, key=responses
    )
    if metrics is not None:
        prefix = f"actor/{mode}/"
        for key, value in raw.items():
            name = key[len(prefix):] if key.startswith(prefix) else key
            metrics[f"{prefix}batch_{name}"] = float(value)
    return selected.bool()


SELECTION_TIMER = "timing_s/verl_ext/cov_selection"
"""Metric: seconds the driver spent on the batch-scope selection of the step."""


def update_fields(
    padded: TensorDict | Mapping,
    actor_config: Any,
    driver: VerlExtDriver,
    global_steps: int,
    step: int,
    metrics: dict,
    entropy: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Every field verl_ext adds to a padded training batch right before the actor update, by name.

    Runs the entropy control for ``global_steps`` (its entropy already observed), then: the batch-scope covariance
    selection (with entropy control's ratio when its actuator is ``cov_ratio``; the token lens writes it), the
    batch-scope ``high_entropy`` weights from ``entropy`` (the old pass's), and the loss-side actuator's value on
    every token. ``step`` keys Clip-Cov's draw (:func:`selection_step`); metrics go to ``metrics``."""
    fields: dict[str, torch.Tensor] = {}
    mask = padded["response_mask"]
    mini_batches = driver.optimiser_steps(mask.shape[0]) if driver.controller is not None else 1
    value = driver.control_value(global_steps, metrics, mini_batches)
    actuator = driver.controller.actuator.name if driver.controller is not None else None
    if needs_batch_selection(actor_config):
        missing = [k for k in SELECTION_INPUTS if k not in padded.keys()]
        if missing:
            raise KeyError(f"verl_ext: batch-scope covariance selection needs batch fields {missing}")
        start = time.perf_counter()
        fields[COV_SELECTED] = select_cov_tokens(
            padded["advantages"], padded["old_log_probs"], mask, actor_config, step, metrics,
            value if actuator == "cov_ratio" else None, padded["responses"],
        )  # fmt: skip
        metrics[SELECTION_TIMER] = time.perf_counter() - start
        if actuator == "cov_ratio":  # fewer tokens than the ratio asked: a bound for the controller's anti-windup
            budget, _ = token_budget(float(value), mask.bool())
            selected = int(fields[COV_SELECTED].sum())
            applied = selected / max(1, int(mask.bool().sum()))  # the fraction really detached (``auto`` learns from it)
            driver.actuator_limited(selected < budget, metrics, applied)
        driver.write_lens(global_steps, padded, fields[COV_SELECTED])
    if needs_entropy_selection(actor_config):
        if entropy is None:
            raise KeyError("verl_ext: batch-scope high_entropy needs the old-log-prob pass's entropy, which this batch "
                           "lacks (rollout_correction.bypass_mode skips that pass)")  # fmt: skip
        spec = spec_of(actor_config)
        weights, stats = spec.batch_weights(entropy, mask, actor_config, padded["responses"])
        fields[HIGH_ENTROPY_WEIGHT] = weights
        metrics.update({f"actor/{spec.name}/batch_{k}": v for k, v in stats.items()})
    if actuator in ACTUATOR_FIELDS:
        fields[ACTUATOR_FIELDS[actuator]] = torch.full(mask.shape, float(value), dtype=torch.float32)
    if actuator == "pos_weight":
        by_high_prob = driver.controller.config.weight_norm == "high_prob"  # type: ignore[union-attr]
        fields[POS_WEIGHT_NORM] = torch.full(mask.shape, float(by_high_prob), dtype=torch.float32)
    return fields


def nested_fields(fields: Mapping[str, torch.Tensor], response_mask: torch.Tensor, batch_size: Any) -> TensorDict:
    """V1 trainer: padded ``(batch, response_len)`` fields in the jagged layout of ``response_mask`` (as
    ``old_log_probs``), as a ``TensorDict`` for the TransferQueue store."""
    if response_mask.is_nested:
        fields = {name: response_to_nested(t, response_mask) for name, t in fields.items()}
    return TensorDict(dict(fields), batch_size=batch_size)


__all__ = [
    "ACTUATOR_FIELDS",
    "COV_SELECTED",
    "OLD_ENTROPY",
    "SELECTION_INPUTS",
    "SELECTION_TIMER",
    "keep_old_entropy",
    "needs_batch_selection",
    "needs_driver_entropy",
    "needs_entropy_selection",
    "needs_old_entropy",
    "needs_update_fields",
    "nested_fields",
    "update_fields",
    "select_cov_tokens",
    "selection_step",
]
