"""``python -m verl_ext.main_ppo``: config composition, dry run, validation errors, and the trainer hooks
(``old_entropy``, ``cov_selected``, actor worker) of the V1 and legacy trainers, without a GPU.

The V1 test runs verl's real ``_compute_old_log_prob`` / ``_update_actor`` against a real TransferQueue
store (local Ray, CPU); only the actor worker group is a stand-in that reads the store the way verl's
``tqbridge`` does for a real worker.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict

ROOT = Path(__file__).resolve().parents[2]
LOSSES = ("clip_cov", "kl_cov", "grpo_erc", "gppo_erc", "high_entropy", "entropy_adv", "bapo")

import _fresh_python  # noqa: E402
from _trainer_fakes import CLUSTER  # noqa: E402

# Per-loss overrides, all without `+`; the value the summary must show.
LOSS_OVERRIDES = {
    "clip_cov": (["actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.001"], "clip_cov_ratio=0.001"),
    "kl_cov": (["actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.002"], "kl_cov_ratio=0.002"),
    "grpo_erc": (["actor_rollout_ref.actor.policy_loss.entropy_mask_low=0.95"], "entropy_mask_low=0.95"),
    "gppo_erc": (["actor_rollout_ref.actor.policy_loss.gppo_beta1=1.0"], "gppo_beta1=1.0"),
    "high_entropy": (["actor_rollout_ref.actor.policy_loss.high_entropy_ratio=0.3"], "high_entropy_ratio=0.3"),
    "entropy_adv": (["actor_rollout_ref.actor.policy_loss.entropy_adv_kappa=1.5"], "entropy_adv_kappa=1.5"),
    "bapo": (["actor_rollout_ref.actor.policy_loss.bapo_rho0=0.4"], "bapo_rho0=0.4"),
}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def run_cli(*overrides: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m verl_ext.main_ppo OVERRIDES`` in a fresh interpreter (tests/_fresh_python.py)."""
    return _fresh_python.run_module(["verl_ext.main_ppo", *overrides], _env(), cwd=cwd)


def dry(cfg) -> tuple[int, str, str]:
    from verl_ext.checks.dry_run import dry_run

    out, err = io.StringIO(), io.StringIO()
    return dry_run(cfg, out=out, err=err), out.getvalue(), err.getvalue()


