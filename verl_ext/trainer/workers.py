"""Which worker class runs the actor: verl's ``ActorRolloutRefWorker`` (or a subclass verl picked, such as
the separate-async trainer's ``DetachActorWorker``) combined with verl_ext's
:class:`~verl_ext.trainer.actor_worker.VerlExtActorRolloutRefWorker`.

verl_ext's worker installs ``verl_ext.trainer.actor_loss.ppo_loss`` on its actor through verl's ``set_loss_fn``
(replacing verl's ``partial(ppo_loss, config=actor_config)`` with the same bound config, built inside the
worker from its own config) and turns on the graph-free current-policy entropy for ERC losses. Both
trainers call :func:`use_verl_ext_actor_worker` on their role -> worker mapping before the worker
groups are created.
"""

from __future__ import annotations

import functools
from typing import Any

import ray
from verl.trainer.ppo.utils import Role
from verl.workers.engine_workers import ActorRolloutRefWorker

from verl_ext.trainer.actor_worker import VerlExtActorRolloutRefWorker

ACTOR_ROLES = (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef)
"""Roles whose worker trains the actor (and so needs verl_ext's loss and entropy plumbing)."""


@functools.lru_cache(maxsize=None)
def verl_ext_worker_cls(worker_cls: type) -> type:
    """verl_ext's actor worker for ``worker_cls``.

    ``ActorRolloutRefWorker`` -> ``VerlExtActorRolloutRefWorker``; another subclass of it (for example
    verl's ``DetachActorWorker``) -> a class deriving from both, verl_ext's first, so that both sets of
    overrides apply. Raises ``TypeError`` for a worker that is not an ``ActorRolloutRefWorker``.
    """
    if issubclass(worker_cls, VerlExtActorRolloutRefWorker):
        return worker_cls
    if worker_cls is ActorRolloutRefWorker:
        return VerlExtActorRolloutRefWorker
    if issubclass(worker_cls, ActorRolloutRefWorker):
        return type(f"VerlExt{worker_cls.__name__}", (VerlExtActorRolloutRefWorker, worker_cls), {})
    raise TypeError(
        f"verl_ext: the actor role is mapped to {worker_cls.__module__}.{worker_cls.__qualname__}, which is "
        "not a verl ActorRolloutRefWorker; verl_ext's losses need its actor worker (verl_ext.trainer.actor_worker)"
    )


def unwrap_ray_class(cls: Any) -> type:
    """The Python class behind a ``ray.remote`` actor class (or ``cls`` itself)."""
    return getattr(cls, "__ray_actor_class__", cls)


def use_verl_ext_actor_worker(role_worker_mapping: dict) -> list:
    """Map every actor role of ``role_worker_mapping`` to verl_ext's worker, in place; returns the roles."""
    changed = []
    for role in ACTOR_ROLES:
        if role in role_worker_mapping:
            role_worker_mapping[role] = ray.remote(verl_ext_worker_cls(unwrap_ray_class(role_worker_mapping[role])))
            changed.append(role)
    return changed


__all__ = ["ACTOR_ROLES", "unwrap_ray_class", "use_verl_ext_actor_worker", "verl_ext_worker_cls"]
