"""``python -m verl_ext.analyze [RUN ...] [--generations DUMPS ...]``: compare verl runs, fit the entropy-performance
law, and score validation dumps the papers' way.

For every run (a verl ``file``-logger JSONL file or a TensorBoard event directory, optionally
``label=path``) this fits ``R = -a * exp(H) + b`` (Cui et al., arXiv 2505.22617; ``H`` = policy
entropy, ``R`` = reward) by least squares in ``x = exp(H)``, prints ``a``, ``b``, R² and the predicted
ceiling ``b - a`` (the reward when entropy reaches 0), and draws entropy, reward, selected-token
fraction, KL, the entropy control's actuator and the fitted law for all runs side by side in one PNG, leaving out
a panel whose metric no run logs (a line names it).

With ``--generations [label=]PATH`` (a ``<step>.jsonl`` validation dump or a ``trainer.validation_data_dir``, e.g.
one ``recipe/eval.sh`` wrote) it also prints avg@n, unbiased pass@k and maj@k per data source with bootstrap
intervals (:mod:`verl_ext.analysis.generations`) and draws the pass@k curves of all of them side by side, and
pass@k over training for a directory with several steps, in ``--passk-out``.

Exit status: 0 when at least one run was fitted (or, without RUNs, every dump was scored); 1 when every run was read but none could be
fitted (each gets a "cannot fit: <reason>" line); 2 on unusable input (missing path, empty file,
invalid JSON line, a run without the entropy or reward metric).
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from verl_ext.analysis.control import format_lens, format_tracking, lens_summary, tracking
from verl_ext.analysis.entropy_law import EntropyLawFit, FitError, fit_run, paired_points
from verl_ext.analysis.eval_report import format_evaluations, plot_evaluations, write_evaluation_csv
from verl_ext.analysis.generations import read_evaluation
from verl_ext.analysis.run_reader import METRIC_KEYS, Candidate, Run, RunReadError, read_runs
from verl_ext.contract import lens_file_for

#: Panels of the figure: (quantity in METRIC_KEYS, title).
PANELS: tuple[tuple[str, str], ...] = (
    ("entropy", "policy entropy"),
    ("reward", "reward / accuracy"),
    ("selected_frac", "selected-token fraction"),
    ("kl", "KL"),
    ("control_ratio", "entropy control: actuator value"),
)


@dataclass
class Analysis:
    """One run with the keys used for the law and its fit (or why it could not be fitted)."""

    run: Run
    entropy_key: str
    reward_key: str
    fit: EntropyLawFit | None = None
    error: str | None = None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m verl_ext.analyze",
        description="Plot verl runs side by side and fit the entropy-performance law R = -a*exp(H) + b per run.",
    )
    p.add_argument("runs", nargs="*", metavar="RUN",
                   help="verl file-logger .jsonl file, TensorBoard event dir, or a dir of runs; 'label=path' names it")
    p.add_argument("--out", default="analysis.png", help="PNG to write (default: analysis.png)")
    p.add_argument("--entropy-key", help="metric used as H (default: actor/entropy)")
    p.add_argument("--reward-key", help="metric used as R (default: critic/score/mean, else val-core/.../mean@N)")
    p.add_argument("--csv", help="also write the per-run fit table to this CSV file")
    p.add_argument("--no-plot", action="store_true", help="only print the fits, write no PNG")
    p.add_argument("--lens", action="append", default=[], metavar="FILE",
                   help="summarise a token-lens file (default: every RUN.jsonl's RUN.lens.jsonl that exists)")
    p.add_argument("--lens-top", type=int, default=15, help="token strings shown per lens file (15)")
    p.add_argument("--generations", action="append", default=[], metavar="DUMPS",
                   help="a validation dump <step>.jsonl or a trainer.validation_data_dir; 'label=path' names it")
    p.add_argument("--passk-out", default="passk.png", help="PNG of the pass@k curves (default: passk.png)")
    p.add_argument("--passk-csv", help="also write every dump's metrics to this CSV file")
    return p


def load_runs(args: Sequence[str]) -> list[Run]:
    """Every run named on the command line; duplicate labels get a ``#n`` suffix."""
    runs = [run for arg in args for run in read_runs(arg)]
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.label] = seen.get(run.label, 0) + 1
        if seen[run.label] > 1:
            run.label = f"{run.label}#{seen[run.label]}"
    return runs


