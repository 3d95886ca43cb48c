/*
 * Claims of docs/architecture.md and docs/conformance.md that no other test checked:
 *
 * - a CQ overrun loses the completion and raises IBV_EVENT_CQ_ERR once
 *   (architecture.md, "CQs");
 * - completion timestamps of real traffic are the device clock (CLOCK_MONOTONIC ns,
 *   hca_core_clock 1 GHz), at both ends, and the wall-clock reading is CLOCK_REALTIME;
 * - ibv_destroy_cq, ibv_destroy_qp and ibv_destroy_srq wait until the events handed out
 *   for the object were acknowledged (architecture.md, "Async events"): destroyed from a
 *   second thread, the destroy does not return before the ack, and returns after it;
 * - max_rd_atomic limits READs and atomics in flight: more than that many posted at
 *   once are held back and all complete, in order, with the right data. (What the
 *   target sees at once cannot be observed through verbs on one host: with CMA the
 *   requester itself copies a READ, and a responder executes requests one at a time in
 *   order, so the target never has more than one in flight whatever the limit.)
 * - SOFTVERBS_SHM_INLINE_MAX moves where a SEND stops riding in the fifo: SENDs just
 *   below, at and above it, and far above it, all arrive intact (RC, UC, UD). Which path
 *   each took is not visible through verbs;
 * - an attach answer (what a peer process returns when our QP attaches to its QP) is
 *   checked before anything is mapped: a rogue "peer" that answers for a QP number
 *   with a segment too small, a key table too small, a wake-up descriptor that is not a
 *   non-blocking eventfd, a wrong segment length or magic gets no mapping: the QP's
 *   SEND fails with RETRY_EXC_ERR (no such peer) and nothing is written to the rogue's
 *   memory; a well-shaped answer (the control) is mapped and written to;
 * - the EOPNOTSUPP table of docs/conformance.md: every call it lists answers so, and
 *   the test's list of calls is the table's (read from the document at run time), so
 *   the two cannot drift apart.
 */
#include "verbs/sv_test_peer.h"
#include "verbs/sv_test_util.h"
#include "core/sv_mr.h"
#include "wire/shm/shm_msg.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 10000 /* every wait for something that must come */
#define HELD_MS 300   /* how long a destroy is watched not returning before the ack */

/* ---- small things ------------------------------------------------------------------- */

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Two RC (or @type) QPs of this process connected to each other, on their own CQ (an
 * extended one if @cqx). */
struct loop {
	struct tu_res *res;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	struct ibv_mr *mr;
	unsigned char *buf;
	size_t len;
};

static void loop_open(struct loop *l, enum ibv_qp_type type, uint8_t rd_atomic, size_t len,
		      struct ibv_cq_init_attr_ex *cqx)
{
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = type,
	};
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct tu_conn ca, cb;

	memset(l, 0, sizeof(*l));
	l->res = tu_res_open();
	assert_non_null(l->res);
	l->cq = cqx ? ibv_cq_ex_to_cq(ibv_create_cq_ex(l->res->ctx, cqx))
		    : ibv_create_cq(l->res->ctx, 256, NULL, NULL, 0);
	assert_non_null(l->cq);
	attr.send_cq = attr.recv_cq = l->cq;
	l->a = ibv_create_qp(l->res->pd, &attr);
	l->b = ibv_create_qp(l->res->pd, &attr);
	assert_non_null(l->a);
	assert_non_null(l->b);
	if (type == IBV_QPT_RC)
		access |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	tu_conn_init(&ca, l->res, l->b->qp_num);
	tu_conn_init(&cb, l->res, l->a->qp_num);
	if (type == IBV_QPT_RC) {
		ca.access = cb.access = access;
		ca.max_rd_atomic = cb.max_rd_atomic = rd_atomic;
		ca.max_dest_rd_atomic = cb.max_dest_rd_atomic = rd_atomic;
	}
	assert_int_equal(tu_qp_connect(l->a, &ca, IBV_QPS_RTS), 0);
	assert_int_equal(tu_qp_connect(l->b, &cb, IBV_QPS_RTS), 0);
	l->len = (len + 4095) & ~(size_t)4095; /* aligned_alloc: a multiple of the alignment */
	l->buf = aligned_alloc(4096, l->len);
	assert_non_null(l->buf);
	memset(l->buf, 0, l->len);
	l->mr = ibv_reg_mr(l->res->pd, l->buf, l->len, access);
	assert_non_null(l->mr);
}

static void loop_close(struct loop *l, bool own_cq)
{
	assert_int_equal(ibv_dereg_mr(l->mr), 0);
	assert_int_equal(ibv_destroy_qp(l->a), 0);
	assert_int_equal(ibv_destroy_qp(l->b), 0);
	if (own_cq)
		assert_int_equal(ibv_destroy_cq(l->cq), 0);
	free(l->buf);
	assert_int_equal(tu_res_close(l->res), 0);
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, void *at, uint32_t len,
		      uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)at, len, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	assert_int_equal(ibv_post_recv(qp, &wr, &bad), 0);
}

static void post_send(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	assert_int_equal(ibv_post_send(qp, wr, &bad), 0);
}

/* One completion within WAIT_MS: @id, @status (and @opcode when it succeeds). */
static void expect_wc(struct ibv_cq *cq, uint64_t id, enum ibv_wc_status status,
		      struct ibv_wc *out, const char *what)
{
	struct ibv_wc wc;

	if (tu_poll(cq, 1, &wc, WAIT_MS) != 1)
		fail_msg("%s: no completion within %d ms", what, WAIT_MS);
	if (wc.wr_id != id || wc.status != status)
		fail_msg("%s: completion wr_id %llu status %s, want wr_id %llu status %s", what,
			 (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
			 (unsigned long long)id, ibv_wc_status_str(status));
	if (out)
		*out = wc;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 131 + seed * 7 + (i >> 8));
}

static void check(const unsigned char *p, size_t n, unsigned seed, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(i * 131 + seed * 7 + (i >> 8)))
			fail_msg("%s: byte %zu of %zu is 0x%02x, want 0x%02x", what, i, n, p[i],
				 (unsigned char)(i * 131 + seed * 7 + (i >> 8)));
}

/* Reads one async event within WAIT_MS (acknowledged only if @ack). */
static void get_async(struct ibv_context *ctx, struct ibv_async_event *ev, bool ack,
		      const char *what)
{
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };

	if (poll(&pfd, 1, WAIT_MS) != 1)
		fail_msg("%s: no async event within %d ms", what, WAIT_MS);
	assert_int_equal(ibv_get_async_event(ctx, ev), 0);
	if (ack)
		ibv_ack_async_event(ev);
}

static bool async_pending(struct ibv_context *ctx)
{
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };

	return poll(&pfd, 1, 0) == 1;
}

