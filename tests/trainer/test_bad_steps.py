"""Every entropy controller against bad measurements: NaN, inf, 0 and a 10-sigma outlier mid-run; the stop after
``max_bad_steps`` in a row; auto's first move; and the checkpoint's schema, settings and atomic write."""

from __future__ import annotations

import json
import logging
import math
import os

import pytest

from verl_ext.config import ConfigError
from verl_ext.contract import CONTROL_BAD_STEPS, CONTROL_ENTROPY, CONTROL_VALUE
from verl_ext.control import self_tuning
from verl_ext.control.entropy_control import EntropyControlConfig, EntropyController

CASES = {
    "auto": dict(controller="auto", actuator="entropy_coef", coef_min=-0.1),
    "pi": dict(controller="pi", actuator="entropy_coef"),
    "skywork": dict(controller="skywork", actuator="entropy_coef"),
    "entropic": dict(controller="entropic", actuator="pos_weight"),
}
"""One pair per controller; auto two-sided so that its value moves both ways before the bad step."""
GOOD = [0.5, 0.35, 0.42, 0.3, 0.38, 0.33, 0.45, 0.36, 0.4, 0.31, 0.44, 0.37]
"""Measured entropies around the target 0.4 before the bad one (auto's outlier gate applies from the 10th on)."""
BAD = [math.nan, math.inf, -math.inf, 0.0, -0.1]


def make(name: str, **keys) -> EntropyController:
    return EntropyController(EntropyControlConfig(enable=True, target=0.4, **CASES[name], **keys))


def run(controller: EntropyController, entropies, start: int = 1) -> list[tuple[float, dict]]:
    return [controller.update(step, h) for step, h in enumerate(entropies, start=start)]


def frozen(controller: EntropyController) -> str:
    """The controller's learnable state (not its step counter), to compare before and after a held step."""
    state = controller.state_dict()["state"]
    state.pop("step")
    return json.dumps(state, sort_keys=True)


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_measurement_is_held_counted_and_not_learned(name, bad):
    made, clean = make(name), make(name)
    before = run(made, GOOD)
    run(clean, GOOD)
    state = frozen(made)
    value, metrics = made.update(len(GOOD) + 1, bad)
    assert value == before[-1][0] and math.isfinite(value)
    assert metrics[CONTROL_VALUE] == value and metrics[CONTROL_BAD_STEPS] == 1.0
    unchanged = frozen(made) == state
    after = run(made, [0.36, 0.41], start=len(GOOD) + 2)
    assert all(math.isfinite(v) for v, _ in after)
    assert after[-1][1][CONTROL_BAD_STEPS] == 1.0  # the counter is logged on every step and keeps the run's total
    if name == "auto":  # nothing learned, but the model moves over the step: test_a_held_step_advances_autos_model
        return
    assert unchanged  # nothing learned from it
    # afterwards it continues as a run that never saw the bad step (its state is the same)
    expected = run(clean, [0.36, 0.41], start=len(GOOD) + 2)
    assert [v for v, _ in after] == [v for v, _ in expected]


@pytest.mark.parametrize("bad", [math.nan, 0.0])
def test_a_held_step_advances_autos_model(bad):
    """A held step still lasts a step: each filter predicts over it (``c_b += 1``, ``c_g += a_{t-1-L}``,
    ``P += 1 - lambda``) without learning (its normal equations, columns 4..11, unchanged), and the held value joins
    the actions, so the next measurement's acting coordinate is the one from ``lag + 1`` steps back. The outlier path
    does the same: both states match."""
    made, twin = make("auto"), make("auto")
    run(made, GOOD)
    run(twin, GOOD)
    st = made.controller.state
    before = [list(row) for row in st.bank]
    acting = st.actions[-1 - made.controller.lag]
    value, _ = made.update(len(GOOD) + 1, bad)
    for row, old, lam in zip(st.bank, before, self_tuning.NOISE_RATIOS):
        assert row[4:] == old[4:]
        assert row[1:4] == pytest.approx([old[1] + 1.0, old[2] + acting, old[3] + 1.0 - lam], rel=1e-12)
    assert st.actions[-1] == pytest.approx(value, rel=1e-12) and st.seen == len(GOOD)
    mean, sd = predicted_sd(twin)
    assert twin.update(len(GOOD) + 1, math.exp(mean + 10.0 * sd))[1][self_tuning.OUTLIER] == 1.0
    assert (st.bank, st.actions, st.estimate) == (twin.controller.state.bank, twin.controller.state.actions,
                                                  twin.controller.state.estimate)  # fmt: skip
    assert made.update(len(GOOD) + 2, 0.4)[0] == twin.update(len(GOOD) + 2, 0.4)[0]


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_first_measurement_holds_the_actuators_init(name):
    made = make(name)
    value, metrics = made.update(1, math.nan)
    assert value == made.actuator.init and metrics[CONTROL_BAD_STEPS] == 1.0
    assert math.isfinite(made.update(2, 0.4)[0])


