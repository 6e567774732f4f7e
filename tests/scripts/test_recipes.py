"""Launch scripts (recipe/*.sh, scripts/gpu_smoke.sh) and the Hydra compositions they launch (recipe/*.yaml): the
command each builds (PRINT_CMD=1), what that command composes with the environment's variables (through the entry
point's own composition, in-process, nothing started), each bad variable's exit 2 naming it, and DRY_RUN=1 through
``python -m verl_ext.main_ppo`` (composition + validation of the real command; a wrong override fails naming the key).
What each recipe launches in full is pinned in test_recipe_pins.py; here, how it follows its inputs."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf
from recipe_pins import GPU_RECIPES, RECIPE_VARIABLES, compose_script

REPO = Path(__file__).resolve().parents[2]
RECIPE_DIR = REPO / "recipe"
CONFIGS = REPO / "configs"
SMOKE = REPO / "scripts" / "gpu_smoke.sh"
PREFIX = "actor_rollout_ref.actor."
LOSS = PREFIX + "policy_loss."
VAL_KWARGS = "actor_rollout_ref.rollout.val_kwargs."


def base_env(tmp_path: Path) -> dict[str, str]:
    """The test process environment without any recipe variable, with HOME in tmp_path (no wandb login)."""
    env = {k: v for k, v in os.environ.items() if k not in RECIPE_VARIABLES and not k.startswith(("VERL_", "RAY_"))}
    env["HOME"] = str(tmp_path)
    env["PYTHON"] = sys.executable
    return env


def run_script(path: Path, *args: str, env: dict[str, str], timeout: int = 60, cwd: Path | None = None):
    return subprocess.run(["bash", str(path), *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)


def config(name: str, tmp_path: Path, *args: str, **variables: str) -> dict[str, Any]:
    """What ``recipe/<name>.sh ARGS`` launches with ``variables``, resolved (HOME and the working folder in
    tmp_path)."""
    (tmp_path / "home").mkdir(exist_ok=True)
    resolve = lambda c: OmegaConf.to_container(c, resolve=True)  # noqa: E731
    return compose_script(name, variables, tmp_path, args=args, resolve=resolve)


def startup_error(name: str, tmp_path: Path, **variables: str) -> str:
    """The message the entry point's start-up gives for ``variables`` (RecipeStartError), or '' when it starts."""
    from verl_ext.checks.recipe_startup import RecipeStartError, resolve

    def check(composed):
        try:
            resolve(composed)
        except RecipeStartError as exc:
            return str(exc)
        return ""

    (tmp_path / "home").mkdir(exist_ok=True)
    return compose_script(name, variables, tmp_path, resolve=check)


