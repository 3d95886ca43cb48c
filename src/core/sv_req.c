/* The requester: transmits the send queue, reports completions in order. */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/sv_cq.h"
#include "core/sv_qp_priv.h"
#include "util/sv_lock.h"
#include "util/sv_log.h"
#include "util/sv_mem.h"

/* ---------------------------------------------------------------------------------------- */
/* requester                                                                                */

/* Where a WQE's data is: SGEs checked against our key table (IBA 10.6.3: lkey, PD, range). */
static enum ibv_wc_status local_iov(struct sv_qp *qp, const struct sv_send_wqe *w, uint32_t need,
				    struct iovec *iov, int *n_iov, uint64_t *total)
{
	const struct sv_mr_entry *slots = sv_qp_ctx(qp)->mrs->slots;

	*n_iov = 0;
	*total = 0;
	for (uint32_t i = 0; i < w->num_sge; i++) {
		const struct ibv_sge *sge = &w->sge[i];
		uint64_t va;

		if (!sge->length)
			continue;
		if (sv_mr_check(slots, sge->lkey, qp->pd->handle, need, sge->addr, sge->length, &va))
			return IBV_WC_LOC_PROT_ERR;
		/* On demand: the pages must be there to read, or to write for a READ's or an
		 * atomic's result, or the copy would fault (a NIC's page fault fails the WR). */
		if (sv_mr_on_demand(slots, sge->lkey) &&
		    !sv_mem_accessible(va, sge->length, need & IBV_ACCESS_LOCAL_WRITE))
			return IBV_WC_LOC_PROT_ERR;
		iov[*n_iov].iov_base = (void *)(uintptr_t)va;
		iov[*n_iov].iov_len = sge->length;
		(*n_iov)++;
		*total += sge->length;
	}
	return IBV_WC_SUCCESS;
}

/* How a transmitted message's payload travels, for the counters (softverbs_query_qp). */
enum tx_path {
	TX_FIFO,   /* through the peer's fifo: the ring, or the bounce copy's pieces */
	TX_CMA,    /* copied by this requester with process_vm_* */
	TX_PULLED, /* the responder pulls it (a rendezvous SEND): counted there */
};

static void count_tx(struct sv_qp *qp, const struct sv_peer *peer, uint64_t msgs,
		     uint64_t bytes, enum tx_path path)
{
	sv_count(&qp->cnt.tx_msgs, msgs);
	sv_count(&qp->cnt.tx_bytes, bytes);
	if (path == TX_FIFO)
		sv_count(&qp->cnt.tx_fifo_bytes, bytes);
	else if (path == TX_CMA)
		sv_count(&qp->cnt.tx_cma_bytes, bytes);
	atomic_store_explicit(&qp->cnt.tx_copy, peer->cma ? SV_COPY_CMA : SV_COPY_BOUNCE,
			      memory_order_relaxed);
}

/* The WQE's data: its inline copy, or its SGEs checked for @need. */
static enum ibv_wc_status wqe_iov(struct sv_qp *qp, struct sv_send_wqe *w, uint32_t need,
				  struct iovec *iov, int *n_iov, uint64_t *total)
{
	if (w->opcode == IBV_WR_ATOMIC_WRITE) {
		/* The 8 bytes travel in the WQE (ibv_wr_atomic_write copied them). */
		iov[0].iov_base = &w->compare_add;
		iov[0].iov_len = 8;
		*n_iov = 1;
		*total = 8;
		return IBV_WC_SUCCESS;
	}
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
	return sv_qp_state_receives(atomic_load_explicit(&peer->page->state, memory_order_acquire));
}

/* IBA 10.9.3: would @peer's QP accept our packets? It drops the others, silently, and
 * counts them (its port's bad_pkey_cntr): we count for it, on its page. */
static bool pkeys_match(const struct sv_qp *qp, const struct sv_peer *peer)
{
	return sv_pkey_match(atomic_load_explicit(&qp->page->pkey, memory_order_relaxed),
			     atomic_load_explicit(&peer->page->pkey, memory_order_relaxed));
}

