#!/bin/bash
# Debian's unmodified rdma_cm programs between two hosts: two network namespaces joined
# by a veth pair (10.77.0.1 / fd77::1 and 10.77.0.2 / fd77::2), made here and removed on
# any exit; skipped (77) without root or without ip(8). Each connection is iWARP (the
# peer is not an address of the client's host): rping -v (1,000 pings, IPv4 and IPv6,
# every ping's data checked on both sides), ucmatose, rdma_server/rdma_client and
# cmtime must exit 0 with the transcript of a clean run; so must udaddy (UD: its
# datagrams on the UDP wire); so must mckey, a receiver on each host and the sender on
# one (multicast: IP multicast datagrams, RoCE v2; captured on B's veth, each decodes in
# tshark as InfiniBand UD to QP 0xFFFFFF with its ICRC right). A capture of one rping run, taken in the server's namespace, must decode
# in tshark as MPA and DDP/RDMAP with every CRC good and nothing malformed.
. "$(dirname "$0")/lib.sh" "$1"
need rping
need ucmatose
need rdma_server
need cmtime
need udaddy
need mckey
need ip
[ "$(id -u)" -eq 0 ] || { echo "SKIP: network namespaces need root"; exit 77; }

A=svcm$$a B=svcm$$b
cleanup() {
  kill $(jobs -p) 2>/dev/null
  wait 2>/dev/null
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
ip netns add "$A" && ip netns add "$B" || { echo "SKIP: cannot create namespaces"; exit 77; }
ip link add "v${A}" netns "$A" type veth peer name "v${B}" netns "$B" || exit 1
ip -n "$A" addr add 10.77.0.1/24 dev "v${A}"
ip -n "$B" addr add 10.77.0.2/24 dev "v${B}"
ip -n "$A" -6 addr add fd77::1/64 dev "v${A}" nodad
ip -n "$B" -6 addr add fd77::2/64 dev "v${B}" nodad
for n in "$A" "$B"; do ip -n "$n" link set lo up; done
ip -n "$A" link set "v${A}" up
ip -n "$B" link set "v${B}" up

NA=(ip netns exec "$A" "$SV" run)
NB=(ip netns exec "$B" "$SV" run)

# listening PORT PID: until PID (in A) listens on TCP PORT (5 s at most), or exits.
listening() {
  for _ in $(seq 100); do
    ip netns exec "$A" ss -ltnH 2>/dev/null | awk -v p=":$1" \
      '{ l = $4 } substr(l, length(l) - length(p) + 1) == p { f = 1 } END { exit !f }' && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  echo "    nothing listens on $1 in $A after 5 s"
  return 1
}

# rping_data N PREFIX: the lines rping -v prints for N pings (as in test_rdmacm.sh).
rping_data() {
  awk -v n="$1" -v pre="$2" 'BEGIN {
    start = 65
    for (k = 0; k < n; k++) {
      s = sprintf("rdma-ping-%d: ", k)
      for (c = start; length(s) < 63; c = c == 122 ? 65 : c + 1)
        s = s sprintf("%c", c)
      start = start == 122 ? 65 : start + 1
      print pre "ping data: " s
    }
  }'
}

# rping_run NAME ADDR: 1,000 pings from B to A's ADDR; both transcripts checked.
rping_run() {
  local name=$1 addr=$2 srv crc src
  timeout 60 "${NA[@]}" rping -s -a "$addr" -v -C 1000 \
    >"$TMP/$name.srv" 2>"$TMP/$name.srv.err" &
  srv=$!
  listening 7174 $srv
  timeout 60 "${NB[@]}" rping -c -a "$addr" -v -C 1000 >"$TMP/$name.cli" 2>"$TMP/$name.cli.err"
  crc=$?
  wait $srv
  src=$?
  check "$name: client exits 0" test $crc -eq 0
  check "$name: server exits 0" test $src -eq 0
  rping_data 1000 "" >"$TMP/$name.want"
  check "$name: the client printed every ping's data" cmp -s "$TMP/$name.cli" "$TMP/$name.want"
  rping_data 1000 "server " >"$TMP/$name.swant"
  check "$name: the server printed every ping's data" \
    cmp -s <(grep "ping data" "$TMP/$name.srv") "$TMP/$name.swant"
  if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
    tail -n 3 "$TMP/$name".* | sed 's/^/    /'
  fi
}

