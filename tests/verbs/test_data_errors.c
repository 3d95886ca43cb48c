/*
 * Errors on the RC data path between two processes, black-box (sv_test_peer.h).
 *
 * What is asserted (IBA vol 1 §9.7.5, §10.8.3, §11.6.2; rdma-core ibv_poll_cq(3): for a
 * completion in error only wr_id, status, qp_num and vendor_err are valid):
 * - Local errors (IBA 10.8.3.3 / C10-...): a bad lkey, an SGE past the end of its MR,
 *   an RDMA READ into an MR without IBV_ACCESS_LOCAL_WRITE: IBV_WC_LOC_PROT_ERR at the
 *   requester; nothing reaches the responder, whose QP carries on.
 * - Remote access violations (IBA 9.7.5.2.4): a bad rkey, a range past the MR, an MR or
 *   a QP without the right: IBV_WC_REM_ACCESS_ERR at the requester, the target memory
 *   untouched, and the responder's QP in Error with IBV_EVENT_QP_ACCESS_ERR.
 * - A receive too small: IBV_WC_LOC_LEN_ERR at the responder (its QP to Error) and
 *   IBV_WC_REM_INV_REQ_ERR at the requester.
 * - After an error completion the QP is in Error and every other outstanding WR, signaled
 *   or not, send or receive, completes with IBV_WC_WR_FLUSH_ERR.
 * - A peer killed with SIGKILL: our QPs enter Error within 1 s with IBV_EVENT_QP_FATAL,
 *   their WRs flushed, with nobody polling. A peer that destroys its QP does not put ours
 *   in Error; what waits for it, or is sent to it later, ends in IBV_WC_RETRY_EXC_ERR.
 *   One that destroys its QP the moment its receive completes (a program that exits
 *   once it has its last message) leaves that SEND of ours successful, as a NIC's
 *   acknowledgement, sent before the receive completed, would.
 * - RC to a QP number nobody has: IBV_WC_RETRY_EXC_ERR.
 * - An MR deregistered (and unmapped) by its owner while the peer writes to it: the
 *   writes that come after fail with IBV_WC_REM_ACCESS_ERR; neither process crashes.
 * - Memory registered and then unmapped by its owner: WRITEs (a tiny burst, a large one)
 *   and READs there fail with IBV_WC_REM_ACCESS_ERR; nothing crashes.
 * - A rogue peer writing garbage into our QP's fifo: a 0-slot message is a protocol
 *   error (IBV_EVENT_QP_FATAL); random messages and ring fields crash nothing.
 */
#include "verbs/sv_test_peer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BUF_LEN (1u << 20)
#define W TP_WAIT_MS

static const struct tp_qp_opts rc_opts = { .type = IBV_QPT_RC };

/* A WR towards the agent's buffer at @roff. */
static struct tp_wr wr_to(const struct tp_pair *x, uint64_t id, enum ibv_wr_opcode op,
			  uint32_t off, uint32_t len, uint64_t roff)
{
	struct tp_wr w = tp_wr1(id, op, off, len);

	w.remote_addr = x->pi.addr + roff;
	w.rkey = x->pi.rkey;
	return w;
}

static struct tp_pair *rc_pair(void **state)
{
	struct tp_pair *x = *state;

	tp_pair_open(x, BUF_LEN, &rc_opts, NULL);
	tp_pair_connect(x);
	return x;
}

/* A new QP on each side, made the pair's, with what connects them (x->lc, x->pc). */
static void new_qps(struct tp_pair *x)
{
	x->pq = tp_create_qp(&x->peer, &rc_opts);
	tp_info(&x->peer, x->pq, &x->pi);
	x->lq = tp_ep_create_qp(&x->ep, &rc_opts);
	tp_ep_info(&x->ep, x->lq, &x->li);
	tp_conn(&x->ep, &x->li, &x->pi, &x->lc);
	tp_conn(&x->ep, &x->pi, &x->li, &x->pc);
}

/* A new QP on each side, connected (the agent's with @peer_access), made the pair's. */
static void renew(struct tp_pair *x, int peer_access)
{
	new_qps(x);
	x->pc.access = peer_access;
	tp_pair_connect(x);
}

/* The error completion for @id, then Error: the next WR flushes at once. */
static void expect_error_then_err_state(struct tp_pair *x, uint64_t id, enum ibv_wc_status st,
					const char *what)
{
	struct ibv_wc wc;
	struct tp_wr w = tp_wr1(id + 1000, IBV_WR_SEND, 0, 8);

	tp_expect_wc(x->ep.scq, id, st, W, &wc);
	tp_expect_eq(wc.qp_num, x->li.qpn, "qp_num", what);
	if (!tp_wait_state(x->ep.qp[x->lq], IBV_QPS_ERR, W))
		fail_msg("%s: the QP is not in ERR %d ms after its error completion", what, W);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, id + 1000, IBV_WC_WR_FLUSH_ERR, W, NULL);
}

/* The responder after a remote access violation: Error, with the async event. */
static void expect_peer_access_err(struct tp_pair *x, const char *what)
{
	if (!tp_wait_peer_async(&x->peer, IBV_EVENT_QP_ACCESS_ERR, x->pq, W))
		fail_msg("%s: no IBV_EVENT_QP_ACCESS_ERR at the responder", what);
	if (!tp_wait_peer_state(&x->peer, x->pq, IBV_QPS_ERR, W))
		fail_msg("%s: the responder's QP is not in ERR", what);
}

/* We, the responder, after a remote access violation on our QP @q: its async event. */
static void expect_local_access_err(struct tp_pair *x, int q, const char *what)
{
	struct ibv_async_event ev;

	if (!tp_wait_async(x->ep.res->ctx, IBV_EVENT_QP_ACCESS_ERR, W, &ev))
		fail_msg("%s: no IBV_EVENT_QP_ACCESS_ERR at the responder (us)", what);
	if (ev.element.qp != x->ep.qp[q])
		fail_msg("%s: IBV_EVENT_QP_ACCESS_ERR about QP %u, expected %u", what,
			 ev.element.qp->qp_num, x->ep.qp[q]->qp_num);
}

