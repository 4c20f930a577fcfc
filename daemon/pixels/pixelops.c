/* SPDX-License-Identifier: MIT */
/*
 * The registry of pixel ops: name -> parse (bounds, defaults as
 * torchvision spells them) and apply (the reference's draws from the
 * sample's stream, then color.c / affine.c / policy.c).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "color.h"
#include "grow.h"
#include "pixelops_int.h"
#include "policy.h"

enum op_kind {
	OP_COLOR_JITTER,
	OP_GRAYSCALE,
	OP_RANDOM_GRAYSCALE,
	OP_GAUSSIAN_BLUR,
	OP_POSTERIZE,
	OP_SOLARIZE,
	OP_EQUALIZE,
	OP_AUTOCONTRAST,
	OP_SHARPNESS,
	OP_INVERT,
	OP_POLICY,
};

struct pixel_op {
	enum op_kind kind;
	double p; /* the Random* ops: applied when a draw on [0, 1) is < p */
	union {
		struct {
			/* [min, max] factors; has[i] false where torchvision's is None */
			double range[4][2];
			bool has[4];
		} jitter;
		struct {
			unsigned kx, ky;
			double sigma[2];
		} blur;
		unsigned bits;
		double threshold;
		double factor;
		struct policy *policy;
	} u;
};

/* ---- parameters ---- */

int params_fail(const struct params *ps, const char *key, const char *fmt, ...)
{
	va_list ap;
	int n = 0;

	if (ps->err && ps->errlen) {
		n = snprintf(ps->err, ps->errlen, "%s: parameter %s: ", ps->op, key);
		if (n >= 0 && (size_t)n < ps->errlen) {
			va_start(ap, fmt);
			vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
			va_end(ap);
		}
	}
	return -EINVAL;
}

int params_check_keys(const struct params *ps, const char *const *keys)
{
	for (size_t i = 0; i < ps->n; i++) {
		const char *k = ps->p[i].key;
		size_t j;

		if (!k)
			return params_fail(ps, "(none)", "a parameter without a name");
		for (j = 0; keys[j]; j++)
			if (!strcmp(keys[j], k))
				break;
		if (!keys[j])
			return params_fail(ps, k, "unknown to this op");
		for (size_t m = 0; m < i; m++)
			if (!strcmp(ps->p[m].key, k))
				return params_fail(ps, k, "given twice");
	}
	return 0;
}

const struct op_param *params_find(const struct params *ps, const char *key)
{
	for (size_t i = 0; i < ps->n; i++)
		if (ps->p[i].key && !strcmp(ps->p[i].key, key))
			return &ps->p[i];
	return NULL;
}

/* Present with neither numbers nor text: Python's None. */
static bool is_none(const struct op_param *p)
{
	return !p || (!p->n_numbers && (!p->text || !strcmp(p->text, "none") || !strcmp(p->text, "None")));
}

int params_number(const struct params *ps, const char *key, double def, double lo, double hi, double *out)
{
	const struct op_param *p = params_find(ps, key);
	double v = def;

	if (p) {
		if (p->n_numbers != 1 || p->text)
			return params_fail(ps, key, "a number is expected");
		v = p->numbers[0];
	}
	if (!isfinite(v) || v < lo || v > hi)
		return params_fail(ps, key, "%g is outside [%g, %g]", v, lo, hi);
	*out = v;
	return 0;
}

int params_int(const struct params *ps, const char *key, long def, long lo, long hi, long *out)
{
	const struct op_param *p = params_find(ps, key);
	double v = (double)def;

	if (p) {
		if (p->n_numbers != 1 || p->text)
			return params_fail(ps, key, "an integer is expected");
		v = p->numbers[0];
		if (v != floor(v))
			return params_fail(ps, key, "%g is not an integer", v);
	}
	if (!isfinite(v) || v < (double)lo || v > (double)hi)
		return params_fail(ps, key, "%g is outside [%ld, %ld]", v, lo, hi);
	*out = (long)v;
	return 0;
}

