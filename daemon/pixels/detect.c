/* SPDX-License-Identifier: MIT */
/*
 * Ultralytics' YOLO training transforms (ultralytics/data/augment.py, 8.4):
 * LetterBox, Mosaic._mosaic4, RandomPerspective, MixUp, RandomHSV and
 * RandomFlip, in v8_transforms' order, with Philox draws instead of
 * Python's and numpy's generators.
 *
 * Draw order of DETECT_TRAIN. Every draw is always made, whatever the
 * parameters, so that changing one parameter (say hsv_h from 0 to 0.015)
 * changes nothing else a sample draws:
 *
 *   image 1:  mosaic u; 3 partner indices; yc, xc;
 *             perspective x, y; angle; scale; shear x, y; translate x, y
 *   mixup u; mixup partner index
 *   image 2:  the same 14 draws as image 1
 *   HSV gains h, s, v
 *   flipud u; fliplr u
 *   Beta(32, 32), only when mixup applies: last, because its rejection
 *   sampler takes a variable number of draws.
 *
 * CutMix draws from a stream of its own (rng_fork of the sample's, so that
 * cutmix changes no other draw): cutmix u; partner index; the partner's 14
 * image draws; 3 areas' Beta(1, 1) (a uniform), cx, cy; the area choice.
 * CopyPaste's mode mixup too (RNG_COPYPASTE): for image 1, then the mixup's,
 * its u, partner index and the partner's 14 image draws. Its flip mode
 * draws nothing.
 *
 * All draws are made before any pixel is touched. Vertical and horizontal
 * flips are folded into the producers (warp, letterbox copy): MixUp and HSV
 * are per pixel, so flipping first and flipping last give the same bytes.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "copypaste.h"
#include "detect.h"
#include "grow.h"
#include "instgeom.h"
#include "instmask.h"
#include "resize.h"

/*
 * The HSV pass and the separable warp's blends have AVX2 kernels, the warp
 * an AVX-512 one too, picked at detect_new() by resize.c's rule
 * (resize_default_isa: AVX-512 where the CPU runs 512-bit work without
 * slowing its clock, or STOKER_RESIZE_ISA asks; else AVX2 where the CPU has
 * it). The AVX-512 kernel needs AVX512VBMI too (a byte permute packs RGB);
 * without it AVX2 runs. HSV stays on AVX2 there (hsv16_avx2, 16-bit lanes):
 * 512-bit ports of it (32-bit lanes; 16-bit lanes with zmm divisions or
 * with vpermt2w table lookups) all measured slower (docs/performance.md). They
 * do the portable code's integer arithmetic (divisions and tables replaced
 * by exact stand-ins, checked over every input they see), so the bytes do
 * not depend on the CPU. The portable code finishes what a kernel leaves
 * (row ends, the last pixels).
 */
#if defined(__x86_64__) && defined(__GNUC__)
#define DETECT_X86 1
#include <immintrin.h>
#define TARGET_AVX2 __attribute__((target("avx2")))
#define INLINE_AVX2 static inline __attribute__((always_inline, target("avx2")))
#define TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512vbmi")))
#else
#define DETECT_X86 0
#endif

/* detect_force_isa()'s choices */
#define ISA_AUTO 0
#define ISA_SCALAR 1
#define ISA_AVX2 2
#define ISA_AVX512 3

#define PAD DETECT_PAD
/* Partners tried (the drawn one, then the next indices) before giving up. */
#define PARTNER_TRIES 16u

/* A box in pixels, corners (x1, y1) (x2, y2). */
struct dbox {
	float cls, x1, y1, x2, y2;
	uint32_t src; /* the object's index in its sample (letterbox's rows_src) */
};

/* CutMix's boxes as instgeom sets (its geometry is instgeom's, one piece of
 * code for every task): rows of detect's box sets packed into `box` (4
 * floats each) and `cls` (5 floats of room a box). */
struct cutmix_sets {
	struct instgeom_set mine, theirs; /* the image's boxes (both sets), the partner's */
	float *floats;
	size_t floats_cap;
	uint32_t *idx; /* the partner's kept boxes */
	size_t idx_cap;
};

/* One image's instances (detect_output.inst) and the floats behind them. */
struct inst_buf {
	struct instgeom_set s;
	float *mem;
	size_t cap;
};

struct detect {
	uint8_t *canvas; /* the 2size x 2size mosaic */
	size_t canvas_cap;
	uint8_t *mix; /* the second image of a mixup */
	size_t mix_cap;
	uint8_t *cut; /* the third image, of a CutMix */
	size_t cut_cap;
	struct cutmix_sets cutmix;
	struct dbox *boxes[3]; /* boxes of image 1, the mixup's and the CutMix's */
	size_t boxes_cap[3];
	void *warp; /* warp_separable's column tables and rows */
	size_t warp_cap;
	/* OpenCV's RGB2HSV_b division tables (hsv_shift 12) */
	int sdiv[256], hdiv[256];
	bool avx2;      /* the AVX2 kernels */
	bool avx512;    /* the AVX-512 warp kernel (avx2 set too: HSV runs on AVX2) */
	uint64_t *prof; /* detect_profile()'s counters, or NULL */
	/* detect_output.inst: the mosaic's tiles, image 1's, the mixup's and
	 * the third image's instances (inst[2]: CopyPaste's mode mixup partner,
	 * then CutMix's), the sample's (out; mixed: CutMix's second buffer), and
	 * instgeom's scratch */
	struct inst_buf tile[4], inst[3], out, mixed;
	/* CopyPaste: its pixels (made at first use), the instances with the
	 * pasted ones appended, its choice and instgeom's scratch for it */
	struct copypaste *cp;
	struct inst_buf cpbuf;
	uint32_t *cpsel;
	size_t cpsel_cap;
	float *iscratch;
	size_t iscratch_cap;
	float *fmt; /* Format's boxes of the written rows */
	size_t fmt_cap;
};

/* The random choices of one image (mosaic + affine). */
struct image_draw {
	bool mosaic;
	uint64_t partner[3];
	int64_t xc, yc;
	double persp_x, persp_y, angle, scale, shear_x, shear_y, trans_x, trans_y;
};

struct plan {
	struct image_draw img[2];
	bool mixup;
	uint64_t mix_index;
	double gain[3]; /* HSV gains, already times hsv_h, hsv_s, hsv_v */
	bool flipud, fliplr;
	double beta;
};

/* CutMix's choices (Ultralytics' CutMix, num_areas 3, Beta(1, 1)). */
#define CUTMIX_AREAS 3
struct cutmix_draw {
	bool apply;
	uint64_t index; /* the partner, made as image 1 is (mosaic + affine) */
	struct image_draw img;
	double lam[CUTMIX_AREAS];
	int64_t cx[CUTMIX_AREAS], cy[CUTMIX_AREAS];
	double choice; /* which of the areas that cover no box: np.random.choice */
};

/* CopyPaste(mode="mixup")'s choices for image 1 and the MixUp partner: its
 * BaseMixTransform u, its partner, made as image 1 is (mosaic + affine). */
struct cp_draw {
	bool apply;
	uint64_t index;
	struct image_draw img;
};

/*
 * A mosaic canvas made a row at a time, for the separable warp: each
 * quadrant's sample and where it lands, and two rows of columns [x0, x1)
 * (in d->canvas, which this mode does not otherwise use), the canvas rows
 * row_y[] (-1: none yet).
 */
struct lazy_canvas {
	struct {
		const uint8_t *pix;
		size_t stride;
		int64_t x1a, y1a, x2a, y2a, x1b, y1b;
	} q[4];
	int64_t yc, x0, x1;
	uint8_t *rows;
	int64_t row_y[2];
};

/* Where a source image sits in the warp's input plane; outside it is PAD. */
struct source {
	const uint8_t *pix;
	size_t stride;
	int w, h;
	int ox, oy;
	struct lazy_canvas *lazy; /* else NULL: pix holds the rows */
};

void detect_params_default(struct detect_params *p)
{
	*p = (struct detect_params){
		.hsv_h = 0.015f,
		.hsv_s = 0.7f,
		.hsv_v = 0.4f,
		.degrees = 0.0f,
		.translate = 0.1f,
		.scale = 0.5f,
		.shear = 0.0f,
		.perspective = 0.0f,
		.flipud = 0.0f,
		.fliplr = 0.5f,
		.mosaic = 1.0f,
		.mixup = 0.0f,
		.cutmix = 0.0f,
	};
}

int detect_params_check(const struct detect_params *p, char *why, size_t whylen)
{
	/* hi_open: the upper bound is excluded. NaN fails every comparison. */
	const struct {
		const char *key;
		float v, lo, hi;
		bool hi_open;
	} k[] = {
		{"hsv_h", p->hsv_h, 0, 1, false},
		{"hsv_s", p->hsv_s, 0, 1, false},
		{"hsv_v", p->hsv_v, 0, 1, false},
		{"degrees", p->degrees, 0, 180, false},
		/* a scale of 1 could draw 0: a degenerate matrix */
		{"translate", p->translate, 0, 1, true},
		{"scale", p->scale, 0, 1, true},
		/* tan(90) is infinite */
		{"shear", p->shear, 0, 90, true},
		{"perspective", p->perspective, 0, 0.1f, false},
		{"flipud", p->flipud, 0, 1, false},
		{"fliplr", p->fliplr, 0, 1, false},
		{"mosaic", p->mosaic, 0, 1, false},
		{"mixup", p->mixup, 0, 1, false},
		{"cutmix", p->cutmix, 0, 1, false},
	};

	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
		bool ok = k[i].v >= k[i].lo && (k[i].hi_open ? k[i].v < k[i].hi : k[i].v <= k[i].hi);

		if (!ok) {
			if (why && whylen)
				snprintf(why, whylen, "%s must be in [%g, %g%s, not %g", k[i].key, (double)k[i].lo,
					 (double)k[i].hi, k[i].hi_open ? ")" : "]", (double)k[i].v);
			return -EINVAL;
		}
	}
	if (!(p->copy_paste >= 0 && p->copy_paste <= 1)) {
		if (why && whylen)
			snprintf(why, whylen, "copy_paste must be in [0, 1], not %g", p->copy_paste);
		return -EINVAL;
	}
	if (p->copy_paste_mode != DETECT_COPY_PASTE_FLIP && p->copy_paste_mode != DETECT_COPY_PASTE_MIXUP) {
		if (why && whylen)
			snprintf(why, whylen, "copy_paste_mode must be flip or mixup");
		return -EINVAL;
	}
	return 0;
}

/*
 * Test hooks, declared here and by the unit test (not the daemon's
 * interface, so not in detect.h). detect_force_isa: detects created from
 * now on use the portable code (ISA_SCALAR), the AVX2 kernels (ISA_AVX2) or
 * the AVX-512 ones (ISA_AVX512); ISA_AUTO restores the default. -ENOTSUP where the CPU cannot run them; not
 * thread safe against a concurrent detect_new(). detect_check_arith: see
 * its definition. detect_hsv_kernel: RandomHSV with these gains on packed
 * RGB pixels by the portable code (kernel 0), the 32-bit AVX2 kernel (1)
 * or the 16-bit one (2), the portable code finishing; -ENOTSUP where the
 * kernel cannot run (no AVX2, or gains hsv_arith cannot express).
 */
int detect_force_isa(int isa);
long detect_check_arith(void);
int detect_hsv_kernel(int kernel, const double gain[3], uint8_t *image, size_t pixels);
int detect_cutmix_geometry(uint32_t size, const double lam[3], const int64_t cx[3], const int64_t cy[3], double choice,
			   const float *boxes, size_t n, float *partner, size_t *n_partner, float area[4]);

int detect_plan_draws(const struct detect_params *p, uint32_t size, uint64_t count, struct rng *rng, double out[58]);

static int forced_isa = ISA_AUTO;

static bool avx2_runs(void)
{
#if DETECT_X86
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2");
#else
	return false;
#endif
}

static bool avx512_runs(void)
{
#if DETECT_X86
	__builtin_cpu_init();
	return avx2_runs() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vbmi");
#else
	return false;
#endif
}

/* The kernels resize.c's rule picks, where this CPU runs ours. */
static int default_isa(void)
{
	switch (resize_default_isa()) {
	case RESIZE_ISA_AVX512: return avx512_runs() ? ISA_AVX512 : avx2_runs() ? ISA_AVX2 : ISA_SCALAR;
	case RESIZE_ISA_AVX2: return avx2_runs() ? ISA_AVX2 : ISA_SCALAR;
	default: return ISA_SCALAR;
	}
}

int detect_force_isa(int isa)
{
	if (isa != ISA_AUTO && isa != ISA_SCALAR && !(isa == ISA_AVX2 && avx2_runs()) &&
	    !(isa == ISA_AVX512 && avx512_runs()))
		return -ENOTSUP;
	forced_isa = isa;
	return 0;
}

/* saturate_cast<int>((255 << 12) / (1. * i)) and the 180-degree hue table, rounded to even */
static void div_tables(int sdiv[256], int hdiv[256])
{
	sdiv[0] = hdiv[0] = 0;
	for (int i = 1; i < 256; i++) {
		sdiv[i] = (int)nearbyint((255 << 12) / (double)i);
		hdiv[i] = (int)nearbyint((180 << 12) / (6.0 * i));
	}
}

int detect_new(struct detect **out)
{
	struct detect *d;
	int isa;

	if (!out)
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	div_tables(d->sdiv, d->hdiv);
	isa = forced_isa == ISA_AUTO ? default_isa() : forced_isa;
	d->avx2 = isa == ISA_AVX2 || isa == ISA_AVX512;
	d->avx512 = isa == ISA_AVX512;
	*out = d;
	return 0;
}

void detect_profile(struct detect *d, uint64_t *ns)
{
	if (d)
		d->prof = ns;
}

/* The profile's clock, the thread's CPU time: 0 when it is off. */
static uint64_t prof_now(const struct detect *d)
{
	struct timespec ts;

	if (!d->prof)
		return 0;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The time since *t into `stage`, and *t moved on. */
static void prof_lap(const struct detect *d, enum detect_stage stage, uint64_t *t)
{
	uint64_t now;

	if (!d->prof)
		return;
	now = prof_now(d);
	d->prof[stage] += now - *t;
	*t = now;
}

void detect_free(struct detect *d)
{
	if (!d)
		return;
	free(d->canvas);
	free(d->mix);
	free(d->warp);
	free(d->cut);
	free(d->cutmix.floats);
	free(d->cutmix.idx);
	for (int i = 0; i < 3; i++)
		free(d->boxes[i]);
	for (int i = 0; i < 4; i++)
		free(d->tile[i].mem);
	for (int i = 0; i < 3; i++)
		free(d->inst[i].mem);
	copypaste_free(d->cp);
	free(d->cpbuf.mem);
	free(d->cpsel);
	free(d->out.mem);
	free(d->mixed.mem);
	free(d->iscratch);
	free(d->fmt);
	free(d);
}

/* Bytes of warp scratch for an output of `size` from a source `w` wide (VROW_SLACK: see warp_separable). */
#define VROW_SLACK 8
static size_t warp_scratch(uint32_t size, int64_t w)
{
	return (size_t)size * (sizeof(int32_t) + sizeof(uint32_t)) +
	       ((size_t)(w + 4) * 3 + VROW_SLACK) * sizeof(uint16_t) + (size_t)w * 3;
}

size_t detect_scratch_bytes(uint32_t size)
{
	size_t s = size;

	/* the mosaic canvas, the mixup image and the warp's tables; box arrays are a few KiB */
	return sizeof(struct detect) + 4 * s * s * 3 + s * s * 3 + warp_scratch(size, 2 * (int64_t)s);
}

/* ---- random draws ---- */

static double rng_normal(struct rng *r)
{
	/* Box-Muller, one of the pair; 1 - u keeps the log finite */
	double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r);

	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Marsaglia and Tsang (2000), for a >= 1. */
static double rng_gamma(struct rng *r, double a)
{
	const double dd = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * dd);

	for (;;) {
		double x, v, u;

		do {
			x = rng_normal(r);
			v = 1.0 + c * x;
		} while (v <= 0);
		v = v * v * v;
		u = rng_uniform(r);
		if (u < 1.0 - 0.0331 * x * x * x * x)
			return dd * v;
		if (log(u) < 0.5 * x * x + dd * (1.0 - v + log(v)))
			return dd * v;
	}
}

static double rng_beta(struct rng *r, double a, double b)
{
	double x = rng_gamma(r, a), y = rng_gamma(r, b);

	return x / (x + y);
}

static void draw_image(struct image_draw *im, const struct detect_params *p, uint32_t size, uint64_t count,
		       struct rng *rng)
{
	/* Mosaic's border is -imgsz // 2 (floor); the centre is int(uniform(-border, 2s + border)). */
	int64_t border = -(((int64_t)size + 1) / 2);
	double lo = (double)-border, hi = 2.0 * size + (double)border;

	/* BaseMixTransform applies unless uniform(0, 1) > p; < keeps p = 0 from ever applying */
	im->mosaic = rng_uniform(rng) < p->mosaic;
	for (int i = 0; i < 3; i++)
		im->partner[i] = rng_below(rng, count);
	im->yc = (int64_t)rng_range(rng, lo, hi);
	im->xc = (int64_t)rng_range(rng, lo, hi);
	/* _compute_affine_matrix's order */
	im->persp_x = rng_range(rng, -p->perspective, p->perspective);
	im->persp_y = rng_range(rng, -p->perspective, p->perspective);
	im->angle = rng_range(rng, -p->degrees, p->degrees);
	im->scale = rng_range(rng, 1.0 - p->scale, 1.0 + p->scale);
	im->shear_x = rng_range(rng, -p->shear, p->shear);
	im->shear_y = rng_range(rng, -p->shear, p->shear);
	im->trans_x = rng_range(rng, 0.5 - p->translate, 0.5 + p->translate);
	im->trans_y = rng_range(rng, 0.5 - p->translate, 0.5 + p->translate);
}

