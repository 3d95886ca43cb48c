/*
 * The RC data path between two processes, black-box: this process and an agent
 * (sv_test_peer.h) each own a QP, connected; every byte that moves is checked.
 *
 * What is asserted (rdma-core ibv_post_send(3), ibv_poll_cq(3), ibv_req_notify_cq(3),
 * ibv_modify_srq(3); IBA vol 1 ch. 9-11):
 * - SEND, SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM and RDMA_READ of 0, 1, 4095,
 *   4096, 8192, 8193, 32768, 32769, 64 KiB and 1 MiB (the shm wire copies SENDs up to
 *   32 KiB through the ring and lets the responder pull larger ones; the bounce copy moves
 *   data in 8 KiB pieces) place exactly those bytes, nothing around
 *   them, and complete with every field of the work completion right: wr_id, status,
 *   opcode, byte_len (receives; RDMA READ and atomics at the requester), imm_data and
 *   IBV_WC_WITH_IMM, qp_num, src_qp, slid.
 * - Scatter/gather on both sides, inline data (the buffer is the caller's again when
 *   ibv_post_send returns), chains (in order; *bad_wr and nothing after it), selective
 *   signaling and sq_sig_all, IBV_SEND_FENCE.
 * - Atomics: compare-and-swap that hits and misses, fetch-and-add return values, and many
 *   fetch-and-adds from two processes on one counter: none lost.
 * - One-sided progress: the agent sits in read() on its socket, calling nothing in the
 *   library, while READ, WRITE and atomics on its memory complete.
 * - A busy poller moves its QP itself: the library's threads are not woken per answer.
 * - Solicited events, the SRQ limit event, RNR: wait then success, and retries exhausted.
 * - A child forked while the library's progress thread is busy can use the library.
 */
#include "verbs/sv_test_peer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define BUF_LEN (4u << 20)
#define W TP_WAIT_MS

/* 32768 is the largest SEND carried in the ring, 32769 the smallest pulled; 8192/8193
 * straddle one bounce-copy piece. */
static const uint32_t sizes[] = { 0, 1, 4095, 4096, 8192, 8193, 32768, 32769, 65536, 1u << 20 };

static const struct tp_qp_opts rc_opts = { .type = IBV_QPT_RC };

/* Guards: seeds of the bytes around a target, which must survive. */
enum { GUARD_LO = 7001, GUARD_HI = 7002, GUARD_LEN = 16 };

static struct tp_pair *rc_pair(void **state)
{
	struct tp_pair *x = *state;

	tp_pair_open(x, BUF_LEN, &rc_opts, NULL);
	tp_pair_connect(x);
	return x;
}

/* The agent's bytes [@off - 5, @off) and [@off + @len, +GUARD_LEN) get guard patterns. */
static void guard_peer(struct tp_pair *x, uint32_t off, uint32_t len)
{
	tp_fill_peer(&x->peer, off - 5, 5, GUARD_LO, 0);
	tp_fill_peer(&x->peer, off + len, GUARD_LEN, GUARD_HI, 0);
}

static void check_guards_peer(struct tp_pair *x, uint32_t off, uint32_t len, const char *what)
{
	char m[160];

	snprintf(m, sizeof(m), "%s: the bytes before the target", what);
	tp_check_peer(&x->peer, off - 5, 5, GUARD_LO, 0, m);
	snprintf(m, sizeof(m), "%s: the bytes after the target", what);
	tp_check_peer(&x->peer, off + len, GUARD_LEN, GUARD_HI, 0, m);
}

static void guard_local(struct tp_pair *x, uint32_t off, uint32_t len)
{
	tp_fill(x->ep.buf + off - 3, 3, GUARD_LO, 0);
	tp_fill(x->ep.buf + off + len, GUARD_LEN, GUARD_HI, 0);
}

static void check_guards_local(struct tp_pair *x, uint32_t off, uint32_t len, const char *what)
{
	char m[160];

	snprintf(m, sizeof(m), "%s: the bytes before the target", what);
	tp_assert_pattern(x->ep.buf + off - 3, 3, GUARD_LO, 0, m);
	snprintf(m, sizeof(m), "%s: the bytes after the target", what);
	tp_assert_pattern(x->ep.buf + off + len, GUARD_LEN, GUARD_HI, 0, m);
}

/* A receive completion at the agent for a message from our QP: every field (tp_check_wc;
 * src_qp and slid: our QP's, pkey_index the agent QP's, sl and dlid_path_bits 0, wc_flags
 * exactly IBV_WC_WITH_IMM or nothing). */
static void check_recv_wc(const struct tp_pair *x, const struct ibv_wc *wc,
			  enum ibv_wc_opcode opcode, uint32_t byte_len, bool imm, uint32_t imm_data,
			  const char *what)
{
	struct tp_wc_expect e = tp_recv_expect(wc->wr_id, &x->pi, &x->li, opcode, byte_len);

	e.pkey_index = x->pc.pkey_index;
	if (imm) {
		e.wc_flags = IBV_WC_WITH_IMM;
		e.imm_data = imm_data;
	}
	tp_check_wc(wc, &e, what);
}

/* The same at our QP for a message from the agent's. */
static void check_local_recv_wc(const struct tp_pair *x, const struct ibv_wc *wc,
				enum ibv_wc_opcode opcode, uint32_t byte_len, const char *what)
{
	struct tp_wc_expect e = tp_recv_expect(wc->wr_id, &x->li, &x->pi, opcode, byte_len);

	e.pkey_index = x->lc.pkey_index;
	tp_check_wc(wc, &e, what);
}

/* A send-queue completion of our QP: what TP_WCE_SEND defines (for an error status,
 * qp_num and vendor_err only; the opcode is undefined then). RDMA READ and atomics:
 * byte_len as well, which the caller gives in @byte_len. */
static void check_send_wc_len(const struct tp_pair *x, const struct ibv_wc *wc,
			      enum ibv_wc_opcode opcode, uint32_t byte_len, const char *what)
{
	struct tp_wc_expect e = tp_send_expect(wc->wr_id, x->li.qpn, opcode, byte_len);

	e.status = wc->status;
	tp_check_wc(wc, &e, what);
}

static void check_send_wc(const struct tp_pair *x, const struct ibv_wc *wc,
			  enum ibv_wc_opcode opcode, const char *what)
{
	struct tp_wc_expect e = tp_send_expect(wc->wr_id, x->li.qpn, opcode, 0);

	e.check &= ~(unsigned int)TP_WCE_BYTE_LEN; /* the caller checks it where defined */
	e.status = wc->status;
	tp_check_wc(wc, &e, what);
}

/* ---- every operation at every size -------------------------------------------------- */

static void test_send_every_size(void **state)
{
	struct tp_pair *x = rc_pair(state);

	for (unsigned int k = 0; k < 2 * ARRAY_LEN(sizes); k++) {
		uint32_t len = sizes[k / 2], seed = 100 + k, room = len + 7;
		bool imm = k % 2 && !tu_wire_iwarp(); /* iWARP: no Send with Immediate */
		struct tp_wr w = tp_wr1(k, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, 3, len);
		struct tp_sge rs = { 5, room };
		struct ibv_wc wc;
		char what[64];

		snprintf(what, sizeof(what), "%s of %u bytes", imm ? "SEND_WITH_IMM" : "SEND", len);
		w.imm = htonl(0xab000000u | k);
		tp_fill(x->ep.buf + 3, len, seed, 0);
		guard_peer(x, 5, len); /* the 7 bytes of room left over are guarded too */
		assert_int_equal(tp_post_recv(&x->peer, x->pq, 500 + k, &rs, 1), 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, &wc);
		check_send_wc(x, &wc, IBV_WC_SEND, what);
		tp_expect_peer_wc(&x->peer, false, 500 + k, IBV_WC_SUCCESS, &wc);
		check_recv_wc(x, &wc, IBV_WC_RECV, len, imm, w.imm, what);
		tp_check_peer(&x->peer, 5, len, seed, 0, what);
		check_guards_peer(x, 5, len, what);
	}
	tp_pair_stop(x);
}

static void test_write_every_size(void **state)
{
	struct tp_pair *x = rc_pair(state);

	for (unsigned int k = 0; k < ARRAY_LEN(sizes); k++) {
		uint32_t len = sizes[k], seed = 200 + k;
		struct tp_wr w = tp_wr1(k, IBV_WR_RDMA_WRITE, 3, len);
		struct ibv_wc wc;
		char what[64];

		snprintf(what, sizeof(what), "RDMA_WRITE of %u bytes", len);
		w.remote_addr = x->pi.addr + 5;
		w.rkey = x->pi.rkey;
		tp_fill(x->ep.buf + 3, len, seed, 0);
		guard_peer(x, 5, len);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, &wc);
		check_send_wc(x, &wc, IBV_WC_RDMA_WRITE, what);
		tp_check_peer(&x->peer, 5, len, seed, 0, what);
		check_guards_peer(x, 5, len, what);
	}
	/* A write consumes no receive: none completes at the target. */
	assert_int_equal(tp_poll(&x->peer, false, 1, 0, (struct ibv_wc[1]){ { 0 } }), 0);
	tp_pair_stop(x);
}

