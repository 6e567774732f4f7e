"""A tiny, randomly initialised Qwen2 causal LM with a small tokenizer, built locally (no downloads).

Used by the CPU recipe (so the demo), the CPU tests and the GPU smoke script. The vocabulary covers small synthetic
arithmetic / copy tasks: the ten digits (always single tokens), arithmetic operators, brackets, a few words
and the chat special tokens. Model and tokenizer are deterministic for a given seed and argument set.

The tokenizer is a byte-level BPE with exactly Qwen2's pre-tokenizer. This matters: for ``model_type=qwen2``
transformers 5 ``AutoTokenizer`` always rebuilds the tokenizer as ``Qwen2Tokenizer`` from the saved vocab
and merges, replacing whatever pre-tokenizer was saved; a word-level tokenizer would then silently drop every
word. With Qwen2's own pre-tokenizer both load paths tokenize identically (a test checks it). Each word of
the vocabulary is one token, with and without a leading space (``"is"``, ``" is"``); characters outside the
vocabulary's alphabet are dropped (no byte fallback), as with any closed toy vocabulary.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|endoftext|>"
UNK_TOKEN = "<|unk|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN, IM_START, IM_END)

DIGITS: tuple[str, ...] = tuple(str(d) for d in range(10))
SYMBOLS: tuple[str, ...] = ("+", "-", "*", "/", "=", "(", ")", ":", "?", ".", ",", "#")
WORDS: tuple[str, ...] = (
    "system", "user", "assistant", "repeat", "what", "is", "the", "answer", "compute", "plus", "minus",
    "times", "equals", "sum", "of", "and", "number", "result", "yes", "no",
)  # fmt: skip
DEFAULT_WORDS: tuple[str, ...] = DIGITS + SYMBOLS + WORDS

# Qwen2's pre-tokenisation regex (transformers.models.qwen2.tokenization_qwen2.PRETOKENIZE_REGEX).
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Qwen-style chat template: "<|im_start|>role\ncontent<|im_end|>\n".
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_TRAIN_REPEATS = 8


def _backend_tokenizer(words: Sequence[str]):
    """Train (deterministically) a byte-level BPE in which every word of ``words`` is a single token."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    for word in words:
        if not word or any(ch.isspace() for ch in word):
            raise ValueError(f"tiny_model vocab entry {word!r} is empty or contains whitespace")
        if word in SPECIAL_TOKENS:
            raise ValueError(f"tiny_model vocab entry {word!r} is a special token")
    tokenizer = Tokenizer(
        models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False, continuing_subword_prefix="", end_of_word_suffix="")
    )
    tokenizer.normalizer = normalizers.NFC()
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False), byte_level]
    )
    tokenizer.decoder = decoders.ByteLevel()
    characters = sorted(set("".join(words)) | {" ", "\n"})
    alphabet = sorted({byte_level.pre_tokenize_str(ch)[0][0] for ch in characters})
    corpus = [variant for word in words for variant in (word, " " + word)] * _TRAIN_REPEATS + [" ", "\n"]
    trainer = trainers.BpeTrainer(
        vocab_size=100_000,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    variants = [v for w in words for v in ((w, " " + w) if w.isalpha() else (w,))]  # Qwen2 never joins " 7"
    split = [v for v in variants if len(tokenizer.encode(v, add_special_tokens=False).ids) != 1]
    if split:
        raise ValueError(f"tiny_model: vocab entries {split} did not become single tokens")
    return tokenizer


def build_tokenizer(words: Sequence[str] = DEFAULT_WORDS):
    """A ``PreTrainedTokenizerFast`` (pad/eos/unk set, chat template) over ``SPECIAL_TOKENS`` + ``words``.

    Special tokens get ids 0-4 (pad, eos, unk, im_start, im_end). Digits are always single tokens, so
    ``"12+3="`` becomes ``1 2 + 3 =``.
    """
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_backend_tokenizer(words),
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
        padding_side="left",
        model_max_length=512,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    out_dir: str | os.PathLike,
    vocab: Sequence[str] = DEFAULT_WORDS,
    hidden: int = 32,
    layers: int = 2,
    seed: int = 0,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int | None = None,
    max_position_embeddings: int = 512,
    model_vocab_size: int | None = None,
) -> str:
    """Save a random ``Qwen2ForCausalLM`` and its tokenizer under ``out_dir``; return the directory path.

    Args:
        out_dir: target directory (created if needed).
        vocab: the non-special words of the tokenizer (plus the characters they are made of).
        model_vocab_size: the model's ``vocab_size``; default ``len(tokenizer)`` so every sampled id decodes.
            A larger value pads the embedding / LM head with ids the tokenizer never produces, as real
            checkpoints do (useful to give logits a realistic width in memory benchmarks).
        hidden, layers, heads, kv_heads, intermediate: model size (``intermediate`` defaults to 2x hidden).
        seed: seeds the weight initialisation (fp32); same arguments and seed give identical weights.
        max_position_embeddings: context length of the model.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if hidden % heads != 0 or heads % kv_heads != 0:
        raise ValueError(f"tiny_model: hidden={hidden} must divide by heads={heads}, and heads by kv_heads={kv_heads}")
    tokenizer = build_tokenizer(vocab)
    if model_vocab_size is not None and model_vocab_size < len(tokenizer):
        raise ValueError(f"tiny_model: model_vocab_size={model_vocab_size} < tokenizer size {len(tokenizer)}")
    config = Qwen2Config(
        vocab_size=model_vocab_size or len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        torch_dtype="float32",
    )
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).to(torch.float32)
    finally:
        torch.random.set_rng_state(generator_state)  # leave the caller's global RNG untouched
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


__all__ = ["CHAT_TEMPLATE", "DEFAULT_WORDS", "SPECIAL_TOKENS", "build_tiny_model", "build_tokenizer"]
