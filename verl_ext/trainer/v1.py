"""verl_ext on verl's V1 trainer (``trainer.use_v1=true``, the default; needs the ``TransferQueue`` package).

:class:`VerlExtV1Mixin` overrides small methods of verl's V1 ``PPOTrainer`` and keeps its loops:

* ``_init_resource_pool_mgr``: the actor role runs verl_ext's worker (:mod:`verl_ext.trainer.workers`).
* ``_compute_advantage``: the fields verl_ext adds before the update are computed over the whole training batch
  and stored with verl's own advantage put (:mod:`verl_ext.trainer.advantage_store`: no TransferQueue round trip of
  their own): ``old_entropy`` for ERC losses (verl stores the old pass's entropy as field ``entropy``; the loss
  reads ``old_entropy``), and :func:`~verl_ext.trainer.hooks.update_fields`' ``cov_selected``,
  ``high_entropy_weight``, the actuator's ``entropy_coef`` / ``pos_weight`` - the entropy control runs on the old
  pass's entropy there, and the token lens writes the selected tokens.
* ``_update_actor``: if the advantage step stored no fields for this batch (a trainer whose advantage step does not
  fetch and put through verl's ``trainer_base.tq``), the same fields by a round trip of their own, with a warning.
* ``_save_checkpoint`` / ``_load_checkpoint``: entropy control's state goes with verl's checkpoint.
* ``_compute_metrics``: verl's ``response_length/clip_ratio`` (and its non-aborted and prompt twins) measured
  against ``data.max_response_length`` / ``data.max_prompt_length``, the truncation rate they are meant to be, under
  verl_ext's own keys (``verl_ext/response_length/clip_ratio``, ...: :data:`verl_ext.contract.CUT_RATIO_KEYS`); verl's
  keys keep verl's values. V1 pads the batch to its longest sample, so verl's value is the share as long as the
  longest (verl issue #7817; :mod:`verl_ext.analysis.length_limit`). Computed from verl's own step metrics, no pass
  over the batch.
* ``_step_once`` / ``_add_prompts_to_generate``: with DAPO's dynamic sampling (``algorithm.filter_groups``) in
  ``sync`` mode, the prompts drawn for one training batch are bounded by
  ``algorithm.filter_groups.max_num_gen_batches`` generation batches (verl's replay buffer refills evicted
  groups without a bound): a run whose groups all score the same stops with :class:`DynamicSamplingExhausted`.

Fields written with ``kv_batch_put`` are listed in the ``KVBatchMeta`` it returns, and the workers fetch
exactly those fields, so the new fields reach the update's mini- and micro-batches.

The verl_ext trainer keeps verl's mode name (``trainer.v1.trainer_mode``: ``sync``, ``colocate_async``,
``separate_async`` or a registered custom mode): verl's V1 trainer tests the mode *name* in several
places (``"sync"`` selects the replay buffer, the refill policy and checkpointing), so a new name would
silently change the training. Instead, :func:`v1_trainer_registered` registers
``VerlExt<verl class>`` under the selected name inside the TaskRunner actor for the duration of the run.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterator
from typing import Any

import ray
import transfer_queue as tq
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl.trainer.main_ppo import TaskRunnerV1
from verl.trainer.ppo.v1 import trainer_base
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from verl_ext.analysis.length_limit import CLIP_RATIOS, corrected_clip_ratios
from verl_ext.contract import CUT_RATIO_KEYS, REPLAY_POLL_INTERVAL
from verl_ext.registration import ensure_registered
from verl_ext.driver.mixin import VerlExtDriverMixin
from verl_ext.trainer.hooks import (
    OLD_ENTROPY,
    SELECTION_INPUTS,
    V1_ENTROPY,
    keep_old_entropy,
    needs_driver_entropy,
    needs_old_entropy,
    needs_update_fields,
    nested_fields,
    selection_step,
    update_fields,
)
from verl_ext.driver.progress import published_progress
from verl_ext.driver.run_log import continuing_file_log
from verl_ext.config import bounded_dynamic_sampling
from verl_ext.trainer.advantage_store import with_advantage_store
from verl_ext.trainer.workers import use_verl_ext_actor_worker
from verl_ext.versions import upstream_changed

logger = logging.getLogger(__name__)


REPLAY_BUFFER_POLL_ATTR = "poll_interval"
"""The attribute of verl's replay buffer that sets its seconds between checks for finished rollouts."""
REPLAY_BUFFER_SYMBOL = f"verl.trainer.ppo.v1.replay_buffer.ReplayBuffer.{REPLAY_BUFFER_POLL_ATTR}"
"""The upstream symbol :meth:`VerlExtV1Mixin._build_replay_buffer` sets, named in its error."""


