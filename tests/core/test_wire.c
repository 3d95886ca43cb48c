/*
 * The test wire (test_wire.h): endpoints by QPN in one table, each an inbound queue of
 * copied messages under its own mutex (a leaf lock: never held while the core runs).
 */
#include "core/test_wire.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/sv_engine.h"
#include "core/sv_mr.h"
#include "core/sv_path.h"
#include "core/sv_qp_table.h"
#include "util/sv_lock.h"

enum { TW_EPS = 1024, TW_FIRST_QPN = 0x40, TW_BUDGET = 64 };

struct tw_msg {
	struct sv_hdr h;
	uint64_t due;     /* the receiver's poll count from which it may be delivered */
	uint32_t n;       /* payload bytes actually carried (h.len is what the sender said) */
	unsigned char data[];
};

struct tw_ep {
	pthread_mutex_t lock; /* the queue, polls */
	struct tw_msg *q[TW_QMAX];
	uint32_t head, n;
	uint64_t polls;
	/* under the table's lock */
	bool used, phantom;
	bool unordered; /* its QP has tw_wire_unordered or _lossy: the knobs apply */
	bool lossy;     /* ... tw_wire_lossy: what the responder holds is dropped */
	struct sv_qp *qp;
	/* the owner's connection: written under its rx_busy and sq.lock */
	_Atomic uint32_t peer;
	_Atomic uint32_t state;      /* published (enum ibv_qp_state) */
	_Atomic uint32_t abandon;    /* the requester gave up on msn <= this (RNR) */
	_Atomic bool armed, peer_left;
	_Atomic uint64_t sent[TW_OPS], eagain, delivered;
	_Atomic uint32_t max_len;
	/* unordered knobs, under lock */
	uint64_t puts, read_resps;
	struct tw_msg *held;
};

static struct tw_ep eps[TW_EPS];
static pthread_mutex_t table = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_qpn = TW_FIRST_QPN;
static pthread_once_t once = PTHREAD_ONCE_INIT;

struct tw_knobs tw_knobs = { .seg_max = 1000, .capacity = TW_QMAX };
bool tw_unordered, tw_lossy;

void tw_reset_knobs(void)
{
	tw_knobs = (struct tw_knobs){ .seg_max = 1000, .capacity = TW_QMAX };
	tw_unordered = tw_lossy = false;
}

static void init_eps(void)
{
	for (int i = 0; i < TW_EPS; i++)
		pthread_mutex_init(&eps[i].lock, NULL);
}

static struct tw_ep *ep_of(uint32_t qpn)
{
	return qpn < TW_EPS ? &eps[qpn] : NULL;
}

/* A fresh endpoint (never reused: a late message for an old QPN finds nobody). */
static uint32_t ep_new(struct sv_qp *qp)
{
	uint32_t qpn = 0;

	pthread_once(&once, init_eps);
	pthread_mutex_lock(&table);
	if (next_qpn < TW_EPS) {
		struct tw_ep *e = &eps[next_qpn];

		qpn = next_qpn++;
		e->used = true;
		e->phantom = qp == NULL;
		e->qp = qp;
		atomic_store(&e->peer, 0);
		atomic_store(&e->state, qp ? IBV_QPS_RESET : IBV_QPS_RTS);
	}
	pthread_mutex_unlock(&table);
	return qpn;
}

static void queue_clear(struct tw_ep *e)
{
	pthread_mutex_lock(&e->lock);
	while (e->n) {
		free(e->q[e->head]);
		e->head = (e->head + 1) % TW_QMAX;
		e->n--;
	}
	free(e->held);
	e->held = NULL;
	e->puts = e->read_resps = 0;
	pthread_mutex_unlock(&e->lock);
}

static void ep_free(uint32_t qpn)
{
	struct tw_ep *e = ep_of(qpn);

	if (!e)
		return;
	pthread_mutex_lock(&table);
	e->used = false;
	e->qp = NULL;
	pthread_mutex_unlock(&table);
	queue_clear(e);
}

