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

#include <jpeglib.h>

#include "augment.h"
#include "decode.h"
#include "resize.h"

/* ---- JPEG fixtures, made with libjpeg's compressor ---- */

struct jpeg {
	unsigned char *data;
	unsigned long size;
};

enum pattern {
	PAT_SOLID,    /* colour[] everywhere */
	PAT_GRADIENT, /* smooth ramps */
	PAT_TEXTURE,  /* ramps plus fine detail, so crop and filter errors show */
};

struct jpeg_opts {
	uint32_t width, height;
	J_COLOR_SPACE in_space; /* JCS_RGB, JCS_GRAYSCALE or JCS_CMYK */
	enum pattern pattern;
	uint8_t colour[4];
	int quality;
	bool progressive, arith, yuv444;
};

static uint8_t texture(uint32_t x, uint32_t y, int c)
{
	double v = 128 + 90 * sin(x * 0.05 * (c + 1) + y * 0.031) + 30 * sin((x * 7 + y * 13 + c * 5) * 0.9);

	return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static struct jpeg make_jpeg(const struct jpeg_opts *o)
{
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr e;
	struct jpeg j = {NULL, 0};
	int comps = o->in_space == JCS_GRAYSCALE ? 1 : o->in_space == JCS_CMYK ? 4 : 3;
	uint8_t *row = malloc((size_t)o->width * comps);

	assert_non_null(row);
	c.err = jpeg_std_error(&e);
	jpeg_create_compress(&c);
	jpeg_mem_dest(&c, &j.data, &j.size);
	c.image_width = o->width;
	c.image_height = o->height;
	c.input_components = comps;
	c.in_color_space = o->in_space;
	jpeg_set_defaults(&c);
	jpeg_set_quality(&c, o->quality ? o->quality : 90, TRUE);
	if (o->progressive)
		jpeg_simple_progression(&c);
	c.arith_code = o->arith;
	if (o->yuv444)
		c.comp_info[0].h_samp_factor = c.comp_info[0].v_samp_factor = 1;
	jpeg_start_compress(&c, TRUE);
	while (c.next_scanline < c.image_height) {
		uint32_t y = c.next_scanline;

		for (uint32_t x = 0; x < o->width; x++)
			for (int k = 0; k < comps; k++)
				row[(size_t)x * comps + k] =
					o->pattern == PAT_SOLID ? o->colour[k]
					: o->pattern == PAT_GRADIENT
						? (uint8_t)((x * 255 / o->width + y * 97 / o->height + k * 60) & 0xFF)
						: texture(x, y, k);
		jpeg_write_scanlines(&c, &row, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	free(row);
	return j;
}

/* The whole image as plain libjpeg decodes it: RGB, at 1/denom. */
static uint8_t *full_decode(const struct jpeg *j, unsigned denom, uint32_t *w, uint32_t *h)
{
	struct jpeg_decompress_struct c;
	struct jpeg_error_mgr e;
	uint8_t *px;

	c.err = jpeg_std_error(&e);
	jpeg_create_decompress(&c);
	jpeg_mem_src(&c, j->data, j->size);
	jpeg_read_header(&c, TRUE);
	c.out_color_space = JCS_RGB;
	c.scale_num = 1;
	c.scale_denom = denom;
	jpeg_start_decompress(&c);
	px = malloc((size_t)c.output_width * c.output_height * 3);
	assert_non_null(px);
	while (c.output_scanline < c.output_height) {
		JSAMPROW r = px + (size_t)c.output_scanline * c.output_width * 3;

		jpeg_read_scanlines(&c, &r, 1);
	}
	*w = c.output_width;
	*h = c.output_height;
	jpeg_finish_decompress(&c);
	jpeg_destroy_decompress(&c);
	return px;
}

static struct pipeline *new_pipeline(uint64_t max_pixels, uint32_t max_scans)
{
	struct decode_limits l = {.max_pixels = max_pixels, .max_scans = max_scans};
	struct pipeline *p = NULL;

	assert_int_equal(pipeline_new(&l, &p), 0);
	assert_non_null(p);
	return p;
}

static double mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n, int *max)
{
	double s = 0;

	*max = 0;
	for (size_t i = 0; i < n; i++) {
		int d = abs(a[i] - b[i]);

		s += d;
		*max = d > *max ? d : *max;
	}
	return s / n;
}

/* ---- crop geometry ---- */

static void test_rrc_bounds(void **state)
{
	const uint32_t sizes[][2] = {{500, 375}, {375, 500}, {224, 224}, {1, 1}, {3, 1000}, {640, 427}};
	const double eps = 1e-9;

	(void)state;
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		uint32_t W = sizes[s][0], H = sizes[s][1];

		for (uint64_t i = 0; i < 3000; i++) {
			struct crop_box b;
			struct rng r;

			rng_init(&r, 11, 2, i, RNG_AUGMENT);
			random_resized_crop_box(W, H, &r, &b);
			assert_true(b.w >= 1 && b.h >= 1);
			assert_true(b.x >= 0 && b.y >= 0 && b.x + b.w <= W && b.y + b.h <= H);
			assert_true(b.x == floor(b.x) && b.y == floor(b.y) && b.w == floor(b.w) && b.h == floor(b.h));
			if (W >= 224 && H >= 224) {
				/* Rounding moves w and h by at most half a pixel each. */
				double area = (double)W * H, lo = (b.w + 0.5) * (b.h + 0.5),
				       hi = (b.w - 0.5) * (b.h - 0.5);
				double amin = (b.w - 0.5) / (b.h + 0.5), amax = (b.w + 0.5) / (b.h - 0.5);
				bool whole = b.w == W && b.h == H; /* the fallback for these sizes */

				assert_true(whole || (lo >= 0.08 * area - eps && hi <= area + eps));
				assert_true(whole || (amax >= 3.0 / 4 - eps && amin <= 4.0 / 3 + eps));
			}
		}
	}
}

static void test_rrc_deterministic_and_flips(void **state)
{
	int flips = 0, distinct = 0;
	struct crop_box prev = {0};

	(void)state;
	for (uint64_t i = 0; i < 2000; i++) {
		struct crop_box a, b;
		struct rng r1, r2;

		rng_init(&r1, 5, 1, i, RNG_AUGMENT);
		rng_init(&r2, 5, 1, i, RNG_AUGMENT);
		random_resized_crop_box(500, 375, &r1, &a);
		random_resized_crop_box(500, 375, &r2, &b);
		assert_true(a.x == b.x && a.y == b.y && a.w == b.w && a.h == b.h && a.flip == b.flip);
		flips += a.flip;
		distinct += a.x != prev.x || a.w != prev.w;
		prev = a;
	}
	assert_true(flips > 900 && flips < 1100);
	assert_true(distinct > 1900);
}

/* Too wide or tall for any of the ten tries: the centred fallback, aspect clamped. */
static void test_rrc_fallback(void **state)
{
	struct crop_box b;
	struct rng r;

	(void)state;
	for (uint64_t i = 0; i < 50; i++) {
		rng_init(&r, 3, 0, i, RNG_AUGMENT);
		random_resized_crop_box(10000, 10, &r, &b);
		/* h = 10, w = round(10 * 4/3) = 13, centred */
		assert_true(b.w == 13 && b.h == 10 && b.x == (10000 - 13) / 2 && b.y == 0);

		rng_init(&r, 3, 0, i, RNG_AUGMENT);
		random_resized_crop_box(10, 10000, &r, &b);
		/* w = 10, h = round(10 / (3/4)) = 13 */
		assert_true(b.w == 10 && b.h == 13 && b.x == 0 && b.y == (10000 - 13) / 2);
	}
}

static void test_center_crop_box(void **state)
{
	struct crop_box b;

	(void)state;
	/* 500x375: short side to 256, long to int(256 * 500 / 375) = 341; left = round(58.5) = 58, top = 16 */
	center_crop_box(500, 375, 224, &b);
	assert_true(fabs(b.x - 58.0 * 500 / 341) < 1e-9 && fabs(b.w - 224.0 * 500 / 341) < 1e-9);
	assert_true(fabs(b.y - 16.0 * 375 / 256) < 1e-9 && fabs(b.h - 224.0 * 375 / 256) < 1e-9);
	assert_false(b.flip);

	/* portrait: 375x500 is the transpose */
	center_crop_box(375, 500, 224, &b);
	assert_true(fabs(b.y - 58.0 * 500 / 341) < 1e-9 && fabs(b.h - 224.0 * 500 / 341) < 1e-9);
	assert_true(fabs(b.x - 16.0 * 375 / 256) < 1e-9 && fabs(b.w - 224.0 * 375 / 256) < 1e-9);

	/* square: 256x256, 16 off each side: 14 and 196 in source pixels */
	center_crop_box(224, 224, 224, &b);
	assert_true(fabs(b.x - 14) < 1e-9 && fabs(b.y - 14) < 1e-9 && fabs(b.w - 196) < 1e-9 && fabs(b.h - 196) < 1e-9);

	/* size 112: Resize(128); 640x480 -> 170x128, left = round(29) = 29, top = 8 */
	center_crop_box(640, 480, 112, &b);
	assert_true(fabs(b.x - 29.0 * 640 / 170) < 1e-9 && fabs(b.w - 112.0 * 640 / 170) < 1e-9);
	assert_true(fabs(b.y - 8.0 * 480 / 128) < 1e-9 && fabs(b.h - 112.0 * 480 / 128) < 1e-9);
}

/* ---- the pipeline, end to end ---- */

static void test_solid_colour(void **state)
{
	struct pipeline *p = new_pipeline(0, 0);
	struct jpeg j = make_jpeg(&(struct jpeg_opts){.width = 300,
						      .height = 200,
						      .in_space = JCS_RGB,
						      .colour = {200, 30, 90},
						      .quality = 95});
	const uint32_t S = 64;
	uint8_t *out = malloc(S * S * 3 + 64);

	(void)state;
	assert_non_null(out);
	for (int kind = 0; kind < 2; kind++)
		for (uint64_t i = 0; i < 8; i++) {
			/* as the daemon's defaults: DCT scaling for the random crop */
			struct transform_spec spec = {.kind = kind,
						      .image_size = S,
						      .dct_scaling = kind == TRANSFORM_RANDOM_RESIZED_CROP};
			struct rng r;

			rng_init(&r, 1, 0, i, RNG_AUGMENT);
			memset(out, 0xEE, S * S * 3 + 64);
			assert_int_equal(pipeline_run(p, j.data, j.size, &spec, &r, out), 0);
			for (size_t k = 0; k < S * S; k++) {
				assert_true(abs(out[k * 3 + 0] - 200) <= 3);
				assert_true(abs(out[k * 3 + 1] - 30) <= 3);
				assert_true(abs(out[k * 3 + 2] - 90) <= 3);
			}
			for (size_t k = S * S * 3; k < S * S * 3 + 64; k++)
				assert_int_equal(out[k], 0xEE); /* exactly S * S * 3 bytes written */
		}
	free(out);
	free(j.data);
	pipeline_free(p);
}

static void test_grayscale(void **state)
{
	struct pipeline *p = new_pipeline(0, 0);
	struct jpeg j =
		make_jpeg(&(struct jpeg_opts){123, 77, JCS_GRAYSCALE, PAT_TEXTURE, {0}, 90, false, false, false});
	struct transform_spec spec = {.kind = TRANSFORM_RANDOM_RESIZED_CROP, .image_size = 48, .dct_scaling = true};
	uint8_t out[48 * 48 * 3];
	int spread = 0;

	(void)state;
	for (uint64_t i = 0; i < 10; i++) {
		struct rng r;

		rng_init(&r, 2, 0, i, RNG_AUGMENT);
		assert_int_equal(pipeline_run(p, j.data, j.size, &spec, &r, out), 0);
		for (size_t k = 0; k < 48 * 48; k++) {
			assert_int_equal(out[k * 3], out[k * 3 + 1]);
			assert_int_equal(out[k * 3], out[k * 3 + 2]);
			spread |= out[k * 3] < 100 ? 1 : out[k * 3] > 150 ? 2 : 0;
		}
	}
	assert_int_equal(spread, 3); /* really the texture, not a flat fill */
	free(j.data);
	pipeline_free(p);
}

/* CMYK, Adobe-inverted as libjpeg writes and Pillow reads it: stored byte = 255 - ink. */
static void test_cmyk(void **state)
{
	struct pipeline *p = new_pipeline(0, 0);
	/* magenta + yellow ink, no black: red */
	struct jpeg j = make_jpeg(&(struct jpeg_opts){.width = 64,
						      .height = 40,
						      .in_space = JCS_CMYK,
						      .colour = {255, 0, 0, 255},
						      .quality = 95});
	/* no ink but half black: R = G = B = 255 - 128 */
	struct jpeg k = make_jpeg(&(struct jpeg_opts){.width = 40,
						      .height = 64,
						      .in_space = JCS_CMYK,
						      .colour = {255, 255, 255, 127},
						      .quality = 95});
	struct jpeg t = make_jpeg(&(struct jpeg_opts){97, 61, JCS_CMYK, PAT_TEXTURE, {0}, 90, true, false, false});
	struct transform_spec spec = {.kind = TRANSFORM_CENTER_CROP, .image_size = 32};
	uint8_t out[32 * 32 * 3];

	(void)state;
	assert_int_equal(pipeline_run(p, j.data, j.size, &spec, NULL, out), 0);
	for (size_t i = 0; i < 32 * 32; i++)
		assert_true(out[i * 3] >= 252 && out[i * 3 + 1] <= 3 && out[i * 3 + 2] <= 3);
	assert_int_equal(pipeline_run(p, k.data, k.size, &spec, NULL, out), 0);
	for (size_t i = 0; i < 32 * 32 * 3; i++)
		assert_true(abs(out[i] - 127) <= 3);
	assert_int_equal(pipeline_run(p, t.data, t.size, &spec, NULL, out), 0); /* progressive CMYK */
	free(j.data);
	free(k.data);
	free(t.data);
	pipeline_free(p);
}

static void test_bad_files(void **state)
{
	struct pipeline *p = new_pipeline(0, 0);
	struct jpeg j = make_jpeg(&(struct jpeg_opts){256, 256, JCS_RGB, PAT_TEXTURE, {0}, 90, false, false, false});
	struct transform_spec rrc = {.kind = TRANSFORM_RANDOM_RESIZED_CROP, .image_size = 32};
	struct transform_spec cc = {.kind = TRANSFORM_CENTER_CROP, .image_size = 32};
	uint8_t out[32 * 32 * 3], junk[4096];
	struct rng r;

	(void)state;
	/* truncated: fails whatever the crop, even one above the cut */
	for (uint64_t i = 0; i < 20; i++) {
		rng_init(&r, 4, 0, i, RNG_AUGMENT);
		assert_int_equal(pipeline_run(p, j.data, j.size / 2, &rrc, &r, out), -EBADMSG);
		assert_true(strlen(pipeline_error(p)) > 0);
	}
	assert_int_equal(pipeline_run(p, j.data, j.size / 2, &cc, NULL, out), -EBADMSG);
	assert_int_equal(pipeline_run(p, j.data, 200, &cc, NULL, out), -EBADMSG);        /* inside the header */
	assert_int_equal(pipeline_run(p, j.data, j.size - 2, &cc, NULL, out), -EBADMSG); /* just the EOI gone */

	/* empty, junk, a PNG signature */
	assert_int_equal(pipeline_run(p, j.data, 0, &cc, NULL, out), -EBADMSG);
	assert_int_equal(pipeline_run(p, NULL, 0, &cc, NULL, out), -EBADMSG);
	srand(7);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)rand();
	assert_int_equal(pipeline_run(p, junk, sizeof(junk), &cc, NULL, out), -EBADMSG);
	memcpy(junk, "\x89PNG\r\n\x1a\n", 8);
	assert_int_equal(pipeline_run(p, junk, sizeof(junk), &cc, NULL, out), -EBADMSG);
	/* a JPEG's first bytes, then junk */
	memcpy(junk, j.data, 600);
	assert_int_equal(pipeline_run(p, junk, sizeof(junk), &cc, NULL, out), -EBADMSG);

	/* and the pipeline still works */
	assert_int_equal(pipeline_run(p, j.data, j.size, &cc, NULL, out), 0);
	assert_string_equal(pipeline_error(p), "");
	free(j.data);
	pipeline_free(p);
}

