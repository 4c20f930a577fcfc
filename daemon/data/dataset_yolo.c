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
#include "grow.h"
#include "instances.h"
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

/* Why a label file could not be read (ds_label_read_fn's -errno), for the report. */
static const char *read_failure(int64_t len, const char *why)
{
	return len == -ENAMETOOLONG ? "the label file's path is too long"
	       : len == -EFBIG      ? "larger than 4 MiB: not a label file"
				    : why;
}

/* Room for `need` elements, doubling (grow.h's rule, amortised). */
static int grow_to(void *p, size_t *cap, size_t need, size_t elem)
{
	return grow((void **)p, cap, need > *cap && need < 2 * *cap ? 2 * *cap : need, elem);
}

/* What read_instances accumulates over the files. */
struct inst_acc {
	struct box_vec boxes;
	uint64_t *seg_off; /* [boxes.n + 1] point offsets */
	size_t seg_off_cap;
	float *seg, *kpt;
	size_t nseg, seg_cap, nkpt, kpt_cap; /* floats */
	uint64_t with_segment;               /* objects with a polygon */
};

/* One file's instances appended; -EFBIG past DATASET_MAX_INSTANCE_FLOATS. */
static int inst_append(struct inst_acc *a, const struct instances *in, uint32_t nkpt)
{
	size_t pts = in->seg_off ? in->seg_off[in->n] : 0, kf = in->kpt ? (size_t)in->n * nkpt * 3 : 0;

	if (a->nseg + a->nkpt + 2 * pts + kf > DATASET_MAX_INSTANCE_FLOATS)
		return -EFBIG;
	if (grow_to(&a->boxes.v, &a->boxes.cap, a->boxes.n + in->n, sizeof(*a->boxes.v)) < 0 ||
	    grow_to(&a->seg_off, &a->seg_off_cap, a->boxes.n + in->n + 1, sizeof(*a->seg_off)) < 0 ||
	    grow_to(&a->seg, &a->seg_cap, a->nseg + 2 * pts, sizeof(*a->seg)) < 0 ||
	    grow_to(&a->kpt, &a->kpt_cap, a->nkpt + kf, sizeof(*a->kpt)) < 0)
		return -ENOMEM;
	for (uint32_t k = 0; k < in->n; k++) {
		const float *b = in->box + (size_t)k * 4;

		a->seg_off[a->boxes.n] = a->nseg / 2;
		a->boxes.v[a->boxes.n++] = (struct detect_box){in->cls[k], b[0], b[1], b[2], b[3]};
		if (in->seg_off) {
			size_t np = in->seg_off[k + 1] - in->seg_off[k];

			memcpy(a->seg + a->nseg, in->seg + (size_t)in->seg_off[k] * 2, np * 2 * sizeof(float));
			a->nseg += np * 2;
			a->with_segment += np > 0;
		}
	}
	a->seg_off[a->boxes.n] = a->nseg / 2;
	if (kf) {
		memcpy(a->kpt + a->nkpt, in->kpt, kf * sizeof(float));
		a->nkpt += kf;
	}
	return 0;
}

/* The samples whose label file was corrupt dropped from the data set, in
 * place (they have no objects); the count left. */
static uint64_t drop_samples(struct dataset *ds, const uint8_t *dropped)
{
	uint64_t j = 0;

	for (uint64_t i = 0; i < ds->count; i++) {
		if (dropped[i])
			continue;
		ds->name_off[j] = ds->name_off[i];
		if (ds->labels)
			ds->labels[j] = ds->labels[i];
		if (ds->remote && ds->remote->sizes)
			ds->remote->sizes[j] = ds->remote->sizes[i];
		ds->box_off[j] = ds->box_off[i];
		j++;
	}
	ds->box_off[j] = ds->box_off[ds->count];
	ds->count = j;
	return j;
}