static void draw_plan(struct plan *pl, const struct detect_params *p, uint32_t size, uint64_t count, struct rng *rng)
{
	const double gains[3] = {p->hsv_h, p->hsv_s, p->hsv_v};

	draw_image(&pl->img[0], p, size, count, rng);
	pl->mixup = rng_uniform(rng) < p->mixup;
	pl->mix_index = rng_below(rng, count);
	draw_image(&pl->img[1], p, size, count, rng);
	for (int i = 0; i < 3; i++)
		pl->gain[i] = rng_range(rng, -1.0, 1.0) * gains[i];
	pl->flipud = rng_uniform(rng) < p->flipud;
	pl->fliplr = rng_uniform(rng) < p->fliplr;
	pl->beta = pl->mixup ? rng_beta(rng, 32.0, 32.0) : 1.0;
}

/* CopyPaste mode mixup's draws, from a stream of their own: u, partner, its 14 image draws; image 1's, then the MixUp
 * partner's (always drawn). */
static void draw_copy_paste(struct cp_draw cpd[2], const struct detect_params *p, uint32_t size, uint64_t count,
			    const struct rng *sample)
{
	struct rng rng;

	rng_fork(sample, RNG_COPYPASTE, &rng);
	for (int k = 0; k < 2; k++) {
		/* BaseMixTransform applies unless uniform(0, 1) > p, as mixup */
		cpd[k].apply = rng_uniform(&rng) < p->copy_paste;
		cpd[k].index = rng_below(&rng, count);
		draw_image(&cpd[k].img, p, size, count, &rng);
	}
}

/* An image's 14 draws as the test tools read them: mosaic, its 3 partners, yc, xc, the 8 affine draws. */
static void image_draw_values(const struct image_draw *im, double v[14])
{
	const double d[14] = {im->mosaic,
			      (double)im->partner[0],
			      (double)im->partner[1],
			      (double)im->partner[2],
			      (double)im->yc,
			      (double)im->xc,
			      im->persp_x,
			      im->persp_y,
			      im->angle,
			      im->scale,
			      im->shear_x,
			      im->shear_y,
			      im->trans_x,
			      im->trans_y};

	memcpy(v, d, sizeof(d));
}

int detect_copy_paste_draws(const struct detect_params *p, uint32_t size, uint64_t count, const struct rng *rng,
			    double out[DETECT_COPY_PASTE_DRAWS])
{
	struct cp_draw cpd[2];

	if (!p || !rng || size == 0 || count == 0)
		return -EINVAL;
	draw_copy_paste(cpd, p, size, count, rng);
	for (int k = 0; k < 2; k++) {
		out[16 * k] = cpd[k].apply;
		out[16 * k + 1] = (double)cpd[k].index;
		image_draw_values(&cpd[k].img, out + 16 * k + 2);
	}
	return 0;
}

static void draw_cutmix(struct cutmix_draw *cm, const struct detect_params *p, uint32_t size, uint64_t count,
			const struct rng *sample)
{
	struct rng rng;

	rng_fork(sample, RNG_CUTMIX, &rng);
	/* BaseMixTransform applies unless uniform(0, 1) > p, as mixup */
	cm->apply = rng_uniform(&rng) < p->cutmix;
	cm->index = rng_below(&rng, count);
	draw_image(&cm->img, p, size, count, &rng);
	for (int k = 0; k < CUTMIX_AREAS; k++) {
		/* _rand_bbox: np.random.beta(1, 1), randint(width), randint(height) */
		cm->lam[k] = rng_uniform(&rng);
		cm->cx[k] = (int64_t)rng_below(&rng, size);
		cm->cy[k] = (int64_t)rng_below(&rng, size);
	}
	cm->choice = rng_uniform(&rng);
}

int detect_plan_draws(const struct detect_params *p, uint32_t size, uint64_t count, struct rng *rng,
		      double out[DETECT_PLAN_DRAWS])
{
	struct plan pl;
	struct cutmix_draw cm;

	if (!p || !rng || size == 0 || count == 0)
		return -EINVAL;
	draw_plan(&pl, p, size, count, rng);
	draw_cutmix(&cm, p, size, count, rng);
	image_draw_values(&pl.img[0], out);
	image_draw_values(&pl.img[1], out + 14);
	image_draw_values(&cm.img, out + 34);
	out[28] = pl.mixup;
	out[29] = (double)pl.mix_index;
	out[30] = pl.flipud;
	out[31] = pl.fliplr;
	out[32] = cm.apply;
	out[33] = (double)cm.index;
	for (int k = 0; k < CUTMIX_AREAS; k++) {
		out[48 + k] = cm.lam[k];
		out[51 + k] = (double)cm.cx[k];
		out[54 + k] = (double)cm.cy[k];
	}
	out[57] = cm.choice;
	return 0;
}

/* ---- matrices ---- */

static void mat3_mul(const double a[9], const double b[9], double out[9])
{
	double t[9];

	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 3; j++)
			t[i * 3 + j] = a[i * 3] * b[j] + a[i * 3 + 1] * b[3 + j] + a[i * 3 + 2] * b[6 + j];
	memcpy(out, t, sizeof(t));
}

/* M = T @ S @ R @ P @ C for an input of in_w x in_h and an output of out_w x out_h. */
static void affine_matrix(const struct image_draw *im, double in_w, double in_h, uint32_t out_w, uint32_t out_h,
			  double M[9])
{
	const double deg = M_PI / 180.0;
	double a = cos(im->angle * deg) * im->scale, b = sin(im->angle * deg) * im->scale;
	double C[9] = {1, 0, -in_w / 2, 0, 1, -in_h / 2, 0, 0, 1};
	double P[9] = {1, 0, 0, 0, 1, 0, im->persp_x, im->persp_y, 1};
	/* cv2.getRotationMatrix2D(center=(0, 0), angle, scale) */
	double R[9] = {a, b, 0, -b, a, 0, 0, 0, 1};
	double S[9] = {1, tan(im->shear_x * deg), 0, tan(im->shear_y * deg), 1, 0, 0, 0, 1};
	double T[9] = {1, 0, im->trans_x * out_w, 0, 1, im->trans_y * out_h, 0, 0, 1};

	mat3_mul(P, C, M);
	mat3_mul(R, M, M);
	mat3_mul(S, M, M);
	mat3_mul(T, M, M);
}

/*
 * Is M a shift by whole pixels that keeps a w x h image inside ow x oh?
 * Then cv2's warp copies it (its taps' weights are 0): where to, in *x, *y.
 */
static bool whole_shift(const double M[9], uint32_t w, uint32_t h, uint32_t ow, uint32_t oh, int *x, int *y)
{
	if (M[0] != 1 || M[1] != 0 || M[3] != 0 || M[4] != 1 || M[6] != 0 || M[7] != 0 || M[8] != 1 ||
	    M[2] != floor(M[2]) || M[5] != floor(M[5]) || !(M[2] >= 0 && M[2] + w <= ow && M[5] >= 0 && M[5] + h <= oh))
		return false;
	*x = (int)M[2];
	*y = (int)M[5];
	return true;
}

/* The destination-to-source map, as cv2.warpAffine / warpPerspective invert M. */
static void invert_map(const double M[9], bool perspective, double inv[9])
{
	if (!perspective) {
		/* cv::invertAffineTransform */
		double D = M[0] * M[4] - M[1] * M[3];

		D = D != 0 ? 1.0 / D : 0;
		inv[0] = M[4] * D;
		inv[1] = -M[1] * D;
		inv[3] = -M[3] * D;
		inv[4] = M[0] * D;
		inv[2] = -inv[0] * M[2] - inv[1] * M[5];
		inv[5] = -inv[3] * M[2] - inv[4] * M[5];
		inv[6] = 0;
		inv[7] = 0;
		inv[8] = 1;
	} else {
		double c0 = M[4] * M[8] - M[5] * M[7], c1 = M[5] * M[6] - M[3] * M[8], c2 = M[3] * M[7] - M[4] * M[6];
		double D = M[0] * c0 + M[1] * c1 + M[2] * c2;

		D = D != 0 ? 1.0 / D : 0;
		inv[0] = c0 * D;
		inv[1] = (M[2] * M[7] - M[1] * M[8]) * D;
		inv[2] = (M[1] * M[5] - M[2] * M[4]) * D;
		inv[3] = c1 * D;
		inv[4] = (M[0] * M[8] - M[2] * M[6]) * D;
		inv[5] = (M[2] * M[3] - M[0] * M[5]) * D;
		inv[6] = c2 * D;
		inv[7] = (M[1] * M[6] - M[0] * M[7]) * D;
		inv[8] = (M[0] * M[4] - M[1] * M[3]) * D;
	}
}

/* ---- pixels ---- */

/* Round half to even for 0 <= v < 2^22 without a libm call (as cvRound). */
static inline int round_even(float v)
{
	const float magic = 0x1.8p23f;

	return (int)((v + magic) - magic);
}

/*
 * a * b + c rounded once, as the FMA of OpenCV's vector kernels: the
 * product of two floats is exact in double, and so is the sum for the
 * magnitudes here (pixels, coordinates), so one rounding to float remains.
 * fmaf() would be a libm call without -mfma.
 */
static inline float fma_f(float a, float b, float c)
{
	return (float)((double)a * b + c);
}

/* cvFloor for |v| well inside int range. */
static inline int floor_int(float v)
{
	int i = (int)v;

	return i - (v < (float)i);
}

/* One output pixel whose neighbours straddle the source's edge: outside is PAD. */
static void warp_edge_pixel(const struct source *s, int ix, int iy, float fx, float fy, uint8_t *o)
{
	int p[4][3];

	for (int n = 0; n < 4; n++) {
		int x = ix + (n & 1), y = iy + (n >> 1);
		bool in = (unsigned)x < (unsigned)s->w && (unsigned)y < (unsigned)s->h;
		const uint8_t *q = in ? s->pix + (size_t)y * s->stride + (size_t)x * 3 : NULL;

		for (int c = 0; c < 3; c++)
			p[n][c] = q ? q[c] : PAD;
	}
	for (int c = 0; c < 3; c++) {
		float v0 = fma_f(fx, (float)(p[1][c] - p[0][c]), (float)p[0][c]);
		float v1 = fma_f(fx, (float)(p[3][c] - p[2][c]), (float)p[2][c]);

		o[c] = (uint8_t)round_even(fma_f(fy, v1 - v0, v0));
	}
}

/*
 * The perspective warp (and affine maps too far out for fixed point):
 * OpenCV 5's warpAffineLinearInvoker_8UC3 vector arithmetic, single-precision
 * map, bilinear in float with fused multiply-adds, rounded to even,
 * BORDER_CONSTANT 114. The row's start is computed once and x * m0 added
 * per pixel.
 */
static void warp_float(const struct source *s, const double inv[9], bool perspective, uint8_t *out, uint32_t ow,
		       uint32_t oh, bool flipud, bool fliplr)
{
	const float m0 = (float)inv[0], m1 = (float)inv[1], m2 = (float)inv[2], m3 = (float)inv[3];
	const float m4 = (float)inv[4], m5 = (float)inv[5], m6 = (float)inv[6], m7 = (float)inv[7], m8 = (float)inv[8];
	/* floor(sx) must lie in [ox - 1, ox + w): else all four neighbours are outside */
	const float lo_x = (float)(s->ox - 1), hi_x = (float)(s->ox + s->w);
	const float lo_y = (float)(s->oy - 1), hi_y = (float)(s->oy + s->h);
	const size_t ostride = (size_t)ow * 3;

	for (uint32_t y = 0; y < oh; y++) {
		/* the row term in single precision, unfused, as OpenCV writes it */
		float yf = (float)y, mx = yf * m1 + m2, my = yf * m4 + m5, mw = yf * m7 + m8;
		uint8_t *o = out + (size_t)(flipud ? oh - 1 - y : y) * ostride + (fliplr ? ostride - 3 : 0);
		ptrdiff_t step = fliplr ? -3 : 3;
		float xf = 0.0f;

		for (uint32_t x = 0; x < ow; x++, xf += 1.0f, o += step) {
			float sx = fma_f(xf, m0, mx), sy = fma_f(xf, m3, my);
			int ix, iy;
			float fx, fy;

			if (perspective) {
				float w = fma_f(xf, m6, mw);

				sx /= w;
				sy /= w;
			}
			/* NaN and far-away coordinates fail here too */
			if (!(sx >= lo_x && sx < hi_x && sy >= lo_y && sy < hi_y)) {
				o[0] = o[1] = o[2] = PAD;
				continue;
			}
			ix = floor_int(sx);
			iy = floor_int(sy);
			fx = sx - (float)ix;
			fy = sy - (float)iy;
			ix -= s->ox;
			iy -= s->oy;
			if ((unsigned)ix < (unsigned)(s->w - 1) && (unsigned)iy < (unsigned)(s->h - 1)) {
				const uint8_t *p = s->pix + (size_t)iy * s->stride + (size_t)ix * 3, *q = p + s->stride;

				for (int c = 0; c < 3; c++) {
					float v0 = fma_f(fx, (float)(p[3 + c] - p[c]), (float)p[c]);
					float v1 = fma_f(fx, (float)(q[3 + c] - q[c]), (float)q[c]);

					o[c] = (uint8_t)round_even(fma_f(fy, v1 - v0, v0));
				}
			} else {
				warp_edge_pixel(s, ix, iy, fx, fy, o);
			}
		}
	}
}

/*
 * Affine warps in fixed point: coordinates with FIX fractional bits in
 * int64, exact sums of integer coefficients, so the bytes depend on no
 * float evaluation order; bilinear within one unit of the exact value.
 */
#define FIX 32
/* vertical weights: a blend of two bytes times 2^8 fits uint16, exact */
#define WY_BITS 8
/* weights of the general path: 255 * 2^(2 * 11) fits uint32 */
#define WG_BITS 11
#define WX_BITS 15
/* coordinates and coefficients whose fixed point fits int64 comfortably */
#define FIX_LIMIT 16777216.0

static const uint8_t pad_pixel[3] = {PAD, PAD, PAD};

static inline int64_t to_fix(double v)
{
	return (int64_t)llround(v * 4294967296.0);
}

/* floor(v / 2^FIX) without relying on >> of a negative value */
static inline int64_t fix_floor(int64_t v)
{
	return v >= 0 ? v >> FIX : -((-v + ((int64_t)1 << FIX) - 1) >> FIX);
}

/* The fractional part of v as a `bits`-bit weight. */
static inline uint32_t fix_weight(int64_t v, int bits)
{
	return (uint32_t)(((uint64_t)v >> (FIX - bits)) & ((1u << bits) - 1));
}

static inline int64_t div_floor(int64_t a, int64_t b)
{
	int64_t q = a / b;

	return q - ((a % b != 0) && ((a < 0) != (b < 0)));
}

/* The integers x with lo <= v0 + a * x <= hi, intersected with [*x0, *x1). */
static void clip_linear(int64_t v0, int64_t a, int64_t lo, int64_t hi, int64_t *x0, int64_t *x1)
{
	int64_t from, to;

	if (a == 0) {
		if (v0 < lo || v0 > hi)
			*x1 = *x0;
		return;
	}
	if (a < 0) {
		a = -a, v0 = -v0;
		from = -hi, hi = -lo, lo = from;
	}
	from = -div_floor(v0 - lo, a); /* ceil((lo - v0) / a) */
	to = div_floor(hi - v0, a) + 1;
	/* stay within the old [*x0, *x1): an empty result is empty there */
	from = from < *x0 ? *x0 : from > *x1 ? *x1 : from;
	*x1 = to < *x1 ? (to < from ? from : to) : *x1;
	*x0 = from;
}

/*
 * The map of output (x, y) to source coordinates X = a x + b y + c and
 * Y = d x + e y + f, the source's origin and half a weight unit folded
 * into c and f so that floor gives the tap and the weight is rounded.
 * False when the coordinates leave what fixed point holds.
 */
static bool fix_map(const struct source *s, const double inv[9], uint32_t ow, uint32_t oh, int wbits, int hbits,
		    int64_t m[6])
{
	for (int c = 0; c < 4; c++) {
		double x = (c & 1) ? ow - 1.0 : 0.0, y = (c & 2) ? oh - 1.0 : 0.0;
		double sx = inv[0] * x + inv[1] * y + inv[2] - s->ox, sy = inv[3] * x + inv[4] * y + inv[5] - s->oy;

		if (!(fabs(sx) < FIX_LIMIT && fabs(sy) < FIX_LIMIT))
			return false;
	}
	for (int i = 0; i < 6; i++) {
		if (!(fabs(inv[i]) < FIX_LIMIT))
			return false;
		m[i] = to_fix(inv[i]);
	}
	m[2] += ((int64_t)1 << (FIX - wbits - 1)) - (int64_t)s->ox * ((int64_t)1 << FIX);
	m[5] += ((int64_t)1 << (FIX - hbits - 1)) - (int64_t)s->oy * ((int64_t)1 << FIX);
	return true;
}

/* PAD over output columns [x0, x1) of a row `ow` wide, mirrored when flipped. */
static void pad_span(uint8_t *row, uint32_t ow, bool fliplr, int64_t x0, int64_t x1)
{
	if (x1 > x0)
		memset(row + (size_t)(fliplr ? ow - x1 : x0) * 3, PAD, (size_t)(x1 - x0) * 3);
}

