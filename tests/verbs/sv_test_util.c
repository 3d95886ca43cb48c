#include "verbs/sv_test_util.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
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

struct tu_res *tu_res_open(void)
{
	struct tu_res *res = calloc(1, sizeof(*res));

	if (!res)
		return NULL;
	res->ctx = tu_open();
	res->pd = ibv_alloc_pd(res->ctx);
	res->cq = ibv_create_cq(res->ctx, 64, NULL, NULL, 0);
	if (!res->pd || !res->cq)
		return NULL;
	if (ibv_query_device(res->ctx, &res->dev) || ibv_query_port(res->ctx, 1, &res->port) ||
	    ibv_query_gid(res->ctx, 1, 0, &res->gid))
		return NULL;
	return res;
}

int tu_res_close(struct tu_res *res)
{
	if (!res)
		return 0;
	if (tu_destroy_kept_qps(res))
		return -1;
	if (res->cq && ibv_destroy_cq(res->cq))
		return -1;
	if (res->pd && ibv_dealloc_pd(res->pd))
		return -1;
	if (ibv_close_device(res->ctx))
		return -1;
	free(res);
	return 0;
}

int tu_setup(void **state)
{
	*state = tu_res_open();
	return *state ? 0 : -1;
}

int tu_teardown(void **state)
{
	int rc = tu_res_close(*state);

	*state = NULL;
	return rc;
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

/* ---- kept QPs ----------------------------------------------------------------------- */

struct ibv_qp *tu_keep_qp(struct tu_res *res, struct ibv_qp *qp)
{
	if (!qp)
		fail_msg("QP creation failed: errno %d", errno);
	assert_true(res->nqps < TU_MAX_QPS);
	res->qps[res->nqps++] = qp;
	return qp;
}

void tu_destroy_qp(struct tu_res *res, struct ibv_qp *qp)
{
	for (int i = 0; i < res->nqps; i++)
		if (res->qps[i] == qp) {
			res->qps[i] = res->qps[--res->nqps];
			assert_int_equal(ibv_destroy_qp(qp), 0);
			return;
		}
	fail_msg("tu_destroy_qp: QP %u is not kept", qp->qp_num);
}

int tu_destroy_kept_qps(struct tu_res *res)
{
	int rc = 0;

	while (res->nqps > 0)
		if (ibv_destroy_qp(res->qps[--res->nqps]))
			rc = -1;
	return rc;
}

const char *tu_qp_type_str(enum ibv_qp_type type)
{
	static char other[32];

	switch (type) {
	case IBV_QPT_RC: return "RC";
	case IBV_QPT_UC: return "UC";
	case IBV_QPT_UD: return "UD";
	case IBV_QPT_XRC_SEND: return "XRC_SEND";
	case IBV_QPT_XRC_RECV: return "XRC_RECV";
	default:
		snprintf(other, sizeof(other), "QP type %d", (int)type);
		return other;
	}
}

/* ---- connecting a QP ---------------------------------------------------------------- */

void tu_fill_ah(const struct tu_res *res, struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->is_global = 1;
	ah->grh.dgid = res->gid;
	ah->grh.sgid_index = 0;
	ah->grh.hop_limit = 64;
	ah->dlid = res->port.lid;
	ah->port_num = 1;
}

void tu_conn_init(struct tu_conn *c, const struct tu_res *res, uint32_t dest_qpn)
{
	memset(c, 0, sizeof(*c));
	c->dest_qpn = dest_qpn;
	tu_fill_ah(res, &c->ah);
	c->mtu = res->port.active_mtu < IBV_MTU_1024 ? res->port.active_mtu : IBV_MTU_1024;
	c->qkey = 0x11111111;
	c->access = IBV_ACCESS_REMOTE_WRITE;
	c->min_rnr_timer = 12;
	c->timeout = 14;
	c->retry_cnt = 7;
	c->rnr_retry = 7;
}

int tu_qp_to_init(struct ibv_qp *qp, const struct tu_conn *c)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = c->pkey_index,
				 .port_num = 1 };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	if (qp->qp_type == IBV_QPT_UD) {
		a.qkey = c->qkey;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = qp->qp_type == IBV_QPT_UC ?
					    (unsigned int)c->access & IBV_ACCESS_REMOTE_WRITE :
					    (unsigned int)c->access;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	return ibv_modify_qp(qp, &a, mask);
}

int tu_qp_to_rtr(struct ibv_qp *qp, const struct tu_conn *c)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	int mask = IBV_QP_STATE;

	if (qp->qp_type != IBV_QPT_UD) {
		a.path_mtu = c->mtu;
		a.dest_qp_num = c->dest_qpn;
		a.rq_psn = c->rq_psn;
		a.ah_attr = c->ah;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	}
	if (qp->qp_type == IBV_QPT_RC || qp->qp_type == IBV_QPT_XRC_RECV) {
		a.max_dest_rd_atomic = c->max_dest_rd_atomic;
		a.min_rnr_timer = c->min_rnr_timer;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	return ibv_modify_qp(qp, &a, mask);
}

int tu_qp_to_rts(struct ibv_qp *qp, const struct tu_conn *c)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .sq_psn = c->sq_psn };
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;

	if (qp->qp_type == IBV_QPT_XRC_RECV) {
		a.timeout = c->timeout;
		mask |= IBV_QP_TIMEOUT;
	}
	if (qp->qp_type == IBV_QPT_RC || qp->qp_type == IBV_QPT_XRC_SEND) {
		a.timeout = c->timeout;
		a.retry_cnt = c->retry_cnt;
		a.rnr_retry = c->rnr_retry;
		a.max_rd_atomic = c->max_rd_atomic;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return ibv_modify_qp(qp, &a, mask);
}

int tu_qp_connect(struct ibv_qp *qp, const struct tu_conn *c, enum ibv_qp_state target)
{
	int rc = tu_qp_to_init(qp, c);

	if (rc || target == IBV_QPS_INIT)
		return rc;
	rc = tu_qp_to_rtr(qp, c);
	if (rc || target == IBV_QPS_RTR)
		return rc;
	return tu_qp_to_rts(qp, c);
}

enum ibv_qp_state tu_query_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	memset(&a, 0, sizeof(a));
	assert_int_equal(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
	return a.qp_state;
}

/* ---- waiting ------------------------------------------------------------------------ */

long long tu_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

int tu_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc, int timeout_ms)
{
	long long end = tu_now_ms() + timeout_ms;
	int got = 0;

	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		assert_true(r >= 0);
		got += r;
		if (got < n && tu_now_ms() > end)
			break;
	}
	return got;
}

bool tu_wait_qp_event(struct ibv_context *ctx, struct ibv_qp *qp, enum ibv_event_type type,
		      int timeout_ms)
{
	long long end = tu_now_ms() + timeout_ms;

	for (int seen = 0; seen < 32; seen++) {
		struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
		struct ibv_async_event ev;
		long long left = end - tu_now_ms();
		bool match;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			return false;
		if (ibv_get_async_event(ctx, &ev))
			return false;
		match = ev.event_type == type && ev.element.qp == qp;
		ibv_ack_async_event(&ev);
		if (match)
			return true;
	}
	return false;
}
