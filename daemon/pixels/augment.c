/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "decode.h"
#include "detect.h"
#include "grow.h"
#include "header.h"
#include "image.h"
#include "resize.h"
#include "resize_cv.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

/* Outputs larger than this are a caller's bug, not a request (the daemon caps image_size far lower). */
#define PIPELINE_MAX_IMAGE_SIZE 16384u

struct pipeline {
	struct decoder *dec;
	struct image_buf other; /* formats other than JPEG, decoded whole */
	struct resizer *rs;
	struct cv_resizer *cv; /* FIT_CV2, made on first use */
	uint8_t *rgb;          /* the 8-bit image, for float outputs */
	size_t rgb_cap;
	uint8_t *image; /* a whole decoded image (pipeline_decode_image) */
	size_t image_cap;
	uint8_t *oriented; /* an image turned upright (detection's EXIF orientation) */
	size_t oriented_cap;
	/* normalised value of each 8-bit level, per channel, for lut_key */
	struct {
		enum sample_dtype dtype;
		float mean[3], std[3];
	} lut_key;
	bool lut_valid;
	union transform_lut lut;
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
	p->other.max_pixels = limits ? limits->max_pixels : 0;
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
	image_buf_release(&p->other);
	resizer_free(p->rs);
	cv_resizer_free(p->cv);
	free(p->rgb);
	free(p->image);
	free(p->oriented);
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

/* torchvision's Resize(size * 256 / 224): the short side to s, the long one to int(s * long / short). */
static void center_resize(uint32_t width, uint32_t height, uint32_t size, uint64_t *new_w, uint64_t *new_h)
{
	uint64_t s = (uint64_t)floor(size * 256.0 / 224.0 + 0.5);

	if (width <= height) {
		*new_w = s;
		*new_h = s * height / width;
	} else {
		*new_h = s;
		*new_w = s * width / height;
	}
}

void center_crop_box(uint32_t width, uint32_t height, uint32_t size, struct crop_box *out)
{
	uint64_t new_w, new_h;
	double left, top;

	*out = (struct crop_box){.x = 0, .y = 0, .w = width, .h = height, .flip = false};
	if (width == 0 || height == 0 || size == 0)
		return;

	center_resize(width, height, size, &new_w, &new_h);
	/* CenterCrop(size): int(round((new - size) / 2.0)), half to even; s >= size, so no padding. */
	left = nearbyint((double)(new_w - size) / 2.0);
	top = nearbyint((double)(new_h - size) / 2.0);

	/* The same window in source pixels: resampling it to size x size is resizing, then cropping. */
	out->x = left * width / (double)new_w;
	out->y = top * height / (double)new_h;
	out->w = fmin((double)size * width / (double)new_w, width - out->x);
	out->h = fmin((double)size * height / (double)new_h, height - out->y);
}

/* The largest DCT reduction (1/8, 1/4, 1/2) that leaves the window at least the output both ways, if allowed. */
static unsigned pick_denom(const struct resample_req *rq)
{
	for (unsigned d = 8; rq->dct_scaling && d > 1; d /= 2)
		if (rq->w >= (double)d * rq->out_w && rq->h >= (double)d * rq->out_h)
			return d;
	return 1;
}

/*
 * The pixels [*first, *end) to decode along an axis for resampling the
 * window [pos, pos + len) to `size` with `filter`, the filter stopping at
 * the region [lo, hi) (PIL's image before its resize): where the filter
 * reaches, one more pixel each side in case the shifted window rounds
 * differently in single precision, within the region.
 */
static int axis_span(uint32_t lo, uint32_t hi, double pos, double len, uint32_t size, enum resize_filter filter,
		     uint32_t *first, uint32_t *end)
{
	int r;

	r = resize_span_filter(filter, hi - lo, pos - lo, len, size, first, end);
	if (r < 0)
		return r;
	*first = *first > 0 ? lo + *first - 1 : lo;
	*end = lo + *end < hi ? lo + *end + 1 : hi;
	return 0;
}

int pipeline_source_resample(struct pipeline *p, const struct pipeline_source *src, const struct resample_req *rq,
			     uint8_t *out, size_t out_stride)
{
	const struct pipeline_image *img = src->is_whole ? &src->whole : NULL;
	unsigned denom = img ? img->denom : pick_denom(rq);
	struct decoded_region reg;
	uint32_t sw, sh, x0, y0, x1, y1, rx0, ry0, rx1, ry1;
	double bx, by, bw, bh;
	int r;

	/* At 1/denom, source pixel x covers scaled [x / denom, (x + 1) / denom). */
	if (img) {
		sw = img->width;
		sh = img->height;
	} else {
		decoder_scaled_size(p->dec, denom, &sw, &sh);
	}
	rx0 = rq->rx / denom;
	ry0 = rq->ry / denom;
	rx1 = (uint32_t)fmin(ceil((double)(rq->rx + rq->rw) / denom), sw);
	ry1 = (uint32_t)fmin(ceil((double)(rq->ry + rq->rh) / denom), sh);
	bx = rq->x / denom;
	by = rq->y / denom;
	bw = fmin(rq->w / denom, rx1 - bx);
	bh = fmin(rq->h / denom, ry1 - by);

	r = rx1 > rx0 && ry1 > ry0 ? 0 : -EINVAL;
	if (r >= 0)
		r = axis_span(rx0, rx1, bx, bw, rq->out_w, rq->filter, &x0, &x1);
	if (r >= 0)
		r = axis_span(ry0, ry1, by, bh, rq->out_h, rq->filter, &y0, &y1);
	if (r < 0) {
		snprintf(p->error, sizeof(p->error), "Bad crop window %g,%g %gx%g", rq->x, rq->y, rq->w, rq->h);
		return r;
	}

	if (img) {
		/* The same region, already decoded: the filter sees what it would. */
		reg.pixels = img->pixels + (size_t)y0 * img->stride + (size_t)x0 * 4;
		reg.stride = img->stride;
		reg.width = x1 - x0;
		reg.height = y1 - y0;
	} else {
		r = decoder_read(p->dec, denom, x0, y0, x1, y1, &reg);
		if (r < 0) {
			snprintf(p->error, sizeof(p->error), "%s", decoder_error(p->dec));
			return r;
		}
	}

	bx -= x0;
	by -= y0;
	resizer_set_filter(p->rs, rq->filter);
	r = resize_rgbx(p->rs, reg.pixels, reg.width, reg.height, reg.stride, bx, by, fmin(bw, reg.width - bx),
			fmin(bh, reg.height - by), out, rq->out_w, rq->out_h, out_stride, rq->flip, rq->vertical_first);
	resizer_set_filter(p->rs, RESIZE_BILINEAR);
	if (r < 0)
		snprintf(p->error, sizeof(p->error), "Resampling failed: %s",
			 r == -ENOMEM ? "out of memory" : "bad window");
	return r;
}

int pipeline_resample_rgb(struct pipeline *p, const uint8_t *src, uint32_t width, uint32_t height, size_t stride,
			  const struct resample_req *rq, uint8_t *out, size_t out_stride)
{
	const uint8_t *base = src + (size_t)rq->ry * stride + (size_t)rq->rx * 3;
	int r;

	if (rq->rx + (uint64_t)rq->rw > width || rq->ry + (uint64_t)rq->rh > height)
		return -EINVAL;
	resizer_set_filter(p->rs, rq->filter);
	r = resize_rgb_ordered(p->rs, base, rq->rw, rq->rh, stride, rq->x - rq->rx, rq->y - rq->ry, rq->w, rq->h, out,
			       rq->out_w, rq->out_h, out_stride, rq->flip, rq->vertical_first);
	resizer_set_filter(p->rs, RESIZE_BILINEAR);
	if (r < 0)
		snprintf(p->error, sizeof(p->error), "Resampling failed: %s",
			 r == -ENOMEM ? "out of memory" : "bad window");
	return r;
}

/*
 * Resample `box` of the open image to size x size into `out`. `clip` and
 * `vertical_first` say which PIL resize this stands for: clip, of the crop
 * alone (RandomResizedCrop); else of the whole image (Resize + CenterCrop).
 */
static int crop_and_resize(struct pipeline *p, const struct pipeline_source *src, const struct crop_box *box, bool clip,
			   bool vertical_first, uint32_t size, bool dct_scaling, uint8_t *out)
{
	struct resample_req rq = {
		.rx = 0,
		.ry = 0,
		.rw = src->width,
		.rh = src->height,
		.x = box->x,
		.y = box->y,
		.w = box->w,
		.h = box->h,
		.out_w = size,
		.out_h = size,
		.filter = RESIZE_BILINEAR,
		.vertical_first = vertical_first,
		.flip = box->flip,
		.dct_scaling = dct_scaling,
	};

	if (clip) {
		rq.rx = (uint32_t)floor(box->x);
		rq.ry = (uint32_t)floor(box->y);
		rq.rw = (uint32_t)fmin(ceil(box->x + box->w), src->width) - rq.rx;
		rq.rh = (uint32_t)fmin(ceil(box->y + box->h), src->height) - rq.ry;
	}
	return pipeline_source_resample(p, src, &rq, out, (size_t)size * 3);
}

uint16_t float_to_half(float f)
{
	uint32_t x, a, sign, m, h;
	int e;

	memcpy(&x, &f, sizeof(x));
	sign = (x >> 16) & 0x8000;
	a = x & 0x7FFFFFFF;
	if (a > 0x7F800000)
		return (uint16_t)(sign | 0x7E00); /* NaN */
	if (a >= 0x477FF000)
		return (uint16_t)(sign | 0x7C00); /* 65520 and up round to infinity */
	e = (int)(a >> 23);
	m = (a & 0x7FFFFF) | 0x800000;
	if (e < 113) {
		/* subnormal: units of 2^-24; below 2^-25 (and at it, to even) is zero */
		unsigned shift = (unsigned)(126 - e);
		uint32_t half, rem;

		if (e < 102)
			return (uint16_t)sign;
		h = m >> shift;
		rem = m & ((1u << shift) - 1);
		half = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1)))
			h++;
		return (uint16_t)(sign | h); /* a carry into the exponent is still the right encoding */
	}
	h = ((uint32_t)(e - 112) << 10) | ((m >> 13) & 0x3FF);
	if ((m & 0x1FFF) > 0x1000 || ((m & 0x1FFF) == 0x1000 && (h & 1)))
		h++;
	return (uint16_t)(sign | h);
}

