/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchmix.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define BATCHMIX_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define BATCHMIX_X86 0
#endif

/* ---- the text form ---- */

struct cursor {
	const char *s;
	char *err;
	size_t errlen;
	int failed;
};

static void fail(struct cursor *c, const char *fmt, ...)
{
	va_list ap;

	if (c->failed)
		return;
	c->failed = 1;
	va_start(ap, fmt);
	vsnprintf(c->err, c->errlen, fmt, ap);
	va_end(ap);
}

static void skip(struct cursor *c)
{
	while (isspace((unsigned char)*c->s))
		c->s++;
}

static bool eat(struct cursor *c, char ch)
{
	skip(c);
	if (*c->s != ch)
		return false;
	c->s++;
	return true;
}

/* A name or word: letters, digits, '_' and '.'; len < cap. */
static bool word(struct cursor *c, char *out, size_t cap)
{
	size_t n = 0;

	skip(c);
	while (isalnum((unsigned char)*c->s) || *c->s == '_' || *c->s == '.' || *c->s == '-' || *c->s == '+') {
		if (n + 1 >= cap)
			return false;
		out[n++] = *c->s++;
	}
	out[n] = 0;
	return n > 0;
}

/* A value: a number, a word (True/False/None/batch...) or a tuple of up to
 * `cap` numbers. *n numbers, or *n = 0 and the word in text. */
struct value {
	char text[32];
	double v[BATCHMIX_MAX_CHOICES];
	size_t n;
	bool tuple;
};

static bool number(const char *w, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(w, &end);
	return *w && !*end && errno == 0;
}

static bool value(struct cursor *c, struct value *v)
{
	char w[32];

	memset(v, 0, sizeof(*v));
	skip(c);
	if (*c->s == '(' || *c->s == '[') {
		char close = *c->s == '(' ? ')' : ']';

		c->s++;
		v->tuple = true;
		if (eat(c, close))
			return true;
		do {
			if (v->n == BATCHMIX_MAX_CHOICES || !word(c, w, sizeof(w)) || !number(w, &v->v[v->n]))
				return false;
			v->n++;
		} while (eat(c, ','));
		return eat(c, close);
	}
	if (*c->s == '"' || *c->s == '\'') {
		char q = *c->s++;
		size_t n = 0;

		while (*c->s && *c->s != q) {
			if (n + 1 >= sizeof(v->text))
				return false;
			v->text[n++] = *c->s++;
		}
		if (*c->s != q)
			return false;
		c->s++;
		return true;
	}
	if (!word(c, w, sizeof(w)))
		return false;
	if (number(w, &v->v[0]))
		v->n = 1;
	else
		snprintf(v->text, sizeof(v->text), "%s", w);
	return true;
}

static bool is_none(const struct value *v)
{
	return v->n == 0 && !v->tuple && !strcmp(v->text, "None");
}

/* A number in [lo, hi] (open at lo when lo_open). */
static double num_param(struct cursor *c, const char *op, const char *key, const struct value *v, double lo,
			bool lo_open, double hi)
{
	if (v->n != 1 || v->tuple || !isfinite(v->v[0]) || v->v[0] < lo || (lo_open && v->v[0] == lo) || v->v[0] > hi) {
		fail(c, "%s: %s must be a number in %s%g, %g]", op, key, lo_open ? "(" : "[", lo, hi);
		return 0;
	}
	return v->v[0];
}

static bool bool_param(struct cursor *c, const char *op, const char *key, const struct value *v)
{
	if (!strcmp(v->text, "True") || !strcmp(v->text, "true") || (v->n == 1 && v->v[0] == 1))
		return true;
	if (!strcmp(v->text, "False") || !strcmp(v->text, "false") || (v->n == 1 && v->v[0] == 0))
		return false;
	fail(c, "%s: %s must be True or False", op, key);
	return false;
}

static uint32_t classes_param(struct cursor *c, const char *op, const struct value *v)
{
	if (is_none(v))
		return 0;
	return (uint32_t)num_param(c, op, "num_classes", v, 1, false, BATCHMIX_MAX_CLASSES);
}

