/*
 * The responder: executes the requests a wire delivers (sv_resp_deliver) on this
 * process's memory and answers them through the wire. It is the one authority for every
 * access to the process's registered memory by a peer: key, PD, access flags, bounds,
 * the QP's state, and that the pages are there (sv_resp_access). The P_Key is still the
 * sending wire's check (reach: PARTITION), not this file's.
 */
#include <endian.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sv_cq.h"
#include "core/sv_look.h"
#include "core/sv_path.h"
#include "util/sv_lock.h"
#include "util/sv_log.h"
#include "util/sv_mem.h"

/* Sends an answer to the requester; -EAGAIN if the wire is full. */
static int answer(struct sv_qp *qp, uint8_t op, uint32_t msn, uint32_t status)
{
	struct sv_hdr h = { .op = op, .flags = SV_F_FIRST | SV_F_LAST, .msn = msn,
			    .status = status, .src_qpn = qp->ibv.qp_base.qp_num };

	return qp->wire->send(qp, &h, NULL, 0);
}

/* Takes the next receive WQE (own queue or SRQ) into @out. False if there is none. */
static bool take_recv(struct sv_qp *qp, struct sv_recv *out)
{
	struct sv_srq *srq = qp->rx_dst.srq;
	struct sv_wq *wq = qp->rx_dst.wq;
	bool limit = false, got = false;

	sv_spin_lock(&wq->lock);
	if (wq->tail != wq->head) {
		struct sv_recv_wqe *w = sv_wq_slot(wq, wq->tail++);

		out->wr_id = w->wr_id;
		out->num_sge = w->num_sge;
		memcpy(out->sge, w->sge, w->num_sge * sizeof(out->sge[0]));
		got = true;
		/* IBA 10.2.9.1: the SRQ limit event fires once when the queue runs low. */
		if (srq && srq->srq_limit && sv_wq_count(wq) < srq->srq_limit) {
			srq->srq_limit = 0;
			limit = true;
		}
	}
	sv_spin_unlock(&wq->lock);
	if (limit)
		sv_async_raise(qp->rx_dst.ctx, IBV_EVENT_SRQ_LIMIT_REACHED, &srq->ibv);
	return got;
}

static void recv_complete(struct sv_qp *qp, const struct sv_recv *r, const struct sv_hdr *h,
			  enum ibv_wc_status st, uint32_t byte_len)
{
	struct ibv_wc wc = {
		.wr_id = r->wr_id,
		.status = st,
		.opcode = h->op == SV_OP_WRITE ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
		.byte_len = byte_len,
		.qp_num = qp->ibv.qp_base.qp_num,
		.src_qp = h->src_qpn,
		.slid = sv_qp_ctx(qp)->host.lid,
		.pkey_index = qp->attr.pkey_index,
	};

	if (h->flags & SV_F_IMM) {
		wc.imm_data = h->imm;
		wc.wc_flags |= IBV_WC_WITH_IMM;
	}
	if (h->flags & SV_F_GRH)
		wc.wc_flags |= IBV_WC_GRH;
	/* SEND_WITH_INV (IBA 10.6.7.3): the window named goes, then the receive completes. */
	if (h->op == SV_OP_SEND && h->rkey && st == IBV_WC_SUCCESS &&
	    !sv_mr_table_invalidate_mw(qp->rx_dst.ctx->mrs, h->rkey, qp->rx_dst.pd)) {
		wc.invalidated_rkey = h->rkey;
		wc.wc_flags |= IBV_WC_WITH_INV;
	}
	sv_cq_push(qp->rx_dst.cq, &wc, (h->flags & SV_F_SOLICITED) != 0);
}

/* A request executed here, for the counters (softverbs_query_qp; the wire counts the
 * path its payload took). */
static void count_rx(struct sv_qp *qp, const struct sv_hdr *h, uint64_t bytes)
{
	if (h->flags & SV_F_FIRST)
		sv_count(&qp->cnt.rx_msgs, 1);
	sv_count(&qp->cnt.rx_bytes, bytes);
}

/* No receive for an RC message: Receiver Not Ready, it waits where the wire keeps it. A
 * lossy wire keeps nothing: the requester sends it again after the timer, and each
 * arrival is answered (an RNR NAK may be lost too). */
