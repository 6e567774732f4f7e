"""CPU demo of the entropy mechanism: ``python -m verl_ext.demo`` (see ``docs/demo.md``)."""
