/*
 * CRC32c for MPA (RFC 5044 §4.1) by ISA-L's crc32_iscsi (Debian libisal): the SSE4.2 /
 * PCLMUL code ISA-L picks for the CPU at run time (bench/crc32c.c measures it against the
 * crc32 instruction alone and a table). ISA-L takes and returns the CRC register without
 * the initial and final inversions; those are ours.
 */
#include "wire/iwarp/iw_proto.h"

#include <isa-l/crc.h>
#include <limits.h>

uint32_t iw_crc_init(void)
{
	return 0xffffffffu;
}

uint32_t iw_crc_update(uint32_t crc, const void *buf, size_t len)
{
	unsigned char *p = (unsigned char *)buf; /* ISA-L's prototype lacks const */

	while (len) {
		int n = len > (size_t)INT_MAX ? INT_MAX : (int)len;

		crc = crc32_iscsi(p, n, crc);
		p += n;
		len -= (size_t)n;
	}
	return crc;
}

uint32_t iw_crc_final(uint32_t crc)
{
	return ~crc;
}