/* MixUp(...) or CutMix(...) after its name; the '(' eaten. */
static void tv_op(struct cursor *c, const char *name, struct batchmix *m, uint32_t i)
{
	char key[32];
	struct value v;

	m->kind[i] = !strcmp(name, "MixUp") ? BATCHMIX_MIXUP : BATCHMIX_CUTMIX;
	m->alpha[i] = 1.0; /* torchvision's default */
	if (eat(c, ')'))
		return;
	do {
		if (!word(c, key, sizeof(key)) || !eat(c, '=') || !value(c, &v)) {
			fail(c, "%s: malformed parameter near '%.20s'", name, c->s);
			return;
		}
		if (!strcmp(key, "alpha")) {
			m->alpha[i] = num_param(c, name, key, &v, 0, true, 1e6);
		} else if (!strcmp(key, "num_classes")) {
			uint32_t k = classes_param(c, name, &v);

			if (m->num_classes && k && k != m->num_classes)
				fail(c, "%s: num_classes %u differs from the other op's %u", name, k, m->num_classes);
			if (k)
				m->num_classes = k;
		} else if (!strcmp(key, "labels_getter")) {
			if (strcmp(v.text, "default"))
				fail(c, "%s: labels_getter %s is not built (only \"default\": the batch's labels)",
				     name, v.text);
		} else {
			fail(c, "%s: unknown parameter %s", name, key);
		}
	} while (!c->failed && eat(c, ','));
	if (!c->failed && !eat(c, ')'))
		fail(c, "%s: expected ')' near '%.20s'", name, c->s);
}

static void timm_op(struct cursor *c, struct batchmix *m)
{
	const char *op = "timm.Mixup";
	char key[32];
	struct value v;

	m->family = BATCHMIX_TIMM;
	/* timm's defaults */
	m->mixup_alpha = 1.0;
	m->cutmix_alpha = 0.0;
	m->prob = 1.0;
	m->switch_prob = 0.5;
	m->mode = BATCHMIX_MODE_BATCH;
	m->correct_lam = true;
	m->label_smoothing = 0.1;
	m->num_classes = 1000;
	if (!eat(c, ')')) {
		do {
			if (!word(c, key, sizeof(key)) || !eat(c, '=') || !value(c, &v)) {
				fail(c, "%s: malformed parameter near '%.20s'", op, c->s);
				return;
			}
			if (!strcmp(key, "mixup_alpha")) {
				m->mixup_alpha = num_param(c, op, key, &v, 0, false, 1e6);
			} else if (!strcmp(key, "cutmix_alpha")) {
				m->cutmix_alpha = num_param(c, op, key, &v, 0, false, 1e6);
			} else if (!strcmp(key, "cutmix_minmax")) {
				if (is_none(&v))
					continue;
				if (v.n != 2 || !(v.v[0] > 0) || !(v.v[0] < v.v[1]) || !(v.v[1] <= 1))
					fail(c, "%s: cutmix_minmax must be None or (min, max) with 0 < min < max <= 1",
					     op);
				m->minmax[0] = v.v[0];
				m->minmax[1] = v.v[1];
				m->has_minmax = true;
			} else if (!strcmp(key, "prob")) {
				m->prob = num_param(c, op, key, &v, 0, false, 1);
			} else if (!strcmp(key, "switch_prob")) {
				m->switch_prob = num_param(c, op, key, &v, 0, false, 1);
			} else if (!strcmp(key, "mode")) {
				if (!strcmp(v.text, "batch"))
					m->mode = BATCHMIX_MODE_BATCH;
				else if (!strcmp(v.text, "pair"))
					m->mode = BATCHMIX_MODE_PAIR;
				else if (!strcmp(v.text, "elem"))
					m->mode = BATCHMIX_MODE_ELEM;
				else
					fail(c, "%s: mode must be batch, pair or elem, not '%s'", op, v.text);
			} else if (!strcmp(key, "correct_lam")) {
				m->correct_lam = bool_param(c, op, key, &v);
			} else if (!strcmp(key, "label_smoothing")) {
				m->label_smoothing = num_param(c, op, key, &v, 0, false, 1);
			} else if (!strcmp(key, "num_classes")) {
				m->num_classes = classes_param(c, op, &v);
			} else if (!strcmp(key, "multi_label")) {
				if (bool_param(c, op, key, &v))
					fail(c, "%s: multi_label=True is not built (dense targets in, not labels)", op);
			} else {
				fail(c, "%s: unknown parameter %s", op, key);
			}
		} while (!c->failed && eat(c, ','));
		if (!c->failed && !eat(c, ')'))
			fail(c, "%s: expected ')' near '%.20s'", op, c->s);
	}
	/* timm forces cutmix_alpha 1 when cutmix_minmax is set. */
	if (m->has_minmax)
		m->cutmix_alpha = 1.0;
	if (!c->failed && !(m->mixup_alpha > 0) && !(m->cutmix_alpha > 0))
		fail(c, "%s: mixup_alpha or cutmix_alpha (or cutmix_minmax) must be > 0", op);
}

