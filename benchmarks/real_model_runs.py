"""The real model's 40-step runs side by side: one row per run and one per configuration (its runs' mean and range).

Every run is a ``SCALE=cpu MODEL=smollm2 bash recipe/gsm8k_grpo_<loss>.sh trainer.total_training_steps=40`` GSM8K
recipe launch on SmolLM2-135M-Instruct (commands and 5-step tables in docs/real_model.md); its verl file log is kept as ``benchmarks/results/results_real_model_*.jsonl`` and its
step-40 checkpoint was evaluated with ERC's protocol (``recipe/eval.sh``, n 32; the curves in
``benchmarks/results/results_real_model_eval.csv``, written by ``python -m verl_ext.analyze --generations ... --passk-csv``).
Per run, from those two files only:

* ``gap``: ``mean |H - H*| / H*`` over steps 21-40 (the second half), ``H*`` = 0.3 nats, the target every controlled
  run used (vanilla's first five steps, rounded down) - for uncontrolled runs it measures how far the entropy ended
  from where the controllers were asked to hold it;
* the mean entropy (nats per token) over steps 1-5, 21-40 and 36-40;
* the share of responses cut at the response-length limit (64 tokens) over steps 21-40, the entropy of truncated
  answers being part of what the entropy columns average: verl_ext's ``verl_ext/response_length/clip_ratio`` where
  the log has it, else from verl's ``response_length/clip_ratio`` and ``response_length/max``
  (``verl_ext.analysis.length_limit.cut_share``: on these runs verl's ratio alone is not that share, verl#7817);
* greedy validation (64 held-out problems) before training and after step 40;
* avg@32, pass@32 and maj@32 of the step-40 checkpoint;

and, over all runs, Pearson's r between the entropy a run kept (steps 21-40) and each of those three scores, between
the gap and each score (does tracking the target go with accuracy?), and between the entropy kept and the share cut.

    python benchmarks/real_model_runs.py            # the markdown tables (per run, per configuration)
    python benchmarks/real_model_runs.py --json F   # the figures as JSON
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_ext.analysis.control import logged_targets, relative_gap
from verl_ext.analysis.length_limit import cut_share
from verl_ext.contract import RESPONSE_CUT_RATIO
from verl_ext.demo.runs import read_steps

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
"""Where the run logs, the evaluation dumps and their CSV are kept (``benchmarks/results/``)."""
TARGET = 0.3
"""H*, nats per token: the target of every controlled 40-step run."""
EVAL_CSV = RESULTS / "results_real_model_eval.csv"
GREEDY = "val-core/openai/gsm8k/acc/mean@1"
CUT_CORRECTED = RESPONSE_CUT_RATIO
"""verl_ext's share of a step's responses cut at the limit, logged under its own key by runs after verl_ext stopped
writing it under verl's (docs/metrics.md); read as logged where present."""
CUT = "response_length/clip_ratio"
"""verl's key: the share of a step's responses as long as the batch's response tensor is wide in the runs logged
before verl_ext corrected it on the V1 trainer (docs/train.md), the share cut in the kept runs logged while verl_ext
wrote its correction under verl's key (the last third seeds); ``cut_share`` gives the share cut from either, where a
log has no :data:`CUT_CORRECTED`."""
LONGEST = "response_length/max"
RESPONSE_LIMIT = 64
"""``data.max_response_length`` of every run here (``cpu_model=smollm2``'s, ``configs/cpu_model/smollm2.yaml``)."""
SEED1 = "data.seed=1 actor_rollout_ref.rollout.seed=43 actor_rollout_ref.actor.data_loader_seed=43"
"""The overrides of every "seed 1" run (seed 0: the recipes' defaults)."""
SEED2 = "data.seed=2 actor_rollout_ref.rollout.seed=44 actor_rollout_ref.actor.data_loader_seed=44"
"""The overrides of every "seed 2" run."""


@dataclass(frozen=True)
class RealRun:
    config: str
    """The configuration: runs with the same name differ only in their seed (or are a repeat)."""
    seed: str
    """``0``, ``1`` (:data:`SEED1`), ``2`` (:data:`SEED2`), or ``0 (repeat)`` for a second run of the same command."""
    log: str
    """verl's file log, under benchmarks/."""
    evaluation: str
    """The run's name in :data:`EVAL_CSV`."""


