/*
 * Black-box tests of the memory features beyond plain MRs, in one process: an RC pair of
 * QPs on this host (A sends, B owns the target memory), every byte that moves checked.
 *
 * What is asserted (rdma-core ibv_alloc_mw(3), ibv_bind_mw(3), ibv_post_send(3),
 * ibv_alloc_dm(3), ibv_import_device(3), ibv_import_pd(3), ibv_advise_mr(3),
 * ibv_alloc_parent_domain(3), ibv_alloc_td(3), ibv_wr_post(3); IBA 10.6.7, 9.4.5):
 * - Memory windows: types 1 and 2 (3 is EINVAL); an unbound window reaches nothing; a
 *   type 1 bind (ibv_bind_mw) changes the key's low 8 bits and completes as BIND_MW; a
 *   type 2 bind is an IBV_WR_BIND_MW; writes land inside the bound range and fail
 *   outside it; LOCAL_INV, a peer's SEND_WITH_INV and dealloc end a window; a bind on an
 *   MR without MW_BIND is MW_BIND_ERR; a PD with a window is EBUSY.
 * - Device memory: max_dm_size, the allocation limits, copies in 4-byte units within the
 *   allocation, zero-based MRs a peer writes into, no free while an MR uses it.
 * - Import: a second context on cmd_fd, imported PD/MR/DM with the original's keys,
 *   unknown handles, a non-softverbs fd, an import outliving the original context.
 * - On-demand paging: the caps, MRs over unmapped memory, an implicit MR reaching any
 *   buffer, ibv_advise_mr's checks.
 * - Parent domains and thread domains: usable as a PD, EBUSY while named, CQs with
 *   IBV_CQ_INIT_ATTR_MASK_PD.
 * - RDMA atomic write: 8 bytes land, IBV_WC_ATOMIC_WRITE, an unaligned address is EINVAL.
 */
#include "verbs/sv_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define WAIT_MS 5000
#define TGT_LEN 8192u
#define SRC_LEN 4096u
#define DM_MAX (256u * 1024u)

/* ---- helpers ------------------------------------------------------------------------- */

static void fill(unsigned char *p, size_t len, unsigned int seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(seed * 31u + i * 7u + 1u);
}

static void check_fill(const unsigned char *p, size_t len, unsigned int seed, const char *what)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != (unsigned char)(seed * 31u + i * 7u + 1u))
			fail_msg("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, p[i],
				 (unsigned char)(seed * 31u + i * 7u + 1u));
}

static void check_byte(const unsigned char *p, size_t len, unsigned char v, const char *what)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != v)
			fail_msg("%s: byte %zu is 0x%02x, expected 0x%02x (untouched)", what, i,
				 p[i], v);
}

static unsigned char *alloc_buf(size_t len, unsigned char v)
{
	/* (aligned_alloc wants a size that is a multiple of the alignment.) */
	unsigned char *p = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);

	assert_non_null(p);
	memset(p, v, len);
	return p;
}

/* One completion from @cq within WAIT_MS with @wr_id and @st (and @op when it succeeds). */
static void expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st,
		      enum ibv_wc_opcode op, struct ibv_wc *out, const char *what)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	if (tu_poll(cq, 1, &wc, WAIT_MS) != 1)
		fail_msg("%s: no completion within %d ms", what, WAIT_MS);
	if (wc.wr_id != wr_id || wc.status != st)
		fail_msg("%s: completion wr_id %llu status %s, expected wr_id %llu status %s",
			 what, (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
			 (unsigned long long)wr_id, ibv_wc_status_str(st));
	if (st == IBV_WC_SUCCESS && wc.opcode != op)
		fail_msg("%s: completion opcode %d, expected %d", what, wc.opcode, op);
	if (out)
		*out = wc;
}

static struct ibv_qp *create_rc(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	return ibv_create_qp(pd, &attr);
}

/* Both QPs of a pair to RTS, each towards the other, with @access as qp_access_flags. */
static void connect_pair(struct tu_res *res, struct ibv_qp *a, struct ibv_qp *b, int access)
{
	struct tu_conn c;

	tu_conn_init(&c, res, b->qp_num);
	c.access = access;
	assert_int_equal(tu_qp_connect(a, &c, IBV_QPS_RTS), 0);
	tu_conn_init(&c, res, a->qp_num);
	c.access = access;
	assert_int_equal(tu_qp_connect(b, &c, IBV_QPS_RTS), 0);
}

