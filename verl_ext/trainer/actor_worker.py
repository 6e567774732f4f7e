"""Current-policy entropy in the actor update forward, without an autograd graph where none is needed.

ERC (``grpo_erc``, ``gppo_erc``) masks tokens by ``H / H_old``, ``entropy_adv`` shapes advantages with ``sg[H]`` and
micro-scope ``high_entropy`` ranks tokens by ``H``, so the update forward must produce the current entropy ``H``; the
entropy control's ``entropy_coef`` actuator (batch field ``entropy_coef``) needs it *with* its graph, whatever
verl's fixed ``entropy_coeff``. verl computes it only when the batch's non-tensor flag ``calculate_entropy`` is set,
which its trainers do only for ``actor.calculate_entropy`` or ``entropy_coeff != 0`` - and then with a graph
through the full-vocabulary softmax, which ERC does not need (the entropy only feeds a mask).

How it works (no verl code is copied or patched):

* :class:`EntropyAwareTrainingWorker` subclasses verl's ``TrainingWorker``. Its ``train_batch`` reads the
  actor config from the installed loss function (``partial(ppo_loss, config=actor_config)``, as verl's
  ``ActorRolloutRefWorker`` installs it) and, for those losses or that field (:func:`entropy_plan`), sets
  ``calculate_entropy=True`` on the batch.
* verl's FSDP (and automodel / torchtitan / veomni) engines compute the entropy through the instance
  attribute ``engine.compute_entropy_from_logits``. The worker wraps it once with :class:`NoGradEntropy`,
  which runs it under ``torch.no_grad()`` while an ERC update with ``entropy_coeff == 0`` is in progress.
  With ``entropy_coeff != 0`` the entropy bonus needs the graph, so nothing changes (the ERC loss then uses
  the entropy detached for its mask).
* :class:`VerlExtActorRolloutRefWorker` is verl's ``ActorRolloutRefWorker`` with
  ``actor_worker_cls = EntropyAwareTrainingWorker`` and verl_ext's ``ppo_loss`` installed in place of
  verl's; a trainer activates everything by mapping its actor role to this class. Everything else is
  decided by the actor config inside the worker process.

Limits: the no-grad path covers engines that route entropy through ``compute_entropy_from_logits`` on the
remove-padding path (verl's default, ``model.use_remove_padding=True``). With ``use_remove_padding=False``
or ``use_fused_kernels=True`` the engine computes the entropy elsewhere: it is still turned on for ERC, but
computed with a graph (a warning says so once). With ``entropy_checkpointing=True`` verl wraps the entropy
in ``torch.utils.checkpoint`` (which rejects a graph-free output), so it is left as verl computes it: only
the logits are kept, and the backward recomputes the entropy. Megatron workers are not covered.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict
from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker
from verl.workers.utils.losses import ppo_loss as verl_ppo_loss

from verl_ext.config import config_value, loss_mode_of
from verl_ext.contract import ENTROPY_COEF
from verl_ext.losses import needs_of
from verl_ext.trainer.bapo_step import decide_step_bounds, needs_step_bounds

logger = logging.getLogger(__name__)

ENGINE_ENTROPY_ATTR = "compute_entropy_from_logits"


@dataclass(frozen=True)
class EntropyPlan:
    """What the update forward must do about the current-policy entropy."""

    calculate: bool
    """Force ``calculate_entropy=True`` in the update forward (ERC losses)."""

    no_grad: bool
    """Compute that entropy under ``torch.no_grad()`` (ERC with ``entropy_coeff == 0``)."""


def needs_current_entropy(actor_config: Any) -> bool:
    """Whether the configured loss reads the update forward's entropy (its spec's ``Needs.current_entropy``: ERC,
    ``entropy_adv``, micro-scope ``high_entropy``)."""
    return needs_of(actor_config).current_entropy


def entropy_plan(actor_config: Any, fields: Any = ()) -> EntropyPlan:
    """The :class:`EntropyPlan` for an actor config (verl ``ActorConfig``, a subclass, or a mapping) and a batch
    with ``fields``: entropy control's ``entropy_coef`` field needs the entropy with its graph."""
    if ENTROPY_COEF in fields:
        return EntropyPlan(calculate=True, no_grad=False)
    if actor_config is None or not needs_current_entropy(actor_config):
        return EntropyPlan(calculate=False, no_grad=False)
    entropy_coeff = float(config_value(actor_config, "entropy_coeff", 0.0) or 0.0)
    return EntropyPlan(calculate=True, no_grad=entropy_coeff == 0.0)


class NoGradEntropy:
    """Wraps an engine's entropy function; runs it without autograd while :attr:`enabled` is true."""

    def __init__(self, fn: Callable[..., torch.Tensor]):
        self.fn = fn
        self.enabled = False
        self.calls_without_grad = 0
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, logits: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.enabled and torch.is_grad_enabled():
            self.calls_without_grad += 1
            with torch.no_grad():
                return self.fn(logits, *args, **kwargs)
        return self.fn(logits, *args, **kwargs)