int params_bool(const struct params *ps, const char *key, bool def, bool *out)
{
	const struct op_param *p = params_find(ps, key);

	if (!p) {
		*out = def;
		return 0;
	}
	if (p->n_numbers == 1 && !p->text && (p->numbers[0] == 0 || p->numbers[0] == 1)) {
		*out = p->numbers[0] == 1;
		return 0;
	}
	if (!p->n_numbers && p->text && (!strcasecmp(p->text, "true") || !strcasecmp(p->text, "false"))) {
		*out = !strcasecmp(p->text, "true");
		return 0;
	}
	return params_fail(ps, key, "true or false (1 or 0) is expected");
}

int params_prob(const struct params *ps, const char *key, double def, double *out)
{
	return params_number(ps, key, def, 0.0, 1.0, out);
}

int params_text(const struct params *ps, const char *key, const char *def, const char **out)
{
	const struct op_param *p = params_find(ps, key);

	if (p && (p->n_numbers || !p->text))
		return params_fail(ps, key, "a text is expected");
	*out = p ? p->text : def;
	return 0;
}

int params_fill(const struct params *ps, const char *key, uint8_t fill[3])
{
	const struct op_param *p = params_find(ps, key);

	if (is_none(p)) {
		fill[0] = fill[1] = fill[2] = 0;
		return 0;
	}
	if (p->text || (p->n_numbers != 1 && p->n_numbers != 3))
		return params_fail(ps, key, "a number or 3 numbers (R, G, B) are expected");
	for (size_t c = 0; c < 3; c++) {
		double v = p->numbers[p->n_numbers == 1 ? 0 : c];

		if (!isfinite(v) || v < 0 || v > 255)
			return params_fail(ps, key, "%g is outside [0, 255]", v);
		/* PIL's fillcolor takes ints; torchvision passes int(v) for PIL images */
		fill[c] = (uint8_t)v;
	}
	return 0;
}

/*
 * torchvision's ColorJitter._check_input: a number v >= 0 is
 * [center - v, center + v] (clipped at 0 for the factors), a pair must lie
 * within the bound and be ordered; [center, center] is None.
 */
static int jitter_range(const struct params *ps, const char *key, double center, double blo, double bhi, bool clip_zero,
			double range[2], bool *has)
{
	const struct op_param *p = params_find(ps, key);
	double lo, hi;

	*has = false;
	if (is_none(p))
		return 0;
	if (p->text || (p->n_numbers != 1 && p->n_numbers != 2))
		return params_fail(ps, key, "a number or a pair [min, max] is expected");
	if (p->n_numbers == 1) {
		double v = p->numbers[0];

		if (!isfinite(v) || v < 0)
			return params_fail(ps, key, "%g is negative", v);
		lo = center - v;
		hi = center + v;
		if (clip_zero)
			lo = fmax(lo, 0.0);
	} else {
		lo = p->numbers[0];
		hi = p->numbers[1];
	}
	if (!isfinite(lo) || !isfinite(hi) || lo < blo || hi > bhi || lo > hi)
		return params_fail(ps, key, "[%g, %g] is not ordered within [%g, %g]", lo, hi, blo, bhi);
	if (lo == center && hi == center)
		return 0;
	range[0] = lo;
	range[1] = hi;
	*has = true;
	return 0;
}

/* ---- the registry ---- */

static const char *const KEYS_JITTER[] = {"brightness", "contrast", "saturation", "hue", NULL};
static const char *const KEYS_P[] = {"p", NULL};
static const char *const KEYS_GRAY[] = {"num_output_channels", NULL};
static const char *const KEYS_BLUR[] = {"kernel_size", "sigma", NULL};
static const char *const KEYS_POSTERIZE[] = {"bits", "p", NULL};
static const char *const KEYS_SOLARIZE[] = {"threshold", "p", NULL};
static const char *const KEYS_SHARPNESS[] = {"sharpness_factor", "p", NULL};

