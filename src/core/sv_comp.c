/*
 * The completer: matches what the responder answers (acknowledgements, NAKs, RNR NAKs,
 * read and atomic responses) to the WQEs waiting for it, runs the RNR timer, and reports
 * finished WQEs in the order they were posted (IBA 10.8).
 */
#include <string.h>

#include "core/sv_cq.h"
#include "core/sv_path.h"
#include "util/sv_lock.h"
#include "util/sv_log.h"

/* The completion's opcode of a WR's. */
enum ibv_wc_opcode sv_wc_opcode_of(uint32_t wr_opcode)
{
	switch (wr_opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_WRITE: return IBV_WC_ATOMIC_WRITE;
	case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
	case IBV_WR_LOCAL_INV: return IBV_WC_LOCAL_INV;
	case IBV_WR_BIND_MW: return IBV_WC_BIND_MW;
	default: return IBV_WC_SEND;
	}
}

/* Reports finished WQEs in order (IBA 10.8: completions in the order posted). */
void sv_comp_complete_locked(struct sv_qp *qp)
{
	struct sv_wq *wq = &qp->sq;

	while (wq->tail != qp->sq_next) {
		struct sv_send_wqe *w = sv_wq_slot(wq, wq->tail);

		if (w->state != SV_WQE_DONE)
			break;
		/* IBA 10.8.3.3: a completion error takes an RC QP to Error, a UC or UD QP's
		 * send queue to SQ Error (10.3.1); what follows is flushed once the state
		 * changes. Asked for before the completion can be seen: a program that
		 * queries the QP once it has the error completion finds the new state
		 * (ibv_query_qp enters it). */
		if (w->status != IBV_WC_SUCCESS)
			sv_qp_fail(qp, sv_qp_type_reliable(qp->ibv.qp_base.qp_type) ? SV_ERR_QUIET
										   : SV_ERR_SQE);
		if (w->status != IBV_WC_SUCCESS || (w->send_flags & IBV_SEND_SIGNALED) ||
		    qp->sq_sig_all) {
			struct ibv_wc wc = {
				.wr_id = w->wr_id,
				.status = w->status,
				.opcode = sv_wc_opcode_of(w->opcode),
				.byte_len = w->byte_len,
				.qp_num = qp->ibv.qp_base.qp_num,
			};

			sv_cq_push(qp->scq, &wc, false);
		}
		wq->tail++;
		if (w->status != IBV_WC_SUCCESS) {
			qp->sq_failed = true;
			break;
		}
	}
}

/* The first WQE still waiting for an answer (sq.lock), or NULL. */
static struct sv_send_wqe *first_waiting(struct sv_qp *qp)
{
	for (uint32_t i = qp->sq.tail; i != qp->sq_next; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, i);

		if (w->state == SV_WQE_WAIT)
			return w;
	}
	return NULL;
}

/* SV_WIRE_LOSSY: the transport timer runs again from now while anything waits (an
 * answer came, or a resend went), else stops. */
static void timer_restart(struct sv_qp *qp)
{
	uint64_t t = sv_qp_ack_timeout_ns(qp);

	sv_set_hint(qp->ack_deadline, t && first_waiting(qp) ? sv_now_ns() + t : 0);
}

/*
 * SV_WIRE_LOSSY, go-back-N (IBA 9.7.5.1.1, C9-140): transmit again from the first WQE
 * waiting for an answer at or after @msn, from its first segment, with the msns it had
 * (the responder takes what it executed already as duplicates). Everything from there
 * on is transmitted again; local work done meanwhile is passed over (sv_qp_tx_locked).
 * The wire kept nothing: the data is read again from the application's buffers, which
 * are not its own until the WQE completes (IBA 10.8.3). sq.lock.
 */