/* ---- local errors ---------------------------------------------------------------------- */

static void test_local_protection_errors(void **state)
{
	struct tp_pair *x = rc_pair(state);
	struct ibv_mr *ro;
	struct tp_wr w;
	struct ibv_wc wc;

	/* A bad lkey. */
	w = tp_wr1(1, IBV_WR_SEND, 0, 100);
	w.lkey_xor = 0x00100000;
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 1, &(struct tp_sge){ 0, 4096 }, 1), 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	expect_error_then_err_state(x, 1, IBV_WC_LOC_PROT_ERR, "SEND with a bad lkey");
	/* Nothing reached the responder: its receive waits, its QP carries on. */
	assert_int_equal(tp_poll(&x->peer, false, 1, 0, &wc), 0);
	tp_expect_eq(tp_state(&x->peer, x->pq), IBV_QPS_RTS, "responder's state", "bad lkey");

	/* An SGE that runs past the end of its MR. */
	renew(x, TP_QP_ACCESS_ALL);
	tp_fill_peer(&x->peer, 0, 100, 5, 0);
	w = wr_to(x, 2, IBV_WR_RDMA_WRITE, BUF_LEN - 10, 100, 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	expect_error_then_err_state(x, 2, IBV_WC_LOC_PROT_ERR, "WRITE from past the MR's end");
	tp_check_peer(&x->peer, 0, 100, 5, 0, "target of a WRITE that failed locally");

	/* An RDMA READ lands in local memory: its MR needs IBV_ACCESS_LOCAL_WRITE. */
	renew(x, TP_QP_ACCESS_ALL);
	ro = ibv_reg_mr(x->ep.res->pd, x->ep.buf, 4096, 0);
	assert_non_null(ro);
	memset(x->ep.buf, 0x5c, 64);
	w = wr_to(x, 3, IBV_WR_RDMA_READ, 0, 64, 0);
	w.lkey_xor = x->ep.mr->lkey ^ ro->lkey;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	expect_error_then_err_state(x, 3, IBV_WC_LOC_PROT_ERR, "READ into a read-only MR");
	for (int i = 0; i < 64; i++)
		tp_expect_eq(x->ep.buf[i], 0x5c, "a byte of the read-only MR", "failed READ");
	assert_int_equal(ibv_dereg_mr(ro), 0);
	tp_pair_stop(x);
}

/* The responder's receive has a bad lkey: its error (IBV_WC_LOC_PROT_ERR, QP to Error) and
 * the requester's (IBV_WC_REM_OP_ERR, IBA 9.7.5.2.4 Remote Operational Error). */
static void test_receive_with_bad_lkey(void **state)
{
	struct tp_pair *x = rc_pair(state);
	struct tp_wr w = tp_wr1(1, IBV_WR_SEND, 0, 100);
	struct ibv_sge sge = { 0 };
	struct ibv_recv_wr *bad, rwr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1 };

	/* Our own QP receives into a bad key; the agent sends. */
	sge.addr = (uintptr_t)x->ep.buf;
	sge.length = 4096;
	sge.lkey = x->ep.mr->lkey ^ 0x00100000;
	assert_int_equal(ibv_post_recv(x->ep.qp[x->lq], &rwr, &bad), 0);
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 1, IBV_WC_REM_OP_ERR, NULL);
	tp_expect_wc(x->ep.rcq, 9, IBV_WC_LOC_PROT_ERR, W, NULL);
	if (!tp_wait_state(x->ep.qp[x->lq], IBV_QPS_ERR, W))
		fail_msg("responder's QP not in ERR after IBV_WC_LOC_PROT_ERR on a receive");
	tp_pair_stop(x);
}

/* ---- remote access ----------------------------------------------------------------------- */

/* @w fails with IBV_WC_REM_ACCESS_ERR; the agent's bytes [0, 4096) keep their pattern. */
static void remote_access_case(struct tp_pair *x, struct tp_wr *w, const char *what)
{
	tp_fill_peer(&x->peer, 0, 4096, 77, 0);
	tp_fill(x->ep.buf, 4096, 78, 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 1, NULL), 0);
	expect_error_then_err_state(x, w->wr_id, IBV_WC_REM_ACCESS_ERR, what);
	expect_peer_access_err(x, what);
	tp_check_peer(&x->peer, 0, 4096, 77, 0, what);
	if (w->opcode == IBV_WR_RDMA_READ)
		tp_assert_pattern(x->ep.buf, 4096, 78, 0, what);
}

