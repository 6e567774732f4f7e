"""The entropy control: schedule values, the PI law on a synthetic plant, saturation and anti-windup, state round
trip, config errors; then wired into the legacy trainer (no Ray): its ratio reaches the selection, its metrics the
step, its state the checkpoint; and the token lens writes exactly the selected tokens."""

from __future__ import annotations

import json
import math

import pytest
import torch

from verl_ext.config import ConfigError
from verl_ext.control.entropy_control import EntropyControlConfig, EntropyController, target_at


def plant(entropy: float, ratio: float, decay: float = 0.1, gain: float = 2.0) -> float:
    """A synthetic policy: entropy decays towards 0 (collapse) and the selection ratio pushes it up;
    its fixed point for ratio r is gain * r / decay, so holding H* needs r* = decay * H* / gain."""
    return entropy - decay * entropy + gain * ratio


def run(controller: EntropyController, steps: int, entropy: float = 3.0, **plant_kwargs) -> list[dict]:
    history = []
    for step in range(1, steps + 1):
        ratio, metrics = controller.update(step, entropy)
        history.append({**metrics, "measured": entropy})
        entropy = plant(entropy, ratio, **plant_kwargs)
    return history


# ----------------------------------------------------------------------------------------------------------
# schedule
# ----------------------------------------------------------------------------------------------------------


def test_schedule_values():
    constant = EntropyControlConfig(target=1.5)
    assert target_at(constant, 1) == target_at(constant, 1000) == 1.5
    linear = EntropyControlConfig(target=2.0, schedule="linear", target_end=1.0, schedule_steps=11)
    assert [target_at(linear, s) for s in (1, 6, 11, 50)] == pytest.approx([2.0, 1.5, 1.0, 1.0])
    cosine = EntropyControlConfig(target=2.0, schedule="cosine", target_end=1.0)
    assert target_at(cosine, 1, total_steps=11) == pytest.approx(2.0)
    assert target_at(cosine, 6, total_steps=11) == pytest.approx(1.5)  # halfway
    assert target_at(cosine, 3, total_steps=11) == pytest.approx(1.0 + 0.5 * (1 + math.cos(math.pi * 0.2)))
    assert target_at(cosine, 11, total_steps=11) == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="schedule_steps"):
        target_at(cosine, 3)  # no length known


# ----------------------------------------------------------------------------------------------------------
# the law
# ----------------------------------------------------------------------------------------------------------


def test_pi_law_on_a_trajectory_computed_by_hand():
    """Target 1, kp = 1, ki = 0.5, rho_0 = 0.1, bounds [0.01, 0.5]; entropies e^-0.2, e^-1, e^-1, e^0.5 give the
    log-space errors 0.2, 1, 1, -0.5. By hand (log rho = log 0.1 + kp e + ki (I + e)):
      step 1: log 0.1 + 0.2 + 0.5 (0 + 0.2)   = log 0.1 + 0.3  -> 0.134986; I = 0.2
      step 2: log 0.1 + 1 + 0.5 (0.2 + 1)     = log 0.1 + 1.6  -> 0.495303; I = 1.2
      step 3: log 0.1 + 1 + 0.5 (1.2 + 1)     = log 0.1 + 2.1  -> 0.8166 > 0.5: 0.5, saturated, and the error pushes
              further into the bound, so I stays 1.2 (anti-windup)
      step 4: log 0.1 - 0.5 + 0.5 (1.2 - 0.5) = log 0.1 - 0.15 -> 0.086071; I = 0.7"""
    cfg = EntropyControlConfig(enable=True, controller="pi", actuator="cov_ratio", target=1.0, ratio_min=0.01, ratio_max=0.5, kp=1.0, ki=0.5)
    controller = EntropyController(cfg, ratio_init=0.1)
    expected = [(0.134986, 0.2, 0.2, 0.0), (0.495303, 1.0, 1.2, 0.0), (0.5, 1.0, 1.2, 1.0), (0.086071, -0.5, 0.7, 0.0)]
    for step, (entropy, (ratio, error, integral, saturated)) in enumerate(
        zip((math.exp(-0.2), math.exp(-1.0), math.exp(-1.0), math.exp(0.5)), expected), start=1
    ):
        got, metrics = controller.update(step, entropy)
        assert got == pytest.approx(ratio, abs=1e-6), step
        assert metrics["entropy_control/ratio"] == got
        assert metrics["entropy_control/error"] == pytest.approx(error, abs=1e-12), step
        assert metrics["entropy_control/integral"] == pytest.approx(integral, abs=1e-12), step
        assert metrics["entropy_control/saturated"] == saturated, step
        assert metrics["entropy_control/target"] == 1.0 and metrics["entropy_control/entropy"] == entropy


