/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "resize_cv.h"

/*
 * The kernels: portable C (the reference), AVX2 and AVX-512 (F + BW), picked
 * at cv_resizer_new() by resize.c's rule (resize_default_isa(): AVX-512
 * where the CPU also has AVX512_VBMI2, else AVX2 where it has that,
 * STOKER_RESIZE_ISA=scalar|avx2|avx512 chooses). Every kernel does the portable code's integer
 * arithmetic lane for lane, so the bytes never depend on the CPU; the
 * portable code finishes what a kernel leaves (row ends, edge columns).
 */
#if defined(__x86_64__) && defined(__GNUC__)
#define CV_X86 1
#include <immintrin.h>
#define TARGET_AVX2 __attribute__((target("avx2")))
#define TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512bw")))
#else
#define CV_X86 0
#endif

/* INTER_RESIZE_COEF_BITS: coefficients are 11-bit, rows hold 22-bit sums. */
#define COEF_BITS 11
#define COEF_ONE (1 << COEF_BITS)

struct cv_resizer {
	int32_t *xofs;  /* [dst_w] source column of each output column */
	int16_t *alpha; /* [dst_w][2] */
	size_t xcap, acap;
	int32_t *rows; /* [2][dst_w * 3 + ROW_SLACK] horizontally resampled rows */
	size_t rcap;
	enum resize_isa isa; /* SCALAR, AVX2 or AVX512 */
};

/* int32s a row holds past its dst_w * 3: the vector kernels' stores overlap the next pixel's. */
#define ROW_SLACK 16

int cv_resizer_new(struct cv_resizer **out)
{
	struct cv_resizer *r = calloc(1, sizeof(*r));
	enum resize_isa isa = resize_default_isa();

	if (!r)
		return -ENOMEM;
	/* SSE2 has no kernel here: the portable code */
	r->isa = CV_X86 && (isa == RESIZE_ISA_AVX2 || isa == RESIZE_ISA_AVX512) ? isa : RESIZE_ISA_SCALAR;
	*out = r;
	return 0;
}

enum resize_isa cv_resizer_isa(const struct cv_resizer *r)
{
	return r->isa;
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


/* HResizeLinear: output columns [dx, dst_w) of one source row, as sums of
 * 22 bits. Columns past the last pair (xmax on) take the edge pixel alone. */
static void hresize_from(const struct cv_resizer *r, const uint8_t *row, unsigned bpp, uint32_t dx, uint32_t dst_w,
			 uint32_t xmax, int32_t *out)
{
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
 * 5 applies to whole rows, tails included. Entries [x, n). */
static void vresize_from(const int32_t *s0, const int32_t *s1, int16_t b0, int16_t b1, size_t x, size_t n, uint8_t *out)
{
	for (; x < n; x++) {
		int32_t t0 = ((int32_t)(int16_t)(s0[x] >> 4) * b0) >> 16;
		int32_t t1 = ((int32_t)(int16_t)(s1[x] >> 4) * b1) >> 16;

		out[x] = sat_u8((t0 + t1 + 2) >> 2);
	}
}

#if CV_X86
static inline uint64_t load64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/*
 * HResizeLinear of 4-byte pixels, two output pixels a 128-bit lane: each
 * pixel's two taps are one 8-byte load (R0 G0 B0 X0 R1 G1 B1 X1), shuffled
 * into (R0, R1) (G0, G1) (B0, B1) (X0, X1) and widened to 16 bits, then one
 * pmaddwd by (a0, a1) gives p[c] a0 + p[4 + c] a1 exactly, as the portable
 * code; X is dropped and the 3 channels stored, each store's last two
 * int32s overwritten by the next (ROW_SLACK past the row). Columns below
 * xmax only (both taps inside the row). Returns the columns done.
 */
TARGET_AVX2 static uint32_t hresize_avx2(const struct cv_resizer *r, const uint8_t *row, uint32_t xmax, int32_t *out)
{
	const __m128i pairs = _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
	const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
		      rgb = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7);
	uint32_t dx = 0;

	for (; dx + 2 <= xmax; dx += 2) {
		__m128i px = _mm_set_epi64x((long long)load64(row + (size_t)r->xofs[dx + 1] * 4),
					    (long long)load64(row + (size_t)r->xofs[dx] * 4));
		__m256i w = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(px, pairs));
		__m256i a = _mm256_permutevar8x32_epi32(
			_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(r->alpha + 2 * dx))), spread);

		_mm256_storeu_si256((__m256i *)(out + 3 * (size_t)dx),
				    _mm256_permutevar8x32_epi32(_mm256_madd_epi16(w, a), rgb));
	}
	return dx;
}

