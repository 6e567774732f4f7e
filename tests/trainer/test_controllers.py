"""The three controllers on hand-computed trajectories, the (controller, actuator) pairs and their refusals, the
state's resume checks; then the new actuators and batch-scope ``high_entropy`` wired into the legacy trainer (no
Ray): the fields the update receives."""

from __future__ import annotations

import math

import pytest
import torch

from verl_ext.config import ConfigError
from verl_ext.control.actuators import PAIRS, REFUSED
from verl_ext.control.entropy_control import EntropyControlConfig, EntropyController


def trajectory(controller: EntropyController, entropies):
    return [controller.update(step, h)[1] for step, h in enumerate(entropies, start=1)]


def test_skywork_rule_on_a_trajectory_computed_by_hand():
    """Target 1, delta 0.001, coefficient in [0, 0.003] from 0.002. By hand (u_t = clamp(u_{t-1} +- delta); applied
    only while H < H*):
      H 0.5: below -> 0.003, applied 0.003       H 0.6: below -> 0.004 -> 0.003 (clamped), applied 0.003
      H 1.5: above -> 0.002, applied 0 (gate)    H 2.0: above -> 0.001, applied 0
      H 3.0: above -> 0.000, applied 0           H 3.0: above -> -0.001 -> 0 (clamped), applied 0
      H 0.5: below -> 0.001, applied 0.001 (the coefficient leaves 0 again: TRL's review found one stuck there)"""
    cfg = EntropyControlConfig(enable=True, controller="skywork", actuator="entropy_coef", target=1.0,
                               skywork_delta=0.001, coef_min=0.0, coef_max=0.003, coef_init=0.002)  # fmt: skip
    got = trajectory(EntropyController(cfg), [0.5, 0.6, 1.5, 2.0, 3.0, 3.0, 0.5])
    applied = [0.003, 0.003, 0.0, 0.0, 0.0, 0.0, 0.001]
    gate = [1, 1, 0, 0, 0, 0, 1]
    saturated = [0, 1, 0, 0, 0, 1, 0]
    for step, m in enumerate(got):
        assert m["entropy_control/value"] == pytest.approx(applied[step], abs=1e-15), step
        assert m["entropy_control/entropy_coef"] == m["entropy_control/value"]
        assert m["entropy_control/gate"] == gate[step] and m["entropy_control/saturated"] == saturated[step], step
        assert m["entropy_control/error"] == pytest.approx(1.0 - [0.5, 0.6, 1.5, 2.0, 3.0, 3.0, 0.5][step])


def test_skywork_defaults_are_the_or1_scripts_values_and_leave_zero_below_target():
    """Skywork-OR1's or1_scripts/train/*.sh: initial coefficient 0 (ENTROPY_COEFF), delta 0.0001, range [0, 0.005];
    target 0.2 here. By hand (the rule moves the coefficient before the step uses it):
      H 0.1: below -> 0.0001, applied 0.0001     H 0.1: below -> 0.0002, applied 0.0002
      H 0.5: above -> 0.0001, applied 0 (gate)   H 0.5: above -> 0, applied 0    H 0.5: above -> -0.0001 -> 0 (clamped)
      H 0.1: below -> 0.0001, applied 0.0001: the coefficient leaves 0 as soon as entropy is below the target
    and 60 steps below the target climb min(0.0001 t, 0.005), on the bound from step 50."""
    cfg = EntropyControlConfig(enable=True, controller="skywork", actuator="entropy_coef", target=0.2)
    assert (cfg.coef_init, cfg.skywork_delta, cfg.coef_min, cfg.coef_max) == (0.0, 1e-4, 0.0, 0.005)
    got = trajectory(EntropyController(cfg), [0.1, 0.1, 0.5, 0.5, 0.5, 0.1])
    applied = [1e-4, 2e-4, 0.0, 0.0, 0.0, 1e-4]
    assert [m["entropy_control/value"] for m in got] == pytest.approx(applied, abs=1e-15)
    assert [m["entropy_control/gate"] for m in got] == [1, 1, 0, 0, 0, 1]
    assert [m["entropy_control/saturated"] for m in got] == [0, 0, 0, 0, 1, 0]
    climb = trajectory(EntropyController(cfg), [0.1] * 60)
    for step, m in enumerate(climb, start=1):
        assert m["entropy_control/entropy_coef"] == pytest.approx(min(1e-4 * step, 5e-3), abs=1e-15), step
        assert m["entropy_control/saturated"] == float(step > 50), step


