/*
 * The iWARP wire's transmit side: the core's segments and answers become FPDUs in a
 * queue (header and CRC built here, the payload referenced where it lies: the
 * application's registered memory, which stays put until the WR completes), and the
 * queue goes to the socket with one sendmsg per batch, from whoever flushes once the
 * core's locks are dropped (iw_tx_flush). A request is complete when the socket has
 * taken its last byte: RFC 5040 §5.1 lets a Send or a Write complete once the LLP has
 * it (TCP delivers it or the connection fails), so the requester's acknowledgement is
 * made here, never sent by the peer.
 */
#include "wire/iwarp/iw_wire.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/sv_mr.h"
#include "core/sv_path.h"
#include "util/sv_app.h"
#include "util/sv_lock.h"
#include "util/sv_log.h"

enum { SINK_STAG = 0x5f000000u }; /* the STag our Read Requests name for their sink */

void iw_tx_init(struct iw_qp *iq)
{
	sv_spin_init(&iq->txq_lock);
	atomic_flag_clear(&iq->tx_io);
	iw_tx_reset(iq);
}

void iw_tx_reset(struct iw_qp *iq)
{
	iq->probe_tpl.hl = iq->answer_tpl.hl = 0;
	atomic_store(&iq->tx_head, 0);
	atomic_store(&iq->tx_tail, 0);
	atomic_store(&iq->iov_head, 0);
	atomic_store(&iq->iov_tail, 0);
	iq->tx_part = 0;
	atomic_store(&iq->tx_wants_out, false);
	atomic_store(&iq->tx_acked, 0);
	iq->acked_told = 0;
	for (int i = 0; i < IW_QN_MAX; i++)
		iq->tx_msn[i] = 1; /* RFC 5041 §5.3: each queue's first MSN is 1 */
	atomic_store(&iq->term_sent, false);
	atomic_store(&iq->rd_head, 0);
	atomic_store(&iq->rd_tail, 0);
	atomic_store(&iq->at_head, 0);
	atomic_store(&iq->at_tail, 0);
	atomic_store(&iq->ird_unsent, 0);
	atomic_store(&iq->place_hi, 0);
	atomic_store(&iq->confirmed, 0);
	atomic_store(&iq->probing, false);
	atomic_store(&iq->send_hi, 0);
	atomic_store(&iq->tx_pairing, 0);
	atomic_store(&iq->probed, 0);
	atomic_store(&iq->ord_waits, false);
	atomic_store(&iq->sent_head, 0);
	iq->tx_stage_head = iq->tx_stage_tail = 0;
}

bool iw_tx_pending(const struct iw_qp *iq)
{
	/* What waits for the initiator's first FPDU (peer_first) is not to go yet. */
	return atomic_load_explicit(&iq->tx_head, memory_order_acquire) !=
		       atomic_load_explicit(&iq->tx_tail, memory_order_acquire) &&
	       !atomic_load_explicit(&iq->peer_first, memory_order_acquire);
}

/*
 * Pad and CRC of an FPDU whose header and payload are given (RFC 5044 §4.1, §6). With
 * CRC on, an FPDU with a payload is left UNSEALED: the payload lies in the application's
 * memory, which the application may change before TCP takes it (UCX's ucp_put_bw does,
 * with its WRITEs out), and a CRC made now over bytes read again later made the peer
 * find a bad CRC and end the connection. The writer copies such a payload and makes the
 * CRC over the copy (stage).
 */
static void seal(struct iw_qp *iq, struct iw_txd *d, const struct iovec *iov, int n_iov,
		 uint32_t len)
{
	uint32_t ulpdu = d->head_len - IW_MPA_LEN_BYTES + len, pad = iw_pad(ulpdu), crc = 0;

	memset(d->tail, 0, 4); /* the pad (0-3 bytes; a fixed length is a single store) */
	d->tail_len = (uint8_t)(pad + IW_CRC_BYTES);
	if (iq->crc && len) {
		d->flags |= IW_TXD_UNSEALED;
		return;
	}
	if (iq->crc) {
		crc = iw_crc_update(iw_crc_init(), d->head, d->head_len);
		for (int i = 0; i < n_iov; i++)
			crc = iw_crc_update(crc, iov[i].iov_base, iov[i].iov_len);
		crc = iw_crc_final(iw_crc_update(crc, d->tail, pad));
	}
	/* RFC 5044 §4.1: the CRC field, 0 when CRC is off. */
	iw_crc_put(d->tail + pad, crc);
}

/*
 * Queues one FPDU: @ih's header, payload @iov (@len bytes). -EAGAIN when the queue is full (nothing queued).
 */
static int put_pub(struct iw_qp *iq, struct iw_hdr *ih, const struct iovec *iov, int n_iov,
		   uint32_t len, uint32_t ack_msn, uint8_t flags, _Atomic uint32_t *pub,
		   uint32_t pub_val);

static int put(struct iw_qp *iq, struct iw_hdr *ih, const struct iovec *iov, int n_iov,
	       uint32_t len, uint32_t ack_msn, uint8_t flags)
{
	return put_pub(iq, ih, iov, n_iov, len, ack_msn, flags, NULL, 0);
}

/* As put, and *@pub = @pub_val once the FPDU is sure to go but before any writer can
 * send it (a Read's queue entry: its response may come back at once). */
