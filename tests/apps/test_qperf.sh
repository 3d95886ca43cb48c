#!/usr/bin/env bash
# Debian's unmodified qperf on softverbs, in its default mode (each side waits on its
# completion channel): rc_lat, rc_bw, uc_bw, ud_lat, ud_bw on one host; as root, across
# two network namespaces (tests/apps/netns.sh: the server in A, the client in B), rc_lat
# and rc_bw connected by rdma_cm (-cm1, as qperf's manual asks for iWARP; without it qperf
# addresses the peer by LID alone, which on a RoCE port, a NIC's or ours, reaches no
# other host: its UC and UD tests have no -cm1). Each test must report a non-zero figure
# and no error; ud_bw must lose under 1 % of what it sent (its send and receive message
# counts, -vvs), or no more than qperf leaves in flight when its timer ends the test. qperf's server serves until killed (TERM, its status then 143).
. "$(dirname "$0")/lib.sh" "$1"
. "$(dirname "$0")/netns.sh"
need qperf
P=19766 # qperf's listen port (its default, 19765, is left to the user's own qperf)
TESTS=(rc_lat rc_bw uc_bw ud_lat ud_bw)

# figure FILE TEST: the test's first figure (latency or bandwidth) is a positive number.
figure() {
  local v
  v=$(awk -v t="$2:" '$1 == t { f = 1; next } f && /=/ { print $3; exit }' "$1")
  [ -n "$v" ] && awk -v v="$v" 'BEGIN { exit !(v > 0) }' && return 0
  echo "    $2: no figure in $(basename "$1"):"
  sed 's/^/      /' "$1" | head -n 8
  return 1
}

# loss FILE: ud_bw's receive count is at least 99 % of its send count (-e 6: the counts
# with six significant digits), or short of it by no more than 2048: qperf counts a send
# when it posts it and a receive when it polls it, and keeps up to 1024 (its NCQE) posted
# sends and 1024 unpolled receive completions, so that many are "lost" on any device when
# the timer stops both sides (one CI run under load sent only 156 and lost 2).
loss() {
  local s r
  s=$(awk '$1 == "send_msgs" { print $3 * ($4 == "million" ? 1e6 : ($4 == "thousand" ? 1e3 : 1)) }' "$1")
  r=$(awk '$1 == "recv_msgs" { print $3 * ($4 == "million" ? 1e6 : ($4 == "thousand" ? 1e3 : 1)) }' "$1")
  echo "    ud_bw: sent $s, received $r messages"
  [ -n "$s" ] && [ -n "$r" ] && awk -v s="$s" -v r="$r" 'BEGIN { exit !(s > 0 && (r >= 0.99 * s || s - r <= 2048)) }'
}

# run_tests WHERE CLIENT_PREFIX...: each of TESTS against the server already listening,
# with the options in OPTS.
run_tests() {
  local where=$1 t out; shift
  for t in "${TESTS[@]}"; do
    out="$TMP/$where.$t"
    "$@" "$SV" run qperf -lp $P -t 2 -e 6 -vvs "${OPTS[@]}" "$ADDR" "$t" >"$out" 2>&1
    check "$where $t: qperf exits 0" test $? -eq 0
    check "$where $t: a figure" figure "$out" "$t"
    check "$where $t: no error" no_error "$out"
    [ "$t" = ud_bw ] && check "$where ud_bw: under 1 % lost" loss "$out"
  done
}

# One host.
timeout 300 "$SV" run qperf -lp $P >"$TMP/srv" 2>&1 &
srv=$!
if wait_listen $P $srv; then
  ADDR=127.0.0.1
  OPTS=()
  run_tests one-host timeout 60
fi
kill $srv 2>/dev/null
wait $srv
check "one host: the server ran until stopped (143)" test $? -eq 143

# Two hosts.
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP (two hosts): not root (network namespaces)"
else
  ns_pair
  ns_bg "$NS_A" 300 "$SV" run qperf -lp $P >"$TMP/srv2" 2>&1
  srv=$NS_PID
  if ns_wait_listen "$NS_A" $P "" $srv 15; then
    ADDR=10.77.0.1
    OPTS=(-cm1)
    TESTS=(rc_lat rc_bw)
    run_tests two-hosts ns_exec "$NS_B" 60
  fi
  ns_wait_exit $srv 0
  check "two hosts: the server ran until stopped (143)" test $? -eq 143
fi
finish