static void test_write_with_imm_every_size(void **state)
{
	struct tp_pair *x = rc_pair(state);

	for (unsigned int k = 0; k < ARRAY_LEN(sizes); k++) {
		uint32_t len = sizes[k], seed = 300 + k;
		struct tp_wr w = tp_wr1(k, IBV_WR_RDMA_WRITE_WITH_IMM, 3, len);
		struct ibv_wc wc;
		char what[64];

		snprintf(what, sizeof(what), "RDMA_WRITE_WITH_IMM of %u bytes", len);
		w.remote_addr = x->pi.addr + 5;
		w.rkey = x->pi.rkey;
		w.imm = htonl(0x5a5a0000u | k);
		tp_fill(x->ep.buf + 3, len, seed, 0);
		guard_peer(x, 5, len);
		/* The immediate consumes a receive; it needs no scatter list. */
		assert_int_equal(tp_post_recv(&x->peer, x->pq, 600 + k, NULL, 0), 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, &wc);
		check_send_wc(x, &wc, IBV_WC_RDMA_WRITE, what);
		tp_expect_peer_wc(&x->peer, false, 600 + k, IBV_WC_SUCCESS, &wc);
		check_recv_wc(x, &wc, IBV_WC_RECV_RDMA_WITH_IMM, len, true, w.imm, what);
		tp_check_peer(&x->peer, 5, len, seed, 0, what);
		check_guards_peer(x, 5, len, what);
	}
	tp_pair_stop(x);
}

static void test_read_every_size(void **state)
{
	struct tp_pair *x = rc_pair(state);

	for (unsigned int k = 0; k < ARRAY_LEN(sizes); k++) {
		uint32_t len = sizes[k], seed = 400 + k;
		struct tp_wr w = tp_wr1(k, IBV_WR_RDMA_READ, 3, len);
		struct ibv_wc wc;
		char what[64];

		snprintf(what, sizeof(what), "RDMA_READ of %u bytes", len);
		w.remote_addr = x->pi.addr + 5;
		w.rkey = x->pi.rkey;
		tp_fill_peer(&x->peer, 5, len, seed, 0);
		guard_local(x, 3, len);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, &wc);
		/* ibv_poll_cq(3): byte_len is relevant in the send queue for RDMA Read. */
		check_send_wc_len(x, &wc, IBV_WC_RDMA_READ, len, what);
		tp_assert_pattern(x->ep.buf + 3, len, seed, 0, what);
		check_guards_local(x, 3, len, what);
	}
	tp_pair_stop(x);
}

/*
 * The agent is blocked in read() on its socket for the whole of this test's data
 * transfers: READ, WRITE, compare-and-swap and fetch-and-add on its memory complete with
 * no call into the library from the target process.
 */
static void test_one_sided_while_target_blocked_in_read(void **state)
{
	struct tp_pair *x = rc_pair(state);
	const uint32_t big = 1u << 20;
	uint64_t init = 0x1000, val;
	struct tp_wr w[4];
	struct ibv_wc wc;

	tp_fill_peer(&x->peer, 0, big, 41, 0);
	tp_poke(&x->peer, 2 * big, &init, 8);
	/* From here until the checks below, the agent only waits in read(). */
	w[0] = tp_wr1(0, IBV_WR_RDMA_READ, 0, big);
	w[0].remote_addr = x->pi.addr;
	w[1] = tp_wr1(1, IBV_WR_RDMA_WRITE, big, 65536);
	w[1].remote_addr = x->pi.addr + big;
	w[2] = tp_wr1(2, IBV_WR_ATOMIC_CMP_AND_SWP, 2 * big, 8);
	w[2].remote_addr = x->pi.addr + 2 * big;
	w[2].compare_add = 0x1000;
	w[2].swap = 0x2000;
	w[3] = tp_wr1(3, IBV_WR_ATOMIC_FETCH_AND_ADD, 2 * big + 8, 8);
	w[3].remote_addr = x->pi.addr + 2 * big;
	w[3].compare_add = 0x22;
	for (int i = 0; i < 4; i++)
		w[i].rkey = x->pi.rkey;
	tp_fill(x->ep.buf + big, 65536, 42, 0);
	for (int i = 0; i < 4; i++) {
		/* One at a time: each completes on its own, the agent still in read(). */
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w[i], 1, NULL), 0);
		tp_expect_wc(x->ep.scq, (uint64_t)i, IBV_WC_SUCCESS, W, &wc);
	}
	tp_assert_pattern(x->ep.buf, big, 41, 0, "RDMA_READ from a target blocked in read()");
	memcpy(&val, x->ep.buf + 2 * big, 8);
	tp_expect_eq((long long)val, 0x1000, "compare-and-swap's original value", "one-sided CAS");
	memcpy(&val, x->ep.buf + 2 * big + 8, 8);
	tp_expect_eq((long long)val, 0x2000, "fetch-and-add's original value", "one-sided FAA");
	/* The agent wakes up: what it finds in its memory. */
	tp_check_peer(&x->peer, big, 65536, 42, 0, "RDMA_WRITE to a target blocked in read()");
	tp_peek(&x->peer, 2 * big, &val, 8);
	tp_expect_eq((long long)val, 0x2022, "the counter", "CAS then FAA at a target in read()");
	tp_pair_stop(x);
}

/* ---- scatter/gather, inline ---------------------------------------------------------- */

/* Sends a message gathered from @n local pieces into the agent's @rn receive pieces. */
static void send_sg(struct tp_pair *x, uint32_t seed, const struct tp_sge *s, int n,
		    const struct tp_sge *r, int rn, const char *what)
{
	struct tp_wr w = tp_wr1(seed, IBV_WR_SEND, 0, 0);
	uint32_t total = 0, at = 0;
	struct ibv_wc wc;

	w.nsge = (uint32_t)n;
	for (int i = 0; i < n; i++) {
		w.sge[i] = s[i];
		tp_fill(x->ep.buf + s[i].off, s[i].len, seed, total);
		total += s[i].len;
	}
	for (int i = 0; i < rn; i++)
		tp_fill_peer(&x->peer, r[i].off, r[i].len, GUARD_HI, 0);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, seed, r, rn), 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, seed, IBV_WC_SUCCESS, W, NULL);
	tp_expect_peer_wc(&x->peer, false, seed, IBV_WC_SUCCESS, &wc);
	check_recv_wc(x, &wc, IBV_WC_RECV, total, false, 0, what);
	/* The message fills the receive pieces in order; what is left keeps its guard. */
	for (int i = 0; i < rn; i++) {
		uint32_t used = total - at < r[i].len ? total - at : r[i].len;

		tp_check_peer(&x->peer, r[i].off, used, seed, at, what);
		tp_check_peer(&x->peer, r[i].off + used, r[i].len - used, GUARD_HI, used, what);
		at += used;
	}
}

static void test_scatter_gather_both_sides(void **state)
{
	struct tp_pair *x = *state;
	const struct tp_qp_opts o = { .type = IBV_QPT_RC, .max_sge = 5 };
	/* Receive pieces: 3000 + 1 + 0 + 5000 + 2000 bytes of room. */
	const struct tp_sge r[] = { { 0, 3000 }, { 5000, 1 }, { 6000, 0 }, { 8000, 5000 },
				    { 16000, 2000 } };
	/* 1007 bytes: through the ring. */
	const struct tp_sge small[] = { { 10, 7 }, { 100, 100 }, { 20000, 900 } };
	/* 9096 bytes: pulled by the responder. */
	const struct tp_sge large[] = { { 10, 1 }, { 100, 4095 }, { 20000, 5000 } };
	/* 10001 bytes of room: exactly the 5 pieces of r. */
	const struct tp_sge exact[] = { { 10, 1 }, { 100, 4095 }, { 20000, 5905 } };
	const struct tp_sge pieces[] = { { 70000, 1 }, { 80001, 4095 }, { 90000, 0 },
					 { 100000, 3000 } };
	uint64_t remote;
	struct tp_wr w;

	tp_pair_open(x, BUF_LEN, &o, NULL);
	tp_pair_connect(x);
	remote = x->pi.addr + 200000;
	send_sg(x, 1, small, 3, r, 5, "SEND 3 pieces (1007 bytes) into 5");
	send_sg(x, 2, large, 3, r, 5, "SEND 3 pieces (9096 bytes) into 5");
	send_sg(x, 3, r, 5, exact, 3, "SEND 5 pieces (10001 bytes) into 3 of exactly that room");

	/* RDMA WRITE gathers, RDMA READ scatters. */
	w = tp_wr1(10, IBV_WR_RDMA_WRITE, 0, 0);
	w.nsge = 4;
	memcpy(w.sge, pieces, sizeof(pieces));
	w.remote_addr = remote;
	w.rkey = x->pi.rkey;
	for (uint32_t i = 0, at = 0; i < 4; at += pieces[i].len, i++)
		tp_fill(x->ep.buf + pieces[i].off, pieces[i].len, 10, at);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 10, IBV_WC_SUCCESS, W, NULL);
	tp_check_peer(&x->peer, 200000, 7096, 10, 0, "RDMA_WRITE gathered from 4 pieces");

	tp_fill_peer(&x->peer, 300000, 7096, 11, 0);
	memset(x->ep.buf + 70000, 0, 40000);
	w.wr_id = 11;
	w.opcode = IBV_WR_RDMA_READ;
	w.remote_addr = x->pi.addr + 300000;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 11, IBV_WC_SUCCESS, W, NULL);
	for (uint32_t i = 0, at = 0; i < 4; at += pieces[i].len, i++)
		tp_assert_pattern(x->ep.buf + pieces[i].off, pieces[i].len, 11, at,
				  "RDMA_READ scattered into 4 pieces");
	tp_pair_stop(x);
}

