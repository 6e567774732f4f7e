"""A Ray actor of the run that dies unexpectedly stops the run, naming it, instead of leaving the trainer waiting.

verl's trainer waits on its workers with ``ray.get`` and, during the weight sync, on the rollout's own channel: a worker
killed there (Ray's memory monitor, the OOM killer, a segfault, its node lost) raises nothing. Every ``poll_s`` seconds
the watchdog reads this job's entries of Ray's actor table (the GCS's own; no dashboard needed): the first actor found
dead by anything but an intended end (``ray.kill``, its own exit, out of scope) is reported - class, name, pid, node,
Ray's reason (``NODE_DIED`` with the node's own) - with the last step of the run's file log and the latest checkpoint.

A vLLM engine can also die inside a live actor (verl's ``vLLMHttpServer`` stays; the weight sync waits for ever), so
it asks every rollout server's ``/health`` at once, each for at most ``health_timeout_s``, straight to the server (never
through a proxy of the environment: clusters set one, with a CIDR ``no_proxy`` that ``urllib`` ignores). vLLM answers
503 for a dead engine; 503 or a connection refused by the server is a failed check, ``health_failures`` in a row a
death. Anything else (a timeout, a reset, another status) is no answer. What it cannot read for :data:`BLIND_S` is
said once, as blindness, and again when it can.

On a death it ends the run's TaskRunner (Ray's kill by actor id: the entry point's ``ray.get`` returns, which no signal
makes it do), and ``python -m verl_ext.main_ppo`` shuts Ray down and exits 1. If the entry point has not stopped within
:data:`EXIT_GRACE_S` - or anything on the way fails - the watchdog shuts Ray down (for at most :data:`SHUTDOWN_S`) and
exits 1 itself. verl writes ``latest_checkpointed_iteration.txt`` after a checkpoint's folder, so the latest recorded
checkpoint is whole and ``trainer.resume_mode=auto`` resumes from it. Keys: ``verl_ext.watchdog.*``
(:class:`WatchdogConfig`).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_ext.driver.engine_health import (DEAD_ENGINE_STATUS, HEALTH_TIMEOUT_S, Probe, ServerAddresses,
                                             engine_health, http_address)
from verl_ext.driver.stall import Stall, StallCheck
from verl_ext.driver.watchdog_config import HEALTH_FAILURES, POLL_S, WatchdogConfig, watchdog_config

EXIT_GRACE_S = 60.0
"""Seconds the entry point has to stop after the TaskRunner is ended before the process exits by itself."""
SHUTDOWN_S = 20.0
"""Seconds the watchdog's own ``ray.shutdown`` may take before the process exits without it."""
BLIND_S = 60.0
"""Seconds a read keeps failing (or a server keeps not answering) before the watchdog says it is blind."""
TASK_RUNNER_PREFIX = "VerlExtTaskRunner"
"""verl_ext's TaskRunner actor classes (:mod:`verl_ext.trainer`): the actor whose end returns the entry point's wait."""
INTENDED_REASONS = ("RAY_KILL", "OUT_OF_SCOPE", "REF_DELETED", "OWNER_DIED")
"""``ActorDiedErrorContext.reason`` values not reported: an actor someone meant to end (verl's own clean-up kills
actors), and one that ended with its owner (the owner's own death is what is reported, or the run's normal end)."""
SERVER_CLASSES = ("vLLMHttpServer",)
"""verl's rollout server actors whose engine's ``/health`` is asked (``verl/workers/rollout/vllm_rollout``)."""
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
"""verl's record of the latest complete checkpoint, in ``trainer.default_local_dir``."""


@dataclass(frozen=True)
class Death:
    """An actor found dead, as the report names it."""

    actor_id: str
    class_name: str
    name: str
    pid: str
    node: str
    reason: str
    detail: str

    def describe(self) -> str:
        """One line: the actor, its node and Ray's reason."""
        named = f" '{self.name}'" if self.name else ""
        return (f"Ray actor {self.class_name}{named} (id {self.actor_id[:12]}, pid {self.pid}, node {self.node}) "
                f"died: {self.reason}: {self.detail}")  # fmt: skip


