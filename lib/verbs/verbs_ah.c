/* Address handles, and building one from a received UD completion. */
#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "verbs.h"

/* 0 or a positive errno. Without a GRH the LID addresses the port (LID mode). */
static int check_ah(struct sv_context *ctx, const struct ibv_ah_attr *attr)
{
	if (attr->port_num != SV_PORT_NUM || attr->sl > 15)
		return EINVAL;
	if (attr->is_global)
		return sv_gid_index_valid(ctx, attr->grh.sgid_index) ? 0 : EINVAL;
	return attr->dlid ? 0 : EINVAL;
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *ibpd, struct ibv_ah_attr *attr)
{
	struct sv_context *ctx;
	struct sv_ah *ah;
	int err;

	if (!ibpd || !attr)
		return sv_fail_null(EINVAL);
	ctx = to_svctx(ibpd->context);
	err = check_ah(ctx, attr);
	if (err)
		return sv_fail_null(err);
	if (atomic_fetch_add(&ctx->n_ah, 1) >= SV_MAX_AH) {
		atomic_fetch_sub(&ctx->n_ah, 1);
		return sv_fail_null(ENOMEM);
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah) {
		atomic_fetch_sub(&ctx->n_ah, 1);
		return sv_fail_null(ENOMEM);
	}
	ah->attr = *attr;
	ah->pd = to_svpd(ibpd);
	ah->ibv.context = ibpd->context;
	ah->ibv.pd = ibpd;
	atomic_fetch_add(&ah->pd->usecnt, 1);
	return &ah->ibv;
}

int ibv_destroy_ah(struct ibv_ah *ibah)
{
	struct sv_ah *ah;

	if (!ibah)
		return EINVAL;
	ah = to_svah(ibah);
	atomic_fetch_sub(&ah->pd->usecnt, 1);
	atomic_fetch_sub(&to_svctx(ibah->context)->n_ah, 1);
	free(ah);
	return 0;
}

/*
 * The 40 bytes in front of a UD receive: an IPv6 header (the GRH proper), or, for RoCE
 * v2 over IPv4, 20 unused bytes and then the IPv4 header. rdma-core reads them this
 * way too: the IPv6 next header says which GID type the peer used (UDP: RoCE v2,
 * 0x1b: IB / RoCE v1).
 */
struct grh_view {
	union ibv_gid sgid, dgid;
	uint32_t flow_label;
	uint8_t tclass, hop_limit;
	enum ibv_gid_type type;
};

static int read_grh(const struct ibv_grh *grh, struct grh_view *v)
{
	const unsigned char *raw = (const unsigned char *)grh;
	uint32_t vtf = be32toh(grh->version_tclass_flow);

	if ((vtf >> 28) == 6) {
		if (grh->next_hdr == IPPROTO_UDP)
			v->type = IBV_GID_TYPE_ROCE_V2;
		else if (grh->next_hdr == 0x1b) /* the IB transport header follows */
			v->type = IBV_GID_TYPE_ROCE_V1;
		else
			return EPROTONOSUPPORT;
		v->sgid = grh->sgid;
		v->dgid = grh->dgid;
		v->flow_label = vtf & 0xfffff;
		v->tclass = (vtf >> 20) & 0xff;
		v->hop_limit = grh->hop_limit;
		return 0;
	}
	if ((raw[20] >> 4) == 4) {
		sv_gid_from_ipv4(&v->sgid, raw + 20 + 12);
		sv_gid_from_ipv4(&v->dgid, raw + 20 + 16);
		v->flow_label = 0;
		v->tclass = raw[20 + 1];
		v->hop_limit = raw[20 + 8];
		v->type = IBV_GID_TYPE_ROCE_V2;
		return 0;
	}
	return EPROTONOSUPPORT;
}

int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
			struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
	struct grh_view v;
	int index, err;

	if (!context || !wc || !ah_attr || port_num != SV_PORT_NUM ||
	    ((wc->wc_flags & IBV_WC_GRH) && !grh)) {
		errno = EINVAL;
		return -1;
	}
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->port_num = port_num;
	ah_attr->sl = wc->sl;
	ah_attr->dlid = wc->slid;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;

	err = read_grh(grh, &v);
	/* A reply never leaves from a multicast GID. */
	if (!err && v.dgid.raw[0] == 0xff)
		err = EINVAL;
	if (err) {
		errno = err;
		return -1;
	}
	/* The reply leaves from the GID the request arrived at; every GID here is RoCE v2. */
	index = v.type == IBV_GID_TYPE_ROCE_V2 ? sv_host_find_gid(&to_svctx(context)->host, &v.dgid)
					       : -1;
	if (index < 0) {
		errno = ENOENT;
		return -1;
	}
	ah_attr->is_global = 1;
	ah_attr->grh.dgid = v.sgid;
	ah_attr->grh.sgid_index = (uint8_t)index;
	ah_attr->grh.flow_label = v.flow_label;
	ah_attr->grh.hop_limit = v.hop_limit;
	ah_attr->grh.traffic_class = v.tclass;
	return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
				     uint8_t port_num)
{
	struct ibv_ah_attr attr;

	if (!pd)
		return sv_fail_null(EINVAL);
	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}
