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

#include "detect.h"

/* detect.c's test hooks (not in detect.h): the kernels of detects created next, and its arithmetic check */
#define ISA_AUTO 0
#define ISA_SCALAR 1
#define ISA_AVX2 2
#define ISA_AVX512 3

static int isa_avx2 = ISA_AVX2, isa_avx512 = ISA_AVX512;
int detect_force_isa(int isa);
long detect_check_arith(void);
int detect_hsv_kernel(int kernel, const double gain[3], uint8_t *image, size_t pixels);

/*
 * A fake data set over synthetic images: a background with solid-colour
 * rectangles, each with its box. detect.c's contract is the loader
 * callback, so this exercises it fully. Samples are rendered at the
 * requested long side as load_image would give them, and each rectangle's
 * box is exactly its pixels at that size.
 */
#define MAX_SAMPLES 64
#define RECTS 3
#define SIZE 256u
#define MAX_BOXES 64u

struct fake_rect {
	double x1, y1, x2, y2; /* normalised */
};

struct fake_sample {
	uint32_t aw, ah; /* aspect, as the original size */
	uint8_t bg[3];
	int nrect;
	struct fake_rect rect[RECTS];
};

struct fake {
	struct fake_sample s[MAX_SAMPLES];
	uint64_t count;
	const uint8_t *raw; /* else rendered: raw pixels of raw_w x raw_h for every index */
	uint32_t raw_w, raw_h;
	bool raw_stable; /* raw samples say they are stable (rendered ones share f->pix: never) */
	bool fail[MAX_SAMPLES];
	int fail_errno;
	bool fail_all_after_first; /* every call after the first fails */
	uint64_t loaded[64];
	int nloaded, calls;
	uint8_t *pix;
	struct detect_box boxes[RECTS];
};

/* Rectangle colours on the moment curve (t, t^2, t^3): none lies between two others. */
static void rect_colour(uint64_t index, int k, uint8_t rgb[3])
{
	double t = (double)(index * RECTS + (uint64_t)k + 1) / (MAX_SAMPLES * RECTS + 1);

	rgb[0] = (uint8_t)lround(30 + 220 * t);
	rgb[1] = (uint8_t)lround(30 + 220 * t * t);
	rgb[2] = (uint8_t)lround(250 - 220 * t * t * t);
}

static float rect_class(uint64_t index, int k)
{
	return (float)(index * RECTS + (uint64_t)k);
}

static int fake_load(void *ctx, uint64_t index, uint32_t side, struct detect_sample *out)
{
	struct fake *f = ctx;
	const struct fake_sample *s;
	uint32_t w, h;
	double r;

	assert_true(index < f->count);
	if (f->nloaded < 64)
		f->loaded[f->nloaded++] = index;
	if ((f->fail_all_after_first && f->calls++ > 0) || f->fail[index])
		return -f->fail_errno;
	if (f->raw) {
		*out = (struct detect_sample){.pixels = f->raw,
					      .width = f->raw_w,
					      .height = f->raw_h,
					      .stable = f->raw_stable};
		return 0;
	}
	s = &f->s[index];
	/* load_image: r = side / max(w0, h0), each side min(ceil(side0 * r), side) */
	r = (double)side / (s->aw > s->ah ? s->aw : s->ah);
	w = (uint32_t)fmin(ceil(s->aw * r), side);
	h = (uint32_t)fmin(ceil(s->ah * r), side);
	for (size_t i = 0; i < (size_t)w * h; i++)
		memcpy(f->pix + i * 3, s->bg, 3);
	for (int k = 0; k < s->nrect; k++) {
		const struct fake_rect *q = &s->rect[k];
		long x1 = lround(q->x1 * w), x2 = lround(q->x2 * w), y1 = lround(q->y1 * h), y2 = lround(q->y2 * h);
		uint8_t c[3];

		rect_colour(index, k, c);
		for (long y = y1; y < y2; y++)
			for (long x = x1; x < x2; x++)
				memcpy(f->pix + ((size_t)y * w + (size_t)x) * 3, c, 3);
		f->boxes[k] = (struct detect_box){rect_class(index, k), (float)((x1 + x2) / 2.0 / w),
						  (float)((y1 + y2) / 2.0 / h), (float)((double)(x2 - x1) / w),
						  (float)((double)(y2 - y1) / h)};
	}
	*out = (struct detect_sample){.pixels = f->pix,
				      .width = w,
				      .height = h,
				      .boxes = f->boxes,
				      .box_count = (uint32_t)s->nrect};
	return 0;
}

/* A reproducible data set of `count` samples: varied aspects, large rectangles. */
static struct fake *fake_new(uint64_t count)
{
	struct fake *f = calloc(1, sizeof(*f));
	uint32_t st = 12345;

	assert_non_null(f);
	assert_true(count <= MAX_SAMPLES);
	f->count = count;
	f->fail_errno = EIO;
	f->pix = malloc((size_t)SIZE * SIZE * 3);
	assert_non_null(f->pix);
	for (uint64_t i = 0; i < count; i++) {
		struct fake_sample *s = &f->s[i];

		s->aw = 400 + (uint32_t)(i * 37 % 300);
		s->ah = 300 + (uint32_t)(i * 53 % 350);
		s->bg[0] = (uint8_t)(5 + i % 7);
		s->bg[1] = (uint8_t)(5 + i % 5);
		s->bg[2] = (uint8_t)(5 + i % 3);
		s->nrect = RECTS;
		/* three rectangles side by side, each a third of the width at most */
		for (int k = 0; k < RECTS; k++) {
			double u;

			st = st * 1103515245u + 12345u;
			u = (st >> 8) / 16777216.0;
			s->rect[k].x1 = k / 3.0 + 0.02 + 0.05 * u;
			s->rect[k].x2 = (k + 1) / 3.0 - 0.02 - 0.05 * u;
			s->rect[k].y1 = 0.05 + 0.3 * u;
			s->rect[k].y2 = s->rect[k].y1 + 0.3 + 0.3 * (1 - u);
		}
	}
	return f;
}

static void fake_free(struct fake *f)
{
	free(f->pix);
	free(f);
}

static struct detect_params zero_params(void)
{
	struct detect_params p;

	detect_params_default(&p);
	p.hsv_h = p.hsv_s = p.hsv_v = 0;
	p.degrees = p.translate = p.scale = p.shear = p.perspective = 0;
	p.flipud = p.fliplr = 0;
	p.mosaic = p.mixup = 0;
	return p;
}

struct out {
	uint8_t image[SIZE * SIZE * 3];
	float boxes[MAX_BOXES * DETECT_BOX_FLOATS];
	uint32_t n;
	uint64_t dropped;
};

static int run(struct detect *d, enum detect_transform t, const struct detect_params *p, uint64_t seed, uint64_t index,
	       struct fake *f, struct out *o)
{
	struct rng rng;

