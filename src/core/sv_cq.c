#include "core/sv_cq.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/sv_wire.h"
#include "util/sv_time.h"

static uint32_t ring_size_for(uint32_t cqe)
{
	uint32_t p = 1;

	while (p < cqe + 1)
		p <<= 1;
	return p;
}

int sv_cq_init(struct sv_cq *cq, uint32_t cqe)
{
	cq->size = ring_size_for(cqe);
	cq->ring = calloc(cq->size, sizeof(*cq->ring));
	if (!cq->ring)
		return -ENOMEM;
	cq->cqe = cqe;
	sv_cq_set_idx(&cq->head, 0);
	sv_cq_set_idx(&cq->tail, 0);
	sv_spin_init(&cq->lock);
	return 0;
}

void sv_cq_fini(struct sv_cq *cq)
{
	free(cq->ring);
	cq->ring = NULL;
}

int sv_cq_push(struct sv_cq *cq, const struct ibv_wc *wc, bool solicited)
{
	struct sv_comp_channel *notify = NULL;
	bool overrun = false;
	struct sv_cqe *e;
	uint32_t head;

	sv_spin_lock(&cq->lock);
	head = sv_cq_idx(&cq->head);
	if (head - sv_cq_idx(&cq->tail) >= cq->cqe) {
		overrun = !cq->overflowed;
		cq->overflowed = 1;
		sv_spin_unlock(&cq->lock);
		if (overrun)
			sv_async_raise(to_svctx(cq->ibv.context), IBV_EVENT_CQ_ERR, cq);
		return -ENOSPC;
	}
	e = &cq->ring[head & (cq->size - 1)];
	e->wc = *wc;
	if (cq->wc_flags & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK))
		e->ts = sv_now_ns();
	sv_cq_set_idx(&cq->head, head + 1);
	/* IBA 11.4.2.2: a solicited-only arm fires on solicited and on error completions. */
	if (cq->armed == 1 || (cq->armed == 2 && (solicited || wc->status != IBV_WC_SUCCESS))) {
		cq->armed = 0;
		notify = cq->chan;
	}
	sv_spin_unlock(&cq->lock);
	if (notify)
		sv_chan_notify(notify, cq);
	return 0;
}

int sv_cq_poll(struct sv_cq *cq, int n, struct ibv_wc *wc)
{
	uint32_t tail, head;
	int i = 0;

	sv_spin_lock(&cq->lock);
	tail = sv_cq_idx(&cq->tail);
	head = sv_cq_idx(&cq->head);
	for (; i < n && tail != head; i++, tail++)
		wc[i] = cq->ring[tail & (cq->size - 1)].wc;
	sv_cq_set_idx(&cq->tail, tail);
	sv_spin_unlock(&cq->lock);
	return i;
}

bool sv_cq_waiting_for(struct sv_qp *qp)
{
	return (qp->scq && !sv_cq_empty(qp->scq)) || (qp->rcq && !sv_cq_empty(qp->rcq));
}

void sv_cq_arm(struct sv_cq *cq, int solicited_only)
{
	sv_spin_lock(&cq->lock);
	/* An arm for any completion is not narrowed by a later solicited-only arm. */
	if (cq->armed != 1)
		cq->armed = solicited_only ? 2 : 1;
	sv_spin_unlock(&cq->lock);
}

void sv_cq_clean(struct sv_cq *cq, uint32_t qp_num)
{
	uint32_t keep, head;

	sv_spin_lock(&cq->lock);
	keep = sv_cq_idx(&cq->tail);
	head = sv_cq_idx(&cq->head);
	for (uint32_t i = keep; i != head; i++) {
		struct sv_cqe *e = &cq->ring[i & (cq->size - 1)];

		if (e->wc.qp_num == qp_num)
			continue;
		if (keep != i)
			cq->ring[keep & (cq->size - 1)] = *e;
		keep++;
	}
	sv_cq_set_idx(&cq->head, keep);
	sv_spin_unlock(&cq->lock);
}

