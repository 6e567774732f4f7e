"""``python -m verl_ext.demo``'s own logic: arguments, the recipe runs it builds, the progress it reads. Its end-to-end
run through verl's trainer is in tests/e2e/test_e2e_cpu.py (the auto_cov run with the token lens)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from verl_ext.demo.cli import main
from verl_ext.demo.runs import MODELS, STEP_LINE, DemoSettings, recipe_script, run_command

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--losses", "vanilla,ppo"], "allowed: vanilla, bapo, clip_cov, entropy_adv, gppo_erc, grpo_erc, high_entropy, kl_cov, "
                                       "auto_cov, pi_cov, pi_coef, skywork, entropic"),
        (["--losses", "vanilla,vanilla"], "twice"),
        (["--losses", "auto_cov"], "--losses auto_cov: needs --entropy-target"),
        (["--steps", "0"], "--steps 0 is invalid: allowed an integer >= 1"),
        (["--prompts-per-step", "3"], "--prompts-per-step 3 is invalid: allowed an even number"),
        (["--cov-ratio", "0"], "--cov-ratio 0.0 is invalid: allowed a fraction in (0, 1]"),
        (["--entropy-target", "-1"], "--entropy-target -1.0 is invalid: allowed a number > 0"),
    ],
)
def test_bad_arguments_exit_2_naming_the_flag_and_the_allowed_values(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path), *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "train.log").exists()  # refused before anything ran


def _tracked(*paths: str) -> list[str]:
    """The files git tracks under ``paths`` (relative to the repository)."""
    done = subprocess.run(["git", "ls-files", "-z", "--", *paths], cwd=REPO, capture_output=True, check=True)
    return [name for name in done.stdout.decode().split("\0") if name]


def test_the_wheel_ships_the_repositorys_recipes_and_configs(tmp_path):
    """A wheel built (non-editable) from the repository's packaging inputs carries every recipe script as
    ``verl_ext/recipe/<name>.sh`` and every config as ``verl_ext/configs/...``, byte for byte - what ``python -m
    verl_ext.demo`` runs after a plain ``pip install``. (Under the editable install the tests run with,
    ``recipe_script()`` resolves to the repository's own files, so reading it back proves nothing.)"""
    source = tmp_path / "src"
    inputs = _tracked("pyproject.toml", "README.md", "LICENSE", "verl_ext", "configs", "recipe")
    for name in inputs:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, source / name)
    out = tmp_path / "dist"
    out.mkdir()
    build = ("import sys; from setuptools import build_meta; "
             "print(build_meta.build_wheel(sys.argv[1]))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", build, str(out)], cwd=source, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("verl_ext-*.whl")
    recipes = [n for n in _tracked("recipe") if n.endswith((".sh", ".yaml"))]
    configs = [n for n in _tracked("configs") if n.endswith(".yaml")]
    assert {"recipe/cpu_tiny.sh", "recipe/cpu_tiny.yaml", "recipe/launch.sh"} <= set(recipes) and configs
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
        for name in recipes + configs:
            inside = "verl_ext/" + name  # configs/ ships as verl_ext/configs/, recipe/ as verl_ext/recipe/
            assert inside in shipped, (inside, sorted(n for n in shipped if "/recipe/" in n or "/configs/" in n))
            assert archive.read(inside) == (REPO / name).read_bytes(), name
    assert recipe_script().name == "cpu_tiny.sh"  # what the demo runs is found in the installed package


