"""Shared machinery of the data-preparation scripts in ``scripts/data/``.

Every ``prepare_*.py`` script describes its dataset with a :class:`DatasetSpec` (where it lives on
the hub, which splits to write, how one source row becomes one verl row) and hands it to
:func:`run`, which owns everything else: the command line, loading from the hub or from a local
file / directory (``prep_load.py``), the progress bar, malformed-row accounting, parquet writing and the final counts.

verl's parquet schema (REFERENCE.md section 3), one row per prompt::

    data_source   str    selects the scorer in verl.utils.reward_score.default_compute_score
    prompt        list   chat messages [{"role": "user", "content": ...}]
    ability       str
    reward_model  dict   {"style": "rule", "ground_truth": str}
    extra_info    dict   {"split": str, "index": int, ...}

This file is not part of a package: the sibling scripts import it after putting their own folder
on ``sys.path``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prep_load import DataPrepError, load_source_splits

#: How many malformed rows are printed one by one; all of them go to the report file.
MAX_PRINTED_MALFORMED = 20

#: Default upper bound of the malformed fraction of a split before the script refuses to write it.
DEFAULT_MAX_MALFORMED_FRAC = 0.05


class MalformedRow(ValueError):
    """Raised by a row converter when a source row cannot become a verl row; the message says why."""


RowConverter = Callable[[Mapping[str, Any], int, str], dict[str, Any]]


@dataclass(frozen=True)
class DatasetSpec:
    """What a prepare script knows about its dataset.

    Attributes:
        name: short name used in messages (``gsm8k``).
        hub_name: default hub dataset id (``openai/gsm8k``); ``--hub-name`` overrides it.
        hub_configs: default hub config names; rows of all of them are concatenated (``[None]``
            for datasets without configs). ``--hub-config`` overrides them.
        splits: output split -> source split (``{"train": "train", "test": "test"}``).
        output_files: output split -> parquet file name inside ``--output-dir``.
        convert: ``convert(row, index, output_split) -> verl row``; raises :class:`MalformedRow`.
        description: first line of ``--help``.
        hub_source_splits: per hub dataset id, its own output split -> source split mapping, for
            known hub copies whose split names differ from ``splits`` (e.g. a test set stored as
            ``train``).
        hub_default_configs: per hub dataset id, the configs to use when ``--hub-config`` is not
            given (e.g. ``opencompass/AIME2025`` stores its two halves as two configs).
    """

    name: str
    hub_name: str
    hub_configs: Sequence[str | None]
    splits: Mapping[str, str]
    output_files: Mapping[str, str]
    convert: RowConverter
    description: str
    hub_source_splits: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    hub_default_configs: Mapping[str, Sequence[str | None]] = field(default_factory=dict)


@dataclass
class SplitReport:
    """Counts of one written split."""

    split: str
    path: str
    read: int = 0
    written: int = 0
    malformed: list[tuple[int, str]] = field(default_factory=list)
    duplicates: int = 0
    dedup: bool = False


# ----------------------------------------------------------------------------------------------
# row helpers shared by the converters
# ----------------------------------------------------------------------------------------------


def first_present(row: Mapping[str, Any], keys: Iterable[str], what: str) -> tuple[str, Any]:
    """Return ``(key, value)`` of the first of ``keys`` that ``row`` has with a non-empty value.

    Columns that are missing, null or blank are passed over (column-oriented files give every row
    every column, null where a row had none). Raises :class:`MalformedRow` naming the accepted
    columns when none has a value.
    """
    keys = list(keys)
    empty = []
    for key in keys:
        if key in row:
            value = row[key]
            if value is None or (isinstance(value, str) and not value.strip()):
                empty.append(key)
                continue
            return key, value
    if empty:
        raise MalformedRow(f"{what} is empty: column(s) {empty} are null or blank")
    raise MalformedRow(f"no {what} column: expected one of {keys}, row has {sorted(row)}")


def require_text(value: Any, what: str) -> str:
    """``value`` as a stripped non-empty string, else :class:`MalformedRow`."""
    if not isinstance(value, str):
        raise MalformedRow(f"{what} must be a string, got {type(value).__name__}")
    text = value.strip()
    if not text:
        raise MalformedRow(f"{what} is empty")
    return text


def user_prompt(content: str) -> list[dict[str, str]]:
    """The chat-message list verl's ``RLHFDataset`` reads from the ``prompt`` column."""
    return [{"role": "user", "content": content}]


