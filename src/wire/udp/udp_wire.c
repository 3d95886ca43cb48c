/*
 * The UDP wire (udp_wire.h): UD datagrams between hosts as RoCE v2 packets on UDP port
 * 4791, through the process's socket on that port (src/wire/roce/rv_port.h: one user's
 * processes share it, each gets the datagrams of its QPN blocks), one sendmsg each; and
 * on the same socket RC QPs' packets (sv_wire_roce: udp_rc.c numbers them, the core
 * retransmits), taken only from the path's peer address, a request the responder holds
 * dropped (its requester sends it again), the acknowledgements a poll owes sent at its
 * end.
 *
 * Receiving: whichever QP of the process polls first reads the socket (a budget at a
 * time, under the port's mutex), checks each datagram's ICRC, and delivers what is its
 * own, and another QP's too when it can take that QP's responder role at once (as a NIC
 * puts a datagram in the receive queue it is for); else the datagram waits in that QP's
 * queue until it polls. A datagram the responder holds (its QP not in RTR yet) waits in
 * the queue too. A full queue (128) drops what comes: UD is unreliable, as a NIC's
 * receive queue without room is.
 *
 * No system call for nothing: a poll reads the socket only when the port's watch
 * (edge-triggered, always armed: the progress thread's epoll) said that datagrams came
 * (`ready`), or while datagrams came lately (UDP_HOT_NS): a UD QP that talks only to its
 * host's QPs (shm) polls without a recvmsg, as the shm path must. A reader clears
 * `ready` before it reads until the socket is empty, so a datagram arriving after its
 * last read raises it again. The first datagram after a quiet spell costs a wake-up of
 * the progress thread. While the application busy-polls every RC (RoCE) QP of the
 * port and it has no UD QP, the progress thread parks the watch (udp_park: each
 * datagram's wake-up took the CPU the spinning application needed, twice the
 * ib_send_lat of today), and the polls read the socket each time (`parked`), as
 * iWARP's polls read theirs; arming any of them puts the watch back.
 *
 * Waking: arm() says idle only with the QP's queue empty and `ready` down (under the
 * port's mutex, as routing queues): a datagram already there keeps the thread awake,
 * one arriving later fires the watch, which wakes it (it then polls every QP).
 */
#include "wire/udp/udp_wire.h"

#include <endian.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/sv_engine.h"
#include "core/sv_mcast.h"
#include "core/sv_mr.h"
#include "core/sv_obj.h"
#include "core/sv_path.h"
#include "util/sv_log.h"
#include "wire/roce/rv_cm.h"
#include "wire/roce/rv_port.h"
#include "wire/roce/rv_proto.h"
#include "wire/sv_qpn.h"
#include "wire/udp/udp_rc.h"
#include "util/sv_app.h"
#include "util/sv_lock.h"

enum {
	UDP_QUEUE = 128, /* datagrams a QP keeps for its next poll (allocated when needed) */
	UDP_BUDGET = 32, /* datagrams read per poll */
	UDP_RCVBUF = 8 << 20, /* the socket's receive buffer asked for (grow_rcvbuf) */
	UDP_PAYLOAD_MAX = 4096, /* one packet of the path MTU: a UD message (IBA 10.7.2.2) */
	UDP_DGRAM_MAX = RV_HDR_MAX + UDP_PAYLOAD_MAX + 3 + RV_ICRC,
	/* A GSO batch (UDP_SEGMENT): packets of one message that go in one sendmsg */
	UDP_GSO_PKTS = 64,      /* the kernel's UDP_MAX_SEGMENTS */
	UDP_GSO_BYTES = 65507,  /* one UDP datagram's payload at most (IPv4) */
	UDP_GSO_IOV = 256,
	UDP_GRO_BUF = 65536,
};
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#define UDP_HOT_NS 1000000ull /* polls read the socket this long after a datagram */
#define RESTEER_NS 1000000000ull /* a stray makes the port look again, this often at most */

/* A MAD to QP1 (udp_dgram.gsi): to route to the process it is for, or to take here. */
enum { GSI_NONE, GSI_ROUTE, GSI_HERE };

struct udp_dgram {
	struct rv_pkt pkt;
	struct in6_addr src, dst; /* IPv6, or IPv4 mapped: the GIDs of the GRH */
	uint32_t len;
	uint8_t gsi;              /* GSI_*: a MAD to QP1, from the network or forwarded */
	uint8_t buf[UDP_DGRAM_MAX];
};

struct udp_qp;

/*
 * An RC QP's packets waiting to go in one sendmsg with UDP_SEGMENT: the kernel cuts the
 * buffer into datagrams of `seg` bytes (the last may be shorter) and sends them through
 * the stack as one (a veth pair or loopback carries it whole to a receiver with UDP_GRO):
 * one system call and one pass of the stack for up to 64 packets instead of one each.
 * IPv4 numbers the segments' identifications 0, 1, ... (each ICRC computed so). One for
 * requests (sq.lock) and one for answers (rx_busy), allocated at its first packet; the
 * end of a transmit (roce_tx_flush: requests) or an answer's last packet, a shorter
 * packet, a full batch or a full window sends it.
 */
struct udp_gso {
	uint32_t seg, bytes;   /* each packet's length but the last's (0: empty); the sum */
	int n_pkts, n_iov;
	int first[UDP_GSO_PKTS]; /* where each packet's pieces start in iov */
	uint8_t pad[UDP_GSO_PKTS];
	uint8_t hdr[UDP_GSO_PKTS][RV_HDR_MAX];
	uint8_t tail[UDP_GSO_PKTS][3 + RV_ICRC];
	struct iovec iov[UDP_GSO_IOV];
};

/* A QPN block with UD or RC (RoCE) QPs here: its QPs, by the number's low byte (port.lock). */
struct udp_block {
	struct udp_block *next;
	uint32_t block;
	struct udp_qp *qps[SV_QPN_BLOCK];
	int n_qps;
};

/*
 * A multicast group UD QPs of the process are attached to (port.lock): the members, and
 * the socket's membership of the IP group (joined with the first member, left with the
 * last), on every interface that is up and takes multicast, loopback aside.
 */
enum { UDP_MCAST_IFS = 16 }; /* interfaces a group is joined on, at most */

struct udp_group {
	struct udp_group *next;
	uint8_t mgid[16];
	struct udp_qp *qps[SV_MAX_MCAST_QP_ATTACH];
	int n_qps;
	unsigned int ifs[UDP_MCAST_IFS]; /* the interfaces the port's socket joined it on */
	int n_ifs;
};

struct udp_qp {
	struct sv_qp *qp;
	struct udp_block *b;
	uint32_t qpn;
	uint32_t psn;            /* sq.lock */
	/* RC (sv_wire_roce): the connection's packets, and its peer from the QP's path */
	struct udp_rc *rc;
	enum ibv_qp_state seen;  /* the state publish last saw (RTR, RTS: start the PSNs) */
	uint8_t sgid[16], dgid[16];
	struct sockaddr_storage to;
	socklen_t to_len;        /* 0: no path to the peer (not global, link-local) */
	struct udp_gso *gso[2];  /* requests (sq.lock), answers (rx_busy); NULL until needed */
	bool no_gso;             /* the route does not take UDP_SEGMENT (fragments, no
				  * checksum offload): one sendmsg a packet */
	_Atomic uint32_t bad_pkeys;
	atomic_bool parked;      /* the application's polls move it (udp_park; watch_lock) */
	struct udp_dgram *queue; /* UDP_QUEUE, allocated when first needed; port.lock */
	uint32_t head, tail;
	_Atomic uint32_t queued; /* head - tail, for a poll's look without the lock */
};

/* The process's socket on the RoCE v2 port, open while it has UD or RC (RoCE) QPs. */
static struct {
	pthread_mutex_t lock; /* the socket's reads, the blocks and their QPs, queues, in */
	struct rv_port *rp;
	int fd;
	uint16_t port;
	/* Datagrams longer than the route's MTU (up to 4096 bytes between softverbs hosts
	 * over a 1500-byte link): sent from this second socket, IP fragmentation allowed,
	 * opened at the first: its port << 32 | its descriptor (0: none yet). */
	_Atomic uint64_t frag;
	uint64_t watch; /* the engine's edge-triggered watch of fd */
	/* The watch is parked while the application's polls move every QP of the port
	 * (udp_park): its QPs' polls then read the socket, and no datagram wakes the
	 * progress thread. Taken before the engine's lock. */
	pthread_mutex_t watch_lock;
	int unparked, n_parked; /* QPs the watch is for (UD's always), and the others */
	atomic_bool parked;     /* the watch is out: polls read (watch_lock to change) */
	uint64_t reg_watch; /* ... and of the registry's inotify (0: none) */
	atomic_bool ready; /* the watch saw datagrams come: a poll is to read */
	atomic_bool recheck; /* the registry changed: a poll is to see whether it matters */
	_Atomic uint64_t hot_until; /* polls read until then (sv_now_ns) */
	uint64_t resteer_at; /* when a stray may make the port look again (sv_now_ns) */
	struct udp_block *blocks;
	int n_qps;
	struct udp_group *groups;
	struct udp_qp *gsi; /* the process's QP1 for the IB CM (sv_qp_set_gsi), or NULL */
	struct rv_icrc_ids ids;
	struct udp_dgram in; /* the datagram being read */
	/* UDP_GRO: a read may bring several datagrams of one sender, each `gro_seg` bytes
	 * (the last may be shorter), which the reads that follow take one by one */
	uint8_t *gro;        /* UDP_GRO_BUF bytes (NULL: the socket gives one at a time) */
	uint32_t gro_len, gro_off, gro_seg;
	struct in6_addr gro_src, gro_dst;
	uint16_t gro_sport;
} port = { .lock = PTHREAD_MUTEX_INITIALIZER, .watch_lock = PTHREAD_MUTEX_INITIALIZER,
	    .fd = -1 };

/* Above port.lock: opening and closing the port, adding and removing QPs. */
static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;

/* A UD QP's far wire, or an RC QP's wire (sv_wire_roce). */
static struct udp_qp *udp_of(struct sv_qp *qp)
{
	return qp->wire == &sv_wire_roce ? qp->wire_qp : qp->far_qp;
}

