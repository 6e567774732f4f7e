# shellcheck shell=bash
# Shared part of the recipe scripts in recipe/: sourced, never run directly. A recipe script is one line,
# `recipe_launch <name> "$@"`: it launches `python -m verl_ext.main_ppo` with recipe/<name>.yaml, the Hydra
# composition that holds every setting of the recipe (read it to see what runs). Arguments are Hydra overrides,
# applied last. The YAML reads the cluster's environment variables (MODEL_PATH, DATA_DIR, TRAIN_FILE, VAL_FILE,
# CKPTS_DIR, NNODES, GPUS_PER_NODE, PROJECT_NAME, EXP_NAME, GEN_TP, SP_SIZE, OFFLOAD, LOGGERS, lengths, CPU sizes:
# each named beside its key in configs/family/ and configs/scale/); this file reads only:
#   SCALE      gpu (default: the recipe as written) or cpu (CPU mode on one machine, sizes shrunk; configs/scale/cpu.yaml)
#   MODEL      SCALE=cpu's model: tiny (default) or smollm2 (the real SmolLM2-135M-Instruct)
#   PYTHON     the interpreter (python3)
#   DRY_RUN=1  compose and validate (verl_ext.dry_run=true): no Ray, no GPU
#   PRINT_CMD=1  print the exact command and exit without running it

recipe_die() {
    echo "error: $*" >&2
    exit 2
}

# recipe_choice NAME DEFAULT "WHAT THE VALUES MEAN" VALUE...: NAME (default DEFAULT) must be one of the VALUEs.
recipe_choice() {
    local name="$1" default="$2" meaning="$3" value allowed
    shift 3
    value="${!name:-$default}"
    for allowed in "$@"; do
        if [[ "$value" == "$allowed" ]]; then
            export "$name=$value"
            return 0
        fi
    done
    recipe_die "$name='$value' is invalid: allowed $meaning"
}

# recipe_launch NAME "$@": run (or dry-run, or print) python -m verl_ext.main_ppo with recipe/NAME.yaml + overrides.
recipe_launch() {
    local name="$1" here
    shift
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    : "${PYTHON:=python3}"
    recipe_choice DRY_RUN 0 "0 or 1" 0 1
    recipe_choice PRINT_CMD 0 "0 or 1" 0 1
    if [[ "$name" == cpu_tiny ]]; then
        [[ -z "${SCALE-}" ]] || recipe_die "SCALE='$SCALE' is for the GPU recipes (recipe/gsm8k_*.sh, recipe/dapo_*.sh); cpu_tiny.sh always runs in CPU mode: unset it"
        export VERL_PLATFORM=cpu
    else
        recipe_choice SCALE gpu "gpu (the recipe as written) or cpu (CPU mode, sizes shrunk)" gpu cpu
        recipe_choice MODEL tiny "tiny or smollm2 (SCALE=cpu's models; on a GPU cluster set MODEL_PATH)" tiny smollm2
        [[ "$SCALE" == cpu || "$MODEL" == tiny ]] \
            || recipe_die "MODEL=$MODEL is for SCALE=cpu: on a GPU cluster set MODEL_PATH (e.g. HuggingFaceTB/SmolLM2-135M-Instruct)"
        if [[ "$SCALE" == cpu ]]; then
            export VERL_PLATFORM=cpu
        fi
    fi
    local cmd=("$PYTHON" -m verl_ext.main_ppo --config-path "$here" --config-name "$name" "$@")
    if [[ "$DRY_RUN" == 1 ]]; then
        cmd+=(verl_ext.dry_run=true)
    fi
    if [[ "$PRINT_CMD" == 1 ]]; then
        printf '%q ' "${cmd[@]}"
        echo
        return 0
    fi
    export HYDRA_FULL_ERROR=1
    echo "+ $(printf '%q ' "${cmd[@]}")" >&2
    exec "${cmd[@]}"
}