/* Bytes 5..8 of SOF0's payload (after FFC0 and the 2-byte length, 1 byte precision): height, width. */
static unsigned char *find_marker(struct jpeg *j, unsigned char m)
{
	for (unsigned long i = 0; i + 1 < j->size; i++)
		if (j->data[i] == 0xFF && j->data[i + 1] == m)
			return j->data + i;
	fail_msg("marker %02x not found", m);
	return NULL;
}

static void test_limits_and_unsupported(void **state)
{
	struct pipeline *p = new_pipeline(1000000, 3);
	struct jpeg j = make_jpeg(&(struct jpeg_opts){16, 16, JCS_RGB, PAT_GRADIENT, {0}, 90, false, false, false});
	struct jpeg prog = make_jpeg(&(struct jpeg_opts){64, 48, JCS_RGB, PAT_TEXTURE, {0}, 90, true, false, false});
	struct transform_spec cc = {.kind = TRANSFORM_CENTER_CROP, .image_size = 16};
	uint8_t out[16 * 16 * 3], *sof;

	(void)state;
	assert_int_equal(pipeline_run(p, j.data, j.size, &cc, NULL, out), 0);

	/* more scans than max_scans (jpeg_simple_progression writes 10) */
	assert_int_equal(pipeline_run(p, prog.data, prog.size, &cc, NULL, out), -EBADMSG);
	pipeline_free(p);
	p = new_pipeline(0, 0); /* the defaults: 500 scans, 89478485 pixels */
	assert_int_equal(pipeline_run(p, prog.data, prog.size, &cc, NULL, out), 0);

	/* a header claiming 65500x65500: refused before decoding */
	sof = find_marker(&j, 0xC0);
	sof[5] = sof[7] = 0xFF;
	sof[6] = sof[8] = 0xDC;
	assert_int_equal(pipeline_run(p, j.data, j.size, &cc, NULL, out), -E2BIG);
	assert_non_null(strstr(pipeline_error(p), "65500"));

	/* 12-bit precision, then lossless: this libjpeg reads neither */
	sof[5] = sof[7] = 0;
	sof[6] = sof[8] = 16;
	sof[4] = 12;
	assert_int_equal(pipeline_run(p, j.data, j.size, &cc, NULL, out), -EBADMSG);
	sof[4] = 8;
	sof[1] = 0xC3;
	assert_int_equal(pipeline_run(p, j.data, j.size, &cc, NULL, out), -EBADMSG);
	sof[1] = 0xC0;
	assert_int_equal(pipeline_run(p, j.data, j.size, &cc, NULL, out), 0);
	free(j.data);
	free(prog.data);
	pipeline_free(p);
}

