/*
 * Multicast groups, and what this librdmacm does not offer yet, answered the way
 * rdma-core answers a device without the feature: ECE (no vendor options), rsockets
 * (ENOSYS: the calls exist so that programs load and fail cleanly).
 */
#include "cma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <poll.h>
#include <rdma/rsocket.h>

/*
 * Multicast: a join needs no fabric (no SA; the QP's attach joins the IP group for the
 * other hosts, src/wire/udp), so MULTICAST_JOIN comes at once. As
 * in rdma-core, reading that event attaches the id's QP (unless send-only); the event
 * carries the address handle of the group (QPN 0xFFFFFF, Q_Key RDMA_UDP_QKEY) and the
 * join's context in param.ud.private_data. The MGID of an IPv4 group is its mapped
 * address (::ffff:a.b.c.d), of an IPv6 group the address itself (RoCE).
 */

static bool same_group(const struct sockaddr_storage *a, const struct sockaddr *b)
{
	union ibv_gid ga, gb;

	if (a->ss_family != b->sa_family)
		return false;
	cma_gid_from_addr(&ga, (const struct sockaddr *)a);
	cma_gid_from_addr(&gb, b);
	return !memcmp(&ga, &gb, sizeof(ga));
}

static void mc_free(struct cma_id *id, struct cma_mc *mc)
{
	if (mc->attached && id->id.qp)
		ibv_detach_mcast(id->id.qp, &mc->mgid, 0xc000);
	free(mc);
}

void cma_mc_leave_all(struct cma_id *id)
{
	while (id->mcs) {
		struct cma_mc *mc = id->mcs;

		id->mcs = mc->next;
		mc_free(id, mc);
	}
}

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc_join_attr,
			   void *context)
{
	struct cma_id *cid = to_cma_id(id);
	struct cma_event *e;
	struct cma_mc *mc;
	struct sockaddr *addr;

	if (!id || !mc_join_attr)
		return fail(EINVAL);
	addr = mc_join_attr->addr;
	if (!(mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !addr ||
	    (mc_join_attr->comp_mask & ~(uint32_t)(RDMA_CM_JOIN_MC_ATTR_ADDRESS |
						   RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS)))
		return fail(EINVAL);
	if ((mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) &&
	    mc_join_attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER &&
	    mc_join_attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
		return fail(EINVAL);
	if (!id->verbs || id->qp_type != IBV_QPT_UD || !cma_addr_is_multicast(addr))
		return fail(EINVAL);
	mc = calloc(1, sizeof(*mc));
	if (!mc)
		return fail(ENOMEM);
	memcpy(&mc->addr, addr, (size_t)cma_sockaddr_len(addr));
	cma_gid_from_addr(&mc->mgid, addr);
	mc->context = context;
	mc->sendonly = (mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) &&
		       mc_join_attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;

	pthread_mutex_lock(&cma_lock);
	e = cma_event_new(cid, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
	if (!e) {
		pthread_mutex_unlock(&cma_lock);
		free(mc);
		return fail(ENOMEM);
	}
	mc->next = cid->mcs;
	cid->mcs = mc;
	e->work = CMA_WORK_JOIN;
	e->mgid = mc->mgid;
	e->ev.param.ud.private_data = context;
	e->ev.param.ud.qp_num = 0xffffff;
	e->ev.param.ud.qkey = RDMA_UDP_QKEY;
	e->ev.param.ud.ah_attr.is_global = 1;
	e->ev.param.ud.ah_attr.grh.dgid = mc->mgid;
	e->ev.param.ud.ah_attr.grh.sgid_index = (uint8_t)cma_sgid_index(cid);
	e->ev.param.ud.ah_attr.grh.hop_limit = 1;
	e->ev.param.ud.ah_attr.grh.traffic_class = cid->tos;
	e->ev.param.ud.ah_attr.dlid = 0xc000;
	e->ev.param.ud.ah_attr.port_num = 1;
	cma_event_post(e);
	pthread_mutex_unlock(&cma_lock);
	if (cid->sync)
		return cma_wait_event(cid);
	return 0;
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	struct rdma_cm_join_mc_attr_ex attr = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
		.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER,
		.addr = addr,
	};

	if (!id || !addr)
		return fail(EINVAL);
	return rdma_join_multicast_ex(id, &attr, context);
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct cma_id *cid = to_cma_id(id);
	struct cma_mc **p, *mc;

	if (!id || !addr)
		return fail(EINVAL);
	pthread_mutex_lock(&cma_lock);
	for (p = &cid->mcs; (mc = *p); p = &mc->next) {
		if (same_group(&mc->addr, addr)) {
			*p = mc->next;
			mc_free(cid, mc);
			pthread_mutex_unlock(&cma_lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&cma_lock);
	return fail(EADDRNOTAVAIL); /* never joined */
}

int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece)
		return fail(EINVAL);
	return fail(EOPNOTSUPP);
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece)
		return fail(EINVAL);
	memset(ece, 0, sizeof(*ece));
	return fail(EOPNOTSUPP);
}

/* --- rsockets: not provided -------------------------------------------------------- */

int rsocket(int domain, int type, int protocol)
{
	(void)domain, (void)type, (void)protocol;
	return fail(ENOSYS);
}

int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	(void)socket, (void)addr, (void)addrlen;
	return fail(ENOSYS);
}

