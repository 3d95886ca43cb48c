#!/usr/bin/env bash
# Debian's unmodified RDMA programs between two hosts: two network namespaces joined by a
# veth pair (tests/apps/netns.sh), the server in A (10.77.0.1, fd77::1), the client in B
# (10.77.0.2, fd77::2), each under `softverbs run` with SOFTVERBS_WIRE=iwarp and bounded
# by timeout. Each case checks both exit statuses, what the programs print (as the
# one-host tests do: byte and iteration counts, -c's buffer check, rping -V's data,
# whole transcripts, perftest's result rows) and that the data crossed the veth pair
# (B's veth0 counters: at least the payload's bytes, or one packet per message each way,
# so a run that stayed on one host's shared memory cannot pass).
# The programs that exchange QPN/GID themselves (the pingpongs, perftest without -R, the
# walk-through) get on each side -g/-x with the index of that side's own address's GID
# (::ffff:10.77.0.1 in A, ::ffff:10.77.0.2 in B), read from `softverbs run ibv_devinfo -v`
# run in that namespace.
#
#   test_netns_pingpong.sh [BUILD_DIR] [CASE...]   the cases named (default: all)
#   test_netns_pingpong.sh [BUILD_DIR] --list      the cases
# BUILD_DIR defaults to $SOFTVERBS_BUILD or build/ beside tests/. Skips (77) without root.
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -d "${1:-}" ]; then
  BUILD=$1
  shift
else
  BUILD=${SOFTVERBS_BUILD:-$HERE/../../build}
fi

CASES=(rc_pingpong rc_pingpong_events rc_pingpong_1mib srq_pingpong uc_pingpong
       xsrq_pingpong ud_pingpong
       ud_pingpong_events rping_v4 rping_v6 ucmatose rdma_server cmtime walkthrough)
PERFTEST=(ib_send_lat ib_send_bw ib_write_lat ib_write_bw ib_read_lat ib_read_bw
          ib_atomic_lat ib_atomic_bw)
for t in "${PERFTEST[@]}"; do CASES+=("$t" "${t}_R"); done
CASES+=(ib_send_lat_UD ib_send_bw_UD) # UD datagrams: the UDP wire
# Completion-event mode (-e: each side sleeps on its completion channel), every program
# and connection type that takes it (perftest refuses -e for WRITE).
for t in ib_send_lat ib_send_bw ib_read_lat ib_read_bw ib_atomic_lat ib_atomic_bw \
         ib_send_lat_UC ib_send_bw_UC ib_send_lat_UD ib_send_bw_UD; do
  CASES+=("${t}_e")
done
# UCX's ucx_perftest on softverbs0:1: rc_verbs (iWARP) wired up over ud_verbs (UDP), and
# ud_verbs alone.
# ucp_put_bw changes its buffer while its WRITEs are out: with CRC32c on, the CRC must
# cover the bytes that went (a bad CRC once ended the connection).
CASES+=(ucx_rc_tag_lat ucx_rc_tag_bw ucx_rc_put_bw ucx_ud_tag_lat ucx_ud_tag_bw)
# RC over RoCE v2 (SOFTVERBS_WIRE=roce: the IBA's transport in UDP datagrams to port
# 4791) instead of iWARP: SEND, WRITE, READ and atomics, and with packets lost on the
# link (netem), which the transport's retransmission must make good.
CASES+=(rc_pingpong_roce rc_pingpong_1mib_roce srq_pingpong_roce walkthrough_roce
        ib_send_lat_roce ib_write_bw_roce ib_read_lat_roce ib_read_bw_roce
        ib_atomic_lat_roce rc_pingpong_roce_loss rc_pingpong_auto_roce ib_write_bw_roce_icrc
        uc_pingpong_roce ib_send_bw_UC_roce)
if [ "${1:-}" = --list ]; then
  printf '%s\n' "${CASES[@]}"
  exit 0
fi
for c in "$@"; do
  [[ " ${CASES[*]} " == *" $c "* ]] || { echo "unknown case '$c' (--list lists them)"; exit 2; }