@pytest.mark.parametrize("name", list(CASES))
def test_max_bad_steps_in_a_row_stop_the_run_naming_the_metric_and_the_step(name):
    made = make(name, max_bad_steps=3)
    run(made, GOOD)
    run(made, [math.nan, math.inf], start=13)  # two in a row: held
    run(made, [0.4], start=15)  # a good one resets the run of bad ones
    run(made, [0.0, math.nan], start=16)
    with pytest.raises(RuntimeError) as info:
        made.update(18, math.inf)
    assert CONTROL_ENTROPY in str(info.value) and "step 18" in str(info.value) and "max_bad_steps=3" in str(info.value)


def test_the_first_bad_measurement_warns_once(caplog):
    made = make("auto")
    run(made, GOOD)
    with caplog.at_level(logging.WARNING, logger="verl_ext.control.entropy_control"):
        made.update(13, math.nan)
        made.update(14, 0.4)
        made.update(15, 0.0)
    warned = [r for r in caplog.records if CONTROL_ENTROPY in r.getMessage()]
    assert len(warned) == 1 and "step 13" in warned[0].getMessage()


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "3"])
def test_max_bad_steps_must_be_an_integer_of_at_least_one(value):
    with pytest.raises(ConfigError) as info:
        EntropyControlConfig(max_bad_steps=value)
    assert info.value.key == "verl_ext.entropy_control.max_bad_steps" and "integer >= 1" in info.value.message


def predicted_sd(made: EntropyController) -> tuple[float, float]:
    """auto's prediction of the next measured log entropy and its standard deviation, from its own estimate:
    ``x + b + g a`` and ``sqrt(Var x + Q + R + Var b + a^2 Var g)`` (``a``: the coordinate acting over the step)."""
    ctl = made.controller
    x, b, g, var_b, var_g, R, Q, var_x = ctl.state.estimate
    a = ctl.state.actions[-1 - ctl.lag] if len(ctl.state.actions) > ctl.lag else 0.0
    return x + b + g * a, math.sqrt(var_x + Q + R + var_b + a * a * var_g)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("name", list(CASES))
def test_a_10_sigma_outlier_mid_run(name, sign):
    """10 standard deviations of auto's own prediction, either way: auto skips it (holds its value, learns nothing,
    logs ``entropy_control/outlier``); the fixed laws, which have no noise model, take it as a measurement and stay
    finite and inside their range."""
    made = make(name)
    before = run(made, GOOD)
    probe = make("auto")
    run(probe, GOOD)
    mean, sd = predicted_sd(probe)
    outlier = math.exp(mean + sign * 10.0 * sd)
    state = frozen(made)
    value, metrics = made.update(len(GOOD) + 1, outlier)
    assert math.isfinite(value) and made.actuator.lo <= value <= made.actuator.hi
    if name == "auto":
        assert value == before[-1][0] and metrics[self_tuning.OUTLIER] == 1.0
        learned = json.loads(state)["bank"]
        # the normal equations (columns 4..11 of each filter's row) are unchanged: nothing was learned from it
        assert [row[4:] for row in made.controller.state.bank] == [row[4:] for row in learned]
        nxt, m = made.update(len(GOOD) + 2, 0.4)
        assert math.isfinite(nxt) and m[self_tuning.OUTLIER] == 0.0


def test_auto_takes_a_persistent_change_of_level_after_outlier_run_skips():
    made = make("auto")
    run(made, GOOD)
    mean, sd = predicted_sd(made)
    far = math.exp(mean + 10.0 * sd)
    flags = [made.update(13 + i, far)[1][self_tuning.OUTLIER] for i in range(self_tuning.OUTLIER_RUN + 1)]
    assert flags == [1.0] * self_tuning.OUTLIER_RUN + [0.0]


def step_limit(made: EntropyController) -> float:
    """auto's per-step limit in its coordinate: ``STEP_SIGMAS sqrt(R + Q + Var b) / |g|`` from its estimate."""
    x, b, g, var_b, var_g, R, Q, var_x = made.controller.state.estimate
    return self_tuning.STEP_SIGMAS * math.sqrt(R + Q + var_b) / abs(g)