/* ds_read_labels with a spec: instances.h's reading, Ultralytics' rules. */
static int read_instances(struct dataset *ds, const struct instances_spec *spec_in, ds_label_read_fn read_fn,
			  void *read_ctx, label_report_fn report, void *ctx, char *errbuf, size_t errlen)
{
	struct instances_spec spec = *spec_in;
	struct inst_acc a = {0};
	uint8_t *dropped = NULL, *text = NULL;
	size_t cap = 0;
	int64_t len;
	int r = 0;

	spec.num_classes = ds->class_names ? ds->num_classes : LABELS_MAX_CLASSES;
	ds->box_off = calloc(ds->count + 1, sizeof(*ds->box_off));
	dropped = calloc(ds->count + 1, 1);
	if (!ds->box_off || !dropped)
		goto nomem;
	for (uint64_t i = 0; i < ds->count; i++) {
		char label[PATH_MAX * 2] = "", why[512] = "";
		struct instances in = {0};

		ds->box_off[i] = a.boxes.n;
		len = read_fn(read_ctx, ds, i, label, sizeof(label), &text, &cap, why, sizeof(why));
		if (len == -ENOENT) {
			ds->label_files_missing++; /* no objects */
			continue;
		}
		if (len == -ENOMEM)
			goto nomem;
		if (len >= 0)
			r = instances_parse((const char *)text, (size_t)len, &spec, &in, why, sizeof(why));
		if (len >= 0 && r == -ENOMEM)
			goto nomem;
		if (len < 0 || r < 0) {
			/* verify_image_label's exception: the image is dropped */
			if (report)
				report(ctx, label, 0, read_failure(len, why));
			ds->label_files_corrupt++;
			ds->label_errors++;
			dropped[i] = 1;
			r = 0;
			continue;
		}
		r = inst_append(&a, &in, spec.nkpt);
		instances_clear(&in);
		if (r == -EFBIG) {
			set_err(errbuf, errlen, "dataset %s: its segments and keypoints exceed %llu floats (%s)",
				ds->root, (unsigned long long)DATASET_MAX_INSTANCE_FLOATS, label);
			goto out;
		}
		if (r < 0)
			goto nomem;
	}
	ds->box_off[ds->count] = a.boxes.n;
	if (drop_samples(ds, dropped) == 0) {
		set_err(errbuf, errlen, "dataset %s: every image's label file is corrupt (%llu)", ds->root,
			(unsigned long long)ds->label_files_corrupt);
		r = -EINVAL;
		goto out;
	}
	ds->instances = true;
	ds->boxes = a.boxes.v;
	a.boxes.v = NULL;
	if (!ds->boxes && !(ds->boxes = malloc(sizeof(*ds->boxes))))
		goto nomem;
	/* YOLODataset.get_labels: segments only if every object has one */
	if (a.with_segment && a.with_segment == ds->box_off[ds->count]) {
		ds->seg_off = a.seg_off;
		ds->seg = a.seg;
		a.seg_off = NULL;
		a.seg = NULL;
	}
	if (!ds->class_names) {
		ds->num_classes = 0;
		for (uint64_t k = 0; k < ds->box_off[ds->count]; k++)
			if (ds->boxes[k].cls + 1 > ds->num_classes)
				ds->num_classes = (uint32_t)ds->boxes[k].cls + 1;
	}
	if (spec.keypoint) {
		ds->kpt = a.kpt ? a.kpt : malloc(sizeof(float));
		if (!ds->kpt)
			goto nomem;
		a.kpt = NULL;
		ds->nkpt = spec.nkpt;
	}
	r = 0;
	goto out;
nomem:
	r = -ENOMEM;
	set_err(errbuf, errlen, "dataset %s: out of memory reading its labels", ds->root);
out:
	free(a.boxes.v);
	free(a.seg_off);
	free(a.seg);
	free(a.kpt);
	free(dropped);
	free(text);
	return r;
}

int ds_read_labels(struct dataset *ds, const struct instances_spec *spec, ds_label_read_fn read_fn, void *read_ctx,
		   label_report_fn report, void *ctx, char *errbuf, size_t errlen)
{
	struct box_vec boxes = {0};
	uint8_t *text = NULL;
	size_t cap = 0;
	int32_t max_class = -1;
	int64_t len;
	int r = 0;

	if (spec)
		return read_instances(ds, spec, read_fn, read_ctx, report, ctx, errbuf, errlen);
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
				report(ctx, label, 0, read_failure(len, why));
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

int dataset_yolo_key(const struct instances_spec *spec, const char *split, const char *path, char *out, size_t size)
{
	int n;

	if (!spec)
		n = snprintf(out, size, "detect:%s:%s", split, path);
	else if (spec->keypoint)
		n = snprintf(out, size, "pose%ux%u:%s:%s", spec->nkpt, spec->ndim, split, path);
	else
		n = snprintf(out, size, "segment:%s:%s", split, path);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int dataset_open_detect(const char *path, const char *split, const struct instances_spec *spec, uint64_t max_samples,
			label_report_fn report, void *report_ctx, struct dataset **out, char *errbuf, size_t errlen)
{
	struct builder b = {.max = max_samples};
	struct data_yaml yaml = {0};
	struct dataset *ds = NULL;
	char real[PATH_MAX], images[PATH_MAX], key[PATH_MAX + 64];
	const char *dot;
	struct stat st;
	int r, dirfd = -1;

	if (spec && (shards_spec(path))) {
		set_err(errbuf, errlen, "dataset %s: segment, pose and OBB labels are not read from tar shards", path);
		return -EINVAL;
	}
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
		if (shards_spec(yaml.split_path) && spec) {
			set_err(errbuf, errlen, "dataset %s: segment, pose and OBB labels are not read from tar shards",
				path);
			data_yaml_clear(&yaml);
			return -EINVAL;
		}
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
	if (dataset_yolo_key(spec, split, real, key, sizeof(key)) < 0) {
		r = -ENAMETOOLONG;
		set_err(errbuf, errlen, "dataset %s: %s", path, strerror(-r));
		goto fail;
	}
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
	r = ds_read_labels(ds, spec, label_read_file, NULL, report, report_ctx, errbuf, errlen);
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
