/*
 * The requester: walks the send queue in order and hands each WQE to the QP's wire as
 * messages (segments of at most the wire's size, each with its sequence number), or to
 * the wire's direct placement. Local checks (L_Key, PD, access, lengths), ordering,
 * fences, the max_rd_atomic limit and what a WR completes with are decided here; the
 * completer (sv_comp.c) reports them in order.
 */
#include <endian.h>
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/uio.h>

#include "core/sv_cq.h"
#include "core/sv_device.h"
#include "core/sv_mcast.h"
#include "core/sv_path.h"
#include "util/sv_lock.h"
#include "util/sv_log.h"

/* A message handed to the wire, for the counters (softverbs_query_qp; the wire counts
 * the path its payload took). */
static void count_msg(struct sv_qp *qp, uint64_t bytes)
{
	sv_count(&qp->cnt.tx_msgs, 1);
	sv_count(&qp->cnt.tx_bytes, bytes);
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
	return sv_wqe_sge_iov(qp, w, need, iov, n_iov, total);
}

/* A step of what a transmit waits for, done with no lock held (sv_qp_tx_connect). */
enum tx_step {
	STEP_NONE, /* not wanted */
	STEP_DONE, /* done: the transmit went on (it may want another step) */
	STEP_BUSY, /* another thread is doing it */
};

/*
 * Lists the members of the group the multicast WQE at sq_next sends to, with no lock
 * held (the wire may read a file to find them), and keeps them for its fan-out.
 */
static enum tx_step list_members(struct sv_qp *qp)
{
	uint32_t qpns[SV_MCAST_MEMBERS_MAX], gen;
	union ibv_gid mgid;
	int n;

	sv_spin_lock(&qp->sq.lock);
	if (!qp->want_members || qp->sq_next == qp->sq.head || qp->listing) {
		enum tx_step r = qp->listing ? STEP_BUSY : STEP_NONE;

		sv_spin_unlock(&qp->sq.lock);
		return r;
	}
	qp->listing = true;
	mgid = ((struct sv_send_wqe *)sv_wq_slot(&qp->sq, qp->sq_next))->ud.dgid;
	gen = qp->tx_gen;
	sv_spin_unlock(&qp->sq.lock);
	n = qp->wire->mcast_members ? qp->wire->mcast_members(qp, &mgid, qpns, SV_MCAST_MEMBERS_MAX)
				    : 0;
	sv_spin_lock(&qp->sq.lock);
	qp->listing = false;
	/* Still the same WQE? (a flush or reset in between forgets the wish) */
	if (qp->want_members && gen == qp->tx_gen) {
		qp->want_members = false;
		qp->mc_n = n > 0 ? n : 0;
		memcpy(qp->mc_qpn, qpns, (size_t)qp->mc_n * sizeof(qpns[0]));
		qp->mc_next = 0;
		qp->mc_valid = true;
		sv_qp_tx_locked(qp);
	}
	sv_spin_unlock(&qp->sq.lock);
	sv_qp_tx_done(qp);
	return STEP_DONE;
}

/* Attaches to the QP the transmit waits to reach (a UD destination, an RC peer found
 * late), with no lock held: it may block (shm: up to 2 s). */
static enum tx_step attach_wanted(struct sv_qp *qp)
{
	uint32_t qpn;
	void *conn = NULL;
	int err;

	sv_spin_lock(&qp->sq.lock);
	qpn = qp->want_qpn;
	/* One thread attaches at a time (the poster, or the progress thread): a second
	 * attach to the same QP would only be undone. */
	if (!qp->want_connect || qp->connecting) {
		enum tx_step r = qp->connecting ? STEP_BUSY : STEP_NONE;

		sv_spin_unlock(&qp->sq.lock);
		return r;
	}
	qp->connecting = true;
	sv_spin_unlock(&qp->sq.lock);
	err = qp->wire->connect(qp, qpn, &conn);
	/* The QP's peer changes under both rx_busy and sq.lock (the responder answers it). */
	sv_rx_lock(qp);
	sv_spin_lock(&qp->sq.lock);
	qp->connecting = false;
	/* Still wanted? (a reset in between forgets the wish) */
	if (qp->want_connect && qp->want_qpn == qpn) {
		qp->want_connect = false;
		conn = qp->wire->attach(qp, qpn, conn, err);
		if (qp->ibv.qp_base.qp_type != IBV_QPT_UD)
			sv_set_hint(qp->connect_pending, false);
		/* The responder's role is not held while transmitting (a claimed copy may take
		 * long): only the peer's change needed it. */
		sv_rx_unlock(qp);
		sv_qp_tx_locked(qp);
	} else {
		sv_rx_unlock(qp);
	}
	sv_spin_unlock(&qp->sq.lock);
	sv_qp_tx_done(qp);
	if (conn)
		qp->wire->release(qp, conn); /* not kept, or not wanted any more */
	/* An error found meanwhile is entered by the caller (sv_qp_settle). */
	return STEP_DONE;
}