/* Inline data is copied at post time: the buffer, not registered at all, is overwritten
 * as soon as ibv_post_send returns. */
static void test_inline_from_unregistered_memory(void **state)
{
	struct tp_pair *x = rc_pair(state);
	const uint32_t lens[] = { 0, 1, 64, 256 };
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	unsigned char *src = malloc(512);

	assert_non_null(src);
	assert_int_equal(ibv_query_qp(x->ep.qp[x->lq], &qa, IBV_QP_CAP, &qia), 0);
	assert_true(qa.cap.max_inline_data >= 256);
	for (unsigned int k = 0; k < ARRAY_LEN(lens); k++) {
		struct ibv_sge sge[2] = { { (uintptr_t)src, lens[k] / 2, 0 },
					  { (uintptr_t)src + 300, lens[k] - lens[k] / 2, 0 } };
		struct ibv_send_wr wr = { .wr_id = k, .sg_list = sge, .num_sge = 2,
					  .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED },
				   *bad = NULL;
		struct tp_sge rs = { 0, 4096 };
		struct ibv_wc wc;
		char what[64];

		snprintf(what, sizeof(what), "inline SEND of %u bytes in 2 pieces", lens[k]);
		tp_fill(src, sge[0].length, 500 + k, 0);
		tp_fill(src + 300, sge[1].length, 500 + k, sge[0].length);
		assert_int_equal(tp_post_recv(&x->peer, x->pq, k, &rs, 1), 0);
		assert_int_equal(ibv_post_send(x->ep.qp[x->lq], &wr, &bad), 0);
		memset(src, 0xee, 512);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, NULL);
		tp_expect_peer_wc(&x->peer, false, k, IBV_WC_SUCCESS, &wc);
		check_recv_wc(x, &wc, IBV_WC_RECV, lens[k], false, 0, what);
		tp_check_peer(&x->peer, 0, lens[k], 500 + k, 0, what);
	}
	{
		struct ibv_sge sge = { (uintptr_t)src, 200, 0 };
		struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED },
				   *bad = NULL;

		wr.wr.rdma.remote_addr = x->pi.addr + 8192;
		wr.wr.rdma.rkey = x->pi.rkey;
		tp_fill(src, 200, 509, 0);
		assert_int_equal(ibv_post_send(x->ep.qp[x->lq], &wr, &bad), 0);
		memset(src, 0xee, 512);
		tp_expect_wc(x->ep.scq, 9, IBV_WC_SUCCESS, W, NULL);
		tp_check_peer(&x->peer, 8192, 200, 509, 0, "inline RDMA_WRITE of 200 bytes");
	}
	free(src);
	tp_pair_stop(x);
}

/* ---- chains and signaling ------------------------------------------------------------ */

/* ibv_post_send(3): on failure *bad_wr is the first WR not posted; those before it were
 * posted and execute, those after it were not. */
static void test_chain_stops_at_bad_wr(void **state)
{
	struct tp_pair *x = rc_pair(state);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	struct tp_wr w[4];
	struct ibv_wc wc;
	int bad = -1;

	assert_int_equal(ibv_query_qp(x->ep.qp[x->lq], &qa, IBV_QP_CAP, &qia), 0);
	assert_true(qa.cap.max_send_sge < TP_MAX_SGE);
	for (int i = 0; i < 4; i++) {
		w[i] = tp_wr1(i, IBV_WR_SEND, (uint32_t)i * 4096, 100);
		tp_fill(x->ep.buf + i * 4096, 100, 600 + (uint32_t)i, 0);
		assert_int_equal(tp_post_recv(&x->peer, x->pq, 10 + (uint64_t)i,
					      &(struct tp_sge){ (uint32_t)i * 4096, 4096 }, 1),
				 0);
	}
	w[2].nsge = qa.cap.max_send_sge + 1; /* more SGEs than the QP has */
	for (uint32_t k = 1; k < w[2].nsge; k++)
		w[2].sge[k] = w[2].sge[0];
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 4, &bad), EINVAL);
	assert_int_equal(bad, 2);
	tp_expect_wc(x->ep.scq, 0, IBV_WC_SUCCESS, W, NULL);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	/* A marker: if WR 3 had been posted, it would complete before the marker and land in
	 * the agent's third receive. */
	w[3].wr_id = 99;
	tp_fill(x->ep.buf + 3 * 4096, 100, 699, 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w[3], 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 99, IBV_WC_SUCCESS, W, NULL);
	for (int i = 0; i < 3; i++) {
		tp_expect_peer_wc(&x->peer, false, 10 + (uint64_t)i, IBV_WC_SUCCESS, &wc);
		check_recv_wc(x, &wc, IBV_WC_RECV, 100, false, 0, "chain with a bad WR");
	}
	tp_check_peer(&x->peer, 0, 100, 600, 0, "WR 0 of the chain");
	tp_check_peer(&x->peer, 4096, 100, 601, 0, "WR 1 of the chain");
	tp_check_peer(&x->peer, 8192, 100, 699, 0, "the marker after the bad WR");

	/* A bad first WR posts nothing. */
	w[0].nsge = qa.cap.max_send_sge + 1;
	for (uint32_t k = 1; k < w[0].nsge; k++)
		w[0].sge[k] = w[0].sge[0];
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 2, &bad), EINVAL);
	assert_int_equal(bad, 0);
	tp_expect_no_wc(x->ep.scq, 50, "a chain whose first WR is bad");
	tp_pair_stop(x);
}

/* One chain of every operation: completions come in posting order, each with its opcode. */
static void test_chain_of_every_operation_completes_in_order(void **state)
{
	struct tp_pair *x = rc_pair(state);
	const uint64_t ctr = 0x100000, init = 1000;
	struct tp_wr w[8];
	static const enum ibv_wc_opcode op[8] = {
		IBV_WC_RDMA_WRITE, IBV_WC_SEND,      IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ,
		IBV_WC_FETCH_ADD,  IBV_WC_COMP_SWAP, IBV_WC_SEND,       IBV_WC_RDMA_WRITE,
	};
	struct ibv_wc wc[8];
	uint64_t v;

	tp_poke(&x->peer, ctr, &init, 8);
	tp_fill_peer(&x->peer, 0x40000, 20000, 14, 0);
	w[0] = tp_wr1(0, IBV_WR_RDMA_WRITE, 0x1000, 3000);
	w[0].remote_addr = x->pi.addr + 0x1000;
	w[1] = tp_wr1(1, IBV_WR_SEND, 0x2000, 5000);
	w[2] = tp_wr1(2, IBV_WR_RDMA_WRITE_WITH_IMM, 0x10000, 10000);
	w[2].remote_addr = x->pi.addr + 0x10000;
	w[2].imm = htonl(0x1234);
	w[3] = tp_wr1(3, IBV_WR_RDMA_READ, 0x40000, 20000);
	w[3].remote_addr = x->pi.addr + 0x40000;
	w[4] = tp_wr1(4, IBV_WR_ATOMIC_FETCH_AND_ADD, 0x80000, 8);
	w[4].remote_addr = x->pi.addr + ctr;
	w[4].compare_add = 7;
	w[5] = tp_wr1(5, IBV_WR_ATOMIC_CMP_AND_SWP, 0x80008, 8);
	w[5].remote_addr = x->pi.addr + ctr;
	w[5].compare_add = init + 7;
	w[5].swap = 5;
	/* (iWARP has no Send with Immediate: a plain SEND there) */
	w[6] = tp_wr1(6, tu_wire_iwarp() ? IBV_WR_SEND : IBV_WR_SEND_WITH_IMM, 0x5000, 10);
	w[6].imm = htonl(0x5678);
	w[7] = tp_wr1(7, IBV_WR_RDMA_WRITE, 0x6000, 1);
	w[7].remote_addr = x->pi.addr + 0x90000;
	for (int i = 0; i < 8; i++) {
		w[i].rkey = x->pi.rkey;
		if (w[i].opcode != IBV_WR_RDMA_READ && w[i].nsge && w[i].sge[0].len > 8)
			tp_fill(x->ep.buf + w[i].sge[0].off, w[i].sge[0].len, 10 + (uint32_t)i, 0);
	}
	tp_fill(x->ep.buf + 0x6000, 1, 17, 0);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 1, &(struct tp_sge){ 0x20000, 8192 }, 1), 0);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 2, NULL, 0), 0);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 6, &(struct tp_sge){ 0x30000, 64 }, 1), 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 8, NULL), 0);
	tp_poll_exact(x->ep.scq, 8, wc, W, "a chain of 8");
	for (int i = 0; i < 8; i++) {
		char what[48];

		snprintf(what, sizeof(what), "completion %d of the chain", i);
		tp_expect_eq((long long)wc[i].wr_id, i, "wr_id (posting order)", what);
		tp_expect_eq(wc[i].status, IBV_WC_SUCCESS, "status", what);
		check_send_wc(x, &wc[i], op[i], what);
	}
	tp_expect_eq(wc[3].byte_len, 20000, "byte_len", "RDMA_READ in the chain");
	tp_expect_eq(wc[4].byte_len, 8, "byte_len", "FETCH_ADD in the chain");
	tp_expect_eq(wc[5].byte_len, 8, "byte_len", "COMP_SWAP in the chain");
	assert_int_equal(tp_poll(&x->peer, false, 3, W, wc), 3);
	assert_int_equal(tp_poll(&x->peer, false, 1, 0, &wc[3]), 0);
	tp_expect_eq((long long)wc[0].wr_id, 1, "wr_id", "first receive");
	check_recv_wc(x, &wc[0], IBV_WC_RECV, 5000, false, 0, "the chain's SEND");
	tp_expect_eq((long long)wc[1].wr_id, 2, "wr_id", "second receive");
	check_recv_wc(x, &wc[1], IBV_WC_RECV_RDMA_WITH_IMM, 10000, true, htonl(0x1234),
		      "the chain's RDMA_WRITE_WITH_IMM");
	tp_expect_eq((long long)wc[2].wr_id, 6, "wr_id", "third receive");
	check_recv_wc(x, &wc[2], IBV_WC_RECV, 10, !tu_wire_iwarp(), htonl(0x5678),
		      "the chain's SEND_WITH_IMM");
	tp_check_peer(&x->peer, 0x1000, 3000, 10, 0, "the chain's RDMA_WRITE");
	tp_check_peer(&x->peer, 0x20000, 5000, 11, 0, "the chain's SEND");
	tp_check_peer(&x->peer, 0x10000, 10000, 12, 0, "the chain's RDMA_WRITE_WITH_IMM");
	tp_assert_pattern(x->ep.buf + 0x40000, 20000, 14, 0, "the chain's RDMA_READ");
	tp_check_peer(&x->peer, 0x30000, 10, 16, 0, "the chain's SEND_WITH_IMM");
	tp_check_peer(&x->peer, 0x90000, 1, 17, 0, "the chain's 1-byte RDMA_WRITE");
	memcpy(&v, x->ep.buf + 0x80000, 8);
	tp_expect_eq((long long)v, (long long)init, "original value", "the chain's FETCH_ADD");
	memcpy(&v, x->ep.buf + 0x80008, 8);
	tp_expect_eq((long long)v, (long long)init + 7, "original value", "the chain's COMP_SWAP");
	tp_peek(&x->peer, ctr, &v, 8);
	tp_expect_eq((long long)v, 5, "the counter", "after the chain's FETCH_ADD and COMP_SWAP");
	tp_pair_stop(x);
}

