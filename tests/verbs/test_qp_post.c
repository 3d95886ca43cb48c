/*
 * Black-box tests of the posting rules of a QP, its flush on entering the Error state, and
 * the extended (ibv_wr_*) send API.
 *
 * Conventions (rdma-core man pages ibv_post_send(3)/ibv_post_recv(3)): the return is 0 or
 * a positive errno, and on failure *bad_wr names the first WR that was not posted; the
 * WRs before it were posted. IBA vol 1 §10.8.3 / §11.4.2: a WR posted to a QP in Error,
 * and every WR outstanding when it enters Error, completes with IBV_WC_WR_FLUSH_ERR,
 * signaled or not, with wr_id and qp_num valid; completions of one queue come in order.
 *
 * Sends are kept outstanding without relying on the data path: the RC sender's peer is a
 * QP in RTR with an empty receive queue, so a SEND that reached it would be RNR NAKed and
 * retried forever (rnr_retry 7). This milestone moves no data at all; the tests hold when
 * it does.
 *
 * "Nothing else completed" is checked with a marker: a WR posted after the QP entered
 * Error completes after everything that was outstanding on the same queue.
 */
#include "verbs/sv_test_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MS 2000
#define CQ_SIZE 512
#define BUF_SIZE 65536
#define MARKER 0x6d61726bULL

struct env {
	struct tu_res *res; /* keeps the QPs */
	struct ibv_cq *scq, *rcq; /* sends and receives complete on different CQs */
	char *buf;
	struct ibv_mr *mr;
	struct ibv_srq *srq[4];
	int nsrq;
	struct ibv_ah *ah[4];
	int nah;
};

/* ---- fixture ------------------------------------------------------------------------ */

static int env_setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	if (!e || !(e->res = tu_res_open()))
		return -1;
	e->scq = ibv_create_cq(e->res->ctx, CQ_SIZE, NULL, NULL, 0);
	e->rcq = ibv_create_cq(e->res->ctx, CQ_SIZE, NULL, NULL, 0);
	e->buf = calloc(1, BUF_SIZE);
	if (!e->scq || !e->rcq || !e->buf)
		return -1;
	e->mr = ibv_reg_mr(e->res->pd, e->buf, BUF_SIZE,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	if (!e->mr)
		return -1;
	*state = e;
	return 0;
}

static int env_teardown(void **state)
{
	struct env *e = *state;
	int rc = 0;

	if (!e)
		return 0;
	rc |= tu_destroy_kept_qps(e->res);
	for (int i = e->nah - 1; i >= 0; i--)
		rc |= ibv_destroy_ah(e->ah[i]);
	for (int i = e->nsrq - 1; i >= 0; i--)
		rc |= ibv_destroy_srq(e->srq[i]);
	rc |= ibv_dereg_mr(e->mr);
	rc |= ibv_destroy_cq(e->scq);
	rc |= ibv_destroy_cq(e->rcq);
	free(e->buf);
	rc |= tu_res_close(e->res);
	free(e);
	*state = NULL;
	return rc ? -1 : 0;
}

/* A QP on the env's CQs; @cap in: what to ask (NULL: small defaults), out: what came. */
static struct ibv_qp *make_qp(struct env *e, enum ibv_qp_type type, struct ibv_srq *srq,
			      struct ibv_qp_cap *cap)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = e->scq,
		.recv_cq = e->rcq,
		.srq = srq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
		.qp_type = type,
	};
	struct ibv_qp *qp;

	if (cap)
		ia.cap = *cap;
	qp = tu_keep_qp(e->res, ibv_create_qp(e->res->pd, &ia));
	if (cap)
		*cap = ia.cap;
	return qp;
}

static struct ibv_srq *make_srq(struct env *e)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(e->res->pd, &sa);

	assert_non_null(srq);
	assert_true(e->nsrq < (int)ARRAY_LEN(e->srq));
	e->srq[e->nsrq++] = srq;
	return srq;
}

static struct ibv_ah *make_ah(struct env *e)
{
	struct ibv_ah_attr aa;
	struct ibv_ah *ah;

	tu_fill_ah(e->res, &aa);
	ah = ibv_create_ah(e->res->pd, &aa);
	assert_non_null(ah);
	assert_true(e->nah < (int)ARRAY_LEN(e->ah));
	e->ah[e->nah++] = ah;
	return ah;
}

/* ---- state changes ------------------------------------------------------------------ */

#define QKEY 0x11111111

/* Drives @qp from RESET up to @target (INIT, RTR or RTS) towards @dest_qpn. */
static void bring_up(struct env *e, struct ibv_qp *qp, uint32_t dest_qpn, enum ibv_qp_state target)
{
	struct tu_conn c;

	tu_conn_init(&c, e->res, dest_qpn);
	c.qkey = QKEY;
	c.min_rnr_timer = 31; /* the longest RNR NAK delay: few retries */
	c.rnr_retry = 7;      /* retry an RNR NAK forever */
	assert_int_equal(tu_qp_connect(qp, &c, target), 0);
}

