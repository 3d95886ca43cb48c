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
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const enum ibv_qp_type all_types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };

static struct ibv_qp_init_attr init_attr(struct tu_res *res, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia = {
		.qp_context = res,
		.send_cq = res->cq,
		.recv_cq = res->cq,
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

static void assert_cap_equal(const struct ibv_qp_cap *got, const struct ibv_qp_cap *want)
{
	assert_int_equal(got->max_send_wr, want->max_send_wr);
	assert_int_equal(got->max_recv_wr, want->max_recv_wr);
	assert_int_equal(got->max_send_sge, want->max_send_sge);
	assert_int_equal(got->max_recv_sge, want->max_recv_sge);
	assert_int_equal(got->max_inline_data, want->max_inline_data);
}

/* ---- create ------------------------------------------------------------------------- */

/* A new QP of each type: non-zero distinct 24-bit number, RESET, type and objects echoed,
 * capacities at least those asked for, and ibv_query_qp agrees. */
static void test_create_reports_new_reset_qp(void **state)
{
	struct tu_res *res = *state;
	uint32_t nums[12];
	int n = 0;

	for (int round = 0; round < 4; round++) {
		for (size_t k = 0; k < ARRAY_LEN(all_types); k++) {
			struct ibv_qp_init_attr ia = init_attr(res, all_types[k]), qia;
			struct ibv_qp_cap asked = ia.cap;
			struct ibv_qp_attr qa;
			struct ibv_qp *qp = tu_keep_qp(res, ibv_create_qp(res->pd, &ia));

			assert_true(qp->qp_num != 0);
			assert_true(qp->qp_num != 1); /* QP1 is the GSI QP */
			assert_true(qp->qp_num <= 0xffffff);
			for (int i = 0; i < n; i++)
				assert_true(nums[i] != qp->qp_num);
			nums[n++] = qp->qp_num;

			assert_int_equal(qp->state, IBV_QPS_RESET);
			assert_int_equal(qp->qp_type, all_types[k]);
			assert_ptr_equal(qp->context, res->ctx);
			assert_ptr_equal(qp->pd, res->pd);
			assert_ptr_equal(qp->send_cq, res->cq);
			assert_ptr_equal(qp->recv_cq, res->cq);
			assert_null(qp->srq);
			assert_ptr_equal(qp->qp_context, res);
			assert_cap_at_least(&ia.cap, &asked);

			memset(&qa, 0, sizeof(qa));
			memset(&qia, 0, sizeof(qia));
			assert_int_equal(ibv_query_qp(qp, &qa, IBV_QP_STATE | IBV_QP_CAP, &qia), 0);
			assert_int_equal(qa.qp_state, IBV_QPS_RESET);
			assert_int_equal(qia.qp_type, all_types[k]);
			assert_ptr_equal(qia.send_cq, res->cq);
			assert_ptr_equal(qia.recv_cq, res->cq);
			assert_null(qia.srq);
			assert_cap_equal(&qia.cap, &ia.cap);
		}
	}
}

/* Capacities exactly at the device limits are accepted. */
static void test_create_at_device_limits(void **state)
{
	struct tu_res *res = *state;
	struct ibv_cq *cq = ibv_create_cq(res->ctx, 16, NULL, NULL, 0);

	assert_non_null(cq);
	for (int which = 0; which < 4; which++) {
		struct ibv_qp_init_attr ia = init_attr(res, IBV_QPT_RC);
		struct ibv_qp *qp;

		ia.send_cq = ia.recv_cq = cq;
		switch (which) {
		case 0: ia.cap.max_send_wr = (uint32_t)res->dev.max_qp_wr; break;
		case 1: ia.cap.max_recv_wr = (uint32_t)res->dev.max_qp_wr; break;
		case 2: ia.cap.max_send_sge = (uint32_t)res->dev.max_sge; break;
		case 3: ia.cap.max_recv_sge = (uint32_t)res->dev.max_sge; break;
		}
		qp = ibv_create_qp(res->pd, &ia);
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
	struct tu_res *res = *state;
	int bad = 0;

	for (size_t k = 0; k < ARRAY_LEN(all_types); k++) {
		for (int which = 0; which < 5; which++) {
			struct ibv_qp_init_attr ia = init_attr(res, all_types[k]);
			struct ibv_qp *qp;

			switch (which) {
			case 0: ia.cap.max_send_wr = (uint32_t)res->dev.max_qp_wr + 1; break;
			case 1: ia.cap.max_recv_wr = (uint32_t)res->dev.max_qp_wr + 1; break;
			case 2: ia.cap.max_send_sge = (uint32_t)res->dev.max_sge + 1; break;
			case 3: ia.cap.max_recv_sge = (uint32_t)res->dev.max_sge + 1; break;
			case 4: ia.cap.max_inline_data = 1u << 20; break;
			}
			errno = 0;
			qp = ibv_create_qp(res->pd, &ia);
			if (qp || errno != EINVAL) {
				print_error("%s with %s above the limit: qp %p, errno %d (want NULL, "
					    "EINVAL)\n",
					    tu_qp_type_str(all_types[k]), what[which], (void *)qp,
					    errno);
				bad++;
				if (qp)
					tu_keep_qp(res, qp);
			}
		}
	}
	assert_int_equal(bad, 0);
}

/*
 * Types ibv_create_qp cannot make here. rxe_qp_chk_init answers EOPNOTSUPP for every type
 * but RC/UC/UD/GSI; uverbs answers EPERM for RAW_PACKET without CAP_NET_RAW; EINVAL is
 * what an implementation that validates the type up front gives, and what an XRC target
 * without a domain gets (XRC QPs: test_data_xrc.c).
 */
static void test_create_rejects_unsupported_types(void **state)
{
	static const struct {
		enum ibv_qp_type type;
		const char *name;
	} types[] = {
		{ IBV_QPT_XRC_RECV, "XRC_RECV" },
		{ IBV_QPT_RAW_PACKET, "RAW_PACKET" },
		{ (enum ibv_qp_type)0x77, "type 0x77" },
	};
	struct tu_res *res = *state;
	int bad = 0;

	for (size_t k = 0; k < ARRAY_LEN(types); k++) {
		struct ibv_qp_init_attr ia = init_attr(res, types[k].type);
		struct ibv_qp *qp;
		bool ok_errno;

		errno = 0;
		qp = ibv_create_qp(res->pd, &ia);
		ok_errno = errno == EOPNOTSUPP || errno == EINVAL ||
			   (types[k].type == IBV_QPT_RAW_PACKET && errno == EPERM);
		if (qp || !ok_errno) {
			print_error("%s: qp %p, errno %d (want NULL, EOPNOTSUPP or EINVAL)\n",
				    types[k].name, (void *)qp, errno);
			bad++;
			if (qp)
				tu_keep_qp(res, qp);
		}
	}
	assert_int_equal(bad, 0);
}

/* rxe_qp_chk_init: a QP needs both CQs (no SRQ here). */
static void test_create_rejects_missing_cq(void **state)
{
	struct tu_res *res = *state;

	for (size_t k = 0; k < ARRAY_LEN(all_types); k++) {
		for (int which = 0; which < 3; which++) {
			struct ibv_qp_init_attr ia = init_attr(res, all_types[k]);
			struct ibv_qp *qp;

			if (which != 1)
				ia.send_cq = NULL;
			if (which != 0)
				ia.recv_cq = NULL;
			errno = 0;
			qp = ibv_create_qp(res->pd, &ia);
			if (qp)
				tu_keep_qp(res, qp);
			if (qp || errno != EINVAL)
				fail_msg("%s without %s: qp %p, errno %d (want NULL, EINVAL)",
					 tu_qp_type_str(all_types[k]),
					 which == 0 ? "send_cq" : which == 1 ? "recv_cq" : "CQs",
					 (void *)qp, errno);
		}
	}
}

/* Objects of another context (another uverbs file) are not found: EINVAL. */
static void test_create_rejects_objects_of_another_context(void **state)
{
	struct tu_res *res = *state;
	struct ibv_context *ctx2 = tu_open();
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx2);
	struct ibv_cq *cq2 = ibv_create_cq(ctx2, 16, NULL, NULL, 0);
	int bad = 0;

	assert_non_null(pd2);
	assert_non_null(cq2);
	for (int which = 0; which < 3; which++) {
		struct ibv_qp_init_attr ia = init_attr(res, IBV_QPT_RC);
		struct ibv_pd *pd = res->pd;
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

static uint8_t pick_rd(const struct tu_res *res)
{
	int lim = res->dev.max_qp_rd_atom < res->dev.max_qp_init_rd_atom ?
			  res->dev.max_qp_rd_atom :
			  res->dev.max_qp_init_rd_atom;

	/* a power of two, so that providers that round up (rxe) report it unchanged */
	return lim >= 4 ? 4 : lim >= 2 ? 2 : lim >= 1 ? 1 : 0;
}

/* Values distinct from tu_conn_init's defaults, so that an echo cannot be a coincidence. */
static struct tu_conn conn_values(const struct tu_res *res, uint32_t dest_qpn)
{
	struct tu_conn c;

	tu_conn_init(&c, res, dest_qpn);
	c.rq_psn = 0x123456;
	c.sq_psn = 0x654321;
	c.qkey = 0x1234abcd;
	c.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	c.timeout = 17;
	c.retry_cnt = 6;
	c.rnr_retry = 5;
	c.min_rnr_timer = 11;
	c.max_rd_atomic = pick_rd(res);
	c.max_dest_rd_atomic = pick_rd(res);
	return c;
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
	struct tu_res *res = *state;
	struct ibv_qp *peer = tu_keep_qp(res, tu_create_qp(res, IBV_QPT_RC));
	struct ibv_qp_init_attr ia = init_attr(res, IBV_QPT_RC), qia;
	struct ibv_qp *qp;
	struct ibv_qp_attr qa;
	struct tu_conn c = conn_values(res, peer->qp_num);

	ia.sq_sig_all = 1;
	qp = tu_keep_qp(res, ibv_create_qp(res->pd, &ia));
	assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_RTS), 0);

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
	assert_int_equal(qa.max_rd_atomic, c.max_rd_atomic);
	assert_int_equal(qa.max_dest_rd_atomic, c.max_dest_rd_atomic);
	assert_int_equal(qa.ah_attr.is_global, 1);
	assert_memory_equal(qa.ah_attr.grh.dgid.raw, res->gid.raw, sizeof(res->gid.raw));
	assert_int_equal(qa.ah_attr.grh.sgid_index, 0);
	assert_int_equal(qa.ah_attr.grh.hop_limit, 64);
	assert_int_equal(qa.ah_attr.port_num, 1);

	assert_int_equal(qia.qp_type, IBV_QPT_RC);
	assert_int_equal(qia.sq_sig_all, 1);
	assert_ptr_equal(qia.send_cq, res->cq);
	assert_ptr_equal(qia.recv_cq, res->cq);
	assert_cap_equal(&qia.cap, &ia.cap);
	assert_int_equal(qa.cap.max_send_wr, ia.cap.max_send_wr);
	assert_int_equal(qa.cap.max_recv_wr, ia.cap.max_recv_wr);
}

/* UC and UD report the attributes of their own transitions. */
static void test_query_returns_uc_ud_attributes(void **state)
{
	struct tu_res *res = *state;
	struct ibv_qp *peer = tu_keep_qp(res, tu_create_qp(res, IBV_QPT_UC));
	struct ibv_qp *uc = tu_keep_qp(res, tu_create_qp(res, IBV_QPT_UC));
	struct ibv_qp *ud = tu_keep_qp(res, tu_create_qp(res, IBV_QPT_UD));
	struct tu_conn c = conn_values(res, peer->qp_num);
	struct ibv_qp_init_attr qia;
	struct ibv_qp_attr qa;

	assert_int_equal(tu_qp_connect(uc, &c, IBV_QPS_RTS), 0);
	memset(&qa, 0, sizeof(qa));
	assert_int_equal(ibv_query_qp(uc, &qa, query_all, &qia), 0);
	assert_int_equal(qa.qp_state, IBV_QPS_RTS);
	assert_int_equal(qa.dest_qp_num, peer->qp_num);
	assert_int_equal(qa.path_mtu, c.mtu);
	assert_int_equal(qa.rq_psn, c.rq_psn);
	assert_int_equal(qa.sq_psn, c.sq_psn);
	assert_int_equal(qa.qp_access_flags, IBV_ACCESS_REMOTE_WRITE);
	assert_int_equal(qa.ah_attr.is_global, 1);
	assert_memory_equal(qa.ah_attr.grh.dgid.raw, res->gid.raw, sizeof(res->gid.raw));
	assert_int_equal(qa.ah_attr.grh.sgid_index, 0);
	assert_int_equal(qia.qp_type, IBV_QPT_UC);

	assert_int_equal(tu_qp_connect(ud, &c, IBV_QPS_RTS), 0);
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
	struct tu_res *res = *state;

	for (int sig = 0; sig <= 1; sig++) {
		struct ibv_qp_init_attr ia = init_attr(res, IBV_QPT_UD), qia;
		struct ibv_qp_attr qa;
		struct ibv_qp *qp;

		ia.sq_sig_all = sig;
		qp = tu_keep_qp(res, ibv_create_qp(res->pd, &ia));
		memset(&qia, 0xff, sizeof(qia));
		assert_int_equal(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia), 0);
		assert_int_equal(qia.sq_sig_all, sig);
		tu_destroy_qp(res, qp);
	}
}

/* libibverbs keeps qp->state in step with every successful modify carrying IBV_QP_STATE,
 * and only those. */
static void test_state_field_follows_modify(void **state)
{
	struct tu_res *res = *state;

	for (size_t k = 0; k < ARRAY_LEN(all_types); k++) {
		struct ibv_qp *peer = tu_keep_qp(res, tu_create_qp(res, all_types[k]));
		struct ibv_qp *qp = tu_keep_qp(res, tu_create_qp(res, all_types[k]));
		struct tu_conn c = conn_values(res, peer->qp_num);
		struct ibv_qp_attr a;

		assert_int_equal(qp->state, IBV_QPS_RESET);
		/* refused: RESET -> RTR */
		a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
		assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
		assert_int_equal(qp->state, IBV_QPS_RESET);
		assert_int_equal(tu_qp_to_init(qp, &c), 0);
		assert_int_equal(qp->state, IBV_QPS_INIT);
		assert_int_equal(tu_qp_to_rtr(qp, &c), 0);
		assert_int_equal(qp->state, IBV_QPS_RTR);
		/* refused: RTR -> INIT */
		a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT };
		assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
		assert_int_equal(qp->state, IBV_QPS_RTR);
		assert_int_equal(tu_qp_to_rts(qp, &c), 0);
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
		tu_destroy_qp(res, qp);
		tu_destroy_qp(res, peer);
	}
}

