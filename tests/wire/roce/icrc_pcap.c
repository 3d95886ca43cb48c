/*
 * icrc_pcap FILE: checks the ICRC of every RoCE v2 packet (IPv4, UDP to port 4791) of a
 * classic pcap capture (Ethernet, as `tshark -F pcap` writes it) against the IP header
 * the packet really had: its identification as the kernel set it, which the ICRC
 * covers. A receiver that sees the header (Linux's rxe, a NIC) checks exactly this; a
 * softverbs receiver solves for the identification and would not notice a sender that
 * guessed it wrong. Prints the counts; exits 0 when every packet's ICRC is right, 1 if
 * one is not, 2 if the file cannot be read.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "wire/roce/rv_proto.h"

static uint32_t get32(const uint8_t *p, int swap)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return swap ? __builtin_bswap32(v) : v;
}

int main(int argc, char **argv)
{
	static uint8_t pkt[65536 + 64];
	uint8_t gh[24], rh[16];
	unsigned long n = 0, bad = 0, not_df = 0, ids = 0;
	int swap;
	FILE *f;

	if (argc != 2 || !(f = fopen(argv[1], "rb"))) {
		fprintf(stderr, "usage: icrc_pcap FILE.pcap (classic pcap, Ethernet)\n");
		return 2;
	}
	if (fread(gh, 1, sizeof(gh), f) != sizeof(gh) ||
	    (get32(gh, 0) != 0xa1b2c3d4 && get32(gh, 0) != 0xd4c3b2a1)) {
		fprintf(stderr, "%s: not a classic pcap file\n", argv[1]);
		return 2;
	}
	swap = get32(gh, 0) == 0xd4c3b2a1;
	if (get32(gh + 20, swap) != 1) {
		fprintf(stderr, "%s: not Ethernet (link type %u)\n", argv[1], get32(gh + 20, swap));
		return 2;
	}
	while (fread(rh, 1, sizeof(rh), f) == sizeof(rh)) {
		uint32_t cap = get32(rh + 8, swap), ihl, len;
		const uint8_t *ip = pkt + 14, *udp;
		struct rv_path path = { .v6 = false };
		struct iovec iov;

		if (cap > sizeof(pkt) || fread(pkt, 1, cap, f) != cap)
			break;
		/* IPv4 (ethertype 0x0800), UDP, to port 4791, not a fragment */
		if (cap < 14 + 20 + 8 || pkt[12] != 0x08 || pkt[13] != 0x00 || (ip[0] >> 4) != 4)
			continue;
		ihl = (ip[0] & 15u) * 4;
		udp = ip + ihl;
		if (ip[9] != 17 || cap < 14 + ihl + 8 || ((ip[6] & 0x3f) | ip[7]) ||
		    (udp[2] << 8 | udp[3]) != RV_PORT)
			continue;
		len = (uint32_t)(udp[4] << 8 | udp[5]);
		if (len < 8 + RV_BTH + RV_ICRC || 14 + ihl + len > cap)
			continue;
		n++;
		if (!(ip[6] & 0x40)) {
			not_df++; /* (rv_icrc's view: DF set) */
			continue;
		}
		memcpy(path.src, ip + 12, 4);
		memcpy(path.dst, ip + 16, 4);
		path.sport = (uint16_t)(udp[0] << 8 | udp[1]);
		path.dport = RV_PORT;
		path.ip_id = (uint16_t)(ip[4] << 8 | ip[5]);
		ids += path.ip_id != 0;
		iov = (struct iovec){ .iov_base = (void *)(udp + 8), .iov_len = len - 8 - RV_ICRC };
		if (rv_icrc(&path, &iov, 1) != rv_icrc_get(udp + len - RV_ICRC))
			bad++;
	}
	fclose(f);
	printf("packets %lu identification-nonzero %lu bad-icrc %lu not-df %lu\n", n, ids, bad,
	       not_df);
	return bad || not_df ? 1 : 0;
}
