/*
 * Threads on the data path: one process, QPs connected to each other in pairs, every QP
 * on the same send CQ and the same receive CQ, and several threads posting and polling at
 * once. rdma-core's verbs are thread-safe (ibv_post_send(3), ibv_poll_cq(3)); each test
 * ends with an exact count, whatever the interleaving, and every wait is bounded. Built
 * with -DSV_SANITIZE=thread it checks the library for data races.
 *
 * - Two threads each send N messages on their own QP while two more poll the shared
 *   receive CQ and repost receives: every message arrives exactly once, intact, and each
 *   sender's completions, polled by whichever sender finds them, add up.
 * - Four threads fetch-and-add on one counter, each through its own QP: the sum is exact.
 * - One thread posts while another moves the QP to ERR: every WR posted completes exactly
 *   once, in order, and no success follows a flush (IBA 10.8.3).
 * - A thread sleeping on a completion channel wakes for every message another thread
 *   sends (arm, re-poll, wait: no lost wake-up).
 * - A sleeper wakes for a send whose writer stalls after its system call while the
 *   peer's answer comes and is taken (between hosts: the acknowledgement of placement
 *   that overtakes the write's own bookkeeping; a writer preempted there once left
 *   rping's server asleep for ever).
 */
#include "verbs/sv_test_peer.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

/* Each test's bound: seconds on an idle machine; 30 s holds on a loaded 2-vCPU one, even
 * under ThreadSanitizer (which also gets fewer messages below: interleavings, not
 * volume, are what it needs). */
#define DEADLINE_MS 30000
#define MSG 64

static const struct tp_qp_opts rc64 = { .type = IBV_QPT_RC, .max_wr = 64 };

/* QP 2i sends to QP 2i+1 and back, for @pairs pairs, all on ep's CQs. */
static struct tp_ep *loop_pairs(void **state, int pairs, size_t len)
{
	struct tp_ep *ep = *state;

	tp_ep_open(ep, len, 0);
	for (int i = 0; i < 2 * pairs; i++)
		assert_int_equal(tp_ep_create_qp(ep, &rc64), i);
	for (int i = 0; i < 2 * pairs; i++) {
		struct tp_info self, peer;
		struct tu_conn c;

		tp_ep_info(ep, i, &self);
		tp_ep_info(ep, i ^ 1, &peer);
		tp_conn(ep, &self, &peer, &c);
		assert_int_equal(tu_qp_connect(ep->qp[i], &c, IBV_QPS_RTS), 0);
	}
	return ep;
}

static int ep_setup(void **state)
{
	*state = calloc(1, sizeof(struct tp_ep));
	return *state ? 0 : -1;
}

static int ep_teardown(void **state)
{
	int rc = tp_ep_close(*state);

	free(*state);
	return rc;
}

static bool late(long long end)
{
	return tu_now_ms() > end;
}

/* ---- senders and receivers on shared CQs ------------------------------------------------ */

#if defined(__SANITIZE_THREAD__)
enum { SENDERS = 2, N_MSGS = 5000, WINDOW = 32, RQ_SLOTS = 64 };
#else
enum { SENDERS = 2, N_MSGS = 20000, WINDOW = 32, RQ_SLOTS = 64 };
#endif

struct traffic {
	struct tp_ep *ep;
	long long end;
	atomic_uint sent_done[SENDERS];  /* send completions, by sender */
	atomic_uint received;            /* receive completions, all */
	atomic_uchar seen[SENDERS][N_MSGS]; /* how often each message arrived */
	atomic_int bad;                  /* receives that were not what was sent */
	atomic_int err;                  /* a call failed or a deadline passed */
};

struct sender {
	struct traffic *t;
	int id;
};

/* wr_id: bit 63 set for receives; sender in bits 32-47, sequence or slot below. */
static uint64_t wr_id(bool recv, int sender, uint32_t n)
{
	return (recv ? 1ull << 63 : 0) | (uint64_t)sender << 32 | n;
}

/* The buffer: per sender, WINDOW*2 send slots, then RQ_SLOTS receive slots. */
static unsigned char *send_slot(struct traffic *t, int s, uint32_t seq)
{
	return t->ep->buf + ((size_t)s * 2 * WINDOW + seq % (2 * WINDOW)) * MSG;
}