enum {
	TX_CONNECT_ROUNDS = 4096, /* steps one call takes at most */
	TX_LIST_WAITS = 1000,     /* yields while another thread lists (tens of µs) */
};

/*
 * Does what the transmit waits for, step after step while each lets it reach the next:
 * a stream of multicast WQEs wants one listing each, and the poster lists and sends
 * them all before its post returns, as a NIC has sent them by then (mckey's sender
 * posts unsignaled sends and leaves at once: WQEs left for the progress thread, one a
 * pass, were flushed with its QPs and the receivers waited for ever). A listing by
 * another thread is waited for (it is short); an attach by another thread is not (it
 * may block for seconds): that thread goes on from there.
 */
void sv_qp_tx_connect(struct sv_qp *qp)
{
	int waits = 0;

	for (int round = 0; round < TX_CONNECT_ROUNDS; round++) {
		enum tx_step listed = list_members(qp);
		enum tx_step attached = attach_wanted(qp);

		if (listed == STEP_DONE || attached == STEP_DONE)
			continue;
		if (listed != STEP_BUSY || ++waits > TX_LIST_WAITS)
			return;
		sched_yield();
	}
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

/* DONE: the WQE is complete; WAIT: it waits for the responder; BLOCKED: try it again
 * later; GONE: a flush or reset took it while a claim copied for it. */
enum tx_result { TX_DONE, TX_WAIT, TX_BLOCKED, TX_GONE };

/*
 * Claims the transmit and drops sq.lock, for a copy that must not hold it (a direct
 * placement of any size, a run of WRITEs in one system call): nobody else transmits
 * meanwhile (sv_qp_tx_locked returns), and the wire's peer stays
 * (sv_qp_sq_lock_unclaimed). Returns the generation to check in tx_unclaim.
 */
static uint32_t tx_claim(struct sv_qp *qp)
{
	uint32_t gen = qp->tx_gen;

	qp->tx_claimed = true;
	sv_spin_unlock(&qp->sq.lock);
	sv_qp_tx_done(qp); /* what was sent before the copy goes before it */
	return gen;
}

/* Takes sq.lock back: false if the WQEs the claim was for were flushed meanwhile (their
 * completions are reported; a copy left pending is given up). */
static bool tx_unclaim(struct sv_qp *qp, uint32_t gen)
{
	sv_spin_lock(&qp->sq.lock);
	qp->tx_claimed = false;
	if (gen == qp->tx_gen)
		return true;
	if (qp->wire->direct_abandon)
		qp->wire->direct_abandon(qp);
	return false;
}

/*
 * The wire a WR goes on: a UD datagram to a GID that is not one of this host's goes on
 * the QP's far wire (multicast: the copies for this host's members on the QP's wire, one
 * datagram for the other hosts' on the far wire); everything else on the QP's wire.
 */
static const struct sv_wire_ops *tx_wire(struct sv_qp *qp, const struct sv_send_wqe *w)
{
	if (qp->mc_far)
		return qp->far; /* a multicast WQE's datagram for the other hosts (tx_mcast) */
	if (qp->far && qp->ibv.qp_base.qp_type == IBV_QPT_UD && w->ud.is_global &&
	    !sv_gid_is_multicast(&w->ud.dgid) &&
	    (qp->far_local || sv_host_find_gid(&sv_qp_ctx(qp)->host, &w->ud.dgid) < 0))
		return qp->far;
	return qp->wire;
}

/* A header for a request of @w from this QP. */
static struct sv_hdr req_hdr(struct sv_qp *qp, const struct sv_send_wqe *w, uint8_t op)
{
	/* (QP1's MADs go from QP 1, whatever QP carries them here: sv_qp_set_gsi) */
	struct sv_hdr h = { .op = op, .src_qpn = qp->gsi ? 1 : qp->ibv.qp_base.qp_num,
			    .xrc_srqn = w->xrc_srqn };

	return h;
}

/*
 * Hands a message to the wire in segments of at most its size (a segment each, when it
 * takes the whole message): each segment its own msn when @acked, the first and last
 * marked, the immediate on the last only. qp->tx_off keeps the
 * place when the wire fills.
 */
static enum tx_result tx_message(struct sv_qp *qp, struct sv_send_wqe *w, struct sv_hdr *proto,
				 const struct iovec *iov, int n_iov, uint64_t total, bool acked)
{
	const struct sv_wire_ops *wire = tx_wire(qp, w);
	uint8_t last_flags = proto->flags & (SV_F_IMM | SV_F_SOLICITED);
	uint64_t seg;

	/* A wire that reads the payload later: until it did, the buffer is not the
	 * application's again (IBA 10.8.3), so even a UC message waits for its ACK. */
	acked = acked || (wire->caps & SV_WIRE_LATE);
	proto->total = total;
	seg = total <= wire->seg_min ? total : wire->seg_max(qp, proto);
	do {
		uint64_t n = total - qp->tx_off < seg ? total - qp->tx_off : seg;
		struct iovec piece[SV_IOV_MAX];
		struct sv_hdr h = *proto;
		const struct iovec *part = iov;
		int k = n_iov;

		if (n != total) { /* a segment: its part of the data */
			k = sv_iov_slice(iov, n_iov, qp->tx_off, n, piece);
			part = piece;
		}

		h.len = (uint32_t)n;
		h.offset = qp->tx_off;
		/* The solicited flag goes on every segment (one RDMAP opcode per message: Send
		 * with Solicited Event), the immediate on the last. */
		h.flags &= (uint16_t) ~(SV_F_FIRST | SV_F_LAST | SV_F_IMM);
		if (qp->tx_off == 0)
			h.flags |= SV_F_FIRST;
		if (qp->tx_off + n == total)
			h.flags |= SV_F_LAST | last_flags;
		h.msn = acked ? qp->next_msn + 1 : 0;
		if (wire->send(qp, &h, part, k))
			return TX_BLOCKED;
		if (acked)
			qp->next_msn++;
		qp->tx_off += n;
	} while (qp->tx_off < total);
	qp->tx_off = 0;
	if (!acked) {
		sv_wqe_done(w, IBV_WC_SUCCESS);
		return TX_DONE;
	}
	w->msn = qp->next_msn;
	w->state = SV_WQE_WAIT;
	return TX_WAIT;
}

/* SEND (with immediate, with invalidate), and UD's datagrams. */
static enum tx_result tx_send(struct sv_qp *qp, struct sv_send_wqe *w, bool reliable)
{
	struct sv_hdr h = req_hdr(qp, w, SV_OP_SEND);
	struct iovec iov[SV_IOV_MAX + 1];
	unsigned char grh[SV_UD_GRH];
	enum ibv_wc_status st;
	enum tx_result r;
	uint64_t total;
	int n_iov;

	st = wqe_iov(qp, w, 0, iov, &n_iov, &total);
	if (st) {
		sv_wqe_done(w, st);
		return TX_DONE;
	}
	if (w->send_flags & IBV_SEND_SOLICITED)
		h.flags |= SV_F_SOLICITED;
	if (w->opcode == IBV_WR_SEND_WITH_IMM) {
		h.flags |= SV_F_IMM;
		h.imm = w->imm_data;
	}
	/* SEND_WITH_INV: the key the responder is to invalidate. */
	if (w->opcode == IBV_WR_SEND_WITH_INV)
		h.rkey = w->imm_data;
	if (qp->ibv.qp_base.qp_type == IBV_QPT_UD) {
		if (total > SV_UD_MTU) {
			sv_wqe_done(w, IBV_WC_LOC_LEN_ERR);
			return TX_DONE;
		}
		/* IBA 9.8.3: Q_Keys with the high bit set mean "use the sender QP's own". */
		h.qkey = (w->ud.remote_qkey & 0x80000000u) ? qp->attr.qkey : w->ud.remote_qkey;
		h.dest_qpn = qp->mc_valid && !qp->mc_far ? qp->mc_qpn[qp->mc_next]
						       : w->ud.remote_qpn;
		ud_grh(qp, w, grh);
		h.flags |= SV_F_GRH;
		memmove(&iov[1], &iov[0], (size_t)n_iov * sizeof(iov[0]));
		iov[0].iov_base = grh;
		iov[0].iov_len = SV_UD_GRH;
		n_iov++;
		total += SV_UD_GRH;
	}
	r = tx_message(qp, w, &h, iov, n_iov, total, reliable);
	if (r != TX_BLOCKED)
		count_msg(qp, h.flags & SV_F_GRH ? total - SV_UD_GRH : total);
	return r;
}

/* RDMA WRITE and READ as messages the responder executes (a wire without direct
 * placement, or a peer the direct path cannot reach). */
static enum tx_result tx_rdma_msgs(struct sv_qp *qp, struct sv_send_wqe *w,
				   const struct iovec *iov, int n_iov, uint64_t total)
{
	uint32_t max = qp->attr.max_rd_atomic ? qp->attr.max_rd_atomic : 1;
	struct sv_hdr h;
	enum tx_result r;
	bool acked;

	if (w->opcode == IBV_WR_RDMA_READ) {
		if (qp->rd_atomic_out >= max)
			return TX_BLOCKED; /* IBA 9.5: max_rd_atomic outstanding */
		h = req_hdr(qp, w, SV_OP_READ_REQ);
		h.flags = SV_F_FIRST | SV_F_LAST;
		h.total = total;
		h.msn = qp->next_msn + 1;
		h.raddr = w->remote_addr;
		h.rkey = w->rkey;
		if (qp->wire->send(qp, &h, NULL, 0))
			return TX_BLOCKED;
		count_msg(qp, total);
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
	h = req_hdr(qp, w, SV_OP_WRITE);
	h.raddr = w->remote_addr;
	h.rkey = w->rkey;
	if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
		h.flags |= SV_F_IMM;
		h.imm = w->imm_data;
		if (w->send_flags & IBV_SEND_SOLICITED)
			h.flags |= SV_F_SOLICITED;
	}
	/* Even on UC the responder acknowledges these: a completed WRITE then means the data
	 * is in place, as with direct placement (UC never reports the responder's errors).
	 * Not on a lossy wire, which carries the IBA's UC: no acknowledgement, and nothing
	 * placed directly to overtake. */
	acked = sv_qp_type_reliable(qp->ibv.qp_base.qp_type) || !sv_qp_lossy(qp);
	r = tx_message(qp, w, &h, iov, n_iov, total, acked);
	if (r == TX_BLOCKED)
		return r;
	count_msg(qp, total);
	if (w->opcode == IBV_WR_RDMA_WRITE && acked)
		qp->msg_writes_out++;
	return r;
}

/* The immediate of a WRITE the wire placed: a notification that consumes a receive. */
static enum tx_result tx_write_imm_note(struct sv_qp *qp, struct sv_send_wqe *w, uint64_t total,
					bool reliable)
{
	struct sv_hdr h = req_hdr(qp, w, SV_OP_WRITE);

	h.flags = SV_F_FIRST | SV_F_LAST | SV_F_IMM | SV_F_PLACED;
	if (w->send_flags & IBV_SEND_SOLICITED)
		h.flags |= SV_F_SOLICITED;
	h.imm = w->imm_data;
	h.total = total;
	h.raddr = w->remote_addr;
	h.rkey = w->rkey;
	h.msn = reliable ? qp->next_msn + 1 : 0;
	if (qp->wire->send(qp, &h, NULL, 0))
		return TX_BLOCKED;
	if (!reliable) {
		sv_wqe_done(w, IBV_WC_SUCCESS);
		return TX_DONE;
	}
	w->msn = ++qp->next_msn;
	w->state = SV_WQE_WAIT;
	return TX_WAIT;
}

static enum tx_result tx_rdma(struct sv_qp *qp, struct sv_send_wqe *w)
{
	bool write = w->opcode != IBV_WR_RDMA_READ;
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	bool reliable = sv_qp_type_reliable(type);
	struct iovec iov[SV_IOV_MAX];
	enum ibv_wc_status st;
	enum sv_direct d;
	uint64_t total;
	int n_iov;

	st = wqe_iov(qp, w, write ? 0 : IBV_ACCESS_LOCAL_WRITE, iov, &n_iov, &total);
	if (st) {
		/* Deregistered while a direct placement of it waited. */
		if (qp->wire->direct_abandon)
			qp->wire->direct_abandon(qp);
		sv_wqe_done(w, st);
		return TX_DONE;
	}
	/* An XRC target checks keys against the PD of the SRQ the request names, which only
	 * its own library knows: XRC RDMA goes through the responder. */
	if (!qp->wire->direct || type == IBV_QPT_XRC_SEND)
		return tx_rdma_msgs(qp, w, iov, n_iov, total);
	/* The copy holds no lock: it works on a copy of the WQE (its slot may be flushed
	 * and posted again meanwhile). WRITEs sent as messages land first: a direct copy now
	 * could overtake them (may_place). */
	{
		_Alignas(struct sv_send_wqe) unsigned char
			buf[sizeof(struct sv_send_wqe) + SV_MAX_SGE * sizeof(struct ibv_sge)];
		struct sv_send_wqe *c = (struct sv_send_wqe *)buf;
		bool may_place = !qp->msg_writes_out;
		uint32_t gen;

		memcpy(c, w, sizeof(*w) + w->num_sge * sizeof(w->sge[0]));
		gen = tx_claim(qp);
		d = qp->wire->direct(qp, c, iov, n_iov, total, may_place, &st);
		if (!tx_unclaim(qp, gen))
			return TX_GONE;
	}
	if (d == SV_DIRECT_NO)
		return tx_rdma_msgs(qp, w, iov, n_iov, total);
	if (d == SV_DIRECT_PENDING)
		return TX_BLOCKED;
	if (st) {
		if (!reliable) {
			/* UC has no acknowledgements: a write the responder refuses is lost. */
			sv_wqe_done(w, IBV_WC_SUCCESS);
			return TX_DONE;
		}
		if (st == IBV_WC_REM_ACCESS_ERR) {
			/* The responder's QP enters Error too (IBA C9-*: access violation). */
			struct sv_hdr t = req_hdr(qp, w, SV_OP_TERMINATE);

			t.status = st;
			(void)qp->wire->send(qp, &t, NULL, 0);
		}
		sv_wqe_done(w, st);
		return TX_DONE;
	}
	count_msg(qp, total);
	w->byte_len = write ? 0 : (uint32_t)total;
	if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		return tx_write_imm_note(qp, w, total, reliable);
	sv_wqe_done(w, IBV_WC_SUCCESS);
	return TX_DONE;
}

static enum tx_result tx_atomic(struct sv_qp *qp, struct sv_send_wqe *w)
{
	struct sv_hdr h = req_hdr(qp, w, SV_OP_ATOMIC);
	uint32_t max = qp->attr.max_rd_atomic ? qp->attr.max_rd_atomic : 1;
	struct iovec iov[SV_IOV_MAX];
	enum ibv_wc_status st;
	uint64_t total;
	int n_iov;

	st = sv_wqe_sge_iov(qp, w, IBV_ACCESS_LOCAL_WRITE, iov, &n_iov, &total);
	if (st || total != 8) {
		sv_wqe_done(w, st ? st : IBV_WC_LOC_LEN_ERR);
		return TX_DONE;
	}
	/* IBA 9.5: at most max_rd_atomic RDMA READ/atomic requests outstanding. */
	if (qp->rd_atomic_out >= max)
		return TX_BLOCKED;
	h.flags = SV_F_FIRST | SV_F_LAST;
	if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP)
		h.flags |= SV_F_CMP_SWP;
	h.msn = qp->next_msn + 1;
	h.total = 8;
	h.raddr = w->remote_addr;
	h.rkey = w->rkey;
	h.compare_add = w->compare_add;
	h.swap = w->swap;
	if (qp->wire->send(qp, &h, NULL, 0))
		return TX_BLOCKED;
	count_msg(qp, 8);
	w->msn = ++qp->next_msn;
	w->state = SV_WQE_WAIT;
	w->byte_len = 8;
	qp->rd_atomic_out++;
	return TX_WAIT;
}

