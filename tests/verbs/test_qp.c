/*
 * Black-box tests of QP creation, query and destruction through the public verbs API.
 *
 * Expected behaviour is rdma-core's with a kernel provider (rxe, mlx5): create errors are
 * NULL + errno, modify/query/destroy return the positive errno, and an object that a QP
 * uses (PD, CQ, SRQ) cannot be destroyed before the QP (uverbs: ib_destroy_usecnt,
 * EBUSY).
 */
#include "verbs/sv_test_util.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_QPS 64

struct env {
	struct tu_res *res;
	struct ibv_device_attr dev;
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_qp *qps[MAX_QPS];
	int nqps;
};

static const enum ibv_qp_type all_types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };

static const char *type_name(enum ibv_qp_type type)
{
	return type == IBV_QPT_RC ? "RC" : type == IBV_QPT_UC ? "UC" : "UD";
}

static int env_setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	void *res = NULL;

	if (!e || tu_setup(&res))
		return -1;
	e->res = res;
	if (ibv_query_device(e->res->ctx, &e->dev) || ibv_query_port(e->res->ctx, 1, &e->port) ||
	    ibv_query_gid(e->res->ctx, 1, 0, &e->gid))
		return -1;
	*state = e;
	return 0;
}

static int env_teardown(void **state)
{
	struct env *e = *state;
	void *res;
	int rc = 0;

	if (!e)
		return 0;
	for (int i = e->nqps - 1; i >= 0; i--)
		if (ibv_destroy_qp(e->qps[i]))
			rc = -1;
	res = e->res;
	if (tu_teardown(&res))
		rc = -1;
	free(e);
	*state = NULL;
	return rc;
}

/* Tracks @qp so that teardown destroys it if the test stops early. */
static struct ibv_qp *keep(struct env *e, struct ibv_qp *qp)
{
	assert_non_null(qp);
	assert_true(e->nqps < MAX_QPS);
	e->qps[e->nqps++] = qp;
	return qp;
}

static void destroy(struct env *e, struct ibv_qp *qp)
{
	for (int i = 0; i < e->nqps; i++)
		if (e->qps[i] == qp) {
			e->qps[i] = e->qps[--e->nqps];
			break;
		}
	assert_int_equal(ibv_destroy_qp(qp), 0);
}

static struct ibv_qp_init_attr init_attr(struct env *e, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia = {
		.qp_context = e,
		.send_cq = e->res->cq,
		.recv_cq = e->res->cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = 32 },
		.qp_type = type,
	};

	return ia;
}

static void assert_cap_at_least(const struct ibv_qp_cap *got, const struct ibv_qp_cap *asked)
{
	assert_true(got->max_send_wr >= asked->max_send_wr);
	assert_true(got->max_recv_wr >= asked->max_recv_wr);
	assert_true(got->max_send_sge >= asked->max_send_sge);
	assert_true(got->max_recv_sge >= asked->max_recv_sge);
	assert_true(got->max_inline_data >= asked->max_inline_data);
}

/* ---- create ------------------------------------------------------------------------- */

/* A new QP of each type: non-zero distinct 24-bit number, RESET, type and objects echoed,
 * capacities at least those asked for, and ibv_query_qp agrees. */
