/*
 * Black-box tests of protection domains and memory regions, as rdma-core 44 and the
 * kernel's uverbs layer answer them:
 *   - ibv_reg_mr* record addr/length/pd/context in the MR (libibverbs/verbs.c); mr->addr
 *     is the registered address even when an iova is given;
 *   - ib_check_mr_access(): REMOTE_WRITE or REMOTE_ATOMIC need LOCAL_WRITE, unknown bits
 *     outside IB_ACCESS_OPTIONAL are EINVAL, optional bits (RELAXED_ORDERING…) are
 *     accepted and may be ignored;
 *   - ib_uverbs_reg_mr(): addr and iova must share their page offset (EINVAL);
 *   - ib_umem_get(): zero pages -> EINVAL, a wrapping range -> EINVAL, memory that
 *     cannot be pinned (unmapped, or read-only for a writable MR) -> EFAULT;
 *   - dealloc of a PD still named by an MR or QP -> EBUSY (ib_destroy_usecnt);
 *   - ibv_rereg_mr: input errors found by libibverbs -> IBV_REREG_MR_ERR_INPUT + EINVAL;
 *     errors of the command (no flag, bad access) -> IBV_REREG_MR_ERR_CMD + EINVAL.
 */
#include "verbs/sv_test_util.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define LEN 8192

static size_t page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

/* A page-aligned read/write anonymous mapping. */
static void *map_rw(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	memset(p, 0x11, len);
	return p;
}

static void unmap(void *p, size_t len)
{
	assert_int_equal(munmap(p, len), 0);
}

/*
 * Expects a failed registration with errno @err (errno read before anything else). An
 * MR that should not exist is deregistered first, so the fixture's teardown still runs.
 */
static void expect_no_mr(struct ibv_mr *mr, int err)
{
	int e = errno;

	if (mr)
		ibv_dereg_mr(mr);
	assert_null(mr);
	assert_int_equal(e, err);
}

/* ibv_reg_mr_iova2 (the entry point for run-time flags) fails with @err. */
static void reg_expect_fail(struct ibv_pd *pd, void *addr, size_t len, unsigned int access,
			    int err)
{
	errno = 0;
	expect_no_mr(ibv_reg_mr_iova2(pd, addr, len, (uintptr_t)addr, access), err);
}

/* ---- PD ---------------------------------------------------------------------------- */

/* alloc_pd sets the context; two PDs are distinct; dealloc returns 0. */
static void test_alloc_dealloc_pd(void **state)
{
	struct tu_res *res = *state;
	struct ibv_pd *a = ibv_alloc_pd(res->ctx);
	struct ibv_pd *b = ibv_alloc_pd(res->ctx);

	assert_non_null(a);
	assert_non_null(b);
	assert_ptr_not_equal(a, b);
	assert_ptr_equal(a->context, res->ctx);
	assert_ptr_equal(b->context, res->ctx);
	assert_int_equal(ibv_dealloc_pd(a), 0);
	assert_int_equal(ibv_dealloc_pd(b), 0);
}

/* A PD with a registered MR cannot go (EBUSY) and stays fully usable. */
static void test_dealloc_pd_with_mr_is_ebusy(void **state)
{
	struct tu_res *res = *state;
	struct ibv_pd *pd = ibv_alloc_pd(res->ctx);
	char *buf = map_rw(LEN);
	struct ibv_mr *mr, *mr2;

	assert_non_null(pd);
	mr = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	assert_int_equal(ibv_dealloc_pd(pd), EBUSY);
	/* The PD still works: a new registration on it succeeds. */
	mr2 = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr2);
	assert_ptr_equal(mr2->pd, pd);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_dealloc_pd(pd), EBUSY);
	assert_int_equal(ibv_dereg_mr(mr2), 0);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	unmap(buf, LEN);
}

