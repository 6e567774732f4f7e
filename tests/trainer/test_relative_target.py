"""Targets relative to the policy's own entropy (``target_unit=initial``, AER's anchor): ``H*_t = s_t x H_0`` with
``s_t`` the schedule of ``target`` / ``target_end`` and ``H_0`` the geometric mean of the first ``initial_steps``
usable steps' entropies.

* validation: the unit is one of ``nats`` / ``initial``, named in the error; ratios must be > 0; ``enable`` without
  a target says how to choose one;
* the anchoring steps only measure and apply the actuator's rest value; the controller acts after them on the
  absolute target (a pi trajectory computed by hand, with ``initial_steps=1`` to keep it short);
* the anchor, and an anchor in progress, go with the checkpoint (a resumed controller continues identically; a
  schema-2 state loads only in nats, a schema-3 one as a one-step anchor);
* a linear relative schedule, value by value.
"""

from __future__ import annotations

import json
import math

import pytest

from verl_ext.config import ConfigError
from verl_ext.control.entropy_control import EntropyControlConfig, EntropyController


def relative(**kwargs) -> EntropyControlConfig:
    """``target_unit=initial``; ``initial_steps=1`` unless given (one anchoring step keeps the hand-computed
    trajectories short; the default's own steps: :func:`test_the_default_anchor_is_the_geometric_mean_of_4_steps`)."""
    return EntropyControlConfig.from_mapping({"enable": True, "target_unit": "initial", "initial_steps": 1, **kwargs})


@pytest.mark.parametrize(("values", "key", "words"), [
    ({"target_unit": "ratio"}, "target_unit", "['nats', 'initial']"),
    ({"target_unit": "initial", "target": 0.0}, "target", "a ratio to the first step's entropy"),
    ({"target_unit": "initial", "schedule": "linear", "target": 1.0, "target_end": -0.5}, "target_end",
     "a ratio to the first step's entropy"),
    ({"target": -1.0}, "target", "nats per token"),
    ({}, "target", "target_unit=initial"),
    ({"target": 0.5, "target_unit": "initial", "initial_steps": 0}, "initial_steps", "an integer >= 1"),
    ({"target": 0.5, "initial_steps": 2}, "initial_steps", "target_unit=nats ignores it"),
])  # fmt: skip
def test_bad_target_units_and_ratios_name_the_key(values, key, words):
    with pytest.raises(ConfigError) as info:
        EntropyControlConfig.from_mapping({"enable": True, **values})
    assert info.value.key == f"verl_ext.entropy_control.{key}" and words in info.value.message


def test_the_default_unit_is_nats():
    assert EntropyControlConfig().target_unit == "nats"


def test_enable_without_a_target_is_an_error_that_says_how_to_choose_one(compose):
    """No entropy suits every model: the composed config with only enable=true fails at config time naming the key,
    with both ways to set it."""
    from verl_ext.checks.validation import check_driver_features

    with pytest.raises(ConfigError) as info:
        check_driver_features(compose("verl_ext.entropy_control.enable=true"))
    assert info.value.key == "verl_ext.entropy_control.target"
    assert "nats" in info.value.message and "target_unit=initial" in info.value.message
    assert EntropyControlConfig().target is None  # off, it needs none


def test_the_default_anchor_is_the_geometric_mean_of_4_steps():
    """initial_steps=4 (the default): steps 1-4 apply the rest value 0.01 and set no target; H_0 = (1 x 2 x 4 x 0.5)
    ^ (1/4) = sqrt(2); step 5 (H 0.5, target 0.5 sqrt 2) with pi kp 1, ki 0: 0.01 x sqrt(2) = 0.01414."""
    cfg = EntropyControlConfig(enable=True, target_unit="initial", target=0.5, controller="pi", actuator="entropy_coef",
                               kp=1.0, ki=0.0, coef_min=1e-4, coef_max=0.1, coef_init=0.01)  # fmt: skip
    assert cfg.initial_steps == 4
    controller = EntropyController(cfg)
    for step, h in enumerate([1.0, 2.0, 4.0, 0.5], start=1):
        value, metrics = controller.update(step, h)
        assert value == 0.01 and "entropy_control/error" not in metrics, step
    assert controller.anchor == pytest.approx(math.sqrt(2.0), rel=1e-12)
    value, metrics = controller.update(5, 0.5)
    assert metrics["entropy_control/target"] == pytest.approx(0.5 * math.sqrt(2.0), rel=1e-12)
    assert value == pytest.approx(0.01 * math.sqrt(2.0), rel=1e-12)


