"""Shared fixtures: the tiny Qwen2 model (built once per session, no downloads), the markers and the two tiers.

Two tiers: ``python -m pytest -q`` runs every test that starts no Ray cluster and no vLLM engine (pyproject's
``addopts`` deselects ``e2e``, and spreads the test files over the cores with pytest-xdist); ``python -m pytest -q -m e2e``
runs the real launches of verl's trainer, two at a time (a launch marked ``machine_alone`` alone). The fast tier is
enforced, not trusted: every test not marked ``e2e`` runs with ``tests/_fast_tier`` first on ``PYTHONPATH`` and
``PYTEST_VERL_EXT_FAST_TIER=1``, whose ``sitecustomize`` makes starting a Ray node or a vLLM engine raise, in the pytest
process and in every Python process the test starts.

Tests mirror the packages (``tests/losses``, ``tests/trainer``, ``tests/cpu``, ``tests/analysis``, ``tests/demo``),
plus ``tests/scripts`` (recipes, data, cluster scripts), ``tests/benchmarks`` (the benchmarks' own logic) and
``tests/e2e`` (verl's whole trainer in CPU mode).
``tests`` is not a package (verl installs one named ``tests``); this file puts it on ``sys.path`` so that every
test module can import the float64 oracles, ``_oracles``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine_lock import machine_share, wait_for_the_alone_start  # noqa: E402  (tests/ is on sys.path only from the line above)

FAST_TIER = Path(__file__).resolve().parent / "_fast_tier"
"""The fast tier's guard (``sitecustomize.py``), put first on ``PYTHONPATH`` of every non-e2e test."""

_spec = importlib.util.spec_from_file_location("verl_ext_fast_tier", FAST_TIER / "sitecustomize.py")
_fast_tier = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fast_tier)
_fast_tier.install()  # the pytest process itself: refuses only while PYTEST_VERL_EXT_FAST_TIER=1

import _yaml_memo  # noqa: E402  (tests/ is on sys.path only from the line above)

_yaml_memo.install()  # each YAML text of the config groups parsed once per test process


# PYTEST_*, not VERL_*: tests hand their launches an environment without VERL_*, RAY_* and HF_* variables
def _guard_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {"PYTEST_VERL_EXT_FAST_TIER": "1", "PYTHONPATH": os.pathsep.join([str(FAST_TIER), *([path] if path else [])])}


def selects_e2e(config: pytest.Config) -> bool:
    """The run selects the end-to-end tier (``-m e2e``, or a mark expression naming it other than ``not e2e``)."""
    markexpr = config.getoption("markexpr", "") or ""
    return "e2e" in markexpr.replace("not e2e", "")


def pytest_configure(config: pytest.Config) -> None:
    if selects_e2e(config) and not hasattr(config, "workerinput"):
        config.option.loadscopereorder = False  # the groups go out longest first (pytest_collection_modifyitems)
    if hasattr(config, "workerinput") and not selects_e2e(config):
        share_the_cores(int(config.workerinput.get("workercount", 1)))
    config.addinivalue_line("markers", "engine: runs verl's real FSDP2 TrainingWorker on CPU/gloo (slow-ish)")
    config.addinivalue_line("markers", "e2e: runs verl's whole trainer in CPU mode (Ray, FSDP2, vLLM's CPU engine; minutes); "
                            "the end-to-end tier, python -m pytest -m e2e")  # fmt: skip
    config.addinivalue_line("markers", "fast_limit_s(seconds): a fast test's own time limit, above FAST_TEST_LIMIT_S, "
                            "for a test whose cost is what it proves (its comment says why)")  # fmt: skip
    config.addinivalue_line("markers", "machine_alone: an e2e test that runs while no other e2e test does (its launch "
                            "needs most of the machine's memory)")  # fmt: skip