/* A PD with a QP cannot go either (EBUSY); it can once the QP is destroyed. */
static void test_dealloc_pd_with_qp_is_ebusy(void **state)
{
	struct tu_res *res = *state;
	struct ibv_pd *pd = ibv_alloc_pd(res->ctx);
	struct ibv_qp_init_attr ia = {
		.send_cq = res->cq,
		.recv_cq = res->cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp;

	assert_non_null(pd);
	qp = ibv_create_qp(pd, &ia);
	assert_non_null(qp);
	assert_int_equal(ibv_dealloc_pd(pd), EBUSY);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
}

/* ---- reg_mr ------------------------------------------------------------------------ */

/* A registration echoes addr/length, names its pd and context, and has keys. */
static void test_reg_mr_fields(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);
	struct ibv_mr *mr;

	mr = ibv_reg_mr(res->pd, buf + 100, 1000,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
			IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	assert_non_null(mr);
	assert_ptr_equal(mr->addr, buf + 100);
	assert_int_equal(mr->length, 1000);
	assert_ptr_equal(mr->pd, res->pd);
	assert_ptr_equal(mr->context, res->ctx);
	assert_int_not_equal(mr->lkey, 0);
	assert_int_not_equal(mr->rkey, 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	unmap(buf, LEN);
}

/* Registering the same buffer twice gives two MRs with different keys. */
static void test_reg_mr_same_buffer_twice_has_distinct_keys(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);
	struct ibv_mr *a, *b;

	a = ibv_reg_mr(res->pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	b = ibv_reg_mr(res->pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_not_equal(a->lkey, b->lkey);
	assert_int_not_equal(a->rkey, b->rkey);
	assert_int_equal(ibv_dereg_mr(a), 0);
	assert_int_equal(ibv_dereg_mr(b), 0);
	unmap(buf, LEN);
}

/* ib_check_mr_access: remote write needs local write. */
static void test_reg_mr_remote_write_without_local_write_is_einval(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);

	errno = 0;
	expect_no_mr(ibv_reg_mr(res->pd, buf, LEN, IBV_ACCESS_REMOTE_WRITE), EINVAL);
	reg_expect_fail(res->pd, buf, LEN, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
			EINVAL);
	unmap(buf, LEN);
}

/* Remote atomic needs local write too. */
static void test_reg_mr_remote_atomic_without_local_write_is_einval(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);

	errno = 0;
	expect_no_mr(ibv_reg_mr(res->pd, buf, LEN, IBV_ACCESS_REMOTE_ATOMIC), EINVAL);
	unmap(buf, LEN);
}

/* Local read only (access 0) and remote read without local write are fine. */
static void test_reg_mr_read_only_access_is_accepted(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);
	struct ibv_mr *a, *b;

	a = ibv_reg_mr(res->pd, buf, LEN, 0);
	b = ibv_reg_mr(res->pd, buf, LEN, IBV_ACCESS_REMOTE_READ);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(ibv_dereg_mr(a), 0);
	assert_int_equal(ibv_dereg_mr(b), 0);
	unmap(buf, LEN);
}

/* An access bit no kernel knows (outside the optional range) is EINVAL, on both paths. */
static void test_reg_mr_unknown_access_bit_is_einval(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);

	/* Constant flags without optional bits: the header calls ibv_reg_mr@IBVERBS_1.1. */
	errno = 0;
	expect_no_mr(ibv_reg_mr(res->pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE | (1 << 15)),
		     EINVAL);
	reg_expect_fail(res->pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE | (1u << 15), EINVAL);
	reg_expect_fail(res->pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE | (1u << 12), EINVAL);
	unmap(buf, LEN);
}

/*
 * IBV_ACCESS_RELAXED_ORDERING is accepted whichever entry point the header picks
 * (perftest ORs it in at run time, which goes to ibv_reg_mr_iova2), and so is an
 * unassigned bit of the optional range: optional flags may be ignored, never refused.
 */