static const struct {
	const char *name;
	enum op_kind kind;
	const char *const *keys;
} OPS[] = {
	{"ColorJitter", OP_COLOR_JITTER, KEYS_JITTER},
	{"Grayscale", OP_GRAYSCALE, KEYS_GRAY},
	{"RandomGrayscale", OP_RANDOM_GRAYSCALE, KEYS_P},
	{"GaussianBlur", OP_GAUSSIAN_BLUR, KEYS_BLUR},
	{"RandomPosterize", OP_POSTERIZE, KEYS_POSTERIZE},
	{"RandomSolarize", OP_SOLARIZE, KEYS_SOLARIZE},
	{"RandomEqualize", OP_EQUALIZE, KEYS_P},
	{"RandomAutocontrast", OP_AUTOCONTRAST, KEYS_P},
	{"RandomAdjustSharpness", OP_SHARPNESS, KEYS_SHARPNESS},
	{"RandomInvert", OP_INVERT, KEYS_P},
};

bool pixel_op_known(const char *name)
{
	if (!name)
		return false;
	for (size_t i = 0; i < sizeof(OPS) / sizeof(OPS[0]); i++)
		if (!strcmp(OPS[i].name, name))
			return true;
	return policy_known(name);
}

static int parse_blur(const struct params *ps, struct pixel_op *op)
{
	const struct op_param *k = params_find(ps, "kernel_size"), *s = params_find(ps, "sigma");

	if (!k || k->text || (k->n_numbers != 1 && k->n_numbers != 2))
		return params_fail(ps, "kernel_size", "a number or a pair is required");
	for (size_t i = 0; i < 2; i++) {
		double v = k->numbers[k->n_numbers == 1 ? 0 : i];

		if (!isfinite(v) || v != floor(v) || v <= 0 || fmod(v, 2) != 1 || v > 255)
			return params_fail(ps, "kernel_size", "%g is not an odd positive integer up to 255", v);
		/* torchvision's pair is (x, y) */
		if (i == 0)
			op->u.blur.kx = (unsigned)v;
		else
			op->u.blur.ky = (unsigned)v;
	}
	if (is_none(s)) {
		op->u.blur.sigma[0] = 0.1;
		op->u.blur.sigma[1] = 2.0;
		return 0;
	}
	if (s->text || (s->n_numbers != 1 && s->n_numbers != 2))
		return params_fail(ps, "sigma", "a number or a pair [min, max] is expected");
	op->u.blur.sigma[0] = s->numbers[0];
	op->u.blur.sigma[1] = s->numbers[s->n_numbers - 1];
	if (!isfinite(op->u.blur.sigma[0]) || !isfinite(op->u.blur.sigma[1]) || op->u.blur.sigma[0] <= 0 ||
	    op->u.blur.sigma[0] > op->u.blur.sigma[1])
		return params_fail(ps, "sigma", "[%g, %g] is not 0 < min <= max", op->u.blur.sigma[0],
				   op->u.blur.sigma[1]);
	return 0;
}

static int parse_simple(const struct params *ps, enum op_kind kind, struct pixel_op *op)
{
	long l;
	int r = 0;

	switch (kind) {
	case OP_COLOR_JITTER:
		r = jitter_range(ps, "brightness", 1, 0, INFINITY, true, op->u.jitter.range[0], &op->u.jitter.has[0]);
		if (r >= 0)
			r = jitter_range(ps, "contrast", 1, 0, INFINITY, true, op->u.jitter.range[1],
					 &op->u.jitter.has[1]);
		if (r >= 0)
			r = jitter_range(ps, "saturation", 1, 0, INFINITY, true, op->u.jitter.range[2],
					 &op->u.jitter.has[2]);
		if (r >= 0)
			r = jitter_range(ps, "hue", 0, -0.5, 0.5, false, op->u.jitter.range[3], &op->u.jitter.has[3]);
		return r;
	case OP_GRAYSCALE:
		r = params_int(ps, "num_output_channels", 1, 1, 3, &l);
		if (r >= 0 && l != 3)
			r = params_fail(ps, "num_output_channels", "%ld: only 3 is built (the output stays RGB)", l);
		return r;
	case OP_RANDOM_GRAYSCALE: return params_prob(ps, "p", 0.1, &op->p);
	case OP_GAUSSIAN_BLUR: return parse_blur(ps, op);
	case OP_POSTERIZE:
		if (!params_find(ps, "bits"))
			return params_fail(ps, "bits", "is required");
		r = params_int(ps, "bits", 8, 1, 8, &l);
		op->u.bits = (unsigned)l;
		return r < 0 ? r : params_prob(ps, "p", 0.5, &op->p);
	case OP_SOLARIZE:
		if (!params_find(ps, "threshold"))
			return params_fail(ps, "threshold", "is required");
		r = params_number(ps, "threshold", 0, 0, 255, &op->u.threshold);
		return r < 0 ? r : params_prob(ps, "p", 0.5, &op->p);
	case OP_SHARPNESS:
		if (!params_find(ps, "sharpness_factor"))
			return params_fail(ps, "sharpness_factor", "is required");
		r = params_number(ps, "sharpness_factor", 0, 0, 1e6, &op->u.factor);
		return r < 0 ? r : params_prob(ps, "p", 0.5, &op->p);
	case OP_EQUALIZE:
	case OP_AUTOCONTRAST:
	case OP_INVERT: return params_prob(ps, "p", 0.5, &op->p);
	case OP_POLICY: break;
	}
	return -EINVAL;
}

