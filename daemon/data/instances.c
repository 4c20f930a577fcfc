/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "grow.h"
#include "instances.h"

struct tok {
	uint32_t off, len;
};

struct toks {
	struct tok *v;
	size_t n, cap;
};

/* Rows: the first token of each, and how many it has. */
struct row {
	uint32_t first, count;
};

struct rows {
	struct row *v;
	size_t n, cap;
};

/* Room for one more after n: doubling (grow.h). */
static bool push(void *p, size_t *cap, size_t n, size_t elem)
{
	return n < *cap ? false : grow((void **)p, cap, *cap ? 2 * *cap : 64, elem) < 0;
}

static void say(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
}

/* Python's str.splitlines() breaks (ASCII), and str.split()'s other spaces. */
static bool line_break(unsigned char c)
{
	return c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e;
}

static bool field_space(unsigned char c)
{
	return c == ' ' || c == '\t' || c == 0x1f;
}

static bool digit(char c)
{
	return c >= '0' && c <= '9';
}

/* digit ("_"? digit)*, copied without the underscores; the end, or NULL. */
static const char *digit_part(const char *p, const char *end, char **o)
{
	if (p >= end || !digit(*p))
		return NULL;
	*(*o)++ = *p++;
	while (p < end) {
		if (digit(*p)) {
			*(*o)++ = *p++;
		} else if (*p == '_' && p + 1 < end && digit(p[1])) {
			p++;
		} else {
			break;
		}
	}
	return p;
}

/* Python's float() of an ASCII token, then numpy's cast to float32. */
static bool parse_float(const char *s, size_t len, float *out)
{
	char buf[256], *o = buf;
	const char *p = s, *end = s + len;

	if (len == 0 || len >= sizeof(buf))
		return false; /* a number of 256 characters or more: refused */
	if (*p == '+' || *p == '-')
		*o++ = *p++;
	if (p < end && !digit(*p) && *p != '.') {
		size_t n = (size_t)(end - p);

		if ((n == 3 && !strncasecmp(p, "inf", 3)) || (n == 8 && !strncasecmp(p, "infinity", 8))) {
			*out = s[0] == '-' ? -INFINITY : INFINITY;
			return true;
		}
		if (n == 3 && !strncasecmp(p, "nan", 3)) {
			*out = NAN;
			return true;
		}
		return false;
	}
	if (p < end && digit(*p)) {
		p = digit_part(p, end, &o);
		if (p < end && *p == '.') {
			*o++ = *p++;
			if (p < end && digit(*p))
				p = digit_part(p, end, &o);
		}
	} else if (p < end && *p == '.') {
		*o++ = *p++;
		p = digit_part(p, end, &o);
		if (!p)
			return false;
	} else {
		return false;
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		*o++ = *p++;
		if (p < end && (*p == '+' || *p == '-'))
			*o++ = *p++;
		p = digit_part(p, end, &o);
		if (!p)
			return false;
	}
	if (p != end)
		return false;
	*o = '\0';
	*out = (float)strtod(buf, NULL);
	return true;
}

void instances_clear(struct instances *in)
{
	if (!in)
		return;
	free(in->cls);
	free(in->box);
	free(in->seg_off);
	free(in->seg);
	free(in->kpt);
	memset(in, 0, sizeof(*in));
}

/* Sorting for np.unique's order: rows of `w` floats, or byte keys. */
struct sort_ctx {
	const float *lb;
	uint32_t w;
	const uint8_t *bytes;
	const uint32_t *boff; /* [n + 1] */
};

static _Thread_local const struct sort_ctx *sort_by;

static int cmp_rows(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	const float *x = sort_by->lb + (size_t)i * sort_by->w, *y = sort_by->lb + (size_t)j * sort_by->w;

	for (uint32_t k = 0; k < sort_by->w; k++)
		if (x[k] != y[k])
			return x[k] < y[k] ? -1 : 1;
	return i < j ? -1 : i > j; /* stable: the first occurrence first */
}

static int cmp_keys(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	uint32_t li = sort_by->boff[i + 1] - sort_by->boff[i], lj = sort_by->boff[j + 1] - sort_by->boff[j];
	int c = memcmp(sort_by->bytes + sort_by->boff[i], sort_by->bytes + sort_by->boff[j], li < lj ? li : lj);

	if (c)
		return c;
	if (li != lj)
		return li < lj ? -1 : 1;
	return i < j ? -1 : i > j;
}

