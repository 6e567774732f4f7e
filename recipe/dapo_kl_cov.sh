#!/usr/bin/env bash
# DAPO-Math-17k with KL-Cov (arXiv 2505.22617), the authors' 7B settings: kl_cov_ratio 2e-3 (a fraction:
# 0.2 % of tokens), ppo_kl_coef 1, no PPO clip. 4 nodes x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, ...); extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=dapo-kl-cov}"
recipe_dapo_base
recipe_loss kl_cov
recipe_run "$@"