# ---------------------------------------------------------------------------------------------------
# Entry point and dry run
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", LOSSES)
def test_cli_dry_run_every_loss(loss, tmp_path, launch_record):
    """The command line, one launch per loss (trainers alternate; the matrix is in-process): the arguments of
    ``python -m verl_ext.main_ppo`` composed with Hydra's compose API and the entry point's own search path, then the
    entry point's own ``run``, in this process (``tests/scripts/launch_record.py``). The process itself (hydra.main
    composing the same arguments, its exit status) is launched by :func:`test_cli_bad_value_exits_2_naming_the_key`."""
    use_v1 = loss in ("clip_cov", "grpo_erc")
    overrides, shown = LOSS_OVERRIDES[loss]
    proc = launch_record.run_main_ppo(
        ["verl_ext.dry_run=true", f"policy_loss@actor_rollout_ref.actor.policy_loss={loss}", *CLUSTER, *overrides,
         f"trainer.use_v1={str(use_v1).lower()}"], env=_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"loss      : {loss} " in proc.stdout and shown in proc.stdout
    assert ("V1 trainer (trainer.v1.trainer_mode=sync)" if use_v1 else "legacy RayPPOTrainer") in proc.stdout
    assert "2 node(s) x 8 GPU(s) = 16" in proc.stdout
    assert "not a local directory" in proc.stdout  # the model was not loaded
    assert "invalid config" not in proc.stderr
    # GRPO has no critic: verl's trainer says so once per run; verl_ext's checks, which ask the same, add nothing
    assert "Disabled critic" not in proc.stderr


def test_cli_bad_value_exits_2_naming_the_key(tmp_path):
    """A real ``python -m verl_ext.main_ppo`` process (hydra.main, the entry point's config path, ``sys.exit``): a bad
    value exits 2 with the README's line, and no summary."""
    proc = run_cli(
        "verl_ext.dry_run=true", "policy_loss@actor_rollout_ref.actor.policy_loss=grpo_erc", *CLUSTER,
        "actor_rollout_ref.actor.policy_loss.entropy_mask_low=1.5", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert ("verl_ext: invalid config: actor_rollout_ref.actor.policy_loss.entropy_mask_low: 1.5 is invalid: allowed "
            "0 <= entropy_mask_low < 1") in proc.stderr  # the README's example, verbatim
    assert "verl_ext dry run" not in proc.stdout


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("use_v1", [True, False])
def test_dry_run_matrix(compose, loss, use_v1):
    from verl_ext.checks.dry_run import validate

    overrides, shown = LOSS_OVERRIDES[loss]
    cfg = compose(f"policy_loss@actor_rollout_ref.actor.policy_loss={loss}", *overrides, f"trainer.use_v1={use_v1}")
    status, out, err = dry(cfg)
    assert status == 0, err
    assert f"loss      : {loss} " in out and shown in out
    built = validate(cfg).built["actor_rollout_ref.actor"].policy_loss
    key, value = shown.split("=")
    assert built.loss_mode == loss and str(getattr(built, key)) == value and type(built).__module__ == "verl_ext.config"
    assert ("V1 trainer" if use_v1 else "legacy RayPPOTrainer") in out
    assert ("old_entropy" in out) == (loss in ("grpo_erc", "gppo_erc"))
    assert ("cov_selected" in out) == (loss in ("clip_cov", "kl_cov"))


def test_new_keys_need_no_plus(compose):
    """Every verl_ext key is in the composed config, so plain overrides reach the built dataclasses."""
    from verl_ext.checks.dry_run import validate

    cfg = compose(
        "actor_rollout_ref.actor.policy_loss.loss_mode=gppo_erc",
        "actor_rollout_ref.actor.policy_loss.entropy_mask_low=0.9",
        "actor_rollout_ref.actor.policy_loss.entropy_mask_high=1.1",
        "actor_rollout_ref.actor.policy_loss.gppo_beta1=0.5",
        "actor_rollout_ref.actor.policy_loss.gppo_beta2=0.25",
        "actor_rollout_ref.actor.policy_loss.cov_scope=micro",
        "actor_rollout_ref.actor.policy_loss.cov_seed=7",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_clip_method=soft",
        "actor_rollout_ref.actor.kl_clip_threshold=0.5",
        "actor_rollout_ref.actor.use_per_token_kl_threshold=true",
        "verl_ext.dry_run=true",
    )
    actor = validate(cfg).built["actor_rollout_ref.actor"]
    loss = actor.policy_loss
    assert (loss.loss_mode, loss.entropy_mask_low, loss.entropy_mask_high) == ("gppo_erc", 0.9, 1.1)
    assert (loss.gppo_beta1, loss.gppo_beta2, loss.cov_scope, loss.cov_seed) == (0.5, 0.25, "micro", 7)
    assert (actor.kl_clip_method, actor.kl_clip_threshold, actor.use_per_token_kl_threshold) == ("soft", 0.5, True)
    assert type(actor).__module__ == "verl_ext.trainer.actor_config" and type(loss).__module__ == "verl_ext.config"


def test_group_file_sets_its_defaults_and_plain_loss_mode_keeps_base(compose):
    kl_cov = compose("policy_loss@actor_rollout_ref.actor.policy_loss=kl_cov").actor_rollout_ref.actor.policy_loss
    assert (kl_cov.loss_mode, kl_cov.kl_cov_ratio, kl_cov.ppo_kl_coef) == ("kl_cov", 0.002, 1.0)
    plain = compose("actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov").actor_rollout_ref.actor.policy_loss
    assert (plain.loss_mode, plain.kl_cov_ratio, plain.ppo_kl_coef) == ("kl_cov", 0.0002, 0.1)  # verl's defaults
    assert plain.cov_scope == "batch" and plain._target_ == "verl_ext.config.PolicyLossConfig"
    default = compose().actor_rollout_ref.actor.policy_loss
    assert default.loss_mode == "vanilla" and default.entropy_mask_low == 0.8
    # every group file's own values (the papers', written there only) reach the composed loss config
    import yaml

    for loss in ("grpo_erc", "gppo_erc", "clip_cov", "high_entropy", "entropy_adv"):
        node = compose(f"policy_loss@actor_rollout_ref.actor.policy_loss={loss}").actor_rollout_ref.actor.policy_loss
        own = yaml.safe_load((ROOT / "configs" / "policy_loss" / f"{loss}.yaml").read_text())
        own.pop("defaults")
        for key, value in own.items():
            if "${" not in str(value):
                assert node[key] == value, (loss, key)


SDPA = "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"


@pytest.mark.parametrize(
    "overrides",
    [
        ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"],  # verl's default attention: flash_attention_2
        ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
         "+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_3"],
        ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=1", SDPA],
        ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=10"],
    ],
)  # fmt: skip
def test_allowed_sequence_parallel_and_dynamic_sampling_settings_pass(compose, overrides):
    status, out, err = dry(compose(*overrides))
    assert status == 0, err


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["actor_rollout_ref.actor.policy_loss.loss_mode=bogus"], "actor_rollout_ref.actor.policy_loss.loss_mode",
         ["'bogus'", "grpo_erc", "vanilla"]),
        (["policy_loss@actor_rollout_ref.actor.policy_loss=grpo_erc",
          "actor_rollout_ref.actor.policy_loss.entropy_mask_high=0.9"],
         "actor_rollout_ref.actor.policy_loss.entropy_mask_high", ["> 1"]),
        (["policy_loss@actor_rollout_ref.actor.policy_loss=clip_cov", "actor_rollout_ref.actor.policy_loss.cov_scope=all"],
         "actor_rollout_ref.actor.policy_loss.cov_scope", ["batch", "micro"]),
        (["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_clip_method=bogus"],
         "actor_rollout_ref.actor.kl_clip_method", ["bogus"]),
        (["actor_rollout_ref.actor.kl_clip_method=hard"], "actor_rollout_ref.actor.kl_clip_method", ["use_kl_loss"]),
        (["policy_loss@actor_rollout_ref.actor.policy_loss=gppo_erc", "algorithm.rollout_correction.bypass_mode=true"],
         "algorithm.rollout_correction.bypass_mode", ["old_entropy"]),
        (["policy_loss@actor_rollout_ref.actor.policy_loss=high_entropy", "algorithm.rollout_correction.bypass_mode=true"],
         "algorithm.rollout_correction.bypass_mode", ["loss_mode=high_entropy", "old-log-prob pass"]),
        (["verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.target=0.3",
          "verl_ext.entropy_control.controller=entropic", "verl_ext.entropy_control.actuator=pos_weight",
          "algorithm.rollout_correction.bypass_mode=true"],
         "algorithm.rollout_correction.bypass_mode", ["verl_ext.entropy_control.enable=true"]),
        (["verl_ext.entropy_control.enable=true", "verl_ext.entropy_control.target=0.3",
          "verl_ext.entropy_control.controller=skywork", "verl_ext.entropy_control.actuator=cov_ratio"],
         "verl_ext.entropy_control.actuator", ["no off value"]),
        (["trainer.v1.trainer_mode=bogus"], "trainer.v1.trainer_mode", ["sync", "separate_async"]),
        (["verl_ext.dry_run=maybe"], "verl_ext.dry_run", ["true, false"]),
        (["actor_rollout_ref.rollout.n=1"], "actor_rollout_ref.rollout.n", ["grpo", ">= 2"]),
        (["actor_rollout_ref.actor.strategy=megatron"], "actor_rollout_ref.actor.strategy", ["fsdp2"]),
        (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null"], "actor_rollout_ref.actor",
         ["ppo_micro_batch_size"]),
        (["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", SDPA],
         "actor_rollout_ref.actor.ulysses_sequence_parallel_size", ["attn_implementation=sdpa", "flash_attention_2"]),
        (["actor_rollout_ref.ref.ulysses_sequence_parallel_size=2", "+actor_rollout_ref.model.override_config.attn_implementation=eager"],
         "actor_rollout_ref.ref.ulysses_sequence_parallel_size", ["eager", "monkey_patch.py"]),
        (["algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=10", "trainer.use_v1=false"],
         "algorithm.filter_groups.enable", ["legacy trainer", "trainer.use_v1=true"]),
        (["algorithm.filter_groups.enable=true"], "algorithm.filter_groups.max_num_gen_batches",
         ["integer >= 1", "hang"]),
    ],
)  # fmt: skip
def test_bad_values_name_the_key(compose, overrides, key, words):
    status, out, err = dry(compose(*overrides))
    assert status == 2 and out == ""
    assert err.startswith(f"verl_ext: invalid config: {key}: "), err
    assert all(w in err for w in words), err


@pytest.mark.parametrize("planted", ["policy_loss_post_init", "check_verl_ext"])
def test_a_bug_in_verl_exts_validation_is_a_traceback_not_an_invalid_config(compose, monkeypatch, tmp_path, planted):
    """A ``TypeError`` raised by verl_ext's own code while a config is validated - planted at the top of the policy
    loss's ``__post_init__`` (run while verl's dataclass of the actor is built) or in verl_ext's checks - is a bug: it
    propagates with its traceback from the dry run and from the entry point (as itself, or inside the error of
    Hydra's instantiation that met it), never the one line of a bad value. The same config passes unplanted, and a
    bad value verl's own ``__post_init__`` rejects is still the one line (``ppo_micro_batch_size_per_gpu=null`` in the
    table above)."""
    from hydra.errors import InstantiationException

    import verl_ext.checks.dry_run as dry_run_module
    import verl_ext.main_ppo as main_ppo
    from verl_ext.config import PolicyLossConfig

    assert dry(compose())[0] == 0

    def bug(*_args, **_kwargs):
        raise TypeError("a bug planted in verl_ext")

    if planted == "policy_loss_post_init":
        monkeypatch.setattr(PolicyLossConfig, "__post_init__", bug)
    else:
        monkeypatch.setattr(dry_run_module, "check_verl_ext", bug)
    with pytest.raises((TypeError, InstantiationException), match="a bug planted in verl_ext"):
        dry(compose())
    monkeypatch.chdir(tmp_path)
    with pytest.raises((TypeError, InstantiationException), match="a bug planted in verl_ext"):
        main_ppo.run(compose("verl_ext.dry_run=true"))


