/*
 * MPA connection setup frames (src/wire/iwarp/iw_mpa.h): iw_mpa_build/iw_mpa_parse as
 * rdma_cm uses them (revision 1, bytes pinned); iw_mpa_encode/iw_mpa_decode with RFC
 * 6581's enhanced setup (revision 2, the IRD/ORD words and their flags, byte-exact, round
 * trips of every flag and of the 14-bit limits, the words stripped from the consumer's
 * private data); revision 1 and revision 2 without the words decoded; every split point
 * of several frames (-EAGAIN, in a buffer of exactly that many bytes); and the refusals:
 * wrong key at each byte, markers, each reserved bit, the enhanced flag at revision 1,
 * revisions 0 and 3+, R in a request, PD_Length above 512, an enhanced frame with fewer
 * than 4 bytes of private data; the encoder's refusals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wire/iwarp/iw_mpa.h"

static const unsigned char req_key[] = "MPA ID Req Frame";
static const unsigned char rep_key[] = "MPA ID Rep Frame";

static void test_build_and_parse_as_before(void **state)
{
	unsigned char b[IW_MPA_FRAME_MAX];
	struct iw_mpa_frame f;
	int n;

	(void)state;
	n = iw_mpa_build(b, sizeof(b), IW_MPA_REQUEST, IW_MPA_FLAG_CRC | IW_MPA_FLAG_REJECT,
			 "abc", 3);
	assert_int_equal(n, 23);
	assert_memory_equal(b, req_key, 16);
	assert_int_equal(b[16], IW_MPA_FLAG_CRC); /* R dropped from a request */
	assert_int_equal(b[17], 1);
	assert_int_equal(b[18], 0);
	assert_int_equal(b[19], 3);
	assert_memory_equal(b + 20, "abc", 3);
	assert_int_equal(iw_mpa_parse(b, (size_t)n, IW_MPA_REQUEST, &f), 23);
	assert_int_equal(f.flags, IW_MPA_FLAG_CRC);
	assert_int_equal(f.rev, 1);
	assert_int_equal(f.pd_len, 3);
	assert_ptr_equal(f.pd, b + 20);
	assert_int_equal(iw_mpa_parse(b, (size_t)n - 1, IW_MPA_REQUEST, &f), -EAGAIN);
	assert_int_equal(iw_mpa_parse(b, (size_t)n, IW_MPA_REPLY, &f), -EPROTO);
	n = iw_mpa_build(b, sizeof(b), IW_MPA_REPLY, IW_MPA_FLAG_REJECT, NULL, 0);
	assert_int_equal(n, 20);
	assert_int_equal(iw_mpa_parse(b, 20, IW_MPA_REPLY, &f), 20);
	assert_int_equal(f.flags, IW_MPA_FLAG_REJECT);
	assert_int_equal(iw_mpa_build(b, sizeof(b), IW_MPA_REPLY, 0, b, 513), -EINVAL);
}

static void test_encode_enhanced_byte_exact(void **state)
{
	static const unsigned char want[] = {
		'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'q', ' ', 'F', 'r', 'a', 'm', 'e',
		0x50,       /* C | enhanced */
		0x02,       /* revision 2 */
		0x00, 0x06, /* PD_Length: 4 + 2 */
		0x80, 0x10, /* IRD word: peer-to-peer, IRD 16 */
		0x80, 0x08, /* ORD word: RTR as zero-length Write, ORD 8 */
		'h', 'i',
	};
	struct iw_mpa_params p = { .flags = IW_MPA_FLAG_CRC | IW_MPA_FLAG_MARKERS, .rev = 2,
				   .enhanced = true, .ird = 16, .ord = 8, .p2p = true,
				   .rtr_zero_write = true };
	unsigned char b[64];

	(void)state;
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, "hi", 2),
			 (int)sizeof(want));
	assert_memory_equal(b, want, sizeof(want)); /* markers never asked for */

	/* A reply choosing Read as RTR, with zero-length Send offered: the other bits. */
	p = (struct iw_mpa_params){ .flags = IW_MPA_FLAG_CRC, .enhanced = true, .ird = 0x3fff,
				    .ord = 1, .rtr_zero_read = true, .rtr_zero_send = true };
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REPLY, &p, NULL, 0), 24);
	assert_memory_equal(b, rep_key, 16);
	assert_int_equal(b[16], 0x50);
	assert_int_equal(b[17], 2); /* rev 0 encodes as 2 */
	assert_int_equal(b[19], 4);
	assert_int_equal(b[20], 0x7f);
	assert_int_equal(b[21], 0xff);
	assert_int_equal(b[22], 0x40);
	assert_int_equal(b[23], 0x01);
}

