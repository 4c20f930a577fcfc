/* SPDX-License-Identifier: MIT */
/*
 * torchvision's tensor kernels on a uint8 RGB image, in float32 as they
 * compute: what AugMix applies (it converts a PIL image to a tensor first).
 * Blends of _blend (mul, add with alpha, clamp, truncation), the tensor
 * grayscale (0.2989, 0.587, 0.114, floored), sharpness's float conv
 * rounded, autocontrast's min/max scaling, posterize's mask, and the
 * affine grid (_affine_grid, grid_sample bilinear or nearest,
 * align_corners=False, zeros padding or the fill through a mask, rounded).
 * Equalize and invert equal Pillow's (color.c).
 */
#ifndef STOKER_TVTENSOR_H
#define STOKER_TVTENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "pixelops.h"

/* torch.linspace(start, end, n)[i] in float32, as torch's CPU kernel computes it. */
double linspace_f32(double start, double end, unsigned n, unsigned i);

void tvt_brightness(struct rgb_image *im, double factor);
void tvt_saturation(struct rgb_image *im, double factor);
void tvt_contrast(struct rgb_image *im, double factor);
/* tmp: stride * height bytes */
void tvt_sharpness(struct rgb_image *im, double factor, uint8_t *tmp);
void tvt_posterize(struct rgb_image *im, unsigned bits);
void tvt_solarize(struct rgb_image *im, double threshold);
void tvt_autocontrast(struct rgb_image *im);
/*
 * F.affine / F.rotate on a tensor: the inverse matrix m (torchvision's, for
 * a centre relative to the image centre) sampled by grid_sample into out
 * (in's size and stride). fill NULL: None (zeros padding).
 */
void tvt_grid(const struct rgb_image *in, uint8_t *out, const double m[6], bool bilinear, const uint8_t *fill);

#endif
