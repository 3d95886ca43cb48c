#!/usr/bin/env python3
"""A hand-made iWARP stream over a real TCP connection, for checking the tshark test.

  iwarp_frames.py server ADDR PORT             accept one connection, answer the MPA
                                               request with a reply, read to the end
  iwarp_frames.py client ADDR PORT [--bad-crc] [--packing one|many|split]
                                               send an MPA request (revision 2, CRC on,
                                               the RFC 6581 IRD/ORD words), wait for the
                                               reply, then FPDUs: Send, Send with
                                               Solicited Event, RDMA Write, Read Request,
                                               Read Response, Terminate

The frames follow RFC 5044 (MPA: 2-byte ULPDU length, pad to 4, CRC32c over all of it),
RFC 5041 (DDP tagged and untagged headers) and RFC 5040 (RDMAP opcodes, Read Request
body). --bad-crc flips a bit of the third FPDU's CRC (the test must see it). --packing:
one FPDU per TCP segment (the default, as siw sends), many FPDUs in one segment, or an
FPDU split across segments. Each send() is one segment with TCP_NODELAY where the
namespace has net.ipv4.tcp_autocorking=0 (the test sets it). Prints the number of FPDUs sent. Not softverbs code: a
reference stream that tests/apps/test_iwarp_tshark.sh --selftest decodes.
"""
import socket
import struct
import sys

REQ_KEY = b"MPA ID Req Frame"
REP_KEY = b"MPA ID Rep Frame"
FLAG_CRC = 0x40


def crc32c(data):
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bit by bit: test-only."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def mpa_frame(key, flags, private):
    return key + struct.pack(">BBH", flags, 2, len(private)) + private


def fpdu(ulpdu, bad_crc=False):
    body = struct.pack(">H", len(ulpdu)) + ulpdu
    body += b"\0" * (-len(body) % 4)
    crc = crc32c(body) ^ (1 if bad_crc else 0)
    # The CRC32c goes out least significant byte first, as iSCSI's digest does (RFC 3385);
    # siw writes the kernel's crc32c digest so, and Wireshark checks it so.
    return body + struct.pack("<I", crc)


def ctrl(tagged, last, opcode):
    # DDP: T, L, reserved, DDP version 1; RDMAP: version 1, reserved, opcode.
    return struct.pack(">BB", (0x80 if tagged else 0) | (0x40 if last else 0) | 1, 0x40 | opcode)


def untagged(opcode, qn, msn, mo, payload, inval=0):
    return ctrl(False, True, opcode) + struct.pack(">IIII", inval, qn, msn, mo) + payload


def tagged(opcode, stag, to, payload):
    return ctrl(True, True, opcode) + struct.pack(">IQ", stag, to) + payload


def stream():
    read_req = struct.pack(">IQIIQ", 0x1234, 0x1000, 64, 0x5678, 0x2000)
    term = struct.pack(">I", (0x1 << 28) | (0x2 << 24) | (0x00 << 16))  # DDP, tagged, code 0
    return [
        untagged(3, 0, 1, 0, b"hello, iwarp" * 3),        # Send
        untagged(5, 0, 2, 0, b"solicited"),                 # Send with Solicited Event
        tagged(0, 0x5678, 0x2000, bytes(range(256)) * 4),   # RDMA Write, 1 KiB
        untagged(1, 1, 1, 0, read_req),                     # Read Request
        tagged(2, 0x1234, 0x1000, b"r" * 64),               # Read Response
        untagged(7, 2, 1, 0, term),                         # Terminate
    ]


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise SystemExit("connection closed after %d of %d bytes" % (len(data), n))
        data += chunk
    return data


def read_mpa(sock, key):
    head = recv_exact(sock, 20)
    if head[:16] != key:
        raise SystemExit("not an MPA frame: %r" % head[:16])
    recv_exact(sock, struct.unpack(">H", head[18:20])[0])
    return head[16]


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def server(addr, port):
    lst = socket.socket(family(addr), socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((addr, port))
    lst.listen(1)
    conn, _ = lst.accept()
    conn.settimeout(20)
    flags = read_mpa(conn, REQ_KEY)
    conn.sendall(mpa_frame(REP_KEY, flags & FLAG_CRC, struct.pack(">HH", 16, 16)))
    while conn.recv(65536):
        pass
    conn.close()


def client(addr, port, bad_crc, packing):
    sock = socket.create_connection((addr, port), timeout=20)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(mpa_frame(REQ_KEY, FLAG_CRC, struct.pack(">HH", 16, 16)))
    read_mpa(sock, REP_KEY)
    frames = [fpdu(u, bad_crc and i == 2) for i, u in enumerate(stream())]
    if packing == "many":
        sock.sendall(b"".join(frames))
    elif packing == "split":
        for f in frames:
            half = len(f) // 2
            sock.sendall(f[:half])
            sock.sendall(f[half:])
    else:
        for f in frames:
            sock.sendall(f)
    sock.shutdown(socket.SHUT_WR)
    while sock.recv(65536):
        pass
    sock.close()
    print(len(frames))


def main(argv):
    if len(argv) < 4 or argv[1] not in ("server", "client"):
        raise SystemExit(__doc__)
    addr, port = argv[2], int(argv[3])
    if argv[1] == "server":
        server(addr, port)
    else:
        packing = argv[argv.index("--packing") + 1] if "--packing" in argv else "one"
        client(addr, port, "--bad-crc" in argv, packing)


if __name__ == "__main__":
    main(sys.argv)
