/*
 * The CM's MADs (rv_cm.h). Offsets are IBA volume 1's (tables 106-120), counted from the
 * start of the CM message, after the 24-byte common header; a field narrower than its
 * bytes takes their most significant bits first, as the IBA draws them.
 */
#include "wire/roce/rv_cm.h"
#include "wire/roce/rv_bytes.h"

#include <errno.h>
#include <string.h>

/* Where each message's private data begins in the CM message, and how long it is. */
static bool private_field(uint16_t attr, size_t *off, size_t *len)
{
	static const struct {
		uint16_t attr;
		uint8_t off, len;
	} f[] = {
		{ RV_CM_REQ, 140, 92 },	     { RV_CM_MRA, 10, 222 },	  { RV_CM_REJ, 84, 148 },
		{ RV_CM_REP, 36, 196 },	     { RV_CM_RTU, 8, 224 },	  { RV_CM_DREQ, 12, 220 },
		{ RV_CM_DREP, 8, 224 },	     { RV_CM_SIDR_REQ, 16, 216 }, { RV_CM_SIDR_REP, 96, 136 },
	};

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		if (f[i].attr == attr) {
			*off = f[i].off;
			*len = f[i].len;
			return true;
		}
	}
	return false;
}

size_t rv_cm_private_max(uint16_t attr)
{
	size_t off, len;

	return private_field(attr, &off, &len) ? len : 0;
}

/* A REQ's path at @p (40 bytes: primary at 52, alternate at 96). */
static void put_path(uint8_t *p, const struct rv_cm_path *a)
{
	rv_put16(p, a->local_lid);
	rv_put16(p + 2, a->remote_lid);
	memcpy(p + 4, a->local_gid, 16);
	memcpy(p + 20, a->remote_gid, 16);
	rv_put32(p + 36, (a->flow_label & 0xfffff) << 12 | (a->packet_rate & 0x3f));
	p[40] = a->traffic_class;
	p[41] = a->hop_limit;
	p[42] = (uint8_t)((a->sl & 0xf) << 4 | (a->subnet_local ? 0x08 : 0));
	p[43] = (uint8_t)((a->local_ack_timeout & 0x1f) << 3);
}

static void get_path(const uint8_t *p, struct rv_cm_path *a)
{
	a->local_lid = rv_get16(p);
	a->remote_lid = rv_get16(p + 2);
	memcpy(a->local_gid, p + 4, 16);
	memcpy(a->remote_gid, p + 20, 16);
	a->flow_label = rv_get32(p + 36) >> 12;
	a->packet_rate = p[39] & 0x3f;
	a->traffic_class = p[40];
	a->hop_limit = p[41];
	a->sl = p[42] >> 4;
	a->subnet_local = p[42] & 0x08;
	a->local_ack_timeout = p[43] >> 3;
}

