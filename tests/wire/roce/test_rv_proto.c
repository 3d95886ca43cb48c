/*
 * The RoCE v2 packet codec and ICRC (src/wire/roce/rv_proto.h), pure functions on
 * buffers:
 * - header bytes against layouts written here from IBA 9.2-9.3 (not from the encoder),
 *   and every opcode's header length against the IBA's;
 * - an encode -> decode round trip of every opcode the codec knows, every field of its
 *   headers distinct, and 24-bit fields cut to 24 bits;
 * - every refusal of the decoder (IBA 9.6.1.1), and random bytes decoded without a read
 *   past the buffer (AddressSanitizer in CI);
 * - the ICRC against an independent computation (zlib's CRC-32 over the masked headers
 *   as Annex A17.8 and Linux's rxe lay them out), over IPv4 and IPv6 and with the BTH cut
 *   across iovecs;
 * - a received IPv4 datagram's ICRC checked whatever its identification and DF bit, and
 *   every single-bit error in 2,000 refused.
 *
 * `test_rv_proto --dump-packets` prints pinned datagrams (IPv4 + UDP + payload, hex, one
 * per line) for tshark to decode (rv_tshark.sh).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "wire/roce/rv_proto.h"

/* --- header bytes --------------------------------------------------------------------- */

/* RC RDMA WRITE Only with Immediate: BTH: opcode 0x0b; SE 1, M 0, PadCnt 3, TVer 0;
 * P_Key 0xffff; FECN/BECN 0, dest QP 0x123456; A 1, PSN 0xabcdef. RETH: VA, R_Key,
 * DMA length 5. ImmDt as given. */
static const uint8_t write_imm_hdr[32] = {
	0x0b, 0xb0, 0xff, 0xff, 0x00, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef,
	0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x11, 0x22, 0x33, 0x44,
	0x00, 0x00, 0x00, 0x05, 0xde, 0xad, 0xbe, 0xef,
};

/* XRC Compare & Swap: BTH (opcode 0xb3, PadCnt 0), XRCETH (SRQ 0x00beef), AtomicETH
 * (VA, R_Key, swap, compare). */
static const uint8_t xrc_cas_hdr[44] = {
	0xb3, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x09,
	0x00, 0x00, 0xbe, 0xef,
	0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x99, 0x88, 0x77, 0x66,
	0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,
	0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8,
};

/* Atomic ACK: BTH, AETH (syndrome ACK, MSN 0x000102), AtomicAckETH. */
static const uint8_t atomic_ack_hdr[24] = {
	0x12, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x00, 0x00, 0x03,
	0x00, 0x00, 0x01, 0x02, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
};

static void test_header_bytes(void **state)
{
	uint8_t b[RV_HDR_MAX];
	struct rv_pkt p = {
		.opcode = RV_RC | RV_WRITE_ONLY_IMM, .se = true, .pkey = 0xffff,
		.dest_qpn = 0x123456, .ack_req = true, .psn = 0xabcdef,
		.va = 0x0102030405060708ull, .rkey = 0x11223344, .dma_len = 5,
		.imm_be = htonl(0xdeadbeef),
	};

	(void)state;
	assert_int_equal(rv_encode(b, &p, 5), 32);
	assert_memory_equal(b, write_imm_hdr, 32);

	p = (struct rv_pkt){ .opcode = RV_XRC | RV_CMP_SWAP, .pkey = 0x8001, .dest_qpn = 7,
			     .psn = 9, .xrc_srqn = 0xbeef, .va = 0x1020304050607080ull,
			     .rkey = 0x99887766, .swap_add = 0xa1a2a3a4a5a6a7a8ull,
			     .compare = 0xc1c2c3c4c5c6c7c8ull };
	assert_int_equal(rv_encode(b, &p, 0), 44);
	assert_memory_equal(b, xrc_cas_hdr, 44);

	p = (struct rv_pkt){ .opcode = RV_RC | RV_ATOMIC_ACK, .pkey = 0xffff, .dest_qpn = 42,
			     .psn = 3, .syndrome = RV_AETH_ACK, .msn = 0x102,
			     .orig = 0x0123456789abcdefull };
	assert_int_equal(rv_encode(b, &p, 0), 24);
	assert_memory_equal(b, atomic_ack_hdr, 24);
}