static bool partition_ok(const struct sv_qp *qp, const struct sv_peer *peer)
{
	if (pkeys_match(qp, peer))
		return true;
	atomic_fetch_add_explicit(&peer->page->bad_pkey, 1, memory_order_relaxed);
	return false;
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
enum ibv_wc_status sv_cma_copy(pid_t pid, struct iovec *local, int n_local, uint64_t remote,
				   uint64_t len, bool write)
{
	static bool warned;
	uint64_t done = 0;

	while (done < len) {
		struct iovec r = { .iov_base = (void *)(uintptr_t)(remote + done), .iov_len = len - done };
		struct iovec l[SV_IOV_MAX];
		int nl = sv_iov_slice(local, n_local, done, len - done, l); /* from byte `done` on */
		ssize_t n;

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
int sv_put_msg(struct sv_peer *peer, struct shm_msg *m, const void *payload,
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

/*
 * The UD destination @qpn: attached already, or not. Attaching blocks on a socket, so it
 * never happens here, under the send queue's lock: this asks for it (want_qpn) and
 * sv_qp_tx_connect() does it with no lock held. A destination that could not be
 * attached is remembered as unreachable for the WR that asked.
 */
static struct sv_peer *ud_dest(struct sv_qp *qp, uint32_t qpn, bool *unreachable)
{
	struct sv_ud_dests *d = qp->ud_dests;

	*unreachable = false;
	for (int i = 0; d && i < d->n; i++)
		if (d->peer[i]->qpn == qpn)
			return d->peer[i];
	if (qp->ud_unreachable_valid && qp->ud_unreachable == qpn) {
		qp->ud_unreachable_valid = false;
		*unreachable = true;
		return NULL;
	}
	qp->want_connect = true;
	qp->want_qpn = qpn;
	return NULL;
}

static void ud_dest_add(struct sv_qp *qp, struct sv_peer *peer)
{
	struct sv_ud_dests *d = qp->ud_dests;

	if (!d) {
		d = calloc(1, sizeof(*d));
		if (!d) {
			sv_engine_disconnect(peer);
			return;
		}
		qp->ud_dests = d;
	}
	if (d->n == SV_UD_MAX_DESTS) {
		/* Forget the oldest destination. */
		sv_engine_disconnect(d->peer[0]);
		memmove(&d->peer[0], &d->peer[1], (SV_UD_MAX_DESTS - 1) * sizeof(d->peer[0]));
		d->n--;
	}
	d->peer[d->n++] = peer;
}

void sv_qp_tx_connect(struct sv_qp *qp)
{
	struct sv_peer *peer = NULL;
	bool ud = qp->ibv.qp_base.qp_type == IBV_QPT_UD;
	uint32_t qpn;
	int err;

	sv_spin_lock(&qp->sq.lock);
	qpn = qp->want_qpn;
	/* One thread attaches at a time (the poster, or the progress thread): a second
	 * attach to the same QP would only be undone. */
	if (!qp->want_connect || qp->connecting) {
		pthread_spin_unlock(&qp->sq.lock);
		return;
	}
	qp->connecting = true;
	pthread_spin_unlock(&qp->sq.lock);
	err = sv_engine_connect(qp, qpn, &peer);
	/* qp->peer changes under both rx_busy and sq.lock (the responder reads it). */
	sv_rx_lock(qp);
	sv_spin_lock(&qp->sq.lock);
	qp->connecting = false;
	/* Still wanted? (a reset in between forgets the wish) */
	if (qp->want_connect && qp->want_qpn == qpn) {
		qp->want_connect = false;
		if (ud && !err) {
			ud_dest_add(qp, peer);
			peer = NULL;
		} else if (ud) {
			sv_dbg("qp %u: qp %u unreachable (%d): the datagram is lost",
			       qp->ibv.qp_base.qp_num, qpn, err);
			qp->ud_unreachable = qpn;
			qp->ud_unreachable_valid = true;
		} else {
			if (!err && !qp->peer) {
				qp->peer = peer;
				peer = NULL;
			}
			sv_set_hint(qp->connect_pending, false);
		}
		sv_qp_tx_locked(qp);
	}
	pthread_spin_unlock(&qp->sq.lock);
	sv_rx_unlock(qp);
	if (peer)
		sv_engine_disconnect(peer);
	sv_qp_settle(qp);
}

/* The GRH a UD receiver finds in front of the data (IPv6 form; IBA 8.3, RoCE v2 GIDs). */
static void ud_grh(struct sv_qp *qp, const struct sv_send_wqe *w, unsigned char grh[SV_UD_GRH])
{
	struct sv_context *ctx = sv_qp_ctx(qp);
	struct ibv_grh *g = (struct ibv_grh *)grh;
	uint32_t vtf = 6u << 28;

	memset(grh, 0, SV_UD_GRH);
	g->version_tclass_flow = htobe32(vtf);
	g->next_hdr = 17; /* UDP: RoCE v2 */
	g->hop_limit = 64;
	/* The AH's source GID (a LID-only AH leaves from GID 0). */
	g->sgid = ctx->host.gids[w->ud.is_global && w->ud.sgid_index < ctx->host.n_gids ?
				 w->ud.sgid_index : 0].gid;
	g->dgid = w->ud.is_global ? w->ud.dgid : ctx->host.gids[0].gid;
}

enum tx_result { TX_DONE, TX_WAIT, TX_BLOCKED };

/*
 * SENDs up to this size ride in the fifo (two copies, no system call); larger ones are
 * pulled by the responder (one copy, one process_vm_readv). SOFTVERBS_SHM_INLINE_MAX
 * moves the crossover for measurement (docs/performance.md).
 */
static uint32_t sv_inline_max(void)
{
	static _Atomic uint32_t value = UINT32_MAX;
	uint32_t v = atomic_load_explicit(&value, memory_order_relaxed);

	if (v == UINT32_MAX) {
		const char *env = getenv("SOFTVERBS_SHM_INLINE_MAX");
		unsigned long n = env ? strtoul(env, NULL, 0) : SV_INLINE_MAX;

		v = n > SV_CHUNK * 4 ? SV_CHUNK * 4 : (uint32_t)n;
		atomic_store_explicit(&value, v, memory_order_relaxed);
	}
	return v;
}

/* The bytes [off, off + len) of an iovec list, as an iovec list. */
int sv_iov_slice(const struct iovec *iov, int n, uint64_t off, uint64_t len, struct iovec *out)
{
	int k = 0;

	for (int i = 0; i < n && len; i++) {
		uint64_t take;

		if (off >= iov[i].iov_len) {
			off -= iov[i].iov_len;
			continue;
		}
		take = iov[i].iov_len - off;
		if (take > len)
			take = len;
		out[k].iov_base = (char *)iov[i].iov_base + off;
		out[k++].iov_len = take;
		len -= take;
		off = 0;
	}
	return k;
}

/*
 * Sends a message's data through the fifo in pieces of SV_CHUNK (the bounce copy, for
 * peers process_vm_* cannot reach, and SENDs too large to go in one message). qp->tx_off
 * keeps the place when the peer's fifo fills.
 */
static enum tx_result tx_pieces(struct sv_qp *qp, struct sv_peer *peer, struct sv_send_wqe *w,
				struct shm_msg *proto, const struct iovec *iov, int n_iov,
				uint64_t total, bool reliable)
{
	do {
		uint64_t n = total - qp->tx_off < SV_CHUNK ? total - qp->tx_off : SV_CHUNK;
		struct iovec piece[SV_IOV_MAX];
		struct shm_msg m = *proto;
		int k = sv_iov_slice(iov, n_iov, qp->tx_off, n, piece);

		m.len = (uint32_t)n;
		m.aux = (uint32_t)total;
		m.u.rdma.addr = (m.op == SHM_OP_WRITE ? w->remote_addr : 0) + qp->tx_off;
		m.u.rdma.rkey = w->rkey;
		m.flags &= (uint8_t) ~(SHM_F_FIRST | SHM_F_LAST | SHM_F_IMM | SHM_F_SOLICITED);
		if (qp->tx_off == 0)
			m.flags |= SHM_F_FIRST;
		if (qp->tx_off + n == total)
			m.flags |= proto->flags & (SHM_F_LAST | SHM_F_IMM | SHM_F_SOLICITED);
		m.msn = reliable ? qp->next_msn + 1 : 0;
		if (sv_put_msg(peer, &m, NULL, piece, k, (uint32_t)n))
			return TX_BLOCKED;
		if (reliable)
			qp->next_msn++;
		qp->tx_off += n;
	} while (qp->tx_off < total);
	qp->tx_off = 0;
	count_tx(qp, peer, 1, total, TX_FIFO);
	if (!reliable) {
		sv_wqe_done(w, IBV_WC_SUCCESS);
		return TX_DONE;
	}
	w->msn = qp->next_msn;
	w->state = SV_WQE_WAIT;
	return TX_WAIT;
}


static enum tx_result tx_send(struct sv_qp *qp, struct sv_peer *peer, struct sv_send_wqe *w,
			      bool reliable)
{
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	struct shm_msg m = { .src_qpn = qp->ibv.qp_base.qp_num, .xrc_srqn = w->xrc_srqn };
	struct iovec iov[SV_IOV_MAX];
	struct shm_rsge rs[SV_IOV_MAX];
	unsigned char grh[SV_UD_GRH];
	enum ibv_wc_status st;
	uint64_t total;
	int n_iov, err;

	st = wqe_iov(qp, w, 0, iov, &n_iov, &total);
	if (st) {
		sv_wqe_done(w, st);
		return TX_DONE;
	}
	m.op = w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? SHM_OP_WRITE_IMM : SHM_OP_SEND;
	m.flags = SHM_F_FIRST | SHM_F_LAST;
	if (w->send_flags & IBV_SEND_SOLICITED)
		m.flags |= SHM_F_SOLICITED;
	if (w->opcode == IBV_WR_SEND_WITH_IMM || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
		m.flags |= SHM_F_IMM;
		m.imm = w->imm_data;
	}
	m.len = (uint32_t)total;
	if (reliable)
		m.msn = qp->next_msn + 1;
	/* SEND_WITH_INV: the responder's window to invalidate rides where a SEND has room. */
	if (w->opcode == IBV_WR_SEND_WITH_INV)
		m.u.rdma.rkey = w->imm_data;

	if (m.op == SHM_OP_WRITE_IMM) {
		err = sv_put_msg(peer, &m, NULL, NULL, 0, 0);
	} else if (type == IBV_QPT_UD) {
		/* IBA 9.8.3: Q_Keys with the high bit set mean "use the sender QP's own". */
		m.aux = (w->ud.remote_qkey & 0x80000000u) ? qp->attr.qkey : w->ud.remote_qkey;
		if (total > 4096) { /* one packet of the path MTU (IBA 10.7.2.2) */
			sv_wqe_done(w, IBV_WC_LOC_LEN_ERR);
			return TX_DONE;
		}
		ud_grh(qp, w, grh);
		m.flags |= SHM_F_INLINE | SHM_F_GRH;
		m.len = (uint32_t)total + SV_UD_GRH;
		memmove(&iov[1], &iov[0], (size_t)n_iov * sizeof(iov[0]));
		iov[0].iov_base = grh;
		iov[0].iov_len = SV_UD_GRH;
		err = sv_put_msg(peer, &m, NULL, iov, n_iov + 1, m.len);
	} else if (total <= sv_inline_max()) {
		m.flags |= SHM_F_INLINE;
		err = sv_put_msg(peer, &m, NULL, iov, n_iov, (uint32_t)total);
	} else if (!peer->cma || !reliable) {
		/* In pieces through the fifo: no CMA, or UC, whose send completes at once (its
		 * buffer is the application's again; the responder cannot pull from it). */
		m.flags |= SHM_F_INLINE;
		return tx_pieces(qp, peer, w, &m, iov, n_iov, total, reliable);
	} else {
		/* Rendezvous: the responder pulls straight from our buffers. */
		for (int i = 0; i < n_iov; i++) {
			rs[i].addr = (uintptr_t)iov[i].iov_base;
			rs[i].len = iov[i].iov_len;
		}
		m.aux = (uint32_t)n_iov;
		err = sv_put_msg(peer, &m, rs, NULL, 0, (uint32_t)(n_iov * sizeof(rs[0])));
	}
	if (err)
		return TX_BLOCKED;
	if (m.op != SHM_OP_WRITE_IMM) /* (the WRITE's data was counted by tx_rdma) */
		count_tx(qp, peer, 1, total, m.flags & SHM_F_INLINE ? TX_FIFO : TX_PULLED);
	if (!reliable) {
		sv_wqe_done(w, IBV_WC_SUCCESS);
		return TX_DONE;
	}
	w->msn = ++qp->next_msn;
	w->state = SV_WQE_WAIT;
	return TX_WAIT;
}

/*
 * RDMA WRITE and READ when process_vm_* cannot reach the peer: the data goes through the
 * fifos and the responder's library places it (or answers a READ) and checks the keys.
 */
static enum tx_result tx_rdma_bounce(struct sv_qp *qp, struct sv_peer *peer, struct sv_send_wqe *w,
				     const struct iovec *iov, int n_iov, uint64_t total,
				     bool reliable)
{
	struct shm_msg m = { .src_qpn = qp->ibv.qp_base.qp_num, .flags = SHM_F_LAST,
			     .xrc_srqn = w->xrc_srqn };
	uint32_t max = qp->attr.max_rd_atomic ? qp->attr.max_rd_atomic : 1;

	if (w->opcode == IBV_WR_RDMA_READ) {
		if (qp->rd_atomic_out >= max)
			return TX_BLOCKED; /* IBA 9.5: max_rd_atomic outstanding */
		m.op = SHM_OP_READ_REQ;
		m.len = (uint32_t)total;
		m.msn = qp->next_msn + 1;
		m.u.rdma.addr = w->remote_addr;
		m.u.rdma.rkey = w->rkey;
		if (sv_put_msg(peer, &m, NULL, NULL, 0, 0))
			return TX_BLOCKED;
		count_tx(qp, peer, 1, total, TX_FIFO); /* the answer comes through our fifo */
		w->msn = ++qp->next_msn;
		w->state = SV_WQE_WAIT;
		w->byte_len = (uint32_t)total;
		qp->rd_atomic_out++;
		return TX_WAIT;
	}
	if (!total && w->opcode == IBV_WR_RDMA_WRITE) {
		sv_wqe_done(w, IBV_WC_SUCCESS); /* nothing to place, no key to check */
		return TX_DONE;
	}
	m.op = SHM_OP_WRITE;
	if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
		m.flags |= SHM_F_IMM;
		m.imm = w->imm_data;
		if (w->send_flags & IBV_SEND_SOLICITED)
			m.flags |= SHM_F_SOLICITED;
	}
	/* Even on UC the responder acknowledges these: a completed WRITE then means the data
	 * is in place, as with the one-sided copy (UC never reports the responder's errors). */
	(void)reliable;
	return tx_pieces(qp, peer, w, &m, iov, n_iov, total, true);
}

/* ---------------------------------------------------------------------------------------- */
/* copy assist (shm_assist.h): a large one-sided copy the responder's progress thread helps */

enum {
	/* Smaller copies are not worth cutting: each piece costs a system call (~1.5 us). */
	SV_ASSIST_MIN = 2 * SHM_ASSIST_CHUNK + SHM_ASSIST_TAIL,
	SV_ASSIST_PROBE = 8, /* after a copy nobody helped with, every 8th offers help */
};
#define SV_ASSIST_SPIN_NS 50000ull     /* waits this long for the helper's last chunks */
#define SV_ASSIST_LATE_NS 1000000000ull /* a helper not done by then has failed */

/* SOFTVERBS_SHM_ASSIST=0 turns it off, both ways: this process neither offers its large
 * copies nor helps with its peers' (measurements; a responder's CPU kept to itself). */
bool sv_assist_on(void)
{
	static _Atomic int value = -1;
	int v = atomic_load_explicit(&value, memory_order_relaxed);

	if (v < 0) {
		const char *env = getenv("SOFTVERBS_SHM_ASSIST");

		v = !env || strcmp(env, "0");
		atomic_store_explicit(&value, v, memory_order_relaxed);
	}
	return v;
}

static bool assist_wanted(struct sv_qp *qp, const struct sv_send_wqe *w, uint64_t total)
{
	if (qp->assist_job)
		return true; /* resumed: the job is posted */
	if (total < SV_ASSIST_MIN || total > (1ull << 31) || w->num_sge > SHM_ASSIST_SGE ||
	    (w->send_flags & IBV_SEND_INLINE) || !sv_assist_on())
		return false;
	return qp->assist_helped || qp->assist_copies++ % SV_ASSIST_PROBE == 0;
}

/* Posts the job for the WQE's first @body bytes on the responder's page, wakes it. */
static void assist_post(struct sv_qp *qp, struct sv_peer *peer, const struct sv_send_wqe *w,
			uint64_t body, bool write)
{
	struct shm_assist *a = &peer->page->assist;
	uint32_t job = shm_assist_job(atomic_load_explicit(&a->claim, memory_order_relaxed)) + 1;

	job += !job;
	atomic_store_explicit(&a->done, (uint64_t)job << 32, memory_order_relaxed);
	atomic_store_explicit(&a->failed, 0, memory_order_relaxed);
	atomic_store_explicit(&a->addr, w->remote_addr, memory_order_relaxed);
	atomic_store_explicit(&a->op, (uint64_t)w->rkey << 32 | (write ? SHM_ASSIST_WRITE : 0) |
				      w->num_sge, memory_order_relaxed);
	atomic_store_explicit(&a->len, body, memory_order_relaxed);
	for (uint32_t i = 0; i < w->num_sge; i++) {
		atomic_store_explicit(&a->sge[i].addr, w->sge[i].addr, memory_order_relaxed);
		atomic_store_explicit(&a->sge[i].len_key,
				      (uint64_t)w->sge[i].length << 32 | w->sge[i].lkey,
				      memory_order_relaxed);
	}
	/* Release: a helper that sees the job sees its descriptor. */
	atomic_store_explicit(&a->claim, shm_assist_word(job, 0, shm_assist_chunks(body)),
			      memory_order_release);
	if (shm_fifo_take_armed(peer->fifo))
		sv_engine_wake_peer(peer);
	qp->assist_job = job;
	qp->assist_deadline = 0;
}

/* Copies the message's bytes [off, off + len) (the local side sliced to match). */
static enum ibv_wc_status copy_part(pid_t pid, const struct iovec *iov, int n_iov, uint64_t va,
				    uint64_t off, uint64_t len, bool write)
{
	struct iovec part[SV_IOV_MAX];
	int k = sv_iov_slice(iov, n_iov, off, len, part);

	return sv_cma_copy(pid, part, k, va + off, len, write);
}

/* Whether the helper finished the @n chunks it took of @job, or failed one. */
static bool helper_finished(struct shm_assist *a, uint32_t job, uint32_t n)
{
	uint64_t d = atomic_load_explicit(&a->done, memory_order_acquire);

	return (uint32_t)(d >> 32) != job || (uint32_t)d >= n ||
	       atomic_load_explicit(&a->failed, memory_order_relaxed) == job;
}

/*
 * The one-sided copy of a large WRITE or READ (checked already: [va, va + total) at the
 * responder, @iov here), with the responder's help. We take chunks from the front, half
 * of what is left each time, while its progress thread takes them from the back; after
 * a copy it did not help with we take all but one chunk (it may be asleep: we woke it).
 * Then we wait for its chunks (redoing them if it could not copy one) and copy the tail
 * last. *pending: its chunks are not done yet; call again (the job stays posted).
 */
static enum ibv_wc_status tx_assisted(struct sv_qp *qp, struct sv_peer *peer,
				      const struct sv_send_wqe *w, const struct iovec *iov,
				      int n_iov, uint64_t va, uint64_t total, bool write,
				      bool *pending)
{
	struct shm_assist *a = &peer->page->assist;
	uint64_t body = total - SHM_ASSIST_TAIL, now, spin_end;
	uint32_t n = shm_assist_chunks(body), first, k, back = n, job;
	bool fresh = !qp->assist_job;
	enum ibv_wc_status st;

	*pending = false;
	if (fresh)
		assist_post(qp, peer, w, body, write);
	job = qp->assist_job;
	for (;;) {
		uint64_t c = atomic_load_explicit(&a->claim, memory_order_relaxed);
		uint32_t left = shm_assist_back(c) - shm_assist_front(c), want = left;

		if (qp->assist_helped)
			want = (left + 1) / 2;
		else if (fresh && left > 1)
			want = left - 1;
		fresh = false;
		if (!shm_assist_take_front(a, job, want, &first, &k, &back))
			break;
		if (first + k >= n) {
			/* Nobody took the end: ours through the tail, in one copy. */
			st = copy_part(peer->pid, iov, n_iov, va, (uint64_t)first * SHM_ASSIST_CHUNK,
				       total - (uint64_t)first * SHM_ASSIST_CHUNK, write);
			qp->assist_job = 0;
			qp->assist_helped = false;
			return st;
		}
		st = copy_part(peer->pid, iov, n_iov, va, (uint64_t)first * SHM_ASSIST_CHUNK,
			       (uint64_t)k * SHM_ASSIST_CHUNK, write);
		if (st) {
			shm_assist_close(a, job);
			qp->assist_job = 0;
			return st;
		}
	}
	/* The helper took [back, n): the word says so, bounded by what we posted. */
	if (back > n)
		back = n;
	now = sv_now_ns();
	if (!qp->assist_deadline)
		qp->assist_deadline = now + SV_ASSIST_LATE_NS;
	for (spin_end = now + SV_ASSIST_SPIN_NS; !helper_finished(a, job, n - back);) {
		sv_cpu_relax();
		now = sv_now_ns();
		if (now < spin_end)
			continue;
		if (now < qp->assist_deadline) {
			*pending = true; /* left to progress: sv_qp_tx_locked again */
			return IBV_WC_SUCCESS;
		}
		/* Its copy may still land: fail rather than race it (as if retries ran out). */
		shm_assist_close(a, job);
		qp->assist_job = 0;
		return IBV_WC_RETRY_EXC_ERR;
	}
	qp->assist_job = 0;
	qp->assist_helped = back < n;
	st = IBV_WC_SUCCESS;
	if (atomic_load_explicit(&a->failed, memory_order_relaxed) == job)
		st = copy_part(peer->pid, iov, n_iov, va, (uint64_t)back * SHM_ASSIST_CHUNK,
			       body - (uint64_t)back * SHM_ASSIST_CHUNK, write);
	if (!st)
		st = copy_part(peer->pid, iov, n_iov, va, body, total - body, write);
	return st;
}

/* Abandons the copy-assist job of the WQE at sq_next (flushed, or the peer is leaving). */
void sv_req_assist_abandon(struct sv_qp *qp)
{
	if (qp->assist_job && qp->peer)
		shm_assist_close(&qp->peer->page->assist, qp->assist_job);
	qp->assist_job = 0;
}

static enum tx_result tx_rdma(struct sv_qp *qp, struct sv_peer *peer, struct sv_send_wqe *w)
{
	bool write = w->opcode != IBV_WR_RDMA_READ;
	uint32_t need = write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	bool reliable = sv_qp_type_reliable(type);
	struct iovec iov[SV_IOV_MAX];
	enum ibv_wc_status st;
	uint64_t total, va = 0;
	int n_iov;

	st = wqe_iov(qp, w, write ? 0 : IBV_ACCESS_LOCAL_WRITE, iov, &n_iov, &total);
	if (st) {
		sv_req_assist_abandon(qp); /* deregistered while a job of it waited */
		sv_wqe_done(w, st);
		return TX_DONE;
	}
	/* An XRC target checks keys against the PD of the SRQ the request names, which only
	 * its own library knows: XRC RDMA goes through the responder. */
	if (!peer->cma || type == IBV_QPT_XRC_SEND)
		return tx_rdma_bounce(qp, peer, w, iov, n_iov, total, reliable);
	/* Writes still in the responder's fifo land first: a copy now could overtake them. */
	if (qp->fifo_writes_out)
		return TX_BLOCKED;
	if (total) {
		/* IBA 9.4.x: a zero-length RDMA operation checks no key. */
		st = remote_range(peer, w->rkey, w->remote_addr, total, need, &va);
		if (!st && assist_wanted(qp, w, total)) {
			bool pending;

			st = tx_assisted(qp, peer, w, iov, n_iov, va, total, write, &pending);
			if (pending)
				return TX_BLOCKED;
		} else if (!st) {
			st = sv_cma_copy(peer->pid, iov, n_iov, va, total, write);
		}
		if (st && qp->assist_job)
			sv_req_assist_abandon(qp); /* the keys changed while it waited */
	}
	if (st) {
		if (!reliable) {
			/* UC has no acknowledgements: a write the responder refuses is lost. */
			sv_wqe_done(w, IBV_WC_SUCCESS);
			return TX_DONE;
		}
		if (st == IBV_WC_REM_ACCESS_ERR) {
			/* The responder's QP enters Error too (IBA C9-*: access violation). */
			struct shm_msg m = { .op = SHM_OP_ACCESS_ERR,
					     .src_qpn = qp->ibv.qp_base.qp_num };

			(void)sv_put_msg(peer, &m, NULL, NULL, 0, 0);
		}
		sv_wqe_done(w, st);
		return TX_DONE;
	}
	count_tx(qp, peer, 1, total, TX_CMA);
	w->byte_len = write ? 0 : (uint32_t)total;
	if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		return tx_send(qp, peer, w, reliable);
	sv_wqe_done(w, IBV_WC_SUCCESS);
	return TX_DONE;
}

static enum tx_result tx_atomic(struct sv_qp *qp, struct sv_peer *peer, struct sv_send_wqe *w)
{
	struct shm_msg m = { .op = SHM_OP_ATOMIC, .src_qpn = qp->ibv.qp_base.qp_num,
			     .xrc_srqn = w->xrc_srqn };
	uint32_t max = qp->attr.max_rd_atomic ? qp->attr.max_rd_atomic : 1;
	struct iovec iov[SV_IOV_MAX];
	enum ibv_wc_status st;
	uint64_t total;
	int n_iov;

	st = local_iov(qp, w, IBV_ACCESS_LOCAL_WRITE, iov, &n_iov, &total);
	if (st || total != 8) {
		sv_wqe_done(w, st ? st : IBV_WC_LOC_LEN_ERR);
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
	if (sv_put_msg(peer, &m, NULL, NULL, 0, 0))
		return TX_BLOCKED;
	count_tx(qp, peer, 1, 8, TX_FIFO);
	w->msn = ++qp->next_msn;
	w->state = SV_WQE_WAIT;
	w->byte_len = 8;
	qp->rd_atomic_out++;
	return TX_WAIT;
}

/*
 * The status of a WR whose message reaches nobody (UD to an unreachable QP or into
 * another partition, UC with no peer or across partitions, RC with no peer): @lost, once
 * its local buffers pass the gather's checks. IBA 10.6.3: the L_Key is checked when the
 * requester reads the data, so a bad SGE fails the WR whether or not anyone would have
 * received it.
 */
static enum ibv_wc_status lost_status(struct sv_qp *qp, struct sv_send_wqe *w,
				      enum ibv_wc_status lost)
{
	bool local_write = w->opcode == IBV_WR_RDMA_READ ||
			   w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			   w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
	struct iovec iov[SV_IOV_MAX];
	enum ibv_wc_status st;
	uint64_t total;
	int n_iov;

	st = wqe_iov(qp, w, local_write ? IBV_ACCESS_LOCAL_WRITE : 0, iov, &n_iov, &total);
	if (st)
		return st;
	if (qp->ibv.qp_base.qp_type == IBV_QPT_UD && total > 4096)
		return IBV_WC_LOC_LEN_ERR; /* as tx_send: one packet of the path MTU */
	return lost;
}

/*
 * A UD send to a multicast group (QPN 0xFFFFFF, a multicast GID, IBA 10.5.2.5): one copy
 * to each QP of this host attached to the group, the members listed once per WQE. The
 * WQE completes when every member has its copy (or could not be reached: UD loses it).
 */
static enum tx_result tx_mcast(struct sv_qp *qp, struct sv_send_wqe *w)
{
	if (!qp->mc_valid) {
		enum ibv_wc_status st = lost_status(qp, w, IBV_WC_SUCCESS);
		int n;

		if (st) { /* checked once, whether or not the group has members */
			sv_wqe_done(w, st);
			return TX_DONE;
		}
		n = sv_mcast_members(&w->ud.dgid, qp->mc_qpn, SV_MCAST_MEMBERS_MAX);

		qp->mc_n = n > 0 ? n : 0;
		qp->mc_next = 0;
		qp->mc_valid = true;
	}
	while (qp->mc_next < qp->mc_n) {
		bool unreachable;
		struct sv_peer *peer = ud_dest(qp, qp->mc_qpn[qp->mc_next], &unreachable);

		if (!peer && !unreachable)
			return TX_BLOCKED; /* attaching (sv_qp_tx_connect) */
		if (peer && partition_ok(qp, peer)) {
			if (tx_send(qp, peer, w, false) == TX_BLOCKED)
				return TX_BLOCKED;
			if (w->status != IBV_WC_SUCCESS) {
				qp->mc_valid = false;
				return TX_DONE;
			}
			w->state = SV_WQE_POSTED; /* more copies to go */
		}
		qp->mc_next++;
	}
	qp->mc_valid = false;
	sv_wqe_done(w, IBV_WC_SUCCESS);
	return TX_DONE;
}

/*
 * IBV_WR_BIND_MW (IBA 10.6.7.2): the window (its current key in swap's low half) takes
 * the range [remote_addr, + compare_add) of the MR whose lkey is swap's high half, with
 * the access in imm_data, under the new key in rkey. A zero length unbinds.
 */
static enum ibv_wc_status mw_bind(struct sv_qp *qp, const struct sv_send_wqe *w)
{
	struct sv_mr_table *t = sv_qp_ctx(qp)->mrs;
	uint32_t mw_key = (uint32_t)w->swap, mr_lkey = (uint32_t)(w->swap >> 32);
	const struct sv_mr_entry *cur = &t->slots[sv_mr_key_index(mw_key)];
	struct sv_mr_entry e = { .flags = SV_MR_F_MW };
	uint64_t va;

	if (!mw_key || atomic_load_explicit(&cur->key, memory_order_acquire) != mw_key ||
	    !(cur->flags & SV_MR_F_MW))
		return IBV_WC_MW_BIND_ERR;
	e.pd = cur->pd;
	if (w->compare_add) {
		/* The MR must allow binds, be of the window's PD and hold the range. */
		if (!mr_lkey || sv_mr_check(t->slots, mr_lkey, e.pd, IBV_ACCESS_MW_BIND,
					    w->remote_addr, w->compare_add, &va) != SV_ACCESS_OK)
			return IBV_WC_MW_BIND_ERR;
		e.access = w->imm_data & (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
					  IBV_ACCESS_REMOTE_ATOMIC);
		e.iova = (w->imm_data & IBV_ACCESS_ZERO_BASED) ? 0 : w->remote_addr;
		e.length = w->compare_add;
		e.vaddr = va;
	}
	return sv_mr_table_rekey(t, mw_key, &e, w->rkey) ? IBV_WC_MW_BIND_ERR : IBV_WC_SUCCESS;
}

static enum tx_result tx_one(struct sv_qp *qp, struct sv_send_wqe *w)
{
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	struct sv_peer *peer = qp->peer;

	if (type == IBV_QPT_UD) {
		bool unreachable;

		if (w->ud.remote_qpn == 0xffffff && w->ud.is_global &&
		    sv_gid_is_multicast(&w->ud.dgid))
			return tx_mcast(qp, w);
		peer = ud_dest(qp, w->ud.remote_qpn, &unreachable);
		if (unreachable || (peer && !partition_ok(qp, peer))) {
			/* UD is unreliable: a datagram to nobody, or to another partition, is
			 * simply lost. */
			sv_wqe_done(w, lost_status(qp, w, IBV_WC_SUCCESS));
			return TX_DONE;
		}
		return peer ? tx_send(qp, peer, w, false) : TX_BLOCKED;
	}
	/* Local work: in order with the rest of the send queue, no peer involved. */
	if (w->opcode == IBV_WR_BIND_MW) {
		sv_wqe_done(w, mw_bind(qp, w));
		return TX_DONE;
	}
	if (w->opcode == IBV_WR_LOCAL_INV) {
		sv_wqe_done(w, sv_mr_table_invalidate_mw(sv_qp_ctx(qp)->mrs, w->imm_data,
							 qp->pd->handle) ?
			       IBV_WC_LOC_PROT_ERR : IBV_WC_SUCCESS);
		return TX_DONE;
	}
	if (!peer && sv_hint(qp->connect_pending)) {
		/* Attach with no lock held (sv_qp_tx_connect), then transmit. */
		qp->want_connect = true;
		qp->want_qpn = qp->attr.dest_qp_num;
		return TX_BLOCKED;
	}
	if (!peer) {
		/* RC: nobody answers, the transport retries run out (IBA 9.7.5.1.1).
		 * UC: nobody acknowledges anything; the message is lost. */
		sv_wqe_done(w, lost_status(qp, w, sv_qp_type_reliable(type) ?
						  IBV_WC_RETRY_EXC_ERR : IBV_WC_SUCCESS));
		return TX_DONE;
	}
	if (!peer_ready(peer))
		return TX_BLOCKED; /* a NIC would retransmit until the peer reaches RTR */
	if (!partition_ok(qp, peer)) {
		/* The responder drops every packet (IBA 10.9.3): RC's retries run out, UC's
		 * message is lost. A NIC would retry for timeout x retry_cnt first. */
		sv_wqe_done(w, lost_status(qp, w, sv_qp_type_reliable(type) ?
						  IBV_WC_RETRY_EXC_ERR : IBV_WC_SUCCESS));
		return TX_DONE;
	}
	switch (w->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
		return tx_send(qp, peer, w, sv_qp_type_reliable(type));
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_WRITE:
		return tx_rdma(qp, peer, w);
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return tx_atomic(qp, peer, w);
	default:
		sv_wqe_done(w, IBV_WC_LOC_QP_OP_ERR);
		return TX_DONE;
	}
}

/* Reports finished WQEs in order (IBA 10.8: completions in the order posted). */
void sv_req_complete_locked(struct sv_qp *qp)
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
				.opcode = sv_wc_opcode_of(w->opcode),
				.byte_len = w->byte_len,
				.qp_num = qp->ibv.qp_base.qp_num,
			};

			sv_cq_push(qp->scq, &wc, false);
		}
		wq->tail++;
		if (w->status != IBV_WC_SUCCESS) {
			qp->sq_failed = true;
			/* IBA 10.8.3.3: a completion error takes an RC QP to Error, a UC or UD
			 * QP's send queue to SQ Error (10.3.1); what follows is flushed once the
			 * state changes. */
			sv_qp_fail(qp, sv_qp_type_reliable(qp->ibv.qp_base.qp_type) ? SV_ERR_NO_EVENT
											   : SV_ERR_TO_SQE);
			break;
		}
	}
}

