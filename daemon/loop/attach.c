/* SPDX-License-Identifier: MIT */
/*
 * The attach path: an Attach request checked (attach_validate, pure), its
 * data set found in the registry or scanned on libuv's thread pool, the
 * slot layout (attach_slot_layout, pure) admitted against max_ring_bytes and
 * the node's memory_budget, then session_create allocates the session and
 * session.c's session_announce starts it.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "access.h"
#include "attach.h"
#include "batchmix.h"
#include "cudadrv.h"
#include "daemon.h"
#include "dataset.h"
#include "detect.h"
#include "errtext.h"
#include "instances.h"
#include "instmask.h"
#include "log.h"
#include "rect.h"
#include "ring.h"
#include "session.h"
#include "shards.h"
#include "transforms.h"

/* torchvision's ImageNet normalisation, the default for float output. */
static const float imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
static const float imagenet_std[3] = {0.229f, 0.224f, 0.225f};

/* Label errors logged per data set; the rest are counted. */
#define ATTACH_MAX_LABEL_LOGS 100u
/* Data sets larger than this are refused (the plan holds 8 bytes a sample). */
#define ATTACH_MAX_SAMPLES (1ull << 32)

struct attach_request {
	uv_work_t work;
	struct daemon *d;
	struct conn *conn;     /* NULL if the client left during the scan */
	Stoker__Attach params; /* its arrays point into this request */
	float mean[3], std[3];
	char path[PATH_MAX];
	/* Detection: the options, copied out of the message. */
	struct detect_params detect;
	uint32_t close_mosaic, max_boxes;
	uint64_t train_epochs;
	double fraction; /* Ultralytics' fraction: the first images ... */
	uint64_t images; /* ... or this many of them (0: by fraction) */
	float bgr;       /* Ultralytics' bgr: P(a sample stays BGR) */
	float albu;      /* Ultralytics' default Albumentations' p */
	char split[64];
	bool rect;
	uint32_t stride;
	double pad;
	/* Ultralytics' segment, pose and OBB labels (yolo_task): how the
	 * label files are read; has_inst false for detect's. */
	struct instances_spec inst;
	bool has_inst;
	uint32_t mask_ratio; /* segment: masks downsampled by it; 0: no masks */
	bool obb;            /* obb: xywhr per box row */
	uint32_t *flip_idx;  /* pose: the keypoints' order after a flip ([inst.nkpt]); NULL: none */
	enum fit_resample resample;
	struct transform_spec spec; /* the host ring's (attach_start) */
	uint32_t rect_side;         /* rect: the largest shape's side */
	char key[PATH_MAX + 96];    /* the data set's dataset->key */
	struct dataset *existing;   /* open already, but without the image sizes rect needs */
	uint32_t *sizes;            /* read by the scan for rect */
	struct s3_config s3;        /* a copy: the scan runs off the loop thread */
	/* device: "cpu" or "cuda:N" and the GPU's UUID, copied out too. */
	char device[32];
	uint8_t uuid[GPU_UUID_BYTES];
	bool has_uuid;
	/* The batch op, parsed (attach_validate checked it). */
	struct batchmix mix;
	bool has_mix;
	struct dataset *result;
	int err;
	char errbuf[512];
	/* A client that is not root reads what its own identity may (access.h). */
	bool check_access;
	struct access_id id;
	struct access_map *readable; /* built by the scan, for the session */
	struct tpipe *tpipe;         /* Attach.transforms, parsed; the session takes it */
};

/* An attach request freed: the client's identity and keys with it. */
static void request_free(struct attach_request *req)
{
	tpipe_free(req->tpipe);
	free(req->sizes);
	free(req->params.dataset);
	access_id_clear(&req->id);
	free(req->readable);
	free(req->flip_idx);
	s3_config_clear(&req->s3); /* a client's keys */
	free(req);
}

/* ---- the pure part: validation and slot layout ---- */

const char *attach_transform_name(Stoker__Transform t)
{
	switch (t) {
	case STOKER__TRANSFORM__RANDOM_RESIZED_CROP: return "random_resized_crop";
	case STOKER__TRANSFORM__CENTER_CROP: return "center_crop";
	case STOKER__TRANSFORM__LETTERBOX: return "letterbox";
	case STOKER__TRANSFORM__MOSAIC: return "mosaic";
	default: return "?";
	}
}

