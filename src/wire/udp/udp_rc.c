/*
 * A reliable connection's packets on the RoCE v2 wire (udp_rc.h): PSNs for the core's
 * msns and back, opcodes for its messages and back.
 */
#include "wire/udp/udp_rc.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <string.h>

static uint32_t psn_add(uint32_t psn, uint32_t n)
{
	return (psn + n) & RV_PSN_MASK;
}

/* @a - @b as PSNs: a signed 24-bit distance (IBA 9.7.1: the window is half the space). */
static int32_t psn_diff(uint32_t a, uint32_t b)
{
	return (int32_t)((a - b) << 8) >> 8;
}

/* msn order with wrap-around (as the core's sv_msn_le). */
static bool msn_le(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) <= 0;
}

/* The packets of a READ's response: one per MTU, one for nothing (IBA 9.4.3). */
static uint32_t read_pkts(const struct udp_rc *rc, uint64_t len)
{
	return len ? (uint32_t)((len + rc->mtu - 1) / rc->mtu) : 1;
}

void udp_rc_uc(struct udp_rc *rc)
{
	rc->cls = RV_UC;
}

void udp_rc_xrc(struct udp_rc *rc)
{
	rc->cls = RV_XRC;
}

void udp_rc_rtr(struct udp_rc *rc, uint32_t rq_psn, uint32_t mtu)
{
	rc->mtu = mtu;
	rc->epsn = rq_psn & RV_PSN_MASK;
	rc->emsn = 1; /* the core's responder starts at msn 1 after RESET */
	rc->ib_msn = 0;
	memset(rc->hist, 0, sizeof(rc->hist));
	memset(rc->rd_hist, 0, sizeof(rc->rd_hist));
	rc->rd_next = 0;
	rc->wr_active = rc->send_active = false;
}

void udp_rc_rts(struct udp_rc *rc, uint32_t sq_psn)
{
	rc->next_psn = sq_psn & RV_PSN_MASK;
	rc->acked_psn = psn_add(rc->next_psn, RV_PSN_MASK);
	rc->last_msn = 0;
	rc->n_reads = 0;
	rc->rr_valid = false;
}

/* --- requester ----------------------------------------------------------------------------- */

/*
 * The PSN request @msn had (@msn at most last_msn + 1): counted back from the nearest
 * later point whose PSN is known, the next new request's or an outstanding READ's (no
 * READ with extra PSNs lies between). A READ whose response all came leaves reads[]
 * only once every READ before it did: nothing before it is sent again then.
 */
static uint32_t psn_of(const struct udp_rc *rc, uint32_t msn)
{
	uint32_t a_msn = rc->last_msn + 1, a_psn = rc->next_psn;

	for (uint32_t i = rc->n_reads; i-- > 0;) {
		const struct udp_rc_req *r = &rc->reads[i];

		if (r->msn == msn)
			return r->psn;
		if (msn_le(r->msn, msn))
			break;
		a_msn = r->msn;
		a_psn = r->psn;
	}
	return (a_psn - (a_msn - msn)) & RV_PSN_MASK;
}

/* A request sent before goes again (the core went back, sv_comp.c): what was sent from
 * it on is forgotten, and it gets its PSN again. */
static void rewind_to(struct udp_rc *rc, uint32_t msn)
{
	uint32_t psn = psn_of(rc, msn);

	while (rc->n_reads && msn_le(msn, rc->reads[rc->n_reads - 1].msn))
		rc->n_reads--;
	rc->next_psn = psn;
	rc->last_msn = msn - 1;
}

static uint8_t send_opcode(const struct sv_hdr *h)
{
	bool first = h->flags & SV_F_FIRST, last = h->flags & SV_F_LAST;
	bool imm = h->flags & SV_F_IMM, inv = h->rkey != 0;

	if (first && last)
		return imm ? RV_SEND_ONLY_IMM : inv ? RV_SEND_ONLY_INV : RV_SEND_ONLY;
	if (first)
		return RV_SEND_FIRST;
	if (last)
		return imm ? RV_SEND_LAST_IMM : inv ? RV_SEND_LAST_INV : RV_SEND_LAST;
	return RV_SEND_MIDDLE;
}

