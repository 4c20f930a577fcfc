/* SPDX-License-Identifier: MIT */
/* Rectangular detection batches (rect.c, plan.c's fixed order) and OpenCV's
 * INTER_LINEAR arithmetic (resize_cv.c). Expected values are Ultralytics'
 * formulas worked by hand and cv2.resize outputs (opencv-python 5.0). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "detect.h"
#include "plan.h"
#include "rect.h"
#include "resize_cv.h"

/* widths and heights: ratios h/w 0.5, 2, 1, 0.75, unknown (square), 1.5, 0.5 */
static const uint32_t sizes[] = {640, 320, 100, 200, 50, 50, 400, 300, 0, 0, 200, 300, 64, 32};
#define NS 7

static void test_order_stable_by_ratio(void **state)
{
	uint64_t *o;
	const uint64_t want[NS] = {0, 6, 3, 2, 4, 5, 1}; /* 0.5 0.5 0.75 1 1 1.5 2, ties by index */

	(void)state;
	assert_int_equal(rect_order(sizes, NS, &o), 0);
	assert_memory_equal(o, want, sizeof(want));
	free(o);
}

static void test_batch_shapes(void **state)
{
	uint64_t *o;
	uint32_t h, w;

	(void)state;
	assert_int_equal(rect_order(sizes, NS, &o), 0);
	/* [0.5, 0.5]: maxi < 1 -> [0.5, 1] * 640 / 32 + 0.5 -> ceil(10.5), ceil(20.5) -> 352 x 672 */
	rect_batch_shape(sizes, o, 0, 1, 640, 32, 0.5, &h, &w);
	assert_int_equal(h, 352);
	assert_int_equal(w, 672);
	/* [0.75, 1]: neither -> square: 672 x 672 */
	rect_batch_shape(sizes, o, 2, 3, 640, 32, 0.5, &h, &w);
	assert_int_equal(h, 672);
	assert_int_equal(w, 672);
	/* [1.5, 2]: mini > 1 -> [1, 1/1.5] -> 20.5 -> 672, 13.33 + 0.5 -> 448 */
	rect_batch_shape(sizes, o, 5, 6, 640, 32, 0.5, &h, &w);
	assert_int_equal(h, 672);
	assert_int_equal(w, 448);
	/* pad 0 (training's): 0.5 * 320 / 32 = 5 exactly -> 160; 320 */
	rect_batch_shape(sizes, o, 0, 1, 320, 32, 0.0, &h, &w);
	assert_int_equal(h, 160);
	assert_int_equal(w, 320);
	assert_int_equal(rect_max_side(640, 32, 0.5), 672);
	assert_int_equal(rect_max_side(640, 32, 0.0), 640);
	assert_int_equal(rect_max_side(100, 32, 0.0), 128);
	free(o);
}

/* Batches of one shape (Ultralytics' trainer keeps its shuffle then) or not. */
static void test_one_shape(void **state)
{
	/* all 4:3 landscape; then one portrait among them */
	static const uint32_t same[] = {640, 480, 320, 240, 800, 600, 400, 300, 64, 48};
	static const uint32_t mixed[] = {640, 480, 320, 240, 800, 600, 300, 400, 64, 48};
	uint64_t *o;
	uint32_t h = 0, w = 0;

	(void)state;
	assert_int_equal(rect_order(same, 5, &o), 0);
	/* 0.75 * 640 / 32 = 15 -> 480 x 640, whatever the batch size */
	assert_true(rect_one_shape(same, o, 5, 2, 640, 32, 0.0, &h, &w));
	assert_int_equal(h, 480);
	assert_int_equal(w, 640);
	assert_true(rect_one_shape(same, o, 5, 8, 640, 32, 0.0, &h, &w));
	free(o);
	assert_int_equal(rect_order(mixed, 5, &o), 0);
	/* one batch holding all: [0.75, 1.33] is square; batches of 2: 480 x 640 twice, then the portrait's */
	h = w = 7;
	assert_true(rect_one_shape(mixed, o, 5, 5, 640, 32, 0.0, &h, &w));
	assert_int_equal(h, 640);
	assert_int_equal(w, 640);
	h = w = 7;
	assert_false(rect_one_shape(mixed, o, 5, 2, 640, 32, 0.0, &h, &w));
	assert_int_equal(h, 7); /* untouched */
	assert_false(rect_one_shape(mixed, o, 0, 2, 640, 32, 0.0, &h, &w));
	free(o);
}

/* ContiguousDistributedSampler: 7 samples, batch 2 -> 4 batches over 3
 * ranks: [0, 4), [4, 6), [6, 7). Batch >= N: unit batches, 7 over 3 ranks. */