int batchmix_parse(const char *text, struct batchmix *out, char *err, size_t errlen)
{
	struct cursor c = {text ? text : "", err, errlen, 0};
	struct batchmix m;
	char name[32];

	memset(&m, 0, sizeof(m));
	if (text && strlen(text) > BATCHMIX_MAX_TEXT) {
		snprintf(err, errlen, "batch_transform is over %d bytes", BATCHMIX_MAX_TEXT);
		return -EINVAL;
	}
	if (!word(&c, name, sizeof(name)) || !eat(&c, '(')) {
		fail(&c, "batch_transform: expected MixUp(...), CutMix(...), RandomChoice(...) or timm.Mixup(...)");
	} else if (!strcmp(name, "MixUp") || !strcmp(name, "CutMix")) {
		m.family = BATCHMIX_TORCHVISION;
		m.n = 1;
		m.p[0] = 1;
		tv_op(&c, name, &m, 0);
	} else if (!strcmp(name, "RandomChoice")) {
		bool have_p = false;
		double sum = 0;

		m.family = BATCHMIX_TORCHVISION;
		do {
			char sub[32];
			const char *at = c.s;
			struct value v;

			if (!word(&c, sub, sizeof(sub))) {
				fail(&c, "RandomChoice: malformed argument near '%.20s'", c.s);
			} else if (!strcmp(sub, "p") && eat(&c, '=')) {
				if (!value(&c, &v) || !v.tuple)
					fail(&c, "RandomChoice: p must be a tuple of probabilities");
				for (size_t i = 0; !c.failed && i < v.n; i++)
					if (!(v.v[i] >= 0) || !isfinite(v.v[i]))
						fail(&c, "RandomChoice: p[%zu] must be >= 0", i);
				for (size_t i = 0; !c.failed && i < v.n; i++) {
					m.p[i] = v.v[i];
					sum += v.v[i];
				}
				have_p = true;
				if (!c.failed && v.n != m.n)
					fail(&c, "RandomChoice: p has %zu values for %u transforms", v.n, m.n);
			} else if ((!strcmp(sub, "MixUp") || !strcmp(sub, "CutMix")) && eat(&c, '(')) {
				if (m.n == BATCHMIX_MAX_CHOICES || have_p)
					fail(&c, "RandomChoice: at most %d transforms, before p", BATCHMIX_MAX_CHOICES);
				else
					tv_op(&c, sub, &m, m.n++);
			} else {
				fail(&c, "RandomChoice: %s is not a batch op (MixUp or CutMix)", sub);
				(void)at;
			}
		} while (!c.failed && eat(&c, ','));
		if (!c.failed && !eat(&c, ')'))
			fail(&c, "RandomChoice: expected ')' near '%.20s'", c.s);
		if (!c.failed && m.n == 0)
			fail(&c, "RandomChoice: no transforms");
		if (!c.failed && have_p && !(sum > 0))
			fail(&c, "RandomChoice: p sums to 0");
		for (uint32_t i = 0; !c.failed && i < m.n; i++)
			m.p[i] = have_p ? m.p[i] / sum : 1.0 / m.n;
	} else if (!strcmp(name, "timm.Mixup")) {
		timm_op(&c, &m);
	} else {
		fail(&c, "%s is not a batch op (MixUp, CutMix, RandomChoice, timm.Mixup)", name);
	}
	skip(&c);
	if (!c.failed && *c.s)
		fail(&c, "batch_transform: unexpected '%.20s' after the op", c.s);
	if (c.failed)
		return -EINVAL;
	*out = m;
	return 0;
}

bool batchmix_equal(const struct batchmix *a, const struct batchmix *b)
{
	return !memcmp(a, b, sizeof(*a)); /* parsed from a zeroed struct: no padding garbage */
}