enum {
	SV_BATCH = 64,         /* RDMA WRITEs per process_vm_writev call */
	SV_FIFO_BATCH_MIN = 8, /* a post list at least this long of tiny writes ... */
};

/*
 * ... goes as one-slot messages that the responder's library places (~50 ns each),
 * instead of process_vm_writev, whose kernel side pins the remote page once per remote
 * iovec (~400 ns each here, docs/performance.md). A lone WRITE still goes by CMA, which
 * needs nothing from the target (its application may spin on the memory).
 */
static uint32_t tx_tiny_writes(struct sv_qp *qp, struct sv_peer *peer, uint32_t n)
{
	struct shm_write_rec rec[SV_BATCH];
	struct shm_msg m = { .op = SHM_OP_WRITES, .src_qpn = qp->ibv.qp_base.qp_num };

	for (uint32_t i = 0; i < n; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, qp->sq_next + i);
		struct iovec iov[SV_IOV_MAX];
		uint64_t bytes;
		uint32_t off = 0;
		int k;

		/* Checked by tx_write_batch already: cannot fail here. */
		(void)wqe_iov(qp, w, 0, iov, &k, &bytes);
		for (int j = 0; j < k; j++) {
			memcpy(rec[i].data + off, iov[j].iov_base, iov[j].iov_len);
			off += (uint32_t)iov[j].iov_len;
		}
		rec[i].addr = w->remote_addr;
		rec[i].rkey = w->rkey;
		rec[i].len = (uint32_t)bytes;
	}
	/* One message, one reservation and one publishing fence for the whole burst (or
	 * what of it fits); each write has its msn, the message carries the last. */
	for (;; n /= 2) {
		if (!n) {
			sv_set_hint(qp->tx_blocked, true);
			return 0;
		}
		m.aux = n;
		m.len = n * (uint32_t)sizeof(rec[0]);
		m.msn = qp->next_msn + n;
		if (!sv_put_msg(peer, &m, rec, NULL, 0, m.len))
			break;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, qp->sq_next + i);

		w->msn = ++qp->next_msn;
		w->state = SV_WQE_WAIT;
		count_tx(qp, peer, 1, rec[i].len, TX_FIFO);
	}
	qp->sq_next += n;
	qp->fifo_writes_out += n;
	return n;
}