/* What the unordered knobs do to a message of @op into @e (lock held): drop and swap
 * count the requests only (an endpoint's first answer held back would never go). */
enum mangle { M_QUEUE, M_DROP, M_HOLD, M_TWICE };

static enum mangle mangle(struct tw_ep *e, uint8_t op)
{
	if (op < SV_OP_REQ_MAX && tw_knobs.drop_all)
		return M_DROP;
	if (op == SV_OP_READ_RESP && tw_knobs.drop_read_resp && ++e->read_resps == 1)
		return M_DROP;
	if (op < SV_OP_REQ_MAX && ++e->puts == 1) {
		if (tw_knobs.drop_first)
			return M_DROP;
		if (tw_knobs.swap_first)
			return M_HOLD;
	}
	return tw_knobs.dup_all ? M_TWICE : M_QUEUE;
}

/* Appends a copy of @h and its payload to @dest's queue. @limit: the capacity knob. */
static int put(uint32_t dest, const struct sv_hdr *h, const struct iovec *iov, int n_iov,
	       const void *flat, uint32_t len, bool limit)
{
	struct tw_ep *e = ep_of(dest);
	struct tw_msg *m;
	enum mangle how;
	uint32_t off = 0;

	if (!e)
		return 0; /* nobody there: lost */
	m = malloc(sizeof(*m) + len);
	if (!m)
		return -EAGAIN;
	m->h = *h;
	m->n = len;
	if (flat) {
		memcpy(m->data, flat, len);
	} else {
		for (int i = 0; i < n_iov && off < len; i++) {
			size_t k = iov[i].iov_len < len - off ? iov[i].iov_len : len - off;

			memcpy(m->data + off, iov[i].iov_base, k);
			off += (uint32_t)k;
		}
		m->n = off;
	}
	pthread_mutex_lock(&table);
	if (!e->used) {
		pthread_mutex_unlock(&table);
		free(m);
		return 0; /* gone: lost */
	}
	pthread_mutex_lock(&e->lock);
	pthread_mutex_unlock(&table);
	if (e->n >= TW_QMAX || (limit && e->n >= tw_knobs.capacity)) {
		pthread_mutex_unlock(&e->lock);
		free(m);
		return -EAGAIN;
	}
	m->due = e->polls + tw_knobs.delay;
	how = limit && e->unordered ? mangle(e, h->op) : M_QUEUE;
	if (how == M_DROP || how == M_HOLD) {
		if (how == M_HOLD)
			e->held = m;
		else
			free(m);
		pthread_mutex_unlock(&e->lock);
		return 0;
	}
	e->q[(e->head + e->n) % TW_QMAX] = m;
	e->n++;
	if (how == M_TWICE && e->n < TW_QMAX) {
		struct tw_msg *d = malloc(sizeof(*m) + m->n);

		if (d) {
			memcpy(d, m, sizeof(*m) + m->n);
			e->q[(e->head + e->n) % TW_QMAX] = d;
			e->n++;
		}
	}
	if (e->held && e->puts == 2) { /* the first goes after the second */
		e->q[(e->head + e->n) % TW_QMAX] = e->held;
		e->n++;
		e->held = NULL;
	}
	pthread_mutex_unlock(&e->lock);
	if (atomic_load(&e->armed))
		sv_engine_kick();
	return 0;
}

/* --- the ops ------------------------------------------------------------------------------ */

static struct tw_ep *tw(struct sv_qp *qp)
{
	return qp->wire_qp;
}

static uint32_t qpn_of(struct sv_qp *qp)
{
	return (uint32_t)(tw(qp) - eps);
}