def test_pi_on_the_coefficient_takes_the_default_bounds_and_starts_from_the_bottom_of_its_log_range():
    """The coefficient's defaults (coef_min 0, coef_init 0, coef_max 0.005) are accepted with pi: its log range
    starts at coef_max x LOG_FLOOR = 5e-6, also its value at zero error. By hand, kp 1, ki 0, target 1:
      H = 1 / e: e = 1, log u = log 5e-6 + 1 -> 5e-6 e;  H = 1: e = 0 -> 5e-6 (the bottom, clamped: saturated)."""
    from verl_ext.control.controllers import LOG_FLOOR

    cfg = EntropyControlConfig(enable=True, controller="pi", actuator="entropy_coef", target=1.0, kp=1.0, ki=0.0)
    assert (cfg.coef_min, cfg.coef_init, cfg.coef_max) == (0.0, 0.0, 0.005) and LOG_FLOOR == 1e-3
    controller = EntropyController(cfg)
    assert controller.update(1, math.exp(-1.0))[0] == pytest.approx(5e-6 * math.e, rel=1e-12)
    value, metrics = controller.update(2, 1.0)
    assert value == pytest.approx(5e-6, rel=1e-12) and metrics["entropy_control/saturated"] == 0.0
    assert controller.update(3, math.e)[1]["entropy_control/saturated"] == 1.0


def test_entropic_law_on_a_trajectory_computed_by_hand():
    """EntroPIC on its own actuator: alpha = clip(kp (H - H*) + ki I_{t-1}, -1, 1), I_t = I_{t-1} + (H* - H) in
    verl_ext's sign (d = -1, u0 = 0). Target 1, kp 1, ki 0.5:
      H 1.4: e = -0.4, alpha = -(-0.4 + 0.5 * 0)    =  0.4,  I = -0.4
      H 1.2: e = -0.2, alpha = -(-0.2 + 0.5 * -0.4) =  0.4,  I = -0.6
      H 0.5: e =  0.5, alpha = -(0.5 + 0.5 * -0.6)  = -0.2,  I = -0.1
      H 3.0: e = -2.0, alpha = -(-2 + 0.5 * -0.1)   =  2.05 -> 1 (clamped, pushing up), I = -0.1 (anti-windup)
      H 1.0: e =  0.0, alpha = -(0 + 0.5 * -0.1)    =  0.05,              I = -0.1
    EntroPIC's own code (no anti-windup) integrates the clamped step: I = -2.1, and alpha stays clamped at 1 after."""
    cfg = EntropyControlConfig(enable=True, controller="entropic", actuator="pos_weight", target=1.0, entropic_kp=1.0,
                               entropic_ki=0.5, entropic_integral_per="step")  # fmt: skip
    theirs = EntropyController(cfg)
    theirs.controller.anti_windup = False
    for made, expected in (
        (EntropyController(cfg), [(0.4, -0.4, 0), (0.4, -0.6, 0), (-0.2, -0.1, 0), (1.0, -0.1, 1), (0.05, -0.1, 0)]),
        (theirs, [(0.4, -0.4, 0), (0.4, -0.6, 0), (-0.2, -0.1, 0), (1.0, -2.1, 1), (1.0, -2.1, 1)]),
    ):
        got = trajectory(made, [1.4, 1.2, 0.5, 3.0, 1.0])
        for step, (m, (alpha, integral, saturated)) in enumerate(zip(got, expected)):
            assert m["entropy_control/pos_weight"] == pytest.approx(alpha, abs=1e-12), step
            assert m["entropy_control/integral"] == pytest.approx(integral, abs=1e-12), step
            assert m["entropy_control/saturated"] == saturated, step


def test_entropic_leaves_its_bound_as_soon_as_the_error_changes_sign():
    """Anti-windup: 100 steps of entropy 2.0 nats over a 0.4 target hold alpha at its top (+1, lowering entropy)
    with the default 8 mini-batches a step; without anti-windup the integral would reach 100 * 8 * -1.6 = -1280, and
    alpha = -(kp e + ki I) = 12.5 would keep sharpening after the entropy fell below target. With it, the first step
    at 0.1 nats (e = +0.3) sets alpha = -(1 * 0.3 + 0.01 * 0) = -0.3: raising entropy."""
    made = EntropyController(EntropyControlConfig(enable=True, controller="entropic", actuator="pos_weight", target=0.4))
    for step in range(1, 101):
        assert made.update(step, 2.0, 8)[0] == 1.0
    assert made.update(101, 0.1, 8)[0] == pytest.approx(-0.3, abs=1e-12)


