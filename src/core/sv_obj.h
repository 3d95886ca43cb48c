/*
 * The verbs objects of one process.
 *
 * Each object embeds its rdma-core ABI struct as the first member (the context embeds
 * struct verbs_context, whose ibv_context is its last member), so the pointer the
 * application holds converts back with to_sv<obj>(). The ABI types are the vocabulary
 * of the core too (struct ibv_wc, enum ibv_qp_state): translating them on every
 * post and poll would cost time and buy nothing. Only lib/ turns results into the API's
 * conventions (errno, NULL returns, *bad_wr).
 *
 * Which lock is taken under which: docs/architecture.md, "Lock order" (one order for the
 * whole library).
 */
#ifndef SV_OBJ_H
#define SV_OBJ_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sv_device.h"
#include "core/sv_mr.h"
#include "core/sv_mcast.h"
#include "core/sv_wq.h"
#include "core/sv_wire.h"
#include "core/sv_xrcd.h"
#include "util/sv_lock.h"

#define sv_container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

struct sv_async_event {
	struct sv_async_event *next;
	struct ibv_async_event ev;
};

/*
 * What the contexts of one "device file" share: the key table, and the handles that
 * ibv_import_pd/mr/dm find. A context made by ibv_import_device(cmd_fd) shares its
 * origin's; the kernel shares a ucontext's objects between the contexts of a uverbs fd
 * the same way.
 */
struct sv_share {
	struct sv_share *next;     /* all shares of the process (under the shares' lock) */
	int refs;                  /* contexts using it (under the shares' lock) */
	dev_t dev;                 /* the cmd_fd's file, as fstat names it */
	ino_t ino;
	pthread_mutex_t lock;      /* guards the handles below */
	uint32_t *pds;             /* live PD handles */
	int n_pds, cap_pds;
	struct sv_dm **dms;        /* live device memory, by handle - 1 */
	int cap_dms;
	struct sv_mr_table mrs;
};

struct sv_context {
	struct verbs_context vctx; /* ABI: ibv_context is its last member */
	struct sv_host host;       /* the device as this context saw it when opened */
	pthread_mutex_t lock;      /* guards the async event queue */
	struct sv_async_event *async_head, *async_tail;
	struct sv_share *share;
	struct sv_mr_table *mrs;   /* &share->mrs */
	atomic_int n_pd, n_cq, n_qp, n_srq, n_ah;
};

struct sv_pd {
	struct ibv_pd ibv;
	bool imported;        /* ibv_import_pd: a second handle on another context's PD */
	atomic_int usecnt; /* MRs, QPs, SRQs, AHs and parent domains that name this PD */
	uint32_t handle;   /* unique in the process: the PD check of remote access */
	struct sv_pd *parent; /* a parent domain: the PD it protects with (same handle) */
	struct ibv_td *td;    /* a parent domain's thread domain, or NULL */
	struct ibv_parent_domain_init_attr pd_attr; /* its allocators and their context */
};

struct sv_td {
	struct ibv_td ibv;
	atomic_int usecnt; /* parent domains that name it */
};

struct sv_mr {
	struct ibv_mr ibv;
	struct sv_pd *pd;
	unsigned int access;
	uint64_t iova;
	uint32_t index; /* slot in ctx->mrs */
	struct sv_dm *dm; /* an MR on device memory (ibv_reg_dm_mr), or NULL */
	bool imported;    /* ibv_import_mr */
};

/* Device memory (ibv_alloc_dm): a buffer of the process, as a NIC's on-chip memory is
 * one of the device; MRs on it are zero based. */
struct sv_dm {
	struct ibv_dm ibv;
	unsigned char *buf;
	size_t length;
	atomic_int usecnt; /* MRs on it */
	bool imported;     /* ibv_import_dm */
	struct sv_share *share;
};

enum { SV_CHAN_CQS = 4 }; /* CQs a channel's waiter watches the QPs of (below) */

