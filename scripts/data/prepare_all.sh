#!/usr/bin/env bash
# Prepare every dataset the recipes read, from the hub, into DATA_DIR (default $HOME/data/verl_ext):
# gsm8k-train/test.parquet, dapo-math-17k.parquet, aime-2024.parquet, aime-2025.parquet.
# usage: bash scripts/data/prepare_all.sh [--dedup]   (extra flags go to prepare_dapo_math.py)
# Offline clusters: run the prepare_*.py scripts one by one with --local-path (see docs/recipes.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA_DIR="${DATA_DIR:-$HOME/data/verl_ext}"
PYTHON="${PYTHON:-python3}"
"$PYTHON" "$here/prepare_gsm8k.py" --output-dir "$DATA_DIR"
"$PYTHON" "$here/prepare_dapo_math.py" --output-dir "$DATA_DIR" "$@"
"$PYTHON" "$here/prepare_aime.py" --year 2024 --output-dir "$DATA_DIR"
"$PYTHON" "$here/prepare_aime.py" --year 2025 --output-dir "$DATA_DIR"
echo "all datasets written to $DATA_DIR"
