/*
 * Host-unique QP numbers.
 *
 * A QPN names a queue pair on its host (IBA: the GID/LID names the port, the QPN the
 * QP behind it), so two processes must never hand out the same number. A process
 * claims a block of SV_QPN_BLOCK numbers by binding the abstract unix socket
 * "softverbs/qpn/<block>": bind() is the atomic claim, the kernel drops the name when
 * the process dies (nothing stale survives a crash), and the socket is where a peer
 * on the host finds the QP's owner. Abstract names belong to the network namespace,
 * as hosts do here.
 */
#ifndef SV_QPN_H
#define SV_QPN_H

#include <stdint.h>

#define SV_QPN_BLOCK_BITS 8
#define SV_QPN_BLOCK (1u << SV_QPN_BLOCK_BITS)
/* Blocks 1 to 16383 (QPNs below 2^22): a block is also a UDP port of the host, base +
 * block (src/wire/udp/udp_wire.h), and 16384 of them fit below the ephemeral range. */
#define SV_QPN_BLOCKS (1u << 14)

/*
 * 0 and *qpn, or -ENOMEM / -errno. Never returns 0 or 1 (IBA: QP0 and QP1 are special).
 * @owner is what sv_qpn_owner() answers for the number. When a new block was claimed,
 * *new_listen_fd is its socket (listening, non-blocking) for the engine to watch; else -1.
 */
int sv_qpn_alloc(uint32_t *qpn, void *owner, int *new_listen_fd);
/*
 * Who answers a new block's attach socket from now on: sv_qpn_alloc hands @answer the
 * socket (and reports -1 in *new_listen_fd), whichever wire's QP claimed the block, since
 * the block's later QPs may be on another wire (sv_wires.c names the shm wire's
 * listener: UD and XRC QPs are always on shm). Called with the engine lock held, as
 * sv_qpn_alloc is; @answer closes the socket when it fails.
 */
void sv_qpn_answer_blocks(int (*answer)(int listen_fd));
void sv_qpn_free(uint32_t qpn);

/* The owner given at allocation, or NULL. The caller keeps the owner alive (engine lock). */
void *sv_qpn_owner(uint32_t qpn);

void sv_qpn_atfork_prepare(void);
void sv_qpn_atfork_parent(void);
void sv_qpn_atfork_child(void);

/* The abstract socket name of the block holding @qpn (for finding its owner). */
int sv_qpn_sockname(uint32_t qpn, char *buf, int len);

#endif
