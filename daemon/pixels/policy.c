/* SPDX-License-Identifier: MIT */
/*
 * The augmentation policies. Two families of primitive ops with one set of
 * pixel routines (color.c, affine.c):
 *  - torchvision's (_AutoAugmentBase._apply_image_or_video_transform on a
 *    PIL image): magnitudes from torch.linspace tables (float32, rebuilt
 *    here bit for bit), F.affine with torchvision's inverse matrix for
 *    shear and translate, PIL's rotate, ImageEnhance with 1 + magnitude;
 *  - timm's (auto_augment.py's AugmentOp): level functions of a magnitude
 *    that may carry Gaussian noise, PIL's transform with timm's own matrices
 *    and fill, a random bilinear/bicubic resample per geometric op.
 *  - torchvision's AugMix, which turns the image into a tensor first: its
 *    tensor kernels (tvtensor.c), Dirichlet weights from gamma variates,
 *    the float32 mix truncated to uint8.
 * Draws follow the references' order and distributions: torch.randint for
 * op choice, torch.rand() <= p / <= 0.5 for application and sign
 * (torchvision); random.random() > p to skip, > 0.5 to negate, gauss
 * (timm).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "affine.h"
#include "color.h"
#include "policy.h"
#include "tvtensor.h"

enum prim {
	P_IDENTITY,
	P_SHEAR_X,
	P_SHEAR_Y,
	P_TRANSLATE_X,
	P_TRANSLATE_Y,
	P_ROTATE,
	P_BRIGHTNESS,
	P_COLOR,
	P_CONTRAST,
	P_SHARPNESS,
	P_POSTERIZE,
	P_SOLARIZE,
	P_AUTOCONTRAST,
	P_EQUALIZE,
	P_INVERT,
	/* timm only */
	P_SOLARIZE_ADD,
	P_TRANSLATE_X_REL,
	P_TRANSLATE_Y_REL,
	P_NPRIM,
};

static const char *const PRIM_NAMES[P_NPRIM] = {
	"Identity",     "ShearX",   "ShearY",   "TranslateX",  "TranslateY",    "Rotate",
	"Brightness",   "Color",    "Contrast", "Sharpness",   "Posterize",     "Solarize",
	"AutoContrast", "Equalize", "Invert",   "SolarizeAdd", "TranslateXRel", "TranslateYRel",
};

/* ---- torchvision ---- */

/* The op order of torchvision's _AUGMENTATION_SPACE dicts (RandAugment, TrivialAugmentWide). */
static const enum prim TV_SPACE[] = {
	P_IDENTITY, P_SHEAR_X,  P_SHEAR_Y,   P_TRANSLATE_X, P_TRANSLATE_Y, P_ROTATE,       P_BRIGHTNESS,
	P_COLOR,    P_CONTRAST, P_SHARPNESS, P_POSTERIZE,   P_SOLARIZE,    P_AUTOCONTRAST, P_EQUALIZE,
};
#define TV_SPACE_N (sizeof(TV_SPACE) / sizeof(TV_SPACE[0]))

/* AugMix's _AUGMENTATION_SPACE: the partial space's keys, then the four enhancements (all_ops) */
static const enum prim AUGMIX_SPACE[] = {
	P_SHEAR_X,      P_SHEAR_Y,  P_TRANSLATE_X, P_TRANSLATE_Y, P_ROTATE,   P_POSTERIZE, P_SOLARIZE,
	P_AUTOCONTRAST, P_EQUALIZE, P_BRIGHTNESS,  P_COLOR,       P_CONTRAST, P_SHARPNESS,
};
#define AUGMIX_PARTIAL 9

struct aa_step {
	enum prim op;
	float p;
	int mag; /* -1: None */
};

/* AutoAugment(AutoAugmentPolicy.IMAGENET) */
static const struct aa_step AA_IMAGENET[25][2] = {
	{{P_POSTERIZE, 0.4f, 8}, {P_ROTATE, 0.6f, 9}},    {{P_SOLARIZE, 0.6f, 5}, {P_AUTOCONTRAST, 0.6f, -1}},
	{{P_EQUALIZE, 0.8f, -1}, {P_EQUALIZE, 0.6f, -1}}, {{P_POSTERIZE, 0.6f, 7}, {P_POSTERIZE, 0.6f, 6}},
	{{P_EQUALIZE, 0.4f, -1}, {P_SOLARIZE, 0.2f, 4}},  {{P_EQUALIZE, 0.4f, -1}, {P_ROTATE, 0.8f, 8}},
	{{P_SOLARIZE, 0.6f, 3}, {P_EQUALIZE, 0.6f, -1}},  {{P_POSTERIZE, 0.8f, 5}, {P_EQUALIZE, 1.0f, -1}},
	{{P_ROTATE, 0.2f, 3}, {P_SOLARIZE, 0.6f, 8}},     {{P_EQUALIZE, 0.6f, -1}, {P_POSTERIZE, 0.4f, 6}},
	{{P_ROTATE, 0.8f, 8}, {P_COLOR, 0.4f, 0}},        {{P_ROTATE, 0.4f, 9}, {P_EQUALIZE, 0.6f, -1}},
	{{P_EQUALIZE, 0.0f, -1}, {P_EQUALIZE, 0.8f, -1}}, {{P_INVERT, 0.6f, -1}, {P_EQUALIZE, 1.0f, -1}},
	{{P_COLOR, 0.6f, 4}, {P_CONTRAST, 1.0f, 8}},      {{P_ROTATE, 0.8f, 8}, {P_COLOR, 1.0f, 2}},
	{{P_COLOR, 0.8f, 8}, {P_SOLARIZE, 0.8f, 7}},      {{P_SHARPNESS, 0.4f, 7}, {P_INVERT, 0.6f, -1}},
	{{P_SHEAR_X, 0.6f, 5}, {P_EQUALIZE, 1.0f, -1}},   {{P_COLOR, 0.4f, 0}, {P_EQUALIZE, 0.6f, -1}},
	{{P_EQUALIZE, 0.4f, -1}, {P_SOLARIZE, 0.2f, 4}},  {{P_SOLARIZE, 0.6f, 5}, {P_AUTOCONTRAST, 0.6f, -1}},
	{{P_INVERT, 0.6f, -1}, {P_EQUALIZE, 1.0f, -1}},   {{P_COLOR, 0.6f, 4}, {P_CONTRAST, 1.0f, 8}},
	{{P_EQUALIZE, 0.8f, -1}, {P_EQUALIZE, 0.6f, -1}},
};

/* AutoAugment(AutoAugmentPolicy.CIFAR10) */
static const struct aa_step AA_CIFAR10[25][2] = {
	{{P_INVERT, 0.1f, -1}, {P_CONTRAST, 0.2f, 6}},          {{P_ROTATE, 0.7f, 2}, {P_TRANSLATE_X, 0.3f, 9}},
	{{P_SHARPNESS, 0.8f, 1}, {P_SHARPNESS, 0.9f, 3}},       {{P_SHEAR_Y, 0.5f, 8}, {P_TRANSLATE_Y, 0.7f, 9}},
	{{P_AUTOCONTRAST, 0.5f, -1}, {P_EQUALIZE, 0.9f, -1}},   {{P_SHEAR_Y, 0.2f, 7}, {P_POSTERIZE, 0.3f, 7}},
	{{P_COLOR, 0.4f, 3}, {P_BRIGHTNESS, 0.6f, 7}},          {{P_SHARPNESS, 0.3f, 9}, {P_BRIGHTNESS, 0.7f, 9}},
	{{P_EQUALIZE, 0.6f, -1}, {P_EQUALIZE, 0.5f, -1}},       {{P_CONTRAST, 0.6f, 7}, {P_SHARPNESS, 0.6f, 5}},
	{{P_COLOR, 0.7f, 7}, {P_TRANSLATE_X, 0.5f, 8}},         {{P_EQUALIZE, 0.3f, -1}, {P_AUTOCONTRAST, 0.4f, -1}},
	{{P_TRANSLATE_Y, 0.4f, 3}, {P_SHARPNESS, 0.2f, 6}},     {{P_BRIGHTNESS, 0.9f, 6}, {P_COLOR, 0.2f, 8}},
	{{P_SOLARIZE, 0.5f, 2}, {P_INVERT, 0.0f, -1}},          {{P_EQUALIZE, 0.2f, -1}, {P_AUTOCONTRAST, 0.6f, -1}},
	{{P_EQUALIZE, 0.2f, -1}, {P_EQUALIZE, 0.6f, -1}},       {{P_COLOR, 0.9f, 9}, {P_EQUALIZE, 0.6f, -1}},
	{{P_AUTOCONTRAST, 0.8f, -1}, {P_SOLARIZE, 0.2f, 8}},    {{P_BRIGHTNESS, 0.1f, 3}, {P_COLOR, 0.7f, 0}},
	{{P_SOLARIZE, 0.4f, 5}, {P_AUTOCONTRAST, 0.9f, -1}},    {{P_TRANSLATE_Y, 0.9f, 9}, {P_TRANSLATE_Y, 0.7f, 9}},
	{{P_AUTOCONTRAST, 0.9f, -1}, {P_SOLARIZE, 0.8f, 3}},    {{P_EQUALIZE, 0.8f, -1}, {P_INVERT, 0.1f, -1}},
	{{P_TRANSLATE_Y, 0.7f, 9}, {P_AUTOCONTRAST, 0.9f, -1}},
};

