#!/usr/bin/env bash
# GSM8K, GRPO baseline: verl's vanilla PPO-clip loss (0.2 / 0.2), 1 node x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, ...); extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=gsm8k-grpo-vanilla}"
recipe_gsm8k_base
recipe_loss vanilla
recipe_run "$@"