static void rewind(struct sv_qp *qp, uint32_t msn)
{
	uint32_t i;

	if (qp->tx_stopped || qp->tx_claimed)
		return;
	for (i = qp->sq.tail; i != qp->sq_next; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, i);

		if (w->state == SV_WQE_WAIT && sv_msn_le(msn, w->msn))
			break;
	}
	if (i == qp->sq_next) {
		/* Nothing waits at or after it: what is being sent in segments starts over. */
		if (!qp->tx_off || qp->sq_next == qp->sq.head)
			return;
	} else {
		const struct sv_send_wqe *from = sv_wq_slot(&qp->sq, i);

		qp->next_msn = from->first_msn - 1;
		for (uint32_t j = i; j != qp->sq_next; j++) {
			struct sv_send_wqe *w = sv_wq_slot(&qp->sq, j);

			if (w->state != SV_WQE_WAIT)
				continue;
			w->state = SV_WQE_POSTED;
			if (sv_wqe_reads(w) && qp->rd_atomic_out)
				qp->rd_atomic_out--;
			else if (w->opcode == IBV_WR_RDMA_WRITE && qp->msg_writes_out)
				qp->msg_writes_out--;
		}
		qp->sq_next = i;
	}
	if (qp->tx_off) {
		const struct sv_send_wqe *part = sv_wq_slot(&qp->sq, qp->sq_next);

		qp->next_msn = part->first_msn - 1;
	}
	qp->tx_off = 0;
	qp->resending = true;
	sv_count(&qp->cnt.retransmits, 1);
	sv_set_hint(qp->tx_kick, true);
}

/* SV_WIRE_LOSSY: an answer completed something. The retries start afresh (IBA
 * 9.7.6.1.3, 9.7.5.2.8), a NAK may start a go-back again, the timer runs from now. */
static void progressed(struct sv_qp *qp)
{
	qp->resending = false;
	qp->retry_left = qp->attr.retry_cnt;
	qp->rnr_left = qp->attr.rnr_retry;
	if (!sv_hint(qp->resend_at))
		timer_restart(qp);
}

/* Marks every WQE waiting for an answer up to @msn as done, READs and atomics only if
 * @reads. On a lossy wire, a READ or atomic among them whose answer did not come is an
 * implied NAK (IBA 9.7.5.1.1: its response was lost): transmit again from it. Caller
 * holds sq.lock. */
static void acked_upto(struct sv_qp *qp, uint32_t msn, bool reads)
{
	bool lossy = sv_qp_lossy(qp), moved = false;

	for (uint32_t i = qp->sq.tail; i != qp->sq_next; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, i);

		if (w->state != SV_WQE_WAIT || (!reads && sv_wqe_reads(w)))
			continue;
		if (!sv_msn_le(w->msn, msn))
			break;
		if (lossy && sv_wqe_reads(w)) {
			/* Once: answers to what was sent before a go-back keep coming for a
			 * while, and each would start another (the timer ends a lost one). */
			if (!qp->resending)
				rewind(qp, w->msn);
			break;
		}
		sv_wqe_done(w, IBV_WC_SUCCESS);
		moved = true;
		if (sv_wqe_reads(w) && qp->rd_atomic_out)
			qp->rd_atomic_out--;
		else if (w->opcode == IBV_WR_RDMA_WRITE && qp->msg_writes_out)
			qp->msg_writes_out--;
	}
	if (sv_hint(qp->rnr_deadline) && sv_msn_le(qp->rnr_msn, msn))
		sv_set_hint(qp->rnr_deadline, 0);
	if (lossy && moved)
		progressed(qp);
}

/* A READ or atomic's own answer came: it is done (sq.lock). */
static void answered(struct sv_qp *qp, struct sv_send_wqe *w)
{
	sv_wqe_done(w, IBV_WC_SUCCESS);
	if (qp->rd_atomic_out)
		qp->rd_atomic_out--;
	if (sv_qp_lossy(qp))
		progressed(qp);
}

/* The WQE waiting for the answer to @msn, if it is of the kind the answer is for: @op
 * IBV_WR_RDMA_READ (a READ_RESP), IBV_WR_ATOMIC_CMP_AND_SWP (an ATOMIC_RESP: either
 * atomic), or 0 (any). */
