/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "plan.h"
#include "rng.h"

int plan_validate(const struct plan_spec *s)
{
	if (s->samples == 0 || s->world_size == 0 || s->rank >= s->world_size || s->batch_size == 0)
		return -EINVAL;
	if (plan_batches_per_epoch(s) == 0)
		return -EINVAL;
	return 0;
}

static uint64_t plan_total(const struct plan_spec *s)
{
	uint64_t w = s->world_size;

	return s->drop_last ? s->samples / w * w : (s->samples + w - 1) / w * w;
}

uint64_t plan_samples_per_epoch(const struct plan_spec *s)
{
	return plan_total(s) / s->world_size;
}

uint64_t plan_batches_per_epoch(const struct plan_spec *s)
{
	uint64_t n = plan_samples_per_epoch(s);

	return s->drop_last ? n / s->batch_size : (n + s->batch_size - 1) / s->batch_size;
}

uint32_t plan_batch_count(const struct plan_spec *s, uint64_t b)
{
	uint64_t n = plan_samples_per_epoch(s), start = b * s->batch_size;

	if (start >= n)
		return 0;
	return n - start < s->batch_size ? (uint32_t)(n - start) : s->batch_size;
}

int plan_epoch_order(const struct plan_spec *s, uint64_t epoch, uint64_t **out)
{
	uint64_t n = s->samples, total = plan_total(s), mine = total / s->world_size;
	uint64_t *order, *result;

	order = malloc(n * sizeof(*order));
	result = malloc((mine ? mine : 1) * sizeof(*result));
	if (!order || !result) {
		free(order);
		free(result);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < n; i++)
		order[i] = i;
	if (s->shuffle) {
		struct rng r;

		/* Fisher-Yates from a stream keyed by (seed, epoch) alone, so every
		 * rank computes the same permutation. */
		rng_init(&r, s->seed, epoch, 0, RNG_PERMUTATION);
		for (uint64_t i = n - 1; i > 0; i--) {
			uint64_t j = rng_below(&r, i + 1), t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
	}
	for (uint64_t k = 0; k < mine; k++)
		result[k] = order[(s->rank + k * s->world_size) % n];
	free(order);
	*out = result;
	return 0;
}
