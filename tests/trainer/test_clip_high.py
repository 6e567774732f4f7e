"""The ``clip_high`` actuator: the controller drives the PPO upper clip bound ``eps_high`` (verl's
``actor.clip_ratio_high``, DAPO's clip-higher).

* In the actor loss, against a float64 oracle written here from the PPO formula with dual clip (verl's ``vanilla``)::

      L_i = max(-A_i r_i, -A_i clip(r_i, 1 - eps_low, 1 + eps_high))    then, for A_i < 0,  min(L_i, -A_i c)

  token-mean over the valid tokens, ``r_i = exp(lp_i - old_i)``: value and gradient, with the batch field's
  ``eps_high``; the field must change the loss (the configured bound gives another value).
* The contract the other loss-side actuators have: with entropy control on ``clip_high`` a batch without the field is an
  error naming it; the field on a loss whose upper bound is not verl's ``clip_ratio_high`` is an error; the value the
  loss used is logged; the driver sends the controller's value on every token.
* The controller ``pi`` moves it the right way on a synthetic plant; the refused pairs and losses are
  config-time errors naming the key and the allowed values.
"""

from __future__ import annotations

import math

import pytest
import torch

from verl_ext.config import ConfigError
from verl_ext.control.actuators import REFUSED
from verl_ext.losses import SPECS
from verl_ext.losses.spec import clip_high_losses

CLIP_HIGH_LOSSES = ("clip_cov", "entropy_adv", "grpo_erc", "high_entropy", "vanilla")
"""The losses whose upper clip bound is the PPO clip_ratio_high of every token they keep (their papers' surrogates)."""
CLIP_HIGH_REFUSED = ("bapo", "gppo_erc", "kl_cov")
"""KL-Cov does not clip, CE-GPPO keeps the gradient beyond the bound, BAPO sets its own bounds."""


def test_the_declared_losses_split_as_their_papers_say():
    assert sorted(clip_high_losses()) == sorted(CLIP_HIGH_LOSSES)
    assert sorted(n for n, s in SPECS.items() if s.clip_high_refusal) == sorted(CLIP_HIGH_REFUSED)
from verl_ext.control.entropy_control import EntropyControlConfig, EntropyController

from test_actor_loss import actor_config, fixture, metric_value  # noqa: E402  (tests/trainer is on sys.path)


def ppo_oracle(lp, old, adv, mask, eps_low, eps_high, c=3.0):
    """verl's vanilla PPO loss from its formula, token-mean over the valid tokens, in float64."""
    total, n = 0.0, 0
    for s in range(lp.shape[0]):
        for t in range(lp.shape[1]):
            if not mask[s, t]:
                continue
            a = float(adv[s, t])
            r = torch.exp(lp[s, t] - old[s, t])
            clipped = torch.clamp(r, 1.0 - eps_low, 1.0 + eps_high)
            loss = torch.maximum(-a * r, -a * clipped)
            if a < 0:
                loss = torch.minimum(loss, torch.tensor(-a * c, dtype=torch.float64))
            total, n = total + loss, n + 1
    return total / n


def run_loss(config, data, flat, entropy):
    from verl_ext.trainer.actor_loss import ppo_loss

    flat = flat.detach().clone().requires_grad_(True)
    loss, metrics = ppo_loss(config, {"log_probs": flat, "entropy": entropy}, data.clone())
    (grad,) = torch.autograd.grad(loss, flat)
    return loss.detach(), grad, metrics


