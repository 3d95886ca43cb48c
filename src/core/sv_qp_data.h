/*
 * The data path of a QP on the shm wire: the requester (transmit and in-order
 * completion), the responder (the inbound fifo), and the moves between them and the
 * verbs layer. Locks: qp->lock (state) → rx_busy → sq.lock → CQ locks.
 */
#ifndef SV_QP_DATA_H
#define SV_QP_DATA_H

#include <stdbool.h>

#include "core/sv_obj.h"

int sv_qp_data_init(struct sv_qp *qp);
void sv_qp_data_fini(struct sv_qp *qp);

/*
 * The state moved (caller holds qp->lock; the state is already set): publish it to
 * peers, connect at RTR, disconnect at RESET and ERR.
 */
void sv_qp_data_state(struct sv_qp *qp, enum ibv_qp_state cur, enum ibv_qp_state next);
/* Attributes peers read changed (access flags, Q_Key, PD, RNR timer). */
void sv_qp_data_publish(struct sv_qp *qp);

/* Transmits what it can of the send queue. Caller holds sq.lock. */
void sv_qp_tx_locked(struct sv_qp *qp);
/* Attaches to the peer a transmit waits for, then transmits. Call with no lock held. */
void sv_qp_tx_connect(struct sv_qp *qp);
/* A receive was posted: a message waiting for one may go on. */
void sv_qp_recv_posted(struct sv_qp *qp);

/* Moves the QP's work (rx, blocked tx, timers). Returns how much was done. */
int sv_qp_progress(struct sv_qp *qp);
/* The progress thread helps with the large copy a requester offers on @qp's page
 * (copy assist, shm_assist.h): chunks copied. */
int sv_qp_assist(struct sv_qp *qp);
/* Enters ERR if the data path asked for it (call with no QP lock held; if qp->lock is
 * busy the error stays pending for a later call). */
void sv_qp_settle(struct sv_qp *qp);
/* The same, with qp->lock held. */
void sv_qp_settle_locked(struct sv_qp *qp);
/* err_event value for an error that completions report, with no async event. */
#define SV_ERR_NO_EVENT 0x7fff
/* err_event value for a UC/UD send error: the QP goes to SQE, not ERR. */
#define SV_ERR_TO_SQE 0x7ffe

/* State plumbing shared with the verbs layer. */
void sv_qp_set_state(struct sv_qp *qp, enum ibv_qp_state state);
void sv_qp_flush_sq_locked(struct sv_qp *qp); /* caller holds sq.lock */
void sv_qp_flush_rq_locked(struct sv_qp *qp); /* caller holds rq.lock */

/* The progress thread before sleeping: true if nothing is left to do (@assist: a
 * copy-assist job counts, the thread would help with it). */
bool sv_qp_arm(struct sv_qp *qp, bool assist);
void sv_qp_disarm(struct sv_qp *qp);
/* Work that waits for time to pass (RNR retries, a full peer fifo). */
bool sv_qp_needs_timer(struct sv_qp *qp);

/* The engine saw the connection to @peer_qpn end; @fatal if without goodbye. */
void sv_qp_peer_lost(struct sv_qp *qp, uint32_t peer_qpn, bool fatal);

/* poll_cq: moves the work of every QP that completes into @cq. */
void sv_cq_progress(struct sv_cq *cq);
int sv_cq_attach_qp(struct sv_cq *cq, struct sv_qp *qp);
void sv_cq_detach_qp(struct sv_cq *cq, struct sv_qp *qp);

#endif