def test_a_failed_import_of_verls_v1_trainer_names_its_module_and_only_its_requirements_get_the_install_hint(monkeypatch):
    """``trainer.use_v1=true`` imports verl's V1 trainer: a missing TransferQueue (or a package it brings) is the
    config-time line with the install command; any other import failure propagates naming the module that failed."""
    import importlib

    from omegaconf import OmegaConf

    from verl_ext.checks import validation
    from verl_ext.config import ConfigError

    real = importlib.import_module
    cfg = OmegaConf.create({"trainer": {"use_v1": True}})
    for missing, hinted in (("transfer_queue", True), ("cachetools", True), ("some_broken_dependency", False)):
        def fail(name, *args, missing=missing):
            if name == "verl.trainer.ppo.v1":
                raise ModuleNotFoundError(f"No module named '{missing}'", name=missing)
            return real(name, *args)

        monkeypatch.setattr(validation.importlib, "import_module", fail)
        if hinted:
            with pytest.raises(ConfigError, match="pip install TransferQueue") as told:
                validation.check_trainer(cfg)
            assert told.value.key == "trainer.use_v1" and missing in told.value.message
        else:
            with pytest.raises(ModuleNotFoundError, match=missing):
                validation.check_trainer(cfg)


@pytest.mark.parametrize(
    "overrides, warns",
    [
        (["policy_loss@actor_rollout_ref.actor.policy_loss=grpo_erc", "actor_rollout_ref.actor.entropy_checkpointing=true"], True),
        (["policy_loss@actor_rollout_ref.actor.policy_loss=entropy_adv", "actor_rollout_ref.actor.entropy_checkpointing=true"], True),
        (["policy_loss@actor_rollout_ref.actor.policy_loss=high_entropy", "actor_rollout_ref.actor.policy_loss.high_entropy_scope=micro",
          "actor_rollout_ref.actor.entropy_checkpointing=true"], True),
        # batch-scope high_entropy, vanilla: no update entropy; an entropy bonus: the graph is needed
        (["policy_loss@actor_rollout_ref.actor.policy_loss=high_entropy", "actor_rollout_ref.actor.entropy_checkpointing=true"], False),
        (["actor_rollout_ref.actor.entropy_checkpointing=true"], False),
        (["policy_loss@actor_rollout_ref.actor.policy_loss=grpo_erc", "actor_rollout_ref.actor.entropy_checkpointing=true",
          "actor_rollout_ref.actor.entropy_coeff=0.001"], False),
        (["policy_loss@actor_rollout_ref.actor.policy_loss=grpo_erc"], False),
    ],
)  # fmt: skip
def test_entropy_checkpointing_with_an_update_entropy_loss_warns_of_its_memory(compose, overrides, warns):
    """verl's checkpointed entropy keeps a graph verl_ext's graph-free entropy does not need (1.73x vanilla's peak,
    benchmarks/bench_memory.py): said at config time, naming the key; the run is allowed."""
    import warnings

    from verl_ext.checks.validation import check_entropy_memory

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_entropy_memory(compose(*overrides))
    messages = [str(w.message) for w in caught if "entropy_checkpointing" in str(w.message)]
    assert bool(messages) == warns, messages
    if warns:
        assert messages[0].startswith("actor_rollout_ref.actor.entropy_checkpointing=True") and "set it to false" in messages[0].lower()


def test_real_run_validates_before_ray_and_picks_the_task_runner(compose, monkeypatch, tmp_path):
    import verl.trainer.main_ppo as verl_main

    from verl_ext import main_ppo
    from verl_ext.trainer.legacy import VerlExtTaskRunner
    from verl_ext.trainer.v1 import VerlExtTaskRunnerV1

    calls = []
    monkeypatch.setattr(verl_main, "run_ppo", lambda config, task_runner_class: calls.append(task_runner_class))
    monkeypatch.chdir(tmp_path)  # the run saves its resolved config under trainer.default_local_dir (relative)
    bad = compose("policy_loss@actor_rollout_ref.actor.policy_loss=grpo_erc",
                  "actor_rollout_ref.actor.policy_loss.entropy_mask_low=-1")  # fmt: skip
    assert main_ppo.run(bad) == 2 and calls == []
    monkeypatch.chdir(tmp_path)  # the run saves its resolved config under trainer.default_local_dir (relative)
    assert main_ppo.run(compose("policy_loss@actor_rollout_ref.actor.policy_loss=grpo_erc")) == 0
    saved = tmp_path / "checkpoints" / "verl_examples" / "gsm8k" / "resolved_config.yaml"
    assert "loss_mode: grpo_erc" in saved.read_text()
    assert main_ppo.run(compose("trainer.use_v1=false")) == 0
    assert calls == [VerlExtTaskRunnerV1, VerlExtTaskRunner]
    saved = list(tmp_path.rglob("resolved_config.yaml"))  # beside the checkpoints, before training
    assert len(saved) == 1 and "${" not in saved[0].read_text()



class FakeWatchdog:
    """Stands in for verl_ext.driver.watchdog.Watchdog in main_ppo: records how it was built; ``REPORT`` is what it
    found (None: nothing)."""

    REPORT: str | None = None
    LATE_REPORT: str | None = None
    """What it finds while the entry point waits (``wait_for_report``)."""
    made: list = []
    waits: list = []

    def __init__(self, **kwargs):
        FakeWatchdog.made.append(kwargs)
        self.report = FakeWatchdog.REPORT
        self.poll_s = kwargs.get("poll_s", 5.0)

    def start(self):
        pass

    def stop(self):
        pass

    def wait_for_report(self, timeout_s):
        FakeWatchdog.waits.append(timeout_s)
        self.report = self.report or FakeWatchdog.LATE_REPORT
        return self.report


@pytest.fixture()
def fake_watchdog(monkeypatch, tmp_path):
    import ray

    from verl_ext import main_ppo

    monkeypatch.setattr(main_ppo, "Watchdog", FakeWatchdog)
    monkeypatch.setattr(FakeWatchdog, "made", [])
    monkeypatch.setattr(FakeWatchdog, "REPORT", None)
    monkeypatch.setattr(FakeWatchdog, "LATE_REPORT", None)
    monkeypatch.setattr(FakeWatchdog, "waits", [])
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.chdir(tmp_path)  # the run saves its resolved config under trainer.default_local_dir (relative)
    return FakeWatchdog


def test_a_run_the_watchdog_stopped_prints_the_report_and_the_trainers_own_exception(compose, monkeypatch,
                                                                                      fake_watchdog, capsys):
    """The trainer's own exception (an NCCL abort, a dead worker's RayActorError) says why; the watchdog's report says
    which actor, node, step and checkpoint: both are printed, the report last."""
    import verl.trainer.main_ppo as verl_main

    from verl_ext import main_ppo

    def trainer(config, task_runner_class):
        raise RuntimeError("NCCL error: remote process exited or there was a network error")

    monkeypatch.setattr(verl_main, "run_ppo", trainer)
    fake_watchdog.REPORT = "Ray actor WorkerDict (id 0123, pid 7, node 10.0.0.7) died: NODE_DIED"
    assert main_ppo.run(compose()) == 1
    err = capsys.readouterr().err.rstrip().splitlines()
    assert err[-1] == f"verl_ext: stopped: {fake_watchdog.REPORT}"
    shown = "\n".join(err)
    assert "Traceback (most recent call last)" in shown and ", in trainer" in shown
    assert "RuntimeError: NCCL error: remote process exited or there was a network error" in shown


def test_the_trainers_exception_without_a_watchdog_report_propagates(compose, monkeypatch, fake_watchdog):
    import verl.trainer.main_ppo as verl_main

    from verl_ext import main_ppo

    def trainer(config, task_runner_class):
        raise RuntimeError("a bug")

    monkeypatch.setattr(verl_main, "run_ppo", trainer)
    with pytest.raises(RuntimeError, match="a bug"):
        main_ppo.run(compose())


