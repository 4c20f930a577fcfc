/* SPDX-License-Identifier: MIT */
/*
 * The node cache's contract, one thread: hits return the bytes put, misses
 * are counted, a changed key misses and drops the stale entry, a second put of one key is refused with
 * -EEXIST, MINIO refuses once full, and an empty file (len 0) is a real entry
 * that copies out into a buffer never allocated (under UBSan: no memcpy from
 * or to NULL).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache.h"

static void test_hit_miss_and_changed_key(void **state)
{
	struct cache *c = NULL;
	struct cache_key k = {.path_hash = cache_key_hash("/d", "a.jpg"), .size = 5, .mtime_ns = 7};
	struct cache_key changed = k;
	struct cache_tier_stats st;
	uint8_t *buf = NULL;
	size_t cap = 0;

	(void)state;
	assert_int_equal(cache_new(1 << 20, CACHE_MINIO, &c), 0);
	assert_int_equal(cache_get(c, CACHE_ENCODED, &k, &buf, &cap, NULL), -ENOENT);
	assert_int_equal(cache_put(c, CACHE_ENCODED, &k, (const uint8_t *)"hello", 5, NULL), 0);
	assert_int_equal(cache_put(c, CACHE_ENCODED, &k, (const uint8_t *)"HELLO", 5, NULL), -EEXIST);
	assert_int_equal(cache_get(c, CACHE_ENCODED, &k, &buf, &cap, NULL), 5);
	assert_memory_equal(buf, "hello", 5);
	/* the other tier is another entry */
	assert_int_equal(cache_get(c, CACHE_DECODED, &k, &buf, &cap, NULL), -ENOENT);
	changed.mtime_ns++;
	assert_int_equal(cache_get(c, CACHE_ENCODED, &changed, &buf, &cap, NULL), -ENOENT);
	cache_stats(c, CACHE_ENCODED, &st);
	assert_int_equal(st.hits, 1);
	assert_int_equal(st.misses, 2);
	assert_int_equal(st.entries, 0); /* the stale entry went with the changed file's lookup */
	free(buf);
	cache_free(c);
}

static void test_empty_entry(void **state)
{
	struct cache *c = NULL;
	struct cache_key k = {.path_hash = cache_key_hash("/d", "empty.jpg"), .size = 0, .mtime_ns = 1};
	uint8_t *buf = NULL;
	size_t cap = 0;

	(void)state;
	assert_int_equal(cache_new(1 << 20, CACHE_MINIO, &c), 0);
	assert_int_equal(cache_put(c, CACHE_ENCODED, &k, NULL, 0, NULL), 0);
	assert_true(cache_contains(c, CACHE_ENCODED, &k));
	assert_int_equal(cache_get(c, CACHE_ENCODED, &k, &buf, &cap, NULL), 0);
	assert_null(buf);
	free(buf);
	cache_free(c);
}

static void test_minio_full_refuses(void **state)
{
	struct cache *c = NULL;
	static uint8_t blob[4096];
	struct cache_tier_stats st;
	int stored = 0;

	(void)state;
	assert_int_equal(cache_new(64 * 1024, CACHE_MINIO, &c), 0);
	for (int i = 0; i < 64; i++) {
		struct cache_key k = {.path_hash = (uint64_t)i * 0x9e3779b97f4a7c15ull + 1, .size = sizeof(blob)};
		int r = cache_put(c, CACHE_ENCODED, &k, blob, sizeof(blob), NULL);

		assert_true(r == 0 || r == -ENOSPC);
		stored += r == 0;
	}
	assert_true(stored > 0 && stored < 64);
	assert_true(cache_bytes(c) <= cache_budget(c));
	cache_stats(c, CACHE_ENCODED, &st);
	assert_int_equal(st.entries, (uint64_t)stored);
	assert_int_equal(st.rejected, (uint64_t)(64 - stored));
	cache_free(c);
	cache_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hit_miss_and_changed_key),
		cmocka_unit_test(test_empty_entry),
		cmocka_unit_test(test_minio_full_refuses),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