	rng_init(&rng, seed, 0, index, RNG_AUGMENT);
	f->nloaded = 0;
	f->calls = 0;
	return detect_run(d, t, p, SIZE, index, f->count, &rng, fake_load, f, o->image, o->boxes, MAX_BOXES, &o->n,
			  &o->dropped);
}

/* Bounding box [x0, x1) x [y0, y1) of the pixels of colour c; rows and columns need 2 such pixels, so a
 * stray blend that happens to hit the colour does not count. false when there are none. */
static bool colour_bbox(const uint8_t *img, const uint8_t c[3], double bb[4])
{
	static int rows[SIZE], cols[SIZE];
	int x0 = SIZE, x1 = -1, y0 = SIZE, y1 = -1;

	memset(rows, 0, sizeof(rows));
	memset(cols, 0, sizeof(cols));
	for (uint32_t y = 0; y < SIZE; y++)
		for (uint32_t x = 0; x < SIZE; x++)
			if (!memcmp(img + ((size_t)y * SIZE + x) * 3, c, 3)) {
				rows[y]++;
				cols[x]++;
			}
	for (int i = 0; i < (int)SIZE; i++) {
		if (rows[i] >= 2) {
			y0 = i < y0 ? i : y0;
			y1 = i > y1 ? i : y1;
		}
		if (cols[i] >= 2) {
			x0 = i < x0 ? i : x0;
			x1 = i > x1 ? i : x1;
		}
	}
	if (x1 < 0 || y1 < 0)
		return false;
	bb[0] = x0;
	bb[1] = y0;
	bb[2] = x1 + 1;
	bb[3] = y1 + 1;
	return true;
}

static double iou(const double a[4], const double b[4])
{
	double iw = fmin(a[2], b[2]) - fmax(a[0], b[0]), ih = fmin(a[3], b[3]) - fmax(a[1], b[1]);
	double inter = iw > 0 && ih > 0 ? iw * ih : 0;
	double u = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;

	return inter / u;
}

static void box_pixels(const float *row, double bb[4])
{
	bb[0] = (row[2] - row[4] / 2) * SIZE;
	bb[1] = (row[3] - row[5] / 2) * SIZE;
	bb[2] = (row[2] + row[4] / 2) * SIZE;
	bb[3] = (row[3] + row[5] / 2) * SIZE;
}

static void assert_boxes_inside(const struct out *o)
{
	for (uint32_t i = 0; i < o->n; i++) {
		const float *b = o->boxes + (size_t)i * DETECT_BOX_FLOATS;

		assert_true(b[0] == 0.0f);
		assert_true(b[4] > 0 && b[5] > 0);
		assert_true(b[2] - b[4] / 2 >= -1e-6f && b[2] + b[4] / 2 <= 1 + 1e-6f);
		assert_true(b[3] - b[5] / 2 >= -1e-6f && b[3] + b[5] / 2 <= 1 + 1e-6f);
	}
}

/* ---- tests ---- */

/* LetterBox: centred, 114 around, boxes exactly on the rectangles' pixels. */
static void test_letterbox_geometry(void **state)
{
	struct detect *d;
	struct fake *f = fake_new(4);
	struct out *o = calloc(1, sizeof(*o));

	(void)state;
	assert_int_equal(detect_new(&d), 0);
	/* wide (2:1, even padding), tall (odd padding), and square */
	f->s[0].aw = 800, f->s[0].ah = 400;
	f->s[1].aw = 301, f->s[1].ah = 500;
	f->s[2].aw = 500, f->s[2].ah = 500;
	for (uint64_t idx = 0; idx < 3; idx++) {
		const struct fake_sample *s = &f->s[idx];
		double r = (double)SIZE / (s->aw > s->ah ? s->aw : s->ah);
		uint32_t w = (uint32_t)fmin(ceil(s->aw * r), SIZE), h = (uint32_t)fmin(ceil(s->ah * r), SIZE);
		/* round(dw - 0.1) with dw = (SIZE - w) / 2 */
		uint32_t left = (SIZE - w) / 2, top = (SIZE - h) / 2;

		assert_int_equal(run(d, DETECT_LETTERBOX, NULL, 0, idx, f, o), 0);
		assert_int_equal(o->n, RECTS);
		for (uint32_t y = 0; y < SIZE; y++)
			for (uint32_t x = 0; x < SIZE; x++) {
				const uint8_t *p = o->image + ((size_t)y * SIZE + x) * 3;
				bool inside = x >= left && x < left + w && y >= top && y < top + h;

				if (!inside)
					assert_true(p[0] == 114 && p[1] == 114 && p[2] == 114);
				else
					assert_false(p[0] == 114 && p[1] == 114 && p[2] == 114);
			}
		for (int k = 0; k < RECTS; k++) {
			const float *b = o->boxes + (size_t)k * DETECT_BOX_FLOATS;
			uint8_t c[3];
			double bb[4], px[4];

			assert_true(b[1] == rect_class(idx, k));
			rect_colour(idx, k, c);
			assert_true(colour_bbox(o->image, c, px));
			box_pixels(b, bb);
			for (int i = 0; i < 4; i++)
				assert_true(fabs(bb[i] - px[i]) < 1e-3);
		}
	}
	free(o);
	fake_free(f);
	detect_free(d);
}

/* A loader that letterboxes its sample into the output itself (detect_sample.placed, the daemon's
 * in-box fit); `elsewhere`: it says so of pixels that are not the output's. */
struct placing {
	struct fake *f;
	uint8_t *image;
	uint32_t out_w, out_h;
	bool elsewhere;
};

static int placing_load(void *ctx, uint64_t index, uint32_t side, struct detect_sample *out)
{
	struct placing *pl = ctx;
	struct detect_letterbox g;
	int r = fake_load(pl->f, index, side, out);

	if (r < 0)
		return r;
	detect_letterbox_geometry(out->width, out->height, pl->out_w, pl->out_h, &g);
	memset(pl->image, DETECT_PAD, (size_t)pl->out_w * pl->out_h * 3);
	for (uint32_t y = 0; y < out->height; y++)
		memcpy(pl->image + ((size_t)(g.top + (int)y) * pl->out_w + (size_t)g.left) * 3,
		       out->pixels + (size_t)y * out->width * 3, (size_t)out->width * 3);
	out->pixels = pl->elsewhere ? pl->image + 3 : pl->image;
	out->placed = true;
	return 0;
}

/* A placed letterbox: the same image, boxes and metadata as detect_make's own copy; pixels said
 * to be placed that are not the output's, refused. */
