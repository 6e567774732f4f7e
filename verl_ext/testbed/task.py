"""The toy verifiable task of CPU mode: *repeat the digit named in the prompt*; and its local assets.

Used by the CPU recipe (``recipe/cpu_tiny.sh``, through verl's reward loop) and so by ``python -m verl_ext.demo``.
The prompt is ``repeat <d> :``; the reward of a response is the share of its ``target_length`` token slots
that hold ``<d>`` (responses are cut at ``data.max_response_length`` = ``target_length`` tokens). It is
dense enough for GRPO to learn from a random model in a few dozen steps, rewards differ within a group
from the first step (non-zero advantages), and the optimum is a deterministic policy - the regime in
which the entropy-mechanism paper sees entropy collapse.

``python -m verl_ext.testbed.task --out DIR`` writes, without any download, ``DIR/model`` (a random tiny Qwen2
sized for vLLM's CPU attention, head size 32, and its tokenizer) and ``DIR/train.parquet`` /
``DIR/val.parquet`` in verl's RL data format (``data_source``, chat ``prompt``, ``ability``,
``reward_model.ground_truth``, ``extra_info``). verl scores it with ``reward.custom_reward_function.path=
pkg://verl_ext.testbed.task`` (function :func:`compute_score`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verl_ext.testbed.tiny_model import DIGITS

DATA_SOURCE = "verl_ext/repeat_digit"
"""``data_source`` of the task's rows (verl passes it to the scorer)."""

VOCAB_EXTRA: tuple[str, ...] = ("repeat", ":")
"""Words of the task's tokenizer besides the ten digits (a ~30-token vocabulary)."""

MODEL_KWARGS: dict[str, int] = {"hidden": 128, "heads": 4, "kv_heads": 2, "layers": 2, "max_position_embeddings": 512}
"""Tiny Qwen2 for vLLM's CPU engine, whose attention needs a head size >= 32 (128 / 4 = 32)."""


def prompt_text(digit: str) -> str:
    """The user message asking for ``digit``."""
    return f"repeat {digit} :"


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float:
    """verl reward function: ``min(#ground_truth digits in solution_str, L) / L`` with ``L =
    extra_info["target_length"]``.

    Each digit is a single token of the task's tokenizer and no other token contains one, so counting the
    digit's characters in the decoded response counts its tokens. Raises ``ValueError`` for rows of another
    data source or without a positive ``target_length`` (a mis-built data set must not score silently).
    """
    if data_source != DATA_SOURCE:
        raise ValueError(f"verl_ext.testbed.task.compute_score scores data_source {DATA_SOURCE!r}, got {data_source!r}")
    length = (extra_info or {}).get("target_length")
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise ValueError(f"verl_ext.testbed.task: extra_info.target_length={length!r} is invalid: allowed an integer >= 1")
    if ground_truth not in DIGITS:
        raise ValueError(f"verl_ext.testbed.task: ground_truth={ground_truth!r} is invalid: allowed one of {DIGITS}")
    return min(solution_str.count(ground_truth), length) / length


def rows(count: int, target_length: int, seed: int, split: str) -> list[dict[str, Any]]:
    """``count`` rows of the task in verl's RL data format, digits drawn with ``random.Random(seed)``."""
    rng = random.Random(seed)
    out = []
    for index in range(count):
        digit = DIGITS[rng.randrange(10)]
        out.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": prompt_text(digit)}],
                "ability": "copy",
                "reward_model": {"style": "rule", "ground_truth": digit},
                "extra_info": {"split": split, "index": index, "target_length": target_length},
            }
        )
    return out


STAMP = "assets.json"
"""Written last by :func:`write_assets`: the arguments and the builder's source it wrote from (:func:`stamp`)."""


def stamp(target_length: int, train_rows: int = 256, val_rows: int = 32, seed: int = 0) -> dict[str, object]:
    """What the assets depend on: the arguments and a digest of the modules that build them (this one and
    :mod:`~verl_ext.testbed.tiny_model`), so that a changed argument or builder rebuilds them. Cheap: no import."""
    digest = hashlib.sha256()
    for module in ("task.py", "tiny_model.py"):
        digest.update((Path(__file__).with_name(module)).read_bytes())
    return {"target_length": target_length, "train_rows": train_rows, "val_rows": val_rows, "seed": seed,
            "builder": digest.hexdigest()}  # fmt: skip


def assets_current(out: str | Path, target_length: int, train_rows: int = 256, val_rows: int = 32, seed: int = 0) -> bool:
    """Whether ``out`` holds the assets :func:`write_assets` would write with these arguments: its stamp matches and
    the model's weights and the two data files are there (a build cut short leaves no stamp)."""
    root = Path(out)
    try:
        written = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return False
    files = (root / "model" / "config.json", root / "model" / "model.safetensors", root / "train.parquet", root / "val.parquet")
    return written == stamp(target_length, train_rows, val_rows, seed) and all(f.is_file() for f in files)


def write_assets(out: str | Path, target_length: int, train_rows: int = 256, val_rows: int = 32, seed: int = 0) -> dict[str, str]:
    """Write ``model/``, ``train.parquet`` and ``val.parquet`` under ``out``, then the stamp :func:`assets_current`
    reads; returns their paths."""
    import pandas as pd

    from verl_ext.testbed.tiny_model import build_tiny_model  # noqa: I001 (lazy: transformers)

    for name, value, low in (("target_length", target_length, 1), ("train_rows", train_rows, 1), ("val_rows", val_rows, 1)):
        if not isinstance(value, int) or value < low:
            raise ValueError(f"verl_ext.testbed.task: {name}={value!r} is invalid: allowed an integer >= {low}")
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    (root / STAMP).unlink(missing_ok=True)  # a build cut short from here on is not current
    paths = {
        "model": build_tiny_model(root / "model", vocab=DIGITS + VOCAB_EXTRA, seed=seed, **MODEL_KWARGS),
        "train": str(root / "train.parquet"),
        "val": str(root / "val.parquet"),
    }
    pd.DataFrame(rows(train_rows, target_length, seed, "train")).to_parquet(paths["train"])
    pd.DataFrame(rows(val_rows, target_length, seed + 1, "val")).to_parquet(paths["val"])
    (root / STAMP).write_text(json.dumps(stamp(target_length, train_rows, val_rows, seed)) + "\n")
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m verl_ext.testbed.task``: write the task's model and data."""
    parser = argparse.ArgumentParser(prog="python -m verl_ext.testbed.task", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for model/, train.parquet, val.parquet")
    parser.add_argument("--target-length", type=int, default=16, help="scored response tokens, = data.max_response_length (16)")
    parser.add_argument("--train-rows", type=int, default=256)
    parser.add_argument("--val-rows", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0, help="seed of the model weights and the prompts (0)")
    args = parser.parse_args(argv)
    try:
        paths = write_assets(args.out, args.target_length, args.train_rows, args.val_rows, args.seed)
    except ValueError as exc:
        parser.error(str(exc))
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
