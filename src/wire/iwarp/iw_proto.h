/*
 * iWARP on the wire: the FPDUs of MPA (RFC 5044 §4), with the DDP (RFC 5041) and RDMAP
 * (RFC 5040, RFC 7306) headers they carry. Encoding, decoding and checking only: no
 * sockets, no RDMA semantics (the wire's iw_tx.c / iw_rx.c use this).
 *
 * An FPDU, as it goes on the TCP stream:
 *
 *   ULPDU_Length (2, big endian: header + payload bytes)
 *   DDP/RDMAP control (2) | header fields of the opcode (tagged or untagged)
 *   [Read Request / Atomic Request / Terminate body: part of the header here]
 *   payload
 *   pad (0-3 zero bytes, to a multiple of 4 counting from ULPDU_Length)
 *   CRC32c (4; 0 when CRC was not negotiated), over everything before it, its least
 *   significant byte first as in iSCSI (RFC 3720 B.4): iw_crc_put() writes it
 *
 * "Header" below is everything from ULPDU_Length to the payload: its length follows from
 * the opcode alone (iw_op_info[].hdr_len).
 */
#ifndef IW_PROTO_H
#define IW_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* RDMAP opcodes (RFC 5040 §4.3; RFC 7306 for 8 and above: the values Chelsio's firmware
 * interface names for them, FW_RI_SEND_IMMEDIATE 0x8 ... FW_RI_ATOMIC_RESPONSE 0xb, as
 * IBM's urdma does, and Wireshark 4.0 decodes 0xa/0xb as Atomic Request/Response). */
enum iw_opcode {
	IW_OP_WRITE = 0x0,
	IW_OP_READ_REQ = 0x1,
	IW_OP_READ_RESP = 0x2,
	IW_OP_SEND = 0x3,
	IW_OP_SEND_INV = 0x4,
	IW_OP_SEND_SE = 0x5,
	IW_OP_SEND_SE_INV = 0x6,
	IW_OP_TERMINATE = 0x7,
	/* RFC 7306 */
	IW_OP_IMM = 0x8,         /* Immediate Data */
	IW_OP_IMM_SE = 0x9,      /* Immediate Data with Solicited Event */
	IW_OP_ATOMIC_REQ = 0xa,  /* Atomic Request */
	IW_OP_ATOMIC_RESP = 0xb, /* Atomic Response */
	IW_OP_MAX = 0x10,
};

/* DDP untagged queue numbers (RFC 5040 §5.1; RFC 7306 for the atomic queues: an Atomic
 * Request goes on the Read Request queue, under the same IRD/ORD, and the responses on a
 * queue of their own, 3; IBM's urdma, by siw's authors, has queue 3 for atomic responses
 * and no queue of atomic requests, and lays out both atomic headers as below). */
enum iw_queue {
	IW_QN_SEND = 0,      /* Send*, Immediate Data */
	IW_QN_READ_REQ = 1,  /* Read Requests */
	IW_QN_TERMINATE = 2, /* Terminate */
	IW_QN_ATOMIC_REQ = 1,  /* RFC 7306: Atomic Requests, on the Read Request queue */
	IW_QN_ATOMIC_RESP = 3, /* RFC 7306: Atomic Responses */
	IW_QN_MAX = 4,
};

enum {
	IW_DDP_VERSION = 1,
	IW_RDMAP_VERSION = 1,
	IW_MPA_LEN_BYTES = 2,
	IW_CRC_BYTES = 4,
	IW_HDR_MAX = 72,       /* the longest header of any opcode (Atomic Request: 2 + 18 +
				* 52), ULPDU_Length included */
	IW_HDR_MIN = 16,       /* the shortest (tagged: 2 + 2 + 4 + 8) */
	IW_HDR_TAGGED = 16,    /* ULPDU_Length + tagged DDP header */
	IW_HDR_UNTAGGED = 20,  /* ULPDU_Length + untagged DDP header */
	IW_TERM_HDRS_MAX = 2 + 18 + 28, /* a Terminate's payload at most: the offending
					 * ULPDU_Length, untagged DDP header, Read Request */
	IW_ULPDU_MAX = 0xffff, /* ULPDU_Length is 16 bits */
};

