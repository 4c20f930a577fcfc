/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cudadrv.h"
#include "daemon.h"
#include "dataset.h"
#include "detect.h"
#include "shards.h"
#include "log.h"
#include "prefetch.h"
#include "rect.h"
#include "ring.h"
#include "session.h"
#include "workers.h"

/* torchvision's ImageNet normalisation, the default for float output. */
static const float imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
static const float imagenet_std[3] = {0.229f, 0.224f, 0.225f};

/* Class names sent with Attached, at most (a frame is 64 KiB by default). */
#define SESSION_MAX_CLASS_NAMES_BYTES (32u << 10)
/* Boxes per image a slot has room for: the default and the bound. */
#define SESSION_DEFAULT_MAX_BOXES 1000u
#define SESSION_MAX_BOXES 10000u
/* Label errors logged per data set; the rest are counted. */
#define SESSION_MAX_LABEL_LOGS 100u

/* A Names reply holds at most this many names and about this much text. */
#define SESSION_NAMES_MAX_COUNT STOKER__NAMES_LIMITS__NAMES_MAX_COUNT
#define SESSION_NAMES_MAX_BYTES STOKER__NAMES_LIMITS__NAMES_MAX_BYTES

/* Data sets larger than this are refused (the plan holds 8 bytes a sample). */
#define SESSION_MAX_SAMPLES (1ull << 32)
/* A shard-order shuffle buffer holds at most this many samples. */
#define SESSION_MAX_SHUFFLE_BUFFER (1u << 22)

struct attach_request {
	uv_work_t work;
	struct daemon *d;
	struct conn *conn; /* NULL if the client left during the scan */
	Stoker__Attach params; /* its arrays point into this request */
	float mean[3], std[3];
	char path[PATH_MAX];
	/* Detection: the options, copied out of the message. */
	struct detect_params detect;
	uint32_t close_mosaic, max_boxes;
	uint64_t train_epochs;
	char split[64];
	bool rect;
	uint32_t stride;
	double pad;
	enum fit_resample resample;
	char key[PATH_MAX + 96]; /* the data set's dataset->key */
	struct dataset *existing; /* open already, but without the image sizes rect needs */
	uint32_t *sizes;          /* read by the scan for rect */
	struct s3_config s3; /* a copy: the scan runs off the loop thread */
	/* device: "cpu" or "cuda:N" and the GPU's UUID, copied out too. */
	char device[32];
	uint8_t uuid[GPU_UUID_BYTES];
	bool has_uuid;
	struct dataset *result;
	int err;
	char errbuf[512];
};

static const char *transform_name(Stoker__Transform t)
{
	switch (t) {
	case STOKER__TRANSFORM__RANDOM_RESIZED_CROP: return "random_resized_crop";
	case STOKER__TRANSFORM__CENTER_CROP: return "center_crop";
	case STOKER__TRANSFORM__LETTERBOX: return "letterbox";
	case STOKER__TRANSFORM__MOSAIC: return "mosaic";
	default: return "?";
	}
}

static size_t align_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/* ---- data sets shared between sessions ---- */

static struct dataset *datasets_find(struct daemon *d, const char *key)
{
	uint64_t now = monotonic_ns(), ttl = (uint64_t)d->cfg.remote_listing_ttl_s * 1000000000ull;

	/* Remote listings are kept for remote_listing_ttl_s after they were
	 * made, used or not; then the next attach lists again. */
	for (size_t i = 0; i < d->ndatasets;) {
		struct dataset *ds = d->datasets[i];

		if (ds->remote && now - ds->remote->listed_ns >= ttl) {
			d->datasets[i] = d->datasets[--d->ndatasets];
			dataset_unref(ds); /* the registry's reference */
			continue;
		}
		i++;
	}
	for (size_t i = 0; i < d->ndatasets; i++)
		if (strcmp(d->datasets[i]->key, key) == 0)
			return dataset_ref(d->datasets[i]);
	return NULL;
}

