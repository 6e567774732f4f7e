"""Launch scripts (recipe/*.sh, scripts/gpu_smoke.sh): the exact command each builds (PRINT_CMD=1), its
environment handling, and DRY_RUN=1 through `python -m verl_ext.main_ppo` (composition + validation of the
real command; a deliberately wrong override must fail naming the key)."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RECIPE_DIR = REPO / "recipe"
SMOKE = REPO / "scripts" / "gpu_smoke.sh"
PREFIX = "actor_rollout_ref.actor."
LOSS = PREFIX + "policy_loss."

#: recipe -> (family, settings the papers' runs fix; checked against the effective command)
RECIPES: dict[str, tuple[str, dict[str, str]]] = {
    "gsm8k_grpo_vanilla": ("gsm8k", {LOSS + "loss_mode": "vanilla"}),
    "gsm8k_grpo_clip_cov": ("gsm8k", {LOSS + "loss_mode": "clip_cov", LOSS + "clip_cov_ratio": "0.0002",
                                      LOSS + "clip_cov_lb": "1.0", LOSS + "clip_cov_ub": "5.0",
                                      PREFIX + "clip_ratio_low": "1.0", PREFIX + "clip_ratio_high": "1.0"}),
    "gsm8k_grpo_kl_cov": ("gsm8k", {LOSS + "loss_mode": "kl_cov", LOSS + "kl_cov_ratio": "0.002",
                                    LOSS + "ppo_kl_coef": "1.0"}),
    "gsm8k_grpo_kl_clip": ("gsm8k", {LOSS + "loss_mode": "vanilla", PREFIX + "use_kl_loss": "True",
                                     PREFIX + "kl_clip_method": "soft", PREFIX + "kl_clip_threshold": "0.1",
                                     PREFIX + "use_per_token_kl_threshold": "True", PREFIX + "kl_loss_coef": "0.1"}),
    "gsm8k_grpo_erc": ("gsm8k", {LOSS + "loss_mode": "grpo_erc", LOSS + "entropy_mask_low": "0.95",
                                 LOSS + "entropy_mask_high": "1.05", PREFIX + "clip_ratio_c": "10.0"}),
    "dapo_baseline": ("dapo", {LOSS + "loss_mode": "vanilla", PREFIX + "clip_ratio_low": "0.2",
                               PREFIX + "clip_ratio_high": "0.28"}),
    "dapo_clip_cov": ("dapo", {LOSS + "loss_mode": "clip_cov", LOSS + "clip_cov_ratio": "0.0002",
                               LOSS + "clip_cov_lb": "1.0", LOSS + "clip_cov_ub": "5.0",
                               PREFIX + "clip_ratio_low": "1.0", PREFIX + "clip_ratio_high": "1.0"}),
    "dapo_kl_cov": ("dapo", {LOSS + "loss_mode": "kl_cov", LOSS + "kl_cov_ratio": "0.002", LOSS + "ppo_kl_coef": "1.0"}),
    "dapo_grpo_erc": ("dapo", {LOSS + "loss_mode": "grpo_erc", LOSS + "entropy_mask_low": "0.95",
                               LOSS + "entropy_mask_high": "1.05", PREFIX + "clip_ratio_c": "10.0",
                               PREFIX + "clip_ratio_high": "0.28"}),
    "dapo_gppo_erc": ("dapo", {LOSS + "loss_mode": "gppo_erc", LOSS + "entropy_mask_low": "0.95",
                               LOSS + "entropy_mask_high": "1.05", LOSS + "gppo_beta1": "1.0",
                               LOSS + "gppo_beta2": "1.0", PREFIX + "clip_ratio_c": "10.0",
                               PREFIX + "clip_ratio_high": "0.2"}),
    "dapo_high_entropy": ("dapo", {LOSS + "loss_mode": "high_entropy", LOSS + "high_entropy_ratio": "0.2",
                                   LOSS + "high_entropy_scope": "batch", PREFIX + "clip_ratio_high": "0.28"}),
    "dapo_entropy_adv": ("dapo", {LOSS + "loss_mode": "entropy_adv", LOSS + "entropy_adv_alpha": "0.4",
                                  LOSS + "entropy_adv_kappa": "2.0"}),
    "dapo_skywork": ("dapo", {LOSS + "loss_mode": "vanilla", PREFIX + "entropy_coeff": "0",
                              "verl_ext.entropy_control.enable": "true", "verl_ext.entropy_control.controller": "skywork",
                              "verl_ext.entropy_control.actuator": "entropy_coef", "verl_ext.entropy_control.target": "0.2",
                              "verl_ext.entropy_control.skywork_delta": "0.0001", "verl_ext.entropy_control.coef_min": "0.0",
                              "verl_ext.entropy_control.coef_max": "0.005", "verl_ext.entropy_control.coef_init": "0.0"}),
    "dapo_entropic": ("dapo", {LOSS + "loss_mode": "vanilla", "verl_ext.entropy_control.enable": "true",
                               "verl_ext.entropy_control.controller": "entropic",
                               "verl_ext.entropy_control.actuator": "pos_weight", "verl_ext.entropy_control.target": "0.1",
                               "verl_ext.entropy_control.entropic_kp": "1.0", "verl_ext.entropy_control.entropic_ki": "0.01"}),
}  # fmt: skip

#: settings every recipe of a family shares
FAMILY = {
    "gsm8k": {"trainer.nnodes": "1", "reward.reward_manager.name": "naive", "data.train_batch_size": "256",
              "actor_rollout_ref.rollout.tensor_model_parallel_size": "1"},
    "dapo": {"trainer.nnodes": "4", "reward.reward_manager.name": "dapo", "algorithm.filter_groups.enable": "True",
             "algorithm.filter_groups.metric": "acc", "algorithm.filter_groups.max_num_gen_batches": "10",
             "reward.reward_kwargs.overlong_buffer_cfg.enable": "True",
             "reward.reward_kwargs.overlong_buffer_cfg.len": "4096", "reward.reward_kwargs.max_resp_len": "8192",
             "data.max_response_length": "8192", PREFIX + "loss_agg_mode": "token-mean", PREFIX + "clip_ratio_c": "10.0"},
}  # fmt: skip
COMMON = {
    "actor_rollout_ref.rollout.name": "vllm",
    PREFIX + "strategy": "fsdp2",
    PREFIX + "use_dynamic_bsz": "True",
    "trainer.n_gpus_per_node": "8",
    "trainer.logger": "['console','wandb']",
    "algorithm.adv_estimator": "grpo",
}


def base_env(tmp_path: Path) -> dict[str, str]:
    """The test process environment without any recipe variable, with HOME in tmp_path (no wandb login)."""
    env = dict(os.environ)
    for name in ("MODEL_PATH", "DATA_DIR", "TRAIN_FILE", "VAL_FILE", "CKPTS_DIR", "NNODES", "GPUS_PER_NODE",
                 "PROJECT_NAME", "EXP_NAME", "GEN_TP", "SP_SIZE", "OFFLOAD", "LOGGERS", "DRY_RUN", "PRINT_CMD",
                 "WANDB_API_KEY", "WANDB_MODE", "LOSS", "SMOKE_DIR", "NETRC", "COV_RATIO", "WORK_DIR", "STEPS",
                 "RESPONSE_LENGTH", "PROMPTS", "N", "LR", "SEED", "ASSETS", "RAY_ADDRESS", "VERL_PLATFORM",
                 "VERL_FILE_LOGGER_PATH", "MAX_PROMPT_LENGTH", "MAX_RESPONSE_LENGTH", "OVERLONG_BUFFER",
                 "MAX_NUM_GEN_BATCHES", "SCALE", "SCALE_DIR", "VAL_N", "FAMILY", "PROTOCOL", "CKPT",
                 "EVAL_DIR", "ENTROPY_TARGET", "MODEL"):  # fmt: skip
        env.pop(name, None)
    env["HOME"] = str(tmp_path)
    env["PYTHON"] = sys.executable
    return env


def run_script(path: Path, *args: str, env: dict[str, str], timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(path), *args], capture_output=True, text=True, env=env, timeout=timeout)


def command(path: Path, *args: str, env: dict[str, str]) -> list[str]:
    """The exact command a script would run (PRINT_CMD=1)."""
    res = run_script(path, *args, env={**env, "PRINT_CMD": "1"})
    assert res.returncode == 0, res.stderr
    return shlex.split(res.stdout)


def effective(cmd: list[str]) -> dict[str, str]:
    """Override key -> value as Hydra applies them (the last one wins; +/++ prefixes dropped)."""
    values = {}
    for arg in cmd[3:]:
        key, _, value = arg.partition("=")
        values[key.lstrip("+")] = value
    return values


def test_recipe_set_and_structure():
    scripts = sorted(p.stem for p in RECIPE_DIR.glob("*.sh") if p.name != "common.sh")
    assert scripts == sorted([*RECIPES, "cpu_tiny", "eval"])
    for name in scripts:
        text = (RECIPE_DIR / f"{name}.sh").read_text()
        assert "set -euo pipefail" in text and 'source "$(dirname "${BASH_SOURCE[0]}")/common.sh"' in text
        assert text.rstrip().endswith('recipe_run "$@"')
        if name != "eval":  # the evaluation script holds its protocols; the training recipes only pick settings
            assert len(text.splitlines()) < 30, f"{name}: shared settings belong in recipe/common.sh"
    for path in [*RECIPE_DIR.glob("*.sh"), SMOKE]:
        res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert res.returncode == 0, f"{path}: {res.stderr}"


def composed(cmd: list[str]):
    """The config ``python -m verl_ext.main_ppo`` composes from the command's overrides (Hydra, in-process)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="verl_ext.configs", version_base=None):
            return compose(config_name="verl_ext_trainer", overrides=cmd[3:])
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_command(name, tmp_path):
    """The config each recipe composes holds the papers' settings for its loss and family (read from the composed
    config, typed, not from the command's text); the paths follow the environment."""
    import yaml
    from omegaconf import OmegaConf

    family, settings = RECIPES[name]
    cmd = command(RECIPE_DIR / f"{name}.sh", env=base_env(tmp_path))
    assert cmd[:3] == [sys.executable, "-m", "verl_ext.main_ppo"]
    config = composed(cmd)
    for key, value in {**COMMON, **FAMILY[family], **settings}.items():
        got = OmegaConf.select(config, key, default="<missing>")
        got = OmegaConf.to_container(got) if OmegaConf.is_config(got) else got
        assert got == yaml.safe_load(value), f"{name}: {key}={got!r}, expected {value!r}"
    values = effective(cmd)
    assert "verl_ext.dry_run" not in values
    assert values["trainer.experiment_name"] == name.replace("_", "-")
    assert values["trainer.default_local_dir"] == f"{tmp_path}/ckpts/verl_ext_{family}/{name.replace('_', '-')}"
    assert values["trainer.validation_data_dir"] == values["trainer.default_local_dir"] + "/validation"
    val_files = values["data.val_files"]
    if family == "dapo":
        assert val_files == f"['{tmp_path}/data/verl_ext/aime-2024.parquet','{tmp_path}/data/verl_ext/aime-2025.parquet']"
    else:
        assert val_files == f"['{tmp_path}/data/verl_ext/gsm8k-test.parquet']"


