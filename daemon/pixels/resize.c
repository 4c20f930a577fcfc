/* SPDX-License-Identifier: MIT */
/*
 * Pillow's ImagingResample with the BILINEAR filter, for 8-bit pixels: two
 * separable passes through an 8-bit scratch image (horizontal first, unless
 * the caller says vertical), Pillow's triangle weights and tap bounds on
 * its single-precision box, but 14-bit weights (Pillow: 22) rounded to sum
 * to exactly 1 << 14 per output, so that they fit the 16 x 16-bit
 * multiply-adds of SSE2 / AVX2 / AVX-512 (pmaddwd), as Pillow-SIMD does.
 * Within 1 of Pillow, and equal to it in ~99.9% of the values of photos.
 *
 * Every kernel does the same integer arithmetic, so the result does not
 * depend on the CPU. Pixels are 4 bytes (RGBX) in, 3 (RGB) out:
 *
 *  - horizontal: for one output pixel, two taps at a time, the two pixels'
 *    channels interleaved into 16-bit lanes [r0 r1 g0 g1 b0 b1 x0 x1] (one
 *    byte shuffle) and multiply-added with (k0, k1): four 32-bit sums RGBX.
 *    AVX2 does four rows at once (one per 128-bit lane of two registers,
 *    sharing the broadcast weights), four output pixels a step, packed to
 *    12 bytes of RGB by one shuffle, which also mirrors them for a flip.
 *  - vertical: every byte of a row is a lane; two source rows at a time,
 *    their bytes interleaved into (row a, row b) 16-bit pairs and
 *    multiply-added with (k0, k1). The last block of a row overlaps the
 *    one before it rather than read past the row.
 *
 * The kernels are picked once, at resizer_new(): AVX2 where the CPU has it,
 * else SSE2 (every x86-64), else (other CPUs) portable C written for the
 * compiler to vectorise. AVX-512 (four rows a vector) where the CPU has
 * AVX512_VBMI2 too (Ice Lake and later, Zen 4: no clock penalty for 512-bit
 * work), else only when asked for (resize_force_isa(), STOKER_RESIZE_ISA=
 * avx512): on Skylake-SP 512-bit work lowers the clock of the whole core.
 *
 * Every output of an axis gets the same number of taps (padded with zero
 * weights, shifted inwards at the image edge; even, unless the source is
 * narrower), and the coefficient tables are computed only when the
 * geometry changes, so steady state allocates nothing.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "resize.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define RESIZE_X86 1
#include <immintrin.h>
#define TARGET_AVX2 __attribute__((target("avx2")))
#define TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512bw")))
#define INLINE_AVX2 static inline __attribute__((always_inline, target("avx2")))
#define INLINE_AVX512 static inline __attribute__((always_inline, target("avx2,avx512f,avx512bw")))
#else
#define RESIZE_X86 0
#endif

/* Fixed-point weights: 14 fractional bits keep a weight of 1 (plus rounding) within int16. */
#define PRECISION_BITS 14
#define ONE (1 << PRECISION_BITS)
#define ROUND_BIAS (1 << (PRECISION_BITS - 1))
/* Keeps every index and product below in range; JPEG tops out at 65535. */
#define RESIZE_MAX_DIM (1u << 20)
/* Bytes of output a portable vertical-pass block computes at once. */
#define VBLOCK 32

/* One axis' resampling: for output i, taps start[i] .. start[i] + taps - 1 with weights coef[i * taps ...]. */
struct axis {
	/* the key, as Pillow sees it (it keeps the box in single precision) */
	uint32_t in_size, out_size;
	float in0, in1;
	enum resize_filter filter;
	bool valid;

	bool identity;   /* integer offset, scale 1: each output is one input pixel */
	uint32_t taps;   /* per output, padded with zero weights */
	uint32_t pairs;  /* (taps + 1) / 2 */
	uint32_t lo, hi; /* inputs [lo, hi) are read */
	uint32_t *start; /* out_size */
	uint32_t *off;   /* out_size: (start[i] - lo) * 4, the byte offset of 4-byte pixels */
	int16_t *coef;   /* out_size * taps, each output's summing to exactly ONE */
	int32_t *pair;   /* out_size * pairs: taps 2j, 2j + 1 as the 16-bit halves (low, high) */
	int32_t *coef4;  /* with `quad`, out_size * taps * 4: each weight repeated per byte of a pixel */
	bool quad;       /* taps a multiple of 4 where the source allows, and coef4, for hpass_scalar */
	size_t start_cap, off_cap, coef_cap, pair_cap, coef4_cap;
	double *tmp; /* one output's weights in double precision */
	size_t tmp_cap;
};

/*
 * The kernels. Source index a->lo is at `src` (a column of 4-byte pixels
 * for hpass, a row for vpass). hpass writes `rows` rows of a->out_size RGB
 * pixels; vpass writes a->out_size rows of row_bytes bytes.
 */
typedef void hpass_fn(const uint8_t *src, size_t src_stride, uint32_t rows, uint8_t *dst, size_t dst_stride,
		      const struct axis *a, bool flip);
typedef void vpass_fn(const uint8_t *src, size_t src_stride, uint32_t row_bytes, uint8_t *dst, size_t dst_stride,
		      const struct axis *a);

struct resizer {
	struct axis h, v;
	enum resize_filter filter;
	enum resize_isa isa;
	hpass_fn *hpass;
	vpass_fn *vpass;
	uint8_t *scratch; /* the intermediate image */
	size_t scratch_cap;
	uint8_t *wide; /* resize_rgb's source, widened to 4 bytes a pixel */
	size_t wide_cap;
	uint32_t *ntab; /* RESIZE_NEAREST: each output column's source column */
	size_t ntab_cap;
};

static inline double triangle(double x)
{
	double y = 1.0 - fabs(x);

	return y > 0.0 ? y : 0.0;
}

/* Pillow's bicubic_filter: Keys' cubic convolution with a = -0.5. */
static inline double bicubic(double x)
{
	const double a = -0.5;

	x = fabs(x);
	if (x < 1.0)
		return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
	if (x < 2.0)
		return (((x - 5) * x + 8) * x - 4) * a;
	return 0.0;
}

/* The filter's support at scale 1 (Pillow's filterp->support). */
static double filter_support(enum resize_filter f)
{
	return f == RESIZE_BICUBIC ? 2.0 : 1.0;
}

/* Pillow's precompute_coeffs() for one output: the taps it reads, [*xmin, *xmin + *n). */
static void pillow_bounds(uint32_t in_size, float in0, double scale, double support, uint32_t i, int *xmin, int *n)
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
	return resize_span_filter(RESIZE_BILINEAR, in_size, x, w, out_size, first, end);
}