static int datasets_add(struct daemon *d, struct dataset *ds)
{
	struct dataset **v = realloc(d->datasets, (d->ndatasets + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	d->datasets = v;
	d->datasets[d->ndatasets++] = ds;
	d->label_errors += ds->label_errors;
	if (ds->remote)
		dataset_ref(ds); /* the listing cache's own reference */
	return 0;
}

static void datasets_put(struct daemon *d, struct dataset *ds)
{
	if (!ds)
		return;
	if (ds->refs == 1 && !ds->remote) {
		for (size_t i = 0; i < d->ndatasets; i++) {
			if (d->datasets[i] == ds) {
				d->datasets[i] = d->datasets[--d->ndatasets];
				break;
			}
		}
	}
	dataset_unref(ds);
}

void datasets_free_all(struct daemon *d)
{
	/* What is left at exit: the listing cache's references. */
	for (size_t i = 0; i < d->ndatasets; i++)
		if (d->datasets[i]->remote)
			dataset_unref(d->datasets[i]);
	free(d->datasets);
	d->datasets = NULL;
	d->ndatasets = 0;
}

/* ---- sessions ---- */

uint64_t session_decode_error_files(const struct session *s)
{
	return atomic_load_explicit(&s->ds->bad_files, memory_order_relaxed);
}

static bool session_on_device(const struct session *s)
{
	return strcmp(s->device, "cpu") != 0;
}

static int device_send_ring(struct session *s);
static int device_open(struct session *s, const struct attach_request *req);

static void session_free(struct session *s)
{
	if (!s)
		return;
	if (s->pending_fd >= 0)
		close(s->pending_fd);
	datasets_put(s->d, s->ds);
	/* Fetched bytes no worker took (jobs that never ran). */
	for (uint32_t slot = 0; s->jobs && s->fetches && slot < s->ring->slot_count; slot++)
		prefetch_release(&s->jobs[slot]);
	if (s->ring)
		s->d->ring_bytes -= s->ring->bytes;
	s->d->fit_bytes -= s->fit_bytes;
	free(s->rect_order);
	free(s->rect_hw);
	free(s->fit_tables);
	free(s->fit_entries);
	if (s->fit_pixels)
		munmap(s->fit_pixels, s->fit_bytes);
	ring_free(s->ring);
	free(s->slot_state);
	free(s->waiting_on);
	free(s->pins);
	free(s->fetches);
	free(s->jobs);
	free(s->job_orders);
	free(s->order);
	free(s->dataset_name);
	free(s);
}

/*
 * A session lives while its client is connected, while workers hold jobs of
 * it (they write into its ring), while other sessions wait on or copy from
 * its slots, and while a handler on the stack holds it (sending can close
 * the connection, which detaches the session).
 */
static void session_maybe_free(struct session *s)
{
	if (s->conn || s->inflight || s->refs || s->hold || s->device_opening)
		return;
	/* The device ring goes first: its stream may still read the host
	 * ring. Its `closed` comes back here. */
	if (s->gpu) {
		devring_close(gpu_ring_devring(s->gpu));
		return;
	}
	session_free(s);
}

static void session_hold(struct session *s)
{
	s->hold++;
}

static void session_unhold(struct session *s)
{
	s->hold--;
	session_maybe_free(s);
}

/* Drop a reference to another session's slot (a wait or a copy). */
static void source_put(struct session *src, uint32_t slot, bool pinned)
{
	if (pinned && --src->pins[slot] == 0 && src->slot_state[slot] == SLOT_DRAINING)
		src->slot_state[slot] = SLOT_FREE;
	src->refs--;
	session_maybe_free(src);
}

/* Coordinated sessions whose batches are interchangeable with s's. */
static bool same_group(const struct session *a, const struct session *b)
{
	const struct plan_spec *p = &a->plan, *q = &b->plan;
	const struct transform_spec *x = &a->spec, *y = &b->spec;

	return a->coordinated && b->coordinated && a->ds == b->ds && p->seed == q->seed && p->rank == q->rank &&
	       p->world_size == q->world_size && p->batch_size == q->batch_size && p->shuffle == q->shuffle &&
	       p->drop_last == q->drop_last && p->shard_starts == q->shard_starts &&
	       p->shuffle_buffer == q->shuffle_buffer && x->kind == y->kind && x->image_size == y->image_size &&
	       x->dtype == y->dtype && x->dct_scaling == y->dct_scaling && !memcmp(x->mean, y->mean, sizeof(x->mean)) &&
	       !memcmp(x->std, y->std, sizeof(x->std)) && a->epoch == b->epoch;
}

/* Does o's `slot` hold, or is it filling, batch b of o's current epoch? */
static bool slot_has_batch(const struct session *o, uint32_t slot, uint64_t b)
{
	const struct batch_job *job = &o->jobs[slot];
	enum slot_state st = o->slot_state[slot];

	if (job->batch_index != b || job->generation != o->generation)
		return false;
	if (st == SLOT_FILLING)
		return !atomic_load_explicit(&job->cancelled, memory_order_relaxed);
	/* COPYING: the host slot is complete, on its way to the GPU. */
	return st == SLOT_READY || st == SLOT_CLIENT || st == SLOT_COPYING;
}

/* Another live member of s's group that has batch b, or is making it. */
static bool group_source(struct session *s, uint64_t b, struct slot_source *out)
{
	for (struct conn *c = s->d->conns; c; c = c->next) {
		struct session *o = c->session;

		if (!o || o == s || !same_group(o, s))
			continue;
		for (uint32_t k = 0; k < o->ring->slot_count; k++) {
			if (slot_has_batch(o, k, b)) {
				out->session = o;
				out->slot = k;
				return true;
			}
		}
	}
	return false;
}

/* Point `slot`'s job at batch b of the current epoch. */
static void job_prepare(struct session *s, uint32_t slot, uint64_t b)
{
	struct batch_job *job = &s->jobs[slot];
	uint8_t *base = ring_slot(s->ring, slot);

	job->ds = s->ds;
	job->spec = s->spec;
	job->seed = s->plan.seed;
	job->epoch = s->epoch;
	job->batch_index = b;
	job->count = plan_batch_count(&s->plan, b);
	job->slot = slot;
	job->generation = s->generation;
	job->order = s->job_orders + (size_t)slot * s->plan.batch_size;
	memcpy((uint64_t *)job->order, s->order + b * s->plan.batch_size, job->count * sizeof(uint64_t));
	job->images = base;
	job->labels = (int64_t *)(base + s->labels_offset);
	job->indices = (int64_t *)(base + s->indices_offset);
	job->owner = s;
	job->copy_from = NULL;
	job->source_owner = NULL;
	job->detect = s->detect;
	if (s->detect) {
		job->detect_transform = s->detect_transform;
		job->detect_params = s->detect_params;
		/* Ultralytics' close_mosaic: the last epochs go without mosaic and mixup. */
		if (s->train_epochs && s->close_mosaic && s->epoch + s->close_mosaic >= s->train_epochs) {
			job->detect_params.mosaic = 0;
			job->detect_params.mixup = 0;
		}
		job->max_boxes = s->max_boxes;
		job->fits = NULL;
		if (s->fit_tables) {
			job->fits = &s->fit_tables[slot];
			for (uint32_t i = 0; i < job->count; i++)
				atomic_store_explicit(&job->fits->entries[i].state, FIT_EMPTY, memory_order_relaxed);
		}
		job->boxes = (float *)(base + s->boxes_offset);
		job->box_count = 0;
		job->out_w = s->rect ? s->rect_hw[2 * b + 1] : s->spec.image_size;
		job->out_h = s->rect ? s->rect_hw[2 * b] : s->spec.image_size;
		job->resample = s->resample;
		job->shapes = (int32_t *)(base + s->shapes_offset);
		job->ratio_pad = (double *)(base + s->ratio_pad_offset);
	}
	atomic_store_explicit(&job->replaced, 0, memory_order_relaxed);
	atomic_store_explicit(&job->cancelled, false, memory_order_relaxed);
}

/* Queue the prepared job of `slot`; copying from `src` if given. */
static bool job_submit(struct session *s, uint32_t slot, const struct slot_source *src)
{
	struct batch_job *job = &s->jobs[slot];

	if (src) {
		job->copy_from = ring_slot(src->session->ring, src->slot);
		job->source_owner = src->session;
		job->source_slot = src->slot;
		atomic_store_explicit(&job->replaced,
				      atomic_load_explicit(&src->session->jobs[src->slot].replaced, memory_order_relaxed),
				      memory_order_relaxed);
	}
	if (!src && job->fetches && s->d->prefetch) {
		/* A remote data set: fetch what the cache lacks first; the job
		 * is queued when it has arrived (session_fetched). */
		int r = prefetch_start(s->d->prefetch, job);

		if (r == 1) {
			s->slot_state[slot] = SLOT_FILLING;
			s->inflight++;
			return true;
		}
	}
	if (pool_submit(s->d->pool, job) < 0) {
		s->d->pool_full = true;
		if (job->fetches)
			prefetch_release(job);
		return false;
	}
	if (src) {
		src->session->pins[src->slot]++;
		src->session->refs++;
	}
	s->slot_state[slot] = SLOT_FILLING;
	s->inflight++;
	return true;
}

/* A WAITING slot: copy once the source is filled, decode ourselves if the
 * source went away (cancelled, or its slot moved on). */
static void resolve_waiting(struct session *s, uint32_t slot)
{
	struct slot_source src = s->waiting_on[slot];
	uint64_t b = s->jobs[slot].batch_index;
	bool valid = slot_has_batch(src.session, src.slot, b) && same_group(src.session, s);

	if (valid && src.session->slot_state[src.slot] == SLOT_FILLING)
		return;
	if (!job_submit(s, slot, valid ? &src : NULL))
		return;
	source_put(src.session, src.slot, false);
}

static void session_schedule(struct session *s)
{
	struct daemon *d = s->d;

	if (!s->conn || d->stopping)
		return;
	for (uint32_t slot = 0; slot < s->ring->slot_count && !d->pool_full; slot++) {
		struct slot_source src;
		uint64_t b = s->next_schedule;

		if (s->slot_state[slot] == SLOT_WAITING) {
			resolve_waiting(s, slot);
			continue;
		}
		if (s->slot_state[slot] != SLOT_FREE || b >= s->batches_per_epoch)
			continue;
		job_prepare(s, slot, b);
		if (s->coordinated && group_source(s, b, &src)) {
			if (src.session->slot_state[src.slot] == SLOT_FILLING) {
				/* Made once: wait for the other member's job. */
				s->slot_state[slot] = SLOT_WAITING;
				s->waiting_on[slot] = src;
				src.session->refs++;
				s->next_schedule++;
				continue;
			}
			if (!job_submit(s, slot, &src))
				return;
		} else if (!job_submit(s, slot, NULL)) {
			return;
		}
		s->next_schedule++;
	}
}

/* After a coordinated member's job, the others may copy or stop waiting. */
static void group_schedule(struct session *s)
{
	for (struct conn *c = s->d->conns; c; c = c->next)
		if (c->session && c->session != s && same_group(c->session, s))
			session_schedule(c->session);
}

/* Forget s's WAITING slots (epoch change or detach). */
static void drop_waiting(struct session *s)
{
	for (uint32_t slot = 0; slot < s->ring->slot_count; slot++) {
		if (s->slot_state[slot] != SLOT_WAITING)
			continue;
		s->slot_state[slot] = SLOT_FREE;
		source_put(s->waiting_on[slot].session, s->waiting_on[slot].slot, false);
	}
}

/* A slot the client no longer sees: free, or draining while copies read it.
 * Its device slot is free to be written once the client's release word has
 * reached the release's count (the stream waits on it). */
static void slot_retire(struct session *s, uint32_t slot)
{
	if (s->gpu) {
		struct devring *dr = gpu_ring_devring(s->gpu);

		if (devring_state(dr, slot) == DEVSLOT_CLIENT)
			devring_release(dr, slot);
		else if (devring_state(dr, slot) == DEVSLOT_READY)
			devring_drop(dr, slot);
	}
	s->slot_state[slot] = s->pins[slot] ? SLOT_DRAINING : SLOT_FREE;
}

/* Announce filled batches in order, then the end of the epoch. */
static void session_deliver(struct session *s)
{
	struct daemon *d = s->d;

	while (s->conn && s->next_deliver < s->batches_per_epoch) {
		Stoker__Message msg = STOKER__MESSAGE__INIT;
		Stoker__BatchReady br = STOKER__BATCH_READY__INIT;
		uint32_t slot;

		for (slot = 0; slot < s->ring->slot_count; slot++)
			if (s->slot_state[slot] == SLOT_READY && s->jobs[slot].batch_index == s->next_deliver)
				break;
		if (slot == s->ring->slot_count)
			return;
		br.slot = slot;
		br.generation = s->generation;
		br.epoch = s->epoch;
		br.batch_index = s->next_deliver;
		br.count = s->jobs[slot].count;
		br.replaced = atomic_load_explicit(&s->jobs[slot].replaced, memory_order_relaxed);
		br.has_replaced = true;
		br.has_boxes = s->detect;
		br.boxes = s->jobs[slot].box_count;
		br.has_decode_error_files = true;
		br.decode_error_files = session_decode_error_files(s);
		if (s->rect) {
			br.has_height = br.has_width = true;
			br.height = s->jobs[slot].out_h;
			br.width = s->jobs[slot].out_w;
		}
		msg.body_case = STOKER__MESSAGE__BODY_BATCH_READY;
		msg.batch_ready = &br;
		s->slot_state[slot] = SLOT_CLIENT;
		if (s->gpu)
			devring_deliver(gpu_ring_devring(s->gpu), slot);
		s->next_deliver++;
		s->batches++;
		s->images += br.count;
		d->batches_served++;
		d->images_served += br.count;
		if (conn_send(s->conn, &msg, -1) < 0)
			return;
	}
	if (s->conn && s->next_deliver == s->batches_per_epoch && !s->end_sent) {
		Stoker__Message msg = STOKER__MESSAGE__INIT;
		Stoker__EndOfEpoch eoe = STOKER__END_OF_EPOCH__INIT;

		s->end_sent = true;
		eoe.generation = s->generation;
		eoe.epoch = s->epoch;
		msg.body_case = STOKER__MESSAGE__BODY_END_OF_EPOCH;
		msg.end_of_epoch = &eoe;
		conn_send(s->conn, &msg, -1);
	}
}

/* Start producing `epoch` from batch `first`, as generation `gen`. */
static int session_start_epoch(struct session *s, uint64_t epoch, uint32_t gen, uint64_t first)
{
	uint64_t *order;
	int r;

	r = plan_epoch_order(&s->plan, epoch, &order);
	if (r < 0)
		return r;
	free(s->order);
	s->order = order;
	drop_waiting(s);
	for (uint32_t slot = 0; slot < s->ring->slot_count; slot++) {
		if (s->slot_state[slot] == SLOT_FILLING)
			atomic_store_explicit(&s->jobs[slot].cancelled, true, memory_order_relaxed);
		else if (s->slot_state[slot] == SLOT_READY)
			slot_retire(s, slot);
	}
	s->epoch = epoch;
	s->generation = gen;
	s->next_schedule = s->next_deliver = first;
	s->end_sent = false;
	session_deliver(s);
	session_schedule(s);
	return 0;
}

/* An epoch may start at any batch up to its end (resume at the end: the
 * epoch is over). Says why not to the client. */
static bool first_batch_ok(struct conn *c, const struct session *s, uint64_t first)
{
	if (first <= s->batches_per_epoch)
		return true;
	conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "first_batch %llu is past the epoch's %llu batches",
			(unsigned long long)first, (unsigned long long)s->batches_per_epoch);
	return false;
}

/* Send Attached with the host ring's fd (and for a CUDA client DeviceRing
 * with the device ring's), then start producing. */
static void session_announce(struct session *s, int fd)
{
	struct conn *c = s->conn;
	struct dataset *ds = s->ds;
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__Attached at = STOKER__ATTACHED__INIT;
	int r;

	at.slot_count = s->ring->slot_count;
	at.slot_bytes = s->ring->slot_bytes;
	at.ring_bytes = s->ring->bytes;
	at.dataset_samples = ds->count;
	at.num_classes = ds->num_classes;
	at.samples_per_epoch = plan_samples_per_epoch(&s->plan);
	at.batches_per_epoch = s->batches_per_epoch;
	at.batch_size = s->plan.batch_size;
	at.image_height = at.image_width = s->image_side;
	at.channels = 3;
	at.labels_offset = s->labels_offset;
	at.indices_offset = s->indices_offset;
	at.epoch = s->attach_epoch;
	at.has_dtype = true;
	at.dtype = (Stoker__DType)s->out_dtype;
	if (ds->shards) {
		at.has_shards = true;
		at.shards = ds->shards->n;
	}
	if (s->detect) {
		size_t names_bytes = 0;

		at.has_task = at.has_boxes_offset = at.has_max_boxes = at.has_label_errors = true;
		at.task = STOKER__TASK__DETECT;
		at.boxes_offset = s->boxes_offset;
		at.max_boxes = s->max_boxes;
		at.label_errors = ds->label_errors;
		at.has_shapes_offset = at.has_ratio_pad_offset = true;
		at.shapes_offset = s->shapes_offset;
		at.ratio_pad_offset = s->ratio_pad_offset;
		/* Names while they fit a frame; the classes themselves are numbers. */
		for (uint32_t i = 0; ds->class_names && i < ds->num_classes; i++) {
			names_bytes += strlen(ds->class_names[i]) + 4;
			if (names_bytes > SESSION_MAX_CLASS_NAMES_BYTES)
				break;
			at.n_class_names = i + 1;
		}
		at.class_names = ds->class_names;
	}
	msg.body_case = STOKER__MESSAGE__BODY_ATTACHED;
	msg.attached = &at;

	session_hold(s);
	if (conn_send(c, &msg, fd) < 0)
		goto out; /* the connection closed and detached the session */
	if (s->gpu && device_send_ring(s) < 0)
		goto out;
	conn_log(LOG_LVL_INFO, c, "attached to %s (%llu samples), rank %u/%u, batch %u, %s %u, seed %llu%s%s",
		 ds->root, (unsigned long long)ds->count, s->plan.rank,
		 s->plan.world_size, s->plan.batch_size, transform_name(s->transform), s->spec.image_size,
		 (unsigned long long)s->plan.seed, s->gpu ? ", on " : "", s->gpu ? s->device : "");
	r = session_start_epoch(s, s->attach_epoch, 0, s->attach_first);
	if (r < 0)
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "cannot plan epoch: %s", strerror(-r));
out:
	session_unhold(s);
}

