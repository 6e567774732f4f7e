#!/usr/bin/env bash
# Launches recipe/dapo_bapo.yaml; see recipe/launch.sh for the variables it reads (SCALE=cpu: CPU mode).
# Arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
recipe_launch dapo_bapo "$@"
