"""End to end in CPU mode: ``recipe/cpu_tiny.sh`` -> ``python -m verl_ext.main_ppo`` -> verl's real trainer (Ray on
127.0.0.1, FSDP2 actor and reference on gloo, vLLM's CPU engine as rollout server, verl's reward loop, old-log-prob
pass, update, weight sync), 2 steps per run, every loss, both trainers, KL clipping, checkpoint and resume.

Each run is started once per module (a few minutes in all on 2 cores) and checked from verl's file-logger JSONL
and its checkpoints. Settings make every method act: two mini-batches per step (KL-Cov's penalty is non-zero
after the first), selection ratios that pick a handful of the ~100 tokens of a batch, and Clip-Cov bounds that
admit every token (so its budget, not the bounds, decides how many are picked).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from _cpu_marks import cpu_only, needs_vllm_cpu

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipe" / "cpu_tiny.sh"
PROMPTS, N, LENGTH = 4, 4, 8
"""Prompts per step, responses per prompt (GRPO group), response tokens: 16 responses of <= 8 tokens per step."""

STATE = "verl_ext_driver.json"
"""verl_ext's state file in each ``global_step_<N>`` checkpoint folder."""

COV_RATIO = 0.05
"""Selection ratio of the Clip-Cov / KL-Cov runs: max(1, floor(0.05 * ~100)) = a handful of tokens."""



pytestmark = [cpu_only, needs_vllm_cpu, pytest.mark.e2e]


AUTOPILOT = ("verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.target=3.0",
             "verl_ext.entropy_control.ratio_min=0.001", "verl_ext.entropy_control.ratio_max=0.5")  # fmt: skip
"""The entropy autopilot from the run's COV_RATIO, with a target near the tiny model's initial entropy."""

OVERLONG = 4
"""DAPO's overlong buffer in the DAPO-structured run: responses longer than LENGTH - OVERLONG = 4 tokens are
penalised, which the task's own reward (0 to 1) never is, so a negative score shows the penalty acting."""

DYNAMIC_BSZ = (
    "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=48",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=64",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=64",
)
"""verl's dynamic batch size with token budgets below a mini-batch's ~100 tokens: verl packs (and reorders) the
rows into micro-batches of unequal size, differently in the old-log-prob pass and in the update."""

DAPO_STRUCTURE = (
    *DYNAMIC_BSZ,
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "algorithm.filter_groups.enable=True",
    "algorithm.filter_groups.metric=reward",
    "algorithm.filter_groups.max_num_gen_batches=20",
    "algorithm.filter_groups.max_inflight_gen_batches=3",
    "reward.reward_manager.name=dapo",
    "++reward.reward_kwargs.overlong_buffer_cfg.enable=True",
    f"++reward.reward_kwargs.overlong_buffer_cfg.len={OVERLONG}",
    "++reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
    "++reward.reward_kwargs.overlong_buffer_cfg.log=False",
    f"++reward.reward_kwargs.max_resp_len={LENGTH}",
)

ERC_NARROW_BAND = ("actor_rollout_ref.actor.policy_loss.entropy_mask_low=0.98",
                   "actor_rollout_ref.actor.policy_loss.entropy_mask_high=1.02")  # fmt: skip
"""An entropy-ratio band the second mini-batch's ratios cross on this tiny model (after one update at lr 5e-3 they
move by 1-3 %; the papers' 0.95 / 1.05 is never crossed in two mini-batches here), so that ERC is seen masking."""


# ----------------------------------------------------------------------------------------------------------
# running the recipe
# ----------------------------------------------------------------------------------------------------------


