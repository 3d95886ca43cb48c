/*
 * bench/baselines.c — the floors softverbs' same-host (shm) data path is measured
 * against, taken on this machine in this invocation (performance is
 * always a ratio against a baseline from the same run).
 *
 *   memcpy            warm (same buffers again and again) and cold (streaming through a
 *                     pool several times the size of the last-level cache), GB/s
 *   null syscall      one getppid() through syscall(2): the kernel entry/exit floor, ns
 *   process_vm_*v     parent -> child (writev) and child -> parent (readv) bandwidth,
 *                     GB/s, and the fixed cost of one 8-byte call, ns
 *   cache line        one-way latency of a cache-line transfer between two processes
 *                     (ping-pong on a MAP_SHARED flag, round trip / 2), ns
 *   wake-up           round trip between two processes that sleep in the kernel:
 *                     eventfd read()/write(), and FUTEX_WAIT/FUTEX_WAKE on shared
 *                     memory, µs (each round trip wakes a sleeper twice)
 *
 * Every figure is the median of --reps repetitions; each repetition runs an iteration
 * count calibrated beforehand to last about --rep-ms. Time is CLOCK_MONOTONIC.
 * GB/s means 10^9 bytes per second.
 *
 * Build (bench/run.sh does it):  cc -O2 -std=c11 -D_GNU_SOURCE -o baselines bench/baselines.c
 *
 * --json prints one object; every result is one line of the "results" array, so that
 * shell scripts can pick a result with grep (bench/run.sh does).
 *
 * Processes: every child is forked by child_start(), dies with its parent
 * (PR_SET_PDEATHSIG) and is reaped by child_stop(); an alarm bounds the whole run.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)
#define NSEC_PER_SEC UINT64_C(1000000000)

#define REPS_DEFAULT 7
#define REPS_MAX 31
#define REP_MS_DEFAULT 50
#define REP_MS_MIN 5
#define REP_MS_MAX 200

/* A single hand-off (ping-pong, wake-up) that takes this long means the peer is gone. */
#define HANDOFF_TIMEOUT_NS (2 * NSEC_PER_SEC)
/* Spin iterations between two looks at the clock while waiting for the peer. */
#define SPINS_PER_CLOCK_CHECK (1u << 16)

static const char usage_text[] =
	"usage: baselines [--json] [--json-file FILE] [--reps N] [--rep-ms MS]\n"
	"                 [--only GROUP[,GROUP...]]\n"
	"\n"
	"Measures the baselines softverbs' same-host data path is compared with:\n"
	"memcpy bandwidth (warm and cold), the cost of a null system call,\n"
	"process_vm_writev/readv bandwidth and per-call cost between two processes,\n"
	"the one-way latency of a cache-line transfer between two processes, and the\n"
	"eventfd and futex wake-up round trip between two processes.\n"
	"Each figure is the median of N repetitions of about MS milliseconds each.\n"
	"\n"
	"options:\n"
	"  --json            print JSON on stdout instead of the table\n"
	"                    (one result per line in \"results\")\n"
	"  --json-file FILE  also write the JSON to FILE; the table still goes to stdout\n"
	"  --reps N          repetitions per figure, N in 3..31 (default 7)\n"
	"  --rep-ms MS       length of one repetition in ms, 5..200 (default 50)\n"
	"  --only GROUPS     measure only these groups (comma-separated):\n"
	"                    memcpy, syscall, pvm, cacheline, wakeup (default: all)\n"
	"  -h, --help        this text\n"
	"\n"
	"With the defaults the whole run takes well under 20 s; an alarm ends it (and\n"
	"its child processes) if it ever runs far past its expected length.\n"
	"Exit status: 0 when every figure was measured, 1 when some were unavailable\n"
	"(e.g. process_vm_writev not permitted), 2 on a usage error, 3 on a failure.\n";

enum {
	GROUP_MEMCPY = 1 << 0,
	GROUP_SYSCALL = 1 << 1,
	GROUP_PVM = 1 << 2,
	GROUP_CACHELINE = 1 << 3,
	GROUP_WAKEUP = 1 << 4,
	GROUP_ALL = (1 << 5) - 1,
};

static const struct {
	const char *name;
	unsigned bit;
	unsigned figures;   /* results the group produces, for the run-time bound */
} groups[] = {
	{ "memcpy", GROUP_MEMCPY, 5 },
	{ "syscall", GROUP_SYSCALL, 1 },
	{ "pvm", GROUP_PVM, 8 },
	{ "cacheline", GROUP_CACHELINE, 1 },
	{ "wakeup", GROUP_WAKEUP, 2 },
};

static struct {
	bool json;
	const char *json_file;
	unsigned reps;
	unsigned rep_ms;
	unsigned groups;   /* GROUP_* bits */
} opt = { .reps = REPS_DEFAULT, .rep_ms = REP_MS_DEFAULT };

/* -------------------------------------------------------------------------- */
/* time, errors, signals                                                       */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("baselines: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(3);
}

