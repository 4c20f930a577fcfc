/* SPDX-License-Identifier: MIT */
/*
 * OpenCV's cv2.resize(..., interpolation=INTER_LINEAR) of 8-bit images, in
 * its own fixed-point arithmetic (imgproc/src/resize.cpp: 11-bit
 * coefficients rounded from float, the horizontal pass into int rows, the
 * vertical pass as its SIMD kernel rounds it), and its special case: an
 * exact 2x shrink in both directions is INTER_AREA's 2x2 mean. This is
 * what Ultralytics' load_image does to every image, so letterboxed batches
 * can match its own pixel for pixel (bit-exact against opencv-python 5.0,
 * tests/detect_parity/test_ultralytics_parity.py and tests/unit/test_rect.c;
 * within 1 of OpenCV 4.x, which rounds each row's last partial vector
 * exactly). Unlike resize.c's filter, no antialiasing: a large shrink
 * samples 2 x 2 source pixels per output pixel, as OpenCV does.
 *
 * Vectorised with AVX2 (the default where the CPU has it) and AVX-512 (when
 * asked for), picked as resize.c's kernels are (resize_force_isa(),
 * STOKER_RESIZE_ISA=scalar|avx2|avx512); every kernel gives the portable
 * code's bytes.
 *
 * One `struct cv_resizer` per thread (coefficient tables and two rows of
 * scratch, reused); not thread safe.
 */
#ifndef STOKER_RESIZE_CV_H
#define STOKER_RESIZE_CV_H

#include <stddef.h>
#include <stdint.h>

#include "resize.h"

struct cv_resizer;

int cv_resizer_new(struct cv_resizer **out);
/* The kernels `r` uses: RESIZE_ISA_SCALAR, _AVX2 or _AVX512. */
enum resize_isa cv_resizer_isa(const struct cv_resizer *r);
/* Accepts NULL. */
void cv_resizer_free(struct cv_resizer *r);

/*
 * Resize all of `src` (src_w x src_h pixels of `src_bpp` bytes, 3 or 4,
 * whose first three are R, G, B; src_stride bytes a row) to dst_w x dst_h
 * RGB at `dst` (dst_stride bytes a row). -EINVAL for empty sizes or a bad
 * bpp; -ENOMEM.
 */
int cv_resize_linear(struct cv_resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
		     unsigned src_bpp, uint8_t *dst, uint32_t dst_w, uint32_t dst_h, size_t dst_stride);

#endif