/* Whether the QP's connection can carry @w at all (its wire's caps, as negotiated). */
static bool tx_carried(struct sv_qp *qp, const struct sv_send_wqe *w)
{
	uint32_t caps = qp->wire->conn_caps ? qp->wire->conn_caps(qp) : qp->wire->caps;

	switch (w->opcode) {
	case IBV_WR_SEND_WITH_IMM:
		return caps & SV_WIRE_SEND_IMM;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return caps & SV_WIRE_IMM;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return caps & SV_WIRE_ATOMICS;
	default:
		return true;
	}
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
	struct iovec iov[SV_IOV_MAX];
	enum ibv_wc_status st;
	uint64_t total;
	int n_iov;

	st = wqe_iov(qp, w, sv_wqe_reads(w) ? IBV_ACCESS_LOCAL_WRITE : 0, iov, &n_iov, &total);
	if (st)
		return st;
	if (qp->ibv.qp_base.qp_type == IBV_QPT_UD && total > SV_UD_MTU)
		return IBV_WC_LOC_LEN_ERR; /* as tx_send: one packet of the path MTU */
	return lost;
}

/*
 * Whether @wire can take a datagram for UD QP @dest now: TX_DONE if the datagram is
 * lost (unreachable, another partition), TX_BLOCKED while an attach is wanted, else
 * TX_WAIT (send it).
 */
