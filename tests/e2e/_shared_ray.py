"""One Ray cluster on 127.0.0.1 per e2e test process, which launches that do not test Ray's own start-up join.

A launch of verl's trainer in CPU mode starts a local Ray (GCS, raylet, dashboard agent, log monitor: ~8 s on 2
cores, and their processes' CPU beside the run) unless ``RAY_ADDRESS`` names a running one; it then joins it, as on a
cluster (``verl_ext.startup.join_rule`` drops the local-only ``ray.init`` arguments). The e2e tier's
launches that prove something about the trainer, its losses and its controllers - not about Ray's start-up, a killed
run or the user's first command - join this one instead of starting their own.

The cluster is a keeper process running ``ray.init`` the way ``verl_ext.main_ppo`` starts a local one in CPU mode:
on 127.0.0.1 only (``keep_local_ray_on_loopback``), with Ray's token authentication and a token file of this test
run (mode 600), and the environment CPU mode's driver hands the local cluster it starts (``mode.enable_in_process``:
``PYTHONWARNINGS``, TransferQueue's thread count). The launches get
``RAY_ADDRESS`` and the token's two variables (:func:`launch_env`). It is started on first use and ended when the
test process exits (SIGTERM), or when the test process is gone: the keeper's ``ray.shutdown`` stops every process
it started.
"""

from __future__ import annotations

import atexit
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

SLOTS = 2
"""Ray's GPU resource of the cluster: CPU mode's worker slots (one per training process). The e2e launches use one
or two, one launch at a time per test process."""

CPUS = 16
"""Logical CPUs, as configs/platform/cpu.yaml's ``ray_kwargs.ray_init.num_cpus`` for a local cluster."""

START_TIMEOUT_S = 180
"""Seconds the keeper may take to print the cluster's address."""

KEEPER = r"""
import signal, sys
from verl_ext.cpu import mode
from verl_ext.cpu.workarounds import keep_local_ray_on_loopback
mode.enable_in_process()  # the environment CPU mode's driver hands a local cluster (TransferQueue's threads, ...)
keep_local_ray_on_loopback()
import ray
ray.init(num_cpus=int(sys.argv[1]), num_gpus=int(sys.argv[2]), include_dashboard=False)
print("address", ray.get_runtime_context().gcs_address, flush=True)
import os
parent, stop = os.getppid(), {signal.SIGTERM, signal.SIGINT}
signal.pthread_sigmask(signal.SIG_BLOCK, stop)
while os.getppid() == parent and signal.sigtimedwait(stop, 1.0) is None:  # until told, or the test process is gone
    pass
ray.shutdown()
"""

_cluster: dict[str, str] = {}


def _stop(proc: subprocess.Popen, folder: tempfile.TemporaryDirectory) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    folder.cleanup()


def launch_env() -> dict[str, str]:
    """The variables that make a launch join this process's cluster (started on first call)."""
    if not _cluster:
        folder = tempfile.TemporaryDirectory(prefix="verl_ext_e2e_ray_")
        token = Path(folder.name) / "auth_token"
        token.touch(mode=0o600)
        token.write_text(secrets.token_hex(32))
        auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RAY_"))}
        env.update(auth, VERL_PLATFORM="cpu")
        proc = subprocess.Popen([sys.executable, "-c", KEEPER, str(CPUS), str(SLOTS)], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=open(Path(folder.name) / "keeper.log", "w"))  # fmt: skip
        atexit.register(_stop, proc, folder)
        line = ""
        import select

        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        if ready:
            line = proc.stdout.readline()
        if not line.startswith("address "):
            log = (Path(folder.name) / "keeper.log").read_text()[-4000:]
            raise RuntimeError(f"the e2e tier's Ray cluster did not start in {START_TIMEOUT_S} s:\n{line}{log}")
        _cluster.update(auth, RAY_ADDRESS=line.split()[1])
    return dict(_cluster)
