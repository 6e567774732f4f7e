"""A run's saved resolved config replays it: the config a recipe launches, composed and resolved as the entry point
does, saved with ``verl_ext.startup.save_resolved`` beside its checkpoints, composes again - with that file alone, from
another working folder, in an environment without the launch's variables - to the identical config."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from recipe_pins import OTHER_VARIABLES, compose, compose_script, environment

from verl_ext.recipe import launch_env
from verl_ext.startup import SAVED_CONFIG, resolved, save_resolved

CASES = {
    "dapo_clip_cov_cpu": ("dapo_clip_cov", {"SCALE": "cpu", "NNODES": "1"}, ("trainer.total_training_steps=5",)),
    "eval_ckpt": ("eval", {"CKPT": "$RUN/ckpts/run/global_step_3", "MODEL_PATH": "Qwen/Qwen2.5-7B"},
                  ("family=gsm8k", "eval_protocol=greedy")),
    "cpu_tiny_clip_cov": ("cpu_tiny", {"LOSS": "clip_cov", "WORK_DIR": "work"}, ("data.seed=1",)),
}  # fmt: skip
"""(script, launch variables, Hydra arguments) of each replayed run."""


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_saved_config_relaunches_to_the_identical_composition(case, tmp_path):
    script, variables, args = CASES[case]
    run_dir = tmp_path / "run"
    (run_dir / "home").mkdir(parents=True)
    (run_dir / "ckpts" / "run" / "global_step_3" / "actor").mkdir(parents=True)
    first = compose_script(script, variables, run_dir, args)
    saved = save_resolved(first)
    assert saved == Path(first.trainer.default_local_dir) / SAVED_CONFIG and saved.is_relative_to(run_dir)
    text = saved.read_text()
    assert "${" not in text and "oc.env" not in text
    # elsewhere: another working folder and HOME, none of the launch's variables, no VERL_PLATFORM
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dropped = set(launch_env.names()) | set(OTHER_VARIABLES)
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(("VERL_", "RAY_"))}
    env.update(HOME=str(elsewhere), PYTHON=sys.executable)
    with environment(env, elsewhere):
        again = resolved(compose(str(saved.parent), saved.stem, []))
    assert OmegaConf.to_container(again) == OmegaConf.to_container(first)
    if script == "eval":
        assert again.trainer.resume_from_path == str(run_dir / "ckpts" / "run" / "global_step_3")
        assert again.trainer.experiment_name == "eval-gsm8k-greedy"
