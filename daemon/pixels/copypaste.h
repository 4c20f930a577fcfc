/* SPDX-License-Identifier: MIT */
/*
 * CopyPaste's pixels, as Ultralytics' CopyPaste.apply_image makes them
 * (ultralytics/data/augment.py, 8.4): the chosen instances' polygons, each
 * truncated to int32 (astype(np.int32)) and drawn with
 * cv2.drawContours(im_new, [polygon], -1, 1, cv2.FILLED) into one mask (for
 * one int32 contour drawContours FILLED sets the pixels cv2.fillPoly sets:
 * instmask_fill; tests/ultralytics/test_copypaste.py checks both), then
 * cv2.copyTo(result, im_new, im): under the mask the pixels of `result`,
 *
 *   mode "flip"   the image mirrored, cv2.flip(im, 1) (on the mosaic
 *                 canvas, before RandomPerspective)
 *   mode "mixup"  the other image (after RandomPerspective, the other
 *                 sample made as this one is)
 *
 * Which instances are chosen is instgeom's (instgeom_copy_paste_select).
 * Both modes are row-local (a horizontal mirror reads only its own row), so
 * a caller that makes its image a row at a time pastes each row as it is
 * made: copypaste_mask once, then copypaste_row for each row. Images are
 * packed RGB (or any 3 bytes a pixel: the copy does not look at them).
 *
 * The mask and the fill's scratch live in struct copypaste (one per worker
 * thread; not thread safe).
 */
#ifndef STOKER_COPYPASTE_H
#define STOKER_COPYPASTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct copypaste;

int copypaste_new(struct copypaste **out);
/* Accepts NULL. */
void copypaste_free(struct copypaste *c);

/*
 * The mask of a w x h image: polygon selected[k] of `seg` ([..][npts][2]
 * float32 pixels) for each k < count, filled. count 0: an empty mask (the
 * rows then copy nothing). 0; -EINVAL (w or h 0 or over INT_MAX / 2, npts 0
 * with count > 0); -ENOMEM.
 */
int copypaste_mask(struct copypaste *c, uint32_t w, uint32_t h, const float *seg, uint32_t npts,
		   const uint32_t *selected, uint32_t count);

/* Row y (w pixels of 3 bytes) with the mask's pixels pasted in place: from
 * `src`, the other image's row y, or (src NULL) from the row mirrored. */
void copypaste_row(const struct copypaste *c, uint32_t y, uint8_t *row, const uint8_t *src);

/* copypaste_row on every row of the mask's w x h image (`stride` bytes a
 * row; `src` NULL or the other image, `src_stride` bytes a row). */
void copypaste_image(const struct copypaste *c, uint8_t *img, size_t stride, const uint8_t *src, size_t src_stride);

/*
 * Mode mixup on images made flipped (detect.c folds RandomFlip into the
 * warp that makes them): `img` and `src` are the two images flipped
 * vertically and / or horizontally, and the mask is read through the same
 * flips, so the result is the flipped result of the paste. `src` must not
 * be NULL.
 */
void copypaste_image_flipped(const struct copypaste *c, uint8_t *img, size_t stride, const uint8_t *src,
			     size_t src_stride, bool flipud, bool fliplr);

#endif
