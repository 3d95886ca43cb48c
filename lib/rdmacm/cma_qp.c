/*
 * QPs and SRQs on ids, their moves through the state machine as the handshake goes, and
 * their attachment to the multicast groups the id joined. The synchronous endpoint calls
 * (rdma_create_ep, rdma_get_request) are cma_ep.c's.
 */
#include "cma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <softverbs/softverbs.h>

int cma_sgid_index(struct cma_id *id)
{
	struct ibv_port_attr port;
	union ibv_gid g;

	if (ibv_query_port(id->id.verbs, 1, &port))
		return 0;
	for (int i = 0; i < port.gid_tbl_len; i++) {
		if (!ibv_query_gid(id->id.verbs, 1, i, &g) &&
		    !memcmp(&g, &id->id.route.addr.addr.ibaddr.sgid, sizeof(g)))
			return i;
	}
	return 0;
}

static uint8_t clamp_rd_atom(struct cma_id *id, uint8_t v)
{
	struct ibv_device_attr attr;

	if (!ibv_query_device(id->id.verbs, &attr) && v > attr.max_qp_rd_atom)
		return (uint8_t)attr.max_qp_rd_atom;
	return v;
}

void cma_fill_info(struct cma_id *id, struct cma_info *info, uint8_t user_len)
{
	memset(info, 0, sizeof(*info));
	info->qpn = htonl(id->id.qp ? id->id.qp->qp_num : id->conn.qp_num);
	info->psn = htonl(id->psn);
	info->qkey = htonl(RDMA_UDP_QKEY);
	info->ird = id->conn.responder_resources;
	info->ord = id->conn.initiator_depth;
	info->qp_type = (uint8_t)id->id.qp_type;
	info->flags = id->id.srq || id->conn.srq ? CMA_INFO_SRQ : 0;
	if (id->parent) /* a listener's connection refused before it became an id */
		info->flags |= CMA_INFO_NO_SERVICE;
	info->retry = id->conn.retry_count;
	info->rnr_retry = id->conn.rnr_retry_count;
	info->user_len = user_len;
	info->version = CMA_INFO_VERSION;
	memcpy(info->gid, id->id.route.addr.addr.ibaddr.sgid.raw, 16);
	info->magic = htonl(CMA_INFO_MAGIC);
}

/* The attributes of the move to qp_attr->qp_state, as rdma_init_qp_attr gives them
 * (the kernel's IB CM values on a RoCE port). */
static int init_attr(struct cma_id *id, struct ibv_qp_attr *a, int *mask)
{
	enum ibv_qp_state to = a->qp_state;
	bool ud = id->id.qp_type == IBV_QPT_UD;
	bool peer_known = id->state >= CMA_CONNECT && id->state != CMA_LISTEN;

	if ((unsigned)to > IBV_QPS_ERR)
		return EINVAL;
	memset(a, 0, sizeof(*a));
	a->qp_state = to;
	/* Before a connection exists, and for UD, every state gets the INIT values. */
	if (ud || !peer_known || to == IBV_QPS_INIT) {
		a->pkey_index = 0;
		a->port_num = 1;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		if (ud) {
			a->qkey = RDMA_UDP_QKEY;
			*mask |= IBV_QP_QKEY;
			return 0;
		}
		/* IB CM: remote write; read and atomics when this side gives responder
		 * resources. Nothing before the peer is known. */
		*mask |= IBV_QP_ACCESS_FLAGS;
		if (peer_known) {
			a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
			if (id->resp_res)
				a->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		}
		return 0;
	}
	switch (to) {
	case IBV_QPS_RTR:
		a->path_mtu = id->path.mtu ? id->path.mtu : IBV_MTU_1024;
		a->dest_qp_num = id->remote.qpn;
		a->rq_psn = id->remote.psn;
		a->max_dest_rd_atomic = clamp_rd_atom(id, id->resp_res);
		a->min_rnr_timer = 0;
		a->ah_attr.is_global = 1;
		memcpy(a->ah_attr.grh.dgid.raw, id->remote.gid, 16);
		a->ah_attr.grh.sgid_index = (uint8_t)cma_sgid_index(id);
		a->ah_attr.grh.hop_limit = 64;
		a->ah_attr.grh.traffic_class = id->tos;
		a->ah_attr.dlid = ntohs(id->path.dlid);
		a->ah_attr.port_num = 1;
		*mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		return 0;
	case IBV_QPS_RTS: {
		bool passive = id->state == CMA_REQ_RCVD || id->state == CMA_ACCEPTED;

		a->sq_psn = id->psn;
		a->timeout = id->ack_timeout ? id->ack_timeout : 18;
		/* The active side's retry count rules both ends; the RNR retry count is
		 * the one the peer sent. */
		a->retry_cnt = passive ? id->remote.retry : id->conn.retry_count;
		a->rnr_retry = passive ? id->conn.rnr_retry_count : id->remote.rnr_retry;
		a->retry_cnt = a->retry_cnt > 7 ? 7 : a->retry_cnt;
		a->rnr_retry = a->rnr_retry > 7 ? 7 : a->rnr_retry;
		if (id->iwarp) {
			/* iWARP exchanges no retry counts (TCP retransmits): the most
			 * patient, so that the core's timers never give up on a live
			 * stream. */
			a->retry_cnt = 7;
			a->rnr_retry = 7;
		}
		a->max_rd_atomic = clamp_rd_atom(id, id->init_depth);
		*mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
		return 0;
	}
	default:
		*mask = IBV_QP_STATE;
		return 0;
	}
}

