/*
 * Black-box tests of completion queues and completion channels, as rdma-core 44 over a
 * kernel provider answers them:
 *   - create_cq: NULL + errno; cqe must be 1..max_cqe (rxe_cq_chk_attr: EINVAL),
 *     comp_vector < num_comp_vectors (uverbs create_cq: EINVAL); cq->cqe >= asked;
 *   - resize_cq / destroy_cq / destroy_comp_channel: 0 or a positive errno; a CQ used by
 *     a QP and a channel used by a CQ are EBUSY (uverbs usecnt, libibverbs refcnt);
 *   - ibv_get_cq_event: read() of the channel fd, -1 with errno on failure;
 *   - extended CQs: start_poll ENOENT on empty, unsupported wc_flags EOPNOTSUPP.
 * Completions come from flushing: an RC QP in INIT with posted receives, moved to ERR,
 * completes each receive with IBV_WC_WR_FLUSH_ERR (the error state flushes the work
 * queues).
 */
#include "verbs/sv_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 5000

/* 1 if @fd turns readable within @timeout_ms, else 0. */
static int readable_within(int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int r = poll(&pfd, 1, timeout_ms);

	assert_true(r >= 0);
	return r == 1 && (pfd.revents & POLLIN);
}

static int max_cqe(struct ibv_context *ctx)
{
	struct ibv_device_attr a;

	assert_int_equal(ibv_query_device(ctx, &a), 0);
	return a.max_cqe;
}

/* The things a flush needs: an RC QP in INIT on the given CQs and a buffer for the
 * receives. */
struct flusher {
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[256];
};

static void flusher_init(struct flusher *f, struct tu_res *res, struct ibv_cq *scq,
			 struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq,
		.recv_cq = rcq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 8, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct tu_conn c;

	f->mr = ibv_reg_mr(res->pd, f->buf, sizeof(f->buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(f->mr);
	f->qp = ibv_create_qp(res->pd, &ia);
	assert_non_null(f->qp);
	tu_conn_init(&c, res, 0);
	assert_int_equal(tu_qp_to_init(f->qp, &c), 0);
}

/* Posts @n receives with wr_ids first, first + 1, … (allowed from INIT on). */
static void flusher_post(struct flusher *f, uint64_t first, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = {
			.addr = (uintptr_t)f->buf,
			.length = sizeof(f->buf),
			.lkey = f->mr->lkey,
		};
		struct ibv_recv_wr wr = { .wr_id = first + (uint64_t)i, .sg_list = &sge,
					  .num_sge = 1 };
		struct ibv_recv_wr *bad = NULL;

		assert_int_equal(ibv_post_recv(f->qp, &wr, &bad), 0);
	}
}

static void flusher_flush(struct flusher *f)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

	assert_int_equal(ibv_modify_qp(f->qp, &attr, IBV_QP_STATE), 0);
}

static void flusher_fini(struct flusher *f)
{
	assert_int_equal(ibv_destroy_qp(f->qp), 0);
	assert_int_equal(ibv_dereg_mr(f->mr), 0);
}

/* ---- create / destroy -------------------------------------------------------------- */

