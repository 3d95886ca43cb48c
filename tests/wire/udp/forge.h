/*
 * Forging RoCE v2 datagrams for the hostile-sender tests (tests/wire/udp): the ICRC of
 * IBA Annex A17.8 computed here with zlib, not by the wire's encoder (ISA-L), from the
 * IPv4 addresses and ports of a datagram a plain UDP socket sends with don't-fragment
 * (identification 0).
 */
#ifndef FORGE_H
#define FORGE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

/* Where the forged datagrams go: the RoCE v2 port (SOFTVERBS_ROCE_PORT) on loopback. */
static inline struct sockaddr_in forge_port(void)
{
	const char *roce = getenv("SOFTVERBS_ROCE_PORT");

	return (struct sockaddr_in){ .sin_family = AF_INET,
				     .sin_port = htons((uint16_t)(roce ? atoi(roce) : 4791)),
				     .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
}

/* A socket that forges from IPv4 address @addr, a port of its own (in *@from), don't
 * fragment (ID 0: the ICRC knows both). -1 if it cannot. */
static inline int forge_socket(struct sockaddr_in *from, const char *addr)
{
	int dont = IP_PMTUDISC_DO, s = socket(AF_INET, SOCK_DGRAM, 0);
	socklen_t len = sizeof(*from);

	*from = (struct sockaddr_in){ .sin_family = AF_INET };
	if (s < 0 || inet_pton(AF_INET, addr, &from->sin_addr) != 1 ||
	    setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &dont, sizeof(dont)) ||
	    bind(s, (struct sockaddr *)from, sizeof(*from)) ||
	    getsockname(s, (struct sockaddr *)from, &len)) {
		if (s >= 0)
			close(s);
		return -1;
	}
	return s;
}

static inline void forge_put32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
}

/* The ICRC of datagram @out (@n bytes before the ICRC) from @from to @to: CRC-32 over
 * ones for the LRH, the IPv4 header with TOS, TTL and checksum as ones, the UDP header
 * with its checksum as ones, the BTH with byte 4 as ones, and the rest. */
static inline uint32_t forge_icrc(const struct sockaddr_in *from, const struct sockaddr_in *to,
				  const uint8_t *out, size_t n)
{
	uint8_t ph[8 + 20 + 8], bth[12];
	uint16_t tl = (uint16_t)(28 + n + 4), ul = (uint16_t)(8 + n + 4);
	uLong crc;

	memset(ph, 0xff, 8);
	ph[8] = 0x45;
	ph[9] = 0xff;
	ph[10] = (uint8_t)(tl >> 8);
	ph[11] = (uint8_t)tl;
	ph[12] = ph[13] = 0;
	ph[14] = 0x40;
	ph[15] = 0;
	ph[16] = 0xff;
	ph[17] = 17;
	ph[18] = ph[19] = 0xff;
	memcpy(ph + 20, &from->sin_addr, 4);
	memcpy(ph + 24, &to->sin_addr, 4);
	memcpy(ph + 28, &from->sin_port, 2);
	memcpy(ph + 30, &to->sin_port, 2);
	ph[32] = (uint8_t)(ul >> 8);
	ph[33] = (uint8_t)ul;
	ph[34] = ph[35] = 0xff;
	memcpy(bth, out, 12);
	bth[4] = 0xff;
	crc = crc32(0, ph, sizeof(ph));
	crc = crc32(crc, bth, 12);
	return (uint32_t)crc32(crc, out + 12, (uInt)(n - 12));
}

/* Appends the ICRC (least significant byte first, as rxe) after @n bytes of @out. */
static inline size_t forge_seal(const struct sockaddr_in *from, const struct sockaddr_in *to,
				uint8_t *out, size_t n, int crc_off)
{
	uint32_t crc = forge_icrc(from, to, out, n) + (uint32_t)crc_off;

	for (int i = 0; i < 4; i++)
		out[n + (size_t)i] = (uint8_t)(crc >> (8 * i));
	return n + 4;
}

#endif
