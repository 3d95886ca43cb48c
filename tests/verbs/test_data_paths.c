/*
 * Which path each operation's payload took, as softverbs_query_qp_stats() reports it
 * (<softverbs/softverbs.h>), between two processes. The program runs once per copy mode
 * (ctest: verbs_test_data_paths, and _bounce with SOFTVERBS_SHM_COPY=bounce), and each
 * run asserts the mode it was given was the one used:
 * - RDMA WRITE and READ: with CMA the requester copies every byte by process_vm_* and
 *   none goes through the fifos; with the bounce copy it is the reverse. The QP reports
 *   the copy mode towards its peer.
 * - A SEND of up to SOFTVERBS_SHM_INLINE_MAX bytes (default 32768) travels in the fifo;
 *   a larger one is pulled by the receiver with process_vm_readv (CMA), or goes through
 *   the fifo in pieces (bounce). The threshold follows the variable (checked at 1024).
 * - Atomics and bursts of tiny WRITEs go through the fifo in both modes.
 * - A message counts once; bytes count once, by their path.
 */
#include "verbs/sv_test_peer.h"

#include <softverbs/softverbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W TP_WAIT_MS
#define BUF_LEN (1u << 20)

static const struct tp_qp_opts rc_opts = { .type = IBV_QPT_RC };

static bool bounce(void)
{
	const char *m = getenv("SOFTVERBS_SHM_COPY");

	return m && !strcmp(m, "bounce");
}

static struct softverbs_qp_stats stats(struct ibv_qp *qp)
{
	struct softverbs_qp_stats s;

	assert_int_equal(softverbs_query_qp_stats(qp, &s, sizeof(s)), 0);
	return s;
}

/* The counters moved from @a to @b by exactly these amounts. */
static void expect_delta(const struct softverbs_qp_stats *a, const struct softverbs_qp_stats *b,
			 uint64_t msgs, uint64_t bytes, uint64_t cma, uint64_t fifo, bool tx,
			 const char *what)
{
	tp_expect_eq((long long)((tx ? b->tx_msgs - a->tx_msgs : b->rx_msgs - a->rx_msgs)),
		     (long long)msgs, tx ? "tx_msgs" : "rx_msgs", what);
	tp_expect_eq((long long)((tx ? b->tx_bytes - a->tx_bytes : b->rx_bytes - a->rx_bytes)),
		     (long long)bytes, tx ? "tx_bytes" : "rx_bytes", what);
	tp_expect_eq((long long)((tx ? b->tx_cma_bytes - a->tx_cma_bytes
				     : b->rx_cma_bytes - a->rx_cma_bytes)),
		     (long long)cma, tx ? "tx_cma_bytes" : "rx_cma_bytes", what);
	tp_expect_eq((long long)((tx ? b->tx_fifo_bytes - a->tx_fifo_bytes
				     : b->rx_fifo_bytes - a->rx_fifo_bytes)),
		     (long long)fifo, tx ? "tx_fifo_bytes" : "rx_fifo_bytes", what);
}

static struct tp_pair *pair(void **state)
{
	struct tp_pair *x = *state;

	tp_pair_open(x, BUF_LEN, &rc_opts, NULL);
	tp_pair_connect(x);
	return x;
}

static void test_new_qp_reports_no_path(void **state)
{
	struct tp_pair *x = pair(state);
	struct softverbs_qp_stats s = stats(x->ep.qp[x->lq]);

	tp_expect_eq(s.wire, SOFTVERBS_WIRE_NONE, "wire", "a QP that sent nothing");
	tp_expect_eq(s.copy, SOFTVERBS_COPY_NONE, "copy", "a QP that sent nothing");
	tp_expect_eq((long long)(s.tx_msgs + s.rx_msgs + s.tx_bytes + s.rx_bytes), 0, "counters",
		     "a QP that sent nothing");
	/* A smaller size (an older header) is filled that far; a larger one is refused. */
	assert_int_equal(softverbs_query_qp_stats(x->ep.qp[x->lq], &s, 8), 0);
	assert_int_equal(softverbs_query_qp_stats(x->ep.qp[x->lq], &s, sizeof(s) + 1), EINVAL);
	assert_int_equal(softverbs_query_qp_stats(NULL, &s, sizeof(s)), EINVAL);
	tp_pair_stop(x);
}

