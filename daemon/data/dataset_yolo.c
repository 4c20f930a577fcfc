/* SPDX-License-Identifier: MIT */
/*
 * Local detection data sets in Ultralytics' YOLO layout: an image tree, an
 * image list or a data.yaml, every image's label file read (dataset.h).
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "dataset_priv.h"
#include "errtext.h"
#include "labels.h"
#include "shards.h"
#include "strvec.h"
#include "text.h"

bool ds_is_yolo_image(const char *name)
{
	static const char *const exts[] = {"bmp", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp", NULL};

	return ds_has_extension(name, exts, false);
}

/* Every JPEG under the directory, as paths relative to it, sorted as full
 * paths (Ultralytics sorts its recursive glob). */
static int scan_image_tree(int rootfd, const char *path, struct builder *b, char *errbuf, size_t errlen)
{
	struct strvec dirs = {0}, files = {0}, all = {0};
	int r;

	r = ds_walk_dirs(rootfd, ".", 0, &dirs);
	for (size_t i = 0; r >= 0 && i < dirs.n; i++) {
		r = ds_list_files(rootfd, dirs.v[i], ds_is_yolo_image, &files);
		for (size_t f = 0; r >= 0 && f < files.n; f++) {
			char rel[PATH_MAX];
			const char *d = dirs.v[i] + (strcmp(dirs.v[i], ".") == 0 ? 1 : 2);

			if ((size_t)snprintf(rel, sizeof(rel), "%s%s%s", d, *d ? "/" : "", files.v[f]) >= sizeof(rel))
				r = -ENAMETOOLONG;
			else
				r = strvec_push(&all, rel);
		}
		strvec_free(&files);
	}
	if (r < 0) {
		set_err(errbuf, errlen, "dataset %s: %s", path, strerror(-r));
		goto out;
	}
	strvec_sort(&all);
	for (size_t i = 0; i < all.n; i++) {
		r = ds_builder_add(b, all.v[i], 0, path, errbuf, errlen);
		if (r < 0)
			goto out;
	}
	if (b->n == 0) {
		set_err(errbuf, errlen, "dataset %s: no image files (" DS_YOLO_IMAGE_EXTS ") under it", path);
		r = -ENOENT;
	}
out:
	strvec_free(&dirs);
	strvec_free(&files);
	strvec_free(&all);
	return r;
}

int ds_scan_image_list_stream(FILE *f, const char *path, struct builder *b, char *errbuf, size_t errlen)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int r = 0;

	while ((len = getline(&line, &cap, f)) >= 0) {
		char *p = text_list_entry(line, (size_t)len);

		if (!p)
			continue;
		if (strncmp(p, "./", 2) == 0)
			p += 2;
		r = ds_builder_add(b, p, 0, path, errbuf, errlen);
		if (r < 0)
			goto out;
	}
	if (b->n == 0) {
		set_err(errbuf, errlen, "%s: no images listed", path);
		r = -ENOENT;
	}
out:
	free(line);
	return r;
}

