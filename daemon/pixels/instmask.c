/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "instmask.h"

/* cv2's drawing fixed point (modules/imgproc/src/drawing.cpp); its left
 * shifts of negative values are multiplications here (defined in C). */
#define XY_SHIFT 16
#define XY_ONE (1 << XY_SHIFT)

struct edge {
	int y0, y1;
	int64_t x, dx;
	struct edge *next;
};

/* The downsampled rows instmask_overlap keeps of its polygons between its
 * two passes (each polygon's rows s0 .. s1 only); polygons past this bound
 * are rastered again in the second pass. */
#define KEEP_BYTES ((size_t)4 << 20)

/* A polygon's mask cells in instmask_overlap: rows s0 .. s1 (none: s0 > s1),
 * columns c0 .. c1, kept at m->keep + at, or not kept (at == SIZE_MAX). */
struct rows {
	uint32_t s0, s1, c0, c1;
	size_t at;
};

struct instmask {
	struct edge *edges, *sorted; /* the edges, and room to sort them into (each with room for one more) */
	size_t edges_cap, sorted_cap;
	uint32_t *counts; /* the edge sort's counts per first row */
	size_t counts_cap;
	int32_t *ipts;
	size_t ipts_cap;
	uint8_t *full; /* w x h */
	size_t full_cap;
	size_t full_zero; /* full's first full_zero bytes are zero (raster leaves them so) */
	uint8_t *small;   /* (w / ratio) x (h / ratio), one polygon's, or each polygon's in turn */
	size_t small_cap;
	uint64_t *area;
	size_t area_cap;
	struct rows *rows;
	size_t rows_cap;
	uint8_t *keep; /* the kept rows, up to KEEP_BYTES */
	size_t keep_cap;
};

