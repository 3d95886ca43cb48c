/*
 * Thousands of QPs under the common descriptor limit (RLIMIT_NOFILE 1024, soft and
 * hard, as `ulimit -n 1024` sets it): two processes each create SV_MANY_QPS RC QPs,
 * connect them pairwise and move a checked message each way on every one. A QP costs
 * no descriptor of its own (docs/architecture.md, "QPs without descriptors"); a NIC
 * spends none either. The peer is this program again (exec'd with --peer), so it
 * inherits no library state.
 *
 * Then a process that creates QPs until its descriptors run out: creation fails
 * cleanly (NULL with EMFILE), and the QPs it had keep working.
 */
#include "verbs/sv_test_util.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#define SV_MANY_QPS 4096
#define MSG 64
#define WAIT_MS 60000

/* What each side tells the other. */
struct side_info {
	uint32_t n;
	union ibv_gid gid;
	uint32_t qpn[SV_MANY_QPS];
};

/* This process's resident memory, KiB (VmRSS), or -1. */
static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[128];
	long kib = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

/* Reads or writes all of @len on the stream @fd within WAIT_MS: 0 or -1. */
static int xfer(int fd, void *buf, size_t len, bool out)
{
	long long end = tu_now_ms() + WAIT_MS;
	char *p = buf;

	while (len) {
		struct pollfd pf = { .fd = fd, .events = out ? POLLOUT : POLLIN };
		long long left = end - tu_now_ms();
		ssize_t r;

		if (left <= 0 || poll(&pf, 1, (int)left) != 1)
			return -1;
		r = out ? write(fd, p, len) : read(fd, p, len);
		if (r <= 0)
			return -1;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	unsigned char *buf; /* n receive slots, then n send slots, MSG bytes each */
	int n;
	struct ibv_qp **qp;
	struct side_info info;
	char err[256];
};

#define FAIL(s, ...) (snprintf((s)->err, sizeof((s)->err), __VA_ARGS__), -1)

static int side_open(struct side *s, int n)
{
	struct ibv_port_attr port;

	s->n = n;
	s->ctx = tu_open();
	if (!s->ctx)
		return FAIL(s, "no device");
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 2 * n, NULL, NULL, 0);
	s->buf = calloc((size_t)n * 2, MSG);
	s->qp = calloc((size_t)n, sizeof(*s->qp));
	if (!s->pd || !s->cq || !s->buf || !s->qp)
		return FAIL(s, "pd, cq or memory: errno %d", errno);
	s->mr = ibv_reg_mr(s->pd, s->buf, (size_t)n * 2 * MSG, IBV_ACCESS_LOCAL_WRITE);
	if (!s->mr || ibv_query_port(s->ctx, 1, &port) || ibv_query_gid(s->ctx, 1, 0, &s->info.gid))
		return FAIL(s, "mr, port or gid: errno %d", errno);
	for (int i = 0; i < n; i++) {
		struct ibv_qp_init_attr a = { .send_cq = s->cq, .recv_cq = s->cq,
					      .qp_type = IBV_QPT_RC,
					      .cap = { .max_send_wr = 2, .max_recv_wr = 2,
						       .max_send_sge = 1, .max_recv_sge = 1 } };

		s->qp[i] = ibv_create_qp(s->pd, &a);
		if (!s->qp[i])
			return FAIL(s, "qp %d of %d: %s (%d descriptors open)", i, n,
				    strerror(errno), tu_fd_count());
		s->info.qpn[i] = s->qp[i]->qp_num;
	}
	s->info.n = (uint32_t)n;
	return 0;
}

/* INIT, RTR towards @dest (on this host: @gid), RTS: 0, or the failing step's name. */
static const char *connect_qp(struct ibv_qp *qp, uint32_t dest, const union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					 IBV_QP_ACCESS_FLAGS))
		return "INIT";
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				  .dest_qp_num = dest, .rq_psn = 0, .max_dest_rd_atomic = 1,
				  .min_rnr_timer = 12,
				  .ah_attr = { .is_global = 1, .port_num = 1,
					       .grh = { .dgid = *gid, .hop_limit = 64 } } };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					 IBV_QP_MIN_RNR_TIMER))
		return "RTR";
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				  .rnr_retry = 7, .sq_psn = 0, .max_rd_atomic = 1 };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return "RTS";
	return NULL;
}

/* Posts QP i's receive into slot @slot of the receive half of the buffer. */
static int post_recv_slot(struct side *s, struct ibv_qp *qp, int slot)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf + (size_t)slot * MSG, .length = MSG,
			       .lkey = s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)slot, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

/* Connects QP i to the peer's QP i and posts its receive. */
static int side_connect(struct side *s, const struct side_info *peer)
{
	for (int i = 0; i < s->n; i++) {
		const char *step = connect_qp(s->qp[i], peer->qpn[i], &peer->gid);

		if (step)
			return FAIL(s, "qp %d to %s: %s (%d descriptors open)", i, step,
				    strerror(errno), tu_fd_count());
		if (post_recv_slot(s, s->qp[i], i))
			return FAIL(s, "qp %d post_recv", i);
	}
	return 0;
}