static void test_contiguous_ranks(void **state)
{
	const uint64_t fixed[NS] = {6, 5, 4, 3, 2, 1, 0};
	const uint64_t want[3][2] = {{0, 4}, {4, 6}, {6, 7}}, unit[3][2] = {{0, 3}, {3, 5}, {5, 7}};

	(void)state;
	for (uint32_t r = 0; r < 3; r++) {
		struct plan_spec s = {.samples = NS, .rank = r, .world_size = 3, .batch_size = 2, .fixed = fixed};
		uint64_t first, end, *o;

		assert_int_equal(plan_validate(&s), 0);
		plan_fixed_range(&s, &first, &end);
		assert_int_equal(first, want[r][0]);
		assert_int_equal(end, want[r][1]);
		assert_int_equal(plan_samples_per_epoch(&s), end - first);
		assert_int_equal(plan_batches_per_epoch(&s), (end - first + 1) / 2);
		assert_int_equal(plan_epoch_order(&s, 5, &o), 0);
		assert_memory_equal(o, fixed + first, (end - first) * sizeof(*o));
		free(o);
		s.batch_size = 8;
		plan_fixed_range(&s, &first, &end);
		assert_int_equal(first, unit[r][0]);
		assert_int_equal(end, unit[r][1]);
		assert_int_equal(plan_batches_per_epoch(&s), 1);
	}
	/* 4 batches over 5 ranks: rank 4 gets nothing, refused */
	struct plan_spec s = {.samples = NS, .rank = 4, .world_size = 5, .batch_size = 2, .fixed = fixed};
	assert_int_equal(plan_validate(&s), -22);
	s = (struct plan_spec){.samples = NS, .world_size = 1, .batch_size = 2, .fixed = fixed, .shuffle = true};
	assert_int_equal(plan_validate(&s), -22);
}

/* load_image and LetterBox sizes, as Python computes them. */
static void test_fit_and_letterbox(void **state)
{
	struct detect_letterbox g;
	uint32_t w, h;

	(void)state;
	detect_fit_size(1000, 750, 640, &w, &h);
	assert_int_equal(w, 640);
	assert_int_equal(h, 480);
	detect_fit_size(333, 1000, 640, &w, &h); /* 333 * 0.64 = 213.12 -> ceil 214 */
	assert_int_equal(w, 214);
	assert_int_equal(h, 640);
	detect_fit_size(100, 50, 640, &w, &h); /* upscaled, as load_image does */
	assert_int_equal(w, 640);
	assert_int_equal(h, 320);
	detect_letterbox_geometry(640, 480, 640, 672, &g); /* fits: r 1, centred, dw = 0, dh = 96 */
	assert_true(g.r == 1.0);
	assert_int_equal(g.left, 0);
	assert_int_equal(g.top, 96);
	detect_letterbox_geometry(640, 480, 672, 352, &g); /* too tall: r = 352 / 480 */
	assert_true(g.r == 352.0 / 480.0);
	assert_int_equal(g.w, 469); /* round(469.33) */
	assert_int_equal(g.h, 352);
	assert_int_equal(g.left, 101); /* round(101.5 - 0.1) */
	assert_int_equal(g.top, 0);
	detect_letterbox_geometry(639, 480, 640, 481, &g); /* dw 0.5: round(0.4) = 0 */
	assert_int_equal(g.left, 0);
	assert_int_equal(g.top, 0);
}

static uint8_t src[5][7][3];

static void fill_src(void)
{
	for (int i = 0; i < 5 * 7 * 3; i++)
		((uint8_t *)src)[i] = (uint8_t)(i * 37 % 256);
}

static void check_cv(uint32_t w, uint32_t h, const uint8_t *want)
{
	struct cv_resizer *r;
	uint8_t *out = calloc((size_t)w * h * 3, 1);

	assert_non_null(out);
	assert_int_equal(cv_resizer_new(&r), 0);
	fill_src();
	assert_int_equal(cv_resize_linear(r, &src[0][0][0], 7, 5, 7 * 3, 3, out, w, h, (size_t)w * 3), 0);
	assert_memory_equal(out, want, (size_t)w * h * 3);
	cv_resizer_free(r);
	free(out);
}

