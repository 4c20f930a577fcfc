/* SPDX-License-Identifier: MIT */
/* Epoch plans: DistributedSampler semantics, determinism, exact coverage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plan.h"

static struct plan_spec spec(uint64_t n, uint32_t rank, uint32_t world, uint32_t batch, bool shuffle, bool drop_last)
{
	return (struct plan_spec){.samples = n,
				  .seed = 42,
				  .rank = rank,
				  .world_size = world,
				  .batch_size = batch,
				  .shuffle = shuffle,
				  .drop_last = drop_last};
}

static void test_unshuffled_single_rank(void **state)
{
	struct plan_spec s = spec(10, 0, 1, 4, false, false);
	uint64_t *o;

	(void)state;
	assert_int_equal(plan_validate(&s), 0);
	assert_int_equal(plan_samples_per_epoch(&s), 10);
	assert_int_equal(plan_batches_per_epoch(&s), 3);
	assert_int_equal(plan_batch_count(&s, 2), 2);
	assert_int_equal(plan_epoch_order(&s, 0, &o), 0);
	for (uint64_t i = 0; i < 10; i++)
		assert_int_equal(o[i], i);
	free(o);
	s.drop_last = true;
	assert_int_equal(plan_batches_per_epoch(&s), 2);
}

/* Ranks together cover every index exactly once when W divides N, and the
 * permutation changes with the epoch but not with the rank. */
static void test_ranks_partition(void **state)
{
	enum { N = 1000, W = 4 };
	int seen[N] = {0};
	uint64_t *o;

	(void)state;
	for (uint32_t r = 0; r < W; r++) {
		struct plan_spec s = spec(N, r, W, 32, true, false);
		assert_int_equal(plan_samples_per_epoch(&s), N / W);
		assert_int_equal(plan_epoch_order(&s, 3, &o), 0);
		for (uint64_t i = 0; i < N / W; i++)
			seen[o[i]]++;
		free(o);
	}
	for (int i = 0; i < N; i++)
		assert_int_equal(seen[i], 1);
}

/* torch's DistributedSampler: pad by repeating from the start, then stride. */
static void test_padding_like_torch(void **state)
{
	/* N = 10, W = 4, no shuffle: padded = 0..9,0,1; rank 1 takes 1,5,9. */
	struct plan_spec s = spec(10, 1, 4, 2, false, false);
	uint64_t *o;

	(void)state;
	assert_int_equal(plan_samples_per_epoch(&s), 3);
	assert_int_equal(plan_epoch_order(&s, 0, &o), 0);
	assert_int_equal(o[0], 1);
	assert_int_equal(o[1], 5);
	assert_int_equal(o[2], 9);
	free(o);
	s.rank = 3; /* 3, 7, then the pad: index 11 -> 1 */
	assert_int_equal(plan_epoch_order(&s, 0, &o), 0);
	assert_int_equal(o[2], 1);
	free(o);
	s.drop_last = true; /* total 8: rank 3 takes 3, 7 */
	assert_int_equal(plan_samples_per_epoch(&s), 2);
	assert_int_equal(plan_batches_per_epoch(&s), 1);
}

static void test_shuffle_deterministic(void **state)
{
	struct plan_spec s = spec(500, 0, 1, 16, true, false);
	uint64_t *a, *b, *c;
	int same_as_identity = 1;

	(void)state;
	assert_int_equal(plan_epoch_order(&s, 1, &a), 0);
	assert_int_equal(plan_epoch_order(&s, 1, &b), 0);
	assert_int_equal(plan_epoch_order(&s, 2, &c), 0);
	assert_memory_equal(a, b, 500 * sizeof(*a));
	assert_memory_not_equal(a, c, 500 * sizeof(*a));
	for (uint64_t i = 0; i < 500; i++)
		same_as_identity &= a[i] == i;
	assert_false(same_as_identity);
	s.seed = 43;
	free(b);
	assert_int_equal(plan_epoch_order(&s, 1, &b), 0);
	assert_memory_not_equal(a, b, 500 * sizeof(*a));
	free(a);
	free(b);
	free(c);
}

static void test_invalid(void **state)
{
	struct plan_spec s = spec(10, 0, 0, 4, false, false);

	(void)state;
	assert_int_equal(plan_validate(&s), -22);
	s = spec(10, 2, 2, 4, false, false);
	assert_int_equal(plan_validate(&s), -22);
	s = spec(3, 0, 1, 4, false, true); /* drop_last leaves no batch */
	assert_int_equal(plan_validate(&s), -22);
	s = spec(0, 0, 1, 4, false, false);
	assert_int_equal(plan_validate(&s), -22);
}

/* Repeated augmentation, unshuffled: RepeatAugSampler(num_repeats=3) on 10
 * samples and 4 ranks (num_samples 8, selected ceil(10/4) = 3 below the
 * selected_round): rank r takes positions r, r+4, r+8 of
 * 0,0,0,1,1,1,...,9,9,9 (padded from its start); copy numbers are the
 * positions' places in their runs. */
static void test_repeats(void **state)
{
	static const uint64_t want[4][3] = {{0, 1, 2}, {0, 1, 3}, {0, 2, 3}, {1, 2, 3}};
	static const uint32_t copies[4][3] = {{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 1, 2}};
	uint64_t *o;

	(void)state;
	for (uint32_t r = 0; r < 4; r++) {
		struct plan_spec s = spec(10, r, 4, 2, false, false);

		s.repeats = 3;
		s.selected_round = 256;
		assert_int_equal(plan_validate(&s), 0);
		assert_int_equal(plan_samples_per_epoch(&s), 3);
		assert_int_equal(plan_batches_per_epoch(&s), 2);
		assert_int_equal(plan_epoch_order(&s, 0, &o), 0);
		for (uint64_t k = 0; k < 3; k++) {
			assert_int_equal(o[k], want[r][k]);
			assert_int_equal(plan_copy(&s, k), copies[r][k]);
		}
		free(o);
		/* selected_round at or below N: floor(N // round * round / ratio) */
		s.selected_round = 4;
		assert_int_equal(plan_samples_per_epoch(&s), 2);
		/* never more than the rank's num_samples, ceil(10 * 3 / 4) */
		s.selected_round = 0;
		s.selected_ratio = 1;
		assert_int_equal(plan_samples_per_epoch(&s), 8);
	}
	/* not with a fixed order or beyond the bound */
	{
		struct plan_spec s = spec(10, 0, 1, 2, false, false);

		s.repeats = PLAN_MAX_REPEATS + 1;
		assert_int_equal(plan_validate(&s), -22);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unshuffled_single_rank),
		cmocka_unit_test(test_ranks_partition),
		cmocka_unit_test(test_padding_like_torch),
		cmocka_unit_test(test_shuffle_deterministic),
		cmocka_unit_test(test_invalid),
		cmocka_unit_test(test_repeats),
	};
	return cmocka_run_group_tests_name("plan", tests, NULL, NULL);
}
