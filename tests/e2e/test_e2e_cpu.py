"""End to end in CPU mode: ``recipe/cpu_tiny.sh`` -> ``python -m verl_ext.main_ppo`` -> verl's real trainer (Ray on
127.0.0.1, FSDP2 actor and reference on gloo, vLLM's CPU engine as rollout server, verl's reward loop, old-log-prob
pass, update, weight sync), for what the GPU recipes (tests/e2e/test_recipes_cpu.py) do not run: ``python -m
verl_ext.demo`` (its run is the entropy control with the token lens), a reward function that raises, verl's legacy
trainer resumed from a checkpoint and on two ranks, and the Quick start's run on verl's V1 trainer with its rollout
engine killed, then resumed by the same command.

Each run is checked from verl's file-logger JSONL and its checkpoints. The tests that share a launch form one
``xdist_group`` (the e2e tier spreads groups over its workers: tests/conftest.py). Settings make every method act: two
mini-batches per step, a selection ratio that picks a handful of the ~100 tokens of a batch, and Clip-Cov bounds
that admit every token (so its budget, not the bounds, decides how many are picked).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

import _shared_ray
import pytest
import torch
from _cpu_marks import cpu_only, needs_vllm_cpu

from verl_ext.recipe import launch_env

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipe" / "cpu_tiny.sh"
PROMPTS, N, LENGTH = 4, 4, 8
"""Prompts per step, responses per prompt (GRPO group), response tokens: 16 responses of <= 8 tokens per step."""

STATE = "verl_ext_driver.json"
"""verl_ext's state file in each ``global_step_<N>`` checkpoint folder."""

COV_RATIO = 0.05
"""Selection ratio of the Clip-Cov runs: max(1, floor(0.05 * ~100)) = a handful of tokens."""

SIZES: dict[str, object] = {
    "verl_ext.recipe.assets": "false",  # the assets fixture built them
    "trainer.total_training_steps": 2,
    "data.train_batch_size": PROMPTS,
    "actor_rollout_ref.rollout.n": N,
    "data.max_response_length": LENGTH,
    "actor_rollout_ref.actor.policy_loss.clip_cov_ratio": COV_RATIO,
    "actor_rollout_ref.actor.policy_loss.kl_cov_ratio": COV_RATIO,
}
"""The runs' Hydra overrides of the recipe's sizes (a run's ``sizes`` replace some)."""

pytestmark = [cpu_only, needs_vllm_cpu, pytest.mark.e2e]


PI_ON_RATIO = ("verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.controller=pi",
               "verl_ext.entropy_control.actuator=cov_ratio", "verl_ext.entropy_control.target=3.0",
               "verl_ext.entropy_control.ratio_min=0.001",
               "verl_ext.entropy_control.ratio_max=0.5")  # fmt: skip
"""The entropy control's PI law from the run's selection ratio, with a target near the tiny model's initial entropy: the
resume test checks its integral (the default ``auto`` trains in the cluster test)."""

DYNAMIC_BSZ = (
    "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=48",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=64",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=64",
)
"""verl's dynamic batch size with token budgets below a mini-batch's ~100 tokens: verl packs (and reorders) the
rows into micro-batches of unequal size, differently in the old-log-prob pass and in the update."""

# ----------------------------------------------------------------------------------------------------------
# running the recipe
# ----------------------------------------------------------------------------------------------------------


class Run:
    """One finished training run: its JSONL rows by step, its output, its checkpoint folder."""

    def __init__(self, name: str, root: Path, output: str, log: Path | None = None):
        self.name = name
        self.output = output
        self.ckpts = root / "ckpts" / name
        log = log or root / f"{name}.jsonl"
        self.lens = log.with_name(f"{name}.lens.jsonl")
        assert log.exists(), f"{name}: no JSONL at {log}\n{output[-6000:]}"
        self.steps: dict[int, dict[str, Any]] = {}
        for line in log.read_text().splitlines():
            row = json.loads(line)
            self.steps[int(row["step"])] = row["data"]

    def metric(self, step: int, key: str) -> float:
        data = self.steps[step]
        assert key in data, f"{self.name}: no {key} at step {step}; keys: {sorted(data)}"
        return float(data[key])


