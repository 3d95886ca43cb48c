/* softverbs' own extensions (<softverbs/softverbs.h>), in the version node SOFTVERBS_1.0. */
#include <errno.h>
#include <string.h>

#include <softverbs/softverbs.h>

#include "verbs.h"

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
	s.tx_bytes = rd64(&c->tx_bytes);
	s.tx_cma_bytes = rd64(&c->tx_cma_bytes);
	s.tx_fifo_bytes = rd64(&c->tx_fifo_bytes);
	s.rx_msgs = rd64(&c->rx_msgs);
	s.rx_bytes = rd64(&c->rx_bytes);
	s.rx_cma_bytes = rd64(&c->rx_cma_bytes);
	s.rx_fifo_bytes = rd64(&c->rx_fifo_bytes);
	memcpy(stats, &s, stats_size);
	return 0;
}
