/*
 * A QP's data path as a whole: set-up on its wire, the side effects of state changes
 * (connect at RTR, flush at Error, drain at RESET), errors entered later with the QP's
 * lock (settle), and progress: what arrived, blocked transmits, timers.
 */
#include "core/sv_qp_data.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/sv_cq.h"
#include "core/sv_path.h"
#include "core/sv_look.h"
#include "core/sv_mcast.h"
#include "util/sv_lock.h"
#include "util/sv_log.h"

int sv_qp_data_init(struct sv_qp *qp, const struct sv_wire_ops *wire,
		     const struct sv_wire_ops *far)
{
	uint32_t qpn = 0;
	int err;

	qp->wire = wire;
	/* An XRC target has no PD: requests name an SRQ, whose PD applies (sv_resp.c). */
	if (qp->pd)
		qp->rx_dst = (struct sv_rx_dst){
			.srq = qp->srq,
			.wq = qp->srq ? &qp->srq->rq : &qp->rq,
			.cq = qp->rcq,
			.ctx = sv_qp_ctx(qp),
			.pd = qp->pd->handle,
		};
	atomic_flag_clear(&qp->rx_busy);
	atomic_init(&qp->err_event, SV_ERR_NONE);
	/* From here peers can find the QP: everything they read is set above. */
	err = wire->qp_init(qp, &qpn);
	if (err)
		return err;
	qp->ibv.qp_base.qp_num = qpn;
	qp->ibv.qp_base.handle = qpn;
	/* A UD QP reaches other hosts through its far wire, with the same number. Without
	 * it (its port taken, no socket) it still reaches the QPs of its host. */
	if (far) {
		err = far->qp_take(qp, qpn);
		if (!err) {
			qp->far = far;
		} else {
			static _Atomic bool told;

			if (!atomic_exchange(&told, true))
				sv_warn("qp %u: no %s wire (%s): it reaches this host's QPs only",
					qpn, far->name, strerror(-err));
		}
	}
	return 0;
}

void sv_qp_sq_lock_unclaimed(struct sv_qp *qp)
{
	sv_spin_lock(&qp->sq.lock);
	/* Bounded: the claimer copies one WQE's data (or gives up on a helper in time). */
	while (qp->tx_claimed) {
		sv_spin_unlock(&qp->sq.lock);
		sched_yield();
		sv_spin_lock(&qp->sq.lock);
	}
}

static void drop_peers(struct sv_qp *qp)
{
	sv_rx_lock(qp);
	sv_qp_sq_lock_unclaimed(qp);
	if (qp->wire->direct_abandon)
		qp->wire->direct_abandon(qp);
	sv_set_hint(qp->connect_pending, false);
	qp->want_connect = false;
	sv_spin_unlock(&qp->sq.lock);
	sv_rx_unlock(qp);
	qp->wire->disconnect(qp);
}

void sv_qp_data_fini(struct sv_qp *qp)
{
	drop_peers(qp);
	if (qp->far)
		qp->far->qp_fini(qp);
	qp->wire->qp_fini(qp);
	free(qp->atomics_done);
	qp->atomics_done = NULL;
}

void sv_qp_data_publish(struct sv_qp *qp)
{
	struct sv_qp_pub *p = &qp->pub;

	atomic_store(&p->access, qp->attr.qp_access_flags);
	atomic_store(&p->qkey, qp->attr.qkey);
	atomic_store(&p->min_rnr_timer, qp->attr.min_rnr_timer);
	atomic_store(&p->dest_qpn, qp->attr.dest_qp_num);
	atomic_store(&p->pkey, sv_qp_pkey(qp));
	atomic_store(&p->rd_in, qp->attr.max_dest_rd_atomic);
	atomic_store(&p->rd_out, qp->attr.max_rd_atomic);
	atomic_store(&p->state, qp->attr.qp_state);
	qp->wire->publish(qp);
	if (qp->far)
		qp->far->publish(qp);
}

/* ---------------------------------------------------------------------------------------- */
/* state changes, flush                                                                     */

