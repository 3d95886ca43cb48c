/*
 * One IB CM connection's exchange (rv_cmx.h): a state machine with no I/O of its own.
 */
#include "wire/roce/rv_cmx.h"

#include <errno.h>
#include <string.h>

/* Sends @m: kept as the MAD sent again on a timeout or a duplicate; with a timer (the
 * peer's answer awaited) when @wait. */
static void send(struct rv_cmx *c, const struct rv_cm_msg *m, bool wait, uint64_t now,
		 struct rv_cmx_out *o)
{
	if (rv_cm_encode(m, c->last))
		return; /* (the caller's private data past its field: nothing goes) */
	c->has_last = true;
	memcpy(o->mad, c->last, RV_MAD_LEN);
	o->send = true;
	c->deadline = wait ? now + rv_cmx_wait_ns(c->timeout) : 0;
}

/* The last MAD again (a duplicate of what brought it, or a timeout). */
static void again(struct rv_cmx *c, struct rv_cmx_out *o)
{
	if (!c->has_last)
		return;
	memcpy(o->mad, c->last, RV_MAD_LEN);
	o->send = true;
}

static void to_timewait(struct rv_cmx *c, uint64_t now, struct rv_cmx_out *o)
{
	c->state = RV_CMX_TIMEWAIT;
	c->deadline = now + RV_CMX_TIMEWAIT_NS;
	o->event = RV_CMX_EV_DISCONNECTED;
}

/* A DREP for the peer's DREQ (sent again for each duplicate). */
static void drep(struct rv_cmx *c, uint64_t now, struct rv_cmx_out *o)
{
	struct rv_cm_msg m = { .attr = RV_CM_DREP, .tid = c->tid, .local_id = c->local_id,
			       .remote_id = c->remote_id };
	uint64_t deadline = c->deadline;

	send(c, &m, false, now, o);
	c->deadline = deadline;
}

int rv_cmx_connect(struct rv_cmx *c, const struct rv_cm_msg *req, uint64_t now,
		   struct rv_cmx_out *o)
{
	memset(o, 0, sizeof(*o));
	if (req->attr != RV_CM_REQ || c->state != RV_CMX_IDLE)
		return -EINVAL;
	c->active = true;
	c->local_id = req->local_id;
	c->tid = req->tid;
	c->timeout = req->remote_cm_timeout;
	c->retries = req->max_cm_retries;
	c->state = RV_CMX_REQ_SENT;
	send(c, req, true, now, o);
	return 0;
}

int rv_cmx_accept(struct rv_cmx *c, const struct rv_cm_msg *rep, uint64_t now,
		  struct rv_cmx_out *o)
{
	struct rv_cm_msg m = *rep;

	memset(o, 0, sizeof(*o));
	if (rep->attr != RV_CM_REP || c->state != RV_CMX_REQ_RCVD)
		return -EINVAL;
	m.remote_id = c->remote_id;
	m.tid = c->tid;
	c->local_id = m.local_id;
	c->state = RV_CMX_REP_SENT;
	send(c, &m, true, now, o);
	return 0;
}

int rv_cmx_reject(struct rv_cmx *c, uint16_t reason, const void *pd, uint8_t pd_len,
		  struct rv_cmx_out *o)
{
	struct rv_cm_msg m = { .attr = RV_CM_REJ, .tid = c->tid, .local_id = c->local_id,
			       .remote_id = c->remote_id, .msg = 0, .reason = reason };

	memset(o, 0, sizeof(*o));
	if (c->state != RV_CMX_REQ_RCVD || pd_len > rv_cm_private_max(RV_CM_REJ))
		return -EINVAL;
	m.private_len = pd_len;
	if (pd_len)
		memcpy(m.private_data, pd, pd_len);
	send(c, &m, false, 0, o);
	c->state = RV_CMX_CLOSED;
	return 0;
}

int rv_cmx_disconnect(struct rv_cmx *c, uint32_t remote_qpn, uint64_t now, struct rv_cmx_out *o)
{
	struct rv_cm_msg m = { .attr = RV_CM_DREQ, .tid = c->tid, .local_id = c->local_id,
			       .remote_id = c->remote_id, .qpn = remote_qpn };

	memset(o, 0, sizeof(*o));
	if (c->state != RV_CMX_ESTABLISHED)
		return -EINVAL;
	c->state = RV_CMX_DREQ_SENT;
	send(c, &m, true, now, o);
	return 0;
}

/* REQ_SENT: the passive side's answer. */
static void on_req_sent(struct rv_cmx *c, const struct rv_cm_msg *m, uint64_t now,
			struct rv_cmx_out *o)
{
	switch (m->attr) {
	case RV_CM_REP: {
		struct rv_cm_msg rtu = { .attr = RV_CM_RTU, .tid = c->tid, .local_id = c->local_id,
					 .remote_id = m->local_id };

		c->peer = *m;
		c->remote_id = m->local_id;
		c->state = RV_CMX_ESTABLISHED;
		send(c, &rtu, false, now, o); /* (kept: a duplicate REP gets it again) */
		o->event = RV_CMX_EV_ESTABLISHED;
		break;
	}
	case RV_CM_REJ:
		c->peer = *m;
		c->state = RV_CMX_CLOSED;
		c->deadline = 0;
		o->event = RV_CMX_EV_REJECTED;
		o->status = m->reason;
		break;
	case RV_CM_MRA:
		/* IBA 12.6.6: the REP comes later; wait as long as the MRA says. */
		if (m->msg == 0)
			c->deadline = now + rv_cmx_wait_ns(m->service_timeout) +
				      rv_cmx_wait_ns(c->timeout);
		break;
	default:
		break;
	}
}

