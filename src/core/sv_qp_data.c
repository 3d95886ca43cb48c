#include "core/sv_qp_data.h"

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

enum {
	SV_FIFO_SLOTS = 2048,      /* 128 KiB of inbound fifo per QP */
	SV_INLINE_MAX = 8192,      /* larger SENDs: the responder pulls them (CMA) */
	SV_UD_GRH = 40,
	SV_UD_MAX_DESTS = 64,
	SV_RX_BUDGET = 64,
	SV_IOV_MAX = 64,
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* msn order with wrap-around. */
static bool msn_le(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) <= 0;
}

static struct sv_context *qp_ctx(struct sv_qp *qp)
{
	return to_svctx(qp->ibv.qp_base.context);
}

/* Asks for ERR (with async event @ev, or SV_ERR_NO_EVENT) once the locks are released. */
static void qp_fail(struct sv_qp *qp, int ev)
{
	int none = -1;

	atomic_compare_exchange_strong(&qp->err_event, &none, ev);
}

/* ---------------------------------------------------------------------------------------- */
/* segment                                                                                 */

int sv_qp_data_init(struct sv_qp *qp)
{
	qp->seg_len = SHM_QP_PAGE_SIZE + shm_fifo_bytes(SV_FIFO_SLOTS);
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
	shm_fifo_init(qp->rx, SV_FIFO_SLOTS);
	qp->page->magic = SHM_QP_PAGE_MAGIC;
	qp->page->pid = getpid();
	qp->page->qp_type = qp->ibv.qp_base.qp_type;
	atomic_store(&qp->page->pd, qp->pd->handle);
	atomic_flag_clear(&qp->rx_busy);
	atomic_init(&qp->err_event, -1);
	return 0;
err:
	close(qp->seg_fd);
	qp->seg = NULL;
	return -ENOMEM;
}

struct sv_ud_dests {
	int n;
	struct sv_peer *peer[SV_UD_MAX_DESTS];
};

static void drop_peers(struct sv_qp *qp)
{
	struct sv_peer *peer;
	struct sv_ud_dests *d;

	while (atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		sched_yield();
	pthread_spin_lock(&qp->sq.lock);
	peer = qp->peer;
	qp->peer = NULL;
	qp->connect_pending = false;
	atomic_store(&qp->peer_left, false);
	d = qp->ud_dests;
	qp->ud_dests = NULL;
	pthread_spin_unlock(&qp->sq.lock);
	atomic_flag_clear_explicit(&qp->rx_busy, memory_order_release);
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
	atomic_store(&p->state, qp->attr.qp_state);
}

/* ---------------------------------------------------------------------------------------- */
/* state changes, flush                                                                     */

static enum ibv_wc_opcode wc_opcode_of(uint32_t wr_opcode)
{
	switch (wr_opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
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
			.opcode = wc_opcode_of(wqe->opcode),
			.qp_num = qp->ibv.qp_base.qp_num,
		};

		/* An error always completes, signaled or not (IBA 10.8.3.3). */
		sv_cq_push(qp->scq, &wc, false);
	}
	qp->sq_next = wq->head;
	qp->rd_atomic_out = 0;
	qp->rnr_deadline = 0;
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
	pthread_spin_lock(&qp->sq.lock);
	pthread_spin_lock(&qp->rq.lock);
	qp->attr.qp_state = state;
	qp->ibv.qp_base.state = state;
	pthread_spin_unlock(&qp->rq.lock);
	pthread_spin_unlock(&qp->sq.lock);
	atomic_store(&qp->page->state, state);
}

static void qp_drain(struct sv_qp *qp)
{
	pthread_spin_lock(&qp->sq.lock);
	sv_wq_reset(&qp->sq);
	qp->sq_next = 0;
	qp->next_msn = 0;
	qp->rd_atomic_out = 0;
	qp->rnr_deadline = 0;
	qp->tx_blocked = false;
	pthread_spin_unlock(&qp->sq.lock);
	pthread_spin_lock(&qp->rq.lock);
	sv_wq_reset(&qp->rq);
	pthread_spin_unlock(&qp->rq.lock);
	sv_cq_clean(qp->scq, qp->ibv.qp_base.qp_num);
	if (qp->rcq != qp->scq)
		sv_cq_clean(qp->rcq, qp->ibv.qp_base.qp_num);
}

