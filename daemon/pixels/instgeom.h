/* SPDX-License-Identifier: MIT */
/*
 * The geometry Ultralytics applies to instances (boxes, segment polygons,
 * keypoints, oriented boxes) in training, as its own functions compute it
 * (ultralytics/data/augment.py, utils/instance.py, utils/ops.py, 8.4), in
 * float32 where its arrays are float32 and in double where it computes in
 * Python floats or float64, with the same rounding:
 *
 *   RandomPerspective      instgeom_transform, instgeom_segment2box,
 *     .apply_instances     instgeom_perspective (boxes by their corners,
 *                          segments with boxes re-derived by segment2box,
 *                          keypoints with their out-of-image visibility,
 *                          Instances.clip, box_candidates)
 *   Mosaic._update_labels  instgeom_place (denormalise, the tile's offset)
 *   Mosaic._cat_labels     instgeom_cat, instgeom_clip,
 *                          instgeom_remove_zero_area
 *   MixUp                  instgeom_cat
 *   CutMix                 instgeom_cutmix_free_areas, _select, _piece
 *   Format                 instgeom_format (normalised xywh, keypoints,
 *                          OBB xywhr)
 *   RandomFlip             instgeom_flip (flip_idx for keypoints)
 *   CopyPaste(mode=flip)   instgeom_copy_paste_select, _append (the
 *                          mirrored instances that overlap no original,
 *                          by bbox_ioa, appended)
 *   CopyPaste(mode=mixup)  instgeom_copy_paste_select_from (the other
 *                          image's instances as the candidates)
 *   xyxyxyxy2xywhr         instgeom_xywhr (cv2.minAreaRect ported: its
 *                          convex hull, rotating calipers and float32
 *                          arithmetic; then Ultralytics' regularisation)
 *   xywhr2xyxyxyxy         instgeom_corners
 *   Instances.clip(preserve_obb=True)  instgeom_clip_obb (OBB data sets;
 *                          cv2.intersectConvexConvex ported)
 *
 * resample_segments is instmask.h's (instmask_resample; the dataset
 * resamples OBB corners to 100 points, other segments to 1000).
 *
 * Every function is pure: no draws (the caller injects M, scale, flips,
 * offsets) and no allocation except where said. Instances are held as
 * parallel arrays in `struct instgeom_set`; functions that drop instances
 * compact every array in place, in order.
 */
#ifndef STOKER_INSTGEOM_H
#define STOKER_INSTGEOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most points a polygon may carry through instgeom (resampled or not). */
#define INSTGEOM_MAX_POINTS 65536u

/*
 * One image's instances in pixels (or normalised, before instgeom_place).
 * box: [n][4], xyxy unless a function says otherwise; seg: [n][npts][2]
 * (npts 0: no segments); kpt: [n][nkpt][3] x, y, visibility (nkpt 0: none);
 * cls: [n] (may be NULL), carried along when instances are dropped.
 */
struct instgeom_set {
	uint32_t n, npts, nkpt;
	float *cls, *box, *seg, *kpt;
};

/*
 * RandomPerspective._compute_affine_matrix's M = T @ S @ R @ P @ C in
 * float32 from its draws (Python floats, in its order: perspective x, y;
 * angle in degrees; scale; shear x, y in degrees; translation x, y as
 * fractions of the output size, uniform(0.5 - translate, 0.5 +
 * translate)): each factor rounded to float32 as numpy stores it (R from
 * cv2.getRotationMatrix2D in double, the shears' math.tan), the products
 * as numpy's float32 matmul (OpenBLAS: fused multiply-adds in k order).
 */
struct instgeom_affine_draw {
	double persp_x, persp_y, angle, scale, shear_x, shear_y, trans_x, trans_y;
};
void instgeom_affine_matrix(const struct instgeom_affine_draw *d, int in_w, int in_h, int out_w, int out_h, float M[9]);

/*
 * `npts` points (x, y pairs, `stride` floats apart) through the 3x3 float32
 * matrix M (row major) as `xy1 @ M.T`, in float32; divided by the third
 * coordinate when `divide` (apply_segments and apply_keypoints always
 * divide, apply_bboxes only under perspective). `npts` is the whole
 * matmul's row count: numpy's matmul of one row is plain float arithmetic,
 * of more OpenBLAS's fused multiply-adds.
 */
void instgeom_transform(const float M[9], bool divide, float *xy, size_t npts, size_t stride);

/*
 * segment2box: the xyxy box of the part of a polygon of n points inside a
 * width x height image (the inside vertices, the edges' crossings of the
 * border, the image corners inside the polygon by cv2.pointPolygonTest);
 * zeros when none or n = 0.
 */
void instgeom_segment2box(const float *seg, uint32_t n, int width, int height, float box[4]);

/* cv2.pointPolygonTest(contour, (x, y), measureDist=False): 1 inside, 0 on an edge, -1 outside. */
int instgeom_point_in_polygon(const float *poly, uint32_t n, float x, float y);

