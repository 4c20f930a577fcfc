/* SPDX-License-Identifier: MIT */
/* batchmix.c's float16 mixing: the F16C loop gives the portable loop's bits
 * exactly, over every finite half as the image and as its partner, for
 * MixUp lambdas across (0, 1), an image size with a tail of one element, and
 * a CutMix box (copied, not converted). The portable loop itself is checked
 * against torch's half arithmetic in tests/batchops/test_mix.py. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "batchmix.h"

int batchmix_force_isa(int isa);

#define W 127
#define H 173 /* 127 * 173 * 3 = 65913 elements: 8k + 1 */
#define N ((size_t)W * H * 3)

/* Every finite half bit pattern in turn (NaN and infinity patterns replaced
 * by the finite ones from the start), the partner image in another order. */
static void fill(uint16_t *img)
{
	size_t k = 0;

	for (size_t i = 0; i < N; i++) {
		while ((k & 0x7c00u) == 0x7c00u) /* exponent all ones: inf / NaN */
			k = (k + 1) & 0xffffu;
		img[i] = (uint16_t)k;
		k = (k + 1) & 0xffffu;
	}
	for (size_t i = 0; i < N; i++)
		img[N + i] = img[(i * 40507u + 17u) % N]; /* 40507 is prime to N: a permutation */
}

static void mix(int isa, const struct batchmix *m, const struct batchmix_rec *recs, const uint16_t *src, uint16_t *out)
{
	int64_t labels[2] = {0, 1};
	float soft[4];
	void *scratch = malloc(N * 2);

	assert_non_null(scratch);
	assert_int_equal(batchmix_force_isa(isa), 0);
	memcpy(out, src, 2 * N * 2);
	batchmix_apply(m, recs, 2, out, DTYPE_FLOAT16, W, H, labels, 2, soft, scratch);
	assert_int_equal(batchmix_force_isa(0), 0);
	free(scratch);
}

static void test_f16c_equals_portable(void **state)
{
	static const double lams[] = {0.5, 0.2, 0.8, 1e-3, 0.999, 0.123456789, 0.99, 1.0 / 3, 0.75, 0.0625};
	uint16_t *src = malloc(2 * N * 2), *a = malloc(2 * N * 2), *b = malloc(2 * N * 2);
	struct batchmix m;
	char err[128];

	(void)state;
	assert_non_null(src);
	assert_non_null(a);
	assert_non_null(b);
	if (batchmix_force_isa(2) < 0) {
		free(src);
		free(a);
		free(b);
		skip(); /* no F16C here: nothing to compare */
	}
	assert_int_equal(batchmix_force_isa(0), 0);
	assert_int_equal(batchmix_parse("MixUp(alpha=0.2)", &m, err, sizeof(err)), 0);
	fill(src);
	for (size_t t = 0; t < sizeof(lams) / sizeof(lams[0]); t++) {
		struct batchmix_rec recs[2] = {
			{.lam = lams[t], .lam_drawn = lams[t], .partner = 1, .kind = BATCHMIX_MIXUP},
			{.lam = lams[t], .lam_drawn = lams[t], .partner = 0, .kind = BATCHMIX_MIXUP},
		};
		size_t changed = 0;

		mix(1, &m, recs, src, a);
		mix(2, &m, recs, src, b);
		assert_memory_equal(a, b, 2 * N * 2);
		for (size_t i = 0; i < 2 * N; i++)
			changed += a[i] != src[i];
		assert_true(changed > N); /* it mixed */
	}
	/* CutMix: the box's rows copied in both */
	{
		struct batchmix_rec recs[2] = {
			{.lam = 0.7, .partner = 1, .kind = BATCHMIX_CUTMIX, .x1 = 3, .y1 = 5, .x2 = 90, .y2 = 101},
			{.lam = 0.7, .partner = 0, .kind = BATCHMIX_CUTMIX, .x1 = 3, .y1 = 5, .x2 = 90, .y2 = 101},
		};

		mix(1, &m, recs, src, a);
		mix(2, &m, recs, src, b);
		assert_memory_equal(a, b, 2 * N * 2);
	}
	assert_int_equal(batchmix_force_isa(3), -ENOTSUP);
	free(src);
	free(a);
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f16c_equals_portable),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
