/*
 * The RoCE v2 ICRC (IBA Annex A17.8, as Linux's rxe computes it): CRC-32 (the Ethernet
 * one: reflected 0x04c11db7, inverted in and out) over 8 bytes of ones standing for the
 * LRH, the IP header with its variable fields set to ones (IPv4: TOS, TTL, checksum;
 * IPv6: traffic class, flow label, hop limit), the UDP header with its checksum set to
 * ones, the BTH with its byte 4 (FECN, BECN, reserved) set to ones, and everything after
 * the BTH up to the ICRC; stored least significant byte first.
 *
 * The CRC is ISA-L's (crc32_gzip_refl, PCLMUL where the CPU has it, as the iWARP wire's
 * CRC32c); zlib's crc32_combine_gen/op give the one thing ISA-L lacks, what a bit flipped
 * early in a message does to its CRC n bytes later (rv_icrc_check).
 */
#include "wire/roce/rv_proto.h"

#include <isa-l/crc.h>
#include <string.h>
#include <zlib.h>

enum {
	LRH_ONES = 8,
	PSEUDO_V4 = LRH_ONES + 20 + 8,
	PSEUDO_V6 = LRH_ONES + 40 + 8,
	UDP_HDR = 8,
	V4_ID = LRH_ONES + 4,      /* the identification's offset in the pseudo-header */
	V4_FLAGS = LRH_ONES + 6,   /* flags (DF: 0x40) and fragment offset */
	SOLVED_BITS = 17,          /* the identification's 16 and DF */
};

/* The pseudo-header the ICRC starts with for a datagram of @len bytes (ICRC included);
 * returns its length. */
static size_t pseudo(uint8_t *h, const struct rv_path *path, size_t len)
{
	uint8_t *u;

	memset(h, 0xff, LRH_ONES);
	if (path->v6) {
		uint8_t *ip = h + LRH_ONES;
		size_t pl = UDP_HDR + len;

		ip[0] = 0x6f; /* version 6; class and flow label masked */
		ip[1] = ip[2] = ip[3] = 0xff;
		ip[4] = (uint8_t)(pl >> 8);
		ip[5] = (uint8_t)pl;
		ip[6] = 17;   /* UDP */
		ip[7] = 0xff; /* hop limit, masked */
		memcpy(ip + 8, path->src, 16);
		memcpy(ip + 24, path->dst, 16);
		u = ip + 40;
	} else {
		uint8_t *ip = h + LRH_ONES;
		size_t tl = 20 + UDP_HDR + len;

		ip[0] = 0x45;
		ip[1] = 0xff; /* TOS, masked */
		ip[2] = (uint8_t)(tl >> 8);
		ip[3] = (uint8_t)tl;
		/* identification: Linux's for a DF datagram not connected is 0, and the
		 * segments of one GSO send count up from it */
		ip[4] = (uint8_t)(path->ip_id >> 8);
		ip[5] = (uint8_t)path->ip_id;
		ip[6] = 0x40;      /* DF */
		ip[7] = 0;
		ip[8] = 0xff;      /* TTL, masked */
		ip[9] = 17;
		ip[10] = ip[11] = 0xff; /* checksum, masked */
		memcpy(ip + 12, path->src, 4);
		memcpy(ip + 16, path->dst, 4);
		u = ip + 20;
	}
	u[0] = (uint8_t)(path->sport >> 8);
	u[1] = (uint8_t)path->sport;
	u[2] = (uint8_t)(path->dport >> 8);
	u[3] = (uint8_t)path->dport;
	u[4] = (uint8_t)((UDP_HDR + len) >> 8);
	u[5] = (uint8_t)(UDP_HDR + len);
	u[6] = u[7] = 0xff; /* checksum, masked */
	return (size_t)(u + UDP_HDR - h);
}

static uint32_t crc_update(uint32_t crc, const void *buf, size_t len)
{
	return crc32_gzip_refl(crc, (unsigned char *)buf, len); /* (ISA-L's lacks const) */
}

