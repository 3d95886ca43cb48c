/*
 * Memory windows (IBA 10.6.7): a key of its own in the context's key table, bound to a
 * range of an MR that allows MW_BIND. Type 1 is bound by ibv_bind_mw, type 2 by an
 * IBV_WR_BIND_MW work request; both bind in the send queue's order (the WR completes
 * with IBV_WC_BIND_MW). IBV_WR_LOCAL_INV and a peer's IBV_WR_SEND_WITH_INV invalidate
 * a type 2 window; deallocating one ends it. Until bound, the window's key reaches
 * nothing, and a remote access through it is a remote access error.
 */
#include <stdlib.h>

#include "verbs.h"

struct sv_mw {
	struct ibv_mw ibv;
	uint32_t index; /* slot in the key table */
};

static struct ibv_mw *alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct sv_mr_entry e = { .pd = to_svpd(pd)->handle, .flags = SV_MR_F_MW };
	struct sv_mw *mw;
	uint32_t key;
	int err;

	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)
		return sv_fail_null(EINVAL);
	mw = calloc(1, sizeof(*mw));
	if (!mw)
		return sv_fail_null(ENOMEM);
	err = sv_mr_table_add(to_svctx(pd->context)->mrs, &e, &mw->index, &key);
	if (err) {
		free(mw);
		return sv_fail_null(-err);
	}
	mw->ibv.context = pd->context;
	mw->ibv.pd = pd;
	mw->ibv.rkey = key;
	mw->ibv.handle = mw->index;
	mw->ibv.type = type;
	atomic_fetch_add(&to_svpd(pd)->usecnt, 1);
	return &mw->ibv;
}

static int dealloc_mw(struct ibv_mw *ibmw)
{
	struct sv_mw *mw = (struct sv_mw *)ibmw;

	sv_mr_table_remove(to_svctx(ibmw->context)->mrs, mw->index);
	atomic_fetch_sub(&to_svpd(ibmw->pd)->usecnt, 1);
	free(mw);
	return 0;
}

/* Type 1: a bind WR in the QP's send queue, under a new key (the low 8 bits change). */
static int bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind)
{
	struct ibv_send_wr wr = {
		.wr_id = mw_bind->wr_id,
		.opcode = IBV_WR_BIND_MW,
		.send_flags = mw_bind->send_flags,
	};
	struct ibv_send_wr *bad;
	int err;

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = mw_bind->bind_info;
	err = sv_verbs_post_send(qp, &wr, &bad);
	if (!err)
		mw->rkey = wr.bind_mw.rkey;
	return err;
}

void sv_verbs_mw_ops(struct ibv_context_ops *ops)
{
	ops->alloc_mw = alloc_mw;
	ops->dealloc_mw = dealloc_mw;
	ops->bind_mw = bind_mw;
}
