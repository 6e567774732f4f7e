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
config is resolved first; :mod:`verl_ext.checks.recipe_startup` makes a recipe's paths absolute, prints what a CPU
scale changes, builds the CPU recipes' assets where missing and sends wandb offline without a key. Before training,
the resolved config is saved beside the checkpoints (``<trainer.default_local_dir>/resolved_config.yaml``), and
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
from verl_ext.cpu import mode as cpu_mode
from verl_ext.cpu import openmp as cpu_openmp
from verl_ext.cpu import precision as cpu_precision
from verl_ext.cpu import precision_probe
from verl_ext.cpu.workarounds import keep_local_ray_on_loopback, private_ray_token_file
from verl_ext.driver.watchdog import Watchdog, watchdog_config
from verl_ext.checks import recipe_startup
from verl_ext.configs import resolvers
from verl_ext.checks.dry_run import dry_run, error_line, validate
from verl_ext.registration import ensure_registered
from verl_ext.checks.validation import ConfigError, ray_cluster_address
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


def run(config: DictConfig) -> int:
    """Dry run or train; returns the exit status (0, or 2 for an invalid config or environment, or a verl version
    verl_ext was not tested with: :mod:`verl_ext.versions`)."""
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
    try:
        config = recipe_startup.prepare(config)
    except recipe_startup.RecipeStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:  # a bad size that an interpolation computes with (recipe_startup.resolve)
        print(error_line(exc), file=sys.stderr)
        return 2
    if OmegaConf.select(config, "verl_ext.dry_run", default=False) is True:
        return dry_run(config)
    try:
        validate(config, load_models=False)
    except ConfigError as exc:
        print(error_line(exc), file=sys.stderr)
        return 2

    from verl.trainer.main_ppo import run_ppo
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    if cpu_mode.active():
        try:
            speed = precision_probe.probe(OmegaConf.select(config, "actor_rollout_ref.model.path"))
            lines = [cpu_precision.startup_line(config, speed=speed),  # the chosen precision, and bf16's speed here
                     cpu_openmp.apply(config)]  # VERL_EXT_CPU_IOMP=1: Intel's OpenMP runtime in every Ray worker
        except (ValueError, FileNotFoundError) as exc:
            print(f"verl_ext: invalid environment: {exc}", file=sys.stderr)
            return 2
        for line in filter(None, lines):
            print(line, file=sys.stderr)
    saved = recipe_startup.save_resolved(config)
    print(f"resolved config: {saved} (replay: python -m verl_ext.main_ppo --config-path {saved.parent} "
          f"--config-name {saved.stem})", file=sys.stderr)  # fmt: skip
    address = ray_cluster_address(config)
    if cpu_mode.active() and (not address or on_loopback(address)):
        # the local Ray (and vLLM's servers) listen on 127.0.0.1 only; joining a Ray on 127.0.0.1, the driver keeps
        # that address (Ray would replace it by the machine's, where nothing listens)
        keep_local_ray_on_loopback()
    if cpu_mode.active() and not address:
        private_ray_token_file()  # and its token (Ray turns token auth on) is readable by this user only
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


def on_loopback(address: str) -> bool:
    """``address`` (``host:port`` of a running Ray, as ``RAY_ADDRESS`` gives it) is on this machine's loopback."""
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    return host == "localhost" or host == "::1" or host.startswith("127.")


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


@hydra.main(config_path=CONFIG_PATH, config_name=CONFIG_NAME, version_base=None)
def main(config: DictConfig) -> None:
    """Hydra entry point of ``python -m verl_ext.main_ppo``."""
    status = run(config)
    if status:
        sys.exit(status)


if __name__ == "__main__":
    main()