static void move_to(struct ibv_qp *qp, enum ibv_qp_state st)
{
	struct ibv_qp_attr a = { .qp_state = st };

	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	assert_int_equal(qp->state, st);
}

/*
 * Brings the RC QP @sender to RTS so that its sends stay outstanding: its peer is a new RC
 * QP in RTR with no receive posted. @sender is created by the caller (SRQ, caps).
 */
static struct ibv_qp *stall_rc(struct env *e, struct ibv_qp *sender)
{
	struct ibv_qp *peer = make_qp(e, IBV_QPT_RC, NULL, NULL);

	bring_up(e, peer, sender->qp_num, IBV_QPS_RTR);
	bring_up(e, sender, peer->qp_num, IBV_QPS_RTS);
	return peer;
}

/* ---- posting helpers ---------------------------------------------------------------- */

static struct ibv_sge sge_at(struct env *e, size_t off, uint32_t len)
{
	struct ibv_sge s = { .addr = (uintptr_t)(e->buf + off), .length = len,
			     .lkey = e->mr->lkey };

	return s;
}

static int post_send1(struct ibv_qp *qp, struct ibv_sge *sge, uint64_t wr_id, unsigned int flags,
		      struct ibv_ah *ah)
{
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = flags,
	};
	struct ibv_send_wr *bad = NULL;
	int rc;

	if (ah) {
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = 0x10;
		wr.wr.ud.remote_qkey = QKEY;
	}
	rc = ibv_post_send(qp, &wr, &bad);
	if (rc && bad != &wr)
		fail_msg("ibv_post_send failed with %d but *bad_wr is %p, not the WR", rc,
			 (void *)bad);
	return rc;
}

static int post_recv1(struct ibv_qp *qp, struct ibv_sge *sge, uint64_t wr_id)
{
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = sge, .num_sge = 1 };
	struct ibv_recv_wr *bad = NULL;
	int rc = ibv_post_recv(qp, &wr, &bad);

	if (rc && bad != &wr)
		fail_msg("ibv_post_recv failed with %d but *bad_wr is %p, not the WR", rc,
			 (void *)bad);
	return rc;
}

/* Exactly @n flush completions of @qp on @cq, in order @ids. */
static void expect_flushed(struct ibv_cq *cq, struct ibv_qp *qp, const uint64_t *ids, int n,
			   const char *what)
{
	struct ibv_wc wc[64];
	int got;

	assert_true(n <= (int)ARRAY_LEN(wc));
	got = tu_poll(cq, n, wc, WAIT_MS);
	if (got != n)
		fail_msg("%s: %d of %d flush completions within %d ms", what, got, n, WAIT_MS);
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_WR_FLUSH_ERR || wc[i].wr_id != ids[i] ||
		    wc[i].qp_num != qp->qp_num)
			fail_msg("%s: completion %d is wr_id %llu status %s qp_num %u; want wr_id "
				 "%llu IBV_WC_WR_FLUSH_ERR qp_num %u",
				 what, i, (unsigned long long)wc[i].wr_id,
				 ibv_wc_status_str(wc[i].status), wc[i].qp_num,
				 (unsigned long long)ids[i], qp->qp_num);
	}
}

/* After a marker was posted to a QP in Error: every completion before it on @cq is an
 * unexpected one. Fails if the marker does not come. */