/* ---- CUDA delivery (gpu.h) ---- */

/* The device ring's fd, and where its release words are (right after Attached). */
static int device_send_ring(struct session *s)
{
	struct gpu_ring_export *ex = gpu_ring_export(s->gpu);
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__DeviceRing dr = STOKER__DEVICE_RING__INIT;
	int fd;

	dr.device = s->device;
	dr.slot_count = s->ring->slot_count;
	dr.slot_bytes = ex->slot_bytes;
	dr.ring_bytes = ex->ring_bytes;
	dr.has_release_words_offset = true;
	dr.release_words_offset = ex->release_words_offset;
	dr.device_uuid = (ProtobufCBinaryData){GPU_UUID_BYTES, ex->uuid};
	msg.body_case = STOKER__MESSAGE__BODY_DEVICE_RING;
	msg.device_ring = &dr;
	fd = ex->fd; /* the frame queue takes it */
	ex->fd = -1;
	return conn_send(s->conn, &msg, fd);
}

/* A copy into the device slot is done: the batch is ready, in order. */
static void device_copied(void *owner, uint32_t slot, int err)
{
	struct session *s = owner;
	struct devring *dr = gpu_ring_devring(s->gpu);

	session_hold(s);
	if (s->slot_state[slot] == SLOT_COPYING) {
		bool current = s->conn && s->jobs[slot].generation == s->generation &&
			       !atomic_load_explicit(&s->jobs[slot].cancelled, memory_order_relaxed);

		if (err < 0 && s->conn) {
			/* The GPU failed: the batch is lost, so the session ends
			 * (never a gap in the client's sequence). */
			conn_log(LOG_LVL_ERR, s->conn, "%s: the copy into device slot %u failed: %s",
				 s->device, slot, strerror(-err));
			conn_send_error(s->conn, STOKER__ERROR_CODE__DEVICE_UNAVAILABLE,
					"%s: the copy into GPU memory failed (%s)", s->device,
					*gpu_ring_failure(s->gpu) ? gpu_ring_failure(s->gpu) : strerror(-err));
			conn_close(s->conn, "device copy failed");
		}
		if (err == 0 && current) {
			s->slot_state[slot] = SLOT_READY;
		} else {
			if (err == 0)
				devring_drop(dr, slot);
			/* Coordinated members may still be copying its host slot. */
			s->slot_state[slot] = s->pins[slot] ? SLOT_DRAINING : SLOT_FREE;
		}
		if (s->conn) {
			session_deliver(s);
			session_schedule(s);
		}
	}
	session_unhold(s);
}