static void test_create_reports_new_reset_qp(void **state)
{
	struct env *e = *state;
	uint32_t nums[12];
	int n = 0;

	for (int round = 0; round < 4; round++) {
		for (size_t k = 0; k < ARRAY_LEN(all_types); k++) {
			struct ibv_qp_init_attr ia = init_attr(e, all_types[k]), qia;
			struct ibv_qp_cap asked = ia.cap;
			struct ibv_qp_attr qa;
			struct ibv_qp *qp = keep(e, ibv_create_qp(e->res->pd, &ia));

			assert_true(qp->qp_num != 0);
			assert_true(qp->qp_num != 1); /* QP1 is the GSI QP */
			assert_true(qp->qp_num <= 0xffffff);
			for (int i = 0; i < n; i++)
				assert_true(nums[i] != qp->qp_num);
			nums[n++] = qp->qp_num;

			assert_int_equal(qp->state, IBV_QPS_RESET);
			assert_int_equal(qp->qp_type, all_types[k]);
			assert_ptr_equal(qp->context, e->res->ctx);
			assert_ptr_equal(qp->pd, e->res->pd);
			assert_ptr_equal(qp->send_cq, e->res->cq);
			assert_ptr_equal(qp->recv_cq, e->res->cq);
			assert_null(qp->srq);
			assert_ptr_equal(qp->qp_context, e);
			assert_cap_at_least(&ia.cap, &asked);

			memset(&qa, 0, sizeof(qa));
			memset(&qia, 0, sizeof(qia));
			assert_int_equal(ibv_query_qp(qp, &qa, IBV_QP_STATE | IBV_QP_CAP, &qia), 0);
			assert_int_equal(qa.qp_state, IBV_QPS_RESET);
			assert_int_equal(qia.qp_type, all_types[k]);
			assert_ptr_equal(qia.send_cq, e->res->cq);
			assert_ptr_equal(qia.recv_cq, e->res->cq);
			assert_null(qia.srq);
			assert_int_equal(qia.cap.max_send_wr, ia.cap.max_send_wr);
			assert_int_equal(qia.cap.max_recv_wr, ia.cap.max_recv_wr);
			assert_int_equal(qia.cap.max_send_sge, ia.cap.max_send_sge);
			assert_int_equal(qia.cap.max_recv_sge, ia.cap.max_recv_sge);
			assert_int_equal(qia.cap.max_inline_data, ia.cap.max_inline_data);
		}
	}
}

