/*
 * The iWARP wire's QP side and its ops table (iw_wire.h): QP numbers, the life of a QP's
 * TCP connection, and what the progress engine asks of a wire.
 *
 * Verbs-only setup (the QP knows its peer's GID and QPN at RTR): of the two QPs, the
 * one with the lower QPN (equal QPNs: the lower GID) connects to the peer host's
 * well-known port and sends the MPA request (iw_conn_dial); the other expects it, handed
 * over by whichever process of its host holds the port (iw_conn), and answers with the
 * MPA reply once it is in RTR. Until the reply, the requester's reach is WAIT: the
 * core's transport retry timer bounds the wait, as for a peer not in RTR on one host.
 */
#include "wire/iwarp/iw_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/sv_device.h"
#include "core/sv_engine.h"
#include "core/sv_mr.h"
#include "core/sv_path.h"
#include "util/sv_lock.h"
#include "util/sv_log.h"
#include "wire/iwarp/iw_conn.h"
#include "wire/sv_qpn.h"

enum {
	IW_BUDGET = 64,          /* FPDUs per poll */
	IW_DIAL_TIMEOUT_MS = 3000,
	IW_IRD_ORD_MAX = 128,    /* as siw (RFC 6581 words hold 14 bits) */
	IW_SETUP_GRACE_MS = 2000, /* the connection's set-up, before the retry timer runs */
	IW_REDIAL_MAX_MS = 4000,  /* ... and how long after it a port nobody answers is dialed */
	/* The passive side of an MPA exchange waits this long at most for the initiator's
	 * first FPDU before it sends (RFC 5044 §7.1 says until it comes; an initiator
	 * that waits for the responder to speak first, as ucmatose's client does, would wait
	 * for ever; a Linux siw initiator drops a connection whose reply has bytes behind it
	 * before it has read the reply: "peer sent extra data"). */
	IW_PEER_FIRST_MS = 50,
	/* The active side of an MPA exchange whose peer has said nothing this long after the
	 * connection came up sends one zero-length RDMA Write. A Linux siw responder (6.1)
	 * hands the socket to its QP only after it sent the reply: FPDUs that arrive in
	 * between are signalled to its connection manager, which ignores them, and stay
	 * unread until more bytes come (siw_accept, siw_qp_socket_assoc). An initiator that
	 * sent its first message and waits for the answer (rping) would wait for ever. */
	IW_NUDGE_MS = 50,
};

/* --- what this process set up once ---------------------------------------------------------- */

/* Sends and Writes complete once placed at the peer (as InfiniBand's acknowledgement
 * says), unless SOFTVERBS_IWARP_COMPLETE=sent (once TCP has them: RFC 5040 §5.1). */
static bool want_confirm(void)
{
	const char *e = getenv("SOFTVERBS_IWARP_COMPLETE");

	return !e || strcmp(e, "sent") != 0;
}

static bool want_crc(void)
{
	const char *e = getenv("SOFTVERBS_IWARP_CRC");

	return !e || strcmp(e, "0") != 0; /* on by default between softverbs hosts */
}

/*
 * A peer that goes silent (its host down, the path cut: no reset ever comes) is found
 * within SOFTVERBS_IWARP_TIMEOUT_MS (default 10 s; 0: never): TCP keepalive probes while
 * idle, TCP_USER_TIMEOUT while data waits for acknowledgement (RFC 5482). The socket then
 * fails (ETIMEDOUT) and the QP enters Error.
 */
