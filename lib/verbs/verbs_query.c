/* Device, port, GID and P_Key queries. */
#include <arpa/inet.h>
#include <endian.h>
#include <string.h>
#include <time.h>

#include "core/sv_engine.h"
#include "verbs.h"

#undef ibv_query_port

/* rdma-core's sysfs GID types (driver.h, not installed): what ibv_query_gid_type returns. */
enum { SV_GID_TYPE_SYSFS_IB_ROCE_V1, SV_GID_TYPE_SYSFS_ROCE_V2 };

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	if (!context || !attr)
		return EINVAL;
	sv_device_attr(&to_svctx(context)->host, attr);
	return 0;
}

int sv_verbs_query_device_ex(struct ibv_context *context,
			     const struct ibv_query_device_ex_input *input,
			     struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex full;

	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(attr->orig_attr))
		return EINVAL;
	memset(&full, 0, sizeof(full));
	sv_device_attr(&to_svctx(context)->host, &full.orig_attr);
	/* Completion timestamps are CLOCK_MONOTONIC nanoseconds: a 1 GHz "HCA clock". */
	full.completion_timestamp_mask = UINT64_MAX;
	full.hca_core_clock = 1000000; /* kHz */
	full.device_cap_flags_ex = full.orig_attr.device_cap_flags;
	full.phys_port_cnt_ex = 1;
	full.max_dm_size = SV_MAX_DM_SIZE;
	/* Nothing is pinned, ever: on-demand paging is what softverbs does anyway. */
	full.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
	full.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND |
		IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
		IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	full.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND |
		IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV;
	full.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND |
		IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
	full.xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
			    IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	/* Callers built against older headers pass a shorter struct: fill what they have. */
	memcpy(attr, &full, attr_size < sizeof(full) ? attr_size : sizeof(full));
	return 0;
}

int sv_verbs_query_rt_values(struct ibv_context *context, struct ibv_values_ex *values)
{
	struct timespec ts;

	(void)context;
	if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		values->raw_clock = ts;
	}
	values->comp_mask &= IBV_VALUES_MASK_RAW_CLOCK;
	return 0;
}

int sv_verbs_query_port(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr,
			size_t attr_len)
{
	struct ibv_port_attr full;

	if (port != SV_PORT_NUM)
		return EINVAL;
	sv_port_attr(&to_svctx(context)->host, &full);
	full.bad_pkey_cntr = sv_engine_bad_pkeys();
	full.qkey_viol_cntr = atomic_load(&sv_engine_qkey_violations);
	memcpy(attr, &full, attr_len < sizeof(full) ? attr_len : sizeof(full));
	return 0;
}

/*
 * The exported symbol is the old entry point: its callers' struct ends before
 * port_cap_flags2 (48 bytes). New callers reach sv_verbs_query_port through the
 * header's inline with the full size.
 */
int ibv_query_port(struct ibv_context *context, uint8_t port_num,
		   struct _compat_ibv_port_attr *attr)
{
	if (!context || !attr)
		return EINVAL;
	return sv_verbs_query_port(context, port_num, (struct ibv_port_attr *)attr,
				   offsetof(struct ibv_port_attr, port_cap_flags2));
}

int sv_gid_index_valid(struct sv_context *ctx, int index)
{
	return index >= 0 && index < ctx->host.n_gids;
}

static void fill_gid_entry(struct sv_context *ctx, int index, struct ibv_gid_entry *e)
{
	memset(e, 0, sizeof(*e));
	e->gid = ctx->host.gids[index].gid;
	e->gid_index = index;
	e->port_num = SV_PORT_NUM;
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	e->ndev_ifindex = ctx->host.gids[index].ifindex;
}

/* 0, or a positive errno: EINVAL for a bad port or index, ENODATA for an empty entry. */
int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct sv_context *ctx;

	if (!context || !entry || flags || entry_size < sizeof(*entry))
		return EINVAL;
	ctx = to_svctx(context);
	if (port_num != SV_PORT_NUM || gid_index >= SV_GID_TBL_LEN)
		return EINVAL;
	if (!sv_gid_index_valid(ctx, (int)gid_index))
		return ENODATA;
	fill_gid_entry(ctx, (int)gid_index, entry);
	return 0;
}

/* The number of entries written, or a negative errno. */
ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	struct sv_context *ctx;
	size_t n = 0;

	if (!context || (!entries && max_entries) || flags || entry_size < sizeof(*entries))
		return -EINVAL;
	ctx = to_svctx(context);
	if ((size_t)ctx->host.n_gids > max_entries)
		return -EINVAL;
	for (int i = 0; i < ctx->host.n_gids; i++, n++)
		fill_gid_entry(ctx, i, (struct ibv_gid_entry *)((char *)entries + n * entry_size));
	return (ssize_t)n;
}

/* 0 or -1 (rdma-core's convention); an empty entry in range reads as the zero GID. */
int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	struct ibv_gid_entry e;
	int ret;

	if (!gid || index < 0) {
		errno = EINVAL;
		return -1;
	}
	ret = _ibv_query_gid_ex(context, port_num, (uint32_t)index, &e, 0, sizeof(e));
	if (ret == ENODATA) {
		memset(gid, 0, sizeof(*gid));
		return 0;
	}
	if (ret) {
		errno = ret;
		return -1;
	}
	*gid = e.gid;
	return 0;
}

int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       int *type);
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       int *type)
{
	if (!context || !type || port_num != SV_PORT_NUM || index >= SV_GID_TBL_LEN) {
		errno = EINVAL;
		return -1;
	}
	*type = SV_GID_TYPE_SYSFS_ROCE_V2;
	return 0;
}

/* 0 or -1; the P_Key comes back in network byte order, as rdma-core returns it. */
int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)
{
	struct sv_context *ctx;

	if (!context || !pkey || port_num != SV_PORT_NUM || index < 0 ||
	    index >= SV_PKEY_TBL_LEN) {
		errno = EINVAL;
		return -1;
	}
	ctx = to_svctx(context);
	*pkey = htobe16(index < ctx->host.n_pkeys ? ctx->host.pkeys[index] : 0);
	return 0;
}

int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	__be16 p;

	for (int i = 0; i < SV_PKEY_TBL_LEN; i++) {
		if (ibv_query_pkey(context, port_num, i, &p))
			return -1;
		if (p == pkey && be16toh(p) != 0)
			return i;
	}
	errno = ENOENT;
	return -1;
}
