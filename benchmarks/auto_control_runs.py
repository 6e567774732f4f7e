"""The self-tuning entropy controller (``controller=auto``) on the real model: its 40-step runs' tracking figures.

Every run is a ``SCALE=cpu MODEL=smollm2 bash recipe/gsm8k_grpo_vanilla.sh trainer.total_training_steps=40
verl_ext.entropy_control.enable=true verl_ext.entropy_control.target=0.3`` GSM8K GRPO launch on
SmolLM2-135M-Instruct (seeds 1 and 2 add :data:`benchmarks.real_model_runs.SEED1` / ``SEED2``): the controller's
defaults, nothing else set. Two seeds hold ``target=0.5`` (:data:`SECOND_TARGET`) instead, and three more seeds
(3, 4, 5: :data:`SEEDS_3_5`) ``target=0.4`` (:data:`THIRD_TARGET`) on the controller whose closing share towards the
coefficient's 0 is not room-limited (:data:`AT_REST`), on a 2-core AMD EPYC without bf16 instructions; on that build
and host seed 0 at 0.3 and at 0.5 was re-measured beside the earlier build's. Two more take one more
key each: ``actuator=clip_high`` (the PPO upper clip bound, from
GRPO's 0.2 up to 1.0) and a relative target on a schedule (``target_unit=initial target=1.0 schedule=linear
target_end=0.5``: from the entropy of step 1 down to half of it over the 40 steps, on the coefficient). The ``entropy_coef`` rows are the current defaults in fp32 (CPU mode's default) on a 2-core
Intel Xeon; the ``cov_ratio`` rows (``actuator=cov_ratio`` on ``gsm8k_grpo_clip_cov.sh``) were measured in bf16 on a
2-core AMD EPYC with ``avx512_bf16``, by the controller before its first move was bounded. Each run's verl file log is
kept as ``benchmarks/results/results_real_model_auto_*.jsonl``. Per run, over steps 21-40, by the definitions of
:mod:`verl_ext.analysis.control` (the same as ``verl_ext.analyze``'s tracking line), against each step's logged target:

* ``bias``: ``|geomean(H / H*) - 1|``;
* ``block gap``: the mean over 5-step blocks of ``|geomean_block(H / H*) - 1|``;
* ``on a bound``: the share of steps with the actuator on a bound of its range (``entropy_control/saturated``), and
  in brackets, for the coefficient, the share of them at rest (the coefficient 0: no bonus, the policy's own decline
  acting). The bound the controller is held to counts only the bound that acts (the coefficient's ``coef_max``),
  as the simulator's ``reach_share`` does; for the other actuators every bound counts;
* ``per-step gap``: ``mean |H - H*| / H*``, beside its noise floor at the noise the run's own entropies show;
* ``log gap``: ``mean |log H - log H*|`` (a factor above and the same factor below count alike);
* the controller's own estimates at step 40 (measurement noise in log H, gain, drift) and the actuator's range over
  the second half; for Clip-Cov's ratio, the share of those steps whose selection took fewer tokens than the ratio
  asked (``entropy_control/limited``: Clip-Cov's covariance bounds admitted fewer candidates);
* ``value while above``: the actuator's mean over the steps 21-40 whose filtered entropy (the controller's own,
  ``entropy_control/filtered_entropy``) is more than :data:`WELL_ABOVE` times the target - the one-sided
  coefficient's should be 0 there (the policy's own decline brings entropy down).

and per actuator the median over its seeds, against the bounds the controller must meet on the entropy coefficient
(bias <= 0.15, block gap <= 0.35, on a bound <= 30 %). The uncontrolled references are vanilla GRPO's runs in each
precision (``results_real_model_vanilla_40{,_seed1,_seed2}.jsonl`` fp32, ``..._vanilla_40_bf16.jsonl`` bf16), by the
same definitions.

    python -m benchmarks.auto_control_runs            # the markdown tables
    python -m benchmarks.auto_control_runs --json F   # the figures as JSON
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verl_ext.analysis.control import (bias, block_gap, gap_noise_floor, log_gap, log_noise_sigma, logged_targets,
                                       relative_gap)
from verl_ext.contract import CONTROL_ACTUATOR_KEYS, CONTROL_LIMITED, CONTROL_METRIC_PREFIX, CONTROL_SATURATED
from verl_ext.demo.runs import read_steps

RESULTS = Path(__file__).resolve().parent / "results"
"""Where the run logs are kept (``benchmarks/results/``)."""
TARGET = 0.3
"""H*, nats per token: the target of the uncontrolled reference; a controlled run is compared with the target it
logged at each step (``entropy_control/target``: :func:`~verl_ext.analysis.control.logged_targets`)."""
STEPS = 40
BOUNDS = {"bias": 0.15, "block_gap": 0.35, "on_acting_bound": 0.30}
"""What the controller must meet on the entropy coefficient, median over seeds, steps 21-40 (``reach``: on a bound
that acts, not at rest)."""


EARLIER = "before 0d7534d"
"""The runs committed before the controller's defect fixes (commit 0d7534d: a held bad step's prediction, the outlier
gate's first ten measurements, the entropy plausibility bound); on a run without bad steps the gate is the
difference."""
CURRENT = "8297de3"
"""The commit of the re-measured default runs (``results_real_model_auto_coef_*40*.jsonl``: seed 0 at target 0.3 ran
at it, the others later with the same controller on the coefficient)."""

SECOND_TARGET = 0.5
"""The second target, nats: above every fp32 vanilla run's entropy over steps 21-40 (geomean 0.05-0.20) and at the top
of step 1's (0.23-0.51), so the raise-only coefficient has to hold entropy up against the policy's decline for the
whole run - the direction it can act in - where at 0.3 it mostly rests on 0."""

THIRD_TARGET = 0.4
"""A target in the range a user of this model picks (0.35-0.45 nats), where the room-limited closing share kept the
coefficient positive while the entropy sat above the target."""
AT_REST = "fec87b6"
"""The commit from which ``auto`` falls to the actuator's rest above the target (closing share 0.5 towards 0)."""
SEEDS_3_5 = (3, 4, 5)
"""The seeds S at :data:`THIRD_TARGET`, launched with ``benchmarks.real_model_runs.SEED1``'s pattern: ``data.seed=S``,
the rollout's and the data loader's seed 42 + S."""
WELL_ABOVE = 1.2
"""``value while above`` takes the steps whose filtered entropy is over this multiple of the target."""

