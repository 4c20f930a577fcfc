/* SPDX-License-Identifier: MIT */
#include <math.h>
#include <string.h>

#include "color.h"
#include "resize.h"

/*
 * The per-level loops below are plain loops over restrict-qualified rows
 * that gcc vectorises when its cost model may weigh an epilogue (-O2's
 * "very cheap" model will not): IEEE single precision in the same order
 * per element, no contraction (-std=c11 turns it off; AVX2 has no FMA), so
 * the bytes equal the scalar code's. Each such kernel is compiled twice,
 * for the baseline (SSE2) and for AVX2, and the AVX2 one runs where
 * resize_default_isa() (the pixels layer's one switch, STOKER_RESIZE_ISA)
 * picks AVX2 or wider: KERNEL(name, params, args) defines name_base and
 * name_avx2 from the body of name_body (always inlined into both);
 * PICK(avx2, name) is the one to call.
 */
#if defined(__GNUC__) && !defined(__clang__)
#define VECTORIZE __attribute__((optimize("tree-loop-vectorize", "vect-cost-model=dynamic")))
#else
#define VECTORIZE
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define COLOR_X86 1
#define AVX2_KERNEL __attribute__((target("avx2"), optimize("tree-loop-vectorize", "vect-cost-model=dynamic")))
#else
#define COLOR_X86 0
#endif
#define BODY static inline __attribute__((always_inline))
#if COLOR_X86
#define KERNEL(name, params, args)                 \
	VECTORIZE static void name##_base params   \
	{                                          \
		name##_body args;                  \
	}                                          \
	AVX2_KERNEL static void name##_avx2 params \
	{                                          \
		name##_body args;                  \
	}
#define PICK(avx2, name) ((avx2) ? name##_avx2 : name##_base)
#else
#define KERNEL(name, params, args)               \
	VECTORIZE static void name##_base params \
	{                                        \
		name##_body args;                \
	}
#define PICK(avx2, name) ((void)(avx2), name##_base)
#endif

static bool use_avx2(void)
{
#if COLOR_X86
	return resize_default_isa() >= RESIZE_ISA_AVX2;
#else
	return false;
#endif
}