/* ---- CQ overrun ----------------------------------------------------------------------- */

/* A CQ of cqe entries given cqe + 8 flushes holds cqe of them and raises CQ_ERR once. */
static void test_cq_overrun_raises_cq_err_once(void **state)
{
	struct tu_res *res = tu_res_open();
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr attr = { .qp_type = IBV_QPT_RC,
					 .cap = { .max_send_wr = 4, .max_recv_wr = 128,
						  .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	struct ibv_async_event ev;
	struct ibv_wc wc[256];
	struct tu_conn c;
	uint64_t word;
	struct ibv_mr *mr;
	int cqe, n, got = 0;

	(void)state;
	assert_non_null(res);
	cq = ibv_create_cq(res->ctx, 16, NULL, NULL, 0);
	assert_non_null(cq);
	cqe = cq->cqe;
	assert_in_range(cqe, 16, 120);
	attr.send_cq = attr.recv_cq = cq;
	qp = ibv_create_qp(res->pd, &attr);
	assert_non_null(qp);
	mr = ibv_reg_mr(res->pd, &word, sizeof(word), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	tu_conn_init(&c, res, qp->qp_num);
	assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_INIT), 0);
	n = cqe + 8;
	for (int i = 0; i < n; i++)
		post_recv(qp, mr, &word, 8, (uint64_t)i);
	assert_false(async_pending(res->ctx));
	assert_int_equal(ibv_modify_qp(qp, &err, IBV_QP_STATE), 0);
	get_async(res->ctx, &ev, true, "a CQ given more completions than it holds");
	tp_expect_eq(ev.event_type, IBV_EVENT_CQ_ERR, "event type", "CQ overrun");
	assert_ptr_equal(ev.element.cq, cq);
	/* What it holds: the first cqe flushes, in order; the rest were lost. */
	while (got < n && (int)ARRAY_LEN(wc) - got > 0) {
		int k = ibv_poll_cq(cq, (int)ARRAY_LEN(wc) - got, wc + got);

		assert_true(k >= 0);
		if (!k)
			break;
		got += k;
	}
	tp_expect_eq(got, cqe, "completions held", "an overrun CQ");
	for (int i = 0; i < got; i++) {
		tp_expect_eq((long long)wc[i].wr_id, i, "wr_id", "a flush kept by the CQ");
		tp_expect_eq(wc[i].status, IBV_WC_WR_FLUSH_ERR, "status", "a flush kept by the CQ");
	}
	/* Once: a second overrun raises nothing more. */
	{
		struct ibv_qp *qp2 = ibv_create_qp(res->pd, &attr);
		struct tu_conn c2;

		assert_non_null(qp2);
		tu_conn_init(&c2, res, qp2->qp_num);
		assert_int_equal(tu_qp_connect(qp2, &c2, IBV_QPS_INIT), 0);
		for (int i = 0; i < n; i++)
			post_recv(qp2, mr, &word, 8, 1000 + (uint64_t)i);
		assert_int_equal(ibv_modify_qp(qp2, &err, IBV_QP_STATE), 0);
		/* The flushes are made by the modify: they are in the CQ (or lost) now. */
		got = 0;
		while ((n = ibv_poll_cq(cq, 64, wc)) > 0)
			got += n;
		tp_expect_eq(got, cqe, "completions held", "the second overrun");
		if (async_pending(res->ctx)) {
			get_async(res->ctx, &ev, true, "a second overrun");
			fail_msg("a second overrun raised %s: IBV_EVENT_CQ_ERR is raised once",
				 ibv_event_type_str(ev.event_type));
		}
		assert_int_equal(ibv_destroy_qp(qp2), 0);
	}
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(tu_res_close(res), 0);
}

/* ---- completion timestamps of traffic ---------------------------------------------- */

static uint64_t device_clock(struct ibv_context *ctx)
{
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };

	assert_int_equal(ibv_query_rt_values_ex(ctx, &v), 0);
	return (uint64_t)v.raw_clock.tv_sec * 1000000000ull + (uint64_t)v.raw_clock.tv_nsec;
}

/* A SEND's completions at both ends carry the device clock of when each was made. */
static void test_completion_timestamps_of_a_send(void **state)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 256,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
	};
	struct ibv_poll_cq_attr pa = { 0 };
	struct ibv_cq_ex *cqx;
	struct loop l;
	uint64_t t0, t1, ts[2], wall[2], r0, r1;
	int seen = 0;

	(void)state;
	loop_open(&l, IBV_QPT_RC, 1, 4096, &ca);
	cqx = (struct ibv_cq_ex *)l.cq;
	fill(l.buf, 100, 3);
	post_recv(l.b, l.mr, l.buf + 2048, 100, 2);
	t0 = device_clock(l.res->ctx);
	r0 = clock_ns(CLOCK_REALTIME);
	{
		struct ibv_sge sge = { (uintptr_t)l.buf, 100, l.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };

		post_send(l.a, &wr);
	}
	for (long long end = tu_now_ms() + WAIT_MS; seen < 2 && tu_now_ms() < end;) {
		if (ibv_start_poll(cqx, &pa))
			continue;
		do {
			assert_int_equal(cqx->status, IBV_WC_SUCCESS);
			assert_in_range(cqx->wr_id, 1, 2);
			ts[cqx->wr_id - 1] = ibv_wc_read_completion_ts(cqx);
			wall[cqx->wr_id - 1] = ibv_wc_read_completion_wallclock_ns(cqx);
			seen++;
		} while (seen < 2 && !ibv_next_poll(cqx));
		ibv_end_poll(cqx);
	}
	t1 = device_clock(l.res->ctx);
	r1 = clock_ns(CLOCK_REALTIME);
	tp_expect_eq(seen, 2, "completions", "a SEND (both ends)");
	check(l.buf + 2048, 100, 3, "the SEND");
	for (int i = 0; i < 2; i++) {
		if (ts[i] < t0 || ts[i] > t1)
			fail_msg("%s completion: timestamp %llu outside the device clock's "
				 "readings %llu..%llu around the SEND", i ? "receive" : "send",
				 (unsigned long long)ts[i], (unsigned long long)t0,
				 (unsigned long long)t1);
		/* The wall clock reading is the same instant on CLOCK_REALTIME (the offset
		 * between the clocks is read when asked: allow a millisecond of drift). */
		if (wall[i] + 1000000 < r0 || wall[i] > r1 + 1000000)
			fail_msg("%s completion: wall-clock timestamp %llu outside CLOCK_REALTIME "
				 "%llu..%llu", i ? "receive" : "send", (unsigned long long)wall[i],
				 (unsigned long long)r0, (unsigned long long)r1);
	}
	loop_close(&l, true);
}

/* ---- destroy waits for acknowledged events ---------------------------------------- */

