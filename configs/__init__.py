"""Hydra config groups of verl_ext (installed as the package ``verl_ext.configs``).

Importing it registers the OmegaConf resolvers its files and the recipes use (``${verl_ext.seq_tokens:2}`` and the
others of :mod:`verl_ext.configs.resolvers`): Hydra imports this package whenever it composes from
``pkg://verl_ext.configs``, so every composition can resolve them.

May import: ``verl_ext.cpu`` (CPU mode's precision and vLLM executor, which two resolvers spell), when a resolver
runs."""

from verl_ext.configs.resolvers import register

register()
