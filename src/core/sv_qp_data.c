#include "core/sv_qp_priv.h"

#include <endian.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/sv_cq.h"
#include "core/sv_engine.h"
#include "core/sv_qp_table.h"
#include "util/sv_log.h"

/* ---------------------------------------------------------------------------------------- */
/* segment                                                                                 */

int sv_qp_data_init(struct sv_qp *qp)
{
	qp->seg_len = SHM_QP_SEG_SIZE;
	qp->seg_fd = memfd_create("softverbs-qp", MFD_CLOEXEC);
	if (qp->seg_fd < 0)
		return -errno;
	if (ftruncate(qp->seg_fd, (off_t)qp->seg_len))
		goto err;
	qp->seg = mmap(NULL, qp->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, qp->seg_fd, 0);
	if (qp->seg == MAP_FAILED)
		goto err;
	qp->page = qp->seg;
	qp->rx = (struct shm_fifo *)((char *)qp->seg + SHM_QP_PAGE_SIZE);
	shm_fifo_init(qp->rx);
	/* Born armed: the progress thread may be asleep with every fifo it knew armed, and a
	 * producer in this very process attaches without a socket that would wake it. The
	 * first message wakes it once; it then counts this QP among its own. */
	(void)shm_fifo_arm(qp->rx);
	qp->page->magic = SHM_QP_PAGE_MAGIC;
	qp->page->pid = getpid();
	qp->page->qp_type = qp->ibv.qp_base.qp_type;
	/* An XRC target has no PD: requests name an SRQ, whose PD applies (sv_resp.c). */
	atomic_store(&qp->page->pd, qp->pd ? qp->pd->handle : 0);
	if (qp->pd)
		qp->rx_dst = (struct sv_rx_dst){
			.srq = qp->srq,
			.wq = qp->srq ? &qp->srq->rq : &qp->rq,
			.cq = qp->rcq,
			.ctx = sv_qp_ctx(qp),
			.pd = qp->pd->handle,
		};
	atomic_flag_clear(&qp->rx_busy);
	atomic_init(&qp->err_event, -1);
	return 0;
err:
	close(qp->seg_fd);
	qp->seg = NULL;
	return -ENOMEM;
}

static void drop_peers(struct sv_qp *qp)
{
	struct sv_peer *peer;
	struct sv_ud_dests *d;

	sv_rx_lock(qp);
	sv_spin_lock(&qp->sq.lock);
	sv_req_assist_abandon(qp);
	peer = qp->peer;
	qp->peer = NULL;
	sv_set_hint(qp->peer_local, false);
	sv_set_hint(qp->connect_pending, false);
	qp->want_connect = false;
	qp->ud_unreachable_valid = false;
	atomic_store(&qp->peer_left, false);
	d = qp->ud_dests;
	qp->ud_dests = NULL;
	pthread_spin_unlock(&qp->sq.lock);
	sv_rx_unlock(qp);
	sv_engine_disconnect(peer);
	if (d) {
		for (int i = 0; i < d->n; i++)
			sv_engine_disconnect(d->peer[i]);
		free(d);
	}
}

void sv_qp_data_fini(struct sv_qp *qp)
{
	drop_peers(qp);
	if (qp->seg) {
		munmap(qp->seg, qp->seg_len);
		close(qp->seg_fd);
		qp->seg = NULL;
	}
}

void sv_qp_data_publish(struct sv_qp *qp)
{
	struct shm_qp_page *p = qp->page;

	atomic_store(&p->qpn, qp->ibv.qp_base.qp_num);
	atomic_store(&p->access, qp->attr.qp_access_flags);
	atomic_store(&p->qkey, qp->attr.qkey);
	atomic_store(&p->min_rnr_timer, qp->attr.min_rnr_timer);
	atomic_store(&p->dest_qpn, qp->attr.dest_qp_num);
	atomic_store(&p->pkey, sv_qp_pkey(qp));
	atomic_store(&p->state, qp->attr.qp_state);
}

/* ---------------------------------------------------------------------------------------- */
/* state changes, flush                                                                     */

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
	sv_req_assist_abandon(qp);
	qp->sq_next = wq->head;
	qp->tx_off = 0;
	qp->mc_valid = false;
	qp->tx_stopped = false; /* nothing is left to hold back (SQE -> RTS may follow) */
	qp->rd_atomic_out = 0;
	qp->fifo_writes_out = 0;
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

