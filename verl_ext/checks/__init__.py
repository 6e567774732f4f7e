"""Config-time checks (level 5): every verl_ext check of a composed config, and the dry run.

| module | contents |
| --- | --- |
| ``validation`` | verl_ext's checks, CPU mode's included; each failure a ``ConfigError`` naming the key and the allowed values |
| ``dry_run`` | ``verl_ext.dry_run=true``: build verl's dataclasses, run verl's and verl_ext's checks, summarise |

May import: every lower package (``config``, ``contract``, ``losses``, ``cpu``, ``control``, ``driver``,
``trainer``); imported by the entry point ``verl_ext.main_ppo``.
"""
