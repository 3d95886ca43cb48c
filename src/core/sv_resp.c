/* The responder: handles the messages in a QP's inbound fifo. */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/sv_cq.h"
#include "core/sv_qp_priv.h"
#include "util/sv_log.h"
#include "util/sv_mem.h"

/* ---------------------------------------------------------------------------------------- */
/* responder                                                                                */

/* Sends a small answer to the requester. -EAGAIN if its fifo is full. */
static int answer(struct sv_qp *qp, uint8_t op, uint32_t msn, uint32_t aux, uint64_t value)
{
	struct shm_msg m = { .op = op, .msn = msn, .aux = aux, .src_qpn = qp->ibv.qp_base.qp_num };

	if (!qp->peer)
		return 0;
	m.u.atomic_value = value;
	return sv_put_msg(qp->peer, &m, NULL, NULL, 0, 0);
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
	pthread_spin_unlock(&wq->lock);
	if (limit)
		sv_async_raise(qp->rx_dst.ctx, IBV_EVENT_SRQ_LIMIT_REACHED, &srq->ibv);
	return got;
}

static void recv_complete(struct sv_qp *qp, const struct sv_recv *r, const struct shm_msg *m,
			  enum ibv_wc_status st, uint32_t byte_len)
{
	struct ibv_wc wc = {
		.wr_id = r->wr_id,
		.status = st,
		.opcode = m->op == SHM_OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
		.byte_len = byte_len,
		.qp_num = qp->ibv.qp_base.qp_num,
		.src_qp = m->src_qpn,
		.slid = sv_qp_ctx(qp)->host.lid,
		.pkey_index = qp->attr.pkey_index,
	};

	if (m->flags & SHM_F_IMM) {
		wc.imm_data = m->imm;
		wc.wc_flags |= IBV_WC_WITH_IMM;
	}
	if (m->flags & SHM_F_GRH)
		wc.wc_flags |= IBV_WC_GRH;
	/* SEND_WITH_INV (IBA 10.6.7.3): the window named goes, then the receive completes. */
	if (m->op == SHM_OP_SEND && m->u.rdma.rkey && st == IBV_WC_SUCCESS &&
	    !sv_mr_table_invalidate_mw(qp->rx_dst.ctx->mrs, m->u.rdma.rkey, qp->rx_dst.pd)) {
		wc.invalidated_rkey = m->u.rdma.rkey;
		wc.wc_flags |= IBV_WC_WITH_INV;
	}
	sv_cq_push(qp->rx_dst.cq, &wc, (m->flags & SHM_F_SOLICITED) != 0);
}

enum rx_result { RX_CONSUMED, RX_HOLD };

/* The receive buffers of @sges as iovecs (IBA 10.6.3: lkey, PD, LOCAL_WRITE, range). */
static enum ibv_wc_status recv_iov(struct sv_qp *qp, const struct ibv_sge *sges, uint32_t n,
				   struct iovec *iov, int *n_iov, uint64_t *room)
{
	const struct sv_mr_entry *slots = qp->rx_dst.ctx->mrs->slots;

	*n_iov = 0;
	*room = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t va;

		if (!sges[i].length)
			continue;
		if (sv_mr_check(slots, sges[i].lkey, qp->rx_dst.pd, IBV_ACCESS_LOCAL_WRITE,
				sges[i].addr, sges[i].length, &va))
			return IBV_WC_LOC_PROT_ERR;
		/* On demand: the pages must be there to be written (a receive into a hole or
		 * a protected page fails; the copy would fault). */
		if (sv_mr_on_demand(slots, sges[i].lkey) &&
		    !sv_mem_accessible(va, sges[i].length, true))
			return IBV_WC_LOC_PROT_ERR;
		iov[*n_iov].iov_base = (void *)(uintptr_t)va;
		iov[(*n_iov)++].iov_len = sges[i].length;
		*room += sges[i].length;
	}
	return IBV_WC_SUCCESS;
}

/* A request executed here, for the counters (softverbs_query_qp): @msgs messages of
 * @bytes payload, copied by process_vm_readv (@cma) or from or into the fifos. */