static uint32_t tx_write_batch(struct sv_qp *qp)
{
	struct sv_peer *peer = qp->peer;
	struct iovec local[SV_BATCH * 4], remote[SV_BATCH];
	uint64_t len[SV_BATCH];
	int n_local = 0, n = 0, tiny = 0;
	ssize_t done;

	/* RC and UC: UD has no connection, XRC writes go through the responder (tx_rdma). */
	if (!peer || !peer->cma || !peer_ready(peer) || !pkeys_match(qp, peer) || qp->assist_job ||
	    (qp->ibv.qp_base.qp_type != IBV_QPT_RC && qp->ibv.qp_base.qp_type != IBV_QPT_UC))
		return 0;
	for (uint32_t i = qp->sq_next; i != qp->sq.head && n < SV_BATCH; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, i);
		struct iovec iov[SV_IOV_MAX];
		uint64_t va, bytes;
		int k;

		if (w->opcode != IBV_WR_RDMA_WRITE || (w->send_flags & IBV_SEND_FENCE))
			break;
		if (wqe_iov(qp, w, 0, iov, &k, &bytes) || n_local + k > SV_BATCH * 4 || !bytes ||
		    remote_range(peer, w->rkey, w->remote_addr, bytes, IBV_ACCESS_REMOTE_WRITE, &va))
			break;
		if (bytes >= SV_ASSIST_MIN && sv_assist_on())
			break; /* one at a time: the responder may help (tx_rdma) */
		memcpy(&local[n_local], iov, (size_t)k * sizeof(iov[0]));
		n_local += k;
		remote[n].iov_base = (void *)(uintptr_t)va;
		remote[n].iov_len = bytes;
		len[n++] = bytes;
		tiny += bytes <= SHM_TINY;
	}
	if (n < 2)
		return 0; /* a lone WRITE takes the ordinary path */
	if (n >= SV_FIFO_BATCH_MIN && tiny == n)
		return tx_tiny_writes(qp, peer, (uint32_t)n);
	if (qp->fifo_writes_out)
		return 0; /* tx_rdma waits for them */
	done = process_vm_writev(peer->pid, local, (unsigned long)n_local, remote,
				 (unsigned long)n, 0);
	if (done < 0)
		return 0; /* tx_one redoes the first and reports why */
	/* Whole messages landed in order; a short transfer stops at the one that failed. */
	for (int i = 0; i < n; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, qp->sq_next);

		if ((uint64_t)done < len[i])
			return (uint32_t)i;
		done -= (ssize_t)len[i];
		count_tx(qp, peer, 1, len[i], TX_CMA);
		w->byte_len = 0;
		sv_wqe_done(w, IBV_WC_SUCCESS);
		qp->sq_next++;
	}
	return (uint32_t)n;
}

