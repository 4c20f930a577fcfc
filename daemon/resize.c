/* SPDX-License-Identifier: MIT */
/*
 * Pillow's ImagingResample with the BILINEAR filter, for 8-bit RGB: two
 * separable passes through an 8-bit scratch image (horizontal first, unless
 * Pillow >= 13 would go vertical first), with Pillow's 22-bit fixed-point
 * coefficients and rounding, so the result is bit-exact with
 * Image.resize(size, Image.BILINEAR, box) (checked against Pillow 13.0).
 *
 * Speed comes from padding every output's taps to one count per axis (zero
 * weights, shifted inwards at the image edge), so the inner loops have fixed
 * trip counts that gcc vectorises even at -O2, and from computing the
 * coefficient tables only when the geometry changes.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "resize.h"

#define PRECISION_BITS (32 - 8 - 2)
#define ROUND_BIAS (1 << (PRECISION_BITS - 1))
/* Keeps every index and product below in range; JPEG tops out at 65535. */
#define RESIZE_MAX_DIM (1u << 20)
/* Bytes of output a vertical-pass block computes at once; a multiple of every vector width. */
#define VBLOCK 32

/*
 * Multiversioning (an ifunc picks at load time) gives the kernels AVX2 where
 * the CPU has it while the build targets plain x86-64: SSE2 has no 32-bit
 * vector multiply. -DRESIZE_NO_CLONES builds the plain version only.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__) && !defined(RESIZE_NO_CLONES)
#define KERNEL_CLONES __attribute__((target_clones("default", "avx2")))
#else
#define KERNEL_CLONES
#endif

/* One axis' resampling: for output i, taps start[i] .. start[i] + taps - 1 with weights coef[i * taps ...]. */
struct axis {
	/* the key, as Pillow sees it (it keeps the box in single precision) */
	uint32_t in_size, out_size;
	float in0, in1;
	bool valid;

	bool identity;      /* integer offset, scale 1: each output is one input pixel */
	uint32_t taps;      /* per output, padded with zero weights */
	uint32_t lo, hi;    /* inputs [lo, hi) are read */
	uint32_t *start;    /* out_size */
	int32_t *coef;      /* out_size * taps */
	int32_t *coef4;     /* out_size * taps * 4: each weight repeated per channel, for 4-byte pixels */
	size_t start_cap, coef_cap, coef4_cap;
	double *tmp;        /* one output's float weights */
	size_t tmp_cap;
};

struct resizer {
	struct axis h, v;
	uint8_t *scratch;   /* horizontally resampled rows */
	size_t scratch_cap;
};

int resizer_new(struct resizer **out)
{
	struct resizer *r;

	if (!out)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	*out = r;
	return 0;
}

static void axis_done(struct axis *a)
{
	free(a->start);
	free(a->coef);
	free(a->coef4);
	free(a->tmp);
}

void resizer_free(struct resizer *r)
{
	if (!r)
		return;
	axis_done(&r->h);
	axis_done(&r->v);
	free(r->scratch);
	free(r);
}

static int grow(void **p, size_t *cap, size_t want, size_t elem)
{
	void *n;

	if (want <= *cap)
		return 0;
	if (want > SIZE_MAX / elem)
		return -ENOMEM;
	n = realloc(*p, want * elem);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = want;
	return 0;
}

static double triangle(double x)
{
	if (x < 0.0)
		x = -x;
	return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's precompute_coeffs() for one output: the taps it reads, [*xmin, *xmin + *n). */
static void pillow_bounds(uint32_t in_size, float in0, double scale, double support, uint32_t i, int *xmin,
			  int *n)
{
	double center = in0 + (i + 0.5) * scale;
	int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);

	if (lo < 0)
		lo = 0;
	if (hi > (int)in_size)
		hi = (int)in_size;
	*xmin = lo;
	*n = hi - lo;
}

