"""Where the actor workers spend ``update_actor``: py-spy on the training processes of two trainer variants, side
by side (issue 26: what batch-scope ``clip_cov`` costs on the workers beyond verl's own ``clip_cov``).

Each variant of :mod:`bench_trainer` trains ``recipe/cpu_tiny.sh`` while one ``py-spy record --idle --nonblocking``
per training process (Ray's ``WorkerDict`` actors, found by their process title as they start) samples every thread
of that process at ``--rate`` Hz without pausing it. (Sampling the whole launch with ``--subprocesses`` instead cost
py-spy 1.2 of the machine's 2 cores.) Of the samples, those whose stack passes through a worker's ``update_actor``
(a frame of ``verl/workers/``) are the workers' update time; each frame of those stacks is charged inclusively (a function counted once per sample even
when it recurses). Per variant: milliseconds per step and per rank of the update and of each frame; then the frames
whose time differs most between the variants. Timings come from a sampler, at ``1000 / rate`` ms resolution, and
py-spy's sampling takes some CPU from the processes it reads: the ratios between variants are the result, not the
absolute times (``bench_trainer.py`` measures those without a profiler).

    python -m benchmarks.profile_update --json benchmarks/results/results_profile_update_cpu.json
    python -m benchmarks.profile_update --variants "verl_ext vanilla,verl vanilla" --steps 6

Needs py-spy (``pip install py-spy``) and the permission to read other processes (root, or ptrace allowed).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_trainer import DYNAMIC_BSZ, VARIANTS, read_figures, run_name, run_variant

WORKER_TITLE = "ray::WorkerDict"
"""The process title Ray gives verl's colocated training workers (one per rank)."""


def worker_pids() -> list[int]:
    """The running processes whose command line starts with :data:`WORKER_TITLE`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(WORKER_TITLE.encode()):
                    pids.append(int(entry.name))
            except OSError:  # the process ended meanwhile
                continue
    return sorted(pids)


def rank_file(prefix: Path, rank: int) -> Path:
    """Where rank ``rank``'s py-spy writes its samples: ``<prefix>.rank<rank>.txt``."""
    return prefix.parent / f"{prefix.name}.rank{rank}.txt"


