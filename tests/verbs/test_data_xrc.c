/*
 * Black-box tests of XRC (eXtended Reliable Connection) in one process: an XRC domain
 * with SRQs, an XRC target QP (XRC_RECV) in it, and an XRC initiator (XRC_SEND) on the
 * fixture's PD and CQ connected to the target. Every byte that moves is checked. Run for
 * both copy paths (ctest verbs_test_data_xrc and verbs_test_data_xrc_bounce).
 *
 * What is asserted (rdma-core ibv_open_xrcd(3), ibv_create_srq_ex(3), ibv_get_srq_num(3),
 * ibv_create_qp_ex(3), ibv_post_send(3), ibv_wr_post(3); the kernel's ib_uverbs_open_xrcd
 * and ib_modify_qp_is_ok; IBA 11.2.x for XRC):
 * - Domains: the comp_mask rules (EINVAL, EOPNOTSUPP), a file without a domain and no
 *   O_CREAT (EAGAIN), O_EXCL on a file that has one (EINVAL), a closed fd (EBADF), two
 *   handles on one file sharing the domain, close while used (EBUSY).
 * - XRC SRQs need a domain and a CQ (EINVAL); tag-matching SRQs are EOPNOTSUPP; SRQ
 *   numbers are distinct and not 0.
 * - QPs: a target needs a domain, has no queues (capacities 0, post_send/post_recv
 *   EINVAL); an initiator has no receive queue; the transitions take the kernel's XRC
 *   attribute sets, and the RC attributes an end has no use for are dropped, as uverbs
 *   drops them.
 * - Traffic: SENDs (with immediate, 1 MiB) land in the SRQ they name, complete on that
 *   SRQ's CQ with the target's QPN and the sender's; RDMA WRITE, READ and both atomics
 *   reach memory of the SRQ's PD; an rkey of another PD is REM_ACCESS_ERR; a SEND naming
 *   an SRQ outside the domain is REM_INV_REQ_ERR and the target reports QP_REQ_ERR; a
 *   SEND waits (RNR) for a receive posted later; the ibv_wr_* builder with
 *   ibv_wr_set_xrc_srqn.
 * - An initiator in another process: SEND and RDMA WRITE land; killed, the target reports
 *   IBV_EVENT_QP_FATAL within a second.
 */
#include "verbs/sv_test_peer.h"
#include "verbs/sv_test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 5000
#define BUF_LEN (1u << 20)
#define N_SRQ 2

/* ---- helpers (data patterns: sv_test_peer.h) ---------------------------------------- */

static void fill(unsigned char *p, size_t len, unsigned int seed)
{
	tp_fill(p, len, seed, 0);
}

static void check_fill(const unsigned char *p, size_t len, unsigned int seed, const char *what)
{
	tp_assert_pattern(p, len, seed, 0, what);
}

/* One completion from @cq within WAIT_MS with @wr_id and @st (@what names it). */
static void expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st,
		      struct ibv_wc *out, const char *what)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	if (tu_poll(cq, 1, &wc, WAIT_MS) != 1)
		fail_msg("%s: no completion within %d ms", what, WAIT_MS);
	if (wc.wr_id != wr_id || wc.status != st)
		fail_msg("%s: completion wr_id %llu status %s, expected wr_id %llu status %s",
			 what, (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
			 (unsigned long long)wr_id, ibv_wc_status_str(st));
	if (out)
		*out = wc;
}

static struct ibv_xrcd *open_xrcd(struct ibv_context *ctx, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd,
		.oflags = oflags,
	};

	return ibv_open_xrcd(ctx, &a);
}

static struct ibv_srq *create_xrc_srq(struct tu_res *res, struct ibv_xrcd *xrcd,
				      struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			     IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC,
		.pd = res->pd,
		.xrcd = xrcd,
		.cq = cq,
	};

	return ibv_create_srq_ex(res->ctx, &a);
}

static struct ibv_qp *create_target(struct tu_res *res, struct ibv_xrcd *xrcd)
{
	struct ibv_qp_init_attr_ex a = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD,
		.xrcd = xrcd,
	};

	return ibv_create_qp_ex(res->ctx, &a);
}

static struct ibv_qp *create_initiator(struct tu_res *res, bool builder)
{
	struct ibv_qp_init_attr_ex a = {
		.qp_type = IBV_QPT_XRC_SEND,
		.send_cq = res->cq,
		.cap = { .max_send_wr = 16, .max_send_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = res->pd,
	};

