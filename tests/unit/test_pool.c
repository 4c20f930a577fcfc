/* SPDX-License-Identifier: MIT */
/*
 * The worker pool under load, on a real libuv loop: many jobs from several
 * "sessions" at once, decode and copy jobs, cancellations, a shared cache,
 * completions racing each other, and the pool resized up and down while
 * work is queued. Written for ThreadSanitizer (make check-tsan) as much as
 * for correctness: every byte a worker writes is checked on the loop.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <jpeglib.h>

#include "cache.h"
#include "dataset.h"
#include "workers.h"

#define SAMPLES 12
#define BATCH 5
#define SIDE 24
#define SESSIONS 4
#define JOBS_PER_SESSION 400

#define SCRATCH_NAME "pool"
#include "scratch_dir.h"

static void write_jpeg(const char *path, unsigned w, unsigned h, int seed)
{
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr e;
	uint8_t row[3 * 128];
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	c.err = jpeg_std_error(&e);
	jpeg_create_compress(&c);
	jpeg_stdio_dest(&c, f);
	c.image_width = w;
	c.image_height = h;
	c.input_components = 3;
	c.in_color_space = JCS_RGB;
	jpeg_set_defaults(&c);
	if (seed % 3 == 0)
		jpeg_simple_progression(&c);
	jpeg_start_compress(&c, TRUE);
	while (c.next_scanline < h) {
		JSAMPROW r = row;

		for (unsigned x = 0; x < w * 3; x++)
			row[x] = (uint8_t)(x * 3 + c.next_scanline * 7 + (unsigned)seed * 29);
		jpeg_write_scanlines(&c, &r, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	fclose(f);
}

/* Two slots a session, each laid out as the daemon's: images, labels,
 * indices (copy jobs rely on the same offsets in source and target). */
struct session {
	struct batch_job jobs[2];
	uint64_t orders[2][BATCH];
	uint8_t *slots[2];
	uint8_t *reference; /* a filled slot of a decode job, for copy jobs */
	unsigned submitted, done, cancelled;
};

struct ctx {
	uv_loop_t *loop;
	struct pool *pool;
	struct dataset *ds;
	struct session s[SESSIONS];
	unsigned finished, resizes;
	size_t image_bytes, labels_off, indices_off, slot_bytes;
	uint8_t expect[SAMPLES][SIDE * SIDE * 3]; /* center-crop output of each sample */
	bool have_expect[SAMPLES];
};

static struct transform_spec spec = {.kind = TRANSFORM_CENTER_CROP, .image_size = SIDE, .dtype = DTYPE_UINT8};

static void submit(struct ctx *x, unsigned si, unsigned slot)
{
	struct session *s = &x->s[si];
	struct batch_job *job = &s->jobs[slot];
	unsigned n = s->submitted++;

	memset(job, 0, sizeof(*job));
	job->ds = x->ds;
	job->spec = spec;
	job->seed = si;
	job->epoch = n;
	job->batch_index = n;
	job->count = BATCH;
	job->slot = slot;
	for (unsigned i = 0; i < BATCH; i++)
		s->orders[slot][i] = (n * BATCH + i * 7 + si) % SAMPLES;
	job->order = s->orders[slot];
	job->images = s->slots[slot];
	job->labels = (int64_t *)(s->slots[slot] + x->labels_off);
	job->indices = (int64_t *)(s->slots[slot] + x->indices_off);
	job->owner = s;
	/* Every fourth job copies session 0's reference batch instead. */
	if (n % 4 == 3 && x->s[0].reference) {
		job->copy_from = x->s[0].reference;
		job->source_owner = &x->s[0];
	}
	atomic_store(&job->cancelled, false);
	assert_int_equal(pool_submit(x->pool, job), 0);
	/* And every seventh is cancelled at once: it must still come back. */
	if (n % 7 == 5)
		atomic_store_explicit(&job->cancelled, true, memory_order_relaxed);
}

static void check_job(struct ctx *x, struct session *s, struct batch_job *job)
{
	if (atomic_load(&job->cancelled)) {
		s->cancelled++;
		return;
	}
	for (unsigned i = 0; i < job->count; i++) {
		const uint8_t *img = job->images + i * x->image_bytes;
		int64_t idx;

		if (job->copy_from) {
			assert_memory_equal(img, job->copy_from + i * x->image_bytes, x->image_bytes);
			assert_memory_equal(&job->labels[i], job->copy_from + x->labels_off + i * 8, 8);
			assert_memory_equal(&job->indices[i], job->copy_from + x->indices_off + i * 8, 8);
			continue;
		}
		idx = job->indices[i];
		assert_true(idx >= 0 && idx < SAMPLES);
		assert_int_equal(job->labels[i], x->ds->labels[idx]);
		/* Center crops draw nothing: a sample's pixels are always the same. */
		if (!x->have_expect[idx]) {
			memcpy(x->expect[idx], img, x->image_bytes);
			x->have_expect[idx] = true;
		} else {
			assert_memory_equal(x->expect[idx], img, x->image_bytes);
		}
	}
}

