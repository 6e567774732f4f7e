"""Hyperparameter validation, Hydra groups, packaging and plugin registration."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import _fresh_python
import _oracles as O
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
from verl.workers.config import PolicyLossConfig as VerlPolicyLossConfig
from verl_ext.config import ConfigError, PolicyLossConfig

ROOT = Path(__file__).resolve().parents[1]
LOSSES = ("clip_cov", "kl_cov", "grpo_erc", "gppo_erc", "high_entropy", "entropy_adv", "bapo")
"""verl_ext's seven losses (verl_ext.losses.SPECS), in the order the registry probes print them."""

BAD_VALUES = [
    ("clip_cov_ratio", 0.0, r"\(0, 1\]"),
    ("clip_cov_ratio", 1.5, r"\(0, 1\]"),
    ("kl_cov_ratio", -0.1, r"\(0, 1\]"),
    ("kl_cov_ratio", "lots", "a number"),
    ("clip_cov_lb", 6.0, "below clip_cov_ub"),
    ("ppo_kl_coef", -1.0, ">= 0"),
    ("gppo_beta1", -0.5, ">= 0"),
    ("gppo_beta2", -0.5, ">= 0"),
    ("entropy_mask_low", 1.0, "0 <= entropy_mask_low < 1"),
    ("entropy_mask_low", -0.1, "0 <= entropy_mask_low < 1"),
    ("entropy_mask_high", 1.0, "entropy_mask_high > 1"),
    ("cov_scope", "global", r"\['batch', 'micro'\]"),
    ("cov_seed", -1, "integer >= 0"),
    ("entropy_adv_kappa", 1.0, r"a number > 1, as the paper requires"),  # arXiv 2506.14758 needs kappa > 1
    ("entropy_adv_kappa", 0.5, r"a number > 1"),
    ("entropy_adv_alpha", 0.0, "a number > 0"),
    ("high_entropy_ratio", 0.0, r"\(0, 1\]"),
    ("high_entropy_scope", "global", r"\['batch', 'micro'\]"),
    ("bapo_rho0", 1.0, r"a share in \(0, 1\)"),
    ("bapo_clip_low_step", 0.0, "a number > 0"),
    ("bapo_scope", "batch", r"\['step', 'micro'\]"),
]


@pytest.mark.parametrize("key,value,allowed", BAD_VALUES)
def test_bad_hyperparameter_rejected_at_config_time(key, value, allowed):
    with pytest.raises(ConfigError, match=rf"actor_rollout_ref\.actor\.policy_loss\.{key}: .*invalid: allowed.*{allowed}") as err:
        PolicyLossConfig(**{key: value})
    assert err.value.key == f"actor_rollout_ref.actor.policy_loss.{key}"


@pytest.mark.parametrize("key,value,allowed", [b for b in BAD_VALUES if b[0] in ("clip_cov_ratio", "kl_cov_ratio", "ppo_kl_coef")])
def test_bad_value_in_plain_verl_config_rejected_by_the_loss(key, value, allowed):
    """A user of verl's own PolicyLossConfig (no verl_ext group) still gets the named error."""
    name = "kl_cov" if key != "clip_cov_ratio" else "clip_cov"
    cfg = O.actor_config(VerlPolicyLossConfig(loss_mode=name, **{key: value}))
    old, lp, adv, mask = O.batch()
    with pytest.raises(ConfigError, match=rf"policy_loss\.{key}: "):
        POLICY_LOSS_REGISTRY[name](old, lp, adv, mask, "token-mean", cfg, None)


def test_bad_actor_clip_values_rejected():
    old, lp, adv, mask = O.batch()
    h = torch.ones_like(old)
    cfg = O.actor_config(PolicyLossConfig(), clip_ratio_c=1.0)
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.actor\.clip_ratio_c: 1.0 is invalid"):
        POLICY_LOSS_REGISTRY["grpo_erc"](old, lp, adv, mask, "token-mean", cfg, None, entropy=h, old_entropy=h)
    cfg = O.actor_config(PolicyLossConfig(), eps_low=-0.1)
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.actor\.clip_ratio_low: clip_ratio_low=-0.1"):
        POLICY_LOSS_REGISTRY["clip_cov"](old, lp, adv, mask, "token-mean", cfg, None)


def test_defaults_keep_verl_names_and_values():
    ours, verls = PolicyLossConfig(), VerlPolicyLossConfig()
    for key in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef"):
        assert getattr(ours, key) == getattr(verls, key), key
    assert (ours.entropy_mask_low, ours.entropy_mask_high) == (0.8, 1.2)
    assert (ours.gppo_beta1, ours.gppo_beta2) == (0.75, 1.0)
    assert isinstance(ours, VerlPolicyLossConfig)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("VERL_USE_EXTERNAL_MODULES", "PYTHONPATH")}


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, cwd="/", env=_env(), timeout=300, **kw)