static void expect_only_marker(struct ibv_cq *cq, const char *what)
{
	long long end = tu_now_ms() + WAIT_MS;
	int extra = 0;

	for (;;) {
		struct ibv_wc wc;
		int r = ibv_poll_cq(cq, 1, &wc);

		assert_true(r >= 0);
		if (r == 1 && wc.wr_id == MARKER) {
			assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
			break;
		}
		if (r == 1) {
			print_error("%s: unexpected completion wr_id %llu status %s\n", what,
				    (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
			extra++;
		} else if (tu_now_ms() > end) {
			fail_msg("%s: the marker posted in Error did not complete within %d ms", what,
				 WAIT_MS);
		}
	}
	assert_int_equal(extra, 0);
}

static void send_marker(struct env *e, struct ibv_qp *qp, struct ibv_ah *ah, const char *what)
{
	struct ibv_sge s = sge_at(e, 0, 8);

	assert_int_equal(post_send1(qp, &s, MARKER, IBV_SEND_SIGNALED, ah), 0);
	expect_only_marker(e->scq, what);
}

static void recv_marker(struct env *e, struct ibv_qp *qp, const char *what)
{
	struct ibv_sge s = sge_at(e, 0, 8);

	assert_int_equal(post_recv1(qp, &s, MARKER), 0);
	expect_only_marker(e->rcq, what);
}

/* ---- state rules -------------------------------------------------------------------- */

/* IBA C10-97 (rxe, pvrdma): a receive posted in RESET is refused with EINVAL and never
 * completes; in INIT it is accepted and flushed on Error. */
static void test_post_recv_needs_init(void **state)
{
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct env *e = *state;

	for (size_t k = 0; k < ARRAY_LEN(types); k++) {
		struct ibv_qp *qp = make_qp(e, types[k], NULL, NULL);
		struct ibv_sge s = sge_at(e, 0, 64);
		uint64_t id = 2;
		int rc = post_recv1(qp, &s, 1);

		if (rc != EINVAL)
			fail_msg("%s: ibv_post_recv in RESET returned %d, want EINVAL",
				 tu_qp_type_str(types[k]), rc);
		bring_up(e, qp, 0, IBV_QPS_INIT);
		assert_int_equal(post_recv1(qp, &s, id), 0);
		move_to(qp, IBV_QPS_ERR);
		expect_flushed(e->rcq, qp, &id, 1, "receive posted in INIT");
		recv_marker(e, qp, "receive refused in RESET");
	}
}

/* IBA §10.8.3 (rxe_post_send: state < RTS): sends are refused in RESET, INIT and RTR, and
 * a refused send never completes. */
static void test_post_send_needs_rts(void **state)
{
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	static const enum ibv_qp_state states[] = { IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR };
	struct env *e = *state;
	struct ibv_ah *ah = make_ah(e);
	int bad = 0;

	for (size_t k = 0; k < ARRAY_LEN(types); k++) {
		struct ibv_qp *peer = make_qp(e, types[k], NULL, NULL);
		struct ibv_qp *qp = make_qp(e, types[k], NULL, NULL);
		struct ibv_ah *qah = types[k] == IBV_QPT_UD ? ah : NULL;
		struct ibv_sge s = sge_at(e, 0, 64);

		for (size_t i = 0; i < ARRAY_LEN(states); i++) {
			int rc;

			if (states[i] == IBV_QPS_INIT)
				bring_up(e, qp, peer->qp_num, IBV_QPS_INIT);
			if (states[i] == IBV_QPS_RTR) {
				move_to(qp, IBV_QPS_RESET);
				bring_up(e, qp, peer->qp_num, IBV_QPS_RTR);
			}
			assert_int_equal(tu_query_state(qp), states[i]);
			rc = post_send1(qp, &s, 10 + i, IBV_SEND_SIGNALED, qah);
			if (rc != EINVAL) {
				print_error("%s: ibv_post_send in state %d returned %d, want EINVAL\n",
					    tu_qp_type_str(types[k]), states[i], rc);
				bad++;
			}
		}
		move_to(qp, IBV_QPS_ERR);
		send_marker(e, qp, qah, "sends refused before RTS");
	}
	assert_int_equal(bad, 0);
}

/* ---- per-WR checks ---------------------------------------------------------------- */

/* ibv_post_send(3): a chain stops at the first bad WR (too many SGEs: EINVAL), *bad_wr
 * names it, the WRs before it are posted and the ones after are not. */
static void test_send_chain_with_too_many_sges(void **state)
{
	struct env *e = *state;
	struct ibv_qp_cap cap = { .max_send_wr = 16, .max_recv_wr = 4, .max_send_sge = 2,
				  .max_recv_sge = 1 };
	struct ibv_qp *qp = make_qp(e, IBV_QPT_RC, NULL, &cap);
	uint32_t nsge = cap.max_send_sge + 1;
	struct ibv_sge *many = calloc(nsge, sizeof(*many));
	struct ibv_sge one = sge_at(e, 0, 16);
	struct ibv_send_wr w[3], *bad = NULL;
	uint64_t posted = 1;
	int rc;

	assert_non_null(many);
	for (uint32_t i = 0; i < nsge; i++)
		many[i] = sge_at(e, 64 * i, 8);
	stall_rc(e, qp);
	memset(w, 0, sizeof(w));
	for (int i = 0; i < 3; i++) {
		w[i].wr_id = (uint64_t)i + 1;
		w[i].opcode = IBV_WR_SEND;
		w[i].send_flags = IBV_SEND_SIGNALED;
		w[i].sg_list = &one;
		w[i].num_sge = 1;
		w[i].next = i < 2 ? &w[i + 1] : NULL;
	}
	w[1].sg_list = many;
	w[1].num_sge = (int)nsge;
	rc = ibv_post_send(qp, &w[0], &bad);
	free(many);
	assert_int_equal(rc, EINVAL);
	assert_ptr_equal(bad, &w[1]);

	move_to(qp, IBV_QPS_ERR);
	expect_flushed(e->scq, qp, &posted, 1, "the WR before the bad one");
	send_marker(e, qp, NULL, "WRs from the bad one on");
}

static void test_recv_chain_with_too_many_sges(void **state)
{
	struct env *e = *state;
	struct ibv_qp_cap cap = { .max_send_wr = 4, .max_recv_wr = 16, .max_send_sge = 1,
				  .max_recv_sge = 2 };
	struct ibv_qp *qp = make_qp(e, IBV_QPT_RC, NULL, &cap);
	uint32_t nsge = cap.max_recv_sge + 1;
	struct ibv_sge *many = calloc(nsge, sizeof(*many));
	struct ibv_sge one = sge_at(e, 0, 16);
	struct ibv_recv_wr w[3], *bad = NULL;
	uint64_t posted = 1;
	int rc;

	assert_non_null(many);
	for (uint32_t i = 0; i < nsge; i++)
		many[i] = sge_at(e, 64 * i, 8);
	bring_up(e, qp, 0, IBV_QPS_INIT);
	memset(w, 0, sizeof(w));
	for (int i = 0; i < 3; i++) {
		w[i].wr_id = (uint64_t)i + 1;
		w[i].sg_list = &one;
		w[i].num_sge = 1;
		w[i].next = i < 2 ? &w[i + 1] : NULL;
	}
	w[1].sg_list = many;
	w[1].num_sge = (int)nsge;
	rc = ibv_post_recv(qp, &w[0], &bad);
	free(many);
	assert_int_equal(rc, EINVAL);
	assert_ptr_equal(bad, &w[1]);

	move_to(qp, IBV_QPS_ERR);
	expect_flushed(e->rcq, qp, &posted, 1, "the receive before the bad one");
	recv_marker(e, qp, "receives from the bad one on");
}

/* Inline data up to max_inline_data is accepted; one byte more is refused (rxe EINVAL,
 * mlx5 ENOMEM) and not posted. */
static void test_inline_longer_than_max_inline(void **state)
{
	struct env *e = *state;
	struct ibv_qp_cap cap = { .max_send_wr = 8, .max_recv_wr = 4, .max_send_sge = 1,
				  .max_recv_sge = 1, .max_inline_data = 64 };
	struct ibv_qp *qp = make_qp(e, IBV_QPT_RC, NULL, &cap);
	uint32_t max = cap.max_inline_data;
	struct ibv_sge s;
	uint64_t posted = 1;
	int rc;

	assert_true(max >= 64 && max < BUF_SIZE);
	stall_rc(e, qp);
	s = sge_at(e, 0, max);
	assert_int_equal(post_send1(qp, &s, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE, NULL), 0);
	s = sge_at(e, 0, max + 1);
	rc = post_send1(qp, &s, 2, IBV_SEND_SIGNALED | IBV_SEND_INLINE, NULL);
	if (rc != EINVAL && rc != ENOMEM)
		fail_msg("inline send of max_inline_data + 1 = %u bytes returned %d, want EINVAL "
			 "(rxe) or ENOMEM (mlx5)",
			 max + 1, rc);

	move_to(qp, IBV_QPS_ERR);
	expect_flushed(e->scq, qp, &posted, 1, "the inline send at the limit");
	send_marker(e, qp, NULL, "the refused inline send");
}

/* rxe/mlx5: a WR beyond the send queue's capacity (the max_send_wr create returned) is
 * ENOMEM while the earlier ones are outstanding. */
static void test_send_queue_overflow(void **state)
{
	struct env *e = *state;
	struct ibv_qp_cap cap = { .max_send_wr = 8, .max_recv_wr = 4, .max_send_sge = 1,
				  .max_recv_sge = 1 };
	struct ibv_qp *qp = make_qp(e, IBV_QPT_RC, NULL, &cap);
	struct ibv_sge s = sge_at(e, 0, 16);
	uint64_t ids[64];
	int n = (int)cap.max_send_wr, rc;

	if (n > 60)
		skip();
	stall_rc(e, qp);
	for (int i = 0; i < n; i++) {
		ids[i] = (uint64_t)i + 100;
		rc = post_send1(qp, &s, ids[i], IBV_SEND_SIGNALED, NULL);
		if (rc)
			fail_msg("send %d of max_send_wr %d refused: %d", i + 1, n, rc);
	}
	rc = post_send1(qp, &s, 999, IBV_SEND_SIGNALED, NULL);
	if (rc != ENOMEM)
		fail_msg("send %d with max_send_wr %d outstanding returned %d, want ENOMEM", n + 1, n,
			 rc);

	move_to(qp, IBV_QPS_ERR);
	expect_flushed(e->scq, qp, ids, n, "a full send queue");
	send_marker(e, qp, NULL, "the send refused with ENOMEM");
}

static void test_recv_queue_overflow(void **state)
{
	struct env *e = *state;
	struct ibv_qp_cap cap = { .max_send_wr = 4, .max_recv_wr = 8, .max_send_sge = 1,
				  .max_recv_sge = 1 };
	struct ibv_qp *qp = make_qp(e, IBV_QPT_UD, NULL, &cap);
	struct ibv_sge s = sge_at(e, 0, 128);
	uint64_t ids[64];
	int n = (int)cap.max_recv_wr, rc;

	if (n > 60)
		skip();
	bring_up(e, qp, 0, IBV_QPS_INIT);
	for (int i = 0; i < n; i++) {
		ids[i] = (uint64_t)i + 100;
		rc = post_recv1(qp, &s, ids[i]);
		if (rc)
			fail_msg("receive %d of max_recv_wr %d refused: %d", i + 1, n, rc);
	}
	rc = post_recv1(qp, &s, 999);
	if (rc != ENOMEM)
		fail_msg("receive %d with max_recv_wr %d outstanding returned %d, want ENOMEM",
			 n + 1, n, rc);

	move_to(qp, IBV_QPS_ERR);
	expect_flushed(e->rcq, qp, ids, n, "a full receive queue");
	recv_marker(e, qp, "the receive refused with ENOMEM");
}

/* IBA Table 156 (and rxe_wr_opcode_info): opcodes the transport does not carry are EINVAL
 * at post time: no RDMA Read or atomics on UC, no RDMA on UD; the QP stays in RTS. */
static void test_opcode_not_allowed_for_type(void **state)
{
	static const struct {
		enum ibv_qp_type type;
		enum ibv_wr_opcode op;
		const char *name;
	} cases[] = {
		{ IBV_QPT_UC, IBV_WR_RDMA_READ, "RDMA_READ on UC" },
		{ IBV_QPT_UC, IBV_WR_ATOMIC_CMP_AND_SWP, "ATOMIC_CMP_AND_SWP on UC" },
		{ IBV_QPT_UC, IBV_WR_ATOMIC_FETCH_AND_ADD, "ATOMIC_FETCH_AND_ADD on UC" },
		{ IBV_QPT_UD, IBV_WR_RDMA_WRITE, "RDMA_WRITE on UD" },
		{ IBV_QPT_UD, IBV_WR_RDMA_WRITE_WITH_IMM, "RDMA_WRITE_WITH_IMM on UD" },
		{ IBV_QPT_UD, IBV_WR_RDMA_READ, "RDMA_READ on UD" },
		{ IBV_QPT_UD, IBV_WR_ATOMIC_FETCH_AND_ADD, "ATOMIC_FETCH_AND_ADD on UD" },
		{ IBV_QPT_RC, (enum ibv_wr_opcode)0x7f, "opcode 0x7f on RC" },
	};
	struct env *e = *state;
	struct ibv_ah *ah = make_ah(e);
	struct ibv_qp *uc = make_qp(e, IBV_QPT_UC, NULL, NULL);
	struct ibv_qp *uc_peer = make_qp(e, IBV_QPT_UC, NULL, NULL);
	struct ibv_qp *ud = make_qp(e, IBV_QPT_UD, NULL, NULL);
	struct ibv_qp *rc_qp = make_qp(e, IBV_QPT_RC, NULL, NULL);
	struct ibv_sge s = sge_at(e, 0, 8);
	int bad_count = 0;

	bring_up(e, uc_peer, uc->qp_num, IBV_QPS_RTR);
	bring_up(e, uc, uc_peer->qp_num, IBV_QPS_RTS);
	bring_up(e, ud, 0, IBV_QPS_RTS);
	stall_rc(e, rc_qp);

	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		struct ibv_qp *qp = cases[i].type == IBV_QPT_UC ? uc :
				    cases[i].type == IBV_QPT_UD ? ud : rc_qp;
		struct ibv_send_wr wr = {
			.wr_id = 50 + i, .sg_list = &s, .num_sge = 1, .opcode = cases[i].op,
			.send_flags = IBV_SEND_SIGNALED,
		}, *bad = NULL;
		int rc;

		if (cases[i].type == IBV_QPT_UD) {
			wr.wr.ud.ah = ah;
			wr.wr.ud.remote_qpn = uc_peer->qp_num;
			wr.wr.ud.remote_qkey = QKEY;
		} else if (cases[i].op == IBV_WR_ATOMIC_CMP_AND_SWP ||
			   cases[i].op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			wr.wr.atomic.remote_addr = (uintptr_t)e->buf;
			wr.wr.atomic.rkey = e->mr->rkey;
		} else {
			wr.wr.rdma.remote_addr = (uintptr_t)e->buf;
			wr.wr.rdma.rkey = e->mr->rkey;
		}
		rc = ibv_post_send(qp, &wr, &bad);
		if (rc != EINVAL || bad != &wr) {
			print_error("%s: ibv_post_send returned %d, bad_wr %s (want EINVAL, the WR)\n",
				    cases[i].name, rc, bad == &wr ? "the WR" : "other");
			bad_count++;
		}
		assert_int_equal(tu_query_state(qp), IBV_QPS_RTS);
	}
	/* the transports' own SEND goes through on the same QPs */
	assert_int_equal(post_send1(uc, &s, 1, IBV_SEND_SIGNALED, NULL), 0);
	assert_int_equal(post_send1(ud, &s, 2, IBV_SEND_SIGNALED, ah), 0);
	assert_int_equal(bad_count, 0);
}

/* ---- the Error state ---------------------------------------------------------------- */

/* Entering Error completes every outstanding receive and send, signaled or not
 * (sq_sig_all 0), with IBV_WC_WR_FLUSH_ERR on the queue's own CQ, in order. */
static void test_error_flushes_outstanding_work(void **state)
{
	struct env *e = *state;
	struct ibv_qp *qp = make_qp(e, IBV_QPT_RC, NULL, NULL);
	const uint64_t rids[] = { 100, 101, 102, 103 };
	const uint64_t sids[] = { 200, 201, 202, 203 };

	stall_rc(e, qp);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge rs = sge_at(e, 1024 * (size_t)i, 512);
		struct ibv_sge ss = sge_at(e, 8192 + 64 * (size_t)i, 32);

		assert_int_equal(post_recv1(qp, &rs, rids[i]), 0);
		assert_int_equal(post_send1(qp, &ss, sids[i], (i % 2) ? 0 : IBV_SEND_SIGNALED, NULL),
				 0);
	}
	move_to(qp, IBV_QPS_ERR);
	assert_int_equal(tu_query_state(qp), IBV_QPS_ERR);
	expect_flushed(e->rcq, qp, rids, 4, "outstanding receives");
	expect_flushed(e->scq, qp, sids, 4, "outstanding sends (2 unsignaled)");
	recv_marker(e, qp, "receive queue after the flush");
	send_marker(e, qp, NULL, "send queue after the flush");
}

