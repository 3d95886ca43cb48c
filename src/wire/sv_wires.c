#include "wire/sv_wires.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/sv_device.h"
#include "core/sv_path.h"
#include "util/sv_log.h"
#include "wire/iwarp/iw_conn.h"
#include "wire/iwarp/iw_wire.h"
#include "wire/sv_qpn.h"
#include "wire/shm/shm_wire.h"
#include "wire/udp/udp_wire.h"

static _Thread_local const char *next_wire;

void sv_wire_choose_next(const char *name)
{
	next_wire = name;
}

bool sv_wire_is_iwarp(const struct sv_wire_ops *w)
{
	return w == &sv_wire_iwarp;
}

bool sv_wire_is_roce(const struct sv_wire_ops *w)
{
	return w == &sv_wire_roce;
}

int sv_wire_adopt_stream(struct sv_qp *qp, int fd, const struct sv_stream *s)
{
	return qp->wire == &sv_wire_iwarp ? iw_qp_adopt(qp, fd, s) : -EINVAL;
}

const struct sv_wire_ops *sv_wire_for_qp(enum ibv_qp_type type)
{
	const char *w = next_wire ? next_wire : getenv("SOFTVERBS_WIRE");

	/* Every new QPN block's attach socket is the shm wire's to answer, whichever wire
	 * claimed the block: UD and XRC QPs, always on shm, may take its numbers. */
	sv_qpn_answer_blocks(shm_conn_listen_locked);

	/* UD and multicast between hosts come with RoCE v2: on iWARP, UD stays on shm. */
	if (w && !strcmp(w, "iwarp") && type != IBV_QPT_UD && type != IBV_QPT_XRC_SEND &&
	    type != IBV_QPT_XRC_RECV)
		return &sv_wire_iwarp;
	if (w && strcmp(w, "shm") && strcmp(w, "iwarp") && strcmp(w, "roce")) {
		static _Atomic bool told;

		if (!atomic_exchange(&told, true))
			sv_warn("SOFTVERBS_WIRE=%s: not a wire (shm, iwarp, roce); using shm", w);
	}
	/* roce: created here, moved to RoCE at RTR (sv_wire_for_peer). */
	return &sv_wire_shm;
}

const struct sv_wire_ops *sv_wire_far_for_qp(enum ibv_qp_type type, bool *local)
{
	const char *w = getenv("SOFTVERBS_UDP");

	/* SOFTVERBS_UDP=0 keeps UD on the host (no socket, no port); =all sends even to
	 * this host's GIDs over UDP (the UD tests run so). */
	*local = w && !strcmp(w, "all");
	if (type != IBV_QPT_UD || (w && !strcmp(w, "0")))
		return NULL;
	return &sv_wire_udp;
}

/* How long a peer host may take to answer softverbs' TCP port before it is taken for one
 * without softverbs (a NIC's, rxe's: refused at once). */
enum { PROBE_MS = 300 };

/* SOFTVERBS_WIRE=roce: RC, UC and XRC QPs connect over RoCE v2 whatever their peer, this
 * host's too (UD as without it). */
static bool roce_wanted(void)
{
	const char *w = getenv("SOFTVERBS_WIRE");

	return w && !strcmp(w, "roce");
}

/* SOFTVERBS_WIRE names a wire for every QP: where the peer is decides nothing then. */
static bool forced(void)
{
	const char *w = getenv("SOFTVERBS_WIRE");

	return w && (!strcmp(w, "shm") || !strcmp(w, "iwarp"));
}

static bool connected(enum ibv_qp_type type)
{
	return type == IBV_QPT_RC || type == IBV_QPT_UC;
}

void sv_wire_qp_created(struct sv_qp *qp)
{
	bool cm = next_wire != NULL; /* softverbs_create_qp_on_wire: rdma_cm's */

	qp->wire_fixed = forced() || cm;
	/* A connected QP that may set up a connection verbs-only (not rdma_cm's, not one
	 * kept on shm) is reachable through the host's port from now on. */
	if (!cm && connected(qp->ibv.qp_base.qp_type) &&
	    (qp->wire == &sv_wire_iwarp || !forced()))
		iw_wire_prepare_qpn(qp->ibv.qp_base.qp_num);
}

const struct sv_wire_ops *sv_wire_for_peer(struct sv_qp *qp)
{
	const struct ibv_ah_attr *ah = &qp->attr.ah_attr;
	const struct sv_host *host = &sv_qp_ctx(qp)->host;
	int sgid = ah->grh.sgid_index < host->n_gids ? ah->grh.sgid_index : 0;
	enum ibv_qp_type type = qp->ibv.qp_base.qp_type;
	bool xrc = type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV;

	if (qp->wire_fixed || (!connected(type) && !xrc))
		return qp->wire;
	if (roce_wanted() && ah->is_global)
		return &sv_wire_roce;
	/* A LID names a port of this host (softverbs' LIDs are host-unique); a GID of ours,
	 * this host; any other GID, another host. */
	if (!ah->is_global || sv_host_find_gid(host, &ah->grh.dgid) >= 0)
		return &sv_wire_shm;
	if (xrc)
		return &sv_wire_roce; /* (iWARP has no XRC) */
	/* Another host: iWARP if softverbs answers there (both ends ask, and agree), else
	 * the RoCE v2 a NIC or Linux's rxe speaks (RC and UC). */
	if (!iw_conn_answers(&ah->grh.dgid, &host->gids[sgid].gid, PROBE_MS)) {
		sv_dbg("qp %u: no softverbs at the peer's host: RoCE v2", qp->ibv.qp_base.qp_num);
		return &sv_wire_roce;
	}
	return &sv_wire_iwarp;
}
