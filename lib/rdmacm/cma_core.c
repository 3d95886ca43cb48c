/*
 * The machinery every rdma_cm call stands on: the lock, the ids, the device, event
 * channels and their queues, and the CM thread (epoll on the ids' sockets, their
 * deadlines, the graveyard). What input on a socket or a passed deadline means is the
 * handshake's (cma_conn.c): it hands the thread its handlers when it starts it.
 */
#include "cma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "util/sv_thread.h"
#include "util/sv_time.h"

pthread_mutex_t cma_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cma_id *all_ids; /* every id, under cma_lock */

const char *const cma_state_name[] = {
	[CMA_IDLE] = "IDLE",           [CMA_ADDR_QUERY] = "ADDR_QUERY",
	[CMA_ADDR_BOUND] = "ADDR_BOUND", [CMA_ROUTE_RESOLVED] = "ROUTE_RESOLVED",
	[CMA_LISTEN] = "LISTEN",       [CMA_CONNECT] = "CONNECT",
	[CMA_REPLIED] = "REPLIED",     [CMA_REQ_RCVD] = "REQ_RCVD",   [CMA_ACCEPTED] = "ACCEPTED",
	[CMA_RESPONSE] = "RESPONSE",   [CMA_CONNECTED] = "CONNECTED",
	[CMA_DISCONNECTED] = "DISCONNECTED", [CMA_ERROR] = "ERROR",
	[CMA_LINGER] = "LINGER",
};

/* SOFTVERBS_LOG applies to this library too (it has its own copy of the logger). */
__attribute__((constructor)) static void cma_init(void)
{
	sv_log_init();
}

/* --- the device ---------------------------------------------------------------------- */

static struct ibv_context *device_ctx;
static struct ibv_pd *device_pd;

/* The one device, opened once and kept: rdma_cm ids share it (id->verbs). */
struct ibv_context *cma_device(void)
{
	static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
	struct ibv_device **list;
	int n = 0;

	pthread_mutex_lock(&once);
	if (!device_ctx) {
		list = ibv_get_device_list(&n);
		if (list && n > 0)
			device_ctx = ibv_open_device(list[0]);
		if (list)
			ibv_free_device_list(list);
	}
	pthread_mutex_unlock(&once);
	if (!device_ctx)
		errno = ENODEV;
	return device_ctx;
}

/* What rdma_create_qp uses when the caller gives no PD (one per process, kept). */
struct ibv_pd *cma_default_pd(struct ibv_context *ctx)
{
	static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
	struct ibv_pd *pd;

	pthread_mutex_lock(&once);
	if (!device_pd && ctx)
		device_pd = ibv_alloc_pd(ctx);
	pd = device_pd;
	pthread_mutex_unlock(&once);
	return pd;
}

/* --- ids ----------------------------------------------------------------------------- */

struct cma_id *cma_id_new(struct cma_channel *chan, void *context, enum rdma_port_space ps)
{
	struct cma_id *id = calloc(1, sizeof(*id));

	if (!id)
		return NULL;
	id->id.channel = chan ? &chan->ch : NULL;
	id->id.context = context;
	id->id.ps = ps;
	id->id.qp_type = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
	id->chan = chan;
	id->fd = -1;
	id->claim_fd = id->claim_fd6 = -1;
	id->state = CMA_IDLE;
	if (chan)
		chan->ids++;
	id->next = all_ids;
	all_ids = id;
	return id;
}

/* Frees @id's memory (its socket and events are gone). Under cma_lock. */
void cma_id_free_locked(struct cma_id *id)
{
	struct cma_id **p;

	for (p = &all_ids; *p; p = &(*p)->next) {
		if (*p == id) {
			*p = id->next;
			break;
		}
	}
	if (id->chan && --id->chan->ids == 0 && id->sync)
		cma_channel_free(id->chan);
	if (id->claim_fd >= 0)
		close(id->claim_fd);
	if (id->claim_fd6 >= 0)
		close(id->claim_fd6);
	id->claim_fd = id->claim_fd6 = -1;
	free(id->ep_qp_attr);
	cma_graveyard(id);
}

/* Drops a listener's connection that never became an id the user saw. */
void cma_id_release(struct cma_id *id)
{
	cma_close_fd(id);
	id->destroyed = true;
	cma_id_free_locked(id);
}

/* The path a RoCE port reports: GIDs from the addresses, this host's LID both ends. */
void cma_id_fill_route(struct cma_id *id)
{
	struct ibv_sa_path_rec *p = &id->path;
	struct ibv_port_attr port;

	memset(p, 0, sizeof(*p));
	memset(&port, 0, sizeof(port));
	if (id->id.verbs)
		ibv_query_port(id->id.verbs, 1, &port);
	p->dgid = id->id.route.addr.addr.ibaddr.dgid;
	p->sgid = id->id.route.addr.addr.ibaddr.sgid;
	p->dlid = htons(port.lid);
	p->slid = htons(port.lid);
	p->reversible = 1;
	p->numb_path = 1;
	p->pkey = htons(0xffff);
	p->hop_limit = 64;
	p->mtu_selector = 2; /* exactly */
	p->mtu = port.active_mtu ? port.active_mtu : IBV_MTU_1024;
	p->rate_selector = 2;
	p->rate = IBV_RATE_100_GBPS;
	p->packet_life_time_selector = 2;
	p->packet_life_time = 0;
	p->traffic_class = id->tos;
	id->id.route.path_rec = p;
	id->id.route.num_paths = 1;
}

