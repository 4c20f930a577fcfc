/* SPDX-License-Identifier: MIT */
/*
 * A data set: the ordered list of (file, label) samples.
 *
 * - A directory in ImageFolder layout: class = each sub-directory, label =
 *   the index of its name in sorted order; samples ordered by class, then by
 *   path (torchvision's order: os.walk sorted, file names sorted), the
 *   files torchvision's IMG_EXTENSIONS take (.jpg .jpeg .png .ppm .bmp .pgm
 *   .tif .tiff .webp, any case). The format is told by content when decoded.
 * - A text file of `relative/path label` lines (label = the last field;
 *   relative to the list file's directory; '#' comments and blank lines
 *   skipped).
 * - For detection (dataset_open_detect): Ultralytics' YOLO layout. A
 *   directory (every image under it by Ultralytics' IMG_FORMATS that stoker
 *   decodes: bmp jpeg jpg mpo png tif tiff webp; sorted by path), a .txt list of
 *   image paths, or a data.yaml naming a split; each image's objects from
 *   its label file (labels.h). A missing label file means no objects.
 * - WebDataset tar shards (shards.h), for either task.
 * A sample's index is its position in that order.
 *
 * Opened once (a blocking scan, run off the loop thread), then read-only and
 * shared by every session that names the same real path. Workers read files
 * concurrently; the only mutable part is the atomic "known bad" bitmap.
 */
#ifndef STOKER_DATASET_H
#define STOKER_DATASET_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "labels.h"
#include "s3.h"
#include "shards.h"

/*
 * A data set whose samples are objects (s3://, http://, https://), fetched
 * with fetch.h. Read-only once opened, like the rest of the data set.
 */
struct dataset_remote {
	struct fetch *fetch;
	struct s3_config s3;
	struct fetch_auth auth;
	bool is_signed;                /* auth is used */
	char base[4096];               /* the HTTP URL relative sample names are appended to (ends in '/') */
	char origin[512];              /* scheme://host[:port] of base, for names starting with '/' */
	uint64_t *sizes;               /* [count] listed sizes; NULL when not listed (list files) */
	uint64_t listed_ns;            /* CLOCK_MONOTONIC when listed: the listing cache's age */
	struct shard_source shard_src; /* tar shards at URLs: HEAD and range requests */
	/* Listed and read with one client's own keys (s3.keys): shared only
	 * with sessions holding the same keys, dropped with the last of them. */
	bool per_client;
};

/* What rm's requests are signed with: NULL when unsigned. */
static inline const struct fetch_auth *dataset_remote_auth(const struct dataset_remote *rm)
{
	return rm->is_signed ? &rm->auth : NULL;
}

struct dataset {
	char *root; /* real path of the directory or list file */
	int dirfd;  /* directory sample paths are relative to (O_PATH) */
	uint64_t count;
	uint32_t num_classes;
	char *names;                /* all relative paths, NUL separated */
	uint64_t *name_off;         /* [count] offsets into names */
	int32_t *labels;            /* [count] */
	_Atomic uint64_t *bad;      /* [count/64+1] bitmap of files that failed to decode */
	_Atomic uint64_t bad_files; /* bits set in `bad` */
	unsigned refs;              /* loop thread only */
	/* The name sessions find it by: the real path, and for detection the
	 * split too (the same files can be two data sets). */
	char *key;
	/* Detection: sample i's objects are boxes[box_off[i] .. box_off[i+1]). */
	bool detect;
	struct detect_box *boxes;
	uint64_t *box_off;     /* [count + 1] */
	uint64_t label_errors; /* objects dropped from label files */
	uint64_t label_files_missing;
	/* Segment, OBB and pose data sets (dataset_open_detect with an
	 * instances spec): object k of boxes[] has the polygon
	 * seg[seg_off[k] .. seg_off[k + 1]) (points of x, y normalised; NULL
	 * when no object has one: Ultralytics' rule drops every segment of a
	 * data set whose objects do not all have one) and the keypoints
	 * kpt[k][nkpt][3] (x, y normalised, visibility; NULL but for pose). */
	bool instances;
	uint64_t *seg_off; /* [objects + 1] */
	float *seg;
	float *kpt;
	uint32_t nkpt;
	uint64_t label_files_corrupt; /* images dropped for their label file (instances) */
	char **class_names;           /* [num_classes] from the yaml, else NULL */
	/* Tar shards (shards.h): samples are members; NULL for files. */
	struct shardset *shards;
	/* [count][2] each image's width and height from its header, for
	 * rectangular batches; NULL until a session needs them (set once, by
	 * the loop thread, then read-only). */
	uint32_t *sizes;
	struct dataset_remote *remote; /* NULL: local files */
};

