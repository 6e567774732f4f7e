"""One demo run: GRPO on :class:`~verl_ext.demo.task.RepeatDigitTask` with one policy loss, on CPU.

Per training step, as verl's trainer does on a GPU cluster, with verl's own pieces where verl has them:

1. **rollout** - ``prompts_per_step`` prompts x ``samples_per_prompt`` responses sampled with Hugging Face
   ``generate`` from a plain copy of the policy (verl has no CPU rollout engine; on GPUs this is vLLM);
2. **reward** - the task's verifier; the score goes on the last response token;
3. **old-log-prob pass** - verl's FSDP2 ``TrainingWorker.infer_batch`` (:class:`verl_ext.cpu.engine.CpuActor`),
   which also returns the entropy (logged as ``actor/entropy`` and, for ERC, kept as ``old_entropy``);
4. **advantage** - verl's ``compute_grpo_outcome_advantage``;
5. **selection** - batch-scope Clip-Cov / KL-Cov selection, by the same hook verl_ext's trainers use;
6. **update** - verl's ``TrainingWorker.train_mini_batch`` through ``verl_ext.trainer.actor_loss.ppo_loss``
   (several mini-batches per step, so later mini-batches are off-policy as in the papers' runs);
7. **weight sync** - the updated FSDP parameters are copied into the rollout copy.

Everything is seeded: the model from ``seed``, the prompts from a ``torch.Generator`` and the sampling
from ``torch.manual_seed(seed, step)`` right before ``generate``; the same arguments give the same curves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from verl_ext.demo.task import RepeatDigitTask

DEMO_LOSS_SETTINGS: dict[str, dict[str, Any]] = {
    "vanilla": {},
    # The papers' token ratios (2e-4 / 2e-3) are for batches of ~10^6 tokens; a demo step has ~10^3, so
    # the ratios are scaled up to select a handful of tokens per step (documented in docs/demo.md).
    "clip_cov": {"clip_cov_ratio": 0.02, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0},
    "kl_cov": {"kl_cov_ratio": 0.02, "ppo_kl_coef": 1.0},
    # ERC: the paper's band and dual-clip constant
    "grpo_erc": {"entropy_mask_low": 0.95, "entropy_mask_high": 1.05},
    "gppo_erc": {"entropy_mask_low": 0.95, "entropy_mask_high": 1.05, "gppo_beta1": 0.75, "gppo_beta2": 1.0},
}
"""Policy-loss settings of each demo run (keys of ``actor_rollout_ref.actor.policy_loss``)."""

AUTOPILOT_RUN = "autopilot"
"""The demo run of ``clip_cov`` whose selection ratio the entropy autopilot sets (``--entropy-target``)."""

AUTOPILOT_BOUNDS = (1e-3, 0.5)
"""The ratio range the demo's autopilot may use."""


