/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resize.h"

/*
 * The reference: the same triangle filter, in double precision and in one
 * step (no 8-bit intermediate). For output i of an axis, the filter is
 * centred on x + (i + 0.5) * scale, is max(scale, 1) wide each side, covers
 * the source pixels whose rounded bounds Pillow uses, and is normalised
 * over them.
 */
struct ref_axis {
	int first[1024], n[1024];
	size_t cap; /* taps room per output */
	double *w;  /* out * cap */
};

static void ref_axis(struct ref_axis *a, uint32_t in, double x, double len, uint32_t out)
{
	double scale = len / out, fs = scale < 1 ? 1 : scale;

	assert_true(out <= 1024);
	a->cap = (size_t)ceil(2 * fs) + 2;
	a->w = malloc(sizeof(*a->w) * out * a->cap);
	assert_non_null(a->w);
	for (uint32_t i = 0; i < out; i++) {
		double c = x + (i + 0.5) * scale, sum = 0, *w = a->w + i * a->cap;
		int lo = (int)floor(c - fs + 0.5), hi = (int)floor(c + fs + 0.5);

		lo = lo < 0 ? 0 : lo;
		hi = hi > (int)in ? (int)in : hi;
		assert_true((size_t)(hi - lo) <= a->cap);
		a->first[i] = lo;
		a->n[i] = hi - lo;
		for (int t = 0; t < hi - lo; t++) {
			double d = fabs((lo + t + 0.5 - c) / fs);

			w[t] = d < 1 ? 1 - d : 0;
			sum += w[t];
		}
		for (int t = 0; t < hi - lo; t++)
			w[t] /= sum;
	}
}

static void ref_axis_free(struct ref_axis *a)
{
	free(a->w);
	free(a);
}

/* Separably, in double precision throughout: the same sums as the 2-D filter, in another order. */
static void ref_resize(const uint8_t *src, uint32_t sw, uint32_t sh, double x, double y, double w, double h,
		       uint8_t *dst, uint32_t dw, uint32_t dh, bool flip)
{
	struct ref_axis *ax = malloc(sizeof(*ax)), *ay = malloc(sizeof(*ay));
	double *tmp = malloc(sizeof(*tmp) * sh * dw * 3);

	assert_non_null(ax);
	assert_non_null(ay);
	assert_non_null(tmp);
	ref_axis(ax, sw, x, w, dw);
	ref_axis(ay, sh, y, h, dh);
	for (uint32_t sy = 0; sy < sh; sy++)
		for (uint32_t ox = 0; ox < dw; ox++)
			for (int c = 0; c < 3; c++) {
				double s = 0;

				for (int tx = 0; tx < ax->n[ox]; tx++)
					s += ax->w[ox * ax->cap + tx] *
					     src[((size_t)sy * sw + ax->first[ox] + tx) * 3 + c];
				tmp[((size_t)sy * dw + ox) * 3 + c] = s;
			}
	for (uint32_t oy = 0; oy < dh; oy++)
		for (uint32_t ox = 0; ox < dw; ox++)
			for (int c = 0; c < 3; c++) {
				double s = 0;

				for (int ty = 0; ty < ay->n[oy]; ty++)
					s += ay->w[oy * ay->cap + ty] *
					     tmp[((size_t)(ay->first[oy] + ty) * dw + ox) * 3 + c];
				s = floor(s + 0.5);
				dst[((size_t)oy * dw + (flip ? dw - 1 - ox : ox)) * 3 + c] = (uint8_t)(s < 0     ? 0
												       : s > 255 ? 255
														 : s);
			}
	ref_axis_free(ax);
	ref_axis_free(ay);
	free(tmp);
}

