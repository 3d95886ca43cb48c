/*
 * RoCE v2 on the wire: the InfiniBand transport's packets (IBA vol 1 chapter 9) as UDP
 * datagrams to port 4791 carry them (IBA Annex A17). Encoding, decoding, checking and
 * the ICRC only: no sockets, no RDMA semantics.
 *
 * A datagram's payload, as it goes:
 *
 *   BTH (12)
 *   the extension headers of its opcode, in this order: XRCETH (4), DETH (8), RETH (16),
 *   AtomicETH (28), AETH (4), AtomicAckETH (8), ImmDt (4), IETH (4)
 *   payload
 *   pad (BTH PadCnt, 0-3 zero bytes: payload and pad are a multiple of 4)
 *   ICRC (4): CRC-32 over the masked IP, UDP and BTH headers and everything after them
 *   (rv_icrc), its least significant byte first, as Linux's rxe stores it
 *
 * Every header field is big endian. "Header" below is BTH and its extension headers: its
 * length follows from the opcode alone (rv_op_info[].hdr_len).
 */
#ifndef RV_PROTO_H
#define RV_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

enum {
	RV_PORT = 4791,  /* IANA: RoCE v2 */
	RV_BTH = 12,
	RV_XRCETH = 4,
	RV_DETH = 8,
	RV_RETH = 16,
	RV_ATOMICETH = 28,
	RV_AETH = 4,
	RV_ATOMICACKETH = 8,
	RV_IMMDT = 4,
	RV_IETH = 4,
	RV_CNP_RSVD = 16, /* a CNP's reserved bytes after its BTH (Annex A17.9.3) */
	RV_ICRC = 4,
	RV_HDR_MAX = RV_BTH + RV_XRCETH + RV_ATOMICETH, /* the longest header (XRC atomic) */
	RV_PSN_MASK = 0xffffff,
	RV_QPN_MCAST = 0xffffff, /* the destination QP of a multicast datagram (IBA 10.5.2.5) */
};

/* The transport, the opcode's top 3 bits (IBA 9.2.1 table 38). */
enum rv_transport {
	RV_RC = 0x00,
	RV_UC = 0x20,
	RV_RD = 0x40,
	RV_UD = 0x60,
	RV_CNP = 0x80, /* RoCE v2 congestion notification (Annex A17.9.3) */
	RV_XRC = 0xa0,
};

/* The operation, the opcode's low 5 bits (the same for every transport that has it). */
enum rv_op {
	RV_SEND_FIRST = 0x00,
	RV_SEND_MIDDLE = 0x01,
	RV_SEND_LAST = 0x02,
	RV_SEND_LAST_IMM = 0x03,
	RV_SEND_ONLY = 0x04,
	RV_SEND_ONLY_IMM = 0x05,
	RV_WRITE_FIRST = 0x06,
	RV_WRITE_MIDDLE = 0x07,
	RV_WRITE_LAST = 0x08,
	RV_WRITE_LAST_IMM = 0x09,
	RV_WRITE_ONLY = 0x0a,
	RV_WRITE_ONLY_IMM = 0x0b,
	RV_READ_REQ = 0x0c,
	RV_READ_RESP_FIRST = 0x0d,
	RV_READ_RESP_MIDDLE = 0x0e,
	RV_READ_RESP_LAST = 0x0f,
	RV_READ_RESP_ONLY = 0x10,
	RV_ACK = 0x11,
	RV_ATOMIC_ACK = 0x12,
	RV_CMP_SWAP = 0x13,
	RV_FETCH_ADD = 0x14,
	RV_SEND_LAST_INV = 0x16,
	RV_SEND_ONLY_INV = 0x17,
	RV_CNP_OP = 0x01, /* with RV_CNP: 0x81 */
};

/* What an opcode carries (rv_op_info[].flags). */
enum {
	RV_H_XRCETH = 1 << 0,
	RV_H_DETH = 1 << 1,
	RV_H_RETH = 1 << 2,
	RV_H_ATOMICETH = 1 << 3,
	RV_H_AETH = 1 << 4,
	RV_H_ATOMICACKETH = 1 << 5,
	RV_H_IMMDT = 1 << 6,
	RV_H_IETH = 1 << 7,
	RV_H_CNP = 1 << 8,     /* a CNP's 16 reserved bytes */
	RV_PAYLOAD = 1 << 9,   /* may carry payload */
	RV_FIRST = 1 << 10,    /* the first packet of a message (ONLY: FIRST | LAST) */
	RV_LAST = 1 << 11,     /* its last */
	RV_RESPONSE = 1 << 12, /* sent by the responder (Read Response, ACK, Atomic ACK) */
};

/* What the codec knows of each opcode: rv_op_info[opcode]. */
struct rv_op_info {
	const char *name; /* NULL: not an opcode softverbs takes (RD, reserved) */
	uint16_t flags;
	uint8_t hdr_len;  /* BTH and its extension headers */
};
extern const struct rv_op_info rv_op_info[256];