static int post_write(struct ibv_qp *qp, uint64_t wr_id, const void *src, uint32_t len,
		      uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad = NULL;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

/* An RDMA WRITE from @qp that completes on @cq with @st. */
static void write_expect(struct ibv_qp *qp, struct ibv_cq *cq, const void *src, uint32_t len,
			 uint32_t lkey, uint64_t raddr, uint32_t rkey, enum ibv_wc_status st,
			 const char *what)
{
	assert_int_equal(post_write(qp, 77, src, len, lkey, raddr, rkey), 0);
	expect_wc(cq, 77, st, IBV_WC_RDMA_WRITE, NULL, what);
}

/*
 * The common setting: A (source) and B (target) on the fixture's PD and CQ, connected
 * with REMOTE_WRITE; a source buffer with a LOCAL_WRITE MR, a target buffer (0xEE) with
 * an MR of @tgt_access.
 */
struct env {
	struct tu_res *res;
	unsigned char *src, *tgt;
	struct ibv_mr *smr, *tmr;
	struct ibv_qp *a, *b;
};

/* A fresh connected pair (after an error left the old one in Error). */
static void env_new_pair(struct env *e)
{
	if (e->a)
		tu_destroy_qp(e->res, e->a);
	if (e->b)
		tu_destroy_qp(e->res, e->b);
	e->a = tu_keep_qp(e->res, create_rc(e->res->pd, e->res->cq));
	e->b = tu_keep_qp(e->res, create_rc(e->res->pd, e->res->cq));
	connect_pair(e->res, e->a, e->b, IBV_ACCESS_REMOTE_WRITE);
}

static void env_open(struct env *e, struct tu_res *res, unsigned int tgt_access)
{
	memset(e, 0, sizeof(*e));
	e->res = res;
	e->src = alloc_buf(SRC_LEN, 0);
	e->tgt = alloc_buf(TGT_LEN, 0xEE);
	e->smr = ibv_reg_mr(res->pd, e->src, SRC_LEN, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(e->smr);
	e->tmr = ibv_reg_mr(res->pd, e->tgt, TGT_LEN, (int)tgt_access);
	assert_non_null(e->tmr);
	env_new_pair(e);
}

static void env_close(struct env *e)
{
	tu_destroy_qp(e->res, e->a);
	tu_destroy_qp(e->res, e->b);
	assert_int_equal(ibv_dereg_mr(e->smr), 0);
	assert_int_equal(ibv_dereg_mr(e->tmr), 0);
	free(e->src);
	free(e->tgt);
}

#define MW_MR_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND)
/* The window's range in the target buffer. */
#define WIN_OFF 1024u
#define WIN_LEN 2048u

/* A from e->src (seed @seed) into the target at @off through @rkey: @st; on success the
 * bytes are there. */
static void write_tgt(struct env *e, uint32_t off, uint32_t len, uint32_t rkey,
		      unsigned int seed, enum ibv_wc_status st, const char *what)
{
	fill(e->src, len, seed);
	write_expect(e->a, e->res->cq, e->src, len, e->smr->lkey, (uintptr_t)e->tgt + off, rkey,
		     st, what);
	if (st == IBV_WC_SUCCESS)
		check_fill(e->tgt + off, len, seed, what);
}

/* ibv_bind_mw (type 1) of [WIN_OFF, +WIN_LEN) of @mr on B: the WR completes with @st. */
static void bind_type1(struct env *e, struct ibv_mw *mw, struct ibv_mr *mr,
		       enum ibv_wc_status st)
{
	struct ibv_mw_bind bind = {
		.wr_id = 11,
		.send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr, .addr = (uintptr_t)e->tgt + WIN_OFF, .length = WIN_LEN,
			       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE },
	};
	struct ibv_wc wc;

	assert_int_equal(ibv_bind_mw(e->b, mw, &bind), 0);
	expect_wc(e->res->cq, 11, st, IBV_WC_BIND_MW, &wc, "ibv_bind_mw");
	if (st == IBV_WC_SUCCESS)
		assert_int_equal(wc.qp_num, e->b->qp_num);
}

/* IBV_WR_BIND_MW (type 2) of [WIN_OFF, +WIN_LEN) of e->tmr on B: the new key. */
static uint32_t bind_type2(struct env *e, struct ibv_mw *mw)
{
	struct ibv_send_wr wr = { .wr_id = 12, .opcode = IBV_WR_BIND_MW,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad = NULL;
	uint32_t key = ibv_inc_rkey(mw->rkey);

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = key;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){
		.mr = e->tmr, .addr = (uintptr_t)e->tgt + WIN_OFF, .length = WIN_LEN,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};
	assert_int_equal(ibv_post_send(e->b, &wr, &bad), 0);
	expect_wc(e->res->cq, 12, IBV_WC_SUCCESS, IBV_WC_BIND_MW, NULL, "IBV_WR_BIND_MW");
	return key;
}

/* ---- memory windows ------------------------------------------------------------------ */

static void test_mw_alloc_types_1_and_2_type_3_is_einval(void **state)
{
	struct tu_res *res = *state;
	struct ibv_mw *m1 = ibv_alloc_mw(res->pd, IBV_MW_TYPE_1);
	struct ibv_mw *m2 = ibv_alloc_mw(res->pd, IBV_MW_TYPE_2);
	struct ibv_mw *m3;

	assert_non_null(m1);
	assert_non_null(m2);
	assert_int_equal(m1->type, IBV_MW_TYPE_1);
	assert_int_equal(m2->type, IBV_MW_TYPE_2);
	assert_ptr_equal(m1->pd, res->pd);
	assert_ptr_equal(m1->context, res->ctx);
	assert_int_not_equal(m1->rkey, 0);
	assert_int_not_equal(m1->rkey, m2->rkey);
	errno = 0;
	m3 = ibv_alloc_mw(res->pd, (enum ibv_mw_type)3);
	if (m3)
		ibv_dealloc_mw(m3);
	assert_null(m3);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(ibv_dealloc_mw(m1), 0);
	assert_int_equal(ibv_dealloc_mw(m2), 0);
}

static void test_mw_unbound_rkey_reaches_nothing(void **state)
{
	struct env e;
	struct ibv_mw *m1, *m2;

	env_open(&e, *state, MW_MR_ACCESS);
	m1 = ibv_alloc_mw(e.res->pd, IBV_MW_TYPE_1);
	m2 = ibv_alloc_mw(e.res->pd, IBV_MW_TYPE_2);
	assert_non_null(m1);
	assert_non_null(m2);
	write_tgt(&e, WIN_OFF, 64, m1->rkey, 1, IBV_WC_REM_ACCESS_ERR, "write via unbound type 1");
	env_new_pair(&e);
	write_tgt(&e, WIN_OFF, 64, m2->rkey, 2, IBV_WC_REM_ACCESS_ERR, "write via unbound type 2");
	check_byte(e.tgt, TGT_LEN, 0xEE, "target after failed writes");
	assert_int_equal(ibv_dealloc_mw(m1), 0);
	assert_int_equal(ibv_dealloc_mw(m2), 0);
	env_close(&e);
}

static void test_mw_type1_bind_write_inside_and_outside(void **state)
{
	struct env e;
	struct ibv_mw *mw;
	uint32_t old;

	env_open(&e, *state, MW_MR_ACCESS);
	mw = ibv_alloc_mw(e.res->pd, IBV_MW_TYPE_1);
	assert_non_null(mw);
	old = mw->rkey;
	bind_type1(&e, mw, e.tmr, IBV_WC_SUCCESS);
	/* ibv_bind_mw(3): the key's low 8 bits advance as ibv_inc_rkey, the index stays. */
	assert_int_not_equal(mw->rkey, old);
	assert_int_equal(mw->rkey, ibv_inc_rkey(old));
	write_tgt(&e, WIN_OFF + 10, 100, mw->rkey, 3, IBV_WC_SUCCESS, "write inside the window");
	check_byte(e.tgt, WIN_OFF + 10, 0xEE, "before the written bytes");
	check_byte(e.tgt + WIN_OFF + 110, TGT_LEN - WIN_OFF - 110, 0xEE,
		   "after the written bytes");
	/* The window's old key is gone. */
	write_tgt(&e, WIN_OFF, 16, old, 4, IBV_WC_REM_ACCESS_ERR, "write via the pre-bind key");
	env_new_pair(&e);
	/* Straddling the window's end. */
	write_tgt(&e, WIN_OFF + WIN_LEN - 50, 100, mw->rkey, 5, IBV_WC_REM_ACCESS_ERR,
		  "write past the window's end");
	check_byte(e.tgt + WIN_OFF + WIN_LEN, TGT_LEN - WIN_OFF - WIN_LEN, 0xEE,
		   "beyond the window after the failed write");
	env_new_pair(&e);
	/* Before the window, though inside the MR. */
	write_tgt(&e, 0, 64, mw->rkey, 6, IBV_WC_REM_ACCESS_ERR, "write before the window");
	check_byte(e.tgt, 64, 0xEE, "before the window after the failed write");
	assert_int_equal(ibv_dealloc_mw(mw), 0);
	env_close(&e);
}

static void test_mw_type2_bind_then_local_inv(void **state)
{
	struct env e;
	struct ibv_mw *mw;
	struct ibv_send_wr wr = { .wr_id = 13, .opcode = IBV_WR_LOCAL_INV,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad = NULL;
	uint32_t key;

	env_open(&e, *state, MW_MR_ACCESS);
	mw = ibv_alloc_mw(e.res->pd, IBV_MW_TYPE_2);
	assert_non_null(mw);
	key = bind_type2(&e, mw);
	write_tgt(&e, WIN_OFF, 256, key, 7, IBV_WC_SUCCESS, "write via the type 2 window");
	check_byte(e.tgt + WIN_OFF + 256, 64, 0xEE, "after the written bytes");
	wr.invalidate_rkey = key;
	assert_int_equal(ibv_post_send(e.b, &wr, &bad), 0);
	expect_wc(e.res->cq, 13, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV, NULL, "IBV_WR_LOCAL_INV");
	write_tgt(&e, WIN_OFF + 512, 64, key, 8, IBV_WC_REM_ACCESS_ERR,
		  "write via the invalidated window");
	check_byte(e.tgt + WIN_OFF + 512, 64, 0xEE, "the target of the refused write");
	assert_int_equal(ibv_dealloc_mw(mw), 0);
	env_close(&e);
}

static void test_mw_send_with_inv_invalidates_at_receiver(void **state)
{
	struct env e;
	struct ibv_mw *mw;
	struct ibv_sge ssge, rsge;
	struct ibv_send_wr wr = { .wr_id = 21, .opcode = IBV_WR_SEND_WITH_INV,
				  .send_flags = IBV_SEND_SIGNALED, .sg_list = &ssge,
				  .num_sge = 1 };
	struct ibv_recv_wr rwr = { .wr_id = 22, .sg_list = &rsge, .num_sge = 1 };
	struct ibv_send_wr *bad = NULL;
	struct ibv_recv_wr *rbad = NULL;
	struct ibv_wc wc[2], *swc = NULL, *rwc = NULL;
	uint32_t key;

	env_open(&e, *state, MW_MR_ACCESS);
	mw = ibv_alloc_mw(e.res->pd, IBV_MW_TYPE_2);
	assert_non_null(mw);
	key = bind_type2(&e, mw);
	fill(e.src, 64, 9);
	ssge = (struct ibv_sge){ .addr = (uintptr_t)e.src, .length = 64, .lkey = e.smr->lkey };
	rsge = (struct ibv_sge){ .addr = (uintptr_t)e.tgt + 4096, .length = 128,
				 .lkey = e.tmr->lkey };
	wr.invalidate_rkey = key;
	assert_int_equal(ibv_post_recv(e.b, &rwr, &rbad), 0);
	assert_int_equal(ibv_post_send(e.a, &wr, &bad), 0);
	if (tu_poll(e.res->cq, 2, wc, WAIT_MS) != 2)
		fail_msg("SEND_WITH_INV: the send and receive completions did not both come "
			 "within %d ms", WAIT_MS);
	for (int i = 0; i < 2; i++) {
		if (wc[i].qp_num == e.a->qp_num)
			swc = &wc[i];
		else if (wc[i].qp_num == e.b->qp_num)
			rwc = &wc[i];
	}
	assert_non_null(swc);
	assert_non_null(rwc);
	assert_int_equal(swc->status, IBV_WC_SUCCESS);
	assert_int_equal(swc->wr_id, 21);
	assert_int_equal(swc->opcode, IBV_WC_SEND);
	assert_int_equal(rwc->status, IBV_WC_SUCCESS);
	assert_int_equal(rwc->wr_id, 22);
	assert_int_equal(rwc->opcode, IBV_WC_RECV);
	assert_int_equal(rwc->byte_len, 64);
	assert_true(rwc->wc_flags & IBV_WC_WITH_INV);
	assert_int_equal(rwc->invalidated_rkey, key);
	check_fill(e.tgt + 4096, 64, 9, "SEND_WITH_INV payload");
	write_tgt(&e, WIN_OFF, 64, key, 10, IBV_WC_REM_ACCESS_ERR,
		  "write via the window the peer invalidated");
	check_byte(e.tgt + WIN_OFF, 64, 0xEE, "the target of the refused write");
	assert_int_equal(ibv_dealloc_mw(mw), 0);
	env_close(&e);
}

static void test_mw_dealloc_ends_the_window(void **state)
{
	struct env e;
	struct ibv_mw *mw;
	uint32_t key;

	env_open(&e, *state, MW_MR_ACCESS);
	mw = ibv_alloc_mw(e.res->pd, IBV_MW_TYPE_1);
	assert_non_null(mw);
	bind_type1(&e, mw, e.tmr, IBV_WC_SUCCESS);
	key = mw->rkey;
	write_tgt(&e, WIN_OFF, 32, key, 11, IBV_WC_SUCCESS, "write before dealloc");
	assert_int_equal(ibv_dealloc_mw(mw), 0);
	write_tgt(&e, WIN_OFF + 64, 32, key, 12, IBV_WC_REM_ACCESS_ERR,
		  "write via a deallocated window");
	check_byte(e.tgt + WIN_OFF + 64, 32, 0xEE, "the target of the refused write");
	env_close(&e);
}

static void test_mw_bind_to_mr_without_mw_bind_is_bind_err(void **state)
{
	struct env e;
	struct ibv_mw *mw;

	env_open(&e, *state, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	mw = ibv_alloc_mw(e.res->pd, IBV_MW_TYPE_1);
	assert_non_null(mw);
	bind_type1(&e, mw, e.tmr, IBV_WC_MW_BIND_ERR);
	assert_int_equal(ibv_dealloc_mw(mw), 0);
	env_close(&e);
}

static void test_mw_dealloc_pd_with_window_is_ebusy(void **state)
{
	struct tu_res *res = *state;
	struct ibv_pd *pd = ibv_alloc_pd(res->ctx);
	struct ibv_mw *mw;

	assert_non_null(pd);
	mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	assert_non_null(mw);
	assert_int_equal(ibv_dealloc_pd(pd), EBUSY);
	assert_int_equal(ibv_dealloc_mw(mw), 0);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
}

/* ---- device memory ------------------------------------------------------------------- */

static struct ibv_dm *alloc_dm(struct ibv_context *ctx, size_t len)
{
	struct ibv_alloc_dm_attr a = { .length = len };

	return ibv_alloc_dm(ctx, &a);
}

static void expect_no_dm(struct ibv_dm *dm, int err, const char *what)
{
	int e = errno;

	if (dm)
		ibv_free_dm(dm);
	if (dm)
		fail_msg("%s: an allocation that should fail succeeded", what);
	if (e != err)
		fail_msg("%s: errno %d, expected %d", what, e, err);
}

static void test_dm_caps_and_allocation_limits(void **state)
{
	struct tu_res *res = *state;
	struct ibv_device_attr_ex ax;
	struct ibv_alloc_dm_attr bad_mask = { .length = 64, .comp_mask = 1 };
	struct ibv_dm *d1, *d2, *d3;

	memset(&ax, 0, sizeof(ax));
	assert_int_equal(ibv_query_device_ex(res->ctx, NULL, &ax), 0);
	assert_int_equal(ax.max_dm_size, DM_MAX);
	errno = 0;
	expect_no_dm(alloc_dm(res->ctx, DM_MAX + 1), ENOMEM, "a DM larger than max_dm_size");
	errno = 0;
	expect_no_dm(ibv_alloc_dm(res->ctx, &bad_mask), EINVAL, "a DM with comp_mask 1");
	/* The whole of it, in two halves; then not a byte more. */
	d1 = alloc_dm(res->ctx, DM_MAX / 2);
	assert_non_null(d1);
	d2 = alloc_dm(res->ctx, DM_MAX / 2);
	assert_non_null(d2);
	errno = 0;
	expect_no_dm(alloc_dm(res->ctx, 64), ENOMEM, "a DM beyond the 256 KiB in all");
	/* Freed space is reusable. */
	assert_int_equal(ibv_free_dm(d1), 0);
	d3 = alloc_dm(res->ctx, DM_MAX / 2);
	if (!d3)
		fail_msg("reallocating freed device memory failed: errno %d", errno);
	assert_int_equal(ibv_free_dm(d2), 0);
	assert_int_equal(ibv_free_dm(d3), 0);
}

static void test_dm_memcpy_round_trip_and_bounds(void **state)
{
	struct tu_res *res = *state;
	struct ibv_dm *dm = alloc_dm(res->ctx, 4096);
	unsigned char in[256], out[256];

	assert_non_null(dm);
	fill(in, sizeof(in), 13);
	memset(out, 0, sizeof(out));
	assert_int_equal(ibv_memcpy_to_dm(dm, 64, in, sizeof(in)), 0);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 64, sizeof(out)), 0);
	check_fill(out, sizeof(out), 13, "device memory read back");
	/* The last word of the allocation is reachable. */
	assert_int_equal(ibv_memcpy_to_dm(dm, 4092, in, 4), 0);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 4092, 4), 0);
	check_fill(out, 4, 13, "the last word read back");
	/* Units of 4 bytes: an unaligned offset or length is EINVAL. */
	assert_int_equal(ibv_memcpy_to_dm(dm, 2, in, 8), EINVAL);
	assert_int_equal(ibv_memcpy_to_dm(dm, 64, in, 6), EINVAL);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 2, 8), EINVAL);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 64, 6), EINVAL);
	/* Beyond the end: EFAULT. */
	assert_int_equal(ibv_memcpy_to_dm(dm, 4092, in, 8), EFAULT);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 4096, 4), EFAULT);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 8192, 4), EFAULT);
	/* The refused copies changed nothing. */
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 64, sizeof(out)), 0);
	check_fill(out, sizeof(out), 13, "device memory after refused copies");
	assert_int_equal(ibv_free_dm(dm), 0);
}