def test_a_run_whose_samples_failed_ends_naming_the_first_one_not_the_replay_buffers_advice(compose, monkeypatch,
                                                                                           fake_watchdog, capsys):
    """verl's replay buffer stops the trainer when every sample of a step failed in the agent loop: the entry point
    prints the trainer's exception and then, as the run's last line, how many samples failed and the first one's
    exception (``verl_ext.failures``, as the agent loop workers published them); exit 1."""
    import verl.trainer.main_ppo as verl_main

    from verl_ext import failures, main_ppo

    def trainer(config, task_runner_class):
        raise RuntimeError("Sync replay buffer selected terminal groups with no materializable trajectories. Enable "
                           "trainer.v1.sampler.sync_refill_failed_groups to replace failed groups.")  # fmt: skip

    monkeypatch.setattr(verl_main, "run_ppo", trainer)
    monkeypatch.setattr(main_ppo, "sample_failures", lambda exc: (16, "ValueError: compute_score cannot parse 'x'"))
    assert main_ppo.run(compose()) == 1
    err = capsys.readouterr().err.rstrip().splitlines()
    assert err[-1] == failures.stopped_line(16, "ValueError: compute_score cannot parse 'x'") == (
        "verl_ext: stopped: 16 sample(s) failed in verl's rollout or reward loop, the first with ValueError: "
        "compute_score cannot parse 'x' (logged in full by the agent loop workers above)")
    assert any("no materializable trajectories" in line for line in err[:-1])
    # verl_ext's own error names its cause: the failed samples are not blamed for it
    from verl_ext.trainer.v1 import DynamicSamplingExhausted

    monkeypatch.setattr(verl_main, "run_ppo", lambda config, task_runner_class: (_ for _ in ()).throw(
        DynamicSamplingExhausted("DAPO dynamic sampling cannot fill the training batch of step 1")))
    with pytest.raises(DynamicSamplingExhausted):
        main_ppo.run(compose())


def test_the_watchdog_is_built_from_its_keys_and_enable_false_runs_none(compose, monkeypatch, fake_watchdog, capsys):
    import verl.trainer.main_ppo as verl_main

    from verl_ext import main_ppo

    monkeypatch.setattr(verl_main, "run_ppo", lambda config, task_runner_class: None)
    assert main_ppo.run(compose("verl_ext.watchdog.poll_s=2", "verl_ext.watchdog.health_failures=3",
                                "verl_ext.watchdog.health_timeout_s=4")) == 0  # fmt: skip
    assert [(m["poll_s"], m["health_failures"], m["health_timeout_s"]) for m in fake_watchdog.made] == [(2.0, 3, 4.0)]
    assert "watchdog is off" not in capsys.readouterr().err
    assert main_ppo.run(compose("verl_ext.watchdog.enable=false")) == 0
    assert len(fake_watchdog.made) == 1  # none built for this run
    off = [x for x in capsys.readouterr().err.splitlines() if "watchdog is" in x]
    assert off == ["verl_ext: the watchdog is off (verl_ext.watchdog.enable=false): a dead worker can leave the "
                   "trainer waiting for ever"]  # fmt: skip


@pytest.mark.parametrize(("override", "key", "words"), [
    ("verl_ext.watchdog.poll_s=0", "verl_ext.watchdog.poll_s", ["0", "> 0"]),
    ("verl_ext.watchdog.health_failures=0", "verl_ext.watchdog.health_failures", ["integer >= 1"]),
    ("verl_ext.watchdog.health_timeout_s=-1", "verl_ext.watchdog.health_timeout_s", ["> 0"]),
    ("verl_ext.watchdog.enable=sometimes", "verl_ext.watchdog.enable", ["true or false"]),
    ("+verl_ext.watchdog.poll=1", "verl_ext.watchdog.poll", ["poll_s", "health_failures"]),
])  # fmt: skip
def test_a_bad_watchdog_key_is_refused_at_config_time_naming_it(compose, override, key, words):
    status, out, err = dry(compose(override))
    assert status == 2 and out == ""
    assert err.startswith(f"verl_ext: invalid config: {key}: "), err
    assert all(w in err for w in words), err


# ---------------------------------------------------------------------------------------------------
# CPU mode is the composition's: the entry point runs it with VERL_PLATFORM=cpu
# ---------------------------------------------------------------------------------------------------


class Restarted(Exception):
    """Raised by the stand-in for os.execve: the entry point restarted itself with these arguments."""


def _no_platform_variables(monkeypatch):
    from verl_ext import main_ppo
    from verl_ext.cpu import mode as cpu_mode

    monkeypatch.delenv(cpu_mode.ENV_VAR, raising=False)
    monkeypatch.delenv(main_ppo.RESTARTED_VAR, raising=False)


def test_a_cpu_composition_without_verl_platform_restarts_with_it(compose, monkeypatch):
    """``bash recipe/dapo_kl_cov.sh scale=cpu`` (or ``platform=cpu``) composes CPU mode while the launcher exported
    no VERL_PLATFORM: the entry point restarts this very command once with VERL_PLATFORM=cpu, which every process of
    the run then inherits."""
    from verl_ext import main_ppo

    def execve(path, argv, env):
        raise Restarted(path, argv, env)

    _no_platform_variables(monkeypatch)
    monkeypatch.setattr(os, "execve", execve)
    with pytest.raises(Restarted) as info:
        main_ppo.ensure_platform(compose("platform=cpu"))
    path, argv, env = info.value.args
    assert path == sys.executable and argv == [sys.executable, *sys.orig_argv[1:]]
    assert env["VERL_PLATFORM"] == "cpu" and env[main_ppo.RESTARTED_VAR] == "1"
    assert main_ppo.ensure_platform(compose()) is None  # a GPU composition: nothing to do
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    assert main_ppo.ensure_platform(compose("platform=cpu")) is None  # the launcher set it: no restart


@pytest.mark.parametrize(
    ("variable", "overrides", "message"),
    [
        ("cpu", (), "VERL_PLATFORM=cpu is set but the composition is not CPU mode: add platform=cpu"),
        ("cuda", ("platform=cpu",), "VERL_PLATFORM='cuda' disagrees with the composition, which runs in CPU mode"),
    ],
)
def test_verl_platform_disagreeing_with_the_composition_is_an_error(compose, monkeypatch, capsys, variable, overrides,
                                                                    message):  # fmt: skip
    from verl_ext import main_ppo

    _no_platform_variables(monkeypatch)
    monkeypatch.setenv("VERL_PLATFORM", variable)
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("restarted"))
    assert message in main_ppo.ensure_platform(compose(*overrides))
    assert main_ppo.run(compose(*overrides)) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {main_ppo.ensure_platform(compose(*overrides))}"


def test_a_restart_that_did_not_take_is_an_error_not_a_loop(compose, monkeypatch):
    from verl_ext import main_ppo

    _no_platform_variables(monkeypatch)
    monkeypatch.setenv(main_ppo.RESTARTED_VAR, "1")
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("restarted twice"))
    assert "disagrees with the composition" in main_ppo.ensure_platform(compose("platform=cpu"))


# ---------------------------------------------------------------------------------------------------
# Trainer plumbing: registration of trainer classes and the actor worker
# ---------------------------------------------------------------------------------------------------


