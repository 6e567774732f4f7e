#!/usr/bin/env python3
"""Prepare DAPO-Math-17k (train) in verl's parquet schema.

``data_source`` is ``math_dapo``, which selects verl's DAPO math scorer (last ``Answer:`` line,
+1 / -1). Two layouts are read:

* the verl layout of ``BytedTsinghua-SIA/DAPO-Math-17k`` (default): ``prompt`` already holds the
  DAPO chat prompt and ``reward_model.ground_truth`` the answer; both are kept verbatim;
* a plain layout (``open-r1/DAPO-Math-17k-Processed``, or any file with ``problem``/``question``
  and ``answer``/``solution`` columns): the problem is wrapped in the DAPO instruction.

The hub copy repeats every problem many times (about 1.79 M rows for ~17 k problems), as the DAPO
authors trained on it; the repeats are counted in the summary, and ``--dedup`` drops them.

Examples::

    python scripts/data/prepare_dapo_math.py --output-dir ~/data
    python scripts/data/prepare_dapo_math.py --output-dir ~/data --local-path dapo-math-17k.parquet --dedup
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from prep_common import DatasetSpec, run, verl_row  # noqa: E402
from math_format import ground_truth_of, problem_messages  # noqa: E402

DATA_SOURCE = "math_dapo"


def convert(row: Mapping[str, Any], index: int, split: str) -> dict[str, Any]:
    """One source row (either layout) -> one verl row."""
    prompt, _verbatim = problem_messages(row)
    ground_truth = ground_truth_of(row)
    extra = row.get("extra_info")
    source_id = extra.get("index") if isinstance(extra, Mapping) else None
    return verl_row(
        data_source=DATA_SOURCE,
        prompt=prompt,
        ability="math",
        ground_truth=ground_truth,
        extra_info={"split": split, "index": index, "source_id": None if source_id is None else str(source_id)},
    )


SPEC = DatasetSpec(
    name="dapo_math",
    hub_name="BytedTsinghua-SIA/DAPO-Math-17k",
    hub_configs=[None],
    splits={"train": "train"},
    output_files={"train": "dapo-math-17k.parquet"},
    convert=convert,
    description="Prepare DAPO-Math-17k (train) for verl (data_source math_dapo, DAPO 'Answer:' scorer).",
    hub_default_configs={"open-r1/DAPO-Math-17k-Processed": ["all"]},
)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return run(SPEC, argv)


if __name__ == "__main__":
    sys.exit(main())
