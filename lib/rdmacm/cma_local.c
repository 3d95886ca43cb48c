/*
 * rdma_cm's same-host connection protocol (struct cma_proto, cma.h): softverbs' own
 * handshake between ids of one host, whose QPs then find each other by QPN over the shm
 * wire. Its frames are MPA's, revision 1 (RFC 5044 §7.1, through iw_xchg.h), with the
 * user's private data followed by softverbs' trailer (struct cma_info: QPN, PSN, Q_Key,
 * depths, retry counts, the sender's GID), and it reports what a RoCE port reports:
 * the IB CM's private data sizes, reject reasons and SIDR statuses.
 *
 *   TCP connect ------------------------> accept, wait for the request (5 s at most)
 *   MPA request: PD = user PD + cma_info -> CONNECT_REQUEST (a new id)
 *                                          rdma_accept: QP to RTS, then
 *   ESTABLISHED (QP to RTS) <------------- MPA reply: PD = user PD + cma_info
 *   RTU (8 bytes) ----------------------> ESTABLISHED
 *   ... data over the shm wire; the TCP connection stays open ...
 *
 * A reply with the MPA R bit is a reject (REJECTED, status 28, the user's private data);
 * a refused TCP connect is nobody listening (REJECTED, status 8), as a RoCE port reports
 * a REJ for an unknown service ID. A UD id's connect is SIDR-like: request, reply with
 * the QPN and Q_Key, connection closed.
 */
#include "cma.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "util/sv_time.h"

/* Sends a revision 1 frame: PD = the user's bytes, then our trailer when @with_info; R
 * when @reject. */
static int send_frame(struct cma_id *id, enum iw_mpa_kind kind, bool reject, const void *user,
		      uint8_t user_len, bool with_info)
{
	static const struct iw_xchg_side rev1 = { .rev = IW_MPA_REV };
	unsigned char pd[CMA_PD_MAX + sizeof(struct cma_info)];
	unsigned char frame[IW_MPA_FRAME_MAX];
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
	len = iw_xchg_encode(frame, sizeof(frame), kind, false, &rev1, reject, pd, pd_len);
	return len < 0 ? len : iw_xchg_send(id->fd, frame, (size_t)len);
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

static uint8_t pd_max(const struct cma_id *id, enum cma_pd_call call)
{
	static const uint8_t rc[] = { CMA_PD_CONNECT, CMA_PD_ACCEPT, CMA_PD_REJECT };
	static const uint8_t ud[] = { CMA_PD_UD_CONNECT, CMA_PD_UD_ACCEPT, CMA_PD_UD_REJECT };

	return id->id.qp_type == IBV_QPT_UD ? ud[call] : rc[call];
}

static int request(struct cma_id *id)
{
	return send_frame(id, IW_MPA_REQUEST, false, id->conn.private_data,
			  id->conn.private_data_len, true);
}

/* Nobody listens: a RoCE port's REJ for an unknown service ID, or SIDR "unsupported". */
static void refused(struct cma_id *id)
{
	struct cma_event *e;

	cma_close_fd(id);
	id->state = CMA_ERROR;
	if (id->id.qp_type == IBV_QPT_UD) {
		e = cma_event_new(id, RDMA_CM_EVENT_UNREACHABLE, CMA_SIDR_UNSUPPORTED);
		if (e)
			cma_copy_pdata(e, NULL, 0, CMA_PD_SEEN_UD_REP);
	} else {
		e = cma_event_new(id, RDMA_CM_EVENT_REJECTED, CMA_REJ_INVALID_SERVICE_ID);
		if (e)
			cma_copy_pdata(e, NULL, 0, CMA_PD_SEEN_REJ);
	}
	if (e)
		e->work = CMA_WORK_QP_ERROR;
	cma_event_post(e);
}

/* The reply, whole in id->rx. */
static void reply(struct cma_id *id)
{
	struct iw_xchg_side par;
	const unsigned char *pd;
	uint16_t pd_len;
	struct cma_event *e;
	int user_len;
	bool rej;

	id->deadline_ns = 0;
	if (cma_more_queued(id) ||
	    iw_xchg_decode(id->rx.buf, id->rx.len, IW_MPA_REPLY, false, &par, &rej, &pd,
			   &pd_len) < 0 ||
	    par.rev != IW_MPA_REV) { /* this handshake has no RFC 6581 words */
		cma_active_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO);
		return;
	}
	if (rej) {
		user_len = take_info(id, pd, pd_len);
		if (user_len >= 0 && (id->remote.flags & CMA_INFO_NO_SERVICE)) {
			refused(id);
			return;
		}
		cma_close_fd(id);
		id->state = CMA_ERROR;
		if (id->id.qp_type == IBV_QPT_UD)
			e = cma_event_new(id, RDMA_CM_EVENT_UNREACHABLE, CMA_SIDR_REJECT);
		else
			e = cma_event_new(id, RDMA_CM_EVENT_REJECTED, CMA_REJ_CONSUMER_DEFINED);
		if (e) {
			cma_copy_pdata(e, pd, user_len < 0 ? pd_len : user_len,
				       id->id.qp_type == IBV_QPT_UD ? CMA_PD_SEEN_UD_REP
								    : CMA_PD_SEEN_REJ);
			e->work = CMA_WORK_QP_ERROR;
			cma_event_post(e);
		}
		return;
	}
	user_len = take_info(id, pd, pd_len);
	if (user_len < 0) {
		cma_active_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO);
		return;
	}
	if (id->id.qp_type == IBV_QPT_UD) {
		/* SIDR: the reply is all there is. */
		cma_close_fd(id);
		id->state = CMA_CONNECTED;
		e = cma_event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0);
		if (e) {
			cma_fill_ud_param(id, &e->ev.param.ud);
			cma_copy_pdata(e, pd, user_len, CMA_PD_SEEN_UD_REP);
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
		cma_fill_conn_param(id, &e->ev.param.conn);
		cma_copy_pdata(e, pd, user_len, CMA_PD_SEEN_REP);
		cma_event_post(e);
	}
}