static uint8_t write_opcode(const struct sv_hdr *h)
{
	bool first = h->flags & SV_F_FIRST, last = h->flags & SV_F_LAST;
	bool imm = h->flags & SV_F_IMM;

	if (first && last)
		return imm ? RV_WRITE_ONLY_IMM : RV_WRITE_ONLY;
	if (first)
		return RV_WRITE_FIRST;
	if (last)
		return imm ? RV_WRITE_LAST_IMM : RV_WRITE_LAST;
	return RV_WRITE_MIDDLE;
}

/* UC: a packet of a SEND or WRITE, numbered, nothing waited for. */
static int encode_uc(struct udp_rc *rc, const struct sv_hdr *h, struct rv_pkt *p)
{
	if (h->op == SV_OP_SEND) {
		p->opcode = RV_UC | send_opcode(h);
		if (h->rkey)
			return -EINVAL; /* (Send with Invalidate: RC's and XRC's only) */
	} else if (h->op == SV_OP_WRITE && !(h->flags & SV_F_PLACED)) {
		p->opcode = RV_UC | write_opcode(h);
		p->va = h->raddr;
		p->rkey = h->rkey;
		p->dma_len = (uint32_t)h->total;
	} else {
		return -EINVAL; /* UC has no other request */
	}
	p->psn = rc->next_psn;
	p->imm_be = h->imm;
	p->se = (h->flags & SV_F_SOLICITED) && (h->flags & SV_F_LAST);
	rc->next_psn = psn_add(rc->next_psn, 1);
	return 0;
}

static int encode_request(struct udp_rc *rc, const struct sv_hdr *h, struct rv_pkt *p)
{
	uint32_t npkts = 1;

	if (rc->cls == RV_UC)
		return encode_uc(rc, h, p);
	switch (h->op) {
	case SV_OP_SEND:
		p->opcode = rc->cls | send_opcode(h);
		p->inv_rkey = h->rkey;
		break;
	case SV_OP_WRITE:
		if (h->flags & SV_F_PLACED)
			return -EINVAL; /* (no direct placement on this wire) */
		p->opcode = rc->cls | write_opcode(h);
		p->va = h->raddr;
		p->rkey = h->rkey;
		p->dma_len = (uint32_t)h->total;
		break;
	case SV_OP_READ_REQ:
		p->opcode = rc->cls | RV_READ_REQ;
		p->va = h->raddr;
		p->rkey = h->rkey;
		p->dma_len = (uint32_t)h->total;
		npkts = read_pkts(rc, h->total);
		break;
	case SV_OP_ATOMIC:
		p->opcode = rc->cls | ((h->flags & SV_F_CMP_SWP) ? RV_CMP_SWAP : RV_FETCH_ADD);
		p->va = h->raddr;
		p->rkey = h->rkey;
		/* AtomicETH: Swap (or Add) Data, then Compare Data (IBA 9.3.3.3.2). */
		p->swap_add = (h->flags & SV_F_CMP_SWP) ? h->swap : h->compare_add;
		p->compare = (h->flags & SV_F_CMP_SWP) ? h->compare_add : 0;
		break;
	default:
		return -EINVAL; /* Terminate, and anything else: RC has no packet for it */
	}
	if (!h->msn)
		return -EINVAL; /* every RC request is numbered */
	if (msn_le(h->msn, rc->last_msn))
		rewind_to(rc, h->msn);
	/* The window: wait for answers (nothing in flight: it goes, however long). */
	{
		int32_t out = psn_diff(rc->next_psn, psn_add(rc->acked_psn, 1));

		if (out > 0 && out + (int32_t)npkts > UDP_RC_WINDOW)
			return -EAGAIN;
	}
	p->psn = rc->next_psn;
	p->imm_be = h->imm;
	p->se = (h->flags & SV_F_SOLICITED) && (h->flags & SV_F_LAST);
	p->xrc_srqn = h->xrc_srqn; /* (XRC's XRCETH; no other carries it) */
	/* The responder acknowledges a message's last packet, and every so many within a
	 * long one (IBA 9.7.5.1: the A bit). */
	p->ack_req = (h->flags & SV_F_LAST) || !(p->psn % UDP_RC_ACK_EVERY);
	if (h->op == SV_OP_READ_REQ) {
		if (rc->n_reads == UDP_RC_READS) /* (more than the core lets out: the oldest) */
			memmove(rc->reads, rc->reads + 1, --rc->n_reads * sizeof(rc->reads[0]));
		rc->reads[rc->n_reads++] =
			(struct udp_rc_req){ .msn = h->msn, .psn = p->psn, .npkts = npkts };
	}
	rc->next_psn = psn_add(rc->next_psn, npkts);
	rc->last_msn = h->msn;
	return 0;
}

