#!/usr/bin/env bash
# An emulated cluster on this machine, for real Open MPI runs across "nodes" (issue 23).
#
#   emulated_cluster.sh up [--nodes K] [--slots S] [--rate RATE] [--delay MS] [--slurm]
#   emulated_cluster.sh run -- CMD...      CMD on the login node, with the MPI settings below
#   emulated_cluster.sh shape RATE|none    re-shape every node link of the cluster that is up
#   emulated_cluster.sh kill NODE          SIGKILL every process of NODE (a machine lost)
#   emulated_cluster.sh status | down
#   emulated_cluster.sh with [up options] -- CMD...   up, run CMD, down (also on failure or ^C)
#
# What it builds, all of it torn down by `down`:
#   - a switch: a network namespace holding one bridge, so nothing of the root namespace
#     changes (no interface, address or route is added there);
#   - K nodes and one login node ("head", where mpirun runs, as on a real cluster's login
#     node), each a network namespace joined to the bridge by a veth pair, with the one
#     address 127.200.0.(10+i)/24 (head: 127.200.0.1) and route_localnet=1: addresses from
#     the loopback range only, so no packet names another network's address; the loopback
#     device keeps 127.0.0.1/32 only (its usual /8 would swallow 127.200.0.0/24);
#   - its own hostname for every node: the rsh agent (rsh_agent.sh) starts orted in a UTS
#     namespace named after the node, so MPI_Get_processor_name tells the nodes apart;
#   - tbf shaping at RATE on every node link, both directions (node egress and the switch's
#     port egress); latency through netem where the kernel has it (--delay), else said;
#   - a hostfile (S slots per node) and /etc/netns/NODE/hosts, which `ip netns exec`
#     mounts over /etc/hosts inside that namespace (the cluster's name service);
#   - cores of its own for every node, as a real node has: the machine's cores split evenly
#     among the nodes (all of them shared when there are fewer cores than nodes), the rsh
#     agent confining each node's orted and ranks to its part (taskset), and Open MPI's
#     binding off (each node's orted, seeing the whole machine, bound every node's first
#     rank to core 0: two nodes' ranks computed on one core while the other sat idle).
# --slurm: Slurm too (Debian's slurm-wlm): slurmctld on the login node, one slurmd per node
# (S CPUs each, auth/none, no cgroups, each with a /tmp of its own as a real node has), so
# that `srun -N K --ntasks-per-node S --mpi=pmix CMD` runs CMD across the nodes; the run
# folder must then be on the "shared file system": anywhere but /tmp.
# Open MPI: rsh launch through rsh_agent.sh, TCP only between nodes and shared memory
# (vader) within one: btl tcp,self,vader with btl_tcp_if_include and oob_tcp_if_include
# 127.200.0.0/24, so no byte between nodes goes through anything but the shaped veth.
# Needs root (network namespaces): says so and exits 77, the test harness's "skip".
# GPUMIX_CLUSTER_PREFIX (default gpumix) names everything, so two clusters can coexist.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=${GPUMIX_CLUSTER_PREFIX:-gpumix}
state=/run/$prefix-cluster
switch=$prefix-switch
head=$prefix-head
subnet=127.200.0.0/24
gso_max=8192  # bytes: the largest GSO packet of a shaped veth (see shape_dev)

die() { echo "emulated_cluster: $*" >&2; exit 1; }
skip() { echo "emulated_cluster: skipped: $*" >&2; exit 77; }
note() { echo "emulated_cluster: $*" >&2; }

need_root() {
  [ "$(id -u)" = 0 ] || skip "network namespaces need root (uid is $(id -u)); run as root, e.g. sudo $0 $*"
  local cmd
  for cmd in ip tc unshare mpirun; do
    command -v "$cmd" >/dev/null || skip "'$cmd' is not installed (Debian: iproute2, util-linux, openmpi-bin)"
  done
  # Some containers refuse namespaces even to root: try one before building anything.
  if ! unshare --net --uts true 2>/dev/null; then
    skip "this machine refuses new network/UTS namespaces even to root (a container without CAP_SYS_ADMIN?)"
  fi
}

