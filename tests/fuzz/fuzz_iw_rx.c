/*
 * libFuzzer target for the iWARP wire's receive path (issue 13, "Fuzzing"): every input
 * is an FPDU stream from a peer, written in pieces split at arbitrary points into a
 * stream that a real softverbs RC QP on the iWARP wire adopted (softverbs_qp_adopt_stream
 * over a socketpair), placed against the process's real key table. The QP is driven by
 * ibv_poll_cq (the wire reads its socket in the poll), bounded per input.
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
 * Input: byte 0 flags, byte 1 the split seed (0: one write), then the stream.
 *   flags bit 0  CRC negotiated       bit 1  the harness seals each FPDU's CRC
 *         bit 2  RFC 7306             bit 3  our RDMA Read is outstanding (64 bytes,
 *                                            sink STag 0x5f000001, offset 0: the wire's)
 *         bit 4  the peer shuts its write side after the stream
 *         bit 5  two receives posted (else none: a Send waits in the socket)
 * STags 1, 2, 3 in the stream name W, R, V (their real keys are random); a tagged offset
 * below 1 MiB is an offset from the mapping's start (W begins at 0x1000). The harness
 * walks the stream FPDU by FPDU (while headers decode) to rewrite them, and to seal the
 * CRCs when bit 1 says so.
 */
#include <infiniband/verbs.h>
#include <softverbs/softverbs.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire/iwarp/iw_proto.h"

enum {
	PG = 4096,
	N_PAGES = 9,
	CANARY = 0xa5,
	SINK_OFF = 768,
	SINK_LEN = 64,
	POLL_MAX = 64, /* pump rounds per input without progress */
};

static struct {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *map;
	union ibv_gid gid;
	struct ibv_mr *w, *r, *v;
	uint8_t want[N_PAGES * PG]; /* what the mapping must hold, where checked */
	uint8_t stream[1 << 17];
} g;

static uint8_t *page(int i)
{
	return g.map + (size_t)i * PG;
}

static void die(const char *what)
{
	fprintf(stderr, "fuzz_iw_rx: %s\n", what);
	abort();
}

static void setup(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 8, .max_recv_wr = 8,
					       .max_send_sge = 1, .max_recv_sge = 1 } };
	int fl;

	if (!l || !l[0] || !(g.ctx = ibv_open_device(l[0])))
		die("no device");
	ibv_free_device_list(l);
	if (ibv_query_gid(g.ctx, 1, 0, &g.gid))
		die("query_gid");
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
	g.qp = softverbs_create_qp_on_wire(g.pd, &a, SOFTVERBS_WIRE_IWARP);
	if (!g.qp)
		die("create_qp_on_wire");
	fl = fcntl(g.ctx->async_fd, F_GETFL);
	fcntl(g.ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
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
		fprintf(stderr, "fuzz_iw_rx: modify_qp to %d: %s\n", a->qp_state, strerror(err));
		abort();
	}
}

/* RESET -> INIT -> (stream) -> RTR -> RTS. */
static void qp_up(int fd, uint8_t flags)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
	struct softverbs_stream s = { .crc = flags & 1, .rfc7306 = (flags >> 2) & 1, .ird = 4,
				      .ord = 4 };

	modify(&a, IBV_QP_STATE);
	drain();
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1,
				  .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						     IBV_ACCESS_REMOTE_READ |
						     IBV_ACCESS_REMOTE_ATOMIC };
	modify(&a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (softverbs_qp_adopt_stream(g.qp, fd, &s))
		die("adopt_stream");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				  .dest_qp_num = 0x4242, .max_dest_rd_atomic = 4,
				  .min_rnr_timer = 12,
				  .ah_attr = { .is_global = 1, .port_num = 1,
					       .grh = { .dgid = g.gid, .hop_limit = 64 } } };
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

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void fix_stag(uint8_t *p)
{
	uint32_t v = get32(p);

	if (v == 1)
		put32(p, g.w->rkey);
	else if (v == 2)
		put32(p, g.r->rkey);
	else if (v == 3)
		put32(p, g.v->rkey);
}