static unsigned char *recv_slot(struct traffic *t, int s, uint32_t slot)
{
	return t->ep->buf + ((size_t)SENDERS * 2 * WINDOW + (size_t)s * RQ_SLOTS + slot) * MSG;
}

static int post_recv_slot(struct traffic *t, int s, uint32_t slot)
{
	struct ibv_sge sge = { (uintptr_t)recv_slot(t, s, slot), MSG, t->ep->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id(true, s, slot), .sg_list = &sge, .num_sge = 1 },
			   *bad;

	return ibv_post_recv(t->ep->qp[2 * s + 1], &wr, &bad);
}

/* Polls the shared send CQ: whoever finds a completion counts it for its sender. */
static void reap_sends(struct traffic *t)
{
	struct ibv_wc wc[8];
	int n = ibv_poll_cq(t->ep->scq, 8, wc);

	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			atomic_store(&t->err, 1);
		else
			atomic_fetch_add(&t->sent_done[(wc[i].wr_id >> 32) & 0xffff], 1);
	}
	if (n < 0)
		atomic_store(&t->err, 1);
}

static void *sender_main(void *arg)
{
	struct sender *sd = arg;
	struct traffic *t = sd->t;

	for (uint32_t seq = 0; seq < N_MSGS && !atomic_load(&t->err);) {
		if (seq - atomic_load(&t->sent_done[sd->id]) < WINDOW) {
			unsigned char *m = send_slot(t, sd->id, seq);
			struct ibv_sge sge = { (uintptr_t)m, MSG, t->ep->mr->lkey };
			struct ibv_send_wr wr = { .wr_id = wr_id(false, sd->id, seq), .sg_list = &sge,
						  .num_sge = 1, .opcode = IBV_WR_SEND,
						  .send_flags = IBV_SEND_SIGNALED },
					   *bad;

			memcpy(m, &seq, 4);
			tp_fill(m + 4, MSG - 4, (uint32_t)sd->id << 24 | seq, 0);
			if (ibv_post_send(t->ep->qp[2 * sd->id], &wr, &bad))
				atomic_store(&t->err, 1);
			seq++;
		}
		reap_sends(t);
		if (late(t->end))
			atomic_store(&t->err, 2);
	}
	while (atomic_load(&t->sent_done[0]) + atomic_load(&t->sent_done[1]) < SENDERS * N_MSGS &&
	       !atomic_load(&t->err)) {
		reap_sends(t);
		if (late(t->end))
			atomic_store(&t->err, 2);
	}
	return NULL;
}

static void *receiver_main(void *arg)
{
	struct traffic *t = arg;

	while (atomic_load(&t->received) < SENDERS * N_MSGS && !atomic_load(&t->err)) {
		struct ibv_wc wc[8];
		int n = ibv_poll_cq(t->ep->rcq, 8, wc);

		for (int i = 0; i < n; i++) {
			int s = (int)((wc[i].wr_id >> 32) & 0xffff);
			uint32_t slot = (uint32_t)wc[i].wr_id, seq;
			unsigned char *m = recv_slot(t, s, slot);

			if (wc[i].status != IBV_WC_SUCCESS || s >= SENDERS || slot >= RQ_SLOTS ||
			    wc[i].byte_len != MSG || wc[i].qp_num != t->ep->qp[2 * s + 1]->qp_num) {
				atomic_store(&t->err, 3);
				break;
			}
			memcpy(&seq, m, 4);
			if (seq >= N_MSGS || tp_mismatch(m + 4, MSG - 4, (uint32_t)s << 24 | seq, 0) >= 0)
				atomic_fetch_add(&t->bad, 1);
			else
				atomic_fetch_add(&t->seen[s][seq], 1);
			/* The slot is free again once its content was read. */
			if (post_recv_slot(t, s, slot))
				atomic_store(&t->err, 4);
			atomic_fetch_add(&t->received, 1);
		}
		if (n < 0)
			atomic_store(&t->err, 5);
		if (late(t->end))
			atomic_store(&t->err, 2);
	}
	return NULL;
}