def test_entropic_integrates_once_per_optimiser_mini_batch_by_default():
    """EntroPIC's cadence (entropic_integral_per=mini_batch, the default): the step's error enters the integral once
    per optimiser mini-batch; alpha uses the integral before the step. Target 1, kp 1, ki 0.5, 4 mini-batches:
      H 1.4: e = -0.4, alpha = -(-0.4 + 0.5 * 0)    =  0.4,  I = 4 * -0.4       = -1.6
      H 1.2: e = -0.2, alpha = -(-0.2 + 0.5 * -1.6) =  1.0,  I = -1.6 + 4 * -0.2 = -2.4
      H 0.5: e =  0.5, alpha = -(0.5 + 0.5 * -2.4)  =  0.7,  I = -2.4 + 4 * 0.5  = -0.4
    With entropic_integral_per=step the same mini-batch count changes nothing (the test above's law)."""
    cfg = EntropyControlConfig(enable=True, controller="entropic", actuator="pos_weight", target=1.0, entropic_kp=1.0,
                               entropic_ki=0.5)  # fmt: skip
    assert cfg.entropic_integral_per == "mini_batch"
    controller = EntropyController(cfg)
    got = [controller.update(step, h, 4)[1] for step, h in enumerate([1.4, 1.2, 0.5], start=1)]
    for m, (alpha, integral) in zip(got, [(0.4, -1.6), (1.0, -2.4), (0.7, -0.4)]):
        assert m["entropy_control/pos_weight"] == pytest.approx(alpha, abs=1e-12)
        assert m["entropy_control/integral"] == pytest.approx(integral, abs=1e-12)
        assert m["entropy_control/integrations"] == 4.0
    per_step = EntropyController(EntropyControlConfig.from_mapping({**cfg.__dict__, "entropic_integral_per": "step"}))
    assert [per_step.update(s, h, 4)[1]["entropy_control/integral"] for s, h in [(1, 1.4), (2, 1.2)]] == pytest.approx(
        [-0.4, -0.6], abs=1e-12)


def test_the_driver_counts_the_optimiser_mini_batches_as_verl_splits_the_batch(compose):
    """ppo_epochs x responses // (ppo_mini_batch_size x rollout.n): the integrations of EntroPIC's integral."""
    from verl_ext.driver.mixin import VerlExtDriver

    cfg = compose("verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.target=0.3",
                  "verl_ext.entropy_control.controller=entropic",
                  "verl_ext.entropy_control.actuator=pos_weight", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                  "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_epochs=3")  # fmt: skip
    driver = VerlExtDriver(cfg)
    assert driver.optimiser_steps(64) == 3 * 8 and driver.optimiser_steps(8) == 3 and driver.optimiser_steps(4) == 3


def test_pi_on_the_entropy_coefficient_raises_it_below_target_and_lowers_it_above():
    """The log-space law of the cov_ratio tests, on the coefficient: e = log(1 / 0.5) = log 2 with kp 1, ki 0 gives
    exactly twice the zero-error value; the mirror error halves it."""
    cfg = EntropyControlConfig(enable=True, controller="pi", actuator="entropy_coef", target=1.0, kp=1.0, ki=0.0,
                               coef_min=1e-4, coef_max=0.1, coef_init=0.01)  # fmt: skip
    controller = EntropyController(cfg)
    assert controller.update(1, 0.5)[0] == pytest.approx(0.02, rel=1e-12)
    assert controller.update(2, 2.0)[0] == pytest.approx(0.005, rel=1e-12)


def test_entropic_drives_the_coefficient_the_other_way_round_from_its_own_actuator():
    """The same law on entropy_coef (d = +1): entropy below target raises the coefficient from its zero-error value."""
    cfg = EntropyControlConfig(enable=True, controller="entropic", actuator="entropy_coef", target=1.0,
                               entropic_kp=0.01, entropic_ki=0.0, coef_init=0.005, coef_max=0.05)  # fmt: skip
    assert EntropyController(cfg).update(1, 0.5)[0] == pytest.approx(0.005 + 0.01 * 0.5, rel=1e-12)


