/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "resize_cv.h"

/* INTER_RESIZE_COEF_BITS: coefficients are 11-bit, rows hold 22-bit sums. */
#define COEF_BITS 11
#define COEF_ONE (1 << COEF_BITS)

struct cv_resizer {
	int32_t *xofs;   /* [dst_w] source column of each output column */
	int16_t *alpha;  /* [dst_w][2] */
	size_t xcap, acap;
	int32_t *rows;   /* [2][dst_w * 3] horizontally resampled rows */
	size_t rcap;
};

int cv_resizer_new(struct cv_resizer **out)
{
	struct cv_resizer *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	*out = r;
	return 0;
}

void cv_resizer_free(struct cv_resizer *r)
{
	if (!r)
		return;
	free(r->xofs);
	free(r->alpha);
	free(r->rows);
	free(r);
}

/* cvRound of a float: round half to even (the SSE conversion). */
static inline int16_t coef(float v)
{
	return (int16_t)lrintf(v * COEF_ONE);
}

/* OpenCV's source position of output index d: fx = (float)((d + 0.5) *
 * scale - 0.5), its floor and fraction, both in float. */
static inline void source_pos(uint32_t d, double scale, int32_t *s, float *f)
{
	float fx = (float)((d + 0.5) * scale - 0.5);
	float fl = floorf(fx);

	*s = (int32_t)fl;
	*f = fx - fl;
}

/* The 2x2 mean of an exact half-size shrink (resizeAreaFast). */
static void area_half(const uint8_t *src, size_t src_stride, unsigned bpp, uint8_t *dst, uint32_t dst_w,
		      uint32_t dst_h, size_t dst_stride)
{
	for (uint32_t y = 0; y < dst_h; y++) {
		const uint8_t *a = src + (size_t)2 * y * src_stride, *b = a + src_stride;
		uint8_t *o = dst + (size_t)y * dst_stride;

		for (uint32_t x = 0; x < dst_w; x++, a += 2 * bpp, b += 2 * bpp, o += 3)
			for (int c = 0; c < 3; c++)
				o[c] = (uint8_t)((a[c] + a[bpp + c] + b[c] + b[bpp + c] + 2) >> 2);
	}
}

/* HResizeLinear: one source row to dst_w * 3 sums of 22 bits. Columns
 * past the last pair (xmax on) take the edge pixel alone. */
static void hresize(const struct cv_resizer *r, const uint8_t *row, unsigned bpp, uint32_t dst_w, uint32_t xmax,
		    int32_t *out)
{
	uint32_t dx = 0;

	for (; dx < xmax; dx++) {
		const uint8_t *p = row + (size_t)r->xofs[dx] * bpp;
		int32_t a0 = r->alpha[2 * dx], a1 = r->alpha[2 * dx + 1];

		for (int c = 0; c < 3; c++)
			out[dx * 3 + c] = p[c] * a0 + p[bpp + c] * a1;
	}
	for (; dx < dst_w; dx++) {
		const uint8_t *p = row + (size_t)r->xofs[dx] * bpp;

		for (int c = 0; c < 3; c++)
			out[dx * 3 + c] = p[c] * COEF_ONE;
	}
}