static void tune(int fd)
{
	const char *e = getenv("SOFTVERBS_IWARP_TIMEOUT_MS");
	int ms = e ? atoi(e) : 10000, one = 1, idle, cnt, intvl = 1;

	/* Every FPDU goes at once (as siw does): an answer held back by Nagle's algorithm
	 * waits for a delayed acknowledgement. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (ms <= 0)
		return;
	idle = ms / 2000 > 0 ? ms / 2000 : 1;
	cnt = (ms - idle * 1000) / 1000 > 0 ? (ms - idle * 1000) / 1000 : 1;
	(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
}

static void incoming(int fd, const struct iw_params *p);

/* Engine lock held. */
static int claim_qpn(struct sv_qp *qp, uint32_t *qpn)
{
	static const struct sv_fork_hooks qpn_lock = {
		sv_qpn_atfork_prepare, sv_qpn_atfork_parent, sv_qpn_atfork_child,
	};
	int listen_fd, err;

	sv_engine_fork_hooks(&qpn_lock);
	err = sv_qpn_alloc(qpn, qp, &listen_fd);
	if (err)
		return err;
	/* A new block's attach socket is answered where sv_qpn_answer_blocks says (the shm
	 * wire's listener): a UD or XRC QP of this process may get a number of it. */
	if (listen_fd >= 0)
		sv_dbg("iwarp: qpn block of %u: nobody answers its attaches", *qpn);
	err = iw_conn_open_block_locked(*qpn >> SV_QPN_BLOCK_BITS);
	if (err) {
		sv_qpn_free(*qpn);
		return err;
	}
	iw_conn_set_handler(incoming);
	return 0;
}

/* The Read Requests we take at once (IRD) and send (ORD): the QP's published depths. */
static uint16_t rd_in(struct sv_qp *qp)
{
	uint32_t n = atomic_load_explicit(&qp->pub.rd_in, memory_order_relaxed);

	return (uint16_t)(n ? (n < IW_IRD_ORD_MAX ? n : IW_IRD_ORD_MAX) : 1);
}

static uint16_t rd_out(struct sv_qp *qp)
{
	uint32_t n = atomic_load_explicit(&qp->pub.rd_out, memory_order_relaxed);

	return (uint16_t)(n ? (n < IW_IRD_ORD_MAX ? n : IW_IRD_ORD_MAX) : 1);
}

/* --- the ops: set-up -------------------------------------------------------------------------- */

/*
 * Connections handed to us for a QP still on another wire (created on shm, it moves to
 * iWARP at RTR when its peer turns out to be on another host: sv_qp_rewire), kept here
 * under the engine's lock until it comes (qp_take) or for PEND_NS.
 */
enum { PEND_MAX = 64 };
#define PEND_NS 30000000000ull
static struct pend {
	uint32_t qpn;
	int fd;
	struct iw_params_in p;
	uint64_t at;
} pend[PEND_MAX];
static int n_pend;

static void pend_drop_locked(int i)
{
	close(pend[i].fd);
	pend[i] = pend[--n_pend];
}

static void pend_put_locked(uint32_t qpn, int fd, const struct iw_params_in *p)
{
	uint64_t now = sv_now_ns();

	for (int i = n_pend - 1; i >= 0; i--)
		if (pend[i].qpn == qpn || now - pend[i].at > PEND_NS)
			pend_drop_locked(i); /* the peer dialed again, or it is stale */
	if (n_pend == PEND_MAX) {
		(void)iw_conn_reply(fd, NULL, true);
		close(fd);
		return;
	}
	pend[n_pend++] = (struct pend){ .qpn = qpn, .fd = fd, .p = *p, .at = now };
}

static int pend_take_locked(uint32_t qpn, struct iw_params_in *p)
{
	for (int i = 0; i < n_pend; i++) {
		if (pend[i].qpn == qpn) {
			int fd = pend[i].fd;

			*p = pend[i].p;
			pend[i] = pend[--n_pend];
			return fd;
		}
	}
	return -1;
}

/* The wire's state of @qp; *qpn: 0 to allocate one, else the number it has already. */
static int setup(struct sv_qp *qp, uint32_t *qpn)
{
	struct iw_qp *iq = calloc(1, sizeof(*iq));
	int err = 0;

	if (!iq)
		return -ENOMEM;
	iq->dial_want = calloc(1, sizeof(*iq->dial_want));
	if (!iq->dial_want) {
		free(iq);
		return -ENOMEM;
	}
	atomic_store(&iq->fd, -1);
	atomic_store(&iq->incoming, -1);
	iq->qp = qp;
	iw_tx_init(iq);
	iw_rx_reset(iq);
	iq->confirm = want_confirm();
	/* Under the engine's lock, with the port's handler (incoming): the QP's state is
	 * published there together with what was handed over for its number meanwhile. */
	sv_engine_lock();
	if (!*qpn) {
		err = claim_qpn(qp, qpn);
	} else {
		err = iw_conn_open_block_locked(*qpn >> SV_QPN_BLOCK_BITS);
		iw_conn_set_handler(incoming);
		if (!err)
			atomic_store(&iq->incoming, pend_take_locked(*qpn, &iq->incoming_params));
	}
	if (!err) {
		iq->qpn = *qpn;
		qp->wire_qp = iq;
	}
	sv_engine_unlock();
	if (err) {
		free(iq->dial_want);
		free(iq);
		return err;
	}
	/* (The host's port is for verbs-only set-up: a QP that expects its peer makes sure
	 * someone answers it, at RTR; rdma_cm's QPs never need it.) */
	return 0;
}

static int qp_init(struct sv_qp *qp, uint32_t *qpn)
{
	*qpn = 0;
	return setup(qp, qpn);
}

static int qp_take(struct sv_qp *qp, uint32_t qpn)
{
	return setup(qp, &qpn);
}

static void teardown(struct sv_qp *qp, bool keep_qpn)
{
	struct iw_qp *iq = iw_of(qp);
	int fd;

	sv_engine_lock();
	if (!keep_qpn)
		sv_qpn_free(iq->qpn); /* the port's handler finds us no more */
	sv_engine_unlock();
	while (atomic_load(&qp->eng_ref))
		sched_yield();
	/* Our state goes under the engine's lock: the port's handler (incoming) no longer
	 * finds it, and nothing it handed over is left behind. */
	sv_engine_lock();
	qp->wire_qp = NULL;
	fd = atomic_exchange(&iq->incoming, -1);
	sv_engine_unlock();
	if (fd >= 0)
		close(fd);
	free(iq->dial_want);
	free(iq->tx_stage);
	free(iq);
}

static void qp_fini(struct sv_qp *qp)
{
	teardown(qp, false);
}

static void qp_leave(struct sv_qp *qp)
{
	teardown(qp, true);
}

void iw_wire_prepare_qpn(uint32_t qpn)
{
	sv_engine_lock();
	(void)iw_conn_open_block_locked(qpn >> SV_QPN_BLOCK_BITS);
	iw_conn_set_handler(incoming);
	sv_engine_unlock();
	(void)iw_conn_port_ensure();
}

static void publish(struct sv_qp *qp)
{
	/* An accepted connection waits for RTR: the progress thread adopts it now; an
	 * adopted stream's end waits for RTS (iw_end_waits): judged now. */
	if (atomic_load(&iw_of(qp)->incoming) >= 0 || atomic_load(&iw_of(qp)->eof))
		sv_engine_kick();
}

/* The peer's address: its GID names its host (a QP without a GRH is on this host). */
static int peer_addr(struct sv_qp *qp, struct sockaddr_storage *ss, socklen_t *len,
		     union ibv_gid *dgid, union ibv_gid *sgid)
{
	const struct sv_host *host = &sv_qp_ctx(qp)->host;
	const struct ibv_ah_attr *ah = &qp->attr.ah_attr;

	memset(sgid, 0, sizeof(*sgid));
	if (ah->is_global) {
		*dgid = ah->grh.dgid;
		if (ah->grh.sgid_index < host->n_gids)
			*sgid = host->gids[ah->grh.sgid_index].gid;
	} else {
		uint8_t lo[4] = { 127, 0, 0, 1 };

		if (ah->dlid && ah->dlid != host->lid)
			return -EHOSTUNREACH; /* a LID names a QP of this host only */
		sv_gid_from_ipv4(dgid, lo);
		*sgid = *dgid;
	}
	return iw_conn_gid_addr(dgid, sgid, ss, len);
}

/* What connect hands to attach. */
struct iw_dial {
	int fd;
	uint64_t watch;
	bool kept;
	bool crc; /* asked for: the peer echoes it (a goodbye before its reply needs it) */
	struct sockaddr_storage to;
	socklen_t to_len;
	struct iw_params want;
};
static struct iw_dial expecting; /* the passive side's: nothing to dial */

static void on_event(void *arg, uint32_t events)
{
	(void)arg;
	(void)events; /* the progress thread polls the QP once awake: nothing more to do */
}

static int qp_connect(struct sv_qp *qp, uint32_t qpn, void **conn)
{
	struct iw_qp *iq = iw_of(qp);
	union ibv_gid dgid, sgid;
	struct sockaddr_storage ss;
	struct iw_params want;
	struct iw_dial *d;
	socklen_t len;
	int fd, err;

	*conn = NULL;
	err = peer_addr(qp, &ss, &len, &dgid, &sgid);
	if (err)
		return err;
	/* Who dials: the lower QPN; equal QPNs (two hosts): the lower GID. */
	if (iq->qpn > qpn || (iq->qpn == qpn && memcmp(sgid.raw, dgid.raw, 16) >= 0)) {
		if (iq->qpn == qpn && !memcmp(sgid.raw, dgid.raw, 16))
			return -EINVAL; /* a QP connected to itself */
		(void)iw_conn_port_ensure();
		sv_dbg("iwarp qp %u: expects qp %u to connect", iq->qpn, qpn);
		*conn = &expecting;
		return 0;
	}
	want = (struct iw_params){
		.src_qpn = iq->qpn, .dest_qpn = qpn, .crc = want_crc(), .ext = true,
		.ird = rd_in(qp),
		.ord = rd_out(qp),
	};
	fd = iw_conn_dial((struct sockaddr *)&ss, len, &want, IW_DIAL_TIMEOUT_MS);
	sv_dbg("iwarp qp %u: dials qp %u: %d", iq->qpn, qpn, fd);
	/* Nobody answers the port this moment (its holder exiting, the next one taking it
	 * over): dialed again shortly, within the set-up's grace and the retry timer. */
	if (fd < 0 && fd != -ECONNREFUSED)
		return fd;
	d = calloc(1, sizeof(*d));
	if (!d) {
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	d->fd = fd;
	d->crc = want.crc;
	d->to = ss;
	d->to_len = len;
	d->want = want;
	if (fd < 0) {
		*conn = d;
		return 0;
	}
	tune(fd);
	sv_engine_lock();
	err = sv_engine_watch_oneshot_locked(fd, on_event, iq, &d->watch);
	sv_engine_unlock();
	if (err) {
		close(fd);
		free(d);
		return err;
	}
	*conn = d;
	return 0;
}

static void *attach(struct sv_qp *qp, uint32_t qpn, void *conn, int err)
{
	struct iw_qp *iq = iw_of(qp);
	struct iw_dial *d = conn;
	uint32_t link = atomic_load(&iq->link);

	if (err || !d)
		return NULL;
	if (link != IW_LINK_NONE && link != IW_LINK_DOWN)
		return d == &expecting ? NULL : d; /* connected already: this one goes */
	iq->peer_qpn = qpn;
	iq->adopted = false;
	iq->deadline = sv_now_ns() + IW_SETUP_GRACE_MS * 1000000ull;
	iw_rx_reset(iq);
	iw_tx_reset(iq);
	if (d == &expecting) {
		atomic_store(&iq->link, IW_LINK_EXPECTING);
		if (atomic_load(&iq->incoming) >= 0)
			sv_engine_kick();
		return NULL;
	}
	iq->crc = d->crc;
	iq->dial_to = d->to;
	iq->dial_len = d->to_len;
	*iq->dial_want = d->want;
	iq->redial_wait_ms = 10;
	d->kept = true;
	if (d->fd < 0) {
		atomic_store(&iq->redial_at, sv_now_ns() + 10000000ull);
		atomic_store(&iq->link, IW_LINK_REDIAL);
		sv_engine_kick();
		return d;
	}
	atomic_store(&iq->fd, d->fd);
	iq->watch = d->watch;
	atomic_store(&iq->link, IW_LINK_DIALING);
	/* The progress thread may sleep with this QP unwatched: it arms it anew. */
	sv_engine_kick();
	return d;
}

static void release(struct sv_qp *qp, void *conn)
{
	struct iw_dial *d = conn;

	(void)qp;
	if (!d || d == &expecting)
		return;
	if (!d->kept && d->fd >= 0) {
		sv_engine_lock();
		sv_engine_unwatch_locked(d->watch);
		sv_engine_unlock();
		close(d->fd);
	}
	free(d);
}

/* What the peer sent that nobody will read: a close with it unread would reset the
 * connection (RFC 1122 4.2.2.13), and a reset can take our last Terminate with it. */
static void drain(int fd)
{
	char buf[4096];

	for (int i = 0; i < 256 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; i++)
		;
}

static int poll_qp(struct sv_qp *qp);

/*
 * The goodbye names the last of the peer's Sends we placed, by its DDP header (as a
 * Terminate names a segment, RFC 5040 §4.8): the peer completes it and all before it,
 * as a NIC's acknowledgement would have, though the probe behind it finds us gone. Its
 * length in @buf (IW_HDR_UNTAGGED), 0 if we placed none.
 */
static size_t bye_names(struct sv_qp *qp, struct iw_qp *iq, uint8_t *buf)
{
	struct iw_hdr h = { .opcode = IW_OP_SEND, .last = true, .qn = IW_QN_SEND };
	int n;

	sv_rx_lock(qp);
	h.msn = iq->rx_ddp_msn[IW_QN_SEND] - 1;
	sv_rx_unlock(qp);
	if (!h.msn)
		return 0;
	n = iw_hdr_encode(buf, &h);
	return n > 0 ? (size_t)n : 0;
}

static void disconnect(struct sv_qp *qp)
{
	struct iw_qp *iq = iw_of(qp);
	uint64_t watch;
	bool adopted;
	int fd;

	/* Verbs-only connections say goodbye (a Terminate "TCP connection closed", RFC 5044
	 * §8), so that the peer tells a QP that left from a process that died; a stream of
	 * rdma_cm's just ends, as kernel rdma_cm's does. A Terminate we owe goes first. Best
	 * effort: the socket takes it or not. */
	/* (Dialing too: the peer may have answered already, and reads it after the reply it
	 * sent; our own port's peers are softverbs, for whom this order is fine.) */
	if ((atomic_load(&iq->link) == IW_LINK_UP || atomic_load(&iq->link) == IW_LINK_DIALING) &&
	    !iq->adopted) {
		struct iw_term bye = { IW_TERM_LLP, IW_ETYPE_MPA, IW_ECODE_MPA_CLOSED };
		uint8_t last[IW_HDR_UNTAGGED];
		size_t last_len;

		/* What the peer asked and we have read answered first: the placement probe
		 * behind its last Send (a NIC acknowledges a message before its receive
		 * completes, so the peer's Send succeeds even when we leave at once; here
		 * it would fail with RETRY_EXC_ERR: ibv_rc_pingpong's server, 1 MiB). A
		 * probe still on its way is answered by the goodbye (bye_names). */
		if (atomic_load(&iq->link) == IW_LINK_UP)
			(void)poll_qp(qp);
		last_len = bye_names(qp, iq, last);

		sv_spin_lock(&qp->sq.lock);
		iw_tx_terminate(iq, &bye, last, last_len);
		sv_spin_unlock(&qp->sq.lock);
	}
	fd = iw_tx_take_fd(iq, 100);
	sv_rx_lock(qp);
	sv_qp_sq_lock_unclaimed(qp);
	watch = iq->watch;
	iq->watch = 0;
	atomic_store(&iq->link, IW_LINK_NONE);
	adopted = iq->adopted;
	iq->adopted = false;
	iw_tx_reset(iq);
	iw_rx_reset(iq);
	sv_spin_unlock(&qp->sq.lock);
	sv_rx_unlock(qp);
	if (fd >= 0) {
		sv_engine_lock();
		sv_engine_unwatch_locked(watch);
		sv_engine_unlock();
		/* A stream of rdma_cm's ends when its id lets go of it too (librdmacm keeps
		 * it a moment for a peer that may still be completing what it sent: Linux
		 * siw, cma_linger); closing our descriptor ends it when it is the last. */
		if (!adopted)
			shutdown(fd, SHUT_WR);
		drain(fd);
		close(fd);
	}
}

static void discard(struct sv_qp *qp)
{
	iw_rx_reset(iw_of(qp));
}

static enum sv_reach reach(struct sv_qp *qp, uint32_t dest_qpn)
{
	(void)dest_qpn;
	if (qp->ibv.qp_base.qp_type == IBV_QPT_UD)
		return SV_REACH_UNREACHABLE; /* iWARP has no datagrams */
	switch (atomic_load(&iw_of(qp)->link)) {
	case IW_LINK_UP:
		return SV_REACH_READY; /* (what peer_first holds waits in the wire's queue) */
	case IW_LINK_DIALING:
	case IW_LINK_EXPECTING:
	case IW_LINK_REDIAL:
		/* The hand-over and the MPA exchange take a moment (more on a loaded host):
		 * the peer not answering counts against the transport timer only after it. */
		return sv_now_ns() < iw_of(qp)->deadline ? SV_REACH_CONNECTING : SV_REACH_WAIT;
	case IW_LINK_DOWN:
		return SV_REACH_UNREACHABLE;
	default:
		return SV_REACH_NO_PEER;
	}
}

static uint64_t seg_max(struct sv_qp *qp, const struct sv_hdr *h)
{
	(void)qp;
	(void)h;
	return IW_FPDU_PAYLOAD;
}

static void abandon(struct sv_qp *qp, uint32_t msn)
{
	(void)qp;
	(void)msn; /* no RNR NAKs on this wire: nothing is ever abandoned */
}

/* WRITEs that wait to be known placed, and no Read out that will tell: ask. */
static void probe(struct sv_qp *qp, struct iw_qp *iq)
{
	if (!iw_tx_probe_wanted(iq))
		return;
	sv_spin_lock(&qp->sq.lock);
	iw_tx_probe(iq);
	sv_spin_unlock(&qp->sq.lock);
}

/*
 * After a write: the answer to our placement probe may have been taken by a poll before
 * the write counted what it confirms as sent (advance() in iw_tx.c runs after the
 * system call returns: a writer preempted there, and a quick peer). That poll completed
 * nothing, and an application asleep on its completion channel polls no more: the
 * writer sees the acknowledgement due and wakes the progress thread, which stays awake
 * while it is (has_work). Rare: the answer is a round trip behind the write, so the
 * look finds nothing due and costs no system call.
 */
static bool ackable(struct iw_qp *iq);

static void ack_due(struct iw_qp *iq)
{
	if (!iq->confirm || !iq->ord || sv_engine_on_thread())
		return;
	/* tx_acked, stored by the write, before confirmed is loaded; the poll stores
	 * confirmed before it loads tx_acked (answer_done, then local_answers): one of the
	 * two sees the other's. */
	atomic_thread_fence(memory_order_seq_cst);
	/* Under rx_busy (ackable): the Read queue's slots are reused as answers come, and a
	 * look at them from here, behind the poll that moves its tail, read one being
	 * written anew (TSan, now that a Send may probe while another probe is out). */
	if (ackable(iq))
		sv_engine_kick();
}

static void flush(struct sv_qp *qp)
{
	struct iw_qp *iq = iw_of(qp);

	int err;

	probe(qp, iq);
	err = iw_tx_flush(iq);
	atomic_store_explicit(&iq->hold_since, 0, memory_order_relaxed); /* what it held went */
	/* Sent: the next probe is made now, while the peer answers, not on the next post's
	 * way out. */
	if (iq->ord && iq->confirm) {
		sv_spin_lock(&qp->sq.lock);
		iw_tx_probe_ahead(iq);
		sv_spin_unlock(&qp->sq.lock);
	}
	if (err < 0) {
		sv_dbg("iwarp qp %u: sendmsg: %s", iq->qpn, strerror(-err));
		atomic_store(&iq->fatal, true);
	}
	if (err > 0)
		ack_due(iq);
}

/* --- the passive side: a connection handed to us ---------------------------------------- */

/* The progress thread, engine lock held (iw_conn). */
static void incoming(int fd, const struct iw_params *p)
{
	struct sv_qp *qp = sv_qpn_owner(p->dest_qpn);
	struct iw_qp *iq;
	int old;

	struct iw_params_in in = { .src_qpn = p->src_qpn, .ird = p->ird, .ord = p->ord,
				   .crc = p->crc, .ext = p->ext, .rtr = p->rtr };

	if (!qp || (qp->ibv.qp_base.qp_type != IBV_QPT_RC &&
		    qp->ibv.qp_base.qp_type != IBV_QPT_UC)) {
		(void)iw_conn_reply(fd, NULL, true);
		close(fd);
		return;
	}
	if (qp->wire != &sv_wire_iwarp || !qp->wire_qp) {
		/* Still on shm (or between wires): it moves to iWARP at RTR, when its peer is
		 * known remote, and takes this then (setup). */
		pend_put_locked(p->dest_qpn, fd, &in);
		return;
	}
	iq = iw_of(qp);
	sv_dbg("iwarp qp %u: a connection from qp %u handed over", iq->qpn, p->src_qpn);
	iq->incoming_params = in;
	old = atomic_exchange(&iq->incoming, fd);
	if (old >= 0)
		close(old); /* the peer dialed again: the newer connection counts */
	sv_engine_kick();
}

/* rx_busy: takes the connection handed to us, once the QP is in RTR and expects it. */
static void adopt(struct sv_qp *qp, struct iw_qp *iq)
{
	uint32_t st = atomic_load(&qp->pub.state);
	struct iw_params mine;
	uint64_t watch = 0;
	int fd;

	if (atomic_load(&iq->incoming) < 0 || !sv_qp_state_receives(st) ||
	    atomic_load(&iq->link) != IW_LINK_EXPECTING)
		return;
	fd = atomic_exchange(&iq->incoming, -1);
	if (fd < 0)
		return;
	if (iq->incoming_params.src_qpn != iq->peer_qpn) {
		sv_dbg("iwarp qp %u: a connection from qp %u, expected %u: refused", iq->qpn,
		       iq->incoming_params.src_qpn, iq->peer_qpn);
		(void)iw_conn_reply(fd, NULL, true);
		close(fd);
		return;
	}
	tune(fd);
	{
		const struct iw_params_in *in = &iq->incoming_params;
		struct iw_xchg_side req = { .rev = IW_MPA_REV2, .crc = in->crc, .ird = in->ird,
					    .ord = in->ord, .rtr = in->rtr }, reply;

		/* The exchange's answer (iw_xchg.h): C echoed, our IRD and ORD; a request
		 * for peer-to-peer is refused. */
		if (iw_xchg_answer(&req, rd_in(qp), rd_out(qp), &reply)) {
			sv_dbg("iwarp qp %u: qp %u asked for peer-to-peer: refused", iq->qpn,
			       in->src_qpn);
			(void)iw_conn_reply(fd, NULL, true);
			close(fd);
			return;
		}
		mine = (struct iw_params){
			.src_qpn = iq->qpn, .dest_qpn = iq->peer_qpn, .crc = reply.crc,
			.ext = in->ext, .ird = reply.ird, .ord = reply.ord,
		};
	}
	sv_engine_lock();
	if (sv_engine_watch_oneshot_locked(fd, on_event, iq, &watch)) {
		sv_engine_unlock();
		close(fd);
		return;
	}
	sv_engine_unlock();
	if (iw_conn_reply(fd, &mine, false)) {
		sv_engine_lock();
		sv_engine_unwatch_locked(watch);
		sv_engine_unlock();
		close(fd);
		return;
	}
	sv_spin_lock(&qp->sq.lock);
	iq->crc = mine.crc;
	iq->ext = mine.ext;
	/* RFC 6581: we answer at most our IRD Read Requests at once. */
	iq->ird = mine.ird < IW_IRD_ORD_MAX ? mine.ird : IW_IRD_ORD_MAX;
	iq->ord = iq->incoming_params.ird;
	atomic_store(&iq->fd, fd);
	iq->watch = watch;
	atomic_store(&iq->link, IW_LINK_UP);
	sv_spin_unlock(&qp->sq.lock);
	sv_set_hint(qp->tx_kick, true); /* what waited for the peer goes now */
	if (!sv_engine_on_thread())
		sv_engine_kick(); /* the progress thread watches the new socket */
	sv_dbg("iwarp qp %u: connection from qp %u up (crc %d, ext %d)", iq->qpn, iq->peer_qpn,
	       iq->crc, iq->ext);
}

/* rx_busy: lets go of a dial that broke; timers dials again. */
static void redial_later(struct sv_qp *qp, struct iw_qp *iq)
{
	uint64_t watch;
	int fd;

	sv_spin_lock(&qp->sq.lock);
	fd = atomic_exchange(&iq->fd, -1);
	watch = iq->watch;
	iq->watch = 0;
	atomic_store(&iq->link, IW_LINK_REDIAL);
	atomic_store(&iq->redial_at, sv_now_ns() + iq->redial_wait_ms * 1000000ull);
	sv_spin_unlock(&qp->sq.lock);
	sv_dbg("iwarp qp %u: the dial to qp %u broke before the reply: again in %u ms", iq->qpn,
	       iq->peer_qpn, iq->redial_wait_ms);
	if (iq->redial_wait_ms < 1000)
		iq->redial_wait_ms *= 2;
	if (fd >= 0) {
		sv_engine_lock();
		sv_engine_unwatch_locked(watch);
		sv_engine_unlock();
		close(fd);
	}
	iw_rx_reset(iq);
}

/* No lock: a dial again, once its time came. */
static void redial(struct sv_qp *qp, struct iw_qp *iq)
{
	uint64_t watch = 0;
	int fd;

	if (atomic_load(&iq->link) != IW_LINK_REDIAL || sv_now_ns() < atomic_load(&iq->redial_at))
		return;
	/* Nobody has answered the peer host's port for a while: nobody is there (a UC QP
	 * has no retry timer to give up for it). */
	if (sv_now_ns() > iq->deadline + IW_REDIAL_MAX_MS * 1000000ull) {
		sv_dbg("iwarp qp %u: nobody answers for qp %u: given up", iq->qpn, iq->peer_qpn);
		atomic_store(&iq->link, IW_LINK_DOWN);
		return;
	}
	atomic_store(&iq->redial_at, UINT64_MAX); /* one dialer at a time */
	fd = iw_conn_dial((struct sockaddr *)&iq->dial_to, iq->dial_len, iq->dial_want, 200);
	if (fd >= 0) {
		tune(fd);
		sv_engine_lock();
		if (sv_engine_watch_oneshot_locked(fd, on_event, iq, &watch)) {
			close(fd);
			fd = -1;
		}
		sv_engine_unlock();
	}
	sv_rx_lock(qp);
	sv_qp_sq_lock_unclaimed(qp);
	if (fd >= 0 && atomic_load(&iq->link) == IW_LINK_REDIAL) {
		atomic_store(&iq->fd, fd);
		iq->watch = watch;
		atomic_store(&iq->link, IW_LINK_DIALING);
		fd = -1;
	} else if (atomic_load(&iq->link) == IW_LINK_REDIAL) {
		atomic_store(&iq->redial_at, sv_now_ns() + iq->redial_wait_ms * 1000000ull);
		if (iq->redial_wait_ms < 1000)
			iq->redial_wait_ms *= 2;
	}
	sv_spin_unlock(&qp->sq.lock);
	sv_rx_unlock(qp);
	if (fd >= 0) { /* not wanted any more */
		sv_engine_lock();
		sv_engine_unwatch_locked(watch);
		sv_engine_unlock();
		close(fd);
	} else {
		sv_engine_kick();
	}
}

/* rx_busy, DIALING: the peer's MPA reply. */
static void dialing(struct sv_qp *qp, struct iw_qp *iq)
{
	struct iw_params got;
	int r = iw_rx_reply(iq, &got);

	if (r == 0)
		return;
	if (r < 0 && r != -ECONNREFUSED && r != -EPROTO) {
		/* The connection ended before any reply: the host's port changing hands (its
		 * holder exited under our dial). Dial again (timers). */
		redial_later(qp, iq);
		return;
	}
	if (r >= 0) {
		const struct iw_params *w = iq->dial_want;
		struct iw_xchg_side req = { .rev = IW_MPA_REV2, .rtr = w->rtr },
				    reply = { .rev = IW_MPA_REV2, .rtr = got.rtr };

		if (iw_xchg_check_reply(&req, &reply))
			r = -EPROTO;
	}
	if (r < 0 || got.src_qpn != iq->peer_qpn || got.dest_qpn != iq->qpn) {
		sv_dbg("iwarp qp %u: qp %u %s", iq->qpn, iq->peer_qpn,
		       r == -ECONNREFUSED ? "refused the connection" : "gave a bad MPA reply");
		/* Nobody there to take requests: what is sent is lost (RETRY_EXC_ERR). */
		atomic_store(&iq->link, IW_LINK_DOWN);
		return;
	}
	sv_spin_lock(&qp->sq.lock);
	iq->crc = got.crc;
	iq->ext = got.ext;
	iq->ird = rd_in(qp);
	if (iq->ird > IW_IRD_ORD_MAX)
		iq->ird = IW_IRD_ORD_MAX;
	iq->ord = got.ird;
	atomic_store(&iq->link, IW_LINK_UP);
	sv_spin_unlock(&qp->sq.lock);
	sv_set_hint(qp->tx_kick, true);
	sv_dbg("iwarp qp %u: connection to qp %u up (crc %d, ext %d)", iq->qpn, iq->peer_qpn,
	       iq->crc, iq->ext);
}

int iw_qp_adopt(struct sv_qp *qp, int fd, const struct sv_stream *s)
{
	struct iw_qp *iq = iw_of(qp);
	uint64_t watch = 0;
	int one = 1, err;

	if (atomic_load(&iq->link) != IW_LINK_NONE && atomic_load(&iq->link) != IW_LINK_DOWN)
		return -EBUSY;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	tune(fd);
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK))
		return -errno;
	sv_engine_lock();
	err = sv_engine_watch_oneshot_locked(fd, on_event, iq, &watch);
	sv_engine_unlock();
	if (err)
		return err;
	sv_rx_lock(qp);
	sv_qp_sq_lock_unclaimed(qp);
	iw_rx_reset(iq);
	iw_tx_reset(iq);
	iq->adopted = true;
	iq->crc = s->crc;
	iq->ext = s->ext;
	iq->ird = s->ird < IW_IRD_ORD_MAX ? s->ird : IW_IRD_ORD_MAX;
	if (!iq->ird)
		iq->ird = 1;
	iq->ord = s->ord;
	iq->peer_first_until = sv_now_ns() + IW_PEER_FIRST_MS * 1000000ull;
	atomic_store(&iq->peer_first, s->peer_first);
	iq->nudge_at = sv_now_ns() + IW_NUDGE_MS * 1000000ull;
	atomic_store(&iq->nudge_due, !s->peer_first);
	atomic_store(&iq->fd, fd);
	iq->watch = watch;
	atomic_store(&iq->link, IW_LINK_UP);
	sv_spin_unlock(&qp->sq.lock);
	sv_rx_unlock(qp);
	sv_engine_kick();
	sv_dbg("iwarp qp %u: adopted a stream (crc %d, ext %d, ird %u, ord %u%s)", iq->qpn,
	       s->crc, s->ext, iq->ird, s->ord, s->peer_first ? ", the peer first" : "");
	return 0;
}