def death_of(entry: dict[str, Any]) -> Death | None:
    """The :class:`Death` an entry of Ray's actor table records, or ``None`` for an actor alive or ended on
    purpose. An actor lost with its node (``NODE_DIED``) is always a death: its reason names the node's own."""
    if entry.get("State") != "DEAD":
        return None
    cause = entry.get("DeathCause")
    kind = cause.WhichOneof("context") if cause is not None and hasattr(cause, "WhichOneof") else None
    context = getattr(cause, kind) if kind else None
    detail = " ".join(str(getattr(context, "error_message", "") or "").split())
    reason = kind or "unknown cause"
    if kind == "actor_died_error_context":
        reason = _enum_name(context, "reason")
        if reason == "NODE_DIED":
            if context.HasField("node_death_info"):
                reason = f"NODE_DIED ({_enum_name(context.node_death_info, 'reason')})"
        elif reason in INTENDED_REASONS or "INTENDED" in detail:  # INTENDED_USER_EXIT / INTENDED_SYSTEM_EXIT
            return None
    elif kind == "oom_context":
        reason = "OUT_OF_MEMORY (Ray's memory monitor)"
    address = entry.get("Address")
    node = address.get("IPAddress") if isinstance(address, dict) else None
    node = node or getattr(context, "node_ip_address", "") or "?"
    return Death(actor_id=str(entry.get("ActorID", "?")), class_name=str(entry.get("ActorClassName", "?")),
                 name=str(entry.get("Name") or ""), pid=str(entry.get("Pid", "?")), node=str(node), reason=reason,
                 detail=detail[:400] or "no detail")  # fmt: skip


def _enum_name(message: Any, field: str) -> str:
    enum = message.DESCRIPTOR.fields_by_name[field].enum_type
    value = getattr(message, field)
    return enum.values_by_number[value].name if value in enum.values_by_number else "UNKNOWN"


def last_step(run_log: str | None) -> int | None:
    """The last step verl's file log recorded (``None`` without a file log or a step in it)."""
    try:
        lines = Path(str(run_log)).read_text().splitlines() if run_log else []
    except OSError:
        return None
    for line in reversed(lines):
        try:
            step = json.loads(line).get("step")
        except (ValueError, AttributeError):
            continue
        if isinstance(step, int):
            return step
    return None


def latest_checkpoint(ckpt_dir: str | None) -> str | None:
    """The latest checkpoint verl recorded as complete, ``global_step_<N>`` (``None`` before the first)."""
    try:
        step = Path(str(ckpt_dir), CHECKPOINT_TRACKER).read_text().strip() if ckpt_dir else ""
    except OSError:
        return None
    return f"global_step_{step}" if step else None


def ray_actor_table(job: str) -> dict[str, dict[str, Any]]:
    """This job's entries of Ray's actor table, from the GCS (``ray._private.state.actors(job_id=ray.JobID)``: no
    dashboard needed); ``job`` is the job id's hex."""
    import ray
    from ray._private import state

    return state.actors(job_id=ray.JobID.from_hex(job))


def current_job_id() -> str:
    """This driver's Ray job id (hex)."""
    import ray

    return ray.get_runtime_context().get_job_id()


def kill_actor(actor_id: str) -> None:
    """End an actor by its id, as ``ray.kill`` does with a handle (``CoreWorker.kill_actor``, no restart)."""
    import ray

    ray._private.worker.global_worker.core_worker.kill_actor(ray.ActorID.from_hex(actor_id), True)


def shutdown_ray(timeout_s: float = SHUTDOWN_S) -> None:
    """``ray.shutdown()`` in a thread of its own, waited for at most ``timeout_s``."""
    import ray

    done = threading.Thread(target=ray.shutdown, daemon=True)
    done.start()
    done.join(timeout_s)


