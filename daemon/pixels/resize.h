/* SPDX-License-Identifier: MIT */
/*
 * Separable, fixed-point, antialiased resampling of RGB images, with the
 * same filters as Pillow's BILINEAR (triangle filter whose support widens
 * with the downscale factor) and BICUBIC (Keys' cubic, a = -0.5, likewise
 * widened), of an arbitrary (fractional) source window; and Pillow's
 * NEAREST (its affine nearest-neighbour scaling, exact).
 * Results are within 1 of Pillow's (14-bit rather than Pillow's 22-bit
 * coefficients; Pillow's 8-bit intermediate image kept), and the same on
 * every CPU: the SIMD kernels (SSE2, AVX2, AVX-512, picked at run time) and
 * the portable ones do the same integer arithmetic.
 */
#ifndef STOKER_RESIZE_H
#define STOKER_RESIZE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

struct resizer; /* cached coefficient tables and a scratch buffer */

/* Pillow's resampling filters of Image.resize. */
enum resize_filter {
	RESIZE_BILINEAR = 0, /* the default of every new resizer */
	RESIZE_BICUBIC = 1,
	RESIZE_NEAREST = 2,
};

int resizer_new(struct resizer **out);
void resizer_free(struct resizer *r);

/* The filter resize_rgb() and resize_rgbx() use from now on (an unknown one is ignored). */
void resizer_set_filter(struct resizer *r, enum resize_filter filter);

/*
 * Resample the window (x, y, w, h) of `src` (src_w x src_h RGB, src_stride
 * bytes a row) to dst_w x dst_h RGB at `dst` (dst_stride bytes a row),
 * mirrored horizontally if `flip`. The window must lie inside the source.
 * -ENOMEM on allocation failure, -EINVAL on a bad window.
 * (A convenience: it widens the pixels it reads to 4 bytes first, then does
 * what resize_rgbx does, with the same result.)
 */
int resize_rgb(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride, double x,
	       double y, double w, double h, uint8_t *dst, uint32_t dst_w, uint32_t dst_h, size_t dst_stride,
	       bool flip);

/* resize_rgb() with the order of the passes given, as resize_rgbx(). */
int resize_rgb_ordered(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
		       double x, double y, double w, double h, uint8_t *dst, uint32_t dst_w, uint32_t dst_h,
		       size_t dst_stride, bool flip, bool vertical_first);

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
 * larger image than the part at hand. Reads only the src_w x src_h pixels,
 * but all 4 bytes of those it reads (X included, so it must be initialised).
 */
int resize_rgbx(struct resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride, double x,
		double y, double w, double h, uint8_t *dst, uint32_t dst_w, uint32_t dst_h, size_t dst_stride,
		bool flip, bool vertical_first);

/*
 * The source pixels [*first, *end) along one axis of in_size pixels that
 * resampling its window (x, w) to out_size pixels reads. Passing only those
 * as the source, with the window moved by -*first, gives the same result
 * (to float rounding of the window), so a decoder can skip the rest.
 * -EINVAL on a bad window.
 */
int resize_span(uint32_t in_size, double x, double w, uint32_t out_size, uint32_t *first, uint32_t *end);
/* resize_span() for `filter` (resize_span() is BILINEAR's). */
int resize_span_filter(enum resize_filter filter, uint32_t in_size, double x, double w, uint32_t out_size,
		       uint32_t *first, uint32_t *end);

/* The kernels a resizer uses. */
enum resize_isa {
	RESIZE_ISA_AUTO = 0, /* the default: AVX2, else SSE2 on x86-64, else SCALAR */
	RESIZE_ISA_SCALAR,   /* portable C */
	RESIZE_ISA_SSE2,     /* x86-64 baseline */
	RESIZE_ISA_AVX2,
	RESIZE_ISA_AVX512, /* AVX-512F + BW; never the default (see resize.c) */
};

/*
 * For tests and benchmarks only: resizers created from now on (by any
 * thread) use `isa`'s kernels, RESIZE_ISA_AUTO restoring the default. Not
 * thread safe against a concurrent resizer_new(). -ENOTSUP if this build or
 * CPU cannot run them. Without it, resizer_new() also honours the
 * environment variable STOKER_RESIZE_ISA (scalar, sse2, avx2, avx512),
 * where the CPU can run it.
 */
int resize_force_isa(enum resize_isa isa);

/* The kernels a resampler created now uses, as above: the forced ISA, else
 * STOKER_RESIZE_ISA's where the CPU runs it, else AVX2, SSE2 or SCALAR.
 * resize_cv.c picks by it too (never RESIZE_ISA_AUTO). */
enum resize_isa resize_default_isa(void);

/* The kernels `r` uses (never RESIZE_ISA_AUTO). */
enum resize_isa resizer_isa(const struct resizer *r);

#endif