static void test_letterbox_placed(void **state)
{
	static const uint32_t shapes[][2] = {{SIZE, SIZE}, {192, 192}};
	struct detect *d;
	struct fake *f = fake_new(4);
	struct out *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(detect_new(&d), 0);
	f->s[0].aw = 800, f->s[0].ah = 400;
	f->s[1].aw = 301, f->s[1].ah = 500;
	f->s[2].aw = 500, f->s[2].ah = 500;
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
		for (uint64_t idx = 0; idx < 3; idx++) {
			const uint32_t ow = shapes[k][0], oh = shapes[k][1];
			struct detect_meta ma, mb;
			struct detect_output oa = {a->image, ow,   oh,   a->boxes, MAX_BOXES, &a->n, &a->dropped,
						   &ma,      NULL, NULL, NULL,     NULL,      NULL,  NULL};
			struct detect_output ob = {b->image, ow,   oh,   b->boxes, MAX_BOXES, &b->n, &b->dropped,
						   &mb,      NULL, NULL, NULL,     NULL,      NULL,  NULL};
			struct placing pl = {f, b->image, ow, oh, false};
			uint32_t side = ow;
			assert_int_equal(
				detect_make(d, DETECT_LETTERBOX, NULL, side, idx, f->count, NULL, fake_load, f, &oa),
				0);
			memset(b->image, 0, sizeof(b->image));
			assert_int_equal(detect_make(d, DETECT_LETTERBOX, NULL, side, idx, f->count, NULL, placing_load,
						     &pl, &ob),
					 0);
			assert_memory_equal(a->image, b->image, (size_t)ow * oh * 3);
			assert_int_equal(a->n, b->n);
			assert_memory_equal(a->boxes, b->boxes, a->n * DETECT_BOX_FLOATS * sizeof(float));
			assert_memory_equal(&ma, &mb, sizeof(ma));
			pl.elsewhere = true;
			assert_int_equal(detect_make(d, DETECT_LETTERBOX, NULL, side, idx, f->count, NULL, placing_load,
						     &pl, &ob),
					 -EINVAL);
		}
	free(a);
	free(b);
	fake_free(f);
	detect_free(d);
}

/* Mosaic + RandomPerspective: every sizeable box fits its rectangle's pixels. */
static void test_mosaic_affine_boxes(void **state)
{
	struct detect *d;
	struct fake *f = fake_new(40);
	struct out *o = calloc(1, sizeof(*o));
	struct detect_params p = zero_params();
	int checked = 0, runs = 0, mosaics = 0;

	(void)state;
	assert_int_equal(detect_new(&d), 0);
	p.mosaic = 1;
	p.degrees = 10;
	p.shear = 2;
	p.translate = 0.1f;
	p.scale = 0.5f;
	p.fliplr = 0.5f;
	for (uint64_t seed = 0; seed < 40; seed++) {
		bool dup = false;

		assert_int_equal(run(d, DETECT_TRAIN, &p, seed, seed % f->count, f, o), 0);
		assert_int_equal(f->nloaded, 4);
		mosaics++;
		assert_boxes_inside(o);
		/* the same sample twice would put its colours in two places */
		for (int i = 0; i < f->nloaded; i++)
			for (int j = 0; j < i; j++)
				dup |= f->loaded[i] == f->loaded[j];
		if (dup)
			continue;
		runs++;
		for (uint32_t i = 0; i < o->n; i++) {
			const float *b = o->boxes + (size_t)i * DETECT_BOX_FLOATS;
			uint64_t cls = (uint64_t)b[1];
			uint8_t c[3];
			double bb[4], px[4];

			box_pixels(b, bb);
			/* a rotated rectangle cut by the image's edge has a box larger than what is left of it
			 * (corners, then clip, as Ultralytics does): only whole ones compare */
			if (bb[2] - bb[0] < 24 || bb[3] - bb[1] < 24 || bb[0] < 1 || bb[1] < 1 || bb[2] > SIZE - 1 ||
			    bb[3] > SIZE - 1)
				continue;
			rect_colour(cls / RECTS, (int)(cls % RECTS), c);
			assert_true(colour_bbox(o->image, c, px));
			/* the exact colour misses the blended edge: widen by half a pixel */
			px[0] -= 0.5, px[1] -= 0.5, px[2] += 0.5, px[3] += 0.5;
			if (iou(bb, px) < 0.9)
				fail_msg("seed %llu box %u class %llu: box %.1f %.1f %.1f %.1f pixels %.1f %.1f %.1f "
					 "%.1f",
					 (unsigned long long)seed, i, (unsigned long long)cls, bb[0], bb[1], bb[2],
					 bb[3], px[0], px[1], px[2], px[3]);
			checked++;
		}
	}
	assert_true(runs >= 20);
	assert_true(checked >= 50);
	free(o);
	fake_free(f);
	detect_free(d);
}

/*
 * Without geometric draws DETECT_TRAIN centres the sample (RandomPerspective
 * maps its centre to the output's): where the padding is even, the
 * letterbox; where it is odd, half a pixel off it. Flips mirror that.
 */
static void test_flips(void **state)
{
	struct detect *d;
	struct fake *f = fake_new(4);
	struct out *ref = calloc(1, sizeof(*ref)), *o = calloc(1, sizeof(*o));
	struct detect_params p = zero_params();

	(void)state;
	assert_int_equal(detect_new(&d), 0);
	f->s[1].aw = 333, f->s[1].ah = 500; /* loaded 171 x 256: odd padding, the mirror moves it */
	f->s[2].aw = 332, f->s[2].ah = 500; /* loaded 170 x 256: even padding */

	/* even padding, no flip: the letterbox's bytes */
	assert_int_equal(run(d, DETECT_LETTERBOX, NULL, 0, 2, f, ref), 0);
	assert_int_equal(run(d, DETECT_TRAIN, &p, 7, 2, f, o), 0);
	assert_memory_equal(o->image, ref->image, sizeof(o->image));
	assert_int_equal(o->n, ref->n);
	assert_memory_equal(o->boxes, ref->boxes, ref->n * DETECT_BOX_FLOATS * sizeof(float));
	/* odd padding: not the letterbox (its centre is half a pixel off), the boxes half a pixel right */
	assert_int_equal(run(d, DETECT_LETTERBOX, NULL, 0, 1, f, ref), 0);
	assert_int_equal(run(d, DETECT_TRAIN, &p, 7, 1, f, o), 0);
	assert_true(memcmp(o->image, ref->image, sizeof(o->image)) != 0);
	assert_int_equal(o->n, ref->n);
	for (uint32_t i = 0; i < o->n; i++)
		assert_true(fabsf(o->boxes[i * DETECT_BOX_FLOATS + 2] - ref->boxes[i * DETECT_BOX_FLOATS + 2] -
				  0.5f / SIZE) < 1e-6f);
	memcpy(ref, o, sizeof(*o));

	for (int mode = 0; mode < 3; mode++) {
		bool lr = mode != 1, ud = mode != 0;

		p.fliplr = lr;
		p.flipud = ud;
		assert_int_equal(run(d, DETECT_TRAIN, &p, 7, 1, f, o), 0);
		assert_int_equal(o->n, ref->n);
		for (uint32_t y = 0; y < SIZE; y++)
			for (uint32_t x = 0; x < SIZE; x++) {
				uint32_t sx = lr ? SIZE - 1 - x : x, sy = ud ? SIZE - 1 - y : y;

				assert_memory_equal(o->image + ((size_t)y * SIZE + x) * 3,
						    ref->image + ((size_t)sy * SIZE + sx) * 3, 3);
			}
		for (uint32_t i = 0; i < o->n; i++) {
			const float *a = o->boxes + (size_t)i * DETECT_BOX_FLOATS,
				    *b = ref->boxes + (size_t)i * DETECT_BOX_FLOATS;

			assert_true(a[1] == b[1]);
			assert_true(fabsf(a[2] - (lr ? 1 - b[2] : b[2])) < 1e-6f);
			assert_true(fabsf(a[3] - (ud ? 1 - b[3] : b[3])) < 1e-6f);
			assert_true(fabsf(a[4] - b[4]) < 1e-6f && fabsf(a[5] - b[5]) < 1e-6f);
		}
	}
	free(ref);
	free(o);
	fake_free(f);
	detect_free(d);
}

