/* Shared receive queues. */
#include <stdlib.h>

#include "verbs.h"

struct ibv_srq *sv_verbs_create_srq_ex(struct ibv_context *context,
				       struct ibv_srq_init_attr_ex *attr)
{
	struct sv_context *ctx;
	struct sv_srq *srq;
	int err;

	if (!context || !attr)
		return sv_fail_null(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd ||
	    attr->pd->context != context)
		return sv_fail_null(EINVAL);
	if (attr->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE |
					  IBV_SRQ_INIT_ATTR_CQ))
		return sv_fail_null(EOPNOTSUPP);
	if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC)
		return sv_fail_null(EOPNOTSUPP);
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
	srq->srq_limit = attr->attr.srq_limit;
	srq->ibv.context = context;
	srq->ibv.srq_context = attr->srq_context;
	srq->ibv.pd = attr->pd;
	pthread_mutex_init(&srq->ibv.mutex, NULL);
	pthread_cond_init(&srq->ibv.cond, NULL);
	atomic_fetch_add(&srq->pd->usecnt, 1);
	return &srq->ibv;

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
	pthread_spin_unlock(&srq->rq.lock);
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
	pthread_spin_unlock(&srq->rq.lock);
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
	atomic_fetch_sub(&srq->pd->usecnt, 1);
	atomic_fetch_sub(&to_svctx(ibsrq->context)->n_srq, 1);
	sv_wq_destroy(&srq->rq);
	pthread_mutex_destroy(&ibsrq->mutex);
	pthread_cond_destroy(&ibsrq->cond);
	free(srq);
	return 0;
}
