"""Assets for running the GPU recipes (``recipe/gsm8k_*.sh``, ``recipe/dapo_*.sh``) at CPU scale (``SCALE=cpu``).

Two steps, with the project's own data preparation in between (``python -m verl_ext.testbed.assets`` runs all three):

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


NAMES = ("Tom", "Anna", "Sam", "Lily", "Ben", "Mia", "Omar", "Zoe")
OBJECTS = ("apples", "pencils", "books", "marbles", "stickers", "cookies", "coins", "shells")


def word_problem(rng: random.Random) -> tuple[str, int, str]:
    """A one-step arithmetic word problem, its answer and its worked line (``3 + 4 = 7``), at one of three
    difficulties: a sum of two digits, a difference or a sum with a two-digit number, a product of two digits."""
    who, what = rng.choice(NAMES), rng.choice(OBJECTS)
    kind = rng.randrange(4)
    if kind == 0:
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        return f"{who} has {a} {what} and gets {b} more. How many {what} does {who} have now?", a + b, f"{a} + {b} = {a + b}"
    if kind == 1:
        a, b = rng.randint(10, 30), rng.randint(2, 9)
        return f"{who} had {a} {what} and gave {b} of them away. How many {what} are left?", a - b, f"{a} - {b} = {a - b}"
    if kind == 2:
        a, b = rng.randint(10, 40), rng.randint(2, 9)
        return f"{who} has {a} {what}. A friend gives {who} {b} more. How many {what} does {who} have?", a + b, f"{a} + {b} = {a + b}"
    a, b = rng.randint(2, 9), rng.randint(2, 5)
    return f"{who} buys {b} bags with {a} {what} in each bag. How many {what} does {who} buy?", a * b, f"{b} * {a} = {a * b}"


STYLES = ("digits", "words")
"""Source styles: ``digits`` ("What is 3 plus 4?", the tiny model's vocabulary) and ``words`` (word problems with
a worked line, for a real pretrained model)."""


def source_rows(count: int, seed: int, style: str = "digits") -> list[tuple[str, int, str]]:
    """``count`` problems: (question, answer, worked line)."""
    rng = random.Random(seed)
    if style == "words":
        return [word_problem(rng) for _ in range(count)]
    if style != "digits":
        raise ValueError(f"style {style!r} is invalid: allowed {', '.join(STYLES)}")
    return [(q, a, f"{q[8:-1]} is {a}.") for q, a in (problem(rng) for _ in range(count))]


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def write_sources(out: str | Path, train: int = 512, test: int = 64, seed: int = 0, style: str = "digits") -> dict[str, str]:
    """Write the hub-format source files under ``out`` (and ``worked.json``, question -> worked line, which the
    warm-ups read); returns their paths by name."""
    import pandas as pd

    root = Path(out)
    (root / "gsm8k").mkdir(parents=True, exist_ok=True)
    paths = {"gsm8k_train": root / "gsm8k" / "train.jsonl", "gsm8k_test": root / "gsm8k" / "test.jsonl",
             "dapo_math": root / "dapo-math-17k.parquet", "aime2024": root / "aime-2024.jsonl",
             "aime2025": root / "aime-2025.jsonl", "worked": root / "worked.json"}  # fmt: skip
    sets = {key: source_rows(count, seed + offset, style) for key, count, offset in
            (("gsm8k_train", train, 0), ("gsm8k_test", test, 1), ("dapo_math", train, 2), ("aime2024", test // 2, 3),
             ("aime2025", test // 2, 4))}  # fmt: skip
    for key in ("gsm8k_train", "gsm8k_test"):
        _write_jsonl(paths[key], ({"question": q, "answer": f"{w}\n#### {a}"} for q, a, w in sets[key]))
    dapo = [{"data_source": "math_dapo", "prompt": [{"role": "user", "content": DAPO_PROMPT_PREFIX + q + DAPO_PROMPT_SUFFIX}],
             "ability": "MATH", "reward_model": {"ground_truth": str(a), "style": "rule-lighteval/MATH_v2"},
             "extra_info": {"index": f"synthetic-{i}"}} for i, (q, a, _) in enumerate(sets["dapo_math"])]  # fmt: skip
    pd.DataFrame(dapo).to_parquet(paths["dapo_math"])
    _write_jsonl(paths["aime2024"], ({"ID": f"2024-S-{i}", "Problem": q, "Solution": f"{a}", "Answer": a}
                                     for i, (q, a, _) in enumerate(sets["aime2024"])))  # fmt: skip
    _write_jsonl(paths["aime2025"], ({"problem": q, "answer": str(a), "id": str(i)}
                                     for i, (q, a, _) in enumerate(sets["aime2025"])))  # fmt: skip
    paths["worked"].write_text(json.dumps({q: w for rows in sets.values() for q, _, w in rows}, indent=0), encoding="utf-8")
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


MIXED_TARGET = 0.47
"""The share of DAPO's training prompts whose :data:`DAPO_GROUP` sampled responses are neither all right nor all wrong
that the tiny model's warm-up goes on to: DAPO's filter at ``SCALE=cpu`` (4 groups a batch, 10 generation batches) then
fails to fill a batch with a chance below 1e-6 from 0.42 on (tests/cpu/test_math_assets.py); 0.47 leaves two standard
errors of the 512-prompt measurement. The arithmetic of the host decides how many steps that takes."""

DAPO_GROUP = (4, 8)
"""``(rollout.n, data.max_response_length)`` of the DAPO recipes at ``SCALE=cpu``: how the warm-up's stop samples."""