static void count_rx(struct sv_qp *qp, uint64_t msgs, uint64_t bytes, bool cma)
{
	sv_count(&qp->cnt.rx_msgs, msgs);
	sv_count(&qp->cnt.rx_bytes, bytes);
	sv_count(cma ? &qp->cnt.rx_cma_bytes : &qp->cnt.rx_fifo_bytes, bytes);
}

/* No receive for an RC message: Receiver Not Ready, it waits at the head of the fifo. */
static enum rx_result rnr(struct sv_qp *qp, const struct shm_msg *m)
{
	if (qp->rx_dst.srq)
		atomic_store(&qp->rx_dst.srq->rnr_waiting, 1);
	if (qp->rnr_told != m->msn && !answer(qp, SHM_OP_RNR, m->msn, atomic_load_explicit(&qp->page->min_rnr_timer, memory_order_relaxed), 0))
		qp->rnr_told = m->msn;
	sv_set_hint(qp->rnr_held, true);
	return RX_HOLD;
}

/* The end of a message that consumed a receive: acknowledge, then complete it. */
static void finish_recv(struct sv_qp *qp, const struct sv_recv *r, const struct shm_msg *m,
			enum ibv_wc_status st, uint32_t byte_len)
{
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;

	/*
	 * Answer before the receive completes: once the application sees its receive it may
	 * destroy the QP, and the requester must have its acknowledgement by then.
	 */
	if (st && sv_qp_type_reliable(type)) {
		/* IBA 9.9.3: the responder enters Error; the requester learns by NAK. */
		(void)answer(qp, SHM_OP_NAK, m->msn,
			     st == IBV_WC_LOC_LEN_ERR ? IBV_WC_REM_INV_REQ_ERR : IBV_WC_REM_OP_ERR, 0);
	} else if (m->msn) {
		/* RC, and a UC bounce WRITE with immediate (see tx_rdma_bounce) */
		qp->ack_due = m->msn;
		if (!answer(qp, SHM_OP_ACK, m->msn, 0, 0))
			qp->ack_sent = m->msn;
	}
	recv_complete(qp, r, m, st, byte_len);
	if (st && type != IBV_QPT_UD)
		sv_qp_fail(qp, SV_ERR_NO_EVENT);
}

/*
 * SEND: one message (data in the fifo, or a list of the sender's buffers to pull with
 * process_vm_readv), or pieces (bounce copy) that fill one receive.
 */
static enum rx_result rx_send(struct sv_qp *qp, const struct shm_msg *m, uint64_t pos)
{
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	bool whole = (m->flags & SHM_F_FIRST) && (m->flags & SHM_F_LAST);
	uint64_t total = whole || !(m->flags & SHM_F_INLINE) ? m->len : m->aux;
	struct iovec iov[SV_IOV_MAX], piece[SV_IOV_MAX];
	enum ibv_wc_status st;
	uint64_t room;
	int n_iov, k;