/*
 * ...and not when the device moves the QP by itself: a send that fails (a bad lkey:
 * IBV_WC_LOC_PROT_ERR) takes the QP to Error, but qp->state keeps RTS until a query
 * reports Error (libibverbs' ibv_query_qp writes the field, as ibv_modify_qp does). UCX
 * asserts qp->state == RTS before every post and aborted when softverbs changed it
 * under it (a peer killed during ucx_perftest).
 */
static void test_state_field_stays_on_device_error(void **state)
{
	struct tu_res *res = *state;
	struct ibv_qp *peer = tu_keep_qp(res, tu_create_qp(res, IBV_QPT_RC));
	struct ibv_qp *qp = tu_keep_qp(res, tu_create_qp(res, IBV_QPT_RC));
	struct tu_conn c = conn_values(res, peer->qp_num);
	char buf[8] = { 0 };
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof(buf), .lkey = 0xbad };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;

	assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_RTS), 0);
	assert_int_equal(ibv_post_send(qp, &wr, &bad), 0);
	assert_int_equal(tu_poll_exact(res->cq, 1, &wc, 5000), 1);
	assert_int_equal(wc.wr_id, 7);
	assert_int_equal(wc.status, IBV_WC_LOC_PROT_ERR);
	assert_int_equal(qp->state, IBV_QPS_RTS);
	assert_int_equal(tu_query_state(qp), IBV_QPS_ERR);
	assert_int_equal(qp->state, IBV_QPS_ERR);
	tu_destroy_qp(res, qp);
	tu_destroy_qp(res, peer);
}

