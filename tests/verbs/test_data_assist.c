/*
 * Copy assist between two processes (docs/architecture.md, "Copy assist"): the target's
 * progress thread copies part of a large one-sided RDMA WRITE or READ while the
 * requester copies the rest. Black-box through ibv_*, plus jobs the agent forges as a
 * rogue requester would (src/wire/shm/shm_assist.h).
 *
 * What is asserted:
 * - RDMA WRITE and READ just under, at and over the threshold (132 KiB), and far above
 *   it, at odd offsets, gathered from and scattered into pieces, place exactly their
 *   bytes and nothing around them, on RC and UC; a WRITE with immediate completes its
 *   receive with the data in place.
 * - The target's progress thread takes part (its chunks show on the job word of its QP's
 *   page), and with SOFTVERBS_SHM_ASSIST=0 no job is ever posted.
 * - A WRITE's last byte lands last: the agent, spinning on it, finds every byte before
 *   it in place the moment it changes; with a slow helper (the agent plays one) the last
 *   bytes wait for its chunk, which the requester copies again when the helper says it
 *   failed; a helper later than 1 s fails the WRITE (RETRY_EXC_ERR); a helper killed
 *   while it holds a chunk: QP_FATAL (in milliseconds, printed; 10 s allowed) and the
 *   WRITE flushed.
 * - Forged jobs: a wrong lkey or an SGE shorter than the job land nothing; a range past
 *   the end of an MR lands only what the MR covers; a legitimate job lands; rounds of
 *   random job words leave this process working.
 *
 * With SOFTVERBS_SHM_COPY=bounce (the second ctest run) nothing is copied by
 * process_vm_*: the data tests then check the bounce copy at these sizes, and the tests
 * of the mechanism itself skip.
 */
#include "verbs/sv_test_peer.h"

#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define BUF_LEN (8u << 20)
#define W TP_WAIT_MS
#define KIB 1024u
#define MIB (1024u * 1024u)

/* The threshold is two 64 KiB chunks and a 4 KiB tail: 135168 bytes. */
static const uint32_t sizes[] = { 135167, 135168, 135169, 256 * KIB, MIB, MIB + 4095,
				  3 * MIB + 17 };

static const struct tp_qp_opts rc_opts = { .type = IBV_QPT_RC };
static const struct tp_qp_opts uc_opts = { .type = IBV_QPT_UC };

enum { GUARD_LO = 9001, GUARD_HI = 9002, GUARD_LEN = 4096 };

/* tp_check_peer and tp_fill_peer in pieces: each request stays well within the agent's
 * bound under ThreadSanitizer, which makes every byte's check slow. */
static void check_peer(struct tp_pair *x, uint64_t off, uint64_t len, uint32_t seed,
		       const char *what)
{
	for (uint64_t at = 0; at < len; at += 256 * KIB)
		tp_check_peer(&x->peer, off + at, len - at < 256 * KIB ? len - at : 256 * KIB,
			      seed, at, what);
}

static void fill_peer(struct tp_pair *x, uint64_t off, uint64_t len, uint32_t seed)
{
	for (uint64_t at = 0; at < len; at += 256 * KIB)
		tp_fill_peer(&x->peer, off + at, len - at < 256 * KIB ? len - at : 256 * KIB,
			     seed, at);
}

static bool bounce(void)
{
	const char *c = getenv("SOFTVERBS_SHM_COPY");

	return c && !strcmp(c, "bounce");
}

static struct tp_pair *pair(void **state, const struct tp_qp_opts *o)
{
	struct tp_pair *x = *state;

	tp_pair_open(x, BUF_LEN, o, NULL);
	tp_pair_connect(x);
	return x;
}

/* A pair whose agent's library does not help (SOFTVERBS_SHM_ASSIST=0 in its
 * environment only): the agent's own code plays the helper. */
static struct tp_pair *pair_without_helper(void **state)
{
	struct tp_pair *x;

	setenv("SOFTVERBS_SHM_ASSIST", "0", 1);
	x = pair(state, &rc_opts);
	unsetenv("SOFTVERBS_SHM_ASSIST");
	return x;
}

