/*
 * Port 4791 shared by one user's processes (rv_port.h): the socket, the registry of who
 * is where, the steering program, and the probes by which a process finds its place.
 * One thread at a time uses a struct rv_port (the wire's lock).
 */
#include "wire/roce/rv_port.h"
#include "wire/roce/rv_proto.h"

#include "util/sv_log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define REG_MAGIC 0x76727673u /* "svrv" */
enum { FWD_KIND = 1 }; /* a probe's second byte: 0 a probe, FWD_KIND a forward */
enum { REG_VERSION = 2, PROBE_WAIT_MS = 100, PROBE_SLACK = 4, NO_SOCKET = -1 };

/* One process's record. */
struct reg_rec {
	int32_t pid;    /* 0: a free slot */
	int32_t index;  /* its socket's place in the group (-1: not known) */
	uint64_t start; /* its start time (/proc/PID/stat): a pid used again is not it */
	uint16_t n_blocks;
	uint16_t blocks[RV_PORT_BLOCKS];
	uint32_t n_services;
	uint64_t services[RV_PORT_SERVICES]; /* the CM service IDs it listens on */
};

struct reg {
	uint32_t magic, version;
	uint32_t members; /* the membership's generation: joins, leaves, deaths, strays. Every
			   * process finds its place again at each move: a process that dies
			   * closes its socket outside the registry's lock, and until it is
			   * found dead (a zombie still looks alive) the records are not what
			   * the kernel has (dropping the re-probe at joins and leaves, mixed
			   * parallel UD test runs lost datagrams in 3 of 8, against 2 of 10
			   * with it: strays are dropped) */
	uint32_t unused;
	struct reg_rec rec[RV_PORT_PROCS];
};

struct rv_port {
	int fd;
	int watch;      /* inotify on the registry (-1: none) */
	bool v6;
	uint16_t port;
	int index;
	bool probing;        /* our probes are out (rv_port_resteer): the first back names */
	uint64_t nonce;      /* ... our place; theirs */
	uint32_t members_seen;
	uint64_t start;
	int n_blocks;
	uint16_t blocks[RV_PORT_BLOCKS];
	char path[96];
	struct reg reg; /* the registry as last read (under its lock) */
};

/* --- the registry -------------------------------------------------------------------------- */

/* A process's start time in clock ticks since boot (field 22 of /proc/PID/stat), 0 if
 * it is gone. */
static uint64_t proc_start(pid_t pid)
{
	char path[32], buf[512], *p;
	unsigned long long start = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* after the command's closing parenthesis: field 3 on; start time is field 22 */
	p = strrchr(buf, ')');
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (p && sscanf(p + 1, "%llu", &start) != 1)
		start = 0;
	return start;
}

