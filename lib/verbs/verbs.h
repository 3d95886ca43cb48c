/*
 * Internal to libibverbs.so.1: what the entry points share. The core returns 0 or a
 * negative errno; the functions here and in verbs_*.c turn that into the API's
 * conventions (NULL + errno from create_*, a positive errno from modify/destroy/post).
 */
#ifndef SV_VERBS_H
#define SV_VERBS_H

#include <errno.h>
#include <infiniband/verbs.h>

#include "core/sv_cq.h"
#include "core/sv_obj.h"
#include "util/sv_log.h"

/* NULL with errno set, as every ibv_create_* / ibv_alloc_* reports failure. */
static inline void *sv_fail_null(int err)
{
	errno = err;
	return NULL;
}

/* The single device this library offers. */
extern struct ibv_device sv_ibv_device;

int sv_verbs_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr,
			size_t attr_len);
int sv_verbs_query_device_ex(struct ibv_context *ctx,
			     const struct ibv_query_device_ex_input *input,
			     struct ibv_device_attr_ex *attr, size_t attr_size);
struct ibv_pd *sv_verbs_alloc_parent_domain(struct ibv_context *context,
					    struct ibv_parent_domain_init_attr *attr);
struct ibv_td *sv_verbs_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr);
int sv_verbs_dealloc_td(struct ibv_td *td);
struct ibv_mr *sv_verbs_mr_create(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				  unsigned int access);
int sv_verbs_check_access(unsigned int access);
struct ibv_dm *sv_verbs_alloc_dm(struct ibv_context *context, struct ibv_alloc_dm_attr *attr);
int sv_verbs_free_dm(struct ibv_dm *dm);
struct ibv_mr *sv_verbs_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t dm_offset,
				  size_t length, unsigned int access);
void sv_verbs_mw_ops(struct ibv_context_ops *ops);
void sv_verbs_xrc_ops(struct verbs_context *v);
int sv_verbs_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		       struct ibv_sge *sg_list, uint32_t num_sge);
int sv_verbs_query_rt_values(struct ibv_context *ctx, struct ibv_values_ex *values);

struct ibv_cq_ex *sv_verbs_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
int sv_verbs_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sv_verbs_req_notify_cq(struct ibv_cq *cq, int solicited_only);

struct ibv_qp *sv_verbs_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
int sv_verbs_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sv_verbs_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
void sv_verbs_qp_ex_init(struct sv_qp *qp);

struct ibv_srq *sv_verbs_create_srq_ex(struct ibv_context *ctx,
				       struct ibv_srq_init_attr_ex *attr);
int sv_verbs_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			   struct ibv_recv_wr **bad);


/* Waits until the user has acknowledged @reported events counted in @completed. */
void sv_wait_events_acked(pthread_mutex_t *mutex, pthread_cond_t *cond,
			  const uint32_t *completed, const uint32_t *reported);

/* GID helpers (verbs_query.c). */
int sv_gid_index_valid(struct sv_context *ctx, int index);

#endif
