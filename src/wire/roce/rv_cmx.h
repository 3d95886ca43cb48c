/*
 * One IB CM connection's exchange (IBA 12.9, as Linux's ib_cm runs it for rdma_cm): the
 * states, what a MAD, the application or the time does to them, and what the connection
 * asks for in return — a MAD to send, an event for rdma_cm. Nothing here sends, sleeps or
 * locks: the caller hands in the time and the MADs it received, sends what comes out,
 * and calls rv_cmx_on_timer at rv_cmx.deadline. (Issue 26: the layer under rdma_cm's
 * IB CM protocol; QP1's transport is the UDP wire's, rv_cm.h has the layouts.)
 *
 * Timeouts are the IBA's: 4.096 µs × 2^timeout, from the REQ's remote and local CM
 * response timeouts (how long each side takes to answer), sent again up to the REQ's
 * Max CM Retries times; an MRA stretches the wait to the time it names. A duplicate of
 * the MAD that brought a state is answered again with what was sent then; a MAD whose
 * communication IDs are not this connection's is not its (the caller routes by them).
 */
#ifndef RV_CMX_H
#define RV_CMX_H

#include <stdbool.h>
#include <stdint.h>

#include "wire/roce/rv_cm.h"

enum rv_cmx_state {
	RV_CMX_IDLE,        /* nothing yet (passive: waiting for a REQ) */
	RV_CMX_REQ_SENT,    /* active: the REQ went, a REP (or REJ, MRA) is awaited */
	RV_CMX_REQ_RCVD,    /* passive: a REQ came, the application decides */
	RV_CMX_REP_SENT,    /* passive: the REP went, the RTU is awaited */
	RV_CMX_ESTABLISHED,
	RV_CMX_DREQ_SENT,   /* a DREQ went, its DREP is awaited */
	RV_CMX_TIMEWAIT,    /* disconnected: old packets die out before the QP is reused */
	RV_CMX_CLOSED,
};

/* REJ reasons (IBA table 109, Linux's enum ib_cm_rej_reason) this layer and rdma_cm use. */
enum {
	RV_CM_REJ_TIMEOUT = 4,
	RV_CM_REJ_INVALID_SERVICE_ID = 8, /* nobody listens */
	RV_CM_REJ_STALE_CONN = 10,
	RV_CM_REJ_CONSUMER_DEFINED = 28,  /* rdma_reject */
};

/* What the connection tells rdma_cm (its event, in rdma_cm's words). */
enum rv_cmx_event {
	RV_CMX_EV_NONE,
	RV_CMX_EV_REQUEST,      /* passive: a REQ (CONNECT_REQUEST); rv_cmx.peer has it */
	RV_CMX_EV_ESTABLISHED,  /* active: the REP came, the RTU went; passive: the RTU came */
	RV_CMX_EV_REJECTED,     /* a REJ came: status = its reason, peer = the REJ */
	RV_CMX_EV_UNREACHABLE,  /* no answer after every retry (status -ETIMEDOUT) */
	RV_CMX_EV_DISCONNECTED, /* a DREQ came, or ours was answered or timed out */
	RV_CMX_EV_TIMEWAIT_EXIT,
};

struct rv_cmx {
	enum rv_cmx_state state;
	bool active;
	uint32_t local_id, remote_id;
	uint64_t tid;            /* the exchange's transaction ID (the REQ's) */
	uint8_t timeout;         /* how long the peer takes to answer (5 bits) */
	uint8_t retries;         /* sends left of `last` before giving up */
	uint64_t deadline;       /* ns (the caller's clock); 0: no timer */
	uint8_t last[RV_MAD_LEN]; /* what was sent last, sent again on a timeout or duplicate */
	bool has_last;
	struct rv_cm_msg peer;   /* the peer's REQ (passive), REP (active), or REJ */
};

struct rv_cmx_out {
	bool send;                /* send mad to the peer's QP1 */
	uint8_t mad[RV_MAD_LEN];
	enum rv_cmx_event event;
	int status;               /* REJECTED: the REJ's reason; UNREACHABLE: -ETIMEDOUT */
};

/* Wait for a timeout field @t: 4.096 µs × 2^t, in ns. */
static inline uint64_t rv_cmx_wait_ns(uint8_t t)
{
	return 4096ull << (t & 31);
}
/* TimeWait's length (IBA 12.9.8.3: about the packet lifetime; Linux's at least 1 s less
 * a little for a RoCE port): the caller's constant. */
#define RV_CMX_TIMEWAIT_NS 1000000000ull

/* Active: sends @req (its local_id, tid, remote_cm_timeout and max_cm_retries set). 0, or
 * -EINVAL (not a REQ, not IDLE). */
int rv_cmx_connect(struct rv_cmx *c, const struct rv_cm_msg *req, uint64_t now,
		   struct rv_cmx_out *o);
/* Passive, after EV_REQUEST: sends @rep (local_id and the rest set; remote_id, tid filled
 * here). 0, or -EINVAL (not REQ_RCVD). */
int rv_cmx_accept(struct rv_cmx *c, const struct rv_cm_msg *rep, uint64_t now,
		  struct rv_cmx_out *o);
/* Refuses the peer's REQ (REQ_RCVD) with @reason and private data: a REJ; CLOSED. */
int rv_cmx_reject(struct rv_cmx *c, uint16_t reason, const void *pd, uint8_t pd_len,
		  struct rv_cmx_out *o);
/* ESTABLISHED: sends a DREQ. 0, or -EINVAL. */
int rv_cmx_disconnect(struct rv_cmx *c, uint32_t remote_qpn, uint64_t now, struct rv_cmx_out *o);
/* A MAD that came for this connection (or, IDLE and passive, a REQ). 0 (taken or
 * ignored, @o says what to do), or -ENOENT (its IDs are not this connection's). */
int rv_cmx_on_mad(struct rv_cmx *c, const struct rv_cm_msg *m, uint64_t now,
		  struct rv_cmx_out *o);
/* The deadline passed (or not: nothing happens before it). */
void rv_cmx_on_timer(struct rv_cmx *c, uint64_t now, struct rv_cmx_out *o);

#endif