int instmask_new(struct instmask **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void instmask_free(struct instmask *m)
{
	if (!m)
		return;
	free(m->edges);
	free(m->sorted);
	free(m->counts);
	free(m->ipts);
	free(m->full);
	free(m->small);
	free(m->area);
	free(m->rows);
	free(m->keep);
	free(m);
}

/* ---- resample_segments ---- */

uint32_t instmask_resample_count(uint32_t longest, uint32_t points)
{
	return longest > points ? longest + 1 : points;
}

/* The closed polygon's point at x (np.interp of each coordinate over 0 ..
 * n, point n the first again): point j where x is the integer j (or past
 * either end: the first), else slope * (x - j) + f0 in double (interp's
 * slope: (f1 - f0) / 1), rounded to float32. */
static inline void at(const float *xy, uint32_t n, double x, float *out)
{
	const float *p0, *p1;
	uint32_t j;

	if (x >= (double)n || x <= 0) {
		out[0] = xy[0];
		out[1] = xy[1];
		return;
	}
	j = (uint32_t)x;
	p0 = xy + (size_t)j * 2;
	if ((double)j == x) {
		out[0] = p0[0];
		out[1] = p0[1];
		return;
	}
	p1 = j + 1 == n ? xy : p0 + 2;
	{
		const double t = x - (double)j, f0x = p0[0], f0y = p0[1];

		out[0] = (float)(((double)p1[0] - f0x) * t + f0x);
		out[1] = (float)(((double)p1[1] - f0y) * t + f0y);
	}
}

void instmask_resample(const float *xy, uint32_t n, uint32_t m, float *out)
{
	uint32_t len = n + 1, num, k = 0, i = 0, o = 0;
	double step, stop;

	if (n == m) {
		memcpy(out, xy, (size_t)n * 2 * sizeof(float));
		return;
	}
	stop = (double)(len - 1);
	num = len < m ? m - len : m;
	step = num > 1 ? stop / (double)(num - 1) : 0;
	/* linspace(0, len - 1, num) merged with 0 .. len - 1 when len < m
	 * (np.insert at searchsorted: each integer before equal values);
	 * an integer position is its point itself */
	if (len < m) {
		while (o < m) {
			double xi = i < num ? (i + 1 == num && num > 1 ? stop : (double)i * step) : INFINITY;

			if (k < len && (double)k <= xi) {
				const float *p = k == n ? xy : xy + (size_t)k * 2;

				out[(size_t)o * 2] = p[0];
				out[(size_t)o * 2 + 1] = p[1];
				k++;
			} else {
				at(xy, n, xi, out + (size_t)o * 2);
				i++;
			}
			o++;
		}
		return;
	}
	for (; o < m; o++, i++)
		at(xy, n, i + 1 == num && num > 1 ? stop : (double)i * step, out + (size_t)o * 2);
}

/* ---- LetterBox on instances ---- */

void instmask_letterbox(float *pts, size_t n, uint32_t stride, uint32_t w, uint32_t h, double r, int left, int top)
{
	const float fw = (float)w, fh = (float)h, fr = (float)r, fl = (float)left, ft = (float)top;

	for (size_t i = 0; i < n; i++) {
		float *p = pts + i * stride;
		float x = p[0] * fw, y = p[1] * fh;

		x = x * fr;
		y = y * fr;
		p[0] = x + fl;
		p[1] = y + ft;
	}
}

/* ---- cv2.fillPoly ---- */

/* clipLine(Size2l, Point2l&, Point2l&): false when the line misses the image. */
static bool clip_line(int64_t w, int64_t h, int64_t *x1, int64_t *y1, int64_t *x2, int64_t *y2)
{
	int64_t right = w - 1, bottom = h - 1;
	int c1, c2;

	if (w <= 0 || h <= 0)
		return false;
	c1 = (*x1 < 0) + (*x1 > right) * 2 + (*y1 < 0) * 4 + (*y1 > bottom) * 8;
	c2 = (*x2 < 0) + (*x2 > right) * 2 + (*y2 < 0) * 4 + (*y2 > bottom) * 8;
	if ((c1 & c2) == 0 && (c1 | c2) != 0) {
		int64_t a;

		if (c1 & 12) {
			a = c1 < 8 ? 0 : bottom;
			*x1 += (a - *y1) * (*x2 - *x1) / (*y2 - *y1);
			*y1 = a;
			c1 = (*x1 < 0) + (*x1 > right) * 2;
		}
		if (c2 & 12) {
			a = c2 < 8 ? 0 : bottom;
			*x2 += (a - *y2) * (*x2 - *x1) / (*y2 - *y1);
			*y2 = a;
			c2 = (*x2 < 0) + (*x2 > right) * 2;
		}
		if ((c1 & c2) == 0 && (c1 | c2) != 0) {
			if (c1) {
				a = c1 == 1 ? 0 : right;
				*y1 += (a - *x1) * (*y2 - *y1) / (*x2 - *x1);
				*x1 = a;
				c1 = 0;
			}
			if (c2) {
				a = c2 == 1 ? 0 : right;
				*y2 += (a - *x2) * (*y2 - *y1) / (*x2 - *x1);
				*x2 = a;
				c2 = 0;
			}
		}
	}
	return (c1 | c2) == 0;
}

/* Whether row y is one that a downsample by k reads (k*s + k/2 - 1 and k*s +
 * k/2; k 1 or 2: every row). The fill writes only those: a row's pixels
 * depend only on the edges (the outline's pixels and each row's spans), not
 * on the rows written before it. */
static inline bool row_read(int y, uint32_t k)
{
	return k <= 2 || (((uint32_t)y - (k / 2 - 1)) & (k - 1)) < 2;
}

/* cv2's Line(): LineIterator's 8-connected Bresenham, left to right, clipped;
 * only the rows row_read(k). */
static void line8(uint8_t *img, int w, int h, int x1, int y1, int x2, int y2, uint32_t k)
{
	int dx, dy, sy, err, count, major_x;

	if ((unsigned)x1 >= (unsigned)w || (unsigned)x2 >= (unsigned)w || (unsigned)y1 >= (unsigned)h ||
	    (unsigned)y2 >= (unsigned)h) {
		int64_t a = x1, b = y1, c = x2, d = y2;

		if (!clip_line(w, h, &a, &b, &c, &d))
			return;
		x1 = (int)a;
		y1 = (int)b;
		x2 = (int)c;
		y2 = (int)d;
	}
	dx = x2 - x1;
	dy = y2 - y1;
	if (dx < 0) {
		dx = -dx;
		dy = -dy;
		x1 = x2;
		y1 = y2;
	}
	sy = dy < 0 ? -1 : 1;
	dy = dy < 0 ? -dy : dy;
	major_x = dx >= dy;
	if (!major_x) {
		int t = dx;

		dx = dy;
		dy = t;
	}
	err = dx - (dy + dy);
	count = dx + 1;
	for (int i = 0; i < count; i++) {
		int minor = err < 0;

		if (row_read(y1, k))
			img[(size_t)y1 * w + x1] = 1;
		err += -(dy + dy) + (minor ? dx + dx : 0);
		if (major_x) {
			x1++;
			y1 += minor ? sy : 0;
		} else {
			y1 += sy;
			x1 += minor ? 1 : 0;
		}
	}
}

static int cmp_edges(const void *a, const void *b)
{
	const struct edge *e1 = a, *e2 = b;

	if (e1->y0 != e2->y0)
		return e1->y0 < e2->y0 ? -1 : 1;
	if (e1->x != e2->x)
		return e1->x < e2->x ? -1 : 1;
	if (e1->dx != e2->dx)
		return e1->dx < e2->dx ? -1 : 1;
	return 0;
}

/* CollectPolyEdges (shift 0, LINE_8): the outline drawn, the edges kept. */
static size_t collect_edges(uint8_t *img, int w, int h, const int32_t *v, uint32_t count, struct edge *edges,
			    uint32_t k)
{
	int64_t p0x = (int64_t)v[(size_t)(count - 1) * 2] * XY_ONE, p0y = v[(size_t)(count - 1) * 2 + 1];
	size_t n = 0;

	for (uint32_t i = 0; i < count; i++) {
		int64_t p1x = (int64_t)v[(size_t)i * 2] * XY_ONE, p1y = v[(size_t)i * 2 + 1];
		int64_t c0x, c0y = p0y, c1x, c1y = p1y;
		int64_t t0x = (p0x + (XY_ONE >> 1)) >> XY_SHIFT, t1x = (p1x + (XY_ONE >> 1)) >> XY_SHIFT;
		int64_t t0y = p0y, t1y = p1y;

		line8(img, w, h, (int)t0x, (int)t0y, (int)t1x, (int)t1y, k);
		if ((uint64_t)t0x >= (uint64_t)w || (uint64_t)t1x >= (uint64_t)w || (uint64_t)t0y >= (uint64_t)h ||
		    (uint64_t)t1y >= (uint64_t)h) {
			clip_line(w, h, &t0x, &t0y, &t1x, &t1y);
			if (t0y != t1y) {
				c0y = t0y;
				c1y = t1y;
			}
		}
		c0x = t0x * XY_ONE;
		c1x = t1x * XY_ONE;
		if (p0y != p1y) {
			struct edge *e = &edges[n++];

			e->dx = (c1x - c0x) / (c1y - c0y);
			if (p0y < p1y) {
				e->y0 = (int)p0y;
				e->y1 = (int)p1y;
				e->x = c0x + (p0y - c0y) * e->dx;
			} else {
				e->y0 = (int)p1y;
				e->y1 = (int)p0y;
				e->x = c1x + (p1y - c1y) * e->dx;
			}
		}
		p0x = p1x;
		p0y = p1y;
	}
	return n;
}

/*
 * m->edges[0 .. total) in cmp_edges' order, stably (as glibc's qsort, a
 * merge sort, leaves them; edges equal under cmp_edges fill alike in any
 * order): counted by first row into m->sorted, which becomes m->edges, then
 * each row's few edges by insertion. qsort where the rows span far more than
 * the edges or a row holds many. -ENOMEM.
 */
static int sort_edges(struct instmask *m, size_t total, int y0_min, int y0_max)
{
	struct edge *in = m->edges, *out, *t;
	size_t span = (size_t)((int64_t)y0_max - y0_min) + 1, start = 0, cap;

	if (span > total * 4 + 64) {
		qsort(in, total, sizeof(*in), cmp_edges);
		return 0;
	}
	if (grow((void **)&m->sorted, &m->sorted_cap, total + 1, sizeof(*m->sorted)) < 0 ||
	    grow((void **)&m->counts, &m->counts_cap, span + 1, sizeof(*m->counts)) < 0)
		return -ENOMEM;
	out = m->sorted;
	memset(m->counts, 0, (span + 1) * sizeof(*m->counts));
	for (size_t i = 0; i < total; i++)
		m->counts[in[i].y0 - y0_min + 1]++;
	for (size_t b = 1; b <= span; b++)
		m->counts[b] += m->counts[b - 1];
	for (size_t i = 0; i < total; i++)
		out[m->counts[in[i].y0 - y0_min]++] = in[i];
	/* counts[b] is now the end of row b */
	for (size_t b = 0; b < span; b++) {
		size_t end = m->counts[b];

		if (end - start > 32) {
			qsort(out + start, end - start, sizeof(*out), cmp_edges);
		} else {
			for (size_t i = start + 1; i < end; i++) {
				struct edge e = out[i];
				size_t j = i;

				for (; j > start && cmp_edges(&out[j - 1], &e) > 0; j--)
					out[j] = out[j - 1];
				out[j] = e;
			}
		}
		start = end;
	}
	t = m->edges;
	m->edges = m->sorted;
	m->sorted = t;
	cap = m->edges_cap;
	m->edges_cap = m->sorted_cap;
	m->sorted_cap = cap;
	return 0;
}

/* FillEdgeCollection, colour 1, of m->edges (room for total + 1), only the
 * rows row_read(k). -ENOMEM. */
static int fill_edges(struct instmask *m, uint8_t *img, int w, int h, size_t total, uint32_t k)
{
	struct edge tmp = {0}, *e, *edges;
	int y, y_max = INT_MIN, y_min = INT_MAX, y0_max = INT_MIN;
	int64_t x_max = INT64_MIN, x_min = INT64_MAX;
	const int64_t delta = XY_ONE - 1;
	size_t i;

	if (total < 2)
		return 0;
	edges = m->edges;
	for (i = 0; i < total; i++) {
		struct edge *e1 = &edges[i];
		int64_t x1 = e1->x + (e1->y1 - e1->y0) * e1->dx;

		y_min = e1->y0 < y_min ? e1->y0 : y_min;
		y0_max = e1->y0 > y0_max ? e1->y0 : y0_max;
		y_max = e1->y1 > y_max ? e1->y1 : y_max;
		x_min = e1->x < x_min ? e1->x : x_min;
		x_max = e1->x > x_max ? e1->x : x_max;
		x_min = x1 < x_min ? x1 : x_min;
		x_max = x1 > x_max ? x1 : x_max;
	}
	if (y_max < 0 || y_min >= h || x_max < 0 || x_min >= ((int64_t)w << XY_SHIFT))
		return 0;
	if (sort_edges(m, total, y_min, y0_max) < 0) /* std::sort: ties are equal edges */
		return -ENOMEM;
	edges = m->edges;
	tmp.y0 = INT_MAX;
	edges[total] = tmp;
	i = 0;
	tmp.next = NULL;
	e = &edges[i];
	y_max = y_max < h ? y_max : h;
	for (y = e->y0; y < y_max; y++) {
		struct edge *last, *prelast, *keep_prelast;
		int draw = 0, clipline = y < 0 || !row_read(y, k);

		prelast = &tmp;
		last = tmp.next;
		while (last || e->y0 == y) {
			if (last && last->y1 == y) {
				/* exclude edge if y reaches its lower point */
				prelast->next = last->next;
				last = last->next;
				continue;
			}
			keep_prelast = prelast;
			if (last && (e->y0 > y || last->x < e->x)) {
				prelast = last;
				last = last->next;
			} else if (i < total) {
				prelast->next = e;
				e->next = last;
				prelast = e;
				e = &edges[++i];
			} else {
				break;
			}
			if (draw) {
				if (!clipline) {
					uint8_t *row = img + (size_t)y * w;
					int x1, x2;

					if (keep_prelast->x > prelast->x) {
						x1 = (int)((prelast->x + delta) >> XY_SHIFT);
						x2 = (int)(keep_prelast->x >> XY_SHIFT);
					} else {
						x1 = (int)((keep_prelast->x + delta) >> XY_SHIFT);
						x2 = (int)(prelast->x >> XY_SHIFT);
					}
					if (x1 < w && x2 >= 0) {
						if (x1 < 0)
							x1 = 0;
						if (x2 >= w)
							x2 = w - 1;
						if (x2 >= x1)
							memset(row + x1, 1, (size_t)(x2 - x1 + 1));
					}
				}
				keep_prelast->x += keep_prelast->dx;
				prelast->x += prelast->dx;
			}
			draw ^= 1;
		}
		/* sort the active edges by x (bubble sort) */
		keep_prelast = NULL;
		do {
			struct edge *last_exchange = NULL;

			prelast = &tmp;
			last = tmp.next;
			while (last != keep_prelast && last->next != NULL) {
				struct edge *te = last->next;

				if (last->x > te->x) {
					prelast->next = te;
					last->next = te->next;
					te->next = last;
					prelast = te;
					last_exchange = prelast;
				} else {
					prelast = last;
					last = te;
				}
			}
			if (!last_exchange)
				break;
			keep_prelast = last_exchange;
		} while (keep_prelast != tmp.next && keep_prelast != &tmp);
	}
	return 0;
}

/* cv2.fillPoly of n int32 points, only the rows row_read(k). */
static int fill_rows(struct instmask *m, uint8_t *mask, uint32_t w, uint32_t h, const int32_t *pts, uint32_t n,
		     uint32_t k)
{
	size_t ne;

	if (n == 0 || w == 0 || h == 0 || w > INT_MAX / 2 || h > INT_MAX / 2)
		return -EINVAL;
	if (grow((void **)&m->edges, &m->edges_cap, (size_t)n + 1, sizeof(*m->edges)) < 0)
		return -ENOMEM;
	ne = collect_edges(mask, (int)w, (int)h, pts, n, m->edges, k);
	return fill_edges(m, mask, (int)w, (int)h, ne, k);
}

int instmask_fill(struct instmask *m, uint8_t *mask, uint32_t w, uint32_t h, const int32_t *pts, uint32_t n)
{
	return fill_rows(m, mask, w, h, pts, n, 1);
}

/* np.asarray(float32, dtype=np.int32): truncation; out of range as x86's
 * conversion gives it (INT32_MIN). */
static int32_t to_int32(float v)
{
	return v > -2147483648.0f && v < 2147483648.0f ? (int32_t)v : INT32_MIN;
}

/* xy[n][2] truncated into m->ipts. -ENOMEM. */
static int to_ipts(struct instmask *m, const float *xy, uint32_t n)
{
	if (grow((void **)&m->ipts, &m->ipts_cap, (size_t)n * 2, sizeof(*m->ipts)) < 0)
		return -ENOMEM;
	for (size_t k = 0; k < (size_t)n * 2; k++)
		m->ipts[k] = to_int32(xy[k]);
	return 0;
}

int instmask_fill_f32(struct instmask *m, uint8_t *mask, uint32_t w, uint32_t h, const float *xy, uint32_t n)
{
	int r;

	if (n == 0)
		return -EINVAL;
	r = to_ipts(m, xy, n);
	return r < 0 ? r : instmask_fill(m, mask, w, h, m->ipts, n);
}

/* ---- polygons2masks_overlap ---- */

/* cv2.resize(mask, (w / k, h / k)) INTER_LINEAR of a 0/1 mask, k a power of
 * two dividing both: the pixel k/2 - 1/2 into each block (odd k: 1, its
 * own pixel), else the 2 x 2 pixels around it weighed a half each, rounded
 * as cv2's fixed point does ((sum + 2) >> 2; k 2 is INTER_AREA's same sum).
 * Only the cells rows s0 .. s1, columns c0 .. c1 of `r`, into out[rows][columns]. */
static uint64_t downsample(const uint8_t *full, uint32_t w, uint32_t k, const struct rows *r, uint8_t *out)
{
	const uint32_t cw = r->c1 - r->c0 + 1;
	uint64_t area = 0;

	for (uint32_t y = r->s0; y <= r->s1; y++) {
		uint8_t *o = out + (size_t)(y - r->s0) * cw;
		unsigned row = 0;

		if (k == 1) {
			const uint8_t *a = full + (size_t)y * w + r->c0;

			for (uint32_t x = 0; x < cw; x++) {
				o[x] = a[x];
				row += a[x];
			}
		} else {
			const uint8_t *a = full + (size_t)(k * y + k / 2 - 1) * w + (size_t)k * r->c0 + (k / 2 - 1),
				      *b = a + w;

			for (uint32_t x = 0; x < cw; x++) {
				unsigned sum = a[k * x] + a[k * x + 1] + b[k * x] + b[k * x + 1];

				o[x] = (uint8_t)((sum + 2) >> 2);
				row += o[x];
			}
		}
		area += row;
	}
	return area;
}

/*
 * The mask cells polygon i of n points (in m->ipts, to_ipts) can touch:
 * cv2.fillPoly writes only inside its points' bounding box (the outline's
 * pixels lie on its edges, each row's spans between them), and mask cell
 * (s, c) reads full rows k*s + k/2 - 1 and k*s + k/2 and the same columns
 * of c (k 1: pixel (s, c)), so the cells that read a filled pixel lie in
 * rows y0 / k .. y1 / k, columns x0 / k .. x1 / k. None: s0 > s1.
 */
static void mask_rows(const struct instmask *m, uint32_t n, uint32_t w, uint32_t h, uint32_t ratio, struct rows *rows)
{
	int64_t lo = INT64_MAX, hi = INT64_MIN, left = INT64_MAX, right = INT64_MIN;
	uint32_t y0, y1, x0, x1, sh = h / ratio, sw = w / ratio;

	rows->s0 = rows->c0 = 1;
	rows->s1 = rows->c1 = 0;
	for (uint32_t k = 0; k < n; k++) {
		const int64_t x = m->ipts[2 * k], y = m->ipts[2 * k + 1];

		lo = y < lo ? y : lo;
		hi = y > hi ? y : hi;
		left = x < left ? x : left;
		right = x > right ? x : right;
	}
	if (n == 0 || hi < 0 || lo >= (int64_t)h || right < 0 || left >= (int64_t)w)
		return;
	y0 = lo < 0 ? 0 : (uint32_t)lo;
	y1 = hi >= (int64_t)h ? h - 1 : (uint32_t)hi;
	x0 = left < 0 ? 0 : (uint32_t)left;
	x1 = right >= (int64_t)w ? w - 1 : (uint32_t)right;
	rows->s0 = y0 / ratio;
	rows->s1 = y1 / ratio < sh ? y1 / ratio : sh - 1;
	rows->c0 = x0 / ratio;
	rows->c1 = x1 / ratio < sw ? x1 / ratio : sw - 1;
}

/*
 * Polygon i (its points already in m->ipts, its cells from mask_rows)
 * filled at full size, only the rows the downsample reads, and its mask
 * cells into out[s1 - s0 + 1][c1 - c0 + 1]: its area. Only the full-size
 * pixels it may have written are cleared after: a polygon costs its
 * bounding box, not the image.
 */
static int raster(struct instmask *m, uint32_t n, uint32_t w, uint32_t h, uint32_t ratio, const struct rows *rows,
		  uint8_t *out, uint64_t *area)
{
	uint32_t y0 = rows->s0 * ratio, y1 = rows->s1 * ratio + ratio - 1;
	uint32_t x0 = rows->c0 * ratio, x1 = rows->c1 * ratio + ratio - 1;
	int r;

	*area = 0;
	if (rows->s0 > rows->s1)
		return 0;
	if (m->full_zero < (size_t)w * h) {
		memset(m->full, 0, (size_t)w * h);
		m->full_zero = (size_t)w * h;
	}
	r = fill_rows(m, m->full, w, h, m->ipts, n, ratio);
	if (r < 0) {
		m->full_zero = 0; /* not known what it wrote */
		return r;
	}
	*area = downsample(m->full, w, ratio, rows, out);
	/* the pixels it may have written: inside its points' box, on the read rows (the blocks y0 .. y1, x0 .. x1
	 * hold them) */
	x1 = x1 < w ? x1 : w - 1;
	for (uint32_t y = y0; y <= y1 && y < h; y++)
		if (row_read((int)y, ratio))
			memset(m->full + (size_t)y * w + x0, 0, x1 - x0 + 1);
	return 0;
}

static _Thread_local const uint64_t *sort_keys;

static int cmp_order(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;

	if (sort_keys[i] != sort_keys[j])
		return sort_keys[i] < sort_keys[j] ? -1 : 1;
	return i < j ? -1 : i > j;
}

/*
 * Each polygon rastered once: its mask rows kept (up to KEEP_BYTES in all)
 * for the second pass, which paints them in the area order; a polygon
 * whose rows did not fit is rastered again there.
 */
int instmask_overlap(struct instmask *m, const float *xy, const uint32_t *off, uint32_t count, uint32_t w, uint32_t h,
		     uint32_t ratio, uint16_t *mask, uint32_t *order)
{
	size_t small, kept = 0;
	uint32_t sw;
	int r;

	if (ratio == 0 || ratio > INSTMASK_MAX_RATIO || (ratio & (ratio - 1)) || w % ratio || h % ratio || w == 0 ||
	    h == 0 || count > UINT16_MAX || w > INT_MAX / 2 || h > INT_MAX / 2)
		return -EINVAL;
	sw = w / ratio;
	small = (size_t)sw * (h / ratio);
	memset(mask, 0, small * sizeof(*mask));
	if (count == 0)
		return 0;
	if (grow((void **)&m->full, &m->full_cap, (size_t)w * h, 1) < 0 ||
	    grow((void **)&m->small, &m->small_cap, small, 1) < 0 ||
	    grow((void **)&m->area, &m->area_cap, count, sizeof(*m->area)) < 0 ||
	    grow((void **)&m->rows, &m->rows_cap, count, sizeof(*m->rows)) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < count; i++) {
		const uint32_t n = off[i + 1] - off[i];
		struct rows *rw = &m->rows[i];
		uint64_t area = 0;
		uint8_t *out = m->small;

		r = to_ipts(m, xy + (size_t)off[i] * 2, n);
		if (r < 0)
			return r;
		mask_rows(m, n, w, h, ratio, rw);
		rw->at = SIZE_MAX;
		if (rw->s0 <= rw->s1) {
			size_t bytes = (size_t)(rw->s1 - rw->s0 + 1) * (rw->c1 - rw->c0 + 1);

			if (kept + bytes <= KEEP_BYTES && grow((void **)&m->keep, &m->keep_cap, kept + bytes, 1) == 0) {
				rw->at = kept;
				out = m->keep + kept;
				kept += bytes;
			}
			r = raster(m, n, w, h, ratio, rw, out, &area);
			if (r < 0)
				return r;
		}
		m->area[i] = 0 - area; /* np.argsort(-areas) of uint64 areas */
		order[i] = i;
	}
	sort_keys = m->area;
	qsort(order, count, sizeof(*order), cmp_order);
	sort_keys = NULL;
	/* np.maximum(masks, ms[i] * (i + 1)) in that order: the last covering wins */
	for (uint32_t rank = 0; rank < count; rank++) {
		const uint32_t i = order[rank], n = off[i + 1] - off[i];
		const struct rows *rw = &m->rows[i];
		const uint16_t v = (uint16_t)(rank + 1);
		const uint8_t *in;
		uint16_t *o;
		uint32_t cw;
		uint64_t area;

		if (rw->s0 > rw->s1)
			continue;
		if (rw->at == SIZE_MAX) {
			r = to_ipts(m, xy + (size_t)off[i] * 2, n);
			if (r < 0)
				return r;
			r = raster(m, n, w, h, ratio, rw, m->small, &area);
			if (r < 0)
				return r;
			in = m->small;
		} else {
			in = m->keep + rw->at;
		}
		cw = rw->c1 - rw->c0 + 1;
		for (uint32_t y = rw->s0; y <= rw->s1; y++, in += cw) {
			o = mask + (size_t)y * sw + rw->c0;
			for (uint32_t x = 0; x < cw; x++)
				o[x] = in[x] ? v : o[x];
		}
	}
	return 0;
}
