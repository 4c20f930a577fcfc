/* SPDX-License-Identifier: MIT */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "affine.h"
#include "resize.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define AFFINE_X86 1
#else
#define AFFINE_X86 0
#endif

static void fill_all(const struct rgb_image *in, uint8_t *out, const uint8_t fill[3])
{
	size_t row = (size_t)in->width * 3, done = 3;

	if (!in->width || !in->height)
		return;
	if (fill[0] == fill[1] && fill[1] == fill[2]) {
		for (uint32_t y = 0; y < in->height; y++)
			memset(out + y * in->stride, fill[0], row);
		return;
	}
	/* the first row by doubling, the others copies of it */
	memcpy(out, fill, 3);
	for (; done < row; done *= 2)
		memcpy(out + done, out, done < row - done ? done : row - done);
	for (uint32_t y = 1; y < in->height; y++)
		memcpy(out + y * in->stride, out, row);
}

/* Pillow's COORD: negative coordinates are out, others truncated. */
static inline int coord(double v)
{
	return v < 0.0 ? -1 : (int)v;
}

/* Pillow's FLOOR */
static inline int floor_i(double v)
{
	return v < 0.0 ? (int)floor(v) : (int)v;
}

/* ImagingScaleAffine: a[1] == a[3] == 0 with NEAREST */
static void scale_affine(const struct rgb_image *in, uint8_t *out, const double a[6])
{
	enum { CHUNK = 256 };
	const int w = (int)in->width, h = (int)in->height;
	int xmin = w, xmax = 0;
	uint32_t xoff[CHUNK]; /* a chunk of columns' source offsets, computed once for all rows */

	for (int x = 0; x < w; x++) {
		int xin = coord(a[0] * (x + 0.5) + a[2]);

		if (xin >= 0 && xin < w) {
			xmax = x + 1;
			if (x < xmin)
				xmin = x;
		}
	}
	for (int x0 = xmin; x0 < xmax; x0 += CHUNK) {
		int n = xmax - x0 < CHUNK ? xmax - x0 : CHUNK;

		for (int k = 0; k < n; k++)
			xoff[k] = 3 * (uint32_t)coord(a[0] * (x0 + k + 0.5) + a[2]);
		for (int y = 0; y < h; y++) {
			int yin = coord(a[4] * (y + 0.5) + a[5]);
			const uint8_t *row;
			uint8_t *o = out + (size_t)y * in->stride + 3 * (size_t)x0;

			if (yin < 0 || yin >= h)
				continue;
			row = in->px + (size_t)yin * in->stride;
			for (int k = 0; k < n; k++)
				memcpy(o + 3 * k, row + xoff[k], 3);
		}
	}
}

/* a is a whole-pixel translation: (x + a[2], y + a[5]) with integer offsets */
static bool whole_shift(const double a[6])
{
	return a[0] == 1.0 && a[1] == 0.0 && a[3] == 0.0 && a[4] == 1.0 && a[2] == trunc(a[2]) && a[5] == trunc(a[5]) &&
	       fabs(a[2]) < 1 << 30 && fabs(a[5]) < 1 << 30;
}

/*
 * A whole-pixel translation, by rows: every filter samples source pixel
 * (x + a2, y + a5) unchanged where it lies inside (the nearest loops'
 * truncation of x + 0.5 + a2; bilinear's and bicubic's fractions are 0,
 * so their blends return that tap exactly), and leaves the fill elsewhere.
 */
static void shift_rows(const struct rgb_image *in, uint8_t *out, const double a[6])
{
	const int w = (int)in->width, h = (int)in->height, sx = (int)a[2], sy = (int)a[5];
	/* the columns x with 0 <= x + sx < w */
	const int x0 = sx < 0 ? -sx : 0, x1 = sx > 0 ? w - sx : w;

	if (x0 >= x1)
		return;
	for (int y = 0; y < h; y++) {
		const int yin = y + sy;

		if (yin < 0 || yin >= h)
			continue;
		memcpy(out + (size_t)y * in->stride + 3 * (size_t)x0,
		       in->px + (size_t)yin * in->stride + 3 * (size_t)(x0 + sx), 3 * (size_t)(x1 - x0));
	}
}

