/*
 * An RC QP on RoCE v2 (SOFTVERBS_WIRE=roce) against a hostile peer: the test's UDP
 * socket on 127.0.0.1 is the peer the QP's path names (a QPN nobody has), and writes
 * IBA packets by hand (BTH, RETH, AETH, payload, pad; the ICRC with zlib, forge.h) to the
 * RoCE v2 port. What the QP answers goes to that port too, where nobody takes it: the
 * test sees only what a peer's packets did — bytes placed or not, completions, the
 * QP's state and async events, and the canary pages around the registered region.
 *
 * Checked: a WRITE in sequence lands; a duplicate (a PSN taken) is not executed again;
 * one ahead of the expected PSN is not taken; one from another address, or with a bad
 * ICRC, is dropped; an ACK from another address completes nothing, the peer's does; a
 * WRITE outside the MR is refused (Error, IBV_EVENT_QP_ACCESS_ERR) and writes nothing; a
 * MIDDLE with no FIRST is an invalid request (Error, IBV_EVENT_QP_REQ_ERR); 20000
 * random RC packets leave the canaries untouched. A UC QP (IBA 9.7.5.1.x, as rxe): a
 * SEND whose MIDDLE was lost is dropped whole and its receive taken by the next SEND; a
 * MIDDLE with no FIRST is dropped, not an error; a WRITE in sequence lands. With the
 * peer's socket on the RoCE port of 127.0.0.3 (the QP's answers come to it): duplicate
 * atomics are answered with the values they returned, from the cache of results, and
 * not executed again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "forge.h"

#define PAGE 4096
#define PEER_QPN 0x654321u /* nobody's: the test plays it */
#define RQ_PSN 1000u       /* the first PSN the QP expects */
#define SQ_PSN 5000u       /* the first it sends */

struct env {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *mem; /* canary page, 2 registered pages, canary page */
	uint8_t *buf;
	int sock, stranger;               /* the peer's socket (127.0.0.1), another (127.0.0.2) */
	struct sockaddr_in to, from, from2;
	uint32_t epsn;                    /* the next PSN the QP expects of us */
	bool uc;                          /* the QP is UC (setup_uc) */
	bool answers;                     /* the peer is 127.0.0.3, its socket on the RoCE port
					   * there: it gets the QP's answers (setup_answers) */
};

static struct env E;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A packet: BTH (opcode, PSN, the A bit), then @ext (extension headers), @payload, pad. */
static size_t packet(uint8_t *b, uint8_t opcode, uint32_t psn, const uint8_t *ext, size_t ext_len,
		     const void *payload, uint32_t len)
{
	uint32_t pad = (4 - (len & 3)) & 3;
	size_t n;

	b[0] = opcode;
	b[1] = (uint8_t)(pad << 4);
	b[2] = b[3] = 0xff; /* P_Key: the default partition */
	forge_put32(&b[4], E.qp->qp_num);
	forge_put32(&b[8], 0x80000000u | (psn & 0xffffff));
	if (ext_len)
		memcpy(b + 12, ext, ext_len);
	n = 12 + ext_len;
	if (len)
		memcpy(b + n, payload, len);
	n += len;
	memset(b + n, 0, pad);
	return n + pad;
}

static void send_from(int sock, const struct sockaddr_in *from, uint8_t *b, size_t n, int crc_off)
{
	n = forge_seal(from, &E.to, b, n, crc_off);
	assert_int_equal(sendto(sock, b, n, 0, (struct sockaddr *)&E.to, sizeof(E.to)), (ssize_t)n);
}

/* An RDMA WRITE Only of @len bytes at @va (the MR's rkey), PSN @psn, from the peer
 * (or, @stranger, from another address), the ICRC off by @crc_off. */
static void write_only(uint32_t psn, uint64_t va, const void *data, uint32_t len, bool stranger,
		       int crc_off)
{
	static uint8_t b[8192];
	uint8_t reth[16];

	forge_put32(reth, (uint32_t)(va >> 32));
	forge_put32(reth + 4, (uint32_t)va);
	forge_put32(reth + 8, E.mr->rkey);
	forge_put32(reth + 12, len);
	send_from(stranger ? E.stranger : E.sock, stranger ? &E.from2 : &E.from, b,
		  packet(b, 0x0a, psn, reth, sizeof(reth), data, len), crc_off);
}