static void test_write_and_read_take_the_copy_mode_given(void **state)
{
	struct tp_pair *x = pair(state);
	struct ibv_qp *qp = x->ep.qp[x->lq];
	const uint32_t len = 65536;
	uint64_t cma = bounce() ? 0 : len, fifo = bounce() ? len : 0;
	struct softverbs_qp_stats a, b;
	struct tp_wr w;

	tp_fill(x->ep.buf, len, 7, 0);
	a = stats(qp);
	w = tp_wr1(1, IBV_WR_RDMA_WRITE, 0, len);
	w.remote_addr = x->pi.addr;
	w.rkey = x->pi.rkey;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	tp_check_peer(&x->peer, 0, len, 7, 0, "64 KiB RDMA WRITE");
	b = stats(qp);
	expect_delta(&a, &b, 1, len, cma, fifo, true, "64 KiB RDMA WRITE");
	tp_expect_eq(b.copy, bounce() ? SOFTVERBS_COPY_BOUNCE : SOFTVERBS_COPY_CMA, "copy",
		     "64 KiB RDMA WRITE");
	tp_expect_eq(b.wire, SOFTVERBS_WIRE_SHM, "wire", "64 KiB RDMA WRITE");

	a = b;
	w = tp_wr1(2, IBV_WR_RDMA_READ, len, len);
	w.remote_addr = x->pi.addr;
	w.rkey = x->pi.rkey;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 2, IBV_WC_SUCCESS, W, NULL);
	tp_assert_pattern(x->ep.buf + len, len, 7, 0, "64 KiB RDMA READ");
	b = stats(qp);
	expect_delta(&a, &b, 1, len, cma, fifo, true, "64 KiB RDMA READ");
	tp_pair_stop(x);
}

/* A SEND of @len from the agent to us: what our responder counted. */
static void peer_send(struct tp_pair *x, uint64_t id, uint32_t len, uint64_t cma,
		      uint64_t fifo, const char *what)
{
	struct ibv_qp *qp = x->ep.qp[x->lq];
	struct softverbs_qp_stats a = stats(qp), b;
	struct tp_wr w = tp_wr1(id, IBV_WR_SEND, 0, len);

	tp_fill_peer(&x->peer, 0, len, (uint32_t)id, 0);
	assert_int_equal(tp_ep_post_recv(&x->ep, x->lq, id, &(struct tp_sge){ 0, len }, 1), 0);
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, id, IBV_WC_SUCCESS, NULL);
	tp_expect_wc(x->ep.rcq, id, IBV_WC_SUCCESS, W, NULL);
	tp_assert_pattern(x->ep.buf, len, (uint32_t)id, 0, what);
	b = stats(qp);
	expect_delta(&a, &b, 1, len, cma, fifo, false, what);
}

static void check_send_sizes(void **state, uint32_t inline_max)
{
	struct tp_pair *x = pair(state);
	const uint32_t big = inline_max + 1;

	peer_send(x, 1, 64, 0, 64, "SEND of 64 bytes");
	peer_send(x, 2, inline_max, 0, inline_max, "SEND of the inline maximum");
	peer_send(x, 3, big, bounce() ? 0 : big, bounce() ? big : 0,
		  "SEND one byte over the inline maximum");
	tp_pair_stop(x);
}

static void test_send_path_follows_the_inline_max(void **state)
{
	check_send_sizes(state, 32768);
}

static void test_send_path_follows_softverbs_shm_inline_max(void **state)
{
	setenv("SOFTVERBS_SHM_INLINE_MAX", "1024", 1);
	if (!tp_fresh("test_send_path_follows_softverbs_shm_inline_max", 30000)) {
		unsetenv("SOFTVERBS_SHM_INLINE_MAX");
		return;
	}
	check_send_sizes(state, 1024);
}

static void test_atomics_and_tiny_write_bursts_go_through_the_fifo(void **state)
{
	struct tp_pair *x = pair(state);
	struct ibv_qp *qp = x->ep.qp[x->lq];
	struct softverbs_qp_stats a = stats(qp), b;
	struct tp_wr w[16];

	w[0] = tp_wr1(1, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8);
	w[0].remote_addr = x->pi.addr;
	w[0].rkey = x->pi.rkey;
	w[0].compare_add = 5;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	b = stats(qp);
	expect_delta(&a, &b, 1, 8, 0, 8, true, "fetch-and-add");

	/* 16 WRITEs of 8 bytes in one post list, only the last signaled. */
	tp_fill(x->ep.buf, 128, 9, 0);
	for (int i = 0; i < 16; i++) {
		w[i] = tp_wr1(10 + i, IBV_WR_RDMA_WRITE, 8 * i, 8);
		w[i].remote_addr = x->pi.addr + 4096 + 8 * i;
		w[i].rkey = x->pi.rkey;
		w[i].send_flags = i == 15 ? IBV_SEND_SIGNALED : 0;
	}
	a = b;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 16, NULL), 0);
	tp_expect_wc(x->ep.scq, 25, IBV_WC_SUCCESS, W, NULL);
	tp_check_peer(&x->peer, 4096, 128, 9, 0, "16 tiny WRITEs");
	b = stats(qp);
	expect_delta(&a, &b, 16, 128, 0, 128, true, "16 tiny WRITEs");
	tp_pair_stop(x);
}

int main(int argc, char **argv)
{
	tp_main(argc, argv);
#define T(f) cmocka_unit_test_setup_teardown(f, tp_pair_setup, tp_pair_teardown)
	const struct CMUnitTest tests[] = {
		T(test_new_qp_reports_no_path),
		T(test_write_and_read_take_the_copy_mode_given),
		T(test_send_path_follows_the_inline_max),
		T(test_send_path_follows_softverbs_shm_inline_max),
		T(test_atomics_and_tiny_write_bursts_go_through_the_fifo),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