static int qp_init(struct sv_qp *qp, uint32_t *qpn)
{
	uint32_t n = ep_new(qp);

	if (!n)
		return -ENOSPC;
	qp->wire_qp = &eps[n];
	eps[n].unordered = qp->wire == &tw_wire_unordered || qp->wire == &tw_wire_lossy;
	eps[n].lossy = qp->wire == &tw_wire_lossy;
	*qpn = n;
	return 0;
}

static void qp_fini(struct sv_qp *qp)
{
	ep_free(qpn_of(qp));
	/* A poller that pinned us through local_peer before we left the table. */
	while (atomic_load(&qp->eng_ref))
		sched_yield();
	qp->wire_qp = NULL;
}

static void publish(struct sv_qp *qp)
{
	struct tw_ep *e = tw(qp);
	uint32_t st = atomic_load(&qp->pub.state);

	if (st == IBV_QPS_RTR && atomic_load(&e->state) != IBV_QPS_RTR)
		atomic_store(&e->abandon, 0); /* a new connection */
	atomic_store(&e->state, st);
}

static int connect_qpn(struct sv_qp *qp, uint32_t qpn, void **conn)
{
	struct tw_ep *e = ep_of(qpn);
	bool there;

	(void)qp;
	pthread_mutex_lock(&table);
	there = e && e->used;
	pthread_mutex_unlock(&table);
	*conn = there ? (void *)(uintptr_t)qpn : NULL;
	return there ? 0 : -ENOENT;
}

static void *attach(struct sv_qp *qp, uint32_t qpn, void *conn, int err)
{
	struct tw_ep *e = tw(qp);

	if (err || !conn || qp->ibv.qp_base.qp_type == IBV_QPT_UD)
		return NULL; /* UD needs no attach: datagrams go by dest_qpn */
	if (!atomic_load(&e->peer)) {
		atomic_store(&e->peer, qpn);
		atomic_store(&e->peer_left, false);
	}
	return NULL;
}

static void release(struct sv_qp *qp, void *conn)
{
	(void)qp;
	(void)conn;
}

static void disconnect(struct sv_qp *qp)
{
	struct tw_ep *e = tw(qp), *p;
	uint32_t peer;

	sv_rx_lock(qp);
	sv_spin_lock(&qp->sq.lock);
	peer = atomic_exchange(&e->peer, 0);
	atomic_store(&e->peer_left, false);
	sv_spin_unlock(&qp->sq.lock);
	sv_rx_unlock(qp);
	/* The peer learns that we left (its timers then fail what waits for us). */
	p = ep_of(peer);
	if (p && atomic_load(&p->peer) == qpn_of(qp))
		atomic_store(&p->peer_left, true);
}

static void discard(struct sv_qp *qp)
{
	queue_clear(tw(qp));
}

static enum sv_reach reach(struct sv_qp *qp, uint32_t dest_qpn)
{
	struct tw_ep *e = tw(qp), *p;
	uint32_t st;

	if (qp->ibv.qp_base.qp_type == IBV_QPT_UD) {
		p = ep_of(dest_qpn);
		return p && p->used ? SV_REACH_READY : SV_REACH_UNREACHABLE;
	}
	p = ep_of(atomic_load(&e->peer));
	if (!p || p == eps)
		return SV_REACH_NO_PEER;
	st = atomic_load(&p->state);
	if (st == IBV_QPS_RESET || st == IBV_QPS_INIT)
		return SV_REACH_WAIT;
	return SV_REACH_READY;
}

static uint64_t seg_max(struct sv_qp *qp, const struct sv_hdr *h)
{
	(void)qp;
	switch (h->op) {
	case SV_OP_SEND:
	case SV_OP_WRITE:
	case SV_OP_READ_RESP:
		return tw_knobs.seg_max;
	default:
		return UINT64_MAX;
	}
}

