#!/usr/bin/env bash
# DAPO-Math-17k with Clip-Cov (arXiv 2505.22617), the authors' 7B settings: PPO clip 1 / 1,
# clip_cov_ratio 2e-4, covariance bounds (1, 5). 4 nodes x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, ...); extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=dapo-clip-cov}"
recipe_dapo_base
recipe_loss clip_cov
recipe_run "$@"
