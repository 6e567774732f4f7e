"""``python -m verl_ext.main_ppo``: verl's PPO trainer with verl_ext's losses, entropy and selection.

A Hydra app whose config (``verl_ext.configs/verl_ext_trainer.yaml``) is verl's ``ppo_trainer`` plus
verl_ext's keys, so every key works on the command line without ``+``::

    python -m verl_ext.main_ppo policy_loss@actor_rollout_ref.actor.policy_loss=grpo_erc \\
        actor_rollout_ref.actor.policy_loss.entropy_mask_low=0.95 ...

It first checks that the installed verl is one verl_ext was tested with (:mod:`verl_ext.versions`: exit 2 naming
the version and the tested set, unless ``VERL_EXT_ALLOW_UNTESTED_VERL=1``), then that verl_ext's losses are
registered, validates the config (verl's checks and verl_ext's, see :mod:`verl_ext.checks.dry_run`), and runs
verl's own ``run_ppo`` with verl_ext's TaskRunner:

* ``trainer.use_v1=true`` (default): :class:`verl_ext.trainer.v1.VerlExtTaskRunnerV1`, verl's V1 trainer
  for the selected ``trainer.v1.trainer_mode`` with :class:`verl_ext.trainer.v1.VerlExtV1Mixin`;
* ``trainer.use_v1=false``: :class:`verl_ext.trainer.legacy.VerlExtTaskRunner`, verl's legacy
  ``RayPPOTrainer`` as :class:`verl_ext.trainer.legacy.VerlExtRayPPOTrainer`.

While verl trains, a watchdog (:mod:`verl_ext.driver.watchdog`) polls this job's actors in Ray's actor table and each
vLLM server's ``/health``: an actor of the run that dies unexpectedly (killed, out of memory, crashed, its node lost) or
an engine vLLM reports dead stops the run within seconds, with exit status 1, the trainer's own exception (if it
raised one) and a line naming the actor, its node, the last completed step and the latest checkpoint, instead of a
trainer waiting for ever. ``verl_ext.watchdog.*`` sets it; ``verl_ext.watchdog.enable=false`` turns it off.

``verl_ext.dry_run=true`` stops after validation: it prints a summary and exits 0, or exits 2 naming the
bad key, without starting Ray.

A recipe (``recipe/<name>.yaml``, launched by ``recipe/<name>.sh`` with ``--config-path``/``--config-name``) holds
values only; its launcher turned the cluster's variables into overrides (:mod:`verl_ext.recipe.launch_env`). The
start-up reads as its stages, in order (:func:`run`): the preflight (versions, registration, platform), the config
resolved (:mod:`verl_ext.startup`: a recipe's paths absolute; nothing outside the config changes) and the CPU recipes'
declared assets built, validation (:mod:`verl_ext.checks`), the dry run's exit, then the environment applied (wandb
offline without a key, CPU mode's probe) and training. Before training, the resolved config is saved beside the
checkpoints (``<trainer.default_local_dir>/resolved_config.yaml``), and
launching with that file alone composes the same config.

CPU mode is the composition's choice (``platform=cpu``, which the CPU recipes select; ``trainer.device=cpu``): the
entry point runs it with ``VERL_PLATFORM=cpu``, which every process of the run inherits, restarting itself with the
variable set when the command line chose CPU mode without it. ``VERL_PLATFORM=cpu`` beside a composition that is not
CPU mode is an error naming the fix.
"""

from __future__ import annotations

import os
import re
import sys
import traceback

import hydra
from omegaconf import DictConfig, OmegaConf

from verl_ext import failures
from verl_ext import startup
from verl_ext.checks.dry_run import error_line, summary, validate
from verl_ext.checks.validation import ConfigError
from verl_ext.configs import resolvers
from verl_ext.cpu import mode as cpu_mode
from verl_ext.driver.watchdog import Watchdog, watchdog_config
from verl_ext.registration import ensure_registered
from verl_ext.versions import UntestedVerl, check_verl_version

resolvers.register()

RESTARTED_VAR = "VERL_EXT_PLATFORM_RESTART"
"""Set on the restart that adds ``VERL_PLATFORM=cpu`` (:func:`ensure_platform`), so that it happens once."""

CONFIG_PATH = "pkg://verl_ext.configs"
"""Where the top config lives: the package ``verl_ext.configs`` (the repository's ``configs/``)."""

CONFIG_NAME = "verl_ext_trainer"
"""The top config: verl's ``ppo_trainer`` plus verl_ext's keys."""


def task_runner_class(config: DictConfig) -> type:
    """verl_ext's TaskRunner (a Ray actor class) for ``trainer.use_v1``."""
    if config.trainer.get("use_v1", True):
        from verl_ext.trainer.v1 import VerlExtTaskRunnerV1

        return VerlExtTaskRunnerV1
    from verl_ext.trainer.legacy import VerlExtTaskRunner

    return VerlExtTaskRunner


