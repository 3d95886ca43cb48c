/*
 * UD multicast on one host. A QP's membership of a group is an abstract socket it binds,
 * named softverbs/mcast/<MGID in hex>/<QPN in hex>: the kernel drops the name when the
 * process exits, so a crashed member leaves nothing stale. A sender lists the members
 * from /proc/net/unix and sends one copy to each (the same QPN lookup as any UD send).
 */
#ifndef SV_MCAST_H
#define SV_MCAST_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <string.h>

#include "core/sv_device.h"

enum { SV_MCAST_MEMBERS_MAX = 64 }; /* copies one multicast send fans out to */

struct sv_qp;

/* 0, or -EINVAL (not UD, not a multicast GID), -ENOMEM, -errno of the socket. Attaching
 * twice to one group is 0 (as rxe). */
int sv_mcast_attach(struct sv_qp *qp, const union ibv_gid *mgid);
/* 0, or -EINVAL if @qp is not attached to @mgid. */
int sv_mcast_detach(struct sv_qp *qp, const union ibv_gid *mgid);
/* How many groups @qp is attached to. */
int sv_mcast_count(struct sv_qp *qp);

/* The QPNs attached to @mgid on this host (at most @max); -errno if unreadable. */
int sv_mcast_members(const union ibv_gid *mgid, uint32_t *qpns, int max);

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
