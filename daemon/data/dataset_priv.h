/* SPDX-License-Identifier: MIT */
/*
 * What the data-set files share, private to daemon/data/dataset*.c (no
 * other file includes it): the sample table under construction and the
 * helpers one kind of data set lends another.
 *
 *   dataset.c              the core: struct dataset's life, reads, sizes,
 *                          cache keys, the builder
 *   dataset_local.c        ImageFolder trees and `path label` list files
 *   dataset_yolo.c         Ultralytics' YOLO detection data sets
 *   dataset_remote.c       data sets at URLs (s3://, http(s)://)
 *   dataset_remote_yolo.c  YOLO detection data sets at URLs
 *
 * The ds_ prefix marks these names as the data-set files' own.
 */
#ifndef STOKER_DATASET_PRIV_H
#define STOKER_DATASET_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dataset.h"
#include "strvec.h"

/* ---- dataset.c ---- */

/* Growing sample table under construction. */
struct builder {
	char *names;
	size_t names_len, names_cap;
	uint64_t *off;
	int32_t *labels;
	uint64_t n, cap, max;
};

/* builder_add_sample(), saying in errbuf why it failed. */
int ds_builder_add(struct builder *b, const char *name, int32_t label, const char *path, char *errbuf, size_t errlen);

void ds_builder_free(struct builder *b);

/* Whether `name`'s extension (after the last dot; the whole name if none,
 * as Ultralytics' rpartition has it) is one of `exts`. */
bool ds_has_extension(const char *name, const char *const *exts, bool need_dot);

/* The data set the builder's samples make; takes over b's arrays and
 * dirfd on success. */
int ds_make(struct builder *b, const char *root, const char *key, int dirfd, uint32_t num_classes,
	    struct dataset **out);

/* The data set of shards just opened (shards.h): takes the table's arrays
 * over; the table is freed either way. `name` is what was opened, for the
 * message. */
int ds_from_shards(const char *name, struct shard_table *t, struct dataset **out, char *errbuf, size_t errlen);

/*
 * Read `path` (relative to dirfd) whole into *buf (grown as needed, never
 * beyond max_bytes): its length, -EFBIG over max_bytes, -EINVAL when it is
 * not a regular file, or -errno.
 */
int64_t ds_read_bounded(int dirfd, const char *path, uint8_t **buf, size_t *cap, uint64_t max_bytes);

/* ---- dataset_local.c ---- */

/* torchvision's IMG_EXTENSIONS (ImageFolder), matched as its
 * name.lower().endswith(IMG_EXTENSIONS): the same files, so the same order. */
bool ds_is_folder_image(const char *name);

/*
 * Collect every directory under `rel` (itself included), depth first; the
 * caller sorts the list as full path strings, which is os.walk's sorted order.
 */
int ds_walk_dirs(int rootfd, const char *rel, unsigned depth, struct strvec *dirs);

/* The image files (by `accept`) directly in `rel`, sorted by name. */
int ds_list_files(int rootfd, const char *rel, bool (*accept)(const char *), struct strvec *files);

/* The directory a list file's relative paths start from. */
int ds_open_parent(const char *file, int *dirfd, char *errbuf, size_t errlen);

/* `path label` lines from f (named `path` in messages). */
int ds_scan_list_stream(FILE *f, const char *path, struct builder *b, uint32_t *num_classes, char *errbuf,
			size_t errlen);

/* ---- dataset_yolo.c ---- */

/*
 * Where ds_read_labels gets sample i's label file: its text into *text (grown,
 * bounded by LABELS_MAX_FILE_BYTES), its length; -ENOENT when it has none
 * (no objects); another -errno, with the file's name in `label` and, but
 * for -ENOMEM, -ENAMETOOLONG and -EFBIG, why in `why`. Called for 0, 1, ...
 */
typedef int64_t (*ds_label_read_fn)(void *ctx, const struct dataset *ds, uint64_t i, char *label, size_t label_size,
				    uint8_t **text, size_t *cap, char *why, size_t whylen);

