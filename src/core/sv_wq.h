/*
 * Work queues: the send queue and receive queue of a QP, and the queue of an SRQ.
 *
 * A ring of fixed-size slots. post_* writes a slot at head and publishes it; the
 * requester/responder consumes from tail; entries between tail and head are the
 * outstanding WRs, which a move to ERROR flushes. wq->lock's place among the locks: the
 * one lock order, docs/architecture.md "Lock order".
 */
#ifndef SV_WQ_H
#define SV_WQ_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>

#include "core/sv_device.h"
#include "util/sv_lock.h"

/* The remote end of a UD send, copied from the AH so the AH may go away after posting. */
struct sv_ud_dest {
	union ibv_gid dgid;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint16_t dlid;
	uint8_t is_global;
	uint8_t sl;
	uint8_t sgid_index;
};

struct sv_send_wqe {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t opcode;     /* enum ibv_wr_opcode */
	uint32_t send_flags; /* enum ibv_send_flags */
	uint32_t num_sge;
	uint32_t rkey;
	uint32_t imm_data;   /* network order; the rkey to invalidate for SEND_WITH_INV */
	uint32_t inline_len; /* bytes of inline data after the SGE array, if IBV_SEND_INLINE */
	struct sv_ud_dest ud;
	uint32_t xrc_srqn;   /* XRC initiator: the remote SRQ (wr.qp_type.xrc.remote_srqn) */
	/* requester state (src/core/sv_req.c, sv_comp.c) */
	uint32_t msn;        /* the message that carries it, when it waits for the responder */
	uint32_t first_msn;  /* ... its first segment's (a resend starts there) */
	uint32_t byte_len;   /* for the completion: READ and atomics */
	uint8_t state;       /* enum sv_wqe_state */
	uint8_t status;      /* enum ibv_wc_status once done */
	uint16_t pad;
	struct ibv_sge sge[];
};

enum sv_wqe_state {
	SV_WQE_POSTED,   /* not transmitted yet */
	SV_WQE_WAIT,     /* transmitted; the responder's answer completes it */
	SV_WQE_DONE,     /* complete (status says how); waits for its turn to report */
};

struct sv_recv_wqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t pad;
	struct ibv_sge sge[];
};

/* A receive WQE taken off its queue (the responder holds it while data arrives). */
struct sv_recv {
	uint64_t wr_id;
	uint32_t num_sge;
	struct ibv_sge sge[SV_MAX_SGE];
};

struct sv_wq {
	sv_spinlock_t lock; /* guards head, tail and the slots */
	unsigned char *buf;
	uint32_t stride;  /* bytes per slot */
	uint32_t size;    /* slots, a power of two, >= max_wr */
	uint32_t max_wr;  /* what the user asked for: at most this many outstanding */
	uint32_t max_sge;
	uint32_t max_inline;
	uint32_t head;    /* next slot to fill (free-running) */
	uint32_t tail;    /* oldest outstanding slot (free-running) */
};

int sv_wq_init_send(struct sv_wq *wq, uint32_t max_wr, uint32_t max_sge, uint32_t max_inline);
int sv_wq_init_recv(struct sv_wq *wq, uint32_t max_wr, uint32_t max_sge);
void sv_wq_destroy(struct sv_wq *wq);

static inline uint32_t sv_wq_count(const struct sv_wq *wq)
{
	return wq->head - wq->tail;
}

static inline void *sv_wq_slot(const struct sv_wq *wq, uint32_t idx)
{
	return wq->buf + (size_t)(idx & (wq->size - 1)) * wq->stride;
}

static inline unsigned char *sv_send_wqe_inline(struct sv_send_wqe *wqe, const struct sv_wq *wq)
{
	return (unsigned char *)&wqe->sge[wq->max_sge];
}

/* Drop every outstanding WQE (used by RESET). Caller holds wq->lock. */
static inline void sv_wq_reset(struct sv_wq *wq)
{
	wq->head = 0;
	wq->tail = 0;
}

#endif
