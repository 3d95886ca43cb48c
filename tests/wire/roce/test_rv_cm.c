/*
 * The IB CM's MADs (src/wire/roce/rv_cm.c) against the IBA's tables, not against the
 * encoder: a REQ and a REP whose bytes are checked at the offsets IBA volume 1 gives
 * (tables 106 and 110: the CM message after the 24-byte MAD header), every message
 * through encode and decode with every field at values that fill its width, the
 * decoder's refusals (short, another base or class version or class, another method, an
 * attribute it does not know), the encoder's (private data or ARI past the field), 200,000
 * random MADs (decode, encode, decode again gives the same), and rdma_cm's header (IPv4,
 * IPv6, its refusals). --dump-packets prints RoCE v2 datagrams to QP1 carrying one MAD
 * of each kind, for tshark (rv_cm_tshark.sh).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/roce/rv_cm.h"

static uint32_t rng = 12345;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 17;
	rng ^= rng << 5;
	return rng;
}

static void fill(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rnd();
}

static struct rv_cm_msg a_req(void)
{
	struct rv_cm_msg m = {
		.attr = RV_CM_REQ, .tid = 0x0102030405060708ull, .local_id = 0x11223344,
		.service_id = 0x0000000001064e20ull, .local_ca_guid = 0xa1a2a3a4a5a6a7a8ull,
		.qkey = 0x55667788, .qpn = 0xabcdef, .responder_resources = 4,
		.initiator_depth = 3, .remote_cm_timeout = 20, .transport = 0, .eefc = true,
		.starting_psn = 0x123456, .local_cm_timeout = 19, .retry_count = 7,
		.pkey = 0xffff, .mtu = 3, .rnr_retry_count = 6, .max_cm_retries = 15, .srq = true,
		.primary = { .local_lid = 0xffff, .remote_lid = 0xfffe, .flow_label = 0xabcde,
			     .packet_rate = 0x2a, .traffic_class = 0x40, .hop_limit = 64,
			     .sl = 5, .subnet_local = false, .local_ack_timeout = 18 },
		.private_len = 4, .private_data = { 0xde, 0xad, 0xbe, 0xef },
	};

	for (int i = 0; i < 16; i++) {
		m.primary.local_gid[i] = (uint8_t)(0x10 + i);
		m.primary.remote_gid[i] = (uint8_t)(0x20 + i);
	}
	return m;
}

/* The REQ's bytes where IBA table 106 puts them (the message starts at byte 24). */
static void test_req_bytes(void **state)
{
	struct rv_cm_msg m = a_req();
	uint8_t b[RV_MAD_LEN];
	const uint8_t *d = b + 24;
	static const uint8_t hdr[24] = { 1, 7, 2, 3, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
					 0, 0x10, 0, 0, 0, 0, 0, 0 };
	static const uint8_t want[] = {
		0x11, 0x22, 0x33, 0x44, 0, 0, 0, 0,	    /* 0: local comm ID; vendor */
		0, 0, 0, 0, 0x01, 0x06, 0x4e, 0x20,	    /* 8: service ID (TCP, 20000) */
		0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, /* 16: local CA GUID */
		0, 0, 0, 0, 0x55, 0x66, 0x77, 0x88,	    /* 24: reserved; 28: Q_Key */
		0xab, 0xcd, 0xef, 4, 0, 0, 0, 3,	    /* 32: QPN, resp. res.; EECN, init. depth */
		0, 0, 0, 20 << 3 | 0 << 1 | 1,	    /* 40: remote EECN; timeout, RC, EEFC */
		0x12, 0x34, 0x56, 19 << 3 | 7,	    /* 44: PSN; local timeout, retry count */
		0xff, 0xff, 3 << 4 | 6, 15 << 4 | 0x08, /* 48: P_Key; MTU, RNR retry; max CM, SRQ */
		0xff, 0xff, 0xff, 0xfe,			    /* 52: primary LIDs */
	};

	(void)state;
	assert_int_equal(rv_cm_encode(&m, b), 0);
	assert_memory_equal(b, hdr, sizeof(hdr));
	assert_memory_equal(d, want, sizeof(want));
	assert_memory_equal(d + 56, m.primary.local_gid, 16);
	assert_memory_equal(d + 72, m.primary.remote_gid, 16);
	/* 88: flow label (20 bits), 6 reserved, packet rate (6 bits) */
	assert_int_equal(d[88], 0xab);
	assert_int_equal(d[89], 0xcd);
	assert_int_equal(d[90], 0xe0);
	assert_int_equal(d[91], 0x2a);
	assert_int_equal(d[92], 0x40);			 /* traffic class */
	assert_int_equal(d[93], 64);			 /* hop limit */
	assert_int_equal(d[94], 5 << 4);		 /* SL, subnet local 0 */
	assert_int_equal(d[95], 18 << 3);		 /* local ACK timeout */
	for (int i = 96; i < 140; i++)
		assert_int_equal(d[i], 0); /* no alternate path */
	assert_memory_equal(d + 140, m.private_data, 4);
	for (int i = 144; i < 232; i++)
		assert_int_equal(d[i], 0);
}