/* IBA §10.3.1: moving to RESET empties the work queues without completions; the QP then
 * connects and works again. */
static void test_reset_discards_outstanding_work(void **state)
{
	struct env *e = *state;
	struct ibv_qp *qp = make_qp(e, IBV_QPT_RC, NULL, NULL);
	struct ibv_qp *peer = stall_rc(e, qp);
	struct ibv_sge s = sge_at(e, 0, 64);
	uint64_t after = 42;

	for (uint64_t i = 0; i < 3; i++) {
		assert_int_equal(post_recv1(qp, &s, 10 + i), 0);
		assert_int_equal(post_send1(qp, &s, 20 + i, IBV_SEND_SIGNALED, NULL), 0);
	}
	move_to(qp, IBV_QPS_RESET);
	assert_int_equal(tu_query_state(qp), IBV_QPS_RESET);
	bring_up(e, qp, peer->qp_num, IBV_QPS_RTS);
	assert_int_equal(post_send1(qp, &s, after, IBV_SEND_SIGNALED, NULL), 0);
	move_to(qp, IBV_QPS_ERR);
	expect_flushed(e->scq, qp, &after, 1, "the send posted after RESET and reconnect");
	send_marker(e, qp, NULL, "sends discarded by RESET");
	recv_marker(e, qp, "receives discarded by RESET");
}

