/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "dataset.h"
#include "dataset_priv.h"
#include "errtext.h"
#include "header.h"
#include "grow.h"
#include "shards.h"
#include "strvec.h"

/* os.walk with followlinks can loop; real trees are nowhere near this deep. */
#define DATASET_MAX_DEPTH 64

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

bool ds_is_folder_image(const char *name)
{
	static const char *const exts[] = {"jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp", NULL};

	return ds_has_extension(name, exts, true);
}

bool ds_is_yolo_image(const char *name)
{
	static const char *const exts[] = {"bmp", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp", NULL};

	return ds_has_extension(name, exts, false);
}

int ds_builder_add(struct builder *b, const char *name, int32_t label, const char *path, char *errbuf,
		   size_t errlen)
{
	int r = builder_add_sample(b, name, label);

	if (r == -EFBIG)
		set_err(errbuf, errlen, "%s: more than %llu samples", path, (unsigned long long)b->max);
	else if (r < 0)
		set_err(errbuf, errlen, "%s: %s", path, strerror(-r));
	return r;
}

/* Open directory `rel` under `rootfd` for reading its entries. */
static int open_dir(int rootfd, const char *rel, DIR **out)
{
	int fd, r;
	DIR *d;

	fd = openat(rootfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		r = -errno;
		close(fd);
		return r;
	}
	*out = d;
	return 0;
}

/* Is entry `name` of `d` a directory (following links, as os.walk does)? */
static bool entry_is_dir(DIR *d, const char *name)
{
	struct stat st;

	return fstatat(dirfd(d), name, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

int ds_walk_dirs(int rootfd, const char *rel, unsigned depth, struct strvec *dirs)
{
	struct dirent *e;
	DIR *d = NULL;
	int r;

	if (depth > DATASET_MAX_DEPTH)
		return -ELOOP;
	r = strvec_push(dirs, rel);
	if (r < 0)
		return r;
	r = open_dir(rootfd, rel, &d);
	if (r < 0)
		return r;
	while ((e = readdir(d))) {
		char child[PATH_MAX];

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || !entry_is_dir(d, e->d_name))
			continue;
		if ((size_t)snprintf(child, sizeof(child), "%s/%s", rel, e->d_name) >= sizeof(child)) {
			r = -ENAMETOOLONG;
			goto out;
		}
		r = ds_walk_dirs(rootfd, child, depth + 1, dirs);
		if (r < 0)
			goto out;
	}
	r = 0;
out:
	closedir(d);
	return r;
}

int ds_list_files(int rootfd, const char *rel, bool (*accept)(const char *), struct strvec *files)
{
	struct dirent *e;
	DIR *d;
	int r;

	r = open_dir(rootfd, rel, &d);
	if (r < 0)
		return r;
	while ((e = readdir(d))) {
		/* os.walk lists every non-directory, dangling links included. */
		if (!accept(e->d_name) || entry_is_dir(d, e->d_name))
			continue;
		r = strvec_push(files, e->d_name);
		if (r < 0)
			break;
	}
	closedir(d);
	if (r == 0)
		strvec_sort(files);
	return r;
}

static int scan_image_folder(int rootfd, const char *path, struct builder *b, uint32_t *num_classes, char *errbuf,
			     size_t errlen)
{
	struct strvec classes = {0}, dirs = {0}, files = {0};
	struct dirent *e;
	DIR *d = NULL;
	int r;

	r = open_dir(rootfd, ".", &d);
	if (r < 0)
		return r;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || !entry_is_dir(d, e->d_name))
			continue;
		r = strvec_push(&classes, e->d_name);
		if (r < 0)
			goto out;
	}
	if (classes.n == 0) {
		set_err(errbuf, errlen, "%s: no class directories (expected ImageFolder layout: root/class/image.jpg)",
			path);
		r = -ENOENT;
		goto out;
	}
	if (classes.n > INT32_MAX) {
		r = -EFBIG;
		goto out;
	}
	strvec_sort(&classes);

	for (size_t c = 0; c < classes.n; c++) {
		uint64_t before = b->n;

		r = ds_walk_dirs(rootfd, classes.v[c], 0, &dirs);
		if (r < 0) {
			set_err(errbuf, errlen, "%s/%s: %s", path, classes.v[c], strerror(-r));
			goto out;
		}
		strvec_sort(&dirs);
		for (size_t i = 0; i < dirs.n; i++) {
			r = ds_list_files(rootfd, dirs.v[i], ds_is_folder_image, &files);
			if (r < 0) {
				set_err(errbuf, errlen, "%s/%s: %s", path, dirs.v[i], strerror(-r));
				goto out;
			}
			for (size_t f = 0; f < files.n; f++) {
				char rel[PATH_MAX];

				if ((size_t)snprintf(rel, sizeof(rel), "%s/%s", dirs.v[i], files.v[f]) >= sizeof(rel)) {
					r = -ENAMETOOLONG;
					goto out;
				}
				r = ds_builder_add(b, rel, (int32_t)c, path, errbuf, errlen);
				if (r < 0)
					goto out;
			}
			strvec_free(&files);
		}
		strvec_free(&dirs);
		if (b->n == before) {
			/* torchvision's ImageFolder refuses this too. */
			set_err(errbuf, errlen, "%s: class '%s' has no image files (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp)", path, classes.v[c]);
			r = -ENOENT;
			goto out;
		}
	}
	*num_classes = (uint32_t)classes.n;
	r = 0;
out:
	strvec_free(&classes);
	strvec_free(&dirs);
	strvec_free(&files);
	if (d)
		closedir(d);
	return r;
}