def test_step_response_holds_the_target_on_a_synthetic_plant():
    """Entropy starts at 3 and would collapse to gain*r0/decay = 0.2; PI on the ratio holds it at 1.0 (r* = 0.05)."""
    cfg = EntropyControlConfig(enable=True, controller="pi", actuator="cov_ratio", target=1.0, ratio_min=1e-4, ratio_max=0.5, kp=1.0, ki=0.3)
    history = run(EntropyController(cfg, ratio_init=0.01), steps=80)
    late = history[-20:]
    assert max(abs(h["measured"] - 1.0) for h in late) < 0.02
    assert late[-1]["entropy_control/ratio"] == pytest.approx(0.05, rel=0.03)
    assert not any(h["entropy_control/saturated"] for h in late)
    uncontrolled = EntropyControlConfig(enable=True, controller="pi", actuator="cov_ratio", target=1.0, kp=0.0, ki=0.0)
    fixed = run(EntropyController(uncontrolled, 0.01), steps=80)
    assert fixed[-1]["measured"] == pytest.approx(0.2, rel=0.05)  # without control: the plant's own level


def test_saturation_and_anti_windup():
    """Unreachable target: the ratio sits on ratio_max and the integral stops growing; when the target becomes
    reachable again the ratio leaves the bound at once instead of unwinding an accumulated integral."""
    cfg = EntropyControlConfig(enable=True, controller="pi", actuator="cov_ratio", target=5.0, ratio_min=1e-4, ratio_max=0.1, kp=1.0, ki=0.3)
    controller = EntropyController(cfg, ratio_init=0.01)
    history = run(controller, steps=40)
    assert all(h["entropy_control/saturated"] == 1.0 for h in history[10:])
    assert history[-1]["entropy_control/ratio"] == pytest.approx(0.1)
    frozen = [h["entropy_control/integral"] for h in history[10:]]
    assert max(frozen) - min(frozen) < 1e-12
    controller.config = EntropyControlConfig(enable=True, controller="pi", actuator="cov_ratio", target=0.5, ratio_min=1e-4, ratio_max=0.1,
                                             kp=1.0, ki=0.3)  # fmt: skip
    ratio, metrics = controller.update(41, history[-1]["measured"])
    assert ratio < 0.1 and metrics["entropy_control/saturated"] == 0.0


def test_pi_takes_a_limited_steps_error_out_of_the_integral_only_when_it_pushed_for_more():
    """Same law and numbers as the hand-computed trajectory above; after each step the selection reports whether it
    took fewer tokens than the ratio asked (Clip-Cov's bounds admitting fewer):
      step 1: e = 0.2 (push up), limited     -> I = 0 + 0.2 - 0.2 = 0 (held, as on a bound)
      step 2: e = -0.5 (push down), limited  -> I = -0.5 (asking for fewer tokens is not blocked: kept)
      step 3: e = 1: log 0.1 + 1 + 0.5 (-0.5 + 1) = log 0.1 + 1.25 -> 0.349034, not limited -> I = 0.5
      step 4: e = 3: log 0.1 + 3 + 0.5 (0.5 + 3) > log 0.5: on the bound, held there already; limited changes
              nothing (I = 0.5)"""
    cfg = EntropyControlConfig(enable=True, controller="pi", actuator="cov_ratio", target=1.0, ratio_min=0.01, ratio_max=0.5, kp=1.0, ki=0.5)
    controller = EntropyController(cfg, ratio_init=0.1)
    expected = [(0.2, True, 0.0), (-0.5, True, -0.5), (1.0, False, 0.5), (3.0, True, 0.5)]
    for step, (error, limited, integral) in enumerate(expected, start=1):
        ratio, metrics = controller.update(step, math.exp(-error))
        controller.actuator_limited(limited, metrics)
        assert metrics["entropy_control/limited"] == float(limited), step
        assert metrics["entropy_control/integral"] == pytest.approx(integral, abs=1e-12), step
        assert controller.state.integral == pytest.approx(integral, abs=1e-12), step
        if step == 3:
            assert ratio == pytest.approx(0.1 * math.exp(1.25), abs=1e-9)
    assert metrics["entropy_control/saturated"] == 1.0


