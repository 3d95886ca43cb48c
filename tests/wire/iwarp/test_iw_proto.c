/*
 * The iWARP FPDU codec (src/wire/iwarp/iw_proto.h) and its CRC32c (iw_crc.c), pure
 * functions on buffers: the opcode table entry by entry, against values written here
 * from RFC 5040 §4 / RFC 5041 §5 / RFC 7306 (not from the table itself); an encode ->
 * decode round trip of every opcode with every field of it distinct; byte-exact FPDUs
 * (whose CRCs tshark 4.0 calls "Good CRC32": tests/wire/iwarp/tshark_crc.sh feeds it
 * these very bytes, printed by `test_iw_proto --dump-frames`); every decode fault and
 * the Terminate layer/etype/ecode it gives; every split point of every opcode's header
 * (-EAGAIN); reserved bits ignored as the RFCs say; the Terminate encoder's copied
 * headers and flags; the encoder's refusals; pad and FPDU lengths; the RFC 3720 B.4
 * CRC32c vectors, on the wire least significant byte first, and in pieces.
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

#include "wire/iwarp/iw_mpa.h"
#include "wire/iwarp/iw_proto.h"

/* ---- the opcode table, entry by entry ---------------------------------------------- */

struct want_op {
	const char *name;
	bool tagged, has_payload, ext, single;
	uint8_t qn, hdr_len;
};

/* Header lengths count ULPDU_Length (2) + the DDP header (tagged 14, untagged 18) + the
 * RDMAP body: Read Request 28 (sink STag 4, sink TO 8, size 4, source STag 4, source
 * TO 8), Terminate control 4, Immediate Data 8, Atomic Request 52, Atomic Response 12. */
static const struct want_op want_ops[16] = {
	[0x0] = { "write", true, true, false, false, 0, 16 },
	[0x1] = { "read-req", false, false, false, true, 1, 48 },
	[0x2] = { "read-resp", true, true, false, false, 0, 16 },
	[0x3] = { "send", false, true, false, false, 0, 20 },
	[0x4] = { "send-inv", false, true, false, false, 0, 20 },
	[0x5] = { "send-se", false, true, false, false, 0, 20 },
	[0x6] = { "send-se-inv", false, true, false, false, 0, 20 },
	[0x7] = { "terminate", false, true, false, true, 2, 24 },
	[0x8] = { "imm", false, false, true, true, 0, 28 },
	[0x9] = { "imm-se", false, false, true, true, 0, 28 },
	[0xa] = { "atomic-req", false, false, true, true, 1, 72 },
	[0xb] = { "atomic-resp", false, false, true, true, 3, 32 },
};

static void test_op_table_entry_by_entry(void **state)
{
	(void)state;
	assert_int_equal(IW_OP_MAX, 16);
	for (unsigned op = 0; op < IW_OP_MAX; op++) {
		const struct iw_op_info *got = &iw_op_info[op];
		const struct want_op *w = &want_ops[op];

		if (!w->name) {
			assert_null(got->name);
			assert_string_equal(iw_op_name((uint8_t)op), "?");
			continue;
		}
		assert_non_null(got->name);
		assert_string_equal(got->name, w->name);
		assert_string_equal(iw_op_name((uint8_t)op), w->name);
		assert_int_equal(got->tagged, w->tagged);
		assert_int_equal(got->has_payload, w->has_payload);
		assert_int_equal(got->ext, w->ext);
		assert_int_equal(got->single, w->single);
		if (!w->tagged)
			assert_int_equal(got->qn, w->qn);
		assert_int_equal(got->hdr_len, w->hdr_len);
		assert_true(got->hdr_len >= IW_HDR_MIN && got->hdr_len <= IW_HDR_MAX);
	}
	assert_string_equal(iw_op_name(0x10), "?");
	assert_string_equal(iw_op_name(0xff), "?");
	/* The values the RFCs give (RFC 5040 §4.3 / §5.1, RFC 7306). */
	assert_int_equal(IW_OP_IMM, 0x8);
	assert_int_equal(IW_OP_IMM_SE, 0x9);
	assert_int_equal(IW_OP_ATOMIC_REQ, 0xa);
	assert_int_equal(IW_OP_ATOMIC_RESP, 0xb);
	assert_int_equal(IW_QN_ATOMIC_REQ, 1);
	assert_int_equal(IW_QN_ATOMIC_RESP, 3);
	assert_int_equal(IW_ATOMIC_FETCH_ADD, 0);
	assert_int_equal(IW_ATOMIC_CMP_SWAP, 2);
}

/* ---- round trips -------------------------------------------------------------------- */

