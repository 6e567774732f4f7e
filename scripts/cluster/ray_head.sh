#!/usr/bin/env bash
# Start the Ray head on this node (node 0) and print the address the workers and jobs use.
#
# usage: scripts/cluster/ray_head.sh [--port N] [--dashboard-port N] [--node-ip IP] [--num-gpus N]
#                                    [--block] [--dry-run] [-- EXTRA_RAY_START_ARGS...]
# environment: RAY_PORT (6379), RAY_DASHBOARD_PORT (8265), NODE_IP (first address of `hostname -I`),
#              GPUS_PER_NODE (Ray's own detection when unset), RAY (ray executable, `ray`)
# --block keeps `ray start` in the foreground (containers, Slurm steps); --dry-run prints the command only.
# Export WANDB_API_KEY / HF_HOME etc. before starting Ray: Ray workers inherit this environment.
set -euo pipefail

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "error: $*" >&2; echo >&2; usage >&2; exit 2; }
is_port() { [[ "$1" =~ ^[0-9]+$ ]] && (( $1 >= 1 && $1 <= 65535 )); }

port="${RAY_PORT:-6379}"
dashboard_port="${RAY_DASHBOARD_PORT:-8265}"
node_ip="${NODE_IP:-}"
num_gpus="${GPUS_PER_NODE:-}"
block=0
dry_run=0
extra=()
while (( $# )); do
    case "$1" in
        --port) [[ $# -ge 2 ]] || die "--port needs a value"; port="$2"; shift 2 ;;
        --dashboard-port) [[ $# -ge 2 ]] || die "--dashboard-port needs a value"; dashboard_port="$2"; shift 2 ;;
        --node-ip) [[ $# -ge 2 ]] || die "--node-ip needs a value"; node_ip="$2"; shift 2 ;;
        --num-gpus) [[ $# -ge 2 ]] || die "--num-gpus needs a value"; num_gpus="$2"; shift 2 ;;
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

cmd=("${RAY:-ray}" start --head "--node-ip-address=$node_ip" "--port=$port"
     --dashboard-host=0.0.0.0 "--dashboard-port=$dashboard_port")
[[ -n "$num_gpus" ]] && cmd+=("--num-gpus=$num_gpus")
(( block )) && cmd+=(--block)
cmd+=("${extra[@]}")

print_next_steps() {
    cat <<MSG
Ray head address: $node_ip:$port
  join every worker node:  bash scripts/cluster/ray_worker.sh $node_ip:$port
  check the nodes:         python scripts/cluster/check_nodes.py --address $node_ip:$port --expect-nodes NNODES
  submit a recipe:         RAY_ADDRESS=http://$node_ip:$dashboard_port bash scripts/cluster/submit.sh RECIPE
  dashboard:               http://$node_ip:$dashboard_port
MSG
}

if (( dry_run )); then
    echo "would run: $(printf '%q ' "${cmd[@]}")"
    print_next_steps
    exit 0
fi
command -v "${cmd[0]}" >/dev/null || die "'${cmd[0]}' not found: install Ray (it comes with verl) or set RAY=/path/to/ray"
if (( block )); then
    print_next_steps   # printed first: --block does not return
    exec "${cmd[@]}"
fi
"${cmd[@]}"
print_next_steps