/* The REP's bytes where IBA table 110 puts them. */
static void test_rep_bytes(void **state)
{
	struct rv_cm_msg m = { .attr = RV_CM_REP, .tid = 9, .local_id = 0x01020304,
			       .remote_id = 0x05060708, .qkey = 0x0a0b0c0d, .qpn = 0x123456,
			       .starting_psn = 0xfedcba, .responder_resources = 16,
			       .initiator_depth = 8, .target_ack_delay = 31, .failover = 2,
			       .eefc = false, .rnr_retry_count = 7, .srq = true,
			       .local_ca_guid = 0x1122334455667788ull };
	uint8_t b[RV_MAD_LEN];
	const uint8_t *d = b + 24;
	static const uint8_t want[] = {
		1, 2, 3, 4, 5, 6, 7, 8,			/* local, remote comm ID */
		0x0a, 0x0b, 0x0c, 0x0d, 0x12, 0x34, 0x56, 0, /* Q_Key; QPN, vendor */
		0, 0, 0, 0, 0xfe, 0xdc, 0xba, 0,	/* EECN; PSN, vendor */
		16, 8, 31 << 3 | 2 << 1 | 0, 7 << 5 | 0x10, /* resources, depth; delay, failover */
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, /* local CA GUID */
	};

	(void)state;
	assert_int_equal(rv_cm_encode(&m, b), 0);
	assert_int_equal(b[17], 0x13);
	assert_memory_equal(d, want, sizeof(want));
}

/* Random values, each cut to its field's width, for a message of @attr. */
static struct rv_cm_msg random_msg(uint16_t attr)
{
	struct rv_cm_msg m;