int resize_span_filter(enum resize_filter filter, uint32_t in_size, double x, double w, uint32_t out_size,
		       uint32_t *first, uint32_t *end)
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
	if (filter == RESIZE_NEAREST) {
		/* Pillow's ImagingScaleAffine reads within the window: all of it, so
		 * that the window still starts inside what is passed */
		*first = (uint32_t)floor(in0);
		*end = (uint32_t)fmin(ceil(in1), in_size);
		return 0;
	}
	support = (scale < 1.0 ? 1.0 : scale) * filter_support(filter);
	/* The bounds only move right as the output index grows. */
	pillow_bounds(in_size, in0, scale, support, 0, &lo, &n);
	pillow_bounds(in_size, in0, scale, support, out_size - 1, &hi, &n);
	*first = (uint32_t)lo;
	*end = (uint32_t)(hi + n);
	return 0;
}

/*
 * n weights summing to 1 as integers summing to exactly ONE, by rounding
 * their running sums: so each is within 1 of its exact value and a flat
 * image stays exactly flat. Non-negative weights (BILINEAR) stay
 * non-negative, and no sum of 8-bit values reaches 256 * ONE; BICUBIC's
 * negative lobes can over- and undershoot, which the kernels clamp.
 */
static void quantise(const double *w, int n, int16_t *k)
{
	double cum = 0.0;
	int32_t prev = 0;

	for (int t = 0; t < n; t++) {
		int32_t next;

		cum += w[t];
		next = t == n - 1 ? ONE : (int32_t)floor(cum * ONE + 0.5);
		k[t] = (int16_t)(next - prev);
		prev = next;
	}
}

