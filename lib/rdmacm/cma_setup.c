/*
 * What rdma_cm's connection protocols share (cma_local.c, cma_iwarp.c; cma_conn.c runs
 * them): the events they post with the peer's private data and parameters, a pending
 * connection becoming an id the user sees, a failed connection, and the frame read off
 * the id's stream. Nothing here knows a protocol's frames.
 */
#include "cma.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "util/sv_time.h"

struct cma_event *cma_post(struct cma_id *id, enum rdma_cm_event_type type, int status)
{
	struct cma_event *e = cma_event_new(id, type, status);

	cma_event_post(e);
	return e;
}

/* The event carries the peer's bytes zero padded to @seen, the size of the IB CM
 * message's field, as rdma-core reports it. */
void cma_copy_pdata(struct cma_event *e, const unsigned char *pd, int len, int seen)
{
	if (len > seen)
		len = seen;
	if (len > 0)
		memcpy(e->pdata, pd, (size_t)len);
	if (e->ev.id->qp_type == IBV_QPT_UD) {
		e->ev.param.ud.private_data = e->pdata;
		e->ev.param.ud.private_data_len = (uint8_t)seen;
	} else {
		e->ev.param.conn.private_data = e->pdata;
		e->ev.param.conn.private_data_len = (uint8_t)seen;
	}
}

/* The peer's connection parameters as this side sees them (responder resources it
 * must give = initiator depth the peer asked for, and the reverse). */
void cma_fill_conn_param(struct cma_id *id, struct rdma_conn_param *p)
{
	p->responder_resources = id->remote.ord;
	p->initiator_depth = id->remote.ird;
	p->flow_control = 1;
	/* A reply does not carry the retry count (IB CM REP). */
	p->retry_count = id->parent || id->state == CMA_REQ_RCVD ? id->remote.retry : 0;
	p->rnr_retry_count = id->remote.rnr_retry;
	p->srq = id->remote.flags & CMA_INFO_SRQ ? 1 : 0;
	p->qp_num = id->remote.qpn;
}

/* The address handle attributes of the peer (on this host). */
void cma_fill_ud_param(struct cma_id *id, struct rdma_ud_param *p)
{
	struct ibv_port_attr port;

	memset(&port, 0, sizeof(port));
	ibv_query_port(id->id.verbs, 1, &port);
	p->qp_num = id->remote.qpn;
	p->qkey = id->remote.qkey;
	p->ah_attr.is_global = 1;
	memcpy(p->ah_attr.grh.dgid.raw, id->remote.gid, 16);
	p->ah_attr.grh.hop_limit = 64;
	p->ah_attr.grh.sgid_index = (uint8_t)cma_sgid_index(id);
	p->ah_attr.dlid = port.lid;
	p->ah_attr.port_num = 1;
}

/* Posts ESTABLISHED with the connection's parameters. */
void cma_established(struct cma_id *id)
{
	struct cma_event *e = cma_event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0);

	if (e) {
		cma_fill_conn_param(id, &e->ev.param.conn);
		cma_event_post(e);
	}
}

void cma_pending_drop(struct cma_id *p, const char *why)
{
	struct cma_id **pp;

	sv_info("rdma_cm: connection to a listener dropped: %s", why);
	for (pp = &p->parent->pending; *pp; pp = &(*pp)->next_pending) {
		if (*pp == p) {
			*pp = p->next_pending;
			break;
		}
	}
	cma_id_release(p);
}

/* A pending connection whose request is in becomes an id the user sees, in REQ_RCVD,
 * with the listener's channel and context and the connection's addresses. Returns the
 * listener. */
struct cma_id *cma_pending_to_id(struct cma_id *p)
{
	struct cma_id *l = p->parent, **pp;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	for (pp = &l->pending; *pp; pp = &(*pp)->next_pending) {
		if (*pp == p) {
			*pp = p->next_pending;
			break;
		}
	}
	p->parent = NULL;
	p->chan = l->chan;
	p->chan->ids++;
	p->id.channel = l->id.channel;
	p->id.context = l->id.context;
	p->id.verbs = cma_device();
	p->id.pd = cma_default_pd(p->id.verbs); /* rdma-core: the device's default PD */
	p->id.port_num = 1;
	p->id.qp_type = l->id.qp_type;
	if (!getsockname(p->fd, (struct sockaddr *)&ss, &len))
		memcpy(&p->id.route.addr.src_storage, &ss, len);
	len = sizeof(ss);
	if (!getpeername(p->fd, (struct sockaddr *)&ss, &len))
		memcpy(&p->id.route.addr.dst_storage, &ss, len);
	cma_gid_from_addr(&p->id.route.addr.addr.ibaddr.sgid, &p->id.route.addr.src_addr);
	cma_gid_from_addr(&p->id.route.addr.addr.ibaddr.dgid, &p->id.route.addr.dst_addr);
	p->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
	cma_id_fill_route(p);
	p->state = CMA_REQ_RCVD;
	p->deadline_ns = 0;
	p->rx.len = 0;
	cma_watch(p, EPOLLIN | EPOLLRDHUP);
	return l;
}

void cma_active_fail(struct cma_id *id, enum rdma_cm_event_type type, int status)
{
	struct cma_event *e;

	cma_close_fd(id);
	id->state = CMA_ERROR;
	e = cma_post(id, type, status);
	if (e)
		e->work = CMA_WORK_QP_ERROR;
}

/* The MPA frame at the front of the id's stream, into id->rx and never a byte past it
 * (iw_xchg_read: what follows an iWARP reply is the QP's). 1 when whole, 0 when more is
 * to come, -EPROTO, -ECONNRESET (the stream ended) or another -errno. */
int cma_read_frame(struct cma_id *id, enum iw_mpa_kind kind)
{
	int r = iw_xchg_read(&id->rx, id->fd, kind, false);

	return r > 0 ? 1 : r;
}

/* Whether bytes wait after the frame just read (nothing may follow a request, nor a
 * reply of the same-host handshake). */
bool cma_more_queued(struct cma_id *id)
{
	char c;

	return recv(id->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

uint32_t cma_random_psn(const struct cma_id *id)
{
	uint64_t x = sv_now_ns() ^ (uintptr_t)id;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	return (uint32_t)x & 0xffffff;
}