def at(cfg: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        cfg = cfg[part]
    return cfg


def flat(cfg: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(cfg, dict):
        return {prefix: cfg}
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        out.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def group(path: str) -> dict[str, Any]:
    """A config group file's own keys (its `defaults` list dropped)."""
    data = yaml.safe_load((CONFIGS / path).read_text()) or {}
    data.pop("defaults", None)
    return data


def recipe_defaults(name: str) -> dict[str, str]:
    """The group choices recipe/<name>.yaml makes: group (as written, with its package) -> option."""
    out = {}
    for entry in yaml.safe_load((RECIPE_DIR / f"{name}.yaml").read_text())["defaults"]:
        if isinstance(entry, dict):
            (key, value), = entry.items()
            out[key.removeprefix("override ")] = value
    return out


# ------------------------------------------------------------------------------------------------ structure


def test_recipe_set_and_structure():
    """Each GPU recipe is a YAML composition and a launch script of a few lines; all shell code of recipe/ stays small."""
    scripts = sorted(p.stem for p in RECIPE_DIR.glob("*.sh") if p.name != "launch.sh")
    assert scripts == sorted([*GPU_RECIPES, "cpu_tiny", "eval"])
    assert sorted(p.stem for p in RECIPE_DIR.glob("*.yaml")) == scripts
    total = 0
    for path in RECIPE_DIR.glob("*.sh"):
        lines = [line for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
        total += len(lines)
        assert len(path.read_text().splitlines()) <= 80, path
        if path.name != "launch.sh":
            assert len(lines) <= 12, f"{path.name}: a recipe script only launches its composition"
            assert 'source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"' in path.read_text()
            assert path.read_text().rstrip().endswith(f'recipe_launch {path.stem} "$@"')
        res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert res.returncode == 0, f"{path}: {res.stderr}"
    assert total < 300, total


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_recipe_holds_its_groups_values(name, tmp_path):
    """The composed config carries every value of the groups the recipe selects (family, loss, the papers' actor and
    entropy-control presets), read from the group files themselves: a value lives in its group only."""
    choices = recipe_defaults(name)
    cfg = config(name, tmp_path)
    family = choices["family"]
    expected = {key: value for key, value in flat(group(f"family/{family}.yaml")).items()}
    loss = choices["policy_loss@actor_rollout_ref.actor.policy_loss"]
    expected.update({LOSS + key: value for key, value in group(f"policy_loss/{loss}.yaml").items()})
    for choice, package in (("loss_actor@actor_rollout_ref.actor", "actor_rollout_ref.actor"),
                            ("entropy_control@verl_ext.entropy_control", "verl_ext.entropy_control"),
                            ("kl_clip@actor_rollout_ref.actor", "actor_rollout_ref.actor")):  # fmt: skip
        if choice in choices:  # later groups win, as in the recipe's defaults list
            path = f"{choice.split('@')[0]}/{choices[choice]}.yaml"
            expected.update({f"{package}.{key}": value for key, value in flat(group(path)).items()})
    for key, value in expected.items():
        if "${" not in str(value):
            assert at(cfg, key) == value, f"{name}: {key}"
    assert at(cfg, "trainer.experiment_name") == name.replace("_", "-")
    assert at(cfg, "trainer.default_local_dir") == f"{tmp_path}/home/ckpts/verl_ext_{family}/{name.replace('_', '-')}"
    assert at(cfg, "trainer.validation_data_dir") == at(cfg, "trainer.default_local_dir") + "/validation"
    data = f"{tmp_path}/home/data/verl_ext"
    want = [f"{data}/aime-2024.parquet", f"{data}/aime-2025.parquet"] if family == "dapo" else [f"{data}/gsm8k-test.parquet"]
    assert at(cfg, "data.val_files") == want
    assert at(cfg, "trainer.logger") == ["console", "wandb"]


def test_no_recipe_file_spells_out_a_papers_value():
    """The papers' values live in configs/ groups: no recipe YAML or script sets a loss key, a clip ratio or an
    entropy-control key itself, or writes a number of a paper's group."""
    import re

    numbers = set()
    for path in [*CONFIGS.glob("policy_loss/*.yaml"), *CONFIGS.glob("loss_actor/*.yaml"), *CONFIGS.glob("entropy_control/*.yaml"),
                 *CONFIGS.glob("eval_protocol/*.yaml"), *CONFIGS.glob("kl_clip/*.yaml")]:  # fmt: skip
        for value in flat(group(str(path.relative_to(CONFIGS)))).values():
            numbers |= {n for n in re.findall(r"\d+\.\d+(?:e-?\d+)?", str(value)) if float(n) not in (0.0, 1.0)}
    assert "0.95" in numbers and "0.0002" in numbers
    for path in [*RECIPE_DIR.glob("*.yaml"), *RECIPE_DIR.glob("*.sh")]:
        text = path.read_text()
        found = numbers & set(re.findall(r"\d+\.\d+(?:e-?\d+)?", text))
        assert not found, f"{path.name} spells out {sorted(found)}"
        for word in ("clip_cov_ratio", "kl_cov_ratio", "entropy_mask", "gppo_beta", "clip_ratio", "skywork_delta",
                     "entropic_k", "high_entropy_ratio", "entropy_adv_", "kl_clip_threshold"):  # fmt: skip
            assert word not in text.replace(f"# {word}", ""), f"{path.name} sets {word}"


# ------------------------------------------------------------------------------------------------ the environment


def test_environment_and_arguments_reach_the_config(tmp_path):
    env = {"MODEL_PATH": "/m/qwen", "TRAIN_FILE": "/d/train.parquet", "VAL_FILE": "/d/a.parquet,/d/b.parquet",
           "CKPTS_DIR": "/c/run", "NNODES": "2", "GPUS_PER_NODE": "4", "PROJECT_NAME": "proj", "EXP_NAME": "exp",
           "GEN_TP": "4", "OFFLOAD": "1", "LOGGERS": "console", "SP_SIZE": "2"}  # fmt: skip
    cfg = config("dapo_grpo_erc", tmp_path, "trainer.total_training_steps=5", LOSS + "entropy_mask_low=0.9", **env)
    expected = {
        "actor_rollout_ref.model.path": "/m/qwen", "data.train_files": ["/d/train.parquet"],
        "data.val_files": ["/d/a.parquet", "/d/b.parquet"], "trainer.default_local_dir": "/c/run",
        "trainer.validation_data_dir": "/c/run/validation", "trainer.nnodes": 2, "trainer.n_gpus_per_node": 4,
        "trainer.project_name": "proj", "trainer.experiment_name": "exp",
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 4, PREFIX + "fsdp_config.param_offload": True,
        PREFIX + "fsdp_config.optimizer_offload": True, "actor_rollout_ref.ref.fsdp_config.param_offload": True,
        PREFIX + "ulysses_sequence_parallel_size": 2, "trainer.logger": ["console"],
        "trainer.total_training_steps": 5, LOSS + "entropy_mask_low": 0.9,  # arguments win over the composition
    }  # fmt: skip
    for key, value in expected.items():
        assert at(cfg, key) == value, key


def test_print_cmd_and_dry_run_give_the_launch_command(tmp_path):
    env = {**base_env(tmp_path), "PRINT_CMD": "1"}
    res = run_script(RECIPE_DIR / "dapo_grpo_erc.sh", "trainer.total_training_steps=5", "a.b=c d", env=env)
    assert res.returncode == 0, res.stderr
    cmd = shlex.split(res.stdout)
    assert cmd == [sys.executable, "-m", "verl_ext.main_ppo", "--config-path", str(RECIPE_DIR), "--config-name",
                   "dapo_grpo_erc", "trainer.total_training_steps=5", "a.b=c d"]  # fmt: skip
    dry = shlex.split(run_script(RECIPE_DIR / "dapo_grpo_erc.sh", "x=1", env={**env, "DRY_RUN": "1"}).stdout)
    assert dry == [*cmd[:7], "x=1", "verl_ext.dry_run=true"]


def test_lengths_and_the_overlong_buffer_follow_the_environment(tmp_path):
    """Shrinking the response length shrinks DAPO's overlong buffer (half of it unless OVERLONG_BUFFER is set) and
    the token budgets with it: a buffer left at 4096 of a 512-token response would never penalise anything."""
    cfg = config("dapo_clip_cov", tmp_path, MAX_PROMPT_LENGTH="128", MAX_RESPONSE_LENGTH="512")
    assert (at(cfg, "data.max_prompt_length"), at(cfg, "data.max_response_length")) == (128, 512)
    assert at(cfg, "reward.reward_kwargs.max_resp_len") == 512
    assert at(cfg, "reward.reward_kwargs.overlong_buffer_cfg.len") == 256
    assert at(cfg, PREFIX + "ppo_max_token_len_per_gpu") == 2 * 640
    assert at(cfg, "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu") == 3 * 640
    assert at(cfg, "actor_rollout_ref.rollout.max_num_batched_tokens") == 640
    cfg = config("dapo_clip_cov", tmp_path, MAX_RESPONSE_LENGTH="512", OVERLONG_BUFFER="100")
    assert at(cfg, "reward.reward_kwargs.overlong_buffer_cfg.len") == 100
    cfg = config("gsm8k_grpo_erc", tmp_path, MAX_PROMPT_LENGTH="128", MAX_RESPONSE_LENGTH="512")
    assert (at(cfg, "data.max_prompt_length"), at(cfg, "data.max_response_length")) == (128, 512)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("NNODES", "0", "NNODES='0' is invalid: allowed an integer >= 1"),
        ("GPUS_PER_NODE", "eight", "GPUS_PER_NODE='eight' is invalid"),
        ("GEN_TP", "3", "GEN_TP=3 is invalid: it must divide GPUS_PER_NODE=8"),
        ("OFFLOAD", "yes", "OFFLOAD='yes' is invalid: allowed 0 or 1"),
        ("SP_SIZE", "0", "SP_SIZE='0' is invalid: allowed an integer >= 1"),
        ("LOGGERS", "console,wandbb", "LOGGERS entry 'wandbb' is invalid: allowed wandb, mlflow"),
        ("MODEL_PATH", "", "MODEL_PATH is empty"),
        ("MAX_RESPONSE_LENGTH", "1k", "MAX_RESPONSE_LENGTH='1k' is invalid: allowed an integer >= 2"),
        ("OVERLONG_BUFFER", "8192", "OVERLONG_BUFFER=8192 is invalid: allowed 1 <= OVERLONG_BUFFER < MAX_RESPONSE_LENGTH=8192"),
        ("MAX_NUM_GEN_BATCHES", "0", "MAX_NUM_GEN_BATCHES='0' is invalid: allowed an integer >= 1"),
        ("COV_RATIO", "-1", "COV_RATIO='-1' is invalid: allowed a positive number"),
    ],
)
def test_bad_environment_fails_naming_the_variable(variable, value, message, tmp_path):
    assert message in startup_error("dapo_kl_cov", tmp_path, **{variable: value})


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"SCALE": "tpu"}, "SCALE='tpu' is invalid: allowed gpu (the recipe as written) or cpu"),
        ({"MODEL": "smollm2"}, "MODEL=smollm2 is for SCALE=cpu: on a GPU cluster set MODEL_PATH"),
        ({"SCALE": "cpu", "MODEL": "qwen"}, "MODEL='qwen' is invalid: allowed tiny or smollm2"),
        ({"DRY_RUN": "true"}, "DRY_RUN='true' is invalid: allowed 0 or 1"),
        ({"PRINT_CMD": "yes"}, "PRINT_CMD='yes' is invalid: allowed 0 or 1"),
    ],
)
def test_the_launch_scripts_own_variables_are_checked(variables, message, tmp_path):
    res = run_script(RECIPE_DIR / "dapo_kl_cov.sh", env={**base_env(tmp_path), "PRINT_CMD": "1", **variables})
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert res.stdout == ""


