/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
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
#define REF_MAX_TAPS 256

struct ref_axis {
	int first[1024], n[1024];
	double w[1024][REF_MAX_TAPS];
};

static void ref_axis(struct ref_axis *a, uint32_t in, double x, double len, uint32_t out)
{
	double scale = len / out, fs = scale < 1 ? 1 : scale;

	assert_true(out <= 1024);
	for (uint32_t i = 0; i < out; i++) {
		double c = x + (i + 0.5) * scale, sum = 0;
		int lo = (int)floor(c - fs + 0.5), hi = (int)floor(c + fs + 0.5);

		lo = lo < 0 ? 0 : lo;
		hi = hi > (int)in ? (int)in : hi;
		assert_true(hi - lo <= REF_MAX_TAPS);
		a->first[i] = lo;
		a->n[i] = hi - lo;
		for (int t = 0; t < hi - lo; t++) {
			double d = fabs((lo + t + 0.5 - c) / fs);

			a->w[i][t] = d < 1 ? 1 - d : 0;
			sum += a->w[i][t];
		}
		for (int t = 0; t < hi - lo; t++)
			a->w[i][t] /= sum;
	}
}

static void ref_resize(const uint8_t *src, uint32_t sw, uint32_t sh, double x, double y, double w, double h,
		       uint8_t *dst, uint32_t dw, uint32_t dh, bool flip)
{
	struct ref_axis *ax = malloc(sizeof(*ax)), *ay = malloc(sizeof(*ay));

	assert_non_null(ax);
	assert_non_null(ay);
	ref_axis(ax, sw, x, w, dw);
	ref_axis(ay, sh, y, h, dh);
	for (uint32_t oy = 0; oy < dh; oy++)
		for (uint32_t ox = 0; ox < dw; ox++)
			for (int c = 0; c < 3; c++) {
				double s = 0;

				for (int ty = 0; ty < ay->n[oy]; ty++)
					for (int tx = 0; tx < ax->n[ox]; tx++)
						s += ay->w[oy][ty] * ax->w[ox][tx] *
						     src[((size_t)(ay->first[oy] + ty) * sw + ax->first[ox] + tx) * 3 + c];
				s = floor(s + 0.5);
				dst[((size_t)oy * dw + (flip ? dw - 1 - ox : ox)) * 3 + c] =
					(uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
			}
	free(ax);
	free(ay);
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

struct rcase {
	uint32_t sw, sh;
	double x, y, w, h;
	uint32_t dw, dh;
	bool flip;
};

/* resize_rgb and resize_rgbx against the reference, within 1; rgb and rgbx exactly alike. */
static void check_case(struct resizer *r, const struct rcase *k, unsigned seed)
{
	uint8_t *src = make_image(k->sw, k->sh, seed), *src4 = to_rgbx(src, k->sw, k->sh);
	size_t n = (size_t)k->dw * k->dh * 3;
	uint8_t *ref = malloc(n), *got = malloc(n + 16), *got4 = malloc(n);

	assert_non_null(ref);
	assert_non_null(got);
	assert_non_null(got4);
	memset(got + n, 0xA5, 16);
	ref_resize(src, k->sw, k->sh, k->x, k->y, k->w, k->h, ref, k->dw, k->dh, k->flip);
	assert_int_equal(resize_rgb(r, src, k->sw, k->sh, (size_t)k->sw * 3, k->x, k->y, k->w, k->h, got, k->dw,
				    k->dh, (size_t)k->dw * 3, k->flip),
			 0);
	assert_true(max_diff(ref, got, n) <= 1);
	for (int i = 0; i < 16; i++)
		assert_int_equal(got[n + i], 0xA5); /* nothing written past the image */
	assert_int_equal(resize_rgbx(r, src4, k->sw, k->sh, (size_t)k->sw * 4, k->x, k->y, k->w, k->h, got4, k->dw,
				     k->dh, (size_t)k->dw * 3, k->flip, resize_vertical_first(k->sw, k->sh, k->dw, k->dh)),
			 0);
	assert_memory_equal(got, got4, n);
	/* the other order of passes: still the filter, within 1 */
	assert_int_equal(resize_rgbx(r, src4, k->sw, k->sh, (size_t)k->sw * 4, k->x, k->y, k->w, k->h, got4, k->dw,
				     k->dh, (size_t)k->dw * 3, k->flip, !resize_vertical_first(k->sw, k->sh, k->dw, k->dh)),
			 0);
	assert_true(max_diff(ref, got4, n) <= 1);
	free(src);
	free(src4);
	free(ref);
	free(got);
	free(got4);
}

static void test_downscale(void **state)
{
	struct resizer *r = *state;
	const struct rcase cases[] = {
		{ 270, 189, 0, 0, 270, 189, 100, 70, false },    /* 2.7x both ways */
		{ 500, 375, 0, 0, 500, 375, 224, 224, false },   /* ImageNet-like */
		{ 300, 200, 0, 0, 300, 200, 13, 9, false },      /* 23x: many taps */
		{ 60, 300, 0, 0, 60, 300, 50, 40, false },       /* height shrinks most: vertical pass first */
		{ 640, 48, 0, 0, 640, 48, 224, 24, false },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(r, &cases[i], (unsigned)i);
}

static void test_upscale(void **state)
{
	struct resizer *r = *state;
	const struct rcase cases[] = {
		{ 37, 23, 0, 0, 37, 23, 100, 80, false },
		{ 1, 1, 0, 0, 1, 1, 5, 7, false },
		{ 13, 9, 0, 0, 13, 9, 224, 224, false },
		{ 50, 120, 0, 0, 50, 120, 80, 64, false }, /* up one way, down the other */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(r, &cases[i], 10 + (unsigned)i);
}

static void test_fractional_box(void **state)
{
	struct resizer *r = *state;
	const struct rcase cases[] = {
		{ 64, 48, 3.25, 1.5, 40.7, 30.3, 50, 33, false },
		{ 500, 375, 85.0439882697947, 23.4375, 328.445747800587, 328.125, 224, 224, false },
		{ 100, 100, 0.1, 99.0, 0.5, 0.75, 3, 4, false }, /* a sliver, upscaled */
		{ 90, 70, 10.5, 20.25, 77.5, 40.0, 31, 17, true },
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
	assert_int_equal(resize_rgbx(r, src4, w, h, (size_t)w * 4, 0, 0, w, h, out, w, h, (size_t)w * 3, false, false), 0);
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
		{ 270, 189, 0, 0, 270, 189, 100, 70, true },
		{ 37, 23, 0, 0, 37, 23, 100, 80, true },
		{ 57, 41, 0, 0, 57, 41, 57, 41, true }, /* identity geometry, mirrored */
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
	assert_int_equal(resize_rgb(r, tight, sw, sh, (size_t)sw * 3, 1.5, 2, 40, 30, a, dw, dh, (size_t)dw * 3, true), 0);
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
	uint8_t *src = make_image(w, h, 4), *a = malloc(50 * 40 * 3), *b = malloc(50 * 40 * 3), *c = malloc(64 * 64 * 3);

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
	assert_int_equal(resize_rgb(r, src + ((size_t)y0 * w + x0) * 3, x1 - x0, y1 - y0, w * 3, x - x0, y - y0, cw,
				    ch, b, ow, oh, ow * 3, false),
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
	uint8_t src[10 * 10 * 3] = { 0 }, dst[10 * 10 * 3];
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

static int setup(void **state)
{
	struct resizer *r;

	if (resizer_new(&r) < 0)
		return -1;
	*state = r;
	return 0;
}

static int teardown(void **state)
{
	resizer_free(*state);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_downscale), cmocka_unit_test(test_upscale), cmocka_unit_test(test_fractional_box),
		cmocka_unit_test(test_identity),  cmocka_unit_test(test_flip),    cmocka_unit_test(test_strides),
		cmocka_unit_test(test_cache),     cmocka_unit_test(test_span),    cmocka_unit_test(test_pass_order),
		cmocka_unit_test(test_bad_args),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