def test_each_run_is_the_recipe_with_its_loss_and_the_shared_settings(tmp_path, monkeypatch):
    """The launcher's variables name the loss, the run, the work folder and the model; sizes, steps, seed, learning
    rate and ratio are overrides before the run's entropy control and the user's own (last: they win). The other
    launch variables the user set reach the run."""
    monkeypatch.setenv("LOSS", "vanilla")
    monkeypatch.setenv("GPUS_PER_NODE", "2")
    settings = DemoSettings(steps=7, seed=3, prompts=4, samples=2, response_length=5, lr=1e-3, cov_ratio=0.05,
                            entropy_target=2.5, overrides=("trainer.use_v1=false",))  # fmt: skip
    cmd, env = run_command("kl_cov", settings, tmp_path, build_assets=True)
    assert cmd[:2] == ["bash", str(recipe_script())] and cmd[-1] == "trainer.use_v1=false"
    assert {k: env.get(k) for k in ("LOSS", "EXP_NAME", "WORK_DIR", "MODEL", "PYTHON", "GPUS_PER_NODE")} == {
        "LOSS": "kl_cov", "EXP_NAME": "kl_cov", "WORK_DIR": str(tmp_path), "MODEL": "toy", "PYTHON": sys.executable,
        "GPUS_PER_NODE": "2"}  # fmt: skip
    assert cmd[2:] == [
        "trainer.total_training_steps=7", "data.seed=3", "data.train_batch_size=4", "actor_rollout_ref.rollout.n=2",
        "data.max_response_length=5", "actor_rollout_ref.actor.optim.lr=0.001",
        "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.05", "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.05",
        "verl_ext.recipe.assets=true",
        f"ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH='{tmp_path / 'runs' / 'kl_cov.jsonl'}'",
        "trainer.val_before_train=False", "trainer.use_v1=false"]  # fmt: skip
    cmd, env = run_command("auto_cov", settings, tmp_path, build_assets=False)
    control = [c for c in cmd if c.startswith("verl_ext.entropy_control.")]
    assert env["LOSS"] == "clip_cov" and env["EXP_NAME"] == "auto_cov" and "verl_ext.recipe.assets=false" in cmd
    assert control == ["verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.target=2.5",
                       "verl_ext.entropy_control.actuator=cov_ratio", "verl_ext.entropy_control.ratio_min=0.001",
                       "verl_ext.entropy_control.ratio_max=0.5"]  # the default controller (auto): no controller key
    assert cmd.index("verl_ext.entropy_control.enable=true") < cmd.index("trainer.use_v1=false")
    with pytest.raises(ValueError, match="needs --entropy-target"):
        run_command("auto_cov", DemoSettings(), tmp_path, build_assets=False)
    cmd, env = run_command("pi_cov", settings, tmp_path, build_assets=False)
    assert env["LOSS"] == "clip_cov" and {"verl_ext.entropy_control.controller=pi",
                                          "verl_ext.entropy_control.actuator=cov_ratio"} <= set(cmd)  # fmt: skip
    cmd, env = run_command("skywork", settings, tmp_path, build_assets=False)
    assert env["LOSS"] == "vanilla" and {"verl_ext.entropy_control.controller=skywork",
                                         "verl_ext.entropy_control.actuator=entropy_coef"} <= set(cmd)  # fmt: skip
    cmd, env = run_command("entropic", settings, tmp_path, build_assets=False)
    assert env["LOSS"] == "vanilla" and "verl_ext.entropy_control.actuator=pos_weight" in cmd
    cmd, env = run_command("clip_high", settings, tmp_path, build_assets=False)
    control = [c for c in cmd if c.startswith("verl_ext.entropy_control.")]
    assert env["LOSS"] == "vanilla" and control == ["verl_ext.entropy_control.enable=true",
                                                    "verl_ext.entropy_control.target=2.5",
                                                    "verl_ext.entropy_control.controller=pi",
                                                    "verl_ext.entropy_control.actuator=clip_high"]  # fmt: skip
    # a relative run sets its own target (one target key, not --entropy-target's nats) and needs no --entropy-target
    for given in (settings, DemoSettings()):
        cmd, env = run_command("relative_linear", given, tmp_path, build_assets=False)
        control = [c for c in cmd if c.startswith("verl_ext.entropy_control.")]
        assert env["LOSS"] == "vanilla" and control == [
            "verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.target_unit=initial",
            "verl_ext.entropy_control.target=1.0", "verl_ext.entropy_control.schedule=linear",
            "verl_ext.entropy_control.target_end=0.5"]  # fmt: skip


