#!/usr/bin/env bash
# DAPO-Math-17k with Entropy Ratio Clipping on the gradient-preserving clip (gppo_erc, arXiv 2512.05591 /
# 2509.20712), the ERC authors' 7B settings: band (0.95, 1.05), clip 0.2 / 0.2, beta1 = beta2 = 1,
# clip_ratio_c 10. 4 nodes x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, ...); extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=dapo-gppo-erc}"
recipe_dapo_base
recipe_loss gppo_erc
recipe_run "$@"