void sv_qp_tx_locked(struct sv_qp *qp)
{
	enum ibv_qp_state st = qp->attr.qp_state;

	/* IBA 10.8.3.3: nothing after a failed WR executes (it will be flushed). */
	if (st != IBV_QPS_RTS || atomic_load(&qp->err_event) >= 0 || qp->tx_stopped)
		return;
	sv_set_hint(qp->tx_blocked, false);
	while (qp->sq_next != qp->sq.head) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, qp->sq_next);
		enum tx_result r;

		/* IBA 10.8.3.1: a fenced WR waits for earlier READs and atomics. */
		if ((w->send_flags & IBV_SEND_FENCE) && qp->rd_atomic_out)
			break;
		if (w->opcode == IBV_WR_RDMA_WRITE && tx_write_batch(qp))
			continue;
		r = tx_one(qp, w);
		if (r == TX_BLOCKED) {
			sv_set_hint(qp->tx_blocked, true);
			break;
		}
		qp->sq_next++;
		if (r == TX_DONE && w->status != IBV_WC_SUCCESS) {
			qp->tx_stopped = true;
			break;
		}
	}
	sv_req_complete_locked(qp);
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
		if (!sv_msn_le(w->msn, msn))
			break;
		sv_wqe_done(w, IBV_WC_SUCCESS);
		if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
		    w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || w->opcode == IBV_WR_RDMA_READ)
			qp->rd_atomic_out--;
		else if (w->opcode == IBV_WR_RDMA_WRITE && qp->fifo_writes_out)
			qp->fifo_writes_out--;
	}
	if (sv_hint(qp->rnr_deadline) && sv_msn_le(qp->rnr_msn, msn))
		sv_set_hint(qp->rnr_deadline, 0);
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

