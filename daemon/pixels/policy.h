/* SPDX-License-Identifier: MIT */
/*
 * The augmentation policies, with their op tables, magnitude bins, signs
 * and probabilities as their references' sources have them: torchvision's
 * RandAugment, TrivialAugmentWide, AutoAugment (ImageNet, CIFAR10, SVHN) and
 * AugMix (with the tensor kernels it uses);
 * timm's rand_augment_transform and auto_augment_transform strings.
 */
#ifndef STOKER_POLICY_H
#define STOKER_POLICY_H

#include <stdbool.h>

#include "pixelops_int.h"

struct policy;

bool policy_known(const char *name);
int policy_parse(const char *name, const struct params *ps, struct policy **out);
int policy_apply(const struct policy *pol, struct rgb_image *im, struct rng *rng, struct pixel_scratch *s);
void policy_free(struct policy *pol);
/* pixel_op_apply_policy_op */
int policy_apply_named(const struct policy *pol, const char *spec, struct rgb_image *im, struct pixel_scratch *s,
		       char *err, size_t errlen);

#endif