/* The header lengths of IBA 9.2 (BTH 12, and its extension headers). */
static void test_header_lengths(void **state)
{
	static const struct { uint8_t op; uint8_t len; } want[] = {
		{ RV_RC | RV_SEND_FIRST, 12 },     { RV_RC | RV_SEND_MIDDLE, 12 },
		{ RV_RC | RV_SEND_LAST_IMM, 16 },  { RV_RC | RV_SEND_ONLY_INV, 16 },
		{ RV_RC | RV_WRITE_FIRST, 28 },    { RV_RC | RV_WRITE_LAST, 12 },
		{ RV_RC | RV_WRITE_ONLY_IMM, 32 }, { RV_RC | RV_READ_REQ, 28 },
		{ RV_RC | RV_READ_RESP_FIRST, 16 }, { RV_RC | RV_READ_RESP_MIDDLE, 12 },
		{ RV_RC | RV_READ_RESP_ONLY, 16 }, { RV_RC | RV_ACK, 16 },
		{ RV_RC | RV_ATOMIC_ACK, 24 },     { RV_RC | RV_FETCH_ADD, 40 },
		{ RV_UC | RV_WRITE_ONLY, 28 },     { RV_UC | RV_SEND_ONLY_IMM, 16 },
		{ RV_UD | RV_SEND_ONLY, 20 },      { RV_UD | RV_SEND_ONLY_IMM, 24 },
		{ RV_XRC | RV_SEND_ONLY, 16 },     { RV_XRC | RV_WRITE_ONLY_IMM, 36 },
		{ RV_XRC | RV_READ_RESP_ONLY, 16 }, { RV_XRC | RV_ACK, 16 },
		{ RV_XRC | RV_CMP_SWAP, 44 },      { RV_CNP | RV_CNP_OP, 28 },
	};
	int known = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		if (rv_op_info[want[i].op].hdr_len != want[i].len)
			fail_msg("%s (0x%02x): header %u bytes, IBA says %u",
				 rv_op_name(want[i].op), want[i].op,
				 rv_op_info[want[i].op].hdr_len, want[i].len);
	}
	/* RC 23 opcodes, UC 12, UD 2, XRC 23, CNP 1; RD and the reserved ones: none */
	for (int op = 0; op < 256; op++)
		known += rv_op_info[op].name != NULL;
	assert_int_equal(known, 23 + 12 + 2 + 23 + 1);
	assert_null(rv_op_info[RV_RD | RV_SEND_ONLY].name);
	assert_null(rv_op_info[RV_RC | 0x15].name);
	assert_null(rv_op_info[RV_UC | RV_READ_REQ].name);
	assert_null(rv_op_info[RV_UD | RV_SEND_FIRST].name);
	assert_string_equal(rv_op_name(0x40), "?");
}

/* --- round trip ------------------------------------------------------------------------- */

/* The datagram of @p with @payload_len bytes of 0x5a and a dummy ICRC; its length. */
static size_t build(uint8_t *out, const struct rv_pkt *p, uint32_t payload_len)
{
	int n = rv_encode(out, p, payload_len);
	uint8_t pad = rv_pad_len(payload_len);

	assert_true(n > 0);
	memset(out + n, 0x5a, payload_len);
	memset(out + (size_t)n + payload_len, 0, pad);
	memset(out + (size_t)n + payload_len + pad, 0xee, RV_ICRC);
	return (size_t)n + payload_len + pad + RV_ICRC;
}

