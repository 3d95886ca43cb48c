/*
 * Black-box tests of shared receive queues, address handles and libibverbs' helper
 * functions, checked against rdma-core 44 and the kernel's answers:
 *   - create_srq: NULL + errno; max_wr/max_sge above the device limits are EINVAL;
 *     modify/query/destroy_srq return 0 or a positive errno; an SRQ with a QP is EBUSY;
 *     ibv_post_srq_recv returns an errno value and points *bad_wr at the failing WR;
 *   - create_ah: the port must exist, the sgid_index must be inside the GID table, and
 *     a RoCE port needs a GRH (kernel rdma_check_ah_attr / rdma_get_gid_attr: EINVAL);
 *   - ibv_init_ah_from_wc (libibverbs/verbs.c): dgid = the GRH's sgid, sgid_index = our
 *     entry holding the GRH's dgid (RoCE v2 for next_hdr UDP), hop_limit, traffic class
 *     and flow label from the GRH, dlid = wc.slid, sl = wc.sl, src_path_bits =
 *     wc.dlid_path_bits; 0 or -1;
 *   - the *_str and rate tables are those of Debian's libibverbs.so.1 (rdma-core 44),
 *     measured by calling it for every value.
 */
#include "verbs/sv_test_util.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <stdlib.h>
#include <string.h>

#define PORT 1

static const union ibv_gid loopback_v4_gid = {
	.raw = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1 },
};

/* 2001:db8::2, a peer's address: its byte 12 is 0, so it never reads as an IPv4 header. */
static const union ibv_gid remote_gid = {
	.raw = { 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2 },
};

/* The RoCE v2 entry of our table holding @gid, or -1. */
static int find_v2_gid(struct ibv_context *ctx, const union ibv_gid *gid)
{
	struct ibv_port_attr pa;

	assert_int_equal(ibv_query_port(ctx, PORT, &pa), 0);
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;

		if (ibv_query_gid_ex(ctx, PORT, (uint32_t)i, &e, 0))
			continue;
		if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && !memcmp(&e.gid, gid, sizeof(*gid)))
			return i;
	}
	return -1;
}

static void query_attrs(struct ibv_context *ctx, struct ibv_device_attr *da,
			struct ibv_port_attr *pa)
{
	assert_int_equal(ibv_query_device(ctx, da), 0);
	assert_int_equal(ibv_query_port(ctx, PORT, pa), 0);
}

/* ---- fork (first: it must run before this process registers any memory) ----------- */

/* ibv_fork_init succeeds before any registration; fork support is then on or unneeded. */
static void test_fork_init(void **state)
{
	enum ibv_fork_status st;

	(void)state;
	st = ibv_is_fork_initialized();
	assert_true(st == IBV_FORK_DISABLED || st == IBV_FORK_UNNEEDED);
	assert_int_equal(ibv_fork_init(), 0);
	st = ibv_is_fork_initialized();
	assert_true(st == IBV_FORK_ENABLED || st == IBV_FORK_UNNEEDED);
	/* Calling it again is harmless. */
	assert_int_equal(ibv_fork_init(), 0);
}

/* ---- SRQ --------------------------------------------------------------------------- */

/* create_srq fills in the SRQ and the actual capacities; query agrees. */
static void test_create_and_query_srq(void **state)
{
	struct tu_res *res = *state;
	int marker;
	struct ibv_srq_init_attr ia = {
		.srq_context = &marker,
		.attr = { .max_wr = 16, .max_sge = 2, .srq_limit = 0 },
	};
	struct ibv_srq_attr qa;
	struct ibv_srq *srq = ibv_create_srq(res->pd, &ia);

	assert_non_null(srq);
	assert_ptr_equal(srq->context, res->ctx);
	assert_ptr_equal(srq->pd, res->pd);
	assert_ptr_equal(srq->srq_context, &marker);
	assert_true(ia.attr.max_wr >= 16);
	assert_true(ia.attr.max_sge >= 2);
	memset(&qa, 0xa5, sizeof(qa));
	assert_int_equal(ibv_query_srq(srq, &qa), 0);
	/* query reports the capacities create_srq handed back. */
	assert_int_equal(qa.max_wr, ia.attr.max_wr);
	assert_int_equal(qa.max_sge, ia.attr.max_sge);
	assert_int_equal(qa.srq_limit, 0);
	assert_int_equal(ibv_destroy_srq(srq), 0);
}

