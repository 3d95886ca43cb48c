/*
 * libFuzzer target for the RoCE v2 wire's receive path through the core (issue 25,
 * "Bad input"): every input is a run of datagrams from a peer, sent to the RoCE v2 port
 * on loopback from the address a real softverbs RC QP on the RoCE wire names as its
 * peer (SOFTVERBS_WIRE=roce), and taken by that QP as any datagram is: the ICRC checked,
 * the packet decoded, its PSN judged, the request executed against the process's real
 * key table, answered. The QP is driven by ibv_poll_cq (its polls read the socket),
 * bounded per input, and reset after each.
 *
 * Memory, one mapping: [canary][W][canary][R][canary][V][canary][N][canary], pages:
 *   W  MR with local write, remote write, read, atomic: the peer may write anywhere here
 *   R  MR with remote read only: never written
 *   V  MR with local write only: the receives [0,256) [256,512) and our RDMA Read's sink
 *      [768,832) may be written, nothing else of it
 *   N  not registered: never written
 * After every input: the canaries, R, N and V outside the receives and the sink are
 * compared with what they held; a difference is abort() (libFuzzer reports it).
 *
 * Input: byte 0 flags, then records, each a 16-bit length (big-endian) and that many
 * bytes, a datagram's UDP payload (BTH first), at most 64 of them.
 *   flags bit 0  the harness seals each datagram's ICRC (else it sends the bytes as
 *                they are: nearly all are then dropped at the ICRC)
 *         bit 1  each datagram's destination QP is the QP's (else as written)
 *         bit 3  our RDMA Read is outstanding (64 bytes into the sink, PSN 0)
 *         bit 5  two receives posted (else none: a Send is held, RNR)
 * R_Keys 1, 2, 3 in a RETH or an AtomicETH name W, R, V (their real keys are random); a
 * virtual address below 1 MiB is an offset from the mapping's start (W begins at 0x1000).
 * The QP expects PSN 0 first; it answers to its peer's port, where nobody takes it.
 *
 * Build and run: tests/fuzz/build.sh OUTDIR fuzz_roce_rx (the library built with clang
 * and libFuzzer's coverage, as for fuzz_iw_rx), then
 *   SOFTVERBS_ROCE_PORT=24990 OUTDIR/fuzz_roce_rx -max_total_time=60
 */
#include <infiniband/verbs.h>

#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../wire/udp/forge.h"

enum {
	PG = 4096,
	N_PAGES = 9,
	CANARY = 0xa5,
	SINK_OFF = 768,
	SINK_LEN = 64,
	DGRAMS_MAX = 64,
	PUMPS = 16, /* polls after the last datagram (each reads up to 32) */
	PEER_QPN = 0x4242,
};

static struct {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *map;
	union ibv_gid peer;
	struct ibv_mr *w, *r, *v;
	int sock;
	struct sockaddr_in from, to;
	uint8_t want[N_PAGES * PG]; /* what the mapping must hold, where checked */
	uint8_t dgram[PG + 64];
} g;

static uint8_t *page(int i)
{
	return g.map + (size_t)i * PG;
}

static void die(const char *what)
{
	fprintf(stderr, "fuzz_roce_rx: %s\n", what);
	abort();
}

/* The GID ::ffff:127.0.0.1: the QP's peer, which the harness's socket sends from. */
static void find_loopback_gid(void)
{
	static const uint8_t lo[16] = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 };

	for (int i = 0; i < 64; i++) {
		if (ibv_query_gid(g.ctx, 1, i, &g.peer))
			break;
		if (!memcmp(g.peer.raw, lo, 16))
			return;
	}
	die("no ::ffff:127.0.0.1 GID (loopback without IPv4)");
}

