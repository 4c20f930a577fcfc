/* SPDX-License-Identifier: MIT */
/*
 * The worker pool: threads that turn samples into pixels in batch slots.
 *
 * The loop thread submits a batch job; each of its samples becomes one task
 * in a bounded lock-free queue (Vyukov's MPMC array queue) that every worker
 * pulls from, so no lock sits on the hot path. Each worker owns its decoder
 * pipeline and read buffer. The worker that finishes a job's last sample
 * pushes the job on a lock-free completion stack and wakes the loop with
 * uv_async_send; only the loop thread touches libuv (docs/threads.md).
 */
#ifndef STOKER_WORKERS_H
#define STOKER_WORKERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "augment.h"
#include "pipeline.h"
#include "batchmix.h"
#include "cache.h"
#include "detect.h"
#include "fetch.h"

struct access_map;
struct dataset;

/* Detection's shared images: each sample of a batch at long side
 * image_size, made once by whichever worker needs it first, and used by the
 * others as a mosaic or mixup partner (never made twice: a worker that
 * finds one in the making makes the batch's unstarted ones, then waits). */
enum fit_state {
	FIT_EMPTY = 0,
	FIT_LOADING = 1, /* a worker is making it: others make what nobody has started, then wait */
	FIT_READY = 2,
	FIT_FAILED = 3,
	FIT_WAITED = 4, /* FIT_LOADING with a worker asleep on it (futex): the maker wakes it */
};

struct fit_entry {
	_Atomic uint32_t state; /* enum fit_state; READY/FAILED published with release */
	uint32_t width, height;
	uint32_t full_width, full_height; /* the file's */
	int error;
};

struct fit_table {
	struct fit_entry *entries; /* [batch_size] */
	uint8_t *pixels;           /* [batch_size][image_size * image_size * 3] */
};

/* A remote sample's bytes, fetched for a job before its tasks were
 * queued (prefetch.h). Only the worker making position i touches entry i
 * once the job is queued; the session frees what is left. */
struct sample_fetch {
	struct fetch_req req; /* req.data/len/err once arrived */
	struct batch_job *job;
	struct prefetch *stage;
	char *url;
	bool wanted; /* fetched for this job (else the cache had it) */
	/* The fetch stage's own (prefetch.c): the object's key, and the
	 * coalescing of requests for an object already in flight. */
	struct cache_key key;
	bool follower;                  /* gets a copy of a leader's bytes */
	struct sample_fetch *hash_next; /* in the in-flight table */
	struct sample_fetch *followers, *follower_next;
};

/* One batch to fill. Fields above `remaining` are written by the loop thread
 * before submission and only read by workers. */
struct batch_job {
	struct dataset *ds;
	uint64_t samples; /* the data set's first samples the session uses: stand-ins come from them */
	struct transform_spec spec;
	const struct tpipe *tpipe; /* classification: the client's pipeline (pipeline.h), or NULL: spec */
	uint64_t seed, epoch, batch_index;
	uint32_t count, slot, generation;
	const uint64_t *order; /* [count] sample indices for this batch */
	/* What the session's client may read (access.h); NULL: every sample.
	 * Checked before the cache and the file, so a hit never skips it. */
	const struct access_map *readable;
	uint8_t *images;  /* [count][size][size][3] in the slot */
	int64_t *labels;  /* [count] in the slot */
	int64_t *indices; /* [count] in the slot: the index delivered */
	void *owner;      /* the session, for the completion callback */
	/* A copy job: the batch already exists in another slot of the same
	 * layout (coordinated sessions); workers copy instead of decoding. */
	const uint8_t *copy_from;
	void *source_owner;
	uint32_t source_slot;
	/* Detection: the transform and its parameters for this epoch. Each
	 * sample writes up to max_boxes rows at boxes + pos * max_boxes rows
	 * and its row count in labels[pos]; the worker that finishes the job
	 * packs them into [box_count][6] at `boxes`, image index in column 0. */
	bool detect;
	enum detect_transform detect_transform;
	struct detect_params detect_params;
	uint32_t max_boxes;
	struct fit_table *fits; /* mosaic partners come from the batch; NULL: none */
	float *boxes;
	uint32_t box_count; /* written before the job is handed back */
	/* The batch's image shape: images are [count][out_h][out_w][3]
	 * (image_size square but for rectangular batches). */
	uint32_t out_w, out_h;
	enum fit_resample resample;
	float bgr;         /* P(the sample's channels stay BGR): Ultralytics' bgr, training */
	float albu;        /* p of each default Albumentations op (albu.h), training; 0: none */
	int32_t *shapes;   /* [count][4] in the slot: detect_meta.shape */
	double *ratio_pad; /* [count][4] in the slot: detect_meta.ratio_pad */
	/* yolo_task segment (letterbox): each image's overlap mask, uint16
	 * [mask_side][mask_side] apart, of which (out_h / mask_ratio) x (out_w /
	 * mask_ratio) are written, and its rows in the mask's area order
	 * (instmask.h); NULL: none. pose: float [count][max_boxes][kpt_points][3],
	 * each row's keypoints; NULL: none. */
	uint16_t *masks;
	uint32_t mask_ratio, mask_side;
	float *keypoints;
	uint32_t kpt_points;
	float *obb;               /* obb: float [count][max_boxes][5], each row's xywhr; NULL: none */
	const uint32_t *flip_idx; /* pose, training: the keypoints' order after a flip ([kpt_points]); NULL: kept */
	/* Classification's batch op (batchmix.h), or NULL: the worker that
	 * finishes the job draws from the stream (seed, epoch, mix_key,
	 * RNG_BATCHMIX), mixes the images in place (mix_w x mix_h, spec.dtype)
	 * and writes mix_recs[count] and soft[count][mix_classes]; a copy job
	 * copies them. mix_scratch holds one image. */
	const struct batchmix *mix;
	uint64_t mix_key;
	uint32_t mix_w, mix_h, mix_classes;
	struct batchmix_rec *mix_recs;
	float *soft;
	void *mix_scratch;
	/* Repeated augmentation: [count] each sample's copy number (its
	 * per-sample stream is keyed by index + copy * N), or NULL: all 0. */
	const uint32_t *copies;
	/* Remote data sets: [count] fetched bytes (NULL for local files). */
	struct sample_fetch *fetches;
	atomic_uint fetch_pending;    /* fetches not yet finished (+1 while starting) */
	struct batch_job *fetch_next; /* prefetch's completion stack, then the loop's wait list */

