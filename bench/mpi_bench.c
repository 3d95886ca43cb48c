/* bench/mpi_bench.c — a small MPI benchmark: ping-pong latency and bandwidth, and the
 * bus bandwidth of MPI_Allreduce and MPI_Allgather, by message size.
 *
 * MPI only (any MPI-3 library: built with mpicc.openmpi and mpicc.mpich). bench/mpi.sh
 * compiles it into its output directory and runs it over several transports.
 *
 * Figures (rank 0 prints one TSV line per test and size):
 *   pingpong   ranks 0 and 1 (the others wait): MPI_Send / MPI_Recv of `bytes` there and
 *              back; usec = half the round trip (one-way latency); GB/s = bytes / usec.
 *   allreduce  MPI_FLOAT, MPI_SUM; bytes = the buffer of one rank (count × 4), as
 *              nccl-tests' all_reduce_perf; algbw = bytes / time,
 *              busbw = algbw × 2(n−1)/n.
 *   allgather  MPI_BYTE; bytes = the whole buffer each rank receives (n × the part it
 *              sends), as nccl-tests' all_gather_perf; algbw = bytes / time,
 *              busbw = algbw × (n−1)/n.
 * The time of a collective is that of the slowest rank (MPI_MAX over ranks) for one
 * call. Each size runs `repeats` times `iters` operations after a warm-up; usec is the
 * median over the repeats of the time per operation, with the minimum and the mean
 * beside it; the bandwidths come from the median. `iters` moves about 64 MiB (16 with
 * --quick) per repeat, 10..2000 operations, fewer when the timed warm-up shows that a
 * repeat would last more than --repeat-ms (an oversubscribed host).
 *
 * Before it is timed, every size is checked once: the ping-pong's bytes arrive on both
 * sides as sent, the all-reduce's sums are exact (small integers in floats), and every
 * part of the all-gather is the one its rank sent. A wrong result ends the run with
 * MPI_Abort (exit status 3) before any figure of that size is printed.
 */
#include <mpi.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TEST_PINGPONG = 1, TEST_ALLREDUCE = 2, TEST_ALLGATHER = 4 };
enum { MAX_REPEATS = 31, TAG_PING = 1, TAG_PONG = 2 };

struct opts {
	size_t min_bytes;
	size_t max_bytes;
	unsigned factor;      /* sizes grow by this factor: 2 or 4 */
	unsigned tests;       /* TEST_* bits */
	unsigned repeats;
	size_t budget;        /* bytes moved per repeat, which sets the iterations */
	unsigned min_iters;
	unsigned max_iters;
	double repeat_s;      /* and at most this long per repeat (above min_iters) */
	const char *out_path; /* NULL: stdout */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: mpirun ... mpi_bench [--tests LIST] [--min-size B] [--max-size B]\n"
		"                  [--factor 2|4] [--repeats R] [--quick] [--out FILE]\n"
		"\n"
		"Ping-pong latency and bandwidth (ranks 0 and 1), MPI_Allreduce (MPI_FLOAT sum)\n"
		"and MPI_Allgather bus bandwidth by size, as nccl-tests compute it:\n"
		"  algbw = bytes / time\n"
		"  allreduce: bytes = one rank's buffer;         busbw = algbw * 2(n-1)/n\n"
		"  allgather: bytes = the whole received buffer; busbw = algbw * (n-1)/n\n"
		"  pingpong:  usec = half the round trip;        GB/s  = bytes / usec\n"
		"Every size is checked once (sums, bytes) before it is timed; a wrong result\n"
		"aborts the run (exit status 3). Times: median over R repeats of the time per\n"
		"operation (slowest rank for collectives), with the minimum and the mean.\n"
		"\n"
		"options:\n"
		"  --tests LIST     comma-separated: pingpong,allreduce,allgather (default all)\n"
		"  --min-size B     smallest message in bytes (default 1; allreduce starts at 4)\n"
		"  --max-size B     largest message in bytes (default 4194304)\n"
		"  --factor F       sizes grow by 2 or 4 (default 2; 4 with --quick)\n"
		"  --repeats R      timed repeats per size, 1..%d (default 5; 3 with --quick)\n"
		"  --repeat-ms MS   a repeat lasts about MS ms at most (default 200; 50 with\n"
		"                   --quick): fewer iterations when operations are slow\n"
		"  --quick          factor 4, 3 repeats, a quarter of the iterations\n"
		"  --out FILE       rank 0 writes the TSV to FILE instead of stdout\n"
		"  -h, --help       this text (printed without starting MPI)\n"
		"\n"
		"output (TSV; '#' lines are comments, then a header line):\n"
		"  test np bytes iters usec usec_min usec_mean algbw_GBps busbw_GBps\n"
		"  (GB = 1e9 bytes; for pingpong both bandwidth columns hold bytes/usec)\n",
		MAX_REPEATS);
}