void sv_qp_flush_sq_locked(struct sv_qp *qp)
{
	struct sv_wq *wq = &qp->sq;

	for (; wq->tail != wq->head; wq->tail++) {
		struct sv_send_wqe *wqe = sv_wq_slot(wq, wq->tail);
		struct ibv_wc wc = {
			.wr_id = wqe->wr_id,
			.status = IBV_WC_WR_FLUSH_ERR,
			.opcode = sv_wc_opcode_of(wqe->opcode),
			.qp_num = qp->ibv.qp_base.qp_num,
		};

		/* An error always completes, signaled or not (IBA 10.8.3.3). */
		sv_cq_push(qp->scq, &wc, false);
	}
	/* A claim under way finds its WQE gone (tx_gen) and gives up its copy itself. */
	if (qp->wire->direct_abandon && !qp->tx_claimed)
		qp->wire->direct_abandon(qp);
	qp->tx_gen++;
	qp->wait_deadline = 0;
	qp->sq_next = wq->head;
	qp->tx_off = 0;
	qp->mc_valid = false;
	qp->want_members = false;
	qp->tx_stopped = false; /* nothing is left to hold back (SQE -> RTS may follow) */
	qp->rd_atomic_out = 0;
	qp->msg_writes_out = 0;
	sv_set_hint(qp->rnr_deadline, 0);
}

void sv_qp_flush_rq_locked(struct sv_qp *qp)
{
	struct sv_wq *wq = &qp->rq;

	for (; wq->tail != wq->head; wq->tail++) {
		struct sv_recv_wqe *wqe = sv_wq_slot(wq, wq->tail);
		struct ibv_wc wc = {
			.wr_id = wqe->wr_id,
			.status = IBV_WC_WR_FLUSH_ERR,
			.opcode = IBV_WC_RECV,
			.qp_num = qp->ibv.qp_base.qp_num,
		};

		sv_cq_push(qp->rcq, &wc, false);
	}
}

/* Not the application's ibv_qp.state: libibverbs writes that field only when a modify
 * carrying IBV_QP_STATE succeeds, or a query reports it (ibv_modify_qp, ibv_query_qp), never
 * when the device moves the QP by itself (to Error, SQE). */
void sv_qp_set_state(struct sv_qp *qp, enum ibv_qp_state state)
{
	/* RTR is published before the attach to the peer (sv_qp_data_state): requests wait
	 * for it. */
	if (state == IBV_QPS_RTR && qp->attr.qp_state != IBV_QPS_RTR &&
	    qp->ibv.qp_base.qp_type != IBV_QPT_UD)
		sv_set_hint(qp->rtr_connecting, true);
	sv_spin_lock(&qp->sq.lock);
	sv_spin_lock(&qp->rq.lock);
	qp->attr.qp_state = state;
	sv_spin_unlock(&qp->rq.lock);
	sv_spin_unlock(&qp->sq.lock);
	atomic_store(&qp->pub.state, state);
	qp->wire->publish(qp);
}

static void qp_drain(struct sv_qp *qp)
{
	sv_spin_lock(&qp->sq.lock);
	sv_wq_reset(&qp->sq);
	qp->tx_gen++;
	qp->wait_deadline = 0;
	qp->sq_next = 0;
	qp->tx_off = 0;
	qp->mc_valid = false;
	qp->want_members = false;
	qp->tx_stopped = false;
	qp->sq_failed = false;
	qp->msg_writes_out = 0;
	qp->next_msn = 0;
	qp->rd_atomic_out = 0;
	sv_set_hint(qp->rnr_deadline, 0);
	sv_set_hint(qp->ack_deadline, 0);
	sv_set_hint(qp->resend_at, 0);
	sv_set_hint(qp->tx_blocked, false);
	sv_set_hint(qp->tx_kick, false);
	sv_spin_unlock(&qp->sq.lock);
	sv_spin_lock(&qp->rq.lock);
	sv_wq_reset(&qp->rq);
	sv_spin_unlock(&qp->rq.lock);
	if (qp->scq)
		sv_cq_clean(qp->scq, qp->ibv.qp_base.qp_num);
	if (qp->rcq && qp->rcq != qp->scq)
		sv_cq_clean(qp->rcq, qp->ibv.qp_base.qp_num);
}

/* What was sent to the QP before RESET is gone, and the responder starts afresh. */
static void rx_discard(struct sv_qp *qp)
{
	sv_rx_lock(qp);
	qp->wire->discard(qp);
	if (qp->far)
		qp->far->discard(qp);
	sv_resp_reset(qp);
	sv_rx_unlock(qp);
}

