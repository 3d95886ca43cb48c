#!/usr/bin/env bash
# Debian's unmodified rdma-core examples, server and client as two processes on
# softverbs: each finishes its iterations and reports its throughput.
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
finish