/* The bilinear of four taps with WG_BITS weights, rounded. */
static inline void bilerp(const uint8_t *p00, const uint8_t *p01, const uint8_t *p10, const uint8_t *p11, uint32_t wx,
			  uint32_t wy, uint8_t *o)
{
	const uint32_t one = 1u << WG_BITS;

	for (int c = 0; c < 3; c++) {
		uint32_t top = p00[c] * (one - wx) + p01[c] * wx, bot = p10[c] * (one - wx) + p11[c] * wx;

		o[c] = (uint8_t)((top * (one - wy) + bot * wy + (1u << (2 * WG_BITS - 1))) >> (2 * WG_BITS));
	}
}

/* A source pixel, or PAD outside. */
static inline const uint8_t *tap(const struct source *s, int64_t x, int64_t y)
{
	if (x < 0 || y < 0 || x >= s->w || y >= s->h)
		return pad_pixel;
	return s->pix + (size_t)y * s->stride + (size_t)x * 3;
}

/* Output columns [x0, x1) of a row from X0 + a x, Y0 + d x; `inside`: all four taps are. */
static inline void affine_span(const struct source *s, const int64_t m[6], int64_t X0, int64_t Y0, int64_t x0,
			       int64_t x1, bool inside, uint8_t *o, ptrdiff_t step)
{
	for (int64_t x = x0; x < x1; x++, o += step) {
		int64_t X = X0 + m[0] * x, Y = Y0 + m[3] * x, ix = fix_floor(X), iy = fix_floor(Y);
		uint32_t wx = fix_weight(X, WG_BITS), wy = fix_weight(Y, WG_BITS);

		if (inside) {
			const uint8_t *p = s->pix + (size_t)iy * s->stride + (size_t)ix * 3, *q = p + s->stride;

			bilerp(p, p + 3, q, q + 3, wx, wy, o);
		} else {
			bilerp(tap(s, ix, iy), tap(s, ix + 1, iy), tap(s, ix, iy + 1), tap(s, ix + 1, iy + 1), wx, wy,
			       o);
		}
	}
}

/*
 * Rotation or shear: per row, the output columns whose four taps are all
 * inside run without checks; those with some inside take tap(); the rest
 * are PAD.
 */
static void warp_affine(const struct source *s, const int64_t m[6], uint8_t *out, uint32_t ow, uint32_t oh, bool flipud,
			bool fliplr)
{
	const int64_t one = (int64_t)1 << FIX;
	const size_t ostride = (size_t)ow * 3;
	const ptrdiff_t step = fliplr ? -3 : 3;

	for (uint32_t y = 0; y < oh; y++) {
		uint8_t *row = out + (size_t)(flipud ? oh - 1 - y : y) * ostride, *o0;
		int64_t X0 = m[1] * y + m[2], Y0 = m[4] * y + m[5];
		int64_t a0 = 0, a1 = ow, f0, f1;

		/* some tap inside: floor in [-1, w - 1]; all inside: floor in [0, w - 2] */
		clip_linear(X0, m[0], -one, (int64_t)s->w * one - 1, &a0, &a1);
		clip_linear(Y0, m[3], -one, (int64_t)s->h * one - 1, &a0, &a1);
		f0 = a0, f1 = a1;
		clip_linear(X0, m[0], 0, (int64_t)(s->w - 1) * one - 1, &f0, &f1);
		clip_linear(Y0, m[3], 0, (int64_t)(s->h - 1) * one - 1, &f0, &f1);
		if (f0 == f1)
			f0 = f1 = a1;
		pad_span(row, ow, fliplr, 0, a0);
		pad_span(row, ow, fliplr, a1, ow);
		o0 = row + (fliplr ? ostride - 3 : 0);
		affine_span(s, m, X0, Y0, a0, f0, false, o0 + a0 * step, step);
		affine_span(s, m, X0, Y0, f0, f1, true, o0 + f0 * step, step);
		affine_span(s, m, X0, Y0, f1, a1, false, o0 + f1 * step, step);
	}
}

/* The separable warp's column tables and row, in d->warp. */
struct sep {
	const int32_t *col;   /* per output column (in output order), its first tap's index in vrow */
	const uint32_t *colw; /* its 15-bit weight wx as wx << 16 | (uint16_t)-wx, pmaddwd's pair */
	const uint16_t *vrow; /* the row's vertical blends, 3 per source column */
	uint32_t size;
};

/* v[k] = a[k] wy0 + b[k] wy for k in [k, n): at most 255 << WY_BITS, exact in 16 bits. */
static inline void sep_vblend(const uint8_t *a, const uint8_t *b, uint16_t *v, size_t k, size_t n, uint32_t wy)
{
	const uint32_t wy0 = (1u << WY_BITS) - wy;

	for (; k < n; k++)
		v[k] = (uint16_t)(a[k] * wy0 + b[k] * wy);
}

/* Output pixels [j, size) of the row: two taps of vrow, rounded. */
static inline void sep_hblend(const struct sep *t, uint32_t j, uint8_t *o)
{
	for (; j < t->size; j++) {
		const uint16_t *v = t->vrow + t->col[j];
		const uint32_t wx = t->colw[j] >> 16, wx0 = (1u << WX_BITS) - wx;

		for (int k = 0; k < 3; k++)
			o[3 * j + k] = (uint8_t)((v[k] * wx0 + v[k + 3] * wx + (1u << (WX_BITS + WY_BITS - 1))) >>
						 (WX_BITS + WY_BITS));
	}
}

#if DETECT_X86
/* Store 8 pixels, one a 32-bit lane (R in its low byte, the top byte unused), as 24 bytes. */
INLINE_AVX2 void store_rgb8_avx2(uint8_t *o, __m256i px)
{
	/* per lane, 4 pixels of 4 bytes to 12 bytes; then the two 12s together */
	const __m256i pack =
		_mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
	__m256i p =
		_mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(px, pack), _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7));

	_mm_storeu_si128((__m128i *)o, _mm256_castsi256_si128(p));
	_mm_storel_epi64((__m128i *)(o + 16), _mm256_extracti128_si256(p, 1));
}

/*
 * sep_vblend and sep_hblend, 16 and 8 outputs a step. Horizontal: one
 * unaligned 16-byte load per output pixel holds both taps' three channels
 * (v0..v5, and two more that VROW_SLACK keeps inside the scratch); the
 * blend v0 wx0 + v3 wx is (v0 << 15) + (v3 - v0) wx, whose second term is
 * one pmaddwd of (v0, v3) - 0x8000 each (the bias cancels, so values up to
 * 65280 fit int16) with (-wx, wx): |v3 - v0| wx < 2^31. Two pixels a
 * vector, one per 128-bit lane.
 */
TARGET_AVX2 static void sep_row_avx2(const struct sep *t, const uint8_t *a, const uint8_t *b, uint16_t *v, size_t n,
				     uint32_t wy, uint8_t *o)
{
	const __m256i w0 = _mm256_set1_epi16((short)((1 << WY_BITS) - wy)), w1 = _mm256_set1_epi16((short)wy);
	/* per lane: the pairs (v0, v3) (v1, v4) (v2, v5) and a spare; v0 v1 v2 as 32 bits */
	const __m256i pairs =
		_mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, 0, 1, 6, 7));
	const __m256i first =
		_mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, -1, -1, -1, -1));
	const __m256i bias = _mm256_set1_epi16(-32768), round = _mm256_set1_epi32(1 << (WX_BITS + WY_BITS - 1));
	const __m256i lanes = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	size_t k = 0;
	uint32_t j = 0;

	for (; k + 16 <= n; k += 16) {
		__m256i x = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(a + k)));
		__m256i y = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b + k)));

		_mm256_storeu_si256((__m256i *)(v + k),
				    _mm256_add_epi16(_mm256_mullo_epi16(x, w0), _mm256_mullo_epi16(y, w1)));
	}
	sep_vblend(a, b, v, k, n, wy);

	for (; j + 8 <= t->size; j += 8) {
		__m256i px[4], p;

		for (int m = 0; m < 4; m++) {
			const uint32_t i = j + 2 * (uint32_t)m;
			__m256i x = _mm256_inserti128_si256(
				_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(t->vrow + t->col[i]))),
				_mm_loadu_si128((const __m128i *)(t->vrow + t->col[i + 1])), 1);
			__m256i w = _mm256_permutevar8x32_epi32(
				_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(t->colw + i))), lanes);
			__m256i d = _mm256_madd_epi16(_mm256_xor_si256(_mm256_shuffle_epi8(x, pairs), bias), w);
			__m256i s = _mm256_add_epi32(_mm256_slli_epi32(_mm256_shuffle_epi8(x, first), WX_BITS), d);

			px[m] = _mm256_srli_epi32(_mm256_add_epi32(s, round), WX_BITS + WY_BITS);
		}
		/* lane 0 holds pixels j, j + 2, .., lane 1 j + 1, j + 3, ..: back in order */
		p = _mm256_packus_epi16(_mm256_packs_epi32(px[0], px[1]), _mm256_packs_epi32(px[2], px[3]));
		store_rgb8_avx2(o + 3 * (size_t)j, _mm256_permutevar8x32_epi32(p, order));
	}
	sep_hblend(t, j, o);
}

/*
 * sep_row_avx2 twice as wide: 32 vertical blends and 16 output pixels a
 * step, one pixel per 128-bit lane with the same arithmetic; a byte
 * permute takes the lanes' interleaved pixels back to 48 RGB bytes.
 */
TARGET_AVX512 static void sep_row_avx512(const struct sep *t, const uint8_t *a, const uint8_t *b, uint16_t *v, size_t n,
					 uint32_t wy, uint8_t *o)
{
	const __m512i w0 = _mm512_set1_epi16((short)((1 << WY_BITS) - wy)), w1 = _mm512_set1_epi16((short)wy);
	const __m512i pairs = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, 0, 1, 6, 7));
	const __m512i first =
		_mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, -1, -1, -1, -1));
	const __m512i bias = _mm512_set1_epi16(-32768), round = _mm512_set1_epi32(1 << (WX_BITS + WY_BITS - 1));
	const __m512i lanes = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
	const __mmask64 bytes48 = ((__mmask64)1 << 48) - 1;
	uint8_t idx[64];
	__m512i order;
	size_t k = 0;
	uint32_t j = 0;

	/* after the packs, lane L's 4-byte slot m is pixel 4 m + L */
	for (int q = 0; q < 64; q++) {
		const int px = q / 3;

		idx[q] = (uint8_t)(q < 48 ? 16 * (px % 4) + 4 * (px / 4) + q % 3 : 0);
	}
	order = _mm512_loadu_si512(idx);

	for (; k + 32 <= n; k += 32) {
		__m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(a + k)));
		__m512i y = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(b + k)));

		_mm512_storeu_si512(v + k, _mm512_add_epi16(_mm512_mullo_epi16(x, w0), _mm512_mullo_epi16(y, w1)));
	}
	sep_vblend(a, b, v, k, n, wy);

	for (; j + 16 <= t->size; j += 16) {
		__m512i px[4], p;

		for (int m = 0; m < 4; m++) {
			const uint32_t i = j + 4 * (uint32_t)m;
			__m512i x = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(t->vrow + t->col[i])));
			__m512i w = _mm512_permutexvar_epi32(
				lanes, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(t->colw + i))));
			__m512i d, sum;

			x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(t->vrow + t->col[i + 1])), 1);
			x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(t->vrow + t->col[i + 2])), 2);
			x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(t->vrow + t->col[i + 3])), 3);
			d = _mm512_madd_epi16(_mm512_xor_si512(_mm512_shuffle_epi8(x, pairs), bias), w);
			sum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_shuffle_epi8(x, first), WX_BITS), d);
			px[m] = _mm512_srli_epi32(_mm512_add_epi32(sum, round), WX_BITS + WY_BITS);
		}
		p = _mm512_packus_epi16(_mm512_packs_epi32(px[0], px[1]), _mm512_packs_epi32(px[2], px[3]));
		_mm512_mask_storeu_epi8(o + 3 * (size_t)j, bytes48, _mm512_permutexvar_epi8(order, p));
	}
	sep_hblend(t, j, o);
}
#endif

/*
 * Canvas row y, columns [x0, x1), into a row buffer: the left patch
 * (quadrant 0 or 2) and the right one (1 or 3) where they land, PAD
 * elsewhere: the bytes mosaic4's copy and fill give the canvas there.
 */
static void lazy_fill(const struct lazy_canvas *lz, int64_t y, uint8_t *row)
{
	const int64_t x0 = lz->x0, x1 = lz->x1;

	memset(row, PAD, (size_t)(x1 - x0) * 3);
	for (int i = y < lz->yc ? 0 : 2, k = 0; k < 2; k++, i++) {
		int64_t a = lz->q[i].x1a > x0 ? lz->q[i].x1a : x0, b = lz->q[i].x2a < x1 ? lz->q[i].x2a : x1;

		if (y < lz->q[i].y1a || y >= lz->q[i].y2a || a >= b)
			continue;
		memcpy(row + (size_t)(a - x0) * 3,
		       lz->q[i].pix + (size_t)(y - lz->q[i].y1a + lz->q[i].y1b) * lz->q[i].stride +
			       (size_t)(a - lz->q[i].x1a + lz->q[i].x1b) * 3,
		       (size_t)(b - a) * 3);
	}
}

/* Canvas row y made (or kept) in a slot other than `keep` (-1: any); its bytes from column x0. */
static const uint8_t *lazy_row(struct lazy_canvas *lz, int64_t y, int keep, int *slot)
{
	const size_t bytes = (size_t)(lz->x1 - lz->x0) * 3;
	int k = lz->row_y[0] == y ? 0 : lz->row_y[1] == y ? 1 : -1;

	if (k < 0) {
		k = keep == 0 ? 1 : 0;
		lazy_fill(lz, y, lz->rows + (size_t)k * bytes);
		lz->row_y[k] = y;
	}
	*slot = k;
	return lz->rows + (size_t)k * bytes;
}

/*
 * No rotation, shear or perspective (Ultralytics' defaults): X depends on
 * x only and Y on y only. Each output row blends its two source rows into
 * `vrow` (exact, 8-bit weight), then each column blends two entries of
 * that (15-bit weight) at a tap and weight computed once per column.
 * Taps outside the source read PAD, so edges need no other case.
 */
static int warp_separable(struct detect *d, const struct source *s, const int64_t m[6], uint8_t *out, uint32_t size,
			  uint32_t oh, bool flipud, bool fliplr)
{
	const size_t ostride = (size_t)size * 3;
	int64_t lo = INT64_MAX, hi = INT64_MIN, c0, c1;
	int32_t *col;
	uint32_t *colw;
	uint16_t *vrow;
	uint8_t *padrow;
	void *p = d->warp;
	int r = grow(&p, &d->warp_cap, warp_scratch(size, s->w), 1);
	struct sep t;

	d->warp = p;
	if (r < 0)
		return r;
	col = p;
	colw = (uint32_t *)(col + size);
	vrow = (uint16_t *)(colw + size);
	/* the AVX2 kernel reads up to 5 entries past vrow's last: the slack, set so its reads are defined */
	padrow = (uint8_t *)(vrow + (size_t)(s->w + 4) * 3 + VROW_SLACK);
	memset(padrow, PAD, (size_t)s->w * 3);
	t = (struct sep){col, colw, vrow, size};

	/* per column in output order: the first tap, clamped to where both taps are PAD beyond the edges */
	for (uint32_t j = 0; j < size; j++) {
		int64_t X = m[0] * (fliplr ? size - 1 - j : j) + m[2], ix = fix_floor(X);
		uint32_t wx = fix_weight(X, WX_BITS);

		ix = ix < -2 ? -2 : ix > s->w ? s->w : ix;
		col[j] = (int32_t)ix;
		colw[j] = wx << 16 | (uint16_t)-wx;
		lo = ix < lo ? ix : lo;
		hi = ix > hi ? ix : hi;
	}
	hi++;
	for (uint32_t j = 0; j < size; j++)
		col[j] = (int32_t)(col[j] - lo) * 3;
	/* vrow covers source columns [lo, hi]; [c0, c1) of them are inside */
	c0 = lo < 0 ? 0 : lo;
	c1 = hi + 1 > s->w ? s->w : hi + 1;
	for (int64_t c = lo; c <= hi; c++)
		if (c < c0 || c >= c1)
			for (int k = 0; k < 3; k++)
				vrow[(c - lo) * 3 + k] = PAD << WY_BITS;
	memset(vrow + (hi + 1 - lo) * 3, 0, VROW_SLACK * sizeof(uint16_t));

	for (uint32_t i = 0; i < oh; i++) {
		uint8_t *o = out + (size_t)i * ostride;
		int64_t Y = m[4] * (flipud ? oh - 1 - i : i) + m[5], iy = fix_floor(Y);
		const uint32_t wy = fix_weight(Y, WY_BITS);
		const size_t n = (size_t)(c1 - c0) * 3;
		const uint8_t *a, *b;
		uint16_t *v = vrow + (c0 - lo) * 3;

		if (iy < -1 || iy >= s->h || c0 >= c1) {
			memset(o, PAD, ostride);
			continue;
		}
		if (s->lazy) {
			int sa = -1, sb;

			/* rows made for columns [c0, c1): the first pass sets them, the canvas's bytes there */
			if (s->lazy->x0 != c0 || s->lazy->x1 != c1) {
				s->lazy->x0 = c0;
				s->lazy->x1 = c1;
				s->lazy->row_y[0] = s->lazy->row_y[1] = -1;
			}
			/* keep the slot holding iy + 1, if one does (a flipped warp walks the rows upwards) */
			sb = s->lazy->row_y[0] == iy + 1 ? 0 : s->lazy->row_y[1] == iy + 1 ? 1 : -1;
			a = iy >= 0 ? lazy_row(s->lazy, iy, sb, &sa) : padrow;
			b = iy + 1 < s->h ? lazy_row(s->lazy, iy + 1, sa, &sb) : padrow;
		} else {
			a = iy >= 0 ? s->pix + (size_t)iy * s->stride + (size_t)c0 * 3 : padrow;
			b = iy + 1 < s->h ? s->pix + (size_t)(iy + 1) * s->stride + (size_t)c0 * 3 : padrow;
		}
#if DETECT_X86
		if (d->avx512) {
			sep_row_avx512(&t, a, b, v, n, wy, o);
			continue;
		}
		if (d->avx2) {
			sep_row_avx2(&t, a, b, v, n, wy, o);
			continue;
		}
#endif
		sep_vblend(a, b, v, 0, n, wy);
		sep_hblend(&t, 0, o);
	}
	return 0;
}

