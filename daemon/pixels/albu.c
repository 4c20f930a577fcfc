/* SPDX-License-Identifier: MIT */
/*
 * Ultralytics' default Albumentations (albu.h), as OpenCV computes them.
 *
 * The 8-bit LAB conversions are OpenCV's integer ones (color_lab.cpp,
 * RGB2Lab_b and Lab2RGBinteger): fixed-point matrices and lookup tables
 * that OpenCV builds with its soft-float library. The tables are rebuilt
 * here with the same float and double steps; its cube root rounds toward
 * zero where the C library's rounds to nearest (one table entry depends on
 * it), hence cbrt_toward_zero(). Checked against cv2 on all 2^24 colours
 * both ways (tests/ultralytics/test_albumentations.py).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "albu.h"
#include "grow.h"
#include "mirror.h"

enum { TILES = 8 }; /* CLAHE's grid, Albumentations' tile_grid_size */

struct albu {
	uint8_t *copy; /* the source of a blur, or LAB's L plane and its CLAHE */
	size_t copy_cap;
	uint16_t *rows; /* Blur's horizontal sums */
	size_t rows_cap;
	uint32_t *words; /* Blur's column sums, border maps and division table; MedianBlur's column map */
	size_t words_cap;
	uint8_t luts[TILES][TILES][256]; /* CLAHE's, one a tile */
};

int albu_new(struct albu **out)
{
	struct albu *a = calloc(1, sizeof(*a));

	if (!a)
		return -ENOMEM;
	*out = a;
	return 0;
}

void albu_free(struct albu *a)
{
	if (!a)
		return;
	free(a->copy);
	free(a->rows);
	free(a->words);
	free(a);
}

void albu_draw(struct rng *r, double p, struct albu_draw *d)
{
	/* sample_odd_from_range(3, 7): one of 3, 5, 7 */
	d->blur = rng_uniform(r) < p;
	d->blur_k = 3 + 2 * (uint32_t)rng_below(r, 3);
	d->median = rng_uniform(r) < p;
	d->median_k = 3 + 2 * (uint32_t)rng_below(r, 3);
	d->gray = rng_uniform(r) < p;
	d->clahe = rng_uniform(r) < p;
	d->clip = rng_range(r, 1.0, 4.0);
}

/* BORDER_REFLECT_101 (gfedcb|abcdefgh|gfedcba), any distance. */
static int32_t reflect101(int64_t i, int64_t n)
{
	if (n == 1)
		return 0;
	while (i < 0 || i >= n)
		i = i < 0 ? -i : 2 * n - 2 - i;
	return (int32_t)i;
}

/* ---- Blur: cv2.blur, the mean of k x k rounded (k^2 odd: no ties) ---- */

/* Where a border of `half` on each side reads from (BORDER_REFLECT_101):
 * map[i] for padded position i - half. */
static void reflect_map(int32_t *map, uint32_t n, uint32_t half)
{
	for (int64_t i = 0; i < (int64_t)n + 2 * half; i++)
		map[i] = reflect101(i - (int64_t)half, n);
}