/* The child being measured, for the alarm handler; 0 when there is none. */
static volatile sig_atomic_t current_child;

static void on_alarm(int sig)
{
	static const char msg[] = "baselines: run time bound exceeded, giving up\n";
	pid_t pid = (pid_t)current_child;

	(void)sig;
	if (pid > 0)
		kill(pid, SIGKILL);
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) {
		/* nothing more to do */
	}
	_exit(3);
}

/*
 * SIGCHLD is caught without SA_RESTART so that a parent blocked in read() or
 * FUTEX_WAIT on a child that died wakes with EINTR instead of waiting forever.
 */
static void on_sigchld(int sig)
{
	(void)sig;
}

static void install_signals(unsigned alarm_s)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_sigchld;
	if (sigaction(SIGCHLD, &sa, NULL) < 0)
		die("sigaction(SIGCHLD): %s", strerror(errno));
	sa.sa_handler = on_alarm;
	if (sigaction(SIGALRM, &sa, NULL) < 0)
		die("sigaction(SIGALRM): %s", strerror(errno));
	alarm(alarm_s);
}

/* -------------------------------------------------------------------------- */
/* CPUs                                                                        */

static struct {
	cpu_set_t allowed;   /* the affinity this program started with */
	int navail;          /* CPUs in it (what nproc prints) */
	int cpu_parent;      /* -1 when not pinning (a single CPU) */
	int cpu_child;
} cpus = { .cpu_parent = -1, .cpu_child = -1 };

static void pin_self(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		die("sched_setaffinity(cpu %d): %s", cpu, strerror(errno));
}

/* The parent runs on the first allowed CPU for the whole run, children on the second. */
static void cpus_init(void)
{
	if (sched_getaffinity(0, sizeof(cpus.allowed), &cpus.allowed) < 0)
		die("sched_getaffinity: %s", strerror(errno));
	cpus.navail = CPU_COUNT(&cpus.allowed);
	if (cpus.navail < 2)
		return;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &cpus.allowed))
			continue;
		if (cpus.cpu_parent < 0)
			cpus.cpu_parent = c;
		else if (cpus.cpu_child < 0)
			cpus.cpu_child = c;
	}
	pin_self(cpus.cpu_parent);
}

/* -------------------------------------------------------------------------- */
/* child processes                                                             */

/*
 * A child gets two pipes: ctl (the parent holds the write end; the child sleeps in
 * read() on it and exits at EOF) and rep (the child's replies: its setup message).
 */
struct child {
	pid_t pid;
	int ctl;   /* parent's write end of ctl */
	int rep;   /* parent's read end of rep */
};

typedef int (*child_main_fn)(void *arg, int rep_fd, int ctl_fd);

static bool write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

static bool read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len > 0) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/* In the child: sleep until the parent closes ctl (or dies). */
static void sleep_until_eof(int ctl_fd)
{
	char c;

	for (;;) {
		ssize_t n = read(ctl_fd, &c, 1);

		if (n == 0 || (n < 0 && errno != EINTR))
			return;
	}
}