int rv_cmx_on_mad(struct rv_cmx *c, const struct rv_cm_msg *m, uint64_t now,
		  struct rv_cmx_out *o)
{
	memset(o, 0, sizeof(*o));
	if (m->attr == RV_CM_REQ) {
		if (c->state == RV_CMX_IDLE && !c->active) {
			c->peer = *m;
			c->remote_id = m->local_id;
			c->tid = m->tid;
			c->timeout = m->local_cm_timeout; /* the REQ's sender answers within it */
			c->retries = m->max_cm_retries;
			c->state = RV_CMX_REQ_RCVD;
			o->event = RV_CMX_EV_REQUEST;
			return 0;
		}
		if (c->active || m->local_id != c->remote_id)
			return -ENOENT;
		if (c->state == RV_CMX_REP_SENT)
			again(c, o); /* the REP was lost: it goes again */
		return 0;
	}
	/* Every other message names us as its remote end (a REJ of a REQ may not know us:
	 * it names the REQ's local ID, which is ours too). */
	if (m->remote_id != c->local_id)
		return -ENOENT;
	if (c->state != RV_CMX_REQ_SENT && c->state != RV_CMX_IDLE && m->local_id != c->remote_id &&
	    !(m->attr == RV_CM_REJ && c->state == RV_CMX_REP_SENT))
		return -ENOENT;
	switch (c->state) {
	case RV_CMX_REQ_SENT:
		on_req_sent(c, m, now, o);
		break;
	case RV_CMX_REP_SENT:
		if (m->attr == RV_CM_RTU) {
			c->state = RV_CMX_ESTABLISHED;
			c->deadline = 0;
			o->event = RV_CMX_EV_ESTABLISHED;
		} else if (m->attr == RV_CM_REJ) {
			c->peer = *m;
			c->state = RV_CMX_CLOSED;
			c->deadline = 0;
			o->event = RV_CMX_EV_REJECTED;
			o->status = m->reason;
		} else if (m->attr == RV_CM_DREQ) {
			/* The RTU was lost and the peer is done already. */
			drep(c, now, o);
			to_timewait(c, now, o);
		}
		break;
	case RV_CMX_ESTABLISHED:
		if (m->attr == RV_CM_REP && c->active)
			again(c, o); /* our RTU was lost: it goes again */
		else if (m->attr == RV_CM_DREQ) {
			drep(c, now, o);
			to_timewait(c, now, o);
		}
		break;
	case RV_CMX_DREQ_SENT:
		if (m->attr == RV_CM_DREP) {
			to_timewait(c, now, o);
		} else if (m->attr == RV_CM_DREQ) { /* both at once */
			drep(c, now, o);
			to_timewait(c, now, o);
		}
		break;
	case RV_CMX_TIMEWAIT:
		if (m->attr == RV_CM_DREQ)
			drep(c, now, o); /* our DREP was lost */
		break;
	default:
		break;
	}
	return 0;
}

void rv_cmx_on_timer(struct rv_cmx *c, uint64_t now, struct rv_cmx_out *o)
{
	memset(o, 0, sizeof(*o));
	if (!c->deadline || now < c->deadline)
		return;
	switch (c->state) {
	case RV_CMX_REQ_SENT:
	case RV_CMX_REP_SENT:
	case RV_CMX_DREQ_SENT:
		if (c->retries) {
			c->retries--;
			again(c, o);
			c->deadline = now + rv_cmx_wait_ns(c->timeout);
			return;
		}
		if (c->state == RV_CMX_DREQ_SENT) {
			to_timewait(c, now, o); /* disconnected all the same */
			return;
		}
		{
			/* Nobody answered: the peer is told (a REJ, Timeout) in case it is
			 * there after all, and rdma_cm that it is unreachable. */
			struct rv_cm_msg rej = { .attr = RV_CM_REJ, .tid = c->tid,
						 .local_id = c->local_id, .remote_id = c->remote_id,
						 .msg = c->state == RV_CMX_REQ_SENT ? 0 : 1,
						 .reason = RV_CM_REJ_TIMEOUT };

			send(c, &rej, false, now, o);
			c->state = RV_CMX_CLOSED;
			o->event = RV_CMX_EV_UNREACHABLE;
			o->status = -ETIMEDOUT;
		}
		break;
	case RV_CMX_TIMEWAIT:
		c->state = RV_CMX_CLOSED;
		c->deadline = 0;
		o->event = RV_CMX_EV_TIMEWAIT_EXIT;
		break;
	default:
		c->deadline = 0;
		break;
	}
}
