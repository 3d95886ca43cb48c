#!/usr/bin/env bash
# Debian's tshark decodes what softverbs' iWARP wire puts on the wire between two hosts.
# tshark captures on veth0 in namespace A (tests/apps/netns.sh) from before the first
# connection (the dissectors find MPA by its request, so the handshake must be in the
# capture) until after the last; the capture is started and stopped on probes (pings
# from B with a known ICMP identifier that tshark must have printed), not on sleeps.
# Debian's unmodified programs run across, server in A, client in B, under
# `softverbs run` with SOFTVERBS_WIRE=iwarp: rping (Send, RDMA Read, RDMA Write, through
# rdma_cm), perftest's ib_send_lat, ib_write_lat, ib_read_lat (verbs-only setup) and
# ib_atomic_lat (RFC 7306 atomics, between softverbs hosts). Then, for every TCP
# connection that starts with an MPA request:
#   - the MPA request and a reply that does not reject, CRC negotiated (tshark checks
#     CRCs only then; softverbs asks for them by default between its hosts);
#   - every byte after the handshake, in each direction, is inside an FPDU tshark decoded
#     (iwarp_mpa.ulpdulength + pad + CRC): no FPDU went undecoded;
#   - every FPDU's CRC reads "(Good CRC32)" in tshark -V, none "(Bad CRC32";
#   - no _ws.malformed, no expert info of severity error, none of warning or above in an
#     iwarp_mpa or iwarp_ddp_rdmap frame;
#   - the RDMAP opcodes each program must produce are there.
#
#   test_iwarp_tshark.sh [BUILD_DIR]             the programs above (needs the wire)
#   test_iwarp_tshark.sh [BUILD_DIR] --selftest  the same checks on a reference stream
#       (tests/apps/iwarp_frames.py) with one FPDU per segment, many per segment and
#       FPDUs split across segments (all must pass), and with one bad CRC (must fail the
#       CRC check, and only it): the checks work with this tshark before the wire does.
# Skips (77) without root or tshark.
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -d "${1:-}" ]; then
  BUILD=$1
  shift
else
  BUILD=${SOFTVERBS_BUILD:-$HERE/../../build}
fi
MODE=${1:-programs}
case $MODE in
programs | --selftest) ;;
*) echo "usage: $0 [BUILD_DIR] [--selftest]"; exit 2 ;;
esac

. "$HERE/lib.sh" "$BUILD"
. "$HERE/netns.sh"
need tshark
need python3
need ping
export SOFTVERBS_WIRE=iwarp
ns_pair

# Wireshark's RPC-over-RDMA heuristic claims Send payloads and fails on any that are not
# RPC (the programs' bytes): it is not the iWARP decode under test.
TSHARK_OPTS="--disable-protocol rpcordma"

# decode NAME: tshark's view of $TMP/NAME.pcapng, one line per TCP frame, in
# $TMP/NAME.fields; the CRC check lines of tshark -V in $TMP/NAME.crc.
decode() {
  local cap=$TMP/$1.pcapng
  tshark -n -r "$cap" $TSHARK_OPTS -Y tcp -T fields -E separator='|' -e frame.number -e tcp.stream \
    -e tcp.srcport -e tcp.len -e tcp.seq -e iwarp_mpa.key.req -e iwarp_mpa.key.rep \
    -e iwarp_mpa.pdlength -e iwarp_mpa.crc_flag -e iwarp_mpa.rej_flag \
    -e iwarp_mpa.ulpdulength -e iwarp_rdma.opcode >"$TMP/$1.fields" 2>"$TMP/$1.tshark.err"
  tshark -n -r "$cap" $TSHARK_OPTS -V -Y iwarp_mpa 2>/dev/null | grep -E '^ *CRC check: ' >"$TMP/$1.crc"
}