static int axis_setup(struct axis *a, enum resize_filter filter, uint32_t in_size, double x, double w,
		      uint32_t out_size)
{
	float in0 = (float)x, in1 = (float)(x + w);
	double scale, filterscale, support;
	uint32_t taps = 1, pairs;
	int r;

	if (a->valid && a->filter == filter && a->in_size == in_size && a->out_size == out_size && a->in0 == in0 &&
	    a->in1 == in1)
		return 0;
	a->valid = false;

	scale = (double)(in1 - in0) / out_size;
	filterscale = scale < 1.0 ? 1.0 : scale;
	support = filterscale * filter_support(filter);

	r = grow((void **)&a->start, &a->start_cap, out_size, sizeof(*a->start));
	if (r >= 0)
		r = grow((void **)&a->off, &a->off_cap, out_size, sizeof(*a->off));
	if (r < 0)
		return r;

	/* The padded tap count is the largest any output needs, made even for the SIMD kernels. */
	for (uint32_t i = 0; i < out_size; i++) {
		int xmin, n;

		pillow_bounds(in_size, in0, scale, support, i, &xmin, &n);
		a->start[i] = (uint32_t)xmin;
		if ((uint32_t)n > taps)
			taps = (uint32_t)n;
	}
	if (taps % 2 && taps < in_size)
		taps++;
	if (a->quad && taps % 4 && taps + 2 <= in_size)
		taps += 2;
	pairs = (taps + 1) / 2;

	r = grow((void **)&a->tmp, &a->tmp_cap, taps, sizeof(*a->tmp));
	if (r >= 0)
		r = grow((void **)&a->coef, &a->coef_cap, (size_t)out_size * taps, sizeof(*a->coef));
	if (r >= 0)
		r = grow((void **)&a->pair, &a->pair_cap, (size_t)out_size * pairs, sizeof(*a->pair));
	if (r >= 0 && a->quad)
		r = grow((void **)&a->coef4, &a->coef4_cap, (size_t)out_size * taps * 4, sizeof(*a->coef4));
	if (r < 0)
		return r;

	a->lo = UINT32_MAX;
	a->hi = 0;
	for (uint32_t i = 0; i < out_size; i++) {
		double center = in0 + (i + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale, *wt = a->tmp;
		int16_t *k = a->coef + (size_t)i * taps;
		uint32_t s = a->start[i];

		/* Near the far edge, start earlier rather than read past it; taps <= in_size. */
		if (s + taps > in_size)
			s = in_size - taps;
		/*
		 * Pillow's weights over its taps [xmin, xmin + n). Its bounds
		 * are where the triangle ends (a pixel outside is at least
		 * `support` from the centre), so the padding taps get 0.
		 */
		for (uint32_t t = 0; t < taps; t++) {
			double d = ((double)(s + t) - center + 0.5) * ss;

			wt[t] = filter == RESIZE_BICUBIC ? bicubic(d) : triangle(d);
			ww += wt[t];
		}
		if (ww == 0.0) {
			/* cannot happen with support >= 1; keep the sum anyway */
			wt[0] = 1.0;
			ww = 1.0;
		}
		ww = 1.0 / ww;
		for (uint32_t t = 0; t < taps; t++)
			wt[t] *= ww;
		quantise(wt, (int)taps, k);

		a->start[i] = s;
		if (s < a->lo)
			a->lo = s;
		if (s + taps > a->hi)
			a->hi = s + taps;
		for (uint32_t j = 0; j < pairs; j++) {
			uint16_t k0 = (uint16_t)k[2 * j], k1 = 2 * j + 1 < taps ? (uint16_t)k[2 * j + 1] : 0;

			a->pair[(size_t)i * pairs + j] = (int32_t)((uint32_t)k0 | (uint32_t)k1 << 16);
		}
		if (a->quad)
			for (uint32_t t = 0; t < taps * 4; t++)
				a->coef4[(size_t)i * taps * 4 + t] = k[t / 4];
	}

	for (uint32_t i = 0; i < out_size; i++)
		a->off[i] = (a->start[i] - a->lo) * 4;
	a->identity = in0 == floorf(in0) && in1 - in0 == (float)out_size;
	a->taps = taps;
	a->pairs = pairs;
	a->in_size = in_size;
	a->out_size = out_size;
	a->in0 = in0;
	a->in1 = in1;
	a->filter = filter;
	a->valid = true;
	return 0;
}

/*
 * The 8-bit result of a fixed-point sum, rounding bias included, clamped
 * (BICUBIC's negative lobes; the SIMD kernels' saturating packs do the same).
 */
static inline uint8_t descale(int32_t acc)
{
	int32_t v = acc >> PRECISION_BITS;

	return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* ---- portable kernels (also the SIMD ones' fallback for odd tap counts and tiny rows) ---- */

static void hpass_scalar(const uint8_t *src, size_t src_stride, uint32_t rows, uint8_t *dst, size_t dst_stride,
			 const struct axis *a, bool flip)
{
	uint32_t n = a->out_size, taps = a->taps;
	const int32_t bias = ROUND_BIAS;

	for (uint32_t y = 0; y < rows; y++) {
		const uint8_t *restrict s = src + y * src_stride;
		uint8_t *restrict d = dst + y * dst_stride;

		for (uint32_t o = 0; o < n; o++) {
			uint32_t i = flip ? n - 1 - o : o;
			const uint8_t *restrict p = s + a->off[i];
			int32_t acc[16] = {bias, bias, bias, bias};

			if (!a->quad || taps % 4) {
				/* the SIMD kernels' fallback for odd tap counts (sources narrower than the filter) */
				const int16_t *restrict k = a->coef + (size_t)i * taps;

				for (uint32_t t = 0; t < taps; t++)
					for (unsigned c = 0; c < 4; c++)
						acc[c] += p[t * 4 + c] * k[t];
			} else {
				/* four pixels (16 bytes) a step: fixed-length loops that compilers vectorise */
				const int32_t *restrict k = a->coef4 + (size_t)i * taps * 4;

				for (uint32_t b = 0; b < taps / 4; b++, p += 16, k += 16)
					for (unsigned c = 0; c < 16; c++)
						acc[c] += p[c] * k[c];
			}
			for (unsigned c = 0; c < 3; c++)
				d[o * 3 + c] = descale(acc[c] + acc[c + 4] + acc[c + 8] + acc[c + 12]);
		}
	}
}

/* One output row of row_bytes bytes, from `taps` source rows at src weighted by k. */
static void vrow_scalar(const uint8_t *restrict src, size_t src_stride, uint32_t row_bytes, uint8_t *restrict d,
			const int16_t *restrict k, uint32_t taps)
{
	const int32_t bias = ROUND_BIAS;
	uint32_t x = 0;

	/* fixed-length blocks that compilers vectorise */
	for (; x + VBLOCK <= row_bytes; x += VBLOCK) {
		int32_t acc[VBLOCK];

		for (unsigned j = 0; j < VBLOCK; j++)
			acc[j] = bias;
		for (uint32_t t = 0; t < taps; t++) {
			const uint8_t *restrict row = src + t * src_stride + x;
			int32_t kt = k[t];

			for (unsigned j = 0; j < VBLOCK; j++)
				acc[j] += row[j] * kt;
		}
		uint8_t *restrict out = d + x; /* not d[x + j]: its wraparound would block vectorising */

		for (unsigned j = 0; j < VBLOCK; j++)
			out[j] = descale(acc[j]);
	}
	for (; x < row_bytes; x++) {
		int32_t acc = bias;

		for (uint32_t t = 0; t < taps; t++)
			acc += src[t * src_stride + x] * k[t];
		d[x] = descale(acc);
	}
}

static void vpass_scalar(const uint8_t *src, size_t src_stride, uint32_t row_bytes, uint8_t *dst, size_t dst_stride,
			 const struct axis *a)
{
	for (uint32_t y = 0; y < a->out_size; y++)
		vrow_scalar(src + (size_t)(a->start[y] - a->lo) * src_stride, src_stride, row_bytes,
			    dst + y * dst_stride, a->coef + (size_t)y * a->taps, a->taps);
}

#if RESIZE_X86

/* ---- SSE2: every x86-64 ---- */

/* Pixels p[0], p[1] (8 bytes in the low half of v) as 16-bit [r0 r1 g0 g1 b0 b1 x0 x1]. */
static inline __m128i pair_sse2(__m128i v)
{
	__m128i w = _mm_unpacklo_epi8(v, _mm_setzero_si128());

	return _mm_unpacklo_epi16(w, _mm_srli_si128(w, 8));
}

static void hpass_sse2(const uint8_t *src, size_t src_stride, uint32_t rows, uint8_t *dst, size_t dst_stride,
		       const struct axis *a, bool flip)
{
	const uint32_t n = a->out_size, pairs = a->pairs;
	const __m128i bias = _mm_set1_epi32(ROUND_BIAS);

	if (a->taps % 2) {
		hpass_scalar(src, src_stride, rows, dst, dst_stride, a, flip);
		return;
	}
	for (uint32_t y = 0; y < rows; y++) {
		const uint8_t *s = src + y * src_stride;
		uint8_t *d = dst + y * dst_stride;

		for (uint32_t o = 0; o < n; o++) {
			uint32_t i = flip ? n - 1 - o : o, j = 0;
			const uint8_t *p = s + a->off[i];
			const int32_t *k = a->pair + (size_t)i * pairs;
			__m128i acc = bias;
			int32_t v;

			for (; j + 2 <= pairs; j += 2) {
				__m128i px = _mm_loadu_si128((const __m128i *)(p + 8 * j));

				acc = _mm_add_epi32(acc, _mm_madd_epi16(pair_sse2(px), _mm_set1_epi32(k[j])));
				acc = _mm_add_epi32(acc, _mm_madd_epi16(pair_sse2(_mm_srli_si128(px, 8)),
									_mm_set1_epi32(k[j + 1])));
			}
			if (j < pairs)
				acc = _mm_add_epi32(
					acc, _mm_madd_epi16(pair_sse2(_mm_loadl_epi64((const __m128i *)(p + 8 * j))),
							    _mm_set1_epi32(k[j])));
			acc = _mm_srai_epi32(acc, PRECISION_BITS);
			acc = _mm_packs_epi32(acc, acc);
			v = _mm_cvtsi128_si32(_mm_packus_epi16(acc, acc));
			/* 4 bytes while the next pixel's write will cover the 4th */
			memcpy(d + (size_t)o * 3, &v, o + 1 < n ? 4 : 3);
		}
	}
}

/* 16 bytes of an output row from `pairs` pairs of source rows at s (each pair's coefficients in k). */
static inline void vblock_sse2(const uint8_t *s, size_t stride, const int32_t *k, uint32_t pairs, __m128i bias,
			       uint8_t *d)
{
	const __m128i zero = _mm_setzero_si128();
	__m128i acc0 = bias, acc1 = acc0, acc2 = acc0, acc3 = acc0;

	for (uint32_t j = 0; j < pairs; j++, s += 2 * stride) {
		__m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + stride));
		__m128i kk = _mm_set1_epi32(k[j]), lo = _mm_unpacklo_epi8(a, b), hi = _mm_unpackhi_epi8(a, b);

		acc0 = _mm_add_epi32(acc0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, zero), kk));
		acc1 = _mm_add_epi32(acc1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, zero), kk));
		acc2 = _mm_add_epi32(acc2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, zero), kk));
		acc3 = _mm_add_epi32(acc3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, zero), kk));
	}
	acc0 = _mm_packs_epi32(_mm_srai_epi32(acc0, PRECISION_BITS), _mm_srai_epi32(acc1, PRECISION_BITS));
	acc2 = _mm_packs_epi32(_mm_srai_epi32(acc2, PRECISION_BITS), _mm_srai_epi32(acc3, PRECISION_BITS));
	_mm_storeu_si128((__m128i *)d, _mm_packus_epi16(acc0, acc2));
}