@pytest.fixture(scope="session")  # kept while the worker runs other files' groups in between
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model and the task data, built once by the recipe's own builder (``python -m verl_ext.testbed.task``'s,
    with its defaults, in this process: a launch without them, as the Quick start's, runs the command)."""
    from verl_ext.testbed.task import write_assets

    root = tmp_path_factory.mktemp("cpu_e2e")
    write_assets(root, LENGTH)
    (root / "varied_reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    # deterministic, and different across responses and prompts: non-zero advantages for greedy rollouts\n"
        "    return ((sum(map(ord, solution_str)) + 37 * int(ground_truth)) % 101) / 100.0\n"
    )
    return root


def recipe_env(root: Path, name: str, loss: str, shared_ray: bool = False, **extra: str) -> dict[str, str]:
    """The launch's variables: the work folder ``root`` (the run logs to ``root/<name>.jsonl``, its checkpoints go to
    ``root/ckpts/<name>``), the loss, the run's name, and ``extra`` (``GPUS_PER_NODE``); no launch variable of the
    shell's. ``shared_ray``: the launch joins the test process's Ray cluster (``_shared_ray``) instead of starting
    its own - for launches that test neither Ray's start-up nor a killed run's restart, which a user starts anew."""
    launch = set(launch_env.names())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RAY_")) and k not in launch}
    env.update(WORK_DIR=str(root), LOSS=loss, EXP_NAME=name, PYTHON=sys.executable, HYDRA_FULL_ERROR="1", **extra)
    if shared_ray:
        env.update(_shared_ray.launch_env())
    return env


def recipe_command(*overrides: str, sizes: dict[str, object] | None = None, validate: bool = False) -> list[str]:
    """``bash recipe/cpu_tiny.sh`` with :data:`SIZES` (``sizes`` replacing some), validation before training only
    with ``validate`` (the recipe validates after its last step either way), and ``overrides``."""
    given = {**SIZES, **(sizes or {})}
    return ["bash", str(RECIPE), *(f"{key}={value}" for key, value in given.items()),
            f"trainer.val_before_train={validate}", *overrides]  # fmt: skip


def train(root: Path, name: str, loss: str, *overrides: str, sizes: dict[str, object] | None = None,
          validate: bool = False, shared_ray: bool = False, **env: str) -> Run:
    """``bash recipe/cpu_tiny.sh SIZES OVERRIDES`` (2 steps); fails the test with the run's output if it fails.
    ``validate`` and ``shared_ray``: as :func:`recipe_command` and :func:`recipe_env`."""
    proc = subprocess.run(recipe_command(*overrides, sizes=sizes, validate=validate),
                          env=recipe_env(root, name, loss, shared_ray, **env),
                          capture_output=True, text=True, timeout=900, cwd=root)  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{output[-8000:]}"
    return Run(name, root, output)