/* A header of @op with every field of it set to a distinct value. */
static struct iw_hdr full_hdr(uint8_t op, uint32_t payload)
{
	struct iw_hdr h = { .opcode = op, .last = true };

	h.payload_len = iw_op_info[op].has_payload ? payload : 0;
	if (iw_op_info[op].tagged) {
		h.stag = 0x11223344;
		h.to = 0x0102030405060708ull;
		return h;
	}
	h.msn = 0x01020304;
	h.mo = iw_op_info[op].single ? 0 : 0x00001000;
	if (op == IW_OP_SEND_INV || op == IW_OP_SEND_SE_INV)
		h.inv_stag = 0xdeadbeef;
	switch (op) {
	case IW_OP_READ_REQ:
		h.sink_stag = 0xa1a2a3a4;
		h.sink_to = 0xb1b2b3b4b5b6b7b8ull;
		h.read_size = 0x00c0ffee;
		h.src_stag = 0xd1d2d3d4;
		h.src_to = 0xe1e2e3e4e5e6e7e8ull;
		break;
	case IW_OP_TERMINATE:
		h.term_layer = IW_TERM_DDP;
		h.term_etype = IW_ETYPE_DDP_UNTAGGED;
		h.term_ecode = IW_ECODE_DDP_U_INV_MSN_RANGE;
		h.term_hdr_len = h.term_hdr_ddp = true;
		h.payload_len = payload > IW_TERM_HDRS_MAX ? IW_TERM_HDRS_MAX : payload;
		break;
	case IW_OP_IMM:
	case IW_OP_IMM_SE:
		h.imm = 0x8877665544332211ull;
		break;
	case IW_OP_ATOMIC_REQ:
		h.atomic_op = IW_ATOMIC_CMP_SWAP;
		h.atomic_req_id = 0x55667788;
		h.atomic_stag = 0x99aabbcc;
		h.atomic_to = 0x0000700000000008ull;
		h.add_swap = 0x1111111111111111ull;
		h.add_swap_mask = 0x2222222222222222ull;
		h.compare = 0x3333333333333333ull;
		h.compare_mask = 0x4444444444444444ull;
		break;
	case IW_OP_ATOMIC_RESP:
		h.atomic_req_id = 0x55667788;
		h.orig_value = 0xfedcba9876543210ull;
		break;
	default:
		break;
	}
	return h;
}

static void check_same(const struct iw_hdr *a, const struct iw_hdr *b)
{
	assert_int_equal(a->opcode, b->opcode);
	assert_int_equal(a->last, b->last);
	assert_int_equal(a->payload_len, b->payload_len);
	assert_int_equal(a->stag, b->stag);
	assert_true(a->to == b->to);
	assert_int_equal(a->inv_stag, b->inv_stag);
	assert_int_equal(a->msn, b->msn);
	assert_int_equal(a->mo, b->mo);
	assert_int_equal(a->sink_stag, b->sink_stag);
	assert_true(a->sink_to == b->sink_to);
	assert_int_equal(a->read_size, b->read_size);
	assert_int_equal(a->src_stag, b->src_stag);
	assert_true(a->src_to == b->src_to);
	assert_int_equal(a->atomic_op, b->atomic_op);
	assert_int_equal(a->atomic_req_id, b->atomic_req_id);
	assert_int_equal(a->atomic_stag, b->atomic_stag);
	assert_true(a->atomic_to == b->atomic_to);
	assert_true(a->add_swap == b->add_swap);
	assert_true(a->add_swap_mask == b->add_swap_mask);
	assert_true(a->compare == b->compare);
	assert_true(a->compare_mask == b->compare_mask);
	assert_true(a->orig_value == b->orig_value);
	assert_true(a->imm == b->imm);
	assert_int_equal(a->term_layer, b->term_layer);
	assert_int_equal(a->term_etype, b->term_etype);
	assert_int_equal(a->term_ecode, b->term_ecode);
	assert_int_equal(a->term_hdr_len, b->term_hdr_len);
	assert_int_equal(a->term_hdr_ddp, b->term_hdr_ddp);
	assert_int_equal(a->term_hdr_rdmap, b->term_hdr_rdmap);
}

