"""Entropy control as pure arithmetic (level 1): no torch, no verl, so that losses, analysis and the driver can all
use it.

| module | contents |
| --- | --- |
| ``autopilot`` | the entropy autopilot: its keys (``verl_ext.entropy_control``), the target schedule, the PI law in log space on the selection ratio, its checkpointed state |

May import: ``verl_ext.config`` and ``verl_ext.contract`` only.
"""
