"""Driver-side state of a verl_ext trainer: the entropy control and the token lens, and their checkpoint file.

One :class:`VerlExtDriver` per trainer (both the V1 and the legacy trainer hold one). Each step:

1. after the old-log-prob pass, :meth:`observe_entropy` records the batch's mean per-token entropy;
2. before the update, :meth:`control_value` returns entropy control's actuator value for the step (``None`` without
   entropy control) and adds ``entropy_control/*`` to the metrics;
3. after it, :meth:`write_lens` writes the selected tokens when the lens is due.

:meth:`save` / :meth:`load` keep entropy control's state in ``global_step_<N>/verl_ext_driver.json`` next to
verl's own checkpoint, so that a resumed run continues with the same ratio and integral. The file is written
atomically (a temporary file in the same folder, then ``os.replace``): a crash mid-write leaves the old file or none,
never a truncated one.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

import torch
from omegaconf import OmegaConf

from verl_ext.config import clip_ratios, config_value, policy_loss_params
from verl_ext.losses import spec_of
from verl_ext.losses.common import masked_mean
from verl_ext.losses.selection import token_covariance
from verl_ext.driver.checkpoints import absolute_folder, checkpoint_folder, resume_folder, resumed_step
from verl_ext.control.entropy_control import EntropyControlConfig, EntropyController
from verl_ext.driver.token_lens import TokenLens, TokenLensConfig, lens_path

logger = logging.getLogger(__name__)

STATE_FILE = "verl_ext_driver.json"


def vocabulary_size(config: Any, tokenizer: Any = None) -> int | None:
    """The policy's output vocabulary as the driver can know it: the larger of the model folder's ``config.json``
    ``vocab_size`` (the logits' width, padding rows included; read when ``actor_rollout_ref.model.path`` is a local
    folder) and the tokenizer's length; ``None`` when neither is known (a hub id and no tokenizer)."""
    sizes = []
    model_path = config_value(config_value(config.actor_rollout_ref, "model"), "path")
    try:
        sizes.append(int(json.loads((Path(str(model_path)) / "config.json").read_text())["vocab_size"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not a local folder with a config.json: the tokenizer's length, if any, is the bound
    if tokenizer is not None:
        sizes.append(len(tokenizer))
    return max(sizes) if sizes and max(sizes) >= 2 else None


def prune_driver_states(config: Any, current_step: int) -> list[Path]:
    """Delete verl_ext's state files of earlier steps whose ``global_step_<N>/actor`` checkpoint verl has deleted
    (``trainer.max_actor_ckpt_to_keep``), so that verl_ext keeps exactly the steps verl keeps; returns them."""
    removed = []
    current = checkpoint_folder(config, current_step)
    for path in sorted(absolute_folder(config.trainer.default_local_dir).glob(f"global_step_*/{STATE_FILE}")):
        if path.parent != current and not (path.parent / "actor").exists():
            path.unlink()
            removed.append(path)
    return removed


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, flushed to disk and then renamed over
    ``path`` (``os.replace``, atomic on one file system)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class VerlExtDriver:
    """Entropy control (:class:`~verl_ext.control.entropy_control.EntropyController`) and the lens
    (:class:`~verl_ext.driver.token_lens.TokenLens`) of one trainer, each present only when enabled."""

    def __init__(self, config: Any, tokenizer: Any = None):
        self.config = config
        actor = config.actor_rollout_ref.actor
        control = EntropyControlConfig.from_mapping(_node(config, "verl_ext.entropy_control"))
        self.controller: EntropyController | None = None
        if control.enable:
            configured = None
            spec = spec_of(actor)
            if control.actuator == "cov_ratio" and spec is not None and spec.selection_ratio is not None:
                (configured,) = policy_loss_params(actor, spec.selection_ratio)
            total = config_value(config.trainer, "total_training_steps")
            clip_high = clip_ratios(actor)[1] if control.actuator == "clip_high" else None  # its rest value
            self.controller = EntropyController(control, configured, total_steps=total, clip_high=clip_high,
                                                vocab_size=vocabulary_size(config, tokenizer))
        lens = TokenLensConfig.from_mapping(_node(config, "verl_ext.token_lens"))
        self.lens: TokenLens | None = None
        if lens.enable:
            loggers = config_value(config.trainer, "logger", []) or []
            loggers = [loggers] if isinstance(loggers, str) else list(loggers)
            path = lens_path(lens, config.trainer.project_name, config.trainer.experiment_name)
            self.lens = TokenLens(lens, path, tokenizer, use_wandb="wandb" in loggers, resume_step=resumed_step(config))
        self.entropy: float | None = None

    def observe_entropy(self, entropy: torch.Tensor, response_mask: torch.Tensor) -> None:
        """The old-log-prob pass's per-token entropy of this step's batch (padded tensors)."""
        self.entropy = float(masked_mean(entropy.detach().to(torch.float64), response_mask.bool()))  # per token

    def optimiser_steps(self, batch_responses: int) -> int:
        """The optimiser mini-batches of a step whose training batch holds ``batch_responses`` responses, as verl's
        trainers split it: ``ppo_epochs x batch_responses // (ppo_mini_batch_size x rollout.n)`` (at least 1)."""
        actor = self.config.actor_rollout_ref.actor
        mini = int(actor.ppo_mini_batch_size) * int(self.config.actor_rollout_ref.rollout.n)
        epochs = int(config_value(actor, "ppo_epochs", 1) or 1)
        return epochs * max(1, int(batch_responses) // max(1, mini))

    def control_value(self, global_step: int, metrics: dict, mini_batches: int = 1) -> float | None:
        """Entropy control's actuator value for ``global_step`` (``None`` without entropy control); adds its metrics.
        ``mini_batches``: the step's optimiser mini-batches (:meth:`optimiser_steps`; EntroPIC's integral cadence)."""
        if self.controller is None:
            return None
        if self.entropy is None:
            raise RuntimeError("verl_ext entropy control: no entropy observed for this step's batch (the "
                               "old-log-prob pass must run; rollout_correction.bypass_mode skips it)")  # fmt: skip
        value, control_metrics = self.controller.update(global_step, self.entropy, mini_batches)
        metrics.update(control_metrics)
        self.entropy = None
        return value

    def actuator_limited(self, limited: bool, metrics: dict, applied: float | None = None) -> None:
        """The step's selection took fewer tokens than entropy control's ratio asked (``cov_ratio``; see
        :meth:`~verl_ext.control.entropy_control.EntropyController.actuator_limited`), and the fraction it took
        (``applied``); a no-op without entropy control."""
        if self.controller is not None:
            self.controller.actuator_limited(limited, metrics, applied)

    def write_lens(self, global_step: int, batch: Mapping[str, torch.Tensor], selected: torch.Tensor) -> int:
        """Write the selected tokens of a padded batch (``responses``, ``advantages``, ``old_log_probs``,
        ``response_mask``) when the lens is due at ``global_step``; returns how many were written."""
        if self.lens is None or not self.lens.due(global_step):
            return 0
        if "responses" not in batch.keys():
            raise KeyError("verl_ext token lens: the batch has no 'responses' field to decode")
        cov = token_covariance(batch["advantages"], batch["old_log_probs"], batch["response_mask"].bool())
        return self.lens.write(global_step, responses=batch["responses"], selected=selected, covariance=cov,
                               advantages=batch["advantages"], old_log_probs=batch["old_log_probs"])  # fmt: skip

    def save(self, global_steps: int) -> Path | None:
        """Write entropy control's state next to verl's checkpoint of ``global_steps``."""
        if self.controller is None:
            return None
        path = checkpoint_folder(self.config, global_steps) / STATE_FILE
        write_atomically(path, json.dumps({"entropy_control": self.controller.state_dict()}))
        prune_driver_states(self.config, global_steps)
        return path

    def load(self, global_steps: int) -> bool:
        """Restore entropy control's state saved at ``global_steps`` (0: a fresh run, nothing to load). A missing state
        file is a ``FileNotFoundError`` naming it, unless ``verl_ext.entropy_control.fresh_on_resume=true`` (then the
        controller starts from its initial state, with a warning; returns ``False``)."""
        if self.controller is None or global_steps <= 0:
            return False
        path = resume_folder(self.config, global_steps) / STATE_FILE
        if not path.exists():
            if self.controller.config.fresh_on_resume:
                logger.warning("verl_ext entropy control: %s not found; verl_ext.entropy_control.fresh_on_resume="
                               "true: the controller starts from its initial state", path)  # fmt: skip
                return False
            raise FileNotFoundError(
                f"verl_ext entropy control: resuming from step {global_steps}, but its state file {path} does not "
                "exist (a checkpoint saved without entropy control, or the file was removed). Resume from a checkpoint "
                "that has it, or set verl_ext.entropy_control.fresh_on_resume=true to start the controller from its "
                "initial state (integral 0, the actuator's init)"
            )
        self.controller.load_state_dict(json.loads(path.read_text())["entropy_control"])
        return True


class VerlExtDriverMixin:
    """For a verl trainer class (V1 or legacy): its :class:`VerlExtDriver`, and the driver's state saved and loaded
    with verl's checkpoints."""

    @functools.cached_property
    def verl_ext_driver(self) -> VerlExtDriver:
        return VerlExtDriver(self.config, getattr(self, "tokenizer", None))  # type: ignore[attr-defined]

    def _save_checkpoint(self):
        super()._save_checkpoint()  # type: ignore[misc]
        self.verl_ext_driver.save(self.global_steps)  # type: ignore[attr-defined]

    def _load_checkpoint(self):
        result = super()._load_checkpoint()  # type: ignore[misc]
        self.verl_ext_driver.load(self.global_steps)  # type: ignore[attr-defined]
        return result


def _node(config: Any, key: str) -> Any:
    node = OmegaConf.select(config, key, default=None) if OmegaConf.is_config(config) else None
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else (node or {})


__all__ = [
    "STATE_FILE",
    "VerlExtDriver",
    "VerlExtDriverMixin",
    "checkpoint_folder",
    "prune_driver_states",
    "resume_folder",
    "write_atomically",
]