	memset(&m, 0, sizeof(m));
	m.attr = attr;
	m.tid = (uint64_t)rnd() << 32 | rnd();
	m.local_id = rnd();
	switch (attr) {
	case RV_CM_REQ:
		m.service_id = (uint64_t)rnd() << 32 | rnd();
		m.local_ca_guid = (uint64_t)rnd() << 32 | rnd();
		m.qkey = rnd();
		m.qpn = rnd() & 0xffffff;
		m.responder_resources = (uint8_t)rnd();
		m.initiator_depth = (uint8_t)rnd();
		m.remote_cm_timeout = rnd() & 0x1f;
		m.transport = rnd() & 3;
		m.eefc = rnd() & 1;
		m.starting_psn = rnd() & 0xffffff;
		m.local_cm_timeout = rnd() & 0x1f;
		m.retry_count = rnd() & 7;
		m.pkey = (uint16_t)rnd();
		m.mtu = rnd() & 0xf;
		m.rnr_retry_count = rnd() & 7;
		m.max_cm_retries = rnd() & 0xf;
		m.srq = rnd() & 1;
		for (int k = 0; k < 2; k++) {
			struct rv_cm_path *p = k ? &m.alternate : &m.primary;

			p->local_lid = (uint16_t)rnd();
			p->remote_lid = (uint16_t)rnd();
			fill(p->local_gid, 16);
			fill(p->remote_gid, 16);
			p->flow_label = rnd() & 0xfffff;
			p->packet_rate = rnd() & 0x3f;
			p->traffic_class = (uint8_t)rnd();
			p->hop_limit = (uint8_t)rnd();
			p->sl = rnd() & 0xf;
			p->subnet_local = rnd() & 1;
			p->local_ack_timeout = rnd() & 0x1f;
		}
		break;
	case RV_CM_REP:
		m.remote_id = rnd();
		m.qkey = rnd();
		m.qpn = rnd() & 0xffffff;
		m.starting_psn = rnd() & 0xffffff;
		m.responder_resources = (uint8_t)rnd();
		m.initiator_depth = (uint8_t)rnd();
		m.target_ack_delay = rnd() & 0x1f;
		m.failover = rnd() & 3;
		m.eefc = rnd() & 1;
		m.rnr_retry_count = rnd() & 7;
		m.srq = rnd() & 1;
		m.local_ca_guid = (uint64_t)rnd() << 32 | rnd();
		break;
	case RV_CM_MRA:
		m.remote_id = rnd();
		m.msg = rnd() & 3;
		m.service_timeout = rnd() & 0x1f;
		break;
	case RV_CM_REJ:
		m.remote_id = rnd();
		m.msg = rnd() & 3;
		m.reason = (uint16_t)rnd();
		m.ari_len = (uint8_t)(rnd() % (RV_CM_ARI_MAX + 1));
		fill(m.ari, m.ari_len);
		break;
	case RV_CM_RTU:
	case RV_CM_DREP:
		m.remote_id = rnd();
		break;
	case RV_CM_DREQ:
		m.remote_id = rnd();
		m.qpn = rnd() & 0xffffff;
		break;
	case RV_CM_SIDR_REQ:
		m.pkey = (uint16_t)rnd();
		m.service_id = (uint64_t)rnd() << 32 | rnd();
		break;
	case RV_CM_SIDR_REP:
		m.sidr_status = (uint8_t)rnd();
		m.ari_len = (uint8_t)(rnd() % (RV_CM_ARI_MAX + 1));
		fill(m.ari, m.ari_len);
		m.qpn = rnd() & 0xffffff;
		m.service_id = (uint64_t)rnd() << 32 | rnd();
		m.qkey = rnd();
		break;
	}
	/* Decoded, the private data is the whole field: fill it all. */
	m.private_len = (uint8_t)rv_cm_private_max(attr);
	fill(m.private_data, m.private_len);
	return m;
}

static const uint16_t attrs[] = { RV_CM_REQ, RV_CM_MRA, RV_CM_REJ, RV_CM_REP, RV_CM_RTU,
				  RV_CM_DREQ, RV_CM_DREP, RV_CM_SIDR_REQ, RV_CM_SIDR_REP };

static void test_round_trip_every_message(void **state)
{
	(void)state;
	assert_int_equal(rv_cm_private_max(RV_CM_REQ), 92);
	assert_int_equal(rv_cm_private_max(RV_CM_REP), 196);
	assert_int_equal(rv_cm_private_max(RV_CM_REJ), 148);
	assert_int_equal(rv_cm_private_max(RV_CM_RTU), 224);
	assert_int_equal(rv_cm_private_max(RV_CM_SIDR_REP), 136);
	for (int round = 0; round < 200; round++) {
		for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
			struct rv_cm_msg m = random_msg(attrs[i]), got;
			uint8_t b[RV_MAD_LEN];

			assert_int_equal(rv_cm_encode(&m, b), 0);
			assert_int_equal(rv_cm_decode(b, sizeof(b), &got), 0);
			if (memcmp(&m, &got, sizeof(m)))
				fail_msg("attribute 0x%04x: decoded differs from encoded", attrs[i]);
		}
	}
}