def verl_row(
    *,
    data_source: str,
    prompt: list[dict[str, str]],
    ability: str,
    ground_truth: str,
    extra_info: Mapping[str, Any],
    style: str = "rule",
) -> dict[str, Any]:
    """Assemble one row of verl's parquet schema."""
    return {
        "data_source": data_source,
        "prompt": prompt,
        "ability": ability,
        "reward_model": {"style": style, "ground_truth": ground_truth},
        "extra_info": dict(extra_info),
    }


# ----------------------------------------------------------------------------------------------
# conversion and writing
# ----------------------------------------------------------------------------------------------


def convert_rows(
    spec: DatasetSpec,
    split: str,
    parts: Sequence[tuple[str, Iterable[Mapping[str, Any]]]],
    *,
    dedup: bool,
    progress: bool,
    report: SplitReport,
) -> list[dict[str, Any]]:
    """Convert every source row of ``parts`` into verl rows, recording malformed ones in ``report``.

    The index of a row is its position in the concatenation of ``parts`` (0-based), which is the
    row number in the source file when there is one part.
    """
    from tqdm import tqdm

    total = sum(len(rows) for _, rows in parts if hasattr(rows, "__len__"))  # type: ignore[arg-type]
    rows_out: list[dict[str, Any]] = []
    seen_prompts: set[str] = set()
    index = 0
    with tqdm(total=total or None, desc=f"{spec.name}/{split}", unit="row", disable=not progress, file=sys.stderr) as bar:
        for _origin, rows in parts:
            for row in rows:
                report.read += 1
                try:
                    converted = spec.convert(row, index, split)
                except MalformedRow as exc:
                    report.malformed.append((index, str(exc)))
                else:
                    key = json.dumps(converted["prompt"], sort_keys=True)
                    if key in seen_prompts:
                        report.duplicates += 1
                        if not dedup:
                            rows_out.append(converted)
                    else:
                        seen_prompts.add(key)
                        rows_out.append(converted)
                index += 1
                bar.update(1)
    report.written = len(rows_out)
    return rows_out