/* Empties our inbound fifo: what was sent to the QP before RESET is gone. */
static void rx_discard(struct sv_qp *qp)
{
	struct shm_slot *s;
	uint64_t pos;

	while (atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		sched_yield();
	while ((s = shm_fifo_peek(qp->rx, &pos)))
		shm_fifo_release(qp->rx, ((struct shm_msg *)s->hdr)->nslots);
	qp->ack_due = qp->ack_sent = 0;
	qp->rnr_held = false;
	qp->rnr_told = 0;
	atomic_flag_clear_explicit(&qp->rx_busy, memory_order_release);
}

static void qp_connect(struct sv_qp *qp)
{
	struct sv_peer *peer = NULL;
	int err;

	err = sv_engine_connect(qp, qp->attr.dest_qp_num, &peer);
	pthread_spin_lock(&qp->sq.lock);
	if (!err) {
		qp->peer = peer;
		qp->connect_pending = false;
	} else {
		/* Not on this host (yet): sends will find out (RETRY_EXC_ERR). */
		qp->connect_pending = true;
		sv_dbg("qp %u: peer qp %u not found (%d)", qp->ibv.qp_base.qp_num,
		       qp->attr.dest_qp_num, err);
	}
	pthread_spin_unlock(&qp->sq.lock);
}

void sv_qp_data_state(struct sv_qp *qp, enum ibv_qp_state cur, enum ibv_qp_state next)
{
	struct sv_context *ctx = qp_ctx(qp);
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
		if (type != IBV_QPT_UD && !qp->peer)
			qp_connect(qp);
		break;
	case IBV_QPS_ERR:
		pthread_spin_lock(&qp->sq.lock);
		sv_qp_flush_sq_locked(qp);
		pthread_spin_unlock(&qp->sq.lock);
		pthread_spin_lock(&qp->rq.lock);
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

void sv_qp_settle(struct sv_qp *qp)
{
	int ev = atomic_exchange(&qp->err_event, -1);
	enum ibv_qp_state cur;

	if (ev < 0)
		return;
	/* Never wait for the lock: its holder may be waiting for our progress thread. */
	if (pthread_mutex_trylock(&qp->lock)) {
		qp_fail(qp, ev);
		return;
	}
	cur = qp->attr.qp_state;
	if (cur != IBV_QPS_ERR && cur != IBV_QPS_RESET) {
		sv_qp_set_state(qp, IBV_QPS_ERR);
		sv_qp_data_state(qp, cur, IBV_QPS_ERR);
		if (ev != SV_ERR_NO_EVENT)
			sv_async_raise(qp_ctx(qp), (enum ibv_event_type)ev, &qp->ibv.qp_base);
		sv_dbg("qp %u %s -> ERR (event %d)", qp->ibv.qp_base.qp_num, sv_qp_state_name[cur], ev);
	}
	pthread_mutex_unlock(&qp->lock);
}

/* ---------------------------------------------------------------------------------------- */
/* requester                                                                                */

/* Where a WQE's data is: SGEs checked against our key table (IBA 10.6.3: lkey, PD, range). */
static enum ibv_wc_status local_iov(struct sv_qp *qp, const struct sv_send_wqe *w, uint32_t need,
				    struct iovec *iov, int *n_iov, uint64_t *total)
{
	const struct sv_mr_entry *slots = qp_ctx(qp)->mrs.slots;

	*n_iov = 0;
	*total = 0;
	for (uint32_t i = 0; i < w->num_sge; i++) {
		const struct ibv_sge *sge = &w->sge[i];
		uint64_t va;

		if (!sge->length)
			continue;
		if (sv_mr_check(slots, sge->lkey, qp->pd->handle, need, sge->addr, sge->length, &va))
			return IBV_WC_LOC_PROT_ERR;
		iov[*n_iov].iov_base = (void *)(uintptr_t)va;
		iov[*n_iov].iov_len = sge->length;
		(*n_iov)++;
		*total += sge->length;
	}
	return IBV_WC_SUCCESS;
}

/* The WQE's data: its inline copy, or its SGEs checked for @need. */
static enum ibv_wc_status wqe_iov(struct sv_qp *qp, struct sv_send_wqe *w, uint32_t need,
				  struct iovec *iov, int *n_iov, uint64_t *total)
{
	if (w->send_flags & IBV_SEND_INLINE) {
		iov[0].iov_base = sv_send_wqe_inline(w, &qp->sq);
		iov[0].iov_len = w->inline_len;
		*n_iov = w->inline_len ? 1 : 0;
		*total = w->inline_len;
		return IBV_WC_SUCCESS;
	}
	return local_iov(qp, w, need, iov, n_iov, total);
}

static bool peer_ready(const struct sv_peer *peer)
{
	uint32_t st = atomic_load_explicit(&peer->page->state, memory_order_acquire);

	return st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD;
}

/* The responder's checks, done by the requester on the peer's published page and keys. */
static enum ibv_wc_status remote_range(const struct sv_peer *peer, uint32_t rkey, uint64_t addr,
				       uint64_t len, uint32_t need, uint64_t *va)
{
	uint32_t pd = atomic_load_explicit(&peer->page->pd, memory_order_relaxed);

	if (!(atomic_load_explicit(&peer->page->access, memory_order_relaxed) & need))
		return IBV_WC_REM_ACCESS_ERR;
	if (sv_mr_check(peer->mrs, rkey, pd, need, addr, len, va) != SV_ACCESS_OK)
		return IBV_WC_REM_ACCESS_ERR;
	return IBV_WC_SUCCESS;
}

/* One copy between our memory and the peer's: process_vm_writev / readv. */
static enum ibv_wc_status cma_copy(pid_t pid, struct iovec *local, int n_local, uint64_t remote,
				   uint64_t len, bool write)
{
	static bool warned;
	uint64_t done = 0;

	while (done < len) {
		struct iovec r = { .iov_base = (void *)(uintptr_t)(remote + done), .iov_len = len - done };
		struct iovec l[SV_IOV_MAX];
		int nl = 0;
		uint64_t skip = done;
		ssize_t n;

		/* The local side from byte `done` on. */
		for (int i = 0; i < n_local; i++) {
			if (skip >= local[i].iov_len) {
				skip -= local[i].iov_len;
				continue;
			}
			l[nl].iov_base = (char *)local[i].iov_base + skip;
			l[nl].iov_len = local[i].iov_len - skip;
			skip = 0;
			nl++;
		}
		n = write ? process_vm_writev(pid, l, (unsigned long)nl, &r, 1, 0)
			  : process_vm_readv(pid, l, (unsigned long)nl, &r, 1, 0);
		if (n <= 0) {
			if (n < 0 && errno == ESRCH)
				return IBV_WC_RETRY_EXC_ERR; /* the peer is gone */
			if (n < 0 && errno == EPERM && !warned) {
				warned = true;
				sv_err("process_vm_%sv refused (EPERM): cross-memory attach is not "
				       "permitted here", write ? "write" : "read");
			}
			return n < 0 && errno == EPERM ? IBV_WC_GENERAL_ERR : IBV_WC_REM_ACCESS_ERR;
		}
		done += (uint64_t)n;
	}
	return IBV_WC_SUCCESS;
}

/* Writes a message into @peer's fifo: header, then @payload (or @iov). -EAGAIN if full. */
static int put_msg(struct sv_peer *peer, struct shm_msg *m, const void *payload,
		   const struct iovec *iov, int n_iov, uint32_t len)
{
	uint32_t n = shm_fifo_slots_for(len);
	struct shm_slot *slot;
	uint64_t pos;

	if (shm_fifo_reserve(peer->fifo, n, &peer->cached_head, &pos))
		return -EAGAIN;
	m->nslots = (uint16_t)n;
	slot = shm_fifo_slot(peer->fifo, pos);
	memcpy(slot->hdr, m, sizeof(*m));
	if (payload) {
		shm_fifo_put(peer->fifo, pos, 0, payload, len);
	} else {
		uint32_t off = 0;

		for (int i = 0; i < n_iov; i++) {
			shm_fifo_put(peer->fifo, pos, off, iov[i].iov_base, (uint32_t)iov[i].iov_len);
			off += (uint32_t)iov[i].iov_len;
		}
	}
	if (shm_fifo_publish(peer->fifo, pos))
		sv_engine_wake_peer(peer);
	return 0;
}

static struct sv_peer *ud_dest(struct sv_qp *qp, uint32_t qpn)
{
	struct sv_ud_dests *d = qp->ud_dests;
	struct sv_peer *peer;

	if (!d) {
		d = calloc(1, sizeof(*d));
		if (!d)
			return NULL;
		qp->ud_dests = d;
	}
	for (int i = 0; i < d->n; i++)
		if (d->peer[i]->qpn == qpn)
			return d->peer[i];
	if (sv_engine_connect(qp, qpn, &peer))
		return NULL;
	if (d->n == SV_UD_MAX_DESTS) {
		/* Forget the oldest destination. */
		sv_engine_disconnect(d->peer[0]);
		memmove(&d->peer[0], &d->peer[1], (SV_UD_MAX_DESTS - 1) * sizeof(d->peer[0]));
		d->n--;
	}
	d->peer[d->n++] = peer;
	return peer;
}

/* The GRH a UD receiver finds in front of the data (IPv6 form; IBA 8.3, RoCE v2 GIDs). */
static void ud_grh(struct sv_qp *qp, const struct sv_send_wqe *w, unsigned char grh[SV_UD_GRH])
{
	struct sv_context *ctx = qp_ctx(qp);
	struct ibv_grh *g = (struct ibv_grh *)grh;
	uint32_t vtf = 6u << 28;

	memset(grh, 0, SV_UD_GRH);
	g->version_tclass_flow = htobe32(vtf);
	g->next_hdr = 17; /* UDP: RoCE v2 */
	g->hop_limit = 64;
	g->sgid = ctx->host.gids[0].gid;
	g->dgid = w->ud.is_global ? w->ud.dgid : ctx->host.gids[0].gid;
}

enum tx_result { TX_DONE, TX_WAIT, TX_BLOCKED };

static void wqe_done(struct sv_send_wqe *w, enum ibv_wc_status status)
{
	w->state = SV_WQE_DONE;
	w->status = (uint8_t)status;
}

static enum tx_result tx_send(struct sv_qp *qp, struct sv_peer *peer, struct sv_send_wqe *w,
			      bool reliable)
{
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	struct shm_msg m = { .src_qpn = qp->ibv.qp_base.qp_num };
	struct iovec iov[SV_IOV_MAX];
	struct shm_rsge rs[SV_IOV_MAX];
	unsigned char grh[SV_UD_GRH];
	enum ibv_wc_status st;
	uint64_t total;
	int n_iov, err;

	st = wqe_iov(qp, w, 0, iov, &n_iov, &total);
	if (st) {
		wqe_done(w, st);
		return TX_DONE;
	}
	m.op = w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? SHM_OP_WRITE_IMM : SHM_OP_SEND;
	m.flags = (w->send_flags & IBV_SEND_SOLICITED) ? SHM_F_SOLICITED : 0;
	if (w->opcode == IBV_WR_SEND_WITH_IMM || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
		m.flags |= SHM_F_IMM;
		m.imm = w->imm_data;
	}
	m.len = (uint32_t)total;
	if (reliable)
		m.msn = qp->next_msn + 1;

	if (m.op == SHM_OP_WRITE_IMM) {
		err = put_msg(peer, &m, NULL, NULL, 0, 0);
	} else if (type == IBV_QPT_UD) {
		/* IBA 9.8.3: Q_Keys with the high bit set mean "use the sender QP's own". */
		m.aux = (w->ud.remote_qkey & 0x80000000u) ? qp->attr.qkey : w->ud.remote_qkey;
		if (total > 4096) { /* one packet of the path MTU (IBA 10.7.2.2) */
			wqe_done(w, IBV_WC_LOC_LEN_ERR);
			return TX_DONE;
		}
		ud_grh(qp, w, grh);
		m.flags |= SHM_F_INLINE | SHM_F_GRH;
		m.len = (uint32_t)total + SV_UD_GRH;
		memmove(&iov[1], &iov[0], (size_t)n_iov * sizeof(iov[0]));
		iov[0].iov_base = grh;
		iov[0].iov_len = SV_UD_GRH;
		err = put_msg(peer, &m, NULL, iov, n_iov + 1, m.len);
	} else if (total <= SV_INLINE_MAX) {
		m.flags |= SHM_F_INLINE;
		err = put_msg(peer, &m, NULL, iov, n_iov, (uint32_t)total);
	} else {
		/* Rendezvous: the responder pulls straight from our buffers. */
		for (int i = 0; i < n_iov; i++) {
			rs[i].addr = (uintptr_t)iov[i].iov_base;
			rs[i].len = iov[i].iov_len;
		}
		m.aux = (uint32_t)n_iov;
		err = put_msg(peer, &m, rs, NULL, 0, (uint32_t)(n_iov * sizeof(rs[0])));
	}
	if (err)
		return TX_BLOCKED;
	if (!reliable) {
		wqe_done(w, IBV_WC_SUCCESS);
		return TX_DONE;
	}
	w->msn = ++qp->next_msn;
	w->state = SV_WQE_WAIT;
	return TX_WAIT;
}

static enum tx_result tx_rdma(struct sv_qp *qp, struct sv_peer *peer, struct sv_send_wqe *w)
{
	bool write = w->opcode != IBV_WR_RDMA_READ;
	uint32_t need = write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
	bool reliable = qp->ibv.qp_base.qp_type == IBV_QPT_RC;
	struct iovec iov[SV_IOV_MAX];
	enum ibv_wc_status st;
	uint64_t total, va = 0;
	int n_iov;

	st = wqe_iov(qp, w, write ? 0 : IBV_ACCESS_LOCAL_WRITE, iov, &n_iov, &total);
	if (st) {
		wqe_done(w, st);
		return TX_DONE;
	}
	if (total) {
		/* IBA 9.4.x: a zero-length RDMA operation checks no key. */
		st = remote_range(peer, w->rkey, w->remote_addr, total, need, &va);
		if (!st)
			st = cma_copy(peer->pid, iov, n_iov, va, total, write);
	}
	if (st) {
		if (!reliable) {
			/* UC has no acknowledgements: a write the responder refuses is lost. */
			wqe_done(w, IBV_WC_SUCCESS);
			return TX_DONE;
		}
		if (st == IBV_WC_REM_ACCESS_ERR) {
			/* The responder's QP enters Error too (IBA C9-*: access violation). */
			struct shm_msg m = { .op = SHM_OP_ACCESS_ERR,
					     .src_qpn = qp->ibv.qp_base.qp_num };

			(void)put_msg(peer, &m, NULL, NULL, 0, 0);
		}
		wqe_done(w, st);
		return TX_DONE;
	}
	w->byte_len = write ? 0 : (uint32_t)total;
	if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		return tx_send(qp, peer, w, reliable);
	wqe_done(w, IBV_WC_SUCCESS);
	return TX_DONE;
}

static enum tx_result tx_atomic(struct sv_qp *qp, struct sv_peer *peer, struct sv_send_wqe *w)
{
	struct shm_msg m = { .op = SHM_OP_ATOMIC, .src_qpn = qp->ibv.qp_base.qp_num };
	uint32_t max = qp->attr.max_rd_atomic ? qp->attr.max_rd_atomic : 1;
	struct iovec iov[SV_IOV_MAX];
	enum ibv_wc_status st;
	uint64_t total;
	int n_iov;

	st = local_iov(qp, w, IBV_ACCESS_LOCAL_WRITE, iov, &n_iov, &total);
	if (st || total != 8) {
		wqe_done(w, st ? st : IBV_WC_LOC_LEN_ERR);
		return TX_DONE;
	}
	/* IBA 9.5: at most max_rd_atomic RDMA READ/atomic requests outstanding. */
	if (qp->rd_atomic_out >= max)
		return TX_BLOCKED;
	m.flags = w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? SHM_F_CMP_SWP : 0;
	m.msn = qp->next_msn + 1;
	m.len = 8;
	m.u.atomic.addr = w->remote_addr;
	m.u.atomic.rkey = w->rkey;
	m.u.atomic.compare_add = w->compare_add;
	m.u.atomic.swap = w->swap;
	if (put_msg(peer, &m, NULL, NULL, 0, 0))
		return TX_BLOCKED;
	w->msn = ++qp->next_msn;
	w->state = SV_WQE_WAIT;
	w->byte_len = 8;
	qp->rd_atomic_out++;
	return TX_WAIT;
}

static enum tx_result tx_one(struct sv_qp *qp, struct sv_send_wqe *w)
{
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	struct sv_peer *peer = qp->peer;

	if (type == IBV_QPT_UD) {
		peer = ud_dest(qp, w->ud.remote_qpn);
		if (!peer) {
			/* UD is unreliable: a datagram to nobody is simply lost. */
			wqe_done(w, IBV_WC_SUCCESS);
			return TX_DONE;
		}
		return tx_send(qp, peer, w, false);
	}
	if (!peer && qp->connect_pending) {
		struct sv_peer *p = NULL;

		if (!sv_engine_connect(qp, qp->attr.dest_qp_num, &p)) {
			qp->peer = peer = p;
			qp->connect_pending = false;
		}
	}
	if (!peer) {
		/* RC: nobody answers, the transport retries run out (IBA 9.7.5.1.1).
		 * UC: nobody acknowledges anything; the message is lost. */
		wqe_done(w, type == IBV_QPT_RC ? IBV_WC_RETRY_EXC_ERR : IBV_WC_SUCCESS);
		return TX_DONE;
	}
	if (!peer_ready(peer))
		return TX_BLOCKED; /* a NIC would retransmit until the peer reaches RTR */
	switch (w->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return tx_send(qp, peer, w, type == IBV_QPT_RC);
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		return tx_rdma(qp, peer, w);
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return tx_atomic(qp, peer, w);
	default:
		wqe_done(w, IBV_WC_LOC_QP_OP_ERR);
		return TX_DONE;
	}
}

/* Reports finished WQEs in order (IBA 10.8: completions in the order posted). */
static void complete_locked(struct sv_qp *qp)
{
	struct sv_wq *wq = &qp->sq;

	while (wq->tail != qp->sq_next) {
		struct sv_send_wqe *w = sv_wq_slot(wq, wq->tail);

		if (w->state != SV_WQE_DONE)
			break;
		if (w->status != IBV_WC_SUCCESS || (w->send_flags & IBV_SEND_SIGNALED) ||
		    qp->sq_sig_all) {
			struct ibv_wc wc = {
				.wr_id = w->wr_id,
				.status = w->status,
				.opcode = wc_opcode_of(w->opcode),
				.byte_len = w->byte_len,
				.qp_num = qp->ibv.qp_base.qp_num,
			};

			sv_cq_push(qp->scq, &wc, false);
		}
		wq->tail++;
		if (w->status != IBV_WC_SUCCESS) {
			/* IBA 10.8.3.3: a completion error takes the QP to Error; what
			 * follows is flushed once the state changes. */
			qp_fail(qp, SV_ERR_NO_EVENT);
			break;
		}
	}
}

void sv_qp_tx_locked(struct sv_qp *qp)
{
	enum ibv_qp_state st = qp->attr.qp_state;

	if (st != IBV_QPS_RTS || atomic_load(&qp->err_event) >= 0)
		return;
	qp->tx_blocked = false;
	while (qp->sq_next != qp->sq.head) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, qp->sq_next);
		enum tx_result r;

		/* IBA 10.8.3.1: a fenced WR waits for earlier READs and atomics. */
		if ((w->send_flags & IBV_SEND_FENCE) && qp->rd_atomic_out)
			break;
		r = tx_one(qp, w);
		if (r == TX_BLOCKED) {
			qp->tx_blocked = true;
			break;
		}
		qp->sq_next++;
		if (r == TX_DONE && w->status != IBV_WC_SUCCESS)
			break;
	}
	complete_locked(qp);
}