/*
 * Warp `s` by the destination-to-source map `inv` into ow x oh `out`,
 * flipped as asked, bilinear with BORDER_CONSTANT PAD.
 */
static int warp(struct detect *d, const struct source *s, const double inv[9], bool perspective, uint8_t *out,
		uint32_t ow, uint32_t oh, bool flipud, bool fliplr)
{
	int64_t m[6];

	if (!perspective && inv[1] == 0 && inv[3] == 0 && fix_map(s, inv, ow, oh, WX_BITS, WY_BITS, m))
		return warp_separable(d, s, m, out, ow, oh, flipud, fliplr);
	if (!perspective && fix_map(s, inv, ow, oh, WG_BITS, WG_BITS, m))
		warp_affine(s, m, out, ow, oh, flipud, fliplr);
	else
		warp_float(s, inv, perspective, out, ow, oh, flipud, fliplr);
	return 0;
}

void detect_fit_size(uint32_t width, uint32_t height, uint32_t side, uint32_t *tw, uint32_t *th)
{
	/* r = imgsz / max(h0, w0); min(math.ceil(w0 * r), imgsz): the same
	 * double operations as Python, so the same sizes */
	double r = (double)side / (width > height ? width : height);
	double w = ceil(width * r), h = ceil(height * r);

	*tw = (uint32_t)fmax(1, fmin(w, side));
	*th = (uint32_t)fmax(1, fmin(h, side));
}

void detect_letterbox_geometry(uint32_t w, uint32_t h, uint32_t out_w, uint32_t out_h, struct detect_letterbox *g)
{
	/* r = min(new_h / h, new_w / w, 1.0); new_unpad = max(round(w * r), 1), ... */
	double r = fmin(fmin((double)out_h / h, (double)out_w / w), 1.0);

	g->r = r;
	g->w = r == 1.0 ? w : (uint32_t)fmax(nearbyint(w * r), 1);
	g->h = r == 1.0 ? h : (uint32_t)fmax(nearbyint(h * r), 1);
	/* round(dw - 0.1) with dw = (new_w - w) / 2, Python's round (half to even) */
	g->left = (int)nearbyint(((double)out_w - g->w) / 2.0 - 0.1);
	g->top = (int)nearbyint(((double)out_h - g->h) / 2.0 - 0.1);
}

/* Copy the sample into out_w x out_h `out` at (left, top), PAD around it,
 * flipped as asked. */
static void letterbox_copy(const struct detect_sample *s, int left, int top, uint8_t *out, uint32_t out_w,
			   uint32_t out_h, bool flipud, bool fliplr)
{
	const size_t ostride = (size_t)out_w * 3, sstride = (size_t)s->width * 3;
	/* a horizontal flip mirrors the padding too */
	size_t l = (size_t)(fliplr ? (int)(out_w - s->width) - left : left) * 3;

	for (uint32_t y = 0; y < out_h; y++) {
		uint8_t *o = out + (size_t)(flipud ? out_h - 1 - y : y) * ostride;
		int sy = (int)y - top;

		if (sy < 0 || sy >= (int)s->height) {
			memset(o, PAD, ostride);
			continue;
		}
		memset(o, PAD, l);
		if (!fliplr) {
			memcpy(o + l, s->pixels + (size_t)sy * sstride, sstride);
		} else {
			const uint8_t *p = s->pixels + (size_t)sy * sstride + sstride - 3;
			uint8_t *q = o + l;

			for (uint32_t x = 0; x < s->width; x++, p -= 3, q += 3) {
				q[0] = p[0];
				q[1] = p[1];
				q[2] = p[2];
			}
		}
		memset(o + l + sstride, PAD, ostride - l - sstride);
	}
}

/* The metadata of sample s, loaded at long side `size`, placed with
 * LetterBox scale r at (left, top). */
static void meta_fill(struct detect_meta *m, const struct detect_sample *s, uint32_t size, double r, int left, int top)
{
	uint32_t ow = s->orig_width ? s->orig_width : s->width, oh = s->orig_height ? s->orig_height : s->height;
	uint32_t rw, rh;

	detect_fit_size(ow, oh, size, &rw, &rh);
	*m = (struct detect_meta){
		.shape = {(int32_t)oh, (int32_t)ow, (int32_t)rh, (int32_t)rw},
		/* (resized_shape[0] / ori_shape[0]) * ratio_h, as LetterBox updates it */
		.ratio_pad = {(double)rh / oh * r, (double)rw / ow * r, left, top},
	};
}

/*
 * image = (image * r + other * (1 - r)).astype(uint8), with r in 8-bit fixed
 * point: within one unit of numpy's double, and 16-bit lanes vectorise.
 */
static void blend(uint8_t *image, const uint8_t *other, size_t n, double r)
{
	const uint16_t a = (uint16_t)lround(r * 256), b = (uint16_t)(256 - a);

	for (size_t i = 0; i < n; i++)
		image[i] = (uint8_t)((uint16_t)(image[i] * a + other[i] * b) >> 8);
}

/* floor(v / 4096) for |v| < 2^20, as the arithmetic right shift OpenCV relies on; no branch: hue signs are random */
static inline int shr12(int v)
{
	return ((v + (1 << 20)) >> 12) - (1 << 8);
}

/* The per-call tables of hsv_jitter, and the AVX2 kernel's arithmetic for the last four (hsv_arith). */
struct hsv_tables {
	const int *sdiv, *hdiv;
	int32_t lut_s[256], lut_v[256], sector[256], frac[256];
	uint32_t mul_s, mul_v, hue_shift;
};

/*
 * RGB2HSV, LUTs and HSV2RGB per pixel, branch-free (hue signs and sectors
 * are random); integers, so every build gives the same bytes.
 */
static void hsv_pixels(const struct hsv_tables *t, uint8_t *image, size_t pixels)
{
	/* H / 30 is the sector, H % 30 / 30 the fraction f: V (1 - S k) = V (7650 - S k) / 7650 */
	const uint32_t den = 255 * 30;

	for (size_t i = 0; i < pixels; i++) {
		int r = image[3 * i], g = image[3 * i + 1], b = image[3 * i + 2];
		int v = r > g ? r : g, vmin = r < g ? r : g;
		int diff, vr, vg, s, h, sec;
		uint32_t sv, vv, f, p, q, u;

		v = v > b ? v : b;
		vmin = vmin < b ? vmin : b;
		diff = v - vmin;
		vr = v == r ? -1 : 0;
		vg = v == g ? -1 : 0;
		s = (diff * t->sdiv[v] + (1 << 11)) >> 12;
		h = (vr & (g - b)) + (~vr & ((vg & (b - r + 2 * diff)) + ((~vg) & (r - g + 4 * diff))));
		h = shr12(h * t->hdiv[diff] + (1 << 11));
		h += h < 0 ? 180 : 0;

		sv = (uint32_t)t->lut_s[s];
		vv = (uint32_t)t->lut_v[v];
		f = (uint32_t)t->frac[h];
		sec = t->sector[h];
		p = vv * (den - sv * 30) / den;       /* V (1 - S) */
		q = vv * (den - sv * f) / den;        /* V (1 - S f) */
		u = vv * (den - sv * (30 - f)) / den; /* V (1 - S (1 - f)) */
		/* sectors 0..5 take (r, g, b) = (v, u, p) (q, v, p) (p, v, u) (p, q, v) (u, p, v) (v, p, q) */
		image[3 * i] = (uint8_t)(((sec == 0) | (sec == 5)) ? vv : sec == 1 ? q : sec == 4 ? u : p);
		image[3 * i + 1] = (uint8_t)(((sec == 1) | (sec == 2)) ? vv : sec == 0 ? u : sec == 3 ? q : p);
		image[3 * i + 2] = (uint8_t)(((sec == 3) | (sec == 4)) ? vv : sec == 2 ? u : sec == 5 ? q : p);
	}
}

/*
 * The multiplier M with min(x M >> 16, 255) == lut[x] for every x, lut a
 * clipped floor(x c): the least M the lower bounds lut[x] 2^16 / x allow.
 * The c that give the table lie between two fractions of denominators up
 * to 255, at least 1 / (255 * 254) > 2^-16 apart, so an M fits, unless
 * some x c rounded onto an integer in double (c = 0.35 - 2^-54: the table
 * is no c's); false then.
 */
static bool lut_mul(const int32_t *lut, uint32_t *mul)
{
	uint32_t m = 0;

	for (uint32_t x = 1; x < 256; x++) {
		uint32_t need = ((uint32_t)lut[x] * 65536 + x - 1) / x;

		m = need > m ? need : m;
	}
	for (uint32_t x = 0; x < 256; x++) {
		uint32_t y = x * m >> 16;

		if ((y > 255 ? 255 : y) != (uint32_t)lut[x])
			return false;
	}
	*mul = m;
	return true;
}

/*
 * The LUTs as arithmetic: saturation and value as lut_mul, hue as a shift
 * mod 180 (H never reaches 180). False, for the portable code, if the
 * tables are not exactly that.
 */
static bool hsv_arith(struct hsv_tables *t)
{
	t->hue_shift = (uint32_t)(t->sector[0] * 30 + t->frac[0]);
	for (uint32_t x = 0; x < 180; x++)
		if ((uint32_t)(t->sector[x] * 30 + t->frac[x]) != (x + t->hue_shift) % 180)
			return false;
	return lut_mul(t->lut_s, &t->mul_s) && lut_mul(t->lut_v, &t->mul_v);
}

#if DETECT_X86
/*
 * sdiv[x] and hdiv[x] (num 255 << 12 or 180 << 12 / 6) for 1 <= x <= 255:
 * round(num / x) without a tie, and the float quotient, correctly rounded,
 * stays on the same side of every half (checked: detect_check_arith).
 */
INLINE_AVX2 __m256i div_table_avx2(float num, __m256i x)
{
	return _mm256_cvtps_epi32(_mm256_div_ps(_mm256_set1_ps(num), _mm256_cvtepi32_ps(x)));
}

/*
 * ceil(n / 7650) for integers 0 <= n <= 255 * 7650 held exactly in floats:
 * (n + 7649.5) / 7650 is at least 0.5 / 7650 from an integer, farther than
 * the reciprocal's product errs (256 * 2^-23); checked for every n.
 */
INLINE_AVX2 __m256i ceil_den_avx2(__m256 n)
{
	return _mm256_cvttps_epi32(
		_mm256_mul_ps(_mm256_add_ps(n, _mm256_set1_ps(7649.5f)), _mm256_set1_ps(1.0f / 7650.0f)));
}

/* V - ceil(S V k / 7650) for 0 <= k <= 30, in 32-bit lanes: S V k < 2^21 is exact in floats. */
INLINE_AVX2 __m256i hsv_channel_avx2(__m256i vv, __m256 svv, __m256i k)
{
	return _mm256_sub_epi32(vv, ceil_den_avx2(_mm256_mul_ps(svv, _mm256_cvtepi32_ps(k))));
}

/*
 * hsv_pixels, 8 pixels a step in 32-bit lanes (4 per 128-bit lane), with
 * the division tables, LUTs and HSV2RGB's divisions by 7650 replaced by the
 * exact stand-ins above. HSV2RGB without sectors: each channel is
 * V (7650 - S k) / 7650 with k (30, f or 30 - f as the sector picks p, q
 * or u; 0 for V) the hue's distance from the channel's own, less 30,
 * clamped to [0, 30]. Returns the pixels done; reads 4 bytes past them.
 * hsv16_avx2 replaced it in hsv_jitter (1.3x faster, the same bytes); it
 * stays as the baseline that bench/hsv_kernels and test_hsv_kernels run
 * the 16-bit kernel against (detect_hsv_kernel).
 */
TARGET_AVX2 static size_t hsv_avx2(const struct hsv_tables *t, uint8_t *image, size_t pixels)
{
	const __m256i get_r =
		_mm256_broadcastsi128_si256(_mm_setr_epi8(0, -1, -1, -1, 3, -1, -1, -1, 6, -1, -1, -1, 9, -1, -1, -1));
	const __m256i get_g =
		_mm256_broadcastsi128_si256(_mm_setr_epi8(1, -1, -1, -1, 4, -1, -1, -1, 7, -1, -1, -1, 10, -1, -1, -1));
	const __m256i get_b =
		_mm256_broadcastsi128_si256(_mm_setr_epi8(2, -1, -1, -1, 5, -1, -1, -1, 8, -1, -1, -1, 11, -1, -1, -1));
	const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(1 << 11), zero = _mm256_setzero_si256();
	const __m256i c179 = _mm256_set1_epi32(179), c180 = _mm256_set1_epi32(180), c255 = _mm256_set1_epi32(255);
	const __m256i c30 = _mm256_set1_epi32(30), c60 = _mm256_set1_epi32(60), c120 = _mm256_set1_epi32(120);
	const __m256i mul_s = _mm256_set1_epi32((int)t->mul_s), mul_v = _mm256_set1_epi32((int)t->mul_v);
	const __m256i shift = _mm256_set1_epi32((int)t->hue_shift);
	size_t i = 0;

	for (; pixels - i >= 10; i += 8) {
		uint8_t *px = image + 3 * i;
		__m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)px)),
						    _mm_loadu_si128((const __m128i *)(px + 12)), 1);
		__m256i r = _mm256_shuffle_epi8(x, get_r), g = _mm256_shuffle_epi8(x, get_g);
		__m256i b = _mm256_shuffle_epi8(x, get_b);
		__m256i v = _mm256_max_epi32(_mm256_max_epi32(r, g), b);
		__m256i diff = _mm256_sub_epi32(v, _mm256_min_epi32(_mm256_min_epi32(r, g), b));
		__m256i vr = _mm256_cmpeq_epi32(v, r), vg = _mm256_cmpeq_epi32(v, g);
		__m256i s, h, sv, vv, kr, kg, kb, o;
		__m256 svv;

		/* a grey's diff is 0, whatever the divisor: 1 keeps the division finite */
		s = _mm256_mullo_epi32(diff, div_table_avx2(255 << 12, _mm256_max_epi32(v, one)));
		s = _mm256_srli_epi32(_mm256_add_epi32(s, half), 12);
		h = _mm256_blendv_epi8(_mm256_sub_epi32(_mm256_add_epi32(r, _mm256_slli_epi32(diff, 2)), g),
				       _mm256_sub_epi32(_mm256_add_epi32(b, _mm256_add_epi32(diff, diff)), r), vg);
		h = _mm256_blendv_epi8(h, _mm256_sub_epi32(g, b), vr);
		h = _mm256_mullo_epi32(h, div_table_avx2((180 << 12) / 6, _mm256_max_epi32(diff, one)));
		h = _mm256_srai_epi32(_mm256_add_epi32(h, half), 12);
		h = _mm256_add_epi32(h, _mm256_and_si256(_mm256_cmpgt_epi32(zero, h), c180));

		sv = _mm256_min_epu32(_mm256_srli_epi32(_mm256_mullo_epi32(s, mul_s), 16), c255);
		vv = _mm256_min_epu32(_mm256_srli_epi32(_mm256_mullo_epi32(v, mul_v), 16), c255);
		h = _mm256_add_epi32(h, shift);
		h = _mm256_sub_epi32(h, _mm256_and_si256(_mm256_cmpgt_epi32(h, c179), c180));

		/* red's hue is 0 (and 180), green's 60, blue's 120 */
		kr = _mm256_sub_epi32(_mm256_min_epi32(h, _mm256_sub_epi32(c180, h)), c30);
		kg = _mm256_sub_epi32(_mm256_abs_epi32(_mm256_sub_epi32(h, c60)), c30);
		kb = _mm256_sub_epi32(_mm256_abs_epi32(_mm256_sub_epi32(h, c120)), c30);
		svv = _mm256_cvtepi32_ps(_mm256_mullo_epi16(sv, vv));
		r = hsv_channel_avx2(vv, svv, _mm256_min_epi32(_mm256_max_epi32(kr, zero), c30));
		g = hsv_channel_avx2(vv, svv, _mm256_min_epi32(_mm256_max_epi32(kg, zero), c30));
		b = hsv_channel_avx2(vv, svv, _mm256_min_epi32(_mm256_max_epi32(kb, zero), c30));
		o = _mm256_or_si256(r, _mm256_or_si256(_mm256_slli_epi32(g, 8), _mm256_slli_epi32(b, 16)));
		store_rgb8_avx2(px, o);
	}
	return i;
}

/*
 * ceil(P k / 7650) for 0 <= P <= 255^2 and 0 <= k <= 30, from q = P / 7650
 * in floats: q k + 7649.5 / 7650 errs by under 3.1e-5 (three roundings),
 * less than the 0.5 / 7650 that keeps it from an integer; checked for every
 * (P, k) (detect_check_arith).
 */
INLINE_AVX2 __m256i ceil_pk_avx2(__m256 q, __m256i k)
{
	return _mm256_cvttps_epi32(
		_mm256_add_ps(_mm256_mul_ps(q, _mm256_cvtepi32_ps(k)), _mm256_set1_ps(7649.5f / 7650.0f)));
}