@pytest.mark.parametrize("eps_high", [0.25, 0.5])  # exact in float32, the field's dtype
def test_the_batch_field_is_the_upper_clip_bound_of_the_ppo_loss(eps_high):
    """verl_ext's loss with the field ``clip_ratio_high`` = e (actor configured at 0.2) is the PPO oracle with
    ``eps_high`` = e: value and gradient w.r.t. the log-probs; the logged bound is e; without the field the loss is
    the oracle at the configured 0.2, which differs (tokens with A > 0 and r between 1.2 and 1 + e exist)."""
    from verl_ext.contract import CLIP_RATIO_HIGH
    from verl_ext.trainer.actor_loss import CLIP_HIGH_METRIC

    data, flat, entropy, padded = fixture(seed=7, extra={CLIP_RATIO_HIGH: torch.full((4, 6), eps_high)})
    config = actor_config(loss_agg_mode="token-mean", clip_ratio_low=0.2, clip_ratio_high=0.2)
    loss, grad, metrics = run_loss(config, data, flat, entropy)

    mask = data.select("response_mask").to_padded_tensor()["response_mask"].bool()
    fields = data.select("old_log_probs", "advantages").to_padded_tensor()
    leaf = flat.detach().clone().requires_grad_(True)
    want = ppo_oracle(padded(leaf), fields["old_log_probs"], fields["advantages"], mask, 0.2, eps_high)
    (want_grad,) = torch.autograd.grad(want, leaf)
    assert loss.item() == pytest.approx(want.item(), rel=1e-12, abs=1e-15)
    torch.testing.assert_close(grad, want_grad, rtol=1e-10, atol=1e-14)
    assert metric_value(metrics[CLIP_HIGH_METRIC]) == eps_high

    plain = data.clone()
    del plain[CLIP_RATIO_HIGH]
    base, *_ = run_loss(config, plain, flat, entropy)
    at_configured = ppo_oracle(padded(flat.detach()), fields["old_log_probs"], fields["advantages"], mask, 0.2, 0.2)
    assert base.item() == pytest.approx(at_configured.item(), rel=1e-12)
    assert abs(base.item() - loss.item()) > 1e-3  # the field acts: deleting it from the actor loss fails this test


