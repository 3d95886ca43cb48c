/*
 * Connection setup: the handshake over TCP, and what the CM thread (cma_core.c) does on
 * input and at deadlines.
 *
 * Active side                          Passive side (listener)
 *   TCP connect ------------------------> accept, wait for the request (5 s at most)
 *   MPA request: PD = user PD + cma_info -> CONNECT_REQUEST (a new id)
 *                                          rdma_accept: QP to RTS, then
 *   ESTABLISHED (QP to RTS) <------------- MPA reply: PD = user PD + cma_info
 *   RTU (8 bytes) ----------------------> ESTABLISHED
 *   ... data over the shm wire; the TCP connection stays open ...
 *   rdma_disconnect: shutdown ----------> end of stream: DISCONNECTED, QP to ERROR
 *
 * A reply with the MPA R bit is a reject (REJECTED, status 28, the user's private data);
 * a refused TCP connect is nobody listening (REJECTED, status 8), as a RoCE port reports
 * a REJ for an unknown service ID. Bytes that are not a request drop the connection and
 * the listener goes on.
 *
 * iWARP (the peer on another host, or SOFTVERBS_CM_WIRE=iwarp on the active side), as
 * kernel rdma_cm on an iWARP device and as Linux siw frames it:
 *   TCP connect ------------------------> accept, wait for the request
 *   MPA request rev 2, enhanced: IRD/ORD -> CONNECT_REQUEST (the PD raw, its own length)
 *     words + the user's PD, C = CRC       rdma_accept: the QP (INIT) takes the stream,
 *                                          RTR, RTS; then
 *   QP takes the stream, RTR, RTS <------- MPA reply: C echoed, IRD/ORD, the user's PD;
 *   ESTABLISHED                            ESTABLISHED
 *   ... FPDUs on the same TCP connection, read by the QP's wire; the id watches a dup()
 *   of it for the end only (EPOLLRDHUP) ...
 *   rdma_disconnect: QP to ERROR, FIN ---> DISCONNECTED (reading it: QP to ERROR)
 * A reject is a reply with R and the user's PD (REJECTED, status -ECONNREFUSED, as
 * kernel rdma_cm reports an MPA reject or a refused TCP connect on iWARP). A listener
 * tells the two apart by the request: a revision 1 frame ending in a softverbs trailer
 * from an address of this host is the shm handshake; anything else is iWARP.
 */
#include "cma.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/sv_time.h"
#include "wire/iwarp/iw_mpa.h"

#define REQUEST_WAIT_NS 5000000000ull  /* an accepted connection has this long to ask */
#define REPLY_WAIT_NS 30000000000ull   /* the listener's application has this long to answer */
enum { MAX_PENDING = 256 };            /* accepted connections still silent, per listener */

static struct cma_event *post(struct cma_id *id, enum rdma_cm_event_type type, int status)
{
	struct cma_event *e = cma_event_new(id, type, status);

	cma_event_post(e);
	return e;
}

/* Builds PD = user bytes + our trailer and sends the frame: revision 1, the PD raw (no
 * RFC 6581 words), @flags 0 or R (a reject). */
static int send_frame(struct cma_id *id, enum iw_mpa_kind kind, uint8_t flags,
		      const void *user, uint8_t user_len, bool with_info)
{
	unsigned char pd[CMA_PD_MAX + sizeof(struct cma_info)];
	unsigned char frame[IW_MPA_FRAME_MAX];
	struct iw_mpa_params p = { .rev = IW_MPA_REV, .flags = flags };
	size_t pd_len = user_len;
	int len;

	if (user_len)
		memcpy(pd, user, user_len);
	if (with_info) {
		struct cma_info info;

		cma_fill_info(id, &info, user_len);
		memcpy(pd + user_len, &info, sizeof(info));
		pd_len += sizeof(info);
	}
	len = iw_mpa_encode(frame, sizeof(frame), kind, &p, pd, pd_len);
	if (len < 0)
		return len;
	return cma_send_all(id->fd, frame, (size_t)len);
}

/* --- iWARP frames -------------------------------------------------------------------- */

enum { IW_CM_IRD_ORD_MAX = 128 }; /* as siw: RFC 6581 words hold 14 bits, siw caps at 128 */

static uint8_t cap_rd(unsigned int v)
{
	return (uint8_t)(v < IW_CM_IRD_ORD_MAX ? v : IW_CM_IRD_ORD_MAX);
}

/* An iWARP request, reply or reject (@reject): revision 2 with the enhanced IRD/ORD words
 * (a reply to a revision 1 request: revision 1, no words), markers never, the user's
 * private data raw. */
