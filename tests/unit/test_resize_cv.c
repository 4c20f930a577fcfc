/* SPDX-License-Identifier: MIT */
/*
 * resize_cv.c's vector kernels (AVX2, AVX-512) against its portable code,
 * byte for byte: on the real photos of data/photos through pipeline_fit()
 * (decode, EXIF turn, cv2 resample: what a detection sample is), and on
 * edge sizes (1 x N, N x 1, widths that are no multiple of 8, 16 or 32,
 * upscale and downscale, the exact 2x shrink, 3- and 4-byte pixels,
 * strides). The match with cv2.resize itself is
 * tests/integration/test_resize_cv.py's.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "augment.h"
#include "detect.h"
#include "resize.h"
#include "resize_cv.h"
#include "rng.h"

static const enum resize_isa vector_isas[] = {RESIZE_ISA_AVX2, RESIZE_ISA_AVX512};
#define NISA (sizeof(vector_isas) / sizeof(vector_isas[0]))

/* A resizer with `isa`'s kernels, or NULL where this CPU has none. */
static struct cv_resizer *resizer_for(enum resize_isa isa)
{
	struct cv_resizer *r = NULL;

	if (resize_force_isa(isa) < 0)
		return NULL;
	assert_int_equal(cv_resizer_new(&r), 0);
	resize_force_isa(RESIZE_ISA_AUTO);
	assert_int_equal(cv_resizer_isa(r), isa);
	return r;
}

static void test_isa_pick(void **state)
{
	struct cv_resizer *r;

	(void)state;
	r = resizer_for(RESIZE_ISA_SCALAR);
	assert_non_null(r);
	cv_resizer_free(r);
	/* SSE2 has no kernel of its own here: the portable code */
	if (resize_force_isa(RESIZE_ISA_SSE2) == 0) {
		assert_int_equal(cv_resizer_new(&r), 0);
		assert_int_equal(cv_resizer_isa(r), RESIZE_ISA_SCALAR);
		cv_resizer_free(r);
	}
	resize_force_isa(RESIZE_ISA_AUTO);
	assert_int_equal(cv_resizer_new(&r), 0);
	assert_true(cv_resizer_isa(r) == RESIZE_ISA_SCALAR || cv_resizer_isa(r) == RESIZE_ISA_AVX2 ||
		    cv_resizer_isa(r) == RESIZE_ISA_AVX512);
	cv_resizer_free(r);
	cv_resizer_free(NULL);
}

