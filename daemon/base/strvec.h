/* SPDX-License-Identifier: MIT */
/* A growing vector of owned strings (directory listings, shard lists). */
#ifndef STOKER_STRVEC_H
#define STOKER_STRVEC_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct strvec {
	char **v;
	size_t n, cap;
};

/* Accepts NULL and a zeroed vector. */
static inline void strvec_free(struct strvec *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* Append a copy of str. 0 or -ENOMEM. */
static inline int strvec_push(struct strvec *s, const char *str)
{
	char *copy;

	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		char **v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	copy = strdup(str);
	if (!copy)
		return -ENOMEM;
	s->v[s->n++] = copy;
	return 0;
}

static inline int strvec_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static inline void strvec_sort(struct strvec *s)
{
	if (s->n > 1) /* an empty vector has no array to hand qsort */
		qsort(s->v, s->n, sizeof(char *), strvec_cmp);
}

#endif
