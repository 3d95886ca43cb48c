/*
 * The FPDU header codec (iw_proto.h): the layouts of RFC 5041 §5, RFC 5040 §4 and
 * RFC 7306, every field big endian. Offsets below count from ULPDU_Length.
 */
#include "wire/iwarp/iw_proto.h"

#include <errno.h>
#include <string.h>

const struct iw_op_info iw_op_info[IW_OP_MAX] = {
	[IW_OP_WRITE] = { "write", true, true, false, false, 0, IW_HDR_TAGGED },
	[IW_OP_READ_REQ] = { "read-req", false, false, false, true, IW_QN_READ_REQ,
			     IW_HDR_UNTAGGED + 28 },
	[IW_OP_READ_RESP] = { "read-resp", true, true, false, false, 0, IW_HDR_TAGGED },
	[IW_OP_SEND] = { "send", false, true, false, false, IW_QN_SEND, IW_HDR_UNTAGGED },
	[IW_OP_SEND_INV] = { "send-inv", false, true, false, false, IW_QN_SEND,
			     IW_HDR_UNTAGGED },
	[IW_OP_SEND_SE] = { "send-se", false, true, false, false, IW_QN_SEND,
			    IW_HDR_UNTAGGED },
	[IW_OP_SEND_SE_INV] = { "send-se-inv", false, true, false, false, IW_QN_SEND,
				IW_HDR_UNTAGGED },
	[IW_OP_TERMINATE] = { "terminate", false, true, false, true, IW_QN_TERMINATE,
			      IW_HDR_UNTAGGED + 4 },
	[IW_OP_IMM] = { "imm", false, false, true, true, IW_QN_SEND, IW_HDR_UNTAGGED + 8 },
	[IW_OP_IMM_SE] = { "imm-se", false, false, true, true, IW_QN_SEND,
			   IW_HDR_UNTAGGED + 8 },
	[IW_OP_ATOMIC_REQ] = { "atomic-req", false, false, true, true, IW_QN_ATOMIC_REQ,
			       IW_HDR_UNTAGGED + 52 },
	[IW_OP_ATOMIC_RESP] = { "atomic-resp", false, false, true, true, IW_QN_ATOMIC_RESP,
				IW_HDR_UNTAGGED + 12 },
};

const char *iw_op_name(uint8_t opcode)
{
	if (opcode >= IW_OP_MAX || !iw_op_info[opcode].name)
		return "?";
	return iw_op_info[opcode].name;
}