def test_environment_and_arguments_reach_the_command(tmp_path):
    env = {**base_env(tmp_path), "MODEL_PATH": "/m/qwen", "TRAIN_FILE": "/d/train.parquet",
           "VAL_FILE": "/d/a.parquet,/d/b.parquet", "CKPTS_DIR": "/c/run", "NNODES": "2", "GPUS_PER_NODE": "4",
           "PROJECT_NAME": "proj", "EXP_NAME": "exp", "GEN_TP": "4", "OFFLOAD": "1", "LOGGERS": "console"}  # fmt: skip
    cmd = command(RECIPE_DIR / "dapo_grpo_erc.sh", "trainer.total_training_steps=5", LOSS + "entropy_mask_low=0.9", env=env)
    values = effective(cmd)
    assert cmd[-2:] == ["trainer.total_training_steps=5", LOSS + "entropy_mask_low=0.9"]  # "$@" last: it wins
    expected = {
        "actor_rollout_ref.model.path": "/m/qwen", "data.train_files": "['/d/train.parquet']",
        "data.val_files": "['/d/a.parquet','/d/b.parquet']", "trainer.default_local_dir": "/c/run",
        "trainer.nnodes": "2", "trainer.n_gpus_per_node": "4", "trainer.project_name": "proj",
        "trainer.experiment_name": "exp", "actor_rollout_ref.rollout.tensor_model_parallel_size": "4",
        PREFIX + "fsdp_config.param_offload": "True", "trainer.logger": "['console']",
        "trainer.total_training_steps": "5", LOSS + "entropy_mask_low": "0.9",
    }  # fmt: skip
    for key, value in expected.items():
        assert values[key] == value, key
    assert "ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE" not in values  # no wandb logger
    dry = command(RECIPE_DIR / "dapo_grpo_erc.sh", "trainer.total_training_steps=5", env={**env, "DRY_RUN": "1"})
    assert dry == [*cmd[:-1], "verl_ext.dry_run=true"]  # DRY_RUN=1: the same command plus the dry-run flag


