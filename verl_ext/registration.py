"""Registration of verl_ext's losses in verl, and an explicit check.

``pyproject.toml`` declares ``verl_ext = "verl_ext.registration:register"`` in the ``verl.plugins`` entry-point
group; ``import verl`` loads every such entry point in every process (driver, TaskRunner, Ray workers), which
imports this module and so registers the losses (CPU mode has its own entry point, :mod:`verl_ext.cpu.plugin`). verl swallows plugin import errors at DEBUG level, so
entry points of verl_ext call :func:`ensure_registered`, which fails loudly instead.
"""

from __future__ import annotations

import logging

from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

from verl_ext.losses import LOSSES

logger = logging.getLogger(__name__)
logger.info(
    "verl_ext: policy losses %s registered; clip_cov and kl_cov now resolve to verl_ext's implementations "
    "(batch-scope selection, reproducible, sync-free) instead of verl's built-ins",
    sorted(LOSSES),
)


def register() -> None:
    """(Re-)register verl_ext's losses; idempotent. Importing this module already did it once."""
    POLICY_LOSS_REGISTRY.update(LOSSES)


def ensure_registered() -> None:
    """Raise ``RuntimeError`` unless every verl_ext loss is what verl's registry resolves its name to."""
    wrong = sorted(name for name, fn in LOSSES.items() if POLICY_LOSS_REGISTRY.get(name) is not fn)
    if wrong:
        found = {name: getattr(POLICY_LOSS_REGISTRY.get(name), "__module__", None) for name in wrong}
        raise RuntimeError(
            f"verl_ext losses {wrong} are not registered in verl's POLICY_LOSS_REGISTRY (found {found}). "
            "Install the package (`pip install verl_ext` / `pip install -e .`) so that its `verl.plugins` entry "
            "point loads in every process, do not set VERL_USE_EXTERNAL_PLUGINS=none (or list `verl_ext` in it), "
            "and check that `python -c 'import verl_ext.registration'` imports without error."
        )