int rlisten(int socket, int backlog)
{
	(void)socket, (void)backlog;
	return fail(ENOSYS);
}

int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	(void)socket, (void)addr, (void)addrlen;
	return fail(ENOSYS);
}

int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	(void)socket, (void)addr, (void)addrlen;
	return fail(ENOSYS);
}

int rshutdown(int socket, int how)
{
	(void)socket, (void)how;
	return fail(ENOSYS);
}

int rclose(int socket)
{
	(void)socket;
	return fail(ENOSYS);
}

ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	(void)socket, (void)buf, (void)len, (void)flags;
	return fail(ENOSYS);
}

ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr,
		  socklen_t *addrlen)
{
	(void)socket, (void)buf, (void)len, (void)flags, (void)src_addr, (void)addrlen;
	return fail(ENOSYS);
}

ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	(void)socket, (void)msg, (void)flags;
	return fail(ENOSYS);
}

ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	(void)socket, (void)buf, (void)len, (void)flags;
	return fail(ENOSYS);
}

ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
		const struct sockaddr *dest_addr, socklen_t addrlen)
{
	(void)socket, (void)buf, (void)len, (void)flags, (void)dest_addr, (void)addrlen;
	return fail(ENOSYS);
}

ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	(void)socket, (void)msg, (void)flags;
	return fail(ENOSYS);
}

ssize_t rread(int socket, void *buf, size_t count)
{
	(void)socket, (void)buf, (void)count;
	return fail(ENOSYS);
}

ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	(void)socket, (void)iov, (void)iovcnt;
	return fail(ENOSYS);
}

ssize_t rwrite(int socket, const void *buf, size_t count)
{
	(void)socket, (void)buf, (void)count;
	return fail(ENOSYS);
}

ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	(void)socket, (void)iov, (void)iovcnt;
	return fail(ENOSYS);
}

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	(void)fds, (void)nfds, (void)timeout;
	return fail(ENOSYS);
}

int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
	    struct timeval *timeout)
{
	(void)nfds, (void)readfds, (void)writefds, (void)exceptfds, (void)timeout;
	return fail(ENOSYS);
}

int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	(void)socket, (void)addr, (void)addrlen;
	return fail(ENOSYS);
}

int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	(void)socket, (void)addr, (void)addrlen;
	return fail(ENOSYS);
}

int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	(void)socket, (void)level, (void)optname, (void)optval, (void)optlen;
	return fail(ENOSYS);
}

int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
	(void)socket, (void)level, (void)optname, (void)optval, (void)optlen;
	return fail(ENOSYS);
}

int rfcntl(int socket, int cmd, ... /* arg */)
{
	(void)socket, (void)cmd;
	return fail(ENOSYS);
}

off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	(void)socket, (void)buf, (void)len, (void)prot, (void)flags, (void)offset;
	return fail(ENOSYS);
}

int riounmap(int socket, void *buf, size_t len)
{
	(void)socket, (void)buf, (void)len;
	return fail(ENOSYS);
}

size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	(void)socket, (void)buf, (void)count, (void)offset, (void)flags;
	errno = ENOSYS;
	return 0;
}