class DynamicSamplingExhausted(RuntimeError):
    """DAPO's filter evicted so many groups that one training batch needed more than
    ``algorithm.filter_groups.max_num_gen_batches`` generation batches."""


ADVANTAGE_FIELDS_TIMER = "timing_s/verl_ext/advantage_fields"
"""Metric: seconds the driver spent computing the fields verl_ext adds (padding, selection, jagged layout) inside
verl's advantage put (:mod:`verl_ext.trainer.advantage_store`), within verl's ``timing_s/adv``."""
FETCH_TIMER = "timing_s/verl_ext/update_fields_fetch"
"""Metric, only when the fields could not go with verl's advantage put: seconds the driver spent fetching their
inputs from the TransferQueue store, inside verl's ``timing_s/update_actor``."""
STORE_TIMER = "timing_s/verl_ext/update_fields_store"
"""Metric, as :data:`FETCH_TIMER`: seconds the driver spent storing the fields (``kv_batch_put``)."""


def generation_budget(config: Any) -> int | None:
    """Prompts one sampled training batch may draw under DAPO's dynamic sampling in ``sync`` mode
    (``max_num_gen_batches x train_batch_size``), or ``None`` when no bound applies."""
    if not bounded_dynamic_sampling(config):
        return None
    return int(config.algorithm.filter_groups.max_num_gen_batches) * int(config.data.train_batch_size)


