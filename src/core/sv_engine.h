/*
 * The engine: one per process. It owns the QPN rendezvous sockets, answers peers that
 * attach to this process's QPs, watches every QP connection for a peer that goes away,
 * and runs the progress thread that moves work when the application does not poll.
 *
 * The progress thread sleeps in epoll: on the rendezvous and connection sockets and on
 * one eventfd that producers signal only when they find a fifo armed. While the
 * application polls its CQs (the poll path moves the same work itself) the thread does
 * not arm the fifos of the QPs those polls move, so producers make no system call (see
 * progress_main).
 *
 * Lock order: a QP's locks, then engine.lock. The engine never holds its lock while it
 * takes a QP's: it pins QPs with a reference instead.
 */
#ifndef SV_ENGINE_H
#define SV_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/sv_mr.h"
#include "wire/shm/shm_msg.h"

struct sv_qp;

/* A QP on the same host that we talk to: its segment and key table, mapped. */
struct sv_peer {
	int sock;             /* the attach connection: hang-up without goodbye = death;
			       * -1 for a QP of this process */
	pid_t pid;
	uint32_t qpn;
	void *seg;
	size_t seg_len;
	struct shm_qp_page *page;
	struct shm_fifo *fifo;
	const struct sv_mr_entry *mrs; /* the peer context's key table, read-only */
	int wake_fd;          /* the peer engine's eventfd */
	uint64_t cached_head; /* producer's copy of the peer fifo's head */
	uint64_t link_id;     /* our engine's watch of sock */
	uint32_t our_qpn;     /* the QP that attached */
	bool cma;             /* process_vm_readv/writev reach the peer (else: bounce) */
	uint64_t seg_addr;    /* where the peer maps its segment (the CMA probe reads it) */
};

/* Adds @qp to the engine (QPN, progress). Starts the engine on first use. */
int sv_engine_add_qp(struct sv_qp *qp, uint32_t *qpn);
/* Removes @qp; waits until the progress thread no longer uses it. */
void sv_engine_remove_qp(struct sv_qp *qp);

/* Attaches to QP @dest_qpn on this host. 0 and *peer, or a negative errno. */
int sv_engine_connect(struct sv_qp *qp, uint32_t dest_qpn, struct sv_peer **peer);
/* Says goodbye (graceful) and unmaps. */
void sv_engine_disconnect(struct sv_peer *peer);

/* Signals the peer's engine if its fifo was armed (after shm_fifo_publish said so). */
void sv_engine_wake_peer(struct sv_peer *peer);
/* Wakes our own progress thread (work it must look at: a blocked transmit). */
void sv_engine_kick(void);

/* The application's polls: it busy-polls when this grows fast (found something or not:
 * a busy poller that always finds completions is still busy). */
extern _Atomic uint64_t sv_engine_polls;

/* The port's violation counters (ibv_query_port): packets dropped for a P_Key that did
 * not match one of this process's QPs (counted by their senders on the QP's page), and
 * UD datagrams dropped for a wrong Q_Key. */
uint32_t sv_engine_bad_pkeys(void);
extern _Atomic uint32_t sv_engine_qkey_violations;

/* A QP of this process by number, pinned (drop with sv_engine_unpin_qp), or NULL. */
struct sv_qp *sv_engine_pin_qp(uint32_t qpn);
void sv_engine_unpin_qp(struct sv_qp *qp);

/* The progress thread's looks (one per decision to sleep). A poller marks each QP it
 * moves with the current look (sv_cq_progress): in busy mode the thread arms only the
 * QPs no poller moved since its previous look, which nobody else would move. */
extern _Atomic uint32_t sv_engine_look;

static inline void sv_engine_note_poll(void)
{
	/* Not a read-modify-write: a lost count between threads is harmless here. */
	atomic_store_explicit(&sv_engine_polls,
			      atomic_load_explicit(&sv_engine_polls, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

#endif