/* --- progress --------------------------------------------------------------------------------- */

/* rx_busy: what the completer learns from us, not from the peer. */
static int local_answers(struct sv_qp *qp, struct iw_qp *iq)
{
	uint32_t msn = atomic_load(&iq->local_nak_msn), upto;
	int n = 0;

	if (msn) {
		struct sv_hdr nak = { .op = SV_OP_NAK, .msn = msn, .status = iq->local_nak_status,
				      .src_qpn = qp->attr.dest_qp_num };

		upto = msn - 1; /* what went before it is complete */
		if (upto && !sv_msn_le(upto, iq->acked_told) &&
		    sv_msn_le(upto, atomic_load(&iq->tx_acked))) {
			struct sv_hdr ack = { .op = SV_OP_ACK, .msn = upto,
					      .src_qpn = qp->attr.dest_qp_num };

			(void)sv_comp_deliver(qp, &ack, NULL);
			iq->acked_told = upto;
		}
		atomic_store(&iq->local_nak_msn, 0);
		(void)sv_comp_deliver(qp, &nak, NULL);
		n++;
	}
	return n + iw_rx_ack_sends(iq);
}

/*
 * Whether what is queued for the socket at a poll (answers, mostly: the Read Response
 * to the peer's placement probe after each of its Sends) may wait for the application's
 * next post, which sends it in the same sendmsg. Sent at once, a ping-pong made two
 * sendmsgs per message across a veth pair (the answer, then the reply): ib_send_lat -s 2
 * took 18 µs one way, 10 µs with the answer riding. It waits while an application that
 * busy-polls has completions still to take from this QP's CQs (it is yet to act on what
 * came), for at most ANSWER_HOLD_NS; then its next poll sends it, or the progress
 * thread's next look (which never holds anything back) once it stops polling. A
 * Terminate goes at once.
 */
