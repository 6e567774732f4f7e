#!/usr/bin/env bash
# CPU mode on one machine: launches recipe/cpu_tiny.yaml (every setting is there; LOSS picks the loss, MODEL the
# model: tiny or smollm2). See recipe/launch.sh for DRY_RUN and PRINT_CMD. Arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
recipe_choice LOSS grpo_erc "vanilla, clip_cov, kl_cov, grpo_erc, gppo_erc, high_entropy, entropy_adv" \
    vanilla clip_cov kl_cov grpo_erc gppo_erc high_entropy entropy_adv
recipe_choice MODEL tiny "tiny (a random tiny Qwen2 on repeat-the-digit) or smollm2 (SmolLM2-135M-Instruct on GSM8K-format word problems)" \
    tiny smollm2
recipe_launch cpu_tiny "$@"
