/*
 * The private view `softverbs run` gives a program: what the HPC stacks look for before
 * they use an RDMA device, shown in a mount namespace of the program's own.
 *
 * UCX accepts a verbs device only if /dev/infiniband/<dev_name> is a character device
 * the process may read and write; UCX, Open MPI and hwloc read the device's sysfs
 * entries (/sys/class/infiniband/<dev>/...: GID types and their network devices, NUMA
 * node). softverbs has no kernel device, so neither exists. In a new mount namespace:
 *
 *   /dev/infiniband/uverbs0, rdma_cm  bind mounts of /dev/null (a character device every
 *                                     process may open; softverbs' libraries never
 *                                     open these: they only have to be there)
 *   /sys/class/infiniband/softverbs0  the attributes ibv_query_device/ibv_query_port give
 *   /sys/class/infiniband_verbs/uverbs0
 *
 * A directory that has to gain an entry is covered by a tmpfs into which each of its
 * entries is bind-mounted back (recursively, so /dev/shm, /dev/pts and every class of
 * /sys/class stay the very same file systems), symbolic links copied; then the new
 * entries are added. Nothing outside the namespace changes, and it ends with the
 * program's last process.
 *
 * The namespace: unshare(CLONE_NEWNS) where the caller may (root, CAP_SYS_ADMIN); else an
 * unprivileged user namespace mapping the caller's uid and gid to themselves (the
 * program keeps its ids; it gains no capability past execve), where the kernel allows
 * one. Neither: the caller runs the program without the view and says why.
 */
#include "sv_view.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/sv_device.h"

#define IB_CLASS "/sys/class/infiniband"
#define VERBS_CLASS "/sys/class/infiniband_verbs"
#define IB_DEV_DIR "/dev/infiniband"

static int fail(char *why, size_t len, const char *what, const char *path)
{
	snprintf(why, len, "%s %s: %s", what, path, strerror(errno));
	return -1;
}

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	size_t n = strlen(text);

	if (fd < 0)
		return -1;
	if (write(fd, text, n) != (ssize_t)n) {
		close(fd);
		return -1;
	}
	return close(fd);
}

/* The tree under construction: every failure ends in one message, kept by the first. */
struct tree {
	char *why;
	size_t len;
	int err;
};

/* Adds @fmt's path to the tree: a file holding @text, or a directory for NULL. */
static void put(struct tree *t, const char *text, const char *fmt, ...)
{
	char path[PATH_MAX];
	va_list ap;

	if (t->err)
		return;
	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	if (!text && mkdir(path, 0755) && errno != EEXIST)
		t->err = fail(t->why, t->len, "mkdir", path);
	else if (text && write_file(path, text))
		t->err = fail(t->why, t->len, "write", path);
}

/*
 * Covers @path with a tmpfs holding what it held: each entry bind-mounted back from the
 * directory underneath (MS_REC: submounts stay, and a user namespace refuses to bind a
 * tree with locked mounts otherwise), each symbolic link copied.
 */
