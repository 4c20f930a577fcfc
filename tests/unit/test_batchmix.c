/* SPDX-License-Identifier: MIT */
/* batchmix.c's x86 loops give the portable loops' bits exactly: float16
 * (F16C) over every finite half as the image and as its partner, uint8
 * (AVX2) over every pair of levels, float32 (AVX2) over random values, for
 * MixUp lambdas across (0, 1) and image sizes with a tail, and a CutMix box.
 * The portable loops themselves are checked against torch's arithmetic in
 * tests/batchops/test_mix.py. The incremental mixing (batchmix_written, as
 * the workers call it) gives batchmix_apply's bytes whatever order the
 * images are finished in, from one thread or four, and exactly one call
 * reports the batch done. */
#include <errno.h>
#include <pthread.h>
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

static const char *const OPS[] = {
	"MixUp(alpha=0.2)",
	"CutMix(alpha=1.0)",
	"RandomChoice(MixUp(alpha=0.2), CutMix(alpha=1.0))",
	"timm.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, mode=batch)",
	"timm.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, mode=pair)",
	"timm.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, mode=elem)",
};

struct inc_run {
	struct batchmix_progress *p;
	const uint32_t *order;
	uint32_t count;
	const uint8_t *src;
	uint8_t *out;
	size_t bytes;
	atomic_uint at, lasts;
};

static void *inc_worker(void *arg)
{
	struct inc_run *r = arg;

	for (;;) {
		uint32_t n = atomic_fetch_add(&r->at, 1);

		if (n >= r->count)
			return NULL;
		/* the image written just now, as a worker's pipeline does */
		memcpy(r->out + r->order[n] * r->bytes, r->src + r->order[n] * r->bytes, r->bytes);
		if (batchmix_written(r->p, r->order[n], true))
			atomic_fetch_add(&r->lasts, 1);
	}
}

/* Mix `src` (count images) incrementally in `order` with `threads` threads
 * into out; exactly one call must report the end. */
static void incremental(const struct batchmix *m, const struct batchmix_rec *recs, uint32_t count,
			enum sample_dtype dtype, uint32_t w, uint32_t h, const uint8_t *src, uint8_t *out,
			const uint32_t *order, int threads)
{
	size_t bytes = (size_t)w * h * 3 * sample_dtype_bytes(dtype);
	void *scratch = malloc(bytes);
	atomic_uchar *state = malloc(count);
	struct batchmix_progress p;
	struct inc_run r = {.p = &p, .order = order, .count = count, .src = src, .out = out, .bytes = bytes};
	pthread_t t[4];

	assert_true(scratch && state);
	memset(out, 0x5a, count * bytes); /* not written yet */
	batchmix_start(&p, m, recs, count, out, dtype, w, h, scratch, state);
	for (int i = 0; i < threads; i++)
		assert_int_equal(pthread_create(&t[i], NULL, inc_worker, &r), 0);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(atomic_load(&r.lasts), 1);
	free(scratch);
	free(state);
}

static void test_incremental_equals_apply(void **state)
{
	static const uint32_t counts[] = {1, 2, 3, 7, 8, 16};
	static const enum sample_dtype dtypes[] = {DTYPE_UINT8, DTYPE_FLOAT32};
	const uint32_t w = 13, h = 11;
	uint64_t x = 0x9e3779b97f4a7c15ull;

	(void)state;
	for (size_t o = 0; o < sizeof(OPS) / sizeof(OPS[0]); o++) {
		struct batchmix m;
		char err[128];

		assert_int_equal(batchmix_parse(OPS[o], &m, err, sizeof(err)), 0);
		for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
			uint32_t count = counts[c];

			if (m.family == BATCHMIX_TIMM && count % 2 && count > 1 && m.mode != BATCHMIX_MODE_PAIR)
				continue; /* timm asserts an even batch (pair mode: an odd last one) */
			for (size_t d = 0; d < 2; d++) {
				size_t bytes = (size_t)w * h * 3 * sample_dtype_bytes(dtypes[d]);
				uint8_t *src = malloc(count * bytes), *ref = malloc(count * bytes),
					*got = malloc(count * bytes);
				void *scratch = malloc(bytes);
				struct batchmix_rec *recs = calloc(count, sizeof(*recs));
				uint32_t *order = malloc(count * sizeof(*order));
				int64_t *labels = calloc(count, sizeof(*labels));
				float *soft = calloc(count * 2, sizeof(*soft));
				struct rng r;

				assert_true(src && ref && got && scratch && recs && order && labels && soft);
				for (size_t i = 0; i < count * bytes / sample_dtype_bytes(dtypes[d]); i++) {
					x ^= x << 13, x ^= x >> 7, x ^= x << 17;
					if (dtypes[d] == DTYPE_UINT8) {
						src[i] = (uint8_t)(x >> 32);
					} else {
						float v = (float)((double)(x >> 11) / 9007199254740992.0 * 4.0 - 2.0);

						memcpy(src + 4 * i, &v, 4);
					}
				}
				for (uint32_t b = 0; b < 6; b++) {
					rng_init(&r, 7, 0, b, RNG_BATCHMIX);
					batchmix_draw(&m, &r, count, w, h, recs);
					memcpy(ref, src, count * bytes);
					batchmix_apply(&m, recs, count, ref, dtypes[d], w, h, labels, 2, soft, scratch);
					if (count > 1 && recs[0].kind == BATCHMIX_MIXUP)
						assert_memory_not_equal(ref, src, count * bytes);
					/* the hand-out order, ascending, and shuffled ones; one thread and four */
					for (int t = 0; t < 6; t++) {
						for (uint32_t i = 0; i < count; i++)
							order[i] = t == 0 ? batchmix_order(&m, count, i) : i;
						for (uint32_t i = count; t >= 2 && i > 1; i--) {
							uint32_t j, tmp;

							x ^= x << 13, x ^= x >> 7, x ^= x << 17;
							j = (uint32_t)(x % i);
							tmp = order[i - 1], order[i - 1] = order[j], order[j] = tmp;
						}
						incremental(&m, recs, count, dtypes[d], w, h, src, got, order,
							    t < 4 ? 1 : 4);
						assert_memory_equal(ref, got, count * bytes);
					}
				}
				free(src), free(ref), free(got), free(scratch), free(recs), free(order), free(labels),
					free(soft);
			}
		}
	}
}

/* batchmix_order hands out every position once. */
static void test_order_is_a_permutation(void **state)
{
	(void)state;
	for (size_t o = 0; o < sizeof(OPS) / sizeof(OPS[0]); o++) {
		struct batchmix m;
		char err[128];

		assert_int_equal(batchmix_parse(OPS[o], &m, err, sizeof(err)), 0);
		for (uint32_t count = 1; count <= 33; count++) {
			uint8_t seen[33] = {0};

			for (uint32_t n = 0; n < count; n++) {
				uint32_t k = batchmix_order(&m, count, n);

				assert_true(k < count);
				assert_int_equal(seen[k], 0);
				seen[k] = 1;
			}
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f16c_equals_portable),
		cmocka_unit_test(test_avx2_equals_portable),
		cmocka_unit_test(test_incremental_equals_apply),
		cmocka_unit_test(test_order_is_a_permutation),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