/* The registry's file, open and locked; -errno. */
static int reg_lock(struct rv_port *p)
{
	int fd = open(p->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	struct stat st;

	if (fd < 0)
		return -errno;
	/* Another user's file (a name taken in advance) is not ours to trust. */
	if (fstat(fd, &st) || st.st_uid != geteuid() || (st.st_mode & 077)) {
		sv_err("roce: %s is not this user's alone: port %u not shared", p->path, p->port);
		close(fd);
		return -EACCES;
	}
	if (flock(fd, LOCK_EX)) {
		int err = -errno;

		close(fd);
		return err;
	}
	if (pread(fd, &p->reg, sizeof(p->reg), 0) != (ssize_t)sizeof(p->reg) ||
	    p->reg.magic != REG_MAGIC || p->reg.version != REG_VERSION) {
		memset(&p->reg, 0, sizeof(p->reg));
		p->reg.magic = REG_MAGIC;
		p->reg.version = REG_VERSION;
	}
	return fd;
}

static void reg_unlock(int fd)
{
	close(fd); /* (and the lock with it) */
}

static int reg_store(struct rv_port *p, int fd)
{
	if (pwrite(fd, &p->reg, sizeof(p->reg), 0) != (ssize_t)sizeof(p->reg))
		return errno ? -errno : -EIO;
	return 0;
}

static struct reg_rec *self_rec(struct rv_port *p)
{
	for (int i = 0; i < RV_PORT_PROCS; i++)
		if (p->reg.rec[i].pid == getpid() && p->reg.rec[i].start == p->start)
			return &p->reg.rec[i];
	return NULL;
}

/* The live record with the highest index other than @not: the last socket, which takes
 * the place of one that closes. */
static struct reg_rec *last_rec(struct rv_port *p, const struct reg_rec *not)
{
	struct reg_rec *last = NULL;

	for (int i = 0; i < RV_PORT_PROCS; i++) {
		struct reg_rec *r = &p->reg.rec[i];

		if (r->pid && r != not && (!last || r->index > last->index))
			last = r;
	}
	return last;
}

/* @r's socket leaves the group: the last takes its place, as the kernel does. */
static void leave(struct rv_port *p, struct reg_rec *r)
{
	struct reg_rec *last = last_rec(p, r);

	if (last && r->index >= 0 && last->index > r->index)
		last->index = r->index;
	memset(r, 0, sizeof(*r));
	p->reg.members++;
}

/* Records of processes that died are taken out; true if there was one. */
static bool prune(struct rv_port *p)
{
	bool any = false;

	for (int i = 0; i < RV_PORT_PROCS; i++) {
		struct reg_rec *r = &p->reg.rec[i];

		if (r->pid && proc_start(r->pid) != r->start) {
			sv_dbg("roce: process %d left port %u without a word", r->pid, p->port);
			leave(p, r);
			any = true;
		}
	}
	return any;
}

static int live_count(const struct rv_port *p)
{
	int n = 0;

	for (int i = 0; i < RV_PORT_PROCS; i++)
		n += p->reg.rec[i].pid != 0;
	return n;
}

/* --- the steering program ------------------------------------------------------------------- */

/*
 * From the registry: a probe goes to the index it names; any other datagram to the
 * index of the process that owns its block (BTH bytes 5-6), or, if none does, past the
 * array (the group's hash picks). A datagram too short for the loads picks index 0.
 */
static int steer(struct rv_port *p)
{
	struct sock_filter *f = malloc(BPF_MAXINSNS * sizeof(*f));
	struct sock_fprog prog = { .filter = f };
	unsigned n = 0;
	int err = 0;

	if (!f)
		return -ENOMEM;

	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0);
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, RV_PORT_PROBE, 0, 2);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 2);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_A, 0);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 5);
	for (int i = 0; i < RV_PORT_PROCS; i++) {
		const struct reg_rec *r = &p->reg.rec[i];

		for (int b = 0; r->pid && r->index >= 0 && b < r->n_blocks; b++) {
			if (n + 3 > BPF_MAXINSNS)
				break; /* the rest go by hash: strays */
			f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
							      r->blocks[b], 0, 1);
			f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, (uint32_t)r->index);
		}
	}
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0xffffffffu);
	prog.len = (unsigned short)n;
	if (setsockopt(p->fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog)))
		err = -errno;
	free(f);
	return err;
}

/* Our record as we are (index, blocks), the program written anew; under the lock. */
static int publish(struct rv_port *p, int fd)
{
	struct reg_rec *r = self_rec(p);
	int err;

	if (!r)
		return -ENOENT;
	r->index = p->index;
	r->n_blocks = (uint16_t)p->n_blocks;
	memcpy(r->blocks, p->blocks, sizeof(r->blocks));
	err = reg_store(p, fd);
	return err ? err : steer(p);
}

/* --- finding our place ---------------------------------------------------------------------- */