static int cover(const char *path, char *why, size_t len)
{
	char src[PATH_MAX], dst[PATH_MAX], link[PATH_MAX];
	struct dirent *e;
	struct stat st;
	DIR *d;
	int old, fd, ret = 0;
	ssize_t n;

	old = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (old < 0)
		return fail(why, len, "open", path);
	if (fstat(old, &st) || mount("softverbs", path, "tmpfs", MS_NOSUID, "mode=0755")) {
		close(old);
		return fail(why, len, "mount tmpfs on", path);
	}
	fd = dup(old);
	d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		if (fd >= 0)
			close(fd);
		close(old);
		return fail(why, len, "read", path);
	}
	while (!ret && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(dst, sizeof(dst), "%s/%s", path, e->d_name);
		snprintf(src, sizeof(src), "/proc/self/fd/%d/%s", old, e->d_name);
		if (fstatat(old, e->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue; /* gone meanwhile */
		if (S_ISLNK(st.st_mode)) {
			n = readlinkat(old, e->d_name, link, sizeof(link) - 1);
			if (n < 0)
				continue;
			link[n] = 0;
			if (symlink(link, dst))
				ret = fail(why, len, "symlink", dst);
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			if (mkdir(dst, st.st_mode & 07777))
				ret = fail(why, len, "mkdir", dst);
		} else {
			fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
			if (fd < 0 || close(fd))
				ret = fail(why, len, "create", dst);
		}
		if (!ret && mount(src, dst, NULL, MS_BIND | MS_REC, NULL))
			ret = fail(why, len, "bind-mount", dst);
	}
	closedir(d);
	close(old);
	return ret;
}

/* @path/@name comes to exist: a directory where @path lacks it, under a cover of @path. */
static int make_room(const char *path, const char *name, char *why, size_t len)
{
	char full[PATH_MAX];
	struct stat st;

	snprintf(full, sizeof(full), "%s/%s", path, name);
	if (stat(full, &st) == 0)
		return cover(full, why, len);
	if (cover(path, why, len))
		return -1;
	if (mkdir(full, 0755))
		return fail(why, len, "mkdir", full);
	return 0;
}

/* An empty file at @dst with the character device @src bound over it. */
static int bind_node(const char *src, const char *dst, char *why, size_t len)
{
	int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	if (fd < 0 || close(fd))
		return fail(why, len, "create", dst);
	if (mount(src, dst, NULL, MS_BIND, NULL))
		return fail(why, len, "bind-mount /dev/null on", dst);
	return 0;
}

static int show_dev(char *why, size_t len)
{
	if (make_room("/dev", "infiniband", why, len))
		return -1;
	if (bind_node("/dev/null", IB_DEV_DIR "/uverbs0", why, len))
		return -1;
	if (access(IB_DEV_DIR "/rdma_cm", F_OK) &&
	    bind_node("/dev/null", IB_DEV_DIR "/rdma_cm", why, len))
		return -1;
	return 0;
}

/* sysfs spells a GUID as four groups of 16 bits, most significant first. */
static void guid_text(char *out, size_t len, uint64_t g)
{
	snprintf(out, len, "%04x:%04x:%04x:%04x\n", (unsigned)(g >> 48) & 0xffff,
		 (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
}

static void gid_text(char *out, size_t len, const union ibv_gid *gid)
{
	const uint8_t *r = gid->raw;

	snprintf(out, len, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x\n",
		 r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11],
		 r[12], r[13], r[14], r[15]);
}

/* device/local_cpus: the CPUs as sysfs prints a cpumask, 32-bit words, highest first. */
static void cpumask_text(char *out, size_t len)
{
	long n = sysconf(_SC_NPROCESSORS_CONF);
	size_t at = 0;

	if (n < 1)
		n = 1;
	if (n > 1024)
		n = 1024;
	for (long w = (n - 1) / 32; w >= 0 && at < len; w--) {
		long bits = n - w * 32;
		uint32_t word = bits >= 32 ? 0xffffffffu : (1u << bits) - 1;

		at += snprintf(out + at, len - at, "%08x%s", word, w ? "," : "\n");
	}
}

static int show_sysfs(const struct sv_host *host, char *why, size_t len)
{
	struct tree t = { .why = why, .len = len };
	struct ibv_device_attr dattr;
	struct ibv_port_attr pattr;
	char text[256], ifname[IF_NAMESIZE];
	const char *d = IB_CLASS "/" SV_DEV_NAME;

	sv_device_attr(host, &dattr);
	sv_port_attr(host, &pattr);
	if (make_room("/sys/class", "infiniband", why, len))
		return -1;
	put(&t, NULL, "%s", d);
	{
		const char *tr = getenv("SOFTVERBS_TRANSPORT"); /* as the library reports it */

		put(&t, tr && !strcmp(tr, "iwarp") ? "4: RNIC\n" : "1: CA\n", "%s/node_type", d);
	}
	guid_text(text, sizeof(text), host->node_guid);
	put(&t, text, "%s/node_guid", d);
	put(&t, text, "%s/sys_image_guid", d);
	snprintf(text, sizeof(text), "%s\n", dattr.fw_ver);
	put(&t, text, "%s/fw_ver", d);
	put(&t, "softverbs\n", "%s/hca_type", d);
	put(&t, "softverbs\n", "%s/board_id", d);
	put(&t, SV_DEV_NAME "\n", "%s/node_desc", d);
	put(&t, NULL, "%s/device", d);
	put(&t, "-1\n", "%s/device/numa_node", d);
	cpumask_text(text, sizeof(text));
	put(&t, text, "%s/device/local_cpus", d);
	put(&t, NULL, "%s/device/net", d);
	put(&t, NULL, "%s/ports", d);
	put(&t, NULL, "%s/ports/%d", d, SV_PORT_NUM);
	put(&t, NULL, "%s/ports/%d/gids", d, SV_PORT_NUM);
	put(&t, NULL, "%s/ports/%d/pkeys", d, SV_PORT_NUM);
	put(&t, NULL, "%s/ports/%d/gid_attrs", d, SV_PORT_NUM);
	put(&t, NULL, "%s/ports/%d/gid_attrs/types", d, SV_PORT_NUM);
	put(&t, NULL, "%s/ports/%d/gid_attrs/ndevs", d, SV_PORT_NUM);
	put(&t, "4: ACTIVE\n", "%s/ports/%d/state", d, SV_PORT_NUM);
	put(&t, "5: LinkUp\n", "%s/ports/%d/phys_state", d, SV_PORT_NUM);
	put(&t, "100 Gb/sec (4X EDR)\n", "%s/ports/%d/rate", d, SV_PORT_NUM);
	put(&t, "Ethernet\n", "%s/ports/%d/link_layer", d, SV_PORT_NUM);
	snprintf(text, sizeof(text), "0x%x\n", pattr.lid);
	put(&t, text, "%s/ports/%d/lid", d, SV_PORT_NUM);
	put(&t, "0x0\n", "%s/ports/%d/sm_lid", d, SV_PORT_NUM);
	put(&t, "0\n", "%s/ports/%d/lid_mask_count", d, SV_PORT_NUM);
	snprintf(text, sizeof(text), "0x%08x\n", pattr.port_cap_flags);
	put(&t, text, "%s/ports/%d/cap_mask", d, SV_PORT_NUM);
	for (int i = 0; i < host->n_gids; i++) {
		gid_text(text, sizeof(text), &host->gids[i].gid);
		put(&t, text, "%s/ports/%d/gids/%d", d, SV_PORT_NUM, i);
		put(&t, "RoCE v2\n", "%s/ports/%d/gid_attrs/types/%d", d, SV_PORT_NUM, i);
		if (!host->gids[i].ifindex || !if_indextoname(host->gids[i].ifindex, ifname))
			continue;
		snprintf(text, sizeof(text), "%s\n", ifname);
		put(&t, text, "%s/ports/%d/gid_attrs/ndevs/%d", d, SV_PORT_NUM, i);
		put(&t, NULL, "%s/device/net/%s", d, ifname);
	}
	for (int i = 0; i < host->n_pkeys; i++) {
		snprintf(text, sizeof(text), "0x%04x\n", host->pkeys[i]);
		put(&t, text, "%s/ports/%d/pkeys/%d", d, SV_PORT_NUM, i);
	}
	if (t.err)
		return -1;

	if (access(VERBS_CLASS "/uverbs0", F_OK) == 0)
		return 0; /* a kernel's uverbs0: not ours to shadow */
	if (make_room("/sys/class", "infiniband_verbs", why, len))
		return -1;
	if (access(VERBS_CLASS "/abi_version", F_OK))
		put(&t, "6\n", VERBS_CLASS "/abi_version");
	put(&t, NULL, VERBS_CLASS "/uverbs0");
	put(&t, SV_DEV_NAME "\n", VERBS_CLASS "/uverbs0/ibdev");
	put(&t, "6\n", VERBS_CLASS "/uverbs0/abi_version");
	return t.err;
}

static int write_proc(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	size_t n = strlen(text);
	int ok;

	if (fd < 0)
		return -1;
	ok = write(fd, text, n) == (ssize_t)n;
	close(fd);
	return ok ? 0 : -1;
}

/* A mount namespace of our own: directly where allowed, else inside a user namespace. */
static int enter_namespace(const char **route, char *why, size_t len)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	char map[64];
	int err;

	if (unshare(CLONE_NEWNS) == 0) {
		*route = "mount namespace";
		return 0;
	}
	err = errno;
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS)) {
		snprintf(why, len, "unshare(CLONE_NEWNS): %s; unshare(CLONE_NEWUSER): %s",
			 strerror(err), strerror(errno));
		return -1;
	}
	/* The kernel lets an unprivileged user map only its own ids, and gid only once
	 * setgroups is denied (user_namespaces(7)). */
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
	if (write_proc("/proc/self/uid_map", map))
		return fail(why, len, "write", "/proc/self/uid_map");
	if (write_proc("/proc/self/setgroups", "deny\n") && errno != ENOENT)
		return fail(why, len, "write", "/proc/self/setgroups");
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
	if (write_proc("/proc/self/gid_map", map))
		return fail(why, len, "write", "/proc/self/gid_map");
	*route = "user namespace";
	return 0;
}

static int build(const struct sv_host *host, int need_dev, int need_sys, char *why, size_t len)
{
	/* Our mounts must not propagate back to the namespace we came from. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		return fail(why, len, "make private", "/");
	if (need_dev && show_dev(why, len))
		return -1;
	if (need_sys && show_sysfs(host, why, len))
		return -1;
	return 0;
}

int sv_view_enter(const struct sv_host *host, const char **route, char *why, size_t len)
{
	struct stat st;
	int need_dev, need_sys, home;

	need_dev = stat(IB_DEV_DIR "/uverbs0", &st) || !S_ISCHR(st.st_mode);
	need_sys = access(IB_CLASS "/" SV_DEV_NAME, F_OK) != 0;
	if (!need_dev && !need_sys) {
		*route = "already in place";
		return 0;
	}
	home = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
	if (enter_namespace(route, why, len)) {
		if (home >= 0)
			close(home);
		return -1;
	}
	if (build(host, need_dev, need_sys, why, len) == 0) {
		if (home >= 0)
			close(home);
		return 0;
	}
	/* Half a view is worse than none: back to where we came from if we may. */
	if (home < 0 || setns(home, CLONE_NEWNS))
		*route = NULL;
	if (home >= 0)
		close(home);
	return -1;
}
