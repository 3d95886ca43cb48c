/* The UDP wire's datagram codec (udp_proto.h). */
#include "wire/udp/udp_proto.h"

#include <errno.h>
#include <isa-l/crc.h>
#include <string.h>

static void put32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static bool has_imm(uint8_t opcode)
{
	return opcode == UDP_OP_SEND_ONLY_IMM;
}

size_t udp_encode_hdr(const struct udp_pkt *p, uint8_t hdr[UDP_HDR_MAX])
{
	size_t n = UDP_BTH + UDP_DETH;

	/* BTH: opcode; SE, M (0), pad count, TVer (0); P_Key; the FECN/BECN byte (0),
	 * destination QP; A (0), PSN. */
	hdr[0] = p->opcode;
	hdr[1] = (uint8_t)((p->solicited ? 0x80 : 0) | udp_pad_of(p->len) << 4);
	hdr[2] = (uint8_t)(p->pkey >> 8);
	hdr[3] = (uint8_t)p->pkey;
	put32(&hdr[4], p->dest_qpn & 0xffffff);
	put32(&hdr[8], p->psn & 0xffffff);
	/* DETH: Q_Key; reserved byte, source QP. */
	put32(&hdr[12], p->qkey);
	put32(&hdr[16], p->src_qpn & 0xffffff);
	if (has_imm(p->opcode)) {
		memcpy(&hdr[n], &p->imm, UDP_IMM); /* already in network order */
		n += UDP_IMM;
	}
	return n;
}

/* The BTH's variant byte (FECN, BECN, reserved) counts as all ones, as for the ICRC. */
static uint32_t crc_hdr(const uint8_t *hdr, size_t len)
{
	uint8_t masked[UDP_HDR_MAX];

	memcpy(masked, hdr, len);
	masked[4] = 0xff;
	return crc32_gzip_refl(0, masked, len);
}

uint32_t udp_crc(const uint8_t *hdr, size_t hdr_len, const struct iovec *iov, int n_iov,
		 uint32_t pad)
{
	static const uint8_t zeros[3];
	uint32_t crc = crc_hdr(hdr, hdr_len);

	for (int i = 0; i < n_iov; i++)
		crc = crc32_gzip_refl(crc, iov[i].iov_base, iov[i].iov_len);
	return pad ? crc32_gzip_refl(crc, zeros, pad) : crc;
}

int udp_decode(const uint8_t *buf, size_t n, struct udp_pkt *p)
{
	size_t hdr;
	uint32_t pad, body, crc;
	struct iovec iov;

	if (n < UDP_BTH + UDP_DETH + UDP_ICRC || n > UDP_DGRAM_MAX)
		return -EBADMSG;
	if ((buf[0] != UDP_OP_SEND_ONLY && buf[0] != UDP_OP_SEND_ONLY_IMM) ||
	    (buf[1] & 0x4f) != 0) /* M and TVer are 0 */
		return -EBADMSG;
	hdr = UDP_BTH + UDP_DETH + (has_imm(buf[0]) ? UDP_IMM : 0);
	pad = (buf[1] >> 4) & 3;
	if (n < hdr + pad + UDP_ICRC || (n - hdr - UDP_ICRC) % 4)
		return -EBADMSG;
	body = (uint32_t)(n - hdr - UDP_ICRC); /* payload and padding */
	if (body - pad > UDP_PAYLOAD_MAX)
		return -EBADMSG;
	for (uint32_t i = 0; i < pad; i++)
		if (buf[hdr + body - 1 - i])
			return -EBADMSG;
	iov = (struct iovec){ .iov_base = (void *)(buf + hdr), .iov_len = body - pad };
	crc = udp_crc(buf, hdr, &iov, 1, pad);
	if (crc != ((uint32_t)buf[n - 4] | (uint32_t)buf[n - 3] << 8 |
		    (uint32_t)buf[n - 2] << 16 | (uint32_t)buf[n - 1] << 24))
		return -EILSEQ;
	*p = (struct udp_pkt){
		.opcode = buf[0],
		.solicited = buf[1] & 0x80,
		.pkey = (uint16_t)(buf[2] << 8 | buf[3]),
		.dest_qpn = get32(&buf[4]) & 0xffffff,
		.psn = get32(&buf[8]) & 0xffffff,
		.qkey = get32(&buf[12]),
		.src_qpn = get32(&buf[16]) & 0xffffff,
		.len = body - pad,
		.payload_off = (uint32_t)hdr,
	};
	if (has_imm(buf[0]))
		memcpy(&p->imm, &buf[UDP_BTH + UDP_DETH], UDP_IMM);
	return 0;
}