/* Waits (bounded, 5 s) until @n bytes at @at read as @want; false if they never do. */
static bool lands(const uint8_t *at, const void *want, size_t n)
{
	uint64_t end = now_ms() + 5000;
	struct ibv_wc wc;

	while (memcmp(at, want, n)) {
		(void)ibv_poll_cq(E.cq, 1, &wc); /* (moves the QP, as an application's poll) */
		if (now_ms() > end)
			return false;
	}
	return true;
}

static void check_canaries(void)
{
	for (size_t i = 0; i < PAGE; i++)
		if (E.mem[i] != 0xa5 || E.mem[3 * PAGE + i] != 0xa5)
			fail_msg("a canary byte changed at %zu", i);
}

/* A marker WRITE in sequence at @off: once it lands, everything sent before it was
 * looked at. */
static void barrier(size_t off)
{
	static uint32_t round;
	uint8_t m[16];

	snprintf((char *)m, sizeof(m), "MARK-%08u", ++round);
	write_only(E.epsn++, (uintptr_t)E.buf + off, m, sizeof(m), false, 0);
	if (!lands(E.buf + off, m, sizeof(m)))
		fail_msg("the marker WRITE (PSN %u) did not land", E.epsn - 1);
}

static enum ibv_qp_state qp_state(void)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	assert_int_equal(ibv_query_qp(E.qp, &a, IBV_QP_STATE, &ia), 0);
	return a.qp_state;
}

/* The QP enters Error with @event, within 5 s. */
static void expect_error(enum ibv_event_type event)
{
	uint64_t end = now_ms() + 5000;
	struct ibv_async_event ev;
	struct ibv_wc wc;

	while (qp_state() != IBV_QPS_ERR) {
		(void)ibv_poll_cq(E.cq, 1, &wc);
		if (now_ms() > end)
			fail_msg("the QP is not in Error 5 s after the bad request");
	}
	/* (raised before the state changed; bounded all the same) */
	if (poll(&(struct pollfd){ .fd = E.ctx->async_fd, .events = POLLIN }, 1, 5000) != 1)
		fail_msg("no async event 5 s after the QP entered Error");
	assert_int_equal(ibv_get_async_event(E.ctx, &ev), 0);
	assert_int_equal(ev.event_type, event);
	assert_ptr_equal(ev.element.qp, E.qp);
	ibv_ack_async_event(&ev);
}

/* The peer's socket for setup_answers: 127.0.0.3 on the RoCE v2 port (beside the
 * process's own socket there, [::]:port: both SO_REUSEPORT, one user), so that what the
 * QP sends to its path's peer comes here; don't-fragment, as forge_socket. */
static int answers_socket(struct sockaddr_in *from)
{
	int on = 1, dont = IP_PMTUDISC_DO, s = socket(AF_INET, SOCK_DGRAM, 0);

	*from = forge_port();
	from->sin_addr.s_addr = htonl(0x7f000003);
	if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) ||
	    setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &dont, sizeof(dont)) ||
	    bind(s, (struct sockaddr *)from, sizeof(*from))) {
		if (s >= 0)
			close(s);
		return -1;
	}
	return s;
}

/* The next packet of @opcode with PSN @psn the QP sends the peer (setup_answers), within
 * 5 s; others are passed over. Its length, or 0. */
static size_t answer_of(uint8_t opcode, uint32_t psn, uint8_t *b, size_t cap)
{
	uint64_t end = now_ms() + 5000;
	struct ibv_wc wc;

	while (now_ms() < end) {
		ssize_t n;

		(void)ibv_poll_cq(E.cq, 1, &wc); /* (moves the QP) */
		if (poll(&(struct pollfd){ .fd = E.sock, .events = POLLIN }, 1, 1) != 1)
			continue;
		n = recv(E.sock, b, cap, 0);
		if (n >= 12 && b[0] == opcode &&
		    ((uint32_t)b[9] << 16 | (uint32_t)b[10] << 8 | b[11]) == (psn & 0xffffff))
			return (size_t)n;
	}
	return 0;
}