/* What the decoder knows of each opcode (the table is iw_op_info[IW_OP_MAX]). */
struct iw_op_info {
	const char *name;  /* NULL: not an opcode (decoding it is a Terminate) */
	bool tagged;       /* the T bit it must carry */
	bool has_payload;  /* may carry payload after its header */
	bool ext;          /* RFC 7306 (taken only where negotiated) */
	bool single;       /* always one DDP segment: L set, message offset 0 */
	uint8_t qn;        /* untagged: the queue it goes on */
	uint8_t hdr_len;   /* bytes from ULPDU_Length to the payload */
};
extern const struct iw_op_info iw_op_info[IW_OP_MAX];

/* RFC 7306: the atomic operations an Atomic Request names (its low 4 bits of the first
 * word; Wireshark 4.0: 0 FetchAdd, 2 CmpSwap. urdma numbers CmpSwap 1: a private choice,
 * the header keeps the RFC's / Wireshark's 2). */
enum iw_atomic_op {
	IW_ATOMIC_FETCH_ADD = 0,
	IW_ATOMIC_SWAP = 1,
	IW_ATOMIC_CMP_SWAP = 2,
};

/*
 * One FPDU's header, decoded (or to encode). Only the fields of its opcode are
 * meaningful; the others are zero after decoding.
 */
struct iw_hdr {
	uint8_t opcode;        /* enum iw_opcode */
	bool last;             /* DDP L bit */
	bool tagged;           /* DDP T bit (set by the encoder from the opcode) */
	uint16_t ulpdu_len;    /* decoded: header (without ULPDU_Length) + payload bytes */
	uint32_t payload_len;  /* decoded: ulpdu_len - (hdr_len - 2); to encode: given */

	/* tagged (Write, Read Response): RFC 5041 §5.2 */
	uint32_t stag;
	uint64_t to;
	/* untagged: RFC 5041 §5.3 */
	uint32_t inv_stag;     /* Send with Invalidate: the STag to invalidate (else 0) */
	uint32_t qn, msn, mo;
	/* Read Request body (RFC 5040 §4.4) */
	uint32_t sink_stag;
	uint64_t sink_to;
	uint32_t read_size;
	uint32_t src_stag;
	uint64_t src_to;
	/* Atomic Request body (RFC 7306), after the untagged header: reserved (28 bits) |
	 * atomic operation (4), request identifier, remote STag, remote tagged offset, add or
	 * swap data, add or swap mask, compare data, compare mask (52 bytes) */
	uint32_t atomic_op;    /* enum iw_atomic_op */
	uint32_t atomic_req_id; /* echoed by the response */
	uint32_t atomic_stag;
	uint64_t atomic_to;
	uint64_t add_swap, add_swap_mask, compare, compare_mask;
	/* Atomic Response (RFC 7306): original request identifier (in atomic_req_id), the
	 * original remote value (12 bytes) */
	uint64_t orig_value;
	/* Immediate Data (RFC 7306): 8 bytes after the untagged header, as the consumer gave
	 * them (big endian on the wire, like every field here) */
	uint64_t imm;
	/* Terminate (RFC 5040 §4.8): the control word layer (4 bits) | etype (4) | ecode (8)
	 * | M D R (3) | reserved (13), and its header flags: M the offending segment's
	 * length (its ULPDU_Length, 2 bytes) follows, D its DDP header follows, R its RDMAP
	 * header (a Read Request's 28 bytes) follows. What follows is the payload, not
	 * decoded here. */
	uint8_t term_layer, term_etype, term_ecode;
	bool term_hdr_len, term_hdr_ddp, term_hdr_rdmap;
};

/* Terminate layers (RFC 5040 §7.1). */
enum iw_term_layer {
	IW_TERM_RDMAP = 0,
	IW_TERM_DDP = 1,
	IW_TERM_LLP = 2, /* MPA */
};

/* Error types of each layer (RFC 5040 §7.2, RFC 5041 §7.2, RFC 5044 §8). */
enum {
	/* RDMAP */
	IW_ETYPE_RDMAP_LOCAL_CATA = 0x0,
	IW_ETYPE_RDMAP_REMOTE_PROT = 0x1,
	IW_ETYPE_RDMAP_REMOTE_OP = 0x2,
	/* DDP */
	IW_ETYPE_DDP_LOCAL_CATA = 0x0,
	IW_ETYPE_DDP_TAGGED = 0x1,
	IW_ETYPE_DDP_UNTAGGED = 0x2,
	IW_ETYPE_DDP_RSVD = 0x3,
	/* MPA (LLP) */
	IW_ETYPE_MPA = 0x0,
};

