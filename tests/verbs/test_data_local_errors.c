/*
 * Local errors that do not depend on the message's fate, and memory that is not there.
 *
 * What is asserted:
 * - IBA 10.6.3 (the L_Key is checked when the requester reads the data): a SEND or RDMA
 *   WRITE with a bad lkey completes with IBV_WC_LOC_PROT_ERR even when its message
 *   reaches nobody: a UD datagram to a QP that does not exist or into another partition,
 *   a UD multicast to a group without members, a UC QP whose peer QP does not exist, an
 *   RC QP likewise (IBV_WC_LOC_PROT_ERR before the retries could run out). With a good
 *   lkey the same sends complete as before: UD and UC successfully (the message is
 *   lost), RC with IBV_WC_RETRY_EXC_ERR.
 * - Memory an on-demand MR (IBV_ACCESS_ON_DEMAND) covers but that is not accessible (a
 *   PROT_NONE page, a read-only one for writes) never faults the process: a SEND gathering
 *   from it, an RDMA READ landing in it, an atomic's result bound for it fail at the
 *   requester with IBV_WC_LOC_PROT_ERR; a receive landing in it fails at the receiver
 *   with IBV_WC_LOC_PROT_ERR (RC: the sender gets IBV_WC_REM_OP_ERR); an RDMA WRITE,
 *   READ or atomic aimed at it from a peer fails with IBV_WC_REM_ACCESS_ERR. The
 *   accessible pages of the same MR work before and after.
 * Both QPs of a pair live in this process (the same data path as between processes).
 */
#include "verbs/sv_test_peer.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define W TP_WAIT_MS
#define LEN 8192
#define QKEY 0x11111111u /* tu_conn_init's */

struct fix {
	struct tu_res *res;
	unsigned char *buf; /* LEN bytes, registered with every right */
	struct ibv_mr *mr;
	unsigned char *odp; /* 3 pages: readable+writable, PROT_NONE, read-only */
	size_t page;
	struct ibv_mr *odp_mr;
};

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC;

	if (!f)
		return -1;
	f->res = tu_res_open();
	if (!f->res)
		return -1;
	f->page = (size_t)sysconf(_SC_PAGESIZE);
	f->buf = aligned_alloc(f->page, LEN);
	f->odp = mmap(NULL, 3 * f->page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		      -1, 0);
	if (!f->buf || f->odp == MAP_FAILED)
		return -1;
	memset(f->buf, 0, LEN);
	memset(f->odp, 0, 3 * f->page);
	if (mprotect(f->odp + f->page, f->page, PROT_NONE) ||
	    mprotect(f->odp + 2 * f->page, f->page, PROT_READ))
		return -1;
	f->mr = ibv_reg_mr(f->res->pd, f->buf, LEN, all);
	f->odp_mr = ibv_reg_mr(f->res->pd, f->odp, 3 * f->page, all | IBV_ACCESS_ON_DEMAND);
	if (!f->mr || !f->odp_mr)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;
	int rc = 0;

	if (!f)
		return 0;
	if (tu_destroy_kept_qps(f->res))
		rc = -1;
	if ((f->mr && ibv_dereg_mr(f->mr)) || (f->odp_mr && ibv_dereg_mr(f->odp_mr)))
		rc = -1;
	if (tu_res_close(f->res))
		rc = -1;
	munmap(f->odp, 3 * f->page);
	free(f->buf);
	free(f);
	return rc;
}

/* A QP number that no QP has: the last of the block of numbers this process took for a
 * QP of its own (numbers are handed out from the lowest free one, and a test makes few
 * QPs; a destroyed QP's number is reused at once). */
static uint32_t absent_qpn(struct fix *f)
{
	struct ibv_qp *qp = tu_keep_qp(f->res, tu_create_qp(f->res, IBV_QPT_RC));

	return qp->qp_num | 0xff;
}

