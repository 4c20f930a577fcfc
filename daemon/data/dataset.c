/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "dataset.h"
#include "dataset_priv.h"
#include "errtext.h"
#include "grow.h"
#include "header.h"
#include "shards.h"

static int builder_add_sample(struct builder *b, const char *name, int32_t label)
{
	size_t len = strlen(name) + 1;

	if (b->n >= b->max)
		return -EFBIG;
	if (b->n == b->cap) {
		uint64_t cap = b->cap ? 2 * b->cap : 1024;
		uint64_t *off = realloc(b->off, cap * sizeof(*off));
		if (!off)
			return -ENOMEM;
		b->off = off;
		int32_t *labels = realloc(b->labels, cap * sizeof(*labels));
		if (!labels)
			return -ENOMEM;
		b->labels = labels;
		b->cap = cap;
	}
	if (b->names_len + len > b->names_cap) {
		size_t cap = b->names_cap ? 2 * b->names_cap : 65536;
		while (cap < b->names_len + len)
			cap *= 2;
		char *names = realloc(b->names, cap);
		if (!names)
			return -ENOMEM;
		b->names = names;
		b->names_cap = cap;
	}
	memcpy(b->names + b->names_len, name, len);
	b->off[b->n] = b->names_len;
	b->labels[b->n] = label;
	b->names_len += len;
	b->n++;
	return 0;
}

void ds_builder_free(struct builder *b)
{
	free(b->names);
	free(b->off);
	free(b->labels);
	memset(b, 0, sizeof(*b));
}

bool ds_has_extension(const char *name, const char *const *exts, bool need_dot)
{
	const char *dot = strrchr(name, '.');

	if (!dot && need_dot)
		return false;
	for (const char *const *e = exts; *e; e++)
		if (strcasecmp(dot ? dot + 1 : name, *e) == 0)
			return true;
	return false;
}

int ds_builder_add(struct builder *b, const char *name, int32_t label, const char *path, char *errbuf, size_t errlen)
{
	int r = builder_add_sample(b, name, label);

	if (r == -EFBIG)
		set_err(errbuf, errlen, "%s: more than %llu samples", path, (unsigned long long)b->max);
	else if (r < 0)
		set_err(errbuf, errlen, "%s: %s", path, strerror(-r));
	return r;
}

int dataset_new(const char *root, const char *key, uint64_t count, struct dataset **out)
{
	struct dataset *ds = calloc(1, sizeof(*ds));

	if (!ds)
		return -ENOMEM;
	ds->root = strdup(root);
	ds->key = strdup(key);
	ds->bad = calloc(count / 64 + 1, sizeof(*ds->bad));
	if (!ds->root || !ds->key || !ds->bad) {
		free(ds->root);
		free(ds->key);
		free(ds->bad);
		free(ds);
		return -ENOMEM;
	}
	ds->dirfd = -1;
	ds->count = count;
	ds->refs = 1;
	*out = ds;
	return 0;
}

int ds_from_shards(const char *name, struct shard_table *t, struct dataset **out, char *errbuf, size_t errlen)
{
	struct dataset *ds;
	int r = dataset_new(t->root, t->key, t->count, &ds);

	if (r < 0) {
		shard_table_free(t);
		set_err(errbuf, errlen, "dataset %s: out of memory", name);
		return r;
	}
	ds->num_classes = t->num_classes;
	ds->detect = t->detect;
	ds->names = t->names;
	ds->name_off = t->name_off;
	ds->labels = t->labels;
	ds->boxes = t->boxes;
	ds->box_off = t->box_off;
	ds->label_errors = t->label_errors;
	ds->label_files_missing = t->label_files_missing;
	ds->shards = t->set;
	t->names = NULL;
	t->name_off = NULL;
	t->labels = NULL;
	t->boxes = NULL;
	t->box_off = NULL;
	t->set = NULL;
	shard_table_free(t);
	*out = ds;
	return 0;
}

int ds_make(struct builder *b, const char *root, const char *key, int dirfd, uint32_t num_classes, struct dataset **out)
{
	struct dataset *ds;
	int r = dataset_new(root, key, b->n, &ds);

	if (r < 0)
		return r;
	ds->dirfd = dirfd;
	ds->num_classes = num_classes;
	ds->names = b->names;
	ds->name_off = b->off;
	ds->labels = b->labels;
	memset(b, 0, sizeof(*b));
	*out = ds;
	return 0;
}

int dataset_realpath(const char *path, char real[PATH_MAX])
{
	if (shards_realpath(path, real))
		return 0;
	return realpath(path, real) ? 0 : -errno;
}