/* --- event channels ------------------------------------------------------------------ */

struct cma_channel *cma_channel_new(void)
{
	struct cma_channel *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->ch.fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
	if (c->ch.fd < 0) {
		free(c);
		return NULL;
	}
	return c;
}

/*
 * Destroyed channels, kept a while: a thread may still be inside rdma_get_cm_event on
 * one (rping destroys the channel its CM thread blocks on, which rdma-core survives
 * because the blocked read never returns), or enter it just after (rping's CM thread,
 * late on a loaded machine: it gets EBADF, as a read of the closed descriptor would,
 * instead of reading freed memory). The oldest goes once CMA_DEAD_KEPT are kept and
 * nobody is inside it.
 */
enum { CMA_DEAD_KEPT = 64 };
static struct cma_channel *dead_channels[CMA_DEAD_KEPT]; /* under cma_lock */
static unsigned int dead_next;

static void channel_bury(struct cma_channel *c)
{
	struct cma_channel *old = dead_channels[dead_next];

	if (old && !old->readers)
		free(old);
	else if (old)
		old->orphan = true; /* its last reader frees it */
	dead_channels[dead_next] = c;
	dead_next = (dead_next + 1) % CMA_DEAD_KEPT;
}

__attribute__((destructor)) static void dead_channels_free(void)
{
	pthread_mutex_lock(&cma_lock);
	for (unsigned int i = 0; i < CMA_DEAD_KEPT; i++) {
		if (dead_channels[i] && !dead_channels[i]->readers)
			free(dead_channels[i]);
		dead_channels[i] = NULL;
	}
	pthread_mutex_unlock(&cma_lock);
}

/* Ends @c (under cma_lock). */
void cma_channel_free(struct cma_channel *c)
{
	struct cma_event *e, *next;

	for (e = c->head; e; e = next) {
		next = e->next;
		free(e);
	}
	c->head = c->tail = NULL;
	close(c->ch.fd);
	c->dead = true;
	channel_bury(c);
}

/* --- events -------------------------------------------------------------------------- */

struct cma_event *cma_event_new(struct cma_id *id, enum rdma_cm_event_type type, int status)
{
	struct cma_event *e = calloc(1, sizeof(*e));

	if (!e) {
		sv_err("rdma_cm: out of memory for a %s event", rdma_event_str(type));
		return NULL;
	}
	e->owner = id;
	e->ev.id = &id->id;
	e->ev.event = type;
	e->ev.status = status;
	return e;
}

/* Queues @e on its owner's channel and counts it on the channel's fd. Under cma_lock. */
void cma_event_post(struct cma_event *e)
{
	struct cma_channel *c;
	uint64_t one = 1;

	if (!e)
		return;
	c = e->owner->chan;
	if (c->tail)
		c->tail->next = e;
	else
		c->head = e;
	c->tail = e;
	if (write(c->ch.fd, &one, sizeof(one)) != sizeof(one))
		sv_err("rdma_cm: event channel count failed: %s", strerror(errno));
}

/* Takes @e off @c's queue with its count (under cma_lock). The fd's count always equals
 * the events queued, and only holders of cma_lock take counts, so the read of one
 * count never blocks. */
void cma_channel_unlink(struct cma_channel *c, struct cma_event *e)
{
	struct cma_event **p;
	uint64_t v;

	for (p = &c->head; *p; p = &(*p)->next) {
		if (*p != e)
			continue;
		*p = e->next;
		if (c->tail == e) {
			c->tail = NULL;
			for (struct cma_event *x = c->head; x; x = x->next)
				c->tail = x;
		}
		e->next = NULL;
		if (read(c->ch.fd, &v, sizeof(v)) != sizeof(v))
			sv_err("rdma_cm: event channel count lost: %s", strerror(errno));
		return;
	}
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	if ((unsigned)event < sizeof(names) / sizeof(names[0]) && names[event])
		return names[event];
	return "UNKNOWN EVENT";
}

/* --- the CM thread ------------------------------------------------------------------- */

static struct {
	pthread_t thread;
	bool started;
	const struct cma_handlers *handlers; /* what input and deadlines do */
	int epfd;
	int kick;                  /* eventfd: deadlines changed, graveyard to empty */
	struct cma_id *graveyard;  /* ids to free once no epoll batch can name them */
} cm = { .epfd = -1, .kick = -1 };

void cma_kick(void)
{
	uint64_t one = 1;

	if (cm.kick >= 0 && write(cm.kick, &one, sizeof(one)) < 0)
		sv_dbg("rdma_cm: kick: %s", strerror(errno));
}