/* V - ceil(P k / 7650) in 16-bit lanes; q holds P / 7650 of the low and the high 4 pixels of each 128-bit lane. */
INLINE_AVX2 __m256i hsv_channel16_avx2(__m256i vv, __m256 qlo, __m256 qhi, __m256i k)
{
	const __m256i zero = _mm256_setzero_si256();
	__m256i lo = ceil_pk_avx2(qlo, _mm256_unpacklo_epi16(k, zero));
	__m256i hi = ceil_pk_avx2(qhi, _mm256_unpackhi_epi16(k, zero));

	return _mm256_sub_epi16(vv, _mm256_packus_epi32(lo, hi));
}

/* min(x M >> 16, 255) for x <= 255, M = mh 2^16 + ml <= 255 2^16, exactly in 16-bit lanes: x mh + (x ml >> 16) */
INLINE_AVX2 __m256i lut16_avx2(__m256i x, __m256i mh, __m256i ml)
{
	return _mm256_min_epu16(_mm256_add_epi16(_mm256_mullo_epi16(x, mh), _mm256_mulhi_epu16(x, ml)),
				_mm256_set1_epi16(255));
}

/*
 * round(num / x) x d >> 12 (d the division table's operand; OpenCV's
 * s and h) for 16-bit lanes, in 32-bit lanes (the tables' values need 20
 * bits): the low and high halves of each 128-bit lane, packed back (signed
 * saturation: the results lie in -30..255). sign: d's sign word per lane.
 */
INLINE_AVX2 __m256i div_mul16_avx2(float num, __m256i x, __m256i d, __m256i sign)
{
	const __m256i zero = _mm256_setzero_si256(), half = _mm256_set1_epi32(1 << 11);
	__m256i lo =
		_mm256_mullo_epi32(_mm256_unpacklo_epi16(d, sign), div_table_avx2(num, _mm256_unpacklo_epi16(x, zero)));
	__m256i hi =
		_mm256_mullo_epi32(_mm256_unpackhi_epi16(d, sign), div_table_avx2(num, _mm256_unpackhi_epi16(x, zero)));

	lo = _mm256_srai_epi32(_mm256_add_epi32(lo, half), 12);
	hi = _mm256_srai_epi32(_mm256_add_epi32(hi, half), 12);
	return _mm256_packs_epi32(lo, hi);
}

/*
 * hsv_avx2's arithmetic, 16 pixels a step in 16-bit lanes (8 per 128-bit
 * lane): only the two division-table products (20-bit tables) and
 * HSV2RGB's division by 7650 widen to 32-bit lanes, the rest (RGB2HSV's
 * max, min and hue numerator, the LUTs, the hue shift, the sector
 * distances k, S'V') runs on twice the pixels an instruction. Each 128-bit
 * lane's 8 pixels (24 bytes) come from two overlapping 16-byte loads.
 * Returns the pixels done; reads and writes nothing past them.
 */
TARGET_AVX2 static size_t hsv16_avx2(const struct hsv_tables *t, uint8_t *image, size_t pixels)
{
	int8_t m[10][16];
	__m256i sel[10];
	const __m256i one = _mm256_set1_epi16(1), zero = _mm256_setzero_si256();
	const __m256i c179 = _mm256_set1_epi16(179), c180 = _mm256_set1_epi16(180);
	const __m256i c30 = _mm256_set1_epi16(30), c60 = _mm256_set1_epi16(60), c120 = _mm256_set1_epi16(120);
	const __m256i sh = _mm256_set1_epi16((short)(t->mul_s >> 16)), sl = _mm256_set1_epi16((short)t->mul_s);
	const __m256i vh = _mm256_set1_epi16((short)(t->mul_v >> 16)), vl = _mm256_set1_epi16((short)t->mul_v);
	const __m256i shift = _mm256_set1_epi16((short)t->hue_shift);
	const __m256 rden = _mm256_set1_ps(1.0f / 7650.0f);
	size_t i = 0;

	/*
	 * Byte shuffles, per 128-bit lane of 8 pixels at bytes 0..23: a (bytes
	 * 0..15) and b (bytes 8..23) to channel c's words (m[c], m[3 + c]);
	 * words r | g << 8 and b to output bytes 0..15 (m[6], m[7]) and 16..23
	 * (m[8], m[9]).
	 */
	memset(m, -1, sizeof(m));
	for (int j = 0; j < 8; j++)
		for (int c = 0; c < 3; c++) {
			int at = 3 * j + c;

			if (at < 16)
				m[c][2 * j] = (int8_t)at;
			else
				m[3 + c][2 * j] = (int8_t)(at - 8);
		}
	for (int o = 0; o < 24; o++) {
		/* output byte o: pixel o / 3's channel o % 3, byte o % 3 of word o / 3 of rg, or of b */
		int8_t *to = m[o < 16 ? 6 : 8], *tb = m[o < 16 ? 7 : 9];

		if (o % 3 < 2)
			to[o % 16] = (int8_t)(2 * (o / 3) + o % 3);
		else
			tb[o % 16] = (int8_t)(2 * (o / 3));
	}
	for (int k = 0; k < 10; k++)
		sel[k] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)m[k]));

	for (; pixels - i >= 16; i += 16) {
		uint8_t *px = image + 3 * i;
		__m256i a = _mm256_loadu2_m128i((const __m128i *)(px + 24), (const __m128i *)px);
		__m256i bb = _mm256_loadu2_m128i((const __m128i *)(px + 32), (const __m128i *)(px + 8));
		__m256i r = _mm256_or_si256(_mm256_shuffle_epi8(a, sel[0]), _mm256_shuffle_epi8(bb, sel[3]));
		__m256i g = _mm256_or_si256(_mm256_shuffle_epi8(a, sel[1]), _mm256_shuffle_epi8(bb, sel[4]));
		__m256i b = _mm256_or_si256(_mm256_shuffle_epi8(a, sel[2]), _mm256_shuffle_epi8(bb, sel[5]));
		__m256i v = _mm256_max_epi16(_mm256_max_epi16(r, g), b);
		__m256i diff = _mm256_sub_epi16(v, _mm256_min_epi16(_mm256_min_epi16(r, g), b));
		__m256i vr = _mm256_cmpeq_epi16(v, r), vg = _mm256_cmpeq_epi16(v, g);
		__m256i s, h, sv, vv, p, kr, kg, kb, rg, x, y;
		__m256 qlo, qhi;

		/* a grey's diff is 0, whatever the divisor: 1 keeps the division finite */
		s = div_mul16_avx2(255 << 12, _mm256_max_epi16(v, one), diff, zero);
		h = _mm256_blendv_epi8(_mm256_sub_epi16(_mm256_add_epi16(r, _mm256_slli_epi16(diff, 2)), g),
				       _mm256_sub_epi16(_mm256_add_epi16(b, _mm256_add_epi16(diff, diff)), r), vg);
		h = _mm256_blendv_epi8(h, _mm256_sub_epi16(g, b), vr);
		h = div_mul16_avx2((180 << 12) / 6, _mm256_max_epi16(diff, one), h, _mm256_srai_epi16(h, 15));
		h = _mm256_add_epi16(h, _mm256_and_si256(_mm256_cmpgt_epi16(zero, h), c180));

		sv = lut16_avx2(s, sh, sl);
		vv = lut16_avx2(v, vh, vl);
		h = _mm256_add_epi16(h, shift);
		h = _mm256_sub_epi16(h, _mm256_and_si256(_mm256_cmpgt_epi16(h, c179), c180));

		/* red's hue is 0 (and 180), green's 60, blue's 120 */
		kr = _mm256_sub_epi16(_mm256_min_epi16(h, _mm256_sub_epi16(c180, h)), c30);
		kg = _mm256_sub_epi16(_mm256_abs_epi16(_mm256_sub_epi16(h, c60)), c30);
		kb = _mm256_sub_epi16(_mm256_abs_epi16(_mm256_sub_epi16(h, c120)), c30);
		p = _mm256_mullo_epi16(sv, vv); /* S'V' <= 255^2: the low 16 bits, unsigned */
		qlo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_unpacklo_epi16(p, zero)), rden);
		qhi = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_unpackhi_epi16(p, zero)), rden);
		r = hsv_channel16_avx2(vv, qlo, qhi, _mm256_min_epi16(_mm256_max_epi16(kr, zero), c30));
		g = hsv_channel16_avx2(vv, qlo, qhi, _mm256_min_epi16(_mm256_max_epi16(kg, zero), c30));
		b = hsv_channel16_avx2(vv, qlo, qhi, _mm256_min_epi16(_mm256_max_epi16(kb, zero), c30));

		rg = _mm256_or_si256(r, _mm256_slli_epi16(g, 8));
		x = _mm256_or_si256(_mm256_shuffle_epi8(rg, sel[6]), _mm256_shuffle_epi8(b, sel[7]));
		y = _mm256_or_si256(_mm256_shuffle_epi8(rg, sel[8]), _mm256_shuffle_epi8(b, sel[9]));
		_mm_storeu_si128((__m128i *)px, _mm256_castsi256_si128(x));
		_mm_storel_epi64((__m128i *)(px + 16), _mm256_castsi256_si128(y));
		_mm_storeu_si128((__m128i *)(px + 24), _mm256_extracti128_si256(x, 1));
		_mm_storel_epi64((__m128i *)(px + 40), _mm256_extracti128_si256(y, 1));
	}
	return i;
}

/* The stand-ins' exact ones, one value a lane; false where any lane differs. */
TARGET_AVX2 static bool avx2_matches(__m256i got, const int32_t want[8])
{
	return _mm256_movemask_epi8(_mm256_cmpeq_epi32(got, _mm256_loadu_si256((const __m256i *)want))) == -1;
}

/* detect_check_arith's AVX2 part: the stand-ins over all their inputs. */
TARGET_AVX2 static long check_arith_avx2(void)
{
	int sdiv[256], hdiv[256];
	long bad = 0;

	div_tables(sdiv, hdiv);
	for (int x = 1; x < 256; x += 8) {
		int32_t in[8], ws[8], wh[8];

		for (int k = 0; k < 8; k++) {
			in[k] = x + k < 256 ? x + k : 255;
			ws[k] = sdiv[in[k]];
			wh[k] = hdiv[in[k]];
		}
		bad += !avx2_matches(div_table_avx2(255 << 12, _mm256_loadu_si256((const __m256i *)in)), ws);
		bad += !avx2_matches(div_table_avx2((180 << 12) / 6, _mm256_loadu_si256((const __m256i *)in)), wh);
	}
	for (int32_t n = 0; n <= 255 * 7650; n += 8) {
		int32_t in[8], want[8];

		for (int k = 0; k < 8; k++) {
			in[k] = n + k <= 255 * 7650 ? n + k : 255 * 7650;
			want[k] = (in[k] + 7649) / 7650;
		}
		bad += !avx2_matches(ceil_den_avx2(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)in))), want);
	}
	for (int32_t n = 0; n <= 255 * 255; n += 8) {
		int32_t in[8];
		__m256 q;

		for (int k = 0; k < 8; k++)
			in[k] = n + k <= 255 * 255 ? n + k : 255 * 255;
		q = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)in)),
				  _mm256_set1_ps(1.0f / 7650.0f));
		for (int32_t k = 0; k <= 30; k++) {
			int32_t want[8];

			for (int j = 0; j < 8; j++)
				want[j] = (in[j] * k + 7649) / 7650;
			bad += !avx2_matches(ceil_pk_avx2(q, _mm256_set1_epi32(k)), want);
		}
	}
	return bad;
}
#endif

/*
 * RandomHSV: cv2.cvtColor(RGB2HSV) (OpenCV's 8-bit integer conversion, H in
 * 0..179), the three LUTs of Ultralytics 8.4, then HSV2RGB's sector formula
 * in integers, truncated as OpenCV's vector path does (its float arithmetic
 * can land one below). Our pixels are RGB where Ultralytics' are BGR: the
 * same conversion with the other blue index.
 */
static void hsv_tables_fill(struct hsv_tables *t, const double gain[3])
{
	for (int x = 0; x < 256; x++) {
		/* ((x + r * 180) % 180).astype(uint8): Python's modulo is never negative */
		double h = fmod(x + gain[0] * 180.0, 180.0), s = x * (gain[1] + 1.0), v = x * (gain[2] + 1.0);
		int hi;

		if (h < 0)
			h += 180.0;
		hi = (int)h % 180;
		t->sector[x] = hi / 30;
		t->frac[x] = hi % 30;
		t->lut_s[x] = (int32_t)(s < 0 ? 0 : s > 255 ? 255 : s);
		t->lut_v[x] = (int32_t)(v < 0 ? 0 : v > 255 ? 255 : v);
	}
	t->lut_s[0] = 0; /* 8.3.79: pure white keeps its colour */
}

static void hsv_jitter(const struct detect *d, uint8_t *image, size_t pixels, const double gain[3])
{
	struct hsv_tables t = {.sdiv = d->sdiv, .hdiv = d->hdiv};
	size_t done = 0;

	hsv_tables_fill(&t, gain);
#if DETECT_X86
	if (d->avx2 && hsv_arith(&t))
		done = hsv16_avx2(&t, image, pixels);
#endif
	hsv_pixels(&t, image + 3 * done, pixels - done);
}

int detect_hsv_kernel(int kernel, const double gain[3], uint8_t *image, size_t pixels)
{
	struct hsv_tables t;
	int sdiv[256], hdiv[256];
	size_t done = 0;

	div_tables(sdiv, hdiv);
	t.sdiv = sdiv;
	t.hdiv = hdiv;
	hsv_tables_fill(&t, gain);
	if (kernel != 0) {
#if DETECT_X86
		if (!avx2_runs() || !hsv_arith(&t))
			return -ENOTSUP;
		done = kernel == 1 ? hsv_avx2(&t, image, pixels) : hsv16_avx2(&t, image, pixels);
#else
		return -ENOTSUP;
#endif
	}
	hsv_pixels(&t, image + 3 * done, pixels - done);
	return 0;
}

/*
 * For the unit test: the AVX2 kernels' stand-ins (division tables, the
 * division by 7650) against the exact values over every input they can
 * see, and hsv_arith's cover of drawn gains (where it fails, the portable
 * code runs: slower, the same bytes). The number of mismatches and
 * failures, or -ENOTSUP without AVX2.
 */
long detect_check_arith(void)
{
	struct rng r;
	long bad = 0;

	if (!avx2_runs())
		return -ENOTSUP;
	rng_init(&r, 7, 0, 0, RNG_AUGMENT);
	for (uint32_t k = 0; k < 100000; k++) {
		double gain[3] = {rng_range(&r, -1, 1), rng_range(&r, -1, 1), rng_range(&r, -1, 1)};
		struct hsv_tables t;

		hsv_tables_fill(&t, gain);
		bad += !hsv_arith(&t);
	}
#if DETECT_X86
	bad += check_arith_avx2();
#endif
	return bad;
}

/* ---- loading ---- */

static int load_checked(detect_load_fn load, void *ctx, uint64_t index, uint32_t side, struct detect_sample *s)
{
	int r;

	*s = (struct detect_sample){0};
	r = load(ctx, index, side, s);
	if (r < 0)
		return r;
	/* load_image's contract: long side `side`, neither side beyond it */
	if (!s->pixels || s->width == 0 || s->height == 0 || s->width > side || s->height > side ||
	    (s->box_count && !s->boxes))
		return -EINVAL;
	return 0;
}

/* A mosaic or mixup partner: the drawn index, else the next ones that load. */
static int load_partner(detect_load_fn load, void *ctx, uint64_t index, uint64_t count, uint32_t side,
			struct detect_sample *s)
{
	int r = -EIO;

	for (unsigned t = 0; t < PARTNER_TRIES && t < count; t++) {
		r = load_checked(load, ctx, index, side, s);
		if (r >= 0)
			return 0;
		if (++index == count)
			index = 0;
	}
	return r;
}

/* Grow box array `which` to hold `n` more than `have`. */
static int boxes_reserve(struct detect *d, int which, size_t have, size_t n)
{
	void *p = d->boxes[which];
	int r = grow(&p, &d->boxes_cap[which], have + n, sizeof(struct dbox));

	d->boxes[which] = p;
	return r;
}

/*
 * Append the sample's boxes to box array `which` in pixels: denormalised to
 * its w x h, clipped to it, shifted by (padw, padh). Boxes with no area are
 * left out. Returns the new count.
 */
static size_t append_boxes(struct detect *d, int which, size_t n, const struct detect_sample *s, double padw,
			   double padh)
{
	struct dbox *out = d->boxes[which];

	for (uint32_t i = 0; i < s->box_count; i++) {
		const struct detect_box *b = &s->boxes[i];
		double x1 = fmin(fmax((b->cx - b->w / 2.0) * s->width, 0.0), s->width);
		double x2 = fmin(fmax((b->cx + b->w / 2.0) * s->width, 0.0), s->width);
		double y1 = fmin(fmax((b->cy - b->h / 2.0) * s->height, 0.0), s->height);
		double y2 = fmin(fmax((b->cy + b->h / 2.0) * s->height, 0.0), s->height);

		/* NaN fails here too */
		if (!(x2 > x1 && y2 > y1))
			continue;
		out[n++] = (struct dbox){
			b->cls, (float)(x1 + padw), (float)(y1 + padh), (float)(x2 + padw), (float)(y2 + padh), i};
	}
	return n;
}

/* ---- one image: mosaic or letterbox, then RandomPerspective ---- */

struct job {
	struct detect *d;
	const struct detect_params *p;
	uint32_t size;
	uint32_t out_w, out_h; /* size x size, but for rect training (no mosaic, mixup or cutmix) */
	uint64_t count;
	detect_load_fn load;
	void *ctx;
	bool flipud, fliplr;
	struct detect_meta *meta;            /* the primary sample's, published on success */
	const struct detect_instances *inst; /* NULL: boxes only */
	const struct cp_draw *cpd;           /* CopyPaste mode mixup's draws, or NULL */
};

/* ---- instances (detect_output.inst) ---- */