/* The AETH syndrome (IBA 9.7.5.1.2): its top 3 bits say what it is. */
enum {
	RV_AETH_ACK = 0x00,      /* | credit count (5 bits; 0x1f: invalid, not sent by us) */
	RV_AETH_RNR_NAK = 0x20,  /* | the RNR timer's code (5 bits, IBA table 45) */
	RV_AETH_NAK = 0x60,      /* | one of the codes below */
	RV_AETH_TYPE_MASK = 0x60,
	RV_AETH_VALUE_MASK = 0x1f,
	RV_NAK_PSN_SEQ = 0,      /* PSN sequence error */
	RV_NAK_INV_REQ = 1,      /* invalid request */
	RV_NAK_REM_ACCESS = 2,   /* remote access error */
	RV_NAK_REM_OP = 3,       /* remote operational error */
	RV_NAK_INV_RD_REQ = 4,   /* invalid RD request */
	RV_AETH_CREDIT_INVALID = 0x1f,
};

/*
 * One packet's headers, decoded (or to encode). Only the fields of its opcode's headers
 * mean anything; the decoder leaves the others zero.
 */
struct rv_pkt {
	/* BTH (IBA 9.2) */
	uint8_t opcode;
	bool se;              /* solicited event */
	bool mig;             /* MigReq */
	uint8_t pad;          /* PadCnt: pad bytes after the payload (set by rv_encode) */
	uint16_t pkey;
	bool fecn, becn;      /* (RoCE v2 carries congestion in ECN and CNPs: always 0) */
	uint32_t dest_qpn;    /* 24 bits */
	bool ack_req;         /* A: the responder is to acknowledge this packet */
	uint32_t psn;         /* 24 bits */
	/* XRCETH */
	uint32_t xrc_srqn;    /* 24 bits */
	/* DETH */
	uint32_t qkey;
	uint32_t src_qpn;     /* 24 bits */
	/* RETH; AtomicETH's first two fields too */
	uint64_t va;
	uint32_t rkey;
	uint32_t dma_len;     /* RETH only */
	/* AtomicETH */
	uint64_t swap_add, compare;
	/* AETH */
	uint8_t syndrome;
	uint32_t msn;         /* 24 bits */
	/* AtomicAckETH */
	uint64_t orig;
	/* ImmDt: as the consumer gave it (struct ibv_send_wr imm_data: network order) */
	uint32_t imm_be;
	/* IETH */
	uint32_t inv_rkey;
	/* decoded: the header's length and the payload's (pad and ICRC excluded) */
	uint32_t hdr_len, payload_len;
};

/* The opcode's name, "?" if it has none. */
const char *rv_op_name(uint8_t opcode);

/* The pad bytes after @payload_len bytes of payload. */
static inline uint8_t rv_pad_len(uint32_t payload_len)
{
	return (uint8_t)(-payload_len & 3);
}

/*
 * Writes @p's header into @buf (room for RV_HDR_MAX) for @payload_len bytes of payload
 * to follow (PadCnt from it); returns its length, or -EINVAL for an opcode the codec does
 * not know or payload on one that carries none. Fields wider than the header's are cut
 * to it (PSN, QPNs, MSN: 24 bits).
 */
int rv_encode(void *buf, const struct rv_pkt *p, uint32_t payload_len);

/*
 * Decodes the datagram @buf of @len bytes (the UDP payload, ICRC included, not checked
 * here) into @p. Returns 0, or -EPROTO for one the IBA has dropped (IBA 9.6: a transport
 * version other than 0, an opcode not known, headers or pad past its end, payload on an
 * opcode without, payload and pad not a multiple of 4). Nothing past @len is read.
 */
int rv_decode(const void *buf, size_t len, struct rv_pkt *p);

/* --- the ICRC (rv_icrc.c) ------------------------------------------------------------------ */

/*
 * The IP and UDP headers a packet goes in, as far as the ICRC covers them (Annex A17.8:
 * addresses, lengths, IPv4's identification and flags, the UDP ports; TOS, TTL, IPv6's
 * class and flow label, the checksums are masked). The IP and UDP lengths follow from
 * the datagram's.
 */
struct rv_path {
	bool v6;
	uint8_t src[16], dst[16]; /* IPv4: the first 4 bytes */
	uint16_t sport, dport;    /* UDP, host order (dport: RV_PORT) */
	uint16_t ip_id;           /* IPv4's identification (0 but for a GSO batch's segments) */
};

/*
 * The ICRC of the datagram whose bytes before the ICRC are @iov[0..n) (BTH first), sent
 * on @path. IPv4 as Linux sends a datagram of an unconnected socket with
 * IP_PMTUDISC_DO: identification 0 (@path->ip_id: the kernel numbers the segments of
 * one UDP_SEGMENT send from 0 up), DF set.
 */
uint32_t rv_icrc(const struct rv_path *path, const struct iovec *iov, int n);

/* The ICRC at @at, least significant byte first. */
void rv_icrc_put(void *at, uint32_t icrc);
uint32_t rv_icrc_get(const void *at);

/*
 * Remembers the ICRC's dependence on IPv4's identification and DF bit for one datagram
 * length (the last one checked): a receiver keeps one per thread or queue, zeroed.
 */
struct rv_icrc_ids {
	uint32_t len;        /* datagram length these are for (0: none yet) */
	uint32_t basis[32];  /* [bit]: a combination of ID/DF flips whose top bit is bit */
};

/*
 * Checks the ICRC of the datagram @buf (@len bytes, ICRC last) received on @path. User
 * space does not see a received IPv4 header's identification and flags, which the ICRC
 * covers; the CRC is linear in them, so the check accepts the datagram when some
 * identification and DF bit make it right (@ids caches what that takes per length; NULL
 * to not cache). IPv6 has neither: checked as it is.
 */
bool rv_icrc_check(const struct rv_path *path, const void *buf, size_t len,
		   struct rv_icrc_ids *ids);

#endif
