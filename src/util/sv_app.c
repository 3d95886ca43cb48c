#include "util/sv_app.h"

#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
void __tsan_read_range(void *addr, unsigned long size);
void __tsan_write_range(void *addr, unsigned long size);

typedef uint64_t __attribute__((may_alias, aligned(1))) sv_word;

/* volatile: the compiler may not turn the loop back into a call of memcpy. */
__attribute__((no_sanitize_thread, noinline)) static void copy_raw(void *dst, const void *src,
								   size_t n)
{
	volatile unsigned char *d = dst;
	const volatile unsigned char *s = src;
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		*(volatile sv_word *)(d + i) = *(const volatile sv_word *)(s + i);
	for (; i < n; i++)
		d[i] = s[i];
}

void sv_copy_from_app(void *dst, const void *app, size_t n)
{
	__tsan_write_range(dst, n);
	copy_raw(dst, app, n);
}

void sv_copy_to_app(void *app, const void *src, size_t n)
{
	__tsan_read_range((void *)(uintptr_t)src, n);
	copy_raw(app, src, n);
}

ssize_t sv_app_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	return syscall(SYS_sendmsg, fd, msg, flags);
}

ssize_t sv_app_send(int fd, const void *buf, size_t len, int flags)
{
	return syscall(SYS_sendto, fd, buf, len, flags, NULL, 0);
}

ssize_t sv_app_readv(int fd, const struct iovec *iov, int n)
{
	return syscall(SYS_readv, fd, iov, n);
}
#else
void sv_copy_from_app(void *dst, const void *app, size_t n)
{
	memcpy(dst, app, n);
}

void sv_copy_to_app(void *app, const void *src, size_t n)
{
	memcpy(app, src, n);
}

ssize_t sv_app_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	return sendmsg(fd, msg, flags);
}

ssize_t sv_app_send(int fd, const void *buf, size_t len, int flags)
{
	return send(fd, buf, len, flags);
}

ssize_t sv_app_readv(int fd, const struct iovec *iov, int n)
{
	return readv(fd, iov, n);
}
#endif
