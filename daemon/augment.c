/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "augment.h"
#include "decode.h"
#include "resize.h"

/* Outputs larger than this are a caller's bug, not a request (the daemon caps image_size far lower). */
#define PIPELINE_MAX_IMAGE_SIZE 16384u

struct pipeline {
	struct decoder *dec;
	struct resizer *rs;
	char error[256];
};

int pipeline_new(const struct decode_limits *limits, struct pipeline **out)
{
	struct pipeline *p;
	int r;

	if (!out)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	r = decoder_new(limits ? limits->max_pixels : 0, limits ? limits->max_scans : 0, &p->dec);
	if (r >= 0)
		r = resizer_new(&p->rs);
	if (r < 0) {
		pipeline_free(p);
		return r;
	}
	*out = p;
	return 0;
}

void pipeline_free(struct pipeline *p)
{
	if (!p)
		return;
	decoder_free(p->dec);
	resizer_free(p->rs);
	free(p);
}

const char *pipeline_error(const struct pipeline *p)
{
	return p ? p->error : "";
}

void random_resized_crop_box(uint32_t width, uint32_t height, struct rng *rng, struct crop_box *out)
{
	/* torchvision's defaults: scale (0.08, 1), ratio (3/4, 4/3) */
	const double scale_lo = 0.08, scale_hi = 1.0, ratio_lo = 3.0 / 4.0, ratio_hi = 4.0 / 3.0;
	const double area = (double)width * height, log_lo = log(ratio_lo), log_hi = log(ratio_hi);
	double w, h, in_ratio;

	for (int attempt = 0; attempt < 10; attempt++) {
		double target = area * rng_range(rng, scale_lo, scale_hi);
		double aspect = exp(rng_range(rng, log_lo, log_hi));

		/* Python's round() rounds half to even, as nearbyint() does in the default mode. */
		w = nearbyint(sqrt(target * aspect));
		h = nearbyint(sqrt(target / aspect));
		if (w > 0 && w <= width && h > 0 && h <= height) {
			/* randint(0, H - h) then randint(0, W - w), both inclusive */
			out->y = (double)rng_below(rng, (uint64_t)(height - (uint32_t)h) + 1);
			out->x = (double)rng_below(rng, (uint64_t)(width - (uint32_t)w) + 1);
			out->w = w;
			out->h = h;
			goto flip;
		}
	}

	/* Fallback: the central crop, its aspect clamped into the ratio range. */
	in_ratio = (double)width / height;
	if (in_ratio < ratio_lo) {
		w = width;
		h = nearbyint(w / ratio_lo);
	} else if (in_ratio > ratio_hi) {
		h = height;
		w = nearbyint(h * ratio_hi);
	} else {
		w = width;
		h = height;
	}
	out->x = (double)((width - (uint32_t)w) / 2);
	out->y = (double)((height - (uint32_t)h) / 2);
	out->w = w;
	out->h = h;

flip:
	/* RandomHorizontalFlip: flip when rand() < p */
	out->flip = rng_uniform(rng) < 0.5;
}

void center_crop_box(uint32_t width, uint32_t height, uint32_t size, struct crop_box *out)
{
	uint64_t s, new_w, new_h;
	double left, top;

	*out = (struct crop_box){ .x = 0, .y = 0, .w = width, .h = height, .flip = false };
	if (width == 0 || height == 0 || size == 0)
		return;

	/* Resize(size * 256 / 224): the short side to s, the long one to int(s * long / short). */
	s = (uint64_t)floor(size * 256.0 / 224.0 + 0.5);
	if (width <= height) {
		new_w = s;
		new_h = s * height / width;
	} else {
		new_h = s;
		new_w = s * width / height;
	}
	/* CenterCrop(size): int(round((new - size) / 2.0)), half to even; s >= size, so no padding. */
	left = nearbyint((double)(new_w - size) / 2.0);
	top = nearbyint((double)(new_h - size) / 2.0);

	/* The same window in source pixels: resampling it to size x size is resizing, then cropping. */
	out->x = left * width / (double)new_w;
	out->y = top * height / (double)new_h;
	out->w = fmin((double)size * width / (double)new_w, width - out->x);
	out->h = fmin((double)size * height / (double)new_h, height - out->y);
}

