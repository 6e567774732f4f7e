"""recipe/launch.sh and its one list of variables (verl_ext.recipe.launch_env): ``PRINT_CMD=1`` prints every override
the environment produced, before the user's arguments; a variable that does not apply to the recipe, a bad flag or a
bad choice exits 2 naming it; generic names (STEPS, N, LR, ...) are not read. Nothing here imports verl."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ext.recipe import launch_env

REPO = Path(__file__).resolve().parents[2]
RECIPE_DIR = REPO / "recipe"

DOCUMENTED = ("MODEL_PATH", "DATA_DIR", "TRAIN_FILE", "VAL_FILE", "CKPTS_DIR", "WORK_DIR", "CKPT", "NNODES",
              "GPUS_PER_NODE", "GEN_TP", "SP_SIZE", "OFFLOAD", "PROJECT_NAME", "EXP_NAME", "LOGGERS",
              "VERL_EXT_CPU_PRECISION", "SCALE", "MODEL", "LOSS", "DRY_RUN", "PRINT_CMD", "PYTHON")  # fmt: skip
"""The launcher's variables, as the recipes' docs list them."""

GENERIC = ("STEPS", "PROMPTS", "N", "LR", "SEED", "COV_RATIO", "RESPONSE_LENGTH", "MAX_PROMPT_LENGTH",
           "MAX_RESPONSE_LENGTH", "OVERLONG_BUFFER", "MAX_NUM_GEN_BATCHES", "VAL_N", "FAMILY", "PROTOCOL", "EVAL_DIR",
           "ENTROPY_TARGET", "ASSETS", "SCALE_DIR")  # fmt: skip
"""Names a shell may hold for other reasons: the launcher reads none of them (they are Hydra overrides)."""


def clean_env(tmp_path: Path, **variables: str) -> dict[str, str]:
    """This process's environment without any launcher variable or generic name, plus ``variables``."""
    dropped = set(launch_env.names()) | set(GENERIC)
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(("VERL_", "RAY_"))}
    env.update({"HOME": str(tmp_path), "PYTHON": sys.executable, "PRINT_CMD": "1", **variables})
    return env


def printed(name: str, tmp_path: Path, *args: str, **variables: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(RECIPE_DIR / f"{name}.sh"), *args], capture_output=True, text=True,
                          env=clean_env(tmp_path, **variables), cwd=tmp_path, timeout=60)  # fmt: skip


def command(name: str, tmp_path: Path, *args: str, **variables: str) -> list[str]:
    res = printed(name, tmp_path, *args, **variables)
    assert res.returncode == 0, res.stderr
    return shlex.split(res.stdout)


def test_the_list_is_the_documented_one_and_launch_sh_names_each():
    assert launch_env.names() == list(DOCUMENTED)
    header = (RECIPE_DIR / "launch.sh").read_text()
    table = launch_env.table()
    for name in DOCUMENTED:
        assert name in header, name
        assert f"| `{name}` |" in table, name
    assert not set(GENERIC) & set(launch_env.names())


def test_launch_env_imports_nothing_of_verl():
    code = "import sys, verl_ext.recipe.launch_env; print(sorted(m for m in sys.modules if m.split('.')[0] == 'verl'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


#: each variable of the list set for an evaluation at the CPU scale (every one that applies there, LOSS aside: it is
#: recipe/cpu_tiny.sh's), in the list's order, with the overrides it must print
EVAL_CPU = {
    "MODEL_PATH": ("/m/q wen",), "DATA_DIR": ("/d",), "TRAIN_FILE": ("/d/t.parquet",), "VAL_FILE": ("/d/a.parquet,/d/b.parquet",),
    "CKPTS_DIR": ("/c",), "WORK_DIR": ("/w",), "CKPT": ("/c/global_step_3",), "NNODES": ("1",), "GPUS_PER_NODE": ("2",),
    "GEN_TP": ("1",), "SP_SIZE": ("1",), "OFFLOAD": ("1",), "PROJECT_NAME": ("p",), "EXP_NAME": ("it's",),
    "LOGGERS": ("console,file",), "VERL_EXT_CPU_PRECISION": ("fp32",), "SCALE": ("cpu",), "MODEL": ("smollm2",),
}  # fmt: skip
EVAL_CPU_OVERRIDES = [
    "actor_rollout_ref.model.path='/m/q wen'", "verl_ext.recipe.data_dir='/d'", "data.train_files=['/d/t.parquet']",
    "data.val_files=['/d/a.parquet','/d/b.parquet']", "trainer.default_local_dir='/c'", "verl_ext.recipe.work_dir='/w'",
    "trainer.resume_from_path='/c/global_step_3'", "trainer.nnodes=1", "trainer.n_gpus_per_node=2",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1",
    "actor_rollout_ref.actor.fsdp_config.param_offload=true", "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
    "actor_rollout_ref.ref.fsdp_config.param_offload=true", "trainer.project_name='p'", "trainer.experiment_name='it\\'s'",
    "trainer.logger=['console','file']", "verl_ext.cpu_precision='fp32'", "scale=cpu", "cpu_model=smollm2",
]  # fmt: skip


