"""``verl_ext.testbed.math_assets`` (the assets of ``SCALE=cpu``): synthetic sources in the hub formats go through the
project's ``scripts/data/prepare_*.py`` into rows verl's own scorers grade, and the tiny model's tokenizer encodes
every prepared prompt and answer without losing a character (its vocabulary is closed: unknown characters would be
dropped silently); the warmed-up model leaves DAPO's groups mixed with margin on this host (the e2e tier's DAPO
launch trains it through the recipe, tests/e2e/test_recipes_cpu.py)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import _math_assets_cache
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
DATA_SCRIPTS = REPO / "scripts" / "data"


def prepare(script: str, *args: str, tmp: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp / "hf_cache")}
    proc = subprocess.run([sys.executable, str(DATA_SCRIPTS / script), "--no-progress", "--output-dir", str(tmp / "data"),
                           *args], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from verl_ext.testbed.math_assets import write_sources

    tmp = tmp_path_factory.mktemp("math_assets")
    src = write_sources(tmp / "src", train=64, test=8, seed=3)
    prepare("prepare_gsm8k.py", "--local-path", src["gsm8k_train"], "--splits", "train", tmp=tmp)
    prepare("prepare_gsm8k.py", "--local-path", src["gsm8k_test"], "--splits", "test", tmp=tmp)
    prepare("prepare_dapo_math.py", "--local-path", src["dapo_math"], tmp=tmp)
    prepare("prepare_aime.py", "--year", "2024", "--local-path", src["aime2024"], tmp=tmp)
    prepare("prepare_aime.py", "--year", "2025", "--local-path", src["aime2025"], tmp=tmp)
    return tmp / "data"


def _oracle(text: str) -> str:
    """The answer of "What is <a> <op> <b>?" computed here from the words."""
    a, op, b = re.search(r"What is (\d) (plus|times|minus) (\d)\?", text).groups()
    return str({"plus": int(a) + int(b), "times": int(a) * int(b), "minus": int(a) - int(b)}[op])


@pytest.mark.parametrize(("name", "source", "rows"), [("gsm8k-train", "openai/gsm8k", 64), ("gsm8k-test", "openai/gsm8k", 8),
                                                      ("dapo-math-17k", "math_dapo", 64), ("aime-2024", "aime2024", 4),
                                                      ("aime-2025", "aime2025", 4)])  # fmt: skip
def test_prepared_rows_are_graded_by_verls_scorers(prepared, name, source, rows):
    from verl.utils.reward_score import default_compute_score

    from verl_ext.testbed.math_assets import target_response

    frame = pd.read_parquet(prepared / f"{name}.parquet")
    assert len(frame) == rows and set(frame["data_source"]) == {source}
    for row in frame.to_dict("records"):
        question = row["prompt"][-1]["content"]
        truth = row["reward_model"]["ground_truth"]
        assert truth == _oracle(question)
        right = default_compute_score(source, target_response(source, truth), truth)
        wrong = default_compute_score(source, target_response(source, str(int(truth) + 1)), truth)
        right, wrong = (r["score"] if isinstance(r, dict) else r for r in (right, wrong))
        assert (right, wrong) == ((1.0, 0.0) if source == "openai/gsm8k" else (1.0, -1.0))
    if source != "openai/gsm8k":  # the DAPO instruction, as in the hub's DAPO-Math-17k prompts
        assert question.startswith("Solve the following math problem step by step.")
        assert question.endswith('Remember to put your answer on its own line after "Answer:".')


def _word_oracle(question: str) -> int:
    """The answer of a word problem, computed here from its words."""
    numbers = [int(x) for x in re.findall(r"\d+", question)]
    if "more" in question:
        return numbers[0] + numbers[1]
    if "gave" in question:
        return numbers[0] - numbers[1]
    assert "in each bag" in question, question
    return numbers[0] * numbers[1]


def test_word_problems_for_the_real_model_are_graded_by_verls_scorers(tmp_path):
    """``sources --style words``: GSM8K rows whose reference ends in ``#### N`` with N the problem's answer (so the
    GSM8K preparation keeps them), a worked line per question for the warm-up, all three difficulties present."""
    from verl.utils.reward_score import default_compute_score

    from verl_ext.testbed.math_assets import write_sources

    src = write_sources(tmp_path / "src", train=64, test=8, seed=3, style="words")
    prepare("prepare_gsm8k.py", "--local-path", src["gsm8k_train"], "--splits", "train", tmp=tmp_path)
    worked = json.loads(Path(src["worked"]).read_text())
    frame = pd.read_parquet(tmp_path / "data" / "gsm8k-train.parquet")
    assert len(frame) == 64
    kinds = set()
    for row in frame.to_dict("records"):
        question, truth = row["extra_info"]["question"], row["reward_model"]["ground_truth"]
        assert truth == str(_word_oracle(question))
        assert worked[question].endswith(f"= {truth}")
        kinds.add(next(k for k in ("gets", "gave", "A friend", "in each bag") if k in question))
        for answer, score in ((truth, 1.0), (str(int(truth) + 1), 0.0)):
            assert default_compute_score("openai/gsm8k", f"{worked[question]}\n#### {answer}", truth) == score
    assert kinds == {"gets", "gave", "A friend", "in each bag"}


def test_tokenizer_round_trips_every_prompt_and_answer(prepared, tmp_path):
    from verl_ext.testbed.math_assets import EVAL_FILES, TRAIN_FILES, _messages, _prepared, target_response, vocabulary
    from verl_ext.testbed.tiny_model import build_tokenizer

    rows = _prepared(prepared, TRAIN_FILES + EVAL_FILES)
    texts = [m["content"] for row in rows for m in _messages(row)]
    answers = [target_response(r["data_source"], r["reward_model"]["ground_truth"]) for r in rows]
    tokenizer = build_tokenizer(vocabulary(texts + answers))
    for text in texts + answers:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
        assert tokenizer.unk_token_id not in ids
    dapo = next(t for t in texts if t.startswith("Solve"))
    assert len(tokenizer(dapo, add_special_tokens=False)["input_ids"]) < 96 - 10  # fits SCALE=cpu's prompt length


def test_the_toy_tasks_assets_are_built_once_and_rebuilt_when_their_arguments_or_files_change(tmp_path, monkeypatch):
    """``recipe/cpu_tiny.sh``'s assets (``digits``): the first launch builds them, a second with the same arguments
    starts without the build, and a changed seed, a missing file or a build cut short (no stamp) builds them again."""
    from verl_ext.testbed import assets, task

    builds: list[list[str]] = []

    def build(cmd: list[str], what: str, env: dict[str, str] | None = None) -> str:
        builds.append(cmd)
        task.main([str(arg) for arg in cmd[3:]])  # python -m verl_ext.testbed.task ARGS, in this process
        return ""

    monkeypatch.setattr(assets, "_run", build)

    def plan(seed: int = 0) -> assets.AssetPlan:
        return assets.AssetPlan(task="digits", model="toy", folder=tmp_path, data_dir=tmp_path,
                                model_path=tmp_path / "model", seed=seed)  # fmt: skip

    assert assets.ensure(plan()) == ["digits"] and len(builds) == 1
    weights = tmp_path / "model" / "model.safetensors"
    written = weights.stat().st_mtime_ns
    assert assets.ensure(plan()) == [] and len(builds) == 1
    assert weights.stat().st_mtime_ns == written
    assert assets.ensure(plan(seed=1)) == ["digits"] and len(builds) == 2
    assert json.loads((tmp_path / task.STAMP).read_text())["seed"] == 1
    (tmp_path / "val.parquet").unlink()
    assert assets.ensure(plan(seed=1)) == ["digits"] and len(builds) == 3
    (tmp_path / task.STAMP).unlink()
    assert assets.ensure(plan(seed=1)) == ["digits"] and len(builds) == 4


def test_the_model_command_builds_and_warms_up_a_model_a_recipe_loads(prepared, tmp_path, capsys):
    """``python -m verl_ext.testbed.math_assets model`` (what a recipe's start-up runs for the tiny model, when the
    e2e tier's launches do not find it built): a model folder with its tokenizer and ``warmup.json`` (the steps it
    ran, its sampled figures), and the line the start-up prints."""
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_ext.testbed import math_assets

    out = tmp_path / "model"
    assert math_assets.main(["model", "--data-dir", str(prepared), "--out", str(out), "--steps", "2", "--more", "0"]) == 0
    figures = json.loads((out / "warmup.json").read_text())
    assert figures["steps"] == 2 and 0.0 <= figures["mixed_group_frac"] <= 1.0
    assert f"model: {out} (warm-up: loss " in capsys.readouterr().out
    AutoTokenizer.from_pretrained(out)
    AutoModelForCausalLM.from_pretrained(out)


FILL_FAILURE_BOUND = 1e-6
"""The largest chance per training step that DAPO's dynamic sampling at ``SCALE=cpu`` cannot fill a batch from the
warmed-up tiny model (the e2e tier's DAPO launch samples that model at both of its steps: step 1 trains at lr 0)."""


def fill_failure(mixed: float, groups: int, draws: int) -> float:
    """P(fewer than ``groups`` mixed groups among ``draws`` prompts), each mixed with probability ``mixed``."""
    return sum(math.comb(draws, k) * mixed**k * (1 - mixed) ** (draws - k) for k in range(groups))


@pytest.mark.fast_limit_s(480)  # builds the recipes' assets as a launch does: 40 s to ~4 min on 2 cores (the warm-up runs until its target)
def test_the_warmed_up_tiny_model_leaves_dapos_groups_mixed_with_margin():
    """The property every DAPO launch at ``SCALE=cpu`` rests on, measured on this host: the tiny model the recipes
    build (their own builder and data, their defaults) answers DAPO's training prompts so that, sampled as DAPO's
    cpu-scale rollout samples them (``rollout.n`` responses of ``data.max_response_length`` tokens at temperature 1,
    scored by verl's ``math_dapo`` scorer), a group is neither all right nor all wrong often enough that DAPO's filter
    fills a batch of ``data.train_batch_size`` groups within ``max_num_gen_batches`` generation batches but for a
    chance below :data:`FILL_FAILURE_BOUND` - and some groups are uniform, so the filter evicts. The sizes come from
    the pinned composition of ``SCALE=cpu bash recipe/dapo_clip_cov.sh`` (tests/scripts/pinned). A host whose
    arithmetic warms the model differently fails here, not in a launch."""
    import torch
    import yaml
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_ext.testbed.math_assets import TRAIN_FILES, _prepared, sampled_accuracy

    scripts = REPO / "tests" / "scripts"  # the pinned file holds what differs from verl's defaults (beside it)
    pinned = yaml.safe_load((scripts / "pinned" / "dapo_clip_cov.cpu.yaml").read_text())
    verls = yaml.safe_load((scripts / "verl_defaults.yaml").read_text())
    groups, n = pinned["data"]["train_batch_size"], pinned["actor_rollout_ref"]["rollout"]["n"]
    length, batches = pinned["data"]["max_response_length"], pinned["algorithm"]["filter_groups"]["max_num_gen_batches"]
    rollout = {**verls["actor_rollout_ref"]["rollout"], **pinned["actor_rollout_ref"]["rollout"]}
    assert rollout["temperature"] == 1.0 and rollout.get("top_k", -1) in (-1, 0) and rollout.get("top_p", 1.0) == 1.0
    built = _math_assets_cache.build()  # as a recipe's start-up builds them; the e2e tier's launches start from them
    tokenizer = AutoTokenizer.from_pretrained(built / "model")
    model = AutoModelForCausalLM.from_pretrained(built / "model", dtype=torch.float32, attn_implementation="sdpa")
    dapo = [row for row in _prepared(built / "data", TRAIN_FILES) if row["data_source"] == "math_dapo"]
    figures = sampled_accuracy(model, tokenizer, dapo, seed=1, n=n, max_new_tokens=length)
    mixed = figures["mixed_group_frac"]
    assert 0.0 < figures["accuracy"] < 1.0 and mixed < 1.0, figures  # some groups uniform: the filter evicts
    chance = fill_failure(mixed, groups, groups * batches)
    assert chance < FILL_FAILURE_BOUND, (f"{mixed:.3f} of {len(dapo)} DAPO groups mixed on this host: a batch of "
                                         f"{groups} fails to fill within {batches} generation batches with chance "
                                         f"{chance:.2e}", figures)  # fmt: skip