/* The largest DCT reduction (1/8, 1/4, 1/2) that leaves the crop at least `size` both ways. */
static unsigned pick_denom(const struct crop_box *box, uint32_t size)
{
	for (unsigned d = 8; d > 1; d /= 2)
		if (box->w >= (double)d * size && box->h >= (double)d * size)
			return d;
	return 1;
}

/*
 * Decode the pixels that resampling the window [pos, pos + len) of an axis
 * of `full` pixels reads, as [*first, *end). With `clip`, the filter stops
 * at the window's edges (PIL's crop() then resize(), as RandomResizedCrop
 * does); without, it reaches past them as resizing the whole image would
 * (Resize then CenterCrop).
 */
static int axis_span(uint32_t full, double pos, double len, uint32_t size, bool clip, uint32_t *first, uint32_t *end)
{
	int r;

	if (clip) {
		*first = (uint32_t)floor(pos);
		*end = (uint32_t)fmin(ceil(pos + len), full);
		return 0;
	}
	r = resize_span(full, pos, len, size, first, end);
	if (r < 0)
		return r;
	/* One more pixel each side, in case the shifted window rounds differently in single precision. */
	*first = *first > 0 ? *first - 1 : 0;
	*end = *end < full ? *end + 1 : full;
	return 0;
}

static int crop_and_resize(struct pipeline *p, const struct crop_box *box, bool clip, uint32_t size, uint8_t *out)
{
	unsigned denom = pick_denom(box, size);
	struct decoded_region reg;
	uint32_t sw, sh, x0, y0, x1, y1;
	double bx, by, bw, bh;
	int r;

	/* At 1/denom, source pixel x covers scaled [x / denom, (x + 1) / denom). */
	decoder_scaled_size(p->dec, denom, &sw, &sh);
	bx = box->x / denom;
	by = box->y / denom;
	bw = fmin(box->w / denom, sw - bx);
	bh = fmin(box->h / denom, sh - by);

	r = axis_span(sw, bx, bw, size, clip, &x0, &x1);
	if (r >= 0)
		r = axis_span(sh, by, bh, size, clip, &y0, &y1);
	if (r < 0) {
		snprintf(p->error, sizeof(p->error), "Bad crop window %g,%g %gx%g", box->x, box->y, box->w, box->h);
		return r;
	}

	r = decoder_read(p->dec, denom, x0, y0, x1, y1, &reg);
	if (r < 0) {
		snprintf(p->error, sizeof(p->error), "%s", decoder_error(p->dec));
		return r;
	}

	bx -= x0;
	by -= y0;
	r = resize_rgbx(p->rs, reg.pixels, reg.width, reg.height, reg.stride, bx, by, fmin(bw, reg.width - bx),
			fmin(bh, reg.height - by), out, size, size, (size_t)size * 3, box->flip);
	if (r < 0)
		snprintf(p->error, sizeof(p->error), "Resampling failed: %s", r == -ENOMEM ? "out of memory" : "bad window");
	return r;
}

int pipeline_run(struct pipeline *p, const uint8_t *jpeg, size_t len, const struct transform_spec *spec,
		 struct rng *rng, uint8_t *out)
{
	struct crop_box box;
	uint32_t width, height;
	int r;

	if (!p || !spec || !out || (!jpeg && len))
		return -EINVAL;
	if (spec->image_size == 0 || spec->image_size > PIPELINE_MAX_IMAGE_SIZE ||
	    (spec->kind != TRANSFORM_RANDOM_RESIZED_CROP && spec->kind != TRANSFORM_CENTER_CROP) ||
	    (spec->kind == TRANSFORM_RANDOM_RESIZED_CROP && !rng)) {
		snprintf(p->error, sizeof(p->error), "Bad transform");
		return -EINVAL;
	}
	p->error[0] = '\0';

	r = decoder_open(p->dec, jpeg, len, &width, &height);
	if (r < 0) {
		snprintf(p->error, sizeof(p->error), "%s", decoder_error(p->dec));
		goto finish;
	}
	/* The crop comes from the header alone, so only what it covers gets decoded. */
	if (spec->kind == TRANSFORM_RANDOM_RESIZED_CROP)
		random_resized_crop_box(width, height, rng, &box);
	else
		center_crop_box(width, height, spec->image_size, &box);
	r = crop_and_resize(p, &box, spec->kind == TRANSFORM_RANDOM_RESIZED_CROP, spec->image_size, out);

finish:
	decoder_finish(p->dec);
	return r;
}