static inline int check_fixed(const double a[6], int x, int y)
{
	return fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 && fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

/* Pillow's affine_fixed: nearest, 16.16 fixed point, stepped along rows */
static void affine_fixed(const struct rgb_image *in, uint8_t *out, const double a[6])
{
	const int w = (int)in->width, h = (int)in->height;
#define FIX(v) floor_i((v)*65536.0 + 0.5)
	int a0 = FIX(a[0]), a1 = FIX(a[1]), a3 = FIX(a[3]), a4 = FIX(a[4]);
	int a2 = FIX(a[2] + a[1] * 0.5 + a[0] * 0.5), a5 = FIX(a[5] + a[4] * 0.5 + a[3] * 0.5);
#undef FIX

	for (int y = 0; y < h; y++) {
		/* unsigned steps: Pillow's int arithmetic never wraps within check_fixed's range */
		int xx = a2, yy = a5;
		uint8_t *o = out + (size_t)y * in->stride;

		if (a3 == 0) {
			/* one source row (a shear along x) */
			int yin = yy >> 16;
			const uint8_t *row = in->px + (size_t)(yin >= 0 && yin < h ? yin : 0) * in->stride;

			for (int x = 0; yin >= 0 && yin < h && x < w; x++, o += 3, xx += a0) {
				int xin = xx >> 16;

				if (xin >= 0 && xin < w)
					memcpy(o, row + 3 * (size_t)xin, 3);
			}
			a2 += a1;
			a5 += a4;
			continue;
		}
		for (int x = 0; x < w; x++, o += 3) {
			int xin = xx >> 16, yin = yy >> 16;

			if (xin >= 0 && xin < w && yin >= 0 && yin < h)
				memcpy(o, in->px + (size_t)yin * in->stride + 3 * (size_t)xin, 3);
			xx += a0;
			yy += a3;
		}
		a2 += a1;
		a5 += a4;
	}
}

/* Pillow's floating-point nearest loop (where fixed point would overflow) */
static void affine_float(const struct rgb_image *in, uint8_t *out, const double a[6])
{
	const int w = (int)in->width, h = (int)in->height;
	double xo = a[2] + a[1] * 0.5 + a[0] * 0.5, yo = a[5] + a[4] * 0.5 + a[3] * 0.5;

	for (int y = 0; y < h; y++) {
		double xx = xo, yy = yo;
		uint8_t *o = out + (size_t)y * in->stride;

		for (int x = 0; x < w; x++, o += 3) {
			int xin = coord(xx), yin = coord(yy);

			if (xin >= 0 && xin < w && yin >= 0 && yin < h)
				memcpy(o, in->px + (size_t)yin * in->stride + 3 * (size_t)xin, 3);
			xx += a[0];
			yy += a[3];
		}
		xo += a[1];
		yo += a[4];
	}
}

static inline int xclip(int x, int n)
{
	return x < 0 ? 0 : x < n ? x : n - 1;
}

/* bilinear_filter32RGB */
static int bilinear(const struct rgb_image *in, double xin, double yin, uint8_t *o)
{
	const int w = (int)in->width, h = (int)in->height;
	int x, y, x0, x1;
	double dx, dy;

	if (xin < 0.0 || xin >= w || yin < 0.0 || yin >= h)
		return 0;
	xin -= 0.5;
	yin -= 0.5;
	x = floor_i(xin);
	y = floor_i(yin);
	dx = xin - x;
	dy = yin - y;
	if (x >= 0 && x + 1 < w && y >= 0 && y + 1 < h) {
		/* inside: no clipping, the same arithmetic */
		const uint8_t *r0 = in->px + (size_t)y * in->stride + 3 * (size_t)x, *r1 = r0 + in->stride;

		for (int b = 0; b < 3; b++) {
			double v1 = r0[b] + (r0[3 + b] - r0[b]) * dx, v2 = r1[b] + (r1[3 + b] - r1[b]) * dx;

			o[b] = (uint8_t)(v1 + (v2 - v1) * dy);
		}
		return 1;
	}
	x0 = xclip(x, w) * 3;
	x1 = xclip(x + 1, w) * 3;
	for (int b = 0; b < 3; b++) {
		const uint8_t *r = in->px + (size_t)xclip(y, h) * in->stride + b;
		double v1, v2;

		v1 = r[x0] + (r[x1] - r[x0]) * dx;
		if (y + 1 >= 0 && y + 1 < h) {
			r = in->px + (size_t)(y + 1) * in->stride + b;
			v2 = r[x0] + (r[x1] - r[x0]) * dx;
		} else {
			v2 = v1;
		}
		v1 = v1 + (v2 - v1) * dy;
		o[b] = (uint8_t)v1;
	}
	return 1;
}

static inline double cubic(double v1, double v2, double v3, double v4, double d)
{
	double p1 = v2, p2 = -v1 + v3, p3 = 2 * (v1 - v2) + v3 - v4, p4 = -v1 + v2 - v3 + v4;

	return p1 + d * (p2 + d * (p3 + d * p4));
}

/* bicubic_filter32RGB */
static int bicubic(const struct rgb_image *in, double xin, double yin, uint8_t *o)
{
	const int w = (int)in->width, h = (int)in->height;
	int x, y, xs[4];
	double dx, dy;

	if (xin < 0.0 || xin >= w || yin < 0.0 || yin >= h)
		return 0;
	xin -= 0.5;
	yin -= 0.5;
	x = floor_i(xin);
	y = floor_i(yin);
	dx = xin - x;
	dy = yin - y;
	x--;
	y--;
	if (x >= 0 && x + 3 < w && y >= 0 && y + 3 < h) {
		/* inside: no clipping, the same arithmetic on four whole rows of taps */
		const uint8_t *r = in->px + (size_t)y * in->stride + 3 * (size_t)x;
		double v[3][4];

		for (int k = 0; k < 4; k++, r += in->stride)
			for (int b = 0; b < 3; b++)
				v[b][k] = cubic(r[b], r[3 + b], r[6 + b], r[9 + b], dx);
		for (int b = 0; b < 3; b++) {
			double c = cubic(v[b][0], v[b][1], v[b][2], v[b][3], dy);

			o[b] = c <= 0.0 ? 0 : c >= 255.0 ? 255 : (uint8_t)c;
		}
		return 1;
	}
	for (int k = 0; k < 4; k++)
		xs[k] = xclip(x + k, w) * 3;
	for (int b = 0; b < 3; b++) {
		const uint8_t *r = in->px + (size_t)xclip(y, h) * in->stride + b;
		double v[4];

		v[0] = cubic(r[xs[0]], r[xs[1]], r[xs[2]], r[xs[3]], dx);
		for (int k = 1; k < 4; k++) {
			if (y + k >= 0 && y + k < h) {
				r = in->px + (size_t)(y + k) * in->stride + b;
				v[k] = cubic(r[xs[0]], r[xs[1]], r[xs[2]], r[xs[3]], dx);
			} else {
				v[k] = v[k - 1];
			}
		}
		v[0] = cubic(v[0], v[1], v[2], v[3], dy);
		o[b] = v[0] <= 0.0 ? 0 : v[0] >= 255.0 ? 255 : (uint8_t)v[0];
	}
	return 1;
}

/* ImagingGenericTransform with affine_transform */
static void generic(const struct rgb_image *in, uint8_t *out, const double a[6], enum affine_resample resample)
{
	for (uint32_t y = 0; y < in->height; y++) {
		uint8_t *o = out + (size_t)y * in->stride;

		for (uint32_t x = 0; x < in->width; x++, o += 3) {
			double xi = x + 0.5, yi = y + 0.5;
			double xs = a[0] * xi + a[1] * yi + a[2], ys = a[3] * xi + a[4] * yi + a[5];

			if (resample == RESAMPLE_BILINEAR)
				bilinear(in, xs, ys, o);
			else
				bicubic(in, xs, ys, o);
		}
	}
}

#if AFFINE_X86
/* Four bytes as four doubles. */
__attribute__((target("avx2"))) static inline __m256d bytes4(uint32_t v)
{
	return _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)v)));
}

