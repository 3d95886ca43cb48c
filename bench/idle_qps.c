/*
 * bench/idle_qps.c — a library to LD_PRELOAD into an RDMA program: before its main it
 * opens IDLE_QPS RC QPs (default 0), connected in pairs to each other inside the
 * process and in RTS, and keeps them until the program exits. A program's figures with
 * that many QPs open beside its own (bench/manyqps.sh: ib_send_lat with 4,096 open).
 *
 *   cc -O2 -shared -fPIC -o idle_qps.so bench/idle_qps.c -libverbs
 *   IDLE_QPS=4096 LD_PRELOAD=./idle_qps.so softverbs run -- ib_send_lat ...
 *
 * It reports on stderr how many it opened; it exits the program (status 3) if it
 * could not open them all, so that no figure is taken with fewer than asked.
 */
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct ibv_context *ctx;
static struct ibv_qp **qps;

static int to_rts(struct ibv_qp *qp, uint32_t dest, const union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					 IBV_QP_ACCESS_FLAGS))
		return -1;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				  .dest_qp_num = dest, .max_dest_rd_atomic = 1,
				  .min_rnr_timer = 12,
				  .ah_attr = { .is_global = 1, .port_num = 1,
					       .grh = { .dgid = *gid, .hop_limit = 64 } } };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					 IBV_QP_MIN_RNR_TIMER))
		return -1;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				  .rnr_retry = 7, .max_rd_atomic = 1 };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

__attribute__((constructor)) static void idle_open(void)
{
	const char *env = getenv("IDLE_QPS");
	int n = env ? atoi(env) & ~1 : 0, i = -1;
	struct ibv_device **devs;
	union ibv_gid gid;
	struct ibv_pd *pd;
	struct ibv_cq *cq;

	if (n <= 0)
		return;
	devs = ibv_get_device_list(NULL);
	ctx = devs && devs[0] ? ibv_open_device(devs[0]) : NULL;
	pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	cq = ctx ? ibv_create_cq(ctx, 1, NULL, NULL, 0) : NULL;
	qps = calloc((size_t)n, sizeof(*qps));
	if (!pd || !cq || !qps || ibv_query_gid(ctx, 1, 0, &gid))
		goto fail;
	for (i = 0; i < n; i++) {
		struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					      .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						       .max_send_sge = 1, .max_recv_sge = 1 } };

		qps[i] = ibv_create_qp(pd, &a);
		if (!qps[i])
			goto fail;
	}
	for (i = 0; i < n; i++)
		if (to_rts(qps[i], qps[i ^ 1]->qp_num, &gid))
			goto fail;
	fprintf(stderr, "idle_qps: %d RC QPs open (pid %d)\n", n, (int)getpid());
	return;
fail:
	fprintf(stderr, "idle_qps: could not open %d QPs (at %d, ctx %p pd %p cq %p): %s\n", n, i, (void *)ctx, (void *)pd, (void *)cq, strerror(errno));
	exit(3);
}