static enum sv_rx rnr(struct sv_qp *qp, const struct sv_hdr *h)
{
	if (qp->rx_dst.srq)
		atomic_store(&qp->rx_dst.srq->rnr_waiting, 1);
	if (sv_qp_lossy(qp)) {
		(void)answer(qp, SV_OP_RNR, h->msn,
			     atomic_load_explicit(&qp->pub.min_rnr_timer, memory_order_relaxed));
		return SV_RX_HOLD;
	}
	if (qp->rnr_told != h->msn &&
	    !answer(qp, SV_OP_RNR, h->msn,
		    atomic_load_explicit(&qp->pub.min_rnr_timer, memory_order_relaxed)))
		qp->rnr_told = h->msn;
	sv_set_hint(qp->rnr_held, true);
	return SV_RX_HOLD;
}

/* An acknowledgement for @msn is owed: now, if the wire takes it (cumulative). */
static void ack(struct sv_qp *qp, uint32_t msn, bool now)
{
	qp->ack_due = msn;
	if (now && !answer(qp, SV_OP_ACK, msn, 0))
		qp->ack_sent = msn;
}

/* The end of a message that consumed a receive: acknowledge, then complete it. */
static void finish_recv(struct sv_qp *qp, const struct sv_recv *r, const struct sv_hdr *h,
			enum ibv_wc_status st, uint32_t byte_len)
{
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;

	/*
	 * Answer before the receive completes: once the application sees its receive it may
	 * destroy the QP, and the requester must have its acknowledgement by then.
	 */
	if (st && sv_qp_type_reliable(type)) {
		/* IBA 9.9.3: the responder enters Error; the requester learns by NAK. */
		(void)answer(qp, SV_OP_NAK, h->msn,
			     st == IBV_WC_LOC_LEN_ERR ? IBV_WC_REM_INV_REQ_ERR : IBV_WC_REM_OP_ERR);
	} else if (h->msn) {
		/* RC, and a UC WRITE with immediate sent as messages (tx_rdma_msgs) */
		ack(qp, h->msn, true);
	}
	recv_complete(qp, r, h, st, byte_len);
	if (st && type != IBV_QPT_UD)
		sv_qp_fail(qp, SV_ERR_QUIET);
}

/*
 * UC, UD: no receive for the message at the head. A wire that can keep it where it is
 * (SV_F_KEEP) keeps it for up to HOLD_NS while none is posted, as a NIC's receive buffer
 * does for a moment: a receiver that reposts late, asleep on its completion channel
 * while the progress thread filled the receives it had, loses nothing (its senders wait
 * for room meanwhile). After that, or from a wire that cannot keep it, the message is
 * dropped (IBA 9.7.5.1.5, 10.9.3: unreliable service) and counted (rx_dropped), and so
 * is every one after it until a receive is taken: a receiver that posts none does not
 * hold up its senders.
 */
#define HOLD_NS 100000000ull
static bool hold_unreliable(struct sv_qp *qp, const struct sv_hdr *h)
{
	uint64_t until = sv_hint(qp->hold_until), now;

	if (!(h->flags & SV_F_KEEP) || qp->dropping)
		return false;
	now = sv_now_ns();
	if (!until) {
		sv_set_hint(qp->hold_until, now + HOLD_NS);
	} else if (now >= until) {
		/* Nothing waits for a receive any more: the QP arms its wire again (sv_qp_arm),
		 * or its next message would not wake the progress thread to drop it. */
		sv_set_hint(qp->hold_until, 0);
		sv_set_hint(qp->rnr_held, false);
		qp->dropping = true;
		return false;
	}
	sv_set_hint(qp->rnr_held, true);
	return true;
}

/* SEND: one segment or several that fill one receive. */
static enum sv_rx rx_send(struct sv_qp *qp, const struct sv_hdr *h, const struct sv_payload *p)
{
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	struct iovec iov[SV_IOV_MAX], piece[SV_IOV_MAX];
	enum ibv_wc_status st;
	uint64_t room;
	int n_iov, k;

