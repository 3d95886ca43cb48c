/*
 * Addresses and sockets: sockaddr helpers, the GID of an address, and the TCP socket an
 * id connects or listens with. Pure functions of their arguments; no lock, no state.
 */
#include "cma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int cma_sockaddr_len(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	default:
		return 0;
	}
}

static bool same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

/* An address of this host (of any of its interfaces, or loopback). */
bool cma_addr_is_local(const struct sockaddr *sa)
{
	struct ifaddrs *ifs, *i;
	bool local = false;

	if (sa->sa_family == AF_INET &&
	    (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127)
		return true;
	if (sa->sa_family == AF_INET6 &&
	    IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr))
		return true;
	if (getifaddrs(&ifs))
		return false;
	for (i = ifs; i && !local; i = i->ifa_next)
		local = i->ifa_addr && same_ip(i->ifa_addr, sa);
	freeifaddrs(ifs);
	return local;
}

/* The index of the interface holding address @sa; 0 if none does. */
unsigned int cma_addr_ifindex(const struct sockaddr *sa)
{
	struct ifaddrs *ifs, *i;
	unsigned int idx = 0;

	if (getifaddrs(&ifs))
		return 0;
	for (i = ifs; i && !idx; i = i->ifa_next)
		if (i->ifa_addr && same_ip(i->ifa_addr, sa))
			idx = if_nametoindex(i->ifa_name);
	freeifaddrs(ifs);
	return idx;
}

/* 127.0.0.0/8 or ::1, or no address (unbound, or the wildcard, as softverbs has always
 * taken it for a group): an id there reaches this host only. */
bool cma_addr_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);

		return (a >> 24) == 127 || a == INADDR_ANY;
	}
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr) ||
		       IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return true;
}

/*
 * softverbs0 answers on loopback, as rxe does on lo: an id bound to 127.0.0.1 or ::1 is
 * the device's (id->verbs is set) and reaches this host's ids. With SOFTVERBS_LOOPBACK=0
 * such a bind holds the address and port but ties the id to no device, as a wildcard
 * bind does (its connections still get the device). For stacks that probe loopback
 * first for the address they listen on and hand to their peers, and take it when the
 * bound id has a device (libfabric's verbs provider): between hosts that address must
 * be an interface's, which they then take from the device's interfaces.
 */
bool cma_loopback_is_device(void)
{
	const char *env = getenv("SOFTVERBS_LOOPBACK");

	return !(env && !strcmp(env, "0"));
}

/* The GID an IP address has in the device's table: IPv4 mapped, IPv6 as is. */
void cma_gid_from_addr(union ibv_gid *gid, const struct sockaddr *sa)
{
	memset(gid, 0, sizeof(*gid));
	if (sa->sa_family == AF_INET) {
		gid->raw[10] = 0xff;
		gid->raw[11] = 0xff;
		memcpy(&gid->raw[12], &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(gid->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

uint16_t cma_port_of(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

/* A multicast group address (IPv4 class D, IPv6 ff00::/8). */
bool cma_addr_is_multicast(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return IN_MULTICAST(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_MULTICAST(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

/* --- sockets ------------------------------------------------------------------------- */

/* A TCP socket for @id bound to @addr, with the id's options: the fd, or -errno. */
int cma_bound_socket(const struct cma_id *id, const struct sockaddr *addr)
{
	int one = 1, fd, err;

	fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (addr->sa_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &(int){ id->afonly }, sizeof(int));
	if (id->tos)
		setsockopt(fd, IPPROTO_IP, IP_TOS, &(int){ id->tos }, sizeof(int));
	if (bind(fd, addr, (socklen_t)cma_sockaddr_len(addr))) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* Sends all of @len bytes now: they are small and the socket is fresh. */
int cma_send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };

			if (poll(&pfd, 1, 1000) <= 0)
				return -ETIMEDOUT;
			continue;
		}
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * The source address this host would use towards @dst (port 0), from the routing
 * table: a UDP socket's connect() sends nothing and fails when there is no route.
 * 0, or -errno (-ENETUNREACH: no route).
 */
int cma_route_source(const struct sockaddr *dst, struct sockaddr_storage *src)
{
	socklen_t len = sizeof(*src);
	int fd, err = 0;

	fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, dst, (socklen_t)cma_sockaddr_len(dst)) ||
	    getsockname(fd, (struct sockaddr *)src, &len))
		err = -errno;
	close(fd);
	if (err)
		return err;
	if (src->ss_family == AF_INET)
		((struct sockaddr_in *)src)->sin_port = 0;
	else
		((struct sockaddr_in6 *)src)->sin6_port = 0;
	return 0;
}

static bool env_is(const char *name, const char *value)
{
	const char *e = getenv(name);

	return e && !strcmp(e, value);
}

/* SOFTVERBS_CM_WIRE=iwarp: connect as to another host even when the peer is on this
 * one (the active side decides; a listener follows the request it gets). */
bool cma_iwarp_forced(void)
{
	return env_is("SOFTVERBS_CM_WIRE", "iwarp");
}

/* SOFTVERBS_CM_RFC7306=1 (on both ends): the user says the peer is softverbs, so RFC
 * 7306 atomics and immediate data may be used. Nothing a siw peer could see tells it
 * otherwise (docs/conformance.md). */
bool cma_rfc7306_wanted(void)
{
	return env_is("SOFTVERBS_CM_RFC7306", "1");
}

/* The MPA C bit we ask for: on unless SOFTVERBS_IWARP_CRC=0 (as the iWARP wire). */
bool cma_mpa_crc_wanted(void)
{
	return !env_is("SOFTVERBS_IWARP_CRC", "0");
}
