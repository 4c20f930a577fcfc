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
 *                     alone (load_image's output: Ultralytics 8.4 puts no
 *                     LetterBox before the warp, so its centre goes to the
 *                     output's, half a pixel off the letterbox where the
 *                     padding is odd). Then RandomPerspective (degrees,
 *                     translate, scale, shear, perspective) to size x size
 *                     (out_w x out_h under rect training, below),
 *                     boxes transformed by their corners, clipped, and kept
 *                     by the candidate rule (w, h > 2 px, area ratio > 0.1,
 *                     aspect < 100). MixUp (p = mixup) with a second such
 *                     image at a Beta(32, 32) ratio, boxes concatenated.
 *                     CutMix (p = cutmix) with a third such image: of 3
 *                     random areas, one that covers no box gets the third
 *                     image's pixels and its boxes that lie at least 10 %
 *                     in it, clipped to it.
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

/* The largest output side detect_make() takes. */
#define DETECT_MAX_SIZE 16384u

enum detect_transform {
	DETECT_LETTERBOX = 0,
	DETECT_TRAIN = 1,
};

/* Ultralytics' hyper-parameters, under their names (default.yaml). */
struct detect_params {
	float hsv_h, hsv_s, hsv_v;                           /* 0.015 0.7 0.4 */
	float degrees, translate, scale, shear, perspective; /* 0 0.1 0.5 0 0 */
	float flipud, fliplr;                                /* 0 0.5 */
	float mosaic, mixup;                                 /* 1 0; probabilities */
	float cutmix;                                        /* 0; probability */
	double copy_paste;   /* 0; fraction of the eligible objects (double: round(p * n) as Python's) */
	int copy_paste_mode; /* DETECT_COPY_PASTE_FLIP or _MIXUP */
};

/* detect_params.copy_paste_mode: Ultralytics' copy_paste_mode. */
#define DETECT_COPY_PASTE_FLIP 0
#define DETECT_COPY_PASTE_MIXUP 1

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
	uint32_t orig_width, orig_height; /* the file's size, for the metadata (0: width, height) */
	/* DETECT_LETTERBOX's sample only: the loader already wrote the letterbox
	 * into the output image (detect_output.image, `placed` the same pointer):
	 * the pixels where detect_letterbox_geometry(width, height, out_w, out_h)
	 * puts them, DETECT_PAD around. detect_make() then copies nothing. */
	bool placed;
	/* The pixels stay valid until detect_make() returns (not only until the
	 * next call): a mosaic whose four samples all say so is warped from
	 * them directly, without assembling the whole canvas first. */
	bool stable;
	/* detect_output.inst's sample only: object k's polygon is
	 * seg[seg_off[k] .. seg_off[k + 1]) (points x, y, normalised; seg_off
	 * NULL: none), its keypoints kpt[k][nkpt][3] (x, y normalised,
	 * visibility; NULL: none). Valid until detect_make() returns. */
	const uint64_t *seg_off;
	const float *seg, *kpt;
};

/*
 * The instances a DETECT_TRAIN sample carries beside its boxes (Ultralytics'
 * segment, pose and OBB tasks), through Mosaic, RandomPerspective, MixUp
 * and the flips by instgeom.h's functions, exactly as Ultralytics' own:
 *
 *   segments   each sample's polygons resampled to seg_points (1000; OBB
 *              100) or one more than its longest, as update_labels_info
 *              does; boxes re-derived from them by the affine. A sample
 *              with an object without a polygon carries no instances.
 *   keypoints  nkpt per object, visibility zeroed outside the image,
 *              reordered by flip_idx after each flip.
 *   obb        Instances.clip(preserve_obb=True) and Format's xywhr.
 *
 * The random affine's pixel warp then uses Ultralytics' float32 matrix
 * (instgeom_affine_matrix), the same one the instances go through; an
 * image that is not a mosaic is warped from its own centre (as the detect
 * path's). CutMix: an area free of the image's instances, the partner's
 * instances that reach bbox_ioa 0.01 (the image has segments) or 0.1 with
 * it, cut to it (preserve_obb for OBB) and appended.
 */
struct detect_instances {
	uint32_t seg_points;      /* 0: no segments */
	uint32_t nkpt;            /* 0: no keypoints */
	const uint32_t *flip_idx; /* [nkpt], or NULL */
	bool obb;
};

/* LetterBox's and the warp's border grey. */
#define DETECT_PAD 114

/* Ultralytics' load_image size of a width x height image at long side
 * `side`: r = side / max(w, h), each side min(ceil(side0 * r), side), in
 * double as Python computes it. */
void detect_fit_size(uint32_t width, uint32_t height, uint32_t side, uint32_t *tw, uint32_t *th);

/* LetterBox(scaleup=False, center=True) of a w x h image into out_w x
 * out_h: its scale r (<= 1), the size it is resized to (new_unpad) and the
 * padding left and above. */
struct detect_letterbox {
	double r;
	uint32_t w, h;
	int left, top;
};
void detect_letterbox_geometry(uint32_t w, uint32_t h, uint32_t out_w, uint32_t out_h, struct detect_letterbox *g);

/* What Ultralytics' batch carries per image for evaluation: ori_shape,
 * load_image's resized shape, and ratio_pad ((ratio_h, ratio_w), (left,
 * top)) with ratio = resized / ori * LetterBox's r. */
