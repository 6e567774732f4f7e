"""Registration of verl_ext's losses in verl, and an explicit check.

``pyproject.toml`` declares ``verl_ext = "verl_ext.registration:register"`` in the ``verl.plugins`` entry-point
group; ``import verl`` loads every such entry point in every process (driver, TaskRunner, Ray workers), which
imports this module and so registers the losses (CPU mode has its own entry point, :mod:`verl_ext.cpu.plugin`).
verl swallows plugin import errors at DEBUG level, so entry points of verl_ext call :func:`ensure_registered`,
which fails loudly instead. The same import puts ``verl_ext.failures``' counter of failed samples on verl's agent
loop logger, so that a run whose samples all fail ends naming the first exception.

``clip_cov`` and ``kl_cov`` are also names of verl's built-in losses: verl_ext replaces them (batch-scope
selection, reproducible, sync-free; a different ``pg_loss`` and ``actor/pg_clipfrac``) in every verl process of
the environment, and says so in one line on the rank-0 training worker. ``VERL_EXT_KEEP_VERL_COV=1`` keeps
verl's built-ins under those names (verl_ext then registers its other losses only). Any other value is an error naming
the variable: ``clip_cov`` / ``kl_cov`` then refuse to run (:func:`register`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, register_policy_loss

from verl_ext import failures
from verl_ext.losses import SPECS

KEEP_VERL_COV_ENV = "VERL_EXT_KEEP_VERL_COV"
"""``1``: keep verl's built-in ``clip_cov`` / ``kl_cov``; unset or ``0``: verl_ext's replace them."""

_announced = False


def keep_verl_cov() -> bool:
    """Whether ``VERL_EXT_KEEP_VERL_COV=1``; any value but unset, ``0`` or ``1`` is a ``ValueError`` naming it."""
    value = os.environ.get(KEEP_VERL_COV_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{KEEP_VERL_COV_ENV}={value!r} is invalid: allowed 0 (verl_ext's clip_cov / kl_cov "
                         "replace verl's) or 1 (keep verl's built-ins)")  # fmt: skip
    return value == "1"


def replacing() -> list[str]:
    """The declared losses that replace a verl built-in of the same name (:attr:`LossSpec.replaces_verl`)."""
    return [name for name, spec in SPECS.items() if spec.replaces_verl]


def registered_losses() -> dict[str, Callable[..., Any]]:
    """The losses verl_ext puts in verl's registry in this environment."""
    keep = keep_verl_cov()
    return {name: spec.loss for name, spec in SPECS.items() if not (keep and spec.replaces_verl)}


def replacement_line() -> str:
    """What the rank-0 training worker prints once: which names are verl_ext's, and how to keep verl's."""
    if keep_verl_cov():
        return (f"verl_ext: {KEEP_VERL_COV_ENV}=1: {' and '.join(replacing())} are verl's built-ins; verl_ext "
                f"registered {', '.join(sorted(registered_losses()))}")  # fmt: skip
    return (f"verl_ext: {' and '.join(replacing())} are verl_ext's (batch-scope selection), replacing verl's built-ins "
            f"of the same names; {KEEP_VERL_COV_ENV}=1 keeps verl's")  # fmt: skip


def rank_zero_worker() -> bool:
    """This process is the rank-0 worker of a verl worker group: verl's ``RayWorkerGroup`` gives each of its actors
    ``WG_BACKEND=ray`` and its ``RANK``. ``RANK`` alone is not enough: a launcher (torchrun, a cluster scheduler) or
    a test may leave ``RANK=0`` in a driver, which every Ray worker and vLLM process then inherits."""
    return os.environ.get("WG_BACKEND") == "ray" and os.environ.get("RANK") == "0"


def refusing_loss(name: str, reason: str) -> Callable[..., Any]:
    """A policy loss registered as ``name`` that raises ``ValueError(reason)`` when called: what the registry holds
    for ``clip_cov`` / ``kl_cov`` while ``VERL_EXT_KEEP_VERL_COV`` is invalid, so that no run trains with verl's
    built-in and verl_ext's keys silently ignored."""

    def loss(*args: Any, **kwargs: Any) -> Any:
        raise ValueError(reason)

    loss.__name__ = loss.__qualname__ = f"refused_{name}"
    return loss


def register() -> None:
    """(Re-)register verl_ext's losses; idempotent. Importing this module already did it once. verl's rank-0
    training worker (:func:`rank_zero_worker`) prints :func:`replacement_line` the first time.

    An invalid ``VERL_EXT_KEEP_VERL_COV`` raises ``ValueError`` naming it, after registering the losses it does not
    concern and, under ``clip_cov`` / ``kl_cov``, losses that raise the same error when called: verl hides a plugin's
    import errors, and under its own entry point (nothing calls :func:`ensure_registered`) its built-ins would
    otherwise run with verl_ext's keys ignored."""
    global _announced
    try:
        losses = registered_losses()
    except ValueError as bad:
        for name, spec in SPECS.items():
            register_policy_loss(name)(refusing_loss(name, str(bad)) if spec.replaces_verl else spec.loss)
        raise
    for name, fn in losses.items():
        register_policy_loss(name)(fn)
    if not _announced and rank_zero_worker():
        _announced = True
        print(replacement_line(), file=sys.stderr, flush=True)


def ensure_registered() -> None:
    """Raise ``RuntimeError`` unless every loss verl_ext registers is what verl's registry resolves its name to."""
    wrong = sorted(name for name, fn in registered_losses().items() if POLICY_LOSS_REGISTRY.get(name) is not fn)
    if wrong:
        found = {name: getattr(POLICY_LOSS_REGISTRY.get(name), "__module__", None) for name in wrong}
        raise RuntimeError(
            f"verl_ext losses {wrong} are not registered in verl's POLICY_LOSS_REGISTRY (found {found}). "
            "Install the package (`pip install verl_ext` / `pip install -e .`) so that its `verl.plugins` entry "
            "point loads in every process, do not set VERL_USE_EXTERNAL_PLUGINS=none (or list `verl_ext` in it), "
            "and check that `python -c 'import verl_ext.registration'` imports without error."
        )


failures.install()  # every process: the samples verl's agent loop fails are counted for the run's last line

try:
    register()
except ValueError:  # a bad VERL_EXT_KEEP_VERL_COV: clip_cov / kl_cov refuse to run (register), and ensure_registered()
    pass  # reports it by name in verl_ext's entry points (verl hides plugin errors)

__all__ = ["KEEP_VERL_COV_ENV", "ensure_registered", "keep_verl_cov", "rank_zero_worker", "refusing_loss", "register",
           "registered_losses", "replacement_line"]  # fmt: skip
