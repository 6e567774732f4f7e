"""Run verl's real FSDP2 ``TrainingWorker`` in-process on CPU (gloo, one rank): the actor of the engine tests
and the benchmarks.

:class:`CpuActor` does what verl's ``ActorRolloutRefWorker.init_model`` and the trainer's
``_compute_old_log_prob`` / ``_update_actor`` do for the actor, minus Ray and rollout:

* selects verl_ext's CPU platform (:mod:`verl_ext.cpu.platform`) and starts a one-rank gloo process group;
* builds ``HFModelConfig`` (sdpa attention, remove-padding), an ``FSDPEngineConfig`` (strategy ``fsdp2``, fp32
  master weights, fp32 mixed precision i.e. no autocast - or bf16 compute as on a GPU with ``precision="bf16"`` -,
  no torch.compile, no dynamic batch size) and a ``TrainingWorkerConfig``;
* creates the worker (verl's ``TrainingWorker``, or the class the caller passes - verl_ext's callers pass
  :class:`verl_ext.trainer.actor_worker.EntropyAwareTrainingWorker`), ``reset()``,
  ``set_loss_fn(partial(loss, config=actor_config))`` with the loss the caller passes (verl's ``ppo_loss`` by
  default; verl_ext's callers pass :func:`verl_ext.trainer.actor_loss.ppo_loss`);
* :meth:`CpuActor.compute_log_prob` runs ``infer_batch`` (old log-probs, entropy) and
  :meth:`CpuActor.update` runs ``train_mini_batch`` with the meta info verl's trainer sends.

Batches are padded ``TensorDict`` s in verl's layout (:func:`make_batch`): ``prompts`` (left padded),
``responses`` (right padded), ``input_ids``, ``attention_mask``, ``position_ids``, ``response_mask``, plus
per-response-token fields (``advantages``, ``old_log_probs``, ...). The actor converts them to verl's
no-padding layout itself.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from tensordict import TensorDict

from verl_ext.cpu import platform as cpu_platform


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def init_cpu_process_group() -> None:
    """Set the single-rank env verl's ``Worker`` reads and start a gloo process group (idempotent).

    Existing ``RANK`` / ``WORLD_SIZE`` / ``MASTER_*`` values are kept; a running process group must be a
    one-rank group.
    """
    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
    if torch.distributed.is_initialized():
        if torch.distributed.get_world_size() != 1:
            raise RuntimeError(
                "benchmarks.cpu_actor: a torch.distributed process group with world size "
                f"{torch.distributed.get_world_size()} is running; CpuActor needs a single-rank group"
            )
        return
    if os.environ["WORLD_SIZE"] != "1":
        raise RuntimeError(f"benchmarks.cpu_actor: WORLD_SIZE={os.environ['WORLD_SIZE']}; CpuActor runs one rank")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)


def default_loss_fn() -> Callable[..., Any]:
    """verl's actor loss (``verl.workers.utils.losses.ppo_loss``), the default of :class:`CpuActor`."""
    from verl.workers.utils.losses import ppo_loss

    return ppo_loss


# ----------------------------------------------------------------------------------------------------------
# batches
# ----------------------------------------------------------------------------------------------------------


