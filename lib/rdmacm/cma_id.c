/*
 * Event channels, ids and their events; binding and address / route resolution.
 * Connection setup over TCP lives in cma_conn.c, QPs in cma_qp.c.
 */
#include "cma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/un.h>
#include <unistd.h>

pthread_mutex_t cma_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cma_id *all_ids;

struct cma_id *cma_all_ids(void)
{
	return all_ids;
}

const char *const cma_state_name[] = {
	[CMA_IDLE] = "IDLE",           [CMA_ADDR_QUERY] = "ADDR_QUERY",
	[CMA_ADDR_BOUND] = "ADDR_BOUND", [CMA_ROUTE_RESOLVED] = "ROUTE_RESOLVED",
	[CMA_LISTEN] = "LISTEN",       [CMA_CONNECT] = "CONNECT",
	[CMA_REPLIED] = "REPLIED",     [CMA_REQ_RCVD] = "REQ_RCVD",   [CMA_ACCEPTED] = "ACCEPTED",
	[CMA_RESPONSE] = "RESPONSE",   [CMA_CONNECTED] = "CONNECTED",
	[CMA_DISCONNECTED] = "DISCONNECTED", [CMA_ERROR] = "ERROR",
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

struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **list = calloc(2, sizeof(*list));

	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = cma_device();
	if (num_devices)
		*num_devices = list[0] ? 1 : 0;
	return list;
}

void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

/* --- addresses ----------------------------------------------------------------------- */

int cma_sockaddr_len(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	default:
		return 0;
	}
}

