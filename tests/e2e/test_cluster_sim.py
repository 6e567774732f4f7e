"""A 2-node Ray cluster on two simulated hosts with private addresses, the cluster scripts and token authentication on.

The scenario runs in a network and PID namespace of its own (``unshare --net --pid --fork --mount-proc``), in which
``tests/e2e/_two_hosts.sh`` makes two network and mount namespaces, the "hosts": A (10.77.0.1) and B (10.77.0.2),
joined by a veth pair named ``eth0`` on both, each with its own loopback, ``/tmp`` (Ray's ``/tmp/ray``, verl's and
vLLM's sockets) and ``/dev/shm``. Nothing outside the scenario's namespaces can be reached (there is no route out), and
its clean-up (``ray stop --force``) sees only the processes it started. The rest of the file system, the test's folder
under ``/tmp`` included, is shared, as on nodes with a shared file system. The hosts' environment is a cluster's:
``http_proxy`` and ``https_proxy`` name a proxy where nothing answers (a closed port of host A) and ``no_proxy`` lists
the nodes' range in CIDR form; ``GLOO_SOCKET_IFNAME=eth0``, as the hosts' name resolves to 127.0.0.1 (gloo would give
its peers that address), and ``VLLM_HOST_IP`` is the node's address (vLLM guesses it from a default route, which the
hosts lack). Ray's processes inherit that environment, and the jobs theirs. In it:

1. ``scripts/cluster/ray_head.sh`` starts the head in host A (creating the token file, mode 600, token auth on);
2. ``scripts/cluster/ray_worker.sh`` joins a raylet in host B;
3. ``scripts/cluster/check_nodes.py``, from host A, checks both nodes (verl_ext importable, losses registered);
4. from host B, a job submitted to the Jobs API without the token, or with a wrong one, is refused, and so is a
   client of the GCS;
5. ``scripts/cluster/submit.sh``, from host A, submits ``recipe/cpu_tiny.sh`` as a Ray job (``LOSS``, ``WORK_DIR``,
   ``EXP_NAME``, ``NNODES`` and ``GPUS_PER_NODE`` forwarded, sizes as Hydra overrides), which trains BAPO (its bounds
   decided once per optimiser step and all-reduced over the ranks) with the entropy control given only ``enable``
   and ``target`` (its default controller, ``auto``, on the entropy coefficient) on ``trainer.nnodes=2
   trainer.n_gpus_per_node=1``: one FSDP2 rank and one vLLM server per node, the two FSDP ranks in one gloo group;
   the entry point's watchdog is on (its default) and asks each vLLM server's ``/health`` at its node address, past
   the proxy; a checkpoint every step;
6. once step 2's checkpoint is recorded and logged, host B's raylet is killed (SIGKILL): the job fails (exit 1) in
   bounded time, naming the lost node, and the last recorded checkpoint is whole.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _cpu_marks import cpu_only, needs_vllm_cpu

from verl_ext.recipe import launch_env
from verl_ext.testbed.task import write_assets

REPO = Path(__file__).resolve().parents[2]
HOST_A, HOST_B = "10.77.0.1", "10.77.0.2"
GCS_PORT, DASHBOARD_PORT = 6390, 8266
PROXY = f"http://{HOST_A}:3128"
"""The environment's proxy: a closed port of host A, so that a request sent through it is refused."""
NO_PROXY = "10.77.0.0/16,localhost,127.0.0.1"
KILL_BOUND_S = 240
"""Seconds within which the job must have stopped after host B's raylet is killed."""


def _can_unshare_net() -> bool:
    if any(shutil.which(tool) is None for tool in ("unshare", "nsenter", "ip", "ss")):
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
source tests/e2e/_two_hosts.sh
ray_bin="$(dirname "$PYTHON")/ray"
export RAY="$ray_bin"
log() { echo "$1 $(date +%s.%N)" >> "$WORK/times.txt"; echo "== $1"; }
hosts_tmp="$(mktemp -d /tmp/vxh.XXXXXX)"  # each host's own /tmp (Ray's /tmp/ray, verl's sockets), but for $WORK
# ray stop sees only this PID namespace's processes (unshare --pid --mount-proc): nothing outside is touched
cleanup() { "$ray_bin" stop --force >/dev/null 2>&1 || true; rm -rf "$hosts_tmp"; }
trap cleanup EXIT
# the work folder, the checkout and the interpreter's environment stay shared (a checkout or venv under /tmp too)
two_hosts_up && host_own_dirs "$hosts_tmp" "$WORK" "$REPO" "$PYTHON_PREFIX" \
    || { echo "the two hosts could not be made"; exit 10; }