/* max_wr / max_sge above the device's max_srq_wr / max_srq_sge: EINVAL; at them: ok. */
static void test_create_srq_limits(void **state)
{
	struct tu_res *res = *state;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	struct ibv_srq_init_attr ia;
	struct ibv_srq *srq;

	query_attrs(res->ctx, &da, &pa);
	ia = (struct ibv_srq_init_attr){ .attr = { .max_wr = (uint32_t)da.max_srq_wr + 1,
						   .max_sge = 1 } };
	errno = 0;
	assert_null(ibv_create_srq(res->pd, &ia));
	assert_int_equal(errno, EINVAL);
	ia = (struct ibv_srq_init_attr){ .attr = { .max_wr = 4,
						   .max_sge = (uint32_t)da.max_srq_sge + 1 } };
	errno = 0;
	assert_null(ibv_create_srq(res->pd, &ia));
	assert_int_equal(errno, EINVAL);
	ia = (struct ibv_srq_init_attr){ .attr = { .max_wr = (uint32_t)da.max_srq_wr,
						   .max_sge = (uint32_t)da.max_srq_sge } };
	srq = ibv_create_srq(res->pd, &ia);
	assert_non_null(srq);
	assert_int_equal(ibv_destroy_srq(srq), 0);
}

/* max_wr 0: providers differ (rxe refuses, mlx5 rounds up); either way it is coherent. */
static void test_create_srq_zero_wr(void **state)
{
	struct tu_res *res = *state;
	struct ibv_srq_init_attr ia = { .attr = { .max_wr = 0, .max_sge = 1 } };
	struct ibv_srq *srq;

	errno = 0;
	srq = ibv_create_srq(res->pd, &ia);
	if (srq) {
		struct ibv_srq_attr qa;

		assert_int_equal(ibv_query_srq(srq, &qa), 0);
		assert_int_equal(qa.max_wr, ia.attr.max_wr);
		assert_int_equal(ibv_destroy_srq(srq), 0);
	} else {
		assert_int_equal(errno, EINVAL);
	}
}

/* IBV_SRQ_LIMIT arms the limit; a limit above max_wr is EINVAL and changes nothing. */
static void test_modify_srq_limit(void **state)
{
	struct tu_res *res = *state;
	struct ibv_srq_init_attr ia = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	struct ibv_srq_attr a, qa;
	struct ibv_srq *srq;

	query_attrs(res->ctx, &da, &pa);
	srq = ibv_create_srq(res->pd, &ia);
	assert_non_null(srq);
	a = (struct ibv_srq_attr){ .srq_limit = 4 };
	assert_int_equal(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
	assert_int_equal(ibv_query_srq(srq, &qa), 0);
	assert_int_equal(qa.srq_limit, 4);

	a = (struct ibv_srq_attr){ .srq_limit = qa.max_wr + 1 };
	assert_int_equal(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), EINVAL);
	a = (struct ibv_srq_attr){ .srq_limit = (uint32_t)da.max_srq_wr + 1 };
	assert_int_equal(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), EINVAL);
	assert_int_equal(ibv_query_srq(srq, &qa), 0);
	assert_int_equal(qa.srq_limit, 4);
	assert_int_equal(ibv_destroy_srq(srq), 0);
}

/* An SRQ a QP receives on cannot be destroyed (EBUSY) until the QP is gone. */
static void test_destroy_srq_with_qp_is_ebusy(void **state)
{
	struct tu_res *res = *state;
	struct ibv_srq_init_attr sia = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(res->pd, &sia);
	struct ibv_qp_init_attr qia = {
		.send_cq = res->cq,
		.recv_cq = res->cq,
		.srq = srq,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp;

	assert_non_null(srq);
	qp = ibv_create_qp(res->pd, &qia);
	assert_non_null(qp);
	assert_ptr_equal(qp->srq, srq);
	assert_int_equal(ibv_destroy_srq(srq), EBUSY);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_srq(srq), 0);
}

