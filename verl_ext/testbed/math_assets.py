"""Assets for running the GPU recipes (``recipe/gsm8k_*.sh``, ``recipe/dapo_*.sh``) at CPU scale (``SCALE=cpu``).

Two steps, with the project's own data preparation in between (``recipe/common.sh`` runs all three):

1. ``python -m verl_ext.testbed.math_assets sources --out SRC`` writes synthetic arithmetic problems ("What is 3 plus
   4?") in the *hub formats* the preparation scripts read: GSM8K (``question``, ``answer`` ending in ``#### N``;
   ``gsm8k/train.jsonl``, ``gsm8k/test.jsonl``), DAPO-Math-17k in its verl layout (chat ``prompt`` holding the
   DAPO instruction, ``reward_model.ground_truth``; ``dapo-math-17k.parquet``), AIME 2024 (``ID``, ``Problem``,
   ``Solution``, integer ``Answer``; ``aime-2024.jsonl``) and AIME 2025 (``problem``, ``answer``, ``id``;
   ``aime-2025.jsonl``).
2. ``scripts/data/prepare_*.py --local-path ...`` turn them into the parquet files the recipes read, with the
   ``data_source`` values that select verl's own scorers (``openai/gsm8k``: ``#### N``; ``math_dapo`` /
   ``aime*``: the last ``Answer:`` line).
3. ``python -m verl_ext.testbed.math_assets model --data-dir DATA --out MODEL`` builds a tiny Qwen2 whose tokenizer
   covers every word of the prepared prompts, and warms it up (a short supervised fine-tune on prepared training
   prompts, answered in the format each scorer reads: ``#### N`` for GSM8K, ``Answer: N`` for DAPO) until it
   answers some problems and not others: GRPO's advantages are non-zero from step 1 and DAPO's filter both keeps
   and evicts groups. It prints the warmed-up model's sampled accuracy and fraction of mixed groups.

No download: everything is generated here. Deterministic for a given seed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

DAPO_PROMPT_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_PROMPT_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
"""The instruction of ``BytedTsinghua-SIA/DAPO-Math-17k``'s prompts (the hub file carries it in ``prompt``)."""

OPERATIONS = (("plus", lambda a, b: a + b), ("times", lambda a, b: a * b), ("minus", lambda a, b: a - b))
MODEL_KWARGS: dict[str, int] = {"hidden": 128, "heads": 4, "kv_heads": 2, "layers": 2, "max_position_embeddings": 512}
"""Tiny Qwen2 for vLLM's CPU engine (head size 32)."""


def problem(rng: random.Random) -> tuple[str, int]:
    """A synthetic problem and its (non-negative) integer answer."""
    name, fn = OPERATIONS[rng.randrange(len(OPERATIONS))]
    a, b = rng.randrange(10), rng.randrange(10)
    if name == "minus" and b > a:
        a, b = b, a
    return f"What is {a} {name} {b}?", fn(a, b)


