"""vLLM's executor in CPU mode (verl_ext/cpu/vllm_executor.py): ``uni`` (the model inside the engine-core process) at
TP 1 without an OpenMP binding, ``mp`` otherwise, chosen by ``configs/platform/cpu.yaml`` and refused at config time
where it would change the run. The launches that show the process layout are in tests/e2e/test_recipes_cpu.py
(``test_recipe_trains_at_cpu_scale_with_its_structure``: no worker process at GSM8K's TP 1, workers at DAPO's TP 2);
the upstream code the choice relies on is pinned in tests/test_upstream_contracts.py."""

from __future__ import annotations

import pytest
from _cpu_marks import cpu_only
from hydra import compose, initialize_config_module

from verl_ext.checks.validation import ConfigError, check_platform
from verl_ext.cpu import vllm_executor

BACKEND = vllm_executor.BACKEND_KEY
TP = vllm_executor.TP_KEY
BIND = f"{vllm_executor.ENV_KEY}.{vllm_executor.BIND_VAR}"
MULTIPROCESSING = f"{vllm_executor.ENV_KEY}.{vllm_executor.MULTIPROCESSING_VAR}"


def composed(*overrides: str):
    """``platform=cpu`` with ``overrides``, as the entry point composes it (CPU mode: ``VERL_PLATFORM=cpu``), with
    GRPO (verl's default estimator needs a critic, which CPU mode refuses)."""
    with initialize_config_module(config_module="verl_ext.configs", version_base=None):
        return compose("verl_ext_trainer", overrides=["platform=cpu", "algorithm.adv_estimator=grpo", *overrides])


@cpu_only
@pytest.mark.parametrize(
    ("overrides", "want"),
    [
        ((), "uni"),  # CPU mode's defaults: TP 1, nobind
        ((f"{TP}=2",), "mp"),  # one worker process per rank
        ((f"{BIND}=auto",), "mp"),  # vLLM's mp executor binds the worker's threads
        ((f"{BIND}='0-1'",), "mp"),
    ],
    ids=["defaults", "tp2", "bind_auto", "bind_list"],
)
def test_the_executor_follows_the_tp_size_and_the_binding_and_passes_the_checks(monkeypatch, overrides, want):
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    cfg = composed(*overrides)
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend == want
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VLLM_ENABLE_V1_MULTIPROCESSING == "0"
    check_platform(cfg)  # no ConfigError


@cpu_only
@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        ((f"{TP}=2", f"{BACKEND}=uni"), BACKEND, "'uni' runs one tensor-parallel rank, and " f"{TP} is 2: allowed 'mp'"),
        ((f"{BIND}=auto", f"{BACKEND}=uni"), BACKEND, "'uni' would drop the OpenMP binding VLLM_CPU_OMP_THREADS_BIND=auto"),
        ((f"{MULTIPROCESSING}='1'",), MULTIPROCESSING, "'1' makes vLLM's CPU platform run 'mp' where"),
    ],
    ids=["tp2", "bind", "multiprocessing"],
)
def test_uni_is_refused_where_vllm_would_run_something_else(monkeypatch, overrides, key, words):
    """Each refusal names its key and the allowed values: ``uni`` cannot span two ranks, would lose the thread
    binding the ``mp`` executor sets, and with ``VLLM_ENABLE_V1_MULTIPROCESSING`` other than 0 vLLM's CPU platform
    silently runs ``mp`` instead."""
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    with pytest.raises(ConfigError) as info:
        check_platform(composed(*overrides))
    assert info.value.key == key and words in info.value.message, str(info.value)


def test_mp_and_an_unset_executor_are_never_refused():
    """verl's own choice (``mp``, or no key at all: verl passes ``mp``) runs wherever vLLM runs."""
    for chosen in ("mp", None):
        for tp, bind, multiprocessing in ((1, "nobind", "0"), (2, "auto", "1"), (4, "0-7|8-15", None)):
            assert vllm_executor.misfit(chosen, tp, bind, multiprocessing) is None
    assert vllm_executor.misfit("uni", 1, "nobind", "0") is None
    assert vllm_executor.misfit("uni", 1, "nobind", None) is not None  # vLLM's default is 1