/* WRITEs of every size from our buffer at 3 to the agent's at 5, bytes around guarded. */
static void writes_land(struct tp_pair *x, const char *kind)
{
	for (unsigned int k = 0; k < ARRAY_LEN(sizes) * 2; k++) {
		uint32_t len = sizes[k / 2], seed = 100 + k;
		struct tp_wr w = tp_wr1(k, IBV_WR_RDMA_WRITE, 3, len);
		char what[80];

		snprintf(what, sizeof(what), "%s RDMA_WRITE of %u bytes", kind, len);
		w.remote_addr = x->pi.addr + 5;
		w.rkey = x->pi.rkey;
		tp_fill(x->ep.buf + 3, len, seed, 0);
		tp_fill_peer(&x->peer, 0, 5, GUARD_LO, 0);
		tp_fill_peer(&x->peer, 5 + len, GUARD_LEN, GUARD_HI, 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, NULL);
		check_peer(x, 5, len, seed, what);
		tp_check_peer(&x->peer, 0, 5, GUARD_LO, 0, what);
		tp_check_peer(&x->peer, 5 + len, GUARD_LEN, GUARD_HI, 0, what);
	}
}

static void test_rc_writes_land_exactly(void **state)
{
	struct tp_pair *x = pair(state, &rc_opts);

	writes_land(x, "RC");
	tp_pair_stop(x);
}

static void test_uc_writes_land_exactly(void **state)
{
	struct tp_pair *x = pair(state, &uc_opts);

	writes_land(x, "UC");
	tp_pair_stop(x);
}

static void test_reads_land_exactly(void **state)
{
	struct tp_pair *x = pair(state, &rc_opts);

	for (unsigned int k = 0; k < ARRAY_LEN(sizes) * 2; k++) {
		uint32_t len = sizes[k / 2], seed = 200 + k;
		struct tp_wr w = tp_wr1(k, IBV_WR_RDMA_READ, 3, len);
		struct ibv_wc wc;
		char what[80];

		snprintf(what, sizeof(what), "RDMA_READ of %u bytes", len);
		w.remote_addr = x->pi.addr + 5;
		w.rkey = x->pi.rkey;
		fill_peer(x, 5, len, seed);
		tp_fill(x->ep.buf, 3, GUARD_LO, 0);
		tp_fill(x->ep.buf + 3 + len, GUARD_LEN, GUARD_HI, 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, &wc);
		tp_expect_eq(wc.byte_len, len, "byte_len", what);
		tp_assert_pattern(x->ep.buf + 3, len, seed, 0, what);
		tp_assert_pattern(x->ep.buf, 3, GUARD_LO, 0, what);
		tp_assert_pattern(x->ep.buf + 3 + len, GUARD_LEN, GUARD_HI, 0, what);
	}
	tp_pair_stop(x);
}

/* Pieces cut at odd places, across chunk boundaries: WRITE gathers, READ scatters. */
static void test_pieces_across_chunks(void **state)
{
	const struct tp_qp_opts o = { .type = IBV_QPT_RC, .max_sge = 4 };
	const struct tp_sge pieces[] = { { 3, 1000 }, { 2 * MIB + 7, 300001 }, { 3 * MIB, 0 },
					 { 5 * MIB + 1, 700000 } };
	const uint32_t total = 1000 + 300001 + 700000;
	struct tp_pair *x = pair(state, &o);
	struct tp_wr w = tp_wr1(1, IBV_WR_RDMA_WRITE, 0, 0);

	w.nsge = 4;
	memcpy(w.sge, pieces, sizeof(pieces));
	w.remote_addr = x->pi.addr + 11;
	w.rkey = x->pi.rkey;
	for (uint32_t i = 0, at = 0; i < 4; at += pieces[i].len, i++)
		tp_fill(x->ep.buf + pieces[i].off, pieces[i].len, 31, at);
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 1, IBV_WC_SUCCESS, W, NULL);
	check_peer(x, 11, total, 31, "RDMA_WRITE gathered from 4 pieces");

	fill_peer(x, 11, total, 32);
	memset(x->ep.buf, 0, BUF_LEN);
	w.wr_id = 2;
	w.opcode = IBV_WR_RDMA_READ;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 2, IBV_WC_SUCCESS, W, NULL);
	for (uint32_t i = 0, at = 0; i < 4; at += pieces[i].len, i++)
		tp_assert_pattern(x->ep.buf + pieces[i].off, pieces[i].len, 32, at,
				  "RDMA_READ scattered into 4 pieces");
	tp_pair_stop(x);
}