/* Unsignaled WRs complete silently; a signaled one after them reports, and frees their
 * slots (a send queue of 16 is refilled 4 times). */
static void test_unsignaled_then_signaled(void **state)
{
	struct tp_pair *x = *state;
	const struct tp_qp_opts o = { .type = IBV_QPT_RC, .max_wr = 16 };
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	uint32_t depth;

	tp_pair_open(x, BUF_LEN, &o, NULL);
	tp_pair_connect(x);
	assert_int_equal(ibv_query_qp(x->ep.qp[x->lq], &qa, IBV_QP_CAP, &qia), 0);
	depth = qa.cap.max_send_wr;
	assert_true(depth >= 16 && depth <= 64);
	for (uint32_t round = 0; round < 4; round++) {
		struct tp_wr w;
		struct ibv_wc wc;
		char what[64];

		snprintf(what, sizeof(what), "round %u: %u unsignaled writes", round, depth - 1);
		for (uint32_t i = 0; i + 1 < depth; i++) {
			uint32_t seed = round * 100 + i;

			w = tp_wr1(1000 + i, IBV_WR_RDMA_WRITE, i * 1024, 1000);
			w.send_flags = 0;
			w.remote_addr = x->pi.addr + i * 1024;
			w.rkey = x->pi.rkey;
			tp_fill(x->ep.buf + i * 1024, 1000, seed, 0);
			assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		}
		tp_fill(x->ep.buf + 0x100000, 64, 9000 + round, 0);
		assert_int_equal(tp_post_recv(&x->peer, x->pq, round,
					      &(struct tp_sge){ 0x100000, 64 }, 1),
				 0);
		w = tp_wr1(round, IBV_WR_SEND, 0x100000, 64);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, round, IBV_WC_SUCCESS, W, &wc);
		tp_expect_no_wc(x->ep.scq, 20, what);
		/* RC: the writes are in the target's memory when the SEND after them is. */
		tp_expect_peer_wc(&x->peer, false, round, IBV_WC_SUCCESS, &wc);
		check_recv_wc(x, &wc, IBV_WC_RECV, 64, false, 0, what);
		for (uint32_t i = 0; i + 1 < depth; i++)
			tp_check_peer(&x->peer, i * 1024, 1000, round * 100 + i, 0, what);
	}
	tp_pair_stop(x);
}

/*
 * An application that changes a buffer while RDMA WRITEs from it are out (UCX's
 * ucp_put_bw does): the target gets old or new bytes, as from a NIC, and the connection
 * lives on. Over iWARP with CRC32c the CRC must cover the bytes that go: made at queue
 * time over the application's buffer, read again when TCP took them, the peer found a
 * bad CRC and ended the connection. Rounds of WRITEs of 64 KiB from one buffer, the
 * buffer rewritten after each post, then a SEND; afterwards a WRITE of known bytes lands
 * whole.
 */
static void test_buffer_changed_under_writes(void **state)
{
	struct tp_pair *x = rc_pair(state);
	const uint32_t len = 65536;
	struct ibv_wc wc;
	struct tp_wr w;

	for (uint32_t round = 0; round < 24; round++) {
		for (uint32_t i = 0; i < 24; i++) {
			w = tp_wr1(1000 + i, IBV_WR_RDMA_WRITE, 0, len);
			w.send_flags = 0;
			w.remote_addr = x->pi.addr + (i % 8) * len;
			w.rkey = x->pi.rkey;
			assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
			memset(x->ep.buf, (int)(round * 24 + i), len); /* while it is out */
		}
		assert_int_equal(tp_post_recv(&x->peer, x->pq, round,
					      &(struct tp_sge){ 0x100000, 64 }, 1),
				 0);
		w = tp_wr1(round, IBV_WR_SEND, 0x100000, 64);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, round, IBV_WC_SUCCESS, W, &wc);
		tp_expect_peer_wc(&x->peer, false, round, IBV_WC_SUCCESS, &wc);
	}
	w = tp_wr1(7, IBV_WR_RDMA_WRITE, 0x200000, len);
	w.remote_addr = x->pi.addr + 0x200000;
	w.rkey = x->pi.rkey;
	tp_fill(x->ep.buf + 0x200000, len, 77, 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 7, IBV_WC_SUCCESS, W, &wc);
	tp_check_peer(&x->peer, 0x200000, len, 77, 0, "a WRITE after the changed buffers");
	tp_pair_stop(x);
}

/* sq_sig_all: every WR completes, whatever its flags say. */
static void test_sq_sig_all(void **state)
{
	struct tp_pair *x = *state;
	const struct tp_qp_opts o = { .type = IBV_QPT_RC, .sig_all = 1 };
	struct ibv_wc wc[3];

	tp_pair_open(x, BUF_LEN, &o, &rc_opts);
	tp_pair_connect(x);
	for (int i = 0; i < 3; i++) {
		struct tp_wr w = tp_wr1((uint64_t)i, IBV_WR_RDMA_WRITE, 0, 16);

		w.send_flags = 0;
		w.remote_addr = x->pi.addr;
		w.rkey = x->pi.rkey;
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	}
	tp_poll_exact(x->ep.scq, 3, wc, W, "sq_sig_all");
	for (int i = 0; i < 3; i++) {
		tp_expect_eq((long long)wc[i].wr_id, i, "wr_id", "sq_sig_all, unsignaled WR");
		tp_expect_eq(wc[i].status, IBV_WC_SUCCESS, "status", "sq_sig_all, unsignaled WR");
		check_send_wc(x, &wc[i], IBV_WC_RDMA_WRITE, "sq_sig_all, unsignaled WR");
	}
	tp_pair_stop(x);
}

/* ---- atomics -------------------------------------------------------------------------- */

/* One atomic: the original value it returns; the WC's fields are checked. */
static uint64_t atomic1(struct tp_pair *x, enum ibv_wr_opcode op, uint64_t off, uint64_t cmp_add,
			uint64_t swap, const char *what)
{
	static uint64_t id;
	struct tp_wr w = tp_wr1(++id, op, 0x8000, 8);
	struct ibv_wc wc;
	uint64_t v;

	w.remote_addr = x->pi.addr + off;
	w.rkey = x->pi.rkey;
	w.compare_add = cmp_add;
	w.swap = swap;
	memset(x->ep.buf + 0x8000, 0xcc, 8);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, id, IBV_WC_SUCCESS, W, &wc);
	check_send_wc_len(x, &wc,
			  op == IBV_WR_ATOMIC_CMP_AND_SWP ? IBV_WC_COMP_SWAP : IBV_WC_FETCH_ADD, 8,
			  what);
	memcpy(&v, x->ep.buf + 0x8000, 8);
	return v;
}

static uint64_t peer_u64(struct tp_pair *x, uint64_t off)
{
	uint64_t v;

	tp_peek(&x->peer, off, &v, 8);
	return v;
}

/*
 * A peer of another user: process_vm_* is refused from its side (it may not reach a
 * root process), allowed from ours. Each side picks its copy by probing, so the traffic
 * mixes both paths: SEND, RDMA WRITE, READ and an atomic each way, bytes checked.
 */