int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	int err;

	if (!id || !qp_attr || !qp_attr_mask)
		return fail(EINVAL);
	if (!id->verbs)
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	err = init_attr(to_cma_id(id), qp_attr, qp_attr_mask);
	pthread_mutex_unlock(&cma_lock);
	return err ? fail(err) : 0;
}

static int modify(struct cma_id *id, enum ibv_qp_state to)
{
	struct ibv_qp_attr a = { .qp_state = to };
	int mask, err = init_attr(id, &a, &mask);

	if (err)
		return err;
	return ibv_modify_qp(id->id.qp, &a, mask);
}

/* A new QP goes to INIT (RC/UC) or all the way to RTS (UD: nothing to wait for). */
int cma_qp_init(struct cma_id *id, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	int err;

	(void)qp;
	err = modify(id, IBV_QPS_INIT);
	if (!err && id->id.qp_type == IBV_QPT_UD) {
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTR;
		err = ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE);
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0;
		if (!err)
			err = ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	return err;
}

/* Connect: the QP goes RTR and RTS with what the peer said. Returns 0 or -errno. */
int cma_qp_to_rts(struct cma_id *id)
{
	int err;

	if (!id->id.qp)
		return 0;
	/* A QP the application moved itself is left where it is. */
	{
		struct ibv_qp_attr cur;
		struct ibv_qp_init_attr init;

		if (!ibv_query_qp(id->id.qp, &cur, IBV_QP_STATE, &init) &&
		    cur.qp_state != IBV_QPS_INIT)
			return 0;
	}
	/* INIT again with the access the connection gives, then RTR and RTS. */
	err = modify(id, IBV_QPS_INIT);
	if (!err)
		err = modify(id, IBV_QPS_RTR);
	if (!err)
		err = modify(id, IBV_QPS_RTS);
	if (err)
		sv_info("rdma_cm: moving QP %u to RTS failed: %s", id->id.qp->qp_num, strerror(err));
	return -err;
}

/*
 * iWARP: the QP (in INIT) takes the id's TCP connection, whose MPA exchange is done or
 * about to be (passive: the reply goes after this), then goes to RTR and RTS. The id
 * keeps a dup() of the socket to see the stream end; it never reads it again. Under
 * cma_lock. 0 or -errno.
 */
