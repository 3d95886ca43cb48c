/*
 * The UDP wire against a hostile sender: RoCE v2 datagrams written by hand (from IBA's
 * BTH and DETH layouts and Annex A17.8's ICRC, computed here with zlib, not by the
 * wire's encoder) to the RoCE v2 port on loopback, through a plain UDP socket. A good
 * datagram lands with its GRH, source QP and immediate, whatever its MigReq bit and pad
 * bytes (the ICRC covers them; the IBA has receivers check neither); every malformed
 * one (short, long, bad ICRC, another opcode or version, a QPN nobody has) is dropped
 * without consuming a receive, and so is one to a group's QPN (0xFFFFFF) not sent to a
 * group's address; a wrong Q_Key or P_Key is dropped
 * and counted on the port; a datagram larger than the receive completes it with
 * IBV_WC_LOC_LEN_ERR; 20000 random and mutated datagrams (under a Q_Key of their own)
 * leave the canaries around the registered buffer untouched and the QP working; and a
 * second QP of the same block (one socket) gets its datagrams in order when another
 * QP's poll read them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "forge.h"

#define QKEY 0x11112222u
#define QKEY_STORM 0xeeeedddd /* differs from QKEY in every byte */
#define PAGE 4096
#define RECV_LEN 4096 + 40

struct env {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *mem;  /* canary page, registered pages, canary page */
	uint8_t *buf;  /* the registered part */
	int sock;
	struct sockaddr_in to, from; /* the port, and the test's socket */
	uint32_t qkey; /* the QP's, which good() datagrams carry */
};

static struct env E;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct dg {
	uint8_t opcode, flags_extra; /* flags_extra: bits OR-ed into BTH byte 1 (M, TVer) */
	uint16_t pkey;
	uint32_t qpn, qkey, src_qpn, imm;
	const uint8_t *payload;
	uint32_t len;
	int pad_garbage; /* a non-zero pad byte */
	int crc_off;     /* added to the ICRC */
};

/* The datagram's bytes: BTH, DETH, [ImmDt], payload, pad, ICRC (LSB first). Returns its
 * length. */
static size_t build(const struct dg *d, uint8_t *out)
{
	uint32_t pad = (4 - (d->len & 3)) & 3;
	size_t n = 0;

	out[0] = d->opcode;
	out[1] = (uint8_t)(pad << 4 | d->flags_extra);
	out[2] = (uint8_t)(d->pkey >> 8);
	out[3] = (uint8_t)d->pkey;
	forge_put32(&out[4], d->qpn);
	forge_put32(&out[8], 7);
	forge_put32(&out[12], d->qkey);
	forge_put32(&out[16], d->src_qpn);
	n = 20;
	if (d->opcode == 0x65) {
		memcpy(&out[n], &d->imm, 4);
		n += 4;
	}
	memcpy(&out[n], d->payload, d->len);
	n += d->len;
	memset(&out[n], 0, pad);
	if (pad && d->pad_garbage)
		out[n] = 1;
	n += pad;
	return forge_seal(&E.from, &E.to, out, n, d->crc_off);
}

static void send_raw(const uint8_t *b, size_t n)
{
	assert_int_equal(sendto(E.sock, b, n, 0, (struct sockaddr *)&E.to, sizeof(E.to)),
			 (ssize_t)n);
}

static struct dg good(const uint8_t *payload, uint32_t len)
{
	return (struct dg){ .opcode = 0x64, .pkey = 0xffff, .qpn = E.qp->qp_num, .qkey = E.qkey,
			    .src_qpn = 0x123456, .payload = payload, .len = len };
}

static void send_dg(const struct dg *d)
{
	static uint8_t b[8192];

	send_raw(b, build(d, b));
}

static void post_recv(uint64_t id, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)E.buf, len, E.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	assert_int_equal(ibv_post_recv(E.qp, &wr, &bad), 0);
}

/* One completion within 5 s. */
static struct ibv_wc wait_wc(void)
{
	uint64_t end = now_ms() + 5000;
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(E.cq, 1, &wc)) == 0 && now_ms() < end)
		;
	if (n != 1)
		fail_msg("no completion within 5 s (poll: %d)", n);
	return wc;
}