static void test_round_trip_every_opcode(void **state)
{
	uint8_t b[RV_HDR_MAX + 64];

	(void)state;
	for (int op = 0; op < 256; op++) {
		const struct rv_op_info *oi = &rv_op_info[op];
		uint32_t len = oi->flags & RV_PAYLOAD ? 5 : 0;
		struct rv_pkt in = {
			.opcode = (uint8_t)op, .se = true, .mig = true, .pkey = 0x8123,
			.fecn = true, .becn = true, .dest_qpn = 0xfedcba, .ack_req = true,
			.psn = 0x7654321, /* 28 bits: cut to 24 */
			.xrc_srqn = 0x111111, .qkey = 0x22222222, .src_qpn = 0x333333,
			.va = 0x4444444455555555ull, .rkey = 0x66666666, .dma_len = 0x77777777,
			.swap_add = 0x8888888899999999ull, .compare = 0xaaaaaaaabbbbbbbbull,
			.syndrome = 0x61, .msn = 0xcccccc, .orig = 0xddddddddeeeeeeeeull,
			.imm_be = htonl(0x12345678), .inv_rkey = 0x9abcdef0,
		}, out;
		size_t n;

		if (!oi->name) {
			assert_int_equal(rv_encode(b, &in, 0), -EINVAL);
			continue;
		}
		if (!(oi->flags & RV_PAYLOAD))
			assert_int_equal(rv_encode(b, &in, 4), -EINVAL);
		n = build(b, &in, len);
		if (rv_decode(b, n, &out))
			fail_msg("%s: not decoded", oi->name);
		assert_int_equal(out.opcode, op);
		assert_true(out.se && out.mig && out.fecn && out.becn && out.ack_req);
		assert_int_equal(out.pkey, 0x8123);
		assert_int_equal(out.dest_qpn, 0xfedcba);
		assert_int_equal(out.psn, 0x654321);
		assert_int_equal(out.pad, rv_pad_len(len));
		assert_int_equal(out.hdr_len, oi->hdr_len);
		assert_int_equal(out.payload_len, len);
		assert_int_equal(out.xrc_srqn, oi->flags & RV_H_XRCETH ? 0x111111 : 0);
		assert_int_equal(out.qkey, oi->flags & RV_H_DETH ? 0x22222222 : 0);
		assert_int_equal(out.src_qpn, oi->flags & RV_H_DETH ? 0x333333 : 0);
		assert_true(out.va == (oi->flags & (RV_H_RETH | RV_H_ATOMICETH) ? in.va : 0));
		assert_int_equal(out.rkey,
				 oi->flags & (RV_H_RETH | RV_H_ATOMICETH) ? 0x66666666 : 0);
		assert_int_equal(out.dma_len, oi->flags & RV_H_RETH ? 0x77777777 : 0);
		assert_true(out.swap_add == (oi->flags & RV_H_ATOMICETH ? in.swap_add : 0));
		assert_true(out.compare == (oi->flags & RV_H_ATOMICETH ? in.compare : 0));
		assert_int_equal(out.syndrome, oi->flags & RV_H_AETH ? 0x61 : 0);
		assert_int_equal(out.msn, oi->flags & RV_H_AETH ? 0xcccccc : 0);
		assert_true(out.orig == (oi->flags & RV_H_ATOMICACKETH ? in.orig : 0));
		assert_int_equal(out.imm_be, oi->flags & RV_H_IMMDT ? in.imm_be : 0);
		assert_int_equal(out.inv_rkey, oi->flags & RV_H_IETH ? 0x9abcdef0 : 0);
	}
}

/* --- refusals ------------------------------------------------------------------------------- */

static void expect_refused(const uint8_t *b, size_t n, const char *why)
{
	struct rv_pkt p;

	if (rv_decode(b, n, &p) != -EPROTO)
		fail_msg("decoded, though %s", why);
}