/*
 * The WQE a NAK for @msn is about: a message in pieces carries the msn of its last piece,
 * so it is the first waiting WQE at or after @msn — or the one still being sent in
 * pieces, which then stops there.
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

/* A piece of the answer to a READ (bounce copy): into the WQE's buffers. */
static void read_resp(struct sv_qp *qp, const struct shm_msg *m, uint64_t pos)
{
	struct sv_send_wqe *w = waiting_wqe(qp, m->msn);
	struct iovec iov[SV_IOV_MAX], piece[SV_IOV_MAX];
	uint64_t total;
	int n, k, off = 0;

	if (!w || local_iov(qp, w, IBV_ACCESS_LOCAL_WRITE, iov, &n, &total))
		return;
	k = sv_iov_slice(iov, n, m->u.rdma.addr, m->len, piece);
	for (int i = 0; i < k; i++) {
		shm_fifo_get(qp->rx, pos, (uint32_t)off, piece[i].iov_base, (uint32_t)piece[i].iov_len);
		off += (int)piece[i].iov_len;
	}
	if (m->flags & SHM_F_LAST) {
		acked_upto(qp, m->msn - 1);
		sv_wqe_done(w, IBV_WC_SUCCESS);
		qp->rd_atomic_out--;
	}
}

void sv_req_answer(struct sv_qp *qp, const struct shm_msg *m, uint64_t pos)
{
	struct sv_send_wqe *w;

	sv_spin_lock(&qp->sq.lock);
	switch (m->op) {
	case SHM_OP_ACK:
		acked_upto(qp, m->msn);
		break;
	case SHM_OP_READ_RESP:
		read_resp(qp, m, pos);
		break;
	case SHM_OP_ATOMIC_RESP:
		w = waiting_wqe(qp, m->msn);
		if (w && w->num_sge == 1) {
			uint64_t va;

			/* The original value lands in our buffer (checked at transmit). */
			if (!sv_mr_check(sv_qp_ctx(qp)->mrs->slots, w->sge[0].lkey, qp->pd->handle,
					 IBV_ACCESS_LOCAL_WRITE, w->sge[0].addr, 8, &va))
				memcpy((void *)(uintptr_t)va, &m->u.atomic_value, 8);
		}
		acked_upto(qp, m->msn);
		break;
	case SHM_OP_NAK:
		acked_upto(qp, m->msn - 1);
		w = nak_target(qp, m->msn);
		if (w)
			sv_wqe_done(w, (enum ibv_wc_status)m->aux);
		qp->tx_stopped = true;
		break;
	case SHM_OP_RNR:
		/* IBA 9.7.5.2.8: wait; after rnr_retry tries (7: forever) give up. */
		if (qp->attr.rnr_retry != 7 && !sv_hint(qp->rnr_deadline)) {
			uint32_t t = m->aux < 32 ? rnr_timer_us[m->aux] : rnr_timer_us[0];

			qp->rnr_msn = m->msn;
			uint64_t wait = (uint64_t)t * 1000 * (qp->attr.rnr_retry + 1u);

			sv_set_hint(qp->rnr_deadline, sv_now_ns() + wait);
		}
		break;
	default:
		break;
	}
	/* An answer may free what a fenced WR or the max_rd_atomic limit waits for. */
	if (qp->sq_next != qp->sq.head)
		sv_qp_tx_locked(qp);
	else
		sv_req_complete_locked(qp);
	pthread_spin_unlock(&qp->sq.lock);
}