/* Ultralytics' defaults, overridden by what the client set. */
static void detect_options(const Stoker__DetectOptions *o, struct detect_params *p)
{
	detect_params_default(p);
	if (!o)
		return;
	if (o->has_copy_paste_mode)
		p->copy_paste_mode =
			o->copy_paste_mode == STOKER__COPY_PASTE_MODE__COPY_PASTE_FLIP    ? DETECT_COPY_PASTE_FLIP
			: o->copy_paste_mode == STOKER__COPY_PASTE_MODE__COPY_PASTE_MIXUP ? DETECT_COPY_PASTE_MIXUP
											  : -1;
#define TAKE(name)         \
	if (o->has_##name) \
		p->name = o->name;
	/* clang-format off */
	TAKE(hsv_h) TAKE(hsv_s) TAKE(hsv_v) TAKE(degrees) TAKE(translate) TAKE(scale) TAKE(shear) TAKE(perspective)
	TAKE(flipud) TAKE(fliplr) TAKE(mosaic) TAKE(mixup) TAKE(cutmix) TAKE(copy_paste)
	/* clang-format on */
#undef TAKE
}

/* The task, its transform and the options only it takes. */
static int validate_task(const Stoker__Attach *a, char *errbuf, size_t errlen)
{
	bool detect = a->task == STOKER__TASK__DETECT;
	const Stoker__DetectOptions *o = a->detect;
	struct detect_params p;
	char why[160];

	if (a->task != STOKER__TASK__CLASSIFY && !detect) {
		set_err(errbuf, errlen, "unknown task %d", (int)a->task);
		return -EINVAL;
	}
	if (a->transform != STOKER__TRANSFORM__RANDOM_RESIZED_CROP && a->transform != STOKER__TRANSFORM__CENTER_CROP &&
	    a->transform != STOKER__TRANSFORM__LETTERBOX && a->transform != STOKER__TRANSFORM__MOSAIC) {
		set_err(errbuf, errlen, "unknown transform %d", (int)a->transform);
		return -EINVAL;
	}
	if (detect != (a->transform == STOKER__TRANSFORM__LETTERBOX || a->transform == STOKER__TRANSFORM__MOSAIC)) {
		set_err(errbuf, errlen, "transform %s is not for task %s (%s)", attach_transform_name(a->transform),
			detect ? "detect" : "classify",
			detect ? "detect takes letterbox or mosaic"
			       : "classify takes random_resized_crop or center_crop");
		return -EINVAL;
	}
	if (!detect) {
		if (o) {
			set_err(errbuf, errlen, "detection options given for task classify");
			return -EINVAL;
		}
		return 0;
	}
	if (a->has_dct_scaling) {
		set_err(errbuf, errlen, "dct_scaling is an option of task classify");
		return -EINVAL;
	}
	if (a->dtype != STOKER__DTYPE__UINT8 || a->coordinated) {
		set_err(errbuf, errlen, "task detect serves %s",
			a->coordinated ? "no coordinated groups (each job draws its own mosaics)"
				       : "uint8 images only");
		return -EINVAL;
	}
	detect_options(o, &p);
	if (detect_params_check(&p, why, sizeof(why)) < 0) {
		set_err(errbuf, errlen, "%s", why);
		return -EINVAL;
	}
	if (o && o->has_max_boxes && (o->max_boxes == 0 || o->max_boxes > ATTACH_MAX_BOXES)) {
		set_err(errbuf, errlen, "max_boxes %u is not in 1..%u", o->max_boxes, ATTACH_MAX_BOXES);
		return -EINVAL;
	}
	if (o && o->has_stride && (o->stride == 0 || o->stride > RECT_MAX_STRIDE)) {
		set_err(errbuf, errlen, "stride %u is not in 1..%u", o->stride, RECT_MAX_STRIDE);
		return -EINVAL;
	}
	if (o && o->has_pad && !(o->pad >= 0 && o->pad <= RECT_MAX_PAD)) {
		set_err(errbuf, errlen, "pad %g is not in 0..%g", o->pad, RECT_MAX_PAD);
		return -EINVAL;
	}
	if (o && o->has_resample && o->resample != STOKER__RESAMPLE__RESAMPLE_DEFAULT &&
	    o->resample != STOKER__RESAMPLE__RESAMPLE_ANTIALIAS && o->resample != STOKER__RESAMPLE__RESAMPLE_CV2) {
		set_err(errbuf, errlen, "unknown resample %d", (int)o->resample);
		return -EINVAL;
	}
	if (o && o->rect) {
		/* BaseDataset.set_rectangle's batches, for validation and training.
		 * Training: YOLODataset.build_transforms sets mosaic, mixup and
		 * cutmix to 0 under rect (its Mosaic asserts so); the client says
		 * so, rather than getting other augmentations than it asked for. */
		struct detect_params rp;
		const char *no;

		detect_options(o, &rp);
		no = a->transform != STOKER__TRANSFORM__LETTERBOX && a->transform != STOKER__TRANSFORM__MOSAIC
			     ? "takes transform letterbox or mosaic"
		     : a->transform == STOKER__TRANSFORM__MOSAIC && (rp.mosaic || rp.mixup || rp.cutmix)
			     ? "training needs mosaic, mixup and cutmix 0 (Ultralytics turns them off under rect)"
		     : a->drop_last ? "keeps every batch: drop_last must be off"
		     : rect_max_side(a->image_size, o->stride, o->pad) > DETECT_MAX_SIZE
			     ? "with this image_size, stride and pad makes batches over 16384 pixels"
			     : NULL;

		if (no) {
			set_err(errbuf, errlen, "rect %s", no);
			return -EINVAL;
		}
	}
	if (o && o->has_bgr && !(o->bgr >= 0 && o->bgr <= 1)) {
		set_err(errbuf, errlen, "bgr %g is not in 0..1", (double)o->bgr);
		return -EINVAL;
	}
	if (o && o->bgr > 0 && a->transform != STOKER__TRANSFORM__MOSAIC) {
		set_err(errbuf, errlen, "bgr is a training augmentation: transform mosaic");
		return -EINVAL;
	}
	if (o && o->has_albumentations && !(o->albumentations >= 0 && o->albumentations <= 1)) {
		set_err(errbuf, errlen, "albumentations %g is not in 0..1", (double)o->albumentations);
		return -EINVAL;
	}
	if (o && o->albumentations > 0 && a->transform != STOKER__TRANSFORM__MOSAIC) {
		set_err(errbuf, errlen, "albumentations is a training augmentation: transform mosaic");
		return -EINVAL;
	}
	if (o && o->has_fraction && !(o->fraction > 0 && isfinite(o->fraction))) {
		set_err(errbuf, errlen, "fraction %g is not a number above 0 (1: the whole data set)", o->fraction);
		return -EINVAL;
	}
	if (o && (o->has_images || (o->has_fraction && o->fraction < 1)) && a->shard_order) {
		set_err(errbuf, errlen, "fraction takes the data set's first images: not with order=shards");
		return -EINVAL;
	}
	if (o && (o->yolo_task < STOKER__YOLO_TASK__YOLO_DETECT || o->yolo_task > STOKER__YOLO_TASK__YOLO_OBB)) {
		set_err(errbuf, errlen, "unknown yolo_task %d", (int)o->yolo_task);
		return -EINVAL;
	}
	if (o && o->copy_paste > 0 && o->copy_paste_mode == STOKER__COPY_PASTE_MODE__COPY_PASTE_MIXUP && o->rect &&
	    a->transform == STOKER__TRANSFORM__MOSAIC &&
	    (o->yolo_task == STOKER__YOLO_TASK__YOLO_SEGMENT || o->yolo_task == STOKER__YOLO_TASK__YOLO_OBB)) {
		/* its partner would be made in another batch's shape */
		set_err(errbuf, errlen, "copy_paste_mode mixup is not built for rect training (flip is)");
		return -EINVAL;
	}
	if (o && o->copy_paste > 0 && o->copy_paste_mode == STOKER__COPY_PASTE_MODE__COPY_PASTE_MIXUP &&
	    o->cutmix > 0 && a->transform == STOKER__TRANSFORM__MOSAIC &&
	    (o->yolo_task == STOKER__YOLO_TASK__YOLO_SEGMENT || o->yolo_task == STOKER__YOLO_TASK__YOLO_OBB)) {
		/* CutMix's partner would need a CopyPaste partner of its own */
		set_err(errbuf, errlen, "copy_paste_mode mixup with cutmix is not built (either alone is)");
		return -EINVAL;
	}
	if (o && o->yolo_task == STOKER__YOLO_TASK__YOLO_POSE &&
	    (o->kpt_points == 0 || o->kpt_points > INSTANCES_MAX_KPT || o->kpt_dims < 2 || o->kpt_dims > 3)) {
		set_err(errbuf, errlen, "yolo_task pose takes kpt_shape [1..%u, 2 or 3], not [%u, %u]",
			INSTANCES_MAX_KPT, o->kpt_points, o->kpt_dims);
		return -EINVAL;
	}
	if (o && o->yolo_task != STOKER__YOLO_TASK__YOLO_POSE && (o->kpt_points || o->kpt_dims || o->n_flip_idx)) {
		set_err(errbuf, errlen, "kpt_shape and flip_idx are options of yolo_task pose");
		return -EINVAL;
	}
	if (o && o->n_flip_idx) {
		if (o->n_flip_idx != o->kpt_points) {
			set_err(errbuf, errlen, "flip_idx has %zu entries for kpt_shape's %u keypoints", o->n_flip_idx,
				o->kpt_points);
			return -EINVAL;
		}
		for (size_t i = 0; i < o->n_flip_idx; i++)
			if (o->flip_idx[i] >= o->kpt_points) {
				set_err(errbuf, errlen, "flip_idx[%zu] = %u is not a keypoint below %u", i,
					o->flip_idx[i], o->kpt_points);
				return -EINVAL;
			}
	}
	if (o && o->yolo_task != STOKER__YOLO_TASK__YOLO_SEGMENT && (o->has_mask_ratio || o->has_overlap_mask)) {
		set_err(errbuf, errlen, "mask_ratio and overlap_mask are options of yolo_task segment");
		return -EINVAL;
	}
	if (o && o->yolo_task == STOKER__YOLO_TASK__YOLO_SEGMENT) {
		uint32_t k = o->mask_ratio;

		if (k == 0 || k > INSTMASK_MAX_RATIO || (k & (k - 1)) || a->image_size % k ||
		    (o->rect && o->stride % k)) {
			set_err(errbuf, errlen,
				"mask_ratio %u is not a power of two up to %u dividing image_size%s (Ultralytics' "
				"cv2.resize of a mask is exact there)",
				k, INSTMASK_MAX_RATIO, o->rect ? " and stride" : "");
			return -EINVAL;
		}
		if (!o->overlap_mask) {
			set_err(errbuf, errlen,
				"overlap_mask false (a mask per object) is not built: stoker serves "
				"Ultralytics' default overlap_mask=True");
			return -EINVAL;
		}
	}
	if (o && o->split && (!o->split[0] || strlen(o->split) > ATTACH_MAX_SPLIT_LEN || strchr(o->split, '/'))) {
		set_err(errbuf, errlen, "split '%.40s' is not a data.yaml key", o->split);
		return -EINVAL;
	}
	return 0;
}

/* "cpu" or "cuda:N" (N: 0..1023, the client's numbering), and a UUID of
 * the right size. */
static int validate_device(const Stoker__Attach *a, char *errbuf, size_t errlen)
{
	const char *dev = a->device;
	int ordinal = -1;

	if (dev && cudadrv_parse_device(dev, &ordinal) < 0) {
		set_err(errbuf, errlen, "device '%.40s' is not cpu or cuda:N", dev);
		return -EINVAL;
	}
	if (ordinal < 0) {
		if (a->has_device_uuid) {
			set_err(errbuf, errlen, "device_uuid given for device cpu");
			return -EINVAL;
		}
		return 0;
	}
	if (a->has_device_uuid && a->device_uuid.len != GPU_UUID_BYTES) {
		set_err(errbuf, errlen, "device_uuid has %zu bytes, not %u", a->device_uuid.len, GPU_UUID_BYTES);
		return -EINVAL;
	}
	return 0;
}

/* The batch op's text and repeated augmentation: classification on the
 * host only (a device batch's float output is made on the GPU from uint8). */
static int validate_batch_ops(const Stoker__Attach *a, char *errbuf, size_t errlen)
{
	bool on_device = a->device && strcmp(a->device, "cpu") != 0;

	if (a->batch_transform) {
		struct batchmix m;

		if (a->task != STOKER__TASK__CLASSIFY) {
			set_err(errbuf, errlen, "batch_transform is for task classify");
			return -EINVAL;
		}
		if (on_device && a->dtype != STOKER__DTYPE__UINT8) {
			set_err(errbuf, errlen,
				"batch_transform with a device and a float dtype is not built (the GPU makes the "
				"floats "
				"after the host ring's uint8); use dtype uint8 or device cpu");
			return -EINVAL;
		}
		if (batchmix_parse(a->batch_transform, &m, errbuf, errlen) < 0)
			return -EINVAL;
	}
	if (a->aug_repeats > 1) {
		if (a->task != STOKER__TASK__CLASSIFY || a->shard_order) {
			set_err(errbuf, errlen, "aug_repeats is for task classify in sample order");
			return -EINVAL;
		}
		if (a->aug_repeats > PLAN_MAX_REPEATS) {
			set_err(errbuf, errlen, "aug_repeats %u is over %u", a->aug_repeats, PLAN_MAX_REPEATS);
			return -EINVAL;
		}
	}
	return 0;
}

int attach_validate(const Stoker__Attach *a, const struct attach_limits *lim, char *errbuf, size_t errlen)
{
	if (a->n_transforms && a->task != STOKER__TASK__CLASSIFY) {
		set_err(errbuf, errlen, "transforms are for task classify");
		return -EINVAL;
	}
	if (a->n_transforms && a->has_transform) {
		set_err(errbuf, errlen, "transform and transforms both given: the pipeline replaces the transform");
		return -EINVAL;
	}
	uint32_t prefetch = a->prefetch ? a->prefetch : lim->prefetch;
	int r;

	r = validate_task(a, errbuf, errlen);
	if (r < 0)
		return r;
	if (a->dtype != STOKER__DTYPE__UINT8 && a->dtype != STOKER__DTYPE__FLOAT32 &&
	    a->dtype != STOKER__DTYPE__FLOAT16) {
		set_err(errbuf, errlen, "unknown dtype %d", (int)a->dtype);
		return -EINVAL;
	}
	if ((a->n_mean != 0 && a->n_mean != 3) || (a->n_std != 0 && a->n_std != 3)) {
		set_err(errbuf, errlen, "mean and std take 3 values each (one per channel)");
		return -EINVAL;
	}
	for (size_t ch = 0; ch < a->n_std; ch++) {
		if (!(a->std[ch] > 0.0f) || !isfinite(a->std[ch]) || (ch < a->n_mean && !isfinite(a->mean[ch]))) {
			set_err(errbuf, errlen, "std must be positive and finite");
			return -EINVAL;
		}
	}
	for (size_t ch = 0; ch < a->n_mean; ch++) {
		if (!isfinite(a->mean[ch])) {
			set_err(errbuf, errlen, "mean must be finite");
			return -EINVAL;
		}
	}
	if (a->batch_size == 0 || a->batch_size > lim->max_batch_size) {
		set_err(errbuf, errlen, "batch_size %u is not in 1..%u (max_batch_size)", a->batch_size,
			lim->max_batch_size);
		return -EINVAL;
	}
	if (a->image_size == 0 || a->image_size > lim->max_image_size) {
		set_err(errbuf, errlen, "image_size %u is not in 1..%u (max_image_size)", a->image_size,
			lim->max_image_size);
		return -EINVAL;
	}
	if (a->world_size == 0 || a->rank >= a->world_size) {
		set_err(errbuf, errlen, "rank %u and world_size %u: need world_size >= 1 and rank < world_size",
			a->rank, a->world_size);
		return -EINVAL;
	}
	if (prefetch > lim->max_prefetch) {
		set_err(errbuf, errlen, "prefetch %u is over %u (max_prefetch)", prefetch, lim->max_prefetch);
		return -EINVAL;
	}
	if (a->shard_order && a->shuffle_buffer > ATTACH_MAX_SHUFFLE_BUFFER) {
		set_err(errbuf, errlen, "shuffle_buffer %u is over %u samples", a->shuffle_buffer,
			ATTACH_MAX_SHUFFLE_BUFFER);
		return -EINVAL;
	}
	r = validate_device(a, errbuf, errlen);
	if (r < 0)
		return r;
	r = validate_batch_ops(a, errbuf, errlen);
	if (r < 0)
		return r;
	if (!a->dataset || !a->dataset[0] || strlen(a->dataset) >= PATH_MAX) {
		set_err(errbuf, errlen, "no data set path given");
		return -EINVAL;
	}
	return 0;
}

/* v rounded up to a multiple of a; false if that overflows. */
static bool align_up(uint64_t v, uint64_t a, uint64_t *out)
{
	if (v > UINT64_MAX - (a - 1))
		return false;
	*out = (v + a - 1) / a * a;
	return true;
}

/* *acc = base + n * size, false if it overflows. */
static bool area_end(uint64_t base, uint64_t n, uint64_t size, uint64_t *acc)
{
	uint64_t bytes;

	return !__builtin_mul_overflow(n, size, &bytes) && !__builtin_add_overflow(base, bytes, acc);
}

int attach_slot_layout(const struct slot_request *r, struct slot_layout *out)
{
	struct slot_layout l;
	uint64_t side, sample = 0, end = 0, partner = 0;
	bool ok;

	if (!r->batch_size || !r->image_size || !r->page_size)
		return -EINVAL;
	memset(&l, 0, sizeof(l));
	/* Rectangular batches: room for the largest shape, uint8. */
	side = r->rect_side ? r->rect_side : r->image_size;
	ok = area_end(0, r->rect_side || !r->image_height ? side : r->image_height,
		      side * 3 * (r->rect_side ? 1 : sample_dtype_bytes(r->dtype)), &sample);
	ok = ok && area_end(0, r->batch_size, sample, &l.image_bytes);
	ok = ok && align_up(l.image_bytes, 64, &end);
	l.labels_offset = end;
	ok = ok && area_end(end, r->batch_size, sizeof(int64_t), &end);
	l.indices_offset = end;
	ok = ok && area_end(end, r->batch_size, sizeof(int64_t), &end);
	if (r->detect) {
		/* Then the boxes: room for max_boxes rows per image. */
		ok = ok && align_up(end, 64, &end);
		l.boxes_offset = end;
		ok = ok &&
		     area_end(end, (uint64_t)r->batch_size * r->max_boxes, DETECT_BOX_FLOATS * sizeof(float), &end);
		/* Then each image's shapes and ratio_pad. */
		ok = ok && align_up(end, 64, &end);
		l.shapes_offset = end;
		ok = ok && area_end(end, r->batch_size, 4 * sizeof(int32_t), &end);
		ok = ok && align_up(end, 64, &end);
		l.ratio_pad_offset = end;
		ok = ok && area_end(end, r->batch_size, 4 * sizeof(double), &end);
		if (r->mask_ratio) {
			/* segment: an overlap mask per image, uint16 */
			l.mask_side = (uint32_t)(side / r->mask_ratio);
			ok = ok && align_up(end, 64, &end);
			l.masks_offset = end;
			ok = ok && area_end(end, (uint64_t)r->batch_size * l.mask_side,
					    (uint64_t)l.mask_side * sizeof(uint16_t), &end);
		}
		if (r->kpt_points) {
			/* pose: the keypoints of each box row, float32 x, y, visibility */
			ok = ok && align_up(end, 64, &end);
			l.keypoints_offset = end;
			ok = ok && area_end(end, (uint64_t)r->batch_size * r->max_boxes,
					    (uint64_t)r->kpt_points * 3 * sizeof(float), &end);
		}
		if (r->obb) {
			/* obb: each box row's xywhr */
			ok = ok && align_up(end, 64, &end);
			l.obb_offset = end;
			ok = ok && area_end(end, (uint64_t)r->batch_size * r->max_boxes, 5 * sizeof(float), &end);
		}
	}
	if (r->soft_classes) {
		ok = ok && align_up(end, 64, &end);
		l.soft_offset = end;
		ok = ok && area_end(end, (uint64_t)r->batch_size * r->soft_classes, sizeof(float), &end);
		ok = ok && align_up(end, 64, &end);
		l.mix_offset = end;
		ok = ok && area_end(end, r->batch_size, sizeof(struct batchmix_rec), &end);
		ok = ok && align_up(end, 64, &end);
		l.mix_scratch_offset = end;
		ok = ok && area_end(end, 1, sample, &end);
	}
	ok = ok && align_up(end, r->page_size, &l.slot_bytes);
	/* The batch the client holds, plus those ready ahead. */
	ok = ok && r->prefetch < UINT32_MAX;
	l.slots = r->prefetch + 1;
	ok = ok && area_end(0, l.slots, l.slot_bytes, &l.ring_bytes);
	/* Mosaic: each slot's batch images, shared as partners (workers.c). */
	if (r->detect && r->mosaic) {
		ok = ok && area_end(0, r->image_size, (uint64_t)r->image_size * 3, &partner);
		ok = ok && area_end(0, (uint64_t)l.slots * r->batch_size, partner, &l.fit_bytes);
	}
	if (!ok)
		return -EOVERFLOW;
	*out = l;
	return 0;
}

/* ---- the loop-thread part: scan, admission, session_create ---- */

/* Attach.transforms, parsed (transforms.h) and checked against the rest of
 * the request; -EINVAL once the client has been told what is wrong. */
static int attach_pipeline(struct conn *c, const Stoker__Attach *a, struct tpipe **out)
{
	struct tpipe_info info;
	char why[512];
	int r;

	r = transforms_from_proto(a->transforms, a->n_transforms, out, why, sizeof(why));
	if (r < 0) {
		conn_send_error(
			c, r == -ENOMEM ? STOKER__ERROR_CODE__RESOURCE_EXHAUSTED : STOKER__ERROR_CODE__INVALID_ARGUMENT,
			"transforms: %s", why);
		return -EINVAL;
	}
	tpipe_info(*out, &info);
	if (info.out_w > c->d->cfg.max_image_size || info.out_h > c->d->cfg.max_image_size)
		set_err(why, sizeof(why), "transforms: the output is %ux%u, over max_image_size %u", info.out_w,
			info.out_h, c->d->cfg.max_image_size);
	else if (a->has_image_size && (a->image_size != info.out_w || a->image_size != info.out_h))
		set_err(why, sizeof(why), "image_size %u differs from the pipeline's output %ux%u", a->image_size,
			info.out_w, info.out_h);
	else if (info.out_w != info.out_h && a->device && strcmp(a->device, "cpu"))
		set_err(why, sizeof(why),
			"transforms: a %ux%u (not square) output is made on the CPU only: not with device %s",
			info.out_w, info.out_h, a->device);
	else if (info.has_dtype && (a->has_dtype || a->n_mean || a->n_std))
		set_err(why, sizeof(why),
			"dtype, mean and std come from the pipeline's ToDtype and Normalize: give "
			"them there only");
	else if (info.float_ops && a->device && strcmp(a->device, "cpu"))
		set_err(why, sizeof(why),
			"transforms: RandomErasing after ToDtype works on the CPU's float output: "
			"not with device %s",
			a->device);
	else
		return 0;
	conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "%s", why);
	tpipe_free(*out);
	*out = NULL;
	return -EINVAL;
}

