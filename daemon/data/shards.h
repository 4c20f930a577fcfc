/* SPDX-License-Identifier: MIT */
/*
 * Data sets stored as WebDataset tar shards.
 *
 * A shard data set is named by
 *   - a brace pattern, `dir/train-{000000..000146}.tar` (braceexpand's
 *     rules: ranges with zero padding, comma lists, several groups);
 *   - one `.tar` file;
 *   - a directory holding `.tar` files at its top level (sorted by name);
 *   - a text file listing shards, one path or pattern a line (relative to
 *     the list's directory; '#' comments and blank lines skipped), told
 *     from a `path label` list by its first entry ending in `.tar`.
 * Samples are the shards' members grouped by key as WebDataset groups them:
 * the key of `a/b.c.jpg` is `a/b`, its extension `c.jpg` (lower-cased);
 * consecutive members with one key make a sample. The image is the first
 * of the extensions jpg, jpeg, png, webp, bmp, tif, tiff, ppm, pgm, mpo
 * the sample has;
 * a sample without one is skipped (counted). Classification labels come
 * from `.cls` (an integer), else `.json` (its top-level "label", an
 * integer), else `.txt` (an integer); detection objects from `.txt` in YOLO
 * format (a sample without one has no objects). A sample's index is its
 * position over the shards in order.
 *
 * Each shard's member index (tar.h) is built once and kept in the daemon's
 * shard index directory, keyed by the shard's path and checked against its
 * size and modification time; random access is then one pread per sample.
 *
 * Shard bytes come only through shard_stat() and shard_read(), which name a
 * shard by location: local paths here, and any other source (range
 * requests) can back the same two calls.
 */
#ifndef STOKER_SHARDS_H
#define STOKER_SHARDS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "labels.h"
#include "strvec.h"

/* At most this many shards in a data set, and members in one shard. */
#define SHARDS_MAX 1000000u
#define SHARDS_MAX_MEMBERS (64u << 20)

/*
 * Shards that are not local files (objects over HTTP/S3: dataset_remote.c): how
 * to stat and read a location. Kept by the caller for the data set's life.
 */
struct source_reader;
struct shard_source {
	void *ctx;
	/* Size, and a stamp that changes with the object (its time). */
	int (*stat)(void *ctx, const char *loc, uint64_t *size, int64_t *stamp);
	/* len bytes at off (short only at the end), or -errno. Blocking. */
	int64_t (*read)(void *ctx, const char *loc, uint64_t off, void *buf, size_t len);
};

struct shard {
	char *loc;                       /* absolute path, or a URL read through src */
	const struct shard_source *src;  /* NULL: a local file */
	struct source_reader *readahead; /* while opening a remote shard: its bytes read ahead */
	uint64_t size;                   /* when indexed */
	int64_t stamp;                   /* modification time in ns when indexed */
	uint64_t first;                  /* index of its first sample */
};

struct shardset {
	struct shard *v;
	uint32_t n;
	uint64_t *starts;       /* [n + 1]: shard i holds samples starts[i] .. starts[i+1]-1 */
	uint32_t *sample_shard; /* [samples] */
	uint64_t *sample_off;   /* [samples]: the image member's data offset */
	uint64_t *sample_size;  /* [samples] */
	uint64_t skipped;       /* keys without an image member */
	uint64_t indexed;       /* shards indexed now (not from the index directory) */
};

/*
 * A shard data set as opened: its shards and the sample table (names,
 * labels, objects) that dataset.c makes its struct dataset of, taking the
 * arrays over. Shards know nothing of struct dataset.
 */
