"""verl_ext's ``verl_ext_cpu`` entry point in verl's ``verl.plugins`` group: CPU mode in every process that
imports verl (driver, TaskRunner, Ray workers), when ``VERL_PLATFORM=cpu`` and no CUDA device is present.

verl imports this module during ``import verl``, before it resolves its platform; importing it is what enables
CPU mode (:func:`verl_ext.cpu.mode.enable_in_process`). It is separate from the ``verl_ext`` entry point (the
losses), so ``VERL_USE_EXTERNAL_PLUGINS=verl_ext_cpu`` runs plain verl on CPUs.
"""

from __future__ import annotations

from verl_ext.cpu import mode

ENABLED: bool = mode.enable_in_process()
"""Whether CPU mode was enabled in this process."""

__all__ = ["ENABLED"]
