#!/usr/bin/env bash
# Debian's unmodified rdma-core examples, server and client as two processes on
# softverbs. The RC, UC, UD and SRQ pingpongs run with -c (--chk: the client puts a known
# byte at the start of every page of its buffer, the server checks each page of the last
# message it received and prints "invalid data in page N" — it still exits 0, so the
# transcripts are read); each side must print exactly the bytes and iterations asked
# (bytes = 2 x size x iterations) and nothing but its addresses and those two lines.
# ibv_xsrq_pingpong has no --chk (its -c is the number of clients): it must print
# "success", also with three client processes at once, and nothing else.
. "$(dirname "$0")/lib.sh" "$1"
need ibv_rc_pingpong
P=18601

# pp NAME SIZE ITERS PROGRAM ARGS...: a checked pair with -c, -s SIZE, -n ITERS.
pp() {
  local name=$1 size=$2 iters=$3 side; shift 3
  P=$((P + 1))
  pair "$name" $P "$@" -p $P -c -s "$size" -n "$iters"
  for side in cli srv; do
    check "$name ($side): no invalid data" lacks "$TMP/$name.$side" "invalid data"
    check "$name ($side): $((2 * size * iters)) bytes in $iters iters" \
      count_lines "$TMP/$name.$side" "^$((2 * size * iters)) bytes in .* seconds = " 1
    check "$name ($side): $iters iters" count_lines "$TMP/$name.$side" "^$iters iters in " 1
    check "$name ($side): prints nothing else" only_lines "$TMP/$name.$side" \
      '^  (local|remote) address: ' '^[0-9]+ bytes in ' '^[0-9]+ iters in '
  done
}

pp rc_gid 4096 1000 ibv_rc_pingpong -g 0
pp rc_lid 4096 1000 ibv_rc_pingpong
pp rc_events 4096 1000 ibv_rc_pingpong -e
pp rc_1mib 1048576 200 ibv_rc_pingpong -g 0
pp uc 4096 1000 ibv_uc_pingpong -g 0
pp ud_gid 1024 1000 ibv_ud_pingpong -g 0
pp ud_lid 1024 1000 ibv_ud_pingpong -e
pp srq 4096 1000 ibv_srq_pingpong -g 0

xsrq_only() { only_lines "$1" '^ +(local|remote): LID ' '^success$'; }

# XRC: each side a domain, SRQs, XRC_SEND and XRC_RECV QPs; prints "success".
P=$((P + 1))
pair xsrq_gid $P ibv_xsrq_pingpong -p $P -g 0
check "xsrq_gid: client succeeds" contains "$TMP/xsrq_gid.cli" "^success"
check "xsrq_gid: server succeeds" contains "$TMP/xsrq_gid.srv" "^success"
check "xsrq_gid: client prints nothing else" xsrq_only "$TMP/xsrq_gid.cli"
check "xsrq_gid: server prints nothing else" xsrq_only "$TMP/xsrq_gid.srv"
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
  check "xsrq, 3 clients: client $i prints nothing else" xsrq_only "$TMP/xsrq3.cli$i"
done
wait $srv
check "xsrq, 3 clients: server exits 0 with success" \
  test $? -eq 0 -a -n "$(grep '^success' "$TMP/xsrq3.srv")"
check "xsrq, 3 clients: server prints nothing else" xsrq_only "$TMP/xsrq3.srv"
check "xsrq, 3 clients: server connected three clients" \
  count_lines "$TMP/xsrq3.srv" '^ +remote: LID ' 3
finish
