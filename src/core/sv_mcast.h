/*
 * UD multicast (IBA 10.5.2.5): a QP attached to a group receives a copy of what is sent
 * to the group's GID with QPN 0xFFFFFF. Membership and who the members are is the
 * wire's (sv_wire_ops.mcast_*); these check what verbs require first.
 */
#ifndef SV_MCAST_H
#define SV_MCAST_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <string.h>

#include "core/sv_device.h"

enum { SV_MCAST_MEMBERS_MAX = 64 }; /* copies one multicast send fans out to */

struct sv_qp;

enum { SV_MCAST_IF_ALL = -1 }; /* sv_mcast_attach: the group on every interface's link */

/* 0, or -EINVAL (not UD, not a multicast GID), -ENOMEM, -errno of the wire. Attaching
 * twice to one group is 0 (as rxe). Members on other hosts reach the QP through the
 * links of @ifindex (an interface, SV_MCAST_IF_ALL, or 0: none, this host's only). */
int sv_mcast_attach(struct sv_qp *qp, const union ibv_gid *mgid, int ifindex);
/* 0, or -EINVAL if @qp is not attached to @mgid. */
int sv_mcast_detach(struct sv_qp *qp, const union ibv_gid *mgid);
/* How many groups @qp is attached to. */
int sv_mcast_count(struct sv_qp *qp);

/* An IPv6 multicast GID, or an IPv4-mapped one of 224.0.0.0/4 (what RoCE makes of an
 * IPv4 group; the kernel's rdma_is_multicast_addr). */
static inline int sv_gid_is_multicast(const union ibv_gid *gid)
{
	static const unsigned char v4mapped[12] = { [10] = 0xff, [11] = 0xff };

	if (gid->raw[0] == 0xff)
		return 1;
	return !memcmp(gid->raw, v4mapped, sizeof(v4mapped)) && (gid->raw[12] & 0xf0) == 0xe0;
}

#endif
