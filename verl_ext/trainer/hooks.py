"""Driver-side batch hooks shared by verl_ext's V1 and legacy trainers (pure functions, no Ray).

Two batch fields reach the actor loss (``verl_ext.trainer.actor_loss.ppo_loss``) through the training batch, so
that verl splits them into mini- and micro-batches together with every other field:

* ``old_entropy`` (ERC losses ``grpo_erc`` / ``gppo_erc``): the per-token entropy of the old policy.
  verl's old-log-prob pass already computes it (``calculate_entropy=True``) but only logs it: the legacy
  trainer pops ``entropys`` in ``fit()``, the V1 trainer stores it as field ``entropy``. The hooks keep
  it under the name the loss reads. No extra forward pass.
* ``cov_selected`` (``clip_cov`` / ``kl_cov`` with ``policy_loss.cov_scope=batch``): the tokens chosen
  by :func:`verl_ext.losses.selection.select_tokens_for_batch` over the whole training batch, right before the
  actor update, from the advantages and the old log-probs already in the batch. No extra forward pass.

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

from verl_ext.config import config_value, loss_mode_of
from verl_ext.losses import COV_LOSSES, ERC_LOSSES
from verl_ext.contract import COV_SELECTED, OLD_ENTROPY
from verl_ext.losses.selection import select_tokens_for_batch


LEGACY_ENTROPY = "entropys"
"""Field of the legacy trainer's old-log-prob output that holds the entropy (popped by verl's ``fit``)."""

V1_ENTROPY = "entropy"
"""TransferQueue field where the V1 trainer's old-log-prob pass stores the entropy."""

SELECTION_INPUTS = ("advantages", "old_log_probs", "response_mask", "responses")
"""Batch fields :func:`select_cov_tokens` reads (the response token ids key Clip-Cov's random draw)."""


def needs_old_entropy(actor_config: Any) -> bool:
    """True for the ERC losses, which mask by ``H / H_old`` and so need ``old_entropy``."""
    return loss_mode_of(actor_config) in ERC_LOSSES


def needs_batch_selection(actor_config: Any) -> bool:
    """True for ``clip_cov`` / ``kl_cov`` with ``policy_loss.cov_scope == "batch"`` (the default)."""
    scope = config_value(config_value(actor_config, "policy_loss"), "cov_scope", "batch")
    return loss_mode_of(actor_config) in COV_LOSSES and (scope or "batch") == "batch"


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
    replaces the configured selection ratio (the entropy autopilot's); ``responses`` (token ids) key Clip-Cov's
    random draw, so that it does not depend on the old-log-prob pass's rounding.

    ``metrics`` (optional) receives the batch-level statistics as floats under
    ``actor/<loss>/batch_selected_frac``, ``actor/<loss>/batch_cov_selected_mean`` and
    ``actor/<loss>/batch_cov_selected_max`` (the loss reports its own per-micro-batch values under the
    names without ``batch_``).
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


def add_cov_selected(
    batch: TensorDict | Mapping, actor_config: Any, step: int, metrics: dict | None = None, ratio: float | None = None
) -> torch.Tensor:
    """Legacy trainer: add ``cov_selected`` to a padded batch (``DataProto.batch``) in place; returns it."""
    missing = [k for k in SELECTION_INPUTS if k not in batch.keys()]
    if missing:
        raise KeyError(f"verl_ext: batch-scope covariance selection needs batch fields {missing}")
    start = time.perf_counter()
    batch[COV_SELECTED] = select_cov_tokens(
        batch["advantages"], batch["old_log_probs"], batch["response_mask"], actor_config, step, metrics, ratio,
        batch["responses"],
    )
    if metrics is not None:
        metrics[SELECTION_TIMER] = time.perf_counter() - start
    return batch[COV_SELECTED]


def cov_selected_nested(
    data: TensorDict, actor_config: Any, step: int, metrics: dict | None = None, ratio: float | None = None
) -> tuple[TensorDict, TensorDict]:
    """V1 trainer: from a TransferQueue ``TensorDict`` holding the jagged ``SELECTION_INPUTS`` (and any other
    fields), return a ``TensorDict`` with the jagged bool field ``cov_selected`` (same layout as
    ``old_log_probs``), and the padded inputs with the padded ``cov_selected`` (for the token lens)."""
    missing = [k for k in SELECTION_INPUTS if k not in data.keys()]
    if missing:
        raise KeyError(f"verl_ext: batch-scope covariance selection needs batch fields {missing}")
    start = time.perf_counter()
    response_mask = data["response_mask"]
    padded = data.to_padded_tensor()
    selected = select_cov_tokens(
        padded["advantages"], padded["old_log_probs"], padded["response_mask"], actor_config, step, metrics, ratio,
        padded["responses"],
    )
    padded[COV_SELECTED] = selected
    if response_mask.is_nested:
        selected = response_to_nested(selected, response_mask)
    if metrics is not None:
        metrics[SELECTION_TIMER] = time.perf_counter() - start
    return TensorDict({COV_SELECTED: selected}, batch_size=data.batch_size), padded


__all__ = [
    "COV_SELECTED",
    "OLD_ENTROPY",
    "SELECTION_INPUTS",
    "SELECTION_TIMER",
    "add_cov_selected",
    "cov_selected_nested",
    "keep_old_entropy",
    "needs_batch_selection",
    "needs_old_entropy",
    "select_cov_tokens",
    "selection_step",
]