static void test_remote_access_errors(void **state)
{
	struct tp_pair *x = rc_pair(state);
	struct tp_wr w;

	w = wr_to(x, 1, IBV_WR_RDMA_WRITE, 0, 100, 0);
	w.rkey ^= 0x00100000;
	remote_access_case(x, &w, "WRITE with a bad rkey");

	renew(x, TP_QP_ACCESS_ALL);
	w = wr_to(x, 2, IBV_WR_RDMA_WRITE, 0, 100, BUF_LEN - 50);
	remote_access_case(x, &w, "WRITE past the end of the remote MR");

	renew(x, TP_QP_ACCESS_ALL);
	w = wr_to(x, 3, IBV_WR_RDMA_READ, 0, 4096, 0);
	w.rkey ^= 0x00100000;
	remote_access_case(x, &w, "READ with a bad rkey");

	renew(x, TP_QP_ACCESS_ALL);
	w = wr_to(x, 4, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, 64);
	w.rkey ^= 0x00100000;
	w.compare_add = 1;
	remote_access_case(x, &w, "fetch-and-add with a bad rkey");

	renew(x, TP_QP_ACCESS_ALL);
	w = wr_to(x, 5, IBV_WR_ATOMIC_CMP_AND_SWP, 0, 8, BUF_LEN);
	remote_access_case(x, &w, "compare-and-swap past the end of the remote MR");

	/* The responder QP's own access flags. */
	renew(x, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	w = wr_to(x, 6, IBV_WR_RDMA_WRITE, 0, 100, 0);
	remote_access_case(x, &w, "WRITE to a QP without IBV_ACCESS_REMOTE_WRITE");

	renew(x, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	w = wr_to(x, 7, IBV_WR_RDMA_READ, 0, 100, 0);
	remote_access_case(x, &w, "READ from a QP without IBV_ACCESS_REMOTE_READ");

	renew(x, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	w = wr_to(x, 8, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, 64);
	w.compare_add = 1;
	remote_access_case(x, &w, "fetch-and-add on a QP without IBV_ACCESS_REMOTE_ATOMIC");
	tp_pair_stop(x);
}

/* The target MR's own rights: an agent whose MR allows local write and remote read only. */
static void test_remote_access_needs_the_mr_right(void **state)
{
	struct tp_pair *x = *state;
	struct tp_wr w;

	tp_start(&x->peer);
	tp_open(&x->peer, BUF_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	tp_ep_open(&x->ep, BUF_LEN, 0);
	renew(x, TP_QP_ACCESS_ALL);
	/* Reading is allowed... */
	w = wr_to(x, 1, IBV_WR_RDMA_READ, 0, 4096, 0);
	tp_fill_peer(&x->peer, 0, 4096, 11, 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	tp_assert_pattern(x->ep.buf, 4096, 11, 0, "READ of an MR with REMOTE_READ");
	/* ...writing is not... */
	w = wr_to(x, 2, IBV_WR_RDMA_WRITE, 0, 100, 0);
	remote_access_case(x, &w, "WRITE to an MR without IBV_ACCESS_REMOTE_WRITE");
	/* ...nor atomics. */
	renew(x, TP_QP_ACCESS_ALL);
	w = wr_to(x, 3, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, 64);
	w.compare_add = 1;
	remote_access_case(x, &w, "fetch-and-add on an MR without IBV_ACCESS_REMOTE_ATOMIC");
	tp_pair_stop(x);
}

/* ---- length --------------------------------------------------------------------------- */

static void test_receive_too_small(void **state)
{
	struct tp_pair *x = rc_pair(state);
	/* Through the ring, and pulled by the responder. */
	const uint32_t lens[] = { 64, 65536 }, room[] = { 16, 16384 };

	for (unsigned int k = 0; k < ARRAY_LEN(lens); k++) {
		struct tp_wr w = tp_wr1(k, IBV_WR_SEND, 0, lens[k]);
		struct ibv_wc wc;
		char what[64];

		snprintf(what, sizeof(what), "SEND of %u bytes into %u", lens[k], room[k]);
		if (k)
			renew(x, TP_QP_ACCESS_ALL);
		assert_int_equal(tp_post_recv(&x->peer, x->pq, 10 + k,
					      &(struct tp_sge){ 0, room[k] }, 1), 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_peer_wc(&x->peer, false, 10 + k, IBV_WC_LOC_LEN_ERR, &wc);
		tp_expect_eq(wc.qp_num, x->pi.qpn, "qp_num", what);
		expect_error_then_err_state(x, k, IBV_WC_REM_INV_REQ_ERR, what);
		if (!tp_wait_peer_state(&x->peer, x->pq, IBV_QPS_ERR, W))
			fail_msg("%s: the responder's QP is not in ERR", what);
	}
	tp_pair_stop(x);
}

/* ---- flush ---------------------------------------------------------------------------- */

static void test_error_flushes_everything_outstanding(void **state)
{
	struct tp_pair *x = rc_pair(state);
	struct tp_wr w[4];
	struct ibv_wc wc[4];

	/* Receives on both sides, to be flushed. */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(tp_ep_post_recv(&x->ep, x->lq, 100 + (uint64_t)i,
						 &(struct tp_sge){ 8192, 64 }, 1), 0);
		assert_int_equal(tp_post_recv(&x->peer, x->pq, 200 + (uint64_t)i,
					      &(struct tp_sge){ 8192, 64 }, 1), 0);
	}
	/* A SEND the agent receives, then a WRITE with a bad rkey, then work queued behind
	 * it: an unsignaled WRITE (to bytes the test watches) and a signaled SEND. */
	w[0] = tp_wr1(0, IBV_WR_SEND, 0, 16);
	w[1] = wr_to(x, 1, IBV_WR_RDMA_WRITE, 0, 100, 0);
	w[1].rkey ^= 0x00100000;
	w[2] = wr_to(x, 2, IBV_WR_RDMA_WRITE, 4096, 100, 16384);
	w[2].send_flags = 0;
	w[3] = tp_wr1(3, IBV_WR_SEND, 0, 16);
	tp_fill_peer(&x->peer, 16384, 100, 90, 0);
	tp_fill(x->ep.buf + 4096, 100, 91, 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 4, NULL), 0);
	tp_expect_wc(x->ep.scq, 0, IBV_WC_SUCCESS, W, NULL);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_REM_ACCESS_ERR, W, NULL);
	/* IBA 10.8.3.3: an error always completes, signaled or not. */
	tp_expect_wc(x->ep.scq, 2, IBV_WC_WR_FLUSH_ERR, W, &wc[0]);
	tp_expect_eq(wc[0].qp_num, x->li.qpn, "qp_num", "flushed unsignaled WRITE");
	tp_expect_wc(x->ep.scq, 3, IBV_WC_WR_FLUSH_ERR, W, NULL);
	for (int i = 0; i < 3; i++) {
		tp_expect_wc(x->ep.rcq, 100 + (uint64_t)i, IBV_WC_WR_FLUSH_ERR, W, &wc[0]);
		tp_expect_eq(wc[0].qp_num, x->li.qpn, "qp_num", "flushed receive");
	}
	tp_expect_no_wc(x->ep.scq, 20, "after the flush of the send queue");
	if (!tp_wait_state(x->ep.qp[x->lq], IBV_QPS_ERR, W))
		fail_msg("QP not in ERR after IBV_WC_REM_ACCESS_ERR");
	/* The responder: the first SEND arrived, then its QP entered Error, flushing the rest. */
	expect_peer_access_err(x, "WRITE with a bad rkey");
	tp_expect_peer_wc(&x->peer, false, 200, IBV_WC_SUCCESS, NULL);
	tp_expect_peer_wc(&x->peer, false, 201, IBV_WC_WR_FLUSH_ERR, NULL);
	tp_expect_peer_wc(&x->peer, false, 202, IBV_WC_WR_FLUSH_ERR, NULL);
	/* IBA 10.8.3.3: nothing after the failed WR was executed. */
	tp_check_peer(&x->peer, 16384, 100, 90, 0,
		      "target of an unsignaled WRITE queued behind a failed WRITE");
	/* A receive posted in Error flushes at once too. */
	assert_int_equal(tp_ep_post_recv(&x->ep, x->lq, 103, &(struct tp_sge){ 8192, 64 }, 1), 0);
	tp_expect_wc(x->ep.rcq, 103, IBV_WC_WR_FLUSH_ERR, W, NULL);
	tp_pair_stop(x);
}

/* IBA 10.8.3.3: once a WR fails, nothing posted after it executes. A run of WRITEs with
 * a bad rkey in the middle: the WRITEs after it never reach the target. */
static void test_nothing_executes_after_a_failed_write(void **state)
{
	struct tp_pair *x = rc_pair(state);
	struct tp_wr w[4];

	for (int i = 0; i < 4; i++) {
		w[i] = wr_to(x, (uint64_t)i, IBV_WR_RDMA_WRITE, (uint32_t)i * 4096, 1000,
			     (uint64_t)i * 8192);
		tp_fill(x->ep.buf + i * 4096, 1000, 20 + (uint32_t)i, 0);
		tp_fill_peer(&x->peer, (uint64_t)i * 8192, 1000, 30 + (uint32_t)i, 0);
	}
	w[1].rkey ^= 0x00100000;
	w[2].send_flags = 0;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 4, NULL), 0);
	tp_expect_wc(x->ep.scq, 0, IBV_WC_SUCCESS, W, NULL);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_REM_ACCESS_ERR, W, NULL);
	tp_expect_wc(x->ep.scq, 2, IBV_WC_WR_FLUSH_ERR, W, NULL);
	tp_expect_wc(x->ep.scq, 3, IBV_WC_WR_FLUSH_ERR, W, NULL);
	tp_check_peer(&x->peer, 0, 1000, 20, 0, "the WRITE before the failed one");
	tp_check_peer(&x->peer, 8192, 1000, 31, 0, "target of the failed WRITE");
	tp_check_peer(&x->peer, 2 * 8192, 1000, 32, 0, "target of a WRITE after the failed one");
	tp_check_peer(&x->peer, 3 * 8192, 1000, 33, 0, "target of a WRITE after the failed one");
	expect_peer_access_err(x, "a WRITE with a bad rkey");
	tp_pair_stop(x);
}