	if ((h->flags & SV_F_FIRST) && qp->rx_active && type == IBV_QPT_UC && sv_qp_lossy(qp)) {
		/* The message before lost its end on the wire (UC drops the rest of it): the
		 * receive it had taken, not completed, takes this one (IBA 9.7.5.1.x; rxe). */
	} else if (h->flags & SV_F_FIRST) {
		if (type == IBV_QPT_UD &&
		    h->qkey != atomic_load_explicit(&qp->pub.qkey, memory_order_relaxed)) {
			/* IBA 10.2.4: a Q_Key mismatch drops the datagram (and is counted). */
			atomic_fetch_add_explicit(&sv_engine_qkey_violations, 1, memory_order_relaxed);
			return SV_RX_CONSUMED;
		}
		if (!take_recv(qp, &qp->rx_recv)) {
			if (sv_qp_type_reliable(type))
				return rnr(qp, h);
			if (hold_unreliable(qp, h))
				return SV_RX_HOLD;
			sv_dbg("qp %u: a message from qp %u dropped: no receive posted",
			       qp->ibv.qp_base.qp_num, h->src_qpn);
			sv_count(&qp->cnt.rx_dropped, 1);
			return SV_RX_CONSUMED; /* UC, UD: dropped */
		}
		sv_set_hint(qp->rnr_held, false);
		sv_set_hint(qp->hold_until, 0);
		qp->dropping = false;
		qp->rx_active = true;
	} else if (!qp->rx_active) {
		return SV_RX_CONSUMED; /* a segment of a message we did not start */
	}
	st = sv_sge_iov(qp->rx_dst.ctx->mrs->slots, qp->rx_dst.pd, qp->rx_recv.sge,
			qp->rx_recv.num_sge, IBV_ACCESS_LOCAL_WRITE, iov, &n_iov, &room);
	if (!st && (room < h->total || h->offset + h->len > h->total))
		st = IBV_WC_LOC_LEN_ERR;
	if (!st && h->len) {
		k = sv_iov_slice(iov, n_iov, h->offset, h->len, piece);
		/* The requester's data could not be fetched: the operation failed here. */
		if (p->copy(p, 0, piece, k, h->len))
			st = IBV_WC_LOC_QP_OP_ERR;
	}
	if (!st)
		count_rx(qp, h, h->len);
	if (st || (h->flags & SV_F_LAST)) {
		qp->rx_active = false;
		finish_recv(qp, &qp->rx_recv, h, st, (uint32_t)h->total);
	}
	return SV_RX_CONSUMED;
}

/* A refused request: NAK, and this QP enters Error (IBA 9.9.3: access violation, or an
 * invalid request). */
static enum sv_rx refuse(struct sv_qp *qp, const struct sv_hdr *h, enum ibv_wc_status st)
{
	if (!sv_qp_type_reliable(qp->ibv.qp_base.qp_type)) {
		/* UC: dropped silently; a WRITE sent as messages still gets its
		 * acknowledgement. */
		if (h->msn && (h->flags & SV_F_LAST))
			ack(qp, h->msn, true);
		return SV_RX_CONSUMED;
	}
	if (answer(qp, SV_OP_NAK, h->msn, st))
		return SV_RX_HOLD;
	sv_qp_fail(qp, SV_ERR_EVENT(st == IBV_WC_REM_ACCESS_ERR ? IBV_EVENT_QP_ACCESS_ERR
							       : IBV_EVENT_QP_REQ_ERR));
	return SV_RX_CONSUMED;
}

/* The key checks of an RDMA access to our memory (IBA 9.7.5.1.3 / C9-*). */
static inline bool rdma_key_ok(struct sv_qp *qp, uint32_t rkey, uint64_t addr, uint64_t len,
			       uint32_t need, uint64_t *va)
{
	if (!(atomic_load_explicit(&qp->pub.access, memory_order_relaxed) & need))
		return false;
	return sv_mr_check(qp->rx_dst.ctx->mrs->slots, rkey, qp->rx_dst.pd, need, addr, len, va) ==
	       SV_ACCESS_OK;
}

static uint64_t page_size(void)
{
	static _Atomic uint64_t size;
	uint64_t v = atomic_load_explicit(&size, memory_order_relaxed);

	if (!v) {
		v = (uint64_t)sysconf(_SC_PAGESIZE);
		atomic_store_explicit(&size, v, memory_order_relaxed);
	}
	return v;
}

