"""Samples that fail in verl's agent loop are counted where they fail and named as the run's last line
(``verl_ext.failures``, ``verl_ext.main_ppo``)."""

from __future__ import annotations

import logging

import pytest

from verl_ext import failures


def record(error: BaseException) -> logging.LogRecord:
    """The record verl's agent loop logs for a failed sample (verl/trainer/ppo/v1/agent_loop_tq.py)."""
    return logging.LogRecord(failures.AGENT_LOOP_LOGGER, logging.ERROR, __file__, 1, "Error in _run_prompt for uid=u1",
                             None, (type(error), error, None))  # fmt: skip


class Wrapped(Exception):
    """A remote task's error as Ray raises it: the remote exception as ``cause``."""

    def __init__(self, cause: BaseException):
        super().__init__("ray.exceptions.RayTaskError: the remote traceback ...")
        self.cause = cause


def test_a_failed_sample_is_counted_from_verls_agent_loop_log_record(monkeypatch):
    """The handler installed on verl's agent loop logger counts each failed-sample record, keeps the first one's
    innermost exception (a remote task's cause), ignores the logger's other records, and publishes its count at each
    record (the entry point reads the last one)."""
    handler = failures.SampleFailures()
    published = []
    monkeypatch.setattr(handler, "publish", lambda: published.append((handler.count, handler.first)))
    handler.emit(record(Wrapped(ValueError("compute_score failed on 'Answer: 7'"))))
    handler.emit(record(KeyError("reward_model")))
    other = logging.LogRecord(failures.AGENT_LOOP_LOGGER, logging.ERROR, __file__, 1, "Empty output", None, None)
    handler.emit(other)
    assert handler.count == 2 and handler.first == "ValueError: compute_score failed on 'Answer: 7'"
    assert published == [(1, "ValueError: compute_score failed on 'Answer: 7'"),
                         (2, "ValueError: compute_score failed on 'Answer: 7'")]
    assert failures.install() is failures.install()
    assert failures._handler in logging.getLogger("verl.trainer.ppo.v1.agent_loop_tq").handlers


def test_verl_exts_own_errors_are_not_blamed_on_failed_samples():
    """An exception verl_ext's code raised (wrapped by Ray or not) names its own cause; verl's or a library's does not."""
    from verl_ext.config import ConfigError
    from verl_ext.trainer.v1 import DynamicSamplingExhausted

    assert failures.own_error(Wrapped(DynamicSamplingExhausted("cannot fill")))
    assert failures.own_error(ConfigError("data.train_files", "bad"))
    assert not failures.own_error(Wrapped(ValueError("Received an empty list as keys.")))
    assert not failures.own_error(RuntimeError("Sync replay buffer selected terminal groups"))
