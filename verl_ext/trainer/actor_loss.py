"""verl_ext's actor loss: verl's ``ppo_loss`` contract, plus the extra inputs of verl_ext's policy losses and
KL clipping. Installed on the actor with verl's ``set_loss_fn`` by
:class:`verl_ext.trainer.actor_worker.VerlExtActorRolloutRefWorker` (``partial(ppo_loss, config=actor_config)``).

Per micro-batch, as verl's ``verl.workers.utils.losses.ppo_loss``::

    L = L_pg(log_prob, old_log_prob, A [, entropy, old_entropy | cov_selected | high_entropy_weight])
        - entropy_coeff * agg(H)                           (when the engine computed H)
        - agg(c_t * H)                                     (entropy control's entropy_coef actuator: batch field)
        + alpha_t * agg_{pi > 0.95}(-r |A|) * N / N_hp      (entropy control's pos_weight actuator, EntroPIC; N / N_hp
                                                            of the micro-batch with weight_norm=high_prob, else 1)
        + kl_loss_coef * agg(KL)  or  agg(clip(KL))        (use_kl_loss; clip per kl_clip_method)

with ``agg`` verl's ``agg_loss`` over the actor's ``loss_agg_mode`` and global batch info (so sums over
micro-batches and DP ranks are the global mean), verl's rollout-correction weights handed to the policy
loss, and verl's metric aggregation (``Metric``, SUM when the losses are globally normalised).

What verl_ext adds:

* ``entropy`` / ``old_entropy`` for ``grpo_erc`` / ``gppo_erc``: the current entropy from the forward pass
  and the batch field ``old_entropy`` (the old-log-prob pass's entropy, kept by verl_ext's trainer hooks).
* ``cov_selected`` for ``clip_cov`` / ``kl_cov`` with ``cov_scope=batch``: the tokens chosen over the whole
  training batch (batch field set by the trainer hooks); ``cov_scope=micro`` selects per micro-batch.
* ``high_entropy_weight`` for ``high_entropy`` in batch scope, ``entropy`` for ``entropy_adv`` and micro-scope
  ``high_entropy``.
* the entropy control's loss-side actuators: the step's coefficient on verl's entropy term (batch field
  ``entropy_coef``; verl's own ``entropy_coeff`` is then 0) and EntroPIC's term (batch field ``pos_weight``,
  :mod:`verl_ext.losses.entropic`, normalised by the micro-batch's high-probability tokens as EntroPIC's code does
  when the batch field ``pos_weight_norm`` is 1: :func:`high_prob_normaliser`). Each logs what it changed the loss
  by (``actor/entropy_control/loss_change``, ``actor/entropic/loss_change``), measured on the loss tensor itself.
* the ``clip_high`` actuator: the batch field ``clip_ratio_high`` (one value on every token) replaces the actor's
  ``clip_ratio_high`` in the config the policy loss is called with (:func:`with_clip_ratio_high`), for the losses of
  :func:`~verl_ext.losses.spec.clip_high_losses` only; the bound the loss received is logged as
  ``actor/entropy_control/clip_ratio_high``.
  With entropy control on with one of them (the actor keys ``entropy_control_enable`` / ``entropy_control_actuator``),
  a batch without its field is an error (:func:`check_actuator_field`), not a term silently left out.
* KL clipping (:mod:`verl_ext.losses.kl_clip`) with metrics ``actor/kl_clip/{raw_kl,clipped_kl,frac_above}``.

Why not a wrapper around verl's ``ppo_loss``: that function looks up the policy loss and calls it with a
fixed argument list and computes the KL term inline, so neither the extra inputs nor the clipped KL can be
passed through it. This function therefore re-states its ~40 lines of orchestration using verl's own
pieces (``agg_loss``, ``kl_penalty``, ``get_policy_loss_fn``, ``Metric``, ``no_padding_2_padding``);
``tests/trainer/test_actor_loss.py`` checks that it matches verl's ``ppo_loss`` exactly where both apply.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.padding import no_padding_2_padding

from verl_ext.config import loss_mode_of, policy_loss_params
from verl_ext.contract import CLIP_RATIO_HIGH, ENTROPY_COEF, HIGH_ENTROPY_WEIGHT, POS_WEIGHT, POS_WEIGHT_NORM
from verl_ext.losses import needs_of, token_mean_metrics
from verl_ext.losses.spec import clip_high_refusal
from verl_ext.losses.entropic import ENTROPIC_METRICS, HIGH_PROB_THRESHOLD, entropic_term
from verl_ext.losses.kl_clip import clipped_kl_matrix
from verl_ext.trainer.hooks import ACTUATOR_FIELDS, COV_SELECTED, OLD_ENTROPY

BASE_FIELDS = ("response_mask", "old_log_probs", "advantages")
OPTIONAL_FIELDS = ("rollout_is_weights", "ref_log_prob", OLD_ENTROPY, COV_SELECTED, HIGH_ENTROPY_WEIGHT,
                   ENTROPY_COEF, POS_WEIGHT, POS_WEIGHT_NORM, CLIP_RATIO_HIGH)  # fmt: skip
CLIP_HIGH_METRIC = "actor/entropy_control/clip_ratio_high"
"""The upper clip bound the policy loss received from the batch field ``clip_ratio_high`` (actuator ``clip_high``)."""


def _set_global_batch_info(config: Any, data: TensorDict) -> AggregationType:
    """Record the global batch sizes the losses normalise by; return how metrics aggregate (verl's rule:
    SUM once any global normalisation applies, else MEAN)."""
    info = config.global_batch_info
    info["dp_size"] = data["dp_size"]
    info["batch_num_tokens"] = data["batch_num_tokens"]
    info["global_batch_size"] = data["global_batch_size"]
    info["loss_scale_factor"] = config.loss_scale_factor
    globally_normalised = (
        data["dp_size"] > 1
        or data["batch_num_tokens"] is not None
        or data["global_batch_size"] is not None
        or config.loss_scale_factor is not None
    )
    return AggregationType.SUM if globally_normalised else AggregationType.MEAN


def policy_metrics(pg_metrics: dict[str, Any], response_mask: torch.Tensor, data: TensorDict) -> dict[str, Metric]:
    """The policy loss's metrics as verl's ``ppo_loss`` reports them (MEAN over micro-batches), except verl_ext's
    per-token means (:data:`~verl_ext.losses.TOKEN_MEAN_METRICS`): with verl's global token count of the
    mini-batch (``batch_num_tokens``, summed over DP ranks) each micro-batch contributes
    ``value * n_local / batch_num_tokens * dp_size`` with SUM aggregation, which verl's reduction (sum over
    micro-batches of the mean over ranks) turns into the mean over all the mini-batch's tokens. A plain mean
    over micro-batches would weigh a 10-token micro-batch like a 1000-token one under dynamic batch size."""
    metrics = dict(Metric.from_dict(pg_metrics, aggregation=AggregationType.MEAN))
    total = data["batch_num_tokens"]
    if total is None:
        return metrics
    weight = response_mask.sum().to(torch.float64) / total * data["dp_size"]
    for key in (token_mean_metrics() | ENTROPIC_METRICS) & pg_metrics.keys():
        metrics[key] = Metric(value=pg_metrics[key].to(torch.float64) * weight, aggregation=AggregationType.SUM)
    return metrics


def policy_loss_extras(config: Any, batch: TensorDict, entropy: torch.Tensor | None,
                       bapo_bounds: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The extra keyword inputs of the configured policy loss, as its spec's :class:`~verl_ext.losses.Needs` say:
    the update forward's ``entropy``, the batch's ``old_entropy``, its batch-scope field, the step's bounds.

    A batch-scope field or the step's bounds that verl_ext's trainer did not supply is a ``ValueError`` naming the key
    that moves the work into the loss call (computing it per micro-batch instead would silently change the method).
    Missing entropies are reported by the loss itself.
    """
    needs = needs_of(config)
    extras: dict[str, torch.Tensor] = {}
    if needs.current_entropy and entropy is not None:
        extras["entropy"] = entropy
    if needs.old_entropy and OLD_ENTROPY in batch.keys():
        extras[OLD_ENTROPY] = batch[OLD_ENTROPY]
    if needs.batch_field is not None:
        if needs.batch_field not in batch.keys():
            raise ValueError(_not_supplied(config, f"the batch field '{needs.batch_field}', which verl_ext's trainer "
                                                   "adds before each actor update", needs.micro_key))  # fmt: skip
        extras[needs.batch_field] = batch[needs.batch_field]
    if needs.step_pass:
        if bapo_bounds is None:
            raise ValueError(_not_supplied(config, "the optimiser step's bounds, which verl_ext's actor worker decides "
                                                   "by a no-grad pass before each step", needs.micro_key))  # fmt: skip
        extras["bapo_bounds"] = bapo_bounds
    return extras


