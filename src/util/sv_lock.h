/*
 * The data path's short locks: a pthread spinlock taken by spinning briefly, then by
 * yielding. A plain spin loses whole time slices when the holder was preempted on the
 * same CPU (an application pinned to one CPU shares it with its progress thread);
 * yielding hands the CPU to the holder instead.
 */
#ifndef SV_LOCK_H
#define SV_LOCK_H

#include <pthread.h>
#include <sched.h>

enum { SV_LOCK_SPINS = 128 };

static inline void sv_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static inline void sv_spin_lock(pthread_spinlock_t *lock)
{
	for (int spins = 0; pthread_spin_trylock(lock); spins++) {
		if (spins < SV_LOCK_SPINS)
			sv_cpu_relax();
		else
			sched_yield();
	}
}

#endif