/* vresize_from, 32 entries a step: packs_epi32 / packus_epi16 work per
 * 128-bit lane, permute4x64 puts the quadwords back in order. Returns the
 * entries done. */
TARGET_AVX2 static size_t vresize_avx2(const int32_t *s0, const int32_t *s1, int16_t b0, int16_t b1, size_t x, size_t n,
				       uint8_t *out)
{
	const __m256i c0 = _mm256_set1_epi16(b0), c1 = _mm256_set1_epi16(b1), two = _mm256_set1_epi16(2);

	for (; x + 32 <= n; x += 32) {
		__m256i v[2];

		for (int h = 0; h < 2; h++) {
			const int32_t *a = s0 + x + 16 * h, *b = s1 + x + 16 * h;
			__m256i ra =
				_mm256_packs_epi32(_mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)a), 4),
						   _mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)(a + 8)), 4));
			__m256i rb =
				_mm256_packs_epi32(_mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)b), 4),
						   _mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)(b + 8)), 4));
			__m256i t = _mm256_add_epi16(_mm256_mulhi_epi16(ra, c0), _mm256_mulhi_epi16(rb, c1));

			/* the lanes' order is the same for ra and rb: fixed once, after */
			v[h] = _mm256_permute4x64_epi64(_mm256_srai_epi16(_mm256_add_epi16(t, two), 2), 0xD8);
		}
		_mm256_storeu_si256((__m256i *)(out + x),
				    _mm256_permute4x64_epi64(_mm256_packus_epi16(v[0], v[1]), 0xD8));
	}
	return x;
}

/* hresize_avx2 with four output pixels a 512-bit vector; the store keeps
 * 12 of its 16 int32s. */
TARGET_AVX512 static uint32_t hresize_avx512(const struct cv_resizer *r, const uint8_t *row, uint32_t xmax,
					     int32_t *out)
{
	const __m256i pairs =
		_mm256_broadcastsi128_si256(_mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15));
	const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
	const __m512i rgb = _mm512_setr_epi32(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 15, 15, 15, 15);
	uint32_t dx = 0;

	for (; dx + 4 <= xmax; dx += 4) {
		__m256i px = _mm256_set_epi64x((long long)load64(row + (size_t)r->xofs[dx + 3] * 4),
					       (long long)load64(row + (size_t)r->xofs[dx + 2] * 4),
					       (long long)load64(row + (size_t)r->xofs[dx + 1] * 4),
					       (long long)load64(row + (size_t)r->xofs[dx] * 4));
		__m512i w = _mm512_cvtepu8_epi16(_mm256_shuffle_epi8(px, pairs));
		__m512i a = _mm512_permutexvar_epi32(
			spread, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(r->alpha + 2 * dx))));

		_mm512_storeu_si512(out + 3 * (size_t)dx, _mm512_permutexvar_epi32(rgb, _mm512_madd_epi16(w, a)));
	}
	return dx;
}