/* np.unique's return_index: the first occurrence of each distinct row, in
 * sorted order, into keep; their count. */
static uint32_t unique_rows(uint32_t n, const struct sort_ctx *ctx, bool by_bytes, uint32_t *idx, uint32_t *keep)
{
	uint32_t m = 0;

	for (uint32_t i = 0; i < n; i++)
		idx[i] = i;
	sort_by = ctx;
	qsort(idx, n, sizeof(*idx), by_bytes ? cmp_keys : cmp_rows);
	for (uint32_t i = 0; i < n; i++) {
		if (i > 0) {
			uint32_t a = idx[i - 1], b = idx[i];
			bool same;

			if (by_bytes) {
				uint32_t la = ctx->boff[a + 1] - ctx->boff[a], lb = ctx->boff[b + 1] - ctx->boff[b];

				same = la == lb && !memcmp(ctx->bytes + ctx->boff[a], ctx->bytes + ctx->boff[b], la);
			} else {
				same = true;
				for (uint32_t k = 0; k < ctx->w && same; k++)
					same = ctx->lb[(size_t)a * ctx->w + k] == ctx->lb[(size_t)b * ctx->w + k];
			}
			if (same)
				continue;
		}
		keep[m++] = idx[i];
	}
	sort_by = NULL;
	return m;
}

/* NaN-propagating min and max, as numpy's. */
static void span(float v, float *lo, float *hi, bool *nan)
{
	if (isnan(v))
		*nan = true;
	*lo = fminf(*lo, v);
	*hi = fmaxf(*hi, v);
}

