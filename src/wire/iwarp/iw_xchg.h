/*
 * The MPA exchange (RFC 5044 §7.1, RFC 6581): the one request and one reply before the
 * first FPDU, for every softverbs iWARP connection, whoever sets it up: verbs-only setup
 * (iw_conn.c, iw_qp.c: the host's port) and rdma_cm (lib/rdmacm/cma_iwarp.c). What a
 * side says (struct iw_xchg_side), the frames (iw_mpa.h's one codec beneath), reading a
 * frame off the stream and never a byte past it, the responder's answer and the
 * initiator's check of it, and how long an accepted connection has to ask. The callers
 * keep what is theirs: the sockets' owners, the private data, when to answer.
 *
 * Negotiated here, for both:
 *   - revision: the initiator asks with 2 and RFC 6581's IRD/ORD words; a responder
 *     answers revision 1 in kind (no words: one Read each way); the form without the
 *     enhanced flag (@unflagged, iw_mpa.h) is the verbs-only port's;
 *   - markers: never (M is never set; a frame asking for them is refused);
 *   - CRC: the responder's C echoes the initiator's, and the reply's C is what runs;
 *   - IRD/ORD: each side sends its own; what the peer takes at once is its IRD;
 *   - peer-to-peer (RFC 6581 §9, the RTR message): not offered; a request for it is
 *     answered with a reject;
 *   - a reply with R is a reject, whatever else it says.
 *
 * Sockets only through the calls that take an fd; no engine, no QP, no lock: both
 * libraries build it in.
 */
#ifndef IW_XCHG_H
#define IW_XCHG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/iwarp/iw_mpa.h"

/* RFC 6581 §9 ready-to-receive kinds: offered in a request (peer-to-peer mode when any
 * is set), the one chosen in a reply. */
enum {
	IW_RTR_SEND = 1u << 0,  /* zero-length Send (IRD word bit 14) */
	IW_RTR_WRITE = 1u << 1, /* zero-length RDMA Write (ORD word bit 15) */
	IW_RTR_READ = 1u << 2,  /* zero-length RDMA Read (ORD word bit 14) */
};

/* What one side says in its frame. */
struct iw_xchg_side {
	uint8_t rev;       /* 1 or 2 */
	bool crc;          /* C */
	uint16_t ird, ord; /* RFC 6581's words (14 bits); revision 1 carries none: 1 and 1 */
	uint8_t rtr;       /* IW_RTR_*: offered (a request: peer-to-peer) or chosen (a reply) */
};

/* The initiator's request: revision 2 with the words, C as @crc, @ird/@ord capped to 14
 * bits, never peer-to-peer. */
struct iw_xchg_side iw_xchg_request(bool crc, uint16_t ird, uint16_t ord);

/*
 * The responder's answer to @req, with its own @ird/@ord: revision in kind, C echoed.
 * 0, or -EOPNOTSUPP when only a reject answers it (peer-to-peer asked for); *reply is
 * filled either way (a reject is sent with it).
 */
int iw_xchg_answer(const struct iw_xchg_side *req, uint16_t ird, uint16_t ord,
		   struct iw_xchg_side *reply);

/* The initiator's check of the reply to @req (a reject is told by the decode): 0, or
 * -EPROTO when it breaks the rules (a revision above the request's, an RTR kind chosen
 * that was never offered). */
int iw_xchg_check_reply(const struct iw_xchg_side *req, const struct iw_xchg_side *reply);

/*
 * One frame of @kind into @buf: @me's parameters, R when @reject (replies only), the
 * consumer's private data @pd (@pd_len bytes) after the words. @unflagged: the verbs-only
 * port's form (iw_mpa.h, words_unflagged; revision 2 only). Its length, or -EINVAL.
 */
int iw_xchg_encode(void *buf, size_t cap, enum iw_mpa_kind kind, bool unflagged,
		   const struct iw_xchg_side *me, bool reject, const void *pd, size_t pd_len);

/*
 * The frame of @kind at the start of @buf (@len bytes so far), in the form @unflagged
 * says: its length with *@peer, *@reject and the private data (@pd, @pd_len: in @buf,
 * after the words) filled; -EAGAIN (more bytes needed); -EPROTO (not such a frame, as
 * iw_mpa_decode says, or a revision-1 frame in the unflagged form, which has words
 * always). A request that is not peer-to-peer has rtr 0.
 */
int iw_xchg_decode(const void *buf, size_t len, enum iw_mpa_kind kind, bool unflagged,
		   struct iw_xchg_side *peer, bool *reject, const unsigned char **pd,
		   uint16_t *pd_len);

/* A frame being read off a stream. */
struct iw_xchg_rx {
	size_t len;
	unsigned char buf[IW_MPA_FRAME_MAX];
};

/*
 * Reads the frame of @kind at the front of non-blocking @fd into @rx, never a byte past
 * it (what follows an accepted reply is the peer's first FPDU; nothing may follow a
 * request before the reply). Returns the frame's length once @rx holds all of it, 0
 * when more is to come, -EPROTO as soon as the bytes cannot be that frame, -ECONNRESET
 * at the end of the stream, or another -errno.
 */
int iw_xchg_read(struct iw_xchg_rx *rx, int fd, enum iw_mpa_kind kind, bool unflagged);

/* Sends a whole frame on non-blocking @fd at once (a fresh connection's buffer takes
 * it): 0, -EAGAIN with nothing sent, -EIO when part went (the stream is of no use), or
 * another -errno. */
int iw_xchg_send(int fd, const void *frame, size_t len);

/* How long an accepted connection has to send its request: SOFTVERBS_IWARP_MPA_TIMEOUT_MS,
 * 5000 by default (siw closes a socket whose request has not come 5 s after the
 * accept). */
uint64_t iw_xchg_request_wait_ns(void);

#endif