static void test_threads_send_and_receive_on_shared_cqs(void **state)
{
	struct traffic *t = calloc(1, sizeof(*t));
	struct sender sd[SENDERS];
	pthread_t th[SENDERS + 2];
	int dup = 0, missing = 0;

	assert_non_null(t);
	t->ep = loop_pairs(state, SENDERS, 1 << 20);
	t->end = tu_now_ms() + DEADLINE_MS;
	for (int s = 0; s < SENDERS; s++)
		for (uint32_t k = 0; k < RQ_SLOTS; k++)
			assert_int_equal(post_recv_slot(t, s, k), 0);
	for (int s = 0; s < SENDERS; s++) {
		sd[s] = (struct sender){ t, s };
		assert_int_equal(pthread_create(&th[s], NULL, sender_main, &sd[s]), 0);
	}
	for (int r = 0; r < 2; r++)
		assert_int_equal(pthread_create(&th[SENDERS + r], NULL, receiver_main, t), 0);
	for (int i = 0; i < SENDERS + 2; i++)
		pthread_join(th[i], NULL);
	for (int s = 0; s < SENDERS; s++)
		for (int k = 0; k < N_MSGS; k++) {
			dup += atomic_load(&t->seen[s][k]) > 1;
			missing += atomic_load(&t->seen[s][k]) == 0;
		}
	if (atomic_load(&t->err))
		fail_msg("stopped (reason %d): %u + %u sends and %u receives completed of %d each",
			 atomic_load(&t->err), atomic_load(&t->sent_done[0]),
			 atomic_load(&t->sent_done[1]), atomic_load(&t->received), N_MSGS);
	assert_int_equal(atomic_load(&t->bad), 0);
	assert_int_equal(dup, 0);
	assert_int_equal(missing, 0);
	for (int s = 0; s < SENDERS; s++)
		assert_int_equal(atomic_load(&t->sent_done[s]), N_MSGS);
	free(t);
}

/* ---- atomics from four threads ---------------------------------------------------------- */

enum { FAA_THREADS = 4, FAA_N = 3000, FAA_WINDOW = 8 };

struct adder {
	struct tp_ep *ep;
	int id;
	long long end;
	atomic_uint *done; /* completions, by thread */
	atomic_int *err;
};

static void *adder_main(void *arg)
{
	struct adder *a = arg;
	uint32_t posted = 0;
	/* Each thread's original values land in its own 8-byte slots. */
	unsigned char *res = a->ep->buf + 4096 + (size_t)a->id * FAA_WINDOW * 8;

	while (atomic_load(&a->done[a->id]) < FAA_N && !atomic_load(a->err)) {
		struct ibv_wc wc[4];
		int n;

		if (posted < FAA_N && posted - atomic_load(&a->done[a->id]) < FAA_WINDOW) {
			struct ibv_sge sge = { (uintptr_t)(res + (posted % FAA_WINDOW) * 8), 8,
					       a->ep->mr->lkey };
			struct ibv_send_wr wr = { .wr_id = (uint64_t)a->id << 32 | posted,
						  .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
						  .send_flags = IBV_SEND_SIGNALED },
					   *bad;

			wr.wr.atomic.remote_addr = (uintptr_t)a->ep->buf;
			wr.wr.atomic.rkey = a->ep->mr->rkey;
			wr.wr.atomic.compare_add = 1;
			if (ibv_post_send(a->ep->qp[2 * a->id], &wr, &bad))
				atomic_store(a->err, 1);
			posted++;
		}
		/* The send CQ is shared: completions of the others' atomics come here too. */
		n = ibv_poll_cq(a->ep->scq, 4, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_FETCH_ADD)
				atomic_store(a->err, 2);
			else
				atomic_fetch_add(&a->done[wc[i].wr_id >> 32], 1);
		}
		if (late(a->end))
			atomic_store(a->err, 3);
	}
	/* The others may still need someone to poll their completions. */
	while (!atomic_load(a->err)) {
		struct ibv_wc wc[4];
		uint32_t all = 0;
		int n;

		for (int i = 0; i < FAA_THREADS; i++)
			all += atomic_load(&a->done[i]);
		if (all == FAA_THREADS * FAA_N)
			break;
		n = ibv_poll_cq(a->ep->scq, 4, wc);
		for (int i = 0; i < n; i++)
			atomic_fetch_add(&a->done[wc[i].wr_id >> 32], 1);
		if (late(a->end))
			atomic_store(a->err, 3);
	}
	return NULL;
}