/* vresize_avx2, 64 entries a step (quadwords 0 2 4 6 1 3 5 7 undo the per-lane packs). */
TARGET_AVX512 static size_t vresize_avx512(const int32_t *s0, const int32_t *s1, int16_t b0, int16_t b1, size_t n,
					   uint8_t *out)
{
	const __m512i c0 = _mm512_set1_epi16(b0), c1 = _mm512_set1_epi16(b1), two = _mm512_set1_epi16(2);
	const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
	size_t x = 0;

	for (; x + 64 <= n; x += 64) {
		__m512i v[2];

		for (int h = 0; h < 2; h++) {
			const int32_t *a = s0 + x + 32 * h, *b = s1 + x + 32 * h;
			__m512i ra = _mm512_packs_epi32(_mm512_srai_epi32(_mm512_loadu_si512(a), 4),
							_mm512_srai_epi32(_mm512_loadu_si512(a + 16), 4));
			__m512i rb = _mm512_packs_epi32(_mm512_srai_epi32(_mm512_loadu_si512(b), 4),
							_mm512_srai_epi32(_mm512_loadu_si512(b + 16), 4));
			__m512i t = _mm512_add_epi16(_mm512_mulhi_epi16(ra, c0), _mm512_mulhi_epi16(rb, c1));

			v[h] = _mm512_permutexvar_epi64(order, _mm512_srai_epi16(_mm512_add_epi16(t, two), 2));
		}
		_mm512_storeu_si512(out + x, _mm512_permutexvar_epi64(order, _mm512_packus_epi16(v[0], v[1])));
	}
	return vresize_avx2(s0, s1, b0, b1, x, n, out);
}
#endif

#if CV_X86
/*
 * area_half's rows of 4-byte pixels, 8 outputs a step: each 128-bit lane's
 * 4 source pixels shuffled so that neighbours' channels are adjacent bytes,
 * pmaddubsw by 1s sums the pairs, the two rows added, (+ 2) >> 2 as the
 * portable code. Returns the outputs done.
 */
TARGET_AVX2 static uint32_t area_half_avx2(const uint8_t *a, const uint8_t *b, uint32_t dst_w, uint8_t *o)
{
	const __m256i pairs =
		_mm256_broadcastsi128_si256(_mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15));
	const __m256i ones = _mm256_set1_epi8(1), two = _mm256_set1_epi16(2);
	const __m256i rgb =
		_mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
	const __m256i pack = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7);
	uint32_t x = 0;

	for (; x + 8 <= dst_w; x += 8) {
		__m256i v[2], p;

		for (int h = 0; h < 2; h++) {
			const size_t at = (size_t)(x + 4 * h) * 8;
			__m256i sa = _mm256_maddubs_epi16(
				_mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(a + at)), pairs), ones);
			__m256i sb = _mm256_maddubs_epi16(
				_mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(b + at)), pairs), ones);

			v[h] = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(sa, sb), two), 2);
		}
		/* RGBX of outputs 0..7 in order, then 3 bytes each */
		p = _mm256_permute4x64_epi64(_mm256_packus_epi16(v[0], v[1]), 0xD8);
		p = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(p, rgb), pack);
		_mm_storeu_si128((__m128i *)(o + 3 * (size_t)x), _mm256_castsi256_si128(p));
		_mm_storel_epi64((__m128i *)(o + 3 * (size_t)x + 16), _mm256_extracti128_si256(p, 1));
	}
	return x;
}
#endif

/* The 2x2 mean of an exact half-size shrink (resizeAreaFast). */
static void area_half(const struct cv_resizer *r, const uint8_t *src, size_t src_stride, unsigned bpp, uint8_t *dst,
		      uint32_t dst_w, uint32_t dst_h, size_t dst_stride)
{
	for (uint32_t y = 0; y < dst_h; y++) {
		const uint8_t *a = src + (size_t)2 * y * src_stride, *b = a + src_stride;
		uint8_t *o = dst + (size_t)y * dst_stride;
		uint32_t x = 0;

#if CV_X86
		if (bpp == 4 && r->isa != RESIZE_ISA_SCALAR)
			x = area_half_avx2(a, b, dst_w, o);
#endif
		a += (size_t)2 * x * bpp;
		b += (size_t)2 * x * bpp;
		o += (size_t)3 * x;
		for (; x < dst_w; x++, a += 2 * bpp, b += 2 * bpp, o += 3)
			for (int c = 0; c < 3; c++)
				o[c] = (uint8_t)((a[c] + a[bpp + c] + b[c] + b[bpp + c] + 2) >> 2);
	}
}