int64_t ds_read_bounded(int dirfd, const char *path, uint8_t **buf, size_t *cap, uint64_t max_bytes)
{
	struct stat st;
	size_t len = 0;
	int fd, r;

	fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		r = -EINVAL;
		goto out;
	}
	if ((uint64_t)st.st_size > max_bytes) {
		r = -EFBIG;
		goto out;
	}
	/* One byte more than the size, to notice a file that grew. */
	r = grow((void **)buf, cap, (size_t)st.st_size + 1, 1);
	if (r < 0)
		goto out;
	/* Read to EOF (or the buffer's end): the file may have changed size. */
	while (len < *cap) {
		ssize_t n = read(fd, *buf + len, *cap - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	r = 0;
out:
	close(fd);
	return r < 0 ? r : (int64_t)len;
}

struct dataset *dataset_ref(struct dataset *ds)
{
	ds->refs++;
	return ds;
}

void dataset_unref(struct dataset *ds)
{
	if (!ds || --ds->refs > 0)
		return;
	if (ds->dirfd >= 0)
		close(ds->dirfd);
	shardset_free(ds->shards);
	if (ds->remote) {
		free(ds->remote->sizes);
		explicit_bzero(ds->remote, sizeof(*ds->remote)); /* credentials */
	}
	free(ds->remote);
	free(ds->root);
	free(ds->key);
	free(ds->boxes);
	free(ds->box_off);
	free(ds->seg_off);
	free(ds->seg);
	free(ds->kpt);
	for (uint32_t i = 0; ds->class_names && i < ds->num_classes; i++)
		free(ds->class_names[i]);
	free(ds->class_names);
	free(ds->names);
	free(ds->name_off);
	free(ds->labels);
	free(ds->bad);
	free(ds->sizes);
	free(ds);
}

int64_t dataset_read(const struct dataset *ds, uint64_t index, uint8_t **buf, size_t *cap, uint64_t max_bytes)
{
	if (index >= ds->count)
		return -ERANGE;
	if (ds->shards)
		return shards_read(ds->shards, index, buf, cap, max_bytes);
	if (ds->remote)
		return ds_remote_read(ds, index, buf, cap, max_bytes);
	return ds_read_bounded(ds->dirfd, dataset_name(ds, index), buf, cap, max_bytes);
}

/* The size Ultralytics sees (its exif_size()): stored, then oriented. */
static void oriented_size(int r, const struct image_header *h, uint32_t *wh)
{
	if (r == 0)
		image_header_oriented(h, &wh[0], &wh[1]);
}

/* A tar member or a remote object is read whole (bounded) to find its
 * header. */
#define SIZES_MAX_MEMBER_BYTES (64u << 20)

int dataset_read_sizes(const struct dataset *ds, uint32_t **out)
{
	uint32_t *sizes = calloc(ds->count ? ds->count * 2 : 1, sizeof(*sizes));
	uint8_t *buf = NULL;
	size_t cap = 0;

	if (!sizes)
		return -ENOMEM;
	for (uint64_t i = 0; i < ds->count; i++) {
		/* else 0 x 0 */
		if (ds->shards || ds->remote) {
			int64_t len = dataset_read(ds, i, &buf, &cap, SIZES_MAX_MEMBER_BYTES);
			struct image_header h;

			if (len > 0)
				oriented_size(image_header_mem(buf, (size_t)len, &h), &h, &sizes[2 * i]);
		} else {
			int fd = openat(ds->dirfd, dataset_name(ds, i), O_RDONLY | O_CLOEXEC | O_NOCTTY);
			struct image_header h;

			if (fd < 0)
				continue;
			oriented_size(image_header_fd(fd, &h), &h, &sizes[2 * i]);
			close(fd);
		}
	}
	free(buf);
	*out = sizes;
	return 0;
}

int dataset_stat(const struct dataset *ds, uint64_t index, uint64_t *size, int64_t *mtime_ns)
{
	struct stat st;

	if (index >= ds->count)
		return -ERANGE;
	if (ds->shards)
		return shards_stat(ds->shards, index, size, mtime_ns);
	if (ds->remote) {
		*size = ds->remote->sizes ? ds->remote->sizes[index] : 0;
		*mtime_ns = 0;
		return 0;
	}
	if (fstatat(ds->dirfd, dataset_name(ds, index), &st, 0) < 0)
		return -errno;
	*size = (uint64_t)st.st_size;
	*mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	return 0;
}

int dataset_cache_key(const struct dataset *ds, uint64_t index, struct cache_key *key)
{
	char url[8192];
	int r = dataset_stat(ds, index, &key->size, &key->mtime_ns);

	if (r < 0)
		return r;
	if (!ds->remote) {
		key->path_hash = cache_key_hash(ds->root, dataset_name(ds, index));
		return 0;
	}
	/* The object (a shard's member), whichever data set names it. */
	r = dataset_url(ds, index, url, sizeof(url));
	if (r < 0)
		return r;
	key->path_hash = cache_key_hash(url, ds->shards ? dataset_name(ds, index) : "");
	return 0;
}