/*
 * box_candidates(box1, box2, wh_thr=2, ar_thr=100, area_thr) for one pair
 * of xyxy boxes, in float32 as its arrays.
 */
bool instgeom_box_candidate(const float box1[4], const float box2[4], float area_thr);

/*
 * RandomPerspective.apply_instances on `s` (boxes xyxy, everything in the
 * input image's pixels) with the drawn matrix M (float32, as
 * _compute_affine_matrix builds it), its scale, the output size and
 * whether perspective is on; segments' boxes re-derived by segment2box
 * (and, without preserve_obb, segments clipped to them), keypoints'
 * visibility zeroed outside the output; Instances.clip (preserve_obb: as
 * instgeom_clip_obb); then the candidates kept (area_thr 0.01 with
 * segments, else 0.1). Updates `s` in place (n reduced). `keep`, when not
 * NULL, receives for each input instance whether it was kept ([n] bytes).
 * `scratch`: instgeom_obb_scratch_floats(npts) floats with preserve_obb
 * (else may be NULL).
 */
void instgeom_perspective(struct instgeom_set *s, const float M[9], float scale, int width, int height,
			  bool perspective, bool preserve_obb, float *scratch, bool *keep);

/*
 * Instances.clip(w, h, preserve_obb=True), Ultralytics' clip for OBB data
 * sets: an instance whose segment leaves the image gets, as its segment,
 * the rectangle aligned with its own minAreaRect that bounds its visible
 * part (cv2.intersectConvexConvex of its convex hull with the image, as
 * OpenCV computes it), resampled to its point count, and as its box the
 * visible part's bounds; no visible area: box and segment zero. Instances
 * inside are left as they are (their boxes unclipped). A crossing
 * instance with a coordinate that is not finite is zeroed (Ultralytics'
 * result there is not a rectangle). Keypoints as instgeom_clip. `scratch`: instgeom_obb_scratch_floats(npts) floats.
 */
void instgeom_clip_obb(struct instgeom_set *s, int width, int height, float *scratch);
size_t instgeom_obb_scratch_floats(uint32_t npts);

/*
 * cv2.intersectConvexConvex(P, Q, handleNested=True) of two float32
 * polygons of n and m points: its points into `out` (room for 2 * (n + m)
 * + 4 points), their number returned, the area in *area; 0 points for
 * none (n or m below 2, or no intersection), -1 where OpenCV's loop does
 * not converge (area -1). Its quirks kept: an early exit's result starts
 * with its (FLT_MAX, FLT_MAX) sentinel and has area 0. `scratch`: 2 * (n +
 * m) floats.
 */
int instgeom_intersect_convex(const float *P, int n, const float *Q, int m, float *out, float *area, float *scratch);

/* Instances.clip(w, h) without preserve_obb: boxes (xyxy) and segments clipped to the image, keypoints
 * outside it made invisible, then clipped. */
void instgeom_clip(struct instgeom_set *s, int width, int height);

/* Instances.remove_zero_area_boxes on xyxy boxes (area in float32 > 0). Returns the new count. */
uint32_t instgeom_remove_zero_area(struct instgeom_set *s);

/*
 * Mosaic._update_labels for one tile: `s` as read from the label file
 * (boxes xywh normalised, segments and keypoints normalised) to pixels of
 * a tile of w x h placed at (padw, padh) on the canvas: xywh2xyxy,
 * denormalize, add_padding, all float32.
 */
void instgeom_place(struct instgeom_set *s, int w, int h, int padw, int padh);

/*
 * Instances.concatenate of `count` sets into `out` (whose arrays have room
 * for every instance at the longest point count): boxes, classes,
 * keypoints appended in order; when the parts' segment point counts
 * differ, each part's segments resampled to the longest (instmask_resample,
 * as resample_segments) on the way. out->npts is that count; out->n the
 * sum. `out` must not share arrays with a part.
 */
void instgeom_cat(const struct instgeom_set *parts, uint32_t count, struct instgeom_set *out);

/* Instances.convert_bbox("xywh") of xyxy boxes in place (xyxy2xywh in
 * float32), as RandomFlip leaves them. */
void instgeom_xywh(struct instgeom_set *s);

/*
 * Format's boxes and keypoints for a w x h training image: xyxy to xywh
 * (boxes already xywh when `xywh`: after instgeom_xywh and the flips)
 * and each coordinate divided by w or h in float32 (`boxes` [n][4]); with
 * `obb`, the box is xyxyxyxy2xywhr of the instance's segment (float32,
 * as from its float32 tensor) with x, w divided by w and y, h by h
 * (`boxes` [n][5]); keypoints ([n][nkpt][3], may be NULL) x / w, y / h,
 * visibility kept. `scratch`: instgeom_scratch_floats(npts) floats with
 * `obb`. 0, or -EINVAL (obb without segments).
 */
int instgeom_format(const struct instgeom_set *s, int w, int h, bool obb, bool xywh, float *boxes, float *kpt,
		    float *scratch);

