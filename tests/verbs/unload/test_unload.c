/*
 * The libraries stay mapped after their last dlclose (they are linked -z nodelete): each
 * runs a thread of its own until exit (libibverbs' progress thread from the first QP,
 * librdmacm's CM thread from the first event channel), which would otherwise run into
 * unmapped code. Stacks load us through a plugin they close at finalize: Open MPI's
 * mtl ofi closes libfabric, the last user of libibverbs, and 3 of 4 ranks died of
 * SIGSEGV after MPI_Finalize.
 *
 * The program is not linked with either library: it loads them by path (the build's,
 * from SV_LIBIBVERBS / SV_LIBRDMACM), starts the thread, frees everything, dlcloses and
 * asks the loader whether the library is still there (RTLD_NOLOAD). The child that does
 * it then lives on for 200 ms beside the thread: without the flag it died of SIGSEGV.
 */
#include <dlfcn.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define SYM(h, name) ((__typeof__(&name))dlsym(h, #name))

/* Child: 0 when the library is still mapped after dlclose, 1 when it is gone, 2+ when
 * something failed on the way. */
static int verbs_child(void)
{
	void *h = dlopen(SV_LIBIBVERBS, RTLD_NOW | RTLD_LOCAL);
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr attr = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	int n;

	if (!h)
		return 2;
	list = SYM(h, ibv_get_device_list)(&n);
	if (!list || n < 1 || !(ctx = SYM(h, ibv_open_device)(list[0])))
		return 3;
	pd = SYM(h, ibv_alloc_pd)(ctx);
	cq = SYM(h, ibv_create_cq)(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq)
		return 4;
	attr.send_cq = attr.recv_cq = cq;
	qp = SYM(h, ibv_create_qp)(pd, &attr); /* starts the progress thread */
	if (!qp)
		return 5;
	if (SYM(h, ibv_destroy_qp)(qp) || SYM(h, ibv_destroy_cq)(cq) ||
	    SYM(h, ibv_dealloc_pd)(pd) || SYM(h, ibv_close_device)(ctx))
		return 6;
	SYM(h, ibv_free_device_list)(list);
	if (dlclose(h))
		return 7;
	n = dlopen(SV_LIBIBVERBS, RTLD_NOW | RTLD_NOLOAD) ? 0 : 1;
	poll(NULL, 0, 200);
	return n;
}

static int rdmacm_child(void)
{
	void *h = dlopen(SV_LIBRDMACM, RTLD_NOW | RTLD_LOCAL);
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	int gone;

	if (!h)
		return 2;
	ch = SYM(h, rdma_create_event_channel)();
	if (!ch || SYM(h, rdma_create_id)(ch, &id, NULL, RDMA_PS_TCP))
		return 3;
	if (SYM(h, rdma_destroy_id)(id))
		return 4;
	SYM(h, rdma_destroy_event_channel)(ch);
	if (dlclose(h))
		return 7;
	gone = dlopen(SV_LIBRDMACM, RTLD_NOW | RTLD_NOLOAD) ? 0 : 1;
	gone |= dlopen(SV_LIBIBVERBS, RTLD_NOW | RTLD_NOLOAD) ? 0 : 1;
	poll(NULL, 0, 200);
	return gone;
}

static void run_child(int (*fn)(void))
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		/* cmocka's handlers would turn the child's crash into an exit code */
		signal(SIGSEGV, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		_exit(fn());
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("the child died of signal %d after dlclose", WTERMSIG(status));
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 1)
		fail_msg("the library was unmapped by dlclose while its thread runs");
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_libibverbs_stays_after_dlclose(void **state)
{
	(void)state;
	run_child(verbs_child);
}

static void test_librdmacm_stays_after_dlclose(void **state)
{
	(void)state;
	run_child(rdmacm_child);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_libibverbs_stays_after_dlclose),
		cmocka_unit_test(test_librdmacm_stays_after_dlclose),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