struct destroyer {
	pthread_t t;
	int (*destroy)(void *);
	void *obj;
	_Atomic int done; /* 1 once the destroy returned */
	int rc;
	uint64_t returned_ns;
};

static void *destroyer_main(void *arg)
{
	struct destroyer *d = arg;

	d->rc = d->destroy(d->obj);
	d->returned_ns = clock_ns(CLOCK_MONOTONIC);
	atomic_store(&d->done, 1);
	return NULL;
}

static int destroy_cq(void *o) { return ibv_destroy_cq(o); }
static int destroy_qp(void *o) { return ibv_destroy_qp(o); }

/*
 * Starts @d destroying, checks it has not returned HELD_MS later (it must wait for the
 * ack), runs @ack, then waits for it to return (WAIT_MS): after the ack, with 0.
 */
static void destroy_across_ack(struct destroyer *d, void (*ack)(void *), void *arg,
			       const char *what)
{
	uint64_t acked;
	long long end;

	atomic_store(&d->done, 0);
	assert_int_equal(pthread_create(&d->t, NULL, destroyer_main, d), 0);
	end = tu_now_ms() + HELD_MS;
	while (tu_now_ms() < end && !atomic_load(&d->done))
		(void)poll(NULL, 0, 5);
	if (atomic_load(&d->done)) {
		pthread_join(d->t, NULL);
		fail_msg("%s returned %d before the event handed out for it was acknowledged",
			 what, d->rc);
	}
	acked = clock_ns(CLOCK_MONOTONIC);
	ack(arg);
	end = tu_now_ms() + WAIT_MS;
	while (tu_now_ms() < end && !atomic_load(&d->done))
		(void)poll(NULL, 0, 5);
	if (!atomic_load(&d->done))
		fail_msg("%s did not return within %d ms of the ack (the thread is left "
			 "blocked)", what, WAIT_MS);
	pthread_join(d->t, NULL);
	tp_expect_eq(d->rc, 0, "return", what);
	assert_true(d->returned_ns >= acked);
}

struct cq_ack { struct ibv_cq *cq; };
static void ack_cq_event(void *a) { ibv_ack_cq_events(((struct cq_ack *)a)->cq, 1); }
static void ack_async(void *a) { ibv_ack_async_event(a); }

/* ibv_destroy_cq with a completion event read and not acknowledged: waits for the ack. */
static void test_destroy_cq_waits_for_its_completion_event_ack(void **state)
{
	struct tu_res *res = tu_res_open();
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq, *ev_cq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr attr = { .qp_type = IBV_QPT_RC,
					 .cap = { .max_send_wr = 4, .max_recv_wr = 4,
						  .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	struct destroyer d = { .destroy = destroy_cq };
	struct pollfd pfd;
	struct ibv_wc wc;
	struct tu_conn c;
	struct cq_ack a;
	uint64_t word;
	struct ibv_mr *mr;
	void *ctx;

	(void)state;
	assert_non_null(res);
	ch = ibv_create_comp_channel(res->ctx);
	assert_non_null(ch);
	cq = ibv_create_cq(res->ctx, 16, NULL, ch, 0);
	assert_non_null(cq);
	attr.send_cq = attr.recv_cq = cq;
	qp = ibv_create_qp(res->pd, &attr);
	assert_non_null(qp);
	mr = ibv_reg_mr(res->pd, &word, 8, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	tu_conn_init(&c, res, qp->qp_num);
	assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_INIT), 0);
	post_recv(qp, mr, &word, 8, 7);
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	assert_int_equal(ibv_modify_qp(qp, &err, IBV_QP_STATE), 0);
	pfd = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	if (poll(&pfd, 1, WAIT_MS) != 1)
		fail_msg("no completion event within %d ms of a flush", WAIT_MS);
	assert_int_equal(ibv_get_cq_event(ch, &ev_cq, &ctx), 0);
	assert_ptr_equal(ev_cq, cq);
	assert_int_equal(tu_poll(cq, 1, &wc, WAIT_MS), 1);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	d.obj = cq;
	a.cq = cq;
	destroy_across_ack(&d, ack_cq_event, &a, "ibv_destroy_cq");
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(tu_res_close(res), 0);
}

/* ibv_destroy_cq with its IBV_EVENT_CQ_ERR read and not acknowledged: waits for it. */
static void test_destroy_cq_waits_for_its_async_event_ack(void **state)
{
	struct tu_res *res = tu_res_open();
	struct ibv_qp_init_attr attr = { .qp_type = IBV_QPT_RC,
					 .cap = { .max_send_wr = 4, .max_recv_wr = 64,
						  .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	struct destroyer d = { .destroy = destroy_cq };
	struct ibv_async_event ev;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct tu_conn c;
	struct ibv_mr *mr;
	uint64_t word;

	(void)state;
	assert_non_null(res);
	cq = ibv_create_cq(res->ctx, 16, NULL, NULL, 0);
	assert_non_null(cq);
	attr.send_cq = attr.recv_cq = cq;
	qp = ibv_create_qp(res->pd, &attr);
	assert_non_null(qp);
	mr = ibv_reg_mr(res->pd, &word, 8, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	tu_conn_init(&c, res, qp->qp_num);
	assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_INIT), 0);
	for (int i = 0; i < cq->cqe + 1; i++)
		post_recv(qp, mr, &word, 8, (uint64_t)i);
	assert_int_equal(ibv_modify_qp(qp, &err, IBV_QP_STATE), 0);
	get_async(res->ctx, &ev, false, "a CQ overrun");
	tp_expect_eq(ev.event_type, IBV_EVENT_CQ_ERR, "event type", "CQ overrun");
	assert_int_equal(ibv_destroy_qp(qp), 0);
	d.obj = cq;
	destroy_across_ack(&d, ack_async, &ev, "ibv_destroy_cq (CQ_ERR unacknowledged)");
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(tu_res_close(res), 0);
}

/* ibv_destroy_qp with its IBV_EVENT_QP_ACCESS_ERR read and not acknowledged. */
static void test_destroy_qp_waits_for_its_async_event_ack(void **state)
{
	struct destroyer d = { .destroy = destroy_qp };
	struct ibv_async_event ev;
	struct loop l;

	(void)state;
	loop_open(&l, IBV_QPT_RC, 1, 4096, NULL);
	/* A WRITE with a wrong rkey: REM_ACCESS_ERR here, QP_ACCESS_ERR at the responder. */
	{
		struct ibv_sge sge = { (uintptr_t)l.buf, 64, l.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED,
					  .wr.rdma = { .remote_addr = (uintptr_t)l.buf + 1024,
						       .rkey = l.mr->rkey ^ 0x5a5a00 } };

		post_send(l.a, &wr);
	}
	expect_wc(l.cq, 1, IBV_WC_REM_ACCESS_ERR, NULL, "a WRITE with a wrong rkey");
	get_async(l.res->ctx, &ev, false, "the responder of a WRITE with a wrong rkey");
	tp_expect_eq(ev.event_type, IBV_EVENT_QP_ACCESS_ERR, "event type", "responder");
	assert_ptr_equal(ev.element.qp, l.b);
	d.obj = l.b;
	destroy_across_ack(&d, ack_async, &ev, "ibv_destroy_qp (QP_ACCESS_ERR unacknowledged)");
	/* The loop's close destroys b again otherwise: make a fresh one in its place. */
	{
		struct ibv_qp_init_attr attr = { .qp_type = IBV_QPT_RC, .send_cq = l.cq,
						 .recv_cq = l.cq,
						 .cap = { .max_send_wr = 1, .max_recv_wr = 1,
							  .max_send_sge = 1, .max_recv_sge = 1 } };

		l.b = ibv_create_qp(l.res->pd, &attr);
		assert_non_null(l.b);
	}
	loop_close(&l, true);
}

static int destroy_srq(void *o) { return ibv_destroy_srq(o); }

/* ibv_destroy_srq with its IBV_EVENT_SRQ_LIMIT_REACHED read and not acknowledged. */
static void test_destroy_srq_waits_for_its_async_event_ack(void **state)
{
	struct destroyer d = { .destroy = destroy_srq };
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq_attr lim = { .srq_limit = 3 };
	struct ibv_async_event ev;
	struct ibv_srq *srq;
	struct ibv_qp *rq;
	struct tu_conn c;
	struct loop l;

	(void)state;
	loop_open(&l, IBV_QPT_UC, 0, 8192, NULL);
	srq = ibv_create_srq(l.res->pd, &sa);
	assert_non_null(srq);
	/* A UC QP receiving through the SRQ, connected to l.a (l.b stays unused). */
	{
		struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_UC, .send_cq = l.cq,
					       .recv_cq = l.cq, .srq = srq,
					       .cap = { .max_send_wr = 1, .max_send_sge = 1 } };
		struct ibv_qp_attr reset = { .qp_state = IBV_QPS_RESET };

		rq = ibv_create_qp(l.res->pd, &qa);
		assert_non_null(rq);
		tu_conn_init(&c, l.res, l.a->qp_num);
		assert_int_equal(tu_qp_connect(rq, &c, IBV_QPS_RTS), 0);
		assert_int_equal(ibv_modify_qp(l.a, &reset, IBV_QP_STATE), 0);
		tu_conn_init(&c, l.res, rq->qp_num);
		assert_int_equal(tu_qp_connect(l.a, &c, IBV_QPS_RTS), 0);
	}
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = { (uintptr_t)l.buf + 4096, 64, l.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 50 + (uint64_t)i, .sg_list = &sge,
					  .num_sge = 1 }, *bad;

		assert_int_equal(ibv_post_srq_recv(srq, &wr, &bad), 0);
	}
	assert_int_equal(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT), 0);
	for (int i = 0; i < 2; i++) {
		struct ibv_sge sge = { (uintptr_t)l.buf, 64, l.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 1 + (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };

		struct ibv_wc wc[2];

		post_send(l.a, &wr);
		/* One CQ for both ends: the two completions in either order. */
		if (tu_poll(l.cq, 2, wc, WAIT_MS) != 2)
			fail_msg("UC SEND %d through the SRQ: not both completions within %d ms", i,
				 WAIT_MS);
		for (int k = 0; k < 2; k++)
			if (wc[k].status != IBV_WC_SUCCESS ||
			    (wc[k].wr_id != 1 + (uint64_t)i && wc[k].wr_id != 50 + (uint64_t)i))
				fail_msg("UC SEND %d through the SRQ: completion wr_id %llu status %s",
					 i, (unsigned long long)wc[k].wr_id,
					 ibv_wc_status_str(wc[k].status));
		assert_true(wc[0].wr_id != wc[1].wr_id);
	}
	get_async(l.res->ctx, &ev, false, "an SRQ below its limit");
	tp_expect_eq(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED, "event type", "SRQ limit");
	assert_ptr_equal(ev.element.srq, srq);
	assert_int_equal(ibv_destroy_qp(rq), 0);
	d.obj = srq;
	destroy_across_ack(&d, ack_async, &ev, "ibv_destroy_srq (SRQ_LIMIT_REACHED unacknowledged)");
	loop_close(&l, true);
}