static void decode_ok(const unsigned char *b, size_t n, enum iw_mpa_kind kind,
		      struct iw_mpa_params *p, const unsigned char **pd, uint16_t *pd_len)
{
	assert_int_equal(iw_mpa_decode(b, n, kind, p, pd, pd_len), (int)n);
}

static void test_roundtrip_every_flag_and_limit(void **state)
{
	static const uint16_t vals[] = { 0, 1, 16, 128, 0x2000, 0x3fff };
	unsigned char b[IW_MPA_FRAME_MAX], upd[300];

	(void)state;
	for (size_t i = 0; i < sizeof(upd); i++)
		upd[i] = (unsigned char)(i * 7 + 1);
	for (int kind = 0; kind < 2; kind++) {
		for (unsigned bits = 0; bits < 64; bits++) {
			for (size_t v = 0; v < sizeof(vals) / sizeof(vals[0]); v++) {
				struct iw_mpa_params p = {
					.flags = (uint8_t)((bits & 1 ? IW_MPA_FLAG_CRC : 0) |
							   (bits & 2 ? IW_MPA_FLAG_REJECT : 0)),
					.rev = 2, .enhanced = true,
					.ird = vals[v], .ord = vals[sizeof(vals) / sizeof(vals[0]) - 1 - v],
					.p2p = bits & 4, .rtr_zero_write = bits & 8,
					.rtr_zero_read = bits & 16, .rtr_zero_send = bits & 32,
				}, d;
				const unsigned char *pd;
				uint16_t pd_len;
				size_t ulen = (bits * 5 + v) % 253;
				int n = iw_mpa_encode(b, sizeof(b), (enum iw_mpa_kind)kind, &p,
						      upd, ulen);

				assert_int_equal(n, (int)(IW_MPA_HDR_LEN + 4 + ulen));
				decode_ok(b, (size_t)n, (enum iw_mpa_kind)kind, &d, &pd, &pd_len);
				if (kind == IW_MPA_REQUEST)
					p.flags &= (uint8_t)~IW_MPA_FLAG_REJECT;
				assert_int_equal(d.flags, p.flags);
				assert_int_equal(d.rev, 2);
				assert_true(d.enhanced);
				assert_int_equal(d.ird, p.ird);
				assert_int_equal(d.ord, p.ord);
				assert_int_equal(d.p2p, p.p2p);
				assert_int_equal(d.rtr_zero_write, p.rtr_zero_write);
				assert_int_equal(d.rtr_zero_read, p.rtr_zero_read);
				assert_int_equal(d.rtr_zero_send, p.rtr_zero_send);
				assert_int_equal(pd_len, ulen);
				assert_ptr_equal(pd, b + 24);
				assert_memory_equal(pd, upd, ulen);
			}
		}
	}
}