void sv_qp_set_state(struct sv_qp *qp, enum ibv_qp_state state)
{
	sv_spin_lock(&qp->sq.lock);
	sv_spin_lock(&qp->rq.lock);
	qp->attr.qp_state = state;
	qp->ibv.qp_base.state = state;
	pthread_spin_unlock(&qp->rq.lock);
	pthread_spin_unlock(&qp->sq.lock);
	atomic_store(&qp->page->state, state);
}

static void qp_drain(struct sv_qp *qp)
{
	sv_spin_lock(&qp->sq.lock);
	sv_wq_reset(&qp->sq);
	qp->sq_next = 0;
	qp->tx_off = 0;
	qp->mc_valid = false;
	qp->tx_stopped = false;
	qp->sq_failed = false;
	qp->fifo_writes_out = 0;
	qp->next_msn = 0;
	qp->rd_atomic_out = 0;
	sv_set_hint(qp->rnr_deadline, 0);
	sv_set_hint(qp->tx_blocked, false);
	pthread_spin_unlock(&qp->sq.lock);
	sv_spin_lock(&qp->rq.lock);
	sv_wq_reset(&qp->rq);
	pthread_spin_unlock(&qp->rq.lock);
	if (qp->scq)
		sv_cq_clean(qp->scq, qp->ibv.qp_base.qp_num);
	if (qp->rcq && qp->rcq != qp->scq)
		sv_cq_clean(qp->rcq, qp->ibv.qp_base.qp_num);
}