static void vpass_sse2(const uint8_t *src, size_t src_stride, uint32_t row_bytes, uint8_t *dst, size_t dst_stride,
		       const struct axis *a)
{
	const uint32_t pairs = a->pairs;
	const __m128i bias = _mm_set1_epi32(ROUND_BIAS);

	if (a->taps % 2 || row_bytes < 16) {
		vpass_scalar(src, src_stride, row_bytes, dst, dst_stride, a);
		return;
	}
	for (uint32_t y = 0; y < a->out_size; y++) {
		const uint8_t *s = src + (size_t)(a->start[y] - a->lo) * src_stride;
		const int32_t *k = a->pair + (size_t)y * pairs;
		uint8_t *d = dst + y * dst_stride;

		/* the last block ends at the row's end, overlapping the one before */
		for (uint32_t x = 0; x < row_bytes; x += 16) {
			if (x + 16 > row_bytes)
				x = row_bytes - 16;
			vblock_sse2(s + x, src_stride, k, pairs, bias, d + x);
		}
	}
}

/* ---- AVX2 ---- */

/* Four rows of the horizontal pass: row r at s[r], to d[r]; rows >= `rows` are copies, not written. */
struct rows4 {
	const uint8_t *s[4];
	uint8_t *d[4];
	uint32_t rows;
};

/*
 * Output pixel i of the four rows, its source pixels at byte `off` of each
 * row: 32-bit RGBX sums (with the rounding bias), rows 0 and 1 in *r01
 * (row 0 in the low 128 bits), rows 2 and 3 in *r23.
 */
INLINE_AVX2 void hpixel_avx2(const struct rows4 *b, uint32_t off, const int32_t *k, uint32_t pairs, __m256i bias,
			     __m256i *r01, __m256i *r23)
{
	/* per 128-bit lane: pixels 0, 1 (then 2, 3) as 16-bit [r0 r1 g0 g1 b0 b1 x0 x1] */
	const __m256i m01 = _mm256_setr_epi8(0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1, 0, -1, 4, -1, 1,
					     -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1);
	const __m256i m23 = _mm256_setr_epi8(8, -1, 12, -1, 9, -1, 13, -1, 10, -1, 14, -1, 11, -1, 15, -1, 8, -1, 12,
					     -1, 9, -1, 13, -1, 10, -1, 14, -1, 11, -1, 15, -1);
	const uint8_t *s0 = b->s[0] + off, *s1 = b->s[1] + off, *s2 = b->s[2] + off, *s3 = b->s[3] + off;
	__m256i a01 = bias, a23 = a01, c01 = _mm256_setzero_si256(), c23 = c01;
	uint32_t j = 0;

	_Pragma("GCC unroll 4") for (; j + 2 <= pairs; j += 2)
	{
		__m256i k0 = _mm256_set1_epi32(k[j]), k1 = _mm256_set1_epi32(k[j + 1]);
		__m256i p01 = _mm256_loadu2_m128i((const __m128i *)(s1 + 8 * j), (const __m128i *)(s0 + 8 * j));
		__m256i p23 = _mm256_loadu2_m128i((const __m128i *)(s3 + 8 * j), (const __m128i *)(s2 + 8 * j));

		a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(_mm256_shuffle_epi8(p01, m01), k0));
		c01 = _mm256_add_epi32(c01, _mm256_madd_epi16(_mm256_shuffle_epi8(p01, m23), k1));
		a23 = _mm256_add_epi32(a23, _mm256_madd_epi16(_mm256_shuffle_epi8(p23, m01), k0));
		c23 = _mm256_add_epi32(c23, _mm256_madd_epi16(_mm256_shuffle_epi8(p23, m23), k1));
	}
	if (j < pairs) {
		__m256i k0 = _mm256_set1_epi32(k[j]);
		__m256i p01 =
			_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(s0 + 8 * j))),
						_mm_loadl_epi64((const __m128i *)(s1 + 8 * j)), 1);
		__m256i p23 =
			_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(s2 + 8 * j))),
						_mm_loadl_epi64((const __m128i *)(s3 + 8 * j)), 1);

		a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(_mm256_shuffle_epi8(p01, m01), k0));
		a23 = _mm256_add_epi32(a23, _mm256_madd_epi16(_mm256_shuffle_epi8(p23, m01), k0));
	}
	*r01 = _mm256_add_epi32(a01, c01);
	*r23 = _mm256_add_epi32(a23, c23);
}

/* 16-bit RGBX of source outputs i, i + 1, per 128-bit lane (rows 0, 1 and rows 2, 3). */
INLINE_AVX2 void hpixels2_avx2(const struct rows4 *b, const struct axis *a, uint32_t i, uint32_t pairs, __m256i bias,
			       __m256i *w01, __m256i *w23)
{
	__m256i x01, x23, y01, y23;

	hpixel_avx2(b, a->off[i], a->pair + (size_t)i * pairs, pairs, bias, &x01, &x23);
	hpixel_avx2(b, a->off[i + 1], a->pair + (size_t)(i + 1) * pairs, pairs, bias, &y01, &y23);
	x01 = _mm256_srai_epi32(x01, PRECISION_BITS);
	y01 = _mm256_srai_epi32(y01, PRECISION_BITS);
	x23 = _mm256_srai_epi32(x23, PRECISION_BITS);
	y23 = _mm256_srai_epi32(y23, PRECISION_BITS);
	*w01 = _mm256_packs_epi32(x01, y01);
	*w23 = _mm256_packs_epi32(x23, y23);
}

/* One 3-byte pixel from the low 32-bit lane of a vector of bytes. */
static inline void store_rgb(uint8_t *d, __m128i v)
{
	int32_t x = _mm_cvtsi128_si32(v);

	memcpy(d, &x, 3);
}

/* The low 12 bytes of v. */
static inline void store12(uint8_t *d, __m128i v)
{
	int32_t x = _mm_cvtsi128_si32(_mm_srli_si128(v, 8));

	_mm_storel_epi64((__m128i *)d, v);
	memcpy(d + 8, &x, 4);
}

