"""The watchdog (verl_ext.driver.watchdog): an actor of the run that dies unexpectedly - killed, out of memory, its
node gone - is reported once, naming the actor, Ray's reason, the last completed step and the latest checkpoint, and
the main thread is interrupted; an actor ended on purpose (ray.kill, its own exit, out of scope), an actor of another
job, and a live one are not; a main thread that does not stop is followed by the process's own exit. Ray's actor
table is faked with entries built from Ray's own protobuf classes (no Ray started here)."""

from __future__ import annotations

import json
import threading

import pytest
from ray.core.generated import common_pb2

from verl_ext.driver import watchdog as wd

JOB = "01000000"


def entry(state: str = "ALIVE", cause=None, job: str = JOB, cls: str = "vLLMHttpServer", pid: int = 4242) -> dict:
    out = {"ActorID": "79443d9d235f137d757f07e601000000", "ActorClassName": cls, "Name": "", "JobID": job,
           "Address": {"IPAddress": "127.0.0.1"}, "State": state, "Pid": pid}  # fmt: skip
    if cause is not None:
        out["DeathCause"] = cause
    return out


def died(reason: str, message: str) -> common_pb2.ActorDeathCause:
    cause = common_pb2.ActorDeathCause()
    cause.actor_died_error_context.reason = common_pb2.ActorDiedErrorContext.DESCRIPTOR.fields_by_name[
        "reason"].enum_type.values_by_name[reason].number
    cause.actor_died_error_context.error_message = message
    return cause


def oom() -> common_pb2.ActorDeathCause:
    cause = common_pb2.ActorDeathCause()
    cause.oom_context.error_message = "Task was killed due to the node running low on memory."
    return cause


KILLED = died("WORKER_DIED", "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR")


def test_rays_death_causes_have_the_fields_the_watchdog_reads():
    """What Ray 2.x records and death_of reads: the cause's oneof, the reason enum's names, the message."""
    assert {f.name for f in common_pb2.ActorDeathCause.DESCRIPTOR.oneofs_by_name["context"].fields} >= {
        "actor_died_error_context", "oom_context", "creation_task_failure_context"}
    names = set(common_pb2.ActorDiedErrorContext.DESCRIPTOR.fields_by_name["reason"].enum_type.values_by_name)
    assert set(wd.INTENDED_REASONS) | {"WORKER_DIED", "NODE_DIED"} <= names


@pytest.mark.parametrize(("cause", "reason"), [
    (KILLED, "WORKER_DIED"),
    (oom(), "OUT_OF_MEMORY (Ray's memory monitor)"),
    (died("NODE_DIED", "The node died"), "NODE_DIED"),
])  # fmt: skip
def test_an_unexpected_death_is_reported(cause, reason):
    death = wd.death_of(entry("DEAD", cause))
    assert death is not None and death.reason == reason and death.pid == "4242" and death.class_name == "vLLMHttpServer"
    assert death.describe().startswith("Ray actor vLLMHttpServer (id 79443d9d235f, pid 4242, node 127.0.0.1) died: ")


@pytest.mark.parametrize("cause", [
    died("RAY_KILL", "The actor is dead because it was killed by `ray.kill`."),
    died("OUT_OF_SCOPE", "The actor is dead because all references to the actor were removed."),
    died("OWNER_DIED", "The actor is dead because its owner has died."),
    died("WORKER_DIED", "The actor is dead because its worker process has died. Worker exit type: INTENDED_USER_EXIT"),
])  # fmt: skip
def test_an_intended_end_and_a_live_actor_are_not_deaths(cause):
    assert wd.death_of(entry("DEAD", cause)) is None
    assert wd.death_of(entry("ALIVE")) is None


def test_the_run_log_and_the_checkpoint_tracker_give_the_last_step_and_checkpoint(tmp_path):
    log = tmp_path / "run.jsonl"
    log.write_text("\n".join(json.dumps({"step": s, "data": {}}) for s in (1, 2, 3)) + "\n{broken\n")
    assert wd.last_step(str(log)) == 3 and wd.last_step(None) is None and wd.last_step(str(tmp_path / "x")) is None
    assert wd.latest_checkpoint(str(tmp_path)) is None
    (tmp_path / wd.CHECKPOINT_TRACKER).write_text("2")
    assert wd.latest_checkpoint(str(tmp_path)) == "global_step_2"