/* AutoAugment(AutoAugmentPolicy.SVHN) */
static const struct aa_step AA_SVHN[25][2] = {
	{{P_SHEAR_X, 0.9f, 4}, {P_INVERT, 0.2f, -1}},       {{P_SHEAR_Y, 0.9f, 8}, {P_INVERT, 0.7f, -1}},
	{{P_EQUALIZE, 0.6f, -1}, {P_SOLARIZE, 0.6f, 6}},    {{P_INVERT, 0.9f, -1}, {P_EQUALIZE, 0.6f, -1}},
	{{P_EQUALIZE, 0.6f, -1}, {P_ROTATE, 0.9f, 3}},      {{P_SHEAR_X, 0.9f, 4}, {P_AUTOCONTRAST, 0.8f, -1}},
	{{P_SHEAR_Y, 0.9f, 8}, {P_INVERT, 0.4f, -1}},       {{P_SHEAR_Y, 0.9f, 5}, {P_SOLARIZE, 0.2f, 6}},
	{{P_INVERT, 0.9f, -1}, {P_AUTOCONTRAST, 0.8f, -1}}, {{P_EQUALIZE, 0.6f, -1}, {P_ROTATE, 0.9f, 3}},
	{{P_SHEAR_X, 0.9f, 4}, {P_SOLARIZE, 0.3f, 3}},      {{P_SHEAR_Y, 0.8f, 8}, {P_INVERT, 0.7f, -1}},
	{{P_EQUALIZE, 0.9f, -1}, {P_TRANSLATE_Y, 0.6f, 6}}, {{P_INVERT, 0.9f, -1}, {P_EQUALIZE, 0.6f, -1}},
	{{P_CONTRAST, 0.3f, 3}, {P_ROTATE, 0.8f, 4}},       {{P_INVERT, 0.8f, -1}, {P_TRANSLATE_Y, 0.0f, 2}},
	{{P_SHEAR_Y, 0.7f, 6}, {P_SOLARIZE, 0.4f, 8}},      {{P_INVERT, 0.6f, -1}, {P_ROTATE, 0.8f, 4}},
	{{P_SHEAR_Y, 0.3f, 7}, {P_TRANSLATE_X, 0.9f, 3}},   {{P_SHEAR_X, 0.1f, 6}, {P_INVERT, 0.6f, -1}},
	{{P_SOLARIZE, 0.7f, 2}, {P_TRANSLATE_Y, 0.6f, 7}},  {{P_SHEAR_Y, 0.8f, 4}, {P_INVERT, 0.8f, -1}},
	{{P_SHEAR_X, 0.7f, 9}, {P_TRANSLATE_Y, 0.8f, 3}},   {{P_SHEAR_Y, 0.8f, 5}, {P_AUTOCONTRAST, 0.7f, -1}},
	{{P_SHEAR_X, 0.7f, 2}, {P_INVERT, 0.1f, -1}},
};

enum tv_space { SPACE_RA, SPACE_TA, SPACE_AUGMIX };

/*
 * The magnitude of bin i of n for op (RandAugment's and AutoAugment's
 * table, or TrivialAugmentWide's), for an image w x h; whether it is
 * signed. false: the op has no magnitude (None).
 */
static bool tv_magnitude(enum tv_space sp, enum prim op, unsigned n, unsigned i, uint32_t w, uint32_t h, double *mag,
			 bool *sign)
{
	const bool ta = sp == SPACE_TA;

	*sign = true;
	if (sp == SPACE_AUGMIX) {
		switch (op) {
		case P_TRANSLATE_X: *mag = linspace_f32(0.0, w / 3.0, n, i); return true;
		case P_TRANSLATE_Y: *mag = linspace_f32(0.0, h / 3.0, n, i); return true;
		case P_POSTERIZE: {
			/* (4 - (torch.arange(n) / ((n - 1) / 4))).round().int() */
			float x = (float)i / (float)((n - 1) / 4.0);

			*sign = false;
			*mag = (int)nearbyintf(4.0f - x);
			return true;
		}
		default: break; /* the others as RandAugment's */
		}
	}
	switch (op) {
	case P_SHEAR_X:
	case P_SHEAR_Y: *mag = linspace_f32(0.0, ta ? 0.99 : 0.3, n, i); return true;
	case P_TRANSLATE_X: *mag = linspace_f32(0.0, ta ? 32.0 : 150.0 / 331.0 * w, n, i); return true;
	case P_TRANSLATE_Y: *mag = linspace_f32(0.0, ta ? 32.0 : 150.0 / 331.0 * h, n, i); return true;
	case P_ROTATE: *mag = linspace_f32(0.0, ta ? 135.0 : 30.0, n, i); return true;
	case P_BRIGHTNESS:
	case P_COLOR:
	case P_CONTRAST:
	case P_SHARPNESS: *mag = linspace_f32(0.0, ta ? 0.99 : 0.9, n, i); return true;
	case P_POSTERIZE: {
		/* (8 - (torch.arange(n) / ((n - 1) / k))).round().int(), in float32 */
		float x = (float)i / (float)((n - 1) / (ta ? 6.0 : 4.0));

		*sign = false;
		*mag = (int)nearbyintf(8.0f - x);
		return true;
	}
	case P_SOLARIZE:
		*sign = false;
		*mag = linspace_f32(1.0, 0.0, n, i);
		return true;
	default:
		*sign = false;
		*mag = 0.0;
		return false;
	}
}

/* ---- timm ---- */

/* timm's op names with the level function each has */
enum timm_level {
	L_NONE,
	L_ROTATE,
	L_POSTERIZE,      /* int(m / 10 * 4) */
	L_POSTERIZE_INC,  /* 4 - int(m / 10 * 4) */
	L_POSTERIZE_ORIG, /* int(m / 10 * 4) + 4 */
	L_SOLARIZE,       /* min(256, int(m / 10 * 256)) */
	L_SOLARIZE_INC,   /* 256 - that */
	L_SOLARIZE_ADD,   /* min(128, int(m / 10 * 110)) */
	L_ENHANCE,        /* m / 10 * 1.8 + 0.1 */
	L_ENHANCE_INC,    /* max(0.1, 1 + negate(m / 10 * 0.9)) */
	L_SHEAR,          /* negate(m / 10 * 0.3) */
	L_TRANSLATE_REL,  /* negate(m / 10 * translate_pct) */
};

struct timm_op {
	const char *name;
	enum prim op;
	enum timm_level level;
};