/* The request's pipeline says the output's size, dtype and normalisation. */
static void request_take_pipeline(struct attach_request *req, struct tpipe *tp)
{
	struct tpipe_info info;

	req->params.n_transforms = 0;
	req->params.transforms = NULL;
	if (!tp)
		return;
	tpipe_info(tp, &info);
	req->params.image_size = info.out_w;
	if (info.has_dtype) {
		req->params.dtype = (Stoker__DType)info.dtype;
		req->params.n_mean = req->params.n_std = 3;
		memcpy(req->mean, info.mean, sizeof(req->mean));
		memcpy(req->std, info.std, sizeof(req->std));
	}
	req->tpipe = tp;
}

/* The session takes the request's pipeline and its text (stats, coordinated groups). */
static int session_take_pipeline(struct session *s, struct attach_request *req)
{
	if (!req->tpipe)
		return 0;
	s->tpipe_text = strdup(tpipe_text(req->tpipe));
	if (!s->tpipe_text)
		return -ENOMEM;
	s->tpipe = req->tpipe;
	req->tpipe = NULL;
	return 0;
}

/* The session for an admitted request: its allocation (ring, slot states,
 * jobs, the mosaic's partner images), its plan and, for rect, each batch's
 * shape; then Attached (or, on a device, the device ring first). */