static void setup(void)
{
	struct ibv_device **l;
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 8, .max_recv_wr = 8,
					       .max_send_sge = 1, .max_recv_sge = 1 } };
	int fl;

	setenv("SOFTVERBS_WIRE", "roce", 1);
	l = ibv_get_device_list(NULL);
	if (!l || !l[0] || !(g.ctx = ibv_open_device(l[0])))
		die("no device");
	ibv_free_device_list(l);
	find_loopback_gid();
	g.pd = ibv_alloc_pd(g.ctx);
	g.cq = ibv_create_cq(g.ctx, 64, NULL, NULL, 0);
	g.map = mmap(NULL, N_PAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		     -1, 0);
	if (!g.pd || !g.cq || g.map == MAP_FAILED)
		die("setup");
	for (int i = 0; i < N_PAGES * PG; i++)
		g.map[i] = (i / PG) % 2 ? (uint8_t)(i * 13 + i / PG) : CANARY;
	memcpy(g.want, g.map, sizeof(g.want));
	g.w = ibv_reg_mr(g.pd, page(1), PG,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				 IBV_ACCESS_REMOTE_ATOMIC);
	g.r = ibv_reg_mr(g.pd, page(3), PG, IBV_ACCESS_REMOTE_READ);
	g.v = ibv_reg_mr(g.pd, page(5), PG, IBV_ACCESS_LOCAL_WRITE);
	if (!g.w || !g.r || !g.v)
		die("reg_mr");
	a.send_cq = a.recv_cq = g.cq;
	g.qp = ibv_create_qp(g.pd, &a);
	if (!g.qp)
		die("create_qp");
	fl = fcntl(g.ctx->async_fd, F_GETFL);
	fcntl(g.ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	g.to = forge_port();
	g.sock = forge_socket(&g.from, "127.0.0.1");
	if (g.sock < 0)
		die("socket");
}

static void drain(void)
{
	struct ibv_wc wc[16];
	struct ibv_async_event ev;

	while (ibv_poll_cq(g.cq, 16, wc) > 0)
		;
	while (ibv_get_async_event(g.ctx, &ev) == 0)
		ibv_ack_async_event(&ev);
}

static void modify(struct ibv_qp_attr *a, int mask)
{
	int err = ibv_modify_qp(g.qp, a, mask);

	if (err) {
		fprintf(stderr, "fuzz_roce_rx: modify_qp to %d: %s\n", a->qp_state, strerror(err));
		abort();
	}
}

