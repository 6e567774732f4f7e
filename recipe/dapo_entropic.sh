#!/usr/bin/env bash
# DAPO-Math-17k with EntroPIC (arXiv 2511.15248): PI control of entropy (Kp 1, Ki 0.01) through the loss weight of
# high-probability tokens (alpha in [-1, 1]: positive ones weigh 1 + alpha, negative ones 1 - alpha), toward
# ENTROPY_TARGET (default 0.1 nats per token: EntroPIC's script). verl_ext's controller=entropic on
# actuator=pos_weight, on DAPO's loss. 4 nodes x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, SCALE=cpu, ...) and ENTROPY_TARGET; extra arguments are Hydra
# overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=dapo-entropic}"
: "${ENTROPY_TARGET:=0.1}"
recipe_dapo_base
recipe_loss vanilla
recipe_entropy_control entropic pos_weight entropic_kp=1.0 entropic_ki=0.01 weight_min=-1.0 weight_max=1.0 weight_init=0.0
recipe_run "$@"