with_token() { RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$HOME/.ray/auth_token" "$@"; }
# a cluster's environment, which `ray start` passes on to Ray's processes and they to the jobs
export http_proxy="$PROXY" HTTP_PROXY="$PROXY" https_proxy="$PROXY" HTTPS_PROXY="$PROXY"
export no_proxy="$NO_PROXY" NO_PROXY="$NO_PROXY" GLOO_SOCKET_IFNAME=eth0
head="$HOST_A_IP:$GCS_PORT" jobs="http://$HOST_A_IP:$DASHBOARD_PORT"

log head  # VLLM_HOST_IP: vLLM's node address (it guesses it from a default route, which the hosts have not)
VLLM_HOST_IP="$HOST_A_IP" on_a bash scripts/cluster/ray_head.sh --node-ip "$HOST_A_IP" --port "$GCS_PORT" \
    --dashboard-port "$DASHBOARD_PORT" --num-gpus 1 -- --num-cpus 8 --include-dashboard=true > "$WORK/head.log" 2>&1 \
    || { echo "head failed"; cat "$WORK/head.log"; exit 11; }
log worker
VLLM_HOST_IP="$HOST_B_IP" on_b bash scripts/cluster/ray_worker.sh "$head" --node-ip "$HOST_B_IP" --num-gpus 1 \
    -- --num-cpus 8 \
    > "$WORK/worker.log" 2>&1 || { echo "worker failed"; cat "$WORK/worker.log"; exit 12; }
log check_nodes
on_a "$PYTHON" scripts/cluster/check_nodes.py --address "$head" --expect-nodes 2 --json "$WORK/nodes.json" \
    > "$WORK/check.log" 2>&1 || { echo "check_nodes failed"; cat "$WORK/check.log"; exit 13; }
on_a ss -ltnpH > "$WORK/listening_a.txt"
on_b ss -ltnpH > "$WORK/listening_b.txt"

log unauthenticated  # from the other host, as anyone on the network
RAY_AUTH_MODE=disabled on_b "$ray_bin" job submit --address "$jobs" -- echo pwned > "$WORK/noauth.log" 2>&1
echo "$?" > "$WORK/noauth.rc"
umask_was="$(umask)"; umask 077; printf 'not-the-token' > "$WORK/wrong_token"; umask "$umask_was"
RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$WORK/wrong_token" on_b "$ray_bin" job submit --address "$jobs" \
    -- echo pwned > "$WORK/wrongauth.log" 2>&1
echo "$?" > "$WORK/wrongauth.rc"
gcs_client="from ray._raylet import GcsClient; GcsClient(address='$head'); print('connected')"
RAY_AUTH_MODE=disabled on_b timeout 60 "$PYTHON" -c "$gcs_client" > "$WORK/gcs_noauth.log" 2>&1
echo "$?" > "$WORK/gcs_noauth.rc"
RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$WORK/wrong_token" on_b timeout 60 "$PYTHON" -c "$gcs_client" \
    > "$WORK/gcs_wrongauth.log" 2>&1
echo "$?" > "$WORK/gcs_wrongauth.rc"

log train
# the documented way to train on a cluster: submit.sh sends the recipe as a Ray job (with the token file); a checkpoint
# every step, and once step 2's is recorded and logged, host B's raylet is killed
sizes=(verl_ext.recipe.assets=false data.train_batch_size=4 actor_rollout_ref.rollout.n=4
    data.max_response_length=8 trainer.val_before_train=False
    verl_ext.entropy_control.enable=true verl_ext.entropy_control.target=5.0)
actors="import json; from ray.util import state
nodes = {node.node_id: node.node_ip for node in state.list_nodes(address='$jobs')}
alive = state.list_actors(address='$jobs', filters=[('state', '=', 'ALIVE')], limit=1000)
print(json.dumps([[actor.class_name, nodes.get(actor.node_id, '?')] for actor in alive]))"
tracker="$WORK_DIR/ckpts/two_nodes/latest_checkpointed_iteration.txt"
run_log="$WORK_DIR/two_nodes.jsonl"
EXP_NAME=two_nodes NNODES=2 GPUS_PER_NODE=1 on_a bash scripts/cluster/submit.sh --address "$jobs" \
    --submission-id two_nodes cpu_tiny "${sizes[@]}" trainer.total_training_steps=6 trainer.save_freq=1 \
    > "$WORK/train.log" 2>&1 &
submitted=$!
step_two() { [[ "$(cat "$tracker" 2>/dev/null)" == 2 ]] && grep -q '"step":2' "$run_log" 2>/dev/null; }
for _ in $(seq 2400); do step_two && break; kill -0 "$submitted" 2>/dev/null || break; sleep 0.5; done
if ! step_two; then  # the run ended (or never saved step 2): nothing to kill; the tests say so
    wait "$submitted"; echo "ended before step 2's checkpoint: $?" > "$WORK/train.rc"; : > "$WORK/driver_proxy_env.txt"
    with_token on_a "$ray_bin" job status --address "$jobs" two_nodes > "$WORK/train.status" 2>&1; log done; exit 0
fi
log checkpointed
on_a ss -ltnpH > "$WORK/listening_a_run.txt"
on_b ss -ltnpH > "$WORK/listening_b_run.txt"
with_token on_a timeout 60 "$PYTHON" -c "$actors" > "$WORK/actors_run.json" 2> "$WORK/actors_run.err"
for pid in $(pgrep -f 'verl_ext[.]main_ppo'); do  # the job's driver: did the cluster's environment reach it?
    tr '\0' '\n' < "/proc/$pid/environ" | grep -i -E '^(https?|no)_proxy=' | sort -u
done > "$WORK/driver_proxy_env.txt"
raylet=""
for comm in /proc/[0-9]*/comm; do
    pid="${comm#/proc/}"; pid="${pid%/comm}"
    [[ "$(cat "$comm" 2>/dev/null)" == raylet && "$(host_of "$pid")" == B ]] && raylet="$pid"
done
[[ -n "$raylet" ]] || { echo "no raylet in host B"; exit 15; }
tr '\0' ' ' < "/proc/$raylet/cmdline" | grep -o -- '--node_ip_address=[0-9.]*' > "$WORK/killed_raylet.txt"
kill -KILL "$raylet"
log killed
node_dead="import time; from ray.util import state
while not [n for n in state.list_nodes(address='$jobs') if n.node_ip == '$HOST_B_IP' and n.state == 'DEAD']:
    time.sleep(0.5)
print('node_dead', time.time())"  # when Ray's GCS declares host B's node dead (its health checks failing)
with_token on_a timeout $(( KILL_BOUND_S + 60 )) "$PYTHON" -c "$node_dead" >> "$WORK/times.txt" \
    2> "$WORK/node_dead.err" &
for _ in $(seq $(( KILL_BOUND_S * 2 + 120 ))); do kill -0 "$submitted" 2>/dev/null || break; sleep 0.5; done
if kill -0 "$submitted" 2>/dev/null; then echo "still running" > "$WORK/train.rc"; kill "$submitted"
else wait "$submitted"; echo "$?" > "$WORK/train.rc"; fi
log stopped
with_token on_a "$ray_bin" job status --address "$jobs" two_nodes > "$WORK/train.status" 2>&1
log done
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not _can_unshare_net():
        pytest.fail("the 2-host simulation needs `unshare --net` (root, or unprivileged user namespaces), `nsenter`, "
                    "`ip` and `ss`")  # fmt: skip
    work = tmp_path_factory.mktemp("cluster_sim")
    home = work / "home"
    home.mkdir()
    assets = work / "assets"
    write_assets(assets, 8)  # python -m verl_ext.testbed.task --out ASSETS --target-length 8, in this process
    launch = set(launch_env.names())  # the job's launch variables are the scenario's, not the shell's
    hosts_own = {"http_proxy", "https_proxy", "no_proxy", "all_proxy", "gloo_socket_ifname", "vllm_host_ip"}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "VERL_")) and k not in launch and k.lower() not in hosts_own}  # fmt: skip
    env.update(
        REPO=str(REPO), WORK=str(work), HOME=str(home), PYTHON=sys.executable, PYTHON_PREFIX=sys.prefix,
        WORK_DIR=str(assets), LOSS="bapo",
        PATH=f"{Path(sys.executable).parent}:{env['PATH']}", HOST_A_IP=HOST_A, HOST_B_IP=HOST_B, PROXY=PROXY,
        NO_PROXY=NO_PROXY, GCS_PORT=str(GCS_PORT), DASHBOARD_PORT=str(DASHBOARD_PORT), KILL_BOUND_S=str(KILL_BOUND_S),
    )  # fmt: skip
    # a process outside the namespaces that `ray stop --force` would end if it could see it (its command line names
    # a Ray worker script), standing for another job's Ray on this machine
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", "default_worker.py"])
    try:
        proc = subprocess.run([*_unshare(), "bash", "-c", SCENARIO], env=env, capture_output=True, text=True,
                              timeout=2400)  # fmt: skip
        (work / "bystander_alive").write_text(str(bystander.poll() is None))
    finally:
        bystander.kill()
        bystander.wait()
    (work / "scenario.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"scenario failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return work


def _times(work: Path) -> dict[str, float]:
    """When each stage of the scenario began (``times.txt``: name, seconds since the epoch)."""
    return {name: float(at) for name, at in (line.split() for line in (work / "times.txt").read_text().splitlines())}


def _listening(path: Path) -> list[tuple[str, int, str]]:
    """``(address, port, process)`` of each listening TCP socket in an ``ss -ltnpH`` listing."""
    rows = []
    for line in path.read_text().splitlines():
        local = line.split()[3]
        address, port = local.rsplit(":", 1)
        process = re.search(r'\(\("([^"]+)"', line)
        rows.append((address.strip("[]").removeprefix("::ffff:"), int(port), process.group(1) if process else "?"))
    return rows


def _servers(log: str) -> list[str]:
    """The vLLM servers' ``host:port`` that verl's server manager logs."""
    lines = [line for line in log.splitlines() if "LLMServerManager: [" in line]
    assert lines, "no 'LLMServerManager: [' line in the run's log"
    return re.findall(r"(\d+\.\d+\.\d+\.\d+:\d+)", lines[0])


def test_clean_up_ends_only_the_processes_it_started(cluster):
    """The scenario's ``ray stop --force`` ran in its own PID namespace: a Ray-looking process of another job
    outside it survived."""
    assert (cluster / "bystander_alive").read_text() == "True"


def test_token_file_is_private_and_never_printed(cluster):
    token_file = cluster / "home" / ".ray" / "auth_token"
    assert token_file.is_file() and (token_file.stat().st_mode & 0o777) == 0o600
    token = token_file.read_text().strip()
    assert len(token) >= 32
    logs = ("head.log", "worker.log", "check.log", "train.log", "train.status", "scenario.log", "driver_proxy_env.txt")  # fmt: skip
    for log in logs:
        assert token not in (cluster / log).read_text(), f"the token appears in {log}"


def test_check_nodes_sees_two_healthy_nodes_at_their_addresses(cluster):
    report = json.loads((cluster / "nodes.json").read_text())
    assert report["problems"] == []
    assert len(report["reports"]) == 2
    assert all(rep["registered"] for rep in report["reports"])
    assert {HOST_A, HOST_B} <= set(re.findall(r"\d+\.\d+\.\d+\.\d+", (cluster / "check.log").read_text()))


def test_the_jobs_api_listens_on_the_head_address_only(cluster):
    """The dashboard and its Jobs API (code execution for whoever holds the token) listen on the node address given
    to ``ray_head.sh``: not on every interface, not on the loopback; nothing of the head listens on host B."""
    head = _listening(cluster / "listening_a.txt")
    assert {address for address, port, _ in head if port == DASHBOARD_PORT} == {HOST_A}, head
    assert not [row for row in _listening(cluster / "listening_b.txt") if row[1] in (DASHBOARD_PORT, GCS_PORT)]


def test_the_gcs_refuses_a_client_without_the_token(cluster):
    """Ray 2.60's gRPC servers (the GCS among them) listen on every interface of their host, whatever the node address:
    what keeps the cluster closed is the token, which the GCS asks of every client, here one on the other host."""
    head = _listening(cluster / "listening_a.txt")
    assert any(port == GCS_PORT and process == "gcs_server" for _, port, process in head), head
    for attempt in ("gcs_noauth", "gcs_wrongauth"):
        output = (cluster / f"{attempt}.log").read_text()
        assert int((cluster / f"{attempt}.rc").read_text()) != 0, output
        assert "connected" not in output.splitlines() and "InvalidAuthToken" in output, output


@pytest.mark.parametrize("attempt", ["noauth", "wrongauth"])
def test_job_submission_without_the_token_is_refused(cluster, attempt):
    rc = int((cluster / f"{attempt}.rc").read_text())
    output = (cluster / f"{attempt}.log").read_text()
    assert rc != 0, output
    assert any(word in output for word in ("Authentication", "authentication", "Unauthorized", "401", "403")), output


def test_the_job_ran_with_the_clusters_proxy_environment(cluster):
    """The job's driver (where the watchdog asks the vLLM servers' ``/health``) had the proxy of the environment that
    ``ray start`` was given: the run below trained past it."""
    env = set((cluster / "driver_proxy_env.txt").read_text().split())
    assert {f"http_proxy={PROXY}", f"https_proxy={PROXY}", f"no_proxy={NO_PROXY}"} <= env, env


def test_trains_two_steps_on_two_hosts_with_bapos_bounds_decided_over_both(cluster):
    """Steps 1 and 2 on two hosts before host B is lost: one FSDP rank per node in one gloo group, BAPO's bounds
    decided by the per-step no-grad pass over each mini-batch and all-reduced over both ranks (inside the authors'
    ranges, configs/policy_loss/bapo.yaml), and the entropy control with only ``enable`` and ``target`` - the default
    controller, ``auto``, on the default actuator, the entropy coefficient - whose estimates are logged each step."""
    log = (cluster / "train.log").read_text()
    # the recipe's default run log, $WORK_DIR/$EXP_NAME.jsonl (submit.sh forwards WORK_DIR and EXP_NAME)
    rows = [json.loads(line) for line in (cluster / "assets" / "two_nodes.jsonl").read_text().splitlines()]
    steps = [row["step"] for row in rows]
    assert steps[:2] == [1, 2], steps
    assert abs(rows[1]["data"]["training/rollout_probs_diff_max"]) < 1e-3  # vLLM got step 1's weights on both hosts
    assert rows[1]["data"]["actor/ppo_kl"] != 0.0
    for row in rows[:2]:
        data = row["data"]
        # verl splits the batch over its data-parallel ranks: two (one per node, one gloo group)
        assert data["perf/total_num_tokens"] == 2 * data["global_seqlen/mean"]
        assert 0.8 - 1e-6 <= data["actor/bapo/clip_low"] <= 0.95 + 1e-6
        assert 1.2 - 1e-6 <= data["actor/bapo/clip_high"] <= 2.0 + 1e-6
        assert 0.0 <= data["actor/bapo/positive_share"] <= 1.0
        assert data["entropy_control/noise"] > 0.0 and data["entropy_control/gain"] > 0.0
        assert data["entropy_control/filtered_entropy"] > 0.0
        assert data["entropy_control/entropy_coef"] >= 0.0
    # one vLLM server per node, each at its node's address
    assert sorted(server.split(":")[0] for server in _servers(log)) == [HOST_A, HOST_B], _servers(log)


def test_each_host_runs_one_fsdp_rank_and_one_vllm_server(cluster):
    """Ray's actor table during the run: verl's worker group and its rollout servers spread over both nodes."""
    actors = json.loads((cluster / "actors_run.json").read_text())
    for kind in ("WorkerDict", "vLLMHttpServer"):
        assert sorted(node for name, node in actors if kind in name) == [HOST_A, HOST_B], (kind, actors)


def test_the_vllm_servers_listen_on_their_node_address(cluster):
    """Each vLLM server listens, in its own host, on the address verl reports for it (the one the watchdog asks)."""
    servers = _servers((cluster / "train.log").read_text())
    assert sorted(server.split(":")[0] for server in servers) == [HOST_A, HOST_B], servers
    for server in servers:
        host, port = server.rsplit(":", 1)
        listing = _listening(cluster / f"listening_{'a' if host == HOST_A else 'b'}_run.txt")
        assert {address for address, p, _ in listing if p == int(port)} == {host}, (server, listing)


def _kill_run(work: Path) -> tuple[str, str]:
    """The run's exit (``train.rc``) and ``submit.sh``'s output, failing if no node was killed."""
    log = (work / "train.log").read_text()
    rc = (work / "train.rc").read_text().strip()
    assert not rc.startswith("ended"), f"submit.sh {rc}: no node was killed\n{log[-6000:]}"
    assert (work / "killed_raylet.txt").read_text().strip() == f"--node_ip_address={HOST_B}"
    return rc, log


def test_a_node_lost_mid_run_stops_the_run_in_bounded_time(cluster):
    """Host B's raylet killed (SIGKILL) after a checkpoint is recorded: the job fails (``submit.sh`` exits non-zero)
    within :data:`KILL_BOUND_S` seconds."""
    rc, log = _kill_run(cluster)
    times = _times(cluster)
    stopped_after = times["stopped"] - times["killed"]
    assert rc not in ("0", "still running"), f"submit.sh: {rc} {stopped_after:.0f} s after the kill\n{log[-6000:]}"
    assert stopped_after < KILL_BOUND_S, f"stopped {stopped_after:.0f} s after the kill"
    assert "Job 'two_nodes' failed" in (cluster / "train.status").read_text()
    assert "Job entrypoint command failed with exit code 1" in log, log[-6000:]


def test_the_stopped_run_names_the_lost_node(cluster):
    """The driver's last word names the lost node's address: the watchdog's ``verl_ext: stopped: ...`` line (or its
    ``error: Ray actor ... died`` line), in ``submit.sh``'s output - the live stream of the job's log, or the failed
    job's last lines, which ``submit.sh`` prints again from the whole log (the stream can miss them)."""
    _, log = _kill_run(cluster)
    stopped = [x for x in log.splitlines() if "verl_ext: stopped: " in x or re.search(r"error: Ray actor .* died", x)]
    runner = [node for name, node in json.loads((cluster / "actors_run.json").read_text()) if "TaskRunner" in name]
    errors = [x for x in log.splitlines() if re.search(r"error|Traceback|stopped", x, re.IGNORECASE)]
    assert any(HOST_B in line for line in stopped), "\n".join(  # a string: pytest shortens a tuple's repr
        [f"TaskRunner on {runner}; no stopped line names {HOST_B}: {stopped}", *errors[-30:], "", log[-3000:]])


def test_the_last_recorded_checkpoint_of_the_lost_run_is_whole(cluster):
    """The checkpoint ``latest_checkpointed_iteration.txt`` names has every file the run's step-1 checkpoint has (one
    written while the run went on): both ranks' model, optimizer and extra state shards, verl_ext's state and the
    rest, none of its shards empty."""
    ckpts = cluster / "assets" / "ckpts" / "two_nodes"
    first = ckpts / "global_step_1"
    reference = sorted(str(p.relative_to(first)) for p in first.rglob("*") if p.is_file())
    for kind in ("model", "optim", "extra_state"):  # what verl's FSDP checkpoint of 2 ranks holds
        assert {f"actor/{kind}_world_size_2_rank_{rank}.pt" for rank in (0, 1)} <= set(reference), reference
    assert "verl_ext_driver.json" in reference, reference
    step = int((ckpts / "latest_checkpointed_iteration.txt").read_text())
    assert step >= 2
    last = ckpts / f"global_step_{step}"
    assert sorted(str(p.relative_to(last)) for p in last.rglob("*") if p.is_file()) == reference
    assert all((last / name).stat().st_size > 0 for name in reference if name.endswith(".pt"))
