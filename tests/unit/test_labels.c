/* SPDX-License-Identifier: MIT */
/* YOLO label files, label paths and data.yaml: what is kept, what is an
 * error, and that each error is reported with its line. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "labels.h"

struct reports {
	unsigned long lines[32];
	char why[32][160];
	unsigned n;
};

static void record(void *ctx, const char *path, unsigned long line, const char *why)
{
	struct reports *r = ctx;

	assert_string_equal(path, "lbl.txt");
	if (r->n < 32) {
		r->lines[r->n] = line;
		snprintf(r->why[r->n], sizeof(r->why[0]), "%s", why);
	}
	r->n++;
}

static int parse(const char *text, uint32_t num_classes, struct box_vec *v, struct reports *rep)
{
	return labels_parse(text, strlen(text), num_classes, "lbl.txt", record, rep, v);
}

static void test_good_lines(void **state)
{
	struct box_vec v = {0};
	struct reports rep = {0};

	(void)state;
	assert_int_equal(parse("0 0.5 0.5 0.2 0.4\n\n  3 0.1 0.2 0.05 0.1  \r\n7 1 1 1 1", 0, &v, &rep), 0);
	assert_int_equal(v.n, 3);
	assert_int_equal(rep.n, 0);
	assert_true(v.v[0].cls == 0 && v.v[0].cx == 0.5f && v.v[0].h == 0.4f);
	assert_true(v.v[1].cls == 3 && v.v[1].cy == 0.2f);
	assert_true(v.v[2].cls == 7 && v.v[2].w == 1.0f);
	free(v.v);
}

/* A segment's box is its points' bounding box. */
static void test_segment(void **state)
{
	struct box_vec v = {0};
	struct reports rep = {0};

	(void)state;
	assert_int_equal(parse("2 0.1 0.2 0.5 0.2 0.5 0.6 0.1 0.6\n", 0, &v, &rep), 0);
	assert_int_equal(v.n, 1);
	assert_float_equal(v.v[0].cx, 0.3, 1e-6);
	assert_float_equal(v.v[0].cy, 0.4, 1e-6);
	assert_float_equal(v.v[0].w, 0.4, 1e-6);
	assert_float_equal(v.v[0].h, 0.4, 1e-6);
	free(v.v);
}

/* Each bad line is one error, reported with its line; good lines stand. */
static void test_bad_lines(void **state)
{
	static const char *text = "0 0.5 0.5 0.2 0.2\n"     /* 1 good */
				  "0 0.5 0.5 0.2\n"         /* 2 four values */
				  "x 0.5 0.5 0.2 0.2\n"     /* 3 not a number */
				  "-1 0.5 0.5 0.2 0.2\n"    /* 4 negative class */
				  "1.5 0.5 0.5 0.2 0.2\n"   /* 5 class not an integer */
				  "1 1.2 0.5 0.2 0.2\n"     /* 6 cx over 1 */
				  "1 0.5 0.5 0 0.2\n"       /* 7 no width */
				  "1 0.5 0.5 0.2 nan\n"     /* 8 NaN */
				  "1 0.5 0.5 0.2 0.2 0.3\n" /* 9 six values */
				  "1 1.0005 0.5 0.2 0.2\n"  /* 10 rounding: clamped, kept */
				  "4 0.5 0.5 0.2 0.2\n";    /* 11 class 4 of 4 names */
	struct box_vec v = {0};
	struct reports rep = {0};
	static const unsigned long want[] = {2, 3, 4, 5, 6, 7, 8, 9, 11};

	(void)state;
	assert_int_equal(parse(text, 4, &v, &rep), 9);
	assert_int_equal(rep.n, 9);
	for (unsigned i = 0; i < 9; i++)
		assert_int_equal(rep.lines[i], want[i]);
	assert_non_null(strstr(rep.why[0], "4 values"));
	assert_non_null(strstr(rep.why[1], "not a number"));
	assert_non_null(strstr(rep.why[4], "outside 0..1"));
	assert_non_null(strstr(rep.why[8], "names"));
	assert_int_equal(v.n, 2);
	assert_float_equal(v.v[1].cx, 1.0, 0);
	free(v.v);
}

