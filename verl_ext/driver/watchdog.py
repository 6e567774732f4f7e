"""A Ray actor of the run that dies unexpectedly stops the run, naming it, instead of leaving the trainer waiting.

verl's trainer waits on its workers with ``ray.get`` and, during the weight sync, on the rollout's own channel. When a
worker is killed there (Ray's memory monitor, the kernel's OOM killer, a segfault), nothing raises: verl's V1 trainer
was seen waiting in ``update_weights`` for ever after Ray's memory monitor killed a vLLM worker. The watchdog polls
Ray's actor table (the GCS's own; no dashboard needed) every :data:`POLL_S` seconds from the entry point's process.
The first actor of this job found dead by anything but an intended end (``ray.kill``, its own exit, its handle going
out of scope) is reported - its class, name, pid, node and Ray's reason - with the last step the run's file log
completed and the latest checkpoint. A vLLM engine can also die inside a live Ray actor (the engine process killed or
crashed: verl's ``vLLMHttpServer`` actor stays, and the weight sync waits on the dead engine for ever), so the
watchdog also asks each rollout server's HTTP ``/health`` (vLLM's own endpoint, at the address verl's server reports
once its HTTP server is up): :data:`HEALTH_FAILURES` answers in a row that say the engine is dead (an HTTP error
status or a refused connection; a slow answer is not one) are reported as that server's death. The watchdog then ends the run's TaskRunner actor (Ray's own kill, by its
actor id: the entry point's ``ray.get`` on it returns at once, which a signal does not make it do), and ``python -m
verl_ext.main_ppo`` shuts Ray down and exits 1. If the entry point has not stopped within :data:`EXIT_GRACE_S`, Ray
is shut down from the watchdog's thread (for at most :data:`SHUTDOWN_S`) and the process exits 1.

A checkpoint is whole once verl has recorded it in ``latest_checkpointed_iteration.txt`` (it writes that file after
the checkpoint's folder), so stopping mid-step leaves the latest recorded checkpoint intact and ``trainer.resume_mode=
auto`` resumes from it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POLL_S = 5.0
"""Seconds between two reads of Ray's actor table."""
EXIT_GRACE_S = 60.0
"""Seconds the entry point has to stop after the TaskRunner is ended before the process exits by itself."""
SHUTDOWN_S = 20.0
"""Seconds the watchdog's own ``ray.shutdown`` may take before the process exits without it."""
TASK_RUNNER_PREFIX = "VerlExtTaskRunner"
"""verl_ext's TaskRunner actor classes (:mod:`verl_ext.trainer`): the actor whose end returns the entry point's wait."""
INTENDED_REASONS = ("RAY_KILL", "OUT_OF_SCOPE", "REF_DELETED", "OWNER_DIED")
"""``ActorDiedErrorContext.reason`` values not reported: an actor someone meant to end (verl's own clean-up kills
actors), and one that ended with its owner (the owner's own death is what is reported, or the run's normal end)."""
SERVER_CLASSES = ("vLLMHttpServer",)
"""verl's rollout server actors whose engine's ``/health`` is asked (``verl/workers/rollout/vllm_rollout``)."""
HEALTH_FAILURES = 2
"""Answers in a row (:data:`POLL_S` apart) that say an engine is dead before it is reported."""
HEALTH_TIMEOUT_S = 10.0
"""Seconds a ``/health`` request (and the server's address) may take; longer is a busy engine, not a dead one."""
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
        named = f" '{self.name}'" if self.name else ""
        return (f"Ray actor {self.class_name}{named} (id {self.actor_id[:12]}, pid {self.pid}, node {self.node}) "
                f"died: {self.reason}: {self.detail}")  # fmt: skip