static int send_probe(struct rv_port *p, uint16_t index, uint64_t nonce)
{
	uint8_t m[RV_PORT_PROBE_LEN] = { RV_PORT_PROBE, 0, (uint8_t)(index >> 8), (uint8_t)index };
	struct sockaddr_in6 d6 = { .sin6_family = AF_INET6, .sin6_port = htons(p->port),
				   .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	struct sockaddr_in d4 = { .sin_family = AF_INET, .sin_port = htons(p->port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	uint32_t pid = (uint32_t)getpid();

	memcpy(m + 4, &pid, 4);
	memcpy(m + 8, &nonce, 8);
	if (p->v6 && sendto(p->fd, m, sizeof(m), 0, (struct sockaddr *)&d6, sizeof(d6)) >= 0)
		return 0;
	if (!p->v6 && sendto(p->fd, m, sizeof(m), 0, (struct sockaddr *)&d4, sizeof(d4)) >= 0)
		return 0;
	return -errno;
}

/* Sends our probes, one per index up to @upto, with a new nonce: sent in order of index,
 * the first of ours to come back names our place (later ones may reach us too, by the
 * hash, past the array's end). */
static int send_probes(struct rv_port *p, int upto)
{
	if (getrandom(&p->nonce, sizeof(p->nonce), GRND_NONBLOCK) != (ssize_t)sizeof(p->nonce))
		p->nonce = (uint64_t)time(NULL) << 32 ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)p;
	for (int k = 0; k < upto; k++) {
		int err = send_probe(p, (uint16_t)k, p->nonce);

		if (err)
			return err; /* no loopback: the index stays as the registry guessed it */
	}
	return 0;
}

/* A probe of ours in @m: its index, or -1. */
static int probe_of_ours(const struct rv_port *p, const uint8_t *m, size_t n)
{
	uint32_t pid;
	uint64_t got;

	if (n < RV_PORT_PROBE_LEN || m[0] != RV_PORT_PROBE)
		return -1;
	memcpy(&pid, m + 4, 4);
	memcpy(&got, m + 8, 8);
	return pid == (uint32_t)getpid() && got == p->nonce ? m[2] << 8 | m[3] : -1;
}

/*
 * The same, waiting (PROBE_WAIT_MS at most) for the first of ours to come back, reading
 * the socket itself: at open only, when nothing that comes is ours yet (what is not our
 * probe is dropped).
 */
static int probe(struct rv_port *p, int upto)
{
	struct timespec t0, t;
	int err = send_probes(p, upto);

	if (err)
		return err;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd pfd = { .fd = p->fd, .events = POLLIN };
		uint8_t m[2048];
		ssize_t n;
		long ms;

		clock_gettime(CLOCK_MONOTONIC, &t);
		ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
		if (ms >= PROBE_WAIT_MS)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, (int)(PROBE_WAIT_MS - ms)) <= 0)
			continue;
		while ((n = recv(p->fd, m, sizeof(m), MSG_DONTWAIT)) >= 0) {
			int k = probe_of_ours(p, m, (size_t)n);

			if (k >= 0) {
				p->index = k;
				return 0;
			}
		}
	}
}

/* --- the port ---------------------------------------------------------------------------------- */

static int open_socket(struct rv_port *p)
{
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons(p->port),
				   .sin6_addr = IN6ADDR_ANY_INIT };
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons(p->port) };
	int one = 1, zero = 0, dont = IP_PMTUDISC_DO, dont6 = IPV6_PMTUDISC_DO;

	p->v6 = true;
	p->fd = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (p->fd < 0) {
		p->v6 = false;
		p->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	}
	if (p->fd < 0)
		return -errno;
	/* SO_REUSEPORT, never SO_REUSEADDR (rv_port.h). Don't fragment: Linux then sends
	 * identification 0, which the ICRC covers (rv_icrc.c). */
	if (setsockopt(p->fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) ||
	    (p->v6 && setsockopt(p->fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero))) ||
	    (p->v6 && setsockopt(p->fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &dont6, sizeof(dont6))) ||
	    setsockopt(p->fd, IPPROTO_IP, IP_MTU_DISCOVER, &dont, sizeof(dont)))
		return -errno;
	if (p->v6 ? bind(p->fd, (struct sockaddr *)&a6, sizeof(a6))
		  : bind(p->fd, (struct sockaddr *)&a4, sizeof(a4)))
		return -errno;
	return 0;
}