/*
 * The fixed-point warps (separable, and rotated or sheared) against the
 * float one that follows OpenCV's arithmetic, which a perspective of 1e-30
 * selects with the same draws and, in double, the same map: pixels within
 * one unit, boxes equal.
 */
static void test_warp_fixed_point(void **state)
{
	struct detect *d;
	struct fake *f = fake_new(8);
	struct out *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct detect_params p = zero_params();
	int differ = 0;

	(void)state;
	assert_int_equal(detect_new(&d), 0);
	p.translate = 0.1f;
	p.scale = 0.5f;
	p.fliplr = 0.5f;
	p.flipud = 0.5f;
	for (int mode = 0; mode < 4; mode++) {
		p.mosaic = mode & 1;
		p.degrees = mode & 2 ? 10 : 0;
		p.shear = mode & 2 ? 2 : 0;
		for (uint64_t seed = 0; seed < 6; seed++) {
			p.perspective = 0;
			assert_int_equal(run(d, DETECT_TRAIN, &p, seed, seed % f->count, f, a), 0);
			p.perspective = 1e-30f;
			assert_int_equal(run(d, DETECT_TRAIN, &p, seed, seed % f->count, f, b), 0);
			for (size_t i = 0; i < sizeof(a->image); i++) {
				if (abs(a->image[i] - b->image[i]) > 1)
					fail_msg("mode %d seed %llu byte %zu: %d, float path %d", mode,
						 (unsigned long long)seed, i, a->image[i], b->image[i]);
				differ += a->image[i] != b->image[i];
			}
			assert_int_equal(a->n, b->n);
			assert_memory_equal(a->boxes, b->boxes, a->n * DETECT_BOX_FLOATS * sizeof(float));
		}
	}
	/* the paths did differ: the fixed-point ones ran */
	assert_true(differ > 0);
	free(a);
	free(b);
	fake_free(f);
	detect_free(d);
}

/* Same key, same bytes; another key, other bytes. */
static void test_determinism(void **state)
{
	struct detect *d, *d2;
	struct fake *f = fake_new(16);
	struct out *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct detect_params p;

	(void)state;
	detect_params_default(&p);
	p.degrees = 5;
	p.shear = 1;
	p.mixup = 0.5f;
	assert_int_equal(detect_new(&d), 0);
	assert_int_equal(detect_new(&d2), 0);
	for (uint64_t seed = 0; seed < 6; seed++) {
		assert_int_equal(run(d, DETECT_TRAIN, &p, seed, 3, f, a), 0);
		/* another detect, after unrelated work in this one */
		assert_int_equal(run(d, DETECT_TRAIN, &p, seed + 100, 5, f, b), 0);
		assert_int_equal(run(d2, DETECT_TRAIN, &p, seed, 3, f, b), 0);
		assert_memory_equal(a->image, b->image, sizeof(a->image));
		assert_int_equal(a->n, b->n);
		assert_memory_equal(a->boxes, b->boxes, a->n * DETECT_BOX_FLOATS * sizeof(float));
		assert_int_equal(run(d, DETECT_TRAIN, &p, seed + 1000, 3, f, b), 0);
		assert_true(memcmp(a->image, b->image, sizeof(a->image)) != 0);
	}
	free(a);
	free(b);
	fake_free(f);
	detect_free(d);
	detect_free(d2);
}

/* MixUp: boxes of both images, pixels a blend of both (each as it is alone without draws). */
static void test_mixup(void **state)
{
	struct detect *d;
	struct fake *f = fake_new(8);
	struct out *o = calloc(1, sizeof(*o)), *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct detect_params p = zero_params();
	int blended = 0, tested = 0;

	(void)state;
	assert_int_equal(detect_new(&d), 0);
	p.mixup = 1;
	for (uint64_t seed = 0; seed < 8; seed++) {
		uint64_t partner;
		double rsum = 0;
		int rn = 0;

		assert_int_equal(run(d, DETECT_TRAIN, &p, seed, 2, f, o), 0);
		assert_int_equal(f->nloaded, 2);
		partner = f->loaded[1];
		if (partner == 2)
			continue;
		tested++;
		p.mixup = 0;
		assert_int_equal(run(d, DETECT_TRAIN, &p, 0, 2, f, a), 0);
		assert_int_equal(run(d, DETECT_TRAIN, &p, 0, partner, f, b), 0);
		p.mixup = 1;
		assert_int_equal(o->n, a->n + b->n);
		assert_memory_equal(o->boxes, a->boxes, a->n * DETECT_BOX_FLOATS * sizeof(float));
		assert_memory_equal(o->boxes + a->n * DETECT_BOX_FLOATS, b->boxes,
				    b->n * DETECT_BOX_FLOATS * sizeof(float));
		for (size_t i = 0; i < sizeof(o->image); i++) {
			int x = a->image[i], y = b->image[i], v = o->image[i];
			int lo = x < y ? x : y, hi = x > y ? x : y;

			/* truncation may take a unit off */
			assert_true(v >= lo - 1 && v <= hi);
			if (hi - lo > 60) {
				rsum += (double)(v - y) / (x - y);
				rn++;
			}
			blended += v != x && v != y;
		}
		/* Beta(32, 32) keeps r near 0.5 */
		assert_true(rn > 0);
		assert_true(fabs(rsum / rn - 0.5) < 0.25);
	}
	assert_true(tested >= 4);
	assert_true(blended > 1000);
	free(o);
	free(a);
	free(b);
	fake_free(f);
	detect_free(d);
}