int albu_blur(struct albu *a, uint8_t *rgb, uint32_t w, uint32_t h, uint32_t k)
{
	size_t row = (size_t)w * 3, n = row * h;
	uint32_t half = k / 2, area = k * k;
	int32_t *xmap, *ymap;
	uint32_t *col;
	uint8_t *div;
	void *p;
	int r;

	if (k < 3 || k > 255 || !(k & 1) || !w || !h)
		return -EINVAL;
	/* the row sums (k * 255 fits 16 bits), then the column sums, the two
	 * border maps and the rounding division as a table of every sum */
	p = a->rows;
	r = grow(&p, &a->rows_cap, n, sizeof(uint16_t));
	a->rows = p;
	if (r == 0) {
		size_t words = row + (w + 2 * half) + (h + 2 * half) + (area * 255 + 4) / 4 + 1;

		p = a->words;
		r = grow(&p, &a->words_cap, words, sizeof(uint32_t));
		a->words = p;
	}
	if (r < 0)
		return r;
	col = a->words;
	xmap = (int32_t *)(col + row);
	ymap = xmap + w + 2 * half;
	div = (uint8_t *)(ymap + h + 2 * half);
	reflect_map(xmap, w, half);
	reflect_map(ymap, h, half);
	for (uint32_t v = 0; v <= area * 255; v++)
		div[v] = (uint8_t)((v + area / 2) / area);
	/* cv2.blur's mean of k x k, rounded (k^2 odd: no ties), as sliding sums */
	for (uint32_t y = 0; y < h; y++) {
		const uint8_t *s = rgb + y * row;
		uint16_t *o = a->rows + y * row;

		for (int c = 0; c < 3; c++) {
			uint32_t sum = 0;

			for (uint32_t t = 0; t < k; t++)
				sum += s[(size_t)xmap[t] * 3 + c];
			o[c] = (uint16_t)sum;
			for (uint32_t x = 1; x < w; x++) {
				sum += s[(size_t)xmap[x + k - 1] * 3 + c];
				sum -= s[(size_t)xmap[x - 1] * 3 + c];
				o[x * 3 + c] = (uint16_t)sum;
			}
		}
	}
	memset(col, 0, row * sizeof(*col));
	for (uint32_t t = 0; t < k; t++) {
		const uint16_t *src = a->rows + (size_t)ymap[t] * row;

		for (size_t i = 0; i < row; i++)
			col[i] += src[i];
	}
	for (uint32_t y = 0; y < h; y++) {
		uint8_t *o = rgb + y * row;

		for (size_t i = 0; i < row; i++)
			o[i] = div[col[i]];
		if (y + 1 < h) {
			const uint16_t *in = a->rows + (size_t)ymap[y + k] * row,
				       *out = a->rows + (size_t)ymap[y] * row;

			for (size_t i = 0; i < row; i++)
				col[i] += (uint32_t)in[i] - out[i];
		}
	}
	return 0;
}

/* ---- MedianBlur: cv2.medianBlur, BORDER_REPLICATE. k 3 and 5: forgetful selection
 * (keep (n + 3) / 2 of the k^2 values, drop the least and the greatest, take
 * the next; the last three's middle is the median) on 64 bytes of a row at
 * once: min/max passes the compiler turns into vector code. ---- */

enum { LANES = 64, MEDIAN_KEEP = (5 * 5 + 3) / 2 };

static inline uint32_t clampi(int64_t v, uint32_t n)
{
	return v < 0 ? 0 : v >= n ? n - 1 : (uint32_t)v;
}

static inline void order(uint8_t *a, uint8_t *b)
{
#ifdef __SSE2__
	for (int l = 0; l < LANES; l += 16) {
		__m128i x = _mm_loadu_si128((const __m128i *)(a + l)), y = _mm_loadu_si128((const __m128i *)(b + l));

		_mm_storeu_si128((__m128i *)(a + l), _mm_min_epu8(x, y));
		_mm_storeu_si128((__m128i *)(b + l), _mm_max_epu8(x, y));
	}
#else
	for (int l = 0; l < LANES; l++) {
		uint8_t lo = a[l] < b[l] ? a[l] : b[l], hi = a[l] < b[l] ? b[l] : a[l];

		a[l] = lo;
		b[l] = hi;
	}
#endif
}

/* The median of the n = k * k taps at src[t] + i for LANES bytes. */
static void median_lanes(const uint8_t *const *src, uint32_t n, size_t i, uint8_t *out)
{
	uint8_t v[MEDIAN_KEEP + 1][LANES];
	uint32_t lo = 0, m = (n + 3) / 2, next = m;

	for (uint32_t t = 0; t < m; t++)
		memcpy(v[t], src[t] + i, LANES);
	while (next < n) {
		/* the greatest to the end, then the least to the front; both go */
		for (uint32_t j = lo; j + 1 < lo + m; j++)
			order(v[j], v[j + 1]);
		for (uint32_t j = lo + m - 2; j > lo; j--)
			order(v[j - 1], v[j]);
		lo++;
		m -= 2;
		/* the slot of the dropped greatest takes the next value (lo + m
		 * stays (n + 3) / 2) */
		memcpy(v[lo + m], src[next++] + i, LANES);
		m++;
	}
	order(v[lo], v[lo + 1]);
	order(v[lo + 1], v[lo + 2]);
	order(v[lo], v[lo + 1]);
	memcpy(out, v[lo + 1], LANES);
}