def _not_supplied(config: Any, what: str, micro_key: str | None) -> str:
    mode = loss_mode_of(config)
    scope = f"{micro_key}={policy_loss_params(config, micro_key)[0]}" if micro_key else "its settings"
    micro = f" or set policy_loss.{micro_key}=micro" if micro_key else ""
    return (f"verl_ext: actor_rollout_ref.actor.policy_loss.loss_mode={mode} with {scope} needs {what} (python -m "
            f"verl_ext.main_ppo); with another driver, supply it as verl_ext's trainer does{micro}")



def check_actuator_field(config: Any, fields: Any) -> None:
    """With the entropy control on and a loss-side actuator (the actor keys ``entropy_control_enable`` /
    ``entropy_control_actuator``, copies of ``verl_ext.entropy_control.enable`` / ``.actuator``), the update batch must
    carry the actuator's field (``entropy_coef`` / ``pos_weight``, and ``pos_weight_norm`` with it): the loss applies
    the term only when the field is there, so a field lost on the way would drop the term silently while the driver
    logs the value as applied. Raises ``ValueError`` naming the field and the actuator."""
    if not config.get("entropy_control_enable", False):
        return
    actuator = config.get("entropy_control_actuator", None)
    wanted = {ENTROPY_COEF: (ENTROPY_COEF,), POS_WEIGHT: (POS_WEIGHT, POS_WEIGHT_NORM),
              CLIP_RATIO_HIGH: (CLIP_RATIO_HIGH,)}.get(ACTUATOR_FIELDS.get(actuator))  # fmt: skip
    missing = [f for f in wanted or () if f not in fields]
    if missing:
        raise ValueError(
            f"verl_ext: the entropy control is on with actuator={actuator}, but this update batch has no "
            f"{missing[0]!r} field, which carries the actuator's value to the loss: without it the term would be "
            "dropped while the driver logs the value as applied. verl_ext's trainer adds it before each update "
            "(verl_ext.trainer.hooks.update_fields); a trainer or verl version that drops it from the batch must keep it"
        )


