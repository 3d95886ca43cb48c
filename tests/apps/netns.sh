# shellcheck shell=bash disable=SC2034  # a library: its caller reads NS_A, NS_PID, ...
# tests/apps/netns.sh — network namespaces for the tests between hosts (sourced, not run:
# `. tests/apps/netns.sh`; works with or without lib.sh, before or after it).
#
#   ns_pair     two namespaces $NS_A and $NS_B joined by a veth pair: veth0 in each,
#               10.77.0.1/24 + fd77::1/64 in A, 10.77.0.2/24 + fd77::2/64 in B
#   ns_bridge   three namespaces $NS_1 $NS_2 $NS_3 on a bridge (br0, in a fourth
#               namespace $NS_HUB): veth0 in each, 10.78.0.N/24 + fd78::N/64
#
# Every name carries this run's tag ($NS_TAG: "svt-PID-RANDOM"), so parallel runs never
# collide; the veth ends are created inside the namespaces, so nothing is ever added to
# the caller's namespace. IPv6 addresses are added with nodad (usable at once); lo is up
# in each namespace. Each ns_pair/ns_bridge waits (bounded) until the links are up.
#
# Cleanup: an EXIT trap (which runs whatever EXIT trap was set before netns.sh was
# sourced, e.g. lib.sh's, then its own) kills every process still running in this run's
# namespaces, by pid, and deletes the namespaces; INT, TERM and HUP end the script so the
# trap runs. A run killed with SIGKILL (ctest's timeout) cannot clean up: the next run
# deletes the namespaces of any run whose PID is no longer alive.
#
# Without root, or where `ip netns` cannot work (a container without CAP_SYS_ADMIN), it
# prints why and exits 77 (ctest's SKIP_RETURN_CODE).
#
# Helpers:
#   ns_exec NS SECS CMD...          run CMD in NS under timeout -k 5 SECS (its status)
#   ns_bg NS SECS CMD...            the same in the background; its pid in $NS_PID
#   ns_exec_watched NS SECS STACKS CMD...
#                                   ns_exec, but a CMD still running 3 s before its time
#                                   is up gets the stacks of every thread of every process
#                                   in each namespace written to STACKS (gdb, when
#                                   installed) before timeout ends it: a hang says where
#   ns_wait_listen NS PORT [ADDR] [PID] [SECS]
#                                   until something in NS listens on TCP PORT (at ADDR as
#                                   ss prints it: 10.77.0.1, [fd77::1]; any if empty),
#                                   polled, at most SECS (default 10); fails early if PID
#                                   (the server) exits
#   ns_wait_exit PID SECS           wait for PID at most SECS, then TERM it; its status
#   ns_gid_index NS ADDR            the index of ADDR's GID (::ffff:a.b.c.d or the IPv6
#                                   address) in `softverbs run ibv_devinfo -v` run in NS
#   ns_link_count NS bytes|packets [IF]
#                                   rx + tx bytes (or packets) of IF (veth0) in NS
#   ns_capture_start NS IF FILE PEER_NS ADDR [FILTER]
#                                   tshark on IF in NS writing FILE (capture filter
#                                   FILTER, default "tcp", plus the probes); returns once
#                                   it captures: PEER_NS pings ADDR (in NS) until tshark
#                                   has printed a probe (bounded: 20 s)
#   ns_capture_stop                 the same probe again, so that every packet before it
#                                   is in FILE, then stops tshark (bounded: 20 s)
#   ns_collect [FILE...]            print each namespace's addresses, routes and sockets
#                                   and the last lines of each FILE (for a failure)
# Needs $SV (softverbs' CLI) for ns_gid_index only.

NS_TAG=svt-$$-$RANDOM
NS_ALL=()     # the namespaces this run created, deleted at exit
NS_PID=
NS_SKIP=77

_ns_skip() {
  echo "SKIP: $*"
  exit "$NS_SKIP"
}

_ns_prereq() {
  [ "$(id -u)" -eq 0 ] || _ns_skip "network namespaces need root (this runs as uid $(id -u))"
  command -v ip >/dev/null || _ns_skip "ip (iproute2) is not installed"
  command -v ss >/dev/null || _ns_skip "ss (iproute2) is not installed"
  command -v timeout >/dev/null || _ns_skip "timeout (coreutils) is not installed"
  local probe=$NS_TAG-probe err
  if ! err=$(ip netns add "$probe" 2>&1); then
    _ns_skip "ip netns add does not work here ($err): no CAP_SYS_ADMIN (a container?)"
  fi
  if ! err=$(ip netns exec "$probe" ip link set lo up 2>&1); then
    ip netns del "$probe" 2>/dev/null
    _ns_skip "ip netns exec does not work here ($err)"
  fi
  ip netns del "$probe"
}

