/* SPDX-License-Identifier: MIT */
/*
 * A YOLO label file read as Ultralytics' verify_image_label reads it
 * (ultralytics/data/utils.py), for every task: boxes (`cls cx cy w h`),
 * segment polygons (`cls x1 y1 ... xn yn`, whose bounding box is the box;
 * an OBB's four corners are such a polygon), and pose rows (`cls cx cy w h`
 * then kpt_shape's nkpt points of ndim values).
 *
 * Its rules, mirrored: the whole file is one unit. A value that is not a
 * number (Python's float() grammar, ASCII only), rows of unequal length
 * (boxes, pose), a file that mixes segment rows and 5-value rows, a segment
 * of an odd count or no point, a coordinate above 1.01, a negative value
 * (below -0.01, or any with a negative width or height), a class that is
 * not an integer or not below the class count, NaN or infinity where
 * those checks see it: the file is corrupt, and Ultralytics drops the image
 * (`why` says which rule). Rows equal in every value are kept once, the
 * survivors then in Ultralytics' order (np.unique's: sorted rows; for
 * segments, sorted bytes of class and points). Pose with ndim 2 gets a
 * visibility of 0 where x or y is negative, else 1. Parsing is bounded by
 * the text (at most LABELS_MAX_FILE_BYTES, labels.h).
 */
#ifndef STOKER_INSTANCES_H
#define STOKER_INSTANCES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* kpt_shape's bounds: points per object, values per point (2 or 3). */
#define INSTANCES_MAX_KPT 1024u

struct instances_spec {
	uint32_t num_classes; /* the data set's nc: a class must be below it */
	bool single_cls;      /* Ultralytics' single_cls: the class check passes */
	bool keypoint;        /* task pose: rows are 5 + nkpt * ndim values */
	uint32_t nkpt, ndim;  /* kpt_shape (0, 0: none); also trims pose rows for other tasks */
};

struct instances {
	uint32_t n;        /* objects */
	float *cls;        /* [n] */
	float *box;        /* [n][4] cx, cy, w, h normalised */
	uint32_t *seg_off; /* [n + 1] point offsets into seg; NULL: no segments */
	float *seg;        /* [seg_off[n]][2] x, y normalised */
	float *kpt;        /* [n][nkpt][3] x, y, visibility; NULL unless keypoint */
};

/*
 * Parse label text (len bytes, a UTF-8 byte-order mark skipped) into *out
 * (written on success only). 0; -EINVAL: corrupt as above, `why` set;
 * -ENOMEM. An empty file is 0 objects.
 */
int instances_parse(const char *text, size_t len, const struct instances_spec *spec, struct instances *out, char *why,
		    size_t whylen);
/* Accepts a zeroed struct. */
void instances_clear(struct instances *in);

#endif
