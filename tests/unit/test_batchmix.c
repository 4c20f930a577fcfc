/* SPDX-License-Identifier: MIT */
/* batchmix.c's x86 loops give the portable loops' bits exactly: float16
 * (F16C) over every finite half as the image and as its partner, uint8
 * (AVX2) over every pair of levels, float32 (AVX2) over random values, for
 * MixUp lambdas across (0, 1) and image sizes with a tail, and a CutMix box.
 * The portable loops themselves are checked against torch's arithmetic in
 * tests/batchops/test_mix.py. */
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

/* uint8: every pair of levels (image 0 the low byte of the index, its
 * partner the high byte); float32: normalised-looking values from a
 * xorshift, with zeros, denormals and large ones among them. */
static void test_avx2_equals_portable(void **state)
{
	static const double lams[] = {0.5, 0.2, 0.8, 1e-3, 0.999, 0.123456789, 1.0 / 3, 0.0625};
	const size_t n = 3 * 21847; /* 65541 elements a 21847 x 1 image: every pair of levels, and a tail */
	uint8_t *u = malloc(2 * n), *ua = malloc(2 * n), *ub = malloc(2 * n), *uscratch = malloc(n);
	float *f = malloc(2 * n * 4), *fa = malloc(2 * n * 4), *fb = malloc(2 * n * 4), *fscratch = malloc(n * 4);
	int64_t labels[2] = {0, 1};
	float soft[4];
	uint64_t x = 88172645463325252ull;
	struct batchmix m;
	char err[128];

	(void)state;
	assert_true(u && ua && ub && uscratch && f && fa && fb && fscratch);
	if (batchmix_force_isa(2) < 0) {
		free(u), free(ua), free(ub), free(uscratch), free(f), free(fa), free(fb), free(fscratch);
		skip();
	}
	assert_int_equal(batchmix_parse("MixUp(alpha=0.2)", &m, err, sizeof(err)), 0);
	for (size_t i = 0; i < n; i++) {
		u[i] = (uint8_t)i;
		u[n + i] = (uint8_t)(i >> 8);
	}
	for (size_t i = 0; i < 2 * n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		f[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 6.0 - 3.0);
		if (i % 997 == 0)
			f[i] = 0.0f;
		if (i % 1009 == 0)
			f[i] = 1e-40f;
		if (i % 1013 == 0)
			f[i] = 3e38f;
	}
	for (size_t t = 0; t < sizeof(lams) / sizeof(lams[0]); t++) {
		struct batchmix_rec recs[2] = {
			{.lam = lams[t], .lam_drawn = lams[t], .partner = 1, .kind = BATCHMIX_MIXUP},
			{.lam = lams[t], .lam_drawn = lams[t], .partner = 0, .kind = BATCHMIX_MIXUP},
		};

		for (int isa = 1; isa <= 2; isa++) {
			uint8_t *uo = isa == 1 ? ua : ub;
			float *fo = isa == 1 ? fa : fb;

			assert_int_equal(batchmix_force_isa(isa), 0);
			memcpy(uo, u, 2 * n);
			memcpy(fo, f, 2 * n * 4);
			batchmix_apply(&m, recs, 2, uo, DTYPE_UINT8, (uint32_t)(n / 3), 1, labels, 2, soft, uscratch);
			batchmix_apply(&m, recs, 2, fo, DTYPE_FLOAT32, (uint32_t)(n / 3), 1, labels, 2, soft, fscratch);
		}
		assert_int_equal(batchmix_force_isa(0), 0);
		assert_memory_equal(ua, ub, 2 * n);
		assert_memory_equal(fa, fb, 2 * n * 4);
		assert_memory_not_equal(fa, f, 2 * n * 4); /* it mixed (uint8 at 0.999 rounds back to itself) */
	}
	free(u), free(ua), free(ub), free(uscratch), free(f), free(fa), free(fb), free(fscratch);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f16c_equals_portable),
		cmocka_unit_test(test_avx2_equals_portable),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
