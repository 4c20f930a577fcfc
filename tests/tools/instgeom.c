/* SPDX-License-Identifier: MIT */
/*
 * instgeom: daemon/pixels/instgeom.h's functions on numbers from stdin,
 * for tests/ultralytics/test_instgeom.py (against Ultralytics' own
 * functions). One request a line, one answer line each; numbers are read
 * as doubles (then float where the function takes float32) and written as
 * %.9g (float) or %.17g (double), round trips both.
 *
 *   B w h n pts...                  segment2box         -> 4 floats
 *   T x y n pts...                  pointPolygonTest    -> int
 *   A n pts...                      minAreaRect         -> cx cy w h angle
 *   O n pts...                      xyxyxyxy2xywhr      -> 5 doubles
 *   C cx cy w h r                   xywhr2xyxyxyxy      -> 8 doubles
 *   Q box1 box2 area_thr            box_candidates      -> 0 / 1
 *   M x y M0..M8 divide             transform one point -> x y
 *   Z in_w in_h out_w out_h draws(8)   _compute_affine_matrix -> M0..M8
 *   P W H persp obb scale M0..M8 SET    apply_instances (obb: preserve_obb) -> keep flags ; SET
 *   V w h SET                       Instances.clip(preserve_obb=True) -> SET
 *   U count areas... SET            CutMix's free areas -> count idx...
 *   S area(4) thr SET               CutMix's selection -> count indexes...
 *   W area(4) obb SET               CutMix's piece -> SET (then 'J' to append)
 *   I n pts m pts                   intersectConvexConvex -> count area pts...
 *   L w h padw padh SET             _update_labels      -> SET
 *   K w h SET                       clip + remove_zero_area -> SET
 *   F vertical extent nidx idx... SET   RandomFlip      -> SET
 *   X w p SET                       CopyPaste flip mode -> count indices... ; SET
 *   Y p SET SET2                    CopyPaste mixup mode's choice of SET2's -> count indices...
 *   J count SET...                  Instances.concatenate -> SET
 *   G w h obb SET                   Format -> n * 4 (obb: 5) box values, keypoint values
 *
 * SET is `n npts nkpt`, then n * 4 box values, n * npts * 2 segment values,
 * n * nkpt * 3 keypoint values; answered in the same form.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "instgeom.h"

static char *cur;

static double num(void)
{
	char *end;
	double v = strtod(cur, &end);

	if (end == cur) {
		fprintf(stderr, "instgeom: a number expected at '%.20s'\n", cur);
		exit(2);
	}
	cur = end;
	return v;
}

static uint32_t count(void)
{
	double v = num();

	if (v < 0 || v > 1e7) {
		fprintf(stderr, "instgeom: bad count\n");
		exit(2);
	}
	return (uint32_t)v;
}

static float *floats(size_t n)
{
	float *p = calloc(n ? n : 1, sizeof(float));

	if (!p)
		exit(1);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)num();
	return p;
}

static void put_f(const float *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf(" %.9g", (double)v[i]);
}

static void put_d(const double *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf(" %.17g", v[i]);
}

static void set_read(struct instgeom_set *s)
{
	s->n = count();
	s->npts = count();
	s->nkpt = count();
	s->cls = NULL;
	s->box = floats((size_t)s->n * 4);
	s->seg = floats((size_t)s->n * s->npts * 2);
	s->kpt = floats((size_t)s->n * s->nkpt * 3);
}

static void set_put(const struct instgeom_set *s)
{
	printf(" %u %u %u", s->n, s->npts, s->nkpt);
	put_f(s->box, (size_t)s->n * 4);
	put_f(s->seg, (size_t)s->n * s->npts * 2);
	put_f(s->kpt, (size_t)s->n * s->nkpt * 3);
}

static void set_free(struct instgeom_set *s)
{
	free(s->box);
	free(s->seg);
	free(s->kpt);
}

int main(void)
{
	static char line[1 << 24];

	while (fgets(line, sizeof(line), stdin)) {
		char op = line[0];
		struct instgeom_set s;

		cur = line + 1;
		switch (op) {
		case 'B': {
			int w = (int)num(), h = (int)num();
			uint32_t n = count();
			float *p = floats((size_t)n * 2), box[4];

			instgeom_segment2box(p, n, w, h, box);
			put_f(box, 4);
			free(p);
			break;
		}
		case 'T': {
			float x = (float)num(), y = (float)num();
			uint32_t n = count();
			float *p = floats((size_t)n * 2);

			printf(" %d", instgeom_point_in_polygon(p, n, x, y));
			free(p);
			break;
		}
		case 'A':
		case 'O': {
			uint32_t n = count();
			float *p = floats((size_t)n * 2), *scratch = calloc(instgeom_scratch_floats(n), sizeof(float)),
			      r[5];
			double d[5];
			int rc;

			if (!scratch)
				return 1;
			rc = op == 'A' ? instgeom_min_area_rect(p, n, scratch, r) : instgeom_xywhr(p, n, scratch, d);
			if (rc < 0)
				printf(" error %d", rc);
			else if (op == 'A')
				put_f(r, 5);
			else
				put_d(d, 5);
			free(p);
			free(scratch);
			break;
		}
		case 'C': {
			double b[5], c[8];

			for (int i = 0; i < 5; i++)
				b[i] = num();
			instgeom_corners(b, c);
			put_d(c, 8);
			break;
		}
		case 'Q': {
			float a[4], b[4], thr;

			for (int i = 0; i < 4; i++)
				a[i] = (float)num();
			for (int i = 0; i < 4; i++)
				b[i] = (float)num();
			thr = (float)num();
			printf(" %d", instgeom_box_candidate(a, b, thr));
			break;
		}
		case 'M': {
			float p[2], M[9];

			p[0] = (float)num();
			p[1] = (float)num();
			for (int i = 0; i < 9; i++)
				M[i] = (float)num();
			instgeom_transform(M, num() != 0, p, 1, 2);
			put_f(p, 2);
			break;
		}
		case 'P': {
			int W = (int)num(), H = (int)num();
			bool persp = num() != 0, obb = num() != 0;
			float scale = (float)num(), M[9], *scratch;
			uint32_t n_in;
			bool *keep;

			for (int i = 0; i < 9; i++)
				M[i] = (float)num();
			set_read(&s);
			keep = calloc(s.n + 1, 1);
			if (!keep)
				return 1;
			n_in = s.n;
			scratch = calloc(instgeom_obb_scratch_floats(s.npts), sizeof(float));
			if (!scratch)
				return 1;
			instgeom_perspective(&s, M, scale, W, H, persp, obb, scratch, keep);
			free(scratch);
			for (uint32_t i = 0; i < n_in; i++)
				printf(" %d", keep[i]);
			printf(" ;");
			set_put(&s);
			free(keep);
			set_free(&s);
			break;
		}
		case 'L': {
			int w = (int)num(), h = (int)num(), pw = (int)num(), ph = (int)num();

			set_read(&s);
			instgeom_place(&s, w, h, pw, ph);
			set_put(&s);
			set_free(&s);
			break;
		}
		case 'K': {
			int w = (int)num(), h = (int)num();

			set_read(&s);
			instgeom_clip(&s, w, h);
			instgeom_remove_zero_area(&s);
			set_put(&s);
			set_free(&s);
			break;
		}
		case 'F': {
			bool vertical = num() != 0;
			float extent = (float)num(), *scratch;
			uint32_t nidx = count(), *idx = calloc(nidx + 1, sizeof(uint32_t));

			if (!idx)
				return 1;
			for (uint32_t i = 0; i < nidx; i++)
				idx[i] = count();
			set_read(&s);
			if (nidx && nidx != s.nkpt)
				return 2;
			scratch = calloc((size_t)s.nkpt * 3 + 1, sizeof(float));
			if (!scratch)
				return 1;
			instgeom_flip(&s, vertical, extent, nidx ? idx : NULL, scratch);
			set_put(&s);
			free(idx);
			free(scratch);
			set_free(&s);
			break;
		}
		case 'X': {
			int w = (int)num();
			double pr = num();
			struct instgeom_set big;
			uint32_t *sel, k;
			float *scratch;

			set_read(&s);
			/* room for the appended mirrors */
			big = s;
			big.box = calloc((size_t)s.n * 8 + 1, sizeof(float));
			big.seg = calloc((size_t)s.n * s.npts * 4 + 1, sizeof(float));
			big.kpt = calloc((size_t)s.n * s.nkpt * 6 + 1, sizeof(float));
			sel = calloc(s.n + 1, sizeof(uint32_t));
			scratch = calloc(s.n + 1, sizeof(float));
			if (!big.box || !big.seg || !big.kpt || !sel || !scratch)
				return 1;
			memcpy(big.box, s.box, (size_t)s.n * 4 * sizeof(float));
			memcpy(big.seg, s.seg, (size_t)s.n * s.npts * 2 * sizeof(float));
			memcpy(big.kpt, s.kpt, (size_t)s.n * s.nkpt * 3 * sizeof(float));
			k = instgeom_copy_paste_select(&big, w, pr, sel, scratch);
			printf(" %u", k);
			for (uint32_t i = 0; i < k; i++)
				printf(" %u", sel[i]);
			printf(" ;");
			instgeom_copy_paste_append(&big, w, sel, k);
			set_put(&big);
			set_free(&s);
			set_free(&big);
			free(sel);
			free(scratch);
			break;
		}
		case 'Y': {
			double pr = num();
			struct instgeom_set other;
			uint32_t *sel, k;
			float *scratch;

			set_read(&s);
			set_read(&other);
			sel = calloc(other.n + 1, sizeof(uint32_t));
			scratch = calloc(other.n + 1, sizeof(float));
			if (!sel || !scratch)
				return 1;
			k = instgeom_copy_paste_select_from(&s, &other, pr, sel, scratch);
			printf(" %u", k);
			for (uint32_t i = 0; i < k; i++)
				printf(" %u", sel[i]);
			set_free(&s);
			set_free(&other);
			free(sel);
			free(scratch);
			break;
		}
		case 'J': {
			uint32_t nparts = count();
			struct instgeom_set parts[16], out = {0};
			size_t n = 0, npts = 0, nkpt = 0;

			if (nparts == 0 || nparts > 16)
				return 2;
			for (uint32_t p = 0; p < nparts; p++) {
				set_read(&parts[p]);
				n += parts[p].n;
				npts = parts[p].npts > npts ? parts[p].npts : npts;
				nkpt = parts[p].nkpt;
			}
			out.box = calloc(n * 4 + 1, sizeof(float));
			out.seg = calloc(n * npts * 2 + 1, sizeof(float));
			out.kpt = calloc(n * nkpt * 3 + 1, sizeof(float));
			if (!out.box || !out.seg || !out.kpt)
				return 1;
			instgeom_cat(parts, nparts, &out);
			set_put(&out);
			for (uint32_t p = 0; p < nparts; p++)
				set_free(&parts[p]);
			set_free(&out);
			break;
		}
		case 'G': {
			int w = (int)num(), h = (int)num();
			bool obb = num() != 0;
			float *boxes, *kpt, *scratch;
			int rc;

			set_read(&s);
			boxes = calloc((size_t)s.n * 5 + 1, sizeof(float));
			kpt = calloc((size_t)s.n * s.nkpt * 3 + 1, sizeof(float));
			scratch = calloc(instgeom_scratch_floats(s.npts) + 1, sizeof(float));
			if (!boxes || !kpt || !scratch)
				return 1;
			rc = instgeom_format(&s, w, h, obb, false, boxes, kpt, scratch);
			if (rc < 0) {
				printf(" error %d", rc);
			} else {
				put_f(boxes, (size_t)s.n * (obb ? 5 : 4));
				put_f(kpt, (size_t)s.n * s.nkpt * 3);
			}
			free(boxes);
			free(kpt);
			free(scratch);
			set_free(&s);
			break;
		}
		case 'Z': {
			int iw = (int)num(), ih = (int)num(), ow = (int)num(), oh = (int)num();
			struct instgeom_affine_draw d;
			float M[9];

			d.persp_x = num();
			d.persp_y = num();
			d.angle = num();
			d.scale = num();
			d.shear_x = num();
			d.shear_y = num();
			d.trans_x = num();
			d.trans_y = num();
			instgeom_affine_matrix(&d, iw, ih, ow, oh, M);
			put_f(M, 9);
			break;
		}
		case 'U': {
			uint32_t na = count(), *idx, k;
			float *areas = floats((size_t)na * 4);

			set_read(&s);
			idx = calloc(na + 1, sizeof(uint32_t));
			if (!idx)
				return 1;
			k = instgeom_cutmix_free_areas(areas, na, &s, idx);
			printf(" %u", k);
			for (uint32_t i = 0; i < k; i++)
				printf(" %u", idx[i]);
			free(idx);
			free(areas);
			set_free(&s);
			break;
		}
		case 'S': {
			float area[4], thr;
			uint32_t *idx, k;

			for (int i = 0; i < 4; i++)
				area[i] = (float)num();
			thr = (float)num();
			set_read(&s);
			idx = calloc(s.n + 1, sizeof(uint32_t));
			if (!idx)
				return 1;
			k = instgeom_cutmix_select(area, &s, thr, idx);
			printf(" %u", k);
			for (uint32_t i = 0; i < k; i++)
				printf(" %u", idx[i]);
			free(idx);
			set_free(&s);
			break;
		}
		case 'W': {
			float area[4], *scratch;
			bool obb;

			for (int i = 0; i < 4; i++)
				area[i] = (float)num();
			obb = num() != 0;
			set_read(&s);
			scratch = calloc(instgeom_obb_scratch_floats(s.npts), sizeof(float));
			if (!scratch)
				return 1;
			instgeom_cutmix_piece(&s, area, obb, scratch);
			set_put(&s);
			free(scratch);
			set_free(&s);
			break;
		}
		case 'V': {
			int w = (int)num(), h = (int)num();
			float *scratch;

			set_read(&s);
			scratch = calloc(instgeom_obb_scratch_floats(s.npts), sizeof(float));
			if (!scratch)
				return 1;
			instgeom_clip_obb(&s, w, h, scratch);
			set_put(&s);
			free(scratch);
			set_free(&s);
			break;
		}
		case 'I': {
			uint32_t n = count();
			float *P = floats((size_t)n * 2);
			uint32_t m = count();
			float *Q = floats((size_t)m * 2), area;
			float *out = calloc(((size_t)n + m) * 4 + 8, sizeof(float)),
			      *scratch = calloc(((size_t)n + m) * 2 + 1, sizeof(float));
			int r;

			if (!out || !scratch)
				return 1;
			r = instgeom_intersect_convex(P, (int)n, Q, (int)m, out, &area, scratch);
			printf(" %d %.9g", r, (double)area);
			if (r > 0)
				put_f(out, (size_t)r * 2);
			free(P);
			free(Q);
			free(out);
			free(scratch);
			break;
		}
		default: fprintf(stderr, "instgeom: unknown request '%c'\n", op); return 2;
		}
		printf("\n");
		fflush(stdout);
	}
	return 0;
}