static void test_refusals(void **state)
{
	struct rv_cm_msg m = a_req(), got;
	uint8_t b[RV_MAD_LEN], x[RV_MAD_LEN];

	(void)state;
	assert_int_equal(rv_cm_encode(&m, b), 0);
	assert_int_equal(rv_cm_decode(b, RV_MAD_LEN - 1, &got), -EBADMSG);
	assert_int_equal(rv_cm_decode(b, 0, &got), -EBADMSG);
	memcpy(x, b, sizeof(x));
	x[0] = 2; /* base version */
	assert_int_equal(rv_cm_decode(x, sizeof(x), &got), -EPROTO);
	memcpy(x, b, sizeof(x));
	x[1] = 0x03; /* SA */
	assert_int_equal(rv_cm_decode(x, sizeof(x), &got), -EPROTO);
	memcpy(x, b, sizeof(x));
	x[2] = 1; /* class version */
	assert_int_equal(rv_cm_decode(x, sizeof(x), &got), -EPROTO);
	memcpy(x, b, sizeof(x));
	x[3] = 0x01; /* Get */
	assert_int_equal(rv_cm_decode(x, sizeof(x), &got), -EOPNOTSUPP);
	for (uint16_t a = 0; a < 0x40; a++) {
		bool known = rv_cm_private_max(a) != 0;

		memcpy(x, b, sizeof(x));
		x[16] = (uint8_t)(a >> 8);
		x[17] = (uint8_t)a;
		assert_int_equal(rv_cm_decode(x, sizeof(x), &got), known ? 0 : -EOPNOTSUPP);
	}
	/* A longer buffer is a MAD and what follows. */
	assert_int_equal(rv_cm_decode(b, sizeof(b), &got), 0);
	m.private_len = 93;
	assert_int_equal(rv_cm_encode(&m, b), -EINVAL);
	m = random_msg(RV_CM_REJ);
	m.ari_len = RV_CM_ARI_MAX + 1;
	assert_int_equal(rv_cm_encode(&m, b), -EINVAL);
	m = a_req();
	m.attr = 0x0019; /* LAP */
	assert_int_equal(rv_cm_encode(&m, b), -EINVAL);
}

/* Whatever comes: decoded, encoded and decoded again, the same message. */
static void test_random_mads(void **state)
{
	(void)state;
	for (int i = 0; i < 200000; i++) {
		uint8_t b[RV_MAD_LEN], again[RV_MAD_LEN];
		struct rv_cm_msg m, m2;

		fill(b, sizeof(b));
		if (i % 2) { /* half of them plausible CM MADs */
			b[0] = 1;
			b[1] = 7;
			b[2] = 2;
			b[3] = 3;
			b[16] = 0;
			b[17] = (uint8_t)(0x10 + rnd() % 9);
		}
		if (rv_cm_decode(b, sizeof(b), &m))
			continue;
		assert_int_equal(rv_cm_encode(&m, again), 0);
		assert_int_equal(rv_cm_decode(again, sizeof(again), &m2), 0);
		if (memcmp(&m, &m2, sizeof(m)))
			fail_msg("a random MAD (attribute 0x%04x) decodes differently once re-encoded",
				 m.attr);
	}
}

static void test_cma_header(void **state)
{
	struct rv_cma_hdr h = { .ip_version = 4, .port = 20000 }, got;
	uint8_t b[RV_CMA_HDR];
	static const uint8_t v4[RV_CMA_HDR] = {
		0, 0x40, 0x4e, 0x20,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 77, 0, 2,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 77, 0, 1,
	};

	(void)state;
	h.src[10] = h.src[11] = 0xff; /* (mapped or not: the last 4 bytes go) */
	memcpy(h.src + 12, (uint8_t[]){ 10, 77, 0, 2 }, 4);
	memcpy(h.dst + 12, (uint8_t[]){ 10, 77, 0, 1 }, 4);
	rv_cma_hdr_put(&h, b);
	assert_memory_equal(b, v4, sizeof(v4));
	assert_int_equal(rv_cma_hdr_get(b, sizeof(b), &got), 0);
	assert_int_equal(got.ip_version, 4);
	assert_int_equal(got.port, 20000);
	assert_memory_equal(got.dst + 12, h.dst + 12, 4);
	h.ip_version = 6;
	fill(h.src, 16);
	fill(h.dst, 16);
	rv_cma_hdr_put(&h, b);
	assert_int_equal(b[1], 0x60);
	assert_int_equal(rv_cma_hdr_get(b, sizeof(b), &got), 0);
	assert_memory_equal(got.src, h.src, 16);
	assert_memory_equal(got.dst, h.dst, 16);
	assert_int_equal(rv_cma_hdr_get(b, RV_CMA_HDR - 1, &got), -EBADMSG);
	b[1] = 0x50;
	assert_int_equal(rv_cma_hdr_get(b, sizeof(b), &got), -EPROTO);
	b[1] = 0x60;
	b[0] = 1;
	assert_int_equal(rv_cma_hdr_get(b, sizeof(b), &got), -EPROTO);
	assert_true(rv_cma_service_id(0x0106, 20000) == 0x0000000001064e20ull);
	assert_true(rv_cma_service_id(0x0111, 7174) == 0x0000000001111c06ull);
}