	if (m->flags & SHM_F_FIRST) {
		if (type == IBV_QPT_UD &&
		    m->aux != atomic_load_explicit(&qp->page->qkey, memory_order_relaxed)) {
			/* IBA 10.2.4: a Q_Key mismatch drops the datagram (and is counted). */
			atomic_fetch_add_explicit(&sv_engine_qkey_violations, 1, memory_order_relaxed);
			return RX_CONSUMED;
		}
		if (!take_recv(qp, &qp->rx_recv)) {
			if (sv_qp_type_reliable(type))
				return rnr(qp, m);
			sv_dbg("qp %u: a message from qp %u dropped: no receive posted",
			       qp->ibv.qp_base.qp_num, m->src_qpn);
			return RX_CONSUMED; /* UC, UD: dropped */
		}
		sv_set_hint(qp->rnr_held, false);
		qp->rx_active = true;
	} else if (!qp->rx_active) {
		return RX_CONSUMED; /* a piece of a message we did not start */
	}
	st = recv_iov(qp, qp->rx_recv.sge, qp->rx_recv.num_sge, iov, &n_iov, &room);
	if (!st && room < total)
		st = IBV_WC_LOC_LEN_ERR;
	if (!st && (m->flags & SHM_F_INLINE)) {
		uint32_t off = 0;

		k = sv_iov_slice(iov, n_iov, whole ? 0 : m->u.rdma.addr, m->len, piece);
		for (int i = 0; i < k; i++) {
			shm_fifo_get(qp->rx, pos, off, piece[i].iov_base, (uint32_t)piece[i].iov_len);
			off += (uint32_t)piece[i].iov_len;
		}
		count_rx(qp, (m->flags & SHM_F_FIRST) ? 1 : 0, m->len, false);
	} else if (!st) {
		/* Rendezvous: pull the sender's buffers, one copy (process_vm_readv). */
		struct shm_rsge rs[SV_IOV_MAX];
		uint32_t n = m->aux < SV_IOV_MAX ? m->aux : SV_IOV_MAX;
		uint64_t off = 0;

		shm_fifo_get(qp->rx, pos, 0, rs, n * (uint32_t)sizeof(rs[0]));
		for (uint32_t i = 0; i < n && !st; i++) {
			k = sv_iov_slice(iov, n_iov, off, rs[i].len, piece);
			if (!qp->peer || sv_cma_copy(qp->peer->pid, piece, k, rs[i].addr, rs[i].len, false))
				st = IBV_WC_LOC_QP_OP_ERR;
			off += rs[i].len;
		}
		if (!st)
			count_rx(qp, 1, off, true);
	}
	if (st || (m->flags & SHM_F_LAST)) {
		qp->rx_active = false;
		finish_recv(qp, &qp->rx_recv, m, st, (uint32_t)total);
	}
	return RX_CONSUMED;
}

/* WRITE with immediate after a one-sided write: the data is there; consume a receive. */
static enum rx_result rx_write_imm(struct sv_qp *qp, const struct shm_msg *m)
{
	struct sv_recv r;

	if (!take_recv(qp, &r))
		return sv_qp_type_reliable(qp->ibv.qp_base.qp_type) ? rnr(qp, m) : RX_CONSUMED;
	sv_set_hint(qp->rnr_held, false);
	finish_recv(qp, &r, m, IBV_WC_SUCCESS, m->len);
	return RX_CONSUMED;
}

/* A refused request: NAK, and this QP enters Error (IBA 9.9.3: access violation, or an
 * invalid request). */
static enum rx_result refuse(struct sv_qp *qp, const struct shm_msg *m, enum ibv_wc_status st)
{
	if (!sv_qp_type_reliable(qp->ibv.qp_base.qp_type)) {
		/* UC: dropped silently; a bounce WRITE still gets its acknowledgement. */
		if (m->msn && (m->flags & SHM_F_LAST))
			(void)answer(qp, SHM_OP_ACK, m->msn, 0, 0);
		return RX_CONSUMED;
	}
	if (answer(qp, SHM_OP_NAK, m->msn, st, 0))
		return RX_HOLD;
	sv_qp_fail(qp, st == IBV_WC_REM_ACCESS_ERR ? IBV_EVENT_QP_ACCESS_ERR : IBV_EVENT_QP_REQ_ERR);
	return RX_CONSUMED;
}

static uint64_t page_size(void)
{
	return (uint64_t)sysconf(_SC_PAGESIZE); /* glibc keeps it: no system call */
}

/* The responder's checks of an RDMA access to our memory (IBA 9.7.5.1.3 / C9-*). */
static bool rdma_key_ok(struct sv_qp *qp, uint32_t rkey, uint64_t addr, uint64_t len,
			uint32_t need, uint64_t *va)
{
	if (!(atomic_load_explicit(&qp->page->access, memory_order_relaxed) & need))
		return false;
	return sv_mr_check(qp->rx_dst.ctx->mrs->slots, rkey, qp->rx_dst.pd, need, addr, len, va) ==
	       SV_ACCESS_OK;
}

/* Those checks, and that the memory is there for us to copy (what a NIC's page walk
 * would find). */