def test_a_bad_variable_exits_2_through_the_entry_point(tmp_path):
    """The real launch (DRY_RUN=1, the entry point's start-up): one line naming the variable, exit 2, no traceback."""
    res = run_script(RECIPE_DIR / "dapo_kl_cov.sh", env={**base_env(tmp_path), "DRY_RUN": "1", "NNODES": "zero"},
                     timeout=300)  # fmt: skip
    assert res.returncode == 2, res.stderr[-3000:]
    assert "error: NNODES='zero' is invalid: allowed an integer >= 1" in res.stderr
    assert "Traceback" not in res.stderr


def test_wandb_goes_offline_without_a_key(tmp_path):
    from omegaconf import DictConfig

    from verl_ext.checks.recipe_startup import wandb_offline

    def run(environ: dict[str, str], loggers=("console", "wandb")) -> tuple[bool, DictConfig]:
        cfg = OmegaConf.create({"trainer": {"logger": list(loggers)}, "ray_kwargs": {"ray_init": {}}})
        return wandb_offline(cfg, environ), cfg

    env: dict[str, str] = {"HOME": str(tmp_path)}
    went, cfg = run(env)
    assert went and env["WANDB_MODE"] == "offline"
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE == "offline"  # and so in every Ray worker
    env = {"HOME": str(tmp_path), "WANDB_API_KEY": "k-123"}
    went, cfg = run(env)
    assert not went and "WANDB_MODE" not in env and "k-123" not in str(OmegaConf.to_container(cfg))  # never in config
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k-456\n")
    assert not run({"HOME": str(tmp_path)})[0]
    assert not run({"HOME": str(tmp_path / "x")}, loggers=("console",))[0]