/* Capacities exactly at the device limits are accepted. */
static void test_create_at_device_limits(void **state)
{
	struct env *e = *state;
	struct ibv_cq *cq = ibv_create_cq(e->res->ctx, 16, NULL, NULL, 0);

	assert_non_null(cq);
	for (int which = 0; which < 4; which++) {
		struct ibv_qp_init_attr ia = init_attr(e, IBV_QPT_RC);
		struct ibv_qp *qp;

		ia.send_cq = ia.recv_cq = cq;
		switch (which) {
		case 0: ia.cap.max_send_wr = (uint32_t)e->dev.max_qp_wr; break;
		case 1: ia.cap.max_recv_wr = (uint32_t)e->dev.max_qp_wr; break;
		case 2: ia.cap.max_send_sge = (uint32_t)e->dev.max_sge; break;
		case 3: ia.cap.max_recv_sge = (uint32_t)e->dev.max_sge; break;
		}
		qp = ibv_create_qp(e->res->pd, &ia);
		if (!qp)
			fail_msg("capacity %d at the device limit refused: errno %d", which, errno);
		assert_int_equal(ibv_destroy_qp(qp), 0);
	}
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

/* rxe_qp_chk_cap / mlx5 calc_sq_size: a capacity above the device's is EINVAL. */
static void test_create_rejects_capacity_above_limits(void **state)
{
	static const char *const what[] = { "max_send_wr", "max_recv_wr", "max_send_sge",
					     "max_recv_sge", "max_inline_data" };
	struct env *e = *state;
	int bad = 0;

	for (size_t k = 0; k < ARRAY_LEN(all_types); k++) {
		for (int which = 0; which < 5; which++) {
			struct ibv_qp_init_attr ia = init_attr(e, all_types[k]);
			struct ibv_qp *qp;

			switch (which) {
			case 0: ia.cap.max_send_wr = (uint32_t)e->dev.max_qp_wr + 1; break;
			case 1: ia.cap.max_recv_wr = (uint32_t)e->dev.max_qp_wr + 1; break;
			case 2: ia.cap.max_send_sge = (uint32_t)e->dev.max_sge + 1; break;
			case 3: ia.cap.max_recv_sge = (uint32_t)e->dev.max_sge + 1; break;
			case 4: ia.cap.max_inline_data = 1u << 20; break;
			}
			errno = 0;
			qp = ibv_create_qp(e->res->pd, &ia);
			if (qp || errno != EINVAL) {
				print_error("%s with %s above the limit: qp %p, errno %d (want NULL, "
					    "EINVAL)\n",
					    type_name(all_types[k]), what[which], (void *)qp, errno);
				bad++;
				if (qp)
					keep(e, qp);
			}
		}
	}
	assert_int_equal(bad, 0);
}

/*
 * Types softverbs does not provide. rxe_qp_chk_init answers EOPNOTSUPP for every type but
 * RC/UC/UD/GSI; uverbs answers EPERM for RAW_PACKET without CAP_NET_RAW; EINVAL is what
 * an implementation that validates the type up front gives.
 */
static void test_create_rejects_unsupported_types(void **state)
{
	static const struct {
		enum ibv_qp_type type;
		const char *name;
	} types[] = {
		{ IBV_QPT_XRC_SEND, "XRC_SEND" },
		{ IBV_QPT_XRC_RECV, "XRC_RECV" },
		{ IBV_QPT_RAW_PACKET, "RAW_PACKET" },
		{ (enum ibv_qp_type)0x77, "type 0x77" },
	};
	struct env *e = *state;
	int bad = 0;

	for (size_t k = 0; k < ARRAY_LEN(types); k++) {
		struct ibv_qp_init_attr ia = init_attr(e, types[k].type);
		struct ibv_qp *qp;
		bool ok_errno;

		errno = 0;
		qp = ibv_create_qp(e->res->pd, &ia);
		ok_errno = errno == EOPNOTSUPP || errno == EINVAL ||
			   (types[k].type == IBV_QPT_RAW_PACKET && errno == EPERM);
		if (qp || !ok_errno) {
			print_error("%s: qp %p, errno %d (want NULL, EOPNOTSUPP or EINVAL)\n",
				    types[k].name, (void *)qp, errno);
			bad++;
			if (qp)
				keep(e, qp);
		}
	}
	assert_int_equal(bad, 0);
}

/* rxe_qp_chk_init: a QP needs both CQs (no SRQ here). */
static void test_create_rejects_missing_cq(void **state)
{
	struct env *e = *state;

	for (size_t k = 0; k < ARRAY_LEN(all_types); k++) {
		for (int which = 0; which < 3; which++) {
			struct ibv_qp_init_attr ia = init_attr(e, all_types[k]);
			struct ibv_qp *qp;

			if (which != 1)
				ia.send_cq = NULL;
			if (which != 0)
				ia.recv_cq = NULL;
			errno = 0;
			qp = ibv_create_qp(e->res->pd, &ia);
			if (qp)
				keep(e, qp);
			if (qp || errno != EINVAL)
				fail_msg("%s without %s: qp %p, errno %d (want NULL, EINVAL)",
					 type_name(all_types[k]),
					 which == 0 ? "send_cq" : which == 1 ? "recv_cq" : "CQs",
					 (void *)qp, errno);
		}
	}
}

/* Objects of another context (another uverbs file) are not found: EINVAL. */
static void test_create_rejects_objects_of_another_context(void **state)
{
	struct env *e = *state;
	struct ibv_context *ctx2 = tu_open();
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx2);
	struct ibv_cq *cq2 = ibv_create_cq(ctx2, 16, NULL, NULL, 0);
	int bad = 0;

	assert_non_null(pd2);
	assert_non_null(cq2);
	for (int which = 0; which < 3; which++) {
		struct ibv_qp_init_attr ia = init_attr(e, IBV_QPT_RC);
		struct ibv_pd *pd = e->res->pd;
		struct ibv_qp *qp;

		if (which == 0)
			ia.send_cq = cq2;
		else if (which == 1)
			ia.recv_cq = cq2;
		else
			pd = pd2;
		errno = 0;
		qp = ibv_create_qp(pd, &ia);
		if (qp || errno != EINVAL) {
			print_error("QP with %s of another context: qp %p, errno %d (want NULL, "
				    "EINVAL)\n",
				    which == 0 ? "send CQ" : which == 1 ? "recv CQ" : "CQs (PD)",
				    (void *)qp, errno);
			bad++;
			if (qp)
				assert_int_equal(ibv_destroy_qp(qp), 0);
		}
	}
	assert_int_equal(ibv_destroy_cq(cq2), 0);
	assert_int_equal(ibv_dealloc_pd(pd2), 0);
	assert_int_equal(ibv_close_device(ctx2), 0);
	assert_int_equal(bad, 0);
}

/* ---- modify / query ----------------------------------------------------------------- */

