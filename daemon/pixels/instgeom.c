/* SPDX-License-Identifier: MIT */
/*
 * Ultralytics' instance geometry (instgeom.h). Each function follows the
 * numpy expression it mirrors: float32 arrays stay float32 (one rounding
 * per numpy operation, in numpy's order; the build never contracts a * b
 * + c, -std=c11), Python floats and float64 arrays are double.
 * cv2.minAreaRect and cv2.pointPolygonTest follow OpenCV's imgproc
 * (convhull.cpp, rotcalipers.cpp, geometry.cpp).
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "instgeom.h"
#include "instmask.h"

/* numpy's float32 3x3 @ 3x3: per output, a0 * b0 rounded, then a1 * b1 and a2 * b2 fused in */
static void mat3_mul_f32(const float a[9], const float b[9], float out[9])
{
	float t[9];

	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 3; j++)
			t[i * 3 + j] = fmaf(a[i * 3 + 2], b[6 + j], fmaf(a[i * 3 + 1], b[3 + j], a[i * 3] * b[j]));
	memcpy(out, t, sizeof(t));
}

void instgeom_affine_matrix(const struct instgeom_affine_draw *d, int in_w, int in_h, int out_w, int out_h, float M[9])
{
	/* cv2.getRotationMatrix2D(center=(0, 0)): angle *= CV_PI / 180 */
	double rad = d->angle * M_PI / 180, alpha = cos(rad) * d->scale, beta = sin(rad) * d->scale;
	const float C[9] = {1, 0, (float)(-in_w / 2.0), 0, 1, (float)(-in_h / 2.0), 0, 0, 1};
	const float P[9] = {1, 0, 0, 0, 1, 0, (float)d->persp_x, (float)d->persp_y, 1};
	const float R[9] = {(float)alpha,
			    (float)beta,
			    (float)((1 - alpha) * 0.0 - beta * 0.0),
			    (float)-beta,
			    (float)alpha,
			    (float)(beta * 0.0 + (1 - alpha) * 0.0),
			    0,
			    0,
			    1};
	const float S[9] = {1, (float)tan(d->shear_x * M_PI / 180), 0, (float)tan(d->shear_y * M_PI / 180), 1, 0, 0, 0,
			    1};
	const float T[9] = {1, 0, (float)(d->trans_x * out_w), 0, 1, (float)(d->trans_y * out_h), 0, 0, 1};

	/* numpy evaluates T @ S @ R @ P @ C from the left */
	mat3_mul_f32(T, S, M);
	mat3_mul_f32(M, R, M);
	mat3_mul_f32(M, P, M);
	mat3_mul_f32(M, C, M);
}

/*
 * numpy's float32 `xy1 @ M.T` is OpenBLAS's sgemm: per output, x * m0
 * rounded, then y * m1 fused into it, then + m2 (the 1 * m2 term). fmaf is
 * correctly rounded on every CPU, so the result is too. A matmul of a
 * single row does not go through sgemm: plain float products and sums.
 */
static inline __attribute__((always_inline)) void transform_loop(const float M[9], bool divide, float *xy, size_t npts,
								 size_t stride, bool fused)
{
	for (size_t i = 0; i < npts; i++) {
		float *p = xy + i * stride, x = p[0], y = p[1], X, Y, W = 1;

		if (fused) {
			X = fmaf(y, M[1], x * M[0]) + M[2];
			Y = fmaf(y, M[4], x * M[3]) + M[5];
			if (divide)
				W = fmaf(y, M[7], x * M[6]) + M[8];
		} else {
			X = x * M[0] + y * M[1] + M[2];
			Y = x * M[3] + y * M[4] + M[5];
			if (divide)
				W = x * M[6] + y * M[7] + M[8];
		}
		if (divide) {
			X /= W;
			Y /= W;
		}
		p[0] = X;
		p[1] = Y;
	}
}

/*
 * The fused loop compiled for the FMA instruction: the same correctly
 * rounded fmaf, so the same floats, where the baseline build calls libm's
 * fmaf for each (-std=c11 contracts nothing else).
 */
__attribute__((target("fma"))) static void transform_rows_fma(const float M[9], bool divide, float *xy, size_t npts,
							      size_t stride)
{
	transform_loop(M, divide, xy, npts, stride, true);
}

static void transform_rows(const float M[9], bool divide, float *xy, size_t npts, size_t stride, bool fused)
{
	if (fused && __builtin_cpu_supports("fma"))
		transform_rows_fma(M, divide, xy, npts, stride);
	else
		transform_loop(M, divide, xy, npts, stride, fused);
}

void instgeom_transform(const float M[9], bool divide, float *xy, size_t npts, size_t stride)
{
	transform_rows(M, divide, xy, npts, stride, npts != 1);
}

int instgeom_point_in_polygon(const float *poly, uint32_t n, float x, float y)
{
	float v0x, v0y, vx, vy;
	int counter = 0;

	if (n == 0)
		return -1;
	vx = poly[(size_t)(n - 1) * 2];
	vy = poly[(size_t)(n - 1) * 2 + 1];
	for (uint32_t i = 0; i < n; i++) {
		double dist;

		v0x = vx;
		v0y = vy;
		vx = poly[(size_t)i * 2];
		vy = poly[(size_t)i * 2 + 1];
		if ((v0y <= y && vy <= y) || (v0y > y && vy > y) || (v0x < x && vx < x)) {
			if (y == vy && (x == vx || (y == v0y && ((v0x <= x && x <= vx) || (vx <= x && x <= v0x)))))
				return 0;
			continue;
		}
		dist = (double)(y - v0y) * (vx - v0x) - (double)(x - v0x) * (vy - v0y);
		if (dist == 0)
			return 0;
		if (vy < v0y)
			dist = -dist;
		counter += dist > 0;
	}
	return counter % 2 == 0 ? -1 : 1;
}

/* numpy's min / max: NaN propagates */
static inline float np_min(float a, float b)
{
	return isnan(a) ? a : isnan(b) ? b : (b < a ? b : a);
}

static inline float np_max(float a, float b)
{
	return isnan(a) ? a : isnan(b) ? b : (b > a ? b : a);
}

static inline void acc_point(float ext[4], float x, float y, bool *any)
{
	if (!*any) {
		ext[0] = ext[2] = x;
		ext[1] = ext[3] = y;
		*any = true;
		return;
	}
	ext[0] = np_min(ext[0], x);
	ext[1] = np_min(ext[1], y);
	ext[2] = np_max(ext[2], x);
	ext[3] = np_max(ext[3], y);
}

