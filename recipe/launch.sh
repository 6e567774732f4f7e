# shellcheck shell=bash
# Shared part of the recipe scripts in recipe/: sourced, never run directly. A recipe script is one line,
# `recipe_launch <name> "$@"`: it launches `python -m verl_ext.main_ppo` with recipe/<name>.yaml, the Hydra
# composition that holds every value of the recipe. The YAML never reads the environment: the cluster's variables
# below become Hydra overrides, printed on the command line before your arguments (your overrides come last and win).
# The list, with the key each one sets: `python -m verl_ext.recipe.launch_env table` (docs/recipes.md).
#   MODEL_PATH DATA_DIR TRAIN_FILE VAL_FILE CKPTS_DIR WORK_DIR CKPT NNODES GPUS_PER_NODE GEN_TP SP_SIZE OFFLOAD
#   PROJECT_NAME EXP_NAME LOGGERS VERL_EXT_CPU_PRECISION
# Shorthands (each printed as the overrides it stands for):
#   SCALE=cpu      scale=cpu: CPU mode on one machine, sizes shrunk (configs/scale/cpu.yaml); a scale= argument
#                  that disagrees with it is an error
#   MODEL=<m>      cpu_model=<m>, CPU mode's model: toy, tiny or smollm2 (configs/cpu_model/)
#   LOSS=<loss>    recipe/cpu_tiny.sh's loss and its paper's settings (its two config groups)
# The launcher's own switches:
#   PYTHON     the interpreter (python3)
#   DRY_RUN=1  compose and validate (verl_ext.dry_run=true): no Ray, no GPU
#   PRINT_CMD=1  print the exact command, with every override the environment produced, and exit

recipe_die() {
    echo "error: $*" >&2
    exit 2
}

# recipe_switch NAME: NAME (default 0) must be 0 or 1.
recipe_switch() {
    local value="${!1:-0}"
    [[ "$value" == 0 || "$value" == 1 ]] || recipe_die "$1='$value' is invalid: allowed 0 or 1"
}

# recipe_launch NAME "$@": run (or dry-run, or print) python -m verl_ext.main_ppo with recipe/NAME.yaml + overrides.
recipe_launch() {
    local name="$1" here item
    shift
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    : "${PYTHON:=python3}"
    recipe_switch DRY_RUN
    recipe_switch PRINT_CMD
    # one process of launch_env (a bad variable: its error is printed, exit 2): whether the launch is CPU mode
    # (recipe/cpu_tiny.sh, SCALE=cpu or a scale=cpu argument), then the environment's overrides, NUL-terminated
    local env_overrides=() listed platform=""
    listed="$(mktemp)"
    if ! "$PYTHON" -m verl_ext.recipe.launch_env launch "$name" "$@" >"$listed"; then
        rm -f "$listed"
        exit 2
    fi
    while IFS= read -r -d '' item; do
        if [[ -z "$platform" ]]; then
            platform="$item"
        else
            env_overrides+=("$item")
        fi
    done <"$listed"
    rm -f "$listed"
    # CPU mode: every process of the run (Ray workers, vLLM) inherits VERL_PLATFORM=cpu; the entry point checks it
    # agrees with the composition
    if [[ "$platform" == cpu ]]; then
        export VERL_PLATFORM=cpu
    fi
    local cmd=("$PYTHON" -m verl_ext.main_ppo --config-path "$here" --config-name "$name" "${env_overrides[@]}" "$@")
    if [[ "${DRY_RUN:-0}" == 1 ]]; then
        cmd+=(verl_ext.dry_run=true)
    fi
    if [[ "${PRINT_CMD:-0}" == 1 ]]; then
        printf '%q ' "${cmd[@]}"
        echo
        return 0
    fi
    export HYDRA_FULL_ERROR=1
    echo "+ $(printf '%q ' "${cmd[@]}")" >&2
    exec "${cmd[@]}"
}