def test_gpu_smoke_command(tmp_path):
    def effective(cmd: list[str]) -> dict[str, str]:
        return {arg.partition("=")[0].lstrip("+"): arg.partition("=")[2] for arg in cmd[3:]}

    env = {**base_env(tmp_path), "SMOKE_DIR": str(tmp_path / "smoke"), "LOSS": "kl_cov", "PRINT_CMD": "1"}
    res = run_script(SMOKE, "trainer.val_before_train=False", env=env)
    assert res.returncode == 0, res.stderr
    values = effective(shlex.split(res.stdout))
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


# ------------------------------------------------------------------------------------------------ SCALE=cpu

CPU_SIZES = {"data.train_batch_size", PREFIX + "ppo_mini_batch_size", "actor_rollout_ref.rollout.n",
             VAL_KWARGS + "n", PREFIX + "ppo_max_token_len_per_gpu",
             "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
             "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", "actor_rollout_ref.rollout.max_num_batched_tokens",
             PREFIX + "optim.lr", PREFIX + "optim.lr_warmup_steps", "trainer.test_freq", "data.dataloader_num_workers",
             "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH", "trainer.nnodes", "trainer.n_gpus_per_node",
             "actor_rollout_ref.model.path", "data.train_files", "data.val_files", "trainer.default_local_dir",
             "trainer.validation_data_dir", "data.max_prompt_length", "data.max_response_length",
             "reward.reward_kwargs.max_resp_len", "reward.reward_kwargs.overlong_buffer_cfg.len", "trainer.logger",
             "trainer.total_training_steps", LOSS + "clip_cov_ratio", LOSS + "kl_cov_ratio"}  # fmt: skip