static int tw_send(struct sv_qp *qp, const struct sv_hdr *h, const struct iovec *iov, int n_iov)
{
	struct tw_ep *e = tw(qp);
	uint32_t dest = qp->ibv.qp_base.qp_type == IBV_QPT_UD ? h->dest_qpn : atomic_load(&e->peer);
	int err = put(dest, h, iov, n_iov, NULL, h->len, true);

	if (err)
		atomic_fetch_add(&e->eagain, 1);
	else if (h->op < TW_OPS)
		atomic_fetch_add(&e->sent[h->op], 1);
	return err;
}

static void abandon(struct sv_qp *qp, uint32_t msn)
{
	struct tw_ep *p = ep_of(atomic_load(&tw(qp)->peer));

	if (p)
		atomic_store(&p->abandon, msn);
}

/* Where a delivered segment's bytes are (struct sv_payload first). */
struct tw_payload {
	struct sv_payload p;
	const struct tw_msg *m;
};

static enum ibv_wc_status copy(const struct sv_payload *pl, uint64_t off, const struct iovec *dst,
			       int n_dst, uint64_t len)
{
	const struct tw_msg *m = ((const struct tw_payload *)pl)->m;
	uint64_t done = 0;

	/* A peer's header may claim more than it carried: never read past what came. */
	if (off > m->n || len > m->n - off)
		return IBV_WC_LOC_LEN_ERR;
	for (int i = 0; i < n_dst && done < len; i++) {
		size_t k = dst[i].iov_len < len - done ? dst[i].iov_len : len - done;

		memcpy(dst[i].iov_base, m->data + off + done, k);
		done += k;
	}
	return done == len ? IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR;
}

static struct tw_msg *peek(struct tw_ep *e)
{
	struct tw_msg *m = NULL;

	pthread_mutex_lock(&e->lock);
	if (e->n && e->q[e->head]->due <= e->polls)
		m = e->q[e->head];
	pthread_mutex_unlock(&e->lock);
	return m;
}

static void pop(struct tw_ep *e)
{
	pthread_mutex_lock(&e->lock);
	if (e->n) {
		free(e->q[e->head]);
		e->head = (e->head + 1) % TW_QMAX;
		e->n--;
	}
	pthread_mutex_unlock(&e->lock);
}

static int poll_qp(struct sv_qp *qp)
{
	struct tw_ep *e = tw(qp);
	struct tw_msg *m;
	int n = 0;

	if (!sv_rx_trylock(qp))
		return 0;
	pthread_mutex_lock(&e->lock);
	e->polls++;
	pthread_mutex_unlock(&e->lock);
	sv_mr_place_begin(); /* a deregistration waits for what we place */
	while (n < TW_BUDGET && (m = peek(e))) {
		struct tw_payload p = { .p.copy = copy, .m = m };
		struct sv_hdr h = m->h;
		uint32_t ab = atomic_load(&e->abandon);

		if (h.len > atomic_load(&e->max_len))
			atomic_store(&e->max_len, h.len);
		if (h.op < SV_OP_REQ_MAX) {
			if (sv_qp_type_reliable(qp->ibv.qp_base.qp_type) && ab &&
			    h.op != SV_OP_TERMINATE && (int32_t)(ab - h.msn) >= 0)
				h.flags |= SV_F_ABANDONED;
			if (sv_resp_deliver(qp, &h, &p.p) == SV_RX_HOLD && !e->lossy)
				break;
		} else {
			sv_comp_deliver(qp, &h, &p.p);
		}
		pop(e);
		atomic_fetch_add(&e->delivered, 1);
		n++;
	}
	sv_mr_place_end();
	sv_resp_flush(qp);
	sv_rx_unlock(qp);
	return n;
}

static bool arm(struct sv_qp *qp, bool assist)
{
	struct tw_ep *e = tw(qp);
	bool empty;

	(void)assist;
	atomic_store(&e->armed, true);
	pthread_mutex_lock(&e->lock);
	empty = e->n == 0;
	pthread_mutex_unlock(&e->lock);
	if (!empty)
		atomic_store(&e->armed, false);
	return empty && !atomic_load(&e->peer_left);
}

