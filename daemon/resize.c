/* SPDX-License-Identifier: MIT */
/*
 * Pillow's ImagingResample with the BILINEAR filter, for 8-bit pixels: two
 * separable passes through an 8-bit scratch image (horizontal first, unless
 * the caller says vertical), Pillow's triangle weights and tap bounds on
 * its single-precision box, but 14-bit coefficients (Pillow: 22) normalised
 * to sum to exactly 1 << 14 per output, so that they fit the 16 x 16-bit
 * multiply-adds of SSE2 / AVX2 / AVX-512 (pmaddwd), as Pillow-SIMD does.
 * Results are within 1 of Pillow's, nearly always equal.
 *
 * Every kernel does the same integer arithmetic, so the result does not
 * depend on the CPU. Pixels are 4 bytes (RGBX) in, 3 (RGB) out:
 *
 *  - horizontal: for one output pixel, two taps at a time, the pixels'
 *    channels interleaved pairwise into 16-bit lanes [r0 r1 g0 g1 b0 b1 x0 x1]
 *    and multiply-added with (k0, k1): four 32-bit sums RGBX. AVX2 does two
 *    rows at once (one per 128-bit lane, sharing the coefficients), four
 *    output pixels a step, and packs them to 12 bytes of RGB with one shuffle.
 *    The mirror for a flip is in which output the source pixels go to.
 *  - vertical: every byte of a row is a lane; two source rows at a time,
 *    their bytes interleaved into (row a, row b) 16-bit pairs and
 *    multiply-added with (k0, k1). The last block of a row overlaps the
 *    one before it rather than read past the row.
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
	bool valid;

	bool identity;      /* integer offset, scale 1: each output is one input pixel */
	uint32_t taps;      /* per output, padded with zero weights */
	uint32_t pairs;     /* (taps + 1) / 2 */
	uint32_t lo, hi;    /* inputs [lo, hi) are read */
	uint32_t *start;    /* out_size */
	int16_t *coef;      /* out_size * taps, each output's summing to ONE */
	int32_t *pair;      /* out_size * pairs: taps 2j, 2j + 1 as the 16-bit halves (low, high) */
	size_t start_cap, coef_cap, pair_cap;
	double *tmp;        /* one output's float weights */
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
	enum resize_isa isa;
	hpass_fn *hpass;
	vpass_fn *vpass;
	uint8_t *scratch;   /* the intermediate image */
	size_t scratch_cap;
	uint8_t *wide;      /* resize_rgb's source, widened to 4 bytes a pixel */
	size_t wide_cap;
};

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

/*
 * n float weights summing to 1 as 14-bit integers summing to exactly ONE:
 * each rounded, the remainder (at most n / 2) put on the largest, so that
 * a flat image stays flat and no sum of 8-bit values exceeds 255.5 << 14.
 */
static void quantise(const double *w, int n, int16_t *k)
{
	int sum = 0, big = 0;

	for (int t = 0; t < n; t++) {
		k[t] = (int16_t)floor(w[t] * ONE + 0.5);
		sum += k[t];
		if (w[t] > w[big])
			big = t;
	}
	k[big] = (int16_t)(k[big] + ONE - sum);
}

