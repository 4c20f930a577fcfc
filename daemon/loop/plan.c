/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "rng.h"

int plan_validate(const struct plan_spec *s)
{
	if (s->samples == 0 || s->world_size == 0 || s->rank >= s->world_size || s->batch_size == 0)
		return -EINVAL;
	if (s->shard_starts && (s->shards == 0 || s->shard_starts[s->shards] != s->samples))
		return -EINVAL;
	if (s->fixed && (s->shuffle || s->drop_last || s->shard_starts))
		return -EINVAL;
	if (s->repeats > 1 && (s->fixed || s->shard_starts || s->repeats > PLAN_MAX_REPEATS))
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

void plan_fixed_range(const struct plan_spec *s, uint64_t *first, uint64_t *end)
{
	/* ContiguousDistributedSampler._get_rank_indices */
	uint64_t n = s->samples, unit = s->batch_size >= n ? 1 : s->batch_size, w = s->world_size;
	uint64_t batches = (n + unit - 1) / unit, base = batches / w, rem = batches % w;
	uint64_t mine = base + (s->rank < rem), start = s->rank * base + (s->rank < rem ? s->rank : rem);

	*first = start * unit < n ? start * unit : n;
	*end = (start + mine) * unit < n ? (start + mine) * unit : n;
}

static bool repeated(const struct plan_spec *s)
{
	return s->repeats > 1;
}

/* RASampler / RepeatAugSampler: num_samples and num_selected_samples. */
static uint64_t repeat_selected(const struct plan_spec *s)
{
	uint64_t n = s->samples, w = s->world_size, ratio = s->selected_ratio ? s->selected_ratio : w, sel;
	uint64_t num = (n * s->repeats + w - 1) / w;

	/* timm's rule; RASampler's is the first branch always (0 for N < 256) */
	if (s->selected_round && n >= s->selected_round)
		sel = n / s->selected_round * s->selected_round / ratio; /* floor of a non-negative quotient */
	else
		sel = (n + ratio - 1) / ratio;
	/* indices[:num_selected] of num_samples */
	return sel < num ? sel : num;
}

uint32_t plan_copy(const struct plan_spec *s, uint64_t k)
{
	uint64_t span;

	if (!repeated(s))
		return 0;
	span = s->samples * s->repeats;
	return (uint32_t)((s->rank + k * s->world_size) % span % s->repeats);
}

uint64_t plan_samples_per_epoch(const struct plan_spec *s)
{
	uint64_t first, end;

	if (repeated(s))
		return repeat_selected(s);
	if (!s->fixed)
		return plan_total(s) / s->world_size;
	plan_fixed_range(s, &first, &end);
	return end - first;
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

/* v = 0 .. n-1, Fisher-Yates shuffled (when s->shuffle) from the stream
 * keyed by (seed, epoch, index) alone, so every rank computes the same
 * permutation. */
static void permutation(const struct plan_spec *s, uint64_t epoch, uint64_t index, uint64_t *v, uint64_t n)
{
	struct rng r;

	for (uint64_t i = 0; i < n; i++)
		v[i] = i;
	if (!s->shuffle || n < 2)
		return;
	rng_init(&r, s->seed, epoch, index, RNG_PERMUTATION);
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = rng_below(&r, i + 1), t = v[i];
		v[i] = v[j];
		v[j] = t;
	}
}

/* Shard order: this rank's contiguous run of the shard sequence, then
 * the shuffle buffer over it. */
static int shard_order(const struct plan_spec *s, uint64_t epoch, uint64_t mine, uint64_t *result)
{
	uint64_t first = (uint64_t)s->rank * mine, k = 0, pos = 0, held = 0, cap;
	uint64_t *perm = malloc((s->shards ? s->shards : 1) * sizeof(*perm));
	uint64_t *buf = NULL;
	struct rng r;

	if (!perm)
		return -ENOMEM;
	/* Index 1: a stream apart from sample order's (index 0). */
	permutation(s, epoch, 1, perm, s->shards);
	/* Position p of the sequence is sequence[p mod n] (the padding repeats
	 * its start); walk the shards to the rank's first position. */
	for (uint64_t done = 0; k < mine;) {
		for (uint64_t i = 0; i < s->shards && k < mine; i++) {
			uint64_t a = s->shard_starts[perm[i]], b = s->shard_starts[perm[i] + 1];

			for (uint64_t x = a; x < b && k < mine; x++, done++)
				if (done >= first)
					result[k++] = x;
		}
		if (done == 0)
			break; /* no samples at all (plan_validate refuses that) */
	}
	cap = s->shuffle && s->shuffle_buffer > 1 ? s->shuffle_buffer : 0;
	if (cap > mine)
		cap = mine;
	if (cap < 2) {
		free(perm);
		return 0;
	}
	buf = malloc(cap * sizeof(*buf));
	if (!buf) {
		free(perm);
		return -ENOMEM;
	}
	rng_init(&r, s->seed, epoch, 2 + (uint64_t)s->rank, RNG_PERMUTATION);
	/* In place: outputs never overtake inputs (pos <= k). */
	for (k = 0; k < mine; k++) {
		buf[held++] = result[k];
		if (held == cap) {
			uint64_t j = rng_below(&r, held);

			result[pos++] = buf[j];
			buf[j] = buf[--held];
		}
	}
	while (held) {
		uint64_t j = rng_below(&r, held);

		result[pos++] = buf[j];
		buf[j] = buf[--held];
	}
	free(buf);
	free(perm);
	return 0;
}

int plan_epoch_order(const struct plan_spec *s, uint64_t epoch, uint64_t **out)
{
	uint64_t n = s->samples, total = plan_total(s);
	uint64_t mine = repeated(s) ? repeat_selected(s) : total / s->world_size;
	uint64_t *order, *result;

	if (s->fixed) {
		uint64_t first, end;

		plan_fixed_range(s, &first, &end);
		result = malloc((end > first ? end - first : 1) * sizeof(*result));
		if (!result)
			return -ENOMEM;
		memcpy(result, s->fixed + first, (end - first) * sizeof(*result));
		*out = result;
		return 0;
	}

	if (s->shard_starts) {
		int r;

		result = malloc((mine ? mine : 1) * sizeof(*result));
		if (!result)
			return -ENOMEM;
		r = shard_order(s, epoch, mine, result);
		if (r < 0) {
			free(result);
			return r;
		}
		*out = result;
		return 0;
	}
	order = malloc(n * sizeof(*order));
	result = malloc((mine ? mine : 1) * sizeof(*result));
	if (!order || !result) {
		free(order);
		free(result);
		return -ENOMEM;
	}
	permutation(s, epoch, 0, order, n);
	if (repeated(s)) {
		/* position q of the repeated, padded sequence holds
		 * order[(q mod N*repeats) / repeats] */
		uint64_t span = n * s->repeats;

		for (uint64_t k = 0; k < mine; k++)
			result[k] = order[(s->rank + k * s->world_size) % span / s->repeats];
		free(order);
		*out = result;
		return 0;
	}
	for (uint64_t k = 0; k < mine; k++)
		result[k] = order[(s->rank + k * s->world_size) % n];
	free(order);
	*out = result;
	return 0;
}
