/* SPDX-License-Identifier: MIT */
/*
 * Segments and keypoints at evaluation, as Ultralytics' validation loader
 * makes them (ultralytics/data: YOLODataset.update_labels_info, LetterBox,
 * Format with return_mask / return_keypoint):
 *
 *   instmask_resample   resample_segments: a polygon of n points, closed,
 *                       linearly resampled to m points (numpy's linspace,
 *                       insert and interp in float64, then float32)
 *   instmask_letterbox  Instances' denormalize, scale and add_padding of
 *                       normalised points, each step in float32
 *   instmask_overlap    polygons2masks_overlap: each polygon truncated to
 *                       int32 and filled as cv2.fillPoly fills it (LINE_8,
 *                       outline included), downsampled by mask_ratio as
 *                       cv2.resize INTER_LINEAR does (a power of two that
 *                       divides both sides), areas summed, the polygons
 *                       ordered by -area (uint64, as numpy negates it: an
 *                       empty mask first; ties in index order), and the
 *                       mask holding i + 1 where the i-th of that order is
 *                       the last to cover a pixel (0: none)
 *
 * instmask_overlap rasters each polygon once: the fill writes only the
 * full-size rows the downsample reads (two in each mask_ratio), and each
 * polygon's mask cells (only its points' bounding box) are kept for the
 * area-order pass, up to 4 MiB in all; polygons past that are rastered
 * again there.
 *
 * Pure computation, no allocation but the scratch in struct instmask (one
 * per worker thread; not thread safe).
 */
#ifndef STOKER_INSTMASK_H
#define STOKER_INSTMASK_H

#include <stddef.h>
#include <stdint.h>

/* The points Ultralytics resamples each segment to, and an OBB's corners. */
#define INSTMASK_SEGMENT_POINTS 1000u
#define INSTMASK_OBB_POINTS 100u
/* The resampled points one image's polygons may take together (128 MiB of
 * floats): beyond, the sample fails (the workers' bound). */
#define INSTMASK_MAX_IMAGE_POINTS (1u << 24)
/* mask_ratio's largest value. */
#define INSTMASK_MAX_RATIO 32u

/* The point count update_labels_info resamples an image's segments to:
 * `points` (1000; OBB 100), or one more than its longest polygon when that
 * is longer. */
uint32_t instmask_resample_count(uint32_t longest, uint32_t points);

/* `n` points (x, y) resampled to `m` (m >= n, or m == n: copied) into out
 * [m][2]. */
void instmask_resample(const float *xy, uint32_t n, uint32_t m, float *out);

/* Normalised points (x, y, then `stride` - 2 other floats left alone) of
 * a w x h image in place into the letterbox: x * w * r + left, y * h * r +
 * top, each product and sum rounded to float32 as numpy does. */
void instmask_letterbox(float *pts, size_t n, uint32_t stride, uint32_t w, uint32_t h, double r, int left, int top);

struct instmask;

int instmask_new(struct instmask **out);
/* Accepts NULL. */
void instmask_free(struct instmask *m);

/*
 * polygons2masks_overlap of `count` polygons (pixel coordinates, polygon i
 * the points xy[off[i] .. off[i + 1]) of (x, y)) on a w x h image, masks
 * downsampled by `ratio`: the (h / ratio) x (w / ratio) mask into `mask`
 * and the area order into order[count]. 0; -EINVAL (ratio not a power of
 * two up to INSTMASK_MAX_RATIO dividing w and h, or count over 65535);
 * -ENOMEM.
 */
int instmask_overlap(struct instmask *m, const float *xy, const uint32_t *off, uint32_t count, uint32_t w, uint32_t h,
		     uint32_t ratio, uint16_t *mask, uint32_t *order);

/* cv2.fillPoly(mask, [pts], color=1) of one polygon of n integer points
 * (x, y) on a w x h uint8 image (the tests' view of the fill alone). */
int instmask_fill(struct instmask *m, uint8_t *mask, uint32_t w, uint32_t h, const int32_t *pts, uint32_t n);

/* instmask_fill of n float32 points truncated to int32 as astype(np.int32)
 * truncates them (out of range or NaN: INT32_MIN, as on x86), as
 * polygons2masks and CopyPaste's drawContours receive their polygons. */
int instmask_fill_f32(struct instmask *m, uint8_t *mask, uint32_t w, uint32_t h, const float *xy, uint32_t n);

#endif
