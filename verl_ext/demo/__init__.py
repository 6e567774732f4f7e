"""The CPU demo of the entropy mechanism (level 4): ``python -m verl_ext.demo`` (see ``docs/demo.md``).

| module | contents |
| --- | --- |
| ``task`` | the demo's view of the repeat-the-digit task (rewards on token ids) |
| ``loop`` | one GRPO run per loss through verl's FSDP2 worker in this process |
| ``report`` | the table and CSV |
| ``cli`` | the command |

May import: every other verl_ext package (it is the top of the stack).
"""