/* Every source size below and every output size: the vector kernels give the portable bytes. */
static void test_edge_sizes(void **state)
{
	static const uint32_t src_sizes[][2] = {{1, 1},   {1, 9},   {9, 1},   {2, 2},   {3, 7},     {7, 3},   {17, 5},
						{31, 33}, {64, 48}, {65, 47}, {127, 3}, {200, 150}, {333, 1}, {1, 333}};
	static const uint32_t dst_sizes[][2] = {{1, 1},   {1, 5},    {5, 1},   {2, 3},     {7, 7},    {8, 8},   {15, 9},
						{16, 16}, {17, 2},   {31, 31}, {32, 5},    {33, 33},  {63, 20}, {64, 1},
						{65, 64}, {100, 75}, {129, 3}, {250, 190}, {400, 300}};
	struct cv_resizer *scalar = resizer_for(RESIZE_ISA_SCALAR), *vec[NISA];
	struct rng g;
	uint8_t *src = malloc(400 * 400 * 4 + 64), *want = malloc(1300 * 300), *got = malloc(1300 * 300);
	unsigned compared = 0;

	(void)state;
	assert_non_null(src);
	assert_non_null(want);
	assert_non_null(got);
	for (size_t i = 0; i < NISA; i++)
		vec[i] = resizer_for(vector_isas[i]);
	rng_init(&g, 11, 0, 0, RNG_AUGMENT);
	for (size_t k = 0; k < 400 * 400 * 4 + 64; k++)
		src[k] = (uint8_t)(rng_u32(&g) >> 24);
	for (size_t s = 0; s < sizeof(src_sizes) / sizeof(src_sizes[0]); s++) {
		for (size_t d = 0; d < sizeof(dst_sizes) / sizeof(dst_sizes[0]); d++) {
			for (unsigned bpp = 3; bpp <= 4; bpp++) {
				uint32_t sw = src_sizes[s][0], sh = src_sizes[s][1];
				uint32_t dw = dst_sizes[d][0], dh = dst_sizes[d][1];
				/* a stride with slack, and an output stride wider than the row */
				size_t sstride = (size_t)sw * bpp + 5, dstride = (size_t)dw * 3 + 7;

				memset(want, 0xa5, dstride * dh);
				assert_int_equal(
					cv_resize_linear(scalar, src, sw, sh, sstride, bpp, want, dw, dh, dstride), 0);
				for (size_t i = 0; i < NISA; i++) {
					if (!vec[i])
						continue;
					memset(got, 0xa5, dstride * dh);
					assert_int_equal(cv_resize_linear(vec[i], src, sw, sh, sstride, bpp, got, dw,
									  dh, dstride),
							 0);
					if (memcmp(want, got, dstride * dh)) {
						fprintf(stderr, "isa %d: %ux%u (bpp %u) -> %ux%u differs\n",
							vector_isas[i], sw, sh, bpp, dw, dh);
						fail();
					}
					compared++;
				}
			}
		}
	}
	/* the exact 2x shrink (INTER_AREA's mean) at odd and even sizes */
	for (uint32_t w = 1; w <= 70; w += 3)
		for (unsigned bpp = 3; bpp <= 4; bpp++) {
			size_t sstride = (size_t)2 * w * bpp, dstride = (size_t)w * 3;

			assert_int_equal(cv_resize_linear(scalar, src, 2 * w, 2 * w, sstride, bpp, want, w, w, dstride),
					 0);
			for (size_t i = 0; i < NISA; i++) {
				if (!vec[i])
					continue;
				assert_int_equal(
					cv_resize_linear(vec[i], src, 2 * w, 2 * w, sstride, bpp, got, w, w, dstride),
					0);
				assert_memory_equal(want, got, dstride * w);
				compared++;
			}
		}
	if (!vec[0])
		printf("[ SKIPPED  ] no AVX2 on this CPU: nothing compared\n");
	else
		assert_true(compared > 0);
	for (size_t i = 0; i < NISA; i++)
		cv_resizer_free(vec[i]);
	cv_resizer_free(scalar);
	free(src);
	free(want);
	free(got);
}

static uint8_t *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	rewind(f);
	b = malloc((size_t)n);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

/* A pipeline whose cv2 resampler (made on its first fit) has `isa`'s kernels, or NULL. */
static struct pipeline *pipeline_for(enum resize_isa isa, const uint8_t *file, size_t len)
{
	struct decode_limits lim = {.max_pixels = 1ull << 26};
	struct fit_request req = {8, 0, 0, FIT_CV2, false};
	struct fit_result res;
	struct pipeline *p;
	uint8_t out[8 * 8 * 3];

	if (resize_force_isa(isa) < 0)
		return NULL;
	assert_int_equal(pipeline_new(&lim, &p), 0);
	assert_int_equal(pipeline_fit(p, file, len, &req, out, &res), 0);
	resize_force_isa(RESIZE_ISA_AUTO);
	return p;
}

/* Each photo as a detection sample at several long sides (up and down), letterboxed into boxes too. */
static void test_photos(void **state)
{
	static const char *const photos[] = {
		"rocket.jpg", "hubble_deep_field.jpg", "astronaut.png", "chelsea.png", "coffee.png", "camera.png"};
	static const uint32_t sides[] = {640, 320, 500, 333, 129, 1000, 1283};
	unsigned compared = 0;

	(void)state;
	for (size_t f = 0; f < sizeof(photos) / sizeof(photos[0]); f++) {
		char path[256];
		size_t len;
		uint8_t *file;
		struct pipeline *scalar, *vec[NISA];

		snprintf(path, sizeof(path), "data/photos/%s", photos[f]);
		file = read_file(path, &len);
		scalar = pipeline_for(RESIZE_ISA_SCALAR, file, len);
		for (size_t i = 0; i < NISA; i++)
			vec[i] = pipeline_for(vector_isas[i], file, len);
		for (size_t s = 0; s < sizeof(sides) / sizeof(sides[0]); s++) {
			for (int boxed = 0; boxed < 2; boxed++) {
				struct fit_request req = {sides[s], boxed ? 320 : 0, boxed ? 256 : 0, FIT_CV2, false};
				struct fit_result a, b;
				size_t bytes = (size_t)sides[s] * sides[s] * 3;
				uint8_t *want = malloc(bytes), *got = malloc(bytes);

				assert_non_null(want);
				assert_non_null(got);
				assert_int_equal(pipeline_fit(scalar, file, len, &req, want, &a), 0);
				for (size_t i = 0; i < NISA; i++) {
					if (!vec[i])
						continue;
					assert_int_equal(pipeline_fit(vec[i], file, len, &req, got, &b), 0);
					assert_int_equal(a.width, b.width);
					assert_int_equal(a.height, b.height);
					if (memcmp(want, got, (size_t)a.width * a.height * 3)) {
						fprintf(stderr, "isa %d: %s at %u%s differs\n", vector_isas[i],
							photos[f], sides[s], boxed ? " boxed" : "");
						fail();
					}
					compared++;
				}
				free(want);
				free(got);
			}
		}
		for (size_t i = 0; i < NISA; i++)
			pipeline_free(vec[i]);
		pipeline_free(scalar);
		free(file);
	}
	if (resize_force_isa(RESIZE_ISA_AVX2) == 0)
		assert_true(compared > 0);
	resize_force_isa(RESIZE_ISA_AUTO);
}