static void test_decoder_refusals(void **state)
{
	uint8_t b[RV_HDR_MAX + 64], c[RV_HDR_MAX + 64];
	struct rv_pkt p = { .opcode = RV_RC | RV_SEND_ONLY, .pkey = 0xffff, .dest_qpn = 5 };
	size_t n = build(b, &p, 7), m;

	(void)state;
	assert_int_equal(rv_decode(b, n, &p), 0);
	for (size_t k = 0; k < RV_BTH + RV_ICRC; k++)
		expect_refused(b, k, "shorter than a BTH and an ICRC");
	memcpy(c, b, n);
	c[1] |= 0x01;
	expect_refused(c, n, "its transport version is 1");
	for (int op = 0; op < 256; op++) {
		if (rv_op_info[op].name)
			continue;
		memcpy(c, b, n);
		c[0] = (uint8_t)op;
		expect_refused(c, n, "its opcode is not known");
	}
	/* a READ request cut inside its RETH */
	p = (struct rv_pkt){ .opcode = RV_RC | RV_READ_REQ };
	m = build(c, &p, 0);
	expect_refused(c, m - 1, "its RETH is cut");
	for (size_t k = RV_BTH + RV_ICRC; k < m; k++)
		expect_refused(c, k, "its headers are cut");
	/* payload on an ACK */
	p = (struct rv_pkt){ .opcode = RV_RC | RV_ACK };
	m = build(c, &p, 0);
	memmove(c + m, c + m - RV_ICRC, RV_ICRC);
	memset(c + m - RV_ICRC, 0, RV_ICRC);
	expect_refused(c, m + RV_ICRC, "an ACK carries payload");
	/* payload and pad not a multiple of 4 */
	memcpy(c, b, n);
	expect_refused(c, n - 1, "payload and pad are not a multiple of 4");
	expect_refused(c, n + 1, "payload and pad are not a multiple of 4");
	/* pad longer than what follows the header */
	p = (struct rv_pkt){ .opcode = RV_RC | RV_SEND_ONLY };
	m = build(c, &p, 0);
	c[1] |= 0x30;
	expect_refused(c, m, "its pad is longer than its payload");
	c[1] &= (uint8_t)~0x30;
	assert_int_equal(rv_decode(c, m, &p), 0);
	assert_int_equal(p.payload_len, 0);
}

static void test_random_bytes(void **state)
{
	unsigned seed = 12345;

	(void)state;
	for (int i = 0; i < 200000; i++) {
		size_t n = (size_t)(rand_r(&seed) % 80);
		uint8_t *b = malloc(n ? n : 1); /* exact size: a read past it is caught */
		struct rv_pkt p;

		assert_non_null(b);
		for (size_t k = 0; k < n; k++)
			b[k] = (uint8_t)rand_r(&seed);
		if (n > 1 && i % 2)
			b[1] &= 0xf0; /* a valid version half the time */
		if (!rv_decode(b, n, &p))
			assert_true(p.hdr_len + p.payload_len + p.pad + RV_ICRC == n);
		free(b);
	}
}

/* --- ICRC ----------------------------------------------------------------------------------- */

static const struct rv_path v4 = {
	.src = { 10, 77, 0, 2 }, .dst = { 10, 77, 0, 1 }, .sport = 49152, .dport = RV_PORT,
};
static const struct rv_path v6 = {
	.v6 = true,
	.src = { 0xfd, 0x77, [15] = 2 }, .dst = { 0xfd, 0x77, [15] = 1 },
	.sport = 50000, .dport = RV_PORT,
};

/* The IPv4 and UDP headers of datagram @d (@n bytes) on @path: identification @id,
 * flags @flags, TOS @tos, TTL @ttl, checksums @csum. */
static size_t ip4_udp(uint8_t *h, const struct rv_path *path, size_t n, uint16_t id,
		      uint16_t flags, uint8_t tos, uint8_t ttl, uint16_t csum)
{
	uint16_t tl = (uint16_t)(28 + n), ul = (uint16_t)(8 + n);
	uint8_t ip[20] = { 0x45, tos, (uint8_t)(tl >> 8), (uint8_t)tl, (uint8_t)(id >> 8),
			   (uint8_t)id, (uint8_t)(flags >> 8), (uint8_t)flags, ttl, 17,
			   (uint8_t)(csum >> 8), (uint8_t)csum };
	uint8_t udp[8] = { (uint8_t)(path->sport >> 8), (uint8_t)path->sport, 0x12, 0xb7,
			   (uint8_t)(ul >> 8), (uint8_t)ul, (uint8_t)(csum >> 8), (uint8_t)csum };

	memcpy(ip + 12, path->src, 4);
	memcpy(ip + 16, path->dst, 4);
	memcpy(h, ip, 20);
	memcpy(h + 20, udp, 8);
	return 28;
}

/* Annex A17.8 as rxe computes it, with zlib: ones for the LRH; the IP and UDP headers
 * with TOS/TTL/checksums (IPv6: class, flow label, hop limit) ones; the BTH's byte 4
 * ones; the rest. @d: datagram without its ICRC (@n bytes). */