def demo(root: Path, *args: str) -> Run:
    """``python -m verl_ext.demo --losses pi_cov ...`` on the shared assets (2 steps): the demo's one run is the CPU
    recipe with the entropy control (the PI law on Clip-Cov's ratio); ``args`` after ``--`` are Hydra overrides.
    Returns the run, whose output is the demo's own and verl's (``train.log``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RAY_"))}
    proc = subprocess.run([sys.executable, "-m", "verl_ext.demo", "--losses", "pi_cov", "--entropy-target", "3.0",
                           "--steps", "2", "--prompts-per-step", str(PROMPTS), "--samples-per-prompt", str(N),
                           "--response-length", str(LENGTH), "--cov-ratio", str(COV_RATIO), "--out", str(root),
                           "--no-progress", "--", *args],
                          # RANK=0 as a launcher (or this session's engine tests) may leave it in a driver: every
                          # process of the run inherits it, and still only verl's rank-0 worker may announce
                          env={**env, "HYDRA_FULL_ERROR": "1", "RANK": "0"}, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    log = root / "train.log"
    output = proc.stdout + proc.stderr + (log.read_text() if log.exists() else "")
    assert proc.returncode == 0, f"demo: exit {proc.returncode}\n{output[-8000:]}"
    return Run("pi_cov", root, output, log=root / "runs" / "pi_cov.jsonl")


@pytest.fixture(scope="session")  # kept while the worker runs other files' groups in between
def runs(assets: Path):
    """``runs(name)``: the run of that name, trained on first use."""

    @cache
    def get(name: str) -> Run:
        assert name == "demo_pi_cov_lens", name
        # V1 trainer through the demo: batch-scope Clip-Cov whose ratio the PI law sets (the demo's pi_cov run,
        # whose first step the test checks) and the lens, dynamic batch size, a checkpoint at step 2
        return demo(assets, "actor_rollout_ref.actor.policy_loss.clip_cov_lb=-100",
                    "actor_rollout_ref.actor.policy_loss.clip_cov_ub=100", *DYNAMIC_BSZ,
                    "verl_ext.token_lens.enable=true", "trainer.save_freq=2")  # fmt: skip

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

@pytest.mark.xdist_group("demo")
@pytest.mark.parametrize("name", ["demo_pi_cov_lens"])
def test_trains_two_steps_with_finite_metrics_and_live_weight_sync(runs, name):
    """2 steps of verl's loop; the update moved the policy (ppo_kl != 0 in step 1) and the rollout engine
    serves the updated weights in step 2 (vLLM's and the actor's log-probs of the same tokens agree); the
    responses of a step scored differently (GRPO's advantages are not all 0). Every GPU recipe runs the same
    checks in tests/e2e/test_recipes_cpu.py."""
    run = runs(name)
    all_finite(run)
    assert "step:2" in run.output  # verl's console logger printed the step metrics
    assert run.metric(1, "actor/ppo_kl") != 0.0  # the second mini-batch saw the first one's update
    assert abs(run.metric(2, "training/rollout_probs_diff_max")) < 1e-3, "vLLM did not get the updated weights"
    assert any(run.metric(step, "critic/advantages/max") > run.metric(step, "critic/advantages/min") for step in (1, 2))


@pytest.mark.xdist_group("raising_reward")
def test_a_run_whose_reward_function_raises_ends_naming_its_exception(assets):
    """A custom reward function that raises on every sample (a bug in the user's scorer): verl's agent loop logs each
    failure in its workers and its replay buffer stops the trainer with advice about refilling failed groups; the
    run's last line is instead how many samples failed and the first one's exception (``verl_ext.failures``), exit 1."""
    reward = assets / "raising_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
                      "    raise ValueError('my scorer cannot read the response')\n")  # fmt: skip
    proc = subprocess.run(recipe_command(f"reward.custom_reward_function.path={reward}",
                                         sizes={"trainer.total_training_steps": 1}),
                          env=recipe_env(assets, "raising_reward", "vanilla", shared_ray=True), capture_output=True,
                          text=True, timeout=600, cwd=assets)  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-4000:]
    last = proc.stderr.rstrip().splitlines()[-1]
    found = re.fullmatch(r"verl_ext: stopped: (\d+) sample\(s\) failed in verl's rollout or reward loop, the first "
                         r"with ValueError: my scorer cannot read the response \(logged in full by the agent loop "
                         r"workers above\)", last)  # fmt: skip
    assert found and int(found[1]) >= 1, output[-4000:]


@pytest.mark.xdist_group("demo")
def test_actor_parameters_changed(runs, assets):
    """The step-2 checkpoint's actor weights differ from the initial model's."""
    from safetensors.torch import load_file

    run = runs("demo_pi_cov_lens")
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


@pytest.mark.xdist_group("demo")
def test_pi_sets_the_ratio_and_the_lens_writes_the_selection(runs):
    """V1 trainer: the PI law's ratio of each step is the one the selection used (its budget), and the lens
    wrote exactly that many tokens, decoded, at valid positions."""
    run = runs("demo_pi_cov_lens")
    all_finite(run)
    rows = lens_rows(run)
    for step in (1, 2):
        ratio = run.metric(step, "entropy_control/ratio")
        assert 0.001 <= ratio <= 0.5 and run.metric(step, "entropy_control/target") == 3.0
        assert run.metric(step, "entropy_control/entropy") == pytest.approx(run.metric(step, "actor/entropy"), rel=1e-5)
        frac = run.metric(step, "actor/clip_cov/batch_selected_frac")
        assert frac == pytest.approx(budget(run, step, ratio), rel=1e-6)
        assert run.metric(step, "entropy_control/limited") == 0.0  # the budget was met: not a bound for the integral
        tokens = round(run.metric(step, "response_length/mean") * PROMPTS * N)
        assert len(rows[step]) == round(frac * tokens)
        assert all(0 <= r["position"] < LENGTH and r["token"] and 0 < r["prob"] <= 1 for r in rows[step])
    # the ratio responds to the error: entropy below the target raises it from the loss's ratio
    first = run.metric(1, "entropy_control/error")
    assert (run.metric(1, "entropy_control/ratio") > COV_RATIO) == (first > 0)


# ----------------------------------------------------------------------------------------------------------
# verl's legacy trainer: a resume that repeats the uninterrupted step, and the selection whatever the layout
# ----------------------------------------------------------------------------------------------------------

LEGACY_OVERRIDES = (
    "trainer.use_v1=False",
    # greedy rollouts (top-1 sampling) and one response per prompt: the batch of step 2 depends only on the
    # weights after step 1 and the data order, both restored from the checkpoint
    "actor_rollout_ref.rollout.top_k=1",
    "algorithm.adv_estimator=reinforce_plus_plus",
    "actor_rollout_ref.actor.policy_loss.clip_cov_lb=-100",
    "actor_rollout_ref.actor.policy_loss.clip_cov_ub=100",
    *PI_ON_RATIO,
    "verl_ext.token_lens.enable=true",
    "trainer.save_freq=1",
)
"""Clip-Cov with the PI law on its ratio and the token lens, on verl's legacy trainer (its batch order is
deterministic), a checkpoint every step."""

LEGACY_SIZES: dict[str, object] = {
    "actor_rollout_ref.rollout.n": 1, "actor_rollout_ref.actor.optim.lr": 1e-4, "data.train_batch_size": 8,
    "actor_rollout_ref.actor.policy_loss.clip_cov_ratio": 0.2, "actor_rollout_ref.actor.policy_loss.kl_cov_ratio": 0.2,
}  # fmt: skip
"""One response per prompt (greedy rollouts make N > 1 copies); 8 prompts and the PI law starting from ratio 0.2
(it lowers the ratio at step 1: entropy is above its target): several selected tokens for the layout test."""


def legacy_overrides(assets: Path) -> tuple[str, ...]:
    return (*LEGACY_OVERRIDES, f"reward.custom_reward_function.path={assets / 'varied_reward.py'}")


@cache
def whole_legacy(assets: Path) -> Run:
    """The uninterrupted legacy run (2 steps, 1 training process, fixed micro-batches, a checkpoint after each step):
    the checkpoint the resumed run starts from, the reference of its step 2 and of the two-rank run's step 1."""
    return train(assets, "whole_legacy", "clip_cov", *legacy_overrides(assets), sizes=LEGACY_SIZES, shared_ray=True)


STALL_S = 15
"""The stall bound the resumed legacy run sets (``verl_ext.watchdog.stall_s``, polled every 2 s; ``auto``, every other
launch's, would wait at least an hour). Its step 3 reaches the weight sync within a few seconds of step 2's log."""


@cache
def resumed_and_stalled(assets: Path) -> tuple[Run, float]:
    """The uninterrupted run's step-1 checkpoint loaded by a second run of 3 steps whose third weight sync (the
    first after step 2 is logged; one is the start's) never returns (tests/e2e/_kill_engine_at_sync.py): (the run,
    seconds from its last logged step to its exit)."""
    whole = whole_legacy(assets)
    name, log = "resumed_legacy", assets / "resumed_legacy.stalls"
    env = "ray_kwargs.ray_init.runtime_env.env_vars"
    stall = (f"+{env}.PYTHONPATH={Path(__file__).parent}", f"+{env}.VERL_USE_EXTERNAL_MODULES=_kill_engine_at_sync",
             f"+{env}.VERL_EXT_TEST_STALL_AT_SYNC='3'", f"+{env}.VERL_EXT_TEST_KILL_LOG={log}",
             f"verl_ext.watchdog.stall_s={STALL_S}", "verl_ext.watchdog.poll_s=2")  # fmt: skip
    command = recipe_command(*legacy_overrides(assets), "trainer.resume_mode=resume_path",
                             f"trainer.resume_from_path={whole.ckpts / 'global_step_1'}", *stall,
                             sizes={**LEGACY_SIZES, "trainer.total_training_steps": 3})  # fmt: skip
    out = assets / f"{name}.out"
    with open(out, "w") as sink:
        proc = subprocess.Popen(command, env=recipe_env(assets, name, "clip_cov", shared_ray=True), stdout=sink,
                                stderr=subprocess.STDOUT, text=True, cwd=assets, start_new_session=True)  # fmt: skip
    jsonl, logged_at = assets / f"{name}.jsonl", None
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None:
            assert time.monotonic() < deadline, f"the stalled run did not stop within 600 s:\n{out.read_text()[-6000:]}"
            if logged_at is None and jsonl.exists() and b'"step":2' in jsonl.read_bytes():
                logged_at = time.monotonic()
            time.sleep(0.2)
        stopped_after = time.monotonic() - (logged_at or time.monotonic())
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = out.read_text()
    assert "waits for ever" in (log.read_text() if log.exists() else ""), output[-4000:]
    assert proc.returncode == 1, output[-4000:]
    return Run(name, assets, output), stopped_after


@pytest.mark.xdist_group("legacy")
def test_a_run_resumed_from_a_checkpoint_repeats_the_uninterrupted_step_token_for_token(assets):
    """The uninterrupted run's step-1 checkpoint, loaded by a second run (``trainer.resume_mode=resume_path``): its
    step 2 is the uninterrupted run's step 2 - the same responses, scores, selection (the lens's tokens, token for
    token), entropy, loss and controller state (the PI law's integral carries step 1's error: a resumed run that
    lost the state would differ) - and it saves verl_ext's state beside verl's checkpoint. verl's legacy trainer
    orders a batch's rows deterministically and the rollouts are greedy, so nothing else may differ."""
    whole = whole_legacy(assets)
    resumed, _ = resumed_and_stalled(assets)
    assert sorted(resumed.steps) == [2], "the resumed run must start at step 2 (and stall before step 3)"
    assert whole.metric(2, "critic/advantages/max") > whole.metric(2, "critic/advantages/min"), "advantages all equal"
    selection = [k for k in whole.steps[2] if k.startswith("actor/clip_cov/")]
    assert {"actor/clip_cov/batch_selected_frac", "actor/clip_cov/batch_cov_selected_mean"} <= set(selection)
    assert whole.metric(2, "actor/clip_cov/batch_cov_selected_mean") != 0.0
    control = [k for k in whole.steps[2] if k.startswith("entropy_control/")]
    assert whole.metric(2, "entropy_control/integral") != pytest.approx(whole.metric(2, "entropy_control/error"))
    for key in [*selection, *control, "critic/score/mean", "actor/entropy", "actor/pg_loss", "response_length/mean"]:
        assert resumed.metric(2, key) == whole.metric(2, key), key
    assert lens_rows(resumed)[2] == lens_rows(whole)[2]  # the same tokens, token for token
    for run in (whole, resumed):
        assert (run.ckpts / "global_step_2" / "actor").is_dir() and (run.ckpts / "global_step_2" / STATE).is_file()


@pytest.mark.xdist_group("legacy")
def test_a_weight_sync_that_never_returns_stops_the_run_within_the_stall_bound_naming_it(assets):
    """The resumed run's weight sync after step 3's checkpoint never returns (every actor and engine alive, so no
    death to find): no step is logged for longer than ``verl_ext.watchdog.stall_s`` and the watchdog stops the run -
    exit 1, its last line naming the stall, the weight sync's methods running, the last completed step (3: verl's
    legacy trainer saves a step's checkpoint before its sync and its log) and the latest checkpoint - within the bound
    plus a few polls and the run's exit."""
    resumed, stopped_after = resumed_and_stalled(assets)
    line = next(x for x in resumed.output.splitlines() if x.startswith("verl_ext: stopped: "))
    assert f"over the stall bound of {STALL_S} s (verl_ext.watchdog.stall_s={STALL_S}); running: " in line, line
    assert "update_weights" in line.split("running: ", 1)[1], line
    assert "last completed step 3, latest checkpoint global_step_3" in line, line  # saved before its sync
    assert STALL_S < stopped_after < STALL_S + 90, f"stopped {stopped_after:.0f} s after step 2 was logged"


@pytest.mark.xdist_group("legacy")
def test_selection_is_the_same_with_one_or_two_ranks_and_fixed_or_dynamic_micro_batches(assets):
    """The same recipe and seed on 1 training process with fixed micro-batches (the uninterrupted legacy run) and on
    2 with verl's dynamic batch size (legacy trainer: its batch order is deterministic; greedy rollouts: the same
    responses): step 1 selects the identical tokens and logs the same selection metrics. The old-log-prob pass's
    rounding differs between these layouts; the selection does not depend on it. (One run that differs from the
    reference in both ways, ranks and micro-batching, can expose a selection depending on either.) This run also
    validates before training and at its end, as the recipes do: verl's legacy validation through verl_ext's
    trainer."""
    reference = whole_legacy(assets)
    run = train(assets, "layout_two_ranks_dynamic", "clip_cov", *legacy_overrides(assets), *DYNAMIC_BSZ,
                sizes={**LEGACY_SIZES, "trainer.total_training_steps": 1}, validate=True, shared_ray=True,
                GPUS_PER_NODE="2")  # fmt: skip

    def chosen(run: Run) -> list[tuple]:
        # by content, not row index: verl balances the rows over the ranks (trainer.balance_batch), so a sample's
        # row differs between layouts; identical responses are interchangeable (same hash, same covariance)
        return sorted((r["context"], r["position"], r["token_id"], round(r["advantage"], 5)) for r in lens_rows(run)[1])

    assert len(chosen(reference)) >= 2
    assert chosen(run) == chosen(reference)
    assert run.metric(1, "actor/clip_cov/batch_selected_frac") == reference.metric(1, "actor/clip_cov/batch_selected_frac")
    assert run.metric(1, "actor/clip_cov/batch_cov_selected_mean") == pytest.approx(
        reference.metric(1, "actor/clip_cov/batch_cov_selected_mean"), rel=1e-5, abs=1e-7)
    for step in (0, 1):  # validated before training and after the last step
        assert [k for k in run.steps[step] if k.startswith("val-core/")], sorted(run.steps[step])


@pytest.mark.xdist_group("demo")
def test_demo_reports_its_run_and_the_replacement_is_announced_once(runs, assets):
    """The demo's outputs from its run of verl's trainer: the terminal table and the entropy control's tracking line,
    the CSV (the JSONL's steps), the PNG; and verl_ext's one line saying its clip_cov replaces verl's, printed by the
    rank-0 training worker only, although the demo's driver (and so every process of the run) has RANK=0."""
    run = runs("demo_pi_cov_lens")
    assert "pi_cov" in run.output and "mean |H - H*| / H*" in run.output, run.output[:3000]
    with open(assets / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["run"], int(r["step"])) for r in rows] == [("pi_cov", 1), ("pi_cov", 2)]
    assert [float(r["actor/entropy"]) for r in rows] == [run.metric(s, "actor/entropy") for s in (1, 2)]
    png = assets / "entropy_demo.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    announced = [line for line in run.output.splitlines() if "replacing verl's built-ins" in line]
    assert len(announced) == 1, announced
    assert "engine is not available" not in run.output  # CPU mode silences verl's notices about unused engines