static void qp_connect(struct sv_qp *qp)
{
	uint32_t qpn = qp->attr.dest_qp_num;
	void *conn = NULL;
	int err;

	err = qp->wire->connect(qp, qpn, &conn);
	sv_rx_lock(qp);
	sv_spin_lock(&qp->sq.lock);
	conn = qp->wire->attach(qp, qpn, conn, err);
	/* Not there (yet): sends will find out (RETRY_EXC_ERR). */
	sv_set_hint(qp->connect_pending, err != 0);
	sv_set_hint(qp->rtr_connecting, false);
	sv_spin_unlock(&qp->sq.lock);
	sv_rx_unlock(qp);
	if (conn)
		qp->wire->release(qp, conn);
	if (err)
		sv_dbg("qp %u: peer qp %u not found (%d)", qp->ibv.qp_base.qp_num, qpn, err);
}

void sv_qp_data_state(struct sv_qp *qp, enum ibv_qp_state cur, enum ibv_qp_state next)
{
	struct sv_context *ctx = sv_qp_ctx(qp);
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;

	sv_qp_data_publish(qp);
	if (next == cur)
		return;
	switch (next) {
	case IBV_QPS_RESET:
		drop_peers(qp);
		qp_drain(qp);
		rx_discard(qp);
		break;
	case IBV_QPS_RTR:
		if (type != IBV_QPT_UD && qp->wire->reach(qp, qp->attr.dest_qp_num) ==
						  SV_REACH_NO_PEER)
			qp_connect(qp);
		sv_set_hint(qp->rtr_connecting, false);
		break;
	case IBV_QPS_ERR:
		sv_spin_lock(&qp->sq.lock);
		sv_qp_flush_sq_locked(qp);
		sv_spin_unlock(&qp->sq.lock);
		/* A receive a SEND in segments had begun to fill is flushed first (it left the
		 * queue when its first segment came). */
		sv_rx_lock(qp);
		if (qp->rx_active && qp->rx_dst.cq) {
			struct ibv_wc wc = {
				.wr_id = qp->rx_recv.wr_id,
				.status = IBV_WC_WR_FLUSH_ERR,
				.opcode = IBV_WC_RECV,
				.qp_num = qp->ibv.qp_base.qp_num,
			};

			qp->rx_active = false;
			sv_cq_push(qp->rx_dst.cq, &wc, false);
		}
		sv_rx_unlock(qp);
		sv_spin_lock(&qp->rq.lock);
		sv_qp_flush_rq_locked(qp);
		sv_spin_unlock(&qp->rq.lock);
		/* The peer learns that we left; its outstanding work then fails. */
		drop_peers(qp);
		/* IBA 10.3.1: a QP on an SRQ that enters Error reports Last WQE Reached. */
		if (qp->srq)
			sv_async_raise(ctx, IBV_EVENT_QP_LAST_WQE_REACHED, &qp->ibv.qp_base);
		break;
	case IBV_QPS_RTS:
		/* The retries a lossy wire's requester has (sv_comp.c), full at every
		 * answer that moves it on. */
		sv_spin_lock(&qp->sq.lock);
		qp->retry_left = qp->attr.retry_cnt;
		qp->rnr_left = qp->attr.rnr_retry;
		sv_spin_unlock(&qp->sq.lock);
		break;
	case IBV_QPS_SQD:
		/* Drained when nothing transmitted waits for an answer. */
		if (qp->attr.en_sqd_async_notify && sv_wq_count(&qp->sq) == 0)
			sv_async_raise(ctx, IBV_EVENT_SQ_DRAINED, &qp->ibv.qp_base);
		break;
	default:
		break;
	}
}

void sv_qp_settle_locked(struct sv_qp *qp)
{
	int err = atomic_load(&qp->err_event);
	enum ibv_qp_state cur = qp->attr.qp_state;

	if (err == SV_ERR_NONE)
		return;
	if (err == SV_ERR_SQE) {
		/* Only the send queue stops; receives go on. SQE -> RTS recovers. */
		if (cur == IBV_QPS_RTS || cur == IBV_QPS_SQD) {
			sv_qp_set_state(qp, IBV_QPS_SQE);
			sv_spin_lock(&qp->sq.lock);
			sv_qp_flush_sq_locked(qp);
			sv_spin_unlock(&qp->sq.lock);
		}
	} else if (cur != IBV_QPS_ERR && cur != IBV_QPS_RESET) {
		sv_qp_set_state(qp, IBV_QPS_ERR);
		sv_qp_data_state(qp, cur, IBV_QPS_ERR);
		if (err & 0x10000)
			sv_async_raise(sv_qp_ctx(qp), (enum ibv_event_type)(err & 0xffff),
				       &qp->ibv.qp_base);
		sv_dbg("qp %u %s -> ERR (0x%x)", qp->ibv.qp_base.qp_num, sv_qp_state_name[cur], err);
	}
	/*
	 * Cleared only once the new state is published: a responder consuming on another
	 * thread that finds it clear then finds the state (sv_resp_deliver reads them in
	 * that order). Cleared first, a request after a refused one could find neither, be
	 * executed and acknowledged (test_tiny_writes_with_a_bad_rkey_midway: a WRITE after
	 * the refused one completed successfully). An error asked for meanwhile stays
	 * pending.
	 */
	atomic_compare_exchange_strong(&qp->err_event, &err, SV_ERR_NONE);
}

