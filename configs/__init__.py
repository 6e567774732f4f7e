"""Hydra config groups of verl_ext (installed as the package ``verl_ext.configs``)."""
