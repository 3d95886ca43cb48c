/*
 * softverbs: the command-line tool.
 *
 *   softverbs run [--] PROGRAM [ARGS...]   run a program on softverbs' libraries
 *   softverbs info                          the device this host offers
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sv_device.h"
#include "sv_view.h"

static const char usage[] =
	"usage: softverbs COMMAND [ARGS...]\n"
	"\n"
	"RDMA verbs in user space: runs unmodified RDMA programs with no RDMA NIC.\n"
	"\n"
	"commands:\n"
	"  run [--no-view] [--] PROGRAM [ARGS...]\n"
	"                              run PROGRAM with softverbs' libibverbs.so.1 and\n"
	"                              librdmacm.so.1 in place of the system's (sets\n"
	"                              LD_LIBRARY_PATH), in a private view that shows\n"
	"                              /dev/infiniband/uverbs0 and the sysfs entries of\n"
	"                              softverbs0, as UCX, Open MPI and hwloc look for them\n"
	"                              (a mount namespace of the program's own; nothing\n"
	"                              outside it changes). --no-view: LD_LIBRARY_PATH only\n"
	"  info                        print the device softverbs0 as this host offers it:\n"
	"                              node GUID, LID, GID table, P_Key table\n"
	"  help                        this text\n"
	"  version                     the version\n"
	"\n"
	"environment:\n"
	"  SOFTVERBS_LIBDIR   where run finds the libraries (default: beside this program)\n"
	"  SOFTVERBS_VIEW     0: run never sets up the private view (as --no-view)\n"
	"  SOFTVERBS_LOG      error | warn | info | debug (default warn), to stderr\n"
	"  SOFTVERBS_PKEYS    the P_Key table, e.g. 0xffff,0x8001 (default 0xffff); QPs\n"
	"                     talk only within a partition (IBA 10.9.3)\n"
	"  SOFTVERBS_SHM_COPY cma | bounce: how data crosses between processes of a host\n"
	"                     (default: process_vm_readv/writev where permitted, else bounce)\n"
	"  SOFTVERBS_SHM_INLINE_MAX  SENDs up to this many bytes travel in the fifo, larger\n"
	"                     ones are pulled with one copy (default 32768)\n"
	"  SOFTVERBS_SHM_ASSIST  0: large RDMA WRITEs and READs (132 KiB or more) are\n"
	"                     copied by the requester alone: this process neither asks\n"
	"                     its peers' progress threads to help nor helps (default 1)\n"
	"  SOFTVERBS_LOOPBACK 0: an rdma_cm id bound to a loopback address is tied to no\n"
	"                     device (libfabric's verbs provider between hosts)\n"
	"  SOFTVERBS_UDP      0: UD datagrams never leave the host (no UDP socket); all:\n"
	"                     this host's UD QPs are reached over UDP too (default: other\n"
	"                     hosts' only)\n"
	"  SOFTVERBS_ROCE_PORT  the UDP port of RoCE v2 (UD between hosts, RC and UC to a\n"
	"                     host without softverbs) on every host (default 4791)\n"
	"  SOFTVERBS_MCAST_IFS  the interfaces (names, comma-separated, or none) on which\n"
	"                     ibv_attach_mcast joins a group for other hosts' senders\n"
	"                     (default: every interface that is up and takes multicast)\n"
	"  SOFTVERBS_WIRE     iwarp: every RC and UC QP on iWARP; roce: every RC and UC QP with\n"
	"                     a global path on RoCE v2; shm: RC and UC QPs stay on the host (default:\n"
	"                     this host's peers on shm, other softverbs hosts on iWARP, a\n"
	"                     host without softverbs on RoCE v2)\n"
	"  SOFTVERBS_TRANSPORT  iwarp: softverbs0 reports itself an iWARP RNIC, as Linux\n"
	"                     siw0 does, for programs that act by the transport (perftest's\n"
	"                     ib_send_bw against siw); default ib (RoCE-like)\n";

static int has_lib(const char *dir)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/libibverbs.so.1", dir);
	return access(path, R_OK) == 0;
}

/* The libraries sit in ../lib beside the binary (build tree) or at the install libdir. */
static int find_libdir(char *out, size_t len)
{
	const char *env = getenv("SOFTVERBS_LIBDIR");
	char exe[PATH_MAX], *slash;
	ssize_t n;

	if (env) {
		snprintf(out, len, "%s", env);
		return has_lib(out) ? 0 : -1;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n < 0)
		return -1;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	if (!slash)
		return -1;
	*slash = 0;
	if ((size_t)snprintf(out, len, "%s/../lib", exe) < len && has_lib(out))
		return 0;
	if ((size_t)snprintf(out, len, "%s/%s", exe, SV_INSTALL_REL_LIBDIR) >= len)
		return -1;
	return has_lib(out) ? 0 : -1;
}