def with_clip_ratio_high(config: Any, field: torch.Tensor, mask: torch.Tensor) -> tuple[Any, float]:
    """The actor config with ``clip_ratio_high`` replaced by the batch field's value (the ``clip_high`` actuator's
    step value, one number on every token), and that value: a shallow copy, so that verl's and verl_ext's policy
    losses read the bound where they always do (``config.clip_ratio_high``) and everything else is shared (the global
    batch info set for this micro-batch). One host read of the value per micro-batch (verl's own losses read their
    metrics the same way). A loss outside :func:`~verl_ext.losses.spec.clip_high_losses`, or a field whose
    valid tokens disagree, is a ``ValueError``."""
    mode = loss_mode_of(config)
    refusal = clip_high_refusal(mode)
    if refusal is not None:
        raise ValueError(f"verl_ext: the batch carries entropy control's upper clip bound ({CLIP_RATIO_HIGH!r}) but "
                         f"policy_loss.loss_mode={mode} cannot take it: {refusal}")  # fmt: skip
    values = field[mask] if bool(mask.any()) else field.reshape(-1)
    low, high = (float(v) for v in torch.stack([values.min(), values.max()]).tolist())
    if low != high:
        raise ValueError(f"verl_ext: the batch field {CLIP_RATIO_HIGH!r} holds values from {low} to {high} in one "
                         "micro-batch; the clip_high actuator sets one bound per step")  # fmt: skip
    updated = copy.copy(config)
    object.__setattr__(updated, "clip_ratio_high", high)  # verl's configs freeze their fields against assignment
    return updated, high


