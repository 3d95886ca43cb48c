/* Protection domains and memory regions. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "verbs.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

static atomic_uint sv_next_handle = 1;

/* The PD handles of a share, for ibv_import_pd. */
static int share_add_pd(struct sv_share *sh, uint32_t handle)
{
	int err = 0;

	pthread_mutex_lock(&sh->lock);
	if (sh->n_pds == sh->cap_pds) {
		int cap = sh->cap_pds ? 2 * sh->cap_pds : 16;
		uint32_t *p = realloc(sh->pds, (size_t)cap * sizeof(*p));

		if (p) {
			sh->pds = p;
			sh->cap_pds = cap;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err)
		sh->pds[sh->n_pds++] = handle;
	pthread_mutex_unlock(&sh->lock);
	return err;
}

static void share_remove_pd(struct sv_share *sh, uint32_t handle)
{
	pthread_mutex_lock(&sh->lock);
	for (int i = 0; i < sh->n_pds; i++) {
		if (sh->pds[i] == handle) {
			sh->pds[i] = sh->pds[--sh->n_pds];
			break;
		}
	}
	pthread_mutex_unlock(&sh->lock);
}

static bool share_has_pd(struct sv_share *sh, uint32_t handle)
{
	bool found = false;

	pthread_mutex_lock(&sh->lock);
	for (int i = 0; i < sh->n_pds && !found; i++)
		found = sh->pds[i] == handle;
	pthread_mutex_unlock(&sh->lock);
	return found;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct sv_context *ctx;
	struct sv_pd *pd;

	if (!context)
		return sv_fail_null(EINVAL);
	ctx = to_svctx(context);
	if (atomic_fetch_add(&ctx->n_pd, 1) >= SV_MAX_PD) {
		atomic_fetch_sub(&ctx->n_pd, 1);
		return sv_fail_null(ENOMEM);
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		atomic_fetch_sub(&ctx->n_pd, 1);
		return sv_fail_null(ENOMEM);
	}
	pd->ibv.context = context;
	pd->handle = atomic_fetch_add(&sv_next_handle, 1);
	pd->ibv.handle = pd->handle;
	if (share_add_pd(ctx->share, pd->handle)) {
		atomic_fetch_sub(&ctx->n_pd, 1);
		free(pd);
		return sv_fail_null(ENOMEM);
	}
	return &pd->ibv;
}

int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	struct sv_pd *pd;

	if (!ibpd)
		return EINVAL;
	pd = to_svpd(ibpd);
	/* The kernel refuses while MRs, QPs, SRQs, AHs or parent domains name the PD. */
	if (atomic_load(&pd->usecnt))
		return EBUSY;
	if (pd->parent) {
		/* A parent domain: it only held its PD and thread domain. */
		atomic_fetch_sub(&pd->parent->usecnt, 1);
		if (pd->td)
			atomic_fetch_sub(&((struct sv_td *)pd->td)->usecnt, 1);
	} else if (!pd->imported) {
		/* (An imported PD's dealloc leaves the original to its own context.) */
		share_remove_pd(to_svctx(ibpd->context)->share, pd->handle);
		atomic_fetch_sub(&to_svctx(ibpd->context)->n_pd, 1);
	}
	free(pd);
	return 0;
}

/*
 * Parent domains (as mlx5): a PD that protects with the PD it names (the same handle, so
 * MRs, QPs, SRQs and keys checks treat them as one) and carries a thread domain and the
 * application's buffer allocators. softverbs' queues live in its own shared memory, so
 * it keeps the allocators but has no buffer to ask them for.
 */
struct ibv_pd *sv_verbs_alloc_parent_domain(struct ibv_context *context,
					    struct ibv_parent_domain_init_attr *attr)
{
	struct sv_pd *parent, *pd;