static int put_pub(struct iw_qp *iq, struct iw_hdr *ih, const struct iovec *iov, int n_iov,
		   uint32_t len, uint32_t ack_msn, uint8_t flags, _Atomic uint32_t *pub,
		   uint32_t pub_val)
{
	uint32_t head, ihead;
	struct iw_txd *d;
	int hl, n = 0;

	ih->payload_len = len;
	sv_spin_lock(&iq->txq_lock);
	head = atomic_load_explicit(&iq->tx_head, memory_order_relaxed);
	ihead = atomic_load_explicit(&iq->iov_head, memory_order_relaxed);
	if (head - atomic_load_explicit(&iq->tx_tail, memory_order_acquire) >= IW_TXQ ||
	    ihead - atomic_load_explicit(&iq->iov_tail, memory_order_acquire) + (uint32_t)n_iov >
		    IW_TX_IOVS) {
		sv_spin_unlock(&iq->txq_lock);
		return -EAGAIN;
	}
	d = &iq->txq[head % IW_TXQ];
	hl = iw_hdr_encode(d->head, ih);
	if (hl < 0) {
		sv_spin_unlock(&iq->txq_lock);
		sv_err("iwarp qp %u: cannot encode %s (%u bytes)", iq->qpn, iw_op_name(ih->opcode),
		       len);
		return 0; /* a bug of ours: dropped, the QP's peer will terminate */
	}
	d->head_len = (uint16_t)hl;
	for (int i = 0; i < n_iov; i++) {
		if (!iov[i].iov_len)
			continue;
		iq->iovs[(ihead + (uint32_t)n) % IW_TX_IOVS] = iov[i];
		n++;
	}
	d->iov_first = ihead;
	d->n_iov = (uint32_t)n;
	d->n_slots = (uint32_t)n;
	d->ack_msn = ack_msn;
	d->flags = flags;
	seal(iq, d, iov, n_iov, len);
	if (pub)
		atomic_store_explicit(pub, pub_val, memory_order_release);
	atomic_store_explicit(&iq->iov_head, ihead + (uint32_t)n, memory_order_release);
	atomic_store_explicit(&iq->tx_head, head + 1, memory_order_release);
	sv_spin_unlock(&iq->txq_lock);
	return 0;
}

/* As put_pub, for an FPDU without payload made ahead (make_tpl): header, pad, CRC. */
static int put_tpl(struct iw_qp *iq, const struct iw_tpl *t, uint8_t flags,
		   _Atomic uint32_t *pub, uint32_t pub_val)
{
	uint32_t head, ihead;
	struct iw_txd *d;

	sv_spin_lock(&iq->txq_lock);
	head = atomic_load_explicit(&iq->tx_head, memory_order_relaxed);
	ihead = atomic_load_explicit(&iq->iov_head, memory_order_relaxed);
	if (head - atomic_load_explicit(&iq->tx_tail, memory_order_acquire) >= IW_TXQ) {
		sv_spin_unlock(&iq->txq_lock);
		return -EAGAIN;
	}
	d = &iq->txq[head % IW_TXQ];
	memcpy(d->head, t->head, sizeof(t->head));
	memcpy(d->tail, t->tail, sizeof(t->tail));
	d->head_len = t->hl;
	d->tail_len = t->tl;
	d->iov_first = ihead;
	d->n_iov = d->n_slots = 0;
	d->ack_msn = 0;
	d->flags = flags;
	if (pub)
		atomic_store_explicit(pub, pub_val, memory_order_release);
	atomic_store_explicit(&iq->tx_head, head + 1, memory_order_release);
	sv_spin_unlock(&iq->txq_lock);
	return 0;
}

/* @ih (no payload) encoded and sealed, as put_pub would queue it. */
static void make_tpl(struct iw_qp *iq, struct iw_hdr *ih, struct iw_tpl *t)
{
	struct iw_txd d = { .flags = 0 };
	int hl;

	ih->payload_len = 0;
	hl = iw_hdr_encode(d.head, ih);
	d.head_len = (uint16_t)(hl > 0 ? hl : 0);
	seal(iq, &d, NULL, 0, 0);
	memcpy(t->head, d.head, sizeof(t->head));
	memcpy(t->tail, d.tail, sizeof(t->tail));
	t->hl = d.head_len;
	t->tl = d.tail_len;
	t->crc = iq->crc;
	t->msn = ih->msn;
}

void iw_tx_terminate(struct iw_qp *iq, const struct iw_term *t, const void *bad, size_t bad_len)
{
	uint32_t head;
	struct iw_txd *d;
	int len;

	if (atomic_exchange(&iq->term_sent, true))
		return; /* one Terminate per connection: nothing follows it */
	sv_dbg("iwarp qp %u: Terminate layer %u type %u code 0x%02x", iq->qpn, t->layer, t->etype,
	       t->ecode);
	sv_spin_lock(&iq->txq_lock);
	head = atomic_load_explicit(&iq->tx_head, memory_order_relaxed);
	if (head - atomic_load_explicit(&iq->tx_tail, memory_order_acquire) >= IW_TXQ) {
		sv_spin_unlock(&iq->txq_lock);
		return; /* best effort: the connection ends anyway */
	}
	d = &iq->txq[head % IW_TXQ];
	/* RFC 5040 §4.8: with the start of the offending FPDU, when there is one. */
	len = iw_term_encode(d->head, sizeof(d->head), t, bad, bad_len);
	if (len < 0)
		len = iw_term_encode(d->head, sizeof(d->head), t, NULL, 0);
	if (len < 0) {
		sv_spin_unlock(&iq->txq_lock);
		return;
	}
	d->head_len = (uint16_t)len;
	d->iov_first = atomic_load_explicit(&iq->iov_head, memory_order_relaxed);
	d->n_iov = 0;
	d->n_slots = 0;
	d->ack_msn = 0;
	d->flags = IW_TXD_TERM;
	seal(iq, d, NULL, 0, 0);
	atomic_store_explicit(&iq->tx_head, head + 1, memory_order_release);
	sv_spin_unlock(&iq->txq_lock);
}

/* Why the responder refused the peer's access to our memory (the core's NAK says only
 * REM_ACCESS_ERR): the key table asked again about the request it refused (@hdr, its
 * header as received). SV_ACCESS_BAD_KEY when nothing more is known. */
static enum sv_access_result refused_why(struct iw_qp *iq, const uint8_t *hdr, uint32_t len)
{
	struct sv_qp *qp = iq->qp;
	struct iw_hdr ih;
	struct iw_term t;
	uint32_t key, need;
	uint64_t addr, n, va;