/* Error codes (the RFCs' tables; each value where its RFC gives it). */
enum {
	/* RDMAP, remote protection (etype 1) */
	IW_ECODE_RDMAP_INV_STAG = 0x00,
	IW_ECODE_RDMAP_BASE_BOUNDS = 0x01,
	IW_ECODE_RDMAP_ACCESS = 0x02,
	IW_ECODE_RDMAP_PD = 0x03,
	IW_ECODE_RDMAP_TO_WRAP = 0x04,
	IW_ECODE_RDMAP_INV_VERSION = 0x05,
	IW_ECODE_RDMAP_INV_OPCODE = 0x06,
	IW_ECODE_RDMAP_STREAM_CATA = 0x07,
	IW_ECODE_RDMAP_GLOBAL_CATA = 0x08,
	IW_ECODE_RDMAP_STAG_NOT_INV = 0x09,
	IW_ECODE_RDMAP_UNSPECIFIED = 0xff,
	/* DDP tagged (etype 1) */
	IW_ECODE_DDP_T_INV_STAG = 0x00,
	IW_ECODE_DDP_T_BASE_BOUNDS = 0x01,
	IW_ECODE_DDP_T_STAG_NOT_ASSOC = 0x02,
	IW_ECODE_DDP_T_TO_WRAP = 0x03,
	IW_ECODE_DDP_T_INV_VERSION = 0x04,
	/* DDP untagged (etype 2) */
	IW_ECODE_DDP_U_INV_QN = 0x01,
	IW_ECODE_DDP_U_NO_BUF = 0x02,
	IW_ECODE_DDP_U_INV_MSN_RANGE = 0x03,
	IW_ECODE_DDP_U_INV_MO = 0x04,
	IW_ECODE_DDP_U_TOO_LONG = 0x05,
	IW_ECODE_DDP_U_INV_VERSION = 0x06,
	/* MPA (etype 0) */
	IW_ECODE_MPA_CLOSED = 0x01,
	IW_ECODE_MPA_CRC = 0x02,
	IW_ECODE_MPA_MARKER = 0x03,
	IW_ECODE_MPA_REQ_RSP = 0x04,
	IW_ECODE_MPA_LOCAL_CATA = 0x05,
	IW_ECODE_MPA_IRD_ORD = 0x06, /* RFC 6581 */
	IW_ECODE_MPA_NO_RTR = 0x07,  /* RFC 6581 */
};

/* The two control bytes after ULPDU_Length (RFC 5041 §5.1, RFC 5040 §4.2). */
enum {
	IW_DDP_T = 0x80,      /* byte 2: tagged */
	IW_DDP_L = 0x40,      /* byte 2: last */
	IW_DDP_DV_MASK = 0x03,
	IW_RDMAP_RV_SHIFT = 6, /* byte 3: RDMAP version in bits 7-6 */
	IW_RDMAP_OP_MASK = 0x0f,
	IW_TERM_M = 0x80,     /* byte 2 of the Terminate control word */
	IW_TERM_D = 0x40,
	IW_TERM_R = 0x20,
};

/* A Terminate to send: what went wrong, where (iw_hdr_decode fills it). */
struct iw_term {
	uint8_t layer, etype, ecode;
};

/* Big-endian fields, as every field of these headers goes on the wire. */
static inline void iw_put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}

static inline void iw_put32(unsigned char *p, uint32_t v)
{
	iw_put16(p, (uint16_t)(v >> 16));
	iw_put16(p + 2, (uint16_t)v);
}

static inline void iw_put64(unsigned char *p, uint64_t v)
{
	iw_put32(p, (uint32_t)(v >> 32));
	iw_put32(p + 4, (uint32_t)v);
}

