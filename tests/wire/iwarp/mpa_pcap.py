#!/usr/bin/python3
"""Writes a pcap of one TCP connection (127.0.0.1:40000 -> 127.0.0.2:PORT) that carries
the given byte strings in turn, each in its own segment: `c:HEX` from the client, `s:HEX`
from the server. Used to show tshark our MPA frames and FPDUs (tshark_crc.sh)."""
import struct
import sys


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def segment(src, dst, sport, dport, seq, ack, flags, payload):
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 65535, 0, 0)
    pseudo = struct.pack("!4s4sBBH", src, dst, 0, 6, len(tcp) + len(payload))
    c = csum(pseudo + tcp + payload)
    tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 1, 0x4000,
                     64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    eth = b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + b"\x08\x00"
    return eth + ip + tcp + payload


def main():
    out, port, frames = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    cli, srv = bytes([127, 0, 0, 1]), bytes([127, 0, 0, 2])
    cport = 40000
    cseq, sseq = 1000, 5000
    pkts = [segment(cli, srv, cport, port, cseq, 0, 0x02, b""),
            segment(srv, cli, port, cport, sseq, cseq + 1, 0x12, b""),
            segment(cli, srv, cport, port, cseq + 1, sseq + 1, 0x10, b"")]
    cseq += 1
    sseq += 1
    for f in frames:
        side, data = f.split(":", 1)
        data = bytes.fromhex(data)
        if side == "c":
            pkts.append(segment(cli, srv, cport, port, cseq, sseq, 0x18, data))
            cseq += len(data)
        else:
            pkts.append(segment(srv, cli, port, cport, sseq, cseq, 0x18, data))
            sseq += len(data)
    with open(out, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, p in enumerate(pkts):
            fh.write(struct.pack("<IIII", 1700000000, i, len(p), len(p)))
            fh.write(p)


if __name__ == "__main__":
    main()