static enum tx_result ud_reach(struct sv_qp *qp, const struct sv_wire_ops *wire, uint32_t dest)
{
	switch (wire->reach(qp, dest)) {
	case SV_REACH_READY:
		return TX_WAIT;
	case SV_REACH_NO_PEER:
		/* Attach with no lock held (sv_qp_tx_connect), then transmit. */
		qp->want_connect = true;
		qp->want_qpn = dest;
		return TX_BLOCKED;
	case SV_REACH_WAIT:
	case SV_REACH_CONNECTING:
		return TX_BLOCKED;
	case SV_REACH_PARTITION:
		if (wire->dropped)
			wire->dropped(qp, dest);
		return TX_DONE;
	default:
		return TX_DONE;
	}
}

/*
 * A UD send to a multicast group (QPN 0xFFFFFF, a multicast GID, IBA 10.5.2.5): one copy
 * to each QP of this host attached to the group, the members listed once per WQE, then,
 * where the QP has a far wire, one datagram to the group for the other hosts' members
 * (IP multicast: their hosts joined the group). The WQE completes when every member
 * here has its copy (or could not be reached: UD loses it) and the datagram went.
 */
static enum tx_result tx_mcast(struct sv_qp *qp, struct sv_send_wqe *w)
{
	if (!qp->mc_valid) {
		enum ibv_wc_status st = lost_status(qp, w, IBV_WC_SUCCESS);

		if (st) { /* checked once, whether or not the group has members */
			sv_wqe_done(w, st);
			return TX_DONE;
		}
		qp->want_members = true; /* listed with no lock held: list_members */
		return TX_BLOCKED;
	}
	while (qp->mc_next < qp->mc_n) {
		enum tx_result r = ud_reach(qp, qp->wire, qp->mc_qpn[qp->mc_next]);

		if (r == TX_BLOCKED)
			return TX_BLOCKED; /* attaching (sv_qp_tx_connect) */
		if (r == TX_WAIT) {
			if (tx_send(qp, w, false) == TX_BLOCKED)
				return TX_BLOCKED;
			if (w->status != IBV_WC_SUCCESS) {
				qp->mc_valid = false;
				return TX_DONE;
			}
			w->state = SV_WQE_POSTED; /* more copies to go */
		}
		qp->mc_next++;
	}
	if (qp->far && qp->mc_next == qp->mc_n) {
		enum tx_result r;

		qp->mc_far = true;
		r = tx_send(qp, w, false);
		qp->mc_far = false;
		if (r == TX_BLOCKED)
			return TX_BLOCKED; /* the socket's buffer is full: this datagram again */
		if (w->status != IBV_WC_SUCCESS) {
			qp->mc_valid = false;
			return TX_DONE;
		}
		w->state = SV_WQE_POSTED;
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

/* RC: nobody answers (or the responder drops every packet, IBA 10.9.3), the transport
 * retries run out (IBA 9.7.5.1.1). UC: the message is lost. A NIC would retry for
 * timeout x retry_cnt first. */
static enum tx_result tx_lost(struct sv_qp *qp, struct sv_send_wqe *w)
{
	bool reliable = sv_qp_type_reliable(qp->ibv.qp_base.qp_type);

	sv_wqe_done(w, lost_status(qp, w, reliable ? IBV_WC_RETRY_EXC_ERR : IBV_WC_SUCCESS));
	return TX_DONE;
}

/*
 * RC to a peer that takes no requests (not in RTR yet, or gone to RESET): a NIC
 * retransmits each Local ACK Timeout (4.096 us x 2^timeout, IBA 9.7.6.1.3) up to
 * retry_cnt times, then fails the WR with RETRY_EXC_ERR. A timeout of 0 waits for ever,
 * as does UC (it has no timeout; a NIC would drop what it sends).
 */
static enum tx_result tx_wait_peer(struct sv_qp *qp, struct sv_send_wqe *w)
{
	uint64_t now;

	if (!sv_qp_type_reliable(qp->ibv.qp_base.qp_type) || !qp->attr.timeout)
		return TX_BLOCKED;
	now = sv_now_ns();
	if (!qp->wait_deadline) {
		uint64_t t = 4096ull << (qp->attr.timeout < 31 ? qp->attr.timeout : 31);

		qp->wait_deadline = now + t * (qp->attr.retry_cnt + 1u);
		return TX_BLOCKED;
	}
	if (now < qp->wait_deadline)
		return TX_BLOCKED;
	qp->wait_deadline = 0;
	return tx_lost(qp, w);
}

static enum tx_result tx_one(struct sv_qp *qp, struct sv_send_wqe *w)
{
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	bool reliable = sv_qp_type_reliable(type);
	enum tx_result r;

	if (type == IBV_QPT_UD) {
		if (w->ud.remote_qpn == 0xffffff && w->ud.is_global &&
		    sv_gid_is_multicast(&w->ud.dgid))
			return tx_mcast(qp, w);
		r = ud_reach(qp, tx_wire(qp, w), w->ud.remote_qpn);
		if (r == TX_DONE) {
			/* UD is unreliable: a datagram to nobody, or to another partition, is
			 * simply lost. */
			sv_wqe_done(w, lost_status(qp, w, IBV_WC_SUCCESS));
			return TX_DONE;
		}
		return r == TX_WAIT ? tx_send(qp, w, false) : TX_BLOCKED;
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
	switch (qp->wire->reach(qp, qp->attr.dest_qp_num)) {
	case SV_REACH_READY:
		qp->wait_deadline = 0;
		if (!tx_carried(qp, w)) {
			/* The connection has no form for it (iWARP without RFC 7306, or any
			 * SEND with immediate): a clear local error, nothing sent. */
			sv_wqe_done(w, IBV_WC_LOC_QP_OP_ERR);
			return TX_DONE;
		}
		break;
	case SV_REACH_WAIT:
		return tx_wait_peer(qp, w);
	case SV_REACH_CONNECTING:
		return TX_BLOCKED;
	case SV_REACH_NO_PEER:
		if (sv_hint(qp->connect_pending)) {
			/* Attach with no lock held (sv_qp_tx_connect), then transmit. */
			qp->want_connect = true;
			qp->want_qpn = qp->attr.dest_qp_num;
			return TX_BLOCKED;
		}
		return tx_lost(qp, w); /* nobody there */
	case SV_REACH_PARTITION:
		if (qp->wire->dropped)
			qp->wire->dropped(qp, qp->attr.dest_qp_num);
		return tx_lost(qp, w);
	case SV_REACH_UNREACHABLE:
		return tx_lost(qp, w);
	}
	switch (w->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
		return tx_send(qp, w, reliable);
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_WRITE:
		return tx_rdma(qp, w);
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return tx_atomic(qp, w);
	default:
		sv_wqe_done(w, IBV_WC_LOC_QP_OP_ERR);
		return TX_DONE;
	}
}

/*
 * A run of plain RDMA WRITEs from sq_next, offered to the wire at once (one system call
 * for all, or one message for a burst of tiny ones). Returns how many WQEs it took.
 */
static uint32_t tx_write_batch(struct sv_qp *qp)
{
	struct sv_batch_item items[SV_BATCH_MAX];
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	uint32_t n = 0, took, gen;
	bool acked = false, may_place;

	/* RC and UC: UD has no connection, XRC writes go through the responder (tx_rdma). */
	if (!qp->wire->write_batch || (type != IBV_QPT_RC && type != IBV_QPT_UC))
		return 0;
	for (uint32_t i = qp->sq_next; i != qp->sq.head && n < SV_BATCH_MAX; i++) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, i);
		struct sv_batch_item *it = &items[n];
		struct iovec iov[SV_IOV_MAX];
		uint64_t bytes;
		int k;

		if (w->opcode != IBV_WR_RDMA_WRITE || (w->send_flags & IBV_SEND_FENCE))
			break;
		if (wqe_iov(qp, w, 0, iov, &k, &bytes) || !bytes || k > 4 ||
		    (!n && !qp->wire->batch_ready(qp, bytes)))
			break;
		it->w = w;
		it->raddr = w->remote_addr;
		it->rkey = w->rkey;
		memcpy(it->iov, iov, (size_t)k * sizeof(iov[0]));
		it->n_iov = k;
		it->len = bytes;
		n++;
	}
	if (n < 2)
		return 0; /* a lone WRITE takes the ordinary path */
	may_place = !qp->msg_writes_out;
	gen = tx_claim(qp);
	took = qp->wire->write_batch(qp, items, n, qp->next_msn + 1, may_place, &acked);
	if (!tx_unclaim(qp, gen))
		return UINT32_MAX; /* flushed meanwhile */
	for (uint32_t i = 0; i < took; i++) {
		struct sv_send_wqe *w = items[i].w;

		count_msg(qp, items[i].len);
		w->byte_len = 0;
		if (acked) {
			w->msn = w->first_msn = ++qp->next_msn;
			w->state = SV_WQE_WAIT;
			qp->msg_writes_out++;
		} else {
			sv_wqe_done(w, IBV_WC_SUCCESS);
		}
		qp->sq_next++;
	}
	return took;
}

static void tx_locked(struct sv_qp *qp);

/* SV_WIRE_LOSSY: the transport timer starts, if it is not running (or an RNR wait is). */
static void timer_start(struct sv_qp *qp)
{
	if (sv_qp_lossy(qp) && !sv_hint(qp->ack_deadline) && !sv_hint(qp->resend_at) &&
	    sv_qp_ack_timeout_ns(qp))
		sv_set_hint(qp->ack_deadline, sv_now_ns() + sv_qp_ack_timeout_ns(qp));
}

void sv_qp_tx_locked(struct sv_qp *qp)
{
	tx_locked(qp);
	/* What the wire held back to send together goes before sq.lock is dropped. */
	if (qp->wire->tx_flush)
		qp->wire->tx_flush(qp);
}

static void tx_locked(struct sv_qp *qp)
{
	enum ibv_qp_state st = qp->attr.qp_state;

	/* IBA 10.8.3.3: nothing after a failed WR executes (it will be flushed). A claimed
	 * transmit is another thread's: it goes on when its copy is done. */
	if (st != IBV_QPS_RTS || atomic_load(&qp->err_event) != SV_ERR_NONE || qp->tx_stopped ||
	    qp->tx_claimed) {
		/* Nothing goes now: a kick (a wire's peer ready before RTS) is not left for
		 * the progress thread to spin on; RTS transmits anyway. */
		if (st != IBV_QPS_RTS && st != IBV_QPS_SQD)
			sv_set_hint(qp->tx_kick, false);
		return;
	}
	sv_set_hint(qp->tx_blocked, false);
	sv_set_hint(qp->tx_kick, false);
	while (qp->sq_next != qp->sq.head) {
		struct sv_send_wqe *w = sv_wq_slot(&qp->sq, qp->sq_next);
		enum tx_result r;

		/* IBA 10.8.3.1: a fenced WR waits for earlier READs and atomics. */
		if ((w->send_flags & IBV_SEND_FENCE) && qp->rd_atomic_out)
			break;
		if (w->opcode == IBV_WR_RDMA_WRITE) {
			uint32_t took = tx_write_batch(qp);

			if (took == UINT32_MAX)
				return; /* flushed while it copied */
			if (took)
				continue;
		}
		/* A resend (sv_comp.c, rewind) passes over what completed already: local
		 * work, which carries no msn. */
		if (w->state == SV_WQE_DONE) {
			qp->sq_next++;
			continue;
		}
		if (!qp->tx_off)
			w->first_msn = qp->next_msn + 1;
		r = tx_one(qp, w);
		if (r == TX_GONE)
			return;
		if (r == TX_WAIT)
			timer_start(qp);
		if (r == TX_BLOCKED) {
			/* A lossy wire with answers to come (its window, or max_rd_atomic, is
			 * full): the next answer kicks the transmit (sv_comp_deliver), the
			 * transport timer ends a wait for a lost one. Blocked, the progress
			 * thread would look again and again, taking the CPU and the lock the
			 * poster needs. */
			if (sv_qp_lossy(qp) && (qp->tx_off || qp->sq.tail != qp->sq_next)) {
				timer_start(qp);
				break;
			}
			atomic_store(&qp->tx_blocked, true); /* seq_cst: sv_engine_blocked */
			break;
		}
		qp->sq_next++;
		if (r == TX_DONE && w->status != IBV_WC_SUCCESS) {
			qp->tx_stopped = true;
			break;
		}
	}
	sv_comp_complete_locked(qp);
}
