#!/usr/bin/env bash
# Launches recipe/dapo_skywork.yaml (every setting is there); see recipe/launch.sh for SCALE, MODEL, DRY_RUN, PRINT_CMD.
# Arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
recipe_launch dapo_skywork "$@"