def candidates(quantity: str, override: str | None) -> tuple[Candidate, ...]:
    return (override,) if override else METRIC_KEYS[quantity]


def analyse(run: Run, entropy_key: str | None, reward_key: str | None) -> Analysis:
    """Pick the law's keys (RunReadError if missing) and fit; a FitError is kept as ``error``."""
    result = Analysis(
        run=run,
        entropy_key=run.require("entropy", candidates("entropy", entropy_key)),
        reward_key=run.require("reward", candidates("reward", reward_key)),
    )
    try:
        result.fit = fit_run(run, result.entropy_key, result.reward_key)
    except FitError as e:
        result.error = str(e)
    return result


def format_table(results: Sequence[Analysis]) -> str:
    """The per-run fit table printed by the CLI."""
    width = max(len("run"), *(len(r.run.label) for r in results))
    lines = [
        "entropy-performance law R = -a * exp(H) + b (ceiling = b - a, the reward when entropy reaches 0)",
        f"{'run':<{width}}  {'steps':>5}  {'a':>9}  {'b':>9}  {'R^2':>7}  {'ceiling':>9}  H key -> R key",
    ]
    for r in results:
        if r.fit is None:
            lines.append(f"{r.run.label:<{width}}  cannot fit: {r.error}")
            continue
        f = r.fit
        numbers = f"{f.n:>5d}  {f.a:>9.4f}  {f.b:>9.4f}  {f.r2:>7.4f}  {f.ceiling:>9.4f}"
        lines.append(f"{r.run.label:<{width}}  {numbers}  {r.entropy_key} -> {r.reward_key}")
    return "\n".join(lines)


def write_csv(results: Sequence[Analysis], path: Path) -> None:
    """One row per run: label, source, keys, points, a, b, r2, ceiling, error (empty when fitted)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["run", "path", "entropy_key", "reward_key", "points", "a", "b", "r2", "ceiling", "error"])
        for r in results:
            f = r.fit
            nums = [f.n, f.a, f.b, f.r2, f.ceiling] if f else ["", "", "", "", ""]
            w.writerow([r.run.label, str(r.run.path), r.entropy_key, r.reward_key, *nums, r.error or ""])


def logged_panels(
    results: Sequence[Analysis], entropy_key: str | None = None, reward_key: str | None = None
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """:data:`PANELS` split into those some run logs (drawn) and those no run logs (left out of the figure), each
    as ``(quantity, title)`` in :data:`PANELS`' order; ``entropy_key`` / ``reward_key`` replace those candidates."""
    overrides = {"entropy": entropy_key, "reward": reward_key}
    drawn, left_out = [], []
    for quantity, title in PANELS:
        cands = candidates(quantity, overrides.get(quantity))
        logged = any(r.run.resolve(cands) is not None for r in results)
        (drawn if logged else left_out).append((quantity, title))
    return drawn, left_out


def _draw_metric(ax, results: Sequence[Analysis], quantity: str, title: str, cands: tuple[Candidate, ...]) -> None:
    """One panel: the metric over steps for every run that logs it (at least one does: :func:`logged_panels`)."""
    used = {}
    for i, r in enumerate(results):
        key = r.run.resolve(cands)
        if key is None:
            continue
        steps, values = r.run.series(key)
        used[r.run.label] = key
        ax.plot(steps, values, color=f"C{i % 10}", marker="." if len(steps) < 30 else None, label=r.run.label)
        target = r.run.resolve(METRIC_KEYS["entropy_target"]) if quantity == "entropy" else None
        if target is not None:  # the entropy control's target, dashed in the run's colour
            ax.plot(*r.run.series(target), color=f"C{i % 10}", linestyle="--", label=f"{r.run.label} target")
    ax.set_title(title)
    ax.set_xlabel("step")
    keys = sorted(set(used.values()))
    ax.set_ylabel(keys[0] if len(keys) == 1 else "; ".join(keys), fontsize=7)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _draw_law(ax, results: Sequence[Analysis]) -> None:
    """Reward against entropy, with each run's fitted ``-a exp(H) + b`` curve."""
    for i, r in enumerate(results):
        _, h, rew = paired_points(r.run, r.entropy_key, r.reward_key)
        color = f"C{i % 10}"
        ax.scatter(h, rew, s=8, color=color, alpha=0.6)
        if r.fit is not None and h.size:
            grid = np.linspace(min(0.0, h.min()), h.max(), 100)
            label = f"{r.run.label}: a={r.fit.a:.3g} b={r.fit.b:.3g} R²={r.fit.r2:.3f}"
            ax.plot(grid, r.fit.predict(grid), color=color, label=label)
    ax.set_title("R = -a·exp(H) + b (fit)")
    ax.set_xlabel("entropy H")
    ax.set_ylabel("reward R")
    ax.grid(alpha=0.3)
    if any(r.fit is not None for r in results):
        ax.legend(fontsize=7)


