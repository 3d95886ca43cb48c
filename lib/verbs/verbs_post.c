/*
 * Posting work: ibv_post_send / ibv_post_recv / the ibv_wr_* builder, and the flush
 * that completes outstanding work with IBV_WC_WR_FLUSH_ERR.
 *
 * The QP state that posting depends on is read under the work queue's lock; modify_qp
 * writes it under the same locks (sv_qp_set_state), so a WR posted concurrently with a
 * move to ERR is either flushed by the move or flushes itself.
 */
#include <string.h>

#include "core/sv_engine.h"
#include "core/sv_qp_data.h"
#include "verbs.h"

/* --- post_send ---------------------------------------------------------------------------- */

static bool opcode_allowed(enum ibv_qp_type type, enum ibv_wr_opcode op)
{
	bool rc = type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND;

	if (type == IBV_QPT_XRC_RECV)
		return false; /* an XRC target has no send queue */
	switch (op) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return true;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return rc || type == IBV_QPT_UC;
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_BIND_MW:
	case IBV_WR_LOCAL_INV:
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_ATOMIC_WRITE:
		return rc;
	default:
		return false; /* TSO, driver opcodes: not offered */
	}
}

static bool is_atomic(uint32_t op)
{
	return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

/* States in which the send queue accepts work (IBA 10.8.2: not before RTS). */
static bool sq_open(enum ibv_qp_state s)
{
	return s == IBV_QPS_RTS || s == IBV_QPS_SQD || s == IBV_QPS_SQE || s == IBV_QPS_ERR;
}

static bool sq_flushing(enum ibv_qp_state s)
{
	return s == IBV_QPS_ERR || s == IBV_QPS_SQE;
}

static void ud_dest_from_ah(struct sv_ud_dest *d, struct ibv_ah *ibah, uint32_t qpn, uint32_t qkey)
{
	const struct ibv_ah_attr *a = &to_svah(ibah)->attr;

	d->dgid = a->grh.dgid;
	d->sgid_index = a->grh.sgid_index;
	d->dlid = a->dlid;
	d->is_global = a->is_global;
	d->sl = a->sl;
	d->remote_qpn = qpn;
	d->remote_qkey = qkey;
}

/* Checks @wr and writes it into the next free slot. Caller holds sq.lock. 0 or errno. */
static int write_send_wqe(struct sv_qp *qp, const struct ibv_send_wr *wr)
{
	struct sv_wq *wq = &qp->sq;
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	struct sv_send_wqe *wqe;
	uint64_t total = 0;

	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > wq->max_sge)
		return EINVAL;
	/* Atomic write has its 8 bytes in the builder's call only (ibv_wr_atomic_write). */
	if (!opcode_allowed(type, wr->opcode) || wr->opcode == IBV_WR_ATOMIC_WRITE)
		return EINVAL;
	for (int i = 0; i < wr->num_sge; i++)
		total += wr->sg_list[i].length;
	if (total > SV_MAX_MSG_SZ)
		return EINVAL;
	if ((wr->send_flags & IBV_SEND_INLINE) && total > wq->max_inline)
		return EINVAL;
	/* An atomic operand is 8 bytes at an 8-byte aligned address (IBA 9.4.5). */
	if (is_atomic(wr->opcode) && (total != 8 || (wr->wr.atomic.remote_addr & 7)))
		return EINVAL;
	if (type == IBV_QPT_UD &&
	    (!wr->wr.ud.ah || wr->wr.ud.ah->pd->context != qp->ibv.qp_base.context))
		return EINVAL;
	if (sv_wq_count(wq) >= wq->max_wr)
		return ENOMEM;

	wqe = sv_wq_slot(wq, wq->head);
	wqe->wr_id = wr->wr_id;
	wqe->opcode = wr->opcode;
	wqe->send_flags = wr->send_flags;
	wqe->imm_data = wr->imm_data;
	wqe->inline_len = 0;
	wqe->state = SV_WQE_POSTED;
	wqe->byte_len = 0;
	wqe->num_sge = (uint32_t)wr->num_sge;
	wqe->xrc_srqn = type == IBV_QPT_XRC_SEND ? wr->qp_type.xrc.remote_srqn : 0;
	if (wr->opcode == IBV_WR_BIND_MW) {
		/* Bound at transmit (sv_req.c): range, access, the MR's lkey and the
		 * window's current key, for its slot. */
		const struct ibv_mw_bind_info *b = &wr->bind_mw.bind_info;

		if (!wr->bind_mw.mw || wr->bind_mw.mw->context != qp->ibv.qp_base.context)
			return EINVAL;
		wqe->remote_addr = b->addr;
		wqe->compare_add = b->length;
		wqe->rkey = wr->bind_mw.rkey;
		wqe->imm_data = b->mw_access_flags;
		wqe->swap = (uint64_t)(b->mr ? b->mr->lkey : 0) << 32 | wr->bind_mw.mw->rkey;
		wqe->num_sge = 0;
	} else if (is_atomic(wr->opcode)) {
		wqe->remote_addr = wr->wr.atomic.remote_addr;
		wqe->rkey = wr->wr.atomic.rkey;
		wqe->compare_add = wr->wr.atomic.compare_add;
		wqe->swap = wr->wr.atomic.swap;
	} else if (type == IBV_QPT_UD) {
		ud_dest_from_ah(&wqe->ud, wr->wr.ud.ah, wr->wr.ud.remote_qpn, wr->wr.ud.remote_qkey);
	} else {
		wqe->remote_addr = wr->wr.rdma.remote_addr;
		wqe->rkey = wr->wr.rdma.rkey;
	}
	if (wr->send_flags & IBV_SEND_INLINE) {
		/* Inline data is copied now: the buffer is the caller's again on return. */
		unsigned char *dst = sv_send_wqe_inline(wqe, wq);

		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(dst + wqe->inline_len, (void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			wqe->inline_len += wr->sg_list[i].length;
		}
		wqe->num_sge = 0;
	} else if (wr->num_sge) {
		memcpy(wqe->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(struct ibv_sge));
	}
	wq->head++;
	return 0;
}

/*
 * After a post's transmit, sq.lock dropped: the system calls the wire put off, a first
 * contact with a destination (@connect), an error found meanwhile. A transmit left
 * waiting for room is the progress thread's to retry from here on: the application may
 * sleep on its channel now (sv_engine_blocked).
 */
static void post_done(struct sv_qp *qp, bool connect)
{
	/* An idle QP the progress thread left out of its passes comes back: what the post
	 * started may need it (a timer, a transmit waiting for room). */
	sv_engine_wake_qp(qp);
	sv_qp_tx_done(qp);
	if (connect)
		sv_qp_tx_connect(qp);
	if (atomic_load_explicit(&qp->tx_blocked, memory_order_relaxed))
		sv_engine_blocked();
	sv_qp_settle(qp);
}

int sv_verbs_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct sv_qp *qp = to_svqp(ibqp);
	bool connect;
	int err = 0;

	sv_spin_lock(&qp->sq.lock);
	if (!sq_open(qp->attr.qp_state))
		err = EINVAL;
	for (; wr && !err; wr = err ? wr : wr->next)
		err = write_send_wqe(qp, wr);
	if (sq_flushing(qp->attr.qp_state))
		sv_qp_flush_sq_locked(qp);
	else
		sv_qp_tx_locked(qp);
	connect = sv_qp_tx_wants_connect(qp);
	sv_spin_unlock(&qp->sq.lock);
	post_done(qp, connect);
	if (err && bad)
		*bad = wr;
	return err;
}