/* More SGEs than max_sge: an errno value (EINVAL) and *bad_wr on that very WR. */
static void test_post_srq_recv_too_many_sges(void **state)
{
	struct tu_res *res = *state;
	struct ibv_srq_init_attr sia = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(res->pd, &sia);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(res->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge[64];
	struct ibv_recv_wr wr[2], *bad = NULL;
	struct ibv_srq_attr qa;

	assert_non_null(srq);
	assert_non_null(mr);
	assert_int_equal(ibv_query_srq(srq, &qa), 0);
	assert_true(qa.max_sge + 1 <= 64);
	for (int i = 0; i < 64; i++)
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)buf + 64 * (unsigned)i,
					   .length = 64, .lkey = mr->lkey };
	wr[0] = (struct ibv_recv_wr){ .wr_id = 1, .next = &wr[1], .sg_list = sge,
				      .num_sge = 1 };
	wr[1] = (struct ibv_recv_wr){ .wr_id = 2, .sg_list = sge,
				      .num_sge = (int)qa.max_sge + 1 };
	assert_int_equal(ibv_post_srq_recv(srq, &wr[0], &bad), EINVAL);
	assert_ptr_equal(bad, &wr[1]);

	/* The failing WR first in the list. */
	bad = NULL;
	assert_int_equal(ibv_post_srq_recv(srq, &wr[1], &bad), EINVAL);
	assert_ptr_equal(bad, &wr[1]);

	/* A valid WR alone is accepted. */
	wr[0].next = NULL;
	bad = NULL;
	assert_int_equal(ibv_post_srq_recv(srq, &wr[0], &bad), 0);
	assert_int_equal(ibv_destroy_srq(srq), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
}

