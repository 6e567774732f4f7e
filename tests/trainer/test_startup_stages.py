"""``verl_ext.main_ppo.run`` reads as its stages, in order, and the checks run in one stage: a dry run traced with
``sys.setprofile`` enters no module of ``verl_ext/checks/`` before validation, and after validation only the dry run's
summary (``checks/dry_run.py``); each stage function is called once."""

from __future__ import annotations

import sys

STAGES = ["preflight", "resolved", "report", "build_assets", "validate", "summary"]
"""What ``run`` calls for a dry run, in order (``verl_ext.main_ppo.run``'s docstring names them)."""


def trace_run(config) -> tuple[int, list[str], list[tuple[str, int]]]:
    """Run ``main_ppo.run(config)`` under a profiler: the exit status, the ``verl_ext`` modules entered (consecutive
    repeats collapsed) and the calls ``run`` itself made (function, index in the modules entered), in order."""
    from verl_ext import main_ppo

    entered: list[str] = []
    staged: list[tuple[str, int]] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("verl_ext"):
            return
        caller = frame.f_back
        if caller is not None and caller.f_code is main_ppo.run.__code__:
            staged.append((frame.f_code.co_name, len(entered)))
        if not entered or entered[-1] != module:
            entered.append(module)

    sys.setprofile(profile)
    try:
        status = main_ppo.run(config)
    finally:
        sys.setprofile(None)
    return status, entered, staged


def test_a_dry_run_enters_the_checks_in_the_validation_stage_only(compose, capsys):
    status, entered, staged = trace_run(compose("verl_ext.dry_run=true"))
    assert status == 0, capsys.readouterr().err[-3000:]
    assert [name for name, _ in staged] == STAGES, staged
    start = dict(staged)
    before, during, after = (entered[: start["validate"]], entered[start["validate"]: start["summary"]],
                             entered[start["summary"]:])  # fmt: skip
    assert not [m for m in before if m.startswith("verl_ext.checks")], before
    assert {"verl_ext.checks.dry_run", "verl_ext.checks.validation", "verl_ext.checks.recipe_checks",
            "verl_ext.checks.training_data"} <= set(during), during  # fmt: skip
    assert {m for m in after if m.startswith("verl_ext.checks")} == {"verl_ext.checks.dry_run"}, after
