/*
 * Device memory (ibv_alloc_dm, ibv_reg_dm_mr). A NIC offers a little on-chip memory that
 * MRs can expose, reached through copy functions; softverbs' device is the process, so
 * its device memory is a buffer of the process (the peers reach it as any MR). The rules
 * are the mlx5 provider's: at most max_dm_size in all, copies in 4-byte units, MRs zero
 * based, no free while an MR uses it.
 */
#include <stdlib.h>
#include <string.h>

#include "verbs.h"

static atomic_size_t dm_used; /* bytes allocated, in the process */

static struct sv_dm *to_svdm(struct ibv_dm *dm)
{
	return (struct sv_dm *)dm;
}

/* mlx5: offset and length in whole 32-bit words, within the allocation. */
static int dm_range(struct sv_dm *dm, uint64_t offset, size_t length)
{
	if ((offset & 3) || (length & 3))
		return EINVAL;
	if (offset > dm->length || length > dm->length - offset)
		return EFAULT;
	return 0;
}

static int share_add_dm(struct sv_share *sh, struct sv_dm *dm);

static int memcpy_to_dm(struct ibv_dm *ibdm, uint64_t offset, const void *host, size_t length)
{
	struct sv_dm *dm = to_svdm(ibdm);
	int err = dm_range(dm, offset, length);

	if (!err && length)
		memcpy(dm->buf + offset, host, length);
	return err;
}

static int memcpy_from_dm(void *host, struct ibv_dm *ibdm, uint64_t offset, size_t length)
{
	struct sv_dm *dm = to_svdm(ibdm);
	int err = dm_range(dm, offset, length);

	if (!err && length)
		memcpy(host, dm->buf + offset, length);
	return err;
}

struct ibv_dm *sv_verbs_alloc_dm(struct ibv_context *context, struct ibv_alloc_dm_attr *attr)
{
	size_t used, len;
	struct sv_dm *dm;

	if (!attr || attr->comp_mask)
		return sv_fail_null(EINVAL);
	if (!attr->length || attr->length > SV_MAX_DM_SIZE)
		return sv_fail_null(ENOMEM);
	/* Allocated in 64-byte lines, as the memory of a device is. */
	len = (attr->length + 63) & ~(size_t)63;
	used = atomic_load(&dm_used);
	do {
		if (used + len > SV_MAX_DM_SIZE)
			return sv_fail_null(ENOMEM);
	} while (!atomic_compare_exchange_weak(&dm_used, &used, used + len));
	dm = calloc(1, sizeof(*dm));
	if (dm)
		dm->buf = aligned_alloc(64, len);
	if (!dm || !dm->buf) {
		free(dm);
		atomic_fetch_sub(&dm_used, len);
		return sv_fail_null(ENOMEM);
	}
	memset(dm->buf, 0, len);
	dm->length = attr->length;
	dm->ibv.context = context;
	dm->ibv.memcpy_to_dm = memcpy_to_dm;
	dm->ibv.memcpy_from_dm = memcpy_from_dm;
	dm->ibv.comp_mask = IBV_DM_MASK_HANDLE;
	dm->share = to_svctx(context)->share;
	if (share_add_dm(dm->share, dm)) {
		free(dm->buf);
		free(dm);
		atomic_fetch_sub(&dm_used, len);
		return sv_fail_null(ENOMEM);
	}
	return &dm->ibv;
}

/* Device memory handles of a share (ibv_import_dm): the slot + 1. */
static int share_add_dm(struct sv_share *sh, struct sv_dm *dm)
{
	int i, err = 0;

	pthread_mutex_lock(&sh->lock);
	for (i = 0; i < sh->cap_dms && sh->dms[i]; i++)
		;
	if (i == sh->cap_dms) {
		int cap = sh->cap_dms ? 2 * sh->cap_dms : 16;
		struct sv_dm **p = realloc(sh->dms, (size_t)cap * sizeof(*p));

		if (p) {
			memset(p + sh->cap_dms, 0, (size_t)(cap - sh->cap_dms) * sizeof(*p));
			sh->dms = p;
			sh->cap_dms = cap;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err) {
		sh->dms[i] = dm;
		dm->ibv.handle = (uint32_t)i + 1;
	}
	pthread_mutex_unlock(&sh->lock);
	return err;
}

struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	struct sv_share *sh;
	struct sv_dm *orig = NULL, *dm;

	if (!context)
		return sv_fail_null(EINVAL);
	sh = to_svctx(context)->share;
	pthread_mutex_lock(&sh->lock);
	if (dm_handle && dm_handle <= (uint32_t)sh->cap_dms)
		orig = sh->dms[dm_handle - 1];
	dm = orig ? calloc(1, sizeof(*dm)) : NULL;
	if (dm) {
		*dm = *orig;
		atomic_init(&dm->usecnt, 0);
		dm->imported = true;
		dm->ibv.context = context;
	}
	pthread_mutex_unlock(&sh->lock);
	if (!orig)
		return sv_fail_null(EINVAL);
	return dm ? &dm->ibv : sv_fail_null(ENOMEM);
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
	if (dm && to_svdm(dm)->imported)
		free(to_svdm(dm));
}

int sv_verbs_free_dm(struct ibv_dm *ibdm)
{
	struct sv_dm *dm = to_svdm(ibdm);

	if (atomic_load(&dm->usecnt))
		return EBUSY;
	if (dm->imported) {
		free(dm);
		return 0;
	}
	pthread_mutex_lock(&dm->share->lock);
	dm->share->dms[dm->ibv.handle - 1] = NULL;
	pthread_mutex_unlock(&dm->share->lock);
	atomic_fetch_sub(&dm_used, (dm->length + 63) & ~(size_t)63);
	free(dm->buf);
	free(dm);
	return 0;
}

struct ibv_mr *sv_verbs_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *ibdm, uint64_t dm_offset,
				  size_t length, unsigned int access)
{
	struct sv_dm *dm = to_svdm(ibdm);
	struct ibv_mr *mr;
	int err;

	if (!ibdm || ibdm->context != pd->context)
		return sv_fail_null(EINVAL);
	/* mlx5: device memory MRs are zero based; no on-demand paging there. */
	if (!(access & IBV_ACCESS_ZERO_BASED) || (access & IBV_ACCESS_ON_DEMAND))
		return sv_fail_null(EINVAL);
	err = sv_verbs_check_access(access);
	if (err)
		return sv_fail_null(err);
	/* (A zero length is allowed, as on mlx5: an MR nothing can reach.) */
	if (dm_offset > dm->length || length > dm->length - dm_offset)
		return sv_fail_null(EINVAL);
	mr = sv_verbs_mr_create(pd, dm->buf + dm_offset, length, 0, access);
	if (!mr)
		return NULL;
	to_svmr(mr)->dm = dm;
	atomic_fetch_add(&dm->usecnt, 1);
	/* As mlx5 reports it: addr is the offset in the device memory. */
	mr->addr = (void *)(uintptr_t)dm_offset;
	return mr;
}
