"""The recipes (recipe/<name>.yaml, launched by recipe/<name>.sh) and what they compose: the groups' values reaching
them, the launch variables and Hydra overrides reaching the config (through the entry point's own composition,
in-process, nothing started), the labels and folders following the groups chosen, the CPU scale and the CPU recipe,
the evaluation recipe, the checks of the composed config (one per check, the same line whether a variable or an
override set the value), and DRY_RUN=1 of every launch script (the script for real, the entry point it launches
run in this process by ``launch_record``; one real process for the launcher's exit status). What each recipe launches
in full is pinned in test_recipe_pins.py; the launcher's variables are tested in test_launch_env.py, Hydra's
``--cfg job --resolve`` in test_recipe_resolve.py and the saved config's replay in test_replay.py."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf
from launch_record import run_launcher
from recipe_pins import (GPU_RECIPES, OTHER_VARIABLES, case_env, compose, compose_command, compose_script, environment,
                         launch_command, split_command)  # fmt: skip

from verl_ext.recipe import launch_env
from verl_ext.config import ConfigError

REPO = Path(__file__).resolve().parents[2]
RECIPE_DIR = REPO / "recipe"
CONFIGS = REPO / "configs"
SMOKE = REPO / "scripts" / "gpu_smoke.sh"
PREFIX = "actor_rollout_ref.actor."
LOSS = PREFIX + "policy_loss."
VAL_KWARGS = "actor_rollout_ref.rollout.val_kwargs."
LOSS_GROUP = "policy_loss@actor_rollout_ref.actor.policy_loss"
LOSS_ACTOR_GROUP = "loss_actor@actor_rollout_ref.actor"


def base_env(tmp_path: Path) -> dict[str, str]:
    """The test process environment without any launch variable, with HOME in tmp_path (no wandb login)."""
    dropped = set(launch_env.names()) | set(OTHER_VARIABLES)
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(("VERL_", "RAY_"))}
    env["HOME"] = str(tmp_path)
    env["PYTHON"] = sys.executable
    return env


def run_script(path: Path, *args: str, env: dict[str, str], timeout: int = 60, cwd: Path | None = None):
    return subprocess.run(["bash", str(path), *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)


def composed(name: str, tmp_path: Path, *args: str, **variables: str):
    """The resolved config ``recipe/<name>.sh ARGS`` launches with the launch ``variables`` (HOME is
    ``tmp_path/home``, the working folder ``tmp_path``; ``$RUN`` in a value or an argument is ``tmp_path``)."""
    (tmp_path / "home").mkdir(exist_ok=True)
    args = tuple(arg.replace("$RUN", str(tmp_path)) for arg in args)
    return compose_script(name, variables, tmp_path, args)


def config(name: str, tmp_path: Path, *args: str, **variables: str) -> dict[str, Any]:
    """:func:`composed` as a plain container."""
    return OmegaConf.to_container(composed(name, tmp_path, *args, **variables))


def raw_config(name: str, tmp_path: Path, *args: str, **variables: str) -> dict[str, Any]:
    """What ``recipe/<name>.sh ARGS`` composes, unresolved (interpolations as written)."""
    (tmp_path / "home").mkdir(exist_ok=True)
    env = case_env(tmp_path, variables)
    cmd = launch_command(name, env, cwd=tmp_path, args=args)
    env.pop("PRINT_CMD")
    with environment(env, tmp_path):
        return OmegaConf.to_container(compose(*split_command(cmd)), resolve=False)


def check_line(name: str, tmp_path: Path, *args: str, **variables: str) -> str:
    """The one line the composed config's checks give for this launch (the start-up's resolution or
    ``verl_ext.checks.recipe_checks``), or '' when every check passes."""
    from verl_ext.checks.recipe_checks import check_recipe

    try:
        check_recipe(composed(name, tmp_path, *args, **variables))
    except ConfigError as exc:
        return str(exc).replace(str(tmp_path), "$RUN")
    return ""


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
            out[key.removeprefix("override ").removeprefix("optional ")] = value
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


ENV_READERS = re.compile(r"oc\.env|env_[a-z]+:")
"""What reading the environment looks like in a YAML file: OmegaConf's ``oc.env`` or an ``env_*`` resolver."""
RAY_ENV_VARS = re.compile(r"^\s*env_vars:\s*(#.*)?$")
"""Ray's ``runtime_env.env_vars`` key (variables the run *sets* in its workers), which the pattern above also matches."""


def reads_the_environment(line: str) -> bool:
    return bool(ENV_READERS.search(line)) and not RAY_ENV_VARS.match(line)


def test_no_config_or_recipe_file_reads_the_environment():
    """``grep -rE 'oc\\.env|env_[a-z]+:' configs recipe`` finds nothing but Ray's ``env_vars:`` key: the YAML holds
    values, and recipe/launch.sh turns the environment into overrides it prints."""
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for folder in (CONFIGS, RECIPE_DIR) for path in sorted(folder.rglob("*")) if path.is_file()
             and "__pycache__" not in path.parts
             for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if reads_the_environment(line)]  # fmt: skip
    assert not found, "\n".join(found)
    assert reads_the_environment("  - scale: ${oc.env:SCALE,gpu}") and reads_the_environment("n: ${verl_ext.env_int:N,4,1}")
    assert reads_the_environment("  env_vars: ${verl_ext.env_files:X,y}") and not reads_the_environment("  env_vars:")


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_recipe_holds_its_groups_values(name, tmp_path):
    """The composed config carries every value of the groups the recipe selects (family, loss, the papers' actor and
    entropy-control presets), read from the group files themselves: a value lives in its group only."""
    choices = recipe_defaults(name)
    cfg = config(name, tmp_path)
    family = choices["family"]
    expected = dict(flat(group(f"family/{family}.yaml")))
    loss = choices[LOSS_GROUP]
    expected.update({LOSS + key: value for key, value in group(f"policy_loss/{loss}.yaml").items()})
    for choice, package in ((LOSS_ACTOR_GROUP, "actor_rollout_ref.actor"),
                            ("entropy_control@verl_ext.entropy_control", "verl_ext.entropy_control"),
                            ("kl_clip@actor_rollout_ref.actor", "actor_rollout_ref.actor")):  # fmt: skip
        if choice in choices:  # later groups win, as in the recipe's defaults list
            path = f"{choice.split('@')[0]}/{choices[choice]}.yaml"
            expected.update({f"{package}.{key}": value for key, value in flat(group(path)).items()})
    for key, value in expected.items():
        if "${" not in str(value):
            assert at(cfg, key) == value, f"{name}: {key}"
    assert at(cfg, "verl_ext.recipe.family") == family
    assert at(cfg, "trainer.experiment_name") == name.replace("_", "-")
    assert at(cfg, "trainer.project_name") == f"verl_ext_{family}"
    assert at(cfg, "trainer.default_local_dir") == f"{tmp_path}/home/ckpts/verl_ext_{family}/{name.replace('_', '-')}"
    assert at(cfg, "trainer.validation_data_dir") == at(cfg, "trainer.default_local_dir") + "/validation"
    data = f"{tmp_path}/home/data/verl_ext"
    want = [f"{data}/aime-2024.parquet", f"{data}/aime-2025.parquet"] if family == "dapo" else [f"{data}/gsm8k-test.parquet"]
    assert at(cfg, "data.val_files") == want
    assert at(cfg, "trainer.logger") == ["console", "wandb"]
    assert at(cfg, "trainer.device") == "cuda"  # a GPU recipe as written is no CPU-mode run