static int axis_setup(struct axis *a, uint32_t in_size, double x, double w, uint32_t out_size)
{
	float in0 = (float)x, in1 = (float)(x + w);
	double scale, filterscale, support;
	uint32_t ksize, taps = 1, pairs;
	int r;

	if (a->valid && a->in_size == in_size && a->out_size == out_size && a->in0 == in0 && a->in1 == in1)
		return 0;
	a->valid = false;

	scale = (double)(in1 - in0) / out_size;
	filterscale = scale < 1.0 ? 1.0 : scale;
	support = filterscale; /* BILINEAR's support is 1 */
	ksize = (uint32_t)ceil(support) * 2 + 1;

	/* The padded tap count is the largest any output needs, made even for the SIMD kernels. */
	for (uint32_t i = 0; i < out_size; i++) {
		int xmin, n;

		pillow_bounds(in_size, in0, scale, support, i, &xmin, &n);
		if ((uint32_t)n > taps)
			taps = (uint32_t)n;
	}
	if (taps % 2 && taps < in_size)
		taps++;
	pairs = (taps + 1) / 2;

	r = grow((void **)&a->start, &a->start_cap, out_size, sizeof(*a->start));
	if (r >= 0)
		r = grow((void **)&a->tmp, &a->tmp_cap, ksize > taps ? ksize : taps, sizeof(*a->tmp));
	if (r >= 0)
		r = grow((void **)&a->coef, &a->coef_cap, (size_t)out_size * taps, sizeof(*a->coef));
	if (r >= 0)
		r = grow((void **)&a->pair, &a->pair_cap, (size_t)out_size * pairs, sizeof(*a->pair));
	if (r < 0)
		return r;

	a->lo = UINT32_MAX;
	a->hi = 0;
	for (uint32_t i = 0; i < out_size; i++) {
		double center = in0 + (i + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
		int16_t *k = a->coef + (size_t)i * taps;
		uint32_t s, shift;
		int xmin, n;

		pillow_bounds(in_size, in0, scale, support, i, &xmin, &n);
		for (int t = 0; t < n; t++) {
			a->tmp[t] = triangle((t + xmin - center + 0.5) * ss);
			ww += a->tmp[t];
		}
		if (ww != 0.0) {
			for (int t = 0; t < n; t++)
				a->tmp[t] /= ww;
		} else {
			/* cannot happen with support >= 1; keep the sum anyway */
			for (int t = 0; t < n; t++)
				a->tmp[t] = t == 0;
		}

		/* Near the far edge, start earlier rather than read past it; taps <= in_size. */
		s = (uint32_t)xmin;
		if (s + taps > in_size)
			s = in_size - taps;
		shift = (uint32_t)xmin - s;
		memset(k, 0, taps * sizeof(*k));
		quantise(a->tmp, n, k + shift);
		a->start[i] = s;
		if (s < a->lo)
			a->lo = s;
		if (s + taps > a->hi)
			a->hi = s + taps;

		for (uint32_t j = 0; j < pairs; j++) {
			uint16_t k0 = (uint16_t)k[2 * j], k1 = 2 * j + 1 < taps ? (uint16_t)k[2 * j + 1] : 0;

			a->pair[(size_t)i * pairs + j] = (int32_t)((uint32_t)k0 | (uint32_t)k1 << 16);
		}
	}

	a->identity = in0 == floorf(in0) && in1 - in0 == (float)out_size;
	a->taps = taps;
	a->pairs = pairs;
	a->in_size = in_size;
	a->out_size = out_size;
	a->in0 = in0;
	a->in1 = in1;
	a->valid = true;
	return 0;
}

/*
 * The 8-bit result of a fixed-point sum. No clamping: the weights are
 * non-negative and sum to ONE, so a sum of 8-bit values plus the rounding
 * bias stays in [0, 256 << PRECISION_BITS).
 */
static inline uint8_t descale(int32_t acc)
{
	return (uint8_t)(acc >> PRECISION_BITS);
}

/* ---- portable kernels (also the SIMD ones' fallback for odd tap counts and tiny rows) ---- */

static void hpass_scalar(const uint8_t *src, size_t src_stride, uint32_t rows, uint8_t *dst, size_t dst_stride,
			 const struct axis *a, bool flip)
{
	uint32_t n = a->out_size, taps = a->taps;

	for (uint32_t y = 0; y < rows; y++) {
		const uint8_t *restrict s = src + y * src_stride;
		uint8_t *restrict d = dst + y * dst_stride;

		for (uint32_t o = 0; o < n; o++) {
			uint32_t i = flip ? n - 1 - o : o;
			const uint8_t *restrict p = s + (size_t)(a->start[i] - a->lo) * 4;
			const int16_t *restrict k = a->coef + (size_t)i * taps;
			int32_t acc[3] = { ROUND_BIAS, ROUND_BIAS, ROUND_BIAS };

			for (uint32_t t = 0; t < taps; t++)
				for (unsigned c = 0; c < 3; c++)
					acc[c] += p[t * 4 + c] * k[t];
			for (unsigned c = 0; c < 3; c++)
				d[o * 3 + c] = descale(acc[c]);
		}
	}
}

/* Output row y's bytes [x0, x1), from source rows a->start[y] - a->lo onwards at src. */
static void vrow_scalar(const uint8_t *restrict src, size_t src_stride, uint32_t x0, uint32_t x1,
			uint8_t *restrict d, const int16_t *restrict k, uint32_t taps)
{
	uint32_t x = x0;

	/* fixed-length blocks that compilers vectorise */
	for (; x + VBLOCK <= x1; x += VBLOCK) {
		int32_t acc[VBLOCK];

		for (unsigned j = 0; j < VBLOCK; j++)
			acc[j] = ROUND_BIAS;
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
	for (; x < x1; x++) {
		int32_t acc = ROUND_BIAS;

		for (uint32_t t = 0; t < taps; t++)
			acc += src[t * src_stride + x] * k[t];
		d[x] = descale(acc);
	}
}

static void vpass_scalar(const uint8_t *src, size_t src_stride, uint32_t row_bytes, uint8_t *dst,
			 size_t dst_stride, const struct axis *a)
{
	for (uint32_t y = 0; y < a->out_size; y++)
		vrow_scalar(src + (size_t)(a->start[y] - a->lo) * src_stride, src_stride, 0, row_bytes,
			    dst + y * dst_stride, a->coef + (size_t)y * a->taps, a->taps);
}

#if RESIZE_X86

/* ---- SSE2: every x86-64 ---- */

static inline __m128i load32(const uint8_t *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return _mm_cvtsi32_si128(v);
}

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
			const uint8_t *p = s + (size_t)(a->start[i] - a->lo) * 4;
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
				acc = _mm_add_epi32(acc, _mm_madd_epi16(pair_sse2(_mm_loadl_epi64((const __m128i *)(p + 8 * j))),
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
static inline void vblock_sse2(const uint8_t *s, size_t stride, const int32_t *k, uint32_t pairs, uint8_t *d)
{
	const __m128i zero = _mm_setzero_si128();
	__m128i acc0 = _mm_set1_epi32(ROUND_BIAS), acc1 = acc0, acc2 = acc0, acc3 = acc0;

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
			vblock_sse2(s + x, src_stride, k, pairs, d + x);
		}
	}
}

/* ---- AVX2 ---- */

/*
 * One output pixel of two rows: source pixels at p0 (row 0) and p1 (row 1),
 * `pairs` pairs of taps. 32-bit RGBX sums, row 0 in the low 128 bits.
 */
INLINE_AVX2 __m256i hpixel_avx2(const uint8_t *p0, const uint8_t *p1, const int32_t *k, uint32_t pairs)
{
	/* per 128-bit lane: pixels 0, 1 (then 2, 3) as 16-bit [r0 r1 g0 g1 b0 b1 x0 x1] */
	const __m256i m01 = _mm256_setr_epi8(0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1, 0, -1, 4, -1, 1,
					     -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1);
	const __m256i m23 = _mm256_setr_epi8(8, -1, 12, -1, 9, -1, 13, -1, 10, -1, 14, -1, 11, -1, 15, -1, 8, -1, 12,
					     -1, 9, -1, 13, -1, 10, -1, 14, -1, 11, -1, 15, -1);
	__m256i acc = _mm256_set1_epi32(ROUND_BIAS), acc2 = _mm256_setzero_si256();
	uint32_t j = 0;

	for (; j + 2 <= pairs; j += 2) {
		__m256i px = _mm256_inserti128_si256(
			_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p0 + 8 * j))),
			_mm_loadu_si128((const __m128i *)(p1 + 8 * j)), 1);

		acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, m01), _mm256_set1_epi32(k[j])));
		acc2 = _mm256_add_epi32(acc2,
					_mm256_madd_epi16(_mm256_shuffle_epi8(px, m23), _mm256_set1_epi32(k[j + 1])));
	}
	if (j < pairs) {
		__m256i px = _mm256_inserti128_si256(
			_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(p0 + 8 * j))),
			_mm_loadl_epi64((const __m128i *)(p1 + 8 * j)), 1);

		acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, m01), _mm256_set1_epi32(k[j])));
	}
	return _mm256_add_epi32(acc, acc2);
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

