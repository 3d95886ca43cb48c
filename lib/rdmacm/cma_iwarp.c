/*
 * rdma_cm's iWARP connection protocol (struct cma_proto, cma.h): the MPA exchange as
 * kernel rdma_cm makes it on an iWARP device and Linux siw frames it, through the one
 * exchange softverbs has (src/wire/iwarp/iw_xchg.h: revision 2 with RFC 6581's IRD/ORD
 * words, C echoed, a revision 1 request answered in kind, peer-to-peer refused). The
 * consumer's private data goes raw; the QP takes the stream (cma_qp_adopt) and speaks
 * FPDUs on it; the id keeps a dup() of it to see its end (cma_conn.c).
 *
 *   TCP connect ------------------------> accept, wait for the request
 *   MPA request rev 2, enhanced: IRD/ORD -> CONNECT_REQUEST (the PD raw, its own length)
 *     words + the user's PD, C = CRC       rdma_accept: the QP (INIT) takes the stream,
 *                                          RTR, RTS; then
 *   QP takes the stream, RTR, RTS <------- MPA reply: C echoed, IRD/ORD, the user's PD;
 *   ESTABLISHED                            ESTABLISHED
 *
 * A reject is a reply with R and the user's PD (REJECTED, status -ECONNREFUSED, as
 * kernel rdma_cm reports an MPA reject or a refused TCP connect on iWARP).
 */
#include "cma.h"

#include <poll.h>
#include <string.h>
#include <sys/epoll.h>

enum { IW_CM_IRD_ORD_MAX = 128 }; /* as siw: RFC 6581 words hold 14 bits, siw caps at 128 */

static uint8_t cap_rd(unsigned int v)
{
	return (uint8_t)(v < IW_CM_IRD_ORD_MAX ? v : IW_CM_IRD_ORD_MAX);
}

/* Sends the frame of @kind saying @me, R when @reject, the user's private data raw. */
static int send_side(struct cma_id *id, enum iw_mpa_kind kind, const struct iw_xchg_side *me,
		     bool reject, const void *user, uint8_t user_len)
{
	unsigned char frame[IW_MPA_FRAME_MAX];
	int len = iw_xchg_encode(frame, sizeof(frame), kind, false, me, reject, user, user_len);

	return len < 0 ? len : iw_xchg_send(id->fd, frame, (size_t)len);
}

/* The reply to the request in front of @id: accepting with this side's depths, or R. */
static int send_reply(struct cma_id *id, bool reject, const void *user, uint8_t user_len)
{
	struct iw_xchg_side reply;

	(void)iw_xchg_answer(&id->mpa_peer, reject ? 0 : id->resp_res,
			     reject ? 0 : id->init_depth, &reply);
	return send_side(id, IW_MPA_REPLY, &reply, reject, user, user_len);
}

static uint8_t pd_max(const struct cma_id *id, enum cma_pd_call call)
{
	(void)id;
	(void)call;
	return CMA_PD_IWARP; /* no IB CM header; what siw takes */
}

static int request(struct cma_id *id)
{
	/* RFC 5044 §7.1: C asks for CRC; SOFTVERBS_IWARP_CRC=0 does not ask. */
	struct iw_xchg_side req = iw_xchg_request(cma_mpa_crc_wanted(),
						  cap_rd(id->conn.responder_resources),
						  cap_rd(id->conn.initiator_depth));

	id->mpa_peer = req; /* kept to check the reply against */
	return send_side(id, IW_MPA_REQUEST, &req, false, id->conn.private_data,
			 id->conn.private_data_len);
}

/* The reply (RFC 5044 §7.1, RFC 6581) is in id->rx, whole. */
static void reply(struct cma_id *id)
{
	struct iw_xchg_side peer;
	const unsigned char *user;
	uint16_t user_len;
	struct cma_event *e;
	bool rej;

	id->deadline_ns = 0;
	if (iw_xchg_decode(id->rx.buf, id->rx.len, IW_MPA_REPLY, false, &peer, &rej, &user,
			   &user_len) < 0 ||
	    user_len > UINT8_MAX) {
		cma_active_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO);
		return;
	}
	if (rej) {
		/* As kernel rdma_cm reports siw's: REJECTED, -ECONNREFUSED, the PD raw. */
		cma_close_fd(id);
		id->state = CMA_ERROR;
		e = cma_event_new(id, RDMA_CM_EVENT_REJECTED, -ECONNREFUSED);
		if (e) {
			cma_copy_pdata(e, user, user_len, user_len);
			e->work = CMA_WORK_QP_ERROR;
			cma_event_post(e);
		}
		return;
	}
	if (iw_xchg_check_reply(&id->mpa_peer, &peer)) {
		cma_active_fail(id, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO);
		return;
	}
	/* The responder decides: its C bit says whether CRC is on (as siw initiators do). */
	id->mpa_peer = peer;
	id->rfc7306 = cma_rfc7306_wanted();
	memset(&id->remote, 0, sizeof(id->remote));
	/* RFC 6581 §5: the responder's IRD and ORD (revision 1: one Read each way). */
	id->remote.ird = cap_rd(peer.ird);
	id->remote.ord = cap_rd(peer.ord);
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
		cma_fill_conn_param(id, &e->ev.param.conn);
		cma_copy_pdata(e, user, user_len, user_len);
		cma_event_post(e);
	}
}