/* ---- max_rd_atomic --------------------------------------------------------------------- */

/* With max_rd_atomic 1, a chain of 12 READs and 12 fetch-and-adds: every one completes,
 * in order, each READ with its bytes and each atomic with the value before it. */
static void test_more_reads_and_atomics_than_max_rd_atomic_are_held_back(void **state)
{
	enum { N = 12 };
	struct ibv_send_wr wr[2 * N];
	struct ibv_sge sge[2 * N];
	struct ibv_wc wc[2 * N];
	uint64_t *counter;
	struct loop l;
	int got = 0;

	(void)state;
	loop_open(&l, IBV_QPT_RC, 1, 65536, NULL);
	fill(l.buf, 4096, 9);
	counter = (uint64_t *)(l.buf + 60000 - 60000 % 8);
	*counter = 100;
	for (int i = 0; i < 2 * N; i++) {
		bool rd = i % 2 == 0;

		sge[i] = (struct ibv_sge){ (uintptr_t)(l.buf + 8192 + 1024 * (size_t)i),
					   rd ? 1000 : 8, l.mr->lkey };
		wr[i] = (struct ibv_send_wr){
			.wr_id = (uint64_t)i, .next = i + 1 < 2 * N ? &wr[i + 1] : NULL,
			.sg_list = &sge[i], .num_sge = 1,
			.opcode = rd ? IBV_WR_RDMA_READ : IBV_WR_ATOMIC_FETCH_AND_ADD,
			.send_flags = IBV_SEND_SIGNALED,
		};
		if (rd) {
			wr[i].wr.rdma.remote_addr = (uintptr_t)(l.buf + 8 * (size_t)i);
			wr[i].wr.rdma.rkey = l.mr->rkey;
		} else {
			wr[i].wr.atomic.remote_addr = (uintptr_t)counter;
			wr[i].wr.atomic.rkey = l.mr->rkey;
			wr[i].wr.atomic.compare_add = 1;
		}
	}
	post_send(l.a, wr);
	for (long long end = tu_now_ms() + WAIT_MS; got < 2 * N && tu_now_ms() < end;) {
		int k = ibv_poll_cq(l.cq, 2 * N - got, wc + got);

		assert_true(k >= 0);
		got += k;
	}
	tp_expect_eq(got, 2 * N, "completions", "READs and atomics beyond max_rd_atomic");
	for (int i = 0; i < 2 * N; i++) {
		char what[64];
		uint64_t v;

		snprintf(what, sizeof(what), "%s %d of a chain beyond max_rd_atomic 1",
			 i % 2 ? "fetch-and-add" : "READ", i);
		tp_expect_eq((long long)wc[i].wr_id, i, "wr_id (order)", what);
		tp_expect_eq(wc[i].status, IBV_WC_SUCCESS, "status", what);
		if (i % 2 == 0) {
			const unsigned char *got_p = l.buf + 8192 + 1024 * (size_t)i;

			for (int b = 0; b < 1000; b++)
				if (got_p[b] != l.buf[8 * i + b])
					fail_msg("%s: byte %d is 0x%02x, want 0x%02x", what, b,
						 got_p[b], l.buf[8 * i + b]);
		} else {
			memcpy(&v, l.buf + 8192 + 1024 * (size_t)i, 8);
			tp_expect_eq((long long)v, 100 + i / 2, "value before the add", what);
		}
	}
	tp_expect_eq((long long)*counter, 100 + N, "counter", "after the fetch-and-adds");
	loop_close(&l, true);
}

