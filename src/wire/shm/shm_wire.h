/*
 * The shm wire: QPs of one host, through shared memory. Each QP has a segment (its page
 * for peers, then its inbound fifo, shm_msg.h) in its process's arena for its number's
 * block (shm_proc.c); a QP attaches to its peer by QPN over the peer process's abstract
 * socket (shm_conn.c), maps the peer's arena and key table (once per process), and
 * writes messages into the peer's fifo (shm_tx.c) that the peer's library reads
 * (shm_rx.c). RDMA WRITE and READ go straight between the two processes' memory with
 * process_vm_writev/readv when the kernel allows it (the direct op, with copy assist for
 * large ones: shm_assist.h), and through the fifos otherwise (bounce).
 *
 * A QP holds no descriptor of its own: a process holds one arena and one listening
 * socket per block of 256 QP numbers, and one connection and one wake-up descriptor per
 * process it talks to (docs/architecture.md, "QPs without descriptors").
 *
 * This header is the wire's own: the core sees only sv_wire_shm, its ops table.
 */
#ifndef SHM_WIRE_H
#define SHM_WIRE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "core/sv_mr.h"
#include "core/sv_wire.h"
#include "wire/sv_qpn.h"
#include "wire/shm/shm_msg.h"

struct sv_qp;

extern const struct sv_wire_ops sv_wire_shm;

enum {
	SHM_INLINE_MAX = 32768, /* larger SENDs: pulled by the responder (docs/performance.md) */
	SHM_CHUNK = 8192,       /* the bounce copy's bytes per message */
	SHM_UD_MAX_DESTS = 64,
	SHM_RX_BUDGET = 64,
	SHM_IOV_MAX = 64,
};

/* One arena per block of QP numbers (shm_proc.c), a segment at its number's place. */
#define SHM_ARENA_BYTES (SHM_ARENA_HDR + (size_t)SV_QPN_BLOCK * SHM_SEG_STRIDE)

/* A process our peers live in (this one included), under the engine's lock but for
 * wake_fd and dead, which the data path reads. */
struct shm_proc {
	pid_t pid;
	int wake_fd;          /* its engine's eventfd; -1 until we attached to one of its QPs */
	int refs;             /* our peers in it, and the connections that watch it */
	atomic_bool dead;     /* a connection to it hung up without goodbye */
	struct shm_peer *peers; /* ours in it (peer->proc_next) */
	struct shm_proc *next;
};

/* A QP on the same host that we talk to: its segment and key table, mapped. */
struct shm_peer {
	struct shm_proc *proc;
	struct shm_peer *proc_next; /* in proc->peers (engine lock) */
	bool local;           /* a QP of this process: nothing mapped for it */
	uint32_t qpn;
	void *map;            /* the arena as mapped (NULL: local) */
	struct shm_arena_hdr *ring; /* the header of the arena the peer's segment is in */
	struct shm_qp_page *page;
	struct shm_fifo *fifo;
	const struct sv_mr_entry *mrs; /* the peer context's key table, read-only */
	uint64_t cached_head; /* our requester's copy of the peer fifo's head (sq.lock) */
	uint64_t cached_head_ans; /* our responder's (rx_busy): they produce apart */
	uint32_t our_qpn;     /* the QP that attached */
	bool cma;             /* process_vm_readv/writev reach the peer (else: bounce) */
	uint64_t seg_addr;    /* where the peer maps its segment (the CMA probe reads it) */
};

struct shm_ud_dests {
	int n;
	struct shm_peer *peer[SHM_UD_MAX_DESTS];
};

/* A QP's state on the wire (qp->wire_qp). */
struct shm_qp {
	void *seg;                /* in our arena (shm_proc.c) */
	struct shm_qp_page *page;
	struct shm_fifo *rx;
	/* changed under rx_busy and sq.lock (and no claim out): either is enough to read */
	struct shm_peer *peer;    /* RC/UC: the connected QP */
	atomic_bool peer_local;   /* ... and it is a QP of this process (a hint) */
	atomic_bool peer_left;    /* the peer said goodbye: let go of it when drained */
	_Atomic pid_t peer_pid;   /* RC/UC: the peer's process (0: none), for the engine's
				   * thread to tell its connections from an impostor's */
	bool ud_unreachable_valid;/* UD: the last attach, to ud_unreachable, failed */
	uint32_t ud_unreachable;
	struct shm_ud_dests *ud_dests; /* UD: destinations met so far */
	/* requester's copy assist, under sq.lock */
	uint32_t assist_job;      /* the job of the WQE being placed (0: none) */
	uint64_t assist_deadline; /* ns: a helper not done by then fails the WQE */
	bool assist_helped;       /* the responder took part of our last job */
	uint32_t assist_copies;   /* large copies so far (every few offer help anyway) */
	/* responder, under rx_busy */
	atomic_bool rx_poisoned;  /* the peer broke the fifo's format: read no more (to RESET) */
	uint32_t burst_next;      /* the record of a WRITES burst to deliver next */
	/* requester: the page's acked word as last delivered (written under rx_busy, read by
	 * arming), and whether a READ or atomic went into the peer's fifo since RESET (set by
	 * the transmit; its answer comes in ours, so the word is then delivered in order
	 * with our fifo's tail: shm_rx.c, rx_acked) */
	_Atomic uint64_t acked_seen;
	atomic_bool sent_reads;
	uint64_t acked_sends;     /* the word as delivered for sends only (rx_busy) */
	/* a wake-up owed to a peer whose fifo we wrote under sq.lock (shm_qp_flush) */
	struct shm_peer *_Atomic wake;
	atomic_int waking;        /* flushes writing it now */
};