def high_prob_normaliser(log_prob: torch.Tensor, mask: torch.Tensor, by_high_prob: torch.Tensor) -> torch.Tensor:
    """EntroPIC's normalisation of its term (``weight_norm=high_prob``): ``N / N_hp`` of this micro-batch (its valid
    tokens over its high-probability ones, ``pi > 0.95`` under the current policy), which turns the term's verl
    aggregation over all valid tokens into EntroPIC's mean over the micro-batch's high-probability tokens, weighted by
    the micro-batch's share of the mini-batch (for ``token-mean``: ``alpha * (N_mb / N_mini) * mean_{HP of mb}(-r
    |A|)``; for the sequence modes the same factor on verl's sequence aggregation). 1 where ``by_high_prob`` (the
    batch field ``pos_weight_norm``) is 0 (``all_tokens``) or the micro-batch has no high-probability token (the term
    is 0 then). A 0-d tensor; no host sync."""
    mask = mask.bool()
    high = mask & (log_prob.detach() > math.log(HIGH_PROB_THRESHOLD))
    n_high = high.sum()
    ratio = mask.sum().to(torch.float64) / n_high.clamp(min=1).to(torch.float64)
    wanted = (by_high_prob.to(torch.bool) & mask).any() & (n_high > 0)
    return torch.where(wanted, ratio, torch.ones_like(ratio)).to(log_prob.dtype)