int cma_qp_adopt(struct cma_id *id)
{
	struct softverbs_stream s = {
		.crc = id->mpa_peer.crc, .rfc7306 = id->rfc7306,
		.ird = id->resp_res, .ord = id->init_depth,
		/* RFC 5044 §7.1: the passive side sends nothing before the initiator's first
		 * FPDU (a siw initiator that finds bytes behind the reply drops the
		 * connection: "peer sent extra data"). */
		.peer_first = id->state == CMA_REQ_RCVD,
	};
	struct ibv_qp_attr cur;
	struct ibv_qp_init_attr init;
	int watch, err;

	if (!id->id.qp || id->fd < 0)
		return -EINVAL;
	if (ibv_query_qp(id->id.qp, &cur, IBV_QP_STATE, &init) || cur.qp_state != IBV_QPS_INIT) {
		sv_info("rdma_cm: QP %u is not in INIT: it cannot take the iWARP stream",
			id->id.qp->qp_num);
		return -EINVAL;
	}
	watch = fcntl(id->fd, F_DUPFD_CLOEXEC, 0);
	if (watch < 0)
		return -errno;
	cma_unwatch(id);
	err = softverbs_qp_adopt_stream(id->id.qp, id->fd, &s);
	if (err) {
		/* Not an iWARP QP (made with ibv_create_qp, not rdma_create_qp), or busy. */
		sv_info("rdma_cm: QP %u cannot take the iWARP stream: %s", id->id.qp->qp_num,
			strerror(err));
		close(watch);
		return -err;
	}
	/* The QP owns the stream now (it closes it on RESET, ERR and destroy). */
	id->fd = watch;
	id->adopted = true;
	cma_watch(id, EPOLLRDHUP);
	return cma_qp_to_rts(id);
}

void cma_qp_to_error(struct cma_id *id)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (id->id.qp && id->id.qp_type != IBV_QPT_UD)
		ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE);
}

/* Under cma_lock, when the MULTICAST_JOIN is read: attach the id's QP, the group joined
 * on the link of the id's address (as Linux's rdma_cm joins it on that netdev; from
 * loopback, the members on this host only). */
int cma_mc_attach(struct cma_id *id, const union ibv_gid *mgid)
{
	for (struct cma_mc *mc = id->mcs; mc; mc = mc->next) {
		int err;

		if (memcmp(&mc->mgid, mgid, sizeof(*mgid)) || mc->sendonly || mc->attached ||
		    !id->id.qp)
			continue;
		err = softverbs_attach_mcast_on(
			id->id.qp, mgid,
			cma_addr_is_loopback(&id->id.route.addr.src_addr) ?
				0 : cma_addr_ifindex(&id->id.route.addr.src_addr));
		if (err)
			return -err;
		mc->attached = true;
	}
	return 0;
}

/* --- QP and SRQ creation ------------------------------------------------------------- */

static void destroy_cqs(struct cma_id *id)
{
	if (id->id.send_cq && id->id.send_cq != id->id.recv_cq)
		ibv_destroy_cq(id->id.send_cq);
	if (id->id.recv_cq)
		ibv_destroy_cq(id->id.recv_cq);
	if (id->id.send_cq_channel && id->id.send_cq_channel != id->id.recv_cq_channel)
		ibv_destroy_comp_channel(id->id.send_cq_channel);
	if (id->id.recv_cq_channel)
		ibv_destroy_comp_channel(id->id.recv_cq_channel);
	id->id.send_cq = id->id.recv_cq = NULL;
	id->id.send_cq_channel = id->id.recv_cq_channel = NULL;
}