static void test_peer_of_another_user(void **state)
{
	struct tp_pair *x = *state;
	struct ibv_wc wc;
	struct tp_wr w;
	uint64_t v, one = 1;

	/* Runs as its own ctest entry (verbs_test_data_rc_other_user), which reports
	 * "Skipped" without root (main() exits 77); here only when a filter picks it. */
	if (getuid() != 0) {
		print_message("skipped: needs root to run the peer as another user\n");
		skip();
	}
	setenv("SV_TEST_AGENT_UID", "65534", 1);
	tp_pair_open(x, BUF_LEN, &rc_opts, NULL);
	unsetenv("SV_TEST_AGENT_UID");
	tp_pair_connect(x);
	/* Ours to theirs: SEND, WRITE, READ back, fetch-and-add. */
	tp_fill(x->ep.buf, 20000, 301, 0);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 1, &(struct tp_sge){ 0, 20000 }, 1), 0);
	w = tp_wr1(1, IBV_WR_SEND, 0, 20000);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	tp_expect_peer_wc(&x->peer, false, 1, IBV_WC_SUCCESS, &wc);
	check_recv_wc(x, &wc, IBV_WC_RECV, 20000, false, 0, "SEND to a peer of another user");
	tp_check_peer(&x->peer, 0, 20000, 301, 0, "SEND to a peer of another user");
	tp_fill(x->ep.buf + 32768, 30000, 302, 0);
	w = tp_wr1(2, IBV_WR_RDMA_WRITE, 32768, 30000);
	w.remote_addr = x->pi.addr + 65536;
	w.rkey = x->pi.rkey;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 2, IBV_WC_SUCCESS, W, NULL);
	tp_check_peer(&x->peer, 65536, 30000, 302, 0, "RDMA WRITE to a peer of another user");
	w = tp_wr1(3, IBV_WR_RDMA_READ, 131072, 30000);
	w.remote_addr = x->pi.addr + 65536;
	w.rkey = x->pi.rkey;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 3, IBV_WC_SUCCESS, W, NULL);
	tp_assert_pattern(x->ep.buf + 131072, 30000, 302, 0, "RDMA READ from a peer of another user");
	v = atomic1(x, IBV_WR_ATOMIC_FETCH_AND_ADD, 0x40000, 5, 0, "fetch-and-add, other user");
	tp_expect_eq((long long)v, 0, "original value", "fetch-and-add, other user");
	tp_expect_eq((long long)peer_u64(x, 0x40000), 5, "target", "fetch-and-add, other user");
	/* Theirs to ours (the bounce copy): SEND, WRITE, READ, fetch-and-add. */
	tp_fill_peer(&x->peer, 196608, 20000, 303, 0);
	assert_int_equal(tp_ep_post_recv(&x->ep, x->lq, 4, &(struct tp_sge){ 196608, 20000 }, 1),
			 0);
	w = tp_wr1(4, IBV_WR_SEND, 196608, 20000);
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 4, IBV_WC_SUCCESS, NULL);
	tp_expect_wc(x->ep.rcq, 4, IBV_WC_SUCCESS, W, &wc);
	check_local_recv_wc(x, &wc, IBV_WC_RECV, 20000, "SEND from a peer of another user");
	tp_assert_pattern(x->ep.buf + 196608, 20000, 303, 0, "SEND from a peer of another user");
	tp_fill_peer(&x->peer, 262144, 30000, 304, 0);
	w = tp_wr1(5, IBV_WR_RDMA_WRITE, 262144, 30000);
	w.remote_addr = x->li.addr + 327680;
	w.rkey = x->li.rkey;
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 5, IBV_WC_SUCCESS, NULL);
	tp_assert_pattern(x->ep.buf + 327680, 30000, 304, 0, "RDMA WRITE from a peer of another user");
	w = tp_wr1(6, IBV_WR_RDMA_READ, 393216, 30000);
	w.remote_addr = x->li.addr + 327680;
	w.rkey = x->li.rkey;
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 6, IBV_WC_SUCCESS, NULL);
	tp_check_peer(&x->peer, 393216, 30000, 304, 0, "RDMA READ by a peer of another user");
	memcpy(x->ep.buf + 0x50000, &one, 8);
	w = tp_wr1(7, IBV_WR_ATOMIC_FETCH_AND_ADD, 0x8000, 8);
	w.remote_addr = x->li.addr + 0x50000;
	w.rkey = x->li.rkey;
	w.compare_add = 41;
	assert_int_equal(tp_post_send(&x->peer, x->pq, &w, 1, NULL), 0);
	tp_expect_peer_wc(&x->peer, true, 7, IBV_WC_SUCCESS, NULL);
	memcpy(&v, x->ep.buf + 0x50000, 8);
	tp_expect_eq((long long)v, 42, "target", "fetch-and-add from a peer of another user");
	tp_pair_stop(x);
}

static void test_atomic_values(void **state)
{
	struct tp_pair *x = rc_pair(state);
	const uint64_t off = 0x100, a = 0x0123456789abcdefull, max = ~0ull - 1;
	uint64_t v;

	tp_poke(&x->peer, off, &a, 8);
	/* IBA 9.4.5: compare-and-swap returns the original value, swaps only on a match. */
	v = atomic1(x, IBV_WR_ATOMIC_CMP_AND_SWP, off, a, 0x1111, "CAS that matches");
	tp_expect_eq((long long)v, (long long)a, "original value", "CAS that matches");
	tp_expect_eq((long long)peer_u64(x, off), 0x1111, "target", "CAS that matches");
	v = atomic1(x, IBV_WR_ATOMIC_CMP_AND_SWP, off, 0x2222, 0x3333, "CAS that misses");
	tp_expect_eq((long long)v, 0x1111, "original value", "CAS that misses");
	tp_expect_eq((long long)peer_u64(x, off), 0x1111, "target", "CAS that misses");
	/* Fetch-and-add returns the value before the add; 64-bit arithmetic wraps. */
	v = atomic1(x, IBV_WR_ATOMIC_FETCH_AND_ADD, off, 5, 0, "FAA +5");
	tp_expect_eq((long long)v, 0x1111, "original value", "FAA +5");
	v = atomic1(x, IBV_WR_ATOMIC_FETCH_AND_ADD, off, ~0ull, 0, "FAA -1");
	tp_expect_eq((long long)v, 0x1116, "original value", "FAA -1");
	tp_expect_eq((long long)peer_u64(x, off), 0x1115, "target", "FAA +5 then -1");
	tp_poke(&x->peer, off + 8, &max, 8);
	v = atomic1(x, IBV_WR_ATOMIC_FETCH_AND_ADD, off + 8, 3, 0, "FAA across 2^64");
	tp_expect_eq((long long)v, (long long)max, "original value", "FAA across 2^64");
	tp_expect_eq((long long)peer_u64(x, off + 8), 1, "target", "FAA across 2^64");
	/* The neighbours of an 8-byte target are untouched. */
	tp_expect_eq((long long)peer_u64(x, off - 8), 0, "the word before", "atomics");
	tp_expect_eq((long long)peer_u64(x, off + 16), 0, "the word after", "atomics");
	tp_pair_stop(x);
}

struct faa_fx {
	struct tp_ep ep;
	struct tp_peer peer[2];
};

static int faa_setup(void **state)
{
	struct faa_fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	for (int i = 0; i < 2; i++)
		f->peer[i].sock = f->peer[i].pidfd = -1;
	*state = f;
	return 0;
}

static int faa_teardown(void **state)
{
	struct faa_fx *f = *state;
	int rc = 0;

	for (int i = 0; i < 2; i++)
		(void)tp_cleanup(&f->peer[i]); /* a kill here follows a failure, reported */
	rc |= tp_ep_close(&f->ep);
	free(f);
	return rc;
}

/*
 * Two processes, each through its own QP, add to one counter here: the low half counts
 * one's adds, the high half the other's. An update lost to a non-atomic read-modify-write
 * shows in the final value; each agent also checks that the values its adds returned
 * count up one by one in its half.
 */
static void test_atomics_from_two_processes_lose_nothing(void **state)
{
	struct faa_fx *f = *state;
	const uint32_t n = 3000;
	struct tp_info li[2], pi[2];
	struct tu_conn c;
	uint64_t v;

	tp_ep_open(&f->ep, 4096, 0);
	for (int i = 0; i < 2; i++) {
		const struct tp_qp_opts o = { .type = IBV_QPT_RC };
		int lq = tp_ep_create_qp(&f->ep, &o);

		tp_start(&f->peer[i]);
		tp_open(&f->peer[i], (size_t)n * 8, 0);
		assert_int_equal(tp_create_qp(&f->peer[i], &o), 0);
		tp_info(&f->peer[i], 0, &pi[i]);
		tp_ep_info(&f->ep, lq, &li[i]);
		tp_conn(&f->ep, &pi[i], &li[i], &c);
		assert_int_equal(tp_connect(&f->peer[i], 0, &c), 0);
		tp_conn(&f->ep, &li[i], &pi[i], &c);
		assert_int_equal(tu_qp_connect(f->ep.qp[lq], &c, IBV_QPS_RTS), 0);
	}
	/* Both run at once; this process only waits on the agents' sockets. */
	tp_faa_burst_start(&f->peer[0], 0, n, 1, li[0].addr, li[0].rkey, 16, 0);
	tp_faa_burst_start(&f->peer[1], 0, n, 1ull << 32, li[1].addr, li[1].rkey, 16, 32);
	tp_expect_eq(tp_faa_burst_result(&f->peer[0], 20000), 0, "adds out of sequence",
		  "agent adding 1");
	tp_expect_eq(tp_faa_burst_result(&f->peer[1], 20000), 0, "adds out of sequence",
		  "agent adding 2^32");
	memcpy(&v, f->ep.buf, 8);
	tp_expect_eq((long long)v, (long long)(n + ((uint64_t)n << 32)), "the counter",
		  "2 x 3000 fetch-and-adds from two processes");
	for (int i = 0; i < 2; i++)
		tp_stop(&f->peer[i]);
	assert_int_equal(tp_ep_close(&f->ep), 0);
}

