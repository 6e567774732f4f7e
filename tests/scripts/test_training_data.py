"""Bad training data is refused before Ray starts (``verl_ext.checks.training_data``), on the files a user writes:
``python -m verl_ext.main_ppo verl_ext.dry_run=true ...`` (the entry point's own run, in this process:
``launch_record``) exits 2 with one line naming the file and the key, in seconds."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _trainer_fakes import CLUSTER
from launch_record import run_main_ppo

from verl_ext.recipe import launch_env

PROMPT = [{"role": "user", "content": "What is 3 plus 4?"}]


def rows(n: int = 4, source: str = "openai/gsm8k", ground_truth: bool = True) -> list[dict]:
    """``n`` rows in verl's RL data layout (``reward_model`` left out with ``ground_truth=False``)."""
    out = []
    for i in range(n):
        row = {"data_source": source, "prompt": PROMPT, "ability": "math", "extra_info": {"index": i}}
        if ground_truth:
            row["reward_model"] = {"style": "rule", "ground_truth": "7"}
        out.append(row)
    return out


def write(path: Path, data: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(data), path)
    return path


def dry_run(tmp_path: Path, *overrides: str, cpu: bool = False):
    """The entry point's dry run with ``overrides`` (and ``platform=cpu`` with ``VERL_PLATFORM=cpu``)."""
    dropped = set(launch_env.names())
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(("VERL_", "RAY_"))}
    env.update(HOME=str(tmp_path), PYTHON=sys.executable, **({"VERL_PLATFORM": "cpu"} if cpu else {}))
    where = ["platform=cpu", *CPU] if cpu else CLUSTER
    return run_main_ppo(["verl_ext.dry_run=true", *where, *overrides], env=env, cwd=tmp_path)


CPU = [k for k in CLUSTER if not k.startswith(("trainer.", "actor_rollout_ref.model.path"))]
"""The cluster command line's batch sizes, on this machine's CPU."""


def files(train: Path, val: Path | None = None) -> tuple[str, str]:
    return f"data.train_files=[{train}]", f"data.val_files=[{val or train}]"


def last_line(result) -> str:
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def test_good_files_pass_and_a_file_missing_on_a_cluster_node_is_said_not_refused(tmp_path):
    good = write(tmp_path / "train.parquet", rows())
    assert dry_run(tmp_path, *files(good)).returncode == 0
    result = dry_run(tmp_path, *files(tmp_path / "on_the_nodes.parquet", good))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"warning: {tmp_path / 'on_the_nodes.parquet'} (data.train_files) does not exist on this node" in result.stderr


def test_a_data_source_no_scorer_knows_exits_2_naming_it_the_file_and_the_key(tmp_path):
    bad = write(tmp_path / "company.parquet", rows(source="my_company/unknown_source"))
    line = last_line(dry_run(tmp_path, *files(bad)))
    assert line.startswith("verl_ext: invalid config: reward.custom_reward_function.path: "), line
    assert f"{bad} (data.train_files) has data_source 'my_company/unknown_source'" in line, line
    # the same file with a custom reward function: verl scores it with that function
    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n")
    assert dry_run(tmp_path, *files(bad), f"reward.custom_reward_function.path={reward}").returncode == 0


def test_a_file_without_the_ground_truth_exits_2_naming_the_file_and_the_column(tmp_path):
    bad = write(tmp_path / "no_reward_model.parquet", rows(ground_truth=False))
    line = last_line(dry_run(tmp_path, *files(bad)))
    assert line == (f"verl_ext: invalid config: data.train_files: {bad} has no column 'reward_model', which verl reads "
                    "(columns: data_source, prompt, ability, extra_info)"), line
    gaps = rows()
    gaps[2]["data_source"] = None
    line = last_line(dry_run(tmp_path, *files(write(tmp_path / "gap.parquet", gaps))))
    assert line.endswith(f"data.train_files: {tmp_path / 'gap.parquet'}: row 2 has no 'data_source', which verl reads")


def test_a_missing_file_in_cpu_mode_exits_2_naming_the_key_and_the_file(tmp_path):
    good = write(tmp_path / "train.parquet", rows())
    missing = tmp_path / "typo.parquet"
    line = last_line(dry_run(tmp_path, *files(good, missing), cpu=True))
    assert line.startswith(f"verl_ext: invalid config: data.val_files: {missing} does not exist (CPU mode"), line


def test_a_reward_module_without_the_named_function_exits_2_naming_the_key_and_the_file(tmp_path):
    good = write(tmp_path / "train.parquet", rows())
    reward = tmp_path / "my_reward.py"
    reward.write_text("def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n")
    line = last_line(dry_run(tmp_path, *files(good), f"reward.custom_reward_function.path={reward}",
                             "reward.custom_reward_function.name=compute_score"))  # fmt: skip
    assert line == (f"verl_ext: invalid config: reward.custom_reward_function.name: 'compute_score': {reward} defines "
                    "no function of that name (defined: score)"), line
    line = last_line(dry_run(tmp_path, *files(good), f"reward.custom_reward_function.path={tmp_path / 'nowhere.py'}"))
    assert line.endswith(f"reward.custom_reward_function.path: '{tmp_path / 'nowhere.py'}': the file does not exist")


def test_verls_scorers_are_read_from_verls_code():
    """The data sources ``known_data_sources`` reads from verl's ``default_compute_score`` are those it scores
    (GSM8K, DAPO's and AIME's, MATH) and not one it would refuse."""
    from verl_ext.checks.training_data import scored_by_verl

    for source in ("openai/gsm8k", "math_dapo", "aime2024", "aime2025", "lighteval/MATH"):
        assert scored_by_verl(source), source
    assert not scored_by_verl("my_company/unknown_source")
    from verl.utils.reward_score import default_compute_score

    with pytest.raises(NotImplementedError):
        default_compute_score("my_company/unknown_source", "", "0")
