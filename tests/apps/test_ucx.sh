#!/usr/bin/env bash
# Debian's unmodified UCX 1.13 on softverbs, one host (issue 14):
# - ucx_info -d lists memory domain softverbs0 with transports rc_verbs and ud_verbs on
#   device softverbs0:1, and the rdmacm connection manager;
# - ucx_perftest pairs (server and client on 127.0.0.1, each bounded) complete over
#   UCX_TLS=rc_verbs,ud_verbs:aux (tag latency, UCT put bandwidth at 8 B / 8 KiB / 1 MiB
#   with short / bcopy / zcopy, UCP put bandwidth at 1 MiB) and over UCX_TLS=ud_verbs (tag
#   latency, tag bandwidth at 1 MiB, UCT active-message bandwidth): the "Final:" row has
#   the iterations asked and figures above zero, and UCX's own report of the lanes
#   (UCX_LOG_LEVEL=info, "ep_cfg[N]: tag(rc_verbs/softverbs0:1)") names softverbs and
#   nothing else — no self, shared memory or tcp shortcut;
# - what softverbs does not do fails fast and says so: UCX_TLS=rc_mlx5 or dc_mlx5 (both
#   sides exit non-zero naming the transport), UCT -x rc_mlx5, memory type cuda;
# - UCX's rdmacm connection manager on softverbs' rdma_cm: io_demo connects by address and
#   moves 2000 reads and writes whose data it checks, over rc_verbs and over ud_verbs.
# ucx_perftest checks no data (MPI does: test_mpi.sh); these check that the runs complete
# on the transports asked. The figures are printed (bench/ measures).
. "$(dirname "$0")/lib.sh" "$1"
need ucx_info
need ucx_perftest
need_view
P=18830
export UCX_NET_DEVICES=softverbs0:1 UCX_LOG_LEVEL=info

# ucx_info -d: the transports of memory domain softverbs0, as "TRANSPORT DEVICE" lines.
timeout 60 "$SV" run ucx_info -d >"$TMP/info" 2>&1
check "ucx_info -d exits 0" test $? -eq 0
awk '/^# Memory domain:/ { md = $4 } /^# Connection manager:/ { md = "" }
     md == "softverbs0" && /Transport:/ { t = $3 }
     md == "softverbs0" && /Device:/ && t != "" { print t, $3; t = "" }' "$TMP/info" >"$TMP/info.tl"
check "ucx_info -d: memory domain softverbs0 with rc_verbs and ud_verbs on softverbs0:1" \
  transcript "$TMP/info.tl" "rc_verbs softverbs0:1" "ud_verbs softverbs0:1"
check "ucx_info -d: connection manager rdmacm" contains "$TMP/info" "^# Connection manager: rdmacm"

# perf NAME ITERS ARGS...: a ucx_perftest pair (the server takes the test from the client)
# on a port of its own, both exit 0, sane Final: row.
perf() {
  local name=$1 iters=$2; shift 2
  P=$((P + 1))
  timeout 60 "$SV" run ucx_perftest -p $P >"$TMP/$name.srv" 2>&1 &
  local srv=$!
  wait_listen $P $srv
  timeout 60 "$SV" run ucx_perftest 127.0.0.1 -p $P -n "$iters" "$@" >"$TMP/$name.cli" 2>&1
  local crc=$?
  wait $srv
  local src=$?
  check "$name: client exits 0" test $crc -eq 0
  check "$name: server exits 0" test $src -eq 0
  if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
    grep -hE 'ERROR|WARN' "$TMP/$name.srv" "$TMP/$name.cli" | head -n 5 | sed 's/^/    /'
  fi
  check "$name: Final: row of $iters iterations" final "$TMP/$name.cli" "$iters"
}

# ucp NAME LANE ITERS ARGS...: perf, and both sides' lanes are LANE only.
ucp() {
  local name=$1 lane=$2; shift 2
  perf "$name" "$@"
  check "$name: client lanes $lane only" lanes "$TMP/$name.cli" "$lane"
  check "$name: server lanes $lane only" lanes "$TMP/$name.srv" "$lane"
}

RC=rc_verbs/softverbs0:1
UD=ud_verbs/softverbs0:1
export UCX_TLS=rc_verbs,ud_verbs:aux
ucp rc-tag_lat $RC 10000 -t tag_lat
ucp rc-tag_bw-1m $RC 500 -t tag_bw -s 1048576
ucp rc-ucp_put_bw-1m $RC 500 -t ucp_put_bw -s 1048576
# UCT: the transport and device by name (-x, -d), each size with the layout that carries it
# (rc_verbs: put_short <= 64 B, put_bcopy <= 8 KiB + 64).
perf rc-put_bw-8-short 10000 -t put_bw -x rc_verbs -d softverbs0:1 -s 8 -D short
perf rc-put_bw-8k-bcopy 10000 -t put_bw -x rc_verbs -d softverbs0:1 -s 8192 -D bcopy
perf rc-put_bw-1m-zcopy 500 -t put_bw -x rc_verbs -d softverbs0:1 -s 1048576 -D zcopy