void instgeom_segment2box(const float *seg, uint32_t n, int width, int height, float box[4])
{
	const float W = (float)width, H = (float)height;
	const float bounds[4] = {0.0f, W, 0.0f, H}, lims[4] = {H, H, W, W};
	const int axes[4] = {0, 0, 1, 1};
	float xmin, ymin, xmax, ymax, ext[4] = {0, 0, 0, 0};
	bool any = false;

	if (n == 0) {
		box[0] = box[1] = box[2] = box[3] = 0.0f;
		return;
	}
	xmin = xmax = seg[0];
	ymin = ymax = seg[1];
	for (uint32_t i = 1; i < n; i++) {
		xmin = np_min(xmin, seg[(size_t)i * 2]);
		xmax = np_max(xmax, seg[(size_t)i * 2]);
		ymin = np_min(ymin, seg[(size_t)i * 2 + 1]);
		ymax = np_max(ymax, seg[(size_t)i * 2 + 1]);
	}
	if (xmin >= 0 && ymin >= 0 && xmax <= W && ymax <= H) {
		box[0] = xmin;
		box[1] = ymin;
		box[2] = xmax;
		box[3] = ymax;
		return;
	}
	if (xmax < 0 || ymax < 0 || xmin > W || ymin > H) {
		box[0] = box[1] = box[2] = box[3] = 0.0f;
		return;
	}
	/* the vertices inside */
	for (uint32_t i = 0; i < n; i++) {
		float x = seg[(size_t)i * 2], y = seg[(size_t)i * 2 + 1];

		if (x >= 0 && y >= 0 && x <= W && y <= H)
			acc_point(ext, x, y, &any);
	}
	/* each edge's crossings of the four border lines, inside the border's extent */
	for (uint32_t i = 0; i < n; i++) {
		const float *s = seg + (size_t)i * 2, *e = seg + (size_t)(i + 1 == n ? 0 : i + 1) * 2;
		const float d[2] = {e[0] - s[0], e[1] - s[1]};

		for (int k = 0; k < 4; k++) {
			int a = axes[k];
			float t = (bounds[k] - s[a]) / d[a];
			float in[2] = {s[0] + t * d[0], s[1] + t * d[1]};
			float other = in[1 - a];

			if (t >= 0 && t <= 1 && other >= 0 && other <= lims[k])
				acc_point(ext, in[0], in[1], &any);
		}
	}
	/* the image's corners inside the polygon */
	{
		const float cx[4] = {0.0f, W, 0.0f, W}, cy[4] = {0.0f, 0.0f, H, H};

		for (int k = 0; k < 4; k++)
			if (instgeom_point_in_polygon(seg, n, cx[k], cy[k]) >= 0)
				acc_point(ext, cx[k], cy[k], &any);
	}
	if (!any) {
		box[0] = box[1] = box[2] = box[3] = 0.0f;
		return;
	}
	memcpy(box, ext, sizeof(ext));
}

bool instgeom_box_candidate(const float box1[4], const float box2[4], float area_thr)
{
	const float eps = 1e-16f;
	float w1 = box1[2] - box1[0], h1 = box1[3] - box1[1];
	float w2 = box2[2] - box2[0], h2 = box2[3] - box2[1];
	float a = w2 / (h2 + eps), b = h2 / (w2 + eps);
	float ar = np_max(a, b); /* np.maximum */

	return w2 > 2.0f && h2 > 2.0f && w2 * h2 / (w1 * h1 + eps) > area_thr && ar < 100.0f;
}

static inline float clipf(float v, float lo, float hi)
{
	/* np.clip: minimum(maximum(v, lo), hi), NaN in v propagated */
	v = isnan(v) ? v : (lo > v ? lo : v);
	return isnan(v) ? v : (hi < v ? hi : v);
}

/* Keep instance i at position k of every array. */
static void move_instance(struct instgeom_set *s, uint32_t k, uint32_t i)
{
	if (k == i)
		return;
	if (s->cls)
		s->cls[k] = s->cls[i];
	memcpy(s->box + (size_t)k * 4, s->box + (size_t)i * 4, 4 * sizeof(float));
	if (s->npts && s->seg)
		memmove(s->seg + (size_t)k * s->npts * 2, s->seg + (size_t)i * s->npts * 2,
			(size_t)s->npts * 2 * sizeof(float));
	if (s->nkpt && s->kpt)
		memmove(s->kpt + (size_t)k * s->nkpt * 3, s->kpt + (size_t)i * s->nkpt * 3,
			(size_t)s->nkpt * 3 * sizeof(float));
}

static void kpt_visibility(float *kpt, size_t count, float W, float H)
{
	for (size_t j = 0; j < count; j++) {
		float *p = kpt + j * 3;

		if (p[0] < 0 || p[1] < 0 || p[0] > W || p[1] > H)
			p[2] = 0.0f;
	}
}

/* Instances.clip's keypoints: visibility 0 outside the image, then clipped to it. */
static void clip_keypoints(struct instgeom_set *s, float W, float H)
{
	if (s->nkpt && s->kpt) {
		size_t count = (size_t)s->n * s->nkpt;

		kpt_visibility(s->kpt, count, W, H);
		for (size_t j = 0; j < count; j++) {
			s->kpt[j * 3] = clipf(s->kpt[j * 3], 0.0f, W);
			s->kpt[j * 3 + 1] = clipf(s->kpt[j * 3 + 1], 0.0f, H);
		}
	}
}

void instgeom_clip(struct instgeom_set *s, int width, int height)
{
	const float W = (float)width, H = (float)height;

	for (uint32_t i = 0; i < s->n; i++) {
		float *b = s->box + (size_t)i * 4;

		b[0] = clipf(b[0], 0.0f, W);
		b[2] = clipf(b[2], 0.0f, W);
		b[1] = clipf(b[1], 0.0f, H);
		b[3] = clipf(b[3], 0.0f, H);
	}
	if (s->npts && s->seg)
		for (size_t j = 0; j < (size_t)s->n * s->npts; j++) {
			s->seg[j * 2] = clipf(s->seg[j * 2], 0.0f, W);
			s->seg[j * 2 + 1] = clipf(s->seg[j * 2 + 1], 0.0f, H);
		}
	clip_keypoints(s, W, H);
}

uint32_t instgeom_remove_zero_area(struct instgeom_set *s)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < s->n; i++) {
		const float *b = s->box + (size_t)i * 4;

		if ((b[2] - b[0]) * (b[3] - b[1]) > 0)
			move_instance(s, k++, i);
	}
	s->n = k;
	return k;
}

void instgeom_perspective(struct instgeom_set *s, const float M[9], float scale, int width, int height,
			  bool perspective, bool preserve_obb, float *scratch, bool *keep)
{
	const float W = (float)width, H = (float)height;
	bool segs = s->npts > 0 && s->seg && s->n > 0;
	float area_thr = segs ? 0.01f : 0.1f;
	uint32_t k = 0;

	for (uint32_t i = 0; i < s->n; i++) {
		float *b = s->box + (size_t)i * 4, orig[4], nb[4];
		float c[8] = {b[0], b[1], b[2], b[3], b[0], b[3], b[2], b[1]}; /* x1y1, x2y2, x1y2, x2y1 */

		for (int j = 0; j < 4; j++)
			orig[j] = b[j] * scale; /* instances.scale(scale, scale, bbox_only=True) */
		if (segs) {
			float *sg = s->seg + (size_t)i * s->npts * 2;

			instgeom_transform(M, true, sg, s->npts, 2);
			instgeom_segment2box(sg, s->npts, width, height, nb);
			if (!preserve_obb)
				for (uint32_t j = 0; j < s->npts; j++) {
					sg[j * 2] = clipf(sg[j * 2], nb[0], nb[2]);
					sg[j * 2 + 1] = clipf(sg[j * 2 + 1], nb[1], nb[3]);
				}
		} else {
			instgeom_transform(M, perspective, c, 4, 2);
			nb[0] = np_min(np_min(c[0], c[2]), np_min(c[4], c[6]));
			nb[1] = np_min(np_min(c[1], c[3]), np_min(c[5], c[7]));
			nb[2] = np_max(np_max(c[0], c[2]), np_max(c[4], c[6]));
			nb[3] = np_max(np_max(c[1], c[3]), np_max(c[5], c[7]));
		}
		if (s->nkpt && s->kpt) {
			float *kp = s->kpt + (size_t)i * s->nkpt * 3;

			/* numpy transforms every instance's keypoints in one matmul: a single row only for one point */
			transform_rows(M, true, kp, s->nkpt, 3, (size_t)s->n * s->nkpt != 1);
			kpt_visibility(kp, s->nkpt, W, H);
		}
		memcpy(b, nb, sizeof(nb));
		/* Instances.clip, this instance's part */
		{
			struct instgeom_set one = {.n = 1,
						   .npts = s->npts,
						   .nkpt = s->nkpt,
						   .box = b,
						   .seg = s->seg ? s->seg + (size_t)i * s->npts * 2 : NULL,
						   .kpt = s->kpt ? s->kpt + (size_t)i * s->nkpt * 3 : NULL};

			if (preserve_obb && segs)
				instgeom_clip_obb(&one, width, height, scratch);
			else
				instgeom_clip(&one, width, height);
		}
		{
			bool ok = instgeom_box_candidate(orig, b, area_thr);

			if (keep)
				keep[i] = ok;
			if (ok)
				move_instance(s, k++, i);
		}
	}
	s->n = k;
}