static void test_threads_add_to_one_counter(void **state)
{
	struct tp_ep *ep = loop_pairs(state, FAA_THREADS, 1 << 16);
	atomic_uint done[FAA_THREADS];
	atomic_int err = 0;
	struct adder a[FAA_THREADS];
	pthread_t th[FAA_THREADS];
	uint64_t v;

	for (int i = 0; i < FAA_THREADS; i++) {
		atomic_init(&done[i], 0);
		a[i] = (struct adder){ ep, i, tu_now_ms() + DEADLINE_MS, done, &err };
	}
	memset(ep->buf, 0, 8);
	for (int i = 0; i < FAA_THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, adder_main, &a[i]), 0);
	for (int i = 0; i < FAA_THREADS; i++)
		pthread_join(th[i], NULL);
	if (atomic_load(&err))
		fail_msg("stopped (reason %d)", atomic_load(&err));
	/* Every completion was polled: the counter is final. */
	memcpy(&v, ep->buf, 8);
	assert_int_equal(v, FAA_THREADS * FAA_N);
}

/* ---- posting while the QP enters Error --------------------------------------------------- */

struct poster {
	struct tp_ep *ep;
	atomic_bool stop;
	atomic_uint posted;
	atomic_uint polled; /* the poller's count: posting stays within the CQ's room */
	atomic_int err;
};

static void *poster_main(void *arg)
{
	struct poster *p = arg;
	uint32_t id = 0;

	while (!atomic_load(&p->stop)) {
		struct ibv_sge sge = { (uintptr_t)p->ep->buf, 256, p->ep->mr->lkey };
		/* A WR's send queue slot is free once it completes, polled or not: what keeps
		 * the CQ (4096 entries) from overrunning is the application's own count. */
		struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		int rc;

		wr.wr.rdma.remote_addr = (uintptr_t)p->ep->buf + 4096;
		wr.wr.rdma.rkey = p->ep->mr->rkey;
		if (id - atomic_load(&p->polled) >= 1024) {
			sched_yield();
			continue;
		}
		rc = ibv_post_send(p->ep->qp[0], &wr, &bad);
		if (rc == 0) {
			id++;
			atomic_store(&p->posted, id);
		} else if (rc != ENOMEM) { /* a full send queue: the poller catches up */
			atomic_store(&p->err, rc);
			break;
		}
	}
	return NULL;
}

static void test_post_while_another_thread_moves_the_qp_to_err(void **state)
{
	struct tp_ep *ep = loop_pairs(state, 1, 1 << 16);
	struct poster p = { .ep = ep };
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	long long end = tu_now_ms() + DEADLINE_MS;
	uint32_t polled = 0, ok = 0, flushed = 0, flush_from = 0;
	pthread_t th;

	assert_int_equal(pthread_create(&th, NULL, poster_main, &p), 0);
	/* Let some succeed, move to ERR from this thread, keep polling while posts go on. */
	while (polled < 2000 || atomic_load(&p.posted) < 4000 || flush_from == 0) {
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(ep->scq, 16, wc);

		assert_true(n >= 0);
		for (int i = 0; i < n; i++, polled++) {
			if (wc[i].wr_id != polled)
				fail_msg("completion %u has wr_id %llu: not in posting order", polled,
					 (unsigned long long)wc[i].wr_id);
			if (wc[i].status == IBV_WC_SUCCESS) {
				if (flushed)
					fail_msg("WR %u succeeded after WR %u was flushed", polled,
						 flush_from);
				ok++;
			} else if (wc[i].status == IBV_WC_WR_FLUSH_ERR) {
				if (!flushed++)
					flush_from = polled;
			} else {
				fail_msg("WR %u: %s", polled, ibv_wc_status_str(wc[i].status));
			}
		}
		atomic_store(&p.polled, polled);
		if (polled >= 2000 && attr.qp_state == IBV_QPS_ERR) {
			assert_int_equal(ibv_modify_qp(ep->qp[0], &attr, IBV_QP_STATE), 0);
			attr.qp_state = IBV_QPS_RESET; /* done: do not move again */
		}
		if (tu_now_ms() > end)
			fail_msg("%u of %u posted WRs completed in %d ms", polled,
				 atomic_load(&p.posted), DEADLINE_MS);
	}
	atomic_store(&p.stop, true);
	pthread_join(th, NULL);
	assert_int_equal(atomic_load(&p.err), 0);
	/* Every WR that was posted completes exactly once. */
	while (polled < atomic_load(&p.posted)) {
		struct ibv_wc wc;

		tp_expect_wc(ep->scq, polled, IBV_WC_WR_FLUSH_ERR, TP_WAIT_MS, &wc);
		polled++;
	}
	tp_expect_no_wc(ep->scq, 20, "after every posted WR completed");
	print_message("%u WRs: %u succeeded, %u flushed\n", polled, ok, polled - ok);
}

