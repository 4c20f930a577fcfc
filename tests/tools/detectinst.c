/* SPDX-License-Identifier: MIT */
/*
 * detectinst: one DETECT_TRAIN sample with instances (daemon/pixels/detect.c,
 * detect_output.inst) made from given samples, and the draws it made, for
 * tests/ultralytics/test_train_instances.py against Ultralytics' own
 * Mosaic, RandomPerspective, MixUp, RandomFlip and Format on the same draws.
 *
 *   stdin:  SIZE OUT_W OUT_H SEED INDEX COUNT SEG_POINTS NKPT OBB MAX_BOXES
 *           (OUT_W x OUT_H: SIZE x SIZE, or a rect batch's shape)
 *           hsv_h hsv_s hsv_v degrees translate scale shear perspective
 *           flipud fliplr mosaic mixup copy_paste copy_paste_mode (0 flip, 1 mixup)
 *           cutmix
 *           NFLIP, then NFLIP flip_idx entries (0: none)
 *           COUNT samples: W H N, then N objects "cls cx cy w h NP x y ..."
 *           (NP points, normalised) followed by NKPT x, y, visibility
 *   stdout: line 1: the 58 draws (detect_plan_draws), then CopyPaste mode
 *                   mixup's 32 (detect_copy_paste_draws), %.17g
 *           line 2: n npts nkpt, then the sample's instances (pixels, xywh):
 *                   cls[n] box[n][4] seg[n][npts][2] kpt[n][nkpt][3], %.9g
 *           line 3: rows k, then rows[k][6], kpt[k][nkpt][3], xywhr[k][5] (obb)
 *           or "error E".
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detect.h"
#include "instgeom.h"
#include "rng.h"


struct sample {
	uint32_t w, h, n;
	uint8_t *pix;
	struct detect_box *boxes;
	uint64_t *seg_off;
	float *kpt;
};

struct set {
	struct sample *s;
	float *seg;
};

static int load(void *ctx, uint64_t index, uint32_t side, struct detect_sample *out)
{
	struct set *st = ctx;
	struct sample *s = &st->s[index];

	(void)side;
	*out = (struct detect_sample){.pixels = s->pix,
				      .width = s->w,
				      .height = s->h,
				      .boxes = s->boxes,
				      .box_count = s->n,
				      .stable = true,
				      .seg_off = s->seg_off,
				      .seg = st->seg,
				      .kpt = s->kpt};
	return 0;
}

static void put(const float *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf(" %.9g", (double)v[i]);
}

int main(void)
{
	unsigned size, out_w, out_h, count, segp, nkpt, obb, max_boxes, nflip;
	unsigned long long seed, index;
	struct detect_params p;
	uint32_t flip_idx[1024];
	struct sample *smp;
	struct set st = {0};
	size_t seg_cap = 0, seg_n = 0;
	struct detect *d = NULL;
	double draws[DETECT_PLAN_DRAWS], cp_draws[DETECT_COPY_PASTE_DRAWS];
	struct rng rng;
	int r;

	if (scanf("%u %u %u %llu %llu %u %u %u %u %u", &size, &out_w, &out_h, &seed, &index, &count, &segp, &nkpt, &obb,
		  &max_boxes) != 10 ||
	    count == 0 || count > 64 || size == 0 || size > 4096 || out_w == 0 || out_w > 4096 || out_h == 0 ||
	    out_h > 4096 || nkpt > 1024 || index >= count)
		return 1;
	detect_params_default(&p);
	if (scanf("%f %f %f %f %f %f %f %f %f %f %f %f %lf %d %f", &p.hsv_h, &p.hsv_s, &p.hsv_v, &p.degrees,
		  &p.translate, &p.scale, &p.shear, &p.perspective, &p.flipud, &p.fliplr, &p.mosaic, &p.mixup,
		  &p.copy_paste, &p.copy_paste_mode, &p.cutmix) != 15)
		return 1;
	if (scanf("%u", &nflip) != 1 || nflip > 1024)
		return 1;
	for (unsigned i = 0; i < nflip; i++)
		if (scanf("%u", &flip_idx[i]) != 1)
			return 1;
	smp = calloc(count, sizeof(*smp));
	if (!smp)
		return 1;
	st.s = smp;
	for (unsigned i = 0; i < count; i++) {
		struct sample *s = &smp[i];

		if (scanf("%u %u %u", &s->w, &s->h, &s->n) != 3 || s->w == 0 || s->h == 0 || s->w > size ||
		    s->h > size || s->n > 1000)
			return 1;
		s->pix = malloc((size_t)s->w * s->h * 3);
		s->boxes = calloc(s->n + 1, sizeof(*s->boxes));
		s->seg_off = calloc(s->n + 1, sizeof(*s->seg_off));
		s->kpt = calloc((size_t)s->n * nkpt * 3 + 1, sizeof(float));
		if (!s->pix || !s->boxes || !s->seg_off || !s->kpt)
			return 1;
		for (size_t k = 0; k < (size_t)s->w * s->h * 3; k++)
			s->pix[k] = (uint8_t)(k * 7 + i * 31);
		s->seg_off[0] = seg_n;
		for (unsigned k = 0; k < s->n; k++) {
			struct detect_box *b = &s->boxes[k];
			unsigned np;

			if (scanf("%f %f %f %f %f %u", &b->cls, &b->cx, &b->cy, &b->w, &b->h, &np) != 6 || np > 100000)
				return 1;
			if (seg_n + np > seg_cap) {
				seg_cap = (seg_n + np) * 2;
				st.seg = realloc(st.seg, seg_cap * 2 * sizeof(float));
				if (!st.seg)
					return 1;
			}
			for (unsigned j = 0; j < np * 2; j++)
				if (scanf("%f", &st.seg[seg_n * 2 + j]) != 1)
					return 1;
			seg_n += np;
			s->seg_off[k + 1] = seg_n;
			for (unsigned j = 0; j < nkpt * 3; j++)
				if (scanf("%f", &s->kpt[(size_t)k * nkpt * 3 + j]) != 1)
					return 1;
		}
		if (!segp) {
			free(s->seg_off);
			s->seg_off = NULL;
		}
	}

	rng_init(&rng, seed, 0, index, RNG_AUGMENT);
	if (detect_copy_paste_draws(&p, size, count, &rng, cp_draws) < 0 ||
	    detect_plan_draws(&p, size, count, &rng, draws) < 0)
		return 1;
	for (int i = 0; i < DETECT_PLAN_DRAWS; i++)
		printf("%s%.17g", i ? " " : "", draws[i]);
	for (int i = 0; i < DETECT_COPY_PASTE_DRAWS; i++)
		printf(" %.17g", cp_draws[i]);
	printf("\n");

	{
		struct detect_instances in = {segp, nkpt, nflip ? flip_idx : NULL, obb != 0};
		uint8_t *image = malloc((size_t)out_w * out_h * 3);
		float *rows = calloc((size_t)max_boxes * DETECT_BOX_FLOATS + 1, sizeof(float));
		float *kpt = calloc((size_t)max_boxes * nkpt * 3 + 1, sizeof(float));
		float *xywhr = calloc((size_t)max_boxes * 5 + 1, sizeof(float));
		uint32_t written = 0;
		uint64_t dropped = 0;
		struct detect_output o = {.image = image,
					  .out_w = out_w,
					  .out_h = out_h,
					  .boxes = rows,
					  .max_boxes = max_boxes,
					  .box_count = &written,
					  .boxes_dropped = &dropped,
					  .inst = &in,
					  .kpt = nkpt ? kpt : NULL,
					  .xywhr = obb ? xywhr : NULL};

		if (!image || !rows || !kpt || !xywhr || detect_new(&d) < 0)
			return 1;
		rng_init(&rng, seed, 0, index, RNG_AUGMENT);
		r = detect_make(d, DETECT_TRAIN, &p, size, index, count, &rng, load, &st, &o);
		if (r < 0) {
			printf("error %d\n", r);
		} else {
			const struct instgeom_set *f = detect_instances_result(d);

			printf("%u %u %u", f->n, f->npts, f->nkpt);
			put(f->cls, f->n);
			put(f->box, (size_t)f->n * 4);
			if (f->npts)
				put(f->seg, (size_t)f->n * f->npts * 2);
			if (f->nkpt)
				put(f->kpt, (size_t)f->n * f->nkpt * 3);
			printf("\n%u", written);
			put(rows, (size_t)written * DETECT_BOX_FLOATS);
			put(kpt, (size_t)written * nkpt * 3);
			if (obb)
				put(xywhr, (size_t)written * 5);
			printf("\n");
		}
		free(image);
		free(rows);
		free(kpt);
		free(xywhr);
	}
	detect_free(d);
	for (unsigned i = 0; i < count; i++) {
		free(smp[i].pix);
		free(smp[i].boxes);
		free(smp[i].seg_off);
		free(smp[i].kpt);
	}
	free(smp);
	free(st.seg);
	return 0;
}
