/*
 * The RoCE v2 packet codec (rv_proto.h): the opcodes of IBA vol 1 table 38 that softverbs
 * speaks (RC, UC, UD, XRC, and RoCE v2's CNP) and the header layouts of IBA 9.2-9.3.
 */
#include "wire/roce/rv_proto.h"
#include "wire/roce/rv_bytes.h"

#include <errno.h>
#include <string.h>

/* The header's length from what it carries. */
#define HL(f)                                                                                   \
	(RV_BTH + ((f) & RV_H_XRCETH ? RV_XRCETH : 0) + ((f) & RV_H_DETH ? RV_DETH : 0) +       \
	 ((f) & RV_H_RETH ? RV_RETH : 0) + ((f) & RV_H_ATOMICETH ? RV_ATOMICETH : 0) +           \
	 ((f) & RV_H_AETH ? RV_AETH : 0) + ((f) & RV_H_ATOMICACKETH ? RV_ATOMICACKETH : 0) +     \
	 ((f) & RV_H_IMMDT ? RV_IMMDT : 0) + ((f) & RV_H_IETH ? RV_IETH : 0) +                   \
	 ((f) & RV_H_CNP ? RV_CNP_RSVD : 0))
#define OP(t, o, name, f) [(t) | (o)] = { name, (f), HL(f) }

#define PAY RV_PAYLOAD
#define ONLY (RV_FIRST | RV_LAST)

/* SEND and WRITE, what UC has too; @x: the headers every request of the transport has. */
#define SENDS_WRITES(t, x, pfx)                                                                 \
	OP(t, RV_SEND_FIRST, pfx "send-first", (x) | PAY | RV_FIRST),                           \
	OP(t, RV_SEND_MIDDLE, pfx "send-middle", (x) | PAY),                                    \
	OP(t, RV_SEND_LAST, pfx "send-last", (x) | PAY | RV_LAST),                              \
	OP(t, RV_SEND_LAST_IMM, pfx "send-last-imm", (x) | RV_H_IMMDT | PAY | RV_LAST),         \
	OP(t, RV_SEND_ONLY, pfx "send-only", (x) | PAY | ONLY),                                 \
	OP(t, RV_SEND_ONLY_IMM, pfx "send-only-imm", (x) | RV_H_IMMDT | PAY | ONLY),            \
	OP(t, RV_WRITE_FIRST, pfx "write-first", (x) | RV_H_RETH | PAY | RV_FIRST),             \
	OP(t, RV_WRITE_MIDDLE, pfx "write-middle", (x) | PAY),                                  \
	OP(t, RV_WRITE_LAST, pfx "write-last", (x) | PAY | RV_LAST),                            \
	OP(t, RV_WRITE_LAST_IMM, pfx "write-last-imm", (x) | RV_H_IMMDT | PAY | RV_LAST),       \
	OP(t, RV_WRITE_ONLY, pfx "write-only", (x) | RV_H_RETH | PAY | ONLY),                   \
	OP(t, RV_WRITE_ONLY_IMM, pfx "write-only-imm", (x) | RV_H_RETH | RV_H_IMMDT | PAY | ONLY)

/* What only the reliable transports have: READ, atomics, SEND with invalidate, and the
 * responder's packets (which carry no XRCETH). */
#define RELIABLE(t, x, pfx)                                                                     \
	OP(t, RV_READ_REQ, pfx "read-req", (x) | RV_H_RETH | ONLY),                             \
	OP(t, RV_READ_RESP_FIRST, pfx "read-resp-first", RV_H_AETH | PAY | RV_FIRST |            \
							   RV_RESPONSE),                \
	OP(t, RV_READ_RESP_MIDDLE, pfx "read-resp-middle", PAY | RV_RESPONSE),                  \
	OP(t, RV_READ_RESP_LAST, pfx "read-resp-last", RV_H_AETH | PAY | RV_LAST | RV_RESPONSE), \
	OP(t, RV_READ_RESP_ONLY, pfx "read-resp-only", RV_H_AETH | PAY | ONLY | RV_RESPONSE),   \
	OP(t, RV_ACK, pfx "ack", RV_H_AETH | ONLY | RV_RESPONSE),                               \
	OP(t, RV_ATOMIC_ACK, pfx "atomic-ack", RV_H_AETH | RV_H_ATOMICACKETH | ONLY |           \
						     RV_RESPONSE),                      \
	OP(t, RV_CMP_SWAP, pfx "cmp-swap", (x) | RV_H_ATOMICETH | ONLY),                        \
	OP(t, RV_FETCH_ADD, pfx "fetch-add", (x) | RV_H_ATOMICETH | ONLY),                      \
	OP(t, RV_SEND_LAST_INV, pfx "send-last-inv", (x) | RV_H_IETH | PAY | RV_LAST),          \
	OP(t, RV_SEND_ONLY_INV, pfx "send-only-inv", (x) | RV_H_IETH | PAY | ONLY)

const struct rv_op_info rv_op_info[256] = {
	SENDS_WRITES(RV_RC, 0, "rc-"),
	RELIABLE(RV_RC, 0, "rc-"),
	SENDS_WRITES(RV_UC, 0, "uc-"),
	OP(RV_UD, RV_SEND_ONLY, "ud-send-only", RV_H_DETH | PAY | ONLY),
	OP(RV_UD, RV_SEND_ONLY_IMM, "ud-send-only-imm", RV_H_DETH | RV_H_IMMDT | PAY | ONLY),
	OP(RV_CNP, RV_CNP_OP, "cnp", RV_H_CNP | ONLY),
	SENDS_WRITES(RV_XRC, RV_H_XRCETH, "xrc-"),
	RELIABLE(RV_XRC, RV_H_XRCETH, "xrc-"),
};