def test_an_anchor_in_progress_goes_with_the_checkpoint():
    cfg = EntropyControlConfig(enable=True, target_unit="initial", target=0.7)
    entropies = [2.0, 1.8, 1.5, 1.4, 1.2, 1.1]
    whole = EntropyController(cfg)
    want = [whole.update(s, h)[0] for s, h in enumerate(entropies, start=1)]
    first = EntropyController(cfg)
    for s, h in enumerate(entropies[:2], start=1):
        first.update(s, h)
    resumed = EntropyController(cfg)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert [resumed.update(s, h)[0] for s, h in enumerate(entropies[2:], start=3)] == want[2:]
    assert resumed.anchor == pytest.approx((2.0 * 1.8 * 1.5 * 1.4) ** 0.25, rel=1e-12)


def test_step_1_anchors_and_applies_the_rest_value_then_pi_acts_on_the_absolute_target():
    """pi on the coefficient, kp 1, ki 0, coefficient 0.01 at zero error, target 0.5 x H_1. By hand:
      step 1, H 2.0: anchor H_1 = 2.0, target 1.0, coefficient 0.01 (the rest value; the controller does not run)
      step 2, H 0.5: e = log(1.0 / 0.5) = log 2 -> 0.01 x 2 = 0.02
      step 3, H 2.0: e = log(1.0 / 2.0)         -> 0.005
    A controller in nats with target 0.5 would ask 0.01 x (0.5 / 0.5) = 0.01 at step 2: the anchor is what moves it."""
    cfg = relative(controller="pi", actuator="entropy_coef", target=0.5, kp=1.0, ki=0.0, coef_min=1e-4,
                   coef_max=0.1, coef_init=0.01)  # fmt: skip
    controller = EntropyController(cfg)
    value, metrics = controller.update(1, 2.0)
    assert value == 0.01 and controller.state.integral == 0.0
    assert metrics["entropy_control/anchor"] == 2.0 and metrics["entropy_control/target"] == 1.0
    assert metrics["entropy_control/entropy_coef"] == 0.01 and "entropy_control/error" not in metrics
    value, metrics = controller.update(2, 0.5)
    assert value == pytest.approx(0.02, rel=1e-12)
    assert metrics["entropy_control/target"] == 1.0 and metrics["entropy_control/anchor"] == 2.0
    assert metrics["entropy_control/error"] == pytest.approx(math.log(2.0), rel=1e-12)
    assert controller.update(3, 2.0)[0] == pytest.approx(0.005, rel=1e-12)


@pytest.mark.parametrize(("controller", "actuator"), [("pi", "clip_high"), ("auto", "entropy_coef")])
def test_the_rest_value_applies_at_the_anchoring_step_and_moves_after(controller, actuator):
    """PI on the clip bound, auto on the coefficient: step 1 applies the rest value whatever the entropy (1.0 against a target of 2 x 1.0,
    where a controller would act); step 2 at the same entropy moves it up (entropy below target)."""
    cfg = relative(controller=controller, actuator=actuator, target=2.0)
    made = EntropyController(cfg, clip_high=0.28)
    rest = made.actuator.init
    assert made.update(1, 1.0)[0] == rest
    assert made.update(2, 1.0)[0] > rest


def test_an_unusable_first_measurement_holds_and_the_next_usable_one_anchors():
    cfg = relative(controller="pi", actuator="entropy_coef", target=0.5, kp=1.0, ki=0.0, coef_min=1e-4,
                   coef_max=0.1, coef_init=0.01)  # fmt: skip
    controller = EntropyController(cfg)
    value, metrics = controller.update(1, math.nan)
    assert value == 0.01 and math.isnan(metrics["entropy_control/target"]) and controller.anchor is None
    value, metrics = controller.update(2, 3.0)
    assert value == 0.01 and controller.anchor == pytest.approx(3.0, rel=1e-12)
    assert metrics["entropy_control/target"] == pytest.approx(1.5, rel=1e-12)