MAX_STEPS = 1200
"""The most warm-up steps: a host that does not reach :data:`MIXED_TARGET` by then keeps the model it has (the
property's test names the share it measured)."""


def build_model(data_dir: str | Path, out: str | Path, seed: int = 0, steps: int = 400, lr: float = 3e-3,
                more: int = 100) -> dict[str, float]:
    """Build the tiny model for the prepared data in ``data_dir`` and warm it up: ``steps`` steps, then ``more`` at a
    time while the mixed share of DAPO's training groups (sampled as the recipes sample them, :data:`DAPO_GROUP`) is
    below :data:`MIXED_TARGET`, up to :data:`MAX_STEPS`; returns its figures (``steps``: how many it took)."""
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
    examples = [_example(tokenizer, row, target_response(row["data_source"], row["reward_model"]["ground_truth"]))
                for row in train]  # fmt: skip
    dapo = [row for row in train if row["data_source"] == "math_dapo"]
    n, length = DAPO_GROUP

    def reached(done: int) -> bool:  # sampled with its own seed: the property's test samples with another
        return not dapo or done >= MAX_STEPS or (
            sampled_accuracy(model, tokenizer, dapo, seed + 2, n=n, max_new_tokens=length)["mixed_group_frac"] >= MIXED_TARGET)

    loss, figures, taken = _supervised_warm_up(model, tokenizer, examples, evaluation, seed, steps, lr, batch=32,
                                               more=more, reached=reached)  # fmt: skip
    model.save_pretrained(out)
    (out / "warmup.json").write_text(json.dumps({"steps": taken, "lr": lr, "final_loss": float(loss.detach()), **figures}))
    return {"final_loss": float(loss.detach()), **figures, "steps": taken}


def warm_up_pretrained(model_path: str | Path, data_dir: str | Path, sources: str | Path, out: str | Path, seed: int = 0,
                       steps: int = 6, lr: float = 2e-5, batch: int = 16, eval_rows: int = 16) -> dict[str, float]:
    """A pretrained model's format warm-up (the SFT-then-RL "cold start"): ``steps`` supervised steps on the
    prepared training prompts answered with their worked line and the line each scorer reads (``3 + 4 = 7`` then
    ``#### 7`` for GSM8K, ``Answer: 7`` for DAPO), then saved with its tokenizer to ``out``; returns the sampled
    figures (accuracy, mixed groups, entropy) on ``eval_rows`` held-out prompts, 4 samples each, 64 new tokens.

    The warm-up teaches the output format, not arithmetic: SmolLM2-135M-Instruct writes verl's strict ``#### N``
    in almost no sample at temperature 1, so every GRPO group would score 0 and the policy gradient vanish."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data_dir, out = Path(data_dir), Path(out)
    worked_path = Path(sources) / "worked.json"
    if not worked_path.is_file():
        raise FileNotFoundError(f"verl_ext.testbed.math_assets: {worked_path} is missing: run `sources --style words` first")
    worked = json.loads(worked_path.read_text(encoding="utf-8"))
    train, evaluation = _prepared(data_dir, TRAIN_FILES), _prepared(data_dir, EVAL_FILES)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, attn_implementation="sdpa")
    examples = []
    for row in train:
        question = row["extra_info"].get("question") or _messages(row)[-1]["content"].removeprefix(DAPO_PROMPT_PREFIX).removesuffix(DAPO_PROMPT_SUFFIX)
        if question not in worked:
            raise KeyError(f"verl_ext.testbed.math_assets: no worked line for {question!r} in {worked_path}: the data in {data_dir} come from other sources")
        target = worked[question] + "\n" + target_response(row["data_source"], row["reward_model"]["ground_truth"])
        examples.append(_example(tokenizer, row, target))
    held_out = random.Random(seed).sample(evaluation, min(eval_rows, len(evaluation)))
    loss, figures, _ = _supervised_warm_up(model, tokenizer, examples, held_out, seed, steps, lr, batch, max_new_tokens=64)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    result = {"base": str(model_path), "steps": steps, "lr": lr, "batch": batch, "final_loss": float(loss.detach()), **figures}
    (out / "warmup.json").write_text(json.dumps(result), encoding="utf-8")
    return result


def _example(tokenizer: Any, row: dict[str, Any], target: str) -> tuple[list[int], list[int]]:
    """A supervised example: the row's chat prompt (generation prompt added) and ``target`` followed by EOS, as ids."""
    prompt = tokenizer.apply_chat_template(_messages(row), add_generation_prompt=True, tokenize=False)
    return (tokenizer(prompt, add_special_tokens=False)["input_ids"],
            tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])  # fmt: skip