/* ---------------------------------------------------------------------------------------- */
/* requester: answers from the responder                                                    */

/* Marks every WQE waiting for an answer up to @msn as done. Caller holds sq.lock. */
static void acked_upto(struct sv_qp *qp, uint32_t msn)
{
	for (uint32_t i = qp->sq.tail; i != qp->sq_next; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, i);

		if (w->state != SV_WQE_WAIT)
			continue;
		if (!msn_le(w->msn, msn))
			break;
		wqe_done(w, IBV_WC_SUCCESS);
		if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
			qp->rd_atomic_out--;
	}
	if (qp->rnr_deadline && msn_le(qp->rnr_msn, msn))
		qp->rnr_deadline = 0;
}

static struct sv_send_wqe *waiting_wqe(struct sv_qp *qp, uint32_t msn)
{
	for (uint32_t i = qp->sq.tail; i != qp->sq_next; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, i);

		if (w->state == SV_WQE_WAIT && w->msn == msn)
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

static void rx_answer(struct sv_qp *qp, const struct shm_msg *m)
{
	struct sv_send_wqe *w;

	pthread_spin_lock(&qp->sq.lock);
	switch (m->op) {
	case SHM_OP_ACK:
		acked_upto(qp, m->msn);
		break;
	case SHM_OP_ATOMIC_RESP:
		w = waiting_wqe(qp, m->msn);
		if (w && w->num_sge == 1) {
			uint64_t va;

			/* The original value lands in our buffer (checked at transmit). */
			if (!sv_mr_check(qp_ctx(qp)->mrs.slots, w->sge[0].lkey, qp->pd->handle,
					 IBV_ACCESS_LOCAL_WRITE, w->sge[0].addr, 8, &va))
				memcpy((void *)(uintptr_t)va, &m->u.atomic_value, 8);
		}
		acked_upto(qp, m->msn);
		break;
	case SHM_OP_NAK:
		acked_upto(qp, m->msn - 1);
		w = waiting_wqe(qp, m->msn);
		if (w)
			wqe_done(w, (enum ibv_wc_status)m->aux);
		break;
	case SHM_OP_RNR:
		/* IBA 9.7.5.2.8: wait; after rnr_retry tries (7: forever) give up. */
		if (qp->attr.rnr_retry != 7 && !qp->rnr_deadline) {
			uint32_t t = m->aux < 32 ? rnr_timer_us[m->aux] : rnr_timer_us[0];

			qp->rnr_msn = m->msn;
			qp->rnr_deadline = now_ns() + (uint64_t)t * 1000 * (qp->attr.rnr_retry + 1u);
		}
		break;
	default:
		break;
	}
	complete_locked(qp);
	pthread_spin_unlock(&qp->sq.lock);
}

/* ---------------------------------------------------------------------------------------- */
/* responder                                                                                */

/* Sends a small answer to the requester. -EAGAIN if its fifo is full. */
static int answer(struct sv_qp *qp, uint8_t op, uint32_t msn, uint32_t aux, uint64_t value)
{
	struct shm_msg m = { .op = op, .msn = msn, .aux = aux, .src_qpn = qp->ibv.qp_base.qp_num };

	if (!qp->peer)
		return 0;
	m.u.atomic_value = value;
	return put_msg(qp->peer, &m, NULL, NULL, 0, 0);
}

/* Takes the next receive WQE (own queue or SRQ) into @out. False if there is none. */
static bool take_recv(struct sv_qp *qp, struct sv_recv_wqe *out, struct ibv_sge *sges)
{
	struct sv_wq *wq = qp->srq ? &qp->srq->rq : &qp->rq;
	bool limit = false, got = false;

	pthread_spin_lock(&wq->lock);
	if (wq->tail != wq->head) {
		struct sv_recv_wqe *w = sv_wq_slot(wq, wq->tail++);

		*out = *w;
		memcpy(sges, w->sge, w->num_sge * sizeof(*sges));
		got = true;
		/* IBA 10.2.9.1: the SRQ limit event fires once when the queue runs low. */
		if (qp->srq && qp->srq->srq_limit && sv_wq_count(wq) < qp->srq->srq_limit) {
			qp->srq->srq_limit = 0;
			limit = true;
		}
	}
	pthread_spin_unlock(&wq->lock);
	if (limit)
		sv_async_raise(qp_ctx(qp), IBV_EVENT_SRQ_LIMIT_REACHED, &qp->srq->ibv);
	return got;
}

static void recv_complete(struct sv_qp *qp, const struct sv_recv_wqe *r, const struct shm_msg *m,
			  enum ibv_wc_status st, uint32_t byte_len)
{
	struct ibv_wc wc = {
		.wr_id = r->wr_id,
		.status = st,
		.opcode = m->op == SHM_OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
		.byte_len = byte_len,
		.qp_num = qp->ibv.qp_base.qp_num,
		.src_qp = m->src_qpn,
		.slid = qp_ctx(qp)->host.lid,
		.pkey_index = qp->attr.pkey_index,
	};

