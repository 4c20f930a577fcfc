/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "copypaste.h"
#include "grow.h"
#include "instmask.h"

struct copypaste {
	struct instmask *fill;
	uint8_t *mask; /* w x h; rows y0 .. y1 - 1 valid, the others empty */
	size_t mask_cap;
	uint32_t w, h, y0, y1;
};

int copypaste_new(struct copypaste **out)
{
	struct copypaste *c = calloc(1, sizeof(*c));
	int r = -ENOMEM;

	if (!c)
		goto fail;
	r = instmask_new(&c->fill);
	if (r < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	copypaste_free(c);
	return r;
}

void copypaste_free(struct copypaste *c)
{
	if (!c)
		return;
	instmask_free(c->fill);
	free(c->mask);
	free(c);
}

/*
 * The rows a polygon's fill can touch, widened: cv2 draws and fills only
 * between its points' smallest and largest y (clipped to the image). A
 * point whose truncation leaves int32 (or NaN) becomes INT32_MIN: row 0.
 */
static void rows_of(const float *xy, uint32_t n, uint32_t h, uint32_t *lo, uint32_t *hi)
{
	for (uint32_t i = 0; i < n; i++) {
		float y = xy[(size_t)i * 2 + 1];
		uint32_t r;

		if (y > -1.0f && y < (float)h)
			r = y < 0 ? 0 : (uint32_t)y;
		else if (y >= (float)h && y < 2147483648.0f)
			r = h - 1;
		else
			r = 0;
		*lo = r < *lo ? r : *lo;
		*hi = r + 1 > *hi ? r + 1 : *hi;
	}
}

int copypaste_mask(struct copypaste *c, uint32_t w, uint32_t h, const float *seg, uint32_t npts,
		   const uint32_t *selected, uint32_t count)
{
	uint32_t lo = UINT32_MAX, hi = 0;
	int r;

	if (w == 0 || h == 0 || w > INT_MAX / 2 || h > INT_MAX / 2 || (count && npts == 0))
		return -EINVAL;
	c->w = w;
	c->h = h;
	c->y0 = c->y1 = 0;
	if (count == 0)
		return 0;
	if (grow((void **)&c->mask, &c->mask_cap, (size_t)w * h, 1) < 0)
		return -ENOMEM;
	for (uint32_t k = 0; k < count; k++)
		rows_of(seg + (size_t)selected[k] * npts * 2, npts, h, &lo, &hi);
	memset(c->mask + (size_t)lo * w, 0, (size_t)(hi - lo) * w);
	for (uint32_t k = 0; k < count; k++) {
		r = instmask_fill_f32(c->fill, c->mask, w, h, seg + (size_t)selected[k] * npts * 2, npts);
		if (r < 0)
			return r;
	}
	c->y0 = lo;
	c->y1 = hi;
	return 0;
}

static inline void px(uint8_t *dst, const uint8_t *src)
{
	dst[0] = src[0];
	dst[1] = src[1];
	dst[2] = src[2];
}

void copypaste_row(const struct copypaste *c, uint32_t y, uint8_t *row, const uint8_t *src)
{
	const uint8_t *m;
	uint32_t w = c->w;

	if (y < c->y0 || y >= c->y1)
		return;
	m = c->mask + (size_t)y * w;
	if (src) {
		for (uint32_t x = 0; x < w; x++)
			if (m[x])
				px(row + (size_t)x * 3, src + (size_t)x * 3);
		return;
	}
	/* cv2.flip(im, 1) read before any write: each mirrored pair at once */
	for (uint32_t x = 0; x <= (w - 1) / 2; x++) {
		const uint32_t x2 = w - 1 - x;
		uint8_t a[3], b[3];

		if (!m[x] && !m[x2])
			continue;
		px(a, row + (size_t)x * 3);
		px(b, row + (size_t)x2 * 3);
		if (m[x])
			px(row + (size_t)x * 3, b);
		if (m[x2])
			px(row + (size_t)x2 * 3, a);
	}
}

void copypaste_image(const struct copypaste *c, uint8_t *img, size_t stride, const uint8_t *src, size_t src_stride)
{
	for (uint32_t y = c->y0; y < c->y1; y++)
		copypaste_row(c, y, img + (size_t)y * stride, src ? src + (size_t)y * src_stride : NULL);
}

void copypaste_image_flipped(const struct copypaste *c, uint8_t *img, size_t stride, const uint8_t *src,
			     size_t src_stride, bool flipud, bool fliplr)
{
	const uint32_t w = c->w;

	for (uint32_t my = c->y0; my < c->y1; my++) {
		const uint32_t y = flipud ? c->h - 1 - my : my;
		const uint8_t *m = c->mask + (size_t)my * w, *s = src + (size_t)y * src_stride;
		uint8_t *row = img + (size_t)y * stride;

		if (!fliplr) {
			copypaste_row(c, my, row, s);
			continue;
		}
		for (uint32_t x = 0; x < w; x++)
			if (m[w - 1 - x])
				px(row + (size_t)x * 3, s + (size_t)x * 3);
	}
}