/* ---- a thread asleep on a completion channel ------------------------------------------- */

enum { CH_N = 2000 };

struct sleeper {
	struct tp_ep *ep;
	long long end;
	atomic_uint got;
	atomic_uint events;
	atomic_int err;
};

static void *sleeper_main(void *arg)
{
	struct sleeper *s = arg;

	while (atomic_load(&s->got) < CH_N && !atomic_load(&s->err)) {
		struct pollfd pfd = { .fd = s->ep->ch->fd, .events = POLLIN };
		struct ibv_wc wc[16];
		struct ibv_cq *cq;
		void *ctx;
		int n;

		/* Arm, then poll: a completion that came before arming is found here. */
		if (ibv_req_notify_cq(s->ep->rcq, 0)) {
			atomic_store(&s->err, 1);
			break;
		}
		while ((n = ibv_poll_cq(s->ep->rcq, 16, wc)) > 0) {
			for (int i = 0; i < n; i++)
				if (wc[i].status != IBV_WC_SUCCESS)
					atomic_store(&s->err, 2);
			atomic_fetch_add(&s->got, (unsigned int)n);
		}
		if (atomic_load(&s->got) >= CH_N)
			break;
		if (poll(&pfd, 1, (int)(s->end - tu_now_ms())) != 1) {
			atomic_store(&s->err, 3); /* a lost wake-up, or the deadline */
			break;
		}
		if (ibv_get_cq_event(s->ep->ch, &cq, &ctx)) {
			atomic_store(&s->err, 4);
			break;
		}
		ibv_ack_cq_events(cq, 1);
		atomic_fetch_add(&s->events, 1);
	}
	return NULL;
}

static void test_channel_sleeper_wakes_for_every_message(void **state)
{
	struct tp_ep *ep = loop_pairs(state, 1, 1 << 16);
	struct sleeper s = { .ep = ep, .end = tu_now_ms() + DEADLINE_MS };
	pthread_t th;
	uint32_t sent = 0, done = 0;

	for (uint32_t i = 0; i < 64; i++)
		assert_int_equal(tp_ep_post_recv(ep, 1, i, &(struct tp_sge){ 4096 + i * 64, 64 }, 1),
				 0);
	assert_int_equal(pthread_create(&th, NULL, sleeper_main, &s), 0);
	/* Mostly one message at a time, sent only once the sleeper has taken the one before
	 * (it is asleep, or about to be); every fourth goes without waiting. */
	while (done < CH_N && !atomic_load(&s.err) && tu_now_ms() < s.end) {
		struct tp_wr w = { .wr_id = sent, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED, .nsge = 1, .sge = { { 0, 32 } } };
		struct ibv_wc wc;

		assert_int_equal(tp_ep_post_send(ep, 0, &w, 1, NULL), 0);
		sent++;
		tp_expect_wc(ep->scq, done, IBV_WC_SUCCESS, TP_WAIT_MS, &wc);
		/* Its receive is consumed: give the receiver one more. */
		assert_int_equal(tp_ep_post_recv(ep, 1, 64 + done, &(struct tp_sge){ 4096, 64 }, 1),
				 0);
		done++;
		while (done % 4 && atomic_load(&s.got) < done && !atomic_load(&s.err) &&
		       tu_now_ms() < s.end)
			sched_yield();
	}
	pthread_join(th, NULL);
	if (atomic_load(&s.err) || atomic_load(&s.got) != CH_N)
		fail_msg("the sleeper stopped (reason %d) with %u of %d receives, %u events; %u "
			 "sends completed", atomic_load(&s.err), atomic_load(&s.got), CH_N,
			 atomic_load(&s.events), done);
	print_message("%d receives, %u wake-ups\n", CH_N, atomic_load(&s.events));
}

/* ---- the answer that overtakes the write ----------------------------------------------- */