/* Arithmetic coding: libjpeg-turbo decodes it, so it must come out right (or fail cleanly if built without). */
static void test_arithmetic(void **state)
{
	struct pipeline *p = new_pipeline(0, 0);
	struct jpeg j =
		make_jpeg(&(struct jpeg_opts){80, 60, JCS_RGB, PAT_SOLID, {10, 220, 120}, 95, false, true, false});
	struct transform_spec cc = {.kind = TRANSFORM_CENTER_CROP, .image_size = 24};
	uint8_t out[24 * 24 * 3];
	int r;

	(void)state;
	r = pipeline_run(p, j.data, j.size, &cc, NULL, out);
	assert_true(r == 0 || r == -EBADMSG);
	for (size_t i = 0; r == 0 && i < 24 * 24; i++)
		assert_true(abs(out[i * 3] - 10) <= 3 && abs(out[i * 3 + 1] - 220) <= 3 &&
			    abs(out[i * 3 + 2] - 120) <= 3);
	free(j.data);
	pipeline_free(p);
}

static void test_bad_args(void **state)
{
	struct pipeline *p = new_pipeline(0, 0);
	struct jpeg j = make_jpeg(&(struct jpeg_opts){16, 16, JCS_RGB, PAT_GRADIENT, {0}, 90, false, false, false});
	struct transform_spec ok = {.kind = TRANSFORM_RANDOM_RESIZED_CROP, .image_size = 8};
	struct transform_spec zero = {.kind = TRANSFORM_CENTER_CROP, .image_size = 0};
	struct transform_spec kind = {.kind = (enum transform_kind)7, .image_size = 8};
	uint8_t out[8 * 8 * 3];
	struct rng r;

	(void)state;
	rng_init(&r, 1, 1, 1, RNG_AUGMENT);
	assert_int_equal(pipeline_run(NULL, j.data, j.size, &ok, &r, out), -EINVAL);
	assert_int_equal(pipeline_run(p, j.data, j.size, NULL, &r, out), -EINVAL);
	assert_int_equal(pipeline_run(p, j.data, j.size, &ok, &r, NULL), -EINVAL);
	assert_int_equal(pipeline_run(p, NULL, 10, &ok, &r, out), -EINVAL);
	assert_int_equal(pipeline_run(p, j.data, j.size, &ok, NULL, out), -EINVAL); /* random crops need draws */
	assert_int_equal(pipeline_run(p, j.data, j.size, &zero, NULL, out), -EINVAL);
	assert_int_equal(pipeline_run(p, j.data, j.size, &kind, &r, out), -EINVAL);
	assert_int_equal(pipeline_run(p, j.data, j.size, &ok, &r, out), 0);
	assert_int_equal(pipeline_new(NULL, NULL), -EINVAL);
	pipeline_free(NULL);
	decoder_free(NULL);
	free(j.data);
	pipeline_free(p);
}