def run_watchdog(tables: list[dict], tmp_path, grace_s: float = 5.0):
    """Run a watchdog over ``tables`` (one read each poll, the last repeated) until it fires or reads them all."""
    reads, fired, exits = iter(tables), threading.Event(), []
    last = {}

    def table():
        nonlocal last
        last = next(reads, last)
        return last

    log = tmp_path / "run.jsonl"
    log.write_text(json.dumps({"step": 7}) + "\n")
    (tmp_path / wd.CHECKPOINT_TRACKER).write_text("5")
    dog = wd.Watchdog(run_log=str(log), ckpt_dir=str(tmp_path), poll_s=0.01, table=table, job_id=lambda: JOB,
                      ready=lambda: True, on_death=fired.set, grace_s=grace_s, exit_process=exits.append,
                      shutdown=lambda: exits.append("shutdown"))  # fmt: skip
    dog.start()
    return dog, fired, exits


def test_the_first_unexpected_death_of_this_job_stops_the_run_naming_it(tmp_path, capsys):
    tables = [{"a": entry()}, {"a": entry(), "b": entry("DEAD", KILLED, job="02000000")},  # another job's death
              {"a": entry("DEAD", died("RAY_KILL", "killed by `ray.kill`"))},  # verl's own clean-up
              {"a": entry("DEAD", KILLED, cls="ActorRolloutRefWorker")}]  # fmt: skip
    dog, fired, exits = run_watchdog(tables, tmp_path)
    assert fired.wait(10), "the watchdog never fired"
    dog.stop()
    dog.join(10)
    assert dog.report.startswith("Ray actor ActorRolloutRefWorker (id 79443d9d235f, pid 4242, node 127.0.0.1) died: "
                                 "WORKER_DIED")  # fmt: skip
    assert "last completed step 7, latest checkpoint global_step_5 in" in dog.report  # the later of log and checkpoint
    assert f"error: {dog.report}" in capsys.readouterr().err and exits == []


def test_a_main_thread_that_does_not_stop_is_followed_by_the_process_exit(tmp_path):
    dog, fired, exits = run_watchdog([{"a": entry("DEAD", oom())}], tmp_path, grace_s=0.05)
    assert fired.wait(10)
    dog.join(10)
    assert exits == ["shutdown", 1] and "OUT_OF_MEMORY" in dog.report


def test_a_healthy_run_is_left_alone_and_a_failed_read_is_not_a_death(tmp_path, capsys):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("GCS busy")
        return {"a": entry()}

    fired = threading.Event()
    dog = wd.Watchdog(poll_s=0.01, table=flaky, job_id=lambda: JOB, ready=lambda: True, on_death=fired.set)
    dog.start()
    while len(calls) < 5:
        pass
    dog.stop()
    dog.join(10)
    assert not fired.is_set() and dog.report is None
    assert "could not read Ray's actor table or a server's health (ConnectionError('GCS busy')); still watching" in capsys.readouterr().err


def test_an_engine_dead_inside_a_live_server_actor_is_reported(tmp_path):
    """The weight sync's hang: vLLM's engine process dies, verl's server actor lives on. Its /health decides, once the
    server has an address (its HTTP server up): a slow answer (None) is no failure, a healthy one resets the count,
    and HEALTH_FAILURES refusals in a row are a death."""
    server = {**entry(cls="vLLMHttpServer"), "Name": "vllm_server_0_0", "RayNamespace": "ns"}
    answers = iter([True, None, False, True, False, True, False, False])  # healthy, busy, misses apart, dead x2
    asked, fired = [], threading.Event()

    def health(address):
        asked.append(address)
        return next(answers)

    log = tmp_path / "run.jsonl"
    log.write_text(json.dumps({"step": 2}) + "\n")
    dog = wd.Watchdog(run_log=str(log), poll_s=0.01, table=lambda: {"s": server}, job_id=lambda: JOB,
                      ready=lambda: True, address=lambda e: "127.0.0.1:8000" if e["Name"] == "vllm_server_0_0" else None,
                      health=health, on_death=fired.set)  # fmt: skip
    dog.start()
    assert fired.wait(10)
    dog.stop()
    dog.join(10)
    assert len(asked) == 8 and set(asked) == {"127.0.0.1:8000"}
    assert dog.report.startswith("Ray actor vLLMHttpServer 'vllm_server_0_0' (id 79443d9d235f, pid 4242, node "
                                 "127.0.0.1) died: ENGINE_DEAD: its vLLM engine answers no more at "
                                 "http://127.0.0.1:8000/health (2 checks in a row) although the actor lives")  # fmt: skip
    assert "last completed step 2" in dog.report


