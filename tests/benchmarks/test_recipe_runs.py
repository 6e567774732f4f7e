"""benchmarks/recipe_runs.py launches a recipe as a user does: the launcher's variables in the environment, every other
value a Hydra override, and the printed command composes them (the runs themselves are benchmarks, run by hand)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from benchmarks import bench_precision, bench_trainer, recipe_runs
from verl_ext.recipe.launch_env import quote


@pytest.fixture()
def printed(monkeypatch, tmp_path):
    """Every launch of :func:`recipe_runs.run_recipe` made with ``PRINT_CMD=1`` instead: its printed command (split)
    and environment are recorded, and a one-step log is written where the run would log."""
    launches: list[tuple[list[str], dict[str, str]]] = []
    real_run = subprocess.run

    def fake_run(cmd, env, cwd, **kwargs):
        done = real_run(cmd, env={**env, "PRINT_CMD": "1"}, cwd=cwd, **kwargs)
        assert done.returncode == 0, done.stderr
        printed = shlex.split(done.stdout.strip().splitlines()[-1])
        launches.append((printed, env))
        name = env["EXP_NAME"]
        (Path(cwd) / f"{name}.jsonl").write_text(json.dumps({"step": 1, "data": {"x": 1.0}}) + "\n")
        return done

    monkeypatch.setattr(recipe_runs.subprocess, "run", fake_run)
    for name, value in (("LOSS", "grpo_erc"), ("MODEL", "smollm2"), ("CKPT", "x"), ("VERL_EXT_CPU_PRECISION", "bf16")):
        monkeypatch.setenv(name, value)  # the shell's launch variables do not reach a benchmark's runs
    return launches


def test_a_variable_the_launcher_does_not_read_is_an_error_naming_it(tmp_path, printed):
    with pytest.raises(ValueError, match="PROMPTS, STEPS: not a launch variable"):
        recipe_runs.run_recipe(tmp_path, "x", [], STEPS="3", PROMPTS="4", LOSS="vanilla")
    assert not printed  # refused before anything ran


def test_the_trainer_benchmark_launches_its_steps_loss_and_ranks(tmp_path, printed, monkeypatch):
    monkeypatch.setattr(bench_trainer, "figures", lambda rows, log, timers: {})
    bench_trainer.run_variant("verl_ext clip_cov", bench_trainer.VARIANTS["verl_ext clip_cov"], tmp_path, steps=5,
                              round_index=0, gpus_per_node=2, dynamic=True)  # fmt: skip
    ((cmd, env),) = printed
    log = tmp_path / "verl_ext_clip_cov_0.jsonl"
    assert cmd[1:3] == ["-m", "verl_ext.main_ppo"] and cmd[cmd.index("--config-name") + 1] == "cpu_tiny"
    want = [f"verl_ext.recipe.work_dir={quote(str(tmp_path))}", "trainer.n_gpus_per_node=2",
            "trainer.experiment_name='verl_ext_clip_cov_0'", "policy_loss@actor_rollout_ref.actor.policy_loss=clip_cov",
            f"++{recipe_runs.LOG_KEY}={quote(str(log))}",
            "verl_ext.recipe.assets=false", "trainer.total_training_steps=5", "trainer.test_freq=6",
            *bench_trainer.DYNAMIC_BSZ]  # fmt: skip
    assert [arg for arg in cmd if arg in want] == want  # the environment's overrides first, in the launcher's order
    assert env["LOSS"] == "clip_cov" and not {"MODEL", "CKPT", "VERL_EXT_CPU_PRECISION"} & set(env)
    assert not any(arg.startswith(("verl_ext.cpu_precision=", "cpu_model=", "trainer.resume_from_path=")) for arg in cmd)


def test_the_precision_benchmark_runs_each_case_at_its_steps(tmp_path, printed, monkeypatch):
    monkeypatch.setattr(bench_precision, "launch_figures", lambda rows, wall: {"step": 1.0, "update_actor": 1.0})
    bench_precision.run("smollm2", 1, 4, tmp_path, tmp_path / "assets", ("bf16",))
    bench_precision.run("tiny", 1, 4, tmp_path, tmp_path / "assets", ("fp32",))
    (smollm2, env), (tiny, _) = printed
    assert env["VERL_EXT_CPU_PRECISION"] == "bf16" and env["SCALE"] == "cpu" and env["MODEL"] == "smollm2"
    assert smollm2[smollm2.index("--config-name") + 1] == "gsm8k_grpo_vanilla"
    assert {"scale=cpu", "cpu_model=smollm2", "verl_ext.cpu_precision='bf16'",
            f"verl_ext.recipe.work_dir={quote(str(tmp_path / 'assets'))}",
            "trainer.total_training_steps=4", *bench_precision.NO_VALIDATION} <= set(smollm2)  # fmt: skip
    assert tiny[tiny.index("--config-name") + 1] == "cpu_tiny" and "trainer.total_training_steps=4" in tiny
    assert "verl_ext.cpu_precision='fp32'" in tiny and not any(arg.startswith(("scale=", "cpu_model=")) for arg in tiny)