/* IBA §10.3.1 (rxe: only state < RTS refuses sends): in SQD new sends are accepted and
 * queued, not processed; they flush on Error like any other. */
static void test_post_send_in_sqd_is_queued(void **state)
{
	struct env *e = *state;
	struct ibv_qp *qp = make_qp(e, IBV_QPT_RC, NULL, NULL);
	struct ibv_sge s = sge_at(e, 0, 64);
	uint64_t id = 5;
	int rc;

	stall_rc(e, qp);
	move_to(qp, IBV_QPS_SQD);
	rc = post_send1(qp, &s, id, IBV_SEND_SIGNALED, NULL);
	if (rc)
		fail_msg("ibv_post_send in SQD returned %d, want 0", rc);
	move_to(qp, IBV_QPS_ERR);
	expect_flushed(e->scq, qp, &id, 1, "the send posted in SQD");
}

/* Receives of UC and UD QPs (and of an RC QP still in INIT) flush the same way. */
static void test_error_flushes_receives_of_every_type(void **state)
{
	static const struct {
		enum ibv_qp_type type;
		enum ibv_qp_state st;
	} cases[] = {
		{ IBV_QPT_UC, IBV_QPS_RTS }, { IBV_QPT_UD, IBV_QPS_RTS },
		{ IBV_QPT_UD, IBV_QPS_RTR }, { IBV_QPT_RC, IBV_QPS_INIT },
	};
	struct env *e = *state;

	for (size_t k = 0; k < ARRAY_LEN(cases); k++) {
		struct ibv_qp *peer = make_qp(e, cases[k].type, NULL, NULL);
		struct ibv_qp *qp = make_qp(e, cases[k].type, NULL, NULL);
		uint64_t ids[3];
		char what[64];

		bring_up(e, qp, peer->qp_num, cases[k].st);
		for (int i = 0; i < 3; i++) {
			struct ibv_sge s = sge_at(e, 2048 * (size_t)i, 1024);

			ids[i] = 300 + 10 * k + (uint64_t)i;
			assert_int_equal(post_recv1(qp, &s, ids[i]), 0);
		}
		move_to(qp, IBV_QPS_ERR);
		snprintf(what, sizeof(what), "%s receives posted in state %d",
			 tu_qp_type_str(cases[k].type), cases[k].st);
		expect_flushed(e->rcq, qp, ids, 3, what);
	}
}

