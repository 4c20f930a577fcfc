/* SPDX-License-Identifier: MIT */
/*
 * The per-sample transform ops that work on a decoded RGB image after the
 * first geometric op (colour, blur, affine, the augmentation policies), as
 * torchvision's PIL path and timm compute them.
 *
 * An op is named and parameterised as the attach request carries it (one
 * `struct op_param` per keyword, numbers or a text), parsed and validated
 * once at attach (pixel_op_parse: a bad name or value is refused with the
 * op and parameter named, nothing reaches the workers), then applied by
 * the workers with draws from the sample's Philox stream.
 *
 * The pipeline (pipeline.h) owns the list and the geometric ops (crops,
 * resizes, flips, erasing, normalisation); it hands every other op here.
 *
 * The ops, their parameters (torchvision's keywords and defaults; a pair
 * is two numbers, a fill one or three numbers 0..255, "none" or no
 * numbers is Python's None):
 *   ColorJitter(brightness, contrast, saturation, hue)
 *   Grayscale(num_output_channels=3 only: the image stays RGB)
 *   RandomGrayscale(p=0.1)
 *   GaussianBlur(kernel_size: odd, one or (x, y); sigma=(0.1, 2.0))
 *   RandomPosterize(bits 1..8, p=0.5)    RandomSolarize(threshold, p=0.5)
 *   RandomEqualize(p=0.5)    RandomAutocontrast(p=0.5)    RandomInvert(p=0.5)
 *   RandomAdjustSharpness(sharpness_factor, p=0.5)
 *   RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31,
 *               interpolation="nearest"|"bilinear"|"bicubic", fill=None)
 *   TrivialAugmentWide(num_magnitude_bins=31, interpolation, fill)
 *   AutoAugment(policy="imagenet"|"cifar10"|"svhn", interpolation, fill)
 *   AugMix(severity=3, mixture_width=3, chain_depth=-1, alpha=1.0, all_ops=1,
 *          interpolation="bilinear"|"nearest", fill=None): torchvision's
 *          tensor kernels (tvtensor.c), as it runs them
 *   rand_augment_transform(config_str="rand-m9-n2-mstd0.5-mmax10-inc1-p0.5",
 *               img_mean=(128, 128, 128), interpolation="random" (timm's
 *               bilinear-or-bicubic per op) | "bilinear" | "bicubic" |
 *               "nearest", translate_pct=0.45, translate_const: accepted,
 *               unused by these policies) -- timm's hparams by their names
 *   auto_augment_transform(config_str="original"|"v0"[-mstdS], the same hparams)
 */
#ifndef STOKER_PIXELOPS_H
#define STOKER_PIXELOPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rng.h"

/* A packed RGB image: 3 bytes a pixel, `stride` bytes a row. */
struct rgb_image {
	uint8_t *px;
	uint32_t width, height;
	size_t stride;
};

/* One keyword parameter of an op, as the client sent it: numbers
 * (n_numbers of them; a scalar is one) or a text (NULL when none). */
struct op_param {
	const char *key;
	const double *numbers;
	size_t n_numbers;
	const char *text;
};

struct pixel_op;
/* Per-worker scratch the ops reuse (no allocation per sample in steady state). */
struct pixel_scratch;

/* Is `name` an op of this module (the pipeline asks before parsing)? */
bool pixel_op_known(const char *name);

/*
 * Parse and validate op `name` with `params`. On error, -EINVAL (or
 * -ENOMEM) and a message naming the op and the parameter in err.
 */
int pixel_op_parse(const char *name, const struct op_param *params, size_t n_params, struct pixel_op **out, char *err,
		   size_t errlen);
void pixel_op_free(struct pixel_op *op);

/* Apply op to im in place (its size may change only where the op says so:
 * none of these do), drawing from rng. 0 or -ENOMEM. */
int pixel_op_apply(const struct pixel_op *op, struct rgb_image *im, struct rng *rng, struct pixel_scratch *scratch);

int pixel_scratch_new(struct pixel_scratch **out);
void pixel_scratch_free(struct pixel_scratch *s);
/* Tests: write every draw an op makes to f ("name value" lines), NULL to stop. */
void pixel_scratch_trace(struct pixel_scratch *s, FILE *f);
/* Tests: apply one op of the policy `op` at a fixed magnitude, no draw:
 * spec "NAME:MAGNITUDE" (the op's own signed magnitude: degrees, pixels,
 * factor, bits, threshold), with the policy's interpolation and fill.
 * -EINVAL with a message when op is no policy or NAME not one of its ops. */
int pixel_op_apply_policy_op(const struct pixel_op *op, const char *spec, struct rgb_image *im,
			     struct pixel_scratch *scratch, char *err, size_t errlen);

#endif