/* --- post_recv / post_srq_recv --------------------------------------------------------------- */

/* Checks a receive WR against a queue's limits: 0 or a positive errno. */
static int check_recv_wr(const struct sv_wq *wq, const struct ibv_recv_wr *wr)
{
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > wq->max_sge)
		return EINVAL;
	if (sv_wq_count(wq) >= wq->max_wr)
		return ENOMEM;
	return 0;
}

/* Writes @wr into the next free slot of @wq. Caller holds wq->lock and has checked it. */
static void write_recv_wqe(struct sv_wq *wq, const struct ibv_recv_wr *wr)
{
	struct sv_recv_wqe *wqe = sv_wq_slot(wq, wq->head);

	wqe->wr_id = wr->wr_id;
	wqe->num_sge = (uint32_t)wr->num_sge;
	if (wr->num_sge)
		memcpy(wqe->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(struct ibv_sge));
	wq->head++;
}

int sv_verbs_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sv_qp *qp = to_svqp(ibqp);
	int err = 0;

	sv_spin_lock(&qp->rq.lock);
	/* A QP on an SRQ has no receive queue of its own, nor has either end of XRC (the
	 * target's receives are its domain's SRQs); none exists before INIT. */
	if (qp->srq || ibqp->qp_type == IBV_QPT_XRC_SEND || ibqp->qp_type == IBV_QPT_XRC_RECV ||
	    qp->attr.qp_state == IBV_QPS_RESET)
		err = EINVAL;
	for (; wr && !err; wr = err ? wr : wr->next) {
		err = check_recv_wr(&qp->rq, wr);
		if (!err)
			write_recv_wqe(&qp->rq, wr);
	}
	if (qp->attr.qp_state == IBV_QPS_ERR)
		sv_qp_flush_rq_locked(qp);
	sv_spin_unlock(&qp->rq.lock);
	sv_engine_wake_qp(qp); /* (an idle QP comes back into the progress thread's passes) */
	/* A message held for want of a receive may go on now: wake the progress thread (a
	 * system call only in this case: the sender is waiting on RNR). */
	if (sv_qp_recv_awaited(qp))
		sv_engine_kick();
	if (err && bad)
		*bad = wr;
	return err;
}