done
[ $# -gt 0 ] || set -- "${CASES[@]}"

. "$HERE/lib.sh" "$BUILD"
. "$HERE/netns.sh"
[ -x "$SV" ] || { echo "$SV is not built"; exit 1; }
need ibv_rc_pingpong
need rping
need ucmatose
need rdma_server
need cmtime
need ib_send_lat
need ucx_perftest
# No SOFTVERBS_WIRE: a QP whose peer is on the other host moves to iWARP by itself.
# Both ends are softverbs: rdma_cm may take RFC 7306 (atomics) too.
export SOFTVERBS_CM_RFC7306=1
T=60 # seconds each program may take (timeout -k 5)

ns_pair
GA=$(ns_gid_index "$NS_A" 10.77.0.1)
GB=$(ns_gid_index "$NS_B" 10.77.0.2)
if [ -z "$GA" ] || [ -z "$GB" ]; then
  echo "FAIL: no GID for 10.77.0.1 in A ('$GA') or 10.77.0.2 in B ('$GB'):"
  ns_exec "$NS_A" 30 "$SV" run ibv_devinfo -v 2>&1 | grep -E 'GID|rror' | sed 's/^/    /'
  exit 1
fi
echo "GID index of ::ffff:10.77.0.1 in A: $GA; of ::ffff:10.77.0.2 in B: $GB"

# xpair NAME PORT SS_ADDR STOP SERVER_ARGS... -- CLIENT_ARGS...: the server program
# (under softverbs run) in A, once it listens on PORT at SS_ADDR (as ss prints it; ""
# any), the client in B. STOP "stop": the server serves until killed: it must still run
# when the client is done, and is then ended with TERM (143 is its clean end); "-" it
# must exit by itself (bounded: 10 s after the client, 3 s after a failed one, then TERM). stdout in
# $TMP/NAME.{srv,cli}, stderr in .srv.err/.cli.err. Sets XP_SRC, XP_CRC (statuses) and
# XP_BYTES, XP_PKTS (what crossed B's veth0 meanwhile).
xpair() {
  local name=$1 port=$2 ss_addr=$3 stop=$4 srv=() cli=() a b0 p0
  shift 4
  while [ $# -gt 0 ] && [ "$1" != -- ]; do srv+=("$1"); shift; done
  shift
  cli=("$@")
  b0=$(ns_link_count "$NS_B" bytes)
  p0=$(ns_link_count "$NS_B" packets)
  ns_bg "$NS_A" $T "$SV" run "${srv[@]}" >"$TMP/$name.srv" 2>"$TMP/$name.srv.err"
  local spid=$NS_PID
  XP_CRC=255
  if ns_wait_listen "$NS_A" "$port" "$ss_addr" $spid 15; then
    # (stdout line-buffered: what a client killed at its timeout printed is kept)
    ns_exec_watched "$NS_B" $T "$TMP/$name.stacks" "$SV" run stdbuf -oL "${cli[@]}" \
      >"$TMP/$name.cli" 2>"$TMP/$name.cli.err"
    XP_CRC=$?
  fi
  if [ "$stop" = stop ]; then
    if kill -0 $spid 2>/dev/null; then
      ns_wait_exit $spid 0
      XP_SRC=$?
      [ $XP_SRC -eq 143 ] && XP_SRC=0
    else
      wait $spid
      XP_SRC=$?
      echo "    $name: the server had already ended (status $XP_SRC) when its client was done"
      [ $XP_SRC -eq 0 ] && XP_SRC=1
    fi
  else
    # Once its client has failed, a server waiting for data would wait until its timeout.
    ns_wait_exit $spid "$( [ $XP_CRC -eq 0 ] && echo 10 || echo 3)"
    XP_SRC=$?
  fi
  XP_BYTES=$(($(ns_link_count "$NS_B" bytes) - b0))
  XP_PKTS=$(($(ns_link_count "$NS_B" packets) - p0))
  a=$(printf '%s ' "${cli[@]}")
  echo "  $name: server in A: ${srv[*]} (status $XP_SRC)"
  echo "  $name: client in B: ${a% } (status $XP_CRC); across the veth: $XP_BYTES bytes, $XP_PKTS packets"
}

# statuses NAME [late-cm]: both sides exited 0 (late-cm: rping's race at exit is
# accepted, see late_cm in lib.sh); shows the ends of the logs otherwise.
statuses() {
  local name=$1
  if [ "${2:-}" = late-cm ]; then
    late_cm "$TMP/$name.cli.err" $XP_CRC && XP_CRC=0
    late_cm "$TMP/$name.srv.err" $XP_SRC && XP_SRC=0
  fi
  check "$name: client (B) exits 0" test $XP_CRC -eq 0
  check "$name: server (A) exits 0" test $XP_SRC -eq 0
  if [ $XP_CRC -ne 0 ] || [ $XP_SRC -ne 0 ]; then
    ns_collect "$TMP/$name".{srv,cli}{,.err}
    if [ -s "$TMP/$name.stacks" ]; then
      echo "    --- the client hung: every thread's stack in A and B before its timeout"
      head -n 300 "$TMP/$name.stacks" | sed 's/^/      /'
    fi
  fi
}

# crossed NAME bytes|packets MIN: at least MIN bytes (packets) went through B's veth0.
crossed() {
  local n=$XP_BYTES
  [ "$2" = packets ] && n=$XP_PKTS
  check "$1: at least $3 $2 crossed the veth pair ($n)" test "$n" -ge "$3"
}

# pp NAME SIZE ITERS PROGRAM ARGS...: a pingpong with -c between the namespaces; each side
# prints exactly the bytes and iterations asked and nothing but its addresses.
pp() {
  local name=$1 size=$2 iters=$3 prog=$4 side p=18515
  shift 4
  xpair "$name" $p "" - "$prog" -p $p -g "$GA" -c -s "$size" -n "$iters" "$@" -- \
    "$prog" -p $p -g "$GB" -c -s "$size" -n "$iters" "$@" 10.77.0.1
  statuses "$name"
  for side in cli srv; do
    cat "$TMP/$name.$side.err" >>"$TMP/$name.$side"
    check "$name ($side): no invalid data" lacks "$TMP/$name.$side" "invalid data"
    check "$name ($side): $((2 * size * iters)) bytes in $iters iters" \
      count_lines "$TMP/$name.$side" "^$((2 * size * iters)) bytes in .* seconds = " 1
    check "$name ($side): prints nothing else" only_lines "$TMP/$name.$side" \
      '^  (local|remote) address: ' '^[0-9]+ bytes in ' '^[0-9]+ iters in '
  done
  check "$name: the server saw the client's GID" \
    contains "$TMP/$name.srv" "remote address: .* GID ::ffff:10.77.0.2$"
  crossed "$name" bytes $((2 * size * iters))
}

case_rc_pingpong() { pp rc_pingpong 4096 1000 ibv_rc_pingpong; }
case_rc_pingpong_events() { pp rc_pingpong_events 4096 1000 ibv_rc_pingpong -e; }
case_rc_pingpong_1mib() { pp rc_pingpong_1mib 1048576 200 ibv_rc_pingpong; }
case_srq_pingpong() { pp srq_pingpong 4096 1000 ibv_srq_pingpong; }
# UC: iWARP between softverbs hosts (nothing lost), RoCE v2's UC with SOFTVERBS_WIRE=roce.
case_uc_pingpong() { pp uc_pingpong 4096 1000 ibv_uc_pingpong; }
# XRC between hosts: RoCE v2's XRC (iWARP has none), chosen by softverbs itself.
# ibv_xsrq_pingpong has no data check (its -c is the number of clients): both print
# "success" once every test's messages came; 100 tests of 4096 bytes each way.
case_xsrq_pingpong() {
  local name=xsrq_pingpong p=18515 side u0
  u0=$(udp_out "$NS_B")
  xpair $name $p "" - ibv_xsrq_pingpong -p $p -g "$GA" -n 100 -m 1024 -- \
    ibv_xsrq_pingpong -p $p -g "$GB" -n 100 -m 1024 10.77.0.1
  statuses $name
  for side in cli srv; do
    check "$name ($side): success" count_lines "$TMP/$name.$side" "^success$" 1
  done
  check "$name: its packets went as UDP datagrams from B ($(($(udp_out "$NS_B") - u0)))" \
    test $(($(udp_out "$NS_B") - u0)) -ge 100
}
# UD between hosts: the UDP wire (each datagram 2048 bytes plus its headers).
case_ud_pingpong() { pp ud_pingpong 2048 1000 ibv_ud_pingpong; }
case_ud_pingpong_events() { pp ud_pingpong_events 2048 1000 ibv_ud_pingpong -e; }

# rping -v -V, 1000 pings: the client prints what the server wrote back (RDMA WRITE),
# the server what it read from the client (RDMA READ), each ping's data as rping built it.
rping_case() {
  local name=$1 a=$2 ss_addr=$3 p=17174
  xpair "$name" $p "$ss_addr" - rping -s -a "$a" -p $p -C 1000 -v -V -- \
    rping -c -a "$a" -p $p -C 1000 -v -V
  statuses "$name" late-cm
  rping_data 1000 "" >"$TMP/rping.want"
  rping_data 1000 "server " >"$TMP/rping.srv.want"
  check "$name: client got back every ping's data" diff -q "$TMP/rping.want" "$TMP/$name.cli"
  check "$name: server read every ping's data" diff -q "$TMP/rping.srv.want" "$TMP/$name.srv"
  check "$name: client found no mismatch (-V)" lacks "$TMP/$name.cli.err" "mismatch"
  crossed "$name" bytes $((2 * 64 * 1000))
}
case_rping_v4() { rping_case rping_v4 10.77.0.1 10.77.0.1; }
case_rping_v6() { rping_case rping_v6 fd77::1 '[fd77::1]'; }

case_ucmatose() {
  local p=17471
  xpair ucmatose $p 10.77.0.1 - ucmatose -b 10.77.0.1 -p $p -c 4 -C 20 -- \
    ucmatose -s 10.77.0.1 -p $p -c 4 -C 20
  statuses ucmatose
  check "ucmatose: server's transcript of 4 connections, 20 messages each" \
    transcript "$TMP/ucmatose.srv" "cmatose: starting server" "initiating data transfers" \
    "completing sends" "receiving data transfers" "data transfers complete" \
    "cmatose: disconnecting" "disconnected" "test complete" "return status 0"
  check "ucmatose: client's transcript" \
    transcript "$TMP/ucmatose.cli" "cmatose: starting client" "cmatose: connecting" \
    "receiving data transfers" "sending replies" "data transfers complete" "test complete" \
    "return status 0"
  check "ucmatose: nothing on stderr" test ! -s "$TMP/ucmatose.srv.err" -a \
    ! -s "$TMP/ucmatose.cli.err"
  # Each message's 100 bytes (ucmatose's -S) at least; not a packet each: the server's
  # sends wait for the client's first FPDU (RFC 5044 §7.1) and may leave in one segment.
  crossed ucmatose bytes $((2 * 4 * 20 * 100))
}

case_rdma_server() {
  local p=17472
  xpair rdma_server $p 10.77.0.1 - rdma_server -s 10.77.0.1 -p $p -- \
    rdma_client -s 10.77.0.1 -p $p
  statuses rdma_server
  check "rdma_client: ran to its end" \
    transcript "$TMP/rdma_server.cli" "rdma_client: start" "rdma_client: end 0"
  check "rdma_server: ran to its end" \
    transcript "$TMP/rdma_server.srv" "rdma_server: start" "rdma_server: end 0"
}

# cmtime: 100 connections set up and torn down; its server serves until killed and
# prints only failures.
case_cmtime() {
  local p=17473 row=' *: +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+'
  xpair cmtime $p 10.77.0.1 stop cmtime -b 10.77.0.1 -p $p -- cmtime -s 10.77.0.1 -p $p -c 100
  statuses cmtime
  check "cmtime: no connection failed" count_lines "$TMP/cmtime.cli" '^event: |error|fail' 0
  check "cmtime: client's transcript: every step and its row" \
    transcript "$TMP/cmtime.cli" "creating id" "resolving address" "resolving route" \
    "creating qp" "connecting" "disconnecting" "destroying id" \
    "step +total ms +max ms +min us +us / conn" "create id$row" "resolve addr$row" \
    "resolve route$row" "create qp$row" "connect$row" "disconnect$row" "destroy$row"
  check "cmtime: nothing on the client's stderr" test ! -s "$TMP/cmtime.cli.err"
  check "cmtime: the server printed nothing (it prints only failures)" \
    test ! -s "$TMP/cmtime.srv" -a ! -s "$TMP/cmtime.srv.err"
}

# ucx NAME LANE ITERS TLS ARGS...: a ucx_perftest pair across the namespaces, UCX_TLS=TLS
# on softverbs0:1 only (UCX_LOG_LEVEL=info prints the lanes); both exit 0, a sane Final:
# row of ITERS iterations, every lane of both sides LANE, and one packet per iteration
# at least across the veth pair.
ucx() {
  local name=$1 lane=$2 iters=$3 tls=$4 p=13377 side
  shift 4
  xpair "$name" $p "" - env UCX_TLS="$tls" UCX_NET_DEVICES=softverbs0:1 UCX_LOG_LEVEL=info \
    ucx_perftest -p $p -- env UCX_TLS="$tls" UCX_NET_DEVICES=softverbs0:1 UCX_LOG_LEVEL=info \
    ucx_perftest 10.77.0.1 -p $p -n "$iters" "$@"
  statuses "$name"
  check "$name: Final: row of $iters iterations" final "$TMP/$name.cli" "$iters"
  for side in cli srv; do
    cat "$TMP/$name.$side.err" >>"$TMP/$name.$side"
    check "$name ($side): lanes $lane only" lanes "$TMP/$name.$side" "$lane"
  done
  crossed "$name" packets "$iters"
}
case_ucx_rc_tag_lat() { ucx ucx_rc_tag_lat rc_verbs/softverbs0:1 10000 rc_verbs,ud_verbs:aux -t tag_lat; }
case_ucx_rc_tag_bw() {
  ucx ucx_rc_tag_bw rc_verbs/softverbs0:1 500 rc_verbs,ud_verbs:aux -t tag_bw -s 1048576
}
case_ucx_rc_put_bw() {
  ucx ucx_rc_put_bw rc_verbs/softverbs0:1 500 rc_verbs,ud_verbs:aux -t ucp_put_bw -s 1048576
}
case_ucx_ud_tag_lat() { ucx ucx_ud_tag_lat ud_verbs/softverbs0:1 10000 ud_verbs -t tag_lat; }
case_ucx_ud_tag_bw() { ucx ucx_ud_tag_bw ud_verbs/softverbs0:1 200 ud_verbs -t tag_bw -s 1048576; }

# The walk-through example (examples/walkthrough.c): WRITE, 16 WRITEs, READ back, SEND,
# each checked byte by byte by the program itself.
case_walkthrough() {
  local p=18699 wt=$BUILD/bin/walkthrough
  [ -x "$wt" ] || { check "walkthrough: $wt is built" false; return; }
  xpair walkthrough $p "" - "$wt" -p $p -g "$GA" -- "$wt" -p $p -g "$GB" 10.77.0.1
  statuses walkthrough
  check "walkthrough: the client passed all 11 steps" \
    contains "$TMP/walkthrough.cli" "all 11 steps passed"
  check "walkthrough: the server passed all 11 steps" \
    contains "$TMP/walkthrough.srv" "all 11 steps passed"
  crossed walkthrough bytes $((4096 + 16 * 4096 + 69632 + 4096))
}

# perftest NAME: NAME is a perftest program, or one with _R (connected through rdma_cm,
# -R), _UD or _UC (that connection type), then _e (completion events, -e); exactly one
# result row of its size and iteration count, no error printed, and its traffic across
# the veth pair: one packet per message each way (latency), or the payload's bytes
# (bandwidth).
perftest_case() {
  local name=$1 prog=${1%_e} size iters p=18600 side srv cli ud=() ev=()
  [ "$prog" != "$name" ] && ev=(-e)
  prog=${prog%_R}
  case $prog in
  *_UD) prog=${prog%_UD}; ud=(-c UD) ;;
  *_UC) prog=${prog%_UC}; ud=(-c UC) ;;
  esac
  case $prog in
  *_lat) iters=1000 ;;
  *_bw) iters=5000 ;;
  esac
  case $prog in
  ib_atomic_*) size=8 ;;
  *_bw) [ "${ud[*]}" = "-c UD" ] && size=4096 || size=65536 ;; # UD: one packet of the MTU
  *_lat) size=2 ;;
  *) size=65536 ;;
  esac
  local args=(-d softverbs0 -p "$p" -s "$size" -n "$iters" "${ud[@]}" "${ev[@]}")
  if [ "${name%_e}" = "${prog}_R" ]; then
    srv=("$prog" -R "${args[@]}")
    cli=("$prog" -R "${args[@]}" 10.77.0.1)
  else
    srv=("$prog" -x "$GA" "${args[@]}")
    cli=("$prog" -x "$GB" "${args[@]}" 10.77.0.1)
  fi
  xpair "$name" $p "" - "${srv[@]}" -- "${cli[@]}"
  statuses "$name"
  check "$name: one result row of $size bytes x $iters iterations" \
    rows "$TMP/$name.cli" $iters $size
  for side in cli srv; do
    cat "$TMP/$name.$side.err" >>"$TMP/$name.$side"
    check "$name ($side): no error printed" no_error "$TMP/$name.$side"
  done
  case $prog in
  *_lat) crossed "$name" packets $((2 * iters)) ;;
  ib_atomic_bw) crossed "$name" bytes $((16 * iters)) ;;
  *) crossed "$name" bytes $((size * iters)) ;;
  esac
}