/* torchvision's ToTensor() then Normalize(), in float32 as torch computes it, for each 8-bit level. */
void transform_lut_build(const struct transform_spec *spec, union transform_lut *lut)
{
	for (int c = 0; c < 3; c++)
		for (int v = 0; v < 256; v++) {
			float x = ((float)v / 255.0f - spec->mean[c]) / spec->std[c];

			if (spec->dtype == DTYPE_FLOAT16)
				lut->f16[c][v] = float_to_half(x);
			else
				lut->f32[c][v] = x;
		}
}

static void build_lut(struct pipeline *p, const struct transform_spec *spec)
{
	if (p->lut_valid && p->lut_key.dtype == spec->dtype &&
	    !memcmp(p->lut_key.mean, spec->mean, sizeof(spec->mean)) &&
	    !memcmp(p->lut_key.std, spec->std, sizeof(spec->std)))
		return;
	transform_lut_build(spec, &p->lut);
	p->lut_key.dtype = spec->dtype;
	memcpy(p->lut_key.mean, spec->mean, sizeof(spec->mean));
	memcpy(p->lut_key.std, spec->std, sizeof(spec->std));
	p->lut_valid = true;
}

#if defined(__GNUC__) && defined(__x86_64__)
/*
 * to_planes() for float32 with AVX2: eight pixels at a time, each
 * channel's eight levels picked out of two overlapping 16-byte loads and
 * looked up in the same table (a gather), so the values are the table's.
 * Returns the pixels done (a multiple of 8; the rest are the caller's).
 */
