/*
 * The id calls: the device list, event channels, creating and destroying ids, binding,
 * address and route resolution, listening, migrating, options. What they stand on is in
 * cma_core.c (ids, channels, events) and cma_addr.c; the handshake is cma_conn.c's.
 */
#include "cma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/un.h>
#include <unistd.h>

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

static bool addr_any(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
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

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cma_channel *c;

	if (!cma_device())
		return NULL;
	if (cma_conn_start())
		return NULL;
	c = cma_channel_new();
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
	cma_channel_free(c);
	pthread_mutex_unlock(&cma_lock);
}

/* --- ids ----------------------------------------------------------------------------- */

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
	if (cma_conn_start())
		return -1;
	if (sync && !(chan = cma_channel_new()))
		return fail(ENOMEM);
	pthread_mutex_lock(&cma_lock);
	cid = cma_id_new(chan, context, ps);
	if (cid)
		cid->sync = sync;
	pthread_mutex_unlock(&cma_lock);
	if (!cid) {
		if (sync) {
			pthread_mutex_lock(&cma_lock);
			cma_channel_free(chan);
			pthread_mutex_unlock(&cma_lock);
		}
		return fail(ENOMEM);
	}
	*id = &cid->id;
	return 0;
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
		cma_event_ack_locked(last);
	}
	cid->destroyed = true;
	cma_mc_leave_all(cid);
	cma_refuse_unanswered(cid);
	if (cid->iwarp && cid->adopted && cid->state == CMA_CONNECTED)
		cma_linger(cid); /* the end goes once the QP's socket is closed too */
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
		cma_channel_unlink(cid->chan, e);
		if (e->child) {
			cma_refuse_unanswered(e->child);
			cma_close_fd(e->child);
			e->child->destroyed = true;
			if (!e->child->events_out)
				cma_id_free_locked(e->child);
		}
		free(e);
	}
	if (cid->events_out == 0)
		cma_id_free_locked(cid);
	pthread_mutex_unlock(&cma_lock);
	cma_kick();
	return 0;
}

/* Binds @id's TCP socket to @addr (port 0: one is picked). Under cma_lock. */
/*
 * The RDMA port an id holds. Its TCP socket needs SO_REUSEADDR (connections it closed
 * leave TIME_WAIT behind, which the RDMA port space does not have), and so cannot stop
 * a second id from binding the same port; an abstract unix socket named after the port
 * space, port and address family can, across processes, and goes away with its holder.
 * As kernel rdma_cm keeps the port space: an IPv4 address claims the port for IPv4, an
 * IPv6 one for IPv6, and the IPv6 wildcard without RDMA_OPTION_ID_AFONLY (dual stack)
 * for both; so 0.0.0.0:P and [::]:P with AFONLY live side by side. Ids with
 * RDMA_OPTION_ID_REUSEADDR share ports and take no claim. (Stricter than rdma-core in
 * one case: two ids on different specific addresses of one family cannot share a port.)
 */
static int claim_one(struct cma_id *id, uint16_t port, int family, int *out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len;
	int fd;

	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
			  (size_t)snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1,
					   "softverbs/cmport/%x/%u/%d", (unsigned)id->id.ps, port,
					   family == AF_INET ? 4 : 6));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	if (bind(fd, (struct sockaddr *)&sa, len)) {
		close(fd);
		return EADDRINUSE;
	}
	*out = fd;
	return 0;
}

static int claim_port(struct cma_id *id, const struct sockaddr *addr, uint16_t port)
{
	bool v6 = addr->sa_family == AF_INET6;
	bool v4 = !v6 || (addr_any(addr) && !id->afonly);
	int err = 0;

	if (id->reuseaddr)
		return 0;
	if (v4)
		err = claim_one(id, port, AF_INET, &id->claim_fd);
	if (!err && v6)
		err = claim_one(id, port, AF_INET6, &id->claim_fd6);
	if (err && id->claim_fd >= 0) {
		close(id->claim_fd);
		id->claim_fd = -1;
	}
	return err;
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
		err = claim_port(id, addr, cma_port_of((struct sockaddr *)&ss));
		if (!err)
			break;
		close(fd);
		/* A picked port another id holds (on another address): pick again. */
		if (cma_port_of(addr) || attempt == 16)
			return err;
	}
	id->fd = fd;
	memcpy(&id->id.route.addr.src_storage, &ss, len);
	if (!addr_any(addr) && (!cma_addr_is_loopback(addr) || cma_loopback_is_device())) {
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

	(void)timeout_ms; /* the routing table answers at once */
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
	/* A peer on this host is reached over shm, unless told to take iWARP anyway. */
	cid->iwarp = id->qp_type != IBV_QPT_UD && cma_iwarp_forced();
	if (cma_addr_is_multicast(dst_addr)) {
		/* A group: joined from the source address, nothing to resolve. Without one,
		 * from loopback: this host's members only (no datagram leaves the host
		 * unasked; bind to an interface's address for its link's). */
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
		/* Another host, from the address the route gives: an iWARP connection, or
		 * (UD) datagrams on the UDP wire, which the AH's GID sends there. */
		cid->iwarp = id->qp_type != IBV_QPT_UD;
		if (cid->state == CMA_IDLE) {
			if (src_addr) {
				memcpy(&src, src_addr, (size_t)cma_sockaddr_len(src_addr));
				if (!addr_any((struct sockaddr *)&src) &&
				    !cma_addr_is_local((struct sockaddr *)&src))
					err = EADDRNOTAVAIL;
			} else {
				status = cma_route_source(dst_addr, &src);
				if (status)
					sv_info("rdma_resolve_addr: no route to the address: %s",
						strerror(-status));
			}
			if (!err && !status)
				err = id_bind(cid, (struct sockaddr *)&src);
		}
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
	if (sync && !(to = cma_channel_new()))
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
		cma_channel_unlink(from, e);
		*tail = e;
		tail = &e->next;
	}
	cid->chan = to;
	cid->id.channel = &to->ch;
	to->ids++;
	if (from && --from->ids == 0 && cid->sync)
		cma_channel_free(from);
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
