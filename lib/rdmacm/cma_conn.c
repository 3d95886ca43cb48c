/*
 * The connection: its TCP transport, what the CM thread (cma_core.c) does on input and
 * at deadlines, and rdma_connect / rdma_accept / rdma_reject / rdma_establish /
 * rdma_disconnect. What depends on what the connection speaks is the id's protocol's
 * (struct cma_proto, cma.h): softverbs' same-host handshake (cma_local.c) or iWARP's
 * MPA exchange (cma_iwarp.c); this file runs either the same way.
 *
 *   Active side                          Passive side (listener)
 *   rdma_connect: TCP connect ---------> accept; the request within 5 s
 *   (refused: retried for 250 ms,        (iw_xchg_request_wait_ns), read exactly
 *    then the protocol's "nobody")       the protocol that claims it: CONNECT_REQUEST
 *   request (protocol) ----------------> rdma_accept (protocol)
 *   reply read exactly <---------------- reply; rdma_reject: a reply with R
 *   the protocol's events (30 s at most for the reply)
 *   ... the TCP connection stays open: its end is the peer's disconnect or death ...
 *   rdma_disconnect: QP to ERROR, FIN -> DISCONNECTED (iWARP: the QP enters ERROR as its
 *                                        wire reads the end, and reading it)
 *
 * A listener tells the protocols apart by the request: the same-host protocol claims a
 * revision 1 frame ending in a softverbs trailer from an address of this host; anything
 * else is iWARP's. Bytes that are not a request drop the connection and the listener
 * goes on.
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

enum { MAX_PENDING = 256 }; /* accepted connections still silent, per listener */

static const struct cma_proto *proto_of(const struct cma_id *id)
{
	return id->iwarp ? &cma_proto_iwarp : &cma_proto_local;
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
		p->deadline_ns = sv_now_ns() + iw_xchg_request_wait_ns();
		cma_watch(p, EPOLLIN | EPOLLRDHUP);
	}
}


/* --- the active side ----------------------------------------------------------------- */

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
	proto_of(id)->refused(id);
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
			cma_active_fail(id, RDMA_CM_EVENT_UNREACHABLE, -(err ? err : EIO));
		return;
	}
	len = sizeof(ss);
	if (!getsockname(id->fd, (struct sockaddr *)&ss, &len))
		memcpy(&id->id.route.addr.src_storage, &ss, len);
	err = proto_of(id)->request(id);
	if (err) {
		cma_active_fail(id, RDMA_CM_EVENT_UNREACHABLE, err);
		return;
	}
	id->req_sent = true;
	id->deadline_ns = sv_now_ns() + CMA_REPLY_WAIT_NS;
	cma_watch(id, EPOLLIN | EPOLLRDHUP);
}

/* --- both sides ---------------------------------------------------------------------- */

/*
 * After DISCONNECTED, a RoCE port's IB CM keeps the connection in timewait (twice the
 * packet lifetime, ~0.5 s on rxe) and then says RDMA_CM_EVENT_TIMEWAIT_EXIT; applications
 * release their connections on it. Nothing of ours is in flight after the end of the
 * stream, so ours is short (CMA_TIMEWAIT_NS). iWARP's CM has no timewait and no such
 * event (kernel rdma_cm on siw), nor has UD.
 */
static void timewait(struct cma_id *id)
{
	if (id->iwarp || id->id.qp_type == IBV_QPT_UD)
		return;
	id->deadline_ns = sv_now_ns() + CMA_TIMEWAIT_NS;
	cma_kick();
}

/* The peer closed (or broke) the connection. */
static void peer_gone(struct cma_id *id)
{
	sv_dbg("rdma_cm: id %p (%s): the peer closed", (void *)id, cma_state_name[id->state]);
	switch (id->state) {
	case CMA_CONNECT:
		cma_active_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
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
		cma_post(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
		break;
	case CMA_CONNECTED: {
		struct cma_event *e;

		/* The QP is the application's: it calls rdma_disconnect, which stops it. On
		 * iWARP the stream it ran on is gone with the peer: reading the event moves
		 * it to ERROR (as siw's QP goes when its TCP connection closes). */
		cma_close_fd(id);
		id->state = CMA_DISCONNECTED;
		e = cma_post(id, RDMA_CM_EVENT_DISCONNECTED, 0);
		if (e && id->iwarp)
			e->work = CMA_WORK_QP_ERROR;
		timewait(id);
		break;
	}
	case CMA_DISCONNECTED: {
		/* This side went first; its timewait runs on. */
		uint64_t until = id->deadline_ns;

		cma_close_fd(id);
		id->deadline_ns = until;
		break;
	}
	default:
		cma_close_fd(id);
		break;
	}
}

static void on_input(struct cma_id *id, uint32_t events)
{
	ssize_t n;
	int r;

	if (id->state == CMA_LINGER) {
		/* The peer ended the stream (or broke it): ours ends now too. */
		if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			cma_id_release(id);
		return;
	}
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
		r = cma_read_frame(id, IW_MPA_REQUEST);
		if (r == 0)
			return;
		if (r == -EPROTO)
			cma_pending_drop(id, "not an MPA request");
		else if (r < 0)
			cma_pending_drop(id, "closed before its request");
		else if (cma_more_queued(id))
			cma_pending_drop(id, "bytes after the MPA request");
		else if (!cma_proto_local.take_request(id))
			cma_proto_iwarp.take_request(id);
		return;
	}
	if (id->state == CMA_CONNECT) {
		r = cma_read_frame(id, IW_MPA_REPLY);
		if (r == 0)
			return;
		if (r == -ECONNREFUSED && id->rx.len == 0)
			refused(id);
		else if (r == -ECONNRESET || (r < 0 && r != -EPROTO))
			peer_gone(id);
		else if (r < 0)
			cma_active_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO);
		else
			proto_of(id)->reply(id);
		id->rx.len = 0;
		return;
	}
	n = recv(id->fd, id->rx.buf + id->rx.len, sizeof(id->rx.buf) - id->rx.len, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		peer_gone(id);
		return;
	}
	id->rx.len += (size_t)n;
	switch (id->state) {
	case CMA_ACCEPTED:
		if (id->rx.len < CMA_RTU_LEN)
			return;
		if (memcmp(id->rx.buf, CMA_RTU, CMA_RTU_LEN)) {
			peer_gone(id);
			return;
		}
		id->rx.len = 0;
		id->deadline_ns = 0;
		id->state = CMA_CONNECTED;
		cma_established(id);
		return;
	default:
		/* Nothing else is expected on the stream; drop what comes. */
		id->rx.len = 0;
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
		cma_active_fail(id, RDMA_CM_EVENT_UNREACHABLE, fd);
		return;
	}
	cma_close_fd(id);
	id->fd = fd;
	if (connect(id->fd, dst, (socklen_t)cma_sockaddr_len(dst)) && errno != EINPROGRESS) {
		if (errno == ECONNREFUSED)
			refused(id);
		else
			cma_active_fail(id, RDMA_CM_EVENT_UNREACHABLE, -errno);
		return;
	}
	id->deadline_ns = id->connect_start_ns + CMA_REPLY_WAIT_NS;
	cma_watch(id, EPOLLOUT);
}

