/* Queue pairs: create, modify (the IBA state machine), query, destroy. */
#include <stdlib.h>
#include <string.h>

#include "core/sv_qp_table.h"
#include "core/sv_engine.h"
#include "core/sv_qp_data.h"
#include "wire/sv_wires.h"
#include "verbs.h"

enum {
	SV_QP_INIT_ATTR_MASK = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
			       IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
	SV_QP_SEND_OPS = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			 IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			 IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
			 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_BIND_MW |
			 IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV |
			 IBV_QP_EX_WITH_ATOMIC_WRITE,
	SV_QP_SEND_OPS_UC = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
	SV_QP_SEND_OPS_UD = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
	/* ON_DEMAND too: the kernel passes it on (ODP QPs), and softverbs pins nothing. */
	SV_QP_ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ON_DEMAND,
};

static uint64_t send_ops_for(enum ibv_qp_type type)
{
	switch (type) {
	case IBV_QPT_RC:
	case IBV_QPT_XRC_SEND: return SV_QP_SEND_OPS;
	case IBV_QPT_UC: return SV_QP_SEND_OPS_UC;
	case IBV_QPT_XRC_RECV: return 0; /* no send queue */
	default: return SV_QP_SEND_OPS_UD;
	}
}

/*
 * An XRC target (XRC_RECV) is made in an XRC domain and has no PD, CQ or queue of its
 * own; an XRC initiator (XRC_SEND) has a send queue only. The kernel ignores what else
 * the attributes name for them (ib_create_qp), and so does this; the capacities granted
 * say so.
 */
static bool xrc_target(const struct ibv_qp_init_attr_ex *attr)
{
	return attr->qp_type == IBV_QPT_XRC_RECV;
}

static bool has_recv_side(const struct ibv_qp_init_attr_ex *attr)
{
	return attr->qp_type != IBV_QPT_XRC_RECV && attr->qp_type != IBV_QPT_XRC_SEND;
}

static void xrc_trim_caps(struct ibv_qp_init_attr_ex *attr)
{
	if (xrc_target(attr))
		memset(&attr->cap, 0, sizeof(attr->cap));
	if (!has_recv_side(attr)) {
		attr->cap.max_recv_wr = 0;
		attr->cap.max_recv_sge = 0;
	}
}

/* 0 or a positive errno: what the kernel answers for these init attributes. */
static int check_init_attr(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_cap *cap = &attr->cap;
	enum ibv_qp_type type = attr->qp_type;

	if (type == IBV_QPT_XRC_RECV) {
		if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd ||
		    attr->xrcd->context != context)
			return EINVAL;
	} else if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		return EINVAL;
	}
	if (attr->comp_mask & ~(uint32_t)SV_QP_INIT_ATTR_MASK)
		return EOPNOTSUPP;
	if (!sv_qp_type_supported(type))
		return EOPNOTSUPP;
	if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)
		return EOPNOTSUPP;
	if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
	    (attr->send_ops_flags & ~send_ops_for(type)))
		return EOPNOTSUPP;
	xrc_trim_caps(attr);
	if (xrc_target(attr))
		return 0;
	if (!attr->send_cq || (has_recv_side(attr) && !attr->recv_cq))
		return EINVAL;
	if (attr->pd->context != context || attr->send_cq->context != context)
		return EINVAL;
	if (has_recv_side(attr) && (attr->recv_cq->context != context ||
				    (attr->srq && attr->srq->context != context)))
		return EINVAL;
	if (cap->max_send_wr > SV_MAX_QP_WR || cap->max_send_sge > SV_MAX_SGE ||
	    cap->max_inline_data > SV_MAX_INLINE)
		return EINVAL;
	if (!attr->srq && (cap->max_recv_wr > SV_MAX_QP_WR || cap->max_recv_sge > SV_MAX_SGE))
		return EINVAL;
	return 0;
}

struct ibv_qp *sv_verbs_create_qp_ex(struct ibv_context *context,
				     struct ibv_qp_init_attr_ex *attr)
{
	struct sv_context *ctx;
	const struct sv_wire_ops *far;
	struct sv_qp *qp;
	int err;

