/* SPDX-License-Identifier: MIT */
/*
 * Detection data sets at URLs: a remote data.yaml, image list or S3
 * prefix, label files fetched a bounded window at a time (dataset.h).
 */

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"
#include "dataset_priv.h"
#include "errtext.h"
#include "fetch.h"
#include "labels.h"
#include "s3.h"
#include "shards.h"

/* Collapse "." and ".." in a URL's path (after scheme://host, s3://bucket),
 * as a local yaml's paths are resolved: S3 takes keys literally, so
 * "a/../b" would name another object. */
static void url_normalize(char *url)
{
	char *p = strstr(url, "://"), *path = p ? strchr(p + 3, '/') : NULL, *out, *seg;

	if (!path)
		return;
	out = seg = path + 1;
	for (;;) {
		char *end = strchr(seg, '/');
		size_t n = end ? (size_t)(end - seg) : strlen(seg);

		if (n == 2 && seg[0] == '.' && seg[1] == '.') {
			/* Drop the segment written last (out is past its '/'). */
			if (out > path + 1)
				out--;
			while (out > path + 1 && out[-1] != '/')
				out--;
		} else if (n > 0 && !(n == 1 && seg[0] == '.')) {
			memmove(out, seg, n);
			out += n;
			if (end)
				*out++ = '/';
		}
		if (!end)
			break;
		seg = end + 1;
	}
	*out = '\0';
}

/* The data.yaml at `url`: its split's URL into images (a root or split
 * given as "/path" is on the yaml's host, or in its bucket). */
static int remote_yaml(const struct dataset_remote *rm, const char *url, const char *split, struct data_yaml *yaml,
		       char *images, size_t size, char *errbuf, size_t errlen)
{
	struct fetch_req req;
	int n, r;

	r = ds_remote_get(rm, url, &req, errbuf, errlen);
	if (r < 0)
		return r;
	r = data_yaml_parse(req.data ? (const char *)req.data : "", req.len, url, split, yaml, errbuf, errlen);
	free(req.data);
	if (r < 0)
		return r;
	if (strstr(yaml->split_path, "://")) {
		n = snprintf(images, size, "%s", yaml->split_path);
	} else {
		const char *host = strstr(url, "://") + 3, *slash = strchr(host, '/');

		n = snprintf(images, size, "%.*s%s", slash ? (int)(slash - url) : (int)strlen(url), url,
			     yaml->split_path);
	}
	if (n < 0 || (size_t)n >= size) {
		set_err(errbuf, errlen, "%s: split '%s' is too long a URL", url, split);
		return -ENAMETOOLONG;
	}
	url_normalize(images);
	return 0;
}

/* Every image under an S3 prefix, at any depth (Ultralytics' recursive
 * glob of a directory). */
static int yolo_listing_add(void *ctx, const char *key, uint64_t size)
{
	struct listing *l = ctx;

	if (strlen(key) <= l->prefix_len || !ds_is_yolo_image(key + l->prefix_len))
		return 0;
	return ds_listing_push(l, key + l->prefix_len, 0, 0, size);
}

static int cmp_listed_rel(const void *pa, const void *pb)
{
	return strcmp(((const struct listed *)pa)->rel, ((const struct listed *)pb)->rel);
}

/* The images under an S3 prefix, sorted as a local tree's are, with their
 * listed sizes. */
static int scan_s3_images(struct dataset_remote *rm, const char *url, const char *bucket, const char *prefix,
			  struct builder *b, uint64_t **sizes, char *errbuf, size_t errlen)
{
	struct listing l = {.prefix_len = strlen(prefix),
			    .max = b->max,
			    .errbuf = errbuf,
			    .errlen = errlen,
			    .url = url,
			    .bucket = bucket};
	int r;

	r = s3_list(rm->fetch, &rm->s3, dataset_remote_auth(rm), bucket, prefix, yolo_listing_add, &l, errbuf, errlen);
	if (r < 0)
		goto out;
	if (l.n > 1)
		qsort(l.v, l.n, sizeof(*l.v), cmp_listed_rel);
	*sizes = malloc((l.n ? l.n : 1) * sizeof(**sizes));
	if (!*sizes) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < l.n; i++) {
		r = ds_builder_add(b, l.v[i].rel, 0, url, errbuf, errlen);
		if (r < 0)
			goto out;
		(*sizes)[i] = l.v[i].size;
	}
	if (b->n == 0) {
		set_err(errbuf, errlen, "%s: no image files (" DS_YOLO_IMAGE_EXTS ") under it", url);
		r = -ENOENT;
	}
out:
	ds_listing_free(&l);
	return r;
}

/* A detection split at a URL: an S3 prefix (a last part without '.', or
 * a trailing '/'), or a .txt list of images relative to itself. Sets
 * rm->base, what the names are relative to. */