/* ---- a peer that goes away ----------------------------------------------------------------- */

/* SIGKILL: every QP connected to the dead process enters Error, with IBV_EVENT_QP_FATAL
 * and its WRs flushed, while this process only waits on its async fd. On an idle machine
 * that takes milliseconds (the time is printed); the test allows 10 s, which a loaded
 * 2-vCPU machine keeps, and which still fails a death nobody notices. */
static void test_peer_killed(void **state)
{
	struct tp_pair *x;
	int busy, idle;
	struct tp_wr w = tp_wr1(1, IBV_WR_SEND, 0, 100);
	struct ibv_async_event ev;
	bool fatal[2] = { false, false };
	long long t0, dt;

	TU_SKIP_ON_ROCE("a NIC learns of a dead peer by its transport timer alone (the busy QP's "
			"RETRY_EXC_ERR, no event; the idle QP never): test_roce_peer_killed");
	x = rc_pair(state);
	busy = x->lq;
	renew(x, TP_QP_ACCESS_ALL);
	idle = x->lq;
	x->lq = busy;
	/* Outstanding: a SEND the agent has no receive for (RNR, retried forever), two
	 * receives. */
	assert_int_equal(tp_ep_post_send(&x->ep, busy, &w, 1, NULL), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(tp_ep_post_recv(&x->ep, busy, 10 + (uint64_t)i,
						 &(struct tp_sge){ 4096, 64 }, 1), 0);
	tp_expect_no_wc(x->ep.scq, 50, "SEND waiting for a receive");
	t0 = tu_now_ms();
	tp_kill(&x->peer);
	while (!(fatal[0] && fatal[1])) {
		long long left = 10000 - (tu_now_ms() - t0);

		if (left <= 0 || !tp_wait_async(x->ep.res->ctx, IBV_EVENT_QP_FATAL, (int)left, &ev))
			fail_msg("IBV_EVENT_QP_FATAL for %s QP not within 10 s of the peer's SIGKILL",
				 fatal[0] ? "the idle" : "the busy");
		fatal[0] |= ev.element.qp == x->ep.qp[busy];
		fatal[1] |= ev.element.qp == x->ep.qp[idle];
	}
	dt = tu_now_ms() - t0;
	print_message("    IBV_EVENT_QP_FATAL on both QPs %lld ms after the peer's SIGKILL\n", dt);
	tp_expect_eq(tu_query_state(x->ep.qp[busy]), IBV_QPS_ERR, "state", "after QP_FATAL");
	tp_expect_eq(tu_query_state(x->ep.qp[idle]), IBV_QPS_ERR, "state", "idle QP after QP_FATAL");
	tp_expect_wc(x->ep.scq, 1, IBV_WC_WR_FLUSH_ERR, W, NULL);
	tp_expect_wc(x->ep.rcq, 10, IBV_WC_WR_FLUSH_ERR, W, NULL);
	tp_expect_wc(x->ep.rcq, 11, IBV_WC_WR_FLUSH_ERR, W, NULL);
	assert_int_equal(tp_ep_close(&x->ep), 0);
}

/*
 * RoCE: a peer killed answers nothing, and nothing else tells. A SEND to it is sent
 * again each transport timeout (timeout 10: 4.2 ms), retry_cnt (3) times, then fails
 * with RETRY_EXC_ERR, the QP in Error (IBA 9.7.6.1.3): after 4 periods at least (17 ms),
 * and long before 10 s.
 */
static void test_roce_peer_killed(void **state)
{
	struct tp_pair *x = *state;
	struct tp_wr w = tp_wr1(1, IBV_WR_SEND, 0, 100);
	long long t0, dt;

	if (!tu_wire_roce())
		skip(); /* (the other wires see the process go: test_peer_killed) */
	tp_pair_open(x, BUF_LEN, &rc_opts, NULL);
	x->lc.timeout = 10;
	x->lc.retry_cnt = 3;
	tp_pair_connect(x);
	tp_kill(&x->peer);
	t0 = tu_now_ms();
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_RETRY_EXC_ERR, 10000, NULL);
	dt = tu_now_ms() - t0;
	print_message("    RETRY_EXC_ERR %lld ms after the SEND to the dead peer\n", dt);
	if (dt < 16)
		fail_msg("RETRY_EXC_ERR after %lld ms, before 4 x 4.2 ms", dt);
	tp_expect_eq(tu_query_state(x->ep.qp[x->lq]), IBV_QPS_ERR, "state", "after RETRY_EXC_ERR");
	assert_int_equal(tp_ep_close(&x->ep), 0);
}

