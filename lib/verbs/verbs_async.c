/* Asynchronous events: ibv_get_async_event / ibv_ack_async_event. */
#include <stdlib.h>
#include <unistd.h>

#include "verbs.h"

enum sv_event_object { SV_EV_QP, SV_EV_CQ, SV_EV_SRQ, SV_EV_WQ, SV_EV_PORT };

static enum sv_event_object event_object(enum ibv_event_type type)
{
	switch (type) {
	case IBV_EVENT_CQ_ERR:
		return SV_EV_CQ;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return SV_EV_SRQ;
	case IBV_EVENT_WQ_FATAL:
		return SV_EV_WQ;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return SV_EV_QP;
	default:
		return SV_EV_PORT;
	}
}

/* Blocks on the async fd unless the caller made it non-blocking. 0, or -1 with errno. */
int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	struct sv_context *ctx;
	struct sv_async_event *e;
	uint64_t count;

	if (!context || !event) {
		errno = EINVAL;
		return -1;
	}
	ctx = to_svctx(context);
	if (read(context->async_fd, &count, sizeof(count)) != sizeof(count))
		return -1;
	pthread_mutex_lock(&ctx->lock);
	e = ctx->async_head;
	if (e) {
		ctx->async_head = e->next;
		if (!ctx->async_head)
			ctx->async_tail = NULL;
	}
	pthread_mutex_unlock(&ctx->lock);
	if (!e) {
		errno = EAGAIN;
		return -1;
	}
	*event = e->ev;
	free(e);

	/* Count what was handed out: destroying the object waits until it is acknowledged. */
	switch (event_object(event->event_type)) {
	case SV_EV_QP: {
		struct sv_qp *qp = to_svqp(event->element.qp);

		pthread_mutex_lock(&qp->ibv.qp_base.mutex);
		qp->events_reported++;
		pthread_mutex_unlock(&qp->ibv.qp_base.mutex);
		break;
	}
	case SV_EV_CQ: {
		struct sv_cq *cq = to_svcq(event->element.cq);

		pthread_mutex_lock(&cq->ibv.mutex);
		cq->async_events_reported++;
		pthread_mutex_unlock(&cq->ibv.mutex);
		break;
	}
	case SV_EV_SRQ: {
		struct sv_srq *srq = to_svsrq(event->element.srq);

		pthread_mutex_lock(&srq->ibv.mutex);
		srq->events_reported++;
		pthread_mutex_unlock(&srq->ibv.mutex);
		break;
	}
	default:
		break;
	}
	return 0;
}

static void ack_one(pthread_mutex_t *mutex, pthread_cond_t *cond, uint32_t *completed)
{
	pthread_mutex_lock(mutex);
	(*completed)++;
	pthread_cond_signal(cond);
	pthread_mutex_unlock(mutex);
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	if (!event)
		return;
	switch (event_object(event->event_type)) {
	case SV_EV_QP: {
		struct ibv_qp *qp = event->element.qp;

		ack_one(&qp->mutex, &qp->cond, &qp->events_completed);
		break;
	}
	case SV_EV_CQ: {
		struct ibv_cq *cq = event->element.cq;

		ack_one(&cq->mutex, &cq->cond, &cq->async_events_completed);
		break;
	}
	case SV_EV_SRQ: {
		struct ibv_srq *srq = event->element.srq;

		ack_one(&srq->mutex, &srq->cond, &srq->events_completed);
		break;
	}
	default:
		break;
	}
}

/*
 * rdma-core's destroy calls wait, without a bound, until every event they handed out
 * for the object was acknowledged: the application still holds a pointer to it.
 */
void sv_wait_events_acked(pthread_mutex_t *mutex, pthread_cond_t *cond,
			  const uint32_t *completed, const uint32_t *reported)
{
	pthread_mutex_lock(mutex);
	while (*completed != *reported)
		pthread_cond_wait(cond, mutex);
	pthread_mutex_unlock(mutex);
}