void instgeom_place(struct instgeom_set *s, int w, int h, int padw, int padh)
{
	const float fw = (float)w, fh = (float)h, pw = (float)padw, ph = (float)padh;

	for (uint32_t i = 0; i < s->n; i++) {
		float *b = s->box + (size_t)i * 4;
		float hw = b[2] / 2.0f, hh = b[3] / 2.0f;
		float x1 = b[0] - hw, y1 = b[1] - hh, x2 = b[0] + hw, y2 = b[1] + hh;

		b[0] = x1 * fw + pw;
		b[1] = y1 * fh + ph;
		b[2] = x2 * fw + pw;
		b[3] = y2 * fh + ph;
	}
	if (s->npts && s->seg)
		for (size_t j = 0; j < (size_t)s->n * s->npts; j++) {
			float x = s->seg[j * 2] * fw, y = s->seg[j * 2 + 1] * fh;

			s->seg[j * 2] = x + pw;
			s->seg[j * 2 + 1] = y + ph;
		}
	if (s->nkpt && s->kpt)
		for (size_t j = 0; j < (size_t)s->n * s->nkpt; j++) {
			float x = s->kpt[j * 3] * fw, y = s->kpt[j * 3 + 1] * fh;

			s->kpt[j * 3] = x + pw;
			s->kpt[j * 3 + 1] = y + ph;
		}
}

void instgeom_flip(struct instgeom_set *s, bool vertical, float extent, const uint32_t *flip_idx, float *scratch)
{
	const int a = vertical ? 1 : 0;

	for (uint32_t i = 0; i < s->n; i++)
		s->box[(size_t)i * 4 + a] = extent - s->box[(size_t)i * 4 + a];
	if (s->npts && s->seg)
		for (size_t j = 0; j < (size_t)s->n * s->npts; j++)
			s->seg[j * 2 + a] = extent - s->seg[j * 2 + a];
	if (s->nkpt && s->kpt) {
		for (size_t j = 0; j < (size_t)s->n * s->nkpt; j++)
			s->kpt[j * 3 + a] = extent - s->kpt[j * 3 + a];
		if (flip_idx)
			for (uint32_t i = 0; i < s->n; i++) {
				float *kp = s->kpt + (size_t)i * s->nkpt * 3;

				for (uint32_t j = 0; j < s->nkpt; j++)
					memcpy(scratch + (size_t)j * 3, kp + (size_t)flip_idx[j] * 3,
					       3 * sizeof(float));
				memcpy(kp, scratch, (size_t)s->nkpt * 3 * sizeof(float));
			}
	}
}

static int convex_hull(const float *pts, int total, bool clockwise, int *order, int *stack, int *hullbuf);
static bool all_finite(const float *p, size_t count);

/*
 * ---- cv2.intersectConvexConvex: O'Rourke's algorithm with OpenCV's
 * tolerances, its bounded result (4.11 and 5) and OpenCV 5's crossing
 * point, computed in double from the coordinates as doubles ----
 */


enum { IN_P, IN_Q, IN_UNKNOWN };

enum { LS_NONE = 0, LS_SINGLE = 1, LS_OVERLAP = 2, LS_ENDPOINT = 3 };

static int area_sign(const float *a, const float *b, const float *c)
{
	double area2 = (b[0] - a[0]) * (double)(c[1] - a[1]) - (c[0] - a[0]) * (double)(b[1] - a[1]);

	return area2 > 1e-5 ? 1 : area2 < -1e-5 ? -1 : 0;
}

/* c on the closed segment ab, abc known collinear */
static bool between(const float *a, const float *b, const float *c)
{
	if (a[0] != b[0])
		return (a[0] <= c[0] && c[0] <= b[0]) || (a[0] >= c[0] && c[0] >= b[0]);
	return (a[1] <= c[1] && c[1] <= b[1]) || (a[1] >= c[1] && c[1] >= b[1]);
}

static void set_pt(float *d, const float *v)
{
	d[0] = v[0];
	d[1] = v[1];
}

static int parallel_int(const float *a, const float *b, const float *c, const float *d, float *p, float *q)
{
	if (area_sign(a, b, c) != 0)
		return LS_NONE;
	if (between(a, b, c) && between(a, b, d))
		set_pt(p, c), set_pt(q, d);
	else if (between(c, d, a) && between(c, d, b))
		set_pt(p, a), set_pt(q, b);
	else if (between(a, b, c) && between(c, d, b))
		set_pt(p, c), set_pt(q, b);
	else if (between(a, b, c) && between(c, d, a))
		set_pt(p, c), set_pt(q, a);
	else if (between(a, b, d) && between(c, d, b))
		set_pt(p, d), set_pt(q, b);
	else if (between(a, b, d) && between(c, d, a))
		set_pt(p, d), set_pt(q, a);
	else
		return LS_NONE;
	return LS_OVERLAP;
}

static int intersect_segments(const float *a, const float *b, const float *c, const float *d, float *p, float *q)
{
	const double eps = 1e-5;
	const double ax = a[0], ay = a[1], bx = b[0], by = b[1], cx = c[0], cy = c[1], dx = d[0], dy = d[1];
	double denom = (ax - bx) * (dy - cy) - (ay - by) * (dx - cx);
	double num, s, t;

	if (denom == 0.)
		return parallel_int(a, b, c, d, p, q);
	num = (dy - ay) * (ax - cx) + (ax - dx) * (ay - cy);
	s = num / denom;
	num = (by - ay) * (ax - cx) + (cy - ay) * (bx - ax);
	t = num / denom;
	p[0] = (float)(ax + s * (bx - ax));
	p[1] = (float)(ay + s * (by - ay));
	set_pt(q, p);
	return s < -eps || s > 1. + eps || t < -eps || t > 1. + eps ? LS_NONE
	       : s < eps || s > 1. - eps || t < eps || t > 1. - eps ? LS_ENDPOINT
								    : LS_SINGLE;
}

static inline bool pt_ne(const float *a, const float *b)
{
	return a[0] != b[0] || a[1] != b[1];
}

/* push v unless it repeats the last point */
static void push_new(float **r, const float *v)
{
	if (pt_ne(v, *r - 2)) {
		set_pt(*r, v);
		*r += 2;
	}
}

static int advance(int a, int *aa, int n, bool inside, const float *v, float **r)
{
	if (inside)
		push_new(r, v);
	(*aa)++;
	return (a + 1) % n;
}

