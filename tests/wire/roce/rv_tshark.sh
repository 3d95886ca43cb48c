#!/usr/bin/env bash
# Shows tshark (Wireshark's infiniband dissector on UDP 4791, "RRoCE") the datagrams that
# test_rv_proto pins (IPv4, UDP, BTH and its extension headers, payload, ICRC) and passes
# when it decodes each opcode and header field as the encoder meant them: the proof that
# the layouts are the IBA's as others read them. (Wireshark shows the ICRC without
# checking it; test_rv_proto checks it against an independent computation.)
#   rv_tshark.sh path/to/test_rv_proto
set -euo pipefail
prog=$1
command -v tshark >/dev/null || { echo "SKIP: no tshark"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$prog" --dump-packets > "$tmp/pkts.hex"
python3 "$(dirname "$0")/hex2pcap.py" "$tmp/pkts.hex" "$tmp/pkts.pcap"
# opcode, dest QP, PSN, A, PadCnt | RETH VA, R_Key, length | AETH MSN | DETH Q_Key,
# source QP | AtomicETH swap/add
tshark -r "$tmp/pkts.pcap" -T fields -E separator='|' -e infiniband.bth.opcode \
  -e infiniband.bth.destqp -e infiniband.bth.psn -e infiniband.bth.a -e infiniband.bth.padcnt \
  -e infiniband.reth.va -e infiniband.reth.r_key -e infiniband.reth.dmalen \
  -e infiniband.aeth.msn -e infiniband.deth.q_key -e infiniband.deth.srcqp \
  -e infiniband.atomiceth.swapdt 2>/dev/null > "$tmp/got.txt"
cat > "$tmp/want.txt" <<'WANT'
4|0x000011|1|1|2|||||||
11|0x000011|2|1|2|0x00007f0000001000|0x00001234|10||||
12|0x000011|3|0|0|0x00007f0000002000|0x00001234|4096||||
17|0x000022|3|0|0||||2|||
20|0x000011|4|0|0|0x00007f0000003000|0x00001234|||||1
101|0x000033|5|0|2|||||0x0000000011111111|0x00000044|
WANT
# (Wireshark prints a FetchAdd's add data under the swap field, right aligned.)
sed -i 's/| *\([0-9]*\)$/|\1/' "$tmp/got.txt"
if ! diff "$tmp/want.txt" "$tmp/got.txt"; then
  echo "tshark decoded the pinned datagrams otherwise (< want, > got)"
  exit 1
fi
echo "tshark decoded $(wc -l < "$tmp/got.txt") RoCE v2 datagrams as encoded"
