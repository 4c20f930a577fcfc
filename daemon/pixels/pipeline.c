/* SPDX-License-Identifier: MIT */
/*
 * The per-sample transform pipeline (pipeline.h): parsing and validation at
 * attach, the geometric ops, erasing, the output dtype, and the run.
 *
 * Running keeps a lazy "view" of the image: a region of the source (the
 * file, or a buffer once pixels had to be materialised), and at most one
 * pending resample of a window of that region to an output size, mirrored
 * or not. A crop before a resize narrows the region (PIL's crop, then its
 * resize of the crop: the filter stops at the crop's edges); a crop after
 * a resize narrows the window (the outputs PIL's whole resize would have
 * made there); a horizontal flip after a resize mirrors the output. Any op
 * that cannot be composed exactly (a second resize, padding, a vertical
 * flip, a colour op) materialises the view first: one resample into a
 * buffer. So RandomResizedCrop, Resize + CenterCrop or RandomCrop first
 * decode only what the crop covers (augment.c), and the common pipelines
 * resample once, straight into the batch slot.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "mirror.h"
#include "pipeline.h"

enum op_kind {
	OP_RANDOM_RESIZED_CROP,
	OP_RESIZE,
	OP_CENTER_CROP,
	OP_RANDOM_CROP,
	OP_HFLIP,
	OP_VFLIP,
	OP_TO_DTYPE,
	OP_NORMALIZE,
	OP_ERASE,
	OP_PIXEL,
};

enum interp { INTERP_NEAREST, INTERP_BILINEAR, INTERP_BICUBIC, INTERP_RANDOM };
enum pad_mode { PAD_CONSTANT, PAD_EDGE, PAD_REFLECT, PAD_SYMMETRIC };
/* RandomErasing's value: numbers, torchvision's "random" / timm's "pixel"
 * (a normal draw per pixel and channel), timm's "rand" (one per channel). */
enum erase_fill { ERASE_VALUE, ERASE_PIXEL, ERASE_CHANNEL };

struct op {
	enum op_kind kind;
	uint32_t h, w; /* size; Resize with one number: the short side in h, w 0 */
	double scale[2], ratio[2];
	enum interp interp;
	uint32_t max_size; /* Resize; 0: none */
	uint32_t pad[4];   /* RandomCrop: left, top, right, bottom */
	bool pad_if_needed;
	uint8_t fill[3];
	enum pad_mode pad_mode;
	double p;
	float mean[3], std[3];   /* Normalize */
	enum sample_dtype dtype; /* ToDtype */
	bool scale_values;       /* ToDtype: to [0, 1] */
	enum erase_fill erase;
	double value[3];
	uint32_t min_count, max_count;
	bool in_float; /* runs on the float output (after a ToDtype to a float) */
	/* Erasing in the float domain: its values pass through the Normalize after it. */
	float post_mean[3], post_std[3];
	struct pixel_op *px;
};

struct tpipe {
	struct op *ops;
	size_t n;
	struct tpipe_info info;
	char *text;
};

/* ---- parsing ---- */

struct parse {
	const struct tpipe_op_desc *d;
	size_t index;
	char *err;
	size_t errlen;
};

static int fail(struct parse *ps, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct parse *ps, const char *key, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (key)
		snprintf(ps->err, ps->errlen, "transform %zu %s: parameter %s: %s", ps->index + 1, ps->d->name, key,
			 why);
	else
		snprintf(ps->err, ps->errlen, "transform %zu %s: %s", ps->index + 1, ps->d->name, why);
	return -EINVAL;
}

/* The parameter `key`, NULL when absent or None (no numbers, no text). */
static const struct op_param *param(struct parse *ps, const char *key)
{
	for (size_t i = 0; i < ps->d->n_params; i++)
		if (!strcmp(ps->d->params[i].key, key)) {
			if (ps->d->params[i].n_numbers == 0 && !ps->d->params[i].text)
				return NULL;
			return &ps->d->params[i];
		}
	return NULL;
}

static int get_number(struct parse *ps, const char *key, double lo, double hi, double *v)
{
	const struct op_param *q = param(ps, key);

	if (!q)
		return 0;
	if (q->text || q->n_numbers != 1)
		return fail(ps, key, "takes one number");
	if (!(q->numbers[0] >= lo && q->numbers[0] <= hi))
		return fail(ps, key, "%g is not in [%g, %g]", q->numbers[0], lo, hi);
	*v = q->numbers[0];
	return 1;
}

static int get_bool(struct parse *ps, const char *key, bool *v)
{
	const struct op_param *q = param(ps, key);

	if (!q)
		return 0;
	if (q->text && (!strcmp(q->text, "true") || !strcmp(q->text, "True"))) {
		*v = true;
		return 1;
	}
	if (q->text && (!strcmp(q->text, "false") || !strcmp(q->text, "False"))) {
		*v = false;
		return 1;
	}
	if (!q->text && q->n_numbers == 1 && (q->numbers[0] == 0 || q->numbers[0] == 1)) {
		*v = q->numbers[0] == 1;
		return 1;
	}
	return fail(ps, key, "takes true or false");
}

/* A size: one number (h = w = n, or a Resize's short side) or (h, w). */
static int get_size(struct parse *ps, const char *key, bool required, bool one_is_short, struct op *o)
{
	const struct op_param *q = param(ps, key);

	if (!q) {
		if (required)
			return fail(ps, key, "is required");
		return 0;
	}
	if (q->text || q->n_numbers < 1 || q->n_numbers > 2)
		return fail(ps, key, "takes one number or two (height, width)");
	for (size_t i = 0; i < q->n_numbers; i++)
		if (!(q->numbers[i] >= 1 && q->numbers[i] <= TPIPE_MAX_SIZE) || q->numbers[i] != floor(q->numbers[i]))
			return fail(ps, key, "%g is not a whole number of pixels in 1..%u", q->numbers[i],
				    TPIPE_MAX_SIZE);
	o->h = (uint32_t)q->numbers[0];
	o->w = q->n_numbers == 2 ? (uint32_t)q->numbers[1] : one_is_short ? 0 : o->h;
	return 1;
}

/* (lo, hi) with lo <= hi, both in [min, max]; `open_lo`: lo > min. */
static int get_range(struct parse *ps, const char *key, double min, double max, bool open_lo, double out[2])
{
	const struct op_param *q = param(ps, key);

	if (!q)
		return 0;
	if (q->text || q->n_numbers != 2)
		return fail(ps, key, "takes two numbers (min, max)");
	for (int i = 0; i < 2; i++)
		if (!isfinite(q->numbers[i]) || q->numbers[i] < min || q->numbers[i] > max ||
		    (open_lo && q->numbers[i] <= min))
			return fail(ps, key, "%g is not in %s%g, %g]", q->numbers[i], open_lo ? "(" : "[", min, max);
	if (q->numbers[0] > q->numbers[1])
		return fail(ps, key, "min %g > max %g", q->numbers[0], q->numbers[1]);
	out[0] = q->numbers[0];
	out[1] = q->numbers[1];
	return 1;
}