def test_a_second_update_of_one_step_is_an_error_naming_the_step():
    """The controller updates once per training step: a second update of a step (or an earlier step) would integrate
    its error twice, so it is an error naming the step; a resumed controller continues after the loaded step."""
    cfg = EntropyControlConfig(enable=True, controller="pi", actuator="cov_ratio", target=1.0, ratio_min=0.01, ratio_max=0.5, kp=1.0, ki=0.5)
    controller = EntropyController(cfg, ratio_init=0.1)
    controller.update(3, 0.8)
    integral = controller.state.integral
    for step in (3, 2):
        with pytest.raises(RuntimeError, match=f"update for step {step} after the update of step 3"):
            controller.update(step, 0.8)
    assert controller.state.integral == integral  # the refused update changed nothing
    controller.update(4, 0.8)
    resumed = EntropyController(cfg, ratio_init=0.1)
    resumed.load_state_dict(controller.state_dict())
    with pytest.raises(RuntimeError, match="update for step 4 after the update of step 4"):
        resumed.update(4, 0.8)
    resumed.update(5, 0.8)


def test_state_round_trip_continues_identically():
    cfg = EntropyControlConfig(enable=True, controller="pi", actuator="cov_ratio", target=1.2, ratio_max=0.3)
    whole = EntropyController(cfg, 0.02)
    run(whole, steps=10)
    resumed = EntropyController(cfg, 0.02)
    resumed.load_state_dict(json.loads(json.dumps(whole.state_dict())))
    assert whole.update(11, 0.9) == resumed.update(11, 0.9)


@pytest.mark.parametrize(
    ("values", "key", "words"),
    [
        ({"target": 0.0}, "target", "number > 0"),
        ({"schedule": "exp"}, "schedule", "['constant', 'linear', 'cosine']"),
        ({"target_end": 0.5}, "target_end", "schedule=constant ignores it"),
        ({"schedule": "linear"}, "target_end", "is null but schedule=linear"),
        ({"ratio_min": 0.3, "ratio_max": 0.2}, "ratio_min", "0 < ratio_min < ratio_max <= 1"),
        ({"ratio_init": 0.9}, "ratio_init", "[ratio_min, ratio_max]"),
        ({"kp": -1}, "kp", ">= 0"),
        ({"schedule_steps": 0}, "schedule_steps", "integer >= 1"),
        ({"gain": 1.0}, "gain", "is not a key of verl_ext.entropy_control"),
    ],
)
def test_bad_values_name_the_key(values, key, words):
    with pytest.raises(ConfigError) as info:
        EntropyControlConfig.from_mapping(values)
    assert info.value.key == f"verl_ext.entropy_control.{key}" and words in info.value.message


# ----------------------------------------------------------------------------------------------------------
# in the legacy trainer (no Ray)
# ----------------------------------------------------------------------------------------------------------

from _trainer_fakes import RESPONSE_LENS, legacy_batch, legacy_trainer  # noqa: E402

CONTROL_ON_KL_COV = ["policy_loss@actor_rollout_ref.actor.policy_loss=kl_cov",
                     "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.1",
                     "verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.target=50.0",
                     "verl_ext.entropy_control.actuator=cov_ratio", "verl_ext.entropy_control.ratio_max=0.5"]  # fmt: skip
"""KL-Cov (ratio 0.1) whose selection ratio the default controller (``auto``) sets, target 50 nats."""


def test_validation_names_the_key_of_an_unsupported_setting(compose):
    from verl_ext.checks.validation import ConfigError, check_driver_features

    for overrides, key in (
        (["actor_rollout_ref.actor.policy_loss.loss_mode=grpo_erc", "verl_ext.entropy_control.enable=true",
          "verl_ext.entropy_control.target=0.3",
          "verl_ext.entropy_control.actuator=cov_ratio"],
         "verl_ext.entropy_control.enable"),
        ([*CONTROL_ON_KL_COV, "actor_rollout_ref.actor.policy_loss.cov_scope=micro"],
         "verl_ext.entropy_control.enable"),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla", "verl_ext.token_lens.enable=true"],
         "verl_ext.token_lens.enable"),
        ([*CONTROL_ON_KL_COV, "verl_ext.entropy_control.ratio_min=0.2"], "verl_ext.entropy_control.ratio_init"),
        ([*CONTROL_ON_KL_COV, "verl_ext.entropy_control.schedule=cosine", "verl_ext.entropy_control.target_end=1.0"],
         "verl_ext.entropy_control.schedule_steps"),
        (["verl_ext.token_lens.every_n_steps=0"], "verl_ext.token_lens.every_n_steps"),
    ):  # fmt: skip
        with pytest.raises(ConfigError) as info:
            check_driver_features(compose("trainer.use_v1=false", *overrides))
        assert info.value.key == key, (overrides, info.value)


