/*
 * softverbs is a guest in the application's process: the threads it starts (the
 * progress thread, the rdma_cm thread) never receive the application's signals. An
 * application that blocks SIGUSR2 in its own thread and sends it to itself (a common way
 * to wake an event loop) must find it pending for sigtimedwait, not have it delivered to
 * a softverbs thread, where its default action ends the process (exit 140 before).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Each thread of this process but the caller: its blocked-signal mask (SigBlk of
 * /proc/self/task/TID/status) must hold every signal but the two that cannot be blocked.
 * Returns how many threads were looked at. */
static int other_threads_block_all(void)
{
	pid_t me = (pid_t)syscall(SYS_gettid);
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d))) {
		char path[320], line[256];
		unsigned long long blk = 0;
		bool found = false;
		FILE *f;

		if (e->d_name[0] == '.' || atoi(e->d_name) == me)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue; /* gone meanwhile */
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "SigBlk: %llx", &blk) == 1)
				found = true;
		fclose(f);
		assert_true(found);
		/* SIGKILL (9) and SIGSTOP (19) cannot be blocked, and glibc keeps its own two
		 * (32, 33: thread cancellation and set*id) out of every mask. */
		if ((blk | 1ull << 8 | 1ull << 18 | 1ull << 31 | 1ull << 32) != ~0ull)
			fail_msg("thread %s: signals not blocked (SigBlk %016llx)", e->d_name, blk);
		n++;
	}
	closedir(d);
	return n;
}

static void threads_take_no_signal(void **state)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct timespec wait = { .tv_sec = 5 };
	sigset_t usr2, old;
	int n;

	(void)state;
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	assert_int_equal(pthread_sigmask(SIG_BLOCK, &usr2, &old), 0);

	/* The rdma_cm thread (its first channel) and the progress thread (the first QP). */
	ch = rdma_create_event_channel();
	assert_non_null(ch);
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	list = ibv_get_device_list(NULL);
	assert_non_null(list);
	assert_non_null(list[0]);
	ctx = ibv_open_device(list[0]);
	assert_non_null(ctx);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	assert_non_null(pd);
	assert_non_null(cq);
	qa.send_cq = qa.recv_cq = cq;
	qp = ibv_create_qp(pd, &qa);
	assert_non_null(qp);

	n = other_threads_block_all();
	if (n < 2)
		fail_msg("%d softverbs threads running, expected the rdma_cm and progress threads", n);

	/* Sent to the process: pending for this thread, which takes it. */
	assert_int_equal(kill(getpid(), SIGUSR2), 0);
	assert_int_equal(sigtimedwait(&usr2, NULL, &wait), SIGUSR2);

	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	assert_int_equal(ibv_close_device(ctx), 0);
	ibv_free_device_list(list);
	assert_int_equal(rdma_destroy_id(id), 0);
	rdma_destroy_event_channel(ch);
	assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(threads_take_no_signal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