/*
 * One RoCE v2 datagram to QP1 per message kind, as a raw IPv4 packet in hex a line:
 * IPv4, UDP to 4791, BTH (UD SEND Only, QP 1), DETH (Q_Key 0x80010000, source QP 1),
 * the MAD, an ICRC of zeros (Wireshark does not check it).
 */
static int dump_packets(void)
{
	for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
		struct rv_cm_msg m = a_req();
		uint8_t p[20 + 8 + 12 + 8 + RV_MAD_LEN + 4] = { 0 }, *u = p + 20, *bth = u + 8;
		uint16_t tl = sizeof(p), ul = sizeof(p) - 20;
		struct rv_cma_hdr h = { .ip_version = 4, .port = 7174,
					.src = { [12] = 10, 77, 0, 2 }, .dst = { [12] = 10, 77, 0, 1 } };

		/* The REQ of test_req_bytes with rdma_cm's header in its private data; the
		 * others: local comm ID 0x100 + i, remote 0x200 + i, and a few fields each. */
		if (attrs[i] != RV_CM_REQ) {
			m = (struct rv_cm_msg){ .attr = attrs[i], .tid = i, .local_id = 0x100 + (uint32_t)i,
						.remote_id = 0x200 + (uint32_t)i, .qpn = 0x000300 + (uint32_t)i,
						.starting_psn = 0x000400, .qkey = 0x80010000,
						.reason = 28, .service_id = 0x0000000001111c06ull };
		}
		m.private_len = (uint8_t)rv_cm_private_max(attrs[i]);
		memset(m.private_data, 0, m.private_len);
		if (attrs[i] == RV_CM_REQ || attrs[i] == RV_CM_SIDR_REQ)
			rv_cma_hdr_put(&h, m.private_data);
		p[0] = 0x45;
		p[2] = (uint8_t)(tl >> 8);
		p[3] = (uint8_t)tl;
		p[6] = 0x40;
		p[8] = 64;
		p[9] = 17;
		memcpy(p + 12, (uint8_t[]){ 10, 77, 0, 2, 10, 77, 0, 1 }, 8);
		u[0] = 0xc0; /* source port 49152 */
		u[2] = 4791 >> 8;
		u[3] = 4791 & 0xff;
		u[4] = (uint8_t)(ul >> 8);
		u[5] = (uint8_t)ul;
		bth[0] = 0x64; /* UD SEND Only */
		bth[2] = bth[3] = 0xff;
		bth[7] = 1;	     /* QP1 */
		bth[11] = (uint8_t)i; /* PSN */
		bth[12] = 0x80;
		bth[13] = 0x01;	     /* Q_Key 0x80010000 */
		bth[19] = 1;	     /* source QP 1 */
		if (rv_cm_encode(&m, bth + 20))
			return 1;
		for (size_t k = 0; k < sizeof(p); k++)
			printf("%02x", p[k]);
		printf("\n");
	}
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_req_bytes),
		cmocka_unit_test(test_rep_bytes),
		cmocka_unit_test(test_round_trip_every_message),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_random_mads),
		cmocka_unit_test(test_cma_header),
	};

	if (argc > 1 && !strcmp(argv[1], "--dump-packets"))
		return dump_packets();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