static struct sv_send_wqe *waiting_wqe(struct sv_qp *qp, uint32_t msn, uint32_t op)
{
	for (uint32_t i = qp->sq.tail; i != qp->sq_next; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, i);

		if (w->state == SV_WQE_WAIT && w->msn == msn) {
			if (op == IBV_WR_RDMA_READ && w->opcode != IBV_WR_RDMA_READ)
				return NULL;
			if (op == IBV_WR_ATOMIC_CMP_AND_SWP && w->opcode != IBV_WR_ATOMIC_CMP_AND_SWP &&
			    w->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD)
				return NULL;
			return w;
		}
	}
	return NULL;
}

/*
 * The WQE a NAK for @msn is about: a message in segments carries the msn of its last
 * segment, so it is the first waiting WQE at or after @msn — or the one still being
 * sent in segments, which then stops there.
 */
static struct sv_send_wqe *nak_target(struct sv_qp *qp, uint32_t msn)
{
	for (uint32_t i = qp->sq.tail; i != qp->sq_next; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, i);

		if (w->state == SV_WQE_WAIT && sv_msn_le(msn, w->msn))
			return w;
	}
	if (qp->sq_next != qp->sq.head && qp->tx_off) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, qp->sq_next++);

		qp->tx_off = 0;
		return w;
	}
	return NULL;
}

/* IBA 9.7.5.2.8: the RNR NAK timer encodings, in microseconds. */
static const uint32_t rnr_timer_us[32] = {
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
	163840, 245760, 327680, 491520,
};

/* The wait an RNR NAK's timer code names, µs (a code past the table: the longest). */
static uint32_t rnr_wait_us(uint32_t code)
{
	return code < 32 ? rnr_timer_us[code] : rnr_timer_us[0];
}

/* A segment of the answer to a READ: into the WQE's buffers, checked again (the MR may
 * have gone since the READ was sent). */
static void read_resp(struct sv_qp *qp, const struct sv_hdr *h, const struct sv_payload *p)
{
	struct sv_send_wqe *w = waiting_wqe(qp, h->msn, IBV_WR_RDMA_READ);
	struct iovec iov[SV_IOV_MAX], piece[SV_IOV_MAX];
	uint64_t total;
	int n, k;

	if (!w || sv_wqe_sge_iov(qp, w, IBV_ACCESS_LOCAL_WRITE, iov, &n, &total) ||
	    h->offset + h->len > total)
		return;
	k = sv_iov_slice(iov, n, h->offset, h->len, piece);
	if (h->len && p->copy(p, 0, piece, k, h->len))
		return;
	if (h->flags & SV_F_LAST) {
		acked_upto(qp, h->msn - 1, true);
		if (w->state == SV_WQE_WAIT) /* (not sent again: an implied NAK before it) */
			answered(qp, w);
	}
}

/* The WQE at @w failed with @st: everything before it was executed (sq.lock). */
static void fail_waiting(struct sv_qp *qp, struct sv_send_wqe *w, enum ibv_wc_status st)
{
	acked_upto(qp, w->msn - 1, true);
	if (w->state != SV_WQE_WAIT)
		return;
	sv_wqe_done(w, st);
	if (sv_wqe_reads(w) && qp->rd_atomic_out)
		qp->rd_atomic_out--;
	qp->tx_stopped = true;
	sv_set_hint(qp->ack_deadline, 0);
	sv_set_hint(qp->resend_at, 0);
}

/*
 * SV_WIRE_LOSSY: the responder had no receive for @h->msn and dropped it (IBA
 * 9.7.5.2.8): everything before it was executed; wait the timer it names, then send
 * again from it, rnr_retry times (7: for ever), then RNR_RETRY_EXC_ERR.
 */
