#!/usr/bin/env python3
"""Prepare GSM8K (train and test) in verl's parquet schema.

``data_source`` is ``openai/gsm8k``, which selects verl's strict GSM8K scorer: the reward is 1
when the response contains ``#### <number>`` equal to the ground truth. The prompt therefore asks
for the answer after ``####``; the ground truth is the number after ``####`` in the reference
solution, without thousands separators.

Examples::

    python scripts/data/prepare_gsm8k.py --output-dir ~/data
    python scripts/data/prepare_gsm8k.py --output-dir ~/data --local-path /mnt/gsm8k_snapshot
    python scripts/data/prepare_gsm8k.py --output-dir ~/data --local-path test.jsonl --splits test
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from prep_common import DatasetSpec, MalformedRow, first_present, require_text, run, user_prompt, verl_row  # noqa: E402

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_ANSWER_RE = re.compile(r"#### (\-?[0-9\.\,]+)")


def extract_answer(solution: str) -> str:
    """The number after ``####`` in a GSM8K reference solution, commas removed."""
    found = _ANSWER_RE.findall(solution)
    if not found:
        raise MalformedRow("answer has no '#### <number>' final line")
    return found[-1].replace(",", "")


def convert(row: Mapping[str, Any], index: int, split: str) -> dict[str, Any]:
    """One hub row (``question``, ``answer``) -> one verl row."""
    q_key, question = first_present(row, ("question",), "question")
    a_key, answer = first_present(row, ("answer",), "answer")
    question = require_text(question, q_key)
    answer = require_text(answer, a_key)
    return verl_row(
        data_source=DATA_SOURCE,
        prompt=user_prompt(question + " " + INSTRUCTION),
        ability="math",
        ground_truth=extract_answer(answer),
        extra_info={"split": split, "index": index, "question": question, "answer": answer},
    )


SPEC = DatasetSpec(
    name="gsm8k",
    hub_name="openai/gsm8k",
    hub_configs=["main"],
    splits={"train": "train", "test": "test"},
    output_files={"train": "gsm8k-train.parquet", "test": "gsm8k-test.parquet"},
    convert=convert,
    description="Prepare GSM8K train/test parquet files for verl (data_source openai/gsm8k, strict '####' scorer).",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return run(SPEC, argv)


if __name__ == "__main__":
    sys.exit(main())
