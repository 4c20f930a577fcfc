/* SPDX-License-Identifier: MIT */
/*
 * Data sets at URLs (s3://, http://, https://): S3 prefixes in ImageFolder
 * layout, list files, tar shards over range requests (dataset.h).
 */

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "dataset.h"
#include "dataset_priv.h"
#include "errtext.h"
#include "fetch.h"
#include "s3.h"
#include "shards.h"
#include "strvec.h"

int ds_remote_object_url(const struct dataset_remote *rm, const char *name, char *out, size_t size)
{
	int n;

	if (strncasecmp(name, "http://", 7) == 0 || strncasecmp(name, "https://", 8) == 0) {
		n = snprintf(out, size, "%s", name);
		return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
	}
	if (strncmp(name, "s3://", 5) == 0) {
		char bucket[256];
		const char *key;

		if (s3_split(name, bucket, sizeof(bucket), &key) < 0)
			return -EINVAL;
		return s3_object_url(&rm->s3, bucket, key, out, size);
	}
	n = snprintf(out, size, "%s", name[0] == '/' ? rm->origin : rm->base);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return url_encode_append(out, size, name, true);
}

int dataset_url(const struct dataset *ds, uint64_t index, char *out, size_t size)
{
	if (ds->shards)
		return ds_remote_object_url(ds->remote, ds->shards->v[ds->shards->sample_shard[index]].loc, out, size);
	return ds_remote_object_url(ds->remote, dataset_name(ds, index), out, size);
}

void dataset_range(const struct dataset *ds, uint64_t index, uint64_t *offset, uint64_t *length)
{
	*offset = ds->shards ? ds->shards->sample_off[index] : 0;
	*length = ds->shards ? ds->shards->sample_size[index] : 0;
}

/* shard_source for shards at URLs: a HEAD for the size and time... */
static int remote_shard_stat(void *ctx, const char *loc, uint64_t *size, int64_t *stamp)
{
	const struct dataset_remote *rm = ctx;
	struct fetch_req req = {.head = true, .auth = dataset_remote_auth(rm)};
	char url[8192];
	int r = ds_remote_object_url(rm, loc, url, sizeof(url));

	if (r < 0)
		return r;
	req.url = url;
	r = fetch_sync(rm->fetch, &req);
	free(req.data);
	if (r < 0)
		return r;
	if (req.object_size < 0)
		return -EPROTO; /* no Content-Length: no ranges to ask for */
	*size = (uint64_t)req.object_size;
	*stamp = req.object_time < 0 ? 0 : req.object_time * 1000000000;
	return 0;
}

/* ...and range requests for the bytes. */
static int64_t remote_shard_read(void *ctx, const char *loc, uint64_t off, void *buf, size_t len)
{
	const struct dataset_remote *rm = ctx;
	struct fetch_req req = {.offset = off, .length = len, .auth = dataset_remote_auth(rm)};
	char url[8192];
	int r;

	if (len == 0)
		return 0;
	r = ds_remote_object_url(rm, loc, url, sizeof(url));
	if (r < 0)
		return r;
	req.url = url;
	r = fetch_sync(rm->fetch, &req);
	if (r == 0)
		memcpy(buf, req.data, req.len);
	free(req.data);
	return r < 0 ? r : (int64_t)req.len;
}

int dataset_remote_probe(const struct dataset *ds, const struct s3_config *s3, char *errbuf, size_t errlen)
{
	struct fetch_auth auth;
	struct fetch_req req = {.head = true};
	char url[8192];
	int r;

	if (!ds->remote || ds->count == 0)
		return 0;
	r = s3_auth_load(s3, &auth, errbuf, errlen);
	if (r < 0)
		goto out;
	req.auth = r > 0 ? &auth : NULL;
	r = dataset_url(ds, 0, url, sizeof(url));
	if (r < 0) {
		set_err(errbuf, errlen, "%s: %s", ds->root, strerror(-r));
		goto out;
	}
	req.url = url;
	r = fetch_sync(ds->remote->fetch, &req);
	if (r < 0) {
		char why[512];

		s3_error_text(&req, why, sizeof(why));
		set_err(errbuf, errlen, "%s: %s refused: %s", ds->root, url, why);
	}
	free(req.data);
out:
	explicit_bzero(&auth, sizeof(auth));
	return r;
}