def test_lengths_and_the_overlong_buffer_follow_the_environment(tmp_path):
    """Shrinking the response length shrinks DAPO's overlong buffer (half of it unless OVERLONG_BUFFER is set) and
    the token budgets with it: a buffer left at 4096 of a 512-token response would never penalise anything."""
    env = {**base_env(tmp_path), "MAX_PROMPT_LENGTH": "128", "MAX_RESPONSE_LENGTH": "512"}
    values = effective(command(RECIPE_DIR / "dapo_clip_cov.sh", env=env))
    assert (values["data.max_prompt_length"], values["data.max_response_length"]) == ("128", "512")
    assert values["reward.reward_kwargs.max_resp_len"] == "512"
    assert values["reward.reward_kwargs.overlong_buffer_cfg.len"] == "256"
    assert values[PREFIX + "ppo_max_token_len_per_gpu"] == str(2 * 640)
    assert values["actor_rollout_ref.rollout.max_num_batched_tokens"] == "640"
    values = effective(command(RECIPE_DIR / "dapo_clip_cov.sh", env={**env, "OVERLONG_BUFFER": "100"}))
    assert values["reward.reward_kwargs.overlong_buffer_cfg.len"] == "100"
    values = effective(command(RECIPE_DIR / "gsm8k_grpo_erc.sh", env=env))
    assert (values["data.max_prompt_length"], values["data.max_response_length"]) == ("128", "512")


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_scale_cpu_changes_sizes_only_and_says_so(name, tmp_path):
    """SCALE=cpu: the recipe's own command with size overrides inserted before the script's arguments (which still
    win); every key the recipe sets that SCALE=cpu does not list keeps the recipe's value."""
    env = base_env(tmp_path)
    gpu = command(RECIPE_DIR / f"{name}.sh", "trainer.total_training_steps=9", env=env)
    res = run_script(RECIPE_DIR / f"{name}.sh", "trainer.total_training_steps=9",
                     env={**env, "SCALE": "cpu", "SCALE_DIR": str(tmp_path / "s"), "PRINT_CMD": "1"})
    assert res.returncode == 0, res.stderr
    assert "SCALE=cpu: CPU mode (VERL_PLATFORM=cpu), 1 node x 2 training processes" in res.stderr
    cpu = shlex.split(res.stdout)
    assert cpu[-1] == "trainer.total_training_steps=9"  # the user's override is still last
    sizes = {"data.train_batch_size", PREFIX + "ppo_mini_batch_size", "actor_rollout_ref.rollout.n",
             "actor_rollout_ref.rollout.val_kwargs.n", PREFIX + "ppo_max_token_len_per_gpu",
             "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
             "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", "actor_rollout_ref.rollout.max_num_batched_tokens",
             PREFIX + "optim.lr", PREFIX + "optim.lr_warmup_steps", "trainer.test_freq", "data.dataloader_num_workers",
             "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH", "trainer.nnodes", "trainer.n_gpus_per_node",
             "actor_rollout_ref.model.path", "data.train_files", "data.val_files", "trainer.default_local_dir",
             "trainer.validation_data_dir",
             "data.max_prompt_length", "data.max_response_length", "reward.reward_kwargs.max_resp_len",
             "reward.reward_kwargs.overlong_buffer_cfg.len", "trainer.logger",
             "ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE",
             LOSS + "clip_cov_ratio", LOSS + "kl_cov_ratio"}  # fmt: skip
    gpu_values, cpu_values = effective(gpu), effective(cpu)
    changed = {key for key in gpu_values.keys() | cpu_values.keys() if gpu_values.get(key) != cpu_values.get(key)}
    assert changed <= sizes, sorted(changed - sizes)
    assert cpu_values["trainer.n_gpus_per_node"] == "2" and cpu_values["data.train_batch_size"] == "4"
    assert cpu_values[PREFIX + "use_dynamic_bsz"] == "True"
    # vLLM's tensor parallelism as on the cluster: DAPO's 2 (one server over both processes), GSM8K's 1
    tp = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    assert cpu_values[tp] == gpu_values[tp] == ("2" if name.startswith("dapo") else "1")