static int parse_size(const char *s, size_t *v)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (errno || end == s || *end || x == 0 || x > (1ull << 30))
		return -1;
	*v = (size_t)x;
	return 0;
}

static int parse_tests(const char *s, unsigned *tests)
{
	char buf[128];
	if (strlen(s) >= sizeof(buf))
		return -1;
	strcpy(buf, s);
	*tests = 0;
	for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
		if (!strcmp(t, "pingpong"))
			*tests |= TEST_PINGPONG;
		else if (!strcmp(t, "allreduce"))
			*tests |= TEST_ALLREDUCE;
		else if (!strcmp(t, "allgather"))
			*tests |= TEST_ALLGATHER;
		else
			return -1;
	}
	return *tests ? 0 : -1;
}

/* 0: run; 1: --help printed; -1: bad usage (message printed). */
static int parse_opts(int argc, char **argv, struct opts *o)
{
	int quick = 0, factor_set = 0, repeats_set = 0, repeat_ms_set = 0;
	*o = (struct opts){ .min_bytes = 1, .max_bytes = 4u << 20, .factor = 2,
			    .tests = TEST_PINGPONG | TEST_ALLREDUCE | TEST_ALLGATHER,
			    .repeats = 5, .budget = 64u << 20, .min_iters = 10,
			    .max_iters = 2000, .repeat_s = 0.2 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 1;
		} else if (!strcmp(a, "--quick")) {
			quick = 1;
			continue;
		}
		if (!v) {
			fprintf(stderr, "mpi_bench: %s needs a value (see --help)\n", a);
			return -1;
		}
		i++;
		if (!strcmp(a, "--tests")) {
			if (parse_tests(v, &o->tests))
				goto bad;
		} else if (!strcmp(a, "--min-size")) {
			if (parse_size(v, &o->min_bytes))
				goto bad;
		} else if (!strcmp(a, "--max-size")) {
			if (parse_size(v, &o->max_bytes))
				goto bad;
		} else if (!strcmp(a, "--factor")) {
			if (strcmp(v, "2") && strcmp(v, "4"))
				goto bad;
			o->factor = (unsigned)atoi(v);
			factor_set = 1;
		} else if (!strcmp(a, "--repeats")) {
			int r = atoi(v);
			if (r < 1 || r > MAX_REPEATS)
				goto bad;
			o->repeats = (unsigned)r;
			repeats_set = 1;
		} else if (!strcmp(a, "--repeat-ms")) {
			int ms = atoi(v);
			if (ms < 1 || ms > 10000)
				goto bad;
			o->repeat_s = ms / 1e3;
			repeat_ms_set = 1;
		} else if (!strcmp(a, "--out")) {
			o->out_path = v;
		} else {
			fprintf(stderr, "mpi_bench: unknown option '%s' (see --help)\n", a);
			return -1;
		}
		continue;
bad:
		fprintf(stderr, "mpi_bench: bad value '%s' for %s (see --help)\n", v, a);
		return -1;
	}
	if (quick) {
		if (!factor_set)
			o->factor = 4;
		if (!repeats_set)
			o->repeats = 3;
		if (!repeat_ms_set)
			o->repeat_s = 0.05;
		o->budget /= 4;
		o->max_iters /= 4;
		o->min_iters = 5;
	}
	if (o->min_bytes > o->max_bytes) {
		fprintf(stderr, "mpi_bench: --min-size is larger than --max-size\n");
		return -1;
	}
	return 0;
}

/* Operations per repeat: about `budget` bytes moved, within [min_iters, max_iters]. */
static unsigned iters_for(const struct opts *o, size_t bytes)
{
	size_t n = o->budget / bytes;
	if (n < o->min_iters)
		n = o->min_iters;
	if (n > o->max_iters)
		n = o->max_iters;
	return (unsigned)n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct stats {
	double med, min, mean; /* seconds per operation */
};

static struct stats stats_of(double *t, unsigned n)
{
	struct stats s = { 0, 0, 0 };
	for (unsigned i = 0; i < n; i++)
		s.mean += t[i];
	s.mean /= n;
	qsort(t, n, sizeof(*t), cmp_double);
	s.min = t[0];
	s.med = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
	return s;
}

static void fail(const char *test, size_t bytes, const char *what, size_t at, double got,
		 double want)
{
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	fprintf(stderr,
		"mpi_bench: rank %d: %s %zu B: WRONG RESULT: %s at element %zu: got %g, want %g\n",
		rank, test, bytes, what, at, got, want);
	MPI_Abort(MPI_COMM_WORLD, 3);
}

/* The byte a message of `bytes` from `rank` holds at `i`: changes with the size, so a
 * buffer left over from the previous size does not pass the check. */
static unsigned char pattern(int rank, size_t bytes, size_t i)
{
	return (unsigned char)(rank * 37 + i * 7 + bytes * 13 + 1);
}

static void check_bytes(const char *test, const unsigned char *buf, int rank, size_t bytes,
			size_t off, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char want = pattern(rank, bytes, off + i);
		if (buf[i] != want)
			fail(test, bytes, "byte", off + i, buf[i], want);
	}
}