export UCX_TLS=ud_verbs
ucp ud-tag_lat $UD 10000 -t tag_lat
ucp ud-tag_bw-1m $UD 200 -t tag_bw -s 1048576
perf ud-am_bw-4000-bcopy 10000 -t am_bw -x ud_verbs -d softverbs0:1 -s 4000 -D bcopy

# UCX's rdmacm connection manager (UCX_SOCKADDR_TLS_PRIORITY=rdmacm: no other CM): io_demo
# (ucx-utils) connects a client endpoint to a listener by address, through softverbs'
# rdma_cm, and moves 2000 reads and writes of 8 B..64 KiB whose data it checks (-q).
# io_count FILE N: io_demo's reports (one per second: "[DEMO] total min:A max:B total:C | ...",
# the operations of that interval) add up to N.
io_count() {
  local got
  got=$(sed -nE 's/.*\[DEMO\] total min:[0-9]+ max:[0-9]+ total:([0-9]+) .*/\1/p' "$1" |
        awk '{ n += $1 } END { print n + 0 }')
  [ "$got" -eq "$2" ] || { echo "    $(basename "$1"): $got operations reported, expected $2"; return 1; }
}
# io NAME TLS LANE: the client exits with status OK after all 2000, its lanes are LANE
# only, and the server (which serves until stopped) is still up.
io() {
  local name=$1 tls=$2 lane=$3
  # shellcheck disable=SC2054 # (commas inside arguments: io_demo's lists)
  local args=(-q -o write,read -i 2000 -d 8:65536 -c 1)
  P=$((P + 1))
  UCX_TLS=$tls UCX_SOCKADDR_TLS_PRIORITY=rdmacm timeout 60 "$SV" run io_demo -p $P "${args[@]}" \
    >"$TMP/$name.srv" 2>&1 &
  local srv=$!
  wait_listen $P $srv
  UCX_TLS=$tls UCX_SOCKADDR_TLS_PRIORITY=rdmacm timeout 60 "$SV" run io_demo -p $P "${args[@]}" \
    127.0.0.1 >"$TMP/$name.cli" 2>&1
  local crc=$?
  check "$name: client exits 0 (exit $crc)" test $crc -eq 0
  check "$name: client status OK" contains "$TMP/$name.cli" "Client exit with status 'OK'"
  check "$name: 2000 checked reads and writes" io_count "$TMP/$name.cli" 2000
  grep -o 'read [0-9.]* MBs.*write [0-9.]* MBs' "$TMP/$name.cli" | tail -n 1 | sed 's/^/    /'
  check "$name: client lanes $lane only" lanes "$TMP/$name.cli" "$lane"
  check "$name: server still serving" kill -0 $srv
  kill $srv 2>/dev/null
  wait $srv
  check "$name: server saw no error" count_lines "$TMP/$name.srv" "ERROR|Assertion" 0
}
if command -v io_demo >/dev/null; then
  io rdmacm-rc rc_verbs $RC
  io rdmacm-ud ud_verbs $UD
else
  echo "SKIP rdmacm: io_demo is not installed"
fi

# Bad input: fails within the bound, non-zero, and the error names what is missing.
# bad NAME PATTERN ARGS...: a pair as perf; both sides exit non-zero (not the timeout's
# 124) within 30 s, and the client says PATTERN.
bad() {
  local name=$1 pattern=$2 start=$SECONDS; shift 2
  P=$((P + 1))
  timeout 60 "$SV" run ucx_perftest -p $P >"$TMP/$name.srv" 2>&1 &
  local srv=$!
  wait_listen $P $srv
  timeout 60 "$SV" run ucx_perftest 127.0.0.1 -p $P -n 1000 "$@" >"$TMP/$name.cli" 2>&1
  local crc=$?
  wait $srv
  local src=$?
  check "$name: client fails (exit $crc)" test $crc -ne 0 -a $crc -ne 124
  check "$name: server fails (exit $src)" test $src -ne 0 -a $src -ne 124
  check "$name: within 30 s ($((SECONDS - start)) s)" test $((SECONDS - start)) -lt 30
  check "$name: client says '$pattern'" contains "$TMP/$name.cli" "$pattern"
}
UCX_TLS=rc_mlx5 bad bad-rc_mlx5 "transport 'rc_mlx5' is not available" -t tag_lat
UCX_TLS=dc_mlx5 bad bad-dc_mlx5 "transport 'dc_mlx5' is not available" -t tag_lat
UCX_TLS=rc_mlx5 bad bad-rc_mlx5-uct "Cannot use rc_mlx5/softverbs0:1" \
  -t put_bw -x rc_mlx5 -d softverbs0:1
# A memory type Debian's UCX has no module for: refused at the command line (one process,
# loopback: no server waits for it).
start=$SECONDS
UCX_TLS=rc_verbs,ud_verbs:aux timeout 60 "$SV" run ucx_perftest -l -t tag_lat -n 100 -m cuda \
  >"$TMP/bad-cuda" 2>&1
rc=$?
check "bad-cuda: fails (exit $rc)" test $rc -ne 0 -a $rc -ne 124
check "bad-cuda: within 30 s" test $((SECONDS - start)) -lt 30
check "bad-cuda: says 'unsupported memory type'" contains "$TMP/bad-cuda" 'unsupported memory type: "cuda"'
finish