/* --- responder's answers ------------------------------------------------------------------- */

/* The request @msn the responder took: its PSN and packets, if it still knows it. */
static const struct udp_rc_req *taken_req(const struct udp_rc *rc, uint32_t msn)
{
	const struct udp_rc_req *r = &rc->hist[msn % UDP_RC_HIST];

	if (r->npkts && r->msn == msn)
		return r;
	for (uint32_t i = 0; i < UDP_RC_READS; i++) /* an older READ or atomic's */
		if (rc->rd_hist[i].npkts && rc->rd_hist[i].msn == msn)
			return &rc->rd_hist[i];
	return NULL;
}

/* The PSN an answer about request @msn carries: an acknowledgement names the last
 * packet of what it acknowledges; a NAK names the request it is about (IBA 9.7.5.1). */
static uint32_t answer_psn(const struct udp_rc *rc, uint32_t msn, bool last)
{
	const struct udp_rc_req *r = taken_req(rc, msn);

	if (r) /* (the request being taken is among them: udp_rc_arrived) */
		return last ? psn_add(r->psn, r->npkts - 1) : r->psn;
	if (msn == rc->emsn)
		return rc->epsn; /* the one expected (a sequence NAK) */
	return psn_add(rc->epsn, RV_PSN_MASK); /* (forgotten: everything taken) */
}

static uint8_t nak_code(uint32_t status)
{
	switch (status) {
	case IBV_WC_REM_INV_REQ_ERR:
		return RV_NAK_INV_REQ;
	case IBV_WC_REM_ACCESS_ERR:
		return RV_NAK_REM_ACCESS;
	default:
		return RV_NAK_REM_OP;
	}
}

static int encode_answer(const struct udp_rc *rc, const struct sv_hdr *h, struct rv_pkt *p)
{
	const struct udp_rc_req *r;
	bool first = h->flags & SV_F_FIRST, last = h->flags & SV_F_LAST;

	p->msn = rc->ib_msn;
	p->syndrome = RV_AETH_ACK | RV_AETH_CREDIT_INVALID; /* no credits: unlimited */
	switch (h->op) {
	case SV_OP_ACK:
		p->opcode = rc->cls | RV_ACK;
		p->psn = answer_psn(rc, h->msn, true);
		return 0;
	case SV_OP_SEQ_NAK:
		p->opcode = rc->cls | RV_ACK;
		p->syndrome = RV_AETH_NAK | RV_NAK_PSN_SEQ;
		p->psn = answer_psn(rc, h->msn, false);
		return 0;
	case SV_OP_NAK:
		p->opcode = rc->cls | RV_ACK;
		p->syndrome = RV_AETH_NAK | nak_code(h->status);
		p->psn = answer_psn(rc, h->msn, false);
		return 0;
	case SV_OP_RNR:
		p->opcode = rc->cls | RV_ACK;
		p->syndrome = RV_AETH_RNR_NAK | (h->status & RV_AETH_VALUE_MASK);
		p->psn = answer_psn(rc, h->msn, false);
		return 0;
	case SV_OP_READ_RESP:
		r = taken_req(rc, h->msn);
		if (!r)
			return -EINVAL;
		p->opcode = rc->cls | (first && last ? RV_READ_RESP_ONLY
				     : first       ? RV_READ_RESP_FIRST
				     : last        ? RV_READ_RESP_LAST
						   : RV_READ_RESP_MIDDLE);
		p->psn = psn_add(r->psn, (uint32_t)(h->offset / rc->mtu));
		return 0;
	case SV_OP_ATOMIC_RESP:
		r = taken_req(rc, h->msn);
		if (!r)
			return -EINVAL;
		p->opcode = rc->cls | RV_ATOMIC_ACK;
		p->psn = r->psn;
		p->orig = h->value;
		return 0;
	default:
		return -EINVAL;
	}
}