	if (m->flags & SHM_F_IMM) {
		wc.imm_data = m->imm;
		wc.wc_flags |= IBV_WC_WITH_IMM;
	}
	if (m->flags & SHM_F_GRH)
		wc.wc_flags |= IBV_WC_GRH;
	sv_cq_push(qp->rcq, &wc, (m->flags & SHM_F_SOLICITED) != 0);
}

enum rx_result { RX_CONSUMED, RX_HOLD };

/* SEND and WRITE with immediate: place the data, consume a receive, acknowledge. */
static enum rx_result rx_send(struct sv_qp *qp, const struct shm_msg *m, uint64_t pos)
{
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	const struct sv_mr_entry *slots = qp_ctx(qp)->mrs.slots;
	struct ibv_sge sges[SV_MAX_SGE];
	struct iovec iov[SV_IOV_MAX];
	enum ibv_wc_status st = IBV_WC_SUCCESS;
	struct sv_recv_wqe r;
	uint64_t room = 0;
	int n_iov = 0;

	if (type == IBV_QPT_UD && m->aux != qp->attr.qkey)
		return RX_CONSUMED; /* IBA 10.2.4: a Q_Key mismatch drops the datagram */
	if (!take_recv(qp, &r, sges)) {
		if (type != IBV_QPT_RC)
			return RX_CONSUMED; /* UC and UD drop what nobody receives */
		/* RC: Receiver Not Ready; the message waits at the head of the fifo. */
		if (qp->srq)
			atomic_store(&qp->srq->rnr_waiting, 1);
		if (qp->rnr_told != m->msn && !answer(qp, SHM_OP_RNR, m->msn, qp->attr.min_rnr_timer, 0))
			qp->rnr_told = m->msn;
		qp->rnr_held = true;
		return RX_HOLD;
	}
	qp->rnr_held = false;
	if (m->op == SHM_OP_SEND) {
		for (uint32_t i = 0; i < r.num_sge && !st; i++) {
			uint64_t va;

			if (!sges[i].length)
				continue;
			if (sv_mr_check(slots, sges[i].lkey, qp->pd->handle, IBV_ACCESS_LOCAL_WRITE,
					sges[i].addr, sges[i].length, &va))
				st = IBV_WC_LOC_PROT_ERR;
			iov[n_iov].iov_base = (void *)(uintptr_t)va;
			iov[n_iov++].iov_len = sges[i].length;
			room += sges[i].length;
		}
		if (!st && room < m->len)
			st = IBV_WC_LOC_LEN_ERR;
	}
	if (!st && m->op == SHM_OP_SEND && (m->flags & SHM_F_INLINE)) {
		uint32_t off = 0;

		for (int i = 0; i < n_iov && off < m->len; i++) {
			uint32_t n = (uint32_t)iov[i].iov_len;

			if (n > m->len - off)
				n = m->len - off;
			shm_fifo_get(qp->rx, pos, off, iov[i].iov_base, n);
			off += n;
		}
	} else if (!st && m->op == SHM_OP_SEND) {
		/* Rendezvous: pull the sender's buffers, one copy (process_vm_readv). */
		struct shm_rsge rs[SV_IOV_MAX];
		uint32_t n = m->aux < SV_IOV_MAX ? m->aux : SV_IOV_MAX;
		uint64_t off = 0;

		shm_fifo_get(qp->rx, pos, 0, rs, n * (uint32_t)sizeof(rs[0]));
		for (uint32_t i = 0; i < n && !st; i++) {
			struct iovec l[SV_IOV_MAX];
			int nl = 0;
			uint64_t skip = off;

			for (int k = 0; k < n_iov; k++) {
				if (skip >= iov[k].iov_len) {
					skip -= iov[k].iov_len;
					continue;
				}
				l[nl].iov_base = (char *)iov[k].iov_base + skip;
				l[nl++].iov_len = iov[k].iov_len - skip;
				skip = 0;
			}
			if (!qp->peer || cma_copy(qp->peer->pid, l, nl, rs[i].addr, rs[i].len, false))
				st = IBV_WC_LOC_QP_OP_ERR;
			off += rs[i].len;
		}
	}
	/*
	 * Answer before the receive completes: once the application sees its receive it may
	 * destroy the QP, and the requester must have its acknowledgement by then.
	 */
	if (st && type == IBV_QPT_RC) {
		/* IBA 9.9.3: the responder enters Error; the requester learns by NAK. */
		(void)answer(qp, SHM_OP_NAK, m->msn,
			     st == IBV_WC_LOC_LEN_ERR ? IBV_WC_REM_INV_REQ_ERR : IBV_WC_REM_OP_ERR, 0);
	} else if (type == IBV_QPT_RC) {
		qp->ack_due = m->msn;
		if (!answer(qp, SHM_OP_ACK, m->msn, 0, 0))
			qp->ack_sent = m->msn;
	}
	recv_complete(qp, &r, m, st, m->len);
	if (st && type != IBV_QPT_UD)
		qp_fail(qp, SV_ERR_NO_EVENT);
	return RX_CONSUMED;
}

/* Executes an atomic on our memory for the requester (IBA 9.4.5, IBV_ATOMIC_HCA). */
static enum rx_result rx_atomic(struct sv_qp *qp, const struct shm_msg *m)
{
	uint64_t va, orig;
	enum sv_access_result a;
	struct iovec probe_l, probe_r;

