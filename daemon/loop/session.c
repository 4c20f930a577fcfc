/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attach.h"
#include "daemon.h"
#include "access.h"
#include "dataset.h"
#include "detect.h"
#include "shards.h"
#include "log.h"
#include "prefetch.h"
#include "rect.h"
#include "ring.h"
#include "session.h"
#include "workers.h"


/* Class names sent with Attached, at most (a frame is 64 KiB by default). */
#define SESSION_MAX_CLASS_NAMES_BYTES (32u << 10)

/* A Names reply holds at most this many names and about this much text. */
#define SESSION_NAMES_MAX_COUNT STOKER__NAMES_LIMITS__NAMES_MAX_COUNT
#define SESSION_NAMES_MAX_BYTES STOKER__NAMES_LIMITS__NAMES_MAX_BYTES

/* ---- data sets shared between sessions ---- */

struct dataset *datasets_find(struct daemon *d, const char *key)
{
	uint64_t now = monotonic_ns(), ttl = (uint64_t)d->cfg.remote_listing_ttl_s * 1000000000ull;

	/* Remote listings are kept for remote_listing_ttl_s after they were
	 * made, used or not; then the next attach lists again. */
	for (size_t i = 0; i < d->ndatasets;) {
		struct dataset *ds = d->datasets[i];

		if (ds->remote && !ds->remote->per_client && now - ds->remote->listed_ns >= ttl) {
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

int datasets_add(struct daemon *d, struct dataset *ds)
{
	struct dataset **v = realloc(d->datasets, (d->ndatasets + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	d->datasets = v;
	d->datasets[d->ndatasets++] = ds;
	d->label_errors += ds->label_errors;
	if (ds->remote && !ds->remote->per_client)
		dataset_ref(ds); /* the listing cache's own reference */
	return 0;
}

void datasets_put(struct daemon *d, struct dataset *ds)
{
	if (!ds)
		return;
	/* A client's keys live no longer than its sessions. */
	if (ds->refs == 1 && (!ds->remote || ds->remote->per_client)) {
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
		if (d->datasets[i]->remote && !d->datasets[i]->remote->per_client)
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

bool session_on_device(const struct session *s)
{
	return strcmp(s->device, "cpu") != 0;
}

uint64_t session_samples(uint64_t n, double fraction, uint64_t images)
{
	double k;

	if (images)
		return images < n ? images : n;
	if (!(fraction < 1))
		return n;
	k = nearbyint((double)n * fraction); /* round half to even, as Python's round() */
	if (k < 1)
		return n ? 1 : 0;
	return k < (double)n ? (uint64_t)k : n;
}

static int device_send_ring(struct session *s);

void session_free(struct session *s)
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
	tpipe_free(s->tpipe);
	free(s->tpipe_text);
	free(s->rect_order);
	free(s->rect_hw);
	free(s->flip_idx);
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
	free(s->job_copies);
	free(s->order);
	free(s->dataset_name);
	free(s->readable);
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

	/* Batches are shared only between clients that may read the same files. */
	return a->coordinated && b->coordinated && a->ds == b->ds && access_map_equal(a->readable, b->readable) &&
	       p->seed == q->seed && p->rank == q->rank && p->world_size == q->world_size &&
	       p->batch_size == q->batch_size && p->shuffle == q->shuffle && p->drop_last == q->drop_last &&
	       p->shard_starts == q->shard_starts && p->shuffle_buffer == q->shuffle_buffer && x->kind == y->kind &&
	       x->image_size == y->image_size && x->image_height == y->image_height && x->dtype == y->dtype &&
	       x->dct_scaling == y->dct_scaling && !memcmp(x->mean, y->mean, sizeof(x->mean)) &&
	       !memcmp(x->std, y->std, sizeof(x->std)) && a->epoch == b->epoch && !a->tpipe == !b->tpipe &&
	       (!a->tpipe || !strcmp(a->tpipe_text, b->tpipe_text)) && p->repeats == q->repeats &&
	       p->selected_round == q->selected_round && p->selected_ratio == q->selected_ratio &&
	       a->has_mix == b->has_mix &&
	       (!a->has_mix || (batchmix_equal(&a->mix, &b->mix) && a->mix_classes == b->mix_classes));
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
	job->samples = s->samples;
	job->spec = s->spec;
	job->tpipe = s->tpipe;
	job->seed = s->plan.seed;
	job->epoch = s->epoch;
	job->batch_index = b;
	job->count = plan_batch_count(&s->plan, b);
	job->slot = slot;
	job->generation = s->generation;
	job->order = s->job_orders + (size_t)slot * s->plan.batch_size;
	memcpy((uint64_t *)job->order, s->order + b * s->plan.batch_size, job->count * sizeof(uint64_t));
	job->readable = s->readable;
	s->unreadable += access_count_unreadable(s->readable, job->order, job->count);
	job->images = base;
	job->labels = (int64_t *)(base + s->labels_offset);
	job->indices = (int64_t *)(base + s->indices_offset);
	job->mix = NULL;
	if (s->has_mix) {
		job->mix = &s->mix;
		job->mix_key = b * s->plan.world_size + s->plan.rank;
		job->mix_w = s->spec.image_size;
		job->mix_h = transform_height(&s->spec);
		job->mix_classes = s->mix_classes;
		job->soft = (float *)(base + s->soft_offset);
		job->mix_recs = (struct batchmix_rec *)(base + s->mix_offset);
		job->mix_scratch = base + s->mix_scratch_offset;
	}
	job->copies = NULL;
	if (s->job_copies) {
		uint32_t *copies = s->job_copies + (size_t)slot * s->plan.batch_size;

		for (uint32_t i = 0; i < job->count; i++)
			copies[i] = plan_copy(&s->plan, b * s->plan.batch_size + i);
		job->copies = copies;
	}
	job->owner = s;
	job->copy_from = NULL;
	job->source_owner = NULL;
	job->detect = s->detect;
	if (s->detect) {
		job->detect_transform = s->detect_transform;
		job->detect_params = s->detect_params;
		/* Ultralytics' close_mosaic: the last epochs go without mosaic, mixup, cutmix and copy_paste. */
		if (s->train_epochs && s->close_mosaic && s->epoch + s->close_mosaic >= s->train_epochs) {
			job->detect_params.mosaic = 0;
			job->detect_params.mixup = 0;
			job->detect_params.cutmix = 0;
			job->detect_params.copy_paste = 0;
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
		job->bgr = s->bgr;
		job->albu = s->albu;
		job->shapes = (int32_t *)(base + s->shapes_offset);
		job->ratio_pad = (double *)(base + s->ratio_pad_offset);
		job->mask_ratio = s->mask_ratio;
		job->mask_side = s->mask_side;
		job->masks = s->mask_ratio ? (uint16_t *)(base + s->masks_offset) : NULL;
		job->kpt_points = s->kpt_points;
		job->keypoints = s->kpt_points ? (float *)(base + s->keypoints_offset) : NULL;
		job->obb = s->obb_offset ? (float *)(base + s->obb_offset) : NULL;
		job->flip_idx = s->flip_idx;
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
		atomic_store_explicit(
			&job->replaced,
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
bool session_first_batch_ok(struct conn *c, const struct session *s, uint64_t first)
{
	if (first <= s->batches_per_epoch)
		return true;
	conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "first_batch %llu is past the epoch's %llu batches",
			(unsigned long long)first, (unsigned long long)s->batches_per_epoch);
	return false;
}

/* Send Attached with the host ring's fd (and for a CUDA client DeviceRing
 * with the device ring's), then start producing. */
void session_announce(struct session *s, int fd)
{
	struct conn *c = s->conn;
	struct dataset *ds = s->ds;
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__Attached at = STOKER__ATTACHED__INIT;
	int r;

	at.slot_count = s->ring->slot_count;
	at.slot_bytes = s->ring->slot_bytes;
	at.ring_bytes = s->ring->bytes;
	at.dataset_samples = s->samples;
	at.num_classes = ds->num_classes;
	at.samples_per_epoch = plan_samples_per_epoch(&s->plan);
	at.batches_per_epoch = s->batches_per_epoch;
	at.batch_size = s->plan.batch_size;
	at.image_height = at.image_width = s->image_side;
	if (!s->rect && !s->detect)
		at.image_height = transform_height(&s->spec); /* a pipeline's (h, w) output */
	at.channels = 3;
	at.labels_offset = s->labels_offset;
	at.indices_offset = s->indices_offset;
	at.epoch = s->attach_epoch;
	at.has_dtype = true;
	at.dtype = (Stoker__DType)s->out_dtype;
	if (s->has_mix) {
		at.has_soft_offset = at.has_soft_classes = at.has_mix_offset = true;
		at.soft_offset = s->soft_offset;
		at.soft_classes = s->mix_classes;
		at.mix_offset = s->mix_offset;
	}
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
		if (s->mask_ratio) {
			at.has_masks_offset = at.has_mask_ratio = at.has_mask_side = true;
			at.masks_offset = s->masks_offset;
			at.mask_ratio = s->mask_ratio;
			at.mask_side = s->mask_side;
		}
		if (s->kpt_points) {
			at.has_keypoints_offset = at.has_kpt_points = true;
			at.keypoints_offset = s->keypoints_offset;
			at.kpt_points = s->kpt_points;
		}
		if (s->obb_offset) {
			at.has_obb_offset = true;
			at.obb_offset = s->obb_offset;
		}
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
	conn_log(LOG_LVL_INFO, c, "attached to %s (%llu samples), rank %u/%u, batch %u, %s %u, seed %llu%s%s", ds->root,
		 (unsigned long long)ds->count, s->plan.rank, s->plan.world_size, s->plan.batch_size,
		 s->tpipe ? "pipeline" : attach_transform_name(s->transform), s->spec.image_size,
		 (unsigned long long)s->plan.seed, s->gpu ? ", on " : "", s->gpu ? s->device : "");
	r = session_start_epoch(s, s->attach_epoch, 0, s->attach_first);
	if (r < 0)
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "cannot plan epoch: %s", strerror(-r));
out:
	session_unhold(s);
}

/* ---- CUDA delivery (gpu.h) ---- */

/* The device ring's fd and its release words' (right after Attached). */
static int device_send_ring(struct session *s)
{
	struct gpu_ring_export *ex = gpu_ring_export(s->gpu);
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__DeviceRing dr = STOKER__DEVICE_RING__INIT;
	int fd, words_fd;

	dr.device = s->device;
	dr.slot_count = s->ring->slot_count;
	dr.slot_bytes = ex->slot_bytes;
	dr.ring_bytes = ex->ring_bytes;
	dr.has_release_words_offset = true;
	dr.release_words_offset = 0; /* in the second fd */
	dr.device_uuid = (ProtobufCBinaryData){GPU_UUID_BYTES, ex->uuid};
	msg.body_case = STOKER__MESSAGE__BODY_DEVICE_RING;
	msg.device_ring = &dr;
	fd = ex->fd; /* the frame queue takes them */
	words_fd = ex->words_fd;
	ex->fd = ex->words_fd = -1;
	return conn_send2(s->conn, &msg, fd, words_fd);
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
			conn_log(LOG_LVL_ERR, s->conn, "%s: the copy into device slot %u failed: %s", s->device, slot,
				 strerror(-err));
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
		conn_send_error(c,
				err == -ENOSPC ? STOKER__ERROR_CODE__RESOURCE_EXHAUSTED
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

/* Ask the CUDA thread for the device ring; a negative errno once the
 * client was told why not. */
int session_device_open(struct session *s, const uint8_t *uuid, bool has_uuid)
{
	struct daemon *d = s->d;
	struct gpu_ring_params p;
	int r;

	memset(&p, 0, sizeof(p));
	snprintf(p.device, sizeof(p.device), "%s", s->device);
	memcpy(p.uuid, uuid, sizeof(p.uuid));
	p.has_uuid = has_uuid;
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

void session_handle_start_epoch(struct conn *c, const Stoker__StartEpoch *m)
{
	struct session *s = c->session;
	int r;

	if (!s || s->device_opening) {
		conn_send_error(c, STOKER__ERROR_CODE__FAILED_PRECONDITION, "StartEpoch before Attached");
		return;
	}
	if (!session_first_batch_ok(c, s, m->first_batch))
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

	attach_forget(c);
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
				conn_log(LOG_LVL_ERR, s->conn, "%s: cannot queue a copy into GPU memory: %s", s->device,
					 strerror(-r));
				conn_send_error(s->conn, STOKER__ERROR_CODE__DEVICE_UNAVAILABLE,
						"%s: cannot queue a copy into GPU memory (%s)", s->device,
						strerror(-r));
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
	if (m->first >= s->samples) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "sample %llu is past the data set's %llu",
				(unsigned long long)m->first, (unsigned long long)s->samples);
		return;
	}
	left = s->samples - m->first;
	/* Bounded reply: at least one name, then while they fit. */
	while (n < m->count && n < left && n < SESSION_NAMES_MAX_COUNT) {
		/* A file the client may not read has no name for it (access.h). */
		const char *name = access_readable(s->readable, m->first + n) ? dataset_name(ds, m->first + n) : "";
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