int udp_rc_encode(struct udp_rc *rc, const struct sv_hdr *h, struct rv_pkt *p)
{
	return h->op < SV_OP_REQ_MAX ? encode_request(rc, h, p) : encode_answer(rc, h, p);
}

/* --- decoding ------------------------------------------------------------------------------ */

/* A request's packet in order (its PSN the one expected): whether its opcode may come
 * now (IBA 9.8.3.1: FIRST, MIDDLE, LAST in sequence) and its payload fits (IBA C9-47:
 * all but the last packet of a message exactly the MTU). */
static bool in_sequence(const struct udp_rc *rc, const struct rv_pkt *p)
{
	uint8_t op = p->opcode & 0x1f;
	uint16_t f = rv_op_info[p->opcode].flags;
	bool send = op <= RV_SEND_ONLY_IMM || op == RV_SEND_LAST_INV || op == RV_SEND_ONLY_INV;
	bool write = op >= RV_WRITE_FIRST && op <= RV_WRITE_ONLY_IMM;

	if (p->payload_len > rc->mtu || (!(f & RV_LAST) && p->payload_len != rc->mtu))
		return false;
	if (rc->send_active)
		return send && !(f & RV_FIRST);
	if (rc->wr_active)
		return write && !(f & RV_FIRST);
	return !(f & RV_PAYLOAD) || (f & RV_FIRST);
}

static void decode_request(const struct udp_rc *rc, const struct rv_pkt *p, struct sv_hdr *h,
			   bool in_order)
{
	uint8_t op = p->opcode & 0x1f;
	uint16_t f = rv_op_info[p->opcode].flags;

	h->flags = (f & RV_FIRST ? SV_F_FIRST : 0) | (f & RV_LAST ? SV_F_LAST : 0) |
		   (p->se ? SV_F_SOLICITED : 0) | (f & RV_H_IMMDT ? SV_F_IMM : 0) |
		   (p->ack_req ? SV_F_ACK_REQ : 0);
	h->imm = p->imm_be;
	h->len = p->payload_len;
	h->xrc_srqn = p->xrc_srqn; /* (0 but on XRC) */
	switch (op) {
	case RV_READ_REQ:
		h->op = SV_OP_READ_REQ;
		h->raddr = p->va;
		h->rkey = p->rkey;
		h->total = p->dma_len;
		break;
	case RV_CMP_SWAP:
	case RV_FETCH_ADD:
		h->op = SV_OP_ATOMIC;
		h->raddr = p->va;
		h->rkey = p->rkey;
		if (op == RV_CMP_SWAP) {
			h->flags |= SV_F_CMP_SWP;
			h->compare_add = p->compare;
			h->swap = p->swap_add;
		} else {
			h->compare_add = p->swap_add;
		}
		h->total = 8;
		break;
	case RV_WRITE_FIRST:
	case RV_WRITE_ONLY:
	case RV_WRITE_ONLY_IMM:
		h->op = SV_OP_WRITE;
		h->raddr = p->va;
		h->rkey = p->rkey;
		h->total = p->dma_len;
		break;
	case RV_WRITE_MIDDLE:
	case RV_WRITE_LAST:
	case RV_WRITE_LAST_IMM:
		h->op = SV_OP_WRITE;
		h->raddr = rc->wr_va;
		h->rkey = rc->wr_rkey;
		h->total = rc->wr_len;
		h->offset = rc->wr_off;
		break;
	default: /* the SENDs: their length is known at their end (total: so far) */
		h->op = SV_OP_SEND;
		h->offset = (f & RV_FIRST) ? 0 : rc->send_off;
		h->total = h->offset + h->len;
		h->rkey = (f & RV_H_IETH) ? p->inv_rkey : 0;
		break;
	}
	if (in_order && !in_sequence(rc, p))
		h->op = SV_OP_BAD; /* refused: an invalid request (NAK, Error) */
}

