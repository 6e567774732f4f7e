"""Benchmark verl_ext's policy losses against verl's ``vanilla`` and verl's own ``clip_cov`` / ``kl_cov``.

For each loss: forward + backward time (median of ``--repeats``) and peak memory on the same tensors
(default 64 x 4096 tokens), as ratios to verl's ``vanilla`` measured in the same run; on CUDA also the
number of host-device synchronisations (``torch.cuda.set_sync_debug_mode``). With ``--engine``, one full
update through verl's FSDP2 engine on a tiny model (step time and peak memory: vanilla, vanilla with
``calculate_entropy``, grpo_erc). Prints a table and writes JSON.

    python -m benchmarks.bench_losses --quick          # < 2 min on 2 CPU cores (from the repository root)
    python -m benchmarks.bench_losses --batch 64 --seq 4096 --repeats 10 --json bench.json
    python -m benchmarks.bench_losses --summarise bench.json   # the tables again, from the file (markdown)
    python -m benchmarks.bench_losses --quick --only bapo   # bapo beside vanilla only (engine: its two scopes)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path
from typing import Callable

import torch

from benchmarks.memtrack import cpu_peak_bytes

import verl  # noqa: E402  (loads the verl_ext plugin)
import verl.trainer.ppo.core_algos as core_algos  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402

import verl_ext  # noqa: E402
from verl_ext.config import PolicyLossConfig  # noqa: E402
from verl_ext.cpu.machine import machine_info  # noqa: E402
from verl_ext.losses import bapo  # noqa: E402
from verl_ext.losses.selection import select_tokens_for_batch  # noqa: E402

verl_ext.ensure_registered()


def make_inputs(batch: int, seq: int, device: torch.device, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(batch, seq, generator=g) * 3 - 0.01
    lp = old + 0.1 * torch.randn(batch, seq, generator=g)
    adv = torch.randn(batch, 1, generator=g).expand(batch, seq).contiguous()
    lengths = torch.randint(seq // 4, seq + 1, (batch,), generator=g)
    mask = torch.arange(seq).unsqueeze(0) < lengths.unsqueeze(1)
    old_h = torch.rand(batch, seq, generator=g) + 0.2
    h = old_h * (1 + 0.1 * torch.randn(batch, seq, generator=g))
    tensors = {"old": old, "lp": lp, "adv": adv, "mask": mask, "h": h, "old_h": old_h}
    return {k: v.to(device) for k, v in tensors.items()}


def actor_config(loss_mode: str, scope: str = "batch") -> ActorConfig:
    bapo = {"bapo_scope": "step" if scope == "batch" else "micro"} if loss_mode == "bapo" else {}
    return ActorConfig(
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=1,
        ppo_mini_batch_size=1,
        rollout_n=1,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        policy_loss=PolicyLossConfig(
            loss_mode=loss_mode, cov_scope=scope, clip_cov_ratio=0.0002, kl_cov_ratio=0.002, ppo_kl_coef=1.0, **bapo
        ),
    )


def cases(x: dict[str, torch.Tensor]) -> dict[str, tuple[Callable, ActorConfig, dict]]:
    """name -> (loss function, config, extra kwargs)."""
    ours = core_algos.POLICY_LOSS_REGISTRY
    erc = {"entropy": x["h"], "old_entropy": x["old_h"]}
    sel = {
        name: select_tokens_for_batch(name, x["adv"], x["old"], x["mask"], actor_config(name), step=0)
        for name in ("clip_cov", "kl_cov")
    }
    return {
        "vanilla (verl)": (ours["vanilla"], actor_config("vanilla"), {}),
        "clip_cov (verl built-in)": (core_algos.compute_policy_loss_clip_cov, actor_config("clip_cov"), {}),
        "clip_cov batch scope": (ours["clip_cov"], actor_config("clip_cov"), {"cov_selected": sel["clip_cov"]}),
        "clip_cov micro scope": (ours["clip_cov"], actor_config("clip_cov", "micro"), {}),
        "kl_cov (verl built-in)": (core_algos.compute_policy_loss_kl_cov, actor_config("kl_cov"), {}),
        "kl_cov batch scope": (ours["kl_cov"], actor_config("kl_cov"), {"cov_selected": sel["kl_cov"]}),
        "kl_cov micro scope": (ours["kl_cov"], actor_config("kl_cov", "micro"), {}),
        "grpo_erc": (ours["grpo_erc"], actor_config("grpo_erc"), erc),
        "gppo_erc": (ours["gppo_erc"], actor_config("gppo_erc"), erc),
        # step scope: the bounds come from the no-grad pass (not timed here: see bapo_statistics_ms)
        "bapo step scope (bounds given)": (ours["bapo"], actor_config("bapo"), {"bapo_bounds": step_bounds(x)}),
        "bapo micro scope (search in the call)": (ours["bapo"], actor_config("bapo", "micro"), {}),
    }


def step_bounds(x: dict[str, torch.Tensor]) -> torch.Tensor:
    """BAPO's bounds over the whole input, as the no-grad pass decides them for a step."""
    cfg = actor_config("bapo")
    lows, highs = bapo.bound_grid(cfg, x["lp"].device)
    ratio = bapo.importance_ratio(x["lp"], x["old"])
    stats = bapo.contribution_statistics(ratio, x["adv"], x["mask"], lows, highs, cfg.clip_ratio_c)
    return bapo.decide_bounds(stats, lows, highs, 0.5)