def attach_profilers(ranks: int, out_prefix: Path, rate: int, stop: threading.Event) -> list[subprocess.Popen]:
    """Wait for ``ranks`` training processes and start one py-spy on each (it ends when its process ends)."""
    deadline = time.monotonic() + 900
    while len(pids := worker_pids()) < ranks:
        if stop.is_set() or time.monotonic() > deadline:
            return []
        time.sleep(0.2)
    return [subprocess.Popen([shutil.which("py-spy"), "record", "--idle", "--nonblocking", "--rate", str(rate),
                              "--format", "raw", "-o", str(rank_file(out_prefix, i)), "--pid", str(pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for i, pid in enumerate(pids[:ranks])]  # fmt: skip


def parse_raw(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw output: one ``frame;frame;...;frame count`` line per distinct stack, root first."""
    stacks = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            stacks.append((stack.split(";"), int(count)))
    return stacks


def frame_name(frame: str) -> str:
    """``function (path:line)`` -> ``function (path)``: lines of one function charged together."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else name


def is_worker_update(frame: str) -> bool:
    name, _, where = frame.partition(" (")  # py-spy names methods Class.method
    return name.rsplit(".", 1)[-1] == "update_actor" and "verl/workers/" in where


def worker_update_profile(stacks: list[tuple[list[str], int]], rate: int) -> dict[str, float]:
    """Inclusive seconds of each frame inside a worker's ``update_actor``, and the total under ``"<update_actor>"``;
    only the thread that runs the update (idle threads of the same process sample elsewhere)."""
    seconds: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        start = next((i for i, f in enumerate(frames) if is_worker_update(f)), None)
        if start is None:
            continue
        seconds["<update_actor>"] += count / rate
        for name in {frame_name(f) for f in frames[start + 1:]}:
            seconds[name] += count / rate
    return dict(seconds)


def per_step_rank_ms(seconds: dict[str, float], steps: int, ranks: int) -> dict[str, float]:
    return {name: 1000 * value / (steps * ranks) for name, value in seconds.items()}


def compare(profiles: dict[str, dict[str, float]], top: int) -> list[dict[str, Any]]:
    """The frames whose ms per step and rank differ most between the first variant and the second."""
    (first, a), (second, b) = list(profiles.items())[:2]
    rows = [{"frame": name, first: a.get(name, 0.0), second: b.get(name, 0.0), "difference_ms": a.get(name, 0.0) - b.get(name, 0.0)}
            for name in set(a) | set(b)]  # fmt: skip
    rows.sort(key=lambda row: (-abs(row["difference_ms"]), row["frame"]))
    return rows[:top]


def profile_run(name: str, prefix: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Train variant ``name`` with a py-spy on each training process (``<prefix>.rank<i>.txt``); its figures."""
    if worker_pids():
        raise SystemExit(f"a {WORKER_TITLE} process is already running: stop the other run (ray stop) first")
    stop, profilers = threading.Event(), []
    watcher = threading.Thread(target=lambda: profilers.extend(attach_profilers(args.gpus_per_node, prefix, args.rate, stop)))
    watcher.start()
    try:
        return run_variant(name, VARIANTS[name], work, args.steps, 0, args.gpus_per_node, dynamic=True)
    finally:
        stop.set()
        watcher.join()
        for profiler in profilers:
            profiler.wait(timeout=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="verl_ext clip_cov,verl clip_cov",
                        help=f"two of {sorted(VARIANTS)}, comma-separated (default: the two clip_cov ones)")
    parser.add_argument("--steps", type=int, default=8, help="training steps per run (8)")
    parser.add_argument("--gpus-per-node", type=int, default=2, help="training processes (2)")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second and process (200)")
    parser.add_argument("--top", type=int, default=25, help="frames listed in the comparison (25)")
    parser.add_argument("--work", type=Path, default=None, help="work folder (a temporary one)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--summarise-only", action="store_true",
                        help="train nothing: read the runs' py-spy files and JSONL logs already in --work")
    args = parser.parse_args(argv)
    if args.summarise_only and args.work is None:
        parser.error("--summarise-only needs --work, the folder of an earlier run")
    names = [name.strip() for name in args.variants.split(",")]
    if len(names) != 2 or any(name not in VARIANTS for name in names):
        parser.error(f"--variants: two of {sorted(VARIANTS)}, got {names}")
    if args.steps < 3 or args.rate < 1 or args.gpus_per_node not in (1, 2):
        parser.error("--steps must be >= 3, --rate >= 1 and --gpus-per-node 1 or 2")
    if shutil.which("py-spy") is None:
        parser.error("py-spy is not on PATH: pip install py-spy")
    from verl_ext.cpu.machine import machine_info
    from verl_ext.testbed.task import write_assets

    work = args.work or Path(tempfile.mkdtemp(prefix="verl_ext_profile_update_"))
    if not args.summarise_only:
        write_assets(work, target_length=16)
    profiles, figures = {}, {}
    for name in names:
        prefix = work / f"{run_name(name, 0)}.pyspy"
        if args.summarise_only:
            figures[name] = read_figures(work, name, VARIANTS[name], 0)
        else:
            figures[name] = profile_run(name, prefix, work, args)
        files = [rank_file(prefix, i) for i in range(args.gpus_per_node)]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:  # the per-rank figures divide by every rank: a rank without samples would halve them silently
            raise SystemExit(f"no py-spy samples for some training processes: {missing}; is py-spy allowed to read them?")
        stacks = [stack for f in files for stack in parse_raw(f)]
        seconds = worker_update_profile(stacks, args.rate)
        if "<update_actor>" not in seconds:
            raise SystemExit(f"{prefix}.rank*.txt: no sample inside a worker's update_actor; is py-spy allowed to read the workers?")
        # every step's update is sampled, the first (warm-up) one included
        profiles[name] = per_step_rank_ms(seconds, args.steps, args.gpus_per_node)
        print(f"{name}: update_actor {profiles[name]['<update_actor>']:.1f} ms per step and rank under py-spy; "
              f"the run's own timers (under py-spy): {figures[name]}", flush=True)
    rows = compare(profiles, args.top)
    print(f"| frame | {names[0]} ms | {names[1]} ms | difference ms |\n| --- | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['frame']} | {row[names[0]]:.1f} | {row[names[1]]:.1f} | {row['difference_ms']:+.1f} |")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(), "steps": args.steps, "rate": args.rate,
                                         "gpus_per_node": args.gpus_per_node, "dynamic_bsz": list(DYNAMIC_BSZ),
                                         "figures": figures, "comparison": rows,
                                         "profiles_ms_per_step_rank": profiles}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
