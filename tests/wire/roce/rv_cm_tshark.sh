#!/usr/bin/env bash
# Shows tshark (Wireshark's InfiniBand dissector on UDP 4791, its CM attributes and
# rdma_cm's IP CM header) the MADs that test_rv_cm pins, each in a RoCE v2 UD SEND to
# QP1, and passes when it names every message and reads its fields as the encoder meant
# them, with nothing malformed: the proof that the layouts are the IBA's as others read
# them.
#   rv_cm_tshark.sh path/to/unit_test_rv_cm
set -euo pipefail
prog=$1
command -v tshark >/dev/null || { echo "SKIP: no tshark"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$prog" --dump-packets > "$tmp/pkts.hex"
python3 "$(dirname "$0")/hex2pcap.py" "$tmp/pkts.hex" "$tmp/pkts.pcap"
# attribute | REQ: service ID, QPN, PSN, Q_Key, IP CM version, port (7174), addresses |
# REP: QPN, PSN, remote comm ID | REJ: reason (28), comm IDs | RTU, DREQ, DREP: comm IDs
tshark -r "$tmp/pkts.pcap" -T fields -E separator='|' -e infiniband.mad.attributeid \
  -e infiniband.cm.req.serviceid -e infiniband.cm.req.localqpn -e infiniband.cm.req.startpsn \
  -e infiniband.cm.req.localqkey -e infiniband.cm.req.ip_cm.ipv -e infiniband.cm.req.ip_cm.sport \
  -e infiniband.cm.req.ip_cm.sip4 -e infiniband.cm.req.ip_cm.dip4 \
  -e infiniband.cm.rep.localqpn -e infiniband.cm.rep.startpsn -e infiniband.cm.rep.remotecommid \
  -e infiniband.cm.rej.reason -e infiniband.cm.rej.localcommid -e infiniband.cm.rej.remotecommid \
  -e infiniband.cm.rtu.localcommid -e infiniband.cm.dreq.remotecommid \
  -e infiniband.cm.drsp.localcommid 2>/dev/null > "$tmp/got.txt"
cat > "$tmp/want.txt" <<'WANT'
0x0010|0x0000000001064e20|0xabcdef|0x123456|0x55667788|0x04|0x1c06|10.77.0.2|10.77.0.1|||||||||
0x0011|||||||||||||||||
0x0012||||||||||||0x001c|0x00000102|0x00000202|||
0x0013|||||||||0x000303|0x000400|0x00000203||||||
0x0014|||||||||||||||0x00000104||
0x0015||||||||||||||||0x00000205|
0x0016|||||||||||||||||0x00000106
0x0017|||||||||||||||||
0x0018|||||||||||||||||
WANT
if ! diff "$tmp/want.txt" "$tmp/got.txt"; then
  echo "FAIL: tshark reads the CM MADs otherwise (< wanted, > tshark)"
  exit 1
fi
bad=$(tshark -r "$tmp/pkts.pcap" -Y '_ws.malformed || _ws.expert.severity >= error' 2>/dev/null | wc -l)
[ "$bad" -eq 0 ] || { echo "FAIL: $bad malformed packet(s)"; exit 1; }
echo "ok: tshark reads 9 CM MADs (REQ MRA REJ REP RTU DREQ DREP SIDR_REQ SIDR_REP) as encoded"
