/* SPDX-License-Identifier: MIT */
/* Instance geometry (instgeom.c) on cases worked by hand: the comparison
 * with Ultralytics' own functions on random inputs is
 * tests/ultralytics/test_instgeom.py; these hold without Ultralytics. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "instgeom.h"

static void test_segment2box(void **state)
{
	const float inside[6] = {10, 20, 100, 20, 50, 80};
	const float corner[8] = {-10, -10, 10, -10, 10, 10, -10, 10}; /* around the image's corner (0, 0) */
	const float away[6] = {-30, -30, -20, -30, -25, -20};
	float box[4];

	(void)state;
	instgeom_segment2box(inside, 3, 640, 480, box);
	assert_true(box[0] == 10 && box[1] == 20 && box[2] == 100 && box[3] == 80);
	instgeom_segment2box(corner, 4, 640, 480, box);
	assert_true(box[0] == 0 && box[1] == 0 && box[2] == 10 && box[3] == 10);
	instgeom_segment2box(away, 3, 640, 480, box);
	assert_true(box[0] == 0 && box[1] == 0 && box[2] == 0 && box[3] == 0);
	assert_int_equal(instgeom_point_in_polygon(corner, 4, 0, 0), 1);
	assert_int_equal(instgeom_point_in_polygon(corner, 4, 10, 0), 0); /* on an edge */
	assert_int_equal(instgeom_point_in_polygon(corner, 4, 11, 0), -1);
}

static void test_min_area_rect(void **state)
{
	const float rect[8] = {0, 0, 10, 0, 10, 5, 0, 5};
	const float bad[6] = {0, 0, INFINITY, 5, 3, NAN};
	float scratch[64], r[5];
	double x[5];

	(void)state;
	assert_true(instgeom_scratch_floats(4) <= 64);
	/* cv2.minAreaRect: ((5, 2.5), (5, 10), -90) */
	assert_int_equal(instgeom_min_area_rect(rect, 4, scratch, r), 0);
	assert_true(r[0] == 5 && r[1] == 2.5f && r[2] == 5 && r[3] == 10 && r[4] == -90);
	/* xyxyxyxy2xywhr: w the longer side, the angle back to 0 */
	assert_int_equal(instgeom_xywhr(rect, 4, scratch, x), 0);
	assert_true(x[0] == 5 && x[1] == 2.5 && x[2] == 10 && x[3] == 5 && x[4] == 0);
	assert_int_equal(instgeom_min_area_rect(bad, 3, scratch, r), -EINVAL);
	assert_int_equal(instgeom_min_area_rect(rect, 0, scratch, r), -EINVAL);
}

static void test_intersect_canvas(void **state)
{
	const float canvas[8] = {0, 0, 640, 0, 640, 480, 0, 480};
	const float inner[8] = {10, 10, 20, 10, 20, 30, 10, 30};
	float out[64], scratch[32], area;

	(void)state;
	assert_true(instgeom_intersect_convex(canvas, 4, canvas, 4, out, &area, scratch) > 0);
	assert_true(area == 640.0f * 480.0f);
	/* nested: the inner rectangle itself */
	assert_int_equal(instgeom_intersect_convex(inner, 4, canvas, 4, out, &area, scratch), 4);
	assert_true(area == 200.0f);
	assert_int_equal(instgeom_intersect_convex(inner, 1, canvas, 4, out, &area, scratch), 0);
}

static void test_perspective_identity(void **state)
{
	const float I[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
	float box[8] = {10, 10, 50, 60, 100, 100, 101.5f, 200}, cls[2] = {0, 1};
	struct instgeom_set s = {.n = 2, .cls = cls, .box = box};
	bool keep[2];

	(void)state;
	/* the second box is 1.5 px wide: box_candidates drops it (w > 2) */
	instgeom_perspective(&s, I, 1.0f, 640, 640, false, false, NULL, keep);
	assert_int_equal(s.n, 1);
	assert_true(keep[0] && !keep[1]);
	assert_true(box[0] == 10 && box[1] == 10 && box[2] == 50 && box[3] == 60 && cls[0] == 0);
}

static void test_flip_twice(void **state)
{
	float box[4] = {100, 50, 40, 20}; /* xywh */
	float kpt[9] = {10, 20, 1, 30, 40, 2, 50, 60, 0}, want[9];
	const uint32_t idx[3] = {0, 2, 1};
	float scratch[9];
	struct instgeom_set s = {.n = 1, .nkpt = 3, .box = box, .kpt = kpt};

	(void)state;
	memcpy(want, kpt, sizeof(kpt));
	instgeom_flip(&s, false, 640, idx, scratch);
	assert_true(box[0] == 540 && kpt[0] == 630 && kpt[3] == 590 && kpt[5] == 0); /* point 1 is old point 2 */
	instgeom_flip(&s, false, 640, idx, scratch);
	assert_true(box[0] == 100);
	assert_memory_equal(kpt, want, sizeof(want));
}

static void test_copy_paste_round_half_even(void **state)
{
	/* one object on the left: its mirror on the right overlaps nothing */
	float box[8] = {10, 10, 50, 50}, seg[16] = {10, 10, 50, 10, 50, 50, 10, 50}, scratch[2];
	struct instgeom_set s = {.n = 1, .npts = 4, .box = box, .seg = seg};
	uint32_t sel[2];

	(void)state;
	assert_int_equal(instgeom_copy_paste_select(&s, 640, 1.0, sel, scratch), 1);
	/* round(0.5 * 1) is 0 in Python */
	assert_int_equal(instgeom_copy_paste_select(&s, 640, 0.5, sel, scratch), 0);
	assert_int_equal(instgeom_copy_paste_select(&s, 640, 1.0, sel, scratch), 1);
	instgeom_copy_paste_append(&s, 640, sel, 1);
	assert_int_equal(s.n, 1 + 1);
	assert_true(box[4] == 590 && box[6] == 630 && seg[8] == 630 && seg[9] == 10);
}

static void test_affine_matrix_plain(void **state)
{
	const struct instgeom_affine_draw d = {.scale = 1, .trans_x = 0.5, .trans_y = 0.5};
	float M[9];

	(void)state;
	/* no rotation, shear or perspective: T @ C, the input centred on the output */
	instgeom_affine_matrix(&d, 800, 600, 640, 640, M);
	assert_true(M[0] == 1 && M[1] == 0 && M[2] == -80 && M[3] == 0 && M[4] == 1 && M[5] == 20);
	assert_true(M[6] == 0 && M[7] == 0 && M[8] == 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_segment2box),         cmocka_unit_test(test_min_area_rect),
		cmocka_unit_test(test_intersect_canvas),    cmocka_unit_test(test_perspective_identity),
		cmocka_unit_test(test_flip_twice),          cmocka_unit_test(test_copy_paste_round_half_even),
		cmocka_unit_test(test_affine_matrix_plain),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
