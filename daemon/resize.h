/* SPDX-License-Identifier: MIT */
/*
 * Separable, fixed-point, antialiased resampling of RGB images, with the
 * same filter as Pillow's BILINEAR (triangle filter whose support widens
 * with the downscale factor), of an arbitrary (fractional) source window.
 */
#ifndef STOKER_RESIZE_H
#define STOKER_RESIZE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

struct resizer; /* cached coefficient tables and a scratch buffer */

int resizer_new(struct resizer **out);
void resizer_free(struct resizer *r);

/*
 * Resample the window (x, y, w, h) of `src` (src_w x src_h RGB, src_stride
 * bytes a row) to dst_w x dst_h RGB at `dst` (dst_stride bytes a row),
 * mirrored horizontally if `flip`. The window must lie inside the source.
 * -ENOMEM on allocation failure, -EINVAL on a bad window.
 */
int resize_rgb(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
	       double x, double y, double w, double h, uint8_t *dst, uint32_t dst_w, uint32_t dst_h,
	       size_t dst_stride, bool flip);

/*
 * Pillow (>= 13) resamples vertically first when the height shrinks by more
 * than twice as many pixels as the width: (src_h - dst_h) > 2 (src_w - dst_w).
 * The order changes results by at most 1 (the 8-bit intermediate).
 * resize_rgb() applies this rule to its own source and output sizes.
 */
bool resize_vertical_first(uint32_t src_w, uint32_t src_h, uint32_t dst_w, uint32_t dst_h);

/*
 * As resize_rgb, from 4-byte pixels (RGBX, X ignored) such as the decoder
 * writes, the output still RGB, with the order of the passes given: pass
 * resize_vertical_first() of the resize being emulated, which may be of a
 * larger image than the part at hand.
 */
int resize_rgbx(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
		double x, double y, double w, double h, uint8_t *dst, uint32_t dst_w, uint32_t dst_h,
		size_t dst_stride, bool flip, bool vertical_first);

/*
 * The source pixels [*first, *end) along one axis of in_size pixels that
 * resampling its window (x, w) to out_size pixels reads. Passing only those
 * as the source, with the window moved by -*first, gives the same result
 * (to float rounding of the window), so a decoder can skip the rest.
 * -EINVAL on a bad window.
 */
int resize_span(uint32_t in_size, double x, double w, uint32_t out_size, uint32_t *first, uint32_t *end);

#endif