static void check_canaries(void)
{
	for (size_t i = 0; i < PAGE; i++) {
		if (E.mem[i] != 0xa5 || E.mem[3 * PAGE + i] != 0xa5)
			fail_msg("a canary byte changed at %zu", i);
	}
}

static struct ibv_port_attr port(void)
{
	struct ibv_port_attr pa;

	assert_int_equal(ibv_query_port(E.ctx, 1, &pa), 0);
	return pa;
}

static int setup(void **state)
{
	struct ibv_device **list;
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr a = { 0 };
	int n;

	(void)state;
	list = ibv_get_device_list(&n);
	assert_non_null(list);
	assert_true(n >= 1);
	E.ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	assert_non_null(E.ctx);
	E.pd = ibv_alloc_pd(E.ctx);
	E.cq = ibv_create_cq(E.ctx, 256, NULL, NULL, 0);
	assert_non_null(E.pd);
	assert_non_null(E.cq);
	E.mem = aligned_alloc(PAGE, 4 * PAGE);
	assert_non_null(E.mem);
	memset(E.mem, 0xa5, 4 * PAGE);
	E.buf = E.mem + PAGE;
	E.mr = ibv_reg_mr(E.pd, E.buf, 2 * PAGE, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(E.mr);
	ia.send_cq = ia.recv_cq = E.cq;
	ia.qp_type = IBV_QPT_UD;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 128;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	E.qp = ibv_create_qp(E.pd, &ia);
	assert_non_null(E.qp);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = QKEY;
	assert_int_equal(ibv_modify_qp(E.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_QKEY), 0);
	a.qp_state = IBV_QPS_RTR;
	assert_int_equal(ibv_modify_qp(E.qp, &a, IBV_QP_STATE), 0);
	a.qp_state = IBV_QPS_RTS;
	assert_int_equal(ibv_modify_qp(E.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
	E.qkey = QKEY;
	E.to = forge_port();
	E.sock = forge_socket(&E.from, "127.0.0.1");
	assert_true(E.sock >= 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	close(E.sock);
	ibv_destroy_qp(E.qp);
	ibv_dereg_mr(E.mr);
	ibv_destroy_cq(E.cq);
	ibv_dealloc_pd(E.pd);
	ibv_close_device(E.ctx);
	free(E.mem);
	return 0;
}

static const uint8_t marker[8] = "GOOD-ONE";
static const uint8_t bad[8] = "BAD--ONE"; /* what the dropped ones carry */

/* A good datagram: its payload after the GRH, the fields of its completion. */
static void test_good_datagram_lands(void **state)
{
	uint8_t payload[100];
	struct dg d;
	struct ibv_wc wc;
	struct ibv_grh *g = (struct ibv_grh *)E.buf;
	static const uint8_t lo[16] = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 };

	(void)state;
	for (int i = 0; i < 100; i++)
		payload[i] = (uint8_t)(i * 7 + 1);
	post_recv(1, RECV_LEN);
	d = good(payload, 99); /* odd: padded */
	send_dg(&d);
	wc = wait_wc();
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 1);
	assert_int_equal(wc.opcode, IBV_WC_RECV);
	assert_int_equal(wc.byte_len, 40 + 99);
	assert_int_equal(wc.src_qp, 0x123456);
	assert_true(wc.wc_flags & IBV_WC_GRH);
	assert_false(wc.wc_flags & IBV_WC_WITH_IMM);
	assert_memory_equal(E.buf + 40, payload, 99);
	assert_memory_equal(g->sgid.raw, lo, 16);
	assert_memory_equal(g->dgid.raw, lo, 16);

	post_recv(2, RECV_LEN);
	d.opcode = 0x65;
	d.imm = htonl(0xdeadbeef);
	d.len = 4;
	send_dg(&d);
	wc = wait_wc();
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 2);
	assert_true(wc.wc_flags & IBV_WC_WITH_IMM);
	assert_int_equal(wc.imm_data, htonl(0xdeadbeef));
	assert_int_equal(wc.byte_len, 44);

	/* MigReq set and a pad byte not zero (as some NICs send them): it lands, without
	 * its pad. */
	post_recv(3, RECV_LEN);
	memset(E.buf, 0, 60);
	d = good(payload, 7);
	d.flags_extra = 0x40;
	d.pad_garbage = 1;
	send_dg(&d);
	wc = wait_wc();
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 3);
	assert_int_equal(wc.byte_len, 40 + 7);
	assert_memory_equal(E.buf + 40, payload, 7);
	assert_int_equal(E.buf[47], 0);
	check_canaries();
}