__attribute__((target("avx2"))) static size_t to_planes_f32_avx2(const float lut[3][256], const uint8_t *rgb,
								 size_t pixels, float *out)
{
	size_t i = 0;
	__m128i lo_pick[3], hi_pick[3];

	for (int c = 0; c < 3; c++) {
		lo_pick[c] = _mm_setr_epi8((char)c, (char)(3 + c), (char)(6 + c), (char)(9 + c), -1, -1, -1, -1, -1, -1,
					   -1, -1, -1, -1, -1, -1);
		/* the second load starts at byte 8: pixels 4..7 are its bytes 4..15 */
		hi_pick[c] = _mm_setr_epi8(-1, -1, -1, -1, (char)(4 + c), (char)(7 + c), (char)(10 + c), (char)(13 + c),
					   -1, -1, -1, -1, -1, -1, -1, -1);
	}
	for (; i + 8 <= pixels; i += 8) {
		__m128i lo = _mm_loadu_si128((const __m128i *)(rgb + 3 * i));
		__m128i hi = _mm_loadu_si128((const __m128i *)(rgb + 3 * i + 8));

		for (int c = 0; c < 3; c++) {
			__m128i b = _mm_or_si128(_mm_shuffle_epi8(lo, lo_pick[c]), _mm_shuffle_epi8(hi, hi_pick[c]));
			__m256 v = _mm256_i32gather_ps(lut[c], _mm256_cvtepu8_epi32(b), 4);

			_mm256_storeu_ps(out + (size_t)c * pixels + i, v);
		}
	}
	return i;
}
#endif