# ----------------------------------------------------------------------------------------------------------
# verl's V1 trainer: a rollout engine that dies during the weight sync, and the same command resuming the run
# ----------------------------------------------------------------------------------------------------------

CLIP_HIGH_RELATIVE = ("verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.controller=pi",
                      "verl_ext.entropy_control.kp=1.0", "verl_ext.entropy_control.ki=0.25",
                      "verl_ext.entropy_control.actuator=clip_high", "verl_ext.entropy_control.target_unit=initial",
                      "verl_ext.entropy_control.target=3.0", "verl_ext.entropy_control.initial_steps=1")  # fmt: skip
"""PI (the controller that drives the clip bound; ``auto`` refuses it) on the upper clip bound with the gains the
docs give for the real model, its target three times the entropy of step 1 (far above what the tiny policy keeps, so
that it widens the bound); the anchor is step 1 alone (``initial_steps=1``)."""

KILLED_OVERRIDES = ("trainer.save_freq=1", "trainer.total_training_steps=4", "trainer.resume_mode=auto",
                    "trainer.max_actor_ckpt_to_keep=1", *CLIP_HIGH_RELATIVE)  # fmt: skip
"""The Quick start's run (``grpo_erc`` on the toy) with a checkpoint every step, one kept, resumed from the latest
(what the recipes set), and the PI law on the clip bound."""