int batchmix_check(const struct batchmix *m, uint32_t batch_size, uint32_t width, uint32_t height,
		   uint32_t dataset_classes, enum sample_dtype dtype, char *err, size_t errlen)
{
	uint32_t classes = batchmix_classes(m, dataset_classes);

	if (classes == 0 || classes > BATCHMIX_MAX_CLASSES) {
		snprintf(err, errlen, "batch_transform: num_classes %u is not in 1..%u", classes, BATCHMIX_MAX_CLASSES);
		return -EINVAL;
	}
	if (classes < dataset_classes) {
		snprintf(err, errlen, "batch_transform: num_classes %u is below the data set's %u classes", classes,
			 dataset_classes);
		return -EINVAL;
	}
	if (m->family == BATCHMIX_TIMM && batch_size % 2) {
		snprintf(err, errlen, "timm.Mixup: batch_size %u is odd (timm asserts an even batch)", batch_size);
		return -EINVAL;
	}
	if (m->family == BATCHMIX_TIMM && m->has_minmax &&
	    ((int)(height * m->minmax[0]) >= (int)(height * m->minmax[1]) ||
	     (int)(width * m->minmax[0]) >= (int)(width * m->minmax[1]))) {
		snprintf(err, errlen, "timm.Mixup: cutmix_minmax (%g, %g) gives no box on %ux%u images", m->minmax[0],
			 m->minmax[1], width, height);
		return -EINVAL;
	}
#ifndef __FLT16_MAX__
	if (dtype == DTYPE_FLOAT16) {
		snprintf(err, errlen, "batch_transform: float16 output is not built on this compiler");
		return -EINVAL;
	}
#endif
	return 0;
}

/* ---- draws ---- */

/* Uniform in (0, 1]. */
static double uniform_open0(struct rng *r)
{
	return 1.0 - rng_uniform(r);
}

static double normal(struct rng *r)
{
	double u = uniform_open0(r), v = rng_uniform(r);

	return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* log of a Gamma(a, 1) variate (Marsaglia and Tsang; a < 1 boosted by
 * U^(1/a)), in logs so tiny shapes do not underflow. */
static double log_gamma_variate(struct rng *r, double a)
{
	double boost = 0, d, c;

	if (a < 1) {
		boost = log(uniform_open0(r)) / a;
		a += 1;
	}
	d = a - 1.0 / 3.0;
	c = 1.0 / sqrt(9.0 * d);
	for (;;) {
		double x = normal(r), v = 1 + c * x, u;

		if (v <= 0)
			continue;
		v = v * v * v;
		u = uniform_open0(r);
		if (u < 1 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1 - v + log(v)))
			return log(d * v) + boost;
	}
}

double batchmix_beta(struct rng *r, double a, double b)
{
	double x = log_gamma_variate(r, a), y = log_gamma_variate(r, b);

	/* x / (x + y) from logs */
	return 1.0 / (1.0 + exp(y - x));
}

/* torch.distributions.Beta's sample: float32, clamped into
 * [FLT_MIN, 1 - 2^-24] (a value that rounds to 1 is the float below it). */
static double torch_beta(struct rng *r, double a)
{
	float f = (float)batchmix_beta(r, a, a);

	if (f >= 1.0f)
		f = nextafterf(1.0f, 0.0f);
	if (f < FLT_MIN)
		f = FLT_MIN;
	return f;
}

static int32_t clampi(int64_t v, int64_t lo, int64_t hi)
{
	return (int32_t)(v < lo ? lo : v > hi ? hi : v);
}

/* torchvision v2 CutMix._get_params' box, and its lambda. */
static void tv_box(struct rng *r, double lam, uint32_t w, uint32_t h, struct batchmix_rec *o)
{
	int64_t rx = (int64_t)rng_below(r, w), ry = (int64_t)rng_below(r, h);
	double rr = 0.5 * sqrt(1.0 - lam);
	int64_t rw = (int64_t)(rr * w), rh = (int64_t)(rr * h);

	o->x1 = clampi(rx - rw, 0, INT32_MAX);
	o->y1 = clampi(ry - rh, 0, INT32_MAX);
	o->x2 = clampi(rx + rw, INT32_MIN, w);
	o->y2 = clampi(ry + rh, INT32_MIN, h);
	o->lam = 1.0 - (double)((int64_t)(o->x2 - o->x1) * (o->y2 - o->y1)) / ((double)w * h);
}