/*
 * A peer that leaves the moment its receive completes (ibv_srq_pingpong's client after
 * its last pong): the SEND it received succeeds here, every round. Over iWARP the SEND
 * completes once placed, which a zero-length READ behind it asks; here an RDMA READ of
 * ours goes first and, with ORD 1, holds that probe back until the READ's answer is in,
 * so the peer may be gone before it comes: its goodbye says what it placed.
 */
static void test_peer_leaves_as_its_receive_completes(void **state)
{
	struct tp_pair *x = rc_pair(state);

	/* A QP more on each side a round, up to what an endpoint holds (TP_MAX_QPS). */
	for (int round = 0; round < TP_MAX_QPS - 1; round++) {
		struct tp_wr w[2];
		int st;

		new_qps(x);
		x->lc.max_rd_atomic = 1;
		x->pc.max_dest_rd_atomic = 1; /* (an iWARP connection's ORD is the peer's IRD) */
		tp_pair_connect(x);
		w[0] = wr_to(x, 1, IBV_WR_RDMA_READ, 0, 64 * 1024, 256 * 1024);
		w[1] = tp_wr1(2, IBV_WR_SEND, 128 * 1024, 512);
		assert_int_equal(tp_post_recv(&x->peer, x->pq, 10, &(struct tp_sge){ 0, 512 }, 1),
				 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 2, NULL), 0);
		st = tp_leave_on_recv(&x->peer, x->pq, W);
		if (st != IBV_WC_SUCCESS)
			fail_msg("round %d: the peer's receive: %s", round,
				 st < 0 ? "none" : ibv_wc_status_str((enum ibv_wc_status)st));
		tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
		tp_expect_wc(x->ep.scq, 2, IBV_WC_SUCCESS, W, NULL);
	}
	tp_pair_stop(x);
}

/* A peer that destroys its QP says so: ours stays as it was; only work that needs the
 * peer fails, as if the transport's retries ran out (IBA 9.7.5.1.1). */
static void test_peer_destroys_its_qp(void **state)
{
	struct tp_pair *x = rc_pair(state);
	int waiting = x->lq, later;
	struct tp_wr w = tp_wr1(1, IBV_WR_SEND, 0, 100);
	struct ibv_wc wc;

	/* QP 1: a SEND waits (RNR) when the peer's QP goes. */
	assert_int_equal(tp_ep_post_send(&x->ep, waiting, &w, 1, NULL), 0);
	tp_expect_no_wc(x->ep.scq, 50, "SEND waiting for a receive");
	assert_int_equal(tp_destroy_qp(&x->peer, x->pq), 0);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_RETRY_EXC_ERR, W, &wc);
	tp_expect_eq(wc.qp_num, x->li.qpn, "qp_num", "SEND to a destroyed QP");

	/* QP 2: idle when the peer's QP goes. */
	renew(x, TP_QP_ACCESS_ALL);
	later = x->lq;
	assert_int_equal(tp_ep_post_recv(&x->ep, later, 20, &(struct tp_sge){ 4096, 64 }, 1), 0);
	assert_int_equal(tp_destroy_qp(&x->peer, x->pq), 0);
	/* No QP_FATAL (a dead peer gives one at once), nothing flushed, still RTS. The
	 * window is one check; the one after the next SEND's error is the other (by then
	 * our side has handled the peer's destroy, and any event it raised is queued). */
	if (tp_wait_async(x->ep.res->ctx, IBV_EVENT_QP_FATAL, 1200, NULL))
		fail_msg("IBV_EVENT_QP_FATAL after the peer destroyed its QP cleanly");
	tp_expect_no_wc(x->ep.rcq, 0, "receive after the peer destroyed its QP");
	tp_expect_eq(tu_query_state(x->ep.qp[later]), IBV_QPS_RTS, "state",
		  "QP whose peer destroyed its QP");
	/* What is sent now has nobody to answer it. */
	w.wr_id = 2;
	assert_int_equal(tp_ep_post_send(&x->ep, later, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 2, IBV_WC_RETRY_EXC_ERR, W, NULL);
	if (tp_fd_ready(x->ep.res->ctx->async_fd))
		fail_msg("an async event after the peer destroyed its QP cleanly (late)");
	/* Error flushes the receive that waited (IBA 10.8.3.3). */
	tp_expect_wc(x->ep.rcq, 20, IBV_WC_WR_FLUSH_ERR, W, NULL);
	/* The agent itself is fine. */
	tp_pair_stop(x);
}