/* Pillow's rgb2l: convert("L") */
static inline uint8_t luma(const uint8_t *p)
{
	return (uint8_t)((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
}

void color_lut(struct rgb_image *im, const uint8_t lut[3][256])
{
	/* rows without padding between them are one run */
	uint32_t rows = im->stride == (size_t)im->width * 3 ? 1 : im->height;
	size_t run = rows == 1 ? (size_t)im->width * im->height : im->width;

	for (uint32_t y = 0; y < rows; y++) {
		uint8_t *p = im->px + y * im->stride;

		for (size_t x = 0; x < run; x++, p += 3) {
			p[0] = lut[0][p[0]];
			p[1] = lut[1][p[1]];
			p[2] = lut[2][p[2]];
		}
	}
}

/*
 * Image.blend(degenerate, image, alpha) with a constant degenerate level
 * over n levels: ImagingBlend's (int)in1 + alpha * ((int)in2 - (int)in1)
 * in single precision, truncated, clipped outside [0, 1].
 */
BODY void blend_const_row_body(uint8_t *restrict p, size_t n, int deg, float alpha)
{
	const float fd = (float)deg;

	if (alpha >= 0.0f && alpha <= 1.0f) {
		for (size_t i = 0; i < n; i++)
			p[i] = (uint8_t)(int)(fd + alpha * (float)(p[i] - deg));
		return;
	}
	for (size_t i = 0; i < n; i++) {
		float t = fd + alpha * (float)(p[i] - deg);

		t = t <= 0.0f ? 0.0f : t;
		t = t >= 255.0f ? 255.0f : t;
		p[i] = (uint8_t)(int)t;
	}
}
KERNEL(blend_const_row, (uint8_t *restrict p, size_t n, int deg, float alpha), (p, n, deg, alpha))

/* Each level v to v & mask */
BODY void and_row_body(uint8_t *restrict p, size_t n, uint8_t mask)
{
	for (size_t i = 0; i < n; i++)
		p[i] &= mask;
}
KERNEL(and_row, (uint8_t *restrict p, size_t n, uint8_t mask), (p, n, mask))

/* Each level v below `from` kept, the others inverted (255 - v); from 0: all inverted */
BODY void solarize_row_body(uint8_t *restrict p, size_t n, int from)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(p[i] < from ? p[i] : 255 - p[i]);
}
KERNEL(solarize_row, (uint8_t *restrict p, size_t n, int from), (p, n, from))

/* The image's rows as runs of levels: one run when no padding separates them. */
static uint32_t level_runs(const struct rgb_image *im, size_t *run)
{
	bool whole = im->stride == (size_t)im->width * 3;

	*run = whole ? (size_t)im->width * 3 * im->height : (size_t)im->width * 3;
	return whole ? (im->height ? 1 : 0) : im->height;
}

/* Blending with a constant degenerate level, level by level. */
static void blend_const(struct rgb_image *im, int deg, double factor)
{
	bool avx2 = use_avx2();
	size_t run;
	uint32_t runs = level_runs(im, &run);

	for (uint32_t y = 0; y < runs; y++)
		PICK(avx2, blend_const_row)(im->px + y * im->stride, run, deg, (float)factor);
}

void color_brightness(struct rgb_image *im, double factor)
{
	blend_const(im, 0, factor);
}

void color_contrast(struct rgb_image *im, double factor)
{
	uint64_t hist[256] = {0}, sum = 0, n = (uint64_t)im->width * im->height;
	double mean;

	for (uint32_t y = 0; y < im->height; y++) {
		const uint8_t *p = im->px + y * im->stride;

		for (uint32_t x = 0; x < im->width; x++, p += 3)
			hist[luma(p)]++;
	}
	for (int v = 0; v < 256; v++)
		sum += hist[v] * (uint64_t)v;
	/* ImageStat's mean of the L image, int(mean + 0.5) */
	mean = n ? (double)sum / (double)n : 0.0;
	blend_const(im, (int)(mean + 0.5), factor);
}

/* Image.blend(deg, p, alpha) over n levels, into p */
BODY void blend_row_body(uint8_t *restrict p, const uint8_t *restrict d, size_t n, float alpha)
{
	if (alpha >= 0.0f && alpha <= 1.0f) {
		for (size_t i = 0; i < n; i++)
			p[i] = (uint8_t)(int)((float)d[i] + alpha * (float)(p[i] - d[i]));
		return;
	}
	for (size_t i = 0; i < n; i++) {
		float t = (float)d[i] + alpha * (float)(p[i] - d[i]);

		t = t <= 0.0f ? 0.0f : t;
		t = t >= 255.0f ? 255.0f : t;
		p[i] = (uint8_t)(int)t;
	}
}
KERNEL(blend_row, (uint8_t *restrict p, const uint8_t *restrict d, size_t n, float alpha), (p, d, n, alpha))

void color_blend(struct rgb_image *im, const uint8_t *deg, float alpha)
{
	bool avx2 = use_avx2();

	for (uint32_t y = 0; y < im->height; y++)
		PICK(avx2, blend_row)(im->px + y * im->stride, deg + y * im->stride, (size_t)im->width * 3, alpha);
}

void color_saturation(struct rgb_image *im, double factor)
{
	/* the degenerate image, convert("L") widened to RGB, a chunk of a row at a time */
	enum { CHUNK = 64 };
	uint8_t deg[CHUNK * 3];
	bool avx2 = use_avx2();

	for (uint32_t y = 0; y < im->height; y++) {
		uint8_t *row = im->px + y * im->stride;

		for (uint32_t x0 = 0; x0 < im->width; x0 += CHUNK) {
			uint32_t n = im->width - x0 < CHUNK ? im->width - x0 : CHUNK;
			uint8_t *p = row + (size_t)x0 * 3;

			for (uint32_t x = 0; x < n; x++)
				deg[3 * x] = deg[3 * x + 1] = deg[3 * x + 2] = luma(p + 3 * x);
			PICK(avx2, blend_row)(p, deg, (size_t)n * 3, (float)factor);
		}
	}
}

void color_grayscale(struct rgb_image *im)
{
	for (uint32_t y = 0; y < im->height; y++) {
		uint8_t *p = im->px + y * im->stride;

		for (uint32_t x = 0; x < im->width; x++, p += 3)
			p[0] = p[1] = p[2] = luma(p);
	}
}

/* One level of the 3x3 SMOOTH at a, b, c (rows y + 1, y, y - 1): Pillow's order of operations. */
static inline uint8_t smooth1(const uint8_t *a, const uint8_t *b, const uint8_t *c, float k1, float k5)
{
	float s = 0.5f;

	s += (float)a[-3] * k1 + (float)a[0] * k1 + (float)a[3] * k1;
	s += (float)b[-3] * k1 + (float)b[0] * k5 + (float)b[3] * k1;
	s += (float)c[-3] * k1 + (float)c[0] * k1 + (float)c[3] * k1;
	s = s <= 0.0f ? 0.0f : s;
	s = s >= 255.0f ? 255.0f : s;
	return (uint8_t)(int)s;
}

/* smooth1() for levels 3 .. n - 4 of a row (b), the rows below (a) and above (c) */
BODY void smooth_row_body(const uint8_t *restrict a, const uint8_t *restrict b, const uint8_t *restrict c,
			  uint8_t *restrict o, size_t n)
{
	const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;

	for (size_t i = 3; i < n - 3; i++)
		o[i] = smooth1(a + i, b + i, c + i, k1, k5);
}
KERNEL(smooth_row,
       (const uint8_t *restrict a, const uint8_t *restrict b, const uint8_t *restrict c, uint8_t *restrict o, size_t n),
       (a, b, c, o, n))

/*
 * ImageFilter.SMOOTH (3x3, 1 1 1 / 1 5 1 / 1 1 1, divisor 13) as Pillow's
 * ImagingFilter3x3 computes it: float weights k / 13, row sums of
 * products added to offset 0.5 (its rounding), rows y+1, y, y-1 in that
 * order; the border rows and columns copied. Into `out` (same stride).
 */
static void smooth(const struct rgb_image *im, uint8_t *restrict out, bool avx2)
{
	const size_t st = im->stride;
	const uint32_t w = im->width, h = im->height;

	memcpy(out, im->px, st * h);
	if (w < 3 || h < 3)
		return;
	for (uint32_t y = 1; y < h - 1; y++)
		PICK(avx2, smooth_row)
	(im->px + (y + 1) * st, im->px + y * st, im->px + (y - 1) * st, out + y * st, (size_t)w * 3);
}

void color_sharpness(struct rgb_image *im, double factor, uint8_t *tmp)
{
	bool avx2 = use_avx2();

	smooth(im, tmp, avx2);
	for (uint32_t y = 0; y < im->height; y++)
		PICK(avx2, blend_row)
	(im->px + y * im->stride, tmp + y * im->stride, (size_t)im->width * 3, (float)factor);
}

static void histogram(const struct rgb_image *im, uint32_t hist[3][256])
{
	memset(hist, 0, sizeof(uint32_t) * 3 * 256);
	for (uint32_t y = 0; y < im->height; y++) {
		const uint8_t *p = im->px + y * im->stride;

		for (uint32_t x = 0; x < im->width; x++, p += 3) {
			hist[0][p[0]]++;
			hist[1][p[1]]++;
			hist[2][p[2]]++;
		}
	}
}

void color_autocontrast(struct rgb_image *im)
{
	uint32_t hist[3][256];
	uint8_t lut[3][256];

	histogram(im, hist);
	for (int c = 0; c < 3; c++) {
		int lo = 0, hi = 255;
		double scale, offset;

		while (lo < 256 && !hist[c][lo])
			lo++;
		while (hi >= 0 && !hist[c][hi])
			hi--;
		if (hi <= lo) {
			for (int v = 0; v < 256; v++)
				lut[c][v] = (uint8_t)v;
			continue;
		}
		scale = 255.0 / (hi - lo);
		offset = -lo * scale;
		for (int v = 0; v < 256; v++) {
			/* Python's int() truncates toward zero */
			double f = v * scale + offset;
			long ix = (long)f;

			lut[c][v] = (uint8_t)(ix < 0 ? 0 : ix > 255 ? 255 : ix);
		}
	}
	color_lut(im, lut);
}

void color_equalize(struct rgb_image *im)
{
	uint32_t hist[3][256];
	uint8_t lut[3][256];

	histogram(im, hist);
	for (int c = 0; c < 3; c++) {
		uint64_t total = 0, last = 0, step, n;
		unsigned nonzero = 0;

		for (int v = 0; v < 256; v++)
			if (hist[c][v]) {
				total += hist[c][v];
				last = hist[c][v];
				nonzero++;
			}
		step = nonzero > 1 ? (total - last) / 255 : 0;
		if (!step) {
			for (int v = 0; v < 256; v++)
				lut[c][v] = (uint8_t)v;
			continue;
		}
		n = step / 2;
		for (int v = 0; v < 256; v++) {
			uint64_t q = n / step;

			/* Image.point clips the table to 8 bits */
			lut[c][v] = (uint8_t)(q > 255 ? 255 : q);
			n += hist[c][v];
		}
	}
	color_lut(im, lut);
}

void color_posterize(struct rgb_image *im, unsigned bits)
{
	uint8_t mask = (uint8_t) ~((1u << (8 - (bits > 8 ? 8 : bits))) - 1);
	bool avx2 = use_avx2();
	size_t run;
	uint32_t runs = level_runs(im, &run);

	for (uint32_t y = 0; y < runs; y++)
		PICK(avx2, and_row)(im->px + y * im->stride, run, mask);
}

/* The levels v < from kept, the others inverted. */
static void solarize_from(struct rgb_image *im, int from)
{
	bool avx2 = use_avx2();
	size_t run;
	uint32_t runs = level_runs(im, &run);

	for (uint32_t y = 0; y < runs; y++)
		PICK(avx2, solarize_row)(im->px + y * im->stride, run, from);
}

void color_solarize(struct rgb_image *im, double threshold)
{
	int from = 0;

	/* v < threshold holds for the levels below the first that fails it */
	while (from < 256 && from < threshold)
		from++;
	solarize_from(im, from);
}

void color_invert(struct rgb_image *im)
{
	solarize_from(im, 0);
}

static inline uint8_t clip8i(int v)
{
	return (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : v);
}

/* Pillow's rgb2hsv_row (following colorsys), the float/double mix as written there. */
static void rgb2hsv(const uint8_t *in, uint8_t *out)
{
	uint8_t r = in[0], g = in[1], b = in[2];
	uint8_t maxc = r > g ? (r > b ? r : b) : (g > b ? g : b);
	uint8_t minc = r < g ? (r < b ? r : b) : (g < b ? g : b);
	float h, s, rc, gc, bc, cr;

	out[2] = maxc;
	if (minc == maxc) {
		out[0] = out[1] = 0;
		return;
	}
	cr = (float)(maxc - minc);
	s = cr / (float)maxc;
	rc = ((float)(maxc - r)) / cr;
	gc = ((float)(maxc - g)) / cr;
	bc = ((float)(maxc - b)) / cr;
	if (r == maxc)
		h = bc - gc;
	else if (g == maxc)
		h = (float)(2.0 + rc - bc);
	else
		h = (float)(4.0 + gc - rc);
	/* fmod(h / 6.0 + 1.0, 1.0): the sum lies in [5/6, 11/6], where subtracting 1 is exact */
	{
		double t = h / 6.0 + 1.0;

		h = (float)(t < 1.0 ? t : t - 1.0);
	}
	out[0] = clip8i((int)(h * 255.0));
	out[1] = clip8i((int)(s * 255.0));
}

/* C's round() of a non-negative double (half away from zero), without the libm call */
static inline int round_pos(double x)
{
	int r = (int)x;

	return x - r >= 0.5 ? r + 1 : r;
}

/* Pillow's hsv2rgb */
static void hsv2rgb(const uint8_t *in, uint8_t *out)
{
	uint8_t h = in[0], s = in[1], v = in[2], up, uq, ut;
	float f, fs;
	int i;

	if (s == 0) {
		out[0] = out[1] = out[2] = v;
		return;
	}
	i = (int)((float)h * 6.0 / 255.0); /* floor of a non-negative value */
	f = (float)((float)h * 6.0 / 255.0 - (float)i);
	fs = (float)(((float)s) / 255.0);
	up = clip8i(round_pos((float)v * (1.0 - fs)));
	uq = clip8i(round_pos((float)v * (1.0 - fs * f)));
	ut = clip8i(round_pos((float)v * (1.0 - fs * (1.0 - f))));
	switch (i % 6) {
	case 0:
		out[0] = v;
		out[1] = ut;
		out[2] = up;
		break;
	case 1:
		out[0] = uq;
		out[1] = v;
		out[2] = up;
		break;
	case 2:
		out[0] = up;
		out[1] = v;
		out[2] = ut;
		break;
	case 3:
		out[0] = up;
		out[1] = uq;
		out[2] = v;
		break;
	case 4:
		out[0] = ut;
		out[1] = up;
		out[2] = v;
		break;
	default:
		out[0] = v;
		out[1] = up;
		out[2] = uq;
		break;
	}
}

void color_hue(struct rgb_image *im, double hue_factor)
{
	/* np.uint8(hue_factor * 255) added with uint8 wraparound */
	uint8_t shift = (uint8_t)(int64_t)(hue_factor * 255);

	for (uint32_t y = 0; y < im->height; y++) {
		uint8_t *p = im->px + y * im->stride;

		for (uint32_t x = 0; x < im->width; x++, p += 3) {
			uint8_t hsv[3];

			rgb2hsv(p, hsv);
			hsv[0] = (uint8_t)(hsv[0] + shift);
			hsv2rgb(hsv, p);
		}
	}
}

void color_gaussian_weights(unsigned n, double sigma, float *w)
{
	/* torch.linspace(-lim, lim, n) / sigma, squared, negated, softmax; all float32 */
	const float lim = (float)((n - 1) / (2.0 * sqrt(2.0)));
	float mx = -INFINITY, sum = 0.0f;

	for (unsigned i = 0; i < n; i++) {
		float step = n > 1 ? (2.0f * lim) / (float)(n - 1) : 0.0f;
		/* linspace fills the first half from the start and the second from the end */
		float x = i < n / 2 ? -lim + step * (float)i : lim - step * (float)(n - 1 - i);

		x = x / (float)sigma;
		w[i] = -(x * x);
		mx = w[i] > mx ? w[i] : mx;
	}
	for (unsigned i = 0; i < n; i++) {
		w[i] = expf(w[i] - mx);
		sum += w[i];
	}
	for (unsigned i = 0; i < n; i++)
		w[i] /= sum;
}

/* torch's reflect padding: index i of an axis of n, bounced off both ends (n > 1). */
static inline uint32_t reflect(int64_t i, uint32_t n)
{
	if (n == 1)
		return 0;
	while (i < 0 || i >= (int64_t)n) {
		if (i < 0)
			i = -i;
		if (i >= (int64_t)n)
			i = 2 * ((int64_t)n - 1) - i;
	}
	return (uint32_t)i;
}

VECTORIZE void color_gaussian_blur(struct rgb_image *im, unsigned kx, unsigned ky, double sx, double sy, float *tmp)
{
	float wx[256], wy[256];
	const uint32_t w = im->width, h = im->height;
	const int rx = (int)kx / 2, ry = (int)ky / 2;
	const size_t n = (size_t)w * 3;
	/* tmp: the horizontally filtered image (h rows of n), then a padded row, then the accumulator */
	float *restrict pad = tmp + (size_t)h * n, *restrict acc = pad + n + 6 * (size_t)rx;

	if (!w || !h || kx > 255 || ky > 255)
		return;
	color_gaussian_weights(kx, sx, wx);
	color_gaussian_weights(ky, sy, wy);
	/* rows: each output the sum over k in order of wx[k] * the reflected input, as conv2d's taps */
	for (uint32_t y = 0; y < h; y++) {
		const uint8_t *p = im->px + y * im->stride;
		float *restrict o = tmp + (size_t)y * n;

		for (int x = -rx; x < (int)w + rx; x++) {
			const uint8_t *q = p + 3 * (size_t)reflect(x, w);
			float *d = pad + 3 * (size_t)(x + rx);

			d[0] = q[0];
			d[1] = q[1];
			d[2] = q[2];
		}
		for (size_t i = 0; i < n; i++)
			o[i] = 0.0f;
		for (unsigned k = 0; k < kx; k++) {
			const float wk = wx[k], *restrict src = pad + 3 * (size_t)k;
			for (size_t i = 0; i < n; i++)
				o[i] += wk * src[i];
		}
	}
	/* columns, a row at a time into acc, rounded half to even (torch.round), clamped */
	for (uint32_t y = 0; y < h; y++) {
		uint8_t *p = im->px + y * im->stride;

		for (size_t i = 0; i < n; i++)
			acc[i] = 0.0f;
		for (unsigned k = 0; k < ky; k++) {
			const float *restrict row = tmp + (size_t)reflect((int64_t)y + k - ry, h) * n, wk = wy[k];
			for (size_t i = 0; i < n; i++)
				acc[i] += wk * row[i];
		}
		for (size_t i = 0; i < n; i++) {
			float v = nearbyintf(acc[i]);

			p[i] = (uint8_t)(v <= 0.0f ? 0 : v >= 255.0f ? 255 : v);
		}
	}
}
