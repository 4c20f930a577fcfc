/* SPDX-License-Identifier: MIT */
/*
 * Affine warps as Pillow computes them (Geometry.c): im.transform(size,
 * AFFINE, matrix, resample, fillcolor) with its nearest path in 16.16
 * fixed point (or its scale-only and floating paths where Pillow takes
 * them), its bilinear and bicubic filters, and im.rotate(angle, ...) with
 * its matrix and fast paths. torchvision's F.affine / F.rotate and timm's
 * policy ops on PIL images are these calls.
 */
#ifndef STOKER_AFFINE_H
#define STOKER_AFFINE_H

#include <stdint.h>

#include "pixelops.h"

enum affine_resample {
	RESAMPLE_NEAREST = 0, /* PIL's Image.NEAREST */
	RESAMPLE_BILINEAR = 2,
	RESAMPLE_BICUBIC = 3,
};

/*
 * in.transform(in.size, AFFINE, a, resample, fillcolor=fill): output pixel
 * (x, y) samples input (a0 x + a1 y + a2, a3 x + a4 y + a5) at pixel
 * centres; outside the input, fill. out has in's size and stride and must
 * not overlap in.
 */
void affine_transform(const struct rgb_image *in, uint8_t *out, const double a[6], enum affine_resample resample,
		      const uint8_t fill[3]);

/* in.rotate(angle, resample, fillcolor=fill) (no expand, centre, translate) into out. */
void affine_rotate(const struct rgb_image *in, uint8_t *out, double angle, enum affine_resample resample,
		   const uint8_t fill[3]);

/*
 * torchvision's _get_inverse_affine_matrix(center, angle, translate, scale,
 * shear) (inverted: the matrix PIL's transform takes).
 */
void affine_tv_matrix(const double center[2], double angle, const double translate[2], double scale,
		      const double shear[2], double m[6]);

#endif
