/*
 * UD multicast on one host, the shm wire's way. A QP's membership of a group is an
 * abstract socket it binds, named softverbs/mcast/<MGID in hex>/<QPN in hex>: the kernel
 * drops the name when the process exits, so a crashed member leaves nothing stale. A
 * sender lists the members from /proc/net/unix and sends one copy to each (the same QPN
 * lookup as any UD send).
 */
#include "wire/shm/shm_wire.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/sv_obj.h"
#include "util/sv_log.h"

#define PREFIX "softverbs/mcast/"

/* Every membership of the process: a child of fork() must drop the sockets it inherits,
 * or a group would keep members that left in the parent. */
struct membership {
	struct sv_qp *qp;
	union ibv_gid mgid;
	int fd;
	struct membership *next;
};

static pthread_mutex_t mc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct membership *mc_all;
static pthread_once_t mc_once = PTHREAD_ONCE_INIT;

static void atfork_prepare(void)
{
	pthread_mutex_lock(&mc_lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&mc_lock);
}

static void atfork_child(void)
{
	for (struct membership *m = mc_all; m; m = m->next) {
		close(m->fd);
		m->fd = -1;
	}
	pthread_mutex_unlock(&mc_lock);
}

static void mc_init(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

static void group_name(char *out, size_t len, const union ibv_gid *mgid)
{
	size_t n = (size_t)snprintf(out, len, PREFIX);

	for (int i = 0; i < 16 && n + 2 < len; i++)
		n += (size_t)snprintf(out + n, len - n, "%02x", mgid->raw[i]);
}

int shm_mcast_attach(struct sv_qp *qp, const union ibv_gid *mgid, int ifindex)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct membership *m;
	char group[80];
	socklen_t len;
	int fd, err = 0;

	(void)ifindex; /* (this host's members: no link) */
	pthread_once(&mc_once, mc_init);
	pthread_mutex_lock(&mc_lock);
	for (m = mc_all; m; m = m->next) {
		if (m->qp == qp && !memcmp(&m->mgid, mgid, sizeof(*mgid)))
			goto out; /* attached already */
	}
	group_name(group, sizeof(group), mgid);
	/* sun_path[0] stays 0: an abstract name, gone with the last holder. */
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
			  (size_t)snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "%s/%06x",
					   group, qp->ibv.qp_base.qp_num));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		err = -errno;
		goto out;
	}
	if (bind(fd, (struct sockaddr *)&sa, len)) {
		err = -errno;
		close(fd);
		goto out;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		close(fd);
		err = -ENOMEM;
		goto out;
	}
	m->qp = qp;
	m->mgid = *mgid;
	m->fd = fd;
	m->next = mc_all;
	mc_all = m;
	sv_dbg("qp %u attached to %s", qp->ibv.qp_base.qp_num, group);
out:
	pthread_mutex_unlock(&mc_lock);
	return err;
}

int shm_mcast_detach(struct sv_qp *qp, const union ibv_gid *mgid)
{
	struct membership **p, *m;

	pthread_mutex_lock(&mc_lock);
	for (p = &mc_all; (m = *p); p = &m->next) {
		if (m->qp == qp && !memcmp(&m->mgid, mgid, sizeof(*mgid))) {
			*p = m->next;
			if (m->fd >= 0)
				close(m->fd);
			free(m);
			pthread_mutex_unlock(&mc_lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&mc_lock);
	return -EINVAL;
}

int shm_mcast_count(struct sv_qp *qp)
{
	int n = 0;

	pthread_mutex_lock(&mc_lock);
	for (struct membership *m = mc_all; m; m = m->next)
		n += m->qp == qp;
	pthread_mutex_unlock(&mc_lock);
	return n;
}

/* /proc/net/unix: "Num RefCount Protocol Flags Type St Inode Path", abstract names
 * with a leading '@'. */
int shm_mcast_members(struct sv_qp *qp, const union ibv_gid *mgid, uint32_t *qpns, int max)
{
	char group[80], line[512];
	size_t glen;
	FILE *f;
	int n = 0;

	(void)qp;
	group_name(group, sizeof(group), mgid);
	glen = strlen(group);
	f = fopen("/proc/net/unix", "re");
	if (!f)
		return -errno;
	while (n < max && fgets(line, sizeof(line), f)) {
		char *at = strchr(line, '@');
		unsigned int qpn;
		bool seen = false;

		if (!at || strncmp(at + 1, group, glen) || at[1 + glen] != '/' ||
		    sscanf(at + 2 + glen, "%x", &qpn) != 1)
			continue;
		for (int i = 0; i < n && !seen; i++)
			seen = qpns[i] == qpn;
		if (!seen)
			qpns[n++] = qpn;
	}
	fclose(f);
	return n;
}