# udp_out NS: the UDP datagrams NS has sent (its /proc/net/snmp).
udp_out() {
  ip netns exec "$1" awk '$1 == "Udp:" && $2 ~ /^[0-9]+$/ { print $5 }' /proc/net/snmp
}

# roce CASE: CASE (a pingpong, the walk-through or perftest) with both ends' RC QPs on
# RoCE v2, and its traffic as UDP datagrams from B (iWARP would send none).
roce() {
  local name=$1 base=${1%_roce} u0
  u0=$(udp_out "$NS_B")
  export SOFTVERBS_WIRE=roce
  if declare -F "case_$base" >/dev/null; then "case_$base"; else perftest_case "$base"; fi
  unset SOFTVERBS_WIRE
  check "$name: its packets went as UDP datagrams from B ($(($(udp_out "$NS_B") - u0)))" \
    test $(($(udp_out "$NS_B") - u0)) -ge 10
}

# 2 % of the RoCE packets leaving each side dropped (nftables; the kernel may have no
# netem): every message still arrives once, whole (-c checks every byte), the transport
# timer and sequence NAKs sending again.
LOSS_RULES='table inet svloss {
  chain out {
    type filter hook output priority 0;
    udp dport 4791 numgen random mod 100 < 2 counter drop
  }
}'
case_rc_pingpong_roce_loss() {
  local ns ok=1 dropped
  for ns in "$NS_A" "$NS_B"; do
    echo "$LOSS_RULES" | ip netns exec "$ns" nft -f - 2>/dev/null || ok=0
  done
  if [ $ok -eq 0 ]; then
    check "rc_pingpong_roce_loss: nftables drops packets in the namespaces" false
  else
    export SOFTVERBS_WIRE=roce
    pp rc_pingpong_roce_loss 4096 300 ibv_rc_pingpong
    unset SOFTVERBS_WIRE
    dropped=$(ip netns exec "$NS_B" nft list table inet svloss | awk '/counter/ { print $(NF - 3) }')
    check "rc_pingpong_roce_loss: B's link dropped packets (${dropped:-?})" test "${dropped:-0}" -gt 0
  fi
  for ns in "$NS_A" "$NS_B"; do
    ip netns exec "$ns" nft delete table inet svloss 2>/dev/null
  done
}

