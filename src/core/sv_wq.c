#include "core/sv_wq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

static int wq_init(struct sv_wq *wq, uint32_t max_wr, uint32_t stride)
{
	memset(wq, 0, sizeof(*wq));
	wq->max_wr = max_wr;
	wq->size = pow2_at_least(max_wr ? max_wr : 1);
	wq->stride = (stride + 63) & ~63u;
	wq->buf = calloc(wq->size, wq->stride);
	if (!wq->buf)
		return -ENOMEM;
	sv_spin_init(&wq->lock);
	return 0;
}

int sv_wq_init_send(struct sv_wq *wq, uint32_t max_wr, uint32_t max_sge, uint32_t max_inline)
{
	uint32_t stride = sizeof(struct sv_send_wqe) + max_sge * sizeof(struct ibv_sge) + max_inline;
	int ret = wq_init(wq, max_wr, stride);

	wq->max_sge = max_sge;
	wq->max_inline = max_inline;
	return ret;
}

int sv_wq_init_recv(struct sv_wq *wq, uint32_t max_wr, uint32_t max_sge)
{
	int ret = wq_init(wq, max_wr,
			  sizeof(struct sv_recv_wqe) + max_sge * sizeof(struct ibv_sge));

	wq->max_sge = max_sge;
	return ret;
}

void sv_wq_destroy(struct sv_wq *wq)
{
	if (!wq->buf)
		return;
	free(wq->buf);
	wq->buf = NULL;
}