/* Makes the CQs (each with its completion channel) the caller left out. */
static int create_cqs(struct cma_id *id, uint32_t send_size, uint32_t recv_size)
{
	struct ibv_context *ctx = id->id.verbs;

	if (recv_size) {
		id->id.recv_cq_channel = ibv_create_comp_channel(ctx);
		if (!id->id.recv_cq_channel)
			goto err;
		id->id.recv_cq = ibv_create_cq(ctx, (int)recv_size, &id->id, id->id.recv_cq_channel, 0);
		if (!id->id.recv_cq)
			goto err;
	}
	if (send_size) {
		id->id.send_cq_channel = ibv_create_comp_channel(ctx);
		if (!id->id.send_cq_channel)
			goto err;
		id->id.send_cq = ibv_create_cq(ctx, (int)send_size, &id->id, id->id.send_cq_channel, 0);
		if (!id->id.send_cq)
			goto err;
	}
	return 0;
err:
	destroy_cqs(id);
	return errno ? errno : ENOMEM;
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct cma_id *cid = to_cma_id(id);
	struct ibv_qp *qp;
	int err;

	if (!id || !attr)
		return fail(EINVAL);
	if (!id->verbs || id->qp)
		return fail(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd ? id->pd : cma_default_pd(id->verbs);
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
	}
	if (!attr->pd)
		return -1;
	if (attr->pd->context != id->verbs)
		return fail(EINVAL);
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	err = create_cqs(cid, attr->send_cq ? 0 : attr->cap.max_send_wr,
			 attr->recv_cq || attr->srq ? 0 : attr->cap.max_recv_wr);
	if (err)
		return fail(err);
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq ? id->recv_cq : attr->send_cq;
	if (cid->iwarp && attr->qp_type != IBV_QPT_UD) {
		/* The peer is on another host: the QP goes on the iWARP wire, which takes
		 * the connection's stream at connect or accept. */
		struct ibv_qp_init_attr init;

		if (attr->comp_mask & ~(uint32_t)IBV_QP_INIT_ATTR_PD) {
			sv_info("rdma_create_qp_ex: an iWARP id's QP takes the attributes of "
				"ibv_create_qp only (comp_mask 0x%x)", attr->comp_mask);
			destroy_cqs(cid);
			return fail(EOPNOTSUPP);
		}
		memcpy(&init, attr, sizeof(init));
		qp = softverbs_create_qp_on_wire(attr->pd, &init, SOFTVERBS_WIRE_IWARP);
		if (qp)
			memcpy(attr, &init, sizeof(init));
	} else {
		qp = ibv_create_qp_ex(id->verbs, attr);
	}
	if (!qp) {
		err = errno;
		destroy_cqs(cid);
		return fail(err);
	}
	id->qp = qp;
	id->pd = attr->pd;
	pthread_mutex_lock(&cma_lock);
	err = cma_qp_init(cid, qp);
	pthread_mutex_unlock(&cma_lock);
	if (err) {
		ibv_destroy_qp(qp);
		id->qp = NULL;
		destroy_cqs(cid);
		return fail(err);
	}
	return 0;
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex ex;
	int ret;

	if (!id || !qp_init_attr)
		return fail(EINVAL);
	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, qp_init_attr, sizeof(*qp_init_attr));
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd;
	ret = rdma_create_qp_ex(id, &ex);
	if (!ret) {
		/* The caller learns the capabilities it got, as from ibv_create_qp. */
		memcpy(qp_init_attr, &ex, sizeof(*qp_init_attr));
	}
	return ret;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (!id || !id->qp)
		return;
	/* Groups still joined hold the QP (ibv_destroy_qp would say EBUSY): detach. */
	pthread_mutex_lock(&cma_lock);
	for (struct cma_mc *mc = to_cma_id(id)->mcs; mc; mc = mc->next) {
		if (mc->attached)
			ibv_detach_mcast(id->qp, &mc->mgid, 0xc000);
		mc->attached = false;
	}
	pthread_mutex_unlock(&cma_lock);
	ibv_destroy_qp(id->qp);
	id->qp = NULL;
	destroy_cqs(to_cma_id(id));
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct cma_id *cid = to_cma_id(id);
	struct ibv_srq *srq;
	int err;

	if (!id || !attr || !id->verbs || id->srq)
		return fail(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)) {
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_TYPE;
		attr->srq_type = IBV_SRQT_BASIC;
	}
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd ? id->pd : cma_default_pd(id->verbs);
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if (!attr->pd)
		return -1;
	if (attr->srq_type != IBV_SRQT_BASIC)
		return fail(EOPNOTSUPP);
	if (!id->recv_cq && !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ)) {
		err = create_cqs(cid, 0, attr->attr.max_wr);
		if (err)
			return fail(err);
	}
	srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq) {
		err = errno;
		return fail(err);
	}
	id->srq = srq;
	id->pd = attr->pd;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ex;
	int ret;

	if (!id || !attr)
		return fail(EINVAL);
	memset(&ex, 0, sizeof(ex));
	ex.srq_context = attr->srq_context;
	ex.attr = attr->attr;
	ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	ex.srq_type = IBV_SRQT_BASIC;
	ex.pd = pd;
	ret = rdma_create_srq_ex(id, &ex);
	if (!ret)
		attr->attr = ex.attr;
	return ret;
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!id || !id->srq)
		return;
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
	if (!id->qp)
		destroy_cqs(to_cma_id(id));
}