/* Failing partners are replaced by the next index; the sample's own failure is the error. */
static void test_load_failures(void **state)
{
	struct detect *d;
	struct fake *f = fake_new(20);
	struct out *o = calloc(1, sizeof(*o));
	struct detect_params p = zero_params();
	int replaced = 0;

	(void)state;
	assert_int_equal(detect_new(&d), 0);
	p.mosaic = 1;
	for (uint64_t i = 1; i < 20; i++)
		f->fail[i] = i % 4 != 0; /* only multiples of 4 load */
	for (uint64_t seed = 0; seed < 10; seed++) {
		int loaded_ok = 0;

		assert_int_equal(run(d, DETECT_TRAIN, &p, seed, 0, f, o), 0);
		for (int i = 0; i < f->nloaded; i++) {
			loaded_ok += !f->fail[f->loaded[i]];
			/* after a failure comes the next index */
			if (i > 0 && f->fail[f->loaded[i - 1]]) {
				assert_int_equal(f->loaded[i], (f->loaded[i - 1] + 1) % f->count);
				replaced++;
			}
		}
		assert_int_equal(loaded_ok, 4);
	}
	assert_true(replaced > 0);

	/* the sample itself failing is the loader's error, whoever else loads */
	f->fail[5] = true;
	f->fail_errno = ENOENT;
	assert_int_equal(run(d, DETECT_TRAIN, &p, 1, 5, f, o), -ENOENT);
	assert_int_equal(run(d, DETECT_LETTERBOX, NULL, 0, 5, f, o), -ENOENT);
	p.mosaic = 0;
	assert_int_equal(run(d, DETECT_TRAIN, &p, 1, 5, f, o), -ENOENT);

	/* no partner loads in 16 tries: the error */
	memset(f->fail, 0, sizeof(f->fail));
	f->fail_all_after_first = true;
	f->fail_errno = EIO;
	p.mosaic = 1;
	assert_int_equal(run(d, DETECT_TRAIN, &p, 1, 5, f, o), -EIO);
	assert_int_equal(f->nloaded, 1 + 16);
	p.mosaic = 0;
	p.mixup = 1;
	assert_int_equal(run(d, DETECT_TRAIN, &p, 1, 5, f, o), -EIO);
	f->fail_all_after_first = false;
	/* counts untouched on error */
	o->n = 77;
	o->dropped = 3;
	f->fail[5] = true;
	assert_int_equal(run(d, DETECT_TRAIN, &p, 1, 5, f, o), -EIO);
	assert_int_equal(o->n, 77);
	assert_int_equal(o->dropped, 3);
	/* and the metadata, though the sample itself loaded before a partner failed */
	f->fail[5] = false;
	f->fail_all_after_first = true;
	for (int mode = 0; mode < 2; mode++) {
		struct detect_meta meta = {{-7, -7, -7, -7}, {-7, -7, -7, -7}}, before = meta;
		struct detect_output out = {o->image, SIZE, SIZE, o->boxes, MAX_BOXES, &o->n, &o->dropped,
					    &meta,    NULL, NULL, NULL,     NULL,      NULL,  NULL};
		struct rng rng;

		p.mosaic = mode == 0;
		p.mixup = mode == 1;
		f->calls = 0;
		rng_init(&rng, 1, 0, 5, RNG_AUGMENT);
		assert_int_equal(detect_make(d, DETECT_TRAIN, &p, SIZE, 5, f->count, &rng, fake_load, f, &out), -EIO);
		assert_memory_equal(&meta, &before, sizeof(meta));
	}
	f->fail_all_after_first = false;
	free(o);
	fake_free(f);
	detect_free(d);
}

/* Rows beyond max_boxes are counted, and added to what was there. */
static void test_max_boxes(void **state)
{
	struct detect *d;
	struct fake *f = fake_new(2);
	uint8_t *image = malloc((size_t)SIZE * SIZE * 3);
	float boxes[2 * DETECT_BOX_FLOATS];
	uint32_t n = 99;
	uint64_t dropped = 5;
	struct rng rng;

	(void)state;
	assert_non_null(image);
	assert_int_equal(detect_new(&d), 0);
	rng_init(&rng, 1, 0, 0, RNG_AUGMENT);
	assert_int_equal(
		detect_run(d, DETECT_LETTERBOX, NULL, SIZE, 0, 2, &rng, fake_load, f, image, boxes, 2, &n, &dropped),
		0);
	assert_int_equal(n, 2);
	assert_int_equal(dropped, 5 + RECTS - 2);
	assert_true(boxes[1] == rect_class(0, 0) && boxes[DETECT_BOX_FLOATS + 1] == rect_class(0, 1));
	/* none wanted: all counted, no row written */
	assert_int_equal(
		detect_run(d, DETECT_LETTERBOX, NULL, SIZE, 0, 2, &rng, fake_load, f, image, NULL, 0, &n, &dropped), 0);
	assert_int_equal(n, 0);
	assert_int_equal(dropped, 5 + RECTS - 2 + RECTS);
	/* bad arguments */
	assert_int_equal(
		detect_run(d, DETECT_LETTERBOX, NULL, SIZE, 2, 2, &rng, fake_load, f, image, boxes, 2, &n, &dropped),
		-EINVAL);
	assert_int_equal(
		detect_run(d, DETECT_TRAIN, NULL, SIZE, 0, 2, &rng, fake_load, f, image, boxes, 2, &n, &dropped),
		-EINVAL);
	assert_int_equal(
		detect_run(d, DETECT_LETTERBOX, NULL, 0, 0, 2, &rng, fake_load, f, image, boxes, 2, &n, &dropped),
		-EINVAL);
	free(image);
	fake_free(f);
	detect_free(d);
}

static void test_params_check(void **state)
{
	struct detect_params p, q;
	char why[128];
	const struct {
		float *field;
		float bad;
		const char *key;
	} cases[] = {
		{&q.hsv_h, 1.5f, "hsv_h"},     {&q.hsv_s, -0.1f, "hsv_s"},
		{&q.hsv_v, NAN, "hsv_v"},      {&q.degrees, 181, "degrees"},
		{&q.degrees, -1, "degrees"},   {&q.translate, 1, "translate"},
		{&q.scale, 1, "scale"},        {&q.scale, NAN, "scale"},
		{&q.shear, 90, "shear"},       {&q.perspective, 0.2f, "perspective"},
		{&q.flipud, -0.1f, "flipud"},  {&q.fliplr, 1.01f, "fliplr"},
		{&q.mosaic, 2, "mosaic"},      {&q.mixup, NAN, "mixup"},
		{&q.mixup, INFINITY, "mixup"},
	};

	(void)state;
	detect_params_default(&p);
	assert_int_equal(detect_params_check(&p, why, sizeof(why)), 0);
	assert_true(p.hsv_h == 0.015f && p.hsv_s == 0.7f && p.hsv_v == 0.4f && p.translate == 0.1f && p.scale == 0.5f &&
		    p.fliplr == 0.5f && p.mosaic == 1.0f && p.mixup == 0.0f);
	/* the edges that are allowed */
	q = p;
	q.degrees = 180, q.translate = 0.99f, q.scale = 0.99f, q.shear = 89, q.perspective = 0.1f;
	q.flipud = 1, q.mixup = 1, q.hsv_h = 1;
	assert_int_equal(detect_params_check(&q, why, sizeof(why)), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		q = p;
		*cases[i].field = cases[i].bad;
		why[0] = 0;
		assert_int_equal(detect_params_check(&q, why, sizeof(why)), -EINVAL);
		assert_non_null(strstr(why, cases[i].key));
		assert_non_null(strchr(why, '['));
	}
	/* no room for a reason is fine */
	q = p;
	q.scale = 1;
	assert_int_equal(detect_params_check(&q, NULL, 0), -EINVAL);
}

