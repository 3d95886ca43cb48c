/* The copy-assist claim protocol (src/wire/shm/shm_assist.h): the word's packing, taking
 * chunks from the front and from the back, the helper's count, abandoning a job, and a
 * requester and a helper thread splitting many jobs between them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "wire/shm/shm_assist.h"

/* Posts job @job of @n chunks as the requester does: the count first, the word last. */
static void post(struct shm_assist *a, uint32_t job, uint32_t n)
{
	atomic_store_explicit(&a->done, (uint64_t)job << 32, memory_order_relaxed);
	atomic_store_explicit(&a->claim, shm_assist_word(job, 0, n), memory_order_release);
}

static uint64_t claim_of(struct shm_assist *a)
{
	return atomic_load_explicit(&a->claim, memory_order_relaxed);
}

static uint64_t done_of(struct shm_assist *a)
{
	return atomic_load_explicit(&a->done, memory_order_relaxed);
}

static void test_word_round_trip_and_chunks(void **state)
{
	static const uint32_t jobs[] = { 0, 1, 0x12345678, 0x80000000u, 0xffffffffu };
	static const uint32_t ends[] = { 0, 1, 0x7fff, 0x8000, 0xfffe, 0xffff };

	(void)state;
	for (size_t j = 0; j < sizeof(jobs) / sizeof(jobs[0]); j++)
		for (size_t f = 0; f < sizeof(ends) / sizeof(ends[0]); f++)
			for (size_t b = 0; b < sizeof(ends) / sizeof(ends[0]); b++) {
				uint64_t c = shm_assist_word(jobs[j], ends[f], ends[b]);

				assert_int_equal(shm_assist_job(c), jobs[j]);
				assert_int_equal(shm_assist_front(c), ends[f]);
				assert_int_equal(shm_assist_back(c), ends[b]);
			}
	/* The layout other processes read: job << 32 | front << 16 | back. */
	assert_int_equal(shm_assist_word(0xdeadbeef, 0x1234, 0xabcd), 0xdeadbeef1234abcdull);
	/* An end wider than 16 bits does not spill into its neighbour. */
	assert_int_equal(shm_assist_word(0, 0x1ffff, 0), 0xffff0000ull);
	assert_int_equal(shm_assist_word(0, 0, 0x1ffff), 0xffffull);

	assert_int_equal(shm_assist_chunks(0), 0);
	assert_int_equal(shm_assist_chunks(1), 1);
	assert_int_equal(shm_assist_chunks(SHM_ASSIST_CHUNK - 1), 1);
	assert_int_equal(shm_assist_chunks(SHM_ASSIST_CHUNK), 1);
	assert_int_equal(shm_assist_chunks(SHM_ASSIST_CHUNK + 1), 2);
	/* The largest message has chunks the word can still name. */
	assert_int_equal(shm_assist_chunks(1ull << 31), (1u << 31) / SHM_ASSIST_CHUNK);
	assert_true(shm_assist_chunks(1ull << 31) <= 0xffff);
}

static void test_take_front(void **state)
{
	struct shm_assist a = { 0 };
	uint32_t first, n, back;
	uint64_t taken;

	(void)state;
	post(&a, 7, 10);
	/* Another job's number takes nothing and leaves the word as it was. */
	assert_false(shm_assist_take_front(&a, 6, 1, &first, &n, &back));
	assert_false(shm_assist_take_front(&a, 8, 1, &first, &n, &back));
	assert_int_equal(claim_of(&a), shm_assist_word(7, 0, 10));

	assert_true(shm_assist_take_front(&a, 7, 3, &first, &n, &back));
	assert_int_equal(first, 0);
	assert_int_equal(n, 3);
	assert_int_equal(back, 10);
	assert_int_equal(claim_of(&a), shm_assist_word(7, 3, 10));

	/* The helper takes chunk 9: the next front claim reports where its chunks start. */
	assert_true(shm_assist_take_back(&a, &taken));
	assert_true(shm_assist_take_front(&a, 7, 2, &first, &n, &back));
	assert_int_equal(first, 3);
	assert_int_equal(n, 2);
	assert_int_equal(back, 9);

	/* Wanting more than is left takes what is left. */
	assert_true(shm_assist_take_front(&a, 7, 100, &first, &n, &back));
	assert_int_equal(first, 5);
	assert_int_equal(n, 4);
	assert_int_equal(back, 9);
	assert_int_equal(claim_of(&a), shm_assist_word(7, 9, 9));

	/* Front met back: nothing, and *back still says where the helper's chunks start. */
	back = 0;
	assert_false(shm_assist_take_front(&a, 7, 1, &first, &n, &back));
	assert_int_equal(back, 9);
	assert_int_equal(claim_of(&a), shm_assist_word(7, 9, 9));

	/* A job of no chunks has nothing to take. */
	post(&a, 8, 0);
	assert_false(shm_assist_take_front(&a, 8, 1, &first, &n, &back));
	assert_int_equal(back, 0);
}