/* HWC 8-bit to normalised CHW planes. */
static void to_planes(const struct pipeline *p, const uint8_t *rgb, size_t pixels, enum sample_dtype dtype,
		      uint8_t *out)
{
	size_t done = 0;

#if defined(__GNUC__) && defined(__x86_64__)
	if (dtype == DTYPE_FLOAT32 && resize_default_isa() >= RESIZE_ISA_AVX2) {
		float *planes = (float *)(void *)out;

		done = to_planes_f32_avx2(p->lut.f32, rgb, pixels, planes);
	}
#endif
	for (int c = 0; c < 3; c++) {
		if (dtype == DTYPE_FLOAT16) {
			uint8_t *plane = out + (size_t)c * pixels * 2;

			for (size_t i = 0; i < pixels; i++)
				memcpy(plane + i * 2, &p->lut.f16[c][rgb[i * 3 + c]], 2);
		} else {
			uint8_t *plane = out + (size_t)c * pixels * 4;

			for (size_t i = done; i < pixels; i++)
				memcpy(plane + i * 4, &p->lut.f32[c][rgb[i * 3 + c]], 4);
		}
	}
}

static bool spec_valid(const struct transform_spec *spec, const struct rng *rng)
{
	if (spec->image_size == 0 || spec->image_size > PIPELINE_MAX_IMAGE_SIZE)
		return false;
	if (spec->kind != TRANSFORM_RANDOM_RESIZED_CROP && spec->kind != TRANSFORM_CENTER_CROP)
		return false;
	if (spec->kind == TRANSFORM_RANDOM_RESIZED_CROP && !rng)
		return false;
	if (spec->dtype == DTYPE_UINT8)
		return true;
	if (spec->dtype != DTYPE_FLOAT32 && spec->dtype != DTYPE_FLOAT16)
		return false;
	for (int c = 0; c < 3; c++)
		if (!isfinite(spec->mean[c]) || !isfinite(spec->std[c]) || spec->std[c] == 0.0f)
			return false;
	return true;
}

