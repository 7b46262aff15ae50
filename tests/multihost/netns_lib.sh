# shellcheck shell=bash
# Hosts of their own for process-level tests: network namespaces joined by
# veth pairs to a bridge, each namespace a "host" with its own address, so
# that daemons bind, advertise and reach real, distinct addresses and a
# test can cut, partition or slow one host's network. Sourced, not run.
# Needs root and iproute2 (ip, tc); nothing else (no iptables/nft, no
# netem: this machine's kernel has neither netem nor tc's gact, see
# "Faults" below).
#
# Topology: a "switch" namespace holds the bridge; every host (c, w1 ..
# wN) is a namespace whose eth0 is one end of a veth pair, the other end a
# port of the bridge named after the host. Nothing is created in the root
# namespace, so the machine's own networking is untouched and runs in
# parallel never collide (each run has its own switch; the subnet is the
# same in every run but isolated in it).
#
#   mh_can_run                 0 if root and namespaces + veth + bridge
#                              work here; else prints the reason on stdout
#                              and returns 1 (callers then mh_skip it)
#   mh_skip REASON             prints "SKIPPED: REASON", writes a skipped
#                              test to $XML_OUTPUT_FILE (under Bazel) and
#                              exits 0: the tests/ skip convention
#   mh_up N_WORKERS [PREFIX]   makes the switch, host "c" (10.77.0.1) and
#                              hosts w1..wN (10.77.0.11 ..), lo and eth0 up,
#                              and chains mh_down into the EXIT trap (plus
#                              TERM/INT -> exit, so Bazel's timeout still
#                              tears down). PREFIX (default aqmh<pid>)
#                              prefixes the namespace names. Also deletes
#                              namespaces a killed earlier run left behind
#                              (aqmh<pid>-* whose pid is gone).
#   mh_hosts                   the hosts, one per line: c w1 .. wN
#   mh_ns HOST                 HOST's namespace name
#   mh_addr HOST               HOST's IPv4 address
#   mh_exec HOST CMD...        runs CMD in HOST's namespace (same files,
#                              same mounts otherwise); `mh_exec w1 worker
#                              ... &` for a daemon: $! is its pid
#   mh_down                    SIGKILLs every process in the namespaces,
#                              deletes them (and so every veth); idempotent
#
# Faults (each returns non-zero, saying why, if the kernel refuses):
#   mh_cut HOST                pulls HOST's cable: its switch port goes
#                              down; HOST sees NO-CARRIER, its packets and
#                              everyone's packets to it are dropped
#                              silently (no error reaches a socket)
#   mh_restore HOST            plugs it back
#   mh_partition A B...        silently drops traffic between A and each B
#                              only (both directions; every other pair
#                              still talks): a tc u32 filter on each side's
#                              eth0 egress (clsact) redirects packets to the
#                              peer's address to a down ifb device ("sink"),
#                              which drops them. Composes with shaping.
#   mh_heal A B...             removes those partitions
#   mh_shape HOST RATE [DELAY] limits HOST's link in both directions (its
#                              eth0 egress and its switch port's egress) to
#                              RATE (tc units: 100mbit, 5gbit) with tbf; a
#                              DELAY (tc units: 5ms) needs sch_netem, which
#                              this machine's kernel lacks: then it returns
#                              2 saying so (mh_has_netem tells beforehand)
#   mh_shape_between "A B.." "C D.." RATE
#                              limits only the traffic between the two
#                              groups, each direction of each host pair to
#                              RATE (htb class per remote peer + u32
#                              filter on each host's eth0); traffic inside
#                              a group is not limited. "Two racks joined by
#                              a slow link", approximately: each cross pair
#                              gets RATE of its own, not a shared RATE.
#   mh_unshape HOST            removes HOST's shaping (both kinds)
#   mh_has_netem               0 if tc netem works here
#
# Counters: mh_tx_bytes HOST prints the bytes HOST's eth0 sent (from
# /sys/class/net/eth0/statistics inside the namespace).
#
# Processes: every process started through mh_exec lives in a namespace;
# mh_down kills them all by `ip netns pids`, whoever started them. Callers
# that also use tests/daemon_harness.sh may add the pids to its `pids` too.

MH_SUBNET=10.77.0
mh_prefix=""
mh_workers=0

mh_skip() {
  echo "SKIPPED: $1"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    local name="${TEST_TARGET:-multihost}"
    name="${name##*:}"
    cat >"$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="$name" tests="1" failures="0" skipped="1">
<testcase name="$name"><skipped message="$1"/></testcase>
</testsuite></testsuites>
XML
  fi
  exit 0
}