def test_print_cmd_prints_every_variables_override_before_the_users_arguments(tmp_path):
    """Every variable of the list that applies to the launch becomes its overrides, printed in the list's order after
    the config's name and before the user's own arguments (which therefore win)."""
    variables = {name: values[0] for name, values in EVAL_CPU.items()}
    cmd = command("eval", tmp_path, "trainer.nnodes=1", "a.b=c d", **variables)
    head = [sys.executable, "-m", "verl_ext.main_ppo", "--config-path", str(RECIPE_DIR), "--config-name", "eval"]
    assert cmd == [*head, *EVAL_CPU_OVERRIDES, "trainer.nnodes=1", "a.b=c d"]
    switches = {v.name for v in launch_env.VARIABLES if v.kind == "switch"}
    assert set(EVAL_CPU) == set(launch_env.names()) - switches - {"LOSS"}  # every variable but cpu_tiny's own
    loss = command("cpu_tiny", tmp_path, "x=1", LOSS="clip_cov", WORK_DIR="/w", DRY_RUN="1")
    assert loss[7:] == ["verl_ext.recipe.work_dir='/w'", "policy_loss@actor_rollout_ref.actor.policy_loss=clip_cov",
                        "loss_actor@actor_rollout_ref.actor=clip_cov", "x=1", "verl_ext.dry_run=true"]  # fmt: skip
    assert command("cpu_tiny", tmp_path, LOSS="kl_cov")[7:] == ["policy_loss@actor_rollout_ref.actor.policy_loss=kl_cov"]


def test_without_variables_the_command_is_the_recipe_and_the_arguments(tmp_path):
    cmd = command("dapo_grpo_erc", tmp_path, "trainer.total_training_steps=5", "a.b=c d")
    assert cmd == [sys.executable, "-m", "verl_ext.main_ppo", "--config-path", str(RECIPE_DIR), "--config-name",
                   "dapo_grpo_erc", "trainer.total_training_steps=5", "a.b=c d"]  # fmt: skip


def test_scale_cpu_on_the_command_line_takes_the_cpu_variables(tmp_path):
    """``WORK_DIR=/w bash recipe/dapo_kl_cov.sh scale=cpu``: the launch is CPU mode, so CPU mode's variables apply;
    SCALE=cpu with the same argument too."""
    cmd = command("dapo_kl_cov", tmp_path, "scale=cpu", WORK_DIR="/w", MODEL="smollm2")
    assert cmd[7:] == ["verl_ext.recipe.work_dir='/w'", "cpu_model=smollm2", "scale=cpu"]
    cmd = command("dapo_kl_cov", tmp_path, "scale=cpu", SCALE="cpu", WORK_DIR="/w")
    assert cmd[7:] == ["verl_ext.recipe.work_dir='/w'", "scale=cpu", "scale=cpu"]
    res = printed("dapo_kl_cov", tmp_path, "scale=gpu", WORK_DIR="/w")
    assert res.returncode == 2 and "error: WORK_DIR is set, but it applies to CPU mode" in res.stderr, res.stderr