static void device_closed(void *owner)
{
	struct session *s = owner;

	s->gpu = NULL;
	s->d->device_bytes -= s->device_bytes;
	s->device_bytes = 0;
	session_maybe_free(s);
}

static void device_opened(void *owner, struct gpu_ring *r, int err, const char *why)
{
	struct session *s = owner;
	struct conn *c = s->conn;
	int fd;

	s->device_opening = false;
	if (r) {
		s->gpu = r;
		gpu_ring_set_handlers(r, device_copied, device_closed);
		s->device_bytes = gpu_ring_bytes(r);
		s->d->device_bytes += s->device_bytes;
	}
	session_hold(s);
	if (!c)
		goto out; /* the client left meanwhile: the ring closes with the session */
	if (!r) {
		conn_log(LOG_LVL_INFO, c, "attach to %s refused: %s", s->device, why);
		conn_send_error(c, err == -ENOSPC ? STOKER__ERROR_CODE__RESOURCE_EXHAUSTED
						  : STOKER__ERROR_CODE__DEVICE_UNAVAILABLE,
				"%s", why);
		c->session = NULL;
		s->conn = NULL;
		goto out;
	}
	fd = s->pending_fd;
	s->pending_fd = -1;
	session_announce(s, fd);
out:
	session_unhold(s);
}

static const struct gpu_callbacks device_callbacks = {.opened = device_opened};

/* Ask the CUDA thread for the device ring; false once the client was told
 * why not. */
static int device_open(struct session *s, const struct attach_request *req)
{
	struct daemon *d = s->d;
	struct gpu_ring_params p;
	int r;

	memset(&p, 0, sizeof(p));
	snprintf(p.device, sizeof(p.device), "%s", s->device);
	memcpy(p.uuid, req->uuid, sizeof(p.uuid));
	p.has_uuid = req->has_uuid;
	p.slot_count = s->ring->slot_count;
	p.batch_size = s->plan.batch_size;
	/* Rectangular batches (uint8 only): slots sized for the largest shape,
	 * each copy covering it; a batch's own h x w images come first. */
	p.image_size = s->image_side;
	p.dtype = s->out_dtype;
	if (p.dtype != DTYPE_UINT8) {
		struct transform_spec out = s->spec;

		out.dtype = s->out_dtype;
		transform_lut_build(&out, &p.lut);
	}
	p.host_base = s->ring->base;
	p.host_bytes = s->ring->bytes;
	p.host_slot_bytes = s->ring->slot_bytes;
	p.release_words = (uint64_t *)s->ring->tail;
	p.release_words_offset = s->ring->bytes;
	p.budget = d->cfg.gpu_memory_budget;
	r = d->gpu ? gpu_ring_open(d->gpu, &p, &device_callbacks, s) : -ENOSYS;
	if (r < 0) {
		conn_send_error(s->conn, STOKER__ERROR_CODE__DEVICE_UNAVAILABLE, "%s: cannot set up GPU delivery: %s",
				s->device, strerror(-r));
		return r;
	}
	s->device_opening = true;
	return 0;
}