static void test_take_back(void **state)
{
	struct shm_assist a = { 0 };
	uint32_t first, n, back;
	uint64_t taken = 0;

	(void)state;
	post(&a, 9, 5);
	assert_true(shm_assist_take_back(&a, &taken));
	/* The word it took from: the job, and chunk back - 1 = 4 is the helper's. */
	assert_int_equal(taken, shm_assist_word(9, 0, 5));
	assert_int_equal(shm_assist_job(taken), 9);
	assert_int_equal(shm_assist_back(taken) - 1, 4);
	assert_int_equal(claim_of(&a), shm_assist_word(9, 0, 4));

	assert_true(shm_assist_take_front(&a, 9, 2, &first, &n, &back));
	assert_true(shm_assist_take_back(&a, &taken));
	assert_int_equal(shm_assist_back(taken) - 1, 3);
	/* Job and front stay as they were. */
	assert_int_equal(shm_assist_job(taken), 9);
	assert_int_equal(claim_of(&a), shm_assist_word(9, 2, 3));
	assert_true(shm_assist_take_back(&a, &taken));
	assert_int_equal(shm_assist_back(taken) - 1, 2);
	assert_int_equal(claim_of(&a), shm_assist_word(9, 2, 2));

	/* Nothing left: false, and the word as it was. */
	assert_false(shm_assist_take_back(&a, &taken));
	assert_int_equal(claim_of(&a), shm_assist_word(9, 2, 2));

	post(&a, 10, 0);
	assert_false(shm_assist_take_back(&a, &taken));
	assert_int_equal(claim_of(&a), shm_assist_word(10, 0, 0));
}

/* Takes job @job of @n chunks from both ends in turn; every chunk is taken exactly once. */
static void take_from_both_ends(uint32_t job, uint32_t n)
{
	static uint8_t seen[0x10000];
	struct shm_assist a = { 0 };
	uint32_t first, k, back = 0, turn = 0, taken_front = 0, taken_back = 0;
	uint64_t c;

	memset(seen, 0, n);
	post(&a, job, n);
	for (;;) {
		bool front = turn++ % 3 != 2; /* front, front, back, ... */
		bool got;

		if (front) {
			got = shm_assist_take_front(&a, job, 1 + turn % 4, &first, &k, &back);
			if (got) {
				assert_true(k >= 1 && first + k <= back);
				for (uint32_t i = first; i < first + k; i++)
					seen[i]++;
				taken_front += k;
			}
		} else {
			got = shm_assist_take_back(&a, &c);
			if (got) {
				assert_int_equal(shm_assist_job(c), job);
				assert_true(shm_assist_back(c) >= 1 && shm_assist_back(c) <= n);
				seen[shm_assist_back(c) - 1]++;
				taken_back++;
			}
		}
		if (!got)
			break;
	}
	/* Whichever end found nothing, the other has nothing either. */
	assert_false(shm_assist_take_front(&a, job, 1, &first, &k, &back));
	assert_false(shm_assist_take_back(&a, &c));
	assert_false(shm_assist_pending(&a));
	assert_int_equal(taken_front + taken_back, n);
	assert_int_equal(back, n - taken_back);
	for (uint32_t i = 0; i < n; i++)
		if (seen[i] != 1)
			fail_msg("job of %u chunks: chunk %u taken %u times", n, i, seen[i]);
}

static void test_front_meets_back(void **state)
{
	(void)state;
	for (uint32_t n = 0; n <= 70; n++)
		take_from_both_ends(100 + n, n);
	take_from_both_ends(0xffffffffu, 0xffff);
}

static void test_count_only_for_posted_job(void **state)
{
	struct shm_assist a = { 0 };

	(void)state;
	post(&a, 4, 3);
	shm_assist_count(&a, 4);
	shm_assist_count(&a, 4);
	assert_int_equal(done_of(&a), (uint64_t)4 << 32 | 2);
	/* An earlier or later job's number is not this job's. */
	shm_assist_count(&a, 3);
	shm_assist_count(&a, 5);
	assert_int_equal(done_of(&a), (uint64_t)4 << 32 | 2);

	/* A chunk of job 4 finishing after job 5 is posted does not count for 5. */
	post(&a, 5, 3);
	shm_assist_count(&a, 4);
	assert_int_equal(done_of(&a), (uint64_t)5 << 32);
	shm_assist_count(&a, 5);
	assert_int_equal(done_of(&a), (uint64_t)5 << 32 | 1);
}