/* The ICRC of @iov[0..n) after the pseudo-header @hdr (@hdr_len bytes). */
static uint32_t icrc_of(const uint8_t *hdr, size_t hdr_len, const struct iovec *iov, int n)
{
	uint8_t bth[RV_BTH];
	uint32_t crc = crc_update(0, hdr, hdr_len);
	size_t got = 0, off = 0;
	int i = 0;

	/* The BTH, wherever the iovecs cut it, with byte 4 masked. */
	while (i < n && got < RV_BTH) {
		size_t left = iov[i].iov_len - off;
		size_t take = left < RV_BTH - got ? left : RV_BTH - got;

		memcpy(bth + got, (const uint8_t *)iov[i].iov_base + off, take);
		got += take;
		off += take;
		if (off == iov[i].iov_len) {
			i++;
			off = 0;
		}
	}
	if (got == RV_BTH)
		bth[4] = 0xff;
	crc = crc_update(crc, bth, got);
	for (; i < n; i++, off = 0)
		crc = crc_update(crc, (const uint8_t *)iov[i].iov_base + off, iov[i].iov_len - off);
	return crc;
}

uint32_t rv_icrc(const struct rv_path *path, const struct iovec *iov, int n)
{
	uint8_t hdr[PSEUDO_V6];
	size_t len = RV_ICRC;

	for (int i = 0; i < n; i++)
		len += iov[i].iov_len;
	return icrc_of(hdr, pseudo(hdr, path, len), iov, n);
}

void rv_icrc_put(void *at, uint32_t icrc)
{
	uint8_t *p = at;

	p[0] = (uint8_t)icrc;
	p[1] = (uint8_t)(icrc >> 8);
	p[2] = (uint8_t)(icrc >> 16);
	p[3] = (uint8_t)(icrc >> 24);
}

uint32_t rv_icrc_get(const void *at)
{
	const uint8_t *p = at;

	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/*
 * For a datagram of @len bytes: what flipping each bit of the identification and DF does
 * to the ICRC, reduced so that each combination has a distinct top bit (a basis of the
 * ICRC differences some identification and DF can make).
 */
static void solve_basis(struct rv_icrc_ids *ids, size_t len)
{
	uint8_t zero[PSEUDO_V4] = { 0 }, one[PSEUDO_V4];
	uLong later = crc32_combine_gen((z_off_t)(len - RV_ICRC)); /* the bytes after it */
	uint32_t base = crc_update(0, zero, sizeof(zero));

	memset(ids->basis, 0, sizeof(ids->basis));
	for (int k = 0; k < SOLVED_BITS; k++) {
		uint32_t v;

		memset(one, 0, sizeof(one));
		if (k < 16)
			one[V4_ID + k / 8] = (uint8_t)(1u << (k % 8));
		else
			one[V4_FLAGS] = 0x40;
		/* The difference of two CRCs of equal length is linear in the difference of
		 * the messages: this bit's, carried through the datagram's bytes after it. */
		v = (uint32_t)crc32_combine_op(crc_update(0, one, sizeof(one)) ^ base, 0, later);
		for (int bit = 31; bit >= 0 && v; bit--) {
			if (!(v >> bit & 1))
				continue;
			if (!ids->basis[bit]) {
				ids->basis[bit] = v;
				break;
			}
			v ^= ids->basis[bit];
		}
	}
	ids->len = (uint32_t)len;
}

bool rv_icrc_check(const struct rv_path *path, const void *buf, size_t len,
		   struct rv_icrc_ids *ids)
{
	struct rv_icrc_ids local;
	struct iovec iov;
	uint32_t diff;

	if (len < RV_BTH + RV_ICRC)
		return false;
	iov = (struct iovec){ .iov_base = (void *)buf, .iov_len = len - RV_ICRC };
	diff = rv_icrc(path, &iov, 1) ^ rv_icrc_get((const uint8_t *)buf + len - RV_ICRC);
	if (!diff)
		return true;
	if (path->v6)
		return false;
	if (!ids) {
		ids = &local;
		ids->len = 0;
	}
	if (ids->len != len)
		solve_basis(ids, len);
	for (int bit = 31; bit >= 0 && diff; bit--)
		if (diff >> bit & 1 && ids->basis[bit])
			diff ^= ids->basis[bit];
	return !diff;
}