static void session_create(struct conn *c, struct attach_request *req, struct dataset *ds)
{
	struct daemon *d = c->d;
	const Stoker__Attach *a = &req->params;
	struct session *s;
	uint64_t image_bytes, slot_bytes, ring_bytes, fit_bytes = 0;
	uint32_t rect_side = req->rect ? (uint32_t)rect_max_side(a->image_size, req->stride, req->pad) : a->image_size;
	uint32_t prefetch = a->prefetch ? a->prefetch : d->cfg.prefetch, slots;
	int r, fd;

	s = calloc(1, sizeof(*s));
	if (!s) {
		datasets_put(d, ds);
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	s->d = d;
	s->ds = ds;
	s->pid = (uint32_t)c->pid;
	s->pending_fd = -1;
	s->image_side = rect_side;
	snprintf(s->device, sizeof(s->device), "%s", req->device);
	s->plan = (struct plan_spec){
		.samples = ds->count,
		.seed = a->seed,
		.rank = a->rank,
		.world_size = a->world_size,
		.batch_size = a->batch_size,
		.shuffle = a->shuffle,
		.drop_last = a->drop_last,
	};
	if (a->shard_order && !ds->shards) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT,
				"shard order needs a data set of tar shards; %s is loose files", ds->root);
		goto fail;
	}
	if (a->shard_order) {
		s->plan.shard_starts = ds->shards->starts;
		s->plan.shards = ds->shards->n;
		s->plan.shuffle_buffer = a->shuffle_buffer;
	}
	s->spec.kind = a->transform == STOKER__TRANSFORM__CENTER_CROP ? TRANSFORM_CENTER_CROP
								       : TRANSFORM_RANDOM_RESIZED_CROP;
	s->spec.image_size = a->image_size;
	s->spec.dtype = (enum sample_dtype)a->dtype;
	/* Training crops take the speed; evaluation keeps PIL's pixels. */
	s->spec.dct_scaling = a->has_dct_scaling ? a->dct_scaling : s->spec.kind == TRANSFORM_RANDOM_RESIZED_CROP;
	s->out_dtype = s->spec.dtype;
	/* On a device, the GPU converts: the host ring carries uint8, 4x fewer
	 * bytes over PCIe than float32. */
	if (session_on_device(s))
		s->spec.dtype = DTYPE_UINT8;
	s->coordinated = a->coordinated;
	s->detect = a->task == STOKER__TASK__DETECT;
	if (s->detect) {
		s->detect_transform = a->transform == STOKER__TRANSFORM__LETTERBOX ? DETECT_LETTERBOX : DETECT_TRAIN;
		s->detect_params = req->detect;
		s->close_mosaic = req->close_mosaic;
		s->train_epochs = req->train_epochs;
		s->max_boxes = req->max_boxes;
		s->resample = req->resample;
		s->rect = req->rect;
	}
	for (int ch = 0; ch < 3; ch++) {
		s->spec.mean[ch] = a->n_mean == 3 ? a->mean[ch] : imagenet_mean[ch];
		s->spec.std[ch] = a->n_std == 3 ? a->std[ch] : imagenet_std[ch];
	}
	if (s->rect) {
		/* The plan's order: the data set by aspect ratio, fixed. */
		if (rect_order(ds->sizes, ds->count, &s->rect_order) < 0) {
			conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory for the rect order");
			goto fail;
		}
		s->plan.fixed = s->rect_order;
	}
	if (plan_validate(&s->plan) < 0) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT,
				"data set %s has %llu samples: with world_size %u, batch_size %u and drop_last, rank %u "
				"gets no batch",
				ds->root, (unsigned long long)ds->count, a->world_size, a->batch_size, a->rank);
		goto fail;
	}

	/* Slot layout: images, then labels and indices, each 64-byte aligned;
	 * slots page aligned. Rectangular batches: room for the largest shape. */
	image_bytes = (uint64_t)a->batch_size * transform_output_bytes(&s->spec);
	if (s->rect)
		image_bytes = (uint64_t)a->batch_size * rect_side * rect_side * 3;
	s->labels_offset = align_up(image_bytes, 64);
	s->indices_offset = s->labels_offset + (size_t)a->batch_size * sizeof(int64_t);
	slot_bytes = s->indices_offset + (size_t)a->batch_size * sizeof(int64_t);
	if (s->detect) {
		/* Then the boxes: room for max_boxes rows per image. */
		s->boxes_offset = align_up(slot_bytes, 64);
		slot_bytes = s->boxes_offset + (uint64_t)a->batch_size * s->max_boxes * DETECT_BOX_FLOATS * sizeof(float);
		/* Then each image's shapes and ratio_pad. */
		s->shapes_offset = align_up(slot_bytes, 64);
		s->ratio_pad_offset = align_up(s->shapes_offset + (size_t)a->batch_size * 4 * sizeof(int32_t), 64);
		slot_bytes = s->ratio_pad_offset + (size_t)a->batch_size * 4 * sizeof(double);
	}
	slot_bytes = align_up(slot_bytes, (size_t)sysconf(_SC_PAGESIZE));
	slots = prefetch + 1; /* the batch the client holds, plus those ready ahead */
	ring_bytes = slot_bytes * slots;
	/* Mosaic: each slot's batch images, shared as partners (workers.c). */
	if (s->detect && s->detect_transform == DETECT_TRAIN)
		fit_bytes = (uint64_t)slots * a->batch_size * a->image_size * a->image_size * 3;
	if (ring_bytes > d->cfg.max_ring_bytes) {
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
				"a ring of %u slots x %llu bytes exceeds max_ring_bytes (%llu): lower batch_size, "
				"image_size or prefetch",
				slots, (unsigned long long)slot_bytes, (unsigned long long)d->cfg.max_ring_bytes);
		goto fail;
	}
	/* One budget for the node: the cache's share plus every ring. */
	if (d->ring_bytes + d->fit_bytes + ring_bytes + fit_bytes + d->cfg.cache_bytes > d->cfg.memory_budget) {
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
				"a %llu-byte ring%s does not fit the node's memory_budget (%llu bytes): the cache takes %llu "
				"and %u clients' rings %llu; lower batch_size, image_size or prefetch, or wait",
				(unsigned long long)(ring_bytes + fit_bytes),
				fit_bytes ? " (with the mosaic's partner images)" : "",
				(unsigned long long)d->cfg.memory_budget, (unsigned long long)d->cfg.cache_bytes, d->nconns,
				(unsigned long long)(d->ring_bytes + d->fit_bytes));
		goto fail;
	}
	if (fit_bytes) {
		/* Populated now, as rings are, so workers take no first-touch faults. */
		void *m = mmap(NULL, fit_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

		if (m != MAP_FAILED) {
			s->fit_pixels = m;
			s->fit_bytes = fit_bytes; /* session_free() unmaps and gives it back */
			d->fit_bytes += fit_bytes;
		}
		s->fit_tables = calloc(slots, sizeof(*s->fit_tables));
		s->fit_entries = calloc((size_t)slots * a->batch_size, sizeof(*s->fit_entries));
		if (!s->fit_pixels || !s->fit_tables || !s->fit_entries) {
			conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
					"out of memory for the mosaic's %llu bytes of partner images",
					(unsigned long long)fit_bytes);
			goto fail;
		}
		for (uint32_t i = 0; i < slots; i++)
			s->fit_tables[i] = (struct fit_table){
				.entries = s->fit_entries + (size_t)i * a->batch_size,
				.pixels = s->fit_pixels + (size_t)i * a->batch_size * a->image_size * a->image_size * 3,
			};
	}
	/* A device ring's release words ride in the host ring's tail (gpu.h). */
	r = ring_create_tail(slots, slot_bytes, session_on_device(s) ? GPU_RELEASE_WORDS_BYTES(slots) : 0, &s->ring);
	if (r < 0) {
		conn_log(LOG_LVL_WARNING, c, "cannot create a %llu-byte ring: %s",
			 (unsigned long long)ring_bytes, strerror(-r));
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "cannot create a %llu-byte ring: %s",
				(unsigned long long)ring_bytes, strerror(-r));
		goto fail;
	}
	d->ring_bytes += s->ring->bytes;
	s->slot_state = calloc(slots, sizeof(*s->slot_state));
	s->waiting_on = calloc(slots, sizeof(*s->waiting_on));
	s->pins = calloc(slots, sizeof(*s->pins));
	s->jobs = calloc(slots, sizeof(*s->jobs));
	s->job_orders = calloc((size_t)slots * a->batch_size, sizeof(*s->job_orders));
	if (ds->remote) {
		s->fetches = calloc((size_t)slots * a->batch_size, sizeof(*s->fetches));
		for (uint32_t i = 0; s->fetches && s->jobs && i < slots; i++)
			s->jobs[i].fetches = s->fetches + (size_t)i * a->batch_size;
	}
	s->dataset_name = strdup(ds->root);
	if (!s->slot_state || !s->waiting_on || !s->pins || !s->jobs || !s->job_orders || !s->dataset_name ||
	    (ds->remote && !s->fetches)) {
		conn_log(LOG_LVL_WARNING, c,
			 "attach failed: out of memory for a session of %u slots x %u samples", slots,
			 a->batch_size);
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
				"out of memory for a session of %u slots x %u samples", slots, a->batch_size);
		goto fail;
	}
	s->batches_per_epoch = plan_batches_per_epoch(&s->plan);
	if (s->rect) {
		uint64_t first, end;

		s->rect_hw = calloc(s->batches_per_epoch, 2 * sizeof(*s->rect_hw));
		if (!s->rect_hw) {
			conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory for the batch shapes");
			goto fail;
		}
		/* Each of this rank's batches lies in one batch of the whole
		 * order (whole batches per rank), whose images set its shape. */
		plan_fixed_range(&s->plan, &first, &end);
		for (uint64_t b = 0; b < s->batches_per_epoch; b++) {
			uint64_t g = (first + b * a->batch_size) / a->batch_size * a->batch_size;
			uint64_t last = g + a->batch_size < ds->count ? g + a->batch_size - 1 : ds->count - 1;

			rect_batch_shape(ds->sizes, s->rect_order, g, last, a->image_size, req->stride, req->pad,
					 &s->rect_hw[2 * b], &s->rect_hw[2 * b + 1]);
		}
	}
	if (a->expect_samples && a->expect_samples != ds->count) {
		conn_send_error(c, STOKER__ERROR_CODE__FAILED_PRECONDITION,
				"cannot resume: the checkpoint was taken on %llu samples, %s now has %llu",
				(unsigned long long)a->expect_samples, ds->root, (unsigned long long)ds->count);
		goto fail;
	}
	if (!first_batch_ok(c, s, a->first_batch))
		goto fail;
	fd = ring_reader_fd(s->ring);
	if (fd < 0) {
		conn_log(LOG_LVL_WARNING, c, "cannot reopen its ring read-only: %s", strerror(-fd));
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "cannot reopen the ring read-only: %s",
				strerror(-fd));
		goto fail;
	}
	s->attach_epoch = a->epoch;
	s->attach_first = a->first_batch;
	s->transform = a->transform;
	s->conn = c;
	c->session = s;
	if (session_on_device(s)) {
		/* Attached waits for the device ring (device_opened). */
		s->pending_fd = fd;
		if (device_open(s, req) < 0) {
			c->session = NULL;
			s->conn = NULL;
			goto fail;
		}
		return;
	}
	session_announce(s, fd);
	return;