/* k = 7: a sliding histogram per row and channel (Huang), the median tracked
 * as it moves (forgetful selection's passes grow as k^4). */
static int median_huang(struct albu *a, uint8_t *rgb, uint32_t w, uint32_t h, uint32_t k)
{
	size_t row = (size_t)w * 3, n = row * h;
	int64_t half = k / 2;
	uint32_t rank = k * k / 2; /* the median's rank, from 0 */
	void *p = a->copy;
	int r;

	r = grow(&p, &a->copy_cap, n, 1);
	a->copy = p;
	if (r < 0)
		return r;
	memcpy(a->copy, rgb, n);
	for (uint32_t y = 0; y < h; y++)
		for (int c = 0; c < 3; c++) {
			uint32_t hist[256] = {0}, below = 0, m = 0;
			const uint8_t *rows[255];

			for (int64_t t = -half; t <= half; t++)
				rows[t + half] = a->copy + (size_t)clampi((int64_t)y + t, h) * row;
			for (uint32_t t = 0; t < k; t++)
				for (int64_t u = -half; u <= half; u++)
					hist[rows[t][clampi(u, w) * 3 + c]]++;
			for (uint32_t x = 0; x < w; x++) {
				if (x > 0) {
					uint32_t out = clampi((int64_t)x - 1 - half, w) * 3 + c;
					uint32_t in = clampi((int64_t)x + half, w) * 3 + c;

					for (uint32_t t = 0; t < k; t++) {
						uint8_t vo = rows[t][out], vi = rows[t][in];

						hist[vo]--;
						below -= vo < m;
						hist[vi]++;
						below += vi < m;
					}
				}
				/* below: values under m; move m to the median */
				while (below + hist[m] <= rank)
					below += hist[m++];
				while (below > rank)
					below -= hist[--m];
				rgb[y * row + x * 3 + c] = (uint8_t)m;
			}
		}
	return 0;
}

int albu_median(struct albu *a, uint8_t *rgb, uint32_t w, uint32_t h, uint32_t k)
{
	const uint32_t half = k / 2, n = k * k;
	/* each row padded by `half` replicated pixels each side, and room to
	 * read a whole LANES past its end */
	const size_t row = (size_t)w * 3, prow = (size_t)(w + 2 * half) * 3 + LANES;
	const uint8_t *src[5 * 5];
	uint8_t out[LANES];
	void *p = a->copy;
	int r;

	if (k < 3 || k > 255 || !(k & 1) || !w || !h)
		return -EINVAL;
	if (k > 5)
		return median_huang(a, rgb, w, h, k);
	r = grow(&p, &a->copy_cap, prow * h, 1);
	a->copy = p;
	if (r < 0)
		return r;
	for (uint32_t y = 0; y < h; y++) {
		uint8_t *d = a->copy + y * prow;

		for (uint32_t x = 0; x < w + 2 * half; x++)
			memcpy(d + (size_t)x * 3, rgb + y * row + (size_t)clampi((int64_t)x - half, w) * 3, 3);
		memset(d + (size_t)(w + 2 * half) * 3, 0, LANES);
	}
	for (uint32_t y = 0; y < h; y++) {
		for (uint32_t dy = 0; dy < k; dy++)
			for (uint32_t dx = 0; dx < k; dx++)
				src[dy * k + dx] =
					a->copy + (size_t)clampi((int64_t)y + dy - half, h) * prow + (size_t)dx * 3;
		for (size_t i = 0; i < row; i += LANES) {
			median_lanes(src, n, i, out);
			memcpy(rgb + y * row + i, out, row - i < LANES ? row - i : LANES);
		}
	}
	return 0;
}