# The configurations' names as the docs' tables give them; the two sized for the real model's regime are long.
SKYWORK_REGIME = "Skywork-OR1 x entropy coefficient (delta 5e-3, max 0.1: sized for this regime)"
ENTROPIC_REGIME = "EntroPIC x pos_weight (Kp 1, Ki 0.1: sized for this regime)"
BAPO = "BAPO (bounds 0.8-0.95 / 1.2-2.0, share 0.5)"
RUNS = (
    RealRun("vanilla GRPO", "0", "results_real_model_vanilla_40.jsonl", "vanilla GRPO, step 40"),
    RealRun("vanilla GRPO", "1", "results_real_model_vanilla_40_seed1.jsonl", "vanilla GRPO, second seed, step 40"),
    RealRun("vanilla GRPO", "2", "results_real_model_vanilla_40_seed2.jsonl", "vanilla GRPO, third seed, step 40"),
    RealRun("fixed Clip-Cov (ratio 0.1)", "0", "results_real_model_clip_cov_40.jsonl", "Clip-Cov, step 40"),
    RealRun("fixed Clip-Cov (ratio 0.1)", "1", "results_real_model_clip_cov_40_seed1.jsonl",
            "Clip-Cov, second seed, step 40"),
    RealRun("fixed Clip-Cov (ratio 0.1)", "2", "results_real_model_clip_cov_40_seed2.jsonl",
            "Clip-Cov, third seed, step 40"),
    RealRun("fixed KL-Cov (ratio 0.1)", "0", "results_real_model_kl_cov_40.jsonl", "KL-Cov, step 40"),
    RealRun("fixed KL-Cov (ratio 0.1)", "1", "results_real_model_kl_cov_40_seed1.jsonl",
            "KL-Cov, second seed, step 40"),
    RealRun("fixed KL-Cov (ratio 0.1)", "2", "results_real_model_kl_cov_40_seed2.jsonl", "KL-Cov, third seed, step 40"),
    RealRun("ERC (band 0.95-1.05)", "0", "results_real_model_erc_40.jsonl", "ERC, step 40"),
    RealRun("ERC (band 0.95-1.05)", "1", "results_real_model_erc_40_seed1.jsonl", "ERC, second seed, step 40"),
    RealRun("ERC (band 0.95-1.05)", "2", "results_real_model_erc_40_seed2.jsonl", "ERC, third seed, step 40"),
    RealRun("PI x Clip-Cov's ratio (Kp 1, Ki 0.25)", "0", "results_real_model_pi_cov_40.jsonl",
            "PI on Clip-Cov's ratio, step 40"),
    RealRun("PI x Clip-Cov's ratio (Kp 1, Ki 0.25)", "0 (repeat)", "results_real_model_pi_cov_40_limited.jsonl",
            "PI on Clip-Cov's ratio again (limit as bound), step 40"),
    RealRun("PI x Clip-Cov's ratio (Kp 1, Ki 0.25)", "1", "results_real_model_pi_cov_40_seed1.jsonl",
            "PI on Clip-Cov's ratio, second seed, step 40"),
    RealRun("PI x Clip-Cov's ratio (Kp 1, Ki 0.25)", "2", "results_real_model_pi_cov_40_seed2.jsonl",
            "PI on Clip-Cov's ratio, third seed, step 40"),
    RealRun("PI x entropy coefficient (Kp 1, Ki 0.25)", "0", "results_real_model_pi_coef_40.jsonl",
            "PI on the entropy coefficient, step 40"),
    RealRun("PI x entropy coefficient (Kp 1, Ki 0.25)", "1", "results_real_model_pi_coef_40_seed1.jsonl",
            "PI on the entropy coefficient, second seed, step 40"),
    RealRun("PI x entropy coefficient (Kp 1, Ki 0.25)", "2", "results_real_model_pi_coef_40_seed2.jsonl",
            "PI on the entropy coefficient, third seed, step 40"),
    RealRun("Skywork-OR1 x entropy coefficient (their values)", "0", "results_real_model_skywork_40.jsonl",
            "Skywork-OR1 (their values), step 40"),
    RealRun("Skywork-OR1 x entropy coefficient (their values)", "1", "results_real_model_skywork_40_seed1.jsonl",
            "Skywork-OR1 (their values), second seed, step 40"),
    RealRun("Skywork-OR1 x entropy coefficient (their values)", "2", "results_real_model_skywork_40_seed2.jsonl",
            "Skywork-OR1 (their values), third seed, step 40"),
    RealRun("EntroPIC x pos_weight (their gains, Kp 1, Ki 0.01)", "0", "results_real_model_entropic_40.jsonl",
            "EntroPIC (their gains), step 40"),
    RealRun("EntroPIC x pos_weight (their gains, Kp 1, Ki 0.01)", "1", "results_real_model_entropic_40_seed1.jsonl",
            "EntroPIC (their gains), second seed, step 40"),
    RealRun("EntroPIC x pos_weight (their gains, Kp 1, Ki 0.01)", "2", "results_real_model_entropic_40_seed2.jsonl",
            "EntroPIC (their gains), third seed, step 40"),
    RealRun("`high_entropy` (top 20 %)", "0", "results_real_model_high_entropy_40.jsonl", "high_entropy, step 40"),
    RealRun("`high_entropy` (top 20 %)", "1", "results_real_model_high_entropy_40_seed1.jsonl",
            "high_entropy, second seed, step 40"),
    RealRun("`high_entropy` (top 20 %)", "2", "results_real_model_high_entropy_40_seed2.jsonl",
            "high_entropy, third seed, step 40"),
    RealRun("`entropy_adv` (alpha 0.4, kappa 2)", "0", "results_real_model_entropy_adv_40.jsonl",
            "entropy_adv, step 40"),
    RealRun("`entropy_adv` (alpha 0.4, kappa 2)", "1", "results_real_model_entropy_adv_40_seed1.jsonl",
            "entropy_adv, second seed, step 40"),
    RealRun("`entropy_adv` (alpha 0.4, kappa 2)", "2", "results_real_model_entropy_adv_40_seed2.jsonl",
            "entropy_adv, third seed, step 40"),
    RealRun(SKYWORK_REGIME, "0", "results_real_model_skywork_regime_40.jsonl",
            "Skywork-OR1 (sized for this regime), step 40"),
    RealRun(SKYWORK_REGIME, "1", "results_real_model_skywork_regime_40_seed1.jsonl",
            "Skywork-OR1 (sized for this regime), second seed, step 40"),
    RealRun(SKYWORK_REGIME, "2", "results_real_model_skywork_regime_40_seed2.jsonl",
            "Skywork-OR1 (sized for this regime), third seed, step 40"),
    RealRun(ENTROPIC_REGIME, "0", "results_real_model_entropic_regime_40.jsonl", "EntroPIC (Ki 0.1), step 40"),
    RealRun(ENTROPIC_REGIME, "1", "results_real_model_entropic_regime_40_seed1.jsonl",
            "EntroPIC (Ki 0.1), second seed, step 40"),
    RealRun(ENTROPIC_REGIME, "2", "results_real_model_entropic_regime_40_seed2.jsonl",
            "EntroPIC (Ki 0.1), third seed, step 40"),
    RealRun("EntroPIC x entropy coefficient (their gains, coefficient max 0.1)", "0",
            "results_real_model_entropic_coef_40.jsonl", "EntroPIC on the entropy coefficient, step 40"),
    RealRun(BAPO, "0", "results_real_model_bapo_40.jsonl", "BAPO, step 40"),
    RealRun("auto x entropy coefficient (the defaults, target 0.3)", "0", "results_real_model_auto_default_40.jsonl",
            "auto on the entropy coefficient, step 40"),
    RealRun("auto x entropy coefficient (the defaults, target 0.3)", "1", "results_real_model_auto_default_40_seed1.jsonl",
            "auto on the entropy coefficient, second seed, step 40"),
    RealRun("auto x entropy coefficient (the defaults, target 0.3)", "2", "results_real_model_auto_default_40_seed2.jsonl",
            "auto on the entropy coefficient, third seed, step 40"),
    RealRun("auto x entropy coefficient (1.0x to 0.5x of H_1, linear)", "0", "results_real_model_auto_relative_linear_40.jsonl",
            "auto, relative linear target, step 40"),
    RealRun("auto x entropy coefficient (1.0x to 0.5x of H_1, linear)", "1",
            "results_real_model_auto_relative_linear_40_seed1.jsonl", "auto, relative linear target, second seed, step 40"),
    RealRun("auto x entropy coefficient (1.0x to 0.5x of H_1, linear)", "2",
            "results_real_model_auto_relative_linear_40_seed2.jsonl", "auto, relative linear target, third seed, step 40"),
    RealRun("auto x clip_high (target 0.3)", "0", "results_real_model_auto_clip_high_40.jsonl", "auto on clip_high, step 40"),
)  # fmt: skip


