#!/usr/bin/env bash
# Start the Ray head on this node (node 0) with token authentication, and print how workers and jobs reach it.
#
# usage: scripts/cluster/ray_head.sh [--port N] [--dashboard-port N] [--node-ip IP] [--dashboard-host HOST]
#                                    [--num-gpus N] [--token-file FILE] [--block] [--dry-run] [-- EXTRA_RAY_START_ARGS...]
# environment: RAY_PORT (6379), RAY_DASHBOARD_PORT (8265), NODE_IP (first address of `hostname -I`),
#              GPUS_PER_NODE (Ray's own detection when unset), RAY_AUTH_TOKEN_PATH (~/.ray/auth_token), RAY (`ray`)
# Security: every Ray client, worker node and job submission must present the cluster token (Ray's token
# authentication, RAY_AUTH_MODE=token). The token lives in --token-file, created (readable by you only) when
# missing; it is never printed. The dashboard and its Jobs API listen on the node address only (--node-ip);
# --dashboard-host 0.0.0.0 opts in to every interface. From your laptop use an SSH tunnel (printed below).
# --block keeps `ray start` in the foreground (containers, Slurm steps); --dry-run prints the command only.
# Export WANDB_API_KEY / HF_HOME etc. before starting Ray: Ray workers inherit this environment.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/cluster/token.sh
source "$SCRIPT_DIR/token.sh"

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "error: $*" >&2; echo >&2; usage >&2; exit 2; }
is_port() { [[ "$1" =~ ^[0-9]+$ ]] && (( $1 >= 1 && $1 <= 65535 )); }

port="${RAY_PORT:-6379}"
dashboard_port="${RAY_DASHBOARD_PORT:-8265}"
node_ip="${NODE_IP:-}"
dashboard_host=""
num_gpus="${GPUS_PER_NODE:-}"
token_file="$(ray_token_default_path)"
block=0
dry_run=0
extra=()
while (( $# )); do
    case "$1" in
        --port) [[ $# -ge 2 ]] || die "--port needs a value"; port="$2"; shift 2 ;;
        --dashboard-port) [[ $# -ge 2 ]] || die "--dashboard-port needs a value"; dashboard_port="$2"; shift 2 ;;
        --node-ip) [[ $# -ge 2 ]] || die "--node-ip needs a value"; node_ip="$2"; shift 2 ;;
        --dashboard-host) [[ $# -ge 2 ]] || die "--dashboard-host needs a value"; dashboard_host="$2"; shift 2 ;;
        --num-gpus) [[ $# -ge 2 ]] || die "--num-gpus needs a value"; num_gpus="$2"; shift 2 ;;
        --token-file) [[ $# -ge 2 ]] || die "--token-file needs a value"; token_file="$2"; shift 2 ;;
        --block) block=1; shift ;;
        --dry-run) dry_run=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; extra=("$@"); break ;;
        *) die "unknown argument '$1'" ;;
    esac
done

is_port "$port" || die "port '$port' (--port / RAY_PORT) is invalid: allowed an integer in 1..65535"
is_port "$dashboard_port" || die "dashboard port '$dashboard_port' (--dashboard-port / RAY_DASHBOARD_PORT) is invalid: allowed an integer in 1..65535"
[[ "$port" != "$dashboard_port" ]] || die "--port and --dashboard-port must differ (both $port)"
if [[ -n "$num_gpus" ]]; then
    [[ "$num_gpus" =~ ^[0-9]+$ ]] || die "GPU count '$num_gpus' (--num-gpus / GPUS_PER_NODE) is invalid: allowed an integer >= 0"
fi
if [[ -z "$node_ip" ]]; then
    node_ip="$(hostname -I 2>/dev/null | awk '{print $1}')" || true
    [[ -n "$node_ip" ]] || node_ip="$(hostname -i 2>/dev/null | awk '{print $1}')" || true
    [[ -n "$node_ip" ]] || die "could not find this node's IP address: pass --node-ip IP (or NODE_IP)"
fi
: "${dashboard_host:=$node_ip}"

cmd=("${RAY:-ray}" start --head "--node-ip-address=$node_ip" "--port=$port"
     "--dashboard-host=$dashboard_host" "--dashboard-port=$dashboard_port")
[[ -n "$num_gpus" ]] && cmd+=("--num-gpus=$num_gpus")
(( block )) && cmd+=(--block)
cmd+=("${extra[@]}")

print_next_steps() {
    cat <<MSG
Ray head address: $node_ip:$port (token authentication on; token file $token_file, $(ray_token_fingerprint "$token_file"))
  copy the token file to every node (same path, mode 600), or put it on a shared filesystem; then
  join every worker node:  bash scripts/cluster/ray_worker.sh $node_ip:$port --token-file $token_file
  check the nodes:         python scripts/cluster/check_nodes.py --address $node_ip:$port --token-file $token_file --expect-nodes NNODES
  submit a recipe:         RAY_ADDRESS=http://$dashboard_host:$dashboard_port bash scripts/cluster/submit.sh --token-file $token_file RECIPE
  dashboard / Jobs API:    http://$dashboard_host:$dashboard_port (needs the token); from your laptop:
                           ssh -N -L $dashboard_port:$dashboard_host:$dashboard_port USER@$node_ip  ->  http://127.0.0.1:$dashboard_port
MSG
}

if (( dry_run )); then
    echo "would run: RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$(printf '%q' "$token_file") $(printf '%q ' "${cmd[@]}")"
    print_next_steps
    exit 0
fi
command -v "${cmd[0]}" >/dev/null || die "'${cmd[0]}' not found: install Ray (it comes with verl) or set RAY=/path/to/ray"
ray_token_create_or_check "$token_file"
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$token_file"
unset RAY_AUTH_TOKEN  # the file is the one source of the token; never an environment copy
if (( block )); then
    print_next_steps   # printed first: --block does not return
    exec "${cmd[@]}"
fi
"${cmd[@]}"
print_next_steps