fail:
	session_free(s);
}

struct label_log {
	const char *dataset;
	uint64_t errors;
};

/* label_report_fn: the first few errors of a scan, each with file and line. */
static void log_label_error(void *ctx, const char *path, unsigned long line, const char *why)
{
	struct label_log *l = ctx;

	if (l->errors++ < SESSION_MAX_LABEL_LOGS) {
		if (line)
			log_warning("data set %s: %s:%lu: %s; object dropped", l->dataset, path, line, why);
		else
			log_warning("data set %s: %s: %s; its objects dropped", l->dataset, path, why);
	}
}

/* What a scan of tar shards found. */
static void log_shards(const struct attach_request *req)
{
	const struct shardset *set = req->err == 0 ? req->result->shards : NULL;

	if (set)
		log_info("data set %s: %llu samples in %u tar shard%s (%llu indexed now, the rest from the index "
			 "directory); %llu keys without an image skipped",
			 req->path, (unsigned long long)req->result->count, set->n, set->n == 1 ? "" : "s",
			 (unsigned long long)set->indexed, (unsigned long long)set->skipped);
}

/* Runs on libuv's thread pool: the scan, and for rect the image sizes
 * (of a data set already open, or of the one just scanned). */
static void attach_scan(uv_work_t *w)
{
	struct attach_request *req = w->data;
	struct label_log l = {.dataset = req->path};
	const struct dataset *ds = req->existing;

	if (!ds && url_is_remote(req->path) && req->params.task != STOKER__TASK__DETECT) {
		req->err = dataset_open_remote(req->path, SESSION_MAX_SAMPLES, req->d->fetch, &req->s3, &req->result,
					       req->errbuf, sizeof(req->errbuf));
		if (req->err == 0)
			log_info("data set %s: %llu objects listed", req->path, (unsigned long long)req->result->count);
		return;
	}
	if (!ds && req->params.task != STOKER__TASK__DETECT) {
		req->err = dataset_open(req->path, SESSION_MAX_SAMPLES, &req->result, req->errbuf, sizeof(req->errbuf));
		log_shards(req);
		return;
	}
	if (!ds) {
		if (url_is_remote(req->path))
			req->err = dataset_open_remote_detect(req->path, req->split, SESSION_MAX_SAMPLES,
							      req->d->fetch, &req->s3, log_label_error, &l,
							      &req->result, req->errbuf, sizeof(req->errbuf));
		else
			req->err = dataset_open_detect(req->path, req->split, SESSION_MAX_SAMPLES, log_label_error, &l,
						       &req->result, req->errbuf, sizeof(req->errbuf));
		log_shards(req);
		if (req->err < 0)
			return;
		ds = req->result;
		log_info("data set %s: %llu images, %llu objects, %u classes; %llu without a label file, %llu label "
			 "errors%s",
			 req->path, (unsigned long long)ds->count, (unsigned long long)ds->box_off[ds->count],
			 ds->num_classes, (unsigned long long)ds->label_files_missing,
			 (unsigned long long)ds->label_errors,
			 l.errors > SESSION_MAX_LABEL_LOGS ? " (only the first ones logged)" : "");
	}
	if (req->rect) {
		uint64_t unknown = 0;

		req->err = dataset_read_sizes(ds, &req->sizes);
		if (req->err < 0) {
			snprintf(req->errbuf, sizeof(req->errbuf), "data set %.400s: out of memory for its image sizes",
				 req->path);
			return;
		}
		for (uint64_t i = 0; i < ds->count; i++)
			unknown += req->sizes[2 * i] == 0;
		log_info("data set %s: image sizes read for rectangular batches; %llu without a readable image header "
			 "(taken as square)",
			 req->path, (unsigned long long)unknown);
	}
}

/* Drop the data set an attach request holds (it may be in the list). */
static void request_put(struct attach_request *req, struct dataset *ds)
{
	if (ds == req->existing)
		datasets_put(req->d, ds);
	else
		dataset_unref(ds);
}

static void attach_scanned(uv_work_t *w, int status)
{
	struct attach_request *req = w->data;
	struct conn *c = req->conn;
	struct dataset *ds = req->existing ? req->existing : req->result, *existing;

	if (c)
		c->attaching = NULL;
	if (!c || c->closing || status < 0) {
		request_put(req, ds);
		goto out;
	}
	if (req->err < 0) {
		conn_log(LOG_LVL_INFO, c, "attach failed: %s", req->errbuf);
		conn_send_error(c, req->err == -ENOENT	   ? STOKER__ERROR_CODE__NOT_FOUND
				   : req->err == -ENOMEM ? STOKER__ERROR_CODE__RESOURCE_EXHAUSTED
				   : req->err == -EACCES ? STOKER__ERROR_CODE__PERMISSION_DENIED
							 : STOKER__ERROR_CODE__INVALID_ARGUMENT,
				"%s", req->errbuf);
		request_put(req, ds); /* the sizes can fail after the scan worked */
		goto out;
	}
	if (!req->existing) {
		/* Another client may have opened the same data set meanwhile. */
		existing = datasets_find(req->d, ds->key);
		if (existing) {
			dataset_unref(ds);
			ds = existing;
		} else if (datasets_add(req->d, ds) < 0) {
			dataset_unref(ds);
			conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory");
			goto out;
		}
	}
	/* The sizes are set once, then only read (on this thread). */
	if (req->sizes && !ds->sizes) {
		ds->sizes = req->sizes;
		req->sizes = NULL;
	}
	if (req->rect && !ds->sizes) {
		datasets_put(req->d, ds);
		conn_send_error(c, STOKER__ERROR_CODE__INTERNAL, "the data set's image sizes are missing");
		goto out;
	}
	session_create(c, req, ds);
out:
	free(req->sizes);
	free(req->params.dataset);
	free(req);
}

/* Ultralytics' defaults, overridden by what the client set. */
static void detect_options(const Stoker__DetectOptions *o, struct detect_params *p)
{
	detect_params_default(p);
	if (!o)
		return;
#define TAKE(name)               \
	if (o->has_##name)       \
		p->name = o->name;
	TAKE(hsv_h) TAKE(hsv_s) TAKE(hsv_v) TAKE(degrees) TAKE(translate) TAKE(scale) TAKE(shear) TAKE(perspective)
	TAKE(flipud) TAKE(fliplr) TAKE(mosaic) TAKE(mixup)
#undef TAKE
}

/* The task, its transform and the options only it takes; false once the
 * client has been told what is wrong. */
static bool attach_task_ok(struct conn *c, const Stoker__Attach *a)
{
	bool detect = a->task == STOKER__TASK__DETECT;
	const Stoker__DetectOptions *o = a->detect;
	struct detect_params p;
	char why[160];

	if (a->task != STOKER__TASK__CLASSIFY && !detect) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "unknown task %d", (int)a->task);
		return false;
	}
	if (a->transform != STOKER__TRANSFORM__RANDOM_RESIZED_CROP && a->transform != STOKER__TRANSFORM__CENTER_CROP &&
	    a->transform != STOKER__TRANSFORM__LETTERBOX && a->transform != STOKER__TRANSFORM__MOSAIC) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "unknown transform %d", (int)a->transform);
		return false;
	}
	if (detect != (a->transform == STOKER__TRANSFORM__LETTERBOX || a->transform == STOKER__TRANSFORM__MOSAIC)) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "transform %s is not for task %s (%s)",
				transform_name(a->transform), detect ? "detect" : "classify",
				detect ? "detect takes letterbox or mosaic"
				       : "classify takes random_resized_crop or center_crop");
		return false;
	}
	if (!detect) {
		if (o) {
			conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT,
					"detection options given for task classify");
			return false;
		}
		return true;
	}
	if (a->has_dct_scaling) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "dct_scaling is an option of task classify");
		return false;
	}
	if (a->dtype != STOKER__DTYPE__UINT8 || a->coordinated) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "task detect serves %s",
				a->coordinated ? "no coordinated groups (each job draws its own mosaics)"
					       : "uint8 images only");
		return false;
	}
	detect_options(o, &p);
	if (detect_params_check(&p, why, sizeof(why)) < 0) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "%s", why);
		return false;
	}
	if (o && o->has_max_boxes && (o->max_boxes == 0 || o->max_boxes > SESSION_MAX_BOXES)) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "max_boxes %u is not in 1..%u", o->max_boxes,
				SESSION_MAX_BOXES);
		return false;
	}
	if (o && o->has_stride && (o->stride == 0 || o->stride > RECT_MAX_STRIDE)) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "stride %u is not in 1..%u", o->stride,
				RECT_MAX_STRIDE);
		return false;
	}
	if (o && o->has_pad && !(o->pad >= 0 && o->pad <= RECT_MAX_PAD)) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "pad %g is not in 0..%g", o->pad, RECT_MAX_PAD);
		return false;
	}
	if (o && o->has_resample && o->resample != STOKER__RESAMPLE__RESAMPLE_DEFAULT &&
	    o->resample != STOKER__RESAMPLE__RESAMPLE_ANTIALIAS && o->resample != STOKER__RESAMPLE__RESAMPLE_CV2) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "unknown resample %d", (int)o->resample);
		return false;
	}
	if (o && o->rect) {
		/* BaseDataset.set_rectangle's batches, for validation */
		const char *no = a->transform != STOKER__TRANSFORM__LETTERBOX ? "takes transform letterbox"
				  : a->shuffle				   ? "needs shuffle off (batches come in aspect-ratio order)"
				  : a->drop_last			   ? "keeps every batch: drop_last must be off"
				  : rect_max_side(a->image_size, o->stride, o->pad) > DETECT_MAX_SIZE
					  ? "with this image_size, stride and pad makes batches over 16384 pixels"
					  : NULL;

		if (no) {
			conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "rect %s", no);
			return false;
		}
	}
	if (o && o->split && (!o->split[0] || strlen(o->split) > 32 || strchr(o->split, '/'))) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "split '%.40s' is not a data.yaml key",
				o->split);
		return false;
	}
	return true;
}

