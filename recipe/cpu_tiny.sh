#!/usr/bin/env bash
# CPU mode, one machine without an accelerator: GRPO on a toy verifiable task (repeat the digit named in the
# prompt) with a tiny Qwen2 built locally, through verl's real trainer (Ray, FSDP2 on gloo, vLLM's CPU engine,
# verl's reward loop and weight sync). A few minutes on 2 cores; no download.
# LOSS picks the loss (vanilla, clip_cov, kl_cov, grpo_erc, gppo_erc; default grpo_erc) with the papers'
# settings, except COV_RATIO (default 0.02 here). Environment: recipe/common.sh (recipe_cpu_base: WORK_DIR,
# STEPS, RESPONSE_LENGTH, PROMPTS, N, LR, SEED, LOGGERS, DRY_RUN=1, PRINT_CMD=1); arguments are Hydra overrides.
# MODEL=smollm2 trains the real SmolLM2-135M-Instruct instead, on GSM8K-format word problems (docs/real_model.md).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${LOSS:=grpo_erc}"
: "${COV_RATIO:=0.02}"
: "${EXP_NAME:=cpu-tiny-$LOSS}"
recipe_cpu_base
recipe_loss "$LOSS"
recipe_run "$@"
