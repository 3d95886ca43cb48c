/*
 * Verbs-only setup between hosts (issue 13 item 6): how a QP moved to RTR with only the
 * peer's GID and QPN finds that QP over TCP.
 *
 * Each host answers on one well-known TCP port (IW_PORT_DEFAULT, SOFTVERBS_IWARP_PORT
 * overrides), with no daemon. The first softverbs process that calls
 * iw_conn_port_ensure() claims the port by binding the abstract unix socket
 * "softverbs/iw/port/<port>" and then the TCP port (all addresses, IPv6 dual-stack, IPv4
 * if there is no IPv6); later callers connect to that unix socket and keep the
 * connection: its hang-up says the holder died, and each of them tries to take over at
 * once (one wins the claim, the others watch it). The holder accepts TCP connections,
 * reads the MPA request (at most SOFTVERBS_IWARP_MPA_TIMEOUT_MS, default 5000, after the
 * accept, as siw does), and hands the socket with the request's bytes to the process
 * owning the destination QPN: QPNs are host-unique (sv_qpn.h), and the owner of block B
 * listens on the abstract SOCK_SEQPACKET socket "softverbs/iw/<B>"
 * (iw_conn_open_block_locked), where the holder sends the fd (SCM_RIGHTS) and the
 * request. Each side checks the other's credentials (SO_PEERCRED: the same uid, or
 * root). Nobody owns the QPN: an MPA reply with R (reject). Abstract names vanish with
 * their process: a crash leaves nothing behind.
 *
 * The MPA frames (RFC 5044 §7.1) are revision 2 with RFC 6581's IRD/ORD words at the
 * front of the private data, followed by softverbs' own 16 bytes (both ends of this port
 * are softverbs). The exchange is iw_xchg.h's, as rdma_cm's is (its frames, its reading
 * of them off the stream, its answer and check), in the form iw_mpa.h calls
 * words_unflagged: every revision-2 frame has the words, and the enhanced flag is never
 * set and refused (as the softverbs on other hosts expect).
 *
 *   IRD word (2, BE) | ORD word (2, BE) | "SVIW" | version 1 | flags | 0 0 |
 *   src QPN (4, BE) | dest QPN (4, BE)
 *
 * flags: bit 0 RFC 7306 atomics and immediate data, bit 1 CRC wanted (the MPA C bit is
 * what counts). In a reply, src is the replier's QPN and dest the asker's.
 *
 * Locking: all state is under the engine's lock; the watch callbacks run on the
 * progress thread with it held and never block.
 */
#ifndef IW_CONN_H
#define IW_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>

#include "wire/iwarp/iw_xchg.h"

enum { IW_PORT_DEFAULT = 19875 }; /* SOFTVERBS_IWARP_PORT overrides */

struct iw_params {
	uint32_t src_qpn, dest_qpn; /* request: from, to; reply: the replier's, the asker's */
	uint16_t ird, ord;          /* RFC 6581: 14 bits each (larger values are capped) */
	bool crc;                   /* MPA C bit */
	bool ext;                   /* RFC 7306 atomics and immediate data */
	uint8_t rtr;                /* IW_RTR_* (iw_xchg.h); 0: not peer-to-peer */
};

/*
 * Called on the progress thread, engine lock held: a connection for our QP @p->dest_qpn
 * arrived (@fd: connected TCP, non-blocking, its MPA request consumed; the handler owns
 * it from now on and must reply with iw_conn_reply or close it). iw_conn has checked that
 * the QPN is allocated (sv_qpn_owner); the handler checks the rest (QP type, state).
 */
typedef void (*iw_conn_handler)(int fd, const struct iw_params *peer);
void iw_conn_set_handler(iw_conn_handler fn);

/*
 * This process owns QPN block @block (sv_qpn_alloc's): open its handoff socket and watch
 * it. Engine lock held (the caller holds it). 0 or -errno. Idempotent: 0 at once when
 * the block is open already (so the wire may call it for the block of every QPN it
 * connects, whichever wire allocated the QPN's block first).
 */
int iw_conn_open_block_locked(uint32_t block);
void iw_conn_close_block_locked(uint32_t block);