def test_no_recipe_file_spells_out_a_papers_value():
    """The papers' values live in configs/ groups: no recipe YAML or script sets a loss key, a clip ratio or an
    entropy-control key itself, or writes a number of a paper's group."""
    numbers = set()
    for path in [*CONFIGS.glob("policy_loss/*.yaml"), *CONFIGS.glob("loss_actor/*.yaml"), *CONFIGS.glob("entropy_control/*.yaml"),
                 *CONFIGS.glob("eval_protocol/*.yaml"), *CONFIGS.glob("kl_clip/*.yaml")]:  # fmt: skip
        for value in flat(group(str(path.relative_to(CONFIGS)))).values():
            numbers |= {n for n in re.findall(r"\d+\.\d+(?:e-?\d+)?", str(value)) if float(n) not in (0.0, 1.0)}
    assert "0.95" in numbers and "0.0002" in numbers
    for path in [*RECIPE_DIR.glob("*.yaml"), *RECIPE_DIR.glob("*.sh")]:
        text = path.read_text()
        # vLLM's memory share is a resource setting, not a method value (cpu_tiny's 0.5 is not bapo's rho_0)
        values = "\n".join(line for line in text.splitlines() if "gpu_memory_utilization" not in line)
        found = numbers & set(re.findall(r"\d+\.\d+(?:e-?\d+)?", values))
        assert not found, f"{path.name} spells out {sorted(found)}"
        for word in ("clip_cov_ratio", "kl_cov_ratio", "entropy_mask", "gppo_beta", "clip_ratio", "skywork_delta",
                     "entropic_k", "high_entropy_ratio", "entropy_adv_", "kl_clip_threshold"):  # fmt: skip
            if path.name == "cpu_tiny.yaml" and word in ("clip_cov_ratio", "kl_cov_ratio"):
                continue  # the CPU recipe's own selection ratios (0.02: its batch size, not a paper's)
            assert word not in text.replace(f"# {word}", ""), f"{path.name} sets {word}"


# ------------------------------------------------------------------------------------------------ variables and overrides


def test_variables_and_arguments_reach_the_config(tmp_path):
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


def test_relative_paths_are_made_absolute_against_the_launch_folder(tmp_path):
    cfg = config("gsm8k_grpo_erc", tmp_path, "trainer.default_local_dir=runs/x", DATA_DIR="d", MODEL_PATH="./m")
    assert at(cfg, "data.train_files") == [f"{tmp_path}/d/gsm8k-train.parquet"]
    assert at(cfg, "trainer.default_local_dir") == f"{tmp_path}/runs/x"
    assert at(cfg, "trainer.validation_data_dir") == f"{tmp_path}/runs/x/validation"
    assert at(cfg, "actor_rollout_ref.model.path") == f"{tmp_path}/m"
    assert at(config("gsm8k_grpo_erc", tmp_path), "actor_rollout_ref.model.path") == "Qwen/Qwen2.5-3B-Instruct"  # a hub id


def test_an_override_wins_over_a_variable_naming_the_same_key(tmp_path):
    """The launcher puts the variables' overrides first, the user's arguments last: Hydra applies the later one."""
    variables = {"NNODES": "2", "LOGGERS": "console,wandb", "EXP_NAME": "from-variable", "MODEL_PATH": "/m/a"}
    cfg = config("gsm8k_grpo_erc", tmp_path, "trainer.nnodes=1", "trainer.logger=[console]",
                 "trainer.experiment_name=from-override", "actor_rollout_ref.model.path=/m/b", **variables)  # fmt: skip
    assert (at(cfg, "trainer.nnodes"), at(cfg, "trainer.logger")) == (1, ["console"])
    assert (at(cfg, "trainer.experiment_name"), at(cfg, "actor_rollout_ref.model.path")) == ("from-override", "/m/b")
    alone = config("gsm8k_grpo_erc", tmp_path, **variables)  # the variables do reach the keys
    assert (at(alone, "trainer.nnodes"), at(alone, "trainer.experiment_name")) == (2, "from-variable")
    # a shorthand's group likewise: MODEL=smollm2, then cpu_model=tiny on the command line
    cpu = config("dapo_kl_cov", tmp_path, "cpu_model=tiny", SCALE="cpu", MODEL="smollm2")
    assert at(cpu, "verl_ext.recipe.model") == "tiny"