static void on_timeout(struct cma_id *id)
{
	sv_dbg("rdma_cm: id %p (%s): deadline", (void *)id, cma_state_name[id->state]);
	id->deadline_ns = 0;
	if (id->state == CMA_LINGER) {
		cma_id_release(id);
		return;
	}
	if (id->parent) {
		cma_pending_drop(id, "no request in time");
		return;
	}
	switch (id->state) {
	case CMA_CONNECT:
		if (id->retrying) {
			retry_connect(id);
			break;
		}
		cma_active_fail(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
		break;
	case CMA_ACCEPTED:
		cma_close_fd(id);
		id->state = CMA_ERROR;
		cma_post(id, RDMA_CM_EVENT_CONNECT_ERROR, -ETIMEDOUT);
		break;
	case CMA_DISCONNECTED:
		if (!id->destroyed)
			cma_post(id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
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
	int err = 0;

	if (!id)
		return fail(EINVAL);
	if (conn_param && conn_param->private_data_len &&
	    (conn_param->private_data_len > proto_of(cid)->pd_max(cid, CMA_PD_CALL_CONNECT) ||
	     !conn_param->private_data))
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
		cid->deadline_ns = sv_now_ns() + CMA_REPLY_WAIT_NS;
		cma_watch(cid, EPOLLOUT);
	}
	pthread_mutex_unlock(&cma_lock);
	if (err)
		return fail(err);
	if (cid->sync)
		return cma_wait_event(cid);
	return 0;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct cma_id *cid = to_cma_id(id);
	bool ud = id && id->qp_type == IBV_QPT_UD;
	int err = 0;

	if (!id)
		return fail(EINVAL);
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
	    (conn_param->private_data_len > proto_of(cid)->pd_max(cid, CMA_PD_CALL_ACCEPT) ||
	     !conn_param->private_data)) {
		/* rdma-core: the failed accept rejects the request (REJ 28 / SIDR REJECT). */
		err = EINVAL;
		proto_of(cid)->refuse(cid, NULL, 0);
		cma_qp_to_error(cid);
		cid->state = CMA_ERROR;
	} else if (err) {
		cma_qp_to_error(cid);
	} else {
		err = proto_of(cid)->accept(cid, conn_param);
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

	if (!id)
		return fail(EINVAL);
	if (private_data_len &&
	    (private_data_len > proto_of(cid)->pd_max(cid, CMA_PD_CALL_REJECT) || !private_data))
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	if (cid->state != CMA_REQ_RCVD) {
		pthread_mutex_unlock(&cma_lock);
		return fail(EINVAL);
	}
	proto_of(cid)->refuse(cid, private_data, private_data_len);
	cid->state = CMA_IDLE;
	pthread_mutex_unlock(&cma_lock);
	return 0;
}

/* Destroying an id whose request was never answered rejects it (IB CM: REJ 28). */
void cma_refuse_unanswered(struct cma_id *id)
{
	if (id->state == CMA_REQ_RCVD)
		proto_of(id)->refuse(id, NULL, 0);
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
		if (cid->iwarp && cid->adopted)
			cma_linger(cid); /* the QP let go of it: our dup ends the stream */
		else if (cid->fd >= 0)
			shutdown(cid->fd, SHUT_WR);
		cid->deadline_ns = 0;
		cid->state = CMA_DISCONNECTED;
		if (cid->id.qp_type != IBV_QPT_UD) {
			cma_post(cid, RDMA_CM_EVENT_DISCONNECTED, 0);
			timewait(cid);
		} else {
			err = EINVAL;
		}
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