static void hresize(const struct cv_resizer *r, const uint8_t *row, unsigned bpp, uint32_t dst_w, uint32_t xmax,
		    int32_t *out)
{
	uint32_t dx = 0;

#if CV_X86
	if (bpp == 4 && r->isa == RESIZE_ISA_AVX512)
		dx = hresize_avx512(r, row, xmax, out);
	else if (bpp == 4 && r->isa == RESIZE_ISA_AVX2)
		dx = hresize_avx2(r, row, xmax, out);
#endif
	hresize_from(r, row, bpp, dx, dst_w, xmax, out);
}

static void vresize(const struct cv_resizer *r, const int32_t *s0, const int32_t *s1, int16_t b0, int16_t b1, size_t n,
		    uint8_t *out)
{
	size_t x = 0;

#if CV_X86
	if (r->isa == RESIZE_ISA_AVX512)
		x = vresize_avx512(s0, s1, b0, b1, n, out);
	else if (r->isa == RESIZE_ISA_AVX2)
		x = vresize_avx2(s0, s1, b0, b1, 0, n, out);
#endif
	vresize_from(s0, s1, b0, b1, x, n, out);
}

int cv_resize_linear(struct cv_resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
		     unsigned src_bpp, uint8_t *dst, uint32_t dst_w, uint32_t dst_h, size_t dst_stride)
{
	/* scale = 1 / inv_scale, as OpenCV derives it from the sizes */
	double scale_x = 1.0 / ((double)dst_w / src_w), scale_y = 1.0 / ((double)dst_h / src_h);
	size_t n = (size_t)dst_w * 3, rs = n + ROW_SLACK;
	int32_t row_y[2] = {-1, -1};
	uint32_t xmax = dst_w;
	void *p;
	int err;

	if (!r || !src || !dst || src_w == 0 || src_h == 0 || dst_w == 0 || dst_h == 0 ||
	    (src_bpp != 3 && src_bpp != 4))
		return -EINVAL;
	if (src_w == dst_w && src_h == dst_h) {
		for (uint32_t y = 0; y < dst_h; y++)
			for (uint32_t x = 0; x < dst_w; x++)
				memcpy(dst + (size_t)y * dst_stride + x * 3, src + (size_t)y * src_stride + x * src_bpp,
				       3);
		return 0;
	}
	/* INTER_LINEAR at exactly half size in both directions is INTER_AREA */
	if (fabs(scale_x - 2.0) < DBL_EPSILON && fabs(scale_y - 2.0) < DBL_EPSILON) {
		area_half(r, src, src_stride, src_bpp, dst, dst_w, dst_h, dst_stride);
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
		err = grow(&p, &r->rcap, 2 * rs, sizeof(int32_t));
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
				int keep = k == 0 ? (row_y[1] == want[1]   ? 1
						     : row_y[0] == want[1] ? 0
									   : 1)
						  : (int)((rows[0] - r->rows) / (ptrdiff_t)rs);

				slot = 1 - keep;
				hresize(r, src + (size_t)want[k] * src_stride, src_bpp, dst_w, xmax,
					r->rows + (size_t)slot * rs);
				row_y[slot] = want[k];
			}
			rows[k] = r->rows + (size_t)slot * rs;
		}
		vresize(r, rows[0], rows[1], coef(1.f - fy), coef(fy), n, dst + (size_t)dy * dst_stride);
	}
	return 0;
}