/* IBA 9.7.5.1.1: nobody answers a QP number that does not exist; the retries run out.
 * Two such numbers: one of this process's own block that no QP has (QP numbers are
 * host-unique, so nobody else has it), and the QP number of an agent that has exited. */
static void test_rc_to_nonexistent_qpn(void **state)
{
	struct tp_pair *x = *state;
	struct tp_info nobody[2];
	const char *what[2] = { "SEND to an unused QPN of our own block",
				"SEND to the QPN of a process that exited" };

	tp_start(&x->peer);
	tp_open(&x->peer, 4096, 0);
	tp_info(&x->peer, tp_create_qp(&x->peer, &rc_opts), &nobody[1]);
	tp_stop(&x->peer);
	tp_ep_open(&x->ep, BUF_LEN, 0);
	for (int k = 0; k < 2; k++) {
		struct tp_wr w[2] = { tp_wr1(1, IBV_WR_SEND, 0, 100), tp_wr1(2, IBV_WR_RDMA_WRITE, 0, 100) };

		x->lq = tp_ep_create_qp(&x->ep, &rc_opts);
		tp_ep_info(&x->ep, x->lq, &x->li);
		if (k == 0) {
			nobody[0] = x->li;
			nobody[0].qpn = (x->li.qpn & ~0xffu) | 0xfe;
			assert_true(nobody[0].qpn != x->li.qpn);
		}
		tp_conn(&x->ep, &x->li, &nobody[k], &x->lc);
		assert_int_equal(tu_qp_connect(x->ep.qp[x->lq], &x->lc, IBV_QPS_RTS), 0);
		w[1].remote_addr = (uintptr_t)x->ep.buf;
		w[1].rkey = x->ep.mr->rkey;
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 2, NULL), 0);
		tp_expect_wc(x->ep.scq, 1, IBV_WC_RETRY_EXC_ERR, W, NULL);
		tp_expect_wc(x->ep.scq, 2, IBV_WC_WR_FLUSH_ERR, W, NULL);
		if (!tp_wait_state(x->ep.qp[x->lq], IBV_QPS_ERR, W))
			fail_msg("%s: QP not in ERR after IBV_WC_RETRY_EXC_ERR", what[k]);
	}
	/* A WRITE alone, too: it needs the target as much as a SEND does. */
	{
		struct tp_wr w = tp_wr1(3, IBV_WR_RDMA_WRITE, 0, 100);

		w.remote_addr = (uintptr_t)x->ep.buf;
		w.rkey = x->ep.mr->rkey;
		x->lq = tp_ep_create_qp(&x->ep, &rc_opts);
		tp_ep_info(&x->ep, x->lq, &x->li);
		assert_int_equal(tu_qp_connect(x->ep.qp[x->lq], &x->lc, IBV_QPS_RTS), 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		expect_error_then_err_state(x, 3, IBV_WC_RETRY_EXC_ERR, "WRITE to a QPN nobody has");
	}
	assert_int_equal(tp_ep_close(&x->ep), 0);
}

/* ---- an MR that goes away ----------------------------------------------------------------- */

/* @n WRITEs of 8 bytes from the agent to (@addr + 8 i, @rkey), one post list: at least
 * 8 of them travel as one burst that our library places. The last is signaled. */
static void agent_tiny_writes(struct tp_pair *x, uint64_t id, uint64_t addr, uint32_t rkey,
			      int n)
{
	struct tp_wr w[8];

	for (int i = 0; i < n; i++) {
		w[i] = tp_wr1(id + (uint64_t)i, IBV_WR_RDMA_WRITE, 8 * (uint32_t)i, 8);
		w[i].send_flags = i == n - 1 ? IBV_SEND_SIGNALED : 0;
		w[i].remote_addr = addr + 8 * (uint64_t)i;
		w[i].rkey = rkey;
	}
	assert_int_equal(tp_post_send(&x->peer, x->pq, w, n, NULL), 0);
}

/* True while @hole is unmapped; else says something mapped memory there again (the
 * WRITEs would then land in that mapping, as with an on-demand MR) and returns false. */
static bool still_a_hole(uint64_t hole)
{
	if (msync((void *)(uintptr_t)hole, 4096, MS_ASYNC))
		return true;
	print_message("the unmapped page was mapped again by someone: rest not checked\n");
	return false;
}

/*
 * Memory we registered and then unmapped (without deregistering: a misuse, but a NIC
 * would only fail the access): the agent's WRITEs there — a burst of tiny ones our
 * library places, or one large one — and READs fail with IBV_WC_REM_ACCESS_ERR, and we
 * do not crash; the still-mapped page of the same MR takes writes.
 */