	/* An Atomic Request's header is longer than what is kept of it (IW_TERM_MAX): its
	 * STag and offset are within. */
	if (len >= 40 && (hdr[3] & IW_RDMAP_OP_MASK) == IW_OP_ATOMIC_REQ && iq->ext) {
		key = (uint32_t)hdr[28] << 24 | (uint32_t)hdr[29] << 16 | (uint32_t)hdr[30] << 8 |
		      hdr[31];
		addr = 0;
		for (int i = 32; i < 40; i++)
			addr = addr << 8 | hdr[i];
		n = 8;
		need = IBV_ACCESS_REMOTE_ATOMIC;
		goto check;
	}
	if (!len || iw_hdr_decode(hdr, len, iq->ext, &ih, &t) < 0)
		return SV_ACCESS_BAD_KEY;
	switch (ih.opcode) {
	case IW_OP_WRITE:
		key = ih.stag, addr = ih.to, n = ih.payload_len, need = IBV_ACCESS_REMOTE_WRITE;
		break;
	case IW_OP_READ_REQ:
		key = ih.src_stag, addr = ih.src_to, n = ih.read_size;
		need = IBV_ACCESS_REMOTE_READ;
		break;
	default:
		return SV_ACCESS_BAD_KEY;
	}
check:
	if (!(atomic_load_explicit(&qp->pub.access, memory_order_relaxed) & need))
		return SV_ACCESS_NO_RIGHT;
	return sv_mr_check(qp->rx_dst.ctx->mrs->slots, key, qp->rx_dst.pd, need, addr, n, &va);
}

/* The Terminate for a request our responder refused with @status (the core's NAK), as
 * RFC 5040 §7, RFC 5041 §7 and siw word it for the request's kind (@op) and, for an
 * access, its cause (@why: STag, bounds, PD; a right missing is RDMAP's access error,
 * an invalid STag to DDP as siw has it). */
static struct iw_term nak_term(uint32_t status, uint8_t op, enum sv_access_result why)
{
	bool tagged = op == IW_OP_WRITE;

	switch (status) {
	case IBV_WC_REM_ACCESS_ERR:
		if (tagged)
			return (struct iw_term){ IW_TERM_DDP, IW_ETYPE_DDP_TAGGED,
						 why == SV_ACCESS_OUT_OF_RANGE ?
							 IW_ECODE_DDP_T_BASE_BOUNDS :
						 why == SV_ACCESS_BAD_PD ?
							 IW_ECODE_DDP_T_STAG_NOT_ASSOC :
							 IW_ECODE_DDP_T_INV_STAG };
		return (struct iw_term){ IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_PROT,
					 why == SV_ACCESS_OUT_OF_RANGE ? IW_ECODE_RDMAP_BASE_BOUNDS :
					 why == SV_ACCESS_BAD_PD ? IW_ECODE_RDMAP_PD :
					 why == SV_ACCESS_NO_RIGHT ? IW_ECODE_RDMAP_ACCESS :
								     IW_ECODE_RDMAP_INV_STAG };
	case IBV_WC_REM_INV_REQ_ERR:
		if (op == IW_OP_SEND || op == IW_OP_SEND_INV || op == IW_OP_SEND_SE ||
		    op == IW_OP_SEND_SE_INV)
			return (struct iw_term){ IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED,
						 IW_ECODE_DDP_U_TOO_LONG };
		return (struct iw_term){ IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP,
					 IW_ECODE_RDMAP_INV_OPCODE };
	default:
		return (struct iw_term){ IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP,
					 IW_ECODE_RDMAP_UNSPECIFIED };
	}
}

/* A request that this connection cannot carry (RFC 7306 not negotiated, or no iWARP
 * form): it fails locally (the completer hears of it from the next poll). */
static int refuse_local(struct iw_qp *iq, const struct sv_hdr *h)
{
	sv_dbg("iwarp qp %u: %s not possible on this connection", iq->qpn,
	       h->op == SV_OP_ATOMIC ? "atomic" : "immediate data");
	if (!atomic_load(&iq->local_nak_msn)) {
		iq->local_nak_status = IBV_WC_LOC_QP_OP_ERR;
		atomic_store(&iq->local_nak_msn, h->msn);
	}
	return 0;
}

/*
 * Remembers a message's first segment (what a Terminate about it will name), before it
 * is handed to put_pub: once written, the peer may place it, leave and say goodbye naming
 * it (bye_names) before put_pub returns, and the goodbye read then must find it (a
 * poster preempted between the two could leave its peer's goodbye naming nothing, and
 * the Send would end in RETRY_EXC_ERR). A segment that did not go is remembered all the same: nobody
 * names it; tried again, it is not remembered twice.
 */
static void sent(struct iw_qp *iq, const struct sv_hdr *h, const struct iw_hdr *ih)
{
	uint32_t head = atomic_load_explicit(&iq->sent_head, memory_order_relaxed);
	struct iw_sent n = { .msn = h->msn, .tagged = ih->tagged || ih->opcode == IW_OP_WRITE,
			     .qn = (uint8_t)ih->qn };
	const struct iw_sent *last = &iq->sent[(head - 1) % IW_SENT];

	if (!(h->flags & SV_F_FIRST))
		return;
	if (n.tagged) {
		n.key = ih->stag;
		n.lo = h->raddr;
		n.hi = h->raddr + h->total;
	} else {
		n.key = ih->msn;
	}
	if (head && last->msn == n.msn && last->tagged == n.tagged && last->qn == n.qn &&
	    last->key == n.key && last->lo == n.lo && last->hi == n.hi)
		return; /* (the same, tried again after the queue was full) */
	iq->sent[head % IW_SENT] = n;
	atomic_store_explicit(&iq->sent_head, head + 1, memory_order_release);
}

/* RFC 6581: at most ORD Read Requests and atomics outstanding, our placement probes
 * counted (the core counts only the application's): the next waits for an answer. */
static bool ord_full(struct iw_qp *iq)
{
	uint32_t out = atomic_load(&iq->rd_head) - atomic_load(&iq->rd_tail) +
		       atomic_load(&iq->at_head) - atomic_load(&iq->at_tail);

	return iq->ord && out >= iq->ord;
}

static bool no_room(struct iw_qp *iq, _Atomic uint32_t *head, _Atomic uint32_t *tail)
{
	return ord_full(iq) || atomic_load(head) - atomic_load(tail) >= IW_RDQ;
}

