/* Local buffers: a WQE's scatter/gather list checked against the key table (IBA 10.6.3:
 * L_Key, PD, access, range; on demand, that the pages are there) and made iovecs. */
#ifndef SV_SGE_H
#define SV_SGE_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/sv_mr.h"

enum { SV_IOV_MAX = 64 };

/* The @n SGEs as iovecs (zero-length ones skipped), checked for @need
 * (IBV_ACCESS_LOCAL_WRITE when the data is written there): IBV_WC_SUCCESS, or
 * IBV_WC_LOC_PROT_ERR. */
enum ibv_wc_status sv_sge_iov(const struct sv_mr_entry *slots, uint32_t pd,
			      const struct ibv_sge *sges, uint32_t n, uint32_t need,
			      struct iovec *iov, int *n_iov, uint64_t *total);

/* The bytes [off, off + len) of an iovec list, as an iovec list (at most @n entries). */
int sv_iov_slice(const struct iovec *iov, int n, uint64_t off, uint64_t len, struct iovec *out);

#endif