static inline uint16_t iw_get16(const unsigned char *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t iw_get32(const unsigned char *p)
{
	return (uint32_t)iw_get16(p) << 16 | iw_get16(p + 2);
}

static inline uint64_t iw_get64(const unsigned char *p)
{
	return (uint64_t)iw_get32(p) << 32 | iw_get32(p + 4);
}

/* Pad bytes after a ULPDU of @ulpdu_len bytes (RFC 5044 §4.1: to a multiple of 4,
 * counting the 2 bytes of ULPDU_Length). */
static inline uint32_t iw_pad(uint32_t ulpdu_len)
{
	return (4 - ((ulpdu_len + IW_MPA_LEN_BYTES) & 3)) & 3;
}

/* The whole FPDU's bytes on the stream: length, ULPDU, pad, CRC. */
static inline uint32_t iw_fpdu_len(uint32_t ulpdu_len)
{
	return IW_MPA_LEN_BYTES + ulpdu_len + iw_pad(ulpdu_len) + IW_CRC_BYTES;
}

/*
 * Writes @h's header (ULPDU_Length through the opcode's fixed fields) into @buf (at
 * least IW_HDR_MAX bytes), for h->payload_len bytes of payload to follow. Sets the T
 * bit, the queue number (h->tagged and h->qn are not read) and the versions from the
 * opcode, and ULPDU_Length; reserved fields are zero. Returns the header's length, or
 * -EINVAL (not an opcode, payload_len too long for one FPDU or where the opcode has
 * none, a Terminate's above IW_TERM_HDRS_MAX, a single-segment message not last or at
 * an offset, an atomic operation not known).
 */
int iw_hdr_encode(void *buf, const struct iw_hdr *h);

/*
 * Decodes the header at the start of @buf (@len bytes received so far), checking
 * everything the header alone can say: versions, opcode known (@ext: RFC 7306 opcodes
 * allowed), T bit matching the opcode, queue number matching it, ULPDU_Length at least
 * the header, no payload where the opcode has none, offset 0 and L set for the
 * single-segment messages (Read Request, Terminate, atomics, Immediate Data), the atomic
 * operation known. Reserved bits are NOT checked: RFC 5040 §4.2 and RFC 5041 §5.1 say
 * they are set to zero on transmit and not checked on receive. Returns the
 * header's length (payload_len filled), -EAGAIN if more bytes are needed to know, or
 * -EPROTO with *term set to the Terminate the RFCs give for the fault.
 */
int iw_hdr_decode(const void *buf, size_t len, bool ext, struct iw_hdr *h, struct iw_term *term);

/*
 * A Terminate FPDU's header for @t (queue 2, MSN 1, offset 0, last), with the offending
 * FPDU's start @bad (@bad_len bytes as received, FROM its ULPDU_Length: RFC 5040 §4.8
 * puts the "DDP Segment Length" before the terminated DDP header; 0 for none) copied as
 * its payload: its ULPDU_Length and DDP header (M and D set), and a Read Request's 28
 * bytes of RDMAP header (R set) when @bad is one and holds them. Writes header and
 * payload into @buf (@cap >= IW_HDR_UNTAGGED + 4 + IW_TERM_HDRS_MAX is always enough);
 * returns the bytes written, ULPDU_Length included (the caller adds pad and CRC), or
 * -EINVAL (@cap too small, @bad shorter than its DDP header).
 */
int iw_term_encode(void *buf, size_t cap, const struct iw_term *t, const void *bad,
		   size_t bad_len);

/* CRC32c (Castagnoli, RFC 3385) as MPA uses it: start with iw_crc_init(), feed any
 * number of pieces, finish with iw_crc_final(): the CRC32c value (RFC 3720 B.4: 32 zero
 * bytes give 0x8a9136aa). On the wire it goes least significant byte first (32 zero
 * bytes: aa 36 91 8a), as in iSCSI, which tshark's iwarp_mpa check confirms (see
 * tests/wire/iwarp/test_iw_proto.c): write it with iw_crc_put, read it with iw_crc_get. */
uint32_t iw_crc_init(void);
uint32_t iw_crc_update(uint32_t crc, const void *buf, size_t len);
uint32_t iw_crc_final(uint32_t crc);

static inline void iw_crc_put(void *p, uint32_t crc)
{
	unsigned char *b = p;

	b[0] = (unsigned char)crc;
	b[1] = (unsigned char)(crc >> 8);
	b[2] = (unsigned char)(crc >> 16);
	b[3] = (unsigned char)(crc >> 24);
}

static inline uint32_t iw_crc_get(const void *p)
{
	const unsigned char *b = p;

	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
	       (uint32_t)b[3] << 24;
}

/* Opcode name for logs ("write", "read-req", ...; "?" for none). */
const char *iw_op_name(uint8_t opcode);

#endif