@pytest.mark.parametrize(
    ("name", "variables", "args"),
    [
        ("dapo_kl_cov", {"SCALE": "cpu"}, ("scale=cpu",)),
        ("dapo_kl_cov", {"SCALE": "cpu", "MODEL": "smollm2"}, ("scale=cpu", "cpu_model=smollm2")),
        ("cpu_tiny", {"MODEL": "smollm2"}, ("cpu_model=smollm2",)),
        ("cpu_tiny", {"LOSS": "clip_cov"}, (f"{LOSS_GROUP}=clip_cov", f"{LOSS_ACTOR_GROUP}=clip_cov")),
        ("cpu_tiny", {"LOSS": "kl_cov"}, (f"{LOSS_GROUP}=kl_cov",)),
    ],
)
def test_a_shorthand_composes_what_its_overrides_compose(name, variables, args, tmp_path):
    """SCALE, MODEL and LOSS stand for the overrides the launcher prints: the two compose the same whole config."""
    assert config(name, tmp_path, **variables) == config(name, tmp_path, *args)


def test_lengths_and_the_overlong_buffer_follow_the_overrides(tmp_path):
    """Shrinking the response length shrinks DAPO's overlong buffer (half of it unless set) and the token budgets with
    it: a buffer left at 4096 of a 512-token response would never penalise anything."""
    cfg = config("dapo_clip_cov", tmp_path, "data.max_prompt_length=128", "data.max_response_length=512")
    assert (at(cfg, "data.max_prompt_length"), at(cfg, "data.max_response_length")) == (128, 512)
    assert at(cfg, "reward.reward_kwargs.max_resp_len") == 512
    assert at(cfg, "reward.reward_kwargs.overlong_buffer_cfg.len") == 256
    assert at(cfg, PREFIX + "ppo_max_token_len_per_gpu") == 2 * 640
    assert at(cfg, "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu") == 3 * 640
    assert at(cfg, "actor_rollout_ref.rollout.max_num_batched_tokens") == 640
    cfg = config("dapo_clip_cov", tmp_path, "data.max_response_length=512", "reward.reward_kwargs.overlong_buffer_cfg.len=100")
    assert at(cfg, "reward.reward_kwargs.overlong_buffer_cfg.len") == 100
    cfg = config("gsm8k_grpo_erc", tmp_path, "data.max_prompt_length=128", "data.max_response_length=512")
    assert (at(cfg, "data.max_prompt_length"), at(cfg, "data.max_response_length")) == (128, 512)


def test_wandb_goes_offline_without_a_key(tmp_path):
    from omegaconf import DictConfig

    from verl_ext.startup import wandb_offline

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


# ------------------------------------------------------------------------------------------------ labels follow the groups


@pytest.mark.parametrize(
    ("args", "protocol", "family"),
    [((), "erc", "dapo"), (("eval_protocol=greedy",), "greedy", "dapo"), (("family=gsm8k",), "erc", "gsm8k"),
     (("family=gsm8k", "eval_protocol=dapo"), "dapo", "gsm8k")],  # fmt: skip
)
def test_eval_labels_and_folders_follow_the_groups_on_the_command_line(args, protocol, family, tmp_path):
    """``bash recipe/eval.sh eval_protocol=greedy`` records protocol greedy, names the run eval-<family>-greedy and
    dumps to eval-greedy/ beside the checkpoint; ``family=gsm8k`` names it eval-gsm8k-<protocol> in gsm8k's project."""
    ckpt = tmp_path / "ckpts" / "run" / "global_step_40"
    (ckpt / "actor").mkdir(parents=True)
    cfg = config("eval", tmp_path, *args, CKPT=str(ckpt))
    assert at(cfg, "verl_ext.recipe.protocol") == protocol and at(cfg, "verl_ext.recipe.family") == family
    assert at(cfg, "trainer.experiment_name") == f"eval-{family}-{protocol}"
    assert at(cfg, "trainer.project_name") == f"verl_ext_{family}"
    assert at(cfg, "trainer.validation_data_dir") == f"{ckpt.parent}/eval-{protocol}"
    assert at(cfg, VAL_KWARGS + "do_sample") is (protocol != "greedy")
    model = config("eval", tmp_path, *args)  # no checkpoint: the dumps under the run's own folder
    assert at(model, "trainer.validation_data_dir") == f"{tmp_path}/home/ckpts/verl_ext_{family}/eval-{family}-{protocol}"


@pytest.mark.parametrize("loss", ["clip_cov", "kl_cov", "vanilla"])
def test_cpu_recipe_labels_follow_the_loss_group_on_the_command_line(loss, tmp_path):
    """``bash recipe/cpu_tiny.sh policy_loss@actor_rollout_ref.actor.policy_loss=<loss>``: the run's name, its
    checkpoint folder and its log name the loss that runs."""
    w = tmp_path / "w"
    cfg = config("cpu_tiny", tmp_path, f"{LOSS_GROUP}={loss}", WORK_DIR=str(w))
    assert at(cfg, LOSS + "loss_mode") == loss
    assert at(cfg, "trainer.experiment_name") == f"cpu-tiny-{loss}"
    assert at(cfg, "trainer.default_local_dir") == f"{w}/ckpts/cpu-tiny-{loss}"
    assert at(cfg, "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH") == f"{w}/cpu-tiny-{loss}.jsonl"


def test_scale_cpu_on_the_command_line_is_cpu_mode(tmp_path):
    """``bash recipe/dapo_kl_cov.sh scale=cpu`` (no SCALE variable) composes platform=cpu: the run is CPU mode (the
    entry point restarts itself with VERL_PLATFORM=cpu: test_main_ppo), never a GPU run with CPU sizes."""
    cfg = config("dapo_kl_cov", tmp_path, "scale=cpu")
    assert at(cfg, "trainer.device") == "cpu" and at(cfg, "verl_ext.recipe.scale") == "cpu"
    assert at(cfg, "ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM") == "cpu"
    assert at(cfg, PREFIX + "fsdp_config.strategy") == "fsdp2" and at(cfg, "actor_rollout_ref.rollout.enforce_eager") is True
    assert at(config("dapo_kl_cov", tmp_path), "trainer.device") == "cuda"


# ------------------------------------------------------------------------------------------------ the checks

CKPT_NAME = "trainer.resume_from_path: '/c/run/step_3' is invalid: allowed a checkpoint folder named global_step_<N>"