static void fix_to(uint8_t *p)
{
	uint64_t to = (uint64_t)get32(p) << 32 | get32(p + 4);

	if (to < (1u << 20)) {
		to += (uintptr_t)g.map;
		put32(p, (uint32_t)(to >> 32));
		put32(p + 4, (uint32_t)to);
	}
}

/* The stream's FPDUs as far as they decode: virtual STags and offsets made real, CRCs
 * sealed (@seal). */
static void rewrite(uint8_t *s, size_t n, bool seal)
{
	size_t p = 0;

	while (p + 4 <= n) {
		struct iw_hdr h;
		struct iw_term t;
		int hl = iw_hdr_decode(s + p, n - p, true, &h, &t);
		uint32_t total;

		if (hl < 0)
			return;
		total = iw_fpdu_len(h.ulpdu_len);
		if (p + total > n)
			return;
		switch (h.opcode) {
		case IW_OP_WRITE: /* (a Read Response names the wire's own sink as it is) */
			fix_stag(s + p + 4);
			fix_to(s + p + 8);
			break;
		case IW_OP_READ_REQ:
			fix_stag(s + p + 36);
			fix_to(s + p + 40);
			break;
		case IW_OP_ATOMIC_REQ:
			fix_stag(s + p + 28);
			fix_to(s + p + 32);
			break;
		default:
			break;
		}
		if (seal)
			iw_crc_put(s + p + total - IW_CRC_BYTES,
				   iw_crc_final(iw_crc_update(iw_crc_init(), s + p,
							      total - IW_CRC_BYTES)));
		p += total;
	}
}

/* Moves the QP (poll) and reads what it answers; true if it took bytes since last. */
static int unread(int fd)
{
	int q = 0;

	if (ioctl(fd, FIONREAD, &q) < 0)
		return 0;
	return q;
}

static void pump(int peer)
{
	struct ibv_wc wc[16];
	uint8_t sink[8192];

	(void)ibv_poll_cq(g.cq, 16, wc);
	while (recv(peer, sink, sizeof(sink), MSG_DONTWAIT) > 0)
		;
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
			fprintf(stderr, "fuzz_iw_rx: page %d (%s) written\n", i,
				i % 2 ? "an MR no write may reach" : "a canary");
			abort();
		}
	}
	memcpy(m + PG, w + PG, PG); /* W afresh */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t flags, seed;
	size_t n, off = 0;
	int sp[2], watch, stale = 0, last;
	uint32_t rng;

	if (!g.ctx)
		setup();
	if (size < 2 || size - 2 > sizeof(g.stream))
		return 0;
	flags = data[0];
	seed = data[1];
	n = size - 2;
	memcpy(g.stream, data + 2, n);
	rewrite(g.stream, n, (flags & 3) == 3);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp))
		die("socketpair");
	watch = dup(sp[0]);
	fcntl(sp[1], F_SETFL, O_NONBLOCK);
	qp_up(sp[0], flags);
	post(flags);
	rng = seed * 2654435761u + 1;
	while (off < n) {
		size_t k = n - off;
		ssize_t w;

		if (seed) {
			rng ^= rng << 13;
			rng ^= rng >> 17;
			rng ^= rng << 5;
			if (k > 1 + rng % 97)
				k = 1 + rng % 97;
		}
		w = send(sp[1], g.stream + off, k, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0) {
			if (errno != EAGAIN || ++stale > POLL_MAX)
				break; /* the QP went (or holds what it has) */
			pump(sp[1]);
			continue;
		}
		off += (size_t)w;
		if (seed)
			pump(sp[1]);
	}
	if (flags & 0x10)
		shutdown(sp[1], SHUT_WR);
	/* until the QP took everything, or stops taking it (a Send with no receive) */
	last = unread(watch);
	stale = 0;
	for (int i = 0; i < 4 * POLL_MAX && stale < 2; i++) {
		int now;

		pump(sp[1]);
		now = unread(watch);
		if (!now && !(flags & 0x10))
			break;
		stale = now == last ? stale + 1 : 0;
		last = now;
		if (stale)
			sched_yield();
	}
	{
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

		modify(&a, IBV_QP_STATE);
	}
	drain();
	close(watch);
	close(sp[1]);
	check();
	return 0;
}
