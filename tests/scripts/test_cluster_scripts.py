"""Multi-node scripts (scripts/cluster/): argument handling of the shell scripts against a fake `ray`
executable, the runtime environment of job submission, and check_nodes.py (in-process probe, report
checks, and one run against a throw-away local Ray)."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "scripts" / "cluster"

FAKE_RAY = textwrap.dedent(
    f"""\
    #!{sys.executable}
    # Stand-in for the `ray` CLI: records its arguments; for `job submit`, records the runtime env and runs
    # the entrypoint inside working_dir with the job's env_vars (and PRINT_CMD=1), as a Ray job would; for
    # `job logs`, prints FAKE_RAY_JOB_LOG.
    import json, os, subprocess, sys
    args = sys.argv[1:]
    if args[:2] == ["job", "logs"]:  # the job's whole log (FAKE_RAY_JOB_LOG), its arguments recorded apart
        with open(os.environ["FAKE_RAY_LOG"] + ".logs", "w") as handle:
            json.dump(args, handle)
        print(os.environ.get("FAKE_RAY_JOB_LOG", ""), end="")
        sys.exit(0)
    with open(os.environ["FAKE_RAY_LOG"], "w") as handle:
        json.dump(args, handle)
    with open(os.environ["FAKE_RAY_LOG"] + ".auth", "w") as handle:  # the authentication Ray would use
        json.dump({{k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")}}, handle)
    if args[:2] == ["job", "submit"]:
        runtime_env = json.loads(next(a for a in args if a.startswith("--runtime-env-json="))[19:])
        with open(os.environ["FAKE_RAY_ENV"], "w") as handle:
            json.dump(runtime_env, handle)
        with open(os.environ["FAKE_RAY_ENV"] + ".files", "w") as handle:  # what the job's working_dir holds
            json.dump(sorted(os.path.relpath(os.path.join(d, f), runtime_env["working_dir"])
                             for d, _, files in os.walk(runtime_env["working_dir"]) for f in files), handle)
        entry = args[args.index("--") + 1:]
        env = {{**os.environ, **runtime_env.get("env_vars", {{}}), "PRINT_CMD": "1"}}
        returncode = subprocess.run(entry, cwd=runtime_env["working_dir"], env=env).returncode
        sys.exit(int(os.environ.get("FAKE_RAY_JOB_RC", returncode)))  # FAKE_RAY_JOB_RC: the job failed so
    """
)


@pytest.fixture()
def fake_ray(tmp_path):
    path = tmp_path / "ray"
    path.write_text(FAKE_RAY)
    path.chmod(0o755)
    env = dict(os.environ)
    home = tmp_path / "home"
    home.mkdir()
    env.update(RAY=str(path), FAKE_RAY_LOG=str(tmp_path / "ray_args.json"), FAKE_RAY_ENV=str(tmp_path / "runtime_env.json"),
               HOME=str(home))  # fmt: skip
    for name in ("RAY_PORT", "RAY_DASHBOARD_PORT", "NODE_IP", "GPUS_PER_NODE", "RAY_HEAD_ADDRESS", "RAY_ADDRESS",
                 "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):  # fmt: skip
        env.pop(name, None)
    return env


def token_file(env: dict, mode: int = 0o600) -> Path:
    """A cluster token file where the scripts look by default (~/.ray/auth_token), with ``mode``."""
    path = Path(env["HOME"]) / ".ray" / "auth_token"
    path.parent.mkdir(exist_ok=True)
    path.write_text("0123456789abcdef" * 4)
    path.chmod(mode)
    return path


def ray_auth(env: dict) -> dict:
    return json.loads(Path(env["FAKE_RAY_LOG"] + ".auth").read_text())


def run(script: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CLUSTER / script), *args], capture_output=True, text=True, env=env, timeout=60)


def ray_args(env: dict) -> list[str]:
    return json.loads(Path(env["FAKE_RAY_LOG"]).read_text())


@pytest.mark.parametrize("script", ["ray_head.sh", "ray_worker.sh", "submit.sh", "token.sh"])
def test_shell_syntax(script):
    res = subprocess.run(["bash", "-n", str(CLUSTER / script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_head_starts_ray_with_a_private_token_and_prints_the_addresses(fake_ray):
    res = run("ray_head.sh", "--node-ip", "10.1.2.3", "--port", "6380", "--num-gpus", "8", env=fake_ray)
    assert res.returncode == 0, res.stderr
    args = ray_args(fake_ray)
    assert args[:2] == ["start", "--head"]
    assert {"--node-ip-address=10.1.2.3", "--port=6380", "--dashboard-port=8265", "--num-gpus=8"} <= set(args)
    assert "--dashboard-host=10.1.2.3" in args  # the node address, never 0.0.0.0 by default
    token = Path(fake_ray["HOME"]) / ".ray" / "auth_token"
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text()) == 64
    assert ray_auth(fake_ray) == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_AUTH_TOKEN": None}
    assert token.read_text() not in res.stdout + res.stderr  # only a fingerprint is shown
    assert "fingerprint sha256:" in res.stdout
    assert "bash scripts/cluster/ray_worker.sh 10.1.2.3:6380" in res.stdout
    assert "RAY_ADDRESS=http://10.1.2.3:8265 bash scripts/cluster/submit.sh" in res.stdout
    assert "check_nodes.py --address 10.1.2.3:6380" in res.stdout
    assert "ssh -N -L 8265:10.1.2.3:8265" in res.stdout
    res = run("ray_head.sh", "--node-ip", "10.1.2.3", "--dashboard-host", "0.0.0.0", env=fake_ray)  # opt-in
    assert res.returncode == 0 and "--dashboard-host=0.0.0.0" in ray_args(fake_ray)


def test_head_refuses_a_token_file_others_can_read(fake_ray):
    path = token_file(fake_ray, 0o644)
    res = run("ray_head.sh", "--node-ip", "10.1.2.3", env=fake_ray)
    assert res.returncode == 2 and f"{path} has mode 644" in res.stderr and "chmod 600" in res.stderr
    assert not Path(fake_ray["FAKE_RAY_LOG"]).exists()


@pytest.mark.parametrize(
    ("args", "env_extra", "message"),
    [
        (["--port", "abc"], {}, "port 'abc' (--port / RAY_PORT) is invalid"),
        (["--port", "70000"], {}, "allowed an integer in 1..65535"),
        ([], {"RAY_DASHBOARD_PORT": "6379"}, "--port and --dashboard-port must differ"),
        (["--num-gpus", "eight"], {}, "GPU count 'eight'"),
        (["--bogus"], {}, "unknown argument '--bogus'"),
    ],
)
def test_head_rejects_bad_input(fake_ray, args, env_extra, message):
    res = run("ray_head.sh", "--node-ip", "10.1.2.3", *args, env={**fake_ray, **env_extra})
    assert res.returncode == 2
    assert message in res.stderr
    assert not Path(fake_ray["FAKE_RAY_LOG"]).exists()  # ray was never started


def test_worker_needs_the_token_file(fake_ray):
    res = run("ray_worker.sh", "10.1.2.3:6380", env=fake_ray)
    assert res.returncode == 2 and "auth_token does not exist" in res.stderr
    token_file(fake_ray, 0o640)
    res = run("ray_worker.sh", "10.1.2.3:6380", env=fake_ray)
    assert res.returncode == 2 and "has mode 640" in res.stderr
    assert not Path(fake_ray["FAKE_RAY_LOG"]).exists()


def test_worker_joins_the_given_address(fake_ray):
    token = token_file(fake_ray)
    res = run("ray_worker.sh", "10.1.2.3:6380", "--num-gpus", "4", env=fake_ray)
    assert res.returncode == 0, res.stderr
    assert ray_args(fake_ray) == ["start", "--address=10.1.2.3:6380", "--num-gpus=4"]
    assert ray_auth(fake_ray)["RAY_AUTH_TOKEN_PATH"] == str(token) and ray_auth(fake_ray)["RAY_AUTH_MODE"] == "token"
    res = run("ray_worker.sh", env={**fake_ray, "RAY_HEAD_ADDRESS": "head-node:6379"})
    assert res.returncode == 0, res.stderr
    assert ray_args(fake_ray) == ["start", "--address=head-node:6379"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "the head address is missing"),
        (["10.1.2.3"], "head address '10.1.2.3' is invalid: expected HOST:PORT"),
        (["10.1.2.3:0"], "head address '10.1.2.3:0' is invalid"),
        (["10.1.2.3:6379", "10.1.2.4:6379"], "unexpected argument '10.1.2.4:6379'"),
    ],
)
def test_worker_rejects_bad_input(fake_ray, args, message):
    res = run("ray_worker.sh", *args, env=fake_ray)
    assert res.returncode == 2
    assert message in res.stderr


def test_submit_runtime_env_installs_nothing_and_overrides_survive(fake_ray, tmp_path):
    token = token_file(fake_ray)
    env = {**fake_ray, "NNODES": "2", "MODEL_PATH": "/models/m", "WANDB_API_KEY": "secret-key",
           "RAY_AUTH_TOKEN": "secret-token-in-env"}  # fmt: skip
    overrides = ["trainer.logger=['console']", "trainer.experiment_name=run with spaces", "+x.y=[1,2]"]
    res = run("submit.sh", "--address", "http://10.1.2.3:8265", "--no-wait", "dapo_kl_cov", *overrides, env=env)
    assert res.returncode == 0, res.stderr
    args = ray_args(fake_ray)
    assert args[:2] == ["job", "submit"] and "--address=http://10.1.2.3:8265" in args and "--no-wait" in args
    runtime_env = json.loads(Path(fake_ray["FAKE_RAY_ENV"]).read_text())
    assert set(runtime_env) == {"working_dir", "env_vars"}  # no pip / conda / uv / py_modules
    assert runtime_env["env_vars"] == {"NNODES": "2", "MODEL_PATH": "/models/m"}  # secrets are not forwarded
    assert ray_auth(fake_ray) == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_AUTH_TOKEN": None}
    assert "secret-token-in-env" not in json.dumps(runtime_env) and token.read_text() not in res.stdout + res.stderr
    assert not os.path.exists(runtime_env["working_dir"])  # the staged copy is removed once submitted
    cmd = shlex.split(res.stdout.strip().splitlines()[-1])  # the recipe ran inside the staged working_dir
    assert cmd[:3] == ["python3", "-m", "verl_ext.main_ppo"]
    assert cmd[-3:] == overrides
    # the composition the job launches travels with it (its YAML beside its script); NNODES and MODEL_PATH reach it
    # through the job's environment (forwarded above), where the launcher turns them into overrides before the user's
    assert cmd[3] == "--config-path" and cmd[4].endswith("/recipe") and cmd[5:7] == ["--config-name", "dapo_kl_cov"]
    assert cmd[7:-3] == ["actor_rollout_ref.model.path='/models/m'", "trainer.nnodes=2"]
    files = json.loads(Path(fake_ray["FAKE_RAY_ENV"] + ".files").read_text())
    assert {"job.sh", "recipe/launch.sh", "recipe/dapo_kl_cov.sh", "recipe/dapo_kl_cov.yaml"} <= set(files), files


def test_submit_names_the_job_and_prints_a_failed_jobs_last_lines_again(fake_ray):
    """Ray's live stream of a job's log can miss its last lines (ray-project/ray#48701), which is where a stopped run
    says why: a waited-for job that fails has its whole log's last lines printed again, read by the submission id
    submit.sh chose, and submit.sh exits with the job's status."""
    token_file(fake_ray)
    whole = "".join(f"line {i}\n" for i in range(100)) + "verl_ext: stopped: Ray actor X (node 10.0.0.2) died\n"
    env = {**fake_ray, "FAKE_RAY_JOB_RC": "1", "FAKE_RAY_JOB_LOG": whole}
    res = run("submit.sh", "--address", "http://10.1.2.3:8265", "dapo_kl_cov", env=env)
    assert res.returncode == 1, res.stderr
    submitted = [a.removeprefix("--submission-id=") for a in ray_args(fake_ray) if a.startswith("--submission-id=")]
    assert len(submitted) == 1 and submitted[0].startswith("verl_ext_dapo_kl_cov_"), ray_args(fake_ray)
    logs = json.loads(Path(fake_ray["FAKE_RAY_LOG"] + ".logs").read_text())
    assert logs == ["job", "logs", "--address=http://10.1.2.3:8265", submitted[0]]
    assert f"job '{submitted[0]}' failed (exit 1)" in res.stderr
    printed = res.stderr.split("can miss:\n", 1)[1].splitlines()
    assert printed == whole.splitlines()[-40:], printed  # the last 40 lines, the stopped line last
    # given an id, that is the job's; a job that succeeds, or one not waited for, prints nothing again
    for extra, rc in ((["--submission-id", "mine"], "0"), (["--submission-id", "mine", "--no-wait"], "1")):
        Path(fake_ray["FAKE_RAY_LOG"] + ".logs").unlink(missing_ok=True)
        res = run("submit.sh", *extra, "dapo_kl_cov", env={**env, "FAKE_RAY_JOB_RC": rc})
        assert res.returncode == int(rc) and "--submission-id=mine" in ray_args(fake_ray), res.stderr
        assert not Path(fake_ray["FAKE_RAY_LOG"] + ".logs").exists() and "can miss" not in res.stderr


LAUNCH_VALUES = {"MODEL_PATH": "/m", "DATA_DIR": "/d", "TRAIN_FILE": "a.parquet", "VAL_FILE": "b.parquet",
                 "CKPTS_DIR": "/c", "WORK_DIR": "/w", "CKPT": "/c/global_step_1", "NNODES": "1", "GPUS_PER_NODE": "2",
                 "GEN_TP": "1", "SP_SIZE": "1", "OFFLOAD": "0", "PROJECT_NAME": "p", "EXP_NAME": "e",
                 "LOGGERS": "console", "VERL_EXT_CPU_PRECISION": "fp32", "SCALE": "cpu", "LOSS": "vanilla",
                 "DRY_RUN": "1", "PRINT_CMD": "0", "PYTHON": sys.executable}  # fmt: skip
"""A valid value of every launch variable (``python -m verl_ext.recipe.launch_env names``)."""


@pytest.mark.parametrize(("recipe", "model", "unused"), [("eval", "tiny", {"LOSS"}),
                                                          ("cpu_tiny", "toy", {"SCALE", "CKPT"})])  # fmt: skip
def test_submit_forwards_every_launch_variable_but_the_launchers_own(fake_ray, recipe, model, unused):
    """Every launch variable the recipe takes reaches the job, and the non-recipe variables of the run's processes;
    PRINT_CMD and PYTHON (this machine's switches) do not. The list is the launcher's own."""
    from verl_ext.recipe import launch_env

    assert set(launch_env.names()) == set(LAUNCH_VALUES) | {"MODEL"}
    given = {k: v for k, v in LAUNCH_VALUES.items() if k not in unused}
    given.update(MODEL=model, WANDB_MODE="offline", HF_HOME="/hf", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    base = {k: v for k, v in fake_ray.items() if k not in LAUNCH_VALUES and not k.startswith(("HF_", "WANDB_"))}
    res = run("submit.sh", "--dry-run", recipe, env={**base, **given})
    assert res.returncode == 0, res.stderr
    runtime_env = json.loads(res.stdout.splitlines()[0].removeprefix("runtime env: "))
    assert runtime_env["env_vars"] == {k: v for k, v in given.items() if k not in ("PRINT_CMD", "PYTHON")}


def test_submit_refuses_a_variable_the_recipe_does_not_take_before_submitting(fake_ray):
    res = run("submit.sh", "dapo_kl_cov", env={**fake_ray, "SCALE": "cpu", "LOSS": "clip_cov"})
    assert res.returncode == 2
    assert "LOSS is set, but it applies to recipe/cpu_tiny.sh only" in res.stderr
    assert not Path(fake_ray["FAKE_RAY_LOG"]).exists()


def test_submit_checks_the_variables_with_the_jobs_arguments(fake_ray):
    """CPU mode's variables given with a ``scale=cpu`` argument are what recipe/launch.sh accepts: submitted, and
    the job's launch takes them; without the argument they are refused before anything is submitted."""
    variables = {"WORK_DIR": "/w", "VERL_EXT_CPU_PRECISION": "fp32", "MODEL": "smollm2"}
    res = run("submit.sh", "--dry-run", "dapo_kl_cov", "scale=cpu", "trainer.total_training_steps=2",
              env={**fake_ray, **variables})  # fmt: skip
    assert res.returncode == 0, res.stderr
    runtime_env = json.loads(res.stdout.splitlines()[0].removeprefix("runtime env: "))
    assert runtime_env["env_vars"] == variables
    assert "  exec bash recipe/dapo_kl_cov.sh scale=cpu trainer.total_training_steps=2" in res.stdout.splitlines()
    token_file(fake_ray)
    res = run("submit.sh", "dapo_kl_cov", "scale=cpu", env={**fake_ray, **variables})
    assert res.returncode == 0, res.stderr
    cmd = shlex.split(res.stdout.strip().splitlines()[-1])  # the job's launch (the fake ray runs it, PRINT_CMD=1)
    assert cmd[7:] == ["verl_ext.recipe.work_dir='/w'", "verl_ext.cpu_precision='fp32'", "cpu_model=smollm2",
                       "scale=cpu"]  # fmt: skip
    Path(fake_ray["FAKE_RAY_LOG"]).unlink()
    res = run("submit.sh", "dapo_kl_cov", env={**fake_ray, **variables})
    assert res.returncode == 2 and "error: WORK_DIR is set, but it applies to CPU mode" in res.stderr, res.stderr
    assert not Path(fake_ray["FAKE_RAY_LOG"]).exists()


@pytest.mark.parametrize(("variable", "argument"), [("cpu", "gpu"), ("gpu", "cpu")])
def test_submit_refuses_scale_and_a_scale_argument_that_disagree(fake_ray, variable, argument):
    res = run("submit.sh", "dapo_clip_cov", f"scale={argument}", env={**fake_ray, "SCALE": variable})
    assert res.returncode == 2
    assert res.stderr.strip() == (f"error: SCALE={variable} and the argument scale={argument} disagree: "
                                  f"SCALE={variable} stands for scale={variable}; give one of them")  # fmt: skip
    assert not Path(fake_ray["FAKE_RAY_LOG"]).exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "RECIPE is missing; available: cpu_tiny dapo_bapo dapo_baseline"),
        (["no_such_recipe"], "unknown recipe 'no_such_recipe'; available:"),
        (["launch"], "unknown recipe 'launch'"),
        (["--address", "10.1.2.3:8265", "dapo_baseline"], "expected the dashboard URL"),
        (["--wait-forever", "dapo_baseline"], "unknown option '--wait-forever'"),
    ],
)
def test_submit_rejects_bad_input(fake_ray, args, message):
    res = run("submit.sh", *args, env=fake_ray)
    assert res.returncode == 2
    assert message in res.stderr
    assert not Path(fake_ray["FAKE_RAY_LOG"]).exists()


def _load_check_nodes():
    spec = importlib.util.spec_from_file_location("_check_nodes", CLUSTER / "check_nodes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_probe_reports_registration_and_versions():
    report = _load_check_nodes().probe()
    assert report["errors"] == []
    assert report["registered"] is True
    assert report["entry_point"] == "verl_ext.registration:register"
    assert report["versions"]["verl_ext"] is not None and report["versions"]["verl"].startswith("0.9")


def test_check_reports_finds_every_problem():
    check = _load_check_nodes().check_reports
    good = {"hostname": "a", "node_ip": "10.0.0.1", "versions": {"verl": "0.9.1"}, "errors": [], "gpus": 8}
    assert check([good, {**good, "hostname": "b"}], expect_nodes=2, require_gpu=True) == []
    problems = check(
        [good, {**good, "hostname": "b", "errors": ["no `verl_ext` entry point"], "gpus": 0, "versions": {"verl": "0.9.0"}}],
        expect_nodes=3,
        require_gpu=True,
    )
    assert problems[0] == "expected 3 nodes (--expect-nodes), found 2 alive"
    assert "b (10.0.0.1): no `verl_ext` entry point" in problems
    assert "b (10.0.0.1): no GPU visible to torch (--require-gpu)" in problems
    assert any("disagree on package versions" in p for p in problems)


@pytest.mark.e2e  # starts a Ray cluster
def test_check_nodes_against_a_local_ray(tmp_path):
    out = tmp_path / "nodes.json"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    res = subprocess.run(
        [sys.executable, str(CLUSTER / "check_nodes.py"), "--local", "--expect-nodes", "1", "--timeout", "120", "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=180,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(out.read_text())
    assert data["problems"] == []
    (node,) = data["reports"]
    assert node["registered"] is True and node["node_ip"]
    assert "all 1 node(s) import verl and have verl_ext's losses registered" in res.stdout