/* A WR posted to a QP already in Error is accepted and completes at once with
 * IBV_WC_WR_FLUSH_ERR, even unsignaled. */
static void test_post_in_error_completes_with_flush(void **state)
{
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct env *e = *state;
	struct ibv_ah *ah = make_ah(e);

	for (size_t k = 0; k < ARRAY_LEN(types); k++) {
		struct ibv_qp *qp = make_qp(e, types[k], NULL, NULL);
		struct ibv_ah *qah = types[k] == IBV_QPT_UD ? ah : NULL;
		struct ibv_sge s = sge_at(e, 0, 64);
		uint64_t rid = 7, sids[] = { 8, 9 };

		bring_up(e, qp, 0, IBV_QPS_INIT);
		move_to(qp, IBV_QPS_ERR);
		assert_int_equal(post_recv1(qp, &s, rid), 0);
		expect_flushed(e->rcq, qp, &rid, 1, "receive posted in Error");
		assert_int_equal(post_send1(qp, &s, sids[0], IBV_SEND_SIGNALED, qah), 0);
		assert_int_equal(post_send1(qp, &s, sids[1], 0, qah), 0);
		expect_flushed(e->scq, qp, sids, 2, "sends posted in Error (one unsignaled)");
	}
}

/* IBA §11.6.3 (rxe, mlx5): a QP on an SRQ that enters Error raises
 * IBV_EVENT_QP_LAST_WQE_REACHED on the context's async fd. */