static void test_reg_mr_optional_access_bits_are_accepted(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);
	volatile int relaxed = IBV_ACCESS_RELAXED_ORDERING;
	struct ibv_mr *mr;

	mr = ibv_reg_mr(res->pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE | relaxed);
	assert_non_null(mr);
	assert_ptr_equal(mr->addr, buf);
	assert_int_equal(ibv_dereg_mr(mr), 0);

	mr = ibv_reg_mr(res->pd, buf, LEN,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	assert_non_null(mr);
	assert_int_equal(ibv_dereg_mr(mr), 0);

	/* The exported IBVERBS_1.1 symbol, called directly. */
	mr = (ibv_reg_mr)(res->pd, buf, LEN,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	assert_non_null(mr);
	assert_int_equal(ibv_dereg_mr(mr), 0);

	mr = ibv_reg_mr_iova2(res->pd, buf, LEN, (uintptr_t)buf,
			      IBV_ACCESS_LOCAL_WRITE | (1u << 25));
	assert_non_null(mr);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	unmap(buf, LEN);
}

/* ODP registration follows the device's advertised ODP support. */
static void test_reg_mr_on_demand_matches_odp_caps(void **state)
{
	struct tu_res *res = *state;
	struct ibv_device_attr_ex ax;
	char *buf = map_rw(LEN);
	struct ibv_mr *mr;

	assert_int_equal(ibv_query_device_ex(res->ctx, NULL, &ax), 0);
	errno = 0;
	mr = ibv_reg_mr_iova2(res->pd, buf, LEN, (uintptr_t)buf,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	if (ax.odp_caps.general_caps & IBV_ODP_SUPPORT) {
		assert_non_null(mr);
		assert_int_equal(ibv_dereg_mr(mr), 0);
	} else {
		/*
		 * ib_check_mr_access: ON_DEMAND without IBK_ON_DEMAND_PAGING is refused,
		 * EOPNOTSUPP since Linux 6.2 (EINVAL before).
		 */
		int e = errno;

		if (mr)
			ibv_dereg_mr(mr);
		assert_null(mr);
		assert_true(e == EOPNOTSUPP || e == EINVAL);
	}
	unmap(buf, LEN);
}

/* ---- iova -------------------------------------------------------------------------- */

/* reg_mr_iova: mr->addr is still the virtual address (rdma-core sets it to addr). */
static void test_reg_mr_iova_reports_addr(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);
	uint64_t iova = 0x7000000000ull + 0x200; /* same page offset as buf + 0x200 */
	struct ibv_mr *mr;

	mr = ibv_reg_mr_iova(res->pd, buf + 0x200, 1024, iova,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_non_null(mr);
	assert_ptr_equal(mr->addr, buf + 0x200);
	assert_int_equal(mr->length, 1024);
	assert_ptr_equal(mr->pd, res->pd);
	assert_ptr_equal(mr->context, res->ctx);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	unmap(buf, LEN);
}

/* reg_mr_iova2 behaves the same, zero-based iova included. */
static void test_reg_mr_iova2_reports_addr(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);
	struct ibv_mr *mr;

	mr = ibv_reg_mr_iova2(res->pd, buf, LEN, 0,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	assert_non_null(mr);
	assert_ptr_equal(mr->addr, buf);
	assert_int_equal(mr->length, LEN);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	unmap(buf, LEN);
}

/* ib_uverbs_reg_mr: start and iova must have the same offset in their page. */
static void test_reg_mr_iova_page_offset_mismatch_is_einval(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);

	errno = 0;
	expect_no_mr(ibv_reg_mr_iova(res->pd, buf, 1024, 0x7000000000ull + 8,
				    IBV_ACCESS_LOCAL_WRITE), EINVAL);
	errno = 0;
	expect_no_mr(ibv_reg_mr_iova2(res->pd, buf + 16, 1024, 0x7000000000ull,
				     IBV_ACCESS_LOCAL_WRITE), EINVAL);
	unmap(buf, LEN);
}

/* ---- memory the kernel could not pin ---------------------------------------------- */

/* Zero pages: ib_umem_get() refuses with EINVAL. */
static void test_reg_mr_zero_length_is_einval(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);

	errno = 0;
	expect_no_mr(ibv_reg_mr(res->pd, buf, 0, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	reg_expect_fail(res->pd, buf, 0, 0, EINVAL);
	unmap(buf, LEN);
}

/* A range whose end wraps around the address space: EINVAL. */
static void test_reg_mr_wrapping_range_is_einval(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);

	reg_expect_fail(res->pd, buf, SIZE_MAX - (uintptr_t)buf + 2, IBV_ACCESS_LOCAL_WRITE,
			EINVAL);
	unmap(buf, LEN);
}

/* A hole in the address space cannot be pinned: EFAULT. */
static void test_reg_mr_unmapped_memory_is_efault(void **state)
{
	struct tu_res *res = *state;
	size_t ps = page_size();
	char *buf = map_rw(3 * ps);
	char *hole = buf + ps;

	unmap(hole, ps);
	errno = 0;
	expect_no_mr(ibv_reg_mr(res->pd, hole, ps, IBV_ACCESS_LOCAL_WRITE), EFAULT);
	/* A range that starts mapped and runs into the hole fails the same way. */
	errno = 0;
	expect_no_mr(ibv_reg_mr(res->pd, buf, 2 * ps, 0), EFAULT);
	unmap(buf, ps);
	unmap(buf + 2 * ps, ps);
}

/* Read-only memory: readable MRs are fine, a writable MR cannot pin it (EFAULT). */
static void test_reg_mr_read_only_memory(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);
	struct ibv_mr *mr;

	assert_int_equal(mprotect(buf, LEN, PROT_READ), 0);
	mr = ibv_reg_mr(res->pd, buf, LEN, IBV_ACCESS_REMOTE_READ);
	assert_non_null(mr);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	errno = 0;
	expect_no_mr(ibv_reg_mr(res->pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE), EFAULT);
	unmap(buf, LEN);
}