/* ---- HSV against OpenCV's documented conversions ---- */

/* RGB -> HSV for 8-bit images, as the cvtColor documentation gives it: V = max, S = (V - min) / V,
 * H in degrees halved; S and V scaled to 255. */
static void doc_rgb2hsv(const uint8_t rgb[3], int hsv[3])
{
	double r = rgb[0] / 255.0, g = rgb[1] / 255.0, b = rgb[2] / 255.0;
	double v = fmax(r, fmax(g, b)), mn = fmin(r, fmin(g, b)), s = v > 0 ? (v - mn) / v : 0, h = 0;

	if (v > mn) {
		if (v == r)
			h = 60 * (g - b) / (v - mn);
		else if (v == g)
			h = 120 + 60 * (b - r) / (v - mn);
		else
			h = 240 + 60 * (r - g) / (v - mn);
	}
	if (h < 0)
		h += 360;
	hsv[0] = (int)lround(h / 2);
	hsv[1] = (int)lround(s * 255);
	hsv[2] = (int)lround(v * 255);
	if (hsv[0] == 180)
		hsv[0] = 0;
}

/* HSV -> RGB, the documented sector formula; 8-bit results truncated as OpenCV's vector path does. */
static void doc_hsv2rgb(const int hsv[3], uint8_t rgb[3])
{
	double h = hsv[0] * 2.0 / 60.0, s = hsv[1] / 255.0, v = hsv[2] / 255.0, f, c[3];
	int i = (int)floor(h) % 6;
	double pp, q, t;

	f = h - floor(h);
	pp = v * (1 - s);
	q = v * (1 - s * f);
	t = v * (1 - s * (1 - f));
	switch (i) {
	case 0: c[0] = v, c[1] = t, c[2] = pp; break;
	case 1: c[0] = q, c[1] = v, c[2] = pp; break;
	case 2: c[0] = pp, c[1] = v, c[2] = t; break;
	case 3: c[0] = pp, c[1] = q, c[2] = v; break;
	case 4: c[0] = t, c[1] = pp, c[2] = v; break;
	default: c[0] = v, c[1] = pp, c[2] = q; break;
	}
	for (int k = 0; k < 3; k++)
		rgb[k] = (uint8_t)(c[k] * 255 + 1e-4);
}

/* The gains detect_run draws, following the documented draw order. */
static void drawn_gains(uint64_t seed, uint64_t index, uint64_t count, const struct detect_params *p, double g[3])
{
	struct rng r;

	rng_init(&r, seed, 0, index, RNG_AUGMENT);
	for (int img = 0; img < 2; img++) {
		rng_uniform(&r); /* mosaic */
		for (int i = 0; i < 3; i++)
			rng_below(&r, count);
		for (int i = 0; i < 2 + 8; i++) /* yc, xc, then the affine draws */
			rng_uniform(&r);
		if (img == 0) {
			rng_uniform(&r); /* mixup */
			rng_below(&r, count);
		}
	}
	g[0] = rng_range(&r, -1, 1) * p->hsv_h;
	g[1] = rng_range(&r, -1, 1) * p->hsv_s;
	g[2] = rng_range(&r, -1, 1) * p->hsv_v;
}

static void test_hsv(void **state)
{
	/* primaries, greys, mixtures; H, S and V away from rounding edges */
	static const uint8_t px[][3] = {
		{255, 0, 0},    {0, 255, 0},    {0, 0, 255},     {255, 255, 255}, {0, 0, 0},      {128, 128, 128},
		{200, 100, 50}, {50, 200, 100}, {100, 50, 200},  {240, 240, 10},  {10, 240, 240}, {240, 10, 240},
		{90, 60, 30},   {30, 90, 60},   {180, 150, 120}, {12, 34, 56},
	};
	/* cv2 5.0 on these pixels in a large image (its vector path: Ultralytics' case), as BGR2HSV, the
	 * LUT, HSV2BGR (ours within one unit: integer, not float) with the gains drawn for seed 3: 0.2145099..., -0.3327937..., 0.3118374... */
	static const uint8_t cv2_out[][3] = {
		{209, 255, 84},  {84, 209, 255},  {255, 84, 209},  {255, 255, 255}, {0, 0, 0},      {167, 167, 167},
		{178, 255, 127}, {127, 178, 255}, {255, 127, 178}, {92, 255, 136},  {136, 92, 255}, {255, 136, 92},
		{77, 118, 65},   {65, 77, 118},   {196, 236, 184}, {64, 34, 73},
	};
	enum { N = sizeof(px) / sizeof(px[0]) };
	struct detect *d;
	struct fake *f = fake_new(4);
	struct out *o = calloc(1, sizeof(*o));
	struct detect_params p = zero_params();
	uint8_t raw[2 * N * 3];
	double g[3];
	uint8_t lut_h[256], lut_s[256], lut_v[256];

	(void)state;
	assert_int_equal(detect_new(&d), 0);
	p.hsv_h = 0.5f;
	p.hsv_s = 0.5f;
	p.hsv_v = 0.5f;
	memcpy(raw, px, sizeof(px));
	memcpy(raw + sizeof(px), px, sizeof(px));
	/* a 16 x 2 image at long side 256 is not what load_image makes: use SIZE 16 via a direct call (two
	 * rows: even padding, so the sample is centred on whole pixels) */
	f->raw = raw;
	f->raw_w = N;
	f->raw_h = 2;
	{
		struct rng rng;
		uint8_t image[N * N * 3];
		float boxes[DETECT_BOX_FLOATS];
		uint32_t n;
		uint64_t dropped = 0;

		rng_init(&rng, 3, 0, 1, RNG_AUGMENT);
		assert_int_equal(detect_run(d, DETECT_TRAIN, &p, N, 1, f->count, &rng, fake_load, f, image, boxes, 1,
					    &n, &dropped),
				 0);
		drawn_gains(3, 1, f->count, &p, g);
		for (int x = 0; x < 256; x++) {
			double h = fmod(x + g[0] * 180, 180), s = x * (g[1] + 1), v = x * (g[2] + 1);

			lut_h[x] = (uint8_t)(h < 0 ? h + 180 : h);
			lut_s[x] = (uint8_t)fmin(fmax(s, 0), 255);
			lut_v[x] = (uint8_t)fmin(fmax(v, 0), 255);
		}
		lut_s[0] = 0;
		/* the image is the sample centred: rows N / 2 - 1 and N / 2 hold the pixels */
		for (int i = 0; i < N; i++) {
			const uint8_t *got = image + ((size_t)(N / 2) * N + i) * 3;
			int hsv[3];
			uint8_t want[3];

			doc_rgb2hsv(px[i], hsv);
			hsv[0] = lut_h[hsv[0]];
			hsv[1] = lut_s[hsv[1]];
			hsv[2] = lut_v[hsv[2]];
			doc_hsv2rgb(hsv, want);
			for (int c = 0; c < 3; c++) {
				if (abs(got[c] - want[c]) > 1)
					fail_msg("pixel %d (%d %d %d): got %d %d %d, documented %d %d %d", i, px[i][0],
						 px[i][1], px[i][2], got[0], got[1], got[2], want[0], want[1], want[2]);
				if (abs(got[c] - cv2_out[i][c]) > 1)
					fail_msg("pixel %d channel %d: got %d, cv2 %d", i, c, got[c], cv2_out[i][c]);
			}
		}
		/* the padding rows, grey 114, stay grey whatever the gains: S = 0 */
		assert_true(image[0] == image[1] && image[1] == image[2]);
		assert_true(abs(image[0] - lut_v[114]) <= 1);
	}
	free(o);
	fake_free(f);
	detect_free(d);
}

