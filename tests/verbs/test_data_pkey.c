/*
 * Partitions between two processes (IBA 10.9.3): a packet reaches a QP only if its P_Key
 * matches the QP's — equal low 15 bits, and at least one of the two a full member. What
 * does not match is dropped silently: RC's retries run out (IBV_WC_RETRY_EXC_ERR) and
 * nothing lands; a UD datagram is lost (the sender's completion is a success).
 *
 * The program runs with the P_Key table 0xffff (full member of the default partition),
 * 0x7fff (limited member of it), 0x8001 (full member of partition 1): it sets
 * SOFTVERBS_PKEYS and runs itself again if the variable is not set, and its agent
 * inherits it. Each QP picks its P_Key by pkey_index at RESET -> INIT. The receiving
 * port counts what it drops: bad_pkey_cntr and qkey_viol_cntr (ibv_query_port).
 */
#include "verbs/sv_test_peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUF_LEN 65536
#define W TP_WAIT_MS
#define QKEY 0x11111111u
#define GRH 40
#define GUARD 7007 /* the seed of bytes that must not change */

static const char pkeys[] = "0xffff,0x7fff,0x8001";
enum { FULL = 0, LIMITED = 1, PART1 = 2 }; /* indices into that table */

static const struct tp_qp_opts rc_opts = { .type = IBV_QPT_RC };
static const struct tp_qp_opts ud_opts = { .type = IBV_QPT_UD };

/* Our QP with P_Key index @ours, the agent's with @theirs, connected. */
static struct tp_pair *pair_in(void **state, const struct tp_qp_opts *o, uint16_t ours,
			       uint16_t theirs)
{
	struct tp_pair *x = *state;

	tp_pair_open(x, BUF_LEN, o, NULL);
	x->lc.pkey_index = ours;
	x->pc.pkey_index = theirs;
	tp_pair_connect(x);
	return x;
}

/* A SEND (received, if @lands, byte for byte) and an RDMA WRITE from us to the agent. */
static void rc_traffic(struct tp_pair *x, bool lands)
{
	struct tp_wr w = tp_wr1(1, IBV_WR_SEND, 0, 512);
	enum ibv_wc_status st = lands ? IBV_WC_SUCCESS : IBV_WC_RETRY_EXC_ERR;
	struct tp_wc_expect e;
	struct ibv_wc wc;

	assert_int_equal(tp_post_recv(&x->peer, x->pq, 7, &(struct tp_sge){ 0, 4096 }, 1), 0);
	tp_fill(x->ep.buf, 512, 21, 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 1, st, W, NULL);
	if (!lands) {
		/* Nothing arrived. */
		assert_int_equal(tp_poll(&x->peer, false, 1, 100, &wc), 0);
		return;
	}
	tp_expect_peer_wc(&x->peer, false, 7, IBV_WC_SUCCESS, &wc);
	e = tp_recv_expect(7, &x->pi, &x->li, IBV_WC_RECV, 512);
	e.pkey_index = x->pc.pkey_index; /* the receiving QP's */
	tp_check_wc(&wc, &e, "SEND within the partition");
	tp_check_peer(&x->peer, 0, 512, 21, 0, "SEND within the partition");
	tp_fill(x->ep.buf + 8192, 3000, 22, 0);
	w = tp_wr1(2, IBV_WR_RDMA_WRITE, 8192, 3000);
	w.remote_addr = x->pi.addr + 16384;
	w.rkey = x->pi.rkey;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 2, IBV_WC_SUCCESS, W, NULL);
	tp_check_peer(&x->peer, 16384, 3000, 22, 0, "RDMA WRITE within the partition");
}

static void test_table_is_the_configured_one(void **state)
{
	struct tp_pair *x = *state;
	static const uint16_t want[] = { 0xffff, 0x7fff, 0x8001, 0 };
	struct tu_res *res = tu_res_open();

	(void)x;
	assert_non_null(res);
	for (int i = 0; i < 4; i++) {
		__be16 p;

		assert_int_equal(ibv_query_pkey(res->ctx, 1, i, &p), 0);
		assert_int_equal(be16toh(p), want[i]);
	}
	assert_int_equal(tu_res_close(res), 0);
}