# Namespaces of earlier runs killed before their trap could run (svt-PID-*, PID dead).
_ns_reap() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }'); do
    [[ $ns =~ ^svt-([0-9]+)- ]] || continue
    pid=${BASH_REMATCH[1]}
    [ "$pid" != $$ ] && ! kill -0 "$pid" 2>/dev/null || continue
    _ns_kill_in "$ns"
    ip netns del "$ns" 2>/dev/null
  done
}

# _ns_kill_in NS: TERM, then KILL, the processes still in NS (bounded: 2 s).
_ns_kill_in() {
  local pids i
  pids=$(ip netns pids "$1" 2>/dev/null)
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null
  for i in $(seq 40); do
    pids=$(ip netns pids "$1" 2>/dev/null)
    [ -n "$pids" ] || return 0
    sleep 0.05
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null
}

ns_cleanup() {
  local ns j
  for j in $(jobs -p); do kill "$j" 2>/dev/null; done
  for ns in "${NS_ALL[@]}"; do _ns_kill_in "$ns"; done
  for ns in "${NS_ALL[@]}"; do ip netns del "$ns" 2>/dev/null; done
  NS_ALL=()
}

# Chain the EXIT trap: the one set before (lib.sh's), then ours.
_ns_prev_exit=
_ns_prev=()
if [ -n "$(trap -p EXIT)" ]; then
  eval "_ns_prev=($(trap -p EXIT))"
  _ns_prev_exit=${_ns_prev[2]}
fi
_ns_on_exit() {
  local rc=$?
  ns_cleanup
  [ -z "$_ns_prev_exit" ] || eval "$_ns_prev_exit"
  exit $rc
}
trap _ns_on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

_ns_prereq
_ns_reap

_ns_new() { # _ns_new NAME: create it with lo up, record it for cleanup
  ip netns add "$1" || { echo "ip netns add $1 failed"; exit 1; }
  NS_ALL+=("$1")
  ip -n "$1" link set lo up
}

# _ns_wait_up NS IF: until IF in NS has carrier (LOWER_UP), at most 5 s.
_ns_wait_up() {
  local deadline=$((SECONDS + 5))
  until ip -n "$1" link show dev "$2" 2>/dev/null | grep -q 'LOWER_UP'; do
    if [ $SECONDS -ge $deadline ]; then
      echo "netns: $2 in $1 has no carrier after 5 s"
      ip -n "$1" link show dev "$2"
      exit 1
    fi
    sleep 0.02
  done
}

# _ns_addrs NS IF V4/LEN V6/LEN: up, with the addresses (IPv6 without DAD).
_ns_addrs() {
  ip -n "$1" link set "$2" up &&
    ip -n "$1" addr add "$3" dev "$2" &&
    ip -n "$1" -6 addr add "$4" dev "$2" nodad ||
    { echo "netns: could not configure $2 in $1"; exit 1; }
}

ns_pair() {
  NS_A=$NS_TAG-a
  NS_B=$NS_TAG-b
  _ns_new "$NS_A"
  _ns_new "$NS_B"
  ip link add veth0 netns "$NS_A" type veth peer name veth0 netns "$NS_B" ||
    { echo "netns: could not create the veth pair"; exit 1; }
  _ns_addrs "$NS_A" veth0 10.77.0.1/24 fd77::1/64
  _ns_addrs "$NS_B" veth0 10.77.0.2/24 fd77::2/64
  _ns_wait_up "$NS_A" veth0
  _ns_wait_up "$NS_B" veth0
}

ns_bridge() {
  local i ns
  NS_HUB=$NS_TAG-hub
  _ns_new "$NS_HUB"
  ip -n "$NS_HUB" link add br0 type bridge &&
    ip -n "$NS_HUB" link set br0 up || { echo "netns: could not create the bridge"; exit 1; }
  for i in 1 2 3; do
    ns=$NS_TAG-$i
    printf -v "NS_$i" %s "$ns"
    _ns_new "$ns"
    ip link add "port$i" netns "$NS_HUB" type veth peer name veth0 netns "$ns" &&
      ip -n "$NS_HUB" link set "port$i" master br0 &&
      ip -n "$NS_HUB" link set "port$i" up ||
      { echo "netns: could not connect $ns to the bridge"; exit 1; }
    _ns_addrs "$ns" veth0 "10.78.0.$i/24" "fd78::$i/64"
  done
  for i in 1 2 3; do
    _ns_wait_up "$NS_TAG-$i" veth0
    _ns_wait_up "$NS_HUB" "port$i"
  done
}

ns_exec() {
  local ns=$1 secs=$2
  shift 2
  ip netns exec "$ns" timeout -k 5 "$secs" "$@"
}

ns_bg() {
  local ns=$1 secs=$2
  shift 2
  ip netns exec "$ns" timeout -k 5 "$secs" "$@" &
  NS_PID=$!
}