/* A FETCH_ADD of @add at @va, PSN @psn; returns the original value its ATOMIC
 * ACKNOWLEDGE carries (failing the test if none comes). */
static uint64_t fetch_add(uint32_t psn, uint64_t va, uint64_t add)
{
	static uint8_t b[256];
	uint8_t aeth[28] = { 0 };
	size_t n;

	forge_put32(aeth, (uint32_t)(va >> 32));
	forge_put32(aeth + 4, (uint32_t)va);
	forge_put32(aeth + 8, E.mr->rkey);
	forge_put32(aeth + 12, (uint32_t)(add >> 32));
	forge_put32(aeth + 16, (uint32_t)add);
	send_from(E.sock, &E.from, b, packet(b, 0x14, psn, aeth, sizeof(aeth), NULL, 0), 0);
	n = answer_of(0x12, psn, b, sizeof(b)); /* RC ATOMIC ACKNOWLEDGE: BTH, AETH, orig */
	if (n < 12 + 4 + 8 + 4)
		fail_msg("no ATOMIC ACKNOWLEDGE for PSN %u within 5 s", psn);
	return (uint64_t)b[16] << 56 | (uint64_t)b[17] << 48 | (uint64_t)b[18] << 40 |
	       (uint64_t)b[19] << 32 | (uint64_t)b[20] << 24 | (uint64_t)b[21] << 16 |
	       (uint64_t)b[22] << 8 | b[23];
}

static int gid_index_of_loopback(void)
{
	static const uint8_t lo[16] = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 };

	for (int i = 0; i < 16; i++) {
		union ibv_gid g;

		if (ibv_query_gid(E.ctx, 1, i, &g))
			break;
		if (!memcmp(g.raw, lo, 16))
			return i;
	}
	return -1;
}

