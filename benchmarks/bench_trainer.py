"""What verl_ext's trainer costs on top of verl's: whole training steps of the CPU recipe, side by side.

Six variants of ``recipe/cpu_tiny.sh`` (same model, data, seed and settings), run in interleaved rounds so
that each sees the same machine:

* ``verl_ext vanilla``   - ``python -m verl_ext.main_ppo``, verl's vanilla loss: verl_ext's TaskRunner,
  trainer hooks, actor worker and actor loss, doing nothing a vanilla run needs;
* ``verl vanilla``       - ``python -m verl.trainer.main_ppo`` with CPU mode only (the ``verl_ext_cpu`` plugin,
  not verl_ext's losses): verl as it ships;
* ``verl_ext clip_cov``  - verl_ext's ``clip_cov`` in batch scope (selection on the driver before each update);
* ``verl clip_cov``      - verl's built-in ``clip_cov`` (per micro-batch), verl's entry point;
* ``verl_ext kl_cov`` / ``verl kl_cov`` - the same pair for KL-Cov.

With ``VERL_EXT_CPU_IOMP=1`` (CPU mode's opt-in Intel OpenMP preload, which only verl_ext's entry point applies)
verl's variants get the same ``LD_PRELOAD``, so that both sides of a pair run on one OpenMP runtime.

Per run: the median of ``timing_s/step`` over the steps after the first (the first compiles and warms up), of the
step without generation (``timing_s/step - timing_s/gen``) and of ``timing_s/update_actor``, the peak resident memory of the actor worker (``perf/max_memory_allocated_gb``, which CPU mode reports as the
worker's RSS peak), verl_ext's driver-side selection time (``timing_s/verl_ext/cov_selection``) and, on the V1
trainer, the time of verl's advantage step (``timing_s/adv``), where verl_ext's fields now go with verl's own put, and
of the fields' computation inside it (``timing_s/verl_ext/advantage_fields``), and ``update_actor + adv`` - the sum
that counts work moved from the update to the advantage step - and the driver's separate TransferQueue round trip
(``timing_s/verl_ext/update_fields_fetch`` + ``..._store``; 0 unless the fields could not go with verl's put; runs
before this change logged it in every batch-scope step). Per variant: the median over rounds, and its ratio to the
matching verl variant. Timers are read strictly: a step without a timer the variant logs is an error naming the
timer, the log and the step (:func:`timer`); a figure is 0 only where the variant does not do that work.

    python -m benchmarks.bench_trainer --steps 8 --rounds 3 --json benchmarks/results/results_trainer_cpu.json
    python -m benchmarks.bench_trainer --gpus-per-node 2 --dynamic --json benchmarks/results/results_trainer_cpu_2ranks_dynamic.json
    python -m benchmarks.bench_trainer --summarise-only --work <an earlier run's folder> ...   # re-read its logs

(from the repository root: ``benchmarks`` is a package there).

``--gpus-per-node 2 --dynamic`` runs the GPU recipes' structure: two training processes and verl's dynamic batch
size (token budgets that pack each rank's rows into several micro-batches), and adds a fifth variant,
``verl_ext clip_cov fixed`` (the same run with fixed micro-batches), to compare fixed with dynamic micro-batches.

Needs CPU mode installed (``scripts/install_cpu.sh``); about 2 minutes of start-up per run on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.recipe_runs import read_rows, run_recipe

VARIANTS: dict[str, dict[str, Any]] = {
    "verl_ext vanilla": {"loss": "vanilla", "entry": "verl_ext.main_ppo", "baseline": "verl vanilla"},
    "verl vanilla": {"loss": "vanilla", "entry": "verl.trainer.main_ppo", "baseline": None},
    "verl_ext clip_cov": {"loss": "clip_cov", "entry": "verl_ext.main_ppo", "baseline": "verl clip_cov"},
    "verl clip_cov": {"loss": "clip_cov", "entry": "verl.trainer.main_ppo", "baseline": None},
    "verl_ext kl_cov": {"loss": "kl_cov", "entry": "verl_ext.main_ppo", "baseline": "verl kl_cov"},
    "verl kl_cov": {"loss": "kl_cov", "entry": "verl.trainer.main_ppo", "baseline": None},
}
VERL_ONLY_ARGS = ("hydra.searchpath=[pkg://verl_ext.configs]", "+platform=cpu")
"""verl's entry point with CPU mode's config group (verl's own config does not list it)."""


DYNAMIC_BSZ = (
    "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=256",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=384",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=384",
)
"""Dynamic batch size with budgets below a rank's share of a mini-batch (16 prompts x 8 responses of <= 48 tokens)."""

FIXED_VARIANT = {"loss": "clip_cov", "entry": "verl_ext.main_ppo", "baseline": "verl_ext clip_cov", "fixed": True}
"""With ``--dynamic``: verl_ext's clip_cov with fixed micro-batches, compared with the same run under dynamic ones."""


VERL_TIMERS = ("timing_s/step", "timing_s/gen", "timing_s/update_actor", "timing_s/adv")
"""verl's timers that every step of every variant logs (verl's V1 trainer, the recipe's default)."""
PEAK_MEMORY = "actor/perf/max_memory_allocated_gb"
"""verl's peak memory of the actor worker, logged at every step (CPU mode: the worker's RSS peak)."""
SELECTION_TIMER = "timing_s/verl_ext/cov_selection"
"""verl_ext's driver-side batch-scope selection (``verl_ext.trainer.hooks.SELECTION_TIMER``)."""
FIELDS_TIMER = "timing_s/verl_ext/advantage_fields"
"""verl_ext's fields computed inside verl's advantage put (``verl_ext.trainer.v1.ADVANTAGE_FIELDS_TIMER``)."""
ROUND_TRIP_TIMERS = ("timing_s/verl_ext/update_fields_fetch", "timing_s/verl_ext/update_fields_store")
"""verl_ext's own TransferQueue round trip, logged only by a run whose fields could not go with verl's put
(``verl_ext.trainer.v1.FETCH_TIMER`` / ``STORE_TIMER``)."""


def driver_timers(spec: dict[str, Any]) -> tuple[str, ...]:
    """verl_ext's driver timers that every step of the variant ``spec`` logs: the batch-scope selection and the fields
    computed in verl's advantage put for verl_ext's ``clip_cov`` / ``kl_cov``; none for vanilla (no field to add) and
    for verl's entry point (no verl_ext trainer)."""
    if spec["entry"] == "verl_ext.main_ppo" and spec["loss"] in ("clip_cov", "kl_cov"):
        return (SELECTION_TIMER, FIELDS_TIMER)
    return ()


def timer(row: dict[str, Any], key: str, source: Path | str) -> float:
    """``row[key]``; a step without it is a ``ValueError`` naming the key, the log and the step."""
    if key not in row:
        raise ValueError(f"{source}: step {row.get('step', '?')} logged no {key!r}")
    return float(row[key])


def run_variant(name: str, spec: dict[str, Any], work: Path, steps: int, round_index: int, gpus_per_node: int = 1,
                dynamic: bool = False) -> dict[str, Any]:
    """One training run of ``spec``; returns its summary figures."""
    variables = {"WORK_DIR": str(work), "LOSS": spec["loss"], "GPUS_PER_NODE": str(gpus_per_node)}
    args = ["verl_ext.recipe.assets=false", f"trainer.total_training_steps={steps}", "trainer.val_before_train=False",
            f"trainer.test_freq={steps + 1}"]  # fmt: skip
    if dynamic and not spec.get("fixed"):
        args += list(DYNAMIC_BSZ)
    if spec["entry"].startswith("verl."):
        # CPU mode without verl_ext's losses: verl's registry keeps its own clip_cov; forwarded to every worker
        variables["VERL_USE_EXTERNAL_PLUGINS"] = "verl_ext_cpu"
        args += [*VERL_ONLY_ARGS, "++ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_PLUGINS=verl_ext_cpu",
                 *same_openmp_runtime()]  # fmt: skip
    run = run_name(name, round_index)
    return figures(run_recipe(work, run, args, **variables), work / f"{run}.jsonl", driver_timers(spec))


def read_figures(work: Path, name: str, spec: dict[str, Any], round_index: int) -> dict[str, Any]:
    """The figures of an earlier run of variant ``name`` in round ``round_index``, from its JSONL log in ``work``."""
    run = run_name(name, round_index)
    return figures(read_rows(work, run), work / f"{run}.jsonl", driver_timers(spec))


def same_openmp_runtime() -> list[str]:
    """The override that gives verl's entry point the OpenMP preload verl_ext's applies (``VERL_EXT_CPU_IOMP=1``);
    none when it is off. Without it a pair would compare two OpenMP runtimes, not two trainers."""
    from verl_ext.cpu import openmp

    return [f"++{openmp.KEY}={openmp.library()}"] if openmp.wanted() else []


def run_name(name: str, round_index: int) -> str:
    """The experiment (and JSONL) name of a variant's run in a round."""
    return f"{name.replace(' ', '_')}_{round_index}"


def figures(rows: list[dict[str, Any]], source: Path | str, logged: tuple[str, ...] = ()) -> dict[str, Any]:
    """A run's summary: medians over the steps after the first. ``train_s`` is the step without generation
    (``timing_s/step - timing_s/gen``): vLLM's CPU generation time comes in steps of ~2 s here (the same batch
    takes 2 or 4 s) and depends on the response lengths each loss's updates lead to, so whole-step times compare
    the trainers only through that noise; ``train_s`` and ``update_actor_s`` hold what verl_ext changes.

    Every timer is read strictly (:func:`timer`; ``source``, the log, names where a missing one was): verl's
    :data:`VERL_TIMERS` and :data:`PEAK_MEMORY` at every step, the driver timers in ``logged`` (the variant's
    :func:`driver_timers`) at every step after the first; a driver timer the variant does not log is 0 (the variant does
    not do that work) and an error if the log has it. The round trip (:data:`ROUND_TRIP_TIMERS`) is 0 where no step
    logged it (the fields went with verl's put), else read at every step after the first."""
    for row in rows:
        for key in (*VERL_TIMERS, PEAK_MEMORY):
            timer(row, key, source)
    later = rows[1:]
    for key in (SELECTION_TIMER, FIELDS_TIMER):
        seen = [r.get("step") for r in later if key in r]
        if key not in logged and seen:
            raise ValueError(f"{source}: steps {seen} logged {key!r}, which this variant does not log")
    round_trip = any(key in r for r in later for key in ROUND_TRIP_TIMERS)

    def median(*keys: str) -> float:
        return statistics.median(sum(timer(r, key, source) for key in keys) for r in later)

    return {
        "step_s": median("timing_s/step"),
        "train_s": statistics.median(timer(r, "timing_s/step", source) - timer(r, "timing_s/gen", source)
                                     for r in later),  # fmt: skip
        "update_actor_s": median("timing_s/update_actor"),
        "peak_rss_gb": max(timer(r, PEAK_MEMORY, source) for r in rows),
        "selection_s": median(SELECTION_TIMER) if SELECTION_TIMER in logged else 0.0,
        "fetch_store_s": median(*ROUND_TRIP_TIMERS) if round_trip else 0.0,
        "adv_s": median("timing_s/adv"),
        "fields_s": median(FIELDS_TIMER) if FIELDS_TIMER in logged else 0.0,
        "update_adv_s": median("timing_s/update_actor", "timing_s/adv"),
        "steps": len(rows),
    }


FIGURES = ("step_s", "train_s", "update_actor_s", "peak_rss_gb", "selection_s", "fetch_store_s", "adv_s", "fields_s",
           "update_adv_s")


def summarise(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Median over rounds of each figure, and the ratios to the variant's verl baseline; ``update_ratio_rounds`` /
    ``update_adv_ratio_rounds``: the median of the per-round ratios (the two runs of a round ran one after the other,
    so a slow hour of the machine divides out; the first figures divide medians taken over different hours)."""
    table: dict[str, dict[str, Any]] = {}
    for name, runs in results.items():
        table[name] = {key: statistics.median(run[key] for run in runs) for key in FIGURES}
    for name, row in table.items():
        base = {**VARIANTS, "verl_ext clip_cov fixed": FIXED_VARIANT}[name]["baseline"]
        if base is not None and base in table:
            row["step_ratio"] = row["step_s"] / table[base]["step_s"]
            row["train_ratio"] = row["train_s"] / table[base]["train_s"]
            row["update_ratio"] = row["update_actor_s"] / table[base]["update_actor_s"]
            row["rss_ratio"] = row["peak_rss_gb"] / table[base]["peak_rss_gb"]
            if table[base].get("update_adv_s"):
                row["update_adv_ratio"] = row["update_adv_s"] / table[base]["update_adv_s"]
            row["selection_share"] = row["selection_s"] / row["step_s"]
            pairs = list(zip(results[name], results[base]))
            row["update_ratio_rounds"] = statistics.median(a["update_actor_s"] / b["update_actor_s"] for a, b in pairs)
            if all(b.get("update_adv_s") for _, b in pairs):
                row["update_adv_ratio_rounds"] = statistics.median(a["update_adv_s"] / b["update_adv_s"]
                                                                   for a, b in pairs)  # fmt: skip
    return table


def format_table(table: dict[str, dict[str, Any]]) -> str:
    lines = ["| variant | step s | x baseline | step without generation s | x baseline | update_actor s | x baseline "
             "| actor peak RSS GB | x baseline | driver selection s | driver store fetch + put s | adv s "
             "| fields in the advantage put s | update_actor + adv s | x baseline |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, row in table.items():
        ratios = [f"{row[k]:.3f}" if k in row else "1"
                  for k in ("step_ratio", "train_ratio", "update_ratio", "rss_ratio", "update_adv_ratio")]  # fmt: skip
        lines.append(f"| {name} | {row['step_s']:.3f} | {ratios[0]} | {row['train_s']:.3f} | {ratios[1]} | "
                     f"{row['update_actor_s']:.3f} | {ratios[2]} | {row['peak_rss_gb']:.3f} | {ratios[3]} | "
                     f"{row['selection_s']:.4f} | {row['fetch_store_s']:.4f} | {row['adv_s']:.3f} | "
                     f"{row['fields_s']:.4f} | {row['update_adv_s']:.3f} | {ratios[4]} |")  # fmt: skip
    lines += [""] if any("update_ratio_rounds" in row for row in table.values()) else []
    for name, row in table.items():
        if "update_ratio_rounds" in row:
            lines.append(f"{name}: median of the rounds' ratios to its baseline: update_actor "
                         f"{row['update_ratio_rounds']:.3f}x, update_actor + adv "
                         f"{row.get('update_adv_ratio_rounds', float('nan')):.3f}x")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="training steps per run (8; the first is dropped)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the variants (3)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--work", type=Path, default=None, help="work folder (a temporary one)")
    parser.add_argument("--gpus-per-node", type=int, default=1, help="training processes (1)")
    parser.add_argument("--dynamic", action="store_true", help="dynamic batch size, plus a fixed-micro-batch variant")
    parser.add_argument("--variants", default=None,
                        help="comma-separated variant names to run (default: all), e.g. 'verl_ext clip_cov,verl clip_cov'")
    parser.add_argument("--summarise-only", action="store_true",
                        help="train nothing: read the runs' JSONL logs already in --work (an earlier run's folder)")
    parser.add_argument("--summarise", type=Path, default=None, metavar="JSON",
                        help="train nothing: print the table of an earlier run's --json file and exit")
    args = parser.parse_args(argv)
    if args.summarise:
        print(format_table(json.loads(args.summarise.read_text())["summary"]))
        return 0
    if args.summarise_only and args.work is None:
        parser.error("--summarise-only needs --work, the folder of an earlier run")
    if args.steps < 3 or args.rounds < 1 or args.gpus_per_node not in (1, 2, 4, 8):
        parser.error("--steps must be >= 3, --rounds >= 1 and --gpus-per-node one of 1, 2, 4, 8")
    from verl_ext.testbed.task import write_assets
    from verl_ext.cpu.machine import machine_info

    work = args.work or Path(tempfile.mkdtemp(prefix="verl_ext_bench_trainer_"))
    if not args.summarise_only:
        write_assets(work, target_length=16)
    variants = {**VARIANTS, "verl_ext clip_cov fixed": FIXED_VARIANT} if args.dynamic else dict(VARIANTS)
    if args.variants:
        chosen = [name.strip() for name in args.variants.split(",")]
        unknown = [name for name in chosen if name not in variants]
        if unknown:
            parser.error(f"--variants: unknown {unknown}; allowed: {sorted(variants)}")
        variants = {name: variants[name] for name in chosen}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for round_index in range(args.rounds):
        for name, spec in variants.items():
            if args.summarise_only:
                results[name].append(read_figures(work, name, spec, round_index))
            else:
                results[name].append(run_variant(name, spec, work, args.steps, round_index, args.gpus_per_node,
                                                 args.dynamic))  # fmt: skip
            print(f"round {round_index + 1}/{args.rounds} {name}: {results[name][-1]}", flush=True)
    table = summarise(results)
    print(format_table(table))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(), "steps": args.steps, "rounds": args.rounds,
                                         "gpus_per_node": args.gpus_per_node, "dynamic": args.dynamic,
                                         "runs": results, "summary": table}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
