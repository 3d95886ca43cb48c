/* The iWARP wire's connection states, and how a connection ends (iw_wire.h). */
#include "wire/iwarp/iw_wire.h"

#include "core/sv_path.h"
#include "util/sv_lock.h"
#include "util/sv_log.h"

const char *const iw_link_name[] = {
	[IW_LINK_NONE] = "none",
	[IW_LINK_DIALING] = "dialing",
	[IW_LINK_EXPECTING] = "expecting",
	[IW_LINK_REDIAL] = "redialing",
	[IW_LINK_UP] = "up",
	[IW_LINK_DOWN] = "down",
};

void iw_link_down(struct iw_qp *iq, const char *why)
{
	struct sv_hdr term = { .op = SV_OP_TERMINATE, .src_qpn = iw_peer(iq),
			       .value = IBV_EVENT_QP_FATAL };
	uint32_t was = atomic_exchange(&iq->link, IW_LINK_DOWN);

	if (was == IW_LINK_DOWN)
		return;
	if (atomic_load(&iq->fd) < 0)
		return; /* the QP let go of the socket itself (disconnect): no news */
	if (why)
		sv_dbg("iwarp qp %u: connection to qp %u %s -> down: %s", iq->qpn, iq->peer_qpn,
		       iw_link_name[was], why);
	/* Nothing outstanding will be answered: the QP enters Error, its work is flushed
	 * (RFC 5040 §5.5: a stream that failed ends the QP's life). */
	(void)sv_resp_deliver(iq->qp, &term, NULL);
}

bool iw_link_closed(struct iw_qp *iq, bool goodbye)
{
	struct sv_qp *qp = iq->qp;
	uint32_t upto;
	bool waiting;

	/* Judged at RTS, not by failing the move under rdma_connect (iw_end_waits). */
	if (iw_end_waits(iq))
		return false;
	/* A FIN on an rdma_cm stream: the peer reads no more, but TCP still takes what we
	 * write (the connection is half closed), and a Send is complete once TCP has it
	 * (RFC 5040 §5.1, as siw completes it): what waits in our queue goes first (perftest's
	 * last message, posted as the peer left). A queue another thread is still filling
	 * (a post_send under way) is looked at again at the next poll. */
	if (iq->adopted && !goodbye && iw_tx_pending(iq)) {
		if (iw_tx_flush(iq) < 0) {
			iw_link_down(iq, "the peer's end went, and what we had to send with it");
			return true;
		}
		if (iw_tx_pending(iq))
			return false;
	}
	/* An rdma_cm stream the peer ended in order (a FIN after all we wrote: it read our
	 * stream to its end) completes what TCP took of ours, as RFC 5040 §5.1 lets it and
	 * kernel iWARP does; its placement probe may never be answered now. A goodbye
	 * completes what it says was placed: our last Send it took, and all before it
	 * (the peer left right after its receive completed, before our probe behind that
	 * Send reached it). */
	upto = iq->adopted ? iw_tx_written(iq)
	       : goodbye && iq->bye_placed ? iw_tx_placed(iq, iq->bye_placed) : 0;
	if (upto) {
		struct sv_hdr ack = { .op = SV_OP_ACK, .msn = upto, .src_qpn = iw_peer(iq) };

		if (sv_comp_deliver(qp, &ack, NULL) == SV_RX_CONSUMED)
			iq->acked_told = upto;
	}
	/* (A Read or atomic of the application's still out keeps what follows it
	 * unacknowledged; our own placement probe does not count.) */
	waiting = iw_tx_pending(iq) || atomic_load(&iq->at_head) != atomic_load(&iq->at_tail) ||
		  atomic_load(&iq->tx_acked) != iq->acked_told;

	if (!goodbye && (!iq->adopted || waiting)) {
		iw_link_down(iq, "the peer's end went without a goodbye");
		return true;
	}
	if (atomic_exchange(&iq->link, IW_LINK_DOWN) == IW_LINK_DOWN)
		return true;
	sv_dbg("iwarp qp %u: qp %u closed the connection", iq->qpn, iq->peer_qpn);
	/* As a peer that left on one host: what waits for an answer gets none. */
	sv_spin_lock(&qp->sq.lock);
	sv_comp_peer_gone(qp);
	sv_spin_unlock(&qp->sq.lock);
	if (iq->adopted) {
		/* rdma_cm's stream was the connection: with it closed the QP enters Error and
		 * its receives are flushed, with no async event (the LLP closed, as Linux
		 * siw's QP goes); an application polling its CQ learns it there, not only one
		 * that reads rdma_cm's DISCONNECTED. */
		struct sv_hdr term = { .op = SV_OP_TERMINATE, .src_qpn = iw_peer(iq),
				       .value = SV_TERM_QUIET };

		(void)sv_resp_deliver(qp, &term, NULL);
	}
	return true;
}