class VerlExtV1Mixin(VerlExtDriverMixin):
    """Mixed in before a verl V1 trainer class (see :func:`make_v1_trainer`)."""

    _verl_ext_drawn = 0
    """Prompts drawn for the training batch being sampled (DAPO's bound, :func:`generation_budget`)."""

    def _step_once(self, metrics: dict, timing_raw: dict, sample_batch_size: int):
        self._verl_ext_drawn = sample_batch_size  # the batch prepare_step submitted
        return super()._step_once(metrics, timing_raw, sample_batch_size)

    def _add_prompts_to_generate(self, num_prompts: int) -> int:
        budget = generation_budget(self.config)
        if budget is not None:
            self._verl_ext_drawn += num_prompts
            if self._verl_ext_drawn > budget:
                raise DynamicSamplingExhausted(self._exhausted_message(self._verl_ext_drawn - num_prompts, num_prompts))
        return super()._add_prompts_to_generate(num_prompts)

    def _exhausted_message(self, drawn: int, asked: int) -> str:
        filter_groups = self.config.algorithm.filter_groups
        batch = int(self.config.data.train_batch_size)
        finished = getattr(getattr(self, "replay_buffer", None), "finished_keys", {}) or {}
        kept = len(finished.get("train", ()))
        return (
            f"verl_ext: DAPO dynamic sampling cannot fill the training batch of step {self.global_steps}: "
            f"{drawn} prompts drawn and {asked} more asked for, over the {filter_groups.max_num_gen_batches} "
            f"generation batches of {batch} prompts allowed by "
            f"algorithm.filter_groups.max_num_gen_batches={filter_groups.max_num_gen_batches}; {kept} group(s) kept of "
            f"the {batch} a batch needs: almost every group's {filter_groups.metric!r} is the same for all its "
            "responses (all solved or all failed). Raise algorithm.filter_groups.max_num_gen_batches, train on data "
            "of a difficulty the model partly solves, or set algorithm.filter_groups.enable=false"
        )

    def _compute_metrics(self, batch, metrics: dict, timing_raw: dict, global_steps: int, epoch: int):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        data = self.config.data
        corrected = corrected_clip_ratios(metrics, int(data.max_prompt_length), int(data.max_response_length))
        metrics.update(corrected)  # under verl_ext's keys: verl's keep verl's values
        left = sorted(CUT_RATIO_KEYS[k] for k in CLIP_RATIOS if k in metrics and CUT_RATIO_KEYS[k] not in corrected)
        if left:
            _warn_once(
                "uncorrected_clip_ratio",
                "verl_ext: %s not logged (only verl's value, the share of samples as long as the batch's longest, "
                "not the share cut at the limit): a sample was longer than data.max_prompt_length / "
                "data.max_response_length, or the step logged no */max", ", ".join(left),
            )

    def _build_replay_buffer(self):
        """verl's replay buffer, checking for finished rollouts every ``verl_ext.replay_poll_interval`` seconds
        instead of its built-in 2 (``verl/trainer/ppo/v1/replay_buffer.py``: ``ReplayBuffer.poll_interval``, which
        verl's trainer does not pass); null (the default outside CPU mode) keeps verl's. A buffer without that
        attribute (a custom sampler, or a verl that renamed it) is an error naming it and the key."""
        buffer = super()._build_replay_buffer()
        interval = OmegaConf.select(self.config, REPLAY_POLL_INTERVAL, default=None)
        if interval is None:
            return buffer
        if not hasattr(buffer, REPLAY_BUFFER_POLL_ATTR):
            raise AttributeError(upstream_changed(
                f"{REPLAY_BUFFER_SYMBOL} ({type(buffer).__module__}.{type(buffer).__qualname__})",
                f"does not exist, so {REPLAY_POLL_INTERVAL}={interval} cannot be applied; set {REPLAY_POLL_INTERVAL}="
                "null to keep the buffer's own polling",
            ))  # fmt: skip
        setattr(buffer, REPLAY_BUFFER_POLL_ATTR, float(interval))
        return buffer

    def _init_resource_pool_mgr(self) -> None:
        super()._init_resource_pool_mgr()
        use_verl_ext_actor_worker(self.role_worker_mapping)

    _verl_ext_stored_keys: list | None = None
    """The keys of the batch whose verl_ext fields went with verl's advantage put (``None``: none yet)."""

    def _verl_ext_adds_fields(self) -> bool:
        actor_config = self.config.actor_rollout_ref.actor
        return needs_old_entropy(actor_config) or needs_update_fields(actor_config, self.verl_ext_driver)

    def _verl_ext_inputs(self) -> list[str]:
        """The stored fields :meth:`_verl_ext_fields` reads: the selection's inputs, and the old pass's entropy for ERC,
        entropy control or batch-scope ``high_entropy``."""
        actor_config = self.config.actor_rollout_ref.actor
        with_entropy = needs_old_entropy(actor_config) or needs_driver_entropy(actor_config, self.verl_ext_driver)
        return [*SELECTION_INPUTS, *([V1_ENTROPY] if with_entropy else [])]

    def _verl_attribute(self, name: str) -> Any:
        """An attribute verl's V1 trainer sets in its ``__init__``; missing, an error naming it and the verl version."""
        try:
            return getattr(self, name)
        except AttributeError:
            raise AttributeError(upstream_changed(
                f"verl.trainer.ppo.v1.trainer_base.PPOTrainer.{name}",
                "does not exist, which keys Clip-Cov's random draw per actor update (verl_ext.trainer.v1)",
            )) from None  # fmt: skip

    def _verl_ext_fields(self, data: TensorDict, metrics: dict) -> TensorDict:
        """Every field verl_ext adds before the update, jagged as the store holds them, from the batch's jagged
        ``data`` (``advantages``, ``old_log_probs``, ``response_mask``, ``responses``, and ``entropy`` when needed)."""
        actor_config = self.config.actor_rollout_ref.actor
        driver = self.verl_ext_driver
        fields = TensorDict({}, batch_size=data.batch_size)
        if needs_old_entropy(actor_config):
            keep_old_entropy(data, V1_ENTROPY)
            fields[OLD_ENTROPY] = data[OLD_ENTROPY]
        if needs_update_fields(actor_config, driver):
            wanted = [*SELECTION_INPUTS, *([V1_ENTROPY] if needs_driver_entropy(actor_config, driver) else [])]
            padded = data.select(*[k for k in wanted if k in data.keys()]).to_padded_tensor()
            entropy = padded.get(V1_ENTROPY, None)
            if driver.controller is not None and entropy is not None:
                driver.observe_entropy(entropy, padded["response_mask"])
            step = selection_step(self.global_steps, self._verl_attribute("local_trigger_step"),
                                  self._verl_attribute("parameter_sync_step"))  # fmt: skip
            added = update_fields(padded, actor_config, driver, self.global_steps, step, metrics, entropy)
            if added:
                fields.update(nested_fields(added, data["response_mask"], data.batch_size))
        return fields

    def _compute_advantage(self, batch, metrics: dict):
        self._verl_ext_stored_keys = None
        if not self._verl_ext_adds_fields() or self.config.trainer.critic_warmup > self.global_steps:
            return super()._compute_advantage(batch, metrics)  # nothing to add, or no actor update (critic warm-up)
        # the advantages come from verl's put; verl's fetch already has the mask and old log-probs, the proxy adds the rest
        extra = [f for f in self._verl_ext_inputs() if f != "advantages"]

        def fields_for_update(fetched: TensorDict, stored: TensorDict) -> TensorDict:
            start = time.perf_counter()
            view = fetched.clone(recurse=False)  # what the update will read: verl's advantages (and masked tokens)
            view.update(stored.select(*[k for k in ("advantages", "response_mask") if k in stored.keys()]))
            fields = self._verl_ext_fields(view, metrics)
            metrics[ADVANTAGE_FIELDS_TIMER] = time.perf_counter() - start
            return fields

        with with_advantage_store(trainer_base, batch.keys, batch.partition_id, extra, fields_for_update) as store:
            batch = super()._compute_advantage(batch, metrics)
        if store.stored:
            self._verl_ext_stored_keys = list(batch.keys)
        return batch

    def _update_actor(self, batch, metrics: dict):
        if self._verl_ext_adds_fields() and self._verl_ext_stored_keys != list(batch.keys):
            _warn_once(
                "round_trip",
                "verl_ext: this batch's verl_ext fields were not stored with verl's advantage put (the trainer's "
                "_compute_advantage made no TransferQueue fetch and put of the batch through "
                "verl.trainer.ppo.v1.trainer_base.tq); they are fetched and stored by a round trip of their own "
                "before the update (same fields, ~25-35 ms more a step on a CPU box)",
            )
            start = time.perf_counter()
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                   select_fields=self._verl_ext_inputs())  # fmt: skip
            metrics[FETCH_TIMER] = time.perf_counter() - start
            fields = self._verl_ext_fields(data, metrics)
            if len(fields.keys()):
                start = time.perf_counter()
                batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
                metrics[STORE_TIMER] = time.perf_counter() - start
        self._verl_ext_stored_keys = None
        return super()._update_actor(batch, metrics)


