/*
 * The threads softverbs starts in the application's process (the progress thread, the
 * rdma_cm thread) are guests: each starts with every signal blocked, the mask set before
 * pthread_create so that it is inherited and no signal ever finds one of them eligible.
 * An application's signal (SIGUSR2 sent to itself to wake its event loop, SIGINT, a
 * timer's) then goes to one of its own threads, or stays pending until one takes it.
 */
#ifndef SV_THREAD_H
#define SV_THREAD_H

#include <pthread.h>
#include <signal.h>

/* pthread_create with every signal blocked in the new thread: 0 or an errno. The
 * caller's own mask is as it was when this returns. */
static inline int sv_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	int err;

	sigfillset(&all);
	err = pthread_sigmask(SIG_SETMASK, &all, &old);
	if (err)
		return err;
	err = pthread_create(t, NULL, fn, arg);
	(void)pthread_sigmask(SIG_SETMASK, &old, NULL);
	return err;
}

#endif
