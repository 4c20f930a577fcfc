/* SPDX-License-Identifier: MIT */
/*
 * The Albumentations Ultralytics applies by default when the package is
 * importable (ultralytics/data/augment.py, Albumentations with no custom
 * transforms; albumentations 2.x): Blur, MedianBlur, ToGray and CLAHE, each
 * with probability p (0.01), in that order, on the training image after
 * MixUp and before RandomHSV. (Its RandomBrightnessContrast, RandomGamma
 * and ImageCompression have p = 0: never applied.)
 *
 * Each op is OpenCV's arithmetic, ported exactly (tests/ultralytics/
 * test_albumentations.py, against cv2 on real photos and every colour):
 *   Blur        cv2.blur, kernel k x k, k odd uniform in 3..7, BORDER_REFLECT_101
 *   MedianBlur  cv2.medianBlur, k as Blur, BORDER_REPLICATE
 *   ToGray      cv2.cvtColor RGB2GRAY, replicated to 3 channels
 *   CLAHE       cv2.createCLAHE(clip, 8 x 8 tiles) on the L of cv2's 8-bit
 *               RGB2LAB, then LAB2RGB; clip uniform in [1, 4)
 *
 * Ultralytics' image is BGR and Albumentations takes it for RGB: ToGray's
 * and LAB's red weights fall on blue. Our pixels are RGB, so the same
 * arithmetic runs with the channel order turned, giving Ultralytics' bytes.
 *
 * One struct albu per worker thread (scratch kept between calls); not
 * thread safe.
 */
#ifndef STOKER_ALBU_H
#define STOKER_ALBU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rng.h"

struct albu;

int albu_new(struct albu **out);
void albu_free(struct albu *a);

/* One sample's draws. Every draw is always made (7 of them), so that the
 * stream's use does not depend on p. */
struct albu_draw {
	bool blur, median, gray, clahe;
	uint32_t blur_k, median_k; /* 3, 5 or 7 */
	double clip;               /* CLAHE's clip limit */
};
void albu_draw(struct rng *r, double p, struct albu_draw *d);

/*
 * The drawn ops on an RGB image of w x h (rows of w * 3 bytes), in place.
 * flipud / fliplr: the image was already flipped (detect.c folds the flips
 * into the warp, while Ultralytics flips after Albumentations): Blur,
 * MedianBlur and ToGray commute with flips, CLAHE's tiles do not, so it
 * runs on the image flipped back. 0 or -ENOMEM (the image untouched).
 */
int albu_apply(struct albu *a, uint8_t *rgb, uint32_t w, uint32_t h, const struct albu_draw *d, bool flipud,
	       bool fliplr);

/* The single ops, for the tests: k odd 3..255; -EINVAL, -ENOMEM. */
int albu_blur(struct albu *a, uint8_t *rgb, uint32_t w, uint32_t h, uint32_t k);
int albu_median(struct albu *a, uint8_t *rgb, uint32_t w, uint32_t h, uint32_t k);
void albu_gray(uint8_t *rgb, size_t pixels);
int albu_clahe(struct albu *a, uint8_t *rgb, uint32_t w, uint32_t h, double clip);
/* cv2's 8-bit RGB2LAB and LAB2RGB, in place, with Albumentations' BGR turn
 * when `turned` (the red weights on the third byte). */
void albu_rgb2lab(uint8_t *px, size_t pixels, bool turned);
void albu_lab2rgb(uint8_t *px, size_t pixels, bool turned);

#endif