/* Four rows of the horizontal pass, with `pairs` fixed for inlining. */
INLINE_AVX2 void hrows_avx2(const struct rows4 *b, const struct axis *a, bool flip, uint32_t pairs)
{
	/* 4 RGBX pixels to 12 bytes RGB (then 4 zero bytes) per 128-bit lane, in order or mirrored */
	const __m256i rgb = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0, 1, 2, 4, 5, 6,
					     8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
	const __m256i rgb_flip = _mm256_setr_epi8(12, 13, 14, 8, 9, 10, 4, 5, 6, 0, 1, 2, -1, -1, -1, -1, 12, 13, 14, 8,
						  9, 10, 4, 5, 6, 0, 1, 2, -1, -1, -1, -1);
	const __m256i pack = flip ? rgb_flip : rgb, bias = _mm256_set1_epi32(ROUND_BIAS);
	const uint32_t n = a->out_size;
	uint32_t o = 0;

	/* in output order, so that each 16-byte store's last 4 bytes are overwritten by the next */
	for (; o + 4 <= n; o += 4) {
		uint32_t i = flip ? n - 4 - o : o; /* source outputs i .. i + 3 */
		__m256i w01, w23, v01, v23, b01, b23;
		__m128i out[4];

		hpixels2_avx2(b, a, i, pairs, bias, &w01, &w23);
		hpixels2_avx2(b, a, i + 2, pairs, bias, &v01, &v23);
		b01 = _mm256_shuffle_epi8(_mm256_packus_epi16(w01, v01), pack);
		b23 = _mm256_shuffle_epi8(_mm256_packus_epi16(w23, v23), pack);
		out[0] = _mm256_castsi256_si128(b01);
		out[1] = _mm256_extracti128_si256(b01, 1);
		out[2] = _mm256_castsi256_si128(b23);
		out[3] = _mm256_extracti128_si256(b23, 1);
		if ((o + 4) * 3 + 4 <= n * 3) {
			for (uint32_t r = 0; r < b->rows; r++)
				_mm_storeu_si128((__m128i *)(b->d[r] + (size_t)o * 3), out[r]);
		} else {
			for (uint32_t r = 0; r < b->rows; r++)
				store12(b->d[r] + (size_t)o * 3, out[r]);
		}
	}
	for (; o < n; o++) {
		uint32_t i = flip ? n - 1 - o : o;
		__m256i x01, x23;

		hpixel_avx2(b, a->off[i], a->pair + (size_t)i * pairs, pairs, bias, &x01, &x23);
		x01 = _mm256_srai_epi32(x01, PRECISION_BITS);
		x23 = _mm256_srai_epi32(x23, PRECISION_BITS);
		x01 = _mm256_packus_epi16(_mm256_packs_epi32(x01, x01), x01);
		x23 = _mm256_packus_epi16(_mm256_packs_epi32(x23, x23), x23);
		store_rgb(b->d[0] + (size_t)o * 3, _mm256_castsi256_si128(x01));
		if (b->rows > 1)
			store_rgb(b->d[1] + (size_t)o * 3, _mm256_extracti128_si256(x01, 1));
		if (b->rows > 2)
			store_rgb(b->d[2] + (size_t)o * 3, _mm256_castsi256_si128(x23));
		if (b->rows > 3)
			store_rgb(b->d[3] + (size_t)o * 3, _mm256_extracti128_si256(x23, 1));
	}
}

TARGET_AVX2
static void hpass_avx2(const uint8_t *src, size_t src_stride, uint32_t rows, uint8_t *dst, size_t dst_stride,
		       const struct axis *a, bool flip)
{
	if (a->taps % 2) {
		hpass_scalar(src, src_stride, rows, dst, dst_stride, a, flip);
		return;
	}
	for (uint32_t y = 0; y < rows; y += 4) {
		struct rows4 b;

		b.rows = rows - y < 4 ? rows - y : 4;
		for (uint32_t r = 0; r < 4; r++) {
			uint32_t row = y + (r < b.rows ? r : b.rows - 1);

			b.s[r] = src + row * src_stride;
			b.d[r] = dst + row * dst_stride;
		}
		/* constant tap counts for the common cases let the compiler unroll completely */
		switch (a->pairs) {
		case 1: hrows_avx2(&b, a, flip, 1); break;
		case 2: hrows_avx2(&b, a, flip, 2); break;
		case 3: hrows_avx2(&b, a, flip, 3); break;
		case 4: hrows_avx2(&b, a, flip, 4); break;
		default: hrows_avx2(&b, a, flip, a->pairs); break;
		}
	}
}

INLINE_AVX2 void vblock_avx2(const uint8_t *s, size_t stride, const int32_t *k, uint32_t pairs, __m256i bias,
			     uint8_t *d)
{
	const __m256i zero = _mm256_setzero_si256();
	__m256i acc0 = bias, acc1 = acc0, acc2 = acc0, acc3 = acc0;

	_Pragma("GCC unroll 4") for (uint32_t j = 0; j < pairs; j++, s += 2 * stride)
	{
		__m256i a = _mm256_loadu_si256((const __m256i *)s),
			b = _mm256_loadu_si256((const __m256i *)(s + stride));
		__m256i kk = _mm256_set1_epi32(k[j]), lo = _mm256_unpacklo_epi8(a, b), hi = _mm256_unpackhi_epi8(a, b);

		/* per 128-bit lane: bytes 0-3, 4-7, 8-11, 12-15 */
		acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), kk));
		acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), kk));
		acc2 = _mm256_add_epi32(acc2, _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), kk));
		acc3 = _mm256_add_epi32(acc3, _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), kk));
	}
	acc0 = _mm256_packs_epi32(_mm256_srai_epi32(acc0, PRECISION_BITS), _mm256_srai_epi32(acc1, PRECISION_BITS));
	acc2 = _mm256_packs_epi32(_mm256_srai_epi32(acc2, PRECISION_BITS), _mm256_srai_epi32(acc3, PRECISION_BITS));
	/* all within lanes, so back in order */
	_mm256_storeu_si256((__m256i *)d, _mm256_packus_epi16(acc0, acc2));
}

INLINE_AVX2 void vrow_avx2(const uint8_t *s, size_t stride, uint32_t row_bytes, const int32_t *k, uint32_t pairs,
			   const struct axis *a, uint8_t *d)
{
	const __m256i bias = _mm256_set1_epi32(ROUND_BIAS);

	for (uint32_t x = 0; x < row_bytes; x += 32) {
		if (x + 32 > row_bytes)
			x = row_bytes - 32;
		vblock_avx2(s + x, stride, k, pairs, bias, d + x);
	}
}

TARGET_AVX2
static void vpass_avx2(const uint8_t *src, size_t src_stride, uint32_t row_bytes, uint8_t *dst, size_t dst_stride,
		       const struct axis *a)
{
	const uint32_t pairs = a->pairs;

	if (a->taps % 2 || row_bytes < 32) {
		vpass_sse2(src, src_stride, row_bytes, dst, dst_stride, a);
		return;
	}
	for (uint32_t y = 0; y < a->out_size; y++) {
		const uint8_t *s = src + (size_t)(a->start[y] - a->lo) * src_stride;
		const int32_t *k = a->pair + (size_t)y * pairs;
		uint8_t *d = dst + y * dst_stride;

		switch (pairs) {
		case 1: vrow_avx2(s, src_stride, row_bytes, k, 1, a, d); break;
		case 2: vrow_avx2(s, src_stride, row_bytes, k, 2, a, d); break;
		case 3: vrow_avx2(s, src_stride, row_bytes, k, 3, a, d); break;
		default: vrow_avx2(s, src_stride, row_bytes, k, pairs, a, d); break;
		}
	}
}

/* ---- AVX-512BW: four rows a vector in the horizontal pass, 64 bytes in the vertical ---- */

