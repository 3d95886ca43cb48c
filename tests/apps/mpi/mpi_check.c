/* mpi_check: MPI operations whose results are checked, for the stacks tests
 * (tests/apps/test_mpi.sh). Any MPI over any transport; the test chooses softverbs.
 *
 *   ping-pong   every pair of ranks (one round per XOR distance), sizes 1 B to 4 MiB:
 *               each side verifies every byte of the pattern the other wrote
 *   allreduce   a scalar sum (n(n+1)/2) and a 2 MiB vector of int64 sums
 *   allgather   each rank's block of ints, small and 1 MiB, in rank order
 *   bcast       a 1 MiB pattern from rank 0 and from the last rank
 *
 * Rank 0 prints one "mpi_check: ... ok" line per operation that passed everywhere;
 * any rank that sees a difference prints where and what ("rank R: ... differs ...")
 * and the program exits 1. --corrupt flips one received byte on rank 1 (the test's
 * proof that the checks can fail).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZE (4u << 20)

static int rank, nranks, corrupt;

/* The byte at offset i of a message written by rank `from` in round `tag`. */
static uint8_t pattern(size_t i, int from, int tag)
{
	return (uint8_t)(i * 31u + (size_t)from * 7u + (size_t)tag * 13u + (i >> 8));
}

static void fill(uint8_t *buf, size_t len, int from, int tag)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pattern(i, from, tag);
}

/* Counts the bytes that differ; prints the first. */
static long verify(const char *what, const uint8_t *buf, size_t len, int from, int tag)
{
	long bad = 0;

	for (size_t i = 0; i < len; i++) {
		uint8_t want = pattern(i, from, tag);

		if (buf[i] != want && bad++ == 0)
			printf("rank %d: %s (%zu B from rank %d) differs at byte %zu: got 0x%02x, expected 0x%02x\n",
			       rank, what, len, from, i, buf[i], want);
	}
	if (bad > 1)
		printf("rank %d: %s (%zu B from rank %d): %ld bytes differ\n", rank, what, len, from,
		       bad);
	return bad;
}

