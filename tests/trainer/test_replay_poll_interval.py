"""verl_ext.replay_poll_interval: in CPU mode the V1 trainer's replay buffer checks for finished rollouts every 0.2 s
instead of verl's built-in 2 s; elsewhere (GPU runs) the key is null and verl's own interval stays. A bad value is a
config error naming the key, and a buffer without verl's ``poll_interval`` an error naming that symbol (as is a missing
attribute of verl's trainer that the V1 mixin reads)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from verl_ext.checks.validation import ConfigError, check_replay_poll_interval
from verl_ext.contract import REPLAY_POLL_INTERVAL
from verl_ext.trainer.v1 import REPLAY_BUFFER_SYMBOL, VerlExtV1Mixin
from verl_ext.versions import installed_verl_version

VERL_DEFAULT = 2.0
"""verl's ReplayBuffer default (``tests/test_upstream_contracts.py`` checks it is still verl's)."""


class _VerlTrainer:
    buffer = SimpleNamespace(poll_interval=VERL_DEFAULT)

    def _build_replay_buffer(self):
        return SimpleNamespace(**vars(self.buffer))


class _Trainer(VerlExtV1Mixin, _VerlTrainer):
    def __init__(self, config, buffer=None):  # the mixin's hook alone, without verl's trainer start-up
        self.config = config
        if buffer is not None:
            self.buffer = buffer


def _config(value):
    return OmegaConf.create({"verl_ext": {"replay_poll_interval": value}})


def _compose(monkeypatch, platform):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="verl_ext.configs", version_base=None):
        return compose("verl_ext_trainer", overrides=[f"platform={platform}"] if platform else [])


def test_the_replay_buffer_polls_at_the_configured_interval():
    assert _Trainer(_config(0.2))._build_replay_buffer().poll_interval == 0.2


def test_null_keeps_verls_interval():
    assert _Trainer(_config(None))._build_replay_buffer().poll_interval == VERL_DEFAULT
    assert _Trainer(OmegaConf.create({}))._build_replay_buffer().poll_interval == VERL_DEFAULT


def test_a_buffer_without_verls_poll_interval_is_an_error_naming_the_symbol_and_verl():
    trainer = _Trainer(_config(0.2), buffer=SimpleNamespace(interval=2.0))
    with pytest.raises(AttributeError) as info:
        trainer._build_replay_buffer()
    message = str(info.value)
    assert REPLAY_BUFFER_SYMBOL in message and installed_verl_version() in message
    assert f"{REPLAY_POLL_INTERVAL}=null" in message
    # with the key null nothing is set, so such a buffer is fine
    assert not hasattr(_Trainer(_config(None), buffer=SimpleNamespace(interval=2.0))._build_replay_buffer(),
                       "poll_interval")  # fmt: skip


def test_gpu_runs_keep_verls_interval_and_cpu_mode_polls_faster(monkeypatch):
    gpu = _compose(monkeypatch, None)
    assert OmegaConf.select(gpu, REPLAY_POLL_INTERVAL) is None and check_replay_poll_interval(gpu) is None
    assert _Trainer(gpu)._build_replay_buffer().poll_interval == VERL_DEFAULT
    cpu = _compose(monkeypatch, "cpu")
    assert check_replay_poll_interval(cpu) == OmegaConf.select(cpu, REPLAY_POLL_INTERVAL) == 0.2


@pytest.mark.parametrize("bad", [0, -1, "fast", True])
def test_a_bad_interval_names_the_key(bad):
    with pytest.raises(ConfigError) as info:
        check_replay_poll_interval(_config(bad))
    assert info.value.key == REPLAY_POLL_INTERVAL and "> 0" in info.value.message and "null" in info.value.message


def test_a_missing_verl_trainer_attribute_is_an_error_naming_it_and_verl():
    trainer = _Trainer(_config(None))
    trainer.local_trigger_step = 3
    assert trainer._verl_attribute("local_trigger_step") == 3
    with pytest.raises(AttributeError) as info:
        trainer._verl_attribute("parameter_sync_step")
    assert "PPOTrainer.parameter_sync_step does not exist" in str(info.value)
    assert installed_verl_version() in str(info.value)
