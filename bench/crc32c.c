/*
 * bench/crc32c.c — CRC32c (MPA's CRC, RFC 5044 §4.1) three ways on this machine, so that
 * the iWARP wire's choice (ISA-L, src/wire/iwarp/iw_crc.c) is measured, not assumed:
 *
 *   isal      ISA-L's crc32_iscsi (Debian libisal; it picks its best code for the CPU at
 *             run time: PCLMULQDQ folding, AVX-512 where there is one)
 *   sse42     the SSE4.2 crc32 instruction, 8 bytes a step
 *             (__builtin_ia32_crc32di), one dependency chain
 *   table     a plain table-driven loop, one byte a step (256-entry table)
 *
 * at 64 B, 4 KiB and 64 KiB (one buffer, warm in cache: the CRC's own cost). Every figure
 * is the median of --reps repetitions; each repetition runs an iteration count calibrated
 * to last about --rep-ms. GB/s means 10^9 bytes per second. Each way's result is checked
 * against the others (and RFC 3720 B.4's 32 zero bytes) before anything is timed.
 *
 * Build and run:
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -o /tmp/crc32c bench/crc32c.c -lisal
 *   /tmp/crc32c [--reps N] [--rep-ms MS]
 */
#include <isa-l/crc.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint32_t table[256];

static void table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1; /* reflected Castagnoli */
		table[i] = c;
	}
}

/* The three take and return the register (no inversions), like crc32_iscsi. */
static uint32_t crc_table(const unsigned char *p, size_t n, uint32_t crc)
{
	while (n--)
		crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(const unsigned char *p, size_t n,
							      uint32_t crc)
{
	uint64_t c = crc;

	for (; n >= 8; n -= 8, p += 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
	}
	crc = (uint32_t)c;
	while (n--)
		crc = __builtin_ia32_crc32qi(crc, *p++);
	return crc;
}

static uint32_t crc_isal(const unsigned char *p, size_t n, uint32_t crc)
{
	return crc32_iscsi((unsigned char *)p, (int)n, crc);
}

typedef uint32_t (*crc_fn)(const unsigned char *, size_t, uint32_t);

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile uint32_t sink;

static double run(crc_fn f, const unsigned char *buf, size_t n, long iters)
{
	double t0 = now();
	uint32_t c = 0xffffffffu;

	for (long i = 0; i < iters; i++)
		c = f(buf, n, c);
	sink = c;
	return now() - t0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	static const struct { const char *name; crc_fn f; } ways[] = {
		{ "isal", crc_isal }, { "sse42", crc_sse42 }, { "table", crc_table },
	};
	static const size_t sizes[] = { 64, 4096, 65536 };
	int reps = 7, rep_ms = 200;
	unsigned char *buf;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--rep-ms") && i + 1 < argc)
			rep_ms = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--reps N] [--rep-ms MS]\n", argv[0]);
			return 2;
		}
	}
	if (reps < 1 || reps > 101 || rep_ms < 1)
		return 2;
	table_init();
	buf = aligned_alloc(64, 65536 + 64);
	if (!buf)
		return 1;
	memset(buf, 0, 32);
	for (size_t w = 0; w < 3; w++) {
		if (~ways[w].f(buf, 32, 0xffffffffu) != 0x8a9136aau) {
			fprintf(stderr, "%s: wrong CRC of 32 zero bytes\n", ways[w].name);
			return 1;
		}
	}
	for (size_t i = 0; i < 65536 + 64; i++)
		buf[i] = (unsigned char)(i * 2654435761u >> 13);
	for (size_t len = 1; len < 300; len += 7)
		for (size_t w = 1; w < 3; w++)
			if (ways[w].f(buf + 3, len, 0xffffffffu) != crc_isal(buf + 3, len, 0xffffffffu)) {
				fprintf(stderr, "%s disagrees with isal at %zu bytes\n",
					ways[w].name, len);
				return 1;
			}

	printf("%-6s %10s %10s %10s   (GB/s, median of %d x ~%d ms)\n", "", "64 B", "4 KiB",
	       "64 KiB", reps, rep_ms);
	for (size_t w = 0; w < 3; w++) {
		printf("%-6s", ways[w].name);
		for (size_t s = 0; s < 3; s++) {
			size_t n = sizes[s];
			long iters = 1;
			double t[101];

			while (run(ways[w].f, buf, n, iters) < rep_ms * 1e-3 / 8)
				iters *= 2;
			iters *= 8;
			for (int r = 0; r < reps; r++)
				t[r] = run(ways[w].f, buf, n, iters);
			qsort(t, (size_t)reps, sizeof(t[0]), cmp_double);
			printf(" %10.2f", (double)n * (double)iters / t[reps / 2] / 1e9);
		}
		printf("\n");
	}
	free(buf);
	return 0;
}