/* cqe 1: a CQ of at least 1 entry carrying cq_context, empty, destroyable. */
static void test_create_cq_one_entry(void **state)
{
	struct tu_res *res = *state;
	int marker;
	struct ibv_wc wc;
	struct ibv_cq *cq = ibv_create_cq(res->ctx, 1, &marker, NULL, 0);

	assert_non_null(cq);
	assert_true(cq->cqe >= 1);
	assert_ptr_equal(cq->context, res->ctx);
	assert_ptr_equal(cq->cq_context, &marker);
	assert_null(cq->channel);
	assert_int_equal(ibv_poll_cq(cq, 1, &wc), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

/* cqe = max_cqe is accepted and reported as at least that. */
static void test_create_cq_max_cqe(void **state)
{
	struct tu_res *res = *state;
	int max = max_cqe(res->ctx);
	struct ibv_cq *cq = ibv_create_cq(res->ctx, max, NULL, NULL, 0);

	assert_non_null(cq);
	assert_true(cq->cqe >= max);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

/* cqe beyond max_cqe, 0 or negative: NULL with EINVAL. */
static void test_create_cq_bad_size_is_einval(void **state)
{
	struct tu_res *res = *state;
	const int bad[] = { max_cqe(res->ctx) + 1, 0, -1, INT_MIN };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		assert_null(ibv_create_cq(res->ctx, bad[i], NULL, NULL, 0));
		assert_int_equal(errno, EINVAL);
	}
}

/* comp_vector must be below num_comp_vectors: EINVAL otherwise. */
static void test_create_cq_comp_vector_range(void **state)
{
	struct tu_res *res = *state;
	int last = res->ctx->num_comp_vectors - 1;
	struct ibv_cq *cq;

	cq = ibv_create_cq(res->ctx, 4, NULL, NULL, last);
	assert_non_null(cq);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	errno = 0;
	assert_null(ibv_create_cq(res->ctx, 4, NULL, NULL, res->ctx->num_comp_vectors));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(ibv_create_cq(res->ctx, 4, NULL, NULL, -1));
	assert_int_equal(errno, EINVAL);
}

/* ---- resize ------------------------------------------------------------------------ */

/* Grow and shrink succeed with cqe >= asked; beyond max, 0 or negative is EINVAL. */
static void test_resize_cq(void **state)
{
	struct tu_res *res = *state;
	int max = max_cqe(res->ctx);
	struct ibv_cq *cq = ibv_create_cq(res->ctx, 16, NULL, NULL, 0);
	int before;

	assert_non_null(cq);
	assert_int_equal(ibv_resize_cq(cq, 256), 0);
	assert_true(cq->cqe >= 256);
	assert_int_equal(ibv_resize_cq(cq, 8), 0);
	assert_true(cq->cqe >= 8);
	before = cq->cqe;
	assert_int_equal(ibv_resize_cq(cq, max + 1), EINVAL);
	assert_int_equal(cq->cqe, before);
	assert_int_equal(ibv_resize_cq(cq, 0), EINVAL);
	assert_int_equal(ibv_resize_cq(cq, -1), EINVAL);
	assert_int_equal(cq->cqe, before);
	assert_int_equal(ibv_resize_cq(cq, max), 0);
	assert_true(cq->cqe >= max);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

/* Completions already queued survive a resize. */
static void test_resize_cq_keeps_queued_completions(void **state)
{
	struct tu_res *res = *state;
	struct ibv_cq *cq = ibv_create_cq(res->ctx, 16, NULL, NULL, 0);
	struct flusher f;
	struct ibv_wc wc[4];

	assert_non_null(cq);
	flusher_init(&f, res, cq, cq);
	flusher_post(&f, 100, 3);
	flusher_flush(&f);
	assert_int_equal(tu_poll(cq, 1, wc, WAIT_MS), 1);
	assert_int_equal(wc[0].wr_id, 100);
	assert_int_equal(ibv_resize_cq(cq, 64), 0);
	assert_int_equal(tu_poll(cq, 2, wc, WAIT_MS), 2);
	assert_int_equal(wc[0].wr_id, 101);
	assert_int_equal(wc[1].wr_id, 102);
	assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR);
	flusher_fini(&f);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

/* A CQ a QP uses (as send or receive CQ) cannot be destroyed: EBUSY. */
static void test_destroy_cq_in_use_is_ebusy(void **state)
{
	struct tu_res *res = *state;
	struct ibv_cq *scq = ibv_create_cq(res->ctx, 8, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(res->ctx, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {
		.send_cq = scq,
		.recv_cq = rcq,
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp;

	assert_non_null(scq);
	assert_non_null(rcq);
	qp = ibv_create_qp(res->pd, &ia);
	assert_non_null(qp);
	assert_int_equal(ibv_destroy_cq(scq), EBUSY);
	assert_int_equal(ibv_destroy_cq(rcq), EBUSY);
	/* The CQ still works after the refusal. */
	assert_int_equal(ibv_req_notify_cq(rcq, 0), 0);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_cq(scq), 0);
	assert_int_equal(ibv_destroy_cq(rcq), 0);
}

/* ---- completion channels ----------------------------------------------------------- */

/* A channel has a real, idle, pollable fd and belongs to its context. */
static void test_comp_channel_create_destroy(void **state)
{
	struct tu_res *res = *state;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(res->ctx);

	assert_non_null(ch);
	assert_ptr_equal(ch->context, res->ctx);
	assert_true(ch->fd >= 0);
	assert_true(fcntl(ch->fd, F_GETFD) != -1);
	assert_int_not_equal(ch->fd, res->ctx->async_fd);
	assert_false(readable_within(ch->fd, 0));
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

/* A channel with a CQ on it cannot be destroyed (EBUSY) until the CQ is gone. */
static void test_destroy_comp_channel_with_cq_is_ebusy(void **state)
{
	struct tu_res *res = *state;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(res->ctx);
	struct ibv_cq *cq;

	assert_non_null(ch);
	cq = ibv_create_cq(res->ctx, 4, NULL, ch, 0);
	assert_non_null(cq);
	assert_ptr_equal(cq->channel, ch);
	assert_int_equal(ibv_destroy_comp_channel(ch), EBUSY);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

/* req_notify_cq returns 0 for both arming kinds, with and without a channel. */
static void test_req_notify_cq_returns_zero(void **state)
{
	struct tu_res *res = *state;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(res->ctx);
	struct ibv_cq *cq;

	assert_non_null(ch);
	cq = ibv_create_cq(res->ctx, 4, NULL, ch, 0);
	assert_non_null(cq);
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	assert_int_equal(ibv_req_notify_cq(cq, 1), 0);
	assert_int_equal(ibv_req_notify_cq(res->cq, 0), 0);
	assert_int_equal(ibv_req_notify_cq(res->cq, 1), 0);
	/* Arming alone raises nothing. */
	assert_false(readable_within(ch->fd, 0));
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

/* With O_NONBLOCK and nothing pending, get_cq_event is -1/EAGAIN at once. */
static void test_get_cq_event_nonblocking_is_eagain(void **state)
{
	struct tu_res *res = *state;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(res->ctx);
	struct ibv_cq *cq, *ev_cq = NULL;
	void *ev_ctx = NULL;
	int flags;

	assert_non_null(ch);
	cq = ibv_create_cq(res->ctx, 4, NULL, ch, 0);
	assert_non_null(cq);
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	flags = fcntl(ch->fd, F_GETFL);
	assert_true(flags >= 0);
	assert_int_equal(fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK), 0);
	errno = 0;
	assert_int_equal(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

/*
 * An armed CQ with a channel: a flushed receive turns the fd readable; get_cq_event
 * names the CQ and its cq_context; one arm gives one event; after the ack the CQ
 * can be destroyed.
 */
static void test_flushed_recv_raises_cq_event(void **state)
{
	struct tu_res *res = *state;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(res->ctx);
	struct ibv_cq *cq, *ev_cq = NULL;
	void *ev_ctx = NULL;
	struct flusher f;
	struct ibv_wc wc;
	int marker;

	assert_non_null(ch);
	cq = ibv_create_cq(res->ctx, 16, &marker, ch, 0);
	assert_non_null(cq);
	flusher_init(&f, res, cq, cq);
	flusher_post(&f, 0x1234, 1);
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	flusher_flush(&f);
	assert_true(readable_within(ch->fd, WAIT_MS));
	assert_int_equal(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
	assert_ptr_equal(ev_cq, cq);
	assert_ptr_equal(ev_ctx, &marker);
	ibv_ack_cq_events(ev_cq, 1);
	/* The event is consumed, and the CQ is not re-armed: the fd is idle. */
	assert_false(readable_within(ch->fd, 0));
	assert_int_equal(tu_poll(cq, 1, &wc, WAIT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(wc.wr_id, 0x1234);
	assert_int_equal(wc.qp_num, f.qp->qp_num);
	flusher_fini(&f);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

/* Without req_notify_cq a completion raises no event. */
static void test_unarmed_cq_raises_no_event(void **state)
{
	struct tu_res *res = *state;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(res->ctx);
	struct ibv_cq *cq;
	struct flusher f;
	struct ibv_wc wc;

	assert_non_null(ch);
	cq = ibv_create_cq(res->ctx, 16, NULL, ch, 0);
	assert_non_null(cq);
	flusher_init(&f, res, cq, cq);
	flusher_post(&f, 7, 1);
	flusher_flush(&f);
	assert_int_equal(tu_poll(cq, 1, &wc, WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 7);
	assert_false(readable_within(ch->fd, 0));
	flusher_fini(&f);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

/*
 * Solicited-only arming still fires for a completion in error: the IBA's request for
 * solicited notification covers solicited and unsuccessful completions, and rxe posts
 * flushed receives as solicited.
 */
static void test_solicited_arm_fires_for_error_completion(void **state)
{
	struct tu_res *res = *state;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(res->ctx);
	struct ibv_cq *cq, *ev_cq = NULL;
	void *ev_ctx = NULL;
	struct flusher f;
	struct ibv_wc wc;

	assert_non_null(ch);
	cq = ibv_create_cq(res->ctx, 16, NULL, ch, 0);
	assert_non_null(cq);
	flusher_init(&f, res, cq, cq);
	flusher_post(&f, 9, 1);
	assert_int_equal(ibv_req_notify_cq(cq, 1), 0);
	flusher_flush(&f);
	assert_true(readable_within(ch->fd, WAIT_MS));
	assert_int_equal(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
	assert_ptr_equal(ev_cq, cq);
	ibv_ack_cq_events(ev_cq, 1);
	assert_int_equal(tu_poll(cq, 1, &wc, WAIT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	flusher_fini(&f);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

/* ---- extended CQs ------------------------------------------------------------------ */

static struct ibv_cq_ex *create_cq_ex(struct ibv_context *ctx, uint64_t wc_flags)
{
	struct ibv_cq_init_attr_ex attr = {
		.cqe = 16,
		.wc_flags = wc_flags,
	};

	return ibv_create_cq_ex(ctx, &attr);
}

/* start_poll until something is there or the wait runs out; returns its result. */
static int start_poll_within(struct ibv_cq_ex *cq, int timeout_ms)
{
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	long long end = tu_now_ms() + timeout_ms;
	int r;

	do {
		r = ibv_start_poll(cq, &attr);
	} while (r == ENOENT && tu_now_ms() <= end);
	return r;
}

/* start_poll on an empty extended CQ is ENOENT (and end_poll must then not be called). */
static void test_cq_ex_start_poll_empty_is_enoent(void **state)
{
	struct tu_res *res = *state;
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	struct ibv_cq_ex *cq = create_cq_ex(res->ctx, IBV_WC_STANDARD_FLAGS);

	assert_non_null(cq);
	assert_int_equal(ibv_start_poll(cq, &attr), ENOENT);
	assert_int_equal(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
}

/* The device clock in its units (ns: hca_core_clock is 1,000,000 kHz), from
 * ibv_query_rt_values_ex. */
static uint64_t device_clock(struct ibv_context *ctx)
{
	struct ibv_device_attr_ex da;
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };

	assert_int_equal(ibv_query_device_ex(ctx, NULL, &da), 0);
	assert_int_equal(da.hca_core_clock, 1000000);
	assert_int_equal(ibv_query_rt_values_ex(ctx, &v), 0);
	assert_true(v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK);
	return (uint64_t)v.raw_clock.tv_sec * 1000000000ull + (uint64_t)v.raw_clock.tv_nsec;
}

/* Flushed receives read through start_poll/next_poll/end_poll and the read_* calls. */
static void test_cq_ex_reads_flushed_completions(void **state)
{
	struct tu_res *res = *state;
	struct ibv_cq_ex *cq = create_cq_ex(res->ctx, IBV_WC_EX_WITH_BYTE_LEN |
					    IBV_WC_EX_WITH_QP_NUM |
					    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP);
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	struct flusher f;
	uint64_t ts1, ts2, t0, t1;

	assert_non_null(cq);
	assert_true(ibv_cq_ex_to_cq(cq)->cqe >= 16);
	assert_ptr_equal(ibv_cq_ex_to_cq(cq)->context, res->ctx);
	flusher_init(&f, res, ibv_cq_ex_to_cq(cq), ibv_cq_ex_to_cq(cq));
	flusher_post(&f, 0xabc0, 2);
	t0 = device_clock(res->ctx);
	flusher_flush(&f);

	assert_int_equal(start_poll_within(cq, WAIT_MS), 0);
	assert_int_equal(cq->wr_id, 0xabc0);
	assert_int_equal(cq->status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(ibv_wc_read_qp_num(cq), f.qp->qp_num);
	(void)ibv_wc_read_byte_len(cq);
	ts1 = ibv_wc_read_completion_ts(cq);

	/* The second flush may still be on its way: next_poll until it is there. */
	{
		long long end = tu_now_ms() + WAIT_MS;
		int r;

		do {
			r = ibv_next_poll(cq);
		} while (r == ENOENT && tu_now_ms() <= end);
		assert_int_equal(r, 0);
	}
	assert_int_equal(cq->wr_id, 0xabc1);
	assert_int_equal(cq->status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(ibv_wc_read_qp_num(cq), f.qp->qp_num);
	ts2 = ibv_wc_read_completion_ts(cq);
	t1 = device_clock(res->ctx);
	/* Timestamps are the device clock (ibv_query_rt_values_ex's raw clock) when each
	 * completion was made: between the readings around the flush, in order. */
	if (!ts1 || ts1 < t0 || ts2 < ts1 || ts2 > t1)
		fail_msg("completion timestamps %llu, %llu: want t0 %llu <= ts1 <= ts2 <= t1 %llu",
			 (unsigned long long)ts1, (unsigned long long)ts2,
			 (unsigned long long)t0, (unsigned long long)t1);
	assert_int_equal(ibv_next_poll(cq), ENOENT);
	ibv_end_poll(cq);

	/* Everything was consumed. */
	assert_int_equal(ibv_start_poll(cq, &attr), ENOENT);
	flusher_fini(&f);
	assert_int_equal(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
}

/* An extended CQ cast with ibv_cq_ex_to_cq works with the plain ibv_poll_cq. */
static void test_cq_ex_works_with_ibv_poll_cq(void **state)
{
	struct tu_res *res = *state;
	struct ibv_cq_ex *cqx = create_cq_ex(res->ctx, IBV_WC_STANDARD_FLAGS);
	struct ibv_cq *cq;
	struct flusher f;
	struct ibv_wc wc;

	assert_non_null(cqx);
	cq = ibv_cq_ex_to_cq(cqx);
	flusher_init(&f, res, cq, cq);
	flusher_post(&f, 55, 1);
	flusher_flush(&f);
	assert_int_equal(tu_poll(cq, 1, &wc, WAIT_MS), 1);
	assert_int_equal(wc.wr_id, 55);
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(wc.qp_num, f.qp->qp_num);
	assert_int_equal(ibv_poll_cq(cq, 1, &wc), 0);
	flusher_fini(&f);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

/* A wc_flags bit no provider knows: NULL with EOPNOTSUPP (rxe, mlx5 do the same). */
static void test_cq_ex_unknown_wc_flag_is_eopnotsupp(void **state)
{
	struct tu_res *res = *state;

	errno = 0;
	assert_null(create_cq_ex(res->ctx, IBV_WC_STANDARD_FLAGS | (1ull << 40)));
	assert_int_equal(errno, EOPNOTSUPP);
}

/* An extended CQ takes a channel and cq_context like a plain one. */
static void test_cq_ex_with_channel_and_context(void **state)
{
	struct tu_res *res = *state;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(res->ctx);
	int marker;
	struct ibv_cq_init_attr_ex attr = {
		.cqe = 8,
		.cq_context = &marker,
		.channel = ch,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
		.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
	};
	struct ibv_cq_ex *cqx;

	assert_non_null(ch);
	cqx = ibv_create_cq_ex(res->ctx, &attr);
	assert_non_null(cqx);
	assert_ptr_equal(ibv_cq_ex_to_cq(cqx)->channel, ch);
	assert_ptr_equal(ibv_cq_ex_to_cq(cqx)->cq_context, &marker);
	assert_int_equal(ibv_destroy_comp_channel(ch), EBUSY);
	assert_int_equal(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_create_cq_one_entry),
		T(test_create_cq_max_cqe),
		T(test_create_cq_bad_size_is_einval),
		T(test_create_cq_comp_vector_range),
		T(test_resize_cq),
		T(test_resize_cq_keeps_queued_completions),
		T(test_destroy_cq_in_use_is_ebusy),
		T(test_comp_channel_create_destroy),
		T(test_destroy_comp_channel_with_cq_is_ebusy),
		T(test_req_notify_cq_returns_zero),
		T(test_get_cq_event_nonblocking_is_eagain),
		T(test_flushed_recv_raises_cq_event),
		T(test_unarmed_cq_raises_no_event),
		T(test_solicited_arm_fires_for_error_completion),
		T(test_cq_ex_start_poll_empty_is_enoent),
		T(test_cq_ex_reads_flushed_completions),
		T(test_cq_ex_works_with_ibv_poll_cq),
		T(test_cq_ex_unknown_wc_flag_is_eopnotsupp),
		T(test_cq_ex_with_channel_and_context),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
