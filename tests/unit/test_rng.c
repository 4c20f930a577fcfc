/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "rng.h"

#define WORDS 64

static void stream(uint64_t seed, uint64_t epoch, uint64_t index, enum rng_purpose purpose, uint32_t out[WORDS])
{
	struct rng r;

	rng_init(&r, seed, epoch, index, purpose);
	for (int i = 0; i < WORDS; i++)
		out[i] = rng_u32(&r);
}

static void test_same_key_same_stream(void **state)
{
	uint32_t a[WORDS], b[WORDS];

	(void)state;
	stream(42, 3, 12345, RNG_AUGMENT, a);
	stream(42, 3, 12345, RNG_AUGMENT, b);
	assert_memory_equal(a, b, sizeof(a));

	/* and the words are not all alike */
	int same = 0;
	for (int i = 1; i < WORDS; i++)
		same += a[i] == a[0];
	assert_true(same < 2);
}

/* Streams differing in any one part of the key share no leading words. */
static void test_key_parts_matter(void **state)
{
	uint32_t base[WORDS], other[WORDS];
	const struct {
		uint64_t seed, epoch, index;
		enum rng_purpose purpose;
	} keys[] = {
		{43, 3, 12345, RNG_AUGMENT},                /* seed */
		{42, 4, 12345, RNG_AUGMENT},                /* epoch */
		{42, 3, 12346, RNG_AUGMENT},                /* index */
		{42, 3, 12345 + (1ull << 32), RNG_AUGMENT}, /* high half of the index */
		{42, 3 + (1ull << 32), 12345, RNG_AUGMENT}, /* high half of the epoch */
		{42, 3, 12345, RNG_PERMUTATION},            /* purpose */
		{42, 3, 12345, RNG_REPLACE},
	};

	(void)state;
	stream(42, 3, 12345, RNG_AUGMENT, base);
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		int equal = 0;

		stream(keys[k].seed, keys[k].epoch, keys[k].index, keys[k].purpose, other);
		for (int i = 0; i < WORDS; i++)
			equal += base[i] == other[i];
		assert_true(equal <= 1);
	}
}

static void test_below_range_and_uniform(void **state)
{
	const uint64_t ns[] = {1, 2, 3, 7, 10, 1000, (1ull << 33) + 5, UINT64_MAX};
	unsigned counts[10] = {0};
	const int draws = 100000;
	struct rng r;
	double chi2 = 0;

	(void)state;
	rng_init(&r, 1, 0, 0, RNG_AUGMENT);
	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++)
		for (int i = 0; i < 2000; i++)
			assert_true(rng_below(&r, ns[k]) < ns[k]);

	for (int i = 0; i < draws; i++)
		counts[rng_below(&r, 10)]++;
	for (int b = 0; b < 10; b++) {
		double e = draws / 10.0, d = counts[b] - e;

		chi2 += d * d / e;
	}
	/* 9 degrees of freedom: P(chi2 > 40) is about 7e-6 */
	assert_true(chi2 < 40.0);
}

static void test_uniform_unit_interval(void **state)
{
	struct rng r;
	double sum = 0, lo = 1, hi = 0;
	const int draws = 100000;

	(void)state;
	rng_init(&r, 9, 1, 2, RNG_AUGMENT);
	for (int i = 0; i < draws; i++) {
		double u = rng_uniform(&r);

		assert_true(u >= 0.0 && u < 1.0);
		sum += u;
		lo = u < lo ? u : lo;
		hi = u > hi ? u : hi;
	}
	assert_true(sum / draws > 0.49 && sum / draws < 0.51);
	assert_true(lo < 0.001 && hi > 0.999);

	for (int i = 0; i < 1000; i++) {
		double v = rng_range(&r, -2.5, 4.0);

		assert_true(v >= -2.5 && v < 4.0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_key_same_stream),
		cmocka_unit_test(test_key_parts_matter),
		cmocka_unit_test(test_below_range_and_uniform),
		cmocka_unit_test(test_uniform_unit_interval),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