class Run:
    """One finished training run: its JSONL rows by step, its output, its checkpoint folder."""

    def __init__(self, name: str, root: Path, output: str):
        self.name = name
        self.output = output
        self.ckpts = root / "ckpts" / name
        self.lens = root / f"{name}.lens.jsonl"
        log = root / f"{name}.jsonl"
        assert log.exists(), f"{name}: no JSONL at {log}\n{output[-6000:]}"
        self.steps: dict[int, dict[str, Any]] = {}
        for line in log.read_text().splitlines():
            row = json.loads(line)
            self.steps[int(row["step"])] = row["data"]

    def metric(self, step: int, key: str) -> float:
        data = self.steps[step]
        assert key in data, f"{self.name}: no {key} at step {step}; keys: {sorted(data)}"
        return float(data[key])


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model and the task data, built once (the recipe's own builder)."""
    root = tmp_path_factory.mktemp("cpu_e2e")
    subprocess.run([sys.executable, "-m", "verl_ext.cpu.task", "--out", str(root), "--target-length", str(LENGTH)],
                   check=True, capture_output=True, text=True, timeout=300)  # fmt: skip
    (root / "varied_reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    # deterministic, and different across responses and prompts: non-zero advantages for greedy rollouts\n"
        "    return ((sum(map(ord, solution_str)) + 37 * int(ground_truth)) % 101) / 100.0\n"
    )
    return root


def recipe_env(root: Path, name: str, loss: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RAY_"))}
    env.update(
        WORK_DIR=str(root), ASSETS="0", LOSS=loss, EXP_NAME=name, STEPS="2", PROMPTS=str(PROMPTS), N=str(N),
        RESPONSE_LENGTH=str(LENGTH), COV_RATIO=str(COV_RATIO), PYTHON=sys.executable,
        VERL_FILE_LOGGER_PATH=str(root / f"{name}.jsonl"), HYDRA_FULL_ERROR="1",
    )  # fmt: skip
    env.update(extra)
    return env


def train(root: Path, name: str, loss: str, *overrides: str, **env: str) -> Run:
    """``bash recipe/cpu_tiny.sh OVERRIDES`` (2 steps); fails the test with the run's output if it fails."""
    proc = subprocess.run(["bash", str(RECIPE), "trainer.val_before_train=False", *overrides],
                          env=recipe_env(root, name, loss, **env), capture_output=True, text=True, timeout=900,
                          cwd=root)  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{output[-8000:]}"
    return Run(name, root, output)


@pytest.fixture(scope="module")
def runs(assets: Path):
    """``runs(name)``: the run of that name, trained on first use."""
    plans: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
        # V1 trainer (verl's default)
        "v1_grpo_erc_klclip": ("grpo_erc", ("actor_rollout_ref.actor.use_kl_loss=True",
                                            "actor_rollout_ref.actor.kl_loss_coef=0.1",
                                            "actor_rollout_ref.actor.kl_clip_method=hard",
                                            "actor_rollout_ref.actor.kl_clip_threshold=0.0001",
                                            "trainer.save_freq=2", *DYNAMIC_BSZ), {}),
        # the GPU recipes' structure: 2 training processes, dynamic batch size with budgets that pack each rank's
        # rows into several micro-batches, gradient checkpointing, DAPO's dynamic sampling and reward manager
        # with an overlong buffer
        "v1_kl_cov_dapo_2ranks": ("kl_cov", DAPO_STRUCTURE, {"GPUS_PER_NODE": "2"}),
        "v1_gppo_erc": ("gppo_erc", ERC_NARROW_BAND, {}),
        "v1_autopilot_lens": ("clip_cov", ("actor_rollout_ref.actor.policy_loss.clip_cov_lb=-100",
                                           "actor_rollout_ref.actor.policy_loss.clip_cov_ub=100",
                                           *AUTOPILOT, "verl_ext.token_lens.enable=true"), {}),
        # legacy RayPPOTrainer
        "legacy_grpo_erc": ("grpo_erc", ("trainer.use_v1=False", *ERC_NARROW_BAND), {}),
        "legacy_kl_cov": ("kl_cov", ("trainer.use_v1=False", *DYNAMIC_BSZ), {}),
    }  # fmt: skip

    @cache
    def get(name: str) -> Run:
        loss, overrides, env = plans[name]
        return train(assets, name, loss, *overrides, **env)

    return get


def all_finite(run: Run) -> None:
    assert sorted(run.steps) == [1, 2], f"{run.name}: steps {sorted(run.steps)}"
    for step, data in run.steps.items():
        bad = {k: v for k, v in data.items() if isinstance(v, (int, float)) and not math.isfinite(v)}
        assert not bad, f"{run.name} step {step}: non-finite metrics {bad}"


def budget(run: Run, step: int, ratio: float) -> float:
    """``max(1, floor(ratio * N)) / N`` for the step's N valid response tokens."""
    tokens = round(run.metric(step, "response_length/mean") * PROMPTS * N)
    return max(1, math.floor(ratio * tokens)) / tokens


# ----------------------------------------------------------------------------------------------------------
# every loss, both trainers
# ----------------------------------------------------------------------------------------------------------

ALL_RUNS = ["v1_grpo_erc_klclip", "v1_kl_cov_dapo_2ranks", "v1_gppo_erc", "v1_autopilot_lens", "legacy_grpo_erc",
            "legacy_kl_cov"]  # fmt: skip
"""With the resume runs (legacy ``clip_cov``) and the 2-node run (``clip_cov`` with the autopilot,
tests/e2e/test_cluster_sim.py): every loss, each trainer with an ERC and a covariance loss."""


@pytest.mark.parametrize("name", ALL_RUNS)
def test_trains_two_steps_with_finite_metrics_and_live_weight_sync(runs, name):
    """2 steps of verl's loop; the update moved the policy (ppo_kl != 0 in step 1) and the rollout engine
    serves the updated weights in step 2 (vLLM's and the actor's log-probs of the same tokens agree); the
    responses of a step scored differently (GRPO's advantages are not all 0)."""
    run = runs(name)
    all_finite(run)
    assert "step:2" in run.output  # verl's console logger printed the step metrics
    assert run.metric(1, "actor/ppo_kl") != 0.0  # the second mini-batch saw the first one's update
    assert abs(run.metric(2, "training/rollout_probs_diff_max")) < 1e-3, "vLLM did not get the updated weights"
    assert any(run.metric(step, "critic/advantages/max") > run.metric(step, "critic/advantages/min") for step in (1, 2))


@pytest.mark.parametrize("name", ["v1_grpo_erc_klclip", "v1_gppo_erc", "legacy_grpo_erc"])
def test_erc_gets_both_entropies(runs, name):
    """The ERC mask ran on the current and the old entropy (the loss raises without either), and they differ
    after the first mini-batch's update: the ratio's step mean is not exactly 1."""
    run = runs(name)
    assert any(run.metric(step, "actor/erc/entropy_ratio_mean") != 1.0 for step in (1, 2))


@pytest.mark.parametrize("name", ["v1_gppo_erc", "legacy_grpo_erc"])
def test_erc_masks_tokens_outside_its_band(runs, name):
    """With a band the update crosses, ERC masks tokens at some update (kept_frac < 1), and what it masks is below
    or above the band."""
    run = runs(name)
    kept = [run.metric(step, "actor/erc/kept_frac") for step in (1, 2)]
    assert min(kept) < 1.0, kept
    for step in (1, 2):
        below, above = run.metric(step, "actor/erc/below_frac"), run.metric(step, "actor/erc/above_frac")
        assert below + above == pytest.approx(1.0 - run.metric(step, "actor/erc/kept_frac"), abs=1e-5)


def test_erc_with_the_papers_band_keeps_every_token_under_dynamic_batches(runs):
    """The papers' band (0.95, 1.05), dynamic batch size: the old-log-prob pass and the update pack the rows into
    different micro-batches, yet each token's old entropy meets its own current entropy (fp32, at most one small
    update apart), so no ratio leaves the band. A misaligned ``old_entropy`` would pair tokens of different rows
    and mask many."""
    run = runs("v1_grpo_erc_klclip")
    assert [run.metric(step, "actor/erc/kept_frac") for step in (1, 2)] == [1.0, 1.0]


@pytest.mark.parametrize(("name", "loss"), [("v1_kl_cov_dapo_2ranks", "kl_cov"), ("legacy_kl_cov", "kl_cov")])
def test_batch_selection_picks_exactly_the_budget(runs, name, loss):
    """Over the whole batch, whatever the ranks and micro-batches (both runs pack dynamic micro-batches): exactly
    the budget is selected, and the selection reaches the loss's micro-batches."""
    run = runs(name)
    for step in (1, 2):
        expected = budget(run, step, COV_RATIO)
        assert run.metric(step, f"actor/{loss}/batch_selected_frac") == pytest.approx(expected, rel=1e-6)
        assert run.metric(step, f"actor/{loss}/selected_frac") > 0.0


@pytest.mark.parametrize("name", ["v1_kl_cov_dapo_2ranks", "legacy_kl_cov"])
def test_kl_cov_penalty_acts_after_the_first_mini_batch(runs, name):
    run = runs(name)
    assert max(run.metric(step, "actor/kl_cov/abs_kl_selected") for step in (1, 2)) > 0.0


def test_dapo_structure_runs_with_two_ranks_dynamic_batches_and_the_overlong_penalty(runs):
    """DAPO's reward manager applied the overlong penalty (a negative score: the task's reward is in [0, 1]) and
    verl split every step over two training processes."""
    run = runs("v1_kl_cov_dapo_2ranks")
    assert min(run.metric(step, "critic/score/min") for step in (1, 2)) < 0.0
    for step in (1, 2):
        assert run.metric(step, "perf/total_num_tokens") == 2 * run.metric(step, "global_seqlen/mean")


def test_dapo_that_cannot_fill_a_batch_stops_with_an_error(assets):
    """Every response scores the same (a constant reward): DAPO's filter evicts every group, verl's replay buffer
    would refill forever; the run stops at step 1 naming the key, after max_num_gen_batches generation batches."""
    reward = assets / "constant_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
                      "    return 0.5\n")  # fmt: skip
    proc = subprocess.run(["bash", str(RECIPE), "trainer.val_before_train=False", "algorithm.filter_groups.enable=True",
                           "algorithm.filter_groups.metric=reward", "algorithm.filter_groups.max_num_gen_batches=2",
                           f"reward.custom_reward_function.path={reward}"],
                          env=recipe_env(assets, "dapo_constant", "vanilla"), capture_output=True, text=True, timeout=600,
                          cwd=assets)  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-4000:]
    for words in ("DAPO dynamic sampling cannot fill the training batch of step 1", "max_num_gen_batches=2",
                  "0 group(s) kept"):  # fmt: skip
        assert words in output, output[-6000:]


