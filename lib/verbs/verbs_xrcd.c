/*
 * XRC domains (ibv_open_xrcd / ibv_close_xrcd) and SRQ numbers (ibv_get_srq_num). The
 * domains themselves are src/core/sv_xrcd.c; XRC SRQs are made in verbs_srq.c and XRC
 * QPs in verbs_qp.c.
 */
#include <stdlib.h>

#include "verbs.h"

static struct ibv_xrcd *open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *attr)
{
	struct sv_xrcd *x;
	int err;

	if (!context || !attr)
		return sv_fail_null(EINVAL);
	/* ibv_cmd_open_xrcd's checks: unknown bits, then both FD and OFLAGS required. */
	if (attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED)
		return sv_fail_null(EOPNOTSUPP);
	if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) ||
	    !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS))
		return sv_fail_null(EINVAL);
	x = calloc(1, sizeof(*x));
	if (!x)
		return sv_fail_null(ENOMEM);
	err = -sv_xrc_domain_open(attr->fd, attr->oflags, &x->dom);
	if (err) {
		free(x);
		return sv_fail_null(err);
	}
	x->ibv.context = context;
	return &x->ibv;
}

static int close_xrcd(struct ibv_xrcd *ibxrcd)
{
	struct sv_xrcd *x;

	if (!ibxrcd)
		return EINVAL;
	x = to_svxrcd(ibxrcd);
	/* SRQs and target QPs made through this handle hold it (ib_uverbs_close_xrcd). */
	if (atomic_load(&x->usecnt))
		return EBUSY;
	sv_xrc_domain_close(x->dom);
	free(x);
	return 0;
}

static int get_srq_num(struct ibv_srq *srq, uint32_t *srq_num)
{
	if (!srq || !srq_num)
		return EINVAL;
	*srq_num = to_svsrq(srq)->srqn;
	return 0;
}

void sv_verbs_xrc_ops(struct verbs_context *v)
{
	v->open_xrcd = open_xrcd;
	v->close_xrcd = close_xrcd;
	v->get_srq_num = get_srq_num;
}
