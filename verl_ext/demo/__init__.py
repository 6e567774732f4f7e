"""The CPU demo (level 6): ``python -m verl_ext.demo`` runs the CPU recipe through verl's real trainer once per
loss and draws the comparison (see ``docs/demo.md``).

| module | contents |
| --- | --- |
| ``runs`` | one run = ``recipe/cpu_tiny.sh`` (shipped as ``verl_ext.recipe``) through ``python -m verl_ext.main_ppo`` |
| ``report`` | the table and CSV |
| ``cli`` | the command |

May import: every lower verl_ext package; it starts the trainer as a subprocess, never in-process.
"""
