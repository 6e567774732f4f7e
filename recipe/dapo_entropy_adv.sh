#!/usr/bin/env bash
# DAPO-Math-17k with entropy-based advantage shaping ("Reasoning with Exploration: An Entropy Perspective", arXiv
# 2506.14758): A' = A + min(0.4 H, |A| / 2) with the update forward's entropy, on DAPO's loss. 4 nodes x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, SCALE=cpu, ...); extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=dapo-entropy-adv}"
recipe_dapo_base
recipe_loss entropy_adv
recipe_run "$@"
