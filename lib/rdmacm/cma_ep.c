/*
 * The synchronous endpoint calls: rdma_create_ep, rdma_destroy_ep and rdma_get_request,
 * made of the public calls beneath them.
 */
#include "cma.h"

#include <errno.h>
#include <stdlib.h>

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cm_id;
	struct cma_id *cid;
	int ret;

	if (!id || !res)
		return fail(EINVAL);
	ret = rdma_create_id(NULL, &cm_id, NULL, (enum rdma_port_space)res->ai_port_space);
	if (ret)
		return ret;
	cid = to_cma_id(cm_id);
	if (res->ai_qp_type)
		cm_id->qp_type = (enum ibv_qp_type)res->ai_qp_type;
	if (qp_init_attr && res->ai_qp_type)
		qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
	if (res->ai_flags & RAI_PASSIVE) {
		ret = rdma_bind_addr(cm_id, res->ai_src_addr);
		if (ret)
			goto err;
		/* What rdma_get_request gives each new connection. */
		if (qp_init_attr) {
			cid->ep_qp_attr = malloc(sizeof(*qp_init_attr));
			if (!cid->ep_qp_attr) {
				errno = ENOMEM;
				ret = -1;
				goto err;
			}
			*cid->ep_qp_attr = *qp_init_attr;
		}
		cid->ep_pd = pd;
		if (pd)
			cm_id->pd = pd;
		*id = cm_id;
		return 0;
	}
	ret = rdma_resolve_addr(cm_id, res->ai_src_len ? res->ai_src_addr : NULL,
				res->ai_dst_addr, 2000);
	if (ret)
		goto err;
	ret = rdma_resolve_route(cm_id, 2000);
	if (ret)
		goto err;
	if (qp_init_attr) {
		ret = rdma_create_qp(cm_id, pd, qp_init_attr);
		if (ret)
			goto err;
	}
	*id = cm_id;
	return 0;
err: {
		int err = errno;

		rdma_destroy_id(cm_id);
		errno = err;
	}
	return -1;
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct cma_id *l = to_cma_id(listen);
	struct rdma_cm_event *ev;
	struct rdma_cm_id *new_id;
	int ret;

	if (!listen || !id)
		return fail(EINVAL);
	if (!l->sync)
		return fail(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	ret = rdma_get_cm_event(listen->channel, &ev);
	if (ret)
		return ret;
	if (ev->status) {
		listen->event = ev;
		return fail(ev->status < 0 ? -ev->status : ev->status);
	}
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		listen->event = ev;
		return fail(EINVAL);
	}
	new_id = ev->id;
	/* The new id is synchronous too; it keeps the request as its id->event until
	 * rdma_accept, rdma_reject or rdma_destroy_id. */
	ret = rdma_migrate_id(new_id, NULL);
	if (ret)
		goto err;
	new_id->event = ev;
	if (l->ep_qp_attr) {
		struct ibv_qp_init_attr attr = *l->ep_qp_attr;

		ret = rdma_create_qp(new_id, l->ep_pd, &attr);
		if (ret)
			goto err;
	}
	*id = new_id;
	return 0;
err: {
		int err = errno;

		rdma_reject(new_id, NULL, 0);
		if (new_id->event == ev)
			new_id->event = NULL;
		rdma_ack_cm_event(ev);
		rdma_destroy_id(new_id);
		errno = err;
	}
	return -1;
}
