#!/usr/bin/env bash
# Evaluate a checkpoint the papers' way: launches recipe/eval.yaml (FAMILY, CKPT, PROTOCOL, EVAL_DIR are explained
# there). See recipe/launch.sh for SCALE, MODEL, DRY_RUN and PRINT_CMD. Arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
recipe_choice FAMILY dapo "dapo (AIME 2024 + 2025) or gsm8k (GSM8K test)" dapo gsm8k
recipe_choice PROTOCOL erc "erc (n 32, T 0.6, top-p 0.95), dapo (n 32, T 1.0, top-p 0.7), greedy, custom (your val_kwargs)" \
    erc dapo greedy custom
recipe_launch eval "$@"
