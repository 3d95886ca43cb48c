#!/bin/bash
# Debian's unmodified rdma_cm programs on softverbs' librdmacm.so.1: rping, ucmatose,
# udaddy, rdma_server/rdma_client, cmtime, mckey and perftest with -R, server and client
# as two processes, over 127.0.0.1 and over ::1 (mckey: an IPv4 and an IPv6 group). Each must exit 0 (cmtime's server never exits
# by itself: it is stopped once its client is done) and print what shows the data moved.
. "$(dirname "$0")/lib.sh" "$1"
need rping
need ucmatose
need udaddy
need rdma_server
need cmtime
need ib_send_lat
need mckey

# mckey_pair NAME GROUP MGID: a receiver joins GROUP (2 ids), the sender sends 20
# messages on each once both memberships exist (multicast has no port to wait for: the
# receiver's memberships show in /proc/net/unix as @softverbs/mcast/MGID/QPN).
mckey_pair() {
  local name=$1 group=$2 mgid=$3 rcv
  timeout 60 "$SV" run mckey -m "$group" -c 2 -C 20 >"$TMP/$name.rcv" 2>&1 &
  rcv=$!
  for _ in $(seq 100); do
    [ "$(grep -c "@softverbs/mcast/$mgid/" /proc/net/unix)" -ge 2 ] && break
    kill -0 $rcv 2>/dev/null || break
    sleep 0.05
  done
  timeout 60 "$SV" run mckey -m "$group" -s -c 2 -C 20 >"$TMP/$name.snd" 2>&1
  local src=$?
  wait $rcv
  local rrc=$?
  check "$name ($group): sender exits 0" test $src -eq 0
  check "$name ($group): receiver exits 0" test $rrc -eq 0
  check "$name ($group): receiver got every message" contains "$TMP/$name.rcv" "data transfers complete"
  if [ $src -ne 0 ] || [ $rrc -ne 0 ]; then
    tail -n 5 "$TMP/$name.rcv" "$TMP/$name.snd" | sed 's/^/    /'
  fi
}

# late_cm LOG STATUS: rping's race at exit. Its main thread destroys the event channel
# its CM thread reads, never joining that thread: if the thread comes back to
# rdma_get_cm_event only after the destruction (a loaded machine), it gets EBADF — as
# with rdma-core, whose read of the closed descriptor fails the same way — prints this
# and exits 255 after the last ping.
late_cm() {
  [ "$2" -eq 255 ] && [ "$(tail -n 1 "$1")" = "rdma_get_cm_event: Bad file descriptor" ]
}

# cm_pair NAME PORT ADDR "SERVER ARGS" "CLIENT ARGS" [stop|-] [late-cm]: like pair, with
# separate argument lists; "stop" ends a server that never exits once the client is
# done; "late-cm" accepts rping's race at exit (late_cm) on either side.
cm_pair() {
  local name=$1 port=$2 addr=$3 srv_args=$4 cli_args=$5 stop=${6:-} late=${7:-}
  [ "$stop" = - ] && stop=
  # shellcheck disable=SC2086
  timeout 60 "$SV" run $srv_args >"$TMP/$name.srv" 2>&1 &
  local srv=$!
  wait_listen "$port" $srv
  # shellcheck disable=SC2086
  timeout 60 "$SV" run $cli_args >"$TMP/$name.cli" 2>&1
  local crc=$?
  if [ -n "$stop" ]; then
    kill -TERM $srv 2>/dev/null
    wait $srv
    local src=0
  else
    wait $srv
    local src=$?
  fi
  if [ -n "$late" ] && late_cm "$TMP/$name.cli" $crc; then
    echo "note: $name ($addr): the client's CM thread came back after its channel was destroyed (rping's race at exit)"
    crc=0
  fi
  if [ -n "$late" ] && late_cm "$TMP/$name.srv" $src; then
    echo "note: $name ($addr): the server's CM thread came back after its channel was destroyed (rping's race at exit)"
    src=0
  fi
  check "$name ($addr): client exits 0" test $crc -eq 0
  check "$name ($addr): server exits 0" test $src -eq 0
  if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
    tail -n 5 "$TMP/$name.srv" "$TMP/$name.cli" | sed 's/^/    /'
  fi
}

ipv6=yes
if ! ip -6 addr show dev lo 2>/dev/null | grep -q '::1/128'; then
  ipv6=
  echo "note: ::1 is not configured on lo; the IPv6 runs are skipped"
fi

for A in 127.0.0.1 ${ipv6:+::1}; do
  tag=${A//[:.]/_}
  cm_pair rping_$tag 17174 $A "rping -s -a $A -p 17174 -C 1000 -v" \
    "rping -c -a $A -p 17174 -C 1000 -v" - late-cm
  check "rping ($A): client's 1000th ping" contains "$TMP/rping_$tag.cli" "ping data: rdma-ping-999:"
  # (rping's threads share stdout unsynchronised: the server's line prefix can be torn)
  check "rping ($A): server's 1000th ping" contains "$TMP/rping_$tag.srv" "ping data: rdma-ping-999:"

  cm_pair ucmatose_$tag 17471 $A "ucmatose -b $A -p 17471 -c 4 -C 20" \
    "ucmatose -s $A -p 17471 -c 4 -C 20"
  check "ucmatose ($A): transfers complete" contains "$TMP/ucmatose_$tag.cli" "data transfers complete"

  # udaddy's port is fixed (7174); -p is its port space.
  cm_pair udaddy_$tag 7174 $A "udaddy -b $A -c 2" "udaddy -s $A -c 2"
  check "udaddy ($A): transfers complete" contains "$TMP/udaddy_$tag.cli" "data transfers complete"

  cm_pair rdma_server_$tag 17472 $A "rdma_server -s $A -p 17472" "rdma_client -s $A -p 17472"
  check "rdma_client ($A): ran to its end" contains "$TMP/rdma_server_$tag.cli" "rdma_client: end 0"
  check "rdma_server ($A): ran to its end" contains "$TMP/rdma_server_$tag.srv" "rdma_server: end 0"

  cm_pair cmtime_$tag 17473 $A "cmtime -b $A -p 17473" "cmtime -s $A -p 17473 -c 100" stop
  check "cmtime ($A): connected all 100" contains "$TMP/cmtime_$tag.cli" "^connect  *:"
done

V4_MGID=00000000000000000000ffffef010203 # ::ffff:239.1.2.3
V6_MGID=ff0e0000000000000000000000000005 # ff0e::5
mckey_pair mckey_v4 239.1.2.3 $V4_MGID
[ -n "$ipv6" ] && mckey_pair mckey_v6 ff0e::5 $V6_MGID
check "no membership is left behind" \
  test "$(grep -cE "@softverbs/mcast/($V4_MGID|$V6_MGID)/" /proc/net/unix)" -eq 0

# perftest -R resolves its own addresses with AF_INET hints, so ::1 is refused by
# perftest itself before it calls librdmacm (the same on rdma-core): IPv4 only.
for t in ib_send_lat ib_write_bw ib_read_lat; do
  cm_pair "${t}_R" 18530 127.0.0.1 "$t -R -p 18530" "$t -R -p 18530 127.0.0.1"
  check "$t -R: printed its results" contains "$TMP/${t}_R.cli" "^ *[0-9]"
done

finish