int instances_parse(const char *text, size_t len, const struct instances_spec *spec, struct instances *out, char *why,
		    size_t whylen)
{
	struct toks t = {0};
	struct rows r = {0};
	struct instances in = {0};
	float *lb = NULL, *pts = NULL;
	uint32_t *pts_off = NULL, *idx = NULL, *keep = NULL, *boff = NULL;
	uint8_t *bytes = NULL;
	uint32_t w, n, kw = spec->nkpt * spec->ndim;
	bool segment = false;
	size_t npts = 0;
	int ret = -EINVAL;

	why[0] = '\0';
	if ((spec->keypoint || spec->nkpt) &&
	    (spec->nkpt == 0 || spec->nkpt > INSTANCES_MAX_KPT || spec->ndim < 2 || spec->ndim > 3)) {
		say(why, whylen, "kpt_shape [%u, %u] is not [1..%u, 2 or 3]", spec->nkpt, spec->ndim,
		    INSTANCES_MAX_KPT);
		return -EINVAL;
	}
	if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) {
		text += 3;
		len -= 3;
	}
	if (len > UINT32_MAX / 2) {
		say(why, whylen, "label text too large");
		return -EINVAL;
	}
	/* Tokens and rows: blank lines skipped. */
	for (size_t i = 0; i < len;) {
		struct row row = {(uint32_t)t.n, 0};

		while (i < len && !line_break((unsigned char)text[i])) {
			size_t s;

			if (field_space((unsigned char)text[i])) {
				i++;
				continue;
			}
			s = i;
			while (i < len && !line_break((unsigned char)text[i]) && !field_space((unsigned char)text[i]))
				i++;
			if (push(&t.v, &t.cap, t.n, sizeof(*t.v)))
				goto nomem;
			t.v[t.n++] = (struct tok){(uint32_t)s, (uint32_t)(i - s)};
			row.count++;
		}
		while (i < len && line_break((unsigned char)text[i]))
			i++;
		if (row.count) {
			if (push(&r.v, &r.cap, r.n, sizeof(*r.v)))
				goto nomem;
			r.v[r.n++] = row;
		}
	}
	n = (uint32_t)r.n;
	if (n == 0) {
		ret = 0;
		goto done;
	}
	for (uint32_t i = 0; i < n; i++) {
		/* pose labels for a box task: the box kept, the keypoints not read */
		if (!spec->keypoint && spec->nkpt && r.v[i].count == 5 + kw)
			r.v[i].count = 5;
		if (!spec->keypoint && r.v[i].count > 6)
			segment = true;
	}
	w = spec->keypoint ? 5 + kw : 5;
	lb = malloc((size_t)n * w * sizeof(*lb));
	if (!lb)
		goto nomem;
	if (segment) {
		pts_off = malloc(((size_t)n + 1) * sizeof(*pts_off));
		if (!pts_off)
			goto nomem;
		for (uint32_t i = 0; i < n; i++) {
			if (r.v[i].count == 5) {
				say(why, whylen, "labels mix segment and detection rows");
				goto done;
			}
			if (r.v[i].count % 2 == 0 || r.v[i].count < 3) {
				say(why, whylen, "line %u: a segment of %u values is not x y pairs", i + 1,
				    r.v[i].count - 1);
				goto done;
			}
			pts_off[i] = (uint32_t)npts;
			npts += (r.v[i].count - 1) / 2;
		}
		pts_off[n] = (uint32_t)npts;
		pts = malloc(npts * 2 * sizeof(*pts));
		if (!pts)
			goto nomem;
	} else {
		for (uint32_t i = 0; i < n; i++)
			if (r.v[i].count != r.v[0].count) {
				say(why, whylen, "rows of %u and %u values", r.v[0].count, r.v[i].count);
				goto done;
			}
		if (r.v[0].count != w) {
			say(why, whylen, "labels require %u columns, %u columns detected", w, r.v[0].count);
			goto done;
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct tok *tk = t.v + r.v[i].first;
		float *row = lb + (size_t)i * w;
		uint32_t count = segment ? r.v[i].count : w;

		for (uint32_t k = 0; k < count; k++) {
			float v;

			if (!parse_float(text + tk[k].off, tk[k].len, &v)) {
				say(why, whylen, "line %u: '%.*s' is not a number", i + 1,
				    (int)(tk[k].len > 32 ? 32 : tk[k].len), text + tk[k].off);
				goto done;
			}
			if (!segment)
				row[k] = v;
			else if (k == 0)
				row[0] = v;
			else
				pts[(size_t)pts_off[i] * 2 + k - 1] = v;
		}
		if (segment) {
			/* segments2boxes: the points' min and max, then xyxy2xywh in float32 */
			float x0 = INFINITY, y0 = INFINITY, x1 = -INFINITY, y1 = -INFINITY;
			bool nan = false;

			for (uint32_t p = pts_off[i]; p < pts_off[i + 1]; p++) {
				span(pts[2 * p], &x0, &x1, &nan);
				span(pts[2 * p + 1], &y0, &y1, &nan);
			}
			if (nan)
				x0 = y0 = x1 = y1 = NAN;
			row[1] = (x0 + x1) / 2;
			row[2] = (y0 + y1) / 2;
			row[3] = x1 - x0;
			row[4] = y1 - y0;
		}
	}
	/* verify_image_label's assertions */
	{
		float pmin = INFINITY, pmax = -INFINITY, lmin = INFINITY, lmax = -INFINITY;
		float whmin = INFINITY, cmax = -INFINITY;
		bool nan = false, pnan = false;

		for (uint32_t i = 0; i < n; i++) {
			const float *row = lb + (size_t)i * w;

			if (spec->keypoint) {
				for (uint32_t j = 0; j < spec->nkpt; j++) {
					span(row[5 + j * spec->ndim], &pmin, &pmax, &pnan);
					span(row[5 + j * spec->ndim + 1], &pmin, &pmax, &pnan);
				}
			} else {
				for (uint32_t k = 1; k < 5; k++)
					span(row[k], &pmin, &pmax, &pnan);
			}
			for (uint32_t k = 0; k < w; k++)
				span(row[k], &lmin, &lmax, &nan);
			whmin = fminf(whmin, fminf(row[3], row[4]));
			cmax = fmaxf(cmax, row[0]);
		}
		if (pnan || !(pmax <= 1.01f)) {
			say(why, whylen, "non-normalized or out of bounds coordinates (%g)", (double)pmax);
			goto done;
		}
		if (nan || !(lmin >= 0 || (lmin >= -0.01f && whmin >= 0))) {
			say(why, whylen, "negative label values (%g)", (double)lmin);
			goto done;
		}
		for (uint32_t i = 0; i < n; i++) {
			float c = lb[(size_t)i * w];

			if (!isfinite(c) || c != floorf(c)) {
				say(why, whylen, "non-integer class label %g", (double)c);
				goto done;
			}
		}
		if (!((spec->single_cls ? 0.0f : cmax) < (float)spec->num_classes)) {
			say(why, whylen, "label class %d exceeds the data set's class count %u", (int)cmax,
			    spec->num_classes);
			goto done;
		}
	}
	/* duplicate rows removed, in np.unique's order */
	idx = malloc((size_t)n * sizeof(*idx));
	keep = malloc((size_t)n * sizeof(*keep));
	if (!idx || !keep)
		goto nomem;
	{
		struct sort_ctx ctx = {.lb = lb, .w = w};
		uint32_t m = unique_rows(n, &ctx, false, idx, keep);

		if (m < n && segment) {
			/* distinct polygons may share a class and box: class and points' bytes */
			size_t total = (size_t)n * 4 + npts * 8;

			bytes = malloc(total);
			boff = malloc(((size_t)n + 1) * sizeof(*boff));
			if (!bytes || !boff)
				goto nomem;
			for (uint32_t i = 0, o = 0; i < n; i++) {
				uint32_t np = pts_off[i + 1] - pts_off[i];

				boff[i] = o;
				memcpy(bytes + o, &lb[(size_t)i * w], 4);
				memcpy(bytes + o + 4, pts + (size_t)pts_off[i] * 2, (size_t)np * 8);
				o += 4 + np * 8;
				boff[i + 1] = o;
			}
			ctx = (struct sort_ctx){.bytes = bytes, .boff = boff};
			m = unique_rows(n, &ctx, true, idx, keep);
		}
		if (m == n)
			for (uint32_t i = 0; i < n; i++)
				keep[i] = i;
		in.n = m;
	}
	in.cls = malloc((size_t)in.n * sizeof(*in.cls));
	in.box = malloc((size_t)in.n * 4 * sizeof(*in.box));
	if (!in.cls || !in.box)
		goto nomem;
	if (segment) {
		size_t o = 0;

		in.seg_off = malloc(((size_t)in.n + 1) * sizeof(*in.seg_off));
		in.seg = malloc((npts ? npts : 1) * 2 * sizeof(*in.seg));
		if (!in.seg_off || !in.seg)
			goto nomem;
		for (uint32_t i = 0; i < in.n; i++) {
			uint32_t s = pts_off[keep[i]], np = pts_off[keep[i] + 1] - s;

			in.seg_off[i] = (uint32_t)o;
			memcpy(in.seg + o * 2, pts + (size_t)s * 2, (size_t)np * 2 * sizeof(*pts));
			o += np;
		}
		in.seg_off[in.n] = (uint32_t)o;
	}
	if (spec->keypoint) {
		in.kpt = malloc(((size_t)in.n * spec->nkpt * 3 + 1) * sizeof(*in.kpt));
		if (!in.kpt)
			goto nomem;
	}
	for (uint32_t i = 0; i < in.n; i++) {
		const float *row = lb + (size_t)keep[i] * w;

		in.cls[i] = row[0];
		memcpy(in.box + (size_t)i * 4, row + 1, 4 * sizeof(float));
		for (uint32_t j = 0; spec->keypoint && j < spec->nkpt; j++) {
			const float *k = row + 5 + j * spec->ndim;
			float *d = in.kpt + ((size_t)i * spec->nkpt + j) * 3;

			d[0] = k[0];
			d[1] = k[1];
			d[2] = spec->ndim == 3 ? k[2] : (k[0] < 0 || k[1] < 0) ? 0.0f : 1.0f;
		}
	}
	ret = 0;
	goto done;
nomem:
	ret = -ENOMEM;
	say(why, whylen, "out of memory");
done:
	if (ret == 0) {
		*out = in;
		memset(&in, 0, sizeof(in));
	}
	instances_clear(&in);
	free(t.v);
	free(r.v);
	free(lb);
	free(pts);
	free(pts_off);
	free(idx);
	free(keep);
	free(bytes);
	free(boff);
	return ret;
}