def test_scale_values_are_checked(tmp_path):
    env = {**base_env(tmp_path), "PRINT_CMD": "1"}
    res = run_script(RECIPE_DIR / "dapo_kl_cov.sh", env={**env, "SCALE": "tpu"})
    assert res.returncode == 2 and "SCALE='tpu' is invalid: allowed gpu" in res.stderr
    res = run_script(RECIPE_DIR / "cpu_tiny.sh", env={**env, "SCALE": "cpu"})
    assert res.returncode == 2 and "cpu_tiny.sh always runs in CPU mode" in res.stderr
    res = run_script(RECIPE_DIR / "dapo_kl_cov.sh", env={**env, "SCALE": "cpu", "PROMPTS": "3"})
    assert res.returncode == 2 and "PROMPTS=3 x N=4 is invalid for 2 training processes" in res.stderr
    res = run_script(RECIPE_DIR / "dapo_kl_cov.sh", env={**env, "SCALE": "cpu", "MODEL": "qwen"})
    assert res.returncode == 2 and "MODEL='qwen' is invalid: allowed tiny or smollm2" in res.stderr
    res = run_script(RECIPE_DIR / "dapo_kl_cov.sh", env={**env, "MODEL": "smollm2"})
    assert res.returncode == 2 and "MODEL=smollm2 is for SCALE=cpu: on a GPU cluster set MODEL_PATH" in res.stderr
    res = run_script(RECIPE_DIR / "dapo_kl_cov.sh", env={**env, "SCALE": "cpu", "MODEL": "smollm2", "GEN_TP": "2"})
    assert res.returncode == 2 and "GEN_TP='2' is invalid with MODEL=smollm2: allowed 1" in res.stderr