static void test_close(void **state)
{
	struct shm_assist a = { 0 };
	uint32_t first, n, back;
	uint64_t taken;

	(void)state;
	post(&a, 11, 8);
	assert_true(shm_assist_take_front(&a, 11, 2, &first, &n, &back));
	assert_true(shm_assist_take_back(&a, &taken));
	assert_int_equal(claim_of(&a), shm_assist_word(11, 2, 7));

	/* Another job's number changes nothing. */
	shm_assist_close(&a, 12);
	shm_assist_close(&a, 10);
	assert_int_equal(claim_of(&a), shm_assist_word(11, 2, 7));
	assert_true(shm_assist_pending(&a));

	shm_assist_close(&a, 11);
	assert_false(shm_assist_pending(&a));
	assert_false(shm_assist_take_back(&a, &taken));
	assert_false(shm_assist_take_front(&a, 11, 1, &first, &n, &back));
	/* The helper's chunks [7, 8) are still named: the requester waits for them. */
	assert_int_equal(back, 7);
	assert_int_equal(claim_of(&a), shm_assist_word(11, 7, 7));

	/* Closing again, or a job with nothing left, changes nothing. */
	shm_assist_close(&a, 11);
	assert_int_equal(claim_of(&a), shm_assist_word(11, 7, 7));
	post(&a, 12, 0);
	shm_assist_close(&a, 12);
	assert_int_equal(claim_of(&a), shm_assist_word(12, 0, 0));
}

/* --- a requester thread and a helper thread ------------------------------------------ */

#define MT_JOBS 20000
#define MT_MIN_JOBS 2000 /* what a loaded machine must still do within the budget */
#define MT_MAX_CHUNKS 64
#define MT_LIMIT_NS (20ull * 1000000000)  /* no progress for this long: a failure */
#define MT_BUDGET_NS (10ull * 1000000000) /* then the requester stops posting */