static const struct timm_op TIMM_OPS[] = {
	{"AutoContrast", P_AUTOCONTRAST, L_NONE},
	{"Equalize", P_EQUALIZE, L_NONE},
	{"Invert", P_INVERT, L_NONE},
	{"Rotate", P_ROTATE, L_ROTATE},
	{"Posterize", P_POSTERIZE, L_POSTERIZE},
	{"PosterizeIncreasing", P_POSTERIZE, L_POSTERIZE_INC},
	{"PosterizeOriginal", P_POSTERIZE, L_POSTERIZE_ORIG},
	{"Solarize", P_SOLARIZE, L_SOLARIZE},
	{"SolarizeIncreasing", P_SOLARIZE, L_SOLARIZE_INC},
	{"SolarizeAdd", P_SOLARIZE_ADD, L_SOLARIZE_ADD},
	{"Color", P_COLOR, L_ENHANCE},
	{"ColorIncreasing", P_COLOR, L_ENHANCE_INC},
	{"Contrast", P_CONTRAST, L_ENHANCE},
	{"ContrastIncreasing", P_CONTRAST, L_ENHANCE_INC},
	{"Brightness", P_BRIGHTNESS, L_ENHANCE},
	{"BrightnessIncreasing", P_BRIGHTNESS, L_ENHANCE_INC},
	{"Sharpness", P_SHARPNESS, L_ENHANCE},
	{"SharpnessIncreasing", P_SHARPNESS, L_ENHANCE_INC},
	{"ShearX", P_SHEAR_X, L_SHEAR},
	{"ShearY", P_SHEAR_Y, L_SHEAR},
	{"TranslateXRel", P_TRANSLATE_X_REL, L_TRANSLATE_REL},
	{"TranslateYRel", P_TRANSLATE_Y_REL, L_TRANSLATE_REL},
};
#define TIMM_N (sizeof(TIMM_OPS) / sizeof(TIMM_OPS[0]))

/* indices into TIMM_OPS */
enum {
	T_AUTOCONTRAST,
	T_EQUALIZE,
	T_INVERT,
	T_ROTATE,
	T_POSTERIZE,
	T_POSTERIZE_INC,
	T_POSTERIZE_ORIG,
	T_SOLARIZE,
	T_SOLARIZE_INC,
	T_SOLARIZE_ADD,
	T_COLOR,
	T_COLOR_INC,
	T_CONTRAST,
	T_CONTRAST_INC,
	T_BRIGHTNESS,
	T_BRIGHTNESS_INC,
	T_SHARPNESS,
	T_SHARPNESS_INC,
	T_SHEAR_X,
	T_SHEAR_Y,
	T_TRANSLATE_X_REL,
	T_TRANSLATE_Y_REL,
};

/* _RAND_TRANSFORMS and _RAND_INCREASING_TRANSFORMS, in their order */
static const unsigned char TIMM_RAND[15] = {
	T_AUTOCONTRAST, T_EQUALIZE,     T_INVERT,  T_ROTATE,          T_POSTERIZE,
	T_SOLARIZE,     T_SOLARIZE_ADD, T_COLOR,   T_CONTRAST,        T_BRIGHTNESS,
	T_SHARPNESS,    T_SHEAR_X,      T_SHEAR_Y, T_TRANSLATE_X_REL, T_TRANSLATE_Y_REL,
};
static const unsigned char TIMM_RAND_INC[15] = {
	T_AUTOCONTRAST,  T_EQUALIZE,     T_INVERT,    T_ROTATE,          T_POSTERIZE_INC,
	T_SOLARIZE_INC,  T_SOLARIZE_ADD, T_COLOR_INC, T_CONTRAST_INC,    T_BRIGHTNESS_INC,
	T_SHARPNESS_INC, T_SHEAR_X,      T_SHEAR_Y,   T_TRANSLATE_X_REL, T_TRANSLATE_Y_REL,
};

/* _RAND_WEIGHTED_0 (the tweights section) in its order, and its weights */
static const unsigned char TIMM_WEIGHTED[15] = {
	T_ROTATE,       T_SHEAR_X,        T_SHEAR_Y,      T_TRANSLATE_X_REL, T_TRANSLATE_Y_REL,
	T_COLOR_INC,    T_SHARPNESS_INC,  T_AUTOCONTRAST, T_SOLARIZE_INC,    T_SOLARIZE_ADD,
	T_CONTRAST_INC, T_BRIGHTNESS_INC, T_EQUALIZE,     T_POSTERIZE_INC,   T_INVERT,
};
static const double TIMM_WEIGHTS[15] = {3, 2, 2, 1, 1, .25, .25, .25, .05, .05, .05, .05, .05, .05, .05};

/* _AUGMIX_TRANSFORMS (augment_and_mix_transform) */
static const unsigned char TIMM_AUGMIX[13] = {
	T_AUTOCONTRAST, T_COLOR_INC,       T_CONTRAST_INC,    T_BRIGHTNESS_INC, T_SHARPNESS_INC,
	T_EQUALIZE,     T_ROTATE,          T_POSTERIZE_INC,   T_SOLARIZE_INC,   T_SHEAR_X,
	T_SHEAR_Y,      T_TRANSLATE_X_REL, T_TRANSLATE_Y_REL,
};

struct timm_step {
	unsigned char op; /* TIMM_OPS index */
	float p;
	unsigned char m;
};

/* auto_augment_policy_original */
static const struct timm_step TIMM_ORIGINAL[25][2] = {
	{{T_POSTERIZE_ORIG, 0.4f, 8}, {T_ROTATE, 0.6f, 9}}, {{T_SOLARIZE, 0.6f, 5}, {T_AUTOCONTRAST, 0.6f, 5}},
	{{T_EQUALIZE, 0.8f, 8}, {T_EQUALIZE, 0.6f, 3}},     {{T_POSTERIZE_ORIG, 0.6f, 7}, {T_POSTERIZE_ORIG, 0.6f, 6}},
	{{T_EQUALIZE, 0.4f, 7}, {T_SOLARIZE, 0.2f, 4}},     {{T_EQUALIZE, 0.4f, 4}, {T_ROTATE, 0.8f, 8}},
	{{T_SOLARIZE, 0.6f, 3}, {T_EQUALIZE, 0.6f, 7}},     {{T_POSTERIZE_ORIG, 0.8f, 5}, {T_EQUALIZE, 1.0f, 2}},
	{{T_ROTATE, 0.2f, 3}, {T_SOLARIZE, 0.6f, 8}},       {{T_EQUALIZE, 0.6f, 8}, {T_POSTERIZE_ORIG, 0.4f, 6}},
	{{T_ROTATE, 0.8f, 8}, {T_COLOR, 0.4f, 0}},          {{T_ROTATE, 0.4f, 9}, {T_EQUALIZE, 0.6f, 2}},
	{{T_EQUALIZE, 0.0f, 7}, {T_EQUALIZE, 0.8f, 8}},     {{T_INVERT, 0.6f, 4}, {T_EQUALIZE, 1.0f, 8}},
	{{T_COLOR, 0.6f, 4}, {T_CONTRAST, 1.0f, 8}},        {{T_ROTATE, 0.8f, 8}, {T_COLOR, 1.0f, 2}},
	{{T_COLOR, 0.8f, 8}, {T_SOLARIZE, 0.8f, 7}},        {{T_SHARPNESS, 0.4f, 7}, {T_INVERT, 0.6f, 8}},
	{{T_SHEAR_X, 0.6f, 5}, {T_EQUALIZE, 1.0f, 9}},      {{T_COLOR, 0.4f, 0}, {T_EQUALIZE, 0.6f, 3}},
	{{T_EQUALIZE, 0.4f, 7}, {T_SOLARIZE, 0.2f, 4}},     {{T_SOLARIZE, 0.6f, 5}, {T_AUTOCONTRAST, 0.6f, 5}},
	{{T_INVERT, 0.6f, 4}, {T_EQUALIZE, 1.0f, 8}},       {{T_COLOR, 0.6f, 4}, {T_CONTRAST, 1.0f, 8}},
	{{T_EQUALIZE, 0.8f, 8}, {T_EQUALIZE, 0.6f, 3}},
};