class Watchdog(threading.Thread):
    """Polls this job's actors in Ray's actor table for an unexpected death (:func:`death_of`) and the rollout
    servers' ``/health``; on the first death, records :attr:`report` and calls ``on_death``, then exits the process
    if it has not stopped within ``grace_s``. Daemon thread; :meth:`stop` ends it."""

    def __init__(self, run_log: str | None = None, ckpt_dir: str | None = None, poll_s: float = POLL_S,
                 table: Callable[[str], dict[str, dict[str, Any]]] = ray_actor_table,
                 job_id: Callable[[], str] = current_job_id, ready: Callable[[], bool] | None = None,
                 address: Callable[[dict[str, Any]], str | None] | None = None,
                 health: Callable[[str], bool | None] | None = None, health_failures: int = HEALTH_FAILURES,
                 health_timeout_s: float = HEALTH_TIMEOUT_S, on_death: Callable[[], None] | None = None,
                 grace_s: float = EXIT_GRACE_S, end_actor: Callable[[str], None] = kill_actor,
                 shutdown: Callable[[], None] = shutdown_ray, exit_process: Callable[[int], None] = os._exit,
                 blind_s: float = BLIND_S, stall: StallCheck | None = None) -> None:  # fmt: skip
        super().__init__(name="verl_ext-watchdog", daemon=True)
        self.run_log, self.ckpt_dir, self.poll_s, self.grace_s = run_log, ckpt_dir, poll_s, grace_s
        self.health_failures, self.health_timeout_s, self.blind_s = health_failures, health_timeout_s, blind_s
        self._table, self._job_id, self._ready = table, job_id, ready or _ray_initialized
        self._exit, self._end_actor, self._shutdown = exit_process, end_actor, shutdown
        self._on_death = on_death or self.end_task_runner
        self._entries: list[dict[str, Any]] = []
        self._address = address or ServerAddresses()
        self._health = health or (lambda where: engine_health(where, self.health_timeout_s))
        self._servers: dict[str, dict[str, Any]] = {}  # actor id -> address, failures in a row
        self._probes: dict[str, Probe] = {}  # actor id -> its check still running
        self._unread: dict[str, list[Any]] = {}  # what it cannot read -> [since, said blind]
        self._stall = stall
        self._stopped = threading.Event()
        self._reported = threading.Event()
        self.report: str | None = None

    def stop(self) -> None:
        """End the watch (the run ended on its own)."""
        self._stopped.set()

    def wait_for_report(self, timeout_s: float) -> str | None:
        """The report, waiting up to ``timeout_s`` for a death to be found (``None`` if none was): the trainer's own
        wait can fail first - an actor on a lost node is unreachable seconds before Ray's table marks the node dead."""
        if self.is_alive():
            self._reported.wait(timeout_s)
        return self.report

    def check(self, job: str) -> Death | None:
        """The first unexpected death among ``job``'s actors in the table now, or of a rollout server's engine.
        Raises if the table cannot be read."""
        entries = self._entries = [e for e in self._table(job).values() if str(e.get("JobID")) == job]
        for entry in entries:
            death = death_of(entry)
            if death is not None:
                return death
        servers = [e for e in entries if e.get("State") == "ALIVE" and e.get("ActorClassName") in SERVER_CLASSES
                   and e.get("Name")]  # fmt: skip
        answers = self._probe_all({key: where for key, where in map(self._server_address, servers) if where})
        for entry in servers:
            key = str(entry.get("ActorID"))
            if key in answers:
                death = self._engine_death(entry, answers[key])
                if death is not None:
                    return death
        return None

    def end_task_runner(self) -> None:
        """End the run's TaskRunner actor (the default action on a death): the entry point's wait on it returns."""
        for entry in self._entries:
            if entry.get("State") == "ALIVE" and str(entry.get("ActorClassName", "")).startswith(TASK_RUNNER_PREFIX):
                self._end_actor(str(entry["ActorID"]))

    def _server_address(self, entry: dict[str, Any]) -> tuple[str, str | None]:
        key = str(entry.get("ActorID"))
        known = self._servers.setdefault(key, {"address": None, "failed": 0})
        if known["address"] is None:
            source = f"the address of {entry.get('ActorClassName')} '{entry.get('Name')}'"
            try:
                known["address"] = self._address(entry)
            except Exception as exc:  # asked again at the next poll
                self._unreadable(source, repr(exc))
                return key, None
            self._readable(source)
        return key, known["address"]

    def _probe_all(self, addresses: dict[str, str]) -> dict[str, bool | None]:
        """Every server's ``/health`` at once: the answers within one check's time (``health_timeout_s``, plus a
        second), ``None`` for a server whose check has not ended (it is not asked again until it has)."""
        for key, where in addresses.items():
            if key not in self._probes:
                self._probes[key] = Probe(self._health, where)
                self._probes[key].start()
        deadline = time.monotonic() + self.health_timeout_s + 1.0
        answers: dict[str, bool | None] = {}
        for key, where in addresses.items():
            probe = self._probes[key]
            probe.join(max(0.0, deadline - time.monotonic()))
            source = f"the /health of the rollout server at http://{where}"
            if probe.is_alive() or probe.answer is None:
                answers[key] = None
                why = repr(probe.error) if probe.error else f"no answer within {self.health_timeout_s:g} s"
                self._unreadable(source, why, say_first=probe.error is not None)
            else:
                answers[key] = probe.answer
                self._readable(source)
            if not probe.is_alive():
                del self._probes[key]
        return answers

    def _engine_death(self, entry: dict[str, Any], answer: bool | None) -> Death | None:
        known = self._servers[str(entry.get("ActorID"))]
        if answer is True:
            known["failed"] = 0
        elif answer is False:
            known["failed"] += 1
            if known["failed"] >= self.health_failures:
                death = death_of({**entry, "State": "DEAD"}) or Death("?", "?", "", "?", "?", "", "")
                return Death(actor_id=death.actor_id, class_name=death.class_name, name=death.name, pid=death.pid,
                             node=death.node, reason="ENGINE_DEAD",
                             detail=f"its vLLM engine is dead: http://{known['address']}/health answered 503 or "
                                    f"refused the connection {known['failed']} checks in a row, although the actor "
                                    "lives")  # fmt: skip
        return None

    def _unreadable(self, source: str, why: str, say_first: bool = True) -> None:
        """``source`` could not be read: said at the first failure of a streak, and once as blindness after
        ``blind_s``."""
        now = time.monotonic()
        if source not in self._unread:
            self._unread[source] = [now, False]
            if say_first:
                _say(f"verl_ext watchdog: could not read {source} ({why}); still watching")
        since, said = self._unread[source]
        if not said and now - since >= self.blind_s:
            self._unread[source][1] = True
            _say(f"WARNING: verl_ext watchdog: the watchdog is blind: it could not read {source} for {now - since:.0f}"
                 f" s (last: {why}). This is not a death and the run goes on, but a dead worker there is not noticed "
                 "until it can read it again")  # fmt: skip

    def _readable(self, source: str) -> None:
        failing = self._unread.pop(source, None)
        if failing is not None and failing[1]:
            _say(f"verl_ext watchdog: it can read {source} again (blind for {time.monotonic() - failing[0]:.0f} s)")

    def run(self) -> None:  # noqa: D102 (threading.Thread)
        job = None
        while not self._stopped.wait(self.poll_s):
            try:
                if job is None:
                    if not self._ready():
                        continue
                    job = self._job_id()
                death = self.check(job)
            except Exception as exc:  # a failed read is not a death: say so and keep watching
                self._unreadable("Ray's actor table", repr(exc))
                continue
            self._readable("Ray's actor table")
            if death is None and self._stall is not None:
                try:
                    death = self._stall.check(job)
                except Exception as exc:  # as for the table: said, and the watch goes on
                    self._unreadable("the run's progress (Ray's GCS key-value store)", repr(exc))
                else:
                    self._readable("the run's progress (Ray's GCS key-value store)")
            if death is not None:
                self._stop_run(death)
                return

    def _stop_run(self, death: Death | Stall) -> None:
        """Report ``death``, end the TaskRunner, and exit the process if the run has not stopped within ``grace_s``:
        whatever fails on the way is said, and the exit still comes."""
        self.report = f"{death.describe()}. The run cannot progress and stops"
        try:
            try:
                self.report = self._full_report(death)
            except Exception as exc:
                _say(f"error: the watchdog could not read the last step or checkpoint ({exc!r})")
            _say(f"error: {self.report}")
            self._reported.set()
            self._on_death()
        except Exception as exc:
            _say(f"error: the watchdog could not end the run's TaskRunner ({exc!r}): the process exits in "
                 f"{self.grace_s:.0f} s")  # fmt: skip
        finally:
            self._reported.set()
            if not self._stopped.wait(self.grace_s):
                _say(f"error: the run did not stop within {self.grace_s:.0f} s: shutting Ray down and exiting")
                try:
                    self._shutdown()
                except Exception as exc:
                    _say(f"error: Ray's shutdown failed ({exc!r})")
                finally:
                    self._exit(1)

    def _full_report(self, death: Death | Stall) -> str:
        ckpt = latest_checkpoint(self.ckpt_dir)  # a step's checkpoint is written before its log line
        saved = ckpt.removeprefix("global_step_") if ckpt else ""
        known = [n for n in (last_step(self.run_log), int(saved) if saved.isdigit() else None) if n]
        step = max(known) if known else None
        return (f"{death.describe()}. The run cannot progress and stops: last completed step "
                f"{step if step is not None else 'none recorded' if self.run_log else 'unknown (no file log)'}, "
                f"latest checkpoint "
                f"{ckpt or 'none'}{f' in {self.ckpt_dir}' if ckpt else ''}")  # fmt: skip


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _ray_initialized() -> bool:
    import ray

    return ray.is_initialized()


__all__ = ["BLIND_S", "CHECKPOINT_TRACKER", "DEAD_ENGINE_STATUS", "Death", "EXIT_GRACE_S", "HEALTH_FAILURES",
           "HEALTH_TIMEOUT_S", "INTENDED_REASONS", "POLL_S", "SERVER_CLASSES", "SHUTDOWN_S", "TASK_RUNNER_PREFIX",
           "ServerAddresses", "Watchdog", "WatchdogConfig", "death_of", "engine_health", "http_address", "kill_actor",
           "last_step", "latest_checkpoint", "ray_actor_table", "shutdown_ray", "watchdog_config"]  # fmt: skip
