#!/usr/bin/env bash
# DAPO-Math-17k, DAPO baseline (arXiv 2503.14476): clip-higher 0.2 / 0.28, dynamic sampling, overlong
# buffer, token-mean; verl's vanilla loss. 4 nodes x 8 GPUs, 7B model; AIME 2024 + 2025 validation.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, ...); extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=dapo-baseline}"
recipe_dapo_base
recipe_loss vanilla
recipe_run "$@"