int64_t ds_remote_read(const struct dataset *ds, uint64_t index, uint8_t **buf, size_t *cap, uint64_t max_bytes)
{
	struct fetch_req req = {0};
	char url[8192];
	int r = dataset_url(ds, index, url, sizeof(url));

	if (r < 0)
		return r;
	req.url = url;
	req.auth = dataset_remote_auth(ds->remote);
	r = fetch_sync(ds->remote->fetch, &req);
	if (r == 0 && req.len > max_bytes)
		r = -EFBIG;
	if (r < 0) {
		free(req.data);
		return r;
	}
	free(*buf);
	*buf = req.data;
	*cap = req.cap;
	return (int64_t)req.len;
}

void ds_listing_free(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].rel);
	free(l->v);
	strvec_free(&l->tars);
}

int ds_listing_push(struct listing *l, const char *rel, size_t class_len, size_t dir_len, uint64_t size)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 1024;
		struct listed *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	if (l->n >= l->max * 2 + 1024) {
		set_err(l->errbuf, l->errlen, "%s: more than %llu objects", l->url, (unsigned long long)l->max);
		return -EFBIG;
	}
	l->v[l->n].rel = strdup(rel);
	if (!l->v[l->n].rel)
		return -ENOMEM;
	l->v[l->n].class_len = class_len;
	l->v[l->n].dir_len = dir_len;
	l->v[l->n].size = size;
	l->n++;
	return 0;
}

static int listing_add(void *ctx, const char *key, uint64_t size)
{
	struct listing *l = ctx;
	const char *rel, *slash, *last;

	if (strlen(key) < l->prefix_len)
		return 0;
	rel = key + l->prefix_len;
	slash = strchr(rel, '/');
	last = strrchr(rel, '/');
	/* Tar shards beside the folders make a shard data set, as a local
	 * directory of them does. */
	if (!slash && ds_has_extension(rel, (const char *const[]){"tar", NULL}, true)) {
		char loc[4096];

		if ((size_t)snprintf(loc, sizeof(loc), "s3://%s/%s", l->bucket, key) >= sizeof(loc))
			return -ENAMETOOLONG;
		return l->tars.n >= SHARDS_MAX ? -E2BIG : strvec_push(&l->tars, loc);
	}
	/* Other objects beside the class folders, and folder markers, are not samples. */
	if (!slash || !last[1])
		return 0;
	return ds_listing_push(l, rel, (size_t)(slash - rel), (size_t)(last - rel) + 1, size);
}

static int cmp_part(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	return c ? c : (alen > blen) - (alen < blen);
}

/* The local scan's order: class, then directory (os.walk sorted), then
 * file name. */
static int cmp_listed(const void *pa, const void *pb)
{
	const struct listed *a = pa, *b = pb;
	int c = cmp_part(a->rel, a->class_len, b->rel, b->class_len);

	if (!c)
		c = cmp_part(a->rel, a->dir_len, b->rel, b->dir_len);
	return c ? c : strcmp(a->rel + a->dir_len, b->rel + b->dir_len);
}

/* The ImageFolder under an S3 prefix; or, when .tar objects lie at its top
 * level, 1 with their URLs (sorted) in *tars. */
static int scan_s3_folder(struct dataset_remote *rm, const char *url, const char *bucket, const char *prefix,
			  struct builder *b, uint64_t **sizes, uint32_t *num_classes, struct strvec *tars, char *errbuf,
			  size_t errlen)
{
	struct listing l = {.prefix_len = strlen(prefix),
			    .max = b->max,
			    .errbuf = errbuf,
			    .errlen = errlen,
			    .url = url,
			    .bucket = bucket};
	uint64_t class_start = 0, sizes_cap = 0;
	uint32_t classes = 0;
	int r;

	r = s3_list(rm->fetch, &rm->s3, dataset_remote_auth(rm), bucket, prefix, listing_add, &l, errbuf, errlen);
	if (r < 0)
		goto out;
	if (l.tars.n) {
		strvec_sort(&l.tars);
		*tars = l.tars;
		memset(&l.tars, 0, sizeof(l.tars));
		r = 1;
		goto out;
	}
	if (l.n > 1)
		qsort(l.v, l.n, sizeof(*l.v), cmp_listed);
	for (size_t i = 0; i <= l.n; i++) {
		if (i == l.n || i == 0 ||
		    cmp_part(l.v[i].rel, l.v[i].class_len, l.v[i - 1].rel, l.v[i - 1].class_len)) {
			if (i > 0 && b->n == class_start) {
				/* torchvision's ImageFolder refuses this too. */
				set_err(errbuf, errlen, "%s: class '%.*s' has no image files", url,
					(int)l.v[i - 1].class_len, l.v[i - 1].rel);
				r = -ENOENT;
				goto out;
			}
			if (i == l.n)
				break;
			classes++;
			class_start = b->n;
		}
		if (!ds_is_folder_image(l.v[i].rel + l.v[i].dir_len))
			continue;
		r = ds_builder_add(b, l.v[i].rel, (int32_t)(classes - 1), url, errbuf, errlen);
		if (r < 0)
			goto out;
		if (b->n > sizes_cap) {
			uint64_t *v = realloc(*sizes, b->cap * sizeof(*v));

			if (!v) {
				r = -ENOMEM;
				goto out;
			}
			*sizes = v;
			sizes_cap = b->cap;
		}
		(*sizes)[b->n - 1] = l.v[i].size;
	}
	if (classes == 0) {
		set_err(errbuf, errlen, "%s: no class folders (expected ImageFolder layout: prefix/class/image.jpg)",
			url);
		r = -ENOENT;
		goto out;
	}
	*num_classes = classes;
	r = 0;
out:
	ds_listing_free(&l);
	return r;
}

