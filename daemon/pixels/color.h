/* SPDX-License-Identifier: MIT */
/*
 * Colour and tone on a packed RGB image, in Pillow's own arithmetic (the
 * PIL path torchvision's functional ops and timm's policies take):
 * ImageEnhance's Brightness / Color / Contrast / Sharpness (Image.blend of
 * the image with a degenerate one, in single precision), ImageOps'
 * autocontrast / equalize / posterize / solarize / invert (per-band
 * tables), convert("L"), torchvision's adjust_hue (the HSV round trip of
 * Pillow's Convert.c) and torchvision's gaussian_blur (its tensor kernel:
 * softmax weights, reflect padding, rounded).
 *
 * Each works in place; the ones that need a second image take scratch
 * buffers from the caller (no allocation here).
 */
#ifndef STOKER_COLOR_H
#define STOKER_COLOR_H

#include <stddef.h>
#include <stdint.h>

#include "pixelops.h"

/* ImageEnhance.Brightness(im).enhance(factor) */
void color_brightness(struct rgb_image *im, double factor);
/* ImageEnhance.Color(im).enhance(factor) (torchvision's adjust_saturation) */
void color_saturation(struct rgb_image *im, double factor);
/* ImageEnhance.Contrast(im).enhance(factor) */
void color_contrast(struct rgb_image *im, double factor);
/* ImageEnhance.Sharpness(im).enhance(factor); tmp holds stride * height bytes */
void color_sharpness(struct rgb_image *im, double factor, uint8_t *tmp);
/* convert("L").convert("RGB") */
void color_grayscale(struct rgb_image *im);
/* ImageOps.autocontrast(im) (cutoff 0, no ignore) */
void color_autocontrast(struct rgb_image *im);
/* ImageOps.equalize(im) */
void color_equalize(struct rgb_image *im);
/* ImageOps.posterize(im, bits), bits 0..8 */
void color_posterize(struct rgb_image *im, unsigned bits);
/* ImageOps.solarize(im, threshold): levels >= threshold inverted */
void color_solarize(struct rgb_image *im, double threshold);
/* ImageOps.invert(im) */
void color_invert(struct rgb_image *im);
/* torchvision's adjust_hue on a PIL image, hue_factor in [-0.5, 0.5] */
void color_hue(struct rgb_image *im, double hue_factor);
/* Per-band level table applied to every pixel. */
void color_lut(struct rgb_image *im, const uint8_t lut[3][256]);
/* Image.blend(deg, im, alpha) into im: deg an image of im's size and stride */
void color_blend(struct rgb_image *im, const uint8_t *deg, float alpha);

/* torchvision's gaussian_blur kernel weights (float32 softmax of the
 * linspace), n odd, into w[n]. */
void color_gaussian_weights(unsigned n, double sigma, float *w);
/* torchvision's gaussian_blur(im, [kx, ky], [sx, sy]) as its PIL path runs
 * it (to a tensor, the float kernel, rounded back). tmp holds
 * color_gaussian_floats(width, height, kx) floats. kx, ky odd, up to 255; a kernel
 * wider than reflect padding allows (torch refuses one: half of it >= the side) reflects
 * again at the far edge rather than failing the sample. */
static inline size_t color_gaussian_floats(uint32_t w, uint32_t h, unsigned kx)
{
	return (size_t)w * 3 * (h + 2) + 3 * (size_t)(kx / 2) * 2;
}
void color_gaussian_blur(struct rgb_image *im, unsigned kx, unsigned ky, double sx, double sy, float *tmp);

#endif