"""What SCALE=cpu may change: sizes, paths, loggers, the step count (and, outside verl's config, verl_ext.recipe)."""


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_scale_cpu_changes_sizes_only(name, tmp_path):
    """Every key SCALE=cpu changes is a size, a path or the logger; the platform's CPU settings aside (they come from
    configs/platform/cpu.yaml, for any CPU-mode run), every other setting of the recipe runs as written."""
    gpu = flat(config(name, tmp_path, "trainer.save_freq=9"))
    cpu = flat(config(name, tmp_path, "trainer.save_freq=9", SCALE="cpu"))
    platform = set(flat(yaml.safe_load((CONFIGS / "platform" / "cpu.yaml").read_text())))
    raw = flat(compose_script(name, {}, tmp_path, resolve=lambda c: OmegaConf.to_container(c, resolve=False)))
    derived = {key for key, value in raw.items() if str(value).startswith("${") and "verl_ext." not in str(value)}
    changed = {key for key in gpu.keys() | cpu.keys() if gpu.get(key) != cpu.get(key)}
    # verl's own derived keys (${...} in verl's config, e.g. critic.ppo_mini_batch_size) follow their sources
    changed = {key for key in changed if not key.startswith("verl_ext.recipe.") and key not in platform | derived}
    assert changed <= CPU_SIZES, sorted(changed - CPU_SIZES)
    assert cpu["trainer.n_gpus_per_node"] == 2 and cpu["data.train_batch_size"] == 4 and cpu["trainer.save_freq"] == 9
    assert cpu[PREFIX + "use_dynamic_bsz"] is True
    # vLLM's tensor parallelism as on the cluster: DAPO's 2 (one server over both processes), GSM8K's 1
    tp = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    assert cpu[tp] == gpu[tp] == (2 if name.startswith("dapo") else 1)


def test_scale_cpu_prints_what_it_changes(tmp_path):
    """The start-up lines name the scale, the processes, the model and every key the scale's files set, with its value."""
    from verl_ext.checks.recipe_startup import resolve, scale_lines

    lines = compose_script("dapo_kl_cov", {"SCALE": "cpu", "PROMPTS": "8"}, tmp_path,
                           resolve=lambda c: scale_lines(resolve(c)))  # fmt: skip
    text = "\n".join(lines)
    assert text.startswith("SCALE=cpu: CPU mode (VERL_PLATFORM=cpu), 1 node x 2 training processes, MODEL=tiny: ")
    assert "data.train_batch_size=8 " in text and "actor_rollout_ref.actor.ppo_mini_batch_size=4 " in text
    assert "data.max_response_length=8" in text and "vLLM TP 2" in text and "COV_RATIO=0.1" in text


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"PROMPTS": "3"}, "PROMPTS=3 is invalid: allowed an even number (two mini-batches per step)"),
        ({"PROMPTS": "6", "N": "3"}, "PROMPTS=6 x N=3 is invalid for 2 training processes"),
        ({"MODEL": "smollm2", "GEN_TP": "2"}, "GEN_TP='2' is invalid with MODEL=smollm2: allowed 1"),
        ({"STEPS": "0"}, "STEPS='0' is invalid: allowed an integer >= 1"),
        ({"LR": "fast"}, "LR='fast' is invalid: allowed a positive number"),
        ({"VAL_N": "0"}, "VAL_N='0' is invalid: allowed an integer >= 1"),
        ({"ASSETS": "2"}, "ASSETS='2' is invalid: allowed 0 or 1"),
    ],
)
def test_scale_values_are_checked(variables, message, tmp_path):
    assert message in startup_error("dapo_kl_cov", tmp_path, SCALE="cpu", **variables)