/* watch_lock: the watch parked exactly while QPs are and none needs it. Unparked, what
 * came meanwhile reports at once, and the polls read (`ready`). */
static void watch_update_locked(void)
{
	bool want = !port.unparked && port.n_parked;

	if (want == atomic_load(&port.parked))
		return;
	if (want) {
		atomic_store(&port.parked, true); /* (the polls read before the watch is out) */
		sv_engine_park(port.watch);
	} else {
		sv_engine_unpark(port.watch);
		atomic_store(&port.ready, true);
		atomic_store(&port.parked, false);
	}
}

/* @uq counted (@d 1) or no more (-1), parked or not (watch_lock; then
 * watch_update_locked). */
static void watch_count_locked(struct udp_qp *uq, int d)
{
	if (atomic_load(&uq->parked))
		port.n_parked += d;
	else
		port.unparked += d;
}

/* A QP comes (@d 1) or leaves (-1). */
static void watch_count(struct udp_qp *uq, int d)
{
	pthread_mutex_lock(&port.watch_lock);
	watch_count_locked(uq, d);
	watch_update_locked();
	pthread_mutex_unlock(&port.watch_lock);
}

/* RV_PORT, or SOFTVERBS_ROCE_PORT (tests, and hosts where the kernel's rxe holds 4791). */
static uint16_t roce_port(void)
{
	const char *s = getenv("SOFTVERBS_ROCE_PORT");
	char *end;
	unsigned long v;

	if (!s || !*s)
		return RV_PORT;
	v = strtoul(s, &end, 10);
	if (*end || v == 0 || v > 65535) {
		static _Atomic bool told;

		if (!atomic_exchange(&told, true))
			sv_warn("SOFTVERBS_ROCE_PORT=%s: not a port; using %u", s, RV_PORT);
		return RV_PORT;
	}
	return (uint16_t)v;
}

/* --- the port -------------------------------------------------------------------------- */

/* The progress thread (engine lock): datagrams came; the pass that follows polls every
 * QP, and the application's polls read them too. */
static void woken(void *arg, uint32_t events)
{
	(void)arg;
	(void)events;
	atomic_store_explicit(&port.ready, true, memory_order_release);
}

/* The progress thread (engine lock): the registry changed (rv_port.h); the pass that
 * follows polls every QP, which look. */
static void registry_changed(void *arg, uint32_t events)
{
	(void)arg;
	(void)events;
	atomic_store_explicit(&port.recheck, true, memory_order_relaxed);
	atomic_store_explicit(&port.ready, true, memory_order_release);
}

/*
 * A receive buffer for bursts: a sender may outrun the poller for a while (perftest's
 * UD bandwidth test sends 128 datagrams at a time, each three IP fragments on a 1500-byte
 * MTU, which the socket counts at several times their size). Beyond rmem_max only with
 * CAP_NET_ADMIN (SO_RCVBUFFORCE); else as much as rmem_max allows.
 */
static void grow_rcvbuf(int fd)
{
	int want = UDP_RCVBUF;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof(want)))
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof(want));
}

/* setup_lock: the port, opened if it is not yet. */
/*
 * Multicast on a socket of the port: what it sends to a group does not come back to
 * this host's sockets (the members here have their copies from the shm wire), and it
 * hears only the groups it joined (not every group another socket of the host joined).
 */
static void mcast_options(int fd)
{
	int off = 0;

	(void)setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &off, sizeof(off));
	(void)setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &off, sizeof(off));
	(void)setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, &off, sizeof(off));
#ifdef IPV6_MULTICAST_ALL
	(void)setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_ALL, &off, sizeof(off));
#endif
}

static int port_open_locked(void)
{
	int on = 1, err;

	if (port.rp)
		return 0;
	port.port = roce_port();
	err = rv_port_open(port.port, &port.rp);
	if (err)
		return err;
	port.fd = rv_port_fd(port.rp);
	/* The destination address of each datagram: the GRH's destination GID. */
	(void)setsockopt(port.fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof(on));
	(void)setsockopt(port.fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof(on));
	mcast_options(port.fd);
	grow_rcvbuf(port.fd);
	/* Datagrams that came as one GSO send are read as one (a veth pair and loopback
	 * keep them whole): the reads split them. */
	port.gro_len = port.gro_off = 0;
	if (!setsockopt(port.fd, IPPROTO_UDP, UDP_GRO, &on, sizeof(on)) &&
	    !(port.gro = malloc(UDP_GRO_BUF)))
		(void)setsockopt(port.fd, IPPROTO_UDP, UDP_GRO, &(int){ 0 }, sizeof(int));
	sv_engine_lock();
	atomic_store(&port.ready, true); /* (whatever came before the watch) */
	err = sv_engine_watch_edge_locked(port.fd, woken, NULL, &port.watch);
	port.reg_watch = 0;
	if (!err && rv_port_watch_fd(port.rp) >= 0) {
		err = sv_engine_watch_edge_locked(rv_port_watch_fd(port.rp), registry_changed,
						  NULL, &port.reg_watch);
		if (err)
			sv_engine_unwatch_locked(port.watch);
	}
	sv_engine_unlock();
	if (err) {
		rv_port_close(port.rp);
		port.rp = NULL;
		port.fd = -1;
	}
	return err;
}

/* setup_lock: the last UD or RoCE QP left; the port is the user's other processes' alone. */
static void port_close_locked(void)
{
	uint64_t frag = atomic_exchange(&port.frag, 0);

	sv_engine_lock();
	sv_engine_unwatch_locked(port.watch);
	if (port.reg_watch)
		sv_engine_unwatch_locked(port.reg_watch);
	sv_engine_unlock();
	rv_port_close(port.rp);
	port.rp = NULL;
	port.fd = -1;
	free(port.gro);
	port.gro = NULL;
	if (frag)
		close((int)(uint32_t)frag);
}

/*
 * The socket for datagrams longer than the route's MTU, opened at the first (under
 * some QP's sq.lock: one socket call, not blocking): an ephemeral port, fragmentation
 * allowed. Such a datagram is not RoCE v2 as a NIC takes it (a NIC's MTU bounds UD, and
 * its IP header's identification, which the ICRC covers, is the kernel's choice): a
 * softverbs receiver, which solves for the identification, takes it. Returns its port
 * << 32 | its descriptor, 0 if it cannot.
 */
static uint64_t frag_socket(void)
{
	struct sockaddr_storage ss = { .ss_family = rv_port_v6(port.rp) ? AF_INET6 : AF_INET };
	socklen_t len = sizeof(ss);
	uint64_t frag = atomic_load(&port.frag), expected = 0;
	int fd, off = 0, dont = IP_PMTUDISC_DONT, dont6 = IPV6_PMTUDISC_DONT;
	uint16_t sport;

	if (frag)
		return frag;
	fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	if ((ss.ss_family == AF_INET6 &&
	     (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) ||
	      setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &dont6, sizeof(dont6)))) ||
	    setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &dont, sizeof(dont)) ||
	    bind(fd, (struct sockaddr *)&ss,
		 ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
					  : sizeof(struct sockaddr_in)) ||
	    getsockname(fd, (struct sockaddr *)&ss, &len)) {
		close(fd);
		return 0;
	}
	mcast_options(fd);
	sport = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					       : ((struct sockaddr_in *)&ss)->sin_port);
	frag = (uint64_t)sport << 32 | (uint32_t)fd;
	if (!atomic_compare_exchange_strong(&port.frag, &expected, frag)) {
		close(fd); /* another QP's send opened it meanwhile */
		return expected;
	}
	return frag;
}

/* port.lock: the block of @block, added if it is not yet. */
static struct udp_block *block_get_locked(uint32_t block, int *err)
{
	struct udp_block *b;

	for (b = port.blocks; b; b = b->next)
		if (b->block == block)
			return b;
	b = calloc(1, sizeof(*b));
	if (!b) {
		*err = -ENOMEM;
		return NULL;
	}
	*err = rv_port_claim(port.rp, block);
	if (*err) {
		free(b);
		return NULL;
	}
	b->block = block;
	b->next = port.blocks;
	port.blocks = b;
	return b;
}

/* port.lock: the block's last QP left; its datagrams are nobody's here now. */
static void block_put_locked(struct udp_block *b)
{
	struct udp_block **p = &port.blocks;

	while (*p != b)
		p = &(*p)->next;
	*p = b->next;
	rv_port_release(port.rp, b->block);
	free(b);
}

static struct udp_block *block_find_locked(uint32_t block)
{
	for (struct udp_block *b = port.blocks; b; b = b->next)
		if (b->block == block)
			return b;
	return NULL;
}

static bool v4_mapped(const uint8_t gid[16])
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return !memcmp(gid, prefix, sizeof(prefix));
}

/* --- multicast between hosts -------------------------------------------------------- */

/* SOFTVERBS_MCAST_IFS: the interfaces (names, comma-separated; "none") on which a group
 * that ibv_attach_mcast names for every link (SV_MCAST_IF_ALL) is joined; unset: all. */
static bool mcast_if_allowed(const char *name)
{
	const char *list = getenv("SOFTVERBS_MCAST_IFS");
	size_t len = strlen(name);

	if (!list)
		return true;
	for (const char *p = list; *p;) {
		size_t n = strcspn(p, ",");

		if (n == len && !strncmp(p, name, n))
			return true;
		p += n + (p[n] == ',');
	}
	return false;
}

/* The port's socket joins (@join) or leaves the IP group of @mgid (an IPv4 group mapped,
 * or IPv6) on interface @idx: 0 or -1 (errno set). */
static int membership(const uint8_t mgid[16], unsigned int idx, bool join)
{
	if (v4_mapped(mgid)) {
		struct ip_mreqn m = { .imr_ifindex = (int)idx };

		memcpy(&m.imr_multiaddr, mgid + 12, 4);
		return setsockopt(port.fd, IPPROTO_IP, join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP,
				  &m, sizeof(m));
	}
	{
		struct ipv6_mreq m = { .ipv6mr_interface = idx };

		memcpy(&m.ipv6mr_multiaddr, mgid, 16);
		return setsockopt(port.fd, IPPROTO_IPV6, join ? IPV6_JOIN_GROUP : IPV6_LEAVE_GROUP,
				  &m, sizeof(m));
	}
}

