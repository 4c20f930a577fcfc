/* SPDX-License-Identifier: MIT */
/*
 * Tar shards: the member index against hand-made and hostile headers, brace
 * expansion, WebDataset's key rule, shard data sets (grouping, labels, the
 * index directory) and shard order's plan.
 */
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
#include "plan.h"
#include "shards.h"
#include "tar.h"

/* ---- a tar writer ---- */

struct buf {
	uint8_t *p;
	size_t n;
};

static void put(struct buf *b, const void *data, size_t len)
{
	b->p = realloc(b->p, b->n + len);
	assert_non_null(b->p);
	memcpy(b->p + b->n, data, len);
	b->n += len;
}

static void pad(struct buf *b)
{
	static const uint8_t zero[TAR_BLOCK];

	if (b->n % TAR_BLOCK)
		put(b, zero, TAR_BLOCK - b->n % TAR_BLOCK);
}

static void checksum(uint8_t *h)
{
	unsigned sum = 0;

	memset(h + 148, ' ', 8);
	for (int i = 0; i < TAR_BLOCK; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
}

/* A header: name (<= 100), type, size; ustar magic. */
static void header(struct buf *b, const char *name, char type, uint64_t size, const char *prefix)
{
	uint8_t h[TAR_BLOCK] = {0};

	memcpy(h, name, strnlen(name, 100));
	memcpy(h + 100, "0000644", 7);
	snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
	h[156] = (uint8_t)type;
	memcpy(h + 257,
	       "ustar\0"
	       "00",
	       8);
	if (prefix)
		memcpy(h + 345, prefix, strlen(prefix));
	checksum(h);
	put(b, h, TAR_BLOCK);
}

static void member(struct buf *b, const char *name, const char *data)
{
	header(b, name, '0', strlen(data), NULL);
	put(b, data, strlen(data));
	pad(b);
}

static void end(struct buf *b)
{
	static const uint8_t zero[2 * TAR_BLOCK];

	put(b, zero, sizeof(zero));
}

static int64_t mem_read(void *ctx, uint64_t off, void *dst, size_t len)
{
	struct buf *b = ctx;

	if (off >= b->n)
		return 0;
	if (len > b->n - off)
		len = (size_t)(b->n - off);
	memcpy(dst, b->p + off, len);
	return (int64_t)len;
}

static int index_of(struct buf *b, struct tar_index *t, uint64_t *err_off, char *why)
{
	return tar_index_build(mem_read, b, b->n, 1000, t, err_off, why, 128);
}

/* ---- the member index ---- */

static void test_tar_formats(void **state)
{
	struct buf b = {0};
	struct tar_index t;
	uint64_t eo;
	char why[128], longname[300], pax[512];
	int n;

	(void)state;
	member(&b, "a/x.jpg", "JPEGDATA");
	header(&b, "a/", '5', 0, NULL);             /* a directory: skipped */
	header(&b, "link.jpg", '2', 700, NULL);     /* a symlink: skipped, its size field ignored */
	header(&b, "x.cls", '0', 1, "some/prefix"); /* ustar prefix joined */
	put(&b, "7", 1);
	pad(&b);
	memset(longname, 'n', sizeof(longname));
	memcpy(longname + 290, ".jpg", 5);
	header(&b, "././@LongLink", 'L', strlen(longname) + 1, NULL);
	put(&b, longname, strlen(longname) + 1);
	pad(&b);
	member(&b, "truncated-name", "LONG");
	n = snprintf(pax, sizeof(pax), "%d path=pax/name.json\n", 22);
	assert_int_equal(n, 22);
	n += snprintf(pax + n, sizeof(pax) - (size_t)n, "%d size=3\n", 10);
	header(&b, "PaxHeader", 'x', (uint64_t)n, NULL);
	put(&b, pax, (size_t)n);
	pad(&b);
	header(&b, "ignored", '0', 99, NULL); /* pax size 3 wins */
	put(&b, "{ }", 3);
	pad(&b);
	end(&b);

	assert_int_equal(index_of(&b, &t, &eo, why), 0);
	assert_int_equal(t.n, 4);
	assert_string_equal(tar_member_name(&t, 0), "a/x.jpg");
	assert_int_equal(t.v[0].offset, TAR_BLOCK);
	assert_int_equal(t.v[0].size, 8);
	assert_memory_equal(b.p + t.v[0].offset, "JPEGDATA", 8);
	assert_string_equal(tar_member_name(&t, 1), "some/prefix/x.cls");
	assert_memory_equal(b.p + t.v[1].offset, "7", 1);
	assert_string_equal(tar_member_name(&t, 2), longname);
	assert_memory_equal(b.p + t.v[2].offset, "LONG", 4);
	assert_string_equal(tar_member_name(&t, 3), "pax/name.json");
	assert_int_equal(t.v[3].size, 3);
	assert_memory_equal(b.p + t.v[3].offset, "{ }", 3);
	tar_index_free(&t);
	free(b.p);
}

static void test_tar_base256_and_no_end(void **state)
{
	struct buf b = {0};
	struct tar_index t;
	uint64_t eo;
	char why[128];

	(void)state;
	header(&b, "big.jpg", '0', 0, NULL);
	/* GNU base-256 size 5 in the size field. */
	memset(b.p + 124, 0, 12);
	b.p[124] = 0x80;
	b.p[135] = 5;
	checksum(b.p);
	put(&b, "HELLO", 5);
	pad(&b);
	/* No end-of-archive blocks: ends at the data's end. */
	assert_int_equal(index_of(&b, &t, &eo, why), 0);
	assert_int_equal(t.n, 1);
	assert_int_equal(t.v[0].size, 5);
	tar_index_free(&t);
	free(b.p);
}

/* Each hostile archive is refused with the offset of the header at fault. */
static void expect_refused(struct buf *b, int err, uint64_t off, const char *why_part)
{
	struct tar_index t = {0};
	uint64_t eo = 12345;
	char why[128] = "";

	assert_int_equal(index_of(b, &t, &eo, why), err);
	assert_int_equal(eo, off);
	assert_non_null(strstr(why, why_part));
	assert_int_equal(t.n, 0);
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static void test_tar_hostile(void **state)
{
	struct buf b = {0};
	char pax[64];

	(void)state;
	/* bad checksum */
	member(&b, "a.jpg", "x");
	header(&b, "b.jpg", '0', 1, NULL);
	b.p[b.n - TAR_BLOCK + 5] ^= 1;
	expect_refused(&b, -EBADMSG, TAR_BLOCK * 2, "checksum");
	/* data past the end */
	member(&b, "a.jpg", "x");
	header(&b, "b.jpg", '0', 4096, NULL);
	put(&b, "short", 5);
	expect_refused(&b, -EBADMSG, TAR_BLOCK * 2, "past the end");
	/* header cut short */
	member(&b, "a.jpg", "x");
	put(&b, "garbage", 7);
	expect_refused(&b, -EBADMSG, TAR_BLOCK * 2, "cut short");
	/* a size field that is not octal */
	header(&b, "a.jpg", '0', 0, NULL);
	memcpy(b.p + 124, "0000000009x", 11);
	checksum(b.p);
	expect_refused(&b, -EBADMSG, 0, "size");
	/* an enormous base-256 size */
	header(&b, "a.jpg", '0', 0, NULL);
	memset(b.p + 124, 0xff, 12);
	b.p[124] = 0x80 | 0x3f;
	checksum(b.p);
	expect_refused(&b, -EBADMSG, 0, "size");
	/* a GNU long name over TAR_MAX_NAME */
	header(&b, "././@LongLink", 'L', TAR_MAX_NAME + 1, NULL);
	expect_refused(&b, -EBADMSG, 0, "long name");
	/* a pax header over TAR_MAX_PAX */
	header(&b, "PaxHeader", 'x', TAR_MAX_PAX + 1, NULL);
	expect_refused(&b, -EBADMSG, 0, "pax header too large");
	/* a malformed pax record (length past the header) */
	snprintf(pax, sizeof(pax), "99 path=x.jpg\n");
	header(&b, "PaxHeader", 'x', strlen(pax), NULL);
	put(&b, pax, strlen(pax));
	pad(&b);
	member(&b, "a.jpg", "x");
	expect_refused(&b, -EBADMSG, 0, "pax");
	/* a pax path holding a NUL */
	memcpy(pax, "16 path=a\0b.jpg\n", 16);
	header(&b, "PaxHeader", 'x', 16, NULL);
	put(&b, pax, 16);
	pad(&b);
	member(&b, "a.jpg", "x");
	expect_refused(&b, -EBADMSG, 0, "NUL");
	/* an extended header with nothing after it */
	header(&b, "././@LongLink", 'L', 6, NULL);
	put(&b, "x.jpg", 6);
	pad(&b);
	expect_refused(&b, -EBADMSG, 0, "no member");
	/* more members than allowed */
	for (int i = 0; i < 1001; i++)
		member(&b, "m.jpg", "");
	expect_refused(&b, -EFBIG, 1000 * TAR_BLOCK, "too many");
}

/* ---- names and patterns ---- */

static void expect_key(const char *name, const char *key, const char *ext)
{
	size_t kl = 0;
	const char *e = NULL;

	if (!key) {
		assert_false(shards_key_split(name, &kl, &e));
		return;
	}
	assert_true(shards_key_split(name, &kl, &e));
	assert_int_equal(kl, strlen(key));
	assert_memory_equal(name, key, kl);
	assert_string_equal(e, ext);
}

/* Cases checked against webdataset.tariterators.base_plus_ext. */
static void test_key_split(void **state)
{
	(void)state;
	expect_key("a/b.jpg", "a/b", "jpg");
	expect_key("b.seg.png", "b", "seg.png");
	expect_key("a.b/c.d.e", "a.b/c", "d.e");
	expect_key("noext", NULL, NULL);
	expect_key("a.b/noext", NULL, NULL);
	expect_key(".jpg", NULL, NULL);
	expect_key("a/.hidden.jpg", "a/", "hidden.jpg");
	expect_key("x.y/.jpg", NULL, NULL);
	expect_key("x.y/z/.jpg", "x.y/z/", "jpg");
	expect_key("a/b/", NULL, NULL);
	expect_key("k.", "k", "");
}

static void expect_expand(const char *pat, int n, const char *first, const char *last)
{
	struct strvec v = {0};

	assert_int_equal(shards_expand(pat, 100000, &v), 0);
	assert_int_equal(v.n, n);
	assert_string_equal(v.v[0], first);
	assert_string_equal(v.v[v.n - 1], last);
	strvec_free(&v);
}

static void test_brace_expand(void **state)
{
	struct strvec v = {0};

	(void)state;
	expect_expand("train-{000000..000146}.tar", 147, "train-000000.tar", "train-000146.tar");
	expect_expand("s-{0..10}.tar", 11, "s-0.tar", "s-10.tar");
	expect_expand("s-{10..8}.tar", 3, "s-10.tar", "s-8.tar");
	expect_expand("s-{0..10..5}.tar", 3, "s-0.tar", "s-10.tar");
	expect_expand("s-{a,b,c}.tar", 3, "s-a.tar", "s-c.tar");
	expect_expand("{x,y}-{00..02}.tar", 6, "x-00.tar", "y-02.tar");
	expect_expand("{a,b{1..2}}.tar", 3, "a.tar", "b2.tar");
	expect_expand("plain.tar", 1, "plain.tar", "plain.tar");
	expect_expand("lit{x}-{1..2}.tar", 2, "lit{x}-1.tar", "lit{x}-2.tar");
	expect_expand("open{1..2", 1, "open{1..2", "open{1..2");
	assert_int_equal(shards_expand("s-{0..999999999}.tar", 1000, &v), -E2BIG);
	strvec_free(&v);
	assert_int_equal(shards_expand("{a,b}{c,d}{e,f}", 7, &v), -E2BIG);
	strvec_free(&v);
}

/* ---- shard data sets ---- */

#define SCRATCH_NAME "shards"
#include "scratch_dir.h"

static void write_file(const char *rel, const void *data, size_t len)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	fclose(f);
}

static void write_shards(void)
{
	struct buf b = {0};
	char path[300];

	member(&b, "k0.jpg", "IMG0");
	member(&b, "k0.cls", "2\n");
	member(&b, "__meta__/x.txt", "skip");
	member(&b, "k1.JPEG", "IMG1"); /* extension lower-cased: jpeg */
	member(&b, "k1.json", "{\"other\": {\"label\": 9}, \"label\": 1}");
	member(&b, "only.cls", "5"); /* no image: skipped */
	end(&b);
	write_file("d-000.tar", b.p, b.n);
	free(b.p);
	memset(&b, 0, sizeof(b));
	member(&b, "k2.png", "IMG2");
	member(&b, "k2.jpg", "IMG2J"); /* jpg ranks before png */
	member(&b, "k2.txt", " 0 ");
	end(&b);
	write_file("d-001.tar", b.p, b.n);
	free(b.p);
	snprintf(path, sizeof(path), "%s/idx", root);
	mkdir(path, 0700);
}

static void test_shard_dataset(void **state)
{
	struct dataset *ds = NULL;
	char pattern[300], err[512] = "", idx[300];
	uint8_t *buf = NULL;
	size_t cap = 0;
	uint64_t size;
	int64_t stamp;

	(void)state;
	write_shards();
	snprintf(idx, sizeof(idx), "%s/idx", root);
	shards_set_index_dir(idx);
	snprintf(pattern, sizeof(pattern), "%s/d-{000..001}.tar", root);
	assert_true(shards_spec(pattern));
	/* The shards' own sample table, which dataset makes its data set of. */
	{
		struct shard_table t = {0};

		if (shards_open(pattern, false, 0, 1000, NULL, NULL, &t, err, sizeof(err)) != 0)
			fail_msg("%s", err);
		assert_int_equal(t.count, 3);
		assert_int_equal(t.num_classes, 3);
		assert_false(t.detect);
		assert_null(t.box_off);
		assert_int_equal(t.labels[0], 2);
		assert_int_equal(t.labels[2], 0);
		assert_string_equal(t.names + t.name_off[1], "d-000.tar:k1.JPEG");
		assert_string_equal(t.root, root);
		assert_int_equal(t.set->n, 2);
		assert_int_equal(t.set->indexed, 2);
		assert_int_equal(t.set->sample_shard[2], 1);
		shard_table_free(&t);
		assert_null(t.set);
		shard_table_free(NULL);
		/* The indexes it built are kept: build them again for what follows. */
		snprintf(idx, sizeof(idx), "rm -f %s/idx/*", root);
		assert_int_equal(system(idx), 0);
		snprintf(idx, sizeof(idx), "%s/idx", root);
	}
	if (dataset_open(pattern, 1000, &ds, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(ds->count, 3);
	assert_int_equal(ds->num_classes, 3);
	assert_int_equal(ds->labels[0], 2);
	assert_int_equal(ds->labels[1], 1);
	assert_int_equal(ds->labels[2], 0);
	assert_string_equal(dataset_name(ds, 0), "d-000.tar:k0.jpg");
	assert_string_equal(dataset_name(ds, 2), "d-001.tar:k2.jpg");
	assert_int_equal(ds->shards->n, 2);
	assert_int_equal(ds->shards->indexed, 2);
	assert_int_equal(ds->shards->skipped, 1);
	assert_int_equal(ds->shards->starts[1], 2);
	assert_int_equal(dataset_read(ds, 1, &buf, &cap, 100), 4);
	assert_memory_equal(buf, "IMG1", 4);
	assert_int_equal(dataset_read(ds, 2, &buf, &cap, 100), 5);
	assert_memory_equal(buf, "IMG2J", 5);
	assert_int_equal(dataset_read(ds, 2, &buf, &cap, 4), -EFBIG);
	assert_int_equal(dataset_stat(ds, 0, &size, &stamp), 0);
	assert_int_equal(size, 4);
	dataset_unref(ds);

	/* Again: both indexes come from the index directory. */
	assert_int_equal(dataset_open(pattern, 1000, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->shards->indexed, 0);
	assert_int_equal(ds->count, 3);

	/* A shard rewritten under an open data set: its reads say so. */
	{
		struct buf b = {0};
		char p[300];
		struct timespec ts[2] = {{0, 0}, {12345, 0}};

		member(&b, "k9.jpg", "OTHER");
		member(&b, "k9.cls", "0");
		end(&b);
		write_file("d-001.tar", b.p, b.n);
		free(b.p);
		snprintf(p, sizeof(p), "%s/d-001.tar", root);
		utimensat(AT_FDCWD, p, ts, 0);
	}
	assert_int_equal(dataset_read(ds, 2, &buf, &cap, 100), -ESTALE);
	assert_int_equal(dataset_stat(ds, 2, &size, &stamp), -ESTALE);
	dataset_unref(ds);
	/* ... and a new open indexes it again. */
	assert_int_equal(dataset_open(pattern, 1000, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->shards->indexed, 1);
	assert_int_equal(ds->count, 3);
	assert_string_equal(dataset_name(ds, 2), "d-001.tar:k9.jpg");
	dataset_unref(ds);

	/* Braces in a directory name too. */
	{
		char cmd[2048];

		snprintf(cmd, sizeof(cmd), "mkdir %s/p0 %s/p1 && cp %s/d-000.tar %s/p0/ && cp %s/d-000.tar %s/p1/",
			 root, root, root, root, root, root);
		assert_int_equal(system(cmd), 0);
		snprintf(pattern, sizeof(pattern), "%s/p{0,1}/d-000.tar", root);
		assert_int_equal(dataset_open(pattern, 1000, &ds, err, sizeof(err)), 0);
		assert_int_equal(ds->count, 4);
		assert_string_equal(dataset_name(ds, 2), "p1/d-000.tar:k0.jpg");
		dataset_unref(ds);
	}
	/* A directory of shards, and a list file naming them. */
	assert_int_equal(dataset_open(root, 1000, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->count, 3);
	dataset_unref(ds);
	write_file("shards.txt", "# shards\nd-000.tar\n\nd-001.tar\n", 29);
	snprintf(pattern, sizeof(pattern), "%s/shards.txt", root);
	assert_true(shards_spec(pattern));
	assert_int_equal(dataset_open(pattern, 1000, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->count, 3);
	dataset_unref(ds);
	free(buf);
	shards_set_index_dir(NULL);
}

static void test_shard_errors(void **state)
{
	struct dataset *ds = NULL;
	struct buf b = {0};
	char path[300], err[512] = "";

	(void)state;
	/* A sample without a label refuses the data set, naming it. */
	member(&b, "a.jpg", "IMG");
	end(&b);
	write_file("nolabel.tar", b.p, b.n);
	free(b.p);
	snprintf(path, sizeof(path), "%s/nolabel.tar", root);
	assert_int_equal(dataset_open(path, 1000, &ds, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'a' has no label"));
	/* A truncated shard: the shard and the offset. */
	memset(&b, 0, sizeof(b));
	member(&b, "a.jpg", "IMG");
	member(&b, "a.cls", "1");
	write_file("cut.tar", b.p, b.n - 600);
	free(b.p);
	snprintf(path, sizeof(path), "%s/cut.tar", root);
	assert_int_equal(dataset_open(path, 1000, &ds, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "cut.tar: offset 1024:"));
	/* A second image of one extension in a sample, as WebDataset refuses. */
	memset(&b, 0, sizeof(b));
	member(&b, "a.jpg", "IMG");
	member(&b, "a.jpg", "IMG");
	end(&b);
	write_file("dup.tar", b.p, b.n);
	free(b.p);
	snprintf(path, sizeof(path), "%s/dup.tar", root);
	assert_int_equal(dataset_open(path, 1000, &ds, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "second .jpg"));
	/* ... also when a preferred image came between the two. */
	memset(&b, 0, sizeof(b));
	member(&b, "a.png", "IMG");
	member(&b, "a.jpg", "IMG");
	member(&b, "a.png", "IMG");
	member(&b, "a.cls", "1");
	end(&b);
	write_file("dup2.tar", b.p, b.n);
	free(b.p);
	snprintf(path, sizeof(path), "%s/dup2.tar", root);
	assert_int_equal(dataset_open(path, 1000, &ds, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "second .png"));
	/* A missing shard of a pattern. */
	snprintf(path, sizeof(path), "%s/nolabel-{0..1}.tar", root);
	assert_int_equal(dataset_open(path, 1000, &ds, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "nolabel-0.tar"));
}

/* ---- shard order ---- */

static void test_shard_order_plan(void **state)
{
	static const uint64_t starts[] = {0, 7, 7, 20, 33, 50}; /* one empty shard */
	struct plan_spec s = {.samples = 50,
			      .seed = 5,
			      .world_size = 3,
			      .batch_size = 4,
			      .shuffle = true,
			      .shard_starts = starts,
			      .shards = 5,
			      .shuffle_buffer = 6};

	(void)state;
	for (int drop = 0; drop < 2; drop++) {
		uint8_t seen[50] = {0};
		uint64_t total = 0;

		s.drop_last = drop;
		for (uint32_t r = 0; r < 3; r++) {
			uint64_t *a, *b, n;

			s.rank = r;
			assert_int_equal(plan_validate(&s), 0);
			n = plan_samples_per_epoch(&s);
			assert_int_equal(plan_epoch_order(&s, 1, &a), 0);
			assert_int_equal(plan_epoch_order(&s, 1, &b), 0);
			assert_memory_equal(a, b, n * sizeof(*a)); /* deterministic */
			for (uint64_t k = 0; k < n; k++) {
				assert_true(a[k] < 50);
				seen[a[k]]++;
			}
			total += n;
			free(a);
			free(b);
		}
		/* Exactly once (drop_last drops 50 mod 3; padding repeats 1). */
		for (int i = 0, once = 0, twice = 0; i < 50; i++) {
			once += seen[i] == 1;
			twice += seen[i] == 2;
			assert_true(seen[i] <= 2);
			if (i == 49)
				assert_int_equal(once + 2 * twice, (int)total);
		}
		assert_int_equal(total, drop ? 48 : 51);
	}
	/* No shuffle: ranks take contiguous runs of the shards in order. */
	{
		uint64_t *a;

		s.shuffle = false;
		s.drop_last = false;
		s.rank = 1;
		assert_int_equal(plan_epoch_order(&s, 0, &a), 0);
		for (uint64_t k = 0; k < 17; k++)
			assert_int_equal(a[k], 17 + k);
		free(a);
	}
	/* The buffer only moves a sample earlier by less than its size: the
	 * same run as without a buffer, each sample at most K-1 places early. */
	s.shuffle = true;
	for (uint32_t r = 0; r < 3; r++) {
		uint64_t *plain, *buffered, n;

		s.rank = r;
		n = plan_samples_per_epoch(&s);
		s.shuffle_buffer = 1;
		assert_int_equal(plan_epoch_order(&s, 4, &plain), 0);
		s.shuffle_buffer = 6;
		assert_int_equal(plan_epoch_order(&s, 4, &buffered), 0);
		assert_memory_not_equal(plain, buffered, n * sizeof(*plain));
		for (uint64_t k = 0; k < n; k++) {
			uint64_t j = 0;

			while (j < n && plain[j] != buffered[k])
				j++;
			assert_true(j < n);
			assert_true(k + 5 >= j);
		}
		free(plain);
		free(buffered);
	}
	/* Bounds: the starts must end at the sample count. */
	s.samples = 49;
	assert_int_equal(plan_validate(&s), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tar_formats),
		cmocka_unit_test(test_tar_base256_and_no_end),
		cmocka_unit_test(test_tar_hostile),
		cmocka_unit_test(test_key_split),
		cmocka_unit_test(test_brace_expand),
		cmocka_unit_test_setup_teardown(test_shard_dataset, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shard_errors, setup, teardown),
		cmocka_unit_test(test_shard_order_plan),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
