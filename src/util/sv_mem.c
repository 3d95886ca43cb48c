/* Page checks by the kernel: see sv_mem.h. */
#include "util/sv_mem.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

/* Linux 5.14: fault the range in as a read (a write) would, without touching the data;
 * EINVAL for a page without that permission, ENOMEM for a hole. */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum { POPULATE_UNKNOWN, POPULATE_WORKS, POPULATE_MISSING };

/* Whether this kernel knows MADV_POPULATE_*: asked once, of a page that surely allows it. */
static bool populate_works(void)
{
	static _Atomic int known = POPULATE_UNKNOWN;
	static long probe; /* writable memory of ours */
	int k = atomic_load_explicit(&known, memory_order_relaxed);

	if (k == POPULATE_UNKNOWN) {
		uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
		void *p = (void *)((uintptr_t)&probe & ~(uintptr_t)(page - 1));

		k = madvise(p, page, MADV_POPULATE_WRITE) ? POPULATE_MISSING : POPULATE_WORKS;
		atomic_store_explicit(&known, k, memory_order_relaxed);
	}
	return k == POPULATE_WORKS;
}

/* Older kernels: msync says whether the range is mapped, a kernel read of its first and
 * last byte whether it may be read (write permission is not checked there). */
static bool mapped_and_readable(uint64_t lo, uint64_t hi, uint64_t addr, uint64_t len)
{
	unsigned char b[2];
	struct iovec l = { .iov_base = b, .iov_len = 1 }, r[2] = {
		{ .iov_base = (void *)(uintptr_t)addr, .iov_len = 1 },
		{ .iov_base = (void *)(uintptr_t)(addr + len - 1), .iov_len = 1 },
	};

	if (msync((void *)(uintptr_t)lo, hi - lo, MS_ASYNC))
		return false;
	return process_vm_readv(getpid(), &l, 1, &r[0], 1, 0) == 1 &&
	       process_vm_readv(getpid(), &l, 1, &r[1], 1, 0) == 1;
}

bool sv_mem_accessible(uint64_t addr, uint64_t len, bool write)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE); /* glibc keeps it: no system call */
	uint64_t lo, hi;

	if (!len)
		return true;
	if (addr + len < addr)
		return false;
	lo = addr & ~(page - 1);
	hi = (addr + len + page - 1) & ~(page - 1);
	if (!populate_works())
		return mapped_and_readable(lo, hi, addr, len);
	return !madvise((void *)(uintptr_t)lo, hi - lo,
			write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
}
