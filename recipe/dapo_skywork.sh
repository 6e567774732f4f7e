#!/usr/bin/env bash
# DAPO-Math-17k with Skywork-OR1's adaptive entropy control (arXiv 2505.22312): an entropy-loss term whose
# coefficient moves by +-0.0001 each step within [0, 0.005] from 0, applied only while the batch's entropy is below
# the target (ENTROPY_TARGET, default 0.2 nats per token). The values of every or1_scripts/train/*.sh of
# SkyworkAI/Skywork-OR1 (ENTROPY_COEFF=0.0 as the initial coefficient, DELTA_ENT_COEF=0.0001, MIN_ENT_COEF=0,
# MAX_ENT_COEF=0.005, TGT_ENTROPY=0.2; the rule is EntController in their verl/trainer/ppo/core_algos.py).
# verl_ext's controller=skywork on actuator=entropy_coef, on DAPO's loss. 4 nodes x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, SCALE=cpu, ...) and ENTROPY_TARGET; extra arguments are Hydra
# overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=dapo-skywork}"
: "${ENTROPY_TARGET:=0.2}"
recipe_dapo_base
recipe_loss vanilla
recipe_entropy_control skywork entropy_coef skywork_delta=0.0001 coef_min=0.0 coef_max=0.005 coef_init=0.0
recipe_run "$@"
