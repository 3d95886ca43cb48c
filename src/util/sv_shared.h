/*
 * Memory a process can share: an anonymous file of @len bytes, mapped here read-write
 * (pages touched only as they are used), whose descriptor another process may map too.
 * The key table lives in one, so that a wire that places data into this process's
 * memory without it (the shm wire's direct copies) can read the keys it must respect.
 */
#ifndef SV_SHARED_H
#define SV_SHARED_H

#include <stddef.h>

/* The mapping and *fd, or NULL with errno set. With @sealed, nobody who is given the
 * descriptor can map it writable, grow or shrink it (where the kernel can seal so). */
void *sv_shared_alloc(const char *name, size_t len, int sealed, int *fd);

#endif