/* The outstanding READ whose response has PSN @psn. */
static const struct udp_rc_req *read_of(const struct udp_rc *rc, uint32_t psn)
{
	for (uint32_t i = 0; i < rc->n_reads; i++) {
		const struct udp_rc_req *r = &rc->reads[i];
		int32_t d = psn_diff(psn, r->psn);

		if (d >= 0 && (uint32_t)d < r->npkts)
			return r;
	}
	return NULL;
}

/* The request an acknowledgement or NAK with PSN @psn is about; false for a PSN never
 * sent. Counted back from the nearest later known point (psn_of's inverse). */
static bool msn_of(const struct udp_rc *rc, uint32_t psn, uint32_t *msn)
{
	uint32_t a_msn = rc->last_msn + 1, a_psn = rc->next_psn;

	if (psn_diff(psn, rc->next_psn) >= 0)
		return false;
	for (uint32_t i = rc->n_reads; i-- > 0;) {
		const struct udp_rc_req *r = &rc->reads[i];
		int32_t d = psn_diff(psn, r->psn);

		if (d >= (int32_t)r->npkts)
			break; /* after it */
		if (d >= 0) {
			*msn = r->msn;
			return true;
		}
		a_msn = r->msn;
		a_psn = r->psn;
	}
	*msn = a_msn - (uint32_t)psn_diff(a_psn, psn);
	return true;
}

/* An answer acknowledged everything up to @psn: the window moves on. */
static void acked(struct udp_rc *rc, uint32_t psn)
{
	if (psn_diff(psn, rc->acked_psn) > 0)
		rc->acked_psn = psn;
}

static enum udp_rc_rx decode_answer(struct udp_rc *rc, const struct rv_pkt *p, struct sv_hdr *h)
{
	uint8_t op = p->opcode & 0x1f, type = p->syndrome & RV_AETH_TYPE_MASK;
	uint16_t f = rv_op_info[p->opcode].flags;
	const struct udp_rc_req *r;