static void test_roundtrip_every_opcode(void **state)
{
	static const uint32_t payloads[] = { 0, 1, 3, 4, 1000, IW_ULPDU_MAX - 18 };

	(void)state;
	for (uint8_t op = 0; op < IW_OP_MAX; op++) {
		if (!iw_op_info[op].name)
			continue;
		for (size_t i = 0; i < sizeof(payloads) / sizeof(payloads[0]); i++) {
			struct iw_hdr h = full_hdr(op, payloads[i]), d;
			struct iw_term term = { 0xee, 0xee, 0xee };
			unsigned char buf[IW_HDR_MAX + 8];
			int n;

			if (h.payload_len + iw_op_info[op].hdr_len - 2u > IW_ULPDU_MAX)
				continue;
			memset(buf, 0x5a, sizeof(buf));
			n = iw_hdr_encode(buf, &h);
			assert_int_equal(n, iw_op_info[op].hdr_len);
			assert_int_equal(buf[n], 0x5a); /* nothing written past the header */
			/* Reserved fields go as zero (RFC 5041 §5.2, RFC 5040 §4.8), whatever
			 * the buffer held. */
			if (!iw_op_info[op].tagged && op != IW_OP_SEND_INV && op != IW_OP_SEND_SE_INV)
				assert_memory_equal(buf + 4, "\0\0\0\0", 4);
			if (op == IW_OP_TERMINATE)
				assert_int_equal(buf[23], 0);
			n = iw_hdr_decode(buf, (size_t)n, true, &d, &term);
			assert_int_equal(n, iw_op_info[op].hdr_len);
			assert_int_equal(d.tagged, iw_op_info[op].tagged);
			assert_int_equal(d.ulpdu_len, n - 2 + h.payload_len);
			if (!iw_op_info[op].tagged)
				assert_int_equal(d.qn, iw_op_info[op].qn);
			check_same(&h, &d);
			assert_int_equal(term.layer, 0xee); /* untouched on success */
		}
		/* Not last, where an opcode may be segmented. */
		if (!iw_op_info[op].single) {
			struct iw_hdr h = full_hdr(op, 8), d;
			struct iw_term term;
			unsigned char buf[IW_HDR_MAX];

			h.last = false;
			assert_int_equal(iw_hdr_encode(buf, &h), iw_op_info[op].hdr_len);
			assert_int_equal(iw_hdr_decode(buf, sizeof(buf), false, &d, &term),
					 iw_op_info[op].hdr_len);
			assert_false(d.last);
		}
	}
}

static void test_fields_of_other_opcodes_decode_as_zero(void **state)
{
	unsigned char buf[IW_HDR_MAX];
	struct iw_hdr h = full_hdr(IW_OP_SEND, 0), d;
	struct iw_term term;

	(void)state;
	assert_int_equal(iw_hdr_encode(buf, &h), 20);
	memset(&d, 0xff, sizeof(d));
	assert_int_equal(iw_hdr_decode(buf, sizeof(buf), false, &d, &term), 20);
	assert_int_equal(d.stag, 0);
	assert_true(d.to == 0);
	assert_int_equal(d.inv_stag, 0);
	assert_int_equal(d.read_size, 0);
	assert_true(d.imm == 0);
	assert_int_equal(d.term_ecode, 0);
}

/* ---- byte-exact FPDUs ------------------------------------------------------------- */

struct vector {
	const char *name;
	const char *hex; /* the whole FPDU: length, header, payload, pad, CRC */
};

/* Each checked by tshark 4.0.17 ("Good CRC32", fields as named) through
 * tests/wire/iwarp/tshark_crc.sh. */
static const struct vector vectors[] = {
	/* last Send, MSN 1, "hello": 0x4143 as siw sends it */
	{ "send", "0017414300000000000000000000000100000000"
		  "68656c6c6f000000b990b10c" },
	/* last Write to STag 0x11223344 offset 0x0102030405060708, "abc" */
	{ "write", "0011c14011223344010203040506070861626300ca5192e6" },
	/* Read Request, MSN 1: sink 0x0a0b0c0d @0x1000, 4096 bytes, source 0x01020304
	 * @0x2000 */
	{ "read-req", "002e414100000000000000010000000100000000"
		      "0a0b0c0d00000000000010000000100001020304000000000000200030599f1d" },
	/* last Read Response to 0x0a0b0c0d @0x1000, "data" */
	{ "read-resp", "0012c1420a0b0c0d000000000000100064617461f5a59f54" },
	/* last Send with Invalidate of 0xdeadbeef, MSN 2, "x" */
	{ "send-inv", "00134144deadbeef000000000000000200000000"
		      "78000000ee08e404" },
	/* Atomic Request (RFC 7306) FetchAdd 5 at 0x0a0b0c0d @0x3000, id 7, MSN 2 */
	{ "atomic-req", "0046414a000000000000000100000002000000000000000000000007"
			"0a0b0c0d0000000000003000000000000000000500000000000000000000000000"
			"00000000000000000000001d72b225" },
	/* Terminate DDP / untagged / no buffer (0x02), M and D, the Send's header */
	{ "terminate", "002a4147000000000000000200000001000000001202c000"
		       "00174143000000000000000000000001000000009b27256c" },
};

