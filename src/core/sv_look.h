/*
 * What the progress engine and the poll path share without calling each other: the
 * progress thread's looks (one per decision to sleep), the application's polls, and the
 * port's Q_Key violation counter. A poller marks each QP it moves with the current look
 * (sv_cq_progress): in busy mode the thread arms only the QPs no poller moved since its
 * previous look, which nobody else would move.
 */
#ifndef SV_LOOK_H
#define SV_LOOK_H

#include <stdatomic.h>
#include <stdint.h>

extern _Atomic uint32_t sv_engine_look;
/* The application's polls: it busy-polls when this grows fast (found something or not:
 * a busy poller that always finds completions is still busy). */
extern _Atomic uint64_t sv_engine_polls;
/* UD datagrams dropped for a wrong Q_Key (the port's qkey_viol_cntr). */
extern _Atomic uint32_t sv_engine_qkey_violations;

static inline void sv_engine_note_poll(void)
{
	/* Not a read-modify-write: a lost count between threads is harmless here. */
	atomic_store_explicit(&sv_engine_polls,
			      atomic_load_explicit(&sv_engine_polls, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

#endif