static int send_iwarp(struct cma_id *id, enum iw_mpa_kind kind, bool reject, const void *user,
		      uint8_t user_len)
{
	unsigned char frame[IW_MPA_FRAME_MAX];
	struct iw_mpa_params p = { .rev = IW_MPA_REV2, .enhanced = true };
	int len;

	if (kind == IW_MPA_REQUEST) {
		/* RFC 5044 §7.1: C asks for CRC; SOFTVERBS_IWARP_CRC=0 does not ask. */
		p.flags = cma_mpa_crc_wanted() ? IW_MPA_FLAG_CRC : 0;
		p.ird = cap_rd(id->conn.responder_resources);
		p.ord = cap_rd(id->conn.initiator_depth);
	} else {
		/* RFC 5044 §7.1: the responder's C echoes the initiator's. */
		p.flags = (uint8_t)((id->mpa_crc ? IW_MPA_FLAG_CRC : 0) |
				    (reject ? IW_MPA_FLAG_REJECT : 0));
		if (id->mpa_rev == IW_MPA_REV) {
			p.rev = IW_MPA_REV; /* RFC 6581 §4: answer revision 1 in kind */
			p.enhanced = false;
		}
		p.ird = reject ? 0 : id->resp_res;
		p.ord = reject ? 0 : id->init_depth;
	}
	len = iw_mpa_encode(frame, sizeof(frame), kind, &p, user, user_len);
	if (len < 0)
		return len;
	return cma_send_all(id->fd, frame, (size_t)len);
}

/*
 * Reads the MPA frame at the front of the stream into id->rx, never a byte past it:
 * what follows an iWARP reply is the QP's (FPDUs). Returns 1 when id->rx holds the
 * whole frame, 0 when more is to come, -EPROTO when the bytes cannot be a frame of
 * @kind (checked as they come: garbage is refused early), -ECONNRESET when the stream
 * ended, or another -errno.
 */
static int read_frame(struct cma_id *id, enum iw_mpa_kind kind)
{
	for (;;) {
		size_t need = IW_MPA_HDR_LEN;
		struct iw_mpa_params par = { 0 };
		const unsigned char *pd;
		uint16_t pd_len;
		ssize_t n;
		int r;

		if (id->rx_len >= IW_MPA_HDR_LEN)
			need += (size_t)(id->rx[18] << 8 | id->rx[19]);
		if (id->rx_len && (r = iw_mpa_decode(id->rx, id->rx_len, kind, &par, &pd,
						     &pd_len)) != -EAGAIN)
			return r < 0 ? r : 1;
		if (need > sizeof(id->rx))
			return -EPROTO;
		n = recv(id->fd, id->rx + id->rx_len, need - id->rx_len, MSG_DONTWAIT);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		if (n == 0)
			return -ECONNRESET;
		id->rx_len += (size_t)n;
	}
}

/* Whether bytes wait after the frame (nothing may follow a request, or a reply on shm). */
static bool more_queued(struct cma_id *id)
{
	char c;

	return recv(id->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

/* Our trailer at the end of the peer's private data (@pd, @pd_len bytes), if it is
 * there. Returns the user's part's length, or -1 when the peer is not softverbs. */
static int take_info(struct cma_id *id, const unsigned char *pd, uint16_t pd_len)
{
	struct cma_info info;

	if (pd_len < sizeof(info))
		return -1;
	memcpy(&info, pd + pd_len - sizeof(info), sizeof(info));
	if (ntohl(info.magic) != CMA_INFO_MAGIC || info.version != CMA_INFO_VERSION ||
	    info.user_len != pd_len - sizeof(info))
		return -1;
	id->remote = info;
	id->remote.qpn = ntohl(info.qpn);
	id->remote.psn = ntohl(info.psn);
	id->remote.qkey = ntohl(info.qkey);
	return info.user_len;
}

/* The event carries the peer's bytes zero padded to @seen, the size of the IB CM
 * message's field, as rdma-core reports it. */
static void copy_pdata(struct cma_event *e, const unsigned char *pd, int len, int seen)
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
static void fill_conn_param(struct cma_id *id, struct rdma_conn_param *p)
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
static void fill_ud_param(struct cma_id *id, struct rdma_ud_param *p)
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

/* --- the passive side ---------------------------------------------------------------- */

static void listener_accept(struct cma_id *l)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct cma_id *p;
		int count = 0;

		if (fd < 0)
			return;
		for (p = l->pending; p; p = p->next_pending)
			count++;
		if (count >= MAX_PENDING || !(p = cma_id_new(NULL, NULL, l->id.ps))) {
			sv_warn("rdma_cm: listener busy, connection dropped");
			close(fd);
			continue;
		}
		p->fd = fd;
		p->parent = l;
		p->next_pending = l->pending;
		l->pending = p;
		p->deadline_ns = sv_now_ns() + REQUEST_WAIT_NS;
		cma_watch(p, EPOLLIN | EPOLLRDHUP);
	}
}

static void pending_drop(struct cma_id *p, const char *why)
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
static struct cma_id *pending_to_id(struct cma_id *p)
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
	p->rx_len = 0;
	cma_watch(p, EPOLLIN | EPOLLRDHUP);
	return l;
}