def step_fn(fn: Callable, cfg: ActorConfig, extra: dict, x: dict[str, torch.Tensor]) -> Callable[[], None]:
    def run() -> None:
        lp = x["lp"].detach().requires_grad_(True)
        loss, _ = fn(x["old"], lp, x["adv"], x["mask"], "token-mean", cfg, None, **extra)
        loss.backward()

    return run


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_ms(runs: dict[str, Callable[[], None]], repeats: int, device: torch.device) -> dict[str, float]:
    """Median wall time of each run; the runs are interleaved round by round so that a noisy machine
    disturbs all of them alike (the ratios are what is reported)."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():
        run()
    sync(device)
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            sync(device)
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


def peak_bytes(run: Callable[[], None], device: torch.device) -> int:
    if device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        run()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    return cpu_peak_bytes(run)


def count_syncs(run: Callable[[], None], device: torch.device) -> int | None:
    """Host-device synchronisations in one call (CUDA only; None elsewhere)."""
    if device.type != "cuda":
        return None
    run()
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def bench_losses(args: argparse.Namespace, device: torch.device) -> list[dict]:
    x = make_inputs(args.batch, args.seq, device)
    runs = {name: step_fn(fn, cfg, extra, x) for name, (fn, cfg, extra) in cases(x).items()
            if name == "vanilla (verl)" or not args.only or name.split()[0] in args.only}  # fmt: skip
    times = time_ms(runs, args.repeats, device)
    rows = [
        {"loss": name, "time_ms": times[name], "peak_mb": peak_bytes(run, device) / 2**20, "syncs": count_syncs(run, device)}
        for name, run in runs.items()
    ]
    base = rows[0]
    for row in rows:
        row["time_ratio"] = row["time_ms"] / base["time_ms"]
        row["mem_ratio"] = row["peak_mb"] / base["peak_mb"] if base["peak_mb"] else float("nan")
    configs = {name: actor_config(name) for name in ("clip_cov", "kl_cov") if not args.only or name in args.only}
    selection = time_ms(
        {
            name: (lambda name=name: select_tokens_for_batch(name, x["adv"], x["old"], x["mask"], configs[name], step=1))
            for name in configs
        },
        args.repeats,
        device,
    )
    if not args.only or "bapo" in args.only:  # the step scope's search, once per optimiser step after the pass
        selection["bapo statistics + search"] = time_ms({"bapo": lambda: step_bounds(x)}, args.repeats, device)["bapo"]
    return rows, selection


def bench_engine(args: argparse.Namespace) -> list[dict]:
    """One update through verl's FSDP2 engine on a tiny model: vanilla, vanilla + entropy, grpo_erc (with ``--only
    bapo``: vanilla and bapo's two scopes)."""
    from benchmarks.bench_engine import BAPO_CASES, BENCH_CASES, benchmark_update  # verl's TrainingWorker on gloo

    cases = BAPO_CASES if args.only and "bapo" in args.only else BENCH_CASES
    return benchmark_update(repeats=args.engine_repeats, batch=args.engine_batch, response_length=args.engine_len,
                            cases=cases)  # fmt: skip


PER_STEP_PASS = {
    "clip_cov batch scope": "clip_cov",
    "kl_cov batch scope": "kl_cov",
    "bapo step scope (bounds given)": "bapo statistics + search",
}
"""Rows whose loss needs work outside the timed call, once per step, and that work's key in the results'
``batch_selection_ms``: the batch-scope selection (once per training step) and BAPO's statistics and bound search
(once per optimiser step, after a no-grad forward that is not timed here). The other rows have no such pass."""