	h->flags = SV_F_FIRST | SV_F_LAST;
	switch (op) {
	case RV_ACK:
		if (!msn_of(rc, p->psn, &h->msn))
			return UDP_RC_DROP;
		if (type == RV_AETH_ACK) {
			h->op = SV_OP_ACK;
		} else if (type == RV_AETH_RNR_NAK) {
			h->op = SV_OP_RNR;
			h->status = p->syndrome & RV_AETH_VALUE_MASK;
		} else if (type == RV_AETH_NAK) {
			switch (p->syndrome & RV_AETH_VALUE_MASK) {
			case RV_NAK_PSN_SEQ:
				h->op = SV_OP_SEQ_NAK;
				break;
			case RV_NAK_INV_REQ:
				h->op = SV_OP_NAK;
				h->status = IBV_WC_REM_INV_REQ_ERR;
				break;
			case RV_NAK_REM_ACCESS:
				h->op = SV_OP_NAK;
				h->status = IBV_WC_REM_ACCESS_ERR;
				break;
			case RV_NAK_REM_OP:
				h->op = SV_OP_NAK;
				h->status = IBV_WC_REM_OP_ERR;
				break;
			default:
				return UDP_RC_DROP;
			}
		} else {
			return UDP_RC_DROP; /* (a reserved syndrome) */
		}
		/* A NAK names the request it is about: what was before it was executed. */
		acked(rc, type == RV_AETH_ACK ? p->psn : psn_add(p->psn, RV_PSN_MASK));
		return UDP_RC_ANSWER;
	case RV_ATOMIC_ACK:
		if (!msn_of(rc, p->psn, &h->msn))
			return UDP_RC_DROP;
		h->op = SV_OP_ATOMIC_RESP;
		h->value = p->orig;
		acked(rc, p->psn);
		return UDP_RC_ANSWER;
	case RV_READ_RESP_FIRST:
	case RV_READ_RESP_MIDDLE:
	case RV_READ_RESP_LAST:
	case RV_READ_RESP_ONLY:
		r = read_of(rc, p->psn);
		if (!r)
			return UDP_RC_DROP;
		h->op = SV_OP_READ_RESP;
		h->msn = r->msn;
		h->offset = (uint64_t)(uint32_t)psn_diff(p->psn, r->psn) * rc->mtu;
		h->len = p->payload_len;
		h->flags = (f & RV_FIRST ? SV_F_FIRST : 0) | (f & RV_LAST ? SV_F_LAST : 0);
		/* In order only, each packet whole: the core completes a READ at its last
		 * segment, so none may be missing before it (a gap: the READ is asked again). */
		if ((f & RV_FIRST) ? h->offset != 0
				   : !rc->rr_valid || rc->rr_msn != r->msn || rc->rr_off != h->offset)
			return UDP_RC_DROP;
		if ((f & RV_LAST) ? psn_diff(p->psn, r->psn) != (int32_t)r->npkts - 1 ||
					    p->payload_len > rc->mtu
				  : p->payload_len != rc->mtu)
			return UDP_RC_DROP;
		acked(rc, p->psn);
		return UDP_RC_ANSWER;
	default:
		return UDP_RC_DROP;
	}
}

/* The request among @n whose packets @psn falls in, if any. */
static const struct udp_rc_req *find_psn(const struct udp_rc_req *reqs, uint32_t n, uint32_t psn)
{
	for (uint32_t i = 0; i < n; i++) {
		int32_t d = psn_diff(psn, reqs[i].psn);

		if (reqs[i].npkts && d >= 0 && (uint32_t)d < reqs[i].npkts)
			return &reqs[i];
	}
	return NULL;
}

/* Where @psn falls among the requests taken: the msn of a duplicate, if it is known. */
static bool dup_msn(const struct udp_rc *rc, uint32_t psn, uint32_t *msn)
{
	const struct udp_rc_req *r = find_psn(rc->hist, UDP_RC_HIST, psn);

	if (!r)
		r = find_psn(rc->rd_hist, UDP_RC_READS, psn);
	if (r)
		*msn = r->msn;
	return r != NULL;
}

/* UC: a message's first packet starts one whatever its PSN (the one before, if unfinished,
 * is lost); its others only in order; anything else drops the rest of its message. */
static enum udp_rc_rx decode_uc(struct udp_rc *rc, const struct rv_pkt *p, struct sv_hdr *h)
{
	uint16_t f = rv_op_info[p->opcode].flags;

	if (f & RV_RESPONSE)
		return UDP_RC_DROP;
	if (f & RV_FIRST) {
		rc->epsn = p->psn;
		rc->send_active = rc->wr_active = false;
		rc->uc_dropping = false;
	} else if (rc->uc_dropping || p->psn != rc->epsn) {
		rc->uc_dropping = true;
		return UDP_RC_DROP;
	}
	decode_request(rc, p, h, true);
	if (h->op == SV_OP_BAD) {
		rc->uc_dropping = !(f & RV_LAST);
		return UDP_RC_DROP; /* (UC answers nothing: dropped, IBA C9-*) */
	}
	h->flags &= (uint16_t)~SV_F_ACK_REQ;
	return UDP_RC_REQUEST; /* (msn 0: the core keeps no order of its own for UC) */
}

enum udp_rc_rx udp_rc_decode(struct udp_rc *rc, const struct rv_pkt *p, uint32_t peer_qpn,
			     struct sv_hdr *h)
{
	uint16_t f = rv_op_info[p->opcode].flags;
	int32_t d;