static size_t unhex(const char *s, unsigned char *out)
{
	size_t n = 0;

	for (; s[0] && s[1]; s += 2) {
		unsigned v;

		assert_int_equal(sscanf(s, "%2x", &v), 1);
		out[n++] = (unsigned char)v;
	}
	return n;
}

static uint32_t crc_of(const void *p, size_t n)
{
	return iw_crc_final(iw_crc_update(iw_crc_init(), p, n));
}

/* Finishes an FPDU whose header and payload are in @b[0..@n): pad and CRC. */
static size_t finish(unsigned char *b, size_t n)
{
	while ((n & 3) != 0)
		b[n++] = 0;
	iw_crc_put(b + n, crc_of(b, n));
	return n + 4;
}

static size_t build_vector(const char *name, unsigned char *b)
{
	struct iw_hdr h = { .last = true };
	const char *payload = "";
	int n;

	if (!strcmp(name, "send")) {
		h.opcode = IW_OP_SEND, h.msn = 1, payload = "hello";
	} else if (!strcmp(name, "write")) {
		h.opcode = IW_OP_WRITE, h.stag = 0x11223344, h.to = 0x0102030405060708ull;
		payload = "abc";
	} else if (!strcmp(name, "read-req")) {
		h.opcode = IW_OP_READ_REQ, h.msn = 1, h.sink_stag = 0x0a0b0c0d;
		h.sink_to = 0x1000, h.read_size = 4096, h.src_stag = 0x01020304;
		h.src_to = 0x2000;
	} else if (!strcmp(name, "read-resp")) {
		h.opcode = IW_OP_READ_RESP, h.stag = 0x0a0b0c0d, h.to = 0x1000, payload = "data";
	} else if (!strcmp(name, "send-inv")) {
		h.opcode = IW_OP_SEND_INV, h.msn = 2, h.inv_stag = 0xdeadbeef, payload = "x";
	} else if (!strcmp(name, "atomic-req")) {
		h.opcode = IW_OP_ATOMIC_REQ, h.msn = 2, h.atomic_op = IW_ATOMIC_FETCH_ADD;
		h.atomic_req_id = 7, h.atomic_stag = 0x0a0b0c0d, h.atomic_to = 0x3000;
		h.add_swap = 5;
	} else {
		unsigned char bad[IW_HDR_MAX];
		struct iw_term t = { IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_NO_BUF };

		assert_string_equal(name, "terminate");
		assert_int_equal(build_vector("send", bad), 32);
		n = iw_term_encode(b, 128, &t, bad, 20);
		assert_int_equal(n, 24 + 20);
		return finish(b, (size_t)n);
	}
	h.payload_len = (uint32_t)strlen(payload);
	n = iw_hdr_encode(b, &h);
	assert_int_equal(n, iw_op_info[h.opcode].hdr_len);
	memcpy(b + n, payload, h.payload_len);
	return finish(b, (size_t)n + h.payload_len);
}

static void test_byte_exact_fpdus(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
		unsigned char want[256], got[256];
		size_t nw = unhex(vectors[i].hex, want), ng;
		struct iw_hdr d;
		struct iw_term term;
		int n;

		memset(got, 0xa5, sizeof(got));
		ng = build_vector(vectors[i].name, got);
		assert_int_equal(ng, nw);
		assert_memory_equal(got, want, nw);
		/* And the other way: its header decodes, its length is the FPDU's. */
		n = iw_hdr_decode(want, nw, true, &d, &term);
		assert_true(n > 0);
		assert_int_equal(iw_fpdu_len(d.ulpdu_len), nw);
		assert_int_equal(iw_crc_get(want + nw - 4), crc_of(want, nw - 4));
	}
}

/* ---- decode faults ----------------------------------------------------------------- */

struct fault_case {
	const char *what;
	uint8_t op;
	bool ext;
	int at, value; /* byte @at set to @value (-1: none) */
	int at2, value2;
	uint8_t layer, etype, ecode;
};