int pixel_op_parse(const char *name, const struct op_param *params, size_t n_params, struct pixel_op **out, char *err,
		   size_t errlen)
{
	struct params ps = {.op = name ? name : "(unnamed)", .p = params, .n = n_params, .err = err, .errlen = errlen};
	struct pixel_op *op = NULL;
	int r = -EINVAL;
	size_t i;

	if (err && errlen)
		err[0] = '\0';
	if (!name || !out || (n_params && !params)) {
		if (err && errlen)
			snprintf(err, errlen, "%s: not an op", ps.op);
		return -EINVAL;
	}
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	for (i = 0; i < sizeof(OPS) / sizeof(OPS[0]); i++)
		if (!strcmp(OPS[i].name, name))
			break;
	if (i < sizeof(OPS) / sizeof(OPS[0])) {
		op->kind = OPS[i].kind;
		op->p = 1.0;
		r = params_check_keys(&ps, OPS[i].keys);
		if (r >= 0)
			r = parse_simple(&ps, op->kind, op);
	} else if (policy_known(name)) {
		op->kind = OP_POLICY;
		r = policy_parse(name, &ps, &op->u.policy);
	} else if (err && errlen) {
		snprintf(err, errlen, "%s: unknown op", name);
	}
	if (r < 0)
		goto fail;
	*out = op;
	return 0;
fail:
	free(op);
	return r;
}

void pixel_op_free(struct pixel_op *op)
{
	if (!op)
		return;
	if (op->kind == OP_POLICY)
		policy_free(op->u.policy);
	free(op);
}

/* ---- scratch ---- */

int pixel_scratch_new(struct pixel_scratch **out)
{
	struct pixel_scratch *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	*out = s;
	return 0;
}

void pixel_scratch_free(struct pixel_scratch *s)
{
	if (!s)
		return;
	for (int i = 0; i < 4; i++)
		free(s->img[i]);
	free(s->f);
	free(s);
}

void pixel_scratch_trace(struct pixel_scratch *s, FILE *f)
{
	if (s)
		s->trace = f;
}

uint8_t *scratch_image(struct pixel_scratch *s, unsigned i, const struct rgb_image *im)
{
	void *p = s->img[i];

	if (grow(&p, &s->img_cap[i], im->stride * im->height, 1) < 0)
		return NULL;
	s->img[i] = p;
	return p;
}

float *scratch_floats(struct pixel_scratch *s, size_t n)
{
	void *p = s->f;

	if (grow(&p, &s->f_cap, n, sizeof(float)) < 0)
		return NULL;
	s->f = p;
	return p;
}

void pixel_trace(struct pixel_scratch *s, const char *name, double value)
{
	if (s->trace)
		fprintf(s->trace, "%s %.17g\n", name, value);
}

/* ---- apply ---- */

/* RandomX(p): torch.rand(1) >= p skips. */
static bool coin(const struct pixel_op *op, struct rng *rng, struct pixel_scratch *s)
{
	bool yes = rng_uniform(rng) < op->p;

	pixel_trace(s, "apply", yes);
	return yes;
}