/* ---- ToGray: cv2 RGB2GRAY (15-bit weights), red's weight on the third
 * byte (albu.h: Ultralytics' BGR) ---- */

void albu_gray(uint8_t *rgb, size_t pixels)
{
	for (size_t i = 0; i < pixels; i++, rgb += 3) {
		uint8_t y = (uint8_t)((rgb[2] * 9798u + rgb[1] * 19235u + rgb[0] * 3735u + (1u << 14)) >> 15);

		rgb[0] = rgb[1] = rgb[2] = y;
	}
}

/* ---- LAB: OpenCV's 8-bit integer conversions ---- */

enum {
	LAB_SHIFT = 12,                       /* the matrices' fixed point */
	GAMMA_SHIFT = 3,                      /* the gamma table's extra bits */
	LAB_SHIFT2 = LAB_SHIFT + GAMMA_SHIFT, /* the cube-root table's */
	CBRT_TAB = 256 * 3 / 2 * (1 << GAMMA_SHIFT),
	LAB_BASE = 1 << 14, /* Lab2RGBinteger's fixed point */
	INV_GAMMA_TAB = 1 << 12,
	MIN_AB = -8145, /* abToXZ's first index */
	AB_TAB = LAB_BASE * 9 / 4,
	INV_SHIFT = LAB_SHIFT + (14 - 12),
};

static struct {
	uint16_t gamma[256];               /* sRGB to linear, x 255 x 8 */
	uint16_t cbrt[CBRT_TAB];           /* Lab's f(t), x 2^15 */
	uint16_t yf[256][2];               /* L to (Y, f(Y)) x LAB_BASE */
	int32_t ab_xz[AB_TAB];             /* f to X or Z */
	uint16_t inv_gamma[INV_GAMMA_TAB]; /* linear to sRGB x 255 */
	int32_t fwd[9], inv[9];            /* RGB to XYZ / white, XYZ x white to RGB */
} lab;
static pthread_once_t lab_once = PTHREAD_ONCE_INIT;

/* OpenCV's constants, as their doubles' bits (sRGB D65). */
static double bits(uint64_t u)
{
	double d;

	memcpy(&d, &u, sizeof(d));
	return d;
}

static double gamma_fwd(double x)
{
	return x <= 809.0 / 20000 ? x / (323.0 / 25) : pow((x + 11.0 / 200) / (1 + 11.0 / 200), 12.0 / 5);
}

static double gamma_inv(double x)
{
	return x <= 7827.0 / 2500000 ? x * (323.0 / 25) : pow(x, 1 / (12.0 / 5)) * (1 + 11.0 / 200) - 11.0 / 200;
}

/* The float nearest the cube root, or the one below it (toward zero). */
static float cbrt_toward_zero(float x)
{
	double exact = cbrt((double)x);
	float c = (float)exact;

	return (double)c > exact ? nextafterf(c, 0.0f) : c;
}