def test_v1_trainer_registered_only_inside_the_context():
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from verl_ext.trainer.v1 import VerlExtV1Mixin, v1_trainer_registered

    with v1_trainer_registered("sync") as cls:
        assert get_trainer_cls("sync") is cls
        assert issubclass(cls, PPOTrainerSync) and cls.__mro__[1] is VerlExtV1Mixin
    assert get_trainer_cls("sync") is PPOTrainerSync
    with pytest.raises(ValueError, match="Unknown trainer 'nope'"):
        with v1_trainer_registered("nope"):
            pass


def test_legacy_trainer_class_swapped_only_inside_the_context():
    from verl.trainer import main_ppo_v0
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from verl_ext.trainer.legacy import VerlExtRayPPOTrainer, legacy_trainer_class

    with legacy_trainer_class():
        assert main_ppo_v0.RayPPOTrainer is VerlExtRayPPOTrainer
    assert main_ppo_v0.RayPPOTrainer is RayPPOTrainer
    with pytest.raises(TypeError):
        with legacy_trainer_class(dict):
            pass


def test_task_runners_run_verl_ext_trainers(compose, monkeypatch):
    """verl's TaskRunner.run (replaced here by a probe) sees verl_ext's trainer class; afterwards verl's
    registry and module are as before."""
    from verl.trainer import main_ppo_v0
    from verl.trainer.main_ppo import TaskRunnerV1
    from verl.trainer.main_ppo_v0 import TaskRunner
    from verl.trainer.ppo.v1 import get_trainer_cls

    from verl_ext.trainer.legacy import VerlExtRayPPOTrainer, VerlExtTaskRunnerImpl
    from verl_ext.trainer.v1 import VerlExtTaskRunnerV1Impl, VerlExtV1Mixin

    seen = {}
    monkeypatch.setattr(TaskRunnerV1.__ray_actor_class__, "run",
                        lambda self, config: seen.update(v1=get_trainer_cls(config.trainer.v1.trainer_mode)))
    monkeypatch.setattr(TaskRunner.__ray_actor_class__, "run",
                        lambda self, config: seen.update(legacy=main_ppo_v0.RayPPOTrainer))  # fmt: skip
    VerlExtTaskRunnerV1Impl().run(compose("trainer.v1.trainer_mode=colocate_async"))
    VerlExtTaskRunnerImpl().run(compose("trainer.use_v1=false"))
    assert issubclass(seen["v1"], VerlExtV1Mixin) and seen["v1"].__name__ == "VerlExtPPOTrainerColocateAsync"
    assert seen["legacy"] is VerlExtRayPPOTrainer
    assert not issubclass(get_trainer_cls("colocate_async"), VerlExtV1Mixin)
    assert main_ppo_v0.RayPPOTrainer is not VerlExtRayPPOTrainer


def test_actor_roles_run_verl_ext_worker(compose):
    from verl.experimental.separation.engine_workers import DetachActorWorker
    from verl.trainer.ppo.utils import Role
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

    from verl_ext.trainer.actor_worker import VerlExtActorRolloutRefWorker
    from verl_ext.trainer.legacy import VerlExtTaskRunnerImpl
    from verl_ext.trainer.v1 import make_v1_trainer
    from verl_ext.trainer.workers import unwrap_ray_class, verl_ext_worker_cls

    cfg = compose("actor_rollout_ref.actor.use_kl_loss=true", "critic.enable=true",
                  "critic.ppo_micro_batch_size_per_gpu=2")  # fmt: skip
    # V1: verl's own _init_resource_pool_mgr, then the mixin's mapping
    trainer = object.__new__(make_v1_trainer(PPOTrainerSync))
    trainer.config = cfg
    trainer._init_resource_pool_mgr()
    assert unwrap_ray_class(trainer.role_worker_mapping[Role.ActorRolloutRef]) is VerlExtActorRolloutRefWorker
    assert unwrap_ray_class(trainer.role_worker_mapping[Role.Critic]) is TrainingWorker
    # legacy TaskRunner
    runner = VerlExtTaskRunnerImpl()
    actor_cls, _ = runner.add_actor_rollout_worker(cfg)
    assert actor_cls is VerlExtActorRolloutRefWorker
    assert unwrap_ray_class(runner.role_worker_mapping[Role.ActorRolloutRef]) is VerlExtActorRolloutRefWorker
    # a verl subclass (separate-async trainer's worker) keeps its own methods too
    combined = verl_ext_worker_cls(DetachActorWorker)
    assert combined.__mro__[1:3] == (VerlExtActorRolloutRefWorker, DetachActorWorker)
    assert verl_ext_worker_cls(ActorRolloutRefWorker) is VerlExtActorRolloutRefWorker
    with pytest.raises(TypeError, match="not a verl ActorRolloutRefWorker"):
        verl_ext_worker_cls(TrainingWorker)


def test_selection_step_is_unique_per_update():
    from verl_ext.trainer.hooks import selection_step

    steps = {selection_step(g, t, 4) for g in range(1, 6) for t in range(4)}
    assert len(steps) == 20
    assert selection_step(3) == 3 and selection_step(3, 1, 4) == 13


# ---------------------------------------------------------------------------------------------------
# Legacy trainer hooks on DataProto (no Ray)
# ---------------------------------------------------------------------------------------------------

from _trainer_fakes import P, PROMPT_LENS, R, RESPONSE_LENS, legacy_batch, legacy_trainer  # noqa: E402


def expected_response_entropy() -> torch.Tensor:
    """Oracle for the fake worker: the response token j of row i sits at sequence position p_i - 1 + j."""
    out = torch.zeros(len(PROMPT_LENS), R)
    for i, (p, r) in enumerate(zip(PROMPT_LENS, RESPONSE_LENS)):
        out[i, :r] = torch.arange(p - 1, p - 1 + r, dtype=torch.float32) + 100 * i
    return out


@pytest.mark.parametrize("loss", ["grpo_erc", "vanilla"])
def test_legacy_old_entropy_survives_fit_pop(compose, loss):
    trainer = legacy_trainer(compose, f"actor_rollout_ref.actor.policy_loss.loss_mode={loss}")
    batch = legacy_batch(old_log_probs=False)
    old_log_prob, _ = trainer._compute_old_log_prob(batch)
    old_log_prob.batch.pop("entropys")  # what verl's fit() does next
    batch = batch.union(old_log_prob)
    if loss == "vanilla":
        assert "old_entropy" not in batch.batch.keys()
        return
    assert torch.equal(batch.batch["old_entropy"], expected_response_entropy())
    trainer._update_actor(batch)
    sent = trainer.actor_rollout_wg.updates[-1]
    assert torch.equal(sent["old_entropy"], expected_response_entropy())  # reaches the actor update


def _kl_cov_oracle(batch, ratio: float) -> torch.Tensor:
    """Top floor(ratio * N) valid tokens by (A - mean A)(old - mean old), computed independently."""
    mask = batch.batch["response_mask"].bool()
    adv, old = batch.batch["advantages"].double(), batch.batch["old_log_probs"].double()
    cov = (adv - adv[mask].mean()) * (old - old[mask].mean())
    k = max(1, int(ratio * mask.sum().item()))
    flat = torch.where(mask, cov, torch.tensor(float("-inf"), dtype=torch.float64)).flatten()
    chosen = torch.zeros(flat.numel(), dtype=torch.bool)
    chosen[flat.topk(k).indices] = True
    return chosen.view_as(mask)


