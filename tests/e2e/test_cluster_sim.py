"""A 2-node Ray cluster simulated on this machine, with the cluster scripts and token authentication on.

The whole scenario runs in a fresh network namespace whose only interface is the loopback, and a PID namespace of
its own (``unshare --net --pid``): nothing the test starts can be reached from outside this machine, its clean-up
ends only the processes it started, and Ray's node address is 127.0.0.1 (Ray 2.60
turns a requested 127.0.0.1 into the machine's interface address whenever it has one, see
``verl_ext.cpu.workarounds.keep_local_ray_on_loopback``). In it:

1. ``scripts/cluster/ray_head.sh`` starts the head (creating the token file, mode 600, token auth on);
2. ``scripts/cluster/ray_worker.sh`` joins a second raylet with its own ports, the way it joins a real head;
3. ``scripts/cluster/check_nodes.py`` checks both nodes (verl_ext importable, losses registered);
4. a job submitted to the Jobs API without the token, and one with a wrong token, are refused;
5. ``scripts/cluster/submit.sh`` submits ``recipe/cpu_tiny.sh`` as a Ray job (authenticated with the token file;
   ``LOSS``, ``WORK_DIR``, ``EXP_NAME``, ``NNODES`` and ``GPUS_PER_NODE`` forwarded, sizes as Hydra overrides),
   which trains 2 steps of batch-scope Clip-Cov with the entropy control (its default controller, ``auto``) with
   ``trainer.nnodes=2
   trainer.n_gpus_per_node=1``: one FSDP2 rank and one vLLM server per node, the two FSDP ranks in one gloo group,
   the selection made once over the batch of both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _cpu_marks import cpu_only, needs_vllm_cpu

from verl_ext.checks import launch_env

REPO = Path(__file__).resolve().parents[2]


def _can_unshare_net() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(_unshare() + ["true"], capture_output=True, timeout=30)
    return probe.returncode == 0


def _unshare() -> list[str]:
    """A network namespace with only the loopback, and a PID namespace with its own /proc: the scenario's
    ``ray stop --force`` sees (and ends) only the Ray processes the scenario started, never those of other jobs on
    the machine, and every process left in the namespace is ended with it when the scenario's shell exits."""
    isolated = ["unshare", "--net", "--pid", "--fork", "--mount-proc"]
    return isolated if os.geteuid() == 0 else [*isolated, "--map-root-user"]



pytestmark = [cpu_only, needs_vllm_cpu, pytest.mark.e2e]