_WARNED: set[str] = set()
"""The one-time warnings of this process already logged, by name."""


def _warn_once(name: str, message: str, *args: Any) -> None:
    """``logger.warning(message, *args)`` the first time ``name`` is warned in this process only."""
    if name not in _WARNED:
        _WARNED.add(name)
        logger.warning(message, *args)


@functools.lru_cache(maxsize=None)
def make_v1_trainer(base: type) -> type:
    """``VerlExt<base>``: :class:`VerlExtV1Mixin` over a verl V1 trainer class (cached per class)."""
    if not (isinstance(base, type) and issubclass(base, PPOTrainer)):
        raise TypeError(f"{base!r} is not a verl V1 PPOTrainer subclass")
    if issubclass(base, VerlExtV1Mixin):
        return base
    return type(f"VerlExt{base.__name__}", (VerlExtV1Mixin, base), {"__module__": __name__})


@contextlib.contextmanager
def v1_trainer_registered(mode: str) -> Iterator[type]:
    """While active, verl's ``get_trainer_cls(mode)`` returns verl_ext's subclass of the class registered
    under ``mode``; the registry is restored afterwards. Raises verl's ``ValueError`` for an unknown mode."""
    base = trainer_base.get_trainer_cls(mode)
    registry = trainer_base.TRAINER_REGISTRY
    registry[mode] = make_v1_trainer(base)
    try:
        yield registry[mode]
    finally:
        registry[mode] = base


class VerlExtTaskRunnerV1Impl(TaskRunnerV1.__ray_actor_class__):
    """verl's ``TaskRunnerV1`` (the Ray actor class behind it) running verl_ext's V1 trainer, with verl's file log
    continued on resume (:mod:`verl_ext.driver.run_log`)."""

    def __init__(self) -> None:
        # defined here so that Ray pickles it by reference (see VerlExtTaskRunnerImpl.__init__ in legacy.py)
        super().__init__()

    def run(self, config: Any) -> None:
        ensure_registered()
        with (v1_trainer_registered(config.trainer.v1.trainer_mode), continuing_file_log(config),
              published_progress()):
            super().run(config)


VerlExtTaskRunnerV1 = ray.remote(VerlExtTaskRunnerV1Impl)
"""The Ray actor class ``verl_ext.main_ppo`` passes to verl's ``run_ppo`` for ``trainer.use_v1=true``."""

__all__ = [
    "DynamicSamplingExhausted",
    "VerlExtTaskRunnerV1",
    "VerlExtTaskRunnerV1Impl",
    "VerlExtV1Mixin",
    "generation_budget",
    "make_v1_trainer",
    "v1_trainer_registered",
]
