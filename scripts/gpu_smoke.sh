#!/usr/bin/env bash
# GPU smoke test: 2 GRPO training steps end to end on one node (vLLM rollout, FSDP update, validation,
# checkpoint save) with a tiny model built locally (no hub access needed). Run it first on new hardware.
#
# usage: bash scripts/gpu_smoke.sh [HYDRA_OVERRIDES...]
# environment:
#   LOSS           policy loss: vanilla, clip_cov, kl_cov, grpo_erc (default), gppo_erc, bapo
#   MODEL_PATH     use this model instead of building the tiny one (e.g. Qwen/Qwen2.5-0.5B-Instruct)
#   GPUS_PER_NODE  GPUs to use (1)
#   SMOKE_DIR      work folder (a new temporary folder, removed after a success unless KEEP=1)
#   PYTHON         interpreter (python3)
#   DRY_RUN=1      build the model and data, then run the exact command with verl_ext.dry_run=true
#   PRINT_CMD=1    print the training command and exit
# Exit status: 0 only when training finished, validation ran and the step-2 checkpoint exists.
set -euo pipefail

SCRIPTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOSSES=(vanilla clip_cov kl_cov grpo_erc gppo_erc bapo)
die() { echo "error: $*" >&2; exit 2; }

LOSS="${LOSS:-grpo_erc}"
GPUS_PER_NODE="${GPUS_PER_NODE:-1}"
PYTHON="${PYTHON:-python3}"
DRY_RUN="${DRY_RUN:-0}"
PRINT_CMD="${PRINT_CMD:-0}"
KEEP="${KEEP:-0}"
[[ " ${LOSSES[*]} " == *" $LOSS "* ]] || die "LOSS='$LOSS' is invalid: allowed ${LOSSES[*]}"
[[ "$GPUS_PER_NODE" =~ ^[1-9][0-9]*$ ]] || die "GPUS_PER_NODE='$GPUS_PER_NODE' is invalid: allowed an integer >= 1"
for flag in DRY_RUN PRINT_CMD KEEP; do
    [[ "${!flag}" == 0 || "${!flag}" == 1 ]] || die "$flag='${!flag}' is invalid: allowed 0 or 1"
done
created_dir=0
if [[ -z "${SMOKE_DIR:-}" ]]; then
    SMOKE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/verl_ext_smoke.XXXXXX")"
    created_dir=1
fi
mkdir -p "$SMOKE_DIR"
model="${MODEL_PATH:-$SMOKE_DIR/tiny_model}"
ckpts="$SMOKE_DIR/ckpts"
log="$SMOKE_DIR/train.log"

cmd=("$PYTHON" -m verl_ext.main_ppo
    algorithm.adv_estimator=grpo
    "data.train_files=['$SMOKE_DIR/gsm8k-train.parquet']"
    "data.val_files=['$SMOKE_DIR/gsm8k-test.parquet']"
    data.train_batch_size=8
    data.max_prompt_length=128
    data.max_response_length=32
    data.filter_overlong_prompts=True
    data.truncation=error
    data.dataloader_num_workers=0
    "actor_rollout_ref.model.path=$model"
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.actor.strategy=fsdp2
    actor_rollout_ref.actor.optim.lr=1e-5
    actor_rollout_ref.actor.ppo_mini_batch_size=4
    actor_rollout_ref.actor.use_dynamic_bsz=True
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=2048
    actor_rollout_ref.actor.use_kl_loss=False
    "actor_rollout_ref.actor.policy_loss.loss_mode=$LOSS"
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.n=2
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.gpu_memory_utilization=0.3
    actor_rollout_ref.rollout.enforce_eager=True
    actor_rollout_ref.rollout.max_num_batched_tokens=2048
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=4096
    actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=4096
    reward.reward_manager.name=naive
    "trainer.logger=['console']"
    trainer.project_name=verl_ext_smoke
    "trainer.experiment_name=smoke-$LOSS"
    trainer.nnodes=1
    "trainer.n_gpus_per_node=$GPUS_PER_NODE"
    trainer.total_epochs=1
    trainer.total_training_steps=2
    trainer.val_before_train=True
    trainer.test_freq=2
    trainer.save_freq=2
    "trainer.default_local_dir=$ckpts"
    trainer.resume_mode=disable
    "$@")
(( DRY_RUN )) && cmd+=(verl_ext.dry_run=true)
if (( PRINT_CMD )); then
    printf '%q ' "${cmd[@]}"
    echo
    (( created_dir )) && rm -rf "$SMOKE_DIR"
    exit 0
fi

fail() {
    echo "SMOKE TEST FAILED: $*" >&2
    echo "work folder kept: $SMOKE_DIR (log: $log)" >&2
    exit 1
}

echo "== smoke test in $SMOKE_DIR (loss $LOSS, $GPUS_PER_NODE GPU)"
if [[ -z "${MODEL_PATH:-}" ]]; then
    "$PYTHON" "$SCRIPTS_DIR/tools/smoke_assets.py" --model-dir "$model" --data-file "$SMOKE_DIR/gsm8k.jsonl" \
        || fail "building the tiny model failed"
else
    "$PYTHON" "$SCRIPTS_DIR/tools/smoke_assets.py" --data-file "$SMOKE_DIR/gsm8k.jsonl" \
        || fail "writing the tiny dataset failed"
fi
for split in train test; do
    "$PYTHON" "$SCRIPTS_DIR/data/prepare_gsm8k.py" --local-path "$SMOKE_DIR/gsm8k.jsonl" --splits "$split" \
        --output-dir "$SMOKE_DIR" --no-progress || fail "preparing the $split parquet failed"
done
if (( ! DRY_RUN )); then
    "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
        || fail "torch sees no CUDA GPU on this node"
fi

echo "+ $(printf '%q ' "${cmd[@]}")" >&2
export HYDRA_FULL_ERROR=1
"${cmd[@]}" 2>&1 | tee "$log" || fail "the training command exited with status ${PIPESTATUS[0]}"
if (( DRY_RUN )); then
    echo "== dry run passed (configuration composed and validated)"
    (( created_dir && ! KEEP )) && rm -rf "$SMOKE_DIR"
    exit 0
fi
grep -q "val-core/openai/gsm8k" "$log" || fail "no validation metrics (val-core/openai/gsm8k) in the log"
[[ -d "$ckpts/global_step_2/actor" ]] || fail "no checkpoint at $ckpts/global_step_2/actor"
[[ "$(cat "$ckpts/latest_checkpointed_iteration.txt" 2>/dev/null)" == 2 ]] \
    || fail "$ckpts/latest_checkpointed_iteration.txt does not say 2"
echo "== SMOKE TEST PASSED: 2 steps, validation and checkpoint ($LOSS)"
(( created_dir && ! KEEP )) && rm -rf "$SMOKE_DIR"
exit 0