/* Every rank's error count summed: each operation passes or fails everywhere. */
static long total(long errors)
{
	long sum = 0;

	MPI_Allreduce(&errors, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	return sum;
}

static long pingpong(uint8_t *sbuf, uint8_t *rbuf)
{
	static const size_t odd[] = { 3, 4099, 65537, 1048583 };
	size_t sizes[64];
	int nsizes = 0;
	long errors = 0;
	int pairs = 0;

	for (size_t s = 1; s <= MAX_SIZE; s <<= 1)
		sizes[nsizes++] = s;
	for (size_t k = 0; k < sizeof(odd) / sizeof(odd[0]); k++)
		sizes[nsizes++] = odd[k];

	for (int d = 1; d < nranks; d++) {
		int peer = rank ^ d;

		if (peer >= nranks)
			continue;
		pairs++;
		for (int k = 0; k < nsizes; k++) {
			size_t len = sizes[k];
			int tag = d * 100 + k; /* a different pattern each size and round */

			for (int it = 0; it < 2; it++) {
				memset(rbuf, 0, len);
				if (rank < peer) {
					fill(sbuf, len, rank, tag + it);
					MPI_Send(sbuf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
					MPI_Recv(rbuf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD,
						 MPI_STATUS_IGNORE);
				} else {
					MPI_Recv(rbuf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD,
						 MPI_STATUS_IGNORE);
					fill(sbuf, len, rank, tag + it);
					MPI_Send(sbuf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
				}
				if (corrupt && rank == 1 && d == 1 && k == 10 && it == 0)
					rbuf[len / 2] ^= 0x40;
				errors += verify("ping-pong", rbuf, len, peer, tag + it);
			}
		}
	}
	errors = total(errors);
	if (rank == 0 && errors == 0)
		printf("mpi_check: ping-pong %d sizes 1..%u B, %d peers per rank ok\n", nsizes,
		       MAX_SIZE, pairs);
	fflush(stdout);
	return errors;
}

static long allreduce(void)
{
	enum { N = 1 << 18 }; /* 2 MiB of int64 */
	long errors = 0;
	int mine = rank + 1, sum = 0;
	int64_t *v = malloc(N * sizeof(*v)), *r = malloc(N * sizeof(*r));

	MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (sum != nranks * (nranks + 1) / 2) {
		printf("rank %d: allreduce sum of rank+1 is %d, expected %d\n", rank, sum,
		       nranks * (nranks + 1) / 2);
		errors++;
	}
	for (int64_t i = 0; i < N; i++)
		v[i] = rank * i + 1;
	MPI_Allreduce(v, r, N, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
	for (int64_t i = 0; i < N; i++) {
		int64_t want = i * nranks * (nranks - 1) / 2 + nranks;

		if (r[i] != want && errors++ < 3)
			printf("rank %d: allreduce vector element %lld is %lld, expected %lld\n", rank,
			       (long long)i, (long long)r[i], (long long)want);
	}
	free(v);
	free(r);
	errors = total(errors);
	if (rank == 0 && errors == 0)
		printf("mpi_check: allreduce sum %d = n(n+1)/2 and %d-element int64 vector ok\n",
		       sum, N);
	fflush(stdout);
	return errors;
}

static long allgather(int count)
{
	long errors = 0;
	int *mine = malloc(count * sizeof(int));
	int *all = malloc((size_t)count * nranks * sizeof(int));

	for (int j = 0; j < count; j++)
		mine[j] = rank * count + j;
	memset(all, 0xff, (size_t)count * nranks * sizeof(int));
	MPI_Allgather(mine, count, MPI_INT, all, count, MPI_INT, MPI_COMM_WORLD);
	for (int j = 0; j < count * nranks; j++)
		if (all[j] != j && errors++ < 3)
			printf("rank %d: allgather element %d (from rank %d) is %d, expected %d\n", rank,
			       j, j / count, all[j], j);
	free(mine);
	free(all);
	errors = total(errors);
	if (rank == 0 && errors == 0)
		printf("mpi_check: allgather %d ints per rank ok\n", count);
	fflush(stdout);
	return errors;
}

static long bcast(uint8_t *buf, int root)
{
	const size_t len = 1u << 20;
	long errors;

	if (rank == root)
		fill(buf, len, root, 7);
	else
		memset(buf, 0, len);
	MPI_Bcast(buf, (int)len, MPI_BYTE, root, MPI_COMM_WORLD);
	errors = total(verify("bcast", buf, len, root, 7));
	if (rank == 0 && errors == 0)
		printf("mpi_check: bcast 1 MiB from rank %d ok\n", root);
	fflush(stdout);
	return errors;
}

int main(int argc, char **argv)
{
	long errors = 0;
	uint8_t *sbuf, *rbuf;

	MPI_Init(&argc, &argv);
	/* A line at a time through mpirun's pipe: a rank that exits non-zero makes mpirun
	 * end the others, and rank 0's verdict, still in its buffer, was lost with it. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	corrupt = argc > 1 && strcmp(argv[1], "--corrupt") == 0;
	sbuf = malloc(MAX_SIZE);
	rbuf = malloc(MAX_SIZE);
	if (!sbuf || !rbuf) {
		printf("rank %d: out of memory\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	if (rank == 0)
		printf("mpi_check: %d ranks\n", nranks);

	errors += pingpong(sbuf, rbuf);
	errors += allreduce();
	errors += allgather(16);
	errors += allgather(1 << 18);
	errors += bcast(rbuf, 0);
	errors += bcast(rbuf, nranks - 1);

	if (rank == 0)
		printf("mpi_check: %s\n", errors ? "FAILED" : "all ok");
	free(sbuf);
	free(rbuf);
	MPI_Finalize();
	return errors ? 1 : 0;
}