static uint8_t round8(double s)
{
	s = floor(s + 0.5);
	return (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
}

/*
 * Pillow's algorithm in double precision: two passes in the given order with
 * exact weights, rounding to 8 bits in between and at the end. What the
 * resizer does but for its 14-bit weights.
 */
static void ref_resize_2pass(const uint8_t *src, uint32_t sw, uint32_t sh, double x, double y, double w, double h,
			     uint8_t *dst, uint32_t dw, uint32_t dh, bool flip, bool vertical_first)
{
	struct ref_axis *ax = malloc(sizeof(*ax)), *ay = malloc(sizeof(*ay));
	uint8_t *tmp = malloc((size_t)(vertical_first ? dh * sw : sh * dw) * 3);

	assert_non_null(ax);
	assert_non_null(ay);
	assert_non_null(tmp);
	ref_axis(ax, sw, x, w, dw);
	ref_axis(ay, sh, y, h, dh);
	if (!vertical_first) {
		for (uint32_t sy = 0; sy < sh; sy++)
			for (uint32_t ox = 0; ox < dw; ox++)
				for (int c = 0; c < 3; c++) {
					double s = 0;

					for (int tx = 0; tx < ax->n[ox]; tx++)
						s += ax->w[ox * ax->cap + tx] *
						     src[((size_t)sy * sw + ax->first[ox] + tx) * 3 + c];
					tmp[((size_t)sy * dw + ox) * 3 + c] = round8(s);
				}
		for (uint32_t oy = 0; oy < dh; oy++)
			for (uint32_t ox = 0; ox < dw; ox++)
				for (int c = 0; c < 3; c++) {
					double s = 0;

					for (int ty = 0; ty < ay->n[oy]; ty++)
						s += ay->w[oy * ay->cap + ty] *
						     tmp[((size_t)(ay->first[oy] + ty) * dw + ox) * 3 + c];
					dst[((size_t)oy * dw + (flip ? dw - 1 - ox : ox)) * 3 + c] = round8(s);
				}
	} else {
		for (uint32_t oy = 0; oy < dh; oy++)
			for (uint32_t sx = 0; sx < sw; sx++)
				for (int c = 0; c < 3; c++) {
					double s = 0;

					for (int ty = 0; ty < ay->n[oy]; ty++)
						s += ay->w[oy * ay->cap + ty] *
						     src[((size_t)(ay->first[oy] + ty) * sw + sx) * 3 + c];
					tmp[((size_t)oy * sw + sx) * 3 + c] = round8(s);
				}
		for (uint32_t oy = 0; oy < dh; oy++)
			for (uint32_t ox = 0; ox < dw; ox++)
				for (int c = 0; c < 3; c++) {
					double s = 0;

					for (int tx = 0; tx < ax->n[ox]; tx++)
						s += ax->w[ox * ax->cap + tx] *
						     tmp[((size_t)oy * sw + ax->first[ox] + tx) * 3 + c];
					dst[((size_t)oy * dw + (flip ? dw - 1 - ox : ox)) * 3 + c] = round8(s);
				}
	}
	ref_axis_free(ax);
	ref_axis_free(ay);
	free(tmp);
}

/* A smooth pattern plus noise: both the rounding and the filter shape show. */
static uint8_t *make_image(uint32_t w, uint32_t h, unsigned seed)
{
	uint8_t *p = malloc((size_t)w * h * 3);

	assert_non_null(p);
	srand(seed);
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++)
			for (int c = 0; c < 3; c++) {
				double v = 128 + 100 * sin(x * 0.13 * (c + 1) + y * 0.07) + (rand() % 41 - 20);

				p[((size_t)y * w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
			}
	return p;
}

static uint8_t *to_rgbx(const uint8_t *rgb, uint32_t w, uint32_t h)
{
	uint8_t *p = malloc((size_t)w * h * 4);

	assert_non_null(p);
	for (size_t i = 0; i < (size_t)w * h; i++) {
		memcpy(p + i * 4, rgb + i * 3, 3);
		p[i * 4 + 3] = (uint8_t)(i * 37); /* X must not matter */
	}
	return p;
}

static int max_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	int m = 0;

	for (size_t i = 0; i < n; i++) {
		int d = abs(a[i] - b[i]);

		m = d > m ? d : m;
	}
	return m;
}

static double mean_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	double s = 0;

	for (size_t i = 0; i < n; i++)
		s += abs(a[i] - b[i]);
	return n ? s / n : 0;
}

/*
 * Tolerances. Against the one-step reference: like Pillow, the resizer
 * rounds to 8 bits between its passes (at most 0.5 off, which the second
 * pass's weights, summing to 1, carry over) and again at the end, so it is
 * at most 1 off, in about 1 value in 8 (Pillow's own error). Against
 * Pillow's two-pass algorithm only the 14-bit weights differ: 1 off in
 * rare values. Means only over outputs large enough for one.
 */
#define TOL_MAX 1
#define TOL_MEAN 0.25
#define TOL_MEAN_2PASS 0.1
#define MEAN_MIN_VALUES 300

/* Across the cases run: the worst of each, for the report at the end. */
static struct {
	int max[2];
	double mean_sum[2], mean_worst[2];
	unsigned n[2];
} stats;

