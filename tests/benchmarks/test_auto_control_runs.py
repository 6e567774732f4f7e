"""``benchmarks/auto_control_runs.py``: its tracking figures compare each step's entropy with the target the run logged
at that step (a scheduled or relative target moves)."""

from __future__ import annotations

import json

import pytest


def test_auto_control_runs_compares_each_step_with_the_target_the_run_logged(tmp_path):
    """A controlled run whose logged target moves (a schedule) and whose entropy sits 10 % above it at every step:
    bias and per-step gap 10 %. With the module's constant TARGET the same log gives other figures: the test fails if
    the summary ignores the logged target. An uncontrolled log (no target logged) is compared with TARGET."""
    from benchmarks import auto_control_runs as acr

    def write(name: str, controlled: bool) -> None:
        with (tmp_path / name).open("w") as handle:
            for step in range(1, acr.STEPS + 1):
                target = 0.5 - 0.3 * (step - 1) / (acr.STEPS - 1)
                data = {"actor/entropy": 1.1 * target}
                if controlled:
                    data.update({"entropy_control/target": target, "entropy_control/entropy_coef": 0.01,
                                 "entropy_control/saturated": 0.0, "entropy_control/noise": 0.1,
                                 "entropy_control/gain": 1.0, "entropy_control/drift": 0.0})  # fmt: skip
                handle.write(json.dumps({"step": step, "data": data}) + "\n")

    write("scheduled.jsonl", True)
    write("plain.jsonl", False)
    got = acr.figures(acr.AutoRun("entropy_coef", "0", "scheduled.jsonl"), root=tmp_path)
    assert got["bias"] == pytest.approx(0.1, rel=1e-9) and got["per_step_gap"] == pytest.approx(0.1, rel=1e-9)
    assert got["block_gap"] == pytest.approx(0.1, rel=1e-9)
    plain = acr.figures(acr.AutoRun("vanilla", "0", "plain.jsonl"), root=tmp_path)
    assert abs(plain["bias"] - 0.1) > 0.05  # the same entropies against the constant TARGET


def test_steps_at_rest_count_apart_from_the_bound_that_acts_and_the_value_while_above_is_the_coefficients(tmp_path):
    """Steps 21-30: the coefficient on 0 (at rest) with the filtered entropy 50 % above the target; steps 31-40: on
    its maximum 0.1 with the entropy 50 % below. On a bound 100 %, of which 50 % at rest and 50 % a bound that acts;
    the value while above is the coefficient's there (0 here, 0.004 when it stays positive)."""
    from benchmarks import auto_control_runs as acr

    def write(name: str, coef_above: float) -> None:
        with (tmp_path / name).open("w") as handle:
            for step in range(1, acr.STEPS + 1):
                above = step <= 30
                data = {"actor/entropy": 0.3 * (1.5 if above else 0.5), "entropy_control/target": 0.3,
                        "entropy_control/entropy_coef": coef_above if above else 0.1,
                        "entropy_control/saturated": float(coef_above == 0.0 or not above),
                        "entropy_control/filtered_entropy": 0.3 * (1.5 if above else 0.5),
                        "entropy_control/noise": 0.1, "entropy_control/gain": 1.0, "entropy_control/drift": 0.0}
                handle.write(json.dumps({"step": step, "data": data}) + "\n")

    write("rest.jsonl", 0.0)
    write("positive.jsonl", 0.004)
    rest = acr.figures(acr.AutoRun("entropy_coef", "0", "rest.jsonl"), root=tmp_path)
    assert (rest["on_bound"], rest["at_rest"], rest["on_acting_bound"]) == (1.0, 0.5, 0.5)
    assert (rest["value_above"], rest["steps_above"]) == (0.0, 10)
    positive = acr.figures(acr.AutoRun("entropy_coef", "0", "positive.jsonl"), root=tmp_path)
    assert (positive["at_rest"], positive["on_acting_bound"]) == (0.0, 0.5)
    assert positive["value_above"] == pytest.approx(0.004)