def source_rows(count: int, seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [problem(rng) for _ in range(count)]


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def write_sources(out: str | Path, train: int = 512, test: int = 64, seed: int = 0) -> dict[str, str]:
    """Write the hub-format source files under ``out``; returns their paths by name."""
    import pandas as pd

    root = Path(out)
    (root / "gsm8k").mkdir(parents=True, exist_ok=True)
    paths = {"gsm8k_train": root / "gsm8k" / "train.jsonl", "gsm8k_test": root / "gsm8k" / "test.jsonl",
             "dapo_math": root / "dapo-math-17k.parquet", "aime2024": root / "aime-2024.jsonl",
             "aime2025": root / "aime-2025.jsonl"}  # fmt: skip
    for key, rows in (("gsm8k_train", source_rows(train, seed)), ("gsm8k_test", source_rows(test, seed + 1))):
        _write_jsonl(paths[key], ({"question": q, "answer": f"{q[8:-1]} is {a}.\n#### {a}"} for q, a in rows))
    dapo = [{"data_source": "math_dapo", "prompt": [{"role": "user", "content": DAPO_PROMPT_PREFIX + q + DAPO_PROMPT_SUFFIX}],
             "ability": "MATH", "reward_model": {"ground_truth": str(a), "style": "rule-lighteval/MATH_v2"},
             "extra_info": {"index": f"synthetic-{i}"}} for i, (q, a) in enumerate(source_rows(train, seed + 2))]  # fmt: skip
    pd.DataFrame(dapo).to_parquet(paths["dapo_math"])
    _write_jsonl(paths["aime2024"], ({"ID": f"2024-S-{i}", "Problem": q, "Solution": f"{a}", "Answer": a}
                                     for i, (q, a) in enumerate(source_rows(test // 2, seed + 3))))  # fmt: skip
    _write_jsonl(paths["aime2025"], ({"problem": q, "answer": str(a), "id": str(i)}
                                     for i, (q, a) in enumerate(source_rows(test // 2, seed + 4))))  # fmt: skip
    return {key: str(path) for key, path in paths.items()}


# ----------------------------------------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------------------------------------

TRAIN_FILES = ("gsm8k-train.parquet", "dapo-math-17k.parquet")
EVAL_FILES = ("gsm8k-test.parquet", "aime-2024.parquet", "aime-2025.parquet")


def target_response(data_source: str, answer: str) -> str:
    """The answer in the format verl's scorer for ``data_source`` reads."""
    return f"#### {answer}" if data_source == "openai/gsm8k" else f"Answer: {answer}"


def _prepared(data_dir: Path, names: Sequence[str]) -> list[dict[str, Any]]:
    import pandas as pd

    rows = []
    for name in names:
        path = data_dir / name
        if not path.exists():
            raise FileNotFoundError(f"verl_ext.testbed.math_assets: {path} is missing: run scripts/data/prepare_*.py first")
        rows += pd.read_parquet(path).to_dict("records")
    return rows


def _messages(row: dict[str, Any]) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]


def vocabulary(texts: Iterable[str]) -> list[str]:
    """Every pre-token (Qwen2's pre-tokenisation, leading space dropped) of ``texts``: one token each."""
    import regex

    from verl_ext.testbed.tiny_model import QWEN2_PRETOKENIZE_REGEX, SPECIAL_TOKENS

    words: set[str] = set()
    for text in texts:
        for special in SPECIAL_TOKENS:
            text = text.replace(special, " ")
        for piece in regex.findall(QWEN2_PRETOKENIZE_REGEX, text):
            word = piece.strip()
            if word and not any(ch.isspace() for ch in word):
                words.add(word)
    return sorted(words)


def build_model(data_dir: str | Path, out: str | Path, seed: int = 0, steps: int = 400, lr: float = 3e-3) -> dict[str, float]:
    """Build the tiny model for the prepared data in ``data_dir`` and warm it up; returns its figures."""
    import torch

    from verl_ext.testbed.tiny_model import build_tiny_model

    data_dir, out = Path(data_dir), Path(out)
    train, evaluation = _prepared(data_dir, TRAIN_FILES), _prepared(data_dir, EVAL_FILES)
    texts = [m["content"] for row in train + evaluation for m in _messages(row)]
    texts += [target_response(r["data_source"], r["reward_model"]["ground_truth"]) for r in train + evaluation]
    build_tiny_model(out, vocab=vocabulary(texts), seed=seed, **MODEL_KWARGS)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32, attn_implementation="sdpa")
    examples = []
    for row in train:
        prompt = tokenizer.apply_chat_template(_messages(row), add_generation_prompt=True, tokenize=False)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        r_ids = tokenizer(target_response(row["data_source"], row["reward_model"]["ground_truth"]),
                          add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]  # fmt: skip
        examples.append((p_ids, r_ids))
    rng = random.Random(seed)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        model.train()
        for _ in range(steps):
            batch = rng.sample(examples, 32)
            width = max(len(p) + len(r) for p, r in batch)
            ids = torch.full((len(batch), width), tokenizer.pad_token_id)
            labels = torch.full((len(batch), width), -100)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for i, (p, r) in enumerate(batch):
                n = len(p) + len(r)
                ids[i, :n] = torch.tensor(p + r)
                labels[i, len(p) : n] = torch.tensor(r)
                mask[i, :n] = 1
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        figures = sampled_accuracy(model, tokenizer, evaluation, seed)
    finally:
        torch.random.set_rng_state(state)
    model.save_pretrained(out)
    (out / "warmup.json").write_text(json.dumps({"steps": steps, "lr": lr, "final_loss": float(loss.detach()), **figures}))
    return {"final_loss": float(loss.detach()), **figures}


def sampled_accuracy(model: Any, tokenizer: Any, rows: list[dict[str, Any]], seed: int, n: int = 4) -> dict[str, float]:
    """Accuracy of ``n`` samples per prompt at temperature 1 scored by verl's own scorer, and the fraction of
    prompts whose ``n`` samples are neither all right nor all wrong (the groups DAPO's filter keeps)."""
    import torch
    from verl.utils.reward_score import default_compute_score

    model.eval()
    right, mixed = 0, 0
    torch.manual_seed(seed)
    for row in rows:
        prompt = tokenizer.apply_chat_template(_messages(row), add_generation_prompt=True, tokenize=False)
        ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"].repeat(n, 1)
        with torch.no_grad():
            out = model.generate(ids, do_sample=True, temperature=1.0, top_k=0, max_new_tokens=8,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
        scores = []
        for seq in out[:, ids.shape[1]:]:
            text = tokenizer.decode(seq, skip_special_tokens=True)
            result = default_compute_score(row["data_source"], text, row["reward_model"]["ground_truth"])
            score = result["score"] if isinstance(result, dict) else result
            scores.append(float(score) > 0)
        right += sum(scores)
        mixed += 0 < sum(scores) < n
    model.train()
    return {"accuracy": right / (n * len(rows)), "mixed_group_frac": mixed / len(rows)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_ext.testbed.math_assets", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    src = sub.add_parser("sources", help="write the synthetic problems in the hub formats")
    src.add_argument("--out", type=Path, required=True)
    src.add_argument("--train", type=int, default=512, help="training problems per data set (512)")
    src.add_argument("--test", type=int, default=64, help="GSM8K test problems; half as many per AIME year (64)")
    src.add_argument("--seed", type=int, default=0)
    mod = sub.add_parser("model", help="build and warm up the tiny model for the prepared data")
    mod.add_argument("--data-dir", type=Path, required=True, help="where scripts/data/prepare_*.py wrote the parquet files")
    mod.add_argument("--out", type=Path, required=True)
    mod.add_argument("--steps", type=int, default=400, help="warm-up steps of 32 examples (400)")
    mod.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "sources":
        if args.train < 32 or args.test < 2:
            parser.error("--train must be >= 32 and --test >= 2")
        for name, path in write_sources(args.out, args.train, args.test, args.seed).items():
            print(f"{name}: {path}")
        return 0
    if args.steps < 0:
        parser.error("--steps must be >= 0")
    try:
        figures = build_model(args.data_dir, args.out, args.seed, args.steps)
    except FileNotFoundError as exc:
        parser.error(str(exc))
    print(f"model: {args.out} (warm-up: loss {figures['final_loss']:.3f}, sampled accuracy {figures['accuracy']:.2f}, "
          f"mixed groups {figures['mixed_group_frac']:.2f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
