/*
 * What this librdmacm does not offer yet, answered the way rdma-core answers a device
 * without the feature: multicast (no UD multicast in the shm wire yet), ECE (no vendor
 * options), rsockets (ENOSYS: the calls exist so that programs load and fail cleanly).
 */
#include "cma.h"

#include <errno.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <poll.h>
#include <rdma/rsocket.h>

static int fail(int err)
{
	errno = err;
	return -1;
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	(void)context;
	if (!id || !addr)
		return fail(EINVAL);
	return fail(EOPNOTSUPP);
}

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc_join_attr,
			   void *context)
{
	(void)context;
	if (!id || !mc_join_attr)
		return fail(EINVAL);
	return fail(EOPNOTSUPP);
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (!id || !addr)
		return fail(EINVAL);
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
