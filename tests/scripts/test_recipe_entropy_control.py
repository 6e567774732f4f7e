"""The entropy control switched on over every recipe, as a user would on the command line: ``enable=true
target=X`` alone passes verl_ext's config checks on each GPU recipe (and the CPU one) and builds the driver's
controller; ``controller=pi actuator=clip_high`` does on the GRPO and DAPO recipes of the vanilla loss, starting from
the bound the recipe configures (GRPO 0.2, DAPO 0.28). Composed from each launch script's real command (no Ray,
nothing started)."""

from __future__ import annotations

from pathlib import Path

import pytest
from recipe_pins import GPU_RECIPES, compose_script

ON = ("verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.target=0.5")


def composed(name: str, tmp_path: Path, *args: str):
    (tmp_path / "home").mkdir(exist_ok=True)
    return compose_script(name, {}, tmp_path, args)


@pytest.mark.parametrize("name", [*GPU_RECIPES, "cpu_tiny"])
def test_enable_and_a_target_alone_work_on_every_recipe(name, tmp_path):
    from verl_ext.checks.validation import check_driver_features
    from verl_ext.driver.mixin import VerlExtDriver

    cfg = composed(name, tmp_path, *ON)
    (described,) = check_driver_features(cfg)
    assert described.startswith("entropy control: target 0.5 nats/token"), described
    assert VerlExtDriver(cfg).controller is not None


@pytest.mark.parametrize(("name", "bound"), [("gsm8k_grpo_vanilla", 0.2), ("dapo_baseline", 0.28)])
def test_clip_high_works_on_the_grpo_and_dapo_recipes(name, bound, tmp_path):
    from verl_ext.checks.validation import check_driver_features
    from verl_ext.driver.mixin import VerlExtDriver

    cfg = composed(name, tmp_path, *ON, "verl_ext.entropy_control.controller=pi",
                   "verl_ext.entropy_control.actuator=clip_high")
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "vanilla"
    assert check_driver_features(cfg) == ["entropy control: target 0.5 nats/token, controller pi on actuator "
                                          "clip_high"]  # fmt: skip
    controller = VerlExtDriver(cfg).controller
    assert controller.actuator.name == "clip_high" and controller.actuator.init == bound
    assert (controller.actuator.lo, controller.actuator.hi) == (0.2, 1.0)
    assert cfg.actor_rollout_ref.actor.entropy_control_actuator == "clip_high"
