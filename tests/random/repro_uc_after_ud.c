/* Reproducer (not built, not a test) for a loss random_verbs found once in ~5 M ops
 * (seed 0xaf20d0323f12da10 op 130829, bounce copy; not replayable: timing):
 * a UC SEND on a fresh connection between two processes, right after a UD pair of the
 * same two processes that exchanged datagrams was destroyed (the new QPs reuse the
 * numbers), completes at the sender but never reaches the posted receive.
 *   gcc -o uc_after_ud repro_uc_after_ud.c -Lbuild/lib -libverbs -Wl,-rpath,$PWD/build/lib
 *   SOFTVERBS_SHM_COPY=bounce ./uc_after_ud 20000 [refuse]
 * Seen: 2 lost of 80,000 rounds (bounce, 2 at a time on a loaded 2-CPU host); 0 of
 * 73,000 without the UD phase, 0 of 20,000 on CMA. */
#include <infiniband/verbs.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

struct info { uint32_t qpn; union ibv_gid gid; uint16_t lid; };
static struct ibv_context *ctx; static struct ibv_pd *pd; static struct ibv_cq *cq;
static union ibv_gid gid; static struct ibv_port_attr port;
static char buf[4096]; static struct ibv_mr *mr;

static long long ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000LL + t.tv_nsec / 1000000; }

static struct ibv_qp *mk(void)
{
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UC, .sq_sig_all = 1,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) abort();
	return qp;
}

static void go(struct ibv_qp *qp, struct info *p)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = p->qpn, .rq_psn = 1,
		.ah_attr = { .is_global = 1, .grh = { .dgid = p->gid, .hop_limit = 64 }, .dlid = p->lid, .port_num = 1 } };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)) abort();
	a.qp_state = IBV_QPS_RTS; a.sq_psn = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) abort();
}

static void xfer(int fd, void *out, void *in, size_t n);

/* UD QPs on both sides, one datagram each way, then destroyed. */
static void ud_phase(int fd, int child)
{
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .sq_sig_all = 1,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x1111 };
	struct info me, peer;
	struct ibv_ah_attr aa = { .is_global = 1, .grh = { .dgid = gid, .hop_limit = 64 }, .dlid = port.lid, .port_num = 1 };
	struct ibv_ah *ah;
	struct ibv_sge sg = { (uintptr_t)buf + 1024, 100, mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &sg, .num_sge = 1 }, *rbad;
	struct ibv_send_wr wr = { .wr_id = 8, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;
	struct ibv_wc wc;
	char ok = 1;
	int got = 0;
	long long end;

	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) abort();
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) abort();
	a.qp_state = IBV_QPS_RTS; a.sq_psn = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) abort();
	ah = ibv_create_ah(pd, &aa);
	if (!ah || ibv_post_recv(qp, &rwr, &rbad)) abort();
	me = (struct info){ qp->qp_num, gid, port.lid };
	xfer(fd, &me, &peer, sizeof(me));
	wr.wr.ud.ah = ah; wr.wr.ud.remote_qpn = peer.qpn; wr.wr.ud.remote_qkey = 0x1111;
	sg.length = 50;
	if (ibv_post_send(qp, &wr, &bad)) abort();
	end = ms() + 5000;
	while (got < 2 && ms() < end) { if (ibv_poll_cq(cq, 1, &wc) == 1) { if (wc.status) abort(); got++; } else sched_yield(); }
	if (got < 2) fprintf(stderr, "UD phase: %d of 2 completions\n", got);
	xfer(fd, &ok, &ok, 1);
	ibv_destroy_ah(ah);
	ibv_destroy_qp(qp);
	(void)child;
}

static void xfer(int fd, void *out, void *in, size_t n)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	if (out && send(fd, out, n, 0) != (ssize_t)n) exit(3);
	if (in && (poll(&p, 1, 10000) != 1 || recv(fd, in, n, 0) != (ssize_t)n)) { fprintf(stderr, "peer gone\n"); exit(3); }
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 1000, refuse = argc > 2, sv[2], lost = 0;
	socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv);
	pid_t pid = fork();
	int child = pid == 0, fd = child ? sv[1] : sv[0];
	if (child) prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct ibv_device **l = ibv_get_device_list(NULL);
	ctx = ibv_open_device(l[0]); pd = ibv_alloc_pd(ctx); cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	ibv_query_port(ctx, 1, &port); ibv_query_gid(ctx, 1, 0, &gid);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	for (int r = 0; r < rounds; r++) {
		ud_phase(fd, child);
		struct ibv_qp *qp = mk();
		struct info me = { qp->qp_num, gid, port.lid }, peer;
		struct ibv_sge sg = { (uintptr_t)buf, 18, mr->lkey };
		struct ibv_wc wc;
		char ok = 1;
		xfer(fd, &me, &peer, sizeof(me));
		go(qp, &peer);
		if (child) {
			struct ibv_recv_wr wr = { .wr_id = r, .sg_list = &sg, .num_sge = 1 }, *bad;
			if (ibv_post_recv(qp, &wr, &bad)) abort();
		}
		xfer(fd, &ok, &ok, 1); /* both in RTS, the receive posted */
		if (!child) {
			struct ibv_send_wr wr = { .wr_id = r, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_READ }, *bad;
			if (refuse && ibv_post_send(qp, &wr, &bad) != EINVAL) abort();
			wr.opcode = IBV_WR_SEND;
			if (ibv_post_send(qp, &wr, &bad)) abort();
			long long end = ms() + 5000;
			while (ibv_poll_cq(cq, 1, &wc) == 0 && ms() < end) sched_yield();
			if (wc.status != IBV_WC_SUCCESS) abort();
			xfer(fd, &ok, &ok, 1);
			lost += !ok;
			if (!ok) fprintf(stderr, "round %d: the UC SEND to QPN %u never arrived\n", r, peer.qpn);
		} else {
			long long end = ms() + 5000;
			int n;
			while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && ms() < end) sched_yield();
			char got = n == 1 && wc.status == IBV_WC_SUCCESS;
			xfer(fd, NULL, &ok, 1);
			xfer(fd, &got, NULL, 1);
			ok = got;
			if (!ok) { struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR }; ibv_modify_qp(qp, &a, IBV_QP_STATE);
				while (ibv_poll_cq(cq, 1, &wc) == 1) ; }
		}
		ibv_destroy_qp(qp);
	}
	if (!child) { int st; waitpid(pid, &st, 0); printf("%d of %d UC SENDs lost%s\n", lost, rounds, refuse ? " (a refused post first)" : ""); }
	return 0;
}
