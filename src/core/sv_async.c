#include "core/sv_obj.h"

#include <stdlib.h>
#include <unistd.h>

#include "util/sv_log.h"

void sv_async_raise(struct sv_context *ctx, enum ibv_event_type type, void *object)
{
	struct sv_async_event *e = calloc(1, sizeof(*e));
	uint64_t one = 1;

	if (!e) {
		sv_err("async event %d lost: out of memory", (int)type);
		return;
	}
	e->ev.event_type = type;
	switch (type) {
	case IBV_EVENT_CQ_ERR:
		e->ev.element.cq = object;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		e->ev.element.srq = object;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		e->ev.element.port_num = SV_PORT_NUM;
		break;
	case IBV_EVENT_DEVICE_FATAL:
		break;
	default:
		e->ev.element.qp = object;
		break;
	}
	pthread_mutex_lock(&ctx->lock);
	if (ctx->async_tail)
		ctx->async_tail->next = e;
	else
		ctx->async_head = e;
	ctx->async_tail = e;
	/* eventfd in semaphore mode: one count per queued event. */
	if (write(ctx->vctx.context.async_fd, &one, sizeof(one)) != sizeof(one))
		sv_err("async fd write failed");
	pthread_mutex_unlock(&ctx->lock);
	sv_dbg("async event %d raised", (int)type);
}