	memset(h, 0, sizeof(*h));
	h->src_qpn = peer_qpn;
	h->dest_qpn = p->dest_qpn;
	if ((p->opcode & 0xe0) != rc->cls || !rc->mtu)
		return UDP_RC_DROP;
	if (rc->cls == RV_UC)
		return decode_uc(rc, p, h);
	if (f & RV_RESPONSE)
		return decode_answer(rc, p, h);
	d = psn_diff(p->psn, rc->epsn);
	decode_request(rc, p, h, d == 0);
	if (d == 0) {
		h->msn = rc->emsn;
	} else if (d > 0) {
		h->msn = rc->emsn + 1; /* beyond the next: a gap (the core NAKs it once) */
	} else if (!dup_msn(rc, p->psn, &h->msn)) {
		/* A duplicate older than what is remembered: acknowledged again, unless it
		 * asks for an answer of its own that can no longer be given. */
		if (h->op == SV_OP_READ_REQ || h->op == SV_OP_ATOMIC || rc->emsn == 1)
			return UDP_RC_DROP;
		h->msn = rc->emsn - 1;
	}
	return UDP_RC_REQUEST;
}

void udp_rc_arrived(struct udp_rc *rc, const struct rv_pkt *p, const struct sv_hdr *h)
{
	struct udp_rc_req r = {
		.msn = h->msn,
		.psn = p->psn,
		.npkts = h->op == SV_OP_READ_REQ ? read_pkts(rc, h->total) : 1,
	};

	if (p->psn != rc->epsn || rc->cls == RV_UC)
		return;
	rc->hist[h->msn % UDP_RC_HIST] = r;
	if (h->op == SV_OP_READ_REQ || h->op == SV_OP_ATOMIC) {
		struct udp_rc_req *slot = &rc->rd_hist[rc->rd_next];

		/* (taken again after an RNR wait or a full wire: the same entry) */
		if (!find_psn(rc->rd_hist, UDP_RC_READS, p->psn)) {
			*slot = r;
			rc->rd_next = (rc->rd_next + 1) % UDP_RC_READS;
		}
	}
}

void udp_rc_taken(struct udp_rc *rc, const struct rv_pkt *p, const struct sv_hdr *h)
{
	uint16_t f = rv_op_info[p->opcode].flags;

	if (p->psn != rc->epsn)
		return; /* a duplicate, or after a gap: nothing moves */
	rc->epsn = psn_add(rc->epsn, h->op == SV_OP_READ_REQ ? read_pkts(rc, h->total) : 1);
	rc->emsn++;
	if (f & RV_LAST) {
		rc->ib_msn = (rc->ib_msn + 1) & RV_PSN_MASK;
		rc->send_active = rc->wr_active = false;
		return;
	}
	if (h->op == SV_OP_SEND) {
		rc->send_active = true;
		rc->send_off = h->offset + h->len;
	} else if (h->op == SV_OP_WRITE) {
		if (f & RV_FIRST) {
			rc->wr_va = h->raddr;
			rc->wr_rkey = h->rkey;
			rc->wr_len = (uint32_t)h->total;
			rc->wr_off = 0;
		}
		rc->wr_active = true;
		rc->wr_off += h->len;
	}
}

void udp_rc_answered(struct udp_rc *rc, const struct sv_hdr *h)
{
	if (h->op != SV_OP_READ_RESP)
		return;
	rc->rr_valid = !(h->flags & SV_F_LAST);
	rc->rr_msn = h->msn;
	rc->rr_off = h->offset + h->len;
	if (h->flags & SV_F_LAST) {
		for (uint32_t i = 0; i < rc->n_reads; i++)
			if (rc->reads[i].msn == h->msn)
				rc->reads[i].done = true;
		/* The oldest READs answered whole leave (none before them goes again). */
		while (rc->n_reads && rc->reads[0].done)
			memmove(rc->reads, rc->reads + 1, --rc->n_reads * sizeof(rc->reads[0]));
	}
}
