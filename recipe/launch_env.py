"""The environment variables a recipe launch reads, and the Hydra overrides each becomes: the one list of them.

A recipe's YAML (``recipe/<name>.yaml`` and the groups of ``configs/``) holds values and never reads the
environment. ``recipe/launch.sh`` turns the few variables of a cluster - paths, nodes, GPUs per node, parallelism,
project and run names, loggers - into Hydra overrides placed on the printed command line **before** the user's own
arguments, as verl's example scripts do. An override given on the command line therefore wins over a variable that
names the same key (Hydra applies the later one).

Everything else (sizes, steps, learning rates, seeds, ratios, groups) is a Hydra override the user writes. Three
shorthands remain for the CPU recipes and print the overrides they stand for: ``SCALE=cpu`` (``scale=cpu``),
``MODEL=<m>`` (``cpu_model=<m>``) and ``LOSS=<loss>`` (``recipe/cpu_tiny.sh``'s loss groups).

A value is passed through as the key's value, and the composed config's validation checks it
(:mod:`verl_ext.checks.recipe_checks`): a bad ``NNODES`` gives the same one-line error as a bad ``trainer.nnodes=``.
Only what has no override form is checked here: a flag must be 0 or 1, a choice one of its values, a list non-empty,
a variable must belong to the recipe it is given to, and ``SCALE`` must agree with a ``scale=`` argument. A failure
exits 2 naming the variable.

Command line (used by ``recipe/launch.sh``, ``scripts/cluster/submit.sh`` and the docs)::

    python -m verl_ext.recipe.launch_env launch RECIPE [ARGS...]     # what recipe/launch.sh reads, in one process:
                                                    # cpu or gpu, then the overrides, each NUL-terminated
    python -m verl_ext.recipe.launch_env overrides RECIPE [ARGS...]  # the overrides, NUL-separated (ARGS: the
                                                    # launch's Hydra arguments); exit 2 naming a bad variable
    python -m verl_ext.recipe.launch_env platform RECIPE [ARGS...]   # cpu or gpu: whether the launch is CPU mode
    python -m verl_ext.recipe.launch_env names              # every variable name, one a line
    python -m verl_ext.recipe.launch_env table              # the variables as a markdown table (docs/recipes.md)

This module imports nothing of verl, and not the config groups' package (whose resolvers import OmegaConf): it runs
before every launch, and reads the groups' folder as files.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from importlib import util
from pathlib import Path
from typing import Mapping, Sequence

CPU_RECIPE = "cpu_tiny"
"""The recipe that always runs in CPU mode (``recipe/cpu_tiny.sh``)."""
EVAL_RECIPE = "eval"
"""The evaluation recipe (``recipe/eval.sh``)."""

OFFLOAD_KEYS = ("actor_rollout_ref.actor.fsdp_config.param_offload",
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                "actor_rollout_ref.ref.fsdp_config.param_offload")  # fmt: skip
LOSS_GROUP = "policy_loss@actor_rollout_ref.actor.policy_loss"
"""The group of a loss and the papers' values for it (``configs/policy_loss/``)."""
LOSS_ACTOR_GROUP = "loss_actor@actor_rollout_ref.actor"
"""The group of the actor settings a loss's paper pairs with it, where there are some (``configs/loss_actor/``)."""


def _configs() -> Path:
    """The config groups' folder (``configs/``, installed as the package ``verl_ext.configs``), found without
    importing that package."""
    spec = util.find_spec("verl_ext.configs")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("verl_ext.configs (the config groups) is not installed: reinstall verl_ext")
    return Path(next(iter(spec.submodule_search_locations)))


def _group_options(group: str) -> tuple[str, ...]:
    """The options of ``configs/<group>/`` (its YAML files' names, ``base`` aside), ``vanilla`` first."""
    names = sorted(p.name[:-5] for p in _configs().joinpath(group).iterdir()
                   if p.name.endswith(".yaml") and p.name != "base.yaml")  # fmt: skip
    return tuple(sorted(names, key=lambda name: name != "vanilla"))


