"""verl_ext: entropy-control policy losses for verl 0.9.x, and verl's trainer on CPUs.

verl loads verl_ext through two ``verl.plugins`` entry points in every process that imports verl: ``verl_ext``
(:mod:`verl_ext.registration`: Clip-Cov, KL-Cov, ``grpo_erc``, ``gppo_erc`` in verl's policy-loss registry)
and ``verl_ext_cpu`` (:mod:`verl_ext.cpu.plugin`: CPU mode when ``VERL_PLATFORM=cpu``). Importing this package
itself imports nothing of verl; :func:`ensure_registered` / :func:`register` load the registration on use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "ensure_registered", "register"]


def __getattr__(name: str) -> Any:
    if name in ("ensure_registered", "register"):
        from verl_ext import registration

        return getattr(registration, name)
    raise AttributeError(f"module 'verl_ext' has no attribute {name!r}")
