/*
 * Completion queues: a ring of work completions per CQ, filled by whoever completes a
 * WR (the poller, the progress thread, a flush) and drained by poll_cq. Arming
 * (req_notify_cq) makes the next completion raise one event on the CQ's channel.
 */
#ifndef SV_CQ_H
#define SV_CQ_H

#include <stdatomic.h>
#include <stdbool.h>

#include "core/sv_obj.h"

int sv_cq_init(struct sv_cq *cq, uint32_t cqe);
void sv_cq_fini(struct sv_cq *cq);

/*
 * Adds one completion. A full CQ is an overrun: the completion is lost and the context
 * gets IBV_EVENT_CQ_ERR once (IBA 11.4.2.1: CQ overrun is an affiliated error).
 * @solicited: the completion is for a solicited message (SEND with SOLICITED).
 */
int sv_cq_push(struct sv_cq *cq, const struct ibv_wc *wc, bool solicited);

/* Takes up to @n completions. Returns how many. */
int sv_cq_poll(struct sv_cq *cq, int n, struct ibv_wc *wc);

/* The ring's indices: changed only under cq->lock; these relaxed accesses let
 * sv_cq_empty look without it. */
static inline uint32_t sv_cq_idx(const _Atomic uint32_t *i)
{
	return atomic_load_explicit(i, memory_order_relaxed);
}

static inline void sv_cq_set_idx(_Atomic uint32_t *i, uint32_t v)
{
	atomic_store_explicit(i, v, memory_order_relaxed);
}

/* Whether the CQ holds no completion, without its lock: a completion pushed meanwhile
 * shows at the next look (poll_cq moves the wire only when this says so). */
static inline bool sv_cq_empty(const struct sv_cq *cq)
{
	return sv_cq_idx(&cq->head) == sv_cq_idx(&cq->tail);
}

/* Arms the CQ: 1 for any completion, 2 for solicited (and error) completions only. */
void sv_cq_arm(struct sv_cq *cq, int solicited_only);

/* Removes every completion of @qp_num (destroy_qp / RESET). */
void sv_cq_clean(struct sv_cq *cq, uint32_t qp_num);

/* Changes the capacity; -EINVAL if the queued completions would not fit. */
int sv_cq_resize(struct sv_cq *cq, uint32_t cqe);

/* Completion channel: queue one event for @cq; its fd turns readable. */
void sv_chan_notify(struct sv_comp_channel *chan, struct sv_cq *cq);
/* Takes the oldest undelivered event; NULL if none. */
struct sv_cq *sv_chan_take(struct sv_comp_channel *chan);
/* Forgets every undelivered event of @cq (the CQ is being destroyed). */
void sv_chan_forget(struct sv_comp_channel *chan, struct sv_cq *cq);

/* The QPs whose work poll_cq moves (sv_cq_progress): 0 or -ENOMEM. */
int sv_cq_attach_qp(struct sv_cq *cq, struct sv_qp *qp);
void sv_cq_detach_qp(struct sv_cq *cq, struct sv_qp *qp);

#endif