/* The files of its data set a client may not read, for the administrator
 * (never for the client): how many, and the first few by name. */
static void log_unreadable(const struct conn *c, const struct dataset *ds, const struct access_map *m)
{
	char names[1024];
	size_t at = 0;

	if (!m || !m->unreadable)
		return;
	names[0] = '\0';
	for (uint64_t i = 0; i < m->unreadable && i < ACCESS_MAP_LOGGED && at < sizeof(names); i++)
		at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s", i ? ", " : "",
				       dataset_name(ds, m->logged[i]));
	conn_log_cred(LOG_LVL_WARNING, c,
		      "%llu of the %llu files of %s are not readable by uid %d: replaced in its "
		      "batches and counted (unreadable_samples): %s%s",
		      (unsigned long long)m->unreadable, (unsigned long long)m->count, ds->root, (int)c->uid, names,
		      m->unreadable > ACCESS_MAP_LOGGED ? ", ..." : "");
}

static void session_create(struct conn *c, struct attach_request *req, struct dataset *ds,
			   const struct slot_layout *lay)
{
	struct daemon *d = c->d;
	const Stoker__Attach *a = &req->params;
	uint32_t slots = lay->slots, rect_h = 0, rect_w = 0;
	struct session *s;
	int r, fd;

	s = calloc(1, sizeof(*s));
	if (!s) {
		datasets_put(d, ds);
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	s->d = d;
	s->ds = ds;
	s->readable = req->readable;
	req->readable = NULL;
	log_unreadable(c, ds, s->readable);
	s->pid = (uint32_t)c->pid;
	s->pending_fd = -1;
	s->image_side = req->rect ? req->rect_side : a->image_size;
	if (session_take_pipeline(s, req) < 0) {
		free(s);
		datasets_put(d, ds);
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	snprintf(s->device, sizeof(s->device), "%s", req->device);
	s->samples = session_samples(ds->count, req->fraction, req->images);
	s->plan = (struct plan_spec){
		.samples = s->samples,
		.seed = a->seed,
		.rank = a->rank,
		.world_size = a->world_size,
		.batch_size = a->batch_size,
		.shuffle = a->shuffle,
		.drop_last = a->drop_last,
	};
	if (a->aug_repeats > 1) {
		s->plan.repeats = a->aug_repeats;
		s->plan.selected_round = a->aug_selected_round;
		s->plan.selected_ratio = a->aug_selected_ratio;
	}
	if (a->shard_order) {
		s->plan.shard_starts = ds->shards->starts;
		s->plan.shards = ds->shards->n;
		s->plan.shuffle_buffer = a->shuffle_buffer;
	}
	s->spec = req->spec;
	s->out_dtype = (enum sample_dtype)a->dtype;
	s->coordinated = a->coordinated;
	s->detect = a->task == STOKER__TASK__DETECT;
	if (s->detect) {
		s->detect_transform = a->transform == STOKER__TRANSFORM__LETTERBOX ? DETECT_LETTERBOX : DETECT_TRAIN;
		s->detect_params = req->detect;
		s->close_mosaic = req->close_mosaic;
		s->train_epochs = req->train_epochs;
		s->max_boxes = req->max_boxes;
		s->bgr = req->bgr;
		s->albu = req->albu;
		s->resample = req->resample;
		s->rect = req->rect;
	}
	if (s->rect) {
		/* The plan's order: the data set by aspect ratio, fixed; shuffled
		 * (Ultralytics' trainer) only when every batch has one shape. */
		if (rect_order(ds->sizes, s->samples, &s->rect_order) < 0) {
			conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory for the rect order");
			goto fail;
		}
		if (s->plan.shuffle && !rect_one_shape(ds->sizes, s->rect_order, s->samples, a->batch_size,
						       a->image_size, req->stride, req->pad, &rect_h, &rect_w)) {
			conn_log(LOG_LVL_INFO, c,
				 "rect: data set %s makes batches of several shapes: in aspect-ratio "
				 "order, not shuffled (as Ultralytics' trainer)",
				 ds->root);
			s->plan.shuffle = false;
		}
		if (!s->plan.shuffle)
			s->plan.fixed = s->rect_order;
	}
	if (plan_validate(&s->plan) < 0) {
		conn_send_error(
			c, STOKER__ERROR_CODE__INVALID_ARGUMENT,
			"data set %s has %llu samples: with world_size %u, batch_size %u and drop_last, rank %u "
			"gets no batch",
			ds->root, (unsigned long long)s->samples, a->world_size, a->batch_size, a->rank);
		goto fail;
	}
	s->labels_offset = lay->labels_offset;
	s->indices_offset = lay->indices_offset;
	s->boxes_offset = lay->boxes_offset;
	s->shapes_offset = lay->shapes_offset;
	s->ratio_pad_offset = lay->ratio_pad_offset;
	s->masks_offset = lay->masks_offset;
	s->mask_side = lay->mask_side;
	s->mask_ratio = req->mask_ratio;
	s->keypoints_offset = lay->keypoints_offset;
	s->kpt_points = req->inst.keypoint ? req->inst.nkpt : 0;
	s->obb_offset = lay->obb_offset;
	s->flip_idx = req->flip_idx; /* the session's now */
	req->flip_idx = NULL;
	if (req->has_mix) {
		s->mix = req->mix;
		s->has_mix = true;
		s->mix_classes = batchmix_classes(&req->mix, ds->num_classes);
		s->soft_offset = lay->soft_offset;
		s->mix_offset = lay->mix_offset;
		s->mix_scratch_offset = lay->mix_scratch_offset;
	}
	if (lay->fit_bytes) {
		/* Populated now, as rings are, so workers take no first-touch faults. */
		void *m = mmap(NULL, lay->fit_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
			       -1, 0);

		if (m != MAP_FAILED) {
			s->fit_pixels = m;
			s->fit_bytes = lay->fit_bytes; /* session_free() unmaps and gives it back */
			d->fit_bytes += lay->fit_bytes;
		}
		s->fit_tables = calloc(slots, sizeof(*s->fit_tables));
		s->fit_entries = calloc((size_t)slots * a->batch_size, sizeof(*s->fit_entries));
		if (!s->fit_pixels || !s->fit_tables || !s->fit_entries) {
			conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
					"out of memory for the mosaic's %llu bytes of partner images",
					(unsigned long long)lay->fit_bytes);
			goto fail;
		}
		for (uint32_t i = 0; i < slots; i++)
			s->fit_tables[i] = (struct fit_table){
				.entries = s->fit_entries + (size_t)i * a->batch_size,
				.pixels = s->fit_pixels + (size_t)i * a->batch_size * a->image_size * a->image_size * 3,
			};
	}
	r = ring_create(slots, lay->slot_bytes, &s->ring);
	if (r < 0) {
		conn_log(LOG_LVL_WARNING, c, "cannot create a %llu-byte ring: %s", (unsigned long long)lay->ring_bytes,
			 strerror(-r));
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "cannot create a %llu-byte ring: %s",
				(unsigned long long)lay->ring_bytes, strerror(-r));
		goto fail;
	}
	d->ring_bytes += s->ring->bytes;
	s->slot_state = calloc(slots, sizeof(*s->slot_state));
	s->waiting_on = calloc(slots, sizeof(*s->waiting_on));
	s->pins = calloc(slots, sizeof(*s->pins));
	s->jobs = calloc(slots, sizeof(*s->jobs));
	s->job_orders = calloc((size_t)slots * a->batch_size, sizeof(*s->job_orders));
	if (s->plan.repeats > 1) {
		s->job_copies = calloc((size_t)slots * a->batch_size, sizeof(*s->job_copies));
		if (!s->job_copies) {
			conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
					"out of memory for the copy numbers");
			goto fail;
		}
	}
	if (ds->remote) {
		s->fetches = calloc((size_t)slots * a->batch_size, sizeof(*s->fetches));
		for (uint32_t i = 0; s->fetches && s->jobs && i < slots; i++)
			s->jobs[i].fetches = s->fetches + (size_t)i * a->batch_size;
	}
	s->dataset_name = strdup(ds->root);
	if (!s->slot_state || !s->waiting_on || !s->pins || !s->jobs || !s->job_orders || !s->dataset_name ||
	    (ds->remote && !s->fetches)) {
		conn_log(LOG_LVL_WARNING, c, "attach failed: out of memory for a session of %u slots x %u samples",
			 slots, a->batch_size);
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
				"out of memory for a session of %u slots x %u samples", slots, a->batch_size);
		goto fail;
	}
	s->batches_per_epoch = plan_batches_per_epoch(&s->plan);
	if (s->rect) {
		uint64_t first, end;

		s->rect_hw = calloc(s->batches_per_epoch, 2 * sizeof(*s->rect_hw));
		if (!s->rect_hw) {
			conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
					"out of memory for the batch shapes");
			goto fail;
		}
		/* Shuffled: every batch has the one shape. Else each of this
		 * rank's batches lies in one batch of the whole order (whole
		 * batches per rank), whose images set its shape. */
		for (uint64_t b = 0; !s->plan.fixed && b < s->batches_per_epoch; b++) {
			s->rect_hw[2 * b] = rect_h;
			s->rect_hw[2 * b + 1] = rect_w;
		}
		if (s->plan.fixed)
			plan_fixed_range(&s->plan, &first, &end);
		for (uint64_t b = 0; s->plan.fixed && b < s->batches_per_epoch; b++) {
			uint64_t g = (first + b * a->batch_size) / a->batch_size * a->batch_size;
			uint64_t last = g + a->batch_size < s->samples ? g + a->batch_size - 1 : s->samples - 1;

			rect_batch_shape(ds->sizes, s->rect_order, g, last, a->image_size, req->stride, req->pad,
					 &s->rect_hw[2 * b], &s->rect_hw[2 * b + 1]);
		}
	}
	if (!session_first_batch_ok(c, s, a->first_batch))
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
		if (session_device_open(s, req->uuid, req->has_uuid) < 0) {
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


/* A scanned request meets its data set: the checks that need the data set,
 * the slot layout, and the node's budgets; then session_create. */
static void attach_start(struct conn *c, struct attach_request *req, struct dataset *ds)
{
	struct daemon *d = c->d;
	const Stoker__Attach *a = &req->params;
	struct transform_spec *spec = &req->spec;
	struct slot_layout lay;
	struct slot_request sr;
	int r;

	if (a->shard_order && !ds->shards) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT,
				"shard order needs a data set of tar shards; %s is loose files", ds->root);
		goto fail;
	}
	if (a->expect_samples && a->expect_samples != session_samples(ds->count, req->fraction, req->images)) {
		conn_send_error(c, STOKER__ERROR_CODE__FAILED_PRECONDITION,
				"cannot resume: the checkpoint was taken on %llu samples, %s now has %llu",
				(unsigned long long)a->expect_samples, ds->root,
				(unsigned long long)session_samples(ds->count, req->fraction, req->images));
		goto fail;
	}
	spec->kind =
		a->transform == STOKER__TRANSFORM__CENTER_CROP ? TRANSFORM_CENTER_CROP : TRANSFORM_RANDOM_RESIZED_CROP;
	spec->image_size = a->image_size;
	spec->image_height = 0;
	spec->dtype = attach_host_dtype((enum sample_dtype)a->dtype, strcmp(req->device, "cpu") != 0);
	/* Training crops take the speed; evaluation keeps PIL's pixels. */
	spec->dct_scaling = a->has_dct_scaling ? a->dct_scaling : spec->kind == TRANSFORM_RANDOM_RESIZED_CROP;
	if (req->tpipe) {
		struct tpipe_info info;

		/* a pipeline's first crop decides it, as the transform's does */
		tpipe_info(req->tpipe, &info);
		spec->dct_scaling = a->has_dct_scaling ? a->dct_scaling : info.first_crop_random;
		spec->image_height = info.out_h; /* image_size is its width */
	}
	for (int ch = 0; ch < 3; ch++) {
		spec->mean[ch] = a->n_mean == 3 ? a->mean[ch] : imagenet_mean[ch];
		spec->std[ch] = a->n_std == 3 ? a->std[ch] : imagenet_std[ch];
	}
	req->rect_side = req->rect ? (uint32_t)rect_max_side(a->image_size, req->stride, req->pad) : 0;
	if (req->has_mix) {
		char why[256];

		if (batchmix_check(&req->mix, a->batch_size, a->image_size, transform_height(spec), ds->num_classes,
				   spec->dtype, why, sizeof(why)) < 0) {
			conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "%s", why);
			goto fail;
		}
	}
	sr = (struct slot_request){
		.batch_size = a->batch_size,
		.image_size = a->image_size,
		.image_height = transform_height(spec),
		.dtype = spec->dtype,
		.rect_side = req->rect_side,
		.detect = a->task == STOKER__TASK__DETECT,
		.max_boxes = req->max_boxes,
		.mask_ratio = req->mask_ratio,
		.kpt_points = req->inst.keypoint ? req->inst.nkpt : 0,
		.obb = req->obb,
		.mosaic = a->task == STOKER__TASK__DETECT && a->transform != STOKER__TRANSFORM__LETTERBOX,
		.soft_classes = req->has_mix ? batchmix_classes(&req->mix, ds->num_classes) : 0,
		.prefetch = a->prefetch ? a->prefetch : d->cfg.prefetch,
		.page_size = (size_t)sysconf(_SC_PAGESIZE),
	};
	r = attach_slot_layout(&sr, &lay);
	if (r < 0) {
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
				"a ring of %u slots for batch_size %u and image_size %u overflows: lower batch_size, "
				"image_size or prefetch",
				sr.prefetch + 1, a->batch_size, a->image_size);
		goto fail;
	}
	if (lay.ring_bytes > d->cfg.max_ring_bytes) {
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
				"a ring of %u slots x %llu bytes exceeds max_ring_bytes (%llu): lower batch_size, "
				"image_size or prefetch",
				sr.prefetch + 1, (unsigned long long)lay.slot_bytes,
				(unsigned long long)d->cfg.max_ring_bytes);
		goto fail;
	}
	/* One budget for the node: the cache's share plus every ring. */
	if (d->ring_bytes + d->fit_bytes + lay.ring_bytes + lay.fit_bytes + d->cfg.cache_bytes > d->cfg.memory_budget) {
		conn_send_error(
			c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
			"a %llu-byte ring%s does not fit the node's memory_budget (%llu bytes): the cache takes %llu "
			"and %u clients' rings %llu; lower batch_size, image_size or prefetch, or wait",
			(unsigned long long)(lay.ring_bytes + lay.fit_bytes),
			lay.fit_bytes ? " (with the mosaic's partner images)" : "",
			(unsigned long long)d->cfg.memory_budget, (unsigned long long)d->cfg.cache_bytes, d->nconns,
			(unsigned long long)(d->ring_bytes + d->fit_bytes));
		goto fail;
	}
	session_create(c, req, ds, &lay);
	return;
