/*
 * Internal to the data path of the core (sv_qp.c, sv_req.c, sv_comp.c, sv_resp.c): what
 * the requester, the completer and the responder share.
 */
#ifndef SV_PATH_H
#define SV_PATH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include <sched.h>

#include "core/sv_obj.h"
#include "core/sv_qp_data.h"
#include "core/sv_qp_table.h"
#include "core/sv_sge.h"
#include "core/sv_wire.h"
#include "util/sv_time.h"

enum {
	SV_UD_GRH = 40,
	SV_UD_MTU = 4096, /* a UD message is one packet of the path MTU (IBA 10.7.2.2) */
};

/* The QP's hint flags: written under their lock, read anywhere (relaxed is enough: a
 * stale read only delays work to the next pass). */
#define sv_hint(field) atomic_load_explicit(&(field), memory_order_relaxed)
#define sv_set_hint(field, v) atomic_store_explicit(&(field), (v), memory_order_relaxed)

/* Waits for the responder's role (held only briefly, never across a wait). */
static inline void sv_rx_lock(struct sv_qp *qp)
{
	while (atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		sched_yield();
}

static inline bool sv_rx_trylock(struct sv_qp *qp)
{
	return !atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire);
}

static inline void sv_rx_unlock(struct sv_qp *qp)
{
	atomic_flag_clear_explicit(&qp->rx_busy, memory_order_release);
}

/* The QP's wire loses packets: the core retransmits (SV_WIRE_LOSSY). */
static inline bool sv_qp_lossy(const struct sv_qp *qp)
{
	return qp->wire->caps & SV_WIRE_LOSSY;
}

/* The transport timer's period, ns: 4.096 us x 2^timeout (IBA 9.7.6.1.3); 0 (timeout 0)
 * waits for ever. */
static inline uint64_t sv_qp_ack_timeout_ns(const struct sv_qp *qp)
{
	uint8_t t = qp->attr.timeout;

	return t ? 4096ull << (t < 31 ? t : 31) : 0;
}

/* msn order with wrap-around. */
static inline bool sv_msn_le(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) <= 0;
}

static inline struct sv_context *sv_qp_ctx(struct sv_qp *qp)
{
	return to_svctx(qp->ibv.qp_base.context);
}

/* The P_Key a QP's pkey_index names in its context's table (0 before INIT). */
static inline uint32_t sv_qp_pkey(struct sv_qp *qp)
{
	const struct sv_host *h = &sv_qp_ctx(qp)->host;

	if (qp->attr.qp_state == IBV_QPS_RESET || qp->attr.pkey_index >= h->n_pkeys)
		return 0;
	return h->pkeys[qp->attr.pkey_index];
}

/* Whether a QP in state @st takes requests in: from RTR on, SQ Error included (IBA
 * 10.3.1). */
static inline bool sv_qp_state_receives(uint32_t st)
{
	return st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_SQE;
}

static inline void sv_wqe_done(struct sv_send_wqe *w, enum ibv_wc_status status)
{
	w->state = SV_WQE_DONE;
	w->status = (uint8_t)status;
}

static inline bool sv_wqe_reads(const struct sv_send_wqe *w)
{
	return w->opcode == IBV_WR_RDMA_READ || w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	       w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

/* A WQE's local SGEs, checked for @need (sv_sge.h). */
static inline enum ibv_wc_status sv_wqe_sge_iov(struct sv_qp *qp, const struct sv_send_wqe *w,
						uint32_t need, struct iovec *iov, int *n_iov,
						uint64_t *total)
{
	return sv_sge_iov(sv_qp_ctx(qp)->mrs->slots, qp->pd->handle, w->sge, w->num_sge, need, iov,
			  n_iov, total);
}

enum ibv_wc_opcode sv_wc_opcode_of(uint32_t wr_opcode);

/* sv_comp.c: the completer */
void sv_comp_complete_locked(struct sv_qp *qp);
int sv_comp_timers(struct sv_qp *qp);

/* sv_resp.c: the responder */
void sv_resp_reset(struct sv_qp *qp);

#endif