struct ctx {
	const struct opts *o;
	FILE *out;
	int rank, np;
	unsigned char *a, *b; /* max_bytes each */
};

static void print_line(struct ctx *c, const char *test, size_t bytes, unsigned iters,
		       double *t, double bus_factor)
{
	if (c->rank)
		return;
	struct stats s = stats_of(t, c->o->repeats);
	double algbw = (double)bytes / s.med / 1e9;
	fprintf(c->out, "%s\t%d\t%zu\t%u\t%.3f\t%.3f\t%.3f\t%.6g\t%.6g\n", test, c->np, bytes,
		iters, s.med * 1e6, s.min * 1e6, s.mean * 1e6, algbw, algbw * bus_factor);
	fflush(c->out);
}

typedef void (*op_fn)(struct ctx *c, size_t arg);

/* Times `iters` calls of op; returns the slowest rank's time per call. */
static double time_coll(struct ctx *c, op_fn op, size_t count, unsigned iters)
{
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	for (unsigned i = 0; i < iters; i++)
		op(c, count);
	double mine = (MPI_Wtime() - t0) / iters, slowest;
	MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return slowest;
}

/* The warm-up, timed: a few calls of op tell how long one takes (the slowest rank's
 * time: every rank must run the same number of calls), so that a repeat of slow
 * operations (an oversubscribed host) stays near repeat_s. Returns the iterations. */
static unsigned warm_up(struct ctx *c, op_fn op, size_t arg, unsigned iters)
{
	unsigned n = iters / 10 < 2 ? 2 : iters / 10 > 20 ? 20 : iters / 10;
	double slowest;

	op(c, arg);
	slowest = time_coll(c, op, arg, n);
	if (slowest * iters > c->o->repeat_s) {
		double fit = c->o->repeat_s / slowest;
		iters = fit < c->o->min_iters ? c->o->min_iters : (unsigned)fit;
	}
	return iters;
}

/* One round trip between ranks 0 and 1; other ranks do nothing. */
static void pingpong_once(struct ctx *c, size_t bytes)
{
	if (c->rank == 0) {
		MPI_Send(c->a, (int)bytes, MPI_BYTE, 1, TAG_PING, MPI_COMM_WORLD);
		MPI_Recv(c->b, (int)bytes, MPI_BYTE, 1, TAG_PONG, MPI_COMM_WORLD,
			 MPI_STATUS_IGNORE);
	} else if (c->rank == 1) {
		MPI_Recv(c->b, (int)bytes, MPI_BYTE, 0, TAG_PING, MPI_COMM_WORLD,
			 MPI_STATUS_IGNORE);
		MPI_Send(c->b, (int)bytes, MPI_BYTE, 0, TAG_PONG, MPI_COMM_WORLD);
	}
}

static void run_pingpong(struct ctx *c, size_t bytes)
{
	unsigned iters = iters_for(c->o, 2 * bytes);
	double t[MAX_REPEATS];

	/* Check: rank 0 sends its pattern, rank 1 checks and echoes it, rank 0 checks. */
	if (c->rank == 0)
		for (size_t i = 0; i < bytes; i++)
			c->a[i] = pattern(0, bytes, i);
	memset(c->b, 0, bytes);
	pingpong_once(c, bytes);
	if (c->rank <= 1)
		check_bytes("pingpong", c->b, 0, bytes, 0, bytes);

	iters = warm_up(c, pingpong_once, bytes, iters);
	for (unsigned r = 0; r < c->o->repeats; r++) {
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (unsigned i = 0; i < iters; i++)
			pingpong_once(c, bytes);
		t[r] = (MPI_Wtime() - t0) / iters / 2; /* one way */
	}
	/* Rank 0's clock measured the round trips; the others only waited. */
	print_line(c, "pingpong", bytes, iters, t, 1.0);
}