	if (!attr || !attr->pd || attr->pd->context != context)
		return sv_fail_null(EINVAL);
	if (attr->comp_mask & ~(uint32_t)(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
					  IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT))
		return sv_fail_null(EINVAL);
	if ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) &&
	    (!attr->alloc || !attr->free))
		return sv_fail_null(EINVAL);
	if (attr->td && attr->td->context != context)
		return sv_fail_null(EINVAL);
	parent = to_svpd(attr->pd);
	if (parent->parent)
		return sv_fail_null(EINVAL); /* a parent domain of a parent domain */
	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return sv_fail_null(ENOMEM);
	pd->ibv.context = context;
	pd->ibv.handle = parent->ibv.handle;
	pd->handle = parent->handle;
	pd->parent = parent;
	pd->td = attr->td;
	pd->pd_attr = *attr;
	atomic_fetch_add(&parent->usecnt, 1);
	if (attr->td)
		atomic_fetch_add(&((struct sv_td *)attr->td)->usecnt, 1);
	return &pd->ibv;
}

struct ibv_td *sv_verbs_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr)
{
	struct sv_td *td;

	if (!attr || attr->comp_mask)
		return sv_fail_null(EINVAL);
	td = calloc(1, sizeof(*td));
	if (!td)
		return sv_fail_null(ENOMEM);
	td->ibv.context = context;
	return &td->ibv;
}

int sv_verbs_dealloc_td(struct ibv_td *ibtd)
{
	struct sv_td *td = (struct sv_td *)ibtd;

	if (atomic_load(&td->usecnt))
		return EBUSY;
	free(td);
	return 0;
}

enum {
	SV_MR_ACCESS_SUPPORTED = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
				 IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_HUGETLB,
};

/* 0 or a positive errno, as the kernel checks access flags (ib_check_mr_access). */
int sv_verbs_check_access(unsigned int access)
{
	/* The optional range (relaxed ordering, ...) is a hint a device may ignore. */
	access &= ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE;
	if (access & ~(unsigned int)(SV_MR_ACCESS_SUPPORTED | IBV_ACCESS_ON_DEMAND))
		return EINVAL;
	/* IBA 10.6.3.1: remote write or atomic needs local write. */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE))
		return EINVAL;
	return 0;
}

/*
 * The range must be mapped, and writable if the MR allows writes: the kernel pins the
 * pages (for writing, then) and fails with EFAULT otherwise. softverbs pins nothing; it
 * reads the process's mappings instead.
 */
static int check_mapped(const void *addr, size_t length, bool need_write)
{
	uintptr_t want = (uintptr_t)addr, end = want + length;
	FILE *maps = fopen("/proc/self/maps", "re");
	char *line = NULL;
	size_t cap = 0;
	int err = EFAULT;

	if (!maps)
		return errno;
	while (getline(&line, &cap, maps) > 0) {
		unsigned long lo, hi;
		char perms[5];

		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3)
			continue;
		if (hi <= want)
			continue;
		/* The lines are sorted: a gap before the next mapping is a hole. */
		if (lo > want || perms[0] != 'r' || (need_write && perms[1] != 'w'))
			break;
		want = hi;
		if (want >= end) {
			err = 0;
			break;
		}
	}
	free(line);
	fclose(maps);
	return err;
}

/* The kernel pins for writing when any of these is set (MW_BIND: a window may allow it). */
static bool mr_writable(unsigned int access)
{
	return access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND);
}

/* Implicit on-demand paging: the whole address space, pages met when used. */
static bool implicit_odp(const void *addr, size_t length, unsigned int access)
{
	return !addr && length == SIZE_MAX && (access & IBV_ACCESS_ON_DEMAND);
}

static int check_range(void *addr, size_t length, uint64_t iova, unsigned int access)
{
	const uint64_t page_mask = (uint64_t)sysconf(_SC_PAGESIZE) - 1;

	if (implicit_odp(addr, length, access))
		return iova ? EINVAL : 0;
	if (length == 0 || (uintptr_t)addr + length < (uintptr_t)addr || iova + length < iova)
		return EINVAL;
	/* The kernel maps iova onto the pages of addr: their offsets in a page must agree. */
	if ((iova & page_mask) != ((uintptr_t)addr & page_mask))
		return EINVAL;
	/* On demand: the pages need not be there yet (an access to a hole fails then). */
	if (access & IBV_ACCESS_ON_DEMAND)
		return 0;
	return check_mapped(addr, length, mr_writable(access));
}