LOSS_CHOICES = _group_options("policy_loss")
"""``LOSS``'s values: the policy-loss group's options (a loss's YAML group makes it a choice)."""


class LaunchEnvError(ValueError):
    """A launch variable holds a value the launcher cannot turn into an override; the message names it."""


@dataclass(frozen=True)
class Variable:
    """One environment variable of the launcher."""

    name: str
    """The variable's name."""
    keys: tuple[str, ...]
    """The config keys (or, for ``kind="group"``, the group) it sets; empty for the launcher's own switches."""
    kind: str
    """``text`` (passed as a quoted string), ``number`` (passed as written; the config's validation checks it),
    ``files`` / ``list`` (comma-separated, passed as a list), ``flag`` (0 or 1), ``group`` (a group choice),
    ``switch`` (read by ``recipe/launch.sh`` itself)."""
    meaning: str
    """What it is, for the docs' table."""
    scope: str = "all"
    """Which launches take it: ``all``, ``cpu`` (CPU mode: ``SCALE=cpu`` or ``cpu_tiny``), ``scaled`` (the recipes
    with a ``scale`` group: every recipe but ``cpu_tiny``), ``cpu_tiny`` or ``eval``."""
    choices: tuple[str, ...] = ()
    """The values a ``group`` or ``flag`` variable may hold."""


VARIABLES: tuple[Variable, ...] = (
    Variable("MODEL_PATH", ("actor_rollout_ref.model.path",), "text", "model directory or hub id"),
    Variable("DATA_DIR", ("verl_ext.recipe.data_dir",), "text",
             "where scripts/data/prepare_*.py wrote the parquet files (the families' file names are under it)"),
    Variable("TRAIN_FILE", ("data.train_files",), "files", "training parquet file(s), comma-separated"),
    Variable("VAL_FILE", ("data.val_files",), "files", "validation parquet file(s), comma-separated"),
    Variable("CKPTS_DIR", ("trainer.default_local_dir",), "text", "the run's checkpoint folder"),
    Variable("WORK_DIR", ("verl_ext.recipe.work_dir",), "text", "the folder of the model, data, checkpoints and run "
             "log", scope="cpu"),
    Variable("CKPT", ("trainer.resume_from_path",), "text",
             "the checkpoint folder (.../global_step_<N>) to evaluate", scope="eval"),
    Variable("NNODES", ("trainer.nnodes",), "number", "nodes"),
    Variable("GPUS_PER_NODE", ("trainer.n_gpus_per_node",), "number",
             "GPUs per node (CPU mode: training processes)"),
    Variable("GEN_TP", ("actor_rollout_ref.rollout.tensor_model_parallel_size",), "number",
             "vLLM tensor-parallel size: divides GPUS_PER_NODE, or a multiple of it dividing NNODES x GPUS_PER_NODE "
             "(a replica spans nodes)"),
    Variable("SP_SIZE", ("actor_rollout_ref.actor.ulysses_sequence_parallel_size",), "number",
             "Ulysses sequence-parallel size"),
    Variable("OFFLOAD", OFFLOAD_KEYS, "flag", "1: FSDP parameter and optimizer offload to the CPU",
             choices=("0", "1")),
    Variable("PROJECT_NAME", ("trainer.project_name",), "text", "the logger's project"),
    Variable("EXP_NAME", ("trainer.experiment_name",), "text",
             "the run's name (also names its CPU-mode checkpoint folder and log)"),
    Variable("LOGGERS", ("trainer.logger",), "list", "verl's trackers, comma-separated (e.g. console,wandb)"),
    Variable("VERL_EXT_CPU_PRECISION", ("verl_ext.cpu_precision",), "text", "the precision: fp32 or bf16",
             scope="cpu"),
    Variable("SCALE", ("scale",), "group", "shorthand: cpu runs the recipe in CPU mode, sizes shrunk", scope="scaled",
             choices=("gpu", "cpu")),
    Variable("MODEL", ("cpu_model",), "group", "shorthand: the CPU model, toy, tiny or smollm2", scope="cpu",
             choices=("toy", "tiny", "smollm2")),
    Variable("LOSS", (LOSS_GROUP, LOSS_ACTOR_GROUP), "group", "shorthand: the loss and its paper's settings (the "
             "second group where the loss has one)", scope="cpu_tiny",
             choices=LOSS_CHOICES),
    Variable("DRY_RUN", (), "switch", "1: compose and validate (verl_ext.dry_run=true), no Ray", choices=("0", "1")),
    Variable("PRINT_CMD", (), "switch", "1: print the command with every override and exit", choices=("0", "1")),
    Variable("PYTHON", (), "switch", "the interpreter (default python3)"),
)  # fmt: skip
"""Every variable ``recipe/launch.sh`` reads, in the order their overrides are printed."""