/*
 * setup_lock, port.lock: the port's socket joins @g's IP group (an IPv4 group mapped, or
 * IPv6) on the link of interface @ifindex, or of every interface (SV_MCAST_IF_ALL,
 * SOFTVERBS_MCAST_IFS), of those that are up and take multicast (loopback does not):
 * the port spans the host's interfaces, as its GIDs do. Each it joins on is kept in @g
 * for the leave.
 */
static void group_join(struct udp_group *g, int ifindex)
{
	struct ifaddrs *ifs;
	bool v4 = v4_mapped(g->mgid);

	if (!ifindex || (!v4 && !rv_port_v6(port.rp)) || getifaddrs(&ifs))
		return; /* (an IPv6 group on a host without IPv6) */
	for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
		unsigned int idx = if_nametoindex(i->ifa_name);
		bool seen = false;

		if ((i->ifa_flags & (IFF_UP | IFF_MULTICAST | IFF_LOOPBACK)) !=
			    (IFF_UP | IFF_MULTICAST) ||
		    !idx || (ifindex > 0 ? idx != (unsigned int)ifindex : !mcast_if_allowed(i->ifa_name)))
			continue;
		for (int k = 0; k < g->n_ifs && !seen; k++)
			seen = g->ifs[k] == idx;
		if (seen || g->n_ifs == UDP_MCAST_IFS)
			continue;
		if (!membership(g->mgid, idx, true))
			g->ifs[g->n_ifs++] = idx;
		else /* (ENOBUFS: more groups than net.ipv4.igmp_max_memberships) */
			sv_warn("roce: joining a multicast group on %s: %s", i->ifa_name,
				strerror(errno));
	}
	freeifaddrs(ifs);
}

/* setup_lock, port.lock: the port's socket leaves @g's IP group wherever it joined it. */
static void group_unjoin(struct udp_group *g)
{
	for (int k = 0; k < g->n_ifs; k++)
		(void)membership(g->mgid, g->ifs[k], false);
	g->n_ifs = 0;
}

/* port.lock: the group of @mgid, NULL if no QP of ours is attached to it. */
static struct udp_group *group_find_locked(const uint8_t mgid[16])
{
	for (struct udp_group *g = port.groups; g; g = g->next)
		if (!memcmp(g->mgid, mgid, 16))
			return g;
	return NULL;
}

/*
 * The far wire's part of an attach (after the shm wire's, which lists the QP for its
 * host's senders): the QP hears the group's datagrams from other hosts on the links of
 * @ifindex (sv_mcast_attach), the port's socket joining the IP group there. An interface
 * that refuses costs only its datagrams (a warning): the QP is a member on this host
 * whatever happens. 0 or -ENOMEM.
 */
static int udp_mcast_attach(struct sv_qp *qp, const union ibv_gid *mgid, int ifindex)
{
	struct udp_qp *uq = udp_of(qp);
	struct udp_group *g;
	bool member = false;
	int err = 0;

	if (!uq)
		return 0;
	pthread_mutex_lock(&setup_lock);
	pthread_mutex_lock(&port.lock);
	g = group_find_locked(mgid->raw);
	if (!g) {
		g = calloc(1, sizeof(*g));
		if (!g) {
			err = -ENOMEM;
			goto out;
		}
		memcpy(g->mgid, mgid->raw, 16);
		g->next = port.groups;
		port.groups = g;
	}
	for (int i = 0; i < g->n_qps; i++)
		member = member || g->qps[i] == uq;
	if (!member && g->n_qps < SV_MAX_MCAST_QP_ATTACH)
		g->qps[g->n_qps++] = uq;
	group_join(g, ifindex);
out:
	pthread_mutex_unlock(&port.lock);
	pthread_mutex_unlock(&setup_lock);
	return err;
}

/* setup_lock, port.lock: @uq leaves @g; the last member leaves the IP group. */
static void group_leave_locked(struct udp_group *g, struct udp_qp *uq)
{
	struct udp_group **p = &port.groups;

	for (int i = 0; i < g->n_qps; i++)
		if (g->qps[i] == uq)
			g->qps[i--] = g->qps[--g->n_qps];
	if (g->n_qps)
		return;
	group_unjoin(g);
	while (*p != g)
		p = &(*p)->next;
	*p = g->next;
	free(g);
}

static int udp_mcast_detach(struct sv_qp *qp, const union ibv_gid *mgid)
{
	struct udp_qp *uq = udp_of(qp);
	struct udp_group *g;

	if (!uq)
		return 0;
	pthread_mutex_lock(&setup_lock);
	pthread_mutex_lock(&port.lock);
	g = group_find_locked(mgid->raw);
	if (g)
		group_leave_locked(g, uq);
	pthread_mutex_unlock(&port.lock);
	pthread_mutex_unlock(&setup_lock);
	return 0;
}

/* After fork() the child must not read its parent's socket (nor steer its blocks). */
static void forget_inherited(void)
{
	uint64_t frag = atomic_exchange(&port.frag, 0);

	if (frag)
		close((int)(uint32_t)frag);
	if (port.fd >= 0)
		close(port.fd); /* the parent's registry record and blocks stay the parent's */
	port.rp = NULL; /* (its memory is the parent's copy: left) */
	port.fd = -1;
	port.blocks = NULL;
	port.groups = NULL; /* (the parent's memberships: its socket's, closed here) */
	port.gsi = NULL;
	port.n_qps = 0;
	free(port.gro); /* (the child's copy) */
	port.gro = NULL;
	port.gro_len = port.gro_off = 0;
	port.unparked = port.n_parked = 0;
	atomic_store(&port.parked, false);
	pthread_mutex_init(&port.lock, NULL);
	pthread_mutex_init(&port.watch_lock, NULL);
	pthread_mutex_init(&setup_lock, NULL);
}

static void at_fork_setup(void)
{
	(void)pthread_atfork(NULL, NULL, forget_inherited);
}

/* --- set-up ---------------------------------------------------------------------------- */

static int udp_qp_take(struct sv_qp *qp, uint32_t qpn)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct udp_qp *uq;
	struct udp_block *b = NULL;
	int err;
	bool rc = qp->wire == &sv_wire_roce; /* RC, UC, XRC on RoCE; else a UD QP's far wire */
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;

	if (rc ? type != IBV_QPT_RC && type != IBV_QPT_UC && type != IBV_QPT_XRC_SEND &&
		     type != IBV_QPT_XRC_RECV
	       : type != IBV_QPT_UD)
		return -EINVAL;
	pthread_once(&once, at_fork_setup);
	uq = calloc(1, sizeof(*uq));
	if (!uq || (rc && !(uq->rc = calloc(1, sizeof(*uq->rc))))) {
		free(uq);
		return -ENOMEM;
	}
	uq->qp = qp;
	uq->qpn = qpn;
	if (rc && type == IBV_QPT_UC)
		udp_rc_uc(uq->rc);
	else if (rc && (type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV))
		udp_rc_xrc(uq->rc);
	pthread_mutex_lock(&setup_lock);
	err = port_open_locked();
	if (!err) {
		pthread_mutex_lock(&port.lock);
		b = block_get_locked(qpn >> SV_QPN_BLOCK_BITS, &err);
		if (b) {
			b->qps[qpn & (SV_QPN_BLOCK - 1)] = uq;
			b->n_qps++;
			port.n_qps++;
			uq->b = b;
			if (rc)
				qp->wire_qp = uq;
			else
				qp->far_qp = uq;
		}
		pthread_mutex_unlock(&port.lock);
		if (b)
			watch_count(uq, 1);
		if (!port.n_qps)
			port_close_locked();
	}
	pthread_mutex_unlock(&setup_lock);
	if (!b) {
		free(uq->rc);
		free(uq);
		return err;
	}
	return 0;
}

static int udp_qp_init(struct sv_qp *qp, uint32_t *qpn)
{
	(void)qp;
	(void)qpn;
	return -EOPNOTSUPP; /* a far wire only: the QP's number is its near wire's */
}

static void udp_qp_fini(struct sv_qp *qp)
{
	struct udp_qp *uq = udp_of(qp);
	struct udp_block *b = uq->b;

	pthread_mutex_lock(&setup_lock);
	pthread_mutex_lock(&port.lock);
	b->qps[uq->qpn & (SV_QPN_BLOCK - 1)] = NULL; /* no datagram is routed to it now */
	if (port.gsi == uq)
		port.gsi = NULL;
	for (struct udp_group *g = port.groups, *next; g; g = next) {
		next = g->next; /* (verbs detach first: EBUSY; this is for a QP that fails) */
		group_leave_locked(g, uq);
	}
	b->n_qps--;
	port.n_qps--;
	if (!b->n_qps)
		block_put_locked(b);
	pthread_mutex_unlock(&port.lock);
	/* A poll under way (the progress thread's, or a poller's) ends first. */
	while (atomic_load(&qp->eng_ref))
		sched_yield();
	sv_rx_lock(qp);
	if (uq->rc)
		qp->wire_qp = NULL;
	else
		qp->far_qp = NULL;
	sv_rx_unlock(qp);
	watch_count(uq, -1);
	if (!port.n_qps)
		port_close_locked();
	pthread_mutex_unlock(&setup_lock);
	free(uq->queue);
	free(uq->gso[0]);
	free(uq->gso[1]);
	free(uq->rc);
	free(uq);
}

static void udp_publish(struct sv_qp *qp)
{
	(void)qp; /* the receiver reads qp->pub itself (P_Key, Q_Key, state) */
}

static void udp_disconnect(struct sv_qp *qp)
{
	(void)qp; /* datagrams: no peer to tell */
}

static void udp_discard(struct sv_qp *qp)
{
	struct udp_qp *uq = udp_of(qp);

	if (!uq)
		return;
	pthread_mutex_lock(&port.lock);
	uq->head = uq->tail = 0;
	atomic_store_explicit(&uq->queued, 0, memory_order_relaxed);
	pthread_mutex_unlock(&port.lock);
}