static void test_srq_qp_error_raises_last_wqe_reached(void **state)
{
	struct env *e = *state;
	struct ibv_srq *srq = make_srq(e);
	struct ibv_qp *qp = make_qp(e, IBV_QPT_RC, srq, NULL);

	assert_ptr_equal(qp->srq, srq);
	stall_rc(e, qp);
	move_to(qp, IBV_QPS_ERR);
	if (!tu_wait_qp_event(e->res->ctx, qp, IBV_EVENT_QP_LAST_WQE_REACHED, WAIT_MS))
		fail_msg("no IBV_EVENT_QP_LAST_WQE_REACHED for the SRQ QP within %d ms", WAIT_MS);
}

/* ---- the extended QP ---------------------------------------------------------------- */

static const uint64_t rc_send_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
				    IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

static struct ibv_qp *make_qp_ex(struct env *e, enum ibv_qp_type type, uint32_t comp_mask,
				 uint64_t ops)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = e->scq,
		.recv_cq = e->rcq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
		.qp_type = type,
		.comp_mask = comp_mask,
		.pd = e->res->pd,
		.send_ops_flags = ops,
	};

	return ibv_create_qp_ex(e->res->ctx, &ia);
}

/* A QP created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS has an ibv_qp_ex around it, with the
 * builders of every requested opcode (the ibv_wr_* inlines call them unchecked). */
static void test_qp_ex_with_send_ops(void **state)
{
	struct env *e = *state;
	struct ibv_qp *qp = tu_keep_qp(e->res, make_qp_ex(e, IBV_QPT_RC,
						  IBV_QP_INIT_ATTR_PD |
							  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
						  rc_send_ops));
	struct ibv_qp *ud = tu_keep_qp(e->res, make_qp_ex(e, IBV_QPT_UD,
						  IBV_QP_INIT_ATTR_PD |
							  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
						  IBV_QP_EX_WITH_SEND));
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(qp), *udx = ibv_qp_to_qp_ex(ud);

	assert_non_null(qpx);
	assert_ptr_equal(&qpx->qp_base, qp);
	assert_int_equal(qp->state, IBV_QPS_RESET);
	assert_int_equal(qp->qp_type, IBV_QPT_RC);
	assert_non_null(qpx->wr_start);
	assert_non_null(qpx->wr_complete);
	assert_non_null(qpx->wr_abort);
	assert_non_null(qpx->wr_send);
	assert_non_null(qpx->wr_rdma_write);
	assert_non_null(qpx->wr_rdma_read);
	assert_non_null(qpx->wr_atomic_cmp_swp);
	assert_non_null(qpx->wr_atomic_fetch_add);
	assert_non_null(qpx->wr_set_sge);
	assert_non_null(qpx->wr_set_sge_list);
	assert_non_null(qpx->wr_set_inline_data);
	assert_non_null(qpx->wr_set_inline_data_list);

	assert_non_null(udx);
	assert_ptr_equal(&udx->qp_base, ud);
	assert_non_null(udx->wr_send);
	assert_non_null(udx->wr_set_ud_addr);
}

/* rdma-core's ibv_qp_to_qp_ex returns NULL unless the provider marked the QP extended,
 * which rxe and mlx5 do only for create_qp_ex with SEND_OPS_FLAGS; a plain
 * ibv_create_qp (or ibv_create_qp_ex with only the PD, which calls it) gives none. */