static int get_interp(struct parse *ps, bool allow_random, enum interp *v)
{
	const struct op_param *q = param(ps, "interpolation");

	if (!q)
		return 0;
	if (!q->text)
		return fail(ps, "interpolation", "takes a name (nearest, bilinear, bicubic%s)",
			    allow_random ? ", random" : "");
	if (!strcmp(q->text, "nearest"))
		*v = INTERP_NEAREST;
	else if (!strcmp(q->text, "bilinear"))
		*v = INTERP_BILINEAR;
	else if (!strcmp(q->text, "bicubic"))
		*v = INTERP_BICUBIC;
	else if (allow_random && !strcmp(q->text, "random"))
		*v = INTERP_RANDOM;
	else
		return fail(ps, "interpolation", "'%s' is not built (nearest, bilinear, bicubic%s)", q->text,
			    allow_random ? ", random" : "");
	return 1;
}

/* `antialias`: PIL always antialiases; torchvision ignores the flag for PIL images. */
static int get_antialias(struct parse *ps)
{
	bool aa;
	int r = get_bool(ps, "antialias", &aa);

	return r < 0 ? r : 0;
}

/* Three per-channel numbers (one is broadcast) in [lo, hi]. */
static int get_channels(struct parse *ps, const char *key, double lo, double hi, double out[3])
{
	const struct op_param *q = param(ps, key);

	if (!q)
		return 0;
	if (q->text || (q->n_numbers != 1 && q->n_numbers != 3))
		return fail(ps, key, "takes one number or three (one per channel)");
	for (int c = 0; c < 3; c++) {
		double v = q->numbers[q->n_numbers == 3 ? c : 0];

		if (!isfinite(v) || v < lo || v > hi)
			return fail(ps, key, "%g is not in [%g, %g]", v, lo, hi);
		out[c] = v;
	}
	return 1;
}

static int parse_rrc(struct parse *ps, struct op *o)
{
	int r;

	o->scale[0] = 0.08;
	o->scale[1] = 1.0;
	o->ratio[0] = 3.0 / 4.0;
	o->ratio[1] = 4.0 / 3.0;
	o->interp = INTERP_BILINEAR;
	r = get_size(ps, "size", true, false, o);
	if (r >= 0)
		r = get_range(ps, "scale", 0.0, 1.0, false, o->scale);
	if (r >= 0 && o->scale[1] <= 0)
		r = fail(ps, "scale", "max must be > 0");
	if (r >= 0)
		r = get_range(ps, "ratio", 0.0, 1e6, true, o->ratio);
	if (r >= 0)
		r = get_interp(ps, true, &o->interp);
	if (r >= 0)
		r = get_antialias(ps);
	return r;
}

static int parse_resize(struct parse *ps, struct op *o)
{
	double max_size = 0;
	int r;

	o->interp = INTERP_BILINEAR;
	r = get_size(ps, "size", true, true, o);
	if (r >= 0)
		r = get_interp(ps, false, &o->interp);
	if (r >= 0)
		r = get_number(ps, "max_size", 1, TPIPE_MAX_SIZE, &max_size);
	if (r > 0 && o->w)
		r = fail(ps, "max_size", "is only for a size of one number");
	if (r > 0 && max_size <= o->h)
		r = fail(ps, "max_size", "%g must be greater than size %u", max_size, o->h);
	if (r >= 0 && max_size != floor(max_size))
		r = fail(ps, "max_size", "%g is not a whole number", max_size);
	o->max_size = (uint32_t)max_size;
	if (r >= 0)
		r = get_antialias(ps);
	return r;
}

static int parse_random_crop(struct parse *ps, struct op *o)
{
	const struct op_param *q;
	double fill[3] = {0, 0, 0};
	int r;

	r = get_size(ps, "size", true, false, o);
	if (r < 0)
		return r;
	q = param(ps, "padding");
	if (q) {
		if (q->text || (q->n_numbers != 1 && q->n_numbers != 2 && q->n_numbers != 4))
			return fail(ps, "padding",
				    "takes one number, two (left/right, top/bottom) or four "
				    "(left, top, right, bottom)");
		for (size_t i = 0; i < q->n_numbers; i++)
			if (!(q->numbers[i] >= 0 && q->numbers[i] <= TPIPE_MAX_SIZE) ||
			    q->numbers[i] != floor(q->numbers[i]))
				return fail(ps, "padding", "%g is not a whole number of pixels in 0..%u", q->numbers[i],
					    TPIPE_MAX_SIZE);
		for (int i = 0; i < 4; i++)
			o->pad[i] = (uint32_t)q->numbers[q->n_numbers == 4 ? i : q->n_numbers == 2 ? i % 2 : 0];
	}
	r = get_bool(ps, "pad_if_needed", &o->pad_if_needed);
	if (r >= 0)
		r = get_channels(ps, "fill", 0, 255, fill);
	for (int c = 0; c < 3; c++) {
		if (r >= 0 && fill[c] != floor(fill[c]))
			r = fail(ps, "fill", "%g is not a whole number (8-bit images)", fill[c]);
		o->fill[c] = (uint8_t)fill[c];
	}
	if (r < 0)
		return r;
	q = param(ps, "padding_mode");
	o->pad_mode = PAD_CONSTANT;
	if (q) {
		if (!q->text)
			return fail(ps, "padding_mode", "takes a name (constant, edge, reflect, symmetric)");
		if (!strcmp(q->text, "constant"))
			o->pad_mode = PAD_CONSTANT;
		else if (!strcmp(q->text, "edge"))
			o->pad_mode = PAD_EDGE;
		else if (!strcmp(q->text, "reflect"))
			o->pad_mode = PAD_REFLECT;
		else if (!strcmp(q->text, "symmetric"))
			o->pad_mode = PAD_SYMMETRIC;
		else
			return fail(ps, "padding_mode", "'%s' is not one of constant, edge, reflect, symmetric",
				    q->text);
	}
	return 0;
}

static int parse_flip(struct parse *ps, struct op *o)
{
	o->p = 0.5;
	return get_number(ps, "p", 0, 1, &o->p);
}

static int parse_to_dtype(struct parse *ps, struct op *o, bool to_tensor)
{
	const struct op_param *q;
	int r;

	o->dtype = DTYPE_FLOAT32;
	o->scale_values = true;
	if (to_tensor)
		return 0;
	q = param(ps, "dtype");
	if (!q || !q->text)
		return fail(ps, "dtype", "is required: uint8, float32 or float16");
	if (!strcmp(q->text, "uint8"))
		o->dtype = DTYPE_UINT8;
	else if (!strcmp(q->text, "float32"))
		o->dtype = DTYPE_FLOAT32;
	else if (!strcmp(q->text, "float16"))
		o->dtype = DTYPE_FLOAT16;
	else
		return fail(ps, "dtype", "'%s' is not built (uint8, float32, float16)", q->text);
	o->scale_values = false;
	r = get_bool(ps, "scale", &o->scale_values);
	return r < 0 ? r : 0;
}

static int parse_normalize(struct parse *ps, struct op *o)
{
	double mean[3], std[3];
	bool inplace;
	int r;

	r = get_channels(ps, "mean", -1e6, 1e6, mean);
	if (r == 0)
		return fail(ps, "mean", "is required");
	if (r > 0)
		r = get_channels(ps, "std", -1e6, 1e6, std);
	if (r == 0)
		return fail(ps, "std", "is required");
	for (int c = 0; r > 0 && c < 3; c++) {
		if (!(std[c] > 0) && !(std[c] < 0))
			return fail(ps, "std", "must not be 0");
		o->mean[c] = (float)mean[c];
		o->std[c] = (float)std[c];
	}
	if (r >= 0)
		r = get_bool(ps, "inplace", &inplace);
	return r < 0 ? r : 0;
}