static int scan_remote_images(struct dataset_remote *rm, const char *url, struct builder *b, uint64_t **sizes,
			      char *errbuf, size_t errlen)
{
	const char *slash = strrchr(url, '/'), *last = slash ? slash + 1 : url;
	bool folder = !*last || !strchr(last, '.');
	struct fetch_req req;
	FILE *f;
	int r;

	if (folder && strncmp(url, "s3://", 5) == 0) {
		char bucket[256], prefix[2048];
		const char *key;

		if (s3_split(url, bucket, sizeof(bucket), &key) < 0) {
			set_err(errbuf, errlen, "%s: expected s3://bucket/prefix", url);
			return -EINVAL;
		}
		snprintf(prefix, sizeof(prefix), "%s%s", key, *key && *last ? "/" : "");
		r = s3_object_url(&rm->s3, bucket, prefix, rm->base, sizeof(rm->base));
		return r < 0 ? r : scan_s3_images(rm, url, bucket, prefix, b, sizes, errbuf, errlen);
	}
	if (folder || !ds_has_extension(last, (const char *const[]){"txt", NULL}, true)) {
		set_err(errbuf, errlen, "%s: %s", url,
			folder ? "HTTP servers have no listing to scan: give a .txt list of the images"
			       : "expected a directory (an S3 prefix) or a .txt list of images");
		return -EINVAL;
	}
	r = ds_remote_object_url(rm, url, rm->base, sizeof(rm->base));
	if (r < 0)
		return r;
	strrchr(rm->base, '/')[1] = '\0'; /* the list's directory */
	r = ds_remote_get(rm, url, &req, errbuf, errlen);
	if (r < 0)
		return r;
	f = req.len ? fmemopen(req.data, req.len, "r") : NULL;
	if (f) {
		r = ds_scan_image_list_stream(f, url, b, errbuf, errlen);
		fclose(f);
	} else {
		set_err(errbuf, errlen, "%s: no images listed", url);
		r = -ENOENT;
	}
	free(req.data);
	return r;
}

/*
 * Label files over the network: a window of requests in flight, consumed in
 * sample order, each slot refilled with the request LABEL_FETCH_WINDOW
 * samples ahead, so the scan holds a bounded number of transfers and
 * bodies whatever the data set's size (the fetch module bounds how many
 * run at once).
 */
#define LABEL_FETCH_WINDOW 64u

struct label_slot {
	struct fetch_req req;
	char url[8192];
	bool submitted, done; /* done: under label_fetches.lock */
};

struct label_fetches {
	const struct dataset_remote *rm;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct label_slot *slot; /* [LABEL_FETCH_WINDOW] */
};

static void label_fetched(struct fetch_req *r)
{
	struct label_fetches *lf = r->ctx;

	pthread_mutex_lock(&lf->lock);
	((struct label_slot *)r)->done = true;
	pthread_cond_broadcast(&lf->cond);
	pthread_mutex_unlock(&lf->lock);
}

/* Ask for sample i's label file: Ultralytics' rule on the image's URL. */
static void label_submit(struct label_fetches *lf, const struct dataset *ds, uint64_t i)
{
	struct label_slot *s = &lf->slot[i % LABEL_FETCH_WINDOW];
	char image[8192];

	memset(&s->req, 0, sizeof(s->req));
	s->submitted = true;
	s->done = false;
	if (dataset_url(ds, i, image, sizeof(image)) < 0 || labels_path(image, s->url, sizeof(s->url)) < 0) {
		snprintf(s->url, sizeof(s->url), "%s", dataset_name(ds, i));
		s->req.err = -ENAMETOOLONG;
		s->done = true;
		return;
	}
	s->req.url = s->url;
	s->req.auth = dataset_remote_auth(lf->rm);
	s->req.done = label_fetched;
	s->req.ctx = lf;
	fetch_submit(lf->rm->fetch, &s->req);
}

static int64_t label_read_remote(void *ctx, const struct dataset *ds, uint64_t i, char *label, size_t label_size,
				 uint8_t **text, size_t *cap, char *why, size_t whylen)
{
	struct label_fetches *lf = ctx;
	struct label_slot *s = &lf->slot[i % LABEL_FETCH_WINDOW];
	int64_t r;

	pthread_mutex_lock(&lf->lock);
	while (!s->done)
		pthread_cond_wait(&lf->cond, &lf->lock);
	pthread_mutex_unlock(&lf->lock);
	s->submitted = false;
	snprintf(label, label_size, "%s", s->url);
	r = s->req.err;
	if (r == 0 && s->req.len > LABELS_MAX_FILE_BYTES)
		r = -EFBIG;
	if (r == 0) {
		free(*text);
		*text = s->req.data;
		*cap = s->req.cap;
		s->req.data = NULL;
		r = (int64_t)s->req.len;
	} else if (r != -ENOENT && r != -ENAMETOOLONG && r != -EFBIG) {
		s3_error_text(&s->req, why, whylen);
	}
	free(s->req.data);
	s->req.data = NULL;
	if (i + LABEL_FETCH_WINDOW < ds->count)
		label_submit(lf, ds, i + LABEL_FETCH_WINDOW);
	return r;
}