static void test_qp_to_qp_ex_null_without_send_ops(void **state)
{
	struct env *e = *state;
	struct ibv_qp *plain = make_qp(e, IBV_QPT_RC, NULL, NULL);
	struct ibv_qp *pd_only = tu_keep_qp(e->res, make_qp_ex(e, IBV_QPT_RC, IBV_QP_INIT_ATTR_PD, 0));
	struct ibv_qp_ex *a = ibv_qp_to_qp_ex(plain), *b = ibv_qp_to_qp_ex(pd_only);

	if (a || b)
		fail_msg("ibv_qp_to_qp_ex returned %p for an ibv_create_qp QP and %p for an "
			 "ibv_create_qp_ex(PD only) QP; rdma-core returns NULL for both",
			 (void *)a, (void *)b);
}

/* rxe check_qp_init_attr / mlx5 qp_fill_wr_pfns: send ops the QP type cannot carry are
 * EOPNOTSUPP at creation. */
static void test_qp_ex_rejects_send_ops_of_other_types(void **state)
{
	static const struct {
		enum ibv_qp_type type;
		uint64_t ops;
		const char *name;
	} cases[] = {
		{ IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE, "UD with RDMA_WRITE" },
		{ IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
		  "UD with ATOMIC_FETCH_AND_ADD" },
		{ IBV_QPT_UC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ, "UC with RDMA_READ" },
		{ IBV_QPT_UC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
		  "UC with ATOMIC_CMP_AND_SWP" },
	};
	struct env *e = *state;
	int bad = 0;

	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		struct ibv_qp *qp;

		errno = 0;
		qp = make_qp_ex(e, cases[i].type,
				IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, cases[i].ops);
		if (qp || errno != EOPNOTSUPP) {
			print_error("%s: qp %p, errno %d (want NULL, EOPNOTSUPP)\n", cases[i].name,
				    (void *)qp, errno);
			bad++;
			if (qp)
				tu_keep_qp(e->res, qp);
		}
	}
	assert_int_equal(bad, 0);
}

/* ibv_wr_start / ibv_wr_send / ibv_wr_set_sge / ibv_wr_complete post on an RTS QP;
 * ibv_wr_abort drops its batch; on Error the posted WRs (signaled or not) flush and the
 * aborted one never completes. */
static void test_qp_ex_batches_post_and_flush(void **state)
{
	struct env *e = *state;
	struct ibv_qp *qp = tu_keep_qp(e->res, make_qp_ex(e, IBV_QPT_RC,
						  IBV_QP_INIT_ATTR_PD |
							  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
						  rc_send_ops));
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(qp);
	const uint64_t flushed[] = { 100, 101, 300 };

	assert_non_null(qpx);
	stall_rc(e, qp);
	assert_int_equal(tu_query_state(qp), IBV_QPS_RTS);

	ibv_wr_start(qpx);
	qpx->wr_id = 100;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, e->mr->lkey, (uintptr_t)e->buf, 32);
	qpx->wr_id = 101;
	qpx->wr_flags = 0;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, e->mr->lkey, (uintptr_t)e->buf + 64, 32);
	assert_int_equal(ibv_wr_complete(qpx), 0);

	ibv_wr_start(qpx);
	qpx->wr_id = 200;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, e->mr->lkey, (uintptr_t)e->buf, 32);
	ibv_wr_abort(qpx);

	ibv_wr_start(qpx);
	qpx->wr_id = 300;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, e->mr->lkey, (uintptr_t)e->buf + 128, 32);
	assert_int_equal(ibv_wr_complete(qpx), 0);

	move_to(qp, IBV_QPS_ERR);
	expect_flushed(e->scq, qp, flushed, 3, "WRs posted with ibv_wr_complete");
	send_marker(e, qp, NULL, "the aborted batch");
}

#define T(f) cmocka_unit_test_setup_teardown(f, env_setup, env_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_post_recv_needs_init),
		T(test_post_send_needs_rts),
		T(test_send_chain_with_too_many_sges),
		T(test_recv_chain_with_too_many_sges),
		T(test_inline_longer_than_max_inline),
		T(test_send_queue_overflow),
		T(test_recv_queue_overflow),
		T(test_opcode_not_allowed_for_type),
		T(test_error_flushes_outstanding_work),
		T(test_error_flushes_receives_of_every_type),
		T(test_reset_discards_outstanding_work),
		T(test_post_send_in_sqd_is_queued),
		T(test_post_in_error_completes_with_flush),
		T(test_srq_qp_error_raises_last_wqe_reached),
		T(test_qp_ex_with_send_ops),
		T(test_qp_to_qp_ex_null_without_send_ops),
		T(test_qp_ex_rejects_send_ops_of_other_types),
		T(test_qp_ex_batches_post_and_flush),
	};

	return cmocka_run_group_tests_name("verbs_qp_post", tests, NULL, NULL);
}