static void test_labels_path(void **state)
{
	char out[256];

	(void)state;
	assert_int_equal(labels_path("/d/coco/images/train2017/0001.jpg", out, sizeof(out)), 0);
	assert_string_equal(out, "/d/coco/labels/train2017/0001.txt");
	/* The last /images/ is the one replaced, as Ultralytics does. */
	assert_int_equal(labels_path("/images/x/images/a.b.JPEG", out, sizeof(out)), 0);
	assert_string_equal(out, "/images/x/labels/a.b.txt");
	assert_int_equal(labels_path("/d/flat/a.jpg", out, sizeof(out)), 0);
	assert_string_equal(out, "/d/flat/a.txt");
	assert_int_equal(labels_path("/d.x/images/noext", out, sizeof(out)), 0);
	assert_string_equal(out, "/d.x/labels/noext.txt");
	assert_int_equal(labels_path("/d/images/a.jpg", out, 8), -ENAMETOOLONG);
}

static char *write_yaml(const char *text)
{
	char *path = strdup("/tmp/stoker-test-yaml-XXXXXX.yaml");
	int fd = mkstemps(path, 5);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void test_yaml_forms(void **state)
{
	static const char *forms[] = {
		"# coco\npath: /data/coco  # root\ntrain: images/train\nval: images/val\nnames:\n  0: person\n"
		"  1: 'traffic light'\n  2: \"stop sign\"\n",
		"path: /data/coco\ntrain: images/train\nval: images/val\nnames: [person, 'traffic light', stop sign]\n",
		"path: /data/coco\ntrain: images/train\nval: images/val\nnames:\n  - person\n  - traffic light\n"
		"  - stop sign\ndownload: |\n  some: script\n",
		"path: /data/coco\ntrain: images/train\nval: images/val\nnames: {0: person, 1: traffic light, 2: stop "
		"sign}\n",
	};
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		char *path = write_yaml(forms[i]);
		struct data_yaml y = {0};

		err[0] = '\0';
		assert_int_equal(data_yaml_load(path, "val", &y, err, sizeof(err)), 0);
		assert_string_equal(y.split_path, "/data/coco/images/val");
		assert_int_equal(y.nnames, 3);
		assert_string_equal(y.names[0], "person");
		assert_string_equal(y.names[1], "traffic light");
		assert_string_equal(y.names[2], "stop sign");
		data_yaml_clear(&y);
		unlink(path);
		free(path);
	}
}

static void test_yaml_errors(void **state)
{
	struct data_yaml y = {0};
	char err[256], *path;

	(void)state;
	/* No such split: the message lists the ones there are. */
	path = write_yaml("train: a\nval: b\n");
	assert_int_equal(data_yaml_load(path, "test", &y, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "train, val"));
	unlink(path);
	free(path);
	/* A relative root is taken from the yaml's directory. */
	path = write_yaml("path: sets/x\ntrain: images/train\n");
	assert_int_equal(data_yaml_load(path, "train", &y, err, sizeof(err)), 0);
	assert_string_equal(y.split_path, "/tmp/sets/x/images/train");
	data_yaml_clear(&y);
	unlink(path);
	free(path);
	/* Lists of split directories are refused, with the line. */
	path = write_yaml("train:\n  - a\n  - b\n");
	assert_int_equal(data_yaml_load(path, "train", &y, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, ":1:"));
	unlink(path);
	free(path);
	/* A gap in the names. */
	path = write_yaml("train: a\nnames:\n  0: a\n  2: c\n");
	assert_int_equal(data_yaml_load(path, "train", &y, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "class 1"));
	unlink(path);
	free(path);
	/* An index past any class count (fuzz_detect found its +1 overflowing). */
	path = write_yaml("train: a\nnames:\n  9223372036854775807: x\n  99999999999999999999: y\n");
	assert_int_equal(data_yaml_load(path, "train", &y, err, sizeof(err)), -EINVAL);
	unlink(path);
	free(path);
	data_yaml_clear(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_lines), cmocka_unit_test(test_segment),
		cmocka_unit_test(test_bad_lines),  cmocka_unit_test(test_labels_path),
		cmocka_unit_test(test_yaml_forms), cmocka_unit_test(test_yaml_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