/* Four 16-byte pieces, at p + off of each row, as one vector (row r in 128-bit lane r). */
INLINE_AVX512 __m512i load4x16(const struct rows4 *b, size_t off)
{
	__m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(b->s[0] + off)));

	v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(b->s[1] + off)), 1);
	v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(b->s[2] + off)), 2);
	return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(b->s[3] + off)), 3);
}

INLINE_AVX512 __m512i load4x8(const struct rows4 *b, size_t off)
{
	__m512i v = _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(b->s[0] + off)));

	v = _mm512_inserti32x4(v, _mm_loadl_epi64((const __m128i *)(b->s[1] + off)), 1);
	v = _mm512_inserti32x4(v, _mm_loadl_epi64((const __m128i *)(b->s[2] + off)), 2);
	return _mm512_inserti32x4(v, _mm_loadl_epi64((const __m128i *)(b->s[3] + off)), 3);
}

/* As hpixel_avx2, the four rows' sums, shifted down, in one vector (row r in 128-bit lane r). */
INLINE_AVX512 __m512i hpixel_avx512(const struct rows4 *b, uint32_t off, const int32_t *k, uint32_t pairs, __m512i bias)
{
	const __m512i m01 =
		_mm512_broadcast_i32x4(_mm_setr_epi8(0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1));
	const __m512i m23 =
		_mm512_broadcast_i32x4(_mm_setr_epi8(8, -1, 12, -1, 9, -1, 13, -1, 10, -1, 14, -1, 11, -1, 15, -1));
	__m512i acc = bias, acc2 = _mm512_setzero_si512();
	uint32_t j = 0;

	_Pragma("GCC unroll 4") for (; j + 2 <= pairs; j += 2)
	{
		__m512i px = load4x16(b, off + 8 * j);

		acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_shuffle_epi8(px, m01), _mm512_set1_epi32(k[j])));
		acc2 = _mm512_add_epi32(acc2,
					_mm512_madd_epi16(_mm512_shuffle_epi8(px, m23), _mm512_set1_epi32(k[j + 1])));
	}
	if (j < pairs)
		acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_shuffle_epi8(load4x8(b, off + 8 * j), m01),
							      _mm512_set1_epi32(k[j])));
	return _mm512_srai_epi32(_mm512_add_epi32(acc, acc2), PRECISION_BITS);
}

INLINE_AVX512 void hrows_avx512(const struct rows4 *b, const struct axis *a, bool flip, uint32_t pairs)
{
	const __m512i rgb =
		_mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
	const __m512i rgb_flip =
		_mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 8, 9, 10, 4, 5, 6, 0, 1, 2, -1, -1, -1, -1));
	const __m512i pack = flip ? rgb_flip : rgb, bias = _mm512_set1_epi32(ROUND_BIAS);
	const uint32_t n = a->out_size;
	uint32_t o = 0;

	for (; o + 4 <= n; o += 4) {
		uint32_t i = flip ? n - 4 - o : o;
		const int32_t *k = a->pair + (size_t)i * pairs;
		__m512i x0 = hpixel_avx512(b, a->off[i], k, pairs, bias);
		__m512i x1 = hpixel_avx512(b, a->off[i + 1], k + pairs, pairs, bias);
		__m512i x2 = hpixel_avx512(b, a->off[i + 2], k + 2 * pairs, pairs, bias);
		__m512i x3 = hpixel_avx512(b, a->off[i + 3], k + 3 * pairs, pairs, bias);
		__m512i v = _mm512_packus_epi16(_mm512_packs_epi32(x0, x1), _mm512_packs_epi32(x2, x3));
		__m128i out[4];

		v = _mm512_shuffle_epi8(v, pack);
		out[0] = _mm512_castsi512_si128(v);
		out[1] = _mm512_extracti32x4_epi32(v, 1);
		out[2] = _mm512_extracti32x4_epi32(v, 2);
		out[3] = _mm512_extracti32x4_epi32(v, 3);
		if ((o + 4) * 3 + 4 <= n * 3) {
			for (uint32_t r = 0; r < b->rows; r++)
				_mm_storeu_si128((__m128i *)(b->d[r] + (size_t)o * 3), out[r]);
		} else {
			for (uint32_t r = 0; r < b->rows; r++)
				store12(b->d[r] + (size_t)o * 3, out[r]);
		}
	}
	for (; o < n; o++) {
		uint32_t i = flip ? n - 1 - o : o;
		__m512i x = hpixel_avx512(b, a->off[i], a->pair + (size_t)i * pairs, pairs, bias);

		x = _mm512_packus_epi16(_mm512_packs_epi32(x, x), x);
		store_rgb(b->d[0] + (size_t)o * 3, _mm512_castsi512_si128(x));
		if (b->rows > 1)
			store_rgb(b->d[1] + (size_t)o * 3, _mm512_extracti32x4_epi32(x, 1));
		if (b->rows > 2)
			store_rgb(b->d[2] + (size_t)o * 3, _mm512_extracti32x4_epi32(x, 2));
		if (b->rows > 3)
			store_rgb(b->d[3] + (size_t)o * 3, _mm512_extracti32x4_epi32(x, 3));
	}
}

TARGET_AVX512
static void hpass_avx512(const uint8_t *src, size_t src_stride, uint32_t rows, uint8_t *dst, size_t dst_stride,
			 const struct axis *a, bool flip)
{
	if (a->taps % 2) {
		hpass_scalar(src, src_stride, rows, dst, dst_stride, a, flip);
		return;
	}
	for (uint32_t y = 0; y < rows; y += 4) {
		struct rows4 b;

		b.rows = rows - y < 4 ? rows - y : 4;
		for (uint32_t r = 0; r < 4; r++) {
			uint32_t row = y + (r < b.rows ? r : b.rows - 1);

			b.s[r] = src + row * src_stride;
			b.d[r] = dst + row * dst_stride;
		}
		switch (a->pairs) {
		case 1: hrows_avx512(&b, a, flip, 1); break;
		case 2: hrows_avx512(&b, a, flip, 2); break;
		case 3: hrows_avx512(&b, a, flip, 3); break;
		case 4: hrows_avx512(&b, a, flip, 4); break;
		default: hrows_avx512(&b, a, flip, a->pairs); break;
		}
	}
}


