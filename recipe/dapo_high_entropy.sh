#!/usr/bin/env bash
# DAPO-Math-17k with policy gradient on the high-entropy minority of tokens ("Beyond the 80/20 Rule", arXiv
# 2506.01939): DAPO's loss on the 20 % of each training batch's tokens with the highest entropy (ranked over the whole
# batch, so the same tokens whatever the micro-batching or GPU count). The paper's Qwen3 runs: DAPO with clip 0.2 /
# 0.28. 4 nodes x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, SCALE=cpu, ...); extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=dapo-high-entropy}"
recipe_dapo_base
recipe_loss high_entropy
recipe_run "$@"