/*
 * Those checks, and that the memory is there to copy (what a NIC's page walk would
 * find): the owner may have unmapped or protected memory it registered, and an
 * on-demand MR may cover pages never mapped; copying there would fault where a NIC
 * reports a remote access error. The pages found mapped are remembered until the end of
 * the poll (sv_resp_flush): a burst of small WRITEs hits few pages, and each look is a
 * system call.
 */
bool sv_resp_access(struct sv_qp *qp, uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need,
		    bool pages, uint64_t *va)
{
	bool write = need != IBV_ACCESS_REMOTE_READ, ok;
	uint64_t page;

	if (!rdma_key_ok(qp, rkey, addr, len, need, va))
		return false;
	if (!pages)
		return true;
	if (*va >= qp->acc_lo && *va + len <= qp->acc_hi && (!write || qp->acc_write))
		return true;
	page = page_size();
	ok = sv_mem_accessible(*va, len, write);
	if (ok) {
		qp->acc_lo = *va & ~(page - 1);
		qp->acc_hi = (*va + len + page - 1) & ~(page - 1);
		qp->acc_write = write;
	}
	return ok;
}

/* A WRITE segment placed by us (or, SV_F_PLACED, one the wire placed, whose immediate is
 * left to deliver). */
static enum sv_rx rx_write(struct sv_qp *qp, const struct sv_hdr *h, const struct sv_payload *p)
{
	struct sv_recv r;
	bool imm = (h->flags & SV_F_LAST) && (h->flags & SV_F_IMM);
	uint64_t va = 0;

	/* The whole WRITE is checked on its first segment (nothing of a refused one is
	 * placed), each segment again where it lands (the keys may change meanwhile). */
	if ((h->flags & SV_F_FIRST) && !(h->flags & SV_F_PLACED) && h->total > h->len &&
	    !sv_resp_access(qp, h->rkey, h->raddr, h->total, IBV_ACCESS_REMOTE_WRITE, false, &va))
		return refuse(qp, h, IBV_WC_REM_ACCESS_ERR);
	if (h->len && !sv_resp_access(qp, h->rkey, h->raddr + h->offset, h->len,
				      IBV_ACCESS_REMOTE_WRITE, true, &va))
		return refuse(qp, h, IBV_WC_REM_ACCESS_ERR);
	if (imm && !take_recv(qp, &r)) {
		if (sv_qp_type_reliable(qp->ibv.qp_base.qp_type))
			return rnr(qp, h);
		sv_count(&qp->cnt.rx_dropped, 1); /* UC: the data placed, the immediate lost */
		return SV_RX_CONSUMED;
	}
	sv_set_hint(qp->rnr_held, false);
	if (h->len) {
		struct iovec dst = { .iov_base = (void *)(uintptr_t)va, .iov_len = h->len };

		if (p->copy(p, 0, &dst, 1, h->len))
			return refuse(qp, h, IBV_WC_REM_ACCESS_ERR);
	}
	if (!(h->flags & SV_F_PLACED))
		count_rx(qp, h, h->len);
	if (imm)
		finish_recv(qp, &r, h, IBV_WC_SUCCESS, (uint32_t)h->total);
	else if ((h->flags & SV_F_LAST) && h->msn)
		ack(qp, h->msn, false); /* with the batch (sv_resp_flush) */
	return SV_RX_CONSUMED;
}

/* An RDMA READ, answered in segments (qp->resp_off keeps the place). */
static enum sv_rx rx_read(struct sv_qp *qp, const struct sv_hdr *h)
{
	struct sv_hdr r = { .op = SV_OP_READ_RESP, .msn = h->msn, .total = h->total,
			    .src_qpn = qp->ibv.qp_base.qp_num };
	uint64_t va = 0, seg;