def test_a_run_composes_with_the_sizes_it_was_given(tmp_path):
    """The recipe's printed command (``PRINT_CMD=1``) carries the loss's groups and every size, before the user's
    overrides."""
    settings = DemoSettings(steps=7, seed=3, prompts=4, samples=2, response_length=5, lr=1e-3, cov_ratio=0.05,
                            entropy_target=2.5, overrides=("trainer.use_v1=false",))  # fmt: skip
    cmd, env = run_command("auto_cov", settings, tmp_path, build_assets=False)
    done = subprocess.run(cmd, env={**env, "PRINT_CMD": "1"}, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    printed = shlex.split(done.stdout.strip().splitlines()[-1])
    assert printed[1:3] == ["-m", "verl_ext.main_ppo"] and printed[printed.index("--config-name") + 1] == "cpu_tiny"
    assert printed[-(len(cmd) - 2):] == cmd[2:]  # the demo's overrides, after the launcher's
    assert {"policy_loss@actor_rollout_ref.actor.policy_loss=clip_cov", "cpu_model=toy",
            f"verl_ext.recipe.work_dir='{tmp_path}'", "trainer.experiment_name='auto_cov'"} <= set(printed)  # fmt: skip


def test_model_smollm2_gives_the_recipe_the_real_model_and_its_sizes(tmp_path, monkeypatch):
    """``--model smollm2``: MODEL reaches the recipe, with the real model's sizes unless given; ``--model tiny`` is
    the recipe's toy model; a bad name is an error."""
    settings = DemoSettings.for_model("smollm2", steps=5, prompts=None, lr=2e-5)
    assert (settings.prompts, settings.samples, settings.response_length, settings.lr, settings.cov_ratio) == (
        MODELS["smollm2"]["prompts"], MODELS["smollm2"]["samples"], 64, 2e-5, MODELS["smollm2"]["cov_ratio"])
    monkeypatch.setenv("VERL_EXT_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.setenv("VERL_PLATFORM", "cuda")
    monkeypatch.setenv("VERL_EXT_CPU_IOMP", "0")
    monkeypatch.setenv("VERL_EXT_CPU_PRECISION", "fp32")
    cmd, env = run_command("vanilla", settings, tmp_path, build_assets=True)
    assert env["MODEL"] == "smollm2"
    assert {"data.max_response_length=64", "actor_rollout_ref.actor.optim.lr=2e-05", "data.train_batch_size=4"} <= set(cmd)
    assert env["VERL_EXT_MODEL_CACHE"] == str(tmp_path / "models") and "VERL_PLATFORM" not in env  # the cache is kept
    assert env["VERL_EXT_CPU_IOMP"] == "0"  # so is CPU mode's OpenMP switch
    assert env["VERL_EXT_CPU_PRECISION"] == "fp32"  # and its precision (the launcher makes it an override)
    assert run_command("vanilla", DemoSettings(), tmp_path, build_assets=True)[1]["MODEL"] == "toy"
    with pytest.raises(ValueError, match="--model 'qwen' is invalid: allowed one of"):
        DemoSettings.for_model("qwen")
    with pytest.raises(ValueError, match="--model 'qwen' is invalid"):
        DemoSettings(model="qwen")


def test_progress_follows_verls_console_step_lines_behind_rays_prefix():
    line = "\x1b[36m(VerlExtTaskRunnerV1Impl pid=3231)\x1b[0m step:12 - global_seqlen/min:3488.0 - actor/entropy:3.38"
    assert [int(m.group(1)) for m in [STEP_LINE.search(line)] if m] == [12]
    assert STEP_LINE.search("(pid=1) training/global_step:12 - x") is None
    assert STEP_LINE.search("Training Progress:   5%| 1/20 [00:04<01:20]") is None


CONTROLLED = ["auto_cov", "pi_cov", "pi_coef", "skywork", "entropic", "clip_high", "relative_linear"]


def test_the_controlled_runs_are_these():
    from verl_ext.demo.runs import CONTROL_RUNS

    assert sorted(CONTROL_RUNS) == sorted(CONTROLLED)


@pytest.mark.parametrize("name", CONTROLLED)
def test_every_controlled_run_is_a_valid_entropy_control_config(name):
    """Each controlled run's keys, with ``enable`` and a target, pass the config's own validation (a refused
    controller x actuator pair, or a key the pair does not read, would fail the demo's launch at config time)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from verl_ext.control.config import EntropyControlConfig
    from verl_ext.demo.runs import CONTROL_RUNS

    parsed = OverridesParser.create().parse_overrides(list(CONTROL_RUNS[name][1]))  # as Hydra reads them
    EntropyControlConfig.from_mapping({"enable": True, "target": 2.5, **{o.key_or_group: o.value() for o in parsed}})