/* auto_augment_policy_v0 */
static const struct timm_step TIMM_V0[25][2] = {
	{{T_EQUALIZE, 0.8f, 1}, {T_SHEAR_Y, 0.8f, 4}},       {{T_COLOR, 0.4f, 9}, {T_EQUALIZE, 0.6f, 3}},
	{{T_COLOR, 0.4f, 1}, {T_ROTATE, 0.6f, 8}},           {{T_SOLARIZE, 0.8f, 3}, {T_EQUALIZE, 0.4f, 7}},
	{{T_SOLARIZE, 0.4f, 2}, {T_SOLARIZE, 0.6f, 2}},      {{T_COLOR, 0.2f, 0}, {T_EQUALIZE, 0.8f, 8}},
	{{T_EQUALIZE, 0.4f, 8}, {T_SOLARIZE_ADD, 0.8f, 3}},  {{T_SHEAR_X, 0.2f, 9}, {T_ROTATE, 0.6f, 8}},
	{{T_COLOR, 0.6f, 1}, {T_EQUALIZE, 1.0f, 2}},         {{T_INVERT, 0.4f, 9}, {T_ROTATE, 0.6f, 0}},
	{{T_EQUALIZE, 1.0f, 9}, {T_SHEAR_Y, 0.6f, 3}},       {{T_COLOR, 0.4f, 7}, {T_EQUALIZE, 0.6f, 0}},
	{{T_POSTERIZE, 0.4f, 6}, {T_AUTOCONTRAST, 0.4f, 7}}, {{T_SOLARIZE, 0.6f, 8}, {T_COLOR, 0.6f, 9}},
	{{T_SOLARIZE, 0.2f, 4}, {T_ROTATE, 0.8f, 9}},        {{T_ROTATE, 1.0f, 7}, {T_TRANSLATE_Y_REL, 0.8f, 9}},
	{{T_SHEAR_X, 0.0f, 0}, {T_SOLARIZE, 0.8f, 4}},       {{T_SHEAR_Y, 0.8f, 0}, {T_COLOR, 0.6f, 4}},
	{{T_COLOR, 1.0f, 0}, {T_ROTATE, 0.6f, 2}},           {{T_EQUALIZE, 0.8f, 4}, {T_EQUALIZE, 0.0f, 8}},
	{{T_EQUALIZE, 1.0f, 4}, {T_AUTOCONTRAST, 0.6f, 2}},  {{T_SHEAR_Y, 0.4f, 7}, {T_SOLARIZE_ADD, 0.6f, 7}},
	{{T_POSTERIZE, 0.8f, 2}, {T_SOLARIZE, 0.6f, 10}},    {{T_SOLARIZE, 0.6f, 8}, {T_EQUALIZE, 0.6f, 1}},
	{{T_COLOR, 0.8f, 6}, {T_ROTATE, 0.4f, 5}},
};

/* ---- the policy object ---- */

enum policy_kind { POL_RAND, POL_TRIVIAL, POL_AUTO, POL_AUGMIX, POL_TIMM_RAND, POL_TIMM_AUTO, POL_TIMM_AUGMIX };

struct policy {
	enum policy_kind kind;
	/* torchvision */
	unsigned num_ops, magnitude, bins;
	/* AugMix */
	unsigned severity, width, space_n;
	int depth;
	double alpha;
	bool has_fill; /* fill given (the tensor kernels' None is not 0) */
	/* timm */
	double m, mstd, mmax, prob, translate_pct;
	bool random_interp;
	const unsigned char *rand_ops; /* 15 */
	const double *weights;         /* tweights: the ops' weights, chosen without replacement; NULL: uniform */
	bool blended;                  /* timm's AugMix b1: a blend per chain, no final mix */
	const struct timm_step (*subs)[2];
	const struct aa_step (*aa)[2]; /* AutoAugment's policy */
	/* both */
	enum affine_resample interp;
	uint8_t fill[3];
};

static const char *const POLICIES[] = {"RandAugment",
				       "TrivialAugmentWide",
				       "AutoAugment",
				       "AugMix",
				       "rand_augment_transform",
				       "auto_augment_transform",
				       "augment_and_mix_transform"};

bool policy_known(const char *name)
{
	for (size_t i = 0; i < sizeof(POLICIES) / sizeof(POLICIES[0]); i++)
		if (!strcmp(name, POLICIES[i]))
			return true;
	return false;
}

static int parse_interp(const struct params *ps, const char *def, bool allow_random, struct policy *pol)
{
	const char *t;
	int r = params_text(ps, "interpolation", def, &t);

	if (r < 0)
		return r;
	pol->random_interp = false;
	if (!strcmp(t, "nearest"))
		pol->interp = RESAMPLE_NEAREST;
	else if (!strcmp(t, "bilinear"))
		pol->interp = RESAMPLE_BILINEAR;
	else if (!strcmp(t, "bicubic"))
		pol->interp = RESAMPLE_BICUBIC;
	else if (allow_random && !strcmp(t, "random"))
		pol->random_interp = true;
	else
		return params_fail(ps, "interpolation", "\"%s\" is not one of nearest, bilinear, bicubic%s", t,
				   allow_random ? ", random" : "");
	return 0;
}

static const char *const KEYS_RA[] = {"num_ops", "magnitude", "num_magnitude_bins", "interpolation", "fill", NULL};
static const char *const KEYS_TA[] = {"num_magnitude_bins", "interpolation", "fill", NULL};
static const char *const KEYS_AA[] = {"policy", "interpolation", "fill", NULL};
static const char *const KEYS_AUGMIX[] = {"severity", "mixture_width", "chain_depth", "alpha",
					  "all_ops",  "interpolation", "fill",        NULL};
static const char *const KEYS_TIMM[] = {"config_str",    "img_mean",        "interpolation",
					"translate_pct", "translate_const", NULL};

/* timm's config sections: key letters then a number (re.split(r'(\d.*)', c)). */
static int timm_config(const struct params *ps, enum policy_kind kind, const char *cfg, struct policy *pol)
{
	const bool rand = kind == POL_TIMM_RAND, mix = kind == POL_TIMM_AUGMIX;
	char buf[128], tset[128] = "", *save = NULL, *tok;
	bool has_tset = false, inc = false;
	int n = 0;

	if (strlen(cfg) >= sizeof(buf))
		return params_fail(ps, "config_str", "too long");
	snprintf(buf, sizeof(buf), "%s", cfg);
	for (tok = strtok_r(buf, "-", &save); tok; tok = strtok_r(NULL, "-", &save), n++) {
		char *digits = tok, *end;
		double v;

		if (n == 0) {
			if (rand || mix) {
				if (strcmp(tok, rand ? "rand" : "augmix"))
					return params_fail(ps, "config_str", "\"%s\" does not start with %s", cfg,
							   rand ? "rand" : "augmix");
			} else if (!strcmp(tok, "original")) {
				pol->subs = TIMM_ORIGINAL;
			} else if (!strcmp(tok, "v0")) {
				pol->subs = TIMM_V0;
			} else {
				return params_fail(ps, "config_str", "policy \"%s\": only original and v0 are built",
						   tok);
			}
			continue;
		}
		if (rand && tok[0] == 't') {
			/* the transform set: the first t section names it */
			if (!has_tset)
				snprintf(tset, sizeof(tset), "%s", tok + 1);
			has_tset = true;
			continue;
		}
		while (*digits && (*digits < '0' || *digits > '9'))
			digits++;
		if (!*digits)
			continue; /* timm skips a section without digits */
		v = strtod(digits, &end);
		if (*end || !isfinite(v))
			return params_fail(ps, "config_str", "section \"%s\": not a number", tok);
		*digits = '\0';
		if (!strcmp(tok, "mstd")) {
			if (v < 0)
				return params_fail(ps, "config_str", "mstd %g is negative", v);
			pol->mstd = rand && v > 100 ? INFINITY : v;
		} else if (rand && !strcmp(tok, "mmax")) {
			if (v != floor(v) || v < 0 || v > 1000)
				return params_fail(ps, "config_str", "mmax %g is not an integer in [0, 1000]", v);
			pol->mmax = v;
		} else if (rand && !strcmp(tok, "inc")) {
			inc = (int)v != 0;
		} else if ((rand || mix) && !strcmp(tok, "m")) {
			if (v != floor(v) || v < 0 || v > 1000)
				return params_fail(ps, "config_str", "m %g is not an integer in [0, 1000]", v);
			pol->m = v;
		} else if (rand && !strcmp(tok, "n")) {
			if (v != floor(v) || v < 0 || v > 16)
				return params_fail(ps, "config_str", "n %g is not an integer in [0, 16]", v);
			pol->num_ops = (unsigned)v;
		} else if (rand && !strcmp(tok, "p")) {
			if (v < 0 || v > 1)
				return params_fail(ps, "config_str", "p %g is outside [0, 1]", v);
			pol->prob = v;
		} else if (mix && !strcmp(tok, "w")) {
			if (v != floor(v) || v < 1 || v > 16)
				return params_fail(ps, "config_str", "w %g is not an integer in [1, 16]", v);
			pol->width = (unsigned)v;
		} else if (mix && !strcmp(tok, "d")) {
			if (v != floor(v) || v > 16)
				return params_fail(ps, "config_str", "d %g is not an integer in [0, 16]", v);
			pol->depth = (int)v;
		} else if (mix && !strcmp(tok, "a")) {
			if (!(v >= 1e-3 && v <= 1e3))
				return params_fail(ps, "config_str", "a %g is not in [0.001, 1000]", v);
			pol->alpha = v;
		} else if (mix && !strcmp(tok, "b")) {
			pol->blended = (int)v != 0;
		} else {
			return params_fail(ps, "config_str", "unknown section \"%s\"", tok);
		}
	}
	if (n == 0)
		return params_fail(ps, "config_str", "is empty");
	if (!rand)
		return 0;
	/* rand_augment_choices(): weights, 3a and 3aw are sets of their own, any other name the default set */
	pol->rand_ops = inc ? TIMM_RAND_INC : TIMM_RAND;
	if (has_tset && !strcmp(tset, "weights")) {
		pol->rand_ops = TIMM_WEIGHTED;
		pol->weights = TIMM_WEIGHTS;
		if (pol->num_ops > 15)
			return params_fail(ps, "config_str",
					   "n %u: the weighted set (tweights) picks without replacement from 15 ops",
					   pol->num_ops);
	} else if (has_tset && (!strcmp(tset, "3a") || !strcmp(tset, "3aw"))) {
		return params_fail(ps, "config_str", "section \"t%s\": its GaussianBlur and Desaturate are not built",
				   tset);
	}
	return 0;
}

