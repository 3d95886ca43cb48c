/*
 * The UDP wire's datagram codec (src/wire/udp/udp_proto.h), pure functions on buffers:
 * the headers byte for byte against a layout written here from IBA's BTH and DETH (not
 * from the encoder), an encode -> decode round trip of both opcodes with every field
 * distinct, the CRC against an independent computation over the masked bytes, and
 * every refusal of the decoder.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <isa-l/crc.h>
#include <string.h>

#include "wire/udp/udp_proto.h"

static const struct udp_pkt sample = {
	.opcode = UDP_OP_SEND_ONLY_IMM, .solicited = true, .pkey = 0x8001,
	.dest_qpn = 0xabcdef, .psn = 0x123456, .qkey = 0x11223344, .src_qpn = 0x654321,
	.len = 5,
};

/* BTH: opcode 0x65; SE 1, M 0, pad 3, TVer 0; P_Key 0x8001; 0, dest QP; A 0, PSN.
 * DETH: Q_Key; 0, source QP. ImmDt as given (network order). */
static const uint8_t sample_hdr[24] = {
	0x65, 0xb0, 0x80, 0x01, 0x00, 0xab, 0xcd, 0xef, 0x00, 0x12, 0x34, 0x56,
	0x11, 0x22, 0x33, 0x44, 0x00, 0x65, 0x43, 0x21, 0xde, 0xad, 0xbe, 0xef,
};

static size_t datagram(const struct udp_pkt *p, const uint8_t *payload, uint8_t *out)
{
	uint8_t hdr[UDP_HDR_MAX];
	size_t n = udp_encode_hdr(p, hdr);
	uint32_t pad = udp_pad_of(p->len), crc;
	struct iovec iov = { (void *)payload, p->len };

	memcpy(out, hdr, n);
	memcpy(out + n, payload, p->len);
	memset(out + n + p->len, 0, pad);
	crc = udp_crc(hdr, n, &iov, 1, pad);
	n += p->len + pad;
	for (int i = 0; i < 4; i++)
		out[n + (size_t)i] = (uint8_t)(crc >> (8 * i));
	return n + 4;
}

static void test_header_bytes(void **state)
{
	struct udp_pkt p = sample;
	uint8_t hdr[UDP_HDR_MAX];

	(void)state;
	p.imm = htonl(0xdeadbeef);
	assert_int_equal(udp_encode_hdr(&p, hdr), 24);
	assert_memory_equal(hdr, sample_hdr, 24);
	p.opcode = UDP_OP_SEND_ONLY;
	assert_int_equal(udp_encode_hdr(&p, hdr), 20);
	assert_int_equal(hdr[0], 0x64);
	/* Fields wider than 24 bits keep their low 24. */
	p.dest_qpn = 0xff000001;
	udp_encode_hdr(&p, hdr);
	assert_int_equal(hdr[4], 0);
	assert_int_equal(hdr[7], 1);
}

static void test_pad(void **state)
{
	(void)state;
	assert_int_equal(udp_pad_of(0), 0);
	assert_int_equal(udp_pad_of(1), 3);
	assert_int_equal(udp_pad_of(2), 2);
	assert_int_equal(udp_pad_of(3), 1);
	assert_int_equal(udp_pad_of(4096), 0);
}

/* The CRC: CRC-32 (as zlib's) over the headers with byte 4 as 0xff, payload and pad. */
static void test_crc_independent(void **state)
{
	uint8_t b[64], masked[64];
	struct udp_pkt p = sample;
	size_t n;
	uint32_t want;

	(void)state;
	p.imm = htonl(0xdeadbeef);
	n = datagram(&p, (const uint8_t *)"hello", b);
	assert_int_equal(n, 24 + 5 + 3 + 4);
	memcpy(masked, b, n - 4);
	masked[4] = 0xff;
	want = crc32_gzip_refl(0, masked, n - 4);
	assert_int_equal(b[n - 4] | b[n - 3] << 8 | b[n - 2] << 16 | (uint32_t)b[n - 1] << 24, want);
	/* The masked byte changes nothing (FECN/BECN may be set on the way). */
	b[4] = 0xc0;
	assert_int_equal(udp_decode(b, n, &p), 0);
}