def test_legacy_cov_selected_reaches_every_mini_batch(compose):
    from verl.utils import tensordict_utils as tu

    trainer = legacy_trainer(compose, "policy_loss@actor_rollout_ref.actor.policy_loss=kl_cov",
                             "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.2")  # fmt: skip
    batch = legacy_batch()
    output = trainer._update_actor(batch)
    assert "cov_selected" not in batch.batch.keys()  # the step's own batch is left alone
    sent = trainer.actor_rollout_wg.updates[-1]
    oracle = _kl_cov_oracle(batch, 0.2)
    assert sent["cov_selected"].dtype == torch.bool and torch.equal(sent["cov_selected"], oracle)
    assert int(oracle.sum()) == int(0.2 * sum(RESPONSE_LENS))
    metrics = output.meta_info["metrics"]
    assert metrics["actor/kl_cov/batch_selected_frac"] == pytest.approx(oracle.sum().item() / sum(RESPONSE_LENS))
    # the worker splits the batch into shuffled mini-batches: each row keeps its own selection
    seen = []
    for mini in tu.make_iterator(sent.select("cov_selected", "row_id"), mini_batch_size=2, epochs=1, seed=1,
                                 dataloader_kwargs={"shuffle": True}):  # fmt: skip
        for row, selected in zip(mini["row_id"].tolist(), mini["cov_selected"]):
            assert torch.equal(selected, oracle[row])
            seen.append(row)
    assert sorted(seen) == [0, 1, 2, 3]


def test_legacy_micro_scope_sends_no_selection(compose):
    trainer = legacy_trainer(compose, "policy_loss@actor_rollout_ref.actor.policy_loss=clip_cov",
                             "actor_rollout_ref.actor.policy_loss.cov_scope=micro")  # fmt: skip
    trainer._update_actor(legacy_batch())
    assert "cov_selected" not in trainer.actor_rollout_wg.updates[-1].keys()


def test_legacy_clip_cov_selection_depends_on_step_and_seed(compose):
    overrides = ["policy_loss@actor_rollout_ref.actor.policy_loss=clip_cov",
                 "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.3",
                 "actor_rollout_ref.actor.policy_loss.clip_cov_lb=-100", "actor_rollout_ref.actor.policy_loss.clip_cov_ub=100"]  # fmt: skip

    def selection(step: int, *extra: str) -> torch.Tensor:
        trainer = legacy_trainer(compose, *overrides, *extra)
        trainer.global_steps = step
        trainer._update_actor(legacy_batch())
        return trainer.actor_rollout_wg.updates[-1]["cov_selected"]

    first = selection(1)
    assert int(first.sum()) == int(0.3 * sum(RESPONSE_LENS))
    assert torch.equal(first, selection(1))  # reproducible
    draws = {tuple(selection(s).flatten().tolist()) for s in range(1, 6)}
    assert len(draws) > 1  # a fresh draw per step


# ---------------------------------------------------------------------------------------------------
# V1 trainer hooks against a real TransferQueue store (local Ray, CPU)
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transfer_queue():
    import ray
    import transfer_queue as tq  # pinned in pyproject (verl's V1 trainer needs it): a failure where missing
    from omegaconf import OmegaConf

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield tq
    tq.close()
    if started:
        ray.shutdown()


