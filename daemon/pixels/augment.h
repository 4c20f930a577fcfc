/* SPDX-License-Identifier: MIT */
/*
 * Turn one image file's bytes into one augmented output image, written
 * straight into its place in a batch slot.
 *
 * One `struct pipeline` per worker thread: it owns the libjpeg decompressor
 * and scratch buffers, so steady-state work allocates nothing. Not thread
 * safe; never shared between threads.
 *
 * The crop is drawn from the JPEG header before any pixel is decoded, and
 * only the rows and columns the crop needs are decoded (jpeg_crop_scanline,
 * jpeg_skip_scanlines, DCT-domain scaling when the crop is at least twice
 * the output size). Other formats (PNG, WebP, BMP, TIFF, PPM/PGM; told by
 * their content, image.h) are decoded whole and go through the same crop,
 * resize and normalisation. See docs/ARCHITECTURE.md.
 */
#ifndef STOKER_AUGMENT_H
#define STOKER_AUGMENT_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "resize.h"
#include "rng.h"

enum transform_kind {
	TRANSFORM_RANDOM_RESIZED_CROP = 0,
	TRANSFORM_CENTER_CROP = 1,
};

/* Output element type. UINT8 is HWC RGB; the float types are CHW planes,
 * normalised as torchvision's ToTensor() + Normalize(mean, std):
 * (pixel / 255 - mean[c]) / std[c]. */
enum sample_dtype {
	DTYPE_UINT8 = 0,
	DTYPE_FLOAT32 = 1,
	DTYPE_FLOAT16 = 2,
};

struct transform_spec {
	enum transform_kind kind;
	uint32_t image_size;   /* output is image_size (wide) x image_height x 3 */
	uint32_t image_height; /* 0: image_size (square); a pipeline's (h, w) output may differ */
	enum sample_dtype dtype;
	float mean[3], std[3]; /* float dtypes only */
	/* Decode a crop >= 2x the output at 1/2..1/8 scale in the DCT domain:
	 * faster, but not PIL's result (sharper). Off: full-scale decode of the
	 * crop's rows and columns, PIL's pixels within 1. */
	bool dct_scaling;
};

/* Bytes one element of `dtype` takes. */
static inline size_t sample_dtype_bytes(enum sample_dtype dtype)
{
	return dtype == DTYPE_FLOAT32 ? 4 : dtype == DTYPE_FLOAT16 ? 2 : 1;
}

/* The output's height. */
static inline uint32_t transform_height(const struct transform_spec *s)
{
	return s->image_height ? s->image_height : s->image_size;
}

/* Bytes one output image takes. */
static inline size_t transform_output_bytes(const struct transform_spec *s)
{
	return (size_t)s->image_size * transform_height(s) * 3 * sample_dtype_bytes(s->dtype);
}

/* The normalised value of each 8-bit level, per channel, for a float
 * dtype: the one table both the CPU float path (augment.c) and the GPU
 * conversion kernel (gpu_convert.cu, via devring) read, so a device
 * batch's floats are the CPU path's bit for bit. */
union transform_lut {
	float f32[3][256];
	uint16_t f16[3][256]; /* IEEE binary16, rounded to nearest even */
};
void transform_lut_build(const struct transform_spec *spec, union transform_lut *lut);
/* IEEE binary16 of f, rounding to nearest even (as torch's .half()). */
uint16_t float_to_half(float f);

/* Bounds on what one file may cost; hostile headers fail early. */
struct decode_limits {
	uint64_t max_pixels; /* width * height of the full image */
	uint32_t max_scans;  /* progressive scans; 0 means the default, 500 */
};

/* A crop window in source pixel coordinates; may be fractional. */
struct crop_box {
	double x, y, w, h;
	bool flip; /* mirror horizontally after cropping */
};

struct pipeline;

int pipeline_new(const struct decode_limits *limits, struct pipeline **out);
void pipeline_free(struct pipeline *p);

/*
 * Decode `data` (len bytes of an image file), crop/resize/flip as `spec`
 * says with draws from `rng` (a stream keyed by seed, epoch, index), and
 * write transform_output_bytes(spec) bytes to `out`: HWC RGB for
 * DTYPE_UINT8, normalised CHW planes for the float types. Every format and
 * colour layout comes out RGB (alpha dropped), as Pillow's convert("RGB").
 * -EBADMSG: not a decodable image (corrupt, truncated, empty, unknown
 * format or variant, more than limits->max_scans scans); -E2BIG: over
 * limits->max_pixels; -EINVAL: bad arguments or spec; -ENOMEM. `out` is
 * unspecified on error.
 */
int pipeline_run(struct pipeline *p, const uint8_t *data, size_t len, const struct transform_spec *spec,
		 struct rng *rng, uint8_t *out);

/*
 * The decoded cache tier's path. A decoded image: RGBX pixels of the whole
 * image decoded at 1/denom (a JPEG's DCT reduction; 1 for other formats),
 * and its full size, from which crops are drawn, so draws match
 * pipeline_run's.
 */
struct pipeline_image {
	const uint8_t *pixels; /* RGBX, `stride` bytes a row */
	size_t stride;
	uint32_t width, height;           /* of the pixels */
	uint32_t full_width, full_height; /* of the JPEG */
	uint32_t denom;                   /* 1, 2, 4 or 8 */
	uint8_t orientation;              /* EXIF, header.h: only pipeline_fit_image() applies it */
};

/* Decode all of `data`: a JPEG at the largest DCT reduction that keeps its
 * shorter side at least `min_side` (0: full size), other formats at full
 * size. The pixels live in the pipeline until its next decode. Errors as
 * pipeline_run(). */
