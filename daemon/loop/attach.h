/* SPDX-License-Identifier: MIT */
/*
 * An Attach request's pure parts: every option checked against its limits
 * (with the reason the client is told), and the layout of a ring's slot for
 * a request. No libuv, no daemon state: the limits come in as arguments, so
 * tests/unit/test_attach.c covers them. The attach path that uses them (the
 * data set scan, admission against the node's budgets, session_create)
 * is attach.c's loop-thread half.
 */
#ifndef STOKER_ATTACH_H
#define STOKER_ATTACH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "augment.h"
#include "stoker.pb-c.h"

/* Boxes per image a slot has room for: the default and the bound. */
#define ATTACH_DEFAULT_MAX_BOXES 1000u
#define ATTACH_MAX_BOXES 10000u
/* A shard-order shuffle buffer holds at most this many samples. */
#define ATTACH_MAX_SHUFFLE_BUFFER (1u << 22)
/* A data.yaml split key: 1..32 characters, no '/'. */
#define ATTACH_MAX_SPLIT_LEN 32u

/* What the configuration allows a request (config.h's max_* keys). */
struct attach_limits {
	uint32_t max_batch_size;
	uint32_t max_image_size;
	uint32_t max_prefetch;
	uint32_t prefetch; /* the default, for a request that says 0 */
};

/* "random_resized_crop", "center_crop", "letterbox", "mosaic" or "?". */
const char *attach_transform_name(Stoker__Transform t);

/* Check every option of `a` against `lim`: the task and its transform,
 * detection's options, dtype, mean and std, batch and image size, rank and
 * world size, prefetch, the shuffle buffer, the device, the data set path.
 * 0, or -EINVAL with the first reason found in errbuf (what the client is
 * told, INVALID_ARGUMENT). */
int attach_validate(const Stoker__Attach *a, const struct attach_limits *lim, char *errbuf, size_t errlen);

/* The host ring carries uint8 for a device (the GPU converts: 4x fewer
 * bytes over PCIe than float32), else the client's dtype. */
static inline enum sample_dtype attach_host_dtype(enum sample_dtype out, bool on_device)
{
	return on_device ? DTYPE_UINT8 : out;
}

/* What a slot must hold. */
struct slot_request {
	uint32_t batch_size;
	uint32_t image_size;
	uint32_t image_height;   /* 0: image_size (square); a pipeline's (h, w) output */
	enum sample_dtype dtype; /* the host ring's (attach_host_dtype) */
	uint32_t rect_side;      /* rectangular batches: uint8 room for the largest shape; 0: none */
	bool detect;             /* boxes, shapes and ratio_pad follow the indices */
	uint32_t max_boxes;      /* detect: rows per image */
	uint32_t mask_ratio;     /* yolo_task segment: an overlap mask per image, the side / it; 0: none */
	uint32_t kpt_points;     /* yolo_task pose: keypoints per box row; 0: none */
	bool obb;                /* yolo_task obb: xywhr per box row */
	bool mosaic;             /* detect's training transform: partner images per slot */
	uint32_t soft_classes;   /* a batch op: float soft targets per sample, its records and one image of scratch */
	uint32_t prefetch;       /* batches ready ahead: slots = prefetch + 1 */
	size_t page_size;        /* slots are page aligned */
};

/* Where each area of a slot starts, and the sizes that follow. */
struct slot_layout {
	uint64_t image_bytes;                 /* the batch's images, at 0 */
	size_t labels_offset, indices_offset; /* int64 each, per sample */
	size_t boxes_offset;                  /* detect: float[max_boxes][DETECT_BOX_FLOATS] per image */
	size_t shapes_offset;                 /* detect: int32[4] per image */
	size_t ratio_pad_offset;              /* detect: double[4] per image */
	size_t masks_offset;                  /* segment: uint16[mask_side][mask_side] per image */
	uint32_t mask_side;                   /* the side (largest rect shape's) / mask_ratio */
	size_t keypoints_offset;              /* pose: float[max_boxes][kpt_points][3] per image */
	size_t obb_offset;                    /* obb: float[max_boxes][5] per image */
	size_t soft_offset;                   /* batch op: float[soft_classes] per image */
	size_t mix_offset;                    /* batch op: struct batchmix_rec per image */
	size_t mix_scratch_offset;            /* batch op: one image's bytes */
	uint64_t slot_bytes;                  /* page aligned */
	uint32_t slots;
	uint64_t ring_bytes; /* slots x slot_bytes */
	uint64_t fit_bytes;  /* mosaic: slots x batch_size partner images (image_size^2 x 3) */
};

/* Images, then labels and indices, each 64-byte aligned; for detect the
 * boxes, shapes and ratio_pad areas after them, 64-byte aligned; for a batch
 * op the soft targets, mix records and scratch image; the slot
 * rounded up to the page. 0, or -EOVERFLOW (*out untouched) if a size
 * does not fit 64 bits, or -EINVAL for a zero batch, image size or page. */
int attach_slot_layout(const struct slot_request *r, struct slot_layout *out);

#endif
