#!/usr/bin/env bash
# Evaluate a checkpoint the papers' way: launches recipe/eval.yaml (FAMILY, CKPT, PROTOCOL, EVAL_DIR are explained
# there). See recipe/launch.sh for SCALE, MODEL, DRY_RUN and PRINT_CMD. Arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
recipe_choice FAMILY dapo "dapo (AIME 2024 + 2025) or gsm8k (GSM8K test)" dapo gsm8k
recipe_choice PROTOCOL erc "erc, dapo, greedy (configs/eval_protocol/<PROTOCOL>.yaml) or custom (your val_kwargs)" \
    erc dapo greedy custom
recipe_launch eval "$@"
