/*
 * QP1 for the IB CM with no daemon (softverbs_qp_set_gsi, softverbs_cm_listen; issue 26):
 * two processes of one user, each with its QP1, share the RoCE v2 port; MADs to QP1
 * written by hand (BTH, DETH with Q_Key 0x80010000, a CM MAD, the ICRC with zlib: forge.h)
 * come to the port on loopback, each from a socket of its own, so that the kernel's hash
 * gives them to either process. Asserted, with bounded waits:
 * - every REQ for the service one process listens on reaches that process's QP1, none
 *   the other's, whichever process the kernel gave it to (passed on: rv_port_forward);
 * - every REP whose remote communication ID names the other process's block reaches it;
 * - what a QP1 sends goes from QP 1 (DETH), with its Q_Key, the MAD whole;
 * - with no QP1 anywhere, a REQ for nobody is refused from QP 1 (REJ, Invalid Service ID)
 *   and a SIDR_REQ answered Unsupported;
 * - a second QP1 in a process is EBUSY, an RC QP is EINVAL, listening through a QP that
 *   is not QP1 is ENODEV, a service another process listens on is EADDRINUSE.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <signal.h>
#include <softverbs/softverbs.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "forge.h"
#include "wire/roce/rv_cm.h"

enum { N = 40, RECVS = 128, SLOT = 512, WAIT_MS = 5000 };
#define SID 0x0000000001064e21ull

static long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* --- a process with a QP1 ------------------------------------------------------------- */

struct cmd {
	char op; /* 'L' listen on SID, 'c' count MADs of @arg's attribute (until @n or
		  * WAIT_MS; n 0: what came so far), 'S' send a RTU from QP1 to 127.0.0.3,
		  * 'B' try a second QP1, 'q' leave */
	int arg, n;
};
struct ans {
	int rc;
	uint32_t qpn;
	int count, others;
};

static struct {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	int gid_lo;
} P;

static struct ibv_qp *ud_qp(uint32_t qkey)
{
	struct ibv_qp_init_attr ia = { .send_cq = P.cq, .recv_cq = P.cq, .qp_type = IBV_QPT_UD,
				       .cap = { .max_send_wr = 16, .max_recv_wr = RECVS,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey };
	struct ibv_qp *qp = ibv_create_qp(P.pd, &ia);

	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_QKEY))
		_exit(3);
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		_exit(3);
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		_exit(3);
	return qp;
}

static void post_recv(int i)
{
	struct ibv_sge sge = { (uintptr_t)P.buf + (size_t)i * SLOT, SLOT, P.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(P.qp, &wr, &bad))
		_exit(4);
}

/* The MADs that came: of attribute @attr in a->count, others in a->others. */
static void count(struct ans *a, int attr, int want)
{
	long long end = now_ms() + (want ? WAIT_MS : 200);
	struct ibv_wc wc[16];

	while (a->count < want || (!want && now_ms() < end)) {
		int n = ibv_poll_cq(P.cq, 16, wc);

		for (int i = 0; i < n; i++) {
			struct rv_cm_msg m;
			const uint8_t *mad = P.buf + wc[i].wr_id * SLOT + 40;

			if (wc[i].opcode != IBV_WC_RECV)
				continue;
			if (wc[i].status == IBV_WC_SUCCESS && wc[i].src_qp == 1 &&
			    wc[i].byte_len == 40 + RV_MAD_LEN &&
			    !rv_cm_decode(mad, RV_MAD_LEN, &m) && m.attr == attr)
				a->count++;
			else
				a->others++;
			post_recv((int)wc[i].wr_id);
		}
		if (now_ms() > end)
			break;
	}
}