/* --- sending --------------------------------------------------------------------------- */

static enum sv_reach udp_reach(struct sv_qp *qp, uint32_t dest_qpn)
{
	(void)dest_qpn;
	/* Nobody answers a datagram: whether anyone is there is not known, nor waited for. */
	return udp_of(qp) ? SV_REACH_READY : SV_REACH_UNREACHABLE;
}

static int udp_connect(struct sv_qp *qp, uint32_t qpn, void **conn)
{
	(void)qp;
	(void)qpn;
	*conn = NULL;
	return -EINVAL; /* reach never asks for an attach */
}

static void *udp_attach(struct sv_qp *qp, uint32_t qpn, void *conn, int err)
{
	(void)qp;
	(void)qpn;
	(void)err;
	return conn;
}

static void udp_release(struct sv_qp *qp, void *conn)
{
	(void)qp;
	(void)conn;
}

static uint64_t udp_seg_max(struct sv_qp *qp, const struct sv_hdr *h)
{
	(void)qp;
	(void)h;
	return SV_UD_GRH + UDP_PAYLOAD_MAX;
}

/* Where a datagram to @gid goes on the port's socket: false if it cannot. */
static bool dest_addr(const uint8_t gid[16], struct sockaddr_storage *ss, socklen_t *len)
{
	uint16_t to = htons(port.port);

	memset(ss, 0, sizeof(*ss));
	if (gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80)
		return false; /* link-local: which interface is not said (no scope) */
	if (rv_port_v6(port.rp)) {
		struct sockaddr_in6 *sa = (struct sockaddr_in6 *)ss;

		sa->sin6_family = AF_INET6;
		sa->sin6_port = to;
		memcpy(&sa->sin6_addr, gid, 16);
		*len = sizeof(*sa);
		return true;
	}
	if (!v4_mapped(gid))
		return false; /* IPv6 on a host without it */
	{
		struct sockaddr_in *sa = (struct sockaddr_in *)ss;

		sa->sin_family = AF_INET;
		sa->sin_port = to;
		memcpy(&sa->sin_addr, gid + 12, 4);
		*len = sizeof(*sa);
	}
	return true;
}

/* The datagram leaves from the AH's source GID (as RoCE v2's source IP address), not
 * from whichever address the route would pick; when the two GIDs are not of one family
 * (an IPv4 source to an IPv6 destination) there is no such IP packet, and the route
 * picks (the ICRC, made for the GID, is then wrong: the receiver drops it). */
static void from_addr(const uint8_t sgid[16], const uint8_t dgid[16], struct msghdr *msg,
		      char *buf, size_t len)
{
	const uint8_t *gid = sgid;
	struct cmsghdr *c;

	if (v4_mapped(sgid) != v4_mapped(dgid))
		return;
	msg->msg_control = buf;
	msg->msg_controllen = len;
	c = CMSG_FIRSTHDR(msg);
	if (rv_port_v6(port.rp)) {
		struct in6_pktinfo pi = { .ipi6_ifindex = 0 };

		memcpy(&pi.ipi6_addr, gid, 16);
		c->cmsg_level = IPPROTO_IPV6;
		c->cmsg_type = IPV6_PKTINFO;
		c->cmsg_len = CMSG_LEN(sizeof(pi));
		memcpy(CMSG_DATA(c), &pi, sizeof(pi));
		msg->msg_controllen = CMSG_SPACE(sizeof(pi));
	} else {
		struct in_pktinfo pi = { .ipi_ifindex = 0 };

		memcpy(&pi.ipi_spec_dst, gid + 12, 4);
		c->cmsg_level = IPPROTO_IP;
		c->cmsg_type = IP_PKTINFO;
		c->cmsg_len = CMSG_LEN(sizeof(pi));
		memcpy(CMSG_DATA(c), &pi, sizeof(pi));
		msg->msg_controllen = CMSG_SPACE(sizeof(pi));
	}
}

/* The ICRC's view of a datagram between two GIDs, to or from the port. */
static void path_of(struct rv_path *path, const uint8_t src[16], const uint8_t dst[16],
		    uint16_t sport)
{
	memset(path, 0, sizeof(*path));
	path->v6 = !v4_mapped(dst);
	memcpy(path->src, path->v6 ? src : src + 12, path->v6 ? 16 : 4);
	memcpy(path->dst, path->v6 ? dst : dst + 12, path->v6 ? 16 : 4);
	path->sport = sport;
	path->dport = port.port;
}

/*
 * Sends the datagram @out[0..n) from @sgid to @dgid (@ss): its last piece is @trailer,
 * the pad; the ICRC goes after it. Longer than the route's MTU, it goes in IP fragments
 * from the other socket. 0 (sent, or lost as a datagram may be), or -EAGAIN when the
 * socket's buffer is full.
 */