void cma_watch(struct cma_id *id, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = id };

	if (id->fd < 0)
		return;
	if (epoll_ctl(cm.epfd, id->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, id->fd, &ev))
		sv_err("rdma_cm: epoll_ctl: %s", strerror(errno));
	else
		id->in_epoll = true;
	cma_kick(); /* a deadline may have come with it */
}

void cma_unwatch(struct cma_id *id)
{
	if (id->in_epoll && id->fd >= 0)
		epoll_ctl(cm.epfd, EPOLL_CTL_DEL, id->fd, NULL);
	id->in_epoll = false;
}

void cma_close_fd(struct cma_id *id)
{
	cma_unwatch(id);
	if (id->fd >= 0)
		close(id->fd);
	id->fd = -1;
	id->deadline_ns = 0;
}

/*
 * Ends @id's iWARP stream (our dup of the QP's socket) without sending the end at once:
 * the socket moves to a hidden id that the CM thread closes when the peer ends the
 * stream, or CMA_LINGER_NS later. Linux siw fails a Send it has put on the wire but not
 * yet completed (IB_WC_LOC_QP_OP_ERR) when the connection's end arrives meanwhile (its
 * llp close flushes the send in progress); a peer that answers and closes at once (the
 * last exchange of perftest's server) hit that window in four runs of ten of
 * ib_write_bw -R under TCG.
 * @id keeps no socket. No-op when it has none, or the memory for the hidden id is short
 * (then the end goes at once).
 */
void cma_linger(struct cma_id *id)
{
	struct cma_id *l;

	if (id->fd < 0)
		return;
	l = cma_id_new(NULL, NULL, id->id.ps);
	if (!l) {
		cma_close_fd(id);
		return;
	}
	cma_unwatch(id);
	l->fd = id->fd;
	id->fd = -1;
	id->deadline_ns = 0;
	l->state = CMA_LINGER;
	l->deadline_ns = sv_now_ns() + CMA_LINGER_NS;
	cma_watch(l, EPOLLRDHUP);
}

/* The CM thread may hold @id from an epoll batch it has not finished; it frees. */
void cma_graveyard(struct cma_id *id)
{
	id->next = cm.graveyard;
	cm.graveyard = id;
	cma_kick();
}

static void free_graveyard(void)
{
	while (cm.graveyard) {
		struct cma_id *id = cm.graveyard;

		cm.graveyard = id->next;
		free(id);
	}
}

/* Every id with a deadline, and the nearest of them (walks the ids with pending
 * connections too: those hang off their listeners). */
static uint64_t expire(uint64_t now)
{
	uint64_t next = 0;

	for (struct cma_id *id = all_ids, *nx; id; id = nx) {
		nx = id->next;
		if (!id->deadline_ns)
			continue;
		if (id->deadline_ns <= now) {
			cm.handlers->timeout(id);
			continue;
		}
		if (!next || id->deadline_ns < next)
			next = id->deadline_ns;
	}
	return next;
}

static void *cm_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct epoll_event evs[32];
		uint64_t next;
		int timeout, n;

		pthread_mutex_lock(&cma_lock);
		free_graveyard();
		next = expire(sv_now_ns());
		pthread_mutex_unlock(&cma_lock);
		if (!next) {
			timeout = -1;
		} else {
			/* The deadline may have passed since expire() looked: then look now. */
			int64_t left = (int64_t)(next - sv_now_ns());

			timeout = left <= 0 ? 0 : (int)(left / 1000000) + 1;
		}
		n = epoll_wait(cm.epfd, evs, 32, timeout);
		pthread_mutex_lock(&cma_lock);
		for (int i = 0; i < n; i++) {
			struct cma_id *id = evs[i].data.ptr;
			uint64_t v;

			if (!id) {
				if (read(cm.kick, &v, sizeof(v)) < 0)
					v = 0;
				continue;
			}
			/* Closed since the batch was taken: its memory waits in the graveyard. */
			if (id->fd < 0 || !id->in_epoll)
				continue;
			cm.handlers->input(id, evs[i].events);
		}
		pthread_mutex_unlock(&cma_lock);
	}
	return NULL;
}

int cma_thread_start(const struct cma_handlers *handlers)
{
	static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	int err = 0;

	pthread_mutex_lock(&once);
	if (!cm.started) {
		cm.handlers = handlers;
		cm.epfd = epoll_create1(EPOLL_CLOEXEC);
		cm.kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (cm.epfd < 0 || cm.kick < 0 || epoll_ctl(cm.epfd, EPOLL_CTL_ADD, cm.kick, &ev))
			err = errno;
		else if ((err = sv_thread_start(&cm.thread, cm_main, NULL)) == 0)
			cm.started = true;
		if (err) {
			if (cm.epfd >= 0)
				close(cm.epfd);
			if (cm.kick >= 0)
				close(cm.kick);
			cm.epfd = cm.kick = -1;
		}
	}
	pthread_mutex_unlock(&once);
	return err ? fail(err) : 0;
}
