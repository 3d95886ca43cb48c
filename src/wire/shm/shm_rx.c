/*
 * The shm wire's receive side: the messages in a QP's inbound fifo, decoded into the
 * core's headers and handed to the responder (requests) or the completer (answers),
 * their payload copied out of the ring (or pulled from the requester with
 * process_vm_readv) only where the core says; and the responder's half of copy assist.
 *
 * Trust: the peer may be another user's process and write anything into our fifo and
 * its page. Every length and count read from a message is bounded here or by the core's
 * checks; a message the fifo's format cannot hold poisons the QP (Error, until RESET).
 */
#include "wire/shm/shm_wire.h"

#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/sv_qp_data.h"
#include "core/sv_qp_table.h"
#include "core/sv_sge.h"
#include "util/sv_log.h"

/* Where a delivered segment's bytes are, for the core to copy out (struct sv_payload). */
struct shm_payload {
	struct sv_payload p;
	struct sv_qp *qp;
	uint64_t pos;                  /* the message in our fifo (FIFO, RSGE) */
	const unsigned char *buf;      /* RECORD: a burst record's data */
	_Atomic uint64_t *count;       /* the counter its bytes go to, or NULL */
	const struct shm_rsge *rs;     /* RSGE: the requester's buffers */
	uint32_t n_rs;
	pid_t pid;
};

/* The payload follows the header in the ring. */
static enum ibv_wc_status copy_fifo(const struct sv_payload *pl, uint64_t off,
				    const struct iovec *dst, int n, uint64_t len)
{
	const struct shm_payload *p = (const struct shm_payload *)pl;
	struct shm_fifo *rx = shm_qp(p->qp)->rx;
	uint64_t done = 0;

	for (int i = 0; i < n && done < len; i++) {
		uint32_t take = (uint32_t)(dst[i].iov_len < len - done ? dst[i].iov_len : len - done);

		shm_fifo_get(rx, p->pos, (uint32_t)(off + done), dst[i].iov_base, take);
		done += take;
	}
	if (p->count)
		sv_count(p->count, done);
	return IBV_WC_SUCCESS;
}

/* A tiny WRITE's data, in its record. */
static enum ibv_wc_status copy_record(const struct sv_payload *pl, uint64_t off,
				      const struct iovec *dst, int n, uint64_t len)
{
	const struct shm_payload *p = (const struct shm_payload *)pl;
	uint64_t done = 0;

	if (off + len > SHM_TINY)
		return IBV_WC_LOC_LEN_ERR;
	for (int i = 0; i < n && done < len; i++) {
		size_t take = dst[i].iov_len < len - done ? dst[i].iov_len : len - done;

		shm_copy_to_app(dst[i].iov_base, p->buf + off + done, take);
		done += take;
	}
	if (p->count)
		sv_count(p->count, done);
	return IBV_WC_SUCCESS;
}

/* Rendezvous: pulled from the requester's buffers, one copy (process_vm_readv). */
static enum ibv_wc_status copy_pull(const struct sv_payload *pl, uint64_t off,
				    const struct iovec *dst, int n, uint64_t len)
{
	const struct shm_payload *p = (const struct shm_payload *)pl;
	struct iovec piece[SV_IOV_MAX];
	uint64_t at = 0, done = 0;

	for (uint32_t i = 0; i < p->n_rs && done < len; i++) {
		uint64_t a = p->rs[i].addr, l = p->rs[i].len;

		/* The part of this buffer that is bytes [off, off + len) of the message. */
		if (at + l <= off) {
			at += l;
			continue;
		}
		if (off > at) {
			a += off - at;
			l -= off - at;
		}
		if (l > len - done)
			l = len - done;
		if (!p->pid || shm_cma_copy(p->pid, piece, sv_iov_slice(dst, n, done, l, piece), a,
					    l, false))
			return IBV_WC_LOC_QP_OP_ERR;
		done += l;
		at = off + done;
	}
	if (done < len)
		return IBV_WC_LOC_QP_OP_ERR; /* the list names fewer bytes than the message */
	if (p->count)
		sv_count(p->count, done);
	return IBV_WC_SUCCESS;
}

