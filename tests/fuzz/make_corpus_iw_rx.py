#!/usr/bin/env python3
"""Writes fuzz_iw_rx's seed corpus (tests/fuzz/corpus/iw_rx/): valid FPDU streams as a
peer sends them (Send, Send in segments, Write, Read Request, the Read Response to the
target's own RDMA Read, Terminate, Atomic and Immediate Data, a mix split at random
points). Layout of an input: tests/fuzz/fuzz_iw_rx.c. CRC fields are zero: the seeds ask
the harness to seal them (flags bit 1), and STags 1/2/3 and small tagged offsets are the
harness's names for its MRs.
    tests/fuzz/make_corpus_iw_rx.py [DIR]"""
import os
import struct
import sys

CRC, SEAL, EXT, READ, SHUT, RECVS = 1, 2, 4, 8, 16, 32
W, R = 0x1000, 0x3000  # the harness's MR W and R, as offsets


def fpdu(b2, b3, hdr, payload=b""):
    ulpdu = 2 + len(hdr) + len(payload)
    body = struct.pack(">HBB", ulpdu, b2, b3) + hdr + payload
    body += b"\0" * ((4 - len(body) % 4) % 4)
    return body + b"\0" * 4  # CRC: sealed by the harness


def untagged(qn, msn, mo, inv=0):
    return struct.pack(">IIII", inv, qn, msn, mo)


def send(msn, data, mo=0, last=True, op=3):
    return fpdu((0x40 if last else 0) | 1, 0x40 | op, untagged(0, msn, mo), data)


def write(stag, to, data, last=True):
    return fpdu(0x80 | (0x40 if last else 0) | 1, 0x40, struct.pack(">IQ", stag, to), data)


def read_req(msn, size, src_stag, src_to, sink_stag=0x1234, sink_to=0):
    body = struct.pack(">IQIIQ", sink_stag, sink_to, size, src_stag, src_to)
    return fpdu(0x41, 0x41, untagged(1, msn, 0) + body)


def read_resp(data, to=0, stag=0x5f000001):
    return fpdu(0xC1, 0x42, struct.pack(">IQ", stag, to), data)


def terminate(layer, etype, ecode, copied=b""):
    flags = 0xC0 if copied else 0
    word = struct.pack(">BBBB", layer << 4 | etype, ecode, flags, 0)
    return fpdu(0x41, 0x47, untagged(2, 1, 0) + word, copied)


def atomic(msn, req_id, stag, to, add):
    body = struct.pack(">IIIQQQQQ", 0, req_id, stag, to, add, 2**64 - 1, 0, 0)
    return fpdu(0x41, 0x4A, untagged(1, msn, 0) + body)


def imm(msn, value):
    return fpdu(0x41, 0x48, untagged(0, msn, 0) + struct.pack(">Q", value))


def seeds():
    pat = bytes(range(64))
    std = CRC | SEAL | EXT | RECVS
    yield "send", std, 0, send(1, pat)
    yield "send-split", std, 7, send(1, pat) + send(2, pat[:13])
    yield "send-segments", std, 3, send(1, pat, 0, False) + send(1, pat, 64, False) + \
        send(1, pat[:5], 128)
    yield "write", std, 0, write(1, W + 256, pat) + write(1, W + 320, pat, True)
    yield "write-imm", std, 5, write(1, W, pat) + imm(1, 0x1122334455667788)
    yield "read-req", std, 0, read_req(1, 48, 1, W + 100) + read_req(2, 16, 2, R)
    yield "read-resp", std | READ, 0, read_resp(pat)
    yield "read-resp-split", std | READ, 11, \
        fpdu(0x81, 0x42, struct.pack(">IQ", 0x5f000001, 0), pat[:32]) + read_resp(pat[:32], 32)
    yield "terminate", std | READ, 0, terminate(0, 1, 0, b"\0" * 20)
    yield "atomic", std, 0, atomic(1, 9, 1, W + 8, 5) + atomic(2, 10, 1, W + 8, 7)
    yield "mix", std | READ | SHUT, 29, send(1, pat) + write(1, W + 1024, pat) + \
        read_req(1, 8, 1, W) + read_resp(pat) + atomic(2, 3, 1, W + 16, 1) + send(2, pat[:1])
    yield "mix-nocrc", EXT | RECVS | READ, 17, send(1, pat) + write(1, W, pat) + \
        read_req(1, 64, 2, R + 64) + read_resp(pat)
    yield "noext-send", CRC | SEAL | RECVS, 2, send(1, pat, op=5) + send(2, pat, op=4)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "iw_rx")
    os.makedirs(out, exist_ok=True)
    for name, flags, split, stream in seeds():
        with open(os.path.join(out, name), "wb") as f:
            f.write(bytes([flags, split]) + stream)


main()