# streams NAME: for every MPA connection, per direction, the bytes after the handshake
# against the bytes of the FPDUs decoded; prints "FPDUS N" (all FPDUs) on success.
streams() {
  awk -F'|' '
    function pad(n) { return (4 - (2 + n) % 4) % 4 }
    { s = $2; d = s " from port " $3 }
    $6 != "" { req[s] = 1; hs[d] += 20 + $8 }
    $7 != "" { rep[s] = 1; hs[d] += 20 + $8; if ($9 == "1") crc[s] = 1; if ($10 == "1") rej[s] = 1 }
    $4 > 0 && $5 + $4 > end[d] { end[d] = $5 + $4 }
    { dirs[d] = s }
    $11 != "" {
      n = split($11, l, ",")
      for (i = 1; i <= n; i++) { fp[d] += 2 + l[i] + pad(l[i]) + 4; count[d]++; total++ }
    }
    END {
      bad = 0
      for (s in req) {
        if (!(s in rep)) { print "    stream " s ": an MPA request and no reply"; bad = 1 }
        if (s in rej) { print "    stream " s ": the reply rejects the connection"; bad = 1 }
        if (!(s in crc)) { print "    stream " s ": CRC not negotiated (tshark cannot check it)"; bad = 1 }
      }
      for (d in dirs) {
        if (!(dirs[d] in req)) continue
        after = end[d] - 1 - hs[d]
        if (after < 0) after = 0
        if (after != fp[d] + 0) {
          printf "    stream %s: %d bytes after the handshake, %d in %d decoded FPDUs\n", d, after, fp[d], count[d]
          bad = 1
        }
      }
      if (length(req) == 0) { print "    no MPA request in the capture"; bad = 1 }
      if (!bad) print "FPDUS " total + 0
      exit bad
    }' "$TMP/$1.fields"
}