	atomic_uint remaining; /* samples not yet done */
	atomic_uint replaced;  /* samples replaced by a stand-in */
	atomic_bool cancelled; /* set by the loop: skip the work */
	struct batch_job *done_next;
};

struct pool_settings {
	uint32_t workers;
	uint32_t queue_capacity; /* tasks; rounded up to a power of two */
	struct decode_limits limits;
	uint64_t max_file_bytes;
	uint32_t replace_attempts;
	struct cache *cache; /* NULL: no cache */
	/* > 0: every sample goes through the decoded tier: the whole image is
	 * decoded at the largest DCT reduction keeping its shorter side at
	 * least this, cached when the budget allows, and cropped from there. */
	uint32_t decoded_side;
};

/* Most threads a pool runs (the `workers` setting's bound). */
#define POOL_MAX_WORKERS 4096

typedef void (*pool_done_fn)(struct batch_job *job, void *userdata);

struct pool;

int pool_new(uv_loop_t *loop, const struct pool_settings *s, pool_done_fn done, void *userdata, struct pool **out);
/* Drain queued tasks (cancelled ones cost nothing), join the threads, close
 * the async handle. Loop thread only. Accepts NULL. */
void pool_free(struct pool *p);

/* Queue every sample of `job`. -EAGAIN when the queue has no room for them
 * now (retry after a completion). Loop thread only. */
int pool_submit(struct pool *p, struct batch_job *job);

/* Change the thread count while running. Growing starts threads at once;
 * shrinking queues one exit task per surplus thread, taken behind the work
 * already queued, so no task is lost and nothing waits. -EINVAL outside
 * 1..POOL_MAX_WORKERS, -EAGAIN while too many earlier exits are pending.
 * Loop thread only. */
int pool_resize(struct pool *p, uint32_t workers);
/* The target thread count (what pool_resize set). */
uint32_t pool_workers(const struct pool *p);
/* Threads still running, including surplus ones not yet gone. */
uint32_t pool_threads(const struct pool *p);
/* Sum over workers of time spent producing samples. */
uint64_t pool_busy_ns(const struct pool *p);
/* The workers' CPU time in classification batch ops (mixing, soft targets). */
uint64_t pool_batch_op_ns(const struct pool *p);
/* Failed attempts to make a sample (a bad file counts again each time it
 * is planned), and the files found bad: each once per opening of its data
 * set (dataset.h: bad_files). */
uint64_t pool_decode_errors(const struct pool *p);
uint64_t pool_decode_error_files(const struct pool *p);
/* Samples decoded, and samples copied from another ring. */
uint64_t pool_samples_decoded(const struct pool *p);
uint64_t pool_samples_copied(const struct pool *p);
/* Boxes left out because an image had more than its max_boxes. */
uint64_t pool_boxes_dropped(const struct pool *p);

#endif