/* The core's header of message @m. */
static void decode(const struct shm_msg *m, struct sv_hdr *h)
{
	*h = (struct sv_hdr){ .msn = m->msn, .src_qpn = m->src_qpn, .imm = m->imm,
			      .xrc_srqn = m->xrc_srqn };
	if (m->flags & SHM_F_FIRST)
		h->flags |= SV_F_FIRST;
	if (m->flags & SHM_F_LAST)
		h->flags |= SV_F_LAST;
	if (m->flags & SHM_F_IMM)
		h->flags |= SV_F_IMM;
	if (m->flags & SHM_F_SOLICITED)
		h->flags |= SV_F_SOLICITED;
	switch (m->op) {
	case SHM_OP_SEND: {
		bool whole = (m->flags & SHM_F_FIRST) && (m->flags & SHM_F_LAST);

		h->op = SV_OP_SEND;
		h->rkey = m->u.rdma.rkey;
		h->len = m->len;
		if (m->flags & SHM_F_GRH) {
			h->flags |= SV_F_GRH;
			h->qkey = m->aux;
		}
		/* In pieces: aux is the whole length, the address the piece's offset. */
		h->total = whole || !(m->flags & SHM_F_INLINE) ? m->len : m->aux;
		h->offset = whole ? 0 : m->u.rdma.addr;
		break;
	}
	case SHM_OP_WRITE_IMM:
		h->op = SV_OP_WRITE;
		h->flags |= SV_F_FIRST | SV_F_LAST | SV_F_PLACED;
		h->total = m->len;
		break;
	case SHM_OP_WRITE:
		h->op = SV_OP_WRITE;
		h->len = m->len;
		h->total = m->aux;
		h->raddr = m->u.rdma.addr;
		h->rkey = m->u.rdma.rkey;
		break;
	case SHM_OP_READ_REQ:
		h->op = SV_OP_READ_REQ;
		h->flags |= SV_F_FIRST | SV_F_LAST;
		h->total = m->len;
		h->raddr = m->u.rdma.addr;
		h->rkey = m->u.rdma.rkey;
		break;
	case SHM_OP_ATOMIC:
		h->op = SV_OP_ATOMIC;
		h->flags = SV_F_FIRST | SV_F_LAST | (m->flags & SHM_F_CMP_SWP ? SV_F_CMP_SWP : 0);
		h->total = 8;
		h->raddr = m->u.atomic.addr;
		h->rkey = m->u.atomic.rkey;
		h->compare_add = m->u.atomic.compare_add;
		h->swap = m->u.atomic.swap;
		break;
	case SHM_OP_WRITES:
		h->op = SV_OP_WRITE; /* a burst: each record its own (rx_writes) */
		break;
	case SHM_OP_ACCESS_ERR:
		h->op = SV_OP_TERMINATE;
		h->status = IBV_WC_REM_ACCESS_ERR;
		break;
	case SHM_OP_ACK:
		h->op = SV_OP_ACK;
		break;
	case SHM_OP_NAK:
	case SHM_OP_RNR:
		h->op = m->op == SHM_OP_NAK ? SV_OP_NAK : SV_OP_RNR;
		h->status = m->aux;
		break;
	case SHM_OP_READ_RESP:
		h->op = SV_OP_READ_RESP;
		h->len = m->len;
		h->offset = m->u.rdma.addr;
		break;
	case SHM_OP_ATOMIC_RESP:
		h->op = SV_OP_ATOMIC_RESP;
		h->value = m->u.atomic_value;
		break;
	default:
		h->op = 0; /* unknown: ignored */
		break;
	}
}

/*
 * A burst of tiny WRITEs, record by record (burst_next counts those delivered, should
 * the responder hold one). Each is a WRITE of its own, with its own msn.
 */
static enum sv_rx rx_writes(struct sv_qp *qp, const struct shm_msg *m, const struct sv_hdr *h0,
			    uint64_t pos)
{
	struct shm_qp *s = shm_qp(qp);
	uint32_t n = m->aux, first = m->msn - (n - 1);
	struct shm_payload p = { .p.copy = copy_record, .qp = qp,
				 .count = &qp->cnt.rx_fifo_bytes };
	struct sv_hdr h = *h0;

	if (!n || (uint64_t)n * sizeof(struct shm_write_rec) > m->len) {
		h.op = SV_OP_BAD; /* malformed */
		return sv_resp_deliver(qp, &h, &p.p);
	}
	h.op = SV_OP_WRITE;
	h.flags |= SV_F_FIRST | SV_F_LAST;
	for (; s->burst_next < n; s->burst_next++) {
		struct shm_write_rec r;

		shm_fifo_get(s->rx, pos, s->burst_next * (uint32_t)sizeof(r), &r, sizeof(r));
		h.msn = first + s->burst_next;
		h.len = r.len > SHM_TINY ? SHM_TINY : r.len;
		h.total = h.len;
		h.raddr = r.addr;
		h.rkey = r.rkey;
		p.buf = r.data;
		if (sv_resp_deliver(qp, &h, &p.p) == SV_RX_HOLD)
			return SV_RX_HOLD;
	}
	s->burst_next = 0;
	return SV_RX_CONSUMED;
}

static int rx_acked(struct sv_qp *qp, uint64_t acked);

/*
 * Before a request of the peer's is handled: the sends of ours its acknowledgement covers
 * complete first, as on a wire where the ACK goes ahead of what the peer sends next (the
 * peer stores the word before its receive completes, so before it could answer: read
 * after the request, the word covers what the request answers). READs and atomics wait
 * for their answers, which may still be behind in the fifo (rx_acked). Under rx_busy.
 */