/* Ready `p` for an output of `spec`: the 8-bit target (out itself, or a
 * buffer for float outputs to normalise from). */
static int output_begin(struct pipeline *p, const struct transform_spec *spec, const struct rng *rng, uint8_t *out,
			uint8_t **rgb)
{
	size_t pixels;

	if (!spec_valid(spec, rng)) {
		snprintf(p->error, sizeof(p->error), "Bad transform");
		return -EINVAL;
	}
	p->error[0] = '\0';
	*rgb = out;
	if (spec->dtype == DTYPE_UINT8)
		return 0;
	/* float outputs: resample into our buffer, then normalise into `out` */
	pixels = (size_t)spec->image_size * spec->image_size;
	if (grow((void **)&p->rgb, &p->rgb_cap, pixels * 3, 1) < 0) {
		snprintf(p->error, sizeof(p->error), "Out of memory");
		return -ENOMEM;
	}
	*rgb = p->rgb;
	build_lut(p, spec);
	return 0;
}

/* Draw the crop of the source and produce the output. */
static int transform(struct pipeline *p, const struct pipeline_source *src, const struct transform_spec *spec,
		     struct rng *rng, uint8_t *rgb, uint8_t *out)
{
	size_t pixels = (size_t)spec->image_size * spec->image_size;
	uint32_t width = src->width, height = src->height;
	struct crop_box box;
	uint64_t new_w, new_h;
	bool rrc, vertical_first;
	int r;

	/* The crop comes from the header alone, so only what it covers gets decoded. */
	rrc = spec->kind == TRANSFORM_RANDOM_RESIZED_CROP;
	if (rrc) {
		random_resized_crop_box(width, height, rng, &box);
		vertical_first =
			resize_vertical_first((uint32_t)box.w, (uint32_t)box.h, spec->image_size, spec->image_size);
	} else {
		center_crop_box(width, height, spec->image_size, &box);
		center_resize(width, height, spec->image_size, &new_w, &new_h);
		vertical_first = resize_vertical_first(width, height, (uint32_t)new_w, (uint32_t)new_h);
	}
	r = crop_and_resize(p, src, &box, rrc, vertical_first, spec->image_size, spec->dct_scaling, rgb);
	if (r >= 0 && spec->dtype != DTYPE_UINT8)
		to_planes(p, rgb, pixels, spec->dtype, out);
	return r;
}

/*
 * Start on a file: a JPEG is opened (header read, *whole NULL) for the
 * crop-aware decoder; any other format is decoded whole into *whole (at
 * full size: denom 1), from which the same crop and resize code works.
 * The JPEG decoder needs decoder_finish() afterwards either way.
 */
static int open_file(struct pipeline *p, const uint8_t *data, size_t len, uint32_t *width, uint32_t *height,
		     struct pipeline_image *whole, bool *is_whole)
{
	enum image_format f = image_sniff(data, len);
	struct decoded_region reg;
	int r;

	*is_whole = false;
	if (f == IMAGE_JPEG || len == 0) {
		r = decoder_open(p->dec, data, len, width, height);
		if (r < 0)
			snprintf(p->error, sizeof(p->error), "%s", decoder_error(p->dec));
		return r;
	}
	if (f == IMAGE_UNKNOWN) {
		snprintf(p->error, sizeof(p->error),
			 "Not an image format stoker reads (JPEG, PNG, WebP, BMP, TIFF, PPM/PGM): "
			 "starts with 0x%02x 0x%02x 0x%02x 0x%02x",
			 data[0], len > 1 ? data[1] : 0, len > 2 ? data[2] : 0, len > 3 ? data[3] : 0);
		return -EBADMSG;
	}
	r = image_decode(&p->other, f, data, len, &reg);
	if (r < 0) {
		snprintf(p->error, sizeof(p->error), "%s", p->other.error);
		return r;
	}
	*whole = (struct pipeline_image){
		.pixels = reg.pixels,
		.stride = reg.stride,
		.width = reg.width,
		.height = reg.height,
		.full_width = reg.width,
		.full_height = reg.height,
		.denom = 1,
	};
	*width = reg.width;
	*height = reg.height;
	*is_whole = true;
	return 0;
}

