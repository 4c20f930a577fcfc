/* SPDX-License-Identifier: MIT */
/* An Attach request's pure parts (loop/attach.h): every option refused at
 * its limit with the reason the client is told, and the slot layouts of
 * classify, detect, rect and device requests, with their overflow guards. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attach.h"

static const struct attach_limits limits = {
	.max_batch_size = 256,
	.max_image_size = 1024,
	.max_prefetch = 8,
	.prefetch = 4,
};

static Stoker__Attach classify(void)
{
	Stoker__Attach a = STOKER__ATTACH__INIT;

	a.dataset = "/data/train";
	a.batch_size = 32;
	a.image_size = 224;
	a.world_size = 1;
	a.task = STOKER__TASK__CLASSIFY;
	a.transform = STOKER__TRANSFORM__RANDOM_RESIZED_CROP;
	a.dtype = STOKER__DTYPE__UINT8;
	return a;
}

static Stoker__Attach detect(Stoker__DetectOptions *o)
{
	Stoker__Attach a = classify();

	a.task = STOKER__TASK__DETECT;
	a.transform = STOKER__TRANSFORM__MOSAIC;
	a.image_size = 640;
	a.detect = o;
	return a;
}

/* `a` is refused with -EINVAL and a reason that contains `want`. */
static void refused(const Stoker__Attach *a, const char *want)
{
	char why[512] = "";

	assert_int_equal(attach_validate(a, &limits, why, sizeof(why)), -EINVAL);
	if (!strstr(why, want))
		fail_msg("reason '%s' lacks '%s'", why, want);
}

static void accepted(const Stoker__Attach *a)
{
	char why[512] = "";

	if (attach_validate(a, &limits, why, sizeof(why)) != 0)
		fail_msg("refused: %s", why);
}

static void test_valid_requests(void **state)
{
	Stoker__DetectOptions o = STOKER__DETECT_OPTIONS__INIT;
	Stoker__Attach a = classify();
	float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.2f, 0.2f, 0.2f};
	uint8_t uuid[16] = {0};

	(void)state;
	accepted(&a);
	/* Every bound is inclusive. */
	a.batch_size = limits.max_batch_size;
	a.image_size = limits.max_image_size;
	a.prefetch = limits.max_prefetch;
	a.rank = 3;
	a.world_size = 4;
	a.n_mean = a.n_std = 3;
	a.mean = mean;
	a.std = std;
	a.dtype = STOKER__DTYPE__FLOAT16;
	a.shard_order = true;
	a.shuffle_buffer = ATTACH_MAX_SHUFFLE_BUFFER;
	a.device = "cuda:1";
	a.has_device_uuid = true;
	a.device_uuid = (ProtobufCBinaryData){sizeof(uuid), uuid};
	accepted(&a);

	a = detect(NULL);
	accepted(&a);
	o.has_max_boxes = true;
	o.max_boxes = ATTACH_MAX_BOXES;
	o.has_stride = true;
	o.stride = 32;
	o.has_pad = true;
	o.pad = 0.5;
	o.rect = true;
	o.split = "val";
	o.has_resample = true;
	o.resample = STOKER__RESAMPLE__RESAMPLE_CV2;
	a = detect(&o);
	a.transform = STOKER__TRANSFORM__LETTERBOX;
	a.shuffle = false;
	accepted(&a);
}

static void test_task_and_transform_refused(void **state)
{
	Stoker__DetectOptions o = STOKER__DETECT_OPTIONS__INIT;
	Stoker__Attach a;

	(void)state;
	a = classify();
	a.task = 7;
	refused(&a, "unknown task 7");
	a = classify();
	a.transform = 9;
	refused(&a, "unknown transform 9");
	a = classify();
	a.transform = STOKER__TRANSFORM__LETTERBOX;
	refused(&a, "transform letterbox is not for task classify");
	a = detect(NULL);
	a.transform = STOKER__TRANSFORM__CENTER_CROP;
	refused(&a, "transform center_crop is not for task detect");
	a = classify();
	a.detect = &o;
	refused(&a, "detection options given for task classify");
	a = detect(NULL);
	a.has_dct_scaling = true;
	refused(&a, "dct_scaling is an option of task classify");
	a = detect(NULL);
	a.dtype = STOKER__DTYPE__FLOAT32;
	refused(&a, "uint8 images only");
	a = detect(NULL);
	a.coordinated = true;
	refused(&a, "no coordinated groups");
}

