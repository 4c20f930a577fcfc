/* SPDX-License-Identifier: MIT */
/*
 * Detection labels as Ultralytics keeps them: one text file per image, one
 * object a line, and the data set's `data.yaml`.
 *
 * A label line is `class cx cy w h` (centre and size normalised to the
 * image, 0..1) or a segment `class x1 y1 x2 y2 ... xn yn` (n >= 3 points,
 * normalised), whose bounding box becomes the object's box. Blank lines are
 * skipped. A line that does not parse, or whose class is not a non-negative
 * integer (below the number of names when the yaml gives names), or whose
 * values lie outside 0..1 (a tolerance of 0.001, then clamped), or whose box
 * has no width or height, is one label error: reported with file and line,
 * and that object dropped; the rest of the file stands.
 */
#ifndef STOKER_LABELS_H
#define STOKER_LABELS_H

#include <stddef.h>
#include <stdint.h>

#include "detect.h"

/* Classes above this are label errors when the yaml gives no names. */
#define LABELS_MAX_CLASSES 65536u
/* A label file larger than this is one label error, and no objects. */
#define LABELS_MAX_FILE_BYTES (4u << 20)

/* Told about each label error: the file, its line (0: the whole file), why. */
typedef void (*label_report_fn)(void *ctx, const char *path, unsigned long line, const char *why);

struct box_vec {
	struct detect_box *v;
	size_t n, cap;
};

/*
 * Parse the label file text `text` (len bytes; need not end in NUL) of
 * `path`, appending its objects to `out`. `num_classes` 0 means any class
 * below LABELS_MAX_CLASSES. Returns the number of label errors (each also
 * reported), or -ENOMEM.
 */
int labels_parse(const char *text, size_t len, uint32_t num_classes, const char *path, label_report_fn report,
		 void *ctx, struct box_vec *out);

/* Where Ultralytics looks for an image's labels: the last "/images/" of
 * its path replaced by "/labels/", the extension by ".txt". -ENAMETOOLONG. */
int labels_path(const char *image_path, char *out, size_t outlen);

/*
 * A data.yaml, the subset Ultralytics' data sets use: `path` (the root; a
 * relative one is taken from the yaml's directory), the split keys `train`,
 * `val`, `test` (a directory or a .txt list of images, relative to the
 * root), and `names` (a mapping `0: person` or a list, block or inline).
 */
struct data_yaml {
	char *split_path; /* the absolute path (or URL) the split names */
	char **names;     /* [nnames], by class index */
	uint32_t nnames;
};

/* -ENOENT: no such split in the yaml (errbuf says which exist); -EINVAL:
 * not a yaml this understands (errbuf says where). */
int data_yaml_load(const char *path, const char *split, struct data_yaml *out, char *errbuf, size_t errlen);
/* The same for yaml text already read (len bytes) from `path`, a file or a
 * URL: relative places resolve against its directory, and a root or split
 * that is a URL stands as it is. */
int data_yaml_parse(const char *text, size_t len, const char *path, const char *split, struct data_yaml *out,
		    char *errbuf, size_t errlen);
/* Accepts a zeroed struct. */
void data_yaml_clear(struct data_yaml *y);

#endif