def test_kl_clipping_hard_with_the_reference_model(runs):
    run = runs("v1_grpo_erc_klclip")
    for step in (1, 2):
        raw, clipped = run.metric(step, "actor/kl_clip/raw_kl"), run.metric(step, "actor/kl_clip/clipped_kl")
        assert 0.0 <= clipped <= raw + 1e-9
        assert 0.0 <= run.metric(step, "actor/kl_clip/frac_above") <= 1.0
        assert run.metric(step, "actor/kl_loss") == pytest.approx(clipped, rel=1e-5, abs=1e-9)
    assert run.metric(2, "actor/kl_clip/raw_kl") > 0.0  # the reference and the actor differ after an update


def test_actor_parameters_changed(runs, assets):
    """The step-2 checkpoint's actor weights differ from the initial model's."""
    from safetensors.torch import load_file

    run = runs("v1_grpo_erc_klclip")
    saved = torch.load(run.ckpts / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt", map_location="cpu",
                       weights_only=False)  # fmt: skip
    initial = load_file(assets / "model" / "model.safetensors")
    changed = [name for name, value in initial.items()
               if not torch.equal(getattr(saved[name], "to_local", lambda: saved[name])(), value)]  # fmt: skip
    assert len(changed) == len(initial), f"unchanged: {sorted(set(initial) - set(changed))}"