def _entropys(batch) -> torch.Tensor:
    """What the fake worker's old-log-prob pass returns: 0.5 nats on every token (the trainer sees the padded form)."""
    return torch.full(batch.batch["response_mask"].shape, 0.5) * batch.batch["response_mask"]


def test_entropy_control_sets_the_selection_ratio_and_its_state_goes_with_the_checkpoint(compose, tmp_path):
    trainer = legacy_trainer(compose, *CONTROL_ON_KL_COV, f"trainer.default_local_dir={tmp_path}")
    batch = legacy_batch()
    trainer.verl_ext_driver.observe_entropy(_entropys(batch), batch.batch["response_mask"])
    metrics = trainer._update_actor(batch).meta_info["metrics"]
    # entropy 0.5 far below the target 50: the ratio goes up from kl_cov_ratio, and the selection follows it
    ratio = metrics["entropy_control/ratio"]
    assert ratio > 0.1 and metrics["entropy_control/target"] == 50.0 and metrics["entropy_control/entropy"] == 0.5
    assert metrics["entropy_control/error"] == pytest.approx(math.log(50.0 / 0.5))
    selected = int(trainer.actor_rollout_wg.updates[-1]["cov_selected"].sum())
    assert selected == max(1, math.floor(ratio * sum(RESPONSE_LENS)))
    assert metrics["actor/kl_cov/batch_selected_frac"] == pytest.approx(selected / sum(RESPONSE_LENS))
    saved = trainer.verl_ext_driver.save(trainer.global_steps)
    assert saved == tmp_path / "global_step_3" / "verl_ext_driver.json"
    resumed = legacy_trainer(compose, *CONTROL_ON_KL_COV, f"trainer.default_local_dir={tmp_path}")
    assert resumed.verl_ext_driver.load(3)
    assert resumed.verl_ext_driver.controller.state_dict() == trainer.verl_ext_driver.controller.state_dict()


def test_pi_on_clip_covs_ratio_holds_its_integral_while_the_bounds_admit_fewer_tokens_than_the_ratio(compose):
    """Clip-Cov with bounds no token's covariance reaches: the ratio asks for tokens, none is a candidate, so the step
    counts as limited and its error (which pushes the ratio up) stays out of the integral; KL-Cov (every token a
    candidate) delivers its budget and integrates."""
    # target 0.6 against the measured 0.5: e = log 1.2, ratio 0.1 e^(1.5 e) = 0.131, inside [ratio_min, ratio_max]
    control = ["verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.controller=pi", "verl_ext.entropy_control.target=0.6", "verl_ext.entropy_control.kp=1.0",
               "verl_ext.entropy_control.ki=0.5", "verl_ext.entropy_control.actuator=cov_ratio",
               "verl_ext.entropy_control.ratio_max=0.5"]  # fmt: skip
    clip_cov = ["policy_loss@actor_rollout_ref.actor.policy_loss=clip_cov", "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.1",
                "actor_rollout_ref.actor.policy_loss.clip_cov_lb=1000.0", "actor_rollout_ref.actor.policy_loss.clip_cov_ub=2000.0"]  # fmt: skip
    for overrides, limited in ((clip_cov, True), (CONTROL_ON_KL_COV[:2], False)):
        trainer = legacy_trainer(compose, *overrides, *control)
        batch = legacy_batch()
        trainer.verl_ext_driver.observe_entropy(_entropys(batch), batch.batch["response_mask"])
        metrics = trainer._update_actor(batch).meta_info["metrics"]
        error = metrics["entropy_control/error"]
        assert error == pytest.approx(math.log(1.2)) and metrics["entropy_control/saturated"] == 0.0
        assert metrics["entropy_control/ratio"] == pytest.approx(0.1 * math.exp(1.5 * error))
        selected = int(trainer.actor_rollout_wg.updates[-1]["cov_selected"].sum())
        assert (selected == 0) == limited and metrics["entropy_control/limited"] == float(limited)
        expected = 0.0 if limited else error
        assert metrics["entropy_control/integral"] == trainer.verl_ext_driver.controller.state.integral == expected