static void test_registered_memory_unmapped_by_its_owner(void **state)
{
	struct tp_pair *x = rc_pair(state);
	unsigned char *mem = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr;
	struct tp_wr w;
	uint64_t hole;

	assert_true(mem != MAP_FAILED);
	mr = ibv_reg_mr(x->ep.res->pd, mem, 3 * 4096,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	assert_non_null(mr);
	assert_int_equal(munmap(mem + 4096, 4096), 0);
	hole = (uintptr_t)mem + 4096;
#if defined(__SANITIZE_THREAD__)
	/* Under ThreadSanitizer something in the process maps memory into the hole before
	 * the agent's WRITEs come (msync found it mapped again): what lands there is then
	 * a write to that mapping, as it would be with an on-demand MR on a NIC. */
	print_message("skipped under ThreadSanitizer: the unmapped page does not stay unmapped\n");
	assert_int_equal(ibv_dereg_mr(mr), 0);
	munmap(mem, 3 * 4096);
	tp_pair_stop(x);
	skip();
#endif

	tp_fill_peer(&x->peer, 0, 64, 61, 0);
	agent_tiny_writes(x, 100, (uintptr_t)mem, mr->rkey, 8);
	tp_expect_peer_wc(&x->peer, true, 107, IBV_WC_SUCCESS, NULL);
	tp_assert_pattern(mem, 64, 61, 0, "tiny WRITEs into the mapped page");

	if (!still_a_hole(hole))
		goto out;
	agent_tiny_writes(x, 200, hole, mr->rkey, 8);
	tp_expect_peer_wc(&x->peer, true, 200, IBV_WC_REM_ACCESS_ERR, NULL);
	for (uint64_t id = 201; id < 208; id++) /* the rest of the list, flushed */
		tp_expect_peer_wc(&x->peer, true, id, IBV_WC_WR_FLUSH_ERR, NULL);
	expect_local_access_err(x, x->lq, "tiny WRITEs into the hole");

	renew(x, TP_QP_ACCESS_ALL);
	if (!still_a_hole(hole))
		goto out;
	w = tp_wr1(300, IBV_WR_RDMA_WRITE, 0, 4096);
	w.remote_addr = hole;
	w.rkey = mr->rkey;
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 300, IBV_WC_REM_ACCESS_ERR, NULL);
	expect_local_access_err(x, x->lq, "a WRITE into the hole");

	renew(x, TP_QP_ACCESS_ALL);
	if (!still_a_hole(hole))
		goto out;
	w = tp_wr1(400, IBV_WR_RDMA_READ, 0, 100);
	w.remote_addr = hole + 8;
	w.rkey = mr->rkey;
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 400, IBV_WC_REM_ACCESS_ERR, NULL);
	expect_local_access_err(x, x->lq, "a READ from the hole");
out:
	assert_int_equal(ibv_dereg_mr(mr), 0);
	munmap(mem, 4096);
	munmap(mem + 2 * 4096, 4096);
	tp_pair_stop(x);
}

/* The agent deregisters its MR and unmaps the buffer while we keep writing to it: the
 * writes before complete, those after fail with IBV_WC_REM_ACCESS_ERR; both live on. */
static void test_mr_deregistered_while_peer_writes(void **state)
{
	struct tp_pair *x = rc_pair(state);
	uint64_t id = 0, done = 0, ok = 0, after = UINT64_MAX;
	bool answered = false, failed = false;
	long long end = tu_now_ms() + 10000;

	tp_fill(x->ep.buf, 65536, 3, 0);
	tp_request_async(&x->peer, TP_DEREG_MR, 0, 1);
	while (!failed) {
		struct tp_wr w = wr_to(x, id, IBV_WR_RDMA_WRITE, 0, 65536, (id % 8) * 65536);
		struct ibv_wc wc;

		if (tu_now_ms() > end)
			fail_msg("no IBV_WC_REM_ACCESS_ERR within 10 s of the MR's deregistration "
				 "(%llu writes succeeded)", (unsigned long long)ok);
		if (!answered && tp_answer_ready(&x->peer)) {
			assert_int_equal(tp_answer(&x->peer, W), 0);
			answered = true;
			after = id; /* WRs from here on were posted after ibv_dereg_mr returned */
		}
		if (id - done < 8) {
			assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
			id++;
		}
		if (ibv_poll_cq(x->ep.scq, 1, &wc) == 1) {
			tp_expect_eq((long long)wc.wr_id, (long long)done, "wr_id", "writes in order");
			done++;
			if (wc.status == IBV_WC_SUCCESS) {
				/* Fine before the deregistration; never after it returned. */
				if (wc.wr_id >= after)
					fail_msg("WRITE %llu, posted after ibv_dereg_mr returned "
						 "at the target, succeeded", (unsigned long long)wc.wr_id);
				ok++;
			} else {
				tp_expect_eq(wc.status, IBV_WC_REM_ACCESS_ERR, "status",
					  "first failing WRITE to a deregistered MR");
				failed = true;
			}
		}
	}
	/* Whatever was behind it flushes. */
	while (done < id) {
		tp_expect_wc(x->ep.scq, done, IBV_WC_WR_FLUSH_ERR, W, NULL);
		done++;
	}
	if (!answered)
		assert_int_equal(tp_answer(&x->peer, W), 0);
	print_message("%llu writes succeeded before the deregistration took effect\n",
		      (unsigned long long)ok);
	expect_peer_access_err(x, "WRITE to a deregistered MR");
	tp_pair_stop(x);
}

