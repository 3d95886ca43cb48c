/*
 * The UDP wire: UD datagrams between hosts (docs/architecture.md, "The UDP wire").
 *
 * A UD QP has two wires: the one it was created on (shm) for the QPs of its host, and
 * this one for everyone else's, its "far" wire (qp->far, its state in qp->far_qp). The
 * core picks per work request: a destination GID that is not one of this host's goes
 * here. Each datagram is one UDP datagram in RoCE v2's layout (udp_proto.h) sent to the
 * destination GID (an IPv6 address, or an IPv4 one mapped) at the port of the
 * destination QPN's block: base (SOFTVERBS_UD_PORT, 16384) + QPN / 256. The process
 * owning a block binds its port when the block's first UD QP is created: no daemon, and
 * the kernel frees the port when the process dies.
 *
 *   udp_proto.c  the datagram codec: BTH, DETH, immediate, CRC
 *   udp_wire.c   the blocks' sockets, sending, receiving and routing to the block's QPs
 *
 * Locks: a block's mutex (its QPs, their queues of datagrams received and not yet
 * delivered) is taken under rx_busy, never under sq.lock; sending takes none (the
 * socket is the block's, fixed while a QP uses it).
 */
#ifndef UDP_WIRE_H
#define UDP_WIRE_H

#include "core/sv_wire.h"

extern const struct sv_wire_ops sv_wire_udp;

#endif
