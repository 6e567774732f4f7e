#!/usr/bin/env bash
# DAPO-Math-17k with Entropy Ratio Clipping on DAPO (grpo_erc, arXiv 2512.05591), the authors' 7B settings:
# kept entropy-ratio band (0.95, 1.05), clip 0.2 / 0.28, clip_ratio_c 10. 4 nodes x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, ...); extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=dapo-grpo-erc}"
recipe_dapo_base
recipe_loss grpo_erc
recipe_run "$@"