/* Two neighbouring pixels at p (6 bytes): their channels in lanes 0..2 (lane 3 is don't-care), reading only those bytes. */
__attribute__((target("avx2"))) static inline void taps2(const uint8_t *p, __m256d *left, __m256d *right)
{
	uint32_t a, b;

	memcpy(&a, p, 4);     /* the left pixel and the right one's first byte */
	memcpy(&b, p + 2, 4); /* the left one's last byte and the right pixel */
	*left = bytes4(a);
	*right = bytes4(b >> 8);
}

/*
 * One pixel of generic() for BILINEAR with AVX2: bilinear_filter32RGB's
 * inside case with the three channels in one vector of doubles, each lane
 * the scalar code's operations in its order (no FMA: target avx2 only,
 * contraction off), truncated as it truncates; the border pixels by
 * bilinear().
 */
__attribute__((target("avx2"))) static inline void bilinear_pixel_avx2(const struct rgb_image *in, double xs, double ys,
								       uint8_t *o)
{
	const int w = (int)in->width, h = (int)in->height;
	double xin = xs - 0.5, yin = ys - 0.5;
	int ix, iy;

	if (xs < 0.0 || xs >= w || ys < 0.0 || ys >= h)
		return; /* outside: the fill stays */
	ix = floor_i(xin);
	iy = floor_i(yin);
	if (ix >= 0 && ix + 1 < w && iy >= 0 && iy + 1 < h) {
		const uint8_t *r0 = in->px + (size_t)iy * in->stride + 3 * (size_t)ix, *r1 = r0 + in->stride;
		const __m256d dx = _mm256_set1_pd(xin - ix), dy = _mm256_set1_pd(yin - iy);
		__m256d p00, p01, p10, p11, v1, v2, v;
		__m128i q;
		uint32_t t;

		taps2(r0, &p00, &p01);
		taps2(r1, &p10, &p11);
		v1 = _mm256_add_pd(p00, _mm256_mul_pd(_mm256_sub_pd(p01, p00), dx));
		v2 = _mm256_add_pd(p10, _mm256_mul_pd(_mm256_sub_pd(p11, p10), dx));
		v = _mm256_add_pd(v1, _mm256_mul_pd(_mm256_sub_pd(v2, v1), dy));
		q = _mm256_cvttpd_epi32(v);
		q = _mm_packs_epi32(q, q);
		t = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(q, q));
		o[0] = (uint8_t)t;
		o[1] = (uint8_t)(t >> 8);
		o[2] = (uint8_t)(t >> 16);
	} else {
		bilinear(in, xs, ys, o);
	}
}