static void test_write_with_imm_data_before_receive(void **state)
{
	struct tp_pair *x = pair(state, &rc_opts);

	for (uint32_t k = 0; k < 8; k++) {
		uint32_t len = MIB + 100 * k, seed = 300 + k;
		struct tp_wr w = tp_wr1(k, IBV_WR_RDMA_WRITE_WITH_IMM, 0, len);
		struct ibv_wc wc;

		w.remote_addr = x->pi.addr;
		w.rkey = x->pi.rkey;
		w.imm = htonl(0x77000000u | k);
		tp_fill(x->ep.buf, len, seed, 0);
		assert_int_equal(tp_post_recv(&x->peer, x->pq, 50 + k, NULL, 0), 0);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, NULL);
		tp_expect_peer_wc(&x->peer, false, 50 + k, IBV_WC_SUCCESS, &wc);
		tp_expect_eq(wc.byte_len, len, "byte_len", "RDMA_WRITE_WITH_IMM receive");
		tp_expect_eq(wc.imm_data, w.imm, "imm_data", "RDMA_WRITE_WITH_IMM receive");
		check_peer(x, 0, len, seed, "RDMA_WRITE_WITH_IMM data");
	}
	tp_pair_stop(x);
}

/* ---- the mechanism ------------------------------------------------------------------- */

/* The job word on the agent's QP page, as we map it (fails the test if not found: a
 * word of 0 must mean "no job", not "not looked at"). */
static uint64_t agent_job_word(const struct tp_pair *x)
{
	unsigned char *page = tp_find_segment(x->pi.qpn, x->peer.pid);
	uint64_t word = 0;
	struct iovec l = { &word, sizeof(word) }, r = { page + 64, sizeof(word) };

	/* Read through the kernel (the mapping may be going away). */
	if (!page || process_vm_readv(getpid(), &l, 1, &r, 1, 0) != (ssize_t)sizeof(word))
		fail_msg("the agent's QP %u page is not mapped here", x->pi.qpn);
	return word;
}

/* Chunks of a @len byte WRITE the helper may take: all but the 4 KiB tail, 64 KiB each. */
static uint32_t job_chunks(uint32_t len)
{
	return (len - 4096 + 65535) / 65536;
}

/* 1 MiB WRITEs to an agent sitting in read(): its progress thread takes some chunks. */
static void test_target_thread_takes_part(void **state)
{
	struct tp_pair *x;
	uint32_t helped = 0, jobs = 0, last_job = 0;

	if (bounce())
		skip(); /* no process_vm_*: nothing to help with */
	x = pair(state, &rc_opts);
	tp_fill(x->ep.buf, MIB, 41, 0);
	for (uint32_t k = 0; k < 64; k++) {
		struct tp_wr w = tp_wr1(k, IBV_WR_RDMA_WRITE, 0, MIB);
		uint64_t c;

		w.remote_addr = x->pi.addr + (k % 4) * MIB;
		w.rkey = x->pi.rkey;
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, NULL);
		c = agent_job_word(x);
		/* After a job: front == back, the helper's chunks are those above it. */
		if ((uint32_t)(c >> 32) != last_job) {
			last_job = (uint32_t)(c >> 32);
			jobs++;
			helped += job_chunks(MIB) - (uint32_t)(c & 0xffff);
		}
	}
	for (uint32_t k = 0; k < 4; k++)
		check_peer(x, k * MIB, MIB, 41, "1 MiB RDMA_WRITE");
	if (!jobs || !helped)
		fail_msg("64 WRITEs of 1 MiB: %u jobs posted, %u chunks taken by the target", jobs,
			 helped);
	tp_pair_stop(x);
}

static void test_no_job_when_turned_off(void **state)
{
	struct tp_pair *x;

	if (bounce())
		skip();
	setenv("SOFTVERBS_SHM_ASSIST", "0", 1);
	if (!tp_fresh("test_no_job_when_turned_off", 30000)) {
		unsetenv("SOFTVERBS_SHM_ASSIST");
		return;
	}
	x = pair(state, &rc_opts);
	tp_fill(x->ep.buf, MIB, 42, 0);
	for (uint32_t k = 0; k < 16; k++) {
		struct tp_wr w = tp_wr1(k, IBV_WR_RDMA_WRITE, 0, MIB);

		w.remote_addr = x->pi.addr;
		w.rkey = x->pi.rkey;
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, NULL);
	}
	check_peer(x, 0, MIB, 42, "1 MiB RDMA_WRITE, assist off");
	assert_int_equal(agent_job_word(x), 0);
	tp_pair_stop(x);
}

/* The agent spins on the last byte of each WRITE: when it changes, the rest is there.
 * With the real helper; on two CPUs the watcher and the helper share one, so an early
 * last byte is rarely seen here: test_tail_waits_for_a_slow_helper checks the order
 * deterministically. */