int pipeline_source_open(struct pipeline *p, const uint8_t *data, size_t len, struct pipeline_source *src)
{
	if (!p || !src || (!data && len))
		return -EINVAL;
	p->error[0] = '\0';
	return open_file(p, data, len, &src->width, &src->height, &src->whole, &src->is_whole);
}

void pipeline_source_of_image(const struct pipeline_image *img, struct pipeline_source *src)
{
	*src = (struct pipeline_source){
		.width = img->full_width,
		.height = img->full_height,
		.whole = *img,
		.is_whole = true,
	};
}

void pipeline_source_close(struct pipeline *p)
{
	if (p)
		decoder_finish(p->dec);
}

int pipeline_to_output(struct pipeline *p, const struct transform_spec *spec, const uint8_t *rgb, size_t pixels,
		       uint8_t *out)
{
	if (spec->dtype == DTYPE_UINT8) {
		if (out != rgb)
			memcpy(out, rgb, pixels * 3);
		return 0;
	}
	if (spec->dtype != DTYPE_FLOAT32 && spec->dtype != DTYPE_FLOAT16)
		return -EINVAL;
	build_lut(p, spec);
	to_planes(p, rgb, pixels, spec->dtype, out);
	return 0;
}

void pipeline_set_error(struct pipeline *p, const char *msg)
{
	snprintf(p->error, sizeof(p->error), "%s", msg);
}

int pipeline_run(struct pipeline *p, const uint8_t *data, size_t len, const struct transform_spec *spec,
		 struct rng *rng, uint8_t *out)
{
	struct pipeline_source src;
	uint8_t *rgb;
	int r;

	if (!p || !spec || !out || (!data && len))
		return -EINVAL;
	r = output_begin(p, spec, rng, out, &rgb);
	if (r < 0)
		return r;
	r = pipeline_source_open(p, data, len, &src);
	if (r >= 0)
		r = transform(p, &src, spec, rng, rgb, out);
	decoder_finish(p->dec);
	return r;
}

/* The EXIF orientation detection applies to this file (header.h); 1: none. */
static unsigned file_orientation(const uint8_t *data, size_t len)
{
	struct image_header h;

	return image_header_mem(data, len, &h) == 0 ? h.orientation : 1;
}

/* Decode all of the open image at the largest DCT reduction that is still
 * at least need_w x need_h (0 x 0: full size). */
static int decode_reduced(struct pipeline *p, uint32_t need_w, uint32_t need_h, struct decoded_region *reg,
			  unsigned *denom_out)
{
	unsigned denom = 1;
	uint32_t sw, sh;
	int r;

	for (unsigned d = 8; (need_w || need_h) && d > 1; d /= 2) {
		decoder_scaled_size(p->dec, d, &sw, &sh);
		if (sw >= need_w && sh >= need_h) {
			denom = d;
			break;
		}
	}
	decoder_scaled_size(p->dec, denom, &sw, &sh);
	r = decoder_read(p->dec, denom, 0, 0, sw, sh, reg);
	if (r < 0)
		snprintf(p->error, sizeof(p->error), "%s", decoder_error(p->dec));
	else
		*denom_out = denom;
	return r;
}

int pipeline_decode_image(struct pipeline *p, const uint8_t *data, size_t len, uint32_t min_side,
			  struct pipeline_image *out)
{
	struct pipeline_image whole;
	struct decoded_region reg;
	uint32_t width, height;
	unsigned denom = 1;
	size_t row, bytes;
	bool is_whole;
	int r;

