"""Everything that runs inside the loss call (level 1): the policy losses and what they are made of.

| module | contents |
| --- | --- |
| ``clip_cov`` | Clip-Cov (arXiv 2505.22617), registered as ``clip_cov`` (replaces verl's) |
| ``kl_cov`` | KL-Cov (arXiv 2505.22617), registered as ``kl_cov`` (replaces verl's) |
| ``grpo_erc`` | Entropy Ratio Clipping on the DAPO dual-clip loss (arXiv 2512.05591) |
| ``gppo_erc`` | ERC on CE-GPPO's gradient-preserving clip (arXiv 2509.20712) |
| ``high_entropy`` | policy gradient on the high-entropy minority of tokens (arXiv 2506.01939), batch or micro scope |
| ``entropy_adv`` | entropy-based advantage shaping (arXiv 2506.14758) |
| ``entropic`` | EntroPIC's term on high-probability tokens (arXiv 2511.15248), the ``pos_weight`` actuator |
| ``bapo`` | BAPO's adaptive clip bounds (arXiv 2510.18927), decided per optimiser step or per call |
| ``spec`` | a loss's declaration (:class:`~verl_ext.losses.spec.LossSpec`) and the registry ``SPECS`` |
| ``erc`` | the entropy-ratio mask |
| ``common`` | per-token PPO terms, masked statistics |
| ``selection`` | covariance token selection: hash RNG, sync-free top-k, batch scope |
| ``kl_clip`` | KL clipping of the actor's KL loss (hard / soft, per-token thresholds) |

Each loss module declares its loss once (``SPEC = declare(LossSpec(...))``); importing the package imports every
module in it, so ``SPECS`` lists them all, and :mod:`verl_ext.registration` puts their functions in verl's registry.
A new loss is its module, its YAML group (``configs/policy_loss/``) and its row of docs/losses.md's table.
May import: torch, verl's ``core_algos``, ``verl_ext.config`` and ``verl_ext.contract``; never the trainer or the CPU
harness.
"""

from __future__ import annotations

import importlib
import pkgutil

from verl_ext.losses.spec import SPECS, LossSpec, Needs, declare, needs_of, spec_of, token_mean_metrics

for _module in pkgutil.iter_modules(__path__):  # each loss module declares its loss when imported (alphabetical)
    importlib.import_module(f"{__name__}.{_module.name}")


def losses() -> dict[str, object]:
    """Every declared loss's function by name (what :mod:`verl_ext.registration` registers)."""
    return {name: spec.loss for name, spec in SPECS.items()}


__all__ = ["SPECS", "LossSpec", "Needs", "declare", "losses", "needs_of", "spec_of", "token_mean_metrics"]
