/* The wires softverbs has, and which one a new QP uses. */
#ifndef SV_WIRES_H
#define SV_WIRES_H

#include "core/sv_wire.h"

/* The wire for a new QP: shared memory, between the processes of this host (the only
 * one so far; SOFTVERBS_WIRE will choose once there are more). */
const struct sv_wire_ops *sv_wire_for_qp(void);

#endif
