#include "wire/iwarp/iw_mpa.h"

#include <errno.h>
#include <string.h>

static const char key_request[IW_MPA_KEY_LEN] = "MPA ID Req Frame";
static const char key_reply[IW_MPA_KEY_LEN] = "MPA ID Rep Frame";

static const char *key_of(enum iw_mpa_kind kind)
{
	return kind == IW_MPA_REQUEST ? key_request : key_reply;
}

int iw_mpa_build(void *buf, size_t cap, enum iw_mpa_kind kind, uint8_t flags,
		 const void *pd, size_t pd_len)
{
	unsigned char *p = buf;

	if (pd_len > IW_MPA_PD_MAX || cap < IW_MPA_HDR_LEN + pd_len)
		return -EINVAL;
	/* RFC 5044 §7.1: R is meaningful in a reply only; reserved bits go out as zero. */
	if (kind == IW_MPA_REQUEST)
		flags &= (uint8_t)~IW_MPA_FLAG_REJECT;
	flags &= IW_MPA_FLAG_MARKERS | IW_MPA_FLAG_CRC | IW_MPA_FLAG_REJECT;
	memcpy(p, key_of(kind), IW_MPA_KEY_LEN);
	p[16] = flags;
	p[17] = IW_MPA_REV;
	p[18] = (unsigned char)(pd_len >> 8);
	p[19] = (unsigned char)pd_len;
	if (pd_len)
		memcpy(p + IW_MPA_HDR_LEN, pd, pd_len);
	return (int)(IW_MPA_HDR_LEN + pd_len);
}

int iw_mpa_parse(const void *buf, size_t len, enum iw_mpa_kind kind, struct iw_mpa_frame *out)
{
	const unsigned char *p = buf;
	size_t n = len < IW_MPA_KEY_LEN ? len : IW_MPA_KEY_LEN;
	uint16_t pd_len;

	/* A wrong key is refused as soon as its first wrong byte is in. */
	if (memcmp(p, key_of(kind), n))
		return -EPROTO;
	if (len < IW_MPA_HDR_LEN)
		return -EAGAIN;
	if (p[16] & 0x1f)
		return -EPROTO; /* reserved bits */
	if (kind == IW_MPA_REQUEST && (p[16] & IW_MPA_FLAG_REJECT))
		return -EPROTO;
	if (p[17] < 1)
		return -EPROTO; /* revision 0 is the pre-RFC draft */
	pd_len = (uint16_t)(p[18] << 8 | p[19]);
	if (pd_len > IW_MPA_PD_MAX)
		return -EPROTO;
	if (len < (size_t)IW_MPA_HDR_LEN + pd_len)
		return -EAGAIN;
	out->kind = kind;
	out->flags = p[16];
	out->rev = p[17];
	out->pd_len = pd_len;
	out->pd = p + IW_MPA_HDR_LEN;
	return IW_MPA_HDR_LEN + pd_len;
}
