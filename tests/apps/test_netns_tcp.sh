#!/usr/bin/env bash
# The harness for the tests between hosts (tests/apps/netns.sh), on its own: two namespaces
# joined by a veth pair and three on a bridge reach each other — ping both ways, a TCP
# connection across (a python3 server in one namespace, bash's /dev/tcp in the other;
# the server echoes what it read with the address the connection came from), IPv4 and
# IPv6 — and nothing outlives a run: after a clean exit, a failing one, a TERM (a
# timeout) and a SIGKILL (whose namespaces the next run deletes), no namespace, veth or
# process of it is left. Skips (77) without root or where ip netns cannot work.
. "$(dirname "$0")/lib.sh" "$1"
NETNS_SH=$(cd "$(dirname "$0")" && pwd)/netns.sh
. "$NETNS_SH"
need ping
need python3

ns_pair
ns_bridge

# pings NS ADDR: three echo requests from NS to ADDR, all answered (bounded: 10 s).
pings() {
  ns_exec "$1" 10 ping -n -c 3 -i 0.2 -W 2 "$2" >"$TMP/ping.out" 2>&1 &&
    grep -q '3 packets transmitted, 3 received' "$TMP/ping.out" ||
    { sed 's/^/    /' "$TMP/ping.out"; return 1; }
}
check "ping A -> B (10.77.0.2)" pings "$NS_A" 10.77.0.2
check "ping B -> A (10.77.0.1)" pings "$NS_B" 10.77.0.1
check "ping A -> B (fd77::2)" pings "$NS_A" fd77::2
check "ping B -> A (fd77::1)" pings "$NS_B" fd77::1
check "bridge: ping 1 -> 2 (10.78.0.2)" pings "$NS_1" 10.78.0.2
check "bridge: ping 2 -> 3 (10.78.0.3)" pings "$NS_2" 10.78.0.3
check "bridge: ping 3 -> 1 (fd78::1)" pings "$NS_3" fd78::1

# An echo server: accepts one connection on ADDR PORT, answers the line it reads with
# "echo <line> from <peer address>".
ECHO_PY='
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
c, peer = s.accept()
line = c.makefile().readline().strip()
c.sendall(("echo %s from %s\n" % (line, peer[0])).encode())
c.close()
'

# tcp NAME SRV_NS SRV_ADDR CLI_NS CLI_ADDR SS_ADDR: one connection from CLI_NS to
# SRV_ADDR:PORT; the answer must name CLI_ADDR as the peer.
tcp() {
  local name=$1 sns=$2 saddr=$3 cns=$4 caddr=$5 ss_addr=$6 port=7001 reply
  ns_bg "$sns" 20 python3 -c "$ECHO_PY" "$saddr" $port >"$TMP/$name.srv" 2>&1
  local srv=$NS_PID
  ns_wait_listen "$sns" $port "$ss_addr" $srv || return 1
  reply=$(ns_exec "$cns" 10 bash -c \
    'exec 3<>"/dev/tcp/$1/$2" && echo "hello $1" >&3 && read -r l <&3 && echo "$l"' \
    - "$saddr" $port 2>&1)
  wait $srv || { echo "    server: $(tail -n 3 "$TMP/$name.srv")"; return 1; }
  [ "$reply" = "echo hello $saddr from $caddr" ] ||
    { echo "    $name: the answer was '$reply'"; return 1; }
}
check "TCP B -> A over IPv4 (10.77.0.2 -> 10.77.0.1)" \
  tcp v4 "$NS_A" 10.77.0.1 "$NS_B" 10.77.0.2 10.77.0.1
check "TCP A -> B over IPv6 (fd77::1 -> fd77::2)" \
  tcp v6 "$NS_B" fd77::2 "$NS_A" fd77::1 '[fd77::2]'
check "bridge: TCP 3 -> 1 over IPv4" tcp br4 "$NS_1" 10.78.0.1 "$NS_3" 10.78.0.3 10.78.0.1
check "bridge: TCP 1 -> 2 over IPv6" tcp br6 "$NS_2" fd78::2 "$NS_1" fd78::1 '[fd78::2]'
check "B's veth counted the traffic" test "$(ns_link_count "$NS_B" bytes)" -gt 0

# The cleanup, in child scripts. Each writes its namespaces and the pid of a process it
# left running in A to $TMP/NAME.names, then ends as NAME says.
links_before=$(ip -o link show | wc -l)
child() { # child NAME HOW [WRAPPER...]: HOW is the shell code that ends it
  local name=$1 how=$2
  shift 2
  "$@" env NETNS_SH="$NETNS_SH" OUT="$TMP/$name.names" bash -c '
    . "$NETNS_SH" >/dev/null
    ns_pair; ns_bridge
    ns_bg "$NS_A" 120 sleep 120
    echo "${NS_ALL[*]} $NS_PID" >"$OUT"
    '"$how" >"$TMP/$name.out" 2>&1
}
gone() { # gone PID: no such process (or a zombie waiting for its parent)
  ! kill -0 "$1" 2>/dev/null || grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null
}
left() { # left NAME: every namespace and the process NAME's child made are gone
  local names pid ns
  read -r -a names <"$TMP/$1.names" || { echo "    $1: the child wrote no names"; return 1; }
  pid=${names[-1]}
  unset 'names[-1]'
  [ ${#names[@]} -eq 6 ] || { echo "    $1: ${#names[@]} namespaces, expected 6"; return 1; }
  for ns in "${names[@]}"; do
    if ip netns list | awk '{ print $1 }' | grep -qxF "$ns"; then
      echo "    $1: namespace $ns is still there"
      return 1
    fi
  done
  gone "$pid" || { echo "    $1: pid $pid (sleep, in A) still runs"; return 1; }
  [ "$(ip -o link show | wc -l)" -eq "$links_before" ] ||
    { echo "    $1: links here changed:"; ip -o link show | sed 's/^/      /'; return 1; }
}
child clean 'exit 0'
check "cleanup after a clean exit" left clean
child failing 'false; exit 3'
rc=$?
check "a failing run keeps its status (3) through the trap" test $rc -eq 3
check "cleanup after a failing exit" left failing
child timeout 'sleep 60' timeout 3
rc=$?
check "a run ended by timeout(1) ends with timeout's status (124)" test $rc -eq 124
check "cleanup after a TERM (timeout 3 s)" left timeout
child killed 'kill -KILL $$' 2>/dev/null # (bash reports the kill)
check "after a SIGKILL its namespaces are still there (no trap could run)" \
  test -n "$(ip netns list | grep -F "$(awk '{ print $1 }' "$TMP/killed.names")")"
bash -c '. "$1" >/dev/null' - "$NETNS_SH" # a later run deletes them
check "cleanup of a SIGKILLed run's namespaces by the next run" left killed

finish
