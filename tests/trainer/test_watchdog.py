"""The watchdog (verl_ext.driver.watchdog): an actor of the run that dies unexpectedly - killed, out of memory, its
node gone - is reported once, naming the actor, its node, Ray's reason, the last completed step and the latest
checkpoint, and the run's TaskRunner is ended; an actor ended on purpose (ray.kill, its own exit, out of scope), an
actor of another job, and a live one are not; a run that does not stop - or a failure on the way to stopping it - is
followed by the process's own exit. A vLLM engine's /health is asked straight (no proxy), every server at once, and
only vLLM's answer for a dead engine (503) or a refused connection count against it. Ray's actor table is faked with
entries built from Ray's own protobuf classes (no Ray started here); /health is asked of real loopback servers."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time

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
    # an actor lost with its node: the node's address and the node's own death reason (its Address is cleared)
    fields = common_pb2.ActorDiedErrorContext.DESCRIPTOR.fields_by_name
    assert {"error_message", "node_ip_address", "node_death_info"} <= set(fields)
    node_reasons = set(common_pb2.NodeDeathInfo.DESCRIPTOR.fields_by_name["reason"].enum_type.values_by_name)
    assert {"EXPECTED_TERMINATION", "UNEXPECTED_TERMINATION"} <= node_reasons


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

    def table(job):
        nonlocal last
        assert job == JOB
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

    def flaky(job):
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
    assert "could not read Ray's actor table (ConnectionError('GCS busy')); still watching" in capsys.readouterr().err


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
    dog = wd.Watchdog(run_log=str(log), poll_s=0.01, table=lambda job: {"s": server}, job_id=lambda: JOB,
                      ready=lambda: True, address=lambda e: "127.0.0.1:8000" if e["Name"] == "vllm_server_0_0" else None,
                      health=health, on_death=fired.set)  # fmt: skip
    dog.start()
    assert fired.wait(10)
    dog.stop()
    dog.join(10)
    assert len(asked) == 8 and set(asked) == {"127.0.0.1:8000"}
    assert dog.report.startswith("Ray actor vLLMHttpServer 'vllm_server_0_0' (id 79443d9d235f, pid 4242, node "
                                 "127.0.0.1) died: ENGINE_DEAD: its vLLM engine is dead: http://127.0.0.1:8000/health "
                                 "answered 503 or refused the connection 2 checks in a row, although the actor lives")
    assert "last completed step 2" in dog.report


def test_the_default_action_ends_the_runs_task_runner_by_its_actor_id(tmp_path):
    """The entry point waits on the TaskRunner with ray.get, which no signal interrupts (seen on the CPU recipe): the
    watchdog ends that actor (Ray's kill, by id), which returns the wait; other actors are left to Ray's shutdown."""
    runner = {**entry(cls="VerlExtTaskRunnerV1Impl"), "ActorID": "aa" * 16}
    ended = []
    dog = wd.Watchdog(poll_s=0.01, table=lambda job: {"r": runner, "w": entry("DEAD", KILLED)}, job_id=lambda: JOB,
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


# ----------------------------------------------------------------------------------------------------------
# an actor lost with its node
# ----------------------------------------------------------------------------------------------------------

def node_died(node_reason: str, node_message: str, node_ip: str) -> common_pb2.ActorDeathCause:
    """The cause Ray's GCS records for an actor whose node died (``GcsActorManager::GenNodeDiedCause``): reason
    NODE_DIED, the node's NodeDeathInfo, the actor's last node address; the GCS clears the actor's Address."""
    cause = died("NODE_DIED", f"The actor died because its node has died. Node Id: {'ab' * 28}\n\tthe actor's node "
                              f"was terminated {node_message}")  # fmt: skip
    context = cause.actor_died_error_context
    context.node_ip_address = node_ip
    context.node_death_info.reason = common_pb2.NodeDeathInfo.Reason.Value(node_reason)
    context.node_death_info.reason_message = node_message
    return cause


@pytest.mark.parametrize(("node_reason", "message"), [
    ("UNEXPECTED_TERMINATION", "unexpectedly: health check failed due to missing too many heartbeats"),
    ("EXPECTED_TERMINATION", "expectedly: received SIGTERM"),  # `ray stop` on a worker node mid-run
])  # fmt: skip
def test_an_actor_lost_with_its_node_is_reported_naming_the_node(node_reason, message):
    dead = {**entry("DEAD", node_died(node_reason, message, "10.0.0.7"), cls="ActorRolloutRefWorker"),
            "Address": {"IPAddress": "", "Port": 0, "NodeID": ""}}  # fmt: skip
    death = wd.death_of(dead)
    assert death is not None and death.node == "10.0.0.7" and death.reason == f"NODE_DIED ({node_reason})"
    assert death.describe().startswith(f"Ray actor ActorRolloutRefWorker (id 79443d9d235f, pid 4242, node 10.0.0.7) "
                                       f"died: NODE_DIED ({node_reason}): The actor died because its node has died.")
    assert message in death.describe()


# ----------------------------------------------------------------------------------------------------------
# this job's actors only
# ----------------------------------------------------------------------------------------------------------

def test_the_table_is_read_for_this_job_only_from_the_gcs(monkeypatch):
    """Ray's actor table holds every job's actors (a cluster runs many): the watchdog asks the GCS for this job's
    (``ray._private.state.actors(job_id=ray.JobID)``) and passes the job to its table."""
    import ray
    from ray._private import state

    asked = []
    monkeypatch.setattr(state, "actors", lambda **kwargs: asked.append(kwargs) or {"a": entry()})
    assert wd.ray_actor_table(JOB) == {"a": entry()}
    assert len(asked) == 1 and isinstance(asked[0].get("job_id"), ray.JobID) and asked[0]["job_id"].hex() == JOB
    assert asked[0].get("actor_id") is None


# ----------------------------------------------------------------------------------------------------------
# /health: straight to the server, and only vLLM's dead-engine answer counts
# ----------------------------------------------------------------------------------------------------------

class Answering(http.server.ThreadingHTTPServer):
    """A loopback HTTP server answering every GET with ``status`` (vLLM's /health: 200, or 503 for a dead engine)."""

    daemon_threads = True

    def __init__(self, status: int, host: str = "127.0.0.1"):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.status, self.paths = status, []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(handler):  # noqa: N805
                self.paths.append(handler.path)
                handler.send_response(self.status)
                handler.send_header("Content-Length", "0")
                handler.end_headers()

            def log_message(handler, *args):  # noqa: N805
                pass

        super().__init__((host, 0), Handler)
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture()
def serving():
    started = []

    def start(status: int, host: str = "127.0.0.1") -> Answering:
        started.append(Answering(status, host))
        return started[-1]

    yield start
    for server in started:
        server.close()


def free_port() -> int:
    """A loopback port nothing listens on (a connection to it is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("proxy", ["refusing", "answering 502", "answering 403"])
def test_health_goes_straight_to_the_server_whatever_proxy_the_environment_sets(serving, monkeypatch, proxy):
    """A cluster's environment sets http_proxy, with no_proxy in CIDR form (which urllib ignores): a proxy that refuses
    the connection, or answers 502 / 403 for the node's address, is not the engine's answer."""
    engine = serving(200)
    proxy_url = (f"http://127.0.0.1:{free_port()}" if proxy == "refusing" else
                 f"http://127.0.0.1:{serving(int(proxy.split()[-1])).server_address[1]}")  # fmt: skip
    for variable in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(variable, proxy_url)
    monkeypatch.setenv("no_proxy", "10.0.0.0/8,127.0.0.0/8")
    monkeypatch.setenv("NO_PROXY", "10.0.0.0/8,127.0.0.0/8")
    assert wd.engine_health(f"127.0.0.1:{engine.server_address[1]}", timeout_s=5) is True
    assert engine.paths == ["/health"]


@pytest.mark.parametrize(("status", "want"), [(200, True), (503, False), (500, None), (502, None), (403, None),
                                              (404, None)])  # fmt: skip
def test_only_vllms_dead_engine_answer_is_a_failed_check(serving, status, want):
    """vLLM's /health answers 503 for a dead engine (EngineDeadError) and 200 otherwise; any other status comes from
    something else (a gateway, a proxy, a server that is not vLLM) and says nothing of the engine."""
    server = serving(status)
    assert wd.engine_health(f"127.0.0.1:{server.server_address[1]}", timeout_s=5) is want


def test_a_refused_connection_is_a_failed_check_and_a_silent_or_closing_server_is_no_answer():
    assert wd.engine_health(f"127.0.0.1:{free_port()}", timeout_s=5) is False
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (the backlog), never answers
        started = time.monotonic()
        assert wd.engine_health(f"127.0.0.1:{silent.getsockname()[1]}", timeout_s=0.3) is None
        assert time.monotonic() - started < 3
    with socket.create_server(("127.0.0.1", 0)) as closing:  # accepts and closes without an answer

        def close_one():
            connection, _ = closing.accept()
            connection.close()

        threading.Thread(target=close_one, daemon=True).start()
        assert wd.engine_health(f"127.0.0.1:{closing.getsockname()[1]}", timeout_s=5) is None


def test_an_ipv6_servers_health_is_asked_in_brackets(serving):
    try:
        server = serving(200, "::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    assert wd.engine_health(f"[::1]:{server.server_address[1]}", timeout_s=5) is True


@pytest.mark.parametrize(("answer", "address"), [(("127.0.0.1", 8000), "127.0.0.1:8000"), (("::1", 8000), "[::1]:8000"),
                                                 (("fd00::5", 41000), "[fd00::5]:41000")])  # fmt: skip
def test_a_servers_ipv6_host_is_bracketed(monkeypatch, answer, address):
    import ray

    class Handle:
        class get_server_address:  # noqa: N801 (Ray's method name)
            @staticmethod
            def remote():
                return answer

    monkeypatch.setattr(ray, "get_actor", lambda name, namespace=None: Handle())
    monkeypatch.setattr(ray, "wait", lambda refs, timeout: (refs, []))
    monkeypatch.setattr(ray, "get", lambda ref: ref)
    assert wd.ServerAddresses()({**entry(), "Name": "vllm_server_0_0"}) == address


# ----------------------------------------------------------------------------------------------------------
# every server at once
# ----------------------------------------------------------------------------------------------------------

def servers(n: int) -> dict:
    return {f"s{i}": {**entry(), "ActorID": f"{i:032x}", "Name": f"vllm_server_{i}_0"} for i in range(n)}


def test_every_servers_health_is_asked_at_once_so_a_poll_takes_about_one_check():
    """Eight busy servers each taking 0.5 s: asked one after another a poll would take 4 s."""
    asked = []

    def slow(address):
        asked.append(address)
        time.sleep(0.5)
        return True

    dog = wd.Watchdog(table=lambda job: servers(8), address=lambda e: f"10.0.0.{e['Name'].split('_')[2]}:8000",
                      health=slow, health_timeout_s=1.0)  # fmt: skip
    started = time.monotonic()
    assert dog.check(JOB) is None
    assert time.monotonic() - started < 2.0 and sorted(asked) == sorted(f"10.0.0.{i}:8000" for i in range(8))


def test_a_hung_check_is_no_answer_within_the_timeout_and_is_not_asked_again_while_it_hangs():
    release, asked = threading.Event(), []

    def health(address):
        asked.append(address)
        if address == "10.0.0.0:8000":
            release.wait(10)  # hangs past any timeout
        return True

    dog = wd.Watchdog(table=lambda job: servers(3), address=lambda e: f"10.0.0.{e['Name'].split('_')[2]}:8000",
                      health=health, health_timeout_s=0.2)  # fmt: skip
    try:
        started = time.monotonic()
        assert dog.check(JOB) is None
        assert time.monotonic() - started < 3.0
        assert dog.check(JOB) is None
        assert sorted(asked) == ["10.0.0.0:8000", "10.0.0.1:8000", "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.2:8000"]
    finally:
        release.set()


# ----------------------------------------------------------------------------------------------------------
# stopping always ends in an exit
# ----------------------------------------------------------------------------------------------------------

def test_a_failure_on_the_way_to_stopping_still_ends_in_the_exit(tmp_path, capsys):
    """Ending the TaskRunner reaches Ray's private core worker: if it raises, the entry point stays in ray.get, so the
    process must still exit after the grace period."""
    exits = []

    def failing_end():
        raise RuntimeError("core_worker has no kill_actor")

    dog = wd.Watchdog(ckpt_dir=str(tmp_path), poll_s=0.01, table=lambda job: {"w": entry("DEAD", KILLED)},
                      job_id=lambda: JOB, ready=lambda: True, on_death=failing_end, grace_s=0.05,
                      exit_process=exits.append, shutdown=lambda: exits.append("shutdown"))  # fmt: skip
    dog.start()
    dog.join(10)
    assert exits == ["shutdown", 1] and dog.report.startswith("Ray actor vLLMHttpServer")
    err = capsys.readouterr().err
    assert "RuntimeError('core_worker has no kill_actor')" in err and f"error: {dog.report}" in err


def test_an_unreadable_checkpoint_record_and_a_failing_shutdown_still_end_in_the_exit(tmp_path, capsys):
    (tmp_path / wd.CHECKPOINT_TRACKER).write_text("partial\n")  # not a step number
    exits = []

    def failing_shutdown():
        exits.append("shutdown")
        raise RuntimeError("GCS gone")

    dog = wd.Watchdog(ckpt_dir=str(tmp_path), poll_s=0.01, table=lambda job: {"w": entry("DEAD", KILLED)},
                      job_id=lambda: JOB, ready=lambda: True, on_death=lambda: None, grace_s=0.05,
                      exit_process=exits.append, shutdown=failing_shutdown)  # fmt: skip
    dog.start()
    dog.join(10)
    assert exits == ["shutdown", 1] and "WORKER_DIED" in dog.report
    assert "RuntimeError('GCS gone')" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------
# blindness is said once
# ----------------------------------------------------------------------------------------------------------

def test_a_table_it_cannot_read_is_said_once_then_once_as_blindness_then_once_when_it_reads_again(capsys):
    reads, failing = [], threading.Event()
    failing.set()

    def table(job):
        reads.append(1)
        if failing.is_set():
            raise ConnectionError("GCS unreachable")
        return {"a": entry()}

    fired = threading.Event()
    dog = wd.Watchdog(poll_s=0.005, table=table, job_id=lambda: JOB, ready=lambda: True, on_death=fired.set,
                      blind_s=0.2)  # fmt: skip
    dog.start()
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:
        time.sleep(0.01)
    failing.clear()
    count = len(reads)
    while len(reads) < count + 10:
        time.sleep(0.01)
    dog.stop()
    dog.join(10)
    assert count > 20 and not fired.is_set() and dog.report is None
    lines = capsys.readouterr().err.splitlines()
    assert [x for x in lines if x.startswith("verl_ext watchdog: could not read")] == [
        "verl_ext watchdog: could not read Ray's actor table (ConnectionError('GCS unreachable')); still watching"]
    blind = [x for x in lines if "the watchdog is blind" in x]
    assert len(blind) == 1 and blind[0].startswith("WARNING: verl_ext watchdog: the watchdog is blind: it could not "
                                                   "read Ray's actor table for ")  # fmt: skip
    assert "This is not a death" in blind[0]
    again = [x for x in lines if x.startswith("verl_ext watchdog: it can read Ray's actor table again (blind for ")]
    assert len(again) == 1 and len(lines) == 3, lines


def test_a_server_that_never_answers_is_said_once_as_blindness_not_as_a_death(capsys):
    dog = wd.Watchdog(table=lambda job: servers(1), address=lambda e: "10.0.0.9:8000", health=lambda a: None,
                      health_timeout_s=0.05, blind_s=0.1)  # fmt: skip
    for _ in range(30):
        assert dog.check(JOB) is None
        time.sleep(0.01)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "the watchdog is blind: it could not read the /health of the rollout server at " \
                               "http://10.0.0.9:8000" in lines[0], lines


# ----------------------------------------------------------------------------------------------------------
# verl_ext.watchdog.*
# ----------------------------------------------------------------------------------------------------------

def test_the_yaml_keys_are_the_dataclass_fields_with_its_defaults(compose):
    from dataclasses import fields

    from omegaconf import OmegaConf

    section = OmegaConf.to_container(compose(base=()).verl_ext.watchdog, resolve=True)
    assert section == {"enable": True, "poll_s": 5.0, "health_failures": 2, "health_timeout_s": 10.0, "stall_s": "auto",
                       "stall_first_s": 14400.0}
    assert section == {f.name: f.default for f in fields(wd.WatchdogConfig)}
    assert wd.watchdog_config(compose(base=())) == wd.WatchdogConfig()


@pytest.mark.parametrize(("values", "key", "allowed"), [
    ({"enable": "yes"}, "enable", "allowed true or false"),
    ({"poll_s": 0}, "poll_s", "allowed a number of seconds > 0"),
    ({"poll_s": -5.0}, "poll_s", "allowed a number of seconds > 0"),
    ({"poll_s": True}, "poll_s", "allowed a number of seconds > 0"),
    ({"health_timeout_s": 0.0}, "health_timeout_s", "allowed a number of seconds > 0"),
    ({"health_timeout_s": float("inf")}, "health_timeout_s", "allowed a number of seconds > 0"),
    ({"health_failures": 0}, "health_failures", "allowed an integer >= 1"),
    ({"health_failures": 1.5}, "health_failures", "allowed an integer >= 1"),
    ({"health_failure": 3}, "health_failure", "is not a key of verl_ext.watchdog"),
])  # fmt: skip
def test_a_bad_value_is_an_error_naming_the_key_and_the_allowed_values(values, key, allowed):
    from verl_ext.config import ConfigError

    with pytest.raises(ConfigError) as error:
        wd.WatchdogConfig.from_mapping(values)
    assert error.value.key == f"verl_ext.watchdog.{key}" and allowed in error.value.message


def test_the_keys_reach_the_watchdog():
    settings = wd.WatchdogConfig.from_mapping({"poll_s": 2, "health_failures": 4, "health_timeout_s": 3})
    assert (settings.poll_s, settings.health_failures, settings.health_timeout_s) == (2.0, 4, 3.0)
    assert isinstance(settings.poll_s, float)


def test_a_death_found_after_the_trainer_failed_is_waited_for():
    """An actor on a lost node is unreachable before Ray marks the node dead: the trainer's wait fails first, and the
    entry point waits (``wait_for_report``) for the death the watchdog finds a few polls later."""
    polls = iter([{"a": entry()}] * 20)
    dog = wd.Watchdog(poll_s=0.01, table=lambda job: next(polls, {"a": entry("DEAD", died("NODE_DIED", "lost"))}),
                      job_id=lambda: JOB, ready=lambda: True, on_death=lambda: None, grace_s=5.0,
                      exit_process=lambda code: None)  # fmt: skip
    dog.start()
    try:
        assert dog.report is None  # nothing yet when the trainer failed
        report = dog.wait_for_report(10)
        assert report is not None and "NODE_DIED" in report and "node 127.0.0.1" in report
    finally:
        dog.stop()
        dog.join(10)


def test_waiting_for_a_report_that_never_comes_ends_at_its_timeout():
    dog = wd.Watchdog(poll_s=0.01, table=lambda job: {"a": entry()}, job_id=lambda: JOB, ready=lambda: True)
    dog.start()
    try:
        started = time.monotonic()
        assert dog.wait_for_report(0.3) is None
        assert 0.25 < time.monotonic() - started < 5
    finally:
        dog.stop()
        dog.join(10)