struct detect_meta {
	int32_t shape[4];    /* ori h, ori w, resized h, resized w */
	double ratio_pad[4]; /* ratio h, ratio w, pad left, pad top */
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
int detect_run(struct detect *d, enum detect_transform t, const struct detect_params *p, uint32_t size, uint64_t index,
	       uint64_t count, struct rng *rng, detect_load_fn load, void *ctx, uint8_t *image, float *boxes,
	       uint32_t max_boxes, uint32_t *box_count, uint64_t *boxes_dropped);

/*
 * detect_run() with more said: DETECT_LETTERBOX letterboxes into out_w x
 * out_h (a rectangular batch's shape, each side 1..DETECT_MAX_SIZE; the
 * loader must return the sample at long side `size` shrunk to fit it, as
 * LetterBox would). DETECT_TRAIN makes an out_w x out_h other than size x
 * size only with mosaic, mixup and cutmix 0: Ultralytics' rect training,
 * RandomPerspective into the batch's rect_shape (its translation a share
 * of each side), then HSV and flips. The sample's
 * metadata goes to *meta (may be NULL; written on success only): for the
 * letterbox as Ultralytics' validator reads it; for the training transform
 * the sample's own original and loaded sizes, ratio loaded / original,
 * pad 0.
 */
struct detect_output {
	uint8_t *image; /* out_h x out_w x 3 */
	uint32_t out_w, out_h;
	float *boxes; /* max_boxes rows */
	uint32_t max_boxes;
	uint32_t *box_count;
	uint64_t *boxes_dropped;
	struct detect_meta *meta;
	/* Training only, may be NULL: called on the image after MixUp and
	 * before HSV, where Ultralytics runs its Albumentations (albu.h), with
	 * whether the image is already flipped (the flips are folded into the
	 * warp). A negative return fails the sample. */
	int (*before_hsv)(void *ctx, uint8_t *image, uint32_t w, uint32_t h, bool flipud, bool fliplr);
	void *before_hsv_ctx;
	/* DETECT_LETTERBOX: each written row's object index in the sample
	 * (max_boxes entries; NULL: not wanted). */
	uint32_t *rows_src;
	/* DETECT_TRAIN with instances (NULL: boxes only). Each written row's
	 * keypoints into kpt ([max_boxes][nkpt][3], normalised, as Format) and,
	 * with obb, its xywhr into xywhr ([max_boxes][5], normalised); the
	 * rows' boxes are Format's too. The instances themselves:
	 * detect_instances_result(). */
	const struct detect_instances *inst;
	float *kpt, *xywhr;
};
int detect_make(struct detect *d, enum detect_transform t, const struct detect_params *p, uint32_t size, uint64_t index,
		uint64_t count, struct rng *rng, detect_load_fn load, void *ctx, const struct detect_output *out);

/*
 * The instances of the last DETECT_TRAIN sample made with
 * detect_output.inst, in the output image's pixels, boxes xywh, in row
 * order (the first *box_count of them are the written rows): segments for
 * Format's masks. Valid until the next detect_make().
 */
struct instgeom_set;
const struct instgeom_set *detect_instances_result(const struct detect *d);

/*
 * For bench/profile_detect.c: with `ns` non-NULL, detect_make() adds the
 * nanoseconds of the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID:
 * time other processes take from a shared machine is not counted) it
 * spends in each stage to ns[stage] (DETECT_STAGES entries,
 * the caller's to zero); NULL (the default) turns the clock off. Flips have
 * no stage: they are folded into the warp and the letterbox copy.
 */
enum detect_stage {
	DETECT_STAGE_LOAD,   /* the loader's calls (decode and resize, in the daemon) */
	DETECT_STAGE_CANVAS, /* the mosaic's patches and its 114 fill (none for four stable samples) */
	DETECT_STAGE_WARP,   /* RandomPerspective's warp, into the output (and the canvas rows it makes) */
	DETECT_STAGE_COPY,   /* the letterbox copy and its padding, into the output */
	DETECT_STAGE_MIXUP,  /* the blend of the second image */
	DETECT_STAGE_HSV,    /* RandomHSV */
	DETECT_STAGE_BOXES,  /* box and label arithmetic */
	DETECT_STAGES
};
void detect_profile(struct detect *d, uint64_t *ns);

/*
 * For the test tools (tests/tools/detectdraws, detectinst), which replay a
 * sample's draws in Ultralytics' own transforms. detect_plan_draws: the
 * plan DETECT_TRAIN draws from `rng`, as DETECT_PLAN_DRAWS doubles: per
 * image (1, then the mixup's) mosaic, its 3 partners, yc, xc and the 8
 * affine draws; then mixup, its partner, flipud, fliplr; then CutMix's:
 * apply, partner, its image's 14, lam[3], cx[3], cy[3], choice.
 * detect_copy_paste_draws: CopyPaste mode mixup's draws of a sample whose
 * stream is `rng`, 16 doubles an image (1, then the MixUp partner): apply,
 * partner, then its 14 image draws as above. 0, or -EINVAL.
 */
#define DETECT_PLAN_DRAWS 58
#define DETECT_COPY_PASTE_DRAWS 32
int detect_plan_draws(const struct detect_params *p, uint32_t size, uint64_t count, struct rng *rng,
		      double out[DETECT_PLAN_DRAWS]);
int detect_copy_paste_draws(const struct detect_params *p, uint32_t size, uint64_t count, const struct rng *rng,
			    double out[DETECT_COPY_PASTE_DRAWS]);

/* Scratch bytes a `struct detect` holds for `size` (for memory accounting). */
size_t detect_scratch_bytes(uint32_t size);

#endif