INLINE_AVX512 void vblock_avx512(const uint8_t *s, size_t stride, const int32_t *k, uint32_t pairs, __m512i bias,
				 uint8_t *d)
{
	const __m512i zero = _mm512_setzero_si512();
	__m512i acc0 = bias, acc1 = acc0, acc2 = acc0, acc3 = acc0;

	_Pragma("GCC unroll 4") for (uint32_t j = 0; j < pairs; j++, s += 2 * stride)
	{
		__m512i a = _mm512_loadu_si512((const void *)s), b = _mm512_loadu_si512((const void *)(s + stride));
		__m512i kk = _mm512_set1_epi32(k[j]), lo = _mm512_unpacklo_epi8(a, b), hi = _mm512_unpackhi_epi8(a, b);

		acc0 = _mm512_add_epi32(acc0, _mm512_madd_epi16(_mm512_unpacklo_epi8(lo, zero), kk));
		acc1 = _mm512_add_epi32(acc1, _mm512_madd_epi16(_mm512_unpackhi_epi8(lo, zero), kk));
		acc2 = _mm512_add_epi32(acc2, _mm512_madd_epi16(_mm512_unpacklo_epi8(hi, zero), kk));
		acc3 = _mm512_add_epi32(acc3, _mm512_madd_epi16(_mm512_unpackhi_epi8(hi, zero), kk));
	}
	acc0 = _mm512_packs_epi32(_mm512_srai_epi32(acc0, PRECISION_BITS), _mm512_srai_epi32(acc1, PRECISION_BITS));
	acc2 = _mm512_packs_epi32(_mm512_srai_epi32(acc2, PRECISION_BITS), _mm512_srai_epi32(acc3, PRECISION_BITS));
	_mm512_storeu_si512((void *)d, _mm512_packus_epi16(acc0, acc2));
}

INLINE_AVX512 void vrow_avx512(const uint8_t *s, size_t stride, uint32_t row_bytes, const int32_t *k, uint32_t pairs,
			       const struct axis *a, uint8_t *d)
{
	const __m512i bias = _mm512_set1_epi32(ROUND_BIAS);

	for (uint32_t x = 0; x < row_bytes; x += 64) {
		if (x + 64 > row_bytes)
			x = row_bytes - 64;
		vblock_avx512(s + x, stride, k, pairs, bias, d + x);
	}
}

TARGET_AVX512
static void vpass_avx512(const uint8_t *src, size_t src_stride, uint32_t row_bytes, uint8_t *dst, size_t dst_stride,
			 const struct axis *a)
{
	const uint32_t pairs = a->pairs;

	if (a->taps % 2 || row_bytes < 64) {
		vpass_avx2(src, src_stride, row_bytes, dst, dst_stride, a);
		return;
	}
	for (uint32_t y = 0; y < a->out_size; y++) {
		const uint8_t *s = src + (size_t)(a->start[y] - a->lo) * src_stride;
		const int32_t *k = a->pair + (size_t)y * pairs;
		uint8_t *d = dst + y * dst_stride;

		switch (pairs) {
		case 1: vrow_avx512(s, src_stride, row_bytes, k, 1, a, d); break;
		case 2: vrow_avx512(s, src_stride, row_bytes, k, 2, a, d); break;
		case 3: vrow_avx512(s, src_stride, row_bytes, k, 3, a, d); break;
		default: vrow_avx512(s, src_stride, row_bytes, k, pairs, a, d); break;
		}
	}
}

#endif /* RESIZE_X86 */

/* ---- dispatch ---- */

static enum resize_isa forced_isa = RESIZE_ISA_AUTO;

static bool isa_runs(enum resize_isa isa)
{
	switch (isa) {
	case RESIZE_ISA_SCALAR: return true;
#if RESIZE_X86
	case RESIZE_ISA_SSE2: return true;
	case RESIZE_ISA_AVX2: __builtin_cpu_init(); return __builtin_cpu_supports("avx2");
	case RESIZE_ISA_AVX512:
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
		       __builtin_cpu_supports("avx512bw");
#endif
	default: return false;
	}
}

int resize_force_isa(enum resize_isa isa)
{
	if (isa != RESIZE_ISA_AUTO && !isa_runs(isa))
		return -ENOTSUP;
	forced_isa = isa;
	return 0;
}

enum resize_isa resize_default_isa(void)
{
	static const struct {
		const char *name;
		enum resize_isa isa;
	} names[] = {
		{"scalar", RESIZE_ISA_SCALAR},
		{"sse2", RESIZE_ISA_SSE2},
		{"avx2", RESIZE_ISA_AVX2},
		{"avx512", RESIZE_ISA_AVX512},
	};
	const char *env;

	if (forced_isa != RESIZE_ISA_AUTO)
		return forced_isa;
	env = getenv("STOKER_RESIZE_ISA");
	if (env)
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (!strcmp(env, names[i].name) && isa_runs(names[i].isa))
				return names[i].isa;
				/*
	 * AVX-512 where the CPU runs it at full clock: Skylake-SP and Cascade
	 * Lake lower the whole core's clock for 512-bit work (the decoder's
	 * too); Ice Lake and later and Zen 4 do not, and they are the ones with
	 * AVX512_VBMI2, so that is the marker. Elsewhere only where asked for.
	 */
#if RESIZE_X86
	if (isa_runs(RESIZE_ISA_AVX512) && __builtin_cpu_supports("avx512vbmi2"))
		return RESIZE_ISA_AVX512;
#endif
	if (isa_runs(RESIZE_ISA_AVX2))
		return RESIZE_ISA_AVX2;
	if (isa_runs(RESIZE_ISA_SSE2))
		return RESIZE_ISA_SSE2;
	return RESIZE_ISA_SCALAR;
}

int resizer_new(struct resizer **out)
{
	struct resizer *r;

	if (!out)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->isa = resize_default_isa();
	switch (r->isa) {
#if RESIZE_X86
	case RESIZE_ISA_SSE2:
		r->hpass = hpass_sse2;
		r->vpass = vpass_sse2;
		break;
	case RESIZE_ISA_AVX2:
		r->hpass = hpass_avx2;
		r->vpass = vpass_avx2;
		break;
	case RESIZE_ISA_AVX512:
		r->hpass = hpass_avx512;
		r->vpass = vpass_avx512;
		break;
#endif
	default:
		r->isa = RESIZE_ISA_SCALAR;
		r->hpass = hpass_scalar;
		r->vpass = vpass_scalar;
		r->h.quad = true;
		break;
	}
	*out = r;
	return 0;
}

enum resize_isa resizer_isa(const struct resizer *r)
{
	return r ? r->isa : RESIZE_ISA_AUTO;
}

static void axis_done(struct axis *a)
{
	free(a->start);
	free(a->off);
	free(a->coef);
	free(a->pair);
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
	free(r->wide);
	free(r->ntab);
	free(r);
}

bool resize_vertical_first(uint32_t src_w, uint32_t src_h, uint32_t dst_w, uint32_t dst_h)
{
	return src_h > dst_h && (int64_t)src_h - dst_h > ((int64_t)src_w - dst_w) * 2;
}