int rv_cm_encode(const struct rv_cm_msg *m, uint8_t out[RV_MAD_LEN])
{
	uint8_t *d = out + RV_MAD_HDR;
	size_t poff, plen;

	if (!private_field(m->attr, &poff, &plen) || m->private_len > plen ||
	    m->ari_len > RV_CM_ARI_MAX)
		return -EINVAL;
	memset(out, 0, RV_MAD_LEN);
	out[0] = RV_MAD_BASE_VERSION;
	out[1] = RV_MAD_CLASS_CM;
	out[2] = RV_MAD_CM_VERSION;
	out[3] = RV_MAD_METHOD_SEND;
	rv_put16(out + 4, m->status);
	rv_put64(out + 8, m->tid);
	rv_put16(out + 16, m->attr);
	rv_put32(d, m->local_id);
	switch (m->attr) {
	case RV_CM_REQ:
		rv_put64(d + 8, m->service_id);
		rv_put64(d + 16, m->local_ca_guid);
		rv_put32(d + 28, m->qkey);
		rv_put24(d + 32, m->qpn);
		d[35] = m->responder_resources;
		d[39] = m->initiator_depth;
		d[43] = (uint8_t)((m->remote_cm_timeout & 0x1f) << 3 | (m->transport & 3) << 1 |
				  (m->eefc ? 1 : 0));
		rv_put24(d + 44, m->starting_psn);
		d[47] = (uint8_t)((m->local_cm_timeout & 0x1f) << 3 | (m->retry_count & 7));
		rv_put16(d + 48, m->pkey);
		d[50] = (uint8_t)((m->mtu & 0xf) << 4 | (m->rnr_retry_count & 7));
		d[51] = (uint8_t)((m->max_cm_retries & 0xf) << 4 | (m->srq ? 0x08 : 0));
		put_path(d + 52, &m->primary);
		put_path(d + 96, &m->alternate);
		break;
	case RV_CM_MRA:
		rv_put32(d + 4, m->remote_id);
		d[8] = (uint8_t)((m->msg & 3) << 6);
		d[9] = (uint8_t)((m->service_timeout & 0x1f) << 3);
		break;
	case RV_CM_REJ:
		rv_put32(d + 4, m->remote_id);
		d[8] = (uint8_t)((m->msg & 3) << 6);
		d[9] = (uint8_t)((m->ari_len & 0x7f) << 1);
		rv_put16(d + 10, m->reason);
		memcpy(d + 12, m->ari, m->ari_len);
		break;
	case RV_CM_REP:
		rv_put32(d + 4, m->remote_id);
		rv_put32(d + 8, m->qkey);
		rv_put24(d + 12, m->qpn);
		rv_put24(d + 20, m->starting_psn);
		d[24] = m->responder_resources;
		d[25] = m->initiator_depth;
		d[26] = (uint8_t)((m->target_ack_delay & 0x1f) << 3 | (m->failover & 3) << 1 |
				  (m->eefc ? 1 : 0));
		d[27] = (uint8_t)((m->rnr_retry_count & 7) << 5 | (m->srq ? 0x10 : 0));
		rv_put64(d + 28, m->local_ca_guid);
		break;
	case RV_CM_RTU:
	case RV_CM_DREP:
		rv_put32(d + 4, m->remote_id);
		break;
	case RV_CM_DREQ:
		rv_put32(d + 4, m->remote_id);
		rv_put24(d + 8, m->qpn);
		break;
	case RV_CM_SIDR_REQ:
		rv_put16(d + 4, m->pkey);
		rv_put64(d + 8, m->service_id);
		break;
	case RV_CM_SIDR_REP:
		d[4] = m->sidr_status;
		d[5] = m->ari_len;
		rv_put24(d + 8, m->qpn);
		rv_put64(d + 12, m->service_id);
		rv_put32(d + 20, m->qkey);
		memcpy(d + 24, m->ari, m->ari_len);
		break;
	}
	memcpy(d + poff, m->private_data, m->private_len);
	return 0;
}

