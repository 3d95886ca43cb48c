#include "util/sv_shared.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

void *sv_shared_alloc(const char *name, size_t len, int sealed, int *fd)
{
	void *p;
	int err;

	*fd = memfd_create(name, MFD_CLOEXEC | (sealed ? MFD_ALLOW_SEALING : 0));
	if (*fd < 0)
		return NULL;
	if (ftruncate(*fd, (off_t)len))
		goto err;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, *fd, 0);
	if (p == MAP_FAILED)
		goto err;
	/*
	 * Our mapping stays writable; nobody else can map it so (the fd may go to another
	 * user's process) and forge what our own checks trust. A kernel before 5.1 refuses
	 * FUTURE_WRITE: it then stays unsealed.
	 */
	if (sealed)
		(void)fcntl(*fd, F_ADD_SEALS,
			    F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL);
	return p;
err:
	err = errno;
	close(*fd);
	*fd = -1;
	errno = err;
	return NULL;
}