/* ---- the AVX2 and AVX-512 kernels against the portable code ---- */

/*
 * A detect with the portable code and one with the kernels of the test's
 * state (ISA_AVX2 or ISA_AVX512); false (test skipped) where the CPU lacks them.
 */
static bool isa_pair(void **state, struct detect **scalar, struct detect **avx2)
{
	const int isa = *(const int *)*state;

	assert_int_equal(detect_force_isa(ISA_SCALAR), 0);
	assert_int_equal(detect_new(scalar), 0);
	if (detect_force_isa(isa) < 0) {
		printf("[ SKIPPED  ] the CPU has no %s\n", isa == ISA_AVX512 ? "AVX-512 (F, BW, VBMI)" : "AVX2");
		detect_free(*scalar);
		assert_int_equal(detect_force_isa(ISA_AUTO), 0);
		return false;
	}
	assert_int_equal(detect_new(avx2), 0);
	assert_int_equal(detect_force_isa(ISA_AUTO), 0);
	return true;
}

/* detect_run of `index` at `size` by both detects: the same bytes and boxes. */
static void same_bytes(struct detect *a, struct detect *b, const struct detect_params *p, uint32_t size, uint64_t seed,
		       uint64_t index, struct fake *f, uint8_t *ia, uint8_t *ib)
{
	float ba[MAX_BOXES * DETECT_BOX_FLOATS], bb[MAX_BOXES * DETECT_BOX_FLOATS];
	uint32_t na, nb;
	uint64_t dropped = 0;
	struct rng r;

	rng_init(&r, seed, 0, index, RNG_AUGMENT);
	assert_int_equal(detect_run(a, DETECT_TRAIN, p, size, index, f->count, &r, fake_load, f, ia, ba, MAX_BOXES, &na,
				    &dropped),
			 0);
	rng_init(&r, seed, 0, index, RNG_AUGMENT);
	assert_int_equal(detect_run(b, DETECT_TRAIN, p, size, index, f->count, &r, fake_load, f, ib, bb, MAX_BOXES, &nb,
				    &dropped),
			 0);
	for (size_t i = 0; i < (size_t)size * size * 3; i++)
		if (ia[i] != ib[i])
			fail_msg("size %u seed %llu: byte %zu portable %d, kernels %d", size, (unsigned long long)seed,
				 i, ia[i], ib[i]);
	assert_int_equal(na, nb);
	assert_memory_equal(ba, bb, na * DETECT_BOX_FLOATS * sizeof(float));
}

/*
 * HSV, the AVX2 or AVX-512 kernel against the portable code: every RGB colour (a
 * 4096 x 4096 image, which the letterbox copies unwarped) under several
 * drawn gains, full range.
 */
static void test_isa_hsv(void **state)
{
	const uint32_t side = 4096;
	size_t bytes = (size_t)side * side * 3;
	struct detect *a, *b;
	struct fake *f = fake_new(4);
	struct detect_params p = zero_params();
	uint8_t *raw = malloc(bytes), *ia = malloc(bytes), *ib = malloc(bytes);

	(void)state;
	assert_true(raw && ia && ib);
	if (!isa_pair(state, &a, &b))
		goto out;
	for (size_t i = 0; i < (size_t)side * side; i++) {
		raw[3 * i] = (uint8_t)(i >> 16);
		raw[3 * i + 1] = (uint8_t)(i >> 8);
		raw[3 * i + 2] = (uint8_t)i;
	}
	f->raw = raw;
	f->raw_w = side;
	f->raw_h = side;
	p.hsv_h = p.hsv_s = p.hsv_v = 1;
	for (uint64_t seed = 0; seed < 4; seed++)
		same_bytes(a, b, &p, side, seed, seed % f->count, f, ia, ib);
	/* the defaults' gains too */
	p.hsv_h = 0.015f, p.hsv_s = 0.7f, p.hsv_v = 0.4f;
	same_bytes(a, b, &p, side, 9, 1, f, ia, ib);
	detect_free(a);
	detect_free(b);
out:
	free(raw);
	free(ia);
	free(ib);
	fake_free(f);
}

/*
 * The whole transform, the AVX2 or AVX-512 kernels (separable warp, HSV) against the
 * portable code on noise: mosaics and letterboxes, zoomed in and out,
 * flipped, mixed up, at sizes that leave the kernels a remainder.
 */
static void test_isa_transform(void **state)
{
	static const uint32_t sizes[] = {256, 203, 64, 13};
	struct detect *a, *b;
	struct fake *f = fake_new(8);
	uint8_t *raw = malloc(256 * 256 * 3), *ia = malloc(256 * 256 * 3), *ib = malloc(256 * 256 * 3);
	uint32_t st = 99;

	(void)state;
	assert_true(raw && ia && ib);
	if (!isa_pair(state, &a, &b))
		goto out;
	for (size_t i = 0; i < 256 * 256 * 3; i++) {
		st = st * 1103515245u + 12345u;
		raw[i] = (uint8_t)(st >> 16);
	}
	f->raw = raw;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		for (int mode = 0; mode < 4; mode++) {
			struct detect_params p;

			detect_params_default(&p);
			p.mosaic = mode & 1;
			p.mixup = mode & 2 ? 0.5f : 0;
			p.scale = 0.9f;
			p.translate = 0.3f;
			p.flipud = 0.5f;
			/* noise of an odd width: rows do not start 16-byte aligned */
			f->raw_w = sizes[k] - (sizes[k] > 13 ? 7 : 0);
			f->raw_h = sizes[k] * 3 / 4;
			for (uint64_t seed = 0; seed < 6; seed++)
				same_bytes(a, b, &p, sizes[k], seed, seed % f->count, f, ia, ib);
		}
	}
	detect_free(a);
	detect_free(b);