static inline uint8_t sat_u8(int32_t v)
{
	return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* VResizeLinear as its SIMD kernel computes it (sums shifted down 4,
 * 16-bit multiply-high by each coefficient, then (+2) >> 2), which OpenCV
 * 5 applies to whole rows, tails included. */
static void vresize(const int32_t *s0, const int32_t *s1, int16_t b0, int16_t b1, size_t n, uint8_t *out)
{
	for (size_t x = 0; x < n; x++) {
		int32_t t0 = ((int32_t)(int16_t)(s0[x] >> 4) * b0) >> 16;
		int32_t t1 = ((int32_t)(int16_t)(s1[x] >> 4) * b1) >> 16;

		out[x] = sat_u8((t0 + t1 + 2) >> 2);
	}
}

int cv_resize_linear(struct cv_resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
		     unsigned src_bpp, uint8_t *dst, uint32_t dst_w, uint32_t dst_h, size_t dst_stride)
{
	/* scale = 1 / inv_scale, as OpenCV derives it from the sizes */
	double scale_x = 1.0 / ((double)dst_w / src_w), scale_y = 1.0 / ((double)dst_h / src_h);
	size_t n = (size_t)dst_w * 3;
	int32_t row_y[2] = { -1, -1 };
	uint32_t xmax = dst_w;
	void *p;
	int err;

	if (!r || !src || !dst || src_w == 0 || src_h == 0 || dst_w == 0 || dst_h == 0 || (src_bpp != 3 && src_bpp != 4))
		return -EINVAL;
	if (src_w == dst_w && src_h == dst_h) {
		for (uint32_t y = 0; y < dst_h; y++)
			for (uint32_t x = 0; x < dst_w; x++)
				memcpy(dst + (size_t)y * dst_stride + x * 3, src + (size_t)y * src_stride + x * src_bpp, 3);
		return 0;
	}
	/* INTER_LINEAR at exactly half size in both directions is INTER_AREA */
	if (fabs(scale_x - 2.0) < DBL_EPSILON && fabs(scale_y - 2.0) < DBL_EPSILON) {
		area_half(src, src_stride, src_bpp, dst, dst_w, dst_h, dst_stride);
		return 0;
	}
	p = r->xofs;
	err = grow(&p, &r->xcap, dst_w, sizeof(int32_t));
	r->xofs = p;
	if (err == 0) {
		p = r->alpha;
		err = grow(&p, &r->acap, (size_t)dst_w * 2, sizeof(int16_t));
		r->alpha = p;
	}
	if (err == 0) {
		p = r->rows;
		err = grow(&p, &r->rcap, 2 * n, sizeof(int32_t));
		r->rows = p;
	}
	if (err < 0)
		return err;

	for (uint32_t dx = 0; dx < dst_w; dx++) {
		int32_t sx;
		float fx;

		source_pos(dx, scale_x, &sx, &fx);
		if (sx < 0) {
			fx = 0;
			sx = 0;
		}
		if ((int64_t)sx + 1 >= (int64_t)src_w) {
			if (dx < xmax)
				xmax = dx;
			if (sx >= (int32_t)src_w - 1) {
				fx = 0;
				sx = (int32_t)src_w - 1;
			}
		}
		r->xofs[dx] = sx;
		r->alpha[2 * dx] = coef(1.f - fx);
		r->alpha[2 * dx + 1] = coef(fx);
	}

	for (uint32_t dy = 0; dy < dst_h; dy++) {
		int32_t sy, want[2];
		int32_t *rows[2];
		float fy;

		source_pos(dy, scale_y, &sy, &fy);
		/* rows sy and sy + 1, clipped to the image (the coefficients are not) */
		for (int k = 0; k < 2; k++) {
			int32_t y = sy + k;

			want[k] = y < 0 ? 0 : y >= (int32_t)src_h ? (int32_t)src_h - 1 : y;
		}
		for (int k = 0; k < 2; k++) {
			int slot = row_y[0] == want[k] ? 0 : row_y[1] == want[k] ? 1 : -1;

			if (slot < 0) {
				/* into the buffer holding neither row this output needs */
				int keep = k == 0 ? (row_y[1] == want[1] ? 1 : row_y[0] == want[1] ? 0 : 1)
						  : (int)((rows[0] - r->rows) / (ptrdiff_t)n);

				slot = 1 - keep;
				hresize(r, src + (size_t)want[k] * src_stride, src_bpp, dst_w, xmax, r->rows + (size_t)slot * n);
				row_y[slot] = want[k];
			}
			rows[k] = r->rows + (size_t)slot * n;
		}
		vresize(rows[0], rows[1], coef(1.f - fy), coef(fy), n, dst + (size_t)dy * dst_stride);
	}
	return 0;
}
