"""Hydra's own way to see what a recipe runs, ``bash recipe/<name>.sh --cfg job --resolve``, prints the recipe's
resolved config: exit 0, valid YAML, no interpolation left. One recipe per kind of script (:data:`KINDS`: a GPU
recipe, the CPU recipe, the evaluation recipe; they share recipe/launch.sh and differ in what they compose, which
every recipe has pinned, resolved, in tests/scripts/test_recipe_pins.py). The script runs for real; the
``python -m verl_ext.main_ppo --cfg job --resolve`` it launches composes in this process (``launch_record``: Hydra's
compose API with the recipe's own config path, printed as hydra.main prints ``--cfg job --resolve``), and the GPU
recipe's launch is a real process too, which shows that the flags pass through the launcher to hydra.main."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from launch_record import run_launcher

from verl_ext.recipe import launch_env

REPO = Path(__file__).resolve().parents[2]
RECIPE_DIR = REPO / "recipe"
RECIPES = sorted(p.stem for p in RECIPE_DIR.glob("*.sh") if p.name != "launch.sh")

EXPERIMENT_NAMES = {"eval": "eval-dapo-erc", "cpu_tiny": "cpu-tiny-grpo_erc"}
"""Run names other than the recipe's name with dashes."""


KINDS = ("dapo_clip_cov", "cpu_tiny", "eval")
"""A GPU recipe, the CPU recipe and the evaluation recipe: recipe/launch.sh's three kinds of launch."""


def test_every_kind_of_recipe_is_covered():
    assert len(RECIPES) == 17 and set(KINDS) <= set(RECIPES)


REAL_PROCESS = "dapo_clip_cov"
"""The recipe whose ``--cfg job --resolve`` launch is a real ``python -m verl_ext.main_ppo`` process."""


@pytest.mark.parametrize(("name", "real"), [*((name, False) for name in KINDS), (REAL_PROCESS, True)],
                         ids=[*KINDS, f"{REAL_PROCESS}-real_process"])  # fmt: skip
def test_cfg_job_resolve_prints_the_resolved_config(name, real, tmp_path):
    dropped = set(launch_env.names()) | {"HYDRA_FULL_ERROR"}
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(("VERL_", "RAY_"))}
    env.update(HOME=str(tmp_path), PYTHON=sys.executable)
    command = ["bash", str(RECIPE_DIR / f"{name}.sh"), "--cfg", "job", "--resolve"]
    in_process = run_launcher(command, env=env, cwd=tmp_path, record_dir=tmp_path / "record", timeout=300)
    assert in_process.launched == 1, in_process.stderr[-4000:]
    assert in_process.launches[0]["argv"][-3:] == ["--cfg", "job", "--resolve"], in_process.launches[0]["argv"]
    res = in_process
    if real:  # the process prints what the in-process composition prints
        res = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert res.returncode == 0, res.stderr[-4000:]
        assert yaml.safe_load(res.stdout) == yaml.safe_load(in_process.stdout)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "${" not in res.stdout, [line for line in res.stdout.splitlines() if "${" in line][:10]
    cfg = yaml.safe_load(res.stdout)
    assert cfg["trainer"]["experiment_name"] == EXPERIMENT_NAMES.get(name, name.replace("_", "-"))
    loss = cfg["actor_rollout_ref"]["actor"]["policy_loss"]
    assert isinstance(loss["clip_cov_ratio"], float) and isinstance(cfg["data"]["train_files"], list)
    assert isinstance(cfg["actor_rollout_ref"]["actor"]["ppo_max_token_len_per_gpu"], int)
    assert cfg["trainer"]["device"] == ("cpu" if name == "cpu_tiny" else "cuda")