static const struct fault_case faults[] = {
	{ "untagged DDP version 0", IW_OP_SEND, false, 2, 0x40, -1, 0,
	  IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_VERSION },
	{ "untagged DDP version 2", IW_OP_READ_REQ, false, 2, 0x42, -1, 0,
	  IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_VERSION },
	{ "tagged DDP version 3", IW_OP_WRITE, false, 2, 0xc3, -1, 0,
	  IW_TERM_DDP, IW_ETYPE_DDP_TAGGED, IW_ECODE_DDP_T_INV_VERSION },
	{ "tagged DDP version 0", IW_OP_READ_RESP, false, 2, 0xc0, -1, 0,
	  IW_TERM_DDP, IW_ETYPE_DDP_TAGGED, IW_ECODE_DDP_T_INV_VERSION },
	{ "RDMAP version 0", IW_OP_SEND, false, 3, 0x03, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_VERSION },
	{ "RDMAP version 2", IW_OP_WRITE, false, 3, 0x80, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_VERSION },
	{ "opcode 0xc", IW_OP_SEND, true, 3, 0x4c, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE },
	{ "opcode 0xf", IW_OP_SEND, true, 3, 0x4f, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE },
	{ "Immediate Data not negotiated", IW_OP_IMM, false, -1, 0, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE },
	{ "Immediate Data SE not negotiated", IW_OP_IMM_SE, false, -1, 0, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE },
	{ "Atomic Request not negotiated", IW_OP_ATOMIC_REQ, false, -1, 0, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE },
	{ "Atomic Response not negotiated", IW_OP_ATOMIC_RESP, false, -1, 0, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE },
	{ "Write without T", IW_OP_WRITE, false, 2, 0x41, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE },
	{ "Send with T", IW_OP_SEND, false, 2, 0xc1, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE },
	{ "Send on queue 1", IW_OP_SEND, false, 11, 1, -1, 0,
	  IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_QN },
	{ "Send on queue 2^24", IW_OP_SEND_SE, false, 8, 1, -1, 0,
	  IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_QN },
	{ "Read Request on queue 0", IW_OP_READ_REQ, false, 11, 0, -1, 0,
	  IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_QN },
	{ "Terminate on queue 1", IW_OP_TERMINATE, false, 11, 1, -1, 0,
	  IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_QN },
	{ "Atomic Response on queue 1", IW_OP_ATOMIC_RESP, true, 11, 1, -1, 0,
	  IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_QN },
	{ "Atomic Request on queue 3", IW_OP_ATOMIC_REQ, true, 11, 3, -1, 0,
	  IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_QN },
	{ "Read Request at offset 4", IW_OP_READ_REQ, false, 19, 4, -1, 0,
	  IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_MO },
	{ "Immediate Data at offset 2^24", IW_OP_IMM, true, 16, 1, -1, 0,
	  IW_TERM_DDP, IW_ETYPE_DDP_UNTAGGED, IW_ECODE_DDP_U_INV_MO },
	{ "Read Request not last", IW_OP_READ_REQ, false, 2, 0x01, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_UNSPECIFIED },
	{ "Atomic Request not last", IW_OP_ATOMIC_REQ, true, 2, 0x01, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_UNSPECIFIED },
	{ "Read Request with payload", IW_OP_READ_REQ, false, 0, 0, 1, 46 + 4,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_UNSPECIFIED },
	{ "Atomic Response with payload", IW_OP_ATOMIC_RESP, true, 0, 0, 1, 30 + 8,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_UNSPECIFIED },
	{ "Write shorter than its header", IW_OP_WRITE, false, 0, 0, 1, 13,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_UNSPECIFIED },
	{ "Send of length 0", IW_OP_SEND, false, 0, 0, 1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_UNSPECIFIED },
	{ "Read Request shorter than its body", IW_OP_READ_REQ, false, 0, 0, 1, 45,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_UNSPECIFIED },
	{ "Terminate with 49 bytes of headers", IW_OP_TERMINATE, false, 0, 0, 1, 22 + 49,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_UNSPECIFIED },
	{ "atomic operation 3", IW_OP_ATOMIC_REQ, true, 23, 3, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE },
	{ "atomic operation 0xf", IW_OP_ATOMIC_REQ, true, 23, 0xf, -1, 0,
	  IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_OP, IW_ECODE_RDMAP_INV_OPCODE },
};

static void test_each_decode_fault_and_its_terminate(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
		const struct fault_case *f = &faults[i];
		struct iw_hdr h = full_hdr(f->op, 0), d;
		struct iw_term term = { 0xee, 0xee, 0xee };
		unsigned char buf[IW_HDR_MAX + 64];
		int n, r;

		memset(buf, 0, sizeof(buf));
		n = iw_hdr_encode(buf, &h);
		assert_true(n > 0);
		if (f->at >= 0)
			buf[f->at] = (unsigned char)f->value;
		if (f->at2 >= 0)
			buf[f->at2] = (unsigned char)f->value2;
		r = iw_hdr_decode(buf, sizeof(buf), f->ext, &d, &term);
		if (r != -EPROTO || term.layer != f->layer || term.etype != f->etype ||
		    term.ecode != f->ecode)
			fail_msg("%s: got %d, terminate %u/%u/0x%02x, want -EPROTO %u/%u/0x%02x",
				 f->what, r, term.layer, term.etype, term.ecode, f->layer,
				 f->etype, f->ecode);
	}
}