static void test_last_byte_lands_last(void **state)
{
	struct tp_pair *x = pair(state, &rc_opts);

	for (uint32_t k = 0; k < 24; k++) {
		uint32_t len = MIB + 1000 * k, seed = 500 + 2 * k, before = seed + 1;
		struct tp_wr w = tp_wr1(k, IBV_WR_RDMA_WRITE, 0, len);
		long bad;

		/* What is there before: another message, whose last byte differs. */
		while (tp_pattern(len - 1, before) == tp_pattern(len - 1, seed))
			before += 1000;
		fill_peer(x, 0, len, before);
		tp_fill(x->ep.buf, len, seed, 0);
		w.remote_addr = x->pi.addr;
		w.rkey = x->pi.rkey;
		tp_watch_last_start(&x->peer, 0, len, seed, W);
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, NULL);
		bad = tp_watch_last_result(&x->peer);
		if (bad >= 0)
			fail_msg("WRITE %u of %u bytes: byte %ld was not in place when the last "
				 "one was", k, len, bad);
	}
	tp_pair_stop(x);
}

/*
 * A slow helper (the agent's code plays it, holding a chunk 200 ms; its library does not
 * help): the requester leaves the WQE to progress meanwhile, writes the last bytes only
 * after that chunk is counted, and copies the chunk itself when the helper says it failed.
 */
static void test_tail_waits_for_a_slow_helper(void **state)
{
	struct tp_pair *x;
	uint32_t len = MIB + 333, seed = 81, k;
	long long t0, waited = 0;
	int chunk;

	if (bounce())
		skip();
	x = pair_without_helper(state);
	fill_peer(x, 0, len, seed);
	tp_hold_chunk_start(&x->peer, x->pq, 0, len, 200, 10 * W);
	/* Copies nobody helped with offer help every 8th time, and the agent has to win
	 * the last chunk from us: WRITE until it has held one (for up to 10 s: on a loaded
	 * machine it may not run when a job is posted). Each WRITE's last byte differs
	 * from the one before, so the agent sees if it lands while it holds. */
	for (k = 0, t0 = tu_now_ms(); tu_now_ms() - t0 < 10000 && !tp_answer_ready(&x->peer);
	     k++) {
		long long t;
		struct tp_wr w = tp_wr1(k, IBV_WR_RDMA_WRITE, 0, len);
		uint32_t before = seed;

		while (tp_pattern(len - 1, seed) == tp_pattern(len - 1, before))
			seed++;
		tp_fill(x->ep.buf, len, seed, 0);
		w.remote_addr = x->pi.addr;
		w.rkey = x->pi.rkey;
		/* Before the post: the helper may take its chunk and start holding before this
		 * thread runs again (a loaded machine), and the wait is measured from then. */
		t = tu_now_ms();
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		tp_expect_wc(x->ep.scq, k, IBV_WC_SUCCESS, W, NULL);
		if (tu_now_ms() - t > waited)
			waited = tu_now_ms() - t;
	}
	assert_int_equal(tp_hold_chunk_result(&x->peer, &chunk), 0);
	assert_in_range(chunk, 1, (int)job_chunks(len) - 1);
	/* The WRITE whose chunk was held completed after the hold. */
	assert_true(waited >= 190);
	check_peer(x, 0, len, seed, "the last WRITE (one of its chunks failed by a helper)");
	tp_pair_stop(x);
}

/* A helper that holds its chunk past 1 s: the WQE fails, as if retries ran out. */
static void test_helper_too_late_fails_the_write(void **state)
{
	struct tp_pair *x;
	enum ibv_wc_status st = IBV_WC_SUCCESS;
	long long t0;
	uint32_t k;
	int chunk;

	if (bounce())
		skip();
	x = pair_without_helper(state);
	tp_hold_chunk_start(&x->peer, x->pq, 0, MIB, 1500, 10 * W);
	/* Until the agent wins a chunk (up to 10 s, as above). */
	for (k = 0, t0 = tu_now_ms(); tu_now_ms() - t0 < 10000 && st == IBV_WC_SUCCESS; k++) {
		struct tp_wr w = tp_wr1(k, IBV_WR_RDMA_WRITE, 0, MIB);
		struct ibv_wc wc;

		w.remote_addr = x->pi.addr;
		w.rkey = x->pi.rkey;
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		assert_int_equal(tu_poll(x->ep.scq, 1, &wc, 2 * W), 1);
		tp_expect_eq((long long)wc.wr_id, k, "wr_id", "a WRITE");
		st = wc.status;
	}
	tp_expect_eq(st, IBV_WC_RETRY_EXC_ERR, "status", "the WRITE whose chunk was held 1.5 s");
	assert_true(tp_wait_state(x->ep.qp[x->lq], IBV_QPS_ERR, W));
	assert_int_equal(tp_hold_chunk_result(&x->peer, &chunk), 0);
	tp_pair_stop(x);
}