	if (!qp->peer)
		return RX_CONSUMED;
	a = sv_mr_check(qp_ctx(qp)->mrs.slots, m->u.atomic.rkey, qp->pd->handle,
			IBV_ACCESS_REMOTE_ATOMIC, m->u.atomic.addr, 8, &va);
	if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC))
		a = SV_ACCESS_NO_RIGHT;
	if (a == SV_ACCESS_OK && (m->u.atomic.addr & 7)) {
		if (answer(qp, SHM_OP_NAK, m->msn, IBV_WC_REM_INV_REQ_ERR, 0))
			return RX_HOLD;
		qp_fail(qp, IBV_EVENT_QP_REQ_ERR);
		return RX_CONSUMED;
	}
	/* The page must still be there: the owner may have unmapped it (no crash). */
	probe_l = (struct iovec){ .iov_base = &orig, .iov_len = 8 };
	probe_r = (struct iovec){ .iov_base = (void *)(uintptr_t)va, .iov_len = 8 };
	if (a == SV_ACCESS_OK && process_vm_readv(getpid(), &probe_l, 1, &probe_r, 1, 0) != 8)
		a = SV_ACCESS_OUT_OF_RANGE;
	if (a != SV_ACCESS_OK) {
		if (answer(qp, SHM_OP_NAK, m->msn, IBV_WC_REM_ACCESS_ERR, 0))
			return RX_HOLD;
		qp_fail(qp, IBV_EVENT_QP_ACCESS_ERR);
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
		if (m->flags & SHM_F_CMP_SWP) {
			orig = m->u.atomic.compare_add;
			__atomic_compare_exchange_n(p, &orig, m->u.atomic.swap, false, __ATOMIC_SEQ_CST,
						    __ATOMIC_SEQ_CST);
		} else {
			orig = __atomic_fetch_add(p, m->u.atomic.compare_add, __ATOMIC_SEQ_CST);
		}
		resp.u.atomic_value = orig;
		resp.nslots = 1;
		memcpy(shm_fifo_slot(qp->peer->fifo, rpos)->hdr, &resp, sizeof(resp));
		if (shm_fifo_publish(qp->peer->fifo, rpos))
			sv_engine_wake_peer(qp->peer);
	}
	qp->ack_due = m->msn;
	qp->ack_sent = m->msn; /* the response acknowledges it */
	return RX_CONSUMED;
}