# A capture of a short rping run in A, for tshark.
if command -v dumpcap >/dev/null && command -v tshark >/dev/null; then
  ip netns exec "$A" dumpcap -q -i "v${A}" -w "$TMP/rping.pcapng" >"$TMP/dumpcap.log" 2>&1 &
  dc=$!
  for _ in $(seq 100); do [ -s "$TMP/rping.pcapng" ] && break; sleep 0.05; done
  timeout 30 "${NA[@]}" rping -s -a 10.77.0.1 -C 20 >/dev/null 2>&1 &
  srv=$!
  listening 7174 $srv
  timeout 30 "${NB[@]}" rping -c -a 10.77.0.1 -C 20 >/dev/null 2>&1
  wait $srv
  sleep 0.2
  kill -INT $dc
  wait $dc
  mpa=$(tshark -r "$TMP/rping.pcapng" -Y 'iwarp_mpa.req || iwarp_mpa.rep' 2>/dev/null | wc -l)
  ddp=$(tshark -r "$TMP/rping.pcapng" -Y 'iwarp_ddp_rdmap' 2>/dev/null | wc -l)
  tshark -r "$TMP/rping.pcapng" -V >"$TMP/rping.txt" 2>/dev/null
  fpdus=$(grep -cE '^ +FPDU$' "$TMP/rping.txt")
  good=$(grep -c 'CRC check: .*(Good CRC32)' "$TMP/rping.txt")
  bad=$(grep -ciE 'malformed|bad crc' "$TMP/rping.txt")
  check "tshark: an MPA request and reply ($mpa frames)" test "$mpa" -eq 2
  # FPDUs, not frames: how many a segment carries varies (a Send and its placement
  # probe go in one write).
  check "tshark: rping's traffic as DDP/RDMAP ($fpdus FPDUs in $ddp frames)" \
    test "$fpdus" -ge 80 -a "$ddp" -ge 20
  check "tshark: every FPDU's CRC good ($good of $fpdus), nothing malformed or bad ($bad)" \
    test "$bad" -eq 0 -a "$fpdus" -ge "$ddp" -a "$good" -eq "$fpdus"
else
  echo "note: no dumpcap/tshark: the capture check is left out"
fi

rping_run rping-v4 10.77.0.1
rping_run rping-v6 fd77::1

# ucmatose: one connection, its messages both ways.
timeout 60 "${NA[@]}" ucmatose >"$TMP/uc.srv" 2>&1 &
srv=$!
listening 7471 $srv
timeout 60 "${NB[@]}" ucmatose -s 10.77.0.1 >"$TMP/uc.cli" 2>&1
crc=$?
wait $srv
src=$?
check "ucmatose: both exit 0" test $crc -eq 0 -a $src -eq 0
check "ucmatose: the client's transcript is a clean run" only_lines "$TMP/uc.cli" \
  '^cmatose: (starting client|connecting)$' '^receiving data transfers$' '^sending replies$' \
  '^data transfers complete$' '^test complete$' '^return status 0$'
check "ucmatose: the server's transcript is a clean run" only_lines "$TMP/uc.srv" \
  '^cmatose: (starting server|disconnecting)$' '^initiating data transfers$' \
  '^completing sends$' '^receiving data transfers$' '^data transfers complete$' \
  '^disconnected$' '^test complete$' '^return status 0$'

# rdma_server / rdma_client: the synchronous API.
timeout 60 "${NA[@]}" rdma_server >"$TMP/rs.srv" 2>&1 &
srv=$!
listening 7471 $srv
timeout 60 "${NB[@]}" rdma_client -s 10.77.0.1 >"$TMP/rs.cli" 2>&1
crc=$?
wait $srv
src=$?
check "rdma_server/rdma_client: both exit 0" test $crc -eq 0 -a $src -eq 0
check "rdma_client: start, end 0" only_lines "$TMP/rs.cli" '^rdma_client: (start|end 0)$'
check "rdma_server: start, end 0" only_lines "$TMP/rs.srv" '^rdma_server: (start|end 0)$'

