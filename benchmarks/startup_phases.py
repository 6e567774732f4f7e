"""Where a recipe run's time goes before its first training step: a per-phase breakdown of ``SCALE=cpu bash
recipe/<name>.sh``, each variant run in interleaved rounds so that all see the same machine.

Every line the run prints (the driver's and, through Ray's log forwarding, every worker's) is stamped with the
seconds since the script started; a phase ends at the first line that carries its marker:

* ``ray``         - ``Started a local Ray instance`` (the driver's ``ray.init``);
* ``task_runner`` - the first line from verl_ext's TaskRunner actor (its process up, verl imported);
* ``dataset``     - ``train and validate dataloader initialized`` (TransferQueue on the V1 trainer, the datasets);
* ``workers``     - ``actor and ref model engine initialized`` (the FSDP2 training processes);
* ``rollout``     - ``ready to fit`` (the vLLM servers: each a server actor, its EngineCore process, its workers);
* ``validation``  - ``Initial validation metrics`` (the agent-loop and load-balancer actors, the first generation);
* ``step_1``      - the console logger's ``step:1`` line (the end of the first training step);
* ``exit``        - the launch's exit, after its one step (the shut-down of Ray's actors and the driver), not a phase
  of the start-up but paid by every launch.

Per variant the median over rounds of each phase's duration and of the time to the first step (``validation``,
i.e. the start of step 1). The variants are the recipe's CPU-mode settings before and after the start-up cuts of
docs/benchmarks.md, as overrides on the same script:

    python benchmarks/startup_phases.py --recipe dapo_clip_cov --rounds 2 --json benchmarks/results/results_startup_cpu.json

Needs CPU mode installed (``scripts/install_cpu.sh``); about 2 minutes a run on 2 cores. The first run builds the
SCALE=cpu assets (outside the timings: a warm-up run of the first variant is not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from verl_ext.testbed.task import STAMP

REPO = Path(__file__).resolve().parents[1]

PHASES = (
    ("ray", "Started a local Ray instance"),
    ("task_runner", "(VerlExtTaskRunner"),
    ("dataset", "train and validate dataloader initialized"),
    ("workers", "actor and ref model engine initialized"),
    ("rollout", "ready to fit"),
    ("validation", "Initial validation metrics"),
    ("step_1", "step:1 "),
)

PROCESSES = (
    ("task_runner", "(VerlExtTaskRunner"),
    ("transfer_queue", "(SimpleStorageUnit"),
    ("fsdp_worker", "(WorkerDict"),
    ("vllm_server", "(vLLMHttpServer"),
    ("engine_core", "(EngineCore"),
    ("load_balancer", "(GlobalRequestLoadBalancer"),
    ("agent_loop", "(AgentLoopWorker"),
)
"""Ray's log prefix of each process kind: the seconds at which a run first prints from one (its process up and its
first import done) are kept beside the phases (``first_line``), to place each process start inside its phase."""

IMPORTS = {
    "driver": "verl_ext.main_ppo",
    "task_runner": "verl_ext.trainer.v1",
    "fsdp_worker": "verl.workers.engine_workers",
    "transfer_queue": "transfer_queue.storage.simple_storage",
    "vllm_server": "verl.workers.rollout.vllm_rollout.vllm_async_server",
    "engine_core": "vllm.v1.engine.core",
    "load_balancer": "verl.workers.rollout.router",
    "agent_loop": "verl.trainer.ppo.v1.agent_loop_tq",
}
"""The module whose class each process kind runs: its import in a fresh interpreter (``VERL_PLATFORM=cpu``, as every
process of a CPU-mode run) is that process's import cost (``--imports``)."""