static void test_decode_revision_1_and_plain_revision_2(void **state)
{
	unsigned char b[IW_MPA_FRAME_MAX], big[508];
	struct iw_mpa_params p, d;
	const unsigned char *pd;
	uint16_t pd_len;
	int n;

	(void)state;
	/* Revision 1 (as rdma_cm builds it today): all of the PD is the consumer's. */
	n = iw_mpa_build(b, sizeof(b), IW_MPA_REPLY, IW_MPA_FLAG_CRC, "xyz", 3);
	decode_ok(b, (size_t)n, IW_MPA_REPLY, &d, &pd, &pd_len);
	assert_int_equal(d.rev, 1);
	assert_false(d.enhanced);
	assert_int_equal(d.flags, IW_MPA_FLAG_CRC);
	assert_int_equal(d.ird, 0);
	assert_int_equal(pd_len, 3);
	assert_ptr_equal(pd, b + 20);
	/* Revision 2 without the enhanced flag: no words, even with 2 bytes of PD. */
	p = (struct iw_mpa_params){ .rev = 2 };
	n = iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, "ab", 2);
	assert_int_equal(n, 22);
	assert_int_equal(b[16], 0);
	decode_ok(b, (size_t)n, IW_MPA_REQUEST, &d, &pd, &pd_len);
	assert_int_equal(d.rev, 2);
	assert_false(d.enhanced);
	assert_int_equal(pd_len, 2);
	/* Revision 1 encoded. */
	p = (struct iw_mpa_params){ .rev = 1, .flags = IW_MPA_FLAG_CRC };
	n = iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, NULL, 0);
	assert_int_equal(n, 20);
	assert_int_equal(b[17], 1);
	/* The largest PD there is: 512 in all. */
	p = (struct iw_mpa_params){ .enhanced = true };
	memset(big, 0x99, sizeof(big));
	n = iw_mpa_encode(b, sizeof(b), IW_MPA_REPLY, &p, big, sizeof(big));
	assert_int_equal(n, IW_MPA_FRAME_MAX);
	decode_ok(b, (size_t)n, IW_MPA_REPLY, &d, &pd, &pd_len);
	assert_int_equal(pd_len, 508);
	assert_int_equal(IW_MPA_PD_SIW_MAX, 256);
}

/* Every prefix of @b[0..@n) in a buffer of exactly that size: -EAGAIN; the whole: n. */
static void check_splits(const unsigned char *b, size_t n, enum iw_mpa_kind kind)
{
	struct iw_mpa_params d;
	const unsigned char *pd;
	uint16_t pd_len;

	for (size_t k = 0; k < n; k++) {
		unsigned char *part = malloc(k + 1);

		assert_non_null(part);
		memcpy(part, b, k);
		if (iw_mpa_decode(part, k, kind, &d, &pd, &pd_len) != -EAGAIN)
			fail_msg("frame of %zu bytes split at %zu: not -EAGAIN", n, k);
		free(part);
	}
	decode_ok(b, n, kind, &d, &pd, &pd_len);
}

static void test_every_split_point_needs_more(void **state)
{
	unsigned char b[IW_MPA_FRAME_MAX], upd[252];
	struct iw_mpa_params p = { .flags = IW_MPA_FLAG_CRC, .enhanced = true, .ird = 128,
				   .ord = 128 };
	int n;

	(void)state;
	memset(upd, 0x42, sizeof(upd));
	n = iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, upd, sizeof(upd));
	check_splits(b, (size_t)n, IW_MPA_REQUEST);
	n = iw_mpa_encode(b, sizeof(b), IW_MPA_REPLY, &p, NULL, 0);
	check_splits(b, (size_t)n, IW_MPA_REPLY);
	p.flags = IW_MPA_FLAG_REJECT;
	n = iw_mpa_encode(b, sizeof(b), IW_MPA_REPLY, &p, "no", 2);
	check_splits(b, (size_t)n, IW_MPA_REPLY);
	n = iw_mpa_build(b, sizeof(b), IW_MPA_REQUEST, 0, NULL, 0);
	check_splits(b, (size_t)n, IW_MPA_REQUEST);
}

/* @b (@n bytes) must be refused once byte @at is in, and need more before it. */
static void check_refused(const unsigned char *b, size_t n, enum iw_mpa_kind kind, size_t at,
			  const char *what)
{
	struct iw_mpa_params d;
	const unsigned char *pd;
	uint16_t pd_len;

	for (size_t k = 0; k <= n; k++) {
		int want = k > at ? -EPROTO : -EAGAIN;

		if (iw_mpa_decode(b, k, kind, &d, &pd, &pd_len) != want)
			fail_msg("%s, %zu bytes in: want %d", what, k, want);
	}
}

