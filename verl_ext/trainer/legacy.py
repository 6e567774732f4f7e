"""verl_ext on verl's legacy trainer (``trainer.use_v1=false``): ``RayPPOTrainer`` and its ``TaskRunner``.

:class:`VerlExtRayPPOTrainer` overrides two small methods of verl's ``RayPPOTrainer`` and keeps its
``fit()`` loop untouched:

* ``_compute_old_log_prob``: the old-log-prob pass already returns the entropy as ``entropys`` (which
  ``fit()`` pops after logging it); for ERC losses (which read it) and batch-scope ``high_entropy`` (whose driver-side
  selection ranks by it) it is also kept as batch field ``old_entropy``.
* ``_update_actor``: the fields verl_ext adds before the update (:func:`~verl_ext.trainer.hooks.update_fields`:
  ``cov_selected``, ``high_entropy_weight``, entropy control's ``entropy_coef`` / ``pos_weight``) are computed over
  the whole training batch and sent with it.

* ``_save_checkpoint`` / ``_load_checkpoint``: the entropy control's state goes with verl's checkpoint.

:class:`VerlExtTaskRunner` is verl's legacy ``TaskRunner`` with verl_ext's actor worker and trainer, and verl's file
log continued on resume (:mod:`verl_ext.driver.run_log`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import ray
from verl.trainer import main_ppo_v0
from verl.trainer.main_ppo_v0 import TaskRunner
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from verl_ext.registration import ensure_registered
from verl_ext.driver.mixin import VerlExtDriverMixin
from verl_ext.trainer.hooks import (
    LEGACY_ENTROPY,
    OLD_ENTROPY,
    keep_old_entropy,
    needs_entropy_selection,
    needs_old_entropy,
    needs_update_fields,
    selection_step,
    update_fields,
)
from verl_ext.driver.progress import published_progress
from verl_ext.driver.run_log import continuing_file_log
from verl_ext.trainer.workers import unwrap_ray_class, use_verl_ext_actor_worker


class VerlExtRayPPOTrainer(VerlExtDriverMixin, RayPPOTrainer):
    """verl's legacy ``RayPPOTrainer`` that sends ``old_entropy`` / ``cov_selected`` to the actor loss, and
    runs the entropy control and the token lens (:class:`~verl_ext.driver.mixin.VerlExtDriver`)."""

    def _compute_old_log_prob(self, batch):
        old_log_prob, mfu = super()._compute_old_log_prob(batch)
        actor_config = self.config.actor_rollout_ref.actor
        if needs_old_entropy(actor_config) or needs_entropy_selection(actor_config):
            keep_old_entropy(old_log_prob.batch, LEGACY_ENTROPY)
        if self.verl_ext_driver.controller is not None:
            self.verl_ext_driver.observe_entropy(old_log_prob.batch[LEGACY_ENTROPY], batch.batch["response_mask"])
        return old_log_prob, mfu

    def _update_actor(self, batch):
        actor_config = self.config.actor_rollout_ref.actor
        extra_metrics: dict[str, float] = {}
        driver = self.verl_ext_driver
        if needs_update_fields(actor_config, driver):
            # a shallow copy: the step's own batch (logged and dumped by fit()) is left as it was
            batch = dataclasses.replace(batch, batch=batch.batch.copy())
            entropy = batch.batch[OLD_ENTROPY] if OLD_ENTROPY in batch.batch.keys() else None
            fields = update_fields(batch.batch, actor_config, driver, self.global_steps,
                                   selection_step(self.global_steps), extra_metrics, entropy)  # fmt: skip
            for name, tensor in fields.items():
                batch.batch[name] = tensor
            if entropy is not None and not needs_old_entropy(actor_config):
                batch.batch.pop(OLD_ENTROPY)  # read here only: the workers need not receive it
        output = super()._update_actor(batch)
        output.meta_info["metrics"].update(extra_metrics)
        return output


@contextlib.contextmanager
def legacy_trainer_class(cls: type = VerlExtRayPPOTrainer) -> Iterator[None]:
    """Make verl's legacy ``TaskRunner.run`` build ``cls`` instead of ``RayPPOTrainer`` while active.

    Why not a subclass hook: ``verl.trainer.main_ppo_v0.TaskRunner.run`` (about 90 lines: datasets,
    tokenizer, resource pools, then ``RayPPOTrainer(...)``, ``init_workers()``, ``fit()``) names the
    trainer class directly and offers no parameter for it. Rather than copy that method, the module
    global it reads is pointed at verl_ext's subclass for the duration of the call, inside the TaskRunner
    actor (a process of its own), and restored afterwards.
    """
    if not issubclass(cls, RayPPOTrainer):
        raise TypeError(f"{cls!r} is not a subclass of verl's RayPPOTrainer")
    previous = main_ppo_v0.RayPPOTrainer
    main_ppo_v0.RayPPOTrainer = cls
    try:
        yield
    finally:
        main_ppo_v0.RayPPOTrainer = previous


class VerlExtTaskRunnerImpl(TaskRunner.__ray_actor_class__):
    """verl's legacy ``TaskRunner`` (the Ray actor class behind it) with verl_ext's worker and trainer."""

    def __init__(self) -> None:
        # Must be defined here, not inherited: Ray wraps every method of an actor class, inherited ones
        # included (ray/util/tracing/tracing_helper.py, _inject_tracing_into_class), on a subclass that it
        # pickles by value. verl's TaskRunner.__init__ is not reachable by name (the module attribute
        # `TaskRunner` is the ray.remote wrapper), so cloudpickle copies it by value with its __class__
        # cell - a copy of TaskRunner - and its `super().__init__()` fails in the actor process with
        # "TypeError: super(type, obj): obj must be an instance or subtype of type". This __init__ pickles
        # by reference, and its super() call reaches verl's original.
        super().__init__()

    def add_actor_rollout_worker(self, config: Any):
        _, ray_worker_group_cls = super().add_actor_rollout_worker(config)
        roles = use_verl_ext_actor_worker(self.role_worker_mapping)
        return unwrap_ray_class(self.role_worker_mapping[roles[0]]), ray_worker_group_cls

    def run(self, config: Any) -> None:
        ensure_registered()
        with (legacy_trainer_class(VerlExtRayPPOTrainer), continuing_file_log(config),
              published_progress()):
            super().run(config)


VerlExtTaskRunner = ray.remote(VerlExtTaskRunnerImpl)
"""The Ray actor class ``verl_ext.main_ppo`` passes to verl's ``run_ppo`` for ``trainer.use_v1=false``."""

__all__ = ["VerlExtRayPPOTrainer", "VerlExtTaskRunner", "VerlExtTaskRunnerImpl", "legacy_trainer_class"]