/* Room in `b` for n instances of npts segment points and nkpt keypoints; b->s set to that shape. */
static int inst_reserve(struct inst_buf *b, uint32_t n, uint32_t npts, uint32_t nkpt)
{
	size_t per = 1 + 4 + (size_t)npts * 2 + (size_t)nkpt * 3;
	void *p = b->mem;
	int r;

	if ((uint64_t)n * npts > INSTMASK_MAX_IMAGE_POINTS || (uint64_t)n * nkpt > INSTMASK_MAX_IMAGE_POINTS)
		return -EFBIG; /* a hostile label fails its sample */
	r = grow(&p, &b->cap, (size_t)n * per + 1, sizeof(float));
	b->mem = p;
	if (r < 0)
		return r;
	b->s = (struct instgeom_set){.n = n, .npts = npts, .nkpt = nkpt, .cls = b->mem, .box = b->mem + n};
	b->s.seg = npts ? b->s.box + (size_t)n * 4 : NULL;
	b->s.kpt = nkpt ? b->s.box + (size_t)n * (4 + (size_t)npts * 2) : NULL;
	return 0;
}

/* instgeom's scratch for sets of up to npts points and nkpt keypoints. */
static int inst_scratch(struct detect *d, uint32_t npts, uint32_t nkpt)
{
	size_t a = instgeom_obb_scratch_floats(npts), b = instgeom_scratch_floats(npts), need = (size_t)nkpt * 3;
	void *p = d->iscratch;
	int r;

	need = a > need ? a : need;
	need = b > need ? b : need;
	r = grow(&p, &d->iscratch_cap, need + 1, sizeof(float));
	d->iscratch = p;
	return r;
}

/*
 * A sample's labels as YOLODataset.update_labels_info leaves them (boxes
 * xywh normalised, segments resampled, keypoints normalised) into `b`.
 */
static int inst_from_sample(struct detect *d, struct inst_buf *b, const struct detect_sample *s,
			    const struct detect_instances *in)
{
	uint32_t n = s->box_count, longest = 0, npts = 0;
	int r;

	if (in->seg_points) {
		for (uint32_t k = 0; k < n; k++) {
			uint64_t np = s->seg_off ? s->seg_off[k + 1] - s->seg_off[k] : 0;

			if (np == 0)
				n = 0; /* an object without a polygon: the sample carries none (as its validation) */
			longest = np > longest ? (uint32_t)(np < INSTGEOM_MAX_POINTS ? np : INSTGEOM_MAX_POINTS)
					       : longest;
		}
		if (longest >= INSTGEOM_MAX_POINTS)
			return -EFBIG;
		npts = instmask_resample_count(longest, in->seg_points);
	}
	if (in->nkpt && n && !s->kpt)
		return -EINVAL;
	r = inst_reserve(b, n, npts, in->nkpt);
	if (r == 0)
		r = inst_scratch(d, npts, in->nkpt);
	if (r < 0)
		return r;
	for (uint32_t k = 0; k < n; k++) {
		const struct detect_box *x = &s->boxes[k];
		float *o = b->s.box + (size_t)k * 4;

		b->s.cls[k] = x->cls;
		o[0] = x->cx, o[1] = x->cy, o[2] = x->w, o[3] = x->h;
		if (npts)
			instmask_resample(s->seg + s->seg_off[k] * 2, (uint32_t)(s->seg_off[k + 1] - s->seg_off[k]),
					  npts, b->s.seg + (size_t)k * npts * 2);
	}
	if (in->nkpt && n)
		memcpy(b->s.kpt, s->kpt, (size_t)n * in->nkpt * 3 * sizeof(float));
	return 0;
}

/* Instances.concatenate of `count` sets into `out` (room for all at the longest point count). */
static int inst_cat(struct detect *d, const struct inst_buf *parts, uint32_t count, struct inst_buf *out)
{
	struct instgeom_set sets[4];
	uint32_t n = 0, npts = 0;
	int r;

	for (uint32_t i = 0; i < count; i++) {
		sets[i] = parts[i].s;
		n += sets[i].n;
		npts = sets[i].npts > npts ? sets[i].npts : npts;
	}
	r = inst_reserve(out, n, npts, count ? sets[0].nkpt : 0);
	if (r == 0)
		r = inst_scratch(d, npts, count ? sets[0].nkpt : 0);
	if (r < 0)
		return r;
	instgeom_cat(sets, count, &out->s);
	return 0;
}

/* The affine draws as instgeom takes them. */
static void inst_affine(const struct image_draw *im, int in_w, int in_h, uint32_t out_w, uint32_t out_h, float M[9])
{
	const struct instgeom_affine_draw a = {im->persp_x, im->persp_y, im->angle,   im->scale,
					       im->shear_x, im->shear_y, im->trans_x, im->trans_y};

	instgeom_affine_matrix(&a, in_w, in_h, (int)out_w, (int)out_h, M);
}

/*
 * The sample's instances (d->out: image 1's, the mixup's and CutMix's),
 * RandomFlip's (boxes to xywh, the flips with flip_idx), then Format's rows,
 * keypoints and xywhr for the first max_boxes of them.
 */
static int inst_finish(struct detect *d, const struct detect_instances *in, const struct plan *pl,
		       const struct detect_output *o, uint32_t *written, uint64_t *dropped)
{
	const int w = (int)o->out_w, h = (int)o->out_h;
	struct instgeom_set v;
	uint32_t k;
	void *p = d->fmt;
	int r;

	instgeom_xywh(&d->out.s);
	if (pl->flipud)
		instgeom_flip(&d->out.s, true, (float)h, in->flip_idx, d->iscratch);
	if (pl->fliplr)
		instgeom_flip(&d->out.s, false, (float)w, in->flip_idx, d->iscratch);
	v = d->out.s;
	k = v.n < o->max_boxes ? v.n : o->max_boxes;
	v.n = k;
	r = grow(&p, &d->fmt_cap, (size_t)k * 4 + 1, sizeof(float));
	d->fmt = p;
	if (r < 0)
		return r;
	r = instgeom_format(&v, w, h, false, true, d->fmt, in->nkpt ? o->kpt : NULL, d->iscratch);
	if (r == 0 && in->obb)
		r = instgeom_format(&v, w, h, true, true, o->xywhr, NULL, d->iscratch);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < k; i++) {
		float *row = o->boxes + (size_t)i * DETECT_BOX_FLOATS;

		row[0] = 0.0f;
		row[1] = v.cls[i];
		memcpy(row + 2, d->fmt + (size_t)i * 4, 4 * sizeof(float));
	}
	*written = k;
	*dropped += d->out.s.n - k;
	return 0;
}

const struct instgeom_set *detect_instances_result(const struct detect *d)
{
	return d ? &d->out.s : NULL;
}

/* ---- CopyPaste (Ultralytics' CopyPaste with segments: flip mode before the affine) ---- */

/* Whether image `which`'s CopyPaste is flip mode's, on the image before the affine. */
static bool copy_paste_flip_on(const struct job *j)
{
	return j->inst && j->inst->seg_points && j->p->copy_paste > 0 &&
	       j->p->copy_paste_mode == DETECT_COPY_PASTE_FLIP;
}

/*
 * CopyPaste(mode="flip") on image `which`'s instances (xyxy pixels of a w x
 * h image, segments): the chosen mirrors appended (instgeom), their mask
 * made (d->cp) for copypaste_row; *count of them (0: nothing to paste).
 */
static int copy_paste_flip(struct detect *d, int which, uint32_t w, uint32_t h, double fraction, uint32_t *count)
{
	struct instgeom_set *s = &d->inst[which].s, *o;
	uint32_t n = s->n, k;
	struct inst_buf tmp;
	void *p = d->cpsel;
	int r;

	*count = 0;
	if (!d->cp && (r = copypaste_new(&d->cp)) < 0)
		return r;
	r = grow(&p, &d->cpsel_cap, (size_t)n + 1, sizeof(uint32_t));
	d->cpsel = p;
	if (r == 0)
		r = inst_scratch(d, s->npts,
				 s->nkpt); /* n floats: below instgeom_scratch_floats(npts) only if n > npts */
	if (r == 0 && n > s->npts) {
		p = d->iscratch;
		r = grow(&p, &d->iscratch_cap, (size_t)n + 1, sizeof(float));
		d->iscratch = p;
	}
	if (r < 0)
		return r;
	k = instgeom_copy_paste_select(s, (int)w, fraction, d->cpsel, d->iscratch);
	if (k == 0)
		return 0;
	r = inst_reserve(&d->cpbuf, n + k, s->npts, s->nkpt);
	if (r < 0)
		return r;
	o = &d->cpbuf.s;
	memcpy(o->cls, s->cls, (size_t)n * sizeof(float));
	memcpy(o->box, s->box, (size_t)n * 4 * sizeof(float));
	memcpy(o->seg, s->seg, (size_t)n * s->npts * 2 * sizeof(float));
	if (s->nkpt)
		memcpy(o->kpt, s->kpt, (size_t)n * s->nkpt * 3 * sizeof(float));
	o->n = n;
	instgeom_copy_paste_append(o, (int)w, d->cpsel, k);
	tmp = d->inst[which];
	d->inst[which] = d->cpbuf;
	d->cpbuf = tmp;
	/* the mask of the appended mirrors, instances n .. n + k - 1 */
	for (uint32_t i = 0; i < k; i++)
		d->cpsel[i] = n + i;
	r = copypaste_mask(d->cp, w, h, d->inst[which].s.seg, d->inst[which].s.npts, d->cpsel, k);
	if (r < 0)
		return r;
	*count = k;
	return 0;
}

/* Fill [a, b) of a canvas row with PAD except [c0, c1), the patch's part. */
static void fill_except(uint8_t *row, int64_t a, int64_t b, int64_t c0, int64_t c1)
{
	if (c0 >= c1) {
		c0 = b;
		c1 = b;
	}
	if (c0 > a)
		memset(row + a * 3, PAD, (size_t)((c0 < b ? c0 : b) - a) * 3);
	if (c1 < b)
		memset(row + (c1 > a ? c1 : a) * 3, PAD, (size_t)(b - (c1 > a ? c1 : a)) * 3);
}

/* img4[y1a:y2a, x1a:x2a] = img[y1b:y2b, x1b:x2b], within the canvas rectangle rect that the warp reads. */
static void canvas_copy(uint8_t *canvas, size_t cstride, const int64_t rect[4], const uint8_t *pix, size_t stride,
			int64_t x1a, int64_t y1a, int64_t x2a, int64_t y2a, int64_t x1b, int64_t y1b)
{
	const int64_t x0 = x1a > rect[0] ? x1a : rect[0], x1 = x2a < rect[2] ? x2a : rect[2];

	for (int64_t y = y1a > rect[1] ? y1a : rect[1]; x0 < x1 && y < y2a && y < rect[3]; y++)
		memcpy(canvas + (size_t)y * cstride + (size_t)x0 * 3,
		       pix + (size_t)(y - y1a + y1b) * stride + (size_t)(x0 - x1a + x1b) * 3, (size_t)(x1 - x0) * 3);
}

/*
 * Mosaic._mosaic4 on the 2size x 2size canvas, boxes into box array
 * `which`. Only the canvas rectangle [rx0, rx1) x [ry0, ry1) that the warp
 * reads is written. `primary`: `index` is the sample itself, whose failure
 * is the caller's error; else a partner, replaced when it fails. With
 * `lazy` (the warp will be separable) and all four samples stable, no
 * canvas is written: *lazy says where each sample lands, and the warp makes
 * the canvas rows it reads one at a time (lazy->rows set); else lazy->rows
 * stays NULL.
 */
static int mosaic4(const struct job *j, const struct image_draw *im, uint64_t index, bool primary, int which,
		   const int64_t rect[4], struct lazy_canvas *lazy, size_t *nboxes)
{
	struct detect *d = j->d;
	const int64_t s2 = 2 * (int64_t)j->size, xc = im->xc, yc = im->yc;
	const size_t cstride = (size_t)s2 * 3;
	int64_t place[4][4]; /* x1a, y1a, x2a, y2a */
	bool deferred[4] = {false, false, false, false}, all_stable = lazy != NULL;
	size_t n = 0;
	uint64_t t = prof_now(d);
	int r = 0;

	for (int i = 0; i < 4; i++) {
		struct detect_sample s;
		int64_t w, h, x1a, y1a, x2a, y2a, x1b, y1b;

		prof_lap(d, DETECT_STAGE_BOXES, &t);
		if (i == 0 && primary) {
			r = load_checked(j->load, j->ctx, index, j->size, &s);
			if (r == 0)
				meta_fill(j->meta, &s, j->size, 1.0, 0, 0);
		} else
			r = load_partner(j->load, j->ctx, i == 0 ? index : im->partner[i - 1], j->count, j->size, &s);
		prof_lap(d, DETECT_STAGE_LOAD, &t);
		if (r < 0)
			goto out;
		w = s.width;
		h = s.height;
		if (i == 0) { /* top left */
			x1a = xc - w > 0 ? xc - w : 0, y1a = yc - h > 0 ? yc - h : 0, x2a = xc, y2a = yc;
			x1b = w - (x2a - x1a), y1b = h - (y2a - y1a);
		} else if (i == 1) { /* top right */
			x1a = xc, y1a = yc - h > 0 ? yc - h : 0, x2a = xc + w < s2 ? xc + w : s2, y2a = yc;
			x1b = 0, y1b = h - (y2a - y1a);
		} else if (i == 2) { /* bottom left */
			x1a = xc - w > 0 ? xc - w : 0, y1a = yc, x2a = xc, y2a = yc + h < s2 ? yc + h : s2;
			x1b = w - (x2a - x1a), y1b = 0;
		} else { /* bottom right */
			x1a = xc, y1a = yc, x2a = xc + w < s2 ? xc + w : s2, y2a = yc + h < s2 ? yc + h : s2;
			x1b = 0, y1b = 0;
		}
		place[i][0] = x1a;
		place[i][1] = y1a;
		place[i][2] = x2a;
		place[i][3] = y2a;

		if (lazy) {
			lazy->q[i].pix = s.pixels;
			lazy->q[i].stride = (size_t)s.width * 3;
			lazy->q[i].x1a = x1a, lazy->q[i].y1a = y1a, lazy->q[i].x2a = x2a, lazy->q[i].y2a = y2a;
			lazy->q[i].x1b = x1b, lazy->q[i].y1b = y1b;
		}
		/* a sample whose pixels the next load may take is copied now; a stable one may wait */
		deferred[i] = lazy && s.stable;
		all_stable = all_stable && s.stable;
		if (!deferred[i])
			canvas_copy(d->canvas, cstride, rect, s.pixels, (size_t)s.width * 3, x1a, y1a, x2a, y2a, x1b,
				    y1b);
		prof_lap(d, DETECT_STAGE_CANVAS, &t);

		r = boxes_reserve(d, which, n, s.box_count);
		if (r < 0)
			goto out;
		n = append_boxes(d, which, n, &s, (double)(x1a - x1b), (double)(y1a - y1b));
		if (j->inst) {
			/* Mosaic._update_labels: the tile's instances denormalised and moved by its padding */
			r = inst_from_sample(d, &d->tile[i], &s, j->inst);
			if (r < 0)
				goto out;
			instgeom_place(&d->tile[i].s, (int)w, (int)h, (int)(x1a - x1b), (int)(y1a - y1b));
		}
	}

	prof_lap(d, DETECT_STAGE_BOXES, &t);
	if (all_stable) {
		lazy->yc = yc;
		lazy->x0 = lazy->x1 = 0;
		lazy->row_y[0] = lazy->row_y[1] = -1;
		lazy->rows = d->canvas;
		goto labels;
	}
	for (int i = 0; i < 4; i++)
		if (deferred[i])
			canvas_copy(d->canvas, cstride, rect, lazy->q[i].pix, lazy->q[i].stride, lazy->q[i].x1a,
				    lazy->q[i].y1a, lazy->q[i].x2a, lazy->q[i].y2a, lazy->q[i].x1b, lazy->q[i].y1b);
	/* 114 where no patch landed: each row holds a left patch (0 or 2) and a right one (1 or 3) */
	for (int64_t y = rect[1]; y < rect[3]; y++) {
		uint8_t *row = d->canvas + (size_t)y * cstride;
		const int64_t *L = place[y < yc ? 0 : 2], *R = place[y < yc ? 1 : 3];
		bool inl = y >= L[1] && y < L[3], inr = y >= R[1] && y < R[3];
		int64_t mid_lo = xc < rect[0] ? rect[0] : xc > rect[2] ? rect[2] : xc;

		fill_except(row, rect[0], mid_lo, inl ? L[0] : 0, inl ? L[2] : 0);
		fill_except(row, mid_lo, rect[2], inr ? R[0] : 0, inr ? R[2] : 0);
	}
	prof_lap(d, DETECT_STAGE_CANVAS, &t);

labels:
	if (j->inst) {
		/* _cat_labels: the four concatenated, clipped to the canvas, zero-area ones removed */
		struct inst_buf *o = &d->inst[which];

		r = inst_cat(d, d->tile, 4, o);
		if (r < 0)
			goto out;
		if (j->inst->obb)
			instgeom_clip_obb(&o->s, (int)s2, (int)s2, d->iscratch);
		else
			instgeom_clip(&o->s, (int)s2, (int)s2);
		instgeom_remove_zero_area(&o->s);
	}
	/* _cat_labels: clip to the canvas, drop boxes with no area */
	{
		struct dbox *b = d->boxes[which];
		size_t k = 0;

		for (size_t i = 0; i < n; i++) {
			struct dbox c = b[i];

			c.x1 = fminf(fmaxf(c.x1, 0.0f), (float)s2);
			c.x2 = fminf(fmaxf(c.x2, 0.0f), (float)s2);
			c.y1 = fminf(fmaxf(c.y1, 0.0f), (float)s2);
			c.y2 = fminf(fmaxf(c.y2, 0.0f), (float)s2);
			if ((c.x2 - c.x1) * (c.y2 - c.y1) > 0)
				b[k++] = c;
		}
		n = k;
	}
	*nboxes = n;
	prof_lap(d, DETECT_STAGE_BOXES, &t);
out:
	return r;
}