#define ANSWER_HOLD_NS 50000ull
#define HOLD_UNTIMED 1ull /* hold_since: holding, the clock not read yet */
static bool answers_wait(struct sv_qp *qp, struct iw_qp *iq)
{
	uint64_t since = atomic_load_explicit(&iq->hold_since, memory_order_relaxed), now;

	if (sv_engine_on_thread() || !sv_engine_app_busy() || atomic_load(&iq->term_sent) ||
	    atomic_load(&iq->link) != IW_LINK_UP || !sv_cq_waiting_for(qp)) {
		if (since)
			atomic_store_explicit(&iq->hold_since, 0, memory_order_relaxed);
		return false;
	}
	/* The clock is read from the second look on: the first is on a ping-pong's path
	 * (the poll that took the message), the hold's bound needs no more precision. */
	if (!since) {
		atomic_store_explicit(&iq->hold_since, HOLD_UNTIMED, memory_order_relaxed);
		return true;
	}
	now = sv_now_ns();
	if (since == HOLD_UNTIMED) {
		atomic_store_explicit(&iq->hold_since, now, memory_order_relaxed);
		return true;
	}
	if (now - since < ANSWER_HOLD_NS)
		return true;
	atomic_store_explicit(&iq->hold_since, 0, memory_order_relaxed);
	return false;
}