static int check_window(uint32_t in_size, double x, double w, uint32_t out_size)
{
	if (in_size == 0 || in_size > RESIZE_MAX_DIM || out_size == 0 || out_size > RESIZE_MAX_DIM)
		return -EINVAL;
	/* !(a >= b) also rejects NaN */
	if (!(x >= 0.0) || !(w > 0.0) || !(x + w <= (double)in_size))
		return -EINVAL;
	/* Pillow's arithmetic happens on the float box: it must still be a nonempty window. */
	if (!((float)(x + w) > (float)x))
		return -EINVAL;
	return 0;
}

int resize_span(uint32_t in_size, double x, double w, uint32_t out_size, uint32_t *first, uint32_t *end)
{
	float in0 = (float)x, in1 = (float)(x + w);
	double scale, support;
	int lo, hi, n;
	int r;

	if (!first || !end)
		return -EINVAL;
	r = check_window(in_size, x, w, out_size);
	if (r < 0)
		return r;
	scale = (double)(in1 - in0) / out_size;
	support = scale < 1.0 ? 1.0 : scale;
	/* The bounds only move right as the output index grows. */
	pillow_bounds(in_size, in0, scale, support, 0, &lo, &n);
	pillow_bounds(in_size, in0, scale, support, out_size - 1, &hi, &n);
	*first = (uint32_t)lo;
	*end = (uint32_t)(hi + n);
	return 0;
}