static void pattern(unsigned char *p, int side, int i)
{
	for (int k = 0; k < MSG; k++)
		p[k] = (unsigned char)(side * 131 + i * 7 + k);
}

/* Sends on every QP, takes every completion, checks every message from the peer. */
static int side_exchange(struct side *s, int me)
{
	int sends = 0, recvs = 0;
	long long end = tu_now_ms() + WAIT_MS;
	struct ibv_wc wc[64];

	for (int i = 0; i < s->n; i++) {
		unsigned char *p = s->buf + (size_t)(s->n + i) * MSG;
		struct ibv_sge sge = { .addr = (uintptr_t)p, .length = MSG, .lkey = s->mr->lkey };
		struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;

		pattern(p, me, i);
		if (ibv_post_send(s->qp[i], &wr, &bad))
			return FAIL(s, "qp %d post_send", i);
	}
	while (sends < s->n || recvs < s->n) {
		int got = ibv_poll_cq(s->cq, 64, wc);

		if (got < 0)
			return FAIL(s, "poll_cq %d", got);
		for (int k = 0; k < got; k++) {
			int i = (int)wc[k].wr_id;
			unsigned char want[MSG];

			if (wc[k].status != IBV_WC_SUCCESS)
				return FAIL(s, "qp %d: %s", i, ibv_wc_status_str(wc[k].status));
			if (wc[k].opcode != IBV_WC_RECV) {
				sends++;
				continue;
			}
			recvs++;
			pattern(want, !me, i);
			if (wc[k].byte_len != MSG || memcmp(s->buf + (size_t)i * MSG, want, MSG))
				return FAIL(s, "qp %d: the message is not the peer's", i);
		}
		if (!got && tu_now_ms() > end)
			return FAIL(s, "%d sends and %d receives of %d in %d ms", sends, recvs,
				    s->n, WAIT_MS);
	}
	return 0;
}

static void side_close(struct side *s)
{
	for (int i = 0; s->qp && i < s->n; i++)
		if (s->qp[i])
			ibv_destroy_qp(s->qp[i]);
	if (s->mr)
		ibv_dereg_mr(s->mr);
	if (s->cq)
		ibv_destroy_cq(s->cq);
	if (s->pd)
		ibv_dealloc_pd(s->pd);
	if (s->ctx)
		ibv_close_device(s->ctx);
	free(s->qp);
	free(s->buf);
}

/* One side's run over the stream @fd; the peer's info comes after ours goes. */
static int run_side(struct side *s, int fd, int me)
{
	static struct side_info peer;
	char sync = 1;

	if (side_open(s, SV_MANY_QPS))
		return -1;
	if (xfer(fd, &s->info, sizeof(s->info), true) || xfer(fd, &peer, sizeof(peer), false))
		return FAIL(s, "the exchange of QP numbers failed");
	if (peer.n != (uint32_t)s->n)
		return FAIL(s, "the peer has %u QPs", peer.n);
	if (side_connect(s, &peer))
		return -1;
	/* Every receive is posted on both sides before anyone sends. */
	if (xfer(fd, &sync, 1, true) || xfer(fd, &sync, 1, false))
		return FAIL(s, "the peer did not connect");
	return side_exchange(s, me);
}

static int peer_main(int fd)
{
	struct side s = { 0 };
	int r;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	r = run_side(&s, fd, 1);
	if (r)
		fprintf(stderr, "peer: %s\n", s.err);
	(void)!write(fd, &r, sizeof(r));
	side_close(&s);
	return r ? 1 : 0;
}

static void limit_descriptors(rlim_t n)
{
	struct rlimit rl = { .rlim_cur = n, .rlim_max = n };
	struct rlimit now;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &now), 0);
	if (now.rlim_max < n)
		rl.rlim_max = rl.rlim_cur = now.rlim_max;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

