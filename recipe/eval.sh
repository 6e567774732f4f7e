#!/usr/bin/env bash
# Evaluate a checkpoint the papers' way: launches recipe/eval.yaml (family=, eval_protocol=, CKPT or
# trainer.resume_from_path= are explained there). See recipe/launch.sh for the variables it reads. Arguments are
# Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
recipe_launch eval "$@"
