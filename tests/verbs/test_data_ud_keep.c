/*
 * A UD receiver without a posted receive, on one host (two UD QPs of this process).
 *
 * What is asserted:
 * - a datagram that arrives while no receive is posted is kept a moment, not dropped at
 *   once: the receiver's poll finds nothing, a receive posted then takes it (a program
 *   asleep on its completion channel reposts late; ib_send_bw -c UD -e never finished
 *   when the progress thread dropped what came meanwhile);
 * - a receiver that posts none does not hold its sender up: 100 datagrams of 4 KiB (three
 *   times what the receiver's fifo holds) all complete at the sender, the receiver counts
 *   them dropped (softverbs_query_qp_stats rx_dropped), and a datagram sent after it posts
 *   a receive arrives, with its data (IBA 9.7.5.1.5: unreliable service drops what finds
 *   no receive); so too when the sender polls seldom or sleeps on its completion
 *   channel, and the progress thread, moving the receiver alone, sleeps between
 *   datagrams (a dropping receiver once armed nothing, and slept through the rest).
 */
#include "verbs/sv_test_util.h"

#include <poll.h>
#include <softverbs/softverbs.h>
#include <stdlib.h>
#include <string.h>

enum { LEN = 4096, GRH = 40, MANY = 100 };
#define QKEY 0x11111111u

struct ud {
	struct tu_res *res;
	enum waits { BUSY, SLOW, CHANNEL } waits; /* how the sender waits for completions */
	struct ibv_comp_channel *ch;              /* the sender's (CHANNEL) */
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *a, *b;
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	unsigned char *buf; /* [0, LEN): a's sends; [LEN, 2 LEN + GRH): b's receive */
};

static struct ibv_qp *ud_qp(struct ud *u, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = MANY, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(u->res->pd, &init);
	struct tu_conn c;

	assert_non_null(qp);
	tu_conn_init(&c, u->res, 0);
	c.qkey = QKEY;
	assert_int_equal(tu_qp_connect(qp, &c, IBV_QPS_RTS), 0);
	return qp;
}

