#!/usr/bin/env bash
# GSM8K, GRPO with Entropy Ratio Clipping on the dual-clip loss (grpo_erc, arXiv 2512.05591): tokens whose
# entropy ratio H/H_old leaves (0.95, 1.05) lose their gradient; clip_ratio_c 10. 1 node x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, ...); extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=gsm8k-grpo-erc}"
recipe_gsm8k_base
recipe_loss grpo_erc
recipe_run "$@"