def _nested(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


class FakeV1WorkerGroup:
    """Stands in for the actor worker group of the V1 trainer. Like verl's ``tqbridge`` on a real worker,
    it turns the ``KVBatchMeta`` it gets into the batch ``TensorDict`` (only the fields the meta lists)."""

    def __init__(self, tq):
        self.tq, self.updates = tq, []

    def compute_log_prob(self, meta):
        from verl.utils.transferqueue_utils import _meta_to_realdata

        data = _meta_to_realdata(meta)
        lens = data["input_ids"].offsets().diff().tolist()
        rows = [torch.arange(n, dtype=torch.float32) + 100 * i for i, n in enumerate(lens)]
        fields = TensorDict({"log_probs": -_nested(rows), "entropy": _nested(rows)}, batch_size=len(lens))
        return self.tq.kv_batch_put(keys=meta.keys, partition_id=meta.partition_id, fields=fields)

    def update_actor(self, meta):
        from verl.utils.transferqueue_utils import _meta_to_realdata

        self.updates.append(_meta_to_realdata(meta))
        return {"metrics": {"mfu": 0.1, "pg_loss": [0.0]}}


def v1_put_batch(tq, tag: str):
    """Put a 4-sample batch (nested, as the agent loop stores it, with a reward on each response's last token) under
    fresh keys in verl's ``{uid}_{session}_{index}`` form; uids pair rows 0-1 and 2-3 into GRPO groups."""
    g = torch.Generator().manual_seed(0)
    keys = [f"{tag}{i}_0_0" for i in range(len(PROMPT_LENS))]
    scores = [1.0, 0.0, 0.0, 1.0]
    fields = TensorDict({
        "input_ids": _nested([torch.randint(5, 100, (p + r,), generator=g) for p, r in zip(PROMPT_LENS, RESPONSE_LENS)]),
        "response_mask": _nested([torch.ones(r, dtype=torch.int64) for r in RESPONSE_LENS]),
        "responses": _nested([torch.randint(5, 100, (r,), generator=g) for r in RESPONSE_LENS]),
        "rm_scores": _nested([torch.nn.functional.pad(torch.tensor([s]), (r - 1, 0)) for s, r in zip(scores, RESPONSE_LENS)]),
        "uid": torch.tensor([0, 0, 1, 1]),
        "row_id": torch.arange(len(keys)),
    }, batch_size=len(keys))  # fmt: skip
    return tq.kv_batch_put(keys=keys, partition_id="train", fields=fields, tags=[{} for _ in keys])


def v1_trainer(compose, tq, *overrides):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from verl_ext.trainer.v1 import make_v1_trainer

    trainer = object.__new__(make_v1_trainer(PPOTrainerSync))
    trainer.config = compose("actor_rollout_ref.rollout.calculate_log_probs=false", "algorithm.adv_estimator=grpo",
                             *overrides)  # fmt: skip
    trainer.actor_rollout_wg = FakeV1WorkerGroup(tq)
    trainer.global_steps, trainer.local_trigger_step, trainer.parameter_sync_step = 2, 0, 1
    return trainer


def v1_step(trainer, tq, tag: str, metrics: dict, advantage_step: bool = True):
    """verl's old-log-prob pass, advantage step (real, against the store) and update, as ``_step_once`` runs them.
    ``advantage_step=False``: verl's advantage step runs outside the trainer (no verl_ext fields can go with it)."""
    batch = trainer._compute_old_log_prob(v1_put_batch(tq, tag), metrics=metrics)
    if advantage_step:
        batch = trainer._compute_advantage(batch, metrics=metrics)
    else:
        batch = verl_advantage_step(trainer, batch, metrics)
    trainer._update_actor(batch, metrics=metrics)
    return trainer.actor_rollout_wg.updates[-1]


def verl_advantage_step(trainer, batch, metrics):
    """verl's own ``_compute_advantage``, bypassing verl_ext's override."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return PPOTrainer._compute_advantage(trainer, batch, metrics)


def _grpo_advantages() -> torch.Tensor:
    """Oracle: GRPO's (score - group mean) / (group std + 1e-6) on every token of each response; the groups (rows
    0-1, 2-3) score (1, 0) and (0, 1): mean 0.5, unbiased std sqrt(0.5)."""
    a = 0.5 / (0.5**0.5 + 1e-6)
    out = torch.zeros(len(RESPONSE_LENS), R)
    for i, (sign, r) in enumerate(zip([1, -1, -1, 1], RESPONSE_LENS)):
        out[i, :r] = sign * a
    return out


@pytest.mark.e2e  # starts a Ray cluster
def test_v1_fields_go_with_verl_advantage_put(compose, transfer_queue, monkeypatch):
    tq = transfer_queue
    from verl.trainer.ppo.v1 import trainer_base

    calls = {"get": 0, "put": 0}
    real_get, real_put = tq.kv_batch_get, tq.kv_batch_put

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(tq, "kv_batch_get", counted("get", real_get))
    monkeypatch.setattr(tq, "kv_batch_put", counted("put", real_put))

    # ERC: verl stores the old pass's `entropy`; the update batch carries it as old_entropy
    trainer = v1_trainer(compose, tq, "policy_loss@actor_rollout_ref.actor.policy_loss=grpo_erc")
    sent = v1_step(trainer, tq, "erc", {})
    assert torch.equal(sent["old_entropy"].to_padded_tensor(0.0), expected_response_entropy())
    assert "cov_selected" not in sent.keys()

    # the store calls of verl's three steps with nothing verl_ext adds (vanilla loss)
    calls.update(get=0, put=0)
    v1_step(v1_trainer(compose, tq), tq, "vanilla", {})
    verl_calls = dict(calls)

    # KL-Cov, batch scope: cov_selected over the whole batch from verl's own advantages, in the jagged layout of
    # old_log_probs - with no TransferQueue call of verl_ext's own
    trainer = v1_trainer(compose, tq, "policy_loss@actor_rollout_ref.actor.policy_loss=kl_cov",
                         "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.2")  # fmt: skip
    calls.update(get=0, put=0)
    metrics: dict = {}
    sent = v1_step(trainer, tq, "klcov", metrics)
    assert calls == verl_calls
    assert trainer_base.tq is tq  # the proxy is gone after the advantage step
    assert "timing_s/verl_ext/update_fields_fetch" not in metrics and "timing_s/verl_ext/advantage_fields" in metrics
    padded = sent.select("advantages", "old_log_probs", "response_mask", "cov_selected").to_padded_tensor()
    assert torch.allclose(padded["advantages"], _grpo_advantages())  # verl's advantages, not a stale field
    from verl import DataProto

    oracle = _kl_cov_oracle(DataProto.from_dict({k: padded[k] for k in ("advantages", "old_log_probs",
                                                                          "response_mask")}), 0.2)  # fmt: skip
    assert sent["cov_selected"].is_nested and sent["cov_selected"].dtype == torch.bool
    assert sent["cov_selected"].offsets().tolist() == sent["old_log_probs"].offsets().tolist()
    assert torch.equal(padded["cov_selected"], oracle) and int(oracle.sum()) == int(0.2 * sum(RESPONSE_LENS))
    assert metrics["actor/kl_cov/batch_selected_frac"] == pytest.approx(float(oracle.sum()) / sum(RESPONSE_LENS))
    assert np.isfinite(metrics["actor/kl_cov/batch_cov_selected_max"])

    # the same batch when verl's advantage step runs without verl_ext: its own round trip, the same selection
    trainer = v1_trainer(compose, tq, "policy_loss@actor_rollout_ref.actor.policy_loss=kl_cov",
                         "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.2")  # fmt: skip
    calls.update(get=0, put=0)
    fallback_metrics: dict = {}
    again = v1_step(trainer, tq, "klcov_rt", fallback_metrics, advantage_step=False)
    assert calls == {"get": verl_calls["get"] + 1, "put": verl_calls["put"] + 1}
    assert "timing_s/verl_ext/update_fields_fetch" in fallback_metrics
    assert torch.equal(again["cov_selected"].to_padded_tensor(False), padded["cov_selected"])


def test_upstream_ulysses_still_patches_only_the_flash_attention_forward(tmp_path):
    """Why ``ulysses_sequence_parallel_size > 1`` needs flash-attention (``check_sequence_parallel``): verl's
    ``apply_monkey_patch`` with ``ulysses_sp_size=2`` puts Ulysses' all-to-all into transformers' flash-attention
    forward and leaves SDPA as it is, so an SDPA model's ranks would each attend to their own slice.
    Fails once verl patches SDPA too; then the refusal can go."""
    from _cpu_marks import python

    proc = python(f"""
        from transformers import AutoModelForCausalLM
        from transformers.integrations import flash_attention, sdpa_attention
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        from verl.models.transformers import monkey_patch
        from verl_ext.testbed.tiny_model import build_tiny_model

        path = build_tiny_model({str(tmp_path)!r}, hidden=128, heads=4, kv_heads=2)
        model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa")
        sdpa_before = ALL_ATTENTION_FUNCTIONS["sdpa"]
        monkey_patch.apply_monkey_patch(model, ulysses_sp_size=2, use_remove_padding=True)
        assert flash_attention._flash_attention_forward is monkey_patch._ulysses_flash_attention_forward
        assert ALL_ATTENTION_FUNCTIONS["sdpa"] is sdpa_before is sdpa_attention.sdpa_attention_forward
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-3000:] + proc.stderr[-3000:]


def test_v1_dapo_sampling_stops_with_an_error_after_max_num_gen_batches(compose):
    """verl's sync replay buffer asks for more prompts each time DAPO's filter evicts groups, without a bound;
    verl_ext lets one training batch draw ``max_num_gen_batches x train_batch_size`` prompts (the batch that
    ``prepare_step`` submitted counts) and then stops with an error naming the key."""
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from verl_ext.trainer.v1 import DynamicSamplingExhausted, make_v1_trainer

    trainer = object.__new__(make_v1_trainer(PPOTrainerSync))
    trainer.config = compose("algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=3",
                             "algorithm.filter_groups.metric=acc")  # fmt: skip
    trainer.global_steps = 7
    batch = trainer.config.data.train_batch_size  # 64 (CLUSTER)
    submitted: list[int] = []
    trainer._next_train_batch = lambda n=None: n
    trainer._submit_batch_to_rollout = lambda n: submitted.append(n) or n

    class Buffer:
        finished_keys = {"train": {"a", "b", "c"}}

    trainer.replay_buffer = Buffer()

    def sample(self, metrics, timing_raw, sample_batch_size):  # what verl's replay buffer does while groups are evicted
        for ask in (40, 80, 2 * batch):
            trainer._add_prompts_to_generate(ask)

    PPOTrainerSync._step_once, original = sample, PPOTrainerSync._step_once
    try:
        with pytest.raises(DynamicSamplingExhausted) as info:
            trainer._step_once({}, {}, batch)
    finally:
        PPOTrainerSync._step_once = original
    assert submitted == [40, 80]  # 64 + 40 + 80 = 184 <= 3 x 64; the next 128 would pass 192
    message = str(info.value)
    for words in ("step 7", "184 prompts drawn and 128 more", "max_num_gen_batches=3", "3 group(s) kept of the 64",
                  "'acc'", "filter_groups.enable=false"):  # fmt: skip
        assert words in message, message

    # a new training batch starts a new count; without the filter nothing is bounded
    trainer._verl_ext_drawn = 0
    trainer.config = compose()
    for _ in range(20):
        trainer._add_prompts_to_generate(batch)
    assert len(submitted) == 22