RELATIVE_LINEAR = "linear 1.0 -> 0.5 x H_1"
"""The relative run's target: ``target_unit=initial target=1.0 schedule=linear target_end=0.5`` (steps 1-40)."""


@dataclass(frozen=True)
class AutoRun:
    actuator: str
    """``entropy_coef`` or ``cov_ratio`` (``vanilla`` for the uncontrolled reference)."""
    seed: str
    log: str
    """verl's file log, under benchmarks/results/."""
    precision: str = "fp32"
    """The run's compute precision (``verl_ext.cpu_precision``)."""
    target: str = "0.3"
    """The target the run held, as the tables give it: nats, or a schedule relative to the entropy of step 1."""
    build: str = EARLIER
    """The commit whose controller the run used, or :data:`EARLIER`."""


RUNS = (
    AutoRun("entropy_coef", "0", "results_real_model_auto_default_40.jsonl"),
    AutoRun("entropy_coef", "1", "results_real_model_auto_default_40_seed1.jsonl"),
    AutoRun("entropy_coef", "2", "results_real_model_auto_default_40_seed2.jsonl"),
    AutoRun("entropy_coef", "0", "results_real_model_auto_coef_40.jsonl", build=CURRENT),
    AutoRun("entropy_coef", "1", "results_real_model_auto_coef_40_seed1.jsonl", build=CURRENT),
    AutoRun("entropy_coef", "2", "results_real_model_auto_coef_40_seed2.jsonl", build=CURRENT),
    AutoRun("entropy_coef", "0", "results_real_model_auto_coef_t05_40.jsonl", target=f"{SECOND_TARGET}", build=CURRENT),
    AutoRun("entropy_coef", "1", "results_real_model_auto_coef_t05_40_seed1.jsonl", target=f"{SECOND_TARGET}",
            build=CURRENT),
    AutoRun("entropy_coef", "0", "results_real_model_auto_coef_40_at_rest.jsonl", build=AT_REST),
    AutoRun("entropy_coef", "0", "results_real_model_auto_coef_t05_40_at_rest.jsonl", target=f"{SECOND_TARGET}",
            build=AT_REST),
    *(AutoRun("entropy_coef", str(s), f"results_real_model_auto_coef_t04_40_seed{s}.jsonl", target=f"{THIRD_TARGET}",
              build=AT_REST) for s in SEEDS_3_5),
    AutoRun("clip_high", "0", "results_real_model_auto_clip_high_40.jsonl"),
    AutoRun("entropy_coef", "0", "results_real_model_auto_relative_linear_40.jsonl", target=RELATIVE_LINEAR),
    AutoRun("entropy_coef", "1", "results_real_model_auto_relative_linear_40_seed1.jsonl", target=RELATIVE_LINEAR),
    AutoRun("entropy_coef", "2", "results_real_model_auto_relative_linear_40_seed2.jsonl", target=RELATIVE_LINEAR),
    AutoRun("cov_ratio", "0", "results_real_model_auto_cov_40.jsonl", "bf16"),
    AutoRun("cov_ratio", "1", "results_real_model_auto_cov_40_seed1.jsonl", "bf16"),
    AutoRun("cov_ratio", "2", "results_real_model_auto_cov_40_seed2.jsonl", "bf16"),
)
REFERENCES = (
    AutoRun("vanilla", "0", "results_real_model_vanilla_40.jsonl"),
    AutoRun("vanilla", "1", "results_real_model_vanilla_40_seed1.jsonl"),
    AutoRun("vanilla", "2", "results_real_model_vanilla_40_seed2.jsonl"),
    AutoRun("vanilla", "0", "results_real_model_vanilla_40_bf16.jsonl", "bf16"),
)