/* kind 0: against the one-step reference; 1: against the two-pass one */
static void check_ref(int kind, const uint8_t *ref, const uint8_t *got, size_t n)
{
	int m = max_diff(ref, got, n);
	double mean = mean_diff(ref, got, n), tol = kind ? TOL_MEAN_2PASS : TOL_MEAN;

	if (m > TOL_MAX || (n >= MEAN_MIN_VALUES && mean >= tol))
		print_error("%s reference: max |diff| %d, mean %.4f over %zu values\n", kind ? "two-pass" : "one-step",
			    m, mean, n);
	assert_true(m <= TOL_MAX);
	if (n >= MEAN_MIN_VALUES)
		assert_true(mean < tol);
	stats.max[kind] = m > stats.max[kind] ? m : stats.max[kind];
	stats.mean_sum[kind] += mean;
	stats.mean_worst[kind] = mean > stats.mean_worst[kind] && n >= MEAN_MIN_VALUES ? mean : stats.mean_worst[kind];
	stats.n[kind]++;
}

struct rcase {
	uint32_t sw, sh;
	double x, y, w, h;
	uint32_t dw, dh;
	bool flip;
};

/* The portable kernels, for checking that every kernel computes the same. */
static struct resizer *scalar;

/*
 * resize_rgb and resize_rgbx against the reference, in both orders of the
 * passes; rgb and rgbx exactly alike, and exactly what the portable kernels
 * compute. Every buffer is exactly its size, so ASan sees any access past
 * the image, and a guard after the output shows any write past it.
 */
static void check_case(struct resizer *r, const struct rcase *k, unsigned seed)
{
	if (getenv("RESIZE_TEST_VERBOSE"))
		print_message("case %ux%u (%g,%g %gx%g) -> %ux%u flip %d\n", k->sw, k->sh, k->x, k->y, k->w, k->h,
			      k->dw, k->dh, k->flip);
	uint8_t *src = make_image(k->sw, k->sh, seed), *src4 = to_rgbx(src, k->sw, k->sh);
	size_t n = (size_t)k->dw * k->dh * 3;
	uint8_t *ref = malloc(n), *got = malloc(n + 16), *got4 = malloc(n + 16), *want = malloc(n);
	bool vf = resize_vertical_first(k->sw, k->sh, k->dw, k->dh);

	assert_non_null(ref);
	assert_non_null(got);
	assert_non_null(got4);
	assert_non_null(want);
	memset(got + n, 0xA5, 16);
	memset(got4 + n, 0xA5, 16);
	ref_resize(src, k->sw, k->sh, k->x, k->y, k->w, k->h, ref, k->dw, k->dh, k->flip);
	assert_int_equal(resize_rgb(r, src, k->sw, k->sh, (size_t)k->sw * 3, k->x, k->y, k->w, k->h, got, k->dw, k->dh,
				    (size_t)k->dw * 3, k->flip),
			 0);
	check_ref(0, ref, got, n);
	ref_resize_2pass(src, k->sw, k->sh, k->x, k->y, k->w, k->h, ref, k->dw, k->dh, k->flip, vf);
	check_ref(1, ref, got, n);
	assert_int_equal(resize_rgbx(r, src4, k->sw, k->sh, (size_t)k->sw * 4, k->x, k->y, k->w, k->h, got4, k->dw,
				     k->dh, (size_t)k->dw * 3, k->flip, vf),
			 0);
	assert_memory_equal(got, got4, n);
	assert_int_equal(resize_rgbx(scalar, src4, k->sw, k->sh, (size_t)k->sw * 4, k->x, k->y, k->w, k->h, want, k->dw,
				     k->dh, (size_t)k->dw * 3, k->flip, vf),
			 0);
	assert_memory_equal(want, got4, n);
	/* the other order of passes: still the filter, within the tolerance, and the same on every kernel */
	assert_int_equal(resize_rgbx(r, src4, k->sw, k->sh, (size_t)k->sw * 4, k->x, k->y, k->w, k->h, got4, k->dw,
				     k->dh, (size_t)k->dw * 3, k->flip, !vf),
			 0);
	ref_resize_2pass(src, k->sw, k->sh, k->x, k->y, k->w, k->h, ref, k->dw, k->dh, k->flip, !vf);
	check_ref(1, ref, got4, n);
	assert_int_equal(resize_rgbx(scalar, src4, k->sw, k->sh, (size_t)k->sw * 4, k->x, k->y, k->w, k->h, want, k->dw,
				     k->dh, (size_t)k->dw * 3, k->flip, !vf),
			 0);
	assert_memory_equal(want, got4, n);
	for (int i = 0; i < 16; i++) {
		assert_int_equal(got[n + i], 0xA5); /* nothing written past the image */
		assert_int_equal(got4[n + i], 0xA5);
	}
	free(src);
	free(src4);
	free(ref);
	free(got);
	free(got4);
	free(want);
}

