"""Two launches of verl's trainer at once against one after the other: what the end-to-end tier gains from running
two of its launches at a time (tests/conftest.py, ``E2E_WORKERS``).

Each round runs ``recipe/cpu_tiny.sh`` (the toy, 3 steps, no validation, no checkpoint) alone, then two copies of it
at once from two work folders, and records for each variant the wall time, the machine's busy cores (from
``/proc/stat``: every process on the machine counts, so run it on an otherwise idle machine) and the peak memory in
use above the variant's start:

    python -m benchmarks.concurrent_launches --rounds 1 --json benchmarks/results/results_concurrent_launches.json
    python -m benchmarks.concurrent_launches --summarise benchmarks/results/results_concurrent_launches.json

Needs CPU mode installed (``scripts/install_cpu.sh``); about 6 minutes a round on 2 cores, after an untimed run that
builds the toy's assets.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from verl_ext.cpu.machine import cpu_model

REPO = Path(__file__).resolve().parents[1]

SIZES = ("trainer.val_before_train=False", "trainer.test_freq=-1", "trainer.save_freq=-1")
"""No validation and no checkpoint: what most launches of the end-to-end tier skip."""


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine so far, in jiffies (``/proc/stat``)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def launch(work: Path, steps: int, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RAY_"))}
    env.update(WORK_DIR=str(work), HYDRA_FULL_ERROR="1")
    cmd = ["bash", str(REPO / "recipe" / "cpu_tiny.sh"), f"trainer.total_training_steps={steps}", *SIZES]
    return subprocess.Popen(cmd, env=env, cwd=work, stdout=log.open("w"), stderr=subprocess.STDOUT)


def timed(works: list[Path], steps: int, logs: Path) -> dict[str, float]:
    """Start one launch per work folder at once and wait for all; wall seconds, busy cores, peak memory (GiB)."""
    base = psutil.virtual_memory().used
    peak, done = [base], threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            peak[0] = max(peak[0], psutil.virtual_memory().used)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    busy0, total0 = busy_jiffies()
    start = time.monotonic()
    procs = [launch(work, steps, logs / f"{work.name}.log") for work in works]
    codes = [proc.wait() for proc in procs]
    wall = time.monotonic() - start
    busy1, total1 = busy_jiffies()
    done.set()
    sampler.join()
    if any(codes):
        raise RuntimeError(f"launch failed (exit codes {codes}); logs in {logs}")
    cores = os.cpu_count() or 1
    return {"wall_s": round(wall, 1), "busy_cores": round((busy1 - busy0) / (total1 - total0) * cores, 2),
            "peak_memory_gib": round((peak[0] - base) / 2**30, 2)}  # fmt: skip


def measure(rounds: int, steps: int, root: Path) -> dict[str, Any]:
    first, second = root / "a", root / "b"
    first.mkdir()
    subprocess.run(["bash", str(REPO / "recipe" / "cpu_tiny.sh"), "trainer.total_training_steps=1", *SIZES],
                   env={**os.environ, "WORK_DIR": str(first)}, cwd=first, check=True, capture_output=True)  # fmt: skip
    shutil.copytree(first, second)  # the assets, built once
    results: list[dict[str, Any]] = []
    for index in range(rounds):
        alone = timed([first], steps, root)
        pair = timed([first, second], steps, root)
        results.append({"round": index, "alone": alone, "pair": pair})
        print(json.dumps(results[-1]), flush=True)
    return {"machine": f"{cpu_model()}, {psutil.cpu_count(logical=False)} cores, "
                       f"{psutil.virtual_memory().total / 2**30:.0f} GiB", "steps": steps, "rounds": results}  # fmt: skip


def summarise(data: dict[str, Any]) -> str:
    rows = data["rounds"]

    def med(variant: str, key: str) -> float:
        return statistics.median(r[variant][key] for r in rows)

    lines = ["| variant | launches | wall s | busy cores | peak memory GiB |", "| --- | ---: | ---: | ---: | ---: |"]
    for variant, count in (("alone", 1), ("pair", 2)):
        lines.append(f"| {variant} | {count} | {med(variant, 'wall_s'):.1f} | {med(variant, 'busy_cores'):.2f} | "
                     f"{med(variant, 'peak_memory_gib'):.2f} |")  # fmt: skip
    ratio = statistics.median(r["pair"]["wall_s"] / (2 * r["alone"]["wall_s"]) for r in rows)
    lines += ["", f"two at once / two one after the other: {ratio:.2f}x ({data['machine']}; toy recipe, "
                  f"{data['steps']} steps; median of {len(rows)} round(s))"]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the measurements here")
    parser.add_argument("--summarise", type=Path, metavar="JSON", help="print the table of a results file; no runs")
    args = parser.parse_args(argv)
    if args.summarise:
        print(summarise(json.loads(args.summarise.read_text())))
        return
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps: allowed integers >= 1")
    with tempfile.TemporaryDirectory(prefix="verl_ext_concurrent_") as tmp:
        data = measure(args.rounds, args.steps, Path(tmp))
    if args.json:
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(summarise(data))


if __name__ == "__main__":
    main()