int iw_hdr_encode(void *buf, const struct iw_hdr *h)
{
	unsigned char *p = buf;
	const struct iw_op_info *op;
	uint32_t ulpdu;

	if (h->opcode >= IW_OP_MAX || !iw_op_info[h->opcode].name)
		return -EINVAL;
	op = &iw_op_info[h->opcode];
	if (!op->has_payload && h->payload_len)
		return -EINVAL;
	if (h->opcode == IW_OP_TERMINATE && h->payload_len > IW_TERM_HDRS_MAX)
		return -EINVAL;
	if (op->single && (!h->last || h->mo))
		return -EINVAL;
	if (h->opcode == IW_OP_ATOMIC_REQ && h->atomic_op > IW_ATOMIC_CMP_SWAP)
		return -EINVAL;
	if ((uint64_t)op->hdr_len - IW_MPA_LEN_BYTES + h->payload_len > IW_ULPDU_MAX)
		return -EINVAL;
	ulpdu = op->hdr_len - IW_MPA_LEN_BYTES + h->payload_len;

	/* Every byte of the header is written below, reserved ones as zero (a memset of
	 * hdr_len bytes, its length unknown to the compiler, cost more than the rest). */
	iw_put16(p, (uint16_t)ulpdu);
	p[2] = (unsigned char)((op->tagged ? IW_DDP_T : 0) | (h->last ? IW_DDP_L : 0) |
			       IW_DDP_VERSION);
	p[3] = (unsigned char)(IW_RDMAP_VERSION << IW_RDMAP_RV_SHIFT | h->opcode);
	if (op->tagged) {
		iw_put32(p + 4, h->stag);
		iw_put64(p + 8, h->to);
		return op->hdr_len;
	}
	iw_put32(p + 4, h->opcode == IW_OP_SEND_INV || h->opcode == IW_OP_SEND_SE_INV
				? h->inv_stag : 0);
	iw_put32(p + 8, op->qn);
	iw_put32(p + 12, h->msn);
	iw_put32(p + 16, h->mo);
	switch (h->opcode) {
	case IW_OP_READ_REQ:
		iw_put32(p + 20, h->sink_stag);
		iw_put64(p + 24, h->sink_to);
		iw_put32(p + 32, h->read_size);
		iw_put32(p + 36, h->src_stag);
		iw_put64(p + 40, h->src_to);
		break;
	case IW_OP_TERMINATE:
		p[20] = (unsigned char)((h->term_layer & 0xf) << 4 | (h->term_etype & 0xf));
		p[21] = h->term_ecode;
		p[22] = (unsigned char)((h->term_hdr_len ? IW_TERM_M : 0) |
					(h->term_hdr_ddp ? IW_TERM_D : 0) |
					(h->term_hdr_rdmap ? IW_TERM_R : 0));
		p[23] = 0;
		break;
	case IW_OP_IMM:
	case IW_OP_IMM_SE:
		iw_put64(p + 20, h->imm);
		break;
	case IW_OP_ATOMIC_REQ:
		iw_put32(p + 20, h->atomic_op);
		iw_put32(p + 24, h->atomic_req_id);
		iw_put32(p + 28, h->atomic_stag);
		iw_put64(p + 32, h->atomic_to);
		iw_put64(p + 40, h->add_swap);
		iw_put64(p + 48, h->add_swap_mask);
		iw_put64(p + 56, h->compare);
		iw_put64(p + 64, h->compare_mask);
		break;
	case IW_OP_ATOMIC_RESP:
		iw_put32(p + 20, h->atomic_req_id);
		iw_put64(p + 24, h->orig_value);
		break;
	default:
		break;
	}
	return op->hdr_len;
}

static int fault(struct iw_term *term, uint8_t layer, uint8_t etype, uint8_t ecode)
{
	term->layer = layer;
	term->etype = etype;
	term->ecode = ecode;
	return -EPROTO;
}

/* A header that does not fit its ULPDU_Length, payload where the opcode carries none, a
 * single-segment message that is not one: RFC 5040 names no code for these; siw answers
 * the like with RDMAP / remote operation / unspecified. */
static int bad_shape(struct iw_term *term)
{
	return fault(term, IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_UNSPECIFIED);
}