static enum sv_rx rx_acked_first(struct sv_qp *qp)
{
	struct shm_qp *s = shm_qp(qp);
	uint64_t acked = atomic_load_explicit(&s->page->acked, memory_order_acquire);
	struct sv_hdr h;

	if (acked == atomic_load_explicit(&s->acked_seen, memory_order_relaxed) ||
	    acked == s->acked_sends)
		return SV_RX_CONSUMED;
	if (!atomic_load_explicit(&s->sent_reads, memory_order_relaxed))
		return rx_acked(qp, acked) < 0 ? SV_RX_HOLD : SV_RX_CONSUMED;
	h = (struct sv_hdr){ .op = SV_OP_ACK, .flags = SV_F_NO_READS,
			     .src_qpn = (uint32_t)(acked >> 32), .msn = (uint32_t)acked };
	if (sv_comp_deliver(qp, &h, NULL) == SV_RX_HOLD)
		return SV_RX_HOLD;
	s->acked_sends = acked;
	return SV_RX_CONSUMED;
}

static enum sv_rx rx_one(struct sv_qp *qp, const struct shm_msg *m, uint64_t pos)
{
	struct shm_qp *s = shm_qp(qp);
	struct shm_rsge rs[SV_IOV_MAX];
	struct shm_payload p = { .p.copy = copy_fifo, .qp = qp, .pos = pos,
				 .count = &qp->cnt.rx_fifo_bytes };
	struct sv_hdr h;

	decode(m, &h);
	if (!h.op)
		return SV_RX_CONSUMED;
	if (h.op > SV_OP_REQ_MAX) {
		p.count = NULL; /* the requester counted what it asked for */
		return sv_comp_deliver(qp, &h, &p.p);
	}
	if (rx_acked_first(qp) == SV_RX_HOLD)
		return SV_RX_HOLD;
	if (sv_qp_type_reliable(qp->ibv.qp_base.qp_type)) {
		uint32_t ab = atomic_load_explicit(&s->page->rnr_abandon, memory_order_acquire);

		/* The requester gave up on this one after RNR retries: never accepted. */
		if (ab && (int32_t)(ab - m->msn) <= 0 && h.op != SV_OP_TERMINATE)
			h.flags |= SV_F_ABANDONED;
	} else {
		h.flags |= SV_F_KEEP; /* held, it stays at the fifo's head */
	}
	if (m->op == SHM_OP_WRITES)
		return rx_writes(qp, m, &h, pos);
	if (m->op == SHM_OP_SEND && !(m->flags & SHM_F_INLINE)) {
		/* Rendezvous: the payload is a list of the requester's buffers. */
		p.p.copy = copy_pull;
		p.n_rs = m->aux < SV_IOV_MAX ? m->aux : SV_IOV_MAX;
		shm_fifo_get(s->rx, pos, 0, rs, p.n_rs * (uint32_t)sizeof(rs[0]));
		p.rs = rs;
		p.pid = s->peer ? s->peer->proc->pid : 0;
		p.count = &qp->cnt.rx_cma_bytes;
	}
	return sv_resp_deliver(qp, &h, &p.p);
}

/* Whether handling @op copies into or out of registered memory (sv_mr_place_begin):
 * everything but the bare answers and notifications. */
static bool op_places(uint8_t op)
{
	return op != SHM_OP_ACK && op != SHM_OP_NAK && op != SHM_OP_RNR &&
	       op != SHM_OP_WRITE_IMM && op != SHM_OP_ACCESS_ERR;
}

/*
 * The acknowledgement in our page (shm_tx.c), @acked as read before the fifo pass, once
 * every message the peer published before it is consumed. An ACK covers a READ or
 * atomic whose answer went in the fifo before it, and must not complete it first: a QP
 * that sent one waits until the fifo's head has passed its tail (read now: at least what
 * it was when the word was read), as another of the peer's threads may have reserved
 * an earlier slot it has not published yet. A QP that sent none skips the look at the
 * producers' line. Answers from after the word may have gone first; its ACK then finds
 * its WQEs done already. Under rx_busy. 1: delivered; 0: nothing new; -1: not yet.
 */
static int rx_acked(struct sv_qp *qp, uint64_t acked)
{
	struct shm_qp *s = shm_qp(qp);
	struct sv_hdr h;

	if (acked == atomic_load_explicit(&s->acked_seen, memory_order_relaxed))
		return 0;
	if (atomic_load_explicit(&s->sent_reads, memory_order_relaxed) &&
	    (int64_t)(atomic_load_explicit(&s->rx->head, memory_order_relaxed) -
		      atomic_load_explicit(&s->rx->tail, memory_order_acquire)) < 0)
		return -1;
	/* (Built here, not at the top: its clearing is most of an empty call's cost.) */
	h = (struct sv_hdr){ .op = SV_OP_ACK, .src_qpn = (uint32_t)(acked >> 32),
			     .msn = (uint32_t)acked };
	/* A claimed transmit may have sent what it answers: the next poll looks again. */
	if (sv_comp_deliver(qp, &h, NULL) == SV_RX_HOLD)
		return -1;
	atomic_store_explicit(&s->acked_seen, acked, memory_order_relaxed);
	return 1;
}