/* numpy's randint(lo, hi): uniform in [lo, hi). */
static int64_t randint(struct rng *r, int64_t lo, int64_t hi)
{
	return lo + (int64_t)rng_below(r, (uint64_t)(hi - lo));
}

/* timm's cutmix_bbox_and_lam: rand_bbox or rand_bbox_minmax, then the
 * corrected lambda. */
static void timm_box(const struct batchmix *m, struct rng *r, double lam, uint32_t w, uint32_t h,
		     struct batchmix_rec *o)
{
	int64_t yl, yh, xl, xh;

	if (m->has_minmax) {
		int64_t ch = randint(r, (int64_t)(h * m->minmax[0]), (int64_t)(h * m->minmax[1]));
		int64_t cw = randint(r, (int64_t)(w * m->minmax[0]), (int64_t)(w * m->minmax[1]));

		yl = randint(r, 0, (int64_t)h - ch + 1);
		xl = randint(r, 0, (int64_t)w - cw + 1);
		yh = yl + ch;
		xh = xl + cw;
	} else {
		double ratio = sqrt(1 - lam);
		int64_t ch = (int64_t)(h * ratio), cw = (int64_t)(w * ratio);
		int64_t cy = randint(r, 0, h), cx = randint(r, 0, w);

		/* numpy's // on non-negative ints */
		yl = clampi(cy - ch / 2, 0, h);
		yh = clampi(cy + (ch + 1) / 2, 0, h);
		xl = clampi(cx - cw / 2, 0, w);
		xh = clampi(cx + (cw + 1) / 2, 0, w);
	}
	o->x1 = (int32_t)xl;
	o->x2 = (int32_t)xh;
	o->y1 = (int32_t)yl;
	o->y2 = (int32_t)yh;
	o->lam = lam;
	if (m->correct_lam || m->has_minmax)
		o->lam = 1.0 - (double)((yh - yl) * (xh - xl)) / (double)((int64_t)h * w);
}

/* timm's per-batch or per-element draw: (lam, use_cutmix). */
static void timm_params(const struct batchmix *m, struct rng *r, double *lam, bool *cut)
{
	double l = 1.0;

	*cut = false;
	if (rng_uniform(r) < m->prob) {
		if (m->mixup_alpha > 0 && m->cutmix_alpha > 0) {
			*cut = rng_uniform(r) < m->switch_prob;
			l = *cut ? batchmix_beta(r, m->cutmix_alpha, m->cutmix_alpha)
				 : batchmix_beta(r, m->mixup_alpha, m->mixup_alpha);
		} else if (m->mixup_alpha > 0) {
			l = batchmix_beta(r, m->mixup_alpha, m->mixup_alpha);
		} else {
			*cut = true;
			l = batchmix_beta(r, m->cutmix_alpha, m->cutmix_alpha);
		}
	}
	*lam = l;
}