def _fresh(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (verl's plugins load when it imports verl: tests/_fresh_python.py), run from
    ``/`` without ``PYTHONPATH``: the installed package, not the checkout."""
    return _fresh_python.run(code, _env(), cwd="/")


@pytest.mark.parametrize("first", ["verl", "verl_ext.config"])
def test_fresh_import_of_verl_registers_verl_ext_losses(first):
    """Whichever is imported first. ``verl_ext.config`` first used to start verl's plugin load while it was half-built:
    the losses could not import its helpers, verl swallowed the ImportError, and no loss of verl_ext was registered."""
    code = (
        f"import {first}\n"
        "from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY as R\n"
        f"print(*[R[n].__module__ for n in {LOSSES!r}])\n"
    )
    out = _fresh(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [f"verl_ext.losses.{name}" for name in LOSSES]


def test_ensure_registered_fails_loudly_when_plugins_are_disabled():
    code = "import verl, verl_ext.registration as r\nfrom verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY as R\n"
    code += "import verl.trainer.ppo.core_algos as c\nR['clip_cov'] = lambda *a, **k: None\nr.ensure_registered()\n"
    out = _fresh(code)
    assert out.returncode != 0
    assert "verl_ext losses ['clip_cov'] are not registered" in out.stderr


@pytest.mark.parametrize("loss", LOSSES)
def test_hydra_group_composes_into_verl_cli(loss):
    """The documented override syntax for verl's own entry point builds verl_ext's dataclass."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from verl.utils.config import omega_conf_to_dataclass

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(
            config_name="ppo_trainer",
            overrides=[
                "hydra.searchpath=[pkg://verl_ext.configs]",
                f"+policy_loss@actor_rollout_ref.actor.policy_loss={loss}",
                "actor_rollout_ref.actor.policy_loss.entropy_mask_low=0.95",
            ],
        )
    node = cfg.actor_rollout_ref.actor.policy_loss
    built = omega_conf_to_dataclass(node)
    assert type(built) is PolicyLossConfig
    assert built.loss_mode == loss
    assert built.entropy_mask_low == 0.95
    expected = {"clip_cov": ("clip_cov_ratio", 0.0002), "kl_cov": ("kl_cov_ratio", 0.002),
                "high_entropy": ("high_entropy_ratio", 0.2), "entropy_adv": ("entropy_adv_kappa", 2.0)}  # fmt: skip
    if loss in expected:
        key, value = expected[loss]
        assert getattr(built, key) == value
    GlobalHydra.instance().clear()


def test_every_yaml_key_has_a_comment():
    """Every top-level key and every key with a value, in the config groups and the recipes, has a comment line
    right above it."""
    for path in sorted([*(ROOT / "configs").rglob("*.yaml"), *(ROOT / "recipe").glob("*.yaml")]):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            text = line.strip()
            if not text or text.startswith(("#", "-")) or ":" not in text:
                continue
            if not line.startswith(" ") or text.partition(":")[2].strip():
                assert i > 0 and lines[i - 1].strip().startswith("#"), f"{path.name}:{i + 1} '{line}' has no comment"


@pytest.mark.skipif(not (ROOT / "pyproject.toml").exists(), reason="needs the source tree")
def test_wheel_ships_configs_and_entry_point(tmp_path):
    """A plain (non-editable) install must find configs/: they are packaged as verl_ext.configs."""
    out = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT)])
    assert out.returncode == 0, out.stdout + out.stderr
    wheel = next(tmp_path.glob("verl_ext-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for loss in (*LOSSES, "base"):
        assert f"verl_ext/configs/policy_loss/{loss}.yaml" in names
    recipes = {p.name for p in (ROOT / "recipe").iterdir() if p.suffix in (".sh", ".yaml")}
    assert {n.split("/")[-1] for n in names if n.startswith("verl_ext/recipe/") and n.endswith((".sh", ".yaml"))} == recipes
    for group in ("family", "scale", "cpu_model", "platform", "loss_actor", "entropy_control", "eval_protocol"):
        assert any(n.startswith(f"verl_ext/configs/{group}/") and n.endswith(".yaml") for n in names), group
    assert "verl_ext/configs/cpu_run.yaml" in names  # what every CPU-mode recipe shares
    for package in ("testbed", "driver", "checks", "control"):  # the packages of the new layout
        assert f"verl_ext/{package}/__init__.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[verl.plugins]" in text and "verl_ext = verl_ext.registration:register" in text
    assert "verl_ext_cpu = verl_ext.cpu.plugin" in text
    assert "[vllm.general_plugins]" in text and "verl_ext_cpu = verl_ext.cpu.vllm_plugin:register" in text


def test_ci_runs_exactly_the_readme_quick_start_commands():
    """CI runs the README's set-up command, then its two test tiers (fast, then end-to-end), verbatim and in order;
    besides them only lines that print where and how long (``echo "ci: ..."``)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = [b.strip() for b in re.findall(r"```bash\n(.*?)```", quick, flags=re.S)]
    ci_lines = [line for line in (root / ".ci" / "run").read_text().splitlines() if line and not line.startswith(("#", "set ", "cd "))]
    reports = [line for line in ci_lines if line.startswith("echo ")]
    assert reports and all(line.startswith('echo "ci: ') for line in reports), reports
    ci_lines = [line for line in ci_lines if line not in reports]
    readme_lines = [blocks[0], *(line.split("#")[0].strip() for line in blocks[1].splitlines())]
    assert readme_lines == ci_lines, (readme_lines, ci_lines)  # the set-up-and-train block, then the test block
    assert ci_lines[1:] == ["python -m pytest -q", "python -m pytest -q -m e2e"]
    assert "bash scripts/install_cpu.sh" in blocks[0] and "bash recipe/cpu_tiny.sh" in blocks[0]


def test_pyproject_lists_exactly_the_packages_in_the_tree():
    """A subpackage missing from pyproject is missing from the wheel; one listed but absent breaks every
    install (the failure of an earlier CI run)."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    setup = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    in_tree = {".".join(p.parent.relative_to(root).parts) for p in (root / "verl_ext").rglob("__init__.py")}
    for mapped in ("verl_ext.configs", "verl_ext.recipe"):  # package-dir mapping: configs/, recipe/ ship inside
        in_tree.add(mapped)
        assert (root / setup["package-dir"][mapped] / "__init__.py").is_file()
    assert listed == in_tree, f"listed only: {sorted(listed - in_tree)}, in the tree only: {sorted(in_tree - listed)}"


REGISTRY_PROBE = (
    "import verl\n"
    "from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY as R\n"
    f"print(' '.join(R[name].__module__ for name in {LOSSES!r}))\n"
)


def probe_registry(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("RANK", "WG_BACKEND", "VERL_EXT_KEEP_VERL_COV", "VERL_PLATFORM")}  # fmt: skip
    return _fresh_python.run(REGISTRY_PROBE, {**clean, **env})


def test_verl_ext_replaces_verl_cov_losses_and_says_so_once_on_rank_0():
    """verl's rank-0 training worker (verl's worker group sets WG_BACKEND=ray and RANK) says it; nothing else does
    (the next test), not even a process that inherited RANK=0 from a launcher or a test."""
    done = probe_registry(RANK="0", WG_BACKEND="ray")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [f"verl_ext.losses.{name}" for name in LOSSES]
    lines = [line for line in done.stderr.splitlines() if "replacing verl's built-ins" in line]
    assert lines == ["verl_ext: clip_cov and kl_cov are verl_ext's (batch-scope selection), replacing verl's built-ins "
                     "of the same names; VERL_EXT_KEEP_VERL_COV=1 keeps verl's"]  # fmt: skip


@pytest.mark.parametrize("env", [{"RANK": "1", "WG_BACKEND": "ray"}, {"RANK": "0"}, {}],
                         ids=["rank1", "rank0_alone", "none"])  # fmt: skip
def test_every_other_process_registers_verl_ext_cov_losses_silently(env):
    """The same registration as verl's rank-0 worker (the test above), without its line: one fresh interpreter each."""
    other = probe_registry(**env)
    assert other.returncode == 0, other.stderr[-3000:]
    assert other.stdout.split() == [f"verl_ext.losses.{name}" for name in LOSSES]
    assert "clip_cov and kl_cov" not in other.stderr, env


def test_keep_verl_cov_switch_keeps_verl_builtins_and_registers_the_others():
    done = probe_registry(RANK="0", WG_BACKEND="ray", VERL_EXT_KEEP_VERL_COV="1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["verl.trainer.ppo.core_algos", "verl.trainer.ppo.core_algos",
                                   *(f"verl_ext.losses.{name}" for name in LOSSES[2:])]  # fmt: skip
    assert ("VERL_EXT_KEEP_VERL_COV=1: clip_cov and kl_cov are verl's built-ins; verl_ext registered bapo, "
            "entropy_adv, gppo_erc, grpo_erc, high_entropy") in done.stderr


@pytest.mark.parametrize("value,loss,message", [
    ("yes", "grpo_erc", "VERL_EXT_KEEP_VERL_COV='yes' is invalid: allowed 0"),
    ("1", "clip_cov", "'clip_cov' is verl's built-in here (VERL_EXT_KEEP_VERL_COV=1)"),
])  # fmt: skip
def test_keep_verl_cov_switch_errors_name_the_variable(value, loss, message):
    """A bad value, and verl_ext's trainer asked to run verl's built-in (whose selection, keys and metrics differ)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "VERL_PLATFORM")}
    argv = ["verl_ext.main_ppo", "verl_ext.dry_run=true", f"actor_rollout_ref.actor.policy_loss.loss_mode={loss}"]
    done = _fresh_python.run_module(argv, {**clean, "VERL_EXT_KEEP_VERL_COV": value})
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert message in done.stderr, done.stderr[-3000:]