/* A deterministic generator for the random cases (rand() seeds the images). */
static uint64_t lcg_state;

static double lcg(void)
{
	lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(lcg_state >> 11) / (double)(1ull << 53);
}

static uint32_t lcg_range(uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)(lcg() * (hi - lo + 1));
}

/* A window of a random size inside an axis of n pixels, fractional or not, and an output size for it. */
static void random_axis(uint32_t n, bool frac, double *x, double *w, uint32_t *out)
{
	/* scale from 4x up to 8x down, log-uniform */
	double scale = exp(log(0.25) + lcg() * (log(8.0) - log(0.25)));

	if (frac) {
		*w = n * (0.05 + 0.95 * lcg());
		*x = (n - *w) * lcg();
		*w = fmin(*w, n - *x);
	} else {
		*w = lcg_range(1, n);
		*x = lcg_range(0, n - (uint32_t)*w);
	}
	*out = (uint32_t)(*w / scale + 0.5);
	*out = *out < 1 ? 1 : *out > 300 ? 300 : *out;
}

static void random_case(struct rcase *k)
{
	bool tiny = lcg() < 0.2, frac = lcg() < 0.5;

	k->sw = tiny ? lcg_range(1, 9) : lcg_range(10, 260);
	k->sh = tiny ? lcg_range(1, 9) : lcg_range(10, 260);
	random_axis(k->sw, frac, &k->x, &k->w, &k->dw);
	random_axis(k->sh, frac, &k->y, &k->h, &k->dh);
	k->flip = lcg() < 0.5;
}