/* At open: our place, found before anything of ours comes. */
static int find_place(struct rv_port *p)
{
	int fd = reg_lock(p), upto, err;

	if (fd < 0)
		return fd;
	upto = live_count(p) + PROBE_SLACK;
	reg_unlock(fd);
	err = probe(p, upto > RV_PORT_PROCS ? RV_PORT_PROCS : upto);
	if (err)
		sv_dbg("roce: port %u: no answer to our probes (%d): index %d kept", p->port, err,
		       p->index);
	fd = reg_lock(p);
	if (fd < 0)
		return fd;
	p->members_seen = p->reg.members;
	err = publish(p, fd);
	reg_unlock(fd);
	return err;
}

int rv_port_open(uint16_t port, struct rv_port **out)
{
	struct rv_port *p = calloc(1, sizeof(*p));
	struct stat ns;
	struct reg_rec *r = NULL;
	int fd, err;

	if (!p)
		return -ENOMEM;
	p->port = port;
	p->index = NO_SOCKET;
	p->watch = -1;
	p->start = proc_start(getpid());
	/* One group per user and network namespace (the port's), so one registry too. */
	if (stat("/proc/self/ns/net", &ns))
		ns.st_ino = 0;
	snprintf(p->path, sizeof(p->path), "%s/softverbs-roce-%u-%u-%lu",
		 access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm", (unsigned)port,
		 (unsigned)geteuid(), (unsigned long)ns.st_ino);
	/* Bound under the registry's lock: while it is held, every socket of the group
	 * has its record (a leave's "the last takes the place" names the right one). */
	fd = reg_lock(p);
	if (fd < 0) {
		err = fd;
		goto fail;
	}
	err = open_socket(p);
	if (err) {
		static _Atomic bool told;

		reg_unlock(fd);
		if (err == -EADDRINUSE && !atomic_exchange(&told, true))
			sv_warn("roce: UDP port %u is another user's or the kernel's (rxe): no "
				"RoCE v2 here for this user", port);
		goto fail;
	}
	prune(p);
	/* Joined last: the array's next place, until the probe says. */
	p->index = live_count(p);
	for (int i = 0; i < RV_PORT_PROCS && !r; i++)
		if (!p->reg.rec[i].pid)
			r = &p->reg.rec[i];
	if (!r) {
		reg_unlock(fd);
		err = -EUSERS;
		goto fail;
	}
	r->pid = getpid();
	r->start = p->start;
	p->reg.members++;
	err = publish(p, fd);
	reg_unlock(fd);
	/* Told of every change of the registry (the file exists now). */
	p->watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (p->watch >= 0 && inotify_add_watch(p->watch, p->path, IN_MODIFY) < 0) {
		close(p->watch);
		p->watch = -1;
	}
	if (!err)
		err = find_place(p);
	if (err)
		goto fail_joined;
	*out = p;
	return 0;
fail_joined:
	rv_port_close(p);
	return err;
fail:
	if (p->fd >= 0)
		close(p->fd);
	if (p->watch >= 0)
		close(p->watch);
	free(p);
	return err;
}

void rv_port_close(struct rv_port *p)
{
	int fd = reg_lock(p);

	if (fd >= 0) {
		struct reg_rec *r = self_rec(p);

		if (r) {
			leave(p, r);
			if (!reg_store(p, fd))
				(void)steer(p); /* the group keeps it after our socket goes */
		}
		close(p->fd); /* under the lock: the kernel moves the last socket now */
		reg_unlock(fd);
	} else {
		close(p->fd);
	}
	if (p->watch >= 0)
		close(p->watch);
	free(p);
}

int rv_port_fd(const struct rv_port *p)
{
	return p->fd;
}

int rv_port_watch_fd(const struct rv_port *p)
{
	return p->watch;
}

void rv_port_drain_watch(struct rv_port *p)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

	while (p->watch >= 0 && read(p->watch, buf, sizeof(buf)) > 0)
		;
}

bool rv_port_v6(const struct rv_port *p)
{
	return p->v6;
}

int rv_port_index(const struct rv_port *p)
{
	return p->index;
}

static int blocks_changed(struct rv_port *p)
{
	int fd = reg_lock(p), err;

	if (fd < 0)
		return fd;
	prune(p);
	err = publish(p, fd);
	reg_unlock(fd);
	return err;
}