static int send_dgram(struct iovec *out, int n, uint8_t *trailer, uint8_t pad,
		      const uint8_t sgid[16], const uint8_t dgid[16],
		      const struct sockaddr_storage *ss, socklen_t ss_len)
{
	union {
		char buf[CMSG_SPACE(sizeof(struct in6_pktinfo))];
		struct cmsghdr align;
	} ctl = { 0 };
	struct msghdr msg = { 0 };
	struct rv_path path;
	uint64_t frag;

	out[n - 1] = (struct iovec){ .iov_base = trailer, .iov_len = pad };
	path_of(&path, sgid, dgid, port.port);
	rv_icrc_put(trailer + pad, rv_icrc(&path, out, n));
	out[n - 1].iov_len = pad + RV_ICRC;
	msg.msg_name = (void *)ss;
	msg.msg_namelen = ss_len;
	msg.msg_iov = out;
	msg.msg_iovlen = (size_t)n;
	from_addr(sgid, dgid, &msg, ctl.buf, sizeof(ctl.buf));
	/* (the payload may be the application's: sv_app.h) */
	if (sv_app_sendmsg(port.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
		return 0;
	if (errno == EMSGSIZE && (frag = frag_socket())) {
		/* Longer than the route's MTU: in fragments, from the other socket. */
		out[n - 1].iov_len = pad;
		path.sport = (uint16_t)(frag >> 32);
		rv_icrc_put(trailer + pad, rv_icrc(&path, out, n));
		out[n - 1].iov_len = pad + RV_ICRC;
		if (sv_app_sendmsg((int)(uint32_t)frag, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
			return 0;
	}
	if (errno == EAGAIN || errno == ENOBUFS)
		return -EAGAIN;
	sv_dbg("roce: a datagram lost: %s", strerror(errno));
	return 0;
}

/*
 * sq.lock: one datagram, a UD SEND Only (with Immediate) of RoCE v2. The core's payload
 * starts with the GRH it built (SV_F_GRH): its GIDs say from where and to where; the GRH
 * itself does not go (RoCE v2's IP header is the kernel's). A datagram that cannot go
 * (no route, link-local) is lost, as UD loses it; a full socket buffer is -EAGAIN.
 */
static int udp_send(struct sv_qp *qp, const struct sv_hdr *h, const struct iovec *iov, int n_iov)
{
	struct udp_qp *uq = udp_of(qp);
	uint8_t grh[SV_UD_GRH], hdr[RV_HDR_MAX], trailer[3 + RV_ICRC] = { 0 };
	struct iovec out[SV_IOV_MAX + 3];
	struct sockaddr_storage ss;
	struct rv_pkt pkt;
	uint64_t skip = SV_UD_GRH, got = 0;
	uint32_t len;
	socklen_t ss_len;
	int n = 1, hdr_len;

	if (!uq || h->op != SV_OP_SEND || !(h->flags & SV_F_GRH) || h->len < SV_UD_GRH ||
	    h->len - SV_UD_GRH > UDP_PAYLOAD_MAX || n_iov > SV_IOV_MAX)
		return 0; /* nothing else is asked of a far wire (sv_req.c) */
	/* The GRH: its source and destination GIDs (struct ibv_grh: at 8 and 24). */
	for (int i = 0; i < n_iov && got < SV_UD_GRH; i++) {
		size_t k = iov[i].iov_len < SV_UD_GRH - got ? iov[i].iov_len : SV_UD_GRH - got;

		memcpy(grh + got, iov[i].iov_base, k);
		got += k;
	}
	if (got < SV_UD_GRH || !dest_addr(grh + 24, &ss, &ss_len))
		return 0;
	len = h->len - SV_UD_GRH;
	pkt = (struct rv_pkt){
		.opcode = RV_UD | ((h->flags & SV_F_IMM) ? RV_SEND_ONLY_IMM : RV_SEND_ONLY),
		.se = h->flags & SV_F_SOLICITED,
		.pkey = (uint16_t)atomic_load_explicit(&qp->pub.pkey, memory_order_relaxed),
		.dest_qpn = h->dest_qpn,
		.psn = uq->psn++ & RV_PSN_MASK,
		.qkey = h->qkey,
		.src_qpn = h->src_qpn,
		.imm_be = h->imm,
	};
	hdr_len = rv_encode(hdr, &pkt, len);
	if (hdr_len < 0)
		return 0;
	out[0] = (struct iovec){ .iov_base = hdr, .iov_len = (size_t)hdr_len };
	for (int i = 0; i < n_iov; i++) { /* the payload after the GRH */
		if (iov[i].iov_len <= skip) {
			skip -= iov[i].iov_len;
			continue;
		}
		out[n++] = (struct iovec){ .iov_base = (uint8_t *)iov[i].iov_base + skip,
					   .iov_len = iov[i].iov_len - skip };
		skip = 0;
	}
	n++;
	return send_dgram(out, n, trailer, rv_pad_len(len), grh + 8, grh + 24, &ss, ss_len);
}

/* The packets of @g one by one, each its own datagram (the route took no GSO). */
static void gso_each(struct udp_qp *uq, struct udp_gso *g)
{
	for (int k = 0; k < g->n_pkts; k++) {
		int end = k + 1 < g->n_pkts ? g->first[k + 1] : g->n_iov;

		g->iov[end - 1].iov_len = g->pad[k];
		(void)send_dgram(&g->iov[g->first[k]], end - g->first[k], g->tail[k], g->pad[k],
				 uq->sgid, uq->dgid, &uq->to, uq->to_len);
	}
}

/* Sends @g's packets (one sendmsg with UDP_SEGMENT), and empties it. What cannot go is
 * lost, as a packet may be: the core sends it again. */
static void gso_flush(struct udp_qp *uq, struct udp_gso *g)
{
	union {
		char buf[CMSG_SPACE(sizeof(struct in6_pktinfo)) + CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} ctl = { 0 };
	struct msghdr msg = { .msg_name = &uq->to, .msg_namelen = uq->to_len,
			      .msg_iov = g->iov, .msg_iovlen = (size_t)g->n_iov };
	struct cmsghdr *c;
	uint16_t seg = (uint16_t)g->seg;

	if (g->n_pkts == 1) {
		gso_each(uq, g);
		goto out;
	}
	from_addr(uq->sgid, uq->dgid, &msg, ctl.buf, sizeof(ctl.buf));
	if (!msg.msg_control) {
		msg.msg_control = ctl.buf;
		c = CMSG_FIRSTHDR(&msg);
	} else {
		msg.msg_controllen = sizeof(ctl.buf);
		c = CMSG_NXTHDR(&msg, CMSG_FIRSTHDR(&msg));
	}
	c->cmsg_level = IPPROTO_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(seg));
	memcpy(CMSG_DATA(c), &seg, sizeof(seg));
	msg.msg_controllen = (size_t)((char *)c - ctl.buf) + CMSG_SPACE(sizeof(seg));
	for (int tries = 0; tries < 2; tries++) {
		if (sv_app_sendmsg(port.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
			goto out;
		if (errno != EAGAIN && errno != ENOBUFS)
			break;
		/* The socket's buffer is full: a moment for it to drain, once. */
		(void)poll(&(struct pollfd){ .fd = port.fd, .events = POLLOUT }, 1, 1);
	}
	if (errno == EMSGSIZE || errno == EINVAL || errno == EIO || errno == ENOPROTOOPT) {
		/* Longer than the route's MTU (fragments), or a device without checksum
		 * offload: this QP sends a packet at a time from now on. */
		sv_dbg("roce qp %u: no UDP segmentation offload on its route (%s)", uq->qpn,
		       strerror(errno));
		uq->no_gso = true;
		gso_each(uq, g);
	} else {
		sv_dbg("roce qp %u: %d packets lost: %s", uq->qpn, g->n_pkts, strerror(errno));
	}
out:
	g->seg = g->bytes = 0;
	g->n_pkts = g->n_iov = 0;
}

/*
 * Adds a packet (@hdr, @hdr_len bytes; its payload @iov, @len bytes) to @g, sending what
 * @g held first if it does not fit; sends @g when @last (the message's last packet) or
 * when the packet is shorter than the batch's. 0, or -ENOMEM (nothing taken).
 */
static int gso_add(struct udp_qp *uq, struct udp_gso *g, const uint8_t *hdr, int hdr_len,
		   const struct iovec *iov, int n_iov, uint32_t len, bool last)
{
	uint8_t pad = (uint8_t)rv_pad_len(len);
	uint32_t size = (uint32_t)hdr_len + len + pad + RV_ICRC;
	struct rv_path path;
	int k, at;

	if (g->n_pkts && (size > g->seg || g->n_pkts == UDP_GSO_PKTS ||
			  g->bytes + size > UDP_GSO_BYTES || g->n_iov + n_iov + 2 > UDP_GSO_IOV))
		gso_flush(uq, g);
	if (n_iov + 2 > UDP_GSO_IOV)
		return -ENOMEM;
	k = g->n_pkts;
	at = g->n_iov;
	memcpy(g->hdr[k], hdr, (size_t)hdr_len);
	memset(g->tail[k], 0, sizeof(g->tail[k]));
	g->first[k] = at;
	g->pad[k] = pad;
	g->iov[at++] = (struct iovec){ .iov_base = g->hdr[k], .iov_len = (size_t)hdr_len };
	for (int i = 0; i < n_iov; i++)
		g->iov[at++] = iov[i];
	g->iov[at] = (struct iovec){ .iov_base = g->tail[k], .iov_len = pad };
	path_of(&path, uq->sgid, uq->dgid, port.port);
	path.ip_id = (uint16_t)k;
	rv_icrc_put(g->tail[k] + pad, rv_icrc(&path, &g->iov[g->first[k]], at - g->first[k] + 1));
	g->iov[at++].iov_len = pad + RV_ICRC;
	g->n_iov = at;
	g->n_pkts++;
	g->bytes += size;
	if (!g->seg)
		g->seg = size;
	if (last || size < g->seg)
		gso_flush(uq, g);
	return 0;
}

/*
 * An RC QP's request (sq.lock) or answer (rx_busy): one packet to the peer its path
 * names; the packets of a longer message are sent together (struct udp_gso). A packet
 * that cannot go is lost, and the core sends it again.
 */
static int roce_send(struct sv_qp *qp, const struct sv_hdr *h, const struct iovec *iov,
		     int n_iov)
{
	struct udp_qp *uq = udp_of(qp);
	uint8_t hdr[RV_HDR_MAX], trailer[3 + RV_ICRC] = { 0 };
	struct iovec out[SV_IOV_MAX + 2];
	struct rv_pkt pkt = { 0 };
	uint32_t len = h->op == SV_OP_READ_REQ ? 0 : h->len;
	bool answer = h->op > SV_OP_REQ_MAX, whole = (h->flags & SV_F_FIRST) &&
						       (h->flags & SV_F_LAST);
	struct udp_gso *g;
	int n = 1, hdr_len, err;

	if (!uq || !uq->to_len || n_iov > SV_IOV_MAX)
		return 0;
	g = uq->gso[answer];
	err = udp_rc_encode(uq->rc, h, &pkt);
	if (err) {
		if (err == -EAGAIN && g && g->n_pkts)
			gso_flush(uq, g); /* the window is full: what it took goes */
		return err == -EAGAIN ? err : 0; /* (or nothing RC carries) */
	}
	pkt.pkey = (uint16_t)atomic_load_explicit(&qp->pub.pkey, memory_order_relaxed);
	pkt.dest_qpn = qp->attr.dest_qp_num;
	hdr_len = rv_encode(hdr, &pkt, len);
	if (hdr_len < 0)
		return 0;
	/* Together, unless the route cannot: a message's packets, and a request's with the
	 * other requests of the transmit (sent at its end, roce_tx_flush); an answer's last
	 * packet ends its batch (answers come from polls, which have no end to wait for). */
	if (!uq->no_gso && (!whole || !answer || (g && g->n_pkts))) {
		if (!g)
			g = uq->gso[answer] = calloc(1, sizeof(*g));
		if (g && !gso_add(uq, g, hdr, hdr_len, iov, n_iov, len,
				  answer && (h->flags & SV_F_LAST)))
			return 0;
	}
	out[0] = (struct iovec){ .iov_base = hdr, .iov_len = (size_t)hdr_len };
	for (int i = 0; i < n_iov; i++)
		out[n++] = iov[i];
	n++;
	return send_dgram(out, n, trailer, rv_pad_len(len), uq->sgid, uq->dgid, &uq->to,
			  uq->to_len);
}

/* sq.lock: the end of a transmit: the requests held back go. */
static void roce_tx_flush(struct sv_qp *qp)
{
	struct udp_qp *uq = udp_of(qp);

	if (uq && uq->gso[0] && uq->gso[0]->n_pkts)
		gso_flush(uq, uq->gso[0]);
}

static void udp_abandon(struct sv_qp *qp, uint32_t msn)
{
	(void)qp;
	(void)msn; /* no RNR on UD */
}

/* --- receiving ------------------------------------------------------------------------- */

struct udp_payload {
	struct sv_payload base;
	const uint8_t *grh; /* SV_UD_GRH bytes */
	const uint8_t *data;
};

static enum ibv_wc_status payload_copy(const struct sv_payload *sp, uint64_t off,
				       const struct iovec *dst, int n_dst, uint64_t len)
{
	const struct udp_payload *p = (const struct udp_payload *)sp;

	for (int i = 0; i < n_dst && len; i++) {
		uint8_t *to = dst[i].iov_base;
		uint64_t n = dst[i].iov_len < len ? dst[i].iov_len : len;

		len -= n;
		while (n) {
			const uint8_t *from = off < SV_UD_GRH ? p->grh + off : p->data + off - SV_UD_GRH;
			uint64_t k = off < SV_UD_GRH ? SV_UD_GRH - off : n;

			if (k > n)
				k = n;
			sv_copy_to_app(to, from, k);
			to += k;
			off += k;
			n -= k;
		}
	}
	return IBV_WC_SUCCESS;
}

/* Their low 15 bits equal (and not 0), at least one a full member (bit 15). */
static bool pkeys_match(uint32_t a, uint32_t b)
{
	return (a & 0x7fff) && (a & 0x7fff) == (b & 0x7fff) && ((a | b) & 0x8000);
}

static enum sv_rx ud_deliver(struct sv_qp *qp, struct udp_qp *uq, const struct udp_dgram *d);

struct rc_payload {
	struct sv_payload base;
	const uint8_t *data;
};

static enum ibv_wc_status rc_payload_copy(const struct sv_payload *sp, uint64_t off,
					  const struct iovec *dst, int n_dst, uint64_t len)
{
	const struct rc_payload *p = (const struct rc_payload *)sp;

	for (int i = 0; i < n_dst && len; i++) {
		uint64_t n = dst[i].iov_len < len ? dst[i].iov_len : len;

		sv_copy_to_app(dst[i].iov_base, p->data + off, n);
		off += n;
		len -= n;
	}
	return IBV_WC_SUCCESS;
}

/*
 * rx_busy and port.lock: an RC packet for @qp. Only from the peer its path names, in its
 * partition (IBA 9.6.1.1, 10.9.2); a request to the responder, an answer (under
 * sq.lock, where the requester's PSNs are) to the completer. Nothing is kept: a request
 * the responder holds is dropped, and sent again.
 */
static enum sv_rx rc_deliver(struct sv_qp *qp, struct udp_qp *uq, const struct udp_dgram *d)
{
	struct rc_payload p = { .base.copy = rc_payload_copy, .data = d->buf + d->pkt.hdr_len };
	struct sv_hdr h;
	enum udp_rc_rx what;

	if (!uq->to_len || memcmp(&d->src, uq->dgid, 16))
		return SV_RX_CONSUMED; /* not from our peer */
	if (!pkeys_match(d->pkt.pkey, atomic_load_explicit(&qp->pub.pkey, memory_order_relaxed))) {
		atomic_fetch_add_explicit(&uq->bad_pkeys, 1, memory_order_relaxed);
		return SV_RX_CONSUMED;
	}
	if (rv_op_info[d->pkt.opcode].flags & RV_RESPONSE) {
		enum sv_rx r;

		sv_spin_lock(&qp->sq.lock);
		what = udp_rc_decode(uq->rc, &d->pkt, qp->attr.dest_qp_num, &h);
		sv_spin_unlock(&qp->sq.lock);
		if (what != UDP_RC_ANSWER)
			return SV_RX_CONSUMED;
		r = sv_comp_deliver(qp, &h, &p.base);
		if (r == SV_RX_CONSUMED) {
			sv_spin_lock(&qp->sq.lock);
			udp_rc_answered(uq->rc, &h);
			sv_spin_unlock(&qp->sq.lock);
		}
		return r;
	}
	what = udp_rc_decode(uq->rc, &d->pkt, qp->attr.dest_qp_num, &h);
	if (what != UDP_RC_REQUEST)
		return SV_RX_CONSUMED;
	udp_rc_arrived(uq->rc, &d->pkt, &h);
	if (sv_resp_deliver(qp, &h, &p.base) == SV_RX_CONSUMED)
		udp_rc_taken(uq->rc, &d->pkt, &h);
	return SV_RX_CONSUMED;
}

/* rx_busy and port.lock: hands datagram @d to the responder. */
static enum sv_rx deliver(struct sv_qp *qp, struct udp_qp *uq, const struct udp_dgram *d)
{
	if (uq->rc)
		return rc_deliver(qp, uq, d);
	if ((d->pkt.opcode & 0xe0) != RV_UD)
		return SV_RX_CONSUMED; /* an RC packet to a UD QP: not its transport */
	return ud_deliver(qp, uq, d);
}

/* rx_busy and port.lock: a UD datagram, to the responder. */
static enum sv_rx ud_deliver(struct sv_qp *qp, struct udp_qp *uq, const struct udp_dgram *d)
{
	uint8_t grh[SV_UD_GRH] = { 0 };
	struct ibv_grh *g = (struct ibv_grh *)grh;
	struct udp_payload p = { .base.copy = payload_copy, .grh = grh,
				 .data = d->buf + d->pkt.hdr_len };
	struct sv_hdr h = {
		.op = SV_OP_SEND,
		.flags = SV_F_FIRST | SV_F_LAST | SV_F_GRH,
		.src_qpn = d->pkt.src_qpn,
		.dest_qpn = d->pkt.dest_qpn,
		.imm = d->pkt.imm_be,
		.len = SV_UD_GRH + d->pkt.payload_len,
		.total = SV_UD_GRH + d->pkt.payload_len,
		.qkey = d->pkt.qkey,
	};

	if (!pkeys_match(d->pkt.pkey, atomic_load_explicit(&qp->pub.pkey, memory_order_relaxed))) {
		atomic_fetch_add_explicit(&uq->bad_pkeys, 1, memory_order_relaxed);
		return SV_RX_CONSUMED; /* IBA 10.9.2: dropped, and counted */
	}
	if (d->pkt.opcode == (RV_UD | RV_SEND_ONLY_IMM))
		h.flags |= SV_F_IMM;
	if (d->pkt.se)
		h.flags |= SV_F_SOLICITED;
	/* The GRH as the shm wire writes it (IPv6 form, next header UDP). */
	g->version_tclass_flow = htobe32(6u << 28);
	g->paylen = htobe16((uint16_t)(d->pkt.payload_len));
	g->next_hdr = 17;
	g->hop_limit = 64;
	memcpy(g->sgid.raw, &d->src, 16);
	memcpy(g->dgid.raw, &d->dst, 16);
	return sv_resp_deliver(qp, &h, &p.base);
}

/* port.lock: keeps @d for @uq's next poll; false if there is no room (it is dropped). */
static bool enqueue(struct udp_qp *uq, const struct udp_dgram *d)
{
	if (!uq->queue) {
		uq->queue = malloc(UDP_QUEUE * sizeof(*uq->queue));
		if (!uq->queue)
			return false;
	}
	if (uq->head - uq->tail == UDP_QUEUE)
		return false;
	uq->queue[uq->head++ % UDP_QUEUE] = *d;
	atomic_store_explicit(&uq->queued, uq->head - uq->tail, memory_order_relaxed);
	return true;
}

/* The source address and port of a datagram, as a GID (IPv4 mapped). */
static uint16_t from_v6(const struct sockaddr_storage *ss, struct in6_addr *a)
{
	if (ss->ss_family == AF_INET6) {
		*a = ((const struct sockaddr_in6 *)ss)->sin6_addr;
		return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	}
	memset(a, 0, sizeof(*a));
	a->s6_addr[10] = a->s6_addr[11] = 0xff;
	memcpy(&a->s6_addr[12], &((const struct sockaddr_in *)ss)->sin_addr, 4);
	return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

/* port.lock: the next datagram of what the last read brought into port.in (its source
 * port in *sport); false when none is left. */
static bool next_gro(uint16_t *sport)
{
	struct udp_dgram *d = &port.in;
	uint32_t n = port.gro_len - port.gro_off;

	if (!port.gro || !n)
		return false;
	if (n > port.gro_seg)
		n = port.gro_seg;
	d->len = n <= sizeof(d->buf) ? n : 0; /* too long: dropped */
	if (d->len)
		memcpy(d->buf, port.gro + port.gro_off, n);
	port.gro_off += n;
	d->src = port.gro_src;
	d->dst = port.gro_dst;
	*sport = port.gro_sport;
	return true;
}

/* port.lock: reads one datagram into port.in (its source port in *sport); false when
 * the socket has none. */
static bool read_one(uint16_t *sport)
{
	union {
		char buf[CMSG_SPACE(sizeof(struct in6_pktinfo)) +
			 CMSG_SPACE(sizeof(struct in_pktinfo)) + CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct udp_dgram *d = &port.in;
	struct sockaddr_storage from;
	struct in6_addr dst = { 0 };
	struct iovec iov = { .iov_base = port.gro ? port.gro : d->buf,
			     .iov_len = port.gro ? UDP_GRO_BUF : sizeof(d->buf) };
	struct msghdr msg = { .msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = &iov,
			      .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	ssize_t n;
	int seg = 0;

	if (next_gro(sport))
		return true;
	n = recvmsg(port.fd, &msg, MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0)
		return false;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		/* (an IPv4 datagram brings both: room for each, or the kernel cuts the
		 * second short) */
		if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO &&
		    c->cmsg_len >= CMSG_LEN(sizeof(struct in6_pktinfo))) {
			struct in6_pktinfo pi;

			memcpy(&pi, CMSG_DATA(c), sizeof(pi));
			dst = pi.ipi6_addr;
		} else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO &&
			   c->cmsg_len >= CMSG_LEN(sizeof(struct in_pktinfo))) {
			struct in_pktinfo pi;

			memcpy(&pi, CMSG_DATA(c), sizeof(pi));
			memset(&dst, 0, sizeof(dst));
			dst.s6_addr[10] = dst.s6_addr[11] = 0xff;
			memcpy(&dst.s6_addr[12], &pi.ipi_addr, 4);
		} else if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO &&
			   c->cmsg_len >= CMSG_LEN(sizeof(int))) {
			memcpy(&seg, CMSG_DATA(c), sizeof(seg));
		}
	}
	*sport = from_v6(&from, &d->src);
	d->dst = dst;
	if (!port.gro) {
		d->len = msg.msg_flags & MSG_TRUNC ? 0 : (uint32_t)n; /* too long: dropped */
		return true;
	}
	port.gro_len = msg.msg_flags & MSG_TRUNC ? 0 : (uint32_t)n;
	port.gro_seg = seg > 0 ? (uint32_t)seg : port.gro_len;
	port.gro_off = 0;
	port.gro_src = d->src;
	port.gro_dst = dst;
	port.gro_sport = *sport;
	if (!next_gro(sport))
		d->len = 0; /* (empty, or too long: dropped) */
	return true;
}

/* port.lock: whether port.in (@sport its source port) is a UD datagram of ours, whole
 * and unharmed; what is not is dropped (a stray makes the port find its place again). */
static bool accept_one(uint16_t sport)
{
	struct udp_dgram *d = &port.in;
	struct rv_path path;
	uint64_t now;

	d->gsi = GSI_NONE;
	switch (rv_port_classify(port.rp, d->buf, d->len)) {
	case RV_DGRAM_PROBE:
		return false;
	case RV_DGRAM_FORWARD: {
		/* A MAD to QP1 another process of ours passed on (gsi_route): it checked the
		 * ICRC; where it came from is in the forward. Taken here, never passed on. */
		struct rv_port_fwd f;

		if (rv_port_forwarded(d->buf, d->len, &f) || f.len > sizeof(d->buf))
			return false;
		memcpy(&d->src, f.src, 16);
		memcpy(&d->dst, f.dst, 16);
		memmove(d->buf, f.dgram, f.len);
		d->len = (uint32_t)f.len;
		if (rv_decode(d->buf, d->len, &d->pkt) || d->pkt.payload_len > UDP_PAYLOAD_MAX)
			return false;
		d->gsi = GSI_HERE;
		return d->pkt.dest_qpn == 1 && d->pkt.opcode == (RV_UD | RV_SEND_ONLY);
	}
	case RV_DGRAM_GSI:
		/* QP1's MADs, the IB CM's: not a stray (the port's place is not in question),
		 * for whichever process owns the connection or listens (gsi_route). */
		d->gsi = GSI_ROUTE;
		break;
	case RV_DGRAM_STRAY:
		sv_dbg("roce: a datagram for another process's QP came here");
		now = sv_now_ns();
		if (now >= port.resteer_at) {
			port.resteer_at = now + RESTEER_NS;
			(void)rv_port_resteer(port.rp, true);
		}
		return false;
	case RV_DGRAM_MCAST:
	case RV_DGRAM_OURS:
		break;
	}
	path_of(&path, d->src.s6_addr, d->dst.s6_addr, sport);
	/* IBA Annex A17.8 / 9.6.1.1: a bad ICRC, a header the IBA drops, anything but an
	 * RC, UC or XRC packet or a UD SEND Only, or longer than the MTU: dropped. */
	if (!rv_icrc_check(&path, d->buf, d->len, &port.ids)) {
		sv_dbg("roce: a datagram dropped: its ICRC is wrong");
		return false;
	}
	if (rv_decode(d->buf, d->len, &d->pkt) || d->pkt.payload_len > UDP_PAYLOAD_MAX)
		return false;
	/* QP1: a MAD, a UD SEND Only (IBA 13.5.1) */
	if (d->gsi)
		return d->pkt.dest_qpn == 1 && d->pkt.opcode == (RV_UD | RV_SEND_ONLY);
	/* QPN 0xFFFFFF: a UD SEND Only to a multicast group (IBA 10.5.2.5), nothing else */
	if (d->pkt.dest_qpn == RV_QPN_MCAST)
		return sv_gid_is_multicast((const union ibv_gid *)d->dst.s6_addr) &&
		       (d->pkt.opcode == (RV_UD | RV_SEND_ONLY) ||
			d->pkt.opcode == (RV_UD | RV_SEND_ONLY_IMM));
	return (d->pkt.opcode & 0xe0) == RV_RC || (d->pkt.opcode & 0xe0) == RV_UC ||
	       (d->pkt.opcode & 0xe0) == RV_XRC ||
	       d->pkt.opcode == (RV_UD | RV_SEND_ONLY) ||
	       d->pkt.opcode == (RV_UD | RV_SEND_ONLY_IMM);
}

static int route_to(struct sv_qp *qp, struct udp_qp *uq, struct udp_qp *to);

/* port.lock: the index of the process a MAD to QP1 (port.in) is for: the listener on a
 * REQ's or SIDR_REQ's service, the owner of the block another message's remote
 * communication ID names; -1 if none is known (it is then taken here). */
static int gsi_owner(const struct udp_dgram *d)
{
	struct rv_cm_msg m;
	uint32_t block;
	int index;

	if (rv_cm_decode(d->buf + d->pkt.hdr_len, d->pkt.payload_len, &m))
		return -1;
	if (m.attr == RV_CM_REQ || m.attr == RV_CM_SIDR_REQ) {
		if (rv_port_listener(port.rp, m.service_id, &block))
			return -1;
	} else {
		block = m.remote_id >> 16;
	}
	index = rv_port_index_of(port.rp, block);
	return index >= 0 ? index : -1;
}

/*
 * port.lock: a REQ or SIDR_REQ to QP1 (@d) for a service nobody of this user listens on,
 * and no QP1 in this process to say so: refused from QP 1 as Linux's CM refuses it (a REJ,
 * Invalid Service ID; a SIDR_REP, Unsupported), so that the peer's rdma_cm reports
 * REJECTED at once rather than UNREACHABLE after every retry.
 */
static void gsi_refuse(const struct udp_dgram *d)
{
	struct rv_cm_msg req, ans = { 0 };
	uint8_t hdr[RV_HDR_MAX], mad[RV_MAD_LEN], trailer[3 + RV_ICRC] = { 0 };
	struct iovec out[3];
	struct sockaddr_storage ss;
	socklen_t ss_len;
	struct rv_pkt pkt;
	int hl;

	if (rv_cm_decode(d->buf + d->pkt.hdr_len, d->pkt.payload_len, &req) ||
	    (req.attr != RV_CM_REQ && req.attr != RV_CM_SIDR_REQ) ||
	    !dest_addr(d->src.s6_addr, &ss, &ss_len))
		return;
	ans.tid = req.tid;
	if (req.attr == RV_CM_REQ) {
		ans.attr = RV_CM_REJ;
		ans.remote_id = req.local_id;
		ans.msg = 0;     /* the REQ is rejected */
		ans.reason = 8;  /* Invalid Service ID */
	} else {
		ans.attr = RV_CM_SIDR_REP;
		ans.local_id = req.local_id; /* its request ID */
		ans.sidr_status = 1;         /* Service ID not supported */
		ans.service_id = req.service_id;
	}
	if (rv_cm_encode(&ans, mad))
		return;
	pkt = (struct rv_pkt){ .opcode = RV_UD | RV_SEND_ONLY, .pkey = d->pkt.pkey,
			       .dest_qpn = d->pkt.src_qpn, .qkey = RV_QP1_QKEY, .src_qpn = 1 };
	hl = rv_encode(hdr, &pkt, RV_MAD_LEN);
	if (hl < 0)
		return;
	out[0] = (struct iovec){ .iov_base = hdr, .iov_len = (size_t)hl };
	out[1] = (struct iovec){ .iov_base = mad, .iov_len = RV_MAD_LEN };
	(void)send_dgram(out, 3, trailer, 0, d->dst.s6_addr, d->src.s6_addr, &ss, ss_len);
}

/* rx_busy and port.lock: a MAD to QP1 (port.in, @sport its source port) to the process
 * it is for: passed on to it when it is another (rv_port_forward), else to this
 * process's QP1 (with none, a REQ for nobody is refused: gsi_refuse). Returns how many
 * were delivered here. */
static int gsi_route(struct sv_qp *qp, struct udp_qp *uq, uint16_t sport)
{
	struct udp_dgram *d = &port.in;
	int owner = d->gsi == GSI_ROUTE ? gsi_owner(d) : -1;

	if (owner >= 0 && owner != rv_port_index(port.rp)) {
		struct rv_port_fwd f = { .sport = sport, .dgram = d->buf, .len = d->len };

		memcpy(f.src, &d->src, 16);
		memcpy(f.dst, &d->dst, 16);
		if (rv_port_forward(port.rp, owner, &f))
			sv_dbg("roce: a MAD to QP1 not passed on to its process: lost");
		return 0;
	}
	if (!port.gsi) {
		/* No QP1 here: a REQ nobody listens for is refused; anything else is lost
		 * (the peer's CM sends it again). */
		if (d->gsi == GSI_ROUTE && owner < 0)
			gsi_refuse(d);
		return 0;
	}
	return route_to(qp, uq, port.gsi);
}

/* rx_busy and port.lock: the datagram in port.in to its QP (to each of the process's
 * members of its group: a multicast datagram): delivered now if it is @uq's and nothing
 * of @uq's waits before it, else queued. Returns how many were delivered. */
static int route(struct sv_qp *qp, struct udp_qp *uq, uint16_t sport)
{
	struct udp_dgram *d = &port.in;
	struct udp_block *b;
	struct udp_qp *to;

	if (!accept_one(sport))
		return 0;
	if (d->gsi)
		return gsi_route(qp, uq, sport);
	if (d->pkt.dest_qpn == RV_QPN_MCAST) {
		struct udp_group *g = group_find_locked(d->dst.s6_addr);
		int n = 0;

		for (int i = 0; g && i < g->n_qps; i++)
			n += route_to(qp, uq, g->qps[i]);
		return n; /* (no member here: a group we left; lost, as on a NIC) */
	}
	b = block_find_locked(d->pkt.dest_qpn >> SV_QPN_BLOCK_BITS);
	to = b ? b->qps[d->pkt.dest_qpn & (SV_QPN_BLOCK - 1)] : NULL;
	if (!to || to->qpn != d->pkt.dest_qpn)
		return 0; /* no such QP here (any more): lost, as on a NIC */
	return route_to(qp, uq, to);
}

/* rx_busy and port.lock: port.in to @to (see route). */
static int route_to(struct sv_qp *qp, struct udp_qp *uq, struct udp_qp *to)
{
	struct udp_dgram *d = &port.in;

	if (to == uq && uq->head == uq->tail && deliver(qp, uq, d) == SV_RX_CONSUMED)
		return 1;
	/* Another QP: into its receive queue now, as a NIC would, when nobody holds its
	 * responder's role and nothing of its waits before it. */
	if (to != uq && to->head == to->tail && sv_rx_trylock(to->qp)) {
		enum sv_rx r = deliver(to->qp, to, d);

		if (to->rc)
			sv_resp_flush(to->qp); /* its acknowledgement goes now */
		sv_rx_unlock(to->qp);
		/* An error it is to enter is its progress's (sv_qp_settle), which the
		 * progress thread may have looked for before: it is told (an XRC target,
		 * which no CQ's poll moves, stayed in RTS with its event never raised). */
		if (atomic_load_explicit(&to->qp->err_event, memory_order_relaxed) != SV_ERR_NONE)
			sv_engine_kick();
		if (r == SV_RX_CONSUMED)
			return 1;
	}
	if (!enqueue(to, d))
		sv_dbg("udp qp %u: a datagram dropped: its queue is full", to->qpn);
	return 0;
}

static int udp_poll(struct sv_qp *qp)
{
	struct udp_qp *uq = udp_of(qp);
	uint16_t sport;
	int n = 0, i = 0;

	/* Nothing came, lately or now, and nothing waits: no lock, no system call (unless
	 * nothing would say it came: the watch is parked). */
	if (!uq || (!atomic_load_explicit(&port.ready, memory_order_acquire) &&
		    !atomic_load_explicit(&port.parked, memory_order_relaxed) &&
		    sv_now_ns() >= atomic_load_explicit(&port.hot_until, memory_order_relaxed) &&
		    atomic_load_explicit(&uq->queued, memory_order_relaxed) == 0))
		return 0;
	if (!sv_rx_trylock(qp))
		return 0;
	uq = udp_of(qp); /* (taken again under rx_busy: qp_fini clears it under it) */
	/* What is delivered may be placed in registered memory: a deregistration waits for
	 * it (sv_mr_place_begin), so its owner may unmap the memory once ibv_dereg_mr
	 * returns. Taken before the port's mutex, which is only tried: never waited for
	 * inside a placement that a deregistration waits for. */
	sv_mr_place_begin();
	if (!uq || pthread_mutex_trylock(&port.lock)) {
		sv_mr_place_end();
		sv_rx_unlock(qp); /* another QP reads: ours is queued for us */
		return 0;
	}
	while (uq->head != uq->tail &&
	       deliver(qp, uq, &uq->queue[uq->tail % UDP_QUEUE]) == SV_RX_CONSUMED) {
		uq->tail++;
		n++;
	}
	atomic_store_explicit(&uq->queued, uq->head - uq->tail, memory_order_relaxed);
	/* The group changed (a process left, died, or met a stray): our place may have. */
	if (atomic_exchange_explicit(&port.recheck, false, memory_order_relaxed)) {
		rv_port_drain_watch(port.rp);
		if (rv_port_stale(port.rp))
			(void)rv_port_resteer(port.rp, false);
	}
	atomic_store_explicit(&port.ready, false, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst); /* cleared before the reads below */
	for (; i < UDP_BUDGET && read_one(&sport); i++)
		n += route(qp, uq, sport);
	if (i == UDP_BUDGET) /* more may wait: the socket was not found empty */
		atomic_store_explicit(&port.ready, true, memory_order_relaxed);
	if (i)
		atomic_store_explicit(&port.hot_until, sv_now_ns() + UDP_HOT_NS,
				      memory_order_relaxed);
	pthread_mutex_unlock(&port.lock);
	sv_mr_place_end();
	/* RC: the acknowledgements of what the poll took go now, one for the lot (what the
	 * core did not answer at once, sv_resp_flush). */
	if (uq->rc && (n || sv_resp_owes(qp)))
		sv_resp_flush(qp);
	sv_rx_unlock(qp);
	return n;
}

/* The progress thread: @uq parked (the application's polls move it) or not. */
static void set_parked(struct udp_qp *uq, bool parked)
{
	pthread_mutex_lock(&port.watch_lock);
	watch_count_locked(uq, -1);
	atomic_store(&uq->parked, parked);
	watch_count_locked(uq, 1);
	watch_update_locked();
	pthread_mutex_unlock(&port.watch_lock);
}

/* The progress thread: the application polls this RC QP (sv_wire_roce): the watch stays
 * for the QPs it does not poll, and goes when it polls them all (its polls read the
 * socket: a datagram would otherwise wake the thread, which takes the CPU the spinning
 * application needs). UD QPs keep the watch (polls that read only when it fired: a UD QP
 * that talks to its host's QPs makes no system call). */
static void udp_park(struct sv_qp *qp)
{
	struct udp_qp *uq = udp_of(qp);

	if (uq && !atomic_load_explicit(&uq->parked, memory_order_relaxed))
		set_parked(uq, true);
}

static bool udp_arm(struct sv_qp *qp, bool assist)
{
	struct udp_qp *uq = udp_of(qp);
	bool idle;

	(void)assist;
	if (!uq)
		return true;
	if (atomic_load_explicit(&uq->parked, memory_order_relaxed))
		set_parked(uq, false); /* the progress thread is to hear of it again */
	pthread_mutex_lock(&port.lock);
	/* Held datagrams wait for the QP's RTR, not for us: they do not keep it awake. */
	idle = (uq->head == uq->tail ||
		!sv_qp_state_receives(atomic_load_explicit(&qp->pub.state, memory_order_relaxed))) &&
	       !atomic_load_explicit(&port.ready, memory_order_acquire);
	pthread_mutex_unlock(&port.lock);
	return idle;
}

static void udp_disarm(struct sv_qp *qp)
{
	(void)qp; /* the watch stays armed: it only raises `ready` */
}

static uint32_t udp_bad_pkeys(struct sv_qp *qp)
{
	struct udp_qp *uq = udp_of(qp);

	return uq ? atomic_load_explicit(&uq->bad_pkeys, memory_order_relaxed) : 0;
}

/* The process's QP1 (sv_qp_set_gsi): the MADs to QP1 that are ours go to @qp. */
static int udp_gsi(struct sv_qp *qp, bool on)
{
	struct udp_qp *uq = udp_of(qp);
	int err = 0;

	if (!uq)
		return -ENODEV;
	pthread_mutex_lock(&port.lock);
	if (on && port.gsi && port.gsi != uq)
		err = -EBUSY;
	else if (on)
		port.gsi = uq;
	else if (port.gsi == uq)
		port.gsi = NULL;
	pthread_mutex_unlock(&port.lock);
	return err;
}

/* The process listens on IB CM service @service_id (the port's registry: a REQ for it
 * that another process receives comes here). */
static int udp_cm_listen(struct sv_qp *qp, uint64_t service_id, bool on)
{
	int err = 0;

	if (!udp_of(qp))
		return -ENODEV;
	pthread_mutex_lock(&port.lock);
	if (on)
		err = rv_port_listen(port.rp, service_id);
	else
		rv_port_unlisten(port.rp, service_id);
	pthread_mutex_unlock(&port.lock);
	return err;
}

const struct sv_wire_ops sv_wire_udp = {
	.name = "udp",
	.caps = 0, /* datagrams, unacknowledged and unordered; SEND with immediate */
	.seg_min = SV_UD_GRH + UDP_PAYLOAD_MAX,
	.qp_init = udp_qp_init,
	.qp_fini = udp_qp_fini,
	.qp_take = udp_qp_take,
	.qp_leave = udp_qp_fini,
	.publish = udp_publish,
	.connect = udp_connect,
	.attach = udp_attach,
	.release = udp_release,
	.disconnect = udp_disconnect,
	.discard = udp_discard,
	.reach = udp_reach,
	.seg_max = udp_seg_max,
	.send = udp_send,
	.abandon = udp_abandon,
	.poll = udp_poll,
	.arm = udp_arm,
	.disarm = udp_disarm,
	.bad_pkeys = udp_bad_pkeys,
	.mcast_attach = udp_mcast_attach,
	.mcast_detach = udp_mcast_detach,
	.gsi = udp_gsi,
	.cm_listen = udp_cm_listen,
};

/* --- RC: the RoCE wire ------------------------------------------------------------------- */

static int roce_qp_init(struct sv_qp *qp, uint32_t *qpn)
{
	(void)qp;
	(void)qpn;
	return -EOPNOTSUPP; /* a QP comes here at RTR (sv_qp_rewire), with its number */
}

/* IBV_MTU_256..4096 in bytes. */
static uint32_t mtu_bytes(enum ibv_mtu mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 1024;
}

/*
 * The QP's attributes changed: at RTR its peer (the path's GIDs: RoCE v2 is routed, so
 * the address handle must be global) and the first PSN it expects; at RTS the first it
 * sends.
 */
static void roce_publish(struct sv_qp *qp)
{
	struct udp_qp *uq = udp_of(qp);
	const struct ibv_ah_attr *ah = &qp->attr.ah_attr;
	struct sv_context *ctx = sv_qp_ctx(qp);
	enum ibv_qp_state st = qp->attr.qp_state;

	if (!uq || st == uq->seen)
		return;
	if (st == IBV_QPS_RTR && uq->seen != IBV_QPS_RTR) {
		sv_rx_lock(qp);
		uq->to_len = 0;
		if (ah->is_global) {
			memcpy(uq->sgid, ctx->host.gids[ah->grh.sgid_index < ctx->host.n_gids ?
							ah->grh.sgid_index : 0].gid.raw, 16);
			memcpy(uq->dgid, ah->grh.dgid.raw, 16);
			if (!dest_addr(uq->dgid, &uq->to, &uq->to_len))
				uq->to_len = 0;
		}
		udp_rc_rtr(uq->rc, qp->attr.rq_psn, mtu_bytes(qp->attr.path_mtu));
		sv_rx_unlock(qp);
		if (!uq->to_len)
			sv_dbg("roce qp %u: no route to its peer (the path is not global)", uq->qpn);
	} else if (st == IBV_QPS_RTS && uq->seen == IBV_QPS_RTR) {
		sv_spin_lock(&qp->sq.lock);
		udp_rc_rts(uq->rc, qp->attr.sq_psn);
		sv_spin_unlock(&qp->sq.lock);
	}
	uq->seen = st;
}

static enum sv_reach roce_reach(struct sv_qp *qp, uint32_t dest_qpn)
{
	struct udp_qp *uq = udp_of(qp);

	(void)dest_qpn;
	/* Nothing says whether the peer is there: the transport timer finds out. */
	return uq && uq->to_len ? SV_REACH_READY : SV_REACH_UNREACHABLE;
}

/* One packet of the path MTU per segment. */
static uint64_t roce_seg_max(struct sv_qp *qp, const struct sv_hdr *h)
{
	struct udp_qp *uq = udp_of(qp);

	(void)h;
	return uq ? uq->rc->mtu : 256;
}

const struct sv_wire_ops sv_wire_roce = {
	.name = "roce",
	.caps = SV_WIRE_ACKED | SV_WIRE_ATOMICS | SV_WIRE_IMM | SV_WIRE_SEND_IMM | SV_WIRE_LOSSY,
	.seg_min = 256,
	.qp_init = roce_qp_init,
	.qp_fini = udp_qp_fini,
	.qp_take = udp_qp_take,
	.qp_leave = udp_qp_fini,
	.publish = roce_publish,
	.connect = udp_connect,
	.attach = udp_attach,
	.release = udp_release,
	.disconnect = udp_disconnect,
	.discard = udp_discard,
	.reach = roce_reach,
	.seg_max = roce_seg_max,
	.send = roce_send,
	.tx_flush = roce_tx_flush,
	.abandon = udp_abandon,
	.poll = udp_poll,
	.arm = udp_arm,
	.disarm = udp_disarm,
	.park = udp_park,
	.bad_pkeys = udp_bad_pkeys,
};
