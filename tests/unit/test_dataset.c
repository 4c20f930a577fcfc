/* SPDX-License-Identifier: MIT */
/* Data set scanning: torchvision's ImageFolder order, list files, errors. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "dataset.h"
#include "instances.h"

#define SCRATCH_NAME "dataset"
#include "scratch_dir.h"

static void touch(const char *rel, const char *content)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
}

static void mkd(const char *rel)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	assert_int_equal(mkdir(path, 0755), 0);
}

static const char *name(const struct dataset *ds, uint64_t i)
{
	return ds->names + ds->name_off[i];
}

/* Order as torchvision: classes sorted; within a class, os.walk roots sorted
 * as strings ("b" < "b-x" < "b/sub"), files sorted; non-JPEG skipped. */
static void test_image_folder_order(void **state)
{
	struct dataset *ds;
	char err[256] = "";

	(void)state;
	mkd("b");
	mkd("a");
	mkd("b/sub");
	mkd("b-x");
	touch("a/2.jpg", "x");
	touch("a/10.JPEG", "x");
	touch("a/notes.txt", "x");
	touch("b/z.jpg", "x");
	touch("b/sub/a.jpg", "x");
	touch("b-x/q.jpeg", "x");
	touch("stray.jpg", "x"); /* not in a class */
	assert_int_equal(dataset_open(root, 1000, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->num_classes, 3); /* a, b, b-x */
	assert_int_equal(ds->count, 5);
	assert_string_equal(name(ds, 0), "a/10.JPEG");
	assert_string_equal(name(ds, 1), "a/2.jpg");
	assert_string_equal(name(ds, 2), "b/z.jpg");
	assert_string_equal(name(ds, 3), "b/sub/a.jpg");
	assert_string_equal(name(ds, 4), "b-x/q.jpeg");
	assert_int_equal(ds->labels[0], 0);
	assert_int_equal(ds->labels[3], 1);
	assert_int_equal(ds->labels[4], 2);

	uint8_t *buf = NULL;
	size_t cap = 0;
	assert_int_equal(dataset_read(ds, 2, &buf, &cap, 1 << 20), 1);
	assert_int_equal(buf[0], 'x');
	assert_int_equal(dataset_read(ds, 2, &buf, &cap, 0), -EFBIG);
	assert_int_equal(dataset_read(ds, 99, &buf, &cap, 1 << 20), -ERANGE);
	free(buf);
	assert_false(dataset_is_bad(ds, 3));
	dataset_mark_bad(ds, 3);
	assert_true(dataset_is_bad(ds, 3));
	assert_false(dataset_is_bad(ds, 2));
	dataset_unref(ds);
}

/* Every torchvision IMG_EXTENSIONS entry in any case, and nothing else;
 * YOLO directories take Ultralytics' IMG_FORMATS that stoker decodes. */
static void test_image_extensions(void **state)
{
	static const char *const taken[] = {"a/0.jpg", "a/1.JPEG", "a/2.png",  "a/3.PPM",  "a/4.bmp",
					    "a/5.pgm", "a/6.Tif",  "a/7.tiff", "a/8.webp", "a/9.x.WebP"};
	static const char *const skipped[] = {"a/gif.gif",   "a/heic.heic", "a/mpo.mpo",  "a/png",
					      "a/notes.txt", "a/x.jpg.bak", "a/avif.avif"};
	struct dataset *ds;
	char err[256] = "";

	(void)state;
	mkd("a");
	for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++)
		touch(taken[i], "x");
	for (size_t i = 0; i < sizeof(skipped) / sizeof(skipped[0]); i++)
		touch(skipped[i], "x");
	assert_int_equal(dataset_open(root, 1000, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->count, sizeof(taken) / sizeof(taken[0]));
	for (size_t i = 0; i < ds->count; i++)
		assert_string_equal(name(ds, i), taken[i]);
	dataset_unref(ds);

	/* YOLO: bmp jpeg jpg mpo png tif tiff webp, any case; not pgm/ppm, nor
	 * heic/avif. A name without a dot is its own extension (rpartition). */
	assert_int_equal(dataset_open_detect(root, NULL, NULL, 1000, NULL, NULL, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->count, 10);
	assert_string_equal(name(ds, 0), "a/0.jpg");
	assert_string_equal(name(ds, 2), "a/2.png");
	assert_string_equal(name(ds, 3), "a/4.bmp");
	assert_string_equal(name(ds, 7), "a/9.x.WebP");
	assert_string_equal(name(ds, 8), "a/mpo.mpo");
	assert_string_equal(name(ds, 9), "a/png");
	dataset_unref(ds);
}

/* Segment and pose data sets: instances.h's reading per file, a corrupt
 * file's image dropped (its name, objects and order closed up), polygons
 * and keypoints kept per object, the data set's keys apart. */
static void test_instance_labels(void **state)
{
	struct instances_spec seg = {0}, pose = {.keypoint = true, .nkpt = 2, .ndim = 3};
	struct dataset *ds;
	char err[256] = "", key[256];

	(void)state;
	mkd("images");
	mkd("labels");
	touch("images/a.jpg", "x");
	touch("images/b.jpg", "x");
	touch("images/c.jpg", "x");
	touch("images/d.jpg", "x");
	touch("labels/a.txt", "0 0.1 0.1 0.5 0.1 0.3 0.5\n1 0.6 0.6 0.8 0.6 0.8 0.8 0.6 0.8\n");
	touch("labels/b.txt", "0 0.1 0.1 0.5 0.1 1.5 0.5\n"); /* corrupt: above 1.01 */
	/* c: no label file; d: one triangle */
	touch("labels/d.txt", "2 0.2 0.2 0.4 0.2 0.3 0.4\n");
	assert_int_equal(dataset_open_detect(root, "train", &seg, 1000, NULL, NULL, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->count, 3);
	assert_string_equal(name(ds, 0), "images/a.jpg");
	assert_string_equal(name(ds, 1), "images/c.jpg");
	assert_string_equal(name(ds, 2), "images/d.jpg");
	assert_int_equal(ds->label_files_corrupt, 1);
	assert_int_equal(ds->label_files_missing, 1);
	assert_int_equal(ds->box_off[0], 0);
	assert_int_equal(ds->box_off[1], 2);
	assert_int_equal(ds->box_off[2], 2);
	assert_int_equal(ds->box_off[3], 3);
	assert_non_null(ds->seg_off);
	assert_int_equal(ds->seg_off[0], 0);
	assert_int_equal(ds->seg_off[1], 3);
	assert_int_equal(ds->seg_off[2], 7);
	assert_int_equal(ds->seg_off[3], 10);
	assert_true(ds->seg[2 * 7] == 0.2f && ds->seg[2 * 9 + 1] == 0.4f);
	assert_true(ds->boxes[2].cls == 2.0f && ds->boxes[2].w == 0.4f - 0.2f);
	assert_null(ds->kpt);
	assert_non_null(strstr(ds->key, "segment:train:"));
	dataset_unref(ds);

	/* a box row among polygons: Ultralytics keeps boxes only, for every image */
	touch("labels/d.txt", "2 0.3 0.3 0.2 0.2\n");
	assert_int_equal(dataset_open_detect(root, "train", &seg, 1000, NULL, NULL, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->count, 3);
	assert_null(ds->seg_off);
	assert_int_equal(ds->box_off[3], 3);
	dataset_unref(ds);

	touch("labels/a.txt", "0 0.5 0.5 0.2 0.2 0.45 0.45 2 0.55 0.45 1\n");
	touch("labels/d.txt", "0 0.5 0.5 0.2 0.2 0.45 0.45 2\n"); /* corrupt: rows of 11 values expected */
	assert_int_equal(dataset_open_detect(root, "val", &pose, 1000, NULL, NULL, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->count, 2); /* b and d corrupt, c without a file */
	assert_int_equal(ds->label_files_corrupt, 2);
	assert_string_equal(name(ds, 0), "images/a.jpg");
	assert_string_equal(name(ds, 1), "images/c.jpg");
	dataset_unref(ds);
	touch("labels/d.txt", "0 0.5 0.5 0.2 0.2 0.45 0.45 2 0.55 0.45 1\n0 0.5 0.5 0.2 0.2 0.4 0.4 0 0.6 0.4 2\n");
	assert_int_equal(dataset_open_detect(root, "val", &pose, 1000, NULL, NULL, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->count, 3);
	assert_int_equal(ds->nkpt, 2);
	assert_int_equal(ds->box_off[3], 3);
	assert_true(ds->kpt[0] == 0.45f && ds->kpt[2] == 2.0f && ds->kpt[5] == 1.0f);
	assert_null(ds->seg_off);
	assert_non_null(strstr(ds->key, "pose2x3:val:"));
	dataset_unref(ds);

	assert_int_equal(dataset_yolo_key(NULL, "train", "/p", key, sizeof(key)), 0);
	assert_string_equal(key, "detect:train:/p");
	assert_int_equal(dataset_yolo_key(&seg, "train", "/p", key, 8), -ENAMETOOLONG);
}

static void test_empty_class_refused(void **state)
{
	struct dataset *ds = NULL;
	char err[256] = "";

	(void)state;
	mkd("a");
	mkd("empty");
	touch("a/1.jpg", "x");
	assert_int_equal(dataset_open(root, 1000, &ds, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "empty"));
	assert_null(ds);
}

static void test_list_file(void **state)
{
	char path[512], err[256] = "";
	struct dataset *ds;

	(void)state;
	mkd("img");
	touch("img/with space.jpg", "yy");
	touch("list.txt", "# comment\nimg/with space.jpg 3\n\nimg/other.jpg\t0\r\n");
	snprintf(path, sizeof(path), "%s/list.txt", root);
	assert_int_equal(dataset_open(path, 1000, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->count, 2);
	assert_int_equal(ds->num_classes, 4);
	assert_string_equal(name(ds, 0), "img/with space.jpg");
	assert_int_equal(ds->labels[0], 3);
	assert_string_equal(name(ds, 1), "img/other.jpg");
	uint8_t *buf = NULL;
	size_t cap = 0;
	assert_int_equal(dataset_read(ds, 0, &buf, &cap, 1 << 20), 2);
	assert_int_equal(dataset_read(ds, 1, &buf, &cap, 1 << 20), -ENOENT); /* listed, missing */
	free(buf);
	dataset_unref(ds);
}

static void test_list_file_errors(void **state)
{
	char path[512], err[256] = "";
	struct dataset *ds = NULL;

	(void)state;
	touch("bad.txt", "a.jpg 1\nb.jpg minus\n");
	snprintf(path, sizeof(path), "%s/bad.txt", root);
	assert_int_equal(dataset_open(path, 1000, &ds, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, ":2:"));
	touch("big.txt", "a.jpg 1\nb.jpg 2\nc.jpg 3\n");
	snprintf(path, sizeof(path), "%s/big.txt", root);
	assert_int_equal(dataset_open(path, 2, &ds, err, sizeof(err)), -EFBIG);
	snprintf(path, sizeof(path), "%s/missing", root);
	assert_int_equal(dataset_open(path, 2, &ds, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "missing"));
	assert_null(ds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_image_folder_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_image_extensions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_instance_labels, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_class_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_file_errors, setup, teardown),
	};
	return cmocka_run_group_tests_name("dataset", tests, NULL, NULL);
}