	if (builder) {
		a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
				   IBV_QP_EX_WITH_RDMA_WRITE;
	}
	return ibv_create_qp_ex(res->ctx, &a);
}

/*
 * The common setting: a private XRC domain with N_SRQ SRQs (each with its own CQ and
 * receive buffer), a target QP in it, an initiator connected to it, and a source and a
 * target buffer of BUF_LEN registered on the fixture's PD for every access.
 */
struct env {
	struct tu_res *res;
	struct ibv_xrcd *xrcd;
	struct ibv_cq *rcq[N_SRQ];
	struct ibv_srq *srq[N_SRQ];
	uint32_t srqn[N_SRQ];
	struct ibv_qp *tgt, *ini;
	unsigned char *src, *dst;
	struct ibv_mr *smr, *dmr;
};

/* The initiator's completion of @wr_id: every field TP_WCE_SEND defines (qp_num the
 * XRC_SEND QP; byte_len for READ and atomics). */
static void expect_send(struct env *e, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t byte_len,
			const char *what)
{
	struct tp_wc_expect x = tp_send_expect(wr_id, e->ini->qp_num, op, byte_len);
	struct ibv_wc wc;

	expect_wc(e->res->cq, wr_id, IBV_WC_SUCCESS, &wc, what);
	tp_check_wc(&wc, &x, what);
}

/* A receive through XRC SRQ @srq: every field. qp_num is the XRC target QP the message
 * came through (the SRQ belongs to no QP), src_qp the sending XRC_SEND QP, slid this
 * port's LID, pkey_index the target's (0), wc_flags IBV_WC_WITH_IMM or nothing. */
static void expect_recv(struct env *e, int srq, uint64_t wr_id, uint32_t byte_len,
			uint32_t src_qp, bool imm, uint32_t imm_data, const char *what)
{
	struct tp_wc_expect x = { .wr_id = wr_id, .status = IBV_WC_SUCCESS, .check = TP_WCE_RECV,
				  .qp_num = e->tgt->qp_num, .opcode = IBV_WC_RECV,
				  .byte_len = byte_len, .wc_flags = imm ? IBV_WC_WITH_IMM : 0,
				  .imm_data = imm_data, .src_qp = src_qp,
				  .slid = e->res->port.lid };
	struct ibv_wc wc;

	expect_wc(e->rcq[srq], wr_id, IBV_WC_SUCCESS, &wc, what);
	tp_check_wc(&wc, &x, what);
}

static void env_connect(struct env *e, uint8_t min_rnr_timer)
{
	struct tu_conn c;

	tu_conn_init(&c, e->res, e->ini->qp_num);
	c.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	c.max_dest_rd_atomic = 4;
	c.min_rnr_timer = min_rnr_timer;
	assert_int_equal(tu_qp_connect(e->tgt, &c, IBV_QPS_RTS), 0);
	tu_conn_init(&c, e->res, e->tgt->qp_num);
	c.access = 0;
	c.max_rd_atomic = 4;
	assert_int_equal(tu_qp_connect(e->ini, &c, IBV_QPS_RTS), 0);
}

static void env_open(struct env *e, struct tu_res *res, bool builder)
{
	const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

	memset(e, 0, sizeof(*e));
	e->res = res;
	e->xrcd = open_xrcd(res->ctx, -1, O_CREAT);
	assert_non_null(e->xrcd);
	for (int i = 0; i < N_SRQ; i++) {
		e->rcq[i] = ibv_create_cq(res->ctx, 32, NULL, NULL, 0);
		assert_non_null(e->rcq[i]);
		e->srq[i] = create_xrc_srq(res, e->xrcd, e->rcq[i]);
		assert_non_null(e->srq[i]);
		assert_int_equal(ibv_get_srq_num(e->srq[i], &e->srqn[i]), 0);
	}
	e->tgt = tu_keep_qp(res, create_target(res, e->xrcd));
	e->ini = tu_keep_qp(res, create_initiator(res, builder));
	e->src = calloc(1, BUF_LEN);
	e->dst = calloc(1, BUF_LEN);
	assert_non_null(e->src);
	assert_non_null(e->dst);
	e->smr = ibv_reg_mr(res->pd, e->src, BUF_LEN, access);
	e->dmr = ibv_reg_mr(res->pd, e->dst, BUF_LEN, access);
	assert_non_null(e->smr);
	assert_non_null(e->dmr);
	env_connect(e, 12);
}

static void env_close(struct env *e)
{
	tu_destroy_qp(e->res, e->ini);
	tu_destroy_qp(e->res, e->tgt);
	for (int i = 0; i < N_SRQ; i++) {
		if (e->srq[i])
			assert_int_equal(ibv_destroy_srq(e->srq[i]), 0);
		assert_int_equal(ibv_destroy_cq(e->rcq[i]), 0);
	}
	assert_int_equal(ibv_close_xrcd(e->xrcd), 0);
	assert_int_equal(ibv_dereg_mr(e->smr), 0);
	assert_int_equal(ibv_dereg_mr(e->dmr), 0);
	free(e->src);
	free(e->dst);
}

/* A receive of @len bytes at @off in e->dst on SRQ @i. */
static void post_srq_recv(struct env *e, int i, uint64_t wr_id, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)e->dst + off, .length = len,
			       .lkey = e->dmr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	assert_int_equal(ibv_post_srq_recv(e->srq[i], &wr, &bad), 0);
}

