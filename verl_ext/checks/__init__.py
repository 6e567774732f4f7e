"""Config-time checks (level 5): every verl_ext check of a composed config, the dry run, and a recipe's start-up.

| module | contents |
| --- | --- |
| ``validation`` | verl_ext's checks, CPU mode's included; each failure a ``ConfigError`` naming the key and the allowed values |
| ``dry_run`` | ``verl_ext.dry_run=true``: build verl's dataclasses, run verl's and verl_ext's checks, summarise |
| ``launch_env`` | the launcher's environment variables and the Hydra overrides each becomes (``recipe/launch.sh``); imports nothing of verl |
| ``resolvers`` | the OmegaConf resolvers the config groups use: arithmetic on the config's own values, none reads the environment |
| ``recipe_checks`` | sizes, files, loggers, checkpoint, CPU scale: checked on the composed config, whatever set the value |
| ``recipe_startup`` | before validation: the config resolved with absolute paths, a CPU scale's sizes printed, the CPU recipes' assets built, wandb offline without a key; the resolved config saved |

May import: every lower package (``config``, ``contract``, ``losses``, ``cpu``, ``control``, ``driver``,
``trainer``, ``testbed``); imported by the entry point ``verl_ext.main_ppo`` (and ``resolvers`` by the config package
``verl_ext.configs``, which registers them).
"""