/* realpath() of a data set's name; for a shard pattern, of its directory
 * (the pattern stays). 0 or -errno. */
int dataset_realpath(const char *path, char real[PATH_MAX]);

/* Scan `path`. On failure, a message for the client goes to errbuf. */
int dataset_open(const char *path, uint64_t max_samples, struct dataset **out, char *errbuf, size_t errlen);
/*
 * Scan a detection data set at `path` (a directory, a .txt list of images
 * or a data.yaml, whose split `split` is taken) and read every label file.
 * Label errors go to `report` (may be NULL) and are counted.
 *
 * `spec` NULL: detect's labels (labels.h), each bad line dropped on its
 * own. Else each file is read as Ultralytics' verify_image_label reads it
 * for the spec's task (instances.h; its num_classes is the yaml's, or
 * LABELS_MAX_CLASSES without names): a corrupt or unreadable file is
 * reported, counted in label_files_corrupt, and its image dropped from the
 * data set, as Ultralytics drops it; segments and keypoints are kept
 * (their floats bounded by DATASET_MAX_INSTANCE_FLOATS). Tar shards take
 * no spec (-EINVAL).
 */
struct instances_spec;
int dataset_open_detect(const char *path, const char *split, const struct instances_spec *spec, uint64_t max_samples,
			label_report_fn report, void *report_ctx, struct dataset **out, char *errbuf, size_t errlen);

/* The floats of segment points and keypoints one data set may hold (2 GiB). */
#define DATASET_MAX_INSTANCE_FLOATS (1ull << 29)

/* A YOLO data set's key (dataset->key): its task's labels, split and path:
 * "detect:SPLIT:PATH", "segment:...", "pose17x3:...". -ENAMETOOLONG. */
int dataset_yolo_key(const struct instances_spec *spec, const char *split, const char *path, char *out, size_t size);
/*
 * Open a remote data set at `url`:
 *   a brace pattern of tar shards or one .tar (s3:// or http(s)://):
 *     WebDataset shards (shards.h), indexed through range requests;
 *   s3://BUCKET/PREFIX/ (or a PREFIX whose last part has no '.'): an
 *     ImageFolder laid out in the keys under it (ListObjectsV2);
 *   s3://BUCKET/KEY, http(s)://HOST/PATH: a list file fetched from there;
 *     its relative names are resolved against its own URL's directory, and
 *     absolute ones (http://, https://, s3://, /path) taken as they are.
 * HTTP has no listing, so an http(s):// directory is refused: give a list
 * file. A refused request (wrong credentials: 403) fails the open with the
 * store's message.
 */
int dataset_open_remote(const char *url, uint64_t max_samples, struct fetch *f, const struct s3_config *s3,
			struct dataset **out, char *errbuf, size_t errlen);
/*
 * A detection data set at `url` (dataset_open_detect's, over the network):
 * a data.yaml (its path and split resolved against its URL, "." and ".."
 * collapsed; a "/path" is on its host or in its bucket), a .txt list of
 * images relative to itself, an S3 prefix (every image under it, sorted by
 * key), or tar shards. Each image's label file is Ultralytics' path rule
 * applied to its URL, fetched a bounded window at a time: a 404
 * is no objects, other failures are label errors (reported, counted).
 */