# bits per second of a tc rate (100mbit, 1gbit, 500kbit, 12000000bit)
rate_bits() {
  local r=${1,,} n
  case $r in
    *gbit) n=${r%gbit}; echo $((n * 1000000000)) ;;
    *mbit) n=${r%mbit}; echo $((n * 1000000)) ;;
    *kbit) n=${r%kbit}; echo $((n * 1000)) ;;
    *bit)  n=${r%bit}; echo $((n)) ;;
    *) die "rate '$1' is not a tc rate; write it like 100mbit, 1gbit or 500kbit" ;;
  esac
}

nodes_up() { cat "$state/nodes"; }

# The cores this script may use (its affinity, e.g. "0-3,8" expanded), space-separated.
machine_cores() {
  local list part
  list=$(awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status)
  for part in ${list//,/ }; do seq "${part%-*}" "${part#*-}"; done | tr '\n' ' '  # "5" is 5-5
}

# tbf on dev DEV in namespace NS at RATE; netem delay below it when asked and available.
shape_dev() {
  local ns=$1 dev=$2 rate=$3 delay=$4
  ip -n "$ns" link set "$dev" up
  tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
  [ "$rate" = none ] && [ -z "$delay" ] && return 0
  if [ "$rate" != none ]; then
    # burst: what passes at the veth's own speed after the link was idle. A real link has
    # none, and with 128 KiB (what one 64 KiB GSO packet of a veth needs: tbf drops a packet
    # larger than its bucket) a 200 KB message took 0.3-1 ms at 1 Gbit/s instead of 1.6, and
    # 6.6 ms at 100 Mbit/s after a pause against 16.6 back to back: the collectives' times
    # depended on the gaps before them. So the veth's GSO packets are capped at 8 KiB
    # (gso_max_size, both ends) and the bucket holds 0.25 ms at the rate, 16 KiB at least.
    local bits burst
    bits=$(rate_bits "$rate")
    ip -n "$ns" link set dev "$dev" gso_max_size "$gso_max"
    burst=$((bits / 8 / 4000)); [ "$burst" -ge 16384 ] || burst=16384
    tc -n "$ns" qdisc add dev "$dev" root handle 1: tbf rate "$rate" burst "$burst" latency 100ms
    if [ -n "$delay" ]; then
      tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: netem delay "${delay}ms"
    fi
  else
    tc -n "$ns" qdisc add dev "$dev" root handle 10: netem delay "${delay}ms"
  fi
}

netem_available() {
  local ok=1
  tc -n "$switch" qdisc add dev lo root netem delay 1ms 2>/dev/null || ok=0
  tc -n "$switch" qdisc del dev lo root 2>/dev/null || true
  [ $ok = 1 ]
}

# Shape every node link (both ends) at RATE; writes what was shaped to $state/shaped.
shape_all() {
  local rate=$1 delay=$2 node
  if [ -n "$delay" ] && ! netem_available; then
    note "netem is not available in this kernel (tc: 'Specified qdisc kind is unknown'): latency --delay ${delay}ms NOT shaped, bandwidth only"
    delay=""
  fi
  for node in $(nodes_up); do
    shape_dev "$node" eth0 "$rate" "$delay"
    shape_dev "$switch" "p-${node##*-}" "$rate" "$delay"
  done
  local what="bandwidth $rate (tbf, both directions of every node link)"
  [ "$rate" = none ] && what="bandwidth unshaped"
  if [ -n "$delay" ]; then what="$what, latency +${delay}ms each way (netem)"; else what="$what, latency not shaped"; fi
  netem_available || what="$what; netem unavailable in this kernel, so no latency or loss shaping"
  echo "$what" > "$state/shaped"
  note "links: $what"
}

# One namespace on the bridge: NAME ADDRESS
add_host() {
  local ns=$1 addr=$2 port=p-${1##*-}
  ip netns add "$ns"
  echo "$ns" >> "$state/namespaces"
  ip -n "$ns" link set lo up
  # Keep 127.0.0.1 but not the /8 route that would make every 127.200.0.x "local".
  ip -n "$ns" addr del 127.0.0.1/8 dev lo
  ip -n "$ns" addr add 127.0.0.1/32 dev lo
  ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.route_localnet=1 net.ipv4.conf.default.route_localnet=1
  ip -n "$switch" link add "$port" type veth peer name eth0 netns "$ns"
  ip -n "$switch" link set "$port" master br0 up
  ip netns exec "$ns" sysctl -qw net.ipv4.conf.eth0.route_localnet=1
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  mkdir -p "/etc/netns/$ns"
  echo "/etc/netns/$ns" >> "$state/etc"
}

# Every node answers: one orted per node, launched through the agent, reports its hostname.
# Retried: orted has been seen to crash at start-up on a rerun (stale session files).
check_launch() {
  local k want got try
  k=$(wc -l < "$state/nodes")
  want=$(sort "$state/nodes" | tr '\n' ' ')
  for try in 1 2 3; do
    got=$(in_head timeout 60 mpirun --hostfile "$state/hostfile" --map-by ppr:1:node -np "$k" hostname 2>"$state/launch.err" | sort | tr '\n' ' ') || true
    if [ "$got" = "$want" ]; then
      note "mpirun reaches every node: $want(try $try)"
      return 0
    fi
    note "launch check, try $try: expected hostnames [$want] got [$got]; $(tail -3 "$state/launch.err" | tr '\n' ' ')"
    clean_session_files
    sleep 1
  done
  die "mpirun could not start on every node after 3 tries (last error in $state/launch.err kept until down): $(tail -5 "$state/launch.err")"
}

clean_session_files() {
  local h
  for h in $(cat "$state/nodes" 2>/dev/null) "$head"; do
    rm -rf /tmp/ompi."$h".* /dev/shm/vader_segment."$h".* 2>/dev/null || true
  done
}

mpi_env() {
  export OMPI_MCA_plm_rsh_agent="$here/rsh_agent.sh"
  export OMPI_MCA_plm_rsh_no_tree_spawn=1
  export OMPI_MCA_pml=ob1
  export OMPI_MCA_btl=tcp,self,vader
  export OMPI_MCA_btl_tcp_if_include=$subnet
  export OMPI_MCA_oob_tcp_if_include=$subnet
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # Each node's processes stay on the node's cores (the rsh agent's taskset, from this file);
  # Open MPI would bind them as if every node had the whole machine.
  export GPUMIX_CLUSTER_CPUS="$state/cpus"
  export OMPI_MCA_hwloc_base_binding_policy=none
  # The nodes share this machine's cores. With more slots than cores, a rank spinning on its
  # TCP wait steals the core of the rank that would send (seen: a 70 ms step took 400 ms);
  # Open MPI yields when it knows a host is oversubscribed, but each node here looks whole.
  local slots
  slots=$(awk -F'slots=' '{s += $2} END {print s + 0}' "$state/hostfile")
  if [ "$slots" -gt "$(nproc)" ]; then export OMPI_MCA_mpi_yield_when_idle=1; fi
  export GPUMIX_CLUSTER="$here/emulated_cluster.sh"
  export GPUMIX_CLUSTER_HOSTFILE="$state/hostfile"
  GPUMIX_CLUSTER_NODES=$(tr '\n' ' ' < "$state/nodes"); export GPUMIX_CLUSTER_NODES
  if [ -f "$state/slurm/slurm.conf" ]; then export SLURM_CONF="$state/slurm/slurm.conf"; fi
}

node_cpus() { awk -v h="$1" '$1 == h {print $2}' "$state/cpus"; }  # NODE -> its cores, as taskset -c takes them

# Slurm on the cluster: a controller on the login node, a slurmd per node. slurmd runs under
# nsenter (the network namespace alone: `ip netns exec` would mount a /sys without the
# cgroup hierarchy, and slurmd refuses to start without it) in a mount namespace with a /tmp
# of its own (the PMIx plugin's per-job folders in /tmp would collide between the nodes) and
# the cluster's /etc/hosts (what `ip netns exec` mounts; GPUMix's peer watch resolves names).
slurm_up() {
  local slots=$1 d=$state/slurm node
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null ||
    die "--slurm needs Slurm's daemons: apt-get install slurm-wlm"
  mkdir -p "$d/spool/ctld" "$d/log"
  {
    echo "ClusterName=$prefix"
    echo "SlurmctldHost=$head(127.200.0.1)"
    echo "AuthType=auth/none"; echo "CredType=cred/none"  # one machine, one root: nothing to authenticate
    echo "SlurmUser=root"; echo "SlurmdUser=root"
    echo "StateSaveLocation=$d/spool/ctld"; echo "SlurmdSpoolDir=$d/spool/%n"
    echo "SlurmctldPidFile=$d/slurmctld.pid"; echo "SlurmdPidFile=$d/slurmd-%n.pid"
    echo "SlurmctldLogFile=$d/log/slurmctld.log"; echo "SlurmdLogFile=$d/log/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"; echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"; echo "MpiDefault=pmix"; echo "ReturnToService=2"
    echo "SelectType=select/cons_tres"; echo "SelectTypeParameters=CR_Core"
    local i=0
    for node in $(nodes_up); do
      echo "NodeName=$node NodeAddr=127.200.0.$((10 + i)) CPUs=$slots State=UNKNOWN"; i=$((i + 1))
    done
    echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } > "$d/slurm.conf"
  ip netns exec "$head" unshare --uts sh -c 'hostname "$1"; slurmctld -f "$2"' sh "$head" "$d/slurm.conf"
  for node in $(nodes_up); do
    mkdir -p "$d/spool/$node" "$d/tmp-$node"
    nsenter --net="/run/netns/$node" taskset -c "$(node_cpus "$node")" unshare --uts --mount --propagation private \
      sh -c 'hostname "$1"; mount --bind "$2" /tmp; mount --bind "/etc/netns/$1/hosts" /etc/hosts; slurmd -f "$3" -N "$1"' \
      sh "$node" "$d/tmp-$node" "$d/slurm.conf"
  done
  local k try idle
  k=$(wc -l < "$state/nodes")
  for try in $(seq 1 30); do
    idle=$(ip netns exec "$head" env SLURM_CONF="$d/slurm.conf" sinfo -h -t idle -o %D 2>/dev/null | head -1)
    [ "${idle:-0}" = "$k" ] && { note "slurm: controller on $head, $k slurmd idle (srun --mpi=pmix)"; return 0; }
    sleep 1
  done
  die "slurm: only ${idle:-0} of $k slurmd came up idle in 30 s; see $d/log/"
}

# CMD on the login node (its namespace and hostname) with the MPI settings.
in_head() {
  mpi_env
  ip netns exec "$head" unshare --uts sh -c 'hostname "$1"; shift; exec "$@"' sh "$head" "$@"
}

cmd_up() {
  local k=2 slots=2 rate=none delay="" slurm=0
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) k=$2; shift 2 ;;
      --slots) slots=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;;
      --delay) delay=$2; shift 2 ;;
      --slurm) slurm=1; shift ;;
      *) die "unknown option '$1' for up; the options are --nodes K --slots S --rate RATE --delay MS --slurm" ;;
    esac
  done
  [[ $k =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le 200 ] || die "--nodes $k must be a number from 1 to 200 (addresses 127.200.0.10-209)"
  [[ $slots =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "--slots $slots must be a positive number"
  [ "$rate" = none ] || rate_bits "$rate" >/dev/null
  need_root up
  if [ -d "$state" ]; then
    local owner; owner=$(cat "$state/owner" 2>/dev/null || echo 0)
    if [ "$owner" != 0 ] && kill -0 "$owner" 2>/dev/null; then
      die "a cluster '$prefix' is up already (made by process $owner); run '$0 down' first, or set GPUMIX_CLUSTER_PREFIX to make another"
    fi
    note "removing the remains of an earlier cluster '$prefix' (its maker, process $owner, is gone)"
    cmd_down
  fi
  mkdir -p "$state"
  echo "${GPUMIX_CLUSTER_OWNER:-0}" > "$state/owner"
  : > "$state/namespaces"; : > "$state/etc"; : > "$state/nodes"
  trap 'note "up failed; tearing down what was made"; cmd_down' ERR
  ip netns add "$switch"
  echo "$switch" >> "$state/namespaces"
  ip -n "$switch" link set lo up
  ip -n "$switch" link add br0 type bridge
  ip -n "$switch" link set br0 up
  add_host "$head" 127.200.0.1
  local i hosts="127.0.0.1 localhost"$'\n'"127.200.0.1 $head"$'\n'
  local cores; read -r -a cores <<< "$(machine_cores)"
  local ncores=${#cores[@]}
  [ "$ncores" -ge "$k" ] || note "$ncores cores for $k nodes: every node shares all of them"
  : > "$state/hostfile"; : > "$state/cpus"
  for ((i = 0; i < k; i++)); do
    add_host "$prefix-node$i" "127.200.0.$((10 + i))"
    echo "$prefix-node$i" >> "$state/nodes"
    echo "$prefix-node$i slots=$slots" >> "$state/hostfile"
    local own=("${cores[@]}")
    [ "$ncores" -lt "$k" ] || own=("${cores[@]:i * ncores / k:(i + 1) * ncores / k - i * ncores / k}")
    echo "$prefix-node$i $(IFS=,; echo "${own[*]}")" >> "$state/cpus"
    hosts+="127.200.0.$((10 + i)) $prefix-node$i"$'\n'
  done
  local ns
  for ns in $(cat "$state/namespaces"); do
    [ "$ns" = "$switch" ] || printf '%s' "$hosts" > "/etc/netns/$ns/hosts"
  done
  shape_all "$rate" "$delay"
  clean_session_files
  check_launch
  [ $slurm = 0 ] || slurm_up "$slots"
  trap - ERR
  note "up: $k nodes x $slots slots ($(tr '\n' ' ' < "$state/nodes")), hostfile $state/hostfile"
}

cmd_down() {
  [ -d "$state" ] || return 0
  local ns pid
  # Processes first (ranks, orted, mpirun of the login node), then the namespaces.
  for ns in $(tac "$state/namespaces" 2>/dev/null); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  for ns in $(tac "$state/namespaces" 2>/dev/null); do
    ip netns del "$ns" 2>/dev/null || true
  done
  clean_session_files
  for ns in $(cat "$state/etc" 2>/dev/null); do
    case $ns in /etc/netns/"$prefix"-*) rm -rf "$ns" ;; esac
  done
  rmdir /etc/netns 2>/dev/null || true
  rm -rf "$state"
  note "down: cluster '$prefix' removed"
}

cmd_kill() {
  local node=${1:-}
  grep -qx -- "$node" "$state/nodes" 2>/dev/null ||
    die "'$node' is not a node of the cluster that is up; its nodes are: $(tr '\n' ' ' < "$state/nodes" 2>/dev/null)"
  local pids; pids=$(ip netns pids "$node")
  [ -n "$pids" ] || note "kill $node: no process was running there"
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -9 $pids
  note "kill $node: SIGKILL to $(echo $pids | wc -w) processes"
}

require_up() { [ -f "$state/hostfile" ] || die "no cluster '$prefix' is up; start one with '$0 up --nodes 2'"; }

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) need_root down; cmd_down ;;
  run)
    shift; [ "${1:-}" = -- ] && shift
    [ $# -gt 0 ] || die "run needs a command: $0 run -- CMD..."
    require_up; in_head "$@" ;;
  shape)
    require_up; [ $# -ge 2 ] || die "shape needs a rate: $0 shape 100mbit (or none)"
    [ "$2" = none ] || rate_bits "$2" >/dev/null
    shape_all "$2" "${3:-}" ;;
  kill) require_up; cmd_kill "${2:-}" ;;
  status)
    require_up
    echo "nodes: $(tr '\n' ' ' < "$state/nodes")"; echo "hostfile: $state/hostfile"
    echo "links: $(cat "$state/shaped")" ;;
  with)
    shift; up_args=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do up_args+=("$1"); shift; done
    [ "${1:-}" = -- ] || die "with needs '-- CMD': $0 with --nodes 2 -- CMD..."
    shift
    [ $# -gt 0 ] || die "with needs a command after --"
    need_root with
    export GPUMIX_CLUSTER_OWNER=$$
    # Down only if this process made it: an `up` refused because another cluster of this
    # prefix is up must leave that one alone (it used to tear it down, killing its runs).
    trap '[ "$(cat "$state/owner" 2>/dev/null)" != $$ ] || cmd_down' EXIT
    trap 'note "interrupted"; exit 130' INT TERM
    cmd_up "${up_args[@]}"
    # In the background with `wait`, so that a signal to this script tears down at once
    # (bash runs traps only between foreground commands); stdin stays the terminal's.
    in_head "$@" <&0 &
    status=0
    wait $! || status=$?
    exit $status ;;
  *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