def test_resume_path_mode_loads_from_the_given_folder_and_saves_later_steps_under_default_local_dir(compose, tmp_path):
    """``trainer.resume_mode=resume_path``: the state is read from ``resume_from_path``, but every later step is
    saved where verl saves it (``default_local_dir/global_step_<N>``), so a later ``auto`` resume finds it."""
    old_run, new_run = tmp_path / "old_run", tmp_path / "new_run"
    first = legacy_trainer(compose, *CONTROL_ON_KL_COV, f"trainer.default_local_dir={old_run}")
    batch = legacy_batch()
    first.verl_ext_driver.observe_entropy(_entropys(batch), batch.batch["response_mask"])
    first._update_actor(batch)
    first.verl_ext_driver.save(3)
    resume = [f"trainer.default_local_dir={new_run}", "trainer.resume_mode=resume_path",
              f"trainer.resume_from_path={old_run / 'global_step_3'}"]  # fmt: skip
    second = legacy_trainer(compose, *CONTROL_ON_KL_COV, *resume)
    assert second.verl_ext_driver.load(3)
    assert second.verl_ext_driver.controller.state_dict() == first.verl_ext_driver.controller.state_dict()
    second.verl_ext_driver.observe_entropy(_entropys(batch), batch.batch["response_mask"])
    second.global_steps = 4
    second._update_actor(batch)
    assert second.verl_ext_driver.save(4) == new_run / "global_step_4" / "verl_ext_driver.json"
    assert not (old_run / "global_step_4").exists()
    third = legacy_trainer(compose, *CONTROL_ON_KL_COV, f"trainer.default_local_dir={new_run}",
                           "trainer.resume_mode=auto")  # fmt: skip
    assert third.verl_ext_driver.load(4)
    assert third.verl_ext_driver.controller.state_dict() == second.verl_ext_driver.controller.state_dict()


def test_driver_state_follows_verls_max_actor_ckpt_to_keep(compose, tmp_path):
    """verl deletes ``global_step_<N>/actor`` of the checkpoints it no longer keeps; verl_ext's state file of
    those steps goes with it at the next save, the kept steps' files stay."""
    trainer = legacy_trainer(compose, *CONTROL_ON_KL_COV, f"trainer.default_local_dir={tmp_path}")
    for step in (1, 2, 3):
        (tmp_path / f"global_step_{step}" / "actor").mkdir(parents=True)
        trainer.verl_ext_driver.save(step)
    import shutil

    shutil.rmtree(tmp_path / "global_step_1" / "actor")  # what verl does with max_actor_ckpt_to_keep=2 at step 3
    (tmp_path / "global_step_4").mkdir()
    trainer.verl_ext_driver.save(4)
    states = sorted(p.parent.name for p in tmp_path.glob("global_step_*/verl_ext_driver.json"))
    assert states == ["global_step_2", "global_step_3", "global_step_4"]


def test_entropy_control_without_an_observed_entropy_fails_clearly(compose):
    trainer = legacy_trainer(compose, *CONTROL_ON_KL_COV)
    with pytest.raises(RuntimeError, match="no entropy observed"):
        trainer._update_actor(legacy_batch())


def test_the_driver_holds_the_actuator_on_a_batch_without_valid_tokens_and_stops_after_max_bad_steps(compose):
    """An empty response mask measures 0 nats: the entropy controller holds the value of the step before, counts it,
    and the third such step in a row stops the run naming the metric and the step."""
    trainer = legacy_trainer(compose, *CONTROL_ON_KL_COV)
    driver = trainer.verl_ext_driver
    entropy, mask = torch.full((2, 3), 0.5), torch.ones(2, 3)
    driver.observe_entropy(entropy, mask)
    first = driver.control_value(1, {})
    for step in (2, 3):
        driver.observe_entropy(entropy, torch.zeros(2, 3))
        metrics: dict = {}
        assert driver.control_value(step, metrics) == first and metrics["entropy_control/bad_steps"] == step - 1
    driver.observe_entropy(entropy, torch.zeros(2, 3))
    with pytest.raises(RuntimeError, match="entropy_control/entropy was 0.0 at step 4"):
        driver.control_value(4, {})