static int axis_setup(struct axis *a, uint32_t in_size, double x, double w, uint32_t out_size, bool quad)
{
	float in0 = (float)x, in1 = (float)(x + w);
	double scale, filterscale, support;
	uint32_t ksize, taps = 1;
	int r;

	if (a->valid && a->in_size == in_size && a->out_size == out_size && a->in0 == in0 && a->in1 == in1)
		return 0;
	a->valid = false;

	scale = (double)(in1 - in0) / out_size;
	filterscale = scale < 1.0 ? 1.0 : scale;
	support = filterscale; /* BILINEAR's support is 1 */
	ksize = (uint32_t)ceil(support) * 2 + 1;

	/* The padded tap count is the largest any output needs. */
	for (uint32_t i = 0; i < out_size; i++) {
		int xmin, n;

		pillow_bounds(in_size, in0, scale, support, i, &xmin, &n);
		if ((uint32_t)n > taps)
			taps = (uint32_t)n;
	}
	/* The 4-byte horizontal kernel takes taps four at a time. */
	if (quad && taps % 4 && (taps | 3) + 1 <= in_size)
		taps = (taps | 3) + 1;

	r = grow((void **)&a->start, &a->start_cap, out_size, sizeof(*a->start));
	if (r >= 0)
		r = grow((void **)&a->tmp, &a->tmp_cap, ksize, sizeof(*a->tmp));
	if (r >= 0)
		r = grow((void **)&a->coef, &a->coef_cap, (size_t)out_size * taps, sizeof(*a->coef));
	if (r >= 0)
		r = grow((void **)&a->coef4, &a->coef4_cap, (size_t)out_size * taps * 4, sizeof(*a->coef4));
	if (r < 0)
		return r;

	a->lo = UINT32_MAX;
	a->hi = 0;
	for (uint32_t i = 0; i < out_size; i++) {
		double center = in0 + (i + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
		int32_t *k = a->coef + (size_t)i * taps;
		uint32_t s, shift;
		int xmin, n;

		pillow_bounds(in_size, in0, scale, support, i, &xmin, &n);
		for (int t = 0; t < n; t++) {
			a->tmp[t] = triangle((t + xmin - center + 0.5) * ss);
			ww += a->tmp[t];
		}
		if (ww != 0.0)
			for (int t = 0; t < n; t++)
				a->tmp[t] /= ww;

		/* Near the far edge, start earlier rather than read past it; taps <= in_size since n <= in_size. */
		s = (uint32_t)xmin;
		if (s + taps > in_size)
			s = in_size - taps;
		shift = (uint32_t)xmin - s;
		memset(k, 0, taps * sizeof(*k));
		for (int t = 0; t < n; t++) {
			double v = a->tmp[t] * (1 << PRECISION_BITS);

			k[shift + t] = (int32_t)(v < 0 ? v - 0.5 : v + 0.5);
		}
		a->start[i] = s;
		if (s < a->lo)
			a->lo = s;
		if (s + taps > a->hi)
			a->hi = s + taps;
	}

	for (size_t j = 0; j < (size_t)out_size * taps; j++)
		for (unsigned c = 0; c < 4; c++)
			a->coef4[j * 4 + c] = a->coef[j];

	a->identity = in0 == floorf(in0) && in1 - in0 == (float)out_size;
	a->taps = taps;
	a->in_size = in_size;
	a->out_size = out_size;
	a->in0 = in0;
	a->in1 = in1;
	a->valid = true;
	return 0;
}

/*
 * The 8-bit result of a fixed-point sum. No clamping: the triangle's weights
 * are non-negative and their 22-bit roundings sum to at most 2^22 + taps / 2,
 * so a sum of 8-bit values plus the rounding bias stays in [0, 256 << 22).
 */
static inline uint8_t descale(int32_t acc)
{
	return (uint8_t)(acc >> PRECISION_BITS);
}

/*
 * Horizontal pass over 4-byte pixels, four taps (16 bytes, one vector of
 * bytes) a step: gcc vectorises these fixed-length loops into widening
 * loads, multiplies and adds. Source pixel `base` is at src.
 */
static inline __attribute__((always_inline)) void hpass4_blocks(const uint8_t *restrict src, size_t src_stride,
							       uint32_t rows, uint8_t *restrict dst,
							       size_t dst_stride, const struct axis *a, uint32_t base,
							       bool flip, uint32_t blocks)
{
	uint32_t n = a->out_size;

	for (uint32_t y = 0; y < rows; y++) {
		const uint8_t *restrict s = src + y * src_stride;
		uint8_t *restrict d = dst + y * dst_stride;

		for (uint32_t o = 0; o < n; o++) {
			uint32_t i = flip ? n - 1 - o : o;
			const uint8_t *restrict p = s + (size_t)(a->start[i] - base) * 4;
			const int32_t *restrict k = a->coef4 + (size_t)i * blocks * 16;
			int32_t acc[16] = { ROUND_BIAS, ROUND_BIAS, ROUND_BIAS };
			int32_t v[4];

			/* pointers, not p[b * 16 + c]: unsigned index wraparound would block vectorising */
			for (uint32_t b = 0; b < blocks; b++, p += 16, k += 16)
				for (unsigned c = 0; c < 16; c++)
					acc[c] += p[c] * k[c];
			/* lane by lane, so that it stays in one vector register */
			for (unsigned c = 0; c < 4; c++)
				v[c] = acc[c] + acc[c + 4] + acc[c + 8] + acc[c + 12];
			d[o * 3 + 0] = descale(v[0]);
			d[o * 3 + 1] = descale(v[1]);
			d[o * 3 + 2] = descale(v[2]);
		}
	}
}

/* Odd tap counts: only images narrower than the padded filter. */
static void hpass4_any(const uint8_t *restrict src, size_t src_stride, uint32_t rows, uint8_t *restrict dst,
		       size_t dst_stride, const struct axis *a, uint32_t base, bool flip)
{
	uint32_t n = a->out_size, taps = a->taps;

	for (uint32_t y = 0; y < rows; y++) {
		const uint8_t *restrict s = src + y * src_stride;
		uint8_t *restrict d = dst + y * dst_stride;

		for (uint32_t o = 0; o < n; o++) {
			uint32_t i = flip ? n - 1 - o : o;
			const uint8_t *restrict p = s + (size_t)(a->start[i] - base) * 4;
			const int32_t *restrict k = a->coef + (size_t)i * taps;
			int32_t acc[3] = { ROUND_BIAS, ROUND_BIAS, ROUND_BIAS };

			for (uint32_t t = 0; t < taps; t++)
				for (unsigned c = 0; c < 3; c++)
					acc[c] += p[t * 4 + c] * k[t];
			for (unsigned c = 0; c < 3; c++)
				d[o * 3 + c] = descale(acc[c]);
		}
	}
}

KERNEL_CLONES
static void hpass4(const uint8_t *restrict src, size_t src_stride, uint32_t rows, uint8_t *restrict dst,
		   size_t dst_stride, const struct axis *a, uint32_t base, bool flip)
{
	/* Constant block counts for the common cases let the compiler unroll completely. */
	switch (a->taps) {
	case 4:
		hpass4_blocks(src, src_stride, rows, dst, dst_stride, a, base, flip, 1);
		break;
	case 8:
		hpass4_blocks(src, src_stride, rows, dst, dst_stride, a, base, flip, 2);
		break;
	default:
		if (a->taps % 4 == 0)
			hpass4_blocks(src, src_stride, rows, dst, dst_stride, a, base, flip, a->taps / 4);
		else
			hpass4_any(src, src_stride, rows, dst, dst_stride, a, base, flip);
		break;
	}
}

/*
 * 3-byte pixels (resize_rgb): a 4-byte load could run past the caller's
 * buffer, so one channel at a time. Source pixel `base` is at src.
 */
KERNEL_CLONES
static void hpass3(const uint8_t *restrict src, size_t src_stride, uint32_t rows, uint8_t *restrict dst,
		   size_t dst_stride, const struct axis *a, uint32_t base, bool flip)
{
	uint32_t n = a->out_size, taps = a->taps;

	for (uint32_t y = 0; y < rows; y++) {
		const uint8_t *restrict s = src + y * src_stride;
		uint8_t *restrict d = dst + y * dst_stride;

		for (uint32_t o = 0; o < n; o++) {
			uint32_t i = flip ? n - 1 - o : o;
			const uint8_t *restrict p = s + (size_t)(a->start[i] - base) * 3;
			const int32_t *restrict k = a->coef + (size_t)i * taps;
			int32_t r = ROUND_BIAS, g = ROUND_BIAS, b = ROUND_BIAS;

			for (uint32_t t = 0; t < taps; t++) {
				r += p[t * 3 + 0] * k[t];
				g += p[t * 3 + 1] * k[t];
				b += p[t * 3 + 2] * k[t];
			}
			d[o * 3 + 0] = descale(r);
			d[o * 3 + 1] = descale(g);
			d[o * 3 + 2] = descale(b);
		}
	}
}

/* Vertical pass: every byte of a row is one lane; rows are src row a->start[y] - a->lo onwards. */
KERNEL_CLONES
static void vpass(const uint8_t *restrict src, size_t src_stride, uint32_t row_bytes, uint8_t *restrict dst,
		  size_t dst_stride, const struct axis *a)
{
	uint32_t taps = a->taps;

	for (uint32_t y = 0; y < a->out_size; y++) {
		const uint8_t *restrict s = src + (size_t)(a->start[y] - a->lo) * src_stride;
		const int32_t *restrict k = a->coef + (size_t)y * taps;
		uint8_t *restrict d = dst + y * dst_stride;
		uint32_t x = 0;

		for (; x + VBLOCK <= row_bytes; x += VBLOCK) {
			int32_t acc[VBLOCK];

			for (unsigned j = 0; j < VBLOCK; j++)
				acc[j] = ROUND_BIAS;
			for (uint32_t t = 0; t < taps; t++) {
				const uint8_t *restrict row = s + t * src_stride + x;
				int32_t kt = k[t];

				for (unsigned j = 0; j < VBLOCK; j++)
					acc[j] += row[j] * kt;
			}
			uint8_t *restrict out = d + x; /* not d[x + j]: its wraparound would block vectorising */

			for (unsigned j = 0; j < VBLOCK; j++)
				out[j] = descale(acc[j]);
		}
		for (; x < row_bytes; x++) {
			int32_t acc = ROUND_BIAS;

			for (uint32_t t = 0; t < taps; t++)
				acc += s[t * src_stride + x] * k[t];
			d[x] = descale(acc);
		}
	}
}

static void hpass(const uint8_t *src, unsigned bpp, size_t src_stride, uint32_t rows, uint8_t *dst,
		  size_t dst_stride, const struct axis *a, uint32_t base, bool flip)
{
	if (bpp == 4)
		hpass4(src, src_stride, rows, dst, dst_stride, a, base, flip);
	else
		hpass3(src, src_stride, rows, dst, dst_stride, a, base, flip);
}

bool resize_vertical_first(uint32_t src_w, uint32_t src_h, uint32_t dst_w, uint32_t dst_h)
{
	return src_h > dst_h && (int64_t)src_h - dst_h > ((int64_t)src_w - dst_w) * 2;
}

static int resize_px(struct resizer *r, const uint8_t *src, unsigned bpp, uint32_t src_w, uint32_t src_h,
		     size_t src_stride, double x, double y, double w, double h, uint8_t *dst, uint32_t dst_w,
		     uint32_t dst_h, size_t dst_stride, bool flip, bool vertical_first)
{
	bool need_h, need_v, v_first;
	int ret;

	if (!r || !src || !dst)
		return -EINVAL;
	ret = check_window(src_w, x, w, dst_w);
	if (ret >= 0)
		ret = check_window(src_h, y, h, dst_h);
	if (ret < 0)
		return ret;
	if (src_stride < (size_t)src_w * bpp || dst_stride < (size_t)dst_w * 3)
		return -EINVAL;

	ret = axis_setup(&r->h, src_w, x, w, dst_w, true);
	if (ret >= 0)
		ret = axis_setup(&r->v, src_h, y, h, dst_h, false);
	if (ret < 0)
		return ret;

	/*
	 * Like Pillow, skip a pass that would only copy (4-byte pixels always
	 * need the horizontal one, to repack). An identity pass is exact, so the
	 * order only matters when both passes resample.
	 */
	need_h = !r->h.identity || flip || bpp != 3;
	need_v = !r->v.identity;
	v_first = need_v && !r->h.identity && vertical_first;

	if (!need_v && !need_h) {
		src += (size_t)r->h.in0 * 3;
		for (uint32_t i = 0; i < dst_h; i++)
			memcpy(dst + i * dst_stride, src + ((size_t)r->v.in0 + i) * src_stride, (size_t)dst_w * 3);
		return 0;
	}
	if (!need_v) {
		/* output row i is source row in0 + i */
		hpass(src + (size_t)r->v.in0 * src_stride, bpp, src_stride, dst_h, dst, dst_stride, &r->h, 0, flip);
		return 0;
	}
	if (!need_h) {
		vpass(src + (size_t)r->h.in0 * 3 + (size_t)r->v.lo * src_stride, src_stride, dst_w * 3, dst, dst_stride,
		      &r->v);
		return 0;
	}
	if (v_first) {
		size_t row = (size_t)(r->h.hi - r->h.lo) * bpp;

		ret = grow((void **)&r->scratch, &r->scratch_cap, row * dst_h, 1);
		if (ret < 0)
			return ret;
		vpass(src + (size_t)r->h.lo * bpp + (size_t)r->v.lo * src_stride, src_stride, (uint32_t)row,
		      r->scratch, row, &r->v);
		hpass(r->scratch, bpp, row, dst_h, dst, dst_stride, &r->h, r->h.lo, flip);
	} else {
		size_t row = (size_t)dst_w * 3;

		ret = grow((void **)&r->scratch, &r->scratch_cap, row * (r->v.hi - r->v.lo), 1);
		if (ret < 0)
			return ret;
		hpass(src + (size_t)r->v.lo * src_stride, bpp, src_stride, r->v.hi - r->v.lo, r->scratch, row, &r->h,
		      0, flip);
		vpass(r->scratch, row, (uint32_t)row, dst, dst_stride, &r->v);
	}
	return 0;
}

int resize_rgb(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
	       double x, double y, double w, double h, uint8_t *dst, uint32_t dst_w, uint32_t dst_h,
	       size_t dst_stride, bool flip)
{
	return resize_px(r, src, 3, src_w, src_h, src_stride, x, y, w, h, dst, dst_w, dst_h, dst_stride, flip,
			 resize_vertical_first(src_w, src_h, dst_w, dst_h));
}

int resize_rgbx(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
		double x, double y, double w, double h, uint8_t *dst, uint32_t dst_w, uint32_t dst_h,
		size_t dst_stride, bool flip, bool vertical_first)
{
	return resize_px(r, src, 4, src_w, src_h, src_stride, x, y, w, h, dst, dst_w, dst_h, dst_stride, flip,
			 vertical_first);
}