fail:
	datasets_put(d, ds);
}

struct label_log {
	const char *dataset;
	uint64_t errors;
	bool instances; /* a bad file drops its image, not only its objects */
};

/* label_report_fn: the first few errors of a scan, each with file and line. */
static void log_label_error(void *ctx, const char *path, unsigned long line, const char *why)
{
	struct label_log *l = ctx;

	if (l->errors++ < ATTACH_MAX_LABEL_LOGS) {
		if (line)
			log_warning("data set %s: %s:%lu: %s; object dropped", l->dataset, path, line, why);
		else
			log_warning("data set %s: %s: %s; %s", l->dataset, path, why,
				    l->instances ? "its image dropped (Ultralytics' rule)" : "its objects dropped");
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
static void attach_scan_data(uv_work_t *w)
{
	struct attach_request *req = w->data;
	struct label_log l = {.dataset = req->path, .instances = req->has_inst};
	const struct dataset *ds = req->existing;

	if (!ds && url_is_remote(req->path) && req->params.task != STOKER__TASK__DETECT) {
		req->err = dataset_open_remote(req->path, ATTACH_MAX_SAMPLES, req->d->fetch, &req->s3, &req->result,
					       req->errbuf, sizeof(req->errbuf));
		if (req->err == 0)
			log_info("data set %s: %llu objects listed", req->path, (unsigned long long)req->result->count);
		return;
	}
	if (!ds && req->params.task != STOKER__TASK__DETECT) {
		req->err = dataset_open(req->path, ATTACH_MAX_SAMPLES, &req->result, req->errbuf, sizeof(req->errbuf));
		log_shards(req);
		return;
	}
	if (!ds) {
		if (url_is_remote(req->path))
			req->err =
				dataset_open_remote_detect(req->path, req->split, req->has_inst ? &req->inst : NULL,
							   ATTACH_MAX_SAMPLES, req->d->fetch, &req->s3, log_label_error,
							   &l, &req->result, req->errbuf, sizeof(req->errbuf));
		else
			req->err = dataset_open_detect(req->path, req->split, req->has_inst ? &req->inst : NULL,
						       ATTACH_MAX_SAMPLES, log_label_error, &l, &req->result,
						       req->errbuf, sizeof(req->errbuf));
		log_shards(req);
		if (req->err < 0)
			return;
		ds = req->result;
		log_info("data set %s: %llu images, %llu objects, %u classes; %llu without a label file, %llu label "
			 "errors (%llu images dropped for a corrupt label file)%s",
			 req->path, (unsigned long long)ds->count, (unsigned long long)ds->box_off[ds->count],
			 ds->num_classes, (unsigned long long)ds->label_files_missing,
			 (unsigned long long)ds->label_errors, (unsigned long long)ds->label_files_corrupt,
			 l.errors > ATTACH_MAX_LABEL_LOGS ? " (only the first ones logged)" : "");
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

/* The scan, then which of its files the client may read (access.h); a
 * data set listed with a client's own S3 keys is marked as theirs. */
static void attach_scan(uv_work_t *w)
{
	struct attach_request *req = w->data;

	attach_scan_data(w);
	if (req->err == 0 && req->s3.has_keys && req->result) {
		/* Listed with the client's own keys: found again only by them. */
		char *key = strdup(req->key);

		if (!key) {
			req->err = -ENOMEM;
			snprintf(req->errbuf, sizeof(req->errbuf), "out of memory");
			return;
		}
		free(req->result->key);
		req->result->key = key;
		req->result->remote->per_client = true;
	}
	if (req->err == 0 && req->s3.has_keys && req->existing)
		req->err = dataset_remote_probe(req->existing, &req->s3, req->errbuf, sizeof(req->errbuf));
	if (req->err < 0 && req->s3.has_keys && !req->s3.key_id[0]) {
		size_t n = strlen(req->errbuf);

		snprintf(req->errbuf + n, sizeof(req->errbuf) - n,
			 " (read with the client's own S3 credentials: it "
			 "sent none; docs/deploy.md, Multi-user nodes)");
	}
	if (req->err == 0 && req->check_access)
		req->err = access_map_build(&req->id, req->existing ? req->existing : req->result, &req->readable,
					    req->errbuf, sizeof(req->errbuf));
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
		conn_send_error(c,
				req->err == -ENOENT   ? STOKER__ERROR_CODE__NOT_FOUND
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
		if (existing && req->readable) {
			/* The client's map is of our scan: keep it, unshared. */
			datasets_put(req->d, existing);
		} else if (existing) {
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
	attach_start(c, req, ds);
out:
	request_free(req);
}

void attach_forget(struct conn *c)
{
	if (c->attaching) {
		c->attaching->conn = NULL;
		c->attaching = NULL;
	}
}

/* A client that is not root: the data set's path resolved, and its root
 * opened, with the client's own identity (access.h). False once the client
 * has been told why not. */
static bool attach_access(struct conn *c, const char *path, char real[PATH_MAX], struct access_id *id)
{
	char err[PATH_MAX + 128];
	int r = access_id_from_socket(c->fd, c->uid, c->gid, id);

	if (r < 0) {
		snprintf(err, sizeof(err), "cannot read the client's groups: %s", strerror(-r));
	} else {
		r = access_realpath(id, path, real, err, sizeof(err));
		if (r < 0)
			access_id_clear(id);
	}
	if (r == 0)
		return true;
	conn_log_cred(LOG_LVL_INFO, c, "attach refused: %s", err);
	conn_send_error(c,
			r == -EACCES   ? STOKER__ERROR_CODE__PERMISSION_DENIED
			: r == -ENOENT ? STOKER__ERROR_CODE__NOT_FOUND
			: r == -ENOMEM ? STOKER__ERROR_CODE__RESOURCE_EXHAUSTED
				       : STOKER__ERROR_CODE__INVALID_ARGUMENT,
			"%s", err);
	return false;
}

/* Is `url` under one of the administrator's shared_remote_prefixes? */
static bool remote_shared(const char *prefixes, const char *url)
{
	for (const char *p = prefixes; *p;) {
		size_t n;

		p += strspn(p, " ,\t");
		n = strcspn(p, " ,\t");
		if (n && strncmp(url, p, n) == 0)
			return true;
		p += n;
	}
	return false;
}

/*
 * An s3:// data set outside the shared prefixes is read with the client's
 * own keys (none: unsigned), root's and the daemon's own user's with the
 * node's unless they sent theirs. The data set's key then names the keys
 * (the id, and a hash of the rest), so only holders of the same keys share
 * its listing, and through it the cache. False once the client is told.
 */
static bool attach_s3_keys(struct conn *c, struct attach_request *req, const Stoker__S3Credentials *k)
{
	size_t at = strlen(req->key);

	if (strncmp(req->path, "s3://", 5) != 0 || remote_shared(c->d->cfg.shared_remote_prefixes, req->path) ||
	    (!k && (c->uid == 0 || c->uid == geteuid())))
		return true;
	req->s3.has_keys = true;
	if (k && (strlen(k->access_key_id) >= sizeof(req->s3.key_id) ||
		  strlen(k->secret_access_key) >= sizeof(req->s3.secret) ||
		  (k->session_token && strlen(k->session_token) >= sizeof(req->s3.token)))) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "S3 credentials: a key is too long");
		return false;
	}
	if (k) {
		snprintf(req->s3.key_id, sizeof(req->s3.key_id), "%s", k->access_key_id);
		snprintf(req->s3.secret, sizeof(req->s3.secret), "%s", k->secret_access_key);
		snprintf(req->s3.token, sizeof(req->s3.token), "%s", k->session_token ? k->session_token : "");
	}
	snprintf(req->key + at, sizeof(req->key) - at, "\nkeys %.128s %016llx", k ? req->s3.key_id : "(none)",
		 (unsigned long long)cache_key_hash(req->s3.secret, req->s3.token));
	return true;
}

void session_handle_attach(struct conn *c, const Stoker__Attach *a)
{
	struct daemon *d = c->d;
	struct attach_request *req;
	char real[PATH_MAX];
	struct access_id id = {0};
	bool check_access = false;
	struct dataset *ds;
	struct attach_limits lim;
	struct tpipe *tp = NULL;
	char why[512];
	int r;

	if (c->session || c->attaching) {
		conn_send_error(c, STOKER__ERROR_CODE__FAILED_PRECONDITION, "already attached");
		return;
	}
	lim = (struct attach_limits){
		.max_batch_size = d->cfg.max_batch_size,
		.max_image_size = d->cfg.max_image_size,
		.max_prefetch = d->cfg.max_prefetch,
		.prefetch = d->cfg.prefetch,
	};
	if (attach_validate(a, &lim, why, sizeof(why)) < 0) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "%s", why);
		return;
	}
	if (url_is_remote(a->dataset)) {
		/* Objects: the URL is the data set's name (dataset.h). */
		snprintf(real, sizeof(real), "%s", a->dataset);
	} else if (c->uid != 0) {
		if (!attach_access(c, a->dataset, real, &id))
			return;
		check_access = true;
	} else if ((r = -dataset_realpath(a->dataset, real)) != 0) {
		conn_send_error(c, r == ENOENT ? STOKER__ERROR_CODE__NOT_FOUND : STOKER__ERROR_CODE__INVALID_ARGUMENT,
				"data set %s: %s", a->dataset, strerror(r));
		return;
	}

	if (a->n_transforms && attach_pipeline(c, a, &tp) < 0) {
		access_id_clear(&id);
		return;
	}
	req = calloc(1, sizeof(*req));
	if (!req) {
		access_id_clear(&id);
		tpipe_free(tp);
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	req->d = d;
	req->conn = c;
	req->check_access = check_access;
	req->id = id;
	req->params = *a;
	req->params.base.n_unknown_fields = 0;
	req->params.base.unknown_fields = NULL;
	/* n_mean and n_std are 0 or 3 (checked above). */
	if (a->n_mean)
		memcpy(req->mean, a->mean, sizeof(req->mean));
	if (a->n_std)
		memcpy(req->std, a->std, sizeof(req->std));
	request_take_pipeline(req, tp);
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
	if (a->batch_transform) {
		char reason[256];

		req->has_mix = batchmix_parse(a->batch_transform, &req->mix, reason, sizeof(reason)) == 0;
		req->params.batch_transform = NULL;
	}
	req->params.has_device_uuid = false;
	req->params.device_uuid = (ProtobufCBinaryData){0, NULL};
	snprintf(req->path, sizeof(req->path), "%s", real);
	req->fraction = 1.0;
	if (a->task == STOKER__TASK__DETECT) {
		const Stoker__DetectOptions *o = a->detect;

		detect_options(o, &req->detect);
		req->close_mosaic = o ? o->close_mosaic : 10;
		req->train_epochs = o ? o->epochs : 0;
		req->max_boxes = o && o->has_max_boxes ? o->max_boxes : ATTACH_DEFAULT_MAX_BOXES;
		req->fraction = o ? o->fraction : 1.0;
		req->images = o ? o->images : 0;
		req->bgr = o ? o->bgr : 0;
		req->albu = o ? o->albumentations : 0;
		snprintf(req->split, sizeof(req->split), "%s", o && o->split ? o->split : "train");
		req->rect = o && o->rect;
		req->stride = o ? o->stride : 32;
		req->pad = o ? o->pad : 0.5;
		/* Evaluation defaults to Ultralytics' own resampling, training to the fast filter. */
		req->resample = o && o->resample == STOKER__RESAMPLE__RESAMPLE_CV2         ? FIT_CV2
				: o && o->resample == STOKER__RESAMPLE__RESAMPLE_ANTIALIAS ? FIT_ANTIALIAS
				: a->transform == STOKER__TRANSFORM__LETTERBOX             ? FIT_CV2
											   : FIT_ANTIALIAS;
		req->has_inst = o && o->yolo_task != STOKER__YOLO_TASK__YOLO_DETECT;
		req->inst = (struct instances_spec){.keypoint = o && o->yolo_task == STOKER__YOLO_TASK__YOLO_POSE};
		if (req->inst.keypoint) {
			req->inst.nkpt = o->kpt_points;
			req->inst.ndim = o->kpt_dims;
		}
		if (req->inst.keypoint && o->n_flip_idx) { /* attach_validate checked it: kpt_points entries */
			req->flip_idx = calloc(o->n_flip_idx, sizeof(*req->flip_idx));
			if (!req->flip_idx) {
				conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
						"out of memory for flip_idx");
				request_free(req);
				return;
			}
			memcpy(req->flip_idx, o->flip_idx, o->n_flip_idx * sizeof(*req->flip_idx));
		}
		req->mask_ratio = o && o->yolo_task == STOKER__YOLO_TASK__YOLO_SEGMENT ? o->mask_ratio : 0;
		req->obb = o && o->yolo_task == STOKER__YOLO_TASK__YOLO_OBB;
		dataset_yolo_key(req->has_inst ? &req->inst : NULL, req->split, real, req->key, sizeof(req->key));
	} else {
		snprintf(req->key, sizeof(req->key), "%s", real);
	}
	if (!req->params.dataset || !attach_s3_keys(c, req, a->s3_credentials)) {
		if (!req->params.dataset)
			conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory");
		request_free(req);
		return;
	}

	ds = datasets_find(d, req->key);
	/* A client's own check (files, or its S3 keys) runs at each attach. */
	if (ds && (!req->rect || ds->sizes) && !req->check_access && !req->s3.has_keys) {
		attach_start(c, req, ds);
		request_free(req);
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
		request_free(req);
		conn_send_error(c, STOKER__ERROR_CODE__INTERNAL, "cannot queue the data set scan: %s", uv_strerror(r));
	}
}
