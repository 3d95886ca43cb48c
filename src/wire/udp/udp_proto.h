/*
 * The UDP wire's datagram: an InfiniBand UD packet as RoCE v2 puts it in a UDP payload
 * (IBA Annex A17): a BTH, a DETH, the immediate if there is one, the payload padded to 4
 * bytes, and 4 bytes of CRC. Only the two UD opcodes exist on this wire (SEND Only, SEND
 * Only with Immediate): it carries datagrams between hosts, nothing connected.
 *
 * The CRC is not RoCE v2's ICRC, which also covers the IP and UDP headers as the kernel
 * wrote them (a user-space sender cannot know the IP header's identification field):
 * it is the same CRC32 over the BTH (its variant fields masked as for the ICRC), the
 * DETH, the immediate and the padded payload. The decoder checks everything the bytes
 * alone can say; the receiver checks the rest (the QP, its P_Key and Q_Key).
 */
#ifndef UDP_PROTO_H
#define UDP_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

enum {
	UDP_OP_SEND_ONLY = 0x64,     /* IBA 9.2: UD (0b011), SEND Only */
	UDP_OP_SEND_ONLY_IMM = 0x65, /* ... with Immediate */
	UDP_BTH = 12,
	UDP_DETH = 8,
	UDP_IMM = 4,
	UDP_ICRC = 4,
	UDP_HDR_MAX = UDP_BTH + UDP_DETH + UDP_IMM,
	UDP_PAYLOAD_MAX = 4096, /* one packet of the path MTU: a UD message (IBA 10.7.2.2) */
	UDP_DGRAM_MAX = UDP_HDR_MAX + UDP_PAYLOAD_MAX + 3 + UDP_ICRC,
	UDP_DEFAULT_PORT_BASE = 16384, /* a QPN block's port: base + block */
};

/* One datagram's fields. */
struct udp_pkt {
	uint8_t opcode;    /* UDP_OP_SEND_ONLY or UDP_OP_SEND_ONLY_IMM */
	bool solicited;    /* BTH SE */
	uint16_t pkey;     /* the sender's P_Key */
	uint32_t dest_qpn; /* 24 bits */
	uint32_t psn;      /* 24 bits: the sender's count; UD receivers ignore it */
	uint32_t qkey;
	uint32_t src_qpn;  /* 24 bits */
	uint32_t imm;      /* network byte order, as struct ibv_wc's */
	uint32_t len;      /* payload bytes (decode: where it starts is payload_off) */
	uint32_t payload_off;
};

/* Writes the headers of @p (its len counts the payload) into @hdr; returns their length.
 * The datagram is hdr, the payload, udp_pad_of(len) zero bytes, then the CRC. */
size_t udp_encode_hdr(const struct udp_pkt *p, uint8_t hdr[UDP_HDR_MAX]);
static inline uint32_t udp_pad_of(uint32_t len)
{
	return (4 - (len & 3)) & 3;
}
/* The CRC of a datagram from its headers (of udp_encode_hdr), its payload @iov and its
 * padding; stored least significant byte first as RoCE's ICRC is. */
uint32_t udp_crc(const uint8_t *hdr, size_t hdr_len, const struct iovec *iov, int n_iov,
		 uint32_t pad);
/* Reads datagram @buf of @n bytes: 0 and *p, or -EBADMSG (malformed, wrong version or
 * opcode, bad padding, too long) or -EILSEQ (the CRC does not match). */
int udp_decode(const uint8_t *buf, size_t n, struct udp_pkt *p);

#endif
