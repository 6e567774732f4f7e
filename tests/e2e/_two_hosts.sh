# Two simulated hosts for tests/e2e/test_cluster_sim.py: sourced by its scenario, which runs inside a network and PID
# namespace of its own (`unshare --net --pid --fork --mount-proc`).
#
# two_hosts_up creates two "hosts", each a network and a mount namespace held by a `sleep infinity` of its own, joined
# by a veth pair: host A has eth0 = $HOST_A_IP/24, host B has eth0 = $HOST_B_IP/24, each its own loopback; no other
# interface and no route out. The hosts share the file system (but /tmp and /dev/shm once host_own_dirs has run) and
# the scenario's PID namespace.
# host_own_dirs BASE SHARED...: each host gets a /tmp (BASE/A, BASE/B seen from outside) and a /dev/shm (a tmpfs, gone
# with the host) of its own, as two machines have; the SHARED folders under /tmp stay the scenario's own (a shared
# file system).
# on_a CMD... / on_b CMD... run CMD in host A / B, in the current folder. host_of PID prints A, B or "-".
# Needs: ip, nsenter, unshare (util-linux).

HOST_A_IP="${HOST_A_IP:-10.77.0.1}"
HOST_B_IP="${HOST_B_IP:-10.77.0.2}"
HOST_A_PID=""
HOST_B_PID=""

_new_host() {  # prints the pid of a sleeper holding a fresh network namespace
    unshare --net --mount --propagation private sleep infinity >/dev/null 2>&1 &
    local pid=$! own tries=0
    own="$(readlink /proc/self/ns/net)"
    while [[ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" == "$own" || ! -e "/proc/$pid/ns/net" ]]; do
        (( ++tries < 200 )) || { echo "two_hosts: namespace of pid $pid never appeared" >&2; return 1; }
        sleep 0.05
    done
    echo "$pid"
}

two_hosts_up() {
    HOST_A_PID="$(_new_host)" || return 1
    HOST_B_PID="$(_new_host)" || return 1
    ip link add vxa type veth peer name vxb || return 1
    ip link set vxa netns "/proc/$HOST_A_PID/ns/net" || return 1
    ip link set vxb netns "/proc/$HOST_B_PID/ns/net" || return 1
    _host_net "$HOST_A_PID" vxa "$HOST_A_IP" || return 1
    _host_net "$HOST_B_PID" vxb "$HOST_B_IP" || return 1
}

_host_net() {  # pid, veth end, address: the end renamed eth0 (the same name on both hosts, as on a cluster)
    nsenter --net="/proc/$1/ns/net" sh -ec "
        ip link set lo up
        ip link set $2 name eth0
        ip addr add $3/24 dev eth0
        ip link set eth0 up"
}

host_own_dirs() {  # BASE SHARED...: each host's /tmp is BASE/A or BASE/B, the SHARED folders under /tmp bound back
    local host pid
    for host in A B; do
        pid="HOST_${host}_PID"
        mkdir -p "$1/$host" || return 1
        # BASE/<host>/.machine keeps the machine's /tmp in reach while the host's /tmp covers it
        nsenter --mount="/proc/${!pid}/ns/mnt" sh -ec '
            mkdir -p "$1/.machine"
            mount --bind /tmp "$1/.machine"
            mount --rbind "$1" /tmp
            mount -t tmpfs -o mode=1777 shm /dev/shm
            shift
            for path in "$@"; do
                case "$path" in /tmp/*) mkdir -p "$path"; mount --bind "/tmp/.machine${path#/tmp}" "$path" ;; esac
            done' - "$1/$host" "${@:2}" || return 1
    done
}

on_a() { nsenter --net="/proc/$HOST_A_PID/ns/net" --mount="/proc/$HOST_A_PID/ns/mnt" --wd="$PWD" "$@"; }
on_b() { nsenter --net="/proc/$HOST_B_PID/ns/net" --mount="/proc/$HOST_B_PID/ns/mnt" --wd="$PWD" "$@"; }

host_of() {  # A, B or - for the process PID
    local ns
    ns="$(readlink "/proc/$1/ns/net" 2>/dev/null)" || { echo -; return; }
    if [[ "$ns" == "$(readlink "/proc/$HOST_A_PID/ns/net")" ]]; then echo A
    elif [[ "$ns" == "$(readlink "/proc/$HOST_B_PID/ns/net")" ]]; then echo B
    else echo -; fi
}