/*
 * RandomPerspective's boxes: corners through M, min/max, clipped to the
 * output, kept by box_candidates against the originals times the drawn scale.
 */
static size_t perspective_boxes(struct dbox *b, size_t n, const double M[9], bool perspective, double scale,
				uint32_t ow, uint32_t oh)
{
	const double eps = 1e-16;
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		const double cx[4] = {b[i].x1, b[i].x2, b[i].x1, b[i].x2}, cy[4] = {b[i].y1, b[i].y2, b[i].y2, b[i].y1};
		double x1 = INFINITY, y1 = INFINITY, x2 = -INFINITY, y2 = -INFINITY, w1, h1, w2, h2, ar;

		for (int c = 0; c < 4; c++) {
			double x = M[0] * cx[c] + M[1] * cy[c] + M[2], y = M[3] * cx[c] + M[4] * cy[c] + M[5];

			if (perspective) {
				double w = M[6] * cx[c] + M[7] * cy[c] + M[8];

				x /= w;
				y /= w;
			}
			x1 = fmin(x1, x);
			x2 = fmax(x2, x);
			y1 = fmin(y1, y);
			y2 = fmax(y2, y);
		}
		x1 = fmin(fmax(x1, 0.0), ow);
		x2 = fmin(fmax(x2, 0.0), ow);
		y1 = fmin(fmax(y1, 0.0), oh);
		y2 = fmin(fmax(y2, 0.0), oh);
		w1 = ((double)b[i].x2 - b[i].x1) * scale;
		h1 = ((double)b[i].y2 - b[i].y1) * scale;
		w2 = x2 - x1;
		h2 = y2 - y1;
		ar = fmax(w2 / (h2 + eps), h2 / (w2 + eps));
		/* box_candidates(wh_thr=2, ar_thr=100, area_thr=0.1); NaN fails */
		if (w2 > 2 && h2 > 2 && w2 * h2 / (w1 * h1 + eps) > 0.1 && ar < 100)
			b[k++] = (struct dbox){b[i].cls, (float)x1, (float)y1, (float)x2, (float)y2, b[i].src};
	}
	return k;
}

/* The canvas rectangle [x0, x1) x [y0, y1) an affine warp reads from an in_size square. */
static void read_rect(const double inv[9], bool perspective, uint32_t size, int64_t in_size, int64_t rect[4])
{
	double x0 = INFINITY, y0 = INFINITY, x1 = -INFINITY, y1 = -INFINITY;

	if (perspective) { /* the quadrilateral may wrap through infinity: read it all */
		rect[0] = rect[1] = 0;
		rect[2] = rect[3] = in_size;
		return;
	}
	for (int c = 0; c < 4; c++) {
		double x = (c & 1) ? size - 1.0 : 0.0, y = (c & 2) ? size - 1.0 : 0.0;
		double sx = inv[0] * x + inv[1] * y + inv[2], sy = inv[3] * x + inv[4] * y + inv[5];

		x0 = fmin(x0, sx);
		x1 = fmax(x1, sx);
		y0 = fmin(y0, sy);
		y1 = fmax(y1, sy);
	}
	/* two pixels of margin for single-precision rounding and the bilinear neighbour */
	x0 = floor(x0) - 2;
	y0 = floor(y0) - 2;
	x1 = ceil(x1) + 3;
	y1 = ceil(y1) + 3;
	rect[0] = !(x0 > 0) ? 0 : x0 > in_size ? in_size : (int64_t)x0;
	rect[1] = !(y0 > 0) ? 0 : y0 > in_size ? in_size : (int64_t)y0;
	rect[2] = !(x1 > 0) ? 0 : x1 > in_size ? in_size : (int64_t)x1;
	rect[3] = !(y1 > 0) ? 0 : y1 > in_size ? in_size : (int64_t)y1;
	if (!(x0 == x0 && x1 == x1 && y0 == y0 && y1 == y1)) { /* NaN: a degenerate map */
		rect[0] = rect[1] = 0;
		rect[2] = rect[3] = in_size;
	}
}

/*
 * Mosaic (or the sample alone) then RandomPerspective, into out_w x out_h
 * `out` (size x size with mosaic), flipped as asked; its boxes in box
 * array `which`.
 */
static int make_image(const struct job *j, const struct image_draw *im, uint64_t index, bool primary, int which,
		      uint8_t *out, size_t *nboxes);

/*
 * CopyPaste(mode="mixup") on image `which` (its pixels `out`, made flipped
 * as the job says; its instances after RandomPerspective): its partner made
 * as image 1 is (mosaic + affine, instances in d->inst[2], pixels in
 * d->cut), the partner's instances instgeom chooses appended (their classes
 * theirs) and their pixels pasted through the same flips.
 */
static int copy_paste_mixup(const struct job *j, int which, uint8_t *out)
{
	struct detect *d = j->d;
	const uint32_t size = j->size;
	struct instgeom_set *theirs = &d->inst[2].s, *g;
	struct inst_buf parts[2], tmp;
	uint32_t k;
	size_t nb;
	void *p = d->cut;
	int r;

	r = grow(&p, &d->cut_cap, (size_t)size * size * 3, 1);
	d->cut = p;
	if (r == 0 && !d->cp)
		r = copypaste_new(&d->cp);
	if (r == 0)
		r = make_image(j, &j->cpd[which].img, j->cpd[which].index, false, 2, d->cut, &nb);
	if (r < 0)
		return r;
	p = d->cpsel;
	r = grow(&p, &d->cpsel_cap, (size_t)theirs->n + 1, sizeof(uint32_t));
	d->cpsel = p;
	if (r == 0) {
		p = d->iscratch;
		r = grow(&p, &d->iscratch_cap, (size_t)theirs->n + 1, sizeof(float));
		d->iscratch = p;
	}
	if (r < 0)
		return r;
	k = instgeom_copy_paste_select_from(&d->inst[which].s, theirs, j->p->copy_paste, d->cpsel, d->iscratch);
	if (k == 0)
		return 0;
	r = copypaste_mask(d->cp, size, size, theirs->seg, theirs->npts, d->cpsel, k);
	if (r < 0)
		return r;
	copypaste_image_flipped(d->cp, out, (size_t)size * 3, d->cut, (size_t)size * 3, j->flipud, j->fliplr);
	/* Instances.concatenate([instances, instances2[selected]]) */
	r = inst_reserve(&d->cpbuf, k, theirs->npts, theirs->nkpt);
	if (r < 0)
		return r;
	g = &d->cpbuf.s;
	for (uint32_t i = 0; i < k; i++) {
		const uint32_t s = d->cpsel[i];

		g->cls[i] = theirs->cls[s];
		memcpy(g->box + (size_t)i * 4, theirs->box + (size_t)s * 4, 4 * sizeof(float));
		memcpy(g->seg + (size_t)i * theirs->npts * 2, theirs->seg + (size_t)s * theirs->npts * 2,
		       (size_t)theirs->npts * 2 * sizeof(float));
		if (theirs->nkpt)
			memcpy(g->kpt + (size_t)i * theirs->nkpt * 3, theirs->kpt + (size_t)s * theirs->nkpt * 3,
			       (size_t)theirs->nkpt * 3 * sizeof(float));
	}
	parts[0] = d->inst[which];
	parts[1] = d->cpbuf;
	r = inst_cat(d, parts, 2, &d->out); /* d->out is free until inst_finish */
	if (r < 0)
		return r;
	tmp = d->inst[which];
	d->inst[which] = d->out;
	d->out = tmp;
	return 0;
}

static int make_image(const struct job *j, const struct image_draw *im, uint64_t index, bool primary, int which,
		      uint8_t *out, size_t *nboxes)
{
	struct detect *d = j->d;
	const uint32_t size = j->size, ow = j->out_w, oh = j->out_h;
	/* `if self.perspective:` chooses warpPerspective and the division */
	bool perspective = j->p->perspective != 0;
	double M[9], inv[9];
	float M32[9]; /* with instances: Ultralytics' float32 matrix, for the warp and the instances */
	const bool cp_flip = copy_paste_flip_on(j);
	uint32_t pasted = 0;
	size_t n = 0;
	uint64_t t;
	int r;

	if (j->inst && which > 2)
		return -EOPNOTSUPP;
	if (im->mosaic) {
		const int64_t s2 = 2 * (int64_t)size;
		int64_t rect[4];
		void *p = d->canvas;
		struct source src = {.stride = (size_t)s2 * 3, .w = (int)s2, .h = (int)s2};

		r = grow(&p, &d->canvas_cap, (size_t)s2 * (size_t)s2 * 3, 1);
		d->canvas = p;
		if (r < 0)
			goto out;
		struct lazy_canvas lazy = {.rows = NULL};
		int64_t m[6];

		/* border -size/2 each side: the input is the 2size canvas, the output size */
		if (j->inst) {
			inst_affine(im, (int)s2, (int)s2, size, size, M32);
			for (int k = 0; k < 9; k++)
				M[k] = M32[k];
		} else {
			affine_matrix(im, (double)s2, (double)s2, size, size, M);
		}
		invert_map(M, perspective, inv);
		read_rect(inv, perspective, size, s2, rect);
		if (cp_flip) { /* CopyPaste reads each row's mirror: whole rows, made before the warp */
			rect[0] = 0;
			rect[2] = s2;
		}
		/* the separable warp (warp()'s choice) can make the canvas rows it reads one at a time */
		r = mosaic4(j, im, index, primary, which, rect,
			    !cp_flip && !perspective && inv[1] == 0 && inv[3] == 0 &&
					    fix_map(&src, inv, size, size, WX_BITS, WY_BITS, m)
				    ? &lazy
				    : NULL,
			    &n);
		if (r == 0 && cp_flip)
			r = copy_paste_flip(d, which, (uint32_t)s2, (uint32_t)s2, j->p->copy_paste, &pasted);
		if (r < 0)
			goto out;
		for (int64_t y = rect[1]; pasted && y < rect[3]; y++)
			copypaste_row(d->cp, (uint32_t)y, d->canvas + (size_t)y * src.stride, NULL);
		src.pix = d->canvas;
		src.lazy = lazy.rows ? &lazy : NULL;
		t = prof_now(d);
		r = warp(d, &src, inv, perspective, out, size, size, j->flipud, j->fliplr);
		prof_lap(d, DETECT_STAGE_WARP, &t);
		if (r < 0)
			goto out;
	} else {
		/* RandomPerspective of load_image's output itself (Ultralytics 8.4
		 * has no LetterBox before it): its centre to the output's, an
		 * output of out_w x out_h (a rect batch's shape, else size x size) */
		struct detect_sample s;
		int x, y;

		t = prof_now(d);
		if (primary)
			r = load_checked(j->load, j->ctx, index, size, &s);
		else
			r = load_partner(j->load, j->ctx, index, j->count, size, &s);
		prof_lap(d, DETECT_STAGE_LOAD, &t);
		if (r < 0)
			goto out;
		if (primary)
			meta_fill(j->meta, &s, size, 1.0, 0, 0);
		if (j->inst) {
			/* the sample's instances, denormalised: RandomPerspective's input */
			r = inst_from_sample(d, &d->inst[which], &s, j->inst);
			if (r < 0)
				goto out;
			instgeom_place(&d->inst[which].s, (int)s.width, (int)s.height, 0, 0);
			if (cp_flip) {
				r = copy_paste_flip(d, which, s.width, s.height, j->p->copy_paste, &pasted);
				if (r < 0)
					goto out;
			}
			if (pasted) { /* load_image's pixels are the loader's: pasted on a copy */
				void *p = d->canvas;
				const size_t bytes = (size_t)s.width * s.height * 3;

				r = grow(&p, &d->canvas_cap, bytes, 1);
				d->canvas = p;
				if (r < 0)
					goto out;
				memcpy(d->canvas, s.pixels, bytes);
				copypaste_image(d->cp, d->canvas, (size_t)s.width * 3, NULL, 0);
				s.pixels = d->canvas;
			}
		}
		r = boxes_reserve(d, which, 0, s.box_count);
		if (r < 0)
			goto out;
		n = append_boxes(d, which, 0, &s, 0, 0);
		if (j->inst) {
			inst_affine(im, (int)s.width, (int)s.height, ow, oh, M32);
			for (int k = 0; k < 9; k++)
				M[k] = M32[k];
		} else {
			affine_matrix(im, s.width, s.height, ow, oh, M);
		}
		prof_lap(d, DETECT_STAGE_BOXES, &t);
		if (whole_shift(M, s.width, s.height, ow, oh, &x, &y)) {
			letterbox_copy(&s, x, y, out, ow, oh, j->flipud, j->fliplr);
			prof_lap(d, DETECT_STAGE_COPY, &t);
		} else {
			struct source src = {s.pixels, (size_t)s.width * 3, (int)s.width, (int)s.height, 0, 0, NULL};

			invert_map(M, perspective, inv);
			r = warp(d, &src, inv, perspective, out, ow, oh, j->flipud, j->fliplr);
			prof_lap(d, DETECT_STAGE_WARP, &t);
			if (r < 0)
				goto out;
		}
	}
	t = prof_now(d);
	*nboxes = perspective_boxes(d->boxes[which], n, M, perspective, im->scale, ow, oh);
	if (j->inst)
		instgeom_perspective(&d->inst[which].s, M32, (float)im->scale, (int)ow, (int)oh, perspective,
				     j->inst->obb, d->iscratch, NULL);
	prof_lap(d, DETECT_STAGE_BOXES, &t);
	/* CopyPaste mode mixup, after RandomPerspective (image 1 and the MixUp partner; its own partner: none) */
	r = which < 2 && j->cpd && j->cpd[which].apply && d->inst[which].s.n ? copy_paste_mixup(j, which, out) : 0;
out:
	return r;
}

/* ---- the output ---- */

/* Rows of (0, cls, cx, cy, w, h), normalised, flipped as asked. */
static void write_boxes(const struct dbox *b, size_t n, uint32_t width, uint32_t height, bool flipud, bool fliplr,
			float *out, uint32_t max_boxes, uint32_t *written, uint64_t *dropped, uint32_t *src)
{
	const double fw = width, fh = height;
	uint32_t k = 0;

	for (size_t i = 0; i < n; i++) {
		double x1 = b[i].x1, y1 = b[i].y1, x2 = b[i].x2, y2 = b[i].y2;
		float *o;

		if (!(x2 > x1 && y2 > y1))
			continue;
		if (k == max_boxes) {
			(*dropped)++;
			continue;
		}
		if (fliplr) {
			double t = x1;

			x1 = fw - x2;
			x2 = fw - t;
		}
		if (flipud) {
			double t = y1;

			y1 = fh - y2;
			y2 = fh - t;
		}
		if (src)
			src[k] = b[i].src;
		o = out + (size_t)k++ * DETECT_BOX_FLOATS;
		o[0] = 0.0f;
		o[1] = b[i].cls;
		o[2] = (float)((x1 + x2) / 2.0 / fw);
		o[3] = (float)((y1 + y2) / 2.0 / fh);
		o[4] = (float)((x2 - x1) / fw);
		o[5] = (float)((y2 - y1) / fh);
	}
	*written = k;
}

/* ---- CutMix (Ultralytics' CutMix on boxes: get_params, apply_image, apply_instances) ---- */

static int cutmix_pack(struct cutmix_sets *c, const struct dbox *const sets[3], const size_t counts[3])
{
	size_t n = counts[0] + counts[1], m = counts[2];
	void *p = c->floats, *q = c->idx;
	int r = grow(&p, &c->floats_cap, 5 * (n + m) + 1, sizeof(float));

	c->floats = p;
	if (r == 0)
		r = grow(&q, &c->idx_cap, m + 1, sizeof(uint32_t));
	c->idx = q;
	if (r < 0)
		return r;
	c->mine = (struct instgeom_set){.n = (uint32_t)n, .cls = c->floats, .box = c->floats + n};
	c->theirs = (struct instgeom_set){.n = (uint32_t)m, .cls = c->floats + 5 * n, .box = c->floats + 5 * n + m};
	for (int set = 0, k = 0; set < 3; set++)
		for (size_t i = 0; i < counts[set]; i++, k++) {
			struct instgeom_set *to = set < 2 ? &c->mine : &c->theirs;
			size_t at = set < 2 ? (size_t)k : i;
			const struct dbox *b = &sets[set][i];

			to->cls[at] = b->cls;
			to->box[at * 4] = b->x1;
			to->box[at * 4 + 1] = b->y1;
			to->box[at * 4 + 2] = b->x2;
			to->box[at * 4 + 3] = b->y2;
		}
	return 0;
}

/*
 * The area CutMix pastes into: of its 3 drawn areas (_rand_bbox), those
 * that cover no part of the image's boxes, one chosen by the draw. False
 * when none does (CutMix skips the image).
 */
static bool cutmix_area(const struct cutmix_draw *cm, uint32_t size, const struct instgeom_set *mine, float area[4])
{
	float areas[CUTMIX_AREAS][4];
	uint32_t free_idx[CUTMIX_AREAS], nv;

	for (int k = 0; k < CUTMIX_AREAS; k++) {
		/* int(width * sqrt(1 - lam)); the corners clipped to the image */
		int64_t cw = (int64_t)(size * sqrt(1.0 - cm->lam[k])), ch = cw, s = size;
		int64_t c[4] = {cm->cx[k] - cw / 2, cm->cy[k] - ch / 2, cm->cx[k] + cw / 2, cm->cy[k] + ch / 2};

		for (int e = 0; e < 4; e++)
			areas[k][e] = (float)(c[e] < 0 ? 0 : c[e] > s ? s : c[e]);
	}
	nv = instgeom_cutmix_free_areas(&areas[0][0], CUTMIX_AREAS, mine, free_idx);
	if (nv == 0)
		return false;
	memcpy(area, areas[free_idx[(uint32_t)(cm->choice * nv)]], sizeof(areas[0]));
	return true;
}

