#!/bin/sh
# Open MPI's rsh agent for the emulated cluster (emulated_cluster.sh): called as `AGENT HOST
# CMD...`, where ssh would log in to HOST, it runs CMD in HOST's network namespace under a
# fresh UTS namespace named HOST, so orted and its ranks see HOST as their hostname, and on
# HOST's cores ($GPUMIX_CLUSTER_CPUS: lines "HOST CORES", as taskset -c takes them).
host=$1; shift
cpus=$(awk -v h="$host" '$1 == h {print $2}' "${GPUMIX_CLUSTER_CPUS:-/dev/null}" 2>/dev/null)
exec ip netns exec "$host" ${cpus:+taskset -c "$cpus"} unshare --uts sh -c 'hostname "$1"; shift; exec sh -c "$*"' agent "$host" "$@"
