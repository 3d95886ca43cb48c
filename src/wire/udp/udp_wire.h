/*
 * The UDP wire: UD datagrams between hosts as RoCE v2 packets (docs/architecture.md, "The
 * UDP wire").
 *
 * A UD QP has two wires: the one it was created on (shm) for the QPs of its host, and
 * this one for everyone else's, its "far" wire (qp->far, its state in qp->far_qp). The
 * core picks per work request: a destination GID that is not one of this host's goes
 * here. Each datagram is one RoCE v2 packet (src/wire/roce/rv_proto.h: BTH, DETH,
 * [ImmDt], payload, pad, ICRC) sent to the destination GID (an IPv6 address, or an IPv4
 * one mapped) at UDP port 4791 (SOFTVERBS_ROCE_PORT), from the process's socket on that
 * port (src/wire/roce/rv_port.h), shared with the user's other processes, each steered
 * the datagrams of its QPN blocks: no daemon.
 *
 * Locks: the port's mutex (the socket's reads, the blocks and their QPs, their queues of
 * datagrams received and not yet delivered) is taken under rx_busy, never under
 * sq.lock; sending takes none (the socket is fixed while a QP uses it). An RC QP's
 * answer is decoded under its sq.lock (the requester's PSNs), taken inside the port's
 * mutex.
 *
 * sv_wire_roce: RC QPs on the same port and socket, from RTR (udp_rc.h).
 */
#ifndef UDP_WIRE_H
#define UDP_WIRE_H

#include "core/sv_wire.h"

extern const struct sv_wire_ops sv_wire_udp;
/* RC between hosts as the IBA's reliable connection over RoCE v2 (udp_rc.h): on the same
 * port and socket, a QP's own wire from RTR (SOFTVERBS_WIRE=roce). */
extern const struct sv_wire_ops sv_wire_roce;

#endif