static void test_rc_full_members_of_one_partition_talk(void **state)
{
	struct tp_pair *x = pair_in(state, &rc_opts, FULL, FULL);

	rc_traffic(x, true);
	tp_pair_stop(x);
}

static void test_rc_limited_and_full_member_talk(void **state)
{
	struct tp_pair *x = pair_in(state, &rc_opts, LIMITED, FULL);

	rc_traffic(x, true);
	tp_pair_stop(x);
}

static void test_rc_two_limited_members_do_not(void **state)
{
	struct tp_pair *x = pair_in(state, &rc_opts, LIMITED, LIMITED);

	rc_traffic(x, false);
	tp_pair_stop(x);
}

static uint32_t port_counter(struct tp_pair *x, bool qkey)
{
	struct ibv_port_attr pa;

	assert_int_equal(ibv_query_port(x->ep.res->ctx, 1, &pa), 0);
	return qkey ? pa.qkey_viol_cntr : pa.bad_pkey_cntr;
}

/* Across partitions, both ways: nothing is placed, RC fails; the receiving port counts
 * each dropped message in bad_pkey_cntr. */
static void test_rc_across_partitions_fails_and_writes_nothing(void **state)
{
	struct tp_pair *x = pair_in(state, &rc_opts, PART1, FULL);
	struct tp_wr w = tp_wr1(3, IBV_WR_RDMA_WRITE, 0, 4096);
	uint32_t before = port_counter(x, false);

	/* Both targets hold a guard pattern: not one of the 4096 bytes may change. */
	tp_fill(x->ep.buf, 4096, GUARD, 0);
	tp_fill_peer(&x->peer, 0, 4096, GUARD, 0);
	tp_fill_peer(&x->peer, 8192, 4096, 25, 0); /* the agent's source */
	/* Theirs to ours first (ours is still in RTS): our port counts it. */
	w = tp_wr1(9, IBV_WR_RDMA_WRITE, 8192, 4096);
	w.remote_addr = x->li.addr;
	w.rkey = x->li.rkey;
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 9, IBV_WC_RETRY_EXC_ERR, NULL);
	tp_expect_eq(port_counter(x, false), before + 1, "bad_pkey_cntr", "a WRITE from PART1");
	tp_assert_pattern(x->ep.buf, 4096, GUARD, 0, "our 4096 bytes after a WRITE from PART1");
	w = tp_wr1(3, IBV_WR_RDMA_WRITE, 16384, 4096);

	tp_fill(x->ep.buf + 16384, 4096, 23, 0);
	w.remote_addr = x->pi.addr;
	w.rkey = x->pi.rkey;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 3, IBV_WC_RETRY_EXC_ERR, W, NULL);
	tp_check_peer(&x->peer, 0, 4096, GUARD, 0, "the agent's 4096 bytes after a WRITE to PART1");
	tp_pair_stop(x);
}

/* A datagram @w to the QP @to describes, with Q_Key @qkey (a global AH to its GID). */
static void address_to(struct tp_wr *w, const struct tp_info *to, uint32_t qkey)
{
	w->ah.is_global = 1;
	w->ah.grh.dgid = to->gid;
	w->ah.grh.hop_limit = 64;
	w->ah.dlid = to->lid;
	w->ah.port_num = 1;
	w->remote_qpn = to->qpn;
	w->remote_qkey = qkey;
}

