/*
 * Memory a process can share: an anonymous file of @len bytes, mapped here read-write
 * (pages touched only as they are used), whose descriptor another process may map too.
 * The key table lives in one, so that a wire that places data into this process's
 * memory without it (the shm wire's direct copies) can read the keys it must respect;
 * the shm wire's QP segments live in others.
 */
#ifndef SV_SHARED_H
#define SV_SHARED_H

#include <stdbool.h>
#include <stddef.h>

enum {
	/* Its size sealed: nobody given the descriptor can shrink it (and so make our
	 * accesses below @len fault) or grow it. */
	SV_SHARED_SIZED = 1,
	/* Only we write it: nobody given the descriptor can map it writable (where the
	 * kernel can seal so: 5.1 on). */
	SV_SHARED_OURS = 2,
};

/* The mapping and *fd, or NULL with errno set. @flags: SV_SHARED_*. */
void *sv_shared_alloc(const char *name, size_t len, int flags, int *fd);

/* Whether @fd is such a file, of at least @len bytes, sealed against shrinking: what
 * may be mapped from another process without a later access faulting. */
bool sv_shared_holds(int fd, size_t len);

#endif
