"""The fast tier refuses a real launch: a test not marked e2e that starts a Ray node or a vLLM engine, in-process or in
a subprocess, fails with a message that says how to mark it (tests/conftest.py, tests/_fast_tier/sitecustomize.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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
    """Whatever a test starts inherits the guard: a recipe script, ``python -m verl_ext.main_ppo``, a worker. The Ray
    case is a plain ``python -c``; the vLLM case a fresh interpreter forked from the tests' zygote (itself started
    with the test's environment: tests/_fresh_python.py), which spares the torch import before vLLM's."""
    if what == "Ray node":
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    else:
        import _fresh_python

        proc = _fresh_python.run(code, env=dict(os.environ))
    assert proc.returncode != 0
    assert f"{GUARD}: this test started a {what}" in proc.stderr, proc.stderr[-3000:]


# ----------------------------------------------------------------------------------------------------------
# the e2e tier's machine lock (tests/conftest.py): launches two at a time, a machine_alone test alone
# ----------------------------------------------------------------------------------------------------------


def _enter_in_thread(share, run_id: str, alone: bool, events: list[str], name: str, release):
    import threading

    def body() -> None:
        with share(run_id, alone):
            events.append(f"{name} in")
            release.wait(10)
            events.append(f"{name} out")

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def test_machine_lock_shares_launches_and_gives_a_machine_alone_test_the_machine_first(tmp_path, monkeypatch):
    """Two shared holders at once; an exclusive request waits for them, and a shared request made while it waits
    comes after it (the gate), not before."""
    import tempfile
    import threading
    import time

    import _machine_lock

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    events: list[str] = []
    free = {name: threading.Event() for name in "abxc"}

    def enter(name: str, alone: bool):
        return _enter_in_thread(_machine_lock.machine_share, "run1", alone, events, name, free[name])

    def settle() -> None:
        time.sleep(0.3)

    threads = [enter("a", False), enter("b", False)]
    settle()
    assert sorted(events) == ["a in", "b in"]  # shared holders run together
    threads.append(enter("x", True))
    settle()
    threads.append(enter("c", False))
    settle()
    assert sorted(events) == ["a in", "b in"]  # x waits for a and b; c waits behind x, though a and b share
    free["a"].set(), free["b"].set()
    settle()
    assert set(events[2:4]) == {"a out", "b out"} and events[4:] == ["x in"], events  # x before c
    free["x"].set()
    settle()
    assert events[5:] == ["x out", "c in"], events
    free["c"].set()
    for thread in threads:
        thread.join(5)
    assert events[-1] == "c out"


def test_the_first_shared_test_waits_for_the_alone_one_to_hold_the_lock_and_no_longer_than_its_bound(tmp_path, monkeypatch):
    """No alone test took the lock: the wait ends at its bound, False. Once one holds it: True at once."""
    import fcntl
    import tempfile
    import threading
    import time

    import _machine_lock

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    start = time.monotonic()
    assert not _machine_lock.wait_for_the_alone_start("run2", timeout_s=0.5)
    assert 0.5 <= time.monotonic() - start < 3.0
    events: list[str] = []
    release = threading.Event()
    thread = _enter_in_thread(_machine_lock.machine_share, "run2", True, events, "x", release)
    assert _machine_lock.wait_for_the_alone_start("run2", timeout_s=5.0)
    with open(tmp_path / "verl_ext_e2e_run2.lock", "a") as lock:  # held exclusively when the wait ended
        with pytest.raises(BlockingIOError):
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    release.set()
    thread.join(5)


# ----------------------------------------------------------------------------------------------------------
# the fast tier's time limit per test (tests/conftest.py FAST_TEST_LIMIT_S)
# ----------------------------------------------------------------------------------------------------------

TIMED = '''
import time

import pytest


@pytest.fixture(scope="module")
def slow_module_fixture():
    time.sleep(1.0)
    yield


def test_quick():
    pass


def test_slow_call():
    time.sleep(1.0)


def test_slow_set_up(slow_module_fixture):
    pass


def test_after_the_slow_set_up(slow_module_fixture):
    pass


@pytest.mark.e2e
def test_slow_e2e():
    time.sleep(1.0)
'''


def test_a_fast_test_over_the_time_limit_fails_naming_itself_its_time_and_the_limit(tmp_path):
    """A pytest session with tests/conftest.py as its plugin and a limit of 0.8 s: the test whose call sleeps 1 s and
    the one that triggers a module fixture's 1 s set-up fail with the line; the quick ones and the e2e one pass."""
    tests = Path(__file__).resolve().parent  # tests/conftest.py, loaded by its module name (-p conftest)
    (tmp_path / "test_timed.py").write_text(TIMED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tests), *env.get("PYTHONPATH", "").split(os.pathsep)])
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-c",
                           str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), "-o", "fast_test_limit_s=0.8",
                           "-rA", str(tmp_path / "test_timed.py")], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=120)  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-3000:]
    for name in ("test_slow_call", "test_slow_set_up"):
        line = re.search(rf"test_timed\.py::{name} took (\d+\.\d) s \(set-up, call and tear-down\), over the fast "
                         r"tier's limit of 0\.8 s per test \(tests/conftest\.py FAST_TEST_LIMIT_S\)", out)
        assert line and 1.0 <= float(line.group(1)) < 5, out[-3000:]
        assert f"ERROR test_timed.py::{name}" in out, out[-3000:]
    for name in ("test_quick", "test_after_the_slow_set_up", "test_slow_e2e"):
        assert f"PASSED test_timed.py::{name}" in out and f"ERROR test_timed.py::{name}" not in out, out[-3000:]
    assert "5 passed, 2 errors" in out, out[-3000:]