/* An iWARP request (RFC 5044 §7.1, RFC 6581): the private data is the consumer's. */
static void pending_iwarp(struct cma_id *p, const struct iw_mpa_params *par,
			  const unsigned char *user, uint16_t user_len)
{
	unsigned char pd[CMA_PD_BUF];
	struct cma_id *l = p->parent;
	struct cma_event *e;

	p->iwarp = true;
	p->mpa_crc = par->flags & IW_MPA_FLAG_CRC;
	p->mpa_rev = par->rev;
	if (l->id.qp_type == IBV_QPT_UD || user_len > UINT8_MAX || par->p2p) {
		/* UD has no iWARP connection; an event cannot report more than 255 bytes of
		 * private data (a u8); peer-to-peer RTR is not offered (siw does not ask). */
		(void)send_iwarp(p, IW_MPA_REPLY, true, NULL, 0);
		pending_drop(p, l->id.qp_type == IBV_QPT_UD ? "an iWARP request to a UD listener"
				: user_len > UINT8_MAX ? "iWARP private data above 255 bytes"
				: "peer-to-peer mode asked for");
		return;
	}
	memset(&p->remote, 0, sizeof(p->remote));
	/* RFC 6581 §5: the initiator's IRD and ORD; revision 1 carries none (one Read). */
	p->remote.ird = par->enhanced ? cap_rd(par->ird) : 1;
	p->remote.ord = par->enhanced ? cap_rd(par->ord) : 1;
	p->rfc7306 = cma_rfc7306_wanted();
	memcpy(pd, user, user_len);
	pending_to_id(p);
	memcpy(p->remote.gid, p->id.route.addr.addr.ibaddr.dgid.raw, 16);
	e = cma_event_new(l, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!e)
		return;
	e->ev.id = &p->id;
	e->ev.listen_id = &l->id;
	e->child = p;
	/* This side gives the Reads the initiator sends at once, and sends at most as
	 * many as the initiator takes. */
	p->resp_res = p->remote.ord;
	p->init_depth = p->remote.ird;
	fill_conn_param(p, &e->ev.param.conn);
	copy_pdata(e, pd, user_len, user_len); /* raw, its own length (no IB CM padding) */
	cma_event_post(e);
}

/* A complete request on a pending connection: it becomes an id the user sees. */
static void pending_request(struct cma_id *p)
{
	struct cma_id *l = p->parent;
	struct sockaddr_storage peer;
	socklen_t plen = sizeof(peer);
	struct iw_mpa_params par = { 0 };
	const unsigned char *user;
	uint16_t ulen;
	struct cma_event *e;
	int user_len = -1;

	if (iw_mpa_decode(p->rx, p->rx_len, IW_MPA_REQUEST, &par, &user, &ulen) < 0) {
		pending_drop(p, "not an MPA request");
		return;
	}
	/* The softverbs handshake: revision 1 (no RFC 6581 words: @user is all of the PD), a
	 * softverbs trailer, from this host; from another host for UD only (its datagrams go
	 * on the UDP wire; a connected QP from there is iWARP's, as a peer that is not
	 * softverbs may be). */
	if (!par.enhanced && !getpeername(p->fd, (struct sockaddr *)&peer, &plen)) {
		user_len = take_info(p, user, ulen);
		if (user_len >= 0 && !cma_addr_is_local((struct sockaddr *)&peer) &&
		    p->remote.qp_type != IBV_QPT_UD)
			user_len = -1;
	}
	if (user_len < 0) {
		pending_iwarp(p, &par, user, ulen);
		return;
	}
	if ((p->remote.qp_type == IBV_QPT_UD) != (l->id.qp_type == IBV_QPT_UD)) {
		/* RDMA_PS_TCP and RDMA_PS_UDP are different services on the same port
		 * number: for the requester nobody listens on its. */
		p->conn.qp_num = 0;
		send_frame(p, IW_MPA_REPLY, IW_MPA_FLAG_REJECT, NULL, 0, true);
		pending_drop(p, "no listener in the requester's port space");
		return;
	}
	pending_to_id(p);

	e = cma_event_new(l, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!e)
		return;
	e->ev.id = &p->id;
	e->ev.listen_id = &l->id;
	e->child = p;
	/* UD: the request carries only private data (SIDR REQ). */
	if (p->id.qp_type == IBV_QPT_UD) {
		copy_pdata(e, user, user_len, CMA_PD_SEEN_UD_REQ);
	} else {
		p->resp_res = p->remote.ord;
		p->init_depth = p->remote.ird;
		fill_conn_param(p, &e->ev.param.conn);
		copy_pdata(e, user, user_len, CMA_PD_SEEN_REQ);
	}
	cma_event_post(e);
}

/* --- the active side ----------------------------------------------------------------- */

/* Nobody listens: a RoCE port's REJ for an unknown service ID, or SIDR "unsupported". */
static void active_refused(struct cma_id *id)
{
	struct cma_event *e;

	cma_close_fd(id);
	id->state = CMA_ERROR;
	if (id->iwarp) {
		/* iWARP: kernel rdma_cm reports the refused TCP connect as it comes. */
		e = cma_event_new(id, RDMA_CM_EVENT_REJECTED, -ECONNREFUSED);
		if (e)
			copy_pdata(e, NULL, 0, 0);
	} else if (id->id.qp_type == IBV_QPT_UD) {
		e = cma_event_new(id, RDMA_CM_EVENT_UNREACHABLE, CMA_SIDR_UNSUPPORTED);
		if (e)
			copy_pdata(e, NULL, 0, CMA_PD_SEEN_UD_REP);
	} else {
		e = cma_event_new(id, RDMA_CM_EVENT_REJECTED, CMA_REJ_INVALID_SERVICE_ID);
		if (e)
			copy_pdata(e, NULL, 0, CMA_PD_SEEN_REJ);
	}
	if (e)
		e->work = CMA_WORK_QP_ERROR;
	cma_event_post(e);
}

