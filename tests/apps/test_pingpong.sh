#!/usr/bin/env bash
# Debian's unmodified rdma-core examples, server and client as two processes on
# softverbs: each finishes its iterations and reports its throughput (ibv_xsrq_pingpong:
# "success", also with three client processes at once).
. "$(dirname "$0")/lib.sh" "$1"
need ibv_rc_pingpong
P=18601

P=$((P + 1))
pair rc_gid $P ibv_rc_pingpong -p $P -g 0
check "rc_gid: reports throughput" contains "$TMP/rc_gid.cli" "iters in"
P=$((P + 1))
pair rc_lid $P ibv_rc_pingpong -p $P
check "rc_lid: reports throughput" contains "$TMP/rc_lid.cli" "iters in"
P=$((P + 1))
pair rc_events $P ibv_rc_pingpong -p $P -e
check "rc_events: reports throughput" contains "$TMP/rc_events.cli" "iters in"
P=$((P + 1))
pair rc_1mib $P ibv_rc_pingpong -p $P -g 0 -s 1048576 -n 200
check "rc_1mib: reports throughput" contains "$TMP/rc_1mib.cli" "iters in"
P=$((P + 1))
pair uc $P ibv_uc_pingpong -p $P -g 0
check "uc: reports throughput" contains "$TMP/uc.cli" "iters in"
P=$((P + 1))
pair ud_gid $P ibv_ud_pingpong -p $P -g 0
check "ud_gid: reports throughput" contains "$TMP/ud_gid.cli" "iters in"
P=$((P + 1))
pair ud_lid $P ibv_ud_pingpong -p $P -e
check "ud_lid: reports throughput" contains "$TMP/ud_lid.cli" "iters in"
P=$((P + 1))
pair srq $P ibv_srq_pingpong -p $P -g 0
check "srq: reports throughput" contains "$TMP/srq.cli" "iters in"

# XRC: each side a domain, SRQs, XRC_SEND and XRC_RECV QPs; prints "success".
P=$((P + 1))
pair xsrq_gid $P ibv_xsrq_pingpong -p $P -g 0
check "xsrq_gid: client succeeds" contains "$TMP/xsrq_gid.cli" "^success"
check "xsrq_gid: server succeeds" contains "$TMP/xsrq_gid.srv" "^success"
# One server, three client processes at once, LID addressing, waiting on events.
P=$((P + 1))
timeout 60 "$SV" run ibv_xsrq_pingpong -p $P -c 3 -n 50 -e >"$TMP/xsrq3.srv" 2>&1 &
srv=$!
wait_listen "$P" $srv
pids=()
for i in 1 2 3; do
  timeout 60 "$SV" run ibv_xsrq_pingpong -p $P -n 50 -e 127.0.0.1 >"$TMP/xsrq3.cli$i" 2>&1 &
  pids+=($!)
done
for i in 1 2 3; do
  wait "${pids[$((i - 1))]}"
  check "xsrq, 3 clients: client $i exits 0 with success" \
    test $? -eq 0 -a -n "$(grep '^success' "$TMP/xsrq3.cli$i")"
done
wait $srv
check "xsrq, 3 clients: server exits 0 with success" \
  test $? -eq 0 -a -n "$(grep '^success' "$TMP/xsrq3.srv")"
finish