/* intersectConvexConvex_: result[0] is the sentinel; the count (with it on an early exit), or -1 */
static int intersect_(const float *P, int n, const float *Q, int m, float *result, int result_size, float *area_out)
{
	float *result0 = result, *r = result;
	int a = 0, b = 0, inflag = IN_UNKNOWN, aa = 0, ba = 0, nr;
	bool first = true;
	const float origin[2] = {0, 0};
	double area = 0;

	r[0] = r[1] = FLT_MAX;
	r += 2;
	do {
		int a1 = (a + n - 1) % n, b1 = (b + m - 1) % m;
		float A[2] = {P[a * 2] - P[a1 * 2], P[a * 2 + 1] - P[a1 * 2 + 1]};
		float B[2] = {Q[b * 2] - Q[b1 * 2], Q[b * 2 + 1] - Q[b1 * 2 + 1]};
		int cross = area_sign(origin, A, B);
		int aHB = area_sign(Q + b1 * 2, Q + b * 2, P + a * 2);
		int bHA = area_sign(P + a1 * 2, P + a * 2, Q + b * 2);
		float p[2] = {0, 0}, q[2] = {0, 0};
		int code = intersect_segments(P + a1 * 2, P + a * 2, Q + b1 * 2, Q + b * 2, p, q);

		if (code == LS_SINGLE || code == LS_ENDPOINT) {
			if (inflag == IN_UNKNOWN && first) {
				aa = ba = 0;
				first = false;
				set_pt(r, p);
				r += 2;
			}
			push_new(&r, p); /* inOut */
			inflag = aHB > 0 ? IN_P : bHA > 0 ? IN_Q : inflag;
		}
		if (code == LS_OVERLAP && (double)A[0] * B[0] + (double)A[1] * B[1] < 0) {
			push_new(&r, p); /* addSharedSeg */
			push_new(&r, q);
			return (int)((r - result0) / 2);
		}
		if (cross == 0 && aHB < 0 && bHA < 0)
			return (int)((r - result0) / 2);
		else if (cross == 0 && aHB == 0 && bHA == 0) {
			if (inflag == IN_P)
				b = advance(b, &ba, m, inflag == IN_Q, Q + b * 2, &r);
			else
				a = advance(a, &aa, n, inflag == IN_P, P + a * 2, &r);
		} else if (cross >= 0) {
			if (bHA > 0)
				a = advance(a, &aa, n, inflag == IN_P, P + a * 2, &r);
			else
				b = advance(b, &ba, m, inflag == IN_Q, Q + b * 2, &r);
		} else {
			if (aHB > 0)
				b = advance(b, &ba, m, inflag == IN_Q, Q + b * 2, &r);
			else
				a = advance(a, &aa, n, inflag == IN_P, P + a * 2, &r);
		}
	} while (((aa < n) || (ba < m)) && (aa < 2 * n) && (ba < 2 * m) && (int)((r - result0) / 2) <= result_size);

	nr = (int)((r - result0) / 2);
	if (nr > result_size) {
		*area_out = -1.f;
		return -1;
	}
	{
		float prev[2] = {result0[(nr - 1) * 2], result0[(nr - 1) * 2 + 1]};

		for (int i = 1; i < nr; i++) {
			result0[(i - 1) * 2] = result0[i * 2];
			result0[(i - 1) * 2 + 1] = result0[i * 2 + 1];
			area += (double)prev[0] * result0[i * 2 + 1] - (double)prev[1] * result0[i * 2];
			prev[0] = result0[i * 2];
			prev[1] = result0[i * 2 + 1];
		}
	}
	*area_out = (float)(area * 0.5);
	if (nr > 1 && !pt_ne(result0 + (nr - 2) * 2, result0))
		nr--;
	return nr - 1;
}

/* reverse the order of n points */
static void reverse_pts(float *p, int n)
{
	for (int i = 0, j = n - 1; i < j; i++, j--) {
		float t[2] = {p[i * 2], p[i * 2 + 1]};

		set_pt(p + i * 2, p + j * 2);
		set_pt(p + j * 2, t);
	}
}

/* contourArea(points, oriented=false) */
static double contour_area(const float *p, int n)
{
	double a00 = 0;
	float prev[2];

	if (n == 0)
		return 0;
	set_pt(prev, p + (n - 1) * 2);
	for (int i = 0; i < n; i++) {
		a00 += (double)prev[0] * p[i * 2 + 1] - (double)prev[1] * p[i * 2];
		set_pt(prev, p + i * 2);
	}
	return fabs(a00 * 0.5);
}

int instgeom_intersect_convex(const float *P, int n, const float *Q, int m, float *out, float *area, float *scratch)
{
	float *fp1 = scratch, *fp2 = scratch + (size_t)n * 2, *res = out, a = 0.f;
	int orientation = 0, nr;

	*area = 0.f;
	if (n < 2 || m < 2)
		return 0;
	memcpy(fp1, P, (size_t)n * 2 * sizeof(float));
	memcpy(fp2, Q, (size_t)m * 2 * sizeof(float));
	for (int k = 0; k < 2; k++) {
		float *d = k == 0 ? fp1 : fp2;
		int len = k == 0 ? n : m;
		float d0[2] = {d[0] - d[(len - 1) * 2], d[1] - d[(len - 1) * 2 + 1]};

		for (int i = 1; i < len; i++) {
			float di[2] = {d[i * 2] - d[(i - 1) * 2], d[i * 2 + 1] - d[(i - 1) * 2 + 1]};
			double c = (double)d0[0] * di[1] - (double)d0[1] * di[0];

			if (c != 0) {
				if (c < 0) {
					orientation++;
					reverse_pts(d, len);
				}
				break;
			}
		}
	}
	nr = intersect_(fp1, n, fp2, m, res, n + m + 1, &a);
	if (nr < 0) {
		*area = -1.f;
		return -1;
	}
	if (nr == 0) {
		int inside = 0;

		for (int i = 0; i < m; i++)
			inside += instgeom_point_in_polygon(fp1, (uint32_t)n, fp2[i * 2], fp2[i * 2 + 1]) >= 0;
		if (inside == m) {
			memcpy(res, fp2, (size_t)m * 2 * sizeof(float));
			nr = m;
		} else {
			inside = 0;
			for (int i = 0; i < n; i++)
				inside += instgeom_point_in_polygon(fp2, (uint32_t)m, fp1[i * 2], fp1[i * 2 + 1]) >= 0;
			if (inside != n)
				return 0;
			memcpy(res, fp1, (size_t)n * 2 * sizeof(float));
			nr = n;
		}
		a = (float)contour_area(res, nr);
	}
	if (orientation == 2)
		reverse_pts(res, nr);
	*area = fabsf(a);
	return nr;
}

size_t instgeom_obb_scratch_floats(uint32_t npts)
{
	/* minAreaRect's or the hull's working space; the hull; the intersection and its two copies */
	return (size_t)npts * 8 + 2 + (size_t)npts * 2 + ((size_t)2 * (npts + 4) + 4) * 2 + (size_t)(npts + 4) * 2;
}