static uint32_t reference_icrc(const struct rv_path *path, const uint8_t *d, size_t n,
			       uint16_t id, uint16_t flags)
{
	uint8_t buf[2048];
	size_t k = 8;

	memset(buf, 0xff, 8);
	if (path->v6) {
		uint16_t pl = (uint16_t)(8 + n + RV_ICRC);
		uint8_t ip[40] = { 0x6f, 0xff, 0xff, 0xff, (uint8_t)(pl >> 8), (uint8_t)pl, 17,
				   0xff };
		uint8_t udp[8] = { (uint8_t)(path->sport >> 8), (uint8_t)path->sport, 0x12,
				   0xb7, (uint8_t)(pl >> 8), (uint8_t)pl, 0xff, 0xff };

		memcpy(ip + 8, path->src, 16);
		memcpy(ip + 24, path->dst, 16);
		memcpy(buf + k, ip, 40);
		memcpy(buf + k + 40, udp, 8);
		k += 48;
	} else {
		k += ip4_udp(buf + k, path, n + RV_ICRC, id, flags, 0xff, 0xff, 0xffff);
	}
	memcpy(buf + k, d, n);
	buf[k + 4] = 0xff;
	return (uint32_t)crc32(0, buf, (uInt)(k + n));
}

/* A UD SEND Only with 300 bytes of payload and its ICRC on @path, as rxe would send it
 * with identification @id and @flags; its length. */
static size_t ud_datagram(uint8_t *d, const struct rv_path *path, uint16_t id, uint16_t flags,
			  unsigned *seed)
{
	struct rv_pkt p = { .opcode = RV_UD | RV_SEND_ONLY, .pkey = 0xffff, .dest_qpn = 0x11,
			    .psn = 77, .qkey = 0x80010000, .src_qpn = 0x22 };
	int h = rv_encode(d, &p, 301);

	assert_true(h > 0);
	for (int i = 0; i < 301; i++)
		d[h + i] = (uint8_t)rand_r(seed);
	d[h + 301] = d[h + 302] = d[h + 303] = 0;
	d[4] = 0x40; /* BECN set: byte 4 is masked, it must not matter */
	rv_icrc_put(d + h + 304, reference_icrc(path, d, (size_t)h + 304, id, flags));
	return (size_t)h + 304 + RV_ICRC;
}

static void test_icrc_against_reference(void **state)
{
	uint8_t d[512];
	unsigned seed = 7;

	(void)state;
	for (int v = 0; v < 2; v++) {
		const struct rv_path *path = v ? &v6 : &v4;
		size_t n = ud_datagram(d, path, 0, 0x4000, &seed);
		/* the same bytes cut across iovecs, the BTH split twice */
		struct iovec cut[4] = { { d, 3 }, { d + 3, 5 }, { d + 8, 30 },
					{ d + 38, n - RV_ICRC - 38 } };
		struct iovec whole = { d, n - RV_ICRC };

		assert_int_equal(rv_icrc(path, &whole, 1), rv_icrc_get(d + n - RV_ICRC));
		assert_int_equal(rv_icrc(path, cut, 4), rv_icrc_get(d + n - RV_ICRC));
		assert_true(rv_icrc_check(path, d, n, NULL));
		/* least significant byte first */
		rv_icrc_put(d, 0x11223344);
		assert_int_equal(d[0], 0x44);
		assert_int_equal(d[3], 0x11);
	}
}

/* rxe and NICs send other identifications (and DF or not): the receiver, which cannot
 * see them, still accepts what is right and refuses every single-bit error. */
