/*
 * The one device, softverbs0, and the identity of the host it stands for.
 *
 * Every process of one host (one network namespace) computes the same node GUID and
 * LID, so that a LID or GID learnt from a peer names this host. The limits below are the
 * ones the implementation enforces; ibv_query_device reports exactly these.
 */
#ifndef SV_DEVICE_H
#define SV_DEVICE_H

#include <infiniband/verbs.h>
#include <stdint.h>

#define SV_DEV_NAME "softverbs0"
#define SV_PORT_NUM 1

enum {
	SV_MAX_QP = 16384,
	SV_MAX_QP_WR = 16384,
	SV_MAX_SGE = 32,
	SV_MAX_INLINE = 512,
	SV_MAX_CQ = 16384,
	SV_MAX_CQE = (1 << 20) - 1,
	SV_MAX_MR = 1 << 20,
	SV_MAX_PD = 1 << 16,
	SV_MAX_RD_ATOM = 128,
	SV_MAX_SRQ = 16384,
	SV_MAX_SRQ_WR = 16384,
	SV_MAX_SRQ_SGE = 32,
	SV_MAX_AH = 1 << 16,
	SV_MAX_DM_SIZE = 256 * 1024, /* device memory, per process (ibv_alloc_dm) */
	SV_VENDOR_ID = 0xffffff, /* no IEEE OUI: the value software devices (rxe) use */
	SV_MAX_MCAST_GRP = 8192,
	SV_MAX_MCAST_QP_ATTACH = 56,
	SV_GID_TBL_LEN = 64,
	SV_PKEY_TBL_LEN = 16,
	SV_NUM_COMP_VECTORS = 1,
};

#define SV_MAX_MSG_SZ (1u << 31)
#define SV_DEFAULT_PKEY 0xffff

struct sv_gid_entry {
	union ibv_gid gid;
	uint32_t ifindex;
};

struct sv_host {
	uint64_t node_guid; /* host byte order */
	uint16_t lid;
	int n_gids;
	struct sv_gid_entry gids[SV_GID_TBL_LEN];
	int n_pkeys;
	uint16_t pkeys[SV_PKEY_TBL_LEN];
};

/* Fills *host from the machine's addresses and SOFTVERBS_PKEYS. 0 or -errno. */
int sv_host_probe(struct sv_host *host);

void sv_device_attr(const struct sv_host *host, struct ibv_device_attr *attr);
void sv_port_attr(const struct sv_host *host, struct ibv_port_attr *attr);

/* Index of @gid in the host's table, or -1. */
int sv_host_find_gid(const struct sv_host *host, const union ibv_gid *gid);
/* The RoCE v2 GID of an IPv4 address (4 bytes, network order): ::ffff:a.b.c.d. */
void sv_gid_from_ipv4(union ibv_gid *gid, const void *addr4);

#endif