struct sv_comp_channel {
	struct ibv_comp_channel ibv; /* ibv.refcnt counts the CQs, under lock */
	pthread_mutex_t lock;        /* guards the queue, ibv.refcnt and cqs */
	struct sv_cq *head, *tail;   /* CQs with undelivered events, in order */
	struct sv_cq *cqs[SV_CHAN_CQS]; /* its CQs, if it has no more (else n_cqs is -1) */
	int n_cqs;
};

struct sv_cqe {
	struct ibv_wc wc;
	uint64_t ts; /* ns, CLOCK_MONOTONIC (hca clock) */
};

struct sv_cq {
	struct ibv_cq_ex ibv;     /* ibv_cq is its prefix: cast either way */
	sv_spinlock_t lock;  /* guards the ring, cur and the arm state */
	struct sv_cqe *ring;
	uint32_t size;            /* slots, a power of two, > cqe */
	uint32_t cqe;             /* capacity the user asked for (as reported in ibv.cqe) */
	_Atomic uint32_t head, tail; /* free-running producer / consumer: changed under lock
				 * (relaxed: the lock orders them), peeked without it
				 * (sv_cq_empty) */
	int armed;                /* 0, or IBV_WC_... arm: 1 = any, 2 = solicited only */
	int overflowed;
	uint64_t wc_flags;        /* what the extended poll reads (ibv_cq_init_attr_ex) */
	struct sv_cqe cur;        /* the entry the extended poll is on */
	struct sv_comp_channel *chan;
	/* channel bookkeeping, under chan->lock */
	struct sv_cq *chan_next;
	uint32_t chan_pending;    /* events raised but not yet returned by get_cq_event */
	int chan_queued;
	uint32_t comp_events_reported;  /* under ibv.mutex */
	uint32_t async_events_reported; /* under ibv.mutex */
	atomic_int usecnt;        /* QPs using this CQ */
	sv_spinlock_t qps_lock; /* guards qps: the QPs whose work poll_cq moves */
	struct sv_qp **qps;
	int n_qps, cap_qps;
};

/* An XRC domain handle (ibv_open_xrcd); handles on one file share the domain. */
struct sv_xrcd {
	struct ibv_xrcd ibv;
	struct sv_xrc_domain *dom;
	atomic_int usecnt; /* XRC SRQs and target QPs created through this handle */
};

struct sv_srq {
	struct ibv_srq ibv;
	struct sv_wq rq;
	struct sv_pd *pd;
	struct sv_cq *cq;            /* XRC: where its receives complete */
	enum ibv_srq_type type;
	uint32_t srqn;               /* ibv_get_srq_num: what XRC senders name */
	struct sv_xrcd *xrcd;        /* XRC: the domain it belongs to */
	uint32_t srq_limit;          /* 0 = not armed; under rq.lock */
	uint32_t events_reported;    /* under ibv.mutex */
	atomic_int usecnt;           /* QPs attached */
	atomic_int rnr_waiting;      /* a QP holds a message until a receive is posted */
};

/*
 * Where the responder places a request: a QP's own receive queue or SRQ, CQ, keys and
 * PD, or for an XRC target QP those of the XRC SRQ the request names (IBA 11.2.x: the
 * SRQ's PD and CQ), looked up per message.
 */
struct sv_rx_dst {
	struct sv_srq *srq;     /* NULL: the QP's own receive queue */
	struct sv_wq *wq;       /* the queue receives come from */
	struct sv_cq *cq;       /* where they complete */
	struct sv_context *ctx; /* whose key table access checks use */
	uint32_t pd;            /* the PD handle they check against */
};

/*
 * A QP's attributes as its wire and its responder read them without qp->lock (written
 * under it, by sv_qp_data_publish; modify_qp may change them while a request is being
 * handled).
 */
