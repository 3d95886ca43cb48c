#include "util/sv_shared.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void *sv_shared_alloc(const char *name, size_t len, int flags, int *fd)
{
	void *p;
	int err;

	*fd = memfd_create(name, MFD_CLOEXEC | (flags ? MFD_ALLOW_SEALING : 0));
	if (*fd < 0)
		return NULL;
	if (ftruncate(*fd, (off_t)len))
		goto err;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, *fd, 0);
	if (p == MAP_FAILED)
		goto err;
	/* Our own mapping stays writable. Each seal on its own: a kernel before 5.1 refuses
	 * FUTURE_WRITE, and the size seals must hold anyway (peers check for them). */
	if ((flags & SV_SHARED_SIZED) && fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW)) {
		munmap(p, len);
		goto err;
	}
	if (flags & SV_SHARED_OURS)
		(void)fcntl(*fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE);
	if (flags)
		(void)fcntl(*fd, F_ADD_SEALS, F_SEAL_SEAL);
	return p;
err:
	err = errno;
	close(*fd);
	*fd = -1;
	errno = err;
	return NULL;
}

bool sv_shared_holds(int fd, size_t len)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	return seals >= 0 && (seals & F_SEAL_SHRINK) && !fstat(fd, &st) && S_ISREG(st.st_mode) &&
	       (uint64_t)st.st_size >= len;
}