# cmtime: 100 connections; its server serves until stopped.
timeout 60 "${NA[@]}" cmtime -b 10.77.0.1 >"$TMP/ct.srv" 2>&1 &
srv=$!
listening 7471 $srv
timeout 60 "${NB[@]}" cmtime -s 10.77.0.1 -c 100 >"$TMP/ct.cli" 2>&1
crc=$?
check "cmtime: the client exits 0" test $crc -eq 0
check "cmtime: every step timed, no error line" only_lines "$TMP/ct.cli" \
  '^(creating id|resolving address|resolving route|creating qp|connecting|disconnecting|destroying id)$' \
  '^step +total ms' '^(create id|resolve addr|resolve route|create qp|connect|disconnect|destroy) *:'
check "cmtime: the server is still serving" kill -0 $srv
kill -TERM $srv 2>/dev/null
wait $srv 2>/dev/null

# UD to another host: the SIDR exchange over the handshake's TCP connection, then the
# datagrams over softverbs' UDP wire (2 connections, 50 messages each way on each).
# A's UDP counter (per namespace) proves they crossed as datagrams.
udp_in() { ip netns exec "$A" awk '$1 == "Udp:" && $2 ~ /^[0-9]+$/ { print $2 }' /proc/net/snmp; }
u0=$(udp_in)
timeout 20 "${NA[@]}" udaddy -b 10.77.0.1 -c 2 -C 50 >"$TMP/ud.srv" 2>&1 &
srv=$!
listening 7174 $srv
timeout 20 "${NB[@]}" udaddy -s 10.77.0.1 -c 2 -C 50 >"$TMP/ud.cli" 2>&1
crc=$?
wait $srv
src=$?
u1=$(udp_in)
check "udaddy to another host: the client exits 0" test $crc -eq 0
check "udaddy to another host: the server exits 0" test $src -eq 0
check "udaddy: the server's transcript" \
  transcript "$TMP/ud.srv" "udaddy: starting server" "receiving data transfers" \
  "sending replies" "data transfers complete" "test complete" "return status 0"
check "udaddy: the client's transcript" \
  transcript "$TMP/ud.cli" "udaddy: starting client" "udaddy: connecting" \
  "initiating data transfers" "receiving data transfers" "data transfers complete" \
  "test complete" "return status 0"
if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
  echo "    udaddy: client exit $crc, server exit $src"
  sed 's/^/    client: /' "$TMP/ud.cli" | tail -n 5
  sed 's/^/    server: /' "$TMP/ud.srv" | tail -n 5
fi
echo "    UDP datagrams received in A: $((u1 - u0))"
check "udaddy: at least 100 UDP datagrams reached A" test $((u1 - u0)) -ge 100