void instgeom_clip_obb(struct instgeom_set *s, int width, int height, float *scratch)
{
	const float W = (float)width, H = (float)height;
	const float canvas[8] = {0, 0, W, 0, W, H, 0, H};
	uint32_t n = s->npts;

	if (!n || !s->seg) {
		instgeom_clip(s, width, height);
		return;
	}
	for (uint32_t i = 0; i < s->n; i++) {
		float *sg = s->seg + (size_t)i * n * 2, *b = s->box + (size_t)i * 4;
		float mn[2] = {sg[0], sg[1]}, mx[2] = {sg[0], sg[1]};
		float *work = scratch, *hull = scratch + (size_t)n * 8 + 2, *vis = hull + (size_t)n * 2;
		float *iscratch = vis + ((size_t)2 * (n + 4) + 4) * 2, area, rect[5], u[2], v[2], corners[8];
		int *order = (int *)work, *stack = order + n, *hullbuf = stack + n + 2, nh, nv;
		double angle, c, sn;
		float cs, sns;

		for (uint32_t j = 1; j < n; j++) {
			mn[0] = np_min(mn[0], sg[j * 2]);
			mn[1] = np_min(mn[1], sg[j * 2 + 1]);
			mx[0] = np_max(mx[0], sg[j * 2]);
			mx[1] = np_max(mx[1], sg[j * 2 + 1]);
		}
		if (mn[0] >= 0 && mn[1] >= 0 && mx[0] <= W && mx[1] <= H)
			continue;
		if (!all_finite(sg, (size_t)n * 2)) { /* a perspective's point at infinity: nothing to fit */
			memset(b, 0, 4 * sizeof(float));
			memset(sg, 0, (size_t)n * 2 * sizeof(float));
			continue;
		}
		nh = convex_hull(sg, (int)n, false, order, stack, hullbuf);
		for (int k = 0; k < nh; k++)
			set_pt(hull + k * 2, sg + (size_t)hullbuf[k] * 2);
		nv = instgeom_intersect_convex(hull, nh, canvas, 4, vis, &area, iscratch);
		if (nv <= 0 || !(area > 0)) {
			memset(b, 0, 4 * sizeof(float));
			memset(sg, 0, (size_t)n * 2 * sizeof(float));
			continue;
		}
		b[0] = b[2] = vis[0];
		b[1] = b[3] = vis[1];
		for (int k = 1; k < nv; k++) {
			b[0] = np_min(b[0], vis[k * 2]);
			b[1] = np_min(b[1], vis[k * 2 + 1]);
			b[2] = np_max(b[2], vis[k * 2]);
			b[3] = np_max(b[3], vis[k * 2 + 1]);
		}
		/* the visible part in the frame of the segment's own minAreaRect */
		instgeom_min_area_rect(sg, n, work, rect);
		angle = rect[4];
		if (rect[2] < rect[3])
			angle += 90;
		angle = angle * (M_PI / 180.0); /* np.deg2rad */
		c = cos(angle);
		sn = sin(angle);
		cs = (float)c;
		sns = (float)sn;
		for (int k = 0; k < nv; k++) {
			/* visible @ basis, basis = ((cos, -sin), (sin, cos)) in float32: sgemm's fused second product */
			float x = vis[k * 2], y = vis[k * 2 + 1];
			float pu = fmaf(y, sns, x * cs), pv = fmaf(y, cs, x * -sns);

			u[0] = k ? np_min(u[0], pu) : pu;
			u[1] = k ? np_max(u[1], pu) : pu;
			v[0] = k ? np_min(v[0], pv) : pv;
			v[1] = k ? np_max(v[1], pv) : pv;
		}
		{
			const float cu[4] = {u[1], u[1], u[0], u[0]}, cv[4] = {v[1], v[0], v[0], v[1]};

			/* corners @ basis.T */
			for (int k = 0; k < 4; k++) {
				corners[k * 2] = fmaf(cv[k], -sns, cu[k] * cs);
				corners[k * 2 + 1] = fmaf(cv[k], cs, cu[k] * sns);
			}
		}
		instmask_resample(corners, 4, n, sg);
	}
	clip_keypoints(s, W, H);
}

/* ---- Instances.concatenate, Format ---- */

void instgeom_cat(const struct instgeom_set *parts, uint32_t count, struct instgeom_set *out)
{
	uint32_t npts = 0, nkpt = count ? parts[0].nkpt : 0, n = 0;

	for (uint32_t p = 0; p < count; p++)
		npts = parts[p].npts > npts ? parts[p].npts : npts;
	for (uint32_t p = 0; p < count; p++) {
		const struct instgeom_set *a = &parts[p];

		if (out->cls && a->cls)
			memcpy(out->cls + n, a->cls, (size_t)a->n * sizeof(float));
		memcpy(out->box + (size_t)n * 4, a->box, (size_t)a->n * 4 * sizeof(float));
		if (npts && a->npts && a->seg)
			for (uint32_t i = 0; i < a->n; i++) {
				const float *in = a->seg + (size_t)i * a->npts * 2;
				float *o = out->seg + ((size_t)n + i) * npts * 2;

				if (a->npts == npts)
					memcpy(o, in, (size_t)npts * 2 * sizeof(float));
				else
					instmask_resample(in, a->npts, npts, o);
			}
		if (nkpt && a->kpt && out->kpt)
			memcpy(out->kpt + (size_t)n * nkpt * 3, a->kpt, (size_t)a->n * nkpt * 3 * sizeof(float));
		n += a->n;
	}
	out->n = n;
	out->npts = npts;
	out->nkpt = nkpt;
}

/* xyxy2xywh of one box, in float32 */
static void xyxy2xywh(const float *b, float o[4])
{
	float cx = (b[0] + b[2]) / 2.0f, cy = (b[1] + b[3]) / 2.0f, w = b[2] - b[0], h = b[3] - b[1];

	o[0] = cx;
	o[1] = cy;
	o[2] = w;
	o[3] = h;
}

void instgeom_xywh(struct instgeom_set *s)
{
	for (uint32_t i = 0; i < s->n; i++)
		xyxy2xywh(s->box + (size_t)i * 4, s->box + (size_t)i * 4);
}

int instgeom_format(const struct instgeom_set *s, int w, int h, bool obb, bool xywh, float *boxes, float *kpt,
		    float *scratch)
{
	const float W = (float)w, H = (float)h;

	if (obb && s->n && (!s->npts || !s->seg))
		return -EINVAL;
	for (uint32_t i = 0; i < s->n; i++) {
		const float *b = s->box + (size_t)i * 4;

		if (obb) {
			double r[5];
			float *o = boxes + (size_t)i * 5;
			int rc = instgeom_xywhr(s->seg + (size_t)i * s->npts * 2, s->npts, scratch, r);

			if (rc < 0)
				return rc;
			o[0] = (float)r[0] / W;
			o[1] = (float)r[1] / H;
			o[2] = (float)r[2] / W;
			o[3] = (float)r[3] / H;
			o[4] = (float)r[4];
		} else {
			float *o = boxes + (size_t)i * 4, c[4];

			if (xywh)
				memcpy(c, b, sizeof(c));
			else
				xyxy2xywh(b, c);
			o[0] = c[0] / W;
			o[1] = c[1] / H;
			o[2] = c[2] / W;
			o[3] = c[3] / H;
		}
	}
	if (kpt && s->nkpt && s->kpt)
		for (size_t j = 0; j < (size_t)s->n * s->nkpt; j++) {
			kpt[j * 3] = s->kpt[j * 3] / W;
			kpt[j * 3 + 1] = s->kpt[j * 3 + 1] / H;
			kpt[j * 3 + 2] = s->kpt[j * 3 + 2];
		}
	return 0;
}

/* ---- CopyPaste, flip mode ---- */

/* Instances.fliplr(w) of instance i's xyxy box */
static void mirror_box(const float *b, float W, float out[4])
{
	out[0] = W - b[2];
	out[1] = b[1];
	out[2] = W - b[0];
	out[3] = b[3];
}

/* numpy's a.clip(0): maximum(a, 0), NaN kept */
static inline float clip0(float v)
{
	return isnan(v) ? v : (v < 0 ? 0.0f : v);
}

/* bbox_ioa(box1, box2) for one pair, float32: the intersection over box2's area + 1e-7 */
static float bbox_ioa(const float *b1, const float *b2)
{
	float iw = clip0(np_min(b1[2], b2[2]) - np_max(b1[0], b2[0]));
	float ih = clip0(np_min(b1[3], b2[3]) - np_max(b1[1], b2[1]));

	return iw * ih / ((b2[2] - b2[0]) * (b2[3] - b2[1]) + 1e-7f);
}