/* ---- SOFTVERBS_SHM_INLINE_MAX ----------------------------------------------------------- */

#define INLINE_MAX 1000

/* SENDs around SOFTVERBS_SHM_INLINE_MAX=1000 (set for a fresh run of this program, read
 * when the library first sends): every size arrives intact on RC, UC and UD. */
static void test_sends_around_shm_inline_max_arrive(void **state)
{
	static const uint32_t sizes[] = { 1, INLINE_MAX - 1, INLINE_MAX, INLINE_MAX + 1,
					  4000, 70000, 300000 };
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	char env[16];

	(void)state;
	snprintf(env, sizeof(env), "%d", INLINE_MAX);
	assert_int_equal(setenv("SOFTVERBS_SHM_INLINE_MAX", env, 1), 0);
	if (!tp_fresh("test_sends_around_shm_inline_max_arrive", 60000)) {
		unsetenv("SOFTVERBS_SHM_INLINE_MAX");
		return;
	}
	for (size_t t = 0; t < ARRAY_LEN(types); t++) {
		struct loop l;
		struct ibv_ah *ah = NULL;

		loop_open(&l, types[t], 1, 2 * 300000 + 8192, NULL);
		if (types[t] == IBV_QPT_UD) {
			struct ibv_ah_attr aa;

			tu_fill_ah(l.res, &aa);
			ah = ibv_create_ah(l.res->pd, &aa);
			assert_non_null(ah);
		}
		for (size_t k = 0; k < ARRAY_LEN(sizes); k++) {
			uint32_t len = sizes[k], grh = types[t] == IBV_QPT_UD ? 40 : 0;
			unsigned char *dst = l.buf + 300000 + 4096;
			struct ibv_sge sge = { (uintptr_t)l.buf, len, l.mr->lkey };
			struct ibv_send_wr wr = { .wr_id = 10 + k, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_SEND,
						  .send_flags = IBV_SEND_SIGNALED };
			struct ibv_wc wc;
			char what[96];

			if (types[t] == IBV_QPT_UD && len > 4096 - grh)
				continue; /* one MTU at most */
			snprintf(what, sizeof(what), "%s SEND of %u bytes (inline max %d)",
				 tu_qp_type_str(types[t]), len, INLINE_MAX);
			fill(l.buf, len, (unsigned)k + 1);
			memset(dst, 0xee, len + grh + 16);
			post_recv(l.b, l.mr, dst, len + grh + 8, 100 + k);
			if (ah) {
				wr.wr.ud.ah = ah;
				wr.wr.ud.remote_qpn = l.b->qp_num;
				wr.wr.ud.remote_qkey = 0x11111111;
			}
			post_send(l.a, &wr);
			/* One CQ for both ends: the two completions in either order. */
			for (int n = 0; n < 2; n++) {
				if (tu_poll(l.cq, 1, &wc, WAIT_MS) != 1)
					fail_msg("%s: completion %d of 2 not within %d ms", what, n + 1,
						 WAIT_MS);
				if (wc.status != IBV_WC_SUCCESS)
					fail_msg("%s: wr_id %llu: %s", what,
						 (unsigned long long)wc.wr_id,
						 ibv_wc_status_str(wc.status));
				if (wc.wr_id == 100 + k)
					tp_expect_eq(wc.byte_len, len + grh, "byte_len", what);
				else
					tp_expect_eq((long long)wc.wr_id, 10 + (long long)k, "wr_id",
						     what);
			}
			check(dst + grh, len, (unsigned)k + 1, what);
			for (int g = 0; g < 8; g++)
				if (dst[grh + len + g] != 0xee)
					fail_msg("%s: byte %u after the message was written", what,
						 len + g);
		}
		if (ah)
			assert_int_equal(ibv_destroy_ah(ah), 0);
		loop_close(&l, true);
	}
}

/* ---- attach answers -------------------------------------------------------------------- */

/*
 * The attach protocol as src/wire/shm/shm_conn.c speaks it (its request and answer,
 * over a SOCK_SEQPACKET socket in the abstract namespace named by the QP number's
 * block, the answer carrying three descriptors: the arena holding the QP's segment, its
 * process's key table, its wake-up eventfd). A rogue peer is anything that binds the
 * name first.
 */
struct rogue_req {
	uint32_t magic;
	uint32_t src_qpn, dst_qpn, qp_type;
	int32_t src_pid;
	uint32_t flags;
};
struct rogue_rep {
	uint32_t magic;
	int32_t status;
	int32_t pid;
	uint32_t qpn;
	uint64_t seg_len;
	uint64_t seg_addr;
	uint64_t map_len; /* of the first descriptor (the arena of the QP's segment) */
	uint64_t seg_off; /* the segment's place in it */
};
#define ROGUE_MAGIC 0x53564154u
#define ROGUE_BLOCK_BITS 8

enum forge {
	FORGE_GOOD,          /* the control: well shaped */
	FORGE_SHORT_SEG,     /* the segment's file smaller than the segment */
	FORGE_SHORT_TABLE,   /* the key table's file smaller than the table */
	FORGE_PIPE_WAKE,     /* the wake-up descriptor a pipe */
	FORGE_BLOCKING_WAKE, /* an eventfd without O_NONBLOCK */
	FORGE_SEG_LEN,       /* seg_len not the segment's size */
	FORGE_MAGIC,         /* not the answer's magic */
	FORGE_TWO_FDS,       /* two descriptors, not three */
};
static const char *const forge_name[] = {
	"a well-shaped answer", "a segment too small", "a key table too small",
	"a pipe as wake-up descriptor", "a blocking eventfd as wake-up descriptor",
	"a wrong segment length", "a wrong magic", "two descriptors",
};