def test_the_anchor_goes_with_the_checkpoint_and_a_resumed_run_keeps_the_target():
    """A run of 6 steps equals 3 steps, a state saved through JSON, and 3 more in a new controller; a new controller
    without the state would anchor at its first step (another target)."""
    cfg = relative(controller="auto", actuator="entropy_coef", target=0.7)
    entropies = [2.0, 1.8, 1.5, 1.4, 1.2, 1.1]
    whole = EntropyController(cfg)
    want = [whole.update(s, h) for s, h in enumerate(entropies, start=1)]
    first = EntropyController(cfg)
    for s, h in enumerate(entropies[:3], start=1):
        first.update(s, h)
    saved = json.loads(json.dumps(first.state_dict()))
    assert saved["schema"] == 4 and saved["target_unit"] == "initial" and saved["anchor"] == 2.0
    resumed = EntropyController(cfg)
    resumed.load_state_dict(saved)
    got = [resumed.update(s, h) for s, h in enumerate(entropies[3:], start=4)]
    for (value, metrics), (want_value, want_metrics) in zip(got, want[3:]):
        assert value == want_value and metrics["entropy_control/target"] == want_metrics["entropy_control/target"]
        assert metrics["entropy_control/target"] == pytest.approx(0.7 * 2.0, rel=1e-12)
    fresh = EntropyController(cfg)
    assert fresh.update(4, 1.4)[1]["entropy_control/target"] == pytest.approx(0.7 * 1.4, rel=1e-12)


def test_a_schema_2_state_loads_in_nats_and_is_refused_for_a_relative_target():
    """Schema 2 (before target_unit and the anchor) holds everything a target in nats needs."""
    nats = EntropyControlConfig(enable=True, controller="pi", actuator="entropy_coef", target=1.0, kp=1.0, ki=0.5)
    old = EntropyController(nats)
    for s, h in enumerate([0.5, 0.7], start=1):
        old.update(s, h)
    saved = old.state_dict()
    schema_2 = {k: v for k, v in saved.items() if k not in ("target_unit", "anchor")} | {"schema": 2}
    resumed = EntropyController(nats)
    resumed.load_state_dict(schema_2)
    assert resumed.state.integral == old.state.integral and resumed.update(3, 0.9)[0] == old.update(3, 0.9)[0]
    with pytest.raises(ConfigError) as info:
        EntropyController(relative(controller="pi", actuator="entropy_coef", target=1.0, kp=1.0,
                                   ki=0.5)).load_state_dict(schema_2)  # fmt: skip
    assert info.value.key == "verl_ext.entropy_control.target_unit" and "schema 2" in info.value.message


def test_a_linear_relative_schedule_moves_from_target_to_target_end_times_the_anchor():
    """target 1.0 -> target_end 0.5 over 5 steps, H_1 = 2.0: H*_t = (1 - 0.5 (t - 1) / 4) x 2 = 2.0, 1.75, 1.5,
    1.25, 1.0, then 1.0."""
    cfg = relative(controller="auto", actuator="entropy_coef", target=1.0, schedule="linear", target_end=0.5,
                   schedule_steps=5)  # fmt: skip
    controller = EntropyController(cfg)
    targets = [controller.update(s, h)[1]["entropy_control/target"]
               for s, h in enumerate([2.0, 1.9, 1.7, 1.6, 1.4, 1.3], start=1)]  # fmt: skip
    assert targets == pytest.approx([2.0, 1.75, 1.5, 1.25, 1.0, 1.0], rel=1e-12)


def test_the_dry_run_summary_names_the_unit(compose):
    from verl_ext.checks.validation import check_driver_features

    described = check_driver_features(compose("verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.target=0.5",
                                              "verl_ext.entropy_control.target_unit=initial"))  # fmt: skip
    assert described == ["entropy control: target 0.5 x the entropy of the first steps, controller auto on actuator "
                         "entropy_coef"]  # fmt: skip


def test_a_schema_3_state_loads_as_a_one_step_anchor():
    """Schema 3 anchored on one step: it resumes with initial_steps=1 and is refused, naming the key, with another."""
    cfg = relative(controller="pi", actuator="entropy_coef", target=0.5, kp=1.0, ki=0.5)
    old = EntropyController(cfg)
    for s, h in enumerate([2.0, 1.0], start=1):
        old.update(s, h)
    schema_3 = {k: v for k, v in old.state_dict().items() if k not in ("initial_steps", "anchor_logs")} | {"schema": 3}
    resumed = EntropyController(cfg)
    resumed.load_state_dict(schema_3)
    assert resumed.anchor == 2.0 and resumed.update(3, 0.9)[0] == old.update(3, 0.9)[0]
    with pytest.raises(ConfigError) as info:
        EntropyController(relative(controller="pi", actuator="entropy_coef", target=0.5, kp=1.0, ki=0.5,
                                   initial_steps=4)).load_state_dict(schema_3)  # fmt: skip
    assert info.value.key == "verl_ext.entropy_control.initial_steps"