int sv_verbs_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
			   struct ibv_recv_wr **bad)
{
	struct sv_srq *srq = to_svsrq(ibsrq);
	int err = 0;

	sv_spin_lock(&srq->rq.lock);
	for (; wr && !err; wr = err ? wr : wr->next) {
		err = check_recv_wr(&srq->rq, wr);
		if (!err)
			write_recv_wqe(&srq->rq, wr);
	}
	sv_spin_unlock(&srq->rq.lock);
	/* A QP held a message for want of a receive here: let it go on. */
	if (atomic_exchange(&srq->rnr_waiting, 0))
		sv_engine_kick();
	if (err && bad)
		*bad = wr;
	return err;
}

/* --- the ibv_wr_* builder (ibv_qp_ex) ------------------------------------------------------
 * wr_start takes the send queue lock; each ibv_wr_<op> opens a WQE past the published
 * head; the setters fill it; wr_complete publishes them all or, after any error,
 * none. The first error is kept and returned by wr_complete.
 */

static void wr_fail(struct sv_qp *qp, int err)
{
	if (!qp->wr_err)
		qp->wr_err = err;
}

static struct sv_send_wqe *wr_open(struct ibv_qp_ex *qpx, uint32_t opcode)
{
	struct sv_qp *qp = to_svqp_ex(qpx);
	struct sv_wq *wq = &qp->sq;
	struct sv_send_wqe *wqe;

	qp->wr_cur = NULL;
	if (qp->wr_err)
		return NULL;
	if (!opcode_allowed(qpx->qp_base.qp_type, opcode)) {
		wr_fail(qp, EINVAL);
		return NULL;
	}
	if (sv_wq_count(wq) + qp->wr_pending >= wq->max_wr) {
		wr_fail(qp, ENOMEM);
		return NULL;
	}
	wqe = sv_wq_slot(wq, wq->head + qp->wr_pending);
	memset(wqe, 0, sizeof(*wqe)); /* state SV_WQE_POSTED */
	wqe->wr_id = qpx->wr_id;
	wqe->opcode = opcode;
	wqe->send_flags = qpx->wr_flags;
	qp->wr_pending++;
	qp->wr_cur = wqe;
	return wqe;
}

