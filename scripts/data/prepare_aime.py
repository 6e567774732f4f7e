#!/usr/bin/env python3
"""Prepare AIME 2024 or AIME 2025 (validation) in verl's parquet schema.

``data_source`` is ``aime2024`` / ``aime2025``: verl sends every ``aime*`` source to the DAPO math
scorer, so the prompt is the DAPO instruction (last line ``Answer: ...``). AIME answers are
integers 0..999; the ground truth is written without leading zeros (``033`` -> ``33``), and rows
whose answer is not such an integer are reported as malformed.

Known hub copies and their columns (all read without flags except where noted):

* 2024: ``Maxwell-Jia/AIME_2024`` (default; ``Problem``, ``Answer``), ``HuggingFaceH4/aime_2024``
  (``problem``, ``answer``);
* 2025: ``yentinglin/aime_2025`` (default; ``problem``, ``answer``), ``opencompass/AIME2025``
  (configs ``AIME2025-I`` and ``AIME2025-II``, split ``test``; ``question``, ``answer``),
  ``math-ai/aime25`` (split ``test``).

Examples::

    python scripts/data/prepare_aime.py --year 2024 --output-dir ~/data
    python scripts/data/prepare_aime.py --year 2025 --output-dir ~/data --hub-name opencompass/AIME2025
    python scripts/data/prepare_aime.py --year 2025 --output-dir ~/data --local-path aime25.jsonl
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from prep_common import DatasetSpec, MalformedRow, run, verl_row  # noqa: E402
from math_format import ground_truth_of, problem_messages  # noqa: E402

YEARS = {
    2024: {"hub_name": "Maxwell-Jia/AIME_2024", "hub_source_splits": {}, "hub_default_configs": {}},
    2025: {
        "hub_name": "yentinglin/aime_2025",
        "hub_source_splits": {"opencompass/AIME2025": {"test": "test"}, "math-ai/aime25": {"test": "test"}},
        "hub_default_configs": {"opencompass/AIME2025": ["AIME2025-I", "AIME2025-II"]},
    },
}
_INT_RE = re.compile(r"^\s*\$?\\?(?:boxed\{)?\s*(\d{1,3})\s*\}?\$?\s*$")
_ID_COLUMNS = ("id", "ID", "problem_idx", "idx")


def aime_answer(text: str) -> str:
    """Normalise an AIME answer (``"033"``, ``33``, ``\\boxed{33}``) to ``"33"``; else MalformedRow."""
    match = _INT_RE.match(text)
    if match is None:
        raise MalformedRow(f"AIME answer {text!r} is not an integer in 0..999")
    return str(int(match.group(1)))


def make_convert(year: int):
    """The row converter for one AIME year."""
    data_source = f"aime{year}"

    def convert(row: Mapping[str, Any], index: int, split: str) -> dict[str, Any]:
        prompt, _verbatim = problem_messages(row)
        answer = aime_answer(ground_truth_of(row))
        source_id = next((row[key] for key in _ID_COLUMNS if row.get(key) is not None), None)
        return verl_row(
            data_source=data_source,
            prompt=prompt,
            ability="math",
            ground_truth=answer,
            extra_info={
                "split": split,
                "index": index,
                "source_id": None if source_id is None else str(source_id),
                "year": year,
            },
        )

    return convert


def make_spec(year: int) -> DatasetSpec:
    """The dataset description for one AIME year."""
    info = YEARS[year]
    return DatasetSpec(
        name=f"aime{year}",
        hub_name=info["hub_name"],
        hub_configs=[None],
        splits={"test": "train"},
        output_files={"test": f"aime-{year}.parquet"},
        convert=make_convert(year),
        description=f"Prepare AIME {year} (validation) for verl (data_source aime{year}, DAPO 'Answer:' scorer).",
        hub_source_splits=info["hub_source_splits"],
        hub_default_configs=info["hub_default_configs"],
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: ``--year`` picks the dataset, every other flag is the shared CLI."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--year", type=int, choices=sorted(YEARS))
    known, rest = pre.parse_known_args(argv)
    if known.year is None:
        if "-h" in rest or "--help" in rest:
            print(f"usage: prepare_aime.py --year {{{','.join(map(str, YEARS))}}} [shared options, see below]")
            return run(make_spec(2024), rest)
        print(f"error: --year is required; allowed: {sorted(YEARS)}", file=sys.stderr)
        return 2
    return run(make_spec(known.year), rest)


if __name__ == "__main__":
    sys.exit(main())