int rv_port_claim(struct rv_port *p, uint32_t block)
{
	for (int i = 0; i < p->n_blocks; i++)
		if (p->blocks[i] == block)
			return 0;
	if (p->n_blocks == RV_PORT_BLOCKS || block > 0xffff)
		return -ENOSPC;
	p->blocks[p->n_blocks++] = (uint16_t)block;
	return blocks_changed(p);
}

void rv_port_release(struct rv_port *p, uint32_t block)
{
	for (int i = 0; i < p->n_blocks; i++) {
		if (p->blocks[i] != block)
			continue;
		p->blocks[i] = p->blocks[--p->n_blocks];
		(void)blocks_changed(p);
		return;
	}
}

enum rv_port_dgram rv_port_classify(struct rv_port *p, const void *buf, size_t len)
{
	const uint8_t *b = buf;
	uint16_t block;

	if (len >= 2 && b[0] == RV_PORT_PROBE && b[1] == FWD_KIND)
		return RV_DGRAM_FORWARD;
	if (len >= 1 && b[0] == RV_PORT_PROBE) {
		int k = p->probing ? probe_of_ours(p, b, len) : -1;

		if (k >= 0) {
			/* The first of ours back names our place (rv_port_resteer). */
			int fd = reg_lock(p);

			p->probing = false;
			p->index = k;
			if (fd >= 0) {
				(void)publish(p, fd);
				reg_unlock(fd);
			}
		}
		return RV_DGRAM_PROBE;
	}
	if (len < 8)
		return RV_DGRAM_OURS; /* too short to say: the decoder refuses it */
	if ((uint32_t)(b[5] << 16 | b[6] << 8 | b[7]) == RV_QPN_MCAST)
		return RV_DGRAM_MCAST;
	if ((uint32_t)(b[5] << 16 | b[6] << 8 | b[7]) == 1)
		return RV_DGRAM_GSI;
	block = (uint16_t)(b[5] << 8 | b[6]);
	for (int i = 0; i < p->n_blocks; i++)
		if (p->blocks[i] == block)
			return RV_DGRAM_OURS;
	return RV_DGRAM_STRAY;
}

