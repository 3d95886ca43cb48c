/*
 * Multicast attach, and the calls softverbs answers without a feature behind them yet,
 * each with the errno rdma-core gives when a provider lacks the operation
 * (docs/conformance.md lists them).
 */
#include <string.h>

#include "verbs.h"

/* Multicast (src/core/sv_mcast.h): UD QPs and multicast GIDs only (ib_attach_mcast's
 * checks); the LID is not used (groups are named by GID). Members on other hosts reach
 * the QP through every interface's link (softverbs_attach_mcast_on: one). */
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)lid;
	if (!qp || !gid)
		return EINVAL;
	return -sv_mcast_attach(to_svqp(qp), gid, SV_MCAST_IF_ALL);
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)lid;
	if (!qp || !gid || qp->qp_type != IBV_QPT_UD || !sv_gid_is_multicast(gid))
		return EINVAL;
	return -sv_mcast_detach(to_svqp(qp), gid);
}

/*
 * RoCE needs an Ethernet address for a GID; softverbs does not frame Ethernet, so it
 * answers with a locally administered MAC derived from the GID and no VLAN.
 */
int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
				uint8_t eth_mac[6], uint16_t *vid)
{
	if (!context || !attr || !eth_mac || !vid || !attr->is_global)
		return EINVAL;
	eth_mac[0] = 0x02;
	eth_mac[1] = 0x00;
	memcpy(&eth_mac[2], &attr->grh.dgid.raw[12], 4);
	*vid = 0xffff;
	return 0;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return EOPNOTSUPP;
}

int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return EOPNOTSUPP;
}