/*
 * A write failed: the peer reset the connection. What it sent before the reset is read
 * first, a Terminate saying why among it (a peer that refused our Write closes at once,
 * and the Writes still coming make its close a reset, RFC 1122 4.2.2.13); the link then
 * goes down, unless that Terminate ended it already or the stream ended in order (the
 * peer's goodbye, judged by iw_link_closed). Bounded: a reset socket holds what
 * it held, and reads fail after it.
 */
static int write_failed(struct iw_qp *iq)
{
	int n = 0, r;

	while (atomic_load(&iq->link) == IW_LINK_UP && (r = iw_rx_poll(iq, IW_BUDGET)) > 0)
		n += r;
	if (!atomic_load(&iq->eof)) /* an end in order: iw_link_closed judges it */
		iw_link_down(iq, "the socket failed");
	return n;
}

static int poll_qp(struct sv_qp *qp)
{
	struct iw_qp *iq = iw_of(qp);
	int n = 0;

	if (!sv_rx_trylock(qp))
		return 0;
	if (atomic_load(&iq->incoming) >= 0)
		adopt(qp, iq);
	if (atomic_load(&iq->link) == IW_LINK_DIALING)
		dialing(qp, iq);
	if (atomic_load(&iq->fatal)) {
		atomic_store(&iq->fatal, false);
		n += write_failed(iq);
	}
	if (atomic_load(&iq->link) == IW_LINK_UP) {
		if (iw_tx_pending(iq) && !answers_wait(qp, iq) && iw_tx_flush(iq) < 0)
			n += write_failed(iq);
		n += iw_rx_poll(iq, IW_BUDGET);
		sv_resp_flush(qp);
	}
	n += local_answers(qp, iq);
	if (atomic_load(&iq->link) == IW_LINK_UP)
		probe(qp, iq);
	if (atomic_load(&iq->eof)) {
		if (iw_link_closed(iq, atomic_load(&iq->goodbye)))
			atomic_store(&iq->eof, false);
	}
	sv_rx_unlock(qp);
	/* Answers the responder queued (Read Responses) and Terminates go now, unless
	 * answers_wait says they ride with what the application sends next. */
	if (iw_tx_pending(iq) && !answers_wait(qp, iq)) {
		int err = iw_tx_flush(iq);

		if (err < 0)
			atomic_store(&iq->fatal, true);
		else if (err > 0)
			ack_due(iq);
	}
	return n;
}