struct sv_qp_pub {
	_Atomic uint32_t state;   /* enum ibv_qp_state */
	_Atomic uint32_t access;  /* qp_access_flags */
	_Atomic uint32_t qkey;
	_Atomic uint32_t dest_qpn;
	_Atomic uint32_t min_rnr_timer;
	_Atomic uint32_t pkey;    /* the P_Key its pkey_index names (0: none yet) */
	_Atomic uint32_t rd_in, rd_out; /* max_dest_rd_atomic, max_rd_atomic */
};

/* How a message's payload crossed to or from the peer (softverbs_query_qp). */
enum { SV_COPY_NONE, SV_COPY_CMA, SV_COPY_BOUNCE };

/*
 * What a QP's data path did, for softverbs_query_qp(): the tx_ side is written by the
 * requester (under sq.lock), the rx_ side by the responder (under rx_busy), one writer
 * each, so a relaxed load and store count (sv_count); anyone may read them (relaxed: a
 * reader wants a recent value, not an order with the data).
 */
struct sv_qp_counters {
	_Atomic uint64_t tx_msgs, tx_bytes; /* messages sent to a peer, their payload */
	_Atomic uint64_t tx_cma_bytes;      /* payload this requester placed itself (direct) */
	_Atomic uint64_t tx_fifo_bytes;     /* payload in messages (small SENDs, bounce copy) */
	_Atomic uint32_t tx_copy;           /* SV_COPY_*: the copy mode of the last peer */
	_Atomic uint64_t rx_msgs, rx_bytes; /* requests this responder executed, their payload */
	_Atomic uint64_t rx_cma_bytes;      /* pulled from a requester's memory by the wire */
	_Atomic uint64_t rx_fifo_bytes;     /* placed from, or answered into, messages */
	_Atomic uint64_t rx_dropped;        /* UC, UD: messages dropped, no receive posted */
	_Atomic uint64_t retransmits;       /* go-back-N resends (SV_WIRE_LOSSY) */
};

static inline void sv_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

struct sv_qp {
	struct ibv_qp_ex ibv;    /* ibv_qp is at offset 0 */
	pthread_mutex_t lock;    /* guards state and attr */
	struct ibv_qp_attr attr; /* what modify_qp set, as query_qp reports it */
	struct ibv_qp_cap cap;
	struct sv_wq sq, rq;
	struct sv_pd *pd;
	struct sv_cq *scq, *rcq;
	struct sv_srq *srq;
	struct sv_xrcd *xrcd;    /* an XRC target QP's domain (it has no PD, CQs or queues) */
	int sq_sig_all;
	bool has_qp_ex;          /* created with send_ops_flags: ibv_qp_to_qp_ex() answers */
	uint64_t send_ops_flags; /* ibv_qp_init_attr_ex: which ibv_wr_* the user enabled */
	uint32_t events_reported; /* under ibv.qp_base.mutex */
	/* ibv_wr_* builder state, under sq.lock between wr_start and wr_complete */
	struct sv_send_wqe *wr_cur;
	uint32_t wr_pending;
	int wr_err;

