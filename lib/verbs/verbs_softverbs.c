/* softverbs' own extensions (<softverbs/softverbs.h>), in the version node SOFTVERBS_1.0. */
#include <errno.h>
#include <string.h>

#include <softverbs/softverbs.h>

#include "core/sv_qp_data.h"
#include "verbs.h"
#include "wire/sv_wires.h"

static uint64_t rd64(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

int softverbs_query_qp_stats(struct ibv_qp *qp, struct softverbs_qp_stats *stats,
			     size_t stats_size)
{
	struct softverbs_qp_stats s = { 0 };
	struct sv_qp_counters *c;

	if (!qp || !stats || stats_size > sizeof(s))
		return EINVAL;
	c = &to_svqp(qp)->cnt;
	switch (atomic_load_explicit(&c->tx_copy, memory_order_relaxed)) {
	case SV_COPY_CMA:
		s.copy = SOFTVERBS_COPY_CMA;
		break;
	case SV_COPY_BOUNCE:
		s.copy = SOFTVERBS_COPY_BOUNCE;
		break;
	default:
		s.copy = SOFTVERBS_COPY_NONE;
		break;
	}
	s.wire = s.copy == SOFTVERBS_COPY_NONE ? SOFTVERBS_WIRE_NONE : SOFTVERBS_WIRE_SHM;
	s.tx_msgs = rd64(&c->tx_msgs);
	s.rx_msgs = rd64(&c->rx_msgs);
	if (sv_wire_is_iwarp(to_svqp(qp)->wire) && s.tx_msgs + s.rx_msgs)
		s.wire = SOFTVERBS_WIRE_IWARP;
	if (sv_wire_is_roce(to_svqp(qp)->wire) && s.tx_msgs + s.rx_msgs)
		s.wire = SOFTVERBS_WIRE_ROCE;
	s.tx_bytes = rd64(&c->tx_bytes);
	s.tx_cma_bytes = rd64(&c->tx_cma_bytes);
	s.tx_fifo_bytes = rd64(&c->tx_fifo_bytes);
	s.rx_msgs = rd64(&c->rx_msgs);
	s.rx_bytes = rd64(&c->rx_bytes);
	s.rx_cma_bytes = rd64(&c->rx_cma_bytes);
	s.rx_fifo_bytes = rd64(&c->rx_fifo_bytes);
	s.rx_dropped = rd64(&c->rx_dropped);
	s.retransmits = rd64(&c->retransmits);
	memcpy(stats, &s, stats_size);
	return 0;
}

struct ibv_qp *softverbs_create_qp_on_wire(struct ibv_pd *pd, struct ibv_qp_init_attr *attr,
					   enum softverbs_wire wire)
{
	struct ibv_qp *qp;

	if (wire != SOFTVERBS_WIRE_NONE && wire != SOFTVERBS_WIRE_SHM &&
	    wire != SOFTVERBS_WIRE_IWARP) {
		errno = EINVAL;
		return NULL;
	}
	if (wire == SOFTVERBS_WIRE_IWARP && attr && attr->qp_type != IBV_QPT_RC &&
	    attr->qp_type != IBV_QPT_UC) {
		errno = EINVAL; /* iWARP carries connected QPs only */
		return NULL;
	}
	sv_wire_choose_next(wire == SOFTVERBS_WIRE_IWARP ? "iwarp" :
			    wire == SOFTVERBS_WIRE_SHM ? "shm" : NULL);
	qp = ibv_create_qp(pd, attr);
	sv_wire_choose_next(NULL);
	return qp;
}

int softverbs_qp_adopt_stream(struct ibv_qp *qp, int fd, const struct softverbs_stream *s)
{
	struct sv_qp *q;
	int err;

	if (!qp || fd < 0 || !s || s->comp_mask)
		return EINVAL;
	q = to_svqp(qp);
	pthread_mutex_lock(&q->lock);
	if (q->attr.qp_state != IBV_QPS_INIT || !sv_wire_is_iwarp(q->wire))
		err = EINVAL;
	else
		err = -sv_wire_adopt_stream(q, fd, &(struct sv_stream){
			.crc = s->crc != 0, .ext = s->rfc7306 != 0, .ird = s->ird, .ord = s->ord,
			.peer_first = s->peer_first != 0 });
	pthread_mutex_unlock(&q->lock);
	return err;
}

int softverbs_attach_mcast_on(struct ibv_qp *qp, const union ibv_gid *gid, unsigned int ifindex)
{
	if (!qp || !gid || ifindex > INT32_MAX)
		return EINVAL;
	return -sv_mcast_attach(to_svqp(qp), gid, (int)ifindex);
}

int softverbs_qp_set_gsi(struct ibv_qp *qp, int on)
{
	if (!qp)
		return EINVAL;
	return -sv_qp_set_gsi(to_svqp(qp), on != 0);
}

int softverbs_cm_listen(struct ibv_qp *qp, uint64_t service_id, int on)
{
	if (!qp)
		return EINVAL;
	return -sv_qp_cm_listen(to_svqp(qp), service_id, on != 0);
}
