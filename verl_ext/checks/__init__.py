"""Config-time checks (level 5): every verl_ext check of a composed config, the dry run, and a recipe's start-up.

| module | contents |
| --- | --- |
| ``validation`` | verl_ext's checks, CPU mode's included; each failure a ``ConfigError`` naming the key and the allowed values |
| ``dry_run`` | ``verl_ext.dry_run=true``: build verl's dataclasses, run verl's and verl_ext's checks, summarise |
| ``recipe_env`` | the OmegaConf resolvers through which the recipes read environment variables; a bad value names the variable |
| ``recipe_startup`` | before validation: the config resolved, a CPU scale's sizes printed, the CPU recipes' assets built, wandb offline without a key |

May import: every lower package (``config``, ``contract``, ``losses``, ``cpu``, ``control``, ``driver``,
``trainer``, ``testbed``); imported by the entry point ``verl_ext.main_ppo`` (and ``recipe_env`` by the config package
``verl_ext.configs``, which registers its resolvers).
"""