struct rogue {
	int lfd;
	uint32_t qpn;
	pthread_t t;
	enum forge how;
	int seg_fd; /* the forged segment (kept to look at what was written) */
	int conn;
	int answered; /* 1 once an answer went out */
	size_t page_bytes; /* non-zero bytes of the forged segment as answered */
	char err[128];
};

/* Sealed against shrinking and growing, as a real peer's (an unsealed one is refused). */
static int memfd_of(size_t len)
{
	int fd = memfd_create("rogue", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)len), 0);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	return fd;
}

/* Binds the name of a QP-number block nobody has: our rogue "owns" its QP numbers. */
static void rogue_bind(struct rogue *r)
{
	for (uint32_t block = (1u << (24 - ROGUE_BLOCK_BITS)) - 2; block > 1000; block--) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "softverbs/qpn/%u",
				 block);

		r->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		assert_true(r->lfd >= 0);
		if (!bind(r->lfd, (struct sockaddr *)&sa,
			  (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) &&
		    !listen(r->lfd, 4)) {
			r->qpn = (block << ROGUE_BLOCK_BITS) | 7;
			return;
		}
		close(r->lfd);
	}
	fail_msg("no free QP-number block to impersonate");
}

static size_t written_bytes(int fd);

static void *rogue_main(void *arg)
{
	struct rogue *r = arg;
	struct rogue_req q;
	struct rogue_rep rep = { .magic = ROGUE_MAGIC, .pid = getpid() };
	char cbuf[CMSG_SPACE(3 * sizeof(int))];
	struct iovec iov = { &rep, sizeof(rep) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct pollfd pfd = { .fd = r->lfd, .events = POLLIN };
	struct cmsghdr *c;
	int fds[3], pipefd[2] = { -1, -1 }, nfds = 3;

	if (poll(&pfd, 1, WAIT_MS) != 1) {
		snprintf(r->err, sizeof(r->err), "nobody attached within %d ms", WAIT_MS);
		return NULL;
	}
	r->conn = accept(r->lfd, NULL, NULL);
	if (r->conn < 0 || recv(r->conn, &q, sizeof(q), 0) != (ssize_t)sizeof(q) ||
	    q.magic != ROGUE_MAGIC || q.dst_qpn != r->qpn) {
		snprintf(r->err, sizeof(r->err), "not an attach request for qp %u", r->qpn);
		return NULL;
	}
	rep.qpn = q.dst_qpn;
	rep.seg_len = SHM_QP_SEG_SIZE;
	/* An arena of one segment: the header page, then the segment. */
	rep.map_len = SHM_ARENA_HDR + SHM_SEG_STRIDE;
	rep.seg_off = SHM_ARENA_HDR;
	fds[0] = r->seg_fd = memfd_of(rep.map_len - (r->how == FORGE_SHORT_SEG ? 4096 : 0));
	/* The page of an RC QP in RTS connected to the requester, in our partition, its
	 * fifo empty (all zero): a peer a SEND is written to. */
	{
		struct shm_qp_page *pg = mmap(NULL, SHM_QP_PAGE_SIZE, PROT_READ | PROT_WRITE,
					      MAP_SHARED, r->seg_fd, SHM_ARENA_HDR);

		if (pg == MAP_FAILED)
			return NULL;
		pg->magic = SHM_QP_PAGE_MAGIC;
		pg->pid = getpid();
		pg->qpn = q.dst_qpn;
		pg->qp_type = IBV_QPT_RC;
		pg->state = IBV_QPS_RTS;
		pg->access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
		pg->dest_qpn = q.src_qpn;
		pg->pkey = 0xffff;
		munmap(pg, SHM_QP_PAGE_SIZE);
		r->page_bytes = written_bytes(r->seg_fd);
	}
	fds[1] = memfd_of(r->how == FORGE_SHORT_TABLE ? SV_MR_TABLE_BYTES / 2
						      : SV_MR_TABLE_BYTES);
	if (r->how == FORGE_PIPE_WAKE) {
		if (pipe2(pipefd, O_NONBLOCK | O_CLOEXEC))
			return NULL;
		fds[2] = pipefd[1];
	} else {
		fds[2] = eventfd(0, EFD_CLOEXEC | (r->how == FORGE_BLOCKING_WAKE ? 0 : EFD_NONBLOCK));
	}
	if (r->how == FORGE_SEG_LEN)
		rep.seg_len = SHM_QP_SEG_SIZE * 2;
	if (r->how == FORGE_MAGIC)
		rep.magic ^= 1;
	if (r->how == FORGE_TWO_FDS)
		nfds = 2;
	mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
	memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	if (sendmsg(r->conn, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(rep))
		snprintf(r->err, sizeof(r->err), "answer not sent (errno %d)", errno);
	else
		atomic_store_explicit((_Atomic int *)&r->answered, 1, memory_order_release);
	close(fds[1]);
	close(fds[2]);
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	return NULL;
}

/* Bytes of the forged segment that are not zero (what our library wrote there). */
static size_t written_bytes(int fd)
{
	struct stat st;
	unsigned char *p;
	size_t n = 0;

	assert_int_equal(fstat(fd, &st), 0);
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	for (off_t i = 0; i < st.st_size; i++)
		n += p[i] != 0;
	munmap(p, (size_t)st.st_size);
	return n;
}

static void attach_to_rogue(enum forge how)
{
	struct rogue r = { .how = how, .seg_fd = -1, .conn = -1 };
	struct ibv_qp_init_attr attr = { .qp_type = IBV_QPT_RC,
					 .cap = { .max_send_wr = 4, .max_recv_wr = 4,
						  .max_send_sge = 1, .max_recv_sge = 1 } };
	struct tu_res *res = tu_res_open();
	const char *what = forge_name[how];
	struct ibv_mr *mr;
	struct ibv_qp *qp;
	struct tu_conn c;
	struct ibv_wc wc;
	uint64_t word = 0x1122334455667788ull;
	int got;

	assert_non_null(res);
	rogue_bind(&r);
	assert_int_equal(pthread_create(&r.t, NULL, rogue_main, &r), 0);
	attr.send_cq = attr.recv_cq = res->cq;
	qp = ibv_create_qp(res->pd, &attr);
	assert_non_null(qp);
	mr = ibv_reg_mr(res->pd, &word, 8, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	tu_conn_init(&c, res, r.qpn);
	c.timeout = 8;
	c.retry_cnt = 1;
	assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_RTS), 0);
	{
		struct ibv_sge sge = { (uintptr_t)&word, 8, mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };

		post_send(qp, &wr);
	}
	got = tu_poll(res->cq, 1, &wc, how == FORGE_GOOD ? 300 : WAIT_MS);
	pthread_join(r.t, NULL);
	if (r.err[0])
		fail_msg("%s: the rogue: %s", what, r.err);
	assert_true(atomic_load_explicit((_Atomic int *)&r.answered, memory_order_acquire));
	if (how == FORGE_GOOD) {
		/* The control: mapped and written to (the SEND's message is in its fifo). */
		if (written_bytes(r.seg_fd) <= r.page_bytes)
			fail_msg("%s: nothing written to the forged segment (%d completion%s)",
				 what, got, got == 1 ? "" : "s");
	} else {
		if (got != 1)
			fail_msg("%s: the SEND did not complete within %d ms", what, WAIT_MS);
		if (wc.wr_id != 1 || wc.status != IBV_WC_RETRY_EXC_ERR)
			fail_msg("%s: the SEND completed with %s, want RETRY_EXC_ERR (no peer)",
				 what, ibv_wc_status_str(wc.status));
		if (written_bytes(r.seg_fd) != r.page_bytes)
			fail_msg("%s: the forged segment was mapped and written to", what);
	}
	assert_int_equal(ibv_destroy_qp(qp), 0);
	while (tu_poll(res->cq, 1, &wc, 0) == 1)
		;
	assert_int_equal(ibv_dereg_mr(mr), 0);
	close(r.seg_fd);
	close(r.conn);
	close(r.lfd);
	assert_int_equal(tu_res_close(res), 0);
}

static void test_attach_answer_well_shaped_is_mapped(void **state)
{
	(void)state;
	attach_to_rogue(FORGE_GOOD);
}

static void test_attach_answers_of_the_wrong_shape_are_refused(void **state)
{
	(void)state;
	for (enum forge f = FORGE_SHORT_SEG; f <= FORGE_TWO_FDS; f++)
		attach_to_rogue(f);
}

/* ---- the EOPNOTSUPP table ------------------------------------------------------------ */

struct unsupported {
	const char *names; /* the table's backticked names this check covers, space-separated */
	void (*check)(struct tu_res *res);
};

static void expect_errno(int ok, int want, const char *call)
{
	if (ok)
		fail_msg("%s succeeded; docs/conformance.md says it answers %s", call,
			 strerror(want));
	if (errno != want)
		fail_msg("%s: errno %d (%s), docs/conformance.md says %s", call, errno,
			 strerror(errno), strerror(want));
}

static void expect_ret(int rc, int want, const char *call)
{
	if (rc != want)
		fail_msg("%s returned %d (%s); docs/conformance.md says %s", call, rc,
			 rc > 0 ? strerror(rc) : "", strerror(want));
}

static void c_dmabuf(struct tu_res *res)
{
	int fd = memfd_of(4096);
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_reg_dmabuf_mr(res->pd, 0, 4096, 0, fd, IBV_ACCESS_LOCAL_WRITE);
	close(fd);
	expect_errno(mr != NULL, EOPNOTSUPP, "ibv_reg_dmabuf_mr");
}

static struct ibv_qp *rc_qp(struct tu_res *res)
{
	return tu_keep_qp(res, tu_create_qp(res, IBV_QPT_RC));
}

static void c_ece(struct tu_res *res)
{
	struct ibv_qp *qp = rc_qp(res);
	struct ibv_ece ece = { .vendor_id = 0x02c9, .options = 1 };

	expect_ret(ibv_set_ece(qp, &ece), EOPNOTSUPP, "ibv_set_ece");
	expect_ret(ibv_query_ece(qp, &ece), EOPNOTSUPP, "ibv_query_ece");
}

static void c_null_ops(struct tu_res *res)
{
	struct ibv_modify_cq_attr mca = { .attr_mask = IBV_CQ_ATTR_MODERATE,
					  .moderate = { .cq_count = 1, .cq_period = 1 } };
	struct ibv_qp_open_attr oa = { .comp_mask = IBV_QP_OPEN_ATTR_NUM |
						    IBV_QP_OPEN_ATTR_XRCD |
						    IBV_QP_OPEN_ATTR_TYPE,
				       .qp_num = 1234, .qp_type = IBV_QPT_XRC_RECV };
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD |
						      IBV_XRCD_INIT_ATTR_OFLAGS,
					 .fd = -1, .oflags = O_CREAT };
	struct ibv_wq_init_attr wa = { .wq_type = IBV_WQT_RQ, .max_wr = 4, .max_sge = 1,
				       .pd = res->pd, .cq = res->cq };
	struct ibv_wq *wq_list[1] = { NULL };
	struct ibv_rwq_ind_table_init_attr ra = { .log_ind_tbl_size = 0,
						  .ind_tbl = wq_list };
	struct ibv_flow_attr fa = { .type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(fa),
				    .port = 1 };
	struct ibv_counters_init_attr ca = { 0 };
	struct ibv_xrcd *xrcd;
	void *p;

	expect_ret(ibv_modify_cq(res->cq, &mca), EOPNOTSUPP, "ibv_modify_cq");
	xrcd = ibv_open_xrcd(res->ctx, &xa);
	assert_non_null(xrcd);
	oa.xrcd = xrcd;
	errno = 0;
	p = ibv_open_qp(res->ctx, &oa);
	expect_errno(p != NULL, EOPNOTSUPP, "ibv_open_qp");
	assert_int_equal(ibv_close_xrcd(xrcd), 0);
	errno = 0;
	p = ibv_create_wq(res->ctx, &wa);
	expect_errno(p != NULL, EOPNOTSUPP, "ibv_create_wq");
	errno = 0;
	p = ibv_create_rwq_ind_table(res->ctx, &ra);
	expect_errno(p != NULL, EOPNOTSUPP, "ibv_create_rwq_ind_table");
	errno = 0;
	p = ibv_create_flow(rc_qp(res), &fa);
	expect_errno(p != NULL, EOPNOTSUPP, "ibv_create_flow");
	errno = 0;
	p = ibv_alloc_null_mr(res->pd);
	expect_errno(p != NULL, EOPNOTSUPP, "ibv_alloc_null_mr");
	errno = 0;
	p = ibv_create_counters(res->ctx, &ca);
	expect_errno(p != NULL, EOPNOTSUPP, "ibv_create_counters");
}

