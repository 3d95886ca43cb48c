#include "verbs/sv_test_util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ibv_context *tu_open(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	int n = -1;

	list = ibv_get_device_list(&n);
	assert_non_null(list);
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "softverbs0"))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	assert_non_null(ctx);
	return ctx;
}

int tu_setup(void **state)
{
	struct tu_res *res = calloc(1, sizeof(*res));

	if (!res)
		return -1;
	res->ctx = tu_open();
	res->pd = ibv_alloc_pd(res->ctx);
	res->cq = ibv_create_cq(res->ctx, 64, NULL, NULL, 0);
	if (!res->pd || !res->cq)
		return -1;
	*state = res;
	return 0;
}

int tu_teardown(void **state)
{
	struct tu_res *res = *state;

	if (!res)
		return 0;
	if (res->cq && ibv_destroy_cq(res->cq))
		return -1;
	if (res->pd && ibv_dealloc_pd(res->pd))
		return -1;
	if (ibv_close_device(res->ctx))
		return -1;
	free(res);
	*state = NULL;
	return 0;
}

struct ibv_qp *tu_create_qp(struct tu_res *res, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = res->cq,
		.recv_cq = res->cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
		.qp_type = type,
	};

	return ibv_create_qp(res->pd, &attr);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

int tu_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc, int timeout_ms)
{
	long long end = now_ms() + timeout_ms;
	int got = 0;

	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		assert_true(r >= 0);
		got += r;
		if (got < n && now_ms() > end)
			break;
	}
	return got;
}