def lens_rows(run: Run) -> dict[int, list[dict]]:
    rows: dict[int, list[dict]] = {}
    for line in run.lens.read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(row["step"], []).append(row)
    return rows


def test_autopilot_sets_the_ratio_and_the_lens_writes_the_selection(runs):
    """V1 trainer: the autopilot's ratio of each step is the one the selection used (its budget), and the lens
    wrote exactly that many tokens, decoded, at valid positions."""
    run = runs("v1_autopilot_lens")
    all_finite(run)
    rows = lens_rows(run)
    for step in (1, 2):
        ratio = run.metric(step, "entropy_control/ratio")
        assert 0.001 <= ratio <= 0.5 and run.metric(step, "entropy_control/target") == 3.0
        assert run.metric(step, "entropy_control/entropy") == pytest.approx(run.metric(step, "actor/entropy"), rel=1e-5)
        frac = run.metric(step, "actor/clip_cov/batch_selected_frac")
        assert frac == pytest.approx(budget(run, step, ratio), rel=1e-6)
        tokens = round(run.metric(step, "response_length/mean") * PROMPTS * N)
        assert len(rows[step]) == round(frac * tokens)
        assert all(0 <= r["position"] < LENGTH and r["token"] and 0 < r["prob"] <= 1 for r in rows[step])
    # the ratio responds to the error: entropy below the target raises it from the loss's ratio
    first = run.metric(1, "entropy_control/error")
    assert (run.metric(1, "entropy_control/ratio") > COV_RATIO) == (first > 0)


# ----------------------------------------------------------------------------------------------------------
# checkpoint and resume
# ----------------------------------------------------------------------------------------------------------

RESUME_OVERRIDES = (
    # greedy rollouts (top-1 sampling) and one response per prompt: the batch of step 2 depends only on the
    # weights after step 1 and the data order, both restored from the checkpoint
    "actor_rollout_ref.rollout.top_k=1",
    "algorithm.adv_estimator=reinforce_plus_plus",
    "actor_rollout_ref.actor.policy_loss.clip_cov_lb=-100",
    "actor_rollout_ref.actor.policy_loss.clip_cov_ub=100",
    *AUTOPILOT,
    "verl_ext.token_lens.enable=true",
    # what the recipes set: resume from the latest checkpoint, keep a bounded number of them (here 1)
    "trainer.save_freq=1",
    "trainer.resume_mode=auto",
    "trainer.max_actor_ckpt_to_keep=1",
)