/* ibv_create_srq_ex with a basic SRQ (the header routes it to ibv_create_srq). */
static void test_create_srq_ex_basic(void **state)
{
	struct tu_res *res = *state;
	int marker;
	struct ibv_srq_init_attr_ex ia = {
		.srq_context = &marker,
		.attr = { .max_wr = 8, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE,
		.srq_type = IBV_SRQT_BASIC,
		.pd = res->pd,
	};
	struct ibv_srq_attr qa;
	struct ibv_srq *srq = ibv_create_srq_ex(res->ctx, &ia);

	assert_non_null(srq);
	assert_ptr_equal(srq->pd, res->pd);
	assert_ptr_equal(srq->context, res->ctx);
	assert_ptr_equal(srq->srq_context, &marker);
	assert_int_equal(ibv_query_srq(srq, &qa), 0);
	assert_true(qa.max_wr >= 8);
	assert_int_equal(ibv_destroy_srq(srq), 0);
}

/* A basic SRQ through the provider's create_srq_ex (a CQ in the mask takes that path). */
static void test_create_srq_ex_basic_through_op(void **state)
{
	struct tu_res *res = *state;
	int marker;
	struct ibv_srq_init_attr_ex ia = {
		.srq_context = &marker,
		.attr = { .max_wr = 8, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE |
			     IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_BASIC,
		.pd = res->pd,
		.cq = res->cq,
	};
	struct ibv_srq_attr qa;
	struct ibv_srq *srq;

	errno = 0;
	srq = ibv_create_srq_ex(res->ctx, &ia);
	/* docs/conformance.md lists ibv_create_srq_ex (basic and XRC) as implemented. */
	if (!srq)
		fail_msg("ibv_create_srq_ex (basic) failed: errno %d (%s)", errno, strerror(errno));
	assert_ptr_equal(srq->pd, res->pd);
	assert_ptr_equal(srq->context, res->ctx);
	assert_ptr_equal(srq->srq_context, &marker);
	assert_int_equal(ibv_query_srq(srq, &qa), 0);
	assert_true(qa.max_wr >= 8);
	assert_int_equal(ibv_destroy_srq(srq), 0);
}

/* ---- AH ---------------------------------------------------------------------------- */

/* Expects a failed create_ah with errno @err; an AH that should not exist is destroyed. */
static void expect_no_ah(struct ibv_ah *ah, int err)
{
	int e = errno;

	if (ah)
		ibv_destroy_ah(ah);
	assert_null(ah);
	assert_int_equal(e, err);
}

static struct ibv_ah_attr global_ah_attr(struct ibv_context *ctx)
{
	struct ibv_ah_attr a = {
		.is_global = 1,
		.port_num = PORT,
		.sl = 0,
		.grh = { .sgid_index = 0, .hop_limit = 64, .traffic_class = 0 },
	};

	assert_int_equal(ibv_query_gid(ctx, PORT, 0, &a.grh.dgid), 0);
	return a;
}

/* A global AH to our own GID 0 from sgid_index 0 works; destroy returns 0. */
static void test_create_ah_global(void **state)
{
	struct tu_res *res = *state;
	struct ibv_ah_attr a = global_ah_attr(res->ctx);
	struct ibv_ah *ah = ibv_create_ah(res->pd, &a);

	assert_non_null(ah);
	assert_ptr_equal(ah->context, res->ctx);
	assert_ptr_equal(ah->pd, res->pd);
	assert_int_equal(ibv_destroy_ah(ah), 0);
}

/* Ports 0 and 2 do not exist: EINVAL. */
static void test_create_ah_bad_port_is_einval(void **state)
{
	struct tu_res *res = *state;
	struct ibv_ah_attr a = global_ah_attr(res->ctx);

	a.port_num = 2;
	errno = 0;
	expect_no_ah(ibv_create_ah(res->pd, &a), EINVAL);
	a.port_num = 0;
	errno = 0;
	expect_no_ah(ibv_create_ah(res->pd, &a), EINVAL);
}

/* An sgid_index outside the GID table: EINVAL. */
static void test_create_ah_bad_sgid_index_is_einval(void **state)
{
	struct tu_res *res = *state;
	struct ibv_ah_attr a = global_ah_attr(res->ctx);
	struct ibv_port_attr pa;

	assert_int_equal(ibv_query_port(res->ctx, PORT, &pa), 0);
	if (pa.gid_tbl_len > 255)
		skip(); /* the uint8_t sgid_index cannot leave the table */
	a.grh.sgid_index = (uint8_t)pa.gid_tbl_len;
	errno = 0;
	expect_no_ah(ibv_create_ah(res->pd, &a), EINVAL);
}

/*
 * LID mode. A RoCE NIC refuses an AH without a GRH on its Ethernet port (EINVAL);
 * softverbs deliberately answers to LIDs too (its port has a LID naming the host), so
 * that programs run without -g (ibv_ud_pingpong in LID mode). Without a GRH the LID is
 * the only address: LID 0 is still EINVAL.
 */
static void test_create_ah_lid_mode(void **state)
{
	struct tu_res *res = *state;
	struct ibv_port_attr pa;
	struct ibv_ah_attr a = { .is_global = 0, .port_num = PORT };
	struct ibv_ah *ah;

	assert_int_equal(ibv_query_port(res->ctx, PORT, &pa), 0);
	a.dlid = pa.lid;
	ah = ibv_create_ah(res->pd, &a);
	assert_non_null(ah);
	assert_int_equal(ibv_destroy_ah(ah), 0);
	a.dlid = 0;
	errno = 0;
	expect_no_ah(ibv_create_ah(res->pd, &a), EINVAL);
}

/* A PD with an AH cannot be deallocated (EBUSY). */
static void test_dealloc_pd_with_ah_is_ebusy(void **state)
{
	struct tu_res *res = *state;
	struct ibv_pd *pd = ibv_alloc_pd(res->ctx);
	struct ibv_ah_attr a = global_ah_attr(res->ctx);
	struct ibv_ah *ah;

	assert_non_null(pd);
	ah = ibv_create_ah(pd, &a);
	assert_non_null(ah);
	assert_int_equal(ibv_dealloc_pd(pd), EBUSY);
	assert_int_equal(ibv_destroy_ah(ah), 0);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
}

/* ---- AH from a work completion ------------------------------------------------------ */

/* A UD receive's WC and the IPv6-shaped GRH a RoCE v2 peer at remote_gid would send. */
static void make_wc_grh(struct ibv_wc *wc, struct ibv_grh *grh, const union ibv_gid *dgid)
{
	memset(wc, 0, sizeof(*wc));
	memset(grh, 0, sizeof(*grh));
	wc->status = IBV_WC_SUCCESS;
	wc->opcode = IBV_WC_RECV;
	wc->wc_flags = IBV_WC_GRH;
	wc->src_qp = 0x55;
	wc->slid = 0x2a;
	wc->sl = 3;
	wc->dlid_path_bits = 0;
	grh->version_tclass_flow = htobe32((6u << 28) | (0x12u << 20) | 0xabcdeu);
	grh->paylen = htobe16(64);
	grh->next_hdr = IPPROTO_UDP; /* RoCE v2 */
	grh->hop_limit = 0x40;
	grh->sgid = remote_gid;
	grh->dgid = *dgid;
}

static void check_ah_from_grh(const struct ibv_ah_attr *a, int sgid_index)
{
	assert_int_equal(a->is_global, 1);
	assert_memory_equal(&a->grh.dgid, &remote_gid, sizeof(remote_gid));
	assert_int_equal(a->grh.sgid_index, sgid_index);
	assert_int_equal(a->grh.hop_limit, 0x40);
	assert_int_equal(a->grh.traffic_class, 0x12);
	assert_int_equal(a->grh.flow_label, 0xabcde);
	assert_int_equal(a->dlid, 0x2a);
	assert_int_equal(a->sl, 3);
	assert_int_equal(a->src_path_bits, 0);
	assert_int_equal(a->port_num, PORT);
}

/* The GRH's dgid is our GID 0: the reply goes out from sgid_index 0. */
static void test_init_ah_from_wc_gid0(void **state)
{
	struct tu_res *res = *state;
	union ibv_gid gid0;
	struct ibv_ah_attr a;
	struct ibv_grh grh;
	struct ibv_wc wc;

	assert_int_equal(ibv_query_gid(res->ctx, PORT, 0, &gid0), 0);
	assert_int_equal(find_v2_gid(res->ctx, &gid0), 0);
	make_wc_grh(&wc, &grh, &gid0);
	memset(&a, 0xa5, sizeof(a));
	assert_int_equal(ibv_init_ah_from_wc(res->ctx, PORT, &wc, &grh, &a), 0);
	check_ah_from_grh(&a, 0);
}

/* The sgid_index is looked up: a GRH addressed to ::ffff:127.0.0.1 gives its index. */
static void test_init_ah_from_wc_finds_sgid_index(void **state)
{
	struct tu_res *res = *state;
	int lo = find_v2_gid(res->ctx, &loopback_v4_gid);
	struct ibv_ah_attr a;
	struct ibv_grh grh;
	struct ibv_wc wc;

	assert_true(lo >= 0);
	make_wc_grh(&wc, &grh, &loopback_v4_gid);
	assert_int_equal(ibv_init_ah_from_wc(res->ctx, PORT, &wc, &grh, &a), 0);
	check_ah_from_grh(&a, lo);
}

/* RoCE v2 over IPv4: the last 20 bytes of the GRH buffer are the IPv4 header. */
static void test_init_ah_from_wc_ipv4_header(void **state)
{
	struct tu_res *res = *state;
	int lo = find_v2_gid(res->ctx, &loopback_v4_gid);
	union ibv_gid peer = { .raw = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
					10, 1, 2, 3 } };
	unsigned char buf[40] = { 0 };
	struct iphdr ip4;
	struct ibv_ah_attr a;
	struct ibv_wc wc = { .wc_flags = IBV_WC_GRH, .slid = 0, .sl = 1 };

	assert_true(lo >= 0);
	memset(&ip4, 0, sizeof(ip4));
	ip4.version = 4;
	ip4.ihl = 5;
	ip4.tos = 0x48;
	ip4.ttl = 33;
	ip4.protocol = IPPROTO_UDP;
	ip4.saddr = htonl(0x0a010203);
	ip4.daddr = htonl(INADDR_LOOPBACK);
	memcpy(buf + 20, &ip4, sizeof(ip4));
	assert_int_equal(ibv_init_ah_from_wc(res->ctx, PORT, &wc, (struct ibv_grh *)buf, &a),
			 0);
	assert_int_equal(a.is_global, 1);
	assert_memory_equal(&a.grh.dgid, &peer, sizeof(peer));
	assert_int_equal(a.grh.sgid_index, lo);
	assert_int_equal(a.grh.hop_limit, 33);
	assert_int_equal(a.grh.traffic_class, 0x48);
	assert_int_equal(a.sl, 1);
	assert_int_equal(a.port_num, PORT);
}

/* Without IBV_WC_GRH: no GRH in the AH, the LID fields from the WC, return 0. */
static void test_init_ah_from_wc_without_grh(void **state)
{
	struct tu_res *res = *state;
	union ibv_gid gid0;
	struct ibv_ah_attr a;
	struct ibv_grh grh;
	struct ibv_wc wc;

	assert_int_equal(ibv_query_gid(res->ctx, PORT, 0, &gid0), 0);
	make_wc_grh(&wc, &grh, &gid0);
	wc.wc_flags = 0;
	memset(&a, 0xa5, sizeof(a));
	assert_int_equal(ibv_init_ah_from_wc(res->ctx, PORT, &wc, &grh, &a), 0);
	assert_int_equal(a.is_global, 0);
	assert_int_equal(a.dlid, 0x2a);
	assert_int_equal(a.sl, 3);
	assert_int_equal(a.port_num, PORT);
}

/* Addressed to a GID that is not ours: no sgid_index to reply from, -1. */
static void test_init_ah_from_wc_foreign_dgid_fails(void **state)
{
	struct tu_res *res = *state;
	union ibv_gid stranger = remote_gid;
	struct ibv_ah_attr a;
	struct ibv_grh grh;
	struct ibv_wc wc;

	stranger.raw[15] = 0x99;
	make_wc_grh(&wc, &grh, &stranger);
	assert_int_equal(ibv_init_ah_from_wc(res->ctx, PORT, &wc, &grh, &a), -1);
}

/* A multicast dgid is never searched for in the GID table: -1, errno EINVAL. */
static void test_init_ah_from_wc_multicast_dgid_is_einval(void **state)
{
	struct tu_res *res = *state;
	union ibv_gid mcast = { .raw = { 0xff, 0x02, [15] = 1 } };
	struct ibv_ah_attr a;
	struct ibv_grh grh;
	struct ibv_wc wc;

	make_wc_grh(&wc, &grh, &mcast);
	errno = 0;
	assert_int_equal(ibv_init_ah_from_wc(res->ctx, PORT, &wc, &grh, &a), -1);
	assert_int_equal(errno, EINVAL);
}

/* next_hdr neither UDP (RoCE v2) nor 0x1b (IB/RoCE v1): -1, errno EPROTONOSUPPORT. */
static void test_init_ah_from_wc_unknown_next_hdr_is_eprotonosupport(void **state)
{
	struct tu_res *res = *state;
	union ibv_gid gid0;
	struct ibv_ah_attr a;
	struct ibv_grh grh;
	struct ibv_wc wc;

	assert_int_equal(ibv_query_gid(res->ctx, PORT, 0, &gid0), 0);
	make_wc_grh(&wc, &grh, &gid0);
	grh.next_hdr = IPPROTO_TCP;
	errno = 0;
	assert_int_equal(ibv_init_ah_from_wc(res->ctx, PORT, &wc, &grh, &a), -1);
	assert_int_equal(errno, EPROTONOSUPPORT);
}

/* next_hdr 0x1b asks for a RoCE v1 entry; a RoCE v2-only table has none: -1. */
static void test_init_ah_from_wc_roce_v1_grh_finds_no_v2_entry(void **state)
{
	struct tu_res *res = *state;
	union ibv_gid gid0;
	struct ibv_ah_attr a;
	struct ibv_grh grh;
	struct ibv_wc wc;

	assert_int_equal(ibv_query_gid(res->ctx, PORT, 0, &gid0), 0);
	make_wc_grh(&wc, &grh, &gid0);
	grh.next_hdr = 0x1b;
	assert_int_equal(ibv_init_ah_from_wc(res->ctx, PORT, &wc, &grh, &a), -1);
}

/* Neither an IPv6 header nor an IPv4 one in the GRH buffer: -1, errno EPROTONOSUPPORT. */
static void test_init_ah_from_wc_non_ip_header_is_eprotonosupport(void **state)
{
	struct tu_res *res = *state;
	union ibv_gid gid0;
	struct ibv_ah_attr a;
	struct ibv_grh grh;
	struct ibv_wc wc;

	assert_int_equal(ibv_query_gid(res->ctx, PORT, 0, &gid0), 0);
	make_wc_grh(&wc, &grh, &gid0);
	grh.version_tclass_flow = htobe32(5u << 28);
	errno = 0;
	assert_int_equal(ibv_init_ah_from_wc(res->ctx, PORT, &wc, &grh, &a), -1);
	assert_int_equal(errno, EPROTONOSUPPORT);
}

/* create_ah_from_wc builds a usable AH, and NULL when the GRH cannot be answered. */
static void test_create_ah_from_wc(void **state)
{
	struct tu_res *res = *state;
	union ibv_gid gid0, stranger = remote_gid;
	struct ibv_grh grh;
	struct ibv_wc wc;
	struct ibv_ah *ah;

	assert_int_equal(ibv_query_gid(res->ctx, PORT, 0, &gid0), 0);
	make_wc_grh(&wc, &grh, &gid0);
	ah = ibv_create_ah_from_wc(res->pd, &wc, &grh, PORT);
	assert_non_null(ah);
	assert_ptr_equal(ah->pd, res->pd);
	assert_ptr_equal(ah->context, res->ctx);
	assert_int_equal(ibv_destroy_ah(ah), 0);

	stranger.raw[15] = 0x99;
	make_wc_grh(&wc, &grh, &stranger);
	assert_null(ibv_create_ah_from_wc(res->pd, &wc, &grh, PORT));
}

/* ---- strings (values measured from Debian's libibverbs 44) ------------------------- */

static void test_wc_status_str(void **state)
{
	static const char *const want[] = {
		"success", "local length error", "local QP operation error",
		"local EE context operation error", "local protection error",
		"Work Request Flushed Error", "memory management operation error",
		"bad response error", "local access error", "remote invalid request error",
		"remote access error", "remote operation error",
		"transport retry counter exceeded", "RNR retry counter exceeded",
		"local RDD violation error", "remote invalid RD request", "aborted error",
		"invalid EE context number", "invalid EE context state", "fatal error",
		"response timeout error", "general error", "TM error",
		"TM software rendezvous",
	};

	(void)state;
	assert_int_equal(sizeof(want) / sizeof(want[0]), IBV_WC_TM_RNDV_INCOMPLETE + 1);
	for (int i = 0; i <= IBV_WC_TM_RNDV_INCOMPLETE; i++)
		assert_string_equal(ibv_wc_status_str((enum ibv_wc_status)i), want[i]);
	assert_string_equal(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
	assert_string_equal(ibv_wc_status_str(IBV_WC_TM_RNDV_INCOMPLETE + 1), "unknown");
	assert_string_equal(ibv_wc_status_str((enum ibv_wc_status)1000), "unknown");
	assert_string_equal(ibv_wc_status_str((enum ibv_wc_status)-1), "unknown");
}

static void test_event_type_str(void **state)
{
	static const char *const want[] = {
		"CQ error", "local work queue catastrophic error",
		"invalid request local work queue error",
		"local access violation work queue error", "communication established",
		"send queue drained", "path migrated", "path migration request error",
		"local catastrophic error", "port active", "port error", "LID change",
		"P_Key change", "SM change", "SRQ catastrophic error", "SRQ limit reached",
		"last WQE reached", "client reregistration", "GID table change", "WQ fatal",
	};

	(void)state;
	assert_int_equal(sizeof(want) / sizeof(want[0]), IBV_EVENT_WQ_FATAL + 1);
	for (int i = 0; i <= IBV_EVENT_WQ_FATAL; i++)
		assert_string_equal(ibv_event_type_str((enum ibv_event_type)i), want[i]);
	assert_string_equal(ibv_event_type_str((enum ibv_event_type)(IBV_EVENT_WQ_FATAL + 1)),
			    "unknown");
	assert_string_equal(ibv_event_type_str((enum ibv_event_type)-1), "unknown");
}

static void test_node_type_str(void **state)
{
	(void)state;
	assert_string_equal(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter");
	assert_string_equal(ibv_node_type_str(IBV_NODE_SWITCH), "InfiniBand switch");
	assert_string_equal(ibv_node_type_str(IBV_NODE_ROUTER), "InfiniBand router");
	assert_string_equal(ibv_node_type_str(IBV_NODE_RNIC), "iWARP NIC");
	assert_string_equal(ibv_node_type_str(IBV_NODE_USNIC), "usNIC");
	assert_string_equal(ibv_node_type_str(IBV_NODE_USNIC_UDP), "usNIC UDP");
	assert_string_equal(ibv_node_type_str(IBV_NODE_UNSPECIFIED), "unspecified");
	assert_string_equal(ibv_node_type_str(IBV_NODE_UNKNOWN), "unknown");
	assert_string_equal(ibv_node_type_str((enum ibv_node_type)0), "unknown");
	assert_string_equal(ibv_node_type_str((enum ibv_node_type)(IBV_NODE_UNSPECIFIED + 1)),
			    "unknown");
}

/* rdma-core says "active", not "PORT_ACTIVE". */
static void test_port_state_str(void **state)
{
	(void)state;
	assert_string_equal(ibv_port_state_str(IBV_PORT_NOP), "no state change (NOP)");
	assert_string_equal(ibv_port_state_str(IBV_PORT_DOWN), "down");
	assert_string_equal(ibv_port_state_str(IBV_PORT_INIT), "init");
	assert_string_equal(ibv_port_state_str(IBV_PORT_ARMED), "armed");
	assert_string_equal(ibv_port_state_str(IBV_PORT_ACTIVE), "active");
	assert_string_equal(ibv_port_state_str(IBV_PORT_ACTIVE_DEFER), "active defer");
	assert_string_equal(ibv_port_state_str(IBV_PORT_ACTIVE_DEFER + 1), "unknown");
	assert_string_equal(ibv_port_state_str((enum ibv_port_state)-1), "unknown");
}

/* ---- rates ------------------------------------------------------------------------- */

static const struct {
	enum ibv_rate rate;
	int mult;
	int mbps;
} rates[] = {
	{ IBV_RATE_2_5_GBPS, 1, 2500 },     { IBV_RATE_5_GBPS, 2, 5000 },
	{ IBV_RATE_10_GBPS, 4, 10000 },     { IBV_RATE_20_GBPS, 8, 20000 },
	{ IBV_RATE_30_GBPS, 12, 30000 },    { IBV_RATE_40_GBPS, 16, 40000 },
	{ IBV_RATE_60_GBPS, 24, 60000 },    { IBV_RATE_80_GBPS, 32, 80000 },
	{ IBV_RATE_120_GBPS, 48, 120000 },  { IBV_RATE_14_GBPS, -1, 14062 },
	{ IBV_RATE_56_GBPS, -1, 56250 },    { IBV_RATE_112_GBPS, -1, 112500 },
	{ IBV_RATE_168_GBPS, -1, 168750 },  { IBV_RATE_25_GBPS, -1, 25781 },
	{ IBV_RATE_100_GBPS, -1, 103125 },  { IBV_RATE_200_GBPS, -1, 206250 },
	{ IBV_RATE_300_GBPS, -1, 309375 },  { IBV_RATE_28_GBPS, 11, 28125 },
	{ IBV_RATE_50_GBPS, 20, 53125 },    { IBV_RATE_400_GBPS, 160, 425000 },
	{ IBV_RATE_600_GBPS, 240, 637500 }, { IBV_RATE_800_GBPS, 320, 850000 },
	{ IBV_RATE_1200_GBPS, 480, 1275000 },
};

/* Every rate's multiplier and Mb/s, and the round trips back to the rate. */
static void test_rate_conversions_round_trip(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		assert_int_equal(ibv_rate_to_mult(rates[i].rate), rates[i].mult);
		assert_int_equal(ibv_rate_to_mbps(rates[i].rate), rates[i].mbps);
		assert_int_equal(mbps_to_ibv_rate(rates[i].mbps), rates[i].rate);
		if (rates[i].mult > 0)
			assert_int_equal(mult_to_ibv_rate(rates[i].mult), rates[i].rate);
	}
}

/* Values outside the tables: -1 one way, IBV_RATE_MAX the other. */
static void test_rate_conversions_out_of_range(void **state)
{
	(void)state;
	assert_int_equal(ibv_rate_to_mult(IBV_RATE_MAX), -1);
	assert_int_equal(ibv_rate_to_mbps(IBV_RATE_MAX), -1);
	assert_int_equal(ibv_rate_to_mult((enum ibv_rate)1), -1);
	assert_int_equal(ibv_rate_to_mbps((enum ibv_rate)1), -1);
	assert_int_equal(ibv_rate_to_mult((enum ibv_rate)(IBV_RATE_1200_GBPS + 1)), -1);
	assert_int_equal(ibv_rate_to_mbps((enum ibv_rate)(IBV_RATE_1200_GBPS + 1)), -1);
	assert_int_equal(ibv_rate_to_mult((enum ibv_rate)-1), -1);
	assert_int_equal(mult_to_ibv_rate(3), IBV_RATE_MAX);
	assert_int_equal(mult_to_ibv_rate(0), IBV_RATE_MAX);
	assert_int_equal(mult_to_ibv_rate(-1), IBV_RATE_MAX);
	assert_int_equal(mbps_to_ibv_rate(1), IBV_RATE_MAX);
	assert_int_equal(mbps_to_ibv_rate(100000), IBV_RATE_MAX); /* 100 Gb/s is 103125 */
	assert_int_equal(mbps_to_ibv_rate(0), IBV_RATE_MAX);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fork_init),
		T(test_create_and_query_srq),
		T(test_create_srq_limits),
		T(test_create_srq_zero_wr),
		T(test_modify_srq_limit),
		T(test_destroy_srq_with_qp_is_ebusy),
		T(test_post_srq_recv_too_many_sges),
		T(test_create_srq_ex_basic),
		T(test_create_srq_ex_basic_through_op),
		T(test_create_ah_global),
		T(test_create_ah_bad_port_is_einval),
		T(test_create_ah_bad_sgid_index_is_einval),
		T(test_create_ah_lid_mode),
		T(test_dealloc_pd_with_ah_is_ebusy),
		T(test_init_ah_from_wc_gid0),
		T(test_init_ah_from_wc_finds_sgid_index),
		T(test_init_ah_from_wc_ipv4_header),
		T(test_init_ah_from_wc_without_grh),
		T(test_init_ah_from_wc_foreign_dgid_fails),
		T(test_init_ah_from_wc_multicast_dgid_is_einval),
		T(test_init_ah_from_wc_unknown_next_hdr_is_eprotonosupport),
		T(test_init_ah_from_wc_roce_v1_grh_finds_no_v2_entry),
		T(test_init_ah_from_wc_non_ip_header_is_eprotonosupport),
		T(test_create_ah_from_wc),
		cmocka_unit_test(test_wc_status_str),
		cmocka_unit_test(test_event_type_str),
		cmocka_unit_test(test_node_type_str),
		cmocka_unit_test(test_port_state_str),
		cmocka_unit_test(test_rate_conversions_round_trip),
		cmocka_unit_test(test_rate_conversions_out_of_range),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