/* The partner's boxes CutMix keeps (instgeom_cutmix_select, 10 % of a box
 * in the area), clipped to it (instgeom_cutmix_piece), back into its box
 * set in place. Their number. */
static size_t cutmix_boxes(struct dbox *b, struct instgeom_set *theirs, const float area[4], uint32_t *idx)
{
	uint32_t k = instgeom_cutmix_select(area, theirs, 0.1f, idx);
	struct instgeom_set piece = {.n = k, .cls = theirs->cls, .box = theirs->box};

	/* gather the kept rows to the front (idx ascends), then clip them */
	for (uint32_t i = 0; i < k; i++) {
		theirs->cls[i] = theirs->cls[idx[i]];
		memmove(theirs->box + (size_t)i * 4, theirs->box + (size_t)idx[i] * 4, 4 * sizeof(float));
	}
	instgeom_cutmix_piece(&piece, area, false, NULL);
	for (uint32_t i = 0; i < k; i++) {
		uint32_t src = b[idx[i]].src;

		b[i] = (struct dbox){theirs->cls[i],         theirs->box[i * 4],     theirs->box[i * 4 + 1],
				     theirs->box[i * 4 + 2], theirs->box[i * 4 + 3], src};
	}
	return k;
}

/*
 * CutMix on the finished image (after MixUp, as v8_transforms orders them):
 * the partner made as image 1 is, only when an area is free; its pixels
 * in the area (flipped as the image is: the warp folded the flips in) and
 * its kept boxes in box set 2 (their number in *kept, 0 when skipped).
 */
static void cutmix_paste(const struct job *j, const float area[4], uint8_t *image);

/* CutMix's partner, made as image 1 is, into d->cut (its boxes in box set 2, their number in *count). */
static int cutmix_partner(const struct job *j, const struct cutmix_draw *cm, size_t *count)
{
	struct detect *d = j->d;
	void *m = d->cut;
	int r = grow(&m, &d->cut_cap, (size_t)j->size * j->size * 3, 1);

	d->cut = m;
	if (r < 0)
		return r;
	return make_image(j, &cm->img, cm->index, false, 2, d->cut, count);
}

static int cutmix(const struct job *j, const struct cutmix_draw *cm, uint8_t *image, const size_t n[2], bool mixup,
		  size_t *kept)
{
	struct detect *d = j->d;
	const uint32_t size = j->size;
	size_t counts[3] = {n[0], mixup ? n[1] : 0, 0};
	const struct dbox *sets[3] = {d->boxes[0], d->boxes[1], d->boxes[2]};
	float area[4];
	int r;

	*kept = 0;
	r = cutmix_pack(&d->cutmix, sets, counts);
	if (r < 0)
		return r;
	if (!cutmix_area(cm, size, &d->cutmix.mine, area))
		return 0;
	r = cutmix_partner(j, cm, &counts[2]);
	if (r < 0)
		return r;
	sets[2] = d->boxes[2];
	r = cutmix_pack(&d->cutmix, sets, counts);
	if (r < 0)
		return r;
	counts[2] = cutmix_boxes(d->boxes[2], &d->cutmix.theirs, area, d->cutmix.idx);
	if (counts[2] == 0)
		return 0; /* no partner box in the area: CutMix skips */
	cutmix_paste(j, area, image);
	*kept = counts[2];
	return 0;
}

/* CutMix's apply_image: the partner's pixels (d->cut) in the area, flipped as the image is. */
static void cutmix_paste(const struct job *j, const float area[4], uint8_t *image)
{
	const struct detect *d = j->d;
	const uint32_t size = j->size;
	int64_t x1, y1, x2, y2;

	x1 = (int64_t)area[0], y1 = (int64_t)area[1], x2 = (int64_t)area[2], y2 = (int64_t)area[3];
	if (j->fliplr) {
		int64_t t = x1;

		x1 = size - x2;
		x2 = size - t;
	}
	if (j->flipud) {
		int64_t t = y1;

		y1 = size - y2;
		y2 = size - t;
	}
	for (int64_t y = y1; y < y2; y++)
		memcpy(image + ((size_t)y * size + (size_t)x1) * 3, d->cut + ((size_t)y * size + (size_t)x1) * 3,
		       (size_t)(x2 - x1) * 3);
}

/*
 * CutMix with instances: the area chosen among those free of the image's
 * instances (d->out, after MixUp), the partner made as image 1 is, its
 * instances whose bbox_ioa with the area reaches 0.01 (the image has
 * segments) or 0.1, cut to the area (instgeom_cutmix_piece) and appended.
 */
static int cutmix_inst(const struct job *j, const struct cutmix_draw *cm, uint8_t *image)
{
	struct detect *d = j->d;
	const uint32_t size = j->size;
	struct inst_buf *theirs = &d->inst[2], *piece = &d->tile[0], tmp;
	size_t nboxes = 0;
	void *q = d->cutmix.idx;
	float area[4], thr;
	uint32_t k;
	int r;

	if (!cutmix_area(cm, size, &d->out.s, area))
		return 0;
	r = cutmix_partner(j, cm, &nboxes);
	if (r < 0)
		return r;
	r = grow(&q, &d->cutmix.idx_cap, (size_t)theirs->s.n + 1, sizeof(uint32_t));
	d->cutmix.idx = q;
	if (r < 0)
		return r;
	/* 0.01 if len(labels["instances"].segments) else 0.1 */
	thr = d->out.s.npts && d->out.s.n ? 0.01f : 0.1f;
	k = instgeom_cutmix_select(area, &theirs->s, thr, d->cutmix.idx);
	if (k == 0)
		return 0; /* no partner instance in the area: CutMix skips */
	r = inst_reserve(piece, k, theirs->s.npts, theirs->s.nkpt);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < k; i++) {
		const uint32_t x = d->cutmix.idx[i];
		const size_t np = (size_t)theirs->s.npts * 2, nk = (size_t)theirs->s.nkpt * 3;

		piece->s.cls[i] = theirs->s.cls[x];
		memcpy(piece->s.box + (size_t)i * 4, theirs->s.box + (size_t)x * 4, 4 * sizeof(float));
		if (np)
			memcpy(piece->s.seg + i * np, theirs->s.seg + x * np, np * sizeof(float));
		if (nk)
			memcpy(piece->s.kpt + i * nk, theirs->s.kpt + x * nk, nk * sizeof(float));
	}
	instgeom_cutmix_piece(&piece->s, area, j->inst->obb, d->iscratch);
	{
		const struct inst_buf parts[2] = {d->out, *piece};

		r = inst_cat(d, parts, 2, &d->mixed);
	}
	if (r < 0)
		return r;
	tmp = d->out, d->out = d->mixed, d->mixed = tmp;
	cutmix_paste(j, area, image);
	return 0;
}

/* For the tests: CutMix's area choice and box rule on given boxes
 * (rows of cls, x1, y1, x2, y2), with given draws. 1: applied (area and
 * partner's kept boxes out), 0: skipped; -ENOMEM. */
int detect_cutmix_geometry(uint32_t size, const double lam[3], const int64_t cx[3], const int64_t cy[3], double choice,
			   const float *boxes, size_t n, float *partner, size_t *n_partner, float area[4])
{
	struct cutmix_draw cm = {.choice = choice};
	struct cutmix_sets c = {.floats = NULL};
	struct dbox *a = calloc(n + 1, sizeof(*a)), *b = calloc(*n_partner + 1, sizeof(*b));
	size_t counts[3] = {n, 0, *n_partner};
	int r = -ENOMEM;

	if (!a || !b)
		goto out;
	memcpy(cm.lam, lam, sizeof(cm.lam));
	memcpy(cm.cx, cx, sizeof(cm.cx));
	memcpy(cm.cy, cy, sizeof(cm.cy));
	for (size_t i = 0; i < n; i++)
		a[i] = (struct dbox){boxes[i * 5],     boxes[i * 5 + 1], boxes[i * 5 + 2],
				     boxes[i * 5 + 3], boxes[i * 5 + 4], 0};
	for (size_t i = 0; i < *n_partner; i++)
		b[i] = (struct dbox){partner[i * 5],     partner[i * 5 + 1], partner[i * 5 + 2],
				     partner[i * 5 + 3], partner[i * 5 + 4], 0};
	r = cutmix_pack(&c, (const struct dbox *const[3]){a, NULL, b}, counts);
	if (r < 0)
		goto out;
	r = 0;
	if (cutmix_area(&cm, size, &c.mine, area)) {
		*n_partner = cutmix_boxes(b, &c.theirs, area, c.idx);
		for (size_t i = 0; i < *n_partner; i++) {
			float *o = partner + i * 5;

			o[0] = b[i].cls, o[1] = b[i].x1, o[2] = b[i].y1, o[3] = b[i].x2, o[4] = b[i].y2;
		}
		r = *n_partner > 0;
	}
out:
	free(c.floats);
	free(c.idx);
	free(a);
	free(b);
	return r;
}

int detect_make(struct detect *d, enum detect_transform t, const struct detect_params *p, uint32_t size, uint64_t index,
		uint64_t count, struct rng *rng, detect_load_fn load, void *ctx, const struct detect_output *o)
{
	/* The metadata is staged here: *o->meta is written only on success. */
	struct detect_meta meta = {{0}, {0}};
	struct job j = {d, p, size, o->out_w, o->out_h, count, load, ctx, false, false, &meta, NULL, NULL};
	size_t n[3] = {0, 0, 0};
	uint64_t dropped = 0;
	uint32_t written = 0, max_boxes;
	uint8_t *image;
	float *boxes;
	struct cutmix_draw cm;
	struct cp_draw cpd[2];
	struct plan pl;
	uint64_t tm;
	int r;

	if (!d || !load || !o || !o->image || (!o->boxes && o->max_boxes) || !o->box_count || !o->boxes_dropped ||
	    size == 0 || size > DETECT_MAX_SIZE || count == 0 || index >= count ||
	    (t != DETECT_LETTERBOX && t != DETECT_TRAIN) || o->out_w == 0 || o->out_h == 0 ||
	    o->out_w > DETECT_MAX_SIZE || o->out_h > DETECT_MAX_SIZE)
		return -EINVAL;
	/* rect training (an output other than size x size): Ultralytics turns mosaic, mixup and cutmix off */
	if (t == DETECT_TRAIN && (!p || !rng || detect_params_check(p, NULL, 0) < 0 ||
				  ((o->out_w != size || o->out_h != size) && (p->mosaic || p->mixup || p->cutmix))))
		return -EINVAL;
	if (t == DETECT_TRAIN && o->inst) {
		if ((o->inst->nkpt && !o->kpt) || (o->inst->obb && (!o->xywhr || !o->inst->seg_points)) ||
		    (o->max_boxes && !o->boxes))
			return -EINVAL;
		if (p->copy_paste > 0 && p->copy_paste_mode == DETECT_COPY_PASTE_MIXUP && o->inst->seg_points &&
		    (o->out_w != size || o->out_h != size))
			return -EOPNOTSUPP; /* CopyPaste's mixup mode in rect batches: not built */
		if (p->copy_paste > 0 && p->copy_paste_mode == DETECT_COPY_PASTE_MIXUP && o->inst->seg_points &&
		    p->cutmix > 0)
			return -EOPNOTSUPP; /* CutMix's partner would need its own CopyPaste partner: not built */
		j.inst = o->inst;
	}
	image = o->image;
	boxes = o->boxes;
	max_boxes = o->max_boxes;

	if (t == DETECT_LETTERBOX) {
		struct detect_sample s;
		struct detect_letterbox g;
		uint32_t rw, rh;

		tm = prof_now(d);
		r = load_checked(load, ctx, index, size, &s);
		prof_lap(d, DETECT_STAGE_LOAD, &tm);
		if (r < 0)
			goto out;
		/* Where LetterBox puts load_image's output; the loader already
		 * shrank it if the batch's shape needs that. */
		detect_fit_size(s.orig_width ? s.orig_width : s.width, s.orig_height ? s.orig_height : s.height, size,
				&rw, &rh);
		detect_letterbox_geometry(rw, rh, o->out_w, o->out_h, &g);
		if (s.width > o->out_w || s.height > o->out_h) {
			r = -EINVAL;
			goto out;
		}
		if (s.width != g.w || s.height != g.h)
			detect_letterbox_geometry(s.width, s.height, o->out_w, o->out_h, &g); /* a loader's own size */
		if (s.placed) {
			struct detect_letterbox at;

			/* where the loader put it: the same place, as g.w == s.width and g.h == s.height */
			detect_letterbox_geometry(s.width, s.height, o->out_w, o->out_h, &at);
			if (s.pixels != image || at.left != g.left || at.top != g.top) {
				r = -EINVAL;
				goto out;
			}
		}
		meta_fill(&meta, &s, size, g.r, g.left, g.top);
		r = boxes_reserve(d, 0, 0, s.box_count);
		if (r < 0)
			goto out;
		n[0] = append_boxes(d, 0, 0, &s, g.left, g.top);
		prof_lap(d, DETECT_STAGE_BOXES, &tm);
		if (!s.placed)
			letterbox_copy(&s, g.left, g.top, image, o->out_w, o->out_h, false, false);
		prof_lap(d, DETECT_STAGE_COPY, &tm);
		write_boxes(d->boxes[0], n[0], o->out_w, o->out_h, false, false, boxes, max_boxes, &written, &dropped,
			    o->rows_src);
		prof_lap(d, DETECT_STAGE_BOXES, &tm);
		goto done;
	}

	draw_plan(&pl, p, size, count, rng);
	draw_cutmix(&cm, p, size, count, rng);
	if (j.inst && j.inst->seg_points && p->copy_paste > 0 && p->copy_paste_mode == DETECT_COPY_PASTE_MIXUP) {
		draw_copy_paste(cpd, p, size, count, rng);
		j.cpd = cpd;
	}
	j.flipud = pl.flipud;
	j.fliplr = pl.fliplr;
	r = make_image(&j, &pl.img[0], index, true, 0, image, &n[0]);
	if (r < 0)
		goto out;
	if (pl.mixup) {
		size_t bytes = (size_t)size * size * 3;
		void *m = d->mix;

		r = grow(&m, &d->mix_cap, bytes, 1);
		d->mix = m;
		if (r < 0)
			goto out;
		r = make_image(&j, &pl.img[1], pl.mix_index, false, 1, d->mix, &n[1]);
		if (r < 0)
			goto out;
		tm = prof_now(d);
		blend(image, d->mix, bytes, pl.beta);
		prof_lap(d, DETECT_STAGE_MIXUP, &tm);
	}
	if (j.inst) {
		/* MixUp's Instances.concatenate (image 1's alone without it) */
		r = inst_cat(d, d->inst, pl.mixup ? 2 : 1, &d->out);
		if (r < 0)
			goto out;
	}
	if (cm.apply) {
		r = j.inst ? cutmix_inst(&j, &cm, image) : cutmix(&j, &cm, image, n, pl.mixup, &n[2]);
		if (r < 0)
			goto out;
	}
	if (o->before_hsv) {
		r = o->before_hsv(o->before_hsv_ctx, image, o->out_w, o->out_h, pl.flipud, pl.fliplr);
		if (r < 0)
			goto out;
	}
	tm = prof_now(d);
	if (p->hsv_h != 0 || p->hsv_s != 0 || p->hsv_v != 0)
		hsv_jitter(d, image, (size_t)o->out_w * o->out_h, pl.gain);
	prof_lap(d, DETECT_STAGE_HSV, &tm);

	if (j.inst) {
		r = inst_finish(d, j.inst, &pl, o, &written, &dropped);
		prof_lap(d, DETECT_STAGE_BOXES, &tm);
		if (r < 0)
			goto out;
		goto done;
	}

	write_boxes(d->boxes[0], n[0], o->out_w, o->out_h, pl.flipud, pl.fliplr, boxes, max_boxes, &written, &dropped,
		    NULL);
	if (pl.mixup) {
		uint32_t more = 0;

		write_boxes(d->boxes[1], n[1], size, size, pl.flipud, pl.fliplr,
			    boxes ? boxes + (size_t)written * DETECT_BOX_FLOATS : NULL, max_boxes - written, &more,
			    &dropped, NULL);
		written += more;
	}
	if (n[2]) {
		uint32_t more = 0;

		write_boxes(d->boxes[2], n[2], size, size, pl.flipud, pl.fliplr,
			    boxes ? boxes + (size_t)written * DETECT_BOX_FLOATS : NULL, max_boxes - written, &more,
			    &dropped, NULL);
		written += more;
	}
	prof_lap(d, DETECT_STAGE_BOXES, &tm);
done:
	*o->box_count = written;
	*o->boxes_dropped += dropped;
	if (o->meta)
		*o->meta = meta;
	r = 0;
out:
	return r;
}

int detect_run(struct detect *d, enum detect_transform t, const struct detect_params *p, uint32_t size, uint64_t index,
	       uint64_t count, struct rng *rng, detect_load_fn load, void *ctx, uint8_t *image, float *boxes,
	       uint32_t max_boxes, uint32_t *box_count, uint64_t *boxes_dropped)
{
	struct detect_output o = {.image = image,
				  .out_w = size,
				  .out_h = size,
				  .boxes = boxes,
				  .max_boxes = max_boxes,
				  .box_count = box_count,
				  .boxes_dropped = boxes_dropped};

	return detect_make(d, t, p, size, index, count, rng, load, ctx, &o);
}