/* Channel c (0..2) of four gathered pixels' dwords as four doubles. */
__attribute__((target("avx2"))) static inline __m256d chan4(__m128i d, int c)
{
	const __m128i b = _mm_and_si128(_mm_srl_epi32(d, _mm_cvtsi32_si128(8 * c)), _mm_set1_epi32(0xff));

	return _mm256_cvtepi32_pd(b);
}

/*
 * Four output pixels' source points, as the scalar filters compute each one:
 * (xs, ys) = a applied to the pixel centres xi and the row's (a1 * y, a4 *
 * y in ay1, ay4), in the same double operations and order; the floors fx,
 * fy of xs - 0.5, ys - 0.5 and their fractions dx, dy. True when all four
 * floors lie in [lo, wd) and [lo, hd) (a NaN compares false).
 */
struct points4 {
	__m256d xs, ys, fx, fy, dx, dy;
};

__attribute__((target("avx2"))) static inline bool points4(const __m256d av[6], __m256d xi, __m256d ay1, __m256d ay4,
							   __m256d lo, __m256d wd, __m256d hd, struct points4 *p)
{
	const __m256d half = _mm256_set1_pd(0.5);
	__m256d xin, yin, ok;

	p->xs = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(av[0], xi), ay1), av[2]);
	p->ys = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(av[3], xi), ay4), av[5]);
	xin = _mm256_sub_pd(p->xs, half);
	yin = _mm256_sub_pd(p->ys, half);
	p->fx = _mm256_floor_pd(xin);
	p->fy = _mm256_floor_pd(yin);
	p->dx = _mm256_sub_pd(xin, p->fx);
	p->dy = _mm256_sub_pd(yin, p->fy);
	ok = _mm256_and_pd(_mm256_cmp_pd(p->fx, lo, _CMP_GE_OQ), _mm256_cmp_pd(p->fx, wd, _CMP_LT_OQ));
	ok = _mm256_and_pd(ok, _mm256_cmp_pd(p->fy, lo, _CMP_GE_OQ));
	ok = _mm256_and_pd(ok, _mm256_cmp_pd(p->fy, hd, _CMP_LT_OQ));
	return _mm256_movemask_pd(ok) == 0xf;
}

