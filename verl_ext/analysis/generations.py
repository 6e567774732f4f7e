"""Read verl's validation dumps (``trainer.validation_data_dir``) and score them per data source the papers' way.

verl 0.9.1's trainers (V1 and legacy) write one ``<global_step>.jsonl`` per validation into
``trainer.validation_data_dir``, one line per generated sample: ``input`` (the prompt), ``output`` (the response),
``gts``, ``score`` (the reward), ``step``, and every key the reward function returned beside its score (the
reward managers add ``acc``). V1 adds ``uid`` (``<prompt uid>_<sample>_<turn>``). ``recipe/eval.sh`` scores with
:mod:`verl_ext.evaluation.scoring`, which adds ``data_source`` and ``pred`` (the extracted answer).

Per data source and step this computes avg@n, unbiased pass@k and maj@k (:mod:`verl_ext.analysis.pass_at_k`)
for k = 1, 2, 4, ..., n, the mean response length in characters, and a bootstrap 95% interval over prompts.

A sample is correct when its ``acc`` (else its ``score``) is above 0.5: verl's scorers give a correct answer 1 and
a wrong one 0 or -1. Samples are grouped into prompts by V1's ``uid`` prefix, else by the prompt text; a data
source is the row's ``data_source``, else ``unknown`` (verl's own default).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from verl_ext.analysis.pass_at_k import avg_at_n, k_values, maj_at_k, pass_at_k
from verl_ext.analysis.run_reader import RunReadError, split_label

CORRECT_ABOVE = 0.5
"""A sample whose ``acc`` (else ``score``) is above this is correct."""

UNKNOWN_SOURCE = "unknown"
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0


@dataclass
class Prompt:
    """One prompt's samples: verdicts, extracted answers (``None``: none) and response lengths (characters)."""

    correct: list[bool] = field(default_factory=list)
    answers: list[str | None] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)


@dataclass
class SourceReport:
    """One data source at one step: per-prompt metric values and their means with 95% bootstrap intervals."""

    source: str
    step: int
    n: int
    prompts: int
    per_prompt: dict[str, np.ndarray]
    has_answers: bool

    def mean(self, metric: str) -> float:
        return float(self.per_prompt[metric].mean())

    def interval(self, metric: str) -> tuple[float, float]:
        """Percentile 95% bootstrap interval of the mean over prompts (seeded: the same dump gives the same numbers)."""
        values = self.per_prompt[metric]
        rng = np.random.default_rng(BOOTSTRAP_SEED)
        means = values[rng.integers(0, len(values), size=(BOOTSTRAP_RESAMPLES, len(values)))].mean(axis=1)
        low, high = np.percentile(means, [2.5, 97.5])
        return float(low), float(high)

    @property
    def metrics(self) -> list[str]:
        return list(self.per_prompt)


@dataclass
class Evaluation:
    """One run's (or one evaluation's) dumps: ``reports[step][source]``."""

    label: str
    path: Path
    reports: dict[int, dict[str, SourceReport]]

    @property
    def last_step(self) -> int:
        return max(self.reports)


def _verdict(row: dict, where: str) -> bool:
    value = row.get("acc")
    if value is None:  # no acc (or verl's placeholder for a sample whose scorer gave none): the score decides
        value = row.get("score")
    if isinstance(value, bool):
        return value
    if not isinstance(value, (int, float)) or (isinstance(value, float) and math.isnan(value)):
        raise RunReadError(f"{where}: 'acc' / 'score' must be a number or a bool; got {value!r}")
    return float(value) > CORRECT_ABOVE


def _prompt_key(row: dict) -> str:
    uid = row.get("uid")
    if isinstance(uid, str) and uid.count("_") >= 2:
        return "uid:" + uid.rsplit("_", 2)[0]
    return "input:" + str(row["input"])


def read_dump(path: Path) -> dict[str, dict[str, Prompt]]:
    """``{data_source: {prompt key: Prompt}}`` of one dump file (RunReadError naming the file and line)."""
    sources: dict[str, dict[str, Prompt]] = defaultdict(lambda: defaultdict(Prompt))
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise RunReadError(f"{path}: cannot read the dump: {exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RunReadError(f"{where}: not a JSON line ({exc})") from exc
        missing = [key for key in ("input", "output", "score") if row.get(key) is None]
        if missing:
            raise RunReadError(f"{where}: the sample has no {missing}; verl's validation dump "
                               "(trainer.validation_data_dir) writes input, output, score and step")  # fmt: skip
        prompt = sources[str(row.get("data_source") or UNKNOWN_SOURCE)][_prompt_key(row)]
        prompt.correct.append(_verdict(row, where))
        pred = row.get("pred")
        prompt.answers.append(None if pred in (None, "", "[INVALID]") else str(pred))
        prompt.lengths.append(len(str(row["output"])))
    if not sources:
        raise RunReadError(f"{path}: the dump has no samples")
    return sources


def score_source(source: str, step: int, prompts: dict[str, Prompt], where: Path) -> SourceReport:
    """The per-prompt metrics of one data source; every prompt must have the same number of samples."""
    sizes = sorted({len(p.correct) for p in prompts.values()})
    if len(sizes) > 1:
        raise RunReadError(f"{where}: data source {source!r} mixes prompts with {sizes} samples each; pass@k and "
                           "maj@k need the same n for every prompt (one actor_rollout_ref.rollout.val_kwargs.n per "
                           "evaluation)")  # fmt: skip
    n = sizes[0]
    has_answers = any(a is not None for p in prompts.values() for a in p.answers)
    values: dict[str, list[float]] = defaultdict(list)
    for p in prompts.values():
        c = sum(p.correct)
        values[f"avg@{n}"].append(avg_at_n(p.correct))
        for k in k_values(n):
            values[f"pass@{k}"].append(pass_at_k(n, c, k))
        if has_answers:
            for k in k_values(n):
                values[f"maj@{k}"].append(maj_at_k(p.correct, p.answers, k))
        values["length"].append(float(np.mean(p.lengths)))
    per_prompt = {key: np.asarray(v, dtype=np.float64) for key, v in values.items()}
    return SourceReport(source, step, n, len(prompts), per_prompt, has_answers)


def dump_files(path: Path) -> dict[int, Path]:
    """``{step: file}``: one ``<step>.jsonl`` file, or every one in a ``validation_data_dir``."""
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(path.glob("*.jsonl"))
    else:
        raise RunReadError(f"{path}: no such file or directory")
    steps = {}
    for file in files:
        if not file.stem.isdigit():
            raise RunReadError(f"{file}: a validation dump is named <global_step>.jsonl; got {file.name!r}")
        steps[int(file.stem)] = file
    if not steps:
        raise RunReadError(f"{path}: no <global_step>.jsonl validation dumps in this directory")
    return steps


def read_evaluation(arg: str) -> Evaluation:
    """A ``[label=]path`` argument: a dump file or a ``validation_data_dir``, scored per step and data source."""
    label, path = split_label(arg)
    label = label or (path.stem if path.is_file() else path.name)
    reports = {}
    for step, file in sorted(dump_files(path).items()):
        reports[step] = {source: score_source(source, step, prompts, file)
                         for source, prompts in sorted(read_dump(file).items())}  # fmt: skip
    return Evaluation(label, path, reports)


__all__ = ["CORRECT_ABOVE", "Evaluation", "Prompt", "SourceReport", "dump_files", "read_dump", "read_evaluation",
           "score_source"]  # fmt: skip
