"""Config-time checks (level 5): every verl_ext check of a composed config, and the dry run.

| module | contents |
| --- | --- |
| ``validation`` | verl_ext's checks, CPU mode's included; each failure a ``ConfigError`` naming the key and the allowed values |
| ``dry_run`` | ``verl_ext.dry_run=true``: build verl's dataclasses, run verl's and verl_ext's checks, summarise |
| ``recipe_checks`` | sizes, files, loggers, checkpoint, CPU scale: checked on the composed config, whatever set the value |
| ``training_data`` | the data files verl will read: the columns it needs, a scorer for every data source, the custom reward function |

May import: every lower package (``config``, ``contract``, ``losses``, ``cpu``, ``control``, ``registration``,
``testbed``, ``driver``, ``trainer``); imported by the start-up (``verl_ext.startup``) and the entry point ``verl_ext.main_ppo``. The launcher's variable table is
``verl_ext.recipe.launch_env``, the config groups' resolvers ``verl_ext.configs.resolvers``.
"""