int policy_parse(const char *name, const struct params *ps, struct policy **out)
{
	struct policy *pol = calloc(1, sizeof(*pol));
	const char *text;
	double unused;
	bool all_ops = true;
	long l = 0;
	int r;

	if (!pol)
		return -ENOMEM;
	if (!strcmp(name, "RandAugment")) {
		pol->kind = POL_RAND;
		r = params_check_keys(ps, KEYS_RA);
		if (r >= 0)
			r = params_int(ps, "num_ops", 2, 0, 16, &l);
		pol->num_ops = (unsigned)l;
		if (r >= 0)
			r = params_int(ps, "num_magnitude_bins", 31, 2, 1000, &l);
		pol->bins = (unsigned)l;
		if (r >= 0)
			r = params_int(ps, "magnitude", 9, 0, (long)pol->bins - 1, &l);
		pol->magnitude = (unsigned)l;
	} else if (!strcmp(name, "TrivialAugmentWide")) {
		pol->kind = POL_TRIVIAL;
		r = params_check_keys(ps, KEYS_TA);
		if (r >= 0)
			r = params_int(ps, "num_magnitude_bins", 31, 2, 1000, &l);
		pol->bins = (unsigned)l;
	} else if (!strcmp(name, "AutoAugment")) {
		pol->kind = POL_AUTO;
		r = params_check_keys(ps, KEYS_AA);
		if (r >= 0)
			r = params_text(ps, "policy", "imagenet", &text);
		if (r < 0)
			;
		else if (!strcasecmp(text, "imagenet"))
			pol->aa = AA_IMAGENET;
		else if (!strcasecmp(text, "cifar10"))
			pol->aa = AA_CIFAR10;
		else if (!strcasecmp(text, "svhn"))
			pol->aa = AA_SVHN;
		else
			r = params_fail(ps, "policy", "\"%s\" is not one of imagenet, cifar10, svhn", text);
	} else if (!strcmp(name, "AugMix")) {
		pol->kind = POL_AUGMIX;
		r = params_check_keys(ps, KEYS_AUGMIX);
		if (r >= 0)
			r = params_int(ps, "severity", 3, 1, 10, &l);
		pol->severity = (unsigned)l;
		if (r >= 0)
			r = params_int(ps, "mixture_width", 3, 1, 16, &l);
		pol->width = (unsigned)l;
		if (r >= 0)
			r = params_int(ps, "chain_depth", -1, -16, 16, &l);
		pol->depth = (int)l;
		if (r >= 0)
			r = params_number(ps, "alpha", 1.0, 1e-3, 1e3, &pol->alpha);
		if (r >= 0)
			r = params_bool(ps, "all_ops", true, &all_ops);
		pol->space_n = all_ops ? sizeof(AUGMIX_SPACE) / sizeof(AUGMIX_SPACE[0]) : AUGMIX_PARTIAL;
		if (r >= 0) {
			const struct op_param *f = params_find(ps, "fill");

			pol->has_fill =
				f && (f->n_numbers || (f->text && strcmp(f->text, "none") && strcmp(f->text, "None")));
			r = params_fill(ps, "fill", pol->fill);
		}
		/* the tensor kernels sample nearest or bilinear only */
		if (r >= 0)
			r = parse_interp(ps, "bilinear", false, pol);
		if (r >= 0 && pol->interp == RESAMPLE_BICUBIC)
			r = params_fail(ps, "interpolation",
					"bicubic: torchvision's tensor kernels take nearest or bilinear");
		goto out;
	} else {
		bool rand = !strcmp(name, "rand_augment_transform"), mix = !strcmp(name, "augment_and_mix_transform");

		pol->kind = rand ? POL_TIMM_RAND : mix ? POL_TIMM_AUGMIX : POL_TIMM_AUTO;
		pol->m = mix ? 3 : 10;
		pol->num_ops = 2;
		pol->prob = 0.5;
		pol->rand_ops = TIMM_RAND;
		/* augment_and_mix_transform's defaults: width 3, depth -1 (1..3), alpha 1, magnitudes uniform */
		pol->width = 3;
		pol->depth = -1;
		pol->alpha = 1.0;
		if (mix)
			pol->mstd = INFINITY;
		r = params_check_keys(ps, KEYS_TIMM);
		if (r >= 0)
			r = params_text(ps, "config_str", NULL, &text);
		if (r >= 0 && !text)
			r = params_fail(ps, "config_str", "is required");
		if (r >= 0)
			r = timm_config(ps, pol->kind, text, pol);
		if (r >= 0)
			r = params_number(ps, "translate_pct", 0.45, 0, 1, &pol->translate_pct);
		/* accepted (create_transform passes it); only TranslateX/Y absolute use it, in none of these */
		if (r >= 0)
			r = params_number(ps, "translate_const", 250, 0, 1e6, &unused);
		if (r >= 0 && !params_find(ps, "img_mean")) {
			/* timm's _FILL when no img_mean is given */
			pol->fill[0] = pol->fill[1] = pol->fill[2] = 128;
		} else if (r >= 0) {
			r = params_fill(ps, "img_mean", pol->fill);
		}
		if (r >= 0)
			r = parse_interp(ps, "random", true, pol);
		goto out;
	}
	if (r >= 0)
		r = params_fill(ps, "fill", pol->fill);
	if (r >= 0)
		r = parse_interp(ps, "nearest", false, pol);
out:
	if (r < 0) {
		free(pol);
		return r;
	}
	*out = pol;
	return 0;
}

void policy_free(struct policy *pol)
{
	free(pol);
}

/* ---- applying one primitive ---- */

/* Warp im by matrix a into scratch, then back (the affine output cannot be in place). */
static int warp(struct rgb_image *im, const double a[6], bool rotate, double angle, enum affine_resample rs,
		const uint8_t fill[3], struct pixel_scratch *s)
{
	uint8_t *out = scratch_image(s, 0, im);

	if (!out)
		return -ENOMEM;
	if (rotate)
		affine_rotate(im, out, angle, rs, fill);
	else
		affine_transform(im, out, a, rs, fill);
	for (uint32_t y = 0; y < im->height; y++)
		memcpy(im->px + y * im->stride, out + y * im->stride, (size_t)im->width * 3);
	return 0;
}

/* torchvision's _apply_image_or_video_transform on a PIL image */
static int tv_apply(enum prim op, double mag, enum affine_resample rs, const uint8_t fill[3], struct rgb_image *im,
		    struct pixel_scratch *s)
{
	double m[6];