static enum rx_result rx_one(struct sv_qp *qp, const struct shm_msg *m, uint64_t pos)
{
	enum ibv_qp_state st = qp->attr.qp_state;

	switch (m->op) {
	case SHM_OP_ACK:
	case SHM_OP_ATOMIC_RESP:
	case SHM_OP_NAK:
	case SHM_OP_RNR:
		if (st == IBV_QPS_RTS || st == IBV_QPS_SQD)
			rx_answer(qp, m);
		return RX_CONSUMED;
	case SHM_OP_ACCESS_ERR:
		if (st != IBV_QPS_ERR)
			qp_fail(qp, IBV_EVENT_QP_ACCESS_ERR);
		return RX_CONSUMED;
	default:
		break;
	}
	/* Requests: a QP before RTR holds them (a NIC would drop them and the requester
	 * retransmit); a QP in error drops them. */
	if (st == IBV_QPS_RESET || st == IBV_QPS_INIT)
		return RX_HOLD;
	if (st == IBV_QPS_ERR || atomic_load(&qp->err_event) >= 0)
		return RX_CONSUMED;
	if (qp->ibv.qp_base.qp_type != IBV_QPT_UD && m->src_qpn != qp->attr.dest_qp_num)
		return RX_CONSUMED; /* not from the QP we are connected to */
	switch (m->op) {
	case SHM_OP_SEND:
	case SHM_OP_WRITE_IMM:
		return rx_send(qp, m, pos);
	case SHM_OP_ATOMIC:
		return rx_atomic(qp, m);
	default:
		return RX_CONSUMED;
	}
}