	if (!context || !attr)
		return sv_fail_null(EINVAL);
	err = check_init_attr(context, attr);
	if (err)
		return sv_fail_null(err);
	ctx = to_svctx(context);
	if (atomic_fetch_add(&ctx->n_qp, 1) >= SV_MAX_QP) {
		err = ENOMEM;
		goto err_count;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		err = ENOMEM;
		goto err_count;
	}
	if (attr->srq) {
		attr->cap.max_recv_wr = 0;
		attr->cap.max_recv_sge = 0;
	}
	qp->cap = attr->cap;
	err = -sv_wq_init_send(&qp->sq, attr->cap.max_send_wr, attr->cap.max_send_sge,
			       attr->cap.max_inline_data);
	if (err)
		goto err_free;
	err = -sv_wq_init_recv(&qp->rq, attr->cap.max_recv_wr, attr->cap.max_recv_sge);
	if (err)
		goto err_sq;

	pthread_mutex_init(&qp->lock, NULL);
	if (xrc_target(attr)) {
		qp->xrcd = to_svxrcd(attr->xrcd);
	} else {
		qp->pd = to_svpd(attr->pd);
		qp->scq = to_svcq(attr->send_cq);
		/* An XRC initiator has no receive CQ: its (empty) receive side uses the
		 * send CQ, so the data path never meets a NULL one. */
		qp->rcq = has_recv_side(attr) ? to_svcq(attr->recv_cq) : qp->scq;
		qp->srq = has_recv_side(attr) && attr->srq ? to_svsrq(attr->srq) : NULL;
	}
	qp->sq_sig_all = attr->sq_sig_all;
	qp->has_qp_ex = !!(attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
	qp->send_ops_flags = qp->has_qp_ex ? attr->send_ops_flags : 0;
	qp->attr.qp_state = IBV_QPS_RESET;
	qp->attr.cap = attr->cap;

	struct ibv_qp *ib = &qp->ibv.qp_base;

	ib->qp_type = attr->qp_type;
	ib->context = context;
	ib->qp_context = attr->qp_context;
	ib->pd = qp->pd ? attr->pd : NULL;
	ib->send_cq = qp->scq ? attr->send_cq : NULL;
	ib->recv_cq = has_recv_side(attr) ? attr->recv_cq : NULL;
	ib->srq = qp->srq ? attr->srq : NULL;
	/* From here peers can attach (the wire gives the QP its number): everything they
	 * read is set above. */
	far = sv_wire_far_for_qp(attr->qp_type, &qp->far_local);
	err = -sv_qp_data_init(qp, sv_wire_for_qp(attr->qp_type), far);
	if (err)
		goto err_rq;
	err = -sv_engine_add_qp(qp);
	if (err)
		goto err_data;
	sv_wire_qp_created(qp);
	ib->state = IBV_QPS_RESET;
	pthread_mutex_init(&ib->mutex, NULL);
	pthread_cond_init(&ib->cond, NULL);
	sv_verbs_qp_ex_init(qp);
	sv_qp_data_publish(qp);
	if (qp->scq && (sv_cq_attach_qp(qp->scq, qp) ||
			(qp->rcq != qp->scq && sv_cq_attach_qp(qp->rcq, qp)))) {
		sv_cq_detach_qp(qp->scq, qp);
		sv_engine_remove_qp(qp);
		err = ENOMEM;
		goto err_data;
	}

	if (qp->xrcd) {
		if (sv_xrc_domain_add_target(qp->xrcd->dom, qp)) {
			sv_engine_remove_qp(qp);
			err = ENOMEM;
			goto err_data;
		}
		atomic_fetch_add(&qp->xrcd->usecnt, 1);
	} else {
		atomic_fetch_add(&qp->pd->usecnt, 1);
		atomic_fetch_add(&qp->scq->usecnt, 1);
		atomic_fetch_add(&qp->rcq->usecnt, 1);
	}
	if (qp->srq)
		atomic_fetch_add(&qp->srq->usecnt, 1);
	sv_dbg("qp %u created (type %d)", ib->qp_num, attr->qp_type);
	return ib;

err_data:
	sv_qp_data_fini(qp);
err_rq:
	sv_wq_destroy(&qp->rq);
err_sq:
	sv_wq_destroy(&qp->sq);
err_free:
	free(qp);
err_count:
	atomic_fetch_sub(&ctx->n_qp, 1);
	return sv_fail_null(err);
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init_attr)
{
	struct ibv_qp_init_attr_ex attr;
	struct ibv_qp *qp;

	if (!pd || !init_attr)
		return sv_fail_null(EINVAL);
	memset(&attr, 0, sizeof(attr));
	attr.qp_context = init_attr->qp_context;
	attr.send_cq = init_attr->send_cq;
	attr.recv_cq = init_attr->recv_cq;
	attr.srq = init_attr->srq;
	attr.cap = init_attr->cap;
	attr.qp_type = init_attr->qp_type;
	attr.sq_sig_all = init_attr->sq_sig_all;
	attr.comp_mask = IBV_QP_INIT_ATTR_PD;
	attr.pd = pd;
	qp = sv_verbs_create_qp_ex(pd->context, &attr);
	if (qp)
		init_attr->cap = attr.cap; /* the capacities granted */
	return qp;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	/* As rdma-core: only a QP created with send_ops_flags has the ibv_wr_* interface. */
	return qp && to_svqp(qp)->has_qp_ex ? &to_svqp(qp)->ibv : NULL;
}

/* --- modify ----------------------------------------------------------------------------- */

static int check_ah_attr(struct sv_context *ctx, const struct ibv_ah_attr *ah)
{
	if (ah->port_num != SV_PORT_NUM || ah->sl > 15)
		return EINVAL;
	if (ah->is_global) {
		if (!sv_gid_index_valid(ctx, ah->grh.sgid_index))
			return EINVAL;
	} else if (ah->dlid == 0) {
		/* Without a GRH the LID is the only address. */
		return EINVAL;
	}
	return 0;
}

/* Value checks for the attributes present in @mask (the table has checked the mask). */
static int check_attr_values(struct sv_qp *qp, const struct ibv_qp_attr *attr, int mask)
{
	struct sv_context *ctx = to_svctx(qp->ibv.qp_base.context);

	if ((mask & IBV_QP_PORT) && attr->port_num != SV_PORT_NUM)
		return EINVAL;
	if ((mask & IBV_QP_PKEY_INDEX) &&
	    (attr->pkey_index >= SV_PKEY_TBL_LEN || attr->pkey_index >= ctx->host.n_pkeys))
		return EINVAL;
	if ((mask & IBV_QP_ACCESS_FLAGS) && (attr->qp_access_flags & ~(unsigned int)SV_QP_ACCESS))
		return EINVAL;
	if ((mask & IBV_QP_PATH_MTU) &&
	    (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096))
		return EINVAL;
	if ((mask & IBV_QP_AV) && check_ah_attr(ctx, &attr->ah_attr))
		return EINVAL;
	if ((mask & IBV_QP_ALT_PATH) &&
	    (check_ah_attr(ctx, &attr->alt_ah_attr) || attr->alt_port_num != SV_PORT_NUM ||
	     attr->alt_pkey_index >= SV_PKEY_TBL_LEN || attr->alt_timeout > 31))
		return EINVAL;
	if ((mask & IBV_QP_DEST_QPN) && attr->dest_qp_num > 0xffffff)
		return EINVAL;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > SV_MAX_RD_ATOM)
		return EINVAL;
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > SV_MAX_RD_ATOM)
		return EINVAL;
	if ((mask & IBV_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31)
		return EINVAL;
	if ((mask & IBV_QP_TIMEOUT) && attr->timeout > 31)
		return EINVAL;
	if ((mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7)
		return EINVAL;
	if ((mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7)
		return EINVAL;
	if ((mask & IBV_QP_PATH_MIG_STATE) && attr->path_mig_state > IBV_MIG_ARMED)
		return EINVAL;
	return 0;
}

static void apply_attr(struct sv_qp *qp, const struct ibv_qp_attr *attr, int mask)
{
	struct ibv_qp_attr *a = &qp->attr;

	if (mask & IBV_QP_PKEY_INDEX)
		a->pkey_index = attr->pkey_index;
	if (mask & IBV_QP_PORT)
		a->port_num = attr->port_num;
	if (mask & IBV_QP_QKEY)
		a->qkey = attr->qkey;
	if (mask & IBV_QP_ACCESS_FLAGS)
		a->qp_access_flags = attr->qp_access_flags;
	if (mask & IBV_QP_AV)
		a->ah_attr = attr->ah_attr;
	if (mask & IBV_QP_PATH_MTU)
		a->path_mtu = attr->path_mtu;
	if (mask & IBV_QP_DEST_QPN)
		a->dest_qp_num = attr->dest_qp_num;
	if (mask & IBV_QP_RQ_PSN)
		a->rq_psn = attr->rq_psn & 0xffffff; /* PSNs are 24 bits (IBA 9.7.1) */
	if (mask & IBV_QP_SQ_PSN)
		a->sq_psn = attr->sq_psn & 0xffffff;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		a->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		a->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		a->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IBV_QP_TIMEOUT)
		a->timeout = attr->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		a->retry_cnt = attr->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		a->rnr_retry = attr->rnr_retry;
	if (mask & IBV_QP_ALT_PATH) {
		a->alt_ah_attr = attr->alt_ah_attr;
		a->alt_pkey_index = attr->alt_pkey_index;
		a->alt_port_num = attr->alt_port_num;
		a->alt_timeout = attr->alt_timeout;
	}
	if (mask & IBV_QP_PATH_MIG_STATE)
		a->path_mig_state = attr->path_mig_state;
	if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY)
		a->en_sqd_async_notify = attr->en_sqd_async_notify;
}