static int parse_erase(struct parse *ps, struct op *o)
{
	const struct op_param *q;
	double count[2] = {1, 1};
	bool inplace;
	int r;

	o->p = 0.5;
	o->scale[0] = 0.02;
	o->scale[1] = 0.33;
	o->ratio[0] = 0.3;
	o->ratio[1] = 3.3;
	o->erase = ERASE_VALUE;
	r = get_number(ps, "p", 0, 1, &o->p);
	if (r >= 0)
		r = get_range(ps, "scale", 0, 1, false, o->scale);
	if (r >= 0)
		r = get_range(ps, "ratio", 0, 1e6, true, o->ratio);
	if (r >= 0)
		r = get_range(ps, "count", 1, 64, false, count);
	if (r >= 0 && (count[0] != floor(count[0]) || count[1] != floor(count[1])))
		r = fail(ps, "count", "takes whole numbers");
	if (r >= 0)
		r = get_bool(ps, "inplace", &inplace);
	if (r < 0)
		return r;
	o->min_count = (uint32_t)count[0];
	o->max_count = (uint32_t)count[1];
	q = param(ps, "value");
	if (q && q->text) {
		if (!strcmp(q->text, "random") || !strcmp(q->text, "pixel"))
			o->erase = ERASE_PIXEL;
		else if (!strcmp(q->text, "rand"))
			o->erase = ERASE_CHANNEL;
		else if (!strcmp(q->text, "const"))
			o->erase = ERASE_VALUE;
		else
			return fail(ps, "value",
				    "'%s' is not built (a number, three, \"random\"; timm's modes "
				    "\"pixel\", \"rand\", \"const\")",
				    q->text);
	} else if (q) {
		r = get_channels(ps, "value", -1e6, 1e6, o->value);
		if (r < 0)
			return r;
	}
	return 0;
}

static const struct {
	const char *name;
	enum op_kind kind;
	const char *keys; /* the parameters it takes, space separated */
} op_table[] = {
	{"RandomResizedCrop", OP_RANDOM_RESIZED_CROP, "size scale ratio interpolation antialias"},
	{"Resize", OP_RESIZE, "size interpolation max_size antialias"},
	{"CenterCrop", OP_CENTER_CROP, "size"},
	{"RandomCrop", OP_RANDOM_CROP, "size padding pad_if_needed fill padding_mode"},
	{"RandomHorizontalFlip", OP_HFLIP, "p"},
	{"RandomVerticalFlip", OP_VFLIP, "p"},
	{"ToTensor", OP_TO_DTYPE, ""},
	{"ToDtype", OP_TO_DTYPE, "dtype scale"},
	{"Normalize", OP_NORMALIZE, "mean std inplace"},
	{"RandomErasing", OP_ERASE, "p scale ratio value count inplace"},
};

/* The ops of pixelops.h's half (issue 19) that a stokerd may not have yet: refused with this reason. */
static const char *const planned_ops[] = {
	"ColorJitter",    "RandomGrayscale",        "Grayscale",
	"GaussianBlur",   "RandomPosterize",        "RandomSolarize",
	"RandomEqualize", "RandomAutocontrast",     "RandomAdjustSharpness",
	"RandomInvert",   "RandomRotation",         "RandomAffine",
	"RandAugment",    "TrivialAugmentWide",     "AutoAugment",
	"AugMix",         "rand_augment_transform", "auto_augment_transform",
};

static bool key_listed(const char *keys, const char *key)
{
	size_t n = strlen(key);

	for (const char *k = keys; (k = strstr(k, key)) != NULL; k += n)
		if ((k == keys || k[-1] == ' ') && (k[n] == ' ' || k[n] == '\0'))
			return true;
	return false;
}

static int parse_op(struct parse *ps, struct op *o)
{
	const struct tpipe_op_desc *d = ps->d;
	size_t t;
	int r;

	for (t = 0; t < sizeof(op_table) / sizeof(op_table[0]); t++)
		if (!strcmp(op_table[t].name, d->name))
			break;
	if (t == sizeof(op_table) / sizeof(op_table[0])) {
		if (pixel_op_known(d->name)) {
			o->kind = OP_PIXEL;
			return pixel_op_parse(d->name, d->params, d->n_params, &o->px, ps->err, ps->errlen);
		}
		for (size_t i = 0; i < sizeof(planned_ops) / sizeof(planned_ops[0]); i++)
			if (!strcmp(planned_ops[i], d->name))
				return fail(ps, NULL, "not built in this stokerd yet");
		return fail(ps, NULL, "unknown transform");
	}
	for (size_t i = 0; i < d->n_params; i++) {
		if (!key_listed(op_table[t].keys, d->params[i].key))
			return fail(ps, d->params[i].key, "unknown parameter (takes: %s)",
				    op_table[t].keys[0] ? op_table[t].keys : "none");
		for (size_t j = 0; j < i; j++)
			if (!strcmp(d->params[i].key, d->params[j].key))
				return fail(ps, d->params[i].key, "given twice");
	}
	o->kind = op_table[t].kind;
	switch (o->kind) {
	case OP_RANDOM_RESIZED_CROP: r = parse_rrc(ps, o); break;
	case OP_RESIZE: r = parse_resize(ps, o); break;
	case OP_CENTER_CROP: r = get_size(ps, "size", true, false, o); break;
	case OP_RANDOM_CROP: r = parse_random_crop(ps, o); break;
	case OP_HFLIP:
	case OP_VFLIP: r = parse_flip(ps, o); break;
	case OP_TO_DTYPE: r = parse_to_dtype(ps, o, !strcmp(d->name, "ToTensor")); break;
	case OP_NORMALIZE: r = parse_normalize(ps, o); break;
	case OP_ERASE: r = parse_erase(ps, o); break;
	default: r = -EINVAL; break;
	}
	return r < 0 ? r : 0;
}