	switch (op) {
	case P_IDENTITY: return 0;
	case P_SHEAR_X:
	case P_SHEAR_Y: {
		/* F.affine(angle 0, translate 0, scale 1, shear [degrees(atan(mag)), 0], center [0, 0]) */
		const double center[2] = {0, 0}, tr[2] = {0, 0};
		double deg = atan(mag) * (180.0 / M_PI);
		const double shear[2] = {op == P_SHEAR_X ? deg : 0.0, op == P_SHEAR_Y ? deg : 0.0};

		affine_tv_matrix(center, 0.0, tr, 1.0, shear, m);
		return warp(im, m, false, 0, rs, fill, s);
	}
	case P_TRANSLATE_X:
	case P_TRANSLATE_Y: {
		/* translate [int(mag), 0], the centre [w * 0.5, h * 0.5] */
		const double center[2] = {im->width * 0.5, im->height * 0.5}, shear[2] = {0, 0};
		const double tr[2] = {op == P_TRANSLATE_X ? trunc(mag) : 0.0, op == P_TRANSLATE_Y ? trunc(mag) : 0.0};

		affine_tv_matrix(center, 0.0, tr, 1.0, shear, m);
		return warp(im, m, false, 0, rs, fill, s);
	}
	case P_ROTATE: return warp(im, NULL, true, mag, rs, fill, s);
	case P_BRIGHTNESS: color_brightness(im, 1.0 + mag); return 0;
	case P_COLOR: color_saturation(im, 1.0 + mag); return 0;
	case P_CONTRAST: color_contrast(im, 1.0 + mag); return 0;
	case P_SHARPNESS: return sharpness(im, 1.0 + mag, s);
	case P_POSTERIZE: color_posterize(im, (unsigned)(int)mag); return 0;
	case P_SOLARIZE:
		/* the PIL bound: 255.0 * magnitude */
		color_solarize(im, 255.0 * mag);
		return 0;
	case P_AUTOCONTRAST: color_autocontrast(im); return 0;
	case P_EQUALIZE: color_equalize(im); return 0;
	case P_INVERT: color_invert(im); return 0;
	default: return -EINVAL;
	}
}

/* Through tvt_grid into scratch, then back. */
static int grid(struct rgb_image *im, const double m[6], enum affine_resample rs, const uint8_t *fill,
		struct pixel_scratch *s)
{
	uint8_t *out = scratch_image(s, 0, im);

	if (!out)
		return -ENOMEM;
	tvt_grid(im, out, m, rs == RESAMPLE_BILINEAR, fill);
	for (uint32_t y = 0; y < im->height; y++)
		memcpy(im->px + y * im->stride, out + y * im->stride, (size_t)im->width * 3);
	return 0;
}

/* The same ops on a tensor (AugMix): torchvision's tensor kernels; fill NULL is None */
static int tvt_apply(enum prim op, double mag, enum affine_resample rs, const uint8_t *fill, struct rgb_image *im,
		     struct pixel_scratch *s)
{
	const double zero[2] = {0, 0};
	uint8_t *tmp;
	double m[6];

	switch (op) {
	case P_SHEAR_X:
	case P_SHEAR_Y: {
		/* center [0, 0] given: relative to the image centre, [-w / 2, -h / 2] */
		const double center[2] = {0.0 - im->width * 0.5, 0.0 - im->height * 0.5};
		double deg = atan(mag) * (180.0 / M_PI);
		const double shear[2] = {op == P_SHEAR_X ? deg : 0.0, op == P_SHEAR_Y ? deg : 0.0};

		affine_tv_matrix(center, 0.0, zero, 1.0, shear, m);
		return grid(im, m, rs, fill, s);
	}
	case P_TRANSLATE_X:
	case P_TRANSLATE_Y: {
		const double tr[2] = {op == P_TRANSLATE_X ? trunc(mag) : 0.0, op == P_TRANSLATE_Y ? trunc(mag) : 0.0};

		affine_tv_matrix(zero, 0.0, tr, 1.0, zero, m);
		return grid(im, m, rs, fill, s);
	}
	case P_ROTATE: {
		double a = fmod(mag, 360.0);

		a = a < 0 ? a + 360.0 : a;
		if (a == 0 || a == 180 || ((a == 90 || a == 270) && im->width == im->height)) {
			/* torch.rot90, as Pillow's transposes */
			uint8_t *out = scratch_image(s, 0, im);

			if (!out)
				return -ENOMEM;
			affine_rotate(im, out, a, RESAMPLE_NEAREST, (const uint8_t[3]){0, 0, 0});
			for (uint32_t y = 0; y < im->height; y++)
				memcpy(im->px + y * im->stride, out + y * im->stride, (size_t)im->width * 3);
			return 0;
		}
		affine_tv_matrix(zero, -a, zero, 1.0, zero, m);
		return grid(im, m, rs, fill, s);
	}
	case P_BRIGHTNESS: tvt_brightness(im, 1.0 + mag); return 0;
	case P_COLOR: tvt_saturation(im, 1.0 + mag); return 0;
	case P_CONTRAST: tvt_contrast(im, 1.0 + mag); return 0;
	case P_SHARPNESS:
		tmp = scratch_image(s, 2, im);
		if (!tmp)
			return -ENOMEM;
		tvt_sharpness(im, 1.0 + mag, tmp);
		return 0;
	case P_POSTERIZE: tvt_posterize(im, (unsigned)(int)mag); return 0;
	case P_SOLARIZE: tvt_solarize(im, 255.0 * mag); return 0;
	case P_AUTOCONTRAST: tvt_autocontrast(im); return 0;
	case P_EQUALIZE: color_equalize(im); return 0;
	case P_INVERT: color_invert(im); return 0;
	default: return -EINVAL;
	}
}

/* A Gamma(a, 1) variate (Marsaglia and Tsang; a < 1 boosted by U^(1/a)) */
static double gamma_draw(struct rng *rng, double a)
{
	double boost = 1.0;

	if (a < 1.0) {
		boost = pow(1.0 - rng_uniform(rng), 1.0 / a);
		a += 1.0;
	}
	for (;;) {
		const double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
		double x, v, u;

		do {
			x = sqrt(-2.0 * log(1.0 - rng_uniform(rng))) * cos(2.0 * M_PI * rng_uniform(rng));
			v = 1.0 + c * x;
		} while (v <= 0.0);
		v = v * v * v;
		u = 1.0 - rng_uniform(rng);
		if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
			return boost * d * v;
	}
}

/* torch._sample_dirichlet of n copies of alpha, as float32 */
static void dirichlet(struct rng *rng, double alpha, unsigned n, float *out)
{
	double g[16], sum = 0;

	for (unsigned i = 0; i < n; i++)
		sum += g[i] = gamma_draw(rng, alpha);
	for (unsigned i = 0; i < n; i++)
		out[i] = (float)(g[i] / sum);
}

static bool tv_sign(struct rng *rng, struct pixel_scratch *s);

/* AugMix.forward on a PIL image (to a tensor, the chains, the float mix, .to(uint8)) */
static int augmix(const struct policy *pol, struct rgb_image *im, struct rng *rng, struct pixel_scratch *s)
{
	const size_t n = (size_t)im->width * 3;
	const uint8_t *fill = pol->has_fill ? pol->fill : NULL;
	uint8_t *orig = scratch_image(s, 3, im);
	float m[2], w[16], *mix = scratch_floats(s, n * im->height);
	int r = 0;

	if (!orig || !mix)
		return -ENOMEM;
	memcpy(orig, im->px, im->stride * im->height);
	dirichlet(rng, pol->alpha, 2, m);
	dirichlet(rng, pol->alpha, pol->width, w);
	pixel_trace(s, "m0", m[0]);
	for (unsigned i = 0; i < pol->width; i++) {
		w[i] = w[i] * m[1];
		pixel_trace(s, "w", w[i]);
	}
	for (uint32_t y = 0; y < im->height; y++)
		for (size_t i = 0; i < n; i++)
			mix[y * n + i] = m[0] * (float)orig[y * im->stride + i];
	for (unsigned c = 0; c < pol->width && r >= 0; c++) {
		unsigned depth = pol->depth > 0 ? (unsigned)pol->depth : 1 + (unsigned)rng_below(rng, 3);

		pixel_trace(s, "depth", depth);
		memcpy(im->px, orig, im->stride * im->height);
		for (unsigned d = 0; d < depth && r >= 0; d++) {
			enum prim op = AUGMIX_SPACE[rng_below(rng, pol->space_n)];
			double mag = 0.0;
			bool sign;

			pixel_trace(s, "op", op);
			if (tv_magnitude(SPACE_AUGMIX, op, 10, 0, im->width, im->height, &mag, &sign)) {
				unsigned bin = (unsigned)rng_below(rng, pol->severity);

				pixel_trace(s, "bin", bin);
				tv_magnitude(SPACE_AUGMIX, op, 10, bin, im->width, im->height, &mag, &sign);
				if (sign && tv_sign(rng, s))
					mag = -mag;
			}
			pixel_trace(s, "magnitude", mag);
			r = tvt_apply(op, mag, pol->interp, fill, im, s);
		}
		for (uint32_t y = 0; y < im->height; y++)
			for (size_t i = 0; i < n; i++)
				mix[y * n + i] = mix[y * n + i] + w[c] * (float)im->px[y * im->stride + i];
	}
	for (uint32_t y = 0; y < im->height; y++)
		for (size_t i = 0; i < n; i++) {
			float v = mix[y * n + i];

			im->px[y * im->stride + i] = (uint8_t)(int)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
		}
	return r;
}

