"""The fast tier refuses a real launch: a test not marked e2e that starts a Ray node or a vLLM engine, in-process or in
a subprocess, fails with a message that says how to mark it (tests/conftest.py, tests/_fast_tier/sitecustomize.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

GUARD = "verl_ext's fast test tier"


def test_this_test_runs_guarded():
    assert os.environ.get("PYTEST_VERL_EXT_FAST_TIER") == "1"
    assert os.environ["PYTHONPATH"].split(os.pathsep)[0].endswith("_fast_tier")


def test_ray_init_in_the_test_process_is_refused():
    import ray

    try:
        with pytest.raises(RuntimeError, match=GUARD) as refused:
            ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1")
    finally:
        ray.shutdown()  # only reached with a cluster if the guard failed
    assert "Ray node" in str(refused.value) and "pytest.mark.e2e" in str(refused.value)


@pytest.mark.parametrize(
    ("what", "code"),
    [
        ("Ray node", "import ray; ray.init(num_cpus=1, include_dashboard=False, _node_ip_address='127.0.0.1')"),
        # an engine built with no config: unguarded, vLLM fails on the None config instead
        ("vLLM engine", "from vllm.v1.engine.core import EngineCore; EngineCore(None, None, None)"),
    ],
)
def test_a_launch_in_a_subprocess_of_the_test_is_refused(what, code):
    """Whatever a test starts inherits the guard: a recipe script, ``python -m verl_ext.main_ppo``, a worker."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert f"{GUARD}: this test started a {what}" in proc.stderr, proc.stderr[-3000:]