struct mt {
	struct shm_assist a;
	_Atomic uint32_t front_hits[MT_MAX_CHUNKS]; /* per chunk of the current job */
	_Atomic uint32_t back_hits[MT_MAX_CHUNKS];
	_Atomic uint32_t job;    /* the job posted, for the helper to check its words */
	_Atomic bool stop;       /* the helper's: the requester is done or failed */
	_Atomic bool helper_bad; /* the helper took a word it should not have */
	uint64_t deadline;       /* of the current job's waits */
	uint32_t jobs;           /* jobs done */
	uint32_t helped;         /* jobs the helper took a chunk of */
	char error[256];         /* the requester's first failure, or "" */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

static uint32_t next_rand(uint32_t *s)
{
	/* xorshift32: the same sequence every run */
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static void *mt_helper(void *arg)
{
	struct mt *m = arg;
	uint64_t c;

	while (!atomic_load_explicit(&m->stop, memory_order_relaxed)) {
		uint32_t i;

		if (!shm_assist_take_back(&m->a, &c)) {
			sched_yield();
			continue;
		}
		/* The word the helper took from names the job posted and a chunk it has. */
		i = shm_assist_back(c) - 1;
		if (shm_assist_job(c) != atomic_load_explicit(&m->job, memory_order_relaxed) ||
		    i >= MT_MAX_CHUNKS)
			atomic_store_explicit(&m->helper_bad, true, memory_order_relaxed);
		else
			atomic_fetch_add_explicit(&m->back_hits[i], 1, memory_order_relaxed);
		/* Release: the requester that sees the count sees the hit. */
		shm_assist_count(&m->a, shm_assist_job(c));
	}
	return NULL;
}

/* Bounded: false (and the reason) once the test's time is up. */
static bool mt_in_time(struct mt *m, const char *waiting_for, uint32_t job)
{
	if (now_ns() < m->deadline)
		return true;
	snprintf(m->error, sizeof(m->error), "job %u: no progress in 20 s waiting for %s", job,
		 waiting_for); /* each job starts its own 20 s (mt_requester) */
	return false;
}

/* One job: post, take random claims from the front, wait for the helper's count, check. */
static bool mt_job(struct mt *m, uint32_t job, uint32_t n, bool wait_for_helper, uint32_t *rng)
{
	uint32_t first, k, back = n;
	uint64_t c, d;

	for (uint32_t i = 0; i < MT_MAX_CHUNKS; i++) {
		atomic_store_explicit(&m->front_hits[i], 0, memory_order_relaxed);
		atomic_store_explicit(&m->back_hits[i], 0, memory_order_relaxed);
	}
	atomic_store_explicit(&m->job, job, memory_order_relaxed);
	post(&m->a, job, n);
	/* Now and then let the helper in first, so that both ends are always exercised. */
	while (wait_for_helper && shm_assist_back(claim_of(&m->a)) == n) {
		if (!mt_in_time(m, "the helper's first chunk", job))
			return false;
		sched_yield();
	}
	for (;;) {
		uint32_t r = next_rand(rng), want = r % 8 ? 1 + (r >> 8) % 4 : 0xffff;

		if (!shm_assist_take_front(&m->a, job, want, &first, &k, &back))
			break;
		if (k < 1 || k > want || first + k > n) {
			snprintf(m->error, sizeof(m->error),
				 "job %u: took [%u, %u) of %u, wanted %u", job, first, first + k, n,
				 want);
			return false;
		}
		for (uint32_t i = first; i < first + k; i++)
			atomic_fetch_add_explicit(&m->front_hits[i], 1, memory_order_relaxed);
	}
	c = claim_of(&m->a);
	if (back > n || c != shm_assist_word(job, back, back)) {
		snprintf(m->error, sizeof(m->error), "job %u: ended at word %#llx, back %u of %u",
			 job, (unsigned long long)c, back, n);
		return false;
	}
	/* The helper took [back, n): wait for it to count them (acquire: its hits are seen). */
	for (;;) {
		d = atomic_load_explicit(&m->a.done, memory_order_acquire);
		if ((uint32_t)(d >> 32) != job || (uint32_t)d > n - back) {
			snprintf(m->error, sizeof(m->error), "job %u: done %#llx, helper took %u",
				 job, (unsigned long long)d, n - back);
			return false;
		}
		if ((uint32_t)d == n - back)
			break;
		if (!mt_in_time(m, "the helper's count", job))
			return false;
		sched_yield();
	}
	m->helped += back < n;
	/* Every chunk exactly once: the front's below back, the helper's from back on. */
	for (uint32_t i = 0; i < MT_MAX_CHUNKS; i++) {
		uint32_t f = atomic_load_explicit(&m->front_hits[i], memory_order_relaxed);
		uint32_t b = atomic_load_explicit(&m->back_hits[i], memory_order_relaxed);

		if (f != (i < back) || b != (i >= back && i < n)) {
			snprintf(m->error, sizeof(m->error),
				 "job %u of %u chunks, back %u: chunk %u taken %u + %u times",
				 job, n, back, i, f, b);
			return false;
		}
	}
	return true;
}

static void *mt_requester(void *arg)
{
	struct mt *m = arg;
	uint32_t rng = 0x9e3779b9, job = 0xffffffffu - MT_JOBS / 2;
	uint64_t stop = now_ns() + MT_BUDGET_NS;

	/* Every handoff between the two threads waits for the other to be scheduled: on a
	 * loaded machine the 20,000 jobs can take minutes, so they stop at the budget. */
	for (uint32_t j = 0; j < MT_JOBS && now_ns() < stop; j++, job++) {
		job += !job; /* as the requester does: job 0 is never posted */
		m->deadline = now_ns() + MT_LIMIT_NS;
		if (!mt_job(m, job, 1 + next_rand(&rng) % MT_MAX_CHUNKS, j % 4 == 0, &rng))
			break;
		m->jobs++;
	}
	atomic_store_explicit(&m->stop, true, memory_order_relaxed);
	return NULL;
}

static void test_requester_and_helper_threads(void **state)
{
	static struct mt m;
	pthread_t req, help;

	(void)state;
	memset(&m, 0, sizeof(m));
	assert_int_equal(pthread_create(&help, NULL, mt_helper, &m), 0);
	assert_int_equal(pthread_create(&req, NULL, mt_requester, &m), 0);
	assert_int_equal(pthread_join(req, NULL), 0);
	assert_int_equal(pthread_join(help, NULL), 0);
	if (m.error[0])
		fail_msg("%s", m.error);
	assert_false(atomic_load(&m.helper_bad));
	print_message("    %u jobs, %u helped\n", m.jobs, m.helped);
	if (m.jobs < MT_MIN_JOBS)
		fail_msg("%u jobs in %llu s, want %u at least", m.jobs,
			 (unsigned long long)(MT_BUDGET_NS / 1000000000), MT_MIN_JOBS);
	/* At least the jobs the requester waited for the helper in (every 4th). */
	assert_true(m.helped >= m.jobs / 4);
	assert_false(shm_assist_pending(&m.a));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_word_round_trip_and_chunks),
		cmocka_unit_test(test_take_front),
		cmocka_unit_test(test_take_back),
		cmocka_unit_test(test_front_meets_back),
		cmocka_unit_test(test_count_only_for_posted_job),
		cmocka_unit_test(test_close),
		cmocka_unit_test(test_requester_and_helper_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