/* Rows y, y + 1 (row 1 a copy of row 0 where !two) of the horizontal pass, with `pairs` fixed for inlining. */
INLINE_AVX2 void hrows_avx2(const uint8_t *s0, const uint8_t *s1, uint8_t *d0, uint8_t *d1, bool two,
			     const struct axis *a, bool flip, uint32_t pairs)
{
	/* 4 RGBX pixels to 12 bytes RGB (then 4 zero bytes) per 128-bit lane */
	const __m256i rgb = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0, 1, 2, 4, 5, 6,
					     8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
	const uint32_t n = a->out_size;
	uint32_t o = 0;

	for (; o + 4 <= n; o += 4) {
		__m256i px[4];

		for (unsigned q = 0; q < 4; q++) {
			uint32_t i = flip ? n - 1 - (o + q) : o + q;
			size_t off = (size_t)(a->start[i] - a->lo) * 4;

			px[q] = _mm256_srai_epi32(hpixel_avx2(s0 + off, s1 + off, a->pair + (size_t)i * pairs, pairs),
						  PRECISION_BITS);
		}
		/* per lane: pixels o .. o + 3 of its row, RGBX, then RGB */
		__m256i b = _mm256_packus_epi16(_mm256_packs_epi32(px[0], px[1]), _mm256_packs_epi32(px[2], px[3]));
		__m128i b0, b1;

		b = _mm256_shuffle_epi8(b, rgb);
		b0 = _mm256_castsi256_si128(b);
		b1 = _mm256_extracti128_si256(b, 1);
		if ((o + 4) * 3 + 4 <= n * 3) {
			/* the 4 bytes past the 12 belong to pixels still to be written */
			_mm_storeu_si128((__m128i *)(d0 + (size_t)o * 3), b0);
			if (two)
				_mm_storeu_si128((__m128i *)(d1 + (size_t)o * 3), b1);
		} else {
			store12(d0 + (size_t)o * 3, b0);
			if (two)
				store12(d1 + (size_t)o * 3, b1);
		}
	}
	for (; o < n; o++) {
		uint32_t i = flip ? n - 1 - o : o;
		size_t off = (size_t)(a->start[i] - a->lo) * 4;
		__m256i v = _mm256_srai_epi32(hpixel_avx2(s0 + off, s1 + off, a->pair + (size_t)i * pairs, pairs),
					      PRECISION_BITS);

		v = _mm256_packus_epi16(_mm256_packs_epi32(v, v), v);
		store_rgb(d0 + (size_t)o * 3, _mm256_castsi256_si128(v));
		if (two)
			store_rgb(d1 + (size_t)o * 3, _mm256_extracti128_si256(v, 1));
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
	for (uint32_t y = 0; y < rows; y += 2) {
		const uint8_t *s0 = src + y * src_stride;
		bool two = y + 1 < rows;
		const uint8_t *s1 = two ? s0 + src_stride : s0;
		uint8_t *d0 = dst + y * dst_stride, *d1 = two ? d0 + dst_stride : d0;

		/* constant tap counts for the common cases let the compiler unroll completely */
		switch (a->pairs) {
		case 1:
			hrows_avx2(s0, s1, d0, d1, two, a, flip, 1);
			break;
		case 2:
			hrows_avx2(s0, s1, d0, d1, two, a, flip, 2);
			break;
		case 3:
			hrows_avx2(s0, s1, d0, d1, two, a, flip, 3);
			break;
		case 4:
			hrows_avx2(s0, s1, d0, d1, two, a, flip, 4);
			break;
		default:
			hrows_avx2(s0, s1, d0, d1, two, a, flip, a->pairs);
			break;
		}
	}
}

INLINE_AVX2 void vblock_avx2(const uint8_t *s, size_t stride, const int32_t *k, uint32_t pairs, uint8_t *d)
{
	const __m256i zero = _mm256_setzero_si256();
	__m256i acc0 = _mm256_set1_epi32(ROUND_BIAS), acc1 = acc0, acc2 = acc0, acc3 = acc0;

	for (uint32_t j = 0; j < pairs; j++, s += 2 * stride) {
		__m256i a = _mm256_loadu_si256((const __m256i *)s), b = _mm256_loadu_si256((const __m256i *)(s + stride));
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
			    uint8_t *d)
{
	for (uint32_t x = 0; x < row_bytes; x += 32) {
		if (x + 32 > row_bytes)
			x = row_bytes - 32;
		vblock_avx2(s + x, stride, k, pairs, d + x);
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
		case 1:
			vrow_avx2(s, src_stride, row_bytes, k, 1, d);
			break;
		case 2:
			vrow_avx2(s, src_stride, row_bytes, k, 2, d);
			break;
		case 3:
			vrow_avx2(s, src_stride, row_bytes, k, 3, d);
			break;
		default:
			vrow_avx2(s, src_stride, row_bytes, k, pairs, d);
			break;
		}
	}
}

/* ---- AVX-512BW: the vertical pass 64 bytes at a time ---- */

INLINE_AVX512 void vblock_avx512(const uint8_t *s, size_t stride, const int32_t *k, uint32_t pairs, uint8_t *d)
{
	const __m512i zero = _mm512_setzero_si512();
	__m512i acc0 = _mm512_set1_epi32(ROUND_BIAS), acc1 = acc0, acc2 = acc0, acc3 = acc0;

	for (uint32_t j = 0; j < pairs; j++, s += 2 * stride) {
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

INLINE_AVX512 void vrow_avx512(const uint8_t *s, size_t stride, uint32_t row_bytes, const int32_t *k,
				uint32_t pairs, uint8_t *d)
{
	for (uint32_t x = 0; x < row_bytes; x += 64) {
		if (x + 64 > row_bytes)
			x = row_bytes - 64;
		vblock_avx512(s + x, stride, k, pairs, d + x);
	}
}

TARGET_AVX512
static void vpass_avx512(const uint8_t *src, size_t src_stride, uint32_t row_bytes, uint8_t *dst,
			 size_t dst_stride, const struct axis *a)
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
		case 1:
			vrow_avx512(s, src_stride, row_bytes, k, 1, d);
			break;
		case 2:
			vrow_avx512(s, src_stride, row_bytes, k, 2, d);
			break;
		case 3:
			vrow_avx512(s, src_stride, row_bytes, k, 3, d);
			break;
		default:
			vrow_avx512(s, src_stride, row_bytes, k, pairs, d);
			break;
		}
	}
}

