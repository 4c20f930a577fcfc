/* SPDX-License-Identifier: MIT */
/*
 * Ultralytics' rectangular batches (BaseDataset.set_rectangle), used by its
 * validator and by rect=True training: the data set ordered by aspect ratio h / w, cut into batches,
 * each made in its own shape
 *
 *     shape = [maxi, 1] if the batch's largest ratio maxi < 1,
 *             [1, 1 / mini] if its smallest mini > 1, else [1, 1];
 *     (H, W) = ceil(shape * image_size / stride + pad) * stride,
 *
 * computed in double as numpy does, so the shapes are Ultralytics' own.
 * The sort is stable (ties keep data-set order); numpy's argsort is not,
 * so among images of equal ratio the order may differ from Ultralytics',
 * never the shapes. An image of unknown size (0 x 0) counts as square.
 */
#ifndef STOKER_RECT_H
#define STOKER_RECT_H

#include <stdbool.h>
#include <stdint.h>

/* Bounds on the options (the attach checks them). */
#define RECT_MAX_STRIDE 1024u
#define RECT_MAX_PAD 8.0

/* Indices 0..n-1 ordered by the aspect ratio of sizes[i] ([n][2] width,
 * height): malloc'd into *out. -ENOMEM. */
int rect_order(const uint32_t *sizes, uint64_t n, uint64_t **out);

/* The shape of the batch whose images are order[first .. last] (sorted
 * ascending by ratio, last >= first). */
void rect_batch_shape(const uint32_t *sizes, const uint64_t *order, uint64_t first, uint64_t last, uint32_t image_size,
		      uint32_t stride, double pad, uint32_t *height, uint32_t *width);

/* Whether the n images in `order` (rect_order's), cut into batches of
 * batch_size, make batches of one shape: then that shape in *height and
 * *width. Ultralytics' trainer keeps its shuffle only then (its
 * get_dataloader: "'rect=True' is incompatible with DataLoader shuffle"). */
bool rect_one_shape(const uint32_t *sizes, const uint64_t *order, uint64_t n, uint32_t batch_size, uint32_t image_size,
		    uint32_t stride, double pad, uint32_t *height, uint32_t *width);

/* The largest side any batch can have: a square batch's. */
uint64_t rect_max_side(uint32_t image_size, uint32_t stride, double pad);

#endif
