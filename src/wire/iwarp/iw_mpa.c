#include "wire/iwarp/iw_mpa.h"

#include <errno.h>
#include <string.h>

static const char key_request[IW_MPA_KEY_LEN] = "MPA ID Req Frame";
static const char key_reply[IW_MPA_KEY_LEN] = "MPA ID Rep Frame";

static const char *key_of(enum iw_mpa_kind kind)
{
	return kind == IW_MPA_REQUEST ? key_request : key_reply;
}

int iw_mpa_encode(void *buf, size_t cap, enum iw_mpa_kind kind, const struct iw_mpa_params *p,
		  const void *user_pd, size_t user_len)
{
	unsigned char *b = buf;
	uint8_t rev = p->rev ? p->rev : IW_MPA_REV2;
	size_t enh = p->enhanced ? IW_MPA_ENH_LEN : 0;
	size_t pd_len = enh + user_len;
	uint8_t flags = p->flags & (IW_MPA_FLAG_CRC | IW_MPA_FLAG_REJECT);
	uint16_t ird, ord;

	if (rev != IW_MPA_REV && rev != IW_MPA_REV2)
		return -EINVAL;
	if (p->enhanced && rev != IW_MPA_REV2)
		return -EINVAL;
	if (p->words_unflagged && p->enhanced != (rev == IW_MPA_REV2))
		return -EINVAL; /* a decoder of that form would read words that are not there */
	if (p->ird > IW_MPA_IRD_ORD_MAX || p->ord > IW_MPA_IRD_ORD_MAX)
		return -EINVAL;
	if (user_len > IW_MPA_PD_MAX || pd_len > IW_MPA_PD_MAX || cap < IW_MPA_HDR_LEN + pd_len)
		return -EINVAL;
	/* RFC 5044 §7.1: R is meaningful in a reply only; reserved bits go out as zero. */
	if (kind == IW_MPA_REQUEST)
		flags &= (uint8_t)~IW_MPA_FLAG_REJECT;
	if (p->enhanced && !p->words_unflagged)
		flags |= IW_MPA_FLAG_ENHANCED;
	memcpy(b, key_of(kind), IW_MPA_KEY_LEN);
	b[16] = flags;
	b[17] = rev;
	b[18] = (unsigned char)(pd_len >> 8);
	b[19] = (unsigned char)pd_len;
	if (enh) {
		ird = (uint16_t)(p->ird | (p->p2p ? IW_MPA_IRD_P2P : 0) |
				 (p->rtr_zero_send ? IW_MPA_IRD_RTR_SEND : 0));
		ord = (uint16_t)(p->ord | (p->rtr_zero_write ? IW_MPA_ORD_RTR_WRITE : 0) |
				 (p->rtr_zero_read ? IW_MPA_ORD_RTR_READ : 0));
		b[20] = (unsigned char)(ird >> 8);
		b[21] = (unsigned char)ird;
		b[22] = (unsigned char)(ord >> 8);
		b[23] = (unsigned char)ord;
	}
	if (user_len)
		memcpy(b + IW_MPA_HDR_LEN + enh, user_pd, user_len);
	return (int)(IW_MPA_HDR_LEN + pd_len);
}

int iw_mpa_decode(const void *buf, size_t len, enum iw_mpa_kind kind, struct iw_mpa_params *p,
		  const unsigned char **user_pd, uint16_t *user_len)
{
	const unsigned char *b = buf;
	size_t n = len < IW_MPA_KEY_LEN ? len : IW_MPA_KEY_LEN;
	uint16_t pd_len, ird, ord;
	uint8_t flags, rev, rsvd = IW_MPA_FLAG_RSVD;
	bool unflagged = p->words_unflagged, enhanced;

	/* A wrong key is refused as soon as its first wrong byte is in. */
	if (memcmp(b, key_of(kind), n))
		return -EPROTO;
	/* Each check as soon as its byte is in: garbage is refused early, and a frame
	 * split anywhere gives -EAGAIN until the refusal or the end. */
	if (len <= 16)
		return -EAGAIN;
	flags = b[16];
	if (unflagged)
		rsvd |= IW_MPA_FLAG_ENHANCED;
	if (flags & (rsvd | IW_MPA_FLAG_MARKERS))
		return -EPROTO;
	if (kind == IW_MPA_REQUEST && (flags & IW_MPA_FLAG_REJECT))
		return -EPROTO;
	if (len <= 17)
		return -EAGAIN;
	rev = b[17];
	if (rev != IW_MPA_REV && rev != IW_MPA_REV2)
		return -EPROTO;
	enhanced = unflagged ? rev == IW_MPA_REV2 : flags & IW_MPA_FLAG_ENHANCED;
	if (enhanced && rev != IW_MPA_REV2)
		return -EPROTO; /* a reserved bit at revision 1 */
	if (len < IW_MPA_HDR_LEN)
		return -EAGAIN;
	pd_len = (uint16_t)(b[18] << 8 | b[19]);
	if (pd_len > IW_MPA_PD_MAX)
		return -EPROTO;
	if (enhanced && pd_len < IW_MPA_ENH_LEN)
		return -EPROTO;
	if (len < (size_t)IW_MPA_HDR_LEN + pd_len)
		return -EAGAIN;

	memset(p, 0, sizeof(*p));
	p->flags = flags & (IW_MPA_FLAG_CRC | IW_MPA_FLAG_REJECT);
	p->rev = rev;
	p->enhanced = enhanced;
	p->words_unflagged = unflagged;
	*user_pd = b + IW_MPA_HDR_LEN;
	*user_len = pd_len;
	if (enhanced) {
		ird = (uint16_t)(b[20] << 8 | b[21]);
		ord = (uint16_t)(b[22] << 8 | b[23]);
		p->ird = ird & IW_MPA_IRD_ORD_MAX;
		p->ord = ord & IW_MPA_IRD_ORD_MAX;
		p->p2p = ird & IW_MPA_IRD_P2P;
		p->rtr_zero_send = ird & IW_MPA_IRD_RTR_SEND;
		p->rtr_zero_write = ord & IW_MPA_ORD_RTR_WRITE;
		p->rtr_zero_read = ord & IW_MPA_ORD_RTR_READ;
		*user_pd += IW_MPA_ENH_LEN;
		*user_len = (uint16_t)(pd_len - IW_MPA_ENH_LEN);
	}
	return IW_MPA_HDR_LEN + pd_len;
}