/*
 * A refused TCP connect is nobody listening, but a listener may be a moment away:
 * perftest -R connects right after a handshake its server answers before it listens,
 * which on a loaded host loses the race. Refusals are retried for a quarter second (a
 * RoCE REQ to the port would be rejected at once: the one difference).
 */
#define REFUSED_GRACE_NS 250000000ull
#define REFUSED_RETRY_NS 10000000ull

static void refused(struct cma_id *id)
{
	uint64_t now = sv_now_ns();

	if (now - id->connect_start_ns < REFUSED_GRACE_NS) {
		cma_unwatch(id);
		id->retrying = true;
		id->deadline_ns = now + REFUSED_RETRY_NS;
		cma_kick();
		return;
	}
	active_refused(id);
}

static void active_fail(struct cma_id *id, enum rdma_cm_event_type type, int status)
{
	struct cma_event *e;

	cma_close_fd(id);
	id->state = CMA_ERROR;
	e = post(id, type, status);
	if (e)
		e->work = CMA_WORK_QP_ERROR;
}

static void active_connected(struct cma_id *id)
{
	int err = 0;
	socklen_t len = sizeof(err);
	struct sockaddr_storage ss;

	if (getsockopt(id->fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		if (err == ECONNREFUSED)
			refused(id);
		else
			active_fail(id, RDMA_CM_EVENT_UNREACHABLE, -(err ? err : EIO));
		return;
	}
	len = sizeof(ss);
	if (!getsockname(id->fd, (struct sockaddr *)&ss, &len))
		memcpy(&id->id.route.addr.src_storage, &ss, len);
	if (id->iwarp)
		err = send_iwarp(id, IW_MPA_REQUEST, false, id->conn.private_data,
				 id->conn.private_data_len);
	else
		err = send_frame(id, IW_MPA_REQUEST, 0, id->conn.private_data,
				 id->conn.private_data_len, true);
	if (err) {
		active_fail(id, RDMA_CM_EVENT_UNREACHABLE, err);
		return;
	}
	id->req_sent = true;
	id->deadline_ns = sv_now_ns() + REPLY_WAIT_NS;
	cma_watch(id, EPOLLIN | EPOLLRDHUP);
}

/* The iWARP reply (RFC 5044 §7.1, RFC 6581) is in id->rx, whole. */
static void active_reply_iwarp(struct cma_id *id)
{
	struct iw_mpa_params par = { 0 };
	const unsigned char *user;
	uint16_t user_len;
	struct cma_event *e;

	id->deadline_ns = 0;
	if (iw_mpa_decode(id->rx, id->rx_len, IW_MPA_REPLY, &par, &user, &user_len) < 0 ||
	    user_len > UINT8_MAX) {
		active_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO);
		return;
	}
	if (par.flags & IW_MPA_FLAG_REJECT) {
		/* As kernel rdma_cm reports siw's: REJECTED, -ECONNREFUSED, the PD raw. */
		cma_close_fd(id);
		id->state = CMA_ERROR;
		e = cma_event_new(id, RDMA_CM_EVENT_REJECTED, -ECONNREFUSED);
		if (e) {
			copy_pdata(e, user, user_len, user_len);
			e->work = CMA_WORK_QP_ERROR;
			cma_event_post(e);
		}
		return;
	}
	/* The responder decides: its C bit says whether CRC is on (as siw initiators do). */
	id->mpa_crc = par.flags & IW_MPA_FLAG_CRC;
	id->rfc7306 = cma_rfc7306_wanted();
	memset(&id->remote, 0, sizeof(id->remote));
	/* RFC 6581 §5: the responder's IRD and ORD; revision 1 carries none (one Read). */
	id->remote.ird = par.enhanced ? cap_rd(par.ird) : 1;
	id->remote.ord = par.enhanced ? cap_rd(par.ord) : 1;
	memcpy(id->remote.gid, id->id.route.addr.addr.ibaddr.dgid.raw, 16);
	id->resp_res = cap_rd(id->conn.responder_resources);
	id->init_depth = cap_rd(id->conn.initiator_depth);
	if (id->init_depth > id->remote.ird)
		id->init_depth = id->remote.ird; /* never more Reads out than the peer takes */
	/* What follows on the stream is FPDUs, for the QP: from now on only its end is
	 * watched. The QP takes the stream when the application reads the event. */
	cma_watch(id, EPOLLRDHUP);
	id->state = CMA_REPLIED;
	e = cma_event_new(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
	if (e) {
		e->work = CMA_WORK_REPLY;
		fill_conn_param(id, &e->ev.param.conn);
		copy_pdata(e, user, user_len, user_len);
		cma_event_post(e);
	}
}

/* The reply of softverbs' handshake (@par, its private data @pd, @pd_len bytes). */
static void active_reply(struct cma_id *id, const struct iw_mpa_params *par,
			 const unsigned char *pd, uint16_t pd_len)
{
	struct cma_event *e;
	int user_len;

	id->deadline_ns = 0;
	if (par->flags & IW_MPA_FLAG_REJECT) {
		user_len = take_info(id, pd, pd_len);
		if (user_len >= 0 && (id->remote.flags & CMA_INFO_NO_SERVICE)) {
			active_refused(id);
			return;
		}
		cma_close_fd(id);
		id->state = CMA_ERROR;
		if (id->id.qp_type == IBV_QPT_UD)
			e = cma_event_new(id, RDMA_CM_EVENT_UNREACHABLE, CMA_SIDR_REJECT);
		else
			e = cma_event_new(id, RDMA_CM_EVENT_REJECTED, CMA_REJ_CONSUMER_DEFINED);
		if (e) {
			copy_pdata(e, pd, user_len < 0 ? pd_len : user_len,
				   id->id.qp_type == IBV_QPT_UD ? CMA_PD_SEEN_UD_REP : CMA_PD_SEEN_REJ);
			e->work = CMA_WORK_QP_ERROR;
			cma_event_post(e);
		}
		return;
	}
	user_len = take_info(id, pd, pd_len);
	if (user_len < 0) {
		active_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO);
		return;
	}
	if (id->id.qp_type == IBV_QPT_UD) {
		/* SIDR: the reply is all there is. */
		cma_close_fd(id);
		id->state = CMA_CONNECTED;
		e = cma_event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0);
		if (e) {
			fill_ud_param(id, &e->ev.param.ud);
			copy_pdata(e, pd, user_len, CMA_PD_SEEN_UD_REP);
			cma_event_post(e);
		}
		return;
	}
	/* IB CM: each side's view is the peer's values swapped. */
	id->resp_res = id->remote.ord;
	id->init_depth = id->remote.ird;
	/* The QP moves when the application reads the event (cma_event.c, event_process). */
	id->state = CMA_REPLIED;
	e = cma_event_new(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
	if (e) {
		e->work = CMA_WORK_REPLY;
		fill_conn_param(id, &e->ev.param.conn);
		copy_pdata(e, pd, user_len, CMA_PD_SEEN_REP);
		cma_event_post(e);
	}
}

