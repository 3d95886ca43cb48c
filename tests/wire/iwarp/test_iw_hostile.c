/*
 * The iWARP wire against a hostile peer (issue 13, "Bad input"): one of our RC QPs on
 * the iWARP wire adopts one end of a loopback TCP connection whose MPA exchange counts as
 * done (softverbs_qp_adopt_stream); the test itself is the peer at the other end and
 * writes FPDUs built with the codec (iw_hdr_encode, CRC32c, pad), valid-looking or not,
 * and reads what the QP answers (Read Responses, the Terminate).
 *
 * Every case checks, within bounded waits:
 * - the Terminate the peer gets: its layer, type and code (RFC 5040 §7, RFC 5041 §7,
 *   RFC 5044 §8, as siw gives them: ../shared/reference/iwarp.md), and the offending
 *   header it copies (RFC 5040 §4.8: ULPDU_Length and DDP header, a Read Request's
 *   RDMAP header);
 * - the QP in ERROR with its async event, the receives and the RDMA Read it had
 *   outstanding flushed (IBV_WC_WR_FLUSH_ERR), the connection closed (EOF at the peer);
 * - nothing written outside what the peer may write: the registered region (4 KiB inside
 *   a 3-page mapping, the bytes before and after it canaries) equals a shadow copy that
 *   only valid placements update;
 * - a second pair of QPs of the same process, on iWARP over another loopback TCP
 *   connection, still carries a Send and an RDMA Write afterwards.
 * The valid case (valid_traffic) shows the harness places what a correct peer sends.
 */
#include "verbs/sv_test_util.h"
#include "wire/iwarp/iw_proto.h"

#include <softverbs/softverbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
	PAGE = 4096,
	REGION = 4096,        /* the registered region */
	RECV_LEN = 512,       /* each posted receive: region[0..512), [512..1024) */
	WRITE_AT = 1024,      /* where valid Writes go */
	READ_AT = 2048,       /* what valid Reads read */
	SINK_AT = 3584,       /* our own RDMA Read's sink (64 bytes) */
	SINK_LEN = 64,
	CANARY = 0xa5,
	IRD = 4,
	WAIT_MS = 5000,
	PEER_QPN = 0x4242,    /* the QPN the test's peer pretends to have */
	WR_RECV0 = 100, WR_RECV1 = 101, WR_READ = 200,
	PEER_FIRST_MS = 50,   /* the passive side's hold at most (iw_qp.c IW_PEER_FIRST_MS) */
	REMOTE_STAG = 0x777,  /* what our outstanding RDMA Read asks the peer for */
};

struct hx {
	struct tu_res *res;
	uint8_t *map;     /* [canary page][region][canary page] */
	uint8_t *region;
	uint8_t shadow[REGION];
	struct ibv_mr *mr;
	struct ibv_qp *qp;
	int peer;         /* the test's end of the QP's stream */
	bool crc, ext;
	uint32_t msn[IW_QN_MAX]; /* the peer's next DDP MSN of each queue */
	uint8_t out[1 << 17];
	size_t out_len;
	uint8_t in[1 << 17];  /* what the QP sent, not parsed yet */
	size_t in_len;
	/* our outstanding RDMA Read as the peer saw it */
	bool read_seen;
	struct iw_hdr read_req;
	int read_resps;   /* Read Responses received (answers to the peer's Reads) */
	uint8_t resp_data[4096];
	size_t resp_len;
	/* the bystander pair and its CQ */
	struct ibv_cq *bcq;
	struct ibv_qp *b[2];
	uint8_t *bbuf;
	struct ibv_mr *bmr;
	/* a receive larger than the wire's stage (bad_crc_large_send) */
	uint8_t *big;
	struct ibv_mr *bigmr;
};

enum { BIG = 3 * 4096 };

/* ---- streams ------------------------------------------------------------------------- */