#endif /* RESIZE_X86 */

/* ---- dispatch ---- */

static enum resize_isa forced_isa = RESIZE_ISA_AUTO;

static bool isa_runs(enum resize_isa isa)
{
	switch (isa) {
	case RESIZE_ISA_SCALAR:
		return true;
#if RESIZE_X86
	case RESIZE_ISA_SSE2:
		return true;
	case RESIZE_ISA_AVX2:
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2");
	case RESIZE_ISA_AVX512:
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
		       __builtin_cpu_supports("avx512bw");
#endif
	default:
		return false;
	}
}

int resize_force_isa(enum resize_isa isa)
{
	if (isa != RESIZE_ISA_AUTO && !isa_runs(isa))
		return -ENOTSUP;
	forced_isa = isa;
	return 0;
}

static enum resize_isa pick_isa(void)
{
	static const struct {
		const char *name;
		enum resize_isa isa;
	} names[] = {
		{ "scalar", RESIZE_ISA_SCALAR },
		{ "sse2", RESIZE_ISA_SSE2 },
		{ "avx2", RESIZE_ISA_AVX2 },
		{ "avx512", RESIZE_ISA_AVX512 },
	};
	const char *env;

	if (forced_isa != RESIZE_ISA_AUTO)
		return forced_isa;
	env = getenv("STOKER_RESIZE_ISA");
	if (env)
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (!strcmp(env, names[i].name) && isa_runs(names[i].isa))
				return names[i].isa;
	/* AVX-512 only where asked for: on some CPUs (Skylake-SP) it slows the cores' clocks for the decoder too */
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
	r->isa = pick_isa();
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
		r->hpass = hpass_avx2;
		r->vpass = vpass_avx512;
		break;
#endif
	default:
		r->isa = RESIZE_ISA_SCALAR;
		r->hpass = hpass_scalar;
		r->vpass = vpass_scalar;
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
	free(a->coef);
	free(a->pair);
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
	ret = axis_setup(&r->h, src_w, x, w, dst_w);
	if (ret >= 0)
		ret = axis_setup(&r->v, src_h, y, h, dst_h);
	return ret;
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

int resize_rgb(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
	       double x, double y, double w, double h, uint8_t *dst, uint32_t dst_w, uint32_t dst_h,
	       size_t dst_stride, bool flip)
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
	return resample(r, r->wide, (size_t)cols * 4, dst, dst_stride, flip,
			resize_vertical_first(src_w, src_h, dst_w, dst_h));
}

int resize_rgbx(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
		double x, double y, double w, double h, uint8_t *dst, uint32_t dst_w, uint32_t dst_h,
		size_t dst_stride, bool flip, bool vertical_first)
{
	int ret;

	if (!src || !dst)
		return -EINVAL;
	ret = setup(r, src_w, src_h, x, y, w, h, dst_w, dst_h, dst_stride);
	if (ret < 0)
		return ret;
	if (src_stride < (size_t)src_w * 4)
		return -EINVAL;
	return resample(r, src + (size_t)r->v.lo * src_stride + (size_t)r->h.lo * 4, src_stride, dst, dst_stride,
			flip, vertical_first);
}