static void refused(struct cma_id *id)
{
	struct cma_event *e;

	/* Kernel rdma_cm on iWARP reports the refused TCP connect as it comes. */
	cma_close_fd(id);
	id->state = CMA_ERROR;
	e = cma_event_new(id, RDMA_CM_EVENT_REJECTED, -ECONNREFUSED);
	if (e) {
		cma_copy_pdata(e, NULL, 0, 0);
		e->work = CMA_WORK_QP_ERROR;
	}
	cma_event_post(e);
}

/* Any request the same-host handshake did not claim: the private data is the consumer's. */
static bool take_request(struct cma_id *p)
{
	unsigned char pd[CMA_PD_BUF];
	struct cma_id *l = p->parent;
	struct iw_xchg_side req, none;
	const unsigned char *user;
	uint16_t user_len;
	struct cma_event *e;
	bool rej;

	if (iw_xchg_decode(p->rx.buf, p->rx.len, IW_MPA_REQUEST, false, &req, &rej, &user,
			   &user_len) < 0) {
		cma_pending_drop(p, "not an MPA request");
		return true;
	}
	p->iwarp = true;
	p->mpa_peer = req;
	if (l->id.qp_type == IBV_QPT_UD || user_len > UINT8_MAX ||
	    iw_xchg_answer(&req, 0, 0, &none)) {
		/* UD has no iWARP connection; an event cannot report more than 255 bytes of
		 * private data (a u8); peer-to-peer RTR is not offered (siw does not ask). */
		(void)send_reply(p, true, NULL, 0);
		cma_pending_drop(p, l->id.qp_type == IBV_QPT_UD ? "an iWARP request to a UD listener"
				    : user_len > UINT8_MAX ? "iWARP private data above 255 bytes"
				    : "peer-to-peer mode asked for");
		return true;
	}
	memset(&p->remote, 0, sizeof(p->remote));
	/* RFC 6581 §5: the initiator's IRD and ORD (revision 1: one Read each way). */
	p->remote.ird = cap_rd(req.ird);
	p->remote.ord = cap_rd(req.ord);
	p->rfc7306 = cma_rfc7306_wanted();
	memcpy(pd, user, user_len);
	cma_pending_to_id(p);
	memcpy(p->remote.gid, p->id.route.addr.addr.ibaddr.dgid.raw, 16);
	e = cma_event_new(l, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!e)
		return true;
	e->ev.id = &p->id;
	e->ev.listen_id = &l->id;
	e->child = p;
	/* This side gives the Reads the initiator sends at once, and sends at most as
	 * many as the initiator takes. */
	p->resp_res = p->remote.ord;
	p->init_depth = p->remote.ird;
	cma_fill_conn_param(p, &e->ev.param.conn);
	cma_copy_pdata(e, pd, user_len, user_len); /* raw, its own length (no IB CM padding) */
	cma_event_post(e);
	return true;
}

static void refuse(struct cma_id *id, const void *pd, uint8_t len)
{
	if (!id->peer_closed && id->fd >= 0)
		(void)send_reply(id, true, pd, len);
	cma_close_fd(id);
}

/*
 * rdma_accept (under cma_lock; the parameters checked): the QP takes the stream in INIT
 * and goes to RTR and RTS, then the reply goes (the initiator sends FPDUs once it has
 * it: the QP is ready for them), and the connection is established. 0, or an errno for
 * rdma_accept (the request is then refused and the id in ERROR).
 */
static int accept_request(struct cma_id *id, const struct rdma_conn_param *param)
{
	int err;

	if (!id->id.qp) {
		sv_info("rdma_accept: an iWARP connection needs the QP of rdma_create_qp");
		return EINVAL;
	}
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
		cma_post(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
		return 0;
	}
	err = -cma_qp_adopt(id);
	if (!err)
		err = -send_reply(id, false, param ? param->private_data : NULL,
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
	cma_established(id);
	return 0;
}

const struct cma_proto cma_proto_iwarp = {
	.name = "iWARP",
	.pd_max = pd_max,
	.request = request,
	.reply = reply,
	.refused = refused,
	.take_request = take_request,
	.accept = accept_request,
	.refuse = refuse,
};
