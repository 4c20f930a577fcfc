/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#include "access.h"
#include "albu.h"
#include "cache.h"
#include "clock.h"
#include "dataset.h"
#include "grow.h"
#include "instgeom.h"
#include "instmask.h"
#include "log.h"
#include "workers.h"

#define CACHELINE 64
/* Threads alive at once, counting those told to exit that have not yet
 * taken their exit task; the queue has room for one exit task each. */
#define POOL_MAX_THREADS (2 * POOL_MAX_WORKERS)

struct pool_task {
	struct batch_job *job; /* NULL: the thread exits */
	uint32_t pos;
};

struct queue_cell {
	_Atomic size_t seq;
	struct pool_task task;
};

/* A worker's statistics, summed over workers by pool_counter(). */
enum counter {
	COUNTER_BUSY_NS,
	COUNTER_DECODE_ERRORS,
	COUNTER_DECODE_ERROR_FILES,
	COUNTER_SAMPLES_DECODED,
	COUNTER_SAMPLES_COPIED,
	COUNTER_BOXES_DROPPED,
	COUNTER_BATCH_OP_NS, /* thread CPU time in batch ops */
	COUNTER_N,
};

struct worker {
	struct pool *pool;
	pthread_t thread;
	struct worker *exited_next; /* on the pool's exited stack */
	struct pipeline *pipeline;
	struct tpipe_ctx *tpipe; /* the transform pipelines' scratch */
	uint8_t *buf;
	size_t cap;
	uint8_t *pixels; /* a decoded image from the cache */
	size_t pixels_cap;
	struct detect *detect;
	struct albu *albu; /* Ultralytics' Albumentations' scratch, made on first use */
	uint8_t *fit;      /* a detection sample at its long side (detect_load) */
	size_t fit_cap;
	/* yolo_task segment and pose: each row's object, the polygons, masks */
	struct instmask *instmask;
	uint32_t *rows_src, *inst_off, *inst_order;
	size_t rows_src_cap, inst_off_cap, inst_order_cap;
	float *inst_pts, *rows_tmp;
	size_t inst_pts_cap, rows_tmp_cap;
	/* Read by the loop for stats, on their own cache line. */
	_Alignas(CACHELINE) _Atomic uint64_t counters[COUNTER_N];
};

struct pool {
	struct pool_settings settings;
	struct queue_cell *cells;
	size_t mask;
	_Alignas(CACHELINE) _Atomic size_t enqueue_pos;
	_Alignas(CACHELINE) _Atomic size_t dequeue_pos;
	_Alignas(CACHELINE) _Atomic uint64_t tasks_done;
	_Alignas(CACHELINE) _Atomic(struct batch_job *) done_head;
	uint64_t tasks_submitted; /* loop thread only */
	sem_t ready;
	uv_async_t async;
	bool async_open;
	pool_done_fn done;
	void *userdata;
	uint32_t nworkers;     /* the target: threads minus exit tasks queued */
	uint32_t nthreads;     /* started and not yet joined: workers[0..nthreads) */
	uint32_t exits_queued; /* exit tasks not yet seen taken */
	uint32_t workers_cap;
	struct worker **workers;
	/* Exited threads, for the loop to join (pool_on_async). */
	_Alignas(CACHELINE) _Atomic(struct worker *) exited_head;
	/* Counters of joined threads, so sums survive shrinking. */
	uint64_t retired[COUNTER_N];
};

/* Single producer (the loop); capacity is checked before, so never full. */
static void queue_push(struct pool *p, struct pool_task task)
{
	size_t pos = atomic_load_explicit(&p->enqueue_pos, memory_order_relaxed);
	struct queue_cell *cell = &p->cells[pos & p->mask];

	cell->task = task;
	atomic_store_explicit(&p->enqueue_pos, pos + 1, memory_order_relaxed);
	atomic_store_explicit(&cell->seq, pos + 1, memory_order_release);
	sem_post(&p->ready);
}

/* Many consumers. Called after sem_wait, so a published cell exists. */
static struct pool_task queue_pop(struct pool *p)
{
	size_t pos = atomic_load_explicit(&p->dequeue_pos, memory_order_relaxed);

	for (;;) {
		struct queue_cell *cell = &p->cells[pos & p->mask];
		size_t seq = atomic_load_explicit(&cell->seq, memory_order_acquire);
		intptr_t dif = (intptr_t)seq - (intptr_t)(pos + 1);

		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&p->dequeue_pos, &pos, pos + 1, memory_order_relaxed,
								  memory_order_relaxed)) {
				struct pool_task t = cell->task;
				atomic_store_explicit(&cell->seq, pos + p->mask + 1, memory_order_release);
				return t;
			}
		} else {
			pos = atomic_load_explicit(&p->dequeue_pos, memory_order_relaxed);
		}
	}
}

static bool sample_key(const struct pool *p, const struct dataset *ds, uint64_t index, struct cache_key *key)
{
	return p->settings.cache && dataset_cache_key(ds, index, key) == 0;
}

/* Sample `index`'s file bytes into the worker's buffer, from disk or, for
 * a remote data set, as the fetch stage brought them (taken over without a
 * copy; the worker's old buffer goes back in their place). A remote
 * sample the stage did not fetch (a stand-in for a failed one) is fetched
 * now, waiting on the I/O thread: the rare case. */
static int64_t sample_read(struct worker *w, const struct batch_job *job, uint32_t pos, uint64_t index)
{
	struct sample_fetch *sf = job->fetches && pos < job->count ? &job->fetches[pos] : NULL;

	/* Position pos is made by one worker only, so its entry is ours. */
	if (sf && sf->wanted && job->order[pos] == index) {
		if (sf->req.err < 0)
			return sf->req.err; /* its buffer and URL are freed with the job */
		free(w->buf);
		w->buf = sf->req.data;
		w->cap = sf->req.cap;
		sf->req.data = NULL;
		free(sf->url);
		sf->url = NULL;
		sf->wanted = false;
		return (int64_t)sf->req.len;
	}
	return dataset_read(job->ds, index, &w->buf, &w->cap, w->pool->settings.max_file_bytes);
}