	/* --- the data path (src/core/sv_qp.c, sv_req.c, sv_comp.c, sv_resp.c) --- */
	const struct sv_wire_ops *wire; /* how messages reach the peer */
	bool wire_fixed;              /* chosen by its creator (softverbs_create_qp_on_wire,
				       * SOFTVERBS_WIRE): where the peer is changes nothing */
	void *wire_qp;                /* the wire's state of this QP */
	const struct sv_wire_ops *far; /* UD: the wire to QPs of other hosts (NULL: none);
					* its state in far_qp. The requester picks per WR */
	void *far_qp;
	bool far_local;               /* this host's GIDs go on the far wire too (tests) */
	bool gsi;                     /* UD: the process's QP1 for the IB CM (sv_qp_set_gsi):
				       * its datagrams go from QP 1 */
	struct sv_qp_pub pub;         /* what the wire and the responder read without qp->lock */
	atomic_int eng_ref;           /* pinned by a poller or the progress thread */
	/* Armed and left out of the progress thread's passes until its wire rings for it or
	 * the application moves it (sv_engine_wake_qp); its place in the engine's list of
	 * such QPs or of the others, and whether it may go quiet when the thread sleeps
	 * (under the engine's QP lock) */
	atomic_bool eng_quiet;
	bool eng_may_quiet;
	int eng_slot;
	_Atomic uint32_t polled_look; /* sv_engine_look when a poller last moved it */
	_Atomic uint32_t placed_look; /* ... when it last placed a peer's one-sided operation */
	atomic_flag rx_busy;          /* the responder: one consumer of what arrives at a time */
	/* requester, under sq.lock (the atomic flags are written under the lock and read
	 * without it as hints, relaxed) */
	atomic_bool connect_pending;  /* in RTR or later, but the peer was not found yet */
	atomic_bool rtr_connecting;   /* ibv_modify_qp to RTR is attaching to the peer: the
				       * responder holds requests until it is done */
	bool want_connect;            /* transmit waits for an attach to want_qpn */
	bool connecting;              /* a thread is attaching (sv_qp_tx_connect) */
	uint32_t want_qpn;
	bool want_members;            /* UD: the multicast WQE at sq_next waits for its group's
				       * members to be listed (sv_qp_tx_connect, no lock held) */
	bool listing;                 /* a thread lists them */
	bool mc_valid;                /* UD: a multicast WQE at sq_next is being fanned out */
	int mc_n, mc_next;            /* to mc_qpn[0..mc_n), sent to those before mc_next;
				       * mc_n itself: the datagram on the far wire */
	bool mc_far;                  /* that datagram is being sent (tx_wire) */
	uint32_t mc_qpn[SV_MCAST_MEMBERS_MAX];
	uint32_t sq_next;             /* next WQE to transmit, between sq.tail and sq.head */
	uint32_t next_msn;
	uint64_t tx_off;              /* bytes of the WQE at sq_next sent so far (in segments) */
	bool tx_stopped;              /* a WR failed: transmit nothing more until RESET */
	bool tx_claimed;              /* a thread copies for the WQE at sq_next without the
				       * lock: it alone transmits until it is back */
	uint32_t tx_gen;              /* moves at every flush and drain: what a claim held
				       * before is gone */
	bool sq_failed;               /* an error completion was reported (until RESET) */
	uint32_t rd_atomic_out;       /* READs and atomics waiting for their answer */
	uint32_t msg_writes_out;      /* WRITEs sent as messages, not yet acknowledged */
	atomic_bool tx_blocked;       /* the wire was full or the peer not ready: try later */
	atomic_bool tx_kick;          /* an answer freed what transmit waits for */
	uint64_t wait_deadline;       /* ns: when a peer that does not take requests (not in
				       * RTR) has had the transport's retries (0: none) */
	uint32_t rnr_msn;             /* the send an RNR NAK holds up */
	_Atomic uint64_t rnr_deadline; /* ns; when its RNR retries run out (0: none) */
	/* SV_WIRE_LOSSY (sv_comp.c): the transport timer and the retries left */
	_Atomic uint64_t ack_deadline; /* ns: no answer by then, send again (0: off) */
	_Atomic uint64_t resend_at;   /* ns: an RNR NAK's wait ends, resend from rnr_msn */
	uint8_t retry_left, rnr_left;
	bool resending;               /* sent again from a point, nothing answered since: a
				       * NAK of what was in flight before starts no second go */
	_Atomic int err_event;        /* SV_ERR_NONE, or the error to enter (sv_qp_fail) */
	/* responder, under rx_busy */
	struct sv_rx_dst rx_dst;      /* where the request at the head lands */
	uint32_t rx_msn;              /* the last request msn taken (the next must be + 1) */
	uint32_t ack_due, ack_sent;   /* the last msn handled / acknowledged */
	bool resp_pending;            /* resp: an answer that found the wire full, owed */
	atomic_bool resp_owed;        /* after a poll: an answer or acknowledgement is owed
				       * (a hint for the wire's poll: sv_resp_owes) */
	bool resp_valid;              /* resp: the last atomic's answer (for a duplicate) */
	struct sv_hdr resp;
	/* The answers of the last SV_MAX_RD_ATOM atomics, by msn, for their duplicates
	 * (IBA 9.4.5: a responder keeps max_dest_rd_atomic of them): a ring allocated at
	 * the QP's first atomic (NULL: none yet, or no memory: the last one only, resp) */
	struct sv_atomic_done {
		uint32_t msn;
		uint64_t value;
	} *atomics_done;
	uint32_t atomics_n;           /* executed since RESET: the next goes at n % its size */
	atomic_bool rnr_held;         /* the message at the head waits for a receive */
	_Atomic uint64_t hold_until;  /* UC, UD: ns, when a message kept for want of a
				       * receive is dropped (0: none kept) */
	bool dropping;                /* UC, UD: one was, and no receive was posted since */
	uint32_t rnr_told;            /* msn whose RNR NAK was sent */
	uint32_t seq_nak_told;        /* SV_WIRE_LOSSY: the msn a sequence NAK asked for */
	bool rx_active;               /* a SEND in segments is being received into rx_recv */
	struct sv_recv rx_recv;
	uint64_t resp_off;            /* bytes of the READ at the head already answered */
	uint64_t acc_lo, acc_hi;      /* pages found mapped during this poll (sv_resp_access) */
	bool acc_write;               /* ... and writable */
	struct sv_qp_counters cnt;
};