static int setup(void **state)
{
	struct ibv_device **list;
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr a = { 0 };
	int n, gid;

	(void)state;
	list = ibv_get_device_list(&n);
	assert_non_null(list);
	E.ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	assert_non_null(E.ctx);
	E.pd = ibv_alloc_pd(E.ctx);
	E.cq = ibv_create_cq(E.ctx, 256, NULL, NULL, 0);
	E.mem = aligned_alloc(PAGE, 4 * PAGE);
	assert_non_null(E.mem);
	memset(E.mem, 0xa5, 4 * PAGE);
	E.buf = E.mem + PAGE;
	memset(E.buf, 0, 2 * PAGE);
	E.mr = ibv_reg_mr(E.pd, E.buf, 2 * PAGE,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				  IBV_ACCESS_REMOTE_ATOMIC);
	assert_non_null(E.mr);
	ia.send_cq = ia.recv_cq = E.cq;
	ia.qp_type = E.uc ? IBV_QPT_UC : IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 64;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	E.qp = ibv_create_qp(E.pd, &ia);
	assert_non_null(E.qp);
	gid = gid_index_of_loopback();
	if (gid < 0)
		skip(); /* (no ::ffff:127.0.0.1 GID: loopback without IPv4) */
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
			    (E.uc ? 0 : IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	assert_int_equal(ibv_modify_qp(E.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS), 0);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = PEER_QPN;
	a.rq_psn = RQ_PSN;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.sgid_index = (uint8_t)gid;
	a.ah_attr.grh.hop_limit = 64;
	assert_int_equal(ibv_query_gid(E.ctx, 1, gid, &a.ah_attr.grh.dgid), 0);
	if (E.answers)
		a.ah_attr.grh.dgid.raw[15] = 3; /* ::ffff:127.0.0.3 */
	assert_int_equal(ibv_modify_qp(E.qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					       (E.uc ? 0 : IBV_QP_MAX_DEST_RD_ATOMIC |
							   IBV_QP_MIN_RNR_TIMER)), 0);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = SQ_PSN;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	assert_int_equal(ibv_modify_qp(E.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
					       (E.uc ? 0 : IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
							   IBV_QP_RNR_RETRY |
							   IBV_QP_MAX_QP_RD_ATOMIC)), 0);
	E.to = forge_port();
	E.sock = E.answers ? answers_socket(&E.from) : forge_socket(&E.from, "127.0.0.1");
	E.stranger = forge_socket(&E.from2, "127.0.0.2");
	assert_true(E.sock >= 0 && E.stranger >= 0);
	E.epsn = RQ_PSN;
	return 0;
}

static int setup_uc(void **state)
{
	E.uc = true;
	return setup(state);
}

static int setup_answers(void **state)
{
	E.answers = true;
	return setup(state);
}

static int teardown(void **state)
{
	(void)state;
	close(E.sock);
	close(E.stranger);
	ibv_destroy_qp(E.qp);
	ibv_dereg_mr(E.mr);
	ibv_destroy_cq(E.cq);
	ibv_dealloc_pd(E.pd);
	ibv_close_device(E.ctx);
	free(E.mem);
	E.uc = false;
	E.answers = false;
	return 0;
}

/* In sequence it lands; taken again (a duplicate), or ahead of the expected PSN, or from
 * another address, or with a bad ICRC, it is not executed. */
static void test_sequence_and_strangers(void **state)
{
	static const uint8_t one[8] = "ONE-ONE!", dup[8] = "DUP-DUP!", ahead[8] = "AHEAD!!!",
			     odd[8] = "STRANGER", crc[8] = "BAD-ICRC";

	(void)state;
	write_only(E.epsn++, (uintptr_t)E.buf, one, 8, false, 0);
	if (!lands(E.buf, one, 8))
		fail_msg("a WRITE in sequence did not land");
	write_only(RQ_PSN, (uintptr_t)E.buf, dup, 8, false, 0); /* taken already */
	write_only(E.epsn + 3, (uintptr_t)E.buf + 64, ahead, 8, false, 0);
	write_only(E.epsn, (uintptr_t)E.buf + 128, odd, 8, true, 0);
	write_only(E.epsn, (uintptr_t)E.buf + 192, crc, 8, false, 1);
	barrier(1024);
	assert_memory_equal(E.buf, one, 8);
	assert_memory_not_equal(E.buf + 64, ahead, 8);
	assert_memory_not_equal(E.buf + 128, odd, 8);
	assert_memory_not_equal(E.buf + 192, crc, 8);
	assert_int_equal(qp_state(), IBV_QPS_RTS);
	check_canaries();
}

/* The peer's ACK completes our SEND; a stranger's, or one for a PSN never sent, does not. */
static void test_forged_acknowledgements(void **state)
{
	static uint8_t b[64];
	uint8_t aeth[4] = { 0x1f, 0, 0, 1 }; /* ACK, unlimited credits; MSN 1 */
	struct ibv_sge sge = { (uintptr_t)E.buf, 8, E.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	struct ibv_wc wc;
	uint64_t end;

	(void)state;
	assert_int_equal(ibv_post_send(E.qp, &wr, &bad), 0);
	send_from(E.stranger, &E.from2, b, packet(b, 0x11, SQ_PSN, aeth, 4, NULL, 0), 0);
	send_from(E.sock, &E.from, b, packet(b, 0x11, SQ_PSN + 5, aeth, 4, NULL, 0), 0);
	end = now_ms() + 200;
	while (now_ms() < end)
		assert_int_equal(ibv_poll_cq(E.cq, 1, &wc), 0);
	send_from(E.sock, &E.from, b, packet(b, 0x11, SQ_PSN, aeth, 4, NULL, 0), 0);
	end = now_ms() + 5000;
	while (ibv_poll_cq(E.cq, 1, &wc) == 0)
		if (now_ms() > end)
			fail_msg("the peer's ACK completed nothing within 5 s");
	assert_int_equal(wc.wr_id, 7);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(qp_state(), IBV_QPS_RTS);
}

/* A WRITE whose RETH reaches past the MR: refused whole (IBA 9.7.5.1.3: a remote access
 * error), nothing written, the QP in Error. */
static void test_write_outside_the_mr(void **state)
{
	static uint8_t data[64];

	(void)state;
	memset(data, 0x3c, sizeof(data));
	write_only(E.epsn++, (uintptr_t)E.buf + 2 * PAGE - 16, data, sizeof(data), false, 0);
	expect_error(IBV_EVENT_QP_ACCESS_ERR);
	for (size_t i = 2 * PAGE - 16; i < 2 * PAGE; i++)
		assert_int_not_equal(E.buf[i], 0x3c);
	check_canaries();
}

/* A WRITE MIDDLE with no FIRST before it: an invalid request (IBA 9.8.3.1). */
static void test_middle_without_first(void **state)
{
	static uint8_t b[2048], data[1024];

	(void)state;
	memset(data, 0x77, sizeof(data));
	send_from(E.sock, &E.from, b, packet(b, 0x07, E.epsn++, NULL, 0, data, sizeof(data)), 0);
	expect_error(IBV_EVENT_QP_REQ_ERR);
	check_canaries();
}

/* Random RC packets from the peer's address, ICRC right: whatever they ask, nothing
 * lands outside the registered region and the process goes on. */
static void test_random_packets(void **state)
{
	static uint8_t b[2048], payload[1100];
	unsigned seed = (unsigned)time(NULL);
	static const uint8_t ops[] = { 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
				       0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11,
				       0x12, 0x13, 0x14, 0x16, 0x17 };

	(void)state;
	print_message("    seed %u\n", seed);
	srand(seed);
	for (int i = 0; i < 20000; i++) {
		uint8_t ext[28];
		uint32_t len = (uint32_t)(rand() % 1100);
		uint64_t va = (uintptr_t)E.mem + (uint64_t)(rand() % (4 * PAGE));
		struct ibv_wc wc;

		for (size_t k = 0; k < sizeof(ext); k++)
			ext[k] = (uint8_t)rand();
		forge_put32(ext, (uint32_t)(va >> 32));
		forge_put32(ext + 4, (uint32_t)va);
		if (rand() % 2)
			forge_put32(ext + 8, E.mr->rkey);
		for (uint32_t k = 0; k < len; k++)
			payload[k] = (uint8_t)rand();
		send_from(E.sock, &E.from, b,
			  packet(b, ops[rand() % (int)sizeof(ops)],
				 rand() % 4 ? E.epsn + (uint32_t)(rand() % 8) : (uint32_t)rand(),
				 ext, (size_t)(rand() % 29), payload, len),
			  0);
		if (i % 64 == 0)
			(void)ibv_poll_cq(E.cq, 1, &wc);
	}
	for (int i = 0; i < 100; i++) { /* what is still queued is looked at */
		struct ibv_wc wc;

		(void)ibv_poll_cq(E.cq, 1, &wc);
	}
	check_canaries();
}

/* A receive of @len bytes at @off, wr_id @id. */
static void post_recv(uint64_t id, size_t off, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)E.buf + off, len, E.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	assert_int_equal(ibv_post_recv(E.qp, &wr, &bad), 0);
}

/* The next completion (within 5 s). */
static struct ibv_wc next_wc(void)
{
	uint64_t end = now_ms() + 5000;
	struct ibv_wc wc;

	while (ibv_poll_cq(E.cq, 1, &wc) != 1)
		if (now_ms() > end)
			fail_msg("no completion within 5 s");
	return wc;
}

/* UC: a SEND that lost its MIDDLE is dropped whole, and the receive it had taken takes
 * the next SEND (IBA 9.7.5.1.x; rxe does the same); a MIDDLE with no FIRST is dropped,
 * the QP stays in RTS; the rest of a WRITE after a lost packet is not placed. */
/* Three FETCH_ADDs, then the first two again (their responses lost, as the requester
 * would think): each duplicate is answered with the value it returned the first time,
 * from the responder's cache of results (IBA 9.4.5: max_dest_rd_atomic of them), and
 * not executed again. */
static void test_duplicate_atomics_answered_from_the_cache(void **state)
{
	uint64_t va = (uintptr_t)E.buf + 256, *word = (uint64_t *)(E.buf + 256);
	uint32_t p = E.epsn;

	(void)state;
	assert_int_equal(fetch_add(p, va, 1), 0);
	assert_int_equal(fetch_add(p + 1, va, 10), 1);
	assert_int_equal(fetch_add(p + 2, va, 100), 11);
	assert_int_equal(*word, 111);
	E.epsn = p + 3;
	assert_int_equal(fetch_add(p, va, 1), 0);
	assert_int_equal(fetch_add(p + 1, va, 10), 1);
	assert_int_equal(fetch_add(p + 2, va, 100), 11);
	barrier(1024);
	assert_int_equal(*word, 111); /* executed once each */
	assert_int_equal(qp_state(), IBV_QPS_RTS);
	check_canaries();
}

static void test_uc_loss_drops_the_message(void **state)
{
	static uint8_t b[2048], first[1024], last[100], only[50], mid[1024];
	uint8_t reth[16];
	struct ibv_wc wc;

	(void)state;
	memset(first, 'A', sizeof(first));
	memset(last, 'L', sizeof(last));
	memset(only, 'B', sizeof(only));
	memset(mid, 'M', sizeof(mid));
	post_recv(1, 0, 2048);
	post_recv(2, 4096, 2048);
	/* SEND FIRST, its MIDDLE lost, SEND LAST: nothing completes */
	send_from(E.sock, &E.from, b, packet(b, 0x20, E.epsn, NULL, 0, first, sizeof(first)), 0);
	send_from(E.sock, &E.from, b, packet(b, 0x22, E.epsn + 2, NULL, 0, last, sizeof(last)), 0);
	/* a MIDDLE that belongs to nothing */
	send_from(E.sock, &E.from, b, packet(b, 0x21, E.epsn + 7, NULL, 0, mid, sizeof(mid)), 0);
	/* SEND ONLY: into the first receive */
	send_from(E.sock, &E.from, b, packet(b, 0x24, E.epsn + 9, NULL, 0, only, sizeof(only)), 0);
	wc = next_wc();
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_RECV);
	assert_int_equal(wc.wr_id, 1);
	assert_int_equal(wc.byte_len, sizeof(only));
	assert_memory_equal(E.buf, only, sizeof(only));
	/* a WRITE FIRST whose LAST comes after a lost MIDDLE: its LAST is not placed */
	forge_put32(reth, (uint32_t)(((uintptr_t)E.buf + 4096) >> 32));
	forge_put32(reth + 4, (uint32_t)((uintptr_t)E.buf + 4096));
	forge_put32(reth + 8, E.mr->rkey);
	forge_put32(reth + 12, 2048 + 100);
	send_from(E.sock, &E.from, b,
		  packet(b, 0x26, E.epsn + 10, reth, sizeof(reth), first, sizeof(first)), 0);
	send_from(E.sock, &E.from, b, packet(b, 0x28, E.epsn + 12, NULL, 0, last, sizeof(last)), 0);
	/* then a WRITE ONLY in sequence, and a SEND ONLY that marks the end */
	forge_put32(reth, (uint32_t)(((uintptr_t)E.buf + 7000) >> 32));
	forge_put32(reth + 4, (uint32_t)((uintptr_t)E.buf + 7000));
	forge_put32(reth + 12, sizeof(only));
	send_from(E.sock, &E.from, b,
		  packet(b, 0x2a, E.epsn + 13, reth, sizeof(reth), only, sizeof(only)), 0);
	send_from(E.sock, &E.from, b, packet(b, 0x24, E.epsn + 14, NULL, 0, only, 8), 0);
	wc = next_wc();
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 2);
	assert_int_equal(wc.byte_len, 8);
	assert_memory_equal(E.buf + 4096 + 2048, (uint8_t[100]){ 0 }, 100); /* (not placed) */
	assert_memory_equal(E.buf + 7000, only, sizeof(only));
	assert_int_equal(qp_state(), IBV_QPS_RTS);
	check_canaries();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_sequence_and_strangers),
		T(test_forged_acknowledgements),
		T(test_write_outside_the_mr),
		T(test_middle_without_first),
		T(test_random_packets),
		cmocka_unit_test_setup_teardown(test_uc_loss_drops_the_message, setup_uc, teardown),
		cmocka_unit_test_setup_teardown(test_duplicate_atomics_answered_from_the_cache,
						setup_answers, teardown),
	};

	setenv("SOFTVERBS_WIRE", "roce", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