/* ---- destroy ------------------------------------------------------------------------ */

static void test_destroy_qp(void **state)
{
	struct tu_res *res = *state;

	for (size_t k = 0; k < ARRAY_LEN(all_types); k++) {
		struct ibv_qp *fresh = tu_create_qp(res, all_types[k]);
		struct ibv_qp *used = tu_keep_qp(res, tu_create_qp(res, all_types[k]));
		struct ibv_qp *peer = tu_keep_qp(res, tu_create_qp(res, all_types[k]));
		struct tu_conn c = conn_values(res, peer->qp_num);

		assert_non_null(fresh);
		assert_int_equal(ibv_destroy_qp(fresh), 0);
		/* a connected QP goes as well */
		assert_int_equal(tu_qp_connect(used, &c, IBV_QPS_RTS), 0);
		tu_destroy_qp(res, used);
		tu_destroy_qp(res, peer);
	}
}

/* uverbs ib_destroy_usecnt: a PD or CQ a QP uses is EBUSY until the QP is gone, and
 * the refused destroy leaves both usable. */
static void test_pd_and_cq_busy_while_qp_exists(void **state)
{
	struct tu_res *res = *state;
	struct ibv_pd *pd = ibv_alloc_pd(res->ctx);
	struct ibv_cq *scq = ibv_create_cq(res->ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(res->ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = init_attr(res, IBV_QPT_RC);
	struct ibv_qp *qp;
	struct tu_conn c = conn_values(res, 0);
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
	assert_int_equal(tu_qp_to_init(qp, &c), 0);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_cq(scq), 0);
	assert_int_equal(ibv_destroy_cq(rcq), 0);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
}

/* A QP on an SRQ: qp->srq is set, the SRQ is EBUSY until the QP is destroyed. */
static void test_srq_busy_while_qp_attached(void **state)
{
	struct tu_res *res = *state;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(res->pd, &sa);
	struct ibv_qp_init_attr ia = init_attr(res, IBV_QPT_RC), qia;
	struct ibv_qp_attr qa;
	struct ibv_qp *qp;
	int rc;

	assert_non_null(srq);
	ia.srq = srq;
	qp = ibv_create_qp(res->pd, &ia);
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
	struct tu_res *res = *state;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(res->pd, &sa);
	struct ibv_qp_init_attr ia = init_attr(res, IBV_QPT_RC);
	struct ibv_qp *qp;

	assert_non_null(srq);
	ia.srq = srq;
	ia.cap.max_recv_wr = (uint32_t)res->dev.max_qp_wr + 1;
	ia.cap.max_recv_sge = (uint32_t)res->dev.max_sge + 1;
	qp = ibv_create_qp(res->pd, &ia);
	if (!qp) {
		int err = errno;

		assert_int_equal(ibv_destroy_srq(srq), 0);
		fail_msg("SRQ QP with out-of-range receive caps refused: errno %d", err);
	}
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_srq(srq), 0);
}