/* timm's op functions with their final argument */
static int timm_apply(enum prim op, double arg, enum affine_resample rs, const uint8_t fill[3], struct rgb_image *im,
		      struct pixel_scratch *s)
{
	uint8_t lut[3][256];

	switch (op) {
	case P_ROTATE: return warp(im, NULL, true, arg, rs, fill, s);
	case P_SHEAR_X: {
		const double m[6] = {1, arg, 0, 0, 1, 0};

		return warp(im, m, false, 0, rs, fill, s);
	}
	case P_SHEAR_Y: {
		const double m[6] = {1, 0, 0, arg, 1, 0};

		return warp(im, m, false, 0, rs, fill, s);
	}
	case P_TRANSLATE_X_REL: {
		const double m[6] = {1, 0, arg * im->width, 0, 1, 0};

		return warp(im, m, false, 0, rs, fill, s);
	}
	case P_TRANSLATE_Y_REL: {
		const double m[6] = {1, 0, 0, 0, 1, arg * im->height};

		return warp(im, m, false, 0, rs, fill, s);
	}
	case P_POSTERIZE:
		/* bits >= 8: the image as it is; 0 keeps nothing (Pillow >= 11 refuses 0, older ones black it) */
		if (arg < 8)
			color_posterize(im, (unsigned)(arg < 0 ? 0 : arg));
		return 0;
	case P_SOLARIZE: color_solarize(im, arg); return 0;
	case P_SOLARIZE_ADD:
		for (int v = 0; v < 256; v++) {
			int o = v < 128 ? (v + (int)arg > 255 ? 255 : v + (int)arg) : v;

			lut[0][v] = lut[1][v] = lut[2][v] = (uint8_t)o;
		}
		color_lut(im, lut);
		return 0;
	case P_COLOR: color_saturation(im, arg); return 0;
	case P_CONTRAST: color_contrast(im, arg); return 0;
	case P_BRIGHTNESS: color_brightness(im, arg); return 0;
	case P_SHARPNESS: return sharpness(im, arg, s);
	case P_AUTOCONTRAST: color_autocontrast(im); return 0;
	case P_EQUALIZE: color_equalize(im); return 0;
	case P_INVERT: color_invert(im); return 0;
	default: return -EINVAL;
	}
}

/* ---- draws ---- */

static bool tv_sign(struct rng *rng, struct pixel_scratch *s)
{
	/* torch.rand(()) <= 0.5: negated */
	bool neg = rng_uniform(rng) <= 0.5;

	pixel_trace(s, "sign", neg ? -1 : 1);
	return neg;
}

static int tv_step(const struct policy *pol, enum tv_space sp, enum prim op, unsigned bins, unsigned bin,
		   struct rgb_image *im, struct rng *rng, struct pixel_scratch *s)
{
	double mag = 0.0;
	bool sign;

	pixel_trace(s, "op", op);
	if (tv_magnitude(sp, op, bins, bin, im->width, im->height, &mag, &sign)) {
		pixel_trace(s, "bin", bin);
		if (sign && tv_sign(rng, s))
			mag = -mag;
	}
	pixel_trace(s, "magnitude", mag);
	return tv_apply(op, mag, pol->interp, pol->fill, im, s);
}