# Multicast between hosts (RoCE v2: the group's datagrams are IP multicast to UDP 4791):
# a receiver on each host joins GROUP from its veth address (2 ids, so 2 QPs a host),
# then a sender in A sends 20 messages on each id. Both receivers must get every message
# (A's from its host's shm copies, B's over the veth: at least 40 packets into B).
# mckey_hosts NAME GROUP ADDR_A ADDR_B
rx_packets() { # packets B's veth received (UDP's own counters count a GRO batch once)
  ip -n "$B" -s link show "v${B}" | awk 'f { print $2; exit } /RX:/ { f = 1 }'
}
mckey_hosts() {
  local name=$1 group=$2 ra rb joined=false u0 src ra_rc rb_rc n
  local mgid
  mgid=$(python3 -c 'import ipaddress,sys; a=ipaddress.ip_address(sys.argv[1]); print((ipaddress.IPv6Address("::ffff:"+str(a)) if a.version == 4 else a).packed.hex())' "$group")
  u0=$(rx_packets)
  timeout 30 "${NA[@]}" stdbuf -oL mckey -m "$group" -b "$3" -c 2 -C 20 >"$TMP/$name.ra" 2>&1 &
  ra=$!
  timeout 30 "${NB[@]}" stdbuf -oL mckey -m "$group" -b "$4" -c 2 -C 20 >"$TMP/$name.rb" 2>&1 &
  rb=$!
  # Joined: each host lists its 2 memberships (/proc/net/unix, per namespace), and B's
  # veth has the IP group (its socket joined it there).
  for _ in $(seq 400); do
    n=0
    for ns in "$A" "$B"; do
      [ "$(ip netns exec "$ns" grep -c "@softverbs/mcast/$mgid/" /proc/net/unix)" -ge 2 ] &&
        n=$((n + 1))
    done
    if [ $n -eq 2 ] && ip -n "$B" maddr show dev "v${B}" |
      awk -v g="$group" '$2 == g { f = 1 } END { exit !f }'; then
      joined=true
      break
    fi
    kill -0 $ra 2>/dev/null && kill -0 $rb 2>/dev/null || break
    sleep 0.05
  done
  check "$name: both receivers joined (2 QPs a host, the IP group on B's veth) within 20 s" $joined
  dc=
  if [ "$5" = capture ] && command -v dumpcap >/dev/null && command -v tshark >/dev/null; then
    ip netns exec "$B" dumpcap -q -i "v${B}" -f "udp port 4791" -w "$TMP/$name.pcapng" \
      >"$TMP/$name.dumpcap.log" 2>&1 &
    dc=$!
    for _ in $(seq 100); do [ -s "$TMP/$name.pcapng" ] && break; sleep 0.05; done
  fi
  timeout 30 "${NA[@]}" stdbuf -oL mckey -m "$group" -b "$3" -s -c 2 -C 20 >"$TMP/$name.s" 2>&1
  src=$?
  wait $ra
  ra_rc=$?
  wait $rb
  rb_rc=$?
  if [ -n "$dc" ]; then
    sleep 0.2
    kill -INT $dc
    wait $dc
    mckey_capture "$name"
  fi
  check "$name: the sender exits 0" test $src -eq 0
  check "$name: the receiver on the sender's host exits 0" test $ra_rc -eq 0
  check "$name: the receiver on the other host exits 0" test $rb_rc -eq 0
  local joined_line="mckey: joined dgid: [0-9a-f:.]+ mlid 0x[0-9a-f]+ sl 0"
  for r in ra rb; do
    check "$name ($r): joined twice, got every message" \
      transcript "$TMP/$name.$r" "mckey: starting server" "mckey: joining" "$joined_line" \
      "$joined_line" "receiving data transfers" "data transfers complete" "test complete" \
      "return status 0"
  done
  check "$name: the sender's transcript" \
    transcript "$TMP/$name.s" "mckey: starting client" "mckey: joining" "$joined_line" \
    "$joined_line" "initiating data transfers" "data transfers complete" "test complete" \
    "return status 0"
  echo "    $name: packets into B: $(($(rx_packets) - u0))"
  check "$name: at least 40 packets reached B" test $(($(rx_packets) - u0)) -ge 40
  if [ $src -ne 0 ] || [ $ra_rc -ne 0 ] || [ $rb_rc -ne 0 ]; then
    tail -n 5 "$TMP/$name".* | sed 's/^/    /'
  fi
}
# mckey_capture NAME: what B's veth saw of NAME's run, as RoCE v2: every datagram to the
# group decodes in tshark as InfiniBand (BTH to QP 0xFFFFFF, DETH) with nothing
# malformed, and its ICRC is right for the IP header it had (icrc_pcap).
mckey_capture() {
  local name=$1 n bad out
  tshark -r "$TMP/$name.pcapng" -Y 'infiniband.bth.destqp == 0xffffff && infiniband.deth' \
    2>/dev/null | wc -l >"$TMP/$name.n"
  n=$(cat "$TMP/$name.n")
  bad=$(tshark -r "$TMP/$name.pcapng" -Y '_ws.malformed || _ws.expert.severity >= error' \
    2>/dev/null | wc -l)
  check "tshark: $name's datagrams to the group as InfiniBand UD ($n), nothing malformed ($bad)" \
    test "$n" -ge 40 -a "$bad" -eq 0
  tshark -r "$TMP/$name.pcapng" -F pcap -w "$TMP/$name.pcap" 2>/dev/null
  out=$("$BUILD/bin/icrc_pcap" "$TMP/$name.pcap")
  echo "    $name: $out"
  check "$name: every datagram's ICRC right for its IP header" "$BUILD/bin/icrc_pcap" \
    "$TMP/$name.pcap"
}
mckey_hosts mckey_v4 239.1.2.3 10.77.0.1 10.77.0.2 capture
mckey_hosts mckey_v6 ff0e::7376:1 fd77::1 fd77::2

finish