/* Each is dropped: the receive posted before it takes the good datagram sent after. */
static void expect_dropped(const uint8_t *b, size_t n, const char *what)
{
	struct dg d = good(marker, sizeof(marker));
	struct ibv_wc wc;

	post_recv(10, RECV_LEN);
	send_raw(b, n);
	send_dg(&d);
	wc = wait_wc();
	if (wc.status != IBV_WC_SUCCESS || wc.byte_len != 40 + sizeof(marker) ||
	    memcmp(E.buf + 40, marker, sizeof(marker)))
		fail_msg("%s: not dropped (status %d, %u bytes)", what, wc.status, wc.byte_len);
	check_canaries();
}

static void test_malformed_datagrams_are_dropped(void **state)
{
	static uint8_t b[8192], big[6000];
	struct dg d;
	size_t n;

	(void)state;
	expect_dropped(b, 0, "an empty datagram");
	d = good(bad, 8);
	n = build(&d, b);
	expect_dropped(b, 23, "a datagram shorter than BTH + DETH + ICRC");
	expect_dropped(b, n - 1, "a datagram one byte short");
	d.crc_off = 1;
	expect_dropped(b, build(&d, b), "a bad ICRC");
	d = good(bad, 8);
	d.opcode = 0x04; /* RC SEND Only */
	expect_dropped(b, build(&d, b), "an RC opcode");
	d = good(bad, 8);
	d.flags_extra = 0x01; /* TVer 1 */
	expect_dropped(b, build(&d, b), "header version 1");
	d = good(bad, 8);
	d.qpn = E.qp->qp_num ^ 0x1; /* another QPN of the block, nobody's */
	expect_dropped(b, build(&d, b), "a QPN nobody has");
	d = good(big, sizeof(big)); /* more than one packet of the MTU */
	expect_dropped(b, build(&d, b), "a payload over 4096 bytes");
}

/* QPN 0xFFFFFF is a multicast group's: a datagram naming it that is not sent to a group
 * address (here to loopback), or that is not a UD SEND, reaches no QP, a member of a
 * group or not (the attach joins no interface: SOFTVERBS_MCAST_IFS=none, set in main). */
static void test_group_qpn_only_from_a_group_address(void **state)
{
	static uint8_t b[512];
	union ibv_gid mgid = { .raw = { [10] = 0xff, [11] = 0xff, 239, 5, 6, 7 } };
	struct dg d;

	(void)state;
	assert_int_equal(ibv_attach_mcast(E.qp, &mgid, 0), 0);
	d = good(bad, 8);
	d.qpn = 0xffffff;
	expect_dropped(b, build(&d, b), "QPN 0xFFFFFF to a unicast address");
	d.opcode = 0x04; /* RC SEND Only */
	expect_dropped(b, build(&d, b), "an RC packet to QPN 0xFFFFFF");
	assert_int_equal(ibv_detach_mcast(E.qp, &mgid, 0), 0);
	d = good(bad, 8);
	d.qpn = 0xffffff;
	expect_dropped(b, build(&d, b), "QPN 0xFFFFFF, no member");
}

static void test_wrong_keys_are_dropped_and_counted(void **state)
{
	static uint8_t b[512];
	struct ibv_port_attr before = port(), after;
	struct dg d;

	(void)state;
	d = good(bad, 8);
	d.qkey = QKEY + 1;
	expect_dropped(b, build(&d, b), "a wrong Q_Key");
	d = good(bad, 8);
	d.pkey = 0x7123; /* another partition */
	expect_dropped(b, build(&d, b), "a wrong P_Key");
	after = port();
	assert_int_equal(after.qkey_viol_cntr, before.qkey_viol_cntr + 1);
	assert_int_equal(after.bad_pkey_cntr, before.bad_pkey_cntr + 1);
}