	if (!p || !out || (!data && len))
		return -EINVAL;
	p->error[0] = '\0';
	r = open_file(p, data, len, &width, &height, &whole, &is_whole);
	if (r < 0)
		goto finish;
	if (is_whole) {
		/* already whole, in the pipeline's own buffer; lossless formats keep every pixel */
		*out = whole;
		out->orientation = (uint8_t)file_orientation(data, len);
		goto finish;
	}
	r = decode_reduced(p, min_side, min_side, &reg, &denom);
	if (r < 0)
		goto finish;
	/* Our own copy: the decoder's buffer is reused by its next image. */
	row = (size_t)reg.width * 4;
	bytes = row * reg.height;
	if (grow((void **)&p->image, &p->image_cap, bytes, 1) < 0) {
		snprintf(p->error, sizeof(p->error), "Out of memory");
		r = -ENOMEM;
		goto finish;
	}
	for (uint32_t y = 0; y < reg.height; y++)
		memcpy(p->image + y * row, reg.pixels + y * reg.stride, row);
	*out = (struct pipeline_image){
		.pixels = p->image,
		.stride = row,
		.width = reg.width,
		.height = reg.height,
		.full_width = width,
		.full_height = height,
		.denom = denom,
		.orientation = (uint8_t)file_orientation(data, len),
	};
finish:
	decoder_finish(p->dec);
	return r;
}

int pipeline_run_image(struct pipeline *p, const struct pipeline_image *img, const struct transform_spec *spec,
		       struct rng *rng, uint8_t *out)
{
	struct pipeline_source src;
	uint8_t *rgb;
	int r;

	if (!p || !img || !img->pixels || !spec || !out || img->denom == 0 || img->width == 0 || img->height == 0)
		return -EINVAL;
	r = output_begin(p, spec, rng, out, &rgb);
	if (r < 0)
		return r;
	if (img->denom > 1 && !spec->dct_scaling) {
		snprintf(p->error, sizeof(p->error), "Image decoded at 1/%u for a transform without DCT scaling",
			 img->denom);
		return -EINVAL;
	}
	pipeline_source_of_image(img, &src);
	return transform(p, &src, spec, rng, rgb, out);
}

/* The size pipeline_fit() makes of a width x height image. */
static void fit_target(const struct fit_request *req, uint32_t width, uint32_t height, uint32_t *tw, uint32_t *th)
{
	detect_fit_size(width, height, req->side, tw, th);
	if (req->box_w && req->box_h && (*tw > req->box_w || *th > req->box_h)) {
		struct detect_letterbox g;

		detect_letterbox_geometry(*tw, *th, req->box_w, req->box_h, &g);
		*tw = g.w;
		*th = g.h;
	}
}

/* Turn the whole decoded `reg` upright by EXIF orientation o, as
 * cv2.imread does before Ultralytics resizes, then resample it to tw x th
 * (sizes after orientation), as `resample` says. */
/* req->in_box: DETECT_PAD around the tw x th image's place in the box_w x
 * box_h `out`; its first pixel and stride into *at and *stride. */
static void fit_box(const struct fit_request *req, uint32_t tw, uint32_t th, uint8_t *out, uint8_t **at, size_t *stride)
{
	struct detect_letterbox g;
	const size_t row = (size_t)req->box_w * 3;

	if (!req->in_box) {
		*at = out;
		*stride = (size_t)tw * 3;
		return;
	}
	detect_letterbox_geometry(tw, th, req->box_w, req->box_h, &g);
	for (uint32_t y = 0; y < req->box_h; y++) {
		uint8_t *o = out + y * row;

		if (y < (uint32_t)g.top || y >= (uint32_t)g.top + th) {
			memset(o, DETECT_PAD, row);
			continue;
		}
		memset(o, DETECT_PAD, (size_t)g.left * 3);
		memset(o + ((size_t)g.left + tw) * 3, DETECT_PAD, row - ((size_t)g.left + tw) * 3);
	}
	*at = out + (size_t)g.top * row + (size_t)g.left * 3;
	*stride = row;
}