def test_scale_cpu_smollm2_runs_the_dapo_recipe_on_the_real_model_with_its_sizes(tmp_path):
    """MODEL=smollm2 changes the model, the data folder, the lengths, the learning rate and DAPO's vLLM TP (2 -> 1);
    everything else is the recipe's."""
    cfg = config("dapo_kl_cov", tmp_path, SCALE="cpu", MODEL="smollm2", SCALE_DIR=str(tmp_path / "s"))
    real = tmp_path / "s" / "smollm2"
    assert at(cfg, "actor_rollout_ref.model.path") == str(real / "model")
    assert at(cfg, "data.train_files") == [str(real / "data" / "dapo-math-17k.parquet")]
    assert (at(cfg, "data.max_prompt_length"), at(cfg, "data.max_response_length")) == (160, 64)
    assert at(cfg, "actor_rollout_ref.rollout.tensor_model_parallel_size") == 1
    assert at(cfg, PREFIX + "optim.lr") == 1e-5
    assert at(cfg, "algorithm.filter_groups.enable") is True  # DAPO's structure unchanged
    assert at(cfg, "verl_ext.recipe") == {"scale": "cpu", "model": "smollm2", "scale_dir": str(tmp_path / "s"),
                                          "data_dir": str(real / "data"), "assets": True, "cov_ratio": 0.1}  # fmt: skip


def test_joining_a_cluster_nulls_the_local_clusters_settings(tmp_path, monkeypatch):
    """SCALE=cpu with RAY_ADDRESS: CPU mode's local-cluster settings (which Ray rejects when joining, and verl_ext's
    validation names) are nulled at start-up; without RAY_ADDRESS they stay."""
    from verl_ext.checks import recipe_startup
    from verl_ext.checks.validation import LOCAL_RAY_ONLY

    cfgs = {}
    for joined in (False, True):
        variables = {"SCALE": "cpu", "ASSETS": "0", **({"RAY_ADDRESS": "127.0.0.1:6390"} if joined else {})}

        def start(c):
            with monkeypatch.context() as m:  # the start-up's environment is the launch's
                m.setattr(recipe_startup, "ensure", lambda plan: [])
                return OmegaConf.to_container(recipe_startup.prepare(c))

        cfgs[joined] = compose_script("dapo_clip_cov", variables, tmp_path, resolve=start)
    assert at(cfgs[False], "ray_kwargs.ray_init.num_gpus") == 2
    for key in LOCAL_RAY_ONLY:  # every key verl_ext's validation refuses while joining
        assert at(cfgs[True], f"ray_kwargs.ray_init.{key}") is None, key


# ------------------------------------------------------------------------------------------------ eval

EVAL = RECIPE_DIR / "eval.sh"


@pytest.mark.parametrize("protocol", ["erc", "dapo", "greedy"])
@pytest.mark.parametrize("family", ["dapo", "gsm8k"])
def test_eval_is_the_family_recipe_validating_a_checkpoint_with_the_protocol(protocol, family, tmp_path):
    ckpt = tmp_path / "ckpts" / "run" / "global_step_40"
    (ckpt / "actor").mkdir(parents=True)
    cfg = config("eval", tmp_path, FAMILY=family, PROTOCOL=protocol, CKPT=str(ckpt))
    base = config(f"{family}_baseline" if family == "dapo" else "gsm8k_grpo_vanilla", tmp_path)
    for key, value in flat(base).items():  # the run's own family settings, kept (its names and paths aside)
        if value != at(base, "trainer.experiment_name") and not key.startswith(
                (VAL_KWARGS, "trainer.", "verl_ext.", "reward.custom_reward_function")):
            assert flat(cfg)[key] == value, key
    expected = {
        "trainer.val_only": True, "trainer.val_before_train": True, "trainer.resume_mode": "resume_path",
        "trainer.resume_from_path": str(ckpt), "reward.custom_reward_function.path": "pkg://verl_ext.evaluation.scoring",
        "trainer.validation_data_dir": f"{ckpt.parent}/eval-{protocol}",
    }  # fmt: skip
    expected.update({VAL_KWARGS + k: v for k, v in group(f"eval_protocol/{protocol}.yaml").items()})
    for key, value in expected.items():
        assert at(cfg, key) == value, key
    model = config("eval", tmp_path, FAMILY=family, PROTOCOL="custom")
    assert at(model, "trainer.resume_mode") == "disable" and at(model, "trainer.resume_from_path") is None
    assert at(model, "trainer.validation_data_dir") == f"{tmp_path}/home/ckpts/verl_ext_{family}/eval-{family}-custom"
    assert at(model, VAL_KWARGS[:-1]) == at(base, VAL_KWARGS[:-1])  # custom: the family's own sampling


