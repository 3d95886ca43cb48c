/*
 * The shm wire's transmit side: messages into the peer's fifo (shm_send), RDMA WRITE and
 * READ straight into or out of the peer's memory with process_vm_writev/readv (the
 * direct op, which checks the key table and page the peer publishes first, and offers a
 * large copy to the peer's progress thread: copy assist, shm_assist.h), and runs of
 * WRITEs in one system call or one message (write_batch).
 */
#include "wire/shm/shm_wire.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/sv_qp_table.h"
#include "core/sv_sge.h"
#include "util/sv_lock.h"
#include "util/sv_log.h"
#include "util/sv_time.h"

/* Where a transmitted message's payload went, for the counters (softverbs_query_qp):
 * the core counts the messages, the wire the path. */
static void count_path(struct sv_qp *qp, const struct shm_peer *peer, _Atomic uint64_t *path,
		       uint64_t bytes)
{
	if (path)
		sv_count(path, bytes);
	atomic_store_explicit(&qp->cnt.tx_copy, peer->cma ? SV_COPY_CMA : SV_COPY_BOUNCE,
			      memory_order_relaxed);
}

/* The responder's checks, done on the peer's published page and keys. */
static enum ibv_wc_status remote_range(const struct shm_peer *peer, uint32_t rkey, uint64_t addr,
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
enum ibv_wc_status shm_cma_copy(pid_t pid, const struct iovec *local, int n_local,
				uint64_t remote, uint64_t len, bool write)
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

/*
 * The peer's consumer sleeps and must be woken (an eventfd write): now, or with @defer
 * (a QP whose requester holds its send queue's lock) once the lock is dropped
 * (shm_qp_flush). One wake-up waits at a time: a second peer's, rare (a multicast
 * fan-out to sleeping members), is done at once.
 */
static void wake(struct shm_qp *defer, struct shm_peer *peer)
{
	struct shm_peer *none = NULL;

	if (!defer || (!atomic_compare_exchange_strong(&defer->wake, &none, peer) && none != peer))
		shm_conn_wake(peer);
}

void shm_qp_flush(struct sv_qp *qp)
{
	struct shm_qp *s = shm_qp(qp);
	struct shm_peer *peer;

	if (!atomic_load_explicit(&s->wake, memory_order_relaxed))
		return;
	/* Counted while it writes: a peer let go of meanwhile is not freed under us
	 * (shm_forget_wake). */
	atomic_fetch_add(&s->waking, 1);
	peer = atomic_exchange(&s->wake, NULL);
	if (peer)
		shm_conn_wake(peer);
	atomic_fetch_sub(&s->waking, 1);
}

void shm_forget_wake(struct shm_qp *s, struct shm_peer *peer)
{
	struct shm_peer *p = peer;

	if (!peer)
		return;
	if (atomic_compare_exchange_strong(&s->wake, &p, NULL))
		shm_conn_wake(peer);
	while (atomic_load(&s->waking))
		sched_yield();
}

/* Writes a message into @peer's fifo: header, then @payload (or @iov). -EAGAIN if full.
 * The wake-up it may need: wake(). */
int shm_put_msg(struct shm_qp *defer, struct shm_peer *peer, struct shm_msg *m,
		const void *payload, const struct iovec *iov, int n_iov, uint32_t len)
{
	uint32_t n = shm_fifo_slots_for(len);
	struct shm_slot *slot;
	uint64_t pos;

	/* @defer names the requester's sends (under sq.lock, or claimed); the rest are the
	 * responder's answers (under rx_busy): each keeps its own copy of the head. */
	if (shm_fifo_reserve(peer->fifo, n, defer ? &peer->cached_head : &peer->cached_head_ans,
			     &pos))
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
		wake(defer, peer);
	return 0;
}

/*
 * SENDs up to this size ride in the fifo (two copies, no system call); larger ones are
 * pulled by the responder (one copy, one process_vm_readv). SOFTVERBS_SHM_INLINE_MAX
 * moves the crossover for measurement (docs/performance.md).
 */
static uint32_t inline_max(void)
{
	static _Atomic uint32_t value = UINT32_MAX;
	uint32_t v = atomic_load_explicit(&value, memory_order_relaxed);

	if (v == UINT32_MAX) {
		const char *env = getenv("SOFTVERBS_SHM_INLINE_MAX");
		unsigned long n = env ? strtoul(env, NULL, 0) : SHM_INLINE_MAX;

		v = n > SHM_CHUNK * 4 ? SHM_CHUNK * 4 : (uint32_t)n;
		atomic_store_explicit(&value, v, memory_order_relaxed);
	}
	return v;
}

/* The peer a message of @h goes to: the connected QP, or the UD destination. */
static struct shm_peer *peer_of(struct sv_qp *qp, const struct sv_hdr *h)
{
	struct shm_qp *s = shm_qp(qp);

	if (qp->ibv.qp_base.qp_type == IBV_QPT_UD)
		return shm_ud_dest(s, h->dest_qpn);
	return s->peer;
}

/*
 * One message carries a SEND whole when it fits in the fifo (up to the inline maximum),
 * or when the responder can pull it (CMA, and a reliable QP keeps the buffers until the
 * acknowledgement); else it goes in pieces of SHM_CHUNK. RDMA WRITE and READ data in
 * messages (the bounce copy) go in pieces too.
 */
uint64_t shm_seg_max(struct sv_qp *qp, const struct sv_hdr *h)
{
	struct shm_peer *peer = peer_of(qp, h);

	switch (h->op) {
	case SV_OP_SEND:
		if (qp->ibv.qp_base.qp_type == IBV_QPT_UD || h->total <= inline_max() ||
		    (peer && peer->cma && sv_qp_type_reliable(qp->ibv.qp_base.qp_type)))
			return UINT64_MAX;
		return SHM_CHUNK;
	case SV_OP_WRITE:
	case SV_OP_READ_RESP:
		return SHM_CHUNK;
	default:
		return UINT64_MAX;
	}
}

static uint8_t msg_flags(const struct sv_hdr *h)
{
	uint8_t f = 0;

	if (h->flags & SV_F_FIRST)
		f |= SHM_F_FIRST;
	if (h->flags & SV_F_LAST)
		f |= SHM_F_LAST;
	if (h->flags & SV_F_IMM)
		f |= SHM_F_IMM;
	if (h->flags & SV_F_SOLICITED)
		f |= SHM_F_SOLICITED;
	return f;
}

/* A SEND segment: in the ring, or (whole and larger than the inline maximum) as the list
 * of our buffers the responder pulls. */
static int send_send(struct sv_qp *qp, struct shm_qp *defer, struct shm_peer *peer,
		     struct shm_msg *m, const struct sv_hdr *h, const struct iovec *iov, int n_iov)
{
	bool whole = (h->flags & SV_F_FIRST) && (h->flags & SV_F_LAST);
	struct shm_rsge rs[SV_IOV_MAX];
	uint64_t data = h->flags & SV_F_GRH ? h->len - 40 : h->len;

	m->op = SHM_OP_SEND;
	m->u.rdma.rkey = h->rkey; /* SEND_WITH_INV: the key to invalidate */
	if (qp->ibv.qp_base.qp_type == IBV_QPT_UD) {
		m->flags |= SHM_F_INLINE | SHM_F_GRH;
		m->aux = h->qkey;
	} else if (whole && h->len <= inline_max()) {
		m->flags |= SHM_F_INLINE;
	} else if (whole && peer->cma && sv_qp_type_reliable(qp->ibv.qp_base.qp_type)) {
		/* Rendezvous: the responder pulls straight from our buffers. */
		for (int i = 0; i < n_iov; i++) {
			rs[i].addr = (uintptr_t)iov[i].iov_base;
			rs[i].len = iov[i].iov_len;
		}
		m->aux = (uint32_t)n_iov;
		if (shm_put_msg(defer, peer, m, rs, NULL, 0, (uint32_t)(n_iov * sizeof(rs[0]))))
			return -EAGAIN;
		count_path(qp, peer, NULL, 0); /* counted by the responder, which pulls it */
		return 0;
	} else {
		m->flags |= SHM_F_INLINE;
		m->aux = (uint32_t)h->total;
		m->u.rdma.addr = h->offset;
	}
	if (shm_put_msg(defer, peer, m, NULL, iov, n_iov, h->len))
		return -EAGAIN;
	count_path(qp, peer, &qp->cnt.tx_fifo_bytes, data);
	return 0;
}

int shm_send(struct sv_qp *qp, const struct sv_hdr *h, const struct iovec *iov, int n_iov)
{
	struct shm_peer *peer = peer_of(qp, h);
	struct shm_msg m = { .flags = msg_flags(h), .len = h->len, .msn = h->msn, .imm = h->imm,
			     .src_qpn = h->src_qpn, .xrc_srqn = h->xrc_srqn };
	/* Requests are sent under the send queue's lock: their wake-up waits for it to go. */
	struct shm_qp *defer = h->op < SV_OP_REQ_MAX ? shm_qp(qp) : NULL;

	if (!peer)
		return 0; /* nobody to send to: lost, as on a wire with no one at the end */
	switch (h->op) {
	case SV_OP_SEND:
		return send_send(qp, defer, peer, &m, h, iov, n_iov);
	case SV_OP_WRITE:
		if (h->flags & SV_F_PLACED) {
			/* The data was placed: consume a receive for the immediate. */
			m.op = SHM_OP_WRITE_IMM;
			m.len = (uint32_t)h->total;
			return shm_put_msg(defer, peer, &m, NULL, NULL, 0, 0);
		}
		m.op = SHM_OP_WRITE;
		m.aux = (uint32_t)h->total;
		m.u.rdma.addr = h->raddr + h->offset;
		m.u.rdma.rkey = h->rkey;
		if (shm_put_msg(defer, peer, &m, NULL, iov, n_iov, h->len))
			return -EAGAIN;
		count_path(qp, peer, &qp->cnt.tx_fifo_bytes, h->len);
		return 0;
	case SV_OP_READ_REQ:
		m.op = SHM_OP_READ_REQ;
		m.flags = SHM_F_LAST;
		m.len = (uint32_t)h->total;
		m.u.rdma.addr = h->raddr;
		m.u.rdma.rkey = h->rkey;
		/* Before it is published: whoever acknowledges it saw this (shm_rx_poll). */
		atomic_store_explicit(&shm_qp(qp)->sent_reads, true, memory_order_relaxed);
		if (shm_put_msg(defer, peer, &m, NULL, NULL, 0, 0))
			return -EAGAIN;
		/* the answer comes through our fifo */
		count_path(qp, peer, &qp->cnt.tx_fifo_bytes, h->total);
		return 0;
	case SV_OP_ATOMIC:
		m.op = SHM_OP_ATOMIC;
		m.flags = h->flags & SV_F_CMP_SWP ? SHM_F_CMP_SWP : 0;
		m.len = 8;
		m.u.atomic.addr = h->raddr;
		m.u.atomic.rkey = h->rkey;
		m.u.atomic.compare_add = h->compare_add;
		m.u.atomic.swap = h->swap;
		atomic_store_explicit(&shm_qp(qp)->sent_reads, true, memory_order_relaxed);
		if (shm_put_msg(defer, peer, &m, NULL, NULL, 0, 0))
			return -EAGAIN;
		count_path(qp, peer, &qp->cnt.tx_fifo_bytes, 8);
		return 0;
	case SV_OP_TERMINATE:
		m.op = SHM_OP_ACCESS_ERR;
		m.aux = h->status;
		return shm_put_msg(defer, peer, &m, NULL, NULL, 0, 0);
	case SV_OP_ACK:
		/* Cumulative, and nothing to carry but the msn: a store into the requester's
		 * page, where a message took a slot, a header to encode and one to decode
		 * (its reader keeps it in order with the fifo: shm_rx_poll). A sleeping
		 * requester is woken as for a message (its arming looks at the word). */
		atomic_store_explicit(&peer->page->acked, (uint64_t)h->src_qpn << 32 | h->msn,
				      memory_order_release);
		if (shm_fifo_take_armed(peer->fifo))
			wake(defer, peer);
		return 0;
	case SV_OP_NAK:
	case SV_OP_RNR:
		m.op = h->op == SV_OP_NAK ? SHM_OP_NAK : SHM_OP_RNR;
		m.aux = h->status;
		return shm_put_msg(defer, peer, &m, NULL, NULL, 0, 0);
	case SV_OP_READ_RESP:
		m.op = SHM_OP_READ_RESP;
		m.flags = h->flags & SV_F_LAST ? SHM_F_LAST : 0;
		m.u.rdma.addr = h->offset;
		if (shm_put_msg(defer, peer, &m, NULL, iov, n_iov, h->len))
			return -EAGAIN;
		sv_count(&qp->cnt.rx_fifo_bytes, h->len);
		return 0;
	case SV_OP_ATOMIC_RESP:
		m.op = SHM_OP_ATOMIC_RESP;
		m.u.atomic_value = h->value;
		if (shm_put_msg(defer, peer, &m, NULL, NULL, 0, 0))
			return -EAGAIN;
		sv_count(&qp->cnt.rx_fifo_bytes, 8);
		return 0;
	default:
		return 0;
	}
}

/* ---------------------------------------------------------------------------------------- */
/* copy assist (shm_assist.h): a large one-sided copy the responder's progress thread helps */

enum {
	/* Smaller copies are not worth cutting: each piece costs a system call (~1.5 us). */
	SV_ASSIST_MIN = 2 * SHM_ASSIST_CHUNK + SHM_ASSIST_TAIL,
	SV_ASSIST_PROBE = 8, /* after a copy nobody helped with, every 8th offers help */
};
#define SHM_ASSIST_SPIN_NS 50000ull     /* waits this long for the helper's last chunks */
#define SHM_ASSIST_LATE_NS 1000000000ull /* a helper not done by then has failed */

/* SOFTVERBS_SHM_ASSIST=0 turns it off, both ways: this process neither offers its large
 * copies nor helps with its peers' (measurements; a responder's CPU kept to itself). */
bool shm_assist_on(void)
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

static bool assist_wanted(struct shm_qp *qp, const struct sv_send_wqe *w, uint64_t total)
{
	if (qp->assist_job)
		return true; /* resumed: the job is posted */
	if (total < SV_ASSIST_MIN || total > (1ull << 31) || w->num_sge > SHM_ASSIST_SGE ||
	    (w->send_flags & IBV_SEND_INLINE) || !shm_assist_on())
		return false;
	return qp->assist_helped || qp->assist_copies++ % SV_ASSIST_PROBE == 0;
}

/* Posts the job for the WQE's first @body bytes on the responder's page, wakes it. */
static void assist_post(struct shm_qp *qp, struct shm_peer *peer, const struct sv_send_wqe *w,
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
		shm_conn_wake(peer);
	qp->assist_job = job;
	qp->assist_deadline = 0;
}

/* Copies the message's bytes [off, off + len) (the local side sliced to match). */
static enum ibv_wc_status copy_part(pid_t pid, const struct iovec *iov, int n_iov, uint64_t va,
				    uint64_t off, uint64_t len, bool write)
{
	struct iovec part[SV_IOV_MAX];
	int k = sv_iov_slice(iov, n_iov, off, len, part);

	return shm_cma_copy(pid, part, k, va + off, len, write);
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
static enum ibv_wc_status tx_assisted(struct shm_qp *qp, struct shm_peer *peer,
				      const struct sv_send_wqe *w, const struct iovec *iov,
				      int n_iov, uint64_t va, uint64_t total, bool write,
				      bool *pending)
{
	struct shm_assist *a = &peer->page->assist;
	uint64_t body = total - SHM_ASSIST_TAIL, now, spin_end;
	uint32_t n = shm_assist_chunks(body), first, k, back = n, job;
	bool fresh = !qp->assist_job;
	pid_t pid = peer->proc->pid;
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
			st = copy_part(pid, iov, n_iov, va, (uint64_t)first * SHM_ASSIST_CHUNK,
				       total - (uint64_t)first * SHM_ASSIST_CHUNK, write);
			qp->assist_job = 0;
			qp->assist_helped = false;
			return st;
		}
		st = copy_part(pid, iov, n_iov, va, (uint64_t)first * SHM_ASSIST_CHUNK,
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
		qp->assist_deadline = now + SHM_ASSIST_LATE_NS;
	for (spin_end = now + SHM_ASSIST_SPIN_NS; !helper_finished(a, job, n - back);) {
		sv_cpu_relax();
		now = sv_now_ns();
		if (now < spin_end)
			continue;
		if (now < qp->assist_deadline) {
			*pending = true; /* left to progress: the requester tries again */
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
		st = copy_part(pid, iov, n_iov, va, (uint64_t)back * SHM_ASSIST_CHUNK,
			       body - (uint64_t)back * SHM_ASSIST_CHUNK, write);
	if (!st)
		st = copy_part(pid, iov, n_iov, va, body, total - body, write);
	return st;
}

void shm_direct_abandon(struct sv_qp *qp)
{
	struct shm_qp *s = shm_qp(qp);

	if (s->assist_job && s->peer)
		shm_assist_close(&s->peer->page->assist, s->assist_job);
	s->assist_job = 0;
}

enum sv_direct shm_direct(struct sv_qp *qp, struct sv_send_wqe *w, const struct iovec *iov,
			  int n_iov, uint64_t total, bool may_place, enum ibv_wc_status *status)
{
	struct shm_qp *s = shm_qp(qp);
	struct shm_peer *peer = s->peer;
	bool write = w->opcode != IBV_WR_RDMA_READ;
	uint32_t need = write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
	enum ibv_wc_status st = IBV_WC_SUCCESS;
	uint64_t va = 0;

	if (!peer || !peer->cma)
		return SV_DIRECT_NO;
	if (!may_place)
		return SV_DIRECT_PENDING;
	if (total) {
		/* IBA 9.4.x: a zero-length RDMA operation checks no key. */
		st = remote_range(peer, w->rkey, w->remote_addr, total, need, &va);
		if (!st && assist_wanted(s, w, total)) {
			bool pending;

			st = tx_assisted(s, peer, w, iov, n_iov, va, total, write, &pending);
			if (pending)
				return SV_DIRECT_PENDING;
		} else if (!st) {
			st = shm_cma_copy(peer->proc->pid, iov, n_iov, va, total, write);
		}
		if (st && s->assist_job)
			shm_direct_abandon(qp); /* the keys changed while it waited */
	}
	if (!st)
		count_path(qp, peer, &qp->cnt.tx_cma_bytes, total);
	*status = st;
	return SV_DIRECT_DONE;
}

/* ---------------------------------------------------------------------------------------- */
/* runs of WRITEs                                                                           */

enum {
	SHM_FIFO_BATCH_MIN = 8, /* a post list at least this long of tiny writes ... */
};

bool shm_batch_ready(struct sv_qp *qp, uint64_t first_len)
{
	struct shm_qp *s = shm_qp(qp);
	struct shm_peer *peer = s->peer;

	return peer && peer->cma && shm_peer_ready(peer) && shm_pkeys_match(qp, peer) &&
	       !s->assist_job && !(first_len >= SV_ASSIST_MIN && shm_assist_on());
}

/*
 * ... goes as one-slot records that the responder's library places (~50 ns each),
 * instead of process_vm_writev, whose kernel side pins the remote page once per remote
 * iovec (~400 ns each here, docs/performance.md). A lone WRITE still goes by CMA, which
 * needs nothing from the target (its application may spin on the memory).
 */
static uint32_t tiny_writes(struct sv_qp *qp, struct shm_peer *peer, struct sv_batch_item *items,
			    uint32_t n, uint32_t first_msn)
{
	struct shm_write_rec rec[SV_BATCH_MAX];
	struct shm_msg m = { .op = SHM_OP_WRITES, .src_qpn = qp->ibv.qp_base.qp_num };
	uint64_t bytes = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t off = 0;

		for (int j = 0; j < items[i].n_iov; j++) {
			memcpy(rec[i].data + off, items[i].iov[j].iov_base, items[i].iov[j].iov_len);
			off += (uint32_t)items[i].iov[j].iov_len;
		}
		rec[i].addr = items[i].raddr;
		rec[i].rkey = items[i].rkey;
		rec[i].len = (uint32_t)items[i].len;
	}
	/* One message, one reservation and one publishing fence for the whole burst (or
	 * what of it fits); each write has its msn, the message carries the last. */
	for (;; n /= 2) {
		if (!n)
			return 0;
		m.aux = n;
		m.len = n * (uint32_t)sizeof(rec[0]);
		m.msn = first_msn + n - 1;
		if (!shm_put_msg(shm_qp(qp), peer, &m, rec, NULL, 0, m.len))
			break;
	}
	for (uint32_t i = 0; i < n; i++)
		bytes += rec[i].len;
	count_path(qp, peer, &qp->cnt.tx_fifo_bytes, bytes);
	return n;
}

uint32_t shm_write_batch(struct sv_qp *qp, struct sv_batch_item *items, uint32_t n,
			 uint32_t first_msn, bool may_place, bool *acked)
{
	struct shm_peer *peer = shm_qp(qp)->peer;
	struct iovec local[SV_BATCH_MAX * 4], remote[SV_BATCH_MAX];
	uint32_t m = 0, tiny = 0;
	int n_local = 0;
	ssize_t done;

	/* Each WRITE checked as the responder would (its published key table): the run
	 * stops at the first that fails (the ordinary path reports why), and before one
	 * large enough for the responder to help with (shm_direct). */
	for (; m < n; m++) {
		uint64_t va;

		if (remote_range(peer, items[m].rkey, items[m].raddr, items[m].len,
				 IBV_ACCESS_REMOTE_WRITE, &va) ||
		    (items[m].len >= SV_ASSIST_MIN && shm_assist_on()))
			break;
		memcpy(&local[n_local], items[m].iov, (size_t)items[m].n_iov * sizeof(local[0]));
		n_local += items[m].n_iov;
		remote[m].iov_base = (void *)(uintptr_t)va;
		remote[m].iov_len = items[m].len;
		tiny += items[m].len <= SHM_TINY;
	}
	if (m < 2)
		return 0; /* a lone WRITE takes the ordinary path */
	if (m >= SHM_FIFO_BATCH_MIN && tiny == m) {
		*acked = true;
		return tiny_writes(qp, peer, items, m, first_msn);
	}
	if (!may_place)
		return 0; /* the ordinary path waits for those */
	*acked = false;
	done = process_vm_writev(peer->proc->pid, local, (unsigned long)n_local, remote,
				 (unsigned long)m, 0);
	if (done < 0)
		return 0; /* the ordinary path redoes the first and reports why */
	/* Whole messages landed in order; a short transfer stops at the one that failed. */
	for (uint32_t i = 0; i < m; i++) {
		if ((uint64_t)done < items[i].len)
			return i;
		done -= (ssize_t)items[i].len;
		count_path(qp, peer, &qp->cnt.tx_cma_bytes, items[i].len);
	}
	return m;
}
