#!/usr/bin/env python3
"""hex2pcap.py HEX PCAP: a classic pcap of raw IPv4 packets (LINKTYPE_RAW, 101), one
packet per line of hex in HEX (what the unit tests' --dump-packets print), for tshark."""
import struct
import sys

pkts = [bytes.fromhex(l.strip()) for l in open(sys.argv[1]) if l.strip()]
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 101))
    for i, p in enumerate(pkts):
        f.write(struct.pack("<IIII", i, 0, len(p), len(p)) + p)