/*
 * generic() for BILINEAR with AVX2, four output pixels a step: their
 * source coordinates a0 xi + a1 yi + a2 and a3 xi + a4 yi + a5 in the
 * scalar code's order of double operations per lane, the floor, the
 * fractions and the two-by-two blend of each channel across the four
 * pixels (the taps gathered from the rows: the dwords at the left pixel
 * and two bytes on, which read only the two pixels' six bytes), truncated
 * as the scalar code truncates. A step with a pixel outside or on the
 * border goes pixel by pixel (bilinear_pixel_avx2), as does the row's
 * tail, and images too large for 32-bit gather offsets.
 */
__attribute__((target("avx2"))) static void generic_bilinear_avx2(const struct rgb_image *in, uint8_t *out,
								  const double a[6])
{
	const int w = (int)in->width, h = (int)in->height;
	const __m256d av[6] = {_mm256_set1_pd(a[0]), _mm256_set1_pd(a[1]), _mm256_set1_pd(a[2]),
			       _mm256_set1_pd(a[3]), _mm256_set1_pd(a[4]), _mm256_set1_pd(a[5])};
	const __m256d zero = _mm256_setzero_pd(), wd = _mm256_set1_pd(w - 1);
	const __m256d hd = _mm256_set1_pd(h - 1), step = _mm256_set1_pd(4.0);
	const __m128i stride = _mm_set1_epi32((int)in->stride), three = _mm_set1_epi32(3);
	/* planar bytes c0 p0..3, c1 p0..3, c2 p0..3 to pixels p0 c0 c1 c2, p1 ... */
	const __m128i inter = _mm_setr_epi8(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -1, -1, -1, -1);
	const int vec = (size_t)h * in->stride + 8 <= (size_t)INT32_MAX;

	for (int y = 0; y < h; y++) {
		uint8_t *o = out + (size_t)y * in->stride;
		const double yi = y + 0.5;
		const __m256d yv = _mm256_set1_pd(yi), ay1 = _mm256_mul_pd(av[1], yv), ay4 = _mm256_mul_pd(av[4], yv);
		__m256d xi = _mm256_setr_pd(0.5, 1.5, 2.5, 3.5);
		int x = 0;

		for (; vec && x + 4 <= w; x += 4, o += 12, xi = _mm256_add_pd(xi, step)) {
			struct points4 p;
			__m256d dx, dy, v[3];
			__m128i ix, iy, off, d0, e0, d1, e1, q01, q2;

			/*
			 * the scalar code's inside case: floor(xs - 0.5) in [0, w - 1) and floor(ys - 0.5) in
			 * [0, h - 1) (then 0 <= xs < w and 0 <= ys < h too)
			 */
			if (!points4(av, xi, ay1, ay4, zero, wd, hd, &p)) {
				double xa[4], ya[4];

				_mm256_storeu_pd(xa, p.xs);
				_mm256_storeu_pd(ya, p.ys);
				for (int k = 0; k < 4; k++)
					bilinear_pixel_avx2(in, xa[k], ya[k], o + 3 * k);
				continue;
			}
			dx = p.dx;
			dy = p.dy;
			ix = _mm256_cvttpd_epi32(p.fx);
			iy = _mm256_cvttpd_epi32(p.fy);
			off = _mm_add_epi32(_mm_mullo_epi32(iy, stride), _mm_mullo_epi32(ix, three));
			d0 = _mm_i32gather_epi32((const int *)in->px, off, 1);
			e0 = _mm_srli_epi32(_mm_i32gather_epi32((const int *)(in->px + 2), off, 1), 8);
			off = _mm_add_epi32(off, stride);
			d1 = _mm_i32gather_epi32((const int *)in->px, off, 1);
			e1 = _mm_srli_epi32(_mm_i32gather_epi32((const int *)(in->px + 2), off, 1), 8);
			for (int c = 0; c < 3; c++) {
				const __m256d p00 = chan4(d0, c), p01 = chan4(e0, c), p10 = chan4(d1, c),
					      p11 = chan4(e1, c);
				const __m256d v1 = _mm256_add_pd(p00, _mm256_mul_pd(_mm256_sub_pd(p01, p00), dx));
				const __m256d v2 = _mm256_add_pd(p10, _mm256_mul_pd(_mm256_sub_pd(p11, p10), dx));

				v[c] = _mm256_add_pd(v1, _mm256_mul_pd(_mm256_sub_pd(v2, v1), dy));
			}
			q01 = _mm_packs_epi32(_mm256_cvttpd_epi32(v[0]), _mm256_cvttpd_epi32(v[1]));
			q2 = _mm256_cvttpd_epi32(v[2]);
			q2 = _mm_shuffle_epi8(_mm_packus_epi16(q01, _mm_packs_epi32(q2, q2)), inter);
			_mm_storel_epi64((__m128i *)(void *)o, q2);
			{
				uint32_t t = (uint32_t)_mm_extract_epi32(q2, 2);

				memcpy(o + 8, &t, 4);
			}
		}
		for (; x < w; x++, o += 3) {
			const double xf = x + 0.5;

			bilinear_pixel_avx2(in, a[0] * xf + a[1] * yi + a[2], a[3] * xf + a[4] * yi + a[5], o);
		}
	}
}

