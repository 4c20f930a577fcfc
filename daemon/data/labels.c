/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errtext.h"
#include "grow.h"
#include "labels.h"
#include "text.h"

/* Values this far outside 0..1 are rounding, not errors: clamped. */
#define LABELS_TOLERANCE 1e-3f
/* A data.yaml larger than this is not one. */
#define YAML_MAX_BYTES (1u << 20)

static void report_line(label_report_fn report, void *ctx, const char *path, unsigned long line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void report_line(label_report_fn report, void *ctx, const char *path, unsigned long line, const char *fmt, ...)
{
	char why[160];
	va_list ap;

	if (!report)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	report(ctx, path, line, why);
}

static bool unit_value(float *v)
{
	if (!(*v >= -LABELS_TOLERANCE && *v <= 1.0f + LABELS_TOLERANCE))
		return false;
	*v = fminf(fmaxf(*v, 0.0f), 1.0f);
	return true;
}

/* One line's fields, at most `max`; the count, or max + 1 if there are more. */
static size_t split_fields(char *line, char **fields, size_t max)
{
	size_t n = 0;

	for (char *p = line;;) {
		while (*p == ' ' || *p == '\t' || *p == '\r')
			p++;
		if (!*p)
			return n;
		if (n == max)
			return max + 1;
		fields[n++] = p;
		while (*p && *p != ' ' && *p != '\t' && *p != '\r')
			p++;
		if (*p)
			*p++ = '\0';
	}
}

/* A segment has at most this many points; more is not a label line. */
#define LABELS_MAX_FIELDS (1 + 2 * 4096)

static int parse_line(char *line, uint32_t num_classes, struct detect_box *box, char *why, size_t whylen)
{
	static __thread char *fields[LABELS_MAX_FIELDS + 1];
	float vals[5], cls = -1, x0 = 1, y0 = 1, x1 = 0, y1 = 0;
	size_t n = split_fields(line, fields, LABELS_MAX_FIELDS);
	uint32_t limit = num_classes ? num_classes : LABELS_MAX_CLASSES;

	if (n != 5 && !(n >= 7 && n % 2 == 1 && n <= LABELS_MAX_FIELDS)) {
		snprintf(why, whylen, "%zu%s values: expected 'class cx cy w h' or a segment 'class x1 y1 ... xn yn'",
			 n > LABELS_MAX_FIELDS ? (size_t)LABELS_MAX_FIELDS : n, n > LABELS_MAX_FIELDS ? "+" : "");
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		char *end;
		float v;

		errno = 0;
		v = strtof(fields[i], &end);
		if (end == fields[i] || *end || errno == ERANGE || !isfinite(v)) {
			snprintf(why, whylen, "value %zu '%.32s' is not a number", i + 1, fields[i]);
			return -EINVAL;
		}
		if (i == 0) {
			cls = v;
			continue;
		}
		if (!unit_value(&v)) {
			snprintf(why, whylen, "value %zu (%g) is outside 0..1 (coordinates are normalised)", i + 1, v);
			return -EINVAL;
		}
		if (n == 5) {
			vals[i] = v;
		} else if (i % 2 == 1) {
			x0 = fminf(x0, v);
			x1 = fmaxf(x1, v);
		} else {
			y0 = fminf(y0, v);
			y1 = fmaxf(y1, v);
		}
	}
	if (!(cls >= 0) || cls != floorf(cls) || cls >= (float)limit) {
		snprintf(why, whylen, "class %g is not an integer in 0..%u%s", cls, limit - 1,
			 num_classes ? " (the yaml's names)" : "");
		return -EINVAL;
	}
	if (n == 5) {
		vals[0] = cls;
	} else {
		vals[0] = cls;
		vals[1] = (x0 + x1) / 2;
		vals[2] = (y0 + y1) / 2;
		vals[3] = x1 - x0;
		vals[4] = y1 - y0;
	}
	if (!(vals[3] > 0) || !(vals[4] > 0)) {
		snprintf(why, whylen, "the box has no %s", vals[3] > 0 ? "height" : "width");
		return -EINVAL;
	}
	*box = (struct detect_box){.cls = vals[0], .cx = vals[1], .cy = vals[2], .w = vals[3], .h = vals[4]};
	return 0;
}

int labels_parse(const char *text, size_t len, uint32_t num_classes, const char *path, label_report_fn report,
		 void *ctx, struct box_vec *out)
{
	char *copy = malloc(len + 1), *line, *next;
	unsigned long lineno = 0;
	int errors = 0, r = 0;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, text, len);
	copy[len] = '\0';
	for (line = copy; line && *line; line = next) {
		struct detect_box box;
		char why[160];

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		lineno++;
		if (strlen(line) != strspn(line, " \t\r")) {
			if (parse_line(line, num_classes, &box, why, sizeof(why)) < 0) {
				report_line(report, ctx, path, lineno, "%s", why);
				errors++;
				continue;
			}
			if (out->n == out->cap)
				r = grow((void **)&out->v, &out->cap, out->cap ? 2 * out->cap : 16, sizeof(*out->v));
			if (r < 0)
				goto out;
			out->v[out->n++] = box;
		}
	}
	/* A NUL inside the file ends the text early: say so. */
	if (memchr(text, '\0', len)) {
		report_line(report, ctx, path, lineno, "the file holds a NUL byte; the rest is ignored");
		errors++;
	}
out:
	free(copy);
	return r < 0 ? r : errors;
}