def figures(run: AutoRun, root: Path = RESULTS) -> dict[str, Any]:
    """One run's tracking figures over the second half, from its file log."""
    rows = {r["step"]: r for r in read_steps(root / run.log)}
    missing = [s for s in range(1, STEPS + 1) if "actor/entropy" not in rows.get(s, {})]
    if missing:
        raise ValueError(f"{run.log}: no actor/entropy at steps {missing}")
    entropy = np.array([rows[s]["actor/entropy"] for s in range(1, STEPS + 1)])
    half = entropy[STEPS // 2:]
    target = logged_targets(rows, range(STEPS // 2 + 1, STEPS + 1), TARGET)  # each step's own target
    sigma = log_noise_sigma(entropy)
    out: dict[str, Any] = {
        "actuator": run.actuator, "build": run.build if run.actuator in CONTROL_ACTUATOR_KEYS else "-",
        "precision": run.precision, "target": run.target, "seed": run.seed, "log": run.log,
        "bias": bias(half, target), "block_gap": block_gap(half, target), "per_step_gap": relative_gap(half, target),
        "log_gap": log_gap(half, target),
        "noise_sigma": sigma, "noise_floor": gap_noise_floor(sigma),
        "entropy_geomean": float(np.exp(np.log(half).mean())), "entropy_mean": float(half.mean()),
    }  # fmt: skip
    if run.actuator in CONTROL_ACTUATOR_KEYS:
        second = [rows[s] for s in range(STEPS // 2 + 1, STEPS + 1)]
        value = [r[CONTROL_ACTUATOR_KEYS[run.actuator]] for r in second]
        last = rows[STEPS]
        saturated = [float(r[CONTROL_SATURATED]) for r in second]
        on_bound = statistics.fmean(saturated)
        at_rest = (statistics.fmean(s * float(v == 0.0) for s, v in zip(saturated, value))
                   if run.actuator == "entropy_coef" else 0.0)  # the coefficient's rest; other actuators' bounds act
        out.update({
            "on_bound": on_bound, "at_rest": at_rest, "on_acting_bound": on_bound - at_rest,
            "value_min": min(value), "value_max": max(value),
            "est_noise": last[CONTROL_METRIC_PREFIX + "noise"], "est_gain": last[CONTROL_METRIC_PREFIX + "gain"],
            "est_drift": last[CONTROL_METRIC_PREFIX + "drift"],
        })  # fmt: skip
        filtered = CONTROL_METRIC_PREFIX + "filtered_entropy"  # logged by ``auto`` only: "-" for another controller
        above = ([v for v, r, t in zip(value, second, target) if r[filtered] > WELL_ABOVE * t]
                 if all(filtered in r for r in second) else [])
        out["value_above"] = statistics.fmean(above) if above else None
        out["steps_above"] = len(above)
        if run.actuator == "cov_ratio":
            out["limited"] = statistics.fmean(float(r[CONTROL_LIMITED]) for r in second)
    return out


def per_run(results: list[dict[str, Any]]) -> str:
    lines = ["| actuator | build | precision | target | seed | bias | gap on 5-step blocks | on a bound | per-step gap (noise floor) | "
             "log gap | geomean H | actuator, steps 21-40 | value while above (steps) | noise / gain / drift at step 40 |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |"]  # fmt: skip
    for r in results:
        cells = [r["actuator"], r["build"], r["precision"], r["target"], r["seed"], f"{r['bias']:.2f}", f"{r['block_gap']:.2f}", "-",
                 f"{r['per_step_gap']:.2f} ({r['noise_floor']:.2f})", f"{r['log_gap']:.2f}",
                 f"{r['entropy_geomean']:.3f}", "-", "-", "-"]  # fmt: skip
        if "on_bound" in r:  # a controlled run
            limited = f" (candidate-limited {r['limited']:.0%})" if "limited" in r else ""
            cells[7] = f"{r['on_bound']:.0%}" + (f" ({r['at_rest']:.0%} at rest)" if r["at_rest"] else "")
            cells[11] = f"{r['value_min']:.3g} .. {r['value_max']:.3g}{limited}"
            if r["value_above"] is not None:
                cells[12] = f"{r['value_above']:.3g} ({r['steps_above']})"
            cells[13] = f"{r['est_noise']:.2f} / {r['est_gain']:.3g} / {r['est_drift']:+.3f}"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def medians(results: list[dict[str, Any]]) -> str:
    """Per actuator, precision and target, the median over its seeds, and whether it meets :data:`BOUNDS`; the uncontrolled
    references (vanilla) likewise, without the actuator's figures."""
    lines = ["| actuator | build | precision | target | seeds | bias | gap on 5-step blocks | on a bound | per-step gap (noise floor) | "
             "log gap | geomean H (range) | meets bias <= 0.15, block gap <= 0.35, on a bound that acts <= 30 % |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    groups = dict.fromkeys((r["actuator"], r["build"], r["precision"], r["target"]) for r in results)
    for actuator, build, precision, target in groups:
        rs = [r for r in results if (r["actuator"], r["build"], r["precision"], r["target"]) == (actuator, build,
                                                                                                   precision, target)]
        keys = ("bias", "block_gap", "per_step_gap", "noise_floor", "log_gap") + (("on_bound", "at_rest", "on_acting_bound")
                                                                                 if "on_bound" in rs[0] else ())
        m = {k: statistics.median(r[k] for r in rs) for k in keys}
        geo = [r["entropy_geomean"] for r in rs]
        if "on_bound" in m:
            misses = [k for k, bound in BOUNDS.items() if m[k] > bound]
            on_bound = f"{m['on_bound']:.0%}" + (f" ({m['at_rest']:.0%} at rest)" if m["at_rest"] else "")
            meets = "yes" if not misses else "no: " + ", ".join(misses)
        else:
            on_bound, meets = "-", "- (uncontrolled)"
        lines.append(f"| {actuator} | {build} | {precision} | {target} | {len(rs)} | {m['bias']:.2f} | {m['block_gap']:.2f} | "
                     f"{on_bound} | {m['per_step_gap']:.2f} ({m['noise_floor']:.2f}) | {m['log_gap']:.2f} | {statistics.median(geo):.3f} "
                     f"({min(geo):.3f}-{max(geo):.3f}) | {meets} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--medians-only", action="store_true",
                        help="print only the medians over each actuator's seeds, not the table of every run")
    args = parser.parse_args(argv)
    results = [figures(run) for run in (*RUNS, *REFERENCES)]
    if not args.medians_only:
        print(per_run(results), end="\n\n")
    print(medians(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