/*
 * CopyPaste.get_params' choice among the candidates (the mirrors of s's
 * instances, or other's instances): bbox_ioa of each over s's boxes, those
 * below 0.30 with every one, by their largest overlap, the first round(p *
 * eligible).
 */
static uint32_t copy_paste_choose(const struct instgeom_set *s, const struct instgeom_set *other, float W, double p,
				  uint32_t *selected, float *scratch)
{
	const float thr = 0.30f;
	uint32_t eligible = 0, take, count = other ? other->n : s->n;

	for (uint32_t i = 0; i < count; i++) {
		float m[4], worst = 0;
		bool ok = true;

		if (other)
			memcpy(m, other->box + (size_t)i * 4, sizeof(m));
		else
			mirror_box(s->box + (size_t)i * 4, W, m);
		for (uint32_t j = 0; j < s->n; j++) {
			float ioa = bbox_ioa(m, s->box + (size_t)j * 4);

			ok = ok && ioa < thr;
			worst = j == 0 ? ioa : np_max(worst, ioa);
		}
		if (!ok)
			continue;
		/* insertion by the largest overlap, after equal ones: a stable sort */
		{
			uint32_t k = eligible++;

			while (k > 0 && scratch[k - 1] > worst) {
				scratch[k] = scratch[k - 1];
				selected[k] = selected[k - 1];
				k--;
			}
			scratch[k] = worst;
			selected[k] = i;
		}
	}
	take = (uint32_t)nearbyint(p * (double)eligible); /* Python's round(): half to even */
	return take < eligible ? take : eligible;
}

uint32_t instgeom_copy_paste_select(const struct instgeom_set *s, int width, double p, uint32_t *selected,
				    float *scratch)
{
	if (s->n == 0 || s->npts == 0 || !s->seg)
		return 0;
	return copy_paste_choose(s, NULL, (float)width, p, selected, scratch);
}

uint32_t instgeom_copy_paste_select_from(const struct instgeom_set *s, const struct instgeom_set *other, double p,
					 uint32_t *selected, float *scratch)
{
	if (s->n == 0 || s->npts == 0 || !s->seg || other->n == 0)
		return 0;
	return copy_paste_choose(s, other, 0, p, selected, scratch);
}

void instgeom_copy_paste_append(struct instgeom_set *s, int width, const uint32_t *selected, uint32_t count)
{
	const float W = (float)width;

	for (uint32_t k = 0; k < count; k++) {
		uint32_t i = selected[k], o = s->n + k;

		if (s->cls)
			s->cls[o] = s->cls[i];
		mirror_box(s->box + (size_t)i * 4, W, s->box + (size_t)o * 4);
		if (s->npts && s->seg)
			for (uint32_t j = 0; j < s->npts; j++) {
				const float *a = s->seg + ((size_t)i * s->npts + j) * 2;
				float *b = s->seg + ((size_t)o * s->npts + j) * 2;

				b[0] = W - a[0];
				b[1] = a[1];
			}
		if (s->nkpt && s->kpt)
			for (uint32_t j = 0; j < s->nkpt; j++) {
				const float *a = s->kpt + ((size_t)i * s->nkpt + j) * 3;
				float *b = s->kpt + ((size_t)o * s->nkpt + j) * 3;

				b[0] = W - a[0];
				b[1] = a[1];
				b[2] = a[2];
			}
	}
	s->n += count;
}

/* ---- CutMix ---- */

uint32_t instgeom_cutmix_free_areas(const float *areas, uint32_t count, const struct instgeom_set *s, uint32_t *idx)
{
	uint32_t k = 0;

	for (uint32_t a = 0; a < count; a++) {
		/* ioa1.sum(axis=1) <= 0: the terms are not negative, so in any order the sum is 0 only when each is */
		float sum = 0;

		for (uint32_t j = 0; j < s->n; j++)
			sum += bbox_ioa(areas + (size_t)a * 4, s->box + (size_t)j * 4);
		if (sum <= 0)
			idx[k++] = a;
	}
	return k;
}

uint32_t instgeom_cutmix_select(const float area[4], const struct instgeom_set *s2, float thr, uint32_t *indexes)
{
	uint32_t k = 0;

	for (uint32_t j = 0; j < s2->n; j++)
		if (bbox_ioa(area, s2->box + (size_t)j * 4) >= thr)
			indexes[k++] = j;
	return k;
}

static void shift_set(struct instgeom_set *s, float dx, float dy)
{
	for (uint32_t i = 0; i < s->n; i++) {
		float *b = s->box + (size_t)i * 4;

		b[0] += dx;
		b[1] += dy;
		b[2] += dx;
		b[3] += dy;
	}
	if (s->npts && s->seg)
		for (size_t j = 0; j < (size_t)s->n * s->npts; j++) {
			s->seg[j * 2] += dx;
			s->seg[j * 2 + 1] += dy;
		}
	if (s->nkpt && s->kpt)
		for (size_t j = 0; j < (size_t)s->n * s->nkpt; j++) {
			s->kpt[j * 3] += dx;
			s->kpt[j * 3 + 1] += dy;
		}
}

void instgeom_cutmix_piece(struct instgeom_set *piece, const float area[4], bool preserve_obb, float *scratch)
{
	/* area.astype(np.int32): truncation */
	int x1 = (int)area[0], y1 = (int)area[1], x2 = (int)area[2], y2 = (int)area[3];

	shift_set(piece, (float)-x1, (float)-y1);
	if (preserve_obb && piece->npts && piece->seg) {
		instgeom_clip_obb(piece, x2 - x1, y2 - y1, scratch);
		instgeom_remove_zero_area(piece);
	} else {
		instgeom_clip(piece, x2 - x1, y2 - y1);
	}
	shift_set(piece, (float)x1, (float)y1);
}

/* ---- cv2.minAreaRect ---- */

static bool all_finite(const float *p, size_t count)
{
	for (size_t i = 0; i < count; i++)
		if (!isfinite(p[i]))
			return false;
	return true;
}

size_t instgeom_scratch_floats(uint32_t n)
{
	/* ints: the sorted order, the stack, the hull's indices; floats: its points, the calipers' vectors and
	 * inverse lengths */
	return (size_t)n * 8 + 2;
}

/* CHullCmpPoints: x, then y, then the address (the input order) */
static int cmp_points(const void *pa, const void *pb, void *ctx)
{
	const float *base = ctx;
	int a = *(const int *)pa, b = *(const int *)pb;
	const float *p = base + (size_t)a * 2, *q = base + (size_t)b * 2;

	if (p[0] != q[0])
		return p[0] < q[0] ? -1 : 1;
	if (p[1] != q[1])
		return p[1] < q[1] ? -1 : 1;
	return (a > b) - (a < b);
}

#define SIGN(a) (((a) > 0) - ((a) < 0))

/* cv::normalize of a Vec2f: each element times 1 / its double norm, rounded to float */
static void normalize2(float v[2])
{
	double nv = sqrt((double)v[0] * v[0] + (double)v[1] * v[1]);
	double k = nv != 0 ? 1. / nv : 0.;

	v[0] = (float)(v[0] * k);
	v[1] = (float)(v[1] * k);
}