/* Whether a Read or atomic must wait for an answer to make room. It says so in
 * ord_waits before it looks a second time: the receiver, which frees the room and then
 * reads ord_waits, either is seen by that look or sees the flag (and kicks the QP). */
static bool wait_for_room(struct iw_qp *iq, _Atomic uint32_t *head, _Atomic uint32_t *tail)
{
	if (!no_room(iq, head, tail))
		return false;
	atomic_store(&iq->ord_waits, true);
	return no_room(iq, head, tail);
}

/*
 * Where the last FPDU of a Send or Write says that a message waits to be known placed
 * (place_hi), when Sends and Writes complete once placed. put_pub says so before any
 * writer can send the FPDU: said after, a writer on another thread could send it and
 * the next poll complete it as "sent and nothing waits" before it was placed (a WRITE
 * the peer refused then completed successfully).
 */
static _Atomic uint32_t *placed(struct iw_qp *iq, const struct iw_hdr *ih)
{
	return ih->last && iq->confirm ? &iq->place_hi : NULL;
}

static int tx_request(struct iw_qp *iq, const struct sv_hdr *h, const struct iovec *iov,
		      int n_iov)
{
	struct iw_hdr ih = { .last = (h->flags & SV_F_LAST) != 0 };
	uint32_t n;
	bool pair;
	int err;

	switch (h->op) {
	case SV_OP_SEND:
		if (h->flags & SV_F_IMM)
			return refuse_local(iq, h); /* no Send with Immediate in RFC 7306 */
		if (h->rkey)
			ih.opcode = h->flags & SV_F_SOLICITED ? IW_OP_SEND_SE_INV : IW_OP_SEND_INV;
		else
			ih.opcode = h->flags & SV_F_SOLICITED ? IW_OP_SEND_SE : IW_OP_SEND;
		ih.inv_stag = h->rkey;
		ih.qn = IW_QN_SEND;
		ih.msn = iq->tx_msn[IW_QN_SEND];
		ih.mo = (uint32_t)h->offset;
		/* The last FPDU with its probe right behind it, both in one write: the peer
		 * finds the probe with the Send and answers it before the receive completes
		 * (iw_tx_probe_wanted, iw_rx.c probe_behind). */
		pair = ih.last && iq->ord && iq->confirm;
		if (pair)
			atomic_fetch_add(&iq->tx_pairing, 1);
		sent(iq, h, &ih);
		err = put_pub(iq, &ih, iov, n_iov, h->len, h->msn, IW_TXD_REQ, placed(iq, &ih),
			      h->msn);
		if (!err && ih.last) {
			iq->tx_msn[IW_QN_SEND]++;
			atomic_store_explicit(&iq->send_hi, h->msn, memory_order_relaxed);
			if (pair)
				iw_tx_probe(iq);
		}
		if (pair)
			atomic_fetch_add(&iq->tx_pairing, 1);
		return err;
	case SV_OP_WRITE:
		if ((h->flags & SV_F_LAST) && (h->flags & SV_F_IMM) && !iq->ext)
			return refuse_local(iq, h);
		/* A Write with Immediate is the Write, then an Immediate Data message (RFC 7306
		 * §4.3): room for both, or neither. */
		if ((h->flags & SV_F_LAST) && (h->flags & SV_F_IMM) &&
		    atomic_load(&iq->tx_head) - atomic_load(&iq->tx_tail) >= IW_TXQ - 1)
			return -EAGAIN;
		ih.opcode = IW_OP_WRITE;
		ih.stag = h->rkey;
		ih.to = h->raddr + h->offset;
		sent(iq, h, &ih);
		err = put_pub(iq, &ih, iov, n_iov, h->len,
			      (h->flags & SV_F_IMM) && ih.last ? 0 : h->msn, IW_TXD_REQ,
			      placed(iq, &ih), h->msn);
		if (err || !((h->flags & SV_F_LAST) && (h->flags & SV_F_IMM)))
			return err;
		ih = (struct iw_hdr){ .opcode = h->flags & SV_F_SOLICITED ? IW_OP_IMM_SE : IW_OP_IMM,
				      .last = true, .qn = IW_QN_SEND,
				      .msn = iq->tx_msn[IW_QN_SEND], .mo = 0 };
		/* The 4 bytes of a verbs immediate, first of the 8 (network order as given). */
		memcpy(&ih.imm, &h->imm, sizeof(h->imm));
		err = put_pub(iq, &ih, NULL, 0, 0, h->msn, IW_TXD_REQ, placed(iq, &ih), h->msn);
		if (!err) {
			iq->tx_msn[IW_QN_SEND]++;
			atomic_store_explicit(&iq->send_hi, h->msn, memory_order_relaxed);
		}
		return err;
	case SV_OP_READ_REQ: {
		uint32_t head = atomic_load_explicit(&iq->rd_head, memory_order_relaxed);

		if (wait_for_room(iq, &iq->rd_head, &iq->rd_tail) || h->total > UINT32_MAX)
			return -EAGAIN;
		ih.opcode = IW_OP_READ_REQ;
		ih.last = true;
		ih.qn = IW_QN_READ_REQ;
		ih.msn = iq->tx_msn[IW_QN_READ_REQ];
		ih.sink_stag = SINK_STAG | (h->msn & 0xffffff);
		ih.sink_to = 0;
		ih.read_size = (uint32_t)h->total;
		ih.src_stag = h->rkey;
		ih.src_to = h->raddr;
		iq->rdq[head % IW_RDQ] = (struct iw_rd){ .msn = h->msn, .sink_stag = ih.sink_stag,
							 .size = h->total,
							 .confirms = atomic_load(&iq->place_hi) };
		atomic_store_explicit(&iq->probed, iq->rdq[head % IW_RDQ].confirms,
				      memory_order_relaxed);
		/* Outstanding before it can go: its response may come before put returns. */
		sent(iq, h, &ih);
		err = put_pub(iq, &ih, NULL, 0, 0, h->msn, IW_TXD_REQ, &iq->rd_head, head + 1);
		if (err)
			return err;
		iq->tx_msn[IW_QN_READ_REQ]++;
		return 0;
	}
	case SV_OP_ATOMIC: {
		uint32_t head = atomic_load_explicit(&iq->at_head, memory_order_relaxed);

		if (!iq->ext)
			return refuse_local(iq, h);
		if (wait_for_room(iq, &iq->at_head, &iq->at_tail))
			return -EAGAIN;
		ih.opcode = IW_OP_ATOMIC_REQ;
		ih.last = true;
		ih.qn = IW_QN_ATOMIC_REQ;
		ih.msn = iq->tx_msn[IW_QN_ATOMIC_REQ];
		ih.atomic_op = h->flags & SV_F_CMP_SWP ? IW_ATOMIC_CMP_SWAP : IW_ATOMIC_FETCH_ADD;
		ih.atomic_req_id = ih.msn; /* the response names it */
		ih.atomic_stag = h->rkey;
		ih.atomic_to = h->raddr;
		if (h->flags & SV_F_CMP_SWP) {
			ih.add_swap = h->swap;
			ih.compare = h->compare_add;
			ih.add_swap_mask = ih.compare_mask = UINT64_MAX;
		} else {
			ih.add_swap = h->compare_add;
			ih.add_swap_mask = UINT64_MAX;
		}
		iq->atq[head % IW_RDQ] = (struct iw_rd){ .msn = h->msn, .size = 8,
							 .req_id = ih.atomic_req_id };
		sent(iq, h, &ih);
		err = put_pub(iq, &ih, NULL, 0, 0, h->msn, IW_TXD_REQ, &iq->at_head, head + 1);
		if (err)
			return err;
		iq->tx_msn[IW_QN_ATOMIC_REQ]++;
		return 0;
	}
	case SV_OP_TERMINATE: {
		struct iw_term t = nak_term((uint32_t)h->status, IW_OP_WRITE, SV_ACCESS_BAD_KEY);

		iw_tx_terminate(iq, &t, NULL, 0);
		return 0;
	}
	default:
		n = h->op;
		sv_err("iwarp qp %u: no FPDU for request op %u", iq->qpn, n);
		return 0;
	}
}

