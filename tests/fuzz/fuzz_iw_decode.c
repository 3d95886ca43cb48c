/*
 * libFuzzer target: arbitrary bytes into the iWARP decoders (src/wire/iwarp), with the
 * properties each must keep whatever the input:
 *
 *   iw_hdr_decode (ext off and on)  a header it accepts re-encodes to the same bytes (the
 *       reserved bits aside, which the RFCs say are not checked) and every shorter prefix
 *       of it gives -EAGAIN; a refusal names a Terminate of a real layer; -EAGAIN only
 *       while fewer bytes than the opcode's header are in; nothing read past @len.
 *   iw_mpa_decode (request and reply; the flagged form and iw_conn's unflagged one)  a
 *       frame decode accepts, encoded again from what it decoded, is the same bytes; the
 *       two forms agree on a revision-1 frame (length and PD); every shorter prefix of an
 *       accepted frame is -EAGAIN.
 *   iw_term_encode  copies at most the offending headers, never past its buffer.
 *
 * Build and run: tests/fuzz/build.sh [OUTDIR], then
 *   OUTDIR/fuzz_iw_decode -max_total_time=60 tests/fuzz/corpus/iw_decode
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "wire/iwarp/iw_mpa.h"
#include "wire/iwarp/iw_proto.h"

/* The bits of a header the decoder does not look at (reserved). */
static void mask_reserved(unsigned char *b, int n, uint8_t op)
{
	b[2] &= (unsigned char)~0x3c;
	b[3] &= (unsigned char)~0x30;
	(void)n;
	if (iw_op_info[op].tagged)
		return;
	if (op != IW_OP_SEND_INV && op != IW_OP_SEND_SE_INV)
		memset(b + 4, 0, 4);
	if (op == IW_OP_TERMINATE) {
		b[22] &= 0xe0;
		b[23] = 0;
	}
	if (op == IW_OP_ATOMIC_REQ) {
		b[20] = b[21] = b[22] = 0;
		b[23] &= 0x0f;
	}
}

static void fuzz_hdr(const uint8_t *data, size_t size, bool ext)
{
	struct iw_hdr h, h2;
	struct iw_term t;
	unsigned char a[IW_HDR_MAX], b[IW_HDR_MAX];
	int r = iw_hdr_decode(data, size, ext, &h, &t);

	if (r == -EAGAIN) {
		CHECK(size < IW_HDR_MAX);
		return;
	}
	if (r == -EPROTO) {
		CHECK(t.layer <= IW_TERM_LLP);
		return;
	}
	CHECK(r > 0 && (size_t)r <= size && r <= IW_HDR_MAX);
	CHECK(h.opcode < IW_OP_MAX && iw_op_info[h.opcode].name);
	CHECK(r == iw_op_info[h.opcode].hdr_len);
	CHECK(ext || !iw_op_info[h.opcode].ext);
	CHECK(h.ulpdu_len == r - 2 + h.payload_len);
	CHECK(iw_op_info[h.opcode].has_payload || !h.payload_len);
	/* Encoded again: the same bytes, reserved bits aside. */
	CHECK(iw_hdr_encode(b, &h) == r);
	memcpy(a, data, (size_t)r);
	mask_reserved(a, r, h.opcode);
	mask_reserved(b, r, h.opcode);
	CHECK(!memcmp(a, b, (size_t)r));
	/* Any prefix: more is needed. */
	for (int k = 0; k < r; k++)
		CHECK(iw_hdr_decode(data, (size_t)k, ext, &h2, &t) == -EAGAIN);
}

static void fuzz_mpa(const uint8_t *data, size_t size, enum iw_mpa_kind kind, bool unflagged)
{
	struct iw_mpa_params p = { .words_unflagged = unflagged }, p2 = p;
	struct iw_mpa_params o = { .words_unflagged = !unflagged };
	const unsigned char *pd, *opd;
	uint16_t pd_len, opd_len;
	unsigned char *again;
	int r = iw_mpa_decode(data, size, kind, &p, &pd, &pd_len);

	if (r == -EAGAIN || r == -EPROTO) {
		CHECK(r == -EPROTO || size < IW_MPA_FRAME_MAX);
		return;
	}
	CHECK(r >= IW_MPA_HDR_LEN && r <= IW_MPA_FRAME_MAX && (size_t)r <= size);
	CHECK(pd >= data + IW_MPA_HDR_LEN && pd + pd_len == data + r);
	CHECK(p.rev == 1 || p.rev == 2);
	CHECK(p.words_unflagged == unflagged);
	CHECK(!unflagged || p.enhanced == (p.rev == 2));
	if (p.rev == 1) {
		/* The other form reads a revision-1 frame alike. */
		CHECK(iw_mpa_decode(data, size, kind, &o, &opd, &opd_len) == r);
		CHECK(opd == pd && opd_len == pd_len && !o.enhanced);
	}
	again = malloc((size_t)r);
	CHECK(again);
	CHECK(iw_mpa_encode(again, (size_t)r, kind, &p, pd, pd_len) == r);
	CHECK(!memcmp(again, data, (size_t)r));
	free(again);
	for (int k = 0; k < r; k++)
		CHECK(iw_mpa_decode(data, (size_t)k, kind, &p2, &pd, &pd_len) == -EAGAIN);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char out[IW_HDR_UNTAGGED + 4 + IW_TERM_HDRS_MAX];
	struct iw_term t = { IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_QN };
	int n;

	fuzz_hdr(data, size, false);
	fuzz_hdr(data, size, true);
	fuzz_mpa(data, size, IW_MPA_REQUEST, false);
	fuzz_mpa(data, size, IW_MPA_REPLY, false);
	fuzz_mpa(data, size, IW_MPA_REQUEST, true);
	fuzz_mpa(data, size, IW_MPA_REPLY, true);
	n = iw_term_encode(out, sizeof(out), &t, data, size);
	CHECK(n == -EINVAL || (n >= 24 && (size_t)n <= sizeof(out) && (size_t)n - 24 <= size));
	return 0;
}