def share_the_cores(workers: int) -> None:
    """A fast-tier worker's torch runs on its share of the machine's cores (one thread with one worker per core):
    torch's default, a thread per core in every worker, makes the workers' OpenMP threads wait on each other
    (the tier's engine and loss tests took 1.2x as long on 2 cores with 2 workers). The processes a test starts keep
    torch's default."""
    import psutil
    import torch

    torch.set_num_threads(max(1, (psutil.cpu_count(logical=False) or 1) // max(1, workers)))


MAX_WORKERS = 4
"""``-n auto`` uses at most this many pytest-xdist workers (each imports torch and verl: ~1 GB)."""

E2E_WORKERS = 2
"""``-n auto`` in the e2e tier: two launches at a time. A launch of verl's trainer keeps ~1.3 of 2 cores busy (its
start-up waits on processes and servers); two at once keep ~1.9 busy and finish in 0.70x the time of one after the
other (the toy recipe, 3 steps, 2-core Intel Xeon: ``python -m benchmarks.concurrent_launches``)."""

E2E_MIN_MEMORY_GIB = 20
"""Below this much memory the e2e tier runs its launches one at a time (two toy launches at once hold ~13 GB)."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's ``addopts``): one worker per physical core, at most :data:`MAX_WORKERS`, for the fast
    tier; :data:`E2E_WORKERS` when the run selects e2e tests, none (one process, in order) on a machine with less
    than :data:`E2E_MIN_MEMORY_GIB` of memory. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still wins."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    import psutil

    if selects_e2e(config):
        return E2E_WORKERS if psutil.virtual_memory().total >= E2E_MIN_MEMORY_GIB * 2**30 else 0
    return max(1, min(MAX_WORKERS, psutil.cpu_count(logical=False) or 1))


E2E_GROUP_SECONDS: dict[str, float] = {
    "dapo_clip_cov": 450, "test_cluster_sim.py": 330, "gsm8k_grpo_erc": 470, "engine_killed": 295, "legacy": 425,
    "demo": 180, "raising_reward": 196, "test_main_ppo.py": 20, "test_cluster_scripts.py": 25, "test_cpu_mode.py": 26,
}  # fmt: skip
"""Seconds each e2e group took (``--durations``, two launches at a time, 2-core AMD EPYC without bf16): the groups are handed to
the workers longest first, so that no long group starts last and leaves one worker running alone. A group missing
here counts as a 200 s one; the order only moves the tier's end, never what runs."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """An e2e test without an ``xdist_group`` mark joins its file's group: a file runs in one worker unless its tests
    name the launch they share (``pytest.mark.xdist_group(<launch>)``), and then each launch's tests run in one
    worker, which launches it once (its module's fixtures cache the runs per worker). The e2e tests are ordered by
    :data:`E2E_GROUP_SECONDS`, longest group first (a stable sort: a group's tests keep their order), after a group
    with a ``machine_alone`` test: that one runs first, while the other worker's first test waits for it
    (:func:`pytest_runtest_protocol`), so the machine idles once, not while the alone test waits for a running one."""
    e2e = [item for item in items if item.get_closest_marker("e2e") is not None]
    if not e2e:
        return
    for item in e2e:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(Path(str(item.path)).name))

    def group(item: pytest.Item) -> str:
        mark = item.get_closest_marker("xdist_group")
        return mark.kwargs.get("name") or mark.args[0]

    first = {}
    for index, item in enumerate(e2e):
        first.setdefault(group(item), index)
    alone = {group(item) for item in e2e if item.get_closest_marker("machine_alone") is not None}
    e2e.sort(key=lambda item: (group(item) not in alone, -E2E_GROUP_SECONDS.get(group(item), 200.0), first[group(item)]))
    others = [item for item in items if item.get_closest_marker("e2e") is None]
    items[:] = [*e2e, *others]
    if hasattr(config, "workerinput") and selects_e2e(config):  # for the controller's scheduler (below)
        path = _groups_file(os.getppid())
        partial = path.with_suffix(f".{os.getpid()}")
        partial.write_text(json.dumps({item.nodeid: group(item) for item in e2e}))
        partial.replace(path)


def _groups_file(controller_pid: int) -> Path:
    """Where the e2e workers leave each test's group for the controller (xdist's own ``loadgroup`` names the group in
    the node id, which pytest 9.2 no longer lets a plugin change)."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"verl_ext_e2e_groups_{controller_pid}.json"


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN201 (xdist's scheduler type)
    """The e2e tier's scheduler: xdist's scope scheduling with the tests' groups as scopes (a test's group, from the
    workers' collection, else its file, as ``loadfile``); the fast tier keeps pyproject's ``loadfile``."""
    if not selects_e2e(config) or config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                path = _groups_file(os.getpid())
                self.groups = json.loads(path.read_text()) if path.exists() else {}
                path.unlink(missing_ok=True)
            return self.groups.get(nodeid, nodeid.split("::", 1)[0])

    return GroupScheduling(config, log)


def machine_line() -> str:
    """The host as CI's time is read against: CPU model, cores, memory (``/proc/cpuinfo``, psutil)."""
    import platform

    import psutil

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model)
    except OSError:
        pass
    flags = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            present = set(next((line for line in cpuinfo if line.startswith("flags")), "").split())
        flags = ", ".join(flag for flag in ("avx512_bf16", "amx_bf16") if flag in present) or "no bf16 instructions"
    except OSError:
        pass
    memory = psutil.virtual_memory().total / 2**30
    return (f"machine: {model} ({flags}), {psutil.cpu_count(logical=False)} cores / {psutil.cpu_count()} threads, "
            f"{memory:.0f} GiB")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Each tier's closing lines name the machine it ran on, beside pytest's own time (``.ci/run``'s log then says
    what ran where: ``python -m benchmarks.ci_time``)."""
    terminalreporter.write_line(machine_line())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under pytest-xdist, an e2e test runs (set-up of its module's fixtures and tear-down included) while holding
    the machine lock: shared, or exclusive for a ``machine_alone`` test. A worker's first test, when the run's first
    e2e test is a ``machine_alone`` one on the other worker, first waits (bounded) for that one to take the lock."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None or item.get_closest_marker("e2e") is None:
        yield
        return
    alone = item.get_closest_marker("machine_alone") is not None
    if not alone and not item.config.stash.get(_E2E_STARTED, False):
        first = next(i for i in item.session.items if i.get_closest_marker("e2e") is not None)  # the run's order
        if first is not item and first.get_closest_marker("machine_alone") is not None:
            wait_for_the_alone_start(run_id)
    item.config.stash[_E2E_STARTED] = True
    with machine_share(run_id, alone=alone):
        yield


def pytest_collection_finish(session: pytest.Session) -> None:
    """A session without e2e tests (the default run) is guarded as a whole, session fixtures included."""
    if not any(item.get_closest_marker("e2e") for item in session.items):
        os.environ.update(_guard_env())
        session.config.stash[_GUARDED_SESSION] = True


_GUARDED_SESSION = pytest.StashKey[bool]()
_E2E_STARTED = pytest.StashKey[bool]()
"""Set once this worker has started an e2e test."""


@pytest.fixture(autouse=True)
def _fast_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In a session that runs both tiers, each non-e2e test is guarded on its own."""
    if not request.config.stash.get(_GUARDED_SESSION, False) and request.node.get_closest_marker("e2e") is None:
        for key, value in _guard_env().items():
            monkeypatch.setenv(key, value)
    yield


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A randomly initialised tiny Qwen2 + tokenizer saved with ``save_pretrained`` (seed 0)."""
    from verl_ext.testbed.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_qwen2"), seed=0)


# ----------------------------------------------------------------------------------------------------------
# The fast tier's time limit per test (the fast tier's block: FAST_TEST_LIMIT_S and the two hooks below)
# ----------------------------------------------------------------------------------------------------------

FAST_TEST_LIMIT_S = 30.0
"""A fast-tier test (one not marked ``e2e``) fails when its set-up, call and tear-down together take longer than this
many seconds, so that a slow test is seen the day it comes. A module- or session-scoped fixture's set-up counts toward
the test that triggers it, its tear-down toward the test after which it ends: split or shrink such a fixture rather
than let one test pay for many. The fast tier's tests stay under ~18 s on a 2-core Intel Xeon (the slowest machine
seen), leaving room for machines up to 1.7x slower. ``-o fast_test_limit_s=N`` sets another limit for one run (the
guard's own test uses a short one); ``0`` turns the guard off."""

_FAST_TEST_TIME = pytest.StashKey[float]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("fast_test_limit_s", "seconds a fast-tier test may take, set-up and tear-down included (0: no limit)",
                  default=str(FAST_TEST_LIMIT_S))  # fmt: skip


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Adds up a fast-tier test's set-up, call and tear-down times; its tear-down report fails, naming the test, its
    time and the limit, when the sum is over :data:`FAST_TEST_LIMIT_S` (or ``fast_test_limit_s``)."""
    outcome = yield
    report = outcome.get_result()
    if item.get_closest_marker("e2e") is not None:
        return
    total = item.stash.get(_FAST_TEST_TIME, 0.0) + report.duration
    item.stash[_FAST_TEST_TIME] = total
    limit = float(item.config.getini("fast_test_limit_s"))
    own = item.get_closest_marker("fast_limit_s")  # a test whose cost is its point: its own limit, in its source
    if own is not None and limit > 0:
        limit = max(limit, float(own.args[0]))
    if report.when == "teardown" and limit > 0 and total > limit and report.outcome != "failed":
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} took {total:.1f} s (set-up, call and tear-down), over the fast tier's limit "
                           f"of {limit:g} s per test (tests/conftest.py FAST_TEST_LIMIT_S): make it faster, split it, "
                           "or move a real launch to the e2e tier (pytest.mark.e2e)")  # fmt: skip


@pytest.fixture(scope="session")
def launch_record():
    """``tests/scripts/launch_record.py``, for tests outside ``tests/scripts``: a launch of
    ``python -m verl_ext.main_ppo`` run in the test process (:func:`run_main_ppo`, :func:`run_launcher`)."""
    if "launch_record" not in sys.modules:
        path = Path(__file__).parent / "scripts" / "launch_record.py"
        spec = importlib.util.spec_from_file_location("launch_record", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["launch_record"] = module
        spec.loader.exec_module(module)
    return sys.modules["launch_record"]
