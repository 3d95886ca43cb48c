/*
 * Internal to the data path (sv_qp_data.c, sv_req.c, sv_resp.c): what the requester
 * and responder share.
 */
#ifndef SV_QP_PRIV_H
#define SV_QP_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include <sched.h>
#include <time.h>

#include "core/sv_engine.h"
#include "core/sv_obj.h"
#include "core/sv_qp_data.h"
#include "core/sv_qp_table.h"
#include "util/sv_time.h"

enum {
	SV_INLINE_MAX = 32768,     /* larger SENDs: pulled by the responder (docs/performance.md) */
	SV_CHUNK = 8192,           /* bounce copy: bytes per message */
	SV_UD_GRH = 40,
	SV_UD_MAX_DESTS = 64,
	SV_RX_BUDGET = 64,
	SV_IOV_MAX = 64,
};

/* The QP's hint flags: written under their lock, read anywhere (relaxed is enough: a
 * stale read only delays work to the next pass). */
#define sv_hint(field) atomic_load_explicit(&(field), memory_order_relaxed)
#define sv_set_hint(field, v) atomic_store_explicit(&(field), (v), memory_order_relaxed)

/* Waits for the fifo's consumer role (held only briefly, never across a wait). */
static inline void sv_rx_lock(struct sv_qp *qp)
{
	while (atomic_flag_test_and_set_explicit(&qp->rx_busy, memory_order_acquire))
		sched_yield();
}

static inline void sv_rx_unlock(struct sv_qp *qp)
{
	atomic_flag_clear_explicit(&qp->rx_busy, memory_order_release);
}

struct sv_ud_dests {
	int n;
	struct sv_peer *peer[SV_UD_MAX_DESTS];
};

/* msn order with wrap-around. */
static inline bool sv_msn_le(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) <= 0;
}

static inline struct sv_context *sv_qp_ctx(struct sv_qp *qp)
{
	return to_svctx(qp->ibv.qp_base.context);
}

/* Asks for ERR (with async event @ev, or SV_ERR_NO_EVENT) once the locks are released. */
static inline void sv_qp_fail(struct sv_qp *qp, int ev)
{
	int none = -1;

	atomic_compare_exchange_strong(&qp->err_event, &none, ev);
}

/* The P_Key a QP's pkey_index names in its context's table (0 before INIT). */
static inline uint32_t sv_qp_pkey(struct sv_qp *qp)
{
	const struct sv_host *h = &sv_qp_ctx(qp)->host;

	if (qp->attr.qp_state == IBV_QPS_RESET || qp->attr.pkey_index >= h->n_pkeys)
		return 0;
	return h->pkeys[qp->attr.pkey_index];
}

/*
 * IBA 10.9.3: two P_Keys match when their low 15 bits are equal (and not 0) and at least
 * one is a full member (bit 15). A packet whose P_Key does not match the receiving QP's
 * is dropped, silently.
 */
static inline bool sv_pkey_match(uint32_t a, uint32_t b)
{
	return (a & 0x7fff) && (a & 0x7fff) == (b & 0x7fff) && ((a | b) & 0x8000);
}

/* Whether a QP in state @st takes requests in: from RTR on, SQ Error included (IBA
 * 10.3.1). */
static inline bool sv_qp_state_receives(uint32_t st)
{
	return st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_SQE;
}

/* The slots the message @m heads, or 0 if the peer wrote a count no message has (a
 * protocol violation: the QP fails rather than consume what follows as messages). */
static inline uint32_t sv_msg_slots(const struct shm_msg *m)
{
	return m->nslots >= 1 && m->nslots <= SHM_FIFO_SLOTS ? m->nslots : 0;
}

static inline void sv_wqe_done(struct sv_send_wqe *w, enum ibv_wc_status status)
{
	w->state = SV_WQE_DONE;
	w->status = (uint8_t)status;
}

enum ibv_wc_opcode sv_wc_opcode_of(uint32_t wr_opcode);

/* sv_req.c */
int sv_iov_slice(const struct iovec *iov, int n, uint64_t off, uint64_t len, struct iovec *out);
int sv_put_msg(struct sv_peer *peer, struct shm_msg *m, const void *payload,
	       const struct iovec *iov, int n_iov, uint32_t len);
enum ibv_wc_status sv_cma_copy(pid_t pid, struct iovec *local, int n_local, uint64_t remote,
			       uint64_t len, bool write);
void sv_req_answer(struct sv_qp *qp, const struct shm_msg *m, uint64_t pos);
void sv_req_complete_locked(struct sv_qp *qp);
int sv_req_timers(struct sv_qp *qp);
void sv_req_fail_waiting(struct sv_qp *qp, enum ibv_wc_status status);
void sv_req_assist_abandon(struct sv_qp *qp);
bool sv_assist_on(void);

/* sv_resp.c */
int sv_resp_rx(struct sv_qp *qp);

#endif