#: (recipe, the overrides giving the bad value, the launch variables giving it (None: no variable sets that key),
#: arguments both launches take, the start of the line the check gives)
CHECKS: dict[str, tuple[str, tuple[str, ...], dict[str, str] | None, tuple[str, ...], str]] = {
    "nnodes": ("dapo_kl_cov", ("trainer.nnodes=0",), {"NNODES": "0"}, (),
               "trainer.nnodes: 0 is invalid: allowed an integer >= 1"),
    "nnodes_in_a_formula": ("cpu_tiny", ("trainer.nnodes=0",), {"NNODES": "0"}, (),
                            "trainer.nnodes: 0 is invalid: allowed an integer >= 1"),
    "gpus_per_node": ("dapo_kl_cov", ("trainer.n_gpus_per_node=eight",), {"GPUS_PER_NODE": "eight"}, (),
                      "trainer.n_gpus_per_node: 'eight' is invalid: allowed an integer >= 1"),
    "prompts": ("gsm8k_grpo_erc", ("data.train_batch_size=0",), None, (),
                "data.train_batch_size: 0 is invalid: allowed an integer >= 1"),
    "n": ("gsm8k_grpo_erc", ("actor_rollout_ref.rollout.n=0",), None, (),
          "actor_rollout_ref.rollout.n: 0 is invalid: allowed an integer >= 1"),
    "steps": ("cpu_tiny", ("trainer.total_training_steps=0",), None, (),
              "trainer.total_training_steps: 0 is invalid: allowed an integer >= 1, or null"),
    "length": ("dapo_kl_cov", ("data.max_response_length=1k",), None, (),
               "data.max_response_length: '1k' is invalid: allowed an integer >= 1"),
    "sequence_parallel": ("dapo_kl_cov", (f"{PREFIX}ulysses_sequence_parallel_size=0",), {"SP_SIZE": "0"}, (),
                          f"{PREFIX}ulysses_sequence_parallel_size: 0 is invalid: allowed an integer >= 1"),
    "gen_tp_divides": ("dapo_kl_cov", ("actor_rollout_ref.rollout.tensor_model_parallel_size=3",), {"GEN_TP": "3"}, (),
                       "actor_rollout_ref.rollout.tensor_model_parallel_size: 3 is invalid on trainer.nnodes=4 x "
                       "trainer.n_gpus_per_node=8: the 32 GPUs must split into whole replicas of 3 GPUs (verl's "
                       "rollout device mesh); allowed 1, 2, 4, 8, 16, 32"),
    "overlong_buffer": ("dapo_kl_cov", ("reward.reward_kwargs.overlong_buffer_cfg.len=512",), None,
                        ("data.max_response_length=512",), "reward.reward_kwargs.overlong_buffer_cfg.len: 512 is "
                        "invalid: allowed an integer with 1 <= len < data.max_response_length=512"),
    "smollm2_gen_tp": ("dapo_kl_cov", ("scale=cpu", "cpu_model=smollm2", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"),
                       {"SCALE": "cpu", "MODEL": "smollm2", "GEN_TP": "2"}, (),
                       "actor_rollout_ref.rollout.tensor_model_parallel_size: 2 is invalid with cpu_model=smollm2: "
                       "allowed 1"),
    "train_files": ("gsm8k_grpo_erc", ("data.train_files=[]",), None, (),
                    "data.train_files: [] is invalid: allowed one or more parquet files"),
    "val_files": ("eval", ("data.val_files=[]",), None, (), "data.val_files: [] is invalid: allowed one or more"),
    "loggers": ("gsm8k_grpo_erc", ("trainer.logger=[console,wandbb]",), {"LOGGERS": "console,wandbb"}, (),
                "trainer.logger: entry 'wandbb' is invalid: allowed "),
    "mini_batch_divides_the_prompts": ("dapo_kl_cov", (f"{PREFIX}ppo_mini_batch_size=48",), None, (),
                                       "data.train_batch_size: 256 is invalid: it must be a multiple of "
                                       f"{PREFIX}ppo_mini_batch_size=48"),
    "mini_batch_splits_over_processes": ("cpu_tiny", ("trainer.nnodes=3",), {"NNODES": "3"},
                                         ("data.train_batch_size=4", "actor_rollout_ref.rollout.n=4"),
                                         f"{PREFIX}ppo_mini_batch_size: 2 x rollout.n=4 responses are invalid for 3 "
                                         "training processes"),
    "cpu_mini_batch_splits": ("dapo_kl_cov", ("scale=cpu", "data.train_batch_size=6", "actor_rollout_ref.rollout.n=3"),
                              None, (), f"{PREFIX}ppo_mini_batch_size: 3 x rollout.n=3 responses are invalid for 2 "
                              "training processes"),
    "cpu_prompts_even": ("dapo_kl_cov", ("scale=cpu", "data.train_batch_size=3"), None, (),
                         "data.train_batch_size: 3 is invalid at the CPU scale: allowed an even number (two optimiser "
                         "mini-batches a step"),
    "checkpoint_name": ("eval", ("trainer.resume_from_path=/c/run/step_3",), {"CKPT": "/c/run/step_3"}, (), CKPT_NAME),
    "checkpoint_actor": ("eval", ("trainer.resume_from_path=$RUN/c/global_step_3",), {"CKPT": "$RUN/c/global_step_3"},
                         (), "trainer.resume_from_path: '$RUN/c/global_step_3' has no actor/ folder: not a verl "
                         "checkpoint"),
    "validation_samples": ("dapo_kl_cov", (VAL_KWARGS + "n=0",), None, (),
                           VAL_KWARGS + "n: 0 is invalid: allowed an integer >= 1"),
    "cpu_scale_is_cpu_mode": ("dapo_kl_cov", ("scale=cpu", "trainer.device=cuda"), None, (),
                              "platform: scale's CPU sizes run in CPU mode only: keep platform=cpu"),
    "cpu_scale_model": ("dapo_kl_cov", ("scale=cpu", "cpu_model=toy"), {"SCALE": "cpu", "MODEL": "toy"}, (),
                        "cpu_model: 'toy' is invalid with scale=cpu: allowed tiny, smollm2"),
}  # fmt: skip


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_a_check_rejects_a_bad_value_given_as_an_override_or_a_variable(check, tmp_path):
    """Each check of the composed config (the ones the start-up and verl_ext.checks.recipe_checks make) rejects the
    bad value given as a Hydra override with one line naming the key; where a launch variable sets that key, the
    variable gives the very same line. The recipe as written passes the check."""
    name, overrides, variables, common, line = CHECKS[check]
    (tmp_path / "c" / "global_step_3").mkdir(parents=True)
    got = check_line(name, tmp_path, *common, *overrides)
    assert got.startswith(line), got
    if variables is not None:
        assert check_line(name, tmp_path, *common, **variables) == got
    assert check_line(name, tmp_path) == ""


def test_the_entry_point_gives_a_formulas_bad_size_as_one_line(tmp_path, capsys, monkeypatch):
    """``trainer.nnodes=0`` on the CPU recipe divides by zero in its micro-batch formula: the entry point's start-up
    prints the size check's line and exits 2, no traceback."""
    import verl_ext.main_ppo as entry

    raw = OmegaConf.create(raw_config("cpu_tiny", tmp_path, "trainer.nnodes=0"))
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    assert entry.run(raw) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "verl_ext: invalid config: trainer.nnodes: 0 is invalid: allowed an integer >= 1")