/* Sample `index`'s file bytes into the worker's buffer: from the node
 * cache when it has them, else read (and offered to the cache). */
static int64_t sample_bytes(struct worker *w, const struct batch_job *job, uint32_t pos, uint64_t index)
{
	struct cache *cache = w->pool->settings.cache;
	const struct dataset *ds = job->ds;
	struct cache_key key;
	bool keyed = sample_key(w->pool, ds, index, &key);
	int64_t len;

	if (keyed) {
		len = cache_get(cache, CACHE_ENCODED, &key, &w->buf, &w->cap, NULL);
		if (len >= 0)
			return len;
	}
	len = sample_read(w, job, pos, index);
	/* Only what was read whole and matches the key it was statted with. */
	if (len >= 0 && keyed && dataset_key_matches(ds, &key, (uint64_t)len))
		cache_put(cache, CACHE_ENCODED, &key, w->buf, (size_t)len, NULL);
	return len;
}

/* The decoded tier: sample `index` as a decoded image, from the cache or
 * decoded now (and offered to the cache). */
static int sample_image(struct worker *w, const struct batch_job *job, uint32_t pos, uint64_t index,
			struct pipeline_image *img, bool *read_failed)
{
	const struct dataset *ds = job->ds;
	struct pool *p = w->pool;
	struct cache_image ci;
	struct cache_key key;
	bool keyed = sample_key(p, ds, index, &key);
	int64_t len;
	int r;

	if (keyed && cache_get(p->settings.cache, CACHE_DECODED, &key, &w->pixels, &w->pixels_cap, &ci) >= 0) {
		*img = (struct pipeline_image){
			.pixels = w->pixels,
			.stride = (size_t)ci.width * 4,
			.width = ci.width,
			.height = ci.height,
			.full_width = ci.full_width,
			.full_height = ci.full_height,
			.denom = ci.denom,
			.orientation = ci.orientation,
		};
		return 0;
	}
	len = sample_read(w, job, pos, index);
	if (len < 0) {
		*read_failed = true;
		return (int)len;
	}
	r = pipeline_decode_image(w->pipeline, w->buf, (size_t)len, p->settings.decoded_side, img);
	if (r < 0)
		return r;
	if (keyed && dataset_key_matches(ds, &key, (uint64_t)len)) {
		ci = (struct cache_image){.width = img->width,
					  .height = img->height,
					  .full_width = img->full_width,
					  .full_height = img->full_height,
					  .denom = img->denom,
					  .orientation = img->orientation};
		cache_put(p->settings.cache, CACHE_DECODED, &key, img->pixels, img->stride * img->height, &ci);
	}
	return 0;
}

/* A sample that failed (r < 0): mark its file bad and log it, once; r. */
static int report_failure(struct worker *w, struct dataset *ds, uint64_t index, int r, bool read_failed)
{
	/* Marking it bad means each bad file is logged once, and later epochs
	 * skip it. A shortage of the daemon's own (descriptors, memory) says
	 * nothing about the file: it is replaced this time only. */
	bool transient = r == -EMFILE || r == -ENFILE || r == -ENOMEM || r == -EINTR || r == -EAGAIN || r == -ENOBUFS ||
			 (ds->remote && fetch_error_transient(r));
	char where[PATH_MAX * 2];

	if (r >= 0 || (!transient && !dataset_mark_bad(ds, index)))
		return r; /* fine, or another worker found it bad at the same time, and said so */
	if (!transient)
		atomic_fetch_add_explicit(&w->counters[COUNTER_DECODE_ERROR_FILES], 1, memory_order_relaxed);
	if (!ds->remote || dataset_url(ds, index, where, sizeof(where)) < 0)
		snprintf(where, sizeof(where), "%s/%s", ds->root, dataset_name(ds, index));
	log_warning("sample %llu (%s): cannot %s: %s; replaced%s", (unsigned long long)index, where,
		    read_failed ? "read" : "decode",
		    read_failed ? (ds->remote ? fetch_strerror(r) : strerror(-r)) : pipeline_error(w->pipeline),
		    transient ? (ds->remote ? " this time (the store's failure, not the object's)"
					    : " this time (the daemon's shortage, not the file's fault)")
			      : "");
	return r;
}

/* Sample `index` fitted as `req` says into dst, from the decoded tier or
 * the file; failures reported here. */
static int fit_load(struct worker *w, struct batch_job *job, uint64_t index, const struct fit_request *req,
		    uint8_t *dst, struct fit_result *res)
{
	struct dataset *ds = job->ds;
	bool read_failed = false;
	int64_t len;
	int r;

	/* A partner (mosaic, mixup) the client may not read is a failed one. */
	if (!access_readable(job->readable, index))
		return -EACCES;
	if (dataset_is_bad(ds, index))
		return -EBADMSG;
	/* cv2's arithmetic is exact from the full-size decode only, which
	 * the decoded tier does not keep: that mode reads the file. */
	if (w->pool->settings.decoded_side && req->resample != FIT_CV2) {
		struct pipeline_image img;

		r = sample_image(w, job, UINT32_MAX, index, &img, &read_failed);
		if (r == 0)
			r = pipeline_fit_image(w->pipeline, &img, req, dst, res);
	} else {
		len = sample_bytes(w, job, UINT32_MAX, index);
		read_failed = len < 0;
		r = len < 0 ? (int)len : pipeline_fit(w->pipeline, w->buf, (size_t)len, req, dst, res);
	}
	return report_failure(w, ds, index, r, read_failed);
}

/*
 * detect_run() works on batch positions: the sample is position `self_pos`
 * (made from data-set index `self_index`, which differs from the plan's when
 * the planned file was replaced), its partners are other positions of the
 * batch, as Ultralytics takes them from the images it loaded last. Each
 * position's image is made once, in the job's fit table, and shared.
 */
struct detect_loader {
	struct worker *w;
	struct batch_job *job;
	uint64_t self_pos, self_index;
	uint8_t *place; /* a letterbox's output: its own sample is fitted straight into it, padded */
};