static void c_qp_types(struct tu_res *res)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = res->cq, .recv_cq = res->cq, .pd = res->pd,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	const enum ibv_qp_type types[] = { IBV_QPT_RAW_PACKET, IBV_QPT_DRIVER };
	struct ibv_qp *qp;

	for (size_t i = 0; i < ARRAY_LEN(types); i++) {
		char call[64];

		snprintf(call, sizeof(call), "ibv_create_qp_ex of QP type %d", types[i]);
		a.qp_type = types[i];
		errno = 0;
		qp = ibv_create_qp_ex(res->ctx, &a);
		expect_errno(qp != NULL, EOPNOTSUPP, call);
	}
	a.qp_type = IBV_QPT_RC;
	a.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
	a.create_flags = IBV_QP_CREATE_SCATTER_FCS;
	errno = 0;
	qp = ibv_create_qp_ex(res->ctx, &a);
	expect_errno(qp != NULL, EOPNOTSUPP, "ibv_create_qp_ex with create_flags");
}

static void c_tm_srq(struct tu_res *res)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = { .max_wr = 4, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			     IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM,
		.srq_type = IBV_SRQT_TM, .pd = res->pd, .cq = res->cq,
		.tm_cap = { .max_num_tags = 1, .max_ops = 1 },
	};
	struct ibv_srq_init_attr basic = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_ops_wr op = { .wr_id = 1, .opcode = IBV_WR_TAG_ADD }, *bad = NULL;
	struct ibv_srq *srq;

	errno = 0;
	srq = ibv_create_srq_ex(res->ctx, &a);
	expect_errno(srq != NULL, EOPNOTSUPP, "ibv_create_srq_ex of IBV_SRQT_TM");
	srq = ibv_create_srq(res->pd, &basic);
	assert_non_null(srq);
	expect_ret(ibv_post_srq_ops(srq, &op, &bad), EOPNOTSUPP, "ibv_post_srq_ops");
	assert_int_equal(ibv_destroy_srq(srq), 0);
}