static void test_reserved_bits_are_not_checked(void **state)
{
	unsigned char buf[IW_HDR_MAX];
	struct iw_hdr h = full_hdr(IW_OP_SEND, 4), d;
	struct iw_term term;

	(void)state;
	assert_int_equal(iw_hdr_encode(buf, &h), 20);
	/* RFC 5041 §5.1 / RFC 5040 §4.2: reserved, zero on transmit, not checked on
	 * receive (the DDP Rsvd bits, the RDMAP RSV bits, a plain Send's RsvdULP). */
	buf[2] |= 0x3c;
	buf[3] |= 0x30;
	memset(buf + 4, 0x77, 4);
	assert_int_equal(iw_hdr_decode(buf, sizeof(buf), false, &d, &term), 20);
	assert_int_equal(d.opcode, IW_OP_SEND);
	assert_int_equal(d.inv_stag, 0);
	assert_int_equal(d.msn, h.msn);

	h = full_hdr(IW_OP_ATOMIC_REQ, 0);
	assert_int_equal(iw_hdr_encode(buf, &h), 72);
	buf[20] = 0xff, buf[21] = 0xff, buf[22] = 0xff, buf[23] |= 0xf0;
	assert_int_equal(iw_hdr_decode(buf, sizeof(buf), true, &d, &term), 72);
	assert_int_equal(d.atomic_op, IW_ATOMIC_CMP_SWAP);
}

static void test_every_split_point_needs_more(void **state)
{
	(void)state;
	for (uint8_t op = 0; op < IW_OP_MAX; op++) {
		struct iw_hdr h, d;
		struct iw_term term;
		unsigned char full[IW_HDR_MAX];
		int n;

		if (!iw_op_info[op].name)
			continue;
		h = full_hdr(op, 100);
		n = iw_hdr_encode(full, &h);
		assert_int_equal(n, iw_op_info[op].hdr_len);
		for (int k = 0; k < n; k++) {
			/* The bytes alone, in a buffer of exactly k (ASan sees any read past). */
			unsigned char *part = malloc((size_t)k + 1);

			assert_non_null(part);
			memcpy(part, full, (size_t)k);
			if (iw_hdr_decode(part, (size_t)k, true, &d, &term) != -EAGAIN)
				fail_msg("%s split at %d: not -EAGAIN", iw_op_name(op), k);
			free(part);
		}
		assert_int_equal(iw_hdr_decode(full, (size_t)n, true, &d, &term), n);
	}
}

/* ---- the Terminate encoder --------------------------------------------------------- */