static bool rdma_allowed(struct sv_qp *qp, uint32_t rkey, uint64_t addr, uint64_t len,
			 uint32_t need, uint64_t *va)
{
	/* The owner may have unmapped or protected memory it registered, and an on-demand
	 * MR may cover pages never mapped: copying there would fault where a NIC reports a
	 * remote access error. */
	return rdma_key_ok(qp, rkey, addr, len, need, va) &&
	       sv_mem_accessible(*va, len, need != IBV_ACCESS_REMOTE_READ);
}

/* Bounce copy: a piece of an RDMA WRITE, placed by us. */
static enum rx_result rx_write(struct sv_qp *qp, const struct shm_msg *m, uint64_t pos)
{
	struct sv_recv r;
	bool imm = (m->flags & SHM_F_LAST) && (m->flags & SHM_F_IMM);
	uint64_t va = 0;

	if (m->len && !rdma_allowed(qp, m->u.rdma.rkey, m->u.rdma.addr, m->len,
				    IBV_ACCESS_REMOTE_WRITE, &va))
		return refuse(qp, m, IBV_WC_REM_ACCESS_ERR);
	if (imm && !take_recv(qp, &r))
		return sv_qp_type_reliable(qp->ibv.qp_base.qp_type) ? rnr(qp, m) : RX_CONSUMED;
	sv_set_hint(qp->rnr_held, false);
	if (m->len)
		shm_fifo_get(qp->rx, pos, 0, (void *)(uintptr_t)va, m->len);
	count_rx(qp, (m->flags & SHM_F_FIRST) ? 1 : 0, m->len, false);
	if (imm) {
		struct shm_msg done = *m;

		done.op = SHM_OP_WRITE_IMM;
		finish_recv(qp, &r, &done, IBV_WC_SUCCESS, m->aux);
	} else if ((m->flags & SHM_F_LAST) && m->msn) {
		qp->ack_due = m->msn;
		if (!answer(qp, SHM_OP_ACK, m->msn, 0, 0))
			qp->ack_sent = m->msn;
	}
	return RX_CONSUMED;
}

/*
 * A burst of tiny WRITEs, record by record (qp->resp_off counts those placed, should a
 * NAK wait for room). Each is checked as a WRITE of its own: on RC the first refused one
 * is NAKed with its msn and nothing after it executes; on UC it is lost and the rest go
 * on. The burst is acknowledged once, with the fifo batch.
 */
static enum rx_result rx_writes(struct sv_qp *qp, const struct shm_msg *m, uint64_t pos)
{
	uint32_t n = m->aux, first = m->msn - (n - 1);
	uint64_t page = page_size();
	uint64_t ok_lo = 1, ok_hi = 0; /* pages known to be mapped (bursts hit few pages) */

	if ((uint64_t)n * sizeof(struct shm_write_rec) > m->len)
		return refuse(qp, m, IBV_WC_REM_INV_REQ_ERR); /* malformed */
	for (; qp->resp_off < n; qp->resp_off++) {
		struct shm_write_rec r;
		uint64_t va;
		bool ok;

		shm_fifo_get(qp->rx, pos, (uint32_t)qp->resp_off * (uint32_t)sizeof(r), &r,
			     sizeof(r));
		if (r.len > SHM_TINY)
			r.len = SHM_TINY;
		if (!r.len)
			continue; /* IBA 9.4.x: a zero-length WRITE checks no key */
		ok = rdma_key_ok(qp, r.rkey, r.addr, r.len, IBV_ACCESS_REMOTE_WRITE, &va);
		if (ok && (va < ok_lo || va + r.len > ok_hi)) {
			ok = sv_mem_accessible(va, r.len, true);
			ok_lo = va & ~(page - 1);
			ok_hi = ok ? (va + r.len + page - 1) & ~(page - 1) : 0;
		}
		if (!ok) {
			struct shm_msg bad = *m;

			if (!sv_qp_type_reliable(qp->ibv.qp_base.qp_type))
				continue;
			bad.msn = first + (uint32_t)qp->resp_off;
			if (refuse(qp, &bad, IBV_WC_REM_ACCESS_ERR) == RX_HOLD)
				return RX_HOLD;
			qp->resp_off = 0;
			return RX_CONSUMED;
		}
		shm_copy_to_app((void *)(uintptr_t)va, r.data, r.len);
		count_rx(qp, 1, r.len, false);
	}
	qp->resp_off = 0;
	if (m->msn)
		qp->ack_due = m->msn;
	return RX_CONSUMED;
}