int gaussian_blur(struct rgb_image *im, unsigned kx, unsigned ky, double sx, double sy, struct pixel_scratch *s)
{
	float *tmp = scratch_floats(s, color_gaussian_floats(im->width, im->height, kx));

	if (!tmp)
		return -ENOMEM;
	color_gaussian_blur(im, kx, ky, sx, sy, tmp);
	return 0;
}

int sharpness(struct rgb_image *im, double factor, struct pixel_scratch *s)
{
	uint8_t *tmp = scratch_image(s, 2, im);

	if (!tmp)
		return -ENOMEM;
	color_sharpness(im, factor, tmp);
	return 0;
}

static void color_jitter(const struct pixel_op *op, struct rgb_image *im, struct rng *rng, struct pixel_scratch *s)
{
	unsigned order[4] = {0, 1, 2, 3};
	double f[4];

	/* torch.randperm(4), then a factor for each one that is not None, in that order */
	for (unsigned i = 3; i > 0; i--) {
		unsigned j = (unsigned)rng_below(rng, i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (unsigned i = 0; i < 4; i++) {
		pixel_trace(s, "order", order[i]);
		if (op->u.jitter.has[i]) {
			/* torch.empty(1).uniform_(lo, hi): a float32 */
			f[i] = (float)rng_range(rng, op->u.jitter.range[i][0], op->u.jitter.range[i][1]);
			pixel_trace(s,
				    i == 0   ? "brightness"
				    : i == 1 ? "contrast"
				    : i == 2 ? "saturation"
					     : "hue",
				    f[i]);
		}
	}
	for (unsigned i = 0; i < 4; i++) {
		unsigned k = order[i];

		if (!op->u.jitter.has[k])
			continue;
		if (k == 0)
			color_brightness(im, f[k]);
		else if (k == 1)
			color_contrast(im, f[k]);
		else if (k == 2)
			color_saturation(im, f[k]);
		else
			color_hue(im, f[k]);
	}
}

int pixel_op_apply(const struct pixel_op *op, struct rgb_image *im, struct rng *rng, struct pixel_scratch *scratch)
{
	double sigma;

	switch (op->kind) {
	case OP_COLOR_JITTER: color_jitter(op, im, rng, scratch); return 0;
	case OP_GRAYSCALE: color_grayscale(im); return 0;
	case OP_RANDOM_GRAYSCALE:
		if (coin(op, rng, scratch))
			color_grayscale(im);
		return 0;
	case OP_GAUSSIAN_BLUR:
		sigma = (float)rng_range(rng, op->u.blur.sigma[0], op->u.blur.sigma[1]);
		pixel_trace(scratch, "sigma", sigma);
		return gaussian_blur(im, op->u.blur.kx, op->u.blur.ky, sigma, sigma, scratch);
	case OP_POSTERIZE:
		if (coin(op, rng, scratch))
			color_posterize(im, op->u.bits);
		return 0;
	case OP_SOLARIZE:
		if (coin(op, rng, scratch))
			color_solarize(im, op->u.threshold);
		return 0;
	case OP_EQUALIZE:
		if (coin(op, rng, scratch))
			color_equalize(im);
		return 0;
	case OP_AUTOCONTRAST:
		if (coin(op, rng, scratch))
			color_autocontrast(im);
		return 0;
	case OP_SHARPNESS: return coin(op, rng, scratch) ? sharpness(im, op->u.factor, scratch) : 0;
	case OP_INVERT:
		if (coin(op, rng, scratch))
			color_invert(im);
		return 0;
	case OP_POLICY: return policy_apply(op->u.policy, im, rng, scratch);
	}
	return -EINVAL;
}

int pixel_op_apply_policy_op(const struct pixel_op *op, const char *spec, struct rgb_image *im,
			     struct pixel_scratch *scratch, char *err, size_t errlen)
{
	if (op->kind != OP_POLICY) {
		snprintf(err, errlen, "not a policy");
		return -EINVAL;
	}
	return policy_apply_named(op->u.policy, spec, im, scratch, err, errlen);
}