BY_NAME = {v.name: v for v in VARIABLES}
_NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$")


def names() -> list[str]:
    """Every variable's name."""
    return [v.name for v in VARIABLES]


_INTERPOLATION = re.compile(r"(\\*)\$\{")
_BEFORE_QUOTE = re.compile(r"(\\*)'")
_TRAILING = re.compile(r"(\\+)$")


def quote(value: str) -> str:
    """``value`` as a Hydra override's single-quoted string that the composed config reads back exactly.

    Two readers unescape it. OmegaConf, resolving the value, reads ``${`` as an interpolation: written ``\\${``, with
    the backslashes before it doubled. Hydra's override parser (``hydra/grammar/OverrideLexer.g4``, ``QUOTED_VALUE``)
    reads a quote after backslashes as ``\\'`` with the backslashes before it doubled, and the backslashes ending the
    string doubled; every other backslash is literal."""
    text = _INTERPOLATION.sub(lambda m: m.group(1) * 2 + "\\${", value)
    text = _BEFORE_QUOTE.sub(lambda m: m.group(1) * 2 + "\\'", text)
    text = _TRAILING.sub(lambda m: m.group(1) * 2, text)
    return f"'{text}'"


def _items(var: Variable, text: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise LaunchEnvError(f"{var.name}='{text}' is invalid: allowed one or more entries, comma-separated")
    return items


def _applies(var: Variable, recipe: str, cpu: bool) -> bool:
    return {"all": True, "cpu": cpu, "scaled": recipe != CPU_RECIPE, "cpu_tiny": recipe == CPU_RECIPE,
            "eval": recipe == EVAL_RECIPE}[var.scope]  # fmt: skip


def _scope_text(var: Variable) -> str:
    return {"cpu": "CPU mode (SCALE=cpu or recipe/cpu_tiny.sh)", "scaled": "the recipes with a scale (all but "
            "recipe/cpu_tiny.sh)", "cpu_tiny": "recipe/cpu_tiny.sh", "eval": "recipe/eval.sh"}[var.scope]  # fmt: skip


def _has_group_option(group: str, option: str) -> bool:
    return (_configs() / group / f"{option}.yaml").is_file()


def overrides_for(var: Variable, text: str) -> list[str]:
    """The overrides ``var`` set to ``text`` becomes (unchecked scope)."""
    if var.kind in ("flag", "group", "switch") and var.choices and text not in var.choices:
        raise LaunchEnvError(f"{var.name}='{text}' is invalid: allowed {', '.join(var.choices)}")
    if var.kind == "text":
        if not text:
            raise LaunchEnvError(f"{var.name} is set but empty: unset it or give a value")
        return [f"{key}={quote(text)}" for key in var.keys]
    if var.kind == "number":
        return [f"{key}={text if _NUMBER.match(text) else quote(text)}" for key in var.keys]
    if var.kind in ("files", "list"):
        items = ",".join(quote(item) for item in _items(var, text))
        return [f"{key}=[{items}]" for key in var.keys]
    if var.kind == "flag":
        return [f"{key}={'true' if text == '1' else 'false'}" for key in var.keys]
    if var.kind == "group":
        if var.name == "LOSS":  # the loss's actor settings exist for some losses only (configs/loss_actor/)
            paired = _has_group_option("loss_actor", text)
            return [f"{LOSS_GROUP}={text}"] + ([f"{LOSS_ACTOR_GROUP}={text}"] if paired else [])
        return [f"{key}={text}" for key in var.keys]
    return []


def cpu_mode(recipe: str, environ: Mapping[str, str] | None = None, args: Sequence[str] = ()) -> bool:
    """Whether ``recipe`` launched with ``environ`` (default: this process's) and the Hydra arguments ``args`` runs in
    CPU mode: ``recipe/cpu_tiny.sh``, or ``SCALE=cpu``, or a ``scale=cpu`` argument (the last ``scale=`` argument is
    the one Hydra applies). ``SCALE`` and a ``scale=`` argument that disagree are an error naming both."""
    environ = os.environ if environ is None else environ
    if recipe == CPU_RECIPE:
        return True
    variable = environ.get("SCALE")
    argument = None
    for arg in args:
        if arg.startswith("scale="):
            argument = arg.removeprefix("scale=")
    if variable in BY_NAME["SCALE"].choices and argument is not None and argument != variable:
        raise LaunchEnvError(f"SCALE={variable} and the argument scale={argument} disagree: SCALE={variable} stands "
                             f"for scale={variable}; give one of them")  # fmt: skip
    return (argument if argument is not None else variable) == "cpu"


def overrides(recipe: str, environ: Mapping[str, str] | None = None, args: Sequence[str] = ()) -> list[str]:
    """The overrides the variables set in ``environ`` (default: this process's) make for ``recipe`` launched with the
    Hydra arguments ``args``, in :data:`VARIABLES`' order; a variable that does not apply to ``recipe`` is an error
    naming it, and so are ``SCALE`` and a ``scale=`` argument that disagree (:func:`cpu_mode`)."""
    environ = os.environ if environ is None else environ
    cpu = cpu_mode(recipe, environ, args)
    out: list[str] = []
    for var in VARIABLES:
        if var.name not in environ:
            continue
        if not _applies(var, recipe, cpu):
            raise LaunchEnvError(f"{var.name} is set, but it applies to {_scope_text(var)} only; this launch is "
                                 f"recipe/{recipe}.sh{' in CPU mode' if cpu else ''}: unset it")  # fmt: skip
        out += overrides_for(var, environ[var.name])
    return out


SCOPE_COLUMN = {"all": "every recipe", "cpu": "CPU mode", "scaled": "all but cpu_tiny", "cpu_tiny": "cpu_tiny",
                "eval": "eval"}  # fmt: skip
"""The docs table's "for" column of each scope."""


def table() -> str:
    """The variables as a markdown table."""
    rows = ["| variable | sets | for | what |", "| --- | --- | --- | --- |"]
    for var in VARIABLES:
        sets = ", ".join(f"`{k}`" for k in var.keys) or "(the launcher)"
        rows.append(f"| `{var.name}` | {sets} | {SCOPE_COLUMN[var.scope]} | {var.meaning} |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if argv[:1] == ["names"] and len(argv) == 1:
        print("\n".join(names()))
        return 0
    if argv[:1] == ["table"] and len(argv) == 1:
        print(table())
        return 0
    if argv[:1] in (["launch"], ["overrides"], ["platform"]) and len(argv) >= 2:
        try:
            if argv[0] == "platform":
                print("cpu" if cpu_mode(argv[1], args=argv[2:]) else "gpu")
                return 0
            items = overrides(argv[1], args=argv[2:])
            if argv[0] == "launch":
                items.insert(0, "cpu" if cpu_mode(argv[1], args=argv[2:]) else "gpu")
        except LaunchEnvError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        sys.stdout.write("".join(f"{item}\0" for item in items))
        return 0
    print("usage: python -m verl_ext.recipe.launch_env names | table | launch RECIPE [ARGS...] | overrides RECIPE "
          "[ARGS...] | platform RECIPE [ARGS...]", file=sys.stderr)  # fmt: skip
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