	if (qp->wire->reach(qp, h->src_qpn) == SV_REACH_NO_PEER)
		return SV_RX_CONSUMED; /* nobody to answer */
	if (h->total && !sv_resp_access(qp, h->rkey, h->raddr, h->total, IBV_ACCESS_REMOTE_READ,
					true, &va))
		return refuse(qp, h, IBV_WC_REM_ACCESS_ERR);
	seg = qp->wire->seg_max(qp, &r);
	do {
		uint64_t n = h->total - qp->resp_off < seg ? h->total - qp->resp_off : seg;
		struct iovec src = { .iov_base = (void *)(uintptr_t)(va + qp->resp_off),
				     .iov_len = n };

		r.offset = qp->resp_off;
		r.len = (uint32_t)n;
		r.flags = (qp->resp_off ? 0 : SV_F_FIRST) |
			  (qp->resp_off + n == h->total ? SV_F_LAST : 0);
		if (qp->wire->send(qp, &r, &src, n ? 1 : 0)) {
			/* A lossy wire keeps nothing: the requester asks again. */
			if (sv_qp_lossy(qp))
				qp->resp_off = 0;
			return SV_RX_HOLD;
		}
		qp->resp_off += n;
	} while (qp->resp_off < h->total);
	count_rx(qp, h, h->total);
	qp->resp_off = 0;
	qp->ack_due = qp->ack_sent = h->msn; /* the last segment answers it */
	return SV_RX_CONSUMED;
}

/*
 * The atomic itself, on application memory that the application reads with plain
 * loads (as it reads memory a NIC wrote): its own function so that tests/tsan.supp
 * allows exactly this access (race_top:sv_resp_atomic_app).
 */