/* "cpu" or "cuda:N" (N: 0..1023, the client's numbering), and a UUID of
 * the right size; false once the client has been told what is wrong. */
static bool device_ok(struct conn *c, const Stoker__Attach *a)
{
	const char *dev = a->device;
	int ordinal = -1;

	if (dev && cudadrv_parse_device(dev, &ordinal) < 0) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "device '%.40s' is not cpu or cuda:N", dev);
		return false;
	}
	if (ordinal < 0) {
		if (a->has_device_uuid) {
			conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "device_uuid given for device cpu");
			return false;
		}
		return true;
	}
	if (a->has_device_uuid && a->device_uuid.len != GPU_UUID_BYTES) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "device_uuid has %zu bytes, not %u",
				a->device_uuid.len, GPU_UUID_BYTES);
		return false;
	}
	return true;
}

void session_handle_attach(struct conn *c, const Stoker__Attach *a)
{
	struct daemon *d = c->d;
	struct attach_request *req;
	char real[PATH_MAX];
	struct dataset *ds;
	uint32_t prefetch = a->prefetch ? a->prefetch : d->cfg.prefetch;
	int r;

	if (c->session || c->attaching) {
		conn_send_error(c, STOKER__ERROR_CODE__FAILED_PRECONDITION, "already attached");
		return;
	}
	if (!attach_task_ok(c, a))
		return;
	if (a->dtype != STOKER__DTYPE__UINT8 && a->dtype != STOKER__DTYPE__FLOAT32 && a->dtype != STOKER__DTYPE__FLOAT16) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "unknown dtype %d", (int)a->dtype);
		return;
	}
	if ((a->n_mean != 0 && a->n_mean != 3) || (a->n_std != 0 && a->n_std != 3)) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "mean and std take 3 values each (one per channel)");
		return;
	}
	for (size_t ch = 0; ch < a->n_std; ch++) {
		if (!(a->std[ch] > 0.0f) || !isfinite(a->std[ch]) || (ch < a->n_mean && !isfinite(a->mean[ch]))) {
			conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "std must be positive and finite");
			return;
		}
	}
	for (size_t ch = 0; ch < a->n_mean; ch++) {
		if (!isfinite(a->mean[ch])) {
			conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "mean must be finite");
			return;
		}
	}
	if (a->batch_size == 0 || a->batch_size > d->cfg.max_batch_size) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "batch_size %u is not in 1..%u (max_batch_size)",
				a->batch_size, d->cfg.max_batch_size);
		return;
	}
	if (a->image_size == 0 || a->image_size > d->cfg.max_image_size) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "image_size %u is not in 1..%u (max_image_size)",
				a->image_size, d->cfg.max_image_size);
		return;
	}
	if (a->world_size == 0 || a->rank >= a->world_size) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT,
				"rank %u and world_size %u: need world_size >= 1 and rank < world_size", a->rank,
				a->world_size);
		return;
	}
	if (prefetch > d->cfg.max_prefetch) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "prefetch %u is over %u (max_prefetch)", prefetch,
				d->cfg.max_prefetch);
		return;
	}
	if (a->shard_order && a->shuffle_buffer > SESSION_MAX_SHUFFLE_BUFFER) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "shuffle_buffer %u is over %u samples",
				a->shuffle_buffer, SESSION_MAX_SHUFFLE_BUFFER);
		return;
	}
	if (!device_ok(c, a))
		return;
	if (!a->dataset || !a->dataset[0] || strlen(a->dataset) >= PATH_MAX) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "no data set path given");
		return;
	}
	if (url_is_remote(a->dataset)) {
		/* Objects: the URL is the data set's name (dataset.h). */
		snprintf(real, sizeof(real), "%s", a->dataset);
	} else if ((r = -dataset_realpath(a->dataset, real)) != 0) {
		conn_send_error(c, r == ENOENT ? STOKER__ERROR_CODE__NOT_FOUND : STOKER__ERROR_CODE__INVALID_ARGUMENT,
				"data set %s: %s", a->dataset, strerror(r));
		return;
	}

	req = calloc(1, sizeof(*req));
	if (!req) {
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	req->d = d;
	req->conn = c;
	req->params = *a;
	req->params.base.n_unknown_fields = 0;
	req->params.base.unknown_fields = NULL;
	/* n_mean and n_std are 0 or 3 (checked above). */
	if (a->n_mean)
		memcpy(req->mean, a->mean, sizeof(req->mean));
	if (a->n_std)
		memcpy(req->std, a->std, sizeof(req->std));
	req->params.mean = req->mean;
	req->params.std = req->std;
	req->params.dataset = strdup(real);
	req->params.detect = NULL;
	snprintf(req->s3.endpoint, sizeof(req->s3.endpoint), "%s", d->cfg.s3_endpoint);
	snprintf(req->s3.region, sizeof(req->s3.region), "%s", d->cfg.s3_region);
	snprintf(req->s3.profile, sizeof(req->s3.profile), "%s", d->cfg.s3_profile);
	snprintf(req->s3.credentials_file, sizeof(req->s3.credentials_file), "%s", d->cfg.s3_credentials_file);
	s3_config_resolve(&req->s3);
	snprintf(req->device, sizeof(req->device), "%s", a->device ? a->device : "cpu");
	req->has_uuid = a->has_device_uuid;
	if (req->has_uuid)
		memcpy(req->uuid, a->device_uuid.data, GPU_UUID_BYTES);
	req->params.device = NULL;
	req->params.has_device_uuid = false;
	req->params.device_uuid = (ProtobufCBinaryData){0, NULL};
	snprintf(req->path, sizeof(req->path), "%s", real);
	if (a->task == STOKER__TASK__DETECT) {
		const Stoker__DetectOptions *o = a->detect;

		detect_options(o, &req->detect);
		req->close_mosaic = o ? o->close_mosaic : 10;
		req->train_epochs = o ? o->epochs : 0;
		req->max_boxes = o && o->has_max_boxes ? o->max_boxes : SESSION_DEFAULT_MAX_BOXES;
		snprintf(req->split, sizeof(req->split), "%s", o && o->split ? o->split : "train");
		req->rect = o && o->rect;
		req->stride = o ? o->stride : 32;
		req->pad = o ? o->pad : 0.5;
		/* Evaluation defaults to Ultralytics' own resampling, training to the fast filter. */
		req->resample = o && o->resample == STOKER__RESAMPLE__RESAMPLE_CV2 ? FIT_CV2
				: o && o->resample == STOKER__RESAMPLE__RESAMPLE_ANTIALIAS ? FIT_ANTIALIAS
				: a->transform == STOKER__TRANSFORM__LETTERBOX ? FIT_CV2
									   : FIT_ANTIALIAS;
		snprintf(req->key, sizeof(req->key), "detect:%s:%s", req->split, real);
	} else {
		snprintf(req->key, sizeof(req->key), "%s", real);
	}
	if (!req->params.dataset) {
		free(req);
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory");
		return;
	}

	ds = datasets_find(d, req->key);
	if (ds && (!req->rect || ds->sizes)) {
		session_create(c, req, ds);
		free(req->params.dataset);
		free(req);
		return;
	}
	/* Scanning a large tree, or reading its image headers, takes
	 * seconds: not on the loop thread. */
	req->existing = ds;
	req->work.data = req;
	c->attaching = req;
	r = uv_queue_work(d->loop, &req->work, attach_scan, attach_scanned);
	if (r < 0) {
		c->attaching = NULL;
		datasets_put(d, ds);
		free(req->params.dataset);
		free(req);
		conn_send_error(c, STOKER__ERROR_CODE__INTERNAL, "cannot queue the data set scan: %s", uv_strerror(r));
	}
}