def death_of(entry: dict[str, Any]) -> Death | None:
    """The :class:`Death` an entry of Ray's actor table records, or ``None`` for an actor alive or ended on
    purpose."""
    if entry.get("State") != "DEAD":
        return None
    cause = entry.get("DeathCause")
    kind = cause.WhichOneof("context") if cause is not None and hasattr(cause, "WhichOneof") else None
    context = getattr(cause, kind) if kind else None
    detail = " ".join(str(getattr(context, "error_message", "") or "").split())
    reason = kind or "unknown cause"
    if kind == "actor_died_error_context":
        enum = context.DESCRIPTOR.fields_by_name["reason"].enum_type
        reason = enum.values_by_number[context.reason].name if context.reason in enum.values_by_number else "UNKNOWN"
        if reason in INTENDED_REASONS or "INTENDED" in detail:  # INTENDED_USER_EXIT / INTENDED_SYSTEM_EXIT
            return None
    elif kind == "oom_context":
        reason = "OUT_OF_MEMORY (Ray's memory monitor)"
    address = entry.get("Address") or {}
    return Death(actor_id=str(entry.get("ActorID", "?")), class_name=str(entry.get("ActorClassName", "?")),
                 name=str(entry.get("Name") or ""), pid=str(entry.get("Pid", "?")),
                 node=str(address.get("IPAddress", "?") if isinstance(address, dict) else "?"), reason=reason,
                 detail=detail[:400] or "no detail")  # fmt: skip


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


class ServerAddresses:
    """``host:port`` of each rollout server actor's HTTP endpoint (its ``get_server_address``), asked without waiting:
    while a server starts, the call is queued behind its construction or fails (``port is None``); its answer is
    collected at a later poll, so no call is left unread (Ray would log an unread failure as an unhandled error)."""

    def __init__(self) -> None:
        self._pending: dict[str, Any] = {}

    def __call__(self, entry: dict[str, Any]) -> str | None:
        """The server's address, or ``None`` while it has none (asked again at the next poll)."""
        import ray

        key = str(entry.get("ActorID"))
        ref = self._pending.get(key)
        if ref is None:
            handle = ray.get_actor(entry["Name"], namespace=entry.get("RayNamespace"))
            ref = self._pending[key] = handle.get_server_address.remote()
        ready, _ = ray.wait([ref], timeout=0)
        if not ready:
            return None
        del self._pending[key]
        try:
            host, port = ray.get(ref)
        except Exception:  # its HTTP server not up yet: ask again
            return None
        return f"{host}:{port}" if host and port else None


def engine_health(address: str) -> bool | None:
    """``True``: ``/health`` answered 200; ``False``: the engine is dead (an error status, or the connection
    refused); ``None``: no answer in time (busy)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=HEALTH_TIMEOUT_S) as answer:
            return answer.status == 200
    except urllib.error.HTTPError:
        return False
    except (ConnectionRefusedError, ConnectionResetError):
        return False
    except urllib.error.URLError as exc:
        return False if isinstance(exc.reason, (ConnectionRefusedError, ConnectionResetError)) else None
    except (TimeoutError, OSError):
        return None


def ray_actor_table() -> dict[str, dict[str, Any]]:
    """Ray's actor table from the GCS (``ray._private.state.actors``: no dashboard needed)."""
    from ray._private import state

    return state.actors()