/* RESET -> INIT -> RTR (PSN 0 expected) -> RTS (PSN 0 sent first). */
static void qp_up(void)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	modify(&a, IBV_QP_STATE);
	drain();
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1,
				  .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						     IBV_ACCESS_REMOTE_READ |
						     IBV_ACCESS_REMOTE_ATOMIC };
	modify(&a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				  .dest_qp_num = PEER_QPN, .max_dest_rd_atomic = 4,
				  .min_rnr_timer = 1,
				  .ah_attr = { .is_global = 1, .port_num = 1,
					       .grh = { .dgid = g.peer, .hop_limit = 64 } } };
	modify(&a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				  .rnr_retry = 7, .max_rd_atomic = 4 };
	modify(&a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static void post(uint8_t flags)
{
	if (flags & 0x20) {
		for (int i = 0; i < 2; i++) {
			struct ibv_sge sge = { (uintptr_t)page(5) + 256 * (uint64_t)i, 256,
					       g.v->lkey };
			struct ibv_recv_wr wr = { .wr_id = 10 + (uint64_t)i, .sg_list = &sge,
						  .num_sge = 1 }, *bad;

			if (ibv_post_recv(g.qp, &wr, &bad))
				die("post_recv");
		}
	}
	if (flags & 0x08) {
		struct ibv_sge sge = { (uintptr_t)page(5) + SINK_OFF, SINK_LEN, g.v->lkey };
		struct ibv_send_wr wr = { .wr_id = 20, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_READ,
					  .send_flags = IBV_SEND_SIGNALED,
					  .wr.rdma = { .remote_addr = 0x1000, .rkey = 0x777 } },
				   *bad;

		if (ibv_post_send(g.qp, &wr, &bad))
			die("post_send");
	}
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A RETH's or AtomicETH's address and key at @p (VA 8 bytes, then the R_Key): virtual
 * keys and addresses made real. */
static void fix_va_key(uint8_t *p)
{
	uint64_t va = (uint64_t)get32(p) << 32 | get32(p + 4);
	uint32_t key = get32(p + 8);

	if (va < (1u << 20)) {
		va += (uintptr_t)g.map;
		forge_put32(p, (uint32_t)(va >> 32));
		forge_put32(p + 4, (uint32_t)va);
	}
	if (key == 1)
		forge_put32(p + 8, g.w->rkey);
	else if (key == 2)
		forge_put32(p + 8, g.r->rkey);
	else if (key == 3)
		forge_put32(p + 8, g.v->rkey);
}

/* The RC datagram @b (@n bytes, BTH first): the destination QP made the QP's (@to_qp),
 * the RETH or AtomicETH after the BTH rewritten (IBA 9.2: RC opcodes 0x06, 0x0a, 0x0b,
 * 0x0c carry a RETH, 0x13 and 0x14 an AtomicETH). */
static void rewrite(uint8_t *b, size_t n, bool to_qp)
{
	if (n < 12)
		return;
	if (to_qp) {
		uint32_t qpn = g.qp->qp_num;

		b[5] = (uint8_t)(qpn >> 16);
		b[6] = (uint8_t)(qpn >> 8);
		b[7] = (uint8_t)qpn;
	}
	switch (b[0]) {
	case 0x06:
	case 0x0a:
	case 0x0b:
	case 0x0c:
	case 0x13:
	case 0x14:
		if (n >= 12 + 16)
			fix_va_key(b + 12);
		break;
	default:
		break;
	}
}

static void pump(void)
{
	struct ibv_wc wc[16];

	(void)ibv_poll_cq(g.cq, 16, wc);
}

static void check(void)
{
	uint8_t *m = g.map, *w = g.want;

	for (int i = 0; i < N_PAGES; i++) {
		size_t o = (size_t)i * PG;

		if (i == 1)
			continue; /* W: anything the peer writes lands inside it */
		if (i == 5) {
			/* V: the receives, the sink */
			if (memcmp(m + o + 512, w + o + 512, SINK_OFF - 512) ||
			    memcmp(m + o + SINK_OFF + SINK_LEN, w + o + SINK_OFF + SINK_LEN,
				   PG - SINK_OFF - SINK_LEN))
				die("a byte of V outside the receives and the sink was written");
			memcpy(m + o, w + o, PG);
			continue;
		}
		if (memcmp(m + o, w + o, PG)) {
			fprintf(stderr, "fuzz_roce_rx: page %d (%s) written\n", i,
				i % 2 ? "an MR no write may reach" : "a canary");
			abort();
		}
	}
	memcpy(m + PG, w + PG, PG); /* W afresh */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t flags;
	size_t off = 1;
	int sent = 0;

	if (!g.ctx)
		setup();
	if (size < 1)
		return 0;
	flags = data[0];
	qp_up();
	post(flags);
	while (off + 2 <= size && sent < DGRAMS_MAX) {
		size_t n = (size_t)data[off] << 8 | data[off + 1], len;

		off += 2;
		if (n > size - off)
			n = size - off;
		if (n > sizeof(g.dgram) - 4)
			n = sizeof(g.dgram) - 4;
		memcpy(g.dgram, data + off, n);
		off += n;
		rewrite(g.dgram, n, flags & 0x02);
		len = (flags & 0x01) && n >= 12 ? forge_seal(&g.from, &g.to, g.dgram, n, 0) : n;
		(void)sendto(g.sock, g.dgram, len, MSG_DONTWAIT, (struct sockaddr *)&g.to,
			     sizeof(g.to));
		sent++;
		if (!(sent % 8))
			pump();
	}
	for (int i = 0; i < PUMPS; i++) {
		pump();
		sched_yield();
	}
	{
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

		modify(&a, IBV_QP_STATE);
	}
	drain();
	check();
	return 0;
}