def write_parquet(rows: list[dict[str, Any]], path: str) -> None:
    """Write verl rows to ``path`` (parent folders are created)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def write_malformed_report(report: SplitReport, path: str) -> None:
    """One JSON line per malformed row: ``{"index": i, "reason": ...}``."""
    with open(path, "w", encoding="utf-8") as handle:
        for index, reason in report.malformed:
            handle.write(json.dumps({"index": index, "reason": reason}) + "\n")


# ----------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------


def build_parser(spec: DatasetSpec) -> argparse.ArgumentParser:
    """The command line every prepare script shares."""
    parser = argparse.ArgumentParser(description=spec.description)
    parser.add_argument("--output-dir", required=True, help="folder the parquet files are written to")
    parser.add_argument(
        "--local-path",
        default=None,
        help="read from this local file (.parquet/.json/.jsonl/.csv: one split, use --splits) or directory "
        "(hub snapshot or datasets save_to_disk output) instead of the hub",
    )
    parser.add_argument(
        "--hub-name",
        default=None,
        help=f"hub dataset id (default {spec.hub_name}); with --local-path, the hub copy the local snapshot is of",
    )
    parser.add_argument(
        "--hub-config",
        action="append",
        default=None,
        help="hub config name; repeat to concatenate several (default: "
        + (", ".join(str(c) for c in spec.hub_configs) or "none")
        + ")",
    )
    parser.add_argument(
        "--splits",
        nargs="+",
        default=list(spec.splits),
        help=f"output splits to write; allowed: {sorted(spec.splits)} (default: all)",
    )
    parser.add_argument(
        "--source-split", default=None, help="read this split of the source instead of the default one"
    )
    parser.add_argument(
        "--dedup", action="store_true", help="drop rows whose prompt repeats an earlier row (counted either way)"
    )
    parser.add_argument(
        "--max-malformed-frac",
        type=float,
        default=DEFAULT_MAX_MALFORMED_FRAC,
        help="fail instead of writing a split whose malformed fraction is above this "
        f"(default {DEFAULT_MAX_MALFORMED_FRAC}; 1 disables the check)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def _validate_args(spec: DatasetSpec, args: argparse.Namespace) -> None:
    unknown = [split for split in args.splits if split not in spec.splits]
    if unknown:
        raise DataPrepError(f"--splits {unknown} not allowed for {spec.name}; allowed: {sorted(spec.splits)}")
    if len(set(args.splits)) != len(args.splits):
        raise DataPrepError(f"--splits {args.splits} repeats a split")
    if not 0.0 <= args.max_malformed_frac <= 1.0:
        raise DataPrepError(f"--max-malformed-frac {args.max_malformed_frac} is invalid: allowed 0 <= value <= 1")


def print_summary(spec: DatasetSpec, reports: Sequence[SplitReport]) -> None:
    """Row counts of every split, on stdout."""
    print(f"[{spec.name}] summary:")
    for rep in reports:
        extra = f", {rep.duplicates} repeated prompts " + ("dropped" if rep.dedup else "kept (--dedup drops them)")
        print(
            f"  {rep.split}: {rep.written} rows written to {rep.path} "
            f"({rep.read} read, {len(rep.malformed)} malformed skipped{extra if rep.duplicates else ''})"
        )


def run(spec: DatasetSpec, argv: Sequence[str] | None = None) -> int:
    """Entry point of a prepare script; returns the process exit status (0 ok, 1 failure, 2 bad flags)."""
    parser = build_parser(spec)
    args = parser.parse_args(argv)
    try:
        _validate_args(spec, args)
        parts = load_source_splits(spec, args)
        reports: list[SplitReport] = []
        for split in args.splits:
            path = os.path.join(args.output_dir, spec.output_files[split])
            report = SplitReport(split=split, path=path, dedup=args.dedup)
            rows = convert_rows(
                spec, split, parts[split], dedup=args.dedup, progress=not args.no_progress, report=report
            )
            malformed_path = path + ".malformed.jsonl"
            if report.malformed:
                for index, reason in report.malformed[:MAX_PRINTED_MALFORMED]:
                    print(f"[{spec.name}/{split}] malformed row {index} skipped: {reason}", file=sys.stderr)
                if len(report.malformed) > MAX_PRINTED_MALFORMED:
                    print(
                        f"[{spec.name}/{split}] ... {len(report.malformed) - MAX_PRINTED_MALFORMED} more malformed rows",
                        file=sys.stderr,
                    )
                os.makedirs(args.output_dir, exist_ok=True)
                write_malformed_report(report, malformed_path)
                print(
                    f"[{spec.name}/{split}] {len(report.malformed)} of {report.read} rows malformed; "
                    f"all listed in {malformed_path}",
                    file=sys.stderr,
                )
            elif os.path.exists(malformed_path):
                os.remove(malformed_path)  # a stale report of an earlier run would be misleading
            if report.read == 0:
                raise DataPrepError(f"{spec.name} split {split!r}: the source has no rows")
            if not rows:
                raise DataPrepError(f"{spec.name} split {split!r}: every one of the {report.read} rows is malformed")
            frac = len(report.malformed) / report.read
            if frac > args.max_malformed_frac:
                raise DataPrepError(
                    f"{spec.name} split {split!r}: {len(report.malformed)} of {report.read} rows malformed "
                    f"({frac:.1%} > --max-malformed-frac {args.max_malformed_frac}); not writing {path}. "
                    "Check that the source is the expected dataset, or raise --max-malformed-frac."
                )
            write_parquet(rows, path)
            reports.append(report)
    except DataPrepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print_summary(spec, reports)
    return 0
