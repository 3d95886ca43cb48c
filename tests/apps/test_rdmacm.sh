#!/bin/bash
# Debian's unmodified rdma_cm programs on softverbs' librdmacm.so.1: rping, ucmatose,
# udaddy, rdma_server/rdma_client, cmtime, mckey and perftest with -R, server and client
# as two processes, over 127.0.0.1 (this test) or over ::1 (test_rdmacm_ipv6.sh runs this
# script with "ipv6"; it skips, as ctest shows, where lo has no ::1). Each must exit 0
# and print what shows the data moved: rping (-V: the client compares each ping it gets
# back with what it sent) must print every ping's data as rping builds it, on both sides;
# ucmatose, udaddy, rdma_server/rdma_client, mckey and cmtime must print exactly their
# transcript of a clean run (they print a line on any failed event or completion, yet
# Debian's cmtime still exits 0 when every connection was rejected); cmtime's server never
# exits by itself (rdma-core 44's serves until killed): it must still be running, silent,
# when its client is done, and is then stopped.
. "$(dirname "$0")/lib.sh" "$1"
FAMILY=${2:-ipv4}
need rping
need ucmatose
need udaddy
need rdma_server
need cmtime
need ib_send_lat
need mckey

case $FAMILY in
ipv4) A=127.0.0.1 SS_A=127.0.0.1 PO=0 ;;
ipv6)
  if ! ip -6 addr show dev lo 2>/dev/null | grep -q 'inet6 ::1/128'; then
    echo "SKIP: ::1 is not configured on lo: the IPv6 runs cannot happen"
    exit 77
  fi
  A=::1 SS_A='[::1]' PO=100 ;; # its own ports: ctest -j runs both families at once
*) echo "usage: $0 BUILD_DIR [ipv4|ipv6]"; exit 2 ;;
esac

# mckey_pair NAME GROUP MGID: a receiver joins GROUP (2 ids), the sender sends 20
# messages on each once both memberships exist (multicast has no port to wait for: the
# receiver's memberships show in /proc/net/unix as @softverbs/mcast/MGID/QPN).
mckey_pair() {
  local name=$1 group=$2 mgid=$3 rcv joined_both=false
  # Line-buffered, with softverbs' debug log apart: a receiver stopped by timeout shows
  # how far it came, and why a datagram was lost.
  SOFTVERBS_LOG=debug timeout 60 "$SV" run stdbuf -oL mckey -m "$group" -c 2 -C 20 \
    >"$TMP/$name.rcv" 2>"$TMP/$name.rcv.log" &
  rcv=$!
  for _ in $(seq 400); do
    if [ "$(grep -c "@softverbs/mcast/$mgid/" /proc/net/unix)" -ge 2 ]; then
      joined_both=true
      break
    fi
    kill -0 $rcv 2>/dev/null || break
    sleep 0.05
  done
  check "$name ($group): the receiver joined both groups within 20 s" $joined_both
  SOFTVERBS_LOG=debug timeout 60 "$SV" run stdbuf -oL mckey -m "$group" -s -c 2 -C 20 \
    >"$TMP/$name.snd" 2>"$TMP/$name.snd.log"
  local src=$?
  wait $rcv
  local rrc=$?
  check "$name ($group): sender exits 0" test $src -eq 0
  check "$name ($group): receiver exits 0" test $rrc -eq 0
  local joined="mckey: joined dgid: [0-9a-f:.]+ mlid 0x[0-9a-f]+ sl 0"
  check "$name ($group): receiver's transcript: joined twice, got every message" \
    transcript "$TMP/$name.rcv" "mckey: starting server" "mckey: joining" "$joined" "$joined" \
    "receiving data transfers" "data transfers complete" "test complete" "return status 0"
  check "$name ($group): sender's transcript: joined twice, sent every message" \
    transcript "$TMP/$name.snd" "mckey: starting client" "mckey: joining" "$joined" "$joined" \
    "initiating data transfers" "data transfers complete" "test complete" "return status 0"
  check "$name ($group): no error or warning from softverbs" \
    test -z "$(grep -hE '^softverbs\[[0-9]+\] (error|warn):' "$TMP/$name".*.log)"
  if [ $src -ne 0 ] || [ $rrc -ne 0 ]; then
    tail -n 20 "$TMP/$name.rcv" "$TMP/$name.rcv.log" "$TMP/$name.snd" "$TMP/$name.snd.log" |
      sed 's/^/    /'
  fi
}

