"""Fixtures of the trainer tests: ``compose`` builds verl_ext's top config in-process."""

from __future__ import annotations

import pytest

from _trainer_fakes import CLUSTER



@pytest.fixture()
def compose():
    """Compose verl_ext's top config in-process with ``overrides`` (on top of :data:`CLUSTER`)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    def _compose(*overrides: str, base: tuple = tuple(CLUSTER)):
        GlobalHydra.instance().clear()
        with initialize_config_module(config_module="verl_ext.configs", version_base=None):
            return hydra_compose(config_name="verl_ext_trainer", overrides=[*base, *overrides])

    yield _compose
    GlobalHydra.instance().clear()