void sv_qp_settle(struct sv_qp *qp)
{
	if (atomic_load_explicit(&qp->err_event, memory_order_relaxed) == SV_ERR_NONE)
		return;
	/*
	 * Never wait for the lock: its holder may be waiting for our progress thread. The
	 * error stays pending until a later pass, or the holder (ibv_modify_qp settles it
	 * first, or drops it on a move to RESET) — never re-raised after that holder.
	 */
	if (pthread_mutex_trylock(&qp->lock))
		return;
	sv_qp_settle_locked(qp);
	pthread_mutex_unlock(&qp->lock);
}

/* ---------------------------------------------------------------------------------------- */
/* multicast membership                                                                     */

/* A member on this host (the QP's wire) and, where the QP has a far wire, for the
 * group's senders on other hosts too. */
int sv_mcast_attach(struct sv_qp *qp, const union ibv_gid *mgid, int ifindex)
{
	int err;

	if (qp->ibv.qp_base.qp_type != IBV_QPT_UD || !sv_gid_is_multicast(mgid))
		return -EINVAL;
	if (!qp->wire->mcast_attach)
		return -EOPNOTSUPP;
	err = qp->wire->mcast_attach(qp, mgid, ifindex);
	if (!err && qp->far && qp->far->mcast_attach) {
		err = qp->far->mcast_attach(qp, mgid, ifindex);
		if (err)
			(void)qp->wire->mcast_detach(qp, mgid);
	}
	return err;
}

int sv_mcast_detach(struct sv_qp *qp, const union ibv_gid *mgid)
{
	int err = qp->wire->mcast_detach ? qp->wire->mcast_detach(qp, mgid) : -EINVAL;

	if (!err && qp->far && qp->far->mcast_detach)
		(void)qp->far->mcast_detach(qp, mgid);
	return err;
}

