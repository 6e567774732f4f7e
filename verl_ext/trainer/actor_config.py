"""verl_ext's actor dataclass: verl's ``FSDPActorConfig`` plus the KL-clipping keys (see :mod:`verl_ext.losses.kl_clip`)
and the entropy control's switch and actuator as the actor loss sees them (``entropy_control_enable``,
``entropy_control_actuator``: interpolated from ``verl_ext.entropy_control`` by ``configs/verl_ext_trainer.yaml``, so
that a loss-side actuator's missing batch field is an error in :mod:`verl_ext.trainer.actor_loss`).

Hydra builds it for ``actor_rollout_ref.actor`` because ``configs/verl_ext_trainer.yaml`` sets the node's
``_target_`` to ``verl_ext.trainer.actor_config.FSDPActorConfig``; verl's FSDP / FSDP2 engines take it wherever they
take verl's class. Its ``policy_loss`` defaults to :class:`verl_ext.config.PolicyLossConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.workers.config import FSDPActorConfig as VerlFSDPActorConfig

from verl_ext.config import PolicyLossConfig
from verl_ext.losses.kl_clip import check_kl_clip_params


@dataclass
class FSDPActorConfig(VerlFSDPActorConfig):
    """verl's FSDP actor config plus KL clipping of the actor KL loss (``use_kl_loss=True``)."""

    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    """The policy loss and its hyperparameters (verl's keys plus verl_ext's)."""

    kl_clip_method: str = "none"
    """``none`` (verl's KL loss), ``hard`` (``relu(KL_s - tau_s)`` per sequence) or ``soft``
    (``softplus(KL_s - tau_s)`` per sequence)."""

    kl_clip_threshold: float = 0.0
    """The KL budget ``tau`` (>= 0): per token when ``use_per_token_kl_threshold`` (then ``tau_s`` is it times
    the sequence's valid length), else per sequence."""

    use_per_token_kl_threshold: bool = True
    """``True``: ``kl_clip_threshold`` is a per-token budget, scaled by each sequence's valid length, so long
    and short responses get the same per-token allowance. ``False``: one budget per sequence."""

    entropy_control_enable: bool = False
    """Whether the entropy control is on (``verl_ext.entropy_control.enable``; interpolated, not set by hand)."""

    entropy_control_actuator: str | None = None
    """Entropy control's actuator (``verl_ext.entropy_control.actuator``; interpolated, not set by hand). With
    entropy control on and a loss-side actuator (``entropy_coef``, ``pos_weight``), an update batch without its field
    is an error: the term would otherwise be dropped while the driver logs the value as applied."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_kl_clip_params(self.kl_clip_method, self.kl_clip_threshold, self.use_per_token_kl_threshold)


__all__ = ["FSDPActorConfig"]
