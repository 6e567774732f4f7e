"""Data preparation scripts (scripts/data/) on small fixtures written by the tests: GSM8K, DAPO-Math-17k,
AIME 2024 and AIME 2025, each with malformed rows; no network (the hub is forced offline)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
DATA_SCRIPTS = REPO / "scripts" / "data"

DAPO_PROMPT = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def run_script(name: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run scripts/data/<name> offline, with its datasets cache inside tmp_path."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_DATASETS_CACHE=str(tmp_path / "hf_cache"),
        HF_HOME=str(tmp_path / "hf_home"),
    )
    return subprocess.run(
        [sys.executable, str(DATA_SCRIPTS / name), "--no-progress", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def load_module(name: str):
    """Import a scripts/data module by path (scripts/ is not a package)."""
    sys.path.insert(0, str(DATA_SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(f"_dataprep_{name}", DATA_SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(DATA_SCRIPTS))


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def read_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def malformed_indices(path: Path) -> list[int]:
    report = Path(str(path) + ".malformed.jsonl")
    return [json.loads(line)["index"] for line in report.read_text().splitlines()]


# ----------------------------------------------------------------------------------------------- GSM8K

GSM8K_ROWS = [
    {"question": "Tom has 3 apples and buys 1,200 more. How many?", "answer": "3+1200=1203\n#### 1,203"},
    {"question": "No final line?", "answer": "the answer is 5"},
    {"question": "", "answer": "#### 5"},
    {"question": "Negative?", "answer": "2-9=-7\n#### -7"},
]


def test_gsm8k_file_converts_rows_and_reports_malformed_ones(tmp_path):
    src = write_jsonl(tmp_path / "test.jsonl", GSM8K_ROWS)
    out = tmp_path / "out"
    res = run_script(
        "prepare_gsm8k.py", "--local-path", str(src), "--splits", "test", "--output-dir", str(out),
        "--max-malformed-frac", "1", tmp_path=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = read_rows(out / "gsm8k-test.parquet")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["1203", "-7"]  # commas stripped
    assert {r["data_source"] for r in rows} == {"openai/gsm8k"}
    assert rows[0]["prompt"] == [
        {
            "role": "user",
            "content": GSM8K_ROWS[0]["question"]
            + ' Let\'s think step by step and output the final answer after "####".',
        }
    ]
    assert rows[0]["reward_model"]["style"] == "rule"
    assert [r["extra_info"]["index"] for r in rows] == [0, 3]  # source row numbers
    assert "malformed row 1 skipped: answer has no '#### <number>' final line" in res.stderr
    assert "malformed row 2 skipped" in res.stderr and "question is empty: column(s) ['question']" in res.stderr
    assert malformed_indices(out / "gsm8k-test.parquet") == [1, 2]
    assert "test: 2 rows written" in res.stdout and "(4 read, 2 malformed skipped)" in res.stdout


def test_gsm8k_refuses_a_split_above_the_malformed_threshold(tmp_path):
    src = write_jsonl(tmp_path / "test.jsonl", GSM8K_ROWS)
    out = tmp_path / "out"
    res = run_script("prepare_gsm8k.py", "--local-path", str(src), "--splits", "test", "--output-dir", str(out), tmp_path=tmp_path)
    assert res.returncode == 1
    assert "2 of 4 rows malformed (50.0% > --max-malformed-frac 0.05)" in res.stderr
    assert not (out / "gsm8k-test.parquet").exists()


def test_gsm8k_single_file_needs_one_split_and_hub_failure_names_local_path(tmp_path):
    src = write_jsonl(tmp_path / "train.jsonl", GSM8K_ROWS[:1])
    res = run_script("prepare_gsm8k.py", "--local-path", str(src), "--output-dir", str(tmp_path), tmp_path=tmp_path)
    assert res.returncode == 1 and "single file" in res.stderr and "--splits" in res.stderr
    res = run_script("prepare_gsm8k.py", "--output-dir", str(tmp_path), tmp_path=tmp_path)  # hub is offline
    assert res.returncode == 1
    assert "'openai/gsm8k'" in res.stderr and "--local-path" in res.stderr
    res = run_script("prepare_gsm8k.py", "--output-dir", str(tmp_path), "--splits", "validation", tmp_path=tmp_path)
    assert res.returncode == 1 and "allowed: ['test', 'train']" in res.stderr


def test_gsm8k_hub_snapshot_and_save_to_disk_directories(tmp_path):
    import datasets

    train = [{"question": "A?", "answer": "#### 1"}, {"question": "B?", "answer": "#### 2"}]
    test = [{"question": "C?", "answer": "#### 3"}]
    snap = tmp_path / "snapshot"
    for config, rows_by_split in {"main": {"train": train, "test": test}, "socratic": {"train": test}}.items():
        (snap / config).mkdir(parents=True)
        for split, rows in rows_by_split.items():
            pq.write_table(pa.Table.from_pylist(rows), snap / config / f"{split}-00000-of-00001.parquet")
    (snap / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
        "  - split: test\n    path: main/test-*\n- config_name: socratic\n  data_files:\n  - split: train\n"
        "    path: socratic/train-*\n---\n"
    )
    saved = tmp_path / "saved"
    datasets.DatasetDict(train=datasets.Dataset.from_list(train), test=datasets.Dataset.from_list(test)).save_to_disk(
        str(saved)
    )
    for source in (snap, saved):
        out = tmp_path / f"out_{source.name}"
        res = run_script("prepare_gsm8k.py", "--local-path", str(source), "--output-dir", str(out), tmp_path=tmp_path)
        assert res.returncode == 0, res.stderr
        assert [r["reward_model"]["ground_truth"] for r in read_rows(out / "gsm8k-train.parquet")] == ["1", "2"]
        assert [r["reward_model"]["ground_truth"] for r in read_rows(out / "gsm8k-test.parquet")] == ["3"]
    res = run_script(
        "prepare_gsm8k.py", "--local-path", str(saved), "--hub-config", "main", "--output-dir", str(tmp_path),
        tmp_path=tmp_path,
    )  # fmt: skip
    assert res.returncode == 1 and "--hub-config ['main'] does not apply" in res.stderr


# ----------------------------------------------------------------------------------------------- DAPO


def test_dapo_verl_layout_kept_verbatim_with_repeats_counted_and_dedup(tmp_path):
    good = {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": DAPO_PROMPT.format("What is 2+2?")}],
        "ability": "MATH",
        "reward_model": {"ground_truth": "4", "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": "uuid-1"},
    }
    other = {**good, "prompt": [{"role": "user", "content": DAPO_PROMPT.format("What is 3+3?")}],
             "reward_model": {"ground_truth": "6", "style": "rule-lighteval/MATH_v2"}, "extra_info": {"index": "uuid-2"}}  # fmt: skip
    no_prompt = {**good, "prompt": [], "extra_info": {"index": "bad-1"}}
    no_truth = {**good, "reward_model": {"ground_truth": None, "style": "x"}, "extra_info": {"index": "bad-2"}}
    src = tmp_path / "dapo.parquet"
    pq.write_table(pa.Table.from_pylist([good, other, good, no_prompt, good, no_truth]), src)
    for dedup, expected in ((False, ["4", "6", "4", "4"]), (True, ["4", "6"])):
        out = tmp_path / f"out{int(dedup)}"
        args = ["--local-path", str(src), "--output-dir", str(out), "--max-malformed-frac", "0.5"]
        res = run_script("prepare_dapo_math.py", *args, *(["--dedup"] if dedup else []), tmp_path=tmp_path)
        assert res.returncode == 0, res.stderr
        rows = read_rows(out / "dapo-math-17k.parquet")
        assert [r["reward_model"]["ground_truth"] for r in rows] == expected
        assert rows[0]["prompt"] == good["prompt"] and rows[0]["data_source"] == "math_dapo"
        assert rows[1]["extra_info"]["source_id"] == "uuid-2"
        assert malformed_indices(out / "dapo-math-17k.parquet") == [3, 5]
        assert "prompt must be a non-empty list of chat messages" in res.stderr
        assert "reward_model.ground_truth is missing or null" in res.stderr
        assert "2 repeated prompts " + ("dropped" if dedup else "kept") in res.stdout
        assert f"{len(expected)} rows written" in res.stdout and "(6 read, 2 malformed skipped" in res.stdout


def test_dapo_plain_layout_is_wrapped_in_the_dapo_prompt(tmp_path):
    rows = [
        {"prompt": "Compute 7*6.", "solution": "42", "data_source": "math_dapo"},  # open-r1 processed copy
        {"problem": "Compute 1+1.", "answer": 2},
        {"problem": "Missing answer."},
    ]
    src = write_jsonl(tmp_path / "dapo.jsonl", rows)
    res = run_script(
        "prepare_dapo_math.py", "--local-path", str(src), "--output-dir", str(tmp_path), "--max-malformed-frac", "0.5",
        tmp_path=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = read_rows(tmp_path / "dapo-math-17k.parquet")
    assert [r["prompt"][0]["content"] for r in out] == [DAPO_PROMPT.format("Compute 7*6."), DAPO_PROMPT.format("Compute 1+1.")]
    assert [r["reward_model"]["ground_truth"] for r in out] == ["42", "2"]
    assert "malformed row 2 skipped: answer is empty" in res.stderr


# ----------------------------------------------------------------------------------------------- AIME


def test_aime_2024_answers_normalised_and_non_integers_rejected(tmp_path):
    rows = [  # columns of Maxwell-Jia/AIME_2024
        {"ID": "2024-I-1", "Problem": "Find x.", "Solution": "...", "Answer": 33},
        {"ID": "2024-I-2", "Problem": "Find y.", "Solution": "...", "Answer": "033"},
        {"ID": "2024-I-3", "Problem": "Find z.", "Solution": "...", "Answer": "1/2"},
        {"ID": "2024-I-4", "Problem": "Find w.", "Solution": "...", "Answer": 0},
    ]
    src = write_jsonl(tmp_path / "aime24.jsonl", rows)
    res = run_script(
        "prepare_aime.py", "--year", "2024", "--local-path", str(src), "--output-dir", str(tmp_path),
        "--max-malformed-frac", "0.5", tmp_path=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = read_rows(tmp_path / "aime-2024.parquet")
    assert [r["reward_model"]["ground_truth"] for r in out] == ["33", "33", "0"]
    assert {r["data_source"] for r in out} == {"aime2024"}
    assert out[0]["prompt"][0]["content"] == DAPO_PROMPT.format("Find x.")
    assert [r["extra_info"]["source_id"] for r in out] == ["2024-I-1", "2024-I-2", "2024-I-4"]
    assert "malformed row 2 skipped: AIME answer '1/2' is not an integer in 0..999" in res.stderr


def test_aime_2025_opencompass_snapshot_concatenates_both_configs(tmp_path):
    snap = tmp_path / "AIME2025"
    parts = {"AIME2025-I": [{"question": "P1", "answer": "70"}, {"question": "P2", "answer": "588"}],
             "AIME2025-II": [{"question": "P3", "answer": "x"}, {"question": "P4", "answer": "16"}]}  # fmt: skip
    readme = "---\nconfigs:\n"
    for config, rows in parts.items():
        (snap / config).mkdir(parents=True)
        write_jsonl(snap / config / "test.jsonl", rows)
        readme += f"- config_name: {config}\n  data_files:\n  - split: test\n    path: {config}/test.jsonl\n"
    (snap / "README.md").write_text(readme + "---\n")
    res = run_script(
        "prepare_aime.py", "--year", "2025", "--hub-name", "opencompass/AIME2025", "--local-path", str(snap),
        "--output-dir", str(tmp_path), "--max-malformed-frac", "0.5", tmp_path=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = read_rows(tmp_path / "aime-2025.parquet")
    assert [r["reward_model"]["ground_truth"] for r in out] == ["70", "588", "16"]
    assert [r["extra_info"]["index"] for r in out] == [0, 1, 3]  # index over the concatenated configs
    assert {r["data_source"] for r in out} == {"aime2025"}
    assert "malformed row 2 skipped: AIME answer 'x'" in res.stderr


def test_aime_year_is_required_and_checked(tmp_path):
    res = run_script("prepare_aime.py", "--output-dir", str(tmp_path), tmp_path=tmp_path)
    assert res.returncode == 2 and "--year is required; allowed: [2024, 2025]" in res.stderr
    res = run_script("prepare_aime.py", "--year", "2023", "--output-dir", str(tmp_path), tmp_path=tmp_path)
    assert res.returncode == 2 and "invalid choice: 2023" in res.stderr


# ----------------------------------------------------------------------------------------------- scorers


def test_converted_rows_select_the_intended_verl_scorer():
    """The data_source / prompt / ground truth of each converter work with verl's default scorer."""
    from verl.utils.reward_score import default_compute_score

    gsm8k = load_module("prepare_gsm8k").convert(GSM8K_ROWS[0], 0, "train")
    dapo = load_module("prepare_dapo_math").convert({"problem": "Compute 7*6.", "answer": "42"}, 0, "train")
    aime = load_module("prepare_aime").make_convert(2025)({"problem": "Find x.", "answer": "033"}, 0, "test")

    assert "####" in gsm8k["prompt"][-1]["content"]
    assert default_compute_score(gsm8k["data_source"], "so 1203 apples\n#### 1,203", gsm8k["reward_model"]["ground_truth"]) == 1.0
    assert default_compute_score(gsm8k["data_source"], "#### 1202", gsm8k["reward_model"]["ground_truth"]) == 0.0
    for row, right, wrong in ((dapo, "42", "41"), (aime, "33", "34")):
        assert "Answer:" in row["prompt"][-1]["content"]
        truth = row["reward_model"]["ground_truth"]
        assert default_compute_score(row["data_source"], f"work\nAnswer: {right}", truth)["score"] == 1.0
        assert default_compute_score(row["data_source"], f"work\nAnswer: {wrong}", truth)["score"] == -1.0


@pytest.mark.parametrize(
    ("text", "expected"), [("033", "33"), ("7", "7"), ("\\boxed{204}", "204"), ("$25$", "25"), ("1000", None), ("3.5", None)]
)
def test_aime_answer_normalisation(text, expected):
    aime = load_module("prepare_aime")
    common = sys.modules["prep_common"]
    if expected is None:
        with pytest.raises(common.MalformedRow):
            aime.aime_answer(text)
    else:
        assert aime.aime_answer(text) == expected