def gap(entropy_by_step: dict[int, float], first: int, last: int, target: float | Sequence[float] = TARGET) -> float:
    """``mean |H - H*| / H*`` over steps ``first..last``; every one of them must be logged. ``target``: one value, or
    one per step (a controlled run's logged targets: :func:`~verl_ext.analysis.control.logged_targets`)."""
    missing = [s for s in range(first, last + 1) if s not in entropy_by_step]
    if missing:
        raise ValueError(f"no actor/entropy at steps {missing}")
    return relative_gap([entropy_by_step[s] for s in range(first, last + 1)], target)


def cut_at_limit(row: dict[str, Any]) -> float:
    """The share of a step's responses cut at :data:`RESPONSE_LIMIT`: verl_ext's :data:`CUT_CORRECTED` where the
    step logged it, else :func:`cut_share` of verl's :data:`CUT` and :data:`LONGEST`."""
    if CUT_CORRECTED in row:
        return float(row[CUT_CORRECTED])
    return cut_share(row[CUT], row[LONGEST], RESPONSE_LIMIT)


def evaluation(path: Path) -> dict[str, dict[str, float]]:
    """``{run: {metric: mean}}`` of the evaluation CSV."""
    out: dict[str, dict[str, float]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            out.setdefault(row["run"], {})[row["metric"]] = float(row["mean"])
    return out


def figures(run: RealRun, evals: dict[str, dict[str, float]], root: Path = RESULTS, steps: int = 40) -> dict[str, Any]:
    """One run's figures from its file log and its rows of the evaluation CSV."""
    rows = {r["step"]: r for r in read_steps(root / run.log)}
    if max(rows) != steps:
        raise ValueError(f"{run.log}: last step {max(rows)}, expected {steps}")
    if run.evaluation not in evals:
        raise ValueError(f"{run.evaluation!r} is not a run of the evaluation CSV; its runs: {sorted(evals)}")
    entropy = {s: r["actor/entropy"] for s, r in rows.items() if "actor/entropy" in r}
    second_half = range(steps // 2 + 1, steps + 1)
    missing = [s for s in second_half if CUT_CORRECTED not in rows.get(s, {})
               and (CUT not in rows.get(s, {}) or LONGEST not in rows.get(s, {}))]  # fmt: skip
    if missing:
        raise ValueError(f"{run.log}: neither {CUT_CORRECTED} nor {CUT} and {LONGEST} at steps {missing}")
    ev = evals[run.evaluation]
    return {
        "config": run.config, "seed": run.seed, "log": run.log,
        "gap": gap(entropy, steps // 2 + 1, steps, logged_targets(rows, second_half, TARGET)),
        "entropy_first5": statistics.fmean(entropy[s] for s in range(1, 6)),
        "entropy_second_half": statistics.fmean(entropy[s] for s in second_half),
        "entropy_last5": statistics.fmean(entropy[s] for s in range(steps - 4, steps + 1)),
        "cut_second_half": statistics.fmean(cut_at_limit(rows[s]) for s in second_half),
        "greedy_before": rows[0][GREEDY], "greedy_after": rows[steps][GREEDY],
        "avg@32": ev["avg@32"], "pass@32": ev["pass@32"], "maj@32": ev["maj@32"],
    }  # fmt: skip


COLUMNS = {
    "gap": "gap to 0.3 (steps 21-40)", "entropy_first5": "entropy, steps 1-5",
    "entropy_second_half": "entropy, steps 21-40", "entropy_last5": "entropy, steps 36-40",
    "cut_second_half": "cut at the length limit, steps 21-40",
    "greedy_after": "greedy after step 40", "avg@32": "avg@32", "pass@32": "pass@32", "maj@32": "maj@32",
}
"""The tables' columns: each figure's key and its header."""
HEADER = " | ".join(COLUMNS.values())


def per_run(results: list[dict[str, Any]]) -> str:
    lines = [f"| configuration | seed | {HEADER} |", "| --- | --- |" + " ---: |" * len(COLUMNS)]
    for r in results:
        lines.append(f"| {r['config']} | {r['seed']} | " + " | ".join(_fmt(k, r[k]) for k in COLUMNS) + " |")
    return "\n".join(lines)


def runs_label(seeds: list[str]) -> str:
    """A configuration's runs by seed, as the docs' tables name them: ``seed 0``, ``seeds 0, 1, 2``, or
    ``seed 0 twice, seed 1`` where a run repeats seed 0's command."""
    if "0 (repeat)" in seeds:
        others = sorted(s for s in seeds if s not in ("0", "0 (repeat)"))
        return ", ".join(["seed 0 twice", *(f"seed {s}" for s in others)])
    return ("seeds " if len(seeds) > 1 else "seed ") + ", ".join(sorted(seeds))


def correlations(
    results: list[dict[str, Any]],
    keys: tuple[str, ...] = ("avg@32", "pass@32", "maj@32"),
    against: str = "entropy_second_half",
) -> dict[str, float]:
    """Pearson's r, over all runs, between one figure of a run (``against``: by default the entropy it kept, mean
    over steps 21-40) and each figure of ``keys`` (by default its three scores)."""
    xs = [r[against] for r in results]
    return {k: statistics.correlation(xs, [r[k] for r in results]) for k in keys}


def per_config(results: list[dict[str, Any]]) -> str:
    """Each configuration's mean over its runs, with the range when it has more than one."""
    lines = [f"| configuration | runs | {HEADER} |", "| --- | --- |" + " ---: |" * len(COLUMNS)]
    for config in dict.fromkeys(r["config"] for r in results):
        rs = [r for r in results if r["config"] == config]
        cells = []
        for k in COLUMNS:
            values = [r[k] for r in rs]
            cell = _fmt(k, statistics.fmean(values))
            if len(values) > 1:
                cell += f" ({_fmt(k, min(values))}-{_fmt(k, max(values))})"
            cells.append(cell)
        lines.append(f"| {config} | {runs_label([r['seed'] for r in rs])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(key: str, value: float) -> str:
    return f"{value:.2f}" if key in ("gap", "cut_second_half") else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--configurations-only", action="store_true",
                        help="print each configuration's mean over its seeds, not the table of every run")
    args = parser.parse_args(argv)
    evals = evaluation(EVAL_CSV)
    base = evals.get("base (warmed up)")
    results = [figures(run, evals) for run in RUNS]
    if not args.configurations_only:
        print(per_run(results), end="\n\n")
    print(per_config(results))
    if base and results:
        print(f"\nbase (warmed up, step 0): avg@32 {base['avg@32']:.3f}, pass@32 {base['pass@32']:.3f}, "
              f"maj@32 {base['maj@32']:.3f}; greedy {results[0]['greedy_before']:.3f}")
    if len(results) > 2:
        r = correlations(results)
        print("\nentropy kept (steps 21-40) against the score, Pearson r over the runs: "
              + ", ".join(f"{k} {v:+.2f}" for k, v in r.items()))
        r = correlations(results, against="gap")
        print("gap to the target (steps 21-40) against the score, Pearson r over the runs: "
              + ", ".join(f"{k} {v:+.2f}" for k, v in r.items()))
        cut = correlations(results, ("cut_second_half",))["cut_second_half"]
        print(f"entropy kept (steps 21-40) against the share cut at the length limit (steps 21-40): r {cut:+.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