/* --- both sides ---------------------------------------------------------------------- */

/* The peer closed (or broke) the connection. */
static void peer_gone(struct cma_id *id)
{
	sv_dbg("rdma_cm: id %p (%s): the peer closed", (void *)id, cma_state_name[id->state]);
	switch (id->state) {
	case CMA_CONNECT:
		active_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
		break;
	case CMA_REPLIED:
		if (id->iwarp) {
			/* The connection was up (the reply is in): the QP still takes the
			 * stream, with what the peer sent before it closed, when the event
			 * is read; ESTABLISHED, then DISCONNECTED, as on an iWARP NIC. */
			cma_unwatch(id);
			break;
		}
		/* Told when the reply's event is read. */
		id->peer_closed = true;
		cma_close_fd(id);
		break;
	case CMA_REQ_RCVD:
		/* Told at rdma_accept. */
		id->peer_closed = true;
		cma_close_fd(id);
		break;
	case CMA_ACCEPTED:
	case CMA_RESPONSE:
		cma_close_fd(id);
		id->state = CMA_ERROR;
		post(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
		break;
	case CMA_CONNECTED: {
		struct cma_event *e;

		/* The QP is the application's: it calls rdma_disconnect, which stops it. On
		 * iWARP the stream it ran on is gone with the peer: reading the event moves
		 * it to ERROR (as siw's QP goes when its TCP connection closes). */
		cma_close_fd(id);
		id->state = CMA_DISCONNECTED;
		e = post(id, RDMA_CM_EVENT_DISCONNECTED, 0);
		if (e && id->iwarp)
			e->work = CMA_WORK_QP_ERROR;
		break;
	}
	default:
		cma_close_fd(id);
		break;
	}
}

static void on_input(struct cma_id *id, uint32_t events)
{
	struct iw_mpa_params par = { 0 };
	const unsigned char *pd;
	uint16_t pd_len;
	ssize_t n;
	int r;

	if (id->state == CMA_LISTEN) {
		listener_accept(id);
		return;
	}
	if (id->state == CMA_CONNECT && !id->req_sent && (events & EPOLLOUT)) {
		active_connected(id);
		return;
	}
	if (id->adopted || (id->iwarp && id->state == CMA_REPLIED)) {
		/* iWARP after the reply: the stream is the QP's; only its end is ours. */
		if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			peer_gone(id);
		return;
	}
	if (id->parent) {
		r = read_frame(id, IW_MPA_REQUEST);
		if (r == 0)
			return;
		if (r == -EPROTO)
			pending_drop(id, "not an MPA request");
		else if (r < 0)
			pending_drop(id, "closed before its request");
		else if (more_queued(id))
			pending_drop(id, "bytes after the MPA request");
		else
			pending_request(id);
		return;
	}
	if (id->state == CMA_CONNECT) {
		r = read_frame(id, IW_MPA_REPLY);
		if (r == 0)
			return;
		if (r == -ECONNREFUSED && id->rx_len == 0)
			refused(id);
		else if (r == -ECONNRESET || (r < 0 && r != -EPROTO))
			peer_gone(id);
		else if (r < 0)
			active_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO);
		else if (id->iwarp)
			active_reply_iwarp(id);
		else if (more_queued(id) ||
			 iw_mpa_decode(id->rx, id->rx_len, IW_MPA_REPLY, &par, &pd, &pd_len) < 0 ||
			 par.enhanced) /* softverbs' handshake has no RFC 6581 words */
			active_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO);
		else
			active_reply(id, &par, pd, pd_len);
		id->rx_len = 0;
		return;
	}
	n = recv(id->fd, id->rx + id->rx_len, sizeof(id->rx) - id->rx_len, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		peer_gone(id);
		return;
	}
	id->rx_len += (size_t)n;
	switch (id->state) {
	case CMA_ACCEPTED:
		if (id->rx_len < CMA_RTU_LEN)
			return;
		if (memcmp(id->rx, CMA_RTU, CMA_RTU_LEN)) {
			peer_gone(id);
			return;
		}
		id->rx_len = 0;
		id->deadline_ns = 0;
		id->state = CMA_CONNECTED;
		{
			struct cma_event *e = cma_event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0);

			if (e) {
				fill_conn_param(id, &e->ev.param.conn);
				cma_event_post(e);
			}
		}
		return;
	default:
		/* Nothing else is expected on the stream; drop what comes. */
		id->rx_len = 0;
		return;
	}
}