static void allreduce_op(struct ctx *c, size_t count)
{
	MPI_Allreduce(c->a, c->b, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static void run_allreduce(struct ctx *c, size_t bytes)
{
	size_t count = bytes / sizeof(float);
	if (!count)
		return;
	bytes = count * sizeof(float);
	unsigned iters = iters_for(c->o, 2 * bytes);
	float *in = (float *)c->a, *res = (float *)c->b;
	double t[MAX_REPEATS];

	/* Element i of rank r is r + 1 + i % 8: the sum, n(n+1)/2 + n (i % 8), is a small
	 * integer, exact in a float whatever order the library adds in. */
	for (size_t i = 0; i < count; i++)
		in[i] = (float)(c->rank + 1 + (int)(i % 8));
	for (size_t i = 0; i < count; i++)
		res[i] = -1.0f;
	allreduce_op(c, count);
	for (size_t i = 0; i < count; i++) {
		float want = (float)(c->np * (c->np + 1) / 2 + c->np * (int)(i % 8));
		if (res[i] != want)
			fail("allreduce", bytes, "sum", i, res[i], want);
	}

	iters = warm_up(c, allreduce_op, count, iters);
	for (unsigned r = 0; r < c->o->repeats; r++)
		t[r] = time_coll(c, allreduce_op, count, iters);
	print_line(c, "allreduce", bytes, iters, t, 2.0 * (c->np - 1) / c->np);
}

/* count = the part each rank sends; it sends the start of a, receives into b. */
static void allgather_op(struct ctx *c, size_t count)
{
	MPI_Allgather(c->a, (int)count, MPI_BYTE, c->b, (int)count, MPI_BYTE, MPI_COMM_WORLD);
}

static void run_allgather(struct ctx *c, size_t bytes)
{
	size_t part = bytes / (size_t)c->np;
	if (!part)
		return;
	bytes = part * (size_t)c->np; /* what each rank receives, as nccl-tests count */
	unsigned iters = iters_for(c->o, bytes);
	double t[MAX_REPEATS];

	for (size_t i = 0; i < part; i++)
		c->a[i] = pattern(c->rank, bytes, i);
	memset(c->b, 0, bytes);
	allgather_op(c, part);
	for (int r = 0; r < c->np; r++)
		check_bytes("allgather", c->b + (size_t)r * part, r, bytes, 0, part);

	iters = warm_up(c, allgather_op, part, iters);
	for (unsigned r = 0; r < c->o->repeats; r++)
		t[r] = time_coll(c, allgather_op, part, iters);
	print_line(c, "allgather", bytes, iters, t, (double)(c->np - 1) / c->np);
}

int main(int argc, char **argv)
{
	struct opts o;
	int rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc > 0 ? 0 : 2;

	MPI_Init(&argc, &argv);
	struct ctx c = { .o = &o, .out = stdout };
	MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &c.np);

	if ((o.tests & TEST_PINGPONG) && c.np < 2) {
		if (!c.rank)
			fprintf(stderr, "mpi_bench: pingpong needs at least 2 ranks\n");
		MPI_Finalize();
		return 2;
	}
	c.a = malloc(o.max_bytes);
	c.b = malloc(o.max_bytes);
	if (!c.a || !c.b) {
		fprintf(stderr, "mpi_bench: rank %d: out of memory\n", c.rank);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (!c.rank && o.out_path) {
		c.out = fopen(o.out_path, "w");
		if (!c.out) {
			fprintf(stderr, "mpi_bench: %s: %s\n", o.out_path, strerror(errno));
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
	}
	if (!c.rank) {
		char lib[MPI_MAX_LIBRARY_VERSION_STRING];
		int len;
		MPI_Get_library_version(lib, &len);
		char *nl = strchr(lib, '\n');
		if (nl)
			*nl = '\0';
		fprintf(c.out, "# mpi_bench: np %d, sizes %zu..%zu x%u, %u repeats\n", c.np,
			o.min_bytes, o.max_bytes, o.factor, o.repeats);
		fprintf(c.out, "# library: %s\n", lib);
		fprintf(c.out, "test\tnp\tbytes\titers\tusec\tusec_min\tusec_mean\t"
			       "algbw_GBps\tbusbw_GBps\n");
	}

	static const struct {
		unsigned bit;
		void (*run)(struct ctx *, size_t);
	} tests[] = { { TEST_PINGPONG, run_pingpong },
		      { TEST_ALLREDUCE, run_allreduce },
		      { TEST_ALLGATHER, run_allgather } };
	for (size_t k = 0; k < sizeof(tests) / sizeof(tests[0]); k++) {
		if (!(o.tests & tests[k].bit))
			continue;
		for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
			tests[k].run(&c, bytes);
			if (bytes > o.max_bytes / o.factor)
				break;
		}
	}

	if (!c.rank && c.out != stdout && fclose(c.out)) {
		fprintf(stderr, "mpi_bench: %s: %s\n", o.out_path, strerror(errno));
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	free(c.a);
	free(c.b);
	MPI_Finalize();
	return 0;
}