@pytest.mark.parametrize(("variable", "argument"), [("cpu", "gpu"), ("gpu", "cpu")])
def test_scale_and_a_scale_argument_that_disagree_exit_2_naming_both(variable, argument, tmp_path):
    """``SCALE=cpu bash recipe/dapo_clip_cov.sh scale=gpu`` (and the other way round): one line naming both, from the
    launcher's list (recipe/launch.sh and scripts/cluster/submit.sh read it), whatever else is set."""
    line = (f"error: SCALE={variable} and the argument scale={argument} disagree: SCALE={variable} stands for "
            f"scale={variable}; give one of them")  # fmt: skip
    for extra in ({}, {"WORK_DIR": "/w"}, {"DRY_RUN": "1"}):
        res = printed("dapo_clip_cov", tmp_path, "a.b=1", f"scale={argument}", SCALE=variable, **extra)
        assert res.returncode == 2 and res.stderr.strip() == line, res.stderr
        assert res.stdout == "" and "VERL_PLATFORM" not in res.stderr
    res = printed("dapo_clip_cov", tmp_path, f"scale={argument}", f"scale={variable}", SCALE=variable)
    assert res.returncode == 0, res.stderr  # the last scale= argument is the one Hydra applies


def fake_python(tmp_path: Path) -> Path:
    """An interpreter that runs everything with this one but ``-m verl_ext.main_ppo``, for which it prints the
    VERL_PLATFORM it was started with."""
    path = tmp_path / "python"
    path.write_text(f"""#!/usr/bin/env bash
if [[ "$1 $2" == "-m verl_ext.main_ppo" ]]; then echo "VERL_PLATFORM=${{VERL_PLATFORM-unset}}"; exit 0; fi
exec {shlex.quote(sys.executable)} "$@"
""")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("name", "args", "variables", "platform"),
    [
        ("dapo_kl_cov", ("scale=cpu",), {}, "cpu"),
        ("dapo_kl_cov", (), {"SCALE": "cpu"}, "cpu"),
        ("dapo_kl_cov", ("scale=gpu", "scale=cpu"), {}, "cpu"),
        ("cpu_tiny", (), {}, "cpu"),
        ("dapo_kl_cov", (), {}, "unset"),
        ("dapo_kl_cov", ("scale=gpu",), {"SCALE": "gpu"}, "unset"),
        ("dapo_kl_cov", ("scale=cpu", "scale=gpu"), {}, "unset"),
    ],
)
def test_the_launcher_exports_cpu_mode_as_the_list_decides_it(name, args, variables, platform, tmp_path):
    """recipe/launch.sh exports VERL_PLATFORM=cpu (every process of the run inherits it) exactly for a CPU-mode
    launch: recipe/cpu_tiny.sh, SCALE=cpu, or a last scale= argument of cpu."""
    env = clean_env(tmp_path, PYTHON=str(fake_python(tmp_path)), **variables)
    env.pop("PRINT_CMD")
    res = subprocess.run(["bash", str(RECIPE_DIR / f"{name}.sh"), *args], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"VERL_PLATFORM={platform}"
    cli = subprocess.run([sys.executable, "-m", "verl_ext.recipe.launch_env", "platform", name, *args],
                         capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert cli.returncode == 0 and cli.stdout.strip() == ("gpu" if platform == "unset" else "cpu"), cli.stderr


def test_generic_names_are_not_read(tmp_path):
    """STEPS, N, LR, ... in the shell change nothing: the printed command is the one without them."""
    plain = command("gsm8k_grpo_erc", tmp_path)
    generic = {name: "7" for name in GENERIC}
    assert command("gsm8k_grpo_erc", tmp_path, **generic) == plain
    assert command("eval", tmp_path, **generic) == command("eval", tmp_path)


@pytest.mark.parametrize(
    ("name", "variables", "message"),
    [
        ("dapo_kl_cov", {"CKPT": "/c/global_step_1"}, "CKPT is set, but it applies to recipe/eval.sh only"),
        ("dapo_kl_cov", {"WORK_DIR": "/w"}, "WORK_DIR is set, but it applies to CPU mode (SCALE=cpu or "
                                            "recipe/cpu_tiny.sh) only; this launch is recipe/dapo_kl_cov.sh: unset it"),
        ("gsm8k_grpo_erc", {"MODEL": "smollm2"}, "MODEL is set, but it applies to CPU mode"),
        ("gsm8k_grpo_erc", {"VERL_EXT_CPU_PRECISION": "fp32"}, "VERL_EXT_CPU_PRECISION is set, but it applies to CPU mode"),
        ("dapo_kl_cov", {"SCALE": "cpu", "LOSS": "clip_cov"}, "LOSS is set, but it applies to recipe/cpu_tiny.sh only; "
                                                              "this launch is recipe/dapo_kl_cov.sh in CPU mode"),
        ("cpu_tiny", {"SCALE": "cpu"}, "SCALE is set, but it applies to the recipes with a scale"),
        ("eval", {"LOSS": "vanilla"}, "LOSS is set, but it applies to recipe/cpu_tiny.sh only"),
    ],
)
def test_a_variable_that_does_not_apply_exits_2_naming_it(name, variables, message, tmp_path):
    res = printed(name, tmp_path, **variables)
    assert res.returncode == 2 and f"error: {message}" in res.stderr, res.stderr
    assert res.stdout == ""


@pytest.mark.parametrize(
    ("name", "variables", "message"),
    [
        ("dapo_kl_cov", {"SCALE": "tpu"}, "SCALE='tpu' is invalid: allowed gpu, cpu"),
        ("dapo_kl_cov", {"SCALE": "cpu", "MODEL": "qwen"}, "MODEL='qwen' is invalid: allowed toy, tiny, smollm2"),
        ("cpu_tiny", {"LOSS": "bogus"}, "LOSS='bogus' is invalid: allowed vanilla, bapo, clip_cov, entropy_adv, gppo_erc"),
        ("dapo_kl_cov", {"OFFLOAD": "yes"}, "OFFLOAD='yes' is invalid: allowed 0, 1"),
        ("dapo_kl_cov", {"DRY_RUN": "true"}, "DRY_RUN='true' is invalid: allowed 0 or 1"),
        ("dapo_kl_cov", {"PRINT_CMD": "yes"}, "PRINT_CMD='yes' is invalid: allowed 0 or 1"),
        ("dapo_kl_cov", {"TRAIN_FILE": ","}, "TRAIN_FILE=',' is invalid: allowed one or more entries, comma-separated"),
        ("dapo_kl_cov", {"LOGGERS": " , "}, "LOGGERS=' , ' is invalid: allowed one or more entries"),
        ("dapo_kl_cov", {"MODEL_PATH": ""}, "MODEL_PATH is set but empty: unset it or give a value"),
    ],
)
def test_a_bad_flag_or_choice_exits_2_naming_it(name, variables, message, tmp_path):
    res = printed(name, tmp_path, **variables)
    assert res.returncode == 2 and f"error: {message}" in res.stderr, res.stderr
    assert res.stdout == ""


def test_a_value_is_quoted_for_hydra_and_numbers_pass_as_written():
    var = launch_env.BY_NAME
    assert launch_env.overrides_for(var["CKPTS_DIR"], "/a b/it's") == ["trainer.default_local_dir='/a b/it\\'s'"]
    assert launch_env.overrides_for(var["NNODES"], "2") == ["trainer.nnodes=2"]
    assert launch_env.overrides_for(var["NNODES"], "two") == ["trainer.nnodes='two'"]  # the config's check names it
    assert launch_env.overrides_for(var["OFFLOAD"], "0") == [f"{key}=false" for key in launch_env.OFFLOAD_KEYS]
    assert launch_env.overrides_for(var["DRY_RUN"], "1") == []  # the launcher's own switch


def test_the_command_line_interface(tmp_path):
    def cli(*args: str, **variables: str) -> subprocess.CompletedProcess:
        env = {**clean_env(tmp_path, **variables)}
        return subprocess.run([sys.executable, "-m", "verl_ext.recipe.launch_env", *args], capture_output=True,
                              text=True, env=env, timeout=60)  # fmt: skip

    assert cli("names").stdout.split() == list(DOCUMENTED)
    assert cli("overrides", "gsm8k_grpo_erc", NNODES="2", PROJECT_NAME="p").stdout == "trainer.nnodes=2\0trainer.project_name='p'\0"
    bad = cli("overrides", "gsm8k_grpo_erc", OFFLOAD="2")
    assert bad.returncode == 2 and bad.stderr.strip() == "error: OFFLOAD='2' is invalid: allowed 0, 1"
    assert cli("overrides", "gsm8k_grpo_erc", "scale=cpu", WORK_DIR="/w").stdout == "verl_ext.recipe.work_dir='/w'\0"
    bad = cli("platform", "gsm8k_grpo_erc", "scale=gpu", SCALE="cpu")
    assert bad.returncode == 2 and "SCALE=cpu and the argument scale=gpu disagree" in bad.stderr
    assert cli("bogus").returncode == 2
