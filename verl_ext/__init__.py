"""verl_ext: entropy-control policy losses for verl 0.9.x.

Importing ``verl_ext`` registers Clip-Cov, KL-Cov, ``grpo_erc`` and ``gppo_erc`` in verl's policy-loss
registry (the ``verl.plugins`` entry point does the same in every process that imports verl).
"""

from __future__ import annotations

__version__ = "0.1.0"

from verl_ext.registration import ensure_registered, register  # noqa: E402  (registers the losses)

__all__ = ["__version__", "ensure_registered", "register"]