def test_eval_at_cpu_scale_samples_val_n_except_greedy(tmp_path):
    env = {"SCALE": "cpu", "SCALE_DIR": str(tmp_path / "s"), "ASSETS": "0", "VAL_N": "8"}
    assert at(config("eval", tmp_path, PROTOCOL="erc", **env), VAL_KWARGS + "n") == 8
    assert at(config("eval", tmp_path, PROTOCOL="greedy", **env), VAL_KWARGS + "n") == 1


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"PROTOCOL": "avg32"}, "PROTOCOL='avg32' is invalid: allowed erc, dapo, greedy (configs/eval_protocol/"),
        ({"FAMILY": "math"}, "FAMILY='math' is invalid: allowed dapo (AIME 2024 + 2025) or gsm8k"),
    ],
)
def test_eval_rejects_bad_variables(variables, message, tmp_path):
    res = run_script(EVAL, env={**base_env(tmp_path), "PRINT_CMD": "1", **variables})
    assert res.returncode == 2 and message in res.stderr, res.stderr


def test_eval_refuses_a_folder_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "c" / "global_step_3").mkdir(parents=True)
    message = "CKPT='/c/run/step_3' is invalid: allowed a checkpoint folder named global_step_<N>"
    assert message in startup_error("eval", tmp_path, CKPT="/c/run/step_3")
    assert "has no actor/ folder: not a verl checkpoint" in startup_error("eval", tmp_path, CKPT=str(tmp_path / "c" / "global_step_3"))


# ------------------------------------------------------------------------------------------------ DRY_RUN=1