/* A QP of @type in RTS towards @dest_qpn (UD: ready to send anywhere). */
static struct ibv_qp *qp_to(struct fix *f, enum ibv_qp_type type, uint32_t dest_qpn,
			    uint16_t pkey_index)
{
	struct ibv_qp *qp = tu_keep_qp(f->res, tu_create_qp(f->res, type));
	struct tu_conn c;

	tu_conn_init(&c, f->res, dest_qpn);
	c.pkey_index = pkey_index;
	c.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	c.max_rd_atomic = c.max_dest_rd_atomic = 4;
	c.retry_cnt = 0; /* RC towards nobody: fail fast */
	assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_RTS), 0);
	return qp;
}

/* Two QPs of @type connected to each other. */
static void pair(struct fix *f, enum ibv_qp_type type, struct ibv_qp **a, struct ibv_qp **b)
{
	struct tu_conn c;

	*a = tu_keep_qp(f->res, tu_create_qp(f->res, type));
	*b = tu_keep_qp(f->res, tu_create_qp(f->res, type));
	for (int i = 0; i < 2; i++) {
		struct ibv_qp *qp = i ? *b : *a, *to = i ? *a : *b;

		tu_conn_init(&c, f->res, to->qp_num);
		c.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			   IBV_ACCESS_REMOTE_ATOMIC;
		c.max_rd_atomic = c.max_dest_rd_atomic = 4;
		c.min_rnr_timer = 1;
		assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_RTS), 0);
	}
}

/* One WR from @addr (@lkey) of @len bytes; UD datagrams to @ah / @remote_qpn. */
static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t id, void *addr,
		uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey, struct ibv_ah *ah,
		uint32_t remote_qpn)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;

	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 1;
	} else if (qp->qp_type == IBV_QPT_UD) {
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = remote_qpn;
		wr.wr.ud.remote_qkey = QKEY;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(qp, &wr, &bad);
}

static int post_recv(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;

	return ibv_post_recv(qp, &wr, &bad);
}

/* Exactly one completion on the fixture's CQ: @id with @status. */
static void expect_one(struct fix *f, uint64_t id, enum ibv_wc_status status, const char *what)
{
	struct ibv_wc wc[2];
	int n = tu_poll(f->res->cq, 1, wc, W);

	if (n != 1)
		fail_msg("%s: no completion within %d ms", what, W);
	if (wc[0].wr_id != id || wc[0].status != status)
		fail_msg("%s: completion %llu %s, expected %llu %s", what,
			 (unsigned long long)wc[0].wr_id, ibv_wc_status_str(wc[0].status),
			 (unsigned long long)id, ibv_wc_status_str(status));
}

static struct ibv_ah *self_ah(struct fix *f)
{
	struct ibv_ah_attr a;
	struct ibv_ah *ah;

	tu_fill_ah(f->res, &a);
	ah = ibv_create_ah(f->res->pd, &a);
	assert_non_null(ah);
	return ah;
}

/* ---- IBA 10.6.3: the lkey is checked whether or not the message reaches anyone ------- */

static void test_ud_bad_lkey_to_absent_qp_is_loc_prot_err(void **state)
{
	struct fix *f = *state;
	uint32_t nobody = absent_qpn(f);
	struct ibv_qp *qp = qp_to(f, IBV_QPT_UD, 0, 0);
	struct ibv_ah *ah = self_ah(f);

	assert_int_equal(post(qp, IBV_WR_SEND, 1, f->buf, 64, f->mr->lkey ^ 0x100, 0, 0, ah,
			      nobody), 0);
	expect_one(f, 1, IBV_WC_LOC_PROT_ERR, "UD datagram to nobody, bad lkey");
	/* The error took the QP to SQE; back to RTS, a good lkey: the datagram is lost. */
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .cur_qp_state = IBV_QPS_SQE };
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE), 0);
	assert_int_equal(post(qp, IBV_WR_SEND, 2, f->buf, 64, f->mr->lkey, 0, 0, ah, nobody), 0);
	expect_one(f, 2, IBV_WC_SUCCESS, "UD datagram to nobody, good lkey");
	assert_int_equal(ibv_destroy_ah(ah), 0);
}