int pipeline_decode_image(struct pipeline *p, const uint8_t *data, size_t len, uint32_t min_side,
			  struct pipeline_image *out);

/* pipeline_run() from a decoded image instead of a file. The same image
 * always gives the same output, whether it came from the cache or was just
 * decoded; crops that pipeline_run() would take from a DCT-reduced decode
 * may differ from it slightly. -EINVAL for an image decoded at a reduction
 * when spec->dct_scaling is off (use the file). */
int pipeline_run_image(struct pipeline *p, const struct pipeline_image *img, const struct transform_spec *spec,
		       struct rng *rng, uint8_t *out);

/*
 * The transform pipeline's access (pipeline.h) to a file's pixels through
 * this decoder and resampler: a source opened from a file (a JPEG's header
 * only, for the crop-aware decode; other formats whole) or from a decoded
 * cache image, then any number of resamples of regions of it, then closed.
 */
struct pipeline_source {
	uint32_t width, height;      /* full size */
	struct pipeline_image whole; /* with is_whole: the decoded image */
	bool is_whole;               /* else the open JPEG */
};

/* One resample, as PIL's crop (the region) then resize (the window of it,
 * to out_w x out_h); mirrored if flip. */
struct resample_req {
	uint32_t rx, ry, rw, rh; /* the region: the filter reads nothing outside it */
	double x, y, w, h;       /* the window, inside the region, in source pixels */
	uint32_t out_w, out_h;
	enum resize_filter filter;
	bool vertical_first; /* resize_vertical_first() of the PIL resize this stands for */
	bool flip;
	bool dct_scaling; /* a JPEG's window >= 2x the output may be decoded DCT-reduced */
};

int pipeline_source_open(struct pipeline *p, const uint8_t *data, size_t len, struct pipeline_source *src);
void pipeline_source_of_image(const struct pipeline_image *img, struct pipeline_source *src);
/* Resample rq of src to RGB at out (out_stride bytes a row). Errors as pipeline_run(). */
int pipeline_source_resample(struct pipeline *p, const struct pipeline_source *src, const struct resample_req *rq,
			     uint8_t *out, size_t out_stride);
void pipeline_source_close(struct pipeline *p);
/* The same from an RGB image in memory (width x height, stride bytes a row); dct_scaling ignored. */
int pipeline_resample_rgb(struct pipeline *p, const uint8_t *src, uint32_t width, uint32_t height, size_t stride,
			  const struct resample_req *rq, uint8_t *out, size_t out_stride);
/* RGB (pixels of them) to spec->dtype at out: a copy, or ToTensor + Normalize into CHW planes. */
int pipeline_to_output(struct pipeline *p, const struct transform_spec *spec, const uint8_t *rgb, size_t pixels,
		       uint8_t *out);
/* Set pipeline_error()'s text. */
void pipeline_set_error(struct pipeline *p, const char *msg);

/* How pipeline_fit() resamples. */
enum fit_resample {
	FIT_ANTIALIAS = 0, /* resize.c's filter from the largest DCT reduction that keeps the size (fast) */
	FIT_CV2 = 1,       /* resize_cv.c: cv2.resize INTER_LINEAR from the full-size decode (Ultralytics') */
};

struct fit_request {
	uint32_t side;         /* the long side, as Ultralytics' load_image */
	uint32_t box_w, box_h; /* then shrunk to fit this box as LetterBox would; 0: no box */
	enum fit_resample resample;
	/* `out` is the box_w x box_h letterbox (both nonzero): the image goes
	 * where detect_letterbox_geometry() puts it, DETECT_PAD around it (no
	 * copy after); else `out` holds the image alone */
	bool in_box;
};

struct fit_result {
	uint32_t width, height;           /* written: RGB rows of width * 3 bytes */
	uint32_t full_width, full_height; /* the file's, upright (after its EXIF orientation) */
};

/*
 * The whole image resized so its long side is `side`, aspect kept (each
 * side min(ceil(side0 * side / long0), side), detect_fit_size()), and if it
 * then overflows the box, to LetterBox's smaller size for it in one resize
 * (Ultralytics would resize twice; only stand-ins of unreadable files in
 * rectangular batches need it). RGB into `out` (side * side * 3 bytes at
 * most). Detection's path: the image is first turned upright by its EXIF
 * orientation (header.h), as cv2.imread does for Ultralytics, and every
 * size above is the upright one. A JPEG is decoded at the largest DCT
 * reduction that keeps the size (FIT_ANTIALIAS) or at full size (FIT_CV2),
 * other formats whole. With req->in_box, `out` is box_w * box_h * 3 bytes
 * and receives the whole letterbox.
 * Errors as pipeline_run(). pipeline_fit_image() does the same from
 * a decoded image (FIT_CV2 is exact only from a full-size one, denom 1).
 */
int pipeline_fit(struct pipeline *p, const uint8_t *data, size_t len, const struct fit_request *req, uint8_t *out,
		 struct fit_result *res);
int pipeline_fit_image(struct pipeline *p, const struct pipeline_image *img, const struct fit_request *req,
		       uint8_t *out, struct fit_result *res);

/* The last error's human-readable reason (the decoding library's message, or ours). */
const char *pipeline_error(const struct pipeline *p);

/* Geometry, exposed for tests. torchvision's RandomResizedCrop.get_params
 * (scale 0.08-1, ratio 3/4-4/3, 10 tries then the centre fallback) followed
 * by a p=0.5 flip draw. */
void random_resized_crop_box(uint32_t width, uint32_t height, struct rng *rng, struct crop_box *out);
/* torchvision Resize(size*256/224) + CenterCrop(size), as a window in the
 * source image. */
void center_crop_box(uint32_t width, uint32_t height, uint32_t size, struct crop_box *out);

#endif