static void send_rtu(struct ans *a)
{
	struct rv_cm_msg m = { .attr = RV_CM_RTU, .tid = 77, .local_id = 0xabc, .remote_id = 0xdef };
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .sgid_index = (uint8_t)P.gid_lo, .hop_limit = 64 } };
	uint8_t *mad = P.buf + RECVS * SLOT;
	struct ibv_sge sge = { (uintptr_t)mad, RV_MAD_LEN, P.mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	long long end = now_ms() + WAIT_MS;
	struct ibv_ah *ah;
	int n;

	rv_cm_encode(&m, mad);
	aa.grh.dgid.raw[10] = aa.grh.dgid.raw[11] = 0xff;
	memcpy(&aa.grh.dgid.raw[12], (uint8_t[]){ 127, 0, 0, 3 }, 4);
	ah = ibv_create_ah(P.pd, &aa);
	a->rc = -1;
	if (!ah)
		return;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = 1;
	wr.wr.ud.remote_qkey = RV_QP1_QKEY;
	if (ibv_post_send(P.qp, &wr, &bad))
		return;
	while ((n = ibv_poll_cq(P.cq, 1, &wc)) == 0 && now_ms() < end)
		;
	a->rc = n == 1 && wc.opcode == IBV_WC_SEND ? (int)wc.status : -2;
	ibv_destroy_ah(ah);
}

static void member(int ctl)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ans a = { 0 };
	struct cmd c;

	if (!l || !l[0] || !(P.ctx = ibv_open_device(l[0])))
		_exit(2);
	ibv_free_device_list(l);
	P.gid_lo = -1;
	for (int i = 0; i < 64 && P.gid_lo < 0; i++) {
		union ibv_gid g;

		if (ibv_query_gid(P.ctx, 1, i, &g))
			break;
		if (g.raw[10] == 0xff && g.raw[11] == 0xff && g.raw[12] == 127 && g.raw[15] == 1)
			P.gid_lo = i;
	}
	P.pd = ibv_alloc_pd(P.ctx);
	P.cq = ibv_create_cq(P.ctx, 2 * RECVS, NULL, NULL, 0);
	P.buf = calloc(RECVS + 1, SLOT);
	if (!P.pd || !P.cq || !P.buf)
		_exit(2);
	P.mr = ibv_reg_mr(P.pd, P.buf, (RECVS + 1) * SLOT, IBV_ACCESS_LOCAL_WRITE);
	if (!P.mr)
		_exit(2);
	P.qp = ud_qp(RV_QP1_QKEY);
	for (int i = 0; i < RECVS; i++)
		post_recv(i);
	a.rc = softverbs_qp_set_gsi(P.qp, 1);
	a.qpn = P.qp->qp_num;
	if (write(ctl, &a, sizeof(a)) != sizeof(a) || a.rc)
		_exit(1);
	while (read(ctl, &c, sizeof(c)) == sizeof(c)) {
		a = (struct ans){ .qpn = P.qp->qp_num };
		switch (c.op) {
		case 'L':
			a.rc = softverbs_cm_listen(P.qp, SID, 1);
			break;
		case 'c':
			count(&a, c.arg, c.n);
			break;
		case 'S':
			send_rtu(&a);
			break;
		case 'B': {
			struct ibv_qp *other = ud_qp(RV_QP1_QKEY);

			a.rc = softverbs_qp_set_gsi(other, 1);
			a.count = softverbs_cm_listen(other, SID + 1, 1);
			ibv_destroy_qp(other);
			break;
		}
		case 'q':
			_exit(0);
		}
		if (write(ctl, &a, sizeof(a)) != sizeof(a))
			_exit(1);
	}
	_exit(0);
}

struct kid {
	pid_t pid;
	int ctl;
	uint32_t qpn;
};

static void spawn(struct kid *k)
{
	int sv[2];
	struct ans a;

	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	k->pid = fork();
	assert_true(k->pid >= 0);
	if (!k->pid) {
		close(sv[0]);
		member(sv[1]);
	}
	close(sv[1]);
	k->ctl = sv[0];
	assert_int_equal(read(k->ctl, &a, sizeof(a)), sizeof(a));
	assert_int_equal(a.rc, 0);
	k->qpn = a.qpn;
}

static struct ans ask(struct kid *k, char op, int arg, int n)
{
	struct cmd c = { op, arg, n };
	struct ans a;

	assert_int_equal(write(k->ctl, &c, sizeof(c)), sizeof(c));
	assert_int_equal(read(k->ctl, &a, sizeof(a)), sizeof(a));
	return a;
}

static void reap(struct kid *k)
{
	struct cmd c = { 'q', 0, 0 };

	(void)!write(k->ctl, &c, sizeof(c));
	waitpid(k->pid, NULL, 0);
	close(k->ctl);
}