static void test_ud_bad_lkey_into_another_partition_is_loc_prot_err(void **state)
{
	struct fix *f = *state;
	/* main() gives this program P_Keys 0xffff, 0x7fff: two limited members of 0x7fff
	 * do not talk (IBA 10.9.3). */
	struct ibv_qp *to = qp_to(f, IBV_QPT_UD, 0, 1), *qp = qp_to(f, IBV_QPT_UD, 0, 1);
	struct ibv_ah *ah = self_ah(f);

	assert_int_equal(post_recv(to, 9, f->buf + 4096, 256, f->mr->lkey), 0);
	assert_int_equal(post(qp, IBV_WR_SEND, 1, f->buf, 64, f->mr->lkey ^ 0x100, 0, 0, ah,
			      to->qp_num), 0);
	expect_one(f, 1, IBV_WC_LOC_PROT_ERR, "UD datagram across partitions, bad lkey");
	assert_int_equal(ibv_destroy_ah(ah), 0);
}

static void test_ud_bad_lkey_to_empty_multicast_group_is_loc_prot_err(void **state)
{
	struct fix *f = *state;
	struct ibv_qp *qp = qp_to(f, IBV_QPT_UD, 0, 0);
	struct ibv_ah_attr a;
	struct ibv_ah *ah;

	tu_fill_ah(f->res, &a);
	assert_int_equal(inet_pton(AF_INET6, "ff0e::5eed", a.grh.dgid.raw), 1);
	a.dlid = 0xc000;
	ah = ibv_create_ah(f->res->pd, &a);
	assert_non_null(ah);
	assert_int_equal(post(qp, IBV_WR_SEND, 1, f->buf, 64, f->mr->lkey ^ 0x100, 0, 0, ah,
			      0xffffff), 0);
	expect_one(f, 1, IBV_WC_LOC_PROT_ERR, "multicast to a group of none, bad lkey");
	assert_int_equal(ibv_destroy_ah(ah), 0);
}

static void test_uc_bad_lkey_to_absent_qp_is_loc_prot_err(void **state)
{
	struct fix *f = *state;
	uint32_t nobody = absent_qpn(f);
	struct ibv_qp *qp = qp_to(f, IBV_QPT_UC, nobody, 0);

	assert_int_equal(post(qp, IBV_WR_SEND, 1, f->buf, 64, f->mr->lkey ^ 0x100, 0, 0, NULL, 0),
			 0);
	expect_one(f, 1, IBV_WC_LOC_PROT_ERR, "UC SEND to nobody, bad lkey");

	qp = qp_to(f, IBV_QPT_UC, nobody, 0);
	assert_int_equal(post(qp, IBV_WR_RDMA_WRITE, 2, f->buf, 64, f->mr->lkey ^ 0x100,
			      (uintptr_t)f->buf, f->mr->rkey, NULL, 0), 0);
	expect_one(f, 2, IBV_WC_LOC_PROT_ERR, "UC WRITE to nobody, bad lkey");

	qp = qp_to(f, IBV_QPT_UC, nobody, 0);
	assert_int_equal(post(qp, IBV_WR_SEND, 3, f->buf, 64, f->mr->lkey, 0, 0, NULL, 0), 0);
	expect_one(f, 3, IBV_WC_SUCCESS, "UC SEND to nobody, good lkey (lost)");
}

static void test_rc_bad_lkey_to_absent_qp_is_loc_prot_err(void **state)
{
	struct fix *f = *state;
	uint32_t nobody = absent_qpn(f);
	struct ibv_qp *qp = qp_to(f, IBV_QPT_RC, nobody, 0);

	assert_int_equal(post(qp, IBV_WR_SEND, 1, f->buf, 64, f->mr->lkey ^ 0x100, 0, 0, NULL, 0),
			 0);
	expect_one(f, 1, IBV_WC_LOC_PROT_ERR, "RC SEND to nobody, bad lkey");

	qp = qp_to(f, IBV_QPT_RC, nobody, 0);
	assert_int_equal(post(qp, IBV_WR_SEND, 2, f->buf, 64, f->mr->lkey, 0, 0, NULL, 0), 0);
	expect_one(f, 2, IBV_WC_RETRY_EXC_ERR, "RC SEND to nobody, good lkey");
}

