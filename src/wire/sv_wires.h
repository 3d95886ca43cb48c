/* The wires softverbs has, and which one a new QP uses. */
#ifndef SV_WIRES_H
#define SV_WIRES_H

#include <stdbool.h>
#include <stdint.h>

#include "core/sv_wire.h"

/* The wire for a new QP of @type: shared memory between the processes of this host (a
 * connected QP moves to iWARP at RTR when its peer is on another host: sv_wire_for_peer),
 * or the one SOFTVERBS_WIRE forces (iwarp: RC and UC; UD and XRC stay on shm). */
const struct sv_wire_ops *sv_wire_for_qp(enum ibv_qp_type type);
/* The wire to other hosts' QPs a QP of @type has beside it (UD: UDP), or NULL;
 * *local: this host's GIDs are to go on it too (SOFTVERBS_UDP=all, for tests). */
const struct sv_wire_ops *sv_wire_far_for_qp(enum ibv_qp_type type, bool *local);
/* A QP was made: a connected one may later move to iWARP (its number reachable). */
void sv_wire_qp_created(struct sv_qp *qp);
/* At RTR: the wire the QP's peer needs (shm on this host, iWARP on another), unless
 * SOFTVERBS_WIRE forces one. */
const struct sv_wire_ops *sv_wire_for_peer(struct sv_qp *qp);
/* The wire the calling thread's next QP takes ("shm", "iwarp"; NULL: the default). */
void sv_wire_choose_next(const char *name);
bool sv_wire_is_iwarp(const struct sv_wire_ops *w);
bool sv_wire_is_roce(const struct sv_wire_ops *w);
/* An iWARP QP in INIT takes a connected stream whose MPA exchange is done (rdma_cm). */
int sv_wire_adopt_stream(struct sv_qp *qp, int fd, const struct sv_stream *s);

#endif