@dataclass(frozen=True)
class DemoConfig:
    """Sizes and optimisation settings shared by every run of a demo."""

    steps: int = 60
    """Training steps per loss."""
    seed: int = 0
    """Seed of the model initialisation, the prompts and the sampling."""
    prompts_per_step: int = 16
    """Prompts per step (``data.train_batch_size``)."""
    samples_per_prompt: int = 8
    """Responses per prompt (``rollout.n``), the GRPO group size."""
    response_length: int = 8
    """Response tokens sampled and scored."""
    mini_batch_size: int = 32
    """Responses per optimizer step (``ppo_mini_batch_size`` x n): 4 optimizer steps per training step."""
    lr: float = 5e-3
    """Adam learning rate."""
    hidden: int = 64
    """Hidden size of the tiny Qwen2."""
    layers: int = 2
    """Decoder layers of the tiny Qwen2."""
    loss_settings: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(DEMO_LOSS_SETTINGS))
    """Policy-loss settings per loss name."""
    entropy_target: float | None = None
    """Target entropy (nats per token) of the ``autopilot`` run; ``None``: no such run."""

    def __post_init__(self) -> None:
        for name in ("steps", "prompts_per_step", "samples_per_prompt", "response_length", "mini_batch_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"demo: {name}={getattr(self, name)!r} is invalid: allowed an integer >= 1")
        if self.samples_per_prompt < 2:
            raise ValueError(f"demo: samples_per_prompt={self.samples_per_prompt} is invalid: GRPO needs >= 2")
        batch = self.prompts_per_step * self.samples_per_prompt
        if batch % self.mini_batch_size:
            raise ValueError(f"demo: mini_batch_size={self.mini_batch_size} must divide the batch of {batch} responses")
        if self.seed < 0:
            raise ValueError(f"demo: seed={self.seed} is invalid: allowed an integer >= 0")
        if self.entropy_target is not None and not self.entropy_target > 0:
            raise ValueError(f"demo: entropy_target={self.entropy_target!r} is invalid: allowed a number > 0")


def actor_config(loss_mode: str, cfg: DemoConfig) -> Any:
    """verl_ext's ``FSDPActorConfig`` for one demo run (fsdp2, token-mean, DAPO-style clip-higher)."""
    from verl.workers.config import FSDPOptimizerConfig

    from verl_ext.trainer.actor_config import FSDPActorConfig
    from verl_ext.config import PolicyLossConfig

    if loss_mode not in cfg.loss_settings:
        raise ValueError(f"demo: unknown loss {loss_mode!r}; allowed: {sorted(cfg.loss_settings)}")
    return FSDPActorConfig(
        strategy="fsdp2",
        rollout_n=cfg.samples_per_prompt,
        ppo_mini_batch_size=cfg.mini_batch_size,
        ppo_micro_batch_size_per_gpu=cfg.mini_batch_size,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_c=10.0,
        loss_agg_mode="token-mean",
        optim=FSDPOptimizerConfig(lr=cfg.lr, weight_decay=0.0, lr_warmup_steps=0),
        policy_loss=PolicyLossConfig(loss_mode=loss_mode, **cfg.loss_settings[loss_mode]),
    )


class Sampler:
    """Hugging Face ``generate`` on a plain copy of the policy (the demo's rollout engine)."""

    def __init__(self, model_path: str, tokenizer: Any):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.tokenizer = tokenizer

    def load(self, parameters: dict[str, torch.Tensor]) -> None:
        """Copy the actor's parameters in (the weight sync verl does from FSDP to vLLM)."""
        own = dict(self.model.named_parameters())
        if set(own) != set(parameters):
            raise RuntimeError(f"demo: parameter names differ: {sorted(set(own) ^ set(parameters))[:5]}")
        with torch.no_grad():
            for name, value in parameters.items():
                own[name].copy_(value)

    @torch.no_grad()
    def sample(self, prompts: list[list[int]], length: int, seed: int) -> list[list[int]]:
        """One response per prompt, temperature 1, no top-k/top-p; cut after EOS (kept), at least 1 token."""
        tok = self.tokenizer
        width = max(map(len, prompts))
        ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        torch.manual_seed(seed)
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
            max_new_tokens=length, min_new_tokens=1, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        )  # fmt: skip
        responses = []
        for row in out[:, width:].tolist():
            cut = row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else len(row)
            responses.append(row[:cut])
        return responses


