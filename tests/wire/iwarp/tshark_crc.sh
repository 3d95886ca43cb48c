#!/usr/bin/env bash
# Shows tshark (Wireshark's iwarp_mpa and iwarp_ddp_rdmap dissectors) the FPDUs that
# test_iw_proto pins byte for byte, in a capture of one TCP connection that starts with
# an MPA request and reply asking for CRC: revision 1, then revision 2 with the RFC 6581
# words. Passes when tshark calls every FPDU's CRC "Good CRC32" and decodes each opcode
# as the vector names it: the proof that the CRC's byte order on the wire is right.
#   tshark_crc.sh path/to/test_iw_proto
set -euo pipefail
prog=$1
here=$(cd "$(dirname "$0")" && pwd)
command -v tshark >/dev/null || { echo "SKIP: no tshark"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

want_ops=("Send (0x3)" "Write (0x0)" "Read Request (0x1)" "Read Response (0x2)"
          "Send with Invalidate (0x4)" "Atomic Request (0xa)" "Terminate (0x7)")
rc=0
for rev in rev1 rev2; do
  mapfile -t frames < <("$prog" --dump-frames "$rev")
  python3 "$here/mpa_pcap.py" "$tmp/$rev.pcap" 7174 "${frames[@]}"
  # The payloads are not RPC over RDMA: keep that heuristic off them.
  tshark -r "$tmp/$rev.pcap" -V --disable-heuristic rpcrdma_iwarp \
    > "$tmp/$rev.txt" 2>/dev/null || tshark -r "$tmp/$rev.pcap" -V > "$tmp/$rev.txt" 2>/dev/null
  good=$(grep -c "(Good CRC32)" "$tmp/$rev.txt" || true)
  bad=$(grep -c "Bad CRC32" "$tmp/$rev.txt" || true)
  nfpdu=$((${#frames[@]} - 2))
  echo "$rev: $good of $nfpdu FPDUs with a good CRC, $bad bad"
  if [ "$good" != "$nfpdu" ] || [ "$bad" != 0 ]; then
    grep -E "CRC check" "$tmp/$rev.txt" || true
    rc=1
  fi
  mapfile -t ops < <(grep -oE "OpCode: [A-Za-z ]+ \(0x[0-9a-f]\)" "$tmp/$rev.txt" | sed 's/^OpCode: //')
  if [ "${ops[*]}" != "${want_ops[*]}" ]; then
    echo "$rev: tshark decoded opcodes [${ops[*]}], want [${want_ops[*]}]"
    rc=1
  fi
done
exit $rc
