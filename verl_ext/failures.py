"""Samples that failed in verl's rollout or reward loop, counted where they fail and named where the run ends.

verl's V1 agent loop catches each sample's exception - a reward function that raises, a scorer that does not know the
data source, a rollout that fails - logs it (``Error in _run_prompt``, logger ``verl.trainer.ppo.v1.agent_loop_tq``,
in its own worker process), and marks the prompt failed; when no sample of a step is left, verl's replay buffer ends
the run with advice about refilling failed groups, thousands of log lines after the cause. :class:`SampleFailures`, a
logging handler on that logger (:func:`install`, from the ``verl.plugins`` entry point in every verl process), counts
those records and keeps the first one's exception; each worker publishes its count and first exception to Ray's GCS
at each record (one small write per failed sample, :mod:`verl_ext.gcs_store`), and the entry point reads them
(:func:`read_failures`) when the trainer stops with an exception, so that the run's last line is the cause. Imports
:mod:`verl_ext.gcs_store` only (level 0).
"""

from __future__ import annotations

import logging
import os
import time

from verl_ext import gcs_store

AGENT_LOOP_LOGGER = "verl.trainer.ppo.v1.agent_loop_tq"
"""verl's V1 agent loop's logger, which logs each failed sample with its exception."""
MESSAGE_PREFIX = "Error in _run_prompt"
"""How that logger's record of a failed sample begins."""


def _key(job: str, pid: int | None = None) -> str:
    return f"failures/{job}/{'' if pid is None else pid}"


def _cause(error: BaseException) -> BaseException:
    """The exception a remote task's error wraps (Ray's ``RayTaskError.cause``), innermost first."""
    seen: set[int] = set()
    while getattr(error, "cause", None) is not None and id(error) not in seen:
        seen.add(id(error))
        error = error.cause
    return error


class SampleFailures(logging.Handler):
    """Counts the agent loop's failed-sample records of this process and publishes the count and the first one."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.count = 0
        self.first: str | None = None
        self.first_at = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        if not str(record.msg).startswith(MESSAGE_PREFIX):
            return
        self.count += 1
        if self.first is None:
            error = record.exc_info[1] if record.exc_info else None
            cause = _cause(error) if error is not None else None
            self.first = f"{type(cause).__name__}: {cause}" if cause is not None else record.getMessage()
            self.first_at = time.time()
        try:
            self.publish()
        except Exception:  # never the reason a sample's log fails
            pass

    def publish(self) -> None:
        import ray

        job = ray.get_runtime_context().get_job_id()
        gcs_store.put(_key(job, os.getpid()), {"count": self.count, "first": self.first, "time": self.first_at})


_handler: SampleFailures | None = None


def install() -> SampleFailures:
    """Put :class:`SampleFailures` on the agent loop's logger of this process (once)."""
    global _handler
    if _handler is None:
        _handler = SampleFailures()
        logging.getLogger(AGENT_LOOP_LOGGER).addHandler(_handler)
    return _handler


def read_failures(job: str) -> tuple[int, str] | None:
    """The samples of this job that failed in the agent loop, over every worker: (count, the earliest first
    exception), or ``None`` if none did (or none was published)."""
    found = gcs_store.get_all(_key(job))
    if not found:
        return None
    first = min(found, key=lambda item: item["time"])
    return sum(int(item["count"]) for item in found), str(first["first"])


def own_error(error: BaseException) -> bool:
    """Whether ``error`` (a remote task's, unwrapped) was raised by verl_ext's own code, which names its cause itself
    (``DynamicSamplingExhausted``, a ``ConfigError``): failed samples are then not what stopped the run."""
    return type(_cause(error)).__module__.split(".")[0] == "verl_ext"


def stopped_line(count: int, first: str) -> str:
    """The run's last line when samples failed and the trainer stopped."""
    return (f"verl_ext: stopped: {count} sample(s) failed in verl's rollout or reward loop, the first with {first} "
            "(logged in full by the agent loop workers above)")


__all__ = ["AGENT_LOOP_LOGGER", "MESSAGE_PREFIX", "SampleFailures", "install", "own_error", "read_failures",
           "stopped_line"]
