#include "core/sv_sge.h"

#include "util/sv_mem.h"

enum ibv_wc_status sv_sge_iov(const struct sv_mr_entry *slots, uint32_t pd,
			      const struct ibv_sge *sges, uint32_t n, uint32_t need,
			      struct iovec *iov, int *n_iov, uint64_t *total)
{
	*n_iov = 0;
	*total = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct ibv_sge *sge = &sges[i];
		uint64_t va;

		if (!sge->length)
			continue;
		if (sv_mr_check(slots, sge->lkey, pd, need, sge->addr, sge->length, &va))
			return IBV_WC_LOC_PROT_ERR;
		/* On demand: the pages must be there to read, or to write (a receive, a READ's
		 * or an atomic's result), or the copy would fault (a NIC's page fault fails
		 * the WR). */
		if (sv_mr_on_demand(slots, sge->lkey) &&
		    !sv_mem_accessible(va, sge->length, need & IBV_ACCESS_LOCAL_WRITE))
			return IBV_WC_LOC_PROT_ERR;
		iov[*n_iov].iov_base = (void *)(uintptr_t)va;
		iov[*n_iov].iov_len = sge->length;
		(*n_iov)++;
		*total += sge->length;
	}
	return IBV_WC_SUCCESS;
}

int sv_iov_slice(const struct iovec *iov, int n, uint64_t off, uint64_t len, struct iovec *out)
{
	int k = 0;

	for (int i = 0; i < n && len; i++) {
		uint64_t take;

		if (off >= iov[i].iov_len) {
			off -= iov[i].iov_len;
			continue;
		}
		take = iov[i].iov_len - off;
		if (take > len)
			take = len;
		out[k].iov_base = (char *)iov[i].iov_base + off;
		out[k++].iov_len = take;
		len -= take;
		off = 0;
	}
	return k;
}