def ensure_platform(config: DictConfig) -> str | None:
    """The composition decides CPU mode (``trainer.device=cpu``, from ``platform=cpu``); ``VERL_PLATFORM`` must agree,
    since every process of the run reads it. CPU mode asked for without the variable: restart this command with it
    (once; never returns). Returns an error message for a disagreement that cannot be mended, else ``None``."""
    wants_cpu = OmegaConf.select(config, "trainer.device") == cpu_mode.PLATFORM_NAME
    current = os.environ.get(cpu_mode.ENV_VAR)
    if wants_cpu and current != cpu_mode.PLATFORM_NAME:
        if current or os.environ.get(RESTARTED_VAR):
            return (f"{cpu_mode.ENV_VAR}={current!r} disagrees with the composition, which runs in CPU mode "
                    f"(platform=cpu, trainer.device=cpu): unset {cpu_mode.ENV_VAR}")  # fmt: skip
        print(f"note: the composition runs in CPU mode (platform=cpu): restarting with {cpu_mode.ENV_VAR}=cpu, which "
              "every process of the run inherits", file=sys.stderr)  # fmt: skip
        sys.stdout.flush()
        sys.stderr.flush()
        env = {**os.environ, cpu_mode.ENV_VAR: cpu_mode.PLATFORM_NAME, RESTARTED_VAR: "1"}
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    if not wants_cpu and current == cpu_mode.PLATFORM_NAME:
        return (f"{cpu_mode.ENV_VAR}=cpu is set but the composition is not CPU mode: add platform=cpu "
                "(python -m verl_ext.main_ppo) or scale=cpu (a recipe), or unset it")  # fmt: skip
    return None


def preflight(config: DictConfig) -> int | None:
    """Stage 1: the installed verl is one verl_ext was tested with, verl_ext's losses are registered, and
    ``VERL_PLATFORM`` agrees with the composition (CPU mode asked for without it restarts this process once, with
    it). An exit status when it cannot go on, else ``None``."""
    try:
        warning = check_verl_version()
    except UntestedVerl as exc:
        print(f"verl_ext: untested upstream: {exc}", file=sys.stderr)
        return 2
    if warning:
        print(warning, file=sys.stderr)
    try:
        ensure_registered()
    except ValueError as exc:  # VERL_EXT_KEEP_VERL_COV holds something other than 0 / 1
        print(f"verl_ext: invalid environment: {exc}", file=sys.stderr)
        return 2
    mismatch = ensure_platform(config)
    if mismatch:
        print(f"error: {mismatch}", file=sys.stderr)
        return 2
    return None


def run(config: DictConfig) -> int:
    """The start-up's stages, in order, then training; the exit status (0; 2 for an invalid config or environment,
    or a verl version verl_ext was not tested with: :mod:`verl_ext.versions`; 1 for a run the watchdog stopped)."""
    failed = preflight(config)  # 1. versions, registration, platform
    if failed is not None:
        return failed
    try:
        config = startup.resolved(config)  # 2. compose and resolve: nothing outside the config changes
        startup.report(config)
        assets = startup.build_assets(config)  # the CPU recipe's declared assets (validation reads their data)
        validated = validate(config, load_models=False)  # 3. every check, once, in order
    except startup.RecipeStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    if validated.dry:  # 4. the dry run ends here, having written nothing but the assets
        print(summary(config, validated, assets), file=sys.stdout)
        return 0
    try:
        startup.apply(config)  # 5. environment, loggers, CPU mode's probe, the saved config
    except (ValueError, FileNotFoundError) as exc:
        print(f"verl_ext: invalid environment: {exc}", file=sys.stderr)
        return 2
    return train(config)  # 6. verl's trainer, with the watchdog on


def train(config: DictConfig) -> int:
    """verl's ``run_ppo`` with verl_ext's TaskRunner and the watchdog; 1 when the watchdog stopped it or its samples
    failed (the cause is the last line), else 0 (a failure of the trainer's own propagates)."""
    from verl.trainer.main_ppo import run_ppo
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    watchdog = start_watchdog(config)
    try:
        run_ppo(config, task_runner_class=task_runner_class(config))
    except BaseException as exc:  # the watchdog ended the TaskRunner: verl's wait on it raises (RayActorError)
        if watchdog is None or watchdog_report(watchdog, exc) is None:
            failed = None if failures.own_error(exc) else sample_failures(exc)
            if failed is None:
                raise
            import ray

            ray.shutdown()  # the workers' logs stop streaming: the cause is the last line
            print(f"verl_ext: the trainer stopped with this exception:\n"
                  f"{''.join(traceback.format_exception(exc)).rstrip()}", file=sys.stderr)  # fmt: skip
            print(failures.stopped_line(*failed), file=sys.stderr)
            return 1
        import ray

        ray.shutdown()
        print("verl_ext: the trainer stopped with this exception:\n"
              f"{''.join(traceback.format_exception(exc)).rstrip()}", file=sys.stderr)  # fmt: skip
        print(f"verl_ext: stopped: {watchdog.report}", file=sys.stderr)
        return 1
    finally:
        if watchdog is not None:
            watchdog.stop()
    return 0