SCENARIO = r"""
set -uo pipefail
ip link set lo up
cd "$REPO"
ray_bin="$(dirname "$PYTHON")/ray"
export RAY="$ray_bin"
log() { echo "== $*"; }
ray_tmp="$(mktemp -d /tmp/vxr.XXXXXX)"  # short: Ray's unix socket paths must stay under 108 bytes
# ray stop sees only this PID namespace's processes (unshare --pid --mount-proc): nothing outside is touched
cleanup() { "$ray_bin" stop --force >/dev/null 2>&1 || true; rm -rf "$ray_tmp"; }
trap cleanup EXIT

log head
bash scripts/cluster/ray_head.sh --node-ip 127.0.0.1 --port 6390 --dashboard-port 8266 --num-gpus 1 \
    -- --num-cpus 8 --temp-dir "$ray_tmp" --include-dashboard=true > "$WORK/head.log" 2>&1 \
    || { echo "head failed"; cat "$WORK/head.log"; exit 11; }
log worker
bash scripts/cluster/ray_worker.sh 127.0.0.1:6390 --num-gpus 1 -- --num-cpus 8 \
    --node-manager-port 6401 --object-manager-port 6402 --metrics-export-port 6403 \
    --dashboard-agent-listen-port 6404 --dashboard-agent-grpc-port 6405 --runtime-env-agent-port 6406 \
    --min-worker-port 12000 --max-worker-port 12999 > "$WORK/worker.log" 2>&1 \
    || { echo "worker failed"; cat "$WORK/worker.log"; exit 12; }
log check_nodes
"$PYTHON" scripts/cluster/check_nodes.py --address 127.0.0.1:6390 --expect-nodes 2 --json "$WORK/nodes.json" \
    > "$WORK/check.log" 2>&1 || { echo "check_nodes failed"; cat "$WORK/check.log"; exit 13; }
log listening
ss -ltnH | awk '{print $4}' | sort -u > "$WORK/listening.txt"
log unauthenticated
RAY_AUTH_MODE=disabled "$ray_bin" job submit --address http://127.0.0.1:8266 -- echo pwned > "$WORK/noauth.log" 2>&1
echo "$?" > "$WORK/noauth.rc"
umask 077; printf 'not-the-token' > "$WORK/wrong_token"
RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$WORK/wrong_token" "$ray_bin" job submit --address http://127.0.0.1:8266 \
    -- echo pwned > "$WORK/wrongauth.log" 2>&1
echo "$?" > "$WORK/wrongauth.rc"
log train
# the documented way to train on a cluster: submit.sh sends the recipe as a Ray job (with the token file)
NNODES=2 GPUS_PER_NODE=1 bash scripts/cluster/submit.sh --address http://127.0.0.1:8266 \
    --submission-id two_nodes cpu_tiny verl_ext.recipe.assets=false trainer.total_training_steps=2 \
    data.train_batch_size=4 actor_rollout_ref.rollout.n=4 data.max_response_length=8 \
    actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.05 trainer.val_before_train=False \
    actor_rollout_ref.actor.policy_loss.clip_cov_lb=-100 actor_rollout_ref.actor.policy_loss.clip_cov_ub=100 \
    verl_ext.entropy_control.enable=true verl_ext.entropy_control.target=3.0 verl_ext.entropy_control.actuator=cov_ratio \
    verl_ext.entropy_control.ratio_min=0.001 verl_ext.entropy_control.ratio_max=0.5 > "$WORK/train.log" 2>&1
echo "$?" > "$WORK/train.rc"
RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$HOME/.ray/auth_token" "$ray_bin" job status --address http://127.0.0.1:8266 two_nodes > "$WORK/train.status" 2>&1
log done
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not _can_unshare_net():
        pytest.fail("the 2-node simulation needs `unshare --net` (root, or unprivileged user namespaces) and `ip`")
    work = tmp_path_factory.mktemp("cluster_sim")
    home = work / "home"
    home.mkdir()
    assets = work / "assets"
    subprocess.run([sys.executable, "-m", "verl_ext.testbed.task", "--out", str(assets), "--target-length", "8"],
                   check=True, capture_output=True, text=True, timeout=300)  # fmt: skip
    launch = set(launch_env.names())  # the job's launch variables are the scenario's, not the shell's
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "VERL_")) and k not in launch}
    env.update(
        REPO=str(REPO), WORK=str(work), HOME=str(home), PYTHON=sys.executable, WORK_DIR=str(assets), LOSS="clip_cov",
        EXP_NAME="two_nodes", PATH=f"{Path(sys.executable).parent}:{env['PATH']}",
    )  # fmt: skip
    # a process outside the namespaces that `ray stop --force` would end if it could see it (its command line names
    # a Ray worker script), standing for another job's Ray on this machine
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1800)", "default_worker.py"])
    try:
        proc = subprocess.run([*_unshare(), "bash", "-c", SCENARIO], env=env, capture_output=True, text=True,
                              timeout=1200)  # fmt: skip
        (work / "bystander_alive").write_text(str(bystander.poll() is None))
    finally:
        bystander.kill()
        bystander.wait()
    (work / "scenario.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"scenario failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return work


def test_clean_up_ends_only_the_processes_it_started(cluster):
    """The scenario's ``ray stop --force`` ran in its own PID namespace: a Ray-looking process of another job
    outside it survived."""
    assert (cluster / "bystander_alive").read_text() == "True"


def test_token_file_is_private_and_never_printed(cluster):
    token_file = cluster / "home" / ".ray" / "auth_token"
    assert token_file.is_file() and (token_file.stat().st_mode & 0o777) == 0o600
    token = token_file.read_text().strip()
    assert len(token) >= 32
    for log in ("head.log", "worker.log", "check.log", "train.log", "train.status", "scenario.log"):
        assert token not in (cluster / log).read_text(), f"the token appears in {log}"


def test_every_ray_port_is_on_the_loopback(cluster):
    addresses = (cluster / "listening.txt").read_text().split()
    assert addresses
    hosts = {address.rsplit(":", 1)[0].strip("[]") for address in addresses}
    assert hosts <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}, hosts


def test_check_nodes_sees_two_healthy_nodes(cluster):
    report = json.loads((cluster / "nodes.json").read_text())
    assert report["problems"] == []
    assert len(report["reports"]) == 2
    assert all(rep["registered"] for rep in report["reports"])


@pytest.mark.parametrize("attempt", ["noauth", "wrongauth"])
def test_job_submission_without_the_token_is_refused(cluster, attempt):
    rc = int((cluster / f"{attempt}.rc").read_text())
    output = (cluster / f"{attempt}.log").read_text()
    assert rc != 0, output
    assert any(word in output for word in ("Authentication", "authentication", "Unauthorized", "401", "403")), output


def test_trains_two_steps_on_two_nodes(cluster):
    rc = int((cluster / "train.rc").read_text())
    log = (cluster / "train.log").read_text()
    assert rc == 0, log[-8000:]
    assert "Job 'two_nodes' succeeded" in (cluster / "train.status").read_text()
    # the recipe's default run log, $WORK_DIR/$EXP_NAME.jsonl (submit.sh forwards WORK_DIR and EXP_NAME)
    rows = [json.loads(line) for line in (cluster / "assets" / "two_nodes.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert abs(rows[-1]["data"]["training/rollout_probs_diff_max"]) < 1e-3
    assert rows[0]["data"]["actor/ppo_kl"] != 0.0
    for row in rows:  # verl splits the batch over its data-parallel ranks: two (one per node, one gloo group)
        assert row["data"]["perf/total_num_tokens"] == 2 * row["data"]["global_seqlen/mean"]
    for row in rows:  # one selection over both ranks' rows: the autopilot's ratio of the whole batch's tokens
        data = row["data"]
        tokens = round(data["response_length/mean"] * 4 * 4)
        expected = max(1, int(data["entropy_control/ratio"] * tokens)) / tokens
        assert data["actor/clip_cov/batch_selected_frac"] == pytest.approx(expected, rel=1e-6)
        assert data["actor/clip_cov/selected_frac"] > 0.0
        # the default controller (auto) set that ratio: its estimates of the step are logged
        assert data["entropy_control/noise"] > 0.0 and data["entropy_control/gain"] > 0.0
        assert data["entropy_control/filtered_entropy"] > 0.0
    servers = [line for line in log.splitlines() if "LLMServerManager: [" in line]
    assert servers and servers[0].count("127.0.0.1:") == 2, servers  # one vLLM server per node