/*
 * A request is this handshake's when it is revision 1 (no RFC 6581 words: the PD is all
 * the user's and our trailer), ends in a softverbs trailer, and comes from this host;
 * from another host for UD only (its datagrams go on the UDP wire; a connected QP from
 * there is iWARP's, as a peer that is not softverbs may be).
 */
static bool take_request(struct cma_id *p)
{
	struct cma_id *l = p->parent;
	struct sockaddr_storage peer;
	socklen_t plen = sizeof(peer);
	struct iw_xchg_side par;
	const unsigned char *user;
	uint16_t ulen;
	struct cma_event *e;
	int user_len = -1;
	bool rej;

	if (iw_xchg_decode(p->rx.buf, p->rx.len, IW_MPA_REQUEST, false, &par, &rej, &user,
			   &ulen) < 0 ||
	    par.rev != IW_MPA_REV || getpeername(p->fd, (struct sockaddr *)&peer, &plen))
		return false;
	user_len = take_info(p, user, ulen);
	if (user_len < 0 || (!cma_addr_is_local((struct sockaddr *)&peer) &&
			     p->remote.qp_type != IBV_QPT_UD))
		return false;
	if ((p->remote.qp_type == IBV_QPT_UD) != (l->id.qp_type == IBV_QPT_UD)) {
		/* RDMA_PS_TCP and RDMA_PS_UDP are different services on the same port
		 * number: for the requester nobody listens on its. */
		p->conn.qp_num = 0;
		send_frame(p, IW_MPA_REPLY, true, NULL, 0, true);
		cma_pending_drop(p, "no listener in the requester's port space");
		return true;
	}
	cma_pending_to_id(p);

	e = cma_event_new(l, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!e)
		return true;
	e->ev.id = &p->id;
	e->ev.listen_id = &l->id;
	e->child = p;
	/* UD: the request carries only private data (SIDR REQ). */
	if (p->id.qp_type == IBV_QPT_UD) {
		cma_copy_pdata(e, user, user_len, CMA_PD_SEEN_UD_REQ);
	} else {
		p->resp_res = p->remote.ord;
		p->init_depth = p->remote.ird;
		cma_fill_conn_param(p, &e->ev.param.conn);
		cma_copy_pdata(e, user, user_len, CMA_PD_SEEN_REQ);
	}
	cma_event_post(e);
	return true;
}

static void refuse(struct cma_id *id, const void *pd, uint8_t len)
{
	if (!id->peer_closed && id->fd >= 0)
		send_frame(id, IW_MPA_REPLY, true, pd, len, false);
	cma_close_fd(id);
}

/*
 * rdma_accept (under cma_lock; the parameters checked): the QP to RTS, then the reply;
 * ESTABLISHED comes with the initiator's RTU (cma_conn.c), for UD at once. 0, or an
 * errno for rdma_accept.
 */
static int accept_request(struct cma_id *id, const struct rdma_conn_param *param)
{
	bool ud = id->id.qp_type == IBV_QPT_UD;
	int err = 0, r;

	id->resp_res = id->conn.responder_resources;
	id->init_depth = id->conn.initiator_depth;
	id->psn = ud ? 0 : cma_random_psn(id);
	if (!ud && id->id.qp)
		err = -cma_qp_to_rts(id);
	if (err) {
		cma_qp_to_error(id);
		return err;
	}
	if (id->peer_closed) {
		cma_qp_to_error(id);
		id->state = CMA_ERROR;
		cma_post(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
		return 0;
	}
	r = send_frame(id, IW_MPA_REPLY, false, param ? param->private_data : NULL,
		       param ? param->private_data_len : 0, true);
	if (r) {
		cma_close_fd(id);
		cma_qp_to_error(id);
		id->state = CMA_ERROR;
		cma_post(id, RDMA_CM_EVENT_CONNECT_ERROR, r);
	} else if (ud) {
		cma_close_fd(id);
		id->state = CMA_CONNECTED;
	} else {
		id->state = CMA_ACCEPTED;
		id->deadline_ns = sv_now_ns() + CMA_REPLY_WAIT_NS;
		cma_kick();
	}
	return 0;
}

const struct cma_proto cma_proto_local = {
	.name = "same-host",
	.pd_max = pd_max,
	.request = request,
	.reply = reply,
	.refused = refused,
	.take_request = take_request,
	.accept = accept_request,
	.refuse = refuse,
};
