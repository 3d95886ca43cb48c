/*
 * Legacy libibverbs exports (IBVERBS_1.0 / 1.1) that the installed public headers do not
 * declare: rdma-core keeps their prototypes in <infiniband/marshall.h> and
 * <infiniband/driver.h>, which Debian does not ship. The signatures match rdma-core 44.
 */
#ifndef SV_VERBS_COMPAT_H
#define SV_VERBS_COMPAT_H

#include <stddef.h>

#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

/* Kernel uverbs/SA ABI structs <-> verbs structs (librdmacm's ucma path uses these). */
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);

/* "/sys", or $SYSFS_PATH (trailing slashes removed) when set and not running setuid. */
const char *ibv_get_sysfs_path(void);
/*
 * Reads @dir/@file into @buf (at most @size bytes), drops one trailing newline and
 * NUL-terminates. Returns the string length, or -1 with errno set.
 */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

/* Softverbs pins no pages, so fork() safety needs nothing: both report success. */
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);

#endif