/* Entry pos of the job's fit table, claimed (FIT_LOADING) by this worker: make it and publish it. */
static int fit_make(struct worker *w, struct batch_job *job, uint32_t pos, uint32_t side, struct fit_result *res)
{
	struct fit_entry *e = &job->fits->entries[pos];
	/* a rectangular batch's shape may be smaller than side x side */
	struct fit_request req = {side, job->out_w, job->out_h, job->resample, false};
	int r = fit_load(w, job, job->order[pos], &req, job->fits->pixels + pos * (size_t)side * side * 3, res);

	e->width = res->width;
	e->height = res->height;
	e->full_width = res->full_width;
	e->full_height = res->full_height;
	e->error = r;
	if (atomic_exchange_explicit(&e->state, r < 0 ? FIT_FAILED : FIT_READY, memory_order_release) == FIT_WAITED)
		syscall(SYS_futex, &e->state, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	return r;
}

/*
 * Entry e is being made by another worker. Rather than make a second copy
 * (a second decode: 1.6 loads a sample with 8 workers on one batch), make
 * the batch's other images that nobody has started (each is some sample's
 * own image, so none is wasted), then sleep until e is published. Makers
 * never wait, so this cannot deadlock. Returns FIT_READY or FIT_FAILED.
 */
static uint32_t fit_await(struct worker *w, struct batch_job *job, struct fit_entry *e, uint32_t side)
{
	uint32_t state;

	for (uint32_t j = 0; j < job->count; j++) {
		struct fit_result res;

		state = atomic_load_explicit(&e->state, memory_order_acquire);
		if (state == FIT_READY || state == FIT_FAILED)
			return state;
		if (atomic_load_explicit(&job->cancelled, memory_order_relaxed))
			break; /* nobody will want the rest */
		if (atomic_compare_exchange_strong_explicit(&job->fits->entries[j].state, &(uint32_t){FIT_EMPTY},
							    FIT_LOADING, memory_order_acquire, memory_order_relaxed))
			fit_make(w, job, j, side, &res);
	}
	for (;;) {
		state = FIT_LOADING;
		if (atomic_compare_exchange_strong_explicit(&e->state, &state, FIT_WAITED, memory_order_acquire,
							    memory_order_acquire) ||
		    state == FIT_WAITED)
			syscall(SYS_futex, &e->state, FUTEX_WAIT_PRIVATE, FIT_WAITED, NULL, NULL, 0);
		else
			return state;
	}
}

static int detect_load(void *arg, uint64_t pos, uint32_t side, struct detect_sample *out)
{
	struct detect_loader *l = arg;
	struct worker *w = l->w;
	struct batch_job *job = l->job;
	struct dataset *ds = job->ds;
	uint64_t index = pos == l->self_pos ? l->self_index : job->order[pos];
	/* a rectangular batch's shape may be smaller than side x side */
	struct fit_request req = {side, job->out_w, job->out_h, job->resample, false};
	struct fit_result res = {0};
	uint8_t *dst;
	int r;

	if (pos >= job->count)
		return -EINVAL;
	if (l->place && pos == l->self_pos) {
		req.in_box = true;
		r = fit_load(w, job, index, &req, l->place, &res);
		if (r < 0)
			return r;
		dst = l->place;
		goto done;
	}
	if (job->fits && index == job->order[pos]) {
		struct fit_entry *e = &job->fits->entries[pos];
		uint32_t state = FIT_EMPTY;

		if (atomic_compare_exchange_strong_explicit(&e->state, &state, FIT_LOADING, memory_order_acquire,
							    memory_order_acquire))
			state = fit_make(w, job, (uint32_t)pos, side, &res) < 0 ? FIT_FAILED : FIT_READY;
		else if (state == FIT_LOADING || state == FIT_WAITED)
			state = fit_await(w, job, e, side);
		if (state == FIT_FAILED)
			return e->error;
		res = (struct fit_result){e->width, e->height, e->full_width, e->full_height};
		dst = job->fits->pixels + pos * (size_t)side * side * 3;
		goto done;
	}
	r = grow((void **)&w->fit, &w->fit_cap, (size_t)side * side * 3, 1);
	if (r < 0)
		return r;
	dst = w->fit;
	r = fit_load(w, job, index, &req, dst, &res);
	if (r < 0)
		return r;
done:
	*out = (struct detect_sample){
		.pixels = dst,
		.width = res.width,
		.height = res.height,
		.boxes = ds->boxes + ds->box_off[index],
		.box_count = (uint32_t)(ds->box_off[index + 1] - ds->box_off[index]),
		.orig_width = res.full_width,
		.orig_height = res.full_height,
		.placed = req.in_box,
		/* the batch's fit table and the slot outlive the sample; the worker's own fit buffer does not */
		.stable = dst != w->fit,
		.seg_off = ds->seg_off ? ds->seg_off + ds->box_off[index] : NULL,
		.seg = ds->seg,
		.kpt = ds->kpt ? ds->kpt + ds->box_off[index] * ds->nkpt * 3 : NULL,
	};
	return 0;
}

/* detect_output.before_hsv: Ultralytics' default Albumentations, drawn
 * from the sample's own stream (its other draws stay those of albu 0). */
struct albu_hook {
	struct worker *w;
	const struct batch_job *job;
	uint64_t index;
};

static int albu_hook(void *ctx, uint8_t *image, uint32_t width, uint32_t height, bool flipud, bool fliplr)
{
	struct albu_hook *h = ctx;
	struct albu_draw d;
	struct rng rng;
	int r;

	rng_init(&rng, h->job->seed, h->job->epoch, h->index, RNG_ALBU);
	albu_draw(&rng, h->job->albu, &d);
	if (!d.blur && !d.median && !d.gray && !d.clahe)
		return 0;
	if (!h->w->albu && (r = albu_new(&h->w->albu)) < 0)
		return r;
	return albu_apply(h->w->albu, image, width, height, &d, flipud, fliplr);
}

/*
 * yolo_task obb, letterboxed: each row's xywhr as Ultralytics' Format makes
 * it (return_obb): the object's corners resampled to 100 points
 * (update_labels_info), letterboxed in float32, xyxyxyxy2xywhr (cv2's
 * minAreaRect, instgeom.h) in double, cast to float32 and normalised.
 */
static int finish_obb(struct worker *w, struct batch_job *job, uint32_t pos, uint64_t first, uint64_t count, uint32_t n,
		      const struct detect_letterbox *g, uint32_t rw, uint32_t rh)
{
	const struct dataset *ds = job->ds;
	uint32_t longest = 0, m;
	size_t need;

	for (uint64_t k = 0; ds->seg_off && k < count; k++) {
		uint64_t np = ds->seg_off[first + k + 1] - ds->seg_off[first + k];

		if (np > longest)
			longest = (uint32_t)(np < UINT32_MAX / 4 ? np : UINT32_MAX / 4);
	}
	m = instmask_resample_count(longest, INSTMASK_OBB_POINTS);
	need = (size_t)m * 2 + instgeom_scratch_floats(m);
	if (grow((void **)&w->inst_pts, &w->inst_pts_cap, need, sizeof(float)) < 0)
		return -ENOMEM;
	for (uint32_t k = 0; k < n; k++) {
		float *out = job->obb + ((size_t)pos * job->max_boxes + k) * 5;
		uint64_t o = first + w->rows_src[k];
		double xywhr[5];

		if (!ds->seg_off) { /* no corners: Ultralytics' empty segments give no box */
			memset(out, 0, 5 * sizeof(float));
			continue;
		}
		instmask_resample(ds->seg + ds->seg_off[o] * 2, (uint32_t)(ds->seg_off[o + 1] - ds->seg_off[o]), m,
				  w->inst_pts);
		instmask_letterbox(w->inst_pts, m, 2, rw, rh, g->r, g->left, g->top);
		if (instgeom_xywhr(w->inst_pts, m, w->inst_pts + (size_t)m * 2, xywhr) < 0)
			return -EINVAL;
		out[0] = (float)xywhr[0] / (float)job->out_w;
		out[1] = (float)xywhr[1] / (float)job->out_h;
		out[2] = (float)xywhr[2] / (float)job->out_w;
		out[3] = (float)xywhr[3] / (float)job->out_h;
		out[4] = (float)xywhr[4];
	}
	return 0;
}

/*
 * Format's overlap mask of the image at `pos` from its n polygons of m
 * points each (pixels, polygon k at pts + k * m * 2), and its rows put in
 * the mask's area order (polygons2masks_overlap's sorted_idx).
 */
static int pack_masks(struct worker *w, struct batch_job *job, uint32_t pos, const float *pts, uint32_t m, uint32_t n,
		      float *rows)
{
	uint16_t *mask = job->masks + (size_t)pos * job->mask_side * job->mask_side;
	int r;

	if (!w->instmask && (r = instmask_new(&w->instmask)) < 0)
		return r;
	if (grow((void **)&w->inst_off, &w->inst_off_cap, (size_t)n + 1, sizeof(uint32_t)) < 0 ||
	    grow((void **)&w->inst_order, &w->inst_order_cap, (size_t)n + 1, sizeof(uint32_t)) < 0 ||
	    grow((void **)&w->rows_tmp, &w->rows_tmp_cap, (size_t)n * DETECT_BOX_FLOATS + 1, sizeof(float)) < 0)
		return -ENOMEM;
	for (uint32_t k = 0; k <= n; k++)
		w->inst_off[k] = k * m;
	r = instmask_overlap(w->instmask, pts, w->inst_off, n, job->out_w, job->out_h, job->mask_ratio, mask,
			     w->inst_order);
	if (r < 0)
		return r;
	memcpy(w->rows_tmp, rows, (size_t)n * DETECT_BOX_FLOATS * sizeof(float));
	for (uint32_t k = 0; k < n; k++)
		memcpy(rows + (size_t)k * DETECT_BOX_FLOATS, w->rows_tmp + (size_t)w->inst_order[k] * DETECT_BOX_FLOATS,
		       DETECT_BOX_FLOATS * sizeof(float));
	return 0;
}

/*
 * yolo_task pose and segment, letterboxed: the keypoints of each row, and
 * the image's overlap mask with its rows put in the mask's area order, as
 * Ultralytics' LetterBox and Format(return_keypoint, return_mask) make them
 * (instmask.h). A segment data set without polygons (Ultralytics dropped
 * them all) leaves the image no rows, as Format's empty sort does.
 */
static int finish_instances(struct worker *w, struct batch_job *job, uint32_t pos, uint64_t index, float *rows,
			    uint32_t *nrows, const struct detect_meta *meta)
{
	const struct dataset *ds = job->ds;
	uint64_t first = ds->box_off[index], count = ds->box_off[index + 1] - first;
	uint32_t n = *nrows, rw = (uint32_t)meta->shape[3], rh = (uint32_t)meta->shape[2];
	struct detect_letterbox g;

	detect_letterbox_geometry(rw, rh, job->out_w, job->out_h, &g);
	if (job->keypoints) {
		uint32_t nk = job->kpt_points;

		for (uint32_t k = 0; k < n; k++) {
			float *dst = job->keypoints + ((size_t)pos * job->max_boxes + k) * nk * 3;

			memcpy(dst, ds->kpt + (first + w->rows_src[k]) * nk * 3, (size_t)nk * 3 * sizeof(float));
			instmask_letterbox(dst, nk, 3, rw, rh, g.r, g.left, g.top);
			for (uint32_t j = 0; j < nk; j++) { /* Format's normalize: float32 divisions */
				dst[j * 3] = dst[j * 3] / (float)job->out_w;
				dst[j * 3 + 1] = dst[j * 3 + 1] / (float)job->out_h;
			}
		}
	}
	if (job->obb)
		return finish_obb(w, job, pos, first, count, n, &g, rw, rh);
	if (!job->masks)
		return 0;
	{
		uint32_t longest = 0, m;

		if (!ds->seg_off)
			n = *nrows = 0;
		for (uint64_t k = 0; ds->seg_off && k < count; k++) {
			uint64_t np = ds->seg_off[first + k + 1] - ds->seg_off[first + k];

			if (np > longest)
				longest = (uint32_t)(np < UINT32_MAX / 4 ? np : UINT32_MAX / 4);
		}
		m = instmask_resample_count(longest, INSTMASK_SEGMENT_POINTS);
		/* a hostile label (a huge polygon among many) fails the sample, not the daemon */
		if ((uint64_t)n * m > INSTMASK_MAX_IMAGE_POINTS)
			return -EFBIG;
		if (grow((void **)&w->inst_pts, &w->inst_pts_cap, (size_t)n * m * 2 + 2, sizeof(float)) < 0)
			return -ENOMEM;
		for (uint32_t k = 0; k < n; k++) {
			uint64_t o = first + w->rows_src[k], s0 = ds->seg_off[o];
			float *pts = w->inst_pts + (size_t)k * m * 2;

			instmask_resample(ds->seg + s0 * 2, (uint32_t)(ds->seg_off[o + 1] - s0), m, pts);
			instmask_letterbox(pts, m, 2, rw, rh, g.r, g.left, g.top);
		}
		return pack_masks(w, job, pos, w->inst_pts, m, n, rows);
	}
}

/* A detection sample: pixels at dst, its rows at `rows`, their number out. */
static int produce_detect(struct worker *w, struct batch_job *job, uint32_t pos, uint64_t index, uint8_t *dst,
			  float *rows, uint32_t *nrows)
{
	struct detect_loader l = {.w = w,
				  .job = job,
				  .self_pos = pos,
				  .self_index = index,
				  .place = job->detect_transform == DETECT_LETTERBOX ? dst : NULL};
	uint64_t dropped = 0;
	struct detect_meta meta = {{0}, {0}};
	struct albu_hook hook = {.w = w, .job = job, .index = index};
	struct detect_output o = {.image = dst,
				  .out_w = job->out_w,
				  .out_h = job->out_h,
				  .boxes = rows,
				  .max_boxes = job->max_boxes,
				  .box_count = nrows,
				  .boxes_dropped = &dropped,
				  .meta = &meta,
				  .before_hsv =
					  job->albu > 0 && job->detect_transform == DETECT_TRAIN ? albu_hook : NULL,
				  .before_hsv_ctx = &hook};
	bool instances = job->masks || job->keypoints || job->obb;
	bool train_instances = instances && job->detect_transform == DETECT_TRAIN;
	/* update_labels_info's resampling: segments to 1000 points, OBB corners to 100 */
	struct detect_instances spec = {.seg_points = job->obb     ? INSTMASK_OBB_POINTS
						      : job->masks ? INSTMASK_SEGMENT_POINTS
								   : 0,
					.nkpt = job->keypoints ? job->kpt_points : 0,
					.flip_idx = job->flip_idx,
					.obb = job->obb != NULL};
	struct rng rng;
	int r;

	if (train_instances) {
		o.inst = &spec;
		o.kpt = job->keypoints ? job->keypoints + (size_t)pos * job->max_boxes * job->kpt_points * 3 : NULL;
		o.xywhr = job->obb ? job->obb + (size_t)pos * job->max_boxes * 5 : NULL;
		instances = false;
	}

	if (!w->detect) {
		r = detect_new(&w->detect);
		if (r < 0)
			return r;
	}
	if (instances) {
		r = grow((void **)&w->rows_src, &w->rows_src_cap, job->max_boxes, sizeof(*w->rows_src));
		if (r < 0)
			return r;
		o.rows_src = w->rows_src;
	}
	rng_init(&rng, job->seed, job->epoch, index, RNG_AUGMENT);
	r = detect_make(w->detect, job->detect_transform, &job->detect_params, job->spec.image_size, pos, job->count,
			&rng, detect_load, &l, &o);
	if (r == 0 && instances)
		r = finish_instances(w, job, pos, index, rows, nrows, &meta);
	if (r == 0 && train_instances && job->masks) {
		/* Format's masks from the sample's final polygons */
		const struct instgeom_set *f = detect_instances_result(w->detect);

		r = pack_masks(w, job, pos, f->seg, f->npts, f->npts ? *nrows : 0, rows);
		if (r == 0 && !f->npts)
			*nrows = 0;
	}
	if (r == 0) {
		memcpy(job->shapes + (size_t)pos * 4, meta.shape, sizeof(meta.shape));
		memcpy(job->ratio_pad + (size_t)pos * 4, meta.ratio_pad, sizeof(meta.ratio_pad));
	}
	if (r == 0 && dropped)
		atomic_fetch_add_explicit(&w->counters[COUNTER_BOXES_DROPPED], dropped, memory_order_relaxed);
	if (r == 0 && job->bgr > 0 && job->detect_transform == DETECT_TRAIN) {
		/* Format's bgr: the finished sample left in BGR order with
		 * probability bgr, from a stream of its own (the other draws
		 * stay those of bgr 0). */
		rng_init(&rng, job->seed, job->epoch, index, RNG_BGR);
		if (rng_uniform(&rng) < job->bgr)
			for (size_t i = 0, n = (size_t)job->out_w * job->out_h * 3; i < n; i += 3) {
				uint8_t t = dst[i];

				dst[i] = dst[i + 2];
				dst[i + 2] = t;
			}
	}
	return r;
}

/*
 * A sample through the client's transform pipeline. The decoded tier's
 * images are DCT-reduced: only a pipeline that starts by resampling (a
 * RandomResizedCrop) with DCT scaling on may start from one; any other
 * reads the file (crop-aware).
 */
static int produce_pipeline(struct worker *w, struct batch_job *job, uint32_t pos, uint64_t index, struct rng *rng,
			    uint8_t *dst)
{
	struct tpipe_info info;
	bool read_failed = false;
	int64_t len;
	int r;

	tpipe_info(job->tpipe, &info);
	if (w->pool->settings.decoded_side && job->spec.dct_scaling && info.first_crop_random) {
		struct pipeline_image img;

		r = sample_image(w, job, pos, index, &img, &read_failed);
		if (r == 0)
			r = tpipe_run(w->tpipe, w->pipeline, job->tpipe, NULL, 0, &img, &job->spec, rng, dst);
	} else {
		len = sample_bytes(w, job, pos, index);
		read_failed = len < 0;
		r = len < 0 ? (int)len
			    : tpipe_run(w->tpipe, w->pipeline, job->tpipe, w->buf, (size_t)len, NULL, &job->spec, rng,
					dst);
	}
	return report_failure(w, job->ds, index, r, read_failed);
}

/* Try one candidate sample; 0 when its pixels are in place. */
static int produce_one(struct worker *w, struct batch_job *job, uint32_t pos, uint64_t index, uint8_t *dst)
{
	struct dataset *ds = job->ds;
	bool read_failed = false;
	struct rng rng;
	int64_t len;
	int r;

	if (!access_readable(job->readable, index))
		return -EACCES;
	if (dataset_is_bad(ds, index))
		return -EBADMSG;
	/* A repeated sample's copies each draw from their own stream. */
	rng_init(&rng, job->seed, job->epoch, index + (job->copies ? job->copies[pos] * ds->count : 0), RNG_AUGMENT);
	if (job->tpipe)
		return produce_pipeline(w, job, pos, index, &rng, dst);
	/* The decoded tier holds images at a DCT reduction: a transform without
	 * DCT scaling (center_crop's PIL parity) decodes the file instead. */
	if (w->pool->settings.decoded_side && job->spec.dct_scaling) {
		struct pipeline_image img;

		r = sample_image(w, job, pos, index, &img, &read_failed);
		if (r == 0)
			r = pipeline_run_image(w->pipeline, &img, &job->spec, &rng, dst);
	} else {
		len = sample_bytes(w, job, pos, index);
		read_failed = len < 0;
		r = len < 0 ? (int)len : pipeline_run(w->pipeline, w->buf, (size_t)len, &job->spec, &rng, dst);
	}
	r = report_failure(w, ds, index, r, read_failed);
	return r;
}

/*
 * An unreadable sample is replaced by the next index in data-set order that
 * decodes (index+1, index+2, ... modulo N), so the stand-in depends only on
 * the files, never on timing. The indices array reports the stand-in.
 */
static void produce_sample(struct worker *w, struct batch_job *job, uint32_t pos)
{
	struct pool *p = w->pool;
	/* detection batches may be rectangular: their own shape */
	size_t image_bytes = job->detect ? (size_t)job->out_w * job->out_h * 3 : transform_output_bytes(&job->spec);
	uint8_t *dst = job->images + (size_t)pos * image_bytes;
	uint64_t index = job->order[pos], n = job->samples ? job->samples : job->ds->count, candidate = index;

	if (job->copy_from) {
		/* Same layout as ours: labels and indices at the same offsets. */
		size_t labels_off = (size_t)((uint8_t *)job->labels - job->images);
		size_t indices_off = (size_t)((uint8_t *)job->indices - job->images);

		memcpy(dst, job->copy_from + (size_t)pos * image_bytes, image_bytes);
		memcpy(&job->labels[pos], job->copy_from + labels_off + pos * sizeof(int64_t), sizeof(int64_t));
		memcpy(&job->indices[pos], job->copy_from + indices_off + pos * sizeof(int64_t), sizeof(int64_t));
		if (job->mix) {
			size_t soft_off = (size_t)((uint8_t *)job->soft - job->images);
			size_t recs_off = (size_t)((uint8_t *)job->mix_recs - job->images);
			size_t row = (size_t)job->mix_classes * sizeof(float);

			memcpy((uint8_t *)job->soft + pos * row, job->copy_from + soft_off + pos * row, row);
			memcpy(&job->mix_recs[pos], job->copy_from + recs_off + pos * sizeof(struct batchmix_rec),
			       sizeof(struct batchmix_rec));
		}
		atomic_fetch_add_explicit(&w->counters[COUNTER_SAMPLES_COPIED], 1, memory_order_relaxed);
		return;
	}
	atomic_fetch_add_explicit(&w->counters[COUNTER_SAMPLES_DECODED], 1, memory_order_relaxed);

	for (uint32_t attempt = 0; attempt < p->settings.replace_attempts; attempt++) {
		uint32_t nrows = 0;
		int r;

		if (attempt > 0)
			candidate = (candidate + 1) % n;
		/* A file the client may not read is passed over without an
		 * attempt: the stand-in is the next readable one (access.h). */
		if (job->readable)
			candidate = access_next_readable(job->readable, candidate);
		r = job->detect ? produce_detect(w, job, pos, candidate, dst,
						 job->boxes + (size_t)pos * job->max_boxes * DETECT_BOX_FLOATS, &nrows)
				: produce_one(w, job, pos, candidate, dst);

		if (r == 0) {
			job->labels[pos] = job->detect ? (int64_t)nrows : job->ds->labels[candidate];
			job->indices[pos] = (int64_t)candidate;
			if (attempt > 0 || candidate != index)
				atomic_fetch_add_explicit(&job->replaced, 1, memory_order_relaxed);
			return;
		}
		atomic_fetch_add_explicit(&w->counters[COUNTER_DECODE_ERRORS], 1, memory_order_relaxed);
	}
	/* Nothing near it decodes: an empty image with label -1 (for
	 * detection: no boxes) says so. */
	memset(dst, 0, image_bytes);
	if (job->detect) {
		memset(job->shapes + (size_t)pos * 4, 0, 4 * sizeof(*job->shapes));
		memset(job->ratio_pad + (size_t)pos * 4, 0, 4 * sizeof(*job->ratio_pad));
	}
	job->labels[pos] = job->detect ? 0 : -1;
	job->indices[pos] = (int64_t)index;
	atomic_fetch_add_explicit(&job->replaced, 1, memory_order_relaxed);
}

/* Detection: pack each sample's rows after the previous sample's, so the
 * batch's boxes are one [box_count][6] array, image index in column 0.
 * Sample i's rows start at or after where they go, so moving them in order
 * never overwrites rows not yet moved. */
static void pack_boxes(struct batch_job *job)
{
	size_t stride = (size_t)job->max_boxes * DETECT_BOX_FLOATS, at = 0;

	for (uint32_t i = 0; i < job->count; i++) {
		size_t n = (size_t)job->labels[i];
		float *rows = job->boxes + at * DETECT_BOX_FLOATS;

		memmove(rows, job->boxes + i * stride, n * DETECT_BOX_FLOATS * sizeof(float));
		for (size_t k = 0; k < n; k++)
			rows[k * DETECT_BOX_FLOATS] = (float)i;
		at += n;
	}
	job->box_count = (uint32_t)at;
}

/* Classification's batch op, once every sample is in place (not for a
 * copy: its source was mixed). */
static void mix_batch(struct batch_job *job)
{
	struct rng rng;

	rng_init(&rng, job->seed, job->epoch, job->mix_key, RNG_BATCHMIX);
	batchmix_draw(job->mix, &rng, job->count, job->mix_w, job->mix_h, job->mix_recs);
	batchmix_apply(job->mix, job->mix_recs, job->count, job->images, job->spec.dtype, job->mix_w, job->mix_h,
		       job->labels, job->mix_classes, job->soft, job->mix_scratch);
}

/* This thread's CPU time (the batch op's share: on a shared machine the
 * wall time would count the waits for a core). */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void job_finish(struct pool *p, struct batch_job *job)
{
	struct batch_job *head = atomic_load_explicit(&p->done_head, memory_order_relaxed);

	do
		job->done_next = head;
	while (!atomic_compare_exchange_weak_explicit(&p->done_head, &head, job, memory_order_release,
						      memory_order_relaxed));
	uv_async_send(&p->async);
}

/* Tell the loop this thread is done, so it joins it (pool_reap). */
static void worker_exited(struct pool *p, struct worker *w)
{
	struct worker *head = atomic_load_explicit(&p->exited_head, memory_order_relaxed);

	do
		w->exited_next = head;
	while (!atomic_compare_exchange_weak_explicit(&p->exited_head, &head, w, memory_order_release,
						      memory_order_relaxed));
	uv_async_send(&p->async);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct pool *p = w->pool;

	for (;;) {
		struct pool_task t;
		uint64_t start;

		while (sem_wait(&p->ready) < 0)
			;
		t = queue_pop(p);
		if (!t.job) {
			worker_exited(p, w);
			break;
		}
		start = monotonic_ns();
		if (!atomic_load_explicit(&t.job->cancelled, memory_order_relaxed))
			produce_sample(w, t.job, t.pos);
		atomic_fetch_add_explicit(&w->counters[COUNTER_BUSY_NS], monotonic_ns() - start, memory_order_relaxed);
		atomic_fetch_add_explicit(&p->tasks_done, 1, memory_order_release);
		if (atomic_fetch_sub_explicit(&t.job->remaining, 1, memory_order_acq_rel) == 1) {
			if (t.job->detect && !atomic_load_explicit(&t.job->cancelled, memory_order_relaxed))
				pack_boxes(t.job);
			if (t.job->mix && !t.job->copy_from &&
			    !atomic_load_explicit(&t.job->cancelled, memory_order_relaxed)) {
				uint64_t mix_start = thread_cpu_ns();

				mix_batch(t.job);
				atomic_fetch_add_explicit(&w->counters[COUNTER_BATCH_OP_NS],
							  thread_cpu_ns() - mix_start, memory_order_relaxed);
			}
			job_finish(p, t.job);
		}
	}
	return NULL;
}

static void worker_free(struct worker *w)
{
	if (!w)
		return;
	pipeline_free(w->pipeline);
	tpipe_ctx_free(w->tpipe);
	detect_free(w->detect);
	albu_free(w->albu);
	free(w->fit);
	instmask_free(w->instmask);
	free(w->rows_src);
	free(w->inst_off);
	free(w->inst_order);
	free(w->inst_pts);
	free(w->rows_tmp);
	free(w->buf);
	free(w->pixels);
	free(w);
}

/* Join the threads that took an exit task and keep their counters. */
static void pool_reap(struct pool *p)
{
	struct worker *w = atomic_exchange_explicit(&p->exited_head, NULL, memory_order_acquire);

	while (w) {
		struct worker *next = w->exited_next;

		pthread_join(w->thread, NULL);
		for (int k = 0; k < COUNTER_N; k++)
			p->retired[k] += atomic_load_explicit(&w->counters[k], memory_order_relaxed);
		for (uint32_t i = 0; i < p->nthreads; i++) {
			if (p->workers[i] == w) {
				p->workers[i] = p->workers[--p->nthreads];
				break;
			}
		}
		p->exits_queued--;
		worker_free(w);
		w = next;
	}
}

static void pool_on_async(uv_async_t *handle)
{
	struct pool *p = handle->data;
	struct batch_job *list = atomic_exchange_explicit(&p->done_head, NULL, memory_order_acquire);
	struct batch_job *fifo = NULL;

	/* The stack is newest first; hand jobs over oldest first. */
	while (list) {
		struct batch_job *next = list->done_next;
		list->done_next = fifo;
		fifo = list;
		list = next;
	}
	while (fifo) {
		struct batch_job *next = fifo->done_next;
		p->done(fifo, p->userdata);
		fifo = next;
	}
	if (atomic_load_explicit(&p->exited_head, memory_order_relaxed))
		pool_reap(p);
}

/* Start `n` more threads. Loop thread only. */
static int pool_spawn(struct pool *p, uint32_t n)
{
	size_t wsize = (sizeof(struct worker) + CACHELINE - 1) / CACHELINE * CACHELINE;

	if (p->nthreads + n > POOL_MAX_THREADS)
		return -EAGAIN;
	if (p->nthreads + n > p->workers_cap) {
		uint32_t cap = p->nthreads + n;
		struct worker **v = realloc(p->workers, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		p->workers = v;
		p->workers_cap = cap;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct worker *w = aligned_alloc(CACHELINE, wsize);
		int r;

		if (!w)
			return -ENOMEM;
		memset(w, 0, wsize);
		w->pool = p;
		r = pipeline_new(&p->settings.limits, &w->pipeline);
		if (r >= 0)
			r = tpipe_ctx_new(&w->tpipe);
		if (r == 0)
			r = -pthread_create(&w->thread, NULL, worker_main, w);
		if (r < 0) {
			worker_free(w);
			return r;
		}
		p->workers[p->nthreads++] = w;
		p->nworkers++;
	}
	return 0;
}

int pool_new(uv_loop_t *loop, const struct pool_settings *s, pool_done_fn done, void *userdata, struct pool **out)
{
	struct pool *p;
	size_t cap = 1;
	int r;

	if (s->workers == 0 || s->workers > POOL_MAX_WORKERS || s->queue_capacity == 0)
		return -EINVAL;
	/* Room for every real task and one exit task per thread. */
	while (cap < (size_t)s->queue_capacity + POOL_MAX_THREADS)
		cap <<= 1;
	p = aligned_alloc(CACHELINE, (sizeof(*p) + CACHELINE - 1) / CACHELINE * CACHELINE);
	if (!p)
		return -ENOMEM;
	memset(p, 0, sizeof(*p));
	p->settings = *s;
	p->done = done;
	p->userdata = userdata;
	p->mask = cap - 1;
	p->cells = calloc(cap, sizeof(*p->cells));
	if (!p->cells) {
		r = -ENOMEM;
		goto fail_alloc;
	}
	for (size_t i = 0; i < cap; i++)
		atomic_init(&p->cells[i].seq, i);
	if (sem_init(&p->ready, 0, 0) < 0) {
		r = -errno;
		goto fail_alloc;
	}
	r = uv_async_init(loop, &p->async, pool_on_async);
	if (r < 0)
		goto fail_sem;
	p->async.data = p;
	p->async_open = true;

	r = pool_spawn(p, s->workers);
	if (r < 0) {
		pool_free(p);
		return r;
	}
	*out = p;
	return 0;

fail_sem:
	sem_destroy(&p->ready);
fail_alloc:
	free(p->cells);
	free(p);
	return r;
}

static void pool_on_async_closed(uv_handle_t *handle)
{
	struct pool *p = handle->data;

	free(p->cells);
	free(p->workers);
	free(p);
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	/* One exit task per thread not already told to exit, queued behind
	 * all real work. */
	for (uint32_t i = 0; i < p->nworkers; i++)
		queue_push(p, (struct pool_task){.job = NULL});
	/* Every thread takes an exit task and ends; the exited stack is
	 * dropped: each thread is joined here, once. */
	for (uint32_t i = 0; i < p->nthreads; i++) {
		pthread_join(p->workers[i]->thread, NULL);
		worker_free(p->workers[i]);
	}
	p->nthreads = p->nworkers = 0;
	atomic_store_explicit(&p->exited_head, NULL, memory_order_relaxed);
	/* Hand over what finished while draining. */
	pool_on_async(&p->async);
	sem_destroy(&p->ready);
	uv_close((uv_handle_t *)&p->async, pool_on_async_closed);
}

int pool_submit(struct pool *p, struct batch_job *job)
{
	uint64_t in_queue = p->tasks_submitted - atomic_load_explicit(&p->tasks_done, memory_order_acquire);

	if (job->count == 0)
		return -EINVAL;
	if (in_queue + job->count > p->settings.queue_capacity)
		return -EAGAIN;
	atomic_store_explicit(&job->remaining, job->count, memory_order_relaxed);
	for (uint32_t i = 0; i < job->count; i++)
		queue_push(p, (struct pool_task){.job = job, .pos = i});
	p->tasks_submitted += job->count;
	return 0;
}

int pool_resize(struct pool *p, uint32_t workers)
{
	if (workers == 0 || workers > POOL_MAX_WORKERS)
		return -EINVAL;
	if (workers > p->nworkers)
		return pool_spawn(p, workers - p->nworkers);
	/* Surplus threads leave when they next take a task: the exit tasks
	 * queue behind the work already queued, and nothing waits here. */
	while (p->nworkers > workers) {
		queue_push(p, (struct pool_task){.job = NULL});
		p->exits_queued++;
		p->nworkers--;
	}
	return 0;
}

uint32_t pool_workers(const struct pool *p)
{
	return p->nworkers;
}

uint32_t pool_threads(const struct pool *p)
{
	return p->nthreads;
}

static uint64_t pool_counter(const struct pool *p, enum counter k)
{
	uint64_t sum = p->retired[k];

	for (uint32_t i = 0; i < p->nthreads; i++)
		sum += atomic_load_explicit(&p->workers[i]->counters[k], memory_order_relaxed);
	return sum;
}

uint64_t pool_busy_ns(const struct pool *p)
{
	return pool_counter(p, COUNTER_BUSY_NS);
}

uint64_t pool_batch_op_ns(const struct pool *p)
{
	return pool_counter(p, COUNTER_BATCH_OP_NS);
}

uint64_t pool_decode_errors(const struct pool *p)
{
	return pool_counter(p, COUNTER_DECODE_ERRORS);
}

uint64_t pool_decode_error_files(const struct pool *p)
{
	return pool_counter(p, COUNTER_DECODE_ERROR_FILES);
}

uint64_t pool_samples_decoded(const struct pool *p)
{
	return pool_counter(p, COUNTER_SAMPLES_DECODED);
}

uint64_t pool_samples_copied(const struct pool *p)
{
	return pool_counter(p, COUNTER_SAMPLES_COPIED);
}

uint64_t pool_boxes_dropped(const struct pool *p)
{
	return pool_counter(p, COUNTER_BOXES_DROPPED);
}
