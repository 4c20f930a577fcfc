/* SPDX-License-Identifier: MIT */
#include <math.h>
#include <string.h>

#include "tvtensor.h"

/*
 * torch's fused multiply-adds are fmaf here: one libm call each on a
 * baseline x86-64, one instruction in the clone gcc makes for CPUs with
 * FMA (chosen at load; the same correctly rounded results). Not under
 * ThreadSanitizer: the clones' resolver runs during relocation, before its
 * runtime is up, and crashes every program that links this file.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define FMA_CLONES
#endif

double linspace_f32(double start, double end, unsigned n, unsigned i)
{
	/* the step in float; the first half from start, the second from end, each one rounding of step * i added */
	const float s = (float)start, e = (float)end;
	const float step = n > 1 ? (e - s) / (float)(n - 1) : 0.0f;

	if (i < n / 2)
		return (float)((double)s + (double)step * i);
	return (float)((double)e - (double)step * (n - i - 1));
}

/* float -> uint8 as .to(torch.uint8) after clamp_(0, 255): truncation */
static inline uint8_t clamp_trunc(float v)
{
	v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
	return (uint8_t)(int)v;
}

void tvt_brightness(struct rgb_image *im, double factor)
{
	const float f = (float)factor;
	uint8_t lut[256];

	for (int v = 0; v < 256; v++)
		lut[v] = clamp_trunc((float)v * f);
	for (uint32_t y = 0; y < im->height; y++) {
		uint8_t *p = im->px + y * im->stride;

		for (uint32_t i = 0; i < im->width * 3; i++)
			p[i] = lut[p[i]];
	}
}

/* _blend(image, other, ratio) of one level: image.mul(ratio).add_(other, alpha=1 - ratio); torch's
 * add with alpha is a fused multiply-add (checked against its output) */
static inline uint8_t blend(uint8_t v, float other, float ratio, float alpha)
{
	return clamp_trunc(fmaf(alpha, other, (float)v * ratio));
}

/* _rgb_to_grayscale_image, floored (the uint8 path of saturation and contrast) */
static inline float gray(const uint8_t *p)
{
	float l = (float)p[0] * 0.2989f;

	l = fmaf(0.587f, (float)p[1], l);
	l = fmaf(0.114f, (float)p[2], l);
	return floorf(l);
}

FMA_CLONES void tvt_saturation(struct rgb_image *im, double factor)
{
	const float r = (float)factor, a = (float)(1.0 - factor);

	for (uint32_t y = 0; y < im->height; y++) {
		uint8_t *p = im->px + y * im->stride;

		for (uint32_t x = 0; x < im->width; x++, p += 3) {
			float g = gray(p);

			p[0] = blend(p[0], g, r, a);
			p[1] = blend(p[1], g, r, a);
			p[2] = blend(p[2], g, r, a);
		}
	}
}

FMA_CLONES void tvt_contrast(struct rgb_image *im, double factor)
{
	const float r = (float)factor, a = (float)(1.0 - factor);
	double sum = 0;
	float mean;
	uint8_t lut[256];

	for (uint32_t y = 0; y < im->height; y++) {
		const uint8_t *p = im->px + y * im->stride;

		for (uint32_t x = 0; x < im->width; x++, p += 3)
			sum += gray(p);
	}
	/* torch.mean in float32: the sum of floored levels is exact there below 2^24 */
	mean = (float)sum / (float)((double)im->width * im->height);
	for (int v = 0; v < 256; v++)
		lut[v] = blend((uint8_t)v, mean, r, a);
	for (uint32_t y = 0; y < im->height; y++) {
		uint8_t *p = im->px + y * im->stride;

		for (uint32_t i = 0; i < im->width * 3; i++)
			p[i] = lut[p[i]];
	}
}

FMA_CLONES void tvt_sharpness(struct rgb_image *im, double factor, uint8_t *tmp)
{
	const float k1 = (float)(1.0 / 13.0), k5 = (float)(5.0 / 13.0), a = (float)(1.0 - factor);
	const size_t st = im->stride;

	if (im->width <= 2 || im->height <= 2)
		return;
	memcpy(tmp, im->px, st * im->height);
	for (uint32_t y = 1; y + 1 < im->height; y++) {
		const uint8_t *u = tmp + (y - 1) * st, *m = tmp + y * st, *d = tmp + (y + 1) * st;
		uint8_t *o = im->px + y * st;

		for (uint32_t i = 3; i < (im->width - 1) * 3; i++) {
			/* conv2d with 1/13, 5/13 in the middle, rounded half to even */
			float s = (float)u[i - 3] * k1 + (float)u[i] * k1 + (float)u[i + 3] * k1;
			float v = (float)m[i];

			s += (float)m[i - 3] * k1 + v * k5 + (float)m[i + 3] * k1;
			s += (float)d[i - 3] * k1 + (float)d[i] * k1 + (float)d[i + 3] * k1;
			s = nearbyintf(s);
			/* view.add_(blurred - view, alpha=1 - factor) */
			o[i] = clamp_trunc(fmaf(a, s - v, v));
		}
	}
}