static void test_datagram_larger_than_the_receive(void **state)
{
	uint8_t payload[1000];
	struct dg d;
	struct ibv_wc wc;

	(void)state;
	memset(payload, 0x5a, sizeof(payload));
	d = good(payload, sizeof(payload));
	post_recv(20, 100);
	send_dg(&d);
	wc = wait_wc();
	assert_int_equal(wc.wr_id, 20);
	assert_int_equal(wc.status, IBV_WC_LOC_LEN_ERR);
	check_canaries();
	/* The QP takes the next one as ever (UD: an error of one receive is not the QP's). */
	expect_dropped(NULL, 0, "(nothing)");
}

/* Random bytes, and good datagrams with bytes changed (half with the CRC made right
 * again, so that the field checks behind it are reached). */
static void test_random_and_mutated_datagrams(void **state)
{
	static uint8_t b[8192];
	unsigned seed = (unsigned)time(NULL);
	int posted = 0;

	(void)state;
	printf("seed %u\n", seed);
	srand(seed);
	/* The storm's Q_Key is the QP's only while it lasts: a storm datagram the kernel
	 * hands over late (loopback's per-CPU backlogs reorder datagrams under load) is
	 * dropped for its Q_Key afterwards, and cannot pass for a later test's. */
	{
		struct ibv_qp_attr a = { .qkey = QKEY_STORM };

		assert_int_equal(ibv_modify_qp(E.qp, &a, IBV_QP_QKEY), 0);
		E.qkey = QKEY_STORM;
	}
	for (int i = 0; i < 64; i++, posted++)
		post_recv(100 + (uint64_t)i, 64 + (uint32_t)(rand() % RECV_LEN));
	for (int i = 0; i < 20000; i++) {
		size_t n;

		if (i % 2) {
			n = (size_t)(rand() % 5000);
			for (size_t k = 0; k < n; k++)
				b[k] = (uint8_t)rand();
		} else {
			static uint8_t some[300] = "SOME-BYTES";
			struct dg d = good(some, (uint32_t)(rand() % (int)sizeof(some)));

			n = build(&d, b);
			for (int k = 0; k < 1 + rand() % 4; k++)
				b[(size_t)rand() % n] = (uint8_t)rand();
			if (rand() % 2 && n >= 16) /* the ICRC right again */
				(void)forge_seal(&E.from, &E.to, b, n - 4, 0);
		}
		send_raw(b, n);
		if (i % 256 == 0) { /* keep receives posted, and take what landed */
			struct ibv_wc wc[16];
			int got;

			while ((got = ibv_poll_cq(E.cq, 16, wc)) > 0) {
				for (int k = 0; k < got; k++) {
					if (wc[k].status != IBV_WC_SUCCESS &&
					    wc[k].status != IBV_WC_LOC_LEN_ERR)
						fail_msg("a completion with status %d", wc[k].status);
					post_recv(100, 64 + (uint32_t)(rand() % RECV_LEN));
				}
			}
		}
	}
	check_canaries();
	/* Drain: every posted receive that took something completed; then the QP still
	 * takes a good datagram. */
	{
		struct ibv_wc wc[16];

		while (ibv_poll_cq(E.cq, 16, wc) > 0)
			;
	}
	{
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
		struct ibv_qp_attr r = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
		struct ibv_wc wc[16];

		/* Back to a QP with no receives and the Q_Key of the tests after, then one
		 * receive and one good datagram. */
		assert_int_equal(ibv_modify_qp(E.qp, &a, IBV_QP_STATE), 0);
		while (ibv_poll_cq(E.cq, 16, wc) > 0)
			;
		assert_int_equal(ibv_modify_qp(E.qp, &r, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
							 IBV_QP_PORT | IBV_QP_QKEY), 0);
		r.qp_state = IBV_QPS_RTR;
		assert_int_equal(ibv_modify_qp(E.qp, &r, IBV_QP_STATE), 0);
		E.qkey = QKEY;
	}
	/* The QP takes a good datagram, and nothing of the storm: what was queued went with
	 * the reset, and storm datagrams still in the socket's buffer carry the old Q_Key. */
	{
		struct dg d = good(marker, sizeof(marker));
		struct ibv_wc wc;

		memset(E.buf, 0, 64);
		post_recv(200, RECV_LEN);
		send_dg(&d);
		wc = wait_wc();
		assert_int_equal(wc.wr_id, 200);
		assert_int_equal(wc.status, IBV_WC_SUCCESS);
		assert_int_equal(wc.byte_len, 40 + sizeof(marker));
		assert_memory_equal(E.buf + 40, marker, sizeof(marker));
		check_canaries();
	}
}