/* Checks across ops: the dtype domain, Normalize's place, the output size. */
static int check_pipeline(struct tpipe *t, const struct tpipe_op_desc *ops, char *err, size_t errlen)
{
	struct tpipe_info *info = &t->info;
	bool in_float = false, fixed = false;
	float k = 1.0f / 255.0f; /* the float domain's value of 8-bit level 1 */
	size_t normalizes = 0;
	struct parse ps = {.err = err, .errlen = errlen};

	for (int c = 0; c < 3; c++) {
		info->mean[c] = 0.0f;
		info->std[c] = 1.0f;
	}
	for (size_t i = 0; i < t->n; i++) {
		struct op *o = &t->ops[i];
		bool geom = o->kind <= OP_VFLIP;

		ps.d = &ops[i];
		ps.index = i;
		o->in_float = in_float;
		if (in_float && (geom || o->kind == OP_PIXEL))
			return fail(&ps, NULL,
				    "runs on 8-bit images (torchvision's PIL path): put it before the "
				    "ToTensor / ToDtype to a float dtype");
		/* Only a pipeline that starts by resampling may start from a DCT-reduced image. */
		if (i == 0)
			info->first_crop_random = o->kind == OP_RANDOM_RESIZED_CROP;
		switch (o->kind) {
		case OP_RANDOM_RESIZED_CROP:
		case OP_CENTER_CROP:
		case OP_RANDOM_CROP:
			fixed = true;
			info->out_w = o->w;
			info->out_h = o->h;
			break;
		case OP_RESIZE:
			fixed = o->w != 0;
			info->out_w = o->w;
			info->out_h = o->h;
			break;
		case OP_TO_DTYPE:
			if (in_float && o->dtype == DTYPE_UINT8)
				return fail(&ps, "dtype", "a float image back to uint8 is not built");
			if (!in_float && o->dtype != DTYPE_UINT8) {
				in_float = true;
				k = o->scale_values ? 1.0f / 255.0f : 1.0f;
			}
			info->has_dtype = true;
			info->dtype = o->dtype;
			break;
		case OP_NORMALIZE:
			if (!in_float)
				return fail(&ps, NULL,
					    "needs a float image: put a ToTensor or ToDtype(float32, scale=True) "
					    "before it");
			if (normalizes++)
				return fail(&ps, NULL, "a second Normalize is not built");
			/* (v * k - mean) / std == (v / 255 - mean') / std' */
			for (int c = 0; c < 3; c++) {
				info->mean[c] = o->mean[c] / (255.0f * k);
				info->std[c] = o->std[c] / (255.0f * k);
			}
			break;
		case OP_ERASE:
			if (!in_float && o->erase != ERASE_VALUE)
				return fail(&ps, "value",
					    "random values need a float image: put RandomErasing after "
					    "ToTensor / ToDtype (and Normalize)");
			for (int c = 0; !in_float && c < 3; c++)
				if (o->value[c] < 0 || o->value[c] > 255 || o->value[c] != floor(o->value[c]))
					return fail(&ps, "value", "%g is not an 8-bit level (0..255) for a uint8 image",
						    o->value[c]);
			if (in_float)
				info->float_ops = true;
			break;
		default: break;
		}
	}
	/* Erasing on floats before the Normalize: its values are normalised with the image. */
	for (size_t i = 0; i < t->n; i++) {
		struct op *o = &t->ops[i];
		bool before = false;

		for (int c = 0; c < 3; c++) {
			o->post_mean[c] = 0.0f;
			o->post_std[c] = 1.0f;
		}
		if (o->kind != OP_ERASE || !o->in_float)
			continue;
		for (size_t j = i + 1; j < t->n; j++)
			if (t->ops[j].kind == OP_NORMALIZE) {
				before = true;
				memcpy(o->post_mean, t->ops[j].mean, sizeof(o->post_mean));
				memcpy(o->post_std, t->ops[j].std, sizeof(o->post_std));
			}
		(void)before;
	}
	if (!fixed) {
		snprintf(err, errlen,
			 "the pipeline's output size depends on the image: end its geometry with a "
			 "crop (RandomResizedCrop, CenterCrop, RandomCrop) or a Resize to (height, width)");
		return -EINVAL;
	}
	return 0;
}

/* The text of one number: the shortest of %.15g..%.17g that reads back the same. */
static void format_number(double v, char *buf, size_t len)
{
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, len, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

static int describe_ops(const struct tpipe_op_desc *ops, size_t n, char **out)
{
	size_t cap = 0, used = 0;
	char *s = NULL, num[40];
	int r = 0;

#define APPEND(str)                                                      \
	do {                                                             \
		const char *a_ = (str);                                  \
		size_t l_ = strlen(a_);                                  \
		if ((r = grow((void **)&s, &cap, used + l_ + 1, 1)) < 0) \
			goto out;                                        \
		memcpy(s + used, a_, l_ + 1);                            \
		used += l_;                                              \
	} while (0)

	APPEND("");
	for (size_t i = 0; i < n; i++) {
		if (i)
			APPEND("; ");
		APPEND(ops[i].name);
		APPEND("(");
		for (size_t j = 0; j < ops[i].n_params; j++) {
			const struct op_param *q = &ops[i].params[j];

			if (j)
				APPEND(", ");
			APPEND(q->key);
			APPEND("=");
			if (q->text) {
				/* a word bare, as the text form reads it back; anything else quoted */
				bool word = strspn(q->text, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
							    "0123456789.-") == strlen(q->text) &&
					    !isdigit((unsigned char)q->text[0]) && q->text[0] != '-' &&
					    q->text[0] != '.' && strcmp(q->text, "None");

				APPEND(word ? "" : "\"");
				APPEND(q->text);
				APPEND(word ? "" : "\"");
				continue;
			}
			if (q->n_numbers != 1)
				APPEND(q->n_numbers ? "(" : "None");
			for (size_t k = 0; k < q->n_numbers; k++) {
				if (k)
					APPEND(", ");
				format_number(q->numbers[k], num, sizeof(num));
				APPEND(num);
			}
			if (q->n_numbers > 1)
				APPEND(")");
		}
		APPEND(")");
	}
#undef APPEND
out:
	if (r < 0) {
		free(s);
		return r;
	}
	*out = s;
	return 0;
}

static bool text_ok(const char *s)
{
	size_t n = s ? strnlen(s, TPIPE_MAX_TEXT + 1) : 0;

	if (n == 0 || n > TPIPE_MAX_TEXT)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == '"' || s[i] == 0x7f)
			return false;
	return true;
}