int iw_hdr_decode(const void *buf, size_t len, bool ext, struct iw_hdr *h, struct iw_term *term)
{
	const unsigned char *p = buf;
	const struct iw_op_info *op;
	uint8_t opcode;
	bool tagged;
	uint32_t body;

	if (len < 4)
		return -EAGAIN;
	memset(h, 0, sizeof(*h));
	tagged = p[2] & IW_DDP_T;
	/* RFC 5041 §7.2: a version it does not speak is a DDP error of the buffer model
	 * the T bit names; siw: tagged 0x04, untagged 0x06. */
	if ((p[2] & IW_DDP_DV_MASK) != IW_DDP_VERSION)
		return tagged ? fault(term, IW_TERM_DDP, IW_ETYPE_DDP_TAGGED,
				      IW_ECODE_DDP_T_INV_VERSION)
			      : fault(term, IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED,
				      IW_ECODE_DDP_U_INV_VERSION);
	if (p[3] >> IW_RDMAP_RV_SHIFT != IW_RDMAP_VERSION)
		return fault(term, IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP,
			     IW_ECODE_RDMAP_INV_VERSION);
	opcode = p[3] & IW_RDMAP_OP_MASK;
	op = &iw_op_info[opcode];
	/* An opcode not known, not negotiated, or with the wrong buffer model. */
	if (!op->name || (op->ext && !ext) || op->tagged != tagged)
		return fault(term, IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP,
			     IW_ECODE_RDMAP_INV_OPCODE);
	h->opcode = opcode;
	h->tagged = tagged;
	h->last = p[2] & IW_DDP_L;
	h->ulpdu_len = iw_get16(p);
	if (h->ulpdu_len < op->hdr_len - IW_MPA_LEN_BYTES)
		return bad_shape(term);
	h->payload_len = h->ulpdu_len - (op->hdr_len - IW_MPA_LEN_BYTES);
	if ((!op->has_payload && h->payload_len) ||
	    (opcode == IW_OP_TERMINATE && h->payload_len > IW_TERM_HDRS_MAX) ||
	    (op->single && !h->last))
		return bad_shape(term);
	if (len < op->hdr_len)
		return -EAGAIN;

	if (tagged) {
		h->stag = iw_get32(p + 4);
		h->to = iw_get64(p + 8);
		return op->hdr_len;
	}
	if (opcode == IW_OP_SEND_INV || opcode == IW_OP_SEND_SE_INV)
		h->inv_stag = iw_get32(p + 4);
	h->qn = iw_get32(p + 8);
	h->msn = iw_get32(p + 12);
	h->mo = iw_get32(p + 16);
	if (h->qn != op->qn)
		return fault(term, IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_QN);
	if (op->single && h->mo)
		return fault(term, IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_MO);
	switch (opcode) {
	case IW_OP_READ_REQ:
		h->sink_stag = iw_get32(p + 20);
		h->sink_to = iw_get64(p + 24);
		h->read_size = iw_get32(p + 32);
		h->src_stag = iw_get32(p + 36);
		h->src_to = iw_get64(p + 40);
		break;
	case IW_OP_TERMINATE:
		h->term_layer = p[20] >> 4;
		h->term_etype = p[20] & 0xf;
		h->term_ecode = p[21];
		h->term_hdr_len = p[22] & IW_TERM_M;
		h->term_hdr_ddp = p[22] & IW_TERM_D;
		h->term_hdr_rdmap = p[22] & IW_TERM_R;
		break;
	case IW_OP_IMM:
	case IW_OP_IMM_SE:
		h->imm = iw_get64(p + 20);
		break;
	case IW_OP_ATOMIC_REQ:
		body = iw_get32(p + 20);
		h->atomic_op = body & 0xf; /* the 28 bits above it are reserved */
		if (h->atomic_op > IW_ATOMIC_CMP_SWAP)
			return fault(term, IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP,
				     IW_ECODE_RDMAP_INV_OPCODE);
		h->atomic_req_id = iw_get32(p + 24);
		h->atomic_stag = iw_get32(p + 28);
		h->atomic_to = iw_get64(p + 32);
		h->add_swap = iw_get64(p + 40);
		h->add_swap_mask = iw_get64(p + 48);
		h->compare = iw_get64(p + 56);
		h->compare_mask = iw_get64(p + 64);
		break;
	case IW_OP_ATOMIC_RESP:
		h->atomic_req_id = iw_get32(p + 20);
		h->orig_value = iw_get64(p + 24);
		break;
	default:
		break;
	}
	return op->hdr_len;
}

int iw_term_encode(void *buf, size_t cap, const struct iw_term *t, const void *bad,
		   size_t bad_len)
{
	const unsigned char *b = bad;
	unsigned char *p = buf;
	struct iw_hdr h = {
		.opcode = IW_OP_TERMINATE,
		.last = true,
		.msn = 1,
		.term_layer = t->layer,
		.term_etype = t->etype,
		.term_ecode = t->ecode,
	};
	size_t copy = 0;
	int n;

	if (bad_len) {
		bool tagged;

		if (bad_len < 4)
			return -EINVAL;
		tagged = b[2] & IW_DDP_T;
		copy = tagged ? IW_HDR_TAGGED : IW_HDR_UNTAGGED;
		if (bad_len < copy)
			return -EINVAL;
		h.term_hdr_len = h.term_hdr_ddp = true;
		/* RFC 5040 §4.8: the RDMAP header is that of a Read Request (28 bytes). */
		if (!tagged && (b[3] & IW_RDMAP_OP_MASK) == IW_OP_READ_REQ &&
		    bad_len >= (size_t)IW_HDR_UNTAGGED + 28) {
			copy += 28;
			h.term_hdr_rdmap = true;
		}
	}
	if (cap < iw_op_info[IW_OP_TERMINATE].hdr_len + copy)
		return -EINVAL;
	h.payload_len = (uint32_t)copy;
	n = iw_hdr_encode(p, &h);
	if (n < 0)
		return n;
	if (copy)
		memcpy(p + n, b, copy);
	return n + (int)copy;
}