/* Bounce copy: an RDMA READ, answered in pieces (qp->resp_off keeps the place). */
static enum rx_result rx_read(struct sv_qp *qp, const struct shm_msg *m)
{
	uint64_t va = 0;

	if (!qp->peer)
		return RX_CONSUMED;
	if (m->len && !rdma_allowed(qp, m->u.rdma.rkey, m->u.rdma.addr, m->len,
				    IBV_ACCESS_REMOTE_READ, &va))
		return refuse(qp, m, IBV_WC_REM_ACCESS_ERR);
	do {
		uint64_t n = m->len - qp->resp_off < SV_CHUNK ? m->len - qp->resp_off : SV_CHUNK;
		struct shm_msg r = { .op = SHM_OP_READ_RESP, .msn = m->msn, .len = (uint32_t)n,
				     .src_qpn = qp->ibv.qp_base.qp_num };

		r.u.rdma.addr = qp->resp_off;
		if (qp->resp_off + n == m->len)
			r.flags = SHM_F_LAST;
		if (sv_put_msg(qp->peer, &r, (void *)(uintptr_t)(va + qp->resp_off), NULL, 0,
			       (uint32_t)n))
			return RX_HOLD;
		qp->resp_off += n;
	} while (qp->resp_off < m->len);
	count_rx(qp, 1, m->len, false);
	qp->resp_off = 0;
	qp->ack_due = qp->ack_sent = m->msn; /* the last piece answers it */
	return RX_CONSUMED;
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

/* Executes an atomic on our memory for the requester (IBA 9.4.5, IBV_ATOMIC_HCA). */
static enum rx_result rx_atomic(struct sv_qp *qp, const struct shm_msg *m)
{
	uint64_t va, orig;
	enum sv_access_result a;