int dataset_open_remote_detect(const char *url, const char *split, const struct instances_spec *spec,
			       uint64_t max_samples, struct fetch *f, const struct s3_config *s3,
			       label_report_fn report, void *report_ctx, struct dataset **out, char *errbuf,
			       size_t errlen);
/* Sample `index`'s HTTP URL (for a tar shard's member, the shard's), and
 * the byte range to ask for (length 0: the whole object). -ENAMETOOLONG. */
int dataset_url(const struct dataset *ds, uint64_t index, char *out, size_t size);
void dataset_range(const struct dataset *ds, uint64_t index, uint64_t *offset, uint64_t *length);
/*
 * Does the store let `s3`'s keys read remote data set ds? A signed HEAD of
 * its first object (a data set already listed, attached again: S3 decides
 * at each attach, not only at the listing). 0, or -errno with the store's
 * reason in errbuf.
 */
int dataset_remote_probe(const struct dataset *ds, const struct s3_config *s3, char *errbuf, size_t errlen);

struct dataset *dataset_ref(struct dataset *ds);
/* An empty data set of `count` samples (no directory: dirfd -1) for the
 * scanners to fill; 0 or -ENOMEM. */
int dataset_new(const char *root, const char *key, uint64_t count, struct dataset **out);
/* Drop a reference; frees on the last. Accepts NULL. */
void dataset_unref(struct dataset *ds);

/*
 * Read sample `index`'s file into *buf (grown as needed, never beyond
 * max_bytes). Returns the length, -EFBIG over max_bytes, or -errno.
 */
int64_t dataset_read(const struct dataset *ds, uint64_t index, uint8_t **buf, size_t *cap, uint64_t max_bytes);

/*
 * Every sample's image width and height as Ultralytics sees them: read
 * from its header (header.h: any format stoker decodes) and turned by its
 * EXIF orientation where cv2 applies it. A tar shard's member is read
 * whole, up to 64 MiB. malloc'd [count][2]. A file whose header cannot be
 * read gets 0 x 0 (its sample is served as any other, replaced if it does
 * not decode). Blocking: run it off the loop thread. -ENOMEM.
 */
int dataset_read_sizes(const struct dataset *ds, uint32_t **out);

/* Size and modification time of sample `index`'s file, for cache keys.
 * For a remote sample, its listed size (0 when not listed) and 0. */
int dataset_stat(const struct dataset *ds, uint64_t index, uint64_t *size, int64_t *mtime_ns);

/* Sample `index`'s node-cache key: (path or URL, size, mtime). */
int dataset_cache_key(const struct dataset *ds, uint64_t index, struct cache_key *key);

/* Is `len` bytes just read or fetched what the key says (so cacheable)? */
static inline bool dataset_key_matches(const struct dataset *ds, const struct cache_key *key, uint64_t len)
{
	/* Unlisted remote objects have no size to hold against. */
	return len == key->size || (ds->remote && !ds->remote->sizes);
}

static inline const char *dataset_name(const struct dataset *ds, uint64_t index)
{
	return ds->names + ds->name_off[index];
}

static inline int dataset_is_bad(const struct dataset *ds, uint64_t index)
{
	return (atomic_load_explicit(&ds->bad[index / 64], memory_order_relaxed) >> (index % 64)) & 1;
}

/* True for the one caller that marked it first (so it is logged once). */
static inline bool dataset_mark_bad(struct dataset *ds, uint64_t index)
{
	uint64_t bit = 1ull << (index % 64);

	if (atomic_fetch_or_explicit(&ds->bad[index / 64], bit, memory_order_relaxed) & bit)
		return false;
	atomic_fetch_add_explicit(&ds->bad_files, 1, memory_order_relaxed);
	return true;
}

#endif