static void test_detect_options_refused(void **state)
{
	Stoker__DetectOptions o;
	Stoker__Attach a;

	(void)state;
#define WITH(field_set)                                                  \
	do {                                                             \
		o = (Stoker__DetectOptions)STOKER__DETECT_OPTIONS__INIT; \
		field_set;                                               \
		a = detect(&o);                                          \
	} while (0)
	WITH((o.has_hsv_h = true, o.hsv_h = 1.5f));
	refused(&a, "hsv_h must be in [0, 1], not 1.5");
	WITH((o.has_scale = true, o.scale = 1.0f));
	refused(&a, "scale must be in [0, 1), not 1");
	WITH((o.has_mixup = true, o.mixup = NAN));
	refused(&a, "mixup must be in [0, 1]");
	WITH((o.has_copy_paste = true, o.copy_paste = 1.5f));
	refused(&a, "copy_paste must be in [0, 1], not 1.5");
	WITH((o.has_copy_paste_mode = true, o.copy_paste_mode = 7));
	refused(&a, "copy_paste_mode must be flip or mixup");
	WITH((o.has_copy_paste = true, o.copy_paste = 0.5f, o.has_copy_paste_mode = true,
	      o.copy_paste_mode = STOKER__COPY_PASTE_MODE__COPY_PASTE_MIXUP));
	accepted(&a); /* detect: its samples carry no polygons, as Ultralytics' box labels */
	WITH((o.has_max_boxes = true, o.max_boxes = 0));
	refused(&a, "max_boxes 0 is not in 1..10000");
	WITH((o.has_max_boxes = true, o.max_boxes = ATTACH_MAX_BOXES + 1));
	refused(&a, "max_boxes 10001 is not in 1..10000");
	WITH((o.has_stride = true, o.stride = 0));
	refused(&a, "stride 0 is not in 1..1024");
	WITH((o.has_stride = true, o.stride = 1025));
	refused(&a, "stride 1025 is not in 1..1024");
	WITH((o.has_pad = true, o.pad = -0.5));
	refused(&a, "pad -0.5 is not in 0..8");
	WITH((o.has_pad = true, o.pad = 8.5));
	refused(&a, "pad 8.5 is not in 0..8");
	WITH((o.has_pad = true, o.pad = NAN));
	refused(&a, "is not in 0..8");
	WITH((o.has_resample = true, o.resample = 5));
	refused(&a, "unknown resample 5");
	/* rect training: as Ultralytics, without mosaic, mixup and cutmix */
	WITH((o.rect = true));
	refused(&a, "rect training needs mosaic, mixup and cutmix 0 (Ultralytics turns them off under rect)");
	WITH((o.rect = true, o.has_mosaic = true, o.mosaic = 0, o.has_cutmix = true, o.cutmix = 0.5f));
	refused(&a, "rect training needs mosaic, mixup and cutmix 0");
	WITH((o.rect = true, o.has_mosaic = true, o.mosaic = 0, o.has_mixup = true, o.mixup = 0.1f));
	refused(&a, "rect training needs mosaic, mixup and cutmix 0");
	WITH((o.rect = true, o.has_mosaic = true, o.mosaic = 0));
	accepted(&a);
	/* shuffle: Ultralytics' rule, applied when the shapes are known */
	WITH((o.rect = true));
	a.transform = STOKER__TRANSFORM__LETTERBOX;
	a.shuffle = true;
	accepted(&a);
	WITH((o.rect = true));
	a.transform = STOKER__TRANSFORM__LETTERBOX;
	a.shuffle = false;
	a.drop_last = true;
	refused(&a, "rect keeps every batch");
	/* 640 / 1024 + 8, rounded up, x 1024: 9216; 1000 / 1024 + 8 -> 9 x 1024
	 * still fits; a stride of 1024 with pad 8 over image_size 16000 does not. */
	WITH((o.rect = true, o.has_stride = true, o.stride = 1024, o.has_pad = true, o.pad = 8));
	a.transform = STOKER__TRANSFORM__LETTERBOX;
	a.shuffle = false;
	accepted(&a);
	a.image_size = 1024;
	accepted(&a);
	WITH((o.rect = true, o.has_stride = true, o.stride = 1024, o.has_pad = true, o.pad = 8));
	a.transform = STOKER__TRANSFORM__LETTERBOX;
	a.shuffle = false;
	a.image_size = 16000;
	refused(&a, "rect with this image_size, stride and pad makes batches over 16384 pixels");
	WITH((o.split = ""));
	refused(&a, "split '' is not a data.yaml key");
	WITH((o.split = "a/b"));
	refused(&a, "split 'a/b' is not a data.yaml key");
	WITH((o.split = "abcdefghijklmnopqrstuvwxyz0123456"));
	refused(&a, "is not a data.yaml key");
	WITH((o.split = "abcdefghijklmnopqrstuvwxyz012345"));
	accepted(&a);
#undef WITH
}