static void lab_init(void)
{
	static const uint64_t d65[3] = {0x3fee6a22b3892ee8, 0x3ff0000000000000, 0x3ff16b8950763a19};
	static const uint64_t to_xyz[9] = {0x3fda65a14488c60d, 0x3fd6e297396d0918, 0x3fc71819d2391d58,
					   0x3fcb38cda6e75ff6, 0x3fe6e297396d0918, 0x3fb279aae6c8f755,
					   0x3f93cc4ac6cdaf4b, 0x3fbe836eb4e98138, 0x3fee68427418d691};
	static const uint64_t to_rgb[9] = {0x4009ec804102ff8f, 0xbff8982a9930be0e, 0xbfdfe7ff583a53b9,
					   0xbfef042528ae74f3, 0x3ffe040f23897204, 0x3fa546d3f9e7b80b,
					   0x3fac7de5082cf52c, 0xbfca1e14bdfd2631, 0x3ff0eabef06b3786};
	const float lthresh = 216.0f / 24389.0f, lscale = 841.0f / 108.0f, lbias = 16.0f / 116.0f;
	const float cb_scale = 1.0f / (255.0f * (1 << GAMMA_SHIFT));

	for (int i = 0; i < 256; i++) {
		float x = (float)i / 255.0f;

		lab.gamma[i] = (uint16_t)rintf(255.0f * (1 << GAMMA_SHIFT) * (float)gamma_fwd((double)x));
	}
	for (int i = 0; i < CBRT_TAB; i++) {
		float x = cb_scale * (float)i;
		float f = x < lthresh ? fmaf(x, lscale, lbias) : cbrt_toward_zero(x);

		lab.cbrt[i] = (uint16_t)rintf((float)(1 << LAB_SHIFT2) * f);
	}
	for (int i = 0; i < 256; i++) {
		float y, ify;

		if (i <= 20) {
			y = rintf((float)(i * LAB_BASE * 20 * 9) / (float)(17 * 29 * 29 * 29));
			ify = rintf((float)LAB_BASE * (16.0f / 116.0f + (float)(i * 5) / (float)(3 * 17 * 29)));
		} else {
			float fy = (float)(i * 100 * LAB_BASE) / (float)(255 * 116) + (float)(16 * LAB_BASE) / 116.0f;

			ify = rintf(fy);
			y = rintf(fy * fy * fy / (float)(LAB_BASE * LAB_BASE));
		}
		lab.yf[i][0] = (uint16_t)y;
		lab.yf[i][1] = (uint16_t)ify;
	}
	for (int i = MIN_AB; i < AB_TAB + MIN_AB; i++) {
		/* C's division truncates toward zero, as OpenCV's does */
		int64_t v = i <= 3390 ? (int64_t)i * 108 / 841 - LAB_BASE * 16 / 116 * 108 / 841
				      : (int64_t)i * i / LAB_BASE * i / LAB_BASE;

		lab.ab_xz[i - MIN_AB] = (int32_t)v;
	}
	for (int i = 0; i < INV_GAMMA_TAB; i++) {
		float x = 1.0f / (float)INV_GAMMA_TAB * (float)i;

		lab.inv_gamma[i] = (uint16_t)rintf(255.0f * (float)gamma_inv((double)x));
	}
	/* Rows X, Y, Z over R, G, B (RGB2Lab_b, blue index 2), and rows R, G,
	 * B over X, Y, Z (Lab2RGBinteger, blue index 0: it writes B, G, R) */
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 3; j++) {
			lab.fwd[i * 3 + j] =
				(int32_t)nearbyint((1 << LAB_SHIFT) * bits(to_xyz[i * 3 + j]) / bits(d65[i]));
			lab.inv[(2 - i) * 3 + j] =
				(int32_t)nearbyint((1 << LAB_SHIFT) * bits(to_rgb[i * 3 + j]) * bits(d65[j]));
		}
}

static inline int32_t descale(int32_t x, int n)
{
	return (x + (1 << (n - 1))) >> n;
}