int shm_rx_acked(struct sv_qp *qp)
{
	return rx_acked(qp, atomic_load_explicit(&shm_qp(qp)->page->acked, memory_order_acquire));
}

int shm_rx_poll(struct sv_qp *qp)
{
	struct shm_qp *s = shm_qp(qp);
	struct shm_slot *slot;
	uint64_t pos, acked;
	bool placing = false;
	int n = 0;

	/* Nothing arrived and nothing is owed: no read-modify-write on the poll path. */
	acked = atomic_load_explicit(&s->page->acked, memory_order_acquire);
	if (atomic_load_explicit(&s->rx_poisoned, memory_order_relaxed) ||
	    (!shm_fifo_look(s->rx) && !sv_resp_owes(qp) &&
	     acked == atomic_load_explicit(&s->acked_seen, memory_order_relaxed)) ||
	    atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		return 0;
	while (n < SHM_RX_BUDGET && (slot = shm_fifo_peek(s->rx, &pos))) {
		struct shm_msg m;

		memcpy(&m, slot->hdr, sizeof(m));
		if (!shm_msg_slots(&m)) {
			/* Nothing after it can be found: the fifo is closed until RESET. */
			sv_dbg("qp %u: a message of %u slots from the peer: protocol error",
			       qp->ibv.qp_base.qp_num, m.nslots);
			atomic_store_explicit(&s->rx_poisoned, true, memory_order_relaxed);
			sv_qp_fail(qp, SV_ERR_EVENT(IBV_EVENT_QP_FATAL));
			break;
		}
		if (!placing && op_places(m.op)) {
			sv_mr_place_begin(); /* a deregistration waits for what follows */
			placing = true;
		}
		if (rx_one(qp, &m, pos) == SV_RX_HOLD)
			break;
		shm_fifo_release(s->rx, m.nslots);
		n++;
	}
	if (placing)
		sv_mr_place_end();
	n += rx_acked(qp, acked) > 0;
	sv_resp_flush(qp);
	atomic_flag_clear_explicit(&qp->rx_busy, memory_order_release);
	return n;
}

/* ---------------------------------------------------------------------------------------- */
/* copy assist (shm_assist.h): the responder's half                                          */

/* The requester's buffers named by the job, checked against its key table and the PD of
 * its QP (the helper copies only what the requester registered). */
static bool assist_theirs(struct shm_peer *peer, struct shm_assist *a, uint32_t n_sge, bool write,
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
static bool assist_chunk(struct sv_qp *qp, struct shm_peer *peer, struct shm_assist *a, uint32_t i)
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
	if (!sv_resp_access(qp, (uint32_t)(op >> 32), addr + off, n,
			    write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ, false, &va) ||
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
	done = syscall(write ? SYS_process_vm_readv : SYS_process_vm_writev, peer->proc->pid, &ours,
		       1ul, part, (unsigned long)k, 0ul);
	return done == (ssize_t)n;
}

static bool assist_possible(struct sv_qp *qp)
{
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;

	uint32_t st = atomic_load_explicit(&qp->pub.state, memory_order_relaxed);
	struct shm_peer *peer = shm_qp(qp)->peer;

	return peer && peer->cma && (type == IBV_QPT_RC || type == IBV_QPT_UC) &&
	       (st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_SQE);
}

int shm_rx_assist(struct sv_qp *qp)
{
	struct shm_qp *s = shm_qp(qp);
	struct shm_assist *a;
	uint64_t c;
	bool able;
	int n = 0;

	if (!shm_assist_pending(&s->page->assist) || !shm_assist_on() ||
	    atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		return 0;
	/* The peer stays while we hold rx_busy. A job we cannot help with is still taken,
	 * as failed: its requester copies it, and we do not look at it again. */
	a = &s->page->assist;
	able = assist_possible(qp);
	sv_mr_place_begin();
	while (n < 0x10000 && shm_assist_take_back(a, &c)) {
		uint32_t job = shm_assist_job(c);

		if (!able || !assist_chunk(qp, s->peer, a, shm_assist_back(c) - 1))
			atomic_store_explicit(&a->failed, job, memory_order_relaxed);
		shm_assist_count(a, job);
		n++;
	}
	sv_mr_place_end();
	atomic_flag_clear_explicit(&qp->rx_busy, memory_order_release);
	return n;
}