/*
 * Someone on this host listens on the port: us (bind now if free) or another process.
 * Cheap when nothing changed: no system call while we hold the port, one recv() while
 * another process holds it and we watch it (call it at RTR and from timers). 0, -EAGAIN (another process is taking the port at
 * this moment; a retry is scheduled, call again later) or -errno (-EADDRINUSE: a
 * program that is not softverbs holds the TCP port). Engine lock NOT held (it takes it).
 */
int iw_conn_port_ensure(void);
/* This process holds the port now (softverbs stat, tests). Engine lock NOT held. */
bool iw_conn_port_held(void);

/*
 * Active side: TCP connect to @to (the peer host's address from its GID, port from the
 * environment), set TCP_NODELAY and socket buffers (SOFTVERBS_IWARP_SNDBUF/RCVBUF in
 * bytes, 0 leaves the kernel's autotuning; default 4 MiB each when the kernel allows that
 * much, net.core.wmem_max/rmem_max, else autotuning), send the MPA request for @want.
 * Bounded by @timeout_ms for the TCP connect; does NOT wait for the reply (the peer may
 * reply only once its QP reaches RTR; the caller reads the reply from the fd with
 * iw_conn_take_reply). Returns the fd (non-blocking, CLOEXEC) or -errno (-ECONNREFUSED,
 * -ETIMEDOUT, -ENETUNREACH...). Blocks the calling thread up to @timeout_ms.
 */
int iw_conn_dial(const struct sockaddr *to, socklen_t to_len, const struct iw_params *want,
		 int timeout_ms);

/*
 * Parses the MPA reply at the start of @buf (@len bytes read so far): its length, with
 * *got filled; -EAGAIN (need more bytes); -ECONNREFUSED (a reject); -EPROTO (not a reply,
 * wrong key/revision/private data). Never asks for more than IW_MPA_FRAME_MAX bytes;
 * what follows the frame in @buf is the peer's first FPDU.
 */
int iw_conn_take_reply(const void *buf, size_t len, struct iw_params *got);

/*
 * Passive side: sends the MPA reply (accept, with @mine; or reject). Non-blocking, the
 * whole frame (it is small: a fresh socket's buffer takes it; -EAGAIN otherwise, with
 * nothing sent). The C bit is @mine->crc: echo the request's (RFC 5044 §7.1).
 */
int iw_conn_reply(int fd, const struct iw_params *mine, bool reject);

/*
 * The socket address of a GID (::ffff:a.b.c.d -> AF_INET; other -> AF_INET6, with the
 * scope of the interface that has @sgid when the GID is link-local: -ENODEV if none
 * has it), port set.
 */
int iw_conn_gid_addr(const union ibv_gid *gid, const union ibv_gid *sgid,
		     struct sockaddr_storage *out, socklen_t *len);

/* The port from the environment (SOFTVERBS_IWARP_PORT, else IW_PORT_DEFAULT). */
uint16_t iw_conn_port(void);

/*
 * Whether softverbs answers on the host of @gid (a TCP connection to its port completes
 * within @timeout_ms; closed at once; refused, it is tried again every 20 ms until then,
 * as the port may be changing hands). An answer is remembered for IW_PROBE_TTL_NS per
 * address: the host's QPs going to RTR together ask once. Blocks: no lock held.
 */
#define IW_PROBE_TTL_NS 10000000000ull
bool iw_conn_answers(const union ibv_gid *gid, const union ibv_gid *sgid, int timeout_ms);

/* The frames themselves (tests, fuzzing): those this version sends are this long (a later
 * version may append to the private data: a parser takes what follows its 16 bytes). */
enum { IW_CONN_PD_LEN = 20, IW_CONN_FRAME_LEN = 20 + IW_CONN_PD_LEN };
/* Writes the request for @want into @buf: its length, or -EINVAL. */
int iw_conn_build_request(void *buf, size_t cap, const struct iw_params *want);
/* Parses a request: its length, -EAGAIN (more bytes needed) or -EPROTO. */
int iw_conn_parse_request(const void *buf, size_t len, struct iw_params *got);

/* fork: the child owns none of the parent's sockets (iw_conn's fork hooks, registered
 * with sv_engine_fork_hooks on first use, close its copies). */

#endif