/* The helper's process killed while it holds a chunk: our QP fails (IBV_EVENT_QP_FATAL:
 * milliseconds on an idle machine, printed; 10 s allowed for a loaded one) and the WRITE
 * waiting for that chunk is flushed. A held WRITE is one not done in 0.5 s: a 1 MiB
 * WRITE nobody holds takes about a millisecond, and the kill must come before the
 * library's 1 s helper deadline (SV_ASSIST_LATE_NS) fails the WRITE itself. */
static void test_helper_killed_while_holding_a_chunk(void **state)
{
	struct tp_pair *x;
	struct ibv_async_event ev;
	struct ibv_wc wc;
	long long t0;
	uint32_t k;
	int got = 1;

	if (bounce())
		skip();
	x = pair_without_helper(state);
	tp_hold_chunk_start(&x->peer, x->pq, 0, MIB, 20000, 10 * W);
	/* WRITE until one does not complete within 0.5 s (up to 10 s): its chunk is
	 * held. */
	for (k = 0, t0 = tu_now_ms(); tu_now_ms() - t0 < 10000 && got == 1; k++) {
		struct tp_wr w = tp_wr1(k, IBV_WR_RDMA_WRITE, 0, MIB);

		w.remote_addr = x->pi.addr;
		w.rkey = x->pi.rkey;
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
		got = tu_poll(x->ep.scq, 1, &wc, 500);
		if (got == 1)
			tp_expect_eq(wc.status, IBV_WC_SUCCESS, "status", "a WRITE nobody held");
	}
	assert_int_equal(got, 0);
	t0 = tu_now_ms();
	tp_kill(&x->peer);
	if (!tp_wait_async(x->ep.res->ctx, IBV_EVENT_QP_FATAL, 10000, &ev) ||
	    ev.element.qp != x->ep.qp[x->lq])
		fail_msg("no IBV_EVENT_QP_FATAL within 10 s of the helper's SIGKILL");
	print_message("    IBV_EVENT_QP_FATAL %lld ms after the helper's SIGKILL\n",
		      tu_now_ms() - t0);
	tp_expect_wc(x->ep.scq, k - 1, IBV_WC_WR_FLUSH_ERR, W, NULL);
	assert_int_equal(tp_ep_close(&x->ep), 0);
}

/* ---- forged jobs: the agent as a rogue requester ------------------------------------- */

static void expect_zero(const unsigned char *p, size_t len, const char *what)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			fail_msg("%s wrote byte %zu of the %zu checked", what, i, len);
}

/*
 * A forger rings no doorbell: our progress thread, asleep, would not look at the job.
 * Until the agent answers, fetch-and-adds of 0 on its buffer's last word get answers
 * from its library into our fifo, which wake our thread when it sleeps. We wait
 * between them without polling our CQ: the thread helps only while the application
 * does not busy-poll.
 */
static int forge(struct tp_pair *x, int how, uint64_t addr, uint32_t rkey, uint64_t len)
{
	long long end = tu_now_ms() + 2 * W;

	tp_forge_assist_start(&x->peer, x->li.qpn, how, addr, rkey, len, W);
	while (!tp_answer_ready(&x->peer) && tu_now_ms() < end) {
		struct tp_wr k = tp_wr1(999, IBV_WR_ATOMIC_FETCH_AND_ADD, BUF_LEN - 8, 8);
		struct pollfd pfd = { .fd = x->peer.sock, .events = POLLIN };

		k.remote_addr = x->pi.addr + BUF_LEN - 8;
		k.rkey = x->pi.rkey;
		assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &k, 1, NULL), 0);
		(void)poll(&pfd, 1, 5);
		tp_expect_wc(x->ep.scq, 999, IBV_WC_SUCCESS, W, NULL);
	}
	return tp_forge_assist_result(&x->peer, W);
}