#: (script, extra override, key the error must name); None: the dry run must pass
DRY_RUNS: dict[str, tuple[Path, tuple[str, ...], str | None]] = {
    **{name: (RECIPE_DIR / f"{name}.sh", (), None) for name in GPU_RECIPES},
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
    reward function), its lengths and sizes; MODEL=tiny is the toy; anything else is refused by name."""
    w = str(tmp_path / "w")
    cfg = config("cpu_tiny", tmp_path, MODEL="smollm2", WORK_DIR=w)
    real = tmp_path / "w" / "smollm2"
    assert at(cfg, "actor_rollout_ref.model.path") == str(real / "model")
    assert at(cfg, "data.train_files") == [str(real / "data" / "gsm8k-train.parquet")]
    assert at(cfg, "data.val_files") == [str(real / "data" / "gsm8k-test.parquet")]
    assert at(cfg, "reward.custom_reward_function.path") is None
    assert (at(cfg, "data.max_prompt_length"), at(cfg, "data.max_response_length")) == (160, 64)
    assert at(cfg, "actor_rollout_ref.rollout.max_model_len") == 224
    assert (at(cfg, "data.train_batch_size"), at(cfg, "actor_rollout_ref.rollout.n")) == (4, 4)
    assert at(cfg, PREFIX + "optim.lr") == 1e-5
    cfg = config("cpu_tiny", tmp_path, MODEL="smollm2", WORK_DIR=w, PROMPTS="8", RESPONSE_LENGTH="32")
    assert (at(cfg, "data.train_batch_size"), at(cfg, "data.max_response_length")) == (8, 32)  # variables still win
    tiny = config("cpu_tiny", tmp_path, WORK_DIR=w)
    assert at(tiny, "actor_rollout_ref.model.path") == f"{w}/model"
    assert at(tiny, "reward.custom_reward_function.path") == "pkg://verl_ext.testbed.task"
    res = run_script(CPU_RECIPE, env={**base_env(tmp_path), "MODEL": "qwen", "PRINT_CMD": "1"})
    assert res.returncode == 2 and "MODEL='qwen' is invalid: allowed tiny" in res.stderr


@pytest.mark.parametrize("loss", ["vanilla", "clip_cov", "kl_cov", "grpo_erc", "gppo_erc", "high_entropy", "entropy_adv"])
def test_cpu_recipe_per_loss(loss, tmp_path):
    """LOSS picks the loss group (the papers' values) and its actor preset; the selection ratio is the CPU recipe's."""
    w = str(tmp_path / "w")
    cfg = config("cpu_tiny", tmp_path, LOSS=loss, WORK_DIR=w)
    for key, value in group(f"policy_loss/{loss}.yaml").items():
        if "${" not in str(value):
            assert at(cfg, LOSS + key) == value, key
    if (CONFIGS / "loss_actor" / f"{loss}.yaml").exists():
        for key, value in group(f"loss_actor/{loss}.yaml").items():
            assert at(cfg, PREFIX + key) == value, key
    if loss in ("clip_cov", "kl_cov"):
        assert at(cfg, LOSS + f"{loss}_ratio") == 0.02
    assert at(cfg, "algorithm.adv_estimator") == "grpo" and at(cfg, "actor_rollout_ref.model.path") == f"{w}/model"
    assert at(cfg, "trainer.logger") == ["console", "file"] and at(cfg, "trainer.experiment_name") == f"cpu-tiny-{loss}"
    assert at(cfg, "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH") == f"{w}/cpu-tiny-{loss}.jsonl"
    # two mini-batches of 8 prompts, micro-batches of the whole mini-batch (8 x 8 responses), one process
    assert at(cfg, PREFIX + "ppo_mini_batch_size") == 8 and at(cfg, PREFIX + "ppo_micro_batch_size_per_gpu") == 64


def test_cpu_recipe_on_two_nodes(tmp_path):
    cfg = config("cpu_tiny", tmp_path, NNODES="2", WORK_DIR=str(tmp_path))
    assert at(cfg, "trainer.nnodes") == 2 and at(cfg, PREFIX + "ppo_micro_batch_size_per_gpu") == 32


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"PROMPTS": "3"}, "PROMPTS=3 is invalid: allowed an even number"),
        ({"STEPS": "0"}, "STEPS='0' is invalid: allowed an integer >= 1"),
        ({"LR": "fast"}, "LR='fast' is invalid"),
        ({"SEED": "-1"}, "SEED='-1' is invalid: allowed an integer >= 0"),
        ({"NNODES": "3", "PROMPTS": "4", "N": "4"}, "is invalid for 3 training processes"),
    ],
)
def test_cpu_recipe_rejects_bad_variables(tmp_path, variables, message):
    assert message in startup_error("cpu_tiny", tmp_path, WORK_DIR=str(tmp_path), **variables)


def test_cpu_recipe_refuses_a_bad_loss_and_a_scale(tmp_path):
    env = {**base_env(tmp_path), "PRINT_CMD": "1"}
    res = run_script(CPU_RECIPE, env={**env, "LOSS": "bogus"})
    assert res.returncode == 2 and "LOSS='bogus' is invalid: allowed vanilla, clip_cov, kl_cov, grpo_erc" in res.stderr
    res = run_script(CPU_RECIPE, env={**env, "SCALE": "cpu"})
    assert res.returncode == 2 and "cpu_tiny.sh always runs in CPU mode" in res.stderr


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
    message = "ENTROPY_TARGET='high' is invalid: allowed a positive number"
    assert message in startup_error(script, tmp_path, ENTROPY_TARGET="high")
    assert at(config(script, tmp_path, ENTROPY_TARGET="1.5"), "verl_ext.entropy_control.target") == 1.5


def test_the_documented_own_recipe_composes(tmp_path):
    """docs/recipes.md's example of a user's own recipe composes as written, from a folder of its own, with the
    groups' values and its own on top."""
    import re

    text = (REPO / "docs" / "recipes.md").read_text()
    section = text[text.index("### Writing your own recipe"):]
    example = re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "gsm8k_erc_wide.yaml").write_text(example)
    (tmp_path / "home").mkdir()
    cmd = [sys.executable, "-m", "verl_ext.main_ppo", "--config-path", str(tmp_path / "mine"), "--config-name",
           "gsm8k_erc_wide"]  # fmt: skip
    from recipe_pins import case_env, compose_command

    cfg = compose_command(cmd, case_env(tmp_path, {}), tmp_path, resolve=lambda c: OmegaConf.to_container(c, resolve=True))
    assert (at(cfg, LOSS + "loss_mode"), at(cfg, LOSS + "entropy_mask_low"), at(cfg, LOSS + "entropy_mask_high")) == (
        "grpo_erc", 0.9, 1.1)
    assert at(cfg, "actor_rollout_ref.model.path") == "Qwen/Qwen2.5-7B-Instruct"
    assert at(cfg, "actor_rollout_ref.rollout.tensor_model_parallel_size") == 2
    assert at(cfg, "reward.reward_manager.name") == "naive" and at(cfg, "trainer.experiment_name") == "gsm8k-erc-wide"