/* byte `shift / 8` of each of four dwords as four doubles */
__attribute__((target("avx2"))) static inline __m256d byte4(__m128i d, int shift)
{
	return _mm256_cvtepi32_pd(_mm_and_si128(_mm_srl_epi32(d, _mm_cvtsi32_si128(shift)), _mm_set1_epi32(0xff)));
}

/* cubic() per lane in its order of operations (negation by the sign bit, as -v is) */
__attribute__((target("avx2"))) static inline __m256d cubic4(__m256d v1, __m256d v2, __m256d v3, __m256d v4, __m256d d)
{
	const __m256d nv1 = _mm256_xor_pd(v1, _mm256_set1_pd(-0.0));
	const __m256d p2 = _mm256_add_pd(nv1, v3);
	const __m256d p3 =
		_mm256_sub_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(2.0), _mm256_sub_pd(v1, v2)), v3), v4);
	const __m256d p4 = _mm256_add_pd(_mm256_sub_pd(_mm256_add_pd(nv1, v2), v3), v4);

	return _mm256_add_pd(
		v2, _mm256_mul_pd(d, _mm256_add_pd(p2, _mm256_mul_pd(d, _mm256_add_pd(p3, _mm256_mul_pd(d, p4))))));
}

/*
 * generic() for BICUBIC with AVX2, four output pixels a step, as
 * generic_bilinear_avx2: the coordinates per lane in the scalar order, the
 * sixteen taps of each pixel gathered from four rows (three dwords a row
 * cover the four pixels' twelve bytes), bicubic_filter32RGB's inside
 * case's cubic() along each row then down, per channel across the four
 * pixels, clamped and truncated as it does; steps touching the border or
 * outside, the row's tail and too large images go through bicubic().
 */