# cm_pair NAME PORT "SERVER ARGS" "CLIENT ARGS" [stop|-] [late-cm]: like pair, with
# separate argument lists; stdout in $TMP/NAME.{srv,cli}, stderr in .srv.err, .cli.err.
# It waits for the server to listen at $SS_A (at $WAIT_A if set; "": any address).
# "stop": the server never exits by itself; it must still be running when its client is
# done, and is then stopped with SIGTERM (status 143 is its clean end). "late-cm" accepts
# rping's race at exit (late_cm) on either side.
cm_pair() {
  local name=$1 port=$2 srv_args=$3 cli_args=$4 stop=${5:-} late=${6:-}
  [ "$stop" = - ] && stop=
  # shellcheck disable=SC2086
  timeout 60 "$SV" run $srv_args >"$TMP/$name.srv" 2>"$TMP/$name.srv.err" &
  local srv=$!
  wait_listen "$port" $srv "${WAIT_A-$SS_A}"
  # shellcheck disable=SC2086
  timeout 60 "$SV" run $cli_args >"$TMP/$name.cli" 2>"$TMP/$name.cli.err"
  local crc=$? src
  if [ -n "$stop" ]; then
    if kill -0 $srv 2>/dev/null; then
      kill -TERM $srv
      wait $srv
      src=$?
      [ $src -eq 143 ] && src=0
    else
      wait $srv
      src=$?
      echo "    $name: the server had already ended (status $src) when its client was done"
      [ $src -eq 0 ] && src=1
    fi
  else
    wait $srv
    src=$?
  fi
  if [ -n "$late" ] && late_cm "$TMP/$name.cli.err" $crc; then
    echo "note: $name ($A): the client's CM thread came back after its channel was destroyed (rping's race at exit)"
    crc=0
  fi
  if [ -n "$late" ] && late_cm "$TMP/$name.srv.err" $src; then
    echo "note: $name ($A): the server's CM thread came back after its channel was destroyed (rping's race at exit)"
    src=0
  fi
  check "$name ($A): client exits 0" test $crc -eq 0
  check "$name ($A): server exits 0${stop:+ (still serving when its client was done)}" \
    test $src -eq 0
  if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
    tail -n 5 "$TMP/$name".{srv,cli}{,.err} | sed 's/^/    /'
  fi
}

