/* The MPA exchange: what each side sends and concludes (iw_xchg.h says what and why). */
#include "wire/iwarp/iw_xchg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "util/sv_log.h"

static uint16_t cap14(uint16_t v)
{
	return v > IW_MPA_IRD_ORD_MAX ? IW_MPA_IRD_ORD_MAX : v;
}

struct iw_xchg_side iw_xchg_request(bool crc, uint16_t ird, uint16_t ord)
{
	/* RFC 5044 §7.1: C asks for CRC; RFC 6581 §5: revision 2 carries IRD and ORD. */
	return (struct iw_xchg_side){ .rev = IW_MPA_REV2, .crc = crc, .ird = cap14(ird),
				      .ord = cap14(ord) };
}

int iw_xchg_answer(const struct iw_xchg_side *req, uint16_t ird, uint16_t ord,
		   struct iw_xchg_side *reply)
{
	*reply = (struct iw_xchg_side){
		/* RFC 6581 §4: a revision 1 request is answered in kind, without words. */
		.rev = req->rev == IW_MPA_REV ? IW_MPA_REV : IW_MPA_REV2,
		/* RFC 5044 §7.1: the responder's C echoes the initiator's. */
		.crc = req->crc,
		.ird = req->rev == IW_MPA_REV ? 1 : cap14(ird),
		.ord = req->rev == IW_MPA_REV ? 1 : cap14(ord),
	};
	/* Peer-to-peer wants an RTR message after setup; softverbs offers none (siw never
	 * asks), so such a request is refused rather than half answered. */
	return req->rtr ? -EOPNOTSUPP : 0;
}

int iw_xchg_check_reply(const struct iw_xchg_side *req, const struct iw_xchg_side *reply)
{
	if (reply->rev > req->rev)
		return -EPROTO; /* RFC 6581 §4: never above what was asked */
	if (reply->rtr & ~req->rtr)
		return -EPROTO; /* an RTR kind nobody offered */
	return 0;
}

int iw_xchg_encode(void *buf, size_t cap, enum iw_mpa_kind kind, bool unflagged,
		   const struct iw_xchg_side *me, bool reject, const void *pd, size_t pd_len)
{
	bool words = me->rev == IW_MPA_REV2;
	struct iw_mpa_params m = {
		/* RFC 5044 §7.1: markers never (siw refuses them). */
		.flags = (uint8_t)((me->crc ? IW_MPA_FLAG_CRC : 0) |
				   (reject && kind == IW_MPA_REPLY ? IW_MPA_FLAG_REJECT : 0)),
		.rev = me->rev,
		.enhanced = words,
		.words_unflagged = unflagged,
		.ird = words ? cap14(me->ird) : 0,
		.ord = words ? cap14(me->ord) : 0,
		/* Peer-to-peer is the initiator's to ask for; the RTR kinds go both ways. */
		.p2p = words && kind == IW_MPA_REQUEST && me->rtr,
		.rtr_zero_send = words && (me->rtr & IW_RTR_SEND),
		.rtr_zero_write = words && (me->rtr & IW_RTR_WRITE),
		.rtr_zero_read = words && (me->rtr & IW_RTR_READ),
	};

	if (reject && kind == IW_MPA_REQUEST)
		return -EINVAL;
	return iw_mpa_encode(buf, cap, kind, &m, pd, pd_len);
}

int iw_xchg_decode(const void *buf, size_t len, enum iw_mpa_kind kind, bool unflagged,
		   struct iw_xchg_side *peer, bool *reject, const unsigned char **pd,
		   uint16_t *pd_len)
{
	struct iw_mpa_params m = { .words_unflagged = unflagged };
	int n = iw_mpa_decode(buf, len, kind, &m, pd, pd_len);

	if (n < 0)
		return n;
	*reject = m.flags & IW_MPA_FLAG_REJECT; /* R refuses, whatever else is wrong */
	if (unflagged && !m.enhanced)
		return -EPROTO; /* the verbs-only port's frames are revision 2, with words */
	*peer = (struct iw_xchg_side){
		.rev = m.rev,
		.crc = m.flags & IW_MPA_FLAG_CRC,
		/* RFC 6581 §5: without the words, one Read each way. */
		.ird = m.enhanced ? m.ird : 1,
		.ord = m.enhanced ? m.ord : 1,
		.rtr = (uint8_t)((m.rtr_zero_send ? IW_RTR_SEND : 0) |
				 (m.rtr_zero_write ? IW_RTR_WRITE : 0) |
				 (m.rtr_zero_read ? IW_RTR_READ : 0)),
	};
	if (kind == IW_MPA_REQUEST && !m.p2p)
		peer->rtr = 0; /* RFC 6581: the RTR kinds mean something in peer-to-peer only */
	return n;
}

int iw_xchg_read(struct iw_xchg_rx *rx, int fd, enum iw_mpa_kind kind, bool unflagged)
{
	for (;;) {
		struct iw_xchg_side peer;
		const unsigned char *pd;
		uint16_t pd_len;
		bool rej;
		size_t need = IW_MPA_HDR_LEN;
		ssize_t n;
		int r;

		if (rx->len >= IW_MPA_HDR_LEN)
			need += (size_t)(rx->buf[18] << 8 | rx->buf[19]);
		if (rx->len &&
		    (r = iw_xchg_decode(rx->buf, rx->len, kind, unflagged, &peer, &rej, &pd,
					&pd_len)) != -EAGAIN)
			return r;
		if (need > sizeof(rx->buf))
			return -EPROTO;
		n = recv(fd, rx->buf + rx->len, need - rx->len, MSG_DONTWAIT);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		if (n == 0)
			return -ECONNRESET;
		rx->len += (size_t)n;
	}
}

int iw_xchg_send(int fd, const void *frame, size_t len)
{
	ssize_t r = send(fd, frame, len, MSG_DONTWAIT | MSG_NOSIGNAL);

	if (r == (ssize_t)len)
		return 0;
	if (r < 0)
		return -errno;
	return -EIO; /* part of a frame went: the stream is of no use */
}

uint64_t iw_xchg_request_wait_ns(void)
{
	const char *e = getenv("SOFTVERBS_IWARP_MPA_TIMEOUT_MS");
	char *end;
	long v;

	if (!e || !*e)
		return 5000 * 1000000ull;
	errno = 0;
	v = strtol(e, &end, 0);
	if (errno || *end || v < 1 || v > 3600000) {
		sv_warn("SOFTVERBS_IWARP_MPA_TIMEOUT_MS=%s: not a number in [1, 3600000], using "
			"5000\n", e);
		v = 5000;
	}
	return (uint64_t)v * 1000000ull;
}