static void wr_start(struct ibv_qp_ex *qpx)
{
	struct sv_qp *qp = to_svqp_ex(qpx);

	sv_spin_lock(&qp->sq.lock);
	qp->wr_pending = 0;
	qp->wr_err = 0;
	qp->wr_cur = NULL;
}

static int wr_complete(struct ibv_qp_ex *qpx)
{
	struct sv_qp *qp = to_svqp_ex(qpx);
	int err = qp->wr_err;
	bool connect;

	if (!err && !sq_open(qp->attr.qp_state))
		err = EINVAL;
	if (!err) {
		/* An atomic needs its 8-byte operand; checked once the SGE is known. */
		for (uint32_t i = 0; i < qp->wr_pending && !err; i++) {
			struct sv_send_wqe *w = sv_wq_slot(&qp->sq, qp->sq.head + i);

			if (is_atomic(w->opcode) &&
			    (w->num_sge != 1 || w->sge[0].length != 8 || (w->remote_addr & 7)))
				err = EINVAL;
		}
	}
	if (!err)
		qp->sq.head += qp->wr_pending;
	qp->wr_pending = 0;
	qp->wr_cur = NULL;
	if (!err && sq_flushing(qp->attr.qp_state))
		sv_qp_flush_sq_locked(qp);
	else if (!err)
		sv_qp_tx_locked(qp);
	connect = sv_qp_tx_wants_connect(qp);
	sv_spin_unlock(&qp->sq.lock);
	post_done(qp, connect);
	return err;
}

static void wr_abort(struct ibv_qp_ex *qpx)
{
	struct sv_qp *qp = to_svqp_ex(qpx);

	qp->wr_pending = 0;
	qp->wr_cur = NULL;
	sv_spin_unlock(&qp->sq.lock);
}

static void wr_send(struct ibv_qp_ex *qpx)
{
	wr_open(qpx, IBV_WR_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
	struct sv_send_wqe *w = wr_open(qpx, IBV_WR_SEND_WITH_IMM);

	if (w)
		w->imm_data = imm;
}

static void wr_rdma(struct ibv_qp_ex *qpx, uint32_t op, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct sv_send_wqe *w = wr_open(qpx, op);

	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
		w->imm_data = imm;
	}
}

static void wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	wr_rdma(qpx, IBV_WR_RDMA_WRITE, rkey, addr, 0);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, __be32 imm)
{
	wr_rdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm);
}

static void wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	wr_rdma(qpx, IBV_WR_RDMA_READ, rkey, addr, 0);
}

static void wr_atomic(struct ibv_qp_ex *qpx, uint32_t op, uint32_t rkey, uint64_t addr,
		      uint64_t compare_add, uint64_t swap)
{
	struct sv_send_wqe *w = wr_open(qpx, op);

	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
		w->compare_add = compare_add;
		w->swap = swap;
	}
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr,
			      uint64_t compare, uint64_t swap)
{
	wr_atomic(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, compare, swap);
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr,
				uint64_t add)
{
	wr_atomic(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0);
}

static void wr_set_sge_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_sge *list)
{
	struct sv_qp *qp = to_svqp_ex(qpx);
	struct sv_send_wqe *w = qp->wr_cur;
	uint64_t total = 0;

	if (!w)
		return;
	if (n > qp->sq.max_sge) {
		wr_fail(qp, EINVAL);
		return;
	}
	for (size_t i = 0; i < n; i++)
		total += list[i].length;
	if (total > SV_MAX_MSG_SZ) {
		wr_fail(qp, EINVAL);
		return;
	}
	memcpy(w->sge, list, n * sizeof(*list));
	w->num_sge = (uint32_t)n;
}