int sv_mcast_count(struct sv_qp *qp)
{
	return qp->wire->mcast_count ? qp->wire->mcast_count(qp) : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* QP1                                                                                      */

int sv_qp_set_gsi(struct sv_qp *qp, bool on)
{
	int err;

	if (qp->ibv.qp_base.qp_type != IBV_QPT_UD)
		return -EINVAL;
	if (!qp->far || !qp->far->gsi)
		return -ENODEV;
	err = qp->far->gsi(qp, on);
	if (!err) {
		sv_spin_lock(&qp->sq.lock);
		qp->gsi = on;
		sv_spin_unlock(&qp->sq.lock);
	}
	return err;
}

int sv_qp_cm_listen(struct sv_qp *qp, uint64_t service_id, bool on)
{
	if (!qp->gsi || !qp->far || !qp->far->cm_listen)
		return -ENODEV;
	return qp->far->cm_listen(qp, service_id, on);
}

/* ---------------------------------------------------------------------------------------- */
/* progress                                                                                 */

int sv_qp_progress(struct sv_qp *qp)
{
	int n = qp->wire->poll(qp) + (qp->far ? qp->far->poll(qp) : 0);

	if (qp->wire->timers)
		n += qp->wire->timers(qp);
	if ((sv_hint(qp->tx_blocked) || sv_hint(qp->tx_kick) || sv_hint(qp->rnr_deadline) ||
	     sv_hint(qp->connect_pending) || sv_hint(qp->ack_deadline) || sv_hint(qp->resend_at)) &&
	    sv_spin_trylock(&qp->sq.lock)) {
		uint32_t sent = qp->sq_next;
		bool connect;

		n += sv_comp_timers(qp);
		if (sv_hint(qp->tx_blocked) || sv_hint(qp->tx_kick))
			sv_qp_tx_locked(qp);
		n += qp->sq_next != sent; /* what waited went: work (the thread looks again) */
		connect = sv_qp_tx_wants_connect(qp);
		sv_spin_unlock(&qp->sq.lock);
		sv_qp_tx_done(qp);
		if (connect)
			sv_qp_tx_connect(qp);
	}
	if (atomic_load_explicit(&qp->err_event, memory_order_relaxed) != SV_ERR_NONE)
		sv_qp_settle(qp);
	return n;
}

bool sv_qp_recv_awaited(struct sv_qp *qp)
{
	/* A message held for want of a receive may go on now (the sender waits on RNR). */
	return sv_hint(qp->rnr_held);
}

void sv_qp_park(struct sv_qp *qp)
{
	if (qp->wire->park)
		qp->wire->park(qp);
	if (qp->far && qp->far->park)
		qp->far->park(qp);
}

bool sv_qp_arm(struct sv_qp *qp, bool assist)
{
	if (sv_hint(qp->rnr_held))
		return true; /* what waits there needs a receive, not us */
	if (sv_hint(qp->tx_kick))
		return false;
	return qp->wire->arm(qp, assist) && (!qp->far || qp->far->arm(qp, assist));
}

bool sv_qp_needs_timer(struct sv_qp *qp)
{
	return sv_hint(qp->tx_blocked) || sv_hint(qp->rnr_deadline) || sv_hint(qp->hold_until) ||
	       sv_hint(qp->connect_pending) || sv_hint(qp->tx_kick) ||
	       sv_hint(qp->ack_deadline) || sv_hint(qp->resend_at) ||
	       (qp->wire->needs_timer && qp->wire->needs_timer(qp)) ||
	       atomic_load_explicit(&qp->err_event, memory_order_relaxed) != SV_ERR_NONE;
}

/* ---------------------------------------------------------------------------------------- */
/* the poll path                                                                             */

/*
 * A poller waiting for @qp's answers also moves its peer when that peer is a QP of this
 * process: a NIC answers without its application's help, and one process driving both
 * ends may poll this end before the other (rdma-core's own tests do). A peer in another
 * process is moved by its own pollers or progress thread.
 */
static void move_local_peer(struct sv_qp *qp)
{
	struct sv_qp *peer;

	if (!qp->wire->local_peer || !(peer = qp->wire->local_peer(qp)))
		return;
	sv_qp_progress(peer);
	atomic_fetch_sub_explicit(&peer->eng_ref, 1, memory_order_release);
}

void sv_cq_wait_fds(struct sv_cq *cq, int *fds, int *n, int max)
{
	sv_spin_lock(&cq->qps_lock);
	for (int i = 0; i < cq->n_qps && *n < max; i++) {
		struct sv_qp *qp = cq->qps[i];
		int fd = qp->wire->wait_fd ? qp->wire->wait_fd(qp) : -1, k = 0;

		while (k < *n && fds[k] != fd)
			k++;
		if (fd >= 0 && k == *n)
			fds[(*n)++] = fd;
	}
	sv_spin_unlock(&cq->qps_lock);
}

bool sv_cq_progress(struct sv_cq *cq)
{
	struct sv_qp *pinned[16];
	uint32_t look = atomic_load_explicit(&sv_engine_look, memory_order_relaxed);
	int start = 0, total;
	bool blocked = false;

	/* Every QP of the CQ, 16 at a time (pinned while the list's lock is not held). */
	do {
		int n = 0;

		sv_spin_lock(&cq->qps_lock);
		total = cq->n_qps;
		for (int i = start; i < total && n < 16; i++) {
			pinned[n] = cq->qps[i];
			atomic_fetch_add_explicit(&pinned[n]->eng_ref, 1, memory_order_relaxed);
			n++;
		}
		sv_spin_unlock(&cq->qps_lock);
		for (int i = 0; i < n; i++) {
			atomic_store_explicit(&pinned[i]->polled_look, look, memory_order_relaxed);
			sv_qp_progress(pinned[i]);
			move_local_peer(pinned[i]);
			blocked |= sv_hint(pinned[i]->tx_blocked);
			atomic_fetch_sub_explicit(&pinned[i]->eng_ref, 1, memory_order_release);
		}
		start += n;
		if (!n)
			break;
	} while (start < total);
	return blocked;
}