int ds_remote_get(const struct dataset_remote *rm, const char *loc, struct fetch_req *req, char *errbuf, size_t errlen)
{
	char url[8192];
	int r;

	memset(req, 0, sizeof(*req));
	r = ds_remote_object_url(rm, loc, url, sizeof(url));
	if (r < 0) {
		set_err(errbuf, errlen, "%s: %s", loc, strerror(-r));
		return r;
	}
	req->url = url;
	req->auth = dataset_remote_auth(rm);
	r = fetch_sync(rm->fetch, req);
	req->url = NULL;
	if (r < 0) {
		char why[768];

		s3_error_text(req, why, sizeof(why));
		set_err(errbuf, errlen, "%s: %s", loc, why);
		free(req->data);
		req->data = NULL;
	}
	return r;
}

/* Fetch a list file and parse it as the local ones are; or, for a list of
 * shards, 1 with their locations in *shards. */
static int scan_remote_list(struct dataset_remote *rm, const char *url, struct builder *b, uint32_t *num_classes,
			    struct strvec *shards, char *errbuf, size_t errlen)
{
	struct fetch_req req;
	char first[PATH_MAX];
	FILE *f;
	int r;

	r = ds_remote_get(rm, url, &req, errbuf, errlen);
	if (r < 0)
		goto out;
	f = req.len ? fmemopen(req.data, req.len, "r") : NULL;
	if (!f) {
		set_err(errbuf, errlen, "%s: no samples listed", url);
		r = -ENOENT;
		goto out;
	}
	if (shards_list_first_entry(f, first, sizeof(first)) &&
	    ds_has_extension(first, (const char *const[]){"tar", NULL}, true)) {
		/* A list of shards: relative to the list's own location. */
		char dir[4096];

		snprintf(dir, sizeof(dir), "%.*s", (int)(strrchr(url, '/') - url), url);
		rewind(f);
		r = shards_list_read(f, url, dir, shards, errbuf, errlen);
		if (r == 0)
			r = 1;
	} else {
		rewind(f);
		r = ds_scan_list_stream(f, url, b, num_classes, errbuf, errlen);
	}
	fclose(f);
out:
	free(req.data);
	return r;
}

int ds_remote_new(const char *url, struct fetch *f, const struct s3_config *s3, struct dataset_remote **out,
		  char *errbuf, size_t errlen)
{
	struct dataset_remote *rm;
	int r;

	if (!f) {
		/* An in-process daemon built without the I/O thread (the fuzzer's). */
		set_err(errbuf, errlen, "%s: this daemon reads no remote data sets", url);
		return -EPROTONOSUPPORT;
	}
	rm = calloc(1, sizeof(*rm));
	if (!rm)
		return -ENOMEM;
	rm->fetch = f;
	rm->s3 = *s3;
	if (strncmp(url, "s3://", 5) == 0) {
		r = s3_auth_load(&rm->s3, &rm->auth, errbuf, errlen);
		if (r < 0) {
			free(rm);
			return r;
		}
		rm->is_signed = r > 0;
	}
	*out = rm;
	return 0;
}

int ds_remote_finish(struct dataset_remote *rm, struct builder *b, uint64_t **sizes, const char *root, const char *key,
		     uint32_t num_classes, struct dataset **out, char *errbuf, size_t errlen)
{
	const char *p = strstr(rm->base, "://"), *slash = p ? strchr(p + 3, '/') : NULL;
	struct dataset *ds;

	/* scheme://host[:port] */
	snprintf(rm->origin, sizeof(rm->origin), "%.*s", slash ? (int)(slash - rm->base) : (int)strlen(rm->base),
		 rm->base);
	rm->listed_ns = monotonic_ns();
	if (ds_make(b, root, key, -1, num_classes, &ds) < 0) {
		set_err(errbuf, errlen, "dataset %s: out of memory", root);
		return -ENOMEM;
	}
	rm->sizes = *sizes;
	*sizes = NULL;
	ds->remote = rm;
	*out = ds;
	return 0;
}