int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask)
{
	enum ibv_qp_state cur, next;
	struct sv_qp *qp;
	int err = 0;

	if (!ibqp || !attr)
		return EINVAL;
	/* uverbs takes attributes up to IBV_QP_DEST_QPN; anything above is EOPNOTSUPP
	 * (IBV_QP_RATE_LIMIT is for raw packet QPs, which softverbs does not offer). */
	if (attr_mask & ~((IBV_QP_DEST_QPN << 1) - 1))
		return EOPNOTSUPP;
	/* uverbs drops what an XRC end has no use for before the table sees the mask
	 * (modify_qp_mask): an initiator has no responder, a target no requester. */
	if (ibqp->qp_type == IBV_QPT_XRC_SEND)
		attr_mask &= ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	else if (ibqp->qp_type == IBV_QPT_XRC_RECV)
		attr_mask &= ~(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
	qp = to_svqp(ibqp);
	pthread_mutex_lock(&qp->lock);
	/* An error the data path raised and nobody settled yet happened before this call:
	 * a move to RESET forgets it, anything else sees the QP in Error first. */
	if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET)
		atomic_store(&qp->err_event, -1);
	else
		sv_qp_settle_locked(qp);
	cur = qp->attr.qp_state;
	if ((attr_mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur)
		err = EINVAL;
	next = (attr_mask & IBV_QP_STATE) ? attr->qp_state : cur;
	if (!err && (unsigned int)next > IBV_QPS_ERR)
		err = EINVAL;
	if (!err && !sv_qp_transition_ok(ibqp->qp_type, cur, next, attr_mask))
		err = EINVAL;
	if (!err)
		err = check_attr_values(qp, attr, attr_mask);
	if (!err) {
		apply_attr(qp, attr, attr_mask);
		/* Where the peer is decides the wire (shm on this host, iWARP on another). */
		if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR)
			(void)sv_qp_rewire(qp, sv_wire_for_peer(qp));
		sv_qp_set_state(qp, next);
		if (attr_mask & IBV_QP_STATE)
			ibqp->state = next;
		sv_qp_data_state(qp, cur, next);
		sv_dbg("qp %u %s -> %s", ibqp->qp_num, sv_qp_state_name[cur], sv_qp_state_name[next]);
	} else {
		sv_dbg("qp %u %s -> %s refused (mask 0x%x)", ibqp->qp_num, sv_qp_state_name[cur],
		       (unsigned int)next <= IBV_QPS_ERR ? sv_qp_state_name[next] : "?",
		       (unsigned int)attr_mask);
	}
	pthread_mutex_unlock(&qp->lock);
	/* A new state, maybe a new wire or peer: the progress thread looks at the QP. */
	if (!err)
		sv_engine_wake_qp(qp);
	return err;
}