# ----------------------------------------------------------------------------------------------------------
# errors: the dry run reports bad values in one line and nothing else; the loss summary; VERL_EXT_KEEP_VERL_COV
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["validate_config", "omega_conf_to_dataclass"])
def test_dry_run_lets_a_failure_that_is_not_a_bad_value_propagate(compose, monkeypatch, target):
    """A bug or an environment failure inside verl's validation is not an "invalid config": it propagates with its
    traceback; a ValueError raised there (verl's way of reporting a bad value) stays the one-line message, and the
    same ValueError raised outside verl's code is not one (``verl_ext.checks.dry_run.raised_by_verl``)."""
    import types

    import verl.utils.config as verl_config

    real = getattr(verl_config, target)

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(verl_config, target, broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        dry(compose())

    def bad_value(*args, **kwargs):
        raise ValueError("actor_rollout_ref.actor.ppo_mini_batch_size=7 must divide the batch")

    monkeypatch.setattr(verl_config, target, bad_value)  # raised in this test's module: not verl's word
    with pytest.raises(ValueError, match="must divide the batch"):
        dry(compose())
    in_verl = types.FunctionType(bad_value.__code__, {**bad_value.__globals__, "__name__": verl_config.__name__})
    monkeypatch.setattr(verl_config, target, in_verl)  # the same raise, in a frame of verl.utils.config
    status, out, err = dry(compose())
    assert status == 2 and out == ""
    assert err.strip() == ("verl_ext: invalid config: actor_rollout_ref.actor.ppo_mini_batch_size: "
                           "actor_rollout_ref.actor.ppo_mini_batch_size=7 must divide the batch")  # fmt: skip
    monkeypatch.setattr(verl_config, target, real)


@pytest.mark.parametrize(("loss", "shown"), [
    ("high_entropy", "high_entropy_ratio=0.2 high_entropy_scope=batch"),
    ("entropy_adv", "entropy_adv_alpha=0.4 entropy_adv_kappa=2.0"),
])  # fmt: skip
def test_dry_run_summary_shows_every_verl_ext_losss_keys(compose, loss, shown):
    from dataclasses import fields

    from verl_ext.config import PolicyLossConfig
    from verl_ext.losses import SPECS

    known = {f.name for f in fields(PolicyLossConfig)}
    assert all(set(spec.keys) <= known for spec in SPECS.values()), {n: s.keys for n, s in SPECS.items()}
    status, out, err = dry(compose(f"policy_loss@actor_rollout_ref.actor.policy_loss={loss}"))
    assert status == 0, err
    assert f"  loss      : {loss} {shown}" in out.splitlines(), out


def test_a_bad_keep_verl_cov_under_verls_own_entry_point_refuses_clip_cov_naming_the_variable():
    """verl loads verl_ext's plugin with ``import verl`` and hides its errors: with VERL_EXT_KEEP_VERL_COV=yes the
    cov losses verl would then run (its built-ins, verl_ext's keys ignored) refuse to run, naming the variable and
    its allowed values; the other losses are registered."""
    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn\n"
        "import verl_ext.registration as r\n"
        "assert POLICY_LOSS_REGISTRY['grpo_erc'] is r.SPECS['grpo_erc'].loss\n"
        "for name in ('clip_cov', 'kl_cov'):\n"
        "    try:\n"
        "        get_policy_loss_fn(name)(None, None, None, None)\n"
        "    except ValueError as exc:\n"
        "        print(name, exc)\n"
        "    else:\n"
        "        print(name, 'ran')\n"
    )
    done = _fresh_python.run(code, {**_env(), "VERL_EXT_KEEP_VERL_COV": "yes"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2, done.stdout
    for name, line in zip(("clip_cov", "kl_cov"), lines):
        assert line.startswith(f"{name} VERL_EXT_KEEP_VERL_COV='yes' is invalid: allowed 0 "), line
        assert "or 1 (keep verl's built-ins)" in line, line


def _actor_unavailable():
    from ray.exceptions import ActorUnavailableError

    return ActorUnavailableError("The actor is temporarily unavailable: Socket closed", b"\x01" * 16)


def test_a_lost_node_the_watchdog_finds_after_the_trainer_failed_is_named(compose, monkeypatch, fake_watchdog,
                                                                           capsys):
    """The TaskRunner on a lost node is unreachable (ActorUnavailableError) seconds before Ray's table marks the node
    dead: the entry point waits for the watchdog's report and prints it, instead of a traceback naming no node."""
    import verl.trainer.main_ppo as verl_main

    from verl_ext import main_ppo

    def trainer(config, task_runner_class):
        raise _actor_unavailable()

    monkeypatch.setattr(verl_main, "run_ppo", trainer)
    fake_watchdog.LATE_REPORT = "Ray actor VerlExtTaskRunnerV1 (id 0123, pid 7, node 10.77.0.2) died: NODE_DIED"
    assert main_ppo.run(compose()) == 1
    assert fake_watchdog.waits == [main_ppo.REPORT_WAIT_S]
    err = capsys.readouterr().err.rstrip().splitlines()
    assert err[-1] == f"verl_ext: stopped: {fake_watchdog.LATE_REPORT}"
    assert any("ActorUnavailableError" in line for line in err)


def test_an_exception_of_the_trainers_own_code_is_raised_without_waiting(compose, monkeypatch, fake_watchdog):
    import verl.trainer.main_ppo as verl_main

    from verl_ext import main_ppo

    def trainer(config, task_runner_class):
        raise ValueError("a bug in a reward function")

    monkeypatch.setattr(verl_main, "run_ppo", trainer)
    fake_watchdog.LATE_REPORT = "never asked for"
    with pytest.raises(ValueError, match="a bug"):
        main_ppo.run(compose())
    assert fake_watchdog.waits == []


def test_rays_errors_of_a_lost_worker_are_told_from_the_trainers_own():
    from ray.exceptions import ActorDiedError, RayTaskError

    from verl_ext.main_ppo import lost_a_worker

    assert lost_a_worker(_actor_unavailable()) and lost_a_worker(ActorDiedError())
    wrapped = RayTaskError("TaskRunner.run", "Traceback ...", ActorDiedError())  # a worker lost under the TaskRunner
    assert lost_a_worker(wrapped)
    assert not lost_a_worker(RayTaskError("TaskRunner.run", "Traceback ...", ValueError("a bug")))
    assert not lost_a_worker(RuntimeError("NCCL error"))  # a backend's error, no peer named gone
    # a rank that survives its peer's node: its collective fails first, in gloo's words or torch's network error
    gloo = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:538] Connection closed by peer [10.77.0.2]:41")
    assert lost_a_worker(RayTaskError("TaskRunner.run", "Traceback ...", RayTaskError("W.update", "...", gloo)))
    assert lost_a_worker(RuntimeError("Read error [10.0.0.2]:52 Connection reset by peer"))
    # a broken pipe is gloo's word for a lost peer only in its transport's message; a closed output pipe is not one
    assert lost_a_worker(RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Write error [10.77.0.2]:41: Broken pipe"))
    assert not lost_a_worker(BrokenPipeError(32, "Broken pipe"))
    assert not lost_a_worker(RayTaskError("TaskRunner.run", "Traceback ...", RuntimeError("[Errno 32] Broken pipe")))
    from torch.distributed import DistNetworkError

    assert lost_a_worker(RayTaskError("TaskRunner.run", "Traceback ...", DistNetworkError("store unreachable")))
    try:
        try:
            raise ActorDiedError()
        except ActorDiedError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert lost_a_worker(outer)