static void disarm(struct sv_qp *qp)
{
	atomic_store(&tw(qp)->armed, false);
}

/* The peer QP of this process, pinned, so that polling one CQ moves the other QP. */
static struct sv_qp *local_peer(struct sv_qp *qp)
{
	struct tw_ep *p = ep_of(atomic_load(&tw(qp)->peer));
	struct sv_qp *peer = NULL;

	if (!p)
		return NULL;
	pthread_mutex_lock(&table);
	if (p->used && p->qp) {
		peer = p->qp;
		atomic_fetch_add(&peer->eng_ref, 1);
	}
	pthread_mutex_unlock(&table);
	return peer;
}

static bool needs_timer(struct sv_qp *qp)
{
	return atomic_load(&tw(qp)->peer_left);
}

/* The peer left: once what it sent is handled, what waits for it fails. */
static int timers(struct sv_qp *qp)
{
	struct tw_ep *e = tw(qp);
	bool empty;

	if (!atomic_load(&e->peer_left) || !sv_rx_trylock(qp))
		return 0;
	pthread_mutex_lock(&e->lock);
	empty = e->n == 0;
	pthread_mutex_unlock(&e->lock);
	if (empty && sv_spin_trylock(&qp->sq.lock)) {
		atomic_store(&e->peer, 0);
		atomic_store(&e->peer_left, false);
		sv_comp_peer_gone(qp);
		sv_spin_unlock(&qp->sq.lock);
	}
	sv_rx_unlock(qp);
	return 1;
}

static uint32_t bad_pkeys(struct sv_qp *qp)
{
	(void)qp;
	return 0;
}

/* The ops of both tables (the wire is the same; only the caps differ). */
#define TW_WIRE_OPS \
	.qp_init = qp_init, \
	.qp_fini = qp_fini, \
	.publish = publish, \
	.connect = connect_qpn, \
	.attach = attach, \
	.release = release, \
	.disconnect = disconnect, \
	.discard = discard, \
	.reach = reach, \
	.seg_max = seg_max, \
	.send = tw_send, \
	.abandon = abandon, \
	.poll = poll_qp, \
	.arm = arm, \
	.disarm = disarm, \
	.local_peer = local_peer, \
	.needs_timer = needs_timer, \
	.timers = timers, \
	.bad_pkeys = bad_pkeys, \
	/* end */

const struct sv_wire_ops tw_wire = {
	.name = "test",
	.caps = SV_WIRE_ACKED | SV_WIRE_RNR | SV_WIRE_ATOMICS | SV_WIRE_IMM | SV_WIRE_SEND_IMM | SV_WIRE_ORDERED,
	TW_WIRE_OPS
};

/* The same wire, its caps saying it may reorder, drop and duplicate (the knobs). */
const struct sv_wire_ops tw_wire_unordered = {
	.name = "test-unordered",
	.caps = SV_WIRE_ACKED | SV_WIRE_RNR | SV_WIRE_ATOMICS | SV_WIRE_IMM | SV_WIRE_SEND_IMM,
	TW_WIRE_OPS
};

/* The same, lossy: the core retransmits (go-back-N on its transport timer, NAKs). */
const struct sv_wire_ops tw_wire_lossy = {
	.name = "test-lossy",
	.caps = SV_WIRE_ACKED | SV_WIRE_ATOMICS | SV_WIRE_IMM | SV_WIRE_SEND_IMM | SV_WIRE_LOSSY,
	TW_WIRE_OPS
};

/* Which wire a new QP gets: this one. Defined here, the link never pulls sv_wires.o (and
 * with it the shm wire) out of libsvcore.a. */
const struct sv_wire_ops *sv_wire_for_qp(enum ibv_qp_type type);
const struct sv_wire_ops *sv_wire_for_qp(enum ibv_qp_type type)
{
	(void)type;
	return tw_lossy ? &tw_wire_lossy : tw_unordered ? &tw_wire_unordered : &tw_wire;
}