static int log_info(void)
{
	const char *lvl = getenv("SOFTVERBS_LOG");

	return lvl && (!strcmp(lvl, "info") || !strcmp(lvl, "debug"));
}

/*
 * The private view (tools/sv_view.c). Without it the program still runs on softverbs,
 * only the stacks that look for a kernel device do not see one: said on stderr.
 * Returns nonzero only when the process is stuck in a half-built view.
 */
static int enter_view(void)
{
	const char *route = "", *env = getenv("SOFTVERBS_VIEW");
	struct sv_host host;
	char why[512];

	if (env && !strcmp(env, "0"))
		return 0;
	sv_host_probe(&host);
	if (sv_view_enter(&host, &route, why, sizeof(why)) == 0) {
		if (log_info())
			fprintf(stderr, "softverbs run: private view: %s\n", route);
		return 0;
	}
	if (!route) {
		fprintf(stderr, "softverbs run: the private view failed half-way (%s) and the "
				"namespace cannot be left; run with --no-view\n", why);
		return -1;
	}
	fprintf(stderr, "softverbs run: no private view (%s): UCX and Open MPI will not see "
			"softverbs0; docs/user-guide.md, \"The private view\"\n", why);
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	char libdir[PATH_MAX], *path;
	const char *old;
	int view = 1;

	if (argc > 0 && !strcmp(argv[0], "--no-view")) {
		view = 0;
		argc--;
		argv++;
	}
	if (argc > 0 && !strcmp(argv[0], "--")) {
		argc--;
		argv++;
	}
	if (argc < 1) {
		fprintf(stderr, "softverbs run: which program?\n%s", usage);
		return 2;
	}
	if (find_libdir(libdir, sizeof(libdir))) {
		if (getenv("SOFTVERBS_LIBDIR"))
			fprintf(stderr, "softverbs run: libibverbs.so.1 not found in %s "
					"(SOFTVERBS_LIBDIR)\n", getenv("SOFTVERBS_LIBDIR"));
		else
			fprintf(stderr, "softverbs run: libibverbs.so.1 not found beside the "
					"softverbs binary (set SOFTVERBS_LIBDIR)\n");
		return 127;
	}
	old = getenv("LD_LIBRARY_PATH");
	if (asprintf(&path, "%s%s%s", libdir, old && *old ? ":" : "", old ? old : "") < 0)
		return 127;
	setenv("LD_LIBRARY_PATH", path, 1);
	free(path);
	if (view && enter_view())
		return 127;
	execvp(argv[0], argv);
	fprintf(stderr, "softverbs run: %s: %s\n", argv[0], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}

static int cmd_info(void)
{
	struct sv_host host;
	char buf[INET6_ADDRSTRLEN];

	if (sv_host_probe(&host))
		fprintf(stderr, "softverbs: SOFTVERBS_PKEYS is malformed; using 0xffff\n");
	printf("device     %s (port %d, link layer Ethernet, RoCE v2 GIDs)\n", SV_DEV_NAME,
	       SV_PORT_NUM);
	printf("node_guid  %016llx\n", (unsigned long long)host.node_guid);
	printf("lid        0x%04x\n", host.lid);
	for (int i = 0; i < host.n_gids; i++) {
		inet_ntop(AF_INET6, host.gids[i].gid.raw, buf, sizeof(buf));
		printf("gid[%2d]    %s\n", i, buf);
	}
	for (int i = 0; i < host.n_pkeys; i++)
		printf("pkey[%2d]   0x%04x\n", i, host.pkeys[i]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") ||
	    !strcmp(argv[1], "-h")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc - 2, argv + 2);
	if (!strcmp(argv[1], "info") || !strcmp(argv[1], "devices"))
		return cmd_info();
	if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
		printf("softverbs %s\n", SV_VERSION);
		return 0;
	}
	fprintf(stderr, "softverbs: unknown command '%s'\n%s", argv[1], usage);
	return 2;
}