/* ---- on-demand memory that is not there: errors, never a fault ------------------------ */

static void test_odp_send_from_protected_page_fails_locally(void **state)
{
	struct fix *f = *state;
	enum ibv_qp_type types[] = { IBV_QPT_UC, IBV_QPT_RC };

	for (unsigned i = 0; i < ARRAY_LEN(types); i++) {
		struct ibv_qp *a, *b;
		struct ibv_wc wc;

		pair(f, types[i], &a, &b);
		assert_int_equal(post_recv(b, 10, f->buf, 256, f->mr->lkey), 0);
		/* 128 bytes across the end of the good page into the PROT_NONE one. */
		assert_int_equal(post(a, IBV_WR_SEND, 1, f->odp + f->page - 64, 128,
				      f->odp_mr->lkey, 0, 0, NULL, 0), 0);
		expect_one(f, 1, IBV_WC_LOC_PROT_ERR, tu_qp_type_str(types[i]));
		/* Nothing arrived; the receive is flushed when b is destroyed. */
		assert_int_equal(ibv_poll_cq(f->res->cq, 1, &wc), 0);
		tu_destroy_qp(f->res, a);
		tu_destroy_qp(f->res, b);
		while (ibv_poll_cq(f->res->cq, 1, &wc) > 0)
			assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	}
	/* The good page of the same MR still sends. */
	struct ibv_qp *a, *b;

	pair(f, IBV_QPT_RC, &a, &b);
	memset(f->odp, 0x5a, 64);
	assert_int_equal(post_recv(b, 10, f->buf, 256, f->mr->lkey), 0);
	assert_int_equal(post(a, IBV_WR_SEND, 2, f->odp, 64, f->odp_mr->lkey, 0, 0, NULL, 0), 0);
	{
		struct ibv_wc wc[2];

		assert_int_equal(tu_poll(f->res->cq, 2, wc, W), 2);
		for (int i = 0; i < 2; i++)
			assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
	}
	for (int i = 0; i < 64; i++)
		assert_int_equal(f->buf[i], 0x5a);
}

static void test_odp_receive_into_inaccessible_page_fails_at_receiver(void **state)
{
	struct fix *f = *state;
	/* The PROT_NONE page, then the read-only one. */
	for (int pg = 1; pg <= 2; pg++) {
		struct ibv_qp *a, *b;
		struct ibv_wc wc[2];
		int got_recv = 0, got_send = 0;

		pair(f, IBV_QPT_RC, &a, &b);
		assert_int_equal(post_recv(b, 10, f->odp + pg * f->page, 256, f->odp_mr->lkey), 0);
		assert_int_equal(post(a, IBV_WR_SEND, 1, f->buf, 128, f->mr->lkey, 0, 0, NULL, 0),
				 0);
		assert_int_equal(tu_poll(f->res->cq, 2, wc, W), 2);
		for (int i = 0; i < 2; i++) {
			if (wc[i].wr_id == 10) {
				assert_int_equal(wc[i].status, IBV_WC_LOC_PROT_ERR);
				got_recv++;
			} else {
				assert_int_equal(wc[i].wr_id, 1);
				assert_int_equal(wc[i].status, IBV_WC_REM_OP_ERR);
				got_send++;
			}
		}
		assert_int_equal(got_recv, 1);
		assert_int_equal(got_send, 1);
		tu_destroy_qp(f->res, a);
		tu_destroy_qp(f->res, b);
	}
}

