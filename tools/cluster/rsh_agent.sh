#!/bin/sh
# Open MPI's rsh agent for the emulated cluster (emulated_cluster.sh): called as `AGENT HOST
# CMD...`, where ssh would log in to HOST, it runs CMD in HOST's network namespace under a
# fresh UTS namespace named HOST, so orted and its ranks see HOST as their hostname.
host=$1; shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$1"; shift; exec sh -c "$*"' agent "$host" "$@"