out:
	free(raw);
	free(ia);
	free(ib);
	fake_free(f);
}

/*
 * A mosaic of stable samples is warped from canvas rows made one at a time
 * (no canvas pass): the same bytes and boxes as through the whole canvas,
 * for every kernel set, zoomed in and out, flipped, mixed up, at sizes that
 * leave remainders; and with a rotation (not separable: the canvas path).
 */
static void test_lazy_canvas(void **state)
{
	static const uint32_t sizes[] = {256, 203, 64, 13};
	static const int isas[] = {ISA_SCALAR, ISA_AVX2, ISA_AVX512};
	struct fake *f = fake_new(8);
	uint8_t *raw = malloc(256 * 256 * 3), *ia = malloc(256 * 256 * 3), *ib = malloc(256 * 256 * 3);
	float ba[MAX_BOXES * DETECT_BOX_FLOATS], bb[MAX_BOXES * DETECT_BOX_FLOATS];
	uint32_t st = 7;

	(void)state;
	assert_true(raw && ia && ib);
	for (size_t i = 0; i < 256 * 256 * 3; i++) {
		st = st * 1103515245u + 12345u;
		raw[i] = (uint8_t)(st >> 16);
	}
	f->raw = raw;
	for (size_t v = 0; v < sizeof(isas) / sizeof(isas[0]); v++) {
		struct detect *d;

		if (detect_force_isa(isas[v]) < 0)
			continue;
		assert_int_equal(detect_new(&d), 0);
		assert_int_equal(detect_force_isa(ISA_AUTO), 0);
		for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
			for (int mode = 0; mode < 4; mode++) {
				struct detect_params p;

				detect_params_default(&p);
				p.mixup = mode & 1 ? 0.5f : 0;
				p.degrees = mode & 2 ? 10.0f : 0;
				p.scale = 0.9f;
				p.translate = 0.3f;
				p.flipud = 0.5f;
				f->raw_w = sizes[k] - (sizes[k] > 13 ? 7 : 0);
				f->raw_h = sizes[k] * 3 / 4;
				for (uint64_t seed = 0; seed < 6; seed++) {
					uint32_t na, nb;
					uint64_t dropped = 0;
					struct rng r;

					f->raw_stable = false;
					rng_init(&r, seed, 0, seed, RNG_AUGMENT);
					assert_int_equal(detect_run(d, DETECT_TRAIN, &p, sizes[k], seed % f->count,
								    f->count, &r, fake_load, f, ia, ba, MAX_BOXES, &na,
								    &dropped),
							 0);
					f->raw_stable = true;
					rng_init(&r, seed, 0, seed, RNG_AUGMENT);
					assert_int_equal(detect_run(d, DETECT_TRAIN, &p, sizes[k], seed % f->count,
								    f->count, &r, fake_load, f, ib, bb, MAX_BOXES, &nb,
								    &dropped),
							 0);
					for (size_t i = 0; i < (size_t)sizes[k] * sizes[k] * 3; i++)
						if (ia[i] != ib[i])
							fail_msg(
								"isa %d size %u mode %d seed %llu: byte %zu canvas %d, "
								"rows %d",
								isas[v], sizes[k], mode, (unsigned long long)seed, i,
								ia[i], ib[i]);
					assert_int_equal(na, nb);
					assert_memory_equal(ba, bb, na * DETECT_BOX_FLOATS * sizeof(float));
				}
			}
		}
		detect_free(d);
	}
	free(raw);
	free(ia);
	free(ib);
	fake_free(f);
}

/* The AVX2 kernels' exact stand-ins for division and tables, over every input they can see. */
static void test_isa_arith(void **state)
{
	long bad = detect_check_arith();

	(void)state;
	if (bad == -ENOTSUP) {
		printf("[ SKIPPED  ] no AVX2\n");
		return;
	}
	assert_int_equal(bad, 0);
	assert_int_equal(detect_force_isa(99), -ENOTSUP);
}

/*
 * RandomHSV's two AVX2 kernels (32-bit and 16-bit lanes) against the
 * portable code, directly: every RGB colour, at an odd pixel count (the
 * portable code finishes the rest), under extreme and drawn gains.
 */
static void test_hsv_kernels(void **state)
{
	const size_t pixels = ((size_t)1 << 24) - 5, bytes = pixels * 3;
	const double gains[][3] = {{0, 0, 0},     {1, 1, 1},          {-1, -1, -1},           {0.5, -1, 1},
				   {-0.5, 1, -1}, {0.01, 0.55, 0.35}, {-0.0149, -0.69, 0.39}, {0.33, 0.123, -0.77}};
	uint8_t *src = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
	size_t ran = 0;

	(void)state;
	assert_true(src && want && got);
	for (size_t i = 0; i < pixels; i++) {
		src[3 * i] = (uint8_t)(i >> 16);
		src[3 * i + 1] = (uint8_t)(i >> 8);
		src[3 * i + 2] = (uint8_t)i;
	}
	for (size_t g = 0; g < sizeof(gains) / sizeof(gains[0]); g++) {
		memcpy(want, src, bytes);
		assert_int_equal(detect_hsv_kernel(0, gains[g], want, pixels), 0);
		for (int k = 1; k <= 2; k++) {
			memcpy(got, src, bytes);
			if (detect_hsv_kernel(k, gains[g], got, pixels) == -ENOTSUP) {
				printf("[ SKIPPED  ] kernel %d, gains %zu: no AVX2, or gains the kernels cannot "
				       "express\n",
				       k, g);
				continue;
			}
			assert_memory_equal(got, want, bytes);
			ran++;
		}
	}
	/* without AVX2 nothing ran; with it, every gain but a rare inexpressible one */
	assert_true(ran == 0 || ran >= 12);
	free(src);
	free(want);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_letterbox_geometry),
		cmocka_unit_test(test_mosaic_affine_boxes),
		cmocka_unit_test(test_flips),
		cmocka_unit_test(test_warp_fixed_point),
		cmocka_unit_test(test_determinism),
		cmocka_unit_test(test_mixup),
		cmocka_unit_test(test_load_failures),
		cmocka_unit_test(test_max_boxes),
		cmocka_unit_test(test_params_check),
		cmocka_unit_test(test_letterbox_placed),
		cmocka_unit_test(test_hsv),
		{"test_isa_hsv_avx2", test_isa_hsv, NULL, NULL, &isa_avx2},
		cmocka_unit_test(test_hsv_kernels),
		{"test_isa_hsv_avx512", test_isa_hsv, NULL, NULL, &isa_avx512},
		{"test_isa_transform_avx2", test_isa_transform, NULL, NULL, &isa_avx2},
		{"test_isa_transform_avx512", test_isa_transform, NULL, NULL, &isa_avx512},
		cmocka_unit_test(test_isa_arith),
		cmocka_unit_test(test_lazy_canvas),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