static void test_limits_refused(void **state)
{
	float two[2] = {0.5f, 0.5f}, bad[3] = {0.5f, 0.0f, 0.5f}, nan3[3] = {0.5f, NAN, 0.5f};
	float inf3[3] = {0.5f, INFINITY, 0.5f}, ok3[3] = {0.2f, 0.2f, 0.2f};
	uint8_t uuid[15] = {0};
	char longpath[PATH_MAX + 1];
	Stoker__Attach a;

	(void)state;
	a = classify();
	a.dtype = 3;
	refused(&a, "unknown dtype 3");
	a = classify();
	a.n_mean = 2;
	a.mean = two;
	refused(&a, "mean and std take 3 values each");
	a = classify();
	a.n_std = 3;
	a.std = bad;
	refused(&a, "std must be positive and finite");
	a.std = nan3;
	refused(&a, "std must be positive and finite");
	a = classify();
	a.n_mean = 3;
	a.mean = inf3;
	refused(&a, "mean must be finite");
	a.n_std = 3;
	a.std = ok3;
	refused(&a, "std must be positive and finite"); /* checked together, std's loop first */
	a = classify();
	a.batch_size = 0;
	refused(&a, "batch_size 0 is not in 1..256 (max_batch_size)");
	a.batch_size = 257;
	refused(&a, "batch_size 257 is not in 1..256 (max_batch_size)");
	a = classify();
	a.image_size = 0;
	refused(&a, "image_size 0 is not in 1..1024 (max_image_size)");
	a.image_size = 1025;
	refused(&a, "image_size 1025 is not in 1..1024 (max_image_size)");
	a = classify();
	a.world_size = 0;
	refused(&a, "rank 0 and world_size 0: need world_size >= 1 and rank < world_size");
	a.world_size = 2;
	a.rank = 2;
	refused(&a, "rank 2 and world_size 2");
	a = classify();
	a.prefetch = 9;
	refused(&a, "prefetch 9 is over 8 (max_prefetch)");
	/* A request's 0 takes the configured default, which is checked too. */
	{
		struct attach_limits l = limits;
		char why[512];

		a = classify();
		l.prefetch = 12;
		assert_int_equal(attach_validate(&a, &l, why, sizeof(why)), -EINVAL);
		assert_string_equal(why, "prefetch 12 is over 8 (max_prefetch)");
	}
	a = classify();
	a.shard_order = true;
	a.shuffle_buffer = ATTACH_MAX_SHUFFLE_BUFFER + 1;
	refused(&a, "shuffle_buffer 4194305 is over 4194304 samples");
	a.shard_order = false;
	accepted(&a); /* the buffer is shard order's only */
	a = classify();
	a.device = "gpu0";
	refused(&a, "device 'gpu0' is not cpu or cuda:N");
	a.device = "cpu";
	a.has_device_uuid = true;
	refused(&a, "device_uuid given for device cpu");
	a.device = "cuda:0";
	a.device_uuid = (ProtobufCBinaryData){sizeof(uuid), uuid};
	refused(&a, "device_uuid has 15 bytes, not 16");
	a = classify();
	a.dataset = NULL;
	refused(&a, "no data set path given");
	a.dataset = "";
	refused(&a, "no data set path given");
	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = '\0';
	a.dataset = longpath;
	refused(&a, "no data set path given");
}

