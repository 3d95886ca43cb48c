/*
 * MPA connection setup frames (RFC 5044 §7.1): the request and reply a connection
 * starts with, before any FPDU. Building and parsing only; no sockets.
 *
 *   Key (16 bytes) | M C R Res(5 bits) | Rev (8) | PD_Length (16, big endian) | PD
 */
#ifndef IW_MPA_H
#define IW_MPA_H

#include <stddef.h>
#include <stdint.h>

enum {
	IW_MPA_KEY_LEN = 16,
	IW_MPA_HDR_LEN = 20,
	IW_MPA_PD_MAX = 512, /* RFC 5044 §7.1: private data is at most 512 octets */
	IW_MPA_FRAME_MAX = IW_MPA_HDR_LEN + IW_MPA_PD_MAX,
	IW_MPA_REV = 1,      /* RFC 5044 */
};

/* The flags octet (RFC 5044 §7.1). */
enum {
	IW_MPA_FLAG_MARKERS = 0x80, /* M: markers wanted */
	IW_MPA_FLAG_CRC = 0x40,     /* C: CRC wanted */
	IW_MPA_FLAG_REJECT = 0x20,  /* R: reply only, the connection is rejected */
};

enum iw_mpa_kind { IW_MPA_REQUEST, IW_MPA_REPLY };

struct iw_mpa_frame {
	enum iw_mpa_kind kind;
	uint8_t flags;
	uint8_t rev;
	uint16_t pd_len;
	const unsigned char *pd; /* points into the parsed buffer */
};

/* Writes one frame into @buf (at least IW_MPA_HDR_LEN + @pd_len bytes). Returns its
 * length, or -EINVAL if @pd_len is above IW_MPA_PD_MAX. */
int iw_mpa_build(void *buf, size_t cap, enum iw_mpa_kind kind, uint8_t flags,
		 const void *pd, size_t pd_len);

/* Parses the frame at the start of @buf (@len bytes received so far). Returns the
 * frame's total length when complete, -EAGAIN when more bytes are needed (never more
 * than IW_MPA_FRAME_MAX in all), -EPROTO when the bytes cannot be the frame @kind
 * (wrong key, reserved bits set, PD_Length above the limit, a request with R set). */
int iw_mpa_parse(const void *buf, size_t len, enum iw_mpa_kind kind, struct iw_mpa_frame *out);

#endif