int ds_scan_list_stream(FILE *f, const char *path, struct builder *b, uint32_t *num_classes, char *errbuf,
			size_t errlen)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	unsigned long lineno = 0;
	int64_t max_label = -1;
	int r = 0;

	while ((len = getline(&line, &cap, f)) >= 0) {
		char *end = line + len, *label_start, *endp;
		long long label;

		lineno++;
		while (end > line && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
			*--end = '\0';
		label_start = line;
		while (*label_start == ' ' || *label_start == '\t')
			label_start++;
		if (*label_start == '\0' || *label_start == '#')
			continue;
		/* The label is the last field, so paths may hold spaces. */
		char *sep = strrchr(label_start, ' ');
		char *tab = strrchr(label_start, '\t');
		if (!sep || (tab && tab > sep))
			sep = tab;
		if (!sep) {
			set_err(errbuf, errlen, "%s:%lu: expected 'path label'", path, lineno);
			r = -EINVAL;
			goto out;
		}
		errno = 0;
		label = strtoll(sep + 1, &endp, 10);
		if (errno || *endp != '\0' || endp == sep + 1 || label < 0 || label > INT32_MAX) {
			set_err(errbuf, errlen, "%s:%lu: label '%s' is not a non-negative integer", path, lineno,
				sep + 1);
			r = -EINVAL;
			goto out;
		}
		while (sep > label_start && (sep[-1] == ' ' || sep[-1] == '\t'))
			sep--;
		*sep = '\0';
		r = ds_builder_add(b, label_start, (int32_t)label, path, errbuf, errlen);
		if (r < 0)
			goto out;
		if (label > max_label)
			max_label = label;
	}
	if (b->n == 0) {
		set_err(errbuf, errlen, "%s: no samples listed", path);
		r = -ENOENT;
		goto out;
	}
	*num_classes = (uint32_t)(max_label + 1);
out:
	free(line);
	return r;
}

static int scan_list_file(const char *path, struct builder *b, uint32_t *num_classes, char *errbuf, size_t errlen)
{
	FILE *f = fopen(path, "re");
	int r;

	if (!f) {
		r = -errno;
		set_err(errbuf, errlen, "%s: %s", path, strerror(errno));
		return r;
	}
	r = ds_scan_list_stream(f, path, b, num_classes, errbuf, errlen);
	fclose(f);
	return r;
}

int ds_open_parent(const char *file, int *dirfd, char *errbuf, size_t errlen)
{
	char dir[PATH_MAX];
	char *slash;
	int fd;

	snprintf(dir, sizeof(dir), "%s", file);
	slash = strrchr(dir, '/');
	if (slash == dir)
		slash[1] = '\0';
	else if (slash)
		*slash = '\0';
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;

		set_err(errbuf, errlen, "dataset %s: %s", dir, strerror(e));
		return -e;
	}
	*dirfd = fd;
	return 0;
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

int ds_make(struct builder *b, const char *root, const char *key, int dirfd, uint32_t num_classes,
	    struct dataset **out)
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

int dataset_open(const char *path, uint64_t max_samples, struct dataset **out, char *errbuf, size_t errlen)
{
	struct builder b = {.max = max_samples};
	struct dataset *ds = NULL;
	char real[PATH_MAX];
	uint32_t num_classes = 0;
	struct stat st;
	int r, dirfd = -1;

	if (shards_spec(path)) {
		struct shard_table t;

		r = shards_open(path, false, 0, max_samples, NULL, NULL, &t, errbuf, errlen);
		return r < 0 ? r : ds_from_shards(path, &t, out, errbuf, errlen);
	}
	if (!realpath(path, real) || stat(real, &st) < 0) {
		r = -errno;
		set_err(errbuf, errlen, "dataset %s: %s", path, strerror(errno));
		return r;
	}
	if (S_ISDIR(st.st_mode)) {
		dirfd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dirfd < 0) {
			r = -errno;
			set_err(errbuf, errlen, "dataset %s: %s", path, strerror(errno));
			goto fail;
		}
		r = scan_image_folder(dirfd, real, &b, &num_classes, errbuf, errlen);
	} else if (S_ISREG(st.st_mode)) {
		r = ds_open_parent(real, &dirfd, errbuf, errlen);
		if (r < 0)
			goto fail;
		r = scan_list_file(real, &b, &num_classes, errbuf, errlen);
	} else {
		set_err(errbuf, errlen, "dataset %s: neither a directory nor a list file", path);
		r = -EINVAL;
	}
	if (r < 0) {
		if (!errbuf[0])
			set_err(errbuf, errlen, "dataset %s: %s", path, strerror(-r));
		goto fail;
	}

	r = ds_make(&b, real, real, dirfd, num_classes, &ds);
	if (r < 0) {
		set_err(errbuf, errlen, "dataset %s: out of memory", path);
		goto fail;
	}
	*out = ds;
	return 0;