static int setup_with(void **state, enum waits waits)
{
	struct ud *u = calloc(1, sizeof(*u));
	struct ibv_ah_attr ah;

	if (!u)
		return -1;
	u->res = tu_res_open();
	assert_non_null(u->res);
	u->waits = waits;
	if (waits == CHANNEL) {
		u->ch = ibv_create_comp_channel(u->res->ctx);
		assert_non_null(u->ch);
	}
	u->scq = ibv_create_cq(u->res->ctx, MANY + 4, NULL, u->ch, 0);
	u->rcq = ibv_create_cq(u->res->ctx, 8, NULL, NULL, 0);
	assert_non_null(u->scq);
	assert_non_null(u->rcq);
	u->a = ud_qp(u, u->scq);
	u->b = ud_qp(u, u->rcq);
	tu_fill_ah(u->res, &ah);
	u->ah = ibv_create_ah(u->res->pd, &ah);
	assert_non_null(u->ah);
	u->buf = calloc(1, 2 * LEN + GRH);
	assert_non_null(u->buf);
	u->mr = ibv_reg_mr(u->res->pd, u->buf, 2 * LEN + GRH, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(u->mr);
	*state = u;
	return 0;
}

static int setup(void **state)
{
	return setup_with(state, BUSY);
}

static int setup_slow(void **state)
{
	return setup_with(state, SLOW);
}

static int setup_channel(void **state)
{
	return setup_with(state, CHANNEL);
}

static int teardown(void **state)
{
	struct ud *u = *state;

	ibv_dereg_mr(u->mr);
	ibv_destroy_ah(u->ah);
	ibv_destroy_qp(u->a);
	ibv_destroy_qp(u->b);
	ibv_destroy_cq(u->scq);
	ibv_destroy_cq(u->rcq);
	if (u->ch)
		ibv_destroy_comp_channel(u->ch);
	free(u->buf);
	tu_res_close(u->res);
	free(u);
	return 0;
}

/* a sends LEN bytes of @fill to b (signaled: wr_id @id). */
static void send_one(struct ud *u, uint64_t id, unsigned char fill)
{
	struct ibv_sge sge = { .addr = (uintptr_t)u->buf, .length = LEN, .lkey = u->mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.ud = { .ah = u->ah, .remote_qpn = u->b->qp_num, .remote_qkey = QKEY },
	}, *bad;

	memset(u->buf, fill, LEN);
	assert_int_equal(ibv_post_send(u->a, &wr, &bad), 0);
}

static void post_recv(struct ud *u)
{
	struct ibv_sge sge = { .addr = (uintptr_t)u->buf + LEN, .length = LEN + GRH,
			       .lkey = u->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;

	memset(u->buf + LEN, 0, LEN + GRH);
	assert_int_equal(ibv_post_recv(u->b, &wr, &bad), 0);
}

/* b's receive completes with LEN bytes of @fill behind the GRH. */
static void expect_recv(struct ud *u, unsigned char fill)
{
	struct ibv_wc wc;

	assert_int_equal(tu_poll_exact(u->rcq, 1, &wc, 5000), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 7);
	assert_int_equal(wc.byte_len, LEN + GRH);
	for (int i = 0; i < LEN; i++)
		if (u->buf[LEN + GRH + i] != fill)
			fail_msg("byte %d of the datagram is %#x, sent %#x", i,
				 u->buf[LEN + GRH + i], fill);
}

static void test_datagram_waits_for_a_late_receive(void **state)
{
	struct ud *u = *state;
	struct ibv_wc wc;

	send_one(u, 1, 0x5a);
	assert_int_equal(tu_poll_exact(u->scq, 1, &wc, 5000), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	/* The receiver looks (its poll moves its QP) with no receive posted, then posts. */
	assert_int_equal(ibv_poll_cq(u->rcq, 1, &wc), 0);
	post_recv(u);
	expect_recv(u, 0x5a);
}

static uint64_t dropped(struct ibv_qp *qp)
{
	struct softverbs_qp_stats st;

	assert_int_equal(softverbs_query_qp_stats(qp, &st, sizeof(st)), 0);
	return st.rx_dropped;
}

/*
 * The sender's send completions, all MANY of them within 10 s: busy-polled; polled once
 * a millisecond (too seldom for the progress thread to judge the application busy: it
 * sleeps whenever it finds nothing to do, while the polls move the sender); or waited for
 * asleep on a channel. The receiver is the progress thread's alone.
 */
static void sends_complete(struct ud *u)
{
	struct ibv_wc wc[MANY];
	long long end = tu_now_ms() + 10000;
	int done = 0;

	while (done < MANY && tu_now_ms() < end) {
		struct pollfd pfd = { .fd = u->ch ? u->ch->fd : -1, .events = POLLIN };
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		int n;

		if (u->ch)
			assert_int_equal(ibv_req_notify_cq(u->scq, 0), 0);
		n = ibv_poll_cq(u->scq, MANY, wc);
		assert_true(n >= 0);
		for (int i = 0; i < n; i++)
			assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
		done += n;
		if (u->waits == SLOW)
			(void)poll(NULL, 0, 1);
		if (u->waits != CHANNEL || n || done == MANY)
			continue;
		if (poll(&pfd, 1, (int)(end - tu_now_ms() > 0 ? end - tu_now_ms() : 0)) == 1) {
			assert_int_equal(ibv_get_cq_event(u->ch, &ev_cq, &ev_ctx), 0);
			ibv_ack_cq_events(ev_cq, 1);
		}
	}
	if (done < MANY)
		fail_msg("%d of %d datagrams completed at the sender in 10 s (%llu dropped)",
			 done, MANY, (unsigned long long)dropped(u->b));
}

static void test_receiver_without_receives_drops_and_goes_on(void **state)
{
	struct ud *u = *state;
	struct ibv_wc wc[1];
	long long end;

	for (int i = 0; i < MANY; i++)
		send_one(u, 100 + (uint64_t)i, 0x11);
	/* Every send completes (the receiver's fifo holds a third of them): none waits for
	 * the receiver for good. */
	sends_complete(u);
	/* The receiver (moved by its own polls too) drops them all, counted. */
	end = tu_now_ms() + 10000;
	while (dropped(u->b) < MANY && tu_now_ms() < end)
		assert_int_equal(ibv_poll_cq(u->rcq, 1, wc), 0);
	assert_int_equal(dropped(u->b), MANY);
	/* It posts a receive: the next datagram arrives. */
	post_recv(u);
	send_one(u, 200, 0xc3);
	assert_int_equal(tu_poll_exact(u->scq, 1, wc, 5000), 1);
	expect_recv(u, 0xc3);
	assert_int_equal(dropped(u->b), MANY);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_datagram_waits_for_a_late_receive, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_receiver_without_receives_drops_and_goes_on,
						setup, teardown),
		/* The progress thread sleeps between wake-ups, and must be woken by every
		 * datagram the receiver is to drop once it stops keeping them. */
		cmocka_unit_test_setup_teardown(test_receiver_without_receives_drops_and_goes_on,
						setup_slow, teardown),
		cmocka_unit_test_setup_teardown(test_receiver_without_receives_drops_and_goes_on,
						setup_channel, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