def table(rows: list[dict], passes: dict[str, float] | None = None) -> str:
    """The rows as a markdown table (the one the script prints and docs/results_performance.md quotes). With
    ``passes`` (the per-step times by :data:`PER_STEP_PASS` key) two columns add each row's per-step pass: its time
    and the call plus the pass as a ratio to vanilla's call (the first row); a row of :data:`PER_STEP_PASS` whose pass
    is missing is a KeyError naming it."""
    if passes is None:
        lines = ["| loss | fwd+bwd ms | x vanilla | peak MB | x vanilla | syncs |",
                 "| --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    else:
        if rows[0]["loss"] != "vanilla (verl)":
            raise ValueError(f"the first row is {rows[0]['loss']!r}: the ratios need verl's vanilla first")
        lines = ["| loss | fwd+bwd ms | x vanilla, call only | per-step pass ms | x vanilla, call + pass | peak MB | "
                 "x vanilla | syncs |",
                 "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for r in rows:
        syncs = "-" if r["syncs"] is None else str(r["syncs"])
        step = ""
        if passes is not None:
            key = PER_STEP_PASS.get(r["loss"])
            extra = passes[key] if key is not None else 0.0
            shown = f"{extra:.2f}" if key is not None else "none"
            step = f"{shown} | {(r['time_ms'] + extra) / rows[0]['time_ms']:.2f} | "
        lines.append(f"| {r['loss']} | {r['time_ms']:.2f} | {r['time_ratio']:.2f} | {step}{r['peak_mb']:.1f} | "
                     f"{r['mem_ratio']:.2f} | {syncs} |")  # fmt: skip
    return "\n".join(lines)


def print_table(rows: list[dict], title: str, passes: dict[str, float] | None = None) -> None:
    print(f"\n{title}\n")
    print(table(rows, passes))


def selection_line(selection: dict[str, float]) -> str:
    """Where and how often each timed per-step pass runs (its time is in the table's pass column)."""
    lines = []
    if any(key in selection for key in ("clip_cov", "kl_cov")):
        lines.append("per-step pass of clip_cov / kl_cov batch scope: the selection over the whole training batch, "
                     "once per training step (timed here on this device; in training it runs on the driver's CPU)")
    if "bapo statistics + search" in selection:
        lines.append("per-step pass of bapo step scope: statistics + bound search, once per optimiser step, after a "
                     "no-grad forward not timed here")
    return "\n".join(lines)


def summarise(result: dict) -> str:
    """The tables of a results file written by ``--json``, as the run printed them (a missing key is a KeyError
    naming it)."""
    batch, seq = result["tokens"]
    passes = result["batch_selection_ms"]
    parts = [f"policy losses, {batch} x {seq} tokens on {result['device']}\n", table(result["losses"], passes), "",
             selection_line(passes)]  # fmt: skip
    if "engine" in result:  # written only with --engine
        parts += ["", "one update through verl's FSDP2 engine (tiny Qwen2, CPU/gloo)\n", table(result["engine"])]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=64, help="sequences per call (default 64)")
    p.add_argument("--seq", type=int, default=4096, help="response length (default 4096)")
    p.add_argument("--repeats", type=int, default=7, help="timed repetitions, median reported (default 7)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="default: cuda if available")
    p.add_argument("--engine", action=argparse.BooleanOptionalAction, default=True, help="also time verl's engine")
    p.add_argument("--engine-repeats", type=int, default=3, help="engine updates timed per configuration")
    p.add_argument("--engine-batch", type=int, default=8, help="sequences per engine update")
    p.add_argument("--engine-len", type=int, default=64, help="response length of the engine batch")
    p.add_argument("--quick", action="store_true", help="small sizes: 16 x 1024 tokens, 3 repeats")
    p.add_argument("--only", nargs="+", default=None, metavar="LOSS",
                   help="time only these losses (first word of a row: bapo, clip_cov, ...) beside vanilla")
    p.add_argument("--json", default="bench_losses.json", help="where to write the results (default bench_losses.json)")
    p.add_argument("--summarise", type=Path, default=None, metavar="JSON",
                   help="measure nothing: print the tables of an earlier run's --json file (markdown) and exit")
    args = p.parse_args(argv)
    if args.summarise:
        print(summarise(json.loads(args.summarise.read_text())))
        return 0
    if args.quick:
        args.batch, args.seq, args.repeats, args.engine_repeats = 16, 1024, 3, 2
    if min(args.batch, args.seq, args.repeats) < 1:
        p.error("--batch, --seq and --repeats must be >= 1")
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available")

    result = {"machine": machine_info(), "device": str(device), "tokens": [args.batch, args.seq]}
    rows, selection = bench_losses(args, device)
    result["losses"], result["batch_selection_ms"] = rows, selection
    print(f"machine: {result['machine']}")
    print_table(rows, f"policy losses, {args.batch} x {args.seq} tokens on {device} (median of {args.repeats})",
                selection)
    print(selection_line(selection))
    if args.engine:
        engine_rows = bench_engine(args)
        result["engine"] = engine_rows
        print_table(engine_rows, "one update through verl's FSDP2 engine (tiny Qwen2, CPU/gloo)")
    Path(args.json).write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