/*
 * RandomFlip.apply_instances with the flip drawn: boxes here are xywh (as
 * RandomFlip converts them), `extent` the image's width (horizontal) or
 * height (vertical), or 1 for normalised instances. flip_idx ([nkpt], may
 * be NULL) permutes keypoints after a flip. Needs nkpt * 3 floats of
 * `scratch` with flip_idx.
 */
void instgeom_flip(struct instgeom_set *s, bool vertical, float extent, const uint32_t *flip_idx, float *scratch);

/*
 * CopyPaste(mode="flip").get_params' choice on `s` (xyxy pixels of a
 * `width`-wide image, with segments): each instance's horizontal mirror
 * (Instances.fliplr), bbox_ioa of the mirrors over the originals (float32,
 * eps 1e-7), the mirrors whose overlap with every original is below 0.30,
 * sorted by their largest overlap, the first round(p * eligible) of them
 * (Python's round: half to even). Ultralytics sorts with np.argsort, whose
 * order among equal overlaps is numpy's (x86-simd-sort's on AVX-512 CPUs,
 * insertion sort's index order below 17 elements elsewhere); here equal
 * overlaps keep index order (a stable sort). Writes the indices to
 * `selected` (n entries of room), returns their number; 0 without
 * instances or segments. `scratch`: n floats.
 */
uint32_t instgeom_copy_paste_select(const struct instgeom_set *s, int width, double p, uint32_t *selected,
				    float *scratch);

/*
 * CopyPaste(mode="mixup").get_params' choice: as instgeom_copy_paste_select
 * with the other image's instances (`other`, xyxy pixels of an image of s's
 * size) as the candidates instead of the mirrors; their indices into
 * `selected` (other->n entries of room; `scratch` other->n floats). 0 when
 * s has no instances or no segments (CopyPaste leaves the image alone) or
 * `other` has none. Its apply_instances is instgeom_cat of s and the chosen
 * instances of `other`, classes from `other`.
 */
uint32_t instgeom_copy_paste_select_from(const struct instgeom_set *s, const struct instgeom_set *other, double p,
					 uint32_t *selected, float *scratch);

/*
 * CopyPaste's apply_instances: the mirrors of `selected` (count of them,
 * as instgeom_copy_paste_select gave) appended to `s` in that order, boxes,
 * segments, keypoints and classes (Instances.concatenate; the segments'
 * point counts are equal). Every array of `s` must have room for n + count
 * instances.
 */
void instgeom_copy_paste_append(struct instgeom_set *s, int width, const uint32_t *selected, uint32_t count);

/*
 * CutMix's geometry for drawn cut areas (xyxy float32, as _rand_bbox gives
 * them). instgeom_cutmix_free_areas: the indices (into `idx`, count of
 * them) of the areas that overlap none of s's boxes (bbox_ioa's sum 0).
 * instgeom_cutmix_select: the instances of the second image `s2` whose
 * bbox_ioa with the chosen area reaches `thr` (0.01 when the first image
 * has segments, else 0.1), into `indexes`. instgeom_cutmix_piece: those
 * instances (the caller copies them into `piece`, xyxy pixels) moved into
 * the area's frame (its corners truncated to int as astype(np.int32)),
 * clipped to it (preserve_obb: instgeom_clip_obb, then zero-area ones
 * removed: carry the second image's indices in piece->cls to know which)
 * and moved back; then instgeom_cat appends them. `scratch`:
 * instgeom_obb_scratch_floats(npts) floats with preserve_obb.
 */
uint32_t instgeom_cutmix_free_areas(const float *areas, uint32_t count, const struct instgeom_set *s, uint32_t *idx);
uint32_t instgeom_cutmix_select(const float area[4], const struct instgeom_set *s2, float thr, uint32_t *indexes);
void instgeom_cutmix_piece(struct instgeom_set *piece, const float area[4], bool preserve_obb, float *scratch);

/*
 * cv2.minAreaRect of n float32 points (OpenCV's convexHull and rotating
 * calipers, float arithmetic as it has it): centre, size, angle in degrees
 * in [-90, 0). `scratch`: instgeom_scratch_floats(n) floats. 0, or -EINVAL
 * for n = 0, n > INSTGEOM_MAX_POINTS or a coordinate that is not finite (a
 * perspective warp can send points to infinity; OpenCV's answer there is
 * no rectangle either).
 */
int instgeom_min_area_rect(const float *pts, uint32_t n, float *scratch, float rect[5]);
/* Floats of scratch instgeom_min_area_rect and instgeom_xywhr need for n points. */
size_t instgeom_scratch_floats(uint32_t n);

/*
 * xyxyxyxy2xywhr for one polygon of n points: minAreaRect, w the longer
 * side, the angle in radians regularised to [-pi/4, 3pi/4), in double as
 * Ultralytics computes it (numpy input: float64 out; a torch input casts to
 * its dtype after). 0 or -EINVAL as instgeom_min_area_rect.
 */
int instgeom_xywhr(const float *pts, uint32_t n, float *scratch, double xywhr[5]);

/* xywhr2xyxyxyxy for float64 input: the four corners (x, y) in its order. */
void instgeom_corners(const double xywhr[5], double corners[8]);

#endif
