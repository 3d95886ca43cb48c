/*
 * The shm wire's QPs: the segment each QP publishes (its page and inbound fifo), its
 * peers (the connected QP, or a UD QP's destinations), and the ops table the core calls.
 */
#include "wire/shm/shm_wire.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/sv_engine.h"
#include "core/sv_qp_data.h"
#include "core/sv_qp_table.h"
#include "util/sv_lock.h"
#include "util/sv_log.h"

#define hint(field) atomic_load_explicit(&(field), memory_order_relaxed)
#define set_hint(field, v) atomic_store_explicit(&(field), (v), memory_order_relaxed)

static void rx_lock(struct sv_qp *qp)
{
	while (atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		sched_yield();
}

static void rx_unlock(struct sv_qp *qp)
{
	atomic_flag_clear_explicit(&qp->rx_busy, memory_order_release);
}

static int qp_setup(struct sv_qp *qp, uint32_t *qpn);

int shm_qp_qp_init(struct sv_qp *qp, uint32_t *qpn)
{
	*qpn = 0;
	return qp_setup(qp, qpn);
}

int shm_qp_qp_take(struct sv_qp *qp, uint32_t qpn)
{
	return qp_setup(qp, &qpn);
}

/* The wire's state of @qp, and its number unless *qpn names one it has already. */
static int qp_setup(struct sv_qp *qp, uint32_t *qpn)
{
	struct shm_qp *s = calloc(1, sizeof(*s));
	int err;

	if (!s)
		return -ENOMEM;
	qp->wire_qp = s;
	/* The number, and the segment at its place in our arena (zeros: a new QP's, or
	 * given back by the last QP of that number). */
	err = shm_conn_qp_add(qp, qpn);
	if (err) {
		qp->wire_qp = NULL;
		free(s);
		return err;
	}
	shm_fifo_init_zeroed(s->rx); /* the segment is zeros (shm_arena_seg) */
	/* Born armed: the progress thread may be asleep with every fifo it knew armed, and a
	 * producer in this very process attaches without a socket that would wake it. The
	 * first message wakes it once; it then counts this QP among its own. */
	(void)shm_fifo_arm(s->rx);
	s->page->magic = SHM_QP_PAGE_MAGIC;
	s->page->pid = getpid();
	s->page->qp_type = qp->ibv.qp_base.qp_type;
	/* An XRC target has no PD: requests name an SRQ, whose PD applies (sv_resp.c). */
	atomic_store(&s->page->pd, qp->pd ? qp->pd->handle : 0);
	/* Last: from here peers can attach, and everything they read is set above. */
	atomic_store_explicit(&s->page->qpn, *qpn, memory_order_release);
	return 0;
}

static void qp_teardown(struct sv_qp *qp, bool keep_qpn);

void shm_qp_qp_fini(struct sv_qp *qp)
{
	qp_teardown(qp, false);
}

void shm_qp_qp_leave(struct sv_qp *qp)
{
	qp_teardown(qp, true);
}

static void qp_teardown(struct sv_qp *qp, bool keep_qpn)
{
	struct shm_qp *s = shm_qp(qp);

	if (!s)
		return;
	shm_conn_qp_remove(qp, keep_qpn);
	/* Found by its number until just now (shm_conn_pin_qp): a pin taken before waits. */
	while (atomic_load(&qp->eng_ref))
		sched_yield();
	shm_conn_qp_release(qp);
	free(s);
	qp->wire_qp = NULL;
}

void shm_qp_publish(struct sv_qp *qp)
{
	struct shm_qp_page *p = shm_qp(qp)->page;
	uint32_t st = atomic_load(&qp->pub.state);

	/* A new connection: what the previous requester gave up on is forgotten. */
	if (st == IBV_QPS_RTR && atomic_load(&p->state) != IBV_QPS_RTR)
		atomic_store(&p->rnr_abandon, 0);
	atomic_store(&p->access, atomic_load(&qp->pub.access));
	atomic_store(&p->qkey, atomic_load(&qp->pub.qkey));
	atomic_store(&p->min_rnr_timer, atomic_load(&qp->pub.min_rnr_timer));
	atomic_store(&p->dest_qpn, atomic_load(&qp->pub.dest_qpn));
	atomic_store(&p->pkey, atomic_load(&qp->pub.pkey));
	atomic_store(&p->state, st);
}

/* --- peers -------------------------------------------------------------------------------- */

int shm_qp_connect_qpn(struct sv_qp *qp, uint32_t qpn, void **conn)
{
	struct shm_peer *peer = NULL;
	int err = shm_conn_connect(qp, qpn, &peer);

	*conn = peer;
	return err;
}

/* A UD destination met: kept (the oldest forgotten when the table is full). Returns
 * what to release. */
static struct shm_peer *ud_dest_add(struct shm_qp *s, struct shm_peer *peer)
{
	struct shm_ud_dests *d = s->ud_dests;
	struct shm_peer *old = NULL;

	if (!d) {
		d = calloc(1, sizeof(*d));
		if (!d)
			return peer;
		s->ud_dests = d;
	}
	if (d->n == SHM_UD_MAX_DESTS) {
		old = d->peer[0];
		memmove(&d->peer[0], &d->peer[1], (SHM_UD_MAX_DESTS - 1) * sizeof(d->peer[0]));
		d->n--;
	}
	d->peer[d->n++] = peer;
	return old;
}

void *shm_qp_attach(struct sv_qp *qp, uint32_t qpn, void *conn, int err)
{
	struct shm_qp *s = shm_qp(qp);
	struct shm_peer *peer = conn;

	if (qp->ibv.qp_base.qp_type == IBV_QPT_UD) {
		if (!err && peer)
			return ud_dest_add(s, peer);
		sv_dbg("qp %u: qp %u unreachable (%d): the datagram is lost",
		       qp->ibv.qp_base.qp_num, qpn, err);
		s->ud_unreachable = qpn;
		s->ud_unreachable_valid = true;
		return peer;
	}
	if (err || !peer || s->peer)
		return peer;
	s->peer = peer;
	set_hint(s->peer_local, peer->local);
	atomic_store(&s->peer_pid, peer->proc->pid);
	return NULL;
}

void shm_qp_release(struct sv_qp *qp, void *conn)
{
	shm_forget_wake(shm_qp(qp), conn);
	shm_conn_disconnect(conn);
}

void shm_qp_disconnect(struct sv_qp *qp)
{
	struct shm_qp *s = shm_qp(qp);
	struct shm_peer *peer;
	struct shm_ud_dests *d;

	rx_lock(qp);
	sv_qp_sq_lock_unclaimed(qp); /* a claimed copy may be using the peer */
	peer = s->peer;
	s->peer = NULL;
	set_hint(s->peer_local, false);
	atomic_store(&s->peer_pid, 0);
	s->ud_unreachable_valid = false;
	atomic_store(&s->peer_left, false);
	d = s->ud_dests;
	s->ud_dests = NULL;
	sv_spin_unlock(&qp->sq.lock);
	rx_unlock(qp);
	shm_forget_wake(s, peer);
	shm_conn_disconnect(peer);
	if (d) {
		for (int i = 0; i < d->n; i++) {
			shm_forget_wake(s, d->peer[i]);
			shm_conn_disconnect(d->peer[i]);
		}
		free(d);
	}
}

/* Empties our inbound fifo: what was sent to the QP before RESET is gone. */
void shm_qp_discard(struct sv_qp *qp)
{
	struct shm_qp *s = shm_qp(qp);
	struct shm_slot *slot;
	uint64_t pos;

	/* Bounded: a peer that keeps publishing does not hold us here. */
	for (uint32_t i = 0; i < 2 * SHM_FIFO_SLOTS && (slot = shm_fifo_peek(s->rx, &pos)); i++) {
		uint32_t n = shm_msg_slots((const struct shm_msg *)slot->hdr);

		shm_fifo_release(s->rx, n ? n : 1);
	}
	set_hint(s->rx_poisoned, false);
	s->burst_next = 0;
	atomic_store(&s->page->acked, 0);
	atomic_store(&s->acked_seen, 0);
	s->acked_sends = 0;
	atomic_store(&s->sent_reads, false);
}

/* The peer left: once its last messages are handled, let go of it. */
int shm_qp_timers(struct sv_qp *qp)
{
	struct shm_qp *s = shm_qp(qp);
	struct shm_peer *gone = NULL;
	uint64_t pos;

	if (!atomic_load_explicit(&s->peer_left, memory_order_relaxed) ||
	    atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		return 0;
	/* Once the fifo is drained and its last acknowledgement delivered. Not while a
	 * claimed copy may be using the peer: the next pass will do. */
	if (!shm_fifo_peek(s->rx, &pos) && shm_rx_acked(qp) >= 0 && sv_spin_trylock(&qp->sq.lock)) {
		if (!qp->tx_claimed) {
			shm_direct_abandon(qp);
			gone = s->peer;
			s->peer = NULL;
			set_hint(s->peer_local, false);
			atomic_store(&s->peer_pid, 0);
			atomic_store(&s->peer_left, false);
			sv_comp_peer_gone(qp);
		}
		sv_spin_unlock(&qp->sq.lock);
	}
	rx_unlock(qp);
	shm_forget_wake(s, gone);
	shm_conn_disconnect(gone);
	return gone != NULL;
}

bool shm_qp_needs_timer(struct sv_qp *qp)
{
	return atomic_load_explicit(&shm_qp(qp)->peer_left, memory_order_relaxed);
}

enum sv_reach shm_qp_reach(struct sv_qp *qp, uint32_t dest_qpn)
{
	struct shm_qp *s = shm_qp(qp);
	struct shm_peer *peer;

	if (qp->ibv.qp_base.qp_type == IBV_QPT_UD) {
		peer = shm_ud_dest(s, dest_qpn);
		if (peer)
			return shm_pkeys_match(qp, peer) ? SV_REACH_READY : SV_REACH_PARTITION;
		if (s->ud_unreachable_valid && s->ud_unreachable == dest_qpn) {
			s->ud_unreachable_valid = false; /* for the WR that asked */
			return SV_REACH_UNREACHABLE;
		}
		return SV_REACH_NO_PEER;
	}
	peer = s->peer;
	if (!peer)
		return SV_REACH_NO_PEER;
	if (!shm_peer_ready(peer))
		return SV_REACH_WAIT;
	return shm_pkeys_match(qp, peer) ? SV_REACH_READY : SV_REACH_PARTITION;
}

/* Dropped for its P_Key: the peer's port counts it (its bad_pkey_cntr), on its page. */
void shm_qp_dropped(struct sv_qp *qp, uint32_t dest_qpn)
{
	struct shm_qp *s = shm_qp(qp);
	struct shm_peer *peer = qp->ibv.qp_base.qp_type == IBV_QPT_UD ? shm_ud_dest(s, dest_qpn)
								       : s->peer;

	if (peer)
		atomic_fetch_add_explicit(&peer->page->bad_pkey, 1, memory_order_relaxed);
}

void shm_qp_abandon(struct sv_qp *qp, uint32_t msn)
{
	struct shm_qp *s = shm_qp(qp);

	if (s->peer)
		atomic_store(&s->peer->page->rnr_abandon, msn);
}

/* --- progress ------------------------------------------------------------------------------ */

bool shm_qp_arm(struct sv_qp *qp, bool assist)
{
	struct shm_qp *s = shm_qp(qp);

	if (hint(s->rx_poisoned))
		return true; /* what waits there needs a RESET, not us */
	if (!shm_fifo_arm(s->rx))
		return false;
	/* An acknowledgement stored before we armed (shm_tx.c: its writer looks at armed
	 * after the store, as after a publish). */
	if (atomic_load(&s->page->acked) != atomic_load(&s->acked_seen)) {
		shm_fifo_disarm(s->rx);
		return false;
	}
	/* A copy-assist job posted before we armed (shm_fifo_take_armed's other half). */
	if (assist && shm_assist_pending(&s->page->assist) && shm_assist_on()) {
		shm_fifo_disarm(s->rx);
		return false;
	}
	return true;
}

void shm_qp_disarm(struct sv_qp *qp)
{
	shm_fifo_disarm(shm_qp(qp)->rx);
}

/* The peer, if it is a QP of this process and answers work we wait for. */
struct sv_qp *shm_qp_local_peer(struct sv_qp *qp)
{
	struct shm_qp *s = shm_qp(qp);
	uint32_t qpn = 0;

	/* The flag is a hint; the lock confirms (and nothing waits for it). */
	if (!hint(s->peer_local) || !sv_spin_trylock(&qp->sq.lock))
		return NULL;
	if (s->peer && s->peer->local && qp->sq.tail != qp->sq_next)
		qpn = s->peer->qpn;
	sv_spin_unlock(&qp->sq.lock);
	return qpn ? shm_conn_pin_qp(qpn) : NULL;
}

uint32_t shm_qp_bad_pkeys(struct sv_qp *qp)
{
	return atomic_load_explicit(&shm_qp(qp)->page->bad_pkey, memory_order_relaxed);
}