/* torchvision's Resize(size * 256 / 224) then CenterCrop(size), literally. */
static void resize_then_crop(struct resizer *rs, const uint8_t *full, uint32_t W, uint32_t H, uint32_t size,
			     uint8_t *out)
{
	uint32_t s = (uint32_t)floor(size * 256.0 / 224 + 0.5);
	uint32_t nw = W <= H ? s : (uint32_t)((uint64_t)s * W / H), nh = W <= H ? (uint32_t)((uint64_t)s * H / W) : s;
	uint32_t left = (uint32_t)nearbyint((nw - size) / 2.0), top = (uint32_t)nearbyint((nh - size) / 2.0);
	uint8_t *big = malloc((size_t)nw * nh * 3);

	assert_non_null(big);
	assert_int_equal(resize_rgb(rs, full, W, H, (size_t)W * 3, 0, 0, W, H, big, nw, nh, (size_t)nw * 3, false), 0);
	for (uint32_t y = 0; y < size; y++)
		memcpy(out + (size_t)y * size * 3, big + ((size_t)(y + top) * nw + left) * 3, (size_t)size * 3);
	free(big);
}

/*
 * Crop-aware decoding against decoding everything, then doing what
 * torchvision does with PIL: the random crop must be crop() then resize(),
 * the centre crop resize() of the whole image then crop(). Without DCT
 * scaling the random crop is exact (the decoder asks for a column of
 * context each side) and the centre crop off by 1 in rare pixels (the window
 * in single precision moves by a few ulps); allow 1 anywhere.
 */