void batchmix_draw(const struct batchmix *m, struct rng *r, uint32_t count, uint32_t w, uint32_t h,
		   struct batchmix_rec *recs)
{
	memset(recs, 0, (size_t)count * sizeof(*recs));
	if (count == 0)
		return;
	if (m->family == BATCHMIX_TORCHVISION) {
		struct batchmix_rec one = {0};
		double u = m->n > 1 ? rng_uniform(r) : 0, acc = 0;
		uint32_t k = 0;

		/* torch.multinomial(p, 1) */
		for (k = 0; k + 1 < m->n; k++) {
			acc += m->p[k];
			if (u < acc)
				break;
		}
		one.lam_drawn = torch_beta(r, m->alpha[k]);
		one.lam = one.lam_drawn;
		one.kind = (int32_t)m->kind[k];
		if (m->kind[k] == BATCHMIX_CUTMIX)
			tv_box(r, one.lam_drawn, w, h, &one);
		for (uint32_t i = 0; i < count; i++) {
			recs[i] = one;
			recs[i].partner = (int32_t)(i ? i - 1 : count - 1);
		}
		return;
	}
	if (m->mode == BATCHMIX_MODE_BATCH) {
		struct batchmix_rec one = {0};
		bool cut;

		timm_params(m, r, &one.lam_drawn, &cut);
		one.lam = one.lam_drawn;
		if (one.lam != 1.0) {
			one.kind = cut ? BATCHMIX_CUTMIX : BATCHMIX_MIXUP;
			if (cut)
				timm_box(m, r, one.lam_drawn, w, h, &one);
		}
		for (uint32_t i = 0; i < count; i++) {
			recs[i] = one;
			recs[i].partner = (int32_t)(count - 1 - i);
		}
		return;
	}
	/* elem: each sample; pair: the first half, mirrored */
	for (uint32_t i = 0; i < (m->mode == BATCHMIX_MODE_PAIR ? count / 2 : count); i++) {
		struct batchmix_rec *o = &recs[i];
		bool cut;
		double l;

		timm_params(m, r, &l, &cut);
		/* lam_batch is a float32 array */
		o->lam_drawn = o->lam = (double)(float)l;
		o->partner = (int32_t)(count - 1 - i);
		if (o->lam != 1.0) {
			o->kind = cut ? BATCHMIX_CUTMIX : BATCHMIX_MIXUP;
			if (cut) {
				timm_box(m, r, o->lam_drawn, w, h, o);
				o->lam = (double)(float)o->lam;
			}
		}
		if (m->mode == BATCHMIX_MODE_PAIR) {
			recs[count - 1 - i] = *o;
			recs[count - 1 - i].partner = (int32_t)i;
		}
	}
	if (m->mode == BATCHMIX_MODE_PAIR && count % 2) {
		/* the middle one of an odd (last) batch stays itself */
		recs[count / 2] = (struct batchmix_rec){.lam = 1, .lam_drawn = 1, .partner = (int32_t)(count / 2)};
	}
}

/* ---- mixing ---- */

#ifdef __FLT16_MAX__
typedef _Float16 half_t;
#endif

/* As color.c: gcc vectorises these plain restrict loops at -O2 when asked
 * (the same IEEE single-precision operations in the same order, so the
 * results are unchanged); other compilers get plain loops. */
#if defined(__GNUC__) && !defined(__clang__)
#define VECTORIZE __attribute__((optimize("tree-loop-vectorize", "vect-cost-model=dynamic")))
#else
#define VECTORIZE
#endif

/* The x86 builds also compile the float32 and uint8 loops for AVX2 (without
 * FMA: the same multiplies and adds, so the same bits), chosen at run time. */
#if BATCHMIX_X86
#define AVX2 __attribute__((target("avx2")))
#endif

/* dst = dst * lam + src * (1 - lam), as torch computes it in float32 (each
 * product rounded, then the sum), over n elements. */
#define MIX_F32_LOOP                                     \
	for (size_t i = 0; i < n; i++) {                 \
		float a = dst[i] * lam, b = src[i] * om; \
                                                         \
		dst[i] = a + b;                          \
	}

/* The sum rounded to nearest, ties to even (np.rint), by the 1.5 * 2^23
 * addition (exact for |v| < 2^22, in the default rounding mode): no libm
 * call, so the loop vectorises. Products of levels and lambdas in [0, 1]
 * stay in [0, 255]; lam + (1 - lam) rounds to at most 1 + 2^-24. */
#define MIX_U8_LOOP                                                                                 \
	const float magic = 12582912.0f;                                                            \
                                                                                                    \
	for (size_t i = 0; i < n; i++) {                                                            \
		float a = (float)dst[i] * lam, b = (float)src[i] * om, v = (a + b + magic) - magic; \
                                                                                                    \
		dst[i] = (uint8_t)(int32_t)v;                                                       \
	}

VECTORIZE static void mix_f32_base(float *restrict dst, const float *restrict src, size_t n, float lam,
				   float om){MIX_F32_LOOP}

VECTORIZE static void mix_u8_base(uint8_t *restrict dst, const uint8_t *restrict src, size_t n, float lam,
				  float om){MIX_U8_LOOP}

#if BATCHMIX_X86
VECTORIZE AVX2 static void mix_f32_avx2(float *restrict dst, const float *restrict src, size_t n, float lam,
					float om){MIX_F32_LOOP}

VECTORIZE AVX2
	static void mix_u8_avx2(uint8_t *restrict dst, const uint8_t *restrict src, size_t n, float lam, float om)
{
	MIX_U8_LOOP
}
#endif

#ifdef __FLT16_MAX__
/* The portable float16 mix: the compiler's half conversions (software ones
 * where the target has no half instructions: slow, ~50 ns an element). */