/*
 * Two calls of the library pass through here, to set up the interleaving that once left
 * rping's server asleep for ever between hosts.
 *
 * send/sendmsg: the library's writes to its sockets (iWARP: send for one piece, sendmsg
 * for more). On a thread that set stall_ms, each returns only that long after the kernel
 * took its bytes, as from a writer preempted right after the call.
 *
 * epoll_wait: while `hold` is up, the progress thread, about to sleep, waits here first
 * (counted in `held`), so that an application thread's poll takes what arrives meanwhile
 * and the progress thread goes to sleep after it, finding nothing.
 *
 * (Under ThreadSanitizer the library makes its system calls itself and nothing passes
 * here; the test runs over iWARP only.)
 */
static _Thread_local int stall_ms;
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static bool hold;
static int held;

static struct timespec deadline_in(int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

static bool stalled; /* a writer stalls now (hold_mu) */

static void stall(void)
{
	struct timespec ts = { 0, (long)stall_ms * 1000000 };

	if (!stall_ms)
		return;
	pthread_mutex_lock(&hold_mu);
	stalled = true;
	pthread_cond_broadcast(&hold_cv);
	pthread_mutex_unlock(&hold_mu);
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	ssize_t (*real)(int, const void *, size_t, int) =
		(ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
	ssize_t n = real(fd, buf, len, flags);
	int e = errno;

	stall();
	errno = e;
	return n;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	ssize_t (*real)(int, const struct msghdr *, int) =
		(ssize_t (*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
	ssize_t n = real(fd, msg, flags);
	int e = errno;

	stall();
	errno = e;
	return n;
}

int epoll_wait(int epfd, struct epoll_event *ev, int n, int timeout)
{
	int (*real)(int, struct epoll_event *, int, int) =
		(int (*)(int, struct epoll_event *, int, int))dlsym(RTLD_NEXT, "epoll_wait");

	if (timeout) {
		pthread_mutex_lock(&hold_mu);
		if (hold) {
			struct timespec end = deadline_in(DEADLINE_MS);

			held++;
			pthread_cond_broadcast(&hold_cv);
			while (hold && pthread_cond_timedwait(&hold_cv, &hold_mu, &end) != ETIMEDOUT)
				;
			held--;
		}
		pthread_mutex_unlock(&hold_mu);
	}
	return real(epfd, ev, n, timeout);
}

static void hold_engine(bool on)
{
	pthread_mutex_lock(&hold_mu);
	hold = on;
	pthread_cond_broadcast(&hold_cv);
	pthread_mutex_unlock(&hold_mu);
}

/* Until the progress thread waits in epoll_wait's hold (bounded). */
static bool engine_held(void)
{
	struct timespec end = deadline_in(TP_WAIT_MS);
	bool ok;

	pthread_mutex_lock(&hold_mu);
	while (!held && pthread_cond_timedwait(&hold_cv, &hold_mu, &end) != ETIMEDOUT)
		;
	ok = held > 0;
	pthread_mutex_unlock(&hold_mu);
	return ok;
}

/* The application's poller: once the writer stalls (its bytes are out), polls the send
 * CQ for a while (it moves both QPs: the progress thread is held), then stops, as rping's
 * completion thread does once its CQ is empty. */
struct poller {
	struct tp_ep *ep;
	int ms;
	atomic_int got;
	bool saw_stall;
};

static void *poller_main(void *arg)
{
	struct poller *p = arg;
	struct timespec until = deadline_in(TP_WAIT_MS);
	long long end;

	pthread_mutex_lock(&hold_mu);
	while (!stalled && pthread_cond_timedwait(&hold_cv, &hold_mu, &until) != ETIMEDOUT)
		;
	p->saw_stall = stalled;
	pthread_mutex_unlock(&hold_mu);
	end = tu_now_ms() + p->ms;
	while (tu_now_ms() < end) {
		struct ibv_wc wc;

		if (ibv_poll_cq(p->ep->scq, 1, &wc) == 1)
			atomic_fetch_add(&p->got, 1);
	}
	return NULL;
}

/*
 * A signaled SEND between two QPs of this process over iWARP, its CQ armed:
 * - the progress thread is asleep (held just before it sleeps);
 * - the writer stalls 100 ms after the kernel took the SEND and its placement probe;
 * - meanwhile an application thread polls (from the stall's start: the writer's bytes
 *   are out): the peer places the SEND and answers the probe, and the poll takes the
 *   answer before the write counts the SEND as sent (it completes the SEND, which the
 *   answer says was placed, or nothing); it stops polling after 20 ms;
 * - the writer returns; the progress thread, let go, sleeps (what woke it is read).
 * The completion must still come and wake the channel (the writer wakes the progress
 * thread when it finds the acknowledgement due).
 */
static void test_sleeper_wakes_when_the_answer_overtakes_the_write(void **state)
{
	struct tp_ep *ep;

	if (!tu_wire_iwarp())
		skip(); /* the placement probe and its answer are iWARP's */
#if defined(__SANITIZE_THREAD__) /* the library's own test (src/util/sv_app.c) */
	skip(); /* the library's writes do not pass through send here: nothing stalls */
#endif
	ep = loop_pairs(state, 1, 1 << 16);
	/* The connection up, both ways, before the rounds. */
	{
		struct tp_wr first = { .wr_id = 99, .opcode = IBV_WR_SEND,
				       .send_flags = IBV_SEND_SIGNALED, .nsge = 1,
				       .sge = { { 0, 32 } } };
		struct ibv_wc wc;

		assert_int_equal(tp_ep_post_recv(ep, 1, 99, &(struct tp_sge){ 4096, 64 }, 1), 0);
		assert_int_equal(tp_ep_post_send(ep, 0, &first, 1, NULL), 0);
		tp_expect_wc(ep->scq, 99, IBV_WC_SUCCESS, TP_WAIT_MS, &wc);
		tp_expect_wc(ep->rcq, 99, IBV_WC_SUCCESS, TP_WAIT_MS, &wc);
	}
	for (int round = 0; round < 5; round++) {
		struct tp_wr warm = { .wr_id = 100 + (uint64_t)round, .opcode = IBV_WR_SEND,
				      .nsge = 1, .sge = { { 0, 32 } } };
		struct tp_wr w = { .wr_id = (uint64_t)round, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED, .nsge = 1,
				   .sge = { { 0, 32 } } };
		struct pollfd pfd = { .fd = ep->ch->fd, .events = POLLIN };
		struct poller p = { .ep = ep, .ms = 20 };
		struct ibv_wc wc;
		struct ibv_cq *cq;
		pthread_t th;
		void *ctx;
		int ready;

		/* An unsignaled SEND the progress thread moves alone; it then goes to sleep,
		 * into the hold. */
		assert_int_equal(tp_ep_post_recv(ep, 1, 100 + (uint64_t)round,
						 &(struct tp_sge){ 4096, 64 }, 1), 0);
		assert_int_equal(tp_ep_post_recv(ep, 1, (uint64_t)round,
						 &(struct tp_sge){ 4096, 64 }, 1), 0);
		hold_engine(true);
		assert_int_equal(tp_ep_post_send(ep, 0, &warm, 1, NULL), 0);
		if (!engine_held()) {
			hold_engine(false);
			fail_msg("round %d: the progress thread did not go to sleep", round);
		}
		assert_int_equal(ibv_req_notify_cq(ep->scq, 0), 0);
		stalled = false;
		assert_int_equal(pthread_create(&th, NULL, poller_main, &p), 0);
		stall_ms = 100;
		assert_int_equal(tp_ep_post_send(ep, 0, &w, 1, NULL), 0);
		stall_ms = 0;
		pthread_join(th, NULL);
		hold_engine(false);
		assert_true(p.saw_stall);
		/* The poll may complete the SEND: the peer's answer says it was placed, so the
		 * socket took it, counted or not (iw_tx_ackable). Either way the armed CQ's
		 * event comes. */
		assert_in_range(atomic_load(&p.got), 0, 1);
		/* Asleep on the channel, as rping's completion thread is. (The bound is below
		 * the 5 s of timers that would wake the progress thread anyway.) */
		ready = poll(&pfd, 1, 2000);
		if (ready != 1)
			fail_msg("round %d: no completion event within 2 s", round);
		assert_int_equal(ibv_get_cq_event(ep->ch, &cq, &ctx), 0);
		assert_ptr_equal(cq, ep->scq);
		ibv_ack_cq_events(cq, 1);
		if (!atomic_load(&p.got))
			tp_expect_wc(ep->scq, (uint64_t)round, IBV_WC_SUCCESS, TP_WAIT_MS, &wc);
		tp_expect_wc(ep->rcq, 100 + (uint64_t)round, IBV_WC_SUCCESS, TP_WAIT_MS, &wc);
		tp_expect_wc(ep->rcq, (uint64_t)round, IBV_WC_SUCCESS, TP_WAIT_MS, &wc);
	}
}

/* Lets the progress thread go after @arg ms unless told to stop first (release_stop). */
static pthread_mutex_t release_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t release_cv = PTHREAD_COND_INITIALIZER;
static bool release_stop, released;

static void *releaser_main(void *arg)
{
	struct timespec end = deadline_in((int)(intptr_t)arg);

	pthread_mutex_lock(&release_mu);
	while (!release_stop &&
	       pthread_cond_timedwait(&release_cv, &release_mu, &end) != ETIMEDOUT)
		;
	if (!release_stop) {
		released = true;
		hold_engine(false);
	}
	pthread_mutex_unlock(&release_mu);
	return NULL;
}

/*
 * A thread asleep in ibv_get_cq_event on the channel of an iWARP QP's CQ moves the QP
 * itself when its data comes (the waiter watches the QP's socket too: one wake-up per
 * message, not the progress thread's and then the application's). The progress thread
 * is held before it sleeps, so it never reads the socket: the receive's event must come
 * before a helper lets the thread go, 3 s on.
 */
static void test_channel_sleeper_moves_its_qp(void **state)
{
	struct tp_wr w = { .wr_id = 7, .opcode = IBV_WR_SEND, .nsge = 1, .sge = { { 0, 32 } } };
	struct ibv_wc wc;
	struct ibv_cq *cq;
	struct tp_ep *ep;
	pthread_t th;
	void *ctx;

	if (!tu_wire_iwarp())
		skip(); /* shm QPs have no descriptor of their own */
#if defined(__SANITIZE_THREAD__)
	skip(); /* the library's system calls do not pass through the hooks here */
#endif
	ep = loop_pairs(state, 1, 4096);
	/* The connection up, both ways. */
	assert_int_equal(tp_ep_post_recv(ep, 1, 1, &(struct tp_sge){ 1024, 64 }, 1), 0);
	assert_int_equal(tp_ep_post_send(ep, 0, &(struct tp_wr){ .wr_id = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED, .nsge = 1, .sge = { { 0, 32 } } },
				1, NULL), 0);
	tp_expect_wc(ep->scq, 1, IBV_WC_SUCCESS, TP_WAIT_MS, &wc);
	tp_expect_wc(ep->rcq, 1, IBV_WC_SUCCESS, TP_WAIT_MS, &wc);

	assert_int_equal(tp_ep_post_recv(ep, 1, 7, &(struct tp_sge){ 1024, 64 }, 1), 0);
	assert_int_equal(ibv_req_notify_cq(ep->rcq, 0), 0);
	hold_engine(true);
	if (!engine_held()) {
		hold_engine(false);
		fail_msg("the progress thread did not go to sleep");
	}
	release_stop = released = false;
	assert_int_equal(pthread_create(&th, NULL, releaser_main, (void *)(intptr_t)3000), 0);
	assert_int_equal(tp_ep_post_send(ep, 0, &w, 1, NULL), 0);
	assert_int_equal(ibv_get_cq_event(ep->ch, &cq, &ctx), 0);
	pthread_mutex_lock(&release_mu);
	release_stop = true;
	pthread_cond_broadcast(&release_cv);
	pthread_mutex_unlock(&release_mu);
	pthread_join(th, NULL);
	hold_engine(false);
	ibv_ack_cq_events(cq, 1); /* (before a failure: the teardown waits for it) */
	if (released)
		fail_msg("the receive's event came only once the progress thread was let go");
	assert_ptr_equal(cq, ep->rcq);
	tp_expect_wc(ep->rcq, 7, IBV_WC_SUCCESS, TP_WAIT_MS, &wc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, ep_setup, ep_teardown)
		T(test_threads_send_and_receive_on_shared_cqs),
		T(test_threads_add_to_one_counter),
		T(test_post_while_another_thread_moves_the_qp_to_err),
		T(test_channel_sleeper_wakes_for_every_message),
		T(test_sleeper_wakes_when_the_answer_overtakes_the_write),
		T(test_channel_sleeper_moves_its_qp),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