/* Python's random.gauss(mu, sigma): two uniforms, Box-Muller as its generator (the distribution). */
static double gauss(struct rng *rng, double mu, double sigma)
{
	double u1 = rng_uniform(rng), u2 = rng_uniform(rng);

	return mu + sigma * sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

/* timm's _randomly_negate: random.random() > 0.5 negates */
static double timm_negate(double v, struct rng *rng, struct pixel_scratch *s)
{
	bool neg = rng_uniform(rng) > 0.5;

	pixel_trace(s, "sign", neg ? -1 : 1);
	return neg ? -v : v;
}

/* The level function's argument for magnitude m (draws the sign where timm does). */
static double timm_level(const struct policy *pol, enum timm_level lv, double m, struct rng *rng,
			 struct pixel_scratch *s)
{
	double v;

	switch (lv) {
	case L_ROTATE: return timm_negate(m / 10.0 * 30.0, rng, s);
	case L_POSTERIZE: return (int)(m / 10.0 * 4);
	case L_POSTERIZE_INC: return 4 - (int)(m / 10.0 * 4);
	case L_POSTERIZE_ORIG: return (int)(m / 10.0 * 4) + 4;
	case L_SOLARIZE: return fmin(256, (int)(m / 10.0 * 256));
	case L_SOLARIZE_INC: return 256 - fmin(256, (int)(m / 10.0 * 256));
	case L_SOLARIZE_ADD: return fmin(128, (int)(m / 10.0 * 110));
	case L_ENHANCE: return m / 10.0 * 1.8 + 0.1;
	case L_ENHANCE_INC: v = m / 10.0 * 0.9; return fmax(0.1, 1.0 + timm_negate(v, rng, s));
	case L_SHEAR: return timm_negate(m / 10.0 * 0.3, rng, s);
	case L_TRANSLATE_REL: return timm_negate(m / 10.0 * pol->translate_pct, rng, s);
	case L_NONE: break;
	}
	return 0.0;
}

static bool geometric(enum prim op)
{
	return op == P_ROTATE || op == P_SHEAR_X || op == P_SHEAR_Y || op == P_TRANSLATE_X_REL ||
	       op == P_TRANSLATE_Y_REL;
}

/* timm's AugmentOp.__call__ */
static int timm_step(const struct policy *pol, unsigned idx, double prob, double magnitude, struct rgb_image *im,
		     struct rng *rng, struct pixel_scratch *s)
{
	const struct timm_op *t = &TIMM_OPS[idx];
	enum affine_resample rs = pol->interp;
	double arg = 0.0;

	pixel_trace(s, "op", idx);
	if (prob < 1.0) {
		bool skip = rng_uniform(rng) > prob;

		pixel_trace(s, "apply", !skip);
		if (skip)
			return 0;
	}
	if (pol->mstd > 0) {
		if (isinf(pol->mstd))
			magnitude = rng_range(rng, 0, magnitude);
		else
			magnitude = gauss(rng, magnitude, pol->mstd);
	}
	magnitude = fmax(0.0, fmin(magnitude, pol->mmax > 0 ? pol->mmax : 10.0));
	pixel_trace(s, "magnitude", magnitude);
	if (t->level != L_NONE)
		arg = timm_level(pol, t->level, magnitude, rng, s);
	pixel_trace(s, "arg", arg);
	if (geometric(t->op) && pol->random_interp) {
		rs = rng_below(rng, 2) ? RESAMPLE_BICUBIC : RESAMPLE_BILINEAR;
		pixel_trace(s, "resample", rs);
	}
	return timm_apply(t->op, arg, rs, pol->fill, im, s);
}

/*
 * np.random.choice(15 ops, n, replace=False, p=weights): numpy keeps the
 * distinct draws of each round in order, which is drawing one at a time
 * in proportion to the weights of the ops not yet chosen.
 */
static void weighted_choice(const struct policy *pol, unsigned n, struct rng *rng, unsigned *chosen)
{
	bool taken[15] = {false};

	for (unsigned i = 0; i < n; i++) {
		double total = 0, u, acc = 0;
		unsigned k, last = 0;

		for (k = 0; k < 15; k++)
			if (!taken[k])
				total += pol->weights[k];
		u = rng_uniform(rng) * total;
		for (k = 0; k < 15; k++) {
			if (taken[k])
				continue;
			last = k;
			acc += pol->weights[k];
			if (u < acc)
				break;
		}
		if (k == 15)
			k = last; /* rounding at the top end */
		taken[k] = true;
		chosen[i] = pol->rand_ops[k];
	}
}

/*
 * timm's AugMixAugment: float32 weights from a Dirichlet(alpha, ..., alpha)
 * and m from a Beta(alpha, alpha); each of `width` chains applies
 * `depth` (or 1..3) ops drawn with replacement from _AUGMIX_TRANSFORMS to
 * the original (AugmentOp at prob 1, magnitudes uniform in [0, m] unless
 * mstd says otherwise). _apply_basic: the chains summed in float32 (each
 * weight times the chain's pixels, rounded, then added), clipped to
 * [0, 255], truncated to uint8, Image.blend(original, that, m).
 * _apply_blended (b1): Image.blend of the running image with each chain
 * at weights _calc_blended_weights computes in float32.
 */
static int timm_augmix(const struct policy *pol, struct rgb_image *im, struct rng *rng, struct pixel_scratch *s)
{
	const size_t n = (size_t)im->width * 3;
	uint8_t *orig = scratch_image(s, 3, im), *acc = pol->blended ? scratch_image(s, 1, im) : NULL;
	float w[16], ws[16], m, *mix = pol->blended ? NULL : scratch_floats(s, n * im->height);
	double ga, gb;
	int r = 0;

	if (!orig || (pol->blended ? !acc : !mix))
		return -ENOMEM;
	dirichlet(rng, pol->alpha, pol->width, w);
	ga = gamma_draw(rng, pol->alpha);
	gb = gamma_draw(rng, pol->alpha);
	m = (float)(ga / (ga + gb));
	pixel_trace(s, "m", m);
	for (unsigned i = 0; i < pol->width; i++)
		pixel_trace(s, "w", w[i]);
	memcpy(orig, im->px, im->stride * im->height);
	if (pol->blended) {
		float cump = 1.0f;

		memcpy(acc, orig, im->stride * im->height);
		for (unsigned i = pol->width; i-- > 0;) {
			float a = w[i] * m / cump;

			cump *= 1.0f - a;
			ws[i] = a;
		}
	} else {
		for (size_t i = 0; i < n * im->height; i++)
			mix[i] = 0.0f;
	}
	for (unsigned c = 0; c < pol->width && r >= 0; c++) {
		unsigned depth = pol->depth > 0 ? (unsigned)pol->depth : 1 + (unsigned)rng_below(rng, 3), ops[16];

		pixel_trace(s, "depth", depth);
		/* np.random.choice(ops, depth, replace=True): all chosen first */
		for (unsigned d = 0; d < depth; d++)
			ops[d] = TIMM_AUGMIX[rng_below(rng, 13)];
		memcpy(im->px, orig, im->stride * im->height);
		for (unsigned d = 0; d < depth && r >= 0; d++)
			r = timm_step(pol, ops[d], 1.0, pol->m, im, rng, s);
		if (r < 0)
			break;
		if (pol->blended) {
			/* img = Image.blend(img, img_aug, w) */
			color_blend(im, acc, ws[c]);
			for (uint32_t y = 0; y < im->height; y++)
				memcpy(acc + y * im->stride, im->px + y * im->stride, n);
			continue;
		}
		for (uint32_t y = 0; y < im->height; y++)
			for (size_t i = 0; i < n; i++)
				mix[y * n + i] += w[c] * (float)im->px[y * im->stride + i];
	}
	if (r < 0 || pol->blended)
		return r;
	for (uint32_t y = 0; y < im->height; y++)
		for (size_t i = 0; i < n; i++) {
			float v = mix[y * n + i];

			im->px[y * im->stride + i] = (uint8_t)(int)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
		}
	color_blend(im, orig, m);
	return 0;
}

int policy_apply(const struct policy *pol, struct rgb_image *im, struct rng *rng, struct pixel_scratch *s)
{
	unsigned chosen[16];
	int r = 0;

	switch (pol->kind) {
	case POL_RAND:
		for (unsigned i = 0; i < pol->num_ops && r >= 0; i++) {
			enum prim op = TV_SPACE[rng_below(rng, TV_SPACE_N)];

			r = tv_step(pol, SPACE_RA, op, pol->bins, pol->magnitude, im, rng, s);
		}
		return r;
	case POL_TRIVIAL: {
		enum prim op = TV_SPACE[rng_below(rng, TV_SPACE_N)];
		double mag;
		bool sign;
		/* the bin is drawn only for an op with magnitudes */
		unsigned bin = tv_magnitude(SPACE_TA, op, pol->bins, 0, 1, 1, &mag, &sign)
				       ? (unsigned)rng_below(rng, pol->bins)
				       : 0;

		return tv_step(pol, SPACE_TA, op, pol->bins, bin, im, rng, s);
	}
	case POL_AUTO: {
		unsigned sub = (unsigned)rng_below(rng, 25);

		pixel_trace(s, "sub", sub);
		for (unsigned k = 0; k < 2 && r >= 0; k++) {
			const struct aa_step *st = &pol->aa[sub][k];
			/* torch.rand(()) <= probability applies */
			bool yes = rng_uniform(rng) <= st->p;

			pixel_trace(s, "apply", yes);
			if (yes)
				r = tv_step(pol, SPACE_RA, st->op, 10, st->mag < 0 ? 0 : (unsigned)st->mag, im, rng, s);
		}
		return r;
	}
	case POL_AUGMIX: return augmix(pol, im, rng, s);
	case POL_TIMM_RAND:
		/* np.random.choice(ops, n, replace=True): all chosen first */
		if (pol->weights)
			weighted_choice(pol, pol->num_ops, rng, chosen);
		else
			for (unsigned i = 0; i < pol->num_ops; i++)
				chosen[i] = pol->rand_ops[rng_below(rng, 15)];
		for (unsigned i = 0; i < pol->num_ops && r >= 0; i++)
			r = timm_step(pol, chosen[i], pol->prob, pol->m, im, rng, s);
		return r;
	case POL_TIMM_AUGMIX: return timm_augmix(pol, im, rng, s);
	case POL_TIMM_AUTO: {
		unsigned sub = (unsigned)rng_below(rng, 25);

		pixel_trace(s, "sub", sub);
		for (unsigned k = 0; k < 2 && r >= 0; k++)
			r = timm_step(pol, pol->subs[sub][k].op, pol->subs[sub][k].p, pol->subs[sub][k].m, im, rng, s);
		return r;
	}
	}
	return -EINVAL;
}

int policy_apply_named(const struct policy *pol, const char *spec, struct rgb_image *im, struct pixel_scratch *s,
		       char *err, size_t errlen)
{
	const bool timm = pol->kind == POL_TIMM_RAND || pol->kind == POL_TIMM_AUTO || pol->kind == POL_TIMM_AUGMIX;
	enum affine_resample rs = pol->interp;
	char name[32], interp[16] = "";
	double v = 0.0;
	int n = sscanf(spec, "%31[A-Za-z]:%lf:%15s", name, &v, interp);

	if (n < 1) {
		snprintf(err, errlen, "\"%s\": NAME:VALUE[:INTERP] expected", spec);
		return -EINVAL;
	}
	if (!strcmp(interp, "bilinear"))
		rs = RESAMPLE_BILINEAR;
	else if (!strcmp(interp, "bicubic"))
		rs = RESAMPLE_BICUBIC;
	else if (!strcmp(interp, "nearest"))
		rs = RESAMPLE_NEAREST;
	else if (timm && pol->random_interp)
		rs = RESAMPLE_BICUBIC;
	for (unsigned p = 0; p < P_NPRIM; p++) {
		if (strcmp(PRIM_NAMES[p], name))
			continue;
		if (timm && p != P_TRANSLATE_X && p != P_TRANSLATE_Y && p != P_IDENTITY)
			return timm_apply((enum prim)p, v, rs, pol->fill, im, s);
		if (pol->kind == POL_AUGMIX && p <= P_INVERT)
			return tvt_apply((enum prim)p, v, rs, pol->has_fill ? pol->fill : NULL, im, s);
		if (!timm && p <= P_INVERT)
			return tv_apply((enum prim)p, v, rs, pol->fill, im, s);
	}
	snprintf(err, errlen, "\"%s\": no such op in this policy", name);
	return -EINVAL;
}
