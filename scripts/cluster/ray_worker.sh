#!/usr/bin/env bash
# Join this node to a running Ray head (started with scripts/cluster/ray_head.sh), with the cluster token.
#
# usage: scripts/cluster/ray_worker.sh HEAD_IP:PORT [--num-gpus N] [--node-ip IP] [--token-file FILE] [--block]
#                                      [--dry-run] [-- EXTRA_RAY_START_ARGS...]
# environment: RAY_HEAD_ADDRESS (instead of the HEAD_IP:PORT argument), GPUS_PER_NODE, NODE_IP,
#              RAY_AUTH_TOKEN_PATH (~/.ray/auth_token: the head's token file, copied here with mode 600), RAY
# --block keeps `ray start` in the foreground (containers, Slurm steps); --dry-run prints the command only.
# Export WANDB_API_KEY / HF_HOME etc. before joining: Ray workers inherit this environment.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/cluster/token.sh
source "$SCRIPT_DIR/token.sh"

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "error: $*" >&2; echo >&2; usage >&2; exit 2; }

address="${RAY_HEAD_ADDRESS:-}"
num_gpus="${GPUS_PER_NODE:-}"
node_ip="${NODE_IP:-}"
token_file="$(ray_token_default_path)"
block=0
dry_run=0
extra=()
while (( $# )); do
    case "$1" in
        --num-gpus) [[ $# -ge 2 ]] || die "--num-gpus needs a value"; num_gpus="$2"; shift 2 ;;
        --node-ip) [[ $# -ge 2 ]] || die "--node-ip needs a value"; node_ip="$2"; shift 2 ;;
        --token-file) [[ $# -ge 2 ]] || die "--token-file needs a value"; token_file="$2"; shift 2 ;;
        --block) block=1; shift ;;
        --dry-run) dry_run=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; extra=("$@"); break ;;
        -*) die "unknown option '$1'" ;;
        *) [[ -z "${positional:-}" ]] || die "unexpected argument '$1' (the head address is already '$positional')"
           positional="$1"; address="$1"; shift ;;
    esac
done

[[ -n "$address" ]] || die "the head address is missing: pass HEAD_IP:PORT (printed by ray_head.sh) or set RAY_HEAD_ADDRESS"
address="${address#ray://}"
if ! [[ "$address" =~ ^[A-Za-z0-9._-]+:([0-9]+)$ ]] || (( BASH_REMATCH[1] < 1 || BASH_REMATCH[1] > 65535 )); then
    die "head address '$address' is invalid: expected HOST:PORT with PORT in 1..65535, e.g. 10.0.0.1:6379"
fi
if [[ -n "$num_gpus" ]]; then
    [[ "$num_gpus" =~ ^[0-9]+$ ]] || die "GPU count '$num_gpus' (--num-gpus / GPUS_PER_NODE) is invalid: allowed an integer >= 0"
fi

cmd=("${RAY:-ray}" start "--address=$address")
[[ -n "$node_ip" ]] && cmd+=("--node-ip-address=$node_ip")
[[ -n "$num_gpus" ]] && cmd+=("--num-gpus=$num_gpus")
(( block )) && cmd+=(--block)
cmd+=("${extra[@]}")

if (( dry_run )); then
    echo "would run: RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$(printf '%q' "$token_file") $(printf '%q ' "${cmd[@]}")"
    echo "joins the Ray cluster at $address"
    exit 0
fi
command -v "${cmd[0]}" >/dev/null || die "'${cmd[0]}' not found: install Ray (it comes with verl) or set RAY=/path/to/ray"
ray_token_check "$token_file"
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$token_file"
unset RAY_AUTH_TOKEN
echo "joining the Ray cluster at $address ($(ray_token_fingerprint "$token_file"))"
if (( block )); then
    exec "${cmd[@]}"
fi
"${cmd[@]}"
echo "joined $address; on the head node, 'ray status' lists the nodes and" \
     "'python scripts/cluster/check_nodes.py --address $address --token-file $token_file' checks that each imports verl_ext"
