"""A stall is a stop (``verl_ext.driver.stall``): the bound derived from the run's own steps, its keys, the report, and
the watchdog stopping a run that logs no step; the progress the trainer publishes (``verl_ext.driver.progress``).
Ray's side - a TaskRunner's published step read by the driver, the running methods read from Ray's task events - is
proven by the stalled legacy launch (tests/e2e/test_e2e_cpu.py)."""

from __future__ import annotations

import threading

import pytest

from verl_ext.driver.stall import FACTOR, FIRST_STEP_S, FLOOR_S, Stall, StallCheck
from verl_ext.driver.watchdog import Watchdog
from verl_ext.driver.watchdog_config import WatchdogConfig


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def check(stall_s: float | None = None, first_s: float = FIRST_STEP_S, running=()):
    """A StallCheck on a fake clock and a progress the test sets (``progress["step"]``)."""
    clock, progress = Clock(), {"step": None}
    stall = StallCheck(stall_s, first_s=first_s, clock=clock,
                       progress=lambda job: None if progress["step"] is None else (progress["step"], 0.0),
                       running=lambda job: list(running))  # fmt: skip
    return stall, clock, progress


def test_the_first_step_has_its_allowance_and_then_the_bound_follows_the_slowest_step():
    """Before a step is logged: stall_first_s (4 h). After: max(1 h, 5x the slowest interval between logged steps, the
    first one - start-up - included); a slower step raises it, a faster one never lowers it."""
    stall, clock, progress = check()
    clock.now += FIRST_STEP_S  # four hours of start-up: not yet a stall
    assert stall.check("job") is None and stall.bound_s() == FIRST_STEP_S
    clock.now += 1.0
    found = stall.check("job")
    assert isinstance(found, Stall) and found.last_step is None and "stall_first_s=14400" in found.describe()
    stall, clock, progress = check()
    clock.now += 600.0
    progress["step"] = 1  # start-up and step 1: 10 min
    assert stall.check("job") is None and stall.bound_s() == FLOOR_S  # 5 x 10 min < 1 h
    clock.now += 1800.0
    progress["step"] = 2  # a 30-min step (a validation, a checkpoint)
    assert stall.check("job") is None and stall.bound_s() == FACTOR * 1800.0
    clock.now += 60.0
    progress["step"] = 3
    assert stall.check("job") is None and stall.bound_s() == FACTOR * 1800.0
    clock.now += FACTOR * 1800.0
    assert stall.check("job") is None  # exactly on the bound
    clock.now += 1.0
    found = stall.check("job")
    assert found is not None and found.last_step == 3 and found.bound_s == FACTOR * 1800.0


def test_a_fixed_bound_applies_after_the_first_step_and_the_report_names_what_runs():
    stall, clock, progress = check(stall_s=30.0, first_s=600.0, running=[("WorkerDict.update_weights", 41.0)])
    clock.now += 500.0
    assert stall.check("job") is None  # start-up: the first step's allowance, not the 30 s
    progress["step"] = 2
    assert stall.check("job") is None
    clock.now += 31.0
    found = stall.check("job")
    assert found is not None and found.describe() == (
        "no training step for 31 s since step 2 was logged, over the stall bound of 30 s "
        "(verl_ext.watchdog.stall_s=30); running: WorkerDict.update_weights for 41 s")


@pytest.mark.parametrize(("values", "key", "words"), [
    ({"stall_s": 0}, "stall_s", "0 is invalid: allowed auto, off or a number of seconds > 0"),
    ({"stall_s": "never"}, "stall_s", "'never' is invalid: allowed auto, off"),
    ({"stall_s": True}, "stall_s", "True is invalid"),
    ({"stall_first_s": -1}, "stall_first_s", "-1 is invalid: allowed a number of seconds > 0"),
])  # fmt: skip
def test_bad_stall_values_name_the_key(values, key, words):
    from verl_ext.config import ConfigError

    with pytest.raises(ConfigError, match=words) as info:
        WatchdogConfig(**values)
    assert info.value.key == f"verl_ext.watchdog.{key}"


def test_the_default_is_auto_and_off_is_none():
    default = WatchdogConfig().stall_check()
    assert isinstance(default, StallCheck) and default.stall_s is None and default.first_s == FIRST_STEP_S
    assert WatchdogConfig(stall_s="off").stall_check() is None
    assert WatchdogConfig(stall_s=45).stall_check().stall_s == 45.0


def test_the_watchdog_stops_a_stalled_run_as_it_stops_one_with_a_dead_actor(tmp_path):
    """No death in Ray's table, every actor alive, and no step logged for longer than the bound: the watchdog ends the
    TaskRunner and its report names the stall, the last logged step and the latest checkpoint."""
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")
    stall, clock, progress = check(stall_s=30.0, first_s=600.0, running=[("WorkerDict.actor_rollout_update_weights", 35.0)])
    progress["step"] = 2
    stall.check("job")
    clock.now += 31.0
    ended = threading.Event()
    dog = Watchdog(ckpt_dir=str(tmp_path), poll_s=0.01, table=lambda job: {}, job_id=lambda: "job", ready=lambda: True,
                   on_death=ended.set, grace_s=5.0, exit_process=lambda code: None, stall=stall)  # fmt: skip
    dog.start()
    assert ended.wait(10)
    dog.stop()
    assert dog.report == (
        "no training step for 31 s since step 2 was logged, over the stall bound of 30 s (verl_ext.watchdog.stall_s=30);"
        " running: WorkerDict.actor_rollout_update_weights for 35 s. The run cannot progress and stops: last completed "
        f"step 2, latest checkpoint global_step_2 in {tmp_path}")


def test_the_trainers_logged_steps_are_published_and_verls_log_restored(monkeypatch):
    """Inside ``published_progress`` every ``Tracking.log`` publishes its step (after verl's own log ran); a publish
    that fails is said once and the log goes on."""
    from verl.utils import tracking

    from verl_ext.driver import progress

    published, logged = [], []
    monkeypatch.setattr(progress, "publish_progress", published.append)
    monkeypatch.setattr(tracking.Tracking, "log", lambda self, data, step, backend=None: logged.append(step))
    original = tracking.Tracking.log
    with progress.published_progress():
        tracking.Tracking.log(object(), {"a": 1}, step=3)
        tracking.Tracking.log(object(), {"a": 1}, 4)
    assert logged == [3, 4] and published == [3, 4] and tracking.Tracking.log is original

    def broken(step):
        raise ConnectionError("GCS unreachable")

    monkeypatch.setattr(progress, "publish_progress", broken)
    with progress.published_progress():
        tracking.Tracking.log(object(), {}, 5)
        tracking.Tracking.log(object(), {}, 6)
    assert logged == [3, 4, 5, 6]