/* A datagram with the wrong Q_Key is dropped and counted in qkey_viol_cntr. */
static void test_wrong_qkey_is_counted(void **state)
{
	struct tp_pair *x = pair_in(state, &ud_opts, FULL, FULL);
	struct tp_wr w = tp_wr1(6, IBV_WR_SEND, 0, 10);
	uint32_t before = port_counter(x, true);
	struct ibv_wc wc;

	/* The agent sends to us with a Q_Key that is not ours. */
	address_to(&w, &x->li, QKEY + 1);
	assert_int_equal(tp_ep_post_recv(&x->ep, x->lq, 10, &(struct tp_sge){ 0, 4096 }, 1), 0);
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 6, IBV_WC_SUCCESS, NULL);
	/* Then one with our Q_Key, 20 bytes: the fifo keeps order, so had the first not been
	 * dropped it would have taken our one receive (a positive signal, not a quiet
	 * window that a late arrival could miss). */
	w = tp_wr1(7, IBV_WR_SEND, 0, 20);
	address_to(&w, &x->li, QKEY);
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 7, IBV_WC_SUCCESS, NULL);
	tp_expect_wc(x->ep.rcq, 10, IBV_WC_SUCCESS, W, &wc);
	tp_expect_eq(wc.byte_len, GRH + 20, "byte_len", "the datagram after one with a wrong Q_Key");
	tp_expect_no_wc(x->ep.rcq, 0, "a datagram with a wrong Q_Key");
	tp_expect_eq(port_counter(x, true), before + 1, "qkey_viol_cntr", "a wrong Q_Key");
	tp_pair_stop(x);
}

/* UD: a datagram to another partition is lost; within the partition it arrives. */
static void test_ud_across_partitions_is_dropped(void **state)
{
	struct tp_pair *x = pair_in(state, &ud_opts, PART1, FULL);
	struct tp_wr w = tp_wr1(4, IBV_WR_SEND, 0, 100);
	struct tp_qp_opts again = ud_opts;
	struct ibv_wc wc;
	int q;

	address_to(&w, &x->pi, QKEY);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 8, &(struct tp_sge){ 0, 4096 }, 1), 0);
	tp_fill(x->ep.buf, 100, 24, 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 4, IBV_WC_SUCCESS, W, NULL);
	assert_int_equal(tp_poll(&x->peer, false, 1, 0, &wc), 0);

	/* A second QP of ours in the agent's partition reaches the same receive, with 60
	 * bytes: had the first datagram not been dropped, it would have taken it. */
	q = tp_ep_create_qp(&x->ep, &again);
	x->lc.pkey_index = FULL;
	assert_int_equal(tu_qp_connect(x->ep.qp[q], &x->lc, IBV_QPS_RTS), 0);
	w.wr_id = 5;
	w.sge[0].len = 60;
	assert_int_equal(tp_ep_post_send(&x->ep, q, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 5, IBV_WC_SUCCESS, W, NULL);
	tp_expect_peer_wc(&x->peer, false, 8, IBV_WC_SUCCESS, &wc);
	{
		struct tp_info from = x->li;
		struct tp_wc_expect e;

		from.qpn = x->ep.qp[q]->qp_num;
		e = tp_recv_expect(8, &x->pi, &from, IBV_WC_RECV, 60 + GRH);
		e.wc_flags = IBV_WC_GRH;
		e.pkey_index = x->pc.pkey_index;
		tp_check_wc(&wc, &e, "datagram within the partition");
	}
	tp_check_peer(&x->peer, GRH, 60, 24, 0, "datagram within the partition");
	tp_pair_stop(x);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tp_pair_setup, tp_pair_teardown)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		T(test_table_is_the_configured_one),
		T(test_rc_full_members_of_one_partition_talk),
		T(test_rc_limited_and_full_member_talk),
		T(test_rc_two_limited_members_do_not),
		T(test_rc_across_partitions_fails_and_writes_nothing),
		T(test_ud_across_partitions_is_dropped),
		T(test_wrong_qkey_is_counted),
	};
	const char *set = getenv("SOFTVERBS_PKEYS");

	/* The library reads the table when it loads: set it, then start again. */
	if (!set || strcmp(set, pkeys)) {
		setenv("SOFTVERBS_PKEYS", pkeys, 1);
		execv("/proc/self/exe", argv);
		perror("execv /proc/self/exe");
		return 1;
	}
	tp_main(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