# ----------------------------------------------------------------------------------------------------------
# the end-to-end tier's launches are listed in docs/testing.md
# ----------------------------------------------------------------------------------------------------------

E2E_FILES = ("e2e/test_recipes_cpu.py", "e2e/test_e2e_cpu.py", "e2e/test_cluster_sim.py", "trainer/test_main_ppo.py",
             "cpu/test_cpu_mode.py", "scripts/test_cluster_scripts.py")  # fmt: skip
"""The test files with end-to-end tests (each file's ``pytest.mark.e2e``; the test below checks the list is whole)."""


def _marks(obj) -> list:
    marks = getattr(obj, "pytestmark", [])
    return marks if isinstance(marks, list) else [marks]


def e2e_groups(path: Path) -> set[str]:
    """The ``xdist_group`` s of the e2e tests of one test file, as tests/conftest.py forms them: a test's own group
    (its mark, or its parameters' marks), else its file's name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_launch_table_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # as pytest imports a test file: its helpers beside it
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    groups: set[str] = set()
    for name, fn in vars(module).items():
        if not (name.startswith("test_") and callable(fn)):
            continue
        marks = [*_marks(module), *_marks(fn)]
        if not any(mark.name == "e2e" for mark in marks):
            continue
        own = [mark.args[0] for mark in marks if mark.name == "xdist_group"]
        for mark in marks:
            if mark.name == "parametrize":
                for param in mark.args[1]:
                    own += [m.args[0] for m in getattr(param, "marks", ()) if m.name == "xdist_group"]
        groups |= set(own) or {path.name}
    return groups


def test_every_e2e_launch_has_a_row_in_testing_md_and_every_row_a_launch():
    """docs/testing.md's table of the end-to-end tier names each launch group (its first column) with what only it
    proves and its cost: a launch added without a row, or a row left behind by a launch that went, fails here."""
    tests = Path(__file__).resolve().parent
    marked = {str(p.relative_to(tests)) for p in tests.rglob("test_*.py")
              if "pytest.mark.e2e" in p.read_text() and p.name != Path(__file__).name}  # this file: e2e tests in strings
    assert marked == set(E2E_FILES), f"files with e2e tests: {sorted(marked)}; E2E_FILES lists {sorted(E2E_FILES)}"
    groups = set().union(*(e2e_groups(tests / f) for f in E2E_FILES))
    text = (tests.parent / "docs" / "testing.md").read_text()
    section = text.split("## The end-to-end tier", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE))
    assert rows == groups, f"launch groups without a row: {sorted(groups - rows)}; rows without a launch: {sorted(rows - groups)}"
