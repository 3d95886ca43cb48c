/*
 * libFuzzer target: arbitrary bytes into the RoCE v2 packet decoder and ICRC check
 * (src/wire/roce/rv_proto.c, rv_icrc.c), with the properties they must keep whatever the
 * input: nothing read past @size; a packet the decoder accepts has its headers, payload,
 * pad and ICRC exactly filling it; encoded again from what was decoded, its header is
 * the same bytes except those the decoder does not read (reserved bits: BTH byte 4's low
 * six and byte 8's low seven, the XRCETH's and DETH's reserved bytes, a CNP's reserved
 * sixteen); and the ICRC check, which solves for an IPv4 identification, answers without
 * fault on any length.
 *
 * Build and run: tests/fuzz/build.sh OUTDIR fuzz_rv_decode, then
 *   OUTDIR/fuzz_rv_decode -max_total_time=60
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "wire/roce/rv_proto.h"

static struct rv_icrc_ids ids;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct rv_path path = { .src = { 10, 0, 0, 1 }, .dst = { 10, 0, 0, 2 },
					     .sport = 1234, .dport = RV_PORT };
	uint8_t *copy = malloc(size ? size : 1), hdr[RV_HDR_MAX];
	const struct rv_op_info *op;
	struct rv_pkt p;
	int n;

	/* An exact-size copy: ASan sees any read past the datagram. */
	memcpy(copy, data, size);
	(void)rv_icrc_check(&path, copy, size, size % 2 ? &ids : NULL);
	if (rv_decode(copy, size, &p)) {
		free(copy);
		return 0;
	}
	op = &rv_op_info[p.opcode];
	CHECK(op->name);
	CHECK(p.hdr_len == op->hdr_len);
	CHECK(p.hdr_len + p.payload_len + p.pad + RV_ICRC == size);
	CHECK((op->flags & RV_PAYLOAD) || !p.payload_len);
	n = rv_encode(hdr, &p, p.payload_len);
	CHECK(n == (int)p.hdr_len);
	/* The pad the encoder writes follows from the payload's length; the decoder took
	 * the sender's. */
	hdr[1] = (uint8_t)((hdr[1] & ~0x30) | (copy[1] & 0x30));
	hdr[4] = (uint8_t)((hdr[4] & 0xc0) | (copy[4] & 0x3f));
	hdr[8] = (uint8_t)((hdr[8] & 0x80) | (copy[8] & 0x7f));
	if (op->flags & RV_H_XRCETH)
		hdr[RV_BTH] = copy[RV_BTH];
	if (op->flags & RV_H_DETH)
		hdr[RV_BTH + 4] = copy[RV_BTH + 4];
	if (op->flags & RV_H_CNP)
		memcpy(hdr + RV_BTH, copy + RV_BTH, RV_CNP_RSVD);
	CHECK(!memcmp(hdr, copy, (size_t)n));
	free(copy);
	return 0;
}