static void test_4096_rc_qps_under_1024_descriptors(void **state)
{
	static struct side s;
	int sv[2], r = -1, status, fds0;
	long rss0;
	pid_t pid;
	(void)state;
	limit_descriptors(1024);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* dup2 clears close-on-exec: the peer finds the socket at 103. */
		if (dup2(sv[1], 103) == 103)
			execl("/proc/self/exe", "test_many_qps", "--peer", "103", (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	fds0 = tu_fd_count();
	rss0 = rss_kib();
	if (run_side(&s, sv[0], 0))
		fail_msg("%s", s.err);
	print_message("%d RC QPs connected, a message each way on every one: %d descriptors "
		      "more than before (%d open), %.1f KiB more resident per QP\n", s.n,
		      tu_fd_count() - fds0, tu_fd_count(), (double)(rss_kib() - rss0) / s.n);
	assert_int_equal(xfer(sv[0], &r, sizeof(r), false), 0);
	assert_int_equal(r, 0);
	side_close(&s);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(sv[0]);
}

/*
 * QPs created until the descriptors run out (a soft limit a few above what the process
 * holds: each new block of 256 QP numbers takes two): the create that cannot have one
 * fails with EMFILE, nothing else; the first and the last QP created still connect (QPs
 * of one process need no descriptor to) and move a checked message each way; with the
 * limit back, a create succeeds again.
 */
static void test_qps_until_descriptors_run_out(void **state)
{
	enum { MAX = 16384 };
	static struct side s;
	struct rlimit orig, tight;
	struct ibv_qp *extra;
	int n, err = 0;

	(void)state;
	if (side_open(&s, 2) || !(s.qp = realloc(s.qp, MAX * sizeof(*s.qp))))
		fail_msg("%s", s.err);
	/* Its two QPs go: the buffer's four slots serve the test. */
	assert_int_equal(ibv_destroy_qp(s.qp[0]), 0);
	assert_int_equal(ibv_destroy_qp(s.qp[1]), 0);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &orig), 0);
	tight = orig;
	tight.rlim_cur = (rlim_t)tu_fd_count() + 6;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &tight), 0);
	for (n = 0; n < MAX; n++) {
		struct ibv_qp_init_attr a = { .send_cq = s.cq, .recv_cq = s.cq,
					      .qp_type = IBV_QPT_RC,
					      .cap = { .max_send_wr = 2, .max_recv_wr = 2,
						       .max_send_sge = 1, .max_recv_sge = 1 } };

		s.qp[n] = ibv_create_qp(s.pd, &a);
		if (!s.qp[n]) {
			err = errno;
			break;
		}
	}
	s.n = n;
	if (n == 0 || n == MAX)
		fail_msg("%d QPs created under a limit of %llu descriptors: want some, then a "
			 "failure", n, (unsigned long long)tight.rlim_cur);
	if (err != EMFILE)
		fail_msg("create %d failed with %s, want EMFILE", n, strerror(err));
	/* The first and the last, at the limit still. */
	{
		const char *step = connect_qp(s.qp[0], s.qp[n - 1]->qp_num, &s.info.gid);

		if (!step)
			step = connect_qp(s.qp[n - 1], s.qp[0]->qp_num, &s.info.gid);
		if (step)
			fail_msg("at the limit, after %d QPs: to %s: %s", n, step, strerror(errno));
	}
	assert_int_equal(post_recv_slot(&s, s.qp[0], 0), 0);
	assert_int_equal(post_recv_slot(&s, s.qp[n - 1], 1), 0);
	for (int k = 0; k < 2; k++) {
		unsigned char *p = s.buf + (size_t)(2 + k) * MSG;
		struct ibv_sge sge = { .addr = (uintptr_t)p, .length = MSG, .lkey = s.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 10 + (uint64_t)k, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;

		pattern(p, k, n);
		assert_int_equal(ibv_post_send(k ? s.qp[n - 1] : s.qp[0], &wr, &bad), 0);
	}
	{
		struct ibv_wc wc[4];
		unsigned char want[MSG];

		assert_int_equal(tu_poll(s.cq, 4, wc, WAIT_MS), 4);
		for (int i = 0; i < 4; i++)
			if (wc[i].status != IBV_WC_SUCCESS)
				fail_msg("at the limit: WR %llu %s", (unsigned long long)wc[i].wr_id,
					 ibv_wc_status_str(wc[i].status));
		/* Slot 0 is the first QP's receive: the last QP's message (k = 1), and back. */
		pattern(want, 1, n);
		assert_memory_equal(s.buf, want, MSG);
		pattern(want, 0, n);
		assert_memory_equal(s.buf + MSG, want, MSG);
	}
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &orig), 0);
	{
		struct ibv_qp_init_attr a = { .send_cq = s.cq, .recv_cq = s.cq,
					      .qp_type = IBV_QPT_RC,
					      .cap = { .max_send_wr = 2, .max_recv_wr = 2,
						       .max_send_sge = 1, .max_recv_sge = 1 } };

		extra = ibv_create_qp(s.pd, &a);
		if (!extra)
			fail_msg("with the limit back, a create failed: %s", strerror(errno));
		assert_int_equal(ibv_destroy_qp(extra), 0);
	}
	print_message("%d QPs under a limit of %llu descriptors, then EMFILE\n", n,
		      (unsigned long long)tight.rlim_cur);
	side_close(&s);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		/* First: the other lowers the hard limit too. */
		cmocka_unit_test(test_qps_until_descriptors_run_out),
		cmocka_unit_test(test_4096_rc_qps_under_1024_descriptors),
	};

	if (argc == 3 && !strcmp(argv[1], "--peer")) {
		int fd = atoi(argv[2]);

		return peer_main(fd);
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