@pytest.mark.parametrize(("controller", "actuator"), sorted(REFUSED))
def test_refused_pairs_name_the_key_and_say_why(controller, actuator):
    with pytest.raises(ConfigError) as info:
        EntropyControlConfig(enable=True, target=0.3, controller=controller, actuator=actuator)
    assert info.value.key == "verl_ext.entropy_control.actuator"
    assert REFUSED[(controller, actuator)] in info.value.message
    assert len(PAIRS) + len(REFUSED) == 16  # every (controller, actuator) pair of 4 x 4 is allowed or refused with a reason


@pytest.mark.parametrize(
    ("values", "key", "words"),
    [({"controller": "bangbang"}, "controller", "['pi', 'skywork', 'entropic', 'auto']"),
     ({"controller": "pi", "actuator": "entropy_coef", "coef_min": -0.001}, "coef_min", "allowed 0.0 <= coef_min"),
     ({"controller": "auto", "actuator": "entropy_coef", "coef_min": -0.2, "coef_max": 0.1}, "coef_min",
      "-coef_max <= coef_min < coef_max"),
     ({"controller": "auto", "actuator": "cov_ratio", "auto_memory": 1}, "auto_memory", "an integer >= 2"),
     ({"controller": "auto", "actuator": "cov_ratio", "auto_lag": 5}, "auto_lag", "an integer in [0, 4]"),
     ({"controller": "auto", "actuator": "cov_ratio", "auto_lag": 1.5}, "auto_lag", "an integer in [0, 4]"),
     ({"controller": "pi", "actuator": "cov_ratio", "auto_memory": 40}, "auto_memory", "controller=pi ignores it"),
     ({"controller": "skywork", "actuator": "entropy_coef", "coef_init": 0.9}, "coef_init", "[coef_min, coef_max]"),
     ({"controller": "entropic", "actuator": "pos_weight", "weight_max": 2.0}, "weight_min", "<= 1.0"),
     ({"controller": "skywork", "actuator": "entropy_coef", "skywork_delta": 0}, "skywork_delta", "> 0"),
     ({"entropic_ki": -1}, "entropic_ki", ">= 0"),
     ({"controller": "entropic", "actuator": "pos_weight", "entropic_integral_per": "micro_batch"},
      "entropic_integral_per", "['mini_batch', 'step']"),
     ({"controller": "entropic", "actuator": "pos_weight", "weight_norm": "tokens"}, "weight_norm",
      "['high_prob', 'all_tokens']"),
     ({"controller": "pi", "actuator": "cov_ratio", "entropic_integral_per": "step"}, "entropic_integral_per",
      "controller=pi ignores it"),
     ({"controller": "entropic", "actuator": "entropy_coef", "weight_norm": "all_tokens"}, "weight_norm",
      "actuator=entropy_coef ignores it"),
     ({"controller": "skywork", "actuator": "entropy_coef", "kp": 5.0}, "kp", "controller=skywork ignores it"),
     ({"controller": "entropic", "actuator": "pos_weight", "coef_max": 0.1}, "coef_max", "actuator=pos_weight ignores it"),
     ({"ratio_init": 0.01, "actuator": "entropy_coef", "coef_min": 0.001}, "ratio_init", "read by actuator=cov_ratio only")],
)  # fmt: skip
def test_bad_controller_values_name_the_key(values, key, words):
    with pytest.raises(ConfigError) as info:
        EntropyControlConfig.from_mapping({"enable": True, "target": 0.3, **values})
    assert info.value.key == f"verl_ext.entropy_control.{key}" and words in info.value.message


def test_state_resumes_exactly_and_refuses_another_pair():
    cfg = EntropyControlConfig(enable=True, controller="entropic", actuator="pos_weight", target=1.0)
    whole, first = EntropyController(cfg), EntropyController(cfg)
    trajectory(whole, [1.3, 0.7, 1.1, 0.9])
    trajectory(first, [1.3, 0.7])
    second = EntropyController(cfg)
    second.load_state_dict(first.state_dict())
    second.update(3, 1.1)
    assert second.update(4, 0.9)[0] == whole.state.value
    other = EntropyController(EntropyControlConfig(enable=True, target=0.3,
                                                   controller="skywork", actuator="entropy_coef"))
    with pytest.raises(ConfigError, match="controller=entropic, actuator=pos_weight"):
        other.load_state_dict(first.state_dict())