static void assert_layout(const struct slot_layout *l, uint64_t image, size_t labels, size_t indices, size_t boxes,
			  size_t shapes, size_t ratio_pad, uint64_t slot, uint32_t slots, uint64_t fit)
{
	assert_int_equal(l->image_bytes, image);
	assert_int_equal(l->labels_offset, labels);
	assert_int_equal(l->indices_offset, indices);
	assert_int_equal(l->boxes_offset, boxes);
	assert_int_equal(l->shapes_offset, shapes);
	assert_int_equal(l->ratio_pad_offset, ratio_pad);
	assert_int_equal(l->slot_bytes, slot);
	assert_int_equal(l->slots, slots);
	assert_int_equal(l->ring_bytes, (uint64_t)slot * slots);
	assert_int_equal(l->fit_bytes, fit);
}

static void test_layout_classify(void **state)
{
	struct slot_request r = {.batch_size = 32,
				 .image_size = 224,
				 .dtype = DTYPE_UINT8,
				 .prefetch = 3,
				 .page_size = 4096};
	struct slot_layout l;

	(void)state;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	/* 32 x 224 x 224 x 3 images, then 32 labels and 32 indices; 4 slots. */
	assert_layout(&l, 4816896, 4816896, 4817152, 0, 0, 0, 4820992, 4, 0);
	r.dtype = DTYPE_FLOAT32;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_layout(&l, 19267584, 19267584, 19267840, 0, 0, 0, 19271680, 4, 0);
	/* Every area and the slot keep their alignment. */
	r = (struct slot_request){.batch_size = 5,
				  .image_size = 33,
				  .dtype = DTYPE_FLOAT16,
				  .prefetch = 0,
				  .page_size = 16384};
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_int_equal(l.image_bytes, 5ull * 33 * 33 * 3 * 2);
	assert_int_equal(l.labels_offset % 64, 0);
	assert_true(l.labels_offset >= l.image_bytes && l.labels_offset < l.image_bytes + 64);
	assert_int_equal(l.slot_bytes, 3 * 16384);
	assert_int_equal(l.slots, 1);
	/* A pipeline's (h, w) output: image_size wide, image_height high. */
	r.image_height = 20;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_int_equal(l.image_bytes, 5ull * 20 * 33 * 3 * 2);
	r.image_height = 40;
	r.soft_classes = 10;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_int_equal(l.image_bytes, 5ull * 40 * 33 * 3 * 2);
	assert_true(l.slot_bytes >= l.mix_scratch_offset + 40ull * 33 * 3 * 2);
}

/* yolo_task segment, pose, obb: the masks (uint16, the side / mask_ratio
 * squared per image), keypoints and xywhr areas after the detection
 * metadata, each 64-byte aligned and sized, none without its task. */
static void test_layout_instances(void **state)
{
	struct slot_request r = {.batch_size = 4,
				 .image_size = 160,
				 .dtype = DTYPE_UINT8,
				 .detect = true,
				 .max_boxes = 10,
				 .mask_ratio = 4,
				 .kpt_points = 17,
				 .obb = true,
				 .prefetch = 0,
				 .page_size = 4096};
	struct slot_layout l;

	(void)state;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_int_equal(l.mask_side, 40);
	assert_int_equal(l.masks_offset % 64, 0);
	assert_true(l.masks_offset >= l.ratio_pad_offset + 4 * 32);
	assert_true(l.keypoints_offset >= l.masks_offset + 4ull * 40 * 40 * 2 && l.keypoints_offset % 64 == 0);
	assert_true(l.obb_offset >= l.keypoints_offset + 4ull * 10 * 17 * 12 && l.obb_offset % 64 == 0);
	assert_true(l.slot_bytes >= l.obb_offset + 4ull * 10 * 5 * 4);
	/* a rect batch's masks: room for the largest shape's */
	r.rect_side = 224;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_int_equal(l.mask_side, 56);
	r.mask_ratio = 0;
	r.kpt_points = 0;
	r.obb = false;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_int_equal(l.masks_offset, 0);
	assert_int_equal(l.keypoints_offset, 0);
	assert_int_equal(l.obb_offset, 0);
	/* overflow-checked like the rest */
	r.kpt_points = UINT32_MAX;
	r.max_boxes = UINT32_MAX;
	r.batch_size = UINT32_MAX;
	assert_int_equal(attach_slot_layout(&r, &l), -EOVERFLOW);
}