/* A fit straight into its letterbox (in_box, the daemon's letterbox path) equals the fit alone placed
 * with DETECT_PAD around it, for both resamplers, square and rectangular boxes, up and down. */
static void test_fit_in_box(void **state)
{
	static const char *const photos[] = {"rocket.jpg", "hubble_deep_field.jpg", "chelsea.png"};
	static const uint32_t boxes[][3] = {{640, 640, 640},
					    {320, 320, 256},
					    {640, 640, 352},
					    {256, 192, 256},
					    {1000, 1000, 1000}};
	struct decode_limits lim = {.max_pixels = 1ull << 26};
	struct pipeline *p;

	(void)state;
	assert_int_equal(pipeline_new(&lim, &p), 0);
	for (size_t f = 0; f < sizeof(photos) / sizeof(photos[0]); f++) {
		char path[256];
		size_t len;
		uint8_t *file;

		snprintf(path, sizeof(path), "data/photos/%s", photos[f]);
		file = read_file(path, &len);
		for (size_t b = 0; b < sizeof(boxes) / sizeof(boxes[0]); b++)
			for (int rs = FIT_ANTIALIAS; rs <= FIT_CV2; rs++) {
				const uint32_t side = boxes[b][0], bw = boxes[b][1], bh = boxes[b][2];
				struct fit_request req = {side, bw, bh, (enum fit_resample)rs, false};
				struct fit_result a, c;
				struct detect_letterbox g;
				uint8_t *alone = malloc((size_t)side * side * 3), *want = malloc((size_t)bw * bh * 3);
				uint8_t *got = malloc((size_t)bw * bh * 3);

				assert_true(alone && want && got);
				assert_int_equal(pipeline_fit(p, file, len, &req, alone, &a), 0);
				detect_letterbox_geometry(a.width, a.height, bw, bh, &g);
				memset(want, DETECT_PAD, (size_t)bw * bh * 3);
				for (uint32_t y = 0; y < a.height; y++)
					memcpy(want + ((size_t)(g.top + (int)y) * bw + (size_t)g.left) * 3,
					       alone + (size_t)y * a.width * 3, (size_t)a.width * 3);
				memset(got, 0x5a, (size_t)bw * bh * 3);
				req.in_box = true;
				assert_int_equal(pipeline_fit(p, file, len, &req, got, &c), 0);
				assert_memory_equal(&a, &c, sizeof(a));
				assert_memory_equal(want, got, (size_t)bw * bh * 3);
				free(alone);
				free(want);
				free(got);
			}
		free(file);
	}
	/* a box of 0 with in_box is a bad request */
	{
		struct fit_request req = {64, 0, 0, FIT_CV2, true};
		struct fit_result res;
		uint8_t out[64 * 64 * 3];
		size_t len;
		uint8_t *file = read_file("data/photos/rocket.jpg", &len);

		assert_int_equal(pipeline_fit(p, file, len, &req, out, &res), -EINVAL);
		free(file);
	}
	pipeline_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_isa_pick),
		cmocka_unit_test(test_edge_sizes),
		cmocka_unit_test(test_photos),
		cmocka_unit_test(test_fit_in_box),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