/* ds_read_labels over the network: a 404 is a missing label file. */
static int remote_read_labels(struct dataset *ds, const struct instances_spec *spec, label_report_fn report, void *ctx,
			      char *errbuf, size_t errlen)
{
	struct label_fetches lf = {.rm = ds->remote};
	int r;

	lf.slot = calloc(LABEL_FETCH_WINDOW, sizeof(*lf.slot));
	if (!lf.slot) {
		set_err(errbuf, errlen, "dataset %s: out of memory reading its labels", ds->root);
		return -ENOMEM;
	}
	pthread_mutex_init(&lf.lock, NULL);
	pthread_cond_init(&lf.cond, NULL);
	for (uint64_t k = 0; k < LABEL_FETCH_WINDOW && k < ds->count; k++)
		label_submit(&lf, ds, k);
	r = ds_read_labels(ds, spec, label_read_remote, &lf, report, ctx, errbuf, errlen);
	/* Requests still out when ds_read_labels stopped early point into lf. */
	pthread_mutex_lock(&lf.lock);
	for (uint32_t k = 0; k < LABEL_FETCH_WINDOW; k++)
		while (lf.slot[k].submitted && !lf.slot[k].done)
			pthread_cond_wait(&lf.cond, &lf.lock);
	pthread_mutex_unlock(&lf.lock);
	for (uint32_t k = 0; k < LABEL_FETCH_WINDOW; k++)
		free(lf.slot[k].req.data);
	pthread_cond_destroy(&lf.cond);
	pthread_mutex_destroy(&lf.lock);
	free(lf.slot);
	return r;
}

int dataset_open_remote_detect(const char *url, const char *split, const struct instances_spec *spec,
			       uint64_t max_samples, struct fetch *f, const struct s3_config *s3,
			       label_report_fn report, void *report_ctx, struct dataset **out, char *errbuf,
			       size_t errlen)
{
	struct builder b = {.max = max_samples};
	struct data_yaml yaml = {0};
	struct dataset_remote *rm;
	struct dataset *ds = NULL;
	uint64_t *sizes = NULL;
	char images[4096], key[4096 + 64];
	int r;

	r = ds_remote_new(url, f, s3, &rm, errbuf, errlen);
	if (r < 0)
		return r;
	if ((size_t)snprintf(images, sizeof(images), "%s", url) >= sizeof(images)) {
		r = -ENAMETOOLONG;
		goto fail;
	}
	if (ds_has_extension(url, (const char *const[]){"yaml", "yml", NULL}, true)) {
		r = remote_yaml(rm, url, split, &yaml, images, sizeof(images), errbuf, errlen);
		if (r < 0)
			goto fail;
		/* The split may be in a bucket when the yaml is not. */
		if (strncmp(images, "s3://", 5) == 0 && strncmp(url, "s3://", 5) != 0) {
			r = s3_auth_load(&rm->s3, &rm->auth, errbuf, errlen);
			if (r < 0)
				goto fail;
			rm->is_signed = r > 0;
		}
	}
	if (shards_url_spec(images) && spec) {
		set_err(errbuf, errlen, "dataset %s: segment, pose and OBB labels are not read from tar shards", url);
		r = -EINVAL;
		goto fail;
	}
	if (shards_url_spec(images)) {
		struct shard_detect det = {.num_classes = yaml.nnames, .report = report, .report_ctx = report_ctx};

		r = ds_open_remote_shards(rm, images, NULL, &det, max_samples, &ds, errbuf, errlen);
		if (r == 0)
			r = ds_detect_shards_keyed(ds, url, split, url, &yaml, out, errbuf, errlen);
		data_yaml_clear(&yaml);
		return r;
	}
	r = scan_remote_images(rm, images, &b, &sizes, errbuf, errlen);
	if (r < 0)
		goto fail;
	if (dataset_yolo_key(spec, split, url, key, sizeof(key)) < 0) {
		r = -ENAMETOOLONG;
		goto fail;
	}
	r = ds_remote_finish(rm, &b, &sizes, images, key, yaml.nnames, &ds, errbuf, errlen);
	if (r < 0)
		goto fail;
	rm = NULL; /* the data set's now */
	ds->detect = true;
	ds->class_names = yaml.names;
	yaml.names = NULL;
	yaml.nnames = 0;
	r = remote_read_labels(ds, spec, report, report_ctx, errbuf, errlen);
	if (r < 0)
		goto fail;
	data_yaml_clear(&yaml);
	*out = ds;
	return 0;
fail:
	if (!errbuf[0])
		set_err(errbuf, errlen, "dataset %s: %s", url, strerror(-r));
	dataset_unref(ds);
	free(rm);
	free(sizes);
	ds_builder_free(&b);
	data_yaml_clear(&yaml);
	return r;
}