const char *rv_op_name(uint8_t opcode)
{
	return rv_op_info[opcode].name ? rv_op_info[opcode].name : "?";
}

int rv_encode(void *buf, const struct rv_pkt *p, uint32_t payload_len)
{
	const struct rv_op_info *op = &rv_op_info[p->opcode];
	uint8_t *b = buf, *q;
	uint8_t pad = rv_pad_len(payload_len);

	if (!op->name || (payload_len && !(op->flags & RV_PAYLOAD)))
		return -EINVAL;
	/* BTH: opcode; SE, M, PadCnt, TVer 0; P_Key; FECN, BECN, reserved; DestQP; A,
	 * reserved; PSN */
	b[0] = p->opcode;
	b[1] = (uint8_t)((p->se ? 0x80 : 0) | (p->mig ? 0x40 : 0) | pad << 4);
	rv_put16(b + 2, p->pkey);
	b[4] = (uint8_t)((p->fecn ? 0x80 : 0) | (p->becn ? 0x40 : 0));
	rv_put24(b + 5, p->dest_qpn);
	b[8] = p->ack_req ? 0x80 : 0;
	rv_put24(b + 9, p->psn);
	q = b + RV_BTH;
	if (op->flags & RV_H_XRCETH) {
		q[0] = 0;
		rv_put24(q + 1, p->xrc_srqn);
		q += RV_XRCETH;
	}
	if (op->flags & RV_H_DETH) {
		rv_put32(q, p->qkey);
		q[4] = 0;
		rv_put24(q + 5, p->src_qpn);
		q += RV_DETH;
	}
	if (op->flags & RV_H_RETH) {
		rv_put64(q, p->va);
		rv_put32(q + 8, p->rkey);
		rv_put32(q + 12, p->dma_len);
		q += RV_RETH;
	}
	if (op->flags & RV_H_ATOMICETH) {
		rv_put64(q, p->va);
		rv_put32(q + 8, p->rkey);
		rv_put64(q + 12, p->swap_add);
		rv_put64(q + 20, p->compare);
		q += RV_ATOMICETH;
	}
	if (op->flags & RV_H_AETH) {
		q[0] = p->syndrome;
		rv_put24(q + 1, p->msn);
		q += RV_AETH;
	}
	if (op->flags & RV_H_ATOMICACKETH) {
		rv_put64(q, p->orig);
		q += RV_ATOMICACKETH;
	}
	if (op->flags & RV_H_IMMDT) {
		memcpy(q, &p->imm_be, RV_IMMDT); /* already in network order */
		q += RV_IMMDT;
	}
	if (op->flags & RV_H_IETH) {
		rv_put32(q, p->inv_rkey);
		q += RV_IETH;
	}
	if (op->flags & RV_H_CNP) {
		memset(q, 0, RV_CNP_RSVD);
		q += RV_CNP_RSVD;
	}
	return (int)(q - b);
}

int rv_decode(const void *buf, size_t len, struct rv_pkt *p)
{
	const uint8_t *b = buf, *q;
	const struct rv_op_info *op;
	size_t rest;

	memset(p, 0, sizeof(*p));
	if (len < RV_BTH + RV_ICRC)
		return -EPROTO;
	op = &rv_op_info[b[0]];
	/* IBA 9.6.1.1: a transport version not 0 is dropped; so is an opcode not known */
	if ((b[1] & 0x0f) || !op->name || len < (size_t)op->hdr_len + RV_ICRC)
		return -EPROTO;
	p->opcode = b[0];
	p->se = b[1] & 0x80;
	p->mig = b[1] & 0x40;
	p->pad = (b[1] >> 4) & 3;
	p->pkey = rv_get16(b + 2);
	p->fecn = b[4] & 0x80;
	p->becn = b[4] & 0x40;
	p->dest_qpn = rv_get24(b + 5);
	p->ack_req = b[8] & 0x80;
	p->psn = rv_get24(b + 9);
	/* IBA 9.6.1.1 (packet length): payload and pad a multiple of 4, the pad within it */
	rest = len - op->hdr_len - RV_ICRC;
	if (rest % 4 || p->pad > rest || (!(op->flags & RV_PAYLOAD) && rest))
		return -EPROTO;
	q = b + RV_BTH;
	if (op->flags & RV_H_XRCETH) {
		p->xrc_srqn = rv_get24(q + 1);
		q += RV_XRCETH;
	}
	if (op->flags & RV_H_DETH) {
		p->qkey = rv_get32(q);
		p->src_qpn = rv_get24(q + 5);
		q += RV_DETH;
	}
	if (op->flags & RV_H_RETH) {
		p->va = rv_get64(q);
		p->rkey = rv_get32(q + 8);
		p->dma_len = rv_get32(q + 12);
		q += RV_RETH;
	}
	if (op->flags & RV_H_ATOMICETH) {
		p->va = rv_get64(q);
		p->rkey = rv_get32(q + 8);
		p->swap_add = rv_get64(q + 12);
		p->compare = rv_get64(q + 20);
		q += RV_ATOMICETH;
	}
	if (op->flags & RV_H_AETH) {
		p->syndrome = q[0];
		p->msn = rv_get24(q + 1);
		q += RV_AETH;
	}
	if (op->flags & RV_H_ATOMICACKETH) {
		p->orig = rv_get64(q);
		q += RV_ATOMICACKETH;
	}
	if (op->flags & RV_H_IMMDT) {
		memcpy(&p->imm_be, q, RV_IMMDT);
		q += RV_IMMDT;
	}
	if (op->flags & RV_H_IETH)
		p->inv_rkey = rv_get32(q);
	p->hdr_len = op->hdr_len;
	p->payload_len = (uint32_t)(rest - p->pad);
	return 0;
}