static void fill_entry(struct sv_mr_entry *e, struct sv_pd *pd, void *addr, size_t length,
		       uint64_t iova, unsigned int access)
{
	e->pd = pd->handle;
	e->access = access & ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE;
	e->iova = iova;
	e->length = length;
	e->vaddr = (uintptr_t)addr;
}

/* An MR over [addr, addr + length) seen at @iova; the arguments are checked already. */
struct ibv_mr *sv_verbs_mr_create(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t iova,
				  unsigned int access)
{
	struct sv_mr_entry entry = { 0 };
	struct sv_context *ctx;
	struct sv_pd *pd;
	struct sv_mr *mr;
	uint32_t key;
	int err;

	pd = to_svpd(ibpd);
	ctx = to_svctx(ibpd->context);
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return sv_fail_null(ENOMEM);
	fill_entry(&entry, pd, addr, length, iova, access);
	err = sv_mr_table_add(ctx->mrs, &entry, &mr->index, &key);
	if (err) {
		free(mr);
		return sv_fail_null(-err);
	}
	mr->pd = pd;
	mr->access = access;
	mr->iova = iova;
	mr->ibv.context = ibpd->context;
	mr->ibv.pd = ibpd;
	mr->ibv.addr = addr;
	mr->ibv.length = length;
	mr->ibv.handle = mr->index;
	mr->ibv.lkey = key;
	mr->ibv.rkey = key;
	atomic_fetch_add(&pd->usecnt, 1);
	return &mr->ibv;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	int err;

	if (!ibpd)
		return sv_fail_null(EINVAL);
	err = sv_verbs_check_access(access);
	if (!err)
		err = check_range(addr, length, iova, access);
	if (err)
		return sv_fail_null(err);
	return sv_verbs_mr_create(ibpd, addr, length, iova, access);
}

struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
			       int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

/*
 * ibv_advise_mr: prefetching is advice, and softverbs has no page tables to warm (the
 * kernel copies straight from the pages when data moves); the arguments are checked as
 * the kernel checks them: an on-demand MR of this PD covering each SGE.
 */
int sv_verbs_advise_mr(struct ibv_pd *ibpd, enum ibv_advise_mr_advice advice, uint32_t flags,
		       struct ibv_sge *sg_list, uint32_t num_sge)
{
	struct sv_context *ctx = to_svctx(ibpd->context);

	if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return EOPNOTSUPP;
	if ((flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH) || !num_sge || !sg_list)
		return EINVAL;
	for (uint32_t i = 0; i < num_sge; i++) {
		uint32_t need = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE ?
			IBV_ACCESS_LOCAL_WRITE : 0;
		uint64_t va;

		if (sv_mr_check(ctx->mrs->slots, sg_list[i].lkey, to_svpd(ibpd)->handle,
				need | IBV_ACCESS_ON_DEMAND, sg_list[i].addr, sg_list[i].length,
				&va) != SV_ACCESS_OK)
			return EINVAL;
	}
	return 0;
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
				 uint64_t iova, int fd, int access)
{
	(void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
	return sv_fail_null(EOPNOTSUPP);
}

static int rereg_fail(int err, int code)
{
	errno = err;
	return code;
}

int ibv_rereg_mr(struct ibv_mr *ibmr, int flags, struct ibv_pd *ibpd, void *addr,
		 size_t length, int access)
{
	struct sv_mr_entry entry = { 0 };
	struct sv_context *ctx;
	struct sv_pd *new_pd;
	struct sv_mr *mr;
	unsigned int new_access;
	void *new_addr;
	size_t new_length;
	uint64_t new_iova;
	uint32_t key;
	int err;

	if (!ibmr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED))
		return rereg_fail(EINVAL, IBV_REREG_MR_ERR_INPUT);
	if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length))
		return rereg_fail(EINVAL, IBV_REREG_MR_ERR_INPUT);
	if (!(flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (addr || length))
		return rereg_fail(EINVAL, IBV_REREG_MR_ERR_INPUT);
	if ((flags & IBV_REREG_MR_CHANGE_PD) && !ibpd)
		return rereg_fail(EINVAL, IBV_REREG_MR_ERR_INPUT);
	if (!(flags & IBV_REREG_MR_CHANGE_ACCESS) && access)
		return rereg_fail(EINVAL, IBV_REREG_MR_ERR_INPUT);
	if (!flags)
		return rereg_fail(EINVAL, IBV_REREG_MR_ERR_CMD);

	mr = to_svmr(ibmr);
	ctx = to_svctx(ibmr->context);
	new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? to_svpd(ibpd) : mr->pd;
	if (new_pd->ibv.context != ibmr->context)
		return rereg_fail(EINVAL, IBV_REREG_MR_ERR_CMD);
	new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? (unsigned int)access : mr->access;
	new_addr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : ibmr->addr;
	new_length = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : ibmr->length;
	new_iova = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? (uintptr_t)addr : mr->iova;
	err = sv_verbs_check_access(new_access);
	if (!err)
		err = check_range(new_addr, new_length, new_iova, new_access);
	if (err)
		return rereg_fail(err, IBV_REREG_MR_ERR_CMD);

	fill_entry(&entry, new_pd, new_addr, new_length, new_iova, new_access);
	/* The keys stay unless the translation changes (as mlx5 keeps its mkey): a peer
	 * holding the rkey goes on using it with the new access or PD. */
	sv_mr_table_update(ctx->mrs, mr->index, &entry,
			   !(flags & IBV_REREG_MR_CHANGE_TRANSLATION), &key);
	if (new_pd != mr->pd) {
		atomic_fetch_add(&new_pd->usecnt, 1);
		atomic_fetch_sub(&mr->pd->usecnt, 1);
		mr->pd = new_pd;
		ibmr->pd = &new_pd->ibv;
	}
	mr->access = new_access;
	mr->iova = new_iova;
	ibmr->addr = new_addr;
	ibmr->length = new_length;
	ibmr->lkey = key;
	ibmr->rkey = key;
	return 0;
}