def _supervised_warm_up(model: Any, tokenizer: Any, examples: list[tuple[list[int], list[int]]], evaluation: list[dict[str, Any]],
                        seed: int, steps: int, lr: float, batch: int, max_new_tokens: int = 8, more: int = 0,
                        reached: Any = None) -> tuple[Any, dict[str, float], int]:
    """``steps`` AdamW steps of ``batch`` (prompt, response) examples, loss on the response tokens, then ``more`` at a
    time until ``reached(steps taken)`` (when given); then the sampled figures on ``evaluation`` and the steps taken.
    Torch's global RNG is restored afterwards."""
    import torch

    rng = random.Random(seed)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    loss = torch.tensor(float("nan"))
    try:
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        model.train()
        taken, todo = 0, steps
        while todo:
            for _ in range(todo):
                loss = _step(model, tokenizer, optimizer, rng.sample(examples, batch))
            taken, todo = taken + todo, 0
            if reached is not None and more > 0 and not reached(taken):
                model.train()
                todo = more
        figures = sampled_accuracy(model, tokenizer, evaluation, seed, max_new_tokens=max_new_tokens)
    finally:
        torch.random.set_rng_state(state)
    return loss, figures, taken


def _step(model: Any, tokenizer: Any, optimizer: Any, chosen: list[tuple[list[int], list[int]]]) -> Any:
    """One AdamW step on ``chosen`` (prompt, response) examples, loss on the response tokens; the loss."""
    import torch

    width = max(len(p) + len(r) for p, r in chosen)
    ids = torch.full((len(chosen), width), tokenizer.pad_token_id)
    labels = torch.full((len(chosen), width), -100)
    mask = torch.zeros((len(chosen), width), dtype=torch.long)
    for i, (p, r) in enumerate(chosen):
        n = len(p) + len(r)
        ids[i, :n] = torch.tensor(p + r)
        labels[i, len(p) : n] = torch.tensor(r)
        mask[i, :n] = 1
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def sampled_accuracy(model: Any, tokenizer: Any, rows: list[dict[str, Any]], seed: int, n: int = 4,
                     max_new_tokens: int = 8) -> dict[str, float]:
    """Accuracy of ``n`` samples per prompt at temperature 1 scored by verl's own scorer, the fraction of
    prompts whose ``n`` samples are neither all right nor all wrong (the groups DAPO's filter keeps), and the
    sampled tokens' mean entropy (nats, the full-vocabulary entropy of the distribution each token was drawn from)."""
    import torch
    from verl.utils.reward_score import default_compute_score

    model.eval()
    right, mixed, entropy_sum, tokens = 0, 0, 0.0, 0
    torch.manual_seed(seed)
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        for start in range(0, len(rows), 8):  # 8 prompts x n samples per generate call, left-padded
            chunk = rows[start : start + 8]
            prompts = [tokenizer.apply_chat_template(_messages(row), add_generation_prompt=True, tokenize=False) for row in chunk]
            enc = tokenizer([p for p in prompts for _ in range(n)], add_special_tokens=False, return_tensors="pt", padding=True)
            with torch.no_grad():
                out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                     output_scores=True, return_dict_in_generate=True)  # fmt: skip
            generated = out.sequences[:, enc["input_ids"].shape[1]:]
            token_entropy = torch.stack([torch.distributions.Categorical(logits=step.float()).entropy() for step in out.scores], 1)
            ended = (generated == tokenizer.eos_token_id).long().cumsum(1)
            live = (ended == 0) | ((ended == 1) & (generated == tokenizer.eos_token_id))  # up to and with the EOS
            entropy_sum += float(token_entropy[live].sum())
            tokens += int(live.sum())
            for i, row in enumerate(chunk):
                scores = []
                for seq in generated[i * n : (i + 1) * n]:
                    text = tokenizer.decode(seq, skip_special_tokens=True)
                    result = default_compute_score(row["data_source"], text, row["reward_model"]["ground_truth"])
                    score = result["score"] if isinstance(result, dict) else result
                    scores.append(float(score) > 0)
                right += sum(scores)
                mixed += 0 < sum(scores) < n
    finally:
        tokenizer.padding_side = side
    model.train()
    return {"accuracy": right / (n * len(rows)), "mixed_group_frac": mixed / len(rows), "entropy": entropy_sum / max(tokens, 1)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_ext.testbed.math_assets", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    src = sub.add_parser("sources", help="write the synthetic problems in the hub formats")
    src.add_argument("--out", type=Path, required=True)
    src.add_argument("--train", type=int, default=512, help="training problems per data set (512)")
    src.add_argument("--test", type=int, default=64, help="GSM8K test problems; half as many per AIME year (64)")
    src.add_argument("--seed", type=int, default=0)
    src.add_argument("--style", choices=STYLES, default="digits", help="digits (the tiny model's) or words (a real model's)")
    mod = sub.add_parser("model", help="build and warm up the tiny model for the prepared data")
    mod.add_argument("--data-dir", type=Path, required=True, help="where scripts/data/prepare_*.py wrote the parquet files")
    mod.add_argument("--out", type=Path, required=True)
    mod.add_argument("--steps", type=int, default=400, help="warm-up steps of 32 examples (400)")
    mod.add_argument("--more", type=int, default=100, help="then this many more at a time until the DAPO groups' mixed "
                     "share reaches MIXED_TARGET (100; 0: --steps exactly)")
    mod.add_argument("--seed", type=int, default=0)
    pre = sub.add_parser("pretrained", help="format warm-up of a pretrained model on the prepared word problems")
    pre.add_argument("--model", type=Path, required=True, help="the pretrained model's HF folder")
    pre.add_argument("--data-dir", type=Path, required=True, help="where scripts/data/prepare_*.py wrote the parquet files")
    pre.add_argument("--sources", type=Path, required=True, help="the `sources --style words` folder (its worked.json)")
    pre.add_argument("--out", type=Path, required=True)
    pre.add_argument("--steps", type=int, default=6, help="supervised steps of 16 examples (6: more collapse the entropy, see docs/real_model.md)")
    pre.add_argument("--lr", type=float, default=2e-5)
    pre.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "sources":
        if args.train < 32 or args.test < 2:
            parser.error("--train must be >= 32 and --test >= 2")
        for name, path in write_sources(args.out, args.train, args.test, args.seed, args.style).items():
            print(f"{name}: {path}")
        return 0
    if args.command == "pretrained":
        if args.steps < 0 or not args.lr > 0:
            parser.error("--steps must be >= 0 and --lr > 0")
        try:
            figures = warm_up_pretrained(args.model, args.data_dir, args.sources, args.out, args.seed, args.steps, args.lr)
        except (OSError, KeyError) as exc:  # FileNotFoundError is an OSError
            parser.error(str(exc))
        print(f"model: {args.out} (format warm-up of {args.model}: loss {figures['final_loss']:.3f}, sampled accuracy "
              f"{figures['accuracy']:.2f}, mixed groups {figures['mixed_group_frac']:.2f}, entropy {figures['entropy']:.2f} nats)")
        return 0
    if args.steps < 0:
        parser.error("--steps must be >= 0")
    if args.more < 0:
        parser.error("--more must be >= 0")
    try:
        figures = build_model(args.data_dir, args.out, args.seed, args.steps, more=args.more)
    except FileNotFoundError as exc:
        parser.error(str(exc))
    print(f"model: {args.out} (warm-up: loss {figures['final_loss']:.3f}, sampled accuracy {figures['accuracy']:.2f}, "
          f"mixed groups {figures['mixed_group_frac']:.2f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