/* A batch op: soft targets, mix records and one scratch image after the
 * indices, each 64-byte aligned, overflow-checked like the rest. */
static void test_layout_soft_targets(void **state)
{
	struct slot_request r = {.batch_size = 8,
				 .image_size = 32,
				 .dtype = DTYPE_FLOAT32,
				 .soft_classes = 1000,
				 .prefetch = 1,
				 .page_size = 4096};
	struct slot_layout l;
	uint64_t image = 32ull * 32 * 3 * 4;

	(void)state;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_int_equal(l.labels_offset, 8 * image);
	assert_int_equal(l.soft_offset, l.indices_offset + 64);
	assert_int_equal(l.mix_offset, l.soft_offset + 8 * 1000 * 4);
	assert_int_equal(l.mix_scratch_offset, l.mix_offset + 8 * 40); /* 320: a multiple of 64 */
	assert_true(l.slot_bytes >= l.mix_scratch_offset + image && l.slot_bytes % 4096 == 0);
	r.soft_classes = 0;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_int_equal(l.soft_offset, 0);
	assert_int_equal(l.mix_offset, 0);
	r = (struct slot_request){.batch_size = UINT32_MAX,
				  .image_size = 1,
				  .soft_classes = UINT32_MAX,
				  .prefetch = 0,
				  .page_size = 4096};
	assert_int_equal(attach_slot_layout(&r, &l), -EOVERFLOW);
}

static void test_layout_device(void **state)
{
	struct slot_request r = {.batch_size = 32, .image_size = 224, .prefetch = 3, .page_size = 4096};
	struct slot_layout host, dev;

	(void)state;
	/* A device's host ring carries uint8: float32 out, a quarter of the bytes. */
	assert_int_equal(attach_host_dtype(DTYPE_FLOAT32, true), DTYPE_UINT8);
	assert_int_equal(attach_host_dtype(DTYPE_FLOAT16, true), DTYPE_UINT8);
	assert_int_equal(attach_host_dtype(DTYPE_FLOAT32, false), DTYPE_FLOAT32);
	r.dtype = attach_host_dtype(DTYPE_FLOAT32, false);
	assert_int_equal(attach_slot_layout(&r, &host), 0);
	r.dtype = attach_host_dtype(DTYPE_FLOAT32, true);
	assert_int_equal(attach_slot_layout(&r, &dev), 0);
	assert_int_equal(host.image_bytes, 4 * dev.image_bytes);
	assert_layout(&dev, 4816896, 4816896, 4817152, 0, 0, 0, 4820992, 4, 0);
}

static void test_layout_detect(void **state)
{
	struct slot_request r = {.batch_size = 3,
				 .image_size = 100,
				 .dtype = DTYPE_UINT8,
				 .detect = true,
				 .max_boxes = 7,
				 .prefetch = 1,
				 .page_size = 4096};
	struct slot_layout l;

	(void)state;
	/* letterbox: images, labels, indices, then 3 x 7 boxes of 6 floats,
	 * 3 shapes of 4 int32 and 3 ratio_pads of 4 doubles, each 64-aligned. */
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_layout(&l, 90000, 90048, 90072, 90112, 90624, 90688, 94208, 2, 0);
	/* mosaic: the same slot, and each slot's partner images beside the ring. */
	r.mosaic = true;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_layout(&l, 90000, 90048, 90072, 90112, 90624, 90688, 94208, 2, 2ull * 3 * 100 * 100 * 3);
	/* mosaic means nothing without detect */
	r.detect = false;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_int_equal(l.fit_bytes, 0);
	assert_int_equal(l.boxes_offset, 0);
}

