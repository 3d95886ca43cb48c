/* Host-unique QP numbers (src/wire/sv_qpn.c): unique across processes, reusable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wire/sv_qpn.h"

enum { N = 300 }; /* more than one block */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void test_unique_across_processes(void **state)
{
	uint32_t mine[N], all[2 * N];
	int lfd;
	int fds[2];
	pid_t pid;
	int status;

	(void)state;
	for (int i = 0; i < N; i++) {
		assert_int_equal(sv_qpn_alloc(&mine[i], &mine[i], &lfd), 0);
		assert_true(mine[i] > 1 && mine[i] <= 0xffffff);
	}
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* The child inherited the parent's blocks; it must claim its own. */
		uint32_t q[N];

		for (int i = 0; i < N; i++)
			if (sv_qpn_alloc(&q[i], NULL, &lfd))
				_exit(1);
		_exit(write(fds[1], q, sizeof(q)) == sizeof(q) ? 0 : 1);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], all + N, sizeof(mine)), (ssize_t)sizeof(mine));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	for (int i = 0; i < N; i++)
		all[i] = mine[i];
	qsort(all, 2 * N, sizeof(all[0]), cmp_u32);
	for (int i = 1; i < 2 * N; i++)
		assert_int_not_equal(all[i], all[i - 1]);
	for (int i = 0; i < N; i++)
		sv_qpn_free(mine[i]);
	close(fds[0]);
}

/* A freed number is not handed out again at once (a peer that has not heard yet would
 * find a new QP under it), but once the block has gone round. */
static void test_freed_numbers_come_back(void **state)
{
	uint32_t a, b;
	int lfd, n;

	(void)state;
	assert_int_equal(sv_qpn_alloc(&a, &a, &lfd), 0);
	assert_ptr_equal(sv_qpn_owner(a), &a);
	sv_qpn_free(a);
	assert_null(sv_qpn_owner(a));
	for (n = 1; n <= (int)SV_QPN_BLOCK; n++) {
		assert_int_equal(sv_qpn_alloc(&b, NULL, &lfd), 0);
		sv_qpn_free(b);
		if (b == a)
			break;
	}
	if (n < (int)SV_QPN_BLOCK)
		fail_msg("qpn %u came back after %d allocations: want a whole block's round", a, n);
	if (n > (int)SV_QPN_BLOCK)
		fail_msg("qpn %u did not come back in a block's round", a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unique_across_processes),
		cmocka_unit_test(test_freed_numbers_come_back),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