mh_can_run() {
  if [ "$(id -u)" != 0 ]; then
    echo "not root (uid $(id -u)): network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN"
    return 1
  fi
  local tool
  for tool in ip tc; do
    command -v "$tool" >/dev/null || { echo "'$tool' is missing (apt-get install iproute2)"; return 1; }
  done
  local probe="aqmhprobe$$" err
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "'ip netns add' fails here: $err"
    return 1
  fi
  if ! err=$({ ip -n "$probe" link add br0 type bridge &&
    ip -n "$probe" link add name va type veth peer name vb &&
    ip -n "$probe" link set br0 up && ip -n "$probe" link set va master br0 up; } 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "a bridge or a veth pair cannot be made in a namespace: $err"
    return 1
  fi
  ip netns del "$probe"
}

mh_ns() {
  case "$1" in
    c | sw | w[0-9]*) echo "$mh_prefix-$1" ;;
    *) echo "mh_ns: unknown host '$1'" >&2; return 1 ;;
  esac
}

mh_addr() {
  case "$1" in
    c) echo "$MH_SUBNET.1" ;;
    w[0-9]*) echo "$MH_SUBNET.$((10 + ${1#w}))" ;;
    *) echo "mh_addr: unknown host '$1'" >&2; return 1 ;;
  esac
}

mh_hosts() {
  echo c
  local i
  for ((i = 1; i <= mh_workers; i++)); do echo "w$i"; done
}

mh_exec() {
  local ns
  ns=$(mh_ns "$1") || return 1
  shift
  ip netns exec "$ns" "$@"
}

# Deletes namespaces aqmh<pid>-* whose pid is gone (a run killed by
# SIGKILL never ran its trap).
mh_reap_stale() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^aqmh[0-9]+-' || true); do
    pid=${ns#aqmh}
    pid=${pid%%-*}
    kill -0 "$pid" 2>/dev/null && continue
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
}

# Makes host $1's namespace with eth0 (address $2) on the switch.
mh_add_host() {
  local host=$1 addr=$2 ns sw
  ns=$(mh_ns "$host") sw=$(mh_ns sw)
  ip netns add "$ns" || return 1
  ip -n "$sw" link add name "$host" type veth peer name eth0 netns "$ns" || return 1
  ip -n "$sw" link set "$host" master br0 up || return 1
  ip -n "$ns" link set lo up || return 1
  ip -n "$ns" addr add "$addr/24" dev eth0 || return 1
  ip -n "$ns" link set eth0 up || return 1
  # The partitions' sink: packets redirected to a down device are dropped.
  ip -n "$ns" link add sink type ifb 2>/dev/null || true
}

mh_up() {
  mh_workers=$1
  mh_prefix=${2:-aqmh$$}
  mh_reap_stale
  local prev
  prev=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT\$/\1/")
  # shellcheck disable=SC2064  # expanded now on purpose: the old trap's text
  trap "mh_down; $prev" EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  local sw
  sw=$(mh_ns sw)
  ip netns add "$sw" || { echo "mh_up: cannot add namespace $sw" >&2; return 1; }
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge || { echo "mh_up: no bridge in $sw" >&2; return 1; }
  ip -n "$sw" link set br0 up
  local h
  for h in $(mh_hosts); do
    mh_add_host "$h" "$(mh_addr "$h")" || { echo "mh_up: cannot make host $h" >&2; return 1; }
  done
  # Without STP a port forwards as soon as both ends are up; wait for it
  # (bounded) so that the first packets are not lost.
  local end=$((SECONDS + 10)) n=$((mh_workers + 1))
  until [ "$(bridge -n "$sw" link show | grep -c 'state forwarding')" -ge "$n" ]; do
    [ $SECONDS -lt $end ] || { echo "mh_up: bridge ports not forwarding: $(bridge -n "$sw" link show)" >&2; return 1; }
    sleep 0.1
  done
}

mh_down() {
  [ -n "$mh_prefix" ] || return 0
  local ns pass
  for pass in 1 2; do
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -F -- "$mh_prefix-" || true); do
      [ "${ns%-*}" = "$mh_prefix" ] || continue
      ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
      [ "$pass" = 2 ] && ip netns del "$ns" 2>/dev/null
    done
    [ "$pass" = 1 ] && sleep 0.2
  done
  return 0
}

mh_cut() { ip -n "$(mh_ns sw)" link set "$1" down; }
mh_restore() { ip -n "$(mh_ns sw)" link set "$1" up; }