/* IBA 10.8.3.3: a fenced WR starts after every earlier RDMA READ and atomic completed. */
static void test_fence_orders_after_read_and_atomic(void **state)
{
	struct tp_pair *x = rc_pair(state);
	const uint64_t ten = 10;
	struct tp_wr w[2];
	uint64_t v;

	/* READ, then a fenced WRITE over the same bytes: the READ sees the old ones. */
	tp_fill_peer(&x->peer, 0, 4096, 30, 0);
	tp_fill(x->ep.buf + 8192, 4096, 31, 0);
	w[0] = tp_wr1(0, IBV_WR_RDMA_READ, 0, 4096);
	w[1] = tp_wr1(1, IBV_WR_RDMA_WRITE, 8192, 4096);
	w[1].send_flags |= IBV_SEND_FENCE;
	for (int i = 0; i < 2; i++) {
		w[i].remote_addr = x->pi.addr;
		w[i].rkey = x->pi.rkey;
	}
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 2, NULL), 0);
	tp_expect_wc(x->ep.scq, 0, IBV_WC_SUCCESS, W, NULL);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	tp_assert_pattern(x->ep.buf, 4096, 30, 0, "READ before a fenced WRITE");
	tp_check_peer(&x->peer, 0, 4096, 31, 0, "the fenced WRITE");

	/* Fetch-and-add, then a fenced READ of the counter: the READ sees the sum. */
	tp_poke(&x->peer, 0x10000, &ten, 8);
	w[0] = tp_wr1(2, IBV_WR_ATOMIC_FETCH_AND_ADD, 0x10000, 8);
	w[0].compare_add = 5;
	w[1] = tp_wr1(3, IBV_WR_RDMA_READ, 0x10008, 8);
	w[1].send_flags |= IBV_SEND_FENCE;
	for (int i = 0; i < 2; i++) {
		w[i].remote_addr = x->pi.addr + 0x10000;
		w[i].rkey = x->pi.rkey;
	}
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 2, NULL), 0);
	tp_expect_wc(x->ep.scq, 2, IBV_WC_SUCCESS, W, NULL);
	tp_expect_wc(x->ep.scq, 3, IBV_WC_SUCCESS, W, NULL);
	memcpy(&v, x->ep.buf + 0x10008, 8);
	tp_expect_eq((long long)v, 15, "value read", "fenced READ after FAA +5 of 10");
	tp_pair_stop(x);
}

/* ---- a busy poller ----------------------------------------------------------------------- */

/* @field (voluntary_ctxt_switches, nonvoluntary_ctxt_switches) of a /proc status file. */
static long status_field(const char *path, const char *field)
{
	char line[128];
	size_t n = strlen(field);
	long v = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0; /* (a thread that ended) */
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && line[n] == ':')
			v = atol(line + n + 1);
	fclose(f);
	return v;
}

/* The voluntary context switches of this process's threads but the calling one (the
 * library's), from /proc/self/task. */
static long library_switches(void)
{
	char path[300];
	long total = 0, me = (long)syscall(SYS_gettid);
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	assert_non_null(d);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || atol(e->d_name) == me)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		total += status_field(path, "voluntary_ctxt_switches");
	}
	closedir(d);
	return total;
}

/* An application that busy-polls moves its QPs itself: the library's thread is not woken
 * for each answer that comes (a wake-up beside a spinning application takes the CPU it
 * needs; on RoCE it doubled the latency: a wake-up per READ, 2,000 for 2,000). 2,000
 * READs one at a time, each polled for: fewer than one wake-up for two of them (40–140
 * measured). Only where the application spins: preempted
 * often (other tests on the CPUs), it polls too little to be judged busy, and the library
 * rightly does the work itself; such a round is not judged. A loaded machine can also
 * stall the spin without preempting it (one CI run: 1,235 wake-ups, the poller preempted
 * fewer than 200 times): up to three rounds, and the best is judged, so that a library
 * that wakes for every answer fails every time and a passing burst of load does not. */
static void test_busy_poller_is_not_shadowed(void **state)
{
	struct tp_pair *x = rc_pair(state);
	const int n = 2000;
	struct tp_wr w = tp_wr1(0, IBV_WR_RDMA_READ, 0, 64);
	long best = -1, woken, preempted;
	int judged = 0;

	w.remote_addr = x->pi.addr;
	w.rkey = x->pi.rkey;
	tp_fill_peer(&x->peer, 0, 64, 77, 0);
	for (int i = 0; i < 200; i++) { /* the library sees the application spin */
		w.wr_id = (uint64_t)i;
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, w.wr_id, IBV_WC_SUCCESS, W, NULL);
	}
	for (int round = 0; round < 3 && (best < 0 || best >= n / 2); round++) {
		long before = library_switches();

		preempted = status_field("/proc/thread-self/status", "nonvoluntary_ctxt_switches");
		for (int i = 0; i < n; i++) {
			w.wr_id = (uint64_t)i;
			assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
			tp_expect_wc(x->ep.scq, w.wr_id, IBV_WC_SUCCESS, W, NULL);
		}
		woken = library_switches() - before;
		preempted = status_field("/proc/thread-self/status", "nonvoluntary_ctxt_switches") -
			    preempted;
#if defined(__SANITIZE_THREAD__)
		preempted = n; /* (ThreadSanitizer's slowdown: the application polls too little
				* to be judged busy, and the library rightly does the work) */
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
		preempted = n;
#endif
#endif
		if (preempted > n / 10) {
			printf("(round %d: the poller was preempted %ld times, or runs under "
			       "ThreadSanitizer: not judged)\n", round, preempted);
			continue;
		}
		judged++;
		if (best < 0 || woken < best)
			best = woken;
	}
	tp_assert_pattern(x->ep.buf, 64, 77, 0, "the READs");
	tp_pair_stop(x);
	if (!judged)
		skip();
	if (best >= n / 2)
		fail_msg("the library's threads were woken %ld times (the best of %d rounds) for %d "
			 "READs polled for", best, judged, n);
}

/* ---- events ---------------------------------------------------------------------------- */

/* ibv_req_notify_cq(3): armed solicited-only, the CQ raises an event for a completion of a
 * message with the solicited flag and for no other; an event disarms the CQ. */
static void test_solicited_only_event(void **state)
{
	struct tp_pair *x = rc_pair(state);
	struct ibv_wc wc;
	struct tp_wr w;

	for (int i = 0; i < 4; i++)
		assert_int_equal(tp_post_recv(&x->peer, x->pq, (uint64_t)i,
					      &(struct tp_sge){ (uint32_t)i * 256, 256 }, 1),
				 0);
	assert_int_equal(tp_arm_recv_cq(&x->peer, true), 0);

	w = tp_wr1(0, IBV_WR_SEND, 0, 32);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 0, IBV_WC_SUCCESS, W, NULL);
	tp_expect_peer_wc(&x->peer, false, 0, IBV_WC_SUCCESS, &wc);
	check_recv_wc(x, &wc, IBV_WC_RECV, 32, false, 0, "unsolicited SEND");
	/* The completion is there; an event it raised would be too. */
	assert_false(tp_cq_event_pending(&x->peer));

	/* (iWARP has no Send with Immediate: a solicited plain SEND there) */
	w = tp_wr1(1, tu_wire_iwarp() ? IBV_WR_SEND : IBV_WR_SEND_WITH_IMM, 0, 32);
	w.send_flags |= IBV_SEND_SOLICITED;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	if (!tp_wait_cq_event(&x->peer, W))
		fail_msg("no CQ event within %d ms for a solicited SEND_WITH_IMM", W);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	tp_expect_peer_wc(&x->peer, false, 1, IBV_WC_SUCCESS, &wc);
	check_recv_wc(x, &wc, IBV_WC_RECV, 32, !tu_wire_iwarp(), w.imm, "solicited SEND_WITH_IMM");

	/* Not re-armed: another solicited message raises nothing. */
	w.wr_id = 2;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 2, IBV_WC_SUCCESS, W, NULL);
	tp_expect_peer_wc(&x->peer, false, 2, IBV_WC_SUCCESS, &wc);
	check_recv_wc(x, &wc, IBV_WC_RECV, 32, !tu_wire_iwarp(), w.imm,
		      "second solicited SEND_WITH_IMM");
	assert_false(tp_cq_event_pending(&x->peer));

	/* Armed for any completion: an unsolicited one raises the event. */
	assert_int_equal(tp_arm_recv_cq(&x->peer, false), 0);
	w = tp_wr1(3, IBV_WR_SEND, 0, 32);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	if (!tp_wait_cq_event(&x->peer, W))
		fail_msg("no CQ event within %d ms for a SEND on a CQ armed for any", W);
	tp_expect_peer_wc(&x->peer, false, 3, IBV_WC_SUCCESS, &wc);
	check_recv_wc(x, &wc, IBV_WC_RECV, 32, false, 0, "SEND on a CQ armed for any");
	tp_expect_wc(x->ep.scq, 3, IBV_WC_SUCCESS, W, NULL);
	tp_pair_stop(x);
}