# ------------------------------------------------------------------------------------------------ scale=cpu

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
"""What scale=cpu may change: sizes, paths, loggers, the step count (and, outside verl's config, verl_ext's keys)."""


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_scale_cpu_changes_sizes_only(name, tmp_path):
    """Every key scale=cpu changes is a size, a path or the logger; the platform's CPU settings aside (they come from
    configs/platform/cpu.yaml, for any CPU-mode run), every other setting of the recipe runs as written."""
    gpu = flat(config(name, tmp_path))  # the pinned compositions of the recipe (shared: tests/scripts/recipe_pins.py)
    cpu = flat(config(name, tmp_path, SCALE="cpu"))
    platform = set(flat(yaml.safe_load((CONFIGS / "platform" / "cpu.yaml").read_text())))
    raw = flat(raw_config(name, tmp_path))
    derived = {key for key, value in raw.items() if str(value).startswith("${") and "verl_ext." not in str(value)}
    changed = {key for key in gpu.keys() | cpu.keys() if gpu.get(key) != cpu.get(key)}
    # verl's own derived keys (${...} in verl's config, e.g. critic.ppo_mini_batch_size) follow their sources
    changed = {key for key in changed if not key.startswith("verl_ext.") and key not in platform | derived}
    assert changed <= CPU_SIZES, sorted(changed - CPU_SIZES)
    assert cpu["trainer.n_gpus_per_node"] == 2 and cpu["data.train_batch_size"] == 4
    assert cpu[PREFIX + "use_dynamic_bsz"] is True and cpu["trainer.device"] == "cpu"
    # vLLM's tensor parallelism as on the cluster: DAPO's 2 (one server over both processes), GSM8K's 1
    tp = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    assert cpu[tp] == gpu[tp] == (2 if name.startswith("dapo") else 1)


def test_an_override_wins_over_the_scales_value(tmp_path):
    """The command line comes after ``SCALE=cpu``'s files: a key both set takes the command line's value."""
    cfg = config("dapo_clip_cov", tmp_path, "trainer.save_freq=9", "trainer.total_training_steps=5", SCALE="cpu")
    assert (at(cfg, "trainer.save_freq"), at(cfg, "trainer.total_training_steps")) == (9, 5)


def test_scale_cpu_prints_what_it_changes(tmp_path):
    """The start-up lines name the scale, the processes, the model and every key the scale's files set, with its value."""
    from verl_ext.startup import scale_lines

    text = "\n".join(scale_lines(composed("dapo_kl_cov", tmp_path, "data.train_batch_size=8", SCALE="cpu")))
    assert text.startswith("scale=cpu: CPU mode, 1 node x 2 training processes, cpu_model=tiny: "), text
    assert "data.train_batch_size=8 " in text and "actor_rollout_ref.actor.ppo_mini_batch_size=4 " in text
    assert "data.max_response_length=8" in text and "vLLM TP 2" in text and "0.1 / 0.1 (Clip-Cov / KL-Cov)" in text


def test_scale_cpu_smollm2_runs_the_dapo_recipe_on_the_real_model_with_its_sizes(tmp_path):
    """cpu_model=smollm2 changes the model, the data folder, the lengths, the learning rate and DAPO's vLLM TP (2 -> 1);
    everything else is the recipe's."""
    cfg = config("dapo_kl_cov", tmp_path, "scale=cpu", "cpu_model=smollm2", WORK_DIR=str(tmp_path / "s"))
    real = tmp_path / "s" / "smollm2"
    assert at(cfg, "actor_rollout_ref.model.path") == str(real / "model")
    assert at(cfg, "data.train_files") == [str(real / "data" / "dapo-math-17k.parquet")]
    assert (at(cfg, "data.max_prompt_length"), at(cfg, "data.max_response_length")) == (160, 64)
    assert at(cfg, "actor_rollout_ref.rollout.tensor_model_parallel_size") == 1
    assert at(cfg, PREFIX + "optim.lr") == 1e-5
    assert at(cfg, "algorithm.filter_groups.enable") is True  # DAPO's structure unchanged
    recipe = at(cfg, "verl_ext.recipe")
    assert {k: recipe[k] for k in ("scale", "model", "work_dir", "data_dir", "assets", "family")} == {
        "scale": "cpu", "model": "smollm2", "work_dir": str(tmp_path / "s"), "data_dir": str(real / "data"),
        "assets": True, "family": "dapo"}  # fmt: skip