struct shard_table {
	struct shardset *set;
	char *root;     /* names are shown relative to it (the real directory, the URL's) */
	char *key;      /* the name sessions find the data set by */
	uint64_t count; /* samples */
	uint32_t num_classes;
	bool detect;
	char *names;              /* "shard:member" of each sample's image, NUL separated */
	uint64_t *name_off;       /* [count] offsets into names */
	int32_t *labels;          /* [count] */
	struct detect_box *boxes; /* detection: sample i's objects are boxes[box_off[i] .. box_off[i+1]) */
	uint64_t *box_off;        /* [count + 1]; NULL unless detect */
	uint64_t label_errors;    /* objects dropped from label files */
	uint64_t label_files_missing;
};

/* Frees what is left in t (what a caller took over it set to NULL) and
 * clears it. Accepts NULL. */
void shard_table_free(struct shard_table *t);

/* Where indexes are kept ("" or NULL: nowhere; they are rebuilt on each
 * open). Set once at start-up, before any scan. */
void shards_set_index_dir(const char *dir);

/* For a brace pattern: true, with real holding its directory's real path
 * and the pattern; false for anything else (realpath() serves). */
bool shards_realpath(const char *path, char real[PATH_MAX]);

/* Does `path` name a shard data set (see above)? */
bool shards_spec(const char *path);

/*
 * Open the shard data set `path`: index every shard (or load its index),
 * group members into samples and read their labels, into *out. For detection,
 * `num_classes` bounds the classes (0: any) and label errors go to report.
 * On failure, a message for the client (with the shard and offset at
 * fault) goes to errbuf.
 */
int shards_open(const char *path, bool detect, uint32_t num_classes, uint64_t max_samples, label_report_fn report,
		void *report_ctx, struct shard_table *out, char *errbuf, size_t errlen);
/*
 * The same for shards at URLs, read through `src`: the shards `locs` names
 * (taken over; NULL: `url` is a brace pattern or one .tar). Their indexes
 * are kept as local ones are, keyed by the URL, the size and the stamp;
 * indexing reads the shard once, in large ranges. detect, num_classes,
 * report: as for shards_open.
 */
int shards_open_source(const char *url, struct strvec *locs, const struct shard_source *src, bool detect,
		       uint32_t num_classes, uint64_t max_samples, label_report_fn report, void *report_ctx,
		       struct shard_table *out, char *errbuf, size_t errlen);
/* A list of shards read from f (named `list` in messages): each entry a
 * location or pattern, relative to `dir` unless absolute (a path, a URL),
 * expanded onto out. The first entry of such a list, trimmed, into buf
 * (false: none); a list whose first entry ends in .tar lists shards. */
int shards_list_read(FILE *f, const char *list, const char *dir, struct strvec *out, char *errbuf, size_t errlen);
bool shards_list_first_entry(FILE *f, char *buf, size_t len);

/* Does the URL name shards (a brace pattern, or a path ending in .tar)? */
bool shards_url_spec(const char *url);
void shardset_free(struct shardset *s);

/* Sample `index`'s image bytes (dataset_read's contract); -ESTALE when its
 * shard changed since it was indexed. */
int64_t shards_read(const struct shardset *s, uint64_t index, uint8_t **buf, size_t *cap, uint64_t max_bytes);
/* Size and a stamp that changes with the shard and names the member. */
int shards_stat(const struct shardset *s, uint64_t index, uint64_t *size, int64_t *stamp);

/* The narrow interface to shard bytes. */
int shard_stat(const char *loc, uint64_t *size, int64_t *stamp);
/* Exactly len bytes at off of shard `sh`, or -errno (-ESTALE: it changed,
 * -EIO: it is shorter than indexed). */
int shard_read(const struct shard *sh, uint64_t off, void *buf, size_t len);

/* Brace-expand `pattern` (at most `max` results) onto out. -E2BIG over max,
 * -EINVAL for a malformed range, -ENOMEM. */
int shards_expand(const char *pattern, uint64_t max, struct strvec *out);

/* WebDataset's key/extension split of a member name; false when it has none
 * (no dot in its last component, ...). */
bool shards_key_split(const char *name, size_t *key_len, const char **ext);

#endif