/* Sklansky_<float, double>: `order` holds point indices sorted; stack gets positions in `order`. */
static int sklansky(const float *pts, const int *order, int start, int end, int *stack, int nsign, int sign2)
{
	int incr = end > start ? 1 : -1;
	int pprev = start, pcur = pprev + incr, pnext = pcur + incr;
	int stacksize = 3;
#define PX(i) pts[(size_t)order[i] * 2]
#define PY(i) pts[(size_t)order[i] * 2 + 1]

	if (start == end || (PX(start) == PX(end) && PY(start) == PY(end))) {
		stack[0] = start;
		return 1;
	}
	stack[0] = pprev;
	stack[1] = pcur;
	stack[2] = pnext;
	end += incr;
	while (pnext != end) {
		float cury, nexty, by;

		if (PX(pcur) == PX(pnext) && PY(pcur) == PY(pnext)) {
			pnext += incr;
			stack[stacksize - 1] = pnext;
			continue;
		}
		cury = PY(pcur);
		nexty = PY(pnext);
		by = nexty - cury;
		if (SIGN(by) != nsign) {
			float a[2] = {PX(pcur) - PX(pprev), cury - PY(pprev)};
			float b[2] = {PX(pnext) - PX(pcur), by};
			double convexity;

			normalize2(a);
			normalize2(b);
			convexity = (double)a[1] * b[0] - (double)a[0] * b[1];
			if (SIGN(convexity) == sign2 && (a[0] != 0 || a[1] != 0)) {
				pprev = pcur;
				pcur = pnext;
				pnext += incr;
				stack[stacksize] = pnext;
				stacksize++;
			} else if (pprev == start) {
				pcur = pnext;
				stack[1] = pcur;
				pnext += incr;
				stack[2] = pnext;
			} else {
				stack[stacksize - 2] = pnext;
				pcur = pprev;
				pprev = stack[stacksize - 4];
				stacksize--;
			}
		} else {
			pnext += incr;
			stack[stacksize - 1] = pnext;
		}
	}
#undef PX
#undef PY
	return --stacksize;
}

/*
 * cv::convexHull(points, hull, clockwise, returnPoints=true) for float
 * points: the hull's point indices into hullbuf, their number returned.
 * `order` and `stack` hold n and n + 2 ints.
 */
static int convex_hull(const float *pts, int total, bool clockwise, int *order, int *stack, int *hullbuf)
{
	int miny_ind = 0, maxy_ind = 0, nout = 0, i;

	for (i = 0; i < total; i++)
		order[i] = i;
	qsort_r(order, (size_t)total, sizeof(int), cmp_points, (void *)pts);
	for (i = 1; i < total; i++) {
		float y = pts[(size_t)order[i] * 2 + 1];

		if (pts[(size_t)order[miny_ind] * 2 + 1] > y)
			miny_ind = i;
		if (pts[(size_t)order[maxy_ind] * 2 + 1] < y)
			maxy_ind = i;
	}
	if (pts[(size_t)order[0] * 2] == pts[(size_t)order[total - 1] * 2] &&
	    pts[(size_t)order[0] * 2 + 1] == pts[(size_t)order[total - 1] * 2 + 1]) {
		hullbuf[nout++] = order[0];
		return nout;
	}
	{
		int *tl_stack = stack, tl_count = sklansky(pts, order, 0, maxy_ind, tl_stack, -1, 1);
		int *tr_stack = stack + tl_count,
		    tr_count = sklansky(pts, order, total - 1, maxy_ind, tr_stack, -1, -1);
		int stop_idx, *bl_stack, bl_count, *br_stack, br_count;

		if (!clockwise) {
			int *t = tl_stack, c = tl_count;

			tl_stack = tr_stack;
			tr_stack = t;
			tl_count = tr_count;
			tr_count = c;
		}
		for (i = 0; i < tl_count - 1; i++)
			hullbuf[nout++] = order[tl_stack[i]];
		for (i = tr_count - 1; i > 0; i--)
			hullbuf[nout++] = order[tr_stack[i]];
		stop_idx = tr_count > 2 ? tr_stack[1] : tl_count > 2 ? tl_stack[tl_count - 2] : -1;

		bl_stack = stack;
		bl_count = sklansky(pts, order, 0, miny_ind, bl_stack, 1, -1);
		br_stack = stack + bl_count;
		br_count = sklansky(pts, order, total - 1, miny_ind, br_stack, 1, 1);
		if (clockwise) {
			int *t = bl_stack, c = bl_count;

			bl_stack = br_stack;
			br_stack = t;
			bl_count = br_count;
			br_count = c;
		}
		if (stop_idx >= 0) {
			int check_idx = bl_count > 2              ? bl_stack[1]
					: bl_count + br_count > 2 ? br_stack[2 - bl_count]
								  : -1;

			if (check_idx == stop_idx ||
			    (check_idx >= 0 && pts[(size_t)order[check_idx] * 2] == pts[(size_t)order[stop_idx] * 2] &&
			     pts[(size_t)order[check_idx] * 2 + 1] == pts[(size_t)order[stop_idx] * 2 + 1])) {
				bl_count = bl_count < 2 ? bl_count : 2;
				br_count = br_count < 2 ? br_count : 2;
			}
		}
		for (i = 0; i < bl_count - 1; i++)
			hullbuf[nout++] = order[bl_stack[i]];
		for (i = br_count - 1; i > 0; i--)
			hullbuf[nout++] = order[br_stack[i]];
	}
	/* the cyclic shift that makes the indices ascending or descending, where one does */
	if (nout >= 3) {
		int min_idx = 0, max_idx = 0, lt = 0;

		for (i = 1; i < nout; i++) {
			int idx = hullbuf[i];

			lt += hullbuf[i - 1] < idx;
			if (lt > 1 && lt <= i - 2)
				break;
			if (idx < hullbuf[min_idx])
				min_idx = i;
			if (idx > hullbuf[max_idx])
				max_idx = i;
		}
		{
			int mmdist = abs(max_idx - min_idx);

			if ((mmdist == 1 || mmdist == nout - 1) && (lt <= 1 || lt >= nout - 2)) {
				int ascending = (max_idx + 1) % nout == min_idx;
				int i0 = ascending ? min_idx : max_idx, j = i0;

				if (i0 > 0) {
					for (i = 0; i < nout; i++) {
						int curr_idx = stack[i] = hullbuf[j];
						int next_j = j + 1 < nout ? j + 1 : 0;
						int next_idx = hullbuf[next_j];

						if (i < nout - 1 && (ascending != (curr_idx < next_idx)))
							break;
						j = next_j;
					}
					if (i == nout)
						memcpy(hullbuf, stack, (size_t)nout * sizeof(int));
				}
			}
		}
	}
	return nout;
}

/*
 * rotatingCalipers(points, n, CALIPERS_MINAREARECT, out) as OpenCV 4.x/5
 * has it (float arithmetic; the caliper that turns least chosen by the
 * sign of a dot product): corner, vector 1, vector 2.
 */