# The tc filter preference of the partition from a host to peer $1: one per
# peer, so that each partition is removed alone.
mh_peer_pref() {
  case "$1" in
    c) echo 100 ;;
    w[0-9]*) echo $((100 + ${1#w})) ;;
  esac
}

# Drops packets from $1 to $2 at $1's eth0.
mh_drop_one_way() {
  local ns
  ns=$(mh_ns "$1") || return 1
  ip netns exec "$ns" tc qdisc add dev eth0 clsact 2>/dev/null || true
  ip netns exec "$ns" tc filter add dev eth0 egress pref "$(mh_peer_pref "$2")" \
    protocol ip u32 match ip dst "$(mh_addr "$2")/32" \
    action mirred egress redirect dev sink
}

mh_partition() {
  local a=$1 b
  shift
  for b in "$@"; do
    if ! mh_drop_one_way "$a" "$b" || ! mh_drop_one_way "$b" "$a"; then
      echo "mh_partition: tc refused the filter between $a and $b" >&2
      return 1
    fi
  done
}

mh_heal() {
  local a=$1 b
  shift
  for b in "$@"; do
    mh_exec "$a" tc filter del dev eth0 egress pref "$(mh_peer_pref "$b")" 2>/dev/null
    mh_exec "$b" tc filter del dev eth0 egress pref "$(mh_peer_pref "$a")" 2>/dev/null
  done
  return 0
}

mh_has_netem() {
  local ns
  ns=$(mh_ns sw) || return 1
  ip -n "$ns" link add nmprobe type veth peer name nmprobe2 2>/dev/null || return 1
  local ok=1
  ip netns exec "$ns" tc qdisc add dev nmprobe root netem delay 1ms 2>/dev/null && ok=0
  ip -n "$ns" link del nmprobe 2>/dev/null
  return $ok
}

mh_shape() {
  local host=$1 rate=$2 delay=${3:-} ns sw
  ns=$(mh_ns "$host") sw=$(mh_ns sw)
  local qdisc=(tbf rate "$rate" burst 64kb latency 100ms)
  if [ -n "$delay" ] && [ "$delay" != 0 ] && [ "$delay" != 0ms ]; then
    mh_has_netem || { echo "mh_shape: a delay needs tc netem (sch_netem), which this kernel lacks" >&2; return 2; }
    qdisc=(netem delay "$delay" rate "$rate")
  fi
  if ! ip netns exec "$ns" tc qdisc replace dev eth0 root "${qdisc[@]}" ||
    ! ip netns exec "$sw" tc qdisc replace dev "$host" root "${qdisc[@]}"; then
    echo "mh_shape: tc refused '${qdisc[*]}' on $host" >&2
    return 1
  fi
}

mh_unshape() {
  mh_exec "$1" tc qdisc del dev eth0 root 2>/dev/null
  ip netns exec "$(mh_ns sw)" tc qdisc del dev "$1" root 2>/dev/null
  return 0
}

# Limits $1's traffic to each host in $3.. to $2 with htb: class 1:1
# (unlimited) is the default, class 1:<100+peer> per slow peer.
mh_shape_to() {
  local host=$1 rate=$2 ns peer id
  shift 2
  ns=$(mh_ns "$host")
  if ! ip netns exec "$ns" tc qdisc show dev eth0 | grep -q '^qdisc htb 1:'; then
    ip netns exec "$ns" tc qdisc replace dev eth0 root handle 1: htb default 1 &&
      ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:1 htb rate 100gbit quantum 200000 || return 1
  fi
  for peer in "$@"; do
    id=$(mh_peer_pref "$peer")
    ip netns exec "$ns" tc class replace dev eth0 parent 1: classid "1:$id" \
      htb rate "$rate" ceil "$rate" || return 1
    ip netns exec "$ns" tc filter replace dev eth0 parent 1: pref "$id" protocol ip \
      u32 match ip dst "$(mh_addr "$peer")/32" flowid "1:$id" || return 1
  done
}

mh_shape_between() {
  local group_a=$1 group_b=$2 rate=$3 h
  # shellcheck disable=SC2086  # the groups are space-separated host lists
  for h in $group_a; do mh_shape_to "$h" "$rate" $group_b || { echo "mh_shape_between: tc refused htb on $h" >&2; return 1; }; done
  # shellcheck disable=SC2086
  for h in $group_b; do mh_shape_to "$h" "$rate" $group_a || { echo "mh_shape_between: tc refused htb on $h" >&2; return 1; }; done
}

mh_tx_bytes() { mh_exec "$1" cat /sys/class/net/eth0/statistics/tx_bytes; }