/* Empties our inbound fifo: what was sent to the QP before RESET is gone. */
static void rx_discard(struct sv_qp *qp)
{
	struct shm_slot *s;
	uint64_t pos;

	while (atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		sched_yield();
	/* Bounded: a peer that keeps publishing does not hold us here. */
	for (uint32_t i = 0; i < 2 * SHM_FIFO_SLOTS && (s = shm_fifo_peek(qp->rx, &pos)); i++) {
		uint32_t n = sv_msg_slots((const struct shm_msg *)s->hdr);

		shm_fifo_release(qp->rx, n ? n : 1);
	}
	qp->ack_due = qp->ack_sent = 0;
	sv_set_hint(qp->rnr_held, false);
	sv_set_hint(qp->rx_poisoned, false);
	qp->rnr_told = 0;
	qp->rx_active = false;
	qp->resp_off = 0;
	atomic_flag_clear_explicit(&qp->rx_busy, memory_order_release);
}

static void qp_connect(struct sv_qp *qp)
{
	struct sv_peer *peer = NULL;
	int err;

	err = sv_engine_connect(qp, qp->attr.dest_qp_num, &peer);
	sv_rx_lock(qp);
	sv_spin_lock(&qp->sq.lock);
	if (!err) {
		qp->peer = peer;
		sv_set_hint(qp->peer_local, peer->sock < 0);
		sv_set_hint(qp->connect_pending, false);
	} else {
		/* Not on this host (yet): sends will find out (RETRY_EXC_ERR). */
		sv_set_hint(qp->connect_pending, true);
		sv_dbg("qp %u: peer qp %u not found (%d)", qp->ibv.qp_base.qp_num,
		       qp->attr.dest_qp_num, err);
	}
	pthread_spin_unlock(&qp->sq.lock);
	sv_rx_unlock(qp);
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
		atomic_store(&qp->page->rnr_abandon, 0);
		if (type != IBV_QPT_UD && !qp->peer)
			qp_connect(qp);
		break;
	case IBV_QPS_ERR:
		sv_spin_lock(&qp->sq.lock);
		sv_qp_flush_sq_locked(qp);
		pthread_spin_unlock(&qp->sq.lock);
		sv_spin_lock(&qp->rq.lock);
		sv_qp_flush_rq_locked(qp);
		pthread_spin_unlock(&qp->rq.lock);
		/* The peer learns from our goodbye; its outstanding work then fails. */
		drop_peers(qp);
		/* IBA 10.3.1: a QP on an SRQ that enters Error reports Last WQE Reached. */
		if (qp->srq)
			sv_async_raise(ctx, IBV_EVENT_QP_LAST_WQE_REACHED, &qp->ibv.qp_base);
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
	int ev = atomic_load(&qp->err_event);
	enum ibv_qp_state cur = qp->attr.qp_state;

	if (ev < 0)
		return;
	if (ev == SV_ERR_TO_SQE) {
		/* Only the send queue stops; receives go on. SQE -> RTS recovers. */
		if (cur == IBV_QPS_RTS || cur == IBV_QPS_SQD) {
			sv_qp_set_state(qp, IBV_QPS_SQE);
			sv_spin_lock(&qp->sq.lock);
			sv_qp_flush_sq_locked(qp);
			pthread_spin_unlock(&qp->sq.lock);
		}
	} else if (cur != IBV_QPS_ERR && cur != IBV_QPS_RESET) {
		sv_qp_set_state(qp, IBV_QPS_ERR);
		sv_qp_data_state(qp, cur, IBV_QPS_ERR);
		if (ev != SV_ERR_NO_EVENT)
			sv_async_raise(sv_qp_ctx(qp), (enum ibv_event_type)ev, &qp->ibv.qp_base);
		sv_dbg("qp %u %s -> ERR (event %d)", qp->ibv.qp_base.qp_num, sv_qp_state_name[cur], ev);
	}
	/*
	 * Cleared only once the new state is published: a responder consuming on another
	 * thread that finds it clear then finds the state (rx_one reads them in that order).
	 * Cleared first, a request after a refused one could find neither, be executed and
	 * acknowledged (test_tiny_writes_with_a_bad_rkey_midway: a WRITE after the refused
	 * one completed successfully). An error asked for meanwhile stays pending.
	 */
	atomic_compare_exchange_strong(&qp->err_event, &ev, -1);
}

void sv_qp_settle(struct sv_qp *qp)
{
	if (atomic_load_explicit(&qp->err_event, memory_order_relaxed) < 0)
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
/* progress                                                                                 */

static int peer_left(struct sv_qp *qp);

int sv_qp_progress(struct sv_qp *qp)
{
	int n = sv_resp_rx(qp);

	if (atomic_load_explicit(&qp->peer_left, memory_order_relaxed))
		n += peer_left(qp);
	if ((sv_hint(qp->tx_blocked) || sv_hint(qp->rnr_deadline) ||
	     sv_hint(qp->connect_pending)) && !pthread_spin_trylock(&qp->sq.lock)) {
		bool connect;

		n += sv_req_timers(qp);
		if (sv_hint(qp->tx_blocked))
			sv_qp_tx_locked(qp);
		connect = qp->want_connect;
		pthread_spin_unlock(&qp->sq.lock);
		if (connect)
			sv_qp_tx_connect(qp);
	}
	if (atomic_load_explicit(&qp->err_event, memory_order_relaxed) >= 0)
		sv_qp_settle(qp);
	return n;
}

void sv_qp_recv_posted(struct sv_qp *qp)
{
	/* A message held for want of a receive may go on now; wake the progress thread
	 * (a system call only in this case: the sender is waiting on RNR). */
	if (sv_hint(qp->rnr_held))
		sv_engine_kick();
}

bool sv_qp_arm(struct sv_qp *qp, bool assist)
{
	if (sv_hint(qp->rnr_held) || sv_hint(qp->rx_poisoned) || !qp->seg)
		return true; /* what waits there needs a receive (or a RESET), not us */
	if (!shm_fifo_arm(qp->rx))
		return false;
	/* A copy-assist job posted before we armed (shm_fifo_take_armed's other half). */
	if (assist && shm_assist_pending(&qp->page->assist) && sv_assist_on()) {
		shm_fifo_disarm(qp->rx);
		return false;
	}
	return true;
}

void sv_qp_disarm(struct sv_qp *qp)
{
	if (qp->seg)
		shm_fifo_disarm(qp->rx);
}

bool sv_qp_needs_timer(struct sv_qp *qp)
{
	return sv_hint(qp->tx_blocked) || sv_hint(qp->rnr_deadline) ||
	       sv_hint(qp->connect_pending) ||
	       atomic_load_explicit(&qp->peer_left, memory_order_relaxed) ||
	       atomic_load_explicit(&qp->err_event, memory_order_relaxed) >= 0;
}

void sv_qp_peer_lost(struct sv_qp *qp, uint32_t peer_qpn, bool fatal)
{
	bool ours;

	uint32_t st = atomic_load(&qp->page->state);

	/* Read from the published page, without the QP's lock: the engine never waits for
	 * it. The QP may have moved on to another peer meanwhile. */
	ours = qp->ibv.qp_base.qp_type != IBV_QPT_UD && atomic_load(&qp->page->dest_qpn) == peer_qpn &&
	       (st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD);
	if (!ours)
		return;
	sv_dbg("qp %u: peer qp %u %s", qp->ibv.qp_base.qp_num, peer_qpn,
	       fatal ? "died" : "went away");
	if (fatal) {
		/* A dead peer is fatal: async QP_FATAL, everything outstanding flushed. */
		sv_qp_fail(qp, IBV_EVENT_QP_FATAL);
		return;
	}
	/* A peer that left (destroyed or reset its QP) does not touch our QP, as on a NIC:
	 * once what it sent before leaving is handled, work waiting for it fails as if the
	 * retries ran out (sv_qp_progress). */
	atomic_store(&qp->peer_left, true);
}

/* The peer left: once its last messages are handled, let go of it. */
static int peer_left(struct sv_qp *qp)
{
	struct sv_peer *gone = NULL;
	uint64_t pos;

	if (atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		return 0;
	if (!shm_fifo_peek(qp->rx, &pos) && !pthread_spin_trylock(&qp->sq.lock)) {
		sv_req_assist_abandon(qp);
		gone = qp->peer;
		qp->peer = NULL;
		sv_set_hint(qp->peer_local, false);
		atomic_store(&qp->peer_left, false);
		/* What still waits for an answer will never get one (IBA 9.7.5.1.1). */
		sv_req_fail_waiting(qp, IBV_WC_RETRY_EXC_ERR);
		pthread_spin_unlock(&qp->sq.lock);
	}
	atomic_flag_clear_explicit(&qp->rx_busy, memory_order_release);
	sv_engine_disconnect(gone);
	return gone != NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* the poll path                                                                             */

int sv_cq_attach_qp(struct sv_cq *cq, struct sv_qp *qp)
{
	int err = 0;

	sv_spin_lock(&cq->qps_lock);
	if (cq->n_qps == cq->cap_qps) {
		int cap = cq->cap_qps ? 2 * cq->cap_qps : 4;
		struct sv_qp **q = realloc(cq->qps, (size_t)cap * sizeof(*q));

		if (q) {
			cq->qps = q;
			cq->cap_qps = cap;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err)
		cq->qps[cq->n_qps++] = qp;
	pthread_spin_unlock(&cq->qps_lock);
	return err;
}

void sv_cq_detach_qp(struct sv_cq *cq, struct sv_qp *qp)
{
	sv_spin_lock(&cq->qps_lock);
	for (int i = 0; i < cq->n_qps; i++) {
		if (cq->qps[i] == qp) {
			cq->qps[i] = cq->qps[--cq->n_qps];
			break;
		}
	}
	pthread_spin_unlock(&cq->qps_lock);
}

/*
 * A poller waiting for @qp's answers also moves its peer when that peer is a QP of this
 * process: a NIC answers without its application's help, and one process driving both
 * ends may poll this end before the other (rdma-core's own tests do). A peer in another
 * process is moved by its own pollers or progress thread.
 */
static void move_local_peer(struct sv_qp *qp)
{
	struct sv_qp *peer;
	uint32_t qpn = 0;

	/* The flag is a hint; the lock confirms (and nothing waits for it). */
	if (!sv_hint(qp->peer_local) || pthread_spin_trylock(&qp->sq.lock))
		return;
	if (qp->peer && qp->peer->sock < 0 && qp->sq.tail != qp->sq_next)
		qpn = qp->peer->qpn;
	pthread_spin_unlock(&qp->sq.lock);
	if (!qpn || !(peer = sv_engine_pin_qp(qpn)))
		return;
	sv_qp_progress(peer);
	sv_engine_unpin_qp(peer);
}

void sv_cq_progress(struct sv_cq *cq)
{
	struct sv_qp *pinned[16];
	uint32_t look = atomic_load_explicit(&sv_engine_look, memory_order_relaxed);
	int start = 0, total;

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
		pthread_spin_unlock(&cq->qps_lock);
		for (int i = 0; i < n; i++) {
			atomic_store_explicit(&pinned[i]->polled_look, look, memory_order_relaxed);
			sv_qp_progress(pinned[i]);
			move_local_peer(pinned[i]);
			atomic_fetch_sub_explicit(&pinned[i]->eng_ref, 1, memory_order_release);
		}
		start += n;
		if (!n)
			break;
	} while (start < total);
}