tag=${A//[:.]/_} # 127_0_0_1, __1: no character the shell splits
p=$((17174 + PO))
cm_pair rping_$tag $p "rping -s -a $A -p $p -C 1000 -v -V" \
  "rping -c -a $A -p $p -C 1000 -v -V" - late-cm
rping_data 1000 "" >"$TMP/rping.want"
rping_data 1000 "server " >"$TMP/rping.srv.want"
# The client prints what the server wrote back (RDMA WRITE), the server what it read
# from the client (RDMA READ): each the 1000 pings rping built, in order.
check "rping ($A): client got back every ping's data" \
  diff -q "$TMP/rping.want" "$TMP/rping_$tag.cli"
check "rping ($A): server read every ping's data" \
  diff -q "$TMP/rping.srv.want" "$TMP/rping_$tag.srv"
check "rping ($A): client found no mismatch (-V)" lacks "$TMP/rping_$tag.cli.err" "mismatch"

p=$((17471 + PO))
cm_pair ucmatose_$tag $p "ucmatose -b $A -p $p -c 4 -C 20" "ucmatose -s $A -p $p -c 4 -C 20"
check "ucmatose ($A): server's transcript of 4 connections, 20 messages each" \
  transcript "$TMP/ucmatose_$tag.srv" "cmatose: starting server" "initiating data transfers" \
  "completing sends" "receiving data transfers" "data transfers complete" \
  "cmatose: disconnecting" "disconnected" "test complete" "return status 0"
check "ucmatose ($A): client's transcript" \
  transcript "$TMP/ucmatose_$tag.cli" "cmatose: starting client" "cmatose: connecting" \
  "receiving data transfers" "sending replies" "data transfers complete" "test complete" \
  "return status 0"
check "ucmatose ($A): nothing on stderr" test ! -s "$TMP/ucmatose_$tag.srv.err" -a \
  ! -s "$TMP/ucmatose_$tag.cli.err"

# udaddy's port is fixed (7174); -p is its port space. softverbs lets no two ids hold one
# port number on different addresses (docs/architecture.md), so the IPv4 and IPv6 tests,
# which ctest -j runs at once, take turns (bounded: 60 s).
exec 9>"${TMPDIR:-/tmp}/softverbs-apps-udaddy-7174.lock"
flock -w 60 9 || echo "    udaddy: the other family's udaddy still runs after 60 s"
cm_pair udaddy_$tag 7174 "udaddy -b $A -c 2" "udaddy -s $A -c 2"
flock -u 9
check "udaddy ($A): server's transcript" \
  transcript "$TMP/udaddy_$tag.srv" "udaddy: starting server" "receiving data transfers" \
  "sending replies" "data transfers complete" "test complete" "return status 0"
check "udaddy ($A): client's transcript" \
  transcript "$TMP/udaddy_$tag.cli" "udaddy: starting client" "udaddy: connecting" \
  "initiating data transfers" "receiving data transfers" "data transfers complete" \
  "test complete" "return status 0"
check "udaddy ($A): nothing on stderr" test ! -s "$TMP/udaddy_$tag.srv.err" -a \
  ! -s "$TMP/udaddy_$tag.cli.err"

p=$((17472 + PO))
cm_pair rdma_server_$tag $p "rdma_server -s $A -p $p" "rdma_client -s $A -p $p"
check "rdma_client ($A): ran to its end" \
  transcript "$TMP/rdma_server_$tag.cli" "rdma_client: start" "rdma_client: end 0"
check "rdma_server ($A): ran to its end" \
  transcript "$TMP/rdma_server_$tag.srv" "rdma_server: start" "rdma_server: end 0"

# cmtime prints "event: <EVENT>, error: <status>" for each connection rejected or
# unreachable, counts it as done and goes on; its server prints only failures.
p=$((17473 + PO))
cm_pair cmtime_$tag $p "cmtime -b $A -p $p" "cmtime -s $A -p $p -c 100" stop
check "cmtime ($A): no connection failed" \
  count_lines "$TMP/cmtime_$tag.cli" '^event: |error|fail' 0
row=' *: +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+'
check "cmtime ($A): client's transcript: every step and its row" \
  transcript "$TMP/cmtime_$tag.cli" "creating id" "resolving address" "resolving route" \
  "creating qp" "connecting" "disconnecting" "destroying id" \
  "step +total ms +max ms +min us +us / conn" "create id$row" "resolve addr$row" \
  "resolve route$row" "create qp$row" "connect$row" "disconnect$row" "destroy$row"
check "cmtime ($A): nothing on the client's stderr" test ! -s "$TMP/cmtime_$tag.cli.err"
check "cmtime ($A): the server printed nothing (it prints only failures)" \
  test ! -s "$TMP/cmtime_$tag.srv" -a ! -s "$TMP/cmtime_$tag.srv.err"

if [ "$FAMILY" = ipv4 ]; then
  MGID=00000000000000000000ffffef010203 # ::ffff:239.1.2.3
  mckey_pair mckey_v4 239.1.2.3 $MGID
else
  MGID=ff0e0000000000000000000000000005 # ff0e::5
  mckey_pair mckey_v6 ff0e::5 $MGID
fi
check "no membership is left behind" \
  test "$(grep -cE "@softverbs/mcast/$MGID/" /proc/net/unix)" -eq 0

# perftest -R resolves its own addresses with AF_INET hints, so ::1 is refused by
# perftest itself before it calls librdmacm (the same on rdma-core): IPv4 only.
if [ "$FAMILY" = ipv4 ]; then
  for t in "ib_send_lat 2" "ib_write_bw 65536" "ib_read_lat 2"; do
    read -r t size <<<"$t"
    WAIT_A='' cm_pair "${t}_R" 18530 "$t -R -p 18530 -s $size -n 1000" \
      "$t -R -p 18530 -s $size -n 1000 127.0.0.1"
    check "$t -R: one result row of $size bytes x 1000 iterations" \
      count_lines "$TMP/${t}_R.cli" "^ +$size +1000 +[0-9.]+" 1
  done
fi

finish