def test_a_state_without_its_schema_version_is_an_error_naming_the_key():
    """A state file of an older layout (here: the one before the controller / actuator split) is refused by name."""
    controller = EntropyController(EntropyControlConfig(enable=True, controller="pi", actuator="cov_ratio", target=1.0),
                                   ratio_init=0.01)  # fmt: skip
    with pytest.raises(ConfigError) as info:
        controller.load_state_dict({"integral": 0.5, "ratio": 0.02, "step": 7})
    assert info.value.key == "verl_ext.entropy_control.schema" and "schema None" in info.value.message


# ----------------------------------------------------------------------------------------------------------
# in the legacy trainer (no Ray)
# ----------------------------------------------------------------------------------------------------------

from _trainer_fakes import RESPONSE_LENS, legacy_batch, legacy_trainer  # noqa: E402


def _observe(trainer, batch, value=0.5):
    trainer.verl_ext_driver.observe_entropy(torch.full(batch.batch["response_mask"].shape, value) *
                                            batch.batch["response_mask"], batch.batch["response_mask"])  # fmt: skip


@pytest.mark.parametrize(("controller", "actuator", "field"),
                         [("skywork", "entropy_coef", "entropy_coef"), ("entropic", "pos_weight", "pos_weight")])  # fmt: skip
def test_loss_side_actuators_reach_the_update_as_a_field(compose, controller, actuator, field):
    trainer = legacy_trainer(compose, "verl_ext.entropy_control.enable=true", f"verl_ext.entropy_control.controller={controller}",
                             f"verl_ext.entropy_control.actuator={actuator}", "verl_ext.entropy_control.target=2.0")  # fmt: skip
    batch = legacy_batch()
    _observe(trainer, batch)
    metrics = trainer._update_actor(batch).meta_info["metrics"]
    sent = trainer.actor_rollout_wg.updates[-1][field]
    value = metrics["entropy_control/value"]
    # entropy 0.5 below the target 2: skywork raises the coefficient from 0 by 0.0001; entropic lowers alpha below 0
    assert value == (pytest.approx(1e-4) if controller == "skywork" else pytest.approx(-1.0))
    values = [float(v) for row in sent.unbind() for v in row]
    assert values and all(v == pytest.approx(value) for v in values), values
    assert "cov_selected" not in trainer.actor_rollout_wg.updates[-1].keys()
    if actuator == "pos_weight":  # EntroPIC's normalisation by the high-probability tokens (weight_norm=high_prob)
        norm = trainer.actor_rollout_wg.updates[-1]["pos_weight_norm"]
        assert all(float(v) == 1.0 for row in norm.unbind() for v in row)


def test_entropy_coef_actuator_refuses_a_fixed_entropy_coefficient(compose):
    from verl_ext.checks.validation import check_driver_features

    with pytest.raises(ConfigError) as info:
        check_driver_features(compose("trainer.use_v1=false", "verl_ext.entropy_control.enable=true",
                                      "verl_ext.entropy_control.target=0.3",
                                      "verl_ext.entropy_control.controller=skywork",
                                      "verl_ext.entropy_control.actuator=entropy_coef",
                                      "actor_rollout_ref.actor.entropy_coeff=0.001"))  # fmt: skip
    assert info.value.key == "actor_rollout_ref.actor.entropy_coeff"


def test_batch_scope_high_entropy_sends_its_weights_from_the_old_entropy(compose):
    trainer = legacy_trainer(compose, "policy_loss@actor_rollout_ref.actor.policy_loss=high_entropy")
    batch = legacy_batch()
    mask = batch.batch["response_mask"].bool()
    batch.batch["old_entropy"] = torch.arange(mask.numel(), dtype=torch.float32).reshape(mask.shape) * mask
    metrics = trainer._update_actor(batch).meta_info["metrics"]
    sent = trainer.actor_rollout_wg.updates[-1]["high_entropy_weight"]
    assert "old_entropy" not in trainer.actor_rollout_wg.updates[-1].keys()  # the driver's input only
    n = sum(RESPONSE_LENS)
    k = math.ceil(0.2 * n)
    weights = torch.cat([row for row in sent.unbind()])
    assert int((weights > 0).sum()) == k and float(weights.max()) == pytest.approx(n / k)
    assert metrics["actor/high_entropy/batch_selected_frac"] == pytest.approx(k / n)
    # the k largest old entropies are the last valid tokens of the last rows (arange): the threshold is the k-th
    assert metrics["actor/high_entropy/batch_entropy_threshold"] == sorted(batch.batch["old_entropy"][mask].tolist())[-k]
