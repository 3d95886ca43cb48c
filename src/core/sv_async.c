#include "core/sv_obj.h"

#include <poll.h>
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

void sv_async_forget(struct sv_context *ctx, void *object)
{
	struct sv_async_event **pp, *e;
	uint64_t v;

	pthread_mutex_lock(&ctx->lock);
	ctx->async_tail = NULL;
	for (pp = &ctx->async_head; (e = *pp);) {
		/* The element is a union of pointers (or a port number): compare the pointer. */
		if (e->ev.element.qp == object) {
			struct pollfd pfd = { .fd = ctx->vctx.context.async_fd, .events = POLLIN };

			*pp = e->next;
			free(e);
			/* Take back its count without ever blocking. */
			if (poll(&pfd, 1, 0) == 1)
				(void)!read(pfd.fd, &v, sizeof(v));
			continue;
		}
		ctx->async_tail = e;
		pp = &e->next;
	}
	pthread_mutex_unlock(&ctx->lock);
}