def test_the_field_reaches_verl_ext_losses_too():
    """grpo_erc reads the bound through verl_ext.config.clip_ratios: with the field e it equals the same loss
    configured at e, and differs from it configured at 0.2."""
    from verl_ext.contract import CLIP_RATIO_HIGH

    data, flat, entropy, _ = fixture(seed=7, extra={CLIP_RATIO_HIGH: torch.full((4, 6), 0.5)})
    plain = data.clone()
    del plain[CLIP_RATIO_HIGH]
    with_field = run_loss(actor_config("grpo_erc", clip_ratio_high=0.2), data, flat, entropy)
    configured = run_loss(actor_config("grpo_erc", clip_ratio_high=0.5), plain, flat, entropy)
    narrow = run_loss(actor_config("grpo_erc", clip_ratio_high=0.2), plain, flat, entropy)
    torch.testing.assert_close(with_field[0], configured[0], rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(with_field[1], configured[1], rtol=1e-12, atol=1e-15)
    assert abs(with_field[0].item() - narrow[0].item()) > 1e-3


def test_a_missing_field_is_an_error_when_entropy_control_drives_clip_high():
    """The contract of the loss-side actuators: with entropy control on clip_high (the actor keys interpolated from
    verl_ext.entropy_control) a batch without the field is an error naming it and the actuator, instead of the
    configured bound silently used while the driver logs another."""
    from verl_ext.contract import CLIP_RATIO_HIGH

    data, flat, entropy, _ = fixture(seed=9)
    on = actor_config(entropy_control_enable=True, entropy_control_actuator="clip_high")
    with pytest.raises(ValueError) as info:
        run_loss(on, data, flat, entropy)
    assert f"no {CLIP_RATIO_HIGH!r} field" in str(info.value) and "actuator=clip_high" in str(info.value)
    run_loss(actor_config(entropy_control_enable=False, entropy_control_actuator="clip_high"), data, flat, entropy)
    data, flat, entropy, _ = fixture(seed=9, extra={CLIP_RATIO_HIGH: torch.full((4, 6), 0.3)})
    run_loss(on, data, flat, entropy)


@pytest.mark.parametrize("loss_mode", sorted(CLIP_HIGH_REFUSED))
def test_the_field_on_a_loss_without_verls_upper_bound_is_an_error(loss_mode):
    from verl_ext.contract import CLIP_RATIO_HIGH

    data, flat, entropy, _ = fixture(seed=10, extra={CLIP_RATIO_HIGH: torch.full((4, 6), 0.3)})
    with pytest.raises(ValueError) as info:
        run_loss(actor_config(loss_mode, loss_kwargs={"cov_scope": "micro"} if loss_mode == "kl_cov" else None),
                 data, flat, entropy)  # fmt: skip
    assert SPECS[loss_mode].clip_high_refusal in str(info.value)


def test_a_field_with_two_values_in_one_micro_batch_is_an_error():
    from verl_ext.contract import CLIP_RATIO_HIGH

    values = torch.full((4, 6), 0.3)
    values[2, 0] = 0.4
    data, flat, entropy, _ = fixture(seed=11, extra={CLIP_RATIO_HIGH: values})
    with pytest.raises(ValueError, match="one bound per step"):
        run_loss(actor_config(), data, flat, entropy)


# ----------------------------------------------------------------------------------------------------------
# the controllers on a synthetic plant
# ----------------------------------------------------------------------------------------------------------


def plant(log_h: float, eps_high: float, gain: float = 1.0, drift: float = -0.05) -> float:
    """One step of a plant where a wider bound raises entropy: ``log H' = log H + drift + gain (eps_high - 0.28)``
    (entropy decays at DAPO's 0.28, as collapse does without control)."""
    return log_h + drift + gain * (eps_high - 0.28)


def test_the_controller_widens_the_bound_below_target_and_narrows_it_above():
    """PI (the one controller that drives the bound): entropy below target, the bound leaves its rest value 0.28
    upward; above: downward (the direction +1)."""
    cfg = EntropyControlConfig(enable=True, controller="pi", actuator="clip_high", target=1.0)
    assert (cfg.clip_high_min, cfg.clip_high_max) == (0.2, 1.0)
    assert EntropyController(cfg, clip_high=0.28).update(1, 0.8)[0] > 0.28
    assert EntropyController(cfg, clip_high=0.28).update(1, 1.25)[0] < 0.28


def test_the_controller_holds_a_decaying_plant_on_target_with_the_bound():
    """Starting at 0.6 nats below a target of 0.8, on a plant that loses 5 % a step at the rest value: the controller
    lifts the entropy to the target and keeps it there (steps 41-60 within 10 % of it, in the mean of log H), with
    the bound inside its range and above the rest value (it must work against the decay). Without it (the bound held
    at 0.28) the entropy would fall to 0.6 e^{-3} = 0.03."""
    controller_ = EntropyController(EntropyControlConfig(enable=True, controller="pi", actuator="clip_high",
                                                         target=0.8, kp=1.0, ki=0.5), clip_high=0.28)  # fmt: skip
    log_h, history = math.log(0.6), []
    for step in range(1, 61):
        value, metrics = controller_.update(step, math.exp(log_h))
        assert 0.2 <= value <= 1.0 and metrics["entropy_control/clip_high"] == value
        history.append((log_h, value))
        log_h = plant(log_h, value)
    late = history[40:]
    assert abs(math.exp(sum(h for h, _ in late) / len(late)) / 0.8 - 1.0) < 0.1
    assert sum(v for _, v in late) / len(late) > 0.28


@pytest.mark.parametrize("controller", ["auto", "skywork", "entropic"])
def test_the_refused_controllers_name_the_key_and_the_reason(controller):
    """``auto`` included: the bound showed no authority on the fitted plants, so the default controller refuses it."""
    with pytest.raises(ConfigError) as info:
        EntropyControlConfig(enable=True, target=0.3, controller=controller, actuator="clip_high")
    assert info.value.key == "verl_ext.entropy_control.actuator"
    assert REFUSED[(controller, "clip_high")] in info.value.message and "'clip_high'" in info.value.message


@pytest.mark.parametrize(("values", "key", "words"), [
    ({"clip_high_min": 0.0}, "clip_high_min", "0 < clip_high_min < clip_high_max"),
    ({"clip_high_min": 0.5, "clip_high_max": 0.4}, "clip_high_min", "0 < clip_high_min < clip_high_max"),
    ({"clip_high_init": 1.5}, "clip_high_init", "[clip_high_min, clip_high_max] = [0.2, 1.0]"),
])  # fmt: skip
def test_bad_clip_high_values_name_the_key(values, key, words):
    with pytest.raises(ConfigError) as info:
        EntropyControlConfig.from_mapping({"enable": True, "target": 0.3, "controller": "pi", "actuator": "clip_high",
                                           **values})
    assert info.value.key == f"verl_ext.entropy_control.{key}" and words in info.value.message


def test_clip_high_keys_with_another_actuator_are_an_error():
    with pytest.raises(ConfigError) as info:
        EntropyControlConfig.from_mapping({"enable": True, "target": 0.3,
                                           "actuator": "entropy_coef", "clip_high_max": 0.5})
    assert info.value.key == "verl_ext.entropy_control.clip_high_max" and "actuator=clip_high" in info.value.message


# ----------------------------------------------------------------------------------------------------------
# config time and the driver (legacy trainer, no Ray)
# ----------------------------------------------------------------------------------------------------------

CLIP_HIGH = ["verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.controller=pi",
             "verl_ext.entropy_control.actuator=clip_high", "verl_ext.entropy_control.target=2.0"]  # fmt: skip


@pytest.mark.parametrize("loss_mode", [*sorted(CLIP_HIGH_REFUSED), "gspo"])
def test_a_loss_whose_upper_bound_is_not_verls_is_refused_at_config_time(compose, loss_mode):
    from verl_ext.checks.validation import check_driver_features

    with pytest.raises(ConfigError) as info:
        check_driver_features(compose(*CLIP_HIGH, f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}"))
    assert info.value.key == "verl_ext.entropy_control.actuator"
    assert f"loss_mode={loss_mode}" in info.value.message and str(sorted(CLIP_HIGH_LOSSES)) in info.value.message
    reason = SPECS[loss_mode].clip_high_refusal if loss_mode in SPECS else "not checked to read clip_ratio_high"
    assert reason in info.value.message


@pytest.mark.parametrize("loss_mode", sorted(CLIP_HIGH_LOSSES))
def test_every_allowed_loss_passes_the_config_checks(compose, loss_mode):
    from verl_ext.checks.validation import check_driver_features

    described = check_driver_features(compose(*CLIP_HIGH, f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}"))
    assert described == ["entropy control: target 2.0 nats/token, controller pi on actuator clip_high"]


def test_a_configured_bound_outside_the_range_is_an_error_naming_clip_high_init(compose):
    from verl_ext.checks.validation import check_driver_features

    with pytest.raises(ConfigError) as info:
        check_driver_features(compose(*CLIP_HIGH, "actor_rollout_ref.actor.clip_ratio_high=0.1"))
    assert info.value.key == "verl_ext.entropy_control.clip_high_init" and "clip_ratio_high=0.1" in info.value.message
    check_driver_features(compose(*CLIP_HIGH, "actor_rollout_ref.actor.clip_ratio_high=0.1",
                                  "verl_ext.entropy_control.clip_high_init=0.28"))  # fmt: skip


def test_the_rest_value_is_the_actors_configured_bound_and_the_driver_sends_the_step_value(compose):
    """clip_high_init null: the rest value is the actor's clip_ratio_high (0.28 here); the legacy trainer's update
    receives the controller's value of the step on every token, and the actor config knows the actuator."""
    from verl.utils.config import omega_conf_to_dataclass

    from _trainer_fakes import legacy_batch, legacy_trainer
    from test_controllers import _observe

    trainer = legacy_trainer(compose, *CLIP_HIGH, "actor_rollout_ref.actor.clip_ratio_high=0.28")
    assert trainer.verl_ext_driver.controller.actuator.init == 0.28
    actor = omega_conf_to_dataclass(trainer.config.actor_rollout_ref.actor)
    assert (actor.entropy_control_enable, actor.entropy_control_actuator) == (True, "clip_high")
    batch = legacy_batch()
    _observe(trainer, batch)  # entropy 0.5, below the target 2: the bound widens
    metrics = trainer._update_actor(batch).meta_info["metrics"]
    value = metrics["entropy_control/clip_high"]
    assert value == metrics["entropy_control/value"] and value > 0.28
    sent = trainer.actor_rollout_wg.updates[-1]["clip_ratio_high"]
    values = [float(v) for row in sent.unbind() for v in row]
    assert values and all(v == pytest.approx(value, rel=1e-7) for v in values), values
