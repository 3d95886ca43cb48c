/*
 * MPA connection setup frames (src/wire/iwarp/iw_mpa.h), iw_mpa_encode/iw_mpa_decode:
 * revision 1 with raw private data as rdma_cm's same-host handshake sends it (a request,
 * a reject; bytes pinned); RFC 6581's enhanced setup (revision 2, the IRD/ORD words and
 * their flags, byte-exact, round trips of every flag and of the 14-bit limits, the words
 * stripped from the consumer's private data); the unflagged form of iw_conn's port (the
 * words without the enhanced flag, bytes pinned, the flag refused); revision 1 and
 * revision 2 without the words decoded; every split point of several frames (-EAGAIN, in
 * a buffer of exactly that many bytes); and the refusals: wrong key at each byte,
 * markers, each reserved bit, the enhanced flag at revision 1, revisions 0 and 3+, R in a
 * request, PD_Length above 512, an enhanced frame with fewer than 4 bytes of private
 * data; the encoder's refusals.
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

/* Decodes in the form @p->words_unflagged says. */
static void decode_ok_form(const unsigned char *b, size_t n, enum iw_mpa_kind kind,
			   struct iw_mpa_params *p, const unsigned char **pd, uint16_t *pd_len)
{
	assert_int_equal(iw_mpa_decode(b, n, kind, p, pd, pd_len), (int)n);
}

/* Decodes in the flagged form (RFC 6581 as siw reads it). */
static void decode_ok(const unsigned char *b, size_t n, enum iw_mpa_kind kind,
		      struct iw_mpa_params *p, const unsigned char **pd, uint16_t *pd_len)
{
	p->words_unflagged = false;
	decode_ok_form(b, n, kind, p, pd, pd_len);
}

/* Every prefix of @b[0..@n) in a buffer of exactly that size: -EAGAIN; the whole: n. */
static void check_splits_form(const unsigned char *b, size_t n, enum iw_mpa_kind kind,
			      bool unflagged)
{
	struct iw_mpa_params d = { .words_unflagged = unflagged };
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
	decode_ok_form(b, n, kind, &d, &pd, &pd_len);
}

static void check_splits(const unsigned char *b, size_t n, enum iw_mpa_kind kind)
{
	check_splits_form(b, n, kind, false);
}

/* @b (@n bytes) must be refused once byte @at is in, and need more before it. */
static void check_refused_form(const unsigned char *b, size_t n, enum iw_mpa_kind kind,
			       size_t at, bool unflagged, const char *what)
{
	struct iw_mpa_params d = { .words_unflagged = unflagged };
	const unsigned char *pd;
	uint16_t pd_len;

	for (size_t k = 0; k <= n; k++) {
		int want = k > at ? -EPROTO : -EAGAIN;

		if (iw_mpa_decode(b, k, kind, &d, &pd, &pd_len) != want)
			fail_msg("%s, %zu bytes in: want %d", what, k, want);
	}
}

static void check_refused(const unsigned char *b, size_t n, enum iw_mpa_kind kind, size_t at,
			  const char *what)
{
	check_refused_form(b, n, kind, at, false, what);
}

static void test_revision_1_raw_as_rdma_cm_sends_it(void **state)
{
	unsigned char b[IW_MPA_FRAME_MAX];
	struct iw_mpa_params p = { .rev = IW_MPA_REV, .flags = IW_MPA_FLAG_CRC |
				   IW_MPA_FLAG_REJECT | IW_MPA_FLAG_MARKERS }, d = { 0 };
	const unsigned char *pd;
	uint16_t pd_len;
	int n;

	(void)state;
	n = iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, "abc", 3);
	assert_int_equal(n, 23);
	assert_memory_equal(b, req_key, 16);
	assert_int_equal(b[16], IW_MPA_FLAG_CRC); /* R dropped from a request, M never */
	assert_int_equal(b[17], 1);
	assert_int_equal(b[18], 0);
	assert_int_equal(b[19], 3);
	assert_memory_equal(b + 20, "abc", 3);
	assert_int_equal(iw_mpa_decode(b, (size_t)n, IW_MPA_REQUEST, &d, &pd, &pd_len), 23);
	assert_int_equal(d.flags, IW_MPA_FLAG_CRC);
	assert_int_equal(d.rev, 1);
	assert_false(d.enhanced);
	assert_int_equal(pd_len, 3);
	assert_ptr_equal(pd, b + 20);
	assert_int_equal(iw_mpa_decode(b, (size_t)n - 1, IW_MPA_REQUEST, &d, &pd, &pd_len),
			 -EAGAIN);
	assert_int_equal(iw_mpa_decode(b, (size_t)n, IW_MPA_REPLY, &d, &pd, &pd_len), -EPROTO);
	/* A reject: R in a reply, nothing else. */
	p = (struct iw_mpa_params){ .rev = IW_MPA_REV, .flags = IW_MPA_FLAG_REJECT };
	n = iw_mpa_encode(b, sizeof(b), IW_MPA_REPLY, &p, NULL, 0);
	assert_int_equal(n, 20);
	assert_memory_equal(b, rep_key, 16);
	assert_int_equal(b[16], IW_MPA_FLAG_REJECT);
	assert_int_equal(b[17], 1);
	assert_int_equal(b[19], 0);
	assert_int_equal(iw_mpa_decode(b, 20, IW_MPA_REPLY, &d, &pd, &pd_len), 20);
	assert_int_equal(d.flags, IW_MPA_FLAG_REJECT);
	assert_int_equal(pd_len, 0);
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REPLY, &p, b, 513), -EINVAL);
}

