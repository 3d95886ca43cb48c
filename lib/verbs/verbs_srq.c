/* Shared receive queues. */
#include <stdlib.h>

#include "verbs.h"

struct ibv_srq *sv_verbs_create_srq_ex(struct ibv_context *context,
				       struct ibv_srq_init_attr_ex *attr)
{
	enum ibv_srq_type type = IBV_SRQT_BASIC;
	struct sv_context *ctx;
	struct sv_srq *srq;
	int err;

	if (!context || !attr)
		return sv_fail_null(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd ||
	    attr->pd->context != context)
		return sv_fail_null(EINVAL);
	if (attr->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE |
					  IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_XRCD))
		return sv_fail_null(EOPNOTSUPP);
	if (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)
		type = attr->srq_type;
	/* Tag-matching SRQs (IBV_SRQT_TM) are a vendor offload softverbs does not offer. */
	if (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC)
		return sv_fail_null(EOPNOTSUPP);
	/* An XRC SRQ belongs to a domain and completes into its own CQ (ib_create_srq). */
	if (type == IBV_SRQT_XRC &&
	    (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd ||
	     attr->xrcd->context != context || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) ||
	     !attr->cq || attr->cq->context != context))
		return sv_fail_null(EINVAL);
	if (attr->attr.max_wr < 1 || attr->attr.max_wr > SV_MAX_SRQ_WR ||
	    attr->attr.max_sge > SV_MAX_SRQ_SGE || attr->attr.srq_limit > attr->attr.max_wr)
		return sv_fail_null(EINVAL);
	ctx = to_svctx(context);
	if (atomic_fetch_add(&ctx->n_srq, 1) >= SV_MAX_SRQ) {
		err = ENOMEM;
		goto err_count;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq) {
		err = ENOMEM;
		goto err_count;
	}
	err = -sv_wq_init_recv(&srq->rq, attr->attr.max_wr, attr->attr.max_sge);
	if (err)
		goto err_free;
	srq->pd = to_svpd(attr->pd);
	srq->type = type;
	srq->srqn = sv_xrc_srq_number();
	srq->srq_limit = attr->attr.srq_limit;
	srq->ibv.context = context;
	srq->ibv.srq_context = attr->srq_context;
	srq->ibv.pd = attr->pd;
	pthread_mutex_init(&srq->ibv.mutex, NULL);
	pthread_cond_init(&srq->ibv.cond, NULL);
	if (type == IBV_SRQT_XRC) {
		srq->xrcd = to_svxrcd(attr->xrcd);
		srq->cq = to_svcq(attr->cq);
		err = -sv_xrc_domain_add_srq(srq->xrcd->dom, srq);
		if (err)
			goto err_wq;
		atomic_fetch_add(&srq->xrcd->usecnt, 1);
		atomic_fetch_add(&srq->cq->usecnt, 1);
	}
	atomic_fetch_add(&srq->pd->usecnt, 1);
	return &srq->ibv;

err_wq:
	pthread_mutex_destroy(&srq->ibv.mutex);
	pthread_cond_destroy(&srq->ibv.cond);
	sv_wq_destroy(&srq->rq);
err_free:
	free(srq);
err_count:
	atomic_fetch_sub(&ctx->n_srq, 1);
	return sv_fail_null(err);
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *init)
{
	struct ibv_srq_init_attr_ex attr = { 0 };

	if (!pd || !init)
		return sv_fail_null(EINVAL);
	attr.srq_context = init->srq_context;
	attr.attr = init->attr;
	attr.comp_mask = IBV_SRQ_INIT_ATTR_PD;
	attr.pd = pd;
	return sv_verbs_create_srq_ex(pd->context, &attr);
}

int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
	struct sv_srq *srq;
	int err = 0;

	if (!ibsrq || !attr || (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)))
		return EINVAL;
	srq = to_svsrq(ibsrq);
	sv_spin_lock(&srq->rq.lock);
	/* Resizing is not offered (the device does not report IBV_DEVICE_SRQ_RESIZE). */
	if (mask & IBV_SRQ_MAX_WR)
		err = EINVAL;
	if (!err && (mask & IBV_SRQ_LIMIT) && attr->srq_limit > srq->rq.max_wr)
		err = EINVAL;
	if (!err && (mask & IBV_SRQ_LIMIT))
		srq->srq_limit = attr->srq_limit; /* arms the limit event; 0 disarms */
	sv_spin_unlock(&srq->rq.lock);
	return err;
}

int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct sv_srq *srq;

	if (!ibsrq || !attr)
		return EINVAL;
	srq = to_svsrq(ibsrq);
	sv_spin_lock(&srq->rq.lock);
	attr->max_wr = srq->rq.max_wr;
	attr->max_sge = srq->rq.max_sge;
	attr->srq_limit = srq->srq_limit;
	sv_spin_unlock(&srq->rq.lock);
	return 0;
}

int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct sv_srq *srq;

	if (!ibsrq)
		return EINVAL;
	srq = to_svsrq(ibsrq);
	if (atomic_load(&srq->usecnt))
		return EBUSY;
	sv_wait_events_acked(&ibsrq->mutex, &ibsrq->cond, &ibsrq->events_completed,
			     &srq->events_reported);
	sv_async_forget(to_svctx(ibsrq->context), ibsrq);
	if (srq->xrcd) {
		/* Waits for a message being placed in it (sv_resp.c holds the domain). */
		sv_xrc_domain_remove_srq(srq->xrcd->dom, srq);
		atomic_fetch_sub(&srq->xrcd->usecnt, 1);
		atomic_fetch_sub(&srq->cq->usecnt, 1);
	}
	atomic_fetch_sub(&srq->pd->usecnt, 1);
	atomic_fetch_sub(&to_svctx(ibsrq->context)->n_srq, 1);
	sv_wq_destroy(&srq->rq);
	pthread_mutex_destroy(&ibsrq->mutex);
	pthread_cond_destroy(&ibsrq->cond);
	free(srq);
	return 0;
}