static inline uint8_t sat8(int32_t v)
{
	return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

void albu_rgb2lab(uint8_t *px, size_t pixels, bool turned)
{
	const int32_t *c = lab.fwd;
	const int lscale = (116 * 255 + 50) / 100, lshift = -((16 * 255 * (1 << LAB_SHIFT2) + 50) / 100);
	const int ri = turned ? 2 : 0, bi = turned ? 0 : 2;

	pthread_once(&lab_once, lab_init);
	for (size_t i = 0; i < pixels; i++, px += 3) {
		int32_t R = lab.gamma[px[ri]], G = lab.gamma[px[1]], B = lab.gamma[px[bi]];
		int32_t fx = lab.cbrt[descale(R * c[0] + G * c[1] + B * c[2], LAB_SHIFT)];
		int32_t fy = lab.cbrt[descale(R * c[3] + G * c[4] + B * c[5], LAB_SHIFT)];
		int32_t fz = lab.cbrt[descale(R * c[6] + G * c[7] + B * c[8], LAB_SHIFT)];

		px[0] = sat8(descale(lscale * fy + lshift, LAB_SHIFT2));
		px[1] = sat8(descale(500 * (fx - fy) + 128 * (1 << LAB_SHIFT2), LAB_SHIFT2));
		px[2] = sat8(descale(200 * (fy - fz) + 128 * (1 << LAB_SHIFT2), LAB_SHIFT2));
	}
}

static inline int32_t inv_index(int32_t v)
{
	return v < 0 ? 0 : v > INV_GAMMA_TAB - 1 ? INV_GAMMA_TAB - 1 : v;
}

void albu_lab2rgb(uint8_t *px, size_t pixels, bool turned)
{
	const int32_t *c = lab.inv;
	const int ri = turned ? 2 : 0, bi = turned ? 0 : 2;

	pthread_once(&lab_once, lab_init);
	for (size_t i = 0; i < pixels; i++, px += 3) {
		int32_t y = lab.yf[px[0]][0], ify = lab.yf[px[0]][1];
		/* a / 500 and b / 200 in LAB_BASE units, OpenCV's approximations */
		int32_t adiv = ((5 * px[1] * 53687 + (1 << 7)) >> 13) - 128 * LAB_BASE / 500;
		int32_t bdiv = ((px[2] * 41943 + (1 << 4)) >> 9) - 128 * LAB_BASE / 200 + 1;
		int32_t x = lab.ab_xz[ify + adiv - MIN_AB], z = lab.ab_xz[ify - bdiv - MIN_AB];
		int32_t b = lab.inv_gamma[inv_index(descale(c[0] * x + c[1] * y + c[2] * z, INV_SHIFT))];
		int32_t g = lab.inv_gamma[inv_index(descale(c[3] * x + c[4] * y + c[5] * z, INV_SHIFT))];
		int32_t r = lab.inv_gamma[inv_index(descale(c[6] * x + c[7] * y + c[8] * z, INV_SHIFT))];

		px[ri] = (uint8_t)r;
		px[1] = (uint8_t)g;
		px[bi] = (uint8_t)b;
	}
}

/* ---- CLAHE: cv2's, 8 x 8 tiles, on one 8-bit plane ---- */

static void clahe_plane(uint8_t luts[TILES][TILES][256], const uint8_t *src, uint8_t *dst, uint32_t w, uint32_t h,
			double clip)
{
	/* An image that the tiles do not divide is extended right and down to
	 * a multiple of them (BORDER_REFLECT_101), for the histograms only. */
	uint32_t tw = (w + TILES - 1) / TILES, th = (h + TILES - 1) / TILES, total = tw * th;
	float lut_scale = 255.0f / (float)total;
	int32_t limit = 0;

	if (clip > 0) {
		limit = (int32_t)(clip * total / 256);
		if (limit < 1)
			limit = 1;
	}
	for (uint32_t ty = 0; ty < TILES; ty++)
		for (uint32_t tx = 0; tx < TILES; tx++) {
			int32_t hist[256] = {0}, sum = 0;

			for (uint32_t y = ty * th; y < (ty + 1) * th; y++) {
				const uint8_t *s = src + (size_t)reflect101(y, h) * w;

				for (uint32_t x = tx * tw; x < (tx + 1) * tw; x++)
					hist[s[x < w ? x : (uint32_t)reflect101(x, w)]]++;
			}
			if (limit > 0) {
				int32_t clipped = 0, batch, residual;

				for (int i = 0; i < 256; i++)
					if (hist[i] > limit) {
						clipped += hist[i] - limit;
						hist[i] = limit;
					}
				batch = clipped / 256;
				residual = clipped - batch * 256;
				for (int i = 0; i < 256; i++)
					hist[i] += batch;
				if (residual) {
					int step = 256 / residual > 1 ? 256 / residual : 1;

					for (int i = 0; i < 256 && residual > 0; i += step, residual--)
						hist[i]++;
				}
			}
			for (int i = 0; i < 256; i++) {
				float v;

				sum += hist[i];
				v = rintf((float)sum * lut_scale);
				luts[ty][tx][i] = (uint8_t)(v > 255 ? 255 : v);
			}
		}
	/* Bilinear between the four nearest tiles' tables, in float as cv2. */
	{
		const float inv_tw = 1.0f / (float)tw, inv_th = 1.0f / (float)th;

		for (uint32_t y = 0; y < h; y++) {
			float tyf = (float)y * inv_th - 0.5f;
			int ty1 = (int)floorf(tyf), ty2 = ty1 + 1;
			float ya = tyf - (float)ty1, ya1 = 1.0f - ya;
			const uint8_t *s = src + (size_t)y * w;
			uint8_t *o = dst + (size_t)y * w;

			ty1 = ty1 < 0 ? 0 : ty1;
			ty2 = ty2 > TILES - 1 ? TILES - 1 : ty2;
			for (uint32_t x = 0; x < w; x++) {
				float txf = (float)x * inv_tw - 0.5f;
				int tx1 = (int)floorf(txf), tx2 = tx1 + 1;
				float xa = txf - (float)tx1, xa1 = 1.0f - xa, v;
				uint8_t p = s[x];

				tx1 = tx1 < 0 ? 0 : tx1;
				tx2 = tx2 > TILES - 1 ? TILES - 1 : tx2;
				v = ((float)luts[ty1][tx1][p] * xa1 + (float)luts[ty1][tx2][p] * xa) * ya1 +
				    ((float)luts[ty2][tx1][p] * xa1 + (float)luts[ty2][tx2][p] * xa) * ya;
				v = rintf(v);
				o[x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
			}
		}
	}
}

int albu_clahe(struct albu *a, uint8_t *rgb, uint32_t w, uint32_t h, double clip)
{
	size_t n = (size_t)w * h;
	void *p = a->copy;
	int r;

	if (!w || !h || !(clip >= 0))
		return -EINVAL;
	r = grow(&p, &a->copy_cap, 2 * n, 1);
	a->copy = p;
	if (r < 0)
		return r;
	albu_rgb2lab(rgb, n, true);
	for (size_t i = 0; i < n; i++)
		a->copy[i] = rgb[i * 3];
	clahe_plane(a->luts, a->copy, a->copy + n, w, h, clip);
	for (size_t i = 0; i < n; i++)
		rgb[i * 3] = a->copy[n + i];
	albu_lab2rgb(rgb, n, true);
	return 0;
}

/* ---- the drawn ops ---- */

int albu_apply(struct albu *a, uint8_t *rgb, uint32_t w, uint32_t h, const struct albu_draw *d, bool flipud,
	       bool fliplr)
{
	int r = 0;

	/* Scratch first, for the largest k, so that a failure leaves the image
	 * as it was (the ops' own grows are then no-ops). */
	if (d->blur || d->median || d->clahe) {
		size_t row = (size_t)w * 3, bytes = (row + 6 * 3 + LANES) * h;
		size_t words = row + (w + 6) + (h + 6) + (49 * 255 + 4) / 4 + 1;
		void *p = a->copy;

		r = grow(&p, &a->copy_cap, bytes, 1);
		a->copy = p;
		if (r == 0 && d->blur) {
			p = a->rows;
			r = grow(&p, &a->rows_cap, row * h, sizeof(uint16_t));
			a->rows = p;
		}
		if (r == 0 && d->blur) {
			p = a->words;
			r = grow(&p, &a->words_cap, words, sizeof(uint32_t));
			a->words = p;
		}
		if (r < 0)
			return r;
	}
	if (d->blur)
		albu_blur(a, rgb, w, h, d->blur_k);
	if (d->median)
		albu_median(a, rgb, w, h, d->median_k);
	if (d->gray)
		albu_gray(rgb, (size_t)w * h);
	if (d->clahe) {
		if (flipud)
			mirror_rows(rgb, w, h);
		if (fliplr)
			mirror_columns(rgb, w, h);
		albu_clahe(a, rgb, w, h, d->clip);
		if (flipud)
			mirror_rows(rgb, w, h);
		if (fliplr)
			mirror_columns(rgb, w, h);
	}
	return 0;
}