static void test_downscale(void **state)
{
	struct resizer *r = *state;
	const struct rcase cases[] = {
		{270, 189, 0, 0, 270, 189, 100, 70, false},  /* 2.7x both ways */
		{500, 375, 0, 0, 500, 375, 224, 224, false}, /* ImageNet-like */
		{300, 200, 0, 0, 300, 200, 13, 9, false},    /* 23x: many taps */
		{60, 300, 0, 0, 60, 300, 50, 40, false},     /* height shrinks most: vertical pass first */
		{640, 48, 0, 0, 640, 48, 224, 24, false},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(r, &cases[i], (unsigned)i);
}

static void test_upscale(void **state)
{
	struct resizer *r = *state;
	const struct rcase cases[] = {
		{37, 23, 0, 0, 37, 23, 100, 80, false},
		{1, 1, 0, 0, 1, 1, 5, 7, false},
		{13, 9, 0, 0, 13, 9, 224, 224, false},
		{50, 120, 0, 0, 50, 120, 80, 64, false}, /* up one way, down the other */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(r, &cases[i], 10 + (unsigned)i);
}

static void test_fractional_box(void **state)
{
	struct resizer *r = *state;
	const struct rcase cases[] = {
		{64, 48, 3.25, 1.5, 40.7, 30.3, 50, 33, false},
		{500, 375, 85.0439882697947, 23.4375, 328.445747800587, 328.125, 224, 224, false},
		{100, 100, 0.1, 99.0, 0.5, 0.75, 3, 4, false}, /* a sliver, upscaled */
		{90, 70, 10.5, 20.25, 77.5, 40.0, 31, 17, true},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(r, &cases[i], 20 + (unsigned)i);
}

static void test_identity(void **state)
{
	struct resizer *r = *state;
	const uint32_t w = 57, h = 41;
	uint8_t *src = make_image(w, h, 5), *src4 = to_rgbx(src, w, h), *out = malloc((size_t)w * h * 3);

	assert_non_null(out);
	/* the whole image at its own size: an exact copy */
	assert_int_equal(resize_rgb(r, src, w, h, (size_t)w * 3, 0, 0, w, h, out, w, h, (size_t)w * 3, false), 0);
	assert_memory_equal(out, src, (size_t)w * h * 3);
	assert_int_equal(resize_rgbx(r, src4, w, h, (size_t)w * 4, 0, 0, w, h, out, w, h, (size_t)w * 3, false, false),
			 0);
	assert_memory_equal(out, src, (size_t)w * h * 3);

	/* an integer window at its own size: exactly that window */
	assert_int_equal(resize_rgb(r, src, w, h, (size_t)w * 3, 7, 3, 20, 30, out, 20, 30, 20 * 3, false), 0);
	for (uint32_t y = 0; y < 30; y++)
		assert_memory_equal(out + (size_t)y * 60, src + ((size_t)(y + 3) * w + 7) * 3, 60);
	/* the same, reaching the far edges */
	assert_int_equal(resize_rgb(r, src, w, h, (size_t)w * 3, w - 1, h - 1, 1, 1, out, 1, 1, 3, false), 0);
	assert_memory_equal(out, src + ((size_t)h * w - 1) * 3, 3);
	free(src);
	free(src4);
	free(out);
}

static void test_flip(void **state)
{
	struct resizer *r = *state;
	const struct rcase cases[] = {
		{270, 189, 0, 0, 270, 189, 100, 70, true},
		{37, 23, 0, 0, 37, 23, 100, 80, true},
		{57, 41, 0, 0, 57, 41, 57, 41, true}, /* identity geometry, mirrored */
	};
	const uint32_t w = 31, h = 5;
	uint8_t *src = make_image(w, h, 9), *out = malloc((size_t)w * h * 3);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(r, &cases[i], 30 + (unsigned)i);

	/* and plainly: a mirrored copy */
	assert_non_null(out);
	assert_int_equal(resize_rgb(r, src, w, h, (size_t)w * 3, 0, 0, w, h, out, w, h, (size_t)w * 3, true), 0);
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++)
			assert_memory_equal(out + ((size_t)y * w + x) * 3, src + ((size_t)y * w + w - 1 - x) * 3, 3);
	free(src);
	free(out);
}

/* Strides wider than the rows; the padding is neither read as pixels nor written. */
static void test_strides(void **state)
{
	struct resizer *r = *state;
	const uint32_t sw = 45, sh = 33, dw = 20, dh = 14;
	const size_t ss = sw * 3 + 11, ds = dw * 3 + 7;
	uint8_t *tight = make_image(sw, sh, 3), *wide = malloc(ss * sh), *a = malloc((size_t)dw * dh * 3),
		*b = malloc(ds * dh);

	assert_non_null(wide);
	assert_non_null(a);
	assert_non_null(b);
	memset(wide, 0xFF, ss * sh);
	memset(b, 0x5A, ds * dh);
	for (uint32_t y = 0; y < sh; y++)
		memcpy(wide + y * ss, tight + (size_t)y * sw * 3, (size_t)sw * 3);
	assert_int_equal(resize_rgb(r, tight, sw, sh, (size_t)sw * 3, 1.5, 2, 40, 30, a, dw, dh, (size_t)dw * 3, true),
			 0);
	assert_int_equal(resize_rgb(r, wide, sw, sh, ss, 1.5, 2, 40, 30, b, dw, dh, ds, true), 0);
	for (uint32_t y = 0; y < dh; y++) {
		assert_memory_equal(a + (size_t)y * dw * 3, b + y * ds, (size_t)dw * 3);
		for (size_t i = (size_t)dw * 3; i < ds; i++)
			assert_int_equal(b[y * ds + i], 0x5A);
	}
	free(tight);
	free(wide);
	free(a);
	free(b);
}

/* The tables are cached by geometry: switching back and forth gives the same pixels. */
static void test_cache(void **state)
{
	struct resizer *r = *state;
	const uint32_t w = 120, h = 90;
	uint8_t *src = make_image(w, h, 4), *a = malloc(50 * 40 * 3), *b = malloc(50 * 40 * 3),
		*c = malloc(64 * 64 * 3);

	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(c);
	assert_int_equal(resize_rgb(r, src, w, h, w * 3, 3, 4, 100, 80, a, 50, 40, 150, false), 0);
	assert_int_equal(resize_rgb(r, src, w, h, w * 3, 0, 0, w, h, c, 64, 64, 64 * 3, false), 0);
	assert_int_equal(resize_rgb(r, src, w, h, w * 3, 3.5, 4, 100, 80, b, 50, 40, 150, false), 0);
	assert_memory_not_equal(a, b, 50 * 40 * 3); /* a half-pixel shift shows */
	assert_int_equal(resize_rgb(r, src, w, h, w * 3, 3, 4, 100, 80, b, 50, 40, 150, false), 0);
	assert_memory_equal(a, b, 50 * 40 * 3);
	free(src);
	free(a);
	free(b);
	free(c);
}

/* Resampling just the span resize_span() names, window moved, matches resampling the whole. */
static void test_span(void **state)
{
	struct resizer *r = *state;
	const uint32_t w = 200, h = 150, ow = 37, oh = 29;
	const double x = 33.7, y = 20.2, cw = 101.3, ch = 88.9;
	uint8_t *src = make_image(w, h, 8), *a = malloc(ow * oh * 3), *b = malloc(ow * oh * 3);
	uint32_t x0, x1, y0, y1;

	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(resize_span(w, x, cw, ow, &x0, &x1), 0);
	assert_int_equal(resize_span(h, y, ch, oh, &y0, &y1), 0);
	assert_true(x0 <= floor(x) && x1 >= ceil(x + cw) && x1 <= w);
	assert_true(y0 <= floor(y) && y1 >= ceil(y + ch) && y1 <= h);
	assert_true(x0 > 0 && x1 < w); /* or this test proves nothing */
	assert_int_equal(resize_rgb(r, src, w, h, w * 3, x, y, cw, ch, a, ow, oh, ow * 3, false), 0);
	assert_int_equal(resize_rgb(r, src + ((size_t)y0 * w + x0) * 3, x1 - x0, y1 - y0, w * 3, x - x0, y - y0, cw, ch,
				    b, ow, oh, ow * 3, false),
			 0);
	assert_true(max_diff(a, b, ow * oh * 3) <= 1);
	free(src);
	free(a);
	free(b);
}

/* Pillow 13's rule; the cases were checked against Pillow 13.0.0's output. */
static void test_pass_order(void **state)
{
	(void)state;
	assert_true(resize_vertical_first(60, 300, 50, 40));     /* 260 > 2 * 10 */
	assert_true(resize_vertical_first(31, 76, 78, 61));      /* width grows */
	assert_false(resize_vertical_first(500, 375, 224, 224)); /* 151 < 2 * 276 */
	assert_false(resize_vertical_first(59, 33, 12, 56));     /* height grows */
	assert_false(resize_vertical_first(32, 58, 63, 58));     /* height kept */
	assert_false(resize_vertical_first(100, 130, 90, 115));  /* 15 < 2 * 10 */
	assert_true(resize_vertical_first(100, 131, 90, 110));   /* 21 > 20 */
}

static void test_bad_args(void **state)
{
	struct resizer *r = *state;
	uint8_t src[10 * 10 * 3] = {0}, dst[10 * 10 * 3];
	uint32_t f, e;

	assert_int_equal(resize_rgb(NULL, src, 10, 10, 30, 0, 0, 10, 10, dst, 5, 5, 15, false), -EINVAL);
	assert_int_equal(resize_rgb(r, NULL, 10, 10, 30, 0, 0, 10, 10, dst, 5, 5, 15, false), -EINVAL);
	assert_int_equal(resize_rgb(r, src, 10, 10, 30, 0, 0, 10, 10, NULL, 5, 5, 15, false), -EINVAL);
	assert_int_equal(resize_rgb(r, src, 0, 10, 30, 0, 0, 10, 10, dst, 5, 5, 15, false), -EINVAL);
	assert_int_equal(resize_rgb(r, src, 10, 10, 30, 0, 0, 10, 10, dst, 0, 5, 15, false), -EINVAL);
	assert_int_equal(resize_rgb(r, src, 10, 10, 30, 0, 0, 10, 10, dst, 5, 0, 15, false), -EINVAL);
	assert_int_equal(resize_rgb(r, src, 10, 10, 29, 0, 0, 10, 10, dst, 5, 5, 15, false), -EINVAL);
	assert_int_equal(resize_rgb(r, src, 10, 10, 30, 0, 0, 10, 10, dst, 5, 5, 14, false), -EINVAL);
	assert_int_equal(resize_rgb(r, src, 10, 10, 30, -0.5, 0, 5, 5, dst, 5, 5, 15, false), -EINVAL);
	assert_int_equal(resize_rgb(r, src, 10, 10, 30, 0, 0, 10.5, 10, dst, 5, 5, 15, false), -EINVAL);
	assert_int_equal(resize_rgb(r, src, 10, 10, 30, 6, 6, 5, 5, dst, 5, 5, 15, false), -EINVAL);
	assert_int_equal(resize_rgb(r, src, 10, 10, 30, 0, 0, 0, 10, dst, 5, 5, 15, false), -EINVAL);
	assert_int_equal(resize_rgb(r, src, 10, 10, 30, NAN, 0, 5, 5, dst, 5, 5, 15, false), -EINVAL);
	assert_int_equal(resize_rgb(r, src, 10, 10, 30, 0, 0, INFINITY, 5, dst, 5, 5, 15, false), -EINVAL);
	assert_int_equal(resize_rgbx(r, src, 10, 10, 39, 0, 0, 10, 10, dst, 5, 5, 15, false, false), -EINVAL);
	assert_int_equal(resize_span(10, 0, 11, 5, &f, &e), -EINVAL);
	assert_int_equal(resize_span(10, 0, 5, 0, &f, &e), -EINVAL);
	assert_int_equal(resize_span(10, 0, 5, 5, NULL, &e), -EINVAL);
	assert_int_equal(resizer_new(NULL), -EINVAL);
	resizer_free(NULL);
	/* and still usable afterwards */
	assert_int_equal(resize_rgb(r, src, 10, 10, 30, 0, 0, 10, 10, dst, 5, 5, 15, false), 0);
}

/* Random geometries: 4x up to 8x down, fractional and whole windows, flips, tiny images, odd widths. */
static void test_random(void **state)
{
	struct resizer *r = *state;

	lcg_state = 12345;
	for (unsigned i = 0; i < 150; i++) {
		struct rcase k;

		random_case(&k);
		check_case(r, &k, 100 + i);
	}
}

/* Sources narrower than the filter (odd tap counts, the SIMD kernels' fallbacks), slivers, single pixels. */
static void test_tiny(void **state)
{
	struct resizer *r = *state;
	const struct rcase cases[] = {
		{1, 1, 0, 0, 1, 1, 1, 1, false},
		{1, 1, 0, 0, 1, 1, 7, 3, true},
		{2, 2, 0, 0, 2, 2, 1, 1, false},
		{3, 1, 0, 0, 3, 1, 2, 5, true},
		{3, 3, 0, 0, 3, 3, 1, 1, false}, /* 3 taps of 3 pixels */
		{5, 5, 0.5, 0.5, 0.1, 0.1, 1, 1, false},
		{9, 9, 0, 0, 9, 9, 1, 1, true}, /* 9 taps */
		{1, 300, 0, 0, 1, 300, 1, 13, false},
		{300, 1, 0, 0, 300, 1, 13, 1, true},
		{7, 5, 1.5, 0.25, 5, 4.5, 33, 17, true},
		{11, 13, 0, 0, 11, 13, 5, 6, false}, /* rows of 15 and 33 bytes: shorter than a vector */
		{4, 4, 0, 0, 4, 4, 3, 3, true},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(r, &cases[i], 40 + (unsigned)i);
}

/* Hundreds to thousands of taps an output (far beyond what the daemon asks for). */
static void test_extreme(void **state)
{
	struct resizer *r = *state;
	const struct rcase cases[] = {
		{2400, 3, 0, 0, 2400, 3, 3, 2, false},  /* 800x */
		{3, 2000, 0.5, 0, 2, 2000, 2, 1, true}, /* 2000x */
		{600, 400, 0, 0, 600, 400, 3, 2, true}, /* 200x both ways */
		{2, 2, 0, 0, 2, 2, 300, 300, false},    /* 150x up */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(r, &cases[i], 60 + (unsigned)i);
}

/* The weights of each output sum to exactly 1: a flat image stays exactly flat, at every level. */
static void test_flat(void **state)
{
	struct resizer *r = *state;
	const uint8_t levels[] = {0, 1, 77, 128, 254, 255};

	lcg_state = 777;
	for (unsigned i = 0; i < 40; i++) {
		struct rcase k;
		uint8_t v = levels[i % (sizeof(levels) / sizeof(levels[0]))];
		uint8_t *src, *out;
		size_t n;

		random_case(&k);
		n = (size_t)k.dw * k.dh * 3;
		src = malloc((size_t)k.sw * k.sh * 4);
		out = malloc(n);
		assert_non_null(src);
		assert_non_null(out);
		memset(src, v, (size_t)k.sw * k.sh * 4);
		for (int order = 0; order < 2; order++) {
			assert_int_equal(resize_rgbx(r, src, k.sw, k.sh, (size_t)k.sw * 4, k.x, k.y, k.w, k.h, out,
						     k.dw, k.dh, (size_t)k.dw * 3, k.flip, order),
					 0);
			for (size_t j = 0; j < n; j++)
				assert_int_equal(out[j], v);
		}
		free(src);
		free(out);
	}
}

/* 4-byte sources with padded rows: what lies past a row's width never counts, nor the X bytes. */
static void test_rgbx_strides(void **state)
{
	struct resizer *r = *state;
	const uint32_t sw = 83, sh = 61, dw = 37, dh = 29;
	const size_t ss = sw * 4 + 36;
	uint8_t *rgb = make_image(sw, sh, 6), *tight = to_rgbx(rgb, sw, sh), *wide = malloc(ss * sh);
	uint8_t *a = malloc((size_t)dw * dh * 3), *b = malloc((size_t)dw * dh * 3);

	assert_non_null(wide);
	assert_non_null(a);
	assert_non_null(b);
	memset(wide, 0xFF, ss * sh);
	for (uint32_t y = 0; y < sh; y++) {
		memcpy(wide + y * ss, tight + (size_t)y * sw * 4, (size_t)sw * 4);
		for (uint32_t x = 0; x < sw; x++)
			wide[y * ss + x * 4 + 3] = (uint8_t)(255 - x); /* other X bytes than in `tight` */
	}
	for (int order = 0; order < 2; order++)
		for (int flip = 0; flip < 2; flip++) {
			assert_int_equal(resize_rgbx(r, tight, sw, sh, (size_t)sw * 4, 2.5, 1, 78, 59.5, a, dw, dh,
						     (size_t)dw * 3, flip, order),
					 0);
			assert_int_equal(resize_rgbx(r, wide, sw, sh, ss, 2.5, 1, 78, 59.5, b, dw, dh, (size_t)dw * 3,
						     flip, order),
					 0);
			assert_memory_equal(a, b, (size_t)dw * dh * 3);
		}
	free(rgb);
	free(tight);
	free(wide);
	free(a);
	free(b);
}

static enum resize_isa group_isa; /* the kernels the group running now is for */

static void test_isa(void **state)
{
	struct resizer *r = *state, *other;

	assert_int_equal(resizer_isa(r), group_isa);
	assert_int_equal(resize_force_isa((enum resize_isa)99), -ENOTSUP);
	assert_int_equal(resize_force_isa(RESIZE_ISA_AUTO), 0);
	assert_int_equal(resizer_new(&other), 0);
	assert_true(resizer_isa(other) != RESIZE_ISA_AUTO);
	resizer_free(other);
	assert_int_equal(resize_force_isa(group_isa), 0);
}

static int setup(void **state)
{
	struct resizer *r;

	if (resizer_new(&r) < 0)
		return -1;
	if (resizer_isa(r) != group_isa) {
		resizer_free(r);
		return -1;
	}
	*state = r;
	return 0;
}

static int teardown(void **state)
{
	resizer_free(*state);
	return 0;
}

/* The whole suite once for each set of kernels this CPU runs. */
int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_downscale), cmocka_unit_test(test_upscale), cmocka_unit_test(test_fractional_box),
		cmocka_unit_test(test_identity),  cmocka_unit_test(test_flip),    cmocka_unit_test(test_strides),
		cmocka_unit_test(test_cache),     cmocka_unit_test(test_span),    cmocka_unit_test(test_pass_order),
		cmocka_unit_test(test_bad_args),  cmocka_unit_test(test_random),  cmocka_unit_test(test_tiny),
		cmocka_unit_test(test_extreme),   cmocka_unit_test(test_flat),    cmocka_unit_test(test_rgbx_strides),
		cmocka_unit_test(test_isa),
	};
	const struct {
		enum resize_isa isa;
		const char *name;
	} isas[] = {
		{RESIZE_ISA_SCALAR, "resize (portable kernels)"},
		{RESIZE_ISA_SSE2, "resize (SSE2 kernels)"},
		{RESIZE_ISA_AVX2, "resize (AVX2 kernels)"},
		{RESIZE_ISA_AVX512, "resize (AVX-512 kernels)"},
	};
	int failed = 0;

	if (resize_force_isa(RESIZE_ISA_SCALAR) < 0 || resizer_new(&scalar) < 0)
		return 1;
	for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
		if (resize_force_isa(isas[i].isa) < 0) {
			printf("[ SKIPPED  ] %s: not on this CPU\n", isas[i].name);
			continue;
		}
		group_isa = isas[i].isa;
		failed += cmocka_run_group_tests_name(isas[i].name, tests, setup, teardown);
	}
	resize_force_isa(RESIZE_ISA_AUTO);
	resizer_free(scalar);
	printf("max |diff|, and mean |diff| (average, worst), of %u resizes against the one-step double-precision\n"
	       "reference: %d, %.4f, %.4f; of %u against Pillow's two-pass algorithm in double precision: %d, %.4f, "
	       "%.4f\n",
	       stats.n[0], stats.max[0], stats.n[0] ? stats.mean_sum[0] / stats.n[0] : 0.0, stats.mean_worst[0],
	       stats.n[1], stats.max[1], stats.n[1] ? stats.mean_sum[1] / stats.n[1] : 0.0, stats.mean_worst[1]);
	return failed;
}