/* The responder's answers: only Read and Atomic Responses exist on the wire; a NAK is a
 * Terminate; acknowledgements and RNR NAKs are not sent (TCP carries the one, and a Send
 * that finds no receive waits in the socket: the sender feels TCP's flow control, as an
 * RNR NAK with retries for ever would make it wait). */
static int tx_answer(struct iw_qp *iq, const struct sv_hdr *h, const struct iovec *iov,
		     int n_iov)
{
	struct iw_hdr ih = { .last = (h->flags & SV_F_LAST) != 0 };
	struct iw_rd *rd;
	int err;

	switch (h->op) {
	case SV_OP_ACK:
	case SV_OP_RNR:
		return 0;
	case SV_OP_NAK: {
		struct iw_term t = nak_term(h->status, iq->rx_last_op,
					    h->status == IBV_WC_REM_ACCESS_ERR ?
						    refused_why(iq, iq->rx_last_hdr,
								iq->rx_last_hdr_len) :
						    SV_ACCESS_BAD_KEY);

		iw_tx_terminate(iq, &t, iq->rx_last_hdr, iq->rx_last_hdr_len);
		return 0;
	}
	case SV_OP_READ_RESP:
		if (iq->ird_head == iq->ird_tail || iq->irdq[iq->ird_head % IW_RDQ].msn != h->msn)
			return 0; /* answers no Read Request of the peer's (reset meanwhile) */
		rd = &iq->irdq[iq->ird_head % IW_RDQ];
		ih.opcode = IW_OP_READ_RESP;
		ih.stag = rd->sink_stag;
		ih.to = rd->sink_to + h->offset;
		err = put(iq, &ih, iov, n_iov, h->len, 0,
			  ih.last ? IW_TXD_READ_DONE : 0);
		if (!err && ih.last) {
			atomic_fetch_add(&iq->ird_unsent, 1);
			iq->ird_head++;
		}
		return err;
	case SV_OP_ATOMIC_RESP:
		if (iq->ird_head == iq->ird_tail || iq->irdq[iq->ird_head % IW_RDQ].msn != h->msn)
			return 0;
		rd = &iq->irdq[iq->ird_head % IW_RDQ];
		ih.opcode = IW_OP_ATOMIC_RESP;
		ih.last = true;
		ih.qn = IW_QN_ATOMIC_RESP;
		ih.msn = iq->tx_msn[IW_QN_ATOMIC_RESP];
		ih.mo = 0;
		ih.atomic_req_id = rd->req_id;
		ih.orig_value = h->value;
		err = put(iq, &ih, NULL, 0, 0, 0, IW_TXD_READ_DONE);
		if (!err) {
			iq->tx_msn[IW_QN_ATOMIC_RESP]++;
			atomic_fetch_add(&iq->ird_unsent, 1);
			iq->ird_head++;
		}
		return err;
	default:
		return 0;
	}
}

int iw_tx_answer_empty_read(struct iw_qp *iq, uint32_t sink_stag, uint64_t sink_to)
{
	struct iw_tpl *t = &iq->answer_tpl;
	int err;

	if (atomic_load(&iq->term_sent))
		return 0; /* nothing follows a Terminate (iw_tx_send) */
	/* To the same sink (a softverbs peer's probes: always), the same bytes. */
	if (!t->hl || t->crc != iq->crc || iq->answer_stag != sink_stag ||
	    iq->answer_to != sink_to) {
		struct iw_hdr ih = { .opcode = IW_OP_READ_RESP, .last = true, .stag = sink_stag,
				     .to = sink_to };

		make_tpl(iq, &ih, t);
		iq->answer_stag = sink_stag;
		iq->answer_to = sink_to;
	}
	err = put_tpl(iq, t, IW_TXD_READ_DONE, NULL, 0);
	if (!err)
		atomic_fetch_add(&iq->ird_unsent, 1); /* owed until written (RFC 6581) */
	return err;
}

