/* The wires softverbs has, and which one a new QP uses. */
#ifndef SV_WIRES_H
#define SV_WIRES_H

#include "core/sv_wire.h"

/* The wire for a new QP of @type: shared memory between the processes of this host, or
 * iWARP over TCP (SOFTVERBS_WIRE=iwarp: RC and UC; UD and XRC stay on shm). */
const struct sv_wire_ops *sv_wire_for_qp(enum ibv_qp_type type);

#endif