const struct sv_wire_ops *sv_wire_far_for_qp(enum ibv_qp_type type, bool *local);
const struct sv_wire_ops *sv_wire_far_for_qp(enum ibv_qp_type type, bool *local)
{
	(void)type;
	*local = false;
	return NULL; /* no second wire for UD */
}

/* The rest of src/wire/sv_wires.h, for the verbs layer's extensions: no other wire. */
void sv_wire_qp_created(struct sv_qp *qp);
void sv_wire_qp_created(struct sv_qp *qp)
{
	(void)qp;
}

const struct sv_wire_ops *sv_wire_for_peer(struct sv_qp *qp);
const struct sv_wire_ops *sv_wire_for_peer(struct sv_qp *qp)
{
	return qp->wire;
}

void sv_wire_choose_next(const char *name);
void sv_wire_choose_next(const char *name)
{
	(void)name;
}

bool sv_wire_is_iwarp(const struct sv_wire_ops *w);
bool sv_wire_is_iwarp(const struct sv_wire_ops *w)
{
	(void)w;
	return false;
}

bool sv_wire_is_roce(const struct sv_wire_ops *w);
bool sv_wire_is_roce(const struct sv_wire_ops *w)
{
	(void)w;
	return false;
}

int sv_wire_adopt_stream(struct sv_qp *qp, int fd, bool crc, bool ext, uint16_t ird,
			 uint16_t ord);
int sv_wire_adopt_stream(struct sv_qp *qp, int fd, bool crc, bool ext, uint16_t ird,
			 uint16_t ord)
{
	(void)qp, (void)fd, (void)crc, (void)ext, (void)ird, (void)ord;
	return -EINVAL;
}

/* --- the test's side ----------------------------------------------------------------------- */

uint32_t tw_phantom(void)
{
	return ep_new(NULL);
}

void tw_phantom_free(uint32_t qpn)
{
	ep_free(qpn);
}

void tw_inject(uint32_t dest, const struct sv_hdr *h, const void *payload, uint32_t len)
{
	(void)put(dest, h, NULL, 0, payload ? payload : "", payload ? len : 0, false);
}

int tw_take(uint32_t qpn, struct sv_hdr *h, void *buf, uint32_t cap)
{
	struct tw_ep *e = ep_of(qpn);
	struct tw_msg *m = NULL;
	int n;

	if (!e)
		return -1;
	pthread_mutex_lock(&e->lock);
	if (e->n) {
		m = e->q[e->head];
		e->head = (e->head + 1) % TW_QMAX;
		e->n--;
	}
	pthread_mutex_unlock(&e->lock);
	if (!m)
		return -1;
	*h = m->h;
	n = (int)m->n;
	if (buf)
		memcpy(buf, m->data, m->n < cap ? m->n : cap);
	free(m);
	return n;
}

uint32_t tw_queued(uint32_t qpn)
{
	struct tw_ep *e = ep_of(qpn);
	uint32_t n;

	if (!e)
		return 0;
	pthread_mutex_lock(&e->lock);
	n = e->n;
	pthread_mutex_unlock(&e->lock);
	return n;
}

uint64_t tw_sent(uint32_t qpn, enum sv_op op)
{
	return qpn < TW_EPS && (unsigned)op < TW_OPS ? atomic_load(&eps[qpn].sent[op]) : 0;
}

uint64_t tw_eagain(uint32_t qpn)
{
	return qpn < TW_EPS ? atomic_load(&eps[qpn].eagain) : 0;
}

uint64_t tw_delivered(uint32_t qpn)
{
	return qpn < TW_EPS ? atomic_load(&eps[qpn].delivered) : 0;
}

uint32_t tw_max_len(uint32_t qpn)
{
	return qpn < TW_EPS ? atomic_load(&eps[qpn].max_len) : 0;
}
