/* The one clock of the library: CLOCK_MONOTONIC in nanoseconds (completion timestamps,
 * deadlines, timers). A vDSO call: no system call. */
#ifndef SV_TIME_H
#define SV_TIME_H

#include <stdint.h>
#include <time.h>

static inline uint64_t sv_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
