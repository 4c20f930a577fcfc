/* SPDX-License-Identifier: MIT */
/*
 * Detection transforms with exact box transforms, as Ultralytics' YOLO
 * training pipeline does them (ultralytics/data/augment.py, v8_transforms):
 *
 *   DETECT_LETTERBOX  the evaluation transform: the long side resized to
 *                     `size`, aspect kept, centred, padded with 114 grey.
 *                     No random draws.
 *   DETECT_TRAIN      Mosaic (p = mosaic) of 4 samples around a random
 *                     centre on a 2size x 2size canvas; else the sample
 *                     letterboxed. Then RandomPerspective (degrees,
 *                     translate, scale, shear, perspective) to size x size,
 *                     boxes transformed by their corners, clipped, and kept
 *                     by the candidate rule (w, h > 2 px, area ratio > 0.1,
 *                     aspect < 100). MixUp (p = mixup) with a second such
 *                     image at a Beta(32, 32) ratio, boxes concatenated.
 *                     Then HSV jitter, vertical flip (flipud), horizontal
 *                     flip (fliplr).
 *
 * Every draw comes from the caller's rng (keyed by seed, epoch, sample
 * index), so the output depends on nothing else: not on worker count, not
 * on timing. Mosaic and mixup partners are indices drawn uniformly below
 * `count`; what an index names is the loader's business (stokerd's names
 * positions in the batch, so partners are the batch's other images). A
 * partner that does not load is replaced by the next index that does
 * (index + 1, + 2, ... modulo count).
 *
 * One `struct detect` per worker thread (scratch canvases); not thread safe.
 */
#ifndef STOKER_DETECT_H
#define STOKER_DETECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rng.h"

enum detect_transform {
	DETECT_LETTERBOX = 0,
	DETECT_TRAIN = 1,
};

/* Ultralytics' hyper-parameters, under their names (default.yaml). */
struct detect_params {
	float hsv_h, hsv_s, hsv_v;                         /* 0.015 0.7 0.4 */
	float degrees, translate, scale, shear, perspective; /* 0 0.1 0.5 0 0 */
	float flipud, fliplr;                              /* 0 0.5 */
	float mosaic, mixup;                               /* 1 0; probabilities */
};

void detect_params_default(struct detect_params *p);
/* 0, or -EINVAL with a reason in `why` (a value out of its range). */
int detect_params_check(const struct detect_params *p, char *why, size_t whylen);

/* One object: class, then centre and size normalised to the image (0..1),
 * as in a YOLO label line. */
struct detect_box {
	float cls, cx, cy, w, h;
};

/* A data-set sample as Ultralytics' load_image gives it: resized so its
 * long side is the requested side (aspect kept: each side
 * min(ceil(side0 * r), side) with r = side / max(w0, h0)), RGB, HWC,
 * rows of width * 3 bytes; and its boxes, normalised, from its label file. */
struct detect_sample {
	const uint8_t *pixels;
	uint32_t width, height;
	const struct detect_box *boxes;
	uint32_t box_count;
};

/* Load sample `index` at long side `side`. The pixels need only stay valid
 * until the next call. 0, or -errno when the sample cannot be loaded (the
 * caller of detect_run() reports and counts that). */
typedef int (*detect_load_fn)(void *ctx, uint64_t index, uint32_t side, struct detect_sample *out);

/* One output row: (image index in the batch, class, cx, cy, w, h), box
 * normalised to the output image, the layout Ultralytics' collate makes.
 * detect_run() writes 0 as the image index; the batch fills it in. */
#define DETECT_BOX_FLOATS 6

struct detect;

int detect_new(struct detect **out);
/* Accepts NULL. */
void detect_free(struct detect *d);

/*
 * Make the sample at data-set `index` (of `count` samples) as transform `t`
 * with parameters `p`: `size` x `size` RGB uint8 HWC into `image`, and up to
 * `max_boxes` rows of DETECT_BOX_FLOATS floats into `boxes`, their number in
 * *box_count. Boxes beyond max_boxes are left out and their number added to
 * *boxes_dropped. Boxes always lie inside the image with w, h > 0.
 * Returns 0; the loader's error when `index` itself cannot be loaded (its
 * partners are replaced instead); -EINVAL for bad arguments; -ENOMEM.
 * `image`, `boxes` and the counts are unspecified on error.
 */
int detect_run(struct detect *d, enum detect_transform t, const struct detect_params *p, uint32_t size,
	       uint64_t index, uint64_t count, struct rng *rng, detect_load_fn load, void *ctx, uint8_t *image,
	       float *boxes, uint32_t max_boxes, uint32_t *box_count, uint64_t *boxes_dropped);

/* Scratch bytes a `struct detect` holds for `size` (for memory accounting). */
size_t detect_scratch_bytes(uint32_t size);

#endif