def plot(
    results: Sequence[Analysis], out: Path, entropy_key: str | None, reward_key: str | None, title: str | None = None
) -> Path:
    """Write the panels some run has data for (entropy, reward, selected fraction, KL, the entropy control's
    actuator: :func:`logged_panels`) and the fitted law, three to a row, to ``out``; the title defaults to the run
    labels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    drawn, _ = logged_panels(results, entropy_key, reward_key)
    # the law after the step panels, the entropy control's actuator (when drawn) last
    order: list[tuple[str, str] | None] = [p for p in drawn if p[0] != "control_ratio"]
    order += [None, *(p for p in drawn if p[0] == "control_ratio")]
    rows = -(-len(order) // 3)
    fig = Figure(figsize=(16, 4.5 * rows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 3, squeeze=False).ravel()
    overrides = {"entropy": entropy_key, "reward": reward_key}
    for ax, panel in zip(axes, order):
        if panel is None:
            _draw_law(ax, results)
        else:
            quantity, panel_title = panel
            _draw_metric(ax, results, quantity, panel_title, candidates(quantity, overrides.get(quantity)))
    for ax in axes[len(order):]:
        fig.delaxes(ax)
    fig.suptitle(title or ", ".join(r.run.label for r in results))
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return out


def tracking_lines(results: Sequence[Analysis]) -> list[str]:
    """A line per run that logged the entropy control (:func:`verl_ext.analysis.control.tracking`)."""
    return [format_tracking(r.run.label, record) for r in results if (record := tracking(r.run)) is not None]


def evaluate(args: argparse.Namespace) -> int:
    """Score the ``--generations`` dumps: table, optional CSV, pass@k plot; 2 on unusable input."""
    try:
        evaluations = [read_evaluation(arg) for arg in args.generations]
    except RunReadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_evaluations(evaluations))
    if args.passk_csv:
        write_evaluation_csv(evaluations, Path(args.passk_csv))
        print(f"wrote {args.passk_csv}")
    if not args.no_plot:
        print(f"wrote {plot_evaluations(evaluations, Path(args.passk_out))}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.runs and not args.generations:
        parser.error("name at least one RUN or one --generations DUMPS")
    if args.generations:
        status = evaluate(args)
        if status or not args.runs:
            return status
    try:
        runs = load_runs(args.runs)
        results = [analyse(run, args.entropy_key, args.reward_key) for run in runs]
    except RunReadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_table(results))
    for line in tracking_lines(results):
        print(line)
    lens_files = [Path(f) for f in args.lens] or [
        p for p in (lens_file_for(r.run.path) for r in results if r.run.path.suffix == ".jsonl") if p.is_file()
    ]  # fmt: skip
    try:
        for lens in lens_files:
            print(format_lens(lens, *lens_summary(lens, args.lens_top)))
    except RunReadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.csv:
        write_csv(results, Path(args.csv))
        print(f"wrote {args.csv}")
    if not args.no_plot:
        print(f"wrote {plot(results, Path(args.out), args.entropy_key, args.reward_key)}")
        for quantity, title in logged_panels(results, args.entropy_key, args.reward_key)[1]:
            keys = ", ".join(c if isinstance(c, str) else c.pattern for c in METRIC_KEYS[quantity])
            print(f"left out the panel {title!r}: no run logs {keys}")
    return 0 if any(r.fit is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
