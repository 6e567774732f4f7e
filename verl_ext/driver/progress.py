"""The run's progress, from the trainer to the entry point's watchdog, and what the run's actors are doing.

The trainer runs in verl's TaskRunner actor, on any node; the watchdog in the entry point's driver. Each time verl's
trainer logs a step (``verl.utils.tracking.Tracking.log``: every trainer logs every step, whatever its loggers), the
TaskRunner writes the step to Ray's GCS key-value store (:mod:`verl_ext.gcs_store`) under this job's key
(:func:`published_progress`, a context
the TaskRunners enter for the run); the watchdog reads it (:func:`read_progress`) - nothing else to configure, no
file shared between nodes. :func:`running_methods` lists the job's actor methods running now and since when, from
the GCS's task events (no dashboard needed), for the report of a stalled run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from verl_ext import gcs_store


def progress_key(job: str) -> str:
    """This job's key (``job``: the job id's hex)."""
    return f"progress/{job}"


def publish_progress(step: int) -> None:
    """Record that the run logged ``step`` (at this wall-clock time) under its job's key."""
    import ray

    job = ray.get_runtime_context().get_job_id()
    gcs_store.put(progress_key(job), {"step": int(step), "time": time.time()})


def read_progress(job: str) -> tuple[int, float] | None:
    """The last step the run logged and when (wall clock), or ``None`` before the first."""
    value = gcs_store.get(progress_key(job))
    if value is None:
        return None
    return int(value["step"]), float(value["time"])


@contextlib.contextmanager
def published_progress() -> Iterator[None]:
    """While active, every ``Tracking.log(data, step)`` of verl's trainer also publishes ``step``
    (:func:`publish_progress`); verl's ``Tracking.log`` is restored afterwards. A failed publish is said once and does
    not stop the log."""
    from verl.utils import tracking

    original = tracking.Tracking.log
    said: list[bool] = []

    def log(self: Any, data: Any, step: Any, backend: Any = None) -> Any:
        result = original(self, data, step, backend)
        try:
            publish_progress(int(step))
        except Exception as exc:  # the watchdog then sees no progress: said here, not fatal to training
            if not said:
                said.append(True)
                print(f"warning: verl_ext could not publish the run's progress to the watchdog ({exc!r})", flush=True)
        return result

    tracking.Tracking.log = log
    try:
        yield
    finally:
        tracking.Tracking.log = original


def running_methods(job: str, now_s: float | None = None) -> list[tuple[str, float]]:
    """This job's actor methods running now (their task events show them running, not finished or failed), longest
    first: ``(class.method, seconds running)``. Empty if the GCS keeps no events of them."""
    from ray._private import state
    from ray.core.generated import common_pb2

    running = common_pb2.TaskStatus.Value("RUNNING")
    ended = {common_pb2.TaskStatus.Value(name) for name in ("FINISHED", "FAILED")}
    now_s = time.time() if now_s is None else now_s
    found: dict[str, float] = {}
    for event in state.state._get_all_task_events():
        info = event.task_info
        if info.job_id.hex() != job or info.type != common_pb2.TaskType.Value("ACTOR_TASK"):
            continue
        stamps = dict(event.state_updates.state_ts_ns)
        if running not in stamps or ended & stamps.keys():
            continue
        name = info.func_or_class_name
        seconds = now_s - stamps[running] / 1e9
        found[name] = max(found.get(name, 0.0), seconds)
    return sorted(found.items(), key=lambda item: -item[1])


__all__ = ["progress_key", "publish_progress", "published_progress", "read_progress", "running_methods"]