	if (!qp->peer)
		return RX_CONSUMED;
	a = sv_mr_check(qp->rx_dst.ctx->mrs->slots, m->u.atomic.rkey, qp->rx_dst.pd,
			IBV_ACCESS_REMOTE_ATOMIC, m->u.atomic.addr, 8, &va);
	if (!(atomic_load_explicit(&qp->page->access, memory_order_relaxed) & IBV_ACCESS_REMOTE_ATOMIC))
		a = SV_ACCESS_NO_RIGHT;
	if (a == SV_ACCESS_OK && (m->u.atomic.addr & 7)) {
		if (answer(qp, SHM_OP_NAK, m->msn, IBV_WC_REM_INV_REQ_ERR, 0))
			return RX_HOLD;
		sv_qp_fail(qp, IBV_EVENT_QP_REQ_ERR);
		return RX_CONSUMED;
	}
	/* The page must still be there, writable: the owner may have unmapped or protected
	 * it, or an on-demand MR never had it (no crash). */
	if (a == SV_ACCESS_OK && !sv_mem_accessible(va, 8, true))
		a = SV_ACCESS_OUT_OF_RANGE;
	if (a != SV_ACCESS_OK) {
		if (answer(qp, SHM_OP_NAK, m->msn, IBV_WC_REM_ACCESS_ERR, 0))
			return RX_HOLD;
		sv_qp_fail(qp, IBV_EVENT_QP_ACCESS_ERR);
		return RX_CONSUMED;
	}
	/* Room for the answer first: an atomic is executed exactly once. */
	{
		struct shm_msg resp = { .op = SHM_OP_ATOMIC_RESP, .msn = m->msn,
					.src_qpn = qp->ibv.qp_base.qp_num };
		uint64_t rpos;
		uint64_t *p = (uint64_t *)(uintptr_t)va;

		if (shm_fifo_reserve(qp->peer->fifo, 1, &qp->peer->cached_head, &rpos))
			return RX_HOLD;
		orig = sv_resp_atomic_app(p, m->flags & SHM_F_CMP_SWP, m->u.atomic.compare_add,
					  m->u.atomic.swap);
		resp.u.atomic_value = orig;
		resp.nslots = 1;
		memcpy(shm_fifo_slot(qp->peer->fifo, rpos)->hdr, &resp, sizeof(resp));
		if (shm_fifo_publish(qp->peer->fifo, rpos))
			sv_engine_wake_peer(qp->peer);
	}
	count_rx(qp, 1, 8, false);
	qp->ack_due = m->msn;
	qp->ack_sent = m->msn; /* the response acknowledges it */
	return RX_CONSUMED;
}

/* A one-sided operation of the peer is executed here: the progress thread is to keep
 * moving this QP even while the application polls (see polled_since, sv_engine.c). */
static void note_placed(struct sv_qp *qp)
{
	atomic_store_explicit(&qp->placed_look,
			      atomic_load_explicit(&sv_engine_look, memory_order_relaxed),
			      memory_order_relaxed);
}

static enum rx_result rx_request(struct sv_qp *qp, const struct shm_msg *m, uint64_t pos)
{
	if (m->op == SHM_OP_WRITE || m->op == SHM_OP_WRITES || m->op == SHM_OP_READ_REQ ||
	    m->op == SHM_OP_ATOMIC)
		note_placed(qp);
	switch (m->op) {
	case SHM_OP_SEND:
		return rx_send(qp, m, pos);
	case SHM_OP_WRITE_IMM:
		return rx_write_imm(qp, m);
	case SHM_OP_WRITE:
		return rx_write(qp, m, pos);
	case SHM_OP_WRITES:
		return rx_writes(qp, m, pos);
	case SHM_OP_READ_REQ:
		return rx_read(qp, m);
	case SHM_OP_ATOMIC:
		return rx_atomic(qp, m);
	default:
		return RX_CONSUMED;
	}
}

/*
 * An XRC target places each request through the XRC SRQ the request names, which must
 * be one of its domain's (IBA 11.2.x, the XRCETH): that SRQ's queue, CQ, key table and
 * PD. The domain stays read-locked while the message is placed, so the SRQ cannot go.
 */
static enum rx_result rx_xrc(struct sv_qp *qp, const struct shm_msg *m, uint64_t pos)
{
	struct sv_xrc_domain *dom = qp->xrcd->dom;
	enum rx_result r;
	struct sv_srq *srq;

	sv_xrc_domain_rdlock(dom);
	srq = sv_xrc_domain_find(dom, m->xrc_srqn);
	if (!srq) {
		sv_xrc_domain_unlock(dom);
		sv_dbg("qp %u: request names srq %u, not in the domain", qp->ibv.qp_base.qp_num,
		       m->xrc_srqn);
		qp->rx_active = false;
		return refuse(qp, m, IBV_WC_REM_INV_REQ_ERR);
	}
	qp->rx_dst = (struct sv_rx_dst){
		.srq = srq,
		.wq = &srq->rq,
		.cq = srq->cq,
		.ctx = to_svctx(srq->ibv.context),
		.pd = srq->pd->handle,
	};
	r = rx_request(qp, m, pos);
	qp->rx_dst.srq = NULL;
	sv_xrc_domain_unlock(dom);
	return r;
}

static enum rx_result rx_one(struct sv_qp *qp, const struct shm_msg *m, uint64_t pos)
{
	/* An error being entered, then the published state (modify_qp may change it while we
	 * consume): in this order, as sv_qp_settle_locked publishes ERR before it clears the
	 * pending error, so that one of the two always shows. */
	bool failing = atomic_load(&qp->err_event) >= 0;
	enum ibv_qp_state st = atomic_load_explicit(&qp->page->state, memory_order_acquire);

