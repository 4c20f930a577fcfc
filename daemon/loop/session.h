/* SPDX-License-Identifier: MIT */
/*
 * A client's attachment: its data set and plan, its ring of batch slots, and
 * the epoch being produced. Loop thread only.
 *
 * Slot life: FREE -> FILLING (a job in the pool) -> READY (filled, waiting
 * for its turn: batches go out in order) -> CLIENT (announced with
 * BatchReady, until the client releases it) -> FREE. A CUDA client's slots
 * (device cuda:N) pass through COPYING between FILLING and READY: the GPU
 * stream is copying (and converting) the host slot into the device slot of
 * the same index, whose own ownership devring.h keeps. A StartEpoch moves the
 * session to a new generation: READY slots of the old one are freed, FILLING
 * ones are cancelled and freed when their job returns; CLIENT ones stay
 * until released.
 *
 * Coordinated sessions (identical data set, plan and transform) share
 * production: a batch that a member has ready, or is filling, is copied into
 * the others' slots by the workers instead of being decoded again. A member
 * that falls behind (the batch is gone from every ring) decodes it itself,
 * so a slow member never holds the others back.
 */
#ifndef STOKER_SESSION_H
#define STOKER_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu.h"
#include "pipeline.h"
#include "plan.h"
#include "stoker.pb-c.h"
#include "workers.h"

enum slot_state {
	SLOT_FREE,
	SLOT_FILLING,
	SLOT_WAITING, /* coordinated: for another member's job of the same batch */
	SLOT_READY,
	SLOT_CLIENT,
	SLOT_DRAINING, /* released, but copies out of it are still running */
	SLOT_COPYING,  /* device sessions: on its way into the device slot */
};

/* Where a WAITING slot's batch will come from. */
struct slot_source {
	struct session *session;
	uint32_t slot;
};

struct session {
	struct daemon *d;
	struct conn *conn; /* NULL once the client is gone */
	struct dataset *ds;
	struct ring *ring;
	struct plan_spec plan;
	uint64_t samples; /* the data set's first samples this session uses (fraction) */
	struct transform_spec spec;
	/* Classification: the client's transform pipeline (Attach.transforms), or NULL. */
	struct tpipe *tpipe;
	char *tpipe_text;
	size_t labels_offset, indices_offset;
	/* Detection: the transform, its parameters, close_mosaic's epochs. */
	bool detect;
	enum detect_transform detect_transform;
	struct detect_params detect_params;
	uint32_t close_mosaic, max_boxes;
	uint64_t train_epochs;
	float bgr;
	float albu; /* Ultralytics' default Albumentations' p (albu.h) */
	size_t boxes_offset;
	enum fit_resample resample;
	size_t shapes_offset, ratio_pad_offset; /* per-image metadata in each slot */
	/* yolo_task segment: overlap masks (mask_ratio 0: none); pose: keypoints (kpt_points 0: none). */
	size_t masks_offset, keypoints_offset;
	uint32_t mask_side, mask_ratio, kpt_points;
	size_t obb_offset;  /* yolo_task obb: xywhr per box row (0: none) */
	uint32_t *flip_idx; /* pose: the data.yaml's flip_idx ([kpt_points]; NULL: none); owned */
	/* A batch op (batchmix.h): its soft targets, records and scratch in each slot. */
	bool has_mix;
	struct batchmix mix;
	uint32_t mix_classes;
	size_t soft_offset, mix_offset, mix_scratch_offset;
	uint32_t *job_copies; /* [slot_count][batch_size] with aug_repeats, else NULL */
	/* Rectangular batches: the data set in aspect-ratio order (the plan's
	 * fixed order) and each of this rank's batches' height and width. */
	bool rect;
	uint64_t *rect_order;
	uint32_t *rect_hw;            /* [batches_per_epoch][2] */
	struct fit_table *fit_tables; /* [slot_count], mosaic: the batch's images */
	struct fit_entry *fit_entries;
	uint8_t *fit_pixels;
	uint64_t fit_bytes;

	enum slot_state *slot_state;
	struct slot_source *waiting_on; /* [slot_count], WAITING slots */
	uint32_t *pins;                 /* [slot_count] copies reading the slot */
	uint32_t refs;                  /* other sessions' WAITING slots and copies using this one */
	bool coordinated;
	struct batch_job *jobs;       /* one per slot, reused */
	uint64_t *job_orders;         /* [slot_count][batch_size] */
	struct sample_fetch *fetches; /* [slot_count][batch_size], remote data sets only */

	uint64_t epoch;
	uint32_t generation;
	uint64_t *order; /* this epoch's indices for this rank */
	uint64_t batches_per_epoch;
	uint64_t next_schedule; /* next batch to hand to the pool */
	uint64_t next_deliver;  /* next batch to announce */
	bool end_sent;
	uint32_t inflight; /* jobs in the pool */
	uint32_t hold;     /* handlers on the stack using it (session.c) */

	/* CUDA delivery (gpu.h): images go on into GPU memory. The host ring
	 * then holds uint8 images (spec.dtype); out_dtype is the client's. */
	char device[32];     /* "cpu" or "cuda:N" */
	uint32_t image_side; /* images' side in a slot: image_size, or rect's largest */
	enum sample_dtype out_dtype;
	bool device_opening;  /* the CUDA thread is setting the ring up */
	struct gpu_ring *gpu; /* until its `closed` callback */
	uint64_t device_bytes;
	uint64_t attach_epoch, attach_first;
	Stoker__Transform transform;
	int pending_fd; /* the host ring's reader fd, while opening */

	/* Statistics. */
	uint64_t batches, images;
	uint64_t wait_ns;
	uint32_t pid;
	char *dataset_name;
	/* What the client may read (access.h; NULL: everything), and the
	 * planned samples it could not, replaced by readable ones. */
	struct access_map *readable;
	uint64_t unreadable;
};

/* Between the attach path (attach.c) and the session's life (session.c). */
struct conn;
struct daemon;
struct dataset;

/* The registry of open data sets (remote listings kept remote_listing_ttl_s):
 * find takes a reference; add hands the registry the caller's; put drops one. */
struct dataset *datasets_find(struct daemon *d, const char *key);
int datasets_add(struct daemon *d, struct dataset *ds);
void datasets_put(struct daemon *d, struct dataset *ds);
/* Everything a session holds; NULL is fine. */
/* The samples a session uses: the data set's first `images` of its n (if
 * not 0), else Ultralytics' max(1, round(n * fraction)) (Python's round:
 * half to even), n at most. */
uint64_t session_samples(uint64_t n, double fraction, uint64_t images);
void session_free(struct session *s);
bool session_on_device(const struct session *s);
/* An epoch may start at any batch up to its end; else the client is told. */
bool session_first_batch_ok(struct conn *c, const struct session *s, uint64_t first);
/* Ask the CUDA thread for the device ring (session_announce follows when it
 * is open); a negative errno once the client was told why not. */
int session_device_open(struct session *s, const uint8_t *uuid, bool has_uuid);
/* Send Attached with the host ring's fd (and DeviceRing for a device), then
 * start producing. */
void session_announce(struct session *s, int fd);

#endif