static void test_dm_mr_zero_based_rdma_write_and_busy_free(void **state)
{
	struct env e;
	struct ibv_dm *dm;
	struct ibv_mr *mr;
	unsigned char guard[1024], out[1024];
	const unsigned int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

	env_open(&e, *state, IBV_ACCESS_LOCAL_WRITE);
	dm = alloc_dm(e.res->ctx, 4096);
	assert_non_null(dm);
	memset(guard, 0x5C, sizeof(guard));
	assert_int_equal(ibv_memcpy_to_dm(dm, 0, guard, sizeof(guard)), 0);
	errno = 0;
	mr = ibv_reg_dm_mr(e.res->pd, dm, 0, 4096, acc);
	if (mr)
		ibv_dereg_mr(mr);
	assert_null(mr);
	assert_int_equal(errno, EINVAL);
	mr = ibv_reg_dm_mr(e.res->pd, dm, 0, 4096, acc | IBV_ACCESS_ZERO_BASED);
	assert_non_null(mr);
	assert_int_equal(mr->length, 4096);
	/* Zero based: remote_addr is the offset in the MR. */
	fill(e.src, 128, 14);
	write_expect(e.a, e.res->cq, e.src, 128, e.smr->lkey, 256, mr->rkey, IBV_WC_SUCCESS,
		     "RDMA WRITE into device memory");
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 0, sizeof(out)), 0);
	check_byte(out, 256, 0x5C, "device memory before the write");
	check_fill(out + 256, 128, 14, "device memory written by the peer");
	check_byte(out + 384, sizeof(out) - 384, 0x5C, "device memory after the write");
	assert_int_equal(ibv_free_dm(dm), EBUSY);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_free_dm(dm), 0);
	env_close(&e);
}

