/*
 * The progress engine: one per process, wire-agnostic. It keeps the list of the
 * process's QPs, watches file descriptors for the wires (a callback each), and runs the
 * progress thread that moves work when the application does not poll.
 *
 * The progress thread sleeps in epoll: on the wires' descriptors and on one eventfd
 * that peers and producers signal only when they find a QP armed (its wire's arm op).
 * While the application polls its CQs (the poll path moves the same work itself) the
 * thread does not arm the QPs those polls move, so producers make no system call (see
 * progress_main).
 *
 * The engine's lock is the process's registry lock: it guards the QP list and the
 * watches, and wires keep what they must find by number under it too (the shm wire's
 * QPN owners), so that holding it keeps a QP alive. Lock order: a QP's locks, then
 * the engine's. The engine never holds its lock while it takes a QP's: it pins QPs
 * with a reference instead.
 */
#ifndef SV_ENGINE_H
#define SV_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/sv_look.h"

struct sv_qp;

/* Adds @qp to the engine's progress. Starts the engine on first use. */
int sv_engine_add_qp(struct sv_qp *qp);
/* Removes @qp; waits until the progress thread no longer uses it. */
void sv_engine_remove_qp(struct sv_qp *qp);

/* The registry lock (see above). */
void sv_engine_lock(void);
void sv_engine_unlock(void);

/*
 * Watches @fd for input and hang-up: @fn(arg, epoll events) runs on the progress thread
 * with the engine's lock held (it may drop and retake it, and unwatch itself). *id names
 * the watch. The fd stays the caller's: unwatch it before closing it.
 */
typedef void (*sv_watch_fn)(void *arg, uint32_t events);
int sv_engine_watch_locked(int fd, sv_watch_fn fn, void *arg, uint64_t *id);
void sv_engine_unwatch_locked(uint64_t id);
/* A watch that reports once per arming: added disarmed; sv_engine_rearm(id, events) arms
 * it for @events (EPOLLIN, EPOLLOUT, ...) until it next fires. For a descriptor whose
 * data the application's own polls read while it spins: the progress thread hears of it
 * only when it is about to sleep (the wire's arm op), never on the latency path. Takes
 * the engine's lock. */
int sv_engine_watch_oneshot_locked(int fd, sv_watch_fn fn, void *arg, uint64_t *id);
/* A watch that reports each time new data arrives (edge-triggered EPOLLIN), always
 * armed: the callback learns of it even while the fd is not read. */
int sv_engine_watch_edge_locked(int fd, sv_watch_fn fn, void *arg, uint64_t *id);
int sv_engine_rearm(uint64_t id, uint32_t events);
/* A watch out of the epoll set until sv_engine_rearm arms it again (a oneshot watch) or
 * sv_engine_unpark puts it back (an edge-triggered one): the
 * application's polls read the descriptor (the thread leaves its QP to them). In the set,
 * even disarmed, a socket's every packet runs the epoll callback in its sender's system
 * call (a ping-pong across a veth pair: 0.2 us a message). Takes the engine's lock. */
void sv_engine_park(uint64_t id);
/* An edge-triggered watch parked (sv_engine_park) back in the set, for what it was added
 * for; data already there reports at once. Takes the engine's lock. */
void sv_engine_unpark(uint64_t id);

/* Locks a wire takes under the engine's: held around fork() after the engine's, and
 * made afresh in the child (each hook set once; up to eight). */
struct sv_fork_hooks {
	void (*prepare)(void), (*parent)(void), (*child)(void);
};
void sv_engine_fork_hooks(const struct sv_fork_hooks *h);

/* The eventfd that wakes the progress thread (a peer on this host may be given it). */
int sv_engine_wake_fd(void);
/* Wakes our own progress thread (work it must look at: a blocked transmit). */
void sv_engine_kick(void);
/* A transmit off the progress thread was left waiting for room (tx_blocked set): wakes
 * the thread if it may be asleep untimed, so that it retries while the application
 * sleeps on its channel. */
void sv_engine_blocked(void);
/* True on the progress thread, which must keep serving its watches while it waits for
 * something of its own; sv_engine_serve(0) handles what is pending. */
bool sv_engine_on_thread(void);
/* Whether the progress thread last judged the application to busy-poll its CQs: its
 * polls then come again within moments, and the thread looks at the QPs they move only
 * once a millisecond. */
bool sv_engine_app_busy(void);
void sv_engine_serve(int timeout_ms);

/* The port's violation counters (ibv_query_port): packets dropped for a P_Key that did
 * not match one of this process's QPs (its wires count them), and UD datagrams dropped
 * for a wrong Q_Key. */
uint32_t sv_engine_bad_pkeys(void);

/*
 * Idle QPs cost the progress thread nothing: when it goes to sleep, a QP that armed,
 * needs no timer and is on a wire that rings (SV_WIRE_RINGS) goes quiet, out of its
 * passes. It comes back when its wire rings for it (a peer's message, an answer), when
 * the application posts to it or changes its state, or when its peer leaves or dies:
 * each calls this. Anything else (a poll moves nothing a ring would not have woken) is
 * made good by the thread's audit. Any thread, any lock held (the engine's QP lock is
 * taken last).
 */
void sv_engine_wake_qp(struct sv_qp *qp);
/* A wire that rings: @scan, called by the progress thread after each wait, wakes the QPs
 * rung for since (sv_engine_wake_qp). Set once. */
void sv_engine_rings(void (*scan)(void));

/* Pins @qp (it cannot be destroyed until unpinned). Caller holds the engine's lock or
 * another pin. */
void sv_engine_pin_locked(struct sv_qp *qp);
void sv_engine_unpin_qp(struct sv_qp *qp);

#endif