def kill_after_checkpoint(root: Path, name: str, overrides: tuple[str, ...], **env: str) -> Run:
    """Start the recipe in a process group of its own, SIGKILL the whole group as soon as step 1 is over (its
    checkpoint complete - verl writes the tracker file last - and its metrics logged), and return what is left."""
    tracker = root / "ckpts" / name / "latest_checkpointed_iteration.txt"
    log = root / f"{name}.jsonl"

    def step_one_done() -> bool:
        return tracker.exists() and tracker.read_text().strip() == "1" and log.exists() and b'"step":1' in log.read_bytes()

    proc = subprocess.Popen(["bash", str(RECIPE), "trainer.val_before_train=False", *overrides],
                            env=recipe_env(root, name, "clip_cov", **env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=root, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 600
    try:
        while not step_one_done():
            assert proc.poll() is None, f"{name}: exited ({proc.returncode}) before its step-1 checkpoint"
            assert time.monotonic() < deadline, f"{name}: no step-1 checkpoint within 600 s"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        output = proc.communicate()[0]
    return Run(name, root, output)


@pytest.mark.parametrize("use_v1", [False, True], ids=["legacy", "v1"])
def test_sigkill_after_a_checkpoint_then_the_same_command_resumes_losing_nothing(assets, use_v1):
    """A run killed with SIGKILL (its whole process group) right after its step-1 checkpoint, then the same command
    again (``resume_mode=auto``): training resumes at step 2, verl's JSONL keeps step 1 and continues, and step 2
    is the uninterrupted run's step 2 - the batch-scope selection (its draws depend only on the batch, the step and
    the seed), the autopilot's integral and ratio (its state went with the checkpoint), the lens's tokens.
    ``max_actor_ckpt_to_keep=1`` holds for verl_ext's state files as for verl's actor checkpoints."""
    trainer = "v1" if use_v1 else "legacy"
    overrides = (*RESUME_OVERRIDES, f"trainer.use_v1={use_v1}",
                 f"reward.custom_reward_function.path={assets / 'varied_reward.py'}")  # fmt: skip
    env = {"N": "1", "LR": "1e-4"}
    whole = train(assets, f"whole_{trainer}", "clip_cov", *overrides, **env)
    killed = kill_after_checkpoint(assets, f"killed_{trainer}", overrides, **env)
    assert sorted(killed.steps) == [1], f"killed too late (steps {sorted(killed.steps)}): the test proves nothing"
    resumed = train(assets, f"killed_{trainer}", "clip_cov", *overrides, **env)
    assert sorted(resumed.steps) == [1, 2], "the resumed run must continue the killed run's log"
    assert resumed.steps[1] == killed.steps[1]

    assert whole.metric(2, "critic/advantages/max") > whole.metric(2, "critic/advantages/min"), "advantages all equal"
    selection = [k for k in whole.steps[2] if k.startswith("actor/clip_cov/")]
    assert {"actor/clip_cov/batch_selected_frac", "actor/clip_cov/batch_cov_selected_mean"} <= set(selection)
    assert whole.metric(2, "actor/clip_cov/batch_cov_selected_mean") != 0.0
    control = [k for k in whole.steps[2] if k.startswith("entropy_control/")]
    assert {"entropy_control/ratio", "entropy_control/integral"} <= set(control)
    # the integral carries step 1's error: a resumed run that lost the state would differ here
    assert whole.metric(2, "entropy_control/integral") != pytest.approx(whole.metric(2, "entropy_control/error"))
    for key in [*selection, *control, "critic/score/mean", "actor/entropy", "actor/pg_loss", "response_length/mean"]:
        assert resumed.metric(2, key) == whole.metric(2, key), key
    assert lens_rows(resumed)[2] == lens_rows(whole)[2]  # the same tokens, token for token

    # verl_ext's state files follow verl's actor checkpoints: verl deleted step 1's in the uninterrupted run
    # (max_actor_ckpt_to_keep=1); after a restart verl no longer knows step 1's and keeps it, and so does verl_ext
    assert not (whole.ckpts / "global_step_1" / "actor").exists()
    for run in (whole, resumed):
        for step in (1, 2):
            folder = run.ckpts / f"global_step_{step}"
            assert (folder / STATE).is_file() == (folder / "actor").is_dir(), f"{run.name}: {folder}"
        assert (run.ckpts / "global_step_2" / STATE).is_file()