static uint8_t pick_rd(struct env *e)
{
	int lim = e->dev.max_qp_rd_atom < e->dev.max_qp_init_rd_atom ? e->dev.max_qp_rd_atom :
								       e->dev.max_qp_init_rd_atom;

	/* a power of two, so that providers that round up (rxe) report it unchanged */
	return lim >= 4 ? 4 : lim >= 2 ? 2 : lim >= 1 ? 1 : 0;
}

static void fill_ah(struct env *e, struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->is_global = 1;
	ah->grh.dgid = e->gid;
	ah->grh.sgid_index = 0;
	ah->grh.hop_limit = 64;
	ah->dlid = e->port.lid;
	ah->port_num = 1;
}

static enum ibv_mtu pick_mtu(struct env *e)
{
	return e->port.active_mtu < IBV_MTU_1024 ? e->port.active_mtu : IBV_MTU_1024;
}

/* Values distinct from defaults, so that an echo cannot be a coincidence. */
struct conn {
	uint32_t dest_qpn;
	uint32_t rq_psn, sq_psn;
	uint32_t qkey;
	int access;
	enum ibv_mtu mtu;
	uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer, rd, drd;
};

static struct conn conn_values(struct env *e, uint32_t dest_qpn)
{
	struct conn c = {
		.dest_qpn = dest_qpn,
		.rq_psn = 0x123456,
		.sq_psn = 0x654321,
		.qkey = 0x1234abcd,
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
		.mtu = pick_mtu(e),
		.timeout = 17,
		.retry_cnt = 6,
		.rnr_retry = 5,
		.min_rnr_timer = 11,
		.rd = pick_rd(e),
		.drd = pick_rd(e),
	};

	return c;
}

static int to_init(struct ibv_qp *qp, const struct conn *c)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1 };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	if (qp->qp_type == IBV_QPT_UD) {
		a.qkey = c->qkey;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = qp->qp_type == IBV_QPT_RC ? c->access : IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	return ibv_modify_qp(qp, &a, mask);
}

static int to_rtr(struct env *e, struct ibv_qp *qp, const struct conn *c)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	int mask = IBV_QP_STATE;

	if (qp->qp_type != IBV_QPT_UD) {
		a.path_mtu = c->mtu;
		a.dest_qp_num = c->dest_qpn;
		a.rq_psn = c->rq_psn;
		fill_ah(e, &a.ah_attr);
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	}
	if (qp->qp_type == IBV_QPT_RC) {
		a.max_dest_rd_atomic = c->drd;
		a.min_rnr_timer = c->min_rnr_timer;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	return ibv_modify_qp(qp, &a, mask);
}

static int to_rts(struct ibv_qp *qp, const struct conn *c)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .sq_psn = c->sq_psn };
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;

	if (qp->qp_type == IBV_QPT_RC) {
		a.timeout = c->timeout;
		a.retry_cnt = c->retry_cnt;
		a.rnr_retry = c->rnr_retry;
		a.max_rd_atomic = c->rd;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return ibv_modify_qp(qp, &a, mask);
}

static const int query_all = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY |
			     IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
			     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
			     IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			     IBV_QP_CAP | IBV_QP_DEST_QPN;

/* ibv_query_qp of a connected RC QP returns every attribute the modifies set, and the
 * creation attributes (cap, type, sq_sig_all). */