def grpo_advantages(scores: torch.Tensor, response_mask: torch.Tensor, groups: np.ndarray) -> torch.Tensor:
    """verl's GRPO outcome advantage: the score on the last valid token, normalised within each group."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    token_rewards = torch.zeros_like(response_mask, dtype=torch.float32)
    last = response_mask.sum(dim=1) - 1
    token_rewards[torch.arange(len(scores)), last] = scores
    advantages, _ = compute_grpo_outcome_advantage(token_rewards, response_mask.float(), groups)
    return advantages


def autopilot(cfg: DemoConfig) -> Any:
    """The entropy autopilot of the ``autopilot`` run: ``clip_cov`` from its demo ratio, target
    ``cfg.entropy_target``, ratio in :data:`AUTOPILOT_BOUNDS`, the default gains."""
    from verl_ext.trainer.entropy_control import EntropyControlConfig, EntropyController

    if cfg.entropy_target is None:
        raise ValueError(f"demo: the {AUTOPILOT_RUN!r} run needs an entropy target (--entropy-target)")
    low, high = AUTOPILOT_BOUNDS
    control = EntropyControlConfig(enable=True, target=cfg.entropy_target, ratio_min=low, ratio_max=high)
    return EntropyController(control, cfg.loss_settings["clip_cov"]["clip_cov_ratio"], total_steps=cfg.steps)


def run_loss(
    name: str,
    model_path: str,
    cfg: DemoConfig,
    log: Callable[[dict[str, float], int], None],
    on_step: Callable[[], None] | None = None,
) -> None:
    """Train one policy from ``model_path`` with the loss ``name`` (or ``autopilot``: ``clip_cov`` with the entropy
    autopilot) for ``cfg.steps`` steps; ``log(metrics, step)`` receives every step's metrics (verl's names)."""
    from transformers import AutoTokenizer
    from verl.trainer.ppo.core_algos import agg_loss
    from verl.utils.metric import reduce_metrics

    from verl_ext.cpu.engine import CpuActor, make_batch
    from verl_ext.trainer.actor_loss import ppo_loss
    from verl_ext.trainer.actor_worker import EntropyAwareTrainingWorker
    from verl_ext.trainer.hooks import (
        OLD_ENTROPY,
        add_cov_selected,
        needs_batch_selection,
        needs_old_entropy,
        selection_step,
    )

    controller = autopilot(cfg) if name == AUTOPILOT_RUN else None
    loss_mode = "clip_cov" if controller is not None else name
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    config = actor_config(loss_mode, cfg)
    actor = CpuActor(model_path, config, loss_fn=ppo_loss, worker_cls=EntropyAwareTrainingWorker)
    sampler = Sampler(model_path, tokenizer)
    task = RepeatDigitTask(response_length=cfg.response_length)
    prompt_gen = torch.Generator().manual_seed(cfg.seed)
    n = cfg.samples_per_prompt

    for step in range(1, cfg.steps + 1):
        start = time.perf_counter()
        pairs = task.prompts(cfg.prompts_per_step, prompt_gen)
        prompt_ids = [tokenizer(text)["input_ids"] for text, _ in pairs for _ in range(n)]
        digit_ids = torch.tensor([tokenizer.convert_tokens_to_ids(d) for _, d in pairs for _ in range(n)])
        responses = sampler.sample(prompt_ids, cfg.response_length, seed=cfg.seed * 1_000_003 + step)
        batch = make_batch(prompt_ids, responses, tokenizer.pad_token_id)
        mask = batch["response_mask"]
        scores = task.rewards(batch["responses"], mask, digit_ids)
        groups = np.repeat(np.arange(cfg.prompts_per_step), n)
        batch["advantages"] = grpo_advantages(scores, mask, groups)

        old = actor.compute_log_prob(batch, calculate_entropy=True)
        batch["old_log_probs"] = old["log_probs"]
        metrics: dict[str, float] = {
            "actor/entropy": float(agg_loss(old["entropy"], mask.bool(), "token-mean")),
            "critic/score/mean": float(scores.mean()),
            "critic/score/max": float(scores.max()),
            "critic/score/min": float(scores.min()),
            "response_length/mean": float(mask.sum(dim=1).float().mean()),
        }
        if needs_old_entropy(config):
            batch[OLD_ENTROPY] = old["entropy"]
        if needs_batch_selection(config):
            ratio = None
            if controller is not None:  # this batch's entropy sets this step's ratio, as in verl_ext's trainers
                ratio, control_metrics = controller.update(step, metrics["actor/entropy"])
                metrics.update(control_metrics)
            add_cov_selected(batch, config, selection_step(step), metrics, ratio)
        update = actor.update(batch)
        metrics.update({k if k.startswith("actor/") else f"actor/{k}": float(v) for k, v in reduce_metrics(update).items()})
        sampler.load(actor.parameters_snapshot())
        metrics["timing_s/step"] = time.perf_counter() - start
        log(metrics, step)
        if on_step is not None:
            on_step()


__all__ = ["AUTOPILOT_RUN", "DEMO_LOSS_SETTINGS", "DemoConfig", "Sampler", "actor_config", "autopilot",
           "grpo_advantages", "run_loss"]