static int rx(struct sv_qp *qp)
{
	struct shm_slot *s;
	uint64_t pos;
	int n = 0;

	if (atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		return 0;
	while (n < SV_RX_BUDGET && (s = shm_fifo_peek(qp->rx, &pos))) {
		struct shm_msg m;

		memcpy(&m, s->hdr, sizeof(m));
		if (rx_one(qp, &m, pos) == RX_HOLD)
			break;
		shm_fifo_release(qp->rx, m.nslots);
		n++;
	}
	/* An acknowledgement that found the requester's fifo full goes now (cumulative). */
	if (qp->ack_due != qp->ack_sent && !answer(qp, SHM_OP_ACK, qp->ack_due, 0, 0))
		qp->ack_sent = qp->ack_due;
	atomic_flag_clear_explicit(&qp->rx_busy, memory_order_release);
	return n;
}

/* ---------------------------------------------------------------------------------------- */
/* progress                                                                                 */

static int timers(struct sv_qp *qp)
{
	struct sv_send_wqe *w;

	if (!qp->rnr_deadline || now_ns() < qp->rnr_deadline)
		return 0;
	/* IBA 9.7.5.2.8: the RNR retries ran out. */
	w = waiting_wqe(qp, qp->rnr_msn);
	qp->rnr_deadline = 0;
	if (w) {
		acked_upto(qp, w->msn - 1);
		wqe_done(w, IBV_WC_RNR_RETRY_EXC_ERR);
		complete_locked(qp);
	}
	return 1;
}

static int peer_left(struct sv_qp *qp);

int sv_qp_progress(struct sv_qp *qp)
{
	int n = rx(qp);

	if (atomic_load_explicit(&qp->peer_left, memory_order_relaxed))
		n += peer_left(qp);
	if ((qp->tx_blocked || qp->rnr_deadline || qp->connect_pending) &&
	    !pthread_spin_trylock(&qp->sq.lock)) {
		n += timers(qp);
		if (qp->tx_blocked)
			sv_qp_tx_locked(qp);
		pthread_spin_unlock(&qp->sq.lock);
	}
	if (atomic_load_explicit(&qp->err_event, memory_order_relaxed) >= 0)
		sv_qp_settle(qp);
	return n;
}

void sv_qp_recv_posted(struct sv_qp *qp)
{
	/* A message held for want of a receive may go on now; wake the progress thread
	 * (a system call only in this case: the sender is waiting on RNR). */
	if (qp->rnr_held)
		sv_engine_kick();
}

bool sv_qp_arm(struct sv_qp *qp)
{
	if (qp->rnr_held || !qp->seg)
		return true; /* what waits there needs a receive, not us */
	return shm_fifo_arm(qp->rx);
}

void sv_qp_disarm(struct sv_qp *qp)
{
	if (qp->seg)
		shm_fifo_disarm(qp->rx);
}

bool sv_qp_needs_timer(struct sv_qp *qp)
{
	return qp->tx_blocked || qp->rnr_deadline || qp->connect_pending ||
	       atomic_load_explicit(&qp->peer_left, memory_order_relaxed) ||
	       atomic_load_explicit(&qp->err_event, memory_order_relaxed) >= 0;
}

void sv_qp_peer_lost(struct sv_qp *qp, uint32_t peer_qpn, bool fatal)
{
	bool ours;

	/* Only a hint read without the lock: the QP may have moved on to another peer. */
	ours = qp->ibv.qp_base.qp_type != IBV_QPT_UD && qp->attr.dest_qp_num == peer_qpn &&
	       (qp->attr.qp_state == IBV_QPS_RTR || qp->attr.qp_state == IBV_QPS_RTS ||
		qp->attr.qp_state == IBV_QPS_SQD);
	if (!ours)
		return;
	sv_dbg("qp %u: peer qp %u %s", qp->ibv.qp_base.qp_num, peer_qpn,
	       fatal ? "died" : "went away");
	if (fatal) {
		/* A dead peer is fatal: async QP_FATAL, everything outstanding flushed. */
		qp_fail(qp, IBV_EVENT_QP_FATAL);
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
		gone = qp->peer;
		qp->peer = NULL;
		atomic_store(&qp->peer_left, false);
		/* What still waits for an answer will never get one (IBA 9.7.5.1.1). */
		for (uint32_t i = qp->sq.tail; i != qp->sq_next; i++) {
			struct sv_send_wqe *w = sv_wq_slot(&qp->sq, i);

			if (w->state == SV_WQE_WAIT) {
				wqe_done(w, IBV_WC_RETRY_EXC_ERR);
				break;
			}
		}
		complete_locked(qp);
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

	pthread_spin_lock(&cq->qps_lock);
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
	pthread_spin_lock(&cq->qps_lock);
	for (int i = 0; i < cq->n_qps; i++) {
		if (cq->qps[i] == qp) {
			cq->qps[i] = cq->qps[--cq->n_qps];
			break;
		}
	}
	pthread_spin_unlock(&cq->qps_lock);
}

void sv_cq_progress(struct sv_cq *cq)
{
	struct sv_qp *pinned[16];
	int n = 0;

	pthread_spin_lock(&cq->qps_lock);
	for (int i = 0; i < cq->n_qps && n < 16; i++) {
		pinned[n] = cq->qps[i];
		atomic_fetch_add_explicit(&pinned[n]->eng_ref, 1, memory_order_relaxed);
		n++;
	}
	pthread_spin_unlock(&cq->qps_lock);
	for (int i = 0; i < n; i++) {
		sv_qp_progress(pinned[i]);
		atomic_fetch_sub_explicit(&pinned[i]->eng_ref, 1, memory_order_release);
	}
}