def sample_failures(exc: BaseException) -> tuple[int, str] | None:
    """The samples of this run that failed in verl's agent loop (:mod:`verl_ext.failures`), when the trainer stopped
    with an exception (not a keyboard interrupt or an exit; not verl_ext's own, which names its cause: ``run``) and Ray
    can still be read; ``None`` otherwise."""
    if not isinstance(exc, Exception):
        return None
    try:
        import ray

        if not ray.is_initialized():
            return None
        return failures.read_failures(ray.get_runtime_context().get_job_id())
    except Exception:  # the trainer's own exception is then what the run ends with
        return None


REPORT_WAIT_S = 45.0
"""Seconds a Ray error of the trainer waits for the watchdog's report before it is raised alone: an actor on a lost
node is unreachable (``ActorUnavailableError``) before Ray's health checks mark the node dead (~15 s by default)."""


PEER_LOST = re.compile(r"connection (closed|reset) by peer|ncclRemoteError|remote process exited|"
                       r"gloo/transport/\S*\].*broken pipe", re.IGNORECASE)
"""Words of gloo and NCCL for a collective whose peer is gone: a rank that survives its node's loss fails its next
collective with them (a ``RuntimeError`` or ``torch.distributed.DistError`` raised in the worker), often before Ray
reports the lost node's actors. A broken pipe counts only in gloo's transport's message (a ``[.../gloo/transport/
tcp/pair.cc:N]`` line): any other, such as a closed output pipe, is not a lost peer."""


def lost_a_worker(exc: BaseException) -> bool:
    """``exc`` (or what it wraps: a remote task's error, an exception's cause) is Ray's word for an actor, worker or
    node that is gone, or a collective's for a peer that is gone (:data:`PEER_LOST`, ``DistNetworkError``) - not an
    exception the trainer's own code raised."""
    from ray import exceptions as rex
    from torch.distributed import DistNetworkError

    lost = (rex.RayActorError, rex.NodeDiedError, rex.WorkerCrashedError, rex.ObjectLostError, rex.LocalRayletDiedError,
            DistNetworkError)  # fmt: skip
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, lost) or PEER_LOST.search(str(exc)):
            return True
        exc = getattr(exc, "cause", None) if isinstance(exc, rex.RayTaskError) else exc.__cause__
    return False


def watchdog_report(watchdog: Watchdog, exc: BaseException) -> str | None:
    """The watchdog's report of the death behind the trainer's exception ``exc``: at once if it has one, else - for
    Ray's errors of a lost actor, worker or node (:func:`lost_a_worker`) - after waiting up to :data:`REPORT_WAIT_S`
    (or three polls, if longer) for it to find the dead actor or node; ``None`` when it found none."""
    if watchdog.report is not None:
        return watchdog.report
    if not lost_a_worker(exc):
        return None
    wait_s = max(REPORT_WAIT_S, 3 * watchdog.poll_s)
    print(f"verl_ext: the trainer stopped on a Ray error ({type(exc).__name__}): waiting up to {wait_s:.0f} s for the "
          "watchdog to find which actor or node died", file=sys.stderr)  # fmt: skip
    return watchdog.wait_for_report(wait_s)


def start_watchdog(config: DictConfig) -> Watchdog | None:
    """The started watchdog of the run, built from ``verl_ext.watchdog.*``; ``None`` (and a line saying so) with
    ``verl_ext.watchdog.enable=false``."""
    settings = watchdog_config(config)
    if not settings.enable:
        print("verl_ext: the watchdog is off (verl_ext.watchdog.enable=false): a dead worker can leave the trainer "
              "waiting for ever", file=sys.stderr)  # fmt: skip
        return None
    run_log = OmegaConf.select(config, "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH")
    watchdog = Watchdog(run_log=run_log, ckpt_dir=OmegaConf.select(config, "trainer.default_local_dir"),
                        poll_s=settings.poll_s, health_failures=settings.health_failures,
                        health_timeout_s=settings.health_timeout_s, stall=settings.stall_check())  # fmt: skip
    watchdog.start()
    return watchdog


DRY_RUN_ARG = re.compile(r"^\+{0,2}verl_ext\.dry_run=(true|True)$")
DRY_RUN_HYDRA = ("hydra.output_subdir=null", "hydra.run.dir=.", "hydra/job_logging=none", "hydra/hydra_logging=none")
"""Hydra's settings for a dry run: no ``outputs/<date>/<time>/`` folder, no ``.hydra/`` copy, no log file (a dry run
writes nothing but a CPU recipe's declared assets)."""


@hydra.main(config_path=CONFIG_PATH, config_name=CONFIG_NAME, version_base=None)
def hydra_main(config: DictConfig) -> None:
    """Hydra's task function: :func:`run`."""
    status = run(config)
    if status:
        sys.exit(status)


def main() -> None:
    """``python -m verl_ext.main_ppo [overrides]``: a dry run's command line gets :data:`DRY_RUN_HYDRA` too."""
    if any(DRY_RUN_ARG.match(arg) for arg in sys.argv[1:]):
        sys.argv[1:] = [*sys.argv[1:], *DRY_RUN_HYDRA]
    hydra_main()


if __name__ == "__main__":
    main()