def test_autos_first_move_is_limited_like_every_later_one():
    """Entropy 20x the target on step 1 with a coefficient range wide enough ([-1, 1]) for the law to ask more than
    the limit: every step's move, the first from the actuator's init included, stays within the per-step limit."""
    made = EntropyController(EntropyControlConfig(enable=True, controller="auto", actuator="entropy_coef", target=0.3,
                                                  coef_min=-1.0, coef_max=1.0))  # fmt: skip
    previous = made.actuator.init
    for step, h in enumerate([6.0, 5.0, 3.0, 1.5, 0.8], start=1):
        value, _ = made.update(step, h)
        assert abs(value - previous) <= step_limit(made) * (1 + 1e-12), (step, value, previous)
        previous = value
    assert made.update(6, 0.3)[0] != 0.0  # it did act


def test_with_the_defaults_the_first_move_is_within_the_limit_and_never_minimises_entropy():
    made = EntropyController(EntropyControlConfig(enable=True, target=0.3))
    value, _ = made.update(1, 0.6)  # above the target: the law asks for less entropy
    assert made.config.coef_min == 0.0 and value == 0.0 and abs(value) <= step_limit(made)


# ----------------------------------------------------------------------------------------------------------
# the checkpoint


def test_the_state_carries_its_schema_and_settings_and_a_mismatch_names_the_key():
    made = make("auto", auto_memory=20, auto_lag=1)
    run(made, GOOD)
    saved = json.loads(json.dumps(made.state_dict()))
    assert saved["schema"] == 4 and saved["noise_ratios"] == list(self_tuning.NOISE_RATIOS)
    assert saved["target_unit"] == "nats" and saved["anchor"] is None
    for key, other in (("auto_memory", dict(auto_memory=30)), ("auto_lag", dict(auto_lag=2)),
                       ("target_unit", dict(target_unit="initial"))):
        with pytest.raises(ConfigError) as info:
            make("auto", **other).load_state_dict(saved)
        assert info.value.key == f"verl_ext.entropy_control.{key}", key
    for key, value in (("noise_ratios", saved["noise_ratios"][:-1]), ("schema", 1)):
        with pytest.raises(ConfigError) as info:
            make("auto").load_state_dict({**saved, key: value})
        assert info.value.key == f"verl_ext.entropy_control.{key}", key


def test_a_bank_that_does_not_fit_the_noise_grid_is_an_error_not_truncated():
    made = make("auto")
    run(made, GOOD)
    saved = json.loads(json.dumps(made.state_dict()))
    saved["state"]["bank"] = saved["state"]["bank"][:-1]
    with pytest.raises(ValueError, match="bank"):
        make("auto").load_state_dict(saved)


def test_bad_step_counters_survive_a_checkpoint():
    made = make("pi", max_bad_steps=3)
    run(made, GOOD)
    run(made, [math.nan, 0.0], start=13)
    resumed = make("pi", max_bad_steps=3)
    resumed.load_state_dict(json.loads(json.dumps(made.state_dict())))
    with pytest.raises(RuntimeError, match="step 15"):
        resumed.update(15, math.nan)  # the third in a row, counting the two before the checkpoint


def test_the_state_file_is_written_atomically(tmp_path, monkeypatch):
    """A failure between writing and renaming leaves the previous file whole and no temporary file behind."""
    from verl_ext.driver.mixin import write_atomically

    path = tmp_path / "global_step_3" / "verl_ext_driver.json"
    write_atomically(path, '{"old": 1}')
    seen = []

    def failing_replace(src, dst):
        seen.append((os.path.dirname(src), os.fspath(dst)))
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk gone"):
        write_atomically(path, '{"new": 2}')
    assert seen == [(str(path.parent), str(path))]  # a temporary file in the same folder, renamed over the file
    assert json.loads(path.read_text()) == {"old": 1} and sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_held_step_leaves_pis_integral_alone_when_the_selection_is_limited():
    """After a held step nothing the controller decided can be corrected: a limited selection (Clip-Cov's candidates)
    does not take the step before's error out of pi's integral."""
    made = EntropyController(EntropyControlConfig(enable=True, controller="pi", actuator="cov_ratio", target=1.0,
                                                  ratio_max=0.5, kp=1.0, ki=0.5), 0.1)  # fmt: skip
    made.update(1, 0.5)
    integral = made.state.integral
    metrics: dict = {}
    made.update(2, math.nan)
    made.actuator_limited(True, metrics)
    assert made.state.integral == integral and metrics["entropy_control/limited"] == 1.0


# ----------------------------------------------------------------------------------------------------------
# auto's model before its actions exist, the resume check of its coordinates, implausible measurements


