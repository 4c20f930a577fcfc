/* SPDX-License-Identifier: MIT */
/* Grow-only buffers: steady state allocates nothing. */
#ifndef STOKER_GROW_H
#define STOKER_GROW_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* Make *p hold at least `want` elements of `elem` bytes (*cap counts
 * elements). 0, or -ENOMEM with *p and *cap unchanged. */
static inline int grow(void **p, size_t *cap, size_t want, size_t elem)
{
	void *n;

	if (want <= *cap)
		return 0;
	if (want > SIZE_MAX / elem)
		return -ENOMEM;
	n = realloc(*p, want * elem);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = want;
	return 0;
}

#endif
