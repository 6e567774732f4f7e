#!/usr/bin/env bash
# CPU mode on one machine: launches recipe/cpu_tiny.yaml (LOSS=<loss> selects a loss and its paper's settings,
# MODEL=smollm2 the real model). See recipe/launch.sh for the variables it reads. Arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
recipe_launch cpu_tiny "$@"
