#include "core/sv_device.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* FNV-1a: a stable hash of what identifies this host. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/*
 * A host is a kernel (boot id) and a network namespace: the processes that can reach
 * each other over loopback. Each network namespace is a host of its own, so the
 * multi-host tests run several hosts on one machine.
 */
static uint64_t host_hash(void)
{
	uint64_t h = 0xcbf29ce484222325ull;
	char boot_id[64] = "";
	struct stat st;
	FILE *f;

	f = fopen("/proc/sys/kernel/random/boot_id", "re");
	if (f) {
		if (!fgets(boot_id, sizeof(boot_id), f))
			boot_id[0] = 0;
		fclose(f);
	}
	h = fnv1a(h, boot_id, strlen(boot_id));
	if (!stat("/proc/self/ns/net", &st))
		h = fnv1a(h, &st.st_ino, sizeof(st.st_ino));
	return h;
}

void sv_gid_from_ipv4(union ibv_gid *gid, const void *a)
{
	memset(gid, 0, sizeof(*gid));
	gid->raw[10] = 0xff;
	gid->raw[11] = 0xff;
	memcpy(&gid->raw[12], a, 4);
}

/* Order: IPv4 non-loopback, IPv4 loopback, IPv6 global, IPv6 link-local, ::1. */
static int gid_rank(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;

		return (ntohl(in->sin_addr.s_addr) >> 24) == 127 ? 1 : 0;
	}
	const struct sockaddr_in6 *in6 = (const void *)sa;

	if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
		return 4;
	if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr))
		return 3;
	return 2;
}

static void add_gid(struct sv_host *host, const union ibv_gid *gid, uint32_t ifindex)
{
	if (host->n_gids >= SV_GID_TBL_LEN || sv_host_find_gid(host, gid) >= 0)
		return;
	host->gids[host->n_gids].gid = *gid;
	host->gids[host->n_gids].ifindex = ifindex;
	host->n_gids++;
}