/* Ultralytics' IMG_FORMATS that stoker decodes (heic, heif, avif, jp2 and
 * dng need decoders it does not have; docs/detection.md). */
bool ds_is_yolo_image(const char *name);
/* Those extensions as messages name them (one list with ds_is_yolo_image's). */
#define DS_YOLO_IMAGE_EXTS ".bmp .jpeg .jpg .mpo .png .tif .tiff .webp"

/* A .txt of image paths, one a line, relative to its directory, read from
 * f (named `path` in messages). */
int ds_scan_image_list_stream(FILE *f, const char *path, struct builder *b, char *errbuf, size_t errlen);

/* Every sample's objects, in sample order: detect's labels (spec NULL), or
 * read as instances.h reads them, the images of corrupt files dropped
 * (dataset_open_detect). */
int ds_read_labels(struct dataset *ds, const struct instances_spec *spec, ds_label_read_fn read_fn, void *read_ctx,
		   label_report_fn report, void *ctx, char *errbuf, size_t errlen);

/* A detection data set of shards just opened (ds, dropped on failure): its
 * key says "detect", the split and `name` (what was opened: a remote yaml
 * and its shards' pattern are two data sets, with their own class names),
 * and the yaml's names (taken over) name its classes. */
int ds_detect_shards_keyed(struct dataset *ds, const char *path, const char *split, const char *name,
			   struct data_yaml *yaml, struct dataset **out, char *errbuf, size_t errlen);

/* ---- dataset_remote.c ---- */

/* One object of an S3 ImageFolder listing. */
struct listed {
	char *rel;                 /* the key after the prefix: class/.../file.jpg */
	size_t class_len, dir_len; /* lengths of "class" and "class/.../" */
	uint64_t size;
};

struct listing {
	struct listed *v;
	size_t n, cap;
	size_t prefix_len;
	uint64_t max;
	char *errbuf;
	size_t errlen;
	const char *url, *bucket;
	struct strvec tars; /* s3:// URLs of the .tar objects at the prefix's top level */
};

/* Detection shards: the classes, and where label errors go. */
struct shard_detect {
	uint32_t num_classes;
	label_report_fn report;
	void *report_ctx;
};

/* The HTTP URL of `name`: absolute (http(s)://, s3://, /path) or relative
 * to the data set's base. */
int ds_remote_object_url(const struct dataset_remote *rm, const char *name, char *out, size_t size);

/* A worker's fetch of one sample, when the fetch stage did not bring it
 * (a replacement candidate): blocking, through the I/O thread. */
int64_t ds_remote_read(const struct dataset *ds, uint64_t index, uint8_t **buf, size_t *cap, uint64_t max_bytes);

void ds_listing_free(struct listing *l);

int ds_listing_push(struct listing *l, const char *rel, size_t class_len, size_t dir_len, uint64_t size);

/* The object at `loc` (an absolute location: http(s)://, s3://) whole, in
 * req (the caller frees req->data); on failure, why in errbuf. */
int ds_remote_get(const struct dataset_remote *rm, const char *loc, struct fetch_req *req, char *errbuf, size_t errlen);

/* A remote data set's state for `url`: its fetch, its S3 settings and,
 * for s3://, the credentials. */
int ds_remote_new(const char *url, struct fetch *f, const struct s3_config *s3, struct dataset_remote **out,
		  char *errbuf, size_t errlen);

/* The data set of b's names, relative to rm->base (set), with the listed
 * *sizes (taken over; NULL: none); it takes rm over. */
int ds_remote_finish(struct dataset_remote *rm, struct builder *b, uint64_t **sizes, const char *root, const char *key,
		     uint32_t num_classes, struct dataset **out, char *errbuf, size_t errlen);

/* The shards at `locs` (NULL: the pattern `url`), read through rm, which
 * the data set takes over (freed here on failure); det: detection shards. */
int ds_open_remote_shards(struct dataset_remote *rm, const char *url, struct strvec *locs,
			  const struct shard_detect *det, uint64_t max_samples, struct dataset **out, char *errbuf,
			  size_t errlen);

#endif