fail:
	ds_builder_free(&b);
	if (dirfd >= 0)
		close(dirfd);
	return r;
}

/* ---- detection data sets (Ultralytics' YOLO layout) ---- */

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
		set_err(errbuf, errlen, "dataset %s: no image files (.bmp .jpeg .jpg .mpo .png .tif .tiff .webp) under it", path);
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
		char *p = line, *end = line + len;

		while (end > line && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
			*--end = '\0';
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\0' || *p == '#')
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

/* Local files: the label path Ultralytics derives from the image's. */
static int64_t label_read_file(void *ctx, const struct dataset *ds, uint64_t i, char *label, size_t label_size,
			       uint8_t **text, size_t *cap, char *why, size_t whylen)
{
	const char *name = dataset_name(ds, i);
	char image[PATH_MAX * 2];
	int64_t len;

	(void)ctx;
	if ((size_t)snprintf(image, sizeof(image), "%s%s%s", name[0] == '/' ? "" : ds->root,
			     name[0] == '/' ? "" : "/", name) >= sizeof(image) ||
	    labels_path(image, label, label_size) < 0) {
		snprintf(label, label_size, "%s", image);
		return -ENAMETOOLONG;
	}
	len = ds_read_bounded(AT_FDCWD, label, text, cap, LABELS_MAX_FILE_BYTES);
	if (len < 0)
		snprintf(why, whylen, "%s", strerror((int)-len));
	return len;
}

int ds_read_labels(struct dataset *ds, ds_label_read_fn read_fn, void *read_ctx, label_report_fn report,
		   void *ctx, char *errbuf, size_t errlen)
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
				       : len == -EFBIG	    ? "larger than 4 MiB: not a label file"
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

/* ---- remote data sets (s3://, http://, https://) ---- */

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
	struct listing l = {.prefix_len = strlen(prefix), .max = b->max, .errbuf = errbuf, .errlen = errlen, .url = url,
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

int ds_remote_get(const struct dataset_remote *rm, const char *loc, struct fetch_req *req, char *errbuf,
		  size_t errlen)
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

int ds_remote_finish(struct dataset_remote *rm, struct builder *b, uint64_t **sizes, const char *root,
		     const char *key, uint32_t num_classes, struct dataset **out, char *errbuf, size_t errlen)
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
				"%s: HTTP servers have no listing to scan: give a list file of 'path label' lines", url);
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

/* ---- remote detection data sets ---- */

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
	struct listing l = {.prefix_len = strlen(prefix), .max = b->max, .errbuf = errbuf, .errlen = errlen, .url = url,
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
		set_err(errbuf, errlen, "%s: no image files (.bmp .jpeg .jpg .mpo .png .tif .tiff .webp) under it", url);
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
static int remote_read_labels(struct dataset *ds, label_report_fn report, void *ctx, char *errbuf, size_t errlen)
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
	r = ds_read_labels(ds, label_read_remote, &lf, report, ctx, errbuf, errlen);
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

int dataset_open_remote_detect(const char *url, const char *split, uint64_t max_samples, struct fetch *f,
			       const struct s3_config *s3, label_report_fn report, void *report_ctx,
			       struct dataset **out, char *errbuf, size_t errlen)
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
	snprintf(key, sizeof(key), "detect:%s:%s", split, url);
	r = ds_remote_finish(rm, &b, &sizes, images, key, yaml.nnames, &ds, errbuf, errlen);
	if (r < 0)
		goto fail;
	rm = NULL; /* the data set's now */
	ds->detect = true;
	ds->class_names = yaml.names;
	yaml.names = NULL;
	yaml.nnames = 0;
	r = remote_read_labels(ds, report, report_ctx, errbuf, errlen);
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
	if (ds->remote)
		free(ds->remote->sizes);
	free(ds->remote);
	free(ds->root);
	free(ds->key);
	free(ds->boxes);
	free(ds->box_off);
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