def test_engine_health_reads_vllms_answer(monkeypatch):
    import urllib.error
    import urllib.request

    class Answer:
        status = 200

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def fake(outcome):
        def urlopen(url, timeout):
            assert url == "http://h:1/health" and timeout == wd.HEALTH_TIMEOUT_S
            if isinstance(outcome, BaseException):
                raise outcome
            return Answer()
        return urlopen

    for outcome, want in [(None, True), (urllib.error.HTTPError("u", 503, "dead", {}, None), False),
                          (urllib.error.URLError(ConnectionRefusedError()), False), (ConnectionRefusedError(), False),
                          (TimeoutError(), None), (urllib.error.URLError(TimeoutError()), None)]:  # fmt: skip
        monkeypatch.setattr(urllib.request, "urlopen", fake(outcome))
        assert wd.engine_health("h:1") is want, outcome


def test_the_default_action_ends_the_runs_task_runner_by_its_actor_id(tmp_path):
    """The entry point waits on the TaskRunner with ray.get, which no signal interrupts (seen on the CPU recipe): the
    watchdog ends that actor (Ray's kill, by id), which returns the wait; other actors are left to Ray's shutdown."""
    runner = {**entry(cls="VerlExtTaskRunnerV1Impl"), "ActorID": "aa" * 16}
    ended = []
    dog = wd.Watchdog(poll_s=0.01, table=lambda: {"r": runner, "w": entry("DEAD", KILLED)}, job_id=lambda: JOB,
                      ready=lambda: True, end_actor=ended.append, grace_s=5, exit_process=lambda code: None)  # fmt: skip
    dog.start()
    for _ in range(1000):
        if ended:
            break
        threading.Event().wait(0.01)
    dog.stop()
    dog.join(10)
    assert ended == ["aa" * 16] and dog.report is not None


def test_a_servers_address_is_collected_without_waiting_and_every_answer_is_read(monkeypatch):
    """While a server starts, its get_server_address is queued (not ready) or fails (port None): no address yet, and
    each call's answer is read at a later poll (none left for Ray to log as unhandled); then the address."""
    import ray

    class Ref:
        def __init__(self, answer, ready):
            self.answer, self.ready, self.read = answer, ready, False

    calls = []
    answers = iter([Ref(AssertionError("port is None"), False), Ref(("127.0.0.1", 8000), True)])

    class Handle:
        class get_server_address:  # noqa: N801 (Ray's method name)
            @staticmethod
            def remote():
                calls.append(1)
                return next(answers)

    def get(ref):
        ref.read = True
        if isinstance(ref.answer, BaseException):
            raise ref.answer
        return ref.answer

    monkeypatch.setattr(ray, "get_actor", lambda name, namespace=None: Handle())
    monkeypatch.setattr(ray, "wait", lambda refs, timeout: ([r for r in refs if r.ready], [r for r in refs if not r.ready]))
    monkeypatch.setattr(ray, "get", get)
    addresses = wd.ServerAddresses()
    server = {**entry(cls="vLLMHttpServer"), "Name": "vllm_server_0_0"}
    first = addresses(server)  # queued behind the server's start
    assert first is None and len(calls) == 1
    pending = addresses._pending[str(server["ActorID"])]
    pending.ready = True  # it fails: the HTTP server was not up
    assert addresses(server) is None and pending.read and len(calls) == 1
    assert addresses(server) == "127.0.0.1:8000" and len(calls) == 2