__attribute__((noinline)) static uint64_t sv_resp_atomic_app(uint64_t *p, bool cmp_swp,
							     uint64_t compare_add, uint64_t swap)
{
	uint64_t orig;

	if (cmp_swp) {
		orig = compare_add;
		__atomic_compare_exchange_n(p, &orig, swap, false, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
		return orig;
	}
	return __atomic_fetch_add(p, compare_add, __ATOMIC_SEQ_CST);
}

/* Keeps an executed atomic's answer for its duplicates (atomics_done). */
static void remember_atomic(struct sv_qp *qp, uint32_t msn, uint64_t value)
{
	if (!qp->atomics_done) {
		qp->atomics_done = calloc(SV_MAX_RD_ATOM, sizeof(*qp->atomics_done));
		if (!qp->atomics_done)
			return; /* the last one only (resp) */
	}
	qp->atomics_done[qp->atomics_n++ % SV_MAX_RD_ATOM] =
		(struct sv_atomic_done){ .msn = msn, .value = value };
}

/* The answer of the atomic @msn took, if it is still kept: true and *@value. */
static bool atomic_done(const struct sv_qp *qp, uint32_t msn, uint64_t *value)
{
	uint32_t n = qp->atomics_n < SV_MAX_RD_ATOM ? qp->atomics_n : SV_MAX_RD_ATOM;

	if (qp->resp_valid && qp->resp.msn == msn) {
		*value = qp->resp.value;
		return true;
	}
	for (uint32_t i = 0; qp->atomics_done && i < n; i++) {
		const struct sv_atomic_done *d = &qp->atomics_done[(qp->atomics_n - 1 - i) %
								   SV_MAX_RD_ATOM];

		if (d->msn == msn) {
			*value = d->value;
			return true;
		}
	}
	return false;
}

/* Executes an atomic on our memory for the requester (IBA 9.4.5, IBV_ATOMIC_HCA). */
static enum sv_rx rx_atomic(struct sv_qp *qp, const struct sv_hdr *h)
{
	enum sv_access_result a;
	uint64_t va;

	if (qp->wire->reach(qp, h->src_qpn) == SV_REACH_NO_PEER)
		return SV_RX_CONSUMED; /* nobody to answer: not executed */
	a = sv_mr_check(qp->rx_dst.ctx->mrs->slots, h->rkey, qp->rx_dst.pd,
			IBV_ACCESS_REMOTE_ATOMIC, h->raddr, 8, &va);
	if (!(atomic_load_explicit(&qp->pub.access, memory_order_relaxed) &
	      IBV_ACCESS_REMOTE_ATOMIC))
		a = SV_ACCESS_NO_RIGHT;
	if (a == SV_ACCESS_OK && (h->raddr & 7)) {
		if (answer(qp, SV_OP_NAK, h->msn, IBV_WC_REM_INV_REQ_ERR))
			return SV_RX_HOLD;
		sv_qp_fail(qp, SV_ERR_EVENT(IBV_EVENT_QP_REQ_ERR));
		return SV_RX_CONSUMED;
	}
	/* The page must still be there, writable: the owner may have unmapped or protected
	 * it, or an on-demand MR never had it (no crash). */
	if (a == SV_ACCESS_OK && !sv_mem_accessible(va, 8, true))
		a = SV_ACCESS_OUT_OF_RANGE;
	if (a != SV_ACCESS_OK) {
		if (answer(qp, SV_OP_NAK, h->msn, IBV_WC_REM_ACCESS_ERR))
			return SV_RX_HOLD;
		sv_qp_fail(qp, SV_ERR_EVENT(IBV_EVENT_QP_ACCESS_ERR));
		return SV_RX_CONSUMED;
	}
	/* Executed exactly once: an answer the wire cannot take now is owed (resp_pending),
	 * and nothing after it executes before it has gone (sv_resp_deliver). */
	qp->resp = (struct sv_hdr){ .op = SV_OP_ATOMIC_RESP, .flags = SV_F_FIRST | SV_F_LAST,
				    .msn = h->msn, .src_qpn = qp->ibv.qp_base.qp_num };
	qp->resp.value = sv_resp_atomic_app((uint64_t *)(uintptr_t)va, h->flags & SV_F_CMP_SWP,
					    h->compare_add, h->swap);
	qp->resp_valid = true;
	remember_atomic(qp, h->msn, qp->resp.value);
	qp->resp_pending = qp->wire->send(qp, &qp->resp, NULL, 0) != 0;
	count_rx(qp, h, 8);
	qp->ack_due = h->msn;
	qp->ack_sent = h->msn; /* the response acknowledges it */
	return SV_RX_CONSUMED;
}

/* A one-sided operation of the peer changed memory here: the progress thread is to keep
 * moving this QP even while the application polls (see polled_since, sv_engine.c). */
static void note_placed(struct sv_qp *qp)
{
	uint32_t look = atomic_load_explicit(&sv_engine_look, memory_order_relaxed);

	if (atomic_load_explicit(&qp->placed_look, memory_order_relaxed) != look)
		atomic_store_explicit(&qp->placed_look, look, memory_order_relaxed);
}

static enum sv_rx rx_request(struct sv_qp *qp, const struct sv_hdr *h, const struct sv_payload *p)
{
	/* Not a READ: it changes nothing the application here could spin on, and only the
	 * peer waits for its answer, which this application's polls give while it polls
	 * (and the thread once it stops). Counted, READs (the iWARP wire's placement probe
	 * after every Send among them) had the progress thread poll beside a busy
	 * application, on its CPU: the application spun while the thread, preempted, held
	 * rx_busy. Between hosts one Send in a hundred took milliseconds (ib_send_lat's
	 * average 471 µs against 17 µs typical) and a 256 KiB READ 1.3 ms instead of 0.12. */
	if ((h->op == SV_OP_WRITE && !(h->flags & SV_F_PLACED)) || h->op == SV_OP_ATOMIC)
		note_placed(qp);
	switch (h->op) {
	case SV_OP_SEND:
		return rx_send(qp, h, p);
	case SV_OP_WRITE:
		return rx_write(qp, h, p);
	case SV_OP_READ_REQ:
		return rx_read(qp, h);
	case SV_OP_ATOMIC:
		return rx_atomic(qp, h);
	case SV_OP_BAD:
		return refuse(qp, h, IBV_WC_REM_INV_REQ_ERR);
	default:
		return SV_RX_CONSUMED;
	}
}

/*
 * An XRC target places each request through the XRC SRQ the request names, which must
 * be one of its domain's (IBA 11.2.x, the XRCETH): that SRQ's queue, CQ, key table and
 * PD. The domain stays read-locked while the message is placed, so the SRQ cannot go.
 */
static enum sv_rx rx_xrc(struct sv_qp *qp, const struct sv_hdr *h, const struct sv_payload *p)
{
	struct sv_xrc_domain *dom = qp->xrcd->dom;
	enum sv_rx r;
	struct sv_srq *srq;

	sv_xrc_domain_rdlock(dom);
	srq = sv_xrc_domain_find(dom, h->xrc_srqn);
	if (!srq) {
		sv_xrc_domain_unlock(dom);
		sv_dbg("qp %u: request names srq %u, not in the domain", qp->ibv.qp_base.qp_num,
		       h->xrc_srqn);
		qp->rx_active = false;
		return refuse(qp, h, IBV_WC_REM_INV_REQ_ERR);
	}
	qp->rx_dst = (struct sv_rx_dst){
		.srq = srq,
		.wq = &srq->rq,
		.cq = srq->cq,
		.ctx = to_svctx(srq->ibv.context),
		.pd = srq->pd->handle,
	};
	qp->acc_hi = 0; /* the pages found mapped were another key table's */
	r = rx_request(qp, h, p);
	qp->rx_dst.srq = NULL;
	qp->acc_hi = 0;
	sv_xrc_domain_unlock(dom);
	return r;
}

/*
 * SV_WIRE_LOSSY: a READ taken already comes again (its response, or part of it, was
 * lost): read and answer it again, as IBA 9.7.5.1.1 has the responder do. Nothing else
 * of the responder's state moves (what was acknowledged stays so).
 */
static enum sv_rx dup_read(struct sv_qp *qp, const struct sv_hdr *h)
{
	uint32_t due = qp->ack_due, sent = qp->ack_sent;

	/* (rx_read leaves no answer half sent on a lossy wire: resp_off is 0 after it) */
	(void)rx_read(qp, h);
	qp->ack_due = due;
	qp->ack_sent = sent;
	return SV_RX_CONSUMED;
}

/*
 * A request whose msn is not the next one (IBA 9.7.5.1.1, the PSN checks): one already
 * taken is a duplicate — executed once, so it is answered again (an atomic with the
 * value it had, anything else with the acknowledgement of everything taken) and not
 * executed; one beyond the next means requests were lost, which a wire that delivers in
 * order never does: the peer broke the protocol, a sequence error (NAK, Error).
 */
static enum sv_rx out_of_sequence(struct sv_qp *qp, const struct sv_hdr *h)
{
	bool lossy = sv_qp_lossy(qp);

	if (sv_msn_le(h->msn, qp->rx_msn)) {
		struct sv_hdr again = { .op = SV_OP_ATOMIC_RESP, .flags = SV_F_FIRST | SV_F_LAST,
					.msn = h->msn, .src_qpn = qp->ibv.qp_base.qp_num };

		if (h->op == SV_OP_ATOMIC && atomic_done(qp, h->msn, &again.value))
			return qp->wire->send(qp, &again, NULL, 0) && !lossy ? SV_RX_HOLD
									     : SV_RX_CONSUMED;
		if (lossy && h->op == SV_OP_READ_REQ)
			return dup_read(qp, h);
		if (qp->rx_msn)
			ack(qp, qp->rx_msn, true);
		return SV_RX_CONSUMED;
	}
	if (lossy) {
		/* IBA 9.7.5.1.1: requests were lost. One NAK for the gap asks the requester to
		 * send again from the one expected; what comes meanwhile is dropped. */
		if (qp->seq_nak_told != qp->rx_msn + 1 &&
		    !answer(qp, SV_OP_SEQ_NAK, qp->rx_msn + 1, 0))
			qp->seq_nak_told = qp->rx_msn + 1;
		return SV_RX_CONSUMED;
	}
	sv_dbg("qp %u: request msn %u from qp %u, expected %u: sequence error",
	       qp->ibv.qp_base.qp_num, h->msn, h->src_qpn, qp->rx_msn + 1);
	return refuse(qp, h, IBV_WC_REM_INV_REQ_ERR);
}

bool sv_resp_ready(struct sv_qp *qp)
{
	bool failing = atomic_load(&qp->err_event) != SV_ERR_NONE;
	enum ibv_qp_state st = atomic_load_explicit(&qp->pub.state, memory_order_acquire);

	/* What sv_resp_deliver would hold or drop, or do before the request. */
	return st != IBV_QPS_RESET && st != IBV_QPS_INIT && st != IBV_QPS_ERR && !failing &&
	       !sv_hint(qp->rtr_connecting) && !qp->resp_pending && !qp->resp_off;
}

enum sv_rx sv_resp_deliver(struct sv_qp *qp, const struct sv_hdr *h, const struct sv_payload *p)
{
	/* An error being entered, then the published state (modify_qp may change it while we
	 * consume): in this order, as sv_qp_settle_locked publishes ERR before it clears the
	 * pending error, so that one of the two always shows. */
	bool failing = atomic_load(&qp->err_event) != SV_ERR_NONE;
	enum ibv_qp_state st = atomic_load_explicit(&qp->pub.state, memory_order_acquire);

	if (h->op == SV_OP_TERMINATE) {
		/* The event the wire names (value), else an access error's. */
		if (st != IBV_QPS_ERR)
			sv_qp_fail(qp, h->value == SV_TERM_QUIET ? SV_ERR_QUIET
				       : SV_ERR_EVENT(h->value ? (enum ibv_event_type)h->value
							       : IBV_EVENT_QP_ACCESS_ERR));
		return SV_RX_CONSUMED;
	}
	/* Requests: a QP before RTR holds them (a NIC would drop them and the requester
	 * retransmit); a QP in error drops them. */
	if (st == IBV_QPS_RESET || st == IBV_QPS_INIT)
		return SV_RX_HOLD;
	if (st == IBV_QPS_ERR || failing)
		return SV_RX_CONSUMED;
	if (qp->ibv.qp_base.qp_type != IBV_QPT_UD && h->src_qpn != qp->attr.dest_qp_num)
		return SV_RX_CONSUMED; /* not from the QP we are connected to */
	/* In RTR before the attach to the peer is done (ibv_modify_qp publishes the state,
	 * then connects): a request now could be answered to nobody — a NAK lost, the
	 * requester's WR flushed instead of failing with the responder's status. It waits
	 * for the peer. */
	if (sv_hint(qp->rtr_connecting))
		return SV_RX_HOLD;
	if (h->flags & SV_F_ABANDONED) {
		/* The requester gave up on this one after RNR retries: never accepted. */
		sv_set_hint(qp->rnr_held, false);
		qp->rx_active = false;
		return SV_RX_CONSUMED;
	}
	/* An atomic's answer goes before anything that follows is executed. */
	if (qp->resp_pending) {
		if (qp->wire->send(qp, &qp->resp, NULL, 0))
			return SV_RX_HOLD;
		qp->resp_pending = false;
	}
	if (h->msn) {
		enum sv_rx r;

		if (h->msn != qp->rx_msn + 1)
			return out_of_sequence(qp, h);
		r = qp->xrcd ? rx_xrc(qp, h, p) : rx_request(qp, h, p);
		if (r == SV_RX_CONSUMED)
			qp->rx_msn = h->msn;
		qp->seq_nak_told = 0;
		/* Executed (not refused: the QP would be failing now): acknowledged if asked. */
		if (r == SV_RX_CONSUMED && (h->flags & SV_F_ACK_REQ) && !(h->flags & SV_F_LAST) &&
		    atomic_load(&qp->err_event) == SV_ERR_NONE)
			ack(qp, h->msn, true);
		return r;
	}
	return qp->xrcd ? rx_xrc(qp, h, p) : rx_request(qp, h, p);
}

void sv_resp_flush(struct sv_qp *qp)
{
	qp->acc_hi = 0;
	if (qp->resp_pending) {
		if (qp->wire->send(qp, &qp->resp, NULL, 0)) {
			sv_set_hint(qp->resp_owed, true);
			return; /* the acknowledgements wait behind it */
		}
		qp->resp_pending = false;
	}
	/* An acknowledgement that found the wire full goes now (cumulative). */
	if (qp->ack_due != qp->ack_sent && !answer(qp, SV_OP_ACK, qp->ack_due, 0))
		qp->ack_sent = qp->ack_due;
	sv_set_hint(qp->resp_owed, qp->resp_pending || qp->ack_due != qp->ack_sent);
}

void sv_resp_reset(struct sv_qp *qp)
{
	qp->ack_due = qp->ack_sent = 0;
	sv_set_hint(qp->rnr_held, false);
	sv_set_hint(qp->hold_until, 0);
	qp->dropping = false;
	qp->rnr_told = 0;
	qp->seq_nak_told = 0;
	qp->rx_active = false;
	qp->resp_off = 0;
	qp->resp_pending = false;
	sv_set_hint(qp->resp_owed, false);
	qp->resp_valid = false;
	qp->atomics_n = 0;
	qp->rx_msn = 0;
	qp->acc_hi = 0;
}