def test_token_lens_writes_exactly_the_selected_tokens(compose, tmp_path):
    from transformers import PreTrainedTokenizerFast  # noqa: F401  (any tokenizer with decode works)

    class Tokenizer:
        def decode(self, ids):
            return " ".join(f"t{i}" for i in ids)

    lens_file = tmp_path / "run.lens.jsonl"
    trainer = legacy_trainer(compose, "policy_loss@actor_rollout_ref.actor.policy_loss=clip_cov",
                             "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.3",
                             "actor_rollout_ref.actor.policy_loss.clip_cov_lb=-100",
                             "actor_rollout_ref.actor.policy_loss.clip_cov_ub=100", "verl_ext.token_lens.enable=true",
                             "verl_ext.token_lens.context_tokens=2", f"verl_ext.token_lens.path={lens_file}")  # fmt: skip
    trainer.tokenizer = Tokenizer()
    batch = legacy_batch()
    trainer._update_actor(batch)
    selected = trainer.actor_rollout_wg.updates[-1]["cov_selected"]
    rows = [json.loads(line) for line in lens_file.read_text().splitlines()]
    assert len(rows) == int(selected.sum()) == int(0.3 * sum(RESPONSE_LENS))
    assert {(r["sample"], r["position"]) for r in rows} == {tuple(x) for x in selected.nonzero().tolist()}
    responses = batch.batch["responses"]
    for row in rows:
        s, p = row["sample"], row["position"]
        assert row["step"] == 3 and row["token_id"] == int(responses[s, p]) and row["token"] == f"t{row['token_id']}"
        assert row["context"] == " ".join(f"t{i}" for i in responses[s, max(0, p - 2):p].tolist())
        assert row["advantage"] == pytest.approx(float(batch.batch["advantages"][s, p]))
        assert row["prob"] == pytest.approx(math.exp(float(batch.batch["old_log_probs"][s, p])))


def test_lens_file_sits_next_to_verls_file_log(tmp_path, monkeypatch):
    """Where verl's FileLogger writes (``VERL_FILE_LOGGER_PATH``, else ``$VERL_FILE_LOGGER_ROOT/<project>/
    <experiment>.jsonl`` with ``~`` expanded), the lens writes ``.lens.jsonl`` beside it; ``path`` overrides."""
    from pathlib import Path

    from verl_ext.driver.token_lens import TokenLensConfig, lens_path

    lens = TokenLensConfig(enable=True)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "logs" / "run.jsonl"))
    assert lens_path(lens, "proj", "exp") == tmp_path / "logs" / "run.lens.jsonl"
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", "~/runs")
    assert lens_path(lens, "proj", "exp") == tmp_path / "runs" / "proj" / "exp.lens.jsonl"
    assert lens_path(TokenLensConfig(enable=True, path="~/mine.jsonl"), "proj", "exp") == Path(tmp_path) / "mine.jsonl"


def test_file_log_continues_from_the_checkpoint_a_run_resumes_from(compose, tmp_path, monkeypatch):
    """verl's FileLogger truncates its JSONL when a resumed run opens it; inside ``continuing_file_log`` the rows
    of the steps up to the checkpoint stay, rows a killed run logged after it go (they are trained again), and a
    fresh run starts empty."""
    from verl.utils import tracking

    from verl_ext.driver.run_log import continuing_file_log

    log = tmp_path / "run.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(log))
    ckpts = tmp_path / "ckpts"
    (ckpts / "global_step_2").mkdir(parents=True)
    (ckpts / "latest_checkpointed_iteration.txt").write_text("2")
    killed = [json.dumps({"step": s, "data": {"x": s}}) for s in (1, 2, 3)]  # step 3 ran, its checkpoint never came
    log.write_text("\n".join(killed) + "\n")

    config = compose(f"trainer.default_local_dir={ckpts}", "trainer.resume_mode=auto")
    with continuing_file_log(config):
        logger = tracking.FileLogger("p", "e")
        logger.log({"x": 30}, step=3)
        logger.finish()
    assert tracking.FileLogger.__name__ == "FileLogger" and tracking.FileLogger.__module__ == "verl.utils.tracking"
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        {"step": 1, "data": {"x": 1}}, {"step": 2, "data": {"x": 2}}, {"step": 3, "data": {"x": 30}}]  # fmt: skip

    for fresh in (compose(f"trainer.default_local_dir={ckpts}", "trainer.resume_mode=disable"),
                  compose(f"trainer.default_local_dir={tmp_path / 'empty'}", "trainer.resume_mode=auto")):  # fmt: skip
        with continuing_file_log(fresh):
            tracking.FileLogger("p", "e").finish()
        assert log.read_text() == ""
        log.write_text("\n".join(killed) + "\n")

    resume_path = compose(f"trainer.default_local_dir={tmp_path / 'other'}", "trainer.resume_mode=resume_path",
                          f"trainer.resume_from_path={ckpts / 'global_step_2'}")  # fmt: skip
    with continuing_file_log(resume_path):
        tracking.FileLogger("p", "e").finish()
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [1, 2]


# ----------------------------------------------------------------------------------------------------------
# the loss-side actuators in the actor loss: EntroPIC's normalisation, and the terms are in the loss
# ----------------------------------------------------------------------------------------------------------