/* ---- keys -------------------------------------------------------------------------- */

/* Many live registrations: every rkey distinct, and not an arithmetic sequence. */
static void test_rkeys_are_distinct_and_not_a_counter(void **state)
{
	enum { N = 64 };
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);
	struct ibv_mr *mr[N];
	int varied = 0;

	for (int i = 0; i < N; i++) {
		mr[i] = ibv_reg_mr(res->pd, buf + i, 64,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		assert_non_null(mr[i]);
	}
	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++) {
			assert_int_not_equal(mr[i]->rkey, mr[j]->rkey);
			assert_int_not_equal(mr[i]->lkey, mr[j]->lkey);
		}
	for (int i = 2; i < N; i++)
		if (mr[i]->rkey - mr[i - 1]->rkey != mr[1]->rkey - mr[0]->rkey)
			varied = 1;
	assert_true(varied);
	for (int i = 0; i < N; i++)
		assert_int_equal(ibv_dereg_mr(mr[i]), 0);
	unmap(buf, LEN);
}

/* ---- rereg ------------------------------------------------------------------------- */

/*
 * Checks an ibv_rereg_mr result @got and errno against @want / @want_errno. On a mismatch
 * @mr is deregistered first (the man page asks for that even after a failure), so the
 * fixture's teardown still runs.
 */
static void check_rereg(struct ibv_mr *mr, int got, int want, int want_errno)
{
	int e = errno;

	if (got != want || e != want_errno)
		ibv_dereg_mr(mr);
	assert_int_equal(got, want);
	assert_int_equal(e, want_errno);
}

/* CHANGE_ACCESS: succeeds, leaves addr/length/pd alone, keys stay valid (non-zero). */
static void test_rereg_mr_change_access(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);
	struct ibv_mr *mr = ibv_reg_mr(res->pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);

	assert_non_null(mr);
	assert_int_equal(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				      IBV_ACCESS_REMOTE_READ), 0);
	assert_ptr_equal(mr->addr, buf);
	assert_int_equal(mr->length, LEN);
	assert_ptr_equal(mr->pd, res->pd);
	assert_int_not_equal(mr->lkey, 0);
	assert_int_not_equal(mr->rkey, 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	unmap(buf, LEN);
}

/* CHANGE_PD: mr->pd follows, the old PD is released, the new one is now busy. */
static void test_rereg_mr_change_pd(void **state)
{
	struct tu_res *res = *state;
	struct ibv_pd *pd1 = ibv_alloc_pd(res->ctx);
	struct ibv_pd *pd2 = ibv_alloc_pd(res->ctx);
	char *buf = map_rw(LEN);
	struct ibv_mr *mr;

	assert_non_null(pd1);
	assert_non_null(pd2);
	mr = ibv_reg_mr(pd1, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	assert_int_equal(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0), 0);
	assert_ptr_equal(mr->pd, pd2);
	assert_ptr_equal(mr->addr, buf);
	assert_int_equal(ibv_dealloc_pd(pd2), EBUSY);
	assert_int_equal(ibv_dealloc_pd(pd1), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_dealloc_pd(pd2), 0);
	unmap(buf, LEN);
}

/* CHANGE_TRANSLATION: mr->addr and mr->length become the new range. */
static void test_rereg_mr_change_translation(void **state)
{
	struct tu_res *res = *state;
	char *a = map_rw(LEN);
	char *b = map_rw(2 * LEN);
	struct ibv_mr *mr = ibv_reg_mr(res->pd, a, LEN, IBV_ACCESS_LOCAL_WRITE);

	assert_non_null(mr);
	assert_int_equal(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b + 64,
				      2 * LEN - 64, 0), 0);
	assert_ptr_equal(mr->addr, b + 64);
	assert_int_equal(mr->length, 2 * LEN - 64);
	assert_ptr_equal(mr->pd, res->pd);
	/* All three at once. */
	assert_int_equal(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION |
				      IBV_REREG_MR_CHANGE_ACCESS | IBV_REREG_MR_CHANGE_PD,
				      res->pd, a, LEN,
				      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ), 0);
	assert_ptr_equal(mr->addr, a);
	assert_int_equal(mr->length, LEN);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	unmap(a, LEN);
	unmap(b, 2 * LEN);
}