def make_batch(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    pad_token_id: int = 0,
    response_fields: Mapping[str, torch.Tensor] | None = None,
) -> TensorDict:
    """A padded batch in verl's layout from token-id lists.

    Args:
        prompts: prompt ids per sample (non-empty); left padded to the longest.
        responses: response ids per sample (non-empty); right padded to the longest.
        pad_token_id: padding id.
        response_fields: extra ``(batch, max_response_len)`` tensors (``advantages``, ``old_log_probs``...),
            values at padded positions are ignored by verl.
    """
    if len(prompts) != len(responses) or not prompts:
        raise ValueError(f"make_batch: got {len(prompts)} prompts and {len(responses)} responses")
    if any(len(p) == 0 for p in prompts) or any(len(r) == 0 for r in responses):
        raise ValueError("make_batch: every prompt and every response needs at least one token")
    bsz = len(prompts)
    max_p, max_r = max(map(len, prompts)), max(map(len, responses))
    prompt_ids = torch.full((bsz, max_p), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((bsz, max_p), dtype=torch.long)
    response_ids = torch.full((bsz, max_r), pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((bsz, max_r), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        prompt_ids[i, max_p - len(p) :] = torch.as_tensor(p, dtype=torch.long)
        prompt_mask[i, max_p - len(p) :] = 1
        response_ids[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
        response_mask[i, : len(r)] = 1
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    fields: dict[str, torch.Tensor] = {
        "prompts": prompt_ids,
        "responses": response_ids,
        "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": response_mask,
    }
    for key, value in (response_fields or {}).items():
        if tuple(value.shape) != (bsz, max_r):
            raise ValueError(f"make_batch: response field {key!r} has shape {tuple(value.shape)}, expected {(bsz, max_r)}")
        fields[key] = value
    return TensorDict(fields, batch_size=[bsz])


def random_batch(
    batch_size: int,
    vocab_size: int,
    prompt_len: tuple[int, int] = (3, 8),
    response_len: tuple[int, int] = (4, 12),
    seed: int = 0,
    pad_token_id: int = 0,
    first_token_id: int = 5,
) -> TensorDict:
    """A :func:`make_batch` of random ids in ``[first_token_id, vocab_size)`` with random lengths (inclusive
    ranges) and standard-normal ``advantages``; deterministic for ``seed``."""
    gen = torch.Generator().manual_seed(seed)

    def draw(lo_hi: tuple[int, int]) -> list[int]:
        n = int(torch.randint(lo_hi[0], lo_hi[1] + 1, (1,), generator=gen))
        return torch.randint(first_token_id, vocab_size, (n,), generator=gen).tolist()

    prompts = [draw(prompt_len) for _ in range(batch_size)]
    responses = [draw(response_len) for _ in range(batch_size)]
    max_r = max(map(len, responses))
    advantages = torch.randn((batch_size, max_r), generator=gen)
    return make_batch(prompts, responses, pad_token_id, {"advantages": advantages})


def _no_padding(batch: TensorDict) -> TensorDict:
    from verl.workers.utils.padding import left_right_2_no_padding

    return left_right_2_no_padding(batch.clone())


# ----------------------------------------------------------------------------------------------------------
# the actor
# ----------------------------------------------------------------------------------------------------------


class CpuActor:
    """verl's FSDP2 ``TrainingWorker`` on CPU with an actor loss, driven like verl's trainer drives the actor.

    Args:
        model_path: a local Hugging Face model directory (e.g. :func:`verl_ext.testbed.tiny_model.build_tiny_model`).
        actor_config: a verl ``FSDPActorConfig`` (or verl_ext's subclass); ``strategy`` must be ``fsdp2``. Its
            optimizer, micro-batch sizes, entropy options and loss settings are used.
        loss_fn: the loss bound as ``partial(loss_fn, config=actor_config)``; default verl's ``ppo_loss``.
        worker_cls: the worker class; default verl's ``TrainingWorker`` (verl_ext's callers pass
            :class:`verl_ext.trainer.actor_worker.EntropyAwareTrainingWorker`)
            (verl's ``TrainingWorker`` gives verl's behaviour).
        temperature: sampling temperature the log-probs are computed at.
        enable_gradient_checkpointing: HF gradient checkpointing of the model.
        precision: ``fp32`` (default: fp32 mixed precision, no autocast) or ``bf16`` (verl's GPU default, as CPU
            mode runs it where the CPU has bf16: bf16 parameters and autocast compute, fp32 master weights and
            reduction).
    """

    def __init__(
        self,
        model_path: str,
        actor_config: Any,
        *,
        loss_fn: Callable[..., Any] | None = None,
        worker_cls: type | None = None,
        temperature: float = 1.0,
        enable_gradient_checkpointing: bool = False,
        precision: str = "fp32",
    ):
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"CpuActor: precision={precision!r} is invalid: allowed fp32 or bf16")
        cpu_platform.activate()
        init_cpu_process_group()
        from verl.workers.config import HFModelConfig, TrainingWorkerConfig

        from verl.workers.engine_workers import TrainingWorker

        if getattr(actor_config, "strategy", None) != "fsdp2":
            raise ValueError(
                f"CpuActor: actor_config.strategy={getattr(actor_config, 'strategy', None)!r}; "
                "only 'fsdp2' runs on CPU (FSDP1 needs GPU parameters)"
            )
        if actor_config.use_dynamic_bsz:
            raise ValueError("CpuActor: actor_config.use_dynamic_bsz=True is not supported on CPU; set it to False")
        micro = actor_config.ppo_micro_batch_size_per_gpu
        if micro is None:
            raise ValueError("CpuActor: actor_config.ppo_micro_batch_size_per_gpu must be set")
        infer_micro = actor_config.ppo_infer_micro_batch_size_per_gpu or micro

        self.model_config = HFModelConfig(
            path=model_path,
            override_config={"attn_implementation": "sdpa"},
            enable_gradient_checkpointing=enable_gradient_checkpointing,
            use_remove_padding=True,
        )
        self.engine_config = dataclasses.replace(
            actor_config.engine,
            strategy="fsdp2",
            model_dtype="fp32",
            dtype="float32" if precision == "fp32" else "bfloat16",
            mixed_precision={"param_dtype": precision, "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
            use_torch_compile=False,
            use_dynamic_bsz=False,
            micro_batch_size_per_gpu=micro,
            infer_micro_batch_size_per_gpu=infer_micro,
            forward_only=False,
        )
        self.actor_config = actor_config
        actor_config.model_config = self.model_config  # as verl's ActorRolloutRefWorker.init_model does
        self.temperature = float(temperature)
        worker_config = TrainingWorkerConfig(
            model_type="language_model",
            model_config=self.model_config,
            engine_config=self.engine_config,
            optimizer_config=actor_config.optim,
            checkpoint_config=actor_config.checkpoint,
        )
        self.worker = (worker_cls or TrainingWorker)(config=worker_config)
        self.worker.reset()
        self.loss_fn = partial(loss_fn or default_loss_fn(), config=actor_config)
        self.worker.set_loss_fn(self.loss_fn)

    @property
    def module(self) -> torch.nn.Module:
        """The FSDP2-wrapped model (parameters are DTensors on a one-rank mesh)."""
        return self.worker.engine.module

    def parameters_snapshot(self) -> dict[str, torch.Tensor]:
        """Detached full copies of every parameter (for before/after comparisons)."""
        out = {}
        for name, param in self.module.named_parameters():
            full = param.full_tensor() if hasattr(param, "full_tensor") else param
            out[name] = full.detach().clone()
        return out

    def compute_log_prob(self, batch: TensorDict, calculate_entropy: bool = True) -> TensorDict:
        """Forward-only pass (verl's old-log-prob step): ``(batch, response_len)`` ``log_probs`` and, with
        ``calculate_entropy``, ``entropy``, zero at padded positions."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        data = _no_padding(batch)
        tu.assign_non_tensor(
            data,
            calculate_entropy=calculate_entropy,
            compute_loss=False,
            temperature=self.temperature,
            global_token_num=data["input_ids"].offsets().diff().tolist(),
        )
        output = self.worker.infer_batch(data)
        mask = batch["response_mask"].to(torch.float32)
        result = {"log_probs": no_padding_2_padding(tu.get(output, "log_probs"), data).float() * mask}
        if calculate_entropy:
            result["entropy"] = no_padding_2_padding(tu.get(output, "entropy"), data).float() * mask
        return TensorDict(result, batch_size=batch.batch_size)

    def update(
        self,
        batch: TensorDict,
        *,
        mini_batch_size: int | None = None,
        epochs: int | None = None,
        calculate_entropy: bool | None = None,
        shuffle: bool | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """One actor update (verl's ``update_actor``): ``train_mini_batch`` over ``batch``.

        ``batch`` holds at least ``advantages`` and ``old_log_probs`` (plus whatever the loss reads, e.g. the
        old entropy for ERC). Defaults follow the actor config like verl's trainer: mini-batch
        ``ppo_mini_batch_size`` (capped at the batch size), ``ppo_epochs``, ``shuffle``, ``data_loader_seed``,
        and ``calculate_entropy = actor.calculate_entropy or entropy_coeff != 0``.

        Returns:
            verl's metrics: per key a list (one entry per micro- or mini-batch) or a number.
        """
        from verl.utils import tensordict_utils as tu

        cfg = self.actor_config
        for key in ("advantages", "old_log_probs"):
            if key not in batch.keys():
                raise KeyError(f"CpuActor.update: batch has no {key!r} field")
        if calculate_entropy is None:
            calculate_entropy = bool(cfg.calculate_entropy or cfg.entropy_coeff != 0.0)
        mini = min(mini_batch_size or cfg.ppo_mini_batch_size, batch.batch_size[0])
        data = _no_padding(batch)
        tu.assign_non_tensor(
            data,
            calculate_entropy=calculate_entropy,
            global_batch_size=mini,
            mini_batch_size=mini,
            epochs=cfg.ppo_epochs if epochs is None else epochs,
            seed=cfg.data_loader_seed if seed is None else seed,
            dataloader_kwargs={"shuffle": cfg.shuffle if shuffle is None else shuffle},
            compute_loss=True,
            temperature=self.temperature,
        )
        output = self.worker.train_mini_batch(data)
        return dict(tu.get(output, "metrics"))


def cpu_actor_overrides(model_path: str, micro_batch_size: int = 2) -> list[str]:
    """Hydra overrides of verl's ``ppo_trainer`` config under which verl's own ``ActorRolloutRefWorker``
    (role ``actor``) builds its FSDP2 actor on CPU, given :func:`verl_ext.cpu.platform.activate` and
    :func:`init_cpu_process_group` in the process: the same engine settings :class:`CpuActor` uses."""
    actor, fsdp = "actor_rollout_ref.actor", "actor_rollout_ref.actor.fsdp_config"
    return [
        f"actor_rollout_ref.model.path={model_path}",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.model.use_remove_padding=True",
        f"{actor}.strategy=fsdp2",
        f"{actor}.use_dynamic_bsz=False",
        f"{actor}.ppo_micro_batch_size_per_gpu={micro_batch_size}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro_batch_size}",
        f"{fsdp}.model_dtype=fp32",
        f"{fsdp}.dtype=float32",
        f"{fsdp}.use_torch_compile=False",
        f"+{fsdp}.mixed_precision={{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}}",
    ]


__all__ = [
    "CpuActor",
    "cpu_actor_overrides",
    "default_loss_fn",
    "init_cpu_process_group",
    "make_batch",
    "random_batch",
]
