/*
 * A QP changes wires before RTR, keeping its number: where its peer is decides which
 * (src/wire/sv_wires.c, sv_wire_for_peer). Above sv_qp.c and sv_engine.c (it takes the
 * QP out of the engine and its CQs while the wire changes under it).
 */
#include <errno.h>

#include "core/sv_cq.h"
#include "core/sv_engine.h"
#include "core/sv_path.h"
#include "core/sv_qp_data.h"
#include "util/sv_log.h"

int sv_qp_rewire(struct sv_qp *qp, const struct sv_wire_ops *to)
{
	const struct sv_wire_ops *from = qp->wire;
	uint32_t qpn = qp->ibv.qp_base.qp_num;
	int err;

	if (to == from)
		return 0;
	if (!from->qp_leave || !from->qp_take || !to->qp_leave || !to->qp_take ||
	    (qp->attr.qp_state != IBV_QPS_RESET && qp->attr.qp_state != IBV_QPS_INIT))
		return -EINVAL;
	/* Nobody may use the wire while it changes: not the pollers of its CQs, not the
	 * progress thread (their pins are waited for). */
	if (qp->scq)
		sv_cq_detach_qp(qp->scq, qp);
	if (qp->rcq && qp->rcq != qp->scq)
		sv_cq_detach_qp(qp->rcq, qp);
	sv_engine_remove_qp(qp);
	qp->wire->disconnect(qp);
	from->qp_leave(qp);
	/* The wire changes under the engine's lock: what looks the QP up by number there
	 * (a wire's hand-over) sees the old wire or the new one, and the new one's state
	 * only once it is made (a wire publishes wire_qp under that lock too). */
	sv_engine_lock();
	qp->wire = to;
	sv_engine_unlock();
	err = to->qp_take(qp, qpn);
	if (err) {
		sv_engine_lock();
		qp->wire = from; /* back where it was (its state made anew) */
		sv_engine_unlock();
		if (from->qp_take(qp, qpn))
			sv_err("qp %u: lost its wire moving to %s", qpn, to->name);
	}
	sv_qp_data_publish(qp);
	if (sv_engine_add_qp(qp))
		sv_err("qp %u: not in the progress engine after moving wires", qpn);
	if (qp->scq && sv_cq_attach_qp(qp->scq, qp))
		sv_err("qp %u: off its send CQ after moving wires", qpn);
	if (qp->rcq && qp->rcq != qp->scq && sv_cq_attach_qp(qp->rcq, qp))
		sv_err("qp %u: off its receive CQ after moving wires", qpn);
	sv_dbg("qp %u: wire %s -> %s%s", qpn, from->name, qp->wire->name, err ? " refused" : "");
	return err;
}