int rv_cm_decode(const uint8_t *buf, size_t len, struct rv_cm_msg *m)
{
	const uint8_t *d = buf + RV_MAD_HDR;
	size_t poff, plen;

	if (len < RV_MAD_LEN)
		return -EBADMSG;
	if (buf[0] != RV_MAD_BASE_VERSION || buf[1] != RV_MAD_CLASS_CM ||
	    buf[2] != RV_MAD_CM_VERSION)
		return -EPROTO;
	memset(m, 0, sizeof(*m));
	m->attr = rv_get16(buf + 16);
	if (buf[3] != RV_MAD_METHOD_SEND || !private_field(m->attr, &poff, &plen))
		return -EOPNOTSUPP;
	m->status = rv_get16(buf + 4);
	m->tid = rv_get64(buf + 8);
	m->local_id = rv_get32(d);
	switch (m->attr) {
	case RV_CM_REQ:
		m->service_id = rv_get64(d + 8);
		m->local_ca_guid = rv_get64(d + 16);
		m->qkey = rv_get32(d + 28);
		m->qpn = rv_get24(d + 32);
		m->responder_resources = d[35];
		m->initiator_depth = d[39];
		m->remote_cm_timeout = d[43] >> 3;
		m->transport = (d[43] >> 1) & 3;
		m->eefc = d[43] & 1;
		m->starting_psn = rv_get24(d + 44);
		m->local_cm_timeout = d[47] >> 3;
		m->retry_count = d[47] & 7;
		m->pkey = rv_get16(d + 48);
		m->mtu = d[50] >> 4;
		m->rnr_retry_count = d[50] & 7;
		m->max_cm_retries = d[51] >> 4;
		m->srq = d[51] & 0x08;
		get_path(d + 52, &m->primary);
		get_path(d + 96, &m->alternate);
		break;
	case RV_CM_MRA:
		m->remote_id = rv_get32(d + 4);
		m->msg = d[8] >> 6;
		m->service_timeout = d[9] >> 3;
		break;
	case RV_CM_REJ:
		m->remote_id = rv_get32(d + 4);
		m->msg = d[8] >> 6;
		m->ari_len = d[9] >> 1;
		if (m->ari_len > RV_CM_ARI_MAX)
			m->ari_len = RV_CM_ARI_MAX; /* (7 bits can say 127: the field holds 72) */
		m->reason = rv_get16(d + 10);
		memcpy(m->ari, d + 12, m->ari_len);
		break;
	case RV_CM_REP:
		m->remote_id = rv_get32(d + 4);
		m->qkey = rv_get32(d + 8);
		m->qpn = rv_get24(d + 12);
		m->starting_psn = rv_get24(d + 20);
		m->responder_resources = d[24];
		m->initiator_depth = d[25];
		m->target_ack_delay = d[26] >> 3;
		m->failover = (d[26] >> 1) & 3;
		m->eefc = d[26] & 1;
		m->rnr_retry_count = d[27] >> 5;
		m->srq = d[27] & 0x10;
		m->local_ca_guid = rv_get64(d + 28);
		break;
	case RV_CM_RTU:
	case RV_CM_DREP:
		m->remote_id = rv_get32(d + 4);
		break;
	case RV_CM_DREQ:
		m->remote_id = rv_get32(d + 4);
		m->qpn = rv_get24(d + 8);
		break;
	case RV_CM_SIDR_REQ:
		m->pkey = rv_get16(d + 4);
		m->service_id = rv_get64(d + 8);
		break;
	case RV_CM_SIDR_REP:
		m->sidr_status = d[4];
		m->ari_len = d[5] < RV_CM_ARI_MAX ? d[5] : RV_CM_ARI_MAX;
		m->qpn = rv_get24(d + 8);
		m->service_id = rv_get64(d + 12);
		m->qkey = rv_get32(d + 20);
		memcpy(m->ari, d + 24, m->ari_len);
		break;
	}
	m->private_len = (uint8_t)plen;
	memcpy(m->private_data, d + poff, plen);
	return 0;
}

void rv_cma_hdr_put(const struct rv_cma_hdr *h, uint8_t out[RV_CMA_HDR])
{
	memset(out, 0, RV_CMA_HDR);
	out[0] = 0; /* the cma version */
	out[1] = (uint8_t)(h->ip_version << 4);
	rv_put16(out + 2, h->port);
	if (h->ip_version == 4) {
		memcpy(out + 4 + 12, h->src + 12, 4);
		memcpy(out + 20 + 12, h->dst + 12, 4);
	} else {
		memcpy(out + 4, h->src, 16);
		memcpy(out + 20, h->dst, 16);
	}
}

int rv_cma_hdr_get(const uint8_t *buf, size_t len, struct rv_cma_hdr *h)
{
	if (len < RV_CMA_HDR)
		return -EBADMSG;
	memset(h, 0, sizeof(*h));
	h->ip_version = buf[1] >> 4;
	if (buf[0] != 0 || (h->ip_version != 4 && h->ip_version != 6))
		return -EPROTO;
	h->port = rv_get16(buf + 2);
	if (h->ip_version == 4) {
		memcpy(h->src + 12, buf + 4 + 12, 4);
		memcpy(h->dst + 12, buf + 20 + 12, 4);
	} else {
		memcpy(h->src, buf + 4, 16);
		memcpy(h->dst, buf + 20, 16);
	}
	return 0;
}