static void mix_f16_scalar(half_t *restrict dst, const half_t *restrict src, size_t n, float lam, float om)
{
	for (size_t i = 0; i < n; i++) {
		half_t a = (half_t)((float)dst[i] * lam), b = (half_t)((float)src[i] * om);

		dst[i] = (half_t)((float)a + (float)b);
	}
}
#endif

#if BATCHMIX_X86
/*
 * The same with F16C's conversions, 8 elements a step: half to float is
 * exact, float to half rounds to nearest, ties to even (the immediate
 * rounding mode, MXCSR not consulted), as the compiler's conversions do, and
 * the float products and sum are the same IEEE operations: identical bits
 * (tests/unit/test_batchmix.c compares the two over every finite half). The
 * tail goes through an 8-element buffer.
 */
#ifdef __FLT16_MAX__ /* only mix_f16 calls it */
__attribute__((target("avx,f16c"))) static void mix_f16_f16c(uint16_t *restrict dst, const uint16_t *restrict src,
							     size_t n, float lam, float om)
{
	const __m256 l = _mm256_set1_ps(lam), o = _mm256_set1_ps(om);
	uint16_t td[8] = {0}, ts[8] = {0};
	size_t i = 0;

	for (;;) {
		uint16_t *d = dst + i;
		const uint16_t *s = src + i;
		size_t left = n - i;

		if (left == 0)
			break;
		if (left < 8) {
			memcpy(td, d, left * 2);
			memcpy(ts, s, left * 2);
			d = td;
			s = ts;
		}
		__m256 a = _mm256_cvtph_ps(
			_mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d)), l),
					_MM_FROUND_TO_NEAREST_INT));
		__m256 b = _mm256_cvtph_ps(
			_mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)s)), o),
					_MM_FROUND_TO_NEAREST_INT));

		_mm_storeu_si128((__m128i *)d, _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT));
		if (left < 8) {
			memcpy(dst + i, td, left * 2);
			break;
		}
		i += 8;
	}
}
#endif /* __FLT16_MAX__ */
#endif

/* Test hook (tests/unit/test_batchmix.c; not the daemon's interface):
 * 0 the run-time choice, 1 the portable loops, 2 the x86 ones (AVX2 for
 * float32 and uint8, F16C for float16; -ENOTSUP where the CPU lacks
 * either). Not thread safe against a running mix. */
int batchmix_force_isa(int isa);

static int forced_isa;

static bool x86_runs(void)
{
#if BATCHMIX_X86
	unsigned a, b, c, d;

	/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports
	 * does not know "f16c" */
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
#else
	return false;
#endif
}

int batchmix_force_isa(int isa)
{
	if (isa < 0 || isa > 2 || (isa == 2 && !x86_runs()))
		return -ENOTSUP;
	forced_isa = isa;
	return 0;
}

static bool use_x86(void)
{
	return forced_isa == 2 || (forced_isa == 0 && x86_runs());
}

static void mix_f32(float *dst, const float *src, size_t n, float lam, float om)
{
#if BATCHMIX_X86
	if (use_x86()) {
		mix_f32_avx2(dst, src, n, lam, om);
		return;
	}
#endif
	mix_f32_base(dst, src, n, lam, om);
}

static void mix_u8(uint8_t *dst, const uint8_t *src, size_t n, float lam, float om)
{
#if BATCHMIX_X86
	if (use_x86()) {
		mix_u8_avx2(dst, src, n, lam, om);
		return;
	}
#endif
	mix_u8_base(dst, src, n, lam, om);
}

#ifdef __FLT16_MAX__
static void mix_f16(half_t *dst, const half_t *src, size_t n, float lam, float om)
{
#if BATCHMIX_X86
	if (use_x86()) {
		mix_f16_f16c((uint16_t *)dst, (const uint16_t *)src, n, lam, om);
		return;
	}
#endif
	mix_f16_scalar(dst, src, n, lam, om);
}
#endif