static void test_partial_decode_matches_full(void **state)
{
	const struct jpeg_opts opts[] = {
		{400, 300, JCS_RGB, PAT_TEXTURE, {0}, 90, false, false, false}, /* 4:2:0 */
		{333, 251, JCS_RGB, PAT_TEXTURE, {0}, 85, false, false, true},  /* 4:4:4, odd sizes */
		{300, 400, JCS_RGB, PAT_TEXTURE, {0}, 90, true, false, false},  /* progressive */
		{257, 199, JCS_GRAYSCALE, PAT_TEXTURE, {0}, 90, false, false, false},
	};
	const uint32_t S = 224;
	struct pipeline *p = new_pipeline(0, 0);
	struct resizer *rs;
	uint8_t *got = malloc(S * S * 3), *want = malloc(S * S * 3);

	(void)state;
	assert_non_null(got);
	assert_non_null(want);
	assert_int_equal(resizer_new(&rs), 0);
	for (size_t o = 0; o < sizeof(opts) / sizeof(opts[0]); o++) {
		struct jpeg j = make_jpeg(&opts[o]);
		uint32_t W, H;
		uint8_t *full = full_decode(&j, 1, &W, &H);

		for (uint64_t i = 0; i < 12; i++) {
			struct transform_spec spec = {.kind = i < 10 ? TRANSFORM_RANDOM_RESIZED_CROP
								     : TRANSFORM_CENTER_CROP,
						      .image_size = S};
			struct crop_box b;
			struct rng r;
			int max;

			rng_init(&r, 8, 3, i, RNG_AUGMENT);
			assert_int_equal(pipeline_run(p, j.data, j.size, &spec, &r, got), 0);
			rng_init(&r, 8, 3, i, RNG_AUGMENT);
			if (spec.kind == TRANSFORM_RANDOM_RESIZED_CROP) {
				random_resized_crop_box(W, H, &r, &b);
				assert_int_equal(resize_rgb(rs, full + ((size_t)b.y * W + (size_t)b.x) * 3,
							    (uint32_t)b.w, (uint32_t)b.h, (size_t)W * 3, 0, 0, b.w, b.h,
							    want, S, S, S * 3, b.flip),
						 0);
			} else {
				resize_then_crop(rs, full, W, H, S, want);
				b = (struct crop_box){0};
			}
			assert_true(mean_abs_diff(got, want, S * S * 3, &max) < 0.01);
			assert_true(max <= 1);
		}
		free(full);
		free(j.data);
	}
	free(got);
	free(want);
	resizer_free(rs);
	pipeline_free(p);
}