/* iw_conn's port: the words at revision 2 without the enhanced flag, as it has always
 * sent them; decoded in that form only, the flag refused there. */
static void test_words_unflagged(void **state)
{
	static const unsigned char want[] = {
		'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'p', ' ', 'F', 'r', 'a', 'm', 'e',
		0x60,       /* C | R, no enhanced flag */
		0x02,       /* revision 2 */
		0x00, 0x06, /* PD_Length: 4 + 2 */
		0x40, 0x05, /* IRD word: RTR as zero-length Send, IRD 5 */
		0xbf, 0xff, /* ORD word: RTR as zero-length Write, ORD 0x3fff */
		'o', 'k',
	};
	struct iw_mpa_params p = { .flags = IW_MPA_FLAG_CRC | IW_MPA_FLAG_REJECT, .rev = 2,
				   .enhanced = true, .words_unflagged = true, .ird = 5,
				   .ord = 0x3fff, .rtr_zero_send = true, .rtr_zero_write = true };
	struct iw_mpa_params d = { .words_unflagged = true };
	unsigned char b[64];
	const unsigned char *pd;
	uint16_t pd_len;
	int n;

	(void)state;
	n = iw_mpa_encode(b, sizeof(b), IW_MPA_REPLY, &p, "ok", 2);
	assert_int_equal(n, (int)sizeof(want));
	assert_memory_equal(b, want, sizeof(want));
	decode_ok_form(b, (size_t)n, IW_MPA_REPLY, &d, &pd, &pd_len);
	assert_true(d.words_unflagged); /* left as it was */
	assert_true(d.enhanced);
	assert_int_equal(d.flags, IW_MPA_FLAG_CRC | IW_MPA_FLAG_REJECT);
	assert_int_equal(d.ird, 5);
	assert_int_equal(d.ord, 0x3fff);
	assert_true(d.rtr_zero_send && d.rtr_zero_write && !d.rtr_zero_read && !d.p2p);
	assert_int_equal(pd_len, 2);
	assert_ptr_equal(pd, b + 24);
	/* The same bytes read in the flagged form: no words, all of the PD raw. */
	d = (struct iw_mpa_params){ 0 };
	decode_ok_form(b, (size_t)n, IW_MPA_REPLY, &d, &pd, &pd_len);
	assert_false(d.enhanced);
	assert_int_equal(pd_len, 6);
	check_splits_form(b, (size_t)n, IW_MPA_REPLY, true);
	/* The flag, at either revision, is a reserved bit in this form. */
	b[16] |= IW_MPA_FLAG_ENHANCED;
	check_refused_form(b, (size_t)n, IW_MPA_REPLY, 16, true, "enhanced flag, unflagged form");
	b[17] = 1;
	check_refused_form(b, (size_t)n, IW_MPA_REPLY, 16, true, "enhanced flag at revision 1");
	/* Revision 2 with fewer than 4 bytes of PD cannot hold the words. */
	memcpy(b, want, sizeof(want));
	b[19] = 3;
	check_refused_form(b, (size_t)n, IW_MPA_REPLY, 19, true, "words in < 4 bytes");
	/* Revision 1 in this form: no words. */
	p = (struct iw_mpa_params){ .rev = 1, .words_unflagged = true };
	n = iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, "ab", 2);
	assert_int_equal(n, 22);
	assert_int_equal(b[16], 0);
	d = (struct iw_mpa_params){ .words_unflagged = true };
	decode_ok_form(b, (size_t)n, IW_MPA_REQUEST, &d, &pd, &pd_len);
	assert_false(d.enhanced);
	assert_int_equal(pd_len, 2);
	/* The encoder keeps the form readable: the words exactly at revision 2. */
	p = (struct iw_mpa_params){ .rev = 2, .words_unflagged = true };
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, NULL, 0), -EINVAL);
	p = (struct iw_mpa_params){ .words_unflagged = true };
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, NULL, 0), -EINVAL);
	p.enhanced = true;
	assert_int_equal(iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, NULL, 0), 24);
	assert_int_equal(b[16], 0);
	assert_int_equal(b[17], 2);
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
				}, d = { 0 };
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
	struct iw_mpa_params p = { .rev = IW_MPA_REV, .flags = IW_MPA_FLAG_CRC }, d = { 0 };
	const unsigned char *pd;
	uint16_t pd_len;
	int n;

	(void)state;
	/* Revision 1 (as rdma_cm's same-host handshake sends it): all of the PD is the
	 * consumer's. */
	n = iw_mpa_encode(b, sizeof(b), IW_MPA_REPLY, &p, "xyz", 3);
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
	p = (struct iw_mpa_params){ .rev = IW_MPA_REV };
	n = iw_mpa_encode(b, sizeof(b), IW_MPA_REQUEST, &p, NULL, 0);
	check_splits(b, (size_t)n, IW_MPA_REQUEST);
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
		cmocka_unit_test(test_revision_1_raw_as_rdma_cm_sends_it),
		cmocka_unit_test(test_words_unflagged),
		cmocka_unit_test(test_encode_enhanced_byte_exact),
		cmocka_unit_test(test_roundtrip_every_flag_and_limit),
		cmocka_unit_test(test_decode_revision_1_and_plain_revision_2),
		cmocka_unit_test(test_every_split_point_needs_more),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_encode_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