static void test_terminate_copies_the_offending_headers(void **state)
{
	unsigned char bad[IW_HDR_MAX + 16], out[128];
	struct iw_term t = { IW_TERM_RDMAP, IW_ETYPE_RDMAP_REMOTE_PROT,
			     IW_ECODE_RDMAP_INV_STAG };
	struct iw_hdr h = full_hdr(IW_OP_READ_REQ, 0), d;
	struct iw_term term;
	int n;

	(void)state;
	/* A Read Request: its length, DDP header and 28 bytes of RDMAP header (M D R). */
	assert_int_equal(iw_hdr_encode(bad, &h), 48);
	memset(out, 0xa5, sizeof(out));
	n = iw_term_encode(out, sizeof(out), &t, bad, 48);
	assert_int_equal(n, 24 + 48);
	assert_int_equal(iw_hdr_decode(out, (size_t)n, false, &d, &term), 24);
	assert_int_equal(d.opcode, IW_OP_TERMINATE);
	assert_true(d.last);
	assert_int_equal(d.qn, IW_QN_TERMINATE);
	assert_int_equal(d.msn, 1);
	assert_int_equal(d.mo, 0);
	assert_int_equal(d.payload_len, 48);
	assert_int_equal(d.term_layer, IW_TERM_RDMAP);
	assert_int_equal(d.term_etype, IW_ETYPE_RDMAP_REMOTE_PROT);
	assert_int_equal(d.term_ecode, IW_ECODE_RDMAP_INV_STAG);
	assert_true(d.term_hdr_len && d.term_hdr_ddp && d.term_hdr_rdmap);
	assert_memory_equal(out + 24, bad, 48);
	assert_int_equal(out[20], 0x01); /* layer 0 | etype 1 */
	assert_int_equal(out[21], 0x00);
	assert_int_equal(out[22], 0xe0); /* M D R */
	assert_int_equal(out[23], 0x00);

	/* A tagged Write with payload: its 16 bytes only (M D, no R). */
	h = full_hdr(IW_OP_WRITE, 64);
	assert_int_equal(iw_hdr_encode(bad, &h), 16);
	memset(bad + 16, 0x33, 16);
	t = (struct iw_term){ IW_TERM_DDP, IW_ETYPE_DDP_TAGGED, IW_ECODE_DDP_T_BASE_BOUNDS };
	n = iw_term_encode(out, sizeof(out), &t, bad, 32);
	assert_int_equal(n, 24 + 16);
	assert_int_equal(out[20], 0x11);
	assert_int_equal(out[21], 0x01);
	assert_int_equal(out[22], 0xc0);
	assert_memory_equal(out + 24, bad, 16);

	/* A Send: 20 bytes; none: no flags, no payload. */
	h = full_hdr(IW_OP_SEND, 0);
	assert_int_equal(iw_hdr_encode(bad, &h), 20);
	assert_int_equal(iw_term_encode(out, sizeof(out), &t, bad, 20), 44);
	t = (struct iw_term){ IW_TERM_RDMAP, IW_ETYPE_RDMAP_LOCAL_CATA, 0xff };
	n = iw_term_encode(out, sizeof(out), &t, NULL, 0);
	assert_int_equal(n, 24);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[1], 22);
	assert_int_equal(out[20], 0x00);
	assert_int_equal(out[21], 0xff);
	assert_int_equal(out[22], 0x00);

	/* Refusals: too small a buffer, a header cut short. */
	assert_int_equal(iw_term_encode(out, 23, &t, NULL, 0), -EINVAL);
	assert_int_equal(iw_term_encode(out, 24 + 19, &t, bad, 20), -EINVAL);
	assert_int_equal(iw_term_encode(out, sizeof(out), &t, bad, 19), -EINVAL);
	assert_int_equal(iw_term_encode(out, sizeof(out), &t, bad, 3), -EINVAL);
}

/* ---- encoder refusals, lengths ------------------------------------------------------ */

static void test_encode_refusals(void **state)
{
	unsigned char buf[IW_HDR_MAX];
	struct iw_hdr h;

	(void)state;
	for (unsigned op = 0xc; op < 0x100; op++) {
		h = (struct iw_hdr){ .opcode = (uint8_t)op, .last = true };
		assert_int_equal(iw_hdr_encode(buf, &h), -EINVAL);
	}
	h = full_hdr(IW_OP_READ_REQ, 0);
	h.payload_len = 1;
	assert_int_equal(iw_hdr_encode(buf, &h), -EINVAL); /* payload where none */
	h = full_hdr(IW_OP_READ_REQ, 0);
	h.last = false;
	assert_int_equal(iw_hdr_encode(buf, &h), -EINVAL); /* single segment, not last */
	h = full_hdr(IW_OP_TERMINATE, 0);
	h.mo = 4;
	assert_int_equal(iw_hdr_encode(buf, &h), -EINVAL);
	h.mo = 0;
	h.payload_len = IW_TERM_HDRS_MAX + 1;
	assert_int_equal(iw_hdr_encode(buf, &h), -EINVAL);
	h = full_hdr(IW_OP_SEND, 0);
	h.payload_len = IW_ULPDU_MAX - 18 + 1;
	assert_int_equal(iw_hdr_encode(buf, &h), -EINVAL); /* one byte too long */
	h.payload_len = IW_ULPDU_MAX - 18;
	assert_int_equal(iw_hdr_encode(buf, &h), 20);
	assert_int_equal(buf[0], 0xff);
	assert_int_equal(buf[1], 0xff);
	h.payload_len = UINT32_MAX;
	assert_int_equal(iw_hdr_encode(buf, &h), -EINVAL);
	h = full_hdr(IW_OP_ATOMIC_REQ, 0);
	h.atomic_op = 3;
	assert_int_equal(iw_hdr_encode(buf, &h), -EINVAL);
}

static void test_pad_and_fpdu_length(void **state)
{
	(void)state;
	/* RFC 5044 §4.1: pad the ULPDU (with its 2-byte length) to a multiple of 4. */
	assert_int_equal(iw_pad(14), 0);
	assert_int_equal(iw_pad(15), 3);
	assert_int_equal(iw_pad(16), 2);
	assert_int_equal(iw_pad(17), 1);
	assert_int_equal(iw_pad(18), 0);
	for (uint32_t u = 0; u <= IW_ULPDU_MAX; u++) {
		uint32_t f = iw_fpdu_len(u);

		if (f % 4 || f != 2 + u + iw_pad(u) + 4 || iw_pad(u) > 3)
			fail_msg("ULPDU %u: FPDU %u", u, f);
	}
}