# verify NAME OPCODE...: the checks above on capture NAME; OPCODEs as tshark prints them
# (0x03 Send). Counts as one assertion each.
verify() {
  local name=$1 out fpdus good badcrc op; shift
  decode "$name"
  out=$(streams "$name")
  check "$name: every byte after each MPA handshake is in a decoded FPDU" \
    bash -c '[[ $1 == FPDUS* ]] || { printf "%s\n" "$1"; exit 1; }' - "$out"
  fpdus=${out#FPDUS }
  [[ $fpdus =~ ^[0-9]+$ ]] || fpdus=-1
  check "$name: tshark decoded FPDUs ($fpdus)" test "$fpdus" -gt 0
  good=$(grep -c '(Good CRC32)' "$TMP/$name.crc")
  badcrc=$(grep -c '(Bad CRC32' "$TMP/$name.crc")
  check "$name: every FPDU's CRC is good ($good good, $badcrc bad, $fpdus FPDUs)" \
    test "$good" -eq "$fpdus" -a "$badcrc" -eq 0
  check "$name: no malformed frame, no expert error" \
    no_frames "$name" '_ws.malformed || _ws.expert.severity == "Error" ||
      ((iwarp_mpa || iwarp_ddp_rdmap) && _ws.expert.severity >= "Warning" &&
       !tcp.analysis.flags)'
  for op in "$@"; do
    check "$name: RDMAP opcode $op is there" \
      awk -F'|' -v op="$op" '{ n = split($12, o, ","); for (i = 1; i <= n; i++) if (o[i] == op) f = 1 }
        END { exit !f }' "$TMP/$name.fields"
  done
}

# no_frames NAME FILTER: no frame of capture NAME matches the display filter (shows them).
no_frames() {
  local hits
  hits=$(tshark -n -r "$TMP/$1.pcapng" $TSHARK_OPTS -Y "$2" 2>&1 | grep -v 'Running as user')
  [ -z "$hits" ] || { echo "$hits" | head -n 5 | sed 's/^/    /'; return 1; }
}

# captured NAME CMD...: runs CMD (which starts the connections) inside a capture in A.
captured() {
  local name=$1 rc; shift
  ns_capture_start "$NS_A" veth0 "$TMP/$name.pcapng" "$NS_B" 10.77.0.1 ||
    { check "$name: tshark captures in A" false; return 1; }
  "$@"
  rc=$?
  ns_capture_stop || check "$name: tshark saw the end of the traffic" false
  return $rc
}

# across NAME PORT SERVER... :: CLIENT...: the server in A (once PORT listens), the
# client in B, under softverbs run, each bounded (60 s); both must exit 0.
across() {
  local name=$1 port=$2 srv=() cli=() spid crc=255 src
  shift 2
  while [ $# -gt 0 ] && [ "$1" != :: ]; do srv+=("$1"); shift; done
  shift
  cli=("$@")
  ns_bg "$NS_A" 60 "$SV" run "${srv[@]}" >"$TMP/$name.srv" 2>&1
  spid=$NS_PID
  if ns_wait_listen "$NS_A" "$port" "" $spid 15; then
    ns_exec "$NS_B" 60 "$SV" run "${cli[@]}" >"$TMP/$name.cli" 2>&1
    crc=$?
  fi
  ns_wait_exit $spid "$([ $crc -eq 0 ] && echo 10 || echo 3)"
  src=$?
  check "$name: client (B) exits 0" test $crc -eq 0
  check "$name: server (A) exits 0" test $src -eq 0
  [ $crc -eq 0 ] && [ $src -eq 0 ] || ns_collect "$TMP/$name.srv" "$TMP/$name.cli"
}

if [ "$MODE" = --selftest ]; then
  # Each send() of the reference client leaves as one segment (TCP_NODELAY, no autocork).
  ip netns exec "$NS_B" sysctl -qw net.ipv4.tcp_autocorking=0
  ref() { # ref NAME PYTHON_CLIENT_ARGS...: the reference stream between A and B
    local name=$1 spid n; shift
    ns_bg "$NS_A" 30 python3 "$HERE/iwarp_frames.py" server 10.77.0.1 4000 >"$TMP/$name.srv" 2>&1
    spid=$NS_PID
    ns_wait_listen "$NS_A" 4000 10.77.0.1 $spid || return 1
    n=$(ns_exec "$NS_B" 30 python3 "$HERE/iwarp_frames.py" client 10.77.0.1 4000 "$@")
    wait $spid && [ "$n" = 6 ]
  }
  ops=(0x03 0x05 0x00 0x01 0x02 0x07)
  for packing in one many split; do
    captured "ref_$packing" ref "ref_$packing" --packing $packing
    check "ref_$packing: the reference stream ran (6 FPDUs)" test $? -eq 0
    verify "ref_$packing" "${ops[@]}"
  done
  # One bad CRC: the CRC check must fail, and say so; the rest must still hold.
  captured ref_badcrc ref ref_badcrc --bad-crc
  decode ref_badcrc
  check "ref_badcrc: tshark reports exactly the one bad CRC" \
    test "$(grep -c '(Bad CRC32' "$TMP/ref_badcrc.crc")" -eq 1 -a \
    "$(grep -c '(Good CRC32)' "$TMP/ref_badcrc.crc")" -eq 5
  out=$(PASS=0 FAIL=0 verify ref_badcrc "${ops[@]}")
  check "ref_badcrc: verify fails on the CRC, and only there" \
    test "$(grep -c '^FAIL' <<<"$out")" -eq 1 -a -n "$(grep "^FAIL.*CRC is good" <<<"$out")"
  finish
  exit
fi

[ -x "$SV" ] || { echo "$SV is not built"; exit 1; }
need rping
need ib_send_lat
GA=$(ns_gid_index "$NS_A" 10.77.0.1)
GB=$(ns_gid_index "$NS_B" 10.77.0.2)

programs() {
  across rping 17174 rping -s -a 10.77.0.1 -p 17174 -C 10 -v -V :: \
    rping -c -a 10.77.0.1 -p 17174 -C 10 -v -V
  local t args
  for t in ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat; do
    args=(-d softverbs0 -p 18600 -n 100)
    [ $t = ib_atomic_lat ] || args+=(-s 2)
    across $t 18600 $t -x "$GA" "${args[@]}" :: $t -x "$GB" "${args[@]}" 10.77.0.1
  done
}
captured programs programs
# Every operation, over all connections: Send, Write, Read Request and Response, and the
# RFC 7306 Atomic Request (0x0a) and Response (0x0b).
verify programs 0x03 0x00 0x01 0x02 0x0a 0x0b
finish