int iw_tx_send(struct sv_qp *qp, const struct sv_hdr *h, const struct iovec *iov, int n_iov)
{
	struct iw_qp *iq = iw_of(qp);

	/* Nothing follows a Terminate; a connection not up carries nothing (the QP is on
	 * its way to Error, or transmit waits for reach). */
	if (atomic_load(&iq->term_sent) || atomic_load(&iq->link) != IW_LINK_UP)
		return 0;
	return h->op < SV_OP_REQ_MAX ? tx_request(iq, h, iov, n_iov) : tx_answer(iq, h, iov, n_iov);
}

/* The requester's Reads (or atomics): the core msn of the first still waiting for its
 * response (our own probes, msn 0, are not the core's). */
static bool first_waiting(_Atomic uint32_t *head, _Atomic uint32_t *tail, const struct iw_rd *q,
			  uint32_t *msn)
{
	uint32_t h = atomic_load_explicit(head, memory_order_acquire);

	for (uint32_t t = atomic_load_explicit(tail, memory_order_relaxed); t != h; t++) {
		if (q[t % IW_RDQ].msn) {
			*msn = q[t % IW_RDQ].msn;
			return true;
		}
	}
	return false;
}

uint32_t iw_tx_ackable(struct iw_qp *iq)
{
	/* (seq_cst: against a write's look, iw_qp.c ack_due) */
	uint32_t upto = atomic_load(&iq->tx_acked), m;
	uint32_t confirmed = atomic_load_explicit(&iq->confirmed, memory_order_acquire);

	/* What the peer says it placed, the socket took, though the write that sent it may
	 * not have counted it yet (advance() runs after sendmsg returns; a quick peer's
	 * answer, and its reply behind it, can come first). */
	if (iq->ord && sv_msn_le(upto, confirmed))
		upto = confirmed;
	if (first_waiting(&iq->rd_head, &iq->rd_tail, iq->rdq, &m) && sv_msn_le(m, upto))
		upto = m - 1;
	if (first_waiting(&iq->at_head, &iq->at_tail, iq->atq, &m) && sv_msn_le(m, upto))
		upto = m - 1;
	/* A Send or Write completes once it is placed, as on InfiniBand where the
	 * acknowledgement says so (and what follows it, in order); a connection that cannot
	 * ask (no ORD), or SOFTVERBS_IWARP_COMPLETE=sent, completes it once sent, as RFC
	 * 5040 §5.1 allows. */
	if (iq->ord && !sv_msn_le(atomic_load(&iq->place_hi), confirmed) &&
	    sv_msn_le(confirmed, upto))
		upto = confirmed;
	if (!upto || upto == iq->acked_told || sv_msn_le(upto, iq->acked_told))
		return 0;
	return upto;
}

uint32_t iw_tx_written(struct iw_qp *iq)
{
	return iw_tx_placed(iq, atomic_load_explicit(&iq->tx_acked, memory_order_acquire));
}

uint32_t iw_tx_placed(struct iw_qp *iq, uint32_t upto)
{
	uint32_t m;

	if (first_waiting(&iq->rd_head, &iq->rd_tail, iq->rdq, &m) && sv_msn_le(m, upto))
		upto = m - 1;
	if (first_waiting(&iq->at_head, &iq->at_tail, iq->atq, &m) && sv_msn_le(m, upto))
		upto = m - 1;
	if (!upto || sv_msn_le(upto, iq->acked_told))
		return 0;
	return upto;
}

/* Whether the probe made ahead is the one to send as MSN @msn on this connection. */
static bool probe_ready(const struct iw_qp *iq, uint32_t msn)
{
	return iq->probe_tpl.hl && iq->probe_tpl.msn == msn && iq->probe_tpl.crc == iq->crc;
}

void iw_tx_probe_ahead(struct iw_qp *iq)
{
	struct iw_hdr ih = { .opcode = IW_OP_READ_REQ, .last = true, .qn = IW_QN_READ_REQ,
			     .msn = iq->tx_msn[IW_QN_READ_REQ], .sink_stag = SINK_STAG };

	if (!probe_ready(iq, ih.msn))
		make_tpl(iq, &ih, &iq->probe_tpl);
}

bool iw_tx_probe_wanted(struct iw_qp *iq)
{
	uint32_t hi = atomic_load(&iq->place_hi);

	if (!iq->ord || sv_msn_le(hi, atomic_load(&iq->confirmed)))
		return false;
	/* One probe out asks for all that went before it; Writes after it wait for its
	 * answer. A Send does not: the peer may answer it with a Send of its own, and the
	 * answer to a probe right behind ours then comes ahead of that reply, as an ACK
	 * would (the application sees our Send complete first: iw_rx_ack_sends). */
	return !atomic_load(&iq->probing) ||
	       !sv_msn_le(atomic_load_explicit(&iq->send_hi, memory_order_relaxed),
			  atomic_load_explicit(&iq->probed, memory_order_relaxed));
}

void iw_tx_probe(struct iw_qp *iq)
{
	uint32_t head = atomic_load_explicit(&iq->rd_head, memory_order_relaxed), out;
	int err;
	struct iw_hdr ih = { .opcode = IW_OP_READ_REQ, .last = true, .qn = IW_QN_READ_REQ,
			     .sink_stag = SINK_STAG, .src_stag = 0 };

	if (!iw_tx_probe_wanted(iq) || atomic_load(&iq->link) != IW_LINK_UP ||
	    atomic_load(&iq->term_sent))
		return;
	/* Our Read counts against the peer's IRD like the application's (RFC 6581). */
	out = head - atomic_load_explicit(&iq->rd_tail, memory_order_acquire) +
	      atomic_load(&iq->at_head) - atomic_load(&iq->at_tail);
	if (out >= iq->ord || out >= IW_RDQ)
		return; /* a Read already out will tell, when it comes back */
	ih.msn = iq->tx_msn[IW_QN_READ_REQ];
	iq->rdq[head % IW_RDQ] = (struct iw_rd){ .msn = 0, .sink_stag = SINK_STAG, .size = 0,
						 .confirms = atomic_load(&iq->place_hi) };
	atomic_store_explicit(&iq->probed, iq->rdq[head % IW_RDQ].confirms, memory_order_relaxed);
	atomic_store(&iq->probing, true);
	/* Made ahead after the last flush (iw_tx_probe_ahead), unless a Read of the
	 * application's took that MSN since. */
	if (probe_ready(iq, ih.msn))
		err = put_tpl(iq, &iq->probe_tpl, 0, &iq->rd_head, head + 1);
	else
		err = put_pub(iq, &ih, NULL, 0, 0, 0, 0, &iq->rd_head, head + 1);
	if (err) {
		atomic_store(&iq->probing, false);
		return;
	}
	iq->tx_msn[IW_QN_READ_REQ]++;
}