static void test_odp_read_and_atomic_results_into_inaccessible_page_fail(void **state)
{
	struct fix *f = *state;
	enum ibv_wr_opcode ops[] = { IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD };

	for (unsigned i = 0; i < ARRAY_LEN(ops); i++)
		for (int pg = 1; pg <= 2; pg++) {
			struct ibv_qp *a, *b;

			pair(f, IBV_QPT_RC, &a, &b);
			assert_int_equal(post(a, ops[i], 1, f->odp + pg * f->page, 8,
					      f->odp_mr->lkey, (uintptr_t)f->buf, f->mr->rkey,
					      NULL, 0), 0);
			expect_one(f, 1, IBV_WC_LOC_PROT_ERR,
				   i ? "fetch-and-add result into a page we may not write"
				     : "RDMA READ into a page we may not write");
			tu_destroy_qp(f->res, a);
			tu_destroy_qp(f->res, b);
		}
}

static void test_odp_remote_access_to_inaccessible_page_is_rem_access_err(void **state)
{
	struct fix *f = *state;
	struct {
		enum ibv_wr_opcode op;
		int page; /* 1: PROT_NONE, 2: read-only */
		const char *what;
	} c[] = {
		{ IBV_WR_RDMA_WRITE, 1, "WRITE into PROT_NONE" },
		{ IBV_WR_RDMA_WRITE, 2, "WRITE into a read-only page" },
		{ IBV_WR_RDMA_READ, 1, "READ from PROT_NONE" },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, 1, "atomic on PROT_NONE" },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, 2, "atomic on a read-only page" },
	};

	for (unsigned i = 0; i < ARRAY_LEN(c); i++) {
		struct ibv_qp *a, *b;
		uint32_t len = c[i].op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 8 : 64;

		pair(f, IBV_QPT_RC, &a, &b);
		assert_int_equal(post(a, c[i].op, 1, f->buf, len, f->mr->lkey,
				      (uintptr_t)(f->odp + c[i].page * f->page), f->odp_mr->rkey,
				      NULL, 0), 0);
		expect_one(f, 1, IBV_WC_REM_ACCESS_ERR, c[i].what);
		/* The target QP reports the access violation (IBA 11.6.3.1, affiliated). */
		if (!tu_wait_qp_event(f->res->ctx, b, IBV_EVENT_QP_ACCESS_ERR, W))
			fail_msg("%s: no IBV_EVENT_QP_ACCESS_ERR at the target", c[i].what);
		tu_destroy_qp(f->res, a);
		tu_destroy_qp(f->res, b);
	}
	/* The readable page of the same MR answers a READ. */
	struct ibv_qp *a, *b;

	pair(f, IBV_QPT_RC, &a, &b);
	assert_int_equal(post(a, IBV_WR_RDMA_READ, 2, f->buf, 64, f->mr->lkey,
			      (uintptr_t)(f->odp + 2 * f->page), f->odp_mr->rkey, NULL, 0), 0);
	expect_one(f, 2, IBV_WC_SUCCESS, "READ from the read-only page");
}

int main(int argc, char **argv)
{
	/* Before the library reads it: a second, limited partition (index 1). */
	setenv("SOFTVERBS_PKEYS", "0xffff,0x7fff", 0);
	tp_main(argc, argv);
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_ud_bad_lkey_to_absent_qp_is_loc_prot_err),
		T(test_ud_bad_lkey_into_another_partition_is_loc_prot_err),
		T(test_ud_bad_lkey_to_empty_multicast_group_is_loc_prot_err),
		T(test_uc_bad_lkey_to_absent_qp_is_loc_prot_err),
		T(test_rc_bad_lkey_to_absent_qp_is_loc_prot_err),
		T(test_odp_send_from_protected_page_fails_locally),
		T(test_odp_receive_into_inaccessible_page_fails_at_receiver),
		T(test_odp_read_and_atomic_results_into_inaccessible_page_fail),
		T(test_odp_remote_access_to_inaccessible_page_is_rem_access_err),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
