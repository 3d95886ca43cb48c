/*
 * UDP port 4791 shared by the processes of one user (IBA Annex A17: every RoCE v2 packet
 * goes to that port, whatever its QP), with no daemon and no relay.
 *
 * Each process binds its own socket to [::]:4791 (0.0.0.0 where the host has no IPv6)
 * with SO_REUSEPORT: the kernel makes the sockets of one user at one address a group and
 * picks one socket of the group for each datagram. A classic BPF program attached to the
 * group (SO_ATTACH_REUSEPORT_CBPF) picks by the datagram's first bytes: BTH bytes 5-6
 * are the destination QPN's block (QPN >> 8, sv_qpn.h), and each block is one process's.
 * The program returns the index of that process's socket in the group's array.
 *
 * What the kernel does, and what this file builds on (each pinned by test_rv_port):
 * - the array holds the sockets in the order they were bound; when one closes, the last
 *   takes its place;
 * - an index past the array's end falls back to the group's hash (some socket);
 * - only sockets of the same user join; another user's bind fails (EADDRINUSE), as
 *   does ours when the kernel's rxe holds the port. SO_REUSEADDR is never set: with it a
 *   later socket could take datagrams meant for the group.
 *
 * Who is where: a registry, one file per user and network namespace in /dev/shm (/tmp
 * where there is none; mode 0600, taken with flock while it changes), records each process's pid, the index it
 * found for its socket and the blocks it owns. A process finds its index itself: it
 * sends itself probes through loopback, one per index, each carrying the index the
 * program is to pick (the program's first rule) and a nonce; the first of its own that
 * comes back names its place. Whoever changes the registry writes the program anew from
 * it. A process that leaves moves the last record into its place, as the kernel moves
 * the last socket; one that died is found dead (its pid gone) by the next that looks,
 * which does the same and bumps the membership's generation: every process then probes
 * again (rv_port_stale; each watches the registry with inotify, rv_port_watch_fd, so it
 * learns of a change without polling for it). Until then a datagram may reach a process
 * that does not own its block: the receiver drops it and counts it (a reliable QP
 * retransmits it; UD may lose it, as a fabric being reconfigured loses packets), probes
 * again and bumps the generation too (the owner's place is what is wrong, and only the
 * owner can find it: several that died at once leave the order in which the kernel
 * moved the last sockets unknown).
 */
#ifndef RV_PORT_H
#define RV_PORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	RV_PORT_BLOCKS = 56,   /* blocks one process steers to itself (more: strays) */
	RV_PORT_PROCS = 256,   /* processes in the registry */
	RV_PORT_PROBE = 0xff,  /* a probe's first byte: no IBA opcode (rv_decode drops it) */
	RV_PORT_PROBE_LEN = 16,
	RV_PORT_SERVICES = 32, /* CM service IDs one process listens on */
};

struct rv_port;

/*
 * Opens this process's socket on @port (RV_PORT; tests use others), joins its user's
 * group there and finds its place. 0 and *out, -EADDRINUSE when another user (or the
 * kernel) holds the port, -EACCES when the registry is not ours, or -errno.
 */
int rv_port_open(uint16_t port, struct rv_port **out);
/* Leaves the group (the last process takes our place) and closes the socket. */
void rv_port_close(struct rv_port *p);

/* The socket: non-blocking, IPv6 taking IPv4 too unless the host has no IPv6. */
int rv_port_fd(const struct rv_port *p);
/* Whether it is IPv6 (taking IPv4 mapped too); else IPv4 only. */
bool rv_port_v6(const struct rv_port *p);
/* Its index in the group, as last found (-1: not found). */
int rv_port_index(const struct rv_port *p);

/* Datagrams to QPN block @block come here from now on: 0, or -ENOSPC past
 * RV_PORT_BLOCKS. */
int rv_port_claim(struct rv_port *p, uint32_t block);
void rv_port_release(struct rv_port *p, uint32_t block);

/* What a datagram read from the socket is. */
enum rv_port_dgram {
	RV_DGRAM_OURS,  /* for a block of ours */
	RV_DGRAM_PROBE, /* a probe (one of ours, back, names our place): nothing to deliver */
	RV_DGRAM_STRAY, /* for a block not ours: drop it, count it, rv_port_resteer */
	RV_DGRAM_MCAST, /* for QPN 0xFFFFFF: a multicast group's (every member process gets
			 * a copy; the kernel steers none) */
	RV_DGRAM_GSI,   /* for QPN 1, the IB CM's: no process owns it, the kernel's hash
			 * picks one (rv_port_forward passes a MAD on to its owner) */
	RV_DGRAM_FORWARD, /* a datagram another process of the group passed on to this one
			   * (rv_port_forwarded reads it) */
};
enum rv_port_dgram rv_port_classify(struct rv_port *p, const void *buf, size_t len);

/* Whether the group's membership changed since we last found our place. */
bool rv_port_stale(struct rv_port *p);
/* A descriptor (inotify, non-blocking) readable when the registry changed; -1 if there
 * is none. rv_port_stale (after rv_port_drain_watch) says whether it matters. */
int rv_port_watch_fd(const struct rv_port *p);
void rv_port_drain_watch(struct rv_port *p);

/*
 * Sets out to find our place again (dead records pruned first): sends our probes, and
 * the socket's reader, passing them to rv_port_classify, learns the place and writes
 * the program anew; nothing else that comes meanwhile is lost. After a stray (@stray),
 * every process is to look again: the membership's generation is bumped. 0 or -errno.
 */
int rv_port_resteer(struct rv_port *p, bool stray);
/* Whether our probes are still out (rv_port_resteer). */
bool rv_port_probing(const struct rv_port *p);

/*
 * The IB CM's listeners (issue 26: a REQ to QP1 reaches whichever process the kernel's
 * hash picks, which must hand it to the one listening on its service ID): each process's
 * record lists the service IDs it listens on. rv_port_listen adds one: 0, -EADDRINUSE
 * when another live process listens on it (a dead one's are pruned first), -ENOSPC past
 * RV_PORT_SERVICES. rv_port_unlisten takes it out (and leaving the port takes them all).
 * rv_port_listener names a block of the process that listens on @service_id (the way to
 * it: a datagram to a QPN of that block reaches it), or -ENOENT.
 */
int rv_port_listen(struct rv_port *p, uint64_t service_id);
void rv_port_unlisten(struct rv_port *p, uint64_t service_id);
int rv_port_listener(struct rv_port *p, uint64_t service_id, uint32_t *block);

/*
 * Passing a datagram on to the process it is for (QP1's MADs, which the kernel's hash
 * gives to any process of the group): a forward is a probe-like datagram through
 * loopback that the steering program gives to the socket at @index (its first rule), and
 * carries where the datagram came from (source and destination GIDs, source port) and
 * the datagram itself (BTH on, no ICRC: the forwarder checked it). 0 or -errno.
 * rv_port_index_of names the index of the process owning @block (-ENOENT: nobody).
 */
enum { RV_PORT_FWD_HDR = 4 + 16 + 16 + 4 };
struct rv_port_fwd {
	uint8_t src[16], dst[16]; /* the GIDs it came from and went to */
	uint16_t sport;
	const uint8_t *dgram;     /* BTH on, without the ICRC */
	size_t len;
};
int rv_port_forward(struct rv_port *p, int index, const struct rv_port_fwd *f);
int rv_port_index_of(struct rv_port *p, uint32_t block);
/* The parts of a forward (RV_DGRAM_FORWARD) of @len bytes: 0, or -EBADMSG. */
int rv_port_forwarded(const uint8_t *buf, size_t len, struct rv_port_fwd *f);

#endif
