#!/usr/bin/env bash
# Evaluate a run's checkpoint (or a model) the way the papers report it: verl's own validation
# (trainer.val_only=True) with a named sampling protocol, every generation dumped with its score, then
# `python -m verl_ext.analyze --generations "$EVAL_DIR"` for avg@n, pass@k and maj@k per benchmark.
#
# Environment (besides recipe/common.sh's MODEL_PATH, VAL_FILE, NNODES, GPUS_PER_NODE, SCALE, ...):
#   FAMILY    dapo (default: AIME 2024 + 2025, DAPO's lengths and cluster) or gsm8k (GSM8K test): the family of
#             the recipe the run came from, whose settings (lengths, reward manager, parallelism) the evaluation
#             keeps; MODEL_PATH must be the model that run started from
#   CKPT      a checkpoint folder of that run, .../global_step_<N>; verl loads it (trainer.resume_mode=resume_path)
#             and its weights go to vLLM before validation. Empty: evaluate MODEL_PATH itself
#   PROTOCOL  erc    n = 32, temperature 0.6, top-p 0.95 (ERC, CE-GPPO: avg@32)
#             dapo   n = 32, temperature 1.0, top-p 0.7 (DAPO's validation)
#             greedy n = 1, temperature 0
#             custom no sampling keys: pass actor_rollout_ref.rollout.val_kwargs.* as arguments
#   EVAL_DIR  where the dumps go, one <step>.jsonl per evaluation (default: eval-$PROTOCOL beside the checkpoint
#             folders, so that evaluating several checkpoints of a run gives pass@k over training; without CKPT,
#             $CKPTS_DIR)
# Samples are scored by verl's scorer for their data_source (verl_ext.evaluation.scoring adds the extracted
# answer and the data source to each dumped sample). Extra arguments are Hydra overrides.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${FAMILY:=dapo}"
: "${PROTOCOL:=erc}"
: "${CKPT:=}"
case "$PROTOCOL" in
    erc) EVAL_SAMPLING=(True 0.6 0.95 32) ;;
    dapo) EVAL_SAMPLING=(True 1.0 0.7 32) ;;
    greedy) EVAL_SAMPLING=(False 0 1.0 1) ;;
    custom) EVAL_SAMPLING=() ;;
    *) recipe_die "PROTOCOL='$PROTOCOL' is invalid: allowed erc (n 32, T 0.6, top-p 0.95), dapo (n 32, T 1.0, top-p 0.7), greedy, custom (your val_kwargs)" ;;
esac
: "${EXP_NAME:=eval-$FAMILY-$PROTOCOL}"
case "$FAMILY" in
    dapo) recipe_dapo_base ;;
    gsm8k) recipe_gsm8k_base ;;
    *) recipe_die "FAMILY='$FAMILY' is invalid: allowed dapo (AIME 2024 + 2025) or gsm8k (GSM8K test)" ;;
esac
if [[ -n "$CKPT" ]]; then
    [[ "$(basename "$CKPT")" == global_step_* ]] \
        || recipe_die "CKPT='$CKPT' is invalid: allowed a checkpoint folder named global_step_<N> (under a run's CKPTS_DIR)"
    [[ "$PRINT_CMD" == 1 || "$DRY_RUN" == 1 || -d "$CKPT/actor" ]] \
        || recipe_die "CKPT='$CKPT' has no actor/ folder: not a verl checkpoint"
    RECIPE_ARGS+=(trainer.resume_mode=resume_path "trainer.resume_from_path=$CKPT")
else
    RECIPE_ARGS+=(trainer.resume_mode=disable)
fi
if [[ -n "$CKPT" ]]; then
    : "${EVAL_DIR:=$(dirname "$CKPT")/eval-$PROTOCOL}"  # next to the run's checkpoints: <step>.jsonl per checkpoint
else
    : "${EVAL_DIR:=$CKPTS_DIR}"
fi
RECIPE_ARGS+=(
    trainer.val_only=True
    trainer.val_before_train=True
    "trainer.validation_data_dir=$EVAL_DIR"
    reward.custom_reward_function.path=pkg://verl_ext.evaluation.scoring
    reward.custom_reward_function.name=compute_score
)
if (( ${#EVAL_SAMPLING[@]} )); then
    RECIPE_VAL_N="${EVAL_SAMPLING[3]}"  # SCALE=cpu replaces it with VAL_N, as in the DAPO recipes
    RECIPE_ARGS+=(
        "actor_rollout_ref.rollout.val_kwargs.do_sample=${EVAL_SAMPLING[0]}"
        "actor_rollout_ref.rollout.val_kwargs.temperature=${EVAL_SAMPLING[1]}"
        "actor_rollout_ref.rollout.val_kwargs.top_p=${EVAL_SAMPLING[2]}"
        "actor_rollout_ref.rollout.val_kwargs.n=$RECIPE_VAL_N"
    )
    if [[ "$PROTOCOL" == greedy ]]; then
        unset RECIPE_VAL_N  # one greedy sample, at every scale
    fi
fi
echo "evaluating ${CKPT:-$MODEL_PATH} with protocol $PROTOCOL; dumps in $EVAL_DIR" >&2
recipe_run "$@"