int sv_req_timers(struct sv_qp *qp)
{
	struct sv_send_wqe *w;

	if (!sv_hint(qp->rnr_deadline) || sv_now_ns() < sv_hint(qp->rnr_deadline))
		return 0;
	/* IBA 9.7.5.2.8: the RNR retries ran out. */
	w = waiting_wqe(qp, qp->rnr_msn);
	sv_set_hint(qp->rnr_deadline, 0);
	if (w) {
		acked_upto(qp, w->msn - 1);
		sv_wqe_done(w, IBV_WC_RNR_RETRY_EXC_ERR);
		if (qp->peer)
			atomic_store(&qp->peer->page->rnr_abandon, w->msn);
		sv_req_complete_locked(qp);
	}
	return 1;
}


void sv_req_fail_waiting(struct sv_qp *qp, enum ibv_wc_status status)
{
	for (uint32_t i = qp->sq.tail; i != qp->sq_next; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, i);

		if (w->state == SV_WQE_WAIT) {
			/* Behind a WR whose error is already reported, the QP is on its way to
			 * Error: what follows is flushed, not failed anew (IBA 10.8.3.3). */
			sv_wqe_done(w, qp->sq_failed ? IBV_WC_WR_FLUSH_ERR : status);
			break;
		}
	}
	sv_req_complete_locked(qp);
}