static void test_layout_rect(void **state)
{
	/* image_size 640, stride 32, pad 0.5: room for 672 x 672, uint8. */
	struct slot_request r = {.batch_size = 4,
				 .image_size = 640,
				 .dtype = DTYPE_UINT8,
				 .rect_side = 672,
				 .detect = true,
				 .max_boxes = 1000,
				 .prefetch = 0,
				 .page_size = 4096};
	struct slot_layout l;

	(void)state;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_layout(&l, 5419008, 5419008, 5419040, 5419072, 5515072, 5515136, 5517312, 1, 0);
	/* The rect area is uint8 whatever the dtype says. */
	r.dtype = DTYPE_FLOAT32;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	assert_int_equal(l.image_bytes, 5419008);
}

static void test_layout_overflow(void **state)
{
	struct slot_request r = {.batch_size = UINT32_MAX,
				 .image_size = UINT32_MAX,
				 .dtype = DTYPE_FLOAT32,
				 .prefetch = 1,
				 .page_size = 4096};
	struct slot_layout l, before;

	(void)state;
	memset(&l, 0xa5, sizeof(l));
	before = l;
	/* image_size^2 x 12 x batch_size does not fit 64 bits: *out untouched. */
	assert_int_equal(attach_slot_layout(&r, &l), -EOVERFLOW);
	assert_memory_equal(&l, &before, sizeof(l));
	/* One image fits, a batch of them does not. */
	r.image_size = 1u << 21;
	r.batch_size = 1u << 20;
	assert_int_equal(attach_slot_layout(&r, &l), -EOVERFLOW);
	/* The boxes area overflows. */
	r = (struct slot_request){.batch_size = UINT32_MAX,
				  .image_size = 8,
				  .dtype = DTYPE_UINT8,
				  .detect = true,
				  .max_boxes = UINT32_MAX,
				  .prefetch = 1,
				  .page_size = 4096};
	assert_int_equal(attach_slot_layout(&r, &l), -EOVERFLOW);
	/* The ring: too many slots of a large slot; UINT32_MAX + 1 slots. */
	r = (struct slot_request){.batch_size = 1u << 16,
				  .image_size = 1u << 16,
				  .dtype = DTYPE_FLOAT32,
				  .prefetch = 1u << 20,
				  .page_size = 4096};
	assert_int_equal(attach_slot_layout(&r, &l), -EOVERFLOW);
	r = (struct slot_request){.batch_size = 1,
				  .image_size = 8,
				  .dtype = DTYPE_UINT8,
				  .prefetch = UINT32_MAX,
				  .page_size = 4096};
	assert_int_equal(attach_slot_layout(&r, &l), -EOVERFLOW);
	/* The mosaic's partner images. */
	r = (struct slot_request){.batch_size = 1u << 20,
				  .image_size = 1u << 16,
				  .dtype = DTYPE_UINT8,
				  .rect_side = 8,
				  .detect = true,
				  .max_boxes = 1,
				  .mosaic = true,
				  .prefetch = 1u << 11,
				  .page_size = 4096};
	assert_int_equal(attach_slot_layout(&r, &l), -EOVERFLOW);
	r.mosaic = false;
	assert_int_equal(attach_slot_layout(&r, &l), 0);
	/* Nothing to lay out. */
	r = (struct slot_request){.batch_size = 0, .image_size = 8, .page_size = 4096};
	assert_int_equal(attach_slot_layout(&r, &l), -EINVAL);
	r = (struct slot_request){.batch_size = 1, .image_size = 8, .page_size = 0};
	assert_int_equal(attach_slot_layout(&r, &l), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_requests),         cmocka_unit_test(test_task_and_transform_refused),
		cmocka_unit_test(test_detect_options_refused), cmocka_unit_test(test_limits_refused),
		cmocka_unit_test(test_layout_classify),        cmocka_unit_test(test_layout_device),
		cmocka_unit_test(test_layout_soft_targets),    cmocka_unit_test(test_layout_instances),
		cmocka_unit_test(test_layout_detect),          cmocka_unit_test(test_layout_rect),
		cmocka_unit_test(test_layout_overflow),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
