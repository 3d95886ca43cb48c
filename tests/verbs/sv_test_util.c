#include "verbs/sv_test_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
	char why[160];
	int rc = 0;

	if (!res)
		return 0;
	/* Every async event the test caused, it waited for: none may be left. Checked
	 * before the QPs go (destroying an object drops the events about it). */
	if (tu_async_leftover(res->ctx, why, sizeof(why))) {
		fprintf(stderr, "tu_res_close: %s\n", why);
		rc = -1;
	}
	if (tu_destroy_kept_qps(res))
		rc = -1;
	if (res->cq && tu_cq_leftover(res->cq, why, sizeof(why))) {
		fprintf(stderr, "tu_res_close: the fixture's CQ: %s\n", why);
		rc = -1;
	}
	if (res->cq && ibv_destroy_cq(res->cq))
		rc = -1;
	if (res->pd && ibv_dealloc_pd(res->pd))
		rc = -1;
	if (tu_async_leftover(res->ctx, why, sizeof(why))) {
		fprintf(stderr, "tu_res_close: %s\n", why);
		rc = -1;
	}
	if (ibv_close_device(res->ctx))
		rc = -1;
	free(res);
	return rc;
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

int tu_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* less the directory's own */
}

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

int tu_poll_exact(struct ibv_cq *cq, int n, struct ibv_wc *wc, int timeout_ms)
{
	struct ibv_wc extra;
	int got = tu_poll(cq, n, wc, timeout_ms);

	if (got == n && ibv_poll_cq(cq, 1, &extra) != 0)
		fail_msg("a completion beyond the %d expected: wr_id %llu status %s opcode %d", n,
			 (unsigned long long)extra.wr_id, ibv_wc_status_str(extra.status),
			 extra.opcode);
	return got;
}

bool tu_cq_leftover(struct ibv_cq *cq, char *msg, size_t len)
{
	struct ibv_wc wc;
	int n = 0, r;
	size_t at = 0;

	msg[0] = 0;
	while ((r = ibv_poll_cq(cq, 1, &wc)) == 1) {
		if (n++ < 4 && at < len)
			at += (size_t)snprintf(msg + at, len - at, "%sleft on the CQ: wr_id %llu %s",
					       n > 1 ? "; " : "", (unsigned long long)wc.wr_id,
					       ibv_wc_status_str(wc.status));
		if (n > 100000)
			break;
	}
	if (n > 4 && at < len)
		snprintf(msg + at, len - at, " (%d in all)", n);
	return n > 0;
}

/* ---- async events ------------------------------------------------------------------- */

const char *tu_event_str(const struct ibv_async_event *ev)
{
	static __thread char s[128];
	const char *name = ibv_event_type_str(ev->event_type);

	switch (ev->event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		snprintf(s, sizeof(s), "%s about QP %u", name,
			 ev->element.qp ? ev->element.qp->qp_num : 0);
		break;
	case IBV_EVENT_CQ_ERR:
		snprintf(s, sizeof(s), "%s about CQ %p", name, (void *)ev->element.cq);
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		snprintf(s, sizeof(s), "%s about SRQ %p", name, (void *)ev->element.srq);
		break;
	default:
		snprintf(s, sizeof(s), "%s (port %d)", name, ev->element.port_num);
	}
	return s;
}

int tu_next_async(struct ibv_context *ctx, int timeout_ms, struct ibv_async_event *out,
		  char *desc, size_t len)
{
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;
	int flags, rc;

	if (poll(&pfd, 1, timeout_ms < 0 ? 0 : timeout_ms) <= 0)
		return 0;
	/* Readable: the read must not block even if the event went away meanwhile. */
	flags = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK);
	rc = ibv_get_async_event(ctx, &ev);
	fcntl(ctx->async_fd, F_SETFL, flags);
	if (rc)
		return 0;
	if (desc)
		snprintf(desc, len, "%s", tu_event_str(&ev));
	ibv_ack_async_event(&ev);
	if (out)
		*out = ev;
	return 1;
}

bool tu_async_leftover(struct ibv_context *ctx, char *msg, size_t len)
{
	char d[128];
	size_t at = 0;
	int n = 0;

	msg[0] = 0;
	while (n < 16 && tu_next_async(ctx, 0, NULL, d, sizeof(d))) {
		if (at < len)
			at += (size_t)snprintf(msg + at, len - at, "%sunexpected async event %s",
					       n ? "; " : "", d);
		n++;
	}
	return n > 0;
}

bool tu_wait_qp_event(struct ibv_context *ctx, struct ibv_qp *qp, enum ibv_event_type type,
		      int timeout_ms)
{
	long long end = tu_now_ms() + timeout_ms;
	struct ibv_async_event ev;
	char d[128];

	if (!tu_next_async(ctx, (int)(end - tu_now_ms()), &ev, d, sizeof(d)))
		return false;
	if (ev.event_type != type || ev.element.qp != qp)
		fail_msg("waiting for %s about QP %u: unexpected async event %s",
			 ibv_event_type_str(type), qp->qp_num, d);
	return true;
}

bool tu_wire_iwarp(void)
{
	const char *w = getenv("SOFTVERBS_WIRE");

	return w && !strcmp(w, "iwarp");
}

bool tu_wire_roce(void)
{
	const char *w = getenv("SOFTVERBS_WIRE");

	return w && !strcmp(w, "roce");
}