/* Whether a local acknowledgement is due: read under rx_busy, whose holder moves the
 * queues it looks at. A holder there now counts as one: it may have passed its own look
 * before a write made one due (ack_due woke us for it), so we look again after it. */
static bool ackable(struct iw_qp *iq)
{
	bool due;

	if (!sv_rx_trylock(iq->qp))
		return true;
	due = iw_tx_ackable(iq) != 0;
	sv_rx_unlock(iq->qp);
	return due;
}

/* Whether anything waits that the next poll would move. */
static bool has_work(struct iw_qp *iq)
{
	return atomic_load(&iq->fatal) || (atomic_load(&iq->eof) && !iw_end_waits(iq)) ||
	       atomic_load(&iq->local_nak_msn) ||
	       (atomic_load(&iq->incoming) >= 0 && atomic_load(&iq->link) == IW_LINK_EXPECTING) ||
	       (iw_tx_pending(iq) && !atomic_load(&iq->tx_wants_out)) ||
	       ackable(iq);
}

static bool arm(struct sv_qp *qp, bool assist)
{
	struct iw_qp *iq = iw_of(qp);
	uint32_t link = atomic_load(&iq->link);
	uint32_t events = EPOLLIN | EPOLLRDHUP;

	(void)assist;
	if (has_work(iq))
		return false;
	if (iw_end_waits(iq))
		return true; /* the socket has nothing more to say; publish kicks at RTS */
	if (link != IW_LINK_UP && link != IW_LINK_DIALING)
		return true; /* a connection handed to us kicks the engine */
	if (iw_tx_pending(iq))
		events |= EPOLLOUT;
	atomic_store(&iq->armed, true);
	if (sv_engine_rearm(iq->watch, events)) {
		atomic_store(&iq->armed, false);
		return false;
	}
	return true;
}