/* @opcode of @len bytes of e->src from the initiator to SRQ number @srqn. */
static int post_xrc(struct env *e, enum ibv_wr_opcode opcode, uint64_t wr_id, uint32_t srqn,
		    uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)e->src, .length = len, .lkey = e->smr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				  .opcode = opcode, .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.qp_type.xrc.remote_srqn = srqn;
	if (opcode == IBV_WR_SEND_WITH_IMM)
		wr.imm_data = htonl(0x5eed0000u + (uint32_t)wr_id);
	if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 5;
		wr.wr.atomic.swap = 0x1234;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(e->ini, &wr, &bad);
}

/* ---- domains ------------------------------------------------------------------------- */

static void test_open_xrcd_rules(void **state)
{
	struct tu_res *res = *state;
	struct ibv_xrcd_init_attr a = { .comp_mask = IBV_XRCD_INIT_ATTR_FD, .fd = -1 };
	char path[] = "/tmp/sv-xrcd-XXXXXX";
	struct ibv_xrcd *x1, *x2;
	int fd;

	assert_true(res->dev.device_cap_flags & IBV_DEVICE_XRC);
	/* ibv_cmd_open_xrcd: both FD and OFLAGS are required, unknown bits are refused. */
	errno = 0;
	assert_null(ibv_open_xrcd(res->ctx, &a));
	assert_int_equal(errno, EINVAL);
	a.comp_mask = IBV_XRCD_INIT_ATTR_RESERVED | IBV_XRCD_INIT_ATTR_FD |
		      IBV_XRCD_INIT_ATTR_OFLAGS;
	errno = 0;
	assert_null(ibv_open_xrcd(res->ctx, &a));
	assert_int_equal(errno, EOPNOTSUPP);

	fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	/* A file with no domain yet: O_CREAT makes one, without it EAGAIN. */
	errno = 0;
	assert_null(open_xrcd(res->ctx, fd, 0));
	assert_int_equal(errno, EAGAIN);
	x1 = open_xrcd(res->ctx, fd, O_CREAT);
	assert_non_null(x1);
	errno = 0;
	assert_null(open_xrcd(res->ctx, fd, O_CREAT | O_EXCL));
	assert_int_equal(errno, EINVAL);
	x2 = open_xrcd(res->ctx, fd, 0);
	assert_non_null(x2);
	assert_ptr_not_equal(x1, x2);
	assert_int_equal(ibv_close_xrcd(x1), 0);
	/* The domain lives while a handle does. */
	x1 = open_xrcd(res->ctx, fd, 0);
	assert_non_null(x1);
	assert_int_equal(ibv_close_xrcd(x1), 0);
	assert_int_equal(ibv_close_xrcd(x2), 0);
	/* Gone with the last handle: the file has no domain again. */
	errno = 0;
	assert_null(open_xrcd(res->ctx, fd, 0));
	assert_int_equal(errno, EAGAIN);
	close(fd);
	errno = 0;
	assert_null(open_xrcd(res->ctx, fd, O_CREAT));
	assert_int_equal(errno, EBADF);
}