/* Connects again after a refusal, from a new socket on the same address and port (a
 * socket whose connect failed cannot connect again). */
static void retry_connect(struct cma_id *id)
{
	const struct sockaddr *dst = &id->id.route.addr.dst_addr;
	int fd;

	id->retrying = false;
	fd = cma_bound_socket(id, &id->id.route.addr.src_addr);
	if (fd < 0) {
		active_fail(id, RDMA_CM_EVENT_UNREACHABLE, fd);
		return;
	}
	cma_close_fd(id);
	id->fd = fd;
	if (connect(id->fd, dst, (socklen_t)cma_sockaddr_len(dst)) && errno != EINPROGRESS) {
		if (errno == ECONNREFUSED)
			refused(id);
		else
			active_fail(id, RDMA_CM_EVENT_UNREACHABLE, -errno);
		return;
	}
	id->deadline_ns = id->connect_start_ns + REPLY_WAIT_NS;
	cma_watch(id, EPOLLOUT);
}

static void on_timeout(struct cma_id *id)
{
	sv_dbg("rdma_cm: id %p (%s): deadline", (void *)id, cma_state_name[id->state]);
	id->deadline_ns = 0;
	if (id->parent) {
		pending_drop(id, "no request in time");
		return;
	}
	switch (id->state) {
	case CMA_CONNECT:
		if (id->retrying) {
			retry_connect(id);
			break;
		}
		active_fail(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
		break;
	case CMA_ACCEPTED:
		cma_close_fd(id);
		id->state = CMA_ERROR;
		post(id, RDMA_CM_EVENT_CONNECT_ERROR, -ETIMEDOUT);
		break;
	default:
		break;
	}
}

/* Starts the CM thread (once), with the handshake as what it does on input and at
 * deadlines. */
int cma_conn_start(void)
{
	static const struct cma_handlers handshake = { .input = on_input, .timeout = on_timeout };

	return cma_thread_start(&handshake);
}

uint32_t cma_random_psn(const struct cma_id *id)
{
	uint64_t x = sv_now_ns() ^ (uintptr_t)id;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	return (uint32_t)x & 0xffffff;
}

/* --- the calls ----------------------------------------------------------------------- */

/* The device's RDMA read depth, what 0xFF (RDMA_MAX_RESP_RES / _INIT_DEPTH) asks for. */
static uint8_t device_rd_atom(struct cma_id *id, bool initiator)
{
	struct ibv_device_attr attr;

	if (!id->id.verbs || ibv_query_device(id->id.verbs, &attr))
		return 0;
	return (uint8_t)(initiator ? attr.max_qp_init_rd_atom : attr.max_qp_rd_atom);
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct cma_id *cid = to_cma_id(id);
	uint8_t max = id && id->qp_type == IBV_QPT_UD ? CMA_PD_UD_CONNECT : CMA_PD_CONNECT;
	int err = 0;

	if (!id)
		return fail(EINVAL);
	if (cid->iwarp)
		max = CMA_PD_IWARP; /* no IB CM header; what siw takes */
	if (conn_param && conn_param->private_data_len &&
	    (conn_param->private_data_len > max || !conn_param->private_data))
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	if (cid->state != CMA_ROUTE_RESOLVED || cid->fd < 0) {
		pthread_mutex_unlock(&cma_lock);
		return fail(EINVAL);
	}
	memset(&cid->conn, 0, sizeof(cid->conn));
	if (conn_param) {
		cid->conn = *conn_param;
		/* The private data is the caller's until connect returns: keep a copy. */
		if (conn_param->private_data_len)
			memcpy(cid->conn_pd, conn_param->private_data, conn_param->private_data_len);
		cid->conn.private_data = cid->conn_pd;
	} else {
		/* rdma-core's defaults for a NULL conn_param: the device's depths. */
		cid->conn.responder_resources = RDMA_MAX_RESP_RES;
		cid->conn.initiator_depth = RDMA_MAX_INIT_DEPTH;
		cid->conn.retry_count = 7;
		cid->conn.rnr_retry_count = 7;
	}
	if (cid->conn.responder_resources == RDMA_MAX_RESP_RES)
		cid->conn.responder_resources = device_rd_atom(cid, false);
	if (cid->conn.initiator_depth == RDMA_MAX_INIT_DEPTH)
		cid->conn.initiator_depth = device_rd_atom(cid, true);
	if (cid->conn.retry_count > 7)
		cid->conn.retry_count = 7;
	if (cid->conn.rnr_retry_count > 7)
		cid->conn.rnr_retry_count = 7;
	if (!cid->id.qp && !conn_param && cid->id.qp_type != IBV_QPT_UD)
		err = EINVAL; /* nobody to say which QP connects */
	if (!cid->id.qp && cid->iwarp) {
		/* The stream is handed to the id's QP: one made by rdma_create_qp. */
		sv_info("rdma_connect: an iWARP connection needs the QP of rdma_create_qp");
		err = EINVAL;
	}
	cid->psn = cma_random_psn(cid);
	cid->req_sent = false;
	if (!err && connect(cid->fd, &id->route.addr.dst_addr,
			    (socklen_t)cma_sockaddr_len(&id->route.addr.dst_addr)) &&
	    errno != EINPROGRESS)
		err = errno;
	cid->connect_start_ns = sv_now_ns();
	cid->retrying = false;
	if (err == ECONNREFUSED) {
		/* Loopback can refuse at once: the same as a refusal seen later. */
		err = 0;
		cid->state = CMA_CONNECT;
		refused(cid);
	} else if (!err) {
		cid->state = CMA_CONNECT;
		cid->deadline_ns = sv_now_ns() + REPLY_WAIT_NS;
		cma_watch(cid, EPOLLOUT);
	}
	pthread_mutex_unlock(&cma_lock);
	if (err)
		return fail(err);
	if (cid->sync)
		return cma_wait_event(cid);
	return 0;
}

/* Refuses the request in front of @id (under cma_lock): R bit, @pd as private data. */
static void refuse(struct cma_id *id, const void *pd, uint8_t len)
{
	if (!id->peer_closed && id->fd >= 0 && id->iwarp)
		(void)send_iwarp(id, IW_MPA_REPLY, true, pd, len);
	else if (!id->peer_closed && id->fd >= 0)
		send_frame(id, IW_MPA_REPLY, IW_MPA_FLAG_REJECT, pd, len, false);
	cma_close_fd(id);
}

/*
 * rdma_accept of an iWARP request (under cma_lock; the parameters checked): the QP takes
 * the stream in INIT and goes to RTR and RTS, then the reply goes (the initiator sends
 * FPDUs once it has it: the QP is ready for them), and the connection is established.
 * 0, or an errno for rdma_accept (the request is then refused and the id in ERROR).
 */
static int accept_iwarp(struct cma_id *id, const struct rdma_conn_param *param)
{
	int err;

	id->resp_res = cap_rd(id->conn.responder_resources);
	id->init_depth = cap_rd(id->conn.initiator_depth);
	if (id->init_depth > id->remote.ird)
		id->init_depth = id->remote.ird; /* RFC 6581: no more Reads than it takes */
	if (!id->peer_closed && id->fd >= 0) {
		/* A peer gone since its request (the CM thread may not have seen it yet). */
		struct pollfd pf = { .fd = id->fd, .events = POLLRDHUP };

		if (poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			id->peer_closed = true;
	}
	if (id->peer_closed) {
		cma_qp_to_error(id);
		id->state = CMA_ERROR;
		post(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
		return 0;
	}
	err = -cma_qp_adopt(id);
	if (!err)
		err = -send_iwarp(id, IW_MPA_REPLY, false, param ? param->private_data : NULL,
				  param ? param->private_data_len : 0);
	if (err) {
		if (!id->adopted)
			refuse(id, NULL, 0);
		cma_close_fd(id);
		cma_qp_to_error(id);
		id->state = CMA_ERROR;
		return err;
	}
	id->state = CMA_CONNECTED;
	{
		struct cma_event *e = cma_event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0);

		if (e) {
			fill_conn_param(id, &e->ev.param.conn);
			cma_event_post(e);
		}
	}
	return 0;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct cma_id *cid = to_cma_id(id);
	bool ud = id && id->qp_type == IBV_QPT_UD;
	uint8_t max = ud ? CMA_PD_UD_ACCEPT : CMA_PD_ACCEPT;
	int err = 0;

	if (!id)
		return fail(EINVAL);
	if (cid->iwarp)
		max = CMA_PD_IWARP;
	pthread_mutex_lock(&cma_lock);
	if (cid->state != CMA_REQ_RCVD) {
		pthread_mutex_unlock(&cma_lock);
		return fail(EINVAL);
	}
	memset(&cid->conn, 0, sizeof(cid->conn));
	if (conn_param)
		cid->conn = *conn_param;
	if (!conn_param || cid->conn.responder_resources == RDMA_MAX_RESP_RES)
		cid->conn.responder_resources = cid->resp_res;
	if (!conn_param || cid->conn.initiator_depth == RDMA_MAX_INIT_DEPTH)
		cid->conn.initiator_depth = cid->init_depth;
	if (!conn_param)
		cid->conn.rnr_retry_count = cid->remote.rnr_retry;
	if (!ud && (cid->conn.responder_resources > device_rd_atom(cid, false) ||
		    cid->conn.initiator_depth > device_rd_atom(cid, true)))
		err = EINVAL;
	if (!cid->id.qp && !conn_param)
		err = EINVAL;
	if (!err && conn_param && conn_param->private_data_len &&
	    (conn_param->private_data_len > max || !conn_param->private_data)) {
		/* rdma-core: the failed accept rejects the request (REJ 28 / SIDR REJECT). */
		err = EINVAL;
		refuse(cid, NULL, 0);
		cma_qp_to_error(cid);
		cid->state = CMA_ERROR;
	}
	if (!err && cid->iwarp && !cid->id.qp) {
		sv_info("rdma_accept: an iWARP connection needs the QP of rdma_create_qp");
		err = EINVAL;
	}
	if (!err && cid->iwarp) {
		err = accept_iwarp(cid, conn_param);
		pthread_mutex_unlock(&cma_lock);
		if (err)
			return fail(err);
		return cid->sync ? cma_wait_event(cid) : 0;
	}
	if (!err) {
		cid->resp_res = cid->conn.responder_resources;
		cid->init_depth = cid->conn.initiator_depth;
		cid->psn = ud ? 0 : cma_random_psn(cid);
		if (!ud && cid->id.qp)
			err = -cma_qp_to_rts(cid);
	}
	if (!err && cid->peer_closed) {
		cma_qp_to_error(cid);
		cid->state = CMA_ERROR;
		post(cid, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
		pthread_mutex_unlock(&cma_lock);
		return 0;
	}
	if (!err) {
		int r = send_frame(cid, IW_MPA_REPLY, 0, conn_param ? conn_param->private_data : NULL,
				   conn_param ? conn_param->private_data_len : 0, true);

		if (r) {
			cma_close_fd(cid);
			cma_qp_to_error(cid);
			cid->state = CMA_ERROR;
			post(cid, RDMA_CM_EVENT_CONNECT_ERROR, r);
		} else if (ud) {
			cma_close_fd(cid);
			cid->state = CMA_CONNECTED;
		} else {
			cid->state = CMA_ACCEPTED;
			cid->deadline_ns = sv_now_ns() + REPLY_WAIT_NS;
			cma_kick();
		}
	} else if (cid->state != CMA_ERROR) {
		cma_qp_to_error(cid);
	}
	pthread_mutex_unlock(&cma_lock);
	if (err)
		return fail(err);
	/* A synchronous id is done with its request event. */
	if (cid->sync && ud && cid->id.event) {
		rdma_ack_cm_event(cid->id.event);
		cid->id.event = NULL;
	}
	if (cid->sync && !ud)
		return cma_wait_event(cid);
	return 0;
}

static int reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	struct cma_id *cid = to_cma_id(id);
	uint8_t max = id && id->qp_type == IBV_QPT_UD ? CMA_PD_UD_REJECT : CMA_PD_REJECT;

	if (!id)
		return fail(EINVAL);
	if (cid->iwarp)
		max = CMA_PD_IWARP;
	if (private_data_len && (private_data_len > max || !private_data))
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	if (cid->state != CMA_REQ_RCVD) {
		pthread_mutex_unlock(&cma_lock);
		return fail(EINVAL);
	}
	refuse(cid, private_data, private_data_len);
	cid->state = CMA_IDLE;
	pthread_mutex_unlock(&cma_lock);
	return 0;
}

/* Destroying an id whose request was never answered rejects it (IB CM: REJ 28). */
void cma_refuse_unanswered(struct cma_id *id)
{
	if (id->state == CMA_REQ_RCVD)
		refuse(id, NULL, 0);
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return reject(id, private_data, private_data_len);
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return reject(id, private_data, private_data_len);
}

int rdma_establish(struct rdma_cm_id *id)
{
	struct cma_id *cid = to_cma_id(id);
	int err = 0;

	if (!id)
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	if (cid->state != CMA_RESPONSE)
		err = EINVAL;
	else if ((err = -cma_send_rtu(cid)) == 0)
		cid->state = CMA_CONNECTED;
	pthread_mutex_unlock(&cma_lock);
	return err ? fail(err) : 0;
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	struct cma_id *cid = to_cma_id(id);
	int err = 0;

	if (!id || !id->verbs)
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	switch (cid->state) {
	case CMA_CONNECTED:
	case CMA_ACCEPTED:
	case CMA_RESPONSE:
		/* rdma-core moves the QP to ERROR first (flushing what is posted); the peer
		 * sees the end of the stream; each side gets one DISCONNECTED. */
		cma_qp_to_error(cid);
		if (cid->fd >= 0)
			shutdown(cid->fd, SHUT_WR);
		cid->deadline_ns = 0;
		cid->state = CMA_DISCONNECTED;
		if (cid->id.qp_type != IBV_QPT_UD)
			post(cid, RDMA_CM_EVENT_DISCONNECTED, 0);
		else
			err = EINVAL;
		break;
	case CMA_DISCONNECTED:
		/* The peer went first: its DISCONNECTED is this side's too. */
		cma_qp_to_error(cid);
		pthread_mutex_unlock(&cma_lock);
		return 0;
	default:
		err = EINVAL;
		break;
	}
	pthread_mutex_unlock(&cma_lock);
	if (err)
		return fail(err);
	if (cid->sync)
		return cma_wait_event(cid);
	return 0;
}