static void test_icrc_any_identification(void **state)
{
	struct rv_icrc_ids ids = { 0 };
	uint8_t d[512];
	unsigned seed = 99;
	int accepted = 0, caught = 0;

	(void)state;
	for (int i = 0; i < 2000; i++) {
		uint16_t id = (uint16_t)rand_r(&seed), flags = rand_r(&seed) % 2 ? 0x4000 : 0;
		size_t n = ud_datagram(d, &v4, id, flags, &seed);
		size_t bit = (size_t)rand_r(&seed) % (n * 8);

		accepted += rv_icrc_check(&v4, d, n, i % 3 ? &ids : NULL);
		d[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		if (bit / 8 == 4)
			caught++; /* byte 4 is masked: a flip there changes nothing */
		else
			caught += !rv_icrc_check(&v4, d, n, &ids);
	}
	assert_int_equal(accepted, 2000);
	assert_int_equal(caught, 2000);
	/* IPv6 has no identification: a datagram sent with another flow label is fine
	 * (masked), one with a bit flipped is not */
	{
		size_t n = ud_datagram(d, &v6, 0, 0, &seed);

		assert_true(rv_icrc_check(&v6, d, n, &ids));
		d[40] ^= 0x10;
		assert_false(rv_icrc_check(&v6, d, n, &ids));
	}
	/* nor does a datagram on another path pass */
	{
		struct rv_path other = v4;
		size_t n = ud_datagram(d, &v4, 1234, 0x4000, &seed);

		other.sport++;
		assert_true(rv_icrc_check(&v4, d, n, &ids));
		assert_false(rv_icrc_check(&other, d, n, &ids));
	}
}

/* --- for tshark ----------------------------------------------------------------------------- */

/* Pinned datagrams, whole (IPv4, UDP, payload with its ICRC), in hex, one per line. */
static int dump_packets(void)
{
	static const struct rv_pkt pkts[] = {
		{ .opcode = RV_RC | RV_SEND_ONLY, .pkey = 0xffff, .dest_qpn = 0x11, .psn = 1,
		  .ack_req = true },
		{ .opcode = RV_RC | RV_WRITE_ONLY_IMM, .pkey = 0xffff, .dest_qpn = 0x11, .psn = 2,
		  .va = 0x7f0000001000ull, .rkey = 0x1234, .dma_len = 10, .imm_be = 0x01020304,
		  .ack_req = true },
		{ .opcode = RV_RC | RV_READ_REQ, .pkey = 0xffff, .dest_qpn = 0x11, .psn = 3,
		  .va = 0x7f0000002000ull, .rkey = 0x1234, .dma_len = 4096 },
		{ .opcode = RV_RC | RV_ACK, .pkey = 0xffff, .dest_qpn = 0x22, .psn = 3,
		  .syndrome = RV_AETH_ACK | RV_AETH_CREDIT_INVALID, .msn = 2 },
		{ .opcode = RV_RC | RV_FETCH_ADD, .pkey = 0xffff, .dest_qpn = 0x11, .psn = 4,
		  .va = 0x7f0000003000ull, .rkey = 0x1234, .swap_add = 1 },
		{ .opcode = RV_UD | RV_SEND_ONLY_IMM, .pkey = 0xffff, .dest_qpn = 0x33, .psn = 5,
		  .qkey = 0x11111111, .src_qpn = 0x44, .imm_be = 0x0a0b0c0d },
	};

	for (size_t i = 0; i < sizeof(pkts) / sizeof(pkts[0]); i++) {
		uint8_t d[256];
		uint32_t len = rv_op_info[pkts[i].opcode].flags & RV_PAYLOAD ? 10 : 0;
		int h = rv_encode(d + 28, &pkts[i], len);
		size_t n;
		struct iovec iov;

		if (h < 0)
			return 1;
		memset(d + 28 + h, 0x61, len);
		memset(d + 28 + h + len, 0, rv_pad_len(len));
		n = (size_t)h + len + rv_pad_len(len);
		iov = (struct iovec){ d + 28, n };
		rv_icrc_put(d + 28 + n, rv_icrc(&v4, &iov, 1));
		n += RV_ICRC;
		ip4_udp(d, &v4, n, 0, 0x4000, 0, 64, 0);
		for (size_t k = 0; k < 28 + n; k++)
			printf("%02x", d[k]);
		printf("\n");
	}
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_bytes),
		cmocka_unit_test(test_header_lengths),
		cmocka_unit_test(test_round_trip_every_opcode),
		cmocka_unit_test(test_decoder_refusals),
		cmocka_unit_test(test_random_bytes),
		cmocka_unit_test(test_icrc_against_reference),
		cmocka_unit_test(test_icrc_any_identification),
	};

	if (argc > 1 && !strcmp(argv[1], "--dump-packets"))
		return dump_packets();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
