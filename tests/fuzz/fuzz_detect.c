/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: detection's untrusted inputs. The first byte picks
 *   0: a label file's text into labels_parse(), and into instances_parse()
 *      (Ultralytics' reading, every task) with a spec from that byte,
 *   1: a data.yaml's text into data_yaml_load() (through a memfd path),
 *   2: detect_make() with parameters, image sizes and boxes taken from the
 *      input (whatever detect_params_check() accepts), on small outputs,
 *      square or (letterbox) a rectangular batch's shape: the geometry and
 *      box code must never read or write out of bounds, every box it
 *      writes must lie inside the image, the metadata inside it too; in
 *      training, with instances (segments, keypoints with flip_idx, OBB
 *      corners) from the input too, every value it writes finite;
 *   3: a file's bytes into the header reader (header.h: every format's
 *      size, the EXIF orientation of JPEG APP1, PNG eXIf and WebP EXIF)
 *      that reads image sizes for rectangular batches, through a memfd
 *      and from memory (the two must agree), then that orientation
 *      applied to a small image of the size it gives.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dataset.h"
#include "detect.h"
#include "header.h"
#include "instances.h"
#include "fuzz_common.h"
#include "labels.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct input {
	const uint8_t *p;
	size_t n;
};

static uint32_t take_u32(struct input *in, uint32_t below)
{
	uint32_t v = 0;

	for (int i = 0; i < 4 && in->n; i++, in->p++, in->n--)
		v = v << 8 | *in->p;
	return below ? v % below : v;
}

static float take_unit(struct input *in)
{
	return (float)take_u32(in, 1001) / 1000.0f;
}

struct fake {
	uint8_t pixels[4][96 * 96 * 3];
	uint32_t w[4], h[4];
	struct detect_box boxes[4][8];
	uint32_t nboxes[4];
	uint32_t fail_mask;
	/* detect_output.inst: object b's polygon seg[k][seg_off[k][b] ..), 3 keypoints each */
	uint64_t seg_off[4][9];
	float seg[4][8 * 6 * 2];
	float kpt[4][8 * 3 * 3];
};

static int fake_load(void *ctx, uint64_t index, uint32_t side, struct detect_sample *out)
{
	struct fake *f = ctx;
	unsigned k = (unsigned)(index % 4);

	if (f->fail_mask >> k & 1)
		return -EBADMSG;
	*out = (struct detect_sample){
		.pixels = f->pixels[k],
		.width = f->w[k] < side ? f->w[k] : side,
		.height = f->h[k] < side ? f->h[k] : side,
		.boxes = f->boxes[k],
		.box_count = f->nboxes[k],
		/* both mosaic paths: stable samples (the canvas made a row at a time) and mixes with copied ones */
		.stable = index % 8 >= 4,
		.seg_off = f->seg_off[k],
		.seg = f->seg[k],
		.kpt = f->kpt[k],
	};
	return 0;
}