	switch (m->op) {
	case SHM_OP_ACK:
	case SHM_OP_ATOMIC_RESP:
	case SHM_OP_READ_RESP:
	case SHM_OP_NAK:
	case SHM_OP_RNR:
		if (st == IBV_QPS_RTS || st == IBV_QPS_SQD)
			sv_req_answer(qp, m, pos);
		return RX_CONSUMED;
	case SHM_OP_ACCESS_ERR:
		if (st != IBV_QPS_ERR)
			sv_qp_fail(qp, IBV_EVENT_QP_ACCESS_ERR);
		return RX_CONSUMED;
	default:
		break;
	}
	/* Requests: a QP before RTR holds them (a NIC would drop them and the requester
	 * retransmit); a QP in error drops them. */
	if (st == IBV_QPS_RESET || st == IBV_QPS_INIT)
		return RX_HOLD;
	if (st == IBV_QPS_ERR || failing)
		return RX_CONSUMED;
	if (qp->ibv.qp_base.qp_type != IBV_QPT_UD && m->src_qpn != qp->attr.dest_qp_num)
		return RX_CONSUMED; /* not from the QP we are connected to */
	if (sv_qp_type_reliable(qp->ibv.qp_base.qp_type)) {
		uint32_t ab = atomic_load_explicit(&qp->page->rnr_abandon, memory_order_acquire);

		/* The requester gave up on this one after RNR retries: never accepted. */
		if (ab && sv_msn_le(ab, m->msn)) {
			sv_set_hint(qp->rnr_held, false);
			qp->rx_active = false;
			return RX_CONSUMED;
		}
	}
	return qp->xrcd ? rx_xrc(qp, m, pos) : rx_request(qp, m, pos);
}

/* ---------------------------------------------------------------------------------------- */
/* copy assist (shm_assist.h): the responder's half                                          */

/* The requester's buffers named by the job, checked against its key table and the PD of
 * its QP (the helper copies only what the requester registered). */
static bool assist_theirs(struct sv_peer *peer, struct shm_assist *a, uint32_t n_sge, bool write,
			  struct iovec *iov, int *n_iov)
{
	uint32_t pd = atomic_load_explicit(&peer->page->pd, memory_order_relaxed);