static void rotating_calipers(const float *pts, int n, float *vect, float *inv_len, float out[6])
{
	float minarea = FLT_MAX;
	int i, k, left = 0, bottom = 0, right = 0, top = 0, seq[4];
	float orientation = 0, base_a, base_b = 0, left_x, right_x, top_y, bottom_y;
	float p0x = pts[0], p0y = pts[1];
	int best_left = 0, best_bottom = 0;
	float best_a = 0, best_b = 0, best_w = 0, best_h = 0;

	left_x = right_x = p0x;
	top_y = bottom_y = p0y;
	for (i = 0; i < n; i++) {
		double dx, dy;
		const float *pt = pts + (size_t)(i + 1 < n ? i + 1 : 0) * 2;

		if (p0x < left_x)
			left_x = p0x, left = i;
		if (p0x > right_x)
			right_x = p0x, right = i;
		if (p0y > top_y)
			top_y = p0y, top = i;
		if (p0y < bottom_y)
			bottom_y = p0y, bottom = i;
		dx = pt[0] - p0x;
		dy = pt[1] - p0y;
		vect[i * 2] = (float)dx;
		vect[i * 2 + 1] = (float)dy;
		inv_len[i] = (float)(1. / sqrt(dx * dx + dy * dy));
		p0x = pt[0];
		p0y = pt[1];
	}
	{
		double ax = vect[(n - 1) * 2], ay = vect[(n - 1) * 2 + 1];

		for (i = 0; i < n; i++) {
			double bx = vect[i * 2], by = vect[i * 2 + 1];
			double convexity = ax * by - ay * bx;

			if (convexity != 0) {
				orientation = (convexity > 0) ? 1.f : -1.f;
				break;
			}
			ax = bx;
			ay = by;
		}
	}
	base_a = orientation;
	seq[0] = bottom;
	seq[1] = right;
	seq[2] = top;
	seq[3] = left;
	for (k = 0; k < n; k++) {
		/* the smallest angle between a caliper and its edge: the edge most to the right (firstVecIsRight) */
		float rot[4][2] = {
			{vect[seq[0] * 2], vect[seq[0] * 2 + 1]},
			{vect[seq[1] * 2 + 1], -vect[seq[1] * 2]},
			{-vect[seq[2] * 2], -vect[seq[2] * 2 + 1]},
			{-vect[seq[3] * 2 + 1], vect[seq[3] * 2]},
		};
		int main_element = 0;

		for (i = 1; i < 4; i++) {
			/* rotate90CW(rot[i]) . rot[main] < 0 */
			float tx = rot[i][1], ty = -rot[i][0];

			if (tx * rot[main_element][0] + ty * rot[main_element][1] < 0)
				main_element = i;
		}
		{
			int pindex = seq[main_element];
			float lead_x = vect[pindex * 2] * inv_len[pindex];
			float lead_y = vect[pindex * 2 + 1] * inv_len[pindex];

			switch (main_element) {
			case 0:
				base_a = lead_x;
				base_b = lead_y;
				break;
			case 1:
				base_a = lead_y;
				base_b = -lead_x;
				break;
			case 2:
				base_a = -lead_x;
				base_b = -lead_y;
				break;
			default:
				base_a = -lead_y;
				base_b = lead_x;
				break;
			}
		}
		seq[main_element] += 1;
		seq[main_element] = (seq[main_element] == n) ? 0 : seq[main_element];
		{
			float dx = pts[seq[1] * 2] - pts[seq[3] * 2];
			float dy = pts[seq[1] * 2 + 1] - pts[seq[3] * 2 + 1];
			float width = dx * base_a + dy * base_b, height, area;

			dx = pts[seq[2] * 2] - pts[seq[0] * 2];
			dy = pts[seq[2] * 2 + 1] - pts[seq[0] * 2 + 1];
			height = -dx * base_b + dy * base_a;
			area = width * height;
			if (area <= minarea) {
				minarea = area;
				best_left = seq[3];
				best_a = base_a;
				best_w = width;
				best_b = base_b;
				best_h = height;
				best_bottom = seq[0];
			}
		}
	}
	{
		float A1 = best_a, B1 = best_b, A2 = -best_b, B2 = best_a;
		float C1 = A1 * pts[best_left * 2] + pts[best_left * 2 + 1] * B1;
		float C2 = A2 * pts[best_bottom * 2] + pts[best_bottom * 2 + 1] * B2;
		float idet = 1.f / (A1 * B2 - A2 * B1);
		float px = (C1 * B2 - C2 * B1) * idet;
		float py = (A1 * C2 - A2 * C1) * idet;

		out[0] = px;
		out[1] = py;
		out[2] = A1 * best_w;
		out[3] = B1 * best_w;
		out[4] = A2 * best_h;
		out[5] = B2 * best_h;
	}
}

int instgeom_min_area_rect(const float *pts, uint32_t n, float *scratch, float rect[5])
{
	int *order = (int *)scratch, *stack = order + n, *hullbuf = stack + n + 2;
	float *hull = (float *)(hullbuf + n);
	float *vect, *inv_len;
	float cx = 0, cy = 0, w = 0, h = 0;
	double angle = 0;
	int nh;

	if (n == 0 || n > INSTGEOM_MAX_POINTS || !all_finite(pts, (size_t)n * 2))
		return -EINVAL;
	_Static_assert(sizeof(int) == sizeof(float), "scratch shares ints and floats");
	nh = convex_hull(pts, (int)n, false, order, stack, hullbuf);
	/* the hull's points, then the calipers' vectors and inverse lengths after them */
	hull = (float *)(hullbuf + n);
	for (int i = 0; i < nh; i++) {
		hull[i * 2] = pts[(size_t)hullbuf[i] * 2];
		hull[i * 2 + 1] = pts[(size_t)hullbuf[i] * 2 + 1];
	}
	vect = hull + (size_t)nh * 2;
	inv_len = vect + (size_t)nh * 2;
	if (nh > 2) {
		float out[6];

		rotating_calipers(hull, nh, vect, inv_len, out);
		cx = out[0] + (out[2] + out[4]) * 0.5f;
		cy = out[1] + (out[3] + out[5]) * 0.5f;
		w = (float)sqrt((double)out[2] * out[2] + (double)out[3] * out[3]);
		h = (float)sqrt((double)out[4] * out[4] + (double)out[5] * out[5]);
		angle = atan2((double)out[3], (double)out[2]);
	} else if (nh == 2) {
		double dx = hull[2] - hull[0], dy = hull[3] - hull[1];

		cx = (hull[0] + hull[2]) * 0.5f;
		cy = (hull[1] + hull[3]) * 0.5f;
		w = (float)sqrt(dx * dx + dy * dy);
		h = 0;
		angle = atan2(dy, dx);
	} else {
		cx = hull[0];
		cy = hull[1];
	}
	/* degrees in double, brought into [-90, 0) (w and h swapped for each quarter turn), rounded once */
	angle = angle * 180 / M_PI;
	while (angle >= 0) {
		float t = w;

		w = h;
		h = t;
		angle -= 90;
	}
	while (angle < -90) {
		float t = w;

		w = h;
		h = t;
		angle += 90;
	}
	rect[0] = cx;
	rect[1] = cy;
	rect[2] = w;
	rect[3] = h;
	rect[4] = (float)angle;
	return 0;
}

int instgeom_xywhr(const float *pts, uint32_t n, float *scratch, double xywhr[5])
{
	float r[5];
	double w, h, theta;
	int rc = instgeom_min_area_rect(pts, n, scratch, r);

	if (rc < 0)
		return rc;
	w = r[2];
	h = r[3];
	theta = (double)r[4] / 180 * M_PI;
	if (w < h) {
		double t = w;

		w = h;
		h = t;
		theta += M_PI / 2;
	}
	while (theta >= 3 * M_PI / 4)
		theta -= M_PI;
	while (theta < -M_PI / 4)
		theta += M_PI;
	xywhr[0] = r[0];
	xywhr[1] = r[1];
	xywhr[2] = w;
	xywhr[3] = h;
	xywhr[4] = theta;
	return 0;
}

void instgeom_corners(const double b[5], double corners[8])
{
	double c = cos(b[4]), s = sin(b[4]);
	double v1x = b[2] / 2 * c, v1y = b[2] / 2 * s, v2x = -b[3] / 2 * s, v2y = b[3] / 2 * c;

	corners[0] = b[0] + v1x + v2x;
	corners[1] = b[1] + v1y + v2y;
	corners[2] = b[0] + v1x - v2x;
	corners[3] = b[1] + v1y - v2y;
	corners[4] = b[0] - v1x - v2x;
	corners[5] = b[1] - v1y - v2y;
	corners[6] = b[0] - v1x + v2x;
	corners[7] = b[1] - v1y + v2y;
}
