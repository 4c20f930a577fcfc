/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transform_text.h"

struct lex {
	const char *s, *p;
	char *err;
	size_t errlen;
};

static int bad(struct lex *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct lex *l, const char *fmt, ...)
{
	char why[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	snprintf(l->err, l->errlen, "transforms: %s at character %zu", why, (size_t)(l->p - l->s) + 1);
	return -EINVAL;
}

static void skip(struct lex *l)
{
	while (isspace((unsigned char)*l->p))
		l->p++;
}

/* A word [A-Za-z_][A-Za-z0-9_.-]* into a new string. */
static int word(struct lex *l, char **out)
{
	const char *b;
	size_t n;

	skip(l);
	b = l->p;
	if (!isalpha((unsigned char)*l->p) && *l->p != '_')
		return bad(l, "expected a name");
	while (isalnum((unsigned char)*l->p) || *l->p == '_' || *l->p == '.' || *l->p == '-')
		l->p++;
	n = (size_t)(l->p - b);
	if (n > STOKER__TRANSFORM_LIMITS__TRANSFORM_MAX_TEXT)
		return bad(l, "a name longer than %d bytes", STOKER__TRANSFORM_LIMITS__TRANSFORM_MAX_TEXT);
	*out = strndup(b, n);
	return *out ? 0 : -ENOMEM;
}

static int number(struct lex *l, Stoker__TransformParam *q)
{
	char *end;
	double v, *grown;

	skip(l);
	v = strtod(l->p, &end);
	if (end == l->p)
		return bad(l, "expected a number");
	if (q->n_numbers == STOKER__TRANSFORM_LIMITS__TRANSFORM_MAX_NUMBERS)
		return bad(l, "more than %d numbers", STOKER__TRANSFORM_LIMITS__TRANSFORM_MAX_NUMBERS);
	grown = realloc(q->numbers, (q->n_numbers + 1) * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	q->numbers = grown;
	q->numbers[q->n_numbers++] = v;
	l->p = end;
	return 0;
}

static int value(struct lex *l, Stoker__TransformParam *q)
{
	char close, *w = NULL;
	int r;

	skip(l);
	if (*l->p == '(' || *l->p == '[') {
		close = *l->p == '(' ? ')' : ']';
		l->p++;
		skip(l);
		while (*l->p != close) {
			r = number(l, q);
			if (r < 0)
				return r;
			skip(l);
			if (*l->p == ',')
				l->p++;
			else if (*l->p != close)
				return bad(l, "expected ',' or '%c'", close);
			skip(l);
		}
		l->p++;
		return 0;
	}
	if (*l->p == '"' || *l->p == '\'') {
		const char *b = ++l->p, quote = l->p[-1];

		while (*l->p && *l->p != quote)
			l->p++;
		if (!*l->p)
			return bad(l, "unterminated text");
		if ((size_t)(l->p - b) > STOKER__TRANSFORM_LIMITS__TRANSFORM_MAX_TEXT)
			return bad(l, "a text longer than %d bytes", STOKER__TRANSFORM_LIMITS__TRANSFORM_MAX_TEXT);
		q->text = strndup(b, (size_t)(l->p - b));
		l->p++;
		return q->text ? 0 : -ENOMEM;
	}
	if (isalpha((unsigned char)*l->p) || *l->p == '_') {
		r = word(l, &w);
		if (r < 0)
			return r;
		if (!strcmp(w, "None")) {
			free(w);
			return 0;
		}
		if (!strcmp(w, "True") || !strcmp(w, "False"))
			w[0] = (char)tolower((unsigned char)w[0]);
		q->text = w;
		return 0;
	}
	return number(l, q);
}

static void op_free(Stoker__TransformOp *op)
{
	if (!op)
		return;
	for (size_t i = 0; i < op->n_params; i++) {
		free(op->params[i]->key);
		free(op->params[i]->numbers);
		free(op->params[i]->text);
		free(op->params[i]);
	}
	free(op->params);
	free(op->name);
	free(op);
}

void transform_text_free(Stoker__TransformOp **ops, size_t n)
{
	for (size_t i = 0; ops && i < n; i++)
		op_free(ops[i]);
	free(ops);
}

static int op(struct lex *l, Stoker__TransformOp **out)
{
	Stoker__TransformOp *o = calloc(1, sizeof(*o));
	int r;

	if (!o)
		return -ENOMEM;
	stoker__transform_op__init(o);
	r = word(l, &o->name);
	if (r < 0)
		goto fail;
	skip(l);
	if (*l->p != '(')
		goto done;
	l->p++;
	skip(l);
	while (*l->p != ')') {
		Stoker__TransformParam *q, **grown;

		if (o->n_params == STOKER__TRANSFORM_LIMITS__TRANSFORM_MAX_PARAMS) {
			r = bad(l, "more than %d parameters", STOKER__TRANSFORM_LIMITS__TRANSFORM_MAX_PARAMS);
			goto fail;
		}
		q = calloc(1, sizeof(*q));
		grown = q ? realloc(o->params, (o->n_params + 1) * sizeof(*grown)) : NULL;
		if (!grown) {
			free(q);
			r = -ENOMEM;
			goto fail;
		}
		stoker__transform_param__init(q);
		o->params = grown;
		o->params[o->n_params++] = q;
		r = word(l, &q->key);
		if (r < 0)
			goto fail;
		skip(l);
		if (*l->p != '=') {
			r = bad(l, "expected '=' after %s", q->key);
			goto fail;
		}
		l->p++;
		r = value(l, q);
		if (r < 0)
			goto fail;
		skip(l);
		if (*l->p == ',')
			l->p++;
		else if (*l->p != ')') {
			r = bad(l, "expected ',' or ')'");
			goto fail;
		}
		skip(l);
	}
	l->p++;
done:
	*out = o;
	return 0;
fail:
	op_free(o);
	return r;
}

int transform_text_parse(const char *text, Stoker__TransformOp ***ops, size_t *n, char *err, size_t errlen)
{
	struct lex l = {.s = text, .p = text, .err = err, .errlen = errlen};
	Stoker__TransformOp **list = NULL;
	size_t count = 0;
	int r = 0;

	if (!text || !ops || !n)
		return -EINVAL;
	for (;;) {
		Stoker__TransformOp **grown;

		skip(&l);
		if (!*l.p)
			break;
		if (count == STOKER__TRANSFORM_LIMITS__TRANSFORM_MAX_OPS) {
			r = bad(&l, "more than %d transforms", STOKER__TRANSFORM_LIMITS__TRANSFORM_MAX_OPS);
			break;
		}
		grown = realloc(list, (count + 1) * sizeof(*grown));
		if (!grown) {
			r = -ENOMEM;
			break;
		}
		list = grown;
		r = op(&l, &list[count]);
		if (r < 0)
			break;
		count++;
		skip(&l);
		if (*l.p == ';')
			l.p++;
		else if (*l.p) {
			r = bad(&l, "expected ';' between transforms");
			break;
		}
	}
	if (r == 0 && count == 0)
		r = bad(&l, "no transform");
	if (r < 0) {
		if (r == -ENOMEM)
			snprintf(err, errlen, "transforms: out of memory");
		transform_text_free(list, count);
		return r;
	}
	*ops = list;
	*n = count;
	return 0;
}