static bool addr_any(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

static bool same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

/* An address of this host (of any of its interfaces, or loopback). */
bool cma_addr_is_local(const struct sockaddr *sa)
{
	struct ifaddrs *ifs, *i;
	bool local = false;

	if (sa->sa_family == AF_INET &&
	    (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127)
		return true;
	if (sa->sa_family == AF_INET6 &&
	    IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr))
		return true;
	if (getifaddrs(&ifs))
		return false;
	for (i = ifs; i && !local; i = i->ifa_next)
		local = i->ifa_addr && same_ip(i->ifa_addr, sa);
	freeifaddrs(ifs);
	return local;
}

/* The GID an IP address has in the device's table: IPv4 mapped, IPv6 as is. */
void cma_gid_from_addr(union ibv_gid *gid, const struct sockaddr *sa)
{
	memset(gid, 0, sizeof(*gid));
	if (sa->sa_family == AF_INET) {
		gid->raw[10] = 0xff;
		gid->raw[11] = 0xff;
		memcpy(&gid->raw[12], &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(gid->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

uint16_t cma_port_of(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

static int check_family(const struct sockaddr *sa)
{
	if (!sa)
		return EINVAL;
	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return EAFNOSUPPORT; /* AF_IB too: no IB addressing on this port */
	return 0;
}

/* --- event channels ------------------------------------------------------------------ */

static struct cma_channel *channel_new(void)
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
static void channel_free(struct cma_channel *c)
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

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cma_channel *c;

	if (!cma_device())
		return NULL;
	if (cma_thread_start())
		return NULL;
	c = channel_new();
	return c ? &c->ch : NULL;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct cma_channel *c = (struct cma_channel *)channel;

	if (!c)
		return;
	pthread_mutex_lock(&cma_lock);
	if (c->ids) {
		/* rdma-core requires every id to be gone first; keep the memory the ids
		 * still point at rather than free it under them. */
		sv_info("rdma_destroy_event_channel: %d ids still use the channel", c->ids);
		pthread_mutex_unlock(&cma_lock);
		return;
	}
	channel_free(c);
	pthread_mutex_unlock(&cma_lock);
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
static void channel_unlink(struct cma_channel *c, struct cma_event *e)
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

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct cma_channel *c = (struct cma_channel *)channel;
	struct cma_event *e = NULL;
	int err = 0;

	if (!c || !event)
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	if (c->dead) {
		pthread_mutex_unlock(&cma_lock);
		return fail(EBADF);
	}
	c->readers++;
	pthread_mutex_unlock(&cma_lock);
	for (;;) {
		struct pollfd pfd = { .fd = c->ch.fd, .events = POLLIN };
		int flags;

		/* Wait (unless the application made the fd non-blocking) without taking a
		 * count: counts are taken with the event, under the lock. */
		flags = fcntl(c->ch.fd, F_GETFL);
		if (flags < 0 || (poll(&pfd, 1, flags & O_NONBLOCK ? 0 : -1) < 0 && errno != EINTR)) {
			err = errno;
			pthread_mutex_lock(&cma_lock);
			break;
		}
		pthread_mutex_lock(&cma_lock);
		if (c->dead) {
			err = EBADF;
			break;
		}
		e = c->head;
		if (e) {
			channel_unlink(c, e);
			e->owner->events_out++;
			if (e->child)
				e->child->events_out++;
			cma_event_process(e);
			break;
		}
		pthread_mutex_unlock(&cma_lock);
		if (flags & O_NONBLOCK) {
			pthread_mutex_lock(&cma_lock);
			err = EAGAIN;
			break;
		}
	}
	/* Under cma_lock here. */
	if (--c->readers == 0 && c->orphan)
		free(c);
	pthread_mutex_unlock(&cma_lock);
	if (!e)
		return fail(err ? err : EAGAIN);
	*event = &e->ev;
	return 0;
}

static void id_free_locked(struct cma_id *id);

static void event_ack_locked(struct cma_event *e)
{
	struct cma_id *owner = e->owner, *child = e->child;

	free(e);
	if (child && --child->events_out == 0 && child->destroyed)
		id_free_locked(child);
	if (--owner->events_out == 0 && owner->destroyed)
		id_free_locked(owner);
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	event_ack_locked((struct cma_event *)event);
	pthread_mutex_unlock(&cma_lock);
	return 0;
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
	id->claim_fd = -1;
	id->state = CMA_IDLE;
	if (chan)
		chan->ids++;
	id->next = all_ids;
	all_ids = id;
	return id;
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	struct cma_channel *chan = (struct cma_channel *)channel;
	struct cma_id *cid;
	bool sync = !channel;

	if (!id)
		return fail(EINVAL);
	if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB && ps != RDMA_PS_IPOIB)
		return fail(EINVAL);
	if (!cma_device())
		return -1;
	if (cma_thread_start())
		return -1;
	if (sync && !(chan = channel_new()))
		return fail(ENOMEM);
	pthread_mutex_lock(&cma_lock);
	cid = cma_id_new(chan, context, ps);
	if (cid)
		cid->sync = sync;
	pthread_mutex_unlock(&cma_lock);
	if (!cid) {
		if (sync) {
			pthread_mutex_lock(&cma_lock);
			channel_free(chan);
			pthread_mutex_unlock(&cma_lock);
		}
		return fail(ENOMEM);
	}
	*id = &cid->id;
	return 0;
}

/* Frees @id's memory (its socket and events are gone). Under cma_lock. */
static void id_free_locked(struct cma_id *id)
{
	struct cma_id **p;

	for (p = &all_ids; *p; p = &(*p)->next) {
		if (*p == id) {
			*p = id->next;
			break;
		}
	}
	if (id->chan && --id->chan->ids == 0 && id->sync)
		channel_free(id->chan);
	if (id->claim_fd >= 0)
		close(id->claim_fd);
	id->claim_fd = -1;
	free(id->ep_qp_attr);
	cma_graveyard(id);
}

/* Drops a listener's connection that never became an id the user saw. */
void cma_id_release(struct cma_id *id)
{
	cma_close_fd(id);
	id->destroyed = true;
	id_free_locked(id);
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct cma_id *cid = to_cma_id(id);
	struct cma_event *e, *next;

	if (!id)
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	if (cid->destroyed) {
		pthread_mutex_unlock(&cma_lock);
		return fail(EINVAL);
	}
	/* A synchronous id keeps its last event for the user to look at; done with it now
	 * (acked before the id is marked destroyed, so that the ack cannot free it). */
	if (cid->sync && cid->id.event) {
		struct cma_event *last = (struct cma_event *)cid->id.event;

		cid->id.event = NULL;
		event_ack_locked(last);
	}
	cid->destroyed = true;
	cma_mc_leave_all(cid);
	cma_refuse_unanswered(cid);
	cma_close_fd(cid);
	while (cid->pending) {
		struct cma_id *p = cid->pending;

		cid->pending = p->next_pending;
		cma_id_release(p);
	}
	/* Events not yet read are dropped; a connect request's new id goes with its event. */
	for (e = cid->chan ? cid->chan->head : NULL; e; e = next) {
		next = e->next;
		if (e->owner != cid)
			continue;
		channel_unlink(cid->chan, e);
		if (e->child) {
			cma_refuse_unanswered(e->child);
			cma_close_fd(e->child);
			e->child->destroyed = true;
			if (!e->child->events_out)
				id_free_locked(e->child);
		}
		free(e);
	}
	if (cid->events_out == 0)
		id_free_locked(cid);
	pthread_mutex_unlock(&cma_lock);
	cma_kick();
	return 0;
}

/* For a synchronous id: waits for its next event and keeps it in id->event. Like
 * rdma-core's, it judges by the status only, not the event's type: 0, or -1 with errno
 * ECONNREFUSED for a reject, else the status as an errno. */
int cma_wait_event(struct cma_id *id)
{
	struct rdma_cm_event *ev;
	int status;

	if (id->id.event) {
		rdma_ack_cm_event(id->id.event);
		id->id.event = NULL;
	}
	if (rdma_get_cm_event(&id->chan->ch, &ev))
		return -1;
	id->id.event = ev;
	status = ev->status;
	if (!status)
		return 0;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		return fail(ECONNREFUSED);
	return fail(status < 0 ? -status : status);
}

/* Binds @id's TCP socket to @addr (port 0: one is picked). Under cma_lock. */
/*
 * The RDMA port an id holds. Its TCP socket needs SO_REUSEADDR (connections it closed
 * leave TIME_WAIT behind, which the RDMA port space does not have), and so cannot stop
 * a second id from binding the same port; an abstract unix socket named after the port
 * space and port can, across processes, and goes away with its holder. Ids with
 * RDMA_OPTION_ID_REUSEADDR share ports and take no claim. (Stricter than rdma-core in
 * one case: two ids on different specific addresses cannot share a port number.)
 */
static int claim_port(struct cma_id *id, uint16_t port)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len;
	int fd;

	if (id->reuseaddr)
		return 0;
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
			  (size_t)snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1,
					   "softverbs/cmport/%x/%u", (unsigned)id->id.ps, port));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	if (bind(fd, (struct sockaddr *)&sa, len)) {
		close(fd);
		return EADDRINUSE;
	}
	id->claim_fd = fd;
	return 0;
}

/* A TCP socket for @id bound to @addr, with the id's options: the fd, or -errno. */
int cma_bound_socket(const struct cma_id *id, const struct sockaddr *addr)
{
	int one = 1, fd, err;

	fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (addr->sa_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &(int){ id->afonly }, sizeof(int));
	if (id->tos)
		setsockopt(fd, IPPROTO_IP, IP_TOS, &(int){ id->tos }, sizeof(int));
	if (bind(fd, addr, (socklen_t)cma_sockaddr_len(addr))) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* Binds @id's TCP socket to @addr (port 0: one is picked) and claims the port. Under
 * cma_lock. */
static int id_bind(struct cma_id *id, const struct sockaddr *addr)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, err;

	for (int attempt = 0;; attempt++) {
		fd = cma_bound_socket(id, addr);
		if (fd < 0)
			return -fd;
		len = sizeof(ss);
		if (getsockname(fd, (struct sockaddr *)&ss, &len)) {
			err = errno;
			close(fd);
			return err;
		}
		err = claim_port(id, cma_port_of((struct sockaddr *)&ss));
		if (!err)
			break;
		close(fd);
		/* A picked port another id holds (on another address): pick again. */
		if (cma_port_of(addr) || attempt == 16)
			return err;
	}
	id->fd = fd;
	memcpy(&id->id.route.addr.src_storage, &ss, len);
	if (!addr_any(addr)) {
		id->id.verbs = cma_device();
		id->id.pd = cma_default_pd(id->id.verbs); /* rdma-core: the device's PD */
		id->id.port_num = 1;
		cma_gid_from_addr(&id->id.route.addr.addr.ibaddr.sgid, addr);
		id->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
	}
	return 0;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct cma_id *cid = to_cma_id(id);
	int err;

	if (!id)
		return fail(EINVAL);
	if ((err = check_family(addr)))
		return fail(err);
	if (!addr_any(addr) && !cma_addr_is_local(addr))
		return fail(EADDRNOTAVAIL);
	pthread_mutex_lock(&cma_lock);
	if (cid->state != CMA_IDLE)
		err = EINVAL;
	else
		err = id_bind(cid, addr);
	if (!err)
		cid->state = CMA_ADDR_BOUND;
	pthread_mutex_unlock(&cma_lock);
	return err ? fail(err) : 0;
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	const struct sockaddr *sa = &id->route.addr.src_addr;

	if (sa->sa_family == AF_INET6)
		return ((const struct sockaddr_in6 *)sa)->sin6_port;
	return sa->sa_family == AF_INET ? ((const struct sockaddr_in *)sa)->sin_port : 0;
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	const struct sockaddr *sa = &id->route.addr.dst_addr;

	if (sa->sa_family == AF_INET6)
		return ((const struct sockaddr_in6 *)sa)->sin6_port;
	return sa->sa_family == AF_INET ? ((const struct sockaddr_in *)sa)->sin_port : 0;
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
		      struct sockaddr *dst_addr, int timeout_ms)
{
	struct cma_id *cid = to_cma_id(id);
	struct cma_event *e;
	struct sockaddr_storage src;
	int err, status = 0;

	(void)timeout_ms; /* on one host the answer is immediate */
	if (!id)
		return fail(EINVAL);
	if ((err = check_family(dst_addr)))
		return fail(err);
	if (src_addr && (err = check_family(src_addr)))
		return fail(err);
	if (src_addr && src_addr->sa_family != dst_addr->sa_family)
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	if (cid->state != CMA_IDLE && cid->state != CMA_ADDR_BOUND) {
		pthread_mutex_unlock(&cma_lock);
		return fail(EINVAL);
	}
	memcpy(&id->route.addr.dst_storage, dst_addr, (size_t)cma_sockaddr_len(dst_addr));
	if (cma_addr_is_multicast(dst_addr)) {
		/* A group: joined from the source address (or loopback), nothing to resolve. */
		if (cid->state == CMA_IDLE) {
			memset(&src, 0, sizeof(src));
			if (src_addr) {
				memcpy(&src, src_addr, (size_t)cma_sockaddr_len(src_addr));
			} else if (dst_addr->sa_family == AF_INET) {
				((struct sockaddr_in *)&src)->sin_family = AF_INET;
				((struct sockaddr_in *)&src)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			} else {
				((struct sockaddr_in6 *)&src)->sin6_family = AF_INET6;
				((struct sockaddr_in6 *)&src)->sin6_addr = in6addr_loopback;
			}
			err = cma_addr_is_local((struct sockaddr *)&src) ?
				id_bind(cid, (struct sockaddr *)&src) : EADDRNOTAVAIL;
		}
	} else if (!cma_addr_is_local(dst_addr)) {
		/* Reaching other hosts needs the iWARP wire; until then the address has no
		 * route from this device, as a RoCE port without a neighbour reports it. */
		status = -EHOSTUNREACH;
		sv_info("rdma_resolve_addr: not an address of this host; softverbs reaches "
			"peers on the same host only (no inter-host wire yet)");
	} else if (cid->state == CMA_IDLE) {
		if (src_addr) {
			memcpy(&src, src_addr, (size_t)cma_sockaddr_len(src_addr));
		} else {
			/* From the destination's own address: it is on this host. */
			memcpy(&src, dst_addr, (size_t)cma_sockaddr_len(dst_addr));
			if (src.ss_family == AF_INET)
				((struct sockaddr_in *)&src)->sin_port = 0;
			else
				((struct sockaddr_in6 *)&src)->sin6_port = 0;
			if (addr_any((struct sockaddr *)&src)) {
				if (src.ss_family == AF_INET)
					((struct sockaddr_in *)&src)->sin_addr.s_addr =
						htonl(INADDR_LOOPBACK);
				else
					((struct sockaddr_in6 *)&src)->sin6_addr = in6addr_loopback;
			}
		}
		if (!addr_any((struct sockaddr *)&src) && !cma_addr_is_local((struct sockaddr *)&src))
			err = EADDRNOTAVAIL;
		else
			err = id_bind(cid, (struct sockaddr *)&src);
	}
	if (err) {
		pthread_mutex_unlock(&cma_lock);
		return fail(err);
	}
	if (!status) {
		id->verbs = cma_device();
		id->pd = cma_default_pd(id->verbs); /* rdma-core: the device's PD */
		id->port_num = 1;
		cma_gid_from_addr(&id->route.addr.addr.ibaddr.sgid, &id->route.addr.src_addr);
		cma_gid_from_addr(&id->route.addr.addr.ibaddr.dgid, dst_addr);
		id->route.addr.addr.ibaddr.pkey = htons(0xffff);
		cid->state = CMA_ADDR_QUERY; /* resolved; the event may be unread yet */
	}
	e = cma_event_new(cid, status ? RDMA_CM_EVENT_ADDR_ERROR : RDMA_CM_EVENT_ADDR_RESOLVED,
			  status);
	if (!e) {
		pthread_mutex_unlock(&cma_lock);
		return fail(ENOMEM);
	}
	cma_event_post(e);
	pthread_mutex_unlock(&cma_lock);
	if (cid->sync)
		return cma_wait_event(cid);
	return 0;
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

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct cma_id *cid = to_cma_id(id);
	struct cma_event *e;

	(void)timeout_ms;
	if (!id)
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	/* Only after the address resolved (the ADDR_RESOLVED event may be unread yet). */
	if ((cid->state != CMA_ADDR_QUERY && cid->state != CMA_ADDR_BOUND) ||
	    !id->route.addr.dst_addr.sa_family || !id->verbs) {
		pthread_mutex_unlock(&cma_lock);
		return fail(EINVAL);
	}
	cma_id_fill_route(cid);
	cid->state = CMA_ROUTE_RESOLVED;
	e = cma_event_new(cid, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	if (e)
		cma_event_post(e);
	pthread_mutex_unlock(&cma_lock);
	if (!e)
		return fail(ENOMEM);
	if (cid->sync)
		return cma_wait_event(cid);
	return 0;
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct cma_id *cid = to_cma_id(id);
	int err = 0;

	if (!id)
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	if (cid->state == CMA_IDLE) {
		struct sockaddr_in any = { .sin_family = AF_INET };

		err = id_bind(cid, (struct sockaddr *)&any);
		if (!err)
			cid->state = CMA_ADDR_BOUND;
	}
	if (!err && cid->state != CMA_ADDR_BOUND)
		err = EINVAL;
	if (!err && listen(cid->fd, backlog > 0 ? backlog : SOMAXCONN))
		err = errno;
	if (!err) {
		cid->backlog = backlog > 0 ? backlog : SOMAXCONN;
		cid->state = CMA_LISTEN;
		cma_watch(cid, EPOLLIN);
	}
	pthread_mutex_unlock(&cma_lock);
	return err ? fail(err) : 0;
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct cma_id *cid = to_cma_id(id);
	struct cma_channel *to = (struct cma_channel *)channel, *from;
	struct cma_event *e;
	bool sync = !channel;

	if (!id)
		return fail(EINVAL);
	if (sync && !(to = channel_new()))
		return fail(ENOMEM);
	pthread_mutex_lock(&cma_lock);
	from = cid->chan;
	/* Events not read yet move with the id. Events already read stay counted on the
	 * id, which is all their ack needs (rdma-core waits for those acks instead). */
	struct cma_event *moved = NULL, **tail = &moved, *next;

	for (e = from ? from->head : NULL; e; e = next) {
		next = e->next;
		if (e->owner != cid)
			continue;
		channel_unlink(from, e);
		*tail = e;
		tail = &e->next;
	}
	cid->chan = to;
	cid->id.channel = &to->ch;
	to->ids++;
	if (from && --from->ids == 0 && cid->sync)
		channel_free(from);
	cid->sync = sync;
	while (moved) {
		e = moved;
		moved = e->next;
		e->next = NULL;
		cma_event_post(e);
	}
	pthread_mutex_unlock(&cma_lock);
	return 0;
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	struct cma_id *cid = to_cma_id(id);

	if (!id || !optval)
		return fail(EINVAL);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t))
				return fail(EINVAL);
			cid->tos = *(uint8_t *)optval;
			return 0;
		case RDMA_OPTION_ID_REUSEADDR:
			if (optlen != sizeof(int))
				return fail(EINVAL);
			cid->reuseaddr = *(int *)optval != 0;
			return 0;
		case RDMA_OPTION_ID_AFONLY:
			if (optlen != sizeof(int))
				return fail(EINVAL);
			cid->afonly = *(int *)optval != 0;
			return 0;
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t) || id->qp_type != IBV_QPT_RC)
				return fail(EINVAL);
			cid->ack_timeout = *(uint8_t *)optval;
			return 0;
		default:
			return fail(ENOSYS);
		}
	}
	if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) {
		if (!optlen || optlen % sizeof(struct ibv_path_data))
			return fail(EINVAL);
		return 0;
	}
	return fail(ENOSYS);
}

int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)event;
	return id ? 0 : fail(EINVAL);
}