/* A connected loopback TCP pair. */
static void tcp_pair(int fd[2])
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	assert_true(l >= 0);
	assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(l, 1), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &len), 0);
	fd[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd[0] >= 0);
	assert_int_equal(connect(fd[0], (struct sockaddr *)&sa, sizeof(sa)), 0);
	fd[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	assert_true(fd[1] >= 0);
	close(l);
	(void)setsockopt(fd[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static struct ibv_qp *iw_qp(struct tu_res *res, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 2 },
	};
	struct ibv_qp *qp = softverbs_create_qp_on_wire(res->pd, &a, SOFTVERBS_WIRE_IWARP);

	if (!qp)
		fail_msg("softverbs_create_qp_on_wire(IWARP): %s", strerror(errno));
	return qp;
}

/* INIT, the stream, RTR (dest_qp_num: whoever the stream's peer is), RTS. */
static void iw_qp_up(struct tu_res *res, struct ibv_qp *qp, int fd, uint32_t dest, bool crc,
		     bool ext)
{
	struct softverbs_stream s = { .crc = crc, .rfc7306 = ext, .ird = IRD, .ord = IRD };
	struct tu_conn c;

	tu_conn_init(&c, res, dest);
	c.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	c.max_rd_atomic = IRD;
	c.max_dest_rd_atomic = IRD;
	assert_int_equal(tu_qp_to_init(qp, &c), 0);
	assert_int_equal(softverbs_qp_adopt_stream(qp, fd, &s), 0);
	assert_int_equal(tu_qp_to_rtr(qp, &c), 0);
	assert_int_equal(tu_qp_to_rts(qp, &c), 0);
}

/* ---- the peer: writing ------------------------------------------------------------- */

/* Appends one FPDU: @h's header (h->msn/qn/mo as given for untagged opcodes), the
 * payload, pad, CRC (when negotiated; @bad_crc flips it). Returns its offset in out. */
static size_t fpdu(struct hx *x, struct iw_hdr *h, const void *pl, uint32_t len, bool bad_crc)
{
	size_t at = x->out_len;
	uint8_t *p = x->out + at;
	uint32_t pad, crc = 0;
	int hl;

	h->payload_len = len;
	hl = iw_hdr_encode(p, h);
	assert_true(hl > 0);
	if (len)
		memcpy(p + hl, pl, len);
	pad = iw_pad((uint32_t)hl - IW_MPA_LEN_BYTES + len);
	memset(p + hl + len, 0, pad);
	if (x->crc)
		crc = iw_crc_final(iw_crc_update(iw_crc_init(), p, (size_t)hl + len + pad));
	if (bad_crc)
		crc ^= 0x5a5a5a5a;
	iw_crc_put(p + hl + len + pad, crc);
	x->out_len += (size_t)hl + len + pad + IW_CRC_BYTES;
	return at;
}

/* Raw bytes as they are. */
static size_t raw(struct hx *x, const void *b, size_t n)
{
	size_t at = x->out_len;

	memcpy(x->out + at, b, n);
	x->out_len += n;
	return at;
}

/* Everything appended, in one write (the QP finds it all at once). */
static void flush_out(struct hx *x)
{
	size_t off = 0;

	while (off < x->out_len) {
		ssize_t n = write(x->peer, x->out + off, x->out_len - off);

		if (n < 0 && errno == EINTR)
			continue;
		assert_true(n > 0);
		off += (size_t)n;
	}
	x->out_len = 0;
}

static size_t send_fpdu(struct hx *x, uint8_t op, const void *pl, uint32_t len, bool last)
{
	struct iw_hdr h = { .opcode = op, .last = last, .msn = x->msn[IW_QN_SEND] };

	if (last)
		x->msn[IW_QN_SEND]++;
	return fpdu(x, &h, pl, len, false);
}

static size_t write_fpdu(struct hx *x, uint32_t stag, uint64_t to, const void *pl, uint32_t len)
{
	struct iw_hdr h = { .opcode = IW_OP_WRITE, .last = true, .stag = stag, .to = to };

	return fpdu(x, &h, pl, len, false);
}

static size_t read_req(struct hx *x, uint32_t src_stag, uint64_t src_to, uint32_t size,
		       uint32_t sink_stag, uint64_t sink_to)
{
	struct iw_hdr h = { .opcode = IW_OP_READ_REQ, .last = true, .msn = x->msn[IW_QN_READ_REQ]++,
			    .sink_stag = sink_stag, .sink_to = sink_to, .read_size = size,
			    .src_stag = src_stag, .src_to = src_to };

	return fpdu(x, &h, NULL, 0, false);
}

/* ---- the peer: reading ------------------------------------------------------------- */

/* Reads what the QP sends until a Terminate (*t filled, its copied headers in @copied)
 * or the end of the stream; Read Requests (our own RDMA Read) and Read Responses are
 * noted. Returns 1 (Terminate), 0 (EOF or reset first), -1 (nothing within WAIT_MS). */
static int read_until_term(struct hx *x, struct iw_hdr *t, uint8_t *copied, uint32_t *copied_len)
{
	long long end = tu_now_ms() + WAIT_MS;

	for (;;) {
		struct iw_hdr h;
		struct iw_term err;
		int hl;

		while (x->in_len >= 4) {
			uint32_t total;

			hl = iw_hdr_decode(x->in, x->in_len, x->ext, &h, &err);
			if (hl == -EAGAIN)
				break;
			if (hl < 0)
				fail_msg("the QP sent an FPDU that does not decode (%u/%u/0x%02x)",
					 err.layer, err.etype, err.ecode);
			total = iw_fpdu_len(h.ulpdu_len);
			if (x->in_len < total)
				break;
			if (x->crc) {
				uint32_t want = iw_crc_final(iw_crc_update(iw_crc_init(), x->in,
									   total - IW_CRC_BYTES));

				assert_int_equal(iw_crc_get(x->in + total - IW_CRC_BYTES), want);
			}
			if (h.opcode == IW_OP_READ_REQ && !x->read_seen) {
				x->read_seen = true;
				x->read_req = h;
			} else if (h.opcode == IW_OP_READ_RESP) {
				if (h.last)
					x->read_resps++;
				if (x->resp_len + h.payload_len <= sizeof(x->resp_data)) {
					memcpy(x->resp_data + x->resp_len, x->in + hl, h.payload_len);
					x->resp_len += h.payload_len;
				}
			}
			if (h.opcode == IW_OP_TERMINATE) {
				*t = h;
				*copied_len = h.payload_len;
				memcpy(copied, x->in + hl, h.payload_len);
			}
			memmove(x->in, x->in + total, x->in_len - total);
			x->in_len -= total;
			if (h.opcode == IW_OP_TERMINATE)
				return 1;
		}
		{
			struct pollfd p = { .fd = x->peer, .events = POLLIN };
			long long left = end - tu_now_ms();
			ssize_t n;

			if (left <= 0 || poll(&p, 1, (int)left) <= 0)
				return -1;
			n = read(x->peer, x->in + x->in_len, sizeof(x->in) - x->in_len);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return 0;
			x->in_len += (size_t)n;
		}
	}
}

/* Waits for our own RDMA Read's request to reach the peer. */
static void wait_read_req(struct hx *x)
{
	long long end = tu_now_ms() + WAIT_MS;

	while (!x->read_seen) {
		struct pollfd p = { .fd = x->peer, .events = POLLIN };
		ssize_t n;

		if (tu_now_ms() > end || poll(&p, 1, 100) < 0)
			fail_msg("our RDMA Read's request did not reach the peer in %d ms", WAIT_MS);
		if (!(p.revents & POLLIN))
			continue;
		n = read(x->peer, x->in + x->in_len, sizeof(x->in) - x->in_len);
		assert_true(n > 0);
		x->in_len += (size_t)n;
		while (x->in_len >= 4) {
			struct iw_hdr h;
			struct iw_term err;
			int hl = iw_hdr_decode(x->in, x->in_len, x->ext, &h, &err);
			uint32_t total;

			assert_true(hl > 0 || hl == -EAGAIN);
			if (hl < 0)
				break;
			total = iw_fpdu_len(h.ulpdu_len);
			if (x->in_len < total)
				break;
			if (h.opcode == IW_OP_READ_REQ) {
				x->read_seen = true;
				x->read_req = h;
			}
			memmove(x->in, x->in + total, x->in_len - total);
			x->in_len -= total;
		}
	}
}

/* ---- the fixture ------------------------------------------------------------------- */

static void post_recv(struct hx *x, uint64_t wr_id, uint32_t off)
{
	struct ibv_sge sge = { (uintptr_t)(x->region + off), RECV_LEN, x->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	assert_int_equal(ibv_post_recv(x->qp, &wr, &bad), 0);
}

/* Our RDMA Read from the peer, left outstanding (the peer answers it only where a case
 * says so). */
static void post_read(struct hx *x)
{
	struct ibv_sge sge = { (uintptr_t)(x->region + SINK_AT), SINK_LEN, x->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = WR_READ, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = 0, .rkey = REMOTE_STAG } }, *bad;

	assert_int_equal(ibv_post_send(x->qp, &wr, &bad), 0);
}

/* A pair of iWARP QPs over a loopback TCP connection, doing nothing wrong. */
static void bystander_up(struct hx *x)
{
	int fd[2];

	x->bcq = ibv_create_cq(x->res->ctx, 32, NULL, NULL, 0);
	assert_non_null(x->bcq);
	x->bbuf = calloc(1, 2 * PAGE);
	assert_non_null(x->bbuf);
	x->bmr = ibv_reg_mr(x->res->pd, x->bbuf, 2 * PAGE,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_non_null(x->bmr);
	x->b[0] = iw_qp(x->res, x->bcq);
	x->b[1] = iw_qp(x->res, x->bcq);
	tcp_pair(fd);
	iw_qp_up(x->res, x->b[0], fd[0], x->b[1]->qp_num, true, true);
	iw_qp_up(x->res, x->b[1], fd[1], x->b[0]->qp_num, true, true);
}

/* The bystander pair still carries a Send and an RDMA Write, byte for byte. */
static void bystander_works(struct hx *x)
{
	uint8_t *src = x->bbuf, *dst = x->bbuf + PAGE;
	struct ibv_sge rs = { (uintptr_t)dst, 256, x->bmr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
	struct ibv_sge ss = { (uintptr_t)src, 256, x->bmr->lkey };
	struct ibv_sge ws = { (uintptr_t)src + 256, 128, x->bmr->lkey };
	struct ibv_send_wr wwr = { .wr_id = 3, .sg_list = &ws, .num_sge = 1,
				   .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				   .wr.rdma = { .remote_addr = (uintptr_t)dst + 1024,
						.rkey = x->bmr->rkey } };
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &ss, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
				   .next = &wwr }, *sbad;
	struct ibv_wc wc[3];
	int got;

	for (int i = 0; i < 384; i++)
		src[i] = (uint8_t)(i * 7 + 3);
	memset(dst, 0, PAGE);
	assert_int_equal(ibv_post_recv(x->b[1], &rwr, &rbad), 0);
	assert_int_equal(ibv_post_send(x->b[0], &swr, &sbad), 0);
	got = tu_poll(x->bcq, 3, wc, WAIT_MS);
	if (got != 3)
		fail_msg("the bystander pair gave %d of 3 completions in %d ms", got, WAIT_MS);
	for (int i = 0; i < 3; i++)
		if (wc[i].status != IBV_WC_SUCCESS)
			fail_msg("bystander wr %llu: %s", (unsigned long long)wc[i].wr_id,
				 ibv_wc_status_str(wc[i].status));
	assert_memory_equal(dst, src, 256);
	assert_memory_equal(dst + 1024, src + 256, 128);
	assert_int_equal(tu_query_state(x->b[0]), IBV_QPS_RTS);
	assert_int_equal(tu_query_state(x->b[1]), IBV_QPS_RTS);
}

static int fixture(void **state, bool crc, bool ext, bool big)
{
	struct hx *x = calloc(1, sizeof(*x));
	int fd[2];

	if (!x)
		return -1;
	x->res = tu_res_open();
	if (!x->res)
		return -1;
	x->crc = crc;
	x->ext = ext;
	x->map = mmap(NULL, REGION + 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		      -1, 0);
	if (x->map == MAP_FAILED)
		return -1;
	memset(x->map, CANARY, REGION + 2 * PAGE);
	x->region = x->map + PAGE;
	for (int i = 0; i < REGION; i++)
		x->region[i] = (uint8_t)(i ^ 0x3c);
	memcpy(x->shadow, x->region, REGION);
	x->mr = ibv_reg_mr(x->res->pd, x->region, REGION,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	if (!x->mr)
		return -1;
	for (int i = 0; i < IW_QN_MAX; i++)
		x->msn[i] = 1;
	bystander_up(x);
	x->qp = iw_qp(x->res, x->res->cq);
	tcp_pair(fd);
	x->peer = fd[1];
	iw_qp_up(x->res, x->qp, fd[0], PEER_QPN, crc, ext);
	if (big) {
		struct ibv_sge sge;
		struct ibv_recv_wr wr = { .wr_id = WR_RECV0, .sg_list = &sge, .num_sge = 1 }, *bad;

		x->big = calloc(1, BIG);
		x->bigmr = x->big ? ibv_reg_mr(x->res->pd, x->big, BIG, IBV_ACCESS_LOCAL_WRITE)
				  : NULL;
		if (!x->bigmr)
			return -1;
		sge = (struct ibv_sge){ (uintptr_t)x->big, BIG, x->bigmr->lkey };
		if (ibv_post_recv(x->qp, &wr, &bad))
			return -1;
	} else {
		post_recv(x, WR_RECV0, 0);
	}
	post_recv(x, WR_RECV1, RECV_LEN);
	post_read(x);
	wait_read_req(x);
	*state = x;
	return 0;
}

static int setup_crc(void **state)
{
	return fixture(state, true, true, false);
}

static int setup_nocrc(void **state)
{
	return fixture(state, false, true, false);
}

static int setup_noext(void **state)
{
	return fixture(state, true, false, false);
}

static int setup_big(void **state)
{
	return fixture(state, true, true, true);
}

static int teardown(void **state)
{
	struct hx *x = *state;
	struct ibv_wc wc[16];
	char msg[512];
	int rc = 0;

	if (!x)
		return 0;
	if (x->qp && ibv_destroy_qp(x->qp))
		rc = -1;
	for (int i = 0; i < 2; i++)
		if (x->b[i] && ibv_destroy_qp(x->b[i]))
			rc = -1;
	while (ibv_poll_cq(x->res->cq, 16, wc) > 0)
		;
	if (x->bcq) {
		while (ibv_poll_cq(x->bcq, 16, wc) > 0)
			;
		ibv_destroy_cq(x->bcq);
	}
	(void)tu_async_leftover(x->res->ctx, msg, sizeof(msg));
	if (x->bmr)
		ibv_dereg_mr(x->bmr);
	if (x->mr)
		ibv_dereg_mr(x->mr);
	if (x->bigmr)
		ibv_dereg_mr(x->bigmr);
	free(x->big);
	if (tu_res_close(x->res))
		rc = -1;
	if (x->peer > 0)
		close(x->peer);
	munmap(x->map, REGION + 2 * PAGE);
	free(x->bbuf);
	free(x);
	return rc;
}

/* ---- the checks -------------------------------------------------------------------- */

/* Nothing written but what the shadow allows: the canaries and the region. */
static void intact(struct hx *x)
{
	for (int i = 0; i < PAGE; i++) {
		if (x->map[i] != CANARY)
			fail_msg("canary before the region written at -%d", PAGE - i);
		if (x->region[REGION + i] != CANARY)
			fail_msg("canary after the region written at +%d", i);
	}
	for (int i = 0; i < REGION; i++)
		if (x->region[i] != x->shadow[i])
			fail_msg("region byte %d is 0x%02x, should be 0x%02x", i, x->region[i],
				 x->shadow[i]);
}

/* The QP under test is whole after what the peer sent: nothing written outside what it
 * may write, still RTS, no async event; the bystander pair still works. */
static void still_healthy(struct hx *x)
{
	struct ibv_async_event ev;
	char d[128];

	intact(x);
	assert_int_equal(tu_query_state(x->qp), IBV_QPS_RTS);
	assert_int_equal(tu_next_async(x->res->ctx, 0, &ev, d, sizeof(d)), 0);
	bystander_works(x);
}

/* The Terminate the peer gets: layer, type, code, and the header it copies (@bad, the
 * offending FPDU's first @bad_len bytes; 0: none expected). */
static void expect_term(struct hx *x, uint8_t layer, uint8_t etype, uint8_t ecode,
			const uint8_t *bad, uint32_t bad_len)
{
	struct iw_hdr t;
	uint8_t copied[IW_TERM_HDRS_MAX];
	uint32_t n = 0;
	int r = read_until_term(x, &t, copied, &n);

	if (r <= 0)
		fail_msg("no Terminate from the QP (%s)", r ? "nothing within the wait"
							    : "the stream ended first");
	if (t.term_layer != layer || t.term_etype != etype || t.term_ecode != ecode)
		fail_msg("Terminate %u/%u/0x%02x, should be %u/%u/0x%02x", t.term_layer,
			 t.term_etype, t.term_ecode, layer, etype, ecode);
	assert_int_equal(t.qn, IW_QN_TERMINATE);
	assert_int_equal(t.msn, 1);
	if (bad_len) {
		if (n != bad_len || !t.term_hdr_len || !t.term_hdr_ddp)
			fail_msg("the Terminate copies %u bytes (M %d D %d R %d), should be %u", n,
				 t.term_hdr_len, t.term_hdr_ddp, t.term_hdr_rdmap, bad_len);
		assert_memory_equal(copied, bad, bad_len);
		assert_int_equal(t.term_hdr_rdmap, bad_len > IW_HDR_UNTAGGED);
	}
}

/* The QP in ERROR after @event, its outstanding work flushed (the receives not named in
 * @done, our RDMA Read unless @read_status says how it ended), the stream closed. */
static void expect_down(struct hx *x, enum ibv_event_type event, int read_status)
{
	struct ibv_wc wc[4];
	bool seen[3] = { false };
	int got;
	struct iw_hdr t;
	uint8_t copied[IW_TERM_HDRS_MAX];
	uint32_t n;

	if (event && !tu_wait_qp_event(x->res->ctx, x->qp, event, WAIT_MS))
		fail_msg("no %s within %d ms", ibv_event_type_str(event), WAIT_MS);
	got = tu_poll_exact(x->res->cq, 3, wc, WAIT_MS);
	if (got != 3)
		fail_msg("%d of 3 completions (2 receives, 1 RDMA Read) after the error", got);
	for (int i = 0; i < 3; i++) {
		int want = wc[i].wr_id == WR_READ ? read_status : IBV_WC_WR_FLUSH_ERR;

		if ((int)wc[i].status != want)
			fail_msg("wr %llu: %s, should be %s", (unsigned long long)wc[i].wr_id,
				 ibv_wc_status_str(wc[i].status),
				 ibv_wc_status_str((enum ibv_wc_status)want));
		seen[wc[i].wr_id == WR_READ ? 2 : wc[i].wr_id - WR_RECV0] = true;
	}
	assert_true(seen[0] && seen[1] && seen[2]);
	assert_int_equal(tu_query_state(x->qp), IBV_QPS_ERR);
	if (!event) {
		struct ibv_async_event ev;
		char d[128];

		/* the error came with the completions: an event would be there by now */
		if (tu_next_async(x->res->ctx, 0, &ev, d, sizeof(d)))
			fail_msg("an async event on the requester: %s", d);
	}
	/* the stream's end: nothing but EOF (or a reset) follows */
	assert_int_equal(read_until_term(x, &t, copied, &n), 0);
}

static void expect_down_all(struct hx *x, enum ibv_event_type event)
{
	expect_down(x, event, IBV_WC_WR_FLUSH_ERR);
	intact(x);
	bystander_works(x);
}

/* ---- the cases ----------------------------------------------------------------------- */

/* A correct peer: a Send, a Write, a Read are placed or answered, nothing else moves. */
static void valid_traffic(void **state)
{
	struct hx *x = *state;
	uint8_t msg[64], wr[32];
	struct ibv_wc wc;

	for (int i = 0; i < 64; i++)
		msg[i] = (uint8_t)(0x80 + i);
	for (int i = 0; i < 32; i++)
		wr[i] = (uint8_t)(0xc0 + i);
	send_fpdu(x, IW_OP_SEND, msg, 64, true);
	write_fpdu(x, x->mr->rkey, (uintptr_t)x->region + WRITE_AT, wr, 32);
	read_req(x, x->mr->rkey, (uintptr_t)x->region + READ_AT, 48, 0x99, 0);
	flush_out(x);
	assert_int_equal(tu_poll(x->res->cq, 1, &wc, WAIT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, WR_RECV0);
	assert_int_equal(wc.byte_len, 64);
	memcpy(x->shadow, msg, 64);
	memcpy(x->shadow + WRITE_AT, wr, 32);
	/* the Read Response carries the region's bytes */
	{
		long long end = tu_now_ms() + WAIT_MS;

		while (x->read_resps < 1 && tu_now_ms() < end) {
			struct iw_hdr t;
			uint8_t c[64];
			uint32_t n;

			if (read_until_term(x, &t, c, &n) != -1)
				fail_msg("the stream ended or terminated after valid traffic");
		}
	}
	assert_int_equal(x->read_resps, 1);
	assert_int_equal(x->resp_len, 48);
	assert_memory_equal(x->resp_data, x->region + READ_AT, 48);
	still_healthy(x);
}

static void write_bad_stag(void **state)
{
	struct hx *x = *state;
	uint8_t pl[32] = { 1 };
	size_t at = write_fpdu(x, x->mr->rkey ^ 0x100, (uintptr_t)x->region + WRITE_AT, pl, 32);
	uint8_t bad[IW_HDR_TAGGED];

	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	expect_term(x, IW_TERM_DDP, IW_ETYPE_DDP_TAGGED, IW_ECODE_DDP_T_INV_STAG, bad, sizeof(bad));
	expect_down_all(x, IBV_EVENT_QP_ACCESS_ERR);
}

/* A Write whose range leaves the region (@to, @len): RFC 5041 base or bounds. */
static void write_out_of_bounds(struct hx *x, uint64_t to, uint32_t len)
{
	static uint8_t pl[256];
	size_t at;
	uint8_t bad[IW_HDR_TAGGED];

	memset(pl, 0xee, sizeof(pl));
	at = write_fpdu(x, x->mr->rkey, to, pl, len);
	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	expect_term(x, IW_TERM_DDP, IW_ETYPE_DDP_TAGGED, IW_ECODE_DDP_T_BASE_BOUNDS, bad,
		    sizeof(bad));
	expect_down_all(x, IBV_EVENT_QP_ACCESS_ERR);
}

static void write_past_end(void **state)
{
	struct hx *x = *state;

	write_out_of_bounds(x, (uintptr_t)x->region + REGION - 8, 32);
}

static void write_before_start(void **state)
{
	struct hx *x = *state;

	write_out_of_bounds(x, (uintptr_t)x->region - 16, 32);
}

static void write_offset_wraps(void **state)
{
	struct hx *x = *state;

	write_out_of_bounds(x, UINT64_MAX - 7, 32);
}

/* A Write split in two FPDUs whose second leaves the region: the first (inside) is
 * placed, the second not a byte. */
static void write_second_segment_past_end(void **state)
{
	struct hx *x = *state;
	uint8_t pl[64];
	struct iw_hdr h1 = { .opcode = IW_OP_WRITE, .last = false, .stag = x->mr->rkey,
			     .to = (uintptr_t)x->region + REGION - 64 };
	struct iw_hdr h2 = { .opcode = IW_OP_WRITE, .last = true, .stag = x->mr->rkey,
			     .to = (uintptr_t)x->region + REGION };
	uint8_t bad[IW_HDR_TAGGED];
	size_t at;

	memset(pl, 0x77, sizeof(pl));
	fpdu(x, &h1, pl, 64, false);
	at = fpdu(x, &h2, pl, 64, false);
	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	memcpy(x->shadow + REGION - 64, pl, 64);
	expect_term(x, IW_TERM_DDP, IW_ETYPE_DDP_TAGGED, IW_ECODE_DDP_T_BASE_BOUNDS, bad,
		    sizeof(bad));
	expect_down_all(x, IBV_EVENT_QP_ACCESS_ERR);
}

static void read_bad_stag(void **state)
{
	struct hx *x = *state;
	size_t at = read_req(x, x->mr->rkey + 1, (uintptr_t)x->region, 16, 0x99, 0);
	uint8_t bad[IW_HDR_UNTAGGED + 28];

	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	expect_term(x, IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_PROT, IW_ECODE_RDMAP_INV_STAG, bad,
		    sizeof(bad));
	assert_int_equal(x->read_resps, 0);
	expect_down_all(x, IBV_EVENT_QP_ACCESS_ERR);
}

static void read_past_end(void **state)
{
	struct hx *x = *state;
	size_t at = read_req(x, x->mr->rkey, (uintptr_t)x->region + REGION - 16, 64, 0x99, 0);
	uint8_t bad[IW_HDR_UNTAGGED + 28];

	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	expect_term(x, IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_PROT, IW_ECODE_RDMAP_BASE_BOUNDS, bad,
		    sizeof(bad));
	assert_int_equal(x->read_resps, 0); /* not a byte of what lies past it */
	expect_down_all(x, IBV_EVENT_QP_ACCESS_ERR);
}

/* IRD + 1 Read Requests at once: the first IRD are answered, then Terminate. */
static void read_flood_past_ird(void **state)
{
	struct hx *x = *state;
	uint8_t bad[IW_HDR_UNTAGGED + 28];
	size_t at = 0;

	for (int i = 0; i <= IRD; i++)
		at = read_req(x, x->mr->rkey, (uintptr_t)x->region + READ_AT + 8 * i, 8, 0x99,
			      8 * (uint64_t)i);
	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	expect_term(x, IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_STREAM_CATA, bad,
		    sizeof(bad));
	assert_int_equal(x->read_resps, IRD);
	assert_memory_equal(x->resp_data, x->region + READ_AT, 8 * IRD);
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

/* An untagged header that fails a DDP check: @h as given. */
static void untagged_fault(struct hx *x, struct iw_hdr *h, uint32_t len, uint8_t ecode)
{
	uint8_t pl[64] = { 0 }, bad[IW_HDR_UNTAGGED];
	size_t at = fpdu(x, h, pl, len, false);

	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	expect_term(x, IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, ecode, bad, sizeof(bad));
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

static void send_msn_gap(void **state)
{
	struct hx *x = *state;
	struct iw_hdr h = { .opcode = IW_OP_SEND, .last = true, .msn = 2 };

	untagged_fault(x, &h, 16, IW_ECODE_DDP_U_INV_MSN_RANGE);
}

/* A valid Send, then one that skips an MSN: the first is received, the second not. */
static void send_msn_gap_after_valid(void **state)
{
	struct hx *x = *state;
	uint8_t pl[16] = { 9, 8, 7 }, bad[IW_HDR_UNTAGGED];
	struct iw_hdr h = { .opcode = IW_OP_SEND, .last = true, .msn = 3 };
	struct ibv_wc wc;
	size_t at;

	send_fpdu(x, IW_OP_SEND, pl, 16, true);
	at = fpdu(x, &h, pl, 16, false);
	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	memcpy(x->shadow, pl, 16);
	expect_term(x, IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_MSN_RANGE, bad,
		    sizeof(bad));
	if (!tu_wait_qp_event(x->res->ctx, x->qp, IBV_EVENT_QP_FATAL, WAIT_MS))
		fail_msg("no IBV_EVENT_QP_FATAL");
	assert_int_equal(tu_poll(x->res->cq, 1, &wc, WAIT_MS), 1);
	assert_int_equal(wc.wr_id, WR_RECV0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 16);
	assert_int_equal(tu_poll_exact(x->res->cq, 2, (struct ibv_wc[2]){ 0 }, WAIT_MS), 2);
	assert_int_equal(tu_query_state(x->qp), IBV_QPS_ERR);
	intact(x);
	bystander_works(x);
}

static void send_bad_mo(void **state)
{
	struct hx *x = *state;
	struct iw_hdr h = { .opcode = IW_OP_SEND, .last = true, .msn = 1, .mo = 8 };

	untagged_fault(x, &h, 16, IW_ECODE_DDP_U_INV_MO);
}

static void read_req_bad_mo(void **state)
{
	struct hx *x = *state;
	uint8_t bad[IW_HDR_UNTAGGED + 28];
	size_t at = read_req(x, x->mr->rkey, (uintptr_t)x->region, 8, 0x99, 0);

	/* RFC 5041: a single-segment message at an offset */
	x->out[at + 16 + 3] = 4;
	if (x->crc) {
		uint32_t c = iw_crc_final(iw_crc_update(iw_crc_init(), x->out + at, 48));

		iw_crc_put(x->out + at + 48, c);
	}
	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	expect_term(x, IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_MO, bad, sizeof(bad));
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

/* A queue number no opcode has: the Terminate copies the whole untagged header (20
 * bytes), though the decoder refuses it before it is all in. */
static void send_bad_qn(void **state)
{
	struct hx *x = *state;
	uint8_t pl[16] = { 0 }, bad[IW_HDR_UNTAGGED];
	struct iw_hdr h = { .opcode = IW_OP_SEND, .last = true, .msn = 1 };
	size_t at = fpdu(x, &h, pl, 16, false);

	x->out[at + 8 + 3] = 5; /* qn */
	if (x->crc) {
		uint32_t c = iw_crc_final(iw_crc_update(iw_crc_init(), x->out + at, 36));

		iw_crc_put(x->out + at + 36, c);
	}
	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	expect_term(x, IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_QN, bad, sizeof(bad));
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

/* A Send longer than the receive: the receive fails with LOC_LEN_ERR, nothing of it is
 * written (not even what would fit), the next receive is flushed. */
static void send_too_long(void **state)
{
	struct hx *x = *state;
	static uint8_t pl[RECV_LEN + 64];
	uint8_t bad[IW_HDR_UNTAGGED];
	struct ibv_wc wc[3];
	size_t at;
	int got;

	memset(pl, 0xdd, sizeof(pl));
	at = send_fpdu(x, IW_OP_SEND, pl, sizeof(pl), true);
	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	expect_term(x, IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_TOO_LONG, bad,
		    sizeof(bad));
	got = tu_poll_exact(x->res->cq, 3, wc, WAIT_MS);
	assert_int_equal(got, 3);
	for (int i = 0; i < 3; i++) {
		enum ibv_wc_status want = wc[i].wr_id == WR_RECV0 ? IBV_WC_LOC_LEN_ERR
								  : IBV_WC_WR_FLUSH_ERR;

		if (wc[i].status != want)
			fail_msg("wr %llu: %s, should be %s", (unsigned long long)wc[i].wr_id,
				 ibv_wc_status_str(wc[i].status), ibv_wc_status_str(want));
	}
	assert_int_equal(tu_query_state(x->qp), IBV_QPS_ERR);
	intact(x);
	bystander_works(x);
	{
		struct ibv_async_event ev;
		char d[128];

		/* IBA: a receive-side length error is reported by its completion alone */
		(void)tu_next_async(x->res->ctx, 500, &ev, d, sizeof(d));
	}
}

/* A Send whose CRC is wrong (CRC negotiated): Terminate LLP/MPA/0x02, and the receive
 * it would have filled does not complete as a success. */
static void bad_crc(void **state)
{
	struct hx *x = *state;
	uint8_t pl[64];
	struct iw_hdr h = { .opcode = IW_OP_SEND, .last = true, .msn = 1 };

	memset(pl, 0x44, sizeof(pl));
	fpdu(x, &h, pl, 64, true);
	flush_out(x);
	expect_term(x, IW_TERM_LLP, IW_ETYPE_MPA, IW_ECODE_MPA_CRC, NULL, 0);
	/* the payload may lie in the receive buffer (placed as it passed): not a
	 * completion */
	memcpy(x->shadow, x->region, RECV_LEN);
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

/* A Send larger than the wire's stage (IW_STAGE, 4 KiB) with a bad CRC: its payload is
 * read from the socket straight into the receive, and the receive completes only after
 * the CRC was read (the end of the Send comes as an empty segment of its own): it is
 * flushed, never a success. A small FPDU is checked before delivery (bad_crc). */
static void bad_crc_large_send(void **state)
{
	struct hx *x = *state;
	static uint8_t pl[8192];
	struct iw_hdr h = { .opcode = IW_OP_SEND, .last = true, .msn = 1 };
	struct ibv_wc wc[3];

	memset(pl, 0x47, sizeof(pl));
	fpdu(x, &h, pl, sizeof(pl), true);
	flush_out(x);
	expect_term(x, IW_TERM_LLP, IW_ETYPE_MPA, IW_ECODE_MPA_CRC, NULL, 0);
	assert_int_equal(tu_poll_exact(x->res->cq, 3, wc, WAIT_MS), 3);
	for (int i = 0; i < 3; i++)
		if (wc[i].wr_id == WR_RECV0 && wc[i].status == IBV_WC_SUCCESS)
			fail_msg("the receive of a Send with a bad CRC completed as a success");
	intact(x);
}

/* A Write whose CRC is wrong: Terminate; whatever it placed is inside its range. */
static void bad_crc_write(void **state)
{
	struct hx *x = *state;
	uint8_t pl[64];
	struct iw_hdr h = { .opcode = IW_OP_WRITE, .last = true, .stag = x->mr->rkey,
			    .to = (uintptr_t)x->region + WRITE_AT };

	memset(pl, 0x45, sizeof(pl));
	fpdu(x, &h, pl, 64, true);
	flush_out(x);
	expect_term(x, IW_TERM_LLP, IW_ETYPE_MPA, IW_ECODE_MPA_CRC, NULL, 0);
	memcpy(x->shadow + WRITE_AT, x->region + WRITE_AT, 64);
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

/* CRC not negotiated: the field is not checked (RFC 5044 §6: whatever it holds). */
static void crc_off_not_checked(void **state)
{
	struct hx *x = *state;
	uint8_t pl[64];
	struct iw_hdr h = { .opcode = IW_OP_SEND, .last = true, .msn = x->msn[IW_QN_SEND]++ };
	struct ibv_wc wc;

	memset(pl, 0x46, sizeof(pl));
	fpdu(x, &h, pl, 64, true);
	flush_out(x);
	assert_int_equal(tu_poll(x->res->cq, 1, &wc, WAIT_MS), 1);
	assert_int_equal(wc.wr_id, WR_RECV0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	memcpy(x->shadow, pl, 64);
	intact(x);
	assert_int_equal(tu_query_state(x->qp), IBV_QPS_RTS);
	/* then a real fault still terminates */
	{
		struct iw_hdr g = { .opcode = IW_OP_SEND, .last = true, .msn = 9 };
		uint8_t bad[IW_HDR_UNTAGGED];
		size_t at = fpdu(x, &g, pl, 8, false);

		memcpy(bad, x->out + at, sizeof(bad));
		flush_out(x);
		expect_term(x, IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_MSN_RANGE,
			    bad, sizeof(bad));
	}
	if (!tu_wait_qp_event(x->res->ctx, x->qp, IBV_EVENT_QP_FATAL, WAIT_MS))
		fail_msg("no IBV_EVENT_QP_FATAL");
	assert_int_equal(tu_poll_exact(x->res->cq, 2, (struct ibv_wc[2]){ 0 }, WAIT_MS), 2);
	intact(x);
	bystander_works(x);
}

/* Control bytes (byte 2, byte 3) of a header in front of @len bytes of zeros. */
static void bad_control(struct hx *x, uint8_t b2, uint8_t b3, uint8_t layer, uint8_t etype,
			uint8_t ecode, uint32_t copy)
{
	uint8_t f[64] = { 0, 30 - 2 + 4, b2, b3 }; /* ULPDU_Length 32, then zeros */
	uint32_t c;

	f[9] = 0; /* qn 0 */
	f[15] = 1; /* msn 1 */
	if (x->crc) {
		c = iw_crc_final(iw_crc_update(iw_crc_init(), f, 34 + iw_pad(32)));
		iw_crc_put(f + 34 + iw_pad(32), c);
	}
	raw(x, f, 34 + iw_pad(32) + 4);
	flush_out(x);
	expect_term(x, layer, etype, ecode, copy ? f : NULL, copy);
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

static void unknown_opcode(void **state)
{
	bad_control(*state, IW_DDP_L | 1, 1 << 6 | 0xc, IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP,
		    IW_ECODE_RDMAP_INV_OPCODE, IW_HDR_UNTAGGED);
}

/* RFC 7306's Immediate Data where it was not negotiated. */
static void ext_opcode_not_negotiated(void **state)
{
	bad_control(*state, IW_DDP_L | 1, 1 << 6 | IW_OP_IMM, IW_TERM_RDMAP,
		    IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE, IW_HDR_UNTAGGED);
}

/* A Send with the T bit (the buffer model of another opcode). */
static void tagged_send(void **state)
{
	bad_control(*state, IW_DDP_T | IW_DDP_L | 1, 1 << 6 | IW_OP_SEND, IW_TERM_RDMAP,
		    IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE, IW_HDR_TAGGED);
}

static void bad_ddp_version_untagged(void **state)
{
	bad_control(*state, IW_DDP_L | 2, 1 << 6 | IW_OP_SEND, IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED,
		    IW_ECODE_DDP_U_INV_VERSION, IW_HDR_UNTAGGED);
}

static void bad_ddp_version_tagged(void **state)
{
	bad_control(*state, IW_DDP_T | IW_DDP_L | 0, 1 << 6 | IW_OP_WRITE, IW_TERM_DDP,
		    IW_ETYPE_DDP_TAGGED, IW_ECODE_DDP_T_INV_VERSION, IW_HDR_TAGGED);
}

static void bad_rdmap_version(void **state)
{
	bad_control(*state, IW_DDP_L | 1, 2 << 6 | IW_OP_SEND, IW_TERM_RDMAP,
		    IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_VERSION, IW_HDR_UNTAGGED);
}

/* A Read Request whose ULPDU_Length says it carries payload (past its header): no
 * payload may follow a Read Request. */
static void read_req_with_payload(void **state)
{
	struct hx *x = *state;
	uint8_t f[64] = { 0 };
	struct iw_hdr h = { .opcode = IW_OP_READ_REQ, .last = true, .msn = 1, .read_size = 8,
			    .src_stag = x->mr->rkey, .src_to = (uintptr_t)x->region };
	uint32_t c;

	assert_int_equal(iw_hdr_encode(f, &h), 48);
	f[1] += 8; /* ULPDU_Length: 8 bytes more */
	if (x->crc) {
		c = iw_crc_final(iw_crc_update(iw_crc_init(), f, 56));
		iw_crc_put(f + 56, c);
	}
	raw(x, f, 60);
	flush_out(x);
	expect_term(x, IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_UNSPECIFIED, f, 48);
	assert_int_equal(x->read_resps, 0);
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

/* A ULPDU_Length shorter than the opcode's header. */
static void ulpdu_shorter_than_header(void **state)
{
	struct hx *x = *state;
	uint8_t f[64] = { 0 };
	struct iw_hdr h = { .opcode = IW_OP_SEND, .last = true, .msn = 1 };

	assert_int_equal(iw_hdr_encode(f, &h), 20);
	f[1] = 10;
	raw(x, f, 20); /* and whatever: the length is wrong already */
	flush_out(x);
	expect_term(x, IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_UNSPECIFIED, f, 20);
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

/* A Send whose ULPDU_Length promises more than comes before the peer closes: nothing of
 * it is placed, the QP goes down (no Terminate: the stream is gone). */
static void length_past_stream_end(void **state)
{
	struct hx *x = *state;
	uint8_t f[128] = { 0 };
	struct iw_hdr h = { .opcode = IW_OP_SEND, .last = true, .msn = 1, .payload_len = 400 };
	struct iw_hdr t;
	uint8_t c[64];
	uint32_t n;

	assert_int_equal(iw_hdr_encode(f, &h), 20);
	memset(f + 20, 0x31, 100);
	raw(x, f, 120);
	flush_out(x);
	assert_int_equal(shutdown(x->peer, SHUT_WR), 0);
	expect_down(x, IBV_EVENT_QP_FATAL, IBV_WC_WR_FLUSH_ERR);
	(void)read_until_term(x, &t, c, &n);
	intact(x);
	bystander_works(x);
}

/* A Send whose ULPDU_Length is larger than what the peer sends as its FPDU, the next
 * FPDU taken for its payload: the CRC does not match (Terminate LLP/MPA/0x02). */
static void length_past_fpdu(void **state)
{
	struct hx *x = *state;
	uint8_t pl[64];
	struct iw_hdr h = { .opcode = IW_OP_SEND, .last = true, .msn = 1 };
	size_t at;

	memset(pl, 0x51, sizeof(pl));
	at = fpdu(x, &h, pl, 16, false);
	x->out[at + 1] += 32; /* 32 bytes more than it has */
	send_fpdu(x, IW_OP_SEND, pl, 64, true);
	flush_out(x);
	expect_term(x, IW_TERM_LLP, IW_ETYPE_MPA, IW_ECODE_MPA_CRC, NULL, 0);
	memcpy(x->shadow, x->region, RECV_LEN);
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

/* Garbage straight after the handshake. */
static void garbage_after_handshake(void **state)
{
	struct hx *x = *state;
	uint8_t g[256];
	unsigned s = 12345;

	for (size_t i = 0; i < sizeof(g); i++) {
		s = s * 1103515245 + 12345;
		g[i] = (uint8_t)(s >> 16);
	}
	g[2] = 0xff; /* DDP version 3 */
	raw(x, g, sizeof(g));
	flush_out(x);
	expect_term(x, IW_TERM_DDP, IW_ETYPE_DDP_TAGGED, IW_ECODE_DDP_T_INV_VERSION, g,
		    IW_HDR_TAGGED);
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

/* A Read Response when we asked for nothing of that STag, one past what we asked, one
 * unsolicited: Terminate, our RDMA Read fails, nothing lands outside its sink. */
static void read_resp_fault(struct hx *x, uint32_t stag, uint64_t to, uint32_t len,
			    uint8_t layer, uint8_t etype, uint8_t ecode)
{
	static uint8_t pl[256];
	struct iw_hdr h = { .opcode = IW_OP_READ_RESP, .last = true, .stag = stag, .to = to };
	uint8_t bad[IW_HDR_TAGGED];
	size_t at;

	memset(pl, 0x62, sizeof(pl));
	at = fpdu(x, &h, pl, len, false);
	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	expect_term(x, layer, etype, ecode, bad, sizeof(bad));
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

static void read_resp_bad_stag(void **state)
{
	struct hx *x = *state;

	read_resp_fault(x, x->read_req.sink_stag ^ 1, x->read_req.sink_to, SINK_LEN, IW_TERM_DDP,
			IW_ETYPE_DDP_TAGGED, IW_ECODE_DDP_T_INV_STAG);
}

static void read_resp_too_long(void **state)
{
	struct hx *x = *state;

	read_resp_fault(x, x->read_req.sink_stag, x->read_req.sink_to, SINK_LEN + 64, IW_TERM_DDP,
			IW_ETYPE_DDP_TAGGED, IW_ECODE_DDP_T_BASE_BOUNDS);
}

static void read_resp_bad_offset(void **state)
{
	struct hx *x = *state;

	read_resp_fault(x, x->read_req.sink_stag, x->read_req.sink_to + 8, SINK_LEN - 8,
			IW_TERM_DDP, IW_ETYPE_DDP_TAGGED, IW_ECODE_DDP_T_BASE_BOUNDS);
}

/* Two responses to one Read: the second answers nothing. */
static void read_resp_unsolicited(void **state)
{
	struct hx *x = *state;
	uint8_t pl[SINK_LEN];
	struct iw_hdr h = { .opcode = IW_OP_READ_RESP, .last = true,
			    .stag = x->read_req.sink_stag, .to = x->read_req.sink_to };
	uint8_t bad[IW_HDR_TAGGED];
	size_t at;
	struct ibv_wc wc;

	memset(pl, 0x63, sizeof(pl));
	fpdu(x, &h, pl, SINK_LEN, false);
	at = fpdu(x, &h, pl, SINK_LEN, false);
	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	memcpy(x->shadow + SINK_AT, pl, SINK_LEN);
	expect_term(x, IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE, bad,
		    sizeof(bad));
	if (!tu_wait_qp_event(x->res->ctx, x->qp, IBV_EVENT_QP_FATAL, WAIT_MS))
		fail_msg("no IBV_EVENT_QP_FATAL");
	/* the Read completed with the first response; the receives are flushed */
	assert_int_equal(tu_poll_exact(x->res->cq, 3, (struct ibv_wc[3]){ 0 }, WAIT_MS), 3);
	(void)wc;
	intact(x);
	bystander_works(x);
}

/* The peer terminates naming our RDMA Read: the Read fails with the status the
 * Terminate means (remote access error), the receives are flushed, the QP is in ERROR.
 * No async event: the requester learns of a remote error from its completion, as on
 * InfiniBand and shm (tests/verbs/test_data_errors.c runs over iWARP too and checks
 * that), though issue 13's "IBV_EVENT_QP_FATAL" for a broken connection might be read
 * to ask for one. */
static void peer_terminates(void **state)
{
	struct hx *x = *state;
	uint8_t f[128];
	struct iw_term t = { IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_PROT, IW_ECODE_RDMAP_INV_STAG };
	uint8_t rr[48];
	struct iw_hdr h = x->read_req;
	int n;
	uint32_t pad, c = 0;

	h.payload_len = 0;
	assert_int_equal(iw_hdr_encode(rr, &h), 48);
	n = iw_term_encode(f, sizeof(f), &t, rr, 48);
	assert_true(n > 0);
	pad = iw_pad((uint32_t)n - 2);
	memset(f + n, 0, pad);
	if (x->crc)
		c = iw_crc_final(iw_crc_update(iw_crc_init(), f, (size_t)n + pad));
	iw_crc_put(f + n + pad, c);
	raw(x, f, (size_t)n + pad + 4);
	flush_out(x);
	expect_down(x, 0, IBV_WC_REM_ACCESS_ERR);
	intact(x);
	bystander_works(x);
}

/* RFC 7306 atomics at a bad STag, past the region, unaligned. */
static void atomic_fault(struct hx *x, uint32_t stag, uint64_t to, uint8_t layer, uint8_t etype,
			 uint8_t ecode, enum ibv_event_type ev)
{
	struct iw_hdr h = { .opcode = IW_OP_ATOMIC_REQ, .last = true,
			    .msn = x->msn[IW_QN_ATOMIC_REQ]++, .atomic_op = IW_ATOMIC_FETCH_ADD,
			    .atomic_req_id = 7, .atomic_stag = stag, .atomic_to = to,
			    .add_swap = 0x0101010101010101ull, .add_swap_mask = UINT64_MAX };
	uint8_t bad[IW_HDR_UNTAGGED];
	size_t at = fpdu(x, &h, NULL, 0, false);

	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	expect_term(x, layer, etype, ecode, bad, sizeof(bad));
	expect_down_all(x, ev);
}

static void atomic_bad_stag(void **state)
{
	struct hx *x = *state;

	atomic_fault(x, x->mr->rkey ^ 0x10, (uintptr_t)x->region, IW_TERM_RDMAP,
		     IW_ETYPE_RDMAP_REMOTE_PROT, IW_ECODE_RDMAP_INV_STAG, IBV_EVENT_QP_ACCESS_ERR);
}

static void atomic_past_end(void **state)
{
	struct hx *x = *state;

	atomic_fault(x, x->mr->rkey, (uintptr_t)x->region + REGION, IW_TERM_RDMAP,
		     IW_ETYPE_RDMAP_REMOTE_PROT, IW_ECODE_RDMAP_BASE_BOUNDS,
		     IBV_EVENT_QP_ACCESS_ERR);
}

static void atomic_unaligned(void **state)
{
	struct hx *x = *state;

	atomic_fault(x, x->mr->rkey, (uintptr_t)x->region + 4, IW_TERM_RDMAP,
		     IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE, IBV_EVENT_QP_REQ_ERR);
}

/* An Atomic Response to no request of ours. */
static void atomic_resp_unsolicited(void **state)
{
	struct hx *x = *state;
	struct iw_hdr h = { .opcode = IW_OP_ATOMIC_RESP, .last = true,
			    .msn = x->msn[IW_QN_ATOMIC_RESP]++, .atomic_req_id = 1,
			    .orig_value = 5 };
	uint8_t bad[IW_HDR_UNTAGGED];
	size_t at = fpdu(x, &h, NULL, 0, false);

	memcpy(bad, x->out + at, sizeof(bad));
	flush_out(x);
	expect_term(x, IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE, bad,
		    sizeof(bad));
	expect_down_all(x, IBV_EVENT_QP_FATAL);
}

/* ---- a peer as Linux siw behaves (issue 23) ------------------------------------------ */

/* Answers the fixture's outstanding RDMA Read in full: its completion, the bytes placed. */
static void answer_fixture_read(struct hx *x)
{
	uint8_t pl[SINK_LEN];
	struct iw_hdr h = { .opcode = IW_OP_READ_RESP, .last = true,
			    .stag = x->read_req.sink_stag, .to = x->read_req.sink_to };
	struct ibv_wc wc;

	for (int i = 0; i < SINK_LEN; i++)
		pl[i] = (uint8_t)(0x11 * i);
	fpdu(x, &h, pl, SINK_LEN, false);
	flush_out(x);
	assert_int_equal(tu_poll(x->res->cq, 1, &wc, WAIT_MS), 1);
	assert_int_equal(wc.wr_id, WR_READ);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	memcpy(x->shadow + SINK_AT, pl, SINK_LEN);
}

/* The next Read Request the QP sends, after those seen (Sends and the rest skipped). */
static struct iw_hdr next_read_req(struct hx *x)
{
	x->read_seen = false;
	wait_read_req(x);
	return x->read_req;
}

/*
 * Linux siw (6.1, siw_activate_tx) answers a zero-length Read Request that waited behind
 * other transmit work with the length and source of the WQE it sent before: a Read
 * Response of 16 bytes (rping's Send) to a Read of none. Caught between softverbs and siw
 * (rping -v: the Terminate "DDP tagged base or bounds" after a few pings, both
 * directions). A zero-length Read places nothing: its answer's payload is dropped, the
 * Read (here the placement probe after a Send, then the application's own zero-length
 * Read) completes, the connection stays up.
 */
static void zero_read_answered_with_stale_bytes(void **state)
{
	struct hx *x = *state;
	uint8_t stale[16], msg[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct ibv_sge sge = { (uintptr_t)(x->region + 3000), sizeof(msg), x->mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr rwr = { .wr_id = 8, .opcode = IBV_WR_RDMA_READ,
				   .send_flags = IBV_SEND_SIGNALED,
				   .wr.rdma = { .remote_addr = 0x1000, .rkey = REMOTE_STAG } };
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	struct iw_hdr rq, h = { .opcode = IW_OP_READ_RESP, .last = true };

	memset(stale, 0xee, sizeof(stale));
	answer_fixture_read(x);
	memcpy(x->region + 3000, msg, sizeof(msg));
	memcpy(x->shadow + 3000, msg, sizeof(msg));
	for (int round = 0; round < 2; round++) {
		assert_int_equal(ibv_post_send(x->qp, round ? &rwr : &swr, &bad), 0);
		rq = next_read_req(x); /* round 0: the placement probe after the Send */
		assert_int_equal(rq.read_size, 0);
		h.stag = rq.sink_stag;
		h.to = rq.sink_to;
		fpdu(x, &h, stale, sizeof(stale), false);
		flush_out(x);
		if (tu_poll(x->res->cq, 1, &wc, WAIT_MS) != 1)
			fail_msg("round %d: no completion after the answer", round);
		assert_int_equal(wc.wr_id, round ? 8 : 7);
		if (wc.status != IBV_WC_SUCCESS)
			fail_msg("round %d: %s", round, ibv_wc_status_str(wc.status));
	}
	still_healthy(x);
}

/* A peer's zero-length RDMA Write (RFC 6581's RTR, our own nudge, siw's): its STag is
 * not checked, nothing is placed, the connection stays up. */
static void zero_write_any_stag(void **state)
{
	struct hx *x = *state;
	struct iw_hdr h = { .opcode = IW_OP_WRITE, .last = true, .stag = 0x1234567,
			    .to = 0xdeadbeef };
	uint8_t msg[8] = { 9, 8, 7, 6, 5, 4, 3, 2 };
	struct ibv_wc wc;

	answer_fixture_read(x);
	fpdu(x, &h, NULL, 0, false);
	h.stag = 0;
	h.to = 0;
	fpdu(x, &h, NULL, 0, false);
	/* A Send behind them: its receive completes once the QP has taken both Writes. */
	send_fpdu(x, IW_OP_SEND, msg, sizeof(msg), true);
	flush_out(x);
	assert_int_equal(tu_poll(x->res->cq, 1, &wc, WAIT_MS), 1);
	assert_int_equal(wc.wr_id, WR_RECV0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	memcpy(x->shadow, msg, sizeof(msg));
	still_healthy(x);
}

/* An iWARP QP adopting one end of a fresh loopback TCP pair as rdma_cm's passive side
 * (@peer_first) or active side; the test holds the other end. */
static struct ibv_qp *adopted(struct tu_res *res, int fd[2], bool peer_first)
{
	struct softverbs_stream st = { .crc = 1, .ird = IRD, .ord = IRD,
				       .peer_first = peer_first };
	struct ibv_qp *qp = iw_qp(res, res->cq);
	struct tu_conn c;

	tcp_pair(fd);
	tu_conn_init(&c, res, PEER_QPN);
	c.max_rd_atomic = c.max_dest_rd_atomic = IRD;
	assert_int_equal(tu_qp_to_init(qp, &c), 0);
	assert_int_equal(softverbs_qp_adopt_stream(qp, fd[0], &st), 0);
	assert_int_equal(tu_qp_to_rtr(qp, &c), 0);
	assert_int_equal(tu_qp_to_rts(qp, &c), 0);
	return qp;
}

/* The first FPDU from @fd within @ms: its header, or opcode 0xff when none came. */
static struct iw_hdr first_fpdu(int fd, int ms)
{
	struct iw_hdr h = { .opcode = 0xff };
	uint8_t buf[4096];
	size_t have = 0;
	long long end = tu_now_ms() + ms;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		struct iw_term err;
		long long left = end - tu_now_ms();
		ssize_t n;

		if (have >= 4 && iw_hdr_decode(buf, have, false, &h, &err) > 0)
			return h;
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return (struct iw_hdr){ .opcode = 0xff };
		n = read(fd, buf + have, sizeof(buf) - have);
		if (n <= 0)
			return (struct iw_hdr){ .opcode = 0xff };
		have += (size_t)n;
	}
}

/*
 * The passive side of an MPA exchange sends nothing before the initiator's first FPDU
 * (RFC 5044 §7.1): a Linux siw initiator that finds bytes behind the reply before it has
 * read it drops the connection ("peer sent extra data": ucmatose from siw to softverbs
 * failed with CONNECT_ERROR -22). The first FPDU releases what waited at once; an
 * initiator that waits to be spoken to (ucmatose's client) gets it after a short wait.
 */
static void passive_waits_for_the_initiator(void **state)
{
	struct tu_res *res = tu_res_open();
	uint8_t buf[64] = { 7 };
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_qp *qp[2];
	struct iw_hdr h;
	long long t0;
	int fd[2][2];

	(void)state;
	assert_non_null(res);
	mr = ibv_reg_mr(res->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	sge = (struct ibv_sge){ (uintptr_t)buf, 16, mr->lkey };
	/* Released by the initiator's first FPDU: nothing before it, the Send right after.
	 * (A machine stalled past the 50 ms hold sees the Send go by itself: then only that
	 * it did not go earlier is checked.) */
	t0 = tu_now_ms();
	qp[0] = adopted(res, fd[0], true);
	assert_int_equal(ibv_post_send(qp[0], &wr, &bad), 0);
	h = first_fpdu(fd[0][1], 20);
	if (h.opcode != 0xff && tu_now_ms() - t0 < PEER_FIRST_MS)
		fail_msg("the passive side sent %s before the initiator's first FPDU",
			 iw_op_name(h.opcode));
	if (h.opcode == 0xff) {
		struct iw_hdr w = { .opcode = IW_OP_WRITE, .last = true };
		uint8_t f[64];
		int hl = iw_hdr_encode(f, &w);
		uint32_t pad = iw_pad((uint32_t)hl - IW_MPA_LEN_BYTES);

		memset(f + hl, 0, pad);
		iw_crc_put(f + hl + pad, iw_crc_final(iw_crc_update(iw_crc_init(), f, hl + pad)));
		assert_int_equal(write(fd[0][1], f, (size_t)hl + pad + IW_CRC_BYTES),
				 hl + pad + IW_CRC_BYTES);
		h = first_fpdu(fd[0][1], WAIT_MS);
	}
	assert_int_equal(h.opcode, IW_OP_SEND);
	/* An initiator that says nothing: the Send goes after the wait (50 ms). */
	qp[1] = adopted(res, fd[1], true);
	assert_int_equal(ibv_post_send(qp[1], &wr, &bad), 0);
	h = first_fpdu(fd[1][1], WAIT_MS);
	assert_int_equal(h.opcode, IW_OP_SEND);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(ibv_destroy_qp(qp[i]), 0);
		close(fd[i][1]);
	}
	ibv_dereg_mr(mr);
	assert_int_equal(tu_res_close(res), 0);
}

/*
 * The active side whose responder says nothing after the connection came up sends one
 * zero-length RDMA Write (STag 0): a Linux siw responder leaves FPDUs that came before it
 * handed the socket to its QP unread until more bytes arrive (rping's client waited for
 * ever on the first connection after the VM booted).
 */
static void active_nudges_a_silent_responder(void **state)
{
	struct tu_res *res = tu_res_open();
	struct ibv_qp *qp;
	struct iw_hdr h;
	int fd[2];

	(void)state;
	assert_non_null(res);
	qp = adopted(res, fd, false);
	h = first_fpdu(fd[1], WAIT_MS);
	if (h.opcode != IW_OP_WRITE || h.payload_len || h.stag || h.to || !h.last)
		fail_msg("no zero-length Write from the active side (got opcode 0x%x)", h.opcode);
	assert_int_equal(tu_query_state(qp), IBV_QPS_RTS);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	close(fd[1]);
	assert_int_equal(tu_res_close(res), 0);
}

/*
 * A peer that closes an rdma_cm stream in order (a FIN, nothing of ours unread) ends the
 * connection: the QP enters Error and its posted receives are flushed, with no async
 * event, as Linux siw's QP goes when its TCP connection closes. An application that
 * polls its CQ and never reads rdma_cm's events (perftest) learns it there: before, its
 * QP stayed in RTS and the receives waited for ever (perftest's server hung 60 s after a
 * siw client left).
 */
static void peer_close_flushes_receives(void **state)
{
	struct tu_res *res = tu_res_open();
	uint8_t buf[64];
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_recv_wr rwr = { .sg_list = &sge, .num_sge = 1 }, *rbad;
	struct ibv_async_event ev;
	struct ibv_wc wc[2];
	struct ibv_qp *qp;
	char d[128];
	int fd[2];

	(void)state;
	assert_non_null(res);
	mr = ibv_reg_mr(res->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	sge = (struct ibv_sge){ (uintptr_t)buf, sizeof(buf), mr->lkey };
	qp = adopted(res, fd, false);
	for (uint64_t i = 0; i < 2; i++) {
		rwr.wr_id = 100 + i;
		assert_int_equal(ibv_post_recv(qp, &rwr, &rbad), 0);
	}
	assert_int_equal(shutdown(fd[1], SHUT_WR), 0);
	if (tu_poll_exact(res->cq, 2, wc, WAIT_MS) != 2)
		fail_msg("the posted receives were not flushed after the peer closed");
	for (int i = 0; i < 2; i++) {
		assert_int_equal(wc[i].status, IBV_WC_WR_FLUSH_ERR);
		assert_int_equal(wc[i].wr_id, 100 + i);
	}
	assert_int_equal(tu_query_state(qp), IBV_QPS_ERR);
	if (tu_next_async(res->ctx, 0, &ev, d, sizeof(d)))
		fail_msg("an async event after the peer's orderly close: %s", d);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	close(fd[1]);
	ibv_dereg_mr(mr);
	assert_int_equal(tu_res_close(res), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup_crc, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(valid_traffic),
		cmocka_unit_test_setup_teardown(valid_traffic, setup_nocrc, teardown),
		T(write_bad_stag),
		T(write_past_end),
		T(write_before_start),
		T(write_offset_wraps),
		T(write_second_segment_past_end),
		T(read_bad_stag),
		T(read_past_end),
		T(read_flood_past_ird),
		T(send_msn_gap),
		T(send_msn_gap_after_valid),
		T(send_bad_mo),
		T(read_req_bad_mo),
		T(send_bad_qn),
		T(send_too_long),
		T(bad_crc),
		T(bad_crc_write),
		cmocka_unit_test_setup_teardown(bad_crc_large_send, setup_big, teardown),
		cmocka_unit_test_setup_teardown(crc_off_not_checked, setup_nocrc, teardown),
		T(unknown_opcode),
		cmocka_unit_test_setup_teardown(ext_opcode_not_negotiated, setup_noext, teardown),
		T(tagged_send),
		T(bad_ddp_version_untagged),
		T(bad_ddp_version_tagged),
		T(bad_rdmap_version),
		T(read_req_with_payload),
		T(ulpdu_shorter_than_header),
		T(length_past_stream_end),
		T(length_past_fpdu),
		T(garbage_after_handshake),
		cmocka_unit_test_setup_teardown(garbage_after_handshake, setup_nocrc, teardown),
		T(read_resp_bad_stag),
		T(read_resp_too_long),
		T(read_resp_bad_offset),
		T(read_resp_unsolicited),
		T(peer_terminates),
		cmocka_unit_test(peer_close_flushes_receives),
		T(atomic_bad_stag),
		T(atomic_past_end),
		T(atomic_unaligned),
		T(atomic_resp_unsolicited),
		T(zero_read_answered_with_stale_bytes),
		T(zero_write_any_stag),
		cmocka_unit_test(passive_waits_for_the_initiator),
		cmocka_unit_test(active_nudges_a_silent_responder),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