int tpipe_parse(const struct tpipe_op_desc *ops, size_t n_ops, struct tpipe **out, char *err, size_t errlen)
{
	struct tpipe *t = NULL;
	struct parse ps = {.err = err, .errlen = errlen};
	int r = -EINVAL;

	if (!out || (!ops && n_ops))
		return -EINVAL;
	if (n_ops == 0 || n_ops > TPIPE_MAX_OPS) {
		snprintf(err, errlen, "a pipeline takes 1..%d transforms, not %zu", TPIPE_MAX_OPS, n_ops);
		return -EINVAL;
	}
	/* The wire's bounds first, before anything reads the texts. */
	for (size_t i = 0; i < n_ops; i++) {
		ps.d = &ops[i];
		ps.index = i;
		if (!text_ok(ops[i].name)) {
			snprintf(err, errlen, "transform %zu: its name is empty, longer than %d bytes or not printable",
				 i + 1, TPIPE_MAX_TEXT);
			return -EINVAL;
		}
		if (ops[i].n_params > TPIPE_MAX_PARAMS || (ops[i].n_params && !ops[i].params))
			return fail(&ps, NULL, "more than %d parameters", TPIPE_MAX_PARAMS);
		for (size_t j = 0; j < ops[i].n_params; j++) {
			const struct op_param *q = &ops[i].params[j];

			if (!text_ok(q->key))
				return fail(&ps, NULL,
					    "parameter %zu: its name is empty, longer than %d bytes or not "
					    "printable",
					    j + 1, TPIPE_MAX_TEXT);
			if (q->n_numbers > TPIPE_MAX_NUMBERS || (q->n_numbers && !q->numbers))
				return fail(&ps, q->key, "more than %d numbers", TPIPE_MAX_NUMBERS);
			if (q->text && (q->n_numbers || !text_ok(q->text)))
				return fail(&ps, q->key,
					    "a text value is empty, longer than %d bytes, not printable "
					    "or given with numbers",
					    TPIPE_MAX_TEXT);
			for (size_t k = 0; k < q->n_numbers; k++)
				if (!isfinite(q->numbers[k]))
					return fail(&ps, q->key, "not a finite number");
		}
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->ops = calloc(n_ops, sizeof(*t->ops));
	if (!t->ops) {
		r = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < n_ops; i++, t->n++) {
		ps.d = &ops[i];
		ps.index = i;
		r = parse_op(&ps, &t->ops[i]);
		if (r < 0)
			goto fail;
	}
	r = check_pipeline(t, ops, err, errlen);
	if (r >= 0)
		r = describe_ops(ops, n_ops, &t->text);
	if (r < 0)
		goto fail;
	*out = t;
	return 0;
fail:
	if (r == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	tpipe_free(t);
	return r;
}

void tpipe_free(struct tpipe *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		if (t->ops[i].kind == OP_PIXEL)
			pixel_op_free(t->ops[i].px);
	free(t->ops);
	free(t->text);
	free(t);
}

void tpipe_info(const struct tpipe *t, struct tpipe_info *out)
{
	*out = t->info;
}

const char *tpipe_text(const struct tpipe *t)
{
	return t && t->text ? t->text : "";
}

void tpipe_describe(const struct tpipe *t, char *buf, size_t len)
{
	if (len)
		snprintf(buf, len, "%s", t && t->text ? t->text : "");
}

/* ---- draws (the references' get_params) ---- */

/* Python's round(): half to even, as nearbyint() in the default mode. */
static double py_round(double v)
{
	return nearbyint(v);
}

/* torchvision's RandomResizedCrop.get_params (timm's draws the same): the box (top, left, h, w). */
static void draw_rrc(const struct op *o, uint32_t width, uint32_t height, struct rng *rng, uint32_t box[4])
{
	const double area = (double)width * height, log_lo = log(o->ratio[0]), log_hi = log(o->ratio[1]);
	double w, h, in_ratio;

	for (int attempt = 0; attempt < 10; attempt++) {
		double target = area * rng_range(rng, o->scale[0], o->scale[1]);
		double aspect = exp(rng_range(rng, log_lo, log_hi));

		w = py_round(sqrt(target * aspect));
		h = py_round(sqrt(target / aspect));
		if (w > 0 && w <= width && h > 0 && h <= height) {
			box[0] = (uint32_t)rng_below(rng, (uint64_t)(height - (uint32_t)h) + 1);
			box[1] = (uint32_t)rng_below(rng, (uint64_t)(width - (uint32_t)w) + 1);
			box[2] = (uint32_t)h;
			box[3] = (uint32_t)w;
			return;
		}
	}
	/* Fallback: the central crop, its aspect clamped into the ratio range. */
	in_ratio = (double)width / height;
	if (in_ratio < o->ratio[0]) {
		w = width;
		h = py_round(w / o->ratio[0]);
	} else if (in_ratio > o->ratio[1]) {
		h = height;
		w = py_round(h * o->ratio[1]);
	} else {
		w = width;
		h = height;
	}
	if (w < 1)
		w = 1;
	if (h < 1)
		h = 1;
	box[2] = (uint32_t)fmin(h, height);
	box[3] = (uint32_t)fmin(w, width);
	box[0] = (height - box[2]) / 2;
	box[1] = (width - box[3]) / 2;
}

/* RandomCrop's padded size, as torchvision pads: padding, then pad_if_needed on both sides. */
static void random_crop_padding(const struct op *o, uint32_t width, uint32_t height, uint32_t pad[4])
{
	uint32_t w, h;

	memcpy(pad, o->pad, sizeof(o->pad));
	w = width + pad[0] + pad[2];
	h = height + pad[1] + pad[3];
	if (o->pad_if_needed && w < o->w) {
		pad[0] += o->w - w;
		pad[2] += o->w - w;
	}
	if (o->pad_if_needed && h < o->h) {
		pad[1] += o->h - h;
		pad[3] += o->h - h;
	}
}

/* RandomCrop.get_params on a (padded) width x height image; false if it is smaller than the crop. */
static bool draw_random_crop(const struct op *o, uint32_t width, uint32_t height, struct rng *rng, uint32_t box[4])
{
	if (width < o->w || height < o->h)
		return false;
	box[0] = (uint32_t)rng_below(rng, (uint64_t)(height - o->h) + 1);
	box[1] = (uint32_t)rng_below(rng, (uint64_t)(width - o->w) + 1);
	box[2] = o->h;
	box[3] = o->w;
	return true;
}

/* RandomErasing's boxes (torchvision's get_params; timm's count): how many, into box[4 * i]. */
static uint32_t draw_erase(const struct op *o, uint32_t width, uint32_t height, struct rng *rng, uint32_t *box)
{
	const double area = (double)width * height, log_lo = log(o->ratio[0]), log_hi = log(o->ratio[1]);
	uint32_t count, n = 0;

	if (!(rng_uniform(rng) < o->p))
		return 0;
	count = o->min_count + (uint32_t)rng_below(rng, (uint64_t)(o->max_count - o->min_count) + 1);
	for (uint32_t k = 0; k < count; k++)
		for (int attempt = 0; attempt < 10; attempt++) {
			double target = area * rng_range(rng, o->scale[0], o->scale[1]) / count;
			double aspect = exp(rng_range(rng, log_lo, log_hi));
			double h = py_round(sqrt(target * aspect)), w = py_round(sqrt(target / aspect));

			if (h < height && w < width) {
				uint32_t *b = box + 4 * n++;

				b[0] = (uint32_t)rng_below(rng, (uint64_t)(height - (uint32_t)h) + 1);
				b[1] = (uint32_t)rng_below(rng, (uint64_t)(width - (uint32_t)w) + 1);
				b[2] = (uint32_t)h;
				b[3] = (uint32_t)w;
				break;
			}
		}
	return n;
}

/* A standard normal draw (Box-Muller). */
static double rng_normal(struct rng *rng)
{
	double u = rng_uniform(rng), v = rng_uniform(rng);

	return sqrt(-2.0 * log1p(-u)) * cos(2.0 * M_PI * v);
}

int tpipe_draw_params(const struct tpipe *t, size_t op, uint32_t width, uint32_t height, uint64_t seed, size_t n,
		      double *out)
{
	const struct op *o;

	if (!t || op >= t->n || !out || width == 0 || height == 0)
		return -EINVAL;
	o = &t->ops[op];
	if (o->kind != OP_RANDOM_RESIZED_CROP && o->kind != OP_RANDOM_CROP && o->kind != OP_HFLIP &&
	    o->kind != OP_VFLIP && o->kind != OP_ERASE)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		uint32_t box[4 * 64] = {0}, pad[4];
		double *v = out + 4 * i;
		struct rng rng;

		rng_init(&rng, seed, 0, i, RNG_AUGMENT);
		switch (o->kind) {
		case OP_RANDOM_RESIZED_CROP: draw_rrc(o, width, height, &rng, box); break;
		case OP_RANDOM_CROP:
			random_crop_padding(o, width, height, pad);
			if (!draw_random_crop(o, width + pad[0] + pad[2], height + pad[1] + pad[3], &rng, box))
				return -EINVAL;
			break;
		case OP_HFLIP:
		case OP_VFLIP: box[0] = rng_uniform(&rng) < o->p; break;
		default:
			if (draw_erase(o, width, height, &rng, box) == 0)
				box[0] = box[1] = box[2] = box[3] = UINT32_MAX;
			break;
		}
		for (int k = 0; k < 4; k++)
			v[k] = box[k] == UINT32_MAX ? -1.0 : (double)box[k];
	}
	return 0;
}

/* ---- running ---- */

#define TRACE_MAX 256
/* A worker's buffers hold at most this many pixels each (two of them, 3 bytes a pixel), whatever the
 * ops ask for (a source image itself is bounded by the decoder's max_pixels). */
#define TPIPE_MAX_BUFFER_PIXELS (1ull << 26)

struct tpipe_ctx {
	uint8_t *buf[2]; /* the materialised image, and the next one */
	size_t cap[2];
	int cur;  /* which buf holds the image */
	bool dct; /* this run may decode DCT-reduced (the spec's dct_scaling) */
	struct pixel_scratch *scratch;
	bool tracing;
	struct tpipe_draw trace[TRACE_MAX];
	size_t n_trace;
	char error[256];
};

/* The lazy image (see the top of this file). */
struct view {
	bool mat; /* the source is buf[cur] (bw x bh RGB), else the file */
	uint32_t bw, bh;
	uint32_t rx, ry, rw, rh; /* the region: PIL's image before the pending resize */
	bool resized;
	double x, y, w, h; /* the window resampled, within the region */
	uint32_t ow, oh;
	enum resize_filter filter;
	bool vfirst;
	bool hflip; /* the output mirrored */
};

int tpipe_ctx_new(struct tpipe_ctx **out)
{
	struct tpipe_ctx *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	r = pixel_scratch_new(&c->scratch);
	if (r < 0) {
		free(c);
		return r;
	}
	*out = c;
	return 0;
}

void tpipe_ctx_free(struct tpipe_ctx *c)
{
	if (!c)
		return;
	free(c->buf[0]);
	free(c->buf[1]);
	pixel_scratch_free(c->scratch);
	free(c);
}

const char *tpipe_ctx_error(const struct tpipe_ctx *c)
{
	return c ? c->error : "";
}

void tpipe_trace_enable(struct tpipe_ctx *c, bool on)
{
	c->tracing = on;
	c->n_trace = 0;
}

size_t tpipe_trace(const struct tpipe_ctx *c, const struct tpipe_draw **draws)
{
	*draws = c->trace;
	return c->n_trace;
}

static void trace(struct tpipe_ctx *c, size_t op, const char *kind, double a, double b, double d, double e)
{
	struct tpipe_draw *t;

	if (!c->tracing || c->n_trace == TRACE_MAX)
		return;
	t = &c->trace[c->n_trace++];
	t->op = (uint32_t)op;
	snprintf(t->kind, sizeof(t->kind), "%s", kind);
	t->v[0] = a;
	t->v[1] = b;
	t->v[2] = d;
	t->v[3] = e;
}

static void view_size(const struct view *v, uint32_t *w, uint32_t *h)
{
	*w = v->resized ? v->ow : v->rw;
	*h = v->resized ? v->oh : v->rh;
}

/* Make the view's image real: buf[cur] holds it, the view is all of it. */
static int materialize(struct tpipe_ctx *c, struct pipeline *p, const struct pipeline_source *src, struct view *v)
{
	uint32_t w, h;
	int next = v->mat ? 1 - c->cur : c->cur, r;
	struct resample_req rq;

	view_size(v, &w, &h);
	if (v->mat && !v->resized && !v->hflip && v->rx == 0 && v->ry == 0 && v->rw == v->bw && v->rh == v->bh)
		return 0;
	if ((uint64_t)w * h > TPIPE_MAX_BUFFER_PIXELS && (v->resized || v->mat)) {
		snprintf(c->error, sizeof(c->error), "an intermediate image of %ux%u is over %llu pixels", w, h,
			 TPIPE_MAX_BUFFER_PIXELS);
		return -E2BIG;
	}
	if (grow((void **)&c->buf[next], &c->cap[next], (size_t)w * h * 3, 1) < 0)
		return -ENOMEM;
	rq = (struct resample_req){
		.rx = v->rx,
		.ry = v->ry,
		.rw = v->rw,
		.rh = v->rh,
		.x = v->resized ? v->x : v->rx,
		.y = v->resized ? v->y : v->ry,
		.w = v->resized ? v->w : v->rw,
		.h = v->resized ? v->h : v->rh,
		.out_w = w,
		.out_h = h,
		.filter = v->resized ? v->filter : RESIZE_NEAREST,
		.vertical_first = v->resized && v->vfirst,
		.flip = v->hflip,
		.dct_scaling = c->dct && v->resized,
	};
	if (v->mat)
		r = pipeline_resample_rgb(p, c->buf[c->cur], v->bw, v->bh, (size_t)v->bw * 3, &rq, c->buf[next],
					  (size_t)w * 3);
	else
		r = pipeline_source_resample(p, src, &rq, c->buf[next], (size_t)w * 3);
	if (r < 0)
		return r;
	c->cur = next;
	*v = (struct view){.mat = true, .bw = w, .bh = h, .rw = w, .rh = h};
	return 0;
}

/* Crop (top, left, h, w) of the view's image, inside it. */
static void view_crop(struct view *v, uint32_t top, uint32_t left, uint32_t h, uint32_t w)
{
	double sx, sy;

	if (!v->resized) {
		v->rx += left;
		v->ry += top;
		v->rw = w;
		v->rh = h;
		return;
	}
	if (v->hflip)
		left = v->ow - left - w;
	sx = v->w / v->ow;
	sy = v->h / v->oh;
	v->x += left * sx;
	v->y += top * sy;
	v->w = fmin(w * sx, (double)(v->rx + v->rw) - v->x);
	v->h = fmin(h * sy, (double)(v->ry + v->rh) - v->y);
	v->ow = w;
	v->oh = h;
}

/* view_crop(), but a pending NEAREST resize is made first: Pillow accumulates
 * its positions from the whole output's first pixel, which a window of it
 * would not reproduce exactly. */
static int crop(struct tpipe_ctx *c, struct pipeline *p, const struct pipeline_source *src, struct view *v,
		uint32_t top, uint32_t left, uint32_t h, uint32_t w)
{
	int r = v->resized && v->filter == RESIZE_NEAREST ? materialize(c, p, src, v) : 0;

	if (r >= 0)
		view_crop(v, top, left, h, w);
	return r;
}

/* Start a resample of the whole (unresized) view to w x h. */
static void view_resize(struct view *v, uint32_t w, uint32_t h, enum resize_filter filter)
{
	v->resized = true;
	v->x = v->rx;
	v->y = v->ry;
	v->w = v->rw;
	v->h = v->rh;
	v->ow = w;
	v->oh = h;
	v->filter = filter;
	v->vfirst = resize_vertical_first(v->rw, v->rh, w, h);
}

static enum resize_filter filter_of(enum interp i)
{
	return i == INTERP_NEAREST ? RESIZE_NEAREST : i == INTERP_BICUBIC ? RESIZE_BICUBIC : RESIZE_BILINEAR;
}

/* Source column (or row) of padded position x for an image of n pixels. */
static uint32_t pad_index(enum pad_mode m, int64_t x, uint32_t n)
{
	int64_t period;

	if (x >= 0 && x < n)
		return (uint32_t)x;
	switch (m) {
	case PAD_EDGE: return x < 0 ? 0 : n - 1;
	case PAD_REFLECT:
		if (n == 1)
			return 0;
		period = 2 * (int64_t)n - 2;
		x = ((x % period) + period) % period;
		return (uint32_t)(x < n ? x : period - x);
	default: /* symmetric */
		period = 2 * (int64_t)n;
		x = ((x % period) + period) % period;
		return (uint32_t)(x < n ? x : period - 1 - x);
	}
}

/* n pixels of the colour rgb from d: one memset when grey, else the pattern doubled */
static void fill_pixels(uint8_t *d, size_t n, const uint8_t rgb[3])
{
	size_t done = 3, bytes = n * 3;

	if (!n)
		return;
	if (rgb[0] == rgb[1] && rgb[1] == rgb[2]) {
		memset(d, rgb[0], bytes);
		return;
	}
	memcpy(d, rgb, 3);
	for (; done < bytes; done *= 2)
		memcpy(d + done, d, done < bytes - done ? done : bytes - done);
}

/* Pad the (materialised) image by pad (left, top, right, bottom). */
static int pad_image(struct tpipe_ctx *c, struct view *v, const uint32_t pad[4], enum pad_mode mode,
		     const uint8_t fill[3])
{
	uint32_t w = v->bw + pad[0] + pad[2], h = v->bh + pad[1] + pad[3];
	int next = 1 - c->cur;
	const uint8_t *src = c->buf[c->cur];
	uint8_t *dst;

	if ((uint64_t)w * h > TPIPE_MAX_BUFFER_PIXELS) {
		snprintf(c->error, sizeof(c->error), "the padded image of %ux%u is over %llu pixels", w, h,
			 TPIPE_MAX_BUFFER_PIXELS);
		return -E2BIG;
	}
	if (grow((void **)&c->buf[next], &c->cap[next], (size_t)w * h * 3, 1) < 0)
		return -ENOMEM;
	dst = c->buf[next];
	for (uint32_t y = 0; y < h; y++) {
		int64_t sy = (int64_t)y - pad[1];
		uint8_t *d = dst + (size_t)y * w * 3;
		const uint8_t *row;

		if (mode == PAD_CONSTANT && (sy < 0 || sy >= v->bh)) {
			fill_pixels(d, w, fill);
			continue;
		}
		row = src + (size_t)pad_index(mode, sy, v->bh) * v->bw * 3;
		/* the image's own columns in one copy, the padding around them */
		memcpy(d + (size_t)pad[0] * 3, row, (size_t)v->bw * 3);
		if (mode == PAD_CONSTANT) {
			fill_pixels(d, pad[0], fill);
			fill_pixels(d + ((size_t)pad[0] + v->bw) * 3, pad[2], fill);
			continue;
		}
		for (uint32_t x = 0; x < w; x++) {
			if (x == pad[0]) {
				x += v->bw - 1;
				continue;
			}
			int64_t sx = (int64_t)x - pad[0];

			if (mode == PAD_CONSTANT && (sx < 0 || sx >= v->bw))
				memcpy(d + (size_t)x * 3, fill, 3);
			else
				memcpy(d + (size_t)x * 3, row + (size_t)pad_index(mode, sx, v->bw) * 3, 3);
		}
	}
	c->cur = next;
	*v = (struct view){.mat = true, .bw = w, .bh = h, .rw = w, .rh = h};
	return 0;
}

/* torchvision's Resize output size for an image w x h (_compute_resized_output_size). */
static void resize_size(const struct op *o, uint32_t w, uint32_t h, uint32_t *nw, uint32_t *nh)
{
	uint64_t s, l, shorter = w <= h ? w : h, longer = w <= h ? h : w;

	if (o->w) {
		*nw = o->w;
		*nh = o->h;
		return;
	}
	s = o->h;
	l = (uint64_t)((double)(s * longer) / shorter);
	if (o->max_size && l > o->max_size) {
		s = (uint64_t)((double)o->max_size * s / l);
		l = o->max_size;
	}
	if (s < 1)
		s = 1;
	*nw = (uint32_t)(w <= h ? s : l);
	*nh = (uint32_t)(w <= h ? l : s);
}

/* Erase box (top, left, h, w) of the float output planes (out_w x out_h) with the op's values. */
static void erase_float(const struct op *o, const uint32_t *b, uint32_t ow, uint32_t oh, enum sample_dtype dtype,
			struct rng *rng, uint8_t *out)
{
	double chan[3];

	for (int c = 0; c < 3; c++)
		chan[c] = o->erase == ERASE_CHANNEL ? rng_normal(rng) : o->value[c];
	if (o->erase != ERASE_PIXEL && dtype == DTYPE_FLOAT32) {
		/* one value a channel: its first row of the box, then copies of it */
		for (int c = 0; c < 3; c++) {
			float v = ((float)chan[c] - o->post_mean[c]) / o->post_std[c];
			float *plane = (float *)(void *)(out + (size_t)c * ow * oh * 4);

			for (uint32_t x = b[1]; x < b[1] + b[3]; x++)
				plane[(size_t)b[0] * ow + x] = v;
			for (uint32_t y = b[0] + 1; y < b[0] + b[2]; y++)
				memcpy(plane + (size_t)y * ow + b[1], plane + (size_t)b[0] * ow + b[1],
				       (size_t)b[3] * 4);
		}
		return;
	}
	for (int c = 0; c < 3; c++)
		for (uint32_t y = b[0]; y < b[0] + b[2]; y++)
			for (uint32_t x = b[1]; x < b[1] + b[3]; x++) {
				size_t i = (size_t)c * ow * oh + (size_t)y * ow + x;
				float v = (float)(o->erase == ERASE_PIXEL ? rng_normal(rng) : chan[c]);

				v = (v - o->post_mean[c]) / o->post_std[c];
				if (dtype == DTYPE_FLOAT16) {
					uint16_t hv = float_to_half(v);

					memcpy(out + i * 2, &hv, 2);
				} else {
					memcpy(out + i * 4, &v, 4);
				}
			}
}

/* The ops on 8-bit images, in order, on the view; `upto`: the first op on floats. */
static int run_8bit(struct tpipe_ctx *c, struct pipeline *p, const struct tpipe *t, const struct pipeline_source *src,
		    struct rng *rng, struct view *v, size_t *upto)
{
	size_t i;
	int r = 0;

	for (i = 0; i < t->n && !t->ops[i].in_float; i++) {
		const struct op *o = &t->ops[i];
		uint32_t w, h, box[4 * 64], pad[4];
		bool yes;

		view_size(v, &w, &h);
		switch (o->kind) {
		case OP_RANDOM_RESIZED_CROP: {
			enum interp in = o->interp;

			if (v->resized)
				r = materialize(c, p, src, v);
			if (r < 0)
				return r;
			view_size(v, &w, &h);
			draw_rrc(o, w, h, rng, box);
			if (in == INTERP_RANDOM)
				in = rng_below(rng, 2) ? INTERP_BICUBIC : INTERP_BILINEAR;
			trace(c, i, "crop", box[0], box[1], box[2], box[3]);
			trace(c, i, "interp", in, 0, 0, 0);
			view_crop(v, box[0], box[1], box[2], box[3]);
			view_resize(v, o->w, o->h, filter_of(in));
			break;
		}
		case OP_RESIZE: {
			uint32_t nw, nh;

			if (v->resized)
				r = materialize(c, p, src, v);
			if (r < 0)
				return r;
			view_size(v, &w, &h);
			resize_size(o, w, h, &nw, &nh);
			if (nw != w || nh != h) /* PIL returns a copy of an image already that size */
				view_resize(v, nw, nh, filter_of(o->interp));
			break;
		}
		case OP_CENTER_CROP:
			if (o->w > w || o->h > h) {
				/* torchvision pads with 0 to the crop's size first */
				pad[0] = o->w > w ? (o->w - w) / 2 : 0;
				pad[1] = o->h > h ? (o->h - h) / 2 : 0;
				pad[2] = o->w > w ? (o->w - w + 1) / 2 : 0;
				pad[3] = o->h > h ? (o->h - h + 1) / 2 : 0;
				r = materialize(c, p, src, v);
				if (r >= 0)
					r = pad_image(c, v, pad, PAD_CONSTANT, (const uint8_t[3]){0, 0, 0});
				if (r < 0)
					return r;
				view_size(v, &w, &h);
			}
			r = crop(c, p, src, v, (uint32_t)py_round((h - o->h) / 2.0),
				 (uint32_t)py_round((w - o->w) / 2.0), o->h, o->w);
			break;
		case OP_RANDOM_CROP:
			random_crop_padding(o, w, h, pad);
			if (pad[0] || pad[1] || pad[2] || pad[3]) {
				r = materialize(c, p, src, v);
				if (r >= 0)
					r = pad_image(c, v, pad, o->pad_mode, o->fill);
				if (r < 0)
					return r;
				view_size(v, &w, &h);
			}
			if (!draw_random_crop(o, w, h, rng, box)) {
				snprintf(
					c->error, sizeof(c->error),
					"RandomCrop: the image is %ux%u, smaller than the crop %ux%u (pad_if_needed is "
					"off)",
					w, h, o->w, o->h);
				return -EINVAL;
			}
			trace(c, i, "crop", box[0], box[1], box[2], box[3]);
			r = crop(c, p, src, v, box[0], box[1], box[2], box[3]);
			break;
		case OP_HFLIP:
			yes = rng_uniform(rng) < o->p;
			trace(c, i, "flip", yes, 0, 0, 0);
			if (!yes)
				break;
			if (v->resized) {
				v->hflip = !v->hflip;
				break;
			}
			v->hflip = true; /* an identity resample, mirrored */
			r = materialize(c, p, src, v);
			break;
		case OP_VFLIP:
			yes = rng_uniform(rng) < o->p;
			trace(c, i, "flip", yes, 0, 0, 0);
			if (!yes)
				break;
			r = materialize(c, p, src, v);
			if (r >= 0)
				mirror_rows(c->buf[c->cur], v->bw, v->bh);
			break;
		case OP_ERASE: {
			uint32_t n = draw_erase(o, w, h, rng, box);
			uint8_t level[3];

			if (n)
				r = materialize(c, p, src, v);
			for (uint32_t k = 0; r >= 0 && k < n; k++) {
				const uint32_t *b = box + 4 * k;

				trace(c, i, "erase", b[0], b[1], b[2], b[3]);
				for (int ch = 0; ch < 3; ch++)
					level[ch] = (uint8_t)o->value[ch];
				for (uint32_t y = b[0]; y < b[0] + b[2]; y++)
					fill_pixels(c->buf[c->cur] + ((size_t)y * v->bw + b[1]) * 3, b[3], level);
			}
			break;
		}
		case OP_PIXEL: {
			struct rgb_image im;

			r = materialize(c, p, src, v);
			if (r < 0)
				return r;
			im = (struct rgb_image){.px = c->buf[c->cur],
						.width = v->bw,
						.height = v->bh,
						.stride = (size_t)v->bw * 3};
			r = pixel_op_apply(o->px, &im, rng, c->scratch);
			break;
		}
		default: /* ToDtype to uint8 */ break;
		}
		if (r < 0)
			return r;
	}
	*upto = i;
	return 0;
}

int tpipe_run(struct tpipe_ctx *c, struct pipeline *p, const struct tpipe *t, const uint8_t *data, size_t len,
	      const struct pipeline_image *img, const struct transform_spec *spec, struct rng *rng, uint8_t *out)
{
	struct transform_spec os;
	struct pipeline_source src;
	struct view v = {0};
	uint32_t ow = t ? t->info.out_w : 0, oh = t ? t->info.out_h : 0, w, h;
	size_t upto = 0, pixels = (size_t)ow * oh;
	uint8_t *rgb;
	bool whole;
	int r;

	if (!c || !p || !t || !spec || !rng || !out || (!img && !data && len))
		return -EINVAL;
	c->error[0] = '\0';
	c->n_trace = 0;
	os = *spec;
	c->dct = spec->dct_scaling;
	r = 0;
	if (img)
		pipeline_source_of_image(img, &src);
	else
		r = pipeline_source_open(p, data, len, &src);
	if (r < 0)
		goto out;
	if (src.is_whole && src.whole.denom > 1 && !(spec->dct_scaling && t->info.first_crop_random)) {
		snprintf(c->error, sizeof(c->error), "image decoded at 1/%u for a pipeline that needs it whole",
			 src.whole.denom);
		r = -EINVAL;
		goto out;
	}
	v.rw = src.width;
	v.rh = src.height;
	r = run_8bit(c, p, t, &src, rng, &v, &upto);
	if (r < 0)
		goto out;
	view_size(&v, &w, &h);
	if (w != ow || h != oh) {
		snprintf(c->error, sizeof(c->error), "the pipeline made %ux%u, not %ux%u", w, h, ow, oh);
		r = -EINVAL;
		goto out;
	}
	/* The last resample straight into the slot where the output is 8-bit. */
	rgb = os.dtype == DTYPE_UINT8 ? out : NULL;
	whole = v.mat && !v.resized && !v.hflip && v.rx == 0 && v.ry == 0 && v.rw == v.bw && v.rh == v.bh;
	if (!whole && !v.resized) {
		/* a crop alone: an identity resample reads just its pixels */
		v.resized = true;
		v.x = v.rx;
		v.y = v.ry;
		v.w = v.rw;
		v.h = v.rh;
		v.ow = v.rw;
		v.oh = v.rh;
		v.filter = RESIZE_NEAREST;
	}
	if (whole) {
		r = pipeline_to_output(p, &os, c->buf[c->cur], pixels, out);
	} else if (rgb) {
		struct resample_req rq = {
			.rx = v.rx,
			.ry = v.ry,
			.rw = v.rw,
			.rh = v.rh,
			.x = v.x,
			.y = v.y,
			.w = v.w,
			.h = v.h,
			.out_w = ow,
			.out_h = oh,
			.filter = v.filter,
			.vertical_first = v.vfirst,
			.flip = v.hflip,
			.dct_scaling = spec->dct_scaling,
		};

		r = v.mat ? pipeline_resample_rgb(p, c->buf[c->cur], v.bw, v.bh, (size_t)v.bw * 3, &rq, rgb,
						  (size_t)ow * 3)
			  : pipeline_source_resample(p, &src, &rq, rgb, (size_t)ow * 3);
	} else {
		r = materialize(c, p, &src, &v);
		if (r >= 0)
			r = pipeline_to_output(p, &os, c->buf[c->cur], pixels, out);
	}
	if (r < 0)
		goto out;
	/* The ops on the float output. */
	for (size_t i = upto; i < t->n; i++) {
		const struct op *o = &t->ops[i];
		uint32_t box[4 * 64], n;

		if (o->kind != OP_ERASE)
			continue;
		n = draw_erase(o, ow, oh, rng, box);
		for (uint32_t k = 0; k < n; k++) {
			trace(c, i, "erase", box[4 * k], box[4 * k + 1], box[4 * k + 2], box[4 * k + 3]);
			erase_float(o, box + 4 * k, ow, oh, os.dtype, rng, out);
		}
	}
out:
	if (!img)
		pipeline_source_close(p);
	if (r == -ENOMEM && !c->error[0])
		snprintf(c->error, sizeof(c->error), "out of memory");
	if (r < 0 && !c->error[0])
		snprintf(c->error, sizeof(c->error), "%s", pipeline_error(p));
	else if (r < 0)
		pipeline_set_error(p, c->error);
	return r;
}