static void c_srq_resize(struct tu_res *res)
{
	struct ibv_srq_init_attr basic = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq_attr sa = { .max_wr = 16 };
	struct ibv_srq *srq = ibv_create_srq(res->pd, &basic);
	struct ibv_device_attr da;

	assert_non_null(srq);
	expect_ret(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR), EINVAL,
		   "ibv_modify_srq with IBV_SRQ_MAX_WR");
	assert_int_equal(ibv_query_device(res->ctx, &da), 0);
	assert_false(da.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
	assert_int_equal(ibv_destroy_srq(srq), 0);
}

/* Not calls that answer EOPNOTSUPP: the provider interface's symbols, checked as
 * exported by tests/abi/test_exports.sh (named here so the table's names all map). */
static void c_private(struct tu_res *res)
{
	(void)res;
}

static const struct unsupported unsupported[] = {
	{ "ibv_reg_dmabuf_mr", c_dmabuf },
	{ "ibv_set_ece ibv_query_ece", c_ece },
	{ "ibv_modify_cq ibv_open_qp ibv_create_wq ibv_create_rwq_ind_table ibv_create_flow "
	  "ibv_alloc_null_mr ibv_create_counters", c_null_ops },
	{ "create_flags", c_qp_types },
	{ "IBV_SRQT_TM ibv_post_srq_ops", c_tm_srq },
	{ "ibv_modify_srq IBV_SRQ_MAX_WR", c_srq_resize },
	{ "IBVERBS_PRIVATE_34 ibv_query_gid_type verbs_open_device", c_private },
};

/* The backticked names of the first column of the verbs "Answers EOPNOTSUPP" table. */
static int doc_names(char names[][64], int max)
{
	FILE *f = fopen(SV_SOURCE_DIR "/docs/conformance.md", "r");
	char line[4096];
	bool in = false;
	int n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		char *p, *end;

		if (!strncmp(line, "## ", 3)) {
			if (in)
				break;
			in = strstr(line, "EOPNOTSUPP") != NULL;
			continue;
		}
		if (!in || strncmp(line, "| ", 2) || !strncmp(line, "| call", 6) ||
		    !strncmp(line, "| ---", 5))
			continue;
		end = strstr(line + 2, " |");
		assert_non_null(end);
		*end = 0;
		for (p = line; (p = strchr(p, '`')) && n < max;) {
			char *q = strchr(p + 1, '`');

			assert_non_null(q);
			assert_true(q - p - 1 < 64);
			memcpy(names[n], p + 1, (size_t)(q - p - 1));
			names[n++][q - p - 1] = 0;
			p = q + 1;
		}
	}
	fclose(f);
	return n;
}

static bool covers(const char *list, const char *name)
{
	size_t k = strlen(name);

	for (const char *p = list; (p = strstr(p, name)); p += k)
		if ((p == list || p[-1] == ' ') && (p[k] == ' ' || !p[k]))
			return true;
	return false;
}

/* Every name of the table has a check here and every check's names are in the table;
 * every check passes. */
static void test_every_call_of_the_eopnotsupp_table_answers_it(void **state)
{
	char names[64][64];
	int n = doc_names(names, 64), checked = 0;
	struct tu_res *res = *state;

	(void)res;
	if (n < 10)
		fail_msg("docs/conformance.md: only %d names found in the EOPNOTSUPP table", n);
	for (int i = 0; i < n; i++) {
		bool found = false;

		for (size_t k = 0; k < ARRAY_LEN(unsupported); k++)
			found |= covers(unsupported[k].names, names[i]);
		if (!found)
			fail_msg("docs/conformance.md lists `%s` in the EOPNOTSUPP table; no check "
				 "here (tests/verbs/test_claims.c, unsupported[])", names[i]);
	}
	for (size_t k = 0; k < ARRAY_LEN(unsupported); k++) {
		char copy[256], *save, *tok;

		snprintf(copy, sizeof(copy), "%s", unsupported[k].names);
		for (tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
			bool in_doc = false;

			for (int i = 0; i < n; i++)
				in_doc |= !strcmp(names[i], tok);
			if (!in_doc)
				fail_msg("`%s` is checked here as unsupported but is not in "
					 "docs/conformance.md's EOPNOTSUPP table", tok);
		}
		unsupported[k].check(*state);
		checked++;
	}
	print_message("    %d names of the table, %d checks\n", n, checked);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cq_overrun_raises_cq_err_once),
		cmocka_unit_test(test_completion_timestamps_of_a_send),
		cmocka_unit_test(test_destroy_cq_waits_for_its_completion_event_ack),
		cmocka_unit_test(test_destroy_cq_waits_for_its_async_event_ack),
		cmocka_unit_test(test_destroy_qp_waits_for_its_async_event_ack),
		cmocka_unit_test(test_destroy_srq_waits_for_its_async_event_ack),
		cmocka_unit_test(test_more_reads_and_atomics_than_max_rd_atomic_are_held_back),
		cmocka_unit_test(test_sends_around_shm_inline_max_arrive),
		cmocka_unit_test(test_attach_answer_well_shaped_is_mapped),
		cmocka_unit_test(test_attach_answers_of_the_wrong_shape_are_refused),
		cmocka_unit_test_setup_teardown(test_every_call_of_the_eopnotsupp_table_answers_it,
						tu_setup, tu_teardown),
	};

	tp_main(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