/*
 * With a crop at least twice the output and dct_scaling, the decoder
 * downscales in the DCT domain (here by 2 and by 4): a different filter
 * than the triangle, so expect a mean absolute difference of about 1 and
 * maxima on edges of about 20 against resampling the full decode; we allow
 * mean 3. Without dct_scaling (center_crop's default) the same crops are
 * the full decode's, within 1.
 */
static void test_dct_scaled_decode_close_to_full(void **state)
{
	struct jpeg j = make_jpeg(&(struct jpeg_opts){1200, 900, JCS_RGB, PAT_TEXTURE, {0}, 90, false, false, false});
	const uint32_t sizes[] = {224, 96}; /* crop ~787 px: 1/2 for 224, 1/4 for 96 */
	struct pipeline *p = new_pipeline(0, 0);
	struct resizer *rs;
	uint32_t W, H;
	uint8_t *full = full_decode(&j, 1, &W, &H), *got = malloc(224 * 224 * 3), *want = malloc(224 * 224 * 3);

	(void)state;
	assert_non_null(got);
	assert_non_null(want);
	assert_int_equal(resizer_new(&rs), 0);
	for (size_t s = 0; s < 4; s++) {
		bool dct = s < 2;
		uint32_t S = sizes[s % 2];
		struct transform_spec spec = {.kind = TRANSFORM_CENTER_CROP, .image_size = S, .dct_scaling = dct};
		size_t n = (size_t)S * S * 3;
		struct crop_box b;
		int max;
		double mad;

		assert_int_equal(pipeline_run(p, j.data, j.size, &spec, NULL, got), 0);
		center_crop_box(W, H, S, &b);
		assert_int_equal(
			resize_rgb(rs, full, W, H, (size_t)W * 3, b.x, b.y, b.w, b.h, want, S, S, (size_t)S * 3, false),
			0);
		mad = mean_abs_diff(got, want, n, &max);
		if (dct) {
			assert_true(mad < 3.0);
			assert_true(mad > 0.3); /* or the scaled path was not taken */
		} else {
			assert_true(mad < 0.01);
			assert_true(max <= 1);
		}
	}
	free(full);
	free(got);
	free(want);
	free(j.data);
	resizer_free(rs);
	pipeline_free(p);
}

