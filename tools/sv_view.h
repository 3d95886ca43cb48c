#ifndef SV_VIEW_H
#define SV_VIEW_H
/*
 * The private view `softverbs run` gives a program (tools/sv_view.c): the device files
 * and sysfs entries of softverbs0 that UCX, Open MPI and hwloc look for, in a mount
 * namespace of the program's own.
 */
#include <stddef.h>

struct sv_host;

/*
 * Moves the calling process into a mount namespace showing /dev/infiniband/uverbs0 and
 * /sys/class/infiniband/softverbs0, unless both are there already. 0: done, *@route
 * says how ("mount namespace", "user namespace", "already in place"). -1: @why says
 * what failed; the process is back in the namespace it came from, or, where that
 * cannot be, *@route is NULL (it is in a half-built view and must not run the program).
 */
int sv_view_enter(const struct sv_host *host, const char **route, char *why, size_t len);

#endif