int ibv_dereg_mr(struct ibv_mr *ibmr)
{
	struct sv_mr *mr;

	if (!ibmr)
		return EINVAL;
	mr = to_svmr(ibmr);
	if (mr->imported) {
		/* Through an import: the handle goes; the MR stays its owner's to end. */
		free(mr);
		return 0;
	}
	sv_mr_table_remove(to_svctx(ibmr->context)->mrs, mr->index);
	atomic_fetch_sub(&mr->pd->usecnt, 1);
	if (mr->dm)
		atomic_fetch_sub(&mr->dm->usecnt, 1);
	free(mr);
	return 0;
}

/* --- import: a second handle on objects of a context sharing this one's (ibv_import_device) */

struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	struct sv_pd *pd;

	if (!context)
		return sv_fail_null(EINVAL);
	if (!share_has_pd(to_svctx(context)->share, pd_handle))
		return sv_fail_null(EINVAL);
	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return sv_fail_null(ENOMEM);
	pd->ibv.context = context;
	pd->ibv.handle = pd_handle;
	pd->handle = pd_handle; /* the same protection domain */
	pd->imported = true;
	return &pd->ibv;
}

void ibv_unimport_pd(struct ibv_pd *pd)
{
	if (pd && to_svpd(pd)->imported)
		free(to_svpd(pd));
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *ibpd, uint32_t mr_handle)
{
	struct sv_mr_entry e;
	struct sv_mr *mr;
	uint32_t key;

	if (!ibpd)
		return sv_fail_null(EINVAL);
	/* The handle is the MR's slot in the shared key table. */
	if (sv_mr_table_read(to_svctx(ibpd->context)->mrs, mr_handle, &e, &key) ||
	    e.pd != to_svpd(ibpd)->handle)
		return sv_fail_null(EINVAL);
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return sv_fail_null(ENOMEM);
	mr->pd = to_svpd(ibpd);
	mr->access = e.access;
	mr->iova = e.iova;
	mr->index = mr_handle;
	mr->imported = true;
	mr->ibv.context = ibpd->context;
	mr->ibv.pd = ibpd;
	mr->ibv.addr = NULL; /* as rdma-core: the importer does not know the address */
	mr->ibv.length = e.length;
	mr->ibv.handle = mr_handle;
	mr->ibv.lkey = key;
	mr->ibv.rkey = key;
	return &mr->ibv;
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
	if (mr && to_svmr(mr)->imported)
		free(to_svmr(mr));
}