static void run_detect(struct input *in)
{
	static struct detect *d;
	static struct fake f;
	struct detect_params p;
	struct rng rng;
	char why[160];
	uint32_t size = 8 + take_u32(in, 89), count = 1 + take_u32(in, 8), nboxes = 0, max_boxes = 1 + take_u32(in, 40);
	uint64_t dropped = 0;
	struct detect_meta meta;
	enum detect_transform t;
	uint32_t out_w, out_h, task;
	static const uint32_t flip_idx[3] = {1, 0, 2};
	struct detect_instances inst = {0};
	uint8_t *image;
	float *boxes, kpt[40 * 3 * 3], xywhr[40 * 5];

	if (!d && detect_new(&d) < 0)
		abort();
	p = (struct detect_params){
		.hsv_h = take_unit(in),
		.hsv_s = take_unit(in),
		.hsv_v = take_unit(in),
		.degrees = take_unit(in) * 180,
		.translate = take_unit(in) * 0.99f,
		.scale = take_unit(in) * 0.99f,
		.shear = take_unit(in) * 89,
		.perspective = take_unit(in) * 0.1f,
		.flipud = take_unit(in),
		.fliplr = take_unit(in),
		.mosaic = take_unit(in),
		.mixup = take_unit(in),
	};
	if (detect_params_check(&p, why, sizeof(why)) < 0)
		return;
	for (int k = 0; k < 4; k++) {
		f.w[k] = 1 + take_u32(in, size);
		f.h[k] = 1 + take_u32(in, size);
		f.nboxes[k] = take_u32(in, 9);
		for (uint32_t b = 0; b < f.nboxes[k]; b++)
			f.boxes[k][b] = (struct detect_box){.cls = (float)take_u32(in, 80),
							    .cx = take_unit(in),
							    .cy = take_unit(in),
							    .w = take_unit(in),
							    .h = take_unit(in)};
		memset(f.pixels[k], (int)take_u32(in, 256), sizeof(f.pixels[k]));
		/* polygons of 0..6 points (0: the sample carries no instances), in [-0.5, 1.5] */
		f.seg_off[k][0] = 0;
		for (uint32_t b = 0; b < f.nboxes[k]; b++) {
			uint32_t np = take_u32(in, 7);

			for (uint32_t j = 0; j < np * 2; j++)
				f.seg[k][f.seg_off[k][b] * 2 + j] = take_unit(in) * 2 - 0.5f;
			f.seg_off[k][b + 1] = f.seg_off[k][b] + np;
			for (uint32_t j = 0; j < 9; j++)
				f.kpt[k][b * 9 + j] = j % 3 == 2 ? (float)take_u32(in, 3) : take_unit(in) * 2 - 0.5f;
		}
	}
	f.fail_mask = take_u32(in, 16);
	rng_init(&rng, take_u32(in, 0), 0, 0, RNG_AUGMENT);
	t = take_u32(in, 2) ? DETECT_TRAIN : DETECT_LETTERBOX;
	/* letterbox: a rectangular batch's shape, up to a stride's pad beyond size */
	out_w = t == DETECT_TRAIN ? size : 1 + take_u32(in, size + 32);
	out_h = t == DETECT_TRAIN ? size : 1 + take_u32(in, size + 32);
	image = malloc((size_t)out_w * out_h * 3);
	boxes = malloc((size_t)max_boxes * DETECT_BOX_FLOATS * sizeof(float));
	if (!image || !boxes)
		abort();
	/* training's instances: none, segment, pose (flip_idx or none), obb */
	task = t == DETECT_TRAIN ? take_u32(in, 5) : 0;
	p.cutmix = task ? take_unit(in) : 0; /* CutMix with instances */
	if (task)
		inst = (struct detect_instances){.seg_points = task == 1   ? 1000
							       : task == 4 ? 100
									   : 0,
						 .nkpt = task == 2 || task == 3 ? 3 : 0,
						 .flip_idx = task == 2 ? flip_idx : NULL,
						 .obb = task == 4};
	if (task) { /* CopyPaste on the segments, either mode */
		p.copy_paste = take_unit(in);
		p.copy_paste_mode = (int)take_u32(in, 2);
	}
	struct detect_output o = {image, out_w, out_h, boxes, max_boxes, &nboxes, &dropped,
				  &meta, NULL,  NULL,  NULL,  NULL,      NULL,    NULL};
	if (task) {
		o.inst = &inst;
		o.kpt = kpt;
		o.xywhr = xywhr;
	}
	if (detect_make(d, t, &p, size, take_u32(in, count), count, &rng, fake_load, &f, &o) == 0) {
		if (nboxes > max_boxes)
			abort();
		if (meta.shape[0] <= 0 || meta.shape[1] <= 0 || meta.shape[2] <= 0 || meta.shape[3] <= 0 ||
		    meta.shape[2] > (int32_t)size || meta.shape[3] > (int32_t)size || !(meta.ratio_pad[0] > 0) ||
		    !(meta.ratio_pad[1] > 0) || meta.ratio_pad[2] < 0 || meta.ratio_pad[2] >= out_w ||
		    meta.ratio_pad[3] < 0 || meta.ratio_pad[3] >= out_h)
			abort(); /* metadata that describes no image inside the output */
		for (uint32_t b = 0; task && b < nboxes; b++)
			for (int k = 0; k < DETECT_BOX_FLOATS; k++)
				if (!isfinite(boxes[b * DETECT_BOX_FLOATS + k]))
					abort(); /* a row that is not a number */
		for (uint32_t b = 0; !task && b < nboxes; b++) {
			const float *r = boxes + b * DETECT_BOX_FLOATS;

			if (!(r[4] > 0 && r[5] > 0 && r[2] - r[4] / 2 >= -1e-4f && r[2] + r[4] / 2 <= 1 + 1e-4f &&
			      r[3] - r[5] / 2 >= -1e-4f && r[3] + r[5] / 2 <= 1 + 1e-4f))
				abort(); /* a box outside the image */
		}
	}
	free(image);
	free(boxes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = {data + 1, size ? size - 1 : 0};

	if (size == 0)
		return 0;
	switch (data[0] % 4) {
	case 0: {
		struct box_vec v = {0};

		labels_parse((const char *)in.p, in.n, data[0] / 3 % 8, "fuzz.txt", NULL, NULL, &v);
		for (size_t i = 0; i < v.n; i++)
			if (!(v.v[i].w > 0 && v.v[i].h > 0 && v.v[i].cx >= 0 && v.v[i].cx <= 1))
				abort();
		free(v.v);
		{
			struct instances_spec spec = {
				.num_classes = data[0] / 4 % 8,
				.keypoint = data[0] >> 2 & 1,
				.nkpt = (data[0] >> 3 & 3) + 1,
				.ndim = 2 + (data[0] >> 5 & 1),
				.single_cls = data[0] >> 6 & 1,
			};
			struct instances is;
			char why[160];

			if (instances_parse((const char *)in.p, in.n, &spec, &is, why, sizeof(why)) == 0) {
				for (uint32_t i = 0; i < is.n; i++)
					if (!(is.cls[i] >= 0 && is.box[4 * i + 2] >= 0) || (spec.keypoint && !is.kpt) ||
					    (is.seg_off && is.seg_off[i] > is.seg_off[i + 1]))
						abort();
				instances_clear(&is);
			}
		}
		break;
	}
	case 1: {
		struct data_yaml y = {0};
		char path[64], err[256];
		int fd = memfd_create("yaml", MFD_CLOEXEC);

		if (fd < 0 || write(fd, in.p, in.n) != (ssize_t)in.n)
			abort();
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		if (data_yaml_load(path, data[0] / 3 % 2 ? "val" : "train", &y, err, sizeof(err)) == 0) {
			for (uint32_t i = 0; i < y.nnames; i++)
				if (!y.names[i])
					abort();
		}
		data_yaml_clear(&y);
		close(fd);
		break;
	}
	case 2: run_detect(&in); break;
	default: {
		struct image_header a, b;
		int fd = memfd_create("image", MFD_CLOEXEC);
		int ra, rb;

		if (fd < 0 || write(fd, in.p, in.n) != (ssize_t)in.n)
			abort();
		ra = image_header_fd(fd, &a);
		rb = image_header_mem(in.p, in.n, &b);
		close(fd);
		if (ra != rb || (ra == 0 && memcmp(&a, &b, sizeof(a))))
			abort(); /* a file and its bytes read alike */
		if (ra == 0) {
			static uint8_t *buf;
			static size_t cap;
			uint8_t src[16 * 12 * 4];
			struct decoded_region in_reg, out;
			uint32_t w = a.width % 16 + 1, h = a.height % 12 + 1, ow, oh;
			struct image_header small = a;

			if (a.width == 0 || a.height == 0 || a.width > INT32_MAX || a.height > INT32_MAX ||
			    a.orientation < 1 || a.orientation > 8)
				abort();
			for (size_t i = 0; i < sizeof(src); i++)
				src[i] = (uint8_t)i;
			in_reg = (struct decoded_region){src, (size_t)w * 4, w, h};
			if (image_orient(&in_reg, a.orientation, &buf, &cap, &out) < 0)
				abort();
			small.width = w;
			small.height = h;
			image_header_oriented(&small, &ow, &oh);
			if (out.width != ow || out.height != oh)
				abort();
		}
	}
	}
	return 0;
}