def test_scale_cpu_smollm2_runs_the_dapo_recipe_on_the_real_model_with_its_sizes(tmp_path):
    """MODEL=smollm2 changes the model, the data folder, the lengths, the learning rate and DAPO's vLLM TP (2 -> 1,
    printed); everything else is the recipe's."""
    env = {**base_env(tmp_path), "PRINT_CMD": "1", "SCALE": "cpu", "MODEL": "smollm2", "SCALE_DIR": str(tmp_path / "s")}
    res = run_script(RECIPE_DIR / "dapo_kl_cov.sh", env=env)
    assert res.returncode == 0, res.stderr
    args = effective(shlex.split(res.stdout))
    assert args["actor_rollout_ref.model.path"] == str(tmp_path / "s" / "smollm2" / "model")
    assert args["data.train_files"] == f"['{tmp_path / 's' / 'smollm2' / 'data' / 'dapo-math-17k.parquet'}']"
    assert (args["data.max_prompt_length"], args["data.max_response_length"]) == ("160", "64")
    assert args["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "1"
    assert args["actor_rollout_ref.actor.optim.lr"] == "1e-5"
    assert args["algorithm.filter_groups.enable"] == "True"  # DAPO's structure unchanged
    assert "MODEL=smollm2: " in res.stderr and "vLLM TP 1" in res.stderr


def test_wandb_goes_offline_without_a_key(tmp_path):
    key = "ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE"
    res = run_script(RECIPE_DIR / "gsm8k_grpo_vanilla.sh", env={**base_env(tmp_path), "PRINT_CMD": "1"})
    assert effective(shlex.split(res.stdout))[key] == "offline"
    assert "wandb logs offline" in res.stderr
    cmd = command(RECIPE_DIR / "gsm8k_grpo_vanilla.sh", env={**base_env(tmp_path), "WANDB_API_KEY": "k-123"})
    assert key not in effective(cmd) and not any("k-123" in arg for arg in cmd)  # the key never lands in argv
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k-456\n")
    assert key not in effective(command(RECIPE_DIR / "gsm8k_grpo_vanilla.sh", env=base_env(tmp_path)))


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("NNODES", "0", "NNODES='0' is invalid: allowed an integer >= 1"),
        ("GPUS_PER_NODE", "eight", "GPUS_PER_NODE='eight' is invalid"),
        ("GEN_TP", "3", "GEN_TP=3 is invalid: it must divide GPUS_PER_NODE=8"),
        ("OFFLOAD", "yes", "OFFLOAD='yes' is invalid: allowed 0 or 1"),
        ("DRY_RUN", "true", "DRY_RUN='true' is invalid: allowed 0 or 1"),
        ("LOGGERS", "console,wandbb", "LOGGERS entry 'wandbb' is invalid: allowed console, wandb"),
        ("VAL_FILE", "/d/it's.parquet", "contains a quote"),
        ("MAX_RESPONSE_LENGTH", "1k", "MAX_RESPONSE_LENGTH='1k' is invalid: allowed an integer >= 2"),
        ("OVERLONG_BUFFER", "8192", "OVERLONG_BUFFER=8192 is invalid: allowed 1 <= OVERLONG_BUFFER < MAX_RESPONSE_LENGTH=8192"),
        ("MAX_NUM_GEN_BATCHES", "0", "MAX_NUM_GEN_BATCHES='0' is invalid: allowed an integer >= 1"),
    ],
)
def test_bad_environment_fails_naming_the_variable(variable, value, message, tmp_path):
    res = run_script(RECIPE_DIR / "dapo_kl_cov.sh", env={**base_env(tmp_path), variable: value, "PRINT_CMD": "1"})
    assert res.returncode == 2
    assert message in res.stderr
    assert res.stdout == ""


def test_gpu_smoke_command(tmp_path):
    env = {**base_env(tmp_path), "SMOKE_DIR": str(tmp_path / "smoke"), "LOSS": "kl_cov"}
    values = effective(command(SMOKE, "trainer.val_before_train=False", env=env))
    expected = {
        "trainer.total_training_steps": "2", "trainer.save_freq": "2", "trainer.test_freq": "2",
        "trainer.n_gpus_per_node": "1", "actor_rollout_ref.rollout.name": "vllm", PREFIX + "strategy": "fsdp2",
        LOSS + "loss_mode": "kl_cov", "trainer.default_local_dir": f"{tmp_path}/smoke/ckpts",
        "actor_rollout_ref.model.path": f"{tmp_path}/smoke/tiny_model", "trainer.val_before_train": "False",
    }  # fmt: skip
    for key, value in expected.items():
        assert values[key] == value, key
    res = run_script(SMOKE, env={**env, "LOSS": "ppo"})
    assert res.returncode == 2 and "LOSS='ppo' is invalid: allowed vanilla clip_cov kl_cov grpo_erc gppo_erc" in res.stderr


EVAL = RECIPE_DIR / "eval.sh"
VAL_KWARGS = "actor_rollout_ref.rollout.val_kwargs."