def current_job_id() -> str:
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
    """Polls Ray's actor table for an unexpected death of one of this job's actors (:func:`death_of`); on the first,
    records :attr:`report` and calls ``on_death``. Daemon thread; :meth:`stop` ends it."""

    def __init__(self, run_log: str | None = None, ckpt_dir: str | None = None, poll_s: float = POLL_S,
                 table: Callable[[], dict[str, dict[str, Any]]] = ray_actor_table,
                 job_id: Callable[[], str] = current_job_id, ready: Callable[[], bool] | None = None,
                 address: Callable[[dict[str, Any]], str | None] | None = None,
                 health: Callable[[str], bool | None] = engine_health,
                 on_death: Callable[[], None] | None = None, grace_s: float = EXIT_GRACE_S,
                 end_actor: Callable[[str], None] = kill_actor, shutdown: Callable[[], None] = shutdown_ray,
                 exit_process: Callable[[int], None] = os._exit) -> None:  # fmt: skip
        super().__init__(name="verl_ext-watchdog", daemon=True)
        self.run_log, self.ckpt_dir, self.poll_s, self.grace_s = run_log, ckpt_dir, poll_s, grace_s
        self._table, self._job_id, self._exit, self._end_actor, self._shutdown = table, job_id, exit_process, end_actor, shutdown
        self._on_death = on_death or self.end_task_runner
        self._entries: list[dict[str, Any]] = []
        self._ready = ready or _ray_initialized
        self._address, self._health = address or ServerAddresses(), health
        self._servers: dict[str, dict[str, Any]] = {}  # actor id -> address, failures in a row
        self._stopped = threading.Event()
        self.report: str | None = None

    def stop(self) -> None:
        """End the watch (the run ended on its own)."""
        self._stopped.set()

    def check(self, job: str) -> Death | None:
        """The first unexpected death among ``job``'s actors in the table now, or of a rollout server's engine."""
        entries = self._entries = [e for e in self._table().values() if str(e.get("JobID")) == job]
        for entry in entries:
            death = death_of(entry)
            if death is not None:
                return death
        for entry in entries:
            if entry.get("State") == "ALIVE" and entry.get("ActorClassName") in SERVER_CLASSES and entry.get("Name"):
                death = self._engine_death(entry)
                if death is not None:
                    return death
        return None

    def end_task_runner(self) -> None:
        """End the run's TaskRunner actor (the default action on a death): the entry point's wait on it returns."""
        for entry in self._entries:
            if entry.get("State") == "ALIVE" and str(entry.get("ActorClassName", "")).startswith(TASK_RUNNER_PREFIX):
                self._end_actor(str(entry["ActorID"]))

    def _engine_death(self, entry: dict[str, Any]) -> Death | None:
        known = self._servers.setdefault(str(entry.get("ActorID")), {"address": None, "failed": 0})
        if known["address"] is None:
            known["address"] = self._address(entry)
            if known["address"] is None:
                return None
        answer = self._health(known["address"])
        if answer is True:
            known["failed"] = 0
        elif answer is False:
            known["failed"] += 1
            if known["failed"] >= HEALTH_FAILURES:
                death = death_of({**entry, "State": "DEAD"}) or Death("?", "?", "", "?", "?", "", "")
                return Death(actor_id=death.actor_id, class_name=death.class_name, name=death.name, pid=death.pid,
                             node=death.node, reason="ENGINE_DEAD",
                             detail=f"its vLLM engine answers no more at http://{known['address']}/health "
                                    f"({known['failed']} checks in a row) although the actor lives")  # fmt: skip
        return None

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
                print(f"verl_ext watchdog: could not read Ray's actor table or a server's health ({exc!r}); still "
                      "watching", file=sys.stderr)  # fmt: skip
                continue
            if death is None:
                continue
            ckpt = latest_checkpoint(self.ckpt_dir)  # a step's checkpoint is written before its log line
            known = [n for n in (last_step(self.run_log), ckpt and int(ckpt.removeprefix("global_step_"))) if n]
            step = max(known) if known else None
            self.report = (f"{death.describe()}. The run cannot progress and stops: last completed step "
                           f"{step if step is not None else 'unknown (no file log)'}, latest checkpoint "
                           f"{ckpt or 'none'}{f' in {self.ckpt_dir}' if ckpt else ''}")  # fmt: skip
            print(f"error: {self.report}", file=sys.stderr, flush=True)
            self._on_death()
            if not self._stopped.wait(self.grace_s):
                print(f"error: the run did not stop within {self.grace_s:.0f} s: shutting Ray down and exiting",
                      file=sys.stderr, flush=True)  # fmt: skip
                self._shutdown()
                self._exit(1)
            return


def _ray_initialized() -> bool:
    import ray

    return ray.is_initialized()


__all__ = ["CHECKPOINT_TRACKER", "Death", "EXIT_GRACE_S", "HEALTH_FAILURES", "HEALTH_TIMEOUT_S", "INTENDED_REASONS",
           "POLL_S", "SERVER_CLASSES", "SHUTDOWN_S", "TASK_RUNNER_PREFIX", "Watchdog", "death_of", "engine_health",
           "ServerAddresses", "kill_actor", "last_step", "latest_checkpoint", "ray_actor_table", "shutdown_ray"]  # fmt: skip
