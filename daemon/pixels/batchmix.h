/* SPDX-License-Identifier: MIT */
/*
 * Batch ops: MixUp and CutMix on a whole classification batch, with the
 * labels turned into float32 soft targets [count][num_classes].
 *
 * Two families, each as its reference computes it (docs/transforms.md):
 *   - torchvision.transforms.v2 MixUp(alpha) / CutMix(alpha), alone or in a
 *     RandomChoice(p): the batch mixed with itself rolled by one (sample i's
 *     partner is i - 1), one lambda per batch from Beta(alpha, alpha) (drawn
 *     in float32 as torch's Beta), CutMix's box as its _get_params and its
 *     lambda corrected to the pasted area;
 *   - timm.data.Mixup: mode batch / pair / elem, mixup_alpha, cutmix_alpha,
 *     cutmix_minmax, prob, switch_prob, correct_lam, label_smoothing; the
 *     partner of i is count - 1 - i (x.flip(0)).
 * Pixels are mixed in float32 as the references do (a * lam + b * (1 - lam),
 * each product rounded to float32); uint8 output rounds the float result to
 * nearest, ties to even (timm's FastCollateMixup: np.rint), float16 rounds
 * each product and the sum to half as torch's half kernels do.
 *
 * A batch draws from its own Philox stream (rng.h RNG_BATCHMIX, keyed by
 * seed, epoch and the batch's index), so the per-sample pixels before it are
 * the same as without it.
 */
#ifndef STOKER_BATCHMIX_H
#define STOKER_BATCHMIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "augment.h"
#include "rng.h"

#define BATCHMIX_MAX_CHOICES 8
#define BATCHMIX_MAX_TEXT 1024      /* bytes of a batch_transform text */
#define BATCHMIX_MAX_CLASSES 65536u /* soft targets per sample */

enum batchmix_family {
	BATCHMIX_TORCHVISION = 1,
	BATCHMIX_TIMM = 2,
};

enum batchmix_kind {
	BATCHMIX_NONE = 0,
	BATCHMIX_MIXUP = 1,
	BATCHMIX_CUTMIX = 2,
};

enum batchmix_mode {
	BATCHMIX_MODE_BATCH = 0,
	BATCHMIX_MODE_PAIR = 1,
	BATCHMIX_MODE_ELEM = 2,
};

/* A parsed batch op; compare two with batchmix_equal. */
struct batchmix {
	enum batchmix_family family;
	uint32_t num_classes; /* 0: the data set's */
	/* torchvision: a RandomChoice of n ops (n = 1: the op alone) */
	uint32_t n;
	enum batchmix_kind kind[BATCHMIX_MAX_CHOICES];
	double alpha[BATCHMIX_MAX_CHOICES];
	double p[BATCHMIX_MAX_CHOICES]; /* normalised, as RandomChoice does */
	/* timm */
	enum batchmix_mode mode;
	double mixup_alpha, cutmix_alpha, minmax[2];
	bool has_minmax, correct_lam;
	double prob, switch_prob, label_smoothing;
};

/*
 * What one sample of a mixed batch got, as written into the slot's mix area
 * (Attached.mix_offset, 40 bytes a sample): the lambda its soft target uses
 * (CutMix's corrected one), the lambda drawn, its partner in the batch, the
 * kind, and CutMix's box [x1, x2) x [y1, y2) (0 otherwise).
 */
struct batchmix_rec {
	double lam, lam_drawn;
	int32_t partner, kind;
	int32_t x1, y1, x2, y2;
};
_Static_assert(sizeof(struct batchmix_rec) == 40, "the slot's mix records are 40 bytes");

/*
 * Parse the text form (docs/transforms.md):
 *   MixUp(alpha=0.2, num_classes=1000)      CutMix(alpha=1.0)
 *   RandomChoice(MixUp(alpha=0.2), CutMix(alpha=1.0), p=(0.5, 0.5))
 *   timm.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, cutmix_minmax=None, prob=1.0, switch_prob=0.5,
 *              mode=batch, correct_lam=True, label_smoothing=0.1, num_classes=1000, multi_label=False)
 * -EINVAL with the op and parameter named in err.
 */
int batchmix_parse(const char *text, struct batchmix *out, char *err, size_t errlen);
bool batchmix_equal(const struct batchmix *a, const struct batchmix *b);

/* The checks that need the batch: its size, the image size, the data set's
 * classes and the dtype. -EINVAL with the reason in err. */
int batchmix_check(const struct batchmix *m, uint32_t batch_size, uint32_t width, uint32_t height,
		   uint32_t dataset_classes, enum sample_dtype dtype, char *err, size_t errlen);

/* Soft targets per sample: num_classes, or the data set's. */
static inline uint32_t batchmix_classes(const struct batchmix *m, uint32_t dataset_classes)
{
	return m->num_classes ? m->num_classes : dataset_classes;
}

/* Draw a batch's parameters from `rng` (its own stream) for `count` images
 * of width x height: recs[count]. */
void batchmix_draw(const struct batchmix *m, struct rng *rng, uint32_t count, uint32_t width, uint32_t height,
		   struct batchmix_rec *recs);

/* Beta(a, b) (a, b > 0) from `rng`: exposed for the distribution tests. */
double batchmix_beta(struct rng *rng, double a, double b);

/*
 * Mix `count` images in place (uint8 HWC or float CHW planes of `dtype`,
 * width x height x 3 each) as recs say, and write the soft targets
 * soft[count][classes] from labels (a label outside 0..classes-1, such as a
 * failed sample's -1, has no hot entry). `scratch` holds one image.
 */
void batchmix_apply(const struct batchmix *m, const struct batchmix_rec *recs, uint32_t count, void *images,
		    enum sample_dtype dtype, uint32_t width, uint32_t height, const int64_t *labels, uint32_t classes,
		    float *soft, void *scratch);

#endif