def install_no_grad_entropy(engine: Any) -> NoGradEntropy | None:
    """Wrap ``engine.compute_entropy_from_logits`` with :class:`NoGradEntropy` (idempotent).

    Returns the wrapper, or ``None`` when the engine has no such attribute (e.g. Megatron engines).
    """
    current = getattr(engine, ENGINE_ENTROPY_ATTR, None)
    if current is None:
        return None
    if isinstance(current, NoGradEntropy):
        return current
    wrapper = NoGradEntropy(current)
    setattr(engine, ENGINE_ENTROPY_ATTR, wrapper)
    return wrapper


def actor_config_of(loss_fn: Any) -> Any:
    """The actor config bound into a loss function ``partial(loss, config=actor_config)``, else ``None``."""
    keywords = getattr(loss_fn, "keywords", None)
    if isinstance(keywords, Mapping):
        return keywords.get("config")
    return None


class EntropyAwareTrainingWorker(TrainingWorker):
    """verl's ``TrainingWorker`` that gives ERC losses the current entropy (no graph when not needed)."""

    _entropy_hook: NoGradEntropy | None = None
    _logged_graph_reason = False

    def entropy_hook(self) -> NoGradEntropy | None:
        """The no-grad wrapper on this worker's engine (installed on first use; ``None`` if impossible)."""
        if self._entropy_hook is None:
            self._entropy_hook = install_no_grad_entropy(self.engine)
        return self._entropy_hook

    def _no_grad_hook(self, data: TensorDict) -> NoGradEntropy | None:
        """The hook to enable for this batch, or ``None`` (logged once) where verl computes the entropy
        outside ``compute_entropy_from_logits`` or cannot take a graph-free entropy."""
        if self.engine_config.get("entropy_checkpointing", False):
            # verl calls the entropy inside torch.utils.checkpoint, which rejects a graph-free output;
            # checkpointing already stores only the logits and recomputes the entropy in backward.
            reason = "entropy_checkpointing=True: verl's checkpointed entropy is kept"
        elif not tu.get(data, "use_remove_padding", self.model_config.get("use_remove_padding", False)):
            reason = "model.use_remove_padding=False computes the entropy outside the hook"
        elif tu.get(data, "use_fused_kernels", self.engine_config.use_fused_kernels):
            reason = "use_fused_kernels=True computes the entropy inside the fused kernel"
        else:
            hook = self.entropy_hook()
            if hook is not None:
                return hook
            reason = f"engine {type(self.engine).__name__} has no `{ENGINE_ENTROPY_ATTR}`"
        if not self._logged_graph_reason:
            self._logged_graph_reason = True
            logger.warning("verl_ext ERC: the update-forward entropy keeps its autograd graph: %s", reason)
        return None

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="train"), blocking=False)
    def train_batch(self, data: TensorDict) -> TensorDict:
        actor_config = actor_config_of(self.loss_fn)
        if not needs_step_bounds(actor_config):
            return self._train_batch(data)
        # BAPO: the step's clip bounds from a no-grad pass over this mini-batch, bound into every micro-batch's loss
        bounds = decide_step_bounds(self, data, actor_config)
        original = self.loss_fn
        self.loss_fn = functools.partial(original, bapo_bounds=bounds)
        try:
            return self._train_batch(data)
        finally:
            self.loss_fn = original

    def _train_batch(self, data: TensorDict) -> TensorDict:
        plan = entropy_plan(actor_config_of(self.loss_fn), data.keys())
        if plan.calculate:
            tu.assign_non_tensor(data, calculate_entropy=True)
        hook = self._no_grad_hook(data) if plan.no_grad else None
        if hook is None:
            return super().train_batch(data)
        hook.enabled = True
        try:
            return super().train_batch(data)
        finally:
            hook.enabled = False


class VerlExtActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's ``ActorRolloutRefWorker`` with verl_ext's actor: an :class:`EntropyAwareTrainingWorker` whose
    loss is ``verl_ext.trainer.actor_loss.ppo_loss`` (the one that hands ERC losses their entropies).

    Map the trainer's actor role (``Role.ActorRollout`` / ``Role.ActorRolloutRef`` / ``Role.Actor``) to
    ``ray.remote(VerlExtActorRolloutRefWorker)``. Outside ERC losses the update forward is verl's; a
    distillation loss is left as verl installs it.
    """

    actor_worker_cls = EntropyAwareTrainingWorker

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        super().init_model()
        loss_fn = getattr(self, "loss_fn", None)
        if self.actor is not None and getattr(loss_fn, "func", None) is verl_ppo_loss:
            from verl_ext.trainer.actor_loss import ppo_loss

            self.loss_fn = functools.partial(ppo_loss, *loss_fn.args, **loss_fn.keywords)
            self.actor.set_loss_fn(self.loss_fn)
            logger.info("verl_ext: actor loss is verl_ext.trainer.actor_loss.ppo_loss (loss_mode=%s)",
                        loss_mode_of(actor_config_of(self.loss_fn)))  # fmt: skip


__all__ = [
    "VerlExtActorRolloutRefWorker",
    "EntropyAwareTrainingWorker",
    "EntropyPlan",
    "NoGradEntropy",
    "actor_config_of",
    "entropy_plan",
    "install_no_grad_entropy",
    "loss_mode_of",
]