static void rnr_nak(struct sv_qp *qp, const struct sv_hdr *h)
{
	struct sv_send_wqe *w;
	uint32_t t = rnr_wait_us(h->status);

	acked_upto(qp, h->msn - 1, true);
	w = first_waiting(qp);
	if (!w || !sv_msn_le(h->msn, w->msn) || sv_hint(qp->resend_at))
		return; /* about nothing outstanding, or a wait is already running */
	if (qp->attr.rnr_retry != 7) {
		if (!qp->rnr_left) {
			fail_waiting(qp, w, IBV_WC_RNR_RETRY_EXC_ERR);
			return;
		}
		qp->rnr_left--;
	}
	qp->rnr_msn = h->msn;
	sv_set_hint(qp->ack_deadline, 0);
	sv_set_hint(qp->resend_at, sv_now_ns() + (uint64_t)t * 1000);
}

enum sv_rx sv_comp_deliver(struct sv_qp *qp, const struct sv_hdr *h, const struct sv_payload *p)
{
	uint32_t st = atomic_load_explicit(&qp->pub.state, memory_order_acquire);
	struct sv_send_wqe *w;

	/* Answers matter to a QP that sends; after RESET or in Error there is nothing
	 * they could answer. */
	if (st != IBV_QPS_RTS && st != IBV_QPS_SQD)
		return SV_RX_CONSUMED;
	/* Only the peer answers, and only what was sent (a stranger's or a forged answer
	 * completes nothing: it is dropped, as a NIC drops a packet out of its window). */
	if (h->src_qpn != qp->attr.dest_qp_num)
		return SV_RX_CONSUMED;
	sv_spin_lock(&qp->sq.lock);
	if (qp->tx_claimed) {
		/* A claimed transmit may have sent what this answers without marking it yet. */
		sv_spin_unlock(&qp->sq.lock);
		return SV_RX_HOLD;
	}
	if (!sv_msn_le(h->msn, qp->next_msn) || (h->op != SV_OP_ACK && !h->msn) ||
	    (qp->tx_stopped && sv_qp_lossy(qp))) {
		/* (after a WR failed, nothing behind it succeeds: IBA 10.8.3.3; on a lossy
		 * wire an answer to something sent before may still come) */
		sv_spin_unlock(&qp->sq.lock);
		return SV_RX_CONSUMED;
	}
	switch (h->op) {
	case SV_OP_ACK:
		acked_upto(qp, h->msn, !(h->flags & SV_F_NO_READS));
		break;
	case SV_OP_READ_RESP:
		read_resp(qp, h, p);
		break;
	case SV_OP_ATOMIC_RESP:
		w = waiting_wqe(qp, h->msn, IBV_WR_ATOMIC_CMP_AND_SWP);
		if (!w)
			break; /* answers no atomic of ours */
		if (w->num_sge == 1) {
			uint64_t va;

			/* The original value lands in our buffer (checked at transmit). */
			if (!sv_mr_check(sv_qp_ctx(qp)->mrs->slots, w->sge[0].lkey, qp->pd->handle,
					 IBV_ACCESS_LOCAL_WRITE, w->sge[0].addr, 8, &va))
				memcpy((void *)(uintptr_t)va, &h->value, 8);
		}
		acked_upto(qp, h->msn - 1, true);
		if (w->state == SV_WQE_WAIT)
			answered(qp, w);
		break;
	case SV_OP_NAK:
		w = nak_target(qp, h->msn);
		if (!w)
			break; /* about nothing outstanding: a ghost */
		acked_upto(qp, h->msn - 1, true);
		sv_wqe_done(w, (enum ibv_wc_status)h->status);
		qp->tx_stopped = true;
		break;
	case SV_OP_SEQ_NAK:
		/* IBA 9.7.5.2.2: everything before it was executed; send again from it. */
		acked_upto(qp, h->msn - 1, true);
		if (!qp->resending) { /* (once: as an implied NAK, acked_upto) */
			rewind(qp, h->msn);
			timer_restart(qp);
		}
		break;
	case SV_OP_RNR:
		if (sv_qp_lossy(qp)) {
			rnr_nak(qp, h);
			break;
		}
		/* IBA 9.7.5.2.8: wait; after rnr_retry tries (7: forever) give up. */
		if (qp->attr.rnr_retry != 7 && !sv_hint(qp->rnr_deadline)) {
			uint32_t t = rnr_wait_us(h->status);
			uint64_t wait = (uint64_t)t * 1000 * (qp->attr.rnr_retry + 1u);

			qp->rnr_msn = h->msn;
			sv_set_hint(qp->rnr_deadline, sv_now_ns() + wait);
		}
		break;
	default:
		break;
	}
	sv_comp_complete_locked(qp);
	/* An answer may free what a fenced WR or the max_rd_atomic limit waits for: the
	 * QP's progress transmits next (sv_qp_progress). */
	if (qp->sq_next != qp->sq.head)
		sv_set_hint(qp->tx_kick, true);
	sv_spin_unlock(&qp->sq.lock);
	return SV_RX_CONSUMED;
}

