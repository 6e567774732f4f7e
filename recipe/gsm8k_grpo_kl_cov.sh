#!/usr/bin/env bash
# Launches recipe/gsm8k_grpo_kl_cov.yaml (every setting is there); see recipe/launch.sh for SCALE, MODEL, DRY_RUN, PRINT_CMD.
# Arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
recipe_launch gsm8k_grpo_kl_cov "$@"
