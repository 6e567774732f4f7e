"""verl_ext.replay_poll_interval: the V1 trainer's replay buffer checks for finished rollouts at that interval instead
of verl's built-in 2 s, and a bad value is a config error naming the key."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from verl_ext.checks.validation import ConfigError, check_replay_poll_interval
from verl_ext.contract import REPLAY_POLL_INTERVAL
from verl_ext.trainer.v1 import VerlExtV1Mixin


class _VerlTrainer:
    def _build_replay_buffer(self):
        return SimpleNamespace(poll_interval=2.0)  # verl's ReplayBuffer default


class _Trainer(VerlExtV1Mixin, _VerlTrainer):
    def __init__(self, config):  # the mixin's hook alone, without verl's trainer start-up
        self.config = config


def test_the_replay_buffer_polls_at_the_configured_interval():
    config = OmegaConf.create({"verl_ext": {"replay_poll_interval": 0.2}})
    assert _Trainer(config)._build_replay_buffer().poll_interval == 0.2


def test_the_default_config_polls_faster_than_verl():
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="verl_ext.configs", version_base=None):
        cfg = compose("verl_ext_trainer")
    assert 0 < OmegaConf.select(cfg, REPLAY_POLL_INTERVAL) < 2.0
    assert check_replay_poll_interval(cfg) == OmegaConf.select(cfg, REPLAY_POLL_INTERVAL)


@pytest.mark.parametrize("bad", [0, -1, "fast", True, None])
def test_a_bad_interval_names_the_key(bad):
    config = OmegaConf.create({"verl_ext": {"replay_poll_interval": bad}})
    with pytest.raises(ConfigError) as info:
        check_replay_poll_interval(config)
    assert info.value.key == REPLAY_POLL_INTERVAL and "> 0" in info.value.message