static void test_query_returns_rc_connection_attributes(void **state)
{
	struct env *e = *state;
	struct ibv_qp *peer = keep(e, tu_create_qp(e->res, IBV_QPT_RC));
	struct ibv_qp_init_attr ia = init_attr(e, IBV_QPT_RC), qia;
	struct ibv_qp *qp;
	struct ibv_qp_attr qa;
	struct conn c = conn_values(e, peer->qp_num);

	ia.sq_sig_all = 1;
	qp = keep(e, ibv_create_qp(e->res->pd, &ia));
	assert_int_equal(to_init(qp, &c), 0);
	assert_int_equal(to_rtr(e, qp, &c), 0);
	assert_int_equal(to_rts(qp, &c), 0);

	memset(&qa, 0, sizeof(qa));
	memset(&qia, 0, sizeof(qia));
	assert_int_equal(ibv_query_qp(qp, &qa, query_all, &qia), 0);
	assert_int_equal(qa.qp_state, IBV_QPS_RTS);
	assert_int_equal(qa.dest_qp_num, peer->qp_num);
	assert_int_equal(qa.path_mtu, c.mtu);
	assert_int_equal(qa.rq_psn, c.rq_psn);
	assert_int_equal(qa.sq_psn, c.sq_psn);
	assert_int_equal(qa.qp_access_flags, c.access);
	assert_int_equal(qa.pkey_index, 0);
	assert_int_equal(qa.port_num, 1);
	assert_int_equal(qa.timeout, c.timeout);
	assert_int_equal(qa.retry_cnt, c.retry_cnt);
	assert_int_equal(qa.rnr_retry, c.rnr_retry);
	assert_int_equal(qa.min_rnr_timer, c.min_rnr_timer);
	assert_int_equal(qa.max_rd_atomic, c.rd);
	assert_int_equal(qa.max_dest_rd_atomic, c.drd);
	assert_int_equal(qa.ah_attr.is_global, 1);
	assert_memory_equal(qa.ah_attr.grh.dgid.raw, e->gid.raw, sizeof(e->gid.raw));
	assert_int_equal(qa.ah_attr.grh.sgid_index, 0);
	assert_int_equal(qa.ah_attr.grh.hop_limit, 64);
	assert_int_equal(qa.ah_attr.port_num, 1);

	assert_int_equal(qia.qp_type, IBV_QPT_RC);
	assert_int_equal(qia.sq_sig_all, 1);
	assert_ptr_equal(qia.send_cq, e->res->cq);
	assert_ptr_equal(qia.recv_cq, e->res->cq);
	assert_int_equal(qia.cap.max_send_wr, ia.cap.max_send_wr);
	assert_int_equal(qia.cap.max_recv_wr, ia.cap.max_recv_wr);
	assert_int_equal(qia.cap.max_send_sge, ia.cap.max_send_sge);
	assert_int_equal(qia.cap.max_recv_sge, ia.cap.max_recv_sge);
	assert_int_equal(qia.cap.max_inline_data, ia.cap.max_inline_data);
	assert_int_equal(qa.cap.max_send_wr, ia.cap.max_send_wr);
	assert_int_equal(qa.cap.max_recv_wr, ia.cap.max_recv_wr);
}

/* UC and UD report the attributes of their own transitions. */
static void test_query_returns_uc_ud_attributes(void **state)
{
	struct env *e = *state;
	struct ibv_qp *peer = keep(e, tu_create_qp(e->res, IBV_QPT_UC));
	struct ibv_qp *uc = keep(e, tu_create_qp(e->res, IBV_QPT_UC));
	struct ibv_qp *ud = keep(e, tu_create_qp(e->res, IBV_QPT_UD));
	struct conn c = conn_values(e, peer->qp_num);
	struct ibv_qp_init_attr qia;
	struct ibv_qp_attr qa;

	assert_int_equal(to_init(uc, &c), 0);
	assert_int_equal(to_rtr(e, uc, &c), 0);
	assert_int_equal(to_rts(uc, &c), 0);
	memset(&qa, 0, sizeof(qa));
	assert_int_equal(ibv_query_qp(uc, &qa, query_all, &qia), 0);
	assert_int_equal(qa.qp_state, IBV_QPS_RTS);
	assert_int_equal(qa.dest_qp_num, peer->qp_num);
	assert_int_equal(qa.path_mtu, c.mtu);
	assert_int_equal(qa.rq_psn, c.rq_psn);
	assert_int_equal(qa.sq_psn, c.sq_psn);
	assert_int_equal(qa.qp_access_flags, IBV_ACCESS_REMOTE_WRITE);
	assert_int_equal(qa.ah_attr.is_global, 1);
	assert_memory_equal(qa.ah_attr.grh.dgid.raw, e->gid.raw, sizeof(e->gid.raw));
	assert_int_equal(qa.ah_attr.grh.sgid_index, 0);
	assert_int_equal(qia.qp_type, IBV_QPT_UC);

	assert_int_equal(to_init(ud, &c), 0);
	assert_int_equal(to_rtr(e, ud, &c), 0);
	assert_int_equal(to_rts(ud, &c), 0);
	memset(&qa, 0, sizeof(qa));
	assert_int_equal(ibv_query_qp(ud, &qa, query_all, &qia), 0);
	assert_int_equal(qa.qp_state, IBV_QPS_RTS);
	assert_int_equal(qa.qkey, c.qkey);
	assert_int_equal(qa.sq_psn, c.sq_psn);
	assert_int_equal(qa.pkey_index, 0);
	assert_int_equal(qa.port_num, 1);
	assert_int_equal(qia.qp_type, IBV_QPT_UD);
}