static void child_start(struct child *ch, child_main_fn fn, void *arg)
{
	int ctl[2], rep[2];
	pid_t parent = getpid();

	if (pipe2(ctl, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0)
		die("pipe2: %s", strerror(errno));
	fflush(NULL);
	ch->pid = fork();
	if (ch->pid < 0)
		die("fork: %s", strerror(errno));
	if (ch->pid == 0) {
		close(ctl[1]);
		close(rep[0]);
		/* Die with the parent; the check closes the race with its exit. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(1);
		pin_self(cpus.cpu_child);
		_exit(fn(arg, rep[1], ctl[0]));
	}
	current_child = ch->pid;
	close(ctl[0]);
	close(rep[1]);
	ch->ctl = ctl[1];
	ch->rep = rep[0];
}

/* Has the child exited? Does not reap it (child_stop does). */
static bool child_gone(const struct child *ch)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)ch->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		return true;
	return si.si_pid == ch->pid;
}

/*
 * Closes ctl (a sleeping child exits at EOF) and reaps the child; with force, kills it
 * first. Returns the child's exit status, or -1 if it did not exit normally.
 */
static int child_stop(struct child *ch, bool force)
{
	int status;

	if (force)
		kill(ch->pid, SIGKILL);
	close(ch->ctl);
	close(ch->rep);
	while (waitpid(ch->pid, &status, 0) < 0) {
		if (errno != EINTR)
			die("waitpid(%d): %s", (int)ch->pid, strerror(errno));
	}
	current_child = 0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* -------------------------------------------------------------------------- */
/* results and the measuring loop                                              */

enum unit { UNIT_GBPS, UNIT_NS, UNIT_US };
static const char *const unit_name[] = { "GB/s", "ns", "us" };

struct result {
	const char *name;    /* JSON name */
	const char *label;   /* table label */
	size_t bytes;        /* payload of one operation; 0: not applicable */
	enum unit unit;
	unsigned per_iter;   /* events in one iteration (a ping-pong round trip: 2) */
	int err;             /* 0, or the errno that made the figure unavailable */
	double median, min, max;
	uint64_t iters;      /* iterations in one repetition */
	bool has_sleeps;     /* wake-ups: sleeps is meaningful */
	double sleeps;       /* median over repetitions of the sleeps per iteration */
};

#define MAX_RESULTS 24
static struct result results[MAX_RESULTS];
static unsigned nresults;

static struct result *result_new(const char *name, const char *label, size_t bytes,
				 enum unit unit, unsigned per_iter)
{
	struct result *r;

	if (nresults == MAX_RESULTS)
		die("too many results");
	r = &results[nresults++];
	*r = (struct result){ .name = name, .label = label, .bytes = bytes,
			      .unit = unit, .per_iter = per_iter };
	return r;
}

/* Runs iters iterations; 0 or a negative errno. */
typedef int (*run_fn)(void *ctx, uint64_t iters);

static double figure(const struct result *r, uint64_t iters, uint64_t ns)
{
	double events = (double)iters * r->per_iter;

	if (ns == 0)
		ns = 1;
	switch (r->unit) {
	case UNIT_GBPS:
		return events * (double)r->bytes / (double)ns;   /* bytes/ns = GB/s */
	case UNIT_NS:
		return (double)ns / events;
	case UNIT_US:
		return (double)ns / events / 1e3;
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int timed(run_fn fn, void *ctx, uint64_t iters, uint64_t *ns)
{
	uint64_t t0 = now_ns();
	int rc = fn(ctx, iters);

	*ns = now_ns() - t0;
	return rc;
}

static double median_of(double *v, unsigned n)
{
	qsort(v, n, sizeof(v[0]), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * Calibrates the iteration count to about opt.rep_ms (the calibration runs also warm
 * caches, TLBs and the peer), then takes the median of opt.reps repetitions. With
 * sleeps, fn leaves there the sleeps per iteration of its last run.
 */
static void measure_sleeps(struct result *r, run_fn fn, void *ctx, const double *sleeps)
{
	const uint64_t target = (uint64_t)opt.rep_ms * 1000000;
	double v[REPS_MAX], sl[REPS_MAX];
	uint64_t iters = 1, ns;
	int rc;

	for (;;) {
		rc = timed(fn, ctx, iters, &ns);
		if (rc < 0)
			goto fail;
		if (ns >= target / 8 || iters >= (UINT64_C(1) << 40))
			break;
		iters *= ns < target / 1000 ? 16 : 2;
	}
	iters = (uint64_t)((double)iters * (double)target / (double)(ns ? ns : 1));
	r->iters = iters ? iters : 1;

	for (unsigned i = 0; i < opt.reps; i++) {
		rc = timed(fn, ctx, r->iters, &ns);
		if (rc < 0)
			goto fail;
		v[i] = figure(r, r->iters, ns);
		sl[i] = sleeps ? *sleeps : 0;
	}
	r->median = median_of(v, opt.reps);
	r->min = v[0];
	r->max = v[opt.reps - 1];
	r->has_sleeps = sleeps != NULL;
	r->sleeps = median_of(sl, opt.reps);
	return;
fail:
	r->err = -rc;
}

static void measure(struct result *r, run_fn fn, void *ctx)
{
	measure_sleeps(r, fn, ctx, NULL);
}

/* -------------------------------------------------------------------------- */
/* memcpy                                                                      */

/* Called through a volatile pointer so that the compiler cannot drop repeated copies. */
static void *(*volatile copy_fn)(void *, const void *, size_t) = memcpy;

struct copy_ctx {
	unsigned char *dst, *src;
	size_t size;
	size_t pool;   /* cold: bytes in each of dst and src; warm: == size */
	size_t off;    /* cold: the next chunk */
};

static int run_memcpy(void *p, uint64_t iters)
{
	struct copy_ctx *c = p;

	for (uint64_t i = 0; i < iters; i++) {
		copy_fn(c->dst + c->off, c->src + c->off, c->size);
		c->off += c->size;
		if (c->off + c->size > c->pool)
			c->off = 0;
	}
	return 0;
}

static void *alloc_touched(size_t size, int fill)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap(%zu): %s", size, strerror(errno));
	memset(p, fill, size);
	return p;
}

/* The last-level cache, from sysfs (what lscpu shows), else from glibc. */
static size_t llc_bytes(void)
{
	FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
	unsigned long v = 0;
	char suffix = 0;

	if (f) {
		if (fscanf(f, "%lu%c", &v, &suffix) < 1)
			v = 0;
		fclose(f);
		if (suffix == 'K')
			v *= KIB;
		else if (suffix == 'M')
			v *= MIB;
	}
	if (v == 0) {
		long s = sysconf(_SC_LEVEL3_CACHE_SIZE);

		v = s > 0 ? (unsigned long)s : 0;
	}
	return v;
}

static size_t cold_pool;

static void bench_memcpy(void)
{
	static const size_t warm_sizes[] = { 4 * KIB, 64 * KIB, MIB };
	static const size_t cold_sizes[] = { 64 * KIB, MIB };
	unsigned char *src = alloc_touched(MIB, 0x5a), *dst = alloc_touched(MIB, 0xa5);

	for (size_t i = 0; i < sizeof(warm_sizes) / sizeof(warm_sizes[0]); i++) {
		struct copy_ctx c = { dst, src, warm_sizes[i], warm_sizes[i], 0 };

		measure(result_new("memcpy_warm", "memcpy, warm", warm_sizes[i], UNIT_GBPS, 1),
			run_memcpy, &c);
	}
	munmap(src, MIB);
	munmap(dst, MIB);

	/* Cold: stream through pools of 4x the last-level cache, in [64, 256] MiB. */
	cold_pool = 4 * llc_bytes();
	if (cold_pool < 64 * MIB)
		cold_pool = 64 * MIB;
	if (cold_pool > 256 * MIB)
		cold_pool = 256 * MIB;
	src = alloc_touched(cold_pool, 0x5a);
	dst = alloc_touched(cold_pool, 0xa5);
	for (size_t i = 0; i < sizeof(cold_sizes) / sizeof(cold_sizes[0]); i++) {
		struct copy_ctx c = { dst, src, cold_sizes[i], cold_pool, 0 };

		measure(result_new("memcpy_cold", "memcpy, cold", cold_sizes[i], UNIT_GBPS, 1),
			run_memcpy, &c);
	}
	munmap(src, cold_pool);
	munmap(dst, cold_pool);
}

/* -------------------------------------------------------------------------- */
/* null system call                                                            */

static int run_syscall(void *p, uint64_t iters)
{
	(void)p;
	for (uint64_t i = 0; i < iters; i++)
		syscall(SYS_getppid);
	return 0;
}

static void bench_syscall(void)
{
	measure(result_new("syscall_null", "null system call (getppid)", 0, UNIT_NS, 1),
		run_syscall, NULL);
}

/* -------------------------------------------------------------------------- */
/* process_vm_writev / process_vm_readv                                         */

#define PVM_BUF MIB

/* Read by the child from its parent to learn whether the reverse direction is allowed. */
static volatile uint64_t pvm_probe_word = UINT64_C(0x736f6674766572);

struct pvm_hello {
	uintptr_t buf;      /* the child's PVM_BUF bytes */
	int reverse_err;    /* child -> parent process_vm_readv: 0 or errno */
};

static struct {
	int forward_err;    /* parent -> child (a descendant): 0 or errno */
	int reverse_err;    /* child -> parent (not a descendant, like two peers) */
} pvm_perm;

static int pvm_child(void *arg, int rep_fd, int ctl_fd)
{
	struct pvm_hello h = { 0, 0 };
	uint64_t word = 0;
	struct iovec local = { &word, sizeof(word) };
	struct iovec remote = { (void *)&pvm_probe_word, sizeof(word) };

	(void)arg;
	h.buf = (uintptr_t)alloc_touched(PVM_BUF, 0x3c);
	errno = 0;
	if (process_vm_readv(getppid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof(word))
		h.reverse_err = errno ? errno : EIO;
	if (!write_all(rep_fd, &h, sizeof(h)))
		return 1;
	sleep_until_eof(ctl_fd);
	return 0;
}

struct pvm_ctx {
	pid_t pid;
	bool write;
	struct iovec local, remote;
};

static int run_pvm(void *p, uint64_t iters)
{
	struct pvm_ctx *c = p;

	for (uint64_t i = 0; i < iters; i++) {
		ssize_t n = c->write
			? process_vm_writev(c->pid, &c->local, 1, &c->remote, 1, 0)
			: process_vm_readv(c->pid, &c->local, 1, &c->remote, 1, 0);

		if (n < 0)
			return -errno;
		if ((size_t)n != c->local.iov_len)
			return -EIO;
	}
	return 0;
}

static void bench_pvm(void)
{
	static const size_t sizes[] = { 4 * KIB, 64 * KIB, MIB };
	struct child ch;
	struct pvm_hello h;
	unsigned char *local = alloc_touched(PVM_BUF, 0x6b);
	struct pvm_ctx c;

	child_start(&ch, pvm_child, NULL);
	if (!read_all(ch.rep, &h, sizeof(h)))
		die("process_vm child: no setup message (exit status %d)", child_stop(&ch, true));
	pvm_perm.reverse_err = h.reverse_err;

	c = (struct pvm_ctx){ .pid = ch.pid, .write = true,
			      .local = { local, 8 }, .remote = { (void *)h.buf, 8 } };
	pvm_perm.forward_err = -run_pvm(&c, 1);

	for (int w = 1; w >= 0; w--) {
		c.write = w;
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			struct result *r = result_new(w ? "process_vm_writev" : "process_vm_readv",
						      w ? "process_vm_writev" : "process_vm_readv",
						      sizes[i], UNIT_GBPS, 1);

			c.local.iov_len = c.remote.iov_len = sizes[i];
			if (pvm_perm.forward_err)
				r->err = pvm_perm.forward_err;
			else
				measure(r, run_pvm, &c);
		}
	}
	for (int w = 1; w >= 0; w--) {
		struct result *r = result_new(w ? "process_vm_writev_call" : "process_vm_readv_call",
					      w ? "process_vm_writev, one call"
						: "process_vm_readv, one call",
					      8, UNIT_NS, 1);

		c.write = w;
		c.local.iov_len = c.remote.iov_len = 8;
		if (pvm_perm.forward_err)
			r->err = pvm_perm.forward_err;
		else
			measure(r, run_pvm, &c);
	}
	if (child_stop(&ch, false) != 0)
		die("process_vm child failed");
	munmap(local, PVM_BUF);
}

/* -------------------------------------------------------------------------- */
/* cache-line ping-pong                                                        */

/*
 * One flag in a MAP_SHARED page; each side spins until the flag says its turn, then
 * hands the turn over. A round trip moves the line twice: one-way = round trip / 2.
 * Acquire/release rather than relaxed: nothing else is published here, but a ring's
 * index hand-off (what this stands for) needs them, and on x86 they cost nothing.
 */
enum { TURN_PARENT, TURN_CHILD, TURN_QUIT };

struct spin_ctx {
	atomic_uint *turn;
	bool yield;          /* one CPU: spinning would wait for a time slice */
	const struct child *ch;
	double sleeps;       /* futex: sleeps per round trip in the last run */
};

static int pingpong_child(void *arg, int rep_fd, int ctl_fd)
{
	struct spin_ctx *c = arg;
	unsigned v;

	(void)rep_fd;
	(void)ctl_fd;
	for (;;) {
		while ((v = atomic_load_explicit(c->turn, memory_order_acquire)) == TURN_PARENT) {
			if (c->yield)
				sched_yield();
		}
		if (v == TURN_QUIT)
			return 0;
		atomic_store_explicit(c->turn, TURN_PARENT, memory_order_release);
	}
}

static int run_pingpong(void *p, uint64_t iters)
{
	struct spin_ctx *c = p;

	for (uint64_t i = 0; i < iters; i++) {
		unsigned spins = 0;
		uint64_t since = 0;

		atomic_store_explicit(c->turn, TURN_CHILD, memory_order_release);
		while (atomic_load_explicit(c->turn, memory_order_acquire) != TURN_PARENT) {
			if (c->yield)
				sched_yield();
			if (++spins < SPINS_PER_CLOCK_CHECK)
				continue;
			spins = 0;
			if (since == 0)
				since = now_ns();
			else if (now_ns() - since > HANDOFF_TIMEOUT_NS)
				return child_gone(c->ch) ? -ECHILD : -ETIMEDOUT;
		}
	}
	return 0;
}

static atomic_uint *shared_word(void)
{
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap(MAP_SHARED): %s", strerror(errno));
	atomic_init((atomic_uint *)p, 0);
	return p;
}

static void bench_pingpong(void)
{
	struct child ch;
	struct spin_ctx c = { shared_word(), cpus.cpu_parent < 0, &ch, 0 };
	struct result *r = result_new("cacheline_oneway", "cache line, one way", 64, UNIT_NS, 2);

	atomic_store(c.turn, TURN_PARENT);
	child_start(&ch, pingpong_child, &c);
	measure(r, run_pingpong, &c);
	atomic_store_explicit(c.turn, TURN_QUIT, memory_order_release);
	if (child_stop(&ch, r->err != 0) != 0 && r->err == 0)
		die("ping-pong child failed");
	munmap((void *)c.turn, 4096);
}

/* -------------------------------------------------------------------------- */
/* wake-up round trips                                                         */

/*
 * Whether a blocking hand-off really slept depends on timing: when the peer answers
 * before the waiter has gone to sleep, read() or FUTEX_WAIT returns at once, and two
 * processes can keep catching each other awake for a long time. Voluntary context
 * switches of both processes tell the two regimes apart: 2 per round trip when each
 * side slept and was woken, near 0 when neither did.
 */
static long voluntary_switches(pid_t pid)
{
	char path[64], line[128];
	long n = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
			break;
	}
	fclose(f);
	return n;
}

static long both_switches(pid_t child)
{
	long a = voluntary_switches(getpid()), b = voluntary_switches(child);

	return a < 0 || b < 0 ? -1 : a + b;
}

static void note_sleeps(double *out, long before, pid_t child, uint64_t iters)
{
	long after = both_switches(child);

	*out = before < 0 || after < 0 ? -1 : (double)(after - before) / (double)iters;
}

/* Interrupted by SIGCHLD or woken by nothing: is the peer still there? */
static int wait_interrupted(const struct child *ch)
{
	return child_gone(ch) ? -ECHILD : 0;
}

struct efd_ctx {
	int req, rep;        /* eventfds: parent -> child, child -> parent */
	const struct child *ch;
	double sleeps;       /* sleeps per round trip in the last run */
};

#define EFD_QUIT UINT64_C(1000)

static int eventfd_child(void *arg, int rep_fd, int ctl_fd)
{
	struct efd_ctx *c = arg;
	uint64_t v, one = 1;

	(void)rep_fd;
	(void)ctl_fd;
	for (;;) {
		if (read(c->req, &v, sizeof(v)) != (ssize_t)sizeof(v)) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (v >= EFD_QUIT)
			return 0;
		if (write(c->rep, &one, sizeof(one)) != (ssize_t)sizeof(one))
			return 1;
	}
}

static int run_eventfd(void *p, uint64_t iters)
{
	struct efd_ctx *c = p;
	uint64_t v, one = 1;
	long before = both_switches(c->ch->pid);

	for (uint64_t i = 0; i < iters; i++) {
		if (write(c->req, &one, sizeof(one)) != (ssize_t)sizeof(one))
			return -errno;
		while (read(c->rep, &v, sizeof(v)) != (ssize_t)sizeof(v)) {
			int rc = errno == EINTR ? wait_interrupted(c->ch) : -errno;

			if (rc < 0)
				return rc;
		}
	}
	note_sleeps(&c->sleeps, before, c->ch->pid, iters);
	return 0;
}

static void bench_eventfd(void)
{
	struct child ch;
	struct efd_ctx c = { eventfd(0, EFD_CLOEXEC), eventfd(0, EFD_CLOEXEC), &ch, 0 };
	struct result *r = result_new("eventfd_wake_rtt", "eventfd wake-up, round trip", 0,
				      UNIT_US, 1);
	uint64_t quit = EFD_QUIT;

	if (c.req < 0 || c.rep < 0)
		die("eventfd: %s", strerror(errno));
	child_start(&ch, eventfd_child, &c);
	measure_sleeps(r, run_eventfd, &c, &c.sleeps);
	if (write(c.req, &quit, sizeof(quit)) != (ssize_t)sizeof(quit))
		r->err = r->err ? r->err : errno;
	if (child_stop(&ch, r->err != 0) != 0 && r->err == 0)
		die("eventfd child failed");
	close(c.req);
	close(c.rep);
}

/* Shared (not _PRIVATE) futex operations: the word lives in a MAP_SHARED page. */
static long futex_wait(atomic_uint *word, unsigned val)
{
	struct timespec ts = { 1, 0 };   /* bounded; the caller looks at the peer */

	return syscall(SYS_futex, (void *)word, FUTEX_WAIT, val, &ts, NULL, 0);
}

static long futex_wake(atomic_uint *word)
{
	return syscall(SYS_futex, (void *)word, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static int futex_child(void *arg, int rep_fd, int ctl_fd)
{
	struct spin_ctx *c = arg;
	unsigned v;

	(void)rep_fd;
	(void)ctl_fd;
	for (;;) {
		while ((v = atomic_load_explicit(c->turn, memory_order_acquire)) == TURN_PARENT)
			futex_wait(c->turn, TURN_PARENT);
		if (v == TURN_QUIT)
			return 0;
		atomic_store_explicit(c->turn, TURN_PARENT, memory_order_release);
		futex_wake(c->turn);
	}
}

static int run_futex(void *p, uint64_t iters)
{
	struct spin_ctx *c = p;
	long before = both_switches(c->ch->pid);

	for (uint64_t i = 0; i < iters; i++) {
		uint64_t since = 0;

		atomic_store_explicit(c->turn, TURN_CHILD, memory_order_release);
		if (futex_wake(c->turn) < 0)
			return -errno;
		while (atomic_load_explicit(c->turn, memory_order_acquire) == TURN_CHILD) {
			if (futex_wait(c->turn, TURN_CHILD) == 0 || errno == EAGAIN)
				continue;
			if (errno != EINTR && errno != ETIMEDOUT)
				return -errno;
			if (wait_interrupted(c->ch) < 0)
				return -ECHILD;
			if (since == 0)
				since = now_ns();
			else if (now_ns() - since > HANDOFF_TIMEOUT_NS)
				return -ETIMEDOUT;
		}
	}
	note_sleeps(&c->sleeps, before, c->ch->pid, iters);
	return 0;
}

static void bench_futex(void)
{
	struct child ch;
	struct spin_ctx c = { shared_word(), false, &ch, 0 };
	struct result *r = result_new("futex_wake_rtt", "futex wake-up, round trip", 0,
				      UNIT_US, 1);

	atomic_store(c.turn, TURN_PARENT);
	child_start(&ch, futex_child, &c);
	measure_sleeps(r, run_futex, &c, &c.sleeps);
	atomic_store_explicit(c.turn, TURN_QUIT, memory_order_release);
	futex_wake(c.turn);
	if (child_stop(&ch, r->err != 0) != 0 && r->err == 0)
		die("futex child failed");
	munmap((void *)c.turn, 4096);
}

/* -------------------------------------------------------------------------- */
/* output                                                                      */

static char command[1024];
static char date_utc[32];
static struct utsname uts;

static void describe_run(int argc, char **argv)
{
	size_t len = 0;
	time_t t = time(NULL);
	struct tm tm;

	for (int i = 0; i < argc && len < sizeof(command); i++) {
		int n = snprintf(command + len, sizeof(command) - len, "%s%s", i ? " " : "",
				 argv[i]);

		if (n < 0)
			break;
		len += (size_t)n;
	}
	gmtime_r(&t, &tm);
	strftime(date_utc, sizeof(date_utc), "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (uname(&uts) < 0)
		memset(&uts, 0, sizeof(uts));
}

static const char *size_str(size_t bytes, char *buf, size_t len)
{
	if (bytes == 0)
		snprintf(buf, len, "-");
	else if (bytes >= MIB && bytes % MIB == 0)
		snprintf(buf, len, "%zu MiB", bytes / MIB);
	else if (bytes >= KIB && bytes % KIB == 0)
		snprintf(buf, len, "%zu KiB", bytes / KIB);
	else
		snprintf(buf, len, "%zu B", bytes);
	return buf;
}

static const char *err_str(int err)
{
	switch (err) {
	case ECHILD:
		return "the peer process died";
	case ETIMEDOUT:
		return "the peer stopped answering";
	default:
		return strerror(err);
	}
}

static const char *perm_str(int err)
{
	return err ? strerror(err) : "permitted";
}

static const char *yama_scope(void)
{
	static char buf[16];
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");

	if (!f)
		return "absent";
	if (!fgets(buf, sizeof(buf), f))
		snprintf(buf, sizeof(buf), "?");
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	return buf;
}

static void print_table(FILE *f)
{
	char cpu_note[64];

	if (cpus.cpu_parent >= 0)
		snprintf(cpu_note, sizeof(cpu_note), "parent on CPU %d, children on CPU %d",
			 cpus.cpu_parent, cpus.cpu_child);
	else
		snprintf(cpu_note, sizeof(cpu_note), "one CPU: not pinned, spinning yields");
	fprintf(f, "softverbs baselines: %s\n", command);
	fprintf(f, "%s, %s %s, nproc %d, %s\n", date_utc, uts.sysname, uts.release,
		cpus.navail, cpu_note);
	fprintf(f, "median of %u repetitions of ~%u ms (min and max beside it); "
		"GB/s = 1e9 bytes/s", opt.reps, opt.rep_ms);
	if (opt.groups & GROUP_MEMCPY)
		fprintf(f, "; cold = streaming through %zu MiB", cold_pool / MIB);
	fprintf(f, "\n\n");
	fprintf(f, "%-32s %8s %10s %10s %10s  %s\n", "baseline", "size", "median", "min",
		"max", "unit");
	for (unsigned i = 0; i < nresults; i++) {
		const struct result *r = &results[i];
		const char *fmt = r->unit == UNIT_NS ? "%10.1f" : "%10.2f";
		char sz[32];

		fprintf(f, "%-32s %8s ", r->label, size_str(r->bytes, sz, sizeof(sz)));
		if (r->err) {
			fprintf(f, "unavailable: %s\n", err_str(r->err));
			continue;
		}
		fprintf(f, fmt, r->median);
		fputc(' ', f);
		fprintf(f, fmt, r->min);
		fputc(' ', f);
		fprintf(f, fmt, r->max);
		fprintf(f, "  %s", r->unit == UNIT_US ? "µs" : unit_name[r->unit]);
		if (r->has_sleeps && r->sleeps >= 0)
			fprintf(f, "  (%.2f sleeps per round trip)", r->sleeps);
		fputc('\n', f);
	}
	if (opt.groups & GROUP_PVM)
		fprintf(f, "\nprocess_vm_readv/writev: parent -> child %s; child -> parent "
			"(not a descendant, as between two peers) %s; yama ptrace_scope %s\n",
			perm_str(pvm_perm.forward_err), perm_str(pvm_perm.reverse_err),
			yama_scope());
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void print_json(FILE *f)
{
	fprintf(f, "{\n  \"program\": \"softverbs bench/baselines\",\n  \"command\": ");
	json_str(f, command);
	fprintf(f, ",\n  \"date\": \"%s\",\n  \"kernel\": ", date_utc);
	json_str(f, uts.release);
	fprintf(f, ",\n  \"nproc\": %d,\n", cpus.navail);
	if (cpus.cpu_parent >= 0)
		fprintf(f, "  \"cpu_parent\": %d,\n  \"cpu_child\": %d,\n", cpus.cpu_parent,
			cpus.cpu_child);
	else
		fprintf(f, "  \"cpu_parent\": null,\n  \"cpu_child\": null,\n");
	fprintf(f, "  \"reps\": %u,\n  \"rep_ms\": %u,\n", opt.reps, opt.rep_ms);
	if (opt.groups & GROUP_MEMCPY)
		fprintf(f, "  \"cold_pool_bytes\": %zu,\n", cold_pool);
	if (opt.groups & GROUP_PVM) {
		fprintf(f, "  \"process_vm_parent_to_child\": ");
		json_str(f, perm_str(pvm_perm.forward_err));
		fprintf(f, ",\n  \"process_vm_child_to_parent\": ");
		json_str(f, perm_str(pvm_perm.reverse_err));
		fprintf(f, ",\n  \"yama_ptrace_scope\": ");
		json_str(f, yama_scope());
		fprintf(f, ",\n");
	}
	fprintf(f, "  \"results\": [\n");
	for (unsigned i = 0; i < nresults; i++) {
		const struct result *r = &results[i];

		fprintf(f, "    {\"name\": \"%s\", \"bytes\": %zu, \"unit\": \"%s\", ", r->name,
			r->bytes, unit_name[r->unit]);
		if (r->err) {
			fprintf(f, "\"status\": \"unavailable\", \"error\": ");
			json_str(f, err_str(r->err));
		} else {
			fprintf(f, "\"status\": \"ok\", \"median\": %.6g, \"min\": %.6g, "
				"\"max\": %.6g, \"iters\": %" PRIu64, r->median, r->min, r->max,
				r->iters);
			if (r->has_sleeps)
				fprintf(f, ", \"sleeps_per_iter\": %.4g", r->sleeps);
		}
		fprintf(f, "}%s\n", i + 1 < nresults ? "," : "");
	}
	fprintf(f, "  ]\n}\n");
}

/* -------------------------------------------------------------------------- */

static unsigned parse_uint(const char *opt_name, const char *s, unsigned lo, unsigned hi)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = s ? strtoul(s, &end, 10) : 0;
	if (!s || errno || *end || end == s || v < lo || v > hi) {
		fprintf(stderr, "baselines: %s wants a number in %u..%u (see --help)\n",
			opt_name, lo, hi);
		exit(2);
	}
	return (unsigned)v;
}

static unsigned parse_groups(const char *list)
{
	unsigned bits = 0;
	const char *p = list;

	while (*p) {
		size_t len = strcspn(p, ",");
		size_t g;

		for (g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
			if (strlen(groups[g].name) == len && !strncmp(p, groups[g].name, len))
				break;
		}
		if (g == sizeof(groups) / sizeof(groups[0])) {
			fprintf(stderr, "baselines: --only: unknown group in '%s' (see --help)\n",
				list);
			exit(2);
		}
		bits |= groups[g].bit;
		p += len;
		if (*p == ',')
			p++;
	}
	if (!bits) {
		fprintf(stderr, "baselines: --only wants at least one group (see --help)\n");
		exit(2);
	}
	return bits;
}

static void parse_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage_text, stdout);
			exit(0);
		} else if (!strcmp(a, "--json")) {
			opt.json = true;
		} else if (!strcmp(a, "--json-file") && i + 1 < argc) {
			opt.json_file = argv[++i];
		} else if (!strcmp(a, "--reps")) {
			opt.reps = parse_uint(a, i + 1 < argc ? argv[++i] : NULL, 3, REPS_MAX);
		} else if (!strcmp(a, "--only") && i + 1 < argc) {
			opt.groups = parse_groups(argv[++i]);
		} else if (!strcmp(a, "--rep-ms")) {
			opt.rep_ms = parse_uint(a, i + 1 < argc ? argv[++i] : NULL, REP_MS_MIN,
						REP_MS_MAX);
		} else {
			fprintf(stderr, "baselines: unknown or incomplete option '%s' (see --help)\n",
				a);
			exit(2);
		}
	}
}

int main(int argc, char **argv)
{
	unsigned figures = 0;
	int unavailable = 0;

	opt.groups = GROUP_ALL;
	parse_args(argc, argv);
	for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++)
		figures += opt.groups & groups[g].bit ? groups[g].figures : 0;
	/* Each figure lasts about reps + 1 repetitions; triple that, plus setup. */
	install_signals(30 + 3 * figures * (opt.reps + 1) * opt.rep_ms / 1000);
	describe_run(argc, argv);
	cpus_init();

	if (opt.groups & GROUP_MEMCPY)
		bench_memcpy();
	if (opt.groups & GROUP_SYSCALL)
		bench_syscall();
	if (opt.groups & GROUP_PVM)
		bench_pvm();
	if (opt.groups & GROUP_CACHELINE)
		bench_pingpong();
	if (opt.groups & GROUP_WAKEUP) {
		bench_eventfd();
		bench_futex();
	}
	alarm(0);

	if (opt.json)
		print_json(stdout);
	else
		print_table(stdout);
	if (opt.json_file) {
		FILE *f = fopen(opt.json_file, "w");

		if (!f)
			die("%s: %s", opt.json_file, strerror(errno));
		print_json(f);
		if (fclose(f) != 0)
			die("%s: %s", opt.json_file, strerror(errno));
	}
	for (unsigned i = 0; i < nresults; i++)
		unavailable |= results[i].err != 0;
	return unavailable ? 1 : 0;
}