static void wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge sge = { .addr = addr, .length = length, .lkey = lkey };

	wr_set_sge_list(qpx, 1, &sge);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t n,
				    const struct ibv_data_buf *bufs)
{
	struct sv_qp *qp = to_svqp_ex(qpx);
	struct sv_send_wqe *w = qp->wr_cur;
	unsigned char *dst;
	size_t total = 0;

	if (!w)
		return;
	for (size_t i = 0; i < n; i++)
		total += bufs[i].length;
	if (total > qp->sq.max_inline) {
		wr_fail(qp, EINVAL);
		return;
	}
	dst = sv_send_wqe_inline(w, &qp->sq);
	w->inline_len = 0;
	for (size_t i = 0; i < n; i++) {
		memcpy(dst + w->inline_len, bufs[i].addr, bufs[i].length);
		w->inline_len += (uint32_t)bufs[i].length;
	}
	w->num_sge = 0;
	w->send_flags |= IBV_SEND_INLINE;
}

static void wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	wr_set_inline_data_list(qpx, 1, &buf);
}

static void wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct sv_qp *qp = to_svqp_ex(qpx);

	if (!qp->wr_cur)
		return;
	if (!ah || qpx->qp_base.qp_type != IBV_QPT_UD) {
		wr_fail(qp, EINVAL);
		return;
	}
	ud_dest_from_ah(&qp->wr_cur->ud, ah, qpn, qkey);
}

/* Operations softverbs does not offer: the WR batch fails at wr_complete. */
static void wr_unsupported(struct ibv_qp_ex *qpx)
{
	wr_fail(to_svqp_ex(qpx), EOPNOTSUPP);
}
/* Memory windows through the builder: the same WQEs as ibv_post_send makes. */
static void wr_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey,
		       const struct ibv_mw_bind_info *info)
{
	struct sv_send_wqe *w;

	if (!mw || !info || mw->context != q->qp_base.context) {
		wr_fail(to_svqp_ex(q), EINVAL);
		return;
	}
	w = wr_open(q, IBV_WR_BIND_MW);
	if (!w)
		return;
	w->remote_addr = info->addr;
	w->compare_add = info->length;
	w->rkey = rkey;
	w->imm_data = info->mw_access_flags;
	w->swap = (uint64_t)(info->mr ? info->mr->lkey : 0) << 32 | mw->rkey;
}

static void wr_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct sv_send_wqe *w = wr_open(q, IBV_WR_LOCAL_INV);

	if (w)
		w->imm_data = rkey;
}

static void wr_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct sv_send_wqe *w = wr_open(q, IBV_WR_SEND_WITH_INV);

	if (w)
		w->imm_data = rkey;
}
static void wr_send_tso(struct ibv_qp_ex *q, void *hdr, uint16_t sz, uint16_t mss)
{
	(void)hdr, (void)sz, (void)mss;
	wr_unsupported(q);
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t srqn)
{
	struct sv_qp *qp = to_svqp_ex(qpx);

	if (!qp->wr_cur)
		return;
	if (qpx->qp_base.qp_type != IBV_QPT_XRC_SEND) {
		wr_fail(qp, EINVAL);
		return;
	}
	qp->wr_cur->xrc_srqn = srqn;
}

/* IBA 1.5 RDMA Atomic Write: 8 bytes, to an 8-byte aligned remote address, at once. */
static void wr_atomic_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, const void *wr)
{
	struct sv_send_wqe *w;

	if (!wr || (addr & 7)) {
		wr_fail(to_svqp_ex(q), EINVAL);
		return;
	}
	w = wr_open(q, IBV_WR_ATOMIC_WRITE);
	if (!w)
		return;
	w->rkey = rkey;
	w->remote_addr = addr;
	memcpy(&w->compare_add, wr, 8);
}

void sv_verbs_qp_ex_init(struct sv_qp *qp)
{
	struct ibv_qp_ex *x = &qp->ibv;

	/* The inlines call these without checking: every pointer is set. */
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_local_inv = wr_local_inv;
	x->wr_send_inv = wr_send_inv;
	x->wr_send_tso = wr_send_tso;
	x->wr_set_xrc_srqn = wr_set_xrc_srqn;
	x->wr_atomic_write = wr_atomic_write;
}