/* A second UD QP of the same block (the same process, created next: the next QPN), on
 * a CQ of its own. */
struct second {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static struct second second_open(void)
{
	struct second b;
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };

	b.cq = ibv_create_cq(E.ctx, 256, NULL, NULL, 0);
	assert_non_null(b.cq);
	ia.send_cq = ia.recv_cq = b.cq;
	ia.qp_type = IBV_QPT_UD;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 128;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	b.qp = ibv_create_qp(E.pd, &ia);
	assert_non_null(b.qp);
	assert_int_equal(b.qp->qp_num >> 8, E.qp->qp_num >> 8); /* the same block: one port */
	assert_int_equal(ibv_modify_qp(b.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						 IBV_QP_QKEY), 0);
	a.qp_state = IBV_QPS_RTR;
	assert_int_equal(ibv_modify_qp(b.qp, &a, IBV_QP_STATE), 0);
	return b;
}

static void second_close(struct second *b)
{
	assert_int_equal(ibv_destroy_qp(b->qp), 0);
	assert_int_equal(ibv_destroy_cq(b->cq), 0);
}

static void post_recv_on(struct ibv_qp *qp, uint64_t id, uint32_t off)
{
	struct ibv_sge sge = { (uintptr_t)E.buf + off, 64 + 40, E.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad_wr;

	assert_int_equal(ibv_post_recv(qp, &wr, &bad_wr), 0);
}

/*
 * Two QPs share their block's socket: datagrams for the second, read while the first is
 * polled, go into the second's receive queue at once or wait in its queue for its poll;
 * either way all 40 complete on its CQ, in order, none twice.
 */
static void test_two_qps_of_one_block(void **state)
{
	struct second b = second_open();
	struct ibv_wc wc[64];
	uint64_t end;
	int got = 0, n;

	(void)state;
	for (int i = 0; i < 40; i++)
		post_recv_on(b.qp, 500 + (uint64_t)i, 0x1000);
	/* 40 datagrams for the second QP; only the first's CQ is polled meanwhile (it
	 * reads the socket and queues them), until a datagram of its own has come. */
	for (uint8_t i = 0; i < 40; i++) {
		uint8_t p[8] = { 'B', i };
		struct dg d = good(p, sizeof(p));

		d.qpn = b.qp->qp_num;
		send_dg(&d);
	}
	expect_dropped(NULL, 0, "(the first QP's own datagram, after the second's)");
	/* The second's CQ: all its datagrams, in order. */
	end = now_ms() + 5000;
	while (now_ms() < end && got < 40) {
		n = ibv_poll_cq(b.cq, 64 - got, wc + got);
		assert_true(n >= 0);
		got += n;
	}
	assert_int_equal(got, 40);
	for (int i = 0; i < got; i++) {
		assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
		assert_int_equal(wc[i].wr_id, 500 + (uint64_t)i); /* in order, none twice */
		assert_int_equal(wc[i].byte_len, 48);
	}
	second_close(&b);
	check_canaries();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_datagram_lands),
		cmocka_unit_test(test_malformed_datagrams_are_dropped),
		cmocka_unit_test(test_group_qpn_only_from_a_group_address),
		cmocka_unit_test(test_wrong_keys_are_dropped_and_counted),
		cmocka_unit_test(test_datagram_larger_than_the_receive),
		cmocka_unit_test(test_random_and_mutated_datagrams),
		cmocka_unit_test(test_two_qps_of_one_block),
	};

	setenv("SOFTVERBS_MCAST_IFS", "none", 1); /* no group joined on this machine's links */
	return cmocka_run_group_tests(tests, setup, teardown);
}
