"""Mutation check: plant one defect at a time in a scratch checkout and name the fast tests that catch it.

``python -m benchmarks.mutation_check [--out FILE] [--only NAME ...]`` makes a detached git worktree of ``HEAD``
(committed code only), runs :data:`TESTS` there once unchanged (every one must pass: a test that already fails
proves nothing), then for each of :data:`MUTATIONS` replaces one piece of source text (exactly one occurrence, else
the check stops: the source moved and the mutation must follow it), runs the same tests, records which failed and
restores the file. A mutation that no test catches is printed as ``NOT CAUGHT``, named again in the last line, and
the command exits 1. The tests import the worktree's ``verl_ext`` (``PYTHONPATH``), never the checkout's. Writes
``benchmarks/results/results_mutation_check.json`` (the host's CPU model, the commit, each mutation's catching tests).
``--summary`` prints that file's table (runs nothing): docs/testing.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from verl_ext.cpu.machine import cpu_model

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "results_mutation_check.json"

TESTS = ("tests/losses", "tests/trainer", "tests/cpu/test_losses_in_engine.py", "tests/cpu/test_engine_cpu.py")
"""The fast tests each mutation runs against: the losses' oracles, the trainer-side hooks and controllers, and the
losses inside verl's FSDP2 engine."""


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str
    why: str


MUTATIONS = (
    Mutation(
        "batch-scope selection per shard",
        "verl_ext/trainer/hooks.py",
        "    selected = select_tokens_for_batch(\n"
        "        mode, advantages, old_log_probs, response_mask, actor_config, step=step, metrics=raw, ratio=ratio, "
        "key=responses\n    )\n",
        "    half = advantages.shape[0] // 2\n"
        "    selected = torch.cat([select_tokens_for_batch(\n"
        "        mode, advantages[s], old_log_probs[s], response_mask[s], actor_config, step=step, metrics=raw, "
        "ratio=ratio,\n        key=None if responses is None else responses[s]) for s in (slice(0, half), slice(half, None))])\n",
        "each half of the batch selects on its own, as a per-rank selection would (the public code's scope)",
    ),
    Mutation(
        "ERC's old entropy from the update's forward",
        "verl_ext/trainer/actor_loss.py",
        "        extras[OLD_ENTROPY] = batch[OLD_ENTROPY]\n",
        "        extras[OLD_ENTROPY] = entropy.detach() if entropy is not None else batch[OLD_ENTROPY]\n",
        "the loss compares the current entropy with itself: every ratio is 1 and ERC never masks",
    ),
    Mutation(
        "BAPO's statistics not all-reduced",
        "verl_ext/trainer/bapo_step.py",
        "        torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.SUM, group=dp_group)\n",
        "        pass\n",
        "each rank decides the step's bounds from its own tokens",
    ),
    Mutation(
        "gppo_erc's clip drops the clipped tokens' gradient",
        "verl_ext/losses/gppo_erc.py",
        "    pg_losses = dual_clip(terms.unclipped * scale, advantages, c, mask, metrics)\n",
        "    gp = terms.unclipped * scale\n"
        "    pg_losses = dual_clip(torch.where(low_clip | high_clip, gp.detach(), gp), advantages, c, mask, metrics)\n",
        "the values stay CE-GPPO's, but clipped tokens get no gradient: PPO's clip, not gradient-preserving",
    ),
    Mutation(
        "controller state not restored on resume",
        "verl_ext/control/entropy_control.py",
        "        self.controller.state = type(self.controller.state)(**inner)\n",
        "        pass\n",
        "a resumed controller starts from its initial state (integral 0, the actuator's init) with no error",
    ),
)


def machine() -> str:
    """The host's CPU model and core count."""
    return f"{cpu_model()}, {os.cpu_count()} cores"


def run_tests(tree: Path, timeout_s: float) -> tuple[set[str], str, float]:
    """The failing node ids of :data:`TESTS` in ``tree``, pytest's last line, and the seconds it took."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *TESTS], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=timeout_s)  # fmt: skip
    out = proc.stdout + proc.stderr
    failed = set(re.findall(r"^(?:FAILED|ERROR) (\S+)", out, flags=re.M))
    last = next((line for line in reversed(out.splitlines()) if line.strip()), "")
    return failed, last, time.monotonic() - start


def summary(path: Path) -> str:
    """The results file as a Markdown table: each planted defect, how many tests caught it and the first of them (the
    file names them all, and what each defect does)."""
    data = json.loads(path.read_text())
    lines = [f"Planted in `{data['commit']}` on {data['machine']} ({data['date']}):", "",
             "| planted defect (its file) | tests that fail (the first) |", "| --- | --- |"]  # fmt: skip
    for row in data["mutations"]:
        names = [node.split("::", 1)[1] for node in row["caught_by"]]
        first = f"`{names[0]}`" if names else "none"
        lines.append(f"| {row['mutation']} (`{Path(row['file']).name}`) | {len(names)}: {first} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mutation_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"results file (default {RESULTS.relative_to(ROOT)})")
    parser.add_argument("--only", nargs="*", default=None, help="run only the mutations whose name contains these")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="bound on each test run (default 900)")
    parser.add_argument("--summary", action="store_true", help="print the results file's table and run nothing")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary(args.out))
        return 0
    mutations = [m for m in MUTATIONS if not args.only or any(word in m.name for word in args.only)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()  # fmt: skip
    tree = Path(tempfile.mkdtemp(prefix="verl_ext_mutation_")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), "HEAD"], cwd=ROOT, check=True, capture_output=True)
    rows, not_caught = [], []
    try:
        failed, last, seconds = run_tests(tree, args.timeout_s)
        print(f"unchanged: {last} ({seconds:.0f} s)")
        if failed:
            print(f"error: {len(failed)} test(s) fail on the unchanged tree: {sorted(failed)}", file=sys.stderr)
            return 2
        for mutation in mutations:
            path = tree / mutation.path
            source = path.read_text()
            if source.count(mutation.old) != 1:
                print(f"error: {mutation.path}: the text of mutation {mutation.name!r} occurs "
                      f"{source.count(mutation.old)} times, not once: update benchmarks/mutation_check.py",
                      file=sys.stderr)  # fmt: skip
                return 2
            path.write_text(source.replace(mutation.old, mutation.new))
            try:
                failed, last, seconds = run_tests(tree, args.timeout_s)
            finally:
                path.write_text(source)
            print(f"{mutation.name}: {len(failed)} failed ({seconds:.0f} s): {last}")
            for node in sorted(failed):
                print(f"  {node}")
            if not failed:
                print("  NOT CAUGHT")
                not_caught.append(mutation.name)
            rows.append({"mutation": mutation.name, "file": mutation.path, "defect": mutation.why,
                         "caught_by": sorted(failed), "summary": last, "seconds": round(seconds, 1)})  # fmt: skip
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
        shutil.rmtree(tree.parent, ignore_errors=True)
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "commit": commit, "machine": machine(),
                                    "tests": list(TESTS), "mutations": rows}, indent=1) + "\n")  # fmt: skip
    print(f"wrote {args.out}")
    if not_caught:
        print(f"error: no test caught {len(not_caught)} planted defect(s): {', '.join(not_caught)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