/* ---- import -------------------------------------------------------------------------- */

static struct ibv_context *import_of(struct ibv_context *ctx)
{
	int fd;
	struct ibv_context *c2;

	assert_true(ctx->cmd_fd >= 0);
	assert_true(fcntl(ctx->cmd_fd, F_GETFD) >= 0);
	fd = dup(ctx->cmd_fd);
	assert_true(fd >= 0);
	c2 = ibv_import_device(fd);
	if (!c2) {
		close(fd);
		fail_msg("ibv_import_device(dup(cmd_fd)) failed: errno %d", errno);
	}
	return c2;
}

/*
 * A QP of @ctx2 on @pd2 (CQ of ctx2) RDMA WRITEs from @src through @lkey (an imported
 * MR's) into a fresh target of the fixture: the bytes land.
 */
static void write_from_import(struct tu_res *res, struct ibv_context *ctx2, struct ibv_pd *pd2,
			      unsigned char *src, uint32_t lkey, unsigned int seed)
{
	unsigned char *tgt = alloc_buf(SRC_LEN, 0xEE);
	struct ibv_mr *tmr = ibv_reg_mr(res->pd, tgt, SRC_LEN,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_cq *cq2 = ibv_create_cq(ctx2, 16, NULL, NULL, 0);
	struct ibv_qp *a, *b;

	assert_non_null(tmr);
	assert_non_null(cq2);
	a = create_rc(pd2, cq2);
	if (!a)
		fail_msg("a QP on the imported PD: errno %d", errno);
	b = tu_keep_qp(res, create_rc(res->pd, res->cq));
	connect_pair(res, a, b, IBV_ACCESS_REMOTE_WRITE);
	fill(src, 512, seed);
	write_expect(a, cq2, src, 512, lkey, (uintptr_t)tgt + 8, tmr->rkey, IBV_WC_SUCCESS,
		     "RDMA WRITE with the imported lkey");
	check_fill(tgt + 8, 512, seed, "bytes written from the imported context");
	check_byte(tgt, 8, 0xEE, "before the written bytes");
	check_byte(tgt + 520, 64, 0xEE, "after the written bytes");
	assert_int_equal(ibv_destroy_qp(a), 0);
	tu_destroy_qp(res, b);
	assert_int_equal(ibv_destroy_cq(cq2), 0);
	assert_int_equal(ibv_dereg_mr(tmr), 0);
	free(tgt);
}

static void test_import_pd_mr_same_keys_and_data_path(void **state)
{
	struct tu_res *res = *state;
	unsigned char *buf = alloc_buf(SRC_LEN, 0);
	struct ibv_mr *mr = ibv_reg_mr(res->pd, buf, SRC_LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_context *ctx2;
	struct ibv_pd *pd2;
	struct ibv_mr *mr2;

	assert_non_null(mr);
	ctx2 = import_of(res->ctx);
	assert_ptr_not_equal(ctx2, res->ctx);
	pd2 = ibv_import_pd(ctx2, res->pd->handle);
	assert_non_null(pd2);
	assert_ptr_equal(pd2->context, ctx2);
	assert_int_equal(pd2->handle, res->pd->handle);
	mr2 = ibv_import_mr(pd2, mr->handle);
	assert_non_null(mr2);
	assert_ptr_equal(mr2->pd, pd2);
	assert_int_equal(mr2->lkey, mr->lkey);
	assert_int_equal(mr2->rkey, mr->rkey);
	assert_int_equal(mr2->length, mr->length);
	assert_int_equal(mr2->handle, mr->handle);
	assert_null(mr2->addr);
	errno = 0;
	assert_null(ibv_import_pd(ctx2, 0x7fffffffu));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(ibv_import_mr(pd2, 0x7fffffffu));
	assert_int_equal(errno, EINVAL);
	write_from_import(res, ctx2, pd2, buf, mr2->lkey, 15);
	/* Unimport frees the handles only: the originals still work. */
	ibv_unimport_mr(mr2);
	ibv_unimport_pd(pd2);
	assert_int_equal(ibv_close_device(ctx2), 0);
	{
		struct env e;

		env_open(&e, res, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		fill(buf, 64, 16);
		write_expect(e.a, res->cq, buf, 64, mr->lkey, (uintptr_t)e.tgt, e.tmr->rkey,
			     IBV_WC_SUCCESS, "write with the original MR after unimport");
		check_fill(e.tgt, 64, 16, "write with the original MR after unimport");
		env_close(&e);
	}
	assert_int_equal(ibv_dereg_mr(mr), 0);
	free(buf);
}

/*
 * The original context closes first: the import keeps the device's objects alive (a PD
 * made through it, imported by a third context) and its data path works. (The original
 * holds no objects of its own when it closes: rdma-core leaves those to leak.)
 */
static void test_import_outlives_original_context(void **state)
{
	struct tu_res *res = *state;
	unsigned char *buf = alloc_buf(SRC_LEN, 0);
	struct ibv_context *ctx1 = tu_open();
	struct ibv_context *ctx2, *ctx3;
	struct ibv_pd *pd2, *pd3;
	struct ibv_mr *mr2, *mr3;

	ctx2 = import_of(ctx1);
	assert_int_equal(ibv_close_device(ctx1), 0);
	pd2 = ibv_alloc_pd(ctx2);
	assert_non_null(pd2);
	mr2 = ibv_reg_mr(pd2, buf, SRC_LEN, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr2);
	ctx3 = import_of(ctx2);
	pd3 = ibv_import_pd(ctx3, pd2->handle);
	assert_non_null(pd3);
	mr3 = ibv_import_mr(pd3, mr2->handle);
	assert_non_null(mr3);
	assert_int_equal(mr3->lkey, mr2->lkey);
	write_from_import(res, ctx2, pd2, buf, mr2->lkey, 17);
	write_from_import(res, ctx3, pd3, buf, mr3->lkey, 23);
	ibv_unimport_mr(mr3);
	ibv_unimport_pd(pd3);
	assert_int_equal(ibv_close_device(ctx3), 0);
	assert_int_equal(ibv_dereg_mr(mr2), 0);
	assert_int_equal(ibv_dealloc_pd(pd2), 0);
	assert_int_equal(ibv_close_device(ctx2), 0);
	free(buf);
}

static void test_import_dm_shares_the_memory(void **state)
{
	struct tu_res *res = *state;
	struct ibv_dm *dm = alloc_dm(res->ctx, 1024);
	struct ibv_context *ctx2;
	struct ibv_dm *dm2;
	unsigned char in[64], out[64];

	assert_non_null(dm);
	fill(in, sizeof(in), 18);
	assert_int_equal(ibv_memcpy_to_dm(dm, 128, in, sizeof(in)), 0);
	ctx2 = import_of(res->ctx);
	dm2 = ibv_import_dm(ctx2, dm->handle);
	assert_non_null(dm2);
	assert_int_equal(dm2->handle, dm->handle);
	memset(out, 0, sizeof(out));
	assert_int_equal(ibv_memcpy_from_dm(out, dm2, 128, sizeof(out)), 0);
	check_fill(out, sizeof(out), 18, "the original's bytes through the import");
	fill(in, sizeof(in), 19);
	assert_int_equal(ibv_memcpy_to_dm(dm2, 512, in, sizeof(in)), 0);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 512, sizeof(out)), 0);
	check_fill(out, sizeof(out), 19, "the import's bytes through the original");
	errno = 0;
	assert_null(ibv_import_dm(ctx2, 0x7fffffffu));
	assert_int_equal(errno, EINVAL);
	ibv_unimport_dm(dm2);
	/* The original is intact after the unimport. */
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 512, sizeof(out)), 0);
	check_fill(out, sizeof(out), 19, "the original after unimport");
	assert_int_equal(ibv_close_device(ctx2), 0);
	assert_int_equal(ibv_free_dm(dm), 0);
}

