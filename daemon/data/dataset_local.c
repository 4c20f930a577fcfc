/* SPDX-License-Identifier: MIT */
/*
 * Local data sets in ImageFolder layout and `path label` list files
 * (dataset.h; what the data-set files share: dataset_priv.h).
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "dataset_priv.h"
#include "errtext.h"
#include "shards.h"
#include "strvec.h"
#include "text.h"

/* os.walk with followlinks can loop; real trees are nowhere near this deep. */
#define DATASET_MAX_DEPTH 64

bool ds_is_folder_image(const char *name)
{
	static const char *const exts[] = {"jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp", NULL};

	return ds_has_extension(name, exts, true);
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
			set_err(errbuf, errlen,
				"%s: class '%s' has no image files (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp)",
				path, classes.v[c]);
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
		char *label_start, *endp;
		long long label;

		lineno++;
		label_start = text_list_entry(line, (size_t)len);
		if (!label_start)
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