@pytest.mark.parametrize(
    ("protocol", "sampling"),
    [("erc", ("True", "0.6", "0.95", "32")), ("dapo", ("True", "1.0", "0.7", "32")), ("greedy", ("False", "0", "1.0", "1"))],
)
@pytest.mark.parametrize("family", ["dapo", "gsm8k"])
def test_eval_command_is_the_family_recipe_validating_a_checkpoint_with_the_protocol(protocol, sampling, family, tmp_path):
    ckpt = tmp_path / "ckpts" / "run" / "global_step_40"
    env = {**base_env(tmp_path), "FAMILY": family, "PROTOCOL": protocol, "CKPT": str(ckpt)}
    values = effective(command(EVAL, env=env))
    for key, value in {**COMMON, **FAMILY[family]}.items():  # the run's own family settings, kept
        if not key.startswith(VAL_KWARGS):
            assert values.get(key) == value, f"{key}={values.get(key)!r}, expected {value!r}"
    expected = {
        "trainer.val_only": "True", "trainer.val_before_train": "True", "trainer.resume_mode": "resume_path",
        "trainer.resume_from_path": str(ckpt), "reward.custom_reward_function.path": "pkg://verl_ext.evaluation.scoring",
        "trainer.validation_data_dir": f"{ckpt.parent}/eval-{protocol}",
        **dict(zip([VAL_KWARGS + k for k in ("do_sample", "temperature", "top_p", "n")], sampling)),
    }  # fmt: skip
    for key, value in expected.items():
        assert values.get(key) == value, f"{key}={values.get(key)!r}, expected {value!r}"
    model = effective(command(EVAL, env={**env, "CKPT": "", "PROTOCOL": "custom"}))
    recipe = effective(command(RECIPE_DIR / f"{family}{'_baseline' if family == 'dapo' else '_grpo_vanilla'}.sh", env=env))
    assert model["trainer.resume_mode"] == "disable" and "trainer.resume_from_path" not in model
    assert model["trainer.validation_data_dir"] == f"{tmp_path}/ckpts/verl_ext_{family}/eval-{family}-custom"
    sampling = {k: v for k, v in model.items() if k.startswith(VAL_KWARGS)}
    assert sampling == {k: v for k, v in recipe.items() if k.startswith(VAL_KWARGS)}  # custom: the family's own


def test_eval_at_cpu_scale_samples_val_n_except_greedy(tmp_path):
    env = {**base_env(tmp_path), "SCALE": "cpu", "SCALE_DIR": str(tmp_path / "s"), "ASSETS": "0", "VAL_N": "8"}
    assert effective(command(EVAL, env={**env, "PROTOCOL": "erc"}))[VAL_KWARGS + "n"] == "8"
    assert effective(command(EVAL, env={**env, "PROTOCOL": "greedy"}))[VAL_KWARGS + "n"] == "1"


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"PROTOCOL": "avg32"}, "PROTOCOL='avg32' is invalid: allowed erc (n 32, T 0.6, top-p 0.95), dapo"),
        ({"FAMILY": "math"}, "FAMILY='math' is invalid: allowed dapo (AIME 2024 + 2025) or gsm8k"),
        ({"CKPT": "/c/run/step_3"}, "CKPT='/c/run/step_3' is invalid: allowed a checkpoint folder named global_step_<N>"),
    ],
)
def test_eval_rejects_bad_variables(variables, message, tmp_path):
    res = run_script(EVAL, env={**base_env(tmp_path), **variables})
    assert res.returncode == 2 and message in res.stderr, res.stderr


def test_eval_refuses_a_folder_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "global_step_3").mkdir()
    res = run_script(EVAL, env={**base_env(tmp_path), "CKPT": str(tmp_path / "global_step_3")})
    assert res.returncode == 2 and "has no actor/ folder: not a verl checkpoint" in res.stderr


# ------------------------------------------------------------------------------------------------ DRY_RUN=1

HAS_MAIN = importlib.util.find_spec("verl_ext.main_ppo") is not None
needs_main = pytest.mark.skipif(not HAS_MAIN, reason="verl_ext.main_ppo (the dry-run entry point) is not importable yet")

#: (script, extra override, key the error must name); None: the dry run must pass
DRY_RUNS: dict[str, tuple[Path, tuple[str, ...], str | None]] = {
    **{name: (RECIPE_DIR / f"{name}.sh", (), None) for name in RECIPES},
    "gpu_smoke": (SMOKE, (), None),
    "eval": (EVAL, (), None),
    "bad_value": (RECIPE_DIR / "gsm8k_grpo_erc.sh", (LOSS + "entropy_mask_low=1.5",), "entropy_mask_low"),
    "bad_key": (RECIPE_DIR / "dapo_kl_cov.sh", (LOSS + "kl_cov_ration=0.002",), "kl_cov_ration"),
}


