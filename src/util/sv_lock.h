/*
 * The data path's short locks: a spinlock taken by spinning briefly, then by
 * yielding. A plain spin loses whole time slices when the holder was preempted on the
 * same CPU (an application pinned to one CPU shares it with its progress thread);
 * yielding hands the CPU to the holder instead.
 */
#ifndef SV_LOCK_H
#define SV_LOCK_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

/*
 * The lock itself: one atomic word, taken and released inline. pthread_spinlock_t
 * cost a call into libc for every take and every release, ten of each on a small
 * message's way through shm (send, receive, acknowledgement): 20 ns of its 240 in a
 * single-process ping-pong of send, receive and completion.
 */
typedef struct {
	_Atomic int held;
} sv_spinlock_t;

enum { SV_LOCK_SPINS = 128 };

static inline void sv_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static inline void sv_spin_init(sv_spinlock_t *lock)
{
	atomic_init(&lock->held, 0);
}

/* True if taken. Acquire: what the holder before us wrote is seen. */
static inline bool sv_spin_trylock(sv_spinlock_t *lock)
{
	return !atomic_exchange_explicit(&lock->held, 1, memory_order_acquire);
}

static inline void sv_spin_lock(sv_spinlock_t *lock)
{
	for (int spins = 0; !sv_spin_trylock(lock);) {
		/* Wait with plain reads (the line stays shared), then try again. */
		while (atomic_load_explicit(&lock->held, memory_order_relaxed)) {
			if (spins++ < SV_LOCK_SPINS)
				sv_cpu_relax();
			else
				sched_yield();
		}
	}
}

/* Release: what we wrote under the lock is seen by its next holder. */
static inline void sv_spin_unlock(sv_spinlock_t *lock)
{
	atomic_store_explicit(&lock->held, 0, memory_order_release);
}

#endif