/* Input libibverbs itself rejects: IBV_REREG_MR_ERR_INPUT, errno EINVAL, MR intact. */
static void test_rereg_mr_input_errors(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);
	struct ibv_mr *mr = ibv_reg_mr(res->pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	int r;

	assert_non_null(mr);
	/* A flag beyond IBV_REREG_MR_FLAGS_SUPPORTED. */
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_FLAGS_SUPPORTED + 1, NULL, NULL, 0, 0);
	check_rereg(mr, r, IBV_REREG_MR_ERR_INPUT, EINVAL);
	/* A translation without a length, or without an address. */
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf, 0, 0);
	check_rereg(mr, r, IBV_REREG_MR_ERR_INPUT, EINVAL);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, LEN, 0);
	check_rereg(mr, r, IBV_REREG_MR_ERR_INPUT, EINVAL);
	/* Access flags without CHANGE_ACCESS. */
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, res->pd, NULL, 0, IBV_ACCESS_REMOTE_READ);
	check_rereg(mr, r, IBV_REREG_MR_ERR_INPUT, EINVAL);
	/* Nothing changed. */
	assert_ptr_equal(mr->addr, buf);
	assert_int_equal(mr->length, LEN);
	assert_ptr_equal(mr->pd, res->pd);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	unmap(buf, LEN);
}

/* Errors of the command (kernel: no flag; ib_check_mr_access): IBV_REREG_MR_ERR_CMD. */
static void test_rereg_mr_command_errors(void **state)
{
	struct tu_res *res = *state;
	char *buf = map_rw(LEN);
	struct ibv_mr *mr = ibv_reg_mr(res->pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	int r;

	assert_non_null(mr);
	errno = 0;
	r = ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0);
	check_rereg(mr, r, IBV_REREG_MR_ERR_CMD, EINVAL);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			 IBV_ACCESS_REMOTE_WRITE);
	check_rereg(mr, r, IBV_REREG_MR_ERR_CMD, EINVAL);
	/* Even after a failed rereg the MR must be (and can be) deregistered. */
	assert_int_equal(ibv_dereg_mr(mr), 0);
	unmap(buf, LEN);
}

/* ---- dereg ------------------------------------------------------------------------- */

/* dereg returns 0 and releases the PD; the freed range can be registered again. */
static void test_dereg_mr_releases_pd(void **state)
{
	struct tu_res *res = *state;
	struct ibv_pd *pd = ibv_alloc_pd(res->ctx);
	char *buf = map_rw(LEN);
	struct ibv_mr *mr;

	assert_non_null(pd);
	for (int i = 0; i < 3; i++) {
		mr = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
		assert_non_null(mr);
		assert_int_equal(ibv_dereg_mr(mr), 0);
	}
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	unmap(buf, LEN);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_alloc_dealloc_pd),
		T(test_dealloc_pd_with_mr_is_ebusy),
		T(test_dealloc_pd_with_qp_is_ebusy),
		T(test_reg_mr_fields),
		T(test_reg_mr_same_buffer_twice_has_distinct_keys),
		T(test_reg_mr_remote_write_without_local_write_is_einval),
		T(test_reg_mr_remote_atomic_without_local_write_is_einval),
		T(test_reg_mr_read_only_access_is_accepted),
		T(test_reg_mr_unknown_access_bit_is_einval),
		T(test_reg_mr_optional_access_bits_are_accepted),
		T(test_reg_mr_on_demand_matches_odp_caps),
		T(test_reg_mr_iova_reports_addr),
		T(test_reg_mr_iova2_reports_addr),
		T(test_reg_mr_iova_page_offset_mismatch_is_einval),
		T(test_reg_mr_zero_length_is_einval),
		T(test_reg_mr_wrapping_range_is_einval),
		T(test_reg_mr_unmapped_memory_is_efault),
		T(test_reg_mr_read_only_memory),
		T(test_rkeys_are_distinct_and_not_a_counter),
		T(test_rereg_mr_change_access),
		T(test_rereg_mr_change_pd),
		T(test_rereg_mr_change_translation),
		T(test_rereg_mr_input_errors),
		T(test_rereg_mr_command_errors),
		T(test_dereg_mr_releases_pd),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