/* ibv_modify_srq(3): armed with a limit, the SRQ raises IBV_EVENT_SRQ_LIMIT_REACHED once
 * fewer receives than the limit remain, then is disarmed (srq_limit reads 0). Receives
 * of two QPs come from it. */
static void test_srq_receives_and_limit_event(void **state)
{
	struct tp_pair *x = *state;
	const struct tp_qp_opts po = { .type = IBV_QPT_RC, .use_srq = 1 };
	int lq2, pq2;
	struct tp_info li2, pi2;
	struct tu_conn c;
	uint32_t qpn_of[2];
	bool used[8] = { false };

	tp_start(&x->peer);
	tp_open(&x->peer, BUF_LEN, 0);
	tp_create_srq(&x->peer, 16, 1);
	x->pq = tp_create_qp(&x->peer, &po);
	pq2 = tp_create_qp(&x->peer, &po);
	tp_info(&x->peer, x->pq, &x->pi);
	tp_info(&x->peer, pq2, &pi2);
	tp_ep_open(&x->ep, BUF_LEN, 0);
	x->lq = tp_ep_create_qp(&x->ep, &rc_opts);
	lq2 = tp_ep_create_qp(&x->ep, &rc_opts);
	tp_ep_info(&x->ep, x->lq, &x->li);
	tp_ep_info(&x->ep, lq2, &li2);
	tp_conn(&x->ep, &x->li, &x->pi, &x->lc);
	tp_conn(&x->ep, &x->pi, &x->li, &x->pc);
	tp_pair_connect(x);
	tp_conn(&x->ep, &pi2, &li2, &c);
	assert_int_equal(tp_connect(&x->peer, pq2, &c), 0);
	tp_conn(&x->ep, &li2, &pi2, &c);
	assert_int_equal(tu_qp_connect(x->ep.qp[lq2], &c, IBV_QPS_RTS), 0);
	qpn_of[0] = x->pi.qpn;
	qpn_of[1] = pi2.qpn;

	for (int i = 0; i < 8; i++)
		assert_int_equal(tp_post_recv(&x->peer, -1, (uint64_t)i,
					      &(struct tp_sge){ (uint32_t)i * 256, 256 }, 1),
				 0);
	assert_int_equal(tp_arm_srq(&x->peer, 4), 0);
	assert_int_equal(tp_srq_limit(&x->peer), 4);
	for (uint32_t k = 0; k < 5; k++) {
		int q = k % 2 ? lq2 : x->lq;
		struct tp_wr w = tp_wr1(k, IBV_WR_SEND, k * 256, 100);
		struct ibv_wc wc;
		char what[48];

		snprintf(what, sizeof(what), "message %u through the SRQ", k);
		tp_fill(x->ep.buf + k * 256, 100, 800 + k, 0);
		assert_int_equal(tp_ep_post_send(&x->ep, q, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, NULL);
		if (tp_poll(&x->peer, false, 1, W, &wc) != 1)
			fail_msg("%s: no receive completion", what);
		tp_expect_eq(wc.status, IBV_WC_SUCCESS, "status", what);
		assert_true(wc.wr_id < 8 && !used[wc.wr_id]);
		used[wc.wr_id] = true;
		/* Through the SRQ: qp_num is the QP the message came to. */
		tp_check_wc(&wc, &(struct tp_wc_expect){ .wr_id = wc.wr_id, .status = IBV_WC_SUCCESS,
							 .check = TP_WCE_RECV, .qp_num = qpn_of[k % 2],
							 .opcode = IBV_WC_RECV, .byte_len = 100,
							 .src_qp = x->ep.qp[q]->qp_num,
							 .slid = x->li.lid },
			    what);
		tp_check_peer(&x->peer, (uint32_t)wc.wr_id * 256, 100, 800 + k, 0, what);
		if (k < 4) {
			/* 8 - (k + 1) >= 4 receives left: not below the limit. */
			if (tp_peer_async_pending(&x->peer))
				fail_msg("an async event with %u receives left of limit 4", 7 - k);
		}
	}
	if (!tp_wait_peer_async(&x->peer, IBV_EVENT_SRQ_LIMIT_REACHED, -1, W))
		fail_msg("no IBV_EVENT_SRQ_LIMIT_REACHED with 3 receives left of limit 4");
	assert_int_equal(tp_srq_limit(&x->peer), 0);
	tp_pair_stop(x);
}

/* ---- RNR -------------------------------------------------------------------------------- */

/* IBA 9.7.5.2.8: a SEND that finds no receive is RNR NAKed and retried; with rnr_retry 7
 * it waits as long as it takes and then succeeds. */
static void test_rnr_waits_then_succeeds(void **state)
{
	struct tp_pair *x = rc_pair(state);
	const uint32_t lens[] = { 100, 65536 };

	for (unsigned int k = 0; k < ARRAY_LEN(lens); k++) {
		struct tp_wr w = tp_wr1(k, IBV_WR_SEND, 0, lens[k]);
		struct ibv_wc wc;
		char what[64];

		snprintf(what, sizeof(what), "SEND of %u bytes with no receive posted", lens[k]);
		tp_fill(x->ep.buf, lens[k], 900 + k, 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_no_wc(x->ep.scq, 200, what);
		assert_int_equal(tp_poll(&x->peer, false, 1, 0, &wc), 0);
		assert_int_equal(tp_post_recv(&x->peer, x->pq, k,
					      &(struct tp_sge){ 0, 65536 }, 1), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, NULL);
		tp_expect_peer_wc(&x->peer, false, k, IBV_WC_SUCCESS, &wc);
		check_recv_wc(x, &wc, IBV_WC_RECV, lens[k], false, 0, what);
		tp_check_peer(&x->peer, 0, lens[k], 900 + k, 0, what);
		tp_expect_eq(tu_query_state(x->ep.qp[x->lq]), IBV_QPS_RTS, "state", what);
	}
	tp_pair_stop(x);
}

/* iWARP has no Send with Immediate (RFC 7306 gives Writes one, not Sends): such a WR
 * completes with a local QP operation error and sends nothing; the peer's receive
 * stays posted. */
static void test_send_with_imm_fails_locally_on_iwarp(void **state)
{
	struct tp_pair *x = rc_pair(state);
	struct tp_wr w = tp_wr1(0, IBV_WR_SEND_WITH_IMM, 0, 32);

	if (!tu_wire_iwarp()) {
		print_message("skipped: iWARP only (SOFTVERBS_WIRE=iwarp)\n");
		tp_pair_stop(x);
		skip();
	}
	w.imm = htonl(7);
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 1, &(struct tp_sge){ 0, 64 }, 1), 0);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 0, IBV_WC_LOC_QP_OP_ERR, W, NULL);
	{
		struct ibv_wc wc;

		if (tp_poll(&x->peer, false, 1, 100, &wc) > 0)
			fail_msg("the peer received a Send with Immediate that was not sent");
	}
	tp_pair_stop(x);
}

/* rnr_retry 0: the first RNR NAK ends it. IBV_WC_RNR_RETRY_EXC_ERR, the QP in Error, what
 * follows flushed; the message is not delivered when a receive comes later, and the
 * responder's QP is not harmed. */
static void test_rnr_retries_exhausted(void **state)
{
	struct tp_pair *x = *state;
	struct tp_wr w[2];
	struct ibv_wc wc;
	TU_SKIP_ON_IWARP("no RNR NAK: a Send waits in TCP for its receive, rnr_retry is not counted");

	tp_pair_open(x, BUF_LEN, &rc_opts, NULL);
	x->lc.rnr_retry = 0;
	x->pc.min_rnr_timer = 1; /* 0.01 ms */
	tp_pair_connect(x);
	w[0] = tp_wr1(0, IBV_WR_SEND, 0, 100);
	w[1] = tp_wr1(1, IBV_WR_RDMA_WRITE, 0, 100);
	w[1].send_flags = 0;
	w[1].remote_addr = x->pi.addr;
	w[1].rkey = x->pi.rkey;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, w, 2, NULL), 0);
	tp_expect_wc(x->ep.scq, 0, IBV_WC_RNR_RETRY_EXC_ERR, W, &wc);
	check_send_wc(x, &wc, IBV_WC_SEND, "SEND after its RNR retries");
	tp_expect_wc(x->ep.scq, 1, IBV_WC_WR_FLUSH_ERR, W, NULL);
	if (!tp_wait_state(x->ep.qp[x->lq], IBV_QPS_ERR, W))
		fail_msg("QP not in ERR after IBV_WC_RNR_RETRY_EXC_ERR");
	assert_int_equal(tp_post_recv(&x->peer, x->pq, 7, &(struct tp_sge){ 0, 4096 }, 1), 0);
	if (tp_poll(&x->peer, false, 1, 300, &wc))
		fail_msg("the responder received the SEND whose requester gave up on it "
			 "(IBV_WC_RNR_RETRY_EXC_ERR): wr_id %llu status %s byte_len %u",
			 (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.byte_len);
	tp_expect_eq(tp_state(&x->peer, x->pq), IBV_QPS_RTS, "responder's state",
		  "after the requester's RNR retries ran out");
	tp_pair_stop(x);
}