static int setup(struct resizer *r, uint32_t src_w, uint32_t src_h, double x, double y, double w, double h,
		 uint32_t dst_w, uint32_t dst_h, size_t dst_stride)
{
	int ret;

	if (!r)
		return -EINVAL;
	ret = check_window(src_w, x, w, dst_w);
	if (ret >= 0)
		ret = check_window(src_h, y, h, dst_h);
	if (ret < 0)
		return ret;
	if (dst_stride < (size_t)dst_w * 3)
		return -EINVAL;
	if (r->filter == RESIZE_NEAREST)
		return 0;
	ret = axis_setup(&r->h, r->filter, src_w, x, w, dst_w);
	if (ret >= 0)
		ret = axis_setup(&r->v, r->filter, src_h, y, h, dst_h);
	return ret;
}

void resizer_set_filter(struct resizer *r, enum resize_filter filter)
{
	if (r && (filter == RESIZE_BILINEAR || filter == RESIZE_BICUBIC || filter == RESIZE_NEAREST))
		r->filter = filter;
}

/*
 * Pillow's NEAREST resize (ImagingScaleAffine, which Image.resize calls
 * for it): output pixel i is source pixel (int)(x0 + scale / 2 + i *
 * scale), the position accumulated in double precision as Pillow does,
 * on its single-precision box. `bpp` bytes a source pixel (3 or 4).
 */
static int resize_nearest(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
			  unsigned bpp, double x, double y, double w, double h, uint8_t *dst, uint32_t dst_w,
			  uint32_t dst_h, size_t dst_stride, bool flip)
{
	float x0 = (float)x, x1 = (float)(x + w), y0 = (float)y, y1 = (float)(y + h);
	double a0 = (double)(x1 - x0) / dst_w, a4 = (double)(y1 - y0) / dst_h;
	double xo = x0 + a0 * 0.5, yo = y0 + a4 * 0.5;
	int ret;

	ret = grow((void **)&r->ntab, &r->ntab_cap, dst_w, sizeof(*r->ntab));
	if (ret < 0)
		return ret;
	for (uint32_t i = 0; i < dst_w; i++, xo += a0) {
		int64_t xin = xo < 0.0 ? 0 : (int64_t)xo;

		r->ntab[flip ? dst_w - 1 - i : i] = (uint32_t)(xin < src_w ? xin : src_w - 1) * bpp;
	}
	for (uint32_t j = 0; j < dst_h; j++, yo += a4) {
		int64_t yin = yo < 0.0 ? 0 : (int64_t)yo;
		const uint8_t *row = src + (size_t)(yin < src_h ? yin : src_h - 1) * src_stride;
		uint8_t *d = dst + (size_t)j * dst_stride;

		for (uint32_t i = 0; i < dst_w; i++)
			memcpy(d + (size_t)i * 3, row + r->ntab[i], 3);
	}
	return 0;
}

/* Both passes, axes set up; `src` is the source's pixel (h.lo, v.lo), 4 bytes each. */
static int resample(struct resizer *r, const uint8_t *src, size_t src_stride, uint8_t *dst, size_t dst_stride,
		    bool flip, bool vertical_first)
{
	const struct axis *h = &r->h, *v = &r->v;
	int ret;

	if (v->identity) {
		/* output row i is source row in0 + i; the horizontal pass always runs, to repack */
		r->hpass(src + ((size_t)v->in0 - v->lo) * src_stride, src_stride, v->out_size, dst, dst_stride, h,
			 flip);
		return 0;
	}
	/* An identity horizontal pass only repacks: do it first, on fewer bytes. */
	if (vertical_first && !h->identity) {
		size_t row = (size_t)(h->hi - h->lo) * 4;

		ret = grow((void **)&r->scratch, &r->scratch_cap, row * v->out_size, 1);
		if (ret < 0)
			return ret;
		r->vpass(src, src_stride, (uint32_t)row, r->scratch, row, v);
		r->hpass(r->scratch, row, v->out_size, dst, dst_stride, h, flip);
	} else {
		size_t row = (size_t)h->out_size * 3;

		ret = grow((void **)&r->scratch, &r->scratch_cap, row * (v->hi - v->lo), 1);
		if (ret < 0)
			return ret;
		r->hpass(src, src_stride, v->hi - v->lo, r->scratch, row, h, flip);
		r->vpass(r->scratch, row, (uint32_t)row, dst, dst_stride, v);
	}
	return 0;
}

int resize_rgb(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride, double x,
	       double y, double w, double h, uint8_t *dst, uint32_t dst_w, uint32_t dst_h, size_t dst_stride, bool flip)
{
	return resize_rgb_ordered(r, src, src_w, src_h, src_stride, x, y, w, h, dst, dst_w, dst_h, dst_stride, flip,
				  resize_vertical_first(src_w, src_h, dst_w, dst_h));
}

int resize_rgb_ordered(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
		       double x, double y, double w, double h, uint8_t *dst, uint32_t dst_w, uint32_t dst_h,
		       size_t dst_stride, bool flip, bool vertical_first)
{
	uint32_t cols, rows;
	int ret;

	if (!src || !dst)
		return -EINVAL;
	ret = setup(r, src_w, src_h, x, y, w, h, dst_w, dst_h, dst_stride);
	if (ret < 0)
		return ret;
	if (src_stride < (size_t)src_w * 3)
		return -EINVAL;
	if (r->filter == RESIZE_NEAREST)
		return resize_nearest(r, src, src_w, src_h, src_stride, 3, x, y, w, h, dst, dst_w, dst_h, dst_stride,
				      flip);
	/* the part the passes read, widened to 4 bytes a pixel */
	cols = r->h.hi - r->h.lo;
	rows = r->v.hi - r->v.lo;
	ret = grow((void **)&r->wide, &r->wide_cap, (size_t)cols * rows * 4, 1);
	if (ret < 0)
		return ret;
	for (uint32_t i = 0; i < rows; i++) {
		const uint8_t *s = src + (size_t)(r->v.lo + i) * src_stride + (size_t)r->h.lo * 3;
		uint8_t *d = r->wide + (size_t)i * cols * 4;

		for (uint32_t j = 0; j < cols; j++, s += 3, d += 4) {
			memcpy(d, s, 3);
			d[3] = 0;
		}
	}
	return resample(r, r->wide, (size_t)cols * 4, dst, dst_stride, flip, vertical_first);
}

int resize_rgbx(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride, double x,
		double y, double w, double h, uint8_t *dst, uint32_t dst_w, uint32_t dst_h, size_t dst_stride,
		bool flip, bool vertical_first)
{
	int ret;

	if (!src || !dst)
		return -EINVAL;
	ret = setup(r, src_w, src_h, x, y, w, h, dst_w, dst_h, dst_stride);
	if (ret < 0)
		return ret;
	if (src_stride < (size_t)src_w * 4)
		return -EINVAL;
	if (r->filter == RESIZE_NEAREST)
		return resize_nearest(r, src, src_w, src_h, src_stride, 4, x, y, w, h, dst, dst_w, dst_h, dst_stride,
				      flip);
	return resample(r, src + (size_t)r->v.lo * src_stride + (size_t)r->h.lo * 4, src_stride, dst, dst_stride, flip,
			vertical_first);
}