def write_dry_run_inputs(root: Path) -> dict[str, str]:
    """A tiny local model and one-row parquet files under every default data name: real inputs, no hub."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from verl_ext.testbed.tiny_model import build_tiny_model

    data = root / "data"
    data.mkdir()
    for name, source in (("gsm8k-train", "openai/gsm8k"), ("gsm8k-test", "openai/gsm8k"),
                         ("dapo-math-17k", "math_dapo"), ("aime-2024", "aime2024"), ("aime-2025", "aime2025")):  # fmt: skip
        row = {"data_source": source, "prompt": [{"role": "user", "content": "what is 1 plus 1 ?"}], "ability": "math",
               "reward_model": {"style": "rule", "ground_truth": "2"}, "extra_info": {"split": "x", "index": 0}}  # fmt: skip
        pq.write_table(pa.Table.from_pylist([row]), data / f"{name}.parquet")
    return {"MODEL_PATH": build_tiny_model(root / "model"), "DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory):
    """Start every DRY_RUN=1 run at once (each imports verl: ~10 s of CPU) and hand out futures."""
    if not HAS_MAIN:
        yield {}
        return
    home = tmp_path_factory.mktemp("dry_run_home")
    inputs = write_dry_run_inputs(home)
    pool = ThreadPoolExecutor(max_workers=3)
    futures = {}
    for name, (path, args, _key) in DRY_RUNS.items():
        env = {**base_env(home), **inputs, "DRY_RUN": "1", "SMOKE_DIR": str(home / f"smoke_{name}")}
        if path == SMOKE:
            env.pop("MODEL_PATH")  # the smoke script builds its own tiny model
        futures[name] = pool.submit(run_script, path, *args, env=env, timeout=600)
    yield futures
    pool.shutdown(wait=True)


@needs_main
@pytest.mark.parametrize("name", sorted(DRY_RUNS))
def test_dry_run(name, dry_runs):
    res = dry_runs[name].result()
    output = res.stdout + res.stderr
    key = DRY_RUNS[name][2]
    if key is None:
        assert res.returncode == 0, output[-4000:]
    else:
        assert res.returncode != 0, output[-4000:]
        assert key in res.stderr, res.stderr[-4000:]


# ----------------------------------------------------------------------------------------------------------
# the CPU recipe (recipe/cpu_tiny.sh)
# ----------------------------------------------------------------------------------------------------------

CPU_RECIPE = RECIPE_DIR / "cpu_tiny.sh"


def test_cpu_recipe_trains_the_real_model_with_model_smollm2(tmp_path):
    """MODEL=smollm2: the real model's folder, GSM8K-format word problems scored by verl's own gsm8k scorer (no custom
    reward function), its lengths and sizes; MODEL=tiny is today's toy; anything else is refused by name."""
    env = {**base_env(tmp_path), "MODEL": "smollm2", "WORK_DIR": str(tmp_path / "w")}
    values = effective(command(CPU_RECIPE, env=env))
    real = tmp_path / "w" / "smollm2"
    assert values["actor_rollout_ref.model.path"] == str(real / "model")
    assert values["data.train_files"] == f"['{real / 'data' / 'gsm8k-train.parquet'}']"
    assert values["data.val_files"] == f"['{real / 'data' / 'gsm8k-test.parquet'}']"
    assert not any(key.startswith("reward.custom_reward_function") for key in values)
    assert (values["data.max_prompt_length"], values["data.max_response_length"]) == ("160", "64")
    assert values["actor_rollout_ref.rollout.max_model_len"] == "224"
    assert (values["data.train_batch_size"], values["actor_rollout_ref.rollout.n"]) == ("4", "4")
    assert values["actor_rollout_ref.actor.optim.lr"] == "1e-5"
    # the variables still win over the model's defaults
    values = effective(command(CPU_RECIPE, env={**env, "PROMPTS": "8", "RESPONSE_LENGTH": "32"}))
    assert (values["data.train_batch_size"], values["data.max_response_length"]) == ("8", "32")
    tiny = effective(command(CPU_RECIPE, env={**env, "MODEL": "tiny"}))
    assert tiny["actor_rollout_ref.model.path"] == str(tmp_path / "w" / "model")
    assert tiny["reward.custom_reward_function.path"] == "pkg://verl_ext.testbed.task"
    res = run_script(CPU_RECIPE, env={**env, "MODEL": "qwen", "PRINT_CMD": "1"})
    assert res.returncode == 2 and "MODEL='qwen' is invalid: allowed tiny" in res.stderr


@pytest.mark.parametrize("loss", ["vanilla", "clip_cov", "kl_cov", "grpo_erc", "gppo_erc"])
def test_cpu_recipe_command_per_loss(loss, tmp_path):
    """LOSS picks the loss with the papers' settings (recipe_loss), the selection ratio scaled to small batches."""
    values = effective(command(CPU_RECIPE, env={**base_env(tmp_path), "LOSS": loss, "WORK_DIR": str(tmp_path / "w")}))
    assert values[LOSS + "loss_mode"] == loss
    assert values["algorithm.adv_estimator"] == "grpo" and values["actor_rollout_ref.model.path"] == f"{tmp_path}/w/model"
    assert values["reward.custom_reward_function.path"] == "pkg://verl_ext.testbed.task"
    assert values["trainer.logger"] == "['console','file']" and values["trainer.experiment_name"] == f"cpu-tiny-{loss}"
    assert values["ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"] == f"{tmp_path}/w/cpu-tiny-{loss}.jsonl"
    expected = {"clip_cov": {LOSS + "clip_cov_ratio": "0.02", PREFIX + "clip_ratio_low": "1.0"},
                "kl_cov": {LOSS + "kl_cov_ratio": "0.02", LOSS + "ppo_kl_coef": "1.0"},
                "grpo_erc": {LOSS + "entropy_mask_low": "0.95"}, "gppo_erc": {LOSS + "gppo_beta1": "1.0"}}.get(loss, {})
    for key, value in expected.items():
        assert values[key] == value, key
    # two mini-batches of 8 prompts, micro-batches of the whole mini-batch (8 x 8 responses), one process
    assert values[PREFIX + "ppo_mini_batch_size"] == "8" and values[PREFIX + "ppo_micro_batch_size_per_gpu"] == "64"
    assert "ray_kwargs.ray_init.num_gpus" not in values  # the local cluster's slots come from platform/cpu.yaml