# The packets of a message go in one sendmsg with UDP_SEGMENT, and the kernel gives each
# segment its own IPv4 identification, which the ICRC covers: captured on B's link, every
# packet's ICRC is right for the header it really had (what rxe or a NIC checks; a
# softverbs receiver solves for the identification and would not notice), and some had an
# identification other than 0 (the batches were used). A veth pair carries a GSO send
# whole: B's end takes one segment at a time here (gso_max_segs 1), so that the kernel
# cuts the batches before the link, as before a NIC without segmentation offload.
case_ib_write_bw_roce_icrc() {
  local name=ib_write_bw_roce_icrc out
  if ! command -v tshark >/dev/null; then
    check "$name: tshark is installed" false
    return
  fi
  ip -n "$NS_B" link set dev veth0 gso_max_segs 1 ||
    { check "$name: B's link takes one segment at a time" false; return; }
  ns_capture_start "$NS_B" veth0 "$TMP/$name.pcapng" "$NS_A" 10.77.0.2 "udp port 4791" ||
    { check "$name: tshark captures on B's link" false; return; }
  export SOFTVERBS_WIRE=roce
  xpair $name 18600 "" - ib_write_bw -x "$GA" -d softverbs0 -p 18600 -s 65536 -m 1024 -n 200 -- \
    ib_write_bw -x "$GB" -d softverbs0 -p 18600 -s 65536 -m 1024 -n 200 10.77.0.1
  unset SOFTVERBS_WIRE
  statuses $name
  ns_capture_stop || check "$name: the capture ended with every packet in it" false
  tshark -r "$TMP/$name.pcapng" -F pcap -w "$TMP/$name.pcap" 2>/dev/null
  out=$("$BUILD/bin/icrc_pcap" "$TMP/$name.pcap")
  echo "  $name: $out"
  check "$name: every RoCE packet's ICRC is right for its IP header" "$BUILD/bin/icrc_pcap" \
    "$TMP/$name.pcap"
  check "$name: at least 200 x 64 packets captured" \
    test "$(echo "$out" | awk '{ print $2 }')" -ge 12800
  check "$name: packets went as GSO segments (identification not 0)" \
    test "$(echo "$out" | awk '{ print $4 }')" -gt 100
  ip -n "$NS_B" link set dev veth0 gso_max_segs 65535
}