void session_handle_start_epoch(struct conn *c, const Stoker__StartEpoch *m)
{
	struct session *s = c->session;
	int r;

	if (!s || s->device_opening) {
		conn_send_error(c, STOKER__ERROR_CODE__FAILED_PRECONDITION, "StartEpoch before Attached");
		return;
	}
	if (!first_batch_ok(c, s, m->first_batch))
		return;
	session_hold(s);
	r = session_start_epoch(s, m->epoch, m->generation, m->first_batch);
	if (r < 0 && s->conn)
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "cannot plan epoch %llu: %s",
				(unsigned long long)m->epoch, strerror(-r));
	session_unhold(s);
}

void session_handle_release(struct conn *c, const Stoker__Release *m)
{
	struct session *s = c->session;

	if (!s || s->device_opening) {
		conn_send_error(c, STOKER__ERROR_CODE__FAILED_PRECONDITION, "Release before Attached");
		return;
	}
	if (m->slot >= s->ring->slot_count || s->slot_state[m->slot] != SLOT_CLIENT) {
		c->d->protocol_errors++;
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "slot %u is not held by this client", m->slot);
		return;
	}
	slot_retire(s, m->slot);
	if (m->wait_ns > s->wait_ns)
		s->wait_ns = m->wait_ns;
	session_schedule(s);
}

void session_detach(struct conn *c)
{
	struct session *s = c->session;

	if (c->attaching) {
		c->attaching->conn = NULL;
		c->attaching = NULL;
	}
	if (!s)
		return;
	c->session = NULL;
	s->conn = NULL;
	session_hold(s);
	drop_waiting(s);
	for (uint32_t slot = 0; slot < s->ring->slot_count; slot++)
		if (s->slot_state[slot] == SLOT_FILLING)
			atomic_store_explicit(&s->jobs[slot].cancelled, true, memory_order_relaxed);
	/* Jobs still in the pool write into the ring, and copies may read it:
	 * it lives until they are done (session_maybe_free). */
	session_unhold(s);
}

/* Fetched jobs waiting for queue room, oldest first. */
static bool fetched_submit_waiting(struct daemon *d)
{
	while (d->fetched_head) {
		struct batch_job *job = d->fetched_head;

		if (pool_submit(d->pool, job) < 0)
			return false;
		d->fetched_head = job->fetch_next;
		if (!d->fetched_head)
			d->fetched_tail = NULL;
		job->fetch_next = NULL;
	}
	return true;
}

void session_fetched(struct batch_job *job, void *userdata)
{
	struct daemon *d = userdata;

	/* Queued even when cancelled meanwhile: workers skip its work, and
	 * the usual completion frees the slot (session_job_done). */
	job->fetch_next = NULL;
	if (d->fetched_tail)
		d->fetched_tail->fetch_next = job;
	else
		d->fetched_head = job;
	d->fetched_tail = job;
	if (!fetched_submit_waiting(d))
		d->pool_full = true;
}

void sessions_schedule_all(struct daemon *d)
{
	if (!fetched_submit_waiting(d)) {
		d->pool_full = true;
		return;
	}
	d->pool_full = false;
	for (struct conn *c = d->conns; c && !d->pool_full; c = c->next)
		if (c->session)
			session_schedule(c->session);
}

void session_job_done(struct batch_job *job, void *userdata)
{
	struct daemon *d = userdata;
	struct session *s = job->owner;
	bool current;

	session_hold(s);
	s->inflight--;
	if (job->fetches)
		prefetch_release(job);
	if (job->source_owner) {
		struct session *src = job->source_owner;

		job->source_owner = NULL;
		source_put(src, job->source_slot, true);
	}
	if (s->conn) {
		current = job->generation == s->generation &&
			  !atomic_load_explicit(&job->cancelled, memory_order_relaxed);
		s->slot_state[job->slot] = current ? SLOT_READY : SLOT_FREE;
		if (current && s->gpu) {
			/* On into GPU memory; ready when the copy is (device_copied). */
			int r = devring_submit(gpu_ring_devring(s->gpu), job->slot, job->count);

			s->slot_state[job->slot] = r < 0 ? SLOT_FREE : SLOT_COPYING;
			if (r < 0) {
				conn_log(LOG_LVL_ERR, s->conn, "%s: cannot queue a copy into GPU memory: %s",
					 s->device, strerror(-r));
				conn_send_error(s->conn, STOKER__ERROR_CODE__DEVICE_UNAVAILABLE,
						"%s: cannot queue a copy into GPU memory (%s)", s->device, strerror(-r));
				conn_close(s->conn, "device copy failed");
			}
		}
		session_deliver(s);
		session_schedule(s);
	}
	/* Members waiting on this job copy it now, or make it themselves if it
	 * was cancelled. */
	if (s->coordinated)
		group_schedule(s);
	session_unhold(s);
	if (d->pool_full)
		sessions_schedule_all(d);
}

void session_handle_names(struct conn *c, const Stoker__NamesRequest *m)
{
	struct session *s = c->session;
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__Names reply = STOKER__NAMES__INIT;
	char *names[SESSION_NAMES_MAX_COUNT];
	const struct dataset *ds;
	uint64_t left;
	size_t bytes = 0, n = 0;

	if (!s) {
		conn_send_error(c, STOKER__ERROR_CODE__FAILED_PRECONDITION, "NamesRequest before Attach");
		return;
	}
	ds = s->ds;
	if (m->first >= ds->count) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "sample %llu is past the data set's %llu",
				(unsigned long long)m->first, (unsigned long long)ds->count);
		return;
	}
	left = ds->count - m->first;
	/* Bounded reply: at least one name, then while they fit. */
	while (n < m->count && n < left && n < SESSION_NAMES_MAX_COUNT) {
		const char *name = dataset_name(ds, m->first + n);
		size_t len = strlen(name) + 3; /* tag, length, text */

		if (n && bytes + len > SESSION_NAMES_MAX_BYTES)
			break;
		names[n++] = (char *)name;
		bytes += len;
	}
	reply.first = m->first;
	reply.dir = ds->root;
	reply.n_names = n;
	reply.names = names;
	msg.body_case = STOKER__MESSAGE__BODY_NAMES;
	msg.names = &reply;
	conn_send(c, &msg, -1);
}