/* @n MADs @m to QP1 on loopback, each from a socket of its own (another source port). */
static void send_mads(const struct rv_cm_msg *m, int n)
{
	struct sockaddr_in to = forge_port(), from;
	uint8_t b[20 + RV_MAD_LEN + 4];

	for (int i = 0; i < n; i++) {
		int s = forge_socket(&from, "127.0.0.1");
		size_t len;

		assert_true(s >= 0);
		memset(b, 0, sizeof(b));
		b[0] = 0x64; /* UD SEND Only */
		b[2] = b[3] = 0xff;
		b[7] = 1;    /* QP1 */
		b[11] = (uint8_t)i;
		forge_put32(b + 12, RV_QP1_QKEY);
		b[19] = 1;   /* from QP1 */
		assert_int_equal(rv_cm_encode(m, b + 20), 0);
		len = forge_seal(&from, &to, b, 20 + RV_MAD_LEN, 0);
		assert_int_equal(sendto(s, b, len, 0, (struct sockaddr *)&to, sizeof(to)),
				 (ssize_t)len);
		close(s);
	}
}

static void test_mads_reach_their_process(void **state)
{
	struct kid k[2];
	struct rv_cm_msg req = { .attr = RV_CM_REQ, .local_id = 0x5, .service_id = SID,
				 .qpn = 0x77, .starting_psn = 1, .mtu = 3 };
	struct rv_cm_msg rep = { .attr = RV_CM_REP, .local_id = 0x6, .qpn = 0x88 };
	struct ans a;

	(void)state;
	spawn(&k[0]);
	spawn(&k[1]);
	assert_int_equal(ask(&k[0], 'L', 0, 0).rc, 0);
	assert_int_equal(ask(&k[1], 'L', 0, 0).rc, EADDRINUSE);
	a = ask(&k[1], 'B', 0, 0);
	assert_int_equal(a.rc, EBUSY);	/* a second QP1 */
	assert_int_equal(a.count, ENODEV); /* listening through a QP that is not QP1 */

	send_mads(&req, N);
	a = ask(&k[0], 'c', RV_CM_REQ, N);
	if (a.count != N || a.others)
		fail_msg("the listener got %d of %d REQs (%d others)", a.count, N, a.others);
	a = ask(&k[1], 'c', RV_CM_REQ, 0);
	if (a.count || a.others)
		fail_msg("the other process got %d REQs, %d others", a.count, a.others);

	rep.remote_id = (k[1].qpn >> 8) << 16 | 9; /* a communication ID of process 1's */
	send_mads(&rep, N);
	a = ask(&k[1], 'c', RV_CM_REP, N);
	if (a.count != N || a.others)
		fail_msg("process 1 got %d of %d REPs (%d others)", a.count, N, a.others);
	a = ask(&k[0], 'c', RV_CM_REP, 0);
	if (a.count || a.others)
		fail_msg("process 0 got %d REPs for process 1, %d others", a.count, a.others);
	reap(&k[0]);
	reap(&k[1]);
}

static void test_qp1_sends_from_qp1(void **state)
{
	struct kid k;
	struct sockaddr_in at = forge_port();
	int on = 1, s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	uint8_t b[1024];
	struct rv_cm_msg m;
	ssize_t n;

	(void)state;
	/* The peer: 127.0.0.3 on the RoCE port, beside the processes' [::]:port. */
	at.sin_addr.s_addr = htonl(0x7f000003);
	assert_true(s >= 0);
	assert_int_equal(setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)), 0);
	assert_int_equal(bind(s, (struct sockaddr *)&at, sizeof(at)), 0);
	spawn(&k);
	assert_int_equal(ask(&k, 'S', 0, 0).rc, IBV_WC_SUCCESS);
	assert_int_equal(poll(&(struct pollfd){ .fd = s, .events = POLLIN }, 1, WAIT_MS), 1);
	n = recv(s, b, sizeof(b), 0);
	assert_int_equal(n, 12 + 8 + RV_MAD_LEN + 4);
	assert_int_equal(b[0], 0x64);
	assert_int_equal(b[5] << 16 | b[6] << 8 | b[7], 1);	  /* to QP1 */
	assert_int_equal((uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | b[14] << 8 | b[15],
			 RV_QP1_QKEY);
	assert_int_equal(b[17] << 16 | b[18] << 8 | b[19], 1); /* from QP1 */
	assert_int_equal(rv_cm_decode(b + 20, RV_MAD_LEN, &m), 0);
	assert_int_equal(m.attr, RV_CM_RTU);
	assert_int_equal(m.remote_id, 0xdef);
	reap(&k);
	close(s);
}