static inline struct shm_qp *shm_qp(const struct sv_qp *qp);

/* shm_proc.c: what is shared per process (engine lock held for each, but the rings'
 * look, on the progress thread, and the fork hook) */
/* Our segment for @qpn (its arena made if new): 0, or -errno. */
int shm_arena_seg(uint32_t qpn, void **seg);
/* The arena file and offset of @qpn's segment, for an attach answer. */
bool shm_arena_locate(uint32_t qpn, int *fd, uint64_t *off);
/* The QP of @qpn is gone: its segment's memory goes back. */
void shm_arena_release(uint32_t qpn, void *seg);
/* The progress thread's look at our arenas' rings (sv_engine_rings). */
void shm_arena_rings(void);
/* In a child of fork(): the parent's arenas are not ours (shm_conn.c's fork hook). */
void shm_arena_atfork_child(void);
/* Maps @fd (@len bytes, @prot), or takes another reference to the mapping of the same
 * file: its address, or NULL. The caller closes @fd either way. */
void *shm_map_get(int fd, size_t len, int prot);
void shm_map_put(const void *addr);
struct shm_proc *shm_proc_self(void);
/* The live process @pid as we know it, or NULL. */
struct shm_proc *shm_proc_find(pid_t pid);
/* ... with a reference, made if new (NULL: no memory). */
struct shm_proc *shm_proc_get(pid_t pid);
void shm_proc_put(struct shm_proc *p);

/* shm_conn.c: attach by QPN, the peers' lifetime */
/* Answers the attach socket of a new QPN block (sv_qpn_alloc's @new_listen_fd), whichever
 * wire's QP claimed it: the block's later QPs may be on shm (UD and XRC always are), and an
 * attach to one on another wire is answered -ENOENT. Engine lock held; on failure the
 * socket is closed. */
int shm_conn_listen_locked(int listen_fd);
int shm_conn_qp_add(struct sv_qp *qp, uint32_t *qpn);
/* No attach reaches @qp any more (and its number is free unless @keep_qpn). */
void shm_conn_qp_remove(struct sv_qp *qp, bool keep_qpn);
/* ... and once nothing of ours uses it, its segment goes back. */
void shm_conn_qp_release(struct sv_qp *qp);
int shm_conn_connect(struct sv_qp *qp, uint32_t dest_qpn, struct shm_peer **peer);
void shm_conn_disconnect(struct shm_peer *peer);
void shm_conn_wake(struct shm_peer *peer);
struct sv_qp *shm_conn_pin_qp(uint32_t qpn);

/* The peer connection ended (@fatal: without goodbye). */
void shm_qp_peer_lost(struct sv_qp *qp, uint32_t peer_qpn, bool fatal);

/* shm_qp.c: the QP's ops (sv_wire.h says what each promises) */
int shm_qp_qp_init(struct sv_qp *qp, uint32_t *qpn);
void shm_qp_qp_fini(struct sv_qp *qp);
/* The QP moves between wires keeping its number (sv_wire_ops.qp_take / qp_leave). */
int shm_qp_qp_take(struct sv_qp *qp, uint32_t qpn);
void shm_qp_qp_leave(struct sv_qp *qp);
void shm_qp_publish(struct sv_qp *qp);
int shm_qp_connect_qpn(struct sv_qp *qp, uint32_t qpn, void **conn);
void *shm_qp_attach(struct sv_qp *qp, uint32_t qpn, void *conn, int err);
void shm_qp_release(struct sv_qp *qp, void *conn);
void shm_qp_disconnect(struct sv_qp *qp);
void shm_qp_discard(struct sv_qp *qp);
enum sv_reach shm_qp_reach(struct sv_qp *qp, uint32_t dest_qpn);
void shm_qp_dropped(struct sv_qp *qp, uint32_t dest_qpn);
void shm_qp_abandon(struct sv_qp *qp, uint32_t msn);
bool shm_qp_arm(struct sv_qp *qp, bool assist);
void shm_qp_disarm(struct sv_qp *qp);
struct sv_qp *shm_qp_local_peer(struct sv_qp *qp);
bool shm_qp_needs_timer(struct sv_qp *qp);
int shm_qp_timers(struct sv_qp *qp);
uint32_t shm_qp_bad_pkeys(struct sv_qp *qp);