ns_exec_watched() {
  local ns=$1 secs=$2 stacks=$3 pid timer st n p
  shift 3
  ip netns exec "$ns" timeout -k 5 "$secs" "$@" &
  pid=$!
  sleep $((secs > 3 ? secs - 3 : 1)) &
  timer=$!
  wait -n $pid $timer
  if kill -0 $pid 2>/dev/null && command -v gdb >/dev/null; then
    : >"$stacks"
    for n in "${NS_ALL[@]}"; do
      for p in $(ip netns pids "$n" 2>/dev/null); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = timeout ] && continue
        { echo "=== namespace $n, pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
          timeout 20 gdb -p "$p" -batch -nx -ex 'thread apply all bt 12' 2>/dev/null |
            grep -E '^(Thread|#)'; } >>"$stacks"
      done
    done
  fi
  kill $timer 2>/dev/null
  wait $pid
  st=$?
  wait $timer 2>/dev/null
  return $st
}

ns_wait_listen() {
  local ns=$1 port=$2 addr=${3:-} pid=${4:-} secs=${5:-10}
  local deadline=$((SECONDS + secs))
  while :; do
    ip netns exec "$ns" ss -l"${NS_SS_PROTO:-t}"nH 2>/dev/null | awk -v p=":$port" -v a="$addr" '
      { l = $4 }
      a != "" && l == a p { f = 1 }
      a == "" && substr(l, length(l) - length(p) + 1) == p { f = 1 }
      END { exit !f }' && return 0
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      echo "    the server (pid $pid) ended before listening on ${addr:+$addr:}$port in $ns"
      return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "    nothing listens on ${addr:+$addr:}$port in $ns after $secs s"
      return 1
    fi
    sleep 0.05
  done
}

ns_wait_exit() {
  local pid=$1 deadline=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
  kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
  wait "$pid"
}

ns_gid_index() {
  local ns=$1 addr=$2 want
  case $addr in
  *:*) want=$addr ;;
  *) want=::ffff:$addr ;;
  esac
  ns_exec "$ns" 30 "${SV:?ns_gid_index needs SV}" run ibv_devinfo -v 2>/dev/null |
    awk -v w="$want" '
      match($0, /GID\[ *[0-9]+\]:/) {
        idx = substr($0, RSTART + 4, RLENGTH - 6); gsub(/ /, "", idx)
        rest = substr($0, RSTART + RLENGTH); gsub(/^[ \t]+|,.*$/, "", rest)
        if (rest == w && !found) { print idx; found = 1 }
      }
      END { exit !found }'
}

ns_link_count() {
  local d=/sys/class/net/${3:-veth0}/statistics
  ip netns exec "$1" cat "$d/rx_$2" "$d/tx_$2" 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'
}

ns_collect() {
  local ns f
  for ns in "${NS_ALL[@]}"; do
    echo "    --- namespace $ns"
    { ip -n "$ns" -br addr; ip -n "$ns" route; ip -n "$ns" -6 route
      ip netns exec "$ns" ss -tanH exclude time-wait; } 2>&1 | sed 's/^/      /'
  done
  for f in "$@"; do
    [ -e "$f" ] || continue
    echo "    --- $(basename "$f") (last lines)"
    tail -n 8 "$f" | sed 's/^/      /'
  done
}

# _ns_probe ID: PEER pings ADDR with ICMP identifier ID until tshark's summary shows it.
_ns_probe() {
  local id=$1 hex deadline=$((SECONDS + 20))
  hex=$(printf 'id=0x%04x' "$id")
  until grep -q "$hex" "$NS_CAP_LOG"; do
    if [ $SECONDS -ge $deadline ] || ! kill -0 "$NS_CAP_PID" 2>/dev/null; then
      echo "    tshark did not see the probe ($hex) within 20 s:"
      tail -n 5 "$NS_CAP_LOG" | sed 's/^/      /'
      return 1
    fi
    ip netns exec "$NS_CAP_PEER" timeout 2 ping -n -c 1 -W 0.2 -e "$id" "$NS_CAP_ADDR" >/dev/null 2>&1
  done
}

ns_capture_start() {
  NS_CAP_PEER=$4 NS_CAP_ADDR=$5
  NS_CAP_LOG=$3.log
  ns_bg "$1" 600 tshark -l -P -n -i "$2" -w "$3" -f "(${6:-tcp}) or icmp" >"$NS_CAP_LOG" 2>&1
  NS_CAP_PID=$NS_PID
  _ns_probe 30001
}

ns_capture_stop() {
  local rc=0
  _ns_probe 30002 || rc=1
  kill -INT "$NS_CAP_PID" 2>/dev/null
  ns_wait_exit "$NS_CAP_PID" 20 >/dev/null
  return $rc
}