/* ---- CRC32c ---------------------------------------------------------------------------- */

static void test_crc_rfc3720_vectors(void **state)
{
	/* RFC 3720 B.4: the CRC of each, and its bytes on the wire (LSB first). */
	static const unsigned char scsi_read[48] = {
		0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
		0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	unsigned char b[32], wire[4];

	(void)state;
	memset(b, 0, sizeof(b));
	assert_int_equal(crc_of(b, 32), 0x8a9136aa);
	iw_crc_put(wire, crc_of(b, 32));
	assert_memory_equal(wire, "\xaa\x36\x91\x8a", 4);
	assert_int_equal(iw_crc_get(wire), 0x8a9136aa);
	memset(b, 0xff, sizeof(b));
	assert_int_equal(crc_of(b, 32), 0x62a8ab43);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)i;
	assert_int_equal(crc_of(b, 32), 0x46dd794e);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)(31 - i);
	assert_int_equal(crc_of(b, 32), 0x113fdb5c);
	assert_int_equal(crc_of(scsi_read, 48), 0xd9963a56);
	assert_int_equal(crc_of(b, 0), 0);
}

static void test_crc_in_pieces_equals_whole(void **state)
{
	enum { N = 70000 };
	unsigned char *b = malloc(N);
	uint32_t whole;

	(void)state;
	assert_non_null(b);
	for (size_t i = 0; i < N; i++)
		b[i] = (unsigned char)(i * 131 + 7);
	whole = crc_of(b, N);
	for (size_t cut = 0; cut < N; cut += 997) {
		uint32_t c = iw_crc_init();

		c = iw_crc_update(c, b, cut);
		c = iw_crc_update(c, b + cut, N - cut);
		assert_int_equal(iw_crc_final(c), whole);
	}
	/* Byte by byte over an unaligned start. */
	{
		uint32_t c = iw_crc_init();

		for (size_t i = 1; i < 200; i++)
			c = iw_crc_update(c, b + i, 1);
		assert_int_equal(iw_crc_final(c), crc_of(b + 1, 199));
	}
	free(b);
}

/* ---- the frames tshark checks ---------------------------------------------------------- */

/* Prints, one a line as side:hex, an MPA request and reply asking for CRC (revision 1,
 * or 2 with the RFC 6581 words when @rev2), then every vector above. */
static int dump_frames(bool rev2)
{
	unsigned char b[IW_MPA_FRAME_MAX];
	int n;

	for (int side = 0; side < 2; side++) {
		enum iw_mpa_kind kind = side ? IW_MPA_REPLY : IW_MPA_REQUEST;

		if (rev2) {
			struct iw_mpa_params p = { .flags = IW_MPA_FLAG_CRC, .rev = 2,
						   .enhanced = true, .ird = 16, .ord = 16 };

			n = iw_mpa_encode(b, sizeof(b), kind, &p, "sv", 2);
		} else {
			struct iw_mpa_params p = { .flags = IW_MPA_FLAG_CRC, .rev = 1 };

			n = iw_mpa_encode(b, sizeof(b), kind, &p, NULL, 0);
		}
		if (n < 0)
			return 1;
		printf("%c:", side ? 's' : 'c');
		for (int i = 0; i < n; i++)
			printf("%02x", b[i]);
		printf("\n");
	}
	for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++)
		printf("c:%s\n", vectors[i].hex);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_op_table_entry_by_entry),
		cmocka_unit_test(test_roundtrip_every_opcode),
		cmocka_unit_test(test_fields_of_other_opcodes_decode_as_zero),
		cmocka_unit_test(test_byte_exact_fpdus),
		cmocka_unit_test(test_each_decode_fault_and_its_terminate),
		cmocka_unit_test(test_reserved_bits_are_not_checked),
		cmocka_unit_test(test_every_split_point_needs_more),
		cmocka_unit_test(test_terminate_copies_the_offending_headers),
		cmocka_unit_test(test_encode_refusals),
		cmocka_unit_test(test_pad_and_fpdu_length),
		cmocka_unit_test(test_crc_rfc3720_vectors),
		cmocka_unit_test(test_crc_in_pieces_equals_whole),
	};

	if (argc > 1 && !strcmp(argv[1], "--dump-frames"))
		return dump_frames(argc > 2 && !strcmp(argv[2], "rev2"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