def test_scale_cpu_recipe_joining_a_cluster(tmp_path):
    """SCALE=cpu with RAY_ADDRESS: CPU mode's local-cluster settings (which Ray rejects when joining, and
    verl_ext's validation names) are nulled; without RAY_ADDRESS they stay unset on the command line."""
    env = {**base_env(tmp_path), "SCALE": "cpu", "SCALE_DIR": str(tmp_path / "s")}
    local = effective(command(RECIPE_DIR / "dapo_clip_cov.sh", env=env))
    assert not {"ray_kwargs.ray_init.num_cpus", "ray_kwargs.ray_init.num_gpus"} & local.keys()
    joined = effective(command(RECIPE_DIR / "dapo_clip_cov.sh", env={**env, "RAY_ADDRESS": "127.0.0.1:6390"}))
    # every key verl_ext's validation refuses while joining (a key added there must be nulled here too)
    from verl_ext.checks.validation import LOCAL_RAY_ONLY

    for key in {"num_cpus", "num_gpus", "include_dashboard", *LOCAL_RAY_ONLY}:
        assert joined[f"ray_kwargs.ray_init.{key}"] == "null", key


def test_cpu_recipe_joining_a_cluster_and_two_nodes(tmp_path):
    env = {**base_env(tmp_path), "RAY_ADDRESS": "127.0.0.1:6390", "NNODES": "2", "WORK_DIR": str(tmp_path)}
    values = effective(command(CPU_RECIPE, env=env))
    assert values["ray_kwargs.ray_init.num_gpus"] == "null" and values["ray_kwargs.ray_init.num_cpus"] == "null"
    assert values["trainer.nnodes"] == "2" and values[PREFIX + "ppo_micro_batch_size_per_gpu"] == "32"


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"LOSS": "bogus"}, "unknown loss 'bogus'; allowed vanilla, clip_cov, kl_cov, grpo_erc, gppo_erc"),
        ({"PROMPTS": "3"}, "PROMPTS=3 is invalid: allowed an even number"),
        ({"STEPS": "0"}, "STEPS='0' is invalid: allowed an integer >= 1"),
        ({"LR": "fast"}, "LR='fast' is invalid"),
        ({"NNODES": "3", "PROMPTS": "4", "N": "4"}, "is invalid for 3 training processes"),
    ],
)
def test_cpu_recipe_rejects_bad_variables(tmp_path, variables, message):
    res = run_script(CPU_RECIPE, env={**base_env(tmp_path), "PRINT_CMD": "1", "WORK_DIR": str(tmp_path), **variables})
    assert res.returncode == 2 and message in res.stderr, res.stderr


def test_cpu_recipe_dry_run_builds_its_assets_and_validates(tmp_path):
    """DRY_RUN=1: the model and data are built locally, the CPU-mode config composes and validates."""
    env = {**base_env(tmp_path), "DRY_RUN": "1", "WORK_DIR": str(tmp_path / "w"), "LOSS": "clip_cov"}
    res = run_script(CPU_RECIPE, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "platform  : CPU mode (VERL_PLATFORM=cpu" in res.stdout
    assert "loss      : clip_cov clip_cov_ratio=0.02" in res.stdout
    assert (tmp_path / "w" / "model" / "config.json").is_file() and (tmp_path / "w" / "train.parquet").is_file()


@pytest.mark.parametrize("script", ["dapo_skywork", "dapo_entropic"])
def test_entropy_target_must_be_a_positive_number(script, tmp_path):
    res = run_script(RECIPE_DIR / f"{script}.sh", env={**base_env(tmp_path), "PRINT_CMD": "1", "ENTROPY_TARGET": "high"})
    assert res.returncode == 2 and "ENTROPY_TARGET='high' is invalid: allowed a positive number" in res.stderr
    cmd = command(RECIPE_DIR / f"{script}.sh", env={**base_env(tmp_path), "ENTROPY_TARGET": "1.5"})
    assert effective(cmd)["verl_ext.entropy_control.target"] == "1.5"
