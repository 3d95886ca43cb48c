/* The memory-key table (src/core/sv_mr.c): keys, and the one access check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <infiniband/verbs.h>

#include "core/sv_mr.h"

static struct sv_mr_entry entry(uint32_t pd, uint32_t access, uint64_t iova, uint64_t len)
{
	struct sv_mr_entry e = { .pd = pd, .access = access, .iova = iova, .length = len,
				 .vaddr = 0x10000 };
	return e;
}

static void test_keys_unique_and_tagged(void **state)
{
	struct sv_mr_table t;
	struct sv_mr_entry e = entry(1, 0, 0x1000, 4096);
	uint32_t idx, keys[64], tags_seen = 0;

	(void)state;
	assert_int_equal(sv_mr_table_init(&t), 0);
	for (int i = 0; i < 64; i++) {
		assert_int_equal(sv_mr_table_add(&t, &e, &idx, &keys[i]), 0);
		assert_int_not_equal(keys[i], 0);
		for (int j = 0; j < i; j++)
			assert_int_not_equal(keys[i], keys[j]);
		assert_int_equal(sv_mr_key_index(keys[i]), idx);
		tags_seen |= 1u << (keys[i] & 31);
	}
	/* Random tags: 64 draws of 12 bits do not all land in a handful of values. */
	assert_true(__builtin_popcount(tags_seen) > 8);
	sv_mr_table_destroy(&t);
}

static void test_stale_key_misses(void **state)
{
	struct sv_mr_table t;
	struct sv_mr_entry e = entry(1, IBV_ACCESS_REMOTE_READ, 0x1000, 4096);
	uint32_t idx, key, key2;
	uint64_t va;

	(void)state;
	assert_int_equal(sv_mr_table_init(&t), 0);
	assert_int_equal(sv_mr_table_add(&t, &e, &idx, &key), 0);
	assert_int_equal(sv_mr_check(t.slots, key, 1, IBV_ACCESS_REMOTE_READ, 0x1000, 8, &va), SV_ACCESS_OK);
	sv_mr_table_remove(&t, idx);
	assert_int_equal(sv_mr_check(t.slots, key, 1, 0, 0x1000, 8, &va), SV_ACCESS_BAD_KEY);
	/* The slot is reused with a new tag: the old key still misses. */
	assert_int_equal(sv_mr_table_add(&t, &e, &idx, &key2), 0);
	if (key2 != key)
		assert_int_equal(sv_mr_check(t.slots, key, 1, 0, 0x1000, 8, &va), SV_ACCESS_BAD_KEY);
	assert_int_equal(sv_mr_check(t.slots, 0, 1, 0, 0x1000, 8, &va), SV_ACCESS_BAD_KEY);
	sv_mr_table_destroy(&t);
}

static void test_check_pd_rights_bounds(void **state)
{
	struct sv_mr_table t;
	struct sv_mr_entry e = entry(7, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
				     0x1000, 4096);
	uint32_t idx, key;
	uint64_t va = 0;

	(void)state;
	assert_int_equal(sv_mr_table_init(&t), 0);
	assert_int_equal(sv_mr_table_add(&t, &e, &idx, &key), 0);
	assert_int_equal(sv_mr_check(t.slots, key, 8, 0, 0x1000, 1, &va), SV_ACCESS_BAD_PD);
	assert_int_equal(sv_mr_check(t.slots, key, 7, IBV_ACCESS_REMOTE_READ, 0x1000, 1, &va),
			 SV_ACCESS_NO_RIGHT);
	assert_int_equal(sv_mr_check(t.slots, key, 7, IBV_ACCESS_REMOTE_WRITE, 0x1000, 4096, &va),
			 SV_ACCESS_OK);
	assert_int_equal(va, 0x10000);
	assert_int_equal(sv_mr_check(t.slots, key, 7, 0, 0x1ffc, 4, &va), SV_ACCESS_OK);
	assert_int_equal(va, 0x10000 + 0xffc);
	/* one byte past the end, before the start, and lengths that wrap */
	assert_int_equal(sv_mr_check(t.slots, key, 7, 0, 0x1ffc, 5, &va), SV_ACCESS_OUT_OF_RANGE);
	assert_int_equal(sv_mr_check(t.slots, key, 7, 0, 0xfff, 1, &va), SV_ACCESS_OUT_OF_RANGE);
	assert_int_equal(sv_mr_check(t.slots, key, 7, 0, 0x1001, UINT64_MAX, &va),
			 SV_ACCESS_OUT_OF_RANGE);
	assert_int_equal(sv_mr_check(t.slots, key, 7, 0, UINT64_MAX, 2, &va), SV_ACCESS_OUT_OF_RANGE);
	/* a key whose index is right but whose tag is not */
	assert_int_equal(sv_mr_check(t.slots, key ^ (1u << 31), 7, 0, 0x1000, 1, &va),
			 SV_ACCESS_BAD_KEY);
	sv_mr_table_destroy(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keys_unique_and_tagged),
		cmocka_unit_test(test_stale_key_misses),
		cmocka_unit_test(test_check_pd_rights_bounds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