def _loss_inputs(extra: dict[str, float], seed: int = 0):
    """A 4-sequence micro-batch of a mini-batch of ``2 x`` its tokens (so the micro-batch's share is 1/2), in verl's
    no-padding layout, float64; current log-probs near 0 so that some tokens are high-probability (pi > 0.95).
    ``extra``: batch fields set to one value on every token."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import FSDPOptimizerConfig
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    from verl_ext.config import PolicyLossConfig
    from benchmarks.cpu_actor import make_batch
    from verl_ext.trainer.actor_config import FSDPActorConfig

    gen = torch.Generator().manual_seed(seed)
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]
    responses = [[20, 21, 22, 23, 24], [25, 26], [27, 28, 29], [30, 31, 32, 33, 34, 35]]
    shape = (4, max(map(len, responses)))
    fields = {"advantages": torch.randn(*shape, generator=gen, dtype=torch.float64),
              "old_log_probs": -torch.rand(*shape, generator=gen, dtype=torch.float64) * 0.1,
              **{k: torch.full(shape, v, dtype=torch.float64) for k, v in extra.items()}}  # fmt: skip
    data = left_right_2_no_padding(make_batch(prompts, responses, response_fields=fields))
    n_tokens = int(data["response_mask"].sum())
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=2 * n_tokens, global_batch_size=8)
    total = int(data["input_ids"].values().shape[0])
    flat = (-torch.rand(total, generator=gen, dtype=torch.float64) * 0.1).requires_grad_(True)
    entropy = torch.rand(total, generator=gen, dtype=torch.float64) + 0.5
    config = FSDPActorConfig(strategy="fsdp2", rollout_n=1, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=4,
                             optim=FSDPOptimizerConfig(lr=1e-3), policy_loss=PolicyLossConfig(loss_mode="vanilla"),
                             loss_agg_mode="token-mean", entropy_coeff=0.0)  # fmt: skip
    return config, data, flat, entropy, (lambda t: no_padding_2_padding(t, data))


def _loss(extra: dict[str, float], seed: int = 0):
    from verl_ext.trainer.actor_loss import ppo_loss

    config, data, flat, entropy, padded = _loss_inputs(extra, seed)
    loss, metrics = ppo_loss(config, {"log_probs": flat, "entropy": entropy}, data.clone())
    values = {k: float(m.aggregate()) if hasattr(m, "aggregate") else float(m) for k, m in metrics.items()}
    fields = data.select("response_mask", "advantages", "old_log_probs").to_padded_tensor()
    return float(loss.detach()), values, padded(flat.detach()), padded(entropy), fields["response_mask"].bool(), fields


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_entropic_term_is_normalised_by_the_micro_batchs_high_probability_tokens(seed):
    """weight_norm=high_prob (EntroPIC's ``agg_loss(-r |A|, mask=high_prob)`` per micro-batch, weighted by the
    micro-batch's share): term = alpha * (N_mb / N_mini) * mean_{HP}(-r |A|); all_tokens: alpha * sum_HP(-r |A|) /
    N_mini. Recomputed here from the padded tensors, and the loss moves by exactly the term."""
    alpha = 0.7
    base, _, lp, _, mask, fields = _loss({}, seed)
    adv, old = fields["advantages"], fields["old_log_probs"]
    high = mask & (lp > math.log(0.95))
    n, n_high = int(mask.sum()), int(high.sum())
    assert 0 < n_high < n  # the fixture splits the tokens
    summed = float(torch.where(high, -torch.exp(lp - old) * adv.abs(), 0.0).sum())
    want = {1.0: alpha * (n / (2 * n)) * summed / n_high, 0.0: alpha * summed / (2 * n)}
    for norm, expected in want.items():
        loss, metrics, *_ = _loss({"pos_weight": alpha, "pos_weight_norm": norm}, seed)
        assert metrics["actor/entropic/term"] == pytest.approx(expected, rel=1e-9), norm
        assert loss - base == pytest.approx(expected, rel=1e-9, abs=1e-12), norm
        assert metrics["actor/entropic/loss_change"] == pytest.approx(expected, rel=1e-9), norm


def test_loss_change_metrics_measure_the_loss_itself():
    """``actor/entropy_control/loss_change`` / ``actor/entropic/loss_change`` are what the returned loss moved by
    when the term was added: -agg(c H) / EntroPIC's term, and the difference of two real losses (with and without
    the field). The e2e recipes assert them non-zero: they are 0 if the term never reaches the loss."""
    base, *_ = _loss({})
    loss, metrics, _, entropy, mask, _ = _loss({"entropy_coef": 0.01})
    term = 0.01 * float(entropy[mask].sum()) / (2 * int(mask.sum()))
    assert metrics["actor/entropy_control/entropy_term"] == pytest.approx(term, rel=1e-9)
    assert metrics["actor/entropy_control/loss_change"] == pytest.approx(-term, rel=1e-9)
    assert loss - base == pytest.approx(-term, rel=1e-9)
    loss, metrics, *_ = _loss({"pos_weight": -0.5, "pos_weight_norm": 1.0})
    assert metrics["actor/entropic/loss_change"] != 0.0
    assert loss - base == pytest.approx(metrics["actor/entropic/loss_change"], rel=1e-9)


# ----------------------------------------------------------------------------------------------------------
# resume: a missing entropy-controller state is an error unless asked for; the token lens does not repeat steps
# ----------------------------------------------------------------------------------------------------------


def test_resuming_without_the_entropy_controllers_state_file_is_an_error_unless_fresh_on_resume(compose, tmp_path):
    (tmp_path / "global_step_3").mkdir()  # a checkpoint saved without entropy control: no verl_ext_driver.json
    trainer = legacy_trainer(compose, *CONTROL_ON_KL_COV, f"trainer.default_local_dir={tmp_path}")
    with pytest.raises(FileNotFoundError) as info:
        trainer.verl_ext_driver.load(3)
    message = str(info.value)
    assert str(tmp_path / "global_step_3" / "verl_ext_driver.json") in message
    assert "verl_ext.entropy_control.fresh_on_resume=true" in message
    fresh = legacy_trainer(compose, *CONTROL_ON_KL_COV, f"trainer.default_local_dir={tmp_path}",
                           "verl_ext.entropy_control.fresh_on_resume=true")  # fmt: skip
    assert fresh.verl_ext_driver.load(3) is False
    assert fresh.verl_ext_driver.controller.state.integral == 0.0 and fresh.verl_ext_driver.controller.state.value is None
    with pytest.raises(ConfigError) as bad:
        EntropyControlConfig.from_mapping({"enable": True, "target": 0.3, "fresh_on_resume": "yes"})
    assert bad.value.key == "verl_ext.entropy_control.fresh_on_resume" and "true or false" in bad.value.message


LENS = ["policy_loss@actor_rollout_ref.actor.policy_loss=clip_cov", "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.3",
        "actor_rollout_ref.actor.policy_loss.clip_cov_lb=-100", "actor_rollout_ref.actor.policy_loss.clip_cov_ub=100",
        "verl_ext.token_lens.enable=true"]  # fmt: skip


def test_token_lens_on_resume_keeps_the_checkpointed_steps_rows_and_writes_each_step_once(compose, tmp_path):
    """A run killed after step 3's lens rows but before its checkpoint resumes from global_step_2: the lens file keeps
    steps 1-2, drops the killed run's step 3, and step 3 trained again is written once; a fresh run starts empty."""

    class Tokenizer:
        def decode(self, ids):
            return " ".join(f"t{i}" for i in ids)

    lens_file, ckpts = tmp_path / "run.lens.jsonl", tmp_path / "ckpts"
    (ckpts / "global_step_2").mkdir(parents=True)
    (ckpts / "latest_checkpointed_iteration.txt").write_text("2")
    killed = [{"step": s, "sample": 0, "position": i} for s in (1, 2, 3) for i in range(2)]
    lens_file.write_text("".join(json.dumps(row) + "\n" for row in killed))

    trainer = legacy_trainer(compose, *LENS, f"verl_ext.token_lens.path={lens_file}",
                             f"trainer.default_local_dir={ckpts}", "trainer.resume_mode=auto")  # fmt: skip
    trainer.tokenizer = Tokenizer()
    trainer._update_actor(legacy_batch())  # global step 3, trained again
    rows = [json.loads(line) for line in lens_file.read_text().splitlines()]
    selected = int(trainer.actor_rollout_wg.updates[-1]["cov_selected"].sum())
    assert rows[:4] == killed[:4]  # steps 1 and 2, as they were
    assert [r["step"] for r in rows[4:]] == [3] * selected and selected > 0
    assert all("token" in r for r in rows[4:])  # the new run's rows, not the killed run's

    fresh = legacy_trainer(compose, *LENS, f"verl_ext.token_lens.path={lens_file}",
                           f"trainer.default_local_dir={ckpts}", "trainer.resume_mode=disable")  # fmt: skip
    fresh.tokenizer = Tokenizer()
    fresh.global_steps = 1
    fresh._update_actor(legacy_batch())
    assert {json.loads(line)["step"] for line in lens_file.read_text().splitlines()} == {1}
