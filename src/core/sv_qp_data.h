/*
 * A QP's data path, as the verbs layer and the progress engine see it: set-up with a
 * wire, state changes and their side effects, transmit, progress, errors.
 * The locks and their order: docs/architecture.md, "Lock order".
 */
#ifndef SV_QP_DATA_H
#define SV_QP_DATA_H

#include <stdbool.h>

#include "core/sv_obj.h"

/* Sets the QP up on @wire: its QPN (into ibv.qp_num) and the wire's state. */
int sv_qp_data_init(struct sv_qp *qp, const struct sv_wire_ops *wire,
		     const struct sv_wire_ops *far);
void sv_qp_data_fini(struct sv_qp *qp);
/* Moves @qp (RESET or INIT, qp->lock held, no peer attached) to wire @to, keeping its
 * number: where the peer is decides the wire (src/wire/sv_wires.c). 0, or -errno with
 * the QP on its old wire. */
int sv_qp_rewire(struct sv_qp *qp, const struct sv_wire_ops *to);

/*
 * The state moved (caller holds qp->lock; the state is already set): publish it to
 * peers, connect at RTR, disconnect at RESET and ERR.
 */
void sv_qp_data_state(struct sv_qp *qp, enum ibv_qp_state cur, enum ibv_qp_state next);
/* Attributes peers read changed (access flags, Q_Key, PD, RNR timer). */
void sv_qp_data_publish(struct sv_qp *qp);

/* Transmits what it can of the send queue. Caller holds sq.lock. */
void sv_qp_tx_locked(struct sv_qp *qp);
/* Does what a transmit waits for that must not hold a lock (attaching to a peer,
 * listing a multicast group's members), then transmits. Call with no lock held. */
void sv_qp_tx_connect(struct sv_qp *qp);
/* After transmitting under sq.lock, with no lock held: the system calls the wire put off
 * until the lock was dropped (a wake-up of a sleeping peer). */
static inline void sv_qp_tx_done(struct sv_qp *qp)
{
	if (qp->wire->flush)
		qp->wire->flush(qp);
}

/* Under sq.lock: whether a transmit waits for sv_qp_tx_connect. */
static inline bool sv_qp_tx_wants_connect(const struct sv_qp *qp)
{
	return qp->want_connect || qp->want_members;
}
/* A receive was posted: true if a message waits for one (the caller wakes the progress
 * thread: sv_engine_kick). */
bool sv_qp_recv_awaited(struct sv_qp *qp);

/* Moves the QP's work (what arrived, blocked transmits, timers). Returns how much was done. */
int sv_qp_progress(struct sv_qp *qp);

/*
 * Errors the data path finds are entered later, with qp->lock (sv_qp_settle): err_event
 * holds SV_ERR_NONE, or what to enter: ERR reported only by completions (SV_ERR_QUIET),
 * SQ Error (SV_ERR_SQE: a UC or UD send error), or ERR with an async event
 * (SV_ERR_EVENT(type)).
 */
#define SV_ERR_NONE (-1)
#define SV_ERR_QUIET 1
#define SV_ERR_SQE 2
#define SV_ERR_EVENT(ev) (0x10000 | (int)(ev))

/* Asks for @err once the locks are released (the first error asked for wins). */
static inline void sv_qp_fail(struct sv_qp *qp, int err)
{
	int none = SV_ERR_NONE;

	atomic_compare_exchange_strong(&qp->err_event, &none, err);
}

/* Enters ERR if the data path asked for it (call with no QP lock held; if qp->lock is
 * busy the error stays pending for a later call). */
void sv_qp_settle(struct sv_qp *qp);
/* The same, with qp->lock held. */
void sv_qp_settle_locked(struct sv_qp *qp);
/* UD @qp is the process's QP1 for the IB CM (@on), or no more: the MADs to QP1 that
 * are this process's come to it, and its datagrams go from QP 1. 0, -EINVAL (not UD),
 * -ENODEV (no wire to other hosts), -EBUSY (another QP is). */
int sv_qp_set_gsi(struct sv_qp *qp, bool on);
/* Through QP1 @qp, its process listens on IB CM service @service_id (@on) or no more:
 * 0, -ENODEV (@qp is not QP1), -EADDRINUSE, -ENOSPC. */
int sv_qp_cm_listen(struct sv_qp *qp, uint64_t service_id, bool on);

/* Takes sq.lock once no thread copies for the send queue without it (tx_claimed): what
 * the copy uses (the wire's peer) may then change. */
void sv_qp_sq_lock_unclaimed(struct sv_qp *qp);

/* State plumbing shared with the verbs layer. */
void sv_qp_set_state(struct sv_qp *qp, enum ibv_qp_state state);
void sv_qp_flush_sq_locked(struct sv_qp *qp); /* caller holds sq.lock */
void sv_qp_flush_rq_locked(struct sv_qp *qp); /* caller holds rq.lock */

/* The progress thread before sleeping: true if nothing is left to do (@assist: a
 * wire's help for a peer counts, the thread would give it). */
bool sv_qp_arm(struct sv_qp *qp, bool assist);
/* The progress thread leaves @qp to the application's polls: the wires stop watching
 * what those polls read (sv_wire_ops.park). */
void sv_qp_park(struct sv_qp *qp);
/* Work that waits for time to pass (RNR retries, a blocked transmit). */
bool sv_qp_needs_timer(struct sv_qp *qp);

/* poll_cq: moves the work of every QP that completes into @cq. True if it left one's
 * transmit waiting for room (the caller tells the progress thread: sv_engine_blocked). */
bool sv_cq_progress(struct sv_cq *cq);
/* Adds to @fds (holding *@n of @max) the descriptors the QPs of @cq wait on (their
 * wires' wait_fd), each once. */
void sv_cq_wait_fds(struct sv_cq *cq, int *fds, int *n, int max);

#endif