static void test_import_device_of_a_pipe_is_eopnotsupp(void **state)
{
	int p[2];
	struct ibv_context *c;

	(void)state;
	assert_int_equal(pipe(p), 0);
	errno = 0;
	c = ibv_import_device(p[0]);
	if (c) {
		ibv_close_device(c);
		close(p[1]);
		fail_msg("ibv_import_device of a pipe gave a context");
	}
	assert_int_equal(errno, EOPNOTSUPP);
	close(p[0]);
	close(p[1]);
}

/* ---- on-demand paging ---------------------------------------------------------------- */

static void test_odp_caps(void **state)
{
	struct tu_res *res = *state;
	struct ibv_device_attr_ex ax;

	memset(&ax, 0, sizeof(ax));
	assert_int_equal(ibv_query_device_ex(res->ctx, NULL, &ax), 0);
	assert_true(ax.odp_caps.general_caps & IBV_ODP_SUPPORT);
	assert_true(ax.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
}

static void test_odp_reg_over_unmapped_memory(void **state)
{
	struct tu_res *res = *state;
	const size_t len = 4 * (size_t)sysconf(_SC_PAGESIZE);
	const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr;

	assert_true(p != MAP_FAILED);
	/* Without ON_DEMAND the pages must be there (the control). */
	mr = ibv_reg_mr(res->pd, p, len, acc);
	if (mr)
		ibv_dereg_mr(mr);
	assert_null(mr);
	mr = ibv_reg_mr(res->pd, p, len, acc | IBV_ACCESS_ON_DEMAND);
	if (!mr)
		fail_msg("ODP MR over PROT_NONE memory: errno %d", errno);
	assert_int_equal(mr->length, len);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	/* Nothing mapped at all. */
	assert_int_equal(munmap(p, len), 0);
	mr = ibv_reg_mr(res->pd, p, len, acc | IBV_ACCESS_ON_DEMAND);
	if (!mr)
		fail_msg("ODP MR over unmapped memory: errno %d", errno);
	assert_int_equal(ibv_dereg_mr(mr), 0);
}

static void test_odp_implicit_mr_reaches_any_buffer(void **state)
{
	struct env e;
	struct ibv_mr *imr;
	unsigned char *other = alloc_buf(SRC_LEN, 0xEE);

	env_open(&e, *state, IBV_ACCESS_LOCAL_WRITE);
	imr = ibv_reg_mr(e.res->pd, NULL, SIZE_MAX,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_REMOTE_WRITE);
	if (!imr)
		fail_msg("implicit ODP MR: errno %d", errno);
	/* A buffer registered nowhere, and one inside another MR: both reached. */
	fill(e.src, 300, 20);
	write_expect(e.a, e.res->cq, e.src, 300, e.smr->lkey, (uintptr_t)other + 100, imr->rkey,
		     IBV_WC_SUCCESS, "RDMA WRITE through the implicit MR");
	check_fill(other + 100, 300, 20, "bytes written through the implicit MR");
	check_byte(other, 100, 0xEE, "before the written bytes");
	check_byte(other + 400, SRC_LEN - 400, 0xEE, "after the written bytes");
	write_tgt(&e, 4000, 100, imr->rkey, 21, IBV_WC_SUCCESS,
		  "RDMA WRITE through the implicit MR into a registered buffer");
	assert_int_equal(ibv_dereg_mr(imr), 0);
	free(other);
	env_close(&e);
}

static void test_advise_mr_checks(void **state)
{
	struct tu_res *res = *state;
	unsigned char *buf = alloc_buf(TGT_LEN, 0);
	unsigned char *plain_buf = alloc_buf(SRC_LEN, 0);
	struct ibv_mr *mr = ibv_reg_mr(res->pd, buf, TGT_LEN,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	struct ibv_mr *plain = ibv_reg_mr(res->pd, plain_buf, SRC_LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge in, out, pl;

	assert_non_null(mr);
	assert_non_null(plain);
	in = (struct ibv_sge){ .addr = (uintptr_t)buf + 100, .length = 4000, .lkey = mr->lkey };
	out = (struct ibv_sge){ .addr = (uintptr_t)buf + TGT_LEN - 4, .length = 8,
				.lkey = mr->lkey };
	pl = (struct ibv_sge){ .addr = (uintptr_t)plain_buf, .length = 64, .lkey = plain->lkey };
	assert_int_equal(ibv_advise_mr(res->pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &in, 1), 0);
	assert_int_equal(ibv_advise_mr(res->pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
				       IBV_ADVISE_MR_FLAG_FLUSH, &in, 1),
			 0);
	assert_int_equal(ibv_advise_mr(res->pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &out, 1),
			 EINVAL);
	/* Not an on-demand MR. */
	assert_int_equal(ibv_advise_mr(res->pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pl, 1),
			 EINVAL);
	assert_int_equal(ibv_advise_mr(res->pd, (enum ibv_advise_mr_advice)99, 0, &in, 1),
			 EOPNOTSUPP);
	assert_int_equal(ibv_advise_mr(res->pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0x80, &in, 1),
			 EINVAL);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_dereg_mr(plain), 0);
	free(buf);
	free(plain_buf);
}

/* ---- parent domains ------------------------------------------------------------------ */

static struct ibv_td *alloc_td(struct ibv_context *ctx)
{
	struct ibv_td_init_attr a = { .comp_mask = 0 };
	struct ibv_td *td = ibv_alloc_td(ctx, &a);

	if (!td)
		fail_msg("ibv_alloc_td: errno %d", errno);
	return td;
}

static struct ibv_pd *alloc_pad(struct tu_res *res, struct ibv_td *td)
{
	struct ibv_parent_domain_init_attr a = { .pd = res->pd, .td = td };
	struct ibv_pd *pad = ibv_alloc_parent_domain(res->ctx, &a);

	if (!pad)
		fail_msg("ibv_alloc_parent_domain: errno %d", errno);
	return pad;
}

static void test_parent_domain_as_pd_and_busy_rules(void **state)
{
	struct tu_res *res = *state;
	struct ibv_td *td = alloc_td(res->ctx);
	struct ibv_pd *pad = alloc_pad(res, td);
	unsigned char *src = alloc_buf(SRC_LEN, 0), *tgt = alloc_buf(SRC_LEN, 0xEE);
	struct ibv_mr *smr, *tmr;
	struct ibv_qp *a, *b;

	smr = ibv_reg_mr(pad, src, SRC_LEN, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(smr);
	assert_ptr_equal(smr->pd, pad);
	tmr = ibv_reg_mr(res->pd, tgt, SRC_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_non_null(tmr);
	a = tu_keep_qp(res, create_rc(pad, res->cq));
	b = tu_keep_qp(res, create_rc(res->pd, res->cq));
	assert_ptr_equal(a->pd, pad);
	/* The named PD and thread domain are busy while the parent domain exists. */
	assert_int_equal(ibv_dealloc_pd(res->pd), EBUSY);
	assert_int_equal(ibv_dealloc_td(td), EBUSY);
	/* The parent domain protects as its PD: an MR of one serves a QP of the other. */
	connect_pair(res, a, b, IBV_ACCESS_REMOTE_WRITE);
	fill(src, 256, 22);
	write_expect(a, res->cq, src, 256, smr->lkey, (uintptr_t)tgt + 16, tmr->rkey,
		     IBV_WC_SUCCESS, "RDMA WRITE from a QP on a parent domain");
	check_fill(tgt + 16, 256, 22, "bytes written from a QP on a parent domain");
	tu_destroy_qp(res, a);
	tu_destroy_qp(res, b);
	assert_int_equal(ibv_dereg_mr(smr), 0);
	assert_int_equal(ibv_dereg_mr(tmr), 0);
	assert_int_equal(ibv_dealloc_pd(pad), 0);
	assert_int_equal(ibv_dealloc_td(td), 0);
	free(src);
	free(tgt);
	/* (Teardown's dealloc of res->pd checks the parent domain let go of it.) */
}

static void test_cq_ex_with_pd_needs_a_parent_domain(void **state)
{
	struct tu_res *res = *state;
	struct ibv_td *td = alloc_td(res->ctx);
	struct ibv_pd *pad = alloc_pad(res, td);
	struct ibv_cq_init_attr_ex ca = { .cqe = 16, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
					  .parent_domain = res->pd };
	struct ibv_cq_ex *cq;

	errno = 0;
	cq = ibv_create_cq_ex(res->ctx, &ca);
	if (cq)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	assert_null(cq);
	assert_int_equal(errno, EINVAL);
	ca.parent_domain = pad;
	cq = ibv_create_cq_ex(res->ctx, &ca);
	if (!cq)
		fail_msg("ibv_create_cq_ex with a parent domain: errno %d", errno);
	assert_int_equal(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
	assert_int_equal(ibv_dealloc_pd(pad), 0);
	assert_int_equal(ibv_dealloc_td(td), 0);
}

/* ---- RDMA atomic write --------------------------------------------------------------- */

static void atomic_write(struct ibv_qp_ex *qx, uint64_t wr_id, uint32_t rkey, uint64_t addr,
			 const uint64_t *val)
{
	ibv_wr_start(qx);
	qx->wr_id = wr_id;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(qx, rkey, addr, val);
}

static void test_atomic_write(void **state)
{
	struct tu_res *res = *state;
	unsigned char *tgt = alloc_buf(64, 0xEE);
	struct ibv_mr *tmr = ibv_reg_mr(res->pd, tgt, 64,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						IBV_ACCESS_REMOTE_ATOMIC);
	struct ibv_qp_init_attr_ex ax = {
		.qp_type = IBV_QPT_RC,
		.send_cq = res->cq,
		.recv_cq = res->cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = res->pd,
		.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_RDMA_WRITE,
	};
	uint64_t v1 = 0x1122334455667788ull, v2 = 0x0102030405060708ull;
	struct ibv_qp *a, *b;
	struct ibv_qp_ex *qx;
	struct ibv_wc wc;

	assert_non_null(tmr);
	a = tu_keep_qp(res, ibv_create_qp_ex(res->ctx, &ax));
	b = tu_keep_qp(res, create_rc(res->pd, res->cq));
	connect_pair(res, a, b, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	qx = ibv_qp_to_qp_ex(a);
	assert_non_null(qx);
	atomic_write(qx, 31, tmr->rkey, (uintptr_t)tgt + 8, &v1);
	v1 = 0; /* the value was taken at the call */
	assert_int_equal(ibv_wr_complete(qx), 0);
	expect_wc(res->cq, 31, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, &wc, "atomic write");
	assert_int_equal(wc.qp_num, a->qp_num);
	v1 = 0x1122334455667788ull;
	assert_memory_equal(tgt + 8, &v1, 8);
	check_byte(tgt, 8, 0xEE, "before the atomic write's target");
	check_byte(tgt + 16, 48, 0xEE, "after the atomic write's target");
	/* An address not 8-byte aligned: the batch fails, nothing is posted. */
	atomic_write(qx, 32, tmr->rkey, (uintptr_t)tgt + 20, &v2);
	assert_int_equal(ibv_wr_complete(qx), EINVAL);
	check_byte(tgt + 16, 48, 0xEE, "after the refused atomic write");
	/* The QP still works, and the next completion is the next batch's, not the refused
	 * one's. */
	atomic_write(qx, 33, tmr->rkey, (uintptr_t)tgt + 24, &v2);
	assert_int_equal(ibv_wr_complete(qx), 0);
	expect_wc(res->cq, 33, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, NULL,
		  "atomic write after a refused batch");
	assert_memory_equal(tgt + 24, &v2, 8);
	check_byte(tgt + 16, 8, 0xEE, "around the second atomic write");
	tu_destroy_qp(res, a);
	tu_destroy_qp(res, b);
	assert_int_equal(ibv_dereg_mr(tmr), 0);
	free(tgt);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_mw_alloc_types_1_and_2_type_3_is_einval),
		T(test_mw_unbound_rkey_reaches_nothing),
		T(test_mw_type1_bind_write_inside_and_outside),
		T(test_mw_type2_bind_then_local_inv),
		T(test_mw_send_with_inv_invalidates_at_receiver),
		T(test_mw_dealloc_ends_the_window),
		T(test_mw_bind_to_mr_without_mw_bind_is_bind_err),
		T(test_mw_dealloc_pd_with_window_is_ebusy),
		T(test_dm_caps_and_allocation_limits),
		T(test_dm_memcpy_round_trip_and_bounds),
		T(test_dm_mr_zero_based_rdma_write_and_busy_free),
		T(test_import_pd_mr_same_keys_and_data_path),
		T(test_import_outlives_original_context),
		T(test_import_dm_shares_the_memory),
		T(test_import_device_of_a_pipe_is_eopnotsupp),
		T(test_odp_caps),
		T(test_odp_reg_over_unmapped_memory),
		T(test_odp_implicit_mr_reaches_any_buffer),
		T(test_advise_mr_checks),
		T(test_parent_domain_as_pd_and_busy_rules),
		T(test_cq_ex_with_pd_needs_a_parent_domain),
		T(test_atomic_write),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