bool rv_port_stale(struct rv_port *p)
{
	uint32_t members;
	int fd = open(p->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	bool stale;

	if (fd < 0)
		return false;
	stale = pread(fd, &members, sizeof(members), offsetof(struct reg, members)) ==
			(ssize_t)sizeof(members) &&
		members != p->members_seen;
	close(fd);
	return stale;
}

int rv_port_resteer(struct rv_port *p, bool stray)
{
	int fd = reg_lock(p), upto, err;

	if (fd < 0)
		return fd;
	if (prune(p) | stray) {
		if (stray)
			p->reg.members++; /* everyone looks: the owner's place is what is wrong */
		(void)reg_store(p, fd);
	}
	p->members_seen = p->reg.members;
	upto = live_count(p) + PROBE_SLACK;
	reg_unlock(fd);
	/* The probes come back through the socket's reader (rv_port_classify), which
	 * publishes our place: nothing that comes meanwhile is lost. */
	err = send_probes(p, upto > RV_PORT_PROCS ? RV_PORT_PROCS : upto);
	p->probing = !err;
	return err == -ENETUNREACH || err == -EADDRNOTAVAIL ? 0 : err;
}

bool rv_port_probing(const struct rv_port *p)
{
	return p->probing;
}

/* --- CM services (rv_port_listen) ---------------------------------------------------------- */

/* Under the registry's lock: the live record other than ours that lists @sid. */
static struct reg_rec *listener_of(struct rv_port *p, uint64_t sid, bool others_only)
{
	struct reg_rec *self = self_rec(p);

	for (int i = 0; i < RV_PORT_PROCS; i++) {
		struct reg_rec *r = &p->reg.rec[i];

		if (!r->pid || (others_only && r == self))
			continue;
		for (uint32_t k = 0; k < r->n_services && k < RV_PORT_SERVICES; k++)
			if (r->services[k] == sid)
				return r;
	}
	return NULL;
}

int rv_port_listen(struct rv_port *p, uint64_t service_id)
{
	int fd = reg_lock(p), err = 0;
	struct reg_rec *self;

	if (fd < 0)
		return fd;
	if (prune(p))
		(void)steer(p);
	self = self_rec(p);
	if (!self)
		err = -ENOENT; /* (our record went: the port is being closed) */
	else if (listener_of(p, service_id, true))
		err = -EADDRINUSE;
	else if (listener_of(p, service_id, false))
		err = 0; /* ours already */
	else if (self->n_services >= RV_PORT_SERVICES)
		err = -ENOSPC;
	else
		self->services[self->n_services++] = service_id;
	if (!err)
		err = reg_store(p, fd);
	reg_unlock(fd);
	return err;
}

void rv_port_unlisten(struct rv_port *p, uint64_t service_id)
{
	int fd = reg_lock(p);
	struct reg_rec *self;

	if (fd < 0)
		return;
	self = self_rec(p);
	for (uint32_t k = 0; self && k < self->n_services; k++) {
		if (self->services[k] == service_id) {
			self->services[k] = self->services[--self->n_services];
			self->services[self->n_services] = 0;
			(void)reg_store(p, fd);
			break;
		}
	}
	reg_unlock(fd);
}

int rv_port_listener(struct rv_port *p, uint64_t service_id, uint32_t *block)
{
	int fd = reg_lock(p), err = -ENOENT;
	struct reg_rec *r;

	if (fd < 0)
		return fd;
	if (prune(p)) {
		(void)steer(p);
		(void)reg_store(p, fd);
	}
	r = listener_of(p, service_id, false);
	if (r && r->n_blocks) {
		*block = r->blocks[0];
		err = 0;
	}
	reg_unlock(fd);
	return err;
}

/* --- forwards (rv_port_forward) ---------------------------------------------------------- */

int rv_port_forward(struct rv_port *p, int index, const struct rv_port_fwd *f)
{
	uint8_t h[RV_PORT_FWD_HDR] = { RV_PORT_PROBE, FWD_KIND, (uint8_t)(index >> 8),
				       (uint8_t)index };
	struct iovec iov[2] = { { h, sizeof(h) }, { (void *)f->dgram, f->len } };
	struct sockaddr_in6 d6 = { .sin6_family = AF_INET6, .sin6_port = htons(p->port),
				   .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	struct sockaddr_in d4 = { .sin_family = AF_INET, .sin_port = htons(p->port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };

	if (index < 0 || index >= RV_PORT_PROCS)
		return -EINVAL;
	memcpy(h + 4, f->src, 16);
	memcpy(h + 20, f->dst, 16);
	h[36] = (uint8_t)(f->sport >> 8);
	h[37] = (uint8_t)f->sport;
	if (p->v6) {
		msg.msg_name = &d6;
		msg.msg_namelen = sizeof(d6);
	} else {
		msg.msg_name = &d4;
		msg.msg_namelen = sizeof(d4);
	}
	return sendmsg(p->fd, &msg, MSG_DONTWAIT) >= 0 ? 0 : -errno;
}

int rv_port_forwarded(const uint8_t *buf, size_t len, struct rv_port_fwd *f)
{
	if (len < RV_PORT_FWD_HDR || buf[0] != RV_PORT_PROBE || buf[1] != FWD_KIND)
		return -EBADMSG;
	memcpy(f->src, buf + 4, 16);
	memcpy(f->dst, buf + 20, 16);
	f->sport = (uint16_t)(buf[36] << 8 | buf[37]);
	f->dgram = buf + RV_PORT_FWD_HDR;
	f->len = len - RV_PORT_FWD_HDR;
	return 0;
}

int rv_port_index_of(struct rv_port *p, uint32_t block)
{
	int fd = reg_lock(p), index = -ENOENT;

	if (fd < 0)
		return fd;
	for (int i = 0; i < RV_PORT_PROCS && index < 0; i++) {
		const struct reg_rec *r = &p->reg.rec[i];

		for (int b = 0; r->pid && r->index >= 0 && b < r->n_blocks; b++)
			if (r->blocks[b] == block)
				index = r->index;
	}
	reg_unlock(fd);
	return index;
}