/*
 * Float outputs are the 8-bit image as torchvision's ToTensor() then
 * Normalize() make it, in float32 (then rounded to float16), as CHW planes.
 */

/*
 * IEEE binary16 of x, rounded to nearest even, by plain arithmetic: an
 * independent reference for the daemon's bit-twiddling float_to_half (and,
 * where the compiler has _Float16, checked against its conversion too).
 */
static uint16_t reference_half(float x)
{
	uint16_t sign = signbit(x) ? 0x8000 : 0;
	double a = fabs((double)x), m;
	uint16_t h;
	int e, biased;

	if (isnan(x))
		h = 0x7e00;
	else if (a >= 65520.0) /* rounds to infinity */
		h = sign | 0x7c00;
	else if (a < 0x1p-14) /* subnormal: whole units of 2^-24; 1024 units carry into the exponent */
		h = sign | (uint16_t)nearbyint(a * 0x1p24);
	else {
		frexp(a, &e);                    /* a = f * 2^e, f in [0.5, 1) */
		m = nearbyint(ldexp(a, 11 - e)); /* 11 significant bits: [1024, 2048] */
		biased = e - 1 + 15;
		if (m == 2048) {
			m = 1024;
			biased++;
		}
		h = biased >= 31 ? (sign | 0x7c00) : (uint16_t)(sign | biased << 10 | ((uint16_t)m - 1024));
	}
#ifdef __FLT16_MAX__
	{
		_Float16 native = (_Float16)x;

		assert_memory_equal(&native, &h, 2);
	}
#endif
	return h;
}
static void test_float_outputs(void **state)
{
	struct jpeg j = make_jpeg(&(struct jpeg_opts){180, 140, JCS_RGB, PAT_TEXTURE, {0}, 90, false, false, false});
	const uint32_t S = 40;
	const size_t n = (size_t)S * S;
	const struct {
		float mean[3], std[3];
	} norms[] = {
		{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}}, /* ImageNet */
		{{0, 0, 0}, {1e-6f, 1e4f, -2.5f}},                    /* float16 overflow, subnormals, a negative std */
	};
	struct pipeline *p = new_pipeline(0, 0);
	uint8_t *u8 = malloc(n * 3), *f = malloc(n * 3 * 4 + 16);

	(void)state;
	assert_non_null(u8);
	assert_non_null(f);
	for (size_t k = 0; k < sizeof(norms) / sizeof(norms[0]); k++)
		for (int dt = DTYPE_FLOAT32; dt <= DTYPE_FLOAT16; dt++)
			for (uint64_t i = 0; i < 3; i++) {
				struct transform_spec spec = {.kind = TRANSFORM_RANDOM_RESIZED_CROP,
							      .image_size = S,
							      .dct_scaling = true};
				size_t elem = dt == DTYPE_FLOAT32 ? 4 : 2;
				struct rng r;

				rng_init(&r, 6, 0, i, RNG_AUGMENT);
				assert_int_equal(pipeline_run(p, j.data, j.size, &spec, &r, u8), 0);
				spec.dtype = (enum sample_dtype)dt;
				memcpy(spec.mean, norms[k].mean, sizeof(spec.mean));
				memcpy(spec.std, norms[k].std, sizeof(spec.std));
				assert_int_equal(transform_output_bytes(&spec), n * 3 * elem);
				memset(f, 0xEE, n * 3 * 4 + 16);
				rng_init(&r, 6, 0, i, RNG_AUGMENT);
				assert_int_equal(pipeline_run(p, j.data, j.size, &spec, &r, f), 0);
				for (int c = 0; c < 3; c++)
					for (size_t q = 0; q < n; q++) {
						float want =
							((float)u8[q * 3 + c] / 255.0f - spec.mean[c]) / spec.std[c];

						if (dt == DTYPE_FLOAT32) {
							assert_memory_equal(f + ((size_t)c * n + q) * 4, &want, 4);
						} else {
							uint16_t h = reference_half(want);

							assert_memory_equal(f + ((size_t)c * n + q) * 2, &h, 2);
						}
					}
				assert_int_equal(f[n * 3 * elem], 0xEE);
			}

	/* a zero or non-finite std, a non-finite mean, an unknown dtype */
	{
		struct transform_spec bad = {.kind = TRANSFORM_CENTER_CROP,
					     .image_size = S,
					     .dtype = DTYPE_FLOAT32,
					     .mean = {0, 0, 0},
					     .std = {1, 0, 1}};

		assert_int_equal(pipeline_run(p, j.data, j.size, &bad, NULL, f), -EINVAL);
		bad.std[1] = INFINITY;
		assert_int_equal(pipeline_run(p, j.data, j.size, &bad, NULL, f), -EINVAL);
		bad.std[1] = 1;
		bad.mean[2] = NAN;
		assert_int_equal(pipeline_run(p, j.data, j.size, &bad, NULL, f), -EINVAL);
		bad.mean[2] = 0;
		bad.dtype = (enum sample_dtype)9;
		assert_int_equal(pipeline_run(p, j.data, j.size, &bad, NULL, f), -EINVAL);
		bad.dtype = DTYPE_FLOAT16;
		assert_int_equal(pipeline_run(p, j.data, j.size, &bad, NULL, f), 0);
	}
	free(u8);
	free(f);
	free(j.data);
	pipeline_free(p);
}