struct sv_ah {
	struct ibv_ah ibv;
	struct ibv_ah_attr attr;
	struct sv_pd *pd;
};

static inline struct sv_context *to_svctx(struct ibv_context *ctx)
{
	return sv_container_of(ctx, struct sv_context, vctx.context);
}
static inline struct sv_pd *to_svpd(struct ibv_pd *pd) { return (struct sv_pd *)pd; }
static inline struct sv_mr *to_svmr(struct ibv_mr *mr) { return (struct sv_mr *)mr; }
static inline struct sv_cq *to_svcq(struct ibv_cq *cq) { return (struct sv_cq *)cq; }
static inline struct sv_cq *to_svcq_ex(struct ibv_cq_ex *cq) { return (struct sv_cq *)cq; }
static inline struct sv_srq *to_svsrq(struct ibv_srq *srq) { return (struct sv_srq *)srq; }
static inline struct sv_qp *to_svqp(struct ibv_qp *qp) { return (struct sv_qp *)qp; }
static inline struct sv_qp *to_svqp_ex(struct ibv_qp_ex *qp) { return (struct sv_qp *)qp; }
static inline struct sv_xrcd *to_svxrcd(struct ibv_xrcd *x) { return (struct sv_xrcd *)x; }
static inline struct sv_ah *to_svah(struct ibv_ah *ah) { return (struct sv_ah *)ah; }
static inline struct sv_comp_channel *to_svchan(struct ibv_comp_channel *ch)
{
	return (struct sv_comp_channel *)ch;
}

/* No lock: whether the responder still owes an answer it could not send (a wire's poll
 * then runs sv_resp_flush even when nothing arrived). A hint, exact after a poll. */
static inline bool sv_resp_owes(const struct sv_qp *qp)
{
	return atomic_load_explicit(&qp->resp_owed, memory_order_relaxed);
}

/* Queue an async event on the context; the async fd turns readable. */
void sv_async_raise(struct sv_context *ctx, enum ibv_event_type type, void *object);
/* Drops the undelivered events of a destroyed object (as uverbs does). */
void sv_async_forget(struct sv_context *ctx, void *object);

#endif
