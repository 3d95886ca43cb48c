/*
 * MPA connection setup frames (RFC 5044 §7.1, RFC 6581): the request and reply a
 * connection starts with, before any FPDU. The one encoder and decoder of them, beneath
 * the one exchange (iw_xchg.h), which every caller goes through: rdma_cm's iWARP frames
 * and its same-host handshake (lib/rdmacm), the verbs-only setup port (iw_conn.c).
 * Encoding and decoding only; no sockets.
 *
 *   Key (16 bytes) | M C R Res(5 bits) | Rev (8) | PD_Length (16, big endian) | PD
 */
#ifndef IW_MPA_H
#define IW_MPA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	IW_MPA_KEY_LEN = 16,
	IW_MPA_HDR_LEN = 20,
	IW_MPA_PD_MAX = 512, /* RFC 5044 §7.1: private data is at most 512 octets */
	IW_MPA_FRAME_MAX = IW_MPA_HDR_LEN + IW_MPA_PD_MAX,
	IW_MPA_REV = 1,      /* RFC 5044 */
	IW_MPA_REV2 = 2,     /* RFC 6581: enhanced connection setup */
	IW_MPA_ENH_LEN = 4,  /* RFC 6581: the IRD and ORD words at the front of the PD */
	IW_MPA_IRD_ORD_MAX = 0x3fff, /* 14 bits each */
	/* Linux siw drops a connection whose private data (the 4 enhanced bytes included)
	 * is above 256 bytes: what a peer that may be siw can be sent. */
	IW_MPA_PD_SIW_MAX = 256,
};

/* The flags octet (RFC 5044 §7.1). */
enum {
	IW_MPA_FLAG_MARKERS = 0x80, /* M: markers wanted */
	IW_MPA_FLAG_CRC = 0x40,     /* C: CRC wanted */
	IW_MPA_FLAG_REJECT = 0x20,  /* R: reply only, the connection is rejected */
	IW_MPA_FLAG_ENHANCED = 0x10, /* RFC 6581 (revision 2): IRD/ORD words in the PD */
	IW_MPA_FLAG_RSVD = 0x0f,    /* reserved (siw uses 0x08 for its own GSO: never set) */
};

/* The enhanced words (RFC 6581 §5, big endian): IRD word, then ORD word. */
enum {
	IW_MPA_IRD_P2P = 0x8000,       /* peer-to-peer: an RTR message follows setup */
	IW_MPA_IRD_RTR_SEND = 0x4000,  /* RTR may be a zero-length Send */
	IW_MPA_ORD_RTR_WRITE = 0x8000, /* RTR may be a zero-length RDMA Write */
	IW_MPA_ORD_RTR_READ = 0x4000,  /* RTR may be a zero-length RDMA Read */
};

enum iw_mpa_kind { IW_MPA_REQUEST, IW_MPA_REPLY };

/*
 * A frame's parameters as encoded or decoded. @flags holds C and R as on the wire (M is
 * never asked for; the enhanced flag is @enhanced); @rev 1 or 2 (0 to encode: 2).
 * @enhanced: RFC 6581's IRD and ORD words are at the front of the private data (revision
 * 2 only); they carry @ird/@ord (14 bits each), @p2p and the RTR kinds offered (a
 * request) or chosen (a reply). Revision 1, or 2 without them: the PD is the consumer's
 * (rdma_cm's same-host handshake sends revision 1 so, its trailer in the PD).
 *
 * @words_unflagged is the form of softverbs' own setup port (iw_conn.h), and an input to
 * both calls: every revision-2 frame has the words and none has the enhanced flag (the
 * softverbs on other hosts read them so). iw_mpa_encode then leaves the flag out (and
 * wants @enhanced exactly at revision 2); iw_mpa_decode reads the words of any revision-2
 * frame, refuses the flag as a reserved bit, and leaves this field as it found it.
 */
struct iw_mpa_params {
	uint8_t flags;
	uint8_t rev;
	bool enhanced;
	bool words_unflagged;
	uint16_t ird, ord;
	bool p2p;
	bool rtr_zero_write, rtr_zero_read, rtr_zero_send;
};

/*
 * Writes a frame of @kind into @buf: revision @p->rev (0: 2), with the 4 bytes of IRD/ORD
 * words before @user_pd when @p->enhanced (revision 2 only), and the enhanced flag then
 * unless @p->words_unflagged. Markers are never asked for (M is cleared), nor R in a
 * request (a reply with R is a reject); reserved bits are zero. Returns its length, or
 * -EINVAL (revision not 1 or 2, enhanced at revision 1, @p->words_unflagged without
 * @p->enhanced at revision 2, IRD or ORD above 14 bits, private data in all above
 * IW_MPA_PD_MAX, @cap too small). A peer that may be siw must not be sent more than
 * IW_MPA_PD_SIW_MAX bytes of PD in all.
 */
int iw_mpa_encode(void *buf, size_t cap, enum iw_mpa_kind kind, const struct iw_mpa_params *p,
		  const void *user_pd, size_t user_len);

/*
 * Decodes the frame of @kind at the start of @buf (@len bytes received so far), revision
 * 1 or 2, in the form @p->words_unflagged says (read before the call). Fills the rest of
 * @p; @user_pd and @user_len get the consumer's private data in @buf (after the enhanced
 * words, which are stripped, as siw does). Returns the frame's length when complete,
 * -EAGAIN when more bytes are needed (at any split point, never more than
 * IW_MPA_FRAME_MAX in all), -EPROTO when the bytes cannot be that frame: wrong key (as
 * soon as a wrong byte is in), reserved bits (the enhanced flag at revision 1, or in the
 * unflagged form, is one), markers asked for, R in a request, revision not 1 or 2,
 * PD_Length above IW_MPA_PD_MAX, an enhanced frame with fewer than 4 bytes of private
 * data.
 */
int iw_mpa_decode(const void *buf, size_t len, enum iw_mpa_kind kind, struct iw_mpa_params *p,
		  const unsigned char **user_pd, uint16_t *user_len);

#endif