/* rnr_retry 2 and the responder's min_rnr_timer 20 (10.24 ms): the error comes after the
 * two retries' waits at least, 2 x 10.24 ms (IBA 9.7.5.2.8, as rxe counts: the first RNR
 * NAK, two retries each after a wait, the third NAK ends it; the shm wire, whose
 * responder holds the SEND, waits (2 + 1) x 10.24 ms). */
static void test_rnr_retry_count_and_timer(void **state)
{
	struct tp_pair *x = *state;
	struct tp_wr w = tp_wr1(0, IBV_WR_SEND, 0, 100);
	long long t0, dt;
	TU_SKIP_ON_IWARP("no RNR NAK: a Send waits in TCP for its receive, rnr_retry is not counted");

	tp_pair_open(x, BUF_LEN, &rc_opts, NULL);
	x->lc.rnr_retry = 2;
	x->pc.min_rnr_timer = 20;
	tp_pair_connect(x);
	t0 = tu_now_ms();
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 0, IBV_WC_RNR_RETRY_EXC_ERR, W, NULL);
	dt = tu_now_ms() - t0;
	if (dt < 20)
		fail_msg("RNR retries ran out after %lld ms, before 2 x 10.24 ms", dt);
	tp_pair_stop(x);
}

/* ---- fork ---------------------------------------------------------------------------- */

#if defined(__SANITIZE_THREAD__)
#define SV_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SV_TSAN 1
#endif
#endif

#ifndef SV_TSAN
struct spin {
	struct tp_ep *ep;
	atomic_bool stop;
	atomic_long msgs;
	int err;
};

/* Keeps a QP pair of this process busy, both on one CQ. The thread sleeps on the CQ's
 * channel, so the library's progress thread moves every message. */
static void *spin_traffic(void *arg)
{
	struct spin *s = arg;
	struct tp_ep *ep = s->ep;
	struct ibv_sge ss = { (uintptr_t)ep->buf, 64, ep->mr->lkey };
	struct ibv_sge rs = { (uintptr_t)ep->buf + 4096, 64, ep->mr->lkey };
	struct ibv_send_wr sw = { .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bs;
	struct ibv_recv_wr rw = { .sg_list = &rs, .num_sge = 1 }, *br;

	while (!atomic_load(&s->stop) && !s->err) {
		int got = 0;

		if (ibv_post_recv(ep->qp[1], &rw, &br) || ibv_post_send(ep->qp[0], &sw, &bs)) {
			s->err = 1;
			break;
		}
		while (got < 2 && !s->err) {
			struct pollfd pfd = { .fd = ep->ch->fd, .events = POLLIN };
			struct ibv_wc wc[4];
			struct ibv_cq *cq;
			void *cq_ctx;
			int n;

			if (ibv_req_notify_cq(ep->scq, 0))
				s->err = 2;
			n = ibv_poll_cq(ep->scq, 4, wc);
			got += n > 0 ? n : 0;
			if (n || got >= 2)
				continue;
			if (poll(&pfd, 1, 5000) != 1 || ibv_get_cq_event(ep->ch, &cq, &cq_ctx))
				s->err = 3;
			else
				ibv_ack_cq_events(cq, 1);
		}
		atomic_fetch_add(&s->msgs, 1);
	}
	return NULL;
}

/* In a child of fork(): what any program may do, open the device and make a QP. */
static int forked_child_body(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr a = { .cap = { .max_send_wr = 1, .max_recv_wr = 1,
					       .max_send_sge = 1, .max_recv_sge = 1 },
				      .qp_type = IBV_QPT_RC };

	if (!list || !list[0] || !(ctx = ibv_open_device(list[0])))
		return 2;
	ibv_free_device_list(list);
	pd = ibv_alloc_pd(ctx);
	cq = pd ? ibv_create_cq(ctx, 4, NULL, NULL, 0) : NULL;
	if (!cq)
		return 3;
	a.send_cq = a.recv_cq = cq;
	qp = ibv_create_qp(pd, &a);
	if (!qp)
		return 4;
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		return 5;
	return 0;
}

/*
 * rdma-core lets a forked child open the device and use it (only the parent's memory
 * registrations are off limits without ibv_fork_init). Here the parent's progress thread
 * is busy when fork() runs; each child must still make its QP, in bounded time (a child
 * that deadlocked on a lock held across fork() never ends; one that takes 10 s is hung:
 * milliseconds is what it takes, even loaded). The test runs in a fresh process: how busy
 * that thread is depends on what ran before. 300 forks, or as many as 15 s allow (a
 * loaded machine, a sanitizer), 30 at least.
 */
static void test_fork_while_busy_child_uses_verbs(void **state)
{
	struct tp_pair *x = *state;
	struct tp_info a, b;
	struct tu_conn c;
	struct spin s = { .ep = &x->ep };
	pthread_t t;
	int forks = 300, done = 0, failed = 0, hung = 0;
	long long budget_end;

	if (!tp_fresh("test_fork_while_busy_child_uses_verbs", 90000))
		return;

	tp_ep_open(&x->ep, 1 << 16, 0);
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr qa = { .send_cq = x->ep.scq, .recv_cq = x->ep.scq,
					       .cap = { 16, 16, 1, 1, 0 }, .qp_type = IBV_QPT_RC };

		x->ep.qp[i] = ibv_create_qp(x->ep.res->pd, &qa);
		assert_non_null(x->ep.qp[i]);
		x->ep.nqp++;
	}
	tp_ep_info(&x->ep, 0, &a);
	tp_ep_info(&x->ep, 1, &b);
	tp_conn(&x->ep, &a, &b, &c);
	assert_int_equal(tu_qp_connect(x->ep.qp[0], &c, IBV_QPS_RTS), 0);
	tp_conn(&x->ep, &b, &a, &c);
	assert_int_equal(tu_qp_connect(x->ep.qp[1], &c, IBV_QPS_RTS), 0);
	assert_int_equal(pthread_create(&t, NULL, spin_traffic, &s), 0);
	budget_end = tu_now_ms() + 15000;
	for (int i = 0; i < forks && !hung && (i < 30 || tu_now_ms() < budget_end); i++, done++) {
		pid_t pid;
		int pidfd, st = 0;
		struct pollfd pfd;

		fflush(NULL);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			/* Not cmocka's: a crash here must not run the parent's tests. */
			signal(SIGSEGV, SIG_DFL);
			signal(SIGBUS, SIG_DFL);
			signal(SIGILL, SIG_DFL);
			signal(SIGFPE, SIG_DFL);
			_exit(forked_child_body());
		}
		pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		assert_true(pidfd >= 0);
		pfd = (struct pollfd){ .fd = pidfd, .events = POLLIN };
		if (poll(&pfd, 1, 10000) != 1) {
			print_message("fork %d: child %d hung\n", i, (int)pid);
			hung++;
			kill(pid, SIGKILL);
		}
		waitpid(pid, &st, 0);
		close(pidfd);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			failed++;
	}
	atomic_store(&s.stop, true);
	pthread_join(t, NULL);
	assert_int_equal(s.err, 0);
	print_message("%ld messages moved during %d forks\n", atomic_load(&s.msgs), done);
	if (hung || failed)
		fail_msg("a child forked while the progress thread was busy hung in ibv_* for 10 s "
			 "(killed; %d failed in all)", failed);
	assert_int_equal(tp_ep_close(&x->ep), 0);
}
#else
static void test_fork_while_busy_child_uses_verbs(void **state)
{
	(void)state;
	skip(); /* TSan kills a child of a multi-threaded process that starts threads */
}
#endif

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, tp_pair_setup, tp_pair_teardown)
		T(test_send_every_size),
		T(test_write_every_size),
		T(test_write_with_imm_every_size),
		T(test_read_every_size),
		T(test_one_sided_while_target_blocked_in_read),
		T(test_scatter_gather_both_sides),
		T(test_inline_from_unregistered_memory),
		T(test_chain_stops_at_bad_wr),
		T(test_chain_of_every_operation_completes_in_order),
		T(test_unsignaled_then_signaled),
		T(test_buffer_changed_under_writes),
		T(test_sq_sig_all),
		T(test_atomic_values),
		T(test_peer_of_another_user),
		cmocka_unit_test_setup_teardown(test_atomics_from_two_processes_lose_nothing,
						faa_setup, faa_teardown),
		T(test_fence_orders_after_read_and_atomic),
		T(test_busy_poller_is_not_shadowed),
		T(test_solicited_only_event),
		T(test_srq_receives_and_limit_event),
		T(test_rnr_waits_then_succeeds),
		T(test_send_with_imm_fails_locally_on_iwarp),
		T(test_rnr_retries_exhausted),
		T(test_rnr_retry_count_and_timer),
		T(test_fork_while_busy_child_uses_verbs),
#undef T
	};

	tp_main(argc, argv);
	if (!getenv("SV_TEST_FILTER")) {
		/* Its own ctest entry runs it, so that a skip shows as one (exit 77). */
		cmocka_set_skip_filter("test_peer_of_another_user");
	} else if (!strcmp(getenv("SV_TEST_FILTER"), "test_peer_of_another_user") &&
		   getuid() != 0) {
		printf("test_peer_of_another_user: skipped: needs root to run the peer as "
		       "another user\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