/* The decoder alone: any region, at any scale, is exactly those pixels of a full decode. */
static void test_decoder_regions(void **state)
{
	const struct jpeg_opts opts[] = {
		{213, 157, JCS_RGB, PAT_TEXTURE, {0}, 90, false, false, false},
		{150, 190, JCS_RGB, PAT_TEXTURE, {0}, 80, true, false, true},
		{99, 101, JCS_GRAYSCALE, PAT_TEXTURE, {0}, 90, true, false, false},
	};
	struct decoder *d;

	(void)state;
	assert_int_equal(decoder_new(0, 0, &d), 0);
	srand(3);
	for (size_t o = 0; o < sizeof(opts) / sizeof(opts[0]); o++) {
		struct jpeg j = make_jpeg(&opts[o]);

		for (unsigned denom = 1; denom <= 8; denom *= 2) {
			uint32_t W, H, w, h, sw, sh;
			uint8_t *full = full_decode(&j, denom, &W, &H);

			for (int it = 0; it < 25; it++) {
				uint32_t x0 = (uint32_t)rand() % W, y0 = (uint32_t)rand() % H;
				uint32_t x1 = x0 + 1 + (uint32_t)rand() % (W - x0),
					 y1 = y0 + 1 + (uint32_t)rand() % (H - y0);
				struct decoded_region reg;

				assert_int_equal(decoder_open(d, j.data, j.size, &w, &h), 0);
				assert_true(w == opts[o].width && h == opts[o].height);
				decoder_scaled_size(d, denom, &sw, &sh);
				assert_true(sw == W && sh == H);
				assert_int_equal(decoder_read(d, denom, x0, y0, x1, y1, &reg), 0);
				assert_true(reg.width == x1 - x0 && reg.height == y1 - y0);
				for (uint32_t y = 0; y < reg.height; y++)
					for (uint32_t x = 0; x < reg.width; x++)
						assert_memory_equal(reg.pixels + y * reg.stride + (size_t)x * 4,
								    full + ((size_t)(y + y0) * W + x + x0) * 3, 3);
				/* one read per open */
				assert_int_equal(decoder_read(d, denom, x0, y0, x1, y1, &reg), -EINVAL);
				decoder_finish(d);
			}
			/* bad regions and scales */
			assert_int_equal(decoder_open(d, j.data, j.size, &w, &h), 0);
			{
				struct decoded_region reg;

				assert_int_equal(decoder_read(d, 3, 0, 0, 1, 1, &reg), -EINVAL);
				assert_int_equal(decoder_read(d, denom, 0, 0, W + 1, 1, &reg), -EINVAL);
				assert_int_equal(decoder_read(d, denom, 5, 0, 5, 1, &reg), -EINVAL);
			}
			decoder_finish(d);
			free(full);
		}
		free(j.data);
	}
	decoder_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rrc_bounds),
		cmocka_unit_test(test_rrc_deterministic_and_flips),
		cmocka_unit_test(test_rrc_fallback),
		cmocka_unit_test(test_center_crop_box),
		cmocka_unit_test(test_solid_colour),
		cmocka_unit_test(test_grayscale),
		cmocka_unit_test(test_cmyk),
		cmocka_unit_test(test_bad_files),
		cmocka_unit_test(test_limits_and_unsupported),
		cmocka_unit_test(test_arithmetic),
		cmocka_unit_test(test_bad_args),
		cmocka_unit_test(test_partial_decode_matches_full),
		cmocka_unit_test(test_dct_scaled_decode_close_to_full),
		cmocka_unit_test(test_float_outputs),
		cmocka_unit_test(test_decoder_regions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