static int scan_image_list(const char *path, struct builder *b, char *errbuf, size_t errlen)
{
	FILE *f = fopen(path, "re");
	int r;

	if (!f) {
		r = -errno;
		set_err(errbuf, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	r = ds_scan_image_list_stream(f, path, b, errbuf, errlen);
	fclose(f);
	return r;
}

/* Local files: the label path Ultralytics derives from the image's. */
static int64_t label_read_file(void *ctx, const struct dataset *ds, uint64_t i, char *label, size_t label_size,
			       uint8_t **text, size_t *cap, char *why, size_t whylen)
{
	const char *name = dataset_name(ds, i);
	char image[PATH_MAX * 2];
	int64_t len;

	(void)ctx;
	if ((size_t)snprintf(image, sizeof(image), "%s%s%s", name[0] == '/' ? "" : ds->root, name[0] == '/' ? "" : "/",
			     name) >= sizeof(image) ||
	    labels_path(image, label, label_size) < 0) {
		snprintf(label, label_size, "%s", image);
		return -ENAMETOOLONG;
	}
	len = ds_read_bounded(AT_FDCWD, label, text, cap, LABELS_MAX_FILE_BYTES);
	if (len < 0)
		snprintf(why, whylen, "%s", strerror((int)-len));
	return len;
}

int ds_read_labels(struct dataset *ds, ds_label_read_fn read_fn, void *read_ctx, label_report_fn report, void *ctx,
		   char *errbuf, size_t errlen)
{
	struct box_vec boxes = {0};
	uint8_t *text = NULL;
	size_t cap = 0;
	int32_t max_class = -1;
	int64_t len;
	int r = 0;

	ds->box_off = calloc(ds->count + 1, sizeof(*ds->box_off));
	if (!ds->box_off)
		goto nomem;
	for (uint64_t i = 0; i < ds->count; i++) {
		char label[PATH_MAX * 2] = "", why[512] = "";
		size_t before = boxes.n;

		ds->box_off[i] = boxes.n;
		len = read_fn(read_ctx, ds, i, label, sizeof(label), &text, &cap, why, sizeof(why));
		if (len == -ENOENT) {
			ds->label_files_missing++; /* no objects */
			continue;
		}
		if (len < 0) {
			if (len == -ENOMEM)
				goto nomem;
			if (report)
				report(ctx, label, 0,
				       len == -ENAMETOOLONG ? "the label file's path is too long"
				       : len == -EFBIG      ? "larger than 4 MiB: not a label file"
							    : why);
			ds->label_errors++;
			continue;
		}
		r = labels_parse((const char *)text, (size_t)len, ds->class_names ? ds->num_classes : 0, label, report,
				 ctx, &boxes);
		if (r < 0)
			goto nomem;
		ds->label_errors += (uint64_t)r;
		for (size_t k = before; k < boxes.n; k++)
			if ((int32_t)boxes.v[k].cls > max_class)
				max_class = (int32_t)boxes.v[k].cls;
	}
	ds->box_off[ds->count] = boxes.n;
	ds->boxes = boxes.v;
	boxes.v = NULL;
	if (!ds->class_names)
		ds->num_classes = (uint32_t)(max_class + 1);
	r = 0;
	goto out;
nomem:
	r = -ENOMEM;
	set_err(errbuf, errlen, "dataset %s: out of memory reading its labels", ds->root);
out:
	free(boxes.v);
	free(text);
	return r;
}

int ds_detect_shards_keyed(struct dataset *ds, const char *path, const char *split, const char *name,
			   struct data_yaml *yaml, struct dataset **out, char *errbuf, size_t errlen)
{
	char *key;

	if (asprintf(&key, "detect:%s:%s", split, name) < 0) {
		dataset_unref(ds);
		set_err(errbuf, errlen, "dataset %s: out of memory", path);
		return -ENOMEM;
	}
	free(ds->key);
	ds->key = key;
	if (yaml->names) {
		ds->class_names = yaml->names;
		ds->num_classes = yaml->nnames;
		yaml->names = NULL;
		yaml->nnames = 0;
	}
	*out = ds;
	return 0;
}

static int detect_shards(const char *path, const char *split, struct data_yaml *yaml, uint64_t max_samples,
			 label_report_fn report, void *report_ctx, struct dataset **out, char *errbuf, size_t errlen)
{
	struct shard_table t;
	struct dataset *ds;
	int r;

	r = shards_open(path, true, yaml->nnames, max_samples, report, report_ctx, &t, errbuf, errlen);
	if (r == 0)
		r = ds_from_shards(path, &t, &ds, errbuf, errlen);
	if (r < 0)
		return r;
	return ds_detect_shards_keyed(ds, path, split, ds->key, yaml, out, errbuf, errlen);
}

int dataset_open_detect(const char *path, const char *split, uint64_t max_samples, label_report_fn report,
			void *report_ctx, struct dataset **out, char *errbuf, size_t errlen)
{
	struct builder b = {.max = max_samples};
	struct data_yaml yaml = {0};
	struct dataset *ds = NULL;
	char real[PATH_MAX], images[PATH_MAX], key[PATH_MAX + 64];
	const char *dot;
	struct stat st;
	int r, dirfd = -1;

	if (shards_spec(path))
		return detect_shards(path, split, &yaml, max_samples, report, report_ctx, out, errbuf, errlen);
	if (!realpath(path, real)) {
		r = -errno;
		set_err(errbuf, errlen, "dataset %s: %s", path, strerror(-r));
		return r;
	}
	snprintf(images, sizeof(images), "%s", real);
	dot = strrchr(real, '.');
	if (dot && (strcasecmp(dot, ".yaml") == 0 || strcasecmp(dot, ".yml") == 0)) {
		r = data_yaml_load(real, split, &yaml, errbuf, errlen);
		if (r < 0)
			return r;
		if (shards_spec(yaml.split_path)) {
			r = detect_shards(yaml.split_path, split, &yaml, max_samples, report, report_ctx, out, errbuf,
					  errlen);
			data_yaml_clear(&yaml);
			return r;
		}
		if (!realpath(yaml.split_path, images)) {
			r = -errno;
			set_err(errbuf, errlen, "dataset %s: split '%s' is %s: %s", path, split, yaml.split_path,
				strerror(-r));
			goto fail;
		}
	}
	if (stat(images, &st) < 0) {
		r = -errno;
		set_err(errbuf, errlen, "dataset %s: %s", images, strerror(-r));
		goto fail;
	}
	if (S_ISDIR(st.st_mode)) {
		dirfd = open(images, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		r = dirfd < 0 ? -errno : scan_image_tree(dirfd, images, &b, errbuf, errlen);
	} else if (S_ISREG(st.st_mode)) {
		r = ds_open_parent(images, &dirfd, errbuf, errlen);
		if (r == 0)
			r = scan_image_list(images, &b, errbuf, errlen);
	} else {
		r = -EINVAL;
	}
	if (r < 0) {
		if (!errbuf[0])
			set_err(errbuf, errlen, "dataset %s: %s", images, strerror(-r));
		goto fail;
	}
	if (S_ISREG(st.st_mode)) {
		/* Names are relative to the list's directory. */
		char *slash = strrchr(images, '/');

		if (slash && slash != images)
			*slash = '\0';
	}
	snprintf(key, sizeof(key), "detect:%s:%s", split, real);
	r = ds_make(&b, images, key, dirfd, yaml.nnames, &ds);
	if (r < 0) {
		set_err(errbuf, errlen, "dataset %s: out of memory", path);
		goto fail;
	}
	dirfd = -1;
	ds->detect = true;
	ds->class_names = yaml.names;
	yaml.names = NULL;
	yaml.nnames = 0;
	r = ds_read_labels(ds, label_read_file, NULL, report, report_ctx, errbuf, errlen);
	if (r < 0)
		goto fail;
	data_yaml_clear(&yaml);
	*out = ds;
	return 0;
fail:
	dataset_unref(ds);
	data_yaml_clear(&yaml);
	ds_builder_free(&b);
	if (dirfd >= 0)
		close(dirfd);
	return r;
}