static void probe_gids(struct sv_host *host)
{
	struct ifaddrs *ifa_list = NULL;

	if (getifaddrs(&ifa_list) == 0) {
		for (int rank = 0; rank <= 4; rank++) {
			for (struct ifaddrs *ifa = ifa_list; ifa; ifa = ifa->ifa_next) {
				const struct sockaddr *sa = ifa->ifa_addr;
				union ibv_gid gid;

				if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
					continue;
				if (!(ifa->ifa_flags & IFF_UP) || gid_rank(sa) != rank)
					continue;
				if (sa->sa_family == AF_INET)
					sv_gid_from_ipv4(&gid, &((const struct sockaddr_in *)sa)->sin_addr);
				else
					memcpy(gid.raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
				add_gid(host, &gid, if_nametoindex(ifa->ifa_name));
			}
		}
		freeifaddrs(ifa_list);
	}
	if (host->n_gids == 0) {
		/* No interface is up (an empty namespace): loopback still names this host. */
		struct in_addr lo = { htonl(INADDR_LOOPBACK) };
		union ibv_gid gid;

		sv_gid_from_ipv4(&gid, &lo);
		add_gid(host, &gid, 1);
	}
}

/* SOFTVERBS_PKEYS=0xffff,0x8001: the partition table; index 0 defaults to 0xffff. */
static int probe_pkeys(struct sv_host *host)
{
	const char *env = getenv("SOFTVERBS_PKEYS");

	host->n_pkeys = 1;
	host->pkeys[0] = SV_DEFAULT_PKEY;
	if (!env || !*env)
		return 0;
	host->n_pkeys = 0;
	while (*env && host->n_pkeys < SV_PKEY_TBL_LEN) {
		char *end;
		unsigned long v = strtoul(env, &end, 0);

		if (end == env || v == 0 || v > 0xffff)
			return -EINVAL;
		host->pkeys[host->n_pkeys++] = (uint16_t)v;
		env = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -EINVAL;
	}
	return 0;
}

int sv_host_probe(struct sv_host *host)
{
	uint64_t h = host_hash();

	memset(host, 0, sizeof(*host));
	/* Locally administered EUI-64: the 0x02 bit marks it as not a vendor's. */
	host->node_guid = (h & 0x00ffffffffffffffull) | 0x0200000000000000ull;
	/* Unicast LIDs are 0x0001..0xbfff. */
	host->lid = (uint16_t)(1 + (h >> 40) % 0xbffe);
	probe_gids(host);
	return probe_pkeys(host);
}

int sv_host_find_gid(const struct sv_host *host, const union ibv_gid *gid)
{
	for (int i = 0; i < host->n_gids; i++)
		if (!memcmp(host->gids[i].gid.raw, gid->raw, 16))
			return i;
	return -1;
}

void sv_device_attr(const struct sv_host *host, struct ibv_device_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	snprintf(attr->fw_ver, sizeof(attr->fw_ver), "softverbs %s", SV_VERSION);
	attr->node_guid = htobe64(host->node_guid);
	attr->sys_image_guid = htobe64(host->node_guid);
	attr->max_mr_size = UINT64_MAX;
	attr->page_size_cap = 0xfffff000; /* 4 KiB and up */
	attr->vendor_id = SV_VENDOR_ID;
	attr->vendor_part_id = 0;
	attr->hw_ver = 0;
	attr->max_qp = SV_MAX_QP;
	attr->max_qp_wr = SV_MAX_QP_WR;
	attr->device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR |
				 IBV_DEVICE_CHANGE_PHY_PORT | IBV_DEVICE_PORT_ACTIVE_EVENT |
				 IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_N_NOTIFY_CQ |
				 IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
	attr->max_sge = SV_MAX_SGE;
	attr->max_sge_rd = SV_MAX_SGE;
	attr->max_cq = SV_MAX_CQ;
	attr->max_cqe = SV_MAX_CQE;
	attr->max_mr = SV_MAX_MR;
	attr->max_pd = SV_MAX_PD;
	attr->max_qp_rd_atom = SV_MAX_RD_ATOM;
	attr->max_ee_rd_atom = 0;
	attr->max_res_rd_atom = SV_MAX_RD_ATOM * SV_MAX_QP;
	attr->max_qp_init_rd_atom = SV_MAX_RD_ATOM;
	attr->max_ee_init_rd_atom = 0;
	attr->atomic_cap = IBV_ATOMIC_HCA;
	attr->max_ee = 0;
	attr->max_rdd = 0;
	attr->max_mw = 0;
	attr->max_raw_ipv6_qp = 0;
	attr->max_raw_ethy_qp = 0;
	attr->max_mcast_grp = SV_MAX_MCAST_GRP;
	attr->max_mcast_qp_attach = SV_MAX_MCAST_QP_ATTACH;
	attr->max_total_mcast_qp_attach = SV_MAX_MCAST_GRP * SV_MAX_MCAST_QP_ATTACH;
	attr->max_ah = SV_MAX_AH;
	attr->max_fmr = 0;
	attr->max_map_per_fmr = 0;
	attr->max_srq = SV_MAX_SRQ;
	attr->max_srq_wr = SV_MAX_SRQ_WR;
	attr->max_srq_sge = SV_MAX_SRQ_SGE;
	attr->max_pkeys = SV_PKEY_TBL_LEN;
	attr->local_ca_ack_delay = 15;
	attr->phys_port_cnt = 1;
}

void sv_port_attr(const struct sv_host *host, struct ibv_port_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	attr->state = IBV_PORT_ACTIVE;
	attr->max_mtu = IBV_MTU_4096;
	attr->active_mtu = IBV_MTU_4096;
	attr->gid_tbl_len = SV_GID_TBL_LEN;
	attr->port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
	attr->max_msg_sz = SV_MAX_MSG_SZ;
	attr->bad_pkey_cntr = 0;
	attr->qkey_viol_cntr = 0;
	attr->pkey_tbl_len = SV_PKEY_TBL_LEN;
	attr->lid = host->lid;
	attr->sm_lid = 0;
	attr->lmc = 0;
	attr->max_vl_num = 1;
	attr->sm_sl = 0;
	attr->subnet_timeout = 0;
	attr->init_type_reply = 0;
	attr->active_width = 2;  /* 4X */
	attr->active_speed = 32; /* EDR: 4X EDR reads as 100 Gb/s */
	attr->phys_state = 5;    /* LinkUp */
	attr->link_layer = IBV_LINK_LAYER_ETHERNET;
	attr->flags = 0;
	attr->port_cap_flags2 = 0;
}
