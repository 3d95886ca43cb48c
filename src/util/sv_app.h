/*
 * Moving bytes into and out of the application's registered memory on its behalf (what
 * a NIC's DMA would do): plain copies and socket I/O, except under ThreadSanitizer.
 *
 * The application orders its own accesses to those buffers through its peer's messages,
 * which ThreadSanitizer cannot see, so every access of ours would be reported against
 * the application's; under ThreadSanitizer the application's side is not recorded (a
 * loop it does not instrument, system calls made directly instead of through the libc
 * wrappers it intercepts), while the library's side (its rings, its staging buffers)
 * is, so races on the library's own memory stay reported.
 */
#ifndef SV_APP_H
#define SV_APP_H

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

/* @dst is the library's memory, @app the application's (and the reverse). */
void sv_copy_from_app(void *dst, const void *app, size_t n);
void sv_copy_to_app(void *app, const void *src, size_t n);
/* sendmsg / send / readv whose buffers may be the application's (send: one buffer, the
 * kernel's shorter path). */
ssize_t sv_app_sendmsg(int fd, const struct msghdr *msg, int flags);
ssize_t sv_app_send(int fd, const void *buf, size_t len, int flags);
ssize_t sv_app_readv(int fd, const struct iovec *iov, int n);

#endif