def test_joining_a_cluster_nulls_the_local_clusters_settings(tmp_path, monkeypatch):
    """scale=cpu with RAY_ADDRESS: CPU mode's local-cluster settings (which Ray rejects when joining) are nulled when
    the config is resolved, the same rule as for a plain composition; without RAY_ADDRESS they stay."""
    from verl_ext import startup as recipe_startup
    from verl_ext.startup import LOCAL_RAY_ONLY

    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfgs = {}
    for joined in (False, True):
        if joined:
            monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6390")
        cfg = composed("dapo_clip_cov", tmp_path, "scale=cpu", "verl_ext.recipe.assets=false")
        cfgs[joined] = OmegaConf.to_container(recipe_startup.resolved(cfg))
    assert at(cfgs[False], "ray_kwargs.ray_init.num_gpus") == 2
    for key in LOCAL_RAY_ONLY:  # every key only a local cluster takes
        assert at(cfgs[True], f"ray_kwargs.ray_init.{key}") is None, key


# ------------------------------------------------------------------------------------------------ eval

EVAL = RECIPE_DIR / "eval.sh"


@pytest.mark.parametrize("protocol", ["erc", "dapo", "greedy"])
@pytest.mark.parametrize("family", ["dapo", "gsm8k"])
def test_eval_is_the_family_recipe_validating_a_checkpoint_with_the_protocol(protocol, family, tmp_path):
    ckpt = tmp_path / "ckpts" / "run" / "global_step_40"
    (ckpt / "actor").mkdir(parents=True)
    cfg = config("eval", tmp_path, f"family={family}", f"eval_protocol={protocol}", CKPT=str(ckpt))
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
    expected.update(flat(group(f"eval_protocol/{protocol}.yaml")))
    for key, value in expected.items():
        assert at(cfg, key) == value, key
    model = config("eval", tmp_path, f"family={family}", "eval_protocol=custom")
    assert at(model, "trainer.resume_mode") == "disable" and at(model, "trainer.resume_from_path") is None
    assert at(model, "trainer.validation_data_dir") == f"{tmp_path}/home/ckpts/verl_ext_{family}/eval-{family}-custom"
    assert at(model, VAL_KWARGS[:-1]) == at(base, VAL_KWARGS[:-1])  # custom: the family's own sampling


def test_eval_at_cpu_scale_samples_two_answers_except_greedy(tmp_path):
    assert at(config("eval", tmp_path, "eval_protocol=erc", SCALE="cpu"), VAL_KWARGS + "n") == 2
    assert at(config("eval", tmp_path, "eval_protocol=greedy", SCALE="cpu"), VAL_KWARGS + "n") == 1
    assert at(config("eval", tmp_path, "eval_protocol=erc", VAL_KWARGS + "n=8", SCALE="cpu"), VAL_KWARGS + "n") == 8


def test_eval_rejects_an_unknown_protocol_or_family_naming_the_group(tmp_path):
    from hydra.errors import MissingConfigException

    for arg, name in (("eval_protocol=avg32", "eval_protocol/avg32"), ("family=math", "family/math")):
        with pytest.raises(MissingConfigException, match=name):
            composed("eval", tmp_path, arg)


# ------------------------------------------------------------------------------------------------ DRY_RUN=1

NNODES_LINE = "verl_ext: invalid config: trainer.nnodes: 0 is invalid: allowed an integer >= 1"
LOGGER_LINE = "verl_ext: invalid config: trainer.logger: entry 'wandbb' is invalid: allowed "

#: (script, extra arguments, launch variables, what stderr must hold); None: the dry run must pass
LAUNCHED_DRY_RUNS = ("dapo_clip_cov", "gsm8k_grpo_erc")
"""The GPU recipes whose ``DRY_RUN=1`` launch runs here through their script (one per family): the launcher's
dry-run path is one for every GPU recipe (recipe/launch.sh); every GPU recipe's own composition is validated as the
dry run validates it in :func:`test_every_gpu_recipe_validates_as_its_dry_run_does`."""