static void test_xrc_srq_rules(void **state)
{
	struct tu_res *res = *state;
	struct ibv_xrcd *x = open_xrcd(res->ctx, -1, O_CREAT);
	struct ibv_srq_init_attr_ex a = {
		.attr = { .max_wr = 4, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC,
		.pd = res->pd,
	};
	struct ibv_srq *s1, *s2, *basic;
	struct ibv_srq_init_attr ba = { .attr = { .max_wr = 4, .max_sge = 1 } };
	uint32_t n1 = 0, n2 = 0, nb = 0;

	assert_non_null(x);
	/* No domain, or no CQ: EINVAL (ib_uverbs_create_srq). */
	errno = 0;
	assert_null(ibv_create_srq_ex(res->ctx, &a));
	assert_int_equal(errno, EINVAL);
	a.comp_mask |= IBV_SRQ_INIT_ATTR_XRCD;
	a.xrcd = x;
	errno = 0;
	assert_null(ibv_create_srq_ex(res->ctx, &a));
	assert_int_equal(errno, EINVAL);
	/* Tag matching is not offered. */
	a.srq_type = IBV_SRQT_TM;
	a.comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
	a.cq = res->cq;
	errno = 0;
	assert_null(ibv_create_srq_ex(res->ctx, &a));
	assert_int_equal(errno, EOPNOTSUPP);

	s1 = create_xrc_srq(res, x, res->cq);
	s2 = create_xrc_srq(res, x, res->cq);
	basic = ibv_create_srq(res->pd, &ba);
	assert_non_null(s1);
	assert_non_null(s2);
	assert_non_null(basic);
	assert_int_equal(ibv_get_srq_num(s1, &n1), 0);
	assert_int_equal(ibv_get_srq_num(s2, &n2), 0);
	assert_int_equal(ibv_get_srq_num(basic, &nb), 0);
	assert_true(n1 && n2 && nb && n1 != n2 && n1 != nb && n2 != nb);
	assert_true(n1 <= 0xffffff && n2 <= 0xffffff);
	/* The domain and the CQ are in use. */
	assert_int_equal(ibv_close_xrcd(x), EBUSY);
	assert_int_equal(ibv_destroy_cq(res->cq), EBUSY);
	assert_int_equal(ibv_destroy_srq(s1), 0);
	assert_int_equal(ibv_destroy_srq(s2), 0);
	assert_int_equal(ibv_destroy_srq(basic), 0);
	assert_int_equal(ibv_close_xrcd(x), 0);
}

static void test_xrc_qp_rules(void **state)
{
	struct tu_res *res = *state;
	struct ibv_xrcd *x = open_xrcd(res->ctx, -1, O_CREAT);
	struct ibv_qp_init_attr_ex a = { .qp_type = IBV_QPT_XRC_RECV,
					 .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = res->pd };
	struct ibv_qp *tgt, *ini;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;
	struct ibv_recv_wr rwr = { .wr_id = 1 }, *rbad;
	struct ibv_send_wr swr = { .wr_id = 1, .opcode = IBV_WR_SEND }, *sbad;
	struct tu_conn c;

	assert_non_null(x);
	/* A target is made in a domain, not on a PD. */
	errno = 0;
	assert_null(ibv_create_qp_ex(res->ctx, &a));
	assert_int_equal(errno, EINVAL);
	a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	a.xrcd = x;
	a.cap.max_send_wr = 8;
	a.cap.max_recv_wr = 8;
	tgt = tu_keep_qp(res, ibv_create_qp_ex(res->ctx, &a));
	assert_int_equal(a.cap.max_send_wr, 0);
	assert_int_equal(a.cap.max_recv_wr, 0);
	assert_null(tgt->pd);
	assert_null(tgt->send_cq);
	assert_int_equal(ibv_close_xrcd(x), EBUSY);

	ini = tu_keep_qp(res, create_initiator(res, false));
	assert_null(ini->recv_cq);
	assert_int_equal(ibv_query_qp(ini, &qa, IBV_QP_CAP, &ia), 0);
	assert_int_equal(ia.qp_type, IBV_QPT_XRC_SEND);
	assert_int_equal(ia.cap.max_recv_wr, 0);
	assert_int_equal(ia.cap.max_send_wr, 16);

	/* Neither end has a receive queue; a target has no send queue. */
	assert_int_equal(ibv_post_recv(tgt, &rwr, &rbad), EINVAL);
	tu_conn_init(&c, res, tgt->qp_num);
	assert_int_equal(tu_qp_to_init(ini, &c), 0);
	assert_int_equal(ibv_post_recv(ini, &rwr, &rbad), EINVAL);

	/* INIT -> RTR: an initiator needs no MAX_DEST_RD_ATOMIC / MIN_RNR_TIMER, and is
	 * given them anyway by programs written for RC: uverbs drops them (perftest -c XRC). */
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTR;
	qa.ah_attr = c.ah;
	qa.path_mtu = c.mtu;
	qa.dest_qp_num = tgt->qp_num;
	qa.min_rnr_timer = 12;
	qa.max_dest_rd_atomic = 4;
	assert_int_equal(ibv_modify_qp(ini, &qa, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						   IBV_QP_DEST_QPN | IBV_QP_MIN_RNR_TIMER),
			 EINVAL); /* RQ_PSN missing */
	assert_int_equal(ibv_modify_qp(ini, &qa, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						   IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_DEST_RD_ATOMIC),
			 0);
	assert_int_equal(tu_qp_to_rts(ini, &c), 0);

	/* A target needs them at RTR, and takes only TIMEOUT and SQ_PSN at RTS. */
	tu_conn_init(&c, res, ini->qp_num);
	assert_int_equal(tu_qp_to_init(tgt, &c), 0);
	assert_int_equal(ibv_modify_qp(tgt, &qa, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN),
			 EINVAL);
	assert_int_equal(tu_qp_to_rtr(tgt, &c), 0);
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTS;
	qa.timeout = 14;
	qa.retry_cnt = 7;
	assert_int_equal(ibv_modify_qp(tgt, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT),
			 EINVAL); /* TIMEOUT missing; RETRY_CNT, of no use to it, is dropped */
	assert_int_equal(ibv_modify_qp(tgt, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
						   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
						   IBV_QP_MAX_QP_RD_ATOMIC),
			 0);
	assert_int_equal(ibv_post_send(tgt, &swr, &sbad), EINVAL);
	assert_ptr_equal(sbad, &swr);

	tu_destroy_qp(res, ini);
	tu_destroy_qp(res, tgt);
	assert_int_equal(ibv_close_xrcd(x), 0);
}

/* ---- traffic ------------------------------------------------------------------------- */

static void test_xrc_send_lands_in_the_srq_named(void **state)
{
	struct env e;
	struct ibv_wc wc;

	env_open(&e, *state, false);
	post_srq_recv(&e, 0, 100, 0, 4096);
	post_srq_recv(&e, 1, 200, 8192, 4096);
	for (int round = 0; round < 2; round++) {
		int i = round ? 0 : 1; /* SRQ 1 first */
		uint32_t off = i ? 8192 : 0;

		fill(e.src, 3000, 40 + (unsigned int)round);
		assert_int_equal(post_xrc(&e, IBV_WR_SEND_WITH_IMM, 7 + (uint64_t)round, e.srqn[i],
					  3000, 0, 0),
				 0);
		expect_send(&e, 7 + (uint64_t)round, IBV_WC_SEND, 0, "XRC SEND");
		expect_recv(&e, i, i ? 200 : 100, 3000, e.ini->qp_num, true,
			    htonl(0x5eed0000u + 7u + (uint32_t)round), "receive on the SRQ named");
		check_fill(e.dst + off, 3000, 40 + (unsigned int)round, "SEND data in the SRQ's buffer");
		/* Nothing went to the other SRQ's CQ. */
		assert_int_equal(tu_poll(e.rcq[1 - i], 1, &wc, 0), 0);
	}
	env_close(&e);
}

static void test_xrc_large_send(void **state)
{
	struct env e;

	env_open(&e, *state, false);
	fill(e.src, BUF_LEN, 9);
	post_srq_recv(&e, 1, 300, 0, BUF_LEN);
	assert_int_equal(post_xrc(&e, IBV_WR_SEND, 8, e.srqn[1], BUF_LEN, 0, 0), 0);
	expect_send(&e, 8, IBV_WC_SEND, 0, "1 MiB XRC SEND");
	expect_recv(&e, 1, 300, BUF_LEN, e.ini->qp_num, false, 0, "1 MiB receive");
	check_fill(e.dst, BUF_LEN, 9, "1 MiB SEND");
	env_close(&e);
}

static void test_xrc_rdma_and_atomics(void **state)
{
	struct env e;
	uint64_t v;

	env_open(&e, *state, false);
	fill(e.src, 65536, 3);
	assert_int_equal(post_xrc(&e, IBV_WR_RDMA_WRITE, 1, e.srqn[0], 65536,
				  (uintptr_t)e.dst + 4096, e.dmr->rkey),
			 0);
	expect_send(&e, 1, IBV_WC_RDMA_WRITE, 0, "XRC RDMA WRITE");
	check_fill(e.dst + 4096, 65536, 3, "XRC RDMA WRITE");

	memset(e.src, 0, 65536);
	fill(e.dst + 200000, 1000, 4);
	assert_int_equal(post_xrc(&e, IBV_WR_RDMA_READ, 2, e.srqn[1], 1000,
				  (uintptr_t)e.dst + 200000, e.dmr->rkey),
			 0);
	expect_send(&e, 2, IBV_WC_RDMA_READ, 1000, "XRC RDMA READ");
	check_fill(e.src, 1000, 4, "XRC RDMA READ");

	v = 100;
	memcpy(e.dst + 8, &v, 8);
	assert_int_equal(post_xrc(&e, IBV_WR_ATOMIC_FETCH_AND_ADD, 3, e.srqn[0], 8,
				  (uintptr_t)e.dst + 8, e.dmr->rkey),
			 0);
	expect_send(&e, 3, IBV_WC_FETCH_ADD, 8, "XRC fetch and add");
	memcpy(&v, e.src, 8);
	assert_int_equal(v, 100);
	memcpy(&v, e.dst + 8, 8);
	assert_int_equal(v, 105);
	v = 5;
	memcpy(e.dst + 16, &v, 8);
	assert_int_equal(post_xrc(&e, IBV_WR_ATOMIC_CMP_AND_SWP, 4, e.srqn[0], 8,
				  (uintptr_t)e.dst + 16, e.dmr->rkey),
			 0);
	expect_send(&e, 4, IBV_WC_COMP_SWAP, 8, "XRC compare and swap");
	memcpy(&v, e.dst + 16, 8);
	assert_int_equal(v, 0x1234);
	env_close(&e);
}

/* The SRQ's PD protects: an MR of another PD is out of reach, the pair goes to Error. */
static void test_xrc_rkey_of_another_pd(void **state)
{
	struct tu_res *res = *state;
	struct ibv_pd *pd2 = ibv_alloc_pd(res->ctx);
	unsigned char *other = calloc(1, 4096);
	struct ibv_mr *omr;
	struct env e;

	assert_non_null(pd2);
	assert_non_null(other);
	omr = ibv_reg_mr(pd2, other, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_non_null(omr);
	env_open(&e, res, false);
	fill(e.src, 64, 5);
	assert_int_equal(post_xrc(&e, IBV_WR_RDMA_WRITE, 9, e.srqn[0], 64, (uintptr_t)other,
				  omr->rkey),
			 0);
	expect_wc(res->cq, 9, IBV_WC_REM_ACCESS_ERR, NULL, "WRITE to an MR of another PD");
	for (int i = 0; i < 64; i++)
		assert_int_equal(other[i], 0);
	assert_true(tu_wait_qp_event(res->ctx, e.tgt, IBV_EVENT_QP_ACCESS_ERR, WAIT_MS));
	env_close(&e);
	assert_int_equal(ibv_dereg_mr(omr), 0);
	assert_int_equal(ibv_dealloc_pd(pd2), 0);
	free(other);
}

/* An SRQ number the target's domain does not hold: Invalid Request. */
static void test_xrc_srq_outside_the_domain(void **state)
{
	struct tu_res *res = *state;
	struct ibv_xrcd *x2 = open_xrcd(res->ctx, -1, O_CREAT);
	struct ibv_srq *foreign;
	uint32_t n;
	struct env e;

	assert_non_null(x2);
	foreign = create_xrc_srq(res, x2, res->cq);
	assert_non_null(foreign);
	assert_int_equal(ibv_get_srq_num(foreign, &n), 0);
	env_open(&e, res, false);
	fill(e.src, 16, 6);
	assert_int_equal(post_xrc(&e, IBV_WR_SEND, 11, n, 16, 0, 0), 0);
	expect_wc(res->cq, 11, IBV_WC_REM_INV_REQ_ERR, NULL, "SEND to an SRQ of another domain");
	assert_true(tu_wait_qp_event(res->ctx, e.tgt, IBV_EVENT_QP_REQ_ERR, WAIT_MS));
	env_close(&e);
	assert_int_equal(ibv_destroy_srq(foreign), 0);
	assert_int_equal(ibv_close_xrcd(x2), 0);
}

/* A destroyed SRQ's number is no longer in the domain. */
static void test_xrc_destroyed_srq(void **state)
{
	struct env e;

	env_open(&e, *state, false);
	assert_int_equal(ibv_destroy_srq(e.srq[1]), 0);
	e.srq[1] = NULL;
	assert_int_equal(post_xrc(&e, IBV_WR_SEND, 12, e.srqn[1], 16, 0, 0), 0);
	expect_wc(e.res->cq, 12, IBV_WC_REM_INV_REQ_ERR, NULL, "SEND to a destroyed SRQ");
	env_close(&e);
}

/* No receive on the SRQ: the SEND waits (RNR) and lands once one is posted. */
static void test_xrc_rnr_then_receive(void **state)
{
	struct env e;
	struct ibv_wc wc;

	env_open(&e, *state, false);
	fill(e.src, 512, 7);
	assert_int_equal(post_xrc(&e, IBV_WR_SEND, 13, e.srqn[0], 512, 0, 0), 0);
	assert_int_equal(tu_poll(e.res->cq, 1, &wc, 50), 0);
	post_srq_recv(&e, 0, 400, 1024, 512);
	expect_recv(&e, 0, 400, 512, e.ini->qp_num, false, 0, "receive posted after the SEND");
	expect_send(&e, 13, IBV_WC_SEND, 0, "SEND after RNR");
	check_fill(e.dst + 1024, 512, 7, "SEND after RNR");
	env_close(&e);
}

/* Two handles on one file: an SRQ made through one receives through a target of the
 * other. */
static void test_xrc_shared_domain(void **state)
{
	struct tu_res *res = *state;
	char path[] = "/tmp/sv-xrcd-XXXXXX";
	int fd = mkstemp(path);
	struct ibv_xrcd *x2;
	struct env e;

	assert_true(fd >= 0);
	unlink(path);
	env_open(&e, res, false);
	/* Rebuild the target in a file-backed domain reached through a second handle. */
	tu_destroy_qp(res, e.ini);
	tu_destroy_qp(res, e.tgt);
	for (int i = 0; i < N_SRQ; i++)
		assert_int_equal(ibv_destroy_srq(e.srq[i]), 0);
	assert_int_equal(ibv_close_xrcd(e.xrcd), 0);
	e.xrcd = open_xrcd(res->ctx, fd, O_CREAT);
	x2 = open_xrcd(res->ctx, fd, 0);
	assert_non_null(e.xrcd);
	assert_non_null(x2);
	for (int i = 0; i < N_SRQ; i++) {
		e.srq[i] = create_xrc_srq(res, e.xrcd, e.rcq[i]);
		assert_non_null(e.srq[i]);
		assert_int_equal(ibv_get_srq_num(e.srq[i], &e.srqn[i]), 0);
	}
	e.tgt = tu_keep_qp(res, create_target(res, x2));
	e.ini = tu_keep_qp(res, create_initiator(res, false));
	env_connect(&e, 12);
	post_srq_recv(&e, 1, 500, 0, 64);
	fill(e.src, 64, 8);
	assert_int_equal(post_xrc(&e, IBV_WR_SEND, 14, e.srqn[1], 64, 0, 0), 0);
	expect_send(&e, 14, IBV_WC_SEND, 0, "SEND through the second handle");
	expect_recv(&e, 1, 500, 64, e.ini->qp_num, false, 0, "receive through the first handle");
	check_fill(e.dst, 64, 8, "SEND in a shared domain");
	assert_int_equal(ibv_close_xrcd(x2), EBUSY); /* the target holds it */
	tu_destroy_qp(res, e.tgt);
	e.tgt = tu_keep_qp(res, create_target(res, e.xrcd)); /* env_close destroys one */
	assert_int_equal(ibv_close_xrcd(x2), 0);
	env_close(&e);
	close(fd);
}

/* The ibv_wr_* builder names the SRQ with ibv_wr_set_xrc_srqn. */
static void test_xrc_builder(void **state)
{
	struct env e;
	struct ibv_qp_ex *qx;

	env_open(&e, *state, true);
	qx = ibv_qp_to_qp_ex(e.ini);
	assert_non_null(qx);
	post_srq_recv(&e, 0, 600, 0, 256);
	fill(e.src, 256, 10);
	ibv_wr_start(qx);
	qx->wr_id = 15;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(qx, htonl(77));
	ibv_wr_set_xrc_srqn(qx, e.srqn[0]);
	ibv_wr_set_sge(qx, e.smr->lkey, (uintptr_t)e.src, 256);
	assert_int_equal(ibv_wr_complete(qx), 0);
	expect_send(&e, 15, IBV_WC_SEND, 0, "builder SEND");
	expect_recv(&e, 0, 600, 256, e.ini->qp_num, true, htonl(77), "builder receive");
	check_fill(e.dst, 256, 10, "builder SEND");
	env_close(&e);
}

/* The initiator in an agent process; the domain, SRQ and target here. */
static void test_xrc_initiator_in_another_process(void **state)
{
	struct tu_res *res = *state;
	struct tp_qp_opts o = { .type = IBV_QPT_XRC_SEND };
	struct ibv_async_event ev;
	struct tp_peer peer;
	struct tp_info info;
	struct tp_wr w;
	struct tu_conn c;
	struct env e;

	env_open(&e, res, false);
	tu_destroy_qp(res, e.tgt); /* a fresh target for the agent's initiator */
	e.tgt = tu_keep_qp(res, create_target(res, e.xrcd));
	tp_start(&peer);
	tp_open(&peer, 65536, 0);
	assert_int_equal(tp_create_qp(&peer, &o), 0);
	tp_info(&peer, 0, &info);
	tu_conn_init(&c, res, info.qpn);
	c.access = IBV_ACCESS_REMOTE_WRITE;
	c.max_dest_rd_atomic = 4;
	assert_int_equal(tu_qp_connect(e.tgt, &c, IBV_QPS_RTS), 0);
	tu_conn_init(&c, res, e.tgt->qp_num);
	c.access = 0;
	assert_int_equal(tp_connect(&peer, 0, &c), 0);

	post_srq_recv(&e, 1, 700, 4096, 8192);
	tp_fill_peer(&peer, 0, 5000, 31, 0);
	w = tp_wr1(21, IBV_WR_SEND, 0, 5000);
	w.xrc_srqn = e.srqn[1];
	assert_int_equal(tp_post_send(&peer, 0, &w, 1, NULL), 0);
	tp_expect_peer_wc(&peer, true, 21, IBV_WC_SUCCESS, NULL);
	expect_recv(&e, 1, 700, 5000, info.qpn, false, 0, "SEND from another process");
	tp_assert_pattern(e.dst + 4096, 5000, 31, 0, "SEND from another process");

	tp_fill_peer(&peer, 8192, 3000, 32, 0);
	w = tp_wr1(22, IBV_WR_RDMA_WRITE, 8192, 3000);
	w.xrc_srqn = e.srqn[0];
	w.remote_addr = (uintptr_t)e.dst + 65536;
	w.rkey = e.dmr->rkey;
	assert_int_equal(tp_post_send(&peer, 0, &w, 1, NULL), 0);
	tp_expect_peer_wc(&peer, true, 22, IBV_WC_SUCCESS, NULL);
	tp_assert_pattern(e.dst + 65536, 3000, 32, 0, "RDMA WRITE from another process");

	/* The initiator's process dies: the target learns within a second (not on RoCE,
	 * where nothing tells, as on a NIC: docs/conformance.md). */
	tp_kill(&peer);
	if (!tu_wire_roce()) {
		assert_true(tp_wait_async(res->ctx, IBV_EVENT_QP_FATAL, 1000, &ev));
		assert_ptr_equal(ev.element.qp, e.tgt);
	}
	(void)tp_cleanup(&peer); /* reaped by tp_kill: closes the socket */
	env_close(&e);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		T(test_open_xrcd_rules),
		T(test_xrc_srq_rules),
		T(test_xrc_qp_rules),
		T(test_xrc_send_lands_in_the_srq_named),
		T(test_xrc_large_send),
		T(test_xrc_rdma_and_atomics),
		T(test_xrc_rkey_of_another_pd),
		T(test_xrc_srq_outside_the_domain),
		T(test_xrc_destroyed_srq),
		T(test_xrc_rnr_then_receive),
		T(test_xrc_shared_domain),
		T(test_xrc_builder),
		T(test_xrc_initiator_in_another_process),
	};

	tp_main(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
