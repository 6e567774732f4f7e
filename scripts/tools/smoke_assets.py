#!/usr/bin/env python3
"""Write the assets of the GPU smoke test (``scripts/gpu_smoke.sh``) without hub access: a tiny GSM8K-
format source file of small sums, and a tiny random Qwen2 model with a local tokenizer and chat
template built by :func:`verl_ext.testbed.tiny_model.build_tiny_model`, sized for vLLM (head size 64).

The questions use only words of the tiny model's vocabulary (``what is 3 plus 4 ?``), so prompts
tokenize into real tokens; the GSM8K preparation script then appends its instruction.

Usage::

    python scripts/tools/smoke_assets.py --model-dir /tmp/smoke/model --data-file /tmp/smoke/gsm8k.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Sequence

#: Model size for the smoke test: head size 128 / 2 = 64, which every vLLM attention backend accepts.
SMOKE_MODEL_KWARGS = {"hidden": 128, "heads": 2, "kv_heads": 1, "layers": 2, "max_position_embeddings": 1024}


def tiny_gsm8k_rows(count: int, seed: int = 0) -> list[dict[str, str]]:
    """``count`` GSM8K-format rows (``question``, ``answer`` ending in ``#### N``) of small sums."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        rows.append({"question": f"what is {a} plus {b} ?", "answer": f"{a} plus {b} is {a + b} .\n#### {a + b}"})
    return rows


def write_rows(rows: Sequence[dict[str, str]], path: str) -> None:
    """Write ``rows`` as JSON lines."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", default=None, help="folder the tiny model and tokenizer are written to")
    parser.add_argument("--data-file", default=None, help="GSM8K-format .jsonl file to write (question, answer)")
    parser.add_argument("--rows", type=int, default=64, help="number of rows of the tiny dataset (64)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.model_dir is None and args.data_file is None:
        parser.error("nothing to do: pass --model-dir, --data-file or both")
    if args.rows < 1:
        parser.error(f"--rows {args.rows} is invalid: allowed an integer >= 1")
    if args.data_file is not None and not args.data_file.endswith(".jsonl"):
        parser.error(f"--data-file {args.data_file!r} is invalid: it must end with .jsonl")

    if args.data_file is not None:
        rows = tiny_gsm8k_rows(args.rows, args.seed)
        write_rows(rows, args.data_file)
        print(f"tiny GSM8K source ({len(rows)} rows): {args.data_file}")
    if args.model_dir is not None:
        from verl_ext.testbed.tiny_model import build_tiny_model

        build_tiny_model(args.model_dir, seed=args.seed, **SMOKE_MODEL_KWARGS)
        print(f"tiny model: {args.model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
