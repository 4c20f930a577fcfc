/* SPDX-License-Identifier: MIT */
/*
 * The user's per-sample transform pipeline: an ordered list of ops with
 * parameters (torchvision's transforms and timm's, under their names; see
 * docs/transforms.md), parsed and validated once at attach, then run by the
 * workers on each sample with draws from its Philox stream (seed, epoch,
 * sample), as torchvision's PIL path computes them.
 *
 * This module owns the list and the geometric ops (RandomResizedCrop,
 * Resize, CenterCrop, RandomCrop, the flips), RandomErasing, Normalize and
 * the output dtype (ToTensor, ToDtype); every other op goes to pixelops.h.
 * Geometric ops are composed lazily into one window of the source image
 * and at most one resample, exactly where PIL's result is the same: so a
 * JPEG is decoded crop-aware through augment.c (only the rows and columns
 * the first crop covers) and the output written in one pass.
 *
 * A parsed `struct tpipe` is immutable and shared by every worker; each
 * worker runs it with its own `struct tpipe_ctx` (scratch, no allocation per
 * sample in steady state).
 */
#ifndef STOKER_PIPELINE_H
#define STOKER_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "augment.h"
#include "pixelops.h"
#include "rng.h"

/* Bounds on what a client may ask for; beyond them, refused at attach. */
#define TPIPE_MAX_OPS 32      /* ops in a pipeline */
#define TPIPE_MAX_PARAMS 16   /* parameters of one op */
#define TPIPE_MAX_NUMBERS 64  /* numbers of one parameter */
#define TPIPE_MAX_TEXT 128    /* bytes of an op name, a key or a text value */
#define TPIPE_MAX_SIZE 16384u /* any size an op names */

/* One op as the attach request carries it. */
struct tpipe_op_desc {
	const char *name;
	const struct op_param *params;
	size_t n_params;
};

struct tpipe;

/*
 * Parse and validate `ops`. On error, -EINVAL (or -ENOMEM) and a message
 * naming the op (its position and name) and the parameter in err.
 */
int tpipe_parse(const struct tpipe_op_desc *ops, size_t n_ops, struct tpipe **out, char *err, size_t errlen);
void tpipe_free(struct tpipe *t);

/* What a parsed pipeline makes. */
struct tpipe_info {
	uint32_t out_w, out_h;   /* every output's size (a pipeline whose output size varies is refused) */
	bool has_dtype;          /* a ToTensor / ToDtype says the output dtype */
	enum sample_dtype dtype; /* if has_dtype */
	float mean[3], std[3];   /* float output: the normalisation of 8-bit levels (ToTensor + Normalize) */
	bool float_ops;          /* ops on the float output (RandomErasing after ToTensor) */
	bool first_crop_random;  /* the first op is a RandomResizedCrop (dct_scaling's default, the cache tier) */
};
void tpipe_info(const struct tpipe *t, struct tpipe_info *out);

/* The pipeline as text, `Name(key=value, ...); ...` (docs/transforms.md),
 * truncated to len; the same text compares equal for the same pipeline. */
void tpipe_describe(const struct tpipe *t, char *buf, size_t len);
/* The same text, whole, owned by t. */
const char *tpipe_text(const struct tpipe *t);

/* A worker's scratch for running pipelines. */
struct tpipe_ctx;
int tpipe_ctx_new(struct tpipe_ctx **out);
void tpipe_ctx_free(struct tpipe_ctx *c);

/*
 * Run `t` on one image file (data, len) or a decoded cache image (img, not
 * NULL), through `p`'s decoder and resampler, drawing from rng, writing
 * out_w * out_h pixels of spec->dtype at `out` (uint8 HWC; float CHW,
 * normalised by spec->mean and std: tpipe_info's when it has a dtype) with
 * spec->dct_scaling (spec->kind and image_size are not used). Errors as
 * pipeline_run(); the reason in pipeline_error(p) and tpipe_ctx_error(c).
 */
int tpipe_run(struct tpipe_ctx *c, struct pipeline *p, const struct tpipe *t, const uint8_t *data, size_t len,
	      const struct pipeline_image *img, const struct transform_spec *spec, struct rng *rng, uint8_t *out);
const char *tpipe_ctx_error(const struct tpipe_ctx *c);

/*
 * For tests: every random draw of the last tpipe_run() with this context,
 * as (op index, kind, values) records: the crop boxes, flips, erasing boxes,
 * interpolations. tpipe_trace_enable(c, true) starts recording.
 */
struct tpipe_draw {
	uint32_t op;
	char kind[12]; /* "crop" (top, left, h, w), "flip" (1/0), "interp" (filter), "erase" (top, left, h, w) */
	double v[4];
};
void tpipe_trace_enable(struct tpipe_ctx *c, bool on);
size_t tpipe_trace(const struct tpipe_ctx *c, const struct tpipe_draw **draws);

/*
 * For tests: the draws of op `op` of `t` alone on a width x height image
 * (crop boxes of RandomResizedCrop / RandomCrop after its padding, flips,
 * erasing boxes), `n` times from streams (seed, 0, i); each draw's values
 * into out[4 * i ...] (top, left, h, w; a flip: 1 or 0 in the first;
 * no erasing: -1). 0, or -EINVAL for an op without draws.
 */
int tpipe_draw_params(const struct tpipe *t, size_t op, uint32_t width, uint32_t height, uint64_t seed, size_t n,
		      double *out);

#endif
