#!/usr/bin/env bash
# Submit a recipe of recipe/ as a Ray job.
#
# usage: scripts/cluster/submit.sh [--address URL] [--token-file FILE] [--no-wait] [--submission-id ID] [--dry-run]
#                                  RECIPE [HYDRA_OVERRIDES...]
#   RECIPE  a recipe name (dapo_clip_cov) or path (recipe/dapo_clip_cov.sh)
#   --submission-id ID  the job's id (default verl_ext_<recipe>_<UTC time>_<random>); waited for, a job that
#           fails has its log's last lines printed again once it has ended (the live stream can miss them)
# environment: RAY_ADDRESS (dashboard URL, default http://127.0.0.1:8265), RAY (ray executable),
#   RAY_AUTH_TOKEN_PATH (the cluster's token file, ~/.ray/auth_token; ray_head.sh made it): sent with the
#   submission, never put into the job's environment (the job runs inside the cluster, which has it),
#   and the launch variables, forwarded to the job when set (recipe/launch.sh turns them into Hydra overrides there):
#   every name of `python -m verl_ext.recipe.launch_env names` (MODEL_PATH, DATA_DIR, ..., SCALE, MODEL, LOSS,
#   DRY_RUN) but the launcher's PRINT_CMD (the job would print its command and train nothing) and PYTHON (this
#   machine's interpreter; the job runs the nodes' python3), plus WANDB_MODE HF_HOME HF_HUB_OFFLINE
#   HF_DATASETS_OFFLINE. They are checked here with the Hydra arguments before submitting (a bad one exits 2 naming
#   it). Steps, sizes, seeds and ratios are Hydra overrides: give them after RECIPE.
# The job's runtime environment holds only `working_dir` (a copy of recipe/: the scripts and their YAML
# compositions, and a generated job.sh) and
# `env_vars`: it installs nothing; verl, vLLM and verl_ext must already be installed on every node.
# Secrets (WANDB_API_KEY) are never forwarded: export them before `ray start` or run `wandb login` on the nodes.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=scripts/cluster/token.sh
source "$REPO_ROOT/scripts/cluster/token.sh"
LAUNCHER_ONLY=(PRINT_CMD PYTHON)  # launch variables that make no sense inside the job
OTHER_FORWARDED=(WANDB_MODE HF_HOME HF_HUB_OFFLINE HF_DATASETS_OFFLINE)  # read by the run's processes, not the recipe
TAIL_LINES=40  # lines of a failed job's whole log printed again once it has ended

usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "error: $*" >&2; exit 2; }
available_recipes() {
    local f names=()
    for f in "$REPO_ROOT"/recipe/*.sh; do
        [[ "$(basename "$f")" == launch.sh ]] || names+=("$(basename "$f" .sh)")
    done
    echo "${names[*]}"
}

address="${RAY_ADDRESS:-http://127.0.0.1:8265}"
no_wait=0
dry_run=0
submission_id=""
token_file="$(ray_token_default_path)"
while (( $# )); do
    case "$1" in
        --address) [[ $# -ge 2 ]] || die "--address needs a value"; address="$2"; shift 2 ;;
        --token-file) [[ $# -ge 2 ]] || die "--token-file needs a value"; token_file="$2"; shift 2 ;;
        --no-wait) no_wait=1; shift ;;
        --submission-id) [[ $# -ge 2 ]] || die "--submission-id needs a value"; submission_id="$2"; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option '$1' (options go before RECIPE; see --help)" ;;
        *) break ;;
    esac
done
(( $# >= 1 )) || die "RECIPE is missing; available: $(available_recipes)"
recipe="$(basename "${1%.sh}")"
shift
[[ "$recipe" != launch && -f "$REPO_ROOT/recipe/$recipe.sh" ]] \
    || die "unknown recipe '$recipe'; available: $(available_recipes)"
[[ "$address" =~ ^https?://[^/]+$ ]] \
    || die "Ray address '$address' (--address / RAY_ADDRESS) is invalid: expected the dashboard URL, e.g. http://10.0.0.1:8265"
PYTHON="${PYTHON:-python3}"
launch_names="$("$PYTHON" -m verl_ext.recipe.launch_env names)" \
    || die "'$PYTHON -m verl_ext.recipe.launch_env names' failed: install verl_ext here (or set PYTHON to an interpreter that has it)"
FORWARDED_VARS=()
for name in $launch_names; do
    [[ " ${LAUNCHER_ONLY[*]} " == *" $name "* ]] || FORWARDED_VARS+=("$name")
done
FORWARDED_VARS+=("${OTHER_FORWARDED[@]}")
# the job's launcher would reject a bad variable on the cluster: reject it here, before anything is submitted, with
# the job's arguments (a scale=cpu argument makes the launch CPU mode, which takes CPU mode's variables)
"$PYTHON" -m verl_ext.recipe.launch_env overrides "$recipe" "$@" >/dev/null || exit 2

stage="$(mktemp -d "${TMPDIR:-/tmp}/verl_ext_job.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/recipe"
cp "$REPO_ROOT"/recipe/*.sh "$REPO_ROOT"/recipe/*.yaml "$stage/recipe/"  # each script launches the YAML beside it
# job.sh carries the overrides: `ray job submit -- CMD` re-joins CMD with Windows-style quoting, which
# would mangle Hydra overrides holding quotes or brackets.
{
    echo '#!/usr/bin/env bash'
    echo 'set -euo pipefail'
    printf 'exec bash recipe/%q.sh' "$recipe"
    (( $# )) && printf ' %q' "$@"
    echo
} > "$stage/job.sh"

env_args=()
for name in "${FORWARDED_VARS[@]}"; do
    if [[ -n "${!name+x}" ]]; then env_args+=("$name=${!name}"); fi
done
runtime_env="$("$PYTHON" - "$stage" "${env_args[@]}" <<'PY'
import json, sys
stage, pairs = sys.argv[1], sys.argv[2:]
env = dict(pair.split("=", 1) for pair in pairs)
print(json.dumps({"working_dir": stage, "env_vars": env}))
PY
)"

# the job's id is chosen here, not by Ray, so that its full log can be read again once it has ended
[[ -n "$submission_id" ]] || submission_id="verl_ext_${recipe}_$(date -u +%Y%m%dT%H%M%S)_$RANDOM"
cmd=("${RAY:-ray}" job submit "--address=$address" "--runtime-env-json=$runtime_env" "--submission-id=$submission_id")
(( no_wait )) && cmd+=(--no-wait)
cmd+=(-- bash job.sh)

if (( dry_run )); then
    echo "runtime env: $runtime_env"
    echo "job.sh:"
    sed 's/^/  /' "$stage/job.sh"
    echo "would run: $(printf '%q ' "${cmd[@]}")"
    exit 0
fi
command -v "${cmd[0]}" >/dev/null || die "'${cmd[0]}' not found: install Ray (it comes with verl) or set RAY=/path/to/ray"
ray_token_check "$token_file"
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$token_file"
unset RAY_AUTH_TOKEN
echo "submitting recipe/$recipe.sh to $address as '$submission_id' ($(ray_token_fingerprint "$token_file"))" >&2
rc=0
"${cmd[@]}" || rc=$?
if (( rc != 0 && ! no_wait )); then
    # Ray's live stream of a job's log can miss its last lines (ray-project/ray#46413, #48701), where a failed run
    # says why it stopped (`verl_ext: stopped: ...`): read them again from the whole log, now that the job has ended
    echo "submit.sh: job '$submission_id' failed (exit $rc); the last $TAIL_LINES lines of its whole log" \
         "(ray job logs), which the live stream above can miss:" >&2
    "${cmd[0]}" job logs "--address=$address" "$submission_id" 2>&1 | tail -n "$TAIL_LINES" >&2 \
        || echo "submit.sh: could not read the job's log: ray job logs --address=$address $submission_id" >&2
fi
exit "$rc"