/*
 * SV_WIRE_LOSSY (sq.lock): an RNR NAK's wait ended, or no answer came for the transport
 * timer's period (IBA 9.7.6.1.3): send again from the first WQE waiting, retry_cnt
 * times, then RETRY_EXC_ERR.
 */
static int lossy_timers(struct sv_qp *qp)
{
	uint64_t now = sv_now_ns(), resend = sv_hint(qp->resend_at),
		 deadline = sv_hint(qp->ack_deadline);
	struct sv_send_wqe *w;

	if (resend && now >= resend) {
		sv_set_hint(qp->resend_at, 0);
		rewind(qp, qp->rnr_msn);
		timer_restart(qp);
		return 1;
	}
	if (!deadline || now < deadline)
		return 0;
	w = first_waiting(qp);
	if (!w && !qp->tx_off) {
		sv_set_hint(qp->ack_deadline, 0);
		return 0;
	}
	if (!qp->retry_left) {
		sv_dbg("qp %u: no answer after %u retries: RETRY_EXC_ERR", qp->ibv.qp_base.qp_num,
		       qp->attr.retry_cnt);
		if (w) {
			fail_waiting(qp, w, IBV_WC_RETRY_EXC_ERR);
			sv_comp_complete_locked(qp);
		}
		sv_set_hint(qp->ack_deadline, 0);
		return 1;
	}
	qp->retry_left--;
	rewind(qp, w ? w->msn : qp->next_msn + 1);
	timer_restart(qp);
	return 1;
}

int sv_comp_timers(struct sv_qp *qp)
{
	struct sv_send_wqe *w;

	if (sv_qp_lossy(qp) && (sv_hint(qp->resend_at) || sv_hint(qp->ack_deadline)))
		return lossy_timers(qp);
	if (!sv_hint(qp->rnr_deadline) || sv_now_ns() < sv_hint(qp->rnr_deadline))
		return 0;
	/* IBA 9.7.5.2.8: the RNR retries ran out. */
	w = waiting_wqe(qp, qp->rnr_msn, 0);
	sv_set_hint(qp->rnr_deadline, 0);
	if (w) {
		acked_upto(qp, w->msn - 1, true);
		sv_wqe_done(w, IBV_WC_RNR_RETRY_EXC_ERR);
		qp->wire->abandon(qp, w->msn);
		sv_comp_complete_locked(qp);
	}
	return 1;
}

void sv_comp_peer_gone(struct sv_qp *qp)
{
	bool reliable = sv_qp_type_reliable(qp->ibv.qp_base.qp_type);

	/* What still waits for an answer will never get one (IBA 9.7.5.1.1). */
	for (uint32_t i = qp->sq.tail; i != qp->sq_next; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, i);

		if (w->state == SV_WQE_WAIT && !reliable) {
			/* UC: a message to a peer that left is lost, as on one host (tx_lost). */
			sv_wqe_done(w, IBV_WC_SUCCESS);
		} else if (w->state == SV_WQE_WAIT) {
			/* Behind a WR whose error is already reported, the QP is on its way to
			 * Error: what follows is flushed, not failed anew (IBA 10.8.3.3). */
			sv_wqe_done(w, qp->sq_failed ? IBV_WC_WR_FLUSH_ERR : IBV_WC_RETRY_EXC_ERR);
			break;
		}
	}
	sv_comp_complete_locked(qp);
}
