#!/usr/bin/env bash
# GSM8K, GRPO with the actor's KL loss against the reference model, soft-clipped (verl_ext's KL clipping): per
# response, the KL term is softplus(KL - 0.1 nats x length), so a policy within 0.1 nats per token of the reference
# is barely pulled back while a larger drift is penalised in full. 1 node x 8 GPUs.
# Environment and arguments: see recipe/common.sh (MODEL_PATH, TRAIN_FILE, VAL_FILE, CKPTS_DIR, NNODES,
# GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, DRY_RUN=1, SCALE=cpu, ...); extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${EXP_NAME:=gsm8k-grpo-kl-clip}"
recipe_gsm8k_base
recipe_loss vanilla
recipe_kl_clip soft 0.1
recipe_run "$@"