__attribute__((target("avx2"))) static void generic_bicubic_avx2(const struct rgb_image *in, uint8_t *out,
								 const double a[6])
{
	static const int tap[3][4][2] = {{{0, 0}, {0, 24}, {1, 16}, {2, 8}},
					 {{0, 8}, {1, 0}, {1, 24}, {2, 16}},
					 {{0, 16}, {1, 8}, {2, 0}, {2, 24}}}; /* channel, tap: dword, shift */
	const int w = (int)in->width, h = (int)in->height;
	const __m256d av[6] = {_mm256_set1_pd(a[0]), _mm256_set1_pd(a[1]), _mm256_set1_pd(a[2]),
			       _mm256_set1_pd(a[3]), _mm256_set1_pd(a[4]), _mm256_set1_pd(a[5])};
	const __m256d one = _mm256_set1_pd(1.0), wd = _mm256_set1_pd(w - 2);
	const __m256d hd = _mm256_set1_pd(h - 2), step = _mm256_set1_pd(4.0), top = _mm256_set1_pd(255.0);
	const __m128i stride = _mm_set1_epi32((int)in->stride), three = _mm_set1_epi32(3);
	const __m128i inter = _mm_setr_epi8(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -1, -1, -1, -1);
	const int vec = (size_t)h * in->stride + 16 <= (size_t)INT32_MAX;

	for (int y = 0; y < h; y++) {
		uint8_t *o = out + (size_t)y * in->stride;
		const double yi = y + 0.5;
		const __m256d yv = _mm256_set1_pd(yi), ay1 = _mm256_mul_pd(av[1], yv), ay4 = _mm256_mul_pd(av[4], yv);
		__m256d xi = _mm256_setr_pd(0.5, 1.5, 2.5, 3.5);
		int x = 0;

		for (; vec && x + 4 <= w; x += 4, o += 12, xi = _mm256_add_pd(xi, step)) {
			struct points4 p;
			__m256d dx, dy, v[3];
			__m128i off, g[4][3], q01, q2;

			/* the inside case: floor(xs - 0.5) - 1 in [0, w - 3), the same for y */
			if (!points4(av, xi, ay1, ay4, one, wd, hd, &p)) {
				double xa[4], ya[4];

				_mm256_storeu_pd(xa, p.xs);
				_mm256_storeu_pd(ya, p.ys);
				for (int k = 0; k < 4; k++)
					bicubic(in, xa[k], ya[k], o + 3 * k);
				continue;
			}
			dx = p.dx;
			dy = p.dy;
			off = _mm_add_epi32(
				_mm_mullo_epi32(_mm_sub_epi32(_mm256_cvttpd_epi32(p.fy), _mm_set1_epi32(1)), stride),
				_mm_mullo_epi32(_mm_sub_epi32(_mm256_cvttpd_epi32(p.fx), _mm_set1_epi32(1)), three));
			for (int k = 0; k < 4; k++, off = _mm_add_epi32(off, stride))
				for (int j = 0; j < 3; j++)
					g[k][j] = _mm_i32gather_epi32((const int *)(in->px + 4 * j), off, 1);
			for (int c = 0; c < 3; c++) {
				__m256d r[4];

				for (int k = 0; k < 4; k++)
					r[k] = cubic4(byte4(g[k][tap[c][0][0]], tap[c][0][1]),
						      byte4(g[k][tap[c][1][0]], tap[c][1][1]),
						      byte4(g[k][tap[c][2][0]], tap[c][2][1]),
						      byte4(g[k][tap[c][3][0]], tap[c][3][1]), dx);
				v[c] = _mm256_min_pd(
					_mm256_max_pd(cubic4(r[0], r[1], r[2], r[3], dy), _mm256_setzero_pd()), top);
			}
			q01 = _mm_packs_epi32(_mm256_cvttpd_epi32(v[0]), _mm256_cvttpd_epi32(v[1]));
			q2 = _mm256_cvttpd_epi32(v[2]);
			q2 = _mm_shuffle_epi8(_mm_packus_epi16(q01, _mm_packs_epi32(q2, q2)), inter);
			_mm_storel_epi64((__m128i *)(void *)o, q2);
			{
				uint32_t t = (uint32_t)_mm_extract_epi32(q2, 2);

				memcpy(o + 8, &t, 4);
			}
		}
		for (; x < w; x++, o += 3) {
			const double xf = x + 0.5;

			bicubic(in, a[0] * xf + a[1] * yi + a[2], a[3] * xf + a[4] * yi + a[5], o);
		}
	}
}

/* The pixels layer's one switch (STOKER_RESIZE_ISA) picks the AVX2 kernels. */
static bool avx2_runs(void)
{
	return resize_default_isa() >= RESIZE_ISA_AVX2;
}
#else
static bool avx2_runs(void)
{
	return false;
}

static void generic_bilinear_avx2(const struct rgb_image *in, uint8_t *out, const double a[6])
{
	generic(in, out, a, RESAMPLE_BILINEAR);
}