void tvt_posterize(struct rgb_image *im, unsigned bits)
{
	uint8_t mask;

	if (bits >= 8)
		return;
	mask = (uint8_t)(((1u << bits) - 1) << (8 - bits));
	for (uint32_t y = 0; y < im->height; y++) {
		uint8_t *p = im->px + y * im->stride;

		for (uint32_t i = 0; i < im->width * 3; i++)
			p[i] &= mask;
	}
}

void tvt_solarize(struct rgb_image *im, double threshold)
{
	for (uint32_t y = 0; y < im->height; y++) {
		uint8_t *p = im->px + y * im->stride;

		for (uint32_t i = 0; i < im->width * 3; i++)
			p[i] = p[i] >= threshold ? (uint8_t)(255 - p[i]) : p[i];
	}
}

void tvt_autocontrast(struct rgb_image *im)
{
	uint8_t lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0}, lut[3][256];

	for (uint32_t y = 0; y < im->height; y++) {
		const uint8_t *p = im->px + y * im->stride;

		for (uint32_t x = 0; x < im->width; x++, p += 3)
			for (int c = 0; c < 3; c++) {
				lo[c] = p[c] < lo[c] ? p[c] : lo[c];
				hi[c] = p[c] > hi[c] ? p[c] : hi[c];
			}
	}
	for (int c = 0; c < 3; c++) {
		float mn = lo[c], inv = ((float)hi[c] - mn) * (float)(1.0 / 255.0);

		if (hi[c] == lo[c]) {
			mn = 0.0f;
			inv = 1.0f;
		}
		for (int v = 0; v < 256; v++)
			lut[c][v] = clamp_trunc(((float)v - mn) / inv);
	}
	for (uint32_t y = 0; y < im->height; y++) {
		uint8_t *p = im->px + y * im->stride;

		for (uint32_t x = 0; x < im->width; x++, p += 3)
			for (int c = 0; c < 3; c++)
				p[c] = lut[c][p[c]];
	}
}

FMA_CLONES void tvt_grid(const struct rgb_image *in, uint8_t *out, const double m[6], bool bilinear,
			 const uint8_t *fill)
{
	const uint32_t w = in->width, h = in->height;
	const float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
	/* theta (float32), transposed and divided by [0.5 w, 0.5 h] */
	const float r00 = (float)m[0] / hw, r10 = (float)m[1] / hw, r20 = (float)m[2] / hw;
	const float r01 = (float)m[3] / hh, r11 = (float)m[4] / hh, r21 = (float)m[5] / hh;

	for (uint32_t y = 0; y < h; y++) {
		const float by = (float)linspace_f32((1.0 - h) * 0.5, (h - 1.0) * 0.5, h, y);
		uint8_t *o = out + (size_t)y * in->stride;

		for (uint32_t x = 0; x < w; x++, o += 3) {
			const float bx = (float)linspace_f32((1.0 - w) * 0.5, (w - 1.0) * 0.5, w, x);
			/* base_grid.bmm(theta): x * r0, then y * r1 fused in, then r2 added (torch's sgemm) */
			float gx = fmaf(by, r10, bx * r00) + r20, gy = fmaf(by, r11, bx * r01) + r21;
			/* grid_sample's unnormalise, align_corners=False: (g + 1) * size / 2 - 0.5 */
			float ix = (gx + 1.0f) * ((float)w / 2) - 0.5f, iy = (gy + 1.0f) * ((float)h / 2) - 0.5f;
			float v[3] = {0, 0, 0}, mask = 0.0f;

			if (bilinear) {
				float xw = floorf(ix), yn = floorf(iy);
				float we = ix - xw, e = 1.0f - we, n = iy - yn, s = 1.0f - n;
				const float wt[4] = {s * e, s * we, n * e, n * we};
				const long xs[4] = {(long)xw, (long)xw + 1, (long)xw, (long)xw + 1};
				const long ys[4] = {(long)yn, (long)yn, (long)yn + 1, (long)yn + 1};

				for (int k = 0; k < 4; k++) {
					const uint8_t *p;

					if (xs[k] < 0 || xs[k] >= (long)w || ys[k] < 0 || ys[k] >= (long)h)
						continue;
					p = in->px + (size_t)ys[k] * in->stride + 3 * (size_t)xs[k];
					for (int c = 0; c < 3; c++)
						v[c] += (float)p[c] * wt[k];
					mask += wt[k];
				}
			} else {
				long xi = (long)nearbyintf(ix), yi = (long)nearbyintf(iy);

				if (xi >= 0 && xi < (long)w && yi >= 0 && yi < (long)h) {
					const uint8_t *p = in->px + (size_t)yi * in->stride + 3 * (size_t)xi;

					for (int c = 0; c < 3; c++)
						v[c] = p[c];
					mask = 1.0f;
				}
			}
			for (int c = 0; c < 3; c++) {
				if (fill && bilinear)
					v[c] = (v[c] - (float)fill[c]) * mask + (float)fill[c];
				else if (fill && mask < 0.5f)
					v[c] = fill[c];
				o[c] = clamp_trunc(nearbyintf(v[c]));
			}
		}
	}
}