@cache
def killed_and_resumed(assets: Path) -> tuple[Run, Run, float]:
    """The Quick start's command with vLLM's engine killed during the third weight sync (after step 2's checkpoint),
    then the same command again: (the killed run, the resumed run, seconds from the kill to the killed run's exit)."""
    name, kill_log = "engine_killed", assets / "engine_killed.kills"
    env = "ray_kwargs.ray_init.runtime_env.env_vars"
    injection = (f"+{env}.PYTHONPATH={Path(__file__).parent}", f"+{env}.VERL_USE_EXTERNAL_MODULES=_kill_engine_at_sync",
                 f"+{env}.VERL_EXT_TEST_KILL_AT_SYNC='3'", f"+{env}.VERL_EXT_TEST_KILL_LOG={kill_log}")  # fmt: skip
    proc = subprocess.Popen(recipe_command(*KILLED_OVERRIDES, *injection), env=recipe_env(assets, name, "grpo_erc"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=assets,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while not kill_log.exists():
            assert proc.poll() is None, f"exited ({proc.returncode}) before the engine was killed:\n{proc.stdout.read()[-3000:]}"
            assert time.monotonic() < deadline, "the third weight sync did not come within 600 s"
            time.sleep(0.2)
        killed_at = time.monotonic()
        try:
            output = proc.communicate(timeout=180)[0]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"still running 180 s after the engine was killed:\n{proc.communicate()[0][-6000:]}")
        stopped_after = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # the Quick start's TP 1: vLLM runs the model in its engine-core process (executor uni), which the sync's call
    # killed; there is no worker process (tests/e2e/_kill_engine_at_sync.py)
    assert "(EngineCore) kills its own process, the engine" in kill_log.read_text(), kill_log.read_text()
    assert proc.returncode == 1, output[-3000:]
    killed = Run(name, assets, output)
    resumed = train(assets, name, "grpo_erc", *KILLED_OVERRIDES)  # the same command, without the test's injection
    return killed, resumed, stopped_after


@pytest.mark.xdist_group("engine_killed")
def test_an_engine_killed_during_the_weight_sync_stops_the_run_naming_it(assets):
    """vLLM's engine process killed during the third weight sync (after step 2's checkpoint; verl's server actor
    lives on, and verl's trainer would wait in update_weights for ever): the entry point's watchdog finds the engine
    dead through its /health and stops the run within about a minute - exit 1, a line naming the server, the last
    completed step and the checkpoint - and the checkpoint of step 2 is whole (verl recorded it; its actor shards and
    verl_ext's state are there). The run is the Quick start's (``bash recipe/cpu_tiny.sh``: ``grpo_erc`` on the toy
    model, at :data:`SIZES`), and its method acted: ERC masked tokens (a kept fraction below 1) in a step of the run
    that resumed it (the stopped run's one logged step trained at lr 0)."""
    killed, resumed, stopped_after = killed_and_resumed(assets)
    line = next(x for x in killed.output.splitlines() if x.startswith("verl_ext: stopped: "))
    assert "Ray actor vLLMHttpServer 'vllm_server_" in line and "died: ENGINE_DEAD" in line, line
    assert "last completed step 2, latest checkpoint global_step_2" in line, line
    assert stopped_after < 120, f"stopped {stopped_after:.0f} s after the kill"
    # verl's V1 trainer logs a step's metrics after the next weight sync: the sync that died took step 2's row
    assert sorted(killed.steps) == [1], sorted(killed.steps)
    ckpt = killed.ckpts / "global_step_2"
    assert any((ckpt / "actor").glob("model_world_size_*_rank_0.pt")) and (ckpt / STATE).is_file()
    kept = {step: resumed.metric(step, "actor/erc/kept_frac") for step in sorted(resumed.steps)}
    assert min(kept.values()) < 1.0, f"ERC masked no token: kept fraction per step {kept}"


@pytest.mark.xdist_group("engine_killed")
def test_the_same_command_resumes_the_stopped_run_with_the_controllers_state(assets):
    """The same command again (``resume_mode=auto``): training resumes at step 3 from step 2's checkpoint, verl's
    JSONL keeps the stopped run's rows and continues, and the entropy controller continues from its saved state: the
    anchor of its relative target is step 1's entropy (a lost state would measure a new one at step 3) and its
    integral carries step 2's (as step 2's checkpoint holds it: that step's row died with the sync). ``max_actor_ckpt_to_keep=1`` holds for verl_ext's state files as for verl's actor checkpoints. Every
    step's clip bound is the one the policy loss received (a float32 batch field), widened toward the target."""
    killed, resumed, _ = killed_and_resumed(assets)
    assert sorted(resumed.steps) == [1, 3, 4], "the resumed run must continue the stopped run's log"
    assert resumed.steps[1] == killed.steps[1]
    saved = json.loads((resumed.ckpts / "global_step_2" / STATE).read_text())["entropy_control"]
    anchor = resumed.metric(1, "entropy_control/anchor")
    assert anchor == pytest.approx(resumed.metric(1, "entropy_control/entropy"), rel=1e-9)
    assert saved["anchor"] == pytest.approx(anchor, rel=1e-12)
    for step in (1, 3, 4):
        assert resumed.metric(step, "entropy_control/anchor") == pytest.approx(anchor, rel=1e-12), step
        assert resumed.metric(step, "entropy_control/target") == pytest.approx(3.0 * anchor, rel=1e-9), step
        sent = resumed.metric(step, "entropy_control/clip_high")
        assert resumed.metric(step, "actor/entropy_control/clip_ratio_high") == pytest.approx(sent, rel=1e-6), step
        assert 0.2 <= sent <= 1.0
    assert resumed.metric(3, "entropy_control/clip_high") > resumed.metric(1, "entropy_control/clip_high")
    before = saved["state"]["integral"]  # step 2's, as its checkpoint holds it
    assert saved["state"]["step"] == 2 and before != 0.0
    carried = 0.0 if resumed.metric(3, "entropy_control/saturated") else resumed.metric(3, "entropy_control/error")
    assert resumed.metric(3, "entropy_control/integral") == pytest.approx(before + carried, rel=1e-9)
    # keep 1: the stopped run deleted step 1's checkpoint when it saved step 2, and the resumed run step 3's when it
    # saved step 4; verl no longer knows step 2's after the restart and keeps it. verl_ext's state follows verl's.
    ckpts = resumed.ckpts
    assert (ckpts / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    for step, kept in ((1, False), (2, True), (3, False), (4, True)):
        folder = ckpts / f"global_step_{step}"
        assert (folder / "actor").is_dir() == kept and (folder / STATE).is_file() == kept, step