/* An atomic, executed by the target, finds the MR gone too. */
static void test_atomic_on_deregistered_mr(void **state)
{
	struct tp_pair *x = rc_pair(state);
	struct tp_wr w = wr_to(x, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, 64);

	w.compare_add = 1;
	assert_int_equal(tp_dereg_mr(&x->peer, false), 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	expect_error_then_err_state(x, 1, IBV_WC_REM_ACCESS_ERR,
				    "fetch-and-add on a deregistered MR");
	expect_peer_access_err(x, "fetch-and-add on a deregistered MR");
	tp_pair_stop(x);
}

/*
 * A peer that writes into our QP's fifo what no softverbs peer writes (every peer maps
 * it; with the bounce copy it may be another user's process): a header claiming 0 slots
 * fails the QP with IBV_EVENT_QP_FATAL; thousands of random headers, and random values
 * in the ring's own fields (its size, head, tail), do not crash the process, and a new
 * pair then moves data as before.
 */
/*
 * What random headers leave behind is random too: completions of any status on our CQs,
 * async events about the QPs that took the garbage. Both are taken here, so that the
 * teardown's checks (nothing left on a CQ, no async event nobody waited for) hold for
 * what follows; an event about anything but one of our QPs still fails the test.
 */
static void drain_garbage(struct tp_pair *x, const char *what)
{
	struct ibv_async_event ev;
	struct ibv_wc wc;
	char d[128];

	while (ibv_poll_cq(x->ep.scq, 1, &wc) == 1 || ibv_poll_cq(x->ep.rcq, 1, &wc) == 1)
		;
	while (tu_next_async(x->ep.res->ctx, 0, &ev, d, sizeof(d))) {
		bool ours = false;

		for (int i = 0; i < x->ep.nqp; i++)
			ours |= ev.element.qp == x->ep.qp[i];
		if (!ours || (ev.event_type != IBV_EVENT_QP_FATAL &&
			      ev.event_type != IBV_EVENT_QP_REQ_ERR &&
			      ev.event_type != IBV_EVENT_QP_ACCESS_ERR))
			fail_msg("%s: async event %s, not a QP error of a QP given garbage", what,
				 d);
	}
}

static void test_rogue_peer_writes_garbage_into_our_fifo(void **state)
{
	struct ibv_async_event ev;
	struct ibv_wc wc;
	struct tp_pair *x;
	struct tp_wr w;

	TU_SKIP_ON_IWARP("the shm wire's fifo (iWARP's hostile peers: tests/wire/iwarp)");
	TU_SKIP_ON_ROCE("the shm wire's fifo");
	x = rc_pair(state);

	assert_int_equal(tp_scribble(&x->peer, x->li.qpn, TP_SCRIBBLE_EMPTY, 1, 0), 0);
	/* The rogue rings no doorbell: our poll is what looks at the fifo. */
	(void)tu_poll(x->ep.scq, 1, &wc, 50);
	if (!tp_wait_async(x->ep.res->ctx, IBV_EVENT_QP_FATAL, 10000, &ev))
		fail_msg("no IBV_EVENT_QP_FATAL within 10 s of a 0-slot message");
	assert_ptr_equal(ev.element.qp, x->ep.qp[x->lq]);
	tp_expect_eq(tu_query_state(x->ep.qp[x->lq]), IBV_QPS_ERR, "state", "after QP_FATAL");

	for (uint32_t seed = 1; seed <= 6; seed++) { /* TP_MAX_QPS: 8 in all */
		renew(x, TP_QP_ACCESS_ALL);
		/* Receives for the random SENDs to land in (or be too small for). */
		for (int i = 0; i < 8; i++)
			assert_int_equal(tp_ep_post_recv(&x->ep, x->lq, 100 + (uint64_t)i,
							 &(struct tp_sge){ 4096 * (uint64_t)i, 64 },
							 1), 0);
		assert_int_equal(tp_scribble(&x->peer, x->li.qpn, TP_SCRIBBLE_GARBAGE, 2047, seed),
				 0);
		/* Our polls move the QP through whatever it was given. */
		for (int i = 0; i < 16; i++)
			(void)tu_poll(x->ep.rcq, 1, &wc, 5);
		(void)tu_poll(x->ep.scq, 1, &wc, 20);
		drain_garbage(x, "a round of garbage");
	}
	renew(x, TP_QP_ACCESS_ALL);
	tp_fill(x->ep.buf, 4096, 77, 0);
	w = wr_to(x, 5, IBV_WR_RDMA_WRITE, 0, 4096, 8192);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 5, IBV_WC_SUCCESS, W, NULL);
	tp_check_peer(&x->peer, 8192, 4096, 77, 0, "a WRITE after the garbage");
	drain_garbage(x, "after the last round");
	tp_pair_stop(x);
}

/*
 * The shm wire's ACK is a word on the requester's page, which the peer can write: one
 * from a QP that is not our peer, or of a message never sent, completes nothing; the
 * SEND it would have covered completes once the peer really takes it.
 */
static void test_rogue_peer_forges_acknowledgements(void **state)
{
	struct tp_wr w = tp_wr1(3, IBV_WR_SEND, 0, 64);
	struct tp_pair *x;
	struct ibv_wc wc;

	TU_SKIP_ON_IWARP("the shm wire's page (iWARP's hostile peers: tests/wire/iwarp)");
	TU_SKIP_ON_ROCE("the shm wire's page");
	x = rc_pair(state);
	/* No receive at the peer: the SEND (msn 1, the QP's first) waits, RNR forever. */
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_no_wc(x->ep.scq, 50, "SEND waiting for a receive");
	assert_int_equal(tp_scribble(&x->peer, x->li.qpn, TP_SCRIBBLE_ACK, 1, x->pi.qpn ^ 1), 0);
	tp_expect_no_wc(x->ep.scq, 50, "an ACK from a QP that is not the peer");
	assert_int_equal(tp_scribble(&x->peer, x->li.qpn, TP_SCRIBBLE_ACK, 1000, x->pi.qpn), 0);
	tp_expect_no_wc(x->ep.scq, 50, "an ACK of messages never sent");
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 7, &(struct tp_sge){ 0, 64 }, 1), 0);
	tp_expect_wc(x->ep.scq, 3, IBV_WC_SUCCESS, W, NULL);
	tp_expect_peer_wc(&x->peer, false, 7, IBV_WC_SUCCESS, &wc);
	tp_expect_eq(tu_query_state(x->ep.qp[x->lq]), IBV_QPS_RTS, "state",
		     "after forged acknowledgements");
	tp_pair_stop(x);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, tp_pair_setup, tp_pair_teardown)
		T(test_local_protection_errors),
		T(test_receive_with_bad_lkey),
		T(test_remote_access_errors),
		T(test_remote_access_needs_the_mr_right),
		T(test_receive_too_small),
		T(test_error_flushes_everything_outstanding),
		T(test_nothing_executes_after_a_failed_write),
		T(test_peer_killed),
		T(test_roce_peer_killed),
		T(test_rogue_peer_writes_garbage_into_our_fifo),
		T(test_rogue_peer_forges_acknowledgements),
		T(test_peer_destroys_its_qp),
		T(test_peer_leaves_as_its_receive_completes),
		T(test_rc_to_nonexistent_qpn),
		T(test_mr_deregistered_while_peer_writes),
		T(test_registered_memory_unmapped_by_its_owner),
		T(test_atomic_on_deregistered_mr),
#undef T
	};

	tp_main(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