static void test_forged_jobs_land_only_where_keys_allow(void **state)
{
	struct tp_pair *x;
	struct ibv_mr *part;
	uint64_t base;

	if (bounce())
		skip(); /* the agent needs process_vm_* to map what it forges into */
	x = pair(state, &rc_opts);
	base = (uint64_t)(uintptr_t)x->ep.buf;
	fill_peer(x, 0, MIB, 61);

	/* Positive control: a job the agent could have posted as our peer lands. */
	memset(x->ep.buf, 0, 2 * MIB);
	assert_int_equal(forge(x, TP_FORGE_VALID, x->li.addr, x->li.rkey, 512 * KIB), 0);
	tp_assert_pattern(x->ep.buf, 512 * KIB, 61, 0, "a legitimate forged job");

	/* Its lkey with another tag, or an SGE half the job's length: nothing lands. */
	memset(x->ep.buf, 0, 2 * MIB);
	assert_int_equal(forge(x, TP_FORGE_BAD_LKEY, x->li.addr, x->li.rkey, 512 * KIB), 1);
	expect_zero(x->ep.buf, 2 * MIB, "a job with a bad lkey");
	/* The chunks within the SGE's 256 KiB land; those past it do not. */
	assert_int_equal(forge(x, TP_FORGE_NO_LENGTH, x->li.addr, x->li.rkey, 512 * KIB), 1);
	tp_assert_pattern(x->ep.buf, 256 * KIB, 61, 0, "a job's chunks within its SGE");
	expect_zero(x->ep.buf + 256 * KIB, 2 * MIB - 256 * KIB, "a job longer than its SGE");

	/* Our rkey with a wrong tag: nothing lands. */
	memset(x->ep.buf, 0, 2 * MIB);
	assert_int_equal(forge(x, TP_FORGE_VALID, x->li.addr, x->li.rkey ^ 0x80, 512 * KIB), 1);
	expect_zero(x->ep.buf, 2 * MIB, "a job with a bad rkey");

	/* An MR over [1 MiB, 2 MiB) of the buffer; a job from 64 KiB before its end: the
	 * first chunk lands, the rest is past the MR and does not. */
	part = ibv_reg_mr(x->ep.res->pd, x->ep.buf + MIB, MIB,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_non_null(part);
	memset(x->ep.buf, 0, 4 * MIB);
	assert_int_equal(forge(x, TP_FORGE_VALID, base + 2 * MIB - 64 * KIB, part->rkey,
			       512 * KIB),
			 1);
	tp_assert_pattern(x->ep.buf + 2 * MIB - 64 * KIB, 64 * KIB, 61, 0,
			  "the chunk of a forged job inside the MR");
	expect_zero(x->ep.buf + 2 * MIB, 2 * MIB, "a job past the MR's end");
	assert_int_equal(ibv_dereg_mr(part), 0);
	tp_pair_stop(x);
}

static void test_forged_garbage_leaves_us_working(void **state)
{
	struct tp_pair *x;
	struct tp_wr w = tp_wr1(7, IBV_WR_RDMA_WRITE, 0, MIB);

	if (bounce())
		skip();
	x = pair(state, &rc_opts);
	(void)forge(x, TP_FORGE_GARBAGE, x->li.addr, x->li.rkey, 300);
	/* Still here: our QP and a new WRITE of 1 MiB work (the agent's QP is untouched). */
	tp_fill(x->ep.buf, MIB, 71, 0);
	w.remote_addr = x->pi.addr;
	w.rkey = x->pi.rkey;
	assert_int_equal(tp_ep_post_send(&x->ep, x->lq, &w, 1, NULL), 0);
	tp_expect_wc(x->ep.scq, 7, IBV_WC_SUCCESS, W, NULL);
	check_peer(x, 0, MIB, 71, "1 MiB RDMA_WRITE after garbage jobs");
	tp_pair_stop(x);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, tp_pair_setup, tp_pair_teardown)
		T(test_rc_writes_land_exactly),
		T(test_uc_writes_land_exactly),
		T(test_reads_land_exactly),
		T(test_pieces_across_chunks),
		T(test_write_with_imm_data_before_receive),
		T(test_target_thread_takes_part),
		T(test_last_byte_lands_last),
		T(test_tail_waits_for_a_slow_helper),
		T(test_helper_too_late_fails_the_write),
		T(test_helper_killed_while_holding_a_chunk),
		T(test_forged_jobs_land_only_where_keys_allow),
		T(test_forged_garbage_leaves_us_working),
		T(test_no_job_when_turned_off),
#undef T
	};

	tp_main(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