/* shm_tx.c: the ops that transmit (sv_wire.h says what each promises) */
uint64_t shm_seg_max(struct sv_qp *qp, const struct sv_hdr *h);
int shm_send(struct sv_qp *qp, const struct sv_hdr *h, const struct iovec *iov, int n_iov);
enum sv_direct shm_direct(struct sv_qp *qp, struct sv_send_wqe *w, const struct iovec *iov,
			  int n_iov, uint64_t total, bool may_place, enum ibv_wc_status *status);
void shm_direct_abandon(struct sv_qp *qp);
bool shm_batch_ready(struct sv_qp *qp, uint64_t first_len);
uint32_t shm_write_batch(struct sv_qp *qp, struct sv_batch_item *items, uint32_t n,
			 uint32_t first_msn, bool may_place, bool *acked);
int shm_put_msg(struct shm_qp *defer, struct shm_peer *peer, struct shm_msg *m,
		const void *payload, const struct iovec *iov, int n_iov, uint32_t len);
/* The wake-up a send under sq.lock left for later: done (no lock held). */
void shm_qp_flush(struct sv_qp *qp);
/* Before @peer is let go of: its wake-up, if one waits, is done now, and no flush is
 * still writing to it. */
void shm_forget_wake(struct shm_qp *s, struct shm_peer *peer);
enum ibv_wc_status shm_cma_copy(pid_t pid, const struct iovec *local, int n_local,
				uint64_t remote, uint64_t len, bool write);
bool shm_assist_on(void);

/* shm_mcast.c: the ops of multicast membership (sv_wire.h) */
int shm_mcast_attach(struct sv_qp *qp, const union ibv_gid *mgid, int ifindex);
int shm_mcast_detach(struct sv_qp *qp, const union ibv_gid *mgid);
int shm_mcast_count(struct sv_qp *qp);
int shm_mcast_members(struct sv_qp *qp, const union ibv_gid *mgid, uint32_t *qpns, int max);

/* shm_rx.c */
int shm_rx_poll(struct sv_qp *qp);
/* Delivers the acknowledgement in our page once the fifo holds nothing sent before it
 * (under rx_busy): 1 delivered, 0 nothing new, -1 not yet. */
int shm_rx_acked(struct sv_qp *qp);
int shm_rx_assist(struct sv_qp *qp);

/* The slots the message @m heads, or 0 if the peer wrote a count no message has (a
 * protocol violation: the QP fails rather than consume what follows as messages). */
static inline uint32_t shm_msg_slots(const struct shm_msg *m)
{
	return m->nslots >= 1 && m->nslots <= SHM_FIFO_SLOTS ? m->nslots : 0;
}

#include "core/sv_obj.h"

/* Whether the peer's QP takes requests: from RTR on, SQ Error included (IBA 10.3.1). */
static inline bool shm_peer_ready(const struct shm_peer *peer)
{
	uint32_t st = atomic_load_explicit(&peer->page->state, memory_order_acquire);

	return st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_SQE;
}

static inline struct shm_qp *shm_qp(const struct sv_qp *qp)
{
	return qp->wire_qp;
}

/* The UD destination @qpn met so far, unless its process died since (a QP of that
 * number now, if any, is another process's: it is attached to afresh). */
static inline struct shm_peer *shm_ud_dest(const struct shm_qp *s, uint32_t qpn)
{
	const struct shm_ud_dests *d = s->ud_dests;

	for (int i = 0; d && i < d->n; i++)
		if (d->peer[i]->qpn == qpn &&
		    !atomic_load_explicit(&d->peer[i]->proc->dead, memory_order_relaxed))
			return d->peer[i];
	return NULL;
}

/* IBA 10.9.3: would @peer's QP accept our packets? It drops the others, silently. */
static inline bool shm_pkeys_match(const struct sv_qp *qp, const struct shm_peer *peer)
{
	uint32_t a = atomic_load_explicit(&shm_qp(qp)->page->pkey, memory_order_relaxed);
	uint32_t b = atomic_load_explicit(&peer->page->pkey, memory_order_relaxed);

	/* Their low 15 bits equal (and not 0), at least one a full member (bit 15). */
	return (a & 0x7fff) && (a & 0x7fff) == (b & 0x7fff) && ((a | b) & 0x8000);
}


#endif
