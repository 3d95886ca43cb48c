/*
 * bench/shm_cycle.c — the CPU cost of softverbs' small-message path on one host, without
 * the second CPU: two RC QPs of this process connected to each other over the shm wire,
 * and in a loop a receive posted on one, a 2-byte inline SEND posted on the other, its
 * receive completion polled, then its send completion (the peer's acknowledgement).
 * Everything one ping-pong message costs both processes (post, transmit, receive, CQE,
 * acknowledgement, completion) runs on one CPU, with no cache line crossing between
 * CPUs: what is left is instructions, which is what a change to the data path moves.
 * It also times an empty poll_cq (the busy-poll loop's step).
 *
 * Each figure is the best of --reps repetitions of --iters iterations (ns per
 * iteration). Under callgrind the instruction count is exact and free of the machine's
 * noise, so two builds compare to the instruction:
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -o /tmp/shm_cycle bench/shm_cycle.c -libverbs
 *   taskset -c 1 build/bin/softverbs run --no-view /tmp/shm_cycle
 *   build/bin/softverbs run --no-view -- valgrind --tool=callgrind \
 *       --callgrind-out-file=/tmp/cg.%p /tmp/shm_cycle --iters 100000 --reps 3
 *   callgrind_annotate /tmp/cg.PID | head -30     # PROGRAM TOTALS / (2 * reps * iters)
 */
#include <infiniband/verbs.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "shm_cycle: %s failed\n", what);
	exit(1);
}

static void move_to(struct ibv_qp *qp, enum ibv_qp_state state, uint32_t dest_qpn,
		    const union ibv_gid *gid, int gid_index)
{
	struct ibv_qp_attr a = { .qp_state = state };
	int mask = IBV_QP_STATE;

	if (state == IBV_QPS_INIT) {
		a.port_num = 1;
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (state == IBV_QPS_RTR) {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = dest_qpn;
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = 1;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *gid;
		a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	} else {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	if (ibv_modify_qp(qp, &a, mask))
		die("ibv_modify_qp");
}

/* The loopback GID (::ffff:127.0.0.1): both QPs are of this host. */
static int loopback_gid(struct ibv_context *ctx, union ibv_gid *gid)
{
	static const uint8_t lo[16] = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 };

	for (int i = 0; i < 64; i++)
		if (!ibv_query_gid(ctx, 1, i, gid) && !memcmp(gid->raw, lo, 16))
			return i;
	die("finding the loopback GID");
	return -1;
}

int main(int argc, char **argv)
{
	long iters = 1000000, reps = 3;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
			iters = atol(argv[++i]);
		} else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
			reps = atol(argv[++i]);
		} else {
			fprintf(stderr, "usage: shm_cycle [--iters N] [--reps N]\n");
			return 2;
		}
	}
	if (iters < 1 || reps < 1)
		die("the arguments");

	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq_a = pd ? ibv_create_cq(ctx, 64, NULL, NULL, 0) : NULL;
	struct ibv_cq *cq_b = cq_a ? ibv_create_cq(ctx, 64, NULL, NULL, 0) : NULL;

	if (!cq_b)
		die("opening softverbs0");
	struct ibv_qp_init_attr ia = {
		.send_cq = cq_a, .recv_cq = cq_a, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = 64 },
	};
	struct ibv_qp *a = ibv_create_qp(pd, &ia);

	ia.send_cq = ia.recv_cq = cq_b;
	struct ibv_qp *b = ibv_create_qp(pd, &ia);
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	union ibv_gid gid;
	int gi;

	if (!a || !b || !mr)
		die("creating the QPs");
	gi = loopback_gid(ctx, &gid);
	move_to(a, IBV_QPS_INIT, 0, NULL, 0);
	move_to(b, IBV_QPS_INIT, 0, NULL, 0);
	move_to(a, IBV_QPS_RTR, b->qp_num, &gid, gi);
	move_to(b, IBV_QPS_RTR, a->qp_num, &gid, gi);
	move_to(a, IBV_QPS_RTS, 0, NULL, 0);
	move_to(b, IBV_QPS_RTS, 0, NULL, 0);

	struct ibv_sge s_sge = { .addr = (uintptr_t)buf, .length = 2, .lkey = mr->lkey };
	struct ibv_sge r_sge = { .addr = (uintptr_t)buf + 32, .length = 32, .lkey = mr->lkey };
	struct ibv_send_wr swr = { .sg_list = &s_sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE };
	struct ibv_recv_wr rwr = { .sg_list = &r_sge, .num_sge = 1 };
	struct ibv_send_wr *bad_s;
	struct ibv_recv_wr *bad_r;
	struct ibv_wc wc;
	double empty = 1e30, cycle = 1e30;

	for (long r = 0; r < reps; r++) {
		double t = now_ns();

		for (long i = 0; i < iters; i++)
			if (ibv_poll_cq(cq_a, 1, &wc))
				die("an empty poll_cq");
		t = (now_ns() - t) / (double)iters;
		if (t < empty)
			empty = t;
	}
	for (long r = 0; r < reps; r++) {
		double t = now_ns();

		for (long i = 0; i < iters; i++) {
			int n;

			if (ibv_post_recv(b, &rwr, &bad_r) || ibv_post_send(a, &swr, &bad_s))
				die("posting");
			while (!(n = ibv_poll_cq(cq_b, 1, &wc)))
				;
			if (n < 0 || wc.status != IBV_WC_SUCCESS || wc.byte_len != 2)
				die("the receive completion");
			while (!(n = ibv_poll_cq(cq_a, 1, &wc)))
				;
			if (n < 0 || wc.status != IBV_WC_SUCCESS)
				die("the send completion");
		}
		t = (now_ns() - t) / (double)iters;
		if (t < cycle)
			cycle = t;
	}
	printf("empty poll_cq: %.1f ns\n", empty);
	printf("send, receive, completion: %.1f ns\n", cycle);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq_a);
	ibv_destroy_cq(cq_b);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