static void test_refusals(void **state)
{
	unsigned char good[64], b[64];
	struct iw_mpa_params p = { .flags = IW_MPA_FLAG_CRC, .enhanced = true, .ird = 4,
				   .ord = 4 };
	int n;

	(void)state;
	n = iw_mpa_encode(good, sizeof(good), IW_MPA_REQUEST, &p, "pd", 2);
	assert_int_equal(n, 26);
	for (size_t i = 0; i < 16; i++) {
		memcpy(b, good, (size_t)n);
		b[i] ^= 0x20;
		check_refused(b, (size_t)n, IW_MPA_REQUEST, i, "wrong key");
	}
	check_refused(good, (size_t)n, IW_MPA_REPLY, 9, "a request read as a reply");
	memcpy(b, good, (size_t)n);
	b[16] |= IW_MPA_FLAG_MARKERS;
	check_refused(b, (size_t)n, IW_MPA_REQUEST, 16, "markers");
	for (unsigned bit = 1; bit <= 8; bit <<= 1) {
		memcpy(b, good, (size_t)n);
		b[16] |= (unsigned char)bit;
		check_refused(b, (size_t)n, IW_MPA_REQUEST, 16, "reserved bit");
	}
	memcpy(b, good, (size_t)n);
	b[16] |= IW_MPA_FLAG_REJECT;
	check_refused(b, (size_t)n, IW_MPA_REQUEST, 16, "R in a request");
	static const unsigned char bad_revs[] = { 0, 3, 4, 0x80, 0xff };
	for (size_t i = 0; i < sizeof(bad_revs); i++) {
		memcpy(b, good, (size_t)n);
		b[17] = bad_revs[i];
		check_refused(b, (size_t)n, IW_MPA_REQUEST, 17, "revision");
	}
	memcpy(b, good, (size_t)n);
	b[17] = 1; /* the enhanced flag is reserved at revision 1 */
	check_refused(b, (size_t)n, IW_MPA_REQUEST, 17, "enhanced at revision 1");
	for (unsigned len = 0; len < 4; len++) {
		memcpy(b, good, (size_t)n);
		b[19] = (unsigned char)len;
		check_refused(b, (size_t)n, IW_MPA_REQUEST, 19, "enhanced with < 4 bytes of PD");
	}
	memcpy(b, good, (size_t)n);
	b[18] = 0x02, b[19] = 0x01; /* 513 */
	check_refused(b, (size_t)n, IW_MPA_REQUEST, 19, "PD_Length 513");
	b[18] = 0xff, b[19] = 0xff;
	check_refused(b, (size_t)n, IW_MPA_REQUEST, 19, "PD_Length 65535");
	/* A reject with markers, a reply to nothing: garbage after a good key. */
	memset(b, 0xff, sizeof(b));
	memcpy(b, rep_key, 16);
	check_refused(b, 20, IW_MPA_REPLY, 16, "garbage flags");
}

static void test_encode_refusals(void **state)
{
	unsigned char b[IW_MPA_FRAME_MAX + 8], src[IW_MPA_PD_MAX + 1];
	struct iw_mpa_params p = { .enhanced = true };

	(void)state;
	memset(src, 0x11, sizeof(src));
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, src, 509), -EINVAL);
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, src, 508),
			 IW_MPA_FRAME_MAX);
	assert_int_equal(iw_mpa_encode(b, 23, IW_MPA_REQUEST, &p, NULL, 0), -EINVAL);
	assert_int_equal(iw_mpa_encode(b, 24, IW_MPA_REQUEST, &p, NULL, 0), 24);
	p.ird = 0x4000;
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, NULL, 0), -EINVAL);
	p.ird = 0, p.ord = 0x4000;
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, NULL, 0), -EINVAL);
	p.ord = 0, p.rev = 1;
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, NULL, 0), -EINVAL);
	p.rev = 3;
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, NULL, 0), -EINVAL);
	p = (struct iw_mpa_params){ .rev = 1 };
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, src, 513), -EINVAL);
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, src, 512), 532);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_build_and_parse_as_before),
		cmocka_unit_test(test_encode_enhanced_byte_exact),
		cmocka_unit_test(test_roundtrip_every_flag_and_limit),
		cmocka_unit_test(test_decode_revision_1_and_plain_revision_2),
		cmocka_unit_test(test_every_split_point_needs_more),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_encode_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