static void generic_bicubic_avx2(const struct rgb_image *in, uint8_t *out, const double a[6])
{
	generic(in, out, a, RESAMPLE_BICUBIC);
}
#endif

void affine_transform(const struct rgb_image *in, uint8_t *out, const double a[6], enum affine_resample resample,
		      const uint8_t fill[3])
{
	const int w = (int)in->width, h = (int)in->height;

	fill_all(in, out, fill);
	if (!w || !h)
		return;
	if (whole_shift(a))
		shift_rows(in, out, a);
	else if (resample == RESAMPLE_BILINEAR && avx2_runs())
		generic_bilinear_avx2(in, out, a);
	else if (resample == RESAMPLE_BICUBIC && avx2_runs())
		generic_bicubic_avx2(in, out, a);
	else if (resample != RESAMPLE_NEAREST)
		generic(in, out, a, resample);
	else if (a[1] == 0 && a[3] == 0)
		scale_affine(in, out, a);
	else if (check_fixed(a, 0, 0) && check_fixed(a, w, h) && check_fixed(a, 0, h) && check_fixed(a, w, 0))
		affine_fixed(in, out, a);
	else
		affine_float(in, out, a);
}

/* Python's round(v, 15): the nearest 15-decimal value (glibc prints exactly, rounding half to even) */
static double round15(double v)
{
	char buf[64];

	snprintf(buf, sizeof(buf), "%.15f", v);
	return strtod(buf, NULL);
}

void affine_rotate(const struct rgb_image *in, uint8_t *out, double angle, enum affine_resample resample,
		   const uint8_t fill[3])
{
	const double cx = in->width / 2.0, cy = in->height / 2.0;
	double m[6], rad;

	/* Python's angle % 360.0 (the sign of the divisor) */
	angle = fmod(angle, 360.0);
	if (angle < 0)
		angle += 360.0;
	if (angle >= 360.0)
		angle -= 360.0;
	if (angle == 0 || angle == 180 || ((angle == 90 || angle == 270) && in->width == in->height)) {
		/* Pillow's fast paths: copy, or a transpose */
		for (uint32_t y = 0; y < in->height; y++)
			for (uint32_t x = 0; x < in->width; x++) {
				uint32_t sx = x, sy = y;

				if (angle == 180) {
					sx = in->width - 1 - x;
					sy = in->height - 1 - y;
				} else if (angle == 90) { /* counter-clockwise */
					sx = in->width - 1 - y;
					sy = x;
				} else if (angle == 270) {
					sx = y;
					sy = in->height - 1 - x;
				}
				memcpy(out + y * in->stride + 3 * x, in->px + sy * in->stride + 3 * sx, 3);
			}
		return;
	}
	rad = -(angle * (M_PI / 180.0));
	m[0] = round15(cos(rad));
	m[1] = round15(sin(rad));
	m[3] = round15(-sin(rad));
	m[4] = round15(cos(rad));
	m[2] = m[0] * -cx + m[1] * -cy + 0.0;
	m[5] = m[3] * -cx + m[4] * -cy + 0.0;
	m[2] += cx;
	m[5] += cy;
	affine_transform(in, out, m, resample, fill);
}

void affine_tv_matrix(const double center[2], double angle, const double translate[2], double scale,
		      const double shear[2], double m[6])
{
	const double rot = angle * (M_PI / 180.0), sx = shear[0] * (M_PI / 180.0), sy = shear[1] * (M_PI / 180.0);
	const double cx = center[0], cy = center[1], cos_sy = cos(sy), tan_sx = tan(sx), rot_minus_sy = rot - sy;
	const double cx_plus_tx = cx + translate[0], cy_plus_ty = cy + translate[1];
	const double a = cos(rot_minus_sy) / cos_sy, b = -(a * tan_sx + sin(rot));
	const double c = sin(rot_minus_sy) / cos_sy, d = cos(rot) - c * tan_sx;

	m[0] = d / scale;
	m[1] = -b / scale;
	m[2] = 0.0;
	m[3] = -c / scale;
	m[4] = a / scale;
	m[5] = 0.0;
	m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty;
	m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty;
}
