/*
 * Reading events: rdma_get_cm_event, the work reading an event does (the reply moves the
 * QP to RTS and sends the RTU, a join attaches the QP, a reject moves it to ERROR), the
 * ack, and the wait of synchronous ids.
 */
#include "cma.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>

int cma_send_rtu(struct cma_id *id)
{
	return cma_send_all(id->fd, CMA_RTU, CMA_RTU_LEN);
}

/* Under cma_lock, in the thread that read @e. */
static void event_process(struct cma_event *e)
{
	struct cma_id *id = e->owner;
	int err;

	switch (e->work) {
	case CMA_WORK_JOIN:
		err = cma_mc_attach(id, &e->mgid);
		if (err) {
			e->ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
			e->ev.status = err;
		}
		break;
	case CMA_WORK_QP_ERROR:
		cma_qp_to_error(id);
		break;
	case CMA_WORK_REPLY:
		if (id->state != CMA_REPLIED)
			break;
		if (!id->id.qp && !id->iwarp) {
			/* The application drives its own QP: it calls rdma_establish. */
			id->state = CMA_RESPONSE;
			break;
		}
		if (id->iwarp) {
			/* The QP takes the stream: no RTU on iWARP, FPDUs come next. */
			err = cma_qp_adopt(id);
		} else {
			err = id->peer_closed ? -ECONNRESET : cma_qp_to_rts(id);
			if (!err)
				err = cma_send_rtu(id);
		}
		if (err) {
			cma_close_fd(id);
			cma_qp_to_error(id);
			id->state = CMA_ERROR;
			e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
			e->ev.status = err;
			break;
		}
		id->state = CMA_CONNECTED;
		e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
		break;
	default:
		break;
	}
	e->work = CMA_WORK_NONE;
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct cma_channel *c = (struct cma_channel *)channel;
	struct cma_event *e = NULL;
	int err = 0;

	if (!c || !event)
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	if (c->dead) {
		pthread_mutex_unlock(&cma_lock);
		return fail(EBADF);
	}
	c->readers++;
	pthread_mutex_unlock(&cma_lock);
	for (;;) {
		struct pollfd pfd = { .fd = c->ch.fd, .events = POLLIN };
		int flags;

		/* Wait (unless the application made the fd non-blocking) without taking a
		 * count: counts are taken with the event, under the lock. */
		flags = fcntl(c->ch.fd, F_GETFL);
		if (flags < 0 || (poll(&pfd, 1, flags & O_NONBLOCK ? 0 : -1) < 0 && errno != EINTR)) {
			err = errno;
			pthread_mutex_lock(&cma_lock);
			break;
		}
		pthread_mutex_lock(&cma_lock);
		if (c->dead) {
			err = EBADF;
			break;
		}
		e = c->head;
		if (e) {
			cma_channel_unlink(c, e);
			e->owner->events_out++;
			if (e->child)
				e->child->events_out++;
			event_process(e);
			break;
		}
		pthread_mutex_unlock(&cma_lock);
		if (flags & O_NONBLOCK) {
			pthread_mutex_lock(&cma_lock);
			err = EAGAIN;
			break;
		}
	}
	/* Under cma_lock here. */
	if (--c->readers == 0 && c->orphan)
		free(c);
	pthread_mutex_unlock(&cma_lock);
	if (!e)
		return fail(err ? err : EAGAIN);
	*event = &e->ev;
	return 0;
}

/* Frees @e and, at their last event, the ids it kept (under cma_lock). */
void cma_event_ack_locked(struct cma_event *e)
{
	struct cma_id *owner = e->owner, *child = e->child;

	free(e);
	if (child && --child->events_out == 0 && child->destroyed)
		cma_id_free_locked(child);
	if (--owner->events_out == 0 && owner->destroyed)
		cma_id_free_locked(owner);
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	cma_event_ack_locked((struct cma_event *)event);
	pthread_mutex_unlock(&cma_lock);
	return 0;
}

/* For a synchronous id: waits for its next event and keeps it in id->event. Like
 * rdma-core's, it judges by the status only, not the event's type: 0, or -1 with errno
 * ECONNREFUSED for a reject, else the status as an errno. */
int cma_wait_event(struct cma_id *id)
{
	struct rdma_cm_event *ev;
	int status;

	if (id->id.event) {
		rdma_ack_cm_event(id->id.event);
		id->id.event = NULL;
	}
	if (rdma_get_cm_event(&id->chan->ch, &ev))
		return -1;
	id->id.event = ev;
	status = ev->status;
	if (!status)
		return 0;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		return fail(ECONNREFUSED);
	return fail(status < 0 ? -status : status);
}
