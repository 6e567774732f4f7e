#!/usr/bin/env bash
# GSM8K, GRPO with Clip-Cov (arXiv 2505.22617): detach 0.02 % of the tokens with covariance in (1, 5);
# PPO clip 1 / 1 as in the authors' runs. 1 node x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, ...); extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=gsm8k-grpo-clip-cov}"
recipe_gsm8k_base
recipe_loss clip_cov
recipe_run "$@"
