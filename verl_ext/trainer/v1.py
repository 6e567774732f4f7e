"""verl_ext on verl's V1 trainer (``trainer.use_v1=true``, the default; needs the ``TransferQueue`` package).

:class:`VerlExtV1Mixin` overrides five small methods of verl's V1 ``PPOTrainer`` and keeps its loops:

* ``_init_resource_pool_mgr``: the actor role runs verl_ext's worker (:mod:`verl_ext.trainer.workers`).
* ``_compute_old_log_prob``: verl stores the old pass's entropy in the TransferQueue store as field
  ``entropy``; for ERC losses it is also stored as ``old_entropy``, the field the loss reads.
* ``_update_actor``: for ``clip_cov`` / ``kl_cov`` with ``cov_scope=batch`` the covariance selection is
  computed over the whole training batch (with the entropy autopilot's ratio when it is on) and stored as
  field ``cov_selected``; the token lens writes the selected tokens.
* ``_save_checkpoint`` / ``_load_checkpoint``: the autopilot's state goes with verl's checkpoint.

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
from collections.abc import Iterator
from typing import Any

import ray
import transfer_queue as tq
from verl.trainer.main_ppo import TaskRunnerV1
from verl.trainer.ppo.v1 import trainer_base
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from verl_ext.registration import ensure_registered
from verl_ext.trainer.driver import VerlExtDriverMixin
from verl_ext.trainer.hooks import (
    COV_SELECTED,
    OLD_ENTROPY,
    SELECTION_INPUTS,
    V1_ENTROPY,
    cov_selected_nested,
    keep_old_entropy,
    needs_batch_selection,
    needs_old_entropy,
    selection_step,
)
from verl_ext.trainer.workers import use_verl_ext_actor_worker


class VerlExtV1Mixin(VerlExtDriverMixin):
    """Mixed in before a verl V1 trainer class (see :func:`make_v1_trainer`)."""

    def _init_resource_pool_mgr(self) -> None:
        super()._init_resource_pool_mgr()
        use_verl_ext_actor_worker(self.role_worker_mapping)

    def _compute_old_log_prob(self, batch, metrics: dict):
        batch = super()._compute_old_log_prob(batch, metrics)
        if needs_old_entropy(self.config.actor_rollout_ref.actor):
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=[V1_ENTROPY])
            keep_old_entropy(data, V1_ENTROPY)
            batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=data.select(OLD_ENTROPY))
        return batch

    def _update_actor(self, batch, metrics: dict):
        actor_config = self.config.actor_rollout_ref.actor
        if needs_batch_selection(actor_config):
            driver = self.verl_ext_driver
            wanted = [*SELECTION_INPUTS]
            if driver.controller is not None:
                wanted.append(V1_ENTROPY)
            if driver.lens is not None:
                wanted.append("responses")
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=wanted)
            if driver.controller is not None:
                padded = data.select(V1_ENTROPY, "response_mask").to_padded_tensor()
                driver.observe_entropy(padded[V1_ENTROPY], padded["response_mask"])
            ratio = driver.selection_ratio(self.global_steps, metrics)
            step = selection_step(
                self.global_steps, getattr(self, "local_trigger_step", 0), getattr(self, "parameter_sync_step", 1)
            )
            fields, padded = cov_selected_nested(data, actor_config, step, metrics, ratio)
            driver.write_lens(self.global_steps, padded, padded[COV_SELECTED])
            batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
        return super()._update_actor(batch, metrics)


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
    """verl's ``TaskRunnerV1`` (the Ray actor class behind it) running verl_ext's V1 trainer."""

    def __init__(self) -> None:
        # defined here so that Ray pickles it by reference (see VerlExtTaskRunnerImpl.__init__ in legacy.py)
        super().__init__()

    def run(self, config: Any) -> None:
        ensure_registered()
        with v1_trainer_registered(config.trainer.v1.trainer_mode):
            super().run(config)


VerlExtTaskRunnerV1 = ray.remote(VerlExtTaskRunnerV1Impl)
"""The Ray actor class ``verl_ext.main_ppo`` passes to verl's ``run_ppo`` for ``trainer.use_v1=true``."""

__all__ = [
    "VerlExtTaskRunnerV1",
    "VerlExtTaskRunnerV1Impl",
    "VerlExtV1Mixin",
    "make_v1_trainer",
    "v1_trainer_registered",
]
