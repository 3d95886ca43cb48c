/*
 * libFuzzer target: arbitrary bytes into the UDP wire's datagram decoder
 * (src/wire/udp/udp_proto.c), with the properties it must keep whatever the input:
 * nothing read past @size; a datagram it accepts has a payload inside it, of at most
 * one packet of the MTU; and encoded again from what it decoded (headers, the payload,
 * zero padding, the CRC) it is the same bytes, except those the decoder does not read
 * (the FECN/BECN byte, the BTH's A bit and reserved bits, the DETH's reserved byte).
 *
 * Build and run: tests/fuzz/build.sh OUTDIR fuzz_udp_decode, then
 *   OUTDIR/fuzz_udp_decode -max_total_time=60
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "wire/udp/udp_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy = malloc(size ? size : 1), again[UDP_DGRAM_MAX], hdr[UDP_HDR_MAX];
	struct udp_pkt p;
	struct iovec iov;
	size_t n;
	uint32_t pad, crc;

	/* An exact-size copy: ASan sees any read past the datagram. */
	memcpy(copy, data, size);
	if (udp_decode(copy, size, &p)) {
		free(copy);
		return 0;
	}
	CHECK(p.len <= UDP_PAYLOAD_MAX);
	CHECK(p.payload_off + p.len + UDP_ICRC <= size);
	n = udp_encode_hdr(&p, hdr);
	CHECK(n == p.payload_off);
	pad = udp_pad_of(p.len);
	CHECK(n + p.len + pad + UDP_ICRC == size);
	/* What the decoder does not read (the FECN/BECN byte, the A bit and reserved bits
	 * before the PSN, the DETH's reserved byte) is taken as it came; the CRC covers the
	 * last two. */
	hdr[4] = copy[4];
	hdr[8] = copy[8];
	hdr[16] = copy[16];
	memcpy(again, hdr, n);
	memcpy(again + n, copy + n, p.len);
	memset(again + n + p.len, 0, pad);
	iov = (struct iovec){ again + n, p.len };
	crc = udp_crc(hdr, n, &iov, 1, pad);
	for (int i = 0; i < 4; i++)
		again[size - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
	CHECK(!memcmp(again, copy, size));
	free(copy);
	return 0;
}