int iw_tx_nudge(struct iw_qp *iq)
{
	/* RFC 6581 §9 (the RTR message): a zero-length RDMA Write accesses no memory;
	 * its STag is not checked (Linux siw returns before the check, as we do). */
	struct iw_hdr ih = { .opcode = IW_OP_WRITE, .last = true };

	return put(iq, &ih, NULL, 0, 0, 0, 0);
}

enum { FLUSH_IOVS = 256 };

/* Bytes of @d's payload. */
static uint32_t payload_len(const struct iw_qp *iq, const struct iw_txd *d)
{
	uint32_t len = 0;

	for (uint32_t j = 0; j < d->n_iov; j++)
		len += (uint32_t)iq->iovs[(d->iov_first + j) % IW_TX_IOVS].iov_len;
	return len;
}

/*
 * The writer (tx_io), before a batch: FPDUs from @tail on are copied whole (header,
 * payload, pad, CRC) to the transmit stage, in order, so that a batch leaves from one
 * piece of memory: each iovec more costs the kernel's copy and the peer's read (a
 * ping-pong's three small FPDUs as nine iovecs took 0.2 us more one way across a veth
 * pair than as one). An UNSEALED one (CRC on) gets its CRC made over the copy, which is
 * what goes (the bytes the CRC covers are the bytes sent). A large sealed one (CRC off)
 * goes from where its payload lies, without a copy; one the writer began to send from
 * there is not copied either. Stops at the first that does not fit (the stage holds
 * what the socket has not taken yet); an UNSEALED one waits for room (gather).
 */
static void stage(struct iw_qp *iq, uint32_t tail, uint32_t head)
{
	for (uint32_t i = tail; i != head; i++) {
		struct iw_txd *d = &iq->txq[i % IW_TXQ];
		uint32_t pad = d->tail_len - IW_CRC_BYTES, len, whole, at = d->head_len;
		uint64_t off, skip;
		uint8_t *dst;

		if ((d->flags & IW_TXD_STAGED) || (i == tail && iq->tx_part))
			continue;
		len = payload_len(iq, d);
		whole = d->head_len + len + d->tail_len;
		if (!(d->flags & IW_TXD_UNSEALED) && whole > IW_TX_SMALL)
			continue;
		if (!iq->tx_stage && !(iq->tx_stage = malloc(IW_TX_STAGE)))
			return; /* sent when memory comes (flush again later) */
		off = iq->tx_stage_head % IW_TX_STAGE;
		skip = off + whole > IW_TX_STAGE ? IW_TX_STAGE - off : 0; /* contiguous */
		if (iq->tx_stage_head + skip + whole - iq->tx_stage_tail > IW_TX_STAGE)
			return;
		dst = iq->tx_stage + (skip ? 0 : off);
		memcpy(dst, d->head, d->head_len);
		for (uint32_t j = 0; j < d->n_iov; j++) {
			const struct iovec *v = &iq->iovs[(d->iov_first + j) % IW_TX_IOVS];

			sv_copy_from_app(dst + at, v->iov_base, v->iov_len);
			at += (uint32_t)v->iov_len;
		}
		if (d->flags & IW_TXD_UNSEALED)
			iw_crc_put(d->tail + pad,
				   iw_crc_final(iw_crc_update(iw_crc_update(iw_crc_init(), dst, at),
							      d->tail, pad)));
		memcpy(dst + at, d->tail, d->tail_len);
		d->whole = dst;
		d->whole_len = whole;
		iq->tx_stage_head += skip + whole;
		d->stage_end = iq->tx_stage_head;
		d->flags = (uint8_t)((d->flags & ~IW_TXD_UNSEALED) | IW_TXD_STAGED);
	}
}

/* The next batch as iovecs, skipping what was written of the first; pieces that follow
 * each other in memory (the stage's) are one iovec. */
static int gather(struct iw_qp *iq, uint32_t tail, uint32_t head, struct iovec *v, size_t *bytes)
{
	int n = 0;
	size_t skip = iq->tx_part;

	*bytes = 0;
	for (uint32_t i = tail; i != head && n + 2 + 64 <= FLUSH_IOVS; i++) {
		struct iw_txd *d = &iq->txq[i % IW_TXQ];
		struct iovec piece[3 + 64];
		int k = 0;

		if (d->flags & IW_TXD_UNSEALED)
			break; /* (the stage is full: it goes once the socket took more) */
		if (!(d->flags & IW_TXD_STAGED) && d->n_iov > 64 && n)
			break;
		/* A response handed to TCP frees its IRD slot now: the peer may read it and ask
		 * again before this sendmsg returns (RFC 6581's IRD counts what we still owe). */
		if (d->flags & IW_TXD_READ_DONE) {
			d->flags &= (uint8_t)~IW_TXD_READ_DONE;
			atomic_fetch_sub(&iq->ird_unsent, 1);
		}
		if (d->flags & IW_TXD_STAGED) {
			piece[k++] = (struct iovec){ d->whole, d->whole_len };
		} else {
			piece[k++] = (struct iovec){ d->head, d->head_len };
			for (uint32_t j = 0; j < d->n_iov && k < 65; j++)
				piece[k++] = iq->iovs[(d->iov_first + j) % IW_TX_IOVS];
			piece[k++] = (struct iovec){ d->tail, d->tail_len };
		}
		for (int j = 0; j < k; j++) {
			if (skip >= piece[j].iov_len) {
				skip -= piece[j].iov_len;
				continue;
			}
			if (n && (char *)v[n - 1].iov_base + v[n - 1].iov_len ==
					 (char *)piece[j].iov_base + skip) {
				v[n - 1].iov_len += piece[j].iov_len - skip;
			} else {
				v[n].iov_base = (char *)piece[j].iov_base + skip;
				v[n].iov_len = piece[j].iov_len - skip;
				n++;
			}
			*bytes += piece[j].iov_len - skip;
			skip = 0;
		}
	}
	return n;
}

