#!/usr/bin/env bash
# GSM8K, GRPO with KL-Cov (arXiv 2505.22617): |log-ratio| penalty (coefficient 1) on the 0.2 % of tokens
# with the largest covariance, no PPO clip. Four mini-batches per step, so the penalty acts. 1 node x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, ...); extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=gsm8k-grpo-kl-cov}"
recipe_gsm8k_base
recipe_loss kl_cov
recipe_run "$@"