/* sq_sig_all is echoed by ibv_query_qp as created, 0 or 1. */
static void test_query_echoes_sq_sig_all(void **state)
{
	struct env *e = *state;

	for (int sig = 0; sig <= 1; sig++) {
		struct ibv_qp_init_attr ia = init_attr(e, IBV_QPT_UD), qia;
		struct ibv_qp_attr qa;
		struct ibv_qp *qp;

		ia.sq_sig_all = sig;
		qp = keep(e, ibv_create_qp(e->res->pd, &ia));
		memset(&qia, 0xff, sizeof(qia));
		assert_int_equal(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia), 0);
		assert_int_equal(qia.sq_sig_all, sig);
		destroy(e, qp);
	}
}

/* libibverbs keeps qp->state in step with every successful modify carrying IBV_QP_STATE,
 * and only those. */
static void test_state_field_follows_modify(void **state)
{
	struct env *e = *state;

	for (size_t k = 0; k < ARRAY_LEN(all_types); k++) {
		struct ibv_qp *peer = keep(e, tu_create_qp(e->res, all_types[k]));
		struct ibv_qp *qp = keep(e, tu_create_qp(e->res, all_types[k]));
		struct conn c = conn_values(e, peer->qp_num);
		struct ibv_qp_attr a;

		assert_int_equal(qp->state, IBV_QPS_RESET);
		/* refused: RESET -> RTR */
		a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
		assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
		assert_int_equal(qp->state, IBV_QPS_RESET);
		assert_int_equal(to_init(qp, &c), 0);
		assert_int_equal(qp->state, IBV_QPS_INIT);
		assert_int_equal(to_rtr(e, qp, &c), 0);
		assert_int_equal(qp->state, IBV_QPS_RTR);
		/* refused: RTR -> INIT */
		a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT };
		assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
		assert_int_equal(qp->state, IBV_QPS_RTR);
		assert_int_equal(to_rts(qp, &c), 0);
		assert_int_equal(qp->state, IBV_QPS_RTS);
		/* accepted without IBV_QP_STATE: the state does not move */
		if (all_types[k] == IBV_QPT_UD) {
			a = (struct ibv_qp_attr){ .qkey = 7 };
			assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_QKEY), 0);
		} else {
			a = (struct ibv_qp_attr){ .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
			assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_ACCESS_FLAGS), 0);
		}
		assert_int_equal(qp->state, IBV_QPS_RTS);
		a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_ERR };
		assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
		assert_int_equal(qp->state, IBV_QPS_ERR);
		a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RESET };
		assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
		assert_int_equal(qp->state, IBV_QPS_RESET);
		destroy(e, qp);
		destroy(e, peer);
	}
}

/* ---- destroy ------------------------------------------------------------------------ */

static void test_destroy_qp(void **state)
{
	struct env *e = *state;

	for (size_t k = 0; k < ARRAY_LEN(all_types); k++) {
		struct ibv_qp *fresh = tu_create_qp(e->res, all_types[k]);
		struct ibv_qp *used = keep(e, tu_create_qp(e->res, all_types[k]));
		struct ibv_qp *peer = keep(e, tu_create_qp(e->res, all_types[k]));
		struct conn c = conn_values(e, peer->qp_num);

		assert_non_null(fresh);
		assert_int_equal(ibv_destroy_qp(fresh), 0);
		/* a connected QP goes as well */
		assert_int_equal(to_init(used, &c), 0);
		assert_int_equal(to_rtr(e, used, &c), 0);
		assert_int_equal(to_rts(used, &c), 0);
		destroy(e, used);
		destroy(e, peer);
	}
}