static size_t txd_len(const struct iw_qp *iq, const struct iw_txd *d)
{
	if (d->flags & IW_TXD_STAGED)
		return d->whole_len;
	return (size_t)d->head_len + payload_len(iq, d) + d->tail_len;
}

/* @n bytes went: the FPDUs they finish are done (local acknowledgements, IRD). */
static void advance(struct iw_qp *iq, size_t n)
{
	uint32_t tail = atomic_load_explicit(&iq->tx_tail, memory_order_relaxed);

	n += iq->tx_part;
	for (;;) {
		struct iw_txd *d = &iq->txq[tail % IW_TXQ];
		size_t len = txd_len(iq, d);

		if (n < len)
			break;
		n -= len;
		if (d->ack_msn)
			atomic_store_explicit(&iq->tx_acked, d->ack_msn, memory_order_release);
		if (d->flags & IW_TXD_READ_DONE)
			atomic_fetch_sub(&iq->ird_unsent, 1);
		if (d->flags & IW_TXD_STAGED) /* (the stage is the writer's, as this is) */
			iq->tx_stage_tail = d->stage_end;
		atomic_store_explicit(&iq->iov_tail, d->iov_first + d->n_slots, memory_order_release);
		tail++;
		atomic_store_explicit(&iq->tx_tail, tail, memory_order_release);
		if (tail == atomic_load_explicit(&iq->tx_head, memory_order_acquire))
			break;
	}
	iq->tx_part = (uint32_t)n;
}

int iw_tx_flush(struct iw_qp *iq)
{
	int total = 0;

	/* RFC 5044 §7.1: nothing before the initiator's first FPDU (the receive clears
	 * peer_first and kicks: the next flush sends what waited). */
	if (atomic_load_explicit(&iq->peer_first, memory_order_acquire))
		return 0;

	for (;;) {
		struct iovec v[FLUSH_IOVS];
		struct msghdr msg = { .msg_iov = v };
		uint32_t tail, head, pairing;
		size_t bytes;
		ssize_t n;
		int fd;

		if (atomic_flag_test_and_set_explicit(&iq->tx_io, memory_order_acquire))
			return total; /* the writer there writes what we queued */
		/* The socket, read as the writer: it is closed only by one (iw_tx_close). */
		fd = atomic_load(&iq->fd);
		if (fd < 0) {
			atomic_flag_clear_explicit(&iq->tx_io, memory_order_release);
			return total;
		}
		tail = atomic_load_explicit(&iq->tx_tail, memory_order_relaxed);
		pairing = atomic_load(&iq->tx_pairing);
		head = atomic_load_explicit(&iq->tx_head, memory_order_acquire);
		if ((pairing & 1) || atomic_load(&iq->tx_pairing) != pairing) {
			/* A Send may be queued without its probe yet: its poster writes both,
			 * once both are (its flush follows), unless it is done already. */
			atomic_flag_clear_explicit(&iq->tx_io, memory_order_release);
			if (atomic_load(&iq->tx_pairing) & 1)
				return total;
			continue;
		}
		if (tail == head) {
			atomic_flag_clear_explicit(&iq->tx_io, memory_order_release);
			/* Queued after we looked, while we held the writer's role? */
			if (atomic_load_explicit(&iq->tx_head, memory_order_acquire) == tail)
				return total;
			continue;
		}
		stage(iq, tail, head);
		msg.msg_iovlen = (size_t)gather(iq, tail, head, v, &bytes);
		if (!msg.msg_iovlen) { /* the first is not staged yet: no memory for it */
			atomic_flag_clear_explicit(&iq->tx_io, memory_order_release);
			atomic_store(&iq->tx_wants_out, true);
			return total;
		}
		/* One piece (a ping-pong's FPDUs, staged): send, without the msghdr and iovec
		 * the kernel would copy in and check. */
		n = msg.msg_iovlen == 1 ? sv_app_send(fd, v[0].iov_base, v[0].iov_len,
						      MSG_DONTWAIT | MSG_NOSIGNAL)
					: sv_app_sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			int err = errno;

			atomic_flag_clear_explicit(&iq->tx_io, memory_order_release);
			if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) {
				atomic_store(&iq->tx_wants_out, true);
				return total;
			}
			return -err;
		}
		advance(iq, (size_t)n);
		atomic_flag_clear_explicit(&iq->tx_io, memory_order_release);
		total += (int)n;
		if ((size_t)n < bytes) {
			atomic_store(&iq->tx_wants_out, true); /* the socket is full */
			return total;
		}
		atomic_store(&iq->tx_wants_out, false);
	}
}

int iw_tx_take_fd(struct iw_qp *iq, int wait_ms)
{
	uint64_t end = sv_now_ns() + (uint64_t)wait_ms * 1000000;
	int fd;

	/* What is queued goes first, as far as the socket takes it in @wait_ms. */
	while (iw_tx_pending(iq) && atomic_load(&iq->fd) >= 0 && sv_now_ns() < end) {
		struct pollfd p = { .fd = atomic_load(&iq->fd), .events = POLLOUT };

		if (iw_tx_flush(iq) < 0)
			break;
		if (iw_tx_pending(iq) && atomic_load(&iq->tx_wants_out))
			(void)poll(&p, 1, 10);
		else if (iw_tx_pending(iq))
			sched_yield(); /* another writer has it */
	}
	/* The writer's role, so that no write uses the socket once it is taken. */
	while (atomic_flag_test_and_set_explicit(&iq->tx_io, memory_order_acquire))
		sched_yield();
	fd = atomic_exchange(&iq->fd, -1);
	atomic_flag_clear_explicit(&iq->tx_io, memory_order_release);
	return fd;
}