DRY_RUNS: dict[str, tuple[Path, tuple[str, ...], dict[str, str], str | None]] = {
    **{name: (RECIPE_DIR / f"{name}.sh", (), {}, None) for name in LAUNCHED_DRY_RUNS},
    "gpu_smoke": (SMOKE, (), {}, None),
    "eval": (EVAL, (), {}, None),
    "bad_value": (RECIPE_DIR / "gsm8k_grpo_erc.sh", (LOSS + "entropy_mask_low=1.5",), {},
                  f"verl_ext: invalid config: {LOSS}entropy_mask_low: "),
    "bad_key": (RECIPE_DIR / "dapo_kl_cov.sh", (LOSS + "kl_cov_ration=0.002",), {}, "kl_cov_ration"),
    "nnodes_override": (RECIPE_DIR / "dapo_kl_cov.sh", ("trainer.nnodes=0",), {}, NNODES_LINE),
    "nnodes_variable": (RECIPE_DIR / "dapo_kl_cov.sh", (), {"NNODES": "0"}, NNODES_LINE),
    "cpu_nnodes_variable": (RECIPE_DIR / "cpu_tiny.sh", (), {"NNODES": "0"}, NNODES_LINE),
    "loggers_override": (RECIPE_DIR / "gsm8k_grpo_erc.sh", ("trainer.logger=[console,wandbb]",), {}, LOGGER_LINE),
    "loggers_variable": (RECIPE_DIR / "gsm8k_grpo_erc.sh", (), {"LOGGERS": "console,wandbb"}, LOGGER_LINE),
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
def dry_run_inputs(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The home folder of the dry runs and the variables naming their inputs (:func:`write_dry_run_inputs`)."""
    home = tmp_path_factory.mktemp("dry_run_home")
    return home, write_dry_run_inputs(home)


def dry_run_env(name: str, home: Path, inputs: dict[str, str]) -> dict[str, str]:
    """The environment of the DRY_RUNS case ``name``: DRY_RUN=1, the inputs and the case's own variables."""
    path, _args, variables, _expected = DRY_RUNS[name]
    env = {**base_env(home), **inputs, "DRY_RUN": "1", "SMOKE_DIR": str(home / f"smoke_{name}"), **variables}
    if path == SMOKE:
        env.pop("MODEL_PATH")  # the smoke script builds its own tiny model
    if path.stem == "cpu_tiny":
        for key in ("MODEL_PATH", "DATA_DIR"):  # its own model and data (the work folder)
            env.pop(key)
        env["WORK_DIR"] = str(home / "cpu_tiny")
    return env


@pytest.mark.parametrize("name", sorted(DRY_RUNS))
def test_dry_run(name, dry_run_inputs, tmp_path):
    """Each recipe's launch with DRY_RUN=1 validates (exit 0); a bad value exits 2 with one line naming its key, the
    same line whether a variable or an override gave it, and no traceback.

    The script runs for real (its variables, arguments and exports, and the assets it builds); the
    ``python -m verl_ext.main_ppo`` it launches runs in this process (``launch_record.run_launcher``: Hydra's compose
    API with the command's own config path and name, then the entry point's own ``run``, with the launch's
    environment, working folder and output). The launcher's code paths as processes are launched for real once
    each, in the tests after this one: the GPU branch with a bad value (exit 2, one line, no traceback from the
    process) and the CPU branch (``VERL_PLATFORM=cpu`` exported, the assets built, exit 0); the recipes differ only
    in the composition and the validation, which this test checks for every one of them."""
    home, inputs = dry_run_inputs
    path, args, _variables, expected = DRY_RUNS[name]
    res = run_launcher(["bash", str(path), *args], env=dry_run_env(name, home, inputs), cwd=tmp_path, timeout=300)
    output = res.stdout + res.stderr
    assert res.launched == 1, output[-4000:]  # the launch reached python -m verl_ext.main_ppo
    assert res.environ_changes == {}, res.environ_changes  # the dry run leaves the environment as it found it
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if ".launch_record" not in p.parts)
    assert written == [], written  # and writes nothing in its working folder (a CPU recipe's assets: its WORK_DIR)
    if expected is None:
        assert res.returncode == 0, output[-4000:]
        assert "verl_ext dry run" in res.stdout, res.stdout[-4000:]
    elif expected.startswith("verl_ext: invalid config: "):  # a bad value: verl_ext's one line
        assert res.returncode == 2, output[-4000:]
        assert expected in res.stderr, res.stderr[-4000:]
        assert "Traceback" not in res.stderr, res.stderr[-4000:]
    else:  # a key no config has: Hydra's own error, naming it
        assert res.returncode != 0, output[-4000:]
        assert expected in res.stderr, res.stderr[-4000:]


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_every_gpu_recipe_validates_as_its_dry_run_does(name, tmp_path):
    """Each GPU recipe's composition (what ``recipe/<name>.sh`` launches, pinned in test_recipe_pins.py) passes the
    dry run's validation and prints its summary (``verl_ext.checks.dry_run.dry_run``, what ``DRY_RUN=1`` runs after
    the launcher, :data:`LAUNCHED_DRY_RUNS` through their scripts)."""
    import io

    from verl_ext.checks.dry_run import dry_run

    out, err = io.StringIO(), io.StringIO()
    assert dry_run(composed(name, tmp_path), out=out, err=err) == 0, err.getvalue()
    assert "verl_ext dry run" in out.getvalue() and f"loss      : " in out.getvalue()


def test_a_bad_value_of_a_launch_variable_exits_2_with_one_line_from_the_real_process(dry_run_inputs):
    """``NNODES=0 DRY_RUN=1 bash recipe/dapo_kl_cov.sh``, with ``python -m verl_ext.main_ppo`` a real process: the
    launcher's GPU branch (no ``VERL_PLATFORM``) execs the entry point, whose exit status 2 is the script's, with
    the one line and no traceback (``sys.exit``, not an exception)."""
    home, inputs = dry_run_inputs
    path, args, _variables, expected = DRY_RUNS["nnodes_variable"]
    res = run_script(path, *args, env=dry_run_env("nnodes_variable", home, inputs), timeout=300, cwd=home)
    assert res.returncode == 2, (res.stdout + res.stderr)[-4000:]
    assert not (home / "outputs").exists()  # Hydra writes no outputs/<date>/<time>/ for a dry run
    assert f"python -m verl_ext.main_ppo --config-path {RECIPE_DIR} --config-name dapo_kl_cov " in res.stderr.replace(
        sys.executable, "python")  # the launcher's echo of the command it execs
    assert expected in res.stderr.splitlines(), res.stderr[-4000:]
    assert "Traceback" not in res.stderr, res.stderr[-4000:]


# ----------------------------------------------------------------------------------------------------------
# the CPU recipe (recipe/cpu_tiny.sh)
# ----------------------------------------------------------------------------------------------------------

CPU_RECIPE = RECIPE_DIR / "cpu_tiny.sh"


def test_cpu_recipe_trains_the_real_model_with_cpu_model_smollm2(tmp_path):
    """cpu_model=smollm2 (MODEL=smollm2): the real model's folder, GSM8K-format word problems scored by verl's own
    gsm8k scorer (no custom reward function), its lengths and sizes; the default is the toy."""
    w = str(tmp_path / "w")
    cfg = config("cpu_tiny", tmp_path, "cpu_model=smollm2", WORK_DIR=w)
    real = tmp_path / "w" / "smollm2"
    assert at(cfg, "actor_rollout_ref.model.path") == str(real / "model")
    assert at(cfg, "data.train_files") == [str(real / "data" / "gsm8k-train.parquet")]
    assert at(cfg, "data.val_files") == [str(real / "data" / "gsm8k-test.parquet")]
    assert at(cfg, "reward.custom_reward_function.path") is None
    assert (at(cfg, "data.max_prompt_length"), at(cfg, "data.max_response_length")) == (160, 64)
    assert at(cfg, "actor_rollout_ref.rollout.max_model_len") == 224
    assert (at(cfg, "data.train_batch_size"), at(cfg, "actor_rollout_ref.rollout.n")) == (4, 4)
    assert at(cfg, PREFIX + "optim.lr") == 1e-5
    cfg = config("cpu_tiny", tmp_path, "cpu_model=smollm2", "data.train_batch_size=8", "data.max_response_length=32",
                 WORK_DIR=w)  # fmt: skip
    assert (at(cfg, "data.train_batch_size"), at(cfg, "data.max_response_length")) == (8, 32)  # overrides win
    assert at(cfg, "actor_rollout_ref.rollout.max_model_len") == 192  # and the budgets follow
    toy = config("cpu_tiny", tmp_path, WORK_DIR=w)
    assert at(toy, "actor_rollout_ref.model.path") == f"{w}/model"
    assert at(toy, "reward.custom_reward_function.path") == "pkg://verl_ext.testbed.task"


@pytest.mark.parametrize("loss", ["vanilla", "clip_cov", "kl_cov", "grpo_erc", "gppo_erc", "high_entropy", "entropy_adv"])
def test_cpu_recipe_per_loss(loss, tmp_path):
    """LOSS picks the loss group (the papers' values) and its actor preset; the selection ratio is the CPU recipe's,
    ERC's band the toy model's (configs/cpu_model/toy.yaml)."""
    w = str(tmp_path / "w")
    cfg = config("cpu_tiny", tmp_path, LOSS=loss, WORK_DIR=w)
    for key, value in group(f"policy_loss/{loss}.yaml").items():
        if "${" not in str(value) and not key.endswith("_cov_ratio") and not key.startswith("entropy_mask_"):
            assert at(cfg, LOSS + key) == value, key
    if loss.endswith("_erc"):
        assert (at(cfg, LOSS + "entropy_mask_low"), at(cfg, LOSS + "entropy_mask_high")) == (0.99, 1.01)
    if (CONFIGS / "loss_actor" / f"{loss}.yaml").exists():
        for key, value in group(f"loss_actor/{loss}.yaml").items():
            assert at(cfg, PREFIX + key) == value, key
    if loss in ("clip_cov", "kl_cov"):
        assert at(cfg, LOSS + f"{loss}_ratio") == 0.02
    assert at(cfg, "algorithm.adv_estimator") == "grpo" and at(cfg, "actor_rollout_ref.model.path") == f"{w}/model"
    assert at(cfg, "trainer.logger") == ["console", "file"] and at(cfg, "trainer.experiment_name") == f"cpu-tiny-{loss}"
    assert at(cfg, "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH") == f"{w}/cpu-tiny-{loss}.jsonl"
    assert at(cfg, "trainer.device") == "cpu"
    # two mini-batches of 8 prompts, micro-batches of the whole mini-batch (8 x 8 responses), one process
    assert at(cfg, PREFIX + "ppo_mini_batch_size") == 8 and at(cfg, PREFIX + "ppo_micro_batch_size_per_gpu") == 64


def test_cpu_recipe_on_two_nodes(tmp_path):
    cfg = config("cpu_tiny", tmp_path, NNODES="2", WORK_DIR=str(tmp_path))
    assert at(cfg, "trainer.nnodes") == 2 and at(cfg, PREFIX + "ppo_micro_batch_size_per_gpu") == 32


def test_cpu_recipe_dry_run_builds_its_assets_and_validates(tmp_path):
    """DRY_RUN=1: the model and data are built locally, the CPU-mode config composes and validates.

    The launcher's CPU branch: the script runs for real and launches ``python -m verl_ext.main_ppo`` with
    ``VERL_PLATFORM=cpu`` exported (read from the environment the launched process was given, recorded by
    ``launch_record``); the entry point then runs in this process with that environment, where a missing variable
    would be an error (``launch_record`` refuses the entry point's restart). The process itself (exec, exit status,
    no traceback) is launched for real by the GPU branch's test above: the two branches differ only in the export."""
    env = {**base_env(tmp_path), "DRY_RUN": "1", "WORK_DIR": str(tmp_path / "w"), "LOSS": "clip_cov"}
    res = run_launcher(["bash", str(CPU_RECIPE)], env=env, timeout=300, cwd=tmp_path)
    assert res.launched == 1 and res.launches[0]["env"].get("VERL_PLATFORM") == "cpu", res.stderr[-3000:]
    assert res.returncode == 0, res.stderr[-3000:]
    assert "platform  : CPU mode (VERL_PLATFORM=cpu" in res.stdout
    assert "loss      : clip_cov clip_cov_ratio=0.02" in res.stdout
    assert (tmp_path / "w" / "model" / "config.json").is_file() and (tmp_path / "w" / "train.parquet").is_file()


@pytest.mark.parametrize("script", ["dapo_skywork", "dapo_entropic"])
def test_entropy_target_is_an_override(script, tmp_path):
    assert at(config(script, tmp_path, "verl_ext.entropy_control.target=1.5"), "verl_ext.entropy_control.target") == 1.5


def test_the_documented_own_recipe_composes(tmp_path):
    """docs/recipes.md's example of a user's own recipe composes as written, from a folder of its own, with the
    groups' values and its own on top, and reads no environment."""
    text = (REPO / "docs" / "recipes.md").read_text()
    section = text[text.index("### Writing your own recipe"):]
    example = re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1)
    assert not any(map(reads_the_environment, example.splitlines())), "the example reads the environment"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "gsm8k_erc_wide.yaml").write_text(example)
    (tmp_path / "home").mkdir()
    cmd = [sys.executable, "-m", "verl_ext.main_ppo", "--config-path", str(tmp_path / "mine"), "--config-name",
           "gsm8k_erc_wide"]  # fmt: skip
    env = case_env(tmp_path, {})
    env.pop("PRINT_CMD")
    cfg = OmegaConf.to_container(compose_command(cmd, env, tmp_path))
    assert (at(cfg, LOSS + "loss_mode"), at(cfg, LOSS + "entropy_mask_low"), at(cfg, LOSS + "entropy_mask_high")) == (
        "grpo_erc", 0.9, 1.1)
    assert at(cfg, "actor_rollout_ref.model.path") == "Qwen/Qwen2.5-7B-Instruct"
    assert at(cfg, "actor_rollout_ref.rollout.tensor_model_parallel_size") == 2
    assert at(cfg, "reward.reward_manager.name") == "naive" and at(cfg, "trainer.experiment_name") == "gsm8k-erc-wide"