int labels_path(const char *image_path, char *out, size_t outlen)
{
	const char *images = NULL, *slash, *dot;
	size_t stem;
	int n;

	for (const char *p = strstr(image_path, "/images/"); p; p = strstr(p + 1, "/images/"))
		images = p;
	slash = strrchr(image_path, '/');
	dot = strrchr(image_path, '.');
	stem = dot && (!slash || dot > slash) ? (size_t)(dot - image_path) : strlen(image_path);
	if (images)
		n = snprintf(out, outlen, "%.*s/labels/%.*s.txt", (int)(images - image_path), image_path,
			     (int)(stem - (size_t)(images + 8 - image_path)), images + 8);
	else
		n = snprintf(out, outlen, "%.*s.txt", (int)stem, image_path);
	return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

/* ---- data.yaml ---- */

/* Cut a comment: '#' at the start or after a blank, outside quotes. */
static void strip_comment(char *s)
{
	char quote = 0;

	for (char *p = s; *p; p++) {
		if (quote) {
			if (*p == quote)
				quote = 0;
		} else if (*p == '\'' || *p == '"') {
			quote = *p;
		} else if (*p == '#' && (p == s || p[-1] == ' ' || p[-1] == '\t')) {
			*p = '\0';
			return;
		}
	}
}

/* A scalar, unquoted. */
static char *unquote(char *s)
{
	size_t n;

	s = text_trim(s);
	n = strlen(s);
	if (n >= 2 && (s[0] == '\'' || s[0] == '"') && s[n - 1] == s[0]) {
		s[n - 1] = '\0';
		s++;
	}
	return s;
}

static int names_set(struct data_yaml *y, long index, const char *name)
{
	if (index < 0 || index >= (long)LABELS_MAX_CLASSES)
		return -EINVAL;
	if ((uint32_t)index >= y->nnames) {
		char **v = realloc(y->names, ((size_t)index + 1) * sizeof(*v));

		if (!v)
			return -ENOMEM;
		memset(v + y->nnames, 0, ((size_t)index + 1 - y->nnames) * sizeof(*v));
		y->names = v;
		y->nnames = (uint32_t)index + 1;
	}
	free(y->names[index]);
	y->names[index] = strdup(name);
	return y->names[index] ? 0 : -ENOMEM;
}

/* One entry of `names`: "0: person" (a mapping) or "person" (a list). */
static int names_entry(struct data_yaml *y, char *item, bool mapping, long *next_index)
{
	long index = *next_index;

	if (mapping) {
		char *colon = strchr(item, ':'), *end;

		if (!colon)
			return -EINVAL;
		*colon = '\0';
		errno = 0;
		index = strtol(text_trim(item), &end, 10);
		if (*text_trim(item) == '\0' || *end || errno)
			return -EINVAL;
		item = colon + 1;
	}
	if (index < 0 || index >= (long)LABELS_MAX_CLASSES)
		return -EINVAL;
	*next_index = index + 1;
	return names_set(y, index, unquote(item));
}

/* An inline [a, b] or {0: a, 1: b}. */
static int names_inline(struct data_yaml *y, char *v)
{
	bool mapping = v[0] == '{';
	size_t n = strlen(v);
	long next = 0;
	char *item, *save = NULL;
	int r;

	if (n < 2 || v[n - 1] != (mapping ? '}' : ']'))
		return -EINVAL;
	v[n - 1] = '\0';
	for (item = strtok_r(v + 1, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		if (*text_trim(item) == '\0')
			continue;
		r = names_entry(y, item, mapping, &next);
		if (r < 0)
			return r;
	}
	return 0;
}

/* A root or split that names its own place: a path from '/', or a URL. */
static bool yaml_absolute(const char *s)
{
	return s[0] == '/' || strstr(s, "://");
}

int data_yaml_parse(const char *data, size_t len, const char *path, const char *split, struct data_yaml *out,
		    char *errbuf, size_t errlen)
{
	struct data_yaml y = {0};
	char *text = NULL, *line, *next, *root = NULL, *split_value = NULL, dir[PATH_MAX], full[PATH_MAX * 2];
	char keys[128] = "";
	bool in_names = false;
	unsigned long lineno = 0;
	long next_index = 0;
	int r;

	if (len > YAML_MAX_BYTES || memchr(data, '\0', len)) {
		set_err(errbuf, errlen, "%s: not a data yaml (over %u bytes, or binary)", path, YAML_MAX_BYTES);
		return -EINVAL;
	}
	text = malloc(len + 1);
	if (!text) {
		r = -ENOMEM;
		goto out;
	}
	memcpy(text, data, len);
	text[len] = '\0';
	for (line = text; line && *line; line = next) {
		bool indented = line[0] == ' ' || line[0] == '\t' || line[0] == '-';
		char *body, *colon, *key, *value;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		lineno++;
		strip_comment(line);
		body = text_trim(line);
		if (!*body || strcmp(body, "---") == 0)
			continue;
		if (indented) {
			if (!in_names)
				continue; /* a block under a key we do not use */
			if (body[0] == '-') {
				r = names_entry(&y, body + 1, false, &next_index);
			} else {
				r = names_entry(&y, body, true, &next_index);
			}
			if (r < 0) {
				set_err(errbuf, errlen, "%s:%lu: a names entry this reader does not understand", path,
					lineno);
				r = r == -ENOMEM ? r : -EINVAL;
				goto out;
			}
			continue;
		}
		in_names = false;
		colon = strchr(body, ':');
		if (!colon) {
			set_err(errbuf, errlen, "%s:%lu: expected 'key: value'", path, lineno);
			r = -EINVAL;
			goto out;
		}
		*colon = '\0';
		key = text_trim(body);
		value = unquote(colon + 1);
		if (strcmp(key, "names") == 0) {
			if (*value == '\0') {
				in_names = true;
			} else if (names_inline(&y, value) < 0) {
				set_err(errbuf, errlen, "%s:%lu: names: expected a list or a mapping", path, lineno);
				r = -EINVAL;
				goto out;
			}
		} else if (strcmp(key, "path") == 0) {
			root = value;
		} else if (strcmp(key, "train") == 0 || strcmp(key, "val") == 0 || strcmp(key, "test") == 0) {
			size_t used = strlen(keys);

			snprintf(keys + used, sizeof(keys) - used, "%s%s", used ? ", " : "", key);
			if (strcmp(key, split) == 0) {
				if (*value == '\0' || *value == '[') {
					set_err(errbuf, errlen,
						"%s:%lu: %s: a list of paths is not supported (give one "
						"directory or .txt list)",
						path, lineno, key);
					r = -EINVAL;
					goto out;
				}
				split_value = value;
			}
		}
	}
	if (!split_value) {
		set_err(errbuf, errlen, "%s: no '%s' split (it has: %s)", path, split, keys[0] ? keys : "none");
		r = -ENOENT;
		goto out;
	}
	for (uint32_t i = 0; i < y.nnames; i++) {
		if (!y.names[i]) {
			set_err(errbuf, errlen, "%s: names has no entry for class %u", path, i);
			r = -EINVAL;
			goto out;
		}
	}
	/* Relative paths: the root from the yaml's directory, the split from the root. */
	snprintf(dir, sizeof(dir), "%s", path);
	if (strrchr(dir, '/'))
		*strrchr(dir, '/') = '\0';
	else
		snprintf(dir, sizeof(dir), ".");
	if (yaml_absolute(split_value))
		snprintf(full, sizeof(full), "%s", split_value);
	else if (root && yaml_absolute(root))
		snprintf(full, sizeof(full), "%s/%s", root, split_value);
	else if (root && root[0])
		snprintf(full, sizeof(full), "%s/%s/%s", dir, root, split_value);
	else
		snprintf(full, sizeof(full), "%s/%s", dir, split_value);
	y.split_path = strdup(full);
	if (!y.split_path) {
		r = -ENOMEM;
		goto out;
	}
	*out = y;
	memset(&y, 0, sizeof(y));
	r = 0;
out:
	if (r == -ENOMEM)
		set_err(errbuf, errlen, "%s: out of memory", path);
	data_yaml_clear(&y);
	free(text);
	return r;
}

int data_yaml_load(const char *path, const char *split, struct data_yaml *out, char *errbuf, size_t errlen)
{
	char *text = malloc(YAML_MAX_BYTES + 1);
	size_t len;
	FILE *f;
	int r;

	if (!text) {
		set_err(errbuf, errlen, "%s: out of memory", path);
		return -ENOMEM;
	}
	f = fopen(path, "re");
	if (!f) {
		r = -errno;
		set_err(errbuf, errlen, "%s: %s", path, strerror(-r));
		goto out;
	}
	len = fread(text, 1, YAML_MAX_BYTES + 1, f);
	fclose(f);
	r = data_yaml_parse(text, len, path, split, out, errbuf, errlen);
out:
	free(text);
	return r;
}

void data_yaml_clear(struct data_yaml *y)
{
	if (!y)
		return;
	for (uint32_t i = 0; i < y->nnames; i++)
		free(y->names[i]);
	free(y->names);
	free(y->split_path);
	memset(y, 0, sizeof(*y));
}