# A peer host where no softverbs answers (as a NIC's or rxe's): the client, left to choose,
# finds nobody on that host's softverbs port and takes RoCE v2 by itself. (The server
# plays the NIC: RoCE forced; the client probes a port nobody listens on.)
case_rc_pingpong_auto_roce() {
  local name=rc_pingpong_auto_roce p=18515 side u0
  u0=$(udp_out "$NS_B")
  xpair $name $p "" - env SOFTVERBS_WIRE=roce ibv_rc_pingpong -p $p -g "$GA" -c -s 4096 -n 500 -- \
    env SOFTVERBS_IWARP_PORT=19999 ibv_rc_pingpong -p $p -g "$GB" -c -s 4096 -n 500 10.77.0.1
  statuses $name
  for side in cli srv; do
    check "$name ($side): 4096000 bytes in 500 iters" \
      count_lines "$TMP/$name.$side" "^4096000 bytes in .* seconds = " 1
  done
  check "$name: the client's packets went as UDP datagrams ($(($(udp_out "$NS_B") - u0)))" \
    test $(($(udp_out "$NS_B") - u0)) -ge 1000
}

for c in "$@"; do
  echo "== $c"
  if declare -F "case_$c" >/dev/null; then
    "case_$c"
  elif [[ $c == *_roce ]]; then
    roce "$c"
  else
    perftest_case "$c"
  fi
done
finish
