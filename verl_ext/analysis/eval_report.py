"""Tables and plots of scored validation dumps (:mod:`verl_ext.analysis.generations`): the papers' numbers per data
source, pass@k curves of several runs side by side, and pass@k over training for one run."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from verl_ext.analysis.generations import Evaluation, SourceReport
from verl_ext.analysis.pass_at_k import k_values


def _cell(report: SourceReport, metric: str) -> str:
    low, high = report.interval(metric)
    return f"{report.mean(metric):.3f} [{low:.3f}, {high:.3f}]"


def format_evaluations(evaluations: Sequence[Evaluation]) -> str:
    """One block per run: each data source at the run's last step, every metric with its 95% interval."""
    lines = ["evaluation (mean over prompts [95% bootstrap interval]; pass@k unbiased, maj@k ties split evenly)"]
    for ev in evaluations:
        step = ev.last_step
        lines.append(f"{ev.label}  ({ev.path}, step {step})")
        for report in ev.reports[step].values():
            lines.append(f"  {report.source}: {report.prompts} prompts x n={report.n}")
            for metric in report.metrics:
                unit = " chars" if metric == "length" else ""
                lines.append(f"    {metric:<10} {_cell(report, metric)}{unit}")
            if not report.has_answers:
                lines.append("    maj@k      not computed: the dump has no extracted answers ('pred'; recipe/eval.sh "
                             "scores with verl_ext.evaluation.scoring, which records them)")  # fmt: skip
    return "\n".join(lines)


def write_evaluation_csv(evaluations: Sequence[Evaluation], path: Path) -> None:
    """One row per run, step, data source and metric: mean and 95% interval."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["run", "step", "data_source", "n", "prompts", "metric", "mean", "ci_low", "ci_high"])
        for ev in evaluations:
            for step, sources in sorted(ev.reports.items()):
                for report in sources.values():
                    for metric in report.metrics:
                        w.writerow([ev.label, step, report.source, report.n, report.prompts, metric,
                                    report.mean(metric), *report.interval(metric)])  # fmt: skip


LEGEND_INSIDE_MAX = 6
"""Up to this many runs the legend sits in the free lower part of the pass@k panel; beyond, beside it."""


def run_colours(count: int) -> list[str | tuple[float, ...]]:
    """One distinct colour per run: matplotlib's default cycle (10 colours) or, for more runs, ``tab20`` (20), so
    that no two runs of one picture share a colour up to 20 runs."""
    if count <= 10:
        return [f"C{i}" for i in range(count)]
    from matplotlib import colormaps

    palette = colormaps["tab20"].colors
    return [palette[i % len(palette)] for i in range(count)]


def plot_evaluations(evaluations: Sequence[Evaluation], out: Path) -> Path:
    """Top row: pass@k (and maj@k, dashed) against k per data source, every run side by side, at each run's last
    step. Bottom row, for every run with more than one validation step: pass@k over training, one line per k."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    sources = sorted({s for ev in evaluations for s in ev.reports[ev.last_step]})
    over_time = [ev for ev in evaluations if len(ev.reports) > 1]
    cols = max(len(sources), len(over_time), 1)
    outside = len(evaluations) > LEGEND_INSIDE_MAX
    fig = Figure(figsize=(5 * cols + (3 if outside else 0), 4 * (2 if over_time else 1)))
    colours = run_colours(len(evaluations))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2 if over_time else 1, cols, squeeze=False)
    for ax, source in zip(axes[0], sources):
        for i, ev in enumerate(evaluations):
            report = ev.reports[ev.last_step].get(source)
            if report is None:
                continue
            ks = k_values(report.n)
            ax.plot(ks, [report.mean(f"pass@{k}") for k in ks], marker="o", color=colours[i], label=ev.label)
            if report.has_answers:  # same colour, dashed: one legend entry per run
                ax.plot(ks, [report.mean(f"maj@{k}") for k in ks], marker=".", linestyle="--", color=colours[i])
        ax.set_xscale("log", base=2)
        ticks = sorted({k for ev in evaluations if source in ev.reports[ev.last_step]
                        for k in k_values(ev.reports[ev.last_step][source].n)})  # fmt: skip
        ax.set_xticks(ticks, [str(k) for k in ticks])
        ax.set_title(f"{source}: pass@k (solid) / maj@k (dashed)")
        ax.set_xlabel("k")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        if outside:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        else:
            ax.legend(fontsize=7, loc="lower right")  # the curves sit high: the lower part is free
    for ax, ev in zip(axes[1] if over_time else [], over_time):
        for source in sorted({s for sources_ in ev.reports.values() for s in sources_}):
            steps = sorted(step for step, r in ev.reports.items() if source in r)
            n = ev.reports[steps[-1]][source].n
            for j, k in enumerate(k_values(n)):
                values = [ev.reports[step][source].mean(f"pass@{k}") for step in steps]
                ax.plot(steps, values, marker=".", color=f"C{j % 10}", label=f"{source} pass@{k}")
        ax.set_title(f"{ev.label}: pass@k over training")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes.ravel():
        if not ax.has_data():
            ax.set_axis_off()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return out


__all__ = ["format_evaluations", "plot_evaluations", "run_colours", "write_evaluation_csv"]
