#include "wire/sv_wires.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/sv_log.h"
#include "wire/iwarp/iw_wire.h"
#include "wire/shm/shm_wire.h"

static _Thread_local const char *next_wire;

void sv_wire_choose_next(const char *name)
{
	next_wire = name;
}

bool sv_wire_is_iwarp(const struct sv_wire_ops *w)
{
	return w == &sv_wire_iwarp;
}

int sv_wire_adopt_stream(struct sv_qp *qp, int fd, bool crc, bool ext, uint16_t ird,
			 uint16_t ord)
{
	return qp->wire == &sv_wire_iwarp ? iw_qp_adopt(qp, fd, crc, ext, ird, ord) : -EINVAL;
}

const struct sv_wire_ops *sv_wire_for_qp(enum ibv_qp_type type)
{
	const char *w = next_wire ? next_wire : getenv("SOFTVERBS_WIRE");

	/* UD and multicast between hosts come with RoCE v2: on iWARP, UD stays on shm. */
	if (w && !strcmp(w, "iwarp") && type != IBV_QPT_UD && type != IBV_QPT_XRC_SEND &&
	    type != IBV_QPT_XRC_RECV)
		return &sv_wire_iwarp;
	if (w && strcmp(w, "shm") && strcmp(w, "iwarp")) {
		static _Atomic bool told;

		if (!atomic_exchange(&told, true))
			sv_warn("SOFTVERBS_WIRE=%s: not a wire (shm, iwarp); using shm", w);
	}
	return &sv_wire_shm;
}