static void disarm(struct sv_qp *qp)
{
	atomic_store(&iw_of(qp)->armed, false);
}

static int wait_fd(struct sv_qp *qp)
{
	struct iw_qp *iq = iw_of(qp);

	return atomic_load(&iq->link) == IW_LINK_UP ? atomic_load(&iq->fd) : -1;
}

static void park(struct sv_qp *qp)
{
	uint64_t watch = iw_of(qp)->watch;

	if (watch)
		sv_engine_park(watch);
}

static bool needs_timer(struct sv_qp *qp)
{
	struct iw_qp *iq = iw_of(qp);

	return has_work(iq) || atomic_load(&iq->link) == IW_LINK_EXPECTING ||
	       atomic_load(&iq->link) == IW_LINK_REDIAL || atomic_load(&iq->peer_first) ||
	       atomic_load(&iq->nudge_due);
}

static int timers(struct sv_qp *qp)
{
	struct iw_qp *iq = iw_of(qp);

	/* The port's holder may have gone: someone must answer it while we expect a peer. */
	if (atomic_load(&iq->link) == IW_LINK_EXPECTING)
		(void)iw_conn_port_ensure();
	if (atomic_load(&iq->link) == IW_LINK_REDIAL) {
		redial(qp, iq);
		return 1;
	}
	/* The responder has said nothing since the connection came up: one zero-length
	 * Write, so that a responder which did not read what came first reads now. */
	if (atomic_load(&iq->nudge_due) && sv_now_ns() >= iq->nudge_at &&
	    atomic_exchange(&iq->nudge_due, false) && atomic_load(&iq->link) == IW_LINK_UP &&
	    !atomic_load(&iq->term_sent)) {
		sv_dbg("iwarp qp %u: the peer is silent: a zero-length Write", iq->qpn);
		sv_spin_lock(&qp->sq.lock);
		(void)iw_tx_nudge(iq);
		sv_spin_unlock(&qp->sq.lock);
		flush(qp);
		return 1;
	}
	/* The initiator did not speak first in time: what waited goes now. */
	if (atomic_load(&iq->peer_first) && sv_now_ns() >= iq->peer_first_until &&
	    atomic_exchange(&iq->peer_first, false)) {
		flush(qp);
		return 1;
	}
	return 0;
}