int sv_cq_resize(struct sv_cq *cq, uint32_t cqe)
{
	uint32_t size = ring_size_for(cqe);
	struct sv_cqe *ring = calloc(size, sizeof(*ring)), *old;
	uint32_t n, tail;

	if (!ring)
		return -ENOMEM;
	sv_spin_lock(&cq->lock);
	tail = sv_cq_idx(&cq->tail);
	n = sv_cq_idx(&cq->head) - tail;
	if (n > cqe) {
		sv_spin_unlock(&cq->lock);
		free(ring);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < n; i++)
		ring[i] = cq->ring[(tail + i) & (cq->size - 1)];
	old = cq->ring;
	cq->ring = ring;
	cq->size = size;
	cq->cqe = cqe;
	sv_cq_set_idx(&cq->tail, 0);
	sv_cq_set_idx(&cq->head, n);
	cq->overflowed = 0;
	sv_spin_unlock(&cq->lock);
	free(old);
	return 0;
}

/* Puts @cq at the back of the channel's queue. Caller holds chan->lock. */
static void chan_enqueue(struct sv_comp_channel *chan, struct sv_cq *cq)
{
	cq->chan_queued = 1;
	cq->chan_next = NULL;
	if (chan->tail)
		chan->tail->chan_next = cq;
	else
		chan->head = cq;
	chan->tail = cq;
}

void sv_chan_notify(struct sv_comp_channel *chan, struct sv_cq *cq)
{
	uint64_t one = 1;

	pthread_mutex_lock(&chan->lock);
	cq->chan_pending++;
	if (!cq->chan_queued)
		chan_enqueue(chan, cq);
	/* eventfd in semaphore mode: one count per event, one read takes one. */
	if (write(chan->ibv.fd, &one, sizeof(one)) != sizeof(one))
		abort(); /* only an overflow of 2^64-1 events could fail */
	pthread_mutex_unlock(&chan->lock);
}

struct sv_cq *sv_chan_take(struct sv_comp_channel *chan)
{
	struct sv_cq *cq;

	pthread_mutex_lock(&chan->lock);
	cq = chan->head;
	if (cq) {
		cq->chan_pending--;
		chan->head = cq->chan_next;
		if (!chan->head)
			chan->tail = NULL;
		cq->chan_queued = 0;
		/* More events of this CQ: it goes to the back, after the others'. */
		if (cq->chan_pending)
			chan_enqueue(chan, cq);
	}
	pthread_mutex_unlock(&chan->lock);
	return cq;
}

void sv_chan_forget(struct sv_comp_channel *chan, struct sv_cq *cq)
{
	uint64_t v;

	pthread_mutex_lock(&chan->lock);
	if (cq->chan_queued) {
		struct sv_cq **pp = &chan->head, *prev = NULL;

		while (*pp && *pp != cq) {
			prev = *pp;
			pp = &(*pp)->chan_next;
		}
		if (*pp) {
			*pp = cq->chan_next;
			if (chan->tail == cq)
				chan->tail = prev;
		}
		cq->chan_queued = 0;
	}
	/* Take back the counts this CQ put on the eventfd, so poll() stops waking. */
	for (; cq->chan_pending; cq->chan_pending--) {
		struct pollfd pfd = { .fd = chan->ibv.fd, .events = POLLIN };

		/* Never block here: another thread may have taken the count already. */
		if (poll(&pfd, 1, 0) != 1 || read(chan->ibv.fd, &v, sizeof(v)) != sizeof(v))
			break;
	}
	pthread_mutex_unlock(&chan->lock);
}

/* --- the QPs whose work poll_cq moves ---------------------------------------------------- */

int sv_cq_attach_qp(struct sv_cq *cq, struct sv_qp *qp)
{
	int err = 0;

	sv_spin_lock(&cq->qps_lock);
	if (cq->n_qps == cq->cap_qps) {
		int cap = cq->cap_qps ? 2 * cq->cap_qps : 4;
		struct sv_qp **q = realloc(cq->qps, (size_t)cap * sizeof(*q));

		if (q) {
			cq->qps = q;
			cq->cap_qps = cap;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err)
		cq->qps[cq->n_qps++] = qp;
	sv_spin_unlock(&cq->qps_lock);
	return err;
}

void sv_cq_detach_qp(struct sv_cq *cq, struct sv_qp *qp)
{
	sv_spin_lock(&cq->qps_lock);
	for (int i = 0; i < cq->n_qps; i++) {
		if (cq->qps[i] == qp) {
			cq->qps[i] = cq->qps[--cq->n_qps];
			break;
		}
	}
	sv_spin_unlock(&cq->qps_lock);
}