int ds_open_remote_shards(struct dataset_remote *rm, const char *url, struct strvec *locs,
			  const struct shard_detect *det, uint64_t max_samples, struct dataset **out, char *errbuf,
			  size_t errlen)
{
	struct shard_table t;
	struct dataset *ds;
	int r;

	/* Shard locations are absolute URLs: no base needed. */
	rm->shard_src = (struct shard_source){.ctx = rm, .stat = remote_shard_stat, .read = remote_shard_read};
	r = shards_open_source(url, locs, &rm->shard_src, det != NULL, det ? det->num_classes : 0, max_samples,
			       det ? det->report : NULL, det ? det->report_ctx : NULL, &t, errbuf, errlen);
	if (r == 0)
		r = ds_from_shards(url, &t, &ds, errbuf, errlen);
	if (r < 0) {
		free(rm);
		return r;
	}
	rm->listed_ns = monotonic_ns();
	ds->remote = rm;
	*out = ds;
	return 0;
}

int dataset_open_remote(const char *url, uint64_t max_samples, struct fetch *f, const struct s3_config *s3,
			struct dataset **out, char *errbuf, size_t errlen)
{
	struct builder b = {.max = max_samples};
	struct dataset_remote *rm;
	uint64_t *sizes = NULL;
	uint32_t num_classes = 0;
	char bucket[256];
	struct strvec shard_locs = {0};
	const char *key, *slash;
	int r;

	r = ds_remote_new(url, f, s3, &rm, errbuf, errlen);
	if (r < 0)
		return r;
	if (shards_url_spec(url))
		return ds_open_remote_shards(rm, url, NULL, NULL, max_samples, out, errbuf, errlen);
	if (strncmp(url, "s3://", 5) == 0) {
		const char *last;

		if (s3_split(url, bucket, sizeof(bucket), &key) < 0) {
			set_err(errbuf, errlen, "%s: expected s3://bucket/prefix", url);
			r = -EINVAL;
			goto fail;
		}
		last = strrchr(key, '/');
		last = last ? last + 1 : key;
		if (!*last || !strchr(last, '.')) {
			/* A folder: list the keys under PREFIX/. */
			char prefix[2048];

			snprintf(prefix, sizeof(prefix), "%s%s", key, *key && !*last ? "" : (*key ? "/" : ""));
			struct strvec tars = {0};

			r = s3_object_url(&rm->s3, bucket, prefix, rm->base, sizeof(rm->base));
			if (r == 0)
				r = scan_s3_folder(rm, url, bucket, prefix, &b, &sizes, &num_classes, &tars, errbuf,
						   errlen);
			if (r == 1)
				return ds_open_remote_shards(rm, url, &tars, NULL, max_samples, out, errbuf, errlen);
		} else {
			char dir[2048];

			snprintf(dir, sizeof(dir), "%.*s", (int)(last - key), key);
			r = s3_object_url(&rm->s3, bucket, dir, rm->base, sizeof(rm->base));
			if (r == 0)
				r = scan_remote_list(rm, url, &b, &num_classes, &shard_locs, errbuf, errlen);
		}
	} else {
		if (url[strlen(url) - 1] == '/' || strlen(url) >= sizeof(rm->base)) {
			set_err(errbuf, errlen,
				"%s: HTTP servers have no listing to scan: give a list file of 'path label' lines",
				url);
			r = -EINVAL;
			goto fail;
		}
		slash = strrchr(url, '/');
		snprintf(rm->base, sizeof(rm->base), "%.*s", (int)(slash - url + 1), url);
		r = scan_remote_list(rm, url, &b, &num_classes, &shard_locs, errbuf, errlen);
	}
	if (r == 1)
		return ds_open_remote_shards(rm, url, &shard_locs, NULL, max_samples, out, errbuf, errlen);
	strvec_free(&shard_locs);
	if (r < 0)
		goto fail;
	r = ds_remote_finish(rm, &b, &sizes, url, url, num_classes, out, errbuf, errlen);
	if (r < 0)
		goto fail;
	return 0;
fail:
	if (!errbuf[0])
		set_err(errbuf, errlen, "dataset %s: %s", url, strerror(-r));
	free(sizes);
	free(rm);
	ds_builder_free(&b);
	return r;
}