/* sq.lock: RFC 7306's atomics and Write with Immediate where both ends take them; a
 * Send with Immediate has no iWARP form at all. */
static uint32_t conn_caps(struct sv_qp *qp)
{
	uint32_t caps = SV_WIRE_ACKED | SV_WIRE_ORDERED | SV_WIRE_LATE;

	if (iw_of(qp)->ext)
		caps |= SV_WIRE_ATOMICS | SV_WIRE_IMM;
	return caps;
}

static uint32_t bad_pkeys(struct sv_qp *qp)
{
	(void)qp;
	return 0; /* P_Keys are InfiniBand's: an iWARP connection has none */
}

const struct sv_wire_ops sv_wire_iwarp = {
	.name = "iwarp",
	.caps = SV_WIRE_ACKED | SV_WIRE_ORDERED | SV_WIRE_ATOMICS | SV_WIRE_IMM | SV_WIRE_LATE,
	.conn_caps = conn_caps,
	.seg_min = IW_FPDU_PAYLOAD,
	.qp_init = qp_init,
	.qp_fini = qp_fini,
	.qp_take = qp_take,
	.qp_leave = qp_leave,
	.publish = publish,
	.connect = qp_connect,
	.attach = attach,
	.release = release,
	.disconnect = disconnect,
	.discard = discard,
	.reach = reach,
	.seg_max = seg_max,
	.send = iw_tx_send,
	.abandon = abandon,
	.flush = flush,
	.poll = poll_qp,
	.arm = arm,
	.disarm = disarm,
	.park = park,
	.wait_fd = wait_fd,
	.needs_timer = needs_timer,
	.timers = timers,
	.bad_pkeys = bad_pkeys,
};