def kl_loss(
    config: Any, log_prob: torch.Tensor, ref_log_prob: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The aggregated KL loss term (before ``kl_loss_coef``): verl's, or the clipped one; and its metrics."""
    kld = kl_penalty(logprob=log_prob, ref_logprob=ref_log_prob, kl_penalty=config.kl_loss_type)
    raw = agg_loss(loss_mat=kld, loss_mask=mask, loss_agg_mode=config.loss_agg_mode, **config.global_batch_info)
    method = config.get("kl_clip_method", "none") or "none"
    if method == "none":
        return raw, {}
    matrix, metrics = clipped_kl_matrix(
        kld, mask, method, config.kl_clip_threshold, config.get("use_per_token_kl_threshold", True)
    )
    clipped = agg_loss(loss_mat=matrix, loss_mask=mask, loss_agg_mode=config.loss_agg_mode, **config.global_batch_info)
    metrics["actor/kl_clip/raw_kl"] = raw.detach()
    metrics["actor/kl_clip/clipped_kl"] = clipped.detach()
    return clipped, metrics


def ppo_loss(
    config: Any, model_output: Any, data: TensorDict, dp_group: Any = None, bapo_bounds: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict]:
    """verl's ``ppo_loss`` signature and behaviour, with verl_ext's extra inputs and KL clipping. ``bapo_bounds``:
    the optimiser step's BAPO bounds, bound in by verl_ext's actor worker (:mod:`verl_ext.trainer.bapo_step`)."""
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    entropy = model_output.get("entropy", None)
    if entropy is not None:
        entropy = no_padding_2_padding(entropy, data)
    aggregation = _set_global_batch_info(config, data)

    check_actuator_field(config, data.keys())
    fields = [*BASE_FIELDS, *(k for k in OPTIONAL_FIELDS if k in data.keys())]
    batch = data.select(*fields).to_padded_tensor()
    response_mask = batch["response_mask"].to(bool)
    loss_mode = loss_mode_of(config)
    loss_config, clip_high = config, None
    if CLIP_RATIO_HIGH in batch.keys():  # entropy control's clip_high actuator: the step's upper clip bound
        loss_config, clip_high = with_clip_ratio_high(config, batch[CLIP_RATIO_HIGH], response_mask)

    pg_loss, pg_metrics = get_policy_loss_fn(loss_mode)(
        old_log_prob=batch["old_log_probs"],
        log_prob=log_prob,
        advantages=batch["advantages"],
        response_mask=response_mask,
        loss_agg_mode=config.loss_agg_mode,
        config=loss_config,
        rollout_is_weights=batch.get("rollout_is_weights", None),
        **policy_loss_extras(config, batch, entropy, bapo_bounds),
    )
    metrics: dict[str, Any] = policy_metrics(pg_metrics, response_mask, data)
    metrics["actor/pg_loss"] = Metric(value=pg_loss, aggregation=aggregation)
    if clip_high is not None:  # what the policy loss read as its upper bound
        metrics[CLIP_HIGH_METRIC] = Metric(value=loss_config.clip_ratio_high, aggregation=AggregationType.MEAN)
    policy_loss = pg_loss

    if entropy is not None:
        entropy_loss = agg_loss(
            loss_mat=entropy, loss_mask=response_mask, loss_agg_mode=config.loss_agg_mode, **config.global_batch_info
        )
        policy_loss = policy_loss - config.entropy_coeff * entropy_loss
        metrics["actor/entropy_loss"] = Metric(value=entropy_loss, aggregation=aggregation)
        if ENTROPY_COEF in batch.keys():  # the controlled coefficient (actor entropy_coeff is 0: checked)
            weighted = agg_loss(loss_mat=entropy * batch[ENTROPY_COEF].to(entropy.dtype), loss_mask=response_mask,
                                loss_agg_mode=config.loss_agg_mode, **config.global_batch_info)  # fmt: skip
            before = policy_loss.detach()
            policy_loss = policy_loss - weighted
            metrics["actor/entropy_control/entropy_term"] = Metric(value=weighted.detach(), aggregation=aggregation)
            # what the loss itself changed by: 0 unless the term is in the loss the backward pass sees
            metrics["actor/entropy_control/loss_change"] = Metric(value=policy_loss.detach() - before,
                                                                  aggregation=aggregation)  # fmt: skip
    elif ENTROPY_COEF in batch.keys():
        raise ValueError("verl_ext: the batch carries entropy control's entropy coefficient but the update forward "
                         "computed no entropy (verl_ext's actor worker turns it on for this field)")  # fmt: skip

    if POS_WEIGHT in batch.keys():
        term, entropic_metrics = entropic_term(log_prob, batch["old_log_probs"], batch["advantages"], response_mask,
                                               batch[POS_WEIGHT], config.loss_agg_mode, config)  # fmt: skip
        if POS_WEIGHT_NORM in batch.keys():
            term = term * high_prob_normaliser(log_prob, response_mask, batch[POS_WEIGHT_NORM])
        before = policy_loss.detach()
        policy_loss = policy_loss + term
        metrics.update(policy_metrics(entropic_metrics, response_mask, data))
        metrics["actor/entropic/term"] = Metric(value=term.detach(), aggregation=aggregation)
        # what the loss itself changed by: 0 unless the term is in the loss the backward pass sees
        metrics["actor/entropic/loss_change"] = Metric(value=policy_loss.detach() - before, aggregation=aggregation)

    if config.use_kl_loss:
        if "ref_log_prob" not in batch.keys():
            raise ValueError(
                "verl_ext: actor_rollout_ref.actor.use_kl_loss=true but the batch has no 'ref_log_prob' "
                "(the reference policy's log-probs); enable the reference model or set use_kl_loss=false"
            )
        kl_term, kl_metrics = kl_loss(config, log_prob, batch["ref_log_prob"], response_mask)
        policy_loss = policy_loss + kl_term * config.kl_loss_coef
        metrics["kl_loss"] = Metric(value=kl_term, aggregation=aggregation)
        metrics["kl_coef"] = config.kl_loss_coef
        for key, value in kl_metrics.items():
            agg = AggregationType.MEAN if key == "actor/kl_clip/frac_above" else aggregation
            metrics[key] = Metric(value=value, aggregation=agg)

    return policy_loss, metrics


__all__ = ["CLIP_HIGH_METRIC", "check_actuator_field", "high_prob_normaliser", "with_clip_ratio_high",
           "kl_loss", "policy_loss_extras", "policy_metrics", "ppo_loss"]