static int fit_resize(struct pipeline *p, const struct decoded_region *whole, unsigned o, const struct fit_request *req,
		      uint32_t tw, uint32_t th, uint8_t *out)
{
	struct decoded_region upright, *reg = &upright;
	size_t stride;
	int r;

	if (image_orient(whole, o, &p->oriented, &p->oriented_cap, &upright) < 0) {
		snprintf(p->error, sizeof(p->error), "Out of memory turning the image upright");
		return -ENOMEM;
	}
	fit_box(req, tw, th, out, &out, &stride);
	if (req->resample == FIT_CV2) {
		r = p->cv ? 0 : cv_resizer_new(&p->cv);
		if (r == 0)
			r = cv_resize_linear(p->cv, reg->pixels, reg->width, reg->height, reg->stride, 4, out, tw, th,
					     stride);
	} else {
		r = resize_rgbx(p->rs, reg->pixels, reg->width, reg->height, reg->stride, 0, 0, reg->width, reg->height,
				out, tw, th, stride, false, resize_vertical_first(reg->width, reg->height, tw, th));
	}
	if (r < 0)
		snprintf(p->error, sizeof(p->error), "Resampling failed: %s",
			 r == -ENOMEM ? "out of memory" : "bad window");
	return r;
}

static bool fit_request_ok(const struct fit_request *req)
{
	return req && req->side && (req->resample == FIT_ANTIALIAS || req->resample == FIT_CV2) &&
	       (!req->in_box || (req->box_w && req->box_h));
}

int pipeline_fit(struct pipeline *p, const uint8_t *data, size_t len, const struct fit_request *req, uint8_t *out,
		 struct fit_result *res)
{
	struct pipeline_image whole;
	struct decoded_region reg;
	uint32_t w, h, tw, th;
	unsigned denom = 1, o;
	bool is_whole, swap;
	int r;

	if (!p || !out || !res || !fit_request_ok(req) || (!data && len))
		return -EINVAL;
	p->error[0] = '\0';
	r = open_file(p, data, len, &w, &h, &whole, &is_whole);
	if (r < 0)
		goto finish;
	/* Sizes upright from here on; the decode is of the stored image. */
	o = file_orientation(data, len);
	swap = orientation_swaps(o);
	if (swap) {
		uint32_t t = w;

		w = h;
		h = t;
	}
	fit_target(req, w, h, &tw, &th);
	if (is_whole)
		reg = (struct decoded_region){.pixels = whole.pixels,
					      .stride = whole.stride,
					      .width = whole.width,
					      .height = whole.height};
	else if (req->resample == FIT_CV2)
		r = decode_reduced(p, 0, 0, &reg, &denom); /* cv2's arithmetic wants what cv2.imread gives: full size */
	else
		r = decode_reduced(p, swap ? th : tw, swap ? tw : th, &reg, &denom);
	if (r < 0)
		goto finish;
	r = fit_resize(p, &reg, o, req, tw, th, out);
	if (r == 0)
		*res = (struct fit_result){.width = tw, .height = th, .full_width = w, .full_height = h};
finish:
	decoder_finish(p->dec);
	return r;
}

int pipeline_fit_image(struct pipeline *p, const struct pipeline_image *img, const struct fit_request *req,
		       uint8_t *out, struct fit_result *res)
{
	struct decoded_region reg;
	uint32_t tw, th, w, h;
	int r;

	if (!p || !img || !img->pixels || !out || !res || !fit_request_ok(req) || img->width == 0 || img->height == 0)
		return -EINVAL;
	p->error[0] = '\0';
	w = orientation_swaps(img->orientation) ? img->full_height : img->full_width;
	h = orientation_swaps(img->orientation) ? img->full_width : img->full_height;
	fit_target(req, w, h, &tw, &th);
	reg = (struct decoded_region){.pixels = img->pixels,
				      .stride = img->stride,
				      .width = img->width,
				      .height = img->height};
	r = fit_resize(p, &reg, img->orientation, req, tw, th, out);
	if (r == 0)
		*res = (struct fit_result){.width = tw, .height = th, .full_width = w, .full_height = h};
	return r;
}