/* uverbs ib_destroy_usecnt: a PD or CQ a QP uses is EBUSY until the QP is gone, and
 * the refused destroy leaves both usable. */
static void test_pd_and_cq_busy_while_qp_exists(void **state)
{
	struct env *e = *state;
	struct ibv_pd *pd = ibv_alloc_pd(e->res->ctx);
	struct ibv_cq *scq = ibv_create_cq(e->res->ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(e->res->ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = init_attr(e, IBV_QPT_RC);
	struct ibv_qp *qp;
	struct conn c = conn_values(e, 0);
	int rc_pd, rc_scq, rc_rcq;

	assert_non_null(pd);
	assert_non_null(scq);
	assert_non_null(rcq);
	ia.send_cq = scq;
	ia.recv_cq = rcq;
	qp = ibv_create_qp(pd, &ia);
	assert_non_null(qp);

	rc_pd = ibv_dealloc_pd(pd);
	rc_scq = ibv_destroy_cq(scq);
	rc_rcq = ibv_destroy_cq(rcq);
	if (rc_pd != EBUSY || rc_scq != EBUSY || rc_rcq != EBUSY)
		fail_msg("destroy while a QP uses them: PD %d, send CQ %d, recv CQ %d (want "
			 "EBUSY each); objects leaked",
			 rc_pd, rc_scq, rc_rcq);
	assert_int_equal(to_init(qp, &c), 0);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_cq(scq), 0);
	assert_int_equal(ibv_destroy_cq(rcq), 0);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
}

/* A QP on an SRQ: qp->srq is set, the SRQ is EBUSY until the QP is destroyed. */
static void test_srq_busy_while_qp_attached(void **state)
{
	struct env *e = *state;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(e->res->pd, &sa);
	struct ibv_qp_init_attr ia = init_attr(e, IBV_QPT_RC), qia;
	struct ibv_qp_attr qa;
	struct ibv_qp *qp;
	int rc;

	assert_non_null(srq);
	ia.srq = srq;
	qp = ibv_create_qp(e->res->pd, &ia);
	assert_non_null(qp);
	assert_ptr_equal(qp->srq, srq);
	memset(&qia, 0, sizeof(qia));
	assert_int_equal(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia), 0);
	assert_ptr_equal(qia.srq, srq);

	rc = ibv_destroy_srq(srq);
	if (rc != EBUSY)
		fail_msg("ibv_destroy_srq with a QP attached returned %d, want EBUSY", rc);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_srq(srq), 0);
}

/* With an SRQ the QP has no receive queue of its own: its receive capacities are not
 * checked (rxe_qp_chk_cap has_srq, mlx5 set_rq_size). */
static void test_srq_qp_ignores_recv_caps(void **state)
{
	struct env *e = *state;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(e->res->pd, &sa);
	struct ibv_qp_init_attr ia = init_attr(e, IBV_QPT_RC);
	struct ibv_qp *qp;

	assert_non_null(srq);
	ia.srq = srq;
	ia.cap.max_recv_wr = (uint32_t)e->dev.max_qp_wr + 1;
	ia.cap.max_recv_sge = (uint32_t)e->dev.max_sge + 1;
	qp = ibv_create_qp(e->res->pd, &ia);
	if (!qp) {
		int err = errno;

		assert_int_equal(ibv_destroy_srq(srq), 0);
		fail_msg("SRQ QP with out-of-range receive caps refused: errno %d", err);
	}
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_srq(srq), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, env_setup, env_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_create_reports_new_reset_qp),
		T(test_create_at_device_limits),
		T(test_create_rejects_capacity_above_limits),
		T(test_create_rejects_unsupported_types),
		T(test_create_rejects_missing_cq),
		T(test_create_rejects_objects_of_another_context),
		T(test_query_returns_rc_connection_attributes),
		T(test_query_returns_uc_ud_attributes),
		T(test_query_echoes_sq_sig_all),
		T(test_state_field_follows_modify),
		T(test_destroy_qp),
		T(test_pd_and_cq_busy_while_qp_exists),
		T(test_srq_busy_while_qp_attached),
		T(test_srq_qp_ignores_recv_caps),
	};

	return cmocka_run_group_tests_name("verbs_qp", tests, NULL, NULL);
}