/* cv2.resize(src, (w, h), interpolation=cv2.INTER_LINEAR) of the 7 x 5 ramp above. */
static void test_cv_linear_matches_opencv(void **state)
{
	static const uint8_t down[] = {75,  112, 149, 78,  115, 152, 81,  118, 155, 86,  123, 160,
				       89,  126, 163, 92,  129, 166, 97,  134, 171, 101, 138, 175,
				       104, 141, 178, 109, 146, 183, 112, 149, 186, 115, 152, 114};
	static const uint8_t wide[] = {29, 66, 103, 184, 67, 104, 84,  121, 158, 137, 174, 57, 138, 175, 212,
				       51, 88, 125, 168, 90, 127, 106, 143, 180, 159, 158, 80, 161, 198, 184};
	static const uint8_t up[] = {
		0,   37,  74,  50,  87,  124, 121, 135, 172, 192, 42,  79,  169, 43,  80,  77,  114, 151, 148, 185,
		59,  148, 185, 36,  56,  93,  107, 104, 140, 177, 154, 191, 228, 3,   40,  77,  53,  90,  127, 124,
		138, 175, 195, 45,  83,  172, 46,  83,  80,  117, 154, 150, 188, 62,  151, 188, 39,  59,  96,  110,
		107, 143, 180, 157, 194, 231, 8,   45,  82,  58,  95,  132, 129, 143, 180, 200, 50,  87,  177, 51,
		88,  85,  122, 159, 155, 193, 67,  156, 193, 44,  64,  101, 115, 112, 148, 186, 162, 199, 236, 13,
		50,  87,  63,  100, 137, 134, 148, 185, 205, 55,  92,  182, 56,  93,  90,  127, 164, 161, 198, 72,
		161, 198, 49,  69,  106, 120, 117, 153, 190, 167, 204, 241, 18,  55,  92,  68,  105, 142, 139, 153,
		190, 210, 61,  98,  187, 61,  98,  95,  132, 169, 166, 203, 77,  166, 203, 54,  74,  111, 125, 122,
		159, 196, 172, 209, 246, 23,  60,  97,  73,  110, 147, 144, 158, 195, 215, 65,  102, 192, 66,  103,
		100, 137, 174, 171, 208, 82,  171, 208, 59,  79,  116, 130, 127, 163, 200, 177, 214, 251, 28,  65,
		102, 78,  115, 152, 146, 163, 200, 199, 70,  107, 179, 71,  108, 105, 142, 179, 175, 194, 87,  176,
		193, 64,  84,  119, 135, 132, 168, 190, 182, 219, 227, 33,  70,  107, 83,  120, 157, 138, 168, 205,
		100, 75,  113, 93,  76,  113, 110, 147, 184, 180, 109, 92,  181, 94,  69,  89,  111, 140, 137, 173,
		117, 187, 224, 90,  36,  73,  110, 86,  123, 160, 134, 171, 208, 41,  78,  115, 42,  79,  116, 113,
		150, 187, 184, 58,  95,  184, 35,  72,  92,  106, 143, 140, 176, 74,  190, 227, 8,
	};

	(void)state;
	check_cv(3, 4, down);
	check_cv(5, 2, wide);
	check_cv(11, 9, up);
}

/* An exact half size is INTER_AREA's rounded 2 x 2 mean; from RGBX (X ignored). */
static void test_cv_half_is_area_mean(void **state)
{
	uint8_t in[4][4][4], out[2][2][3];
	struct cv_resizer *r;

	(void)state;
	for (int i = 0; i < 64; i++)
		((uint8_t *)in)[i] = (uint8_t)(i * 53 % 251);
	assert_int_equal(cv_resizer_new(&r), 0);
	assert_int_equal(cv_resize_linear(r, &in[0][0][0], 4, 4, 16, 4, &out[0][0][0], 2, 2, 6), 0);
	for (int y = 0; y < 2; y++)
		for (int x = 0; x < 2; x++)
			for (int c = 0; c < 3; c++) {
				int s = in[2 * y][2 * x][c] + in[2 * y][2 * x + 1][c] + in[2 * y + 1][2 * x][c] +
					in[2 * y + 1][2 * x + 1][c];

				assert_int_equal(out[y][x][c], (s + 2) >> 2);
			}
	/* the same size: a copy, dropping X */
	assert_int_equal(cv_resize_linear(r, &in[0][0][0], 2, 2, 16, 4, &out[0][0][0], 2, 2, 6), 0);
	assert_memory_equal(out[1][1], in[1][1], 3);
	assert_int_equal(cv_resize_linear(r, &in[0][0][0], 0, 2, 16, 4, &out[0][0][0], 2, 2, 6), -22);
	assert_int_equal(cv_resize_linear(r, &in[0][0][0], 2, 2, 16, 2, &out[0][0][0], 2, 2, 6), -22);
	cv_resizer_free(r);
	cv_resizer_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_stable_by_ratio),
		cmocka_unit_test(test_batch_shapes),
		cmocka_unit_test(test_contiguous_ranks),
		cmocka_unit_test(test_fit_and_letterbox),
		cmocka_unit_test(test_one_shape),
		cmocka_unit_test(test_cv_linear_matches_opencv),
		cmocka_unit_test(test_cv_half_is_area_mean),
	};
	return cmocka_run_group_tests_name("rect", tests, NULL, NULL);
}