/* ---- a create that cannot have a QP number ------------------------------------------ */

/* The lowest free descriptor (its number: closed again at once), or -1. */
static int lowest_free_fd(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	if (fd >= 0)
		close(fd);
	return fd;
}

/*
 * softverbs takes QP numbers in blocks of 256, each claimed by binding a socket, with
 * the block's QP segments in one shared file; a QP holds no descriptor of its own. With
 * one descriptor left, a create succeeds while the claimed blocks have room, and once
 * they are full it fails for want of a new block: EMFILE. That failed create must free
 * no QP number (it took none: the number it would free was never set), so the QPs
 * before it and the one after, with descriptors back, all have numbers of their own.
 */
static void test_create_without_a_qpn_frees_no_number(void **state)
{
	enum { MAX = 1024 };
	struct tu_res *res = *state;
	struct ibv_qp_init_attr ia = init_attr(res, IBV_QPT_UD);
	struct ibv_qp **qps = calloc(MAX + 1, sizeof(*qps));
	struct rlimit orig, tight;
	int n, failed_errno = 0, after_errno = 0, dup_i = -1, dup_j = -1;
	uint32_t dup_num = 0;

	assert_non_null(qps);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &orig), 0);
	for (n = 0; n < MAX; n++) {
		int fd = lowest_free_fd();

		assert_true(fd >= 0);
		tight = orig;
		tight.rlim_cur = (rlim_t)fd + 1;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &tight), 0);
		qps[n] = ibv_create_qp(res->pd, &ia);
		failed_errno = errno;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &orig), 0);
		if (!qps[n])
			break;
	}
	/* With descriptors back, a create finds (or claims) a number again. */
	if (n < MAX) {
		qps[n] = ibv_create_qp(res->pd, &ia);
		after_errno = qps[n] ? 0 : errno;
	}
	for (int i = 0; i <= n && i < MAX && dup_i < 0; i++)
		for (int j = i + 1; j <= n && j < MAX && qps[i] && qps[j] && dup_i < 0; j++)
			if (qps[i]->qp_num == qps[j]->qp_num) {
				dup_i = i;
				dup_j = j;
				dup_num = qps[i]->qp_num;
			}
	for (int i = 0; i <= n && i < MAX; i++)
		if (qps[i])
			assert_int_equal(ibv_destroy_qp(qps[i]), 0);
	free(qps);

	if (n == 0 || n == MAX)
		fail_msg("%d creates with one descriptor to spare succeeded: want some to, and "
			 "one to fail once the claimed QPN blocks are full", n);
	if (failed_errno != EMFILE)
		fail_msg("create %d, with no descriptor for a new QPN block: errno %d, want "
			 "EMFILE", n, failed_errno);
	if (after_errno)
		fail_msg("create after the failed one, descriptors back: errno %d", after_errno);
	if (dup_i >= 0)
		fail_msg("QPs %d and %d share QPN %u: the failed create %d freed a number it "
			 "had not taken", dup_i, dup_j, dup_num, n);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

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
		T(test_state_field_stays_on_device_error),
		T(test_destroy_qp),
		T(test_pd_and_cq_busy_while_qp_exists),
		T(test_srq_busy_while_qp_attached),
		T(test_srq_qp_ignores_recv_caps),
		T(test_create_without_a_qpn_frees_no_number),
	};

	return cmocka_run_group_tests_name("verbs_qp", tests, NULL, NULL);
}