VARIANTS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    # verl's 8 TransferQueue storage actors; one vLLM server per training process (TP 1, SCALE=cpu's former GEN_TP)
    "before": ({"GEN_TP": "1"}, ("transfer_queue.backend.SimpleStorage.num_data_storage_units=8",)),
    # CPU mode's one storage actor; the recipe's own TP (DAPO's 2: one server over both processes)
    "after": ({}, ()),
    # the toy recipe as it started before its assets were stamped: the stamp is removed before the launch, so the
    # launch rebuilds the toy model and data in a subprocess (~7 s), as every launch used to
    "assets_rebuilt": ({}, ()),
    # vLLM's engine as verl starts it: the "mp" executor's worker process beside the engine core at TP 1, where CPU
    # mode now runs the model in the engine core ("uni", verl_ext/cpu/vllm_executor.py)
    "engine_worker_process": ({}, ("actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend=mp",)),
}
REBUILD_ASSETS = {"assets_rebuilt"}
"""Variants launched without the toy task's stamp (:data:`verl_ext.testbed.task.STAMP`)."""


def timed_run(recipe: str, scale_dir: Path, env_extra: dict[str, str], args: tuple[str, ...], log: Path) -> dict[str, float]:
    """One ``SCALE=cpu`` run of one step (``WORK_DIR=scale_dir``); the seconds at which each phase's marker first
    appeared. Raises if the run fails."""
    from verl_ext.recipe import launch_env

    launch = set(launch_env.names())  # the run's launch variables are its own, not the shell's
    env = {k: v for k, v in os.environ.items()
           if (not k.startswith(("VERL_", "RAY_")) or k == "VERL_EXT_CPU_IOMP") and k not in launch}  # fmt: skip
    env.update(WORK_DIR=str(scale_dir), PYTHON=sys.executable, EXP_NAME=f"startup-{log.stem}", **env_extra)
    if recipe != "cpu_tiny":  # the toy recipe is CPU mode itself and refuses a SCALE
        env["SCALE"] = "cpu"
    start = time.monotonic()
    seen: dict[str, float] = {}
    first: dict[str, float] = {}
    cmd = ["bash", str(REPO / "recipe" / f"{recipe}.sh"), "trainer.total_training_steps=1", "trainer.test_freq=-1", *args]
    proc = subprocess.Popen(cmd, env=env, cwd=scale_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with log.open("w") as out:
        for line in proc.stdout:
            now = time.monotonic() - start
            out.write(f"{now:8.2f} {line}")
            for phase, marker in PHASES:
                if phase not in seen and marker in line:
                    seen[phase] = now
            for kind, marker in PROCESSES:
                if kind not in first and marker in line:
                    first[kind] = round(now, 2)
    if proc.wait() != 0:
        raise RuntimeError(f"{recipe} {env_extra} {args} failed: see {log}")
    seen["exit"] = time.monotonic() - start
    seen["first_line"] = first  # type: ignore[assignment]
    return seen


def import_seconds(module: str, rounds: int) -> float:
    """Median wall seconds of ``import module`` in a fresh interpreter with ``VERL_PLATFORM=cpu``, less an empty
    interpreter's start."""
    env = {**os.environ, "VERL_PLATFORM": "cpu"}

    def wall(code: str) -> float:
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, timeout=600)
        return time.monotonic() - start

    empty = statistics.median(wall("pass") for _ in range(rounds))
    return round(statistics.median(wall(f"import {module}") for _ in range(rounds)) - empty, 2)


def import_table(imports: dict[str, float]) -> str:
    """``--imports``' result as a markdown table: process kind, module, seconds."""
    lines = ["| process | module imported | seconds |", "| --- | --- | ---: |"]
    lines += [f"| {kind} | `{IMPORTS[kind]}` | {seconds:.2f} |" for kind, seconds in imports.items()]
    return "\n".join(lines)


def durations(seen: dict[str, float]) -> dict[str, float | None]:
    """Each phase's duration (from the previous phase's end) and the time to the first step."""
    out: dict[str, Any] = {}
    previous = 0.0
    for phase, _ in PHASES:
        at = seen.get(phase)
        out[phase] = None if at is None else round(at - previous, 2)
        previous = at if at is not None else previous
    out["to_first_step"] = None if "validation" not in seen else round(seen["validation"], 2)
    if "exit" in seen and "step_1" in seen:  # from the end of the (only) step to the launch's exit: Ray's shut-down
        out["exit"] = round(seen["exit"] - seen["step_1"], 2)
    if "first_line" in seen:
        out["first_line"] = seen["first_line"]
    return out