static void test_round_trip(void **state)
{
	uint8_t b[UDP_DGRAM_MAX], payload[UDP_PAYLOAD_MAX];
	struct udp_pkt p = sample, got;

	(void)state;
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 13);
	for (uint32_t len = 0; len <= UDP_PAYLOAD_MAX; len += len < 16 ? 1 : 1021) {
		for (int imm = 0; imm < 2; imm++) {
			size_t n;

			p.opcode = imm ? UDP_OP_SEND_ONLY_IMM : UDP_OP_SEND_ONLY;
			p.imm = imm ? htonl(0x01020304) : 0;
			p.len = len;
			n = datagram(&p, payload, b);
			assert_int_equal(udp_decode(b, n, &got), 0);
			assert_int_equal(got.opcode, p.opcode);
			assert_true(got.solicited);
			assert_int_equal(got.pkey, p.pkey);
			assert_int_equal(got.dest_qpn, p.dest_qpn);
			assert_int_equal(got.psn, p.psn);
			assert_int_equal(got.qkey, p.qkey);
			assert_int_equal(got.src_qpn, p.src_qpn);
			assert_int_equal(got.imm, p.imm);
			assert_int_equal(got.len, len);
			assert_int_equal(got.payload_off, imm ? 24 : 20);
			assert_memory_equal(b + got.payload_off, payload, len);
		}
	}
	/* The largest payload: the largest datagram. */
	p.len = UDP_PAYLOAD_MAX;
	assert_true(datagram(&p, payload, b) <= UDP_DGRAM_MAX);
}

static void test_refusals(void **state)
{
	uint8_t b[UDP_DGRAM_MAX + 8], payload[UDP_PAYLOAD_MAX + 4] = { 0 };
	struct udp_pkt p = sample, got;
	size_t n;

	(void)state;
	p.len = 7; /* pad 1 */
	n = datagram(&p, payload, b);
	assert_int_equal(udp_decode(b, n, &got), 0);
	assert_int_equal(udp_decode(b, 0, &got), -EBADMSG);
	assert_int_equal(udp_decode(b, 23, &got), -EBADMSG); /* < BTH + DETH + CRC */
	assert_int_equal(udp_decode(b, n - 1, &got), -EBADMSG);
	assert_true(udp_decode(b, n + 4, &got) < 0); /* the CRC and the pad are elsewhere */
	b[n - 1] ^= 1;
	assert_int_equal(udp_decode(b, n, &got), -EILSEQ);
	b[n - 1] ^= 1;
	b[30] ^= 1; /* a payload byte */
	assert_int_equal(udp_decode(b, n, &got), -EILSEQ);
	b[30] ^= 1;
	/* Field faults (the CRC made right for each, so that the field is what fails). */
	{
		static const struct { int off; uint8_t val; } faults[] = {
			{ 0, 0x04 }, /* RC SEND Only */
			{ 0, 0x66 }, /* not a UD SEND */
			{ 1, 0xb1 }, /* TVer 1 */
			{ 1, 0xf0 }, /* M */
		};

		for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
			uint8_t c[64], masked[64];
			uint32_t crc;

			memcpy(c, b, n);
			c[faults[i].off] = faults[i].val;
			memcpy(masked, c, n - 4);
			masked[4] = 0xff;
			crc = crc32_gzip_refl(0, masked, n - 4);
			for (int k = 0; k < 4; k++)
				c[n - 4 + (size_t)k] = (uint8_t)(crc >> (8 * k));
			assert_int_equal(udp_decode(c, n, &got), -EBADMSG);
		}
	}
	/* A non-zero pad byte. */
	{
		uint8_t masked[64];
		uint32_t crc;

		b[n - 5] = 1;
		memcpy(masked, b, n - 4);
		masked[4] = 0xff;
		crc = crc32_gzip_refl(0, masked, n - 4);
		for (int k = 0; k < 4; k++)
			b[n - 4 + (size_t)k] = (uint8_t)(crc >> (8 * k));
		assert_int_equal(udp_decode(b, n, &got), -EBADMSG);
	}
	/* A payload over one packet of the MTU. */
	p.opcode = UDP_OP_SEND_ONLY;
	p.len = UDP_PAYLOAD_MAX + 4;
	n = datagram(&p, payload, b);
	assert_int_equal(udp_decode(b, n, &got), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_bytes),
		cmocka_unit_test(test_pad),
		cmocka_unit_test(test_crc_independent),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