	*n_iov = 0;
	for (uint32_t i = 0; i < n_sge; i++) {
		uint64_t addr = atomic_load_explicit(&a->sge[i].addr, memory_order_relaxed);
		uint64_t len_key = atomic_load_explicit(&a->sge[i].len_key, memory_order_relaxed);
		uint32_t len = (uint32_t)(len_key >> 32);
		uint64_t va;

		if (!len)
			continue;
		if (sv_mr_check(peer->mrs, (uint32_t)len_key, pd, write ? 0 : IBV_ACCESS_LOCAL_WRITE,
				addr, len, &va) != SV_ACCESS_OK)
			return false;
		iov[*n_iov].iov_base = (void *)(uintptr_t)va;
		iov[*n_iov].iov_len = len;
		(*n_iov)++;
	}
	return true;
}

/* Copies chunk @i of the job on our page: false if a check or the copy fails. */
static bool assist_chunk(struct sv_qp *qp, struct sv_peer *peer, struct shm_assist *a, uint32_t i)
{
	uint64_t op = atomic_load_explicit(&a->op, memory_order_relaxed);
	uint64_t len = atomic_load_explicit(&a->len, memory_order_relaxed);
	uint64_t addr = atomic_load_explicit(&a->addr, memory_order_relaxed);
	uint64_t off = (uint64_t)i * SHM_ASSIST_CHUNK, n, va;
	bool write = op & SHM_ASSIST_WRITE;
	uint32_t n_sge = op & 0xff;
	struct iovec theirs[SHM_ASSIST_SGE], part[SHM_ASSIST_SGE], ours;
	ssize_t done;
	int k;

	if (len > (1ull << 31) || off >= len || n_sge > SHM_ASSIST_SGE)
		return false;
	n = len - off < SHM_ASSIST_CHUNK ? len - off : SHM_ASSIST_CHUNK;
	if (!rdma_key_ok(qp, (uint32_t)(op >> 32), addr + off, n,
			 write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ, &va) ||
	    !assist_theirs(peer, a, n_sge, write, theirs, &k))
		return false;
	k = sv_iov_slice(theirs, k, off, n, part);
	ours.iov_base = (void *)(uintptr_t)va;
	ours.iov_len = n;
	/*
	 * Into our memory through the kernel: a range unmapped since is EFAULT, not a fault.
	 * By syscall(2), as a NIC's DMA: the data lands unseen by a sanitizer's interceptor,
	 * like the requester's own copies (the application orders its accesses by the
	 * requester's completion, in another process).
	 */
	done = syscall(write ? SYS_process_vm_readv : SYS_process_vm_writev, peer->pid, &ours,
		       1ul, part, (unsigned long)k, 0ul);
	return done == (ssize_t)n;
}

static bool assist_possible(struct sv_qp *qp)
{
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;

	return qp->peer && qp->peer->cma && (type == IBV_QPT_RC || type == IBV_QPT_UC) &&
	       sv_qp_state_receives(atomic_load_explicit(&qp->page->state, memory_order_relaxed));
}

int sv_qp_assist(struct sv_qp *qp)
{
	struct shm_assist *a;
	uint64_t c;
	bool able;
	int n = 0;

	if (!qp->seg || !shm_assist_pending(&qp->page->assist) || !sv_assist_on() ||
	    atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		return 0;
	/* qp->peer stays while we hold rx_busy. A job we cannot help with is still taken,
	 * as failed: its requester copies it, and we do not look at it again. */
	a = &qp->page->assist;
	able = assist_possible(qp);
	sv_mr_place_begin();
	while (n < 0x10000 && shm_assist_take_back(a, &c)) {
		uint32_t job = shm_assist_job(c);

		if (!able || !assist_chunk(qp, qp->peer, a, shm_assist_back(c) - 1))
			atomic_store_explicit(&a->failed, job, memory_order_relaxed);
		shm_assist_count(a, job);
		n++;
	}
	sv_mr_place_end();
	atomic_flag_clear_explicit(&qp->rx_busy, memory_order_release);
	return n;
}

/* Whether handling @op copies into or out of registered memory (sv_mr_place_begin):
 * everything but the bare answers and notifications. */
static bool op_places(uint8_t op)
{
	return op != SHM_OP_ACK && op != SHM_OP_NAK && op != SHM_OP_RNR &&
	       op != SHM_OP_WRITE_IMM && op != SHM_OP_ACCESS_ERR;
}

int sv_resp_rx(struct sv_qp *qp)
{
	struct shm_slot *s;
	uint64_t pos;
	bool placing = false;
	int n = 0;

	if (sv_hint(qp->rx_poisoned) ||
	    atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		return 0;
	while (n < SV_RX_BUDGET && (s = shm_fifo_peek(qp->rx, &pos))) {
		struct shm_msg m;

		memcpy(&m, s->hdr, sizeof(m));
		if (!sv_msg_slots(&m)) {
			/* Nothing after it can be found: the fifo is closed until RESET. */
			sv_dbg("qp %u: a message of %u slots from the peer: protocol error",
			       qp->ibv.qp_base.qp_num, m.nslots);
			sv_set_hint(qp->rx_poisoned, true);
			sv_qp_fail(qp, IBV_EVENT_QP_FATAL);
			break;
		}
		if (!placing && op_places(m.op)) {
			sv_mr_place_begin(); /* a deregistration waits for what follows */
			placing = true;
		}
		if (rx_one(qp, &m, pos) == RX_HOLD)
			break;
		shm_fifo_release(qp->rx, m.nslots);
		n++;
	}
	if (placing)
		sv_mr_place_end();
	/* An acknowledgement that found the requester's fifo full goes now (cumulative). */
	if (qp->ack_due != qp->ack_sent && !answer(qp, SHM_OP_ACK, qp->ack_due, 0, 0))
		qp->ack_sent = qp->ack_due;
	atomic_flag_clear_explicit(&qp->rx_busy, memory_order_release);
	return n;
}