def table(summary: dict[str, Any]) -> str:
    """The summary's medians (seconds) as a markdown table, one column per variant, and the ratio of the time to the
    first step when both variants ran: the table the script prints and docs/results.md quotes. A phase whose marker
    never appeared is ``-``; a missing key is a KeyError naming it."""
    names = [name for name in summary if not name.startswith("after_over_")]
    lines = ["| phase | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
    for phase in [*(p for p, _ in PHASES), "to_first_step", "exit"]:
        if all(phase not in summary[name] for name in names):  # runs recorded before the exit was timed
            continue
        cells = ["-" if summary[name].get(phase) is None else f"{summary[name][phase]:.2f}" for name in names]
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    for key in (key for key in summary if key.startswith("after_over_")):
        lines.append(f"\nto the first step, after / {key.removeprefix('after_over_')}: {summary[key]:.3f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="dapo_clip_cov", help="recipe/<name>.sh, run with SCALE=cpu")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--work", type=Path, help="folder for the assets and logs (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--imports", action="store_true",
                        help="measure only each process kind's import (IMPORTS), --rounds times, and write --json")
    parser.add_argument("--summarise", type=Path, default=None, metavar="JSON",
                        help="run nothing: print the table of an earlier run's --json file (markdown) and exit")
    opts = parser.parse_args(argv)
    if opts.summarise:
        data = json.loads(opts.summarise.read_text())
        print(import_table(data["imports"]) if "imports" in data else table(data["summary"]))
        return
    if opts.imports:
        imports = {kind: import_seconds(module, opts.rounds) for kind, module in IMPORTS.items()}
        print(import_table(imports))
        if opts.json:
            opts.json.write_text(json.dumps({"rounds": opts.rounds, "cpus": os.cpu_count(), "imports": imports,
                                             "command": " ".join(["python", "benchmarks/startup_phases.py",
                                                                  *(argv if argv is not None else sys.argv[1:])])},
                                            indent=2) + "\n")  # fmt: skip
        return
    names = opts.variants.split(",")
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {unknown}; allowed {', '.join(VARIANTS)}")
    work = opts.work or Path(tempfile.mkdtemp(prefix="startup_"))
    work.mkdir(parents=True, exist_ok=True)
    env0, args0 = VARIANTS[names[0]]
    timed_run(opts.recipe, work, env0, args0, work / "warmup.log")  # builds the assets; not timed
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for r in range(opts.rounds):
        for name in names:
            env_extra, args = VARIANTS[name]
            if name in REBUILD_ASSETS:
                (work / STAMP).unlink(missing_ok=True)
            seen = timed_run(opts.recipe, work, env_extra, args, work / f"{name}_{r}.log")
            runs[name].append(durations(seen))
            print(name, r, runs[name][-1], flush=True)
    summary = {}
    for name, rows in runs.items():
        summary[name] = {key: round(statistics.median(row[key] for row in rows), 2)
                         if all(row[key] is not None for row in rows) else None
                         for key in rows[0] if key != "first_line"}  # fmt: skip
    for other in (name for name in VARIANTS if name != "after"):
        if other in summary and "after" in summary:
            summary[f"after_over_{other}"] = round(summary["after"]["to_first_step"] / summary[other]["to_first_step"], 3)
    result = {"recipe": opts.recipe, "rounds": opts.rounds, "cpus": os.cpu_count(), "summary": summary, "runs": runs,
              "command": " ".join(["python", "benchmarks/startup_phases.py", *(argv if argv is not None else sys.argv[1:])])}  # fmt: skip
    print(table(summary))
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