int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	struct sv_qp *qp;

	(void)attr_mask; /* everything is cheap to report */
	if (!ibqp || !attr || !init_attr)
		return EINVAL;
	qp = to_svqp(ibqp);
	pthread_mutex_lock(&qp->lock);
	/* An error the data path found (its error completion may be in the caller's hands
	 * already) is entered first: the state reported is the one after it. */
	sv_qp_settle_locked(qp);
	*attr = qp->attr;
	attr->cur_qp_state = qp->attr.qp_state;
	attr->cap = qp->cap;
	attr->sq_draining = 0;
	memset(init_attr, 0, sizeof(*init_attr));
	init_attr->qp_context = ibqp->qp_context;
	init_attr->send_cq = ibqp->send_cq;
	init_attr->recv_cq = ibqp->recv_cq;
	init_attr->srq = ibqp->srq;
	init_attr->cap = qp->cap;
	init_attr->qp_type = ibqp->qp_type;
	init_attr->sq_sig_all = qp->sq_sig_all;
	ibqp->state = qp->attr.qp_state;
	pthread_mutex_unlock(&qp->lock);
	return 0;
}

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)op;
	if (!qp || flags)
		return 0;
	/* Data is written front to back: a poller that sees the last byte sees the rest. */
	return 1;
}

int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	struct sv_qp *qp;

	if (!ibqp)
		return EINVAL;
	qp = to_svqp(ibqp);
	/* ib_attach_mcast holds the QP (usecnt): detach first. */
	if (sv_mcast_count(qp))
		return EBUSY;
	sv_wait_events_acked(&ibqp->mutex, &ibqp->cond, &ibqp->events_completed,
			     &qp->events_reported);
	/* Nobody polls or progresses the QP any more, then peers learn that it left. */
	if (qp->scq) {
		sv_cq_detach_qp(qp->scq, qp);
		if (qp->rcq != qp->scq)
			sv_cq_detach_qp(qp->rcq, qp);
	}
	if (qp->xrcd)
		sv_xrc_domain_remove_target(qp->xrcd->dom, qp);
	sv_engine_remove_qp(qp);
	sv_qp_data_fini(qp);
	sv_async_forget(to_svctx(ibqp->context), ibqp);
	if (qp->xrcd) {
		atomic_fetch_sub(&qp->xrcd->usecnt, 1);
	} else {
		sv_cq_clean(qp->scq, ibqp->qp_num);
		if (qp->rcq != qp->scq)
			sv_cq_clean(qp->rcq, ibqp->qp_num);
		atomic_fetch_sub(&qp->pd->usecnt, 1);
		atomic_fetch_sub(&qp->scq->usecnt, 1);
		atomic_fetch_sub(&qp->rcq->usecnt, 1);
	}
	if (qp->srq)
		atomic_fetch_sub(&qp->srq->usecnt, 1);
	atomic_fetch_sub(&to_svctx(ibqp->context)->n_qp, 1);
	sv_wq_destroy(&qp->sq);
	sv_wq_destroy(&qp->rq);
	pthread_mutex_destroy(&qp->lock);
	pthread_mutex_destroy(&ibqp->mutex);
	pthread_cond_destroy(&ibqp->cond);
	free(qp);
	return 0;
}