/* Mix image `dst` with `src` (its partner's original) as rec says. */
static void mix_image(const struct batchmix_rec *rec, uint8_t *dst, const uint8_t *src, enum sample_dtype dtype,
		      uint32_t w, uint32_t h)
{
	size_t es = sample_dtype_bytes(dtype), n = (size_t)w * h * 3;
	float lam = (float)rec->lam, om = (float)(1.0 - rec->lam);

	if (rec->kind == BATCHMIX_MIXUP) {
		if (dtype == DTYPE_UINT8)
			mix_u8(dst, src, n, lam, om);
		else if (dtype == DTYPE_FLOAT32)
			mix_f32((float *)dst, (const float *)src, n, lam, om);
#ifdef __FLT16_MAX__
		else
			mix_f16((half_t *)dst, (const half_t *)src, n, lam, om);
#endif
		return;
	}
	if (rec->kind != BATCHMIX_CUTMIX || rec->x2 <= rec->x1 || rec->y2 <= rec->y1)
		return;
	if (dtype == DTYPE_UINT8) {
		/* HWC: the box's rows, 3 bytes a pixel */
		for (int32_t y = rec->y1; y < rec->y2; y++) {
			size_t off = ((size_t)y * w + (size_t)rec->x1) * 3;

			memcpy(dst + off, src + off, (size_t)(rec->x2 - rec->x1) * 3);
		}
		return;
	}
	/* CHW planes */
	for (int c = 0; c < 3; c++)
		for (int32_t y = rec->y1; y < rec->y2; y++) {
			size_t off = (((size_t)c * h + (size_t)y) * w + (size_t)rec->x1) * es;

			memcpy(dst + off, src + off, (size_t)(rec->x2 - rec->x1) * es);
		}
}

static void soft_targets(const struct batchmix *m, const struct batchmix_rec *recs, uint32_t count,
			 const int64_t *labels, uint32_t classes, float *soft)
{
	double smooth = m->family == BATCHMIX_TIMM ? m->label_smoothing : 0;
	/* timm's one_hot(on_value, off_value) in float32 */
	float off = (float)(smooth / classes), on = (float)(1.0 - smooth + smooth / classes);

	for (uint32_t i = 0; i < count; i++) {
		const struct batchmix_rec *r = &recs[i];
		float lam = (float)r->lam, om = (float)(1.0 - r->lam);
		int64_t a = labels[i], b = labels[r->partner];
		float *row = soft + (size_t)i * classes;
		/* y1 * lam + y2 * (1 - lam), each of y1, y2 on or off */
		float oo = off * lam + off * om;

		for (uint32_t k = 0; k < classes; k++)
			row[k] = oo;
		if (a >= 0 && a < classes && a == b) {
			row[a] = on * lam + on * om;
		} else {
			if (a >= 0 && a < classes)
				row[a] = on * lam + off * om;
			if (b >= 0 && b < classes)
				row[b] = off * lam + on * om;
		}
	}
}

void batchmix_apply(const struct batchmix *m, const struct batchmix_rec *recs, uint32_t count, void *images,
		    enum sample_dtype dtype, uint32_t w, uint32_t h, const int64_t *labels, uint32_t classes,
		    float *soft, void *scratch)
{
	size_t bytes = (size_t)w * h * 3 * sample_dtype_bytes(dtype);
	uint8_t *img = images;

	if (count == 0)
		return;
	soft_targets(m, recs, count, labels, classes, soft);
	if (m->family == BATCHMIX_TORCHVISION) {
		/* partner i - 1: from the last down, image count-1's original kept */
		memcpy(scratch, img + (size_t)(count - 1) * bytes, bytes);
		for (uint32_t i = count - 1; i > 0; i--)
			mix_image(&recs[i], img + (size_t)i * bytes, img + (size_t)(i - 1) * bytes, dtype, w, h);
		mix_image(&recs[0], img, scratch, dtype, w, h);
		return;
	}
	/* timm: partner count - 1 - i; each pair from its originals */
	for (uint32_t i = 0; i < count / 2; i++) {
		uint32_t j = count - 1 - i;

		memcpy(scratch, img + (size_t)i * bytes, bytes);
		mix_image(&recs[i], img + (size_t)i * bytes, img + (size_t)j * bytes, dtype, w, h);
		mix_image(&recs[j], img + (size_t)j * bytes, scratch, dtype, w, h);
	}
	if (count % 2) {
		uint32_t i = count / 2;

		memcpy(scratch, img + (size_t)i * bytes, bytes);
		mix_image(&recs[i], img + (size_t)i * bytes, scratch, dtype, w, h);
	}
}