/* No QP1 anywhere and nobody listening: a REQ is refused from QP 1 (REJ, Invalid Service
 * ID, naming the REQ's communication ID), a SIDR_REQ answered Unsupported, by the process
 * the REQ reached; the peer's socket is 127.0.0.3 on the RoCE port. */
static void test_nobody_listens(void **state)
{
	struct sockaddr_in at = forge_port(), to = forge_port();
	struct rv_cm_msg req = { .attr = RV_CM_REQ, .tid = 0x42, .local_id = 0x00330003,
				 .service_id = SID + 7 }, m;
	int on = 1, dont = IP_PMTUDISC_DO, s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	uint8_t b[20 + RV_MAD_LEN + 4];
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_UD,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x1234 };

	(void)state;
	/* This process on the port (a UD QP), with no QP1. */
	assert_non_null(l);
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	assert_non_null(ctx);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	ia.send_cq = ia.recv_cq = cq;
	qp = ibv_create_qp(pd, &ia);
	assert_non_null(qp);
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						   IBV_QP_QKEY), 0);
	a.qp_state = IBV_QPS_RTR;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	a.qp_state = IBV_QPS_RTS;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
	at.sin_addr.s_addr = htonl(0x7f000003);
	assert_true(s >= 0);
	assert_int_equal(setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)), 0);
	assert_int_equal(setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &dont, sizeof(dont)), 0);
	assert_int_equal(bind(s, (struct sockaddr *)&at, sizeof(at)), 0);
	for (int round = 0; round < 2; round++) {
		size_t len;
		ssize_t n;

		memset(b, 0, sizeof(b));
		b[0] = 0x64;
		b[2] = b[3] = 0xff;
		b[7] = 1;
		forge_put32(b + 12, RV_QP1_QKEY);
		b[19] = 1;
		if (round)
			req = (struct rv_cm_msg){ .attr = RV_CM_SIDR_REQ, .tid = 0x43,
						  .local_id = 0x77, .service_id = SID + 8 };
		assert_int_equal(rv_cm_encode(&req, b + 20), 0);
		len = forge_seal(&at, &to, b, 20 + RV_MAD_LEN, 0);
		assert_int_equal(sendto(s, b, len, 0, (struct sockaddr *)&to, sizeof(to)),
				 (ssize_t)len);
		assert_int_equal(poll(&(struct pollfd){ .fd = s, .events = POLLIN }, 1, WAIT_MS), 1);
		n = recv(s, b, sizeof(b), 0);
		assert_int_equal(n, 20 + RV_MAD_LEN + 4);
		assert_int_equal(b[5] << 16 | b[6] << 8 | b[7], 1);	 /* to QP1 */
		assert_int_equal(b[17] << 16 | b[18] << 8 | b[19], 1); /* from QP1 */
		assert_int_equal(rv_cm_decode(b + 20, RV_MAD_LEN, &m), 0);
		if (!round) {
			assert_int_equal(m.attr, RV_CM_REJ);
			assert_int_equal(m.reason, 8);
			assert_int_equal(m.remote_id, 0x00330003);
			assert_int_equal(m.tid, 0x42);
		} else {
			assert_int_equal(m.attr, RV_CM_SIDR_REP);
			assert_int_equal(m.sidr_status, 1);
			assert_int_equal(m.local_id, 0x77);
		}
	}
	close(s);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void test_not_qp1(void **state)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };

	(void)state;
	assert_non_null(l);
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	assert_non_null(ctx);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	ia.send_cq = ia.recv_cq = cq;
	qp = ibv_create_qp(pd, &ia);
	assert_non_null(qp);
	assert_int_equal(softverbs_qp_set_gsi(qp, 1), EINVAL);
	assert_int_equal(softverbs_cm_listen(qp, SID, 1), ENODEV);
	assert_int_equal(softverbs_qp_set_gsi(NULL, 1), EINVAL);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mads_reach_their_process),
		cmocka_unit_test(test_qp1_sends_from_qp1),
		cmocka_unit_test(test_nobody_listens),
		cmocka_unit_test(test_not_qp1),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