@pytest.mark.parametrize("actuator, keys, rest", [
    ("cov_ratio", dict(ratio_init=0.002), math.log(0.002 / 1e-4)),   # log(ratio / ratio_min) = 3.0
])  # fmt: skip
def test_before_lag_plus_one_actions_auto_takes_the_actuator_at_its_init(actuator, keys, rest):
    """With lag 1, the entropy measured at step 2 moved under the value set before step 1: the actuator's init.
    Step 2's prediction adds ``g a`` with that coordinate, so each filter's normal equation in ``g`` gains
    ``a^2 / S`` with ``S = 1 + lambda`` (its prediction variance after one step from ``P = lambda``)."""
    made = EntropyController(EntropyControlConfig(enable=True, actuator=actuator, target=0.4, **keys))
    made.update(1, 0.5)
    made.update(2, 0.45)
    for row, lam in zip(made.controller.state.bank, self_tuning.NOISE_RATIOS):
        assert row[6] == pytest.approx(rest * rest / (1.0 + lam), rel=1e-9), lam


@pytest.mark.parametrize("actuator, key, ours, theirs", [
    ("cov_ratio", "ratio_min", dict(ratio_init=0.002), dict(ratio_init=0.002, ratio_min=1e-3)),
])  # fmt: skip
def test_a_resume_with_another_range_bottom_is_an_error_naming_it(actuator, key, ours, theirs):
    """auto's saved coordinates are measured from the range's bottom: another bottom would reinterpret them."""
    made = EntropyController(EntropyControlConfig(enable=True, actuator=actuator, target=0.4, **ours))
    run(made, GOOD[:4])
    saved = json.loads(json.dumps(made.state_dict()))
    with pytest.raises(ConfigError) as info:
        EntropyController(EntropyControlConfig(enable=True, actuator=actuator, target=0.4, **theirs)).load_state_dict(saved)
    assert info.value.key == f"verl_ext.entropy_control.{key}"
    EntropyController(EntropyControlConfig(enable=True, actuator=actuator, target=0.4, **ours)).load_state_dict(saved)


@pytest.mark.parametrize("name", list(CASES))
def test_an_entropy_above_log_of_the_vocabulary_is_unusable(name):
    """No distribution over 100 tokens has more than log(100) = 4.605 nats: 4.7 is held and counted, 4.6 is taken."""
    made = EntropyController(EntropyControlConfig(enable=True, target=0.4, **CASES[name]), vocab_size=100)
    before = run(made, GOOD)
    value, metrics = made.update(len(GOOD) + 1, 4.7)
    assert value == before[-1][0] and metrics[CONTROL_BAD_STEPS] == 1.0
    assert made.update(len(GOOD) + 2, 4.6)[1][CONTROL_BAD_STEPS] == 1.0
    with pytest.raises(RuntimeError, match=r"above log\(vocab_size\) = 4.605"):
        EntropyController(EntropyControlConfig(enable=True, target=0.4, max_bad_steps=1, **CASES[name]),
                          vocab_size=100).update(1, 5.0)  # fmt: skip


def test_the_driver_bounds_entropy_by_the_larger_of_the_models_and_the_tokenizers_vocabulary(tmp_path):
    from omegaconf import OmegaConf

    from verl_ext.driver.mixin import vocabulary_size

    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 49152}))
    config = OmegaConf.create({"actor_rollout_ref": {"model": {"path": str(tmp_path)}}})
    assert vocabulary_size(config) == 49152
    assert vocabulary_size(config, tokenizer=["t"] * 50000) == 50000
    hub = OmegaConf.create({"actor_rollout_ref": {"model": {"path": "org/model"}}})
    assert vocabulary_size(hub) is None and vocabulary_size(hub, tokenizer=["t"] * 300) == 300


def test_before_ten_measurements_one_finite_garbage_value_does_not_set_autos_estimates():
    """The 4th measurement reads 1000 nats (finite, no vocabulary bound given): auto skips it as an outlier (its
    normal equations unchanged) instead of learning a drift and a noise from it; the next honest one is taken."""
    made = make("auto")
    run(made, GOOD[:3])
    learned = [row[4:] for row in made.controller.state.bank]
    value, metrics = made.update(4, 1000.0)
    assert metrics[self_tuning.OUTLIER] == 1.0 and [row[4:] for row in made.controller.state.bank] == learned
    assert made.update(5, 0.38)[1][self_tuning.OUTLIER] == 0.0
    assert 0.2 < math.exp(made.controller.state.estimate[0]) < 0.6