static void on_done(struct batch_job *job, void *userdata)
{
	struct ctx *x = userdata;
	struct session *s = job->owner;
	unsigned si = (unsigned)(s - x->s);

	check_job(x, s, job);
	if (si == 0 && !s->reference && !job->copy_from && !atomic_load(&job->cancelled)) {
		s->reference = malloc(x->slot_bytes);
		assert_non_null(s->reference);
		memcpy(s->reference, job->images, x->slot_bytes);
	}
	s->done++;
	/* Resize while work is queued: grow, shrink, grow. */
	if ((s->done + si) % 50 == 0) {
		uint32_t want = 1 + (x->resizes++ % 4);

		assert_int_equal(pool_resize(x->pool, want), 0);
	}
	if (s->submitted < JOBS_PER_SESSION)
		submit(x, si, job->slot);
	else if (s->done == JOBS_PER_SESSION)
		x->finished++;
}

static void test_pool_stress(void **state)
{
	struct pool_settings ps = {.workers = 3,
				   .queue_capacity = 256,
				   .replace_attempts = 4,
				   .max_file_bytes = 1 << 20};
	struct ctx *x = calloc(1, sizeof(*x));
	char path[512], err[256];
	struct cache *cache;
	uv_loop_t loop;

	(void)state;
	assert_non_null(x);
	assert_int_equal(uv_loop_init(&loop), 0);
	for (int c = 0; c < 3; c++) {
		snprintf(path, sizeof(path), "%s/class%d", root, c);
		assert_int_equal(mkdir(path, 0755), 0);
		for (int i = 0; i < SAMPLES / 3; i++) {
			snprintf(path, sizeof(path), "%s/class%d/%02d.jpg", root, c, i);
			write_jpeg(path, 40 + (unsigned)(i * 9), 32 + (unsigned)(c * 11), c * 10 + i);
		}
	}
	assert_int_equal(dataset_open(root, 1000, &x->ds, err, sizeof(err)), 0);
	assert_int_equal(x->ds->count, SAMPLES);
	assert_int_equal(cache_new(8 << 10, CACHE_MINIO, &cache), 0); /* smaller than the files: admits and rejects */
	ps.cache = cache;
	x->loop = &loop;
	x->image_bytes = transform_output_bytes(&spec);
	x->labels_off = (BATCH * x->image_bytes + 63) / 64 * 64;
	x->indices_off = x->labels_off + BATCH * sizeof(int64_t);
	x->slot_bytes = x->indices_off + BATCH * sizeof(int64_t);
	assert_int_equal(pool_new(&loop, &ps, on_done, x, &x->pool), 0);
	for (unsigned si = 0; si < SESSIONS; si++) {
		for (unsigned slot = 0; slot < 2; slot++) {
			x->s[si].slots[slot] = aligned_alloc(64, (x->slot_bytes + 63) / 64 * 64);
			assert_non_null(x->s[si].slots[slot]);
		}
	}
	for (unsigned si = 0; si < SESSIONS; si++)
		for (unsigned slot = 0; slot < 2; slot++)
			submit(x, si, slot);
	while (x->finished < SESSIONS)
		uv_run(&loop, UV_RUN_ONCE);
	for (unsigned si = 0; si < SESSIONS; si++) {
		assert_int_equal(x->s[si].done, JOBS_PER_SESSION);
		assert_true(x->s[si].cancelled > 0);
	}
	assert_true(pool_samples_decoded(x->pool) > 0);
	assert_true(pool_samples_copied(x->pool) > 0);
	assert_int_equal(pool_decode_errors(x->pool), 0);
	assert_true(x->resizes > 4);
	{
		struct cache_tier_stats cs;

		cache_stats(cache, CACHE_ENCODED, &cs);
		assert_true(cs.hits > 0 && cs.rejected > 0); /* some files fit, some not */
	}
	pool_free(x->pool);
	assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
	assert_int_equal(uv_loop_close(&loop), 0);
	for (unsigned si = 0; si < SESSIONS; si++) {
		free(x->s[si].slots[0]);
		free(x->s[si].slots[1]);
		free(x->s[si].reference);
	}
	cache_free(cache);
	dataset_unref(x->ds);
	free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pool_stress, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
