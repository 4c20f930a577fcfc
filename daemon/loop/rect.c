/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "rect.h"

struct keyed {
	double ar;
	uint64_t index;
};

/* h / w as numpy computes s[:, 0] / s[:, 1]; unknown sizes square. */
static double aspect(const uint32_t *sizes, uint64_t i)
{
	uint32_t w = sizes[2 * i], h = sizes[2 * i + 1];

	return w && h ? (double)h / w : 1.0;
}

static int by_ratio(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;

	if (x->ar != y->ar)
		return x->ar < y->ar ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

int rect_order(const uint32_t *sizes, uint64_t n, uint64_t **out)
{
	struct keyed *k = malloc((n ? n : 1) * sizeof(*k));
	uint64_t *order = malloc((n ? n : 1) * sizeof(*order));

	if (!k || !order) {
		free(k);
		free(order);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < n; i++)
		k[i] = (struct keyed){aspect(sizes, i), i};
	qsort(k, n, sizeof(*k), by_ratio);
	for (uint64_t i = 0; i < n; i++)
		order[i] = k[i].index;
	free(k);
	*out = order;
	return 0;
}

/* np.ceil(shape * imgsz / stride + pad).astype(int) * stride, one side */
static uint32_t side_of(double shape, uint32_t image_size, uint32_t stride, double pad)
{
	return (uint32_t)ceil(shape * image_size / stride + pad) * stride;
}

void rect_batch_shape(const uint32_t *sizes, const uint64_t *order, uint64_t first, uint64_t last, uint32_t image_size,
		      uint32_t stride, double pad, uint32_t *height, uint32_t *width)
{
	double mini = aspect(sizes, order[first]), maxi = aspect(sizes, order[last]);
	double sh = 1.0, sw = 1.0;

	if (maxi < 1)
		sh = maxi;
	else if (mini > 1)
		sw = 1 / mini;
	*height = side_of(sh, image_size, stride, pad);
	*width = side_of(sw, image_size, stride, pad);
}

bool rect_one_shape(const uint32_t *sizes, const uint64_t *order, uint64_t n, uint32_t batch_size, uint32_t image_size,
		    uint32_t stride, double pad, uint32_t *height, uint32_t *width)
{
	uint32_t h0 = 0, w0 = 0;

	for (uint64_t first = 0; first < n; first += batch_size) {
		uint64_t last = n - first > batch_size ? first + batch_size - 1 : n - 1;
		uint32_t h, w;

		rect_batch_shape(sizes, order, first, last, image_size, stride, pad, &h, &w);
		if (first > 0 && (h != h0 || w != w0))
			return false;
		h0 = h;
		w0 = w;
	}
	*height = h0;
	*width = w0;
	return n > 0;
}

uint64_t rect_max_side(uint32_t image_size, uint32_t stride, double pad)
{
	return (uint64_t)ceil(1.0 * image_size / stride + pad) * stride;
}
